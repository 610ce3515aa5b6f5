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
    /// A name cannot be a file name under the output directory (see
    /// [`crate::join_under`]).
    #[error("cannot write a file named \"{name}\": {reason}")]
    Name {
        /// The name, escaped for printing.
        name: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// Another run holds the output directory's lock.
    #[error("{path}: another run is writing this output directory")]
    Locked {
        /// The directory.
        path: String,
    },
    /// The column names do not match the rows.
    #[error("{names} column names for rows of {columns} columns")]
    Columns {
        /// Names given.
        names: usize,
        /// Columns in the rows.
        columns: usize,
    },
    /// A row's bucket is outside the years a day file can be named after
    /// ([`cardinal_event::Timestamp::MIN`]..=[`cardinal_event::Timestamp::MAX`]),
    /// which no parsed time has.
    #[error("bucket {bucket} is outside the years 0001 to 9999: no day file is named after it")]
    BucketOutOfRange {
        /// The bucket, in ISO 8601's expanded form.
        bucket: String,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
