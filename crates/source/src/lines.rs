//! Chunks of whole lines in a reused buffer.
//!
//! A [`LineReader`] reads its input in blocks of about `chunk_bytes` and
//! cuts each block after its last newline; the partial line after it is
//! carried into the next chunk. So a chunk always holds whole lines (the
//! last line of the input may lack its newline), and the carry is the only
//! copy the reader makes: at most one partial line per chunk.
//!
//! ```text
//!   input    |line 1\nline 2\nli|ne 3\nline 4\n|
//!             └── block 1 ──────┘└── block 2 ──┘
//!   chunk 1  |line 1\nline 2\n|            first_line 1, offset 0
//!   carry                     |li|
//!   chunk 2                   |line 3\nline 4\n|   first_line 3, offset 14
//! ```
//!
//! A line with no newline within [`LINE_BYTES_MAX`] bytes is read to its end
//! without being kept, and reported as [`Error::LineTooLong`]; the next call
//! goes on with the line after it.
//!
//! With [`Framing::Csv`] ([`LineReader::with_framing`]) a chunk is cut
//! after its last whole record instead: a newline inside a quoted field
//! does not end a chunk, and the carry is the partial record (see
//! `records.rs`; a chunk without a quote costs one more `memchr`).
//!
//! When the input fails (compressed data cut short or corrupt, trailing
//! bytes that are not another gzip member, a read error), the bytes decoded
//! before the failure are kept: the whole lines among them are handed out
//! as a last chunk, and the next call returns [`Error::Damaged`] with where
//! reading stopped. The partial line at the end has lost its rest, so it
//! is not a record: it is dropped and counted in the error.
//!
//! ```text
//!   decoded  |line 1\nline 2\nli|  <- the decoder fails here
//!   chunk    |line 1\nline 2\n|
//!   error    Damaged { decoded_offset: 16, partial_bytes: 2, .. }
//! ```
//!
//! The chunk's buffer stays initialized past its bytes, and the input is
//! read straight into it: `Read::read_to_end` zeroed the spare capacity of
//! the cleared buffer before every read (one more pass over each chunk,
//! 17.7M of the 28M instructions callgrind counted in `read_chunk` for
//! 200K impression lines, 2026-11-21).

use std::sync::Arc;

use crate::records::{Cut, Framing};
use crate::{
    CHUNK_BYTES_DEFAULT, CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, Error, Input, LINE_BYTES_MAX,
    read_until_error,
};

/// Whole lines of one input, with where they came from. The buffer is
/// reused from chunk to chunk, so steady-state reading does not allocate.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The input's name, for messages. Shared, so tagging a chunk costs a
    /// reference count, not a copy.
    pub input: Arc<str>,
    /// The 1-based number of the first line, or `None` when the reader
    /// started in the middle of a file (a byte range after the first).
    pub first_line: Option<u64>,
    /// The offset of the first byte in the whole (decompressed) input.
    pub offset: u64,
    /// The buffer: the chunk's bytes are `data[..len]`; the rest is
    /// initialized space for the next reads, so reading never zeroes it
    /// again.
    data: Vec<u8>,
    len: usize,
}

impl Default for Chunk {
    fn default() -> Self {
        Self {
            input: Arc::from(""),
            first_line: Some(1),
            offset: 0,
            data: Vec::new(),
            len: 0,
        }
    }
}

