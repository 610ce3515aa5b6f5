//! The deduplication table against a plain reference (every admitted id
//! in a set), its image's round trip (and version 1's), the decoder's
//! refusals: every damaged byte, every truncation, forged counts and
//! bits; and the flood of issue 43 (item 3): new client ids cannot evict
//! a client used within the horizon. Proptest runs from a fixed seed.

use std::collections::BTreeSet;

use cardinal_server::{
    BatchId, CLIENT_IDLE_SECS_MIN, CLIENTS_MAX, ClientId, DEDUP_WINDOW, Dedup, DedupTable, Verdict,
};
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
        for (at, (who, kind, n)) in steps.into_iter().enumerate() {
            let highest = table.highest(&client(who)).map_or(0, |id| id.0);
            let id = BatchId(next_id(highest, (kind, n)));
            table.admit(&client(who), id, at as u64 / 3).expect("room");
        }
        let mut image = Vec::new();
        table.encode(&mut image);
        let back = DedupTable::decode(&image, 0).expect("an image we wrote");
        let mut again = Vec::new();
        back.encode(&mut again);
        prop_assert_eq!(&again, &image);
        prop_assert_eq!(back.len(), table.len());
        for who in 0..6 {
            prop_assert_eq!(back.get(&client(who)), table.get(&client(who)));
        }
    }
}

/// Seconds since the epoch the tests' tables are used at.
const T0: u64 = 1_790_000_000;

fn small_table() -> DedupTable {
    let mut table = DedupTable::new();
    for id in [1, 3, 4, 9, 700, 1500] {
        table.admit(&client(0), BatchId(id), T0).expect("room");
    }
    table.admit(&client(1), BatchId(0), T0 + 1).expect("room");
    table
}

#[test]
fn the_worked_example_is_174_bytes() {
    let mut table = DedupTable::new();
    let a = ClientId::new("a").expect("valid");
    table.admit(&a, BatchId(1), T0).expect("room");
    table.admit(&a, BatchId(3), T0 + 5).expect("room");
    let mut image = Vec::new();
    table.encode(&mut image);
    assert_eq!(image.len(), 174);
    assert_eq!(&image[..8], b"CRDDEDUP");
    assert_eq!(image[8..12], 2u32.to_le_bytes());
    assert_eq!(&image[24..26], &[1, b'a']);
    assert_eq!(image[26..34], 3u64.to_le_bytes());
    assert_eq!(image[34..42], (T0 + 5).to_le_bytes());
    assert_eq!(image[42], 0x05);
    assert!(image[43..170].iter().all(|&b| b == 0));
}

/// A version 1 image (written before times of use were saved) is read:
/// the worked example of that version, 166 bytes; its clients count as
/// used when decoded.
#[test]
fn a_version_1_image_is_read_and_its_clients_are_recent() {
    let mut image = Vec::new();
    image.extend_from_slice(b"CRDDEDUP");
    for word in [1u32, 1024, 1, 0] {
        image.extend_from_slice(&word.to_le_bytes());
    }
    image.extend_from_slice(&[1, b'a']);
    image.extend_from_slice(&3u64.to_le_bytes());
    let mut bits = [0u8; 128];
    bits[0] = 0x05;
    image.extend_from_slice(&bits);
    let crc = crc32fast::hash(&image);
    image.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(image.len(), 166);
    let a = ClientId::new("a").expect("valid");
    let mut table = DedupTable::decode(&image, T0).expect("version 1");
    assert_eq!(table.check(&a, BatchId(1)), Verdict::Duplicate);
    assert_eq!(table.check(&a, BatchId(2)), Verdict::New);
    let mut again = Vec::new();
    table.encode(&mut again);
    assert_eq!(again.len(), 174);
    assert_eq!(again[34..42], T0.to_le_bytes());
    // Fill the table: `a`, used at decode time, is not evictable yet.
    for who in 1..CLIENTS_MAX {
        table.admit(&client(who), BatchId(1), T0).expect("room");
    }
    assert!(table.admit(&client(0), BatchId(1), T0 + 1).is_err());
}

