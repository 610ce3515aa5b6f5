//! The deduplication table against a plain reference (every admitted id
//! in a set), its image's round trip, and the decoder's refusals: every
//! damaged byte, every truncation, forged counts and bits. Proptest runs
//! from a fixed seed.

use std::collections::BTreeSet;

use cardinal_server::{BatchId, CLIENTS_MAX, ClientId, DEDUP_WINDOW, Dedup, DedupTable, Verdict};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0xdedd_0000_0000_0001),
        ..Config::default()
    }
}

/// The reference: every id ever admitted, and the window rule.
#[derive(Default)]
struct Reference {
    admitted: BTreeSet<u64>,
}

impl Reference {
    fn check(&self, id: u64) -> Verdict {
        let Some(&highest) = self.admitted.last() else {
            return Verdict::New;
        };
        if id <= highest && highest - id >= DEDUP_WINDOW as u64 {
            Verdict::TooOld
        } else if self.admitted.contains(&id) {
            Verdict::Duplicate
        } else {
            Verdict::New
        }
    }

    fn admit(&mut self, id: u64) -> Verdict {
        let verdict = self.check(id);
        if verdict == Verdict::New {
            self.admitted.insert(id);
        }
        verdict
    }
}

/// Ids near where a client is (resends, small gaps, a window or more
/// ahead), as a client's would be, and now and then anywhere.
fn steps() -> impl Strategy<Value = Vec<(u8, u64)>> {
    proptest::collection::vec((0u8..8, 0u64..3 * DEDUP_WINDOW as u64), 1..400)
}

fn next_id(highest: u64, (kind, n): (u8, u64)) -> u64 {
    match kind {
        0..=2 => highest + 1 + n % 3,
        3 | 4 => highest.saturating_sub(n % (DEDUP_WINDOW as u64 + 8)),
        5 => highest + n,
        6 => n,
        _ => highest.saturating_add(n.wrapping_mul(0x9e37_79b9)),
    }
}

fn client(n: usize) -> ClientId {
    ClientId::new(&format!("client-{n}")).expect("valid")
}

proptest! {
    #![proptest_config(config(256))]

    /// Every verdict, and every check after every step, is the
    /// reference's.
    #[test]
    fn dedup_agrees_with_the_reference(start in 0u64..5000, steps in steps()) {
        let mut dedup = Dedup::first(BatchId(start));
        let mut reference = Reference::default();
        reference.admit(start);
        for step in steps {
            let id = next_id(dedup.highest().0, step);
            prop_assert_eq!(dedup.admit(BatchId(id)), reference.admit(id), "id {}", id);
            let highest = dedup.highest().0;
            for probe in [id, id.saturating_sub(1), highest, highest.saturating_sub(DEDUP_WINDOW as u64 - 1),
                          highest.saturating_sub(DEDUP_WINDOW as u64), highest.saturating_add(1)] {
                prop_assert_eq!(dedup.check(BatchId(probe)), reference.check(probe), "probe {}", probe);
            }
        }
    }

    /// `encode -> decode -> encode` gives the same bytes, the same
    /// verdicts for every client, and the same eviction order.
    #[test]
    fn tables_round_trip(steps in proptest::collection::vec((0usize..6, 0u8..8, 0u64..3000), 1..200)) {
        let mut table = DedupTable::new();
        for (who, kind, n) in steps {
            let highest = table.highest(&client(who)).map_or(0, |id| id.0);
            table.admit(&client(who), BatchId(next_id(highest, (kind, n))));
        }
        let mut image = Vec::new();
        table.encode(&mut image);
        let back = DedupTable::decode(&image).expect("an image we wrote");
        let mut again = Vec::new();
        back.encode(&mut again);
        prop_assert_eq!(&again, &image);
        prop_assert_eq!(back.len(), table.len());
        for who in 0..6 {
            prop_assert_eq!(back.get(&client(who)), table.get(&client(who)));
        }
    }
}

fn small_table() -> DedupTable {
    let mut table = DedupTable::new();
    for id in [1, 3, 4, 9, 700, 1500] {
        table.admit(&client(0), BatchId(id));
    }
    table.admit(&client(1), BatchId(0));
    table
}

