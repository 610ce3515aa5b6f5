//! Execution: the batch [`execute`] and the [`Continuous`] engine
//! ([`continuous`]), the worker threads they run on and the bounded queues
//! that feed them. A plan and its inputs go in; merged rollups, counts and
//! time come out ([`Executed`], [`EngineOptions`], [`Counts`]). `cardinal
//! run` prints and writes what [`execute`] returns, `cardinal demo` runs the
//! very same code over generated events and compares, and the server will
//! feed [`Continuous`] the same way.
//!
//! | module | what it holds |
//! |---|---|
//! | `batch` | [`execute`]: jobs planned, workers started, partials merged in worker order |
//! | [`continuous`] | a long-running engine fed through bounded queues, read at batch boundaries |
//! | `queue` | the bounded queue that feeds a continuous engine's worker, waking its producer at half |
//! | `jobs` | inputs planned into jobs, dealt out to the workers before they start |
//! | `shared` | inputs that cannot be split (compressed, stdin), read by workers in turns |
//! | `worker` | one worker: its jobs in order, a chunk at a time, parsed and folded |
//! | `parser` | the text parser of a stream's format (delimited text, JSON lines) |
//! | `fold` | the fold path: a lane per summary, the prefetch ring, batches folded by column |
//! | `feed` | how a routed record becomes aggregate updates |
//! | `pending` | a large summary's routes held per rollup part, folded a part at a time |
//! | [`attribute`] | `CREATE ATTRIBUTION`: per-user chains, events released by an event-time frontier, conversions credited by model |
//! | [`progress`] | counters the workers add to once per chunk, for a progress line or metrics |
//! | [`query`] | live answers: a rollup narrowed to a time range, filtered and rolled up on its dimensions, printed as `run` prints; two groups' overlap |
//! | `plan` | what the engine reads off a plan: the inputs' stream, each summary's rollup shape |
//! | `counts` | [`Counts`]: records, bytes and rejects by reason |
//! | `rejects` | the engine's reject reasons, their codes, where a rejected record is |
//! | `error` | the typed [`Error`] of live answers, and the errors of the run's limits |
//!
//! The modules are layered: each uses only modules of lower layers, so
//! the graph of which uses which has no cycle (`tests/layers.rs` reads
//! it off the sources), and each names what it imports (no glob imports:
//! clippy's `wildcard_imports` warns). A module's files in its directory
//! (`fold/`, `attribute/`) are parts of it; test modules may use any
//! module.
//!
//! ```text
//!  layer  module      uses (of this crate)
//!  6      batch       worker, jobs, attribute, plan, progress, counts, error
//!  6      continuous  worker, jobs, fold, attribute, queue, parser, plan,
//!                     progress, rejects, counts, error
//!  5      worker      jobs, shared, fold, attribute, parser, progress,
//!                     rejects, counts
//!  4      jobs        shared, parser
//!  3      shared      fold
//!  2      fold        attribute, feed, pending, plan, progress, rejects,
//!                     counts, error
//!  1      attribute   feed, rejects
//!  1      pending     plan
//!  1      progress    counts
//!  1      query       error
//!  0      counts, error, feed, parser, plan, queue, rejects: nothing
//! ```
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
//! which they decode in a fixed rotation, and three counters they add to
//! once per chunk ([`progress`]). Rejected records (malformed lines, fields
//! that are not their declared type) are counted by reason, reported with
//! input, line and column, and written to the rejects file; the rest of
//! their batch goes on.
//!
//! A record is routed through every summary before it is folded into any:
//! if one summary rejects it (a field that is not its type, an overflow),
//! no summary counts it, so all summaries of a run describe the same
//! records.
//!
//! A run's answers are the same in every run with the same inputs and
//! thread count, sketches included: the jobs are dealt out before the
//! workers start (`jobs.rs`), each worker's KLL sketches flip coins of a
//! stream named by the worker, KLL merges flip the merged-into sketch's,
//! and the partials merge in worker order. Exact aggregates and
//! HyperLogLogs are also the same for any thread count.
//!
//! The engine owns its threads (one worker per core by default, at most
//! [`THREADS_MAX`]); besides it, only the server, the binary (its signal
//! and progress-line threads) and the chains' prefault thread start any.
//! With glibc, the binary's `main` keeps freed memory for reuse rather
//! than handing it back to the kernel to zero and fault in again
//! (`keep_freed_memory` in `crates/cli`).
//!
//! Where to start reading: `batch.rs` for a run from end to end, then
//! `worker.rs` and `fold.rs` for the hot path. Each module's doc says how
//! it works and why; the measurements behind its thresholds are told in
//! bench/JOURNAL.md, under the section names it gives.

pub mod attribute;
mod batch;
pub mod continuous;
mod counts;
mod error;
mod feed;
mod fold;
mod jobs;
mod parser;
mod pending;
mod plan;
pub mod progress;
pub mod query;
mod queue;
mod rejects;
mod shared;
pub mod sql;
mod worker;

pub use batch::{EngineOptions, Executed, THREADS_MAX, execute, plain_bytes, threads_default};
pub use continuous::{
    Continuous, ContinuousOptions, EngineSeq, FAILPOINT_FOLD_PANIC, HEADER_LINE_BYTES_MAX, Outcome,
    Receipt, Records, SubmitError, SummaryStats, View, check_images, split_header,
};
pub use counts::Counts;
pub use error::Error;
pub use jobs::is_fifo;
pub use plan::{AGGREGATES_MAX, pick_stream, shape_of};
pub use query::{
    Answer, Buckets, Query, Selector, answer, hll_aggregates, overlap, overlap_of, overlap_query,
    results_of, results_of_groups,
};
pub use rejects::{REJECT_CODES, reject_code};
pub use sql::{Prepared, SQL_GROUPS_SCANNED_MAX, SQL_ROWS_MAX, SqlAnswer};
