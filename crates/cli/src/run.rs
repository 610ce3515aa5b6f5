//! `cardinal run SCHEMA.sql INPUT...`: the engine, end to end.
//!
//! ```text
//!  inputs --split--> jobs (a file, a byte range of a large plain file, a
//!                   range of a Parquet file's row groups, stdin), dealt
//!                   out to the workers the same way in every run
//!  worker 1..N: its jobs in order -> read chunks of lines -> parse into a
//!               batch -> route each record through every summary -> fold
//!               into the worker's own partial rollups (no lock, no shared
//!               state)
//!  main: merge the partials per summary, in worker order -> tables,
//!        per-day files, JSON lines
//! ```
//!
//! Workers share nothing but the turns at a compressed input or stdin,
//! which they decode in a fixed rotation. Rejected records (malformed
//! lines, fields that are not their declared type) are counted by reason,
//! reported with input, line and column, and written to the rejects file;
//! the rest of their batch goes on.

use std::io::{BufRead, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use cardinal_event::{Record, Timestamp, Value};
use cardinal_export::{AtomicFile, Columns, Options, OutDir, Results, Rows};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser, ParquetFile};
use cardinal_rollup::{AggKind, BytesGauge, Folded, KeyHash, Limits, MemoryBudget, Rollup, Shape};
use cardinal_route::{
    AggregateKind, Arg, ColumnCache, ColumnPlan, Format, OutputSource, Plan, Routed, Scratch,
    Summary,
};
use cardinal_source::{Framing, LineReader, split_file_records};

use crate::attribute;
use crate::pending::{PENDING_BYTES_MAX, Pending};
use crate::progress::Progress;

mod by_aggregate;
mod columns;

/// Most aggregates one summary may have: each record's inputs live in a
/// fixed array on the stack, so routing allocates nothing.
pub const AGGREGATES_MAX: usize = 16;

/// Plain files at least this large are split into byte ranges, so that
/// several workers read one file.
const SPLIT_BYTES_MIN: u64 = 64 << 20;

/// [`SPLIT_BYTES_MIN`], or the byte count in the environment variable
/// `CARDINAL_SPLIT_BYTES_MIN` (for tests, which split small files to check
/// that any split reads the same records).
fn split_bytes_min() -> u64 {
    std::env::var("CARDINAL_SPLIT_BYTES_MIN")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(SPLIT_BYTES_MIN)
}

/// Parquet files are split into about this many jobs per thread (whole
/// row groups each), so that workers finishing early find more work.
const PARQUET_JOBS_PER_THREAD: usize = 4;

/// Reject lines printed to stderr before only counting.
const REJECTS_SHOWN_MAX: u64 = 10;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples (the schemas are in a checkout; `cardinal demo --out DIR` writes one too):
  cardinal gen impressions --events 1000000 -o imp.csv
  cardinal run bench/engine/schemas/impressions.sql imp.csv
  cardinal run bench/engine/schemas/impressions.sql imp.csv --out results/ --hll-hex
  gzip -k imp.csv && cat imp.csv.gz | cardinal run bench/engine/schemas/impressions.sql - --json - | head -3"
)]
pub struct Args {
    /// The declarations: CREATE STREAM and CREATE SUMMARY statements.
    schema: PathBuf,
    /// Input files (gzip, zstd, lz4 or snappy detected by magic bytes), `-`
    /// for stdin, or directories: every file under one, in name order,
    /// names starting with `.` skipped.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The stream the inputs belong to (default: the only one declared).
    #[arg(long)]
    stream: Option<String>,
    /// Worker threads, 1 to 256 (default: the number of cores).
    #[arg(long, value_parser = threads_arg)]
    threads: Option<usize>,
    /// Write `OUT/<summary>/YYYY-MM-DD.csv`, one file per day, each atomically.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write JSON lines to this file (`-` for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Add each HyperLogLog as postgresql-hll hex to file outputs.
    #[arg(long)]
    hll_hex: bool,
    /// With --hll-hex, allow HyperLogLog parameters that java-hll reads but
    /// postgresql-hll refuses (log2m above 17, regwidth 8).
    #[arg(long, requires = "hll_hex")]
    java_hll: bool,
    /// Write every rejected record (input, line, reason) to this file.
    #[arg(long)]
    rejects: Option<PathBuf>,
    /// Exit with status 3 if any record was rejected, or dropped by
    /// --retention-days or --future-tolerance (its answer is incomplete).
    #[arg(long)]
    strict: bool,
    /// Most groups in a summary's answer (a memory guard): a summary with
    /// more fails the run, naming it, on any thread count.
    #[arg(long, default_value_t = cardinal_rollup::GROUPS_MAX_DEFAULT)]
    groups_max: u64,
    /// Keep only buckets within this many days of the stream's watermark
    /// (about its newest bucket; see --future-tolerance).
    #[arg(long)]
    retention_days: Option<u32>,
    /// Drop the records of buckets more than DAYS ahead of the stream's
    /// watermark (the 128th newest record's bucket), counted per summary;
    /// the retention window is measured from that watermark. Default: the
    /// retention window (at least 1 day) with --retention-days, else off.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    future_tolerance: Option<u32>,
    /// Most bytes the summaries' groups and sketches may hold together,
    /// counted as they grow (e.g. 512MiB, 8G; default: half the memory of
    /// the machine or its cgroup). Reaching it stops the run with an error
    /// naming the summary that holds the most; nothing is written.
    #[arg(long, value_name = "SIZE", value_parser = crate::memory::memory_arg)]
    memory_max: Option<u64>,
    /// Print no result tables (files and the summary line only).
    #[arg(long)]
    quiet: bool,
    /// Write every credit row of the schema's CREATE ATTRIBUTIONs as a JSON
    /// line to this file (`-` for stdout).
    #[arg(long)]
    attributions: Option<PathBuf>,
    /// Keep attribution chains across runs: restore them from
    /// `DIR/<attribution>.chains` (and `.names`) at start if present, and
    /// write them there at the end (each atomically).
    #[arg(long, value_name = "DIR")]
    chains_snapshot: Option<PathBuf>,
    /// Never draw the progress line (it is drawn only when stderr is a
    /// terminal).
    #[arg(long)]
    no_progress: bool,
    /// Rows of each summary's table printed to stdout (0: every row).
    /// `--out` and `--json` always write every row.
    #[arg(long, value_name = "N", default_value_t = TABLE_ROWS_DEFAULT)]
    max_rows: usize,
}

/// Milliseconds in a day, for the flags given in days.
const DAY_MS: i64 = 86_400_000;

/// The least future tolerance, in days: the default with
/// `--retention-days 0`, and the least `--future-tolerance` takes. A
/// record of the next daily bucket must never count as being in the future.
pub const FUTURE_TOLERANCE_DAYS_MIN: u32 = 1;

/// Rows of a summary's printed table unless `--max-rows` says otherwise.
const TABLE_ROWS_DEFAULT: usize = 100;

/// One unit of work: a whole input, a byte range of a plain file, or a
/// range of a Parquet file's row groups.
#[derive(Debug, Clone)]
struct Job {
    /// Index of the input in the command line: with the byte offset, a
    /// record's position, which attribution orders equal times by.
    input: u32,
    path: Option<PathBuf>,
    range: Option<std::ops::Range<u64>>,
    /// The file's header line, for a range that does not start the file.
    header: Option<Vec<u8>>,
    /// A Parquet file (footer read, columns matched) and the row groups
    /// to read.
    parquet: Option<(Arc<ParquetFile>, std::ops::Range<usize>)>,
    /// A compressed file or stdin that every worker helps read: one job per
    /// worker, all holding the same [`SharedInput`], this one as its
    /// participant `participant` (worker `participant` takes it).
    shared: Option<Arc<SharedInput>>,
    participant: usize,
    /// Bytes to read, about (the file's, the range's or the row groups'
    /// size): what [`assign_jobs`] balances.
    size: u64,
    /// Why none of the input can be read (a Parquet file whose footer is
    /// cut off): the job is one reject, and the run goes on.
    unreadable: Option<String>,
}

impl Job {
    /// Input `input` (`path`, or stdin for `None`), whole, by one worker;
    /// the other kinds of job change a field of it.
    fn whole(input: u32, path: Option<PathBuf>) -> Self {
        Self {
            input,
            path,
            range: None,
            header: None,
            parquet: None,
            shared: None,
            participant: 0,
            size: 0,
            unreadable: None,
        }
    }
}

/// Deals the jobs out to `threads` workers, the same way in every run, so
/// that each worker's partial rollups, and so the merged answers, are the
/// same in every run (sketches included: a KLL sketch's compactions
/// depend on the order of its values). A shared input's participant `p`
/// goes to worker `p`; every other job, largest first, to the worker
/// with the fewest bytes so far (the lowest index on a tie). Each worker
/// takes its jobs in the plan's order, so that all meet the shared inputs
/// in the same order: a worker waiting for a turn at one waits only on
/// workers that are at it or at jobs before it, never on one that waits
/// at a later input.
fn assign_jobs(jobs: Vec<Job>, threads: usize) -> Vec<Vec<Job>> {
    let mut worker_of = vec![0; jobs.len()];
    let mut loads = vec![0u64; threads];
    let mut by_size: Vec<usize> = (0..jobs.len())
        .filter(|&j| jobs[j].shared.is_none())
        .collect();
    by_size.sort_by_key(|&j| std::cmp::Reverse(jobs[j].size));
    for j in by_size {
        let (worker, _) = loads
            .iter()
            .enumerate()
            .min_by_key(|&(w, &load)| (load, w))
            .expect("at least one worker");
        worker_of[j] = worker;
        loads[worker] += jobs[j].size;
    }
    let mut lists: Vec<Vec<Job>> = (0..threads).map(|_| Vec::new()).collect();
    for (j, job) in jobs.into_iter().enumerate() {
        let worker = if job.shared.is_some() {
            job.participant
        } else {
            worker_of[j]
        };
        lists[worker].push(job);
    }
    lists
}

/// An input that cannot be split into byte ranges (a compressed file, or
/// stdin), read by several workers at once. Decoding is sequential, so a
/// worker holds the lock only while it decodes its next turn of
/// [`SHARED_CHUNKS_PER_TURN`] chunks of whole lines, then parses and folds
/// them while the others decode theirs: with two workers, decompression
/// overlaps the fold instead of adding to it.
///
/// The workers ("participants", one job each) take their turns in a fixed
/// rotation, 0, 1, ..., 0, 1, ..., so that each reads the same chunks in
/// every run, and the run's answers are the same in every run. A
/// participant whose worker has ended ([`SharedInput::leave`]) is skipped.
#[derive(Debug)]
struct SharedInput {
    path: Option<PathBuf>,
    /// The reader, opened by the first worker to read (so that stdin is
    /// not touched at planning time), and whose turn is next.
    state: Mutex<SharedState>,
    /// Signalled when a turn ends or a participant leaves.
    turn_over: std::sync::Condvar,
    /// The input's header line, published (under the lock) by the worker
    /// that decodes the first chunk, before any later chunk is handed out.
    header: std::sync::OnceLock<Vec<u8>>,
    /// Where its records end ([`framing_of`] the stream).
    framing: Framing,
    /// Set by the first worker that finds the header does not fit the
    /// stream: the input is one reject, whichever workers find it.
    header_rejected: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct SharedState {
    /// `Done` once the input has ended or failed.
    reader: SharedReader,
    /// The participant whose turn is next.
    next: usize,
    /// Per participant: whether it has left (its turns are skipped).
    gone: Vec<bool>,
}

impl SharedState {
    /// Hands the turn to the first participant after `from` (cyclically)
    /// that has not left.
    fn pass(&mut self, from: usize) {
        let participants = self.gone.len();
        if let Some(next) = (1..=participants)
            .map(|step| (from + step) % participants)
            .find(|&p| !self.gone[p])
        {
            self.next = next;
        }
    }
}

/// Chunks a worker decodes in one turn at a shared input's lock (4 MiB).
/// Turns of one chunk handed the decoder to the other core every 256 KiB:
/// its window and tables came from the other core's cache each time, and
/// the waiting worker slept and was woken per chunk. Query 2A from zstd,
/// two workers, then spent 29% more CPU time in zstd than one worker did
/// and took about as long (5.1-5.6 s against 5.7). Turns of 4, 8, 16, 32
/// and 64 chunks: 16 was fastest for zstd and lz4, 5.07-5.56 -> 3.62-3.91
/// s and 3.79-3.97 -> 2.99-3.64 s (bench/README.md, 2026-11-22).
const SHARED_CHUNKS_PER_TURN: usize = 16;

#[derive(Debug)]
enum SharedReader {
    Unopened,
    Open(LineReader),
    Done,
}

/// What one read of a [`SharedInput`] gave, in a turn's order.
enum SharedRead {
    /// A chunk of lines; `first`: the input's first chunk, whose first
    /// line is the header.
    Chunk {
        first: bool,
    },
    End,
    /// A line longer than `LINE_BYTES_MAX` was skipped (the message and
    /// the bytes skipped).
    LineTooLong(String, u64),
    /// The input failed (the source's message: corrupt or cut compressed
    /// data, a read error): what came before it in the turn is folded
    /// first, and the rest of the input is not read.
    Failed(String),
}

impl SharedInput {
    /// An input read in turns by `participants` workers.
    fn new(path: Option<PathBuf>, participants: usize) -> Self {
        assert!(participants >= 1, "an input needs a reader");
        Self {
            path,
            state: Mutex::new(SharedState {
                reader: SharedReader::Unopened,
                next: 0,
                gone: vec![false; participants],
            }),
            turn_over: std::sync::Condvar::new(),
            header: std::sync::OnceLock::new(),
            framing: Framing::Lines,
            header_rejected: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Participant `participant`'s next turn, once it is its turn (or the
    /// input has ended): decoded under the lock by [`Self::read_locked`],
    /// then the turn passes on.
    fn read_turn(
        &self,
        participant: usize,
        chunks: &mut [cardinal_source::Chunk],
        header: bool,
        reads: &mut Vec<SharedRead>,
    ) -> Result<()> {
        let mut state = self.state.lock().expect("shared input lock");
        while state.next != participant && !matches!(state.reader, SharedReader::Done) {
            state = self.turn_over.wait(state).expect("shared input lock");
        }
        let read = self.read_locked(&mut state.reader, chunks, header, reads);
        state.pass(participant);
        self.turn_over.notify_all();
        read
    }

    /// The input's header does not fit the stream: one reject for the
    /// input (by the first worker to find it), and nobody reads on.
    fn reject_header(&self, fold: &mut Fold<'_>, error: &cardinal_parse::Error) {
        if !self
            .header_rejected
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            fold.bad_header(error);
        }
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.reader = SharedReader::Done;
        self.turn_over.notify_all();
    }

    /// Participant `participant` reads no more (its worker ended, well or
    /// not): its turns are skipped from now on.
    fn leave(&self, participant: usize) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.gone[participant] = true;
        if state.next == participant {
            state.pass(participant);
        }
        self.turn_over.notify_all();
    }

