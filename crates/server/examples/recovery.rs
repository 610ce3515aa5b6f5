//! Recovery numbers for `cardinal serve` (issue 38, "Speed"): snapshot
//! write and load, and replay of the log after a snapshot, for a state of
//! about a million groups, through [`Service`] over [`OsDir`].
//!
//! ```sh
//! cargo run --profile release-lto -p cardinal-server --example recovery -- \
//!     --input RECORDS.csv --dir /tmp/recovery-bench \
//!     [--schema bench/engine/schemas/snapshot.sql] [--log-mib 512] [--threads 2] [--batch-kib 1024]
//! ```
//!
//! The input is W1's records without a header (`bench/serve/peers.sh`
//! makes `bench/.work/serve/data/impressions-N.csv`; 5 M of them hold
//! about 960 K users, so `snapshot.sql`'s `per_user` has about that many
//! groups). `--dir` must not exist; it is deleted at the end.
//!
//! Each phase is a process of its own (this program run again with
//! `--phase`), so a phase ends as a crash would, without a last snapshot,
//! and the next one opens the directory as a restarted server does:
//!
//! 1. `fill`: opens an empty store, ingests the whole input (batches of
//!    `--batch-kib` of whole lines, 32 in flight, each acknowledged after
//!    its log sync and fold), writes a snapshot ([`Service::snapshot`]:
//!    bytes, seconds).
//! 2. `open`: opens the store (the snapshot, an empty log after it) and
//!    takes a view, which waits until every replayed batch is folded and
//!    merged: the snapshot load, end to end.
//! 3. `log`: opens it again and ingests `--log-mib` MiB of the input
//!    (from its start, cycled) after the snapshot, acknowledged, then
//!    ends without a snapshot.
//! 4. `open` again: the snapshot load plus the replay and fold of that
//!    log. The replay-and-fold rate is the log's record bytes over the
//!    time this open took beyond phase 2's.
//! 5. `raw`: the store's own reads without the engine: the newest
//!    snapshot read and checked ([`Snapshots::load_newest`]), and the log
//!    opened and every record after the snapshot visited ([`Wal::replay`]).
//!
//! The files were just written, so every read is from the page cache
//! (the machine has memory to spare for them): these are rates of the
//! code, not of the disk. One JSON line per phase on stdout, a summary
//! on stderr.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cardinal_route::Plan;
use cardinal_server::Format;
use cardinal_server::service::{Origin, Refused, Reply, Service, ServiceOptions};
use cardinal_store::{OsDir, Snapshots, Wal, WalOptions};

/// Batches waiting for their acknowledgement while more are offered.
const IN_FLIGHT: usize = 32;

/// Each engine's memory budget: the state of a million groups fits many
/// times over.
const MEMORY_MAX: u64 = 8 << 30;

struct Args {
    input: String,
    dir: String,
    schema: String,
    log_mib: u64,
    threads: usize,
    batch_kib: usize,
    phase: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        input: String::new(),
        dir: String::new(),
        schema: "bench/engine/schemas/snapshot.sql".into(),
        log_mib: 512,
        threads: 2,
        batch_kib: 1024,
        phase: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--input" => args.input = value,
            "--dir" => args.dir = value,
            "--schema" => args.schema = value,
            "--log-mib" => args.log_mib = value.parse().expect("--log-mib MiB"),
            "--threads" => args.threads = value.parse().expect("--threads"),
            "--batch-kib" => args.batch_kib = value.parse().expect("--batch-kib"),
            "--phase" => args.phase = Some(value),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(!args.input.is_empty(), "--input FILE is required");
    assert!(!args.dir.is_empty(), "--dir DIR is required");
    args
}

/// The input cut into batches of whole lines, about `kib` KiB each.
fn batches(bytes: &[u8], kib: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let mut end = (at + kib * 1024).min(bytes.len());
        while end < bytes.len() && bytes[end - 1] != b'\n' {
            end += 1;
        }
        out.push(&bytes[at..end]);
        at = end;
    }
    out
}

fn open(args: &Args) -> Service {
    let text = std::fs::read_to_string(&args.schema).expect("reading --schema");
    let plan = Arc::new(Plan::compile(&text).expect("compiling --schema"));
    let dir = Arc::new(OsDir::open(&args.dir).expect("opening --dir"));
    Service::open(plan, dir, &ServiceOptions::new(args.threads, MEMORY_MAX)).expect("opening")
}

/// Waits for a reply; the records it accepted.
fn acked(reply: Reply) -> u64 {
    let acked = reply
        .blocking_recv()
        .expect("the service dropped a reply")
        .expect("a batch failed");
    assert_eq!(acked.rejected, 0, "W1 records are never rejected");
    acked.accepted
}

