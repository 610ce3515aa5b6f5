//! Group-commit throughput and replay speed of the WAL on a real disk.
//!
//! ```text
//! cargo run --release -p cardinal-store --example wal_throughput -- [DIR] [SECONDS]
//! ```
//!
//! For records of 1 KiB and 64 KiB from 1, 2 and 4 producer threads, each
//! keeping `WINDOW` records in flight (as a client with a window of
//! unacknowledged batches does), it appends for SECONDS (default 2) into a
//! fresh log under DIR (default `/tmp/cardinal-wal-bench`) through
//! `OsDir`, and prints records/s, MB/s of payload, syncs/s, records per
//! sync and the p50/p99 acknowledgement latency (append to `wait`
//! returning). Then it reopens the largest log and times `replay` over it
//! twice (the second pass reads the page cache: checking and copying
//! speed, not the disk's).

// Rates and ranks are printed from lossy float conversions on purpose.
#![allow(clippy::cast_possible_truncation)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use cardinal_store::{BatchId, Dir, OsDir, SourceId, Wal, WalOptions};

/// Records each producer keeps in flight.
const WINDOW: usize = 64;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let root = args
        .next()
        .unwrap_or_else(|| "/tmp/cardinal-wal-bench".to_string());
    let seconds: f64 = args
        .next()
        .map_or(2.0, |s| s.parse().expect("SECONDS is a number"));
    let run_for = Duration::from_secs_f64(seconds);
    println!("dir {root}, {seconds} s per run, window {WINDOW} per producer");
    println!(
        "{:>8} {:>8} {:>12} {:>9} {:>9} {:>11} {:>9} {:>9}",
        "record", "threads", "records/s", "MB/s", "syncs/s", "recs/sync", "p50 ms", "p99 ms"
    );
    let mut largest: Option<(String, u64)> = None;
    for record_bytes in [1usize << 10, 64 << 10] {
        for threads in [1usize, 2, 4] {
            let path = format!("{root}/r{record_bytes}-t{threads}");
            let _ = std::fs::remove_dir_all(&path);
            let dir: Arc<dyn Dir> = Arc::new(OsDir::open(&path).expect("open the directory"));
            let (wal, _) = Wal::open(Arc::clone(&dir), WalOptions::default()).expect("open");
            let start = Instant::now();
            let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|p| {
                        let wal = &wal;
                        scope.spawn(move || {
                            let payload = vec![p as u8; record_bytes];
                            let mut window = std::collections::VecDeque::with_capacity(WINDOW);
                            let mut latencies = Vec::new();
                            let mut batch = 0u64;
                            while start.elapsed() < run_for {
                                let sent = Instant::now();
                                let ticket = wal
                                    .append(SourceId(p as u64), BatchId(batch), payload.clone())
                                    .expect("append");
                                batch += 1;
                                window.push_back((sent, ticket));
                                if window.len() == WINDOW {
                                    let (sent, ticket) = window.pop_front().expect("full");
                                    ticket.wait().expect("durable");
                                    latencies.push(sent.elapsed());
                                }
                            }
                            for (sent, ticket) in window {
                                ticket.wait().expect("durable");
                                latencies.push(sent.elapsed());
                            }
                            latencies
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().expect("producer"))
                    .collect()
            });
            let elapsed = start.elapsed().as_secs_f64();
            let stats = wal.stats();
            wal.close().expect("close");
            latencies.sort_unstable();
            let records = stats.records as f64;
            println!(
                "{:>8} {:>8} {:>12.0} {:>9.1} {:>9.0} {:>11.1} {:>9.2} {:>9.2}",
                format!("{} KiB", record_bytes >> 10),
                threads,
                records / elapsed,
                records * record_bytes as f64 / elapsed / 1e6,
                stats.syncs as f64 / elapsed,
                records / stats.syncs.max(1) as f64,
                percentile(&latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            );
            if largest
                .as_ref()
                .is_none_or(|(_, bytes)| stats.bytes > *bytes)
            {
                largest = Some((path, stats.bytes));
            } else {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
    }
    let (path, bytes) = largest.expect("at least one run");
    let dir: Arc<dyn Dir> = Arc::new(OsDir::open(&path).expect("open the directory"));
    let opened = Instant::now();
    let (wal, recovery) = Wal::open(dir, WalOptions::default()).expect("reopen");
    let open_secs = opened.elapsed().as_secs_f64();
    // Twice: the first pass may read from the disk, the second reads the
    // page cache (checking and copying speed).
    let mut payload_bytes = 0u64;
    let mut count = 0;
    let mut replay_secs = Vec::new();
    for _ in 0..2 {
        payload_bytes = 0;
        let replayed = Instant::now();
        count = wal
            .replay(0, |record| payload_bytes += record.payload.len() as u64)
            .expect("replay");
        replay_secs.push(replayed.elapsed().as_secs_f64());
    }
    println!(
        "open (check every segment): {} segments, {:.2} GB in {:.3} s = {:.2} GB/s",
        recovery.segments,
        bytes as f64 / 1e9,
        open_secs,
        bytes as f64 / 1e9 / open_secs
    );
    for (pass, secs) in replay_secs.iter().enumerate() {
        println!(
            "replay pass {}: {count} records, {:.2} GB in {:.3} s = {:.2} GB/s",
            pass + 1,
            bytes as f64 / 1e9,
            secs,
            bytes as f64 / 1e9 / secs
        );
    }
    assert_eq!(payload_bytes + count * 32, bytes);
    drop(wal);
    std::fs::remove_dir_all(&root).expect("clean up");
}