    /// Decodes one turn: read `i` into `chunks[i]`, its outcome pushed to
    /// `reads`, until the chunks are used up or the input ends or fails.
    /// With `header`, the input's first chunk's first line is also
    /// published as the header for workers whose first chunk comes later
    /// (the first chunk read, as a single reader's parser would take it:
    /// after a skipped over-long line, the next line).
    fn read_locked(
        &self,
        guard: &mut SharedReader,
        chunks: &mut [cardinal_source::Chunk],
        header: bool,
        reads: &mut Vec<SharedRead>,
    ) -> Result<()> {
        if matches!(*guard, SharedReader::Unopened) {
            let input = match &self.path {
                None => cardinal_source::Input::stdin()?,
                Some(path) => cardinal_source::Input::open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            };
            *guard = SharedReader::Open(LineReader::new(input).with_framing(self.framing));
        }
        for chunk in chunks {
            let SharedReader::Open(reader) = guard else {
                reads.push(SharedRead::End);
                return Ok(());
            };
            let read = match reader.read_chunk(chunk) {
                Ok(true) => {
                    let first = header && self.header.get().is_none();
                    if first {
                        let bytes = chunk.bytes();
                        let end = bytes
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(bytes.len(), |i| i + 1);
                        let _ = self.header.set(bytes[..end].to_vec());
                    }
                    SharedRead::Chunk { first }
                }
                Ok(false) => {
                    *guard = SharedReader::Done;
                    SharedRead::End
                }
                Err(e) if e.is_recoverable() => {
                    SharedRead::LineTooLong(e.to_string(), e.skipped_bytes())
                }
                Err(e) => {
                    *guard = SharedReader::Done;
                    SharedRead::Failed(e.to_string())
                }
            };
            let last = matches!(read, SharedRead::End | SharedRead::Failed(_));
            reads.push(read);
            if last {
                break;
            }
        }
        Ok(())
    }
}

/// What one worker hands back.
struct WorkerOutput<'p> {
    rollups: Vec<Rollup>,
    /// The bytes of each rollup, as reported to the memory budget.
    gauges: Vec<BytesGauge>,
    counts: Counts,
    collector: Option<attribute::Collector<'p>>,
}

/// What workers counted, summed over them after a run.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Records folded: parsed, and routed by every summary of the stream
    /// (into its rollup, or left out by its `WHERE`). A rejected record is
    /// counted in `rejects` and not here, wherever it was rejected.
    pub records: u64,
    /// Bytes of input read (after decompression).
    pub bytes: u64,
    /// Records rejected, for any reason.
    pub rejects: u64,
    /// Rejected records by reason.
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.rejects += other.rejects;
        for (reason, n) in &other.rejects_by_reason {
            *self.rejects_by_reason.entry(reason.clone()).or_default() += n;
        }
    }
}

/// How to run the engine: everything but the plan and the inputs.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The stream the inputs belong to (default: the only one declared).
    pub stream: Option<String>,
    /// Worker threads, at least 1.
    pub threads: usize,
    /// Group limit and retention of every summary.
    pub limits: Limits,
    /// Write every rejected record to this file.
    pub rejects: Option<PathBuf>,
    /// Draw the progress line on stderr (callers check it is a terminal).
    pub progress: bool,
    /// Restore attribution chains from this directory and save them there.
    pub chains_snapshot: Option<PathBuf>,
    /// Bytes the rollups of every worker may hold together (`--memory-max`).
    pub memory_max: u64,
}

/// What a run produced: per summary of the stream, its merged rollup.
#[derive(Debug)]
pub struct Executed<'p> {
    /// The summaries that read the stream, in declaration order.
    pub summaries: Vec<&'p Summary>,
    /// One merged rollup per summary, in the same order.
    pub rollups: Vec<Rollup>,
    /// The credit rows of each CREATE ATTRIBUTION over the stream (their
    /// summaries are among `summaries`).
    pub credits: Vec<attribute::Credits<'p>>,
    /// Records, bytes, rejects and drops over every worker.
    pub counts: Counts,
    /// Worker threads used.
    pub threads: usize,
    /// Wall time from the first read to the merged rollups.
    pub elapsed_secs: f64,
    /// The rejects file, written but not yet in place: the caller commits
    /// it when the run succeeds (see [`AtomicFile`]).
    pub rejects_file: Option<AtomicFile>,
}

impl Executed<'_> {
    /// The merged rollup of the summary called `name`.
    pub fn rollup(&self, name: &str) -> Option<(&Summary, &Rollup)> {
        self.summaries
            .iter()
            .zip(&self.rollups)
            .find(|(s, _)| s.name == name)
            .map(|(s, r)| (*s, r))
    }
}

/// The default thread count: one worker per core.
pub fn threads_default() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The most worker threads `--threads` takes. Each worker keeps its own
/// partial rollups, chunk buffers and up to `PENDING_BYTES_MAX` of held
/// records, so memory grows with the count; more workers than cores only
/// take turns.
pub const THREADS_MAX: usize = 256;

/// Reads `--threads`: 1 to [`THREADS_MAX`].
pub fn threads_arg(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=THREADS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("expected 1 to {THREADS_MAX} (THREADS_MAX)")),
    }
}

pub fn run(args: &Args) -> Result<i32> {
    crate::interrupt::watch()?;
    let sql = std::fs::read_to_string(&args.schema)
        .with_context(|| format!("reading {}", args.schema.display()))?;
    let plan =
        Plan::compile(&sql).map_err(|e| anyhow::anyhow!("{}:\n{e}", args.schema.display()))?;
    if args.hll_hex && !args.java_hll {
        check_hll_hex(&plan)?;
    }
    let options = EngineOptions {
        stream: args.stream.clone(),
        threads: args.threads.unwrap_or_else(threads_default),
        limits: Limits {
            groups_max: args.groups_max,
            retention_ms: args.retention_days.map(|d| i64::from(d) * DAY_MS),
            future_ms: args
                .future_tolerance
                .or(args
                    .retention_days
                    .map(|d| d.max(FUTURE_TOLERANCE_DAYS_MIN)))
                .map(|d| i64::from(d) * DAY_MS),
        },
        rejects: args.rejects.clone(),
        chains_snapshot: args.chains_snapshot.clone(),
        memory_max: args
            .memory_max
            .unwrap_or_else(crate::memory::memory_max_default),
        progress: !args.no_progress && std::io::stderr().is_terminal(),
    };
    let inputs = expand_directories(&args.inputs)?;
    check_outputs(args, &plan, &inputs)?;
    let out = match &args.out {
        Some(dir) => {
            let mut progress = crate::interrupt::lock();
            let out = OutDir::open(dir)
                .with_context(|| format!("cannot write into {}", dir.display()))?;
            progress.staging = Some(out.staging().to_path_buf());
            progress.out = Some(dir.clone());
            Some(out)
        }
        None => None,
    };
    let mut executed = execute(&plan, &inputs, &options)?;
    let mut files = report(&executed, args, out.as_ref())?;
    if let Some(out) = out {
        let mut progress = crate::interrupt::lock();
        progress.staging = None;
        out.finish()?;
    }
    // Output files replace what they name only now, the run done.
    files.extend(executed.rejects_file.take());
    commit_files(files)?;
    // Records dropped at --groups-max (credit summaries), by the retention
    // window or as too far ahead leave an answer short; groups the window
    // left behind as the stream moved on do not.
    let short = executed.rollups.iter().any(|rollup| {
        rollup.dropped_group_limit() > 0
            || rollup.dropped_expired() > 0
            || rollup.dropped_future() > 0
    });
    Ok(if args.strict && (executed.counts.rejects > 0 || short) {
        3
    } else {
        0
    })
}