/// Ingests `batches` in order, `IN_FLIGHT` awaiting acknowledgement;
/// returns the records acknowledged.
fn ingest<'a>(service: &Service, batches: impl Iterator<Item = &'a [u8]>) -> u64 {
    let stream = service.streams()[0].to_owned();
    let mut waiting = std::collections::VecDeque::new();
    let mut records = 0;
    for batch in batches {
        loop {
            match service.ingest(Origin::None, &stream, Format::Csv, false, batch) {
                Ok(reply) => {
                    waiting.push_back(reply);
                    break;
                }
                Err(Refused::Full) => std::thread::sleep(Duration::from_micros(200)),
                Err(other) => panic!("ingest refused: {other}"),
            }
        }
        if waiting.len() >= IN_FLIGHT {
            records += acked(waiting.pop_front().expect("a reply"));
        }
    }
    records + waiting.into_iter().map(acked).sum::<u64>()
}

/// The groups of every summary in a view that waits for every batch
/// submitted so far to be folded.
fn groups(service: &Service) -> u64 {
    let view = service.view(0).expect("a view");
    view.summary_stats().iter().map(|s| s.groups as u64).sum()
}

fn phase(args: &Args, phase: &str) {
    let input = std::fs::read(&args.input).expect("reading --input");
    let all = batches(&input, args.batch_kib);
    let json = match phase {
        "fill" => {
            let service = open(args);
            let started = Instant::now();
            let records = ingest(&service, all.iter().copied());
            let ingest_s = started.elapsed().as_secs_f64();
            let groups = groups(&service);
            let written = service.snapshot().expect("snapshot");
            format!(
                "{{\"phase\":\"fill\",\"records\":{records},\"input_bytes\":{},\"ingest_s\":{ingest_s:.3},\"groups\":{groups},\"snapshot_bytes\":{},\"snapshot_s\":{:.3},\"snapshot_gb_per_s\":{:.3},\"snapshot_paused_ms\":{:.1}}}",
                input.len(),
                written.bytes,
                written.seconds,
                written.bytes as f64 / written.seconds / 1e9,
                written.paused.as_secs_f64() * 1e3
            )
        }
        "log" => {
            let service = open(args);
            let target = args.log_mib << 20;
            let mut bytes = 0u64;
            let chosen = all.iter().cycle().copied().take_while(|b| {
                bytes += b.len() as u64;
                bytes - b.len() as u64 <= target
            });
            let started = Instant::now();
            let records = ingest(&service, chosen);
            let wal = service.wal_stats();
            format!(
                "{{\"phase\":\"log\",\"records\":{records},\"ingest_s\":{:.3},\"wal_bytes\":{},\"wal_records\":{},\"wal_syncs\":{}}}",
                started.elapsed().as_secs_f64(),
                wal.bytes,
                wal.records,
                wal.syncs
            )
        }
        "open" => {
            let started = Instant::now();
            let service = open(args);
            let open_s = started.elapsed().as_secs_f64();
            let groups = groups(&service);
            let folded_s = started.elapsed().as_secs_f64();
            let opened = service.opened();
            format!(
                "{{\"phase\":\"open\",\"open_s\":{open_s:.3},\"folded_s\":{folded_s:.3},\"groups\":{groups},\"replayed\":{},\"replayed_bytes\":{},\"snapshot\":\"{}\"}}",
                opened.replayed,
                opened.replayed_bytes,
                opened.snapshot.as_deref().unwrap_or("")
            )
        }
        "raw" => {
            let dir = Arc::new(OsDir::open(&args.dir).expect("opening --dir"));
            let started = Instant::now();
            let loaded = Snapshots::new(Arc::clone(&dir) as Arc<dyn cardinal_store::Dir>)
                .load_newest()
                .expect("reading the snapshots")
                .expect("a snapshot");
            let load_s = started.elapsed().as_secs_f64();
            let snapshot_bytes: usize = loaded.snapshot.sections.values().map(Vec::len).sum();
            let after = loaded.snapshot.sequence;
            drop(loaded);
            let started = Instant::now();
            let (wal, _) = Wal::open(dir, WalOptions::default()).expect("opening the log");
            let wal_open_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let mut bytes = 0u64;
            let records = wal
                .replay(after, |record| bytes += record.payload.len() as u64)
                .expect("replaying the log");
            let replay_s = started.elapsed().as_secs_f64();
            wal.close().expect("closing the log");
            format!(
                "{{\"phase\":\"raw\",\"snapshot_load_s\":{load_s:.3},\"snapshot_section_bytes\":{snapshot_bytes},\"snapshot_load_gb_per_s\":{:.3},\"wal_open_s\":{wal_open_s:.3},\"replay_records\":{records},\"replay_bytes\":{bytes},\"replay_s\":{replay_s:.3},\"replay_gb_per_s\":{:.3}}}",
                snapshot_bytes as f64 / load_s / 1e9,
                bytes as f64 / replay_s / 1e9
            )
        }
        other => panic!("unknown phase {other}"),
    };
    println!("{json}");
    // Ends as a crash would: no last snapshot, the log as synced.
    std::process::exit(0);
}

