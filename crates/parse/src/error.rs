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
    /// A Parquet file that cannot be read: not Parquet, corrupt, or cut
    /// short (the reader's own message).
    #[error("{input}: Parquet: {message}")]
    Parquet {
        /// The input's name.
        input: Arc<str>,
        /// What the Parquet reader said.
        message: String,
    },
    /// A file that starts as Parquet but whose footer (the schema and where
    /// each row group lies, at the file's end) cannot be read: cut short,
    /// still being written, or damaged. Nothing of it can be located, so
    /// a run takes it as one unreadable input and goes on with the others.
    #[error(
        "{input}: the Parquet footer cannot be read ({message}): the file is cut short, still being written, or damaged"
    )]
    ParquetFooter {
        /// The input's name.
        input: Arc<str>,
        /// What the Parquet reader said.
        message: String,
    },
    /// The Parquet reader gave up on corrupt data by panicking (caught; the
    /// input stops and the reader is not used again).
    #[error("{input}: Parquet: corrupt file: the reader failed with {message:?}")]
    ParquetPanic {
        /// The input's name.
        input: Arc<str>,
        /// The panic's message.
        message: String,
    },
    /// A column a summary reads is not in the Parquet file.
    #[error("{input}: the Parquet file has no column {column:?}")]
    ParquetColumnMissing {
        /// The input's name.
        input: Arc<str>,
        /// The declared column's name.
        column: String,
    },
    /// A Parquet column whose type cannot be read as the declared type.
    #[error(
        "{input}: column {column:?} is {file_type} in the Parquet file, which cannot be read as {declared}"
    )]
    ParquetColumnType {
        /// The input's name.
        input: Arc<str>,
        /// The declared column's name.
        column: String,
        /// The file column's Arrow type.
        file_type: String,
        /// The declared type's SQL name.
        declared: &'static str,
    },
    /// A batch of Parquet rows decoded to more than
    /// [`PARQUET_BATCH_BYTES_MAX`](crate::PARQUET_BATCH_BYTES_MAX) bytes.
    #[error(
        "{input}: the rows from row {row} decode to {bytes} bytes, more than PARQUET_BATCH_BYTES_MAX"
    )]
    ParquetBatchBytesMax {
        /// The input's name.
        input: Arc<str>,
        /// The batch's first row (1-based).
        row: u64,
        /// The bytes its arrays hold.
        bytes: usize,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
