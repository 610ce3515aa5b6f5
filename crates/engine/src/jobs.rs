//! Inputs planned into jobs, and jobs dealt out to workers.
//!
//! A job is a whole file, a newline-aligned (or, for CSV, record-aligned:
//! `cardinal_source::Framing::Csv`, never inside a quoted field) byte range
//! of a plain file of at least [`SPLIT_BYTES_MIN`] (64 MiB), or a range of
//! a Parquet file's row groups (about [`PARQUET_JOBS_PER_THREAD`] jobs a
//! thread, so that workers finishing early find more work). Pipes and FIFOs are never
//! opened to plan a run: the worker opens them once. An input that cannot
//! be split (a compressed file, stdin, a pipe) becomes one job per worker,
//! all sharing one [`SharedInput`] (`shared.rs`).
//!
//! The jobs are dealt out before the workers start, the same way in every
//! run ([`assign_jobs`] says how): each worker's partial rollups, and so
//! the merged answers, are then the same in every run, sketches included
//! (a KLL sketch's compactions depend on the order of its values). Work
//! stolen at run time would make them depend on scheduling.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use cardinal_parse::{CsvConfig, ParquetFile};
use cardinal_route::Format;
use cardinal_source::{Framing, split_file_records};

use crate::parser::Parser;
use crate::shared::SharedInput;

/// Plain files at least this large are split into byte ranges, so that
/// several workers read one file.
pub(crate) const SPLIT_BYTES_MIN: u64 = 64 << 20;

/// [`SPLIT_BYTES_MIN`], or the byte count in the environment variable
/// `CARDINAL_SPLIT_BYTES_MIN` (for tests, which split small files to check
/// that any split reads the same records).
pub(crate) fn split_bytes_min() -> u64 {
    std::env::var("CARDINAL_SPLIT_BYTES_MIN")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(SPLIT_BYTES_MIN)
}

/// Parquet files are split into about this many jobs per thread (whole
/// row groups each), so that workers finishing early find more work.
pub(crate) const PARQUET_JOBS_PER_THREAD: usize = 4;

/// One unit of work: a whole input, a byte range of a plain file, or a
/// range of a Parquet file's row groups.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// Index of the input in the command line: with the byte offset, a
    /// record's position, which attribution orders equal times by.
    pub(crate) input: u32,
    pub(crate) path: Option<PathBuf>,
    pub(crate) range: Option<std::ops::Range<u64>>,
    /// The file's header line, for a range that does not start the file.
    pub(crate) header: Option<Vec<u8>>,
    /// A Parquet file (footer read, columns matched) and the row groups
    /// to read.
    pub(crate) parquet: Option<(Arc<ParquetFile>, std::ops::Range<usize>)>,
    /// A compressed file or stdin that every worker helps read: one job per
    /// worker, all holding the same [`SharedInput`], this one as its
    /// participant `participant` (worker `participant` takes it).
    pub(crate) shared: Option<Arc<SharedInput>>,
    pub(crate) participant: usize,
    /// Bytes to read, about (the file's, the range's or the row groups'
    /// size): what [`assign_jobs`] balances.
    size: u64,
    /// Why none of the input can be read (a Parquet file whose footer is
    /// cut off): the job is one reject, and the run goes on.
    pub(crate) unreadable: Option<String>,
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
pub(crate) fn assign_jobs(jobs: Vec<Job>, threads: usize) -> Vec<Vec<Job>> {
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

/// Splits the inputs into jobs: large plain files into newline-aligned byte
/// ranges (one per thread), Parquet files into ranges of row groups,
/// everything else whole. `reads`: the columns the summaries read.
pub(crate) fn plan_jobs(
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
pub(crate) fn is_streamed(path: &Path) -> Result<bool> {
    if path.as_os_str() == "-" {
        return Ok(true);
    }
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(!metadata.is_file() && !metadata.is_dir())
}

/// Whether `metadata` is a named pipe's (FIFO's).
pub fn is_fifo(metadata: &std::fs::Metadata) -> bool {
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
pub(crate) fn header_fits(path: &Path, stream: &cardinal_route::Stream) -> Result<bool> {
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
pub(crate) fn shared_jobs(
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
pub(crate) fn parquet_input(
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
pub(crate) fn parquet_jobs(file: &ParquetFile, threads: usize) -> Vec<std::ops::Range<usize>> {
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
pub(crate) fn framing_of(stream: &cardinal_route::Stream) -> Framing {
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
