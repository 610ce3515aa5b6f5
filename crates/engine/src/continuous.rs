//! The continuous engine: started from a plan, fed batches of one stream's
//! records from any thread, folding them on its own workers while it runs,
//! and answering with a merged view as of a batch boundary.
//!
//! ```text
//!  producers (any threads)                   workers 1..N (own threads)
//!  submit(bytes) ──lock──> seq = next++  ──> queue w (bounded) ──> parse,
//!                          w = a queue         ...                  fold into
//!                          with room            queue N             own partials
//!
//!  snapshot():  lock submit, S = next seq, put a hand-over marker at the
//!               end of every queue, unlock          (ingest goes on)
//!               each worker, reaching its marker: folds what it holds back,
//!               hands its groups over (a move), goes on with empty ones
//!               merge the hand-overs into the base, in worker order
//!               -> the view: every batch with seq < S, and no other
//! ```
//!
//! Every batch before the markers sits ahead of them in some queue, and
//! every batch after them behind, so what the workers hand over is exactly
//! the batches numbered below `S`: a write-ahead log may drop what a saved
//! view covers. Ingest pauses only while a worker moves its groups out;
//! the merge runs on the caller's thread while the workers go on. The view
//! is the base itself, borrowed under its lock: reading it copies nothing,
//! and the next snapshot waits until it is dropped.
//!
//! Batches hold whole records of the stream, in its declared format. A
//! CSV batch may carry its own header ([`Records::header`]): its first
//! line names the columns, matched to the declared ones by name in any
//! order (as `cardinal run` reads a file's header), and the rest is read
//! under it. A batch without one is read under the header
//! [`ContinuousOptions::header`] gives (by default the declared columns
//! in order). Each worker remembers the header its parser is under and
//! reads a batch's only when it differs, so a client sending one header
//! with every batch costs a comparison of a line per batch. A header is
//! checked when a batch is admitted ([`Continuous::check_header`]), never
//! first by a worker: a worker that meets one it cannot read stops the
//! engine. A full queue blocks [`Continuous::submit`] and fails
//! [`Continuous::try_submit`] with [`SubmitError::Full`]: the caller decides whether to
//! wait (a socket stops reading) or refuse (HTTP answers 503).
//!
//! The merged answer equals [`crate::execute`]'s over the same records for
//! every exact aggregate and every HyperLogLog, whatever the interleaving
//! (a union does not depend on order); order-dependent sketches (KLL
//! quantiles' compactions) agree within their error bounds.
//!
//! Attribution: the workers gather touch points and conversions as they
//! fold and hand them over with their groups; one attribution thread, the
//! chains' single writer, absorbs them in worker order at each snapshot
//! and releases those at or before the [`FRONTIER_EVENTS`]-th newest event
//! time absorbed less [`ContinuousOptions::attribution_lateness_ms`] (module
//! [`crate::attribute`]): credit rows go into the credit summaries at
//! once, and an event behind a released frontier is applied late and
//! counted. [`Continuous::finish`] releases everything, so input in time
//! order ends exactly where `execute` ends.
//!
//! A snapshot's state is saved as one rollup image per summary
//! ([`View::images`]) and an engine starts from it again with
//! [`Continuous::start_from`]; batches are numbered from 0 in each life
//! of an engine, and the caller (a server's log) keeps the positions.
//! The workers' queues are `queue.rs`'s: a producer that finds them
//! full is woken once a queue has drained to half, not at every batch.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use cardinal_parse::Batch;
use cardinal_rollup::{BytesGauge, Limits, MemoryBudget, Rollup, Shape};
use cardinal_route::{Format, Plan, Summary};
use cardinal_source::{CHUNK_BYTES_MAX, Framing, Input, LineReader};

use cardinal_chains::Router;

use crate::attribute::{self, Collected, Collector, Setup, Stats};
use crate::counts::Counts;
use crate::error::{budget_error, group_limit_error};
use crate::fold::Fold;
use crate::jobs::framing_of;
use crate::parser::Parser;
use crate::plan::{pick_stream, shape_of};
use crate::progress::Progress;
use crate::queue::{PushError, Queue};
use crate::rejects::{LINE_TOO_LONG, REJECTS_SHOWN_MAX};
use crate::worker::fold_chunk;

/// Batches one worker's queue holds by default before `submit` waits.
pub const QUEUE_BATCHES_DEFAULT: usize = 64;
/// The most batches a worker's queue may hold.
pub const QUEUE_BATCHES_MAX: usize = 1 << 16;

/// How to run a continuous engine.
#[derive(Debug, Clone)]
pub struct ContinuousOptions {
    /// The stream batches belong to (default: the only one declared).
    pub stream: Option<String>,
    /// Worker threads, at least 1.
    pub threads: usize,
    /// Batches each worker's queue holds (1..=[`QUEUE_BATCHES_MAX`]).
    pub queue_batches: usize,
    /// Group limit and retention of every summary.
    pub limits: Limits,
    /// The header a CSV stream's batches are read under, without its
    /// newline; `None`: the declared column names in order.
    pub header: Option<Vec<u8>>,
    /// Bytes the workers' partial rollups and the merged state may hold
    /// together: a worker past it stops the engine, and so does a
    /// snapshot whose merge passes it, naming the summary that holds most.
    pub memory_max: u64,
    /// Counters the workers publish to.
    pub progress: Option<Arc<Progress>>,
    /// How far behind where the stream is (the [`FRONTIER_EVENTS`]-th
    /// newest event time seen) an attribution releases its held events at
    /// a snapshot ([`ATTRIBUTION_LATENESS_MS_DEFAULT`]).
    pub attribution_lateness_ms: u64,
    /// A failpoint for tests: a batch holding these bytes panics the
    /// worker folding it, as a bug would. [`ContinuousOptions::new`] takes
    /// it from [`FAILPOINT_FOLD_PANIC`] (unset: `None`).
    pub panic_on: Option<Vec<u8>>,
    /// A failpoint for tests: each worker sleeps this long before it folds
    /// a batch, a slow fold (a source's back-pressure is tested with it).
    /// [`ContinuousOptions::new`] takes it from [`FAILPOINT_FOLD_DELAY_MS`]
    /// (unset: none).
    pub delay_per_batch: Option<std::time::Duration>,
}

/// The attribution frontier trails the FRONTIER_EVENTS-th newest event
/// time absorbed (less the lateness), not the newest: a few events far
/// ahead of the stream (a clock set wrong) cannot make the rest late.
/// Until that many events have arrived, nothing is released before the
/// end.
pub const FRONTIER_EVENTS: usize = 128;

/// The name under which [`View::images`] gives the attributions' state:
/// not a summary name (those never start with a dot).
pub const ATTRIBUTION_IMAGE: &str = ".attribution";

/// The default [`ContinuousOptions::attribution_lateness_ms`]: an hour.
/// Touch points and conversions that arrive later than this behind the
/// newest are applied out of time order, and counted as late.
pub const ATTRIBUTION_LATENESS_MS_DEFAULT: u64 = 3_600_000;

