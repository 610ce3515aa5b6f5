//! The service's durability promise (`service.rs`, "The promise") under
//! simulated power cuts, failed syncs and flipped bytes, over `SimDir`.
//!
//! - **Crash anywhere.** A client sends N batches (native ids, some with
//!   idempotency keys) to two streams through a window, snapshots come
//!   at random points and from a thread of their own (as the server's
//!   timer takes them), and the directory is captured as a power cut
//!   would leave it: at
//!   random mutating operations (`crash_at`, re-armed each time one is
//!   reached, so one run yields many crash points, inside group commits,
//!   segment rolls and snapshot writes alike) and after random acks
//!   (`crash`). Each image is opened again, every batch not known to be
//!   acknowledged at the crash is resent with its id, and some that were
//!   are resent too: those must come back as duplicates. The end state
//!   must equal `execute` over the N batches once each (exact aggregates
//!   equal, HyperLogLog bytes equal), and a per-batch count summary names
//!   any batch lost or counted twice. Some recoveries are cut again:
//!   while reopening, or midway through their resends.
//! - **Failed syncs and writes** stop the service; a restart recovers.
//! - **Byte flips**: in the log's last record and in its middle (refused
//!   with segment, offset and origin; `repair` keeps every other record
//!   and names the one lost), in the newest snapshots (fallen back past,
//!   state still exact), in the only snapshot (the log rebuilds the state
//!   when it reaches back to sequence 1, else the refusal lists the files).
//! - **Short or missing logs** below a snapshot's positions (a repair's
//!   cut, deleted segments): the log moves forward past them, or opening
//!   refuses and `repair` goes on; batches acknowledged after survive.
//! - **Envelopes** round-trip, and truncations and garbage are refused
//!   without a panic.
//!
//! Everything is drawn from fixed seeds, so a failure reproduces (up to
//! thread timing: snapshots run on a thread of their own). For a longer
//! hunt, `CARDINAL_CRASH_CASES` and `CARDINAL_CRASH_SEED` override the
//! crash-anywhere test's 160 cases and its seed.

use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cardinal_engine::{EngineOptions, execute};
use cardinal_rollup::{AggState, Rollup};
use cardinal_route::Plan;
use cardinal_server::service::{Acked, Envelope, Origin, Refused, Reply, Service, ServiceOptions};
use cardinal_server::{BatchId, ClientId, Format};
use cardinal_store::{Dir, Fault, SimDir};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

/// The CSV stream `ev`: `daily` is the kind of summary a user declares
/// (exact counts and sums, a HyperLogLog), `per_batch` counts each
/// batch's records so a difference names the batch lost or doubled. A
/// second stream, `clicks`, has its own engine and log position: in some
/// cases it stays idle while `ev` goes on (module doc of `service.rs`,
/// Positions).
const SQL: &str = "
    CREATE STREAM ev (ts TIMESTAMP, b BIGINT, user_id BIGINT, kind TEXT, revenue DOUBLE)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE SUMMARY daily AS SELECT date_trunc('day', ts) AS day, kind,
        count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users
      FROM ev GROUP BY day, kind;
    CREATE SUMMARY per_batch AS SELECT date_trunc('day', ts) AS day, b, count(*) AS events
      FROM ev GROUP BY day, b;
    CREATE STREAM clicks (ts TIMESTAMP, b BIGINT, user_id BIGINT)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE SUMMARY clicks_per_batch AS SELECT date_trunc('day', ts) AS day, b,
        count(*) AS clicks, hll(user_id) AS users
      FROM clicks GROUP BY day, b;";

/// The input streams in plan order (the service's stream indexes), and
/// their headers.
const STREAMS: [(&str, &str); 2] = [
    ("ev", "ts,b,user_id,kind,revenue"),
    ("clicks", "ts,b,user_id"),
];