/// `inputs` with each directory replaced by the files under it, in name
/// order, subdirectories included (not through symbolic links to
/// directories, so a link cannot loop). Named pipes (FIFOs) count as
/// files and are read as streams (see [`is_streamed`]). Names starting
/// with `.` are skipped, as editors' and file managers' leftovers are. A
/// directory with no file under it is an error: it is most likely the
/// wrong one.
fn expand_directories(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
        let mut entries = std::fs::read_dir(dir)
            .with_context(|| format!("reading the directory {}", dir.display()))?
            .map(|entry| entry.map(|e| (e.path(), e.file_type())))
            .collect::<std::io::Result<Vec<_>>>()
            .with_context(|| format!("reading the directory {}", dir.display()))?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, kind) in entries {
            if path
                .file_name()
                .is_some_and(|name| name.as_encoded_bytes().starts_with(b"."))
            {
                continue;
            }
            if kind.as_ref().is_ok_and(std::fs::FileType::is_dir) {
                walk(&path, files)?;
            } else if std::fs::metadata(&path).is_ok_and(|m| m.is_file() || is_fifo(&m)) {
                files.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::with_capacity(inputs.len());
    for input in inputs {
        if input.as_os_str() != "-" && input.is_dir() {
            let before = files.len();
            walk(input, &mut files)?;
            ensure!(
                files.len() > before,
                "{}: the directory holds no file to read",
                input.display()
            );
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

/// Checks before the run that every file and folder the run writes at its
/// end can be written, so that a mistyped path fails in a moment, not
/// after hours of input. Nothing existing is changed: a file is opened
/// without truncating it, and a file or probe created here is removed.
///
/// Also refuses any output that would overwrite what the run reads: an
/// output file that is an input or the schema (the same file by device and
/// inode, whatever path names it), two outputs that are one file, a
/// summary's folder under `--out` that holds an input (the run replaces
/// the folder whole), and a chains snapshot file given as an input. The
/// output folders' names come from the compiled plan, so they are checked
/// with the same rule the writers use. No other output may go inside a
/// summary folder either, since the folder is replaced whole.
/// Nothing read may be named like a temp file (`.cardinal-tmp-`), which
/// runs remove as debris.
fn check_outputs(args: &Args, plan: &Plan, inputs: &[PathBuf]) -> Result<()> {
    let mut read: Vec<(&Path, &str)> = vec![(args.schema.as_path(), "the schema")];
    read.extend(
        inputs
            .iter()
            .filter(|path| path.as_os_str() != "-")
            .map(|path| (path.as_path(), "an input")),
    );
    for (path, what) in &read {
        // Runs remove what is named so as debris (their own temp files),
        // with --out or beside an output file: it may vanish mid-run.
        let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        ensure!(
            !resolved.components().any(|c| c
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(cardinal_export::STAGING_PREFIX.as_bytes())),
            "{} ({what}) is under a name starting with {}, which runs remove as their temp files; move it elsewhere",
            path.display(),
            cardinal_export::STAGING_PREFIX
        );
    }
    let mut written: Vec<(&str, &Path)> = Vec::new();
    for (flag, path) in [
        ("--json", &args.json),
        ("--attributions", &args.attributions),
        ("--rejects", &args.rejects),
    ] {
        let Some(path) = path else { continue };
        if flag != "--rejects" && path.as_os_str() == "-" {
            continue;
        }
        refuse_if_read(flag, path, &read)?;
        if let Some((other, _)) = written
            .iter()
            .find(|(_, seen)| *seen == path.as_path() || same_file(seen, path))
        {
            bail!(
                "{flag} {} is also the file of {other}; give each output its own file",
                path.display()
            );
        }
        written.push((flag, path));
        check_file(path)?;
    }
    if let Some(dir) = &args.out {
        for summary in &plan.summaries {
            let folder = cardinal_export::join_under(dir, &summary.name)?;
            let kept = written.iter().copied().chain(
                args.chains_snapshot
                    .as_deref()
                    .map(|d| ("--chains-snapshot", d)),
            );
            for (flag, path) in kept {
                let parent = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
                ensure!(
                    !is_under(parent, &folder) && !is_under(path, &folder),
                    "{flag} {}: the run replaces {} whole, and the output would go with it; write it elsewhere",
                    path.display(),
                    folder.display()
                );
            }
            for (path, what) in &read {
                ensure!(
                    !is_under(path, &folder),
                    "--out {}: the run replaces {} whole, and {what} ({}) is in it; write the results elsewhere",
                    dir.display(),
                    folder.display(),
                    path.display()
                );
            }
        }
    }
    if let Some(dir) = &args.chains_snapshot {
        check_dir(dir)?;
        for attribution in &plan.attributions {
            for extension in ["chains", "names"] {
                let file =
                    cardinal_export::join_under(dir, &format!("{}.{extension}", attribution.name))?;
                refuse_if_read("--chains-snapshot", &file, &read)?;
            }
        }
    }
    Ok(())
}

/// Starts writing output file `path` whole or not at all: it is replaced
/// when [`commit_files`] commits it, and until then an interrupt or an
/// error removes the temp file and leaves `path` as it was.
fn output_file(path: &Path) -> Result<AtomicFile> {
    let mut progress = crate::interrupt::lock();
    let file = AtomicFile::create(path).with_context(|| format!("creating {}", path.display()))?;
    progress.temp_files.push(file.temp_path().to_path_buf());
    Ok(file)
}

/// Renames the run's output files into place (see [`output_file`]).
fn commit_files(files: Vec<AtomicFile>) -> Result<()> {
    // An interrupt waits, so it never removes a temp file being renamed.
    let mut progress = crate::interrupt::lock();
    for file in files {
        progress.temp_files.retain(|temp| temp != file.temp_path());
        let target = file.target().to_path_buf();
        file.commit()
            .with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(())
}

/// Refuses output `path` of `flag` if it is a file the run reads.
fn refuse_if_read(flag: &str, path: &Path, read: &[(&Path, &str)]) -> Result<()> {
    if let Some((input, what)) = read.iter().find(|(input, _)| same_file(input, path)) {
        bail!(
            "{flag} {} is {what} ({}); the run would overwrite what it reads",
            path.display(),
            input.display()
        );
    }
    Ok(())
}

/// Refuses `--hll-hex` for HyperLogLogs postgresql-hll cannot read, before
/// any input is read.
fn check_hll_hex(plan: &Plan) -> Result<()> {
    for summary in &plan.summaries {
        for aggregate in &summary.aggregates {
            if let cardinal_route::AggregateKind::Hll { log2m, regwidth } = aggregate.kind {
                let settings = cardinal_sketch::hll::Settings::new(log2m, regwidth)?;
                settings.check_postgresql().with_context(|| {
                    format!(
                        "--hll-hex: summary {}, hll(x, {log2m}, {regwidth}) \
                         (--java-hll writes it for java-hll readers)",
                        summary.name
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one existing file (device and inode on Unix),
/// however each is named: links, `./`, symbolic links.
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(a), Ok(b)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// Whether existing `path` is `folder` or inside it, symbolic links
/// resolved.
fn is_under(path: &Path, folder: &Path) -> bool {
    match (std::fs::canonicalize(path), std::fs::canonicalize(folder)) {
        (Ok(path), Ok(folder)) => path.starts_with(folder),
        _ => false,
    }
}

/// Whether `path` can be written (see [`check_outputs`]).
fn check_file(path: &Path) -> Result<()> {
    let context = || format!("cannot write {}", path.display());
    ensure!(
        !path.is_dir(),
        "cannot write {}: it is a folder",
        path.display()
    );
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::File::create_new(path).with_context(context)?;
            std::fs::remove_file(path).with_context(context)
        }
        Err(e) => Err(e).with_context(context),
    }
}

/// Whether files can be written in folder `dir`, created if missing (see
/// [`check_outputs`]).
fn check_dir(dir: &Path) -> Result<()> {
    let context = || format!("cannot write into {}", dir.display());
    std::fs::create_dir_all(dir).with_context(context)?;
    let probe = dir.join(format!(".cardinal-check-{}", std::process::id()));
    std::fs::File::create(&probe).with_context(context)?;
    std::fs::remove_file(&probe).with_context(context)
}

/// Runs the engine over `inputs`: every summary of the stream, on
/// `options.threads` workers, merged.
///
/// The answers are the same in every run with the same inputs and thread
/// count, sketches included: the jobs are dealt out the same way
/// ([`assign_jobs`]), shared inputs are read in a fixed rotation
/// ([`SharedInput`]), each worker's sketches (and this thread's, made by
/// the merge) flip coins of a stream named by the worker, and the
/// partials merge in worker order. Another thread count splits the work
/// otherwise, and approximate answers then differ within their bounds.
pub fn execute<'p>(
    plan: &'p Plan,
    inputs: &[PathBuf],
    options: &EngineOptions,
) -> Result<Executed<'p>> {
    cardinal_sketch::quantiles::seed_thread(0);
    let stream = pick_stream(plan, options.stream.as_deref())?;
    let mut summaries: Vec<&Summary> = plan
        .summaries
        .iter()
        .filter(|s| s.stream == stream)
        .collect();
    let threads = options.threads.max(1);
    let mut attribution =
        attribute::Setup::new(plan, stream, threads, options.chains_snapshot.as_deref())?;
    ensure!(
        !summaries.is_empty() || attribution.is_some(),
        "no CREATE SUMMARY or CREATE ATTRIBUTION reads stream {}",
        plan.streams[stream].name
    );
    let shapes: Vec<Shape> = summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    let limits = options.limits;
    // The columns to decode: those the summaries read; `None`, every column,
    // when an attribution reads the stream (it reads user, time, conditions,
    // value, campaign and site columns of its own). Text parsers split only
    // these, Parquet jobs decode only these.
    let projection: Option<Vec<usize>> = attribution.is_none().then(|| {
        let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
        reads.sort_unstable();
        reads.dedup();
        reads
    });
    let every_column: Vec<usize>;
    let reads = match &projection {
        Some(reads) => reads.as_slice(),
        None => {
            every_column = (0..plan.streams[stream].schema.columns.len()).collect();
            &every_column
        }
    };
    let jobs = plan_jobs(inputs, threads, &plan.streams[stream], reads)?;
    let total_bytes = plain_bytes(inputs)?;
    let mut lists = assign_jobs(jobs, threads).into_iter();
    let rejects_temp = options.rejects.as_deref().map(output_file).transpose()?;
    let rejects_file = match &rejects_temp {
        // Workers write through a second handle of the temp file.
        Some(temp) => Some(Mutex::new(BufWriter::new(
            temp.file()
                .try_clone()
                .with_context(|| format!("creating {}", temp.target().display()))?,
        ))),
        None => None,
    };
    let shown = std::sync::atomic::AtomicU64::new(0);
    let progress = Progress::default();
    let budget = MemoryBudget::new(options.memory_max);

    let started = Instant::now();
    let outputs: Vec<Result<WorkerOutput>> = std::thread::scope(|scope| {
        // Dropping `stop` (after the workers are joined) ends the ticker.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        if options.progress {
            let progress = &progress;
            scope.spawn(move || progress.show(total_bytes, &stopped));
        }
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let jobs = lists.next().expect("a list per worker");
                let (summaries, shapes, rejects_file) = (&summaries, &shapes, &rejects_file);
                let (shown, attribution, progress) = (&shown, &attribution, &progress);
                let budget = &budget;
                let projection = projection.as_deref();
                scope.spawn(move || {
                    // Each worker's sketches flip coins of its own stream,
                    // the same in every run.
                    cardinal_sketch::quantiles::seed_thread(index as u64 + 1);
                    worker(
                        plan,
                        stream,
                        summaries,
                        shapes,
                        limits,
                        jobs,
                        rejects_file.as_ref(),
                        shown,
                        attribution.as_ref(),
                        projection,
                        progress,
                        budget,
                    )
                })
            })
            .collect();
        let outputs = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked")))
            })
            .collect();
        drop(stop);
        outputs
    });
    let mut merged: Option<(Vec<Rollup>, Vec<BytesGauge>)> = None;
    let mut counts = Counts::default();
    let mut collectors = Vec::new();
    for output in outputs {
        let mut output = output?;
        counts.add(&output.counts);
        collectors.extend(output.collector);
        match &mut merged {
            None => merged = Some((output.rollups, output.gauges)),
            Some((all, gauges)) => {
                let summaries = all.iter_mut().zip(gauges).zip(&summaries);
                for (((into, gauge), summary), (from, from_gauge)) in
                    summaries.zip(output.rollups.iter().zip(&mut output.gauges))
                {
                    match into.merge(from) {
                        Err(cardinal_rollup::Error::Limit {
                            name: "groups_max",
                            value,
                            ..
                        }) => return Err(group_limit_error(&summary.name, value)),
                        merged => merged.context("merging partial rollups")?,
                    }
                    // The merged rollup has grown while the partial is
                    // still held: the moment memory peaks.
                    let bytes = gauge.rescan(into);
                    gauge.update(into, 0, &budget);
                    if !budget.holds() {
                        return Err(crate::memory::budget_error(
                            &summary.name,
                            bytes,
                            into.group_count(),
                            budget.bytes_max(),
                        ));
                    }
                    from_gauge.release(&budget);
                }
            }
        }
    }
    let merged = merged.map(|(rollups, _)| rollups);
    let mut rollups = merged.expect("at least one worker");
    let credits = match &mut attribution {
        Some(setup) => setup.apply(collectors)?,
        None => Vec::new(),
    };
    let credit_summaries: Vec<&Summary> = plan
        .summaries
        .iter()
        .filter(|s| {
            credits
                .iter()
                .any(|c| c.attribution.credit_stream == s.stream)
        })
        .collect();
    let credit_shapes: Vec<Shape> = credit_summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    rollups.extend(attribute::fold_credits(
        &credits,
        &credit_summaries,
        &credit_shapes,
        limits,
    )?);
    summaries.extend(credit_summaries);
    let elapsed_secs = started.elapsed().as_secs_f64();
    if let Some(file) = rejects_file {
        file.into_inner()
            .expect("workers are done")
            .flush()
            .context("writing rejects")?;
    }
    for rollup in &mut rollups {
        // Each worker dropped by the newest bucket it saw; the answer keeps
        // the buckets within the window of the newest any worker saw, and
        // none too far ahead of the whole stream.
        rollup.evict_expired();
        rollup.evict_future();
    }
    Ok(Executed {
        summaries,
        rollups,
        credits,
        counts,
        threads,
        elapsed_secs,
        rejects_file: rejects_temp,
    })
}

/// The total size of the inputs when every one is a plain file (so bytes
/// read can become a percentage), else `None`. A streamed input is not
/// opened here: its bytes are for the worker that reads it.
fn plain_bytes(inputs: &[PathBuf]) -> Result<Option<u64>> {
    let mut total = 0u64;
    for path in inputs {
        if is_streamed(path)? {
            return Ok(None);
        }
        let input = cardinal_source::Input::open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        if input.compression() != cardinal_source::Compression::None {
            return Ok(None);
        }
        total += std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
    }
    Ok(Some(total))
}

/// Prints or writes what `cardinal run` was asked for, then the summary
/// line and any drops. Returns the output files written, for the caller to
/// commit when the run succeeds.
fn report(
    executed: &Executed<'_>,
    args: &Args,
    out_dir: Option<&OutDir>,
) -> Result<Vec<AtomicFile>> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let options = Options {
        hll_hex: args.hll_hex,
    };
    let json_file = match &args.json {
        Some(path) if path.as_os_str() != "-" => Some(output_file(path)?),
        _ => None,
    };
    let mut json: Option<Box<dyn Write + '_>> = match (&args.json, &json_file) {
        (_, Some(file)) => Some(Box::new(BufWriter::new(file.file()))),
        (Some(_), None) => Some(Box::new(std::io::stdout())),
        (None, None) => None,
    };
    if out_dir.is_some() {
        check_output_days(executed)?;
        crate::interrupt::lock().pending = executed
            .summaries
            .iter()
            .map(|summary| summary.name.clone())
            .collect();
    }
    let tables = !args.quiet
        && args.json.as_deref() != Some(Path::new("-"))
        && args.attributions.as_deref() != Some(Path::new("-"));
    for (summary, rollup) in executed.summaries.iter().zip(&executed.rollups) {
        if !tables && args.out.is_none() && json.is_none() {
            // Nothing reads the results: do not order a million rows for
            // nothing (`--quiet` alone).
            continue;
        }
        let results = results_of(summary, rollup)?;
        if tables {
            let groups = rollup.group_count();
            let noun = if groups == 1 { "group" } else { "groups" };
            writeln!(out, "{} ({groups} {noun})", summary.name)?;
            let max_rows = if args.max_rows == 0 {
                usize::MAX
            } else {
                args.max_rows
            };
            write!(out, "{}", cardinal_export::table_head(&results, max_rows))?;
            if results.rows().len() > max_rows {
                writeln!(
                    out,
                    "(--max-rows 0 prints every row; --out and --json write them)"
                )?;
            }
            writeln!(out)?;
        }
        if let (Some(dir), Some(out_dir)) = (&args.out, out_dir) {
            // An interrupt waits for this summary to be written and
            // committed whole (see interrupt.rs).
            let mut progress = crate::interrupt::lock();
            let files = out_dir.write_daily_csv(&summary.name, &results, options)?;
            progress.pending.retain(|name| *name != summary.name);
            progress.written.push(summary.name.clone());
            drop(progress);
            eprintln!(
                "{}: wrote {} file(s) under {}",
                summary.name,
                files.len(),
                dir.join(&summary.name).display()
            );
        }
        if let Some(writer) = json.as_mut() {
            cardinal_export::write_json_lines(writer, &summary.name, &results, options)?;
        }
    }
    if let Some(writer) = json.as_mut() {
        writer.flush().context("writing JSON lines")?;
    }
    drop(json);
    let mut files: Vec<AtomicFile> = json_file.into_iter().collect();
    if let Some(path) = &args.attributions {
        let file = (path.as_os_str() != "-")
            .then(|| output_file(path))
            .transpose()?;
        let mut writer: Box<dyn Write + '_> = match &file {
            Some(file) => Box::new(BufWriter::new(file.file())),
            None => Box::new(std::io::stdout()),
        };
        for c in &executed.credits {
            c.write_json_lines(&mut writer)?;
        }
        writer.flush().context("writing attribution rows")?;
        drop(writer);
        files.extend(file);
    }
    for c in &executed.credits {
        let s = &c.stats;
        eprintln!(
            "{}: {} touch points, {} conversions ({} without touch points in the window), {} credit rows",
            c.attribution.name,
            s.touches,
            s.conversions,
            s.conversions_uncredited,
            c.rows.len()
        );
        let problems = s.skipped + s.values_out_of_range + s.touches_dropped + s.touches_expired;
        if problems + c.names_overflow() > 0 {
            eprintln!(
                "{}: {} records skipped (NULL user or time out of range), {} conversion values out of range (revenue NULL), {} touch points dropped by chain limits, {} touch points older than the lookback when they arrived, {} campaign/site values past NAMES_MAX kept as NULL",
                c.attribution.name,
                s.skipped,
                s.values_out_of_range,
                s.touches_dropped,
                s.touches_expired,
                c.names_overflow()
            );
        }
    }
    eprintln!("{}", summary_line(executed));
    for line in drop_lines(executed) {
        eprintln!("{line}");
    }
    Ok(files)
}