impl ContinuousOptions {
    /// `threads` workers, default queues, no limits, a memory budget of
    /// `memory_max` bytes.
    pub fn new(threads: usize, memory_max: u64) -> Self {
        Self {
            stream: None,
            threads,
            queue_batches: QUEUE_BATCHES_DEFAULT,
            limits: Limits::default(),
            header: None,
            memory_max,
            progress: None,
            attribution_lateness_ms: ATTRIBUTION_LATENESS_MS_DEFAULT,
            panic_on: std::env::var_os(FAILPOINT_FOLD_PANIC)
                .filter(|v| !v.is_empty())
                .map(std::ffi::OsString::into_encoded_bytes),
            delay_per_batch: std::env::var(FAILPOINT_FOLD_DELAY_MS)
                .ok()
                .and_then(|ms| ms.parse().ok())
                .map(std::time::Duration::from_millis),
        }
    }
}

/// What became of one batch: records folded and rejected, and the first
/// rejects' lines (at most 10; the rest are counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The batch's number.
    pub seq: EngineSeq,
    /// Records folded.
    pub records: u64,
    /// Records rejected.
    pub rejects: u64,
    /// The first rejects: reason, position and the line.
    pub first_rejects: Vec<String>,
}

/// The promise of a batch's [`Outcome`], kept once a worker has folded it.
#[derive(Debug)]
pub struct Receipt(Receiver<Outcome>, Arc<Shared>);

impl Receipt {
    /// Waits until the batch is folded; an error if the engine stopped
    /// first.
    pub fn wait(self) -> Result<Outcome> {
        self.0.recv().map_err(|_| {
            let failed = self.1.failed.lock().unwrap_or_else(PoisonError::into_inner);
            match &*failed {
                Some(why) => anyhow!("the engine stopped before the batch was folded: {why}"),
                None => anyhow!("the engine stopped before the batch was folded"),
            }
        })
    }
}

/// A batch's records, as a client sent them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// Whole records of the stream.
    pub bytes: Vec<u8>,
    /// CSV only: the first line of `bytes` is a header naming the
    /// columns of the rest ([`split_header`]), checked with
    /// [`Continuous::check_header`] before the batch is submitted.
    pub header: bool,
}

impl From<Vec<u8>> for Records {
    /// Records without a header line.
    fn from(bytes: Vec<u8>) -> Records {
        Records {
            bytes,
            header: false,
        }
    }
}

/// The most bytes a batch's header line may hold, newline excluded: 64 KiB,
/// room for the parser's `FIELDS_MAX` (1,024) columns with names of the
/// dialect's longest (64 characters). A client cuts batches so that one
/// with this header fits the least frame a server advertises.
pub const HEADER_LINE_BYTES_MAX: usize = 64 << 10;

const _: () =
    assert!(HEADER_LINE_BYTES_MAX >= cardinal_parse::FIELDS_MAX * cardinal_route::NAME_CHARS_MAX);

/// A headed batch's header line (without its line end) and the records
/// after it. A header line ends at its first newline: a header name that
/// holds a newline is not supported (its quote is then unterminated, and
/// [`Continuous::check_header`] refuses it).
pub fn split_header(bytes: &[u8]) -> (&[u8], &[u8]) {
    let (line, rest) = match bytes.iter().position(|&b| b == b'\n') {
        Some(end) => (&bytes[..end], &bytes[end + 1..]),
        None => (bytes, &bytes[bytes.len()..]),
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    debug_assert!(line.len() + rest.len() <= bytes.len());
    (line, rest)
}

/// The number of a batch a continuous engine took, in the order it took
/// them: 0 for the first batch of each life of an engine (a restart from
/// an image counts from 0 again), one more for each next. What
/// [`Continuous::submit`] returns, what a [`View`] covers up to and what
/// [`Continuous::failed_batch`] names; a caller that logs batches keeps
/// the map from these numbers to its own positions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineSeq(u64);

impl EngineSeq {
    /// The number of the first batch of an engine's life.
    pub const FIRST: EngineSeq = EngineSeq(0);

    /// The batch numbered `n`.
    pub const fn new(n: u64) -> EngineSeq {
        EngineSeq(n)
    }

    /// The number, as an integer.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The number of the batch after this one.
    #[must_use]
    pub fn next(self) -> EngineSeq {
        EngineSeq(
            self.0
                .checked_add(1)
                .expect("an engine takes fewer than 2^64 batches"),
        )
    }
}

impl std::fmt::Display for EngineSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<EngineSeq> for u64 {
    fn from(seq: EngineSeq) -> u64 {
        seq.0
    }
}

/// Why a continuous engine did not take a batch.
pub enum SubmitError {
    /// Every worker's queue is full (only from [`Continuous::try_submit`]
    /// and [`Continuous::try_submit_with_receipt`]): the records come
    /// back whole, to offer again once the workers have caught up, or to
    /// refuse (a socket stops reading, HTTP answers 503).
    Full(Records),
    /// The engine has stopped and takes no batch again: a worker or the
    /// attribution thread failed (why, as [`Continuous::failure`] tells
    /// it, when it was recorded). Start a new engine, from the last saved
    /// view.
    Stopped(Option<String>),
}

impl std::fmt::Debug for SubmitError {
    /// The records' length, not their bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Full(records) => f
                .debug_struct("Full")
                .field("bytes", &records.bytes.len())
                .field("header", &records.header)
                .finish(),
            SubmitError::Stopped(why) => f.debug_tuple("Stopped").field(why).finish(),
        }
    }
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Full(records) => write!(
                f,
                "every worker's queue is full: the batch of {} bytes was not taken; \
                 offer it again once the engine has caught up",
                records.bytes.len()
            ),
            SubmitError::Stopped(Some(why)) => write!(f, "the engine stopped: {why}"),
            SubmitError::Stopped(None) => f.write_str("the engine stopped"),
        }
    }
}

impl std::error::Error for SubmitError {}

/// What a worker's queue carries.
enum Message {
    /// Records to fold, numbered by submission; what became of them goes
    /// to `receipt`, if any.
    Batch {
        seq: EngineSeq,
        bytes: Vec<u8>,
        /// The first line of `bytes` is the batch's header.
        header: bool,
        receipt: Option<SyncSender<Outcome>>,
    },
    /// Hand the partials over on this channel.
    HandOver(SyncSender<HandOver>),
}

/// A worker's groups and counts since its last hand-over.
struct HandOver {
    rollups: Vec<Rollup>,
    counts: Counts,
    /// The attributions' touch points and conversions it gathered.
    collected: Option<Collected>,
    /// How long the worker stopped folding to hand them over.
    paused: Duration,
}

