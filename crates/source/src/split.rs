//! Newline-aligned byte ranges of one plain file, one per reader.
//!
//! The file is cut at `len * k / parts` for `k = 1..parts`, and each cut is
//! moved forward to the start of the next line, so every line belongs to
//! exactly one range and no reader needs to look at its neighbour's bytes:
//!
//! ```text
//!   nominal cuts       |         ^         ^         |
//!   file               |aaaa\nbbbbbbbbbb\ncc\ndddd\n|
//!   aligned ranges     |aaaa\nbbbbbbbbbb\n|cc\ndddd\n|
//! ```
//!
//! A cut that lands in a line longer than the gap to the next cut is moved
//! past it, so a range may swallow its neighbour; empty ranges are dropped,
//! and the result may hold fewer than `parts` ranges. Compressed files
//! cannot be entered in the middle and are refused ([`split_file`]).

use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use crate::{
    CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, Chunk, Compression, Error, Framing, Input, LINE_BYTES_MAX,
    LineReader, MAGIC_BYTES_MAX, Result,
};

/// Bytes read per probe while looking for the next newline.
const PROBE_BYTES: usize = 64 << 10;

/// Chunks per part the reader of [`split_file_records`]'s first pass cuts
/// a file with quotes into: range starts fall on chunk starts, so ranges
/// are even to about a sixteenth of a part.
const PASS_CHUNKS_PER_PART: u64 = 16;

/// Cuts `0..len` into at most `parts` newline-aligned ranges that cover it
/// exactly once, in order. `line_start(offset)` must return the first line
/// start at or after `offset` (a position `p` with `p == 0` or a newline at
/// `p - 1`), or `len` if there is none: [`line_start_in`] over bytes in
/// memory, [`line_start_at_or_after`] over a file.
///
/// ```
/// use cardinal_source::{line_start_in, split_ranges};
/// let text = b"aaaa\nbbbbbbbbbb\ncc\ndddd\n";
/// let ranges = split_ranges(text.len() as u64, 2, |at| Ok(line_start_in(text, at))).unwrap();
/// assert_eq!(ranges, vec![0..16, 16..24]);
/// ```
///
/// # Panics
///
/// If `parts` is 0, or `line_start` returns a position outside
/// `offset..=len`.
pub fn split_ranges(
    len: u64,
    parts: usize,
    mut line_start: impl FnMut(u64) -> std::io::Result<u64>,
) -> std::io::Result<Vec<Range<u64>>> {
    assert!(parts > 0, "at least one part");
    let parts = u64::try_from(parts).expect("usize fits u64");
    let mut starts = vec![0u64];
    for k in 1..parts {
        let nominal = u64::try_from(u128::from(len) * u128::from(k) / u128::from(parts))
            .expect("a fraction of len fits u64");
        let start = line_start(nominal)?;
        assert!(start >= nominal, "line start {start} before {nominal}");
        assert!(start <= len, "line start {start} past the end {len}");
        let last = *starts.last().expect("starts with 0");
        if start > last && start < len {
            starts.push(start);
        }
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let ranges: Vec<Range<u64>> = starts
        .iter()
        .zip(starts.iter().skip(1).chain(std::iter::once(&len)))
        .map(|(&start, &end)| start..end)
        .collect();
    debug_assert!(ranges.iter().all(|r| r.start < r.end));
    Ok(ranges)
}

/// The first line start at or after `offset` in `bytes` (`bytes.len()` if
/// none).
pub fn line_start_in(bytes: &[u8], offset: u64) -> u64 {
    let len = bytes.len() as u64;
    if offset == 0 || offset >= len {
        return offset.min(len);
    }
    let from = usize::try_from(offset - 1).expect("below a slice length");
    match memchr::memchr(b'\n', &bytes[from..]) {
        Some(newline) => (from + newline + 1) as u64,
        None => len,
    }
}

/// The first line start at or after `offset` in a file of `len` bytes,
/// read through `file` in small blocks.
pub fn line_start_at_or_after<R: Read + Seek>(
    file: &mut R,
    len: u64,
    offset: u64,
) -> std::io::Result<u64> {
    if offset == 0 || offset >= len {
        return Ok(offset.min(len));
    }
    let mut at = offset - 1;
    file.seek(SeekFrom::Start(at))?;
    let mut block = vec![0u8; PROBE_BYTES];
    loop {
        let got = file.read(&mut block)?;
        if got == 0 {
            return Ok(len);
        }
        if let Some(newline) = memchr::memchr(b'\n', &block[..got]) {
            return Ok((at + newline as u64 + 1).min(len));
        }
        at += got as u64;
    }
}

/// Cuts the plain file at `path` into at most `parts` newline-aligned byte
/// ranges for [`Input::open_range`](crate::Input::open_range). Refuses a
/// compressed file with [`Error::NotSplittable`], and a pipe, FIFO or
/// device (which reading would consume) with [`Error::NotRegularFile`]
/// before reading a byte of it.
pub fn split_file(path: impl AsRef<Path>, parts: usize) -> Result<Vec<Range<u64>>> {
    let path = path.as_ref();
    let name: Arc<str> = path.display().to_string().into();
    let io = |source| Error::Io {
        input: name.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(Error::NotRegularFile { input: name });
    }
    let len = metadata.len();
    let mut magic = [0u8; MAGIC_BYTES_MAX];
    let filled = crate::read_prefix(&mut file, &mut magic).map_err(io)?;
    let compression = Compression::detect(&magic[..filled]);
    if compression != Compression::None {
        return Err(Error::NotSplittable {
            input: name,
            compression,
        });
    }
    split_ranges(len, parts, |offset| {
        line_start_at_or_after(&mut file, len, offset)
    })
    .map_err(io)
}

/// Cuts the plain file at `path` into at most `parts` byte ranges that
/// each start at a record start as `framing` reads records, so that a
/// [`LineReader`] with that framing on each range finds the records one
/// reader of the whole file finds.
///
/// For [`Framing::Csv`], the file is cut at newlines as [`split_file`]
/// cuts it when the [`QUOTE_FREE_BEFORE_BYTES`] before each range start
/// hold no `"` byte: a record is at most [`LINE_BYTES_MAX`] bytes under
/// that framing (a longer one ends at its first newline), so the record
/// that holds the newline before such a start either starts in those
/// quote-free bytes, and ends at their first newline, or is too long and
/// ends at its first newline too: the start is a record start. Only those
/// bytes are read, not the file. Otherwise the file is read through once
/// first with one reader of that framing (a quoted field may hold
/// newlines, and only reading from the start tells which newlines are
/// inside quotes): the ranges start at chunk starts of that reader, which
/// are record starts, and chunks of about a sixteenth of a part keep the
/// ranges about even.
pub fn split_file_records(
    path: impl AsRef<Path>,
    parts: usize,
    framing: Framing,
) -> Result<Vec<Range<u64>>> {
    let path = path.as_ref();
    if framing == Framing::Lines {
        return split_file(path, parts);
    }
    let ranges = split_file(path, parts)?;
    if starts_are_record_starts(path, &ranges)? {
        return Ok(ranges);
    }
    let input = Input::open(path)?;
    if input.compression() != Compression::None {
        return Err(Error::NotSplittable {
            input: input.name().clone(),
            compression: input.compression(),
        });
    }
    let len = std::fs::metadata(path)
        .map_err(|source| Error::Io {
            input: input.name().clone(),
            source,
        })?
        .len();
    let parts_count = u64::try_from(parts).expect("usize fits u64").max(1);
    let chunk_bytes = usize::try_from(len / (parts_count * PASS_CHUNKS_PER_PART))
        .unwrap_or(CHUNK_BYTES_MAX)
        .clamp(CHUNK_BYTES_MIN, CHUNK_BYTES_MAX);
    let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes).with_framing(framing);
    let mut chunk = Chunk::default();
    let mut starts = Vec::new();
    loop {
        match reader.read_chunk(&mut chunk) {
            Ok(true) => starts.push(chunk.offset),
            Ok(false) => break,
            Err(e) if e.is_recoverable() => {}
            Err(e) => return Err(e),
        }
    }
    let ranges = split_ranges(len, parts, |offset| {
        let at = starts.partition_point(|&start| start < offset);
        Ok(starts.get(at).copied().unwrap_or(len))
    })
    .expect("starts are in memory");
    Ok(ranges)
}