/// `N records, X MB in S s: R M records/s, T MB/s on K thread(s); J rejected`:
/// `N` and the rate count the records folded ([`Counts::records`]), `J`
/// the rejected ones apart.
pub fn summary_line(executed: &Executed<'_>) -> String {
    let counts = &executed.counts;
    let elapsed = executed.elapsed_secs.max(1e-9);
    format!(
        "{} records, {:.1} MB in {:.2} s: {:.2} M records/s, {:.0} MB/s on {} thread(s); {} rejected{}",
        counts.records,
        counts.bytes as f64 / 1e6,
        executed.elapsed_secs,
        counts.records as f64 / elapsed / 1e6,
        counts.bytes as f64 / elapsed / 1e6,
        executed.threads,
        counts.rejects,
        if counts.rejects_by_reason.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                counts
                    .rejects_by_reason
                    .iter()
                    .map(|(r, n)| format!("{r}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    )
}

/// The error of a summary whose answer has more groups than
/// `--groups-max`: the same whether one worker's partial or the merge of
/// all of them found it, so that a run fails alike on any thread count.
fn group_limit_error(summary: &str, groups_max: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "summary {summary} has more than {groups_max} groups (--groups-max); \
         nothing was written: raise the limit or group by fewer values"
    )
}

/// One line per summary and kind of dropped record, if any were.
pub fn drop_lines(executed: &Executed<'_>) -> Vec<String> {
    let mut lines = Vec::new();
    for (summary, rollup) in executed.summaries.iter().zip(&executed.rollups) {
        if rollup.dropped_group_limit() > 0 {
            lines.push(format!(
                "{}: {} records dropped: the summary reached --groups-max",
                summary.name,
                rollup.dropped_group_limit()
            ));
        }
        if rollup.dropped_expired() > 0 {
            lines.push(format!(
                "{}: {} records dropped: older than --retention-days",
                summary.name,
                rollup.dropped_expired()
            ));
        }
        if let Some(oldest) = rollup.evicted_before() {
            lines.push(format!(
                "{}: groups of buckets before {oldest} evicted: older than --retention-days",
                summary.name
            ));
        }
        if let Some(newest) = rollup.evicted_after() {
            lines.push(format!(
                "{}: {} records dropped: buckets after {newest} are further ahead of the stream than --future-tolerance",
                summary.name,
                rollup.dropped_future()
            ));
        }
    }
    lines
}

/// Most distinct days of one summary's answer written as files (one file
/// per day): about a century of daily files, far more than any dated
/// stream spans, and a bound on the files a few bad timestamps spread
/// over the calendar can make a run write.
pub const OUTPUT_DAYS_MAX: usize = 36_600;

/// Fails, naming the summary, when a summary's answer spans more than
/// [`OUTPUT_DAYS_MAX`] days: checked before any file is written, so that
/// the run writes all of its files or none.
fn check_output_days(executed: &Executed<'_>) -> Result<()> {
    for (summary, rollup) in executed.summaries.iter().zip(&executed.rollups) {
        let mut days = std::collections::HashSet::new();
        for (bucket, _, _) in rollup.groups() {
            days.insert(bucket.0.div_euclid(DAY_MS));
            ensure!(
                days.len() <= OUTPUT_DAYS_MAX,
                "summary {} spans more than {OUTPUT_DAYS_MAX} days (OUTPUT_DAYS_MAX), one \
                 file each under --out; nothing was written: check its timestamps, or \
                 keep a window with --retention-days",
                summary.name
            );
        }
    }
    Ok(())
}

/// Writes `dir/<summary>/YYYY-MM-DD.csv` (or `all.csv`) for every summary,
/// holding `dir` as `--out` does ([`OutDir`]); returns each summary's name
/// and files.
pub fn write_files(
    executed: &Executed<'_>,
    dir: &Path,
    options: Options,
) -> Result<Vec<(String, Vec<PathBuf>)>> {
    check_output_days(executed)?;
    let out = OutDir::open(dir).with_context(|| format!("cannot write into {}", dir.display()))?;
    let mut written = Vec::new();
    for (summary, rollup) in executed.summaries.iter().zip(&executed.rollups) {
        let results = results_of(summary, rollup)?;
        let files = out.write_daily_csv(&summary.name, &results, options)?;
        written.push((summary.name.clone(), files));
    }
    out.finish()?;
    Ok(written)
}

fn pick_stream(plan: &Plan, name: Option<&str>) -> Result<usize> {
    // Credit streams are written by attributions, not read from inputs.
    let inputs: Vec<usize> = (0..plan.streams.len())
        .filter(|&i| plan.streams[i].credit_of.is_none())
        .collect();
    let names = || {
        inputs
            .iter()
            .map(|&i| plan.streams[i].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(name) => inputs
            .iter()
            .copied()
            .find(|&i| plan.streams[i].name.eq_ignore_ascii_case(name))
            .with_context(|| format!("no stream called {name} (declared: {})", names())),
        None => match inputs[..] {
            [only] => Ok(only),
            [] => bail!("the schema declares no stream (CREATE STREAM ...)"),
            _ => bail!(
                "the schema declares {} streams ({}); say which one the inputs are with --stream",
                inputs.len(),
                names()
            ),
        },
    }
}

/// The rollup shape of a compiled summary.
fn shape_of(summary: &Summary) -> Result<Shape> {
    ensure!(
        summary.aggregates.len() <= AGGREGATES_MAX,
        "summary {} has {} aggregates; at most {AGGREGATES_MAX}",
        summary.name,
        summary.aggregates.len()
    );
    let aggs = summary
        .aggregates
        .iter()
        .enumerate()
        .map(|(index, a)| -> Result<AggKind> {
            // A quantile aggregate over the argument and k of an earlier
            // one reads that one's sketch.
            if let AggregateKind::Quantiles { k, ranks } = &a.kind
                && let Some(of) = summary.aggregates[..index].iter().position(|b| {
                    b.argument == a.argument
                        && matches!(b.kind, AggregateKind::Quantiles { k: other, .. } if other == *k)
                })
            {
                return Ok(AggKind::QuantilesOf {
                    of: u8::try_from(of).expect("at most AGGREGATES_MAX aggregates"),
                    ranks: cardinal_rollup::Ranks::new(ranks)?,
                });
            }
            Ok(match &a.kind {
                AggregateKind::CountAll => AggKind::CountAll,
                AggregateKind::Count => AggKind::Count,
                AggregateKind::Sum => AggKind::Sum,
                AggregateKind::SumInt => AggKind::SumInt,
                AggregateKind::Min => AggKind::Min,
                AggregateKind::MinInt => AggKind::MinInt,
                AggregateKind::Max => AggKind::Max,
                AggregateKind::MaxInt => AggKind::MaxInt,
                AggregateKind::Avg => AggKind::Avg,
                AggregateKind::Hll { log2m, regwidth } => AggKind::Hll {
                    log2m: *log2m,
                    regwidth: *regwidth,
                },
                AggregateKind::ExactDistinct => AggKind::ExactDistinct,
                AggregateKind::Quantiles { k, ranks } => AggKind::Quantiles {
                    k: *k,
                    ranks: cardinal_rollup::Ranks::new(ranks)?,
                },
                AggregateKind::TopK { k } => AggKind::TopK { k: *k },
                AggregateKind::Theta { lg_k } => AggKind::Theta { lg_k: *lg_k },
            })
        })
        .collect::<Result<_>>()?;
    Ok(Shape { aggs })
}

/// Splits the inputs into jobs: large plain files into newline-aligned byte
/// ranges (one per thread), Parquet files into ranges of row groups,
/// everything else whole. `reads`: the columns the summaries read.
fn plan_jobs(
    inputs: &[PathBuf],
    threads: usize,
    stream: &cardinal_route::Stream,
    reads: &[usize],
) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    ensure!(
        inputs.iter().filter(|p| p.as_os_str() == "-").count() <= 1,
        "stdin (-) is named more than once: it can be read only once"
    );
    let mut streamed = std::collections::HashSet::new();
    for (input, path) in inputs.iter().enumerate() {
        let input = u32::try_from(input).context("too many inputs")?;
        if is_streamed(path)? {
            // Opened once, by the worker that reads it, and read from its
            // first byte: planning must not open it (a pipe's bytes read
            // here would be lost to the reader, and a FIFO would wait for
            // a writer each time).
            let stdin = path.as_os_str() == "-";
            let shown = if stdin {
                "stdin".to_owned()
            } else {
                format!("{}, not a regular file", path.display())
            };
            ensure!(
                stream.format != Format::Parquet,
                "stream {} is Parquet, which cannot be read from {shown}: name the file",
                stream.name
            );
            ensure!(
                streamed.insert(path.clone()),
                "{} is named more than once: it is not a regular file, so it can be read only once",
                path.display()
            );
            let path = (!stdin).then(|| path.clone());
            if threads > 1 {
                shared_jobs(&mut jobs, input, path, threads, framing_of(stream));
            } else {
                jobs.push(Job::whole(input, path));
            }
            continue;
        }
        match parquet_input(path, stream, reads) {
            Ok(Some(file)) => {
                jobs.extend(parquet_jobs(&file, threads).into_iter().map(|groups| Job {
                    size: file.bytes(groups.clone()),
                    parquet: Some((file.clone(), groups)),
                    ..Job::whole(input, Some(path.clone()))
                }));
                continue;
            }
            Ok(None) => {}
            // A Parquet file cut short (a shipper's file mid-write) is bad
            // input, which never stops a run: one reject, as a cut gzip
            // stream's rest is. A missing column or a wrong type is the
            // declaration's mistake and stops it.
            Err(e)
                if matches!(
                    e.downcast_ref::<cardinal_parse::Error>(),
                    Some(cardinal_parse::Error::ParquetFooter { .. })
                ) =>
            {
                jobs.push(Job {
                    unreadable: Some(e.to_string()),
                    ..Job::whole(input, Some(path.clone()))
                });
                continue;
            }
            Err(e) => return Err(e),
        }
        let len = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        let plain = cardinal_source::Input::open(path)
            .with_context(|| format!("opening {}", path.display()))?
            .compression()
            == cardinal_source::Compression::None;
        if threads > 1 && plain && len >= split_bytes_min() && header_fits(path, stream)? {
            let ranges = split_file_records(path, threads, framing_of(stream))
                .with_context(|| format!("splitting {}", path.display()))?;
            let header = if stream.header && stream.format == Format::Csv {
                let mut line = Vec::new();
                std::io::BufReader::new(std::fs::File::open(path)?).read_until(b'\n', &mut line)?;
                Some(line)
            } else {
                None
            };
            for (i, range) in ranges.into_iter().enumerate() {
                let header = if i == 0 { None } else { header.clone() };
                jobs.push(Job {
                    size: range.end - range.start,
                    range: Some(range),
                    header,
                    ..Job::whole(input, Some(path.clone()))
                });
            }
        } else if threads > 1 && !plain {
            shared_jobs(
                &mut jobs,
                input,
                Some(path.clone()),
                threads,
                framing_of(stream),
            );
        } else {
            jobs.push(Job {
                size: len,
                ..Job::whole(input, Some(path.clone()))
            });
        }
    }
    Ok(jobs)
}

/// Whether `path` is read as a stream, like stdin (`-`): anything that is
/// not a regular file (a pipe such as `<(zcat a.gz)`'s `/dev/fd/63`, a
/// FIFO, a character device). Such an input is opened once and read once
/// from its first byte, its compression detected from the bytes read; it
/// is never opened to plan the run, measured, or split into byte ranges.
fn is_streamed(path: &Path) -> Result<bool> {
    if path.as_os_str() == "-" {
        return Ok(true);
    }
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(!metadata.is_file() && !metadata.is_dir())
}

/// Whether `metadata` is a named pipe's (FIFO's).
fn is_fifo(metadata: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileTypeExt::is_fifo(&metadata.file_type())
    }
    #[cfg(not(unix))]
    {
        let _ = metadata;
        false
    }
}

/// Whether the plain file at `path` has the header its stream expects, if
/// it expects one. A file whose header does not fit is not split: its one
/// reader reports it once, as one reject.
fn header_fits(path: &Path, stream: &cardinal_route::Stream) -> Result<bool> {
    if !(stream.header && stream.format == Format::Csv) {
        return Ok(true);
    }
    let mut line = Vec::new();
    std::io::BufReader::new(
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
    )
    .read_until(b'\n', &mut line)?;
    let Parser::Csv(mut csv) = Parser::new(stream, None)? else {
        unreachable!("a CSV stream has a CSV parser")
    };
    Ok(csv
        .read_header(&path.display().to_string().into(), &line)
        .is_ok())
}

/// Plans one job per worker for an input they all read together (see
/// [`SharedInput`]); a worker whose job finds the input already ended
/// moves on to the next job.
fn shared_jobs(
    jobs: &mut Vec<Job>,
    input: u32,
    path: Option<PathBuf>,
    threads: usize,
    framing: Framing,
) {
    let mut shared = SharedInput::new(path.clone(), threads);
    shared.framing = framing;
    let shared = Arc::new(shared);
    jobs.extend((0..threads).map(|participant| Job {
        shared: Some(shared.clone()),
        participant,
        ..Job::whole(input, path.clone())
    }));
}

/// The Parquet file at `path`, opened and matched to the stream, when the
/// stream is Parquet; `None` for a text stream. Either way the file's
/// magic bytes must agree with the stream's format.
fn parquet_input(
    path: &Path,
    stream: &cardinal_route::Stream,
    reads: &[usize],
) -> Result<Option<Arc<ParquetFile>>> {
    let mut magic = [0u8; 4];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let got = std::io::Read::read(&mut file, &mut magic)
        .with_context(|| format!("reading {}", path.display()))?;
    let is_parquet = cardinal_parse::is_parquet(&magic[..got]);
    match (stream.format == Format::Parquet, is_parquet) {
        (true, true) => {
            let name: Arc<str> = path.display().to_string().into();
            Ok(Some(Arc::new(ParquetFile::open(
                path,
                name,
                &stream.schema,
                reads,
            )?)))
        }
        (true, false) => bail!(
            "{} is not a Parquet file (it does not start with PAR1), but stream {} is declared WITH (format = 'parquet')",
            path.display(),
            stream.name
        ),
        (false, true) => bail!(
            "{} is a Parquet file; declare stream {} WITH (format = 'parquet') to read it",
            path.display(),
            stream.name
        ),
        (false, false) => Ok(None),
    }
}

/// Consecutive ranges of `file`'s row groups, about
/// [`PARQUET_JOBS_PER_THREAD`] per thread, none empty.
fn parquet_jobs(file: &ParquetFile, threads: usize) -> Vec<std::ops::Range<usize>> {
    let groups = file.row_groups();
    let jobs = (threads * PARQUET_JOBS_PER_THREAD).clamp(1, groups.max(1));
    let per_job = groups.div_ceil(jobs).max(1);
    let ranges: Vec<_> = (0..groups)
        .step_by(per_job)
        .map(|start| start..(start + per_job).min(groups))
        .collect();
    debug_assert_eq!(
        ranges.iter().map(ExactSizeIterator::len).sum::<usize>(),
        groups
    );
    ranges
}

/// How a stream's text is cut into records: delimited text by its quoting
/// rules (a quoted field may hold newlines), so that chunks and byte ranges
/// never end inside a quoted field; NDJSON at every newline.
fn framing_of(stream: &cardinal_route::Stream) -> Framing {
    match stream.format {
        Format::Csv => Framing::Csv {
            delimiter: stream.delimiter,
        },
        Format::Amplab => Framing::Csv {
            delimiter: CsvConfig::amplab().delimiter,
        },
        Format::Json | Format::Parquet => Framing::Lines,
    }
}

enum Parser {
    Csv(CsvParser),
    Json(NdjsonParser),
}

impl Parser {
    /// A parser for `stream` that splits only the columns in `reads`
    /// (delimited text: the others are not split, and read as absent), or
    /// every column when `reads` is `None`.
    fn new(stream: &cardinal_route::Stream, reads: Option<&[usize]>) -> Result<Self> {
        Ok(match stream.format {
            Format::Csv | Format::Amplab => {
                let config = match stream.format {
                    Format::Amplab => CsvConfig::amplab(),
                    _ => CsvConfig {
                        delimiter: stream.delimiter,
                        header: stream.header,
                        ..CsvConfig::default()
                    },
                };
                let mut parser = CsvParser::new(&stream.schema, config)?;
                if let Some(reads) = reads {
                    parser.project(reads);
                }
                Parser::Csv(parser)
            }
            Format::Json => Parser::Json(NdjsonParser::new(&stream.schema)?),
            Format::Parquet => bail!("Parquet jobs are read by read_parquet, not parsed"),
        })
    }

    fn parse(&mut self, batch: &mut Batch) -> Result<()> {
        match self {
            Parser::Csv(p) => p.parse(batch)?,
            Parser::Json(p) => p.parse(batch),
        }
        Ok(())
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the worker's whole context, borrowed from run"
)]
fn worker<'p>(
    plan: &Plan,
    stream: usize,
    summaries: &[&Summary],
    shapes: &[Shape],
    limits: Limits,
    jobs: Vec<Job>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    shown: &std::sync::atomic::AtomicU64,
    attribution: Option<&attribute::Setup<'p>>,
    projection: Option<&[usize]>,
    progress: &Progress,
    budget: &MemoryBudget,
) -> Result<WorkerOutput<'p>> {
    // However this worker ends (done, failed, panicked), the shared
    // inputs it takes part in stop waiting for its turns.
    struct LeaveShared<'j>(&'j [Job]);
    impl Drop for LeaveShared<'_> {
        fn drop(&mut self) {
            for job in self.0 {
                if let Some(shared) = &job.shared {
                    shared.leave(job.participant);
                }
            }
        }
    }
    let _leave = LeaveShared(&jobs);
    let mut collector = attribution.map(attribute::Setup::collector);
    let stream_decl = &plan.streams[stream];
    let mut fold = Fold::new(summaries, shapes, limits, shown, stream_decl)?;
    fold.budget = Some(budget);
    let mut tap = progress.tap();
    let mut batch = Batch::new();
    for job in &jobs {
        // The last job's last rejects (a cut stream's, a damaged row
        // group's, a long last line's) follow no chunk that wrote them out.
        fold.flush_rejects(rejects_file)?;
        if let Some(why) = &job.unreadable {
            fold.unreadable(&format!("{why}; none of it is read"));
            continue;
        }
        if let Some((file, groups)) = &job.parquet {
            read_parquet(
                file,
                groups.clone(),
                job.input,
                &mut fold,
                collector.as_mut(),
                rejects_file,
            )?;
            tap.report(&fold.counts);
            continue;
        }
        if let Some(shared) = &job.shared {
            read_shared(
                shared,
                job.participant,
                stream_decl,
                projection,
                job.input,
                &mut batch,
                &mut fold,
                &mut collector,
                rejects_file,
                &mut tap,
            )?;
            continue;
        }
        let input = match (&job.path, &job.range) {
            (None, _) => cardinal_source::Input::stdin()?,
            (Some(path), None) => cardinal_source::Input::open(path)?,
            (Some(path), Some(range)) => cardinal_source::Input::open_range(path, range.clone())?,
        };
        let name: Arc<str> = input.name().clone();
        let mut reader = LineReader::new(input).with_framing(framing_of(stream_decl));
        let mut parser = Parser::new(stream_decl, projection)?;
        if let (Some(header), Parser::Csv(csv)) = (&job.header, &mut parser)
            && let Err(e) = csv.read_header(&name, header)
        {
            fold.bad_header(e);
            continue;
        }
        loop {
            match reader.read_chunk(batch.chunk_mut()) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if e.is_recoverable() => {
                    // The skipped line was read: the rate counts it.
                    fold.counts.bytes += e.skipped_bytes();
                    fold.reject(LINE_TOO_LONG, &e.to_string());
                    continue;
                }
                Err(e) => {
                    fold.cut_short(e, "this input");
                    break;
                }
            }
            let folded = fold_chunk(
                &mut parser,
                job.input,
                &mut batch,
                &mut fold,
                &mut collector,
                rejects_file,
                &mut tap,
            );
            if let Some(header) = bad_header(&folded) {
                fold.bad_header(header);
                break;
            }
            folded?;
        }
    }
    fold.finish();
    fold.flush_rejects(rejects_file)?;
    fold.within_limits()?;
    Ok(WorkerOutput {
        gauges: fold.gauges,
        rollups: fold.lanes.into_iter().map(|lane| lane.rollup).collect(),
        counts: fold.counts,
        collector,
    })
}