#[test]
fn the_worked_example_is_166_bytes() {
    let mut table = DedupTable::new();
    let a = ClientId::new("a").expect("valid");
    table.admit(&a, BatchId(1));
    table.admit(&a, BatchId(3));
    let mut image = Vec::new();
    table.encode(&mut image);
    assert_eq!(image.len(), 166);
    assert_eq!(&image[..8], b"CRDDEDUP");
    assert_eq!(&image[24..26], &[1, b'a']);
    assert_eq!(image[26..34], 3u64.to_le_bytes());
    assert_eq!(image[34], 0x05);
    assert!(image[35..162].iter().all(|&b| b == 0));
}

#[test]
fn a_decoded_table_evicts_in_the_same_order() {
    let mut table = DedupTable::new();
    for who in 0..CLIENTS_MAX {
        table.admit(&client(who), BatchId(1));
    }
    table.touch(&client(0));
    let mut image = Vec::new();
    table.encode(&mut image);
    let mut back = DedupTable::decode(&image).expect("valid");
    back.admit(&client(CLIENTS_MAX), BatchId(1));
    assert_eq!(back.highest(&client(0)), Some(BatchId(1)), "used last");
    assert_eq!(back.highest(&client(1)), None, "used least recently");
}

#[test]
fn every_damaged_byte_is_refused() {
    let mut image = Vec::new();
    small_table().encode(&mut image);
    assert_eq!(image.len(), 24 + 2 * (1 + 8 + 8 + 128) + 4);
    for at in 0..image.len() {
        for xor in [0x01, 0x80, 0xff] {
            let mut damaged = image.clone();
            damaged[at] ^= xor;
            assert!(
                DedupTable::decode(&damaged).is_err(),
                "byte {at} ^ {xor:#x} accepted"
            );
        }
    }
}

#[test]
fn every_truncation_is_refused() {
    let mut image = Vec::new();
    small_table().encode(&mut image);
    for end in 0..image.len() {
        assert!(DedupTable::decode(&image[..end]).is_err(), "prefix {end}");
    }
    let mut longer = image.clone();
    longer.push(0);
    assert!(DedupTable::decode(&longer).is_err());
}

/// Forged images with a correct checksum: the structure's rules refuse
/// them.
#[test]
fn forged_images_are_refused() {
    let reseal = |mut body: Vec<u8>| {
        let crc = crc32fast::hash(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    };
    let mut image = Vec::new();
    small_table().encode(&mut image);
    let body = image[..image.len() - 4].to_vec();
    assert!(DedupTable::decode(&reseal(body.clone())).is_ok());
    let forge = |at: usize, bytes: &[u8]| {
        let mut forged = body.clone();
        forged[at..at + bytes.len()].copy_from_slice(bytes);
        DedupTable::decode(&reseal(forged))
    };
    // Counts: more clients than the bytes hold, more than CLIENTS_MAX.
    for clients in [3u32, 1 << 20, u32::MAX] {
        assert!(forge(16, &clients.to_le_bytes()).is_err(), "{clients}");
    }
    assert!(forge(8, &2u32.to_le_bytes()).is_err(), "version");
    assert!(forge(12, &512u32.to_le_bytes()).is_err(), "window");
    assert!(forge(20, &1u32.to_le_bytes()).is_err(), "reserved");
    // The first client: id "client-0" (8 bytes) at 25, highest at 33,
    // bits at 41.
    assert!(forge(25, b"client/0").is_err(), "an id breaking the rule");
    assert!(forge(25, b"client-1").is_err(), "the same client twice");
    assert!(forge(41, &[0xfe]).is_err(), "the highest id not admitted");
    // A highest of 2 with a bit for id -1.
    let mut low = body.clone();
    low[33..41].copy_from_slice(&2u64.to_le_bytes());
    low[41..41 + 128].fill(0);
    low[41] = 0b1001;
    assert!(DedupTable::decode(&reseal(low.clone())).is_err());
    low[41] = 0b0101;
    assert!(DedupTable::decode(&reseal(low)).is_ok());
    // An image of CLIENTS_MAX clients decodes; one more does not.
    let mut full = DedupTable::new();
    for who in 0..CLIENTS_MAX {
        full.admit(&client(who), BatchId(1));
    }
    let mut image = Vec::new();
    full.encode(&mut image);
    assert_eq!(DedupTable::decode(&image).expect("full").len(), CLIENTS_MAX);
}