/// What the attribution thread is asked: absorb the workers' events (in
/// worker order) and release those the frontier has passed (every one,
/// when `last`), then hand over the credit summaries' groups.
struct Release {
    collected: Vec<Collected>,
    last: bool,
    /// Whether to hand over an image of the attributions' state too.
    image: bool,
    reply: SyncSender<Result<CreditHandOver>>,
}

/// The credit summaries' groups since the last hand-over, and the counts
/// of the attributions.
struct CreditHandOver {
    rollups: Vec<Rollup>,
    stats: Vec<Stats>,
    image: Option<Vec<u8>>,
}

/// The thread that owns the attributions' chains (their single writer).
struct Attributor {
    inbox: SyncSender<Release>,
    thread: JoinHandle<()>,
}

/// The submitting side, under one lock: numbering and queue order agree.
struct Submit {
    next_seq: EngineSeq,
    /// The queue the next batch tries first (round robin).
    next_queue: usize,
    queues: Vec<Arc<Queue<Message>>>,
}

/// The merged state: everything handed over so far.
#[derive(Debug, Default)]
struct Base {
    rollups: Vec<Rollup>,
    counts: Counts,
    covers: EngineSeq,
    /// The longest a worker stopped folding at the last snapshot.
    paused: Duration,
    /// Whether any hand-over has been merged (else the rollups are as
    /// started: empty).
    merged: bool,
    /// Per attribution over the stream, its counts so far.
    attribution_stats: Vec<Stats>,
    /// The attributions' state as of the last snapshot taken to be saved
    /// ([`Continuous::snapshot_to_save`]); `None` after any other.
    attribution_image: Option<Vec<u8>>,
    /// Whether an attribution reads the stream.
    attributes: bool,
    /// The bytes of each merged rollup, as reported to the memory budget.
    gauges: Vec<BytesGauge>,
}

/// What the workers share.
#[derive(Debug)]
struct Shared {
    plan: Arc<Plan>,
    stream: usize,
    limits: Limits,
    header: Option<Vec<u8>>,
    shown: AtomicU64,
    budget: MemoryBudget,
    progress: Arc<Progress>,
    /// The first failure of a worker, for the callers that find it gone.
    failed: Mutex<Option<String>>,
    /// The batch whose fold panicked, if one did ([`Continuous::failed_batch`]).
    failed_batch: Mutex<Option<EngineSeq>>,
    /// [`FAILPOINT_FOLD_PANIC`]'s value, read once at start.
    panic_on: Option<Vec<u8>>,
    /// [`ContinuousOptions::delay_per_batch`].
    delay_per_batch: Option<std::time::Duration>,
    /// How each attribution routes users to its chains' shard groups
    /// (empty when none reads the stream).
    routing: Vec<(Router, usize)>,
    threads: usize,
    attribution_lateness_ms: u64,
}

impl Shared {
    /// Records why a thread of the engine stopped, unless one already has:
    /// the first failure is the one callers are told.
    fn fail(&self, why: impl FnOnce() -> String) {
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed.get_or_insert_with(why);
    }

    /// Records that folding batch `seq` panicked (the first such batch).
    fn fail_batch(&self, seq: EngineSeq) {
        let mut failed = self
            .failed_batch
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        failed.get_or_insert(seq);
    }
}

/// The engine's error once its attributions' chains and held events,
/// with its rollups, pass the memory budget.
fn attribution_budget_error(bytes: u64, bytes_max: u64) -> anyhow::Error {
    anyhow!(
        "the engine reached --memory-max ({} MiB): the attributions' chains and held events \
         hold {} MiB beside the rollups; raise --memory-max, or shorten the attribution's \
         lookback (chains hold every user seen within it)",
        bytes_max >> 20,
        bytes >> 20
    )
}

/// A failpoint for tests of what follows a bug: with this environment
/// variable set to some text, a batch holding that text panics the worker
/// that folds it, as a bug would ([`ContinuousOptions::panic_on`]).
/// Recovery tests of real processes use it.
pub const FAILPOINT_FOLD_PANIC: &str = "CARDINAL_FAILPOINT_FOLD_PANIC";

/// The environment variable of [`ContinuousOptions::delay_per_batch`]:
/// milliseconds each worker sleeps before folding a batch (tests only).
pub const FAILPOINT_FOLD_DELAY_MS: &str = "CARDINAL_FAILPOINT_FOLD_DELAY_MS";

/// The message a panic carried, as text.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Folds one submitted batch. One that fits a chunk is folded as one;
/// a larger one is read as a file is, by a [`LineReader`] cutting it at
/// record ends with the stream's framing (quoted newlines kept), so a
/// batch of any size the caller admits folds, and a record longer than
/// [`cardinal_source::LINE_BYTES_MAX`] is skipped and rejected as in a
/// run (`line too long`), not a failure.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker's context for one batch, as in `fold_chunk`"
)]
fn fold_batch<'p>(
    name: &Arc<str>,
    bytes: Vec<u8>,
    start: usize,
    framing: Framing,
    parser: &mut Parser,
    input: u32,
    batch: &mut Batch,
    fold: &mut Fold<'_>,
    collector: &mut Option<Collector<'p>>,
    tap: &mut crate::progress::Tap<'_>,
) -> Result<()> {
    let records = &bytes[start..];
    if records.len() <= CHUNK_BYTES_MAX {
        batch.chunk_mut().set(name, None, 0, records);
        return fold_chunk(parser, input, batch, fold, collector, None, tap);
    }
    let mut cursor = std::io::Cursor::new(bytes);
    cursor.set_position(start as u64);
    let mut reader = LineReader::new(Input::plain(Arc::clone(name), cursor)).with_framing(framing);
    loop {
        match reader.read_chunk(batch.chunk_mut()) {
            Ok(true) => fold_chunk(parser, input, batch, fold, collector, None, tap)?,
            Ok(false) => return Ok(()),
            Err(e) if e.is_recoverable() => {
                fold.counts.bytes += e.skipped_bytes();
                fold.reject(LINE_TOO_LONG, &e.to_string());
            }
            // Bytes in memory read without fail.
            Err(e) => return Err(e.into()),
        }
    }
}

/// A running engine over one stream of a plan.
#[derive(Debug)]
pub struct Continuous {
    shared: Arc<Shared>,
    summaries: Vec<String>,
    submit: Mutex<Submit>,
    base: Mutex<Base>,
    workers: Vec<JoinHandle<()>>,
    attributor: Option<Attributor>,
}

impl std::fmt::Debug for Attributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attributor").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Submit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submit")
            .field("next_seq", &self.next_seq)
            .field("queues", &self.queues.len())
            .finish_non_exhaustive()
    }
}

/// One summary's size in a [`View`] ([`View::summary_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryStats {
    /// The summary's name.
    pub name: String,
    /// Groups held.
    pub groups: usize,
    /// Bytes of its groups, keys and sketch states (as the memory budget
    /// counts them).
    pub bytes: usize,
    /// The newest bucket start folded, if any.
    pub newest_bucket: Option<cardinal_event::Timestamp>,
}