/// Parses the chunk just read into `batch` and folds its records (and
/// hands them to the attribution collector).
fn fold_chunk<'p>(
    parser: &mut Parser,
    input: u32,
    batch: &mut Batch,
    fold: &mut Fold<'_>,
    collector: &mut Option<attribute::Collector<'p>>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    tap: &mut crate::progress::Tap<'_>,
) -> Result<()> {
    let name = batch.chunk().input.clone();
    fold.counts.bytes += batch.chunk().len() as u64;
    parser
        .parse(batch)
        .with_context(|| format!("parsing {name}"))?;
    // The parser's rejects, each with the index of the record after it:
    // written in line order among the folds' own.
    let mut unparsed = batch
        .rejects()
        .iter()
        .map(|r| {
            (
                batch.records_before(r.offset),
                r.reason.to_string(),
                r.to_string(),
            )
        })
        .collect::<Vec<_>>()
        .into_iter()
        .peekable();
    // Parsed a column at a time when the batch is folded from its
    // columns (no summary reads an expression), or when some typed column
    // is read more than once (the column cache).
    let mut parsed = fold.parsed.take();
    match &mut parsed {
        Some(parsed) if fold.folds_by_aggregate() => {
            parsed.fill(batch);
            // The attribution sees every record first, in order; its
            // rejects go out in row order among the folds', each after the
            // parser's rejects of the lines before its record.
            let mut observed = Vec::with_capacity(unparsed.len());
            if let Some(collector) = collector {
                for index in 0..batch.len() {
                    let record = batch.record(index);
                    let at = || where_(&record);
                    if let Some((reason, text)) =
                        observe(collector, &record, input, record.offset(), &name, at)
                    {
                        observed.extend(unparsed_through(&mut unparsed, index));
                        observed.push((index, reason, text));
                    }
                }
            }
            observed.extend(unparsed_through(&mut unparsed, usize::MAX));
            fold.fold_by_aggregate(parsed, batch, &name, observed);
        }
        Some(parsed) if fold.cache.is_some() && collector.is_none() => {
            parsed.fill(batch);
            let columns = fold.text_columns_of(parsed);
            for index in 0..batch.len() {
                write_unparsed(fold, &mut unparsed, index);
                let record = batch.record(index);
                if parsed.bad(index) {
                    fold.record(&record, &name, || where_(&record));
                } else {
                    fold.record_columns(&columns, &record, index, &name, || where_(&record));
                }
            }
        }
        _ => {
            for index in 0..batch.len() {
                write_unparsed(fold, &mut unparsed, index);
                let record = batch.record(index);
                let at = || where_(&record);
                if let Some(collector) = collector
                    && let Some((reason, text)) =
                        observe(collector, &record, input, record.offset(), &name, at)
                {
                    fold.reject(&reason, &text);
                }
                fold.record(&record, &name, at);
            }
        }
    }
    write_unparsed(fold, &mut unparsed, usize::MAX);
    fold.parsed = parsed;
    fold.flush();
    fold.flush_rejects(rejects_file)?;
    fold.within_limits()?;
    tap.report(&fold.counts);
    Ok(())
}

/// The parser's rejects of a batch not written yet: (index of the record
/// after it, reason, line), in line order (see [`fold_chunk`]).
type Unparsed = std::iter::Peekable<std::vec::IntoIter<(usize, String, String)>>;

/// Takes the parser's rejects that come before record `through`.
fn unparsed_through(
    unparsed: &mut Unparsed,
    through: usize,
) -> impl Iterator<Item = (usize, String, String)> + '_ {
    std::iter::from_fn(move || unparsed.next_if(|(next, _, _)| *next <= through))
}

/// Writes the parser's rejects that come before record `through`.
#[inline]
fn write_unparsed(fold: &mut Fold<'_>, unparsed: &mut Unparsed, through: usize) {
    // Called per record: most batches have no reject to write.
    if unparsed.peek().is_none() {
        return;
    }
    for (_, reason, text) in unparsed_through(unparsed, through) {
        fold.reject(&reason, &text);
    }
}

/// Shows `record` (of input `input` at `offset`, in file `name`, where
/// `at` says) to an attribution's collector; the reject reason and line
/// when the record is not of its types.
fn observe<R: Record>(
    collector: &mut attribute::Collector<'_>,
    record: &R,
    input: u32,
    offset: u64,
    name: &str,
    at: impl Fn() -> String,
) -> Option<(String, String)> {
    let e = collector.observe(record, input, offset).err()?;
    Some((
        eval_reason(&e),
        format!("{name}:{}: attribution: {e}", at()),
    ))
}

/// The reject reason of a line past the reader's length limit, whichever
/// reader met it (counts are kept per reason, so both must say the same).
const LINE_TOO_LONG: &str = "line too long";

/// The reject reason of an input whose bytes could not be read past some
/// point (corrupt or cut compressed data, a read error).
const INPUT_CUT_SHORT: &str = "input unreadable past this point";

/// The reject reason of a CSV input whose header does not fit the stream
/// (lacks a declared column, names one twice, or is malformed): none of
/// that input is read, and the run goes on with the others.
const BAD_HEADER: &str = "header does not fit the stream";

/// The parser's error if `result` failed on a header that does not fit
/// the stream: the input's fault, one reject for it, not the run's end.
fn bad_header(result: &Result<()>) -> Option<&cardinal_parse::Error> {
    let error = result
        .as_ref()
        .err()?
        .downcast_ref::<cardinal_parse::Error>()?;
    matches!(
        error,
        cardinal_parse::Error::HeaderMissingColumn { .. }
            | cardinal_parse::Error::HeaderDuplicate { .. }
            | cardinal_parse::Error::HeaderMalformed { .. }
    )
    .then_some(error)
}

/// This worker's share of an input read by every worker (see
/// [`SharedInput`]): turns of chunks until the input ends.
#[expect(
    clippy::too_many_arguments,
    reason = "the worker's context for one job, as in `worker`"
)]
fn read_shared<'p>(
    shared: &SharedInput,
    participant: usize,
    stream: &cardinal_route::Stream,
    projection: Option<&[usize]>,
    input: u32,
    batch: &mut Batch,
    fold: &mut Fold<'_>,
    collector: &mut Option<attribute::Collector<'p>>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    tap: &mut crate::progress::Tap<'_>,
) -> Result<()> {
    let header = stream.format == Format::Csv && stream.header;
    let mut parser: Option<Parser> = None;
    let mut turn: Vec<cardinal_source::Chunk> =
        vec![cardinal_source::Chunk::default(); SHARED_CHUNKS_PER_TURN];
    let mut reads = Vec::with_capacity(SHARED_CHUNKS_PER_TURN);
    loop {
        reads.clear();
        shared.read_turn(participant, &mut turn, header, &mut reads)?;
        for (read, chunk) in reads.drain(..).zip(&mut turn) {
            let first = match read {
                SharedRead::Chunk { first } => first,
                SharedRead::End => return Ok(()),
                SharedRead::Failed(message) => {
                    fold.cut_short(message, "this input");
                    return Ok(());
                }
                SharedRead::LineTooLong(message, bytes) => {
                    fold.counts.bytes += bytes;
                    fold.reject(LINE_TOO_LONG, &message);
                    continue;
                }
            };
            // The batch parses its own chunk: swap the buffers, not bytes.
            std::mem::swap(batch.chunk_mut(), chunk);
            let parser = match &mut parser {
                Some(parser) => parser,
                None => {
                    let mut fresh = Parser::new(stream, projection)?;
                    // The worker holding the first chunk reads the header
                    // from it; every other worker starts after it.
                    if let (false, Some(line), Parser::Csv(csv)) =
                        (first, shared.header.get(), &mut fresh)
                    {
                        let read = csv
                            .read_header(&batch.chunk().input, line)
                            .map_err(anyhow::Error::from);
                        if let Some(error) = bad_header(&read) {
                            shared.reject_header(fold, error);
                            return Ok(());
                        }
                        read?;
                    }
                    parser.insert(fresh)
                }
            };
            let folded = fold_chunk(parser, input, batch, fold, collector, rejects_file, tap);
            if let Some(error) = bad_header(&folded) {
                shared.reject_header(fold, error);
                return Ok(());
            }
            folded?;
        }
    }
}

/// Reads one Parquet job: the row groups `groups` of `file`, a bounded
/// batch at a time, each row routed like a text record.
fn read_parquet(
    file: &ParquetFile,
    groups: std::ops::Range<usize>,
    input: u32,
    fold: &mut Fold<'_>,
    mut collector: Option<&mut attribute::Collector<'_>>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
) -> Result<()> {
    fold.counts.bytes += file.bytes(groups.clone());
    // A corrupt row group ends this job's groups as a cut stream ends a
    // text input: what was read is kept, the rest is one reject, and the
    // other jobs go on.
    let rest = format!("row groups {}..{}", groups.start, groups.end);
    let mut reader = match file.read(groups) {
        Ok(reader) => reader,
        Err(e) => {
            fold.cut_short(e, &rest);
            return Ok(());
        }
    };
    loop {
        let batch = match reader.next_batch() {
            Ok(Some(batch)) => batch,
            Ok(None) => break,
            Err(e) => {
                fold.cut_short(e, &rest);
                break;
            }
        };
        if fold.parquet_columns(batch, input, collector.as_deref_mut()) {
            fold.flush();
            fold.flush_rejects(rejects_file)?;
            fold.within_limits()?;
            continue;
        }
        for index in 0..batch.len() {
            let record = batch.record(index);
            let at = || record.row().to_string();
            if let Some(collector) = collector.as_deref_mut()
                && let Some((reason, text)) =
                    observe(collector, &record, input, record.row(), batch.input(), at)
            {
                fold.reject(&reason, &text);
            }
            fold.record(&record, batch.input(), at);
        }
        fold.flush();
        fold.flush_rejects(rejects_file)?;
        fold.within_limits()?;
    }
    Ok(())
}

/// A worker's partial rollups and the buffers routing reuses: every
/// record of every format goes through [`Fold::record`].
struct Fold<'a> {
    shown: &'a std::sync::atomic::AtomicU64,
    /// One per summary, in order: everything one record's pass through
    /// the summary touches, side by side.
    lanes: Vec<Lane<'a>>,
    counts: Counts,
    /// Each typed field parsed once per record, whatever reads it; `None`
    /// when no typed column is read twice.
    cache: Option<ColumnCache>,
    /// Every lane's [`ColumnPlan`]: Parquet batches that hold their
    /// columns as typed slices are routed from them
    /// ([`Fold::columns_of`]), and text batches from `parsed`.
    plans: Vec<ColumnPlan>,
    /// The typed columns of the current text batch
    /// ([`columns::ParsedColumns`]), filled when the batch folds an
    /// aggregate at a time or the column cache is on; `None` when a
    /// typed column read is of a type the path does not carry. A batch
    /// that does neither goes record by record: a column read once parses
    /// as cheaply in the route, without a second pass over the batch.
    parsed: Option<columns::ParsedColumns>,
    /// What lanes work out once per value of a Parquet batch's
    /// dictionary-encoded text columns.
    dictionaries: columns::Dictionaries,
    hashed: HashMemo,
    scratch: Scratch,
    /// A row's key as [`Fold::hold_columns`] builds it (reused).
    held_key: Vec<u8>,
    /// What [`Fold::fold_by_aggregate`] reuses.
    by_aggregate: by_aggregate::ByAggregate,
    /// Whether text batches may be folded an aggregate at a time
    /// ([`Fold::fold_by_aggregate`]; tests turn it off to compare).
    by_aggregate_on: bool,
    /// Reject lines not yet written to the rejects file.
    reject_lines: String,
    /// Lanes whose rollup has at least this many groups hold routes back
    /// and prefetch ([`PREFETCH_GROUPS_MIN`]; tests vary it).
    prefetch_groups_min: usize,
    /// Bytes of records all lanes together may hold per part before the
    /// lane holding the most folds them ([`PENDING_BYTES_MAX`]; tests vary
    /// it).
    pending_bytes_max: usize,
    /// The memory budget of the run, shared by every worker; `None`
    /// counts nothing.
    budget: Option<&'a MemoryBudget>,
    /// Each lane's rollup's bytes, as reported to `budget`.
    gauges: Vec<BytesGauge>,
    /// `counts.records` when the budget was last checked.
    records_checked: u64,
}

/// One summary's part of a [`Fold`].
struct Lane<'a> {
    summary: &'a Summary,
    /// How each aggregate takes the routed record.
    feeds: Vec<Feed>,
    /// The first summary with an equal filter, which evaluates it for
    /// both (this lane's own index when it is the first).
    filter_owner: usize,
    /// The first summary with an equal time bucket (this lane's own index
    /// when it is the first): when it routed the record, its bucket is
    /// this lane's too.
    bucket_owner: usize,
    /// Whether the current record passed the filter.
    passed: bool,
    /// The current record's route.
    routed: Routed,
    rollup: Rollup,
    /// Routes waiting to be folded while their groups load.
    deferred: Deferred,
    /// Whether routes may be held back per part ([`Pending`]): no
    /// aggregate reads text and no retention window drops by arrival.
    can_pend: bool,
    /// Routes held back per part of a large rollup.
    pending: Pending,
    /// The groups of recent (bucket, dictionary keys) of Parquet batches
    /// whose dimensions are dictionary-encoded text columns.
    groups: columns::GroupCache,
    /// The current record's group, when `groups` knew it: its key was
    /// not built.
    cached: Option<cardinal_rollup::GroupAt>,
    /// The current record's (bucket, dictionary keys) when `groups` did
    /// not know them: its group is remembered once it is folded.
    to_remember: Option<(i64, u64)>,
}

