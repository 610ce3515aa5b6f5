//! Execution: worker threads fold parsed records into rollups.
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

pub mod attribute;
mod batch;
pub mod continuous;
mod feed;
mod fold;
mod jobs;
mod pending;
pub mod progress;
mod shared;
mod worker;

pub use batch::{
    Counts, EngineOptions, Executed, THREADS_MAX, execute, pick_stream, plain_bytes, shape_of,
    threads_default,
};
pub use continuous::{Continuous, ContinuousOptions, Full, View};
pub use fold::AGGREGATES_MAX;
pub use jobs::is_fifo;