/// The merged view as of a batch boundary (see [`Continuous::snapshot`]),
/// borrowed: the next snapshot waits until it is dropped.
#[derive(Debug)]
pub struct View<'e> {
    base: MutexGuard<'e, Base>,
    summaries: &'e [String],
}

impl View<'_> {
    /// The batches the view covers: every batch numbered below this, and
    /// no other.
    pub fn covers(&self) -> EngineSeq {
        self.base.covers
    }

    /// The longest any worker stopped folding to hand its groups over for
    /// this view: all that ingest waited for it.
    pub fn paused(&self) -> Duration {
        self.base.paused
    }

    /// Records, bytes and rejects over the covered batches.
    pub fn counts(&self) -> &Counts {
        &self.base.counts
    }

    /// One merged rollup per summary of the stream, in declaration order.
    pub fn rollups(&self) -> &[Rollup] {
        &self.base.rollups
    }

    /// The merged rollup of the summary called `name`.
    pub fn rollup(&self, name: &str) -> Option<&Rollup> {
        let index = self.summaries.iter().position(|s| s == name)?;
        self.base.rollups.get(index)
    }

    /// The names of the summaries, in the order of [`View::rollups`]: the
    /// stream's, then those over its attributions' credit streams.
    pub fn summaries(&self) -> &[String] {
        self.summaries
    }

    /// Per summary, in the order of [`View::summaries`]: its groups, the
    /// bytes its state holds and its newest bucket (what a server lists
    /// and exports as metrics).
    pub fn summary_stats(&self) -> Vec<SummaryStats> {
        self.summaries
            .iter()
            .zip(&self.base.rollups)
            .map(|(name, rollup)| SummaryStats {
                name: name.clone(),
                groups: rollup.group_count(),
                bytes: rollup.heap_bytes(),
                newest_bucket: rollup.newest_bucket(),
            })
            .collect()
    }

    /// Each summary's rollup as an image ([`Rollup::encode_image`]), by
    /// name, in the order of [`View::summaries`]: what a snapshot saves and
    /// [`Continuous::start_from`] starts from.
    ///
    /// With a `CREATE ATTRIBUTION` on the stream, the attributions' state
    /// (chains, dictionaries, held events) comes last, named
    /// [`ATTRIBUTION_IMAGE`]; the view must then come from
    /// [`Continuous::snapshot_to_save`].
    pub fn images(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let mut images: Vec<(String, Vec<u8>)> = self
            .summaries
            .iter()
            .zip(&self.base.rollups)
            .map(|(name, rollup)| {
                let mut image = Vec::new();
                rollup.encode_image(&mut image);
                (name.clone(), image)
            })
            .collect();
        if self.base.attributes {
            let image = self.base.attribution_image.clone().context(
                "the attributions' state is imaged only by a view from snapshot_to_save",
            )?;
            images.push((ATTRIBUTION_IMAGE.to_string(), image));
        }
        Ok(images)
    }

    /// Per CREATE ATTRIBUTION over the stream, in declaration order, its
    /// counts over the covered batches (touch points and conversions
    /// applied so far: events newer than the release frontier are held).
    pub fn attribution_stats(&self) -> &[Stats] {
        &self.base.attribution_stats
    }
}

impl Continuous {
    /// Starts the workers of an engine over `plan`'s stream.
    pub fn start(plan: Arc<Plan>, options: &ContinuousOptions) -> Result<Self> {
        Self::start_from(plan, options, &[])
    }