/// Records routed at least this many groups ago are folded through
/// [`Deferred`]: below it a rollup's index, groups and states fit in the
/// caches and prefetching only costs instructions.
const PREFETCH_GROUPS_MIN: usize = 1 << 16;

/// How many routed records a lane holds back before folding the oldest:
/// the prefetch distance, in records. The group record and states are
/// prefetched halfway.
const PREFETCH_DEPTH: usize = 8;

/// A lane's routed records waiting to be folded, oldest first, in a ring
/// of [`PREFETCH_DEPTH`] routes. A record's index slot is prefetched when it
/// enters, its group and states halfway, and it is folded when it leaves,
/// in arrival order, so the rollup sees exactly the folds it would have
/// seen. Routes are swapped in and out, never copied.
#[derive(Debug, Default)]
struct Deferred {
    ring: Vec<(Routed, Option<KeyHash>)>,
    first: usize,
    len: usize,
}

impl<'a> Fold<'a> {
    fn new(
        summaries: &'a [&'a Summary],
        shapes: &'a [Shape],
        limits: Limits,
        shown: &'a std::sync::atomic::AtomicU64,
        stream: &cardinal_route::Stream,
    ) -> Result<Self> {
        let lanes: Vec<Lane<'a>> = summaries
            .iter()
            .zip(shapes)
            .map(|(summary, shape)| -> Result<Lane<'a>> {
                let feeds = feeds_of(summary, shape);
                // topk keeps its candidates' names, which held records do
                // not carry.
                let can_pend = !feeds.iter().any(|feed| matches!(feed, Feed::TopK(_)));
                Ok(Lane {
                    summary,
                    feeds,
                    filter_owner: summaries
                        .iter()
                        .position(|t| t.filter == summary.filter)
                        .expect("a summary's filter equals itself"),
                    bucket_owner: summaries
                        .iter()
                        .position(|t| t.bucket == summary.bucket)
                        .expect("a summary's bucket equals itself"),
                    passed: false,
                    routed: Routed::default(),
                    rollup: Rollup::new(shape.clone(), limits)?,
                    deferred: Deferred {
                        ring: vec![(Routed::default(), None); PREFETCH_DEPTH],
                        first: 0,
                        len: 0,
                    },
                    can_pend,
                    pending: Pending::default(),
                    groups: columns::GroupCache::default(),
                    cached: None,
                    to_remember: None,
                })
            })
            .collect::<Result<_>>()?;
        let width = stream.schema.columns.len();
        let twice = reads_a_typed_column_twice(summaries);
        let plans: Vec<ColumnPlan> = summaries.iter().map(|s| s.column_plan()).collect();
        let dictionaries = columns::Dictionaries::new(&plans, |s| lanes[s].filter_owner);
        Ok(Self {
            shown,
            lanes,
            counts: Counts::default(),
            cache: twice.then(|| ColumnCache::new(width)),
            parsed: columns::ParsedColumns::new(width, &plans),
            dictionaries,
            plans,
            hashed: HashMemo::default(),
            scratch: Scratch::default(),
            held_key: Vec::new(),
            by_aggregate: by_aggregate::ByAggregate::default(),
            by_aggregate_on: true,
            reject_lines: String::new(),
            prefetch_groups_min: PREFETCH_GROUPS_MIN,
            pending_bytes_max: PENDING_BYTES_MAX,
            budget: None,
            gauges: vec![BytesGauge::default(); summaries.len()],
            records_checked: 0,
        })
    }

    /// Routes `record` (from input `name`; `at` says where in it, for
    /// rejects) through every summary and folds it into their rollups.
    ///
    /// The record is routed through every summary before it is folded into
    /// any: a record that one summary rejects is folded into none, so that
    /// every summary counts the same records.
    fn record<R: Record + ?Sized>(&mut self, raw: &R, name: &str, at: impl Fn() -> String) {
        let routed = match &mut self.cache {
            Some(cache) => route_lanes(&mut self.lanes, &cache.record(raw), &mut self.scratch),
            None => route_lanes(&mut self.lanes, raw, &mut self.scratch),
        };
        if let Err((s, e)) = routed {
            let summary = &self.lanes[s].summary;
            let text = format!(
                "{name}:{}: {}: {}",
                at(),
                summary.name,
                eval_text(&e, &summary.schema)
            );
            reject(
                &mut self.counts,
                &mut self.reject_lines,
                self.shown,
                &eval_reason(&e),
                &text,
            );
            return;
        }
        self.counts.records += 1;
        self.fold_lanes(name, &at);
    }

    /// Folds the record every lane has routed (`lane.routed`, for the
    /// lanes it `passed`) into their rollups. The caller counted it in
    /// `records`; a key too long for some lane rejects it, and it is
    /// counted there instead.
    fn fold_lanes(&mut self, name: &str, at: &impl Fn() -> String) {
        let mut held = false;
        let mut too_long = false;
        for lane in &mut self.lanes {
            if !lane.passed {
                continue;
            }
            // Routed from columns into a group the lane knew: no key.
            if let Some(group) = lane.cached.take() {
                fold_routed_at(
                    &lane.feeds,
                    &mut lane.rollup,
                    &lane.routed,
                    &mut self.hashed,
                    group,
                );
                continue;
            }
            let folded = match lane.fold_route(&mut self.hashed, self.prefetch_groups_min) {
                LaneFold::Held => {
                    held = true;
                    continue;
                }
                LaneFold::Deferred => continue,
                LaneFold::Folded(folded) => folded,
            };
            if let Some((bucket, name)) = lane.to_remember.take()
                && folded == Folded::Ok
                && let Some(group) = lane.rollup.last_folded()
            {
                lane.groups.remember(bucket, name, group);
            }
            if folded == Folded::DroppedKeyTooLong {
                too_long = true;
                reject(
                    &mut self.counts,
                    &mut self.reject_lines,
                    self.shown,
                    "group key too long",
                    &format!("{name}: {}", at()),
                );
            }
        }
        if too_long {
            self.counts.records -= 1;
        }
        if held {
            self.bound_pending();
        }
    }

    /// Folds the records of the lane holding the most once the lanes
    /// together hold `pending_bytes_max`: the bound is per worker, however
    /// many large summaries it folds.
    fn bound_pending(&mut self) {
        let held: usize = self.lanes.iter().map(|lane| lane.pending.bytes()).sum();
        if held >= self.pending_bytes_max
            && let Some(lane) = self
                .lanes
                .iter_mut()
                .max_by_key(|lane| lane.pending.bytes())
        {
            lane.drain(&mut self.hashed);
        }
    }

    /// Folds every route of the prefetch ring: at the end of each batch,
    /// so that nothing in it waits across inputs.
    fn flush(&mut self) {
        for lane in &mut self.lanes {
            lane.flush(&mut self.hashed);
            // A retention window bounds memory too: groups of buckets it
            // has left are dropped as the stream moves on. The records held
            // back arrived before this point, so they fold first, as they
            // would have folded at once.
            if lane.rollup.eviction_due() {
                lane.drain(&mut self.hashed);
                lane.rollup.evict_expired_due();
            }
        }
    }

    /// Folds every held-back route, in the ring and held per part: the
    /// rollups are then whole.
    fn finish(&mut self) {
        for lane in &mut self.lanes {
            lane.flush(&mut self.hashed);
            lane.drain(&mut self.hashed);
        }
    }

    /// Counts and reports a rejected record.
    fn reject(&mut self, reason: &str, text: &str) {
        reject(
            &mut self.counts,
            &mut self.reject_lines,
            self.shown,
            reason,
            text,
        );
    }

    /// An input that could not be read past some point (`error`, the
    /// source's; `rest`, what is not read): what was read before it is
    /// folded, the rest is one reject, and the run goes on with the other
    /// inputs. Bad input does not stop the run, and what could be read is
    /// not thrown away; `--strict` fails the run as for any reject. Always
    /// shown, however many rejects were.
    fn cut_short(&mut self, error: impl std::fmt::Display, rest: &str) {
        self.unreadable(&format!("{error}; the rest of {rest} is not read"));
    }

    /// An input whose header does not fit the stream: one reject for the
    /// whole input, always shown; the run goes on (`--strict` fails it).
    fn bad_header(&mut self, error: impl std::fmt::Display) {
        let text = format!("{error}; none of this input is read");
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) >= REJECTS_SHOWN_MAX {
            eprintln!("{}rejected: {text}", crate::progress::erase());
        }
        self.reject(BAD_HEADER, &text);
    }

    /// [`Fold::cut_short`]'s reject, worded by the caller: `text` says
    /// what could not be read and what is lost.
    fn unreadable(&mut self, text: &str) {
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) >= REJECTS_SHOWN_MAX {
            eprintln!("{}rejected: {text}", crate::progress::erase());
        }
        self.reject(INPUT_CUT_SHORT, text);
    }

    /// Fails once a summary's partial rollup has had to refuse a group:
    /// its answer would pass `--groups-max` on any thread count, since the
    /// groups of one worker are among the answer's; and once the rollups of
    /// every worker together hold more than the memory budget. Checked
    /// after every batch, so the run stops early instead of folding the
    /// rest first (or failing to allocate).
    fn within_limits(&mut self) -> Result<()> {
        for lane in &self.lanes {
            if lane.rollup.dropped_group_limit() > 0 {
                return Err(group_limit_error(
                    &lane.summary.name,
                    lane.rollup.limits().groups_max,
                ));
            }
        }
        if let Some(budget) = self.budget {
            let records = self.counts.records - self.records_checked;
            self.records_checked = self.counts.records;
            for (lane, gauge) in self.lanes.iter().zip(&mut self.gauges) {
                gauge.update(&lane.rollup, records, budget);
            }
            if !budget.holds()
                && let Some((lane, gauge)) = self
                    .lanes
                    .iter()
                    .zip(&self.gauges)
                    .max_by_key(|(_, gauge)| gauge.reported())
            {
                return Err(crate::memory::budget_error(
                    &lane.summary.name,
                    gauge.reported(),
                    lane.rollup.group_count(),
                    budget.bytes_max(),
                ));
            }
        }
        Ok(())
    }

    /// Appends the pending reject lines to the rejects file, if any.
    fn flush_rejects(
        &mut self,
        rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    ) -> Result<()> {
        if !self.reject_lines.is_empty() {
            if let Some(file) = rejects_file {
                file.lock()
                    .expect("rejects lock")
                    .write_all(self.reject_lines.as_bytes())?;
            }
            self.reject_lines.clear();
        }
        Ok(())
    }
}

/// What [`Lane::fold_route`] did with a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LaneFold {
    /// Held back per part of a large rollup.
    Held,
    /// Put in the prefetch ring.
    Deferred,
    /// Folded at once (or dropped, as said).
    Folded(Folded),
}

impl Lane<'_> {
    /// Folds the lane's current route (`routed`): held back per part when
    /// the rollup is in parts and the lane may hold, through the prefetch
    /// ring when the rollup has `prefetch_groups_min` groups, else at once
    /// after what the lane holds (folds stay in arrival order). A key too
    /// long is folded at once, to be dropped and rejected by the caller.
    #[inline]
    fn fold_route(&mut self, hashed: &mut HashMemo, prefetch_groups_min: usize) -> LaneFold {
        let key_fits = self.routed.key.len() <= cardinal_rollup::KEY_BYTES_MAX;
        if key_fits && self.can_pend && self.rollup.parts() > 1 {
            if let Some(held) = self.pend(hashed) {
                return held;
            }
        } else if key_fits && self.rollup.group_count() >= prefetch_groups_min {
            self.defer(hashed);
            return LaneFold::Deferred;
        }
        self.flush(hashed);
        LaneFold::Folded(fold_routed(
            &self.feeds,
            &mut self.rollup,
            &self.routed,
            hashed,
            None,
        ))
    }

    /// Holds the current route back in its part's buffer (see
    /// [`Pending`]; the worker bounds what its lanes hold together,
    /// [`Fold::bound_pending`]): [`LaneFold::Held`], or the route dropped
    /// as older than the retention window, which is decided here, in
    /// arrival order, as a fold at once decides it ([`Rollup::admit`]).
    /// `None` (holding nothing) when the route must be folded at once:
    /// when the held routes could then open more groups than the limit,
    /// whose choice of groups would depend on the order.
    fn pend(&mut self, hashed: &mut HashMemo) -> Option<LaneFold> {
        if self.near_group_limit(1) {
            self.drain(hashed);
            return None;
        }
        // Routes of the prefetch ring came first.
        self.flush(hashed);
        if !self
            .rollup
            .admit(self.routed.bucket.unwrap_or(Timestamp(0)))
        {
            return Some(LaneFold::Folded(Folded::DroppedExpired));
        }
        self.pending.push(&self.rollup, &self.routed);
        Some(LaneFold::Held)
    }

    /// Holds back a route of (`bucket`, `key`) with arguments `args`, from
    /// a caller that asked [`Lane::holds`], admitted by the retention
    /// window in arrival order as [`Lane::pend`] admits; `false` when the
    /// key is too long to hold, which is folded at once to be dropped (and
    /// counted) as [`Lane::fold_route`] drops it: the caller rejects the
    /// record. Always inlined into the two loops that hold a run's rows
    /// (as a call, its arguments went through the stack).
    #[inline(always)]
    fn hold(&mut self, bucket: Timestamp, key: &[u8], args: &[Arg]) -> bool {
        let hash = KeyHash::of(bucket, key);
        if key.len() > cardinal_rollup::KEY_BYTES_MAX {
            let folded = self.rollup.fold_held(hash, bucket, key, |_| {});
            debug_assert_eq!(folded, Folded::DroppedKeyTooLong);
            return false;
        }
        if self.rollup.admit(bucket) {
            self.pending.push_key(&self.rollup, hash, bucket, key, args);
        }
        true
    }

    /// [`Lane::hold`] of a key of `len` bytes, at most 16, given as two
    /// words, zero past them (a short text dimension's,
    /// [`cardinal_route::KeyColumn::short_key`]): hashed from the words and
    /// held without being written out first. Such a key is never too
    /// long to hold.
    #[inline(always)]
    fn hold_words(&mut self, bucket: Timestamp, words: [u64; 2], len: usize, args: &[Arg]) {
        let hash = KeyHash::of_words(bucket, words, len);
        if self.rollup.admit(bucket) {
            self.pending
                .push_words(&self.rollup, hash, bucket, words, len, args);
        }
    }

    /// Whether `rows` more routes held back could open more groups than
    /// the rollup's limit (with those already held), whose choice of
    /// groups would then depend on the order: such routes fold at once.
    fn near_group_limit(&self, rows: usize) -> bool {
        let groups_max = usize::try_from(self.rollup.limits().groups_max).unwrap_or(usize::MAX);
        let groups = self.rollup.group_count();
        groups < groups_max && groups + self.pending.rows() + rows > groups_max
    }

    /// Whether the lane holds back each of `rows` more routes whose key
    /// fits ([`Lane::pend`]): its rollup is split into parts, and they
    /// cannot bring it to its group limit.
    fn holds(&self, rows: usize) -> bool {
        self.can_pend && self.rollup.parts() > 1 && !self.near_group_limit(rows)
    }

    /// Folds the routes held per part.
    fn drain(&mut self, hashed: &mut HashMemo) {
        let feeds = &self.feeds;
        self.pending
            .drain(&mut self.rollup, |rollup, hash, bucket, key, args| {
                let folded = rollup.fold_held(hash, bucket, key, |states| {
                    update_states(feeds, states, args, |_| &[], hashed);
                });
                debug_assert_ne!(folded, Folded::DroppedKeyTooLong, "checked when held back");
            });
    }

    /// Holds the current route back (see [`Deferred`]), folding the
    /// oldest held one if the ring is full. The key fits
    /// [`cardinal_rollup::KEY_BYTES_MAX`], so the fold cannot be a reject.
    fn defer(&mut self, hashed: &mut HashMemo) {
        let bucket = self.routed.bucket.unwrap_or(Timestamp(0));
        let hash = self.rollup.prefetch(bucket, &self.routed.key);
        if self.deferred.len == PREFETCH_DEPTH {
            self.fold_oldest(hashed);
        }
        let d = &mut self.deferred;
        let at = (d.first + d.len) % PREFETCH_DEPTH;
        std::mem::swap(&mut d.ring[at].0, &mut self.routed);
        d.ring[at].1 = Some(hash);
        d.len += 1;
        // The route PREFETCH_DEPTH / 2 back has its slot by now: load its
        // group record and states; the one 3/4 back has those: load its
        // key bytes.
        if d.len > PREFETCH_DEPTH / 2 {
            let halfway = (d.first + d.len - 1 - PREFETCH_DEPTH / 2) % PREFETCH_DEPTH;
            if let Some(hash) = d.ring[halfway].1 {
                self.rollup.prefetch_group(hash);
            }
        }
        if d.len > PREFETCH_DEPTH * 3 / 4 {
            let later = (d.first + d.len - 1 - PREFETCH_DEPTH * 3 / 4) % PREFETCH_DEPTH;
            if let Some(hash) = d.ring[later].1 {
                self.rollup.prefetch_key(hash);
            }
        }
    }

    /// Folds the oldest held-back route.
    fn fold_oldest(&mut self, hashed: &mut HashMemo) {
        let d = &mut self.deferred;
        let (routed, hash) = &d.ring[d.first];
        let folded = fold_routed(&self.feeds, &mut self.rollup, routed, hashed, *hash);
        debug_assert_ne!(folded, Folded::DroppedKeyTooLong, "checked when held back");
        d.first = (d.first + 1) % PREFETCH_DEPTH;
        d.len -= 1;
    }

    /// Folds every held-back route, oldest first.
    fn flush(&mut self, hashed: &mut HashMemo) {
        while self.deferred.len > 0 {
            self.fold_oldest(hashed);
        }
    }
}