impl Chunk {
    /// The lines, newlines included.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// The number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the chunk holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops the bytes, keeping the buffer.
    fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` bytes.
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Appends `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        self.reserve(end);
        self.data[self.len..end].copy_from_slice(bytes);
        self.len = end;
    }

    /// Makes the buffer at least `len` bytes long; only growth is zeroed,
    /// once per buffer.
    fn reserve(&mut self, len: usize) {
        if self.data.len() < len {
            self.data.resize(len, 0);
        }
        debug_assert!(self.len <= self.data.len());
    }

    /// Replaces the contents with `bytes` (a copy into the reused buffer),
    /// for tests and for callers that frame lines themselves.
    ///
    /// # Panics
    ///
    /// If `bytes` is longer than [`LINE_BYTES_MAX`] + [`CHUNK_BYTES_MAX`],
    /// the most a reader ever puts in one chunk (parsers rely on it).
    pub fn set(&mut self, input: &Arc<str>, first_line: Option<u64>, offset: u64, bytes: &[u8]) {
        assert!(
            bytes.len() <= LINE_BYTES_MAX + CHUNK_BYTES_MAX,
            "a chunk holds at most {} bytes",
            LINE_BYTES_MAX + CHUNK_BYTES_MAX
        );
        if !Arc::ptr_eq(&self.input, input) {
            self.input = input.clone();
        }
        self.first_line = first_line;
        self.offset = offset;
        self.clear();
        self.extend_from_slice(bytes);
    }
}

/// Reads an [`Input`] as [`Chunk`]s of whole lines.
#[derive(Debug)]
pub struct LineReader {
    input: Input,
    chunk_bytes: usize,
    /// The partial line after the last chunk's last newline.
    carry: Vec<u8>,
    next_offset: u64,
    next_line: Option<u64>,
    eof: bool,
    /// Why reading stopped before the end of the input (then `eof` is set
    /// too), until the lines before it are handed out.
    failure: Option<std::io::Error>,
    /// The [`Error::Damaged`] to return from the next call, once the
    /// chunk of lines before it is out (boxed: a reader is moved around
    /// in enums, and this is rare).
    damaged: Option<Box<Error>>,
    framing: Framing,
}

impl LineReader {
    /// A reader handing out chunks of about [`CHUNK_BYTES_DEFAULT`] bytes.
    pub fn new(input: Input) -> Self {
        Self::with_chunk_bytes(input, CHUNK_BYTES_DEFAULT)
    }

    /// A reader handing out chunks of about `chunk_bytes` bytes (more when a
    /// single line is longer, up to [`LINE_BYTES_MAX`]).
    ///
    /// # Panics
    ///
    /// If `chunk_bytes` is outside
    /// [`CHUNK_BYTES_MIN`]`..=`[`CHUNK_BYTES_MAX`].
    pub fn with_chunk_bytes(input: Input, chunk_bytes: usize) -> Self {
        assert!(
            chunk_bytes >= CHUNK_BYTES_MIN,
            "chunk_bytes {chunk_bytes} < {CHUNK_BYTES_MIN}"
        );
        assert!(
            chunk_bytes <= CHUNK_BYTES_MAX,
            "chunk_bytes {chunk_bytes} > {CHUNK_BYTES_MAX}"
        );
        Self {
            next_offset: input.offset,
            next_line: input.first_line,
            input,
            chunk_bytes,
            carry: Vec::new(),
            eof: false,
            failure: None,
            damaged: None,
            framing: Framing::Lines,
        }
    }

    /// Cuts chunks where `framing` says records end (by default
    /// [`Framing::Lines`]: at every newline). The input must start at a
    /// record start (byte ranges are cut at record starts for
    /// [`Framing::Csv`] by [`split_file_records`](crate::split_file_records)).
    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// The input's name.
    pub fn input_name(&self) -> &Arc<str> {
        &self.input.name
    }

