//! `cardinal run SCHEMA.sql INPUT...`: the engine, end to end.
//!
//! ```text
//!  inputs --split--> jobs (a file, a byte range of a large plain file, stdin)
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
use cardinal_event::{Timestamp, Value};
use cardinal_export::{Columns, Options, ResultRow, Results};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser};
use cardinal_rollup::{AggKind, Folded, Input, Limits, Rollup, Shape};
use cardinal_route::{AggregateKind, Arg, Format, OutputSource, Plan, Routed, Scratch, Summary};
use cardinal_source::{LineReader, split_file};

/// Most aggregates one summary may have: each record's inputs live in a
/// fixed array on the stack, so routing allocates nothing.
pub const AGGREGATES_MAX: usize = 16;

/// Plain files at least this large are split into byte ranges, so that
/// several workers read one file.
const SPLIT_BYTES_MIN: u64 = 64 << 20;

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

/// One unit of work: a whole input, or a byte range of a plain file.
#[derive(Debug, Clone)]
struct Job {
    path: Option<PathBuf>,
    range: Option<std::ops::Range<u64>>,
    /// The file's header line, for a range that does not start the file.
    header: Option<Vec<u8>>,
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
    let jobs = plan_jobs(&args.inputs, threads, &plan.streams[stream])?;
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
/// ranges (one per thread), everything else whole.
fn plan_jobs(
    inputs: &[PathBuf],
    threads: usize,
    stream: &cardinal_route::Stream,
) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for path in inputs {
        if path.as_os_str() == "-" {
            jobs.push(Job {
                path: None,
                range: None,
                header: None,
            });
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
                });
            }
        } else {
            jobs.push(Job {
                path: Some(path.clone()),
                range: None,
                header: None,
            });
        }
    }
    Ok(jobs)
}

enum Parser {
    Csv(CsvParser),
    Json(NdjsonParser),
}

impl Parser {
    /// A parser for `stream` that keeps only the columns `summaries` read
    /// (delimited text: the others are not split, and read as absent).
    fn new(stream: &cardinal_route::Stream, summaries: &[&Summary]) -> Result<Self> {
        let mut reads: Vec<usize> = summaries
            .iter()
            .flat_map(|s| s.reads.iter().copied())
            .collect();
        reads.sort_unstable();
        reads.dedup();
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
                parser.project(&reads);
                Parser::Csv(parser)
            }
            Format::Json => Parser::Json(NdjsonParser::new(&stream.schema)?),
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
    let mut rollups: Vec<Rollup> = shapes
        .iter()
        .map(|s| Rollup::new(s.clone(), limits))
        .collect::<Result<_, _>>()?;
    let mut counts = Counts::default();
    let mut batch = Batch::new();
    let mut routed = Routed::default();
    let mut scratch = Scratch::default();
    let mut name_scratch = Scratch::default();
    let mut names: Vec<u8> = Vec::new();
    let mut reject_lines = String::new();
    loop {
        let Some(job) = queue.lock().expect("queue lock").pop_front() else {
            break;
        };
        let input = match (&job.path, &job.range) {
            (None, _) => cardinal_source::Input::stdin()?,
            (Some(path), None) => cardinal_source::Input::open(path)?,
            (Some(path), Some(range)) => cardinal_source::Input::open_range(path, range.clone())?,
        };
        let name: Arc<str> = input.name().clone();
        let mut reader = LineReader::new(input);
        let mut parser = Parser::new(stream_decl, summaries)?;
        if let (Some(header), Parser::Csv(csv)) = (&job.header, &mut parser) {
            csv.read_header(&name, header)?;
        }
        loop {
            match reader.read_chunk(batch.chunk_mut()) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if e.is_recoverable() => {
                    reject(
                        &mut counts,
                        &mut reject_lines,
                        shown,
                        "line too long",
                        &e.to_string(),
                    );
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("reading {name}")),
            }
            counts.bytes += batch.chunk().len() as u64;
            parser
                .parse(&mut batch)
                .with_context(|| format!("parsing {name}"))?;
            for r in batch.rejects() {
                reject(
                    &mut counts,
                    &mut reject_lines,
                    shown,
                    &r.reason.to_string(),
                    &r.to_string(),
                );
            }
            for index in 0..batch.len() {
                let record = batch.record(index);
                counts.records += 1;
                for ((summary, rollup), shape) in summaries.iter().zip(&mut rollups).zip(shapes) {
                    match summary.route(&record, &mut scratch, &mut routed) {
                        Ok(false) => {}
                        Ok(true) => {
                            // Top-k reports names: read each top-k argument's
                            // text into a reused buffer first, then borrow it.
                            names.clear();
                            let mut spans = [(0usize, 0usize); AGGREGATES_MAX];
                            for (i, (aggregate, kind)) in
                                summary.aggregates.iter().zip(&shape.aggs).enumerate()
                            {
                                if let (AggKind::TopK { .. }, Some(a)) = (kind, aggregate.argument)
                                {
                                    let start = names.len();
                                    match routed.args[a] {
                                        Arg::Int(v) => {
                                            let _ = write!(names, "{v}");
                                        }
                                        Arg::Text { .. } => {
                                            if let Ok(Value::Text(t)) = summary.arguments[a]
                                                .eval(&record, &mut name_scratch)
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
                                inputs[i] = input_of(
                                    aggregate.argument.map(|a| routed.args[a]),
                                    kind,
                                    name,
                                );
                            }
                            let bucket = routed.bucket.unwrap_or(Timestamp(0));
                            match rollup.fold(bucket, &routed.key, &inputs[..shape.aggs.len()]) {
                                Folded::Ok | Folded::DroppedGroupLimit | Folded::DroppedExpired => {
                                }
                                Folded::DroppedKeyTooLong => {
                                    reject(
                                        &mut counts,
                                        &mut reject_lines,
                                        shown,
                                        "group key too long",
                                        &format!("{name}: {}", where_(&record)),
                                    );
                                }
                            }
                        }
                        Err(e) => {
                            let text = format!("{name}:{}: {}: {e}", where_(&record), summary.name);
                            reject(
                                &mut counts,
                                &mut reject_lines,
                                shown,
                                &eval_reason(&e),
                                &text,
                            );
                        }
                    }
                }
            }
            if !reject_lines.is_empty() {
                if let Some(file) = rejects_file {
                    file.lock()
                        .expect("rejects lock")
                        .write_all(reject_lines.as_bytes())?;
                }
                reject_lines.clear();
            }
        }
    }
    Ok(WorkerOutput { rollups, counts })
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