/// Routes `record` through every lane's filter and route; on the first
/// failure, the lane's index and the error (the record is then folded
/// into none).
#[inline]
fn route_lanes<Q: Record + ?Sized>(
    lanes: &mut [Lane<'_>],
    record: &Q,
    scratch: &mut Scratch,
) -> Result<(), (usize, cardinal_route::EvalError)> {
    for s in 0..lanes.len() {
        let owner = lanes[s].filter_owner;
        let pass = if owner == s {
            lanes[s].summary.passes(record, scratch)
        } else {
            // The owner comes first, so it has evaluated this record.
            Ok(lanes[owner].passed)
        };
        let known = known_bucket(lanes, s);
        let lane = &mut lanes[s];
        let routed = pass.and_then(|pass| {
            lane.passed = pass;
            if pass {
                lane.summary
                    .route_passed_in(record, known, scratch, &mut lane.routed)
            } else {
                Ok(())
            }
        });
        routed.map_err(|e| (s, e))?;
    }
    Ok(())
}

/// Lane `s`'s time bucket when the first lane with an equal bucket (its
/// `bucket_owner`, routed before it) has routed the current record.
#[inline]
fn known_bucket(lanes: &[Lane<'_>], s: usize) -> Option<Timestamp> {
    let owner = lanes[s].bucket_owner;
    (owner != s && lanes[owner].passed)
        .then(|| lanes[owner].routed.bucket)
        .flatten()
}

/// Whether some typed (non-text) column is read in more than one place
/// by `summaries` (filters, time buckets, dimensions, arguments): only
/// then does a [`ColumnCache`] save parsing; otherwise each field is
/// parsed once anyway and records are routed as they are.
fn reads_a_typed_column_twice(summaries: &[&Summary]) -> bool {
    let mut reads: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for summary in summaries {
        let schema = &summary.schema.columns;
        let mut count = |column: usize| {
            if schema
                .get(column)
                .is_some_and(|c| c.ty != cardinal_event::ColumnType::Text)
            {
                *reads.entry(column).or_default() += 1;
            }
        };
        for e in summary
            .filter
            .iter()
            .chain(&summary.dimensions)
            .chain(&summary.arguments)
        {
            e.columns(&mut count);
        }
        if let Some(bucket) = &summary.bucket {
            count(bucket.column);
        }
    }
    reads.values().any(|&n| n > 1)
}

/// How one aggregate takes a routed record, decided once per run from
/// its kind, so that folding a record is one `match` per aggregate on a
/// small enum and a direct call of the state's method: no [`cardinal_rollup::Input`] per
/// aggregate, no dispatch on (kind, argument) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feed {
    /// `count(*)`: every record.
    CountAll,
    /// `count(x)`: records whose argument `x` (an index into the routed
    /// arguments) is not NULL.
    Count(usize),
    /// sum, avg, min, max, quantiles: the argument as a number.
    Number(usize),
    /// hll, theta, exact_distinct: the argument's hash (and integer id).
    Key(usize),
    /// topk: the argument's hash, named by its text or printed integer.
    TopK(usize),
    /// Nothing: a quantile aggregate that reads another's sketch.
    Skip,
}

/// The feeds of a summary's aggregates, in shape order.
pub(crate) fn feeds_of(summary: &Summary, shape: &Shape) -> Vec<Feed> {
    summary
        .aggregates
        .iter()
        .zip(&shape.aggs)
        .map(|(aggregate, kind)| match (kind, aggregate.argument) {
            (AggKind::CountAll, _) | (_, None) => Feed::CountAll,
            (AggKind::Count, Some(a)) => Feed::Count(a),
            (
                AggKind::Sum
                | AggKind::SumInt
                | AggKind::Avg
                | AggKind::Min
                | AggKind::MinInt
                | AggKind::Max
                | AggKind::MaxInt
                | AggKind::Quantiles { .. },
                Some(a),
            ) => Feed::Number(a),
            (AggKind::Hll { .. } | AggKind::Theta { .. } | AggKind::ExactDistinct, Some(a)) => {
                Feed::Key(a)
            }
            (AggKind::TopK { .. }, Some(a)) => Feed::TopK(a),
            (AggKind::QuantilesOf { .. }, Some(_)) => Feed::Skip,
        })
        .collect()
}

/// Folds one routed record into `rollup` through the summary's `feeds`.
/// Top-k reports names: text is the routed argument's bytes; an integer is
/// printed when it becomes a candidate.
#[inline]
pub(crate) fn fold_routed(
    feeds: &[Feed],
    rollup: &mut Rollup,
    routed: &Routed,
    hashed: &mut HashMemo,
    key_hash: Option<KeyHash>,
) -> Folded {
    let bucket = routed.bucket.unwrap_or(Timestamp(0));
    rollup.fold_hashed(key_hash, bucket, &routed.key, |states| {
        update_states(feeds, states, &routed.args, |a| routed.text_of(a), hashed);
    })
}

/// [`fold_routed`] for a route whose group is known to be `at`
/// ([`cardinal_rollup::Rollup::fold_at`]): its key is not read.
#[inline]
fn fold_routed_at(
    feeds: &[Feed],
    rollup: &mut Rollup,
    routed: &Routed,
    hashed: &mut HashMemo,
    at: cardinal_rollup::GroupAt,
) -> Folded {
    let bucket = routed.bucket.unwrap_or(Timestamp(0));
    rollup.fold_at(at, bucket, |states| {
        update_states(feeds, states, &routed.args, |a| routed.text_of(a), hashed);
    })
}

/// Folds a route's arguments into its group's `states` through `feeds`.
#[inline(always)]
fn update_states<'t>(
    feeds: &[Feed],
    states: &mut [cardinal_rollup::AggState],
    args: &[Arg],
    text_of: impl Fn(usize) -> &'t [u8],
    hashed: &mut HashMemo,
) {
    for (state, &feed) in states.iter_mut().zip(feeds) {
        match feed {
            Feed::CountAll => state.fold_count(),
            Feed::Skip => {}
            Feed::Count(a) => {
                if args[a] != Arg::Null {
                    state.fold_count();
                }
            }
            Feed::Number(a) => fold_number_arg(state, &args[a]),
            Feed::Key(a) => {
                // By reference: a copy of the enum went through the
                // stack in pieces and was read back whole, a
                // store-forwarding stall per fold (perf annotate).
                let arg = &args[a];
                if let Some(hash) = hashed.hash(arg) {
                    state.fold_key(hash, id_of(arg));
                }
            }
            Feed::TopK(a) => {
                let arg = &args[a];
                if let Some(hash) = hashed.hash(arg) {
                    state.fold_topk(hash, || match *arg {
                        Arg::Int(v) => v.to_string().into_bytes().into(),
                        _ => text_of(a).into(),
                    });
                }
            }
        }
    }
}

/// Folds a routed argument into a sum, avg, min, max or quantiles state:
/// integers as integers (exact in integer sums, minima and maxima), the
/// rest as numbers. Always inlined: it is one match in each fold loop,
/// and as a call (LTO's choice with plain `#[inline]`) it was 1% of
/// Query 2A's samples.
#[inline(always)]
fn fold_number_arg(state: &mut cardinal_rollup::AggState, arg: &Arg) {
    match *arg {
        Arg::Int(i) => state.fold_int(i),
        Arg::Float(f) => state.fold_number(f),
        #[expect(clippy::cast_precision_loss, reason = "|ms| < 2^53 for every instant")]
        Arg::Time(t) => state.fold_number(t.0 as f64),
        Arg::Bool(b) => state.fold_number(f64::from(u8::from(b))),
        Arg::Null | Arg::Text { .. } => {}
    }
}

/// The integer id exact sets keep (the hash for text).
#[inline]
fn id_of(arg: &Arg) -> Option<u64> {
    match *arg {
        Arg::Int(i) => Some(u64::from_ne_bytes(i.to_ne_bytes())),
        _ => None,
    }
}

fn where_(record: &cardinal_parse::RecordRef<'_>) -> String {
    match record.line() {
        Some(line) => line.to_string(),
        None => format!("byte {}", record.offset()),
    }
}

/// `e` as a reject line shows it: its column counted from 1 and named
/// (`column 2 (user_id): not a BIGINT`).
fn eval_text(e: &cardinal_route::EvalError, schema: &cardinal_event::Schema) -> String {
    match e.column().and_then(|c| Some((c, schema.columns.get(c)?))) {
        Some((c, column)) => format!("column {} ({}): {}", c + 1, column.name, eval_reason(e)),
        None => e.to_string(),
    }
}

fn eval_reason(e: &cardinal_route::EvalError) -> String {
    let text = e.to_string();
    // "column N: reason" -> the reason, so counts group by kind.
    text.split_once(": ")
        .map_or(text.clone(), |(_, reason)| reason.to_string())
}

fn reject(
    counts: &mut Counts,
    lines: &mut String,
    shown: &std::sync::atomic::AtomicU64,
    reason: &str,
    text: &str,
) {
    counts.rejects += 1;
    *counts
        .rejects_by_reason
        .entry(reason.to_string())
        .or_default() += 1;
    if shown.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < REJECTS_SHOWN_MAX {
        eprintln!("{}rejected: {text}", crate::progress::erase());
    }
    lines.push_str(text);
    lines.push('\n');
}

/// The hash of the last integer argument hashed: summaries that count the
/// same user id one after the other hash it once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HashMemo {
    value: i64,
    hash: u64,
}

impl Default for HashMemo {
    fn default() -> Self {
        Self {
            value: 0,
            hash: cardinal_sketch::hash::user_id(0),
        }
    }
}

impl HashMemo {
    fn hash(&mut self, arg: &Arg) -> Option<u64> {
        match *arg {
            Arg::Int(value) => {
                if value != self.value {
                    *self = Self {
                        value,
                        hash: cardinal_sketch::hash::user_id(u64::from_ne_bytes(
                            value.to_ne_bytes(),
                        )),
                    };
                }
                Some(self.hash)
            }
            _ => arg.hash(),
        }
    }
}

