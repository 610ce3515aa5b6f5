//! Power cuts at thousands of points (issue 38, "A simulated crash at the
//! file layer"): a workload runs on a `SimDir` armed to crash before its
//! n-th file operation, then the image the crash left is recovered, and
//! the promise is checked: every acknowledged record comes back exactly
//! once, in order; nothing that was never appended appears; the log opens
//! (a crash only ever tears the tail); the newest durable snapshot loads.
//!
//! An acknowledgement counts only if the crash had not yet happened when
//! `wait` returned: the sync it reports then came before the crash point.

// Test bytes are made by wrapping numbers into a byte on purpose.
#![allow(clippy::cast_possible_truncation)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cardinal_store::{BatchId, Dir, SimDir, Snapshot, Snapshots, SourceId, Wal, WalOptions};
use proptest::prelude::*;

/// The payload of record `k`: its length and bytes follow from `k` alone,
/// so a record read back can be checked against what was appended.
fn payload(k: u64, len_max: usize) -> Vec<u8> {
    let len =
        usize::try_from(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40).expect("fits") % (len_max + 1);
    (0..len).map(|i| (k as u8).wrapping_add(i as u8)).collect()
}

fn source_of(k: u64) -> SourceId {
    SourceId(k % 5)
}

#[derive(Debug, Clone)]
enum Op {
    /// Append `count` records, then wait for them all (one group, often).
    Append { count: u64 },
    /// Write a snapshot through the newest acknowledged sequence.
    Snapshot { bytes: usize },
    /// Trim the log through the oldest snapshot kept.
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..12).prop_map(|count| Op::Append { count }),
        1 => (0usize..600).prop_map(|bytes| Op::Snapshot { bytes }),
        1 => Just(Op::Trim),
    ]
}

fn snapshot_section(sequence: u64, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (sequence as u8) ^ (i as u8)).collect()
}

/// What a recovery found: the records in log order (their `k`), and the
/// snapshot's sequence it started from.
struct Recovered {
    ks: Vec<u64>,
    snapshot: u64,
    wal: Wal,
}

/// Recovers `dir` as the server would and checks every record read.
fn recover(dir: Arc<dyn Dir>, options: WalOptions, len_max: usize) -> Recovered {
    let loaded = Snapshots::new(Arc::clone(&dir))
        .load_newest()
        .expect("a crash never damages a durable snapshot");
    let mut ks = Vec::new();
    let snapshot = match &loaded {
        Some(loaded) => {
            let s = &loaded.snapshot;
            assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
            assert_eq!(s.positions["wal"], s.sequence);
            let section = &s.sections["state"];
            assert_eq!(*section, snapshot_section(s.sequence, section.len()));
            // Record k has sequence k + 1 in these single-writer runs.
            ks.extend(0..s.sequence);
            s.sequence
        }
        None => 0,
    };
    let (wal, recovery) = Wal::open(dir, options).expect("a crash only tears the tail");
    let mut expected = snapshot + 1;
    wal.replay(snapshot, |record| {
        assert_eq!(record.sequence, expected, "sequences run without a gap");
        expected += 1;
        let k = record.batch.0;
        assert_eq!(record.source, source_of(k));
        assert_eq!(record.payload, payload(k, len_max), "record {k}");
        ks.push(k);
    })
    .expect("replay");
    assert_eq!(recovery.next_sequence, expected);
    Recovered { ks, snapshot, wal }
}

