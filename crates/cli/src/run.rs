//! `cardinal run SCHEMA.sql INPUT...`: the engine, end to end.
//!
//! ```text
//!  inputs --split--> jobs (a file, a byte range of a large plain file, a
//!                   range of a Parquet file's row groups, stdin)
//!  worker 1..N: pull a job -> read chunks of lines -> parse into a batch
//!               -> route each record through every summary -> fold into
//!               the worker's own partial rollups (no lock, no shared state)
//!  main: merge the partials per summary -> tables, per-day files, JSON lines
//! ```
//!
//! Workers share nothing but the job queue. Rejected records (malformed
//! lines, fields that are not their declared type) are counted by reason,
//! reported with input, line and column, and written to the rejects file; the
//! rest of their batch goes on.

use std::collections::VecDeque;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use cardinal_event::{Record, Timestamp, Value};
use cardinal_export::{Columns, Options, ResultRow, Results};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser, ParquetFile};
use cardinal_rollup::{AggKind, Folded, Input, Limits, Rollup, Shape};
use cardinal_route::{AggregateKind, Arg, Format, OutputSource, Plan, Routed, Scratch, Summary};
use cardinal_source::{LineReader, split_file};

/// Most aggregates one summary may have: each record's inputs live in a
/// fixed array on the stack, so routing allocates nothing.
pub const AGGREGATES_MAX: usize = 16;

/// Plain files at least this large are split into byte ranges, so that
/// several workers read one file.
const SPLIT_BYTES_MIN: u64 = 64 << 20;

/// Parquet files are split into about this many jobs per thread (whole
/// row groups each), so that workers finishing early find more work.
const PARQUET_JOBS_PER_THREAD: usize = 4;

/// Reject lines printed to stderr before only counting.
const REJECTS_SHOWN_MAX: u64 = 10;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  cardinal gen impressions --events 1000000 -o imp.csv
  cardinal run bench/engine/schemas/impressions.sql imp.csv
  cardinal run schema.sql a.csv.gz b.csv.zst --out results/ --hll-hex
  cat imp.csv | cardinal run schema.sql - --json -")]
pub struct Args {
    /// The declarations: CREATE STREAM and CREATE SUMMARY statements.
    schema: PathBuf,
    /// Input files (gzip, zstd, lz4 or snappy detected by magic bytes), or
    /// `-` for stdin.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The stream the inputs belong to (default: the only one declared).
    #[arg(long)]
    stream: Option<String>,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
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
    /// Write every rejected record (input, line, reason) to this file.
    #[arg(long)]
    rejects: Option<PathBuf>,
    /// Exit with status 3 if any record was rejected.
    #[arg(long)]
    strict: bool,
    /// Most groups per summary per worker (a memory guard).
    #[arg(long, default_value_t = cardinal_rollup::GROUPS_MAX_DEFAULT)]
    groups_max: u64,
    /// Keep only buckets within this many days of the newest one seen.
    #[arg(long)]
    retention_days: Option<u32>,
    /// Print no result tables (files and the summary line only).
    #[arg(long)]
    quiet: bool,
}

/// One unit of work: a whole input, a byte range of a plain file, or a
/// range of a Parquet file's row groups.
#[derive(Debug, Clone)]
struct Job {
    path: Option<PathBuf>,
    range: Option<std::ops::Range<u64>>,
    /// The file's header line, for a range that does not start the file.
    header: Option<Vec<u8>>,
    /// A Parquet file (footer read, columns matched) and the row groups
    /// to read.
    parquet: Option<(Arc<ParquetFile>, std::ops::Range<usize>)>,
}

/// What one worker hands back.
struct WorkerOutput {
    rollups: Vec<Rollup>,
    counts: Counts,
}

