//! The one error type of `cardinal-source`.

use std::sync::Arc;

/// What went wrong reading an input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system or a decompressor failed. Fatal for this input.
    #[error("{input}: {source}")]
    Io {
        /// The input's name (a path or `<stdin>`).
        input: Arc<str>,
        /// The underlying error; corrupt compressed data shows up here too.
        #[source]
        source: std::io::Error,
    },
    /// A line longer than [`LINE_BYTES_MAX`](crate::LINE_BYTES_MAX). Not
    /// fatal: the reader has skipped the line and the next call goes on
    /// with the line after it.
    #[error("{input}:{line}: line longer than {bytes_max} bytes skipped ({bytes} bytes at byte offset {offset})", line = display_line(*.line))]
    LineTooLong {
        /// The input's name.
        input: Arc<str>,
        /// The line's 1-based number, if the reader knows it (a reader of a
        /// byte range that does not start the file does not).
        line: Option<u64>,
        /// The byte offset of the line's first byte in the (decompressed)
        /// input.
        offset: u64,
        /// The limit that was exceeded.
        bytes_max: usize,
        /// The bytes skipped: the line and its newline (up to the end of
        /// the input for a last line without one).
        bytes: u64,
    },
    /// Byte ranges were asked of a compressed file, which cannot be entered
    /// in the middle.
    #[error("{input}: is {compression:?}-compressed and cannot be split into byte ranges")]
    NotSplittable {
        /// The input's name.
        input: Arc<str>,
        /// The compression its first bytes announce.
        compression: crate::Compression,
    },
}

fn display_line(line: Option<u64>) -> String {
    line.map_or_else(|| "?".to_owned(), |l| l.to_string())
}

impl Error {
    /// Whether reading may go on after this error (the ingest loop counts
    /// it and calls again); otherwise the input is finished.
    pub fn is_recoverable(&self) -> bool {
        matches!(self, Error::LineTooLong { .. })
    }

    /// Input bytes this error passed over without handing them on: a
    /// skipped line's ([`Error::LineTooLong`]), none for the others. A
    /// count of bytes read adds them, so that it covers the whole input.
    pub fn skipped_bytes(&self) -> u64 {
        match self {
            Error::LineTooLong { bytes, .. } => *bytes,
            _ => 0,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