    /// Starts an engine whose state begins as `images` say: one rollup
    /// image per summary ([`View::images`], what a snapshot saved), by
    /// summary name, every summary of the stream present and of the shape
    /// the plan now gives it (an image of another schema is refused).
    /// No images: an empty state, as [`Continuous::start`]. Batches are
    /// numbered from 0 again: the caller keeps its own positions.
    ///
    /// With a `CREATE ATTRIBUTION` on the stream, the images must hold the
    /// attributions' state ([`ATTRIBUTION_IMAGE`], from a view of
    /// [`Continuous::snapshot_to_save`]), and a restored engine goes on
    /// with its chains, dictionaries and held events.
    pub fn start_from(
        plan: Arc<Plan>,
        options: &ContinuousOptions,
        images: &[(String, Vec<u8>)],
    ) -> Result<Self> {
        let stream = pick_stream(&plan, options.stream.as_deref())?;
        ensure!(
            !matches!(plan.streams[stream].format, Format::Parquet),
            "a Parquet stream is read from files, not fed as batches"
        );
        ensure!(
            (1..=QUEUE_BATCHES_MAX).contains(&options.queue_batches),
            "queue_batches must be 1 to {QUEUE_BATCHES_MAX}"
        );
        let threads = options.threads.max(1);
        let summaries = view_summaries(&plan, stream);
        let attributions = plan
            .attributions
            .iter()
            .filter(|a| a.stream == stream)
            .count();
        ensure!(
            !summaries.is_empty() || attributions > 0,
            "no CREATE SUMMARY or CREATE ATTRIBUTION reads stream {}",
            plan.streams[stream].name
        );
        // The routing of the chains the attribution thread will make, for
        // the workers' collectors.
        let routing = match Setup::new(&plan, stream, threads, None)? {
            Some(setup) => setup.routing(),
            None => Vec::new(),
        };
        let rollups = if images.is_empty() {
            summaries
                .iter()
                .map(|s| Ok(Rollup::new(shape_of(s)?, options.limits)?))
                .collect::<Result<Vec<_>>>()?
        } else {
            restore(&summaries, images)?
        };
        let attribution_image: Option<Vec<u8>> = images
            .iter()
            .find(|(name, _)| name == ATTRIBUTION_IMAGE)
            .map(|(_, image)| image.clone());
        if !images.is_empty() {
            ensure!(
                attribution_image.is_some() == (attributions > 0),
                "the images {} the attributions' state, and the schema has {} CREATE ATTRIBUTION on the stream",
                if attribution_image.is_some() {
                    "hold"
                } else {
                    "lack"
                },
                attributions
            );
        }
        let restored = !images.is_empty();
        let summary_count = rollups.len();
        let names = summaries.iter().map(|s| s.name.clone()).collect();
        let shared = Arc::new(Shared {
            stream,
            limits: options.limits,
            header: options.header.clone(),
            // Workers print no rejects: a service reports them otherwise.
            shown: AtomicU64::new(REJECTS_SHOWN_MAX),
            budget: MemoryBudget::new(options.memory_max),
            progress: options.progress.clone().unwrap_or_default(),
            failed: Mutex::new(None),
            failed_batch: Mutex::new(None),
            panic_on: options.panic_on.clone(),
            delay_per_batch: options.delay_per_batch,
            routing,
            threads,
            attribution_lateness_ms: options.attribution_lateness_ms,
            plan,
        });
        let attributor = if attributions > 0 {
            let (inbox, requests) = sync_channel(1);
            let (started, ready) = sync_channel(1);
            let shared = Arc::clone(&shared);
            let thread = std::thread::Builder::new()
                .name("cardinal-attribution".to_string())
                .spawn(move || {
                    let attributed = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        attribute(&shared, &requests, attribution_image.as_deref(), &started)
                    }))
                    .unwrap_or_else(|panic| Err(anyhow!("panicked: {}", panic_text(&*panic))));
                    if let Err(e) = attributed {
                        shared.fail(|| format!("attribution: {e:#}"));
                    }
                })
                .context("starting the attribution thread")?;
            // Its chains made (or restored from the images) before any
            // worker starts: a damaged image fails the start.
            if let Ok(Err(e)) | Err(e) = ready
                .recv()
                .map_err(|_| anyhow!("the attribution thread stopped"))
            {
                drop(inbox);
                let _ = thread.join();
                return Err(e.context("starting the attributions"));
            }
            Some(Attributor { inbox, thread })
        } else {
            None
        };
        let mut queues = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for index in 0..threads {
            let queue = Arc::new(Queue::new(options.queue_batches));
            let inbox = Arc::clone(&queue);
            let shared = Arc::clone(&shared);
            let worker = std::thread::Builder::new()
                .name(format!("cardinal-worker-{index}"))
                .spawn(move || {
                    // A panic is this worker's failure like any error:
                    // said, and its queue left, so that no producer,
                    // receipt or snapshot waits on a thread that is gone.
                    let worked =
                        std::panic::catch_unwind(AssertUnwindSafe(|| work(&shared, index, &inbox)))
                            .unwrap_or_else(|panic| {
                                Err(anyhow!("panicked: {}", panic_text(&*panic)))
                            });
                    if let Err(e) = worked {
                        shared.fail(|| format!("worker {index}: {e:#}"));
                    }
                    // Producers waiting on a worker that stopped fail.
                    inbox.leave();
                })
                .context("starting a worker")?;
            queues.push(queue);
            workers.push(worker);
        }
        Ok(Self {
            shared,
            summaries: names,
            submit: Mutex::new(Submit {
                next_seq: EngineSeq::FIRST,
                next_queue: 0,
                queues,
            }),
            base: Mutex::new(Base {
                rollups,
                counts: Counts::default(),
                covers: EngineSeq::FIRST,
                paused: Duration::ZERO,
                merged: restored,
                attribution_stats: vec![Stats::default(); attributions],
                attribution_image: None,
                attributes: attributions > 0,
                gauges: vec![BytesGauge::default(); summary_count],
            }),
            workers,
            attributor,
        })
    }

    /// Batches waiting in the workers' queues now, and the queues'
    /// capacity in batches (for metrics: a full engine refuses
    /// [`Continuous::try_submit`]).
    pub fn queued(&self) -> (usize, usize) {
        let submit = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
        let queued = submit.queues.iter().map(|q| q.len()).sum();
        let capacity = submit.queues.iter().map(|q| q.capacity()).sum();
        (queued, capacity)
    }

    /// The summaries this engine folds (those of its stream, and the
    /// credit summaries of attributions over it), in plan order.
    pub fn summaries(&self) -> &[String] {
        &self.summaries
    }

    /// Queues a batch, waiting while every queue is full; its number.
    /// Fails only with [`SubmitError::Stopped`].
    pub fn submit(&self, records: impl Into<Records>) -> Result<EngineSeq, SubmitError> {
        self.send(records.into(), true, None)
    }

    /// [`Continuous::submit`], with a receipt that tells what became of the
    /// batch's records once a worker has folded it.
    pub fn submit_with_receipt(
        &self,
        records: impl Into<Records>,
    ) -> Result<(EngineSeq, Receipt), SubmitError> {
        let (receipt, outcome) = sync_channel(1);
        let seq = self.send(records.into(), true, Some(receipt))?;
        Ok((seq, Receipt(outcome, Arc::clone(&self.shared))))
    }

    /// [`Continuous::try_submit`], with a receipt (see
    /// [`Continuous::submit_with_receipt`]).
    pub fn try_submit_with_receipt(
        &self,
        records: impl Into<Records>,
    ) -> Result<(EngineSeq, Receipt), SubmitError> {
        let (receipt, outcome) = sync_channel(1);
        let seq = self.send(records.into(), false, Some(receipt))?;
        Ok((seq, Receipt(outcome, Arc::clone(&self.shared))))
    }

    /// Queues a batch if some queue has room; its number, or
    /// [`SubmitError::Full`] with the records when every queue is full.
    pub fn try_submit(&self, records: impl Into<Records>) -> Result<EngineSeq, SubmitError> {
        self.send(records.into(), false, None)
    }

    /// Why `line`, a batch's header line ([`split_header`]), cannot be
    /// read for this engine's stream, if it cannot: a CSV header must
    /// name every declared column once (matched by name, ASCII case
    /// aside, in any order); a column the stream does not declare is
    /// skipped when the stream is declared `header = true` (as `cardinal
    /// run` skips it) and refused otherwise (such a stream's records are
    /// exactly its declared columns). A batch is checked before it is
    /// admitted, so a worker never meets a header it cannot read.
    pub fn check_header(&self, line: &[u8]) -> Result<()> {
        let stream = &self.shared.plan.streams[self.shared.stream];
        ensure!(
            matches!(stream.format, Format::Csv),
            "stream {} reads {}: only CSV batches carry a header line",
            stream.name,
            match stream.format {
                Format::Json => "JSON",
                _ => "another format",
            }
        );
        ensure!(
            line.len() <= HEADER_LINE_BYTES_MAX,
            "a header line of {} bytes is over the limit of {HEADER_LINE_BYTES_MAX}",
            line.len()
        );
        let Parser::Csv(mut csv) = Parser::new(stream, None)? else {
            unreachable!("a CSV stream has a CSV parser");
        };
        let name: Arc<str> = Arc::from(format!("stream {}", stream.name));
        csv.read_header(&name, line)
            .map_err(|e| anyhow!("{e} ({})", declared_list(stream)))?;
        let width = stream.schema.columns.len();
        ensure!(
            stream.header || csv.file_width() == width,
            "the header line names {} columns the stream does not declare, and stream {} is \
             declared without a header (header = false), so its records are exactly its \
             columns: {}",
            csv.file_width() - width,
            stream.name,
            declared_list(stream)
        );
        Ok(())
    }

    fn send(
        &self,
        records: Records,
        wait: bool,
        receipt: Option<SyncSender<Outcome>>,
    ) -> Result<EngineSeq, SubmitError> {
        let mut submit = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = submit.next_seq;
        let n = submit.queues.len();
        let mut message = Message::Batch {
            seq,
            bytes: records.bytes,
            header: records.header,
            receipt,
        };
        for turn in 0..n {
            let q = (submit.next_queue + turn) % n;
            match submit.queues[q].push(message, false) {
                Ok(()) => {
                    submit.next_queue = (q + 1) % n;
                    submit.next_seq = seq.next();
                    return Ok(seq);
                }
                Err(PushError::Full(back)) => message = back,
                Err(PushError::Gone(_)) => return Err(SubmitError::Stopped(self.failure())),
            }
        }
        if !wait {
            let Message::Batch { bytes, header, .. } = message else {
                unreachable!("a batch was sent");
            };
            return Err(SubmitError::Full(Records { bytes, header }));
        }
        let q = submit.next_queue;
        if submit.queues[q].push(message, true).is_err() {
            return Err(SubmitError::Stopped(self.failure()));
        }
        submit.next_queue = (q + 1) % n;
        submit.next_seq = seq.next();
        Ok(seq)
    }

    /// The number of the batch whose fold panicked, if one did: the
    /// engine stopped there, and the batch's bytes are what a caller may
    /// set aside (a server names the log record it came from).
    pub fn failed_batch(&self) -> Option<EngineSeq> {
        *self
            .shared
            .failed_batch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the engine stopped, if a worker or the attribution thread did.
    pub fn failure(&self) -> Option<String> {
        self.shared
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The error of an engine whose worker has stopped.
    fn stopped(&self) -> anyhow::Error {
        let failed = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*failed {
            Some(why) => anyhow!("the engine stopped: {why}"),
            None => anyhow!("the engine stopped"),
        }
    }

    /// The merged view of every batch submitted before this call (and of
    /// no later one): the workers hand their groups over at a marker
    /// queued behind those batches, and they are merged into the base.
    /// Ingest pauses only while each worker moves its groups out.
    pub fn snapshot(&self) -> Result<View<'_>> {
        self.take_snapshot(false, false)
    }

    /// [`Continuous::snapshot`], and with it an image of the attributions'
    /// state as of the same batch boundary, so that [`View::images`] holds
    /// everything [`Continuous::start_from`] needs. The image of the
    /// chains is written on the attribution thread meanwhile.
    pub fn snapshot_to_save(&self) -> Result<View<'_>> {
        self.take_snapshot(false, true)
    }

    /// [`Continuous::snapshot`]; with `last`, the attributions release
    /// every event they hold (the end of the stream); with `image`, they
    /// hand over an image of their state.
    fn take_snapshot(&self, last: bool, image: bool) -> Result<View<'_>> {
        let mut base = self.base.lock().unwrap_or_else(PoisonError::into_inner);
        let (covers, replies) = {
            let submit = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
            let mut replies = Vec::with_capacity(submit.queues.len());
            for queue in &submit.queues {
                let (reply, hand_over) = sync_channel(1);
                queue
                    .push(Message::HandOver(reply), true)
                    .map_err(|_| self.stopped())?;
                replies.push(hand_over);
            }
            (submit.next_seq, replies)
        };
        base.paused = Duration::ZERO;
        let mut collected = Vec::new();
        for (index, reply) in replies.into_iter().enumerate() {
            let part = reply.recv().map_err(|_| self.stopped())?;
            base.paused = base.paused.max(part.paused);
            base.counts.add(&part.counts);
            collected.extend(part.collected);
            // The first hand-over of all becomes the base as it is:
            // merging into an empty rollup would copy every group.
            let empty = !base.merged;
            base.merged = true;
            let from = part.rollups.into_iter().map(|rollup| (rollup, empty));
            merge_into(&mut base.rollups, from, &self.summaries)
                .with_context(|| format!("merging worker {index}'s partials"))?;
        }
        if let Some(attributor) = &self.attributor {
            let (reply, credits) = sync_channel(1);
            attributor
                .inbox
                .send(Release {
                    collected,
                    last,
                    image,
                    reply,
                })
                .map_err(|_| self.stopped())?;
            let credits = credits.recv().map_err(|_| self.stopped())??;
            for (into, stats) in base.attribution_stats.iter_mut().zip(&credits.stats) {
                into.add(stats);
            }
            base.attribution_image = credits.image;
            let first = base.rollups.len() - credits.rollups.len();
            let from = credits.rollups.into_iter().map(|rollup| (rollup, false));
            merge_into(&mut base.rollups[first..], from, &self.summaries[first..])
                .context("merging the credit summaries")?;
        }
        for rollup in &mut base.rollups {
            // As a run's answer: buckets within the window of the newest,
            // none too far ahead of the stream (a clock set years ahead
            // would otherwise hold its groups for ever).
            rollup.evict_expired();
            rollup.evict_future();
        }
        // The merged state counts against the memory budget with the
        // workers' partials: together they may not pass it.
        let budget = &self.shared.budget;
        let Base {
            rollups, gauges, ..
        } = &mut *base;
        for (rollup, gauge) in rollups.iter().zip(gauges.iter_mut()) {
            gauge.rescan(rollup);
            gauge.update(rollup, 0, budget);
        }
        if !budget.holds()
            && let Some(((rollup, gauge), name)) = rollups
                .iter()
                .zip(gauges.iter())
                .zip(&self.summaries)
                .max_by_key(|((_, gauge), _)| gauge.reported())
        {
            return Err(budget_error(
                name,
                gauge.reported(),
                rollup.group_count(),
                budget.bytes_max(),
            ));
        }
        base.covers = covers;
        Ok(View {
            base,
            summaries: &self.summaries,
        })
    }

    /// Stops taking batches, folds every batch queued and returns the
    /// final merged rollups and counts, with the number of batches.
    pub fn finish(mut self) -> Result<(Vec<Rollup>, Counts, u64)> {
        let covers = {
            let view = self.take_snapshot(true, false)?;
            view.covers()
        };
        self.stop()?;
        if let Some(why) = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            bail!("the engine stopped: {why}");
        }
        let base = std::mem::take(&mut *self.base.lock().unwrap_or_else(PoisonError::into_inner));
        Ok((base.rollups, base.counts, covers.get()))
    }

    /// Closes the queues and joins the workers (once they have folded what
    /// was queued) and the attribution thread. What `finish` and `Drop`
    /// share: an engine dropped without `finish` leaves no thread behind.
    fn stop(&mut self) -> Result<()> {
        for queue in &self
            .submit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queues
        {
            queue.close();
        }
        let mut panicked = false;
        for worker in std::mem::take(&mut self.workers) {
            panicked |= worker.join().is_err();
        }
        ensure!(!panicked, "a worker panicked");
        if let Some(Attributor { inbox, thread }) = self.attributor.take() {
            drop(inbox);
            ensure!(thread.join().is_ok(), "the attribution thread panicked");
        }
        Ok(())
    }
}