    /// Fills `chunk` with the next whole lines. `Ok(false)` at the end of
    /// the input (the chunk is then empty).
    ///
    /// An [`Error::LineTooLong`] leaves the chunk empty and is recoverable:
    /// the line was skipped, and the next call reads on. Any other error
    /// ends the input: an [`Error::Damaged`] comes after every whole line
    /// read before it, and later calls return `Ok(false)`.
    pub fn read_chunk(&mut self, chunk: &mut Chunk) -> Result<bool, Error> {
        chunk.clear();
        if !Arc::ptr_eq(&chunk.input, &self.input.name) {
            chunk.input = self.input.name.clone();
        }
        chunk.offset = self.next_offset;
        chunk.first_line = self.next_line;
        if let Some(damaged) = self.damaged.take() {
            debug_assert!(self.eof);
            debug_assert!(self.carry.is_empty());
            return Err(*damaged);
        }
        chunk.extend_from_slice(&self.carry);
        self.carry.clear();
        self.fill(chunk, self.chunk_bytes);
        if let Framing::Csv { .. } = self.framing {
            return self.cut_records(chunk);
        }
        loop {
            let data = chunk.bytes();
            if let Some(source) = self.failure.take() {
                // The whole lines before the failure are this chunk; the
                // partial line after them is dropped with the error.
                let whole = memchr::memrchr(b'\n', data).map_or(0, |last| last + 1);
                self.cut_at_failure(chunk, whole, source)?;
                break;
            }
            match memchr::memrchr(b'\n', data) {
                Some(last) if !self.eof || data.len() - (last + 1) > LINE_BYTES_MAX => {
                    self.carry.extend_from_slice(&data[last + 1..]);
                    chunk.truncate(last + 1);
                    break;
                }
                Some(_) => break,
                None if data.len() > LINE_BYTES_MAX => return Err(self.skip_long_line(chunk)),
                None if self.eof => {
                    if data.is_empty() {
                        return Ok(false);
                    }
                    break;
                }
                // One partial line so far: read on until its newline.
                None => {
                    let target = (data.len() + self.chunk_bytes).min(LINE_BYTES_MAX + 1);
                    self.fill(chunk, target);
                }
            }
        }
        self.hand_out(chunk);
        Ok(true)
    }

    /// [`read_chunk`](Self::read_chunk)'s cut for a framing that reads
    /// quotes: after the last whole record, reading on while the chunk
    /// holds only part of one (the chunk at least doubles each time, so a
    /// record is scanned a bounded number of times).
    fn cut_records(&mut self, chunk: &mut Chunk) -> Result<bool, Error> {
        loop {
            let data = chunk.bytes();
            let input_start = chunk.offset == 0;
            let cut = self.framing.cut(data, input_start);
            if let Some(source) = self.failure.take() {
                // The whole records before the failure are this chunk; the
                // partial record after them is dropped with the error.
                let (Cut::Whole(whole) | Cut::Long(whole)) = cut;
                self.cut_at_failure(chunk, whole, source)?;
                break;
            }
            match cut {
                Cut::Whole(end) if end > 0 && (end == data.len() || !self.eof) => {
                    self.carry.extend_from_slice(&data[end..]);
                    chunk.truncate(end);
                    break;
                }
                Cut::Long(start) if start > 0 => {
                    self.carry.extend_from_slice(&data[start..]);
                    chunk.truncate(start);
                    break;
                }
                // A record that does not end within the limit: it ends with
                // its first line (where the parser resumes after an
                // unterminated quote), unless that line is too long too.
                Cut::Long(_) => match memchr::memchr(b'\n', data) {
                    Some(newline) if newline < LINE_BYTES_MAX => {
                        self.carry.extend_from_slice(&data[newline + 1..]);
                        chunk.truncate(newline + 1);
                        break;
                    }
                    _ => return Err(self.skip_long_line(chunk)),
                },
                // The input's last bytes: whole as far as the parser goes.
                Cut::Whole(_) if self.eof => {
                    if data.is_empty() {
                        return Ok(false);
                    }
                    break;
                }
                // Part of one record so far: read on, up to one byte past
                // the limit (then the cut says `Long`: a record that ends
                // past the limit is never handed out whole).
                Cut::Whole(_) => {
                    debug_assert!(data.len() <= LINE_BYTES_MAX);
                    let target =
                        (data.len() + self.chunk_bytes.max(data.len())).min(LINE_BYTES_MAX + 1);
                    self.fill(chunk, target);
                }
            }
        }
        self.hand_out(chunk);
        Ok(true)
    }

    /// Moves past `chunk`, cut and about to be handed out: the next chunk
    /// starts after it.
    fn hand_out(&mut self, chunk: &Chunk) {
        debug_assert!(!chunk.is_empty());
        debug_assert!(chunk.len() <= LINE_BYTES_MAX + CHUNK_BYTES_MAX);
        self.next_offset += chunk.len() as u64;
        self.next_line = self.next_line.map(|line| line + newlines(chunk.bytes()));
    }

