//! Byte flips and lost files (issue 38, "Byte flips in the WAL tail, the
//! WAL middle and the newest snapshot give the documented behaviour"), and
//! failed writes and syncs that poison the log.

// Test bytes are made by wrapping numbers into a byte on purpose.
#![allow(clippy::cast_possible_truncation)]

use std::sync::Arc;

use cardinal_store::wal::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, segment_name};
use cardinal_store::{
    BatchId, Dir, Error, Fault, OsDir, SimDir, Snapshot, Snapshots, SourceId, Wal, WalOptions,
};

const PAYLOAD_BYTES: usize = 40;
const RECORD_BYTES: usize = RECORD_HEADER_BYTES + PAYLOAD_BYTES;

fn options(segment_bytes: u64, repair: bool) -> WalOptions {
    WalOptions {
        segment_bytes,
        repair,
        ..WalOptions::default()
    }
}

/// A log of `count` records of `PAYLOAD_BYTES` each (record k has
/// sequence k + 1 and batch id k).
fn log_of(count: u64, segment_bytes: u64) -> SimDir {
    let disk = SimDir::new();
    let (wal, _) = Wal::open(Arc::new(disk.clone()), options(segment_bytes, false)).expect("open");
    for k in 0..count {
        wal.append(SourceId(1), BatchId(k), vec![k as u8; PAYLOAD_BYTES])
            .expect("append")
            .wait()
            .expect("durable");
    }
    wal.close().expect("close");
    disk
}

/// Offset of the i-th record (from 0) in a segment.
fn record_at(i: usize) -> usize {
    SEGMENT_HEADER_BYTES + i * RECORD_BYTES
}

fn batches(wal: &Wal, after: u64) -> Vec<u64> {
    let mut out = Vec::new();
    wal.replay(after, |record| out.push(record.batch.0))
        .expect("replay");
    out
}