impl Drop for Continuous {
    fn drop(&mut self) {
        // After `finish` there is nothing left to stop; otherwise the
        // workers fold what is queued and leave (a panic was reported by
        // its worker's failure already).
        let _ = self.stop();
    }
}

/// One worker: folds the batches of its queue until the queue closes,
/// handing its partials over at each marker.
fn work(shared: &Shared, index: usize, inbox: &Queue<Message>) -> Result<()> {
    // Each worker's sketches flip coins of their own stream.
    cardinal_sketch::quantiles::seed_thread(index as u64 + 1);
    let plan = &*shared.plan;
    let stream = &plan.streams[shared.stream];
    let summaries: Vec<&Summary> = plan
        .summaries
        .iter()
        .filter(|s| s.stream == shared.stream)
        .collect();
    let shapes: Vec<Shape> = summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
    reads.sort_unstable();
    reads.dedup();
    let mut fold = Fold::new(&summaries, &shapes, shared.limits, &shared.shown, stream)?;
    fold.budget = Some(&shared.budget);
    let mut collector = Collector::new(plan, shared.stream, &shared.routing);
    // An attribution reads columns of its own: then every column is split.
    let projection = collector.is_none().then_some(reads.as_slice());
    let mut parser = Parser::new(stream, projection)?;
    let name: Arc<str> = Arc::from(format!("stream {}", stream.name));
    if let Parser::Csv(csv) = &mut parser
        && stream.header
    {
        let header = match &shared.header {
            Some(header) => header.clone(),
            None => declared_header(stream),
        };
        csv.read_header(&name, &header)
            .with_context(|| format!("the header of stream {}", stream.name))?;
    }
    let framing = framing_of(stream);
    // What this worker's collector last reported to the budget.
    let mut collector_bytes = 0;
    // The header the parser reads under now, and the one it returns to
    // for a batch without its own (module doc).
    let default_header = match &shared.header {
        Some(header) => header.clone(),
        None => declared_header(stream),
    };
    let mut under = default_header.clone();
    let mut batch = Batch::new();
    let mut tap = shared.progress.tap();
    while let Some(message) = inbox.pop() {
        match message {
            Message::Batch {
                seq,
                bytes,
                header,
                receipt,
            } => {
                let before = (fold.counts.records, fold.counts.rejects);
                if receipt.is_some() {
                    fold.kept_rejects = Some(Vec::new());
                }
                // Rejects name the batch: "stream s batch 17:byte 498: ...".
                let name: Arc<str> = Arc::from(format!("{name} batch {seq}"));
                // Where the records start, past the batch's own header line.
                let start = match read_batch_header(
                    &mut parser,
                    &mut under,
                    &default_header,
                    &name,
                    &bytes,
                    header,
                ) {
                    Ok(records) => bytes.len() - records.len(),
                    Err(e) => {
                        shared.fail(|| format!("worker {index}: {e:#}"));
                        return Err(e);
                    }
                };
                // The batch number orders equal times (as an input's
                // index does in a run); it wraps, harmlessly.
                #[expect(clippy::cast_possible_truncation, reason = "a tie-breaker")]
                let input = seq.get() as u32;
                if let Some(delay) = shared.delay_per_batch {
                    std::thread::sleep(delay);
                }
                let folded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    if let Some(marker) = &shared.panic_on
                        && memchr::memmem::find(&bytes, marker).is_some()
                    {
                        panic!("the failpoint {FAILPOINT_FOLD_PANIC} met its text");
                    }
                    fold_batch(
                        &name,
                        bytes,
                        start,
                        framing,
                        &mut parser,
                        input,
                        &mut batch,
                        &mut fold,
                        &mut collector,
                        &mut tap,
                    )
                }));
                let folded = match folded {
                    Ok(folded) => folded,
                    Err(panic) => {
                        // The batch is named: a server maps it to its log
                        // record, so recovery can say which one.
                        shared.fail_batch(seq);
                        Err(anyhow!(
                            "panicked folding batch {seq}: {}",
                            panic_text(&*panic)
                        ))
                    }
                };
                // Events gathered for the attributions count against the
                // budget until a snapshot hands them over.
                let folded = folded.and_then(|()| {
                    let Some(collector) = &collector else {
                        return Ok(());
                    };
                    let bytes = collector.held_bytes();
                    shared.budget.report_other(collector_bytes, bytes);
                    collector_bytes = bytes;
                    if shared.budget.holds() {
                        Ok(())
                    } else {
                        Err(attribution_budget_error(bytes, shared.budget.bytes_max()))
                    }
                });
                if let Err(e) = folded {
                    // Said before the receipt drops, so its waiter reads
                    // why (the thread's own report comes after).
                    shared.fail(|| format!("worker {index}: {e:#}"));
                    return Err(e);
                }
                if let Some(receipt) = receipt {
                    // A caller that stopped waiting lost nothing it needs.
                    let _ = receipt.send(Outcome {
                        seq,
                        records: fold.counts.records - before.0,
                        rejects: fold.counts.rejects - before.1,
                        first_rejects: fold.kept_rejects.take().unwrap_or_default(),
                    });
                }
            }
            Message::HandOver(reply) => {
                let started = Instant::now();
                let (rollups, counts) = fold.hand_over();
                let collected = collector.as_mut().map(Collector::take);
                shared.budget.report_other(collector_bytes, 0);
                collector_bytes = 0;
                let paused = started.elapsed();
                // The counters published so far stay; the tap starts over
                // with the fold's counts.
                tap = shared.progress.tap();
                // A snapshot stops listening only when it has failed, and
                // the engine with it: say what goes.
                if let Err(back) = reply.send(HandOver {
                    rollups,
                    counts,
                    collected,
                    paused,
                }) {
                    bail!(
                        "a snapshot stopped listening; {} groups of worker {index} would be lost",
                        back.0
                            .rollups
                            .iter()
                            .map(Rollup::group_count)
                            .sum::<usize>()
                    );
                }
            }
        }
    }
    Ok(())
}