fn run_ops(ops: &[Op], crash_op: u64, seed: u64, segment_bytes: u64) -> Result<(), TestCaseError> {
    const LEN_MAX: usize = 200;
    let options = WalOptions {
        segment_bytes,
        repair: false,
        ..WalOptions::default()
    };
    let disk = SimDir::new();
    disk.crash_at(crash_op, seed);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let (wal, _) = Wal::open(Arc::clone(&dir), options).expect("open");
    let snapshots = Snapshots::new(Arc::clone(&dir));
    let mut next_k = 0u64;
    let mut acked_through: Option<u64> = None;
    let mut last_sequence = 0u64;
    let mut durable_snapshot = 0u64;
    for op in ops {
        if disk.crashed().is_some() {
            break;
        }
        match op {
            Op::Append { count } => {
                let tickets: Vec<_> = (next_k..next_k + count)
                    .map(|k| {
                        wal.append(source_of(k), BatchId(k), payload(k, LEN_MAX))
                            .expect("append")
                    })
                    .collect();
                for (ticket, k) in tickets.into_iter().zip(next_k..) {
                    let sequence = ticket.wait().expect("no fault injected");
                    prop_assert_eq!(sequence, k + 1);
                    last_sequence = sequence;
                    if disk.crashed().is_none() {
                        acked_through = Some(k);
                    }
                }
                next_k += count;
            }
            Op::Snapshot { bytes } => {
                let mut snapshot = Snapshot {
                    sequence: last_sequence,
                    ..Snapshot::default()
                };
                snapshot.positions.insert("wal".into(), last_sequence);
                snapshot
                    .sections
                    .insert("state".into(), snapshot_section(last_sequence, *bytes));
                snapshots.write(&snapshot).expect("write");
                if disk.crashed().is_none() {
                    durable_snapshot = last_sequence;
                }
            }
            Op::Trim => {
                if let Some(oldest) = snapshots.oldest_kept().expect("list") {
                    wal.remove_through(oldest).expect("trim");
                }
            }
        }
    }
    drop(wal);
    let image = disk.crashed().unwrap_or_else(|| disk.crash(seed));
    let recovered = recover(Arc::new(image.clone()), options, LEN_MAX);
    // Exactly a prefix of what was appended, covering every ack.
    let m = recovered.ks.len() as u64;
    prop_assert_eq!(&recovered.ks, &(0..m).collect::<Vec<_>>());
    prop_assert!(m <= next_k);
    if let Some(k) = acked_through {
        prop_assert!(m > k, "acknowledged record {} lost (recovered {})", k, m);
    }
    prop_assert!(recovered.snapshot >= durable_snapshot);

    // The recovered log goes on: what is appended now survives the next
    // crash after its acknowledgement, right behind the recovered prefix.
    let more: Vec<u64> = (1_000_000..1_000_005).collect();
    for &k in &more {
        recovered
            .wal
            .append(source_of(k), BatchId(k), payload(k, LEN_MAX))
            .expect("append")
            .wait()
            .expect("durable");
    }
    drop(recovered);
    let again = recover(Arc::new(image.crash(seed ^ 1)), options, LEN_MAX);
    let mut expected: Vec<u64> = (0..m).collect();
    expected.extend(&more);
    prop_assert_eq!(again.ks, expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_anywhere_keeps_every_acknowledged_record(
        ops in prop::collection::vec(op(), 1..40),
        crash_op in 0u64..300,
        seed in any::<u64>(),
        segment_bytes in 128u64..2_048,
    ) {
        run_ops(&ops, crash_op, seed, segment_bytes)?;
    }
}

/// Several producer threads append at once; the crash lands wherever the
/// writer is.
fn run_threads(
    producers: u64,
    per_producer: u64,
    crash_op: u64,
    seed: u64,
) -> Result<(), TestCaseError> {
    const LEN_MAX: usize = 300;
    let options = WalOptions {
        segment_bytes: 1_024,
        repair: false,
        ..WalOptions::default()
    };
    let disk = SimDir::new();
    disk.crash_at(crash_op, seed);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let (wal, _) = Wal::open(Arc::clone(&dir), options).expect("open");
    let wal = Arc::new(wal);
    // Per producer, the highest index acknowledged before the crash.
    let acked: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let appended = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for p in 0..producers {
            let wal = Arc::clone(&wal);
            let acked = Arc::clone(&acked);
            let appended = Arc::clone(&appended);
            let disk = disk.clone();
            scope.spawn(move || {
                let mut window = std::collections::VecDeque::new();
                for i in 0..per_producer {
                    let k = p * 1_000_000 + i;
                    window.push_back((
                        i,
                        wal.append(source_of(k), BatchId(k), payload(k, LEN_MAX))
                            .expect("append"),
                    ));
                    appended.fetch_add(1, Ordering::Relaxed);
                    // Up to 4 in flight, as a client with a window does.
                    while window.len() > (i % 4) as usize {
                        let (index, ticket) = window.pop_front().expect("non-empty");
                        ticket.wait().expect("no fault injected");
                        if disk.crashed().is_none() {
                            acked.lock().expect("lock").insert(p, index);
                        }
                    }
                }
                for (index, ticket) in window {
                    ticket.wait().expect("no fault injected");
                    if disk.crashed().is_none() {
                        acked.lock().expect("lock").insert(p, index);
                    }
                }
            });
        }
    });
    drop(wal);
    let image = disk.crashed().unwrap_or_else(|| disk.crash(seed));
    let (wal, _) = Wal::open(Arc::new(image), options).expect("a crash only tears the tail");
    let mut per_producer: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut expected = 1;
    wal.replay(0, |record| {
        assert_eq!(record.sequence, expected);
        expected += 1;
        let k = record.batch.0;
        assert_eq!(record.payload, payload(k, LEN_MAX));
        assert_eq!(record.source, source_of(k));
        per_producer
            .entry(k / 1_000_000)
            .or_default()
            .push(k % 1_000_000);
    })
    .expect("replay");
    for (p, indexes) in &per_producer {
        prop_assert!(*p < producers);
        // Each producer's records: a prefix of what it appended, in order,
        // once each.
        prop_assert_eq!(indexes, &(0..indexes.len() as u64).collect::<Vec<_>>());
    }
    for (p, index) in acked.lock().expect("lock").iter() {
        let got = per_producer.get(p).map_or(0, Vec::len) as u64;
        prop_assert!(
            got > *index,
            "producer {} acknowledged {} but recovered {}",
            p,
            index,
            got
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_under_concurrent_producers_keeps_every_acknowledged_record(
        producers in 1u64..=4,
        per_producer in 1u64..60,
        crash_op in 0u64..200,
        seed in any::<u64>(),
    ) {
        run_threads(producers, per_producer, crash_op, seed)?;
    }
}