/// Runs this program with `--phase NAME`; its JSON line, parsed loosely.
fn child(args: &Args, name: &str) -> String {
    let exe = std::env::current_exe().expect("this program's path");
    let out = Command::new(exe)
        .args([
            "--input",
            &args.input,
            "--dir",
            &args.dir,
            "--schema",
            &args.schema,
        ])
        .args(["--log-mib", &args.log_mib.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--batch-kib", &args.batch_kib.to_string(), "--phase", name])
        .stderr(Stdio::inherit())
        .output()
        .expect("running a phase");
    assert!(out.status.success(), "phase {name} failed: {}", out.status);
    let line = out
        .stdout
        .lines()
        .map_while(Result::ok)
        .last()
        .unwrap_or_default();
    println!("{line}");
    line
}

/// A number field of a flat JSON line.
fn field(line: &str, name: &str) -> f64 {
    let key = format!("\"{name}\":");
    let at = line
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        + key.len();
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{name} in {line}"))
}

fn main() {
    let args = args();
    if let Some(name) = &args.phase {
        phase(&args, name);
        return;
    }
    assert!(
        !std::path::Path::new(&args.dir).exists(),
        "--dir {} exists; give a path that does not",
        args.dir
    );
    std::fs::create_dir_all(&args.dir).expect("creating --dir");
    let fill = child(&args, "fill");
    let bare = child(&args, "open");
    let log = child(&args, "log");
    let full = child(&args, "open");
    let raw = child(&args, "raw");
    std::fs::remove_dir_all(&args.dir).expect("removing --dir");

    let gb = |bytes: f64, s: f64| bytes / s / 1e9;
    let (snap_bytes, snap_s) = (field(&fill, "snapshot_bytes"), field(&fill, "snapshot_s"));
    assert_eq!(
        field(&bare, "replayed"),
        0.0,
        "nothing after the snapshot yet"
    );
    assert_eq!(
        field(&full, "replayed"),
        field(&log, "wal_records"),
        "every record logged after the snapshot is replayed"
    );
    assert_eq!(
        field(&bare, "groups"),
        field(&fill, "groups"),
        "the snapshot holds every group"
    );
    let replayed = field(&full, "replayed_bytes");
    let extra = field(&full, "folded_s") - field(&bare, "folded_s");
    eprintln!(
        "state: {:.0} groups from {:.0} records ({:.1} MB of CSV, ingested in {:.1} s)",
        field(&fill, "groups"),
        field(&fill, "records"),
        field(&fill, "input_bytes") / 1e6,
        field(&fill, "ingest_s")
    );
    eprintln!(
        "snapshot write: {:.1} MB in {:.3} s, {:.2} GB/s (workers paused {:.0} ms)",
        snap_bytes / 1e6,
        snap_s,
        gb(snap_bytes, snap_s),
        field(&fill, "snapshot_paused_ms")
    );
    eprintln!(
        "snapshot load: read and checked {:.3} s ({:.2} GB/s); open to a folded view {:.3} s ({:.2} GB/s of snapshot)",
        field(&raw, "snapshot_load_s"),
        field(&raw, "snapshot_load_gb_per_s"),
        field(&bare, "folded_s"),
        gb(snap_bytes, field(&bare, "folded_s"))
    );
    eprintln!(
        "log after it: {:.0} records, {:.1} MB of records ({:.0} events) logged in {:.1} s",
        field(&log, "wal_records"),
        replayed / 1e6,
        field(&log, "records"),
        field(&log, "ingest_s")
    );
    eprintln!(
        "raw log read: open {:.3} s, replay {:.1} MB in {:.3} s, {:.2} GB/s",
        field(&raw, "wal_open_s"),
        field(&raw, "replay_bytes") / 1e6,
        field(&raw, "replay_s"),
        field(&raw, "replay_gb_per_s")
    );
    eprintln!(
        "replay and fold: open to a folded view {:.3} s, {:.3} s beyond the snapshot's; {:.2} GB/s of log, {:.2} M events/s",
        field(&full, "folded_s"),
        extra,
        gb(replayed, extra),
        field(&log, "records") / extra / 1e6
    );
}
