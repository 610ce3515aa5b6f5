//! Batch execution: a plan and its inputs in, merged rollups out.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use cardinal_export::AtomicFile;
use cardinal_rollup::{BytesGauge, Limits, MemoryBudget, Rollup, Shape};
use cardinal_route::{Plan, Summary};

use crate::attribute;
use crate::counts::Counts;
use crate::error::{budget_error, group_limit_error};
use crate::jobs::{assign_jobs, is_streamed, plan_jobs};
use crate::plan::{pick_stream, shape_of};
use crate::progress::Progress;
use crate::worker::{WorkerOutput, worker};

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
    /// How to start writing the rejects file (whole or not at all): a
    /// caller that cleans up after an interrupt registers the temp file
    /// here; [`AtomicFile::create`] otherwise.
    pub create_file: fn(&Path) -> Result<AtomicFile>,
    /// Counters the workers publish bytes, records and rejects to, for a
    /// caller that shows progress.
    pub progress: Option<Arc<Progress>>,
    /// Restore attribution chains from this directory and save them there.
    pub chains_snapshot: Option<PathBuf>,
    /// Bytes the rollups of every worker may hold together (`--memory-max`).
    pub memory_max: u64,
}

impl EngineOptions {
    /// `threads` workers with no limits, rejects file, progress counters
    /// or chain snapshot, and a memory budget of `memory_max` bytes.
    pub fn new(threads: usize, memory_max: u64) -> Self {
        Self {
            stream: None,
            threads,
            limits: Limits::default(),
            rejects: None,
            create_file,
            progress: None,
            chains_snapshot: None,
            memory_max,
        }
    }
}

/// Worker `index`'s part of the rejects file: a file beside the rejects
/// file's temp file, removed from the directory at once (it lives while
/// it is open), so that no end of the run, interrupted or not, leaves it
/// behind.
fn rejects_part(temp: &AtomicFile, index: usize) -> Result<std::fs::File> {
    let mut name = temp.temp_path().as_os_str().to_owned();
    name.push(format!(".part-{index}"));
    let path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    Ok(file)
}

/// Appends the workers' parts of the rejects file to it, in worker order.
fn join_rejects(temp: &AtomicFile, parts: Vec<Mutex<BufWriter<std::fs::File>>>) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut out = BufWriter::new(temp.file());
    for part in parts {
        let mut part = part
            .into_inner()
            .expect("workers are done")
            .into_inner()
            .map_err(|e| e.into_error())
            .context("writing rejects")?;
        part.seek(SeekFrom::Start(0)).context("reading rejects")?;
        std::io::copy(&mut part, &mut out).context("writing rejects")?;
    }
    out.flush().context("writing rejects")
}

/// Starts writing `path` whole or not at all (see [`AtomicFile`]).
fn create_file(path: &Path) -> Result<AtomicFile> {
    AtomicFile::create(path).with_context(|| format!("creating {}", path.display()))
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
    /// The attributions' chains, to save with [`Executed::save_chains`].
    attribution: Option<attribute::Setup<'p>>,
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

    /// Writes the attribution chains and dictionaries to
    /// [`EngineOptions::chains_snapshot`], if given, each file through a
    /// temp file renamed into place. A caller that removes temp files on
    /// an interrupt holds its lock meanwhile.
    pub fn save_chains(&self) -> Result<()> {
        match &self.attribution {
            Some(setup) => setup.save(),
            None => Ok(()),
        }
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

/// Runs the engine over `inputs`: every summary of the stream, on
/// `options.threads` workers, merged.
///
/// The answers are the same in every run with the same inputs and thread
/// count, sketches included: the jobs are dealt out the same way
/// (`jobs.rs`), shared inputs are read in a fixed rotation (`shared.rs`),
/// each worker's sketches (and this thread's, made by the merge) flip
/// coins of a stream named by the worker, and the partials merge in worker
/// order. Another thread count splits the work
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
    let mut lists = assign_jobs(jobs, threads).into_iter();
    let rejects_temp = options
        .rejects
        .as_deref()
        .map(options.create_file)
        .transpose()?;
    // Each worker writes its rejects to a part of its own, joined in
    // worker order at the end: the file is then the same in every run
    // with the same inputs and thread count, as the answers are.
    let rejects_parts: Vec<Mutex<BufWriter<std::fs::File>>> = match &rejects_temp {
        Some(temp) => (0..threads)
            .map(|index| Ok(Mutex::new(BufWriter::new(rejects_part(temp, index)?))))
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    let shown = std::sync::atomic::AtomicU64::new(0);
    let progress = options.progress.clone().unwrap_or_default();
    let budget = MemoryBudget::new(options.memory_max);

    let started = Instant::now();
    let outputs: Vec<Result<WorkerOutput>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let jobs = lists.next().expect("a list per worker");
                let (summaries, shapes) = (&summaries, &shapes);
                let rejects_file = rejects_parts.get(index);
                let (shown, attribution, progress) = (&shown, &attribution, &*progress);
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
                        rejects_file,
                        shown,
                        attribution.as_ref(),
                        projection,
                        progress,
                        budget,
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
                        return Err(budget_error(
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
    // A run holds every event to the end and releases them at once: the
    // credit rows are then independent of how the work was split.
    let credits = match &mut attribution {
        Some(setup) => {
            setup.absorb(&mut collectors);
            drop(collectors);
            let credits = setup.release(u64::MAX)?;
            // The setup lives on (to save the chains): it must not keep
            // the events' memory.
            assert_eq!(
                (setup.held_events(), setup.held_bytes()),
                (0, 0),
                "a release at u64::MAX applies every held event"
            );
            credits
        }
        None => Vec::new(),
    };
    let credit_summaries = attribute::credit_summaries(plan, stream);
    let credit_shapes: Vec<Shape> = credit_summaries
        .iter()
        .map(|s| shape_of(s))
        .collect::<Result<_>>()?;
    let mut credit_rollups = attribute::credit_rollups(&credit_shapes, limits)?;
    attribute::fold_credits(
        &credits,
        &credit_summaries,
        &credit_shapes,
        &mut credit_rollups,
    )?;
    rollups.extend(credit_rollups);
    summaries.extend(credit_summaries);
    let elapsed_secs = started.elapsed().as_secs_f64();
    if let Some(temp) = &rejects_temp {
        join_rejects(temp, rejects_parts)?;
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
        attribution,
    })
}

/// The total size of the inputs when every one is a plain file (so bytes
/// read can become a percentage), else `None`. A streamed input is not
/// opened here: its bytes are for the worker that reads it.
pub fn plain_bytes(inputs: &[PathBuf]) -> Result<Option<u64>> {
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
