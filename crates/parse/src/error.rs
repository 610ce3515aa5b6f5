//! The one error type of `cardinal-parse`.
//!
//! These are the failures that stop a whole input: a schema the parser
//! cannot map, or a CSV header that does not fit the schema. A malformed
//! *record* is never an error: it becomes a [`Reject`](crate::Reject) in its
//! batch and parsing goes on.

use std::sync::Arc;

/// What stops a parser from reading an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The schema has no columns.
    #[error("the schema has no columns")]
    EmptySchema,
    /// The schema has more columns than a record may have fields.
    #[error("the schema has {columns} columns; at most FIELDS_MAX = {max}")]
    TooManyColumns {
        /// Columns declared.
        columns: usize,
        /// [`FIELDS_MAX`](crate::FIELDS_MAX).
        max: usize,
    },
    /// A delimiter that would be read as a quote or a line end.
    #[error("delimiter {delimiter:?} is not allowed (not '\"', '\\r' or '\\n')")]
    Delimiter {
        /// The delimiter byte, as a char for display.
        delimiter: char,
    },
    /// A JSON column path that is empty, too deep, or collides with
    /// another column's path.
    #[error("column {column:?}: JSON path {path:?} {problem}")]
    Path {
        /// The column's name.
        column: String,
        /// Its path.
        path: Vec<String>,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The header names a column the schema does not declare (and extra
    /// columns are rejected).
    #[error("{input}: header column {name:?} is not in the schema")]
    HeaderUnknownColumn {
        /// The input's name.
        input: Arc<str>,
        /// The header's text for it.
        name: String,
    },
    /// The header lacks a declared column (and missing columns are
    /// rejected).
    #[error("{input}: header has no column {name:?}")]
    HeaderMissingColumn {
        /// The input's name.
        input: Arc<str>,
        /// The declared column's name.
        name: String,
    },
    /// The header names a column twice.
    #[error("{input}: header names column {name:?} twice")]
    HeaderDuplicate {
        /// The input's name.
        input: Arc<str>,
        /// The name.
        name: String,
    },
    /// The header itself is malformed.
    #[error("{input}: malformed header: {reason}")]
    HeaderMalformed {
        /// The input's name.
        input: Arc<str>,
        /// Why.
        reason: crate::RejectReason,
    },
    /// A header was expected but the first chunk does not start the input
    /// (a byte range after the first: read the header with
    /// [`CsvParser::read_header`](crate::CsvParser::read_header) first).
    #[error("{input}: header expected, but parsing starts at byte {offset}")]
    HeaderNotAtStart {
        /// The input's name.
        input: Arc<str>,
        /// Where the chunk starts.
        offset: u64,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
