//! Compression detected by magic bytes, and the streaming decoders.
//!
//! | format | magic (hex) | reference |
//! |---|---|---|
//! | gzip | `1f 8b` | RFC 1952 §2.3.1 (members may be concatenated, as `pigz` and `cat a.gz b.gz` make) |
//! | zstd | `28 b5 2f fd` | RFC 8878 §3.1.1 (frames may be concatenated) |
//! | lz4 frame | `04 22 4d 18` | LZ4 Frame Format 1.6.x, "Magic Number" |
//! | snappy framed | `ff 06 00 00 73 4e 61 50 70 59` | Snappy framing format, "Stream identifier" |
//!
//! Anything else is read as plain bytes. Magic numbers are never valid
//! text in our inputs: gzip and snappy start with bytes above 0x7f, zstd's
//! and lz4's with control bytes, so plain CSV or JSON is never taken for a
//! compressed stream.

use std::io::Read;

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

    /// A reader of `compressed`'s decompressed bytes.
    pub(crate) fn decoder(
        self,
        compressed: impl Read + Send + 'static,
    ) -> std::io::Result<Box<dyn Read + Send>> {
        Ok(match self {
            Self::None => Box::new(compressed),
            Self::Gzip => Box::new(flate2::read::MultiGzDecoder::new(compressed)),
            Self::Zstd => Box::new(zstd::stream::read::Decoder::new(compressed)?),
            Self::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(compressed)),
            Self::Snappy => Box::new(snap::read::FrameDecoder::new(compressed)),
        })
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
}
