//! Bytes in: the first stage of cardinal's data path.
//!
//! `sources -> decode -> route -> summarize`: this crate turns files and
//! stdin into [`Chunk`]s of whole lines that `cardinal-parse` decodes.
//!
//! - [`Input`] opens a file, stdin or any reader, detects compression by
//!   magic bytes ([`Compression`]: gzip, zstd, lz4 frame, snappy framed) and
//!   decompresses as a stream. It opens a file once and reads it from its
//!   first byte, so a pipe or FIFO reads whole, as stdin does.
//! - [`LineReader`] fills a reused [`Chunk`] with whole lines: about
//!   [`CHUNK_BYTES_DEFAULT`] bytes, tagged with the input's name, the number
//!   of the first line and the byte offset of the first byte, so a parser
//!   can report a bad record as `file:line`. A line longer than
//!   [`LINE_BYTES_MAX`] is skipped and reported as a recoverable
//!   [`Error::LineTooLong`].
//!   When an input cannot be read on (compressed data cut short, corrupt
//!   or followed by junk, a read error), every whole line decoded before
//!   the damage is handed out first, then [`Error::Damaged`] says where
//!   reading stopped, in compressed and decoded bytes.
//! - [`split_ranges`] cuts a plain file into newline-aligned byte ranges so
//!   that several readers each read their own ([`Input::open_range`]);
//!   [`split_file_records`] cuts delimited text only between records
//!   ([`Framing::Csv`]: never inside a quoted field).
//!
//! The crate is synchronous and owns no threads: the binary runs one reader
//! per core.
//!
//! ```
//! use cardinal_source::{Chunk, Input, LineReader};
//!
//! let input = Input::from_reader("<example>", &b"a,1\nb,2\nc,3\n"[..])?;
//! let mut reader = LineReader::new(input);
//! let mut chunk = Chunk::default();
//! assert!(reader.read_chunk(&mut chunk)?);
//! assert_eq!(chunk.bytes(), b"a,1\nb,2\nc,3\n");
//! assert_eq!((&*chunk.input, chunk.first_line, chunk.offset), ("<example>", Some(1), 0));
//! assert!(!reader.read_chunk(&mut chunk)?);
//! # Ok::<(), cardinal_source::Error>(())
//! ```

#![deny(missing_docs)]

mod compression;
mod error;
mod lines;
mod records;
mod split;

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use compression::{Compression, MAGIC_BYTES_MAX};
pub use error::{Error, Result};
pub use lines::{Chunk, LineReader};
pub use records::Framing;
pub use split::{
    QUOTE_FREE_BEFORE_BYTES, line_start_at_or_after, line_start_in, split_file, split_file_records,
    split_ranges,
};

/// The longest line a reader hands out, newline included: 1 MiB. Real event
/// lines are a few hundred bytes (uservisits rows ~170 B, impression JSON
/// ~180 B); anything near this is a missing newline or binary garbage, and
/// holding it would grow every buffer on the path. A longer line is skipped
/// and reported as [`Error::LineTooLong`]; reading goes on after it.
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// The chunk size a [`LineReader`] aims for: 256 KiB, big enough that the
/// per-chunk work (a read call, one reject list, one batch hand-off) is
/// noise, small enough that a chunk and its parsed spans stay in L2 on the
/// machines we measure. 512 KiB took 3-4% more CPU time for W1 and Query
/// 2A text with one worker; 128 and 64 KiB no less than 256
/// (bench/JOURNAL.md, 2026-11-22).
pub const CHUNK_BYTES_DEFAULT: usize = 256 << 10;

/// The smallest chunk size a reader accepts (tests use tiny chunks to hit
/// every boundary; below this the per-chunk cost dominates).
pub const CHUNK_BYTES_MIN: usize = 16;

/// The largest chunk size a reader accepts: [`LINE_BYTES_MAX`], so that
/// every line inside a chunk is within the line limit and chunk offsets fit
/// the 32-bit spans of `cardinal-parse` with room to spare.
pub const CHUNK_BYTES_MAX: usize = LINE_BYTES_MAX;

const _: () = assert!(CHUNK_BYTES_MIN <= CHUNK_BYTES_DEFAULT);
const _: () = assert!(CHUNK_BYTES_DEFAULT <= CHUNK_BYTES_MAX);
const _: () = assert!(2 * LINE_BYTES_MAX < (1 << 31));

/// The most decoded bytes one read asks of a decompressor: 16 KiB. The
/// gzip and zstd decoders drop what they decoded in the call that meets
/// damage (flate2's and zstd's readers return the error, not the bytes),
/// so a read's size is what damage in the middle of a stream can cost of
/// the good bytes before it; a cut stream (the usual damage: a file still
/// being written) costs nothing, as its decoders fail in a call of their
/// own. The cost is a decoder call per 16 KiB: a 121 MB CSV through a
/// [`LineReader`] (dev profile, dependencies at opt-level 2, two shared
/// cores at load 13, best of 5, 2026-11-27) took gzip 578 ms uncapped
/// against 584-634 capped, zstd 472 against 419-446, lz4 605 against
/// 537-596: within the noise.
pub const DECODE_READ_BYTES_MAX: usize = 16 << 10;

const _: () = assert!(DECODE_READ_BYTES_MAX >= CHUNK_BYTES_MIN);

/// The name stdin goes by in messages.
pub const STDIN_NAME: &str = "<stdin>";

