//! Compression detected by magic bytes, and the streaming decoders.
//!
//! | format | magic (hex) | reference |
//! |---|---|---|
//! | gzip | `1f 8b` | RFC 1952 §2.3.1 (members may be concatenated, as `pigz` and `cat a.gz b.gz` make) |
//! | zstd | `28 b5 2f fd` | RFC 8878 §3.1.1 (frames may be concatenated) |
//! | lz4 frame | `04 22 4d 18` | LZ4 Frame Format 1.6.x, "Magic Number" |
//! | snappy framed | `ff 06 00 00 73 4e 61 50 70 59` | Snappy framing format, "Stream identifier" |
//!
//! Bytes after the last member or frame that do not start another (a log
//! file's trailing junk, zero padding) are damage, as in the middle: `gzip
//! -dc` decodes the members before them and warns "trailing garbage
//! ignored"; we hand out every line decoded before them and end the input
//! with [`Error::Damaged`](crate::Error::Damaged), one reject naming where.
//!
//! Damage a checksum finds after its bytes were handed out is told apart
//! ([`crate::Error::is_corrupt`]): deflate has no checksum of its own, so
//! a flipped byte inside a gzip member decodes to wrong bytes until the
//! member's CRC-32 fails at its end. A run cannot take those rows back,
//! so it stops without output; a cut stream or trailing junk ends the
//! input after whole, checked rows. (zstd and lz4 frames checksum their
//! content at the frame's end too; their decoders' errors are not yet
//! told apart, and count as a cut.)
//!
//! Anything else is read as plain bytes. Magic numbers are never valid
//! text in our inputs: gzip and snappy start with bytes above 0x7f, zstd's
//! and lz4's with control bytes, so plain CSV or JSON is never taken for a
//! compressed stream.
//!
//! A decoder reads its compressed bytes through a [`Consumed`] count, so
//! that when decoding fails (the data is cut short, corrupt, or followed
//! by bytes that are not another member or frame) the error can say how
//! far into the compressed input the decoder got. gzip and zstd read
//! through a buffer and report what they consume of it; lz4 and snappy
//! read exactly the frame pieces they decode. The count is of bytes taken
//! by the decoder, so it is the end of the last piece it looked at, at
//! most one block (lz4: 4 MiB, snappy: 64 KiB) past the damage.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The most leading bytes [`Compression::detect`] looks at.
pub const MAGIC_BYTES_MAX: usize = 10;

const GZIP: &[u8] = &[0x1f, 0x8b];
const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
const LZ4_FRAME: &[u8] = &[0x04, 0x22, 0x4d, 0x18];
const SNAPPY_FRAMED: &[u8] = b"\xff\x06\x00\x00sNaPpY";

const _: () = assert!(SNAPPY_FRAMED.len() == MAGIC_BYTES_MAX);

/// How an input's bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// Plain bytes.
    None,
    /// gzip (DEFLATE), one or more members.
    Gzip,
    /// Zstandard, one or more frames.
    Zstd,
    /// LZ4 frame format (not the raw block format).
    Lz4,
    /// Snappy's framing format (not raw snappy blocks).
    Snappy,
}

impl Compression {
    /// Every variant, for tests and help texts.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Zstd,
        Compression::Lz4,
        Compression::Snappy,
    ];

    /// The compression announced by an input's first bytes (up to
    /// [`MAGIC_BYTES_MAX`] of them; fewer only for shorter inputs).
    ///
    /// ```
    /// use cardinal_source::Compression;
    /// assert_eq!(Compression::detect(&[0x1f, 0x8b, 8, 0]), Compression::Gzip);
    /// assert_eq!(Compression::detect(b"ts,user_id\n"), Compression::None);
    /// ```
    pub fn detect(prefix: &[u8]) -> Self {
        if prefix.starts_with(GZIP) {
            Self::Gzip
        } else if prefix.starts_with(ZSTD) {
            Self::Zstd
        } else if prefix.starts_with(LZ4_FRAME) {
            Self::Lz4
        } else if prefix.starts_with(SNAPPY_FRAMED) {
            Self::Snappy
        } else {
            Self::None
        }
    }

    /// A reader of `compressed`'s decompressed bytes. The decoder's
    /// progress through `compressed` is added to `consumed` (plain bytes
    /// are not counted: their offset is the decoded one).
    pub(crate) fn decoder(
        self,
        compressed: impl Read + Send + 'static,
        consumed: Arc<AtomicU64>,
    ) -> std::io::Result<Box<dyn Read + Send>> {
        if self == Self::None {
            return Ok(Box::new(compressed));
        }
        let counted = Consumed {
            inner: BufReader::with_capacity(DECODE_BUFFER_BYTES, compressed),
            consumed,
        };
        Ok(match self {
            Self::None => unreachable!("returned above"),
            Self::Gzip => Box::new(GzMembers::Between(counted)),
            Self::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(counted)?),
            Self::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(counted)),
            Self::Snappy => Box::new(snap::read::FrameDecoder::new(counted)),
        })
    }
}