/// The records of a batch, with `parser` under the batch's header (its
/// first line, when `header`) or else under `default`: the header is read
/// only when it differs from `under`, the one the parser is under.
fn read_batch_header<'b>(
    parser: &mut Parser,
    under: &mut Vec<u8>,
    default: &[u8],
    name: &Arc<str>,
    bytes: &'b [u8],
    header: bool,
) -> Result<&'b [u8]> {
    let Parser::Csv(csv) = parser else {
        ensure!(!header, "{name}: a header line in a batch of a JSON stream");
        return Ok(bytes);
    };
    let (line, records) = if header {
        split_header(bytes)
    } else {
        (default, bytes)
    };
    if line != under.as_slice() {
        csv.read_header(name, line)
            .with_context(|| format!("{name}: its header line"))?;
        under.clear();
        under.extend_from_slice(line);
    }
    Ok(records)
}

/// The declared columns, for messages: `columns ts, user_id, kind`.
fn declared_list(stream: &cardinal_route::Stream) -> String {
    let names: Vec<&str> = stream
        .schema
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    format!("its columns are {}", names.join(", "))
}

/// A CSV stream's declared column names as a header line.
fn declared_header(stream: &cardinal_route::Stream) -> Vec<u8> {
    let delimiter = char::from(stream.delimiter);
    stream
        .schema
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(&delimiter.to_string())
        .into_bytes()
}

