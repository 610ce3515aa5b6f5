//! Snapshots: round trips through files, and corrupted snapshots (flipped,
//! truncated, extended, overwritten bytes) that must return an error and
//! never panic.

use cardinal_chains::{CampaignId, Config, Error, Kind, Record, SiteId, Store, UserId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn filled_store(users: u64, appends: u64) -> Store {
    let config = Config {
        shard_bits: 4,
        group_bits: 2,
        lookback_ms: 1_000,
        shard_slots_initial: 4,
    };
    let mut store = Store::new(config).expect("valid");
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..appends {
        let mut r = Record::new(
            i,
            Kind(rng.random_range(1..4)),
            CampaignId(rng.random()),
            SiteId(3),
        )
        .expect("time");
        r.revenue_micros = rng.random_range(-2..3);
        let attrs: Vec<u8> = (0..rng.random_range(0..=40))
            .map(|_| rng.random())
            .collect();
        r.set_attrs(&attrs).expect("fits");
        store
            .append(UserId(rng.random_range(0..users)), &r)
            .expect("room");
    }
    store
}

fn contents(store: &Store, users: u64) -> Vec<Vec<Record>> {
    (0..users)
        .map(|u| {
            let mut out = Vec::new();
            store.chain(UserId(u), &mut out).expect("own group");
            out
        })
        .collect()
}

#[test]
fn file_round_trip_is_atomic_and_exact() {
    let store = filled_store(300, 3_000);
    let dir = std::env::temp_dir().join(format!("cardinal-chains-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("chains.snap");
    let written = store.write_snapshot_file(&path).expect("write");
    assert!(!dir.join("chains.snap.tmp").exists());
    let (restored, read) = Store::read_snapshot_file(&path).expect("read");
    assert_eq!(written.bytes, read.bytes);
    assert_eq!(read.keys, store.keys());
    assert_eq!(restored.config(), store.config());
    assert_eq!(contents(&restored, 300), contents(&store, 300));
    // Writing the restored store gives the same bytes: the format is a
    // function of the content (shards are restored in their slot order).
    let mut a = Vec::new();
    let mut b = Vec::new();
    store.snapshot(&mut a).expect("in memory");
    restored.snapshot(&mut b).expect("in memory");
    assert_eq!(a.len(), b.len());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn empty_store_round_trips() {
    let store = Store::new(Config::default()).expect("valid");
    let mut bytes = Vec::new();
    store.snapshot(&mut bytes).expect("in memory");
    let restored = Store::restore(bytes.as_slice()).expect("own snapshot");
    assert_eq!(restored.keys(), 0);
}

#[test]
fn every_single_bit_flip_in_a_small_snapshot_is_an_error() {
    let store = filled_store(8, 24);
    let mut bytes = Vec::new();
    store.snapshot(&mut bytes).expect("in memory");
    // One bit per byte, cycling through the bit positions: a restore that
    // gets far allocates arena pages, so every bit of every byte would take
    // seconds.
    for i in 0..bytes.len() {
        let bit = i % 8;
        let mut bad = bytes.clone();
        bad[i] ^= 1 << bit;
        assert!(
            Store::restore(bad.as_slice()).is_err(),
            "flip of bit {bit} at byte {i} was accepted"
        );
    }
    for len in (0..bytes.len()).step_by(3) {
        assert!(
            matches!(
                Store::restore(&bytes[..len]),
                Err(Error::SnapshotTruncated { .. } | Error::SnapshotMalformed { .. })
            ),
            "truncation to {len} bytes"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        Store::restore(longer.as_slice()),
        Err(Error::SnapshotMalformed { .. })
    ));
}

#[test]
fn random_corruption_never_panics() {
    let store = filled_store(200, 1_500);
    let mut valid = Vec::new();
    store.snapshot(&mut valid).expect("in memory");
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..500 {
        let mut bad = valid.clone();
        match rng.random_range(0..4) {
            0 => {
                for _ in 0..rng.random_range(1..=8) {
                    let i = rng.random_range(0..bad.len());
                    bad[i] ^= 1 << rng.random_range(0..8);
                }
            }
            1 => bad.truncate(rng.random_range(0..bad.len())),
            2 => {
                // An extreme 8-byte field, where counts and lengths live.
                let i = rng.random_range(0..bad.len() - 8);
                let value: [u8; 8] = if rng.random() {
                    [0xff; 8]
                } else {
                    rng.random()
                };
                bad[i..i + 8].copy_from_slice(&value);
            }
            _ => {
                let i = rng.random_range(0..bad.len());
                let chunk: Vec<u8> = (0..rng.random_range(1..64)).map(|_| rng.random()).collect();
                bad.splice(i..i, chunk);
            }
        }
        if bad != valid {
            assert!(Store::restore(bad.as_slice()).is_err());
        }
    }
}

/// A change to a valid snapshot.
type Corruption = Box<dyn Fn(&mut Vec<u8>)>;

/// Checksums catch corruption; these check the rules behind them, by
/// re-sealing corrupted sections with a fresh checksum.
#[test]
fn structural_rules_hold_even_with_valid_checksums() {
    let config = Config {
        shard_bits: 0,
        group_bits: 0,
        lookback_ms: 1,
        shard_slots_initial: 4,
    };
    let mut store = Store::new(config).expect("valid");
    let r = Record::new(5, Kind::CLICK, CampaignId(1), SiteId(1)).expect("time");
    store.append(UserId(1), &r).expect("room");
    store.append(UserId(2), &r).expect("room");
    let mut bytes = Vec::new();
    store.snapshot(&mut bytes).expect("in memory");
    // header 44 | count 8 | body_bytes 8 | 2 x (key 8 | len 2 | record 16) | crc 4 | trailer 24
    let section = 44..44 + 16 + 52;
    let reseal = |bytes: &mut Vec<u8>| {
        let crc = crc32(&bytes[section.clone()]);
        bytes[section.end..section.end + 4].copy_from_slice(&crc.to_le_bytes());
        // The trailer's crc of section crcs, then its own crc.
        let t = section.end + 4;
        let sections = crc32(&bytes[section.end..section.end + 4]);
        bytes[t + 16..t + 20].copy_from_slice(&sections.to_le_bytes());
        let own = crc32(&bytes[t..t + 20]);
        bytes[t + 20..t + 24].copy_from_slice(&own.to_le_bytes());
    };
    let mut ok = bytes.clone();
    reseal(&mut ok);
    assert!(
        Store::restore(ok.as_slice()).is_ok(),
        "resealing alone keeps it valid"
    );
    const FIRST_KEY: usize = 60;
    const SECOND_KEY: usize = FIRST_KEY + 26;
    let cases: Vec<(&str, Corruption)> = vec![
        (
            "duplicate key",
            Box::new(|b| {
                let key: Vec<u8> = b[FIRST_KEY..FIRST_KEY + 8].to_vec();
                b[SECOND_KEY..SECOND_KEY + 8].copy_from_slice(&key);
            }),
        ),
        ("zero-length chain", Box::new(|b| b[FIRST_KEY + 8] = 0)),
        ("record flags", Box::new(|b| b[FIRST_KEY + 10 + 7] = 0x41)),
        ("key count", Box::new(|b| b[44] = 1)),
    ];
    for (what, corrupt) in cases {
        let mut bad = bytes.clone();
        corrupt(&mut bad);
        reseal(&mut bad);
        assert!(
            matches!(
                Store::restore(bad.as_slice()),
                Err(Error::SnapshotMalformed { .. })
            ),
            "{what}"
        );
    }
}

/// CRC-32/ISO-HDLC, bitwise: an independent reference for the format's
/// checksum.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A restore sizes shards for their keys, not for `shard_slots_initial`,
/// and gives shards without keys no slots; the restored store behaves as the
/// original, and each shard grows straight to the original's staggered
/// first capacity, so that after enough appends both have the same index.
#[test]
fn restored_shards_are_sized_for_their_keys_and_grow_to_the_initial() {
    let config = Config {
        shard_bits: 3,
        group_bits: 1,
        lookback_ms: 1_000_000,
        shard_slots_initial: 64,
    };
    let mut store = Store::new(config).expect("valid");
    let r = |t: u64| Record::new(t, Kind::CLICK, CampaignId(1), SiteId(2)).expect("time");
    // Three keys: most of the eight shards are empty.
    for user in 0..3 {
        store.append(UserId(user), &r(user)).expect("room");
    }
    let mut bytes = Vec::new();
    store.snapshot(&mut bytes).expect("in memory");
    let mut restored = Store::restore(bytes.as_slice()).expect("own snapshot");
    assert_eq!(restored.config(), store.config());
    assert_eq!(contents(&restored, 3), contents(&store, 3));
    assert!(
        restored.memory().index_bytes < store.memory().index_bytes / 8,
        "{:?} vs {:?}",
        restored.memory(),
        store.memory()
    );
    // Empty shards answer lookups, conversions and trims.
    let mut out = Vec::new();
    for user in 3..40 {
        assert!(!restored.chain(UserId(user), &mut out).expect("own group"));
        assert!(!restored.take(UserId(user), &mut out).expect("own group"));
    }
    assert!(restored.trim_slice(0, 1_000).pass_done);
    assert_eq!(restored.trim_all(0).records_dropped, 0);
    // 200 keys over 8 shards stay under the original's first capacity
    // (0.85 x 64), so it never grows; every restored shard must grow once,
    // to exactly that capacity.
    let mut grew = 0;
    for user in 3..200 {
        store.append(UserId(user), &r(user)).expect("room");
        grew += u32::from(
            restored
                .append(UserId(user), &r(user))
                .expect("room")
                .shard_grew,
        );
    }
    assert!(grew >= 8, "{grew} growths");
    assert_eq!(contents(&restored, 200), contents(&store, 200));
    assert_eq!(restored.memory().index_bytes, store.memory().index_bytes);
    assert_eq!(restored.memory().keys, store.memory().keys);
    for user in (0..200).step_by(3) {
        out.clear();
        assert!(restored.take(UserId(user), &mut out).expect("own group"));
        assert_eq!(out, vec![r(user)]);
    }
}
