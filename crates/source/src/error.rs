//! The one error type of `cardinal-source`.

use std::sync::Arc;

/// What went wrong reading an input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input could not be opened, or its first bytes read. Fatal for
    /// this input (failures later on are [`Error::Damaged`]).
    #[error("{input}: {source}")]
    Io {
        /// The input's name (a path or `<stdin>`).
        input: Arc<str>,
        /// The underlying error.
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
    /// The input could not be read past a point: compressed data cut
    /// short, corrupt, or followed by bytes that are not another member or
    /// frame, or a read error. Fatal for this input, but every whole line
    /// before the point was handed out first; the partial line it cut is
    /// dropped with it.
    #[error("{input}: {source} at {at}{partial}", at = display_at(*.compression, *.compressed_offset, *.decoded_offset), partial = display_partial(*.compression, *.decoded_offset, *.partial_bytes))]
    Damaged {
        /// The input's name.
        input: Arc<str>,
        /// The compression its first bytes announce.
        compression: crate::Compression,
        /// How far into the input as stored (compressed) the decoder had
        /// read when it failed: the same as `decoded_offset` for plain
        /// bytes.
        compressed_offset: u64,
        /// The decoded bytes read before the failure: the offset, in the
        /// decompressed input, where reading stopped.
        decoded_offset: u64,
        /// The bytes of the partial last line before `decoded_offset`,
        /// dropped (the line has no end, so it is not a record).
        partial_bytes: u64,
        /// The decoder's or the operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Byte ranges were asked of a pipe, FIFO or device, which can only be
    /// read once, from its first byte ([`Input::open`](crate::Input::open)
    /// streams it whole).
    #[error("{input}: is not a regular file and cannot be split into byte ranges")]
    NotRegularFile {
        /// The input's name.
        input: Arc<str>,
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

fn display_at(compression: crate::Compression, compressed: u64, decoded: u64) -> String {
    if compression == crate::Compression::None {
        format!("byte {decoded}")
    } else {
        format!("compressed byte {compressed} (decoded byte {decoded})")
    }
}

fn display_partial(compression: crate::Compression, decoded: u64, partial: u64) -> String {
    let start = decoded.saturating_sub(partial);
    match (partial, compression) {
        (0, _) => String::new(),
        (_, crate::Compression::None) => {
            format!("; the partial line at byte {start} ({partial} bytes) is dropped")
        }
        _ => format!("; the partial line at decoded byte {start} ({partial} bytes) is dropped"),
    }
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

    /// Whether this is damage found by a checksum after the bytes it
    /// covers were handed out (a gzip member failing its CRC-32 or its
    /// deflate stream): the records read from that member are not to be
    /// trusted, unlike those before input cut short, which are whole.
    pub fn is_corrupt(&self) -> bool {
        match self {
            Error::Damaged { source, .. } => source
                .get_ref()
                .is_some_and(|inner| inner.is::<crate::compression::Corrupt>()),
            _ => false,
        }
    }

    /// Input bytes this error passed over without handing them on: a
    /// skipped line's ([`Error::LineTooLong`]), a partial line's dropped at
    /// damage ([`Error::Damaged`]), none for the others. A
    /// count of bytes read adds them, so that it covers the whole input.
    pub fn skipped_bytes(&self) -> u64 {
        match self {
            Error::LineTooLong { bytes, .. } => *bytes,
            Error::Damaged { partial_bytes, .. } => *partial_bytes,
            _ => 0,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
