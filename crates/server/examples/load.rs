//! Offers a running `cardinal serve` a load over HTTP and reports what it
//! took: acknowledged events per second, acknowledgement latency (p50,
//! p99), 503 answers, the server's RSS over time, and whether every batch
//! was acknowledged in the end (a 503 is retried after its `Retry-After`,
//! with the same `Idempotency-Key`, so nothing is lost or doubled).
//!
//! ```sh
//! cargo run --release -p cardinal-server --example load -- \
//!     --http 127.0.0.1:7480 --stream impressions --input imp.csv \
//!     [--rate EVENTS_PER_S] [--seconds S] [--connections C] [--batch-kib K] [--pid PID]
//! ```
//!
//! `--rate 0` (the default) offers as fast as the connections go: the
//! sustainable rate. A rate above it for `--seconds` is the over-load
//! test: queues fill, the server answers 503, RSS must stay flat. The
//! input is a CSV file with a header line (dropped); it is cut into
//! batches of about K KiB at line ends and cycled with fresh keys until
//! the time is up. One JSON line on stdout; progress on stderr.

#![allow(
    clippy::cast_possible_truncation,
    reason = "batch indexes and quantile positions of a benchmark, far below 2^32"
)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Args {
    http: SocketAddr,
    stream: String,
    input: String,
    rate: f64,
    seconds: f64,
    connections: usize,
    batch_kib: usize,
    pid: Option<u32>,
}

fn args() -> Args {
    let mut args = Args {
        http: "127.0.0.1:7480".parse().expect("address"),
        stream: "impressions".into(),
        input: String::new(),
        rate: 0.0,
        seconds: 20.0,
        connections: 4,
        batch_kib: 1024,
        pid: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--http" => args.http = value.parse().expect("--http host:port"),
            "--stream" => args.stream = value,
            "--input" => args.input = value,
            "--rate" => args.rate = value.parse().expect("--rate events/s"),
            "--seconds" => args.seconds = value.parse().expect("--seconds"),
            "--connections" => args.connections = value.parse().expect("--connections"),
            "--batch-kib" => args.batch_kib = value.parse().expect("--batch-kib"),
            "--pid" => args.pid = Some(value.parse().expect("--pid")),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(!args.input.is_empty(), "--input FILE is required");
    args
}

/// Batches of whole lines, about `kib` KiB each, and their line counts.
fn batches(bytes: &[u8], kib: usize) -> Vec<(Vec<u8>, u64)> {
    let start = bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let body = &bytes[start..];
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let mut end = (at + kib * 1024).min(body.len());
        while end < body.len() && body[end - 1] != b'\n' {
            end += 1;
        }
        let chunk = body[at..end].to_vec();
        let lines = chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        out.push((chunk, lines));
        at = end;
    }
    out
}

/// Posts one batch; the status, or `None` when the connection failed.
fn post(at: SocketAddr, stream: &str, key: &str, body: &[u8]) -> Option<u16> {
    let mut socket = TcpStream::connect_timeout(&at, Duration::from_secs(5)).ok()?;
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .ok()?;
    let _ = socket.set_nodelay(true);
    let head = format!(
        "POST /v1/streams/{stream} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\nContent-Type: text/csv\r\nIdempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).ok()?;
    let _ = socket.write_all(body);
    let mut response = Vec::new();
    socket.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    text.split(' ').nth(1)?.parse().ok()
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() {
    let args = args();
    let bytes = std::fs::read(&args.input).expect("reading --input");
    let batches = Arc::new(batches(&bytes, args.batch_kib));
    let run = format!(
        "load-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    );
    let next = Arc::new(AtomicU64::new(0));
    let acked_events = Arc::new(AtomicU64::new(0));
    let acked_batches = Arc::new(AtomicU64::new(0));
    let busy = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let posted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = Duration::from_secs_f64(args.seconds);
    let mut threads = Vec::new();
    for _ in 0..args.connections {
        let posted = Arc::clone(&posted);
        let (batches, next, acked_events, acked_batches, busy, failed, latencies, stop) = (
            Arc::clone(&batches),
            Arc::clone(&next),
            Arc::clone(&acked_events),
            Arc::clone(&acked_batches),
            Arc::clone(&busy),
            Arc::clone(&failed),
            Arc::clone(&latencies),
            Arc::clone(&stop),
        );
        let (at, stream, run, rate) = (args.http, args.stream.clone(), run.clone(), args.rate);
        threads.push(std::thread::spawn(move || {
            loop {
                if stop.load(Ordering::Relaxed) || started.elapsed() >= deadline {
                    return;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                let (body, lines) = &batches[(n % batches.len() as u64) as usize];
                // Offered load: batch n is due when the rate says so.
                if rate > 0.0 {
                    let due = Duration::from_secs_f64(n as f64 * batches[0].1 as f64 / rate);
                    if due >= deadline {
                        return;
                    }
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                let key = format!("{run}-{n}");
                posted.fetch_add(1, Ordering::Relaxed);
                let offered = Instant::now();
                // Retry a 503 (after Retry-After, 1 s, or sooner under a
                // deadline) with the same key until it is acknowledged.
                loop {
                    match post(at, &stream, &key, body) {
                        Some(200) => {
                            acked_events.fetch_add(*lines, Ordering::Relaxed);
                            acked_batches.fetch_add(1, Ordering::Relaxed);
                            latencies
                                .lock()
                                .expect("lock")
                                .push(offered.elapsed().as_secs_f64());
                            break;
                        }
                        Some(503) => {
                            busy.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(50));
                            if started.elapsed() > deadline * 3 {
                                stop.store(true, Ordering::Relaxed);
                                return;
                            }
                        }
                    }
                }
            }
        }));
    }
    let mut rss = Vec::new();
    while threads.iter().any(|t| !t.is_finished()) {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(kib) = args.pid.and_then(rss_kib) {
            rss.push(kib);
        }
        eprintln!(
            "{:5.1} s: {} events acked, {} 503s, rss {} MiB",
            started.elapsed().as_secs_f64(),
            acked_events.load(Ordering::Relaxed),
            busy.load(Ordering::Relaxed),
            rss.last().map_or(0, |k| k / 1024)
        );
    }
    for t in threads {
        t.join().expect("poster");
    }
    let wall = started.elapsed().as_secs_f64();
    let mut l = latencies.lock().expect("lock").clone();
    l.sort_by(f64::total_cmp);
    let q = |p: f64| {
        l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    let offered = posted.load(Ordering::Relaxed);
    let third = rss.len() / 3;
    println!(
        "{{\"system\":\"cardinal\",\"transport\":\"http\",\"rate_offered\":{},\"connections\":{},\"batch_kib\":{},\"events\":{},\"batches\":{},\"events_per_s\":{:.0},\"wall_s\":{:.2},\"p50_ms\":{:.1},\"p99_ms\":{:.1},\"http_503\":{},\"failed_posts\":{},\"batches_posted\":{},\"rss_mib_first_third_max\":{},\"rss_mib_last_third_max\":{}}}",
        args.rate,
        args.connections,
        args.batch_kib,
        acked_events.load(Ordering::Relaxed),
        acked_batches.load(Ordering::Relaxed),
        acked_events.load(Ordering::Relaxed) as f64 / wall,
        wall,
        q(0.5) * 1e3,
        q(0.99) * 1e3,
        busy.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        offered,
        rss[..third].iter().max().map_or(0, |k| k / 1024),
        rss[rss.len() - third..]
            .iter()
            .max()
            .map_or(0, |k| k / 1024),
    );
}