/// Decodes each group's key into display values and names the columns.
pub fn results_of<'a>(summary: &Summary, rollup: &'a Rollup) -> Result<Results<'a>> {
    let name_of = |source: OutputSource| {
        summary
            .outputs
            .iter()
            .find(|o| o.source == source)
            .map(|o| o.name.clone())
    };
    let columns = Columns {
        bucket: summary
            .bucket
            .as_ref()
            .map(|_| name_of(OutputSource::Bucket).unwrap_or_else(|| "bucket".into())),
        dims: (0..summary.dimensions.len())
            .map(|i| name_of(OutputSource::Dimension(i)).unwrap_or_else(|| format!("dim{i}")))
            .collect(),
        aggs: (0..summary.aggregates.len())
            .map(|i| name_of(OutputSource::Aggregate(i)).unwrap_or_else(|| format!("agg{i}")))
            .collect(),
    };
    let mut rows = Rows::with_capacity(rollup.group_count(), summary.dimensions.len());
    for (bucket, key, states) in rollup.groups() {
        rows.push(bucket, states);
        for value in cardinal_route::key_values(key) {
            match value {
                Value::Null => rows.push_null(),
                Value::Text(t) => rows.push_bytes(t),
                Value::Int(i) => rows.push_with(|text| {
                    let _ = write!(text, "{i}");
                }),
                Value::Float(f) => rows.push_with(|text| {
                    let _ = write!(text, "{f}");
                }),
                Value::Bool(b) => rows.push_with(|text| {
                    let _ = write!(text, "{b}");
                }),
                Value::Time(t) => rows.push_with(|text| {
                    let _ = write!(text, "{t}");
                }),
            }
        }
    }
    let times = (0..summary.aggregates.len())
        .map(|i| summary.aggregate_is_time(i))
        .collect();
    Ok(Results::new(columns, &rollup.shape().aggs, rows)?.with_times(times))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_dialect_refuses_what_the_rollup_cannot_hold() {
        // A plan that compiles must never fail in the rollup: the limits
        // are checked once, in the dialect, and must be the same.
        assert_eq!(cardinal_route::TOPK_K_MAX, cardinal_rollup::TOPK_K_MAX);
        assert_eq!(cardinal_route::RANKS_MAX, cardinal_rollup::RANKS_MAX);
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use std::io::Write;

    /// `lines` numbered CSV lines after a header, gzipped into a fresh
    /// file (cut to `keep` of its bytes, if given); the text and the path.
    fn gzipped(name: &str, lines: usize, keep: Option<usize>) -> (Vec<u8>, PathBuf) {
        let mut text = b"n,word\n".to_vec();
        for i in 0..lines {
            writeln!(text, "{i},word{}", i % 977).expect("write to a Vec");
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).expect("gzip");
        let mut bytes = gz.finish().expect("gzip");
        if let Some(keep) = keep {
            bytes.truncate(keep);
        }
        let path =
            std::env::temp_dir().join(format!("cardinal-shared-{}-{name}.gz", std::process::id()));
        std::fs::write(&path, bytes).expect("temp file");
        (text, path)
    }

    /// One chunk a turn handed out.
    struct Taken {
        first: bool,
        offset: u64,
        bytes: Vec<u8>,
    }

    /// What [`take_turns`] saw.
    struct Turns {
        chunks: Vec<Taken>,
        /// The error the input ended with, if it failed.
        failed: Option<String>,
        turns: usize,
    }

    /// Two workers' turns of two chunks each, in alternation, until the
    /// input ends or fails.
    fn take_turns(shared: &SharedInput) -> Turns {
        let mut workers = vec![vec![cardinal_source::Chunk::default(); 2]; 2];
        let mut seen = Turns {
            chunks: Vec::new(),
            failed: None,
            turns: 0,
        };
        for worker in (0..2).cycle() {
            let mut reads = Vec::new();
            shared
                .read_turn(worker, &mut workers[worker], true, &mut reads)
                .expect("opens");
            seen.turns += 1;
            assert!(!reads.is_empty() && reads.len() <= 2);
            for (read, chunk) in reads.into_iter().zip(&workers[worker]) {
                match read {
                    SharedRead::Chunk { first } => seen.chunks.push(Taken {
                        first,
                        offset: chunk.offset,
                        bytes: chunk.bytes().to_vec(),
                    }),
                    SharedRead::End => return seen,
                    SharedRead::Failed(message) => {
                        seen.failed = Some(message);
                        return seen;
                    }
                    SharedRead::LineTooLong(m, _) => panic!("no long lines here: {m}"),
                }
            }
        }
        unreachable!("cycle ends by returning")
    }

    /// Turn by turn, the chunks cover the input once, in order, the first
    /// one says so and publishes the header; a later turn after the end
    /// reads the end again.
    #[test]
    fn turns_hand_out_every_chunk_once_in_order() {
        let (text, path) = gzipped("turns", 200_000, None);
        let shared = SharedInput::new(Some(path.clone()), 2);
        let Turns {
            chunks,
            failed,
            turns,
        } = take_turns(&shared);
        assert_eq!(failed, None);
        assert!(chunks.len() >= 6, "{} chunks", chunks.len());
        assert!(turns >= 3, "{turns} turns");
        assert!(chunks[0].first && chunks[1..].iter().all(|c| !c.first));
        assert_eq!(
            shared.header.get().map(Vec::as_slice),
            Some(&b"n,word\n"[..])
        );
        let mut offset = 0;
        for chunk in &chunks {
            assert_eq!(chunk.offset, offset);
            assert!(chunk.bytes.ends_with(b"\n"));
            offset += chunk.bytes.len() as u64;
        }
        assert_eq!(concat(&chunks), text);
        assert_ends(&shared);
        let _ = std::fs::remove_file(path);
    }

    /// A corrupt input fails inside a turn: the chunks before the failure
    /// are handed out first, and every turn after it reads the end.
    #[test]
    fn a_failure_ends_the_turn_after_the_chunks_before_it() {
        let (text, path) = gzipped("cut", 200_000, Some(200_000));
        let shared = SharedInput::new(Some(path.clone()), 2);
        let Turns { chunks, failed, .. } = take_turns(&shared);
        let failed = failed.expect("a cut gzip stream fails");
        assert!(failed.contains("cut.gz"), "{failed}");
        assert!(!chunks.is_empty());
        let read = concat(&chunks);
        assert!(text.starts_with(&read) && read.len() < text.len());
        assert_ends(&shared);
        let _ = std::fs::remove_file(path);
    }

    /// A turn after the input ended reads only the end.
    fn assert_ends(shared: &SharedInput) {
        let mut reads = Vec::new();
        let mut turn = vec![cardinal_source::Chunk::default(); 2];
        shared
            .read_turn(1, &mut turn, true, &mut reads)
            .expect("ended");
        assert!(matches!(reads[..], [SharedRead::End]));
    }

    /// Workers on threads of their own take their turns in rotation, 0, 1,
    /// 2, 0, ..., however the threads are scheduled; once one leaves, the
    /// others take its turns, and the input is read whole.
    #[test]
    fn threads_take_turns_in_rotation_and_skip_who_left() {
        let (text, path) = gzipped("rotation", 600_000, None);
        let shared = SharedInput::new(Some(path.clone()), 3);
        // (participant, offset of each chunk it read), in the order read.
        let order = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for participant in 0..3 {
                let (shared, order) = (&shared, &order);
                scope.spawn(move || {
                    let mut turn = vec![cardinal_source::Chunk::default(); 1];
                    let mut reads = Vec::new();
                    for taken in 0.. {
                        // Participant 2 leaves after its third turn.
                        if participant == 2 && taken == 3 {
                            shared.leave(2);
                            return;
                        }
                        reads.clear();
                        shared
                            .read_turn(participant, &mut turn, true, &mut reads)
                            .expect("opens");
                        match reads[..] {
                            [SharedRead::Chunk { .. }] => {
                                let mut order = order.lock().expect("order");
                                order.push((participant, turn[0].offset, turn[0].bytes().to_vec()));
                            }
                            [SharedRead::End] => return,
                            _ => panic!("one chunk a turn"),
                        }
                    }
                });
            }
        });
        let mut order = order.into_inner().expect("order");
        assert!(order.len() > 20, "{} turns", order.len());
        // A turn's chunk follows the turn before's (read under the lock;
        // recorded after it, so perhaps out of order): the turns in offset
        // order are taken by participants in rotation, 2 only for its
        // three turns.
        order.sort_by_key(|&(_, offset, _)| offset);
        let who: Vec<usize> = order.iter().map(|&(p, _, _)| p).collect();
        assert_eq!(who[..9], [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert!(who[9..].chunks(2).all(|pair| pair == [0, 1] || pair == [0]));
        let read: Vec<u8> = order.into_iter().flat_map(|(_, _, bytes)| bytes).collect();
        assert_eq!(read, text);
        let _ = std::fs::remove_file(path);
    }

    /// The chunks' bytes back to back.
    fn concat(chunks: &[Taken]) -> Vec<u8> {
        chunks
            .iter()
            .flat_map(|c| c.bytes.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;
    use cardinal_rollup::Input;
    use proptest::prelude::*;

    const SQL: &str = "
        CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, t TEXT) WITH (time = 'ts');
        CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, t,
            count(*), count(x), sum(x), avg(n), min(x), max(n), hll(n), theta(t),
            exact_distinct(n), exact_distinct(t), approx_quantile(x, 0.5), topk(t, 3), topk(n, 3),
            approx_quantile(x, 0.9, 0.99)
          FROM s GROUP BY day, t;";

    /// The shape with every quantile aggregate keeping its own sketch.
    fn unshared(shape: &Shape) -> Shape {
        let aggs = shape
            .aggs
            .iter()
            .map(|kind| match *kind {
                AggKind::QuantilesOf { of, ranks } => {
                    let AggKind::Quantiles { k, .. } = shape.aggs[usize::from(of)] else {
                        unreachable!("QuantilesOf reads a Quantiles");
                    };
                    AggKind::Quantiles { k, ranks }
                }
                other => other,
            })
            .collect();
        Shape { aggs }
    }

    /// The general path: one [`Input`] per aggregate, built from the
    /// aggregate's kind and routed argument, folded by [`Rollup::fold`].
    fn fold_general(summary: &Summary, rollup: &mut Rollup, routed: &Routed) -> Folded {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for aggregate in &summary.aggregates {
            names.push(match aggregate.argument.map(|a| (a, routed.args[a])) {
                Some((_, Arg::Int(v))) => v.to_string().into_bytes(),
                Some((a, _)) => routed.text_of(a).to_vec(),
                None => Vec::new(),
            });
        }
        let inputs: Vec<Input<'_>> = summary
            .aggregates
            .iter()
            .zip(&rollup.shape().aggs.clone())
            .zip(&names)
            .map(|((aggregate, kind), name)| {
                let Some(a) = aggregate.argument else {
                    return Input::Null;
                };
                let arg = routed.args[a];
                match kind {
                    AggKind::CountAll => Input::Null,
                    AggKind::Count if arg == Arg::Null => Input::Null,
                    AggKind::Count => Input::Number(0.0),
                    AggKind::Hll { .. }
                    | AggKind::Theta { .. }
                    | AggKind::ExactDistinct
                    | AggKind::TopK { .. } => match arg.hash() {
                        Some(hash) => Input::Key {
                            hash,
                            id: id_of(&arg),
                            text: name,
                        },
                        None => Input::Null,
                    },
                    _ => match arg {
                        Arg::Int(i) => Input::Int(i),
                        Arg::Float(f) => Input::Number(f),
                        #[expect(clippy::cast_precision_loss, reason = "instants")]
                        Arg::Time(t) => Input::Number(t.0 as f64),
                        Arg::Bool(b) => Input::Number(f64::from(u8::from(b))),
                        Arg::Null | Arg::Text { .. } => Input::Null,
                    },
                }
            })
            .collect();
        rollup.fold(routed.bucket.unwrap_or(Timestamp(0)), &routed.key, &inputs)
    }

    /// Everything comparable about a rollup's groups, in group order.
    fn fingerprint(rollup: &Rollup) -> Vec<String> {
        let mut rows: Vec<String> = rollup.rows().iter().map(|r| format!("{r:?}")).collect();
        rows.push(format!(
            "{} groups, {} dropped at the limit, {} expired",
            rollup.group_count(),
            rollup.dropped_group_limit(),
            rollup.dropped_expired()
        ));
        rows
    }

    proptest! {
        /// Holding routes back to prefetch their groups, or per part of
        /// the rollup, folds exactly what folding at once does: same
        /// groups, same states, same drops (the group limit is hit in
        /// many cases; a retention window of 0 to 2 days drops late rows
        /// and evicts old days between batches), whichever lanes defer and
        /// wherever batches end.
        #[test]
        fn deferred_folds_equal_direct_folds(
            rows in proptest::collection::vec((0u8..4, 0u16..600, -5i64..5, 0u8..8), 0..1500),
            batch in 1usize..200,
            groups_max in 300u64..2000,
            pending_bytes_max in 1usize..5000,
            retention_days in proptest::option::of(0i64..3),
        ) {
            let plan = Plan::compile(
                "CREATE STREAM s (ts TIMESTAMP, ip TEXT, n BIGINT, site TEXT) WITH (time = 'ts');
                 CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, substr(ip, 1, 3) AS p,
                   count(*), sum(n), hll(n), topk(site, 3) FROM s GROUP BY day, p;
                 CREATE SUMMARY b AS SELECT date_trunc('day', ts) AS day, ip, count(*), min(n)
                   FROM s WHERE site <> 's0' GROUP BY day, ip;",
            )
            .expect("compiles");
            let summaries: Vec<&Summary> = plan.summaries.iter().collect();
            let shapes: Vec<Shape> = summaries.iter().map(|s| shape_of(s).expect("shape")).collect();
            let limits = Limits { groups_max, retention_ms: retention_days.map(|d| d * 86_400_000), future_ms: None };
            let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
            let stream = &plan.streams[0];
            // Through the prefetch ring, at once, and held per part (the
            // rollups split into parts from the first group).
            let mut folds = [(0, usize::MAX), (usize::MAX, usize::MAX), (usize::MAX, 0)].map(
                |(min, parts_after)| {
                    let mut fold =
                        Fold::new(&summaries, &shapes, limits, &shown, stream).expect("fold");
                    fold.prefetch_groups_min = min;
                    fold.pending_bytes_max = pending_bytes_max;
                    for lane in &mut fold.lanes {
                        lane.rollup = lane.rollup.clone().with_parts_after(parts_after);
                    }
                    fold
                },
            );
            for fold in &mut folds {
                for (i, (day, ip, n, site)) in rows.iter().enumerate() {
                    let fields = [
                        format!("2026-11-0{}T00:00:00Z", day + 1),
                        format!("{ip:04}"),
                        n.to_string(),
                        format!("s{site}"),
                    ];
                    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                    fold.record(fields.as_slice(), "test", || i.to_string());
                    if (i + 1) % batch == 0 {
                        fold.flush();
                    }
                }
                fold.finish();
                // As the run ends: the window of the newest bucket.
                for lane in &mut fold.lanes {
                    lane.rollup.evict_expired();
                }
            }
            let [deferred, direct, held] = folds;
            for ((a, b), c) in deferred.lanes.iter().zip(&direct.lanes).zip(&held.lanes) {
                prop_assert_eq!(fingerprint(&a.rollup), fingerprint(&b.rollup));
                prop_assert_eq!(fingerprint(&c.rollup), fingerprint(&b.rollup));
            }
            // Summary b has no topk: it held its records per part.
            prop_assert!(held.lanes[1].can_pend && !held.lanes[0].can_pend);
        }

        /// Feeds fold exactly what the general path folds, and quantile
        /// aggregates sharing one sketch answer what sketches of their own
        /// answer (few records per group, so the sketches stay exact).
        #[test]
        fn feeds_fold_like_inputs(
            rows in proptest::collection::vec(
                (0u8..3, proptest::option::of(-5i64..5), proptest::option::of(-2.0f64..2.0), 0u8..4),
                0..120,
            )
        ) {
            let plan = Plan::compile(SQL).expect("compiles");
            let summary = &plan.summaries[0];
            let shape = shape_of(summary).expect("shape");
            let feeds = feeds_of(summary, &shape);
            prop_assert!(feeds.contains(&Feed::Skip), "the second quantile aggregate shares");
            let mut fast = Rollup::new(shape.clone(), Limits::default()).expect("rollup");
            let mut general = Rollup::new(unshared(&shape), Limits::default()).expect("rollup");
            let mut scratch = Scratch::default();
            let mut routed = Routed::default();
            let mut hashed = HashMemo::default();
            for (day, n, x, t) in rows {
                let fields = [
                    format!("2026-11-0{}T10:00:00Z", day + 1),
                    n.map(|n| n.to_string()).unwrap_or_default(),
                    x.map(|x| x.to_string()).unwrap_or_default(),
                    if t == 0 { String::new() } else { format!("t{t}") },
                ];
                let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                prop_assert!(summary.route(fields.as_slice(), &mut scratch, &mut routed).expect("routes"));
                prop_assert_eq!(
                    fold_routed(&feeds, &mut fast, &routed, &mut hashed, None),
                    fold_general(summary, &mut general, &routed)
                );
            }
            prop_assert_eq!(fast.rows(), general.rows());
        }
    }
}