/// The most records one batch holds.
const BATCH_RECORDS_MAX: u64 = 40;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The test's own choices (not the directory's crash choices).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = splitmix(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Uniform in `0..n` (0 when `n` is 0).
    fn index(&mut self, n: usize) -> usize {
        let n = u64::try_from(n).expect("a usize fits u64");
        usize::try_from(self.below(n)).expect("below a usize")
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// The batches of one case, their streams and who sends each.
struct Case {
    batches: Vec<Vec<u8>>,
    /// Index into [`STREAMS`].
    streams: Vec<usize>,
    origins: Vec<Origin>,
}

impl Case {
    /// `n` batches: two native clients take turns, every seventh batch
    /// comes with an idempotency key instead. By the seed, `clicks` gets
    /// no batch, a quarter of them, some of the first third only (then
    /// idles), or some of the second half only.
    fn new(seed: u64, n: usize) -> Case {
        let mut rng = Rng(seed);
        let clients = [
            ClientId::new(&format!("c{}", seed % 1000)).expect("a valid id"),
            ClientId::new("other_client").expect("a valid id"),
        ];
        let mut next_id = [1u64, 1];
        let mut batches = Vec::with_capacity(n);
        let mut origins = Vec::with_capacity(n);
        let mut streams = Vec::with_capacity(n);
        for k in 0..n {
            let stream = match seed % 4 {
                0 => 0,
                1 => usize::from(rng.chance(4)),
                2 => usize::from(k < n / 3 && rng.chance(2)),
                _ => usize::from(k >= n / 2 && rng.chance(2)),
            };
            streams.push(stream);
            let records = 1 + rng.below(BATCH_RECORDS_MAX);
            let mut bytes = Vec::new();
            for _ in 0..records {
                let h = rng.next();
                let day = 1 + h % 4;
                let hour = (h >> 8) % 24;
                let user = (h >> 16) % 500;
                if stream == 1 {
                    writeln!(bytes, "2026-11-0{day}T{hour:02}:09:00Z,{k},{user}")
                        .expect("write to a Vec");
                    continue;
                }
                let kind = ["view", "click", "buy", "share"][((h >> 32) % 4) as usize];
                let revenue = ((h >> 40) % 10_000) as f64 / 256.0;
                if (h >> 60).is_multiple_of(16) {
                    // A reject: counted as such, never folded.
                    writeln!(bytes, "2026-11-0{day}T{hour:02}:00:00Z,{k},oops,{kind},1")
                } else {
                    writeln!(
                        bytes,
                        "2026-11-0{day}T{hour:02}:05:00Z,{k},{user},{kind},{revenue}"
                    )
                }
                .expect("write to a Vec");
            }
            batches.push(bytes);
            let origin = if k % 7 == 3 {
                Origin::Key(format!("key-{seed:x}-{k}"))
            } else {
                let c = k % 2;
                next_id[c] += 1 + rng.below(3) * u64::from(rng.chance(4));
                Origin::Client(clients[c].clone(), BatchId(next_id[c]))
            };
            origins.push(origin);
        }
        Case {
            batches,
            streams,
            origins,
        }
    }

    fn send(&self, service: &Service, k: usize) -> Result<Reply, Refused> {
        service.ingest(
            self.origins[k].clone(),
            STREAMS[self.streams[k]].0,
            Format::Csv,
            false,
            &self.batches[k],
        )
    }
}

/// A group's states in a comparable form: HyperLogLogs as their bytes,
/// the rest as their output.
fn canonical(rollup: &Rollup) -> Vec<String> {
    let kinds = &rollup.shape().aggs;
    let mut rows: Vec<String> = rollup
        .groups()
        .map(|(bucket, key, states)| {
            let states: Vec<String> = states
                .iter()
                .zip(kinds)
                .map(|(state, kind)| match state {
                    AggState::Hll(hll) => hll.to_hex(),
                    _ => format!("{:?}", state.output(kind)),
                })
                .collect();
            format!("{bucket:?} {key:?} {}", states.join(" "))
        })
        .collect();
    rows.sort();
    rows
}

/// `execute` over the chosen batches, once each, as one file per
/// stream: every summary of every stream, in stream order.
fn executed(plan: &Plan, case: &Case, chosen: impl IntoIterator<Item = usize>) -> Vec<Vec<String>> {
    static FILES: AtomicU64 = AtomicU64::new(0);
    let chosen: Vec<usize> = chosen.into_iter().collect();
    let mut out = Vec::new();
    for (stream, (name, header)) in STREAMS.iter().enumerate() {
        let path: PathBuf = std::env::temp_dir().join(format!(
            "cardinal-crash-{}-{}.csv",
            std::process::id(),
            FILES.fetch_add(1, Ordering::Relaxed)
        ));
        let mut bytes = format!("{header}\n").into_bytes();
        for &k in chosen.iter().filter(|&&k| case.streams[k] == stream) {
            bytes.extend_from_slice(&case.batches[k]);
        }
        std::fs::write(&path, bytes).expect("temp file");
        let mut options = EngineOptions::new(1, 1 << 30);
        options.stream = Some((*name).to_owned());
        let executed = execute(plan, std::slice::from_ref(&path), &options).expect("execute");
        std::fs::remove_file(&path).expect("remove temp file");
        out.extend(executed.rollups.iter().map(canonical));
    }
    out
}

/// The service's live state, comparable with [`executed`].
fn state(service: &Service) -> Vec<Vec<String>> {
    assert_eq!(service.streams(), STREAMS.map(|(name, _)| name));
    let mut out = Vec::new();
    for stream in 0..STREAMS.len() {
        let view = service.view(stream).expect("a view");
        out.extend(view.rollups().iter().map(canonical));
    }
    out
}

/// Compares two states and, when they differ, says which batches'
/// record counts differ.
fn same_state(
    got: &[Vec<String>],
    want: &[Vec<String>],
    context: &str,
) -> Result<(), TestCaseError> {
    if got == want {
        return Ok(());
    }
    // The per-batch summaries (`per_batch`, `clicks_per_batch`) name the
    // batch (`b`) that is missing or counted twice.
    let rows = |state: &[Vec<String>]| -> BTreeSet<String> {
        [1, 2]
            .iter()
            .flat_map(|&i| {
                state[i]
                    .iter()
                    .map(move |row| format!("summary {i}: {row}"))
            })
            .collect()
    };
    let (got_rows, want_rows) = (rows(got), rows(want));
    let missing: Vec<&String> = want_rows.difference(&got_rows).take(5).collect();
    let extra: Vec<&String> = got_rows.difference(&want_rows).take(5).collect();
    Err(TestCaseError::fail(format!(
        "{context}: the state differs from execute's; per batch, expected but not found: \
         {missing:?}; found but not expected: {extra:?}; summaries equal: {:?}",
        got.iter()
            .zip(want)
            .map(|(g, w)| g == w)
            .collect::<Vec<_>>()
    )))
}

fn options(segment_bytes: u64, queue_batches: usize) -> ServiceOptions {
    let mut options = ServiceOptions::new(1, 256 << 20);
    options.segment_bytes = segment_bytes;
    options.queue_batches = queue_batches;
    options
}

fn open(plan: &Arc<Plan>, dir: &SimDir, options: &ServiceOptions) -> anyhow::Result<Service> {
    let dir: Arc<dyn Dir> = Arc::new(dir.clone());
    Service::open(Arc::clone(plan), dir, options)
}

fn wait(reply: Reply) -> Result<Acked, String> {
    reply
        .blocking_recv()
        .unwrap_or_else(|_| Err("the reply was dropped unanswered".into()))
}

/// Sends the batches `ks` in order, at most `window` in flight, waiting
/// out full queues; returns each one's answer in order.
fn send_all(
    service: &Service,
    case: &Case,
    ks: &[usize],
    window: usize,
) -> Result<Vec<(usize, Acked)>, TestCaseError> {
    let mut out = Vec::with_capacity(ks.len());
    let mut flight: VecDeque<(usize, Reply)> = VecDeque::new();
    let finish_one = |flight: &mut VecDeque<(usize, Reply)>,
                      out: &mut Vec<(usize, Acked)>|
     -> Result<(), TestCaseError> {
        let (k, reply) = flight.pop_front().expect("one in flight");
        let acked = wait(reply).map_err(|e| TestCaseError::fail(format!("batch {k}: {e}")))?;
        out.push((k, acked));
        Ok(())
    };
    for &k in ks {
        loop {
            match case.send(service, k) {
                Ok(reply) => {
                    flight.push_back((k, reply));
                    break;
                }
                Err(Refused::Full) if !flight.is_empty() => finish_one(&mut flight, &mut out)?,
                Err(Refused::Full) => std::thread::yield_now(),
                Err(other) => return Err(TestCaseError::fail(format!("batch {k}: {other}"))),
            }
        }
        if flight.len() >= window {
            finish_one(&mut flight, &mut out)?;
        }
    }
    while !flight.is_empty() {
        finish_one(&mut flight, &mut out)?;
    }
    Ok(out)
}

/// A directory as a crash left it, and the batches acknowledged for sure
/// before the crash.
struct Image {
    dir: SimDir,
    acked: BTreeSet<usize>,
    how: String,
    /// Captured at an armed operation, not between two calls.
    armed: bool,
}

/// Crash points checked, over every case of every test.
static CRASH_POINTS: AtomicU64 = AtomicU64::new(0);
/// Snapshots the crash-anywhere runs took from their snapshot threads.
static SNAPSHOTS: AtomicU64 = AtomicU64::new(0);
/// Of the crash points, the ones at an armed operation (`crash_at`).
static CRASH_POINTS_ARMED: AtomicU64 = AtomicU64::new(0);

/// Opens `image`, resends every batch not surely acknowledged and some
/// that were (they must be duplicates), and compares the end state with
/// `want`; at `depth` 0 it may crash again midway and recover that too.
fn recover(
    plan: &Arc<Plan>,
    case: &Case,
    image: &Image,
    options: &ServiceOptions,
    want: &[Vec<String>],
    rng: &mut Rng,
    depth: u32,
) -> Result<(), TestCaseError> {
    // Now and then a power cut armed within opening itself (a tail cut
    // and its sync, a repair) or the first operations after it.
    let during = depth == 0 && rng.chance(3);
    if during {
        image
            .dir
            .crash_at(image.dir.ops() + rng.below(8), rng.next());
    }
    let service = open(plan, &image.dir, options)
        .map_err(|e| TestCaseError::fail(format!("{}: reopening failed: {e:#}", image.how)))?;
    let opened = service.opened().clone();
    prop_assert!(
        opened.repaired.is_none(),
        "{}: a crash needed a repair",
        image.how
    );
    prop_assert!(
        opened.skipped.is_empty(),
        "{}: a crash left a damaged snapshot: {:?}",
        image.how,
        opened.skipped
    );
    let resend: Vec<usize> = (0..case.batches.len())
        .filter(|k| !image.acked.contains(k) || rng.chance(3))
        .collect();
    let window = 1 + rng.index(8);
    // Now and then a second power cut during the resends: what the first
    // recovery cut, replayed and took since must hold as well.
    let split = if depth == 0 && rng.chance(4) {
        rng.index(resend.len() + 1)
    } else {
        resend.len()
    };
    let mut answers = send_all(&service, case, &resend[..split], window)?;
    if split < resend.len() {
        let mut acked = image.acked.clone();
        // A duplicate's answer is an acknowledgement too.
        acked.extend(answers.iter().map(|(k, _)| *k));
        let again = Image {
            dir: image.dir.crash(rng.next()),
            acked,
            how: format!("{}, then again after {split} resends", image.how),
            armed: false,
        };
        recover(plan, case, &again, options, want, rng, depth + 1)?;
        answers.extend(send_all(&service, case, &resend[split..], window)?);
    }
    for (k, acked) in &answers {
        if image.acked.contains(k) {
            prop_assert!(
                acked.duplicate,
                "{}: batch {k} ({:?}) was acknowledged before the crash but is new after it: \
                 lost",
                image.how,
                case.origins[*k]
            );
        }
    }
    same_state(&state(&service), want, &image.how)?;
    if during && let Some(dir) = image.dir.crashed() {
        // What was surely acknowledged before the first cut still is.
        let again = Image {
            dir,
            acked: image.acked.clone(),
            how: format!("{}, then again while reopening", image.how),
            armed: true,
        };
        recover(plan, case, &again, options, want, rng, depth + 1)?;
    }
    // Closed, not dropped: an engine dropped without `finish` keeps its
    // worker threads waiting on their queues, and thousands would pile up.
    service
        .close()
        .map_err(|e| TestCaseError::fail(format!("{}: close: {e:#}", image.how)))?;
    CRASH_POINTS.fetch_add(1, Ordering::Relaxed);
    if image.armed {
        CRASH_POINTS_ARMED.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// One run of the crash-anywhere test: sends the case, collects crash
/// images along the way, then recovers each.
fn crash_anywhere(
    plan: &Arc<Plan>,
    seed: u64,
    n: usize,
    segment_bytes: u64,
    queue_batches: usize,
    window: usize,
) -> Result<(), TestCaseError> {
    let case = Case::new(seed, n);
    let want = executed(plan, &case, 0..n);
    let mut rng = Rng(seed ^ 0xc4a5);
    let options = options(segment_bytes, queue_batches);
    let dir = SimDir::new();
    let service = open(plan, &dir, &options)
        .map_err(|e| TestCaseError::fail(format!("opening an empty directory: {e:#}")))?;
    let mut images: Vec<Image> = Vec::new();
    let mut acked: BTreeSet<usize> = BTreeSet::new();
    let mut flight: VecDeque<(usize, Reply)> = VecDeque::new();
    // The armed crash point: its operation, and what was acknowledged when
    // it was armed (surely before the crash).
    let mut armed: Option<(u64, BTreeSet<usize>)> = None;
    let arm =
        |rng: &mut Rng, armed: &mut Option<(u64, BTreeSet<usize>)>, acked: &BTreeSet<usize>| {
            let op = dir.ops() + rng.below(10);
            dir.crash_at(op, rng.next());
            *armed = Some((op, acked.clone()));
        };
    let collect = |armed: &mut Option<(u64, BTreeSet<usize>)>, images: &mut Vec<Image>| -> bool {
        if let Some((op, _)) = armed
            && dir.ops() > *op
        {
            let (op, acked) = armed.take().expect("armed");
            images.push(Image {
                dir: dir.crashed().expect("an image once the operation passed"),
                acked,
                how: format!("seed {seed:#x}: power cut before operation {op}"),
                armed: true,
            });
            return true;
        }
        false
    };
    arm(&mut rng, &mut armed, &acked);
    // Snapshots also come from a thread of their own, as the server's
    // timer takes them, so that batches arrive between a snapshot's views
    // and its positions.
    let stop = AtomicBool::new(false);
    let snapshotted = std::thread::scope(|scope| -> Result<u64, TestCaseError> {
        let snapshots = scope.spawn(|| -> Result<u64, String> {
            let mut rng = Rng(seed ^ 0x5eed);
            let mut taken = 0;
            while !stop.load(Ordering::Acquire) {
                for _ in 0..rng.below(400) {
                    std::thread::yield_now();
                }
                service.snapshot().map_err(|e| format!("snapshot: {e:#}"))?;
                taken += 1;
            }
            Ok(taken)
        });
        let sent = (|| -> Result<(), TestCaseError> {
            let mut k = 0;
            while k < n || !flight.is_empty() {
                let ack_now = k == n || flight.len() >= window || rng.chance(3);
                if ack_now && let Some((done, reply)) = flight.pop_front() {
                    let answer = wait(reply)
                        .map_err(|e| TestCaseError::fail(format!("batch {done} failed: {e}")))?;
                    prop_assert!(!answer.duplicate, "batch {done} sent once is a duplicate");
                    acked.insert(done);
                    if rng.chance(4) {
                        images.push(Image {
                            dir: dir.crash(rng.next()),
                            acked: acked.clone(),
                            how: format!("seed {seed:#x}: power cut after {} acks", acked.len()),
                            armed: false,
                        });
                    }
                } else if k < n {
                    match case.send(&service, k) {
                        Ok(reply) => {
                            flight.push_back((k, reply));
                            k += 1;
                        }
                        Err(Refused::Full) => std::thread::yield_now(),
                        Err(other) => {
                            return Err(TestCaseError::fail(format!("batch {k}: {other}")));
                        }
                    }
                }
                if rng.chance(12) {
                    service
                        .snapshot()
                        .map_err(|e| TestCaseError::fail(format!("snapshot: {e:#}")))?;
                }
                if collect(&mut armed, &mut images) || armed.is_none() {
                    arm(&mut rng, &mut armed, &acked);
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::Release);
        let taken = snapshots
            .join()
            .expect("the snapshot thread does not panic")
            .map_err(TestCaseError::fail)?;
        sent.map(|()| taken)
    })?;
    SNAPSHOTS.fetch_add(snapshotted, Ordering::Relaxed);
    // A power cut once everything is acknowledged, with or without the
    // snapshot a clean close writes.
    let closed_first = rng.chance(2);
    let last = |rng: &mut Rng, images: &mut Vec<Image>| {
        images.push(Image {
            dir: dir.crash(rng.next()),
            acked: acked.clone(),
            how: format!("seed {seed:#x}: power cut after the end (closed: {closed_first})"),
            armed: false,
        });
    };
    if !closed_first {
        last(&mut rng, &mut images);
    }
    service
        .close()
        .map_err(|e| TestCaseError::fail(format!("close: {e:#}")))?;
    collect(&mut armed, &mut images);
    if closed_first {
        last(&mut rng, &mut images);
    }
    for image in &images {
        recover(plan, &case, image, &options, &want, &mut rng, 0)?;
    }
    Ok(())
}

fn runner(cases: u32, seed: u64) -> TestRunner {
    TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn every_acknowledged_batch_survives_a_crash_anywhere_once() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let before = CRASH_POINTS.load(Ordering::Relaxed);
    let armed_before = CRASH_POINTS_ARMED.load(Ordering::Relaxed);
    let strategy = (any::<u64>(), 1usize..40, 256u64..4096, 1usize..6, 1usize..8);
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let cases = env("CARDINAL_CRASH_CASES", 160);
    let seed = env("CARDINAL_CRASH_SEED", 0x0c7a_5401);
    runner(u32::try_from(cases).expect("cases fit u32"), seed)
        .run(
            &strategy,
            |(seed, n, segment_bytes, queue_batches, window)| {
                crash_anywhere(&plan, seed, n, segment_bytes, queue_batches, window)
            },
        )
        .expect("the promise holds");
    let points = CRASH_POINTS.load(Ordering::Relaxed) - before;
    let armed = CRASH_POINTS_ARMED.load(Ordering::Relaxed) - armed_before;
    println!(
        "crash points checked: {points} ({armed} at an armed operation, {} between calls); \
         snapshots taken concurrently: {}",
        points - armed,
        SNAPSHOTS.load(Ordering::Relaxed)
    );
    assert!(points >= 1_000, "only {points} crash points were checked");
}

/// Sends every batch of `case` and waits for each answer.
fn send_everything(service: &Service, case: &Case) -> Vec<(usize, Acked)> {
    let ks: Vec<usize> = (0..case.batches.len()).collect();
    send_all(service, case, &ks, 4).expect("every batch is acknowledged")
}

#[test]
fn a_failed_sync_or_write_stops_the_service_and_a_restart_keeps_the_promise() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let mut checked = 0;
    for seed in 0..24u64 {
        let case = Case::new(seed, 12);
        let want = executed(&plan, &case, 0..12);
        let options = options(512, 4);
        let dir = SimDir::new();
        let service = open(&plan, &dir, &options).expect("open");
        let first = 1 + Rng(seed).index(6);
        let ks: Vec<usize> = (0..first).collect();
        let acked: BTreeSet<usize> = send_all(&service, &case, &ks, 2)
            .expect("acknowledged")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        if seed % 3 == 0 {
            service.snapshot().expect("a snapshot");
        }
        let fault = if seed % 2 == 0 {
            Fault::SyncData
        } else {
            Fault::Append
        };
        dir.fail_next(fault);
        let reply = case.send(&service, first).expect("taken before the fault");
        let answer = wait(reply);
        assert!(
            answer.is_err(),
            "seed {seed}: a batch whose {fault:?} failed was acknowledged: {answer:?}"
        );
        let why = service.failed().expect("the service knows it failed");
        assert!(why.contains("write-ahead log"), "seed {seed}: {why}");
        match case.send(&service, first + 1) {
            Err(Refused::Stopped(reason)) => assert!(reason.contains("write-ahead log")),
            Err(other) => panic!("seed {seed}: refused for another reason: {other}"),
            Ok(reply) => panic!(
                "seed {seed}: a failed service took a batch: {:?}",
                wait(reply)
            ),
        }
        assert!(
            service.snapshot().is_err(),
            "seed {seed}: snapshot after a failure"
        );
        let closed = service.close();
        assert!(closed.is_err(), "seed {seed}: close reports the failure");
        // The restart: what the disk kept.
        let after = dir.crash(seed);
        let service = open(&plan, &after, &options).expect("reopen");
        for (k, answer) in send_everything(&service, &case) {
            if acked.contains(&k) {
                assert!(
                    answer.duplicate,
                    "seed {seed}: acknowledged batch {k} was lost"
                );
            }
        }
        same_state(&state(&service), &want, &format!("seed {seed}"))
            .unwrap_or_else(|e| panic!("{e}"));
        service.close().expect("a clean close");
        checked += 1;
    }
    assert_eq!(checked, 24);
}

/// What `serve --out` publishes must be durable: a view taken while a
/// batch's sync is under way holds that batch, so the day files wait for
/// `wait_durable`, which fails when the sync does (nothing published).
#[test]
fn published_views_wait_for_the_sync_of_what_they_hold() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let case = Case::new(7, 4);
    let dir = SimDir::new();
    let service = open(&plan, &dir, &options(512, 4)).expect("open");
    send_all(&service, &case, &[0, 1], 2).expect("acknowledged");
    service
        .wait_durable()
        .expect("what was acknowledged is durable");
    dir.fail_next(Fault::SyncData);
    let reply = case.send(&service, 2).expect("taken");
    let view = service.view(0).expect("a view");
    assert!(
        service.wait_durable().is_err(),
        "a view holding a batch whose sync failed was publishable"
    );
    drop(view);
    assert!(wait(reply).is_err());
    assert!(service.close().is_err());
}

/// One record's place in a log segment.
#[derive(Debug, Clone)]
struct Located {
    segment: String,
    offset: usize,
    len: usize,
    sequence: u64,
    /// The batch (index into the case) it holds.
    batch: usize,
}

/// Every record of every log segment in `dir`, in log order, parsed by
/// the layout in `store/src/wal.rs` (a 32-byte segment header, records
/// of a 32-byte head and `length` payload bytes).
fn records(dir: &SimDir, case: &Case) -> Vec<Located> {
    let mut out = Vec::new();
    for name in dir.list().expect("list") {
        if !(name.starts_with("wal-") && name.ends_with(".log")) {
            continue;
        }
        let bytes = dir.read(&name).expect("read");
        let mut at = 32;
        while at + 32 <= bytes.len() {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
            let sequence = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8"));
            let payload = &bytes[at + 32..at + 32 + len];
            let envelope = Envelope::decode(payload).expect("a whole envelope");
            let batch = case
                .batches
                .iter()
                .zip(&case.origins)
                .position(|(b, o)| b == envelope.records && *o == envelope.origin)
                .expect("a batch of the case");
            out.push(Located {
                segment: name.clone(),
                offset: at,
                len: 32 + len,
                sequence,
                batch,
            });
            at += 32 + len;
        }
    }
    out
}

/// A byte of `dir`'s file `name` flipped durably.
fn flip(dir: &SimDir, name: &str, offset: usize) {
    let byte = dir.read(name).expect("read")[offset];
    dir.poke(name, offset, byte ^ 0x41);
}

/// Every batch of `case` acknowledged into a fresh directory, no
/// snapshot; returns the directory as a restart finds it.
fn logged(plan: &Arc<Plan>, case: &Case, segment_bytes: u64) -> SimDir {
    let dir = SimDir::new();
    let service = open(plan, &dir, &options(segment_bytes, 8)).expect("open");
    send_everything(&service, case);
    // Everything acknowledged is synced: the cut keeps it all. (Taken
    // before the close, whose snapshot would cover the log.)
    let image = dir.crash(0);
    service.close().expect("a clean close");
    image
}

/// How the service names a record's origin in its messages.
fn origin_words(origin: &Origin) -> String {
    match origin {
        Origin::Client(client, id) => format!("client {} batch {id}", client.as_str()),
        Origin::Key(key) => format!("idempotency key {key}"),
        Origin::None => "a request without an idempotency key".to_owned(),
        Origin::Syslog(ids) => match ids.senders.as_slice() {
            [] => "syslog messages without ids".to_owned(),
            [one] => format!("syslog messages from {one}"),
            [one, rest @ ..] => format!("syslog messages from {one} and {} more", rest.len()),
        },
    }
}

/// Issue 43, item 5: a flipped byte in the last, complete record is
/// damage, not a torn tail: opening refuses naming segment, offset and the
/// record's origin; repair keeps a copy, serves every other record and
/// names the one it lost.
#[test]
fn a_flipped_byte_in_the_last_record_refuses_and_repair_keeps_the_rest() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..16u64 {
        let case = Case::new(seed, 10);
        let dir = logged(&plan, &case, 4096);
        let all = records(&dir, &case);
        assert_eq!(all.len(), 10);
        let last = all.last().expect("records").clone();
        let mut rng = Rng(seed);
        let at = rng.index(last.len);
        flip(&dir, &last.segment, last.offset + at);
        let error = format!(
            "{:#}",
            open(&plan, &dir, &options(4096, 8)).expect_err("damage refuses to open")
        );
        assert!(
            error.contains(&last.segment) && error.contains(&format!("offset {}", last.offset)),
            "seed {seed}: {error}"
        );
        // Past the envelope's head (version, origin, stream, batch id),
        // the origin reads back whole.
        if at >= 32 + 64 + 12 + 128 {
            let words = origin_words(&case.origins[last.batch]);
            assert!(error.contains(&words), "seed {seed}: no {words} in {error}");
        }
        let mut repair = options(4096, 8);
        repair.repair = true;
        let service = open(&plan, &dir, &repair).expect("repair opens");
        assert_eq!(service.opened().cut, None, "seed {seed}");
        let repaired = service.opened().repaired.clone().expect("a repair");
        assert!(
            repaired.contains(&format!("lost 1 record: sequence {}", last.sequence)),
            "seed {seed}: {repaired}"
        );
        assert!(
            dir.list()
                .expect("list")
                .contains(&format!("{}.damaged-at-{}", last.segment, last.offset)),
            "seed {seed}: no copy"
        );
        let kept: Vec<usize> = all[..all.len() - 1].iter().map(|r| r.batch).collect();
        same_state(
            &state(&service),
            &executed(&plan, &case, kept),
            "the kept records",
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // The lost batch, resent, is new; everything else is a duplicate.
        for (k, answer) in send_everything(&service, &case) {
            assert_eq!(answer.duplicate, k != last.batch, "seed {seed}: batch {k}");
        }
        same_state(
            &state(&service),
            &executed(&plan, &case, 0..10),
            "after resending",
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        service.close().expect("a clean close");
    }
}

#[test]
fn a_flipped_byte_mid_log_refuses_to_open_and_repair_opens() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..16u64 {
        let case = Case::new(seed, 12);
        // Small segments: the damage is sometimes in an older segment.
        let dir = logged(&plan, &case, 1024);
        let all = records(&dir, &case);
        assert_eq!(all.len(), 12);
        let mut rng = Rng(seed);
        // Any record but the last: a valid one follows it.
        let bad = all[rng.index(all.len() - 1)].clone();
        flip(&dir, &bad.segment, bad.offset + rng.index(bad.len));
        let error = format!(
            "{:#}",
            open(&plan, &dir, &options(1024, 8)).expect_err("damage refuses to open")
        );
        assert!(
            error.contains(&bad.segment) && error.contains(&format!("offset {}", bad.offset)),
            "seed {seed}: the error does not name {} at offset {}: {error}",
            bad.segment,
            bad.offset
        );
        let mut repair = options(1024, 8);
        repair.repair = true;
        let service = open(&plan, &dir, &repair).expect("repair opens");
        let repaired = service.opened().repaired.clone().expect("a repair");
        assert!(repaired.contains(&bad.segment), "seed {seed}: {repaired}");
        // Issue 43, item 6: every intact record is kept, those after the
        // damage too; exactly the damaged one is named lost.
        assert!(
            repaired.contains(&format!("lost 1 record: sequence {}", bad.sequence)),
            "seed {seed}: {repaired}"
        );
        let kept: Vec<usize> = all
            .iter()
            .filter(|r| r.sequence != bad.sequence)
            .map(|r| r.batch)
            .collect();
        same_state(
            &state(&service),
            &executed(&plan, &case, kept.clone()),
            "repaired",
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for (k, answer) in send_everything(&service, &case) {
            assert_eq!(
                answer.duplicate,
                kept.contains(&k),
                "seed {seed}: batch {k}"
            );
        }
        same_state(
            &state(&service),
            &executed(&plan, &case, 0..12),
            "after resending",
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        service.close().expect("a clean close");
    }
}

#[test]
fn a_flipped_byte_in_the_newest_snapshots_falls_back_and_the_state_is_exact() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..12u64 {
        let n = 16;
        let case = Case::new(seed, n);
        let want = executed(&plan, &case, 0..n);
        let options = options(512, 8);
        let dir = SimDir::new();
        let service = open(&plan, &dir, &options).expect("open");
        // Four snapshots (one more than are kept) with batches between.
        for part in 0..4 {
            let ks: Vec<usize> = (part * n / 4..(part + 1) * n / 4).collect();
            send_all(&service, &case, &ks, 3).expect("acknowledged");
            service.snapshot().expect("a snapshot");
        }
        let base = dir.crash(seed);
        service.close().expect("a clean close");
        let mut snapshots: Vec<String> = base
            .list()
            .expect("list")
            .into_iter()
            .filter(|name| name.starts_with("snap-") && name.ends_with(".snap"))
            .collect();
        snapshots.sort();
        assert_eq!(snapshots.len(), cardinal_store::SNAPSHOTS_KEPT);
        // Damage the newest one or two: the oldest kept still opens.
        for damaged in 1..cardinal_store::SNAPSHOTS_KEPT {
            let dir = base.crash(0);
            let mut rng = Rng(seed ^ damaged as u64);
            for name in snapshots.iter().rev().take(damaged) {
                let len = dir.len_of(name).expect("a snapshot file");
                flip(&dir, name, rng.index(len));
            }
            let service = open(&plan, &dir, &options).expect("falls back");
            let opened = service.opened().clone();
            assert_eq!(opened.skipped.len(), damaged, "seed {seed}: {opened:?}");
            assert_eq!(
                opened.snapshot.as_deref(),
                Some(snapshots[snapshots.len() - 1 - damaged].as_str()),
                "seed {seed}"
            );
            same_state(&state(&service), &want, "fallen back")
                .unwrap_or_else(|e| panic!("seed {seed}, {damaged} damaged: {e}"));
            for (k, answer) in send_everything(&service, &case) {
                assert!(answer.duplicate, "seed {seed}: batch {k} was lost");
            }
            same_state(&state(&service), &want, "after resending")
                .unwrap_or_else(|e| panic!("seed {seed}, {damaged} damaged: {e}"));
            service.close().expect("a clean close");
        }
    }
}

fn origins() -> impl Strategy<Value = Origin> {
    prop_oneof![
        Just(Origin::None),
        ("[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}", any::<u64>()).prop_map(|(id, batch)| {
            Origin::Client(ClientId::new(&id).expect("a valid id"), BatchId(batch))
        }),
        "[!-~]{1,128}".prop_map(Origin::Key),
    ]
}

proptest! {
    #![proptest_config(Config {
        cases: 512,
        rng_seed: RngSeed::Fixed(0xe7e1_0be5),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn envelopes_round_trip_and_cut_ones_are_refused(
        origin in origins(),
        stream in "[a-z_][a-z0-9_]{0,63}",
        records in prop::collection::vec(any::<u8>(), 0..200),
        header in any::<bool>(),
    ) {
        let envelope = Envelope { origin, stream: &stream, records: &records, header };
        let bytes = envelope.encode();
        let decoded = Envelope::decode(&bytes).expect("decodes");
        prop_assert_eq!(&decoded, &envelope);
        // The records start after the fixed fields: a cut before them is
        // refused, a cut inside them is the log's checksum's to catch.
        let head = bytes.len() - records.len();
        for cut in 0..head {
            prop_assert!(Envelope::decode(&bytes[..cut]).is_err(), "a cut at {} of {}", cut, head);
        }
        // A damaged version or origin kind is refused.
        let mut bad = bytes.clone();
        bad[0] ^= 0xff;
        prop_assert!(Envelope::decode(&bad).is_err());
        let mut bad = bytes.clone();
        bad[1] = 3 + bad[1] % 250;
        prop_assert!(Envelope::decode(&bad).is_err());
    }

    #[test]
    fn garbage_envelopes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        if let Ok(envelope) = Envelope::decode(&bytes) {
            // What decodes reads back the same once encoded; a client's
            // batch encodes to the very bytes (no origin is unused there).
            let again = envelope.encode();
            prop_assert_eq!(Envelope::decode(&again).expect("re-decodes"), envelope.clone());
            if matches!(envelope.origin, Origin::Client(..)) {
                prop_assert_eq!(again, bytes);
            }
        }
    }
}

/// Issue 43, item 2: a batch's header line is checked at admission (a
/// missing column refused, naming it, with nothing logged), kept in the
/// log with the records so that a restart after a crash replays the batch
/// under it to the same state, and a restart under a schema the logged
/// header no longer fits says which record rather than failing a worker.
#[test]
fn headed_batches_are_checked_at_admission_and_replayed_under_their_header() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let dir = SimDir::new();
    let service = open(&plan, &dir, &options(1 << 20, 8)).expect("open");
    let body = "kind,revenue,ts,user_id,b\r\n\
                click,1.5,2026-11-01T00:00:00Z,7,1\n\
                view,2,2026-11-01T01:00:00Z,8,1\n";
    let taken = service.ingest(Origin::None, "ev", Format::Csv, true, body.as_bytes());
    let acked = wait(taken.expect("taken")).expect("acked");
    assert_eq!((acked.accepted, acked.rejected), (2, 0));
    let lacking = b"ts,b,user_id,kind\n2026-11-01T00:00:00Z,1,7,click\n";
    let refused = service
        .ingest(Origin::None, "ev", Format::Csv, true, lacking)
        .expect_err("refused");
    assert!(matches!(refused, Refused::BadHeader { .. }), "{refused}");
    assert!(refused.to_string().contains("\"revenue\""), "{refused}");
    // The same records in the declared order, without a header: the state
    // a headed batch must reach.
    let declared = Plan::compile(SQL).expect("compiles");
    let plain = "2026-11-01T00:00:00Z,1,7,click,1.5\n2026-11-01T01:00:00Z,1,8,view,2\n";
    let want = {
        let other = SimDir::new();
        let service = open(&Arc::new(declared), &other, &options(1 << 20, 8)).expect("open");
        let taken = service.ingest(Origin::None, "ev", Format::Csv, false, plain.as_bytes());
        wait(taken.expect("taken")).expect("acked");
        let want = state(&service);
        service.close().expect("a clean close");
        want
    };
    assert_eq!(state(&service), want);
    let image = dir.crash(0);
    service.close().expect("a clean close");
    // Each open below is on a copy: a close's snapshot would cover the log.
    let service = open(&plan, &image.crash(0), &options(1 << 20, 8)).expect("reopen");
    assert_eq!(
        service.opened().replayed,
        1,
        "only the admitted batch was logged"
    );
    assert_eq!(state(&service), want, "replayed under its header");
    service.close().expect("a clean close");
    // A schema whose `ev` has another column the logged header lacks.
    let changed = SQL.replace("revenue DOUBLE)", "revenue DOUBLE, site TEXT)");
    let changed = Arc::new(Plan::compile(&changed).expect("compiles"));
    let error = open(&changed, &image.crash(0), &options(1 << 20, 8)).expect_err("refused");
    let text = format!("{error:#}");
    assert!(text.contains("log record 1"), "{text}");
    assert!(text.contains("\"site\""), "{text}");
}

fn wal_segments(dir: &SimDir) -> Vec<String> {
    let mut names: Vec<String> = dir
        .list()
        .expect("list")
        .into_iter()
        .filter(|name| name.starts_with("wal-") && name.ends_with(".log"))
        .collect();
    names.sort();
    names
}

fn snapshot_files(dir: &SimDir) -> Vec<String> {
    let mut names: Vec<String> = dir
        .list()
        .expect("list")
        .into_iter()
        .filter(|name| name.starts_with("snap-") && name.ends_with(".snap"))
        .collect();
    names.sort();
    names
}

/// Sends `rest` (none acknowledged before), then restarts from a power
/// cut and checks that all `n` batches are there once each and every
/// resend is a duplicate.
fn the_rest_survives_a_restart(
    plan: &Arc<Plan>,
    dir: &SimDir,
    service: Service,
    case: &Case,
    seed: u64,
) {
    let n = case.batches.len();
    let rest: Vec<usize> = (n / 2..n).collect();
    for (k, answer) in send_all(&service, case, &rest, 4).expect("acknowledged") {
        assert!(
            !answer.duplicate,
            "seed {seed}: batch {k} taken for a duplicate"
        );
    }
    let image = dir.crash(seed);
    service.close().expect("a clean close");
    let service = open(plan, &image, &options(1 << 20, 8)).expect("reopens");
    same_state(
        &state(&service),
        &executed(plan, case, 0..n),
        "after a restart",
    )
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for (k, answer) in send_everything(&service, case) {
        assert!(answer.duplicate, "seed {seed}: batch {k} counted twice");
    }
    service.close().expect("a clean close");
    // Snapshots only moved forward: the newest is the one loaded next.
    let newest = snapshot_files(&image).pop().expect("a snapshot");
    let service = open(plan, &image, &options(1 << 20, 8)).expect("reopens");
    assert_eq!(service.opened().snapshot.as_deref(), Some(newest.as_str()));
    same_state(
        &state(&service),
        &executed(plan, case, 0..n),
        "the newest snapshot",
    )
    .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    service.close().expect("a clean close");
}

/// Issue 43, item 6b: a repair that cuts the last record, which the
/// newest snapshot already covers, leaves a log that ends below the
/// snapshot's positions. The log moves forward past them, so batches
/// acknowledged after the repair survive a restart (they reused
/// sequences the snapshot counts as read, and were lost).
#[test]
fn a_repair_below_the_snapshot_moves_the_log_forward() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..6u64 {
        let n = 12;
        let case = Case::new(seed, n);
        let dir = SimDir::new();
        let service = open(&plan, &dir, &options(1 << 20, 8)).expect("open");
        let first: Vec<usize> = (0..n / 2).collect();
        send_all(&service, &case, &first, 4).expect("acknowledged");
        service.snapshot().expect("a snapshot");
        let image = dir.crash(0);
        service.close().expect("a clean close");
        let last = records(&image, &case).pop().expect("records");
        flip(&image, &last.segment, last.offset + 40);
        let mut repair = options(1 << 20, 8);
        repair.repair = true;
        let service = open(&plan, &image, &repair).expect("repair opens");
        let moved = service.opened().moved.clone().expect("moved forward");
        assert!(moved.contains("nothing is missing"), "seed {seed}: {moved}");
        same_state(&state(&service), &executed(&plan, &case, first), "repaired")
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        the_rest_survives_a_restart(&plan, &image, service, &case, seed);
    }
}

/// Issue 43, item 6b: log segments deleted while the snapshots survive.
/// When the snapshot covers every stream through its highest position,
/// the log starts past it; when a damaged newer snapshot names more than
/// the loaded one covers, opening refuses and says what is missing, and
/// `--repair` goes on.
#[test]
fn a_missing_log_starts_past_the_snapshots_or_refuses() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..6u64 {
        let n = 12;
        let case = Case::new(seed, n);
        let dir = SimDir::new();
        let service = open(&plan, &dir, &options(1 << 20, 8)).expect("open");
        let first: Vec<usize> = (0..n / 2).collect();
        send_all(&service, &case, &first, 4).expect("acknowledged");
        service.close().expect("a clean close");
        for name in wal_segments(&dir) {
            dir.remove(&name).expect("remove");
        }
        let service = open(&plan, &dir, &options(1 << 20, 8)).expect("opens");
        let moved = service.opened().moved.clone().expect("moved forward");
        assert!(moved.contains("nothing is missing"), "seed {seed}: {moved}");
        same_state(&state(&service), &executed(&plan, &case, first), "no log")
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        the_rest_survives_a_restart(&plan, &dir, service, &case, seed);
    }
    // Two snapshots; the newer damaged, and the log gone: what it held
    // after the older one exists nowhere whole.
    let case = Case::new(99, 12);
    let dir = SimDir::new();
    let service = open(&plan, &dir, &options(1 << 20, 8)).expect("open");
    send_all(&service, &case, &(0..6).collect::<Vec<_>>(), 4).expect("acknowledged");
    service.snapshot().expect("a snapshot");
    send_all(&service, &case, &(6..12).collect::<Vec<_>>(), 4).expect("acknowledged");
    service.close().expect("a clean close");
    let snapshots = snapshot_files(&dir);
    assert_eq!(snapshots.len(), 2);
    flip(&dir, &snapshots[1], 50);
    for name in wal_segments(&dir) {
        dir.remove(&name).expect("remove");
    }
    let error = format!(
        "{:#}",
        open(&plan, &dir, &options(1 << 20, 8)).expect_err("refuses")
    );
    assert!(
        error.contains("below sequence") && error.contains(&snapshots[1]),
        "{error}"
    );
    assert!(error.contains("--repair"), "{error}");
    let mut repair = options(1 << 20, 8);
    repair.repair = true;
    let service = open(&plan, &dir, &repair).expect("repair opens");
    let moved = service.opened().moved.clone().expect("moved forward");
    assert!(moved.contains("--repair moved"), "{moved}");
    same_state(
        &state(&service),
        &executed(&plan, &case, 0..6),
        "the older snapshot",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    service.close().expect("a clean close");
}

/// Issue 43, item 8: a damaged only snapshot does not stop a start when
/// the log reaches back to sequence 1: the state is rebuilt from the log
/// (deduplication included), and the damaged file is set aside. When the
/// log does not reach back, the refusal names the files to move aside.
#[test]
fn a_damaged_only_snapshot_falls_back_to_the_log() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    for seed in 0..6u64 {
        let n = 12;
        let case = Case::new(seed, n);
        let dir = SimDir::new();
        let service = open(&plan, &dir, &options(1 << 20, 8)).expect("open");
        send_everything(&service, &case);
        service.close().expect("a clean close");
        let snapshots = snapshot_files(&dir);
        assert_eq!(snapshots.len(), 1);
        let len = dir.len_of(&snapshots[0]).expect("a snapshot");
        flip(&dir, &snapshots[0], Rng(seed).index(len));
        let service = open(&plan, &dir, &options(1 << 20, 8)).expect("falls back");
        let opened = service.opened().clone();
        assert!(
            opened
                .fallback
                .as_deref()
                .is_some_and(|f| f.contains("reaches back to sequence 1")),
            "seed {seed}: {opened:?}"
        );
        assert_eq!(opened.snapshot, None);
        assert_eq!(
            opened.snapshots_set_aside,
            vec![format!("{}.damaged", snapshots[0])]
        );
        same_state(
            &state(&service),
            &executed(&plan, &case, 0..n),
            "from the log",
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for (k, answer) in send_everything(&service, &case) {
            assert!(answer.duplicate, "seed {seed}: batch {k} counted twice");
        }
        service.close().expect("a clean close");
    }
    // Small segments and a snapshot midway: the log was trimmed, so it
    // cannot rebuild the state alone.
    let case = Case::new(7, 24);
    let dir = SimDir::new();
    let service = open(&plan, &dir, &options(1024, 8)).expect("open");
    send_all(&service, &case, &(0..12).collect::<Vec<_>>(), 4).expect("acknowledged");
    service.snapshot().expect("a snapshot");
    send_all(&service, &case, &(12..24).collect::<Vec<_>>(), 4).expect("acknowledged");
    service.close().expect("a clean close");
    let snapshots = snapshot_files(&dir);
    for name in &snapshots {
        flip(&dir, name, 40);
    }
    let error = format!(
        "{:#}",
        open(&plan, &dir, &options(1024, 8)).expect_err("refuses")
    );
    assert!(error.contains("move these files"), "{error}");
    for name in snapshots.iter().chain(&wal_segments(&dir)) {
        assert!(error.contains(name.as_str()), "{name} not named: {error}");
    }
}