/// Bytes before a line start that, holding no `"`, make it a record start
/// under [`Framing::Csv`] (see [`split_file_records`]): more than a record
/// can hold, with room for the newline before the start.
pub const QUOTE_FREE_BEFORE_BYTES: u64 = 2 * LINE_BYTES_MAX as u64 + 2;

/// Whether every range after the first starts at a record start, as far as
/// the [`QUOTE_FREE_BEFORE_BYTES`] before it tell: `false` when a `"` is
/// among them (the start may then be inside a quoted field).
fn starts_are_record_starts(path: &Path, ranges: &[Range<u64>]) -> Result<bool> {
    let name: Arc<str> = path.display().to_string().into();
    let io = |source| Error::Io {
        input: name.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut block = Vec::new();
    for range in ranges.iter().skip(1) {
        let from = range.start.saturating_sub(QUOTE_FREE_BEFORE_BYTES);
        let bytes = usize::try_from(range.start - from).expect("a window fits usize");
        block.resize(bytes, 0);
        file.seek(SeekFrom::Start(from)).map_err(io)?;
        file.read_exact(&mut block).map_err(io)?;
        if memchr::memchr(b'"', &block).is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_starts() {
        let text = b"ab\ncd\n";
        let starts: Vec<u64> = (0..=7).map(|o| line_start_in(text, o)).collect();
        assert_eq!(starts, vec![0, 3, 3, 3, 6, 6, 6, 6]);
        let mut cursor = std::io::Cursor::new(&text[..]);
        for offset in 0..=7 {
            assert_eq!(
                line_start_at_or_after(&mut cursor, 6, offset).expect("in memory"),
                line_start_in(text, offset)
            );
        }
    }

    #[test]
    fn long_lines_swallow_cuts() {
        let text = b"a very long first line\nb\n";
        let ranges =
            split_ranges(text.len() as u64, 8, |o| Ok(line_start_in(text, o))).expect("ok");
        assert_eq!(ranges, vec![0..23, 23..25]);
        assert!(split_ranges(0, 4, Ok).expect("ok").is_empty());
    }
}