    /// Ends the input at a read failure: `chunk[..whole]` (its whole lines
    /// or records) is handed out, and the partial one after it, which lost
    /// its rest, is dropped and counted in the [`Error::Damaged`] that the
    /// next call returns (this one, when nothing is whole).
    fn cut_at_failure(
        &mut self,
        chunk: &mut Chunk,
        whole: usize,
        source: std::io::Error,
    ) -> Result<(), Error> {
        let decoded_offset = chunk.offset + chunk.len() as u64;
        let damaged = Error::Damaged {
            input: self.input.name.clone(),
            compression: self.input.compression,
            compressed_offset: self.input.stored_offset(decoded_offset),
            decoded_offset,
            partial_bytes: (chunk.len() - whole) as u64,
            source,
        };
        chunk.truncate(whole);
        if chunk.is_empty() {
            return Err(damaged);
        }
        self.damaged = Some(Box::new(damaged));
        Ok(())
    }

    /// Reads until `chunk` holds `target` bytes or the input ends. A
    /// failure ends the input too: the bytes read before it stay in
    /// `chunk`, and the error waits in `self.failure`.
    fn fill(&mut self, chunk: &mut Chunk, target: usize) {
        if self.eof || chunk.len >= target {
            return;
        }
        let want = target - chunk.len;
        chunk.reserve(target);
        let (got, failure) = read_until_error(&mut self.input, &mut chunk.data[chunk.len..target]);
        debug_assert!(got <= want);
        chunk.len += got;
        if got < want || failure.is_some() {
            self.eof = true;
        }
        debug_assert!(self.failure.is_none());
        self.failure = failure;
    }

    /// Discards the line that starts `chunk` (already longer than the limit)
    /// through its newline, and describes it.
    fn skip_long_line(&mut self, chunk: &mut Chunk) -> Error {
        let (line, offset) = (chunk.first_line, chunk.offset);
        let mut skipped = 0u64;
        loop {
            if let Some(newline) = memchr::memchr(b'\n', chunk.bytes()) {
                skipped += newline as u64 + 1;
                self.carry.extend_from_slice(&chunk.bytes()[newline + 1..]);
                break;
            }
            skipped += chunk.len() as u64;
            chunk.clear();
            if self.eof {
                break;
            }
            // A failure while skipping waits for the next call, which
            // finds no line before it.
            self.fill(chunk, self.chunk_bytes);
        }
        chunk.clear();
        let error = Error::LineTooLong {
            input: self.input.name.clone(),
            line,
            offset,
            bytes_max: LINE_BYTES_MAX,
            bytes: skipped,
        };
        self.next_offset = chunk.offset + skipped;
        self.next_line = chunk.first_line.map(|line| line + 1);
        error
    }
}

/// The number of `\n` bytes, once per chunk for the next chunk's first
/// line number: a second pass over bytes the read just left in the cache.
///
/// Each of 32 `u8` lanes counts the newlines at its offset of 32-byte rows,
/// 255 rows at a time (so no lane overflows), which the compiler turns
/// into one compare and one subtract per row. With AVX2 a row is one
/// register; without, two. The first version counted in lanes over
/// 255-byte blocks, which the compiler vectorized 4 bytes at a time:
/// 3.4% of Query 2A's samples, against 1.9% now (2026-11-22).
fn newlines(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { newlines_avx2(bytes) };
    }
    newlines_rows(bytes)
}

/// [`newlines_rows`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn newlines_avx2(bytes: &[u8]) -> u64 {
    newlines_rows(bytes)
}