/// An open input: a name for messages and a reader of its decompressed
/// bytes.
pub struct Input {
    name: Arc<str>,
    compression: Compression,
    reader: Box<dyn Read + Send>,
    /// Offset of the first byte in the whole (decompressed) input.
    offset: u64,
    /// The 1-based number of the first line, when known.
    first_line: Option<u64>,
    /// Compressed bytes the decoder has taken so far (0 for plain bytes),
    /// for the offset of damage.
    consumed: Arc<AtomicU64>,
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("name", &self.name)
            .field("compression", &self.compression)
            .field("offset", &self.offset)
            .field("first_line", &self.first_line)
            .finish_non_exhaustive()
    }
}

impl Input {
    /// Opens a file, detecting its compression from its first bytes. The
    /// file is opened once and read as a stream from its first byte: the
    /// bytes looked at for compression are handed on, not read again, so a
    /// pipe or FIFO (which cannot be read twice) reads whole, as stdin does.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let name: Arc<str> = path.display().to_string().into();
        let file = std::fs::File::open(path).map_err(|source| Error::Io {
            input: name.clone(),
            source,
        })?;
        Self::from_reader(name, file)
    }

    /// Reads stdin, detecting its compression from its first bytes.
    pub fn stdin() -> Result<Self> {
        Self::from_reader(STDIN_NAME, std::io::stdin())
    }

    /// Reads any byte stream called `name`, detecting its compression from
    /// its first bytes. The reader is read in large blocks, so it needs no
    /// buffering of its own.
    pub fn from_reader(
        name: impl Into<Arc<str>>,
        mut reader: impl Read + Send + 'static,
    ) -> Result<Self> {
        let name = name.into();
        let io = |source| Error::Io {
            input: name.clone(),
            source,
        };
        let mut magic = [0u8; MAGIC_BYTES_MAX];
        let filled = read_prefix(&mut reader, &mut magic).map_err(io)?;
        let prefix = std::io::Cursor::new(magic).take(filled as u64);
        let compression = Compression::detect(&magic[..filled]);
        let consumed = Arc::new(AtomicU64::new(0));
        let reader = compression
            .decoder(prefix.chain(reader), consumed.clone())
            .map_err(io)?;
        Ok(Self {
            name,
            compression,
            reader,
            offset: 0,
            first_line: Some(1),
            consumed,
        })
    }

    /// Reads `reader` as plain bytes, whatever its first bytes look like:
    /// no compression is detected (a batch that came over the network is
    /// records, never an archive to unpack). Chunks carry byte offsets,
    /// not line numbers (`first_line: None`), as a caller's own chunks do.
    pub fn plain(name: impl Into<Arc<str>>, reader: impl Read + Send + 'static) -> Self {
        Self {
            name: name.into(),
            compression: Compression::None,
            reader: Box::new(reader),
            offset: 0,
            first_line: None,
            consumed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Opens the byte range `range` of an uncompressed file, as cut by
    /// [`split_file`]. Line numbers are unknown unless the range starts the
    /// file (chunks then carry `first_line: None` and their byte offsets
    /// locate records instead). A pipe, FIFO or device is refused with
    /// [`Error::NotRegularFile`] before any of it is read.
    pub fn open_range(path: impl AsRef<Path>, range: Range<u64>) -> Result<Self> {
        assert!(range.start <= range.end, "range {range:?} is reversed");
        let path = path.as_ref();
        let name: Arc<str> = path.display().to_string().into();
        let io = |source| Error::Io {
            input: name.clone(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(Error::NotRegularFile { input: name });
        }
        let mut magic = [0u8; MAGIC_BYTES_MAX];
        let filled = read_prefix(&mut file, &mut magic).map_err(io)?;
        let compression = Compression::detect(&magic[..filled]);
        if compression != Compression::None {
            return Err(Error::NotSplittable {
                input: name,
                compression,
            });
        }
        file.seek(SeekFrom::Start(range.start)).map_err(io)?;
        Ok(Self {
            name,
            compression,
            reader: Box::new(file.take(range.end - range.start)),
            offset: range.start,
            first_line: (range.start == 0).then_some(1),
            consumed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The name messages use: the path as given, or `<stdin>`.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The compression detected.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// How far into the stored input reading has got, given `decoded`,
    /// the offset reached in the decoded input: the compressed bytes the
    /// decoder has taken, or `decoded` itself for plain bytes.
    fn stored_offset(&self, decoded: u64) -> u64 {
        if self.compression == Compression::None {
            decoded
        } else {
            self.consumed.load(Ordering::Relaxed)
        }
    }
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.compression == Compression::None {
            return self.reader.read(buf);
        }
        let len = buf.len().min(DECODE_READ_BYTES_MAX);
        let got = self.reader.read(&mut buf[..len])?;
        debug_assert!(got <= len);
        Ok(got)
    }
}

/// Reads up to `buf.len()` bytes, fewer only at end of input.
fn read_prefix(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    match read_until_error(reader, buf) {
        (filled, None) => Ok(filled),
        (_, Some(e)) => Err(e),
    }
}

/// Reads up to `buf.len()` bytes, fewer only at the end of the input or at
/// an error: the bytes read, and the error that stopped the reading (a
/// reader of damaged input keeps the bytes before it).
fn read_until_error(reader: &mut impl Read, buf: &mut [u8]) -> (usize, Option<std::io::Error>) {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (filled, Some(e)),
        }
    }
    (filled, None)
}
