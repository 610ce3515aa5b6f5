//! One worker: its jobs in order, each read a chunk at a time, parsed into
//! a reused batch and folded ([`fold_chunk`]) into the worker's own partial
//! rollups, one per summary.
//!
//! A chunk of text goes one of three ways, chosen per batch: folded an
//! aggregate at a time from its parsed columns when every summary takes
//! plain columns ([`Fold::fold_by_aggregate`], `fold/by_aggregate.rs`),
//! routed from typed columns when some typed column is read twice
//! ([`columns`](crate::fold::columns)), or record by record through [`Fold::record`]. A Parquet batch ([`read_parquet`]) is routed from its
//! typed slices when they hold no NULLs, record by record otherwise. Every
//! way gives the same states, sketches included, the same drops and the
//! same reject lines (property-tested against the record path). A shared
//! input is read in its turns ([`read_shared`]).
//!
//! An attribution's collector sees a batch's records before they fold (a
//! Parquet batch routed from its columns: each row just before its fold).
//! After each chunk the worker adds what is new to the run's counters (a
//! per-worker [`Tap`](crate::progress::Tap)), never per record.

use std::io::BufWriter;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use cardinal_parse::{Batch, ParquetFile};
use cardinal_rollup::{BytesGauge, Limits, MemoryBudget, Rollup, Shape};
use cardinal_route::{Format, Plan, Summary};
use cardinal_source::LineReader;

use crate::attribute;
use crate::attribute::observe;
use crate::counts::Counts;
use crate::fold::Fold;
use crate::jobs::{Job, framing_of};
use crate::parser::Parser;
use crate::progress::Progress;
use crate::rejects::{LINE_TOO_LONG, where_};
use crate::shared::{SHARED_CHUNKS_PER_TURN, SharedInput, SharedRead};

/// What one worker hands back.
pub(crate) struct WorkerOutput<'p> {
    pub(crate) rollups: Vec<Rollup>,
    /// The bytes of each rollup, as reported to the memory budget.
    pub(crate) gauges: Vec<BytesGauge>,
    pub(crate) counts: Counts,
    pub(crate) collector: Option<attribute::Collector<'p>>,
}

#[expect(
    clippy::too_many_arguments,
    reason = "the worker's whole context, borrowed from run"
)]
pub(crate) fn worker<'p>(
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
                Err(e) if e.is_corrupt() => return Err(corrupt_input(&e)),
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
pub(crate) fn fold_chunk<'p>(
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
pub(crate) type Unparsed = std::iter::Peekable<std::vec::IntoIter<(usize, String, String)>>;

/// Takes the parser's rejects that come before record `through`.
pub(crate) fn unparsed_through(
    unparsed: &mut Unparsed,
    through: usize,
) -> impl Iterator<Item = (usize, String, String)> + '_ {
    std::iter::from_fn(move || unparsed.next_if(|(next, _, _)| *next <= through))
}

/// Writes the parser's rejects that come before record `through`.
#[inline]
pub(crate) fn write_unparsed(fold: &mut Fold<'_>, unparsed: &mut Unparsed, through: usize) {
    // Called per record: most batches have no reject to write.
    if unparsed.peek().is_none() {
        return;
    }
    for (_, reason, text) in unparsed_through(unparsed, through) {
        fold.reject(&reason, &text);
    }
}

/// The run's error for compressed input that a checksum found damaged
/// after its bytes were read: the records decoded from the damaged member
/// were folded and cannot be taken out, so no answer is given (exit
/// non-zero, no output written), whatever `--strict` says. Input cut short
/// is not this: its whole records are kept and one reject says where.
pub(crate) fn corrupt_input(error: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{error}; the records read from that member were counted and cannot be taken back, \
         so the run stops and writes no output (test the file with `gzip -t`; a copy cut \
         before the member reads)"
    )
}

/// The parser's error if `result` failed on a header that does not fit
/// the stream: the input's fault, one reject for it, not the run's end.
pub(crate) fn bad_header(result: &Result<()>) -> Option<&cardinal_parse::Error> {
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
pub(crate) fn read_shared<'p>(
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
                SharedRead::Corrupt(message) => return Err(corrupt_input(&message)),
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
pub(crate) fn read_parquet(
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