/// Merges each rollup of `from` into its place in `into` (or moves it
/// there, when its flag says `into` is still empty), naming the summary
/// whose group limit a merge passes.
fn merge_into(
    into: &mut [Rollup],
    from: impl Iterator<Item = (Rollup, bool)>,
    names: &[String],
) -> Result<()> {
    for ((into, (from, empty)), name) in into.iter_mut().zip(from).zip(names) {
        if empty {
            *into = from;
            continue;
        }
        match into.merge(&from) {
            Err(cardinal_rollup::Error::Limit {
                name: "groups_max",
                value,
                ..
            }) => return Err(group_limit_error(name, value)),
            merged => merged.with_context(|| format!("merging {name}"))?,
        }
    }
    Ok(())
}

/// The summaries a continuous engine over `stream` answers for: the
/// stream's own, then those over its attributions' credit streams, in
/// declaration order ([`View::summaries`]).
fn view_summaries(plan: &Plan, stream: usize) -> Vec<&Summary> {
    let mut summaries: Vec<&Summary> = plan
        .summaries
        .iter()
        .filter(|s| s.stream == stream)
        .collect();
    summaries.extend(attribute::credit_summaries(plan, stream));
    summaries
}

/// The attribution thread: the single writer of the attributions' chains.
/// At each snapshot it absorbs the workers' events, releases those at or
/// before the [`FRONTIER_EVENTS`]-th newest event time absorbed less the
/// allowed lateness (all of them at the end), folds the credit rows into
/// the credit summaries' partials and hands those over.
fn attribute(
    shared: &Shared,
    requests: &Receiver<Release>,
    restored: Option<&[u8]>,
    started: &SyncSender<Result<()>>,
) -> Result<()> {
    let plan = &*shared.plan;
    let made = || -> Result<Setup<'_>> {
        let mut setup = Setup::new(plan, shared.stream, shared.threads, None)?
            .context("an attribution reads the stream")?;
        if let Some(image) = restored {
            setup.restore_state(image)?;
        }
        ensure!(
            setup.routing() == shared.routing,
            "the attribution thread's chains route users as the workers' collectors do"
        );
        Ok(setup)
    };
    let mut setup = match made() {
        Ok(setup) => {
            let _ = started.send(Ok(()));
            setup
        }
        Err(e) => {
            let _ = started.send(Err(e));
            return Ok(());
        }
    };
    let summaries = attribute::credit_summaries(plan, shared.stream);
    let shapes: Vec<Shape> = summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    let mut rollups = attribute::credit_rollups(&shapes, shared.limits)?;
    // The newest FRONTIER_EVENTS event times absorbed, the oldest of them
    // on top.
    let mut newest: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(FRONTIER_EVENTS + 1);
    // What this thread last reported to the budget.
    let mut attribution_bytes = 0;
    for request in requests {
        let release = || -> Result<CreditHandOver> {
            for time in request.collected.iter().flat_map(Collected::times_ms) {
                if newest.len() < FRONTIER_EVENTS {
                    newest.push(Reverse(time));
                } else if newest.peek().is_some_and(|&Reverse(oldest)| time > oldest) {
                    newest.pop();
                    newest.push(Reverse(time));
                }
            }
            setup.absorb_collected(request.collected);
            let frontier = if request.last {
                u64::MAX
            } else if newest.len() < FRONTIER_EVENTS {
                // Too few events yet to tell where the stream is.
                0
            } else {
                let Reverse(oldest) = *newest.peek().expect("FRONTIER_EVENTS of them");
                oldest.saturating_sub(shared.attribution_lateness_ms)
            };
            let credits = setup.release(frontier)?;
            attribute::fold_credits(&credits, &summaries, &shapes, &mut rollups)?;
            // The chains and held events count against the budget as the
            // rollups do: a stream of new users stops the engine with
            // words, not the process by the kernel's hand.
            let bytes = setup.state_bytes();
            shared.budget.report_other(attribution_bytes, bytes);
            attribution_bytes = bytes;
            if !shared.budget.holds() {
                bail!(attribution_budget_error(bytes, shared.budget.bytes_max()));
            }
            let image = if request.image {
                let mut image = Vec::new();
                setup.encode_state(&mut image)?;
                Some(image)
            } else {
                None
            };
            Ok(CreditHandOver {
                rollups: rollups.iter_mut().map(Rollup::take_groups).collect(),
                stats: credits.iter().map(|c| c.stats).collect(),
                image,
            })
        };
        let answer = release();
        let failed = answer.is_err();
        // The snapshot waiting on the answer stops the engine if it failed.
        let _ = request.reply.send(answer);
        if failed {
            bail!("a release failed");
        }
    }
    Ok(())
}

/// Checks `images` as [`Continuous::start_from`] would take them, without
/// starting an engine: every summary's image present, of its shape and
/// whole, and the attributions' state whole and of their layout. What a
/// server runs on a snapshot before it trusts it (and falls back to an
/// older one when it fails).
pub fn check_images(
    plan: &Plan,
    options: &ContinuousOptions,
    images: &[(String, Vec<u8>)],
) -> Result<()> {
    let stream = pick_stream(plan, options.stream.as_deref())?;
    restore(&view_summaries(plan, stream), images)?;
    let attribution = images.iter().find(|(name, _)| name == ATTRIBUTION_IMAGE);
    match (
        Setup::new(plan, stream, options.threads.max(1), None)?,
        attribution,
    ) {
        (Some(mut setup), Some((_, image))) => setup.restore_state(image),
        (None, None) => Ok(()),
        (Some(_), None) => bail!("the images lack the attributions' state"),
        (None, Some(_)) => {
            bail!("the images hold an attributions' state the schema has no use for")
        }
    }
}

/// The rollups `images` hold for `summaries`, in their order: every
/// summary exactly once, of the shape the plan gives it.
fn restore(summaries: &[&Summary], images: &[(String, Vec<u8>)]) -> Result<Vec<Rollup>> {
    for (name, _) in images.iter().filter(|(name, _)| name != ATTRIBUTION_IMAGE) {
        ensure!(
            summaries.iter().any(|s| &s.name == name),
            "the images hold summary {name}, which the schema does not declare over this stream"
        );
    }
    summaries
        .iter()
        .map(|summary| {
            let mut found = images.iter().filter(|(name, _)| *name == summary.name);
            let (_, image) = found
                .next()
                .with_context(|| format!("the images hold no summary {}", summary.name))?;
            ensure!(
                found.next().is_none(),
                "the images hold summary {} twice",
                summary.name
            );
            Rollup::decode_image(image, &shape_of(summary)?)
                .with_context(|| format!("the image of summary {}", summary.name))
        })
        .collect()
}