#[derive(Debug, Default, Clone)]
struct Counts {
    records: u64,
    bytes: u64,
    rejects: u64,
    rejects_by_reason: std::collections::BTreeMap<String, u64>,
    dropped_group_limit: u64,
    dropped_expired: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.rejects += other.rejects;
        for (reason, n) in &other.rejects_by_reason {
            *self.rejects_by_reason.entry(reason.clone()).or_default() += n;
        }
        self.dropped_group_limit += other.dropped_group_limit;
        self.dropped_expired += other.dropped_expired;
    }
}

pub fn run(args: &Args) -> Result<i32> {
    let sql = std::fs::read_to_string(&args.schema)
        .with_context(|| format!("reading {}", args.schema.display()))?;
    let plan =
        Plan::compile(&sql).map_err(|e| anyhow::anyhow!("{}:\n{e}", args.schema.display()))?;
    let stream = pick_stream(&plan, args.stream.as_deref())?;
    let summaries: Vec<&Summary> = plan
        .summaries
        .iter()
        .filter(|s| s.stream == stream)
        .collect();
    ensure!(
        !summaries.is_empty(),
        "no CREATE SUMMARY reads stream {}",
        plan.streams[stream].name
    );
    let shapes: Vec<Shape> = summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    let limits = Limits {
        groups_max: args.groups_max,
        retention_ms: args.retention_days.map(|d| i64::from(d) * 86_400_000),
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
    reads.sort_unstable();
    reads.dedup();
    let jobs = plan_jobs(&args.inputs, threads, &plan.streams[stream], &reads)?;
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
    let rejects_file = match &args.rejects {
        Some(path) => Some(Mutex::new(BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ))),
        None => None,
    };
    let shown = std::sync::atomic::AtomicU64::new(0);

    let started = Instant::now();
    let outputs: Vec<Result<WorkerOutput>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    worker(
                        &plan,
                        stream,
                        &summaries,
                        &shapes,
                        limits,
                        &queue,
                        rejects_file.as_ref(),
                        &shown,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked")))
            })
            .collect()
    });
    let mut merged: Option<Vec<Rollup>> = None;
    let mut counts = Counts::default();
    for output in outputs {
        let output = output?;
        counts.add(&output.counts);
        match &mut merged {
            None => merged = Some(output.rollups),
            Some(all) => {
                for (into, from) in all.iter_mut().zip(&output.rollups) {
                    into.merge(from).context("merging partial rollups")?;
                }
            }
        }
    }
    let rollups = merged.expect("at least one worker");
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(file) = rejects_file {
        file.into_inner()
            .expect("workers are done")
            .flush()
            .context("writing rejects")?;
    }
    for rollup in &rollups {
        counts.dropped_group_limit += rollup.dropped_group_limit();
        counts.dropped_expired += rollup.dropped_expired();
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let options = Options {
        hll_hex: args.hll_hex,
    };
    let mut json: Option<Box<dyn Write>> = match &args.json {
        Some(path) if path.as_os_str() == "-" => Some(Box::new(std::io::stdout())),
        Some(path) => Some(Box::new(BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ))),
        None => None,
    };
    for (summary, rollup) in summaries.iter().zip(&rollups) {
        let results = results_of(summary, rollup)?;
        if !args.quiet && args.json.as_deref() != Some(Path::new("-")) {
            writeln!(out, "{} ({} groups)", summary.name, rollup.group_count())?;
            write!(out, "{}", cardinal_export::table(&results))?;
            writeln!(out)?;
        }
        if let Some(dir) = &args.out {
            let files = cardinal_export::write_daily_csv(dir, &summary.name, &results, options)?;
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
    if let Some(mut writer) = json {
        writer.flush().context("writing JSON lines")?;
    }
    eprintln!(
        "{} records, {:.1} MB in {:.2} s: {:.2} M records/s, {:.0} MB/s on {threads} thread(s); {} rejected{}",
        counts.records,
        counts.bytes as f64 / 1e6,
        elapsed,
        counts.records as f64 / elapsed / 1e6,
        counts.bytes as f64 / elapsed / 1e6,
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
    );
    if counts.dropped_group_limit > 0 {
        eprintln!(
            "{} records dropped: a summary reached --groups-max",
            counts.dropped_group_limit
        );
    }
    if counts.dropped_expired > 0 {
        eprintln!(
            "{} records dropped: older than --retention-days",
            counts.dropped_expired
        );
    }
    Ok(if args.strict && counts.rejects > 0 {
        3
    } else {
        0
    })
}

fn pick_stream(plan: &Plan, name: Option<&str>) -> Result<usize> {
    match name {
        Some(name) => plan
            .streams
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(name))
            .with_context(|| format!("no stream called {name}")),
        None if plan.streams.len() == 1 => Ok(0),
        None if plan.streams.is_empty() => {
            bail!("the schema declares no stream (CREATE STREAM ...)")
        }
        None => bail!(
            "the schema declares {} streams; say which one the inputs are with --stream",
            plan.streams.len()
        ),
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
        .map(|a| -> Result<AggKind> {
            Ok(match &a.kind {
                AggregateKind::CountAll => AggKind::CountAll,
                AggregateKind::Count => AggKind::Count,
                AggregateKind::Sum => AggKind::Sum,
                AggregateKind::Min => AggKind::Min,
                AggregateKind::Max => AggKind::Max,
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
    for path in inputs {
        if path.as_os_str() == "-" {
            ensure!(
                stream.format != Format::Parquet,
                "stream {} is Parquet, which cannot be read from stdin: name the file",
                stream.name
            );
            jobs.push(Job {
                path: None,
                range: None,
                header: None,
                parquet: None,
            });
            continue;
        }
        if let Some(file) = parquet_input(path, stream, reads)? {
            jobs.extend(parquet_jobs(&file, threads).into_iter().map(|groups| Job {
                path: Some(path.clone()),
                range: None,
                header: None,
                parquet: Some((file.clone(), groups)),
            }));
            continue;
        }
        let len = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .len();
        let plain = cardinal_source::Input::open(path)
            .with_context(|| format!("opening {}", path.display()))?
            .compression()
            == cardinal_source::Compression::None;
        if threads > 1 && plain && len >= SPLIT_BYTES_MIN {
            let ranges = split_file(path, threads)
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
                    path: Some(path.clone()),
                    range: Some(range),
                    header,
                    parquet: None,
                });
            }
        } else {
            jobs.push(Job {
                path: Some(path.clone()),
                range: None,
                header: None,
                parquet: None,
            });
        }
    }
    Ok(jobs)
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

enum Parser {
    Csv(CsvParser),
    Json(NdjsonParser),
}

impl Parser {
    fn new(stream: &cardinal_route::Stream) -> Result<Self> {
        Ok(match stream.format {
            Format::Csv => Parser::Csv(CsvParser::new(
                &stream.schema,
                CsvConfig {
                    delimiter: stream.delimiter,
                    header: stream.header,
                    ..CsvConfig::default()
                },
            )?),
            Format::Amplab => Parser::Csv(CsvParser::new(&stream.schema, CsvConfig::amplab())?),
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
fn worker(
    plan: &Plan,
    stream: usize,
    summaries: &[&Summary],
    shapes: &[Shape],
    limits: Limits,
    queue: &Mutex<VecDeque<Job>>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    shown: &std::sync::atomic::AtomicU64,
) -> Result<WorkerOutput> {
    let stream_decl = &plan.streams[stream];
    let mut fold = Fold {
        summaries,
        shapes,
        shown,
        rollups: shapes
            .iter()
            .map(|s| Rollup::new(s.clone(), limits))
            .collect::<Result<_, _>>()?,
        counts: Counts::default(),
        routed: Routed::default(),
        scratch: Scratch::default(),
        name_scratch: Scratch::default(),
        names: Vec::new(),
        reject_lines: String::new(),
    };
    let mut batch = Batch::new();
    loop {
        let Some(job) = queue.lock().expect("queue lock").pop_front() else {
            break;
        };
        if let Some((file, groups)) = &job.parquet {
            read_parquet(file, groups.clone(), &mut fold, rejects_file)?;
            continue;
        }
        let input = match (&job.path, &job.range) {
            (None, _) => cardinal_source::Input::stdin()?,
            (Some(path), None) => cardinal_source::Input::open(path)?,
            (Some(path), Some(range)) => cardinal_source::Input::open_range(path, range.clone())?,
        };
        let name: Arc<str> = input.name().clone();
        let mut reader = LineReader::new(input);
        let mut parser = Parser::new(stream_decl)?;
        if let (Some(header), Parser::Csv(csv)) = (&job.header, &mut parser) {
            csv.read_header(&name, header)?;
        }
        loop {
            match reader.read_chunk(batch.chunk_mut()) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if e.is_recoverable() => {
                    fold.reject("line too long", &e.to_string());
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("reading {name}")),
            }
            fold.counts.bytes += batch.chunk().len() as u64;
            parser
                .parse(&mut batch)
                .with_context(|| format!("parsing {name}"))?;
            for r in batch.rejects() {
                fold.reject(&r.reason.to_string(), &r.to_string());
            }
            for index in 0..batch.len() {
                let record = batch.record(index);
                fold.record(&record, &name, || where_(&record));
            }
            fold.flush_rejects(rejects_file)?;
        }
    }
    Ok(WorkerOutput {
        rollups: fold.rollups,
        counts: fold.counts,
    })
}

/// Reads one Parquet job: the row groups `groups` of `file`, a bounded
/// batch at a time, each row routed like a text record.
fn read_parquet(
    file: &ParquetFile,
    groups: std::ops::Range<usize>,
    fold: &mut Fold<'_>,
    rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
) -> Result<()> {
    fold.counts.bytes += file.bytes(groups.clone());
    let mut reader = file.read(groups)?;
    while let Some(batch) = reader.next_batch()? {
        for index in 0..batch.len() {
            let record = batch.record(index);
            fold.record(&record, batch.input(), || record.row().to_string());
        }
        fold.flush_rejects(rejects_file)?;
    }
    Ok(())
}

/// A worker's partial rollups and the buffers routing reuses: every
/// record of every format goes through [`Fold::record`].
struct Fold<'a> {
    summaries: &'a [&'a Summary],
    shapes: &'a [Shape],
    shown: &'a std::sync::atomic::AtomicU64,
    rollups: Vec<Rollup>,
    counts: Counts,
    routed: Routed,
    scratch: Scratch,
    name_scratch: Scratch,
    names: Vec<u8>,
    /// Reject lines not yet written to the rejects file.
    reject_lines: String,
}

impl Fold<'_> {
    /// Routes `record` (from input `name`; `at` says where in it, for
    /// rejects) through every summary and folds it into their rollups.
    fn record<R: Record>(&mut self, record: &R, name: &str, at: impl Fn() -> String) {
        self.counts.records += 1;
        for ((summary, rollup), shape) in self
            .summaries
            .iter()
            .zip(&mut self.rollups)
            .zip(self.shapes)
        {
            let routed = &mut self.routed;
            let names = &mut self.names;
            match summary.route(record, &mut self.scratch, routed) {
                Ok(false) => {}
                Ok(true) => {
                    // Top-k reports names: read each top-k argument's
                    // text into a reused buffer first, then borrow it.
                    names.clear();
                    let mut spans = [(0usize, 0usize); AGGREGATES_MAX];
                    for (i, (aggregate, kind)) in
                        summary.aggregates.iter().zip(&shape.aggs).enumerate()
                    {
                        if let (AggKind::TopK { .. }, Some(a)) = (kind, aggregate.argument) {
                            let start = names.len();
                            match routed.args[a] {
                                Arg::Int(v) => {
                                    let _ = write!(names, "{v}");
                                }
                                Arg::Text { .. } => {
                                    if let Ok(Value::Text(t)) =
                                        summary.arguments[a].eval(record, &mut self.name_scratch)
                                    {
                                        names.extend_from_slice(t);
                                    }
                                }
                                _ => {}
                            }
                            spans[i] = (start, names.len());
                        }
                    }
                    let mut inputs = [Input::Null; AGGREGATES_MAX];
                    for (i, (aggregate, kind)) in
                        summary.aggregates.iter().zip(&shape.aggs).enumerate()
                    {
                        let name = &names[spans[i].0..spans[i].1];
                        inputs[i] =
                            input_of(aggregate.argument.map(|a| routed.args[a]), kind, name);
                    }
                    let bucket = routed.bucket.unwrap_or(Timestamp(0));
                    match rollup.fold(bucket, &routed.key, &inputs[..shape.aggs.len()]) {
                        Folded::Ok | Folded::DroppedGroupLimit | Folded::DroppedExpired => {}
                        Folded::DroppedKeyTooLong => {
                            reject(
                                &mut self.counts,
                                &mut self.reject_lines,
                                self.shown,
                                "group key too long",
                                &format!("{name}: {}", at()),
                            );
                        }
                    }
                }
                Err(e) => {
                    let text = format!("{name}:{}: {}: {e}", at(), summary.name);
                    reject(
                        &mut self.counts,
                        &mut self.reject_lines,
                        self.shown,
                        &eval_reason(&e),
                        &text,
                    );
                }
            }
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

fn where_(record: &cardinal_parse::RecordRef<'_>) -> String {
    match record.line() {
        Some(line) => line.to_string(),
        None => format!("byte {}", record.offset()),
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
        eprintln!("rejected: {text}");
    }
    lines.push_str(text);
    lines.push('\n');
}

/// One aggregate's input from the routed argument (`name`: the argument's
/// text, read for top-k only).
fn input_of<'a>(arg: Option<Arg>, kind: &AggKind, name: &'a [u8]) -> Input<'a> {
    let Some(arg) = arg else { return Input::Null };
    match kind {
        AggKind::CountAll => Input::Null,
        AggKind::Count => match arg {
            Arg::Null => Input::Null,
            _ => Input::Number(0.0),
        },
        AggKind::Sum | AggKind::Avg | AggKind::Min | AggKind::Max | AggKind::Quantiles { .. } => {
            match arg {
                Arg::Int(i) => Input::Number(i as f64),
                Arg::Float(f) => Input::Number(f),
                Arg::Time(t) => Input::Number(t.0 as f64),
                Arg::Bool(b) => Input::Number(f64::from(u8::from(b))),
                Arg::Null | Arg::Text { .. } => Input::Null,
            }
        }
        AggKind::Hll { .. }
        | AggKind::Theta { .. }
        | AggKind::ExactDistinct
        | AggKind::TopK { .. } => match arg.hash() {
            Some(hash) => Input::Key {
                hash,
                id: match arg {
                    Arg::Int(i) => Some(u64::from_ne_bytes(i.to_ne_bytes())),
                    _ => None,
                },
                text: name,
            },
            None => Input::Null,
        },
    }
}

/// Decodes each group's key into display values and names the columns.
fn results_of<'a>(summary: &Summary, rollup: &'a Rollup) -> Result<Results<'a>> {
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
    let rows = rollup
        .groups()
        .map(|(bucket, key, states)| ResultRow {
            bucket,
            dims: cardinal_route::key_values(key).map(display).collect(),
            states,
        })
        .collect();
    Ok(Results::new(columns, &rollup.shape().aggs, rows)?)
}

fn display(value: Value<'_>) -> Option<String> {
    match value {
        Value::Null => None,
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Time(t) => Some(t.to_string()),
    }
}