/// Issue 43, item 5: a flipped byte in the last, complete record is
/// damage, not a torn tail: opening refuses, naming segment, offset and
/// what the record's header says of its origin; repair keeps a copy and
/// reports the one record it could not keep.
#[test]
fn a_flip_in_the_last_complete_record_is_damage_not_a_tear() {
    let disk = log_of(5, 1 << 20);
    let name = segment_name(1);
    disk.poke(&name, record_at(4) + RECORD_HEADER_BYTES + 3, 0xee);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    match Wal::open(Arc::clone(&dir), options(1 << 20, false)) {
        Err(error @ Error::Corrupt { .. }) => {
            let text = error.to_string();
            let Error::Corrupt {
                segment,
                offset,
                reason,
                claimed,
                ..
            } = error
            else {
                unreachable!()
            };
            assert_eq!(segment, name);
            assert_eq!(offset, record_at(4) as u64);
            assert!(reason.contains("checksum"), "{reason}");
            let claimed = claimed.expect("a whole header");
            assert_eq!((claimed.sequence, claimed.batch), (5, BatchId(4)));
            assert!(text.contains("sequence 5, source 1, batch 4"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // Refusing changed nothing.
    assert_eq!(disk.len_of(&name), Some(record_at(5)));
    let (wal, recovery) = Wal::open(Arc::clone(&dir), options(1 << 20, true)).expect("repairs");
    assert_eq!(recovery.cut, None);
    let repair = recovery.repaired.expect("repaired");
    let copy = repair.copy.clone().expect("a copy");
    assert_eq!(disk.len_of(&copy), Some(record_at(5)));
    assert_eq!(repair.salvaged, 4);
    assert_eq!(repair.lost.len(), 1);
    let lost = &repair.lost[0];
    assert_eq!((lost.first, lost.count()), (5, Some(1)));
    assert_eq!(lost.claimed[0].batch, BatchId(4));
    assert_eq!(recovery.next_sequence, 5);
    assert_eq!(batches(&wal, 0), vec![0, 1, 2, 3]);
    drop(wal);
    let (_, recovery) = Wal::open(dir, options(1 << 20, false)).expect("opens clean");
    assert_eq!((recovery.cut, recovery.repaired), (None, None));
}

#[test]
fn a_record_cut_short_is_a_torn_tail() {
    let disk = log_of(3, 1 << 20);
    let name = segment_name(1);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    dir.truncate(&name, (record_at(2) + 7) as u64)
        .expect("truncate");
    let (wal, recovery) = Wal::open(dir, options(1 << 20, false)).expect("opens");
    let cut = recovery.cut.expect("cut");
    assert_eq!((cut.offset, cut.bytes), (record_at(2) as u64, 7));
    assert!(cut.reason.contains("cut short"), "{}", cut.reason);
    assert_eq!(batches(&wal, 0), vec![0, 1]);
}

#[test]
fn a_flip_in_the_middle_refuses_to_open_then_repair_keeps_a_copy() {
    let disk = log_of(5, 1 << 20);
    let name = segment_name(1);
    disk.poke(&name, record_at(2) + 20, 0x01);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    match Wal::open(Arc::clone(&dir), options(1 << 20, false)) {
        Err(Error::Corrupt {
            segment,
            offset,
            reason,
            after,
            ..
        }) => {
            assert_eq!(segment, name);
            assert_eq!(offset, record_at(2) as u64);
            assert!(reason.contains("checksum"), "{reason}");
            assert!(
                after.contains(&format!("offset {}", record_at(3))),
                "{after}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Refusing changed nothing.
    assert_eq!(disk.len_of(&name), Some(record_at(5)));

    let (wal, recovery) = Wal::open(Arc::clone(&dir), options(1 << 20, true)).expect("repairs");
    let repair = recovery.repaired.expect("repaired");
    assert_eq!(repair.segment, name);
    assert_eq!(repair.offset, record_at(2) as u64);
    let copy = repair.copy.clone().expect("a copy");
    assert_eq!(disk.len_of(&copy), Some(record_at(5)));
    // Every intact record is kept, the ones after the damage too; the one
    // damaged is reported with what its header claims.
    assert_eq!(batches(&wal, 0), vec![0, 1, 3, 4]);
    assert_eq!(repair.lost.len(), 1);
    assert_eq!((repair.lost[0].first, repair.lost[0].count()), (3, Some(1)));
    assert_eq!(repair.lost[0].claimed[0].sequence, 3);
    assert_eq!(recovery.next_sequence, 6);
    drop(wal);
    // The copy is not taken for a segment, and the skip is the log's own.
    let (wal, recovery) = Wal::open(dir, options(1 << 20, false)).expect("opens clean");
    assert_eq!((recovery.cut, recovery.repaired), (None, None));
    assert_eq!(batches(&wal, 0), vec![0, 1, 3, 4]);
    assert_eq!(batches(&wal, 3), vec![3, 4]);
    let sequence = wal
        .append(SourceId(1), BatchId(99), vec![1; 3])
        .expect("append")
        .wait()
        .expect("durable");
    assert_eq!(sequence, 6);
}

/// Five records of 72 bytes in segments of at most 200 bytes: two records
/// a segment, bases 1, 3, 5.
const SMALL_SEGMENT: u64 = 200;

#[test]
fn damage_in_an_older_segment_refuses_even_at_its_end() {
    let disk = log_of(5, SMALL_SEGMENT);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    assert_eq!(
        dir.list().expect("list"),
        vec![segment_name(1), segment_name(3), segment_name(5)]
    );
    // The last record of the middle segment: a tear would be cut in the
    // newest segment, but this one was synced whole before the next began.
    disk.poke(&segment_name(3), record_at(1) + 40, 0x80);
    match Wal::open(Arc::clone(&dir), options(SMALL_SEGMENT, false)) {
        Err(Error::Corrupt {
            segment,
            offset,
            after,
            ..
        }) => {
            assert_eq!(segment, segment_name(3));
            assert_eq!(offset, record_at(1) as u64);
            assert!(after.contains("not the newest"), "{after}");
        }
        other => panic!("{other:?}"),
    }
    let (wal, recovery) =
        Wal::open(Arc::clone(&dir), options(SMALL_SEGMENT, true)).expect("repairs");
    let repair = recovery.repaired.expect("repaired");
    // The newer segment is kept whole; it now says it skips sequence 4.
    assert_eq!(batches(&wal, 0), vec![0, 1, 2, 4]);
    assert_eq!(recovery.next_sequence, 6);
    assert_eq!(repair.lost.len(), 1);
    assert_eq!((repair.lost[0].first, repair.lost[0].last), (4, Some(4)));
    assert_eq!(repair.lost[0].segment, segment_name(3));
    drop(wal);
    let (wal, recovery) = Wal::open(dir, options(SMALL_SEGMENT, false)).expect("opens clean");
    assert_eq!(recovery.repaired, None);
    assert_eq!(batches(&wal, 0), vec![0, 1, 2, 4]);
}

#[test]
fn a_missing_segment_is_a_gap() {
    let disk = log_of(5, SMALL_SEGMENT);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    dir.remove(&segment_name(3)).expect("remove");
    match Wal::open(Arc::clone(&dir), options(SMALL_SEGMENT, false)) {
        Err(Error::Gap {
            segment,
            offset,
            expected,
            found,
        }) => {
            assert_eq!(segment, segment_name(5));
            assert_eq!((offset, expected, found), (0, 3, 5));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bad_header_refuses() {
    let disk = log_of(5, SMALL_SEGMENT);
    disk.poke(&segment_name(5), 17, 0x33);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    match Wal::open(Arc::clone(&dir), options(SMALL_SEGMENT, false)) {
        Err(Error::BadHeader { segment, reason }) => {
            assert_eq!(segment, segment_name(5));
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let (wal, recovery) = Wal::open(dir, options(SMALL_SEGMENT, true)).expect("repairs");
    assert_eq!(batches(&wal, 0), vec![0, 1, 2, 3, 4]);
    assert_eq!(recovery.next_sequence, 6);
    let repair = recovery.repaired.expect("repaired");
    assert_eq!(repair.lost, Vec::new());
    assert_eq!(repair.salvaged, 1);
}

/// Issue 43, item 6: one flipped byte in a segment header costs no
/// record: repair rewrites the header and keeps every record.
#[test]
fn repair_after_a_flipped_header_keeps_every_record() {
    let disk = log_of(300, 1 << 20);
    let name = segment_name(1);
    disk.poke(&name, 9, 0x40);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    assert!(matches!(
        Wal::open(Arc::clone(&dir), options(1 << 20, false)),
        Err(Error::BadHeader { .. })
    ));
    let (wal, recovery) = Wal::open(Arc::clone(&dir), options(1 << 20, true)).expect("repairs");
    let repair = recovery.repaired.expect("repaired");
    assert_eq!(repair.salvaged, 300);
    assert_eq!((repair.lost.clone(), repair.stale), (Vec::new(), 0));
    assert_eq!(repair.written, vec![name.clone()]);
    assert_eq!(disk.len_of(&repair.copies[0]), Some(record_at(300)));
    assert_eq!(batches(&wal, 0), (0..300).collect::<Vec<u64>>());
    drop(wal);
    let (wal, recovery) = Wal::open(dir, options(1 << 20, false)).expect("opens clean");
    assert_eq!((recovery.cut, recovery.repaired), (None, None));
    assert_eq!(batches(&wal, 0).len(), 300);
}

/// Issue 43, item 6: records of another writer (a sequence already taken)
/// and garbage between records are dropped and counted; the ranges lost
/// are named.
#[test]
fn repair_reports_stale_records_and_each_lost_range() {
    let disk = log_of(10, 1 << 20);
    let name = segment_name(1);
    // Records 3 and 7 damaged (batches 2 and 6).
    disk.poke(&name, record_at(2) + 40, 0x11);
    disk.poke(&name, record_at(6) + 40, 0x11);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let (wal, recovery) = Wal::open(Arc::clone(&dir), options(1 << 20, true)).expect("repairs");
    let repair = recovery.repaired.expect("repaired");
    let ranges: Vec<(u64, Option<u64>)> = repair.lost.iter().map(|l| (l.first, l.last)).collect();
    assert_eq!(ranges, vec![(3, Some(3)), (7, Some(7))]);
    assert_eq!(repair.lost_count(), Some(2));
    assert_eq!(repair.salvaged, 8);
    assert_eq!(batches(&wal, 0), vec![0, 1, 3, 4, 5, 7, 8, 9]);
    assert_eq!(
        repair.written,
        vec![segment_name(1), segment_name(4), segment_name(8)]
    );
}

/// Issue 43, item 6b: a log that ends below a sequence the caller names
/// (a snapshot's) moves forward to it, and the move is part of the log.
#[test]
fn a_log_below_its_minimum_moves_forward_and_stays_moved() {
    let disk = log_of(3, 1 << 20);
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let moved = WalOptions {
        next_sequence_min: 10,
        ..options(1 << 20, false)
    };
    let (wal, recovery) = Wal::open(Arc::clone(&dir), moved).expect("opens");
    let jump = recovery.moved.expect("moved");
    assert_eq!((jump.from, jump.to), (4, 10));
    assert_eq!(recovery.next_sequence, 10);
    assert_eq!(batches(&wal, 0), vec![0, 1, 2]);
    let sequence = wal
        .append(SourceId(1), BatchId(50), vec![5; 4])
        .expect("append")
        .wait()
        .expect("durable");
    assert_eq!(sequence, 10);
    drop(wal);
    let (wal, recovery) = Wal::open(Arc::clone(&dir), options(1 << 20, false)).expect("clean");
    assert_eq!((recovery.moved, recovery.next_sequence), (None, 11));
    assert_eq!(batches(&wal, 0), vec![0, 1, 2, 50]);
    assert_eq!(batches(&wal, 5), vec![50]);
    drop(wal);
    // No log at all (its segments deleted): it starts at the minimum.
    let empty: Arc<dyn Dir> = Arc::new(SimDir::new());
    let (wal, recovery) = Wal::open(Arc::clone(&empty), moved).expect("opens");
    assert_eq!(recovery.next_sequence, 10);
    assert_eq!(recovery.moved.map(|m| m.from), Some(1));
    assert_eq!(batches(&wal, 0), Vec::<u64>::new());
    assert_eq!(batches(&wal, 9), Vec::<u64>::new());
}

#[test]
fn a_flipped_newest_snapshot_falls_back_and_the_log_still_covers_it() {
    let disk = SimDir::new();
    let dir: Arc<dyn Dir> = Arc::new(disk.clone());
    let (wal, _) = Wal::open(Arc::clone(&dir), options(SMALL_SEGMENT, false)).expect("open");
    let snapshots = Snapshots::new(Arc::clone(&dir));
    for k in 0..12u64 {
        let sequence = wal
            .append(SourceId(1), BatchId(k), vec![k as u8; PAYLOAD_BYTES])
            .expect("append")
            .wait()
            .expect("durable");
        if sequence % 4 == 0 {
            let mut snapshot = Snapshot {
                sequence,
                ..Snapshot::default()
            };
            snapshot.positions.insert("wal".into(), sequence);
            snapshot
                .sections
                .insert("count".into(), sequence.to_le_bytes().to_vec());
            snapshots.write(&snapshot).expect("write");
            let oldest = snapshots.oldest_kept().expect("list").expect("one");
            wal.remove_through(oldest).expect("trim");
        }
    }
    drop(wal);
    // Snapshots at 4, 8, 12; the log trimmed through 4.
    let newest = cardinal_store::snapshot::snapshot_name(12);
    disk.poke(&newest, 9, 0x42);
    let loaded = snapshots.load_newest().expect("load").expect("one");
    assert_eq!(loaded.snapshot.sequence, 8);
    assert_eq!(loaded.skipped.len(), 1);
    assert!(loaded.skipped[0].contains(&newest), "{:?}", loaded.skipped);
    let (wal, _) = Wal::open(dir, options(SMALL_SEGMENT, false)).expect("open");
    assert_eq!(batches(&wal, 8), vec![8, 9, 10, 11]);
    // Replay from before what the log still holds is refused, not skipped.
    assert!(matches!(
        wal.replay(0, |_| {}),
        Err(Error::ReplayGap { after: 0, .. })
    ));
}

#[test]
fn a_failed_sync_poisons_the_log_for_good() {
    let disk = SimDir::new();
    let (wal, _) = Wal::open(Arc::new(disk.clone()), options(1 << 20, false)).expect("open");
    wal.append(SourceId(1), BatchId(0), vec![0; 8])
        .expect("append")
        .wait()
        .expect("durable");
    disk.fail_next(Fault::SyncData);
    let err = wal
        .append(SourceId(1), BatchId(1), vec![1; 8])
        .expect("append")
        .wait()
        .expect_err("the sync failed");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    assert!(err.to_string().contains("injected"), "{err}");
    // Never retried: every later call fails, though the disk works again.
    let again = wal.append(SourceId(1), BatchId(2), vec![2; 8]);
    assert!(matches!(again, Err(Error::Poisoned { .. })), "{again:?}");
    assert!(matches!(wal.close(), Err(Error::Poisoned { .. })));
    // Recovery from what is on disk: the first record, and the unacknowledged
    // one may or may not be there.
    let (wal, _) = Wal::open(Arc::new(disk.crash(3)), options(1 << 20, false)).expect("recovers");
    let got = batches(&wal, 0);
    assert!(got == vec![0] || got == vec![0, 1], "{got:?}");
}

#[test]
fn a_failed_write_poisons_every_queued_ticket() {
    let disk = SimDir::new();
    let (wal, _) = Wal::open(Arc::new(disk.clone()), options(1 << 20, false)).expect("open");
    disk.fail_next(Fault::Append);
    let tickets: Vec<_> = (0..50)
        .map(|k| wal.append(SourceId(1), BatchId(k), vec![0; 8]))
        .collect();
    let mut failed = 0;
    for ticket in tickets {
        match ticket.and_then(|t| t.wait()) {
            Err(Error::Poisoned { .. }) => failed += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(failed, 50);
}

#[test]
fn os_dir_round_trip() {
    let root = std::env::temp_dir().join(format!("cardinal-store-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    {
        let dir: Arc<dyn Dir> = Arc::new(OsDir::open(&root).expect("dir"));
        let (wal, _) = Wal::open(dir, options(SMALL_SEGMENT, false)).expect("open");
        for k in 0..7 {
            wal.append(SourceId(2), BatchId(k), vec![k as u8; PAYLOAD_BYTES])
                .expect("append")
                .wait()
                .expect("durable");
        }
        wal.close().expect("close");
    }
    let dir: Arc<dyn Dir> = Arc::new(OsDir::open(&root).expect("dir"));
    let (wal, recovery) = Wal::open(dir, options(SMALL_SEGMENT, false)).expect("reopen");
    assert_eq!(recovery.next_sequence, 8);
    assert_eq!(recovery.segments, 4);
    assert_eq!(batches(&wal, 3), vec![3, 4, 5, 6]);
    drop(wal);
    std::fs::remove_dir_all(&root).expect("cleanup");
}

/// Issue 43, item 6, as a law: whatever bytes are flipped in a log of
/// several segments (headers included), repair opens, and it keeps
/// exactly the records none of whose bytes was flipped, in order.
mod salvage {
    use super::*;
    use proptest::prelude::*;

    const SEGMENT: u64 = 600;
    const COUNT: u64 = 40;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        #[test]
        fn repair_keeps_every_record_no_flip_touched(
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1u8..=255), 1..5)
        ) {
            let disk = log_of(COUNT, SEGMENT);
            let dir: Arc<dyn Dir> = Arc::new(disk.clone());
            let segments = dir.list().expect("list");
            // Where each batch's record is: (segment, from, to).
            let mut places = Vec::new();
            for name in &segments {
                let bytes = dir.read(name).expect("read");
                let mut at = SEGMENT_HEADER_BYTES;
                while at < bytes.len() {
                    let batch = u64::from_le_bytes(bytes[at + 24..at + 32].try_into().expect("8"));
                    places.push((name.clone(), at, at + RECORD_BYTES, batch));
                    at += RECORD_BYTES;
                }
            }
            prop_assert_eq!(places.len() as u64, COUNT);
            let mut touched = std::collections::BTreeSet::new();
            for (segment, offset, xor) in &flips {
                let name = segment.get(&segments);
                let len = disk.len_of(name).expect("a segment");
                let at = offset.index(len);
                let byte = dir.read(name).expect("read")[at];
                disk.poke(name, at, byte ^ xor);
                for (place, from, to, batch) in &places {
                    if place == name && (*from..*to).contains(&at) {
                        touched.insert(*batch);
                    }
                }
            }
            let (wal, recovery) = Wal::open(Arc::clone(&dir), options(SEGMENT, true)).expect("repair opens");
            let want: Vec<u64> = (0..COUNT).filter(|b| !touched.contains(b)).collect();
            prop_assert_eq!(batches(&wal, 0), want.clone());
            if let Some(repair) = &recovery.repaired {
                prop_assert!(repair.salvaged as usize <= want.len());
            }
            drop(wal);
            // The repaired log opens clean and says the same.
            let (wal, recovery) = Wal::open(dir, options(SEGMENT, false)).expect("opens clean");
            prop_assert_eq!(recovery.repaired, None);
            prop_assert_eq!(batches(&wal, 0), want);
        }
    }
}
