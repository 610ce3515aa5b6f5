//! The typed errors of `cardinal-engine`: what a caller matches on to
//! answer a bad request (an HTTP 400 with the message) rather than fail.
//! Running the engine itself reports I/O and input trouble through
//! `anyhow`, printed, not matched.

use cardinal_event::Timestamp;

/// Why a live answer ([`crate::query`]) could not be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No summary is called `name`.
    #[error("unknown summary {name} (the schema has {known})")]
    UnknownSummary {
        /// The name asked for.
        name: String,
        /// The summaries there are, comma-separated.
        known: String,
    },
    /// A query names a summary other than the one it was given with.
    #[error("the query is over summary {asked}, and the rollup given is summary {given}'s")]
    WrongSummary {
        /// The query's summary.
        asked: String,
        /// The summary given.
        given: String,
    },
    /// `by` names something that is not one of the summary's dimensions.
    #[error("unknown dimension {name} of summary {summary} (it has {known})")]
    UnknownDimension {
        /// The name asked for.
        name: String,
        /// The summary.
        summary: String,
        /// Its dimensions, comma-separated.
        known: String,
    },
    /// `by` names a dimension twice.
    #[error("dimension {name} is named twice in by")]
    DuplicateDimension {
        /// The dimension.
        name: String,
    },
    /// The condition does not compile: the dialect's error, with the line,
    /// column and caret in the condition's text.
    #[error("where: {source}")]
    Condition {
        /// The compiler's error.
        #[source]
        source: cardinal_route::Error,
    },
    /// The condition is longer than
    /// [`WHERE_BYTES_MAX`](crate::query::WHERE_BYTES_MAX).
    #[error("where is {bytes} bytes long; the limit is {max} bytes")]
    ConditionTooLong {
        /// Its length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The condition could not be evaluated over a group's dimensions
    /// (integer overflow or division by zero in its arithmetic).
    #[error("where cannot be evaluated over a group of summary {summary}: {source}")]
    Evaluate {
        /// The summary.
        summary: String,
        /// What went wrong.
        #[source]
        source: cardinal_route::EvalError,
    },
    /// A time range was asked of a summary without a time bucket.
    #[error("summary {summary} has no time bucket, so from and to cannot select its groups")]
    NoTimeBucket {
        /// The summary.
        summary: String,
    },
    /// `from` is not before `to`.
    #[error("the range from {from} to {to} is empty: from must be before to")]
    EmptyRange {
        /// The start asked for.
        from: Timestamp,
        /// The end asked for.
        to: Timestamp,
    },
    /// No aggregate of the summary is called `name`.
    #[error("unknown aggregate {name} of summary {summary} (it has {known})")]
    UnknownAggregate {
        /// The name asked for.
        name: String,
        /// The summary.
        summary: String,
        /// Its aggregates, comma-separated.
        known: String,
    },
    /// An overlap was asked of an aggregate that is not a HyperLogLog.
    #[error(
        "aggregate {name} of summary {summary} is not hll(...): overlaps are estimated from HyperLogLogs"
    )]
    NotHll {
        /// The aggregate.
        name: String,
        /// The summary.
        summary: String,
    },
    /// The answer would hold more groups than the rollup's group limit.
    #[error("the answer has more than {groups_max} groups (the summary's group limit)")]
    GroupLimit {
        /// The limit.
        groups_max: u64,
    },
    /// Merging two groups' states failed (a broken invariant: states of
    /// one summary always merge).
    #[error("merging groups: {0}")]
    Merge(#[from] cardinal_rollup::Error),
    /// The joint estimator refused the two sketches.
    #[error("overlap: {0}")]
    Sketch(#[from] cardinal_sketch::Error),
    /// A SQL query does not parse or compile: the message, with the line,
    /// column and caret in the query's text.
    #[error("{source}")]
    Sql {
        /// The parser's or compiler's error.
        #[source]
        source: cardinal_route::Error,
    },
    /// A SQL query could not be evaluated (integer overflow, division by
    /// zero).
    #[error("the query cannot be evaluated over summary {summary}: {source}")]
    SqlEvaluate {
        /// The summary.
        summary: String,
        /// What went wrong.
        #[source]
        source: cardinal_route::EvalError,
    },
    /// A SQL query's WHERE keeps more stored groups than one query may
    /// merge ([`crate::sql::SQL_GROUPS_SCANNED_MAX`]).
    #[error(
        "the query would merge more than {max} stored groups of summary {summary}; narrow its time range or condition"
    )]
    ScanLimit {
        /// The summary.
        summary: String,
        /// The limit.
        max: usize,
    },
    /// A summary's shape could not be made (a broken invariant: the
    /// server compiled it).
    #[error("{0}")]
    Plan(String),
    /// The rows could not be laid out or written.
    #[error(transparent)]
    Export(#[from] cardinal_export::Error),
}

/// The error of a summary whose answer has more groups than
/// `--groups-max`: the same whether one worker's partial or the merge of
/// all of them found it, so that a run fails alike on any thread count.
pub(crate) fn group_limit_error(summary: &str, groups_max: u64) -> anyhow::Error {
    anyhow::anyhow!(
        "summary {summary} has more than {groups_max} groups (--groups-max); \
         nothing was written: raise the limit or group by fewer values"
    )
}

/// `bytes` in MiB, for messages.
fn mib(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a message")]
    let mib = bytes as f64 / f64::from(1 << 20);
    format!("{mib:.1} MiB")
}

/// The error of a run whose rollups reached `--memory-max`, naming the
/// summary that holds the most.
pub(crate) fn budget_error(
    summary: &str,
    bytes: u64,
    groups: usize,
    bytes_max: u64,
) -> anyhow::Error {
    anyhow::anyhow!(
        "the rollups reached --memory-max ({}): summary {summary} holds {} in {groups} groups; \
         nothing was written: raise --memory-max, or group {summary} by fewer values",
        mib(bytes_max),
        mib(bytes)
    )
}
