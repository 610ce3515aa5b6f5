//! `cardinal run SCHEMA.sql INPUT...`: flags in, the engine
//! ([`cardinal_engine::execute`]) over the inputs, answers out: tables on
//! stdout, per-day files under `--out`, JSON lines, the rejects file.
//!
//! Everything the run writes goes through a temp file or the output
//! folder's staging directory and is put in place only when the run
//! succeeds; an interrupt removes what is not in place ([`crate::interrupt`]).

use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use cardinal_engine::progress::Progress;
use cardinal_engine::{EngineOptions, Executed, is_fifo, plain_bytes, results_of, threads_default};
use cardinal_export::{AtomicFile, Options, OutDir};
use cardinal_rollup::Limits;
use cardinal_route::Plan;

mod args;
mod outputs;

pub use args::{Args, threads_arg};
pub(crate) use args::{DAY_MS, FUTURE_TOLERANCE_DAYS_MIN};
use outputs::{check_hll_hex, check_outputs, commit_files, output_file};

/// Runs the engine over `inputs`, drawing the progress line on stderr
/// meanwhile if `show`, and saves the attribution chains if the options
/// name a snapshot directory (an interrupt waits until they are in
/// place, so it never leaves their temp files behind).
pub fn execute<'p>(
    plan: &'p Plan,
    inputs: &[PathBuf],
    options: &EngineOptions,
    show: bool,
) -> Result<Executed<'p>> {
    let mut options = options.clone();
    let progress = Arc::new(Progress::default());
    let total_bytes = if show { plain_bytes(inputs)? } else { None };
    if show {
        options.progress = Some(Arc::clone(&progress));
    }
    let executed = std::thread::scope(|scope| {
        // Dropping `stop` (once the engine is done) ends the ticker.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        if show {
            let progress = &progress;
            scope.spawn(move || crate::progress::show(progress, total_bytes, &stopped));
        }
        let executed = cardinal_engine::execute(plan, inputs, &options);
        drop(stop);
        executed
    })?;
    let _progress = crate::interrupt::lock();
    executed.save_chains()?;
    Ok(executed)
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
        create_file: output_file,
        chains_snapshot: args.chains_snapshot.clone(),
        memory_max: args
            .memory_max
            .unwrap_or_else(crate::memory::memory_max_default),
        progress: None,
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
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let mut executed = execute(&plan, &inputs, &options, show)?;
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
/// files and are read as streams ([`is_fifo`]). Names starting with `.`
/// are skipped, as editors' and file managers' leftovers are. A
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
        sketch_bytes: args.sketch_bytes.as_deref().map(sketch_encoding),
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
/// `N` and the rate count the records folded
/// ([`Counts::records`](cardinal_engine::Counts::records)), `J`
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

/// `--sketch-bytes`' value (clap admits hex and base64 only).
pub(crate) fn sketch_encoding(name: &str) -> cardinal_export::SketchEncoding {
    match name {
        "base64" => cardinal_export::SketchEncoding::Base64,
        _ => cardinal_export::SketchEncoding::Hex,
    }
}