/// [`newlines`] in 32 lanes, then the last bytes one at a time.
#[inline(always)]
fn newlines_rows(bytes: &[u8]) -> u64 {
    const LANES: usize = 32;
    let mut rows = bytes.chunks_exact(LANES);
    let mut total = 0;
    loop {
        let mut counts = [0u8; LANES];
        let mut taken = 0;
        for row in rows.by_ref().take(usize::from(u8::MAX)) {
            for (count, &b) in counts.iter_mut().zip(row) {
                *count = count.wrapping_add(u8::from(b == b'\n'));
            }
            taken += 1;
        }
        total += counts.iter().map(|&c| u64::from(c)).sum::<u64>();
        if taken < usize::from(u8::MAX) {
            break;
        }
    }
    let tail = rows.remainder().iter().filter(|&&b| b == b'\n').count();
    total + tail as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(text: &[u8], chunk_bytes: usize) -> Vec<(Vec<u8>, Option<u64>, u64)> {
        let input = Input::from_reader("t", text.to_vec().leak() as &[u8]).expect("in memory");
        let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes);
        let mut chunk = Chunk::default();
        let mut out = Vec::new();
        while reader.read_chunk(&mut chunk).expect("no long lines") {
            out.push((chunk.bytes().to_vec(), chunk.first_line, chunk.offset));
        }
        out
    }

    #[test]
    fn chunks_hold_whole_lines() {
        let text = b"line 1\nline 2\nline 3\nline 4\n";
        let got = chunks(text, 16);
        assert_eq!(
            got,
            vec![
                (b"line 1\nline 2\n".to_vec(), Some(1), 0),
                (b"line 3\nline 4\n".to_vec(), Some(3), 14),
            ]
        );
    }

    #[test]
    fn last_line_may_lack_newline() {
        let got = chunks(b"a\nbb\nccc", 16);
        assert_eq!(got, vec![(b"a\nbb\nccc".to_vec(), Some(1), 0)]);
        let got = chunks(b"aaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 16);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].1, Some(2));
        assert_eq!(got[1].2, 20);
    }

    /// On quote-free text CSV framing cuts where line framing cuts, long
    /// lines included (a long line once came out whole, as one chunk, when
    /// the reader read on past the limit looking for its end).
    #[test]
    fn csv_framing_without_quotes_cuts_like_lines() {
        let read = |text: &[u8], framing: Framing| {
            let input =
                Input::from_reader("t", std::io::Cursor::new(text.to_vec())).expect("memory");
            let mut reader = LineReader::with_chunk_bytes(input, 4096).with_framing(framing);
            let mut chunk = Chunk::default();
            let mut out = Vec::new();
            loop {
                match reader.read_chunk(&mut chunk) {
                    Ok(true) => {
                        out.push(Ok((chunk.bytes().to_vec(), chunk.first_line, chunk.offset)))
                    }
                    Ok(false) => break,
                    Err(e) => out.push(Err(e.to_string())),
                }
            }
            out
        };
        let mut text = b"1,a\n2,".to_vec();
        text.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 10));
        text.extend_from_slice(b"\n3,b\n4,");
        text.extend(std::iter::repeat_n(b'y', LINE_BYTES_MAX - 3));
        text.extend_from_slice(b"\n5,c");
        let lines = read(&text, Framing::Lines);
        assert_eq!(lines.iter().filter(|c| c.is_err()).count(), 1);
        assert_eq!(read(&text, Framing::Csv { delimiter: b',' }), lines);
    }

    #[test]
    fn newline_count_vectorizes_correctly() {
        assert_eq!(newlines(b""), 0);
        assert_eq!(newlines(&[b'\n'; 1000]), 1000);
        assert_eq!(newlines(b"a\r\nb\n"), 2);
        assert_eq!(newlines(&[b'\n'; 255 * 3 + 7]), 255 * 3 + 7);
        // Past one round of 255 rows of 32 lanes, and a tail.
        let rows: usize = 32 * 255;
        for len in [rows - 1, rows, rows + 1, 2 * rows + 33, 5 * rows + 31] {
            let bytes: Vec<u8> = (0..len)
                .map(|i| if i % 3 == 0 { b'\n' } else { b'x' })
                .collect();
            assert_eq!(newlines(&bytes), len.div_ceil(3) as u64, "{len} bytes");
            assert_eq!(newlines_rows(&bytes), newlines(&bytes), "{len} bytes");
            assert_eq!(newlines(&vec![b'\n'; len]), len as u64, "{len} newlines");
        }
    }
}