/// Damage found by a checksum after the bytes it covers were handed out:
/// a gzip member whose deflate stream, CRC-32 or length does not hold.
/// Deflate has no checksum of its own, so a flipped byte in a member
/// decodes to wrong bytes until the member's end says so: the rows read
/// from it are not to be trusted ([`crate::Error::is_corrupt`]). Cut
/// input (the stream ends early) and bytes after the last member that do
/// not start another are not this: every byte handed out before them was
/// checked or is whole.
#[derive(Debug)]
pub(crate) struct Corrupt {
    /// Where the member starts in the compressed input.
    pub(crate) member_offset: u64,
    /// The decoder's words.
    pub(crate) cause: std::io::Error,
}

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the gzip member at compressed byte {} failed its check ({}): the bytes \
             decoded from it are not to be trusted",
            self.member_offset, self.cause
        )
    }
}

impl std::error::Error for Corrupt {}

/// Concatenated gzip members (RFC 1952 §2.2), each decoded by flate2 and
/// checked at its end (CRC-32 and length), told apart from what ends the
/// input: [`Corrupt`] for a member that fails its check, an ordinary
/// error for a member cut short or for trailing bytes that do not start
/// another member.
enum GzMembers<R: Read> {
    Between(Consumed<R>),
    In(Box<flate2::bufread::GzDecoder<Consumed<R>>>, u64),
    Done,
}

impl<R: Read> Read for GzMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match std::mem::replace(self, GzMembers::Done) {
                GzMembers::Done => return Ok(0),
                GzMembers::Between(mut inner) => {
                    let start = inner.consumed.load(Ordering::Relaxed);
                    let next = inner.fill_buf()?;
                    if next.is_empty() {
                        return Ok(0);
                    }
                    if !GZIP.starts_with(&next[..next.len().min(GZIP.len())]) {
                        *self = GzMembers::Between(inner);
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "bytes after the last gzip member that do not start another",
                        ));
                    }
                    *self = GzMembers::In(Box::new(flate2::bufread::GzDecoder::new(inner)), start);
                }
                GzMembers::In(mut member, start) => match member.read(buf) {
                    // The member's end: its CRC and length held.
                    Ok(0) if !buf.is_empty() => {
                        *self = GzMembers::Between((*member).into_inner());
                    }
                    Ok(n) => {
                        *self = GzMembers::In(member, start);
                        return Ok(n);
                    }
                    Err(cause) if cause.kind() == std::io::ErrorKind::UnexpectedEof => {
                        return Err(cause);
                    }
                    Err(cause) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            Corrupt {
                                member_offset: start,
                                cause,
                            },
                        ));
                    }
                },
            }
        }
    }
}

/// The compressed bytes buffered ahead of a decoder: 128 KiB, zstd's
/// recommended input size (`ZSTD_DStreamInSize`, one block plus its
/// header) and four times flate2's default, so one read feeds many
/// decoder calls.
const DECODE_BUFFER_BYTES: usize = 128 << 10;

/// A buffered reader that counts the bytes its user has taken: read, or
/// consumed from the buffer. Bytes buffered but not yet taken are not
/// counted.
struct Consumed<R> {
    inner: BufReader<R>,
    consumed: Arc<AtomicU64>,
}

impl<R> Consumed<R> {
    fn add(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).expect("usize fits u64");
        self.consumed.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl<R: Read> Read for Consumed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let got = self.inner.read(buf)?;
        debug_assert!(got <= buf.len());
        self.add(got);
        Ok(got)
    }
}

impl<R: Read> BufRead for Consumed<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        debug_assert!(amount <= self.inner.buffer().len());
        self.inner.consume(amount);
        self.add(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_prefixes() {
        assert_eq!(Compression::detect(ZSTD), Compression::Zstd);
        assert_eq!(Compression::detect(LZ4_FRAME), Compression::Lz4);
        assert_eq!(Compression::detect(SNAPPY_FRAMED), Compression::Snappy);
        // A truncated magic is plain bytes, not an error.
        assert_eq!(Compression::detect(&SNAPPY_FRAMED[..9]), Compression::None);
        assert_eq!(Compression::detect(&[0x1f]), Compression::None);
        assert_eq!(Compression::detect(b""), Compression::None);
        assert_eq!(Compression::detect(b"{\"ts\":1}"), Compression::None);
    }

    #[test]
    fn consumed_counts_what_the_user_takes() {
        let consumed = Arc::new(AtomicU64::new(0));
        let mut reader = Consumed {
            inner: BufReader::with_capacity(4, &b"abcdefghij"[..]),
            consumed: consumed.clone(),
        };
        assert_eq!(reader.fill_buf().expect("in memory"), b"abcd");
        assert_eq!(consumed.load(Ordering::Relaxed), 0);
        reader.consume(3);
        assert_eq!(consumed.load(Ordering::Relaxed), 3);
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).expect("in memory");
        assert_eq!(rest, b"defghij");
        assert_eq!(consumed.load(Ordering::Relaxed), 10);
    }
}