#[test]
fn a_decoded_table_evicts_in_the_same_order() {
    let mut table = DedupTable::new();
    for who in 0..CLIENTS_MAX {
        table.admit(&client(who), BatchId(1), T0).expect("room");
    }
    table.touch(&client(0), T0 + 1);
    let mut image = Vec::new();
    table.encode(&mut image);
    let mut back = DedupTable::decode(&image, 0).expect("valid");
    let later = T0 + CLIENT_IDLE_SECS_MIN;
    back.admit(&client(CLIENTS_MAX), BatchId(1), later)
        .expect("idle past the horizon");
    assert_eq!(back.highest(&client(0)), Some(BatchId(1)), "used last");
    // Ties are broken by id: "client-1" sorts first among those used at T0.
    assert_eq!(back.highest(&client(1)), None, "used least recently");
}

/// Issue 43, item 3: 4,100 throwaway client ids evicted a victim's entry
/// from the 4,096-client table, and the victim's resend of an
/// acknowledged batch was counted again. Now the flood is refused while
/// the victim is recent, the victim's resend is a duplicate, and the
/// table forgets only clients idle past the horizon.
#[test]
fn a_flood_of_new_client_ids_cannot_evict_a_recent_client() {
    let mut table = DedupTable::new();
    let victim = ClientId::new("victim").expect("valid");
    assert_eq!(table.admit(&victim, BatchId(1), T0), Ok(Verdict::New));
    let mut refused = 0;
    for who in 0..4100 {
        match table.admit(&client(who), BatchId(1), T0 + 1) {
            Ok(verdict) => assert_eq!(verdict, Verdict::New),
            Err(full) => {
                refused += 1;
                assert_eq!(full.retry_after_secs, CLIENT_IDLE_SECS_MIN - 1);
            }
        }
    }
    assert_eq!(refused, 4100 - (CLIENTS_MAX - 1));
    assert_eq!(table.evicted(), 0);
    assert_eq!(
        table.admit(&victim, BatchId(1), T0 + 2),
        Ok(Verdict::Duplicate)
    );
    // The victim goes on; a flood id that waited the horizon out gets in,
    // evicting the least recently used (the victim is the most recent).
    assert_eq!(table.admit(&victim, BatchId(2), T0 + 2), Ok(Verdict::New));
    let later = T0 + 1 + CLIENT_IDLE_SECS_MIN;
    assert_eq!(
        table.admit(&client(5000), BatchId(1), later),
        Ok(Verdict::New)
    );
    assert_eq!(table.evicted(), 1);
    assert_eq!(table.highest(&victim), Some(BatchId(2)));
}

