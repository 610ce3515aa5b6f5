//! The one error type of `cardinal-export`.

/// What went wrong writing results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Writing a file or stream failed.
    #[error("{path}: {source}")]
    Io {
        /// The file (or `-` for a stream).
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The column names do not match the rows.
    #[error("{names} column names for rows of {columns} columns")]
    Columns {
        /// Names given.
        names: usize,
        /// Columns in the rows.
        columns: usize,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
