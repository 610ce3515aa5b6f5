#![no_main]
//! Any bytes as the newest WAL segment (after a valid older one), opened
//! with and without repair: an error or a log, never a panic; repair
//! always opens. A log that opens replays without error, in rising
//! sequence (a repair may skip what it could not keep), and appends after
//! its end.
use std::sync::Arc;

use cardinal_store::wal::segment_name;
use cardinal_store::{BatchId, Dir, SimDir, SourceId, Wal, WalOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for repair in [false, true] {
        let disk = SimDir::new();
        let dir: Arc<dyn Dir> = Arc::new(disk.clone());
        let options = WalOptions {
            segment_bytes: 128,
            repair,
            ..WalOptions::default()
        };
        {
            // Segment 1 with two records, then a roll to segment 3.
            let (wal, _) = Wal::open(Arc::clone(&dir), options).expect("open empty");
            for k in 0..3u64 {
                let ticket = wal.append(SourceId(1), BatchId(k), vec![7; 40]).expect("append");
                ticket.wait().expect("durable");
            }
        }
        let newest = segment_name(3);
        let _ = dir.remove(&newest);
        let mut file = dir.create(&newest).expect("create");
        file.append(data).expect("append");
        file.sync_data().expect("sync");
        let Ok((wal, recovery)) = Wal::open(Arc::clone(&dir), options) else {
            assert!(!repair, "repair always opens");
            continue;
        };
        let mut expected = 1;
        wal.replay(0, |record| {
            assert!(record.sequence >= expected);
            assert!(repair || record.sequence == expected);
            expected = record.sequence + 1;
        })
        .expect("an opened log replays");
        assert_eq!(expected, recovery.next_sequence);
        let sequence = wal
            .append(SourceId(2), BatchId(9), b"after".to_vec())
            .expect("append")
            .wait()
            .expect("durable");
        assert_eq!(sequence, recovery.next_sequence);
    }
});