#[test]
fn every_damaged_byte_is_refused() {
    let mut image = Vec::new();
    small_table().encode(&mut image);
    assert_eq!(image.len(), 24 + 2 * (1 + 8 + 8 + 8 + 128) + 4);
    for at in 0..image.len() {
        for xor in [0x01, 0x80, 0xff] {
            let mut damaged = image.clone();
            damaged[at] ^= xor;
            assert!(
                DedupTable::decode(&damaged, T0).is_err(),
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
        assert!(
            DedupTable::decode(&image[..end], T0).is_err(),
            "prefix {end}"
        );
    }
    let mut longer = image.clone();
    longer.push(0);
    assert!(DedupTable::decode(&longer, T0).is_err());
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
    assert!(DedupTable::decode(&reseal(body.clone()), T0).is_ok());
    let forge = |at: usize, bytes: &[u8]| {
        let mut forged = body.clone();
        forged[at..at + bytes.len()].copy_from_slice(bytes);
        DedupTable::decode(&reseal(forged), T0)
    };
    // Counts: more clients than the bytes hold, more than CLIENTS_MAX.
    for clients in [3u32, 1 << 20, u32::MAX] {
        assert!(forge(16, &clients.to_le_bytes()).is_err(), "{clients}");
    }
    assert!(forge(8, &3u32.to_le_bytes()).is_err(), "version");
    assert!(forge(8, &1u32.to_le_bytes()).is_err(), "version 1's layout");
    assert!(forge(12, &512u32.to_le_bytes()).is_err(), "window");
    assert!(forge(20, &1u32.to_le_bytes()).is_err(), "reserved");
    // The first client: id "client-0" (8 bytes) at 25, highest at 33,
    // used at 41, bits at 49.
    assert!(forge(25, b"client/0").is_err(), "an id breaking the rule");
    assert!(forge(25, b"client-1").is_err(), "the same client twice");
    assert!(forge(49, &[0xfe]).is_err(), "the highest id not admitted");
    let after_the_second = (T0 + 2).to_le_bytes();
    assert!(
        forge(41, &after_the_second).is_err(),
        "out of the order of use"
    );
    // A highest of 2 with a bit for id -1.
    let mut low = body.clone();
    low[33..41].copy_from_slice(&2u64.to_le_bytes());
    low[49..49 + 128].fill(0);
    low[49] = 0b1001;
    assert!(DedupTable::decode(&reseal(low.clone()), T0).is_err());
    low[49] = 0b0101;
    assert!(DedupTable::decode(&reseal(low), T0).is_ok());
    // An image of CLIENTS_MAX clients decodes; one more does not.
    let mut full = DedupTable::new();
    for who in 0..CLIENTS_MAX {
        full.admit(&client(who), BatchId(1), T0).expect("room");
    }
    let mut image = Vec::new();
    full.encode(&mut image);
    assert_eq!(
        DedupTable::decode(&image, T0).expect("full").len(),
        CLIENTS_MAX
    );
}

/// Issue 43, item 4, at the service: a key is scoped to its stream, a
/// second body under it is refused, and both hold after a restart (the
/// key and its digest rebuilt from the log's envelope).
#[test]
fn the_service_scopes_keys_per_stream_and_checks_their_body() {
    use std::sync::Arc;

    use cardinal_route::Plan;
    use cardinal_server::Format;
    use cardinal_server::service::{Origin, Refused, Reply, Service, ServiceOptions};
    use cardinal_store::{Dir, SimDir};

    let plan = Arc::new(
        Plan::compile(
            "CREATE STREAM a (ts TIMESTAMP, n BIGINT) WITH (format = 'csv', time = 'ts');
             CREATE STREAM b (ts TIMESTAMP, n BIGINT) WITH (format = 'csv', time = 'ts');
             CREATE SUMMARY sa AS SELECT date_trunc('day', ts) AS day, count(*) AS c
               FROM a GROUP BY day;
             CREATE SUMMARY sb AS SELECT date_trunc('day', ts) AS day, count(*) AS c
               FROM b GROUP BY day;",
        )
        .expect("compiles"),
    );
    let mut dir = SimDir::new();
    let open = |dir: &SimDir| {
        let dir: Arc<dyn Dir> = Arc::new(dir.clone());
        Service::open(Arc::clone(&plan), dir, &ServiceOptions::new(1, 64 << 20)).expect("opens")
    };
    let wait = |reply: Reply| reply.blocking_recv().expect("answered").expect("acked");
    let key = || Origin::Key("k".into());
    let one: &[u8] = b"2026-11-01T00:00:00Z,1\n";
    let other: &[u8] = b"2026-11-01T00:00:00Z,2\n";
    for round in 0..2 {
        let service = open(&dir);
        let first = service
            .ingest(key(), "a", Format::Csv, false, one)
            .expect("taken");
        assert_eq!(wait(first).duplicate, round == 1, "round {round}");
        let reused = service.ingest(key(), "a", Format::Csv, false, other);
        assert!(
            matches!(reused, Err(Refused::KeyReused { .. })),
            "round {round}: {reused:?}"
        );
        // The same key on another stream is another request.
        let elsewhere = service
            .ingest(key(), "b", Format::Csv, false, other)
            .expect("taken");
        assert_eq!(wait(elsewhere).duplicate, round == 1, "round {round}");
        // A power cut's image: no snapshot, so the restart rebuilds the
        // keys from the log alone.
        let image = dir.crash(0);
        service.close().expect("closes");
        dir = image;
    }
}

/// Syslog ids at the service: a message whose id its sender sent before
/// is dropped and acknowledged with the rest, in the same batch or after
/// a restart, whether the restart reads the ids back from a snapshot or
/// rebuilds them from the log; a message without an id counts again.
#[test]
fn the_service_counts_a_syslog_id_once_across_restarts() {
    use std::sync::Arc;

    use cardinal_route::Plan;
    use cardinal_server::Format;
    use cardinal_server::service::{Reply, Service, ServiceOptions, SyslogBatch};
    use cardinal_store::{Dir, SimDir};

    let plan = Arc::new(
        Plan::compile(
            "CREATE STREAM a (ts TIMESTAMP, n BIGINT) WITH (format = 'csv', time = 'ts');
             CREATE SUMMARY sa AS SELECT date_trunc('day', ts) AS day, count(*) AS c
               FROM a GROUP BY day;",
        )
        .expect("compiles"),
    );
    let open = |dir: &SimDir| {
        let dir: Arc<dyn Dir> = Arc::new(dir.clone());
        Service::open(Arc::clone(&plan), dir, &ServiceOptions::new(1, 64 << 20)).expect("opens")
    };
    let wait = |reply: Reply| reply.blocking_recv().expect("answered").expect("acked");
    let batch = |messages: &[(&str, Option<(&str, u64)>)]| {
        let mut batch = SyslogBatch::default();
        for (record, id) in messages {
            batch.records.extend_from_slice(record.as_bytes());
            batch.ends.push(batch.records.len());
            batch.ids.push(id.map(|(s, d)| (s.to_owned(), d)));
        }
        batch
    };
    let first = batch(&[
        ("2026-11-01T00:00:00Z,1\n", Some(("web/app", 1))),
        ("2026-11-01T00:00:00Z,2\n", Some(("web/app", 2))),
        ("2026-11-01T00:00:00Z,2\n", Some(("web/app", 2))),
        ("2026-11-01T00:00:00Z,3\n", Some(("db/app", 2))),
        ("2026-11-01T00:00:00Z,4\n", None),
    ]);
    let mut dir = SimDir::new();
    let service = open(&dir);
    let (reply, dropped) = service
        .ingest_syslog("a", Format::Csv, &first)
        .expect("taken");
    assert_eq!(dropped, 1, "the repeat within the batch");
    let acked = wait(reply);
    assert_eq!((acked.accepted, acked.duplicate), (4, false));
    let image = dir.crash(0);
    service.close().expect("closes");
    dir = image;
    // Round 0 rebuilds the ids from the log alone, then saves them in a
    // snapshot; round 1 reads them from that snapshot.
    for round in 0..2 {
        let service = open(&dir);
        if round == 0 {
            service.snapshot().expect("a snapshot");
        }
        let (reply, dropped) = service
            .ingest_syslog("a", Format::Csv, &first)
            .expect("taken");
        assert_eq!(dropped, 4, "round {round}: every id was seen");
        let acked = wait(reply);
        assert_eq!(
            (acked.accepted, acked.duplicate),
            (1, false),
            "round {round}: only the message without an id counts again"
        );
        let only_ids = batch(&[("2026-11-01T00:00:00Z,1\n", Some(("web/app", 1)))]);
        let (reply, dropped) = service
            .ingest_syslog("a", Format::Csv, &only_ids)
            .expect("taken");
        assert_eq!(dropped, 1);
        assert!(wait(reply).duplicate, "round {round}");
        let image = dir.crash(0);
        service.close().expect("closes");
        dir = image;
    }
}
