//! The continuous engine against `execute` on one CSV file, and the cost of
//! a snapshot (bench/README.md, "Continuous engine").
//!
//! ```text
//! cargo run --profile release-lto -p cardinal-engine --example continuous -- \
//!     SCHEMA.sql FILE.csv [--threads N] [--batch-kib K] [--rounds R] [--queue Q]
//! ```
//!
//! Per round, in this order: `execute` over the file; then the continuous
//! engine fed the file's records (its header line taken off and given as
//! the stream's header) in batches of about K KiB cut at line ends, from
//! one producer thread, finished; then the same feed with a snapshot every
//! quarter of the batches while the producer goes on. Prints events per
//! CPU-second of the process (user + system) for each, their ratio, and
//! each snapshot's wall time, covered batches and groups. The file is read
//! into memory before timing, for both.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cardinal_engine::{Continuous, ContinuousOptions, EngineOptions, execute};
use cardinal_route::Plan;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Seconds of CPU this process used, user and system, from /proc.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th,
    // stime the 13th, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn run() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let schema = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!("SCHEMA.sql"))?);
    let file = PathBuf::from(args.next().ok_or_else(|| anyhow::anyhow!("FILE.csv"))?);
    let (mut threads, mut batch_kib, mut rounds) = (1usize, 64usize, 3usize);
    let mut queue = cardinal_engine::continuous::QUEUE_BATCHES_DEFAULT;
    while let Some(flag) = args.next() {
        let value: usize = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?
            .parse()?;
        match flag.as_str() {
            "--threads" => threads = value,
            "--batch-kib" => batch_kib = value,
            "--rounds" => rounds = value,
            "--queue" => queue = value,
            _ => anyhow::bail!("unknown flag {flag}"),
        }
    }
    let plan = Arc::new(Plan::compile(&std::fs::read_to_string(&schema)?)?);
    let bytes = std::fs::read(&file)?;
    let header_end = memchr(&bytes, 0).ok_or_else(|| anyhow::anyhow!("no header line"))?;
    let header = bytes[..header_end].to_vec();
    let body = &bytes[header_end + 1..];
    let batches = cut(body, batch_kib << 10);
    println!(
        "{}: {:.1} MB, {} batches of ~{batch_kib} KiB, {threads} worker(s)",
        file.display(),
        bytes.len() as f64 / 1e6,
        batches.len()
    );
    for round in 1..=rounds {
        let cpu = cpu_secs();
        let options = EngineOptions::new(threads, 8 << 30);
        let executed = execute(&plan, std::slice::from_ref(&file), &options)?;
        let execute_cpu = cpu_secs() - cpu;
        let records = executed.counts.records + executed.counts.rejects;
        drop(executed);

        let mut options = ContinuousOptions::new(threads, 8 << 30);
        options.header = Some(header.clone());
        options.queue_batches = queue;
        // Copied before the clock starts: the producer hands its buffers
        // over, as a socket reader would.
        let feed = batches.clone();
        let cpu = cpu_secs();
        let engine = Continuous::start(Arc::clone(&plan), &options)?;
        for batch in feed {
            engine.submit(batch)?;
        }
        let (_, counts, _) = engine.finish()?;
        let continuous_cpu = cpu_secs() - cpu;
        anyhow::ensure!(
            counts.records + counts.rejects == records,
            "record counts differ"
        );
        println!(
            "round {round}: execute {:.2} M events/CPU-s ({execute_cpu:.2} CPU-s), continuous {:.2} M events/CPU-s ({continuous_cpu:.2} CPU-s): {:.3}x",
            records as f64 / execute_cpu / 1e6,
            records as f64 / continuous_cpu / 1e6,
            execute_cpu / continuous_cpu
        );

        // Snapshots while the producer goes on.
        let engine = Continuous::start(Arc::clone(&plan), &options)?;
        let quarter = batches.len().div_ceil(4).max(1);
        let feed = batches.clone();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let engine = &engine;
            let producer = scope.spawn(move || -> anyhow::Result<f64> {
                let started = Instant::now();
                for batch in feed {
                    engine.submit(batch)?;
                }
                Ok(started.elapsed().as_secs_f64())
            });
            let mut taken = 0;
            while taken < 3 {
                std::thread::sleep(std::time::Duration::from_millis(50));
                let started = Instant::now();
                let view = engine.snapshot()?;
                let secs = started.elapsed().as_secs_f64();
                if view.covers().get() >= (quarter * (taken + 1)) as u64 || producer.is_finished() {
                    taken += 1;
                    let groups: usize = view.rollups().iter().map(|r| r.group_count()).sum();
                    // The image a store would write, while ingest goes on.
                    let started = Instant::now();
                    let mut image = Vec::new();
                    for rollup in view.rollups() {
                        rollup.encode_image(&mut image);
                    }
                    let image_secs = started.elapsed().as_secs_f64();
                    println!(
                        "  snapshot {taken}: merge {:.1} ms, covers {} batches, {groups} groups, ingest paused {:.2} ms; image {:.1} MB in {:.1} ms",
                        secs * 1e3,
                        view.covers(),
                        view.paused().as_secs_f64() * 1e3,
                        image.len() as f64 / 1e6,
                        image_secs * 1e3
                    );
                }
            }
            let feed = producer.join().expect("producer")?;
            println!("  feed with snapshots: {feed:.2} s wall");
            Ok(())
        })?;
        let started = Instant::now();
        let (rollups, _, _) = engine.finish()?;
        let groups: usize = rollups.iter().map(|r| r.group_count()).sum();
        println!(
            "  final merge {:.1} ms, {groups} groups",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The index of the first newline at or after `from`.
fn memchr(bytes: &[u8], from: usize) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| from + i)
}

/// `body` cut into pieces of about `size` bytes, each ending at a line end.
fn cut(body: &[u8], size: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < body.len() {
        let end = match memchr(body, (start + size).min(body.len() - 1)) {
            Some(newline) => newline + 1,
            None => body.len(),
        };
        out.push(body[start..end].to_vec());
        start = end;
    }
    out
}
