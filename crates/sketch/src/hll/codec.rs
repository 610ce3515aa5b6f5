//! The AK storage format, schema version 1: the only code that knows the
//! bytes. Bits are MSB-first, multi-byte integers big-endian.
//!
//! ```text
//!  byte 0            byte 1                  byte 2
//! +--------+------+ +------------+---------+ +---+--------+-----------+
//! |version | type | |regwidth - 1|  log2m  | | 0 | sparse | expl code |
//! | 4 bits |4 bits| |   3 bits   | 5 bits  | | 1 |  1 bit |  6 bits   |
//! +--------+------+ +------------+---------+ +---+--------+-----------+
//!  then the body:
//!  UNDEFINED (0), EMPTY (1): nothing
//!  EXPLICIT (2): n x i64 big-endian, strictly ascending as signed values
//!  SPARSE (3):   n words of (log2m + regwidth) bits, (index << regwidth) | value,
//!                ascending index, packed MSB-first, last byte zero-padded
//!  FULL (4):     m registers of regwidth bits, register 0 first, same packing
//! ```
//!
//! Worked example: `\x128B7F004403B7FB05C44A` is version 1, EXPLICIT; `8B`
//! = regwidth 5 (`100` + 1), log2m 11 (`01011`); `7F` = sparse on, auto
//! threshold (63); one element `0x004403B7FB05C44A` = 19144387141682250, which
//! is `hll_hash_bigint(1)`.
//!
//! A decoder reads the length it needs from the header and checks the body
//! against it *before* allocating, so a forged header cannot make it allocate
//! memory the bytes do not back: FULL allocates `m` bytes for
//! `m * regwidth / 8` input bytes (at most 8x), SPARSE and EXPLICIT
//! allocate in proportion to their words.

use super::{EXPLICIT_LEN_MAX, Hll, Kind, Packed, Repr, Settings};
use crate::{Error, Result};

const VERSION: u8 = 1;
const HEADER_BYTES: usize = 3;

const TYPE_UNDEFINED: u8 = 0;
const TYPE_EMPTY: u8 = 1;
const TYPE_EXPLICIT: u8 = 2;
const TYPE_SPARSE: u8 = 3;
const TYPE_FULL: u8 = 4;

pub(super) const EXPLICIT_CODE_OFF: u8 = 0;
pub(super) const EXPLICIT_CODE_AUTO: u8 = 63;

pub(super) fn encode(hll: &Hll) -> Vec<u8> {
    let s = hll.settings();
    let kind = hll.kind();
    let type_code = match kind {
        Kind::Undefined => TYPE_UNDEFINED,
        Kind::Empty => TYPE_EMPTY,
        Kind::Explicit => TYPE_EXPLICIT,
        Kind::Sparse => TYPE_SPARSE,
        Kind::Full => TYPE_FULL,
    };
    let mut out = vec![
        (VERSION << 4) | type_code,
        ((s.regwidth - 1) << 5) | s.log2m,
        hll.packed.cutoff(),
    ];
    let regwidth = u32::from(s.regwidth);
    match (&hll.repr, kind) {
        (Repr::Explicit(values), _) => {
            out.reserve(values.len() * 8);
            for value in values {
                out.extend_from_slice(&value.to_be_bytes());
            }
        }
        (Repr::Sparse(words), Kind::Sparse) => {
            let mut writer = BitWriter::new(out);
            for &word in super::sparse_words(words).iter() {
                writer.write(
                    (super::sparse_index(word) << regwidth) | (word & 0xFF),
                    regwidth + u32::from(s.log2m),
                );
            }
            out = writer.finish();
        }
        (Repr::Dense(registers), Kind::Sparse) => {
            let mut writer = BitWriter::new(out);
            for (index, &value) in registers.iter().enumerate() {
                if value != 0 {
                    writer.write(
                        ((index as u64) << regwidth) | u64::from(value),
                        regwidth + u32::from(s.log2m),
                    );
                }
            }
            out = writer.finish();
        }
        (Repr::Sparse(words), Kind::Full) => {
            let words = super::sparse_words(words);
            let mut writer = BitWriter::new(out);
            let mut next = words.iter().peekable();
            for index in 0..s.register_count() {
                let value = match next.peek() {
                    Some(&&word) if super::sparse_index(word) == index => {
                        next.next();
                        word & 0xFF
                    }
                    _ => 0,
                };
                writer.write(value, regwidth);
            }
            out = writer.finish();
        }
        (Repr::Dense(registers), Kind::Full) => {
            let mut writer = BitWriter::new(out);
            for &value in registers.iter() {
                writer.write(u64::from(value), regwidth);
            }
            out = writer.finish();
        }
        (Repr::Undefined | Repr::Empty, _) => {}
        (Repr::Sparse(_) | Repr::Dense(_), _) => unreachable!("registers encode SPARSE or FULL"),
    }
    out
}

pub(super) fn decode(bytes: &[u8]) -> Result<Hll> {
    if bytes.len() < HEADER_BYTES {
        return Err(Error::Truncated {
            sketch: "hll",
            expected: HEADER_BYTES as u64,
            found: bytes.len() as u64,
        });
    }
    let version = bytes[0] >> 4;
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            sketch: "hll",
            expected: VERSION,
            found: version,
        });
    }
    let type_code = bytes[0] & 0x0F;
    let regwidth = (bytes[1] >> 5) + 1;
    let log2m = bytes[1] & 0x1F;
    if bytes[2] & 0x80 != 0 {
        return Err(malformed(format!(
            "cutoff byte {:#04X} has its top bit set",
            bytes[2]
        )));
    }
    let packed = Packed::of_header(log2m, regwidth, bytes[2]);
    let settings = packed.settings();
    settings.validate()?;
    let body = &bytes[HEADER_BYTES..];
    let repr = match type_code {
        TYPE_UNDEFINED | TYPE_EMPTY => {
            if !body.is_empty() {
                return Err(malformed(format!(
                    "an UNDEFINED or EMPTY value has no body, found {} bytes",
                    body.len()
                )));
            }
            if type_code == TYPE_UNDEFINED {
                Repr::Undefined
            } else {
                Repr::Empty
            }
        }
        TYPE_EXPLICIT => Repr::Explicit(decode_explicit(body)?),
        TYPE_SPARSE => Repr::Sparse(decode_sparse(body, &settings)?),
        TYPE_FULL => Repr::Dense(decode_full(body, &settings)?),
        other => return Err(malformed(format!("unknown type {other} (expected 0..=4)"))),
    };
    let mut hll = Hll { packed, repr };
    hll.densify_if_large();
    Ok(hll)
}

fn malformed(reason: String) -> Error {
    Error::Malformed {
        sketch: "hll",
        reason,
    }
}

fn decode_explicit(body: &[u8]) -> Result<Vec<i64>> {
    if !body.len().is_multiple_of(8) {
        return Err(malformed(format!(
            "EXPLICIT body of {} bytes is not a whole number of 8-byte values",
            body.len()
        )));
    }
    let count = (body.len() / 8) as u64;
    if count > EXPLICIT_LEN_MAX {
        return Err(Error::LimitExceeded {
            sketch: "hll",
            limit: "EXPLICIT_LEN_MAX",
            max: EXPLICIT_LEN_MAX,
            found: count,
        });
    }
    let values: Vec<i64> = body
        .chunks_exact(8)
        .map(|chunk| i64::from_be_bytes(chunk.try_into().expect("chunks of 8")))
        .collect();
    if let Some(i) = values.windows(2).position(|pair| pair[0] >= pair[1]) {
        return Err(malformed(format!(
            "EXPLICIT values must be strictly ascending: value {} ({}) is followed by {}",
            i,
            values[i],
            values[i + 1]
        )));
    }
    Ok(values)
}

fn decode_sparse(body: &[u8], s: &Settings) -> Result<Vec<u64>> {
    let word_bits = u64::from(s.log2m) + u64::from(s.regwidth);
    let body_bits = body.len() as u64 * 8;
    let count = body_bits / word_bits;
    if (count * word_bits).div_ceil(8) != body.len() as u64 {
        return Err(malformed(format!(
            "SPARSE body of {} bytes holds {count} words of {word_bits} bits and extra bytes",
            body.len()
        )));
    }
    let value_mask = (1u64 << s.regwidth) - 1;
    let mut words = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for i in 0..count {
        let word = read_bits(body, i * word_bits, word_bits);
        let value = word & value_mask;
        if value == 0 {
            // Padding can look like a word when log2m + regwidth < 8.
            continue;
        }
        let index = word >> s.regwidth;
        if let Some(&last) = words.last()
            && super::sparse_index(last) >= index
        {
            return Err(malformed(format!(
                "SPARSE register indexes must ascend: {} is followed by {index}",
                super::sparse_index(last)
            )));
        }
        words.push(super::sparse_word(
            index,
            u8::try_from(value).expect("regwidth <= 8"),
        ));
    }
    Ok(words)
}

fn decode_full(body: &[u8], s: &Settings) -> Result<Box<[u8]>> {
    let m = s.register_count();
    let expected = (m * u64::from(s.regwidth)).div_ceil(8);
    if body.len() as u64 != expected {
        return Err(Error::Truncated {
            sketch: "hll",
            expected: expected + HEADER_BYTES as u64,
            found: body.len() as u64 + HEADER_BYTES as u64,
        });
    }
    let regwidth = u64::from(s.regwidth);
    let mut registers = vec![0u8; usize::try_from(m).expect("m fits in memory")];
    for (index, register) in registers.iter_mut().enumerate() {
        let value = read_bits(body, index as u64 * regwidth, regwidth);
        *register = u8::try_from(value).expect("regwidth <= 8");
    }
    Ok(registers.into_boxed_slice())
}

/// Reads `bits` (at most 57) bits starting at bit `position`, MSB-first;
/// bits past the end read as zero.
fn read_bits(bytes: &[u8], position: u64, bits: u64) -> u64 {
    debug_assert!(bits > 0 && bits <= 57);
    let start = usize::try_from(position / 8).expect("position within the input");
    let offset = position % 8;
    let mut chunk = [0u8; 8];
    let end = bytes.len().min(start + 8);
    chunk[..end - start].copy_from_slice(&bytes[start..end]);
    (u64::from_be_bytes(chunk) << offset) >> (64 - bits)
}

/// Packs words of up to 57 bits MSB-first.
struct BitWriter {
    out: Vec<u8>,
    pending: u64,
    pending_bits: u32,
}

impl BitWriter {
    fn new(out: Vec<u8>) -> Self {
        Self {
            out,
            pending: 0,
            pending_bits: 0,
        }
    }

    #[inline]
    fn write(&mut self, value: u64, bits: u32) {
        debug_assert!(bits <= 57 && self.pending_bits < 8);
        debug_assert!(
            bits == 64 || value >> bits == 0,
            "value wider than its field"
        );
        self.pending = (self.pending << bits) | value;
        self.pending_bits += bits;
        while self.pending_bits >= 8 {
            self.pending_bits -= 8;
            self.out
                .push((self.pending >> self.pending_bits).to_le_bytes()[0]);
        }
        self.pending &= (1u64 << self.pending_bits) - 1;
    }

    fn finish(mut self) -> Vec<u8> {
        if self.pending_bits > 0 {
            self.out
                .push((self.pending << (8 - self.pending_bits)).to_le_bytes()[0]);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        let mut writer = BitWriter::new(Vec::new());
        let fields = [
            (5u64, 3u32),
            (0x1FFFF, 17),
            (0, 1),
            (1, 1),
            (0x7F_FFFF_FFFF, 39),
        ];
        for &(v, b) in &fields {
            writer.write(v, b);
        }
        let bytes = writer.finish();
        assert_eq!(bytes.len(), 8); // 61 bits
        let mut position = 0;
        for &(v, b) in &fields {
            assert_eq!(read_bits(&bytes, position, u64::from(b)), v);
            position += u64::from(b);
        }
    }

    #[test]
    fn forged_full_header_does_not_allocate() {
        // log2m 31, regwidth 8, FULL, three body bytes: must fail before
        // allocating 2 GiB.
        let bytes = [0x14, 0xFF, 0x7F, 0, 0, 0];
        assert!(matches!(decode(&bytes), Err(Error::Truncated { .. })));
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(matches!(decode(&[0x11]), Err(Error::Truncated { .. })));
        assert!(matches!(
            decode(&[0x21, 0x8B, 0x7F]),
            Err(Error::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            decode(&[0x15, 0x8B, 0x7F]),
            Err(Error::Malformed { .. })
        ));
        assert!(matches!(
            decode(&[0x11, 0x83, 0x7F]),
            Err(Error::InvalidParameter { .. })
        ));
        assert!(matches!(
            decode(&[0x11, 0x8B, 0xFF]),
            Err(Error::Malformed { .. })
        ));
        assert!(matches!(
            decode(&[0x11, 0x8B, 0x7F, 0]),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn rejects_unsorted_explicit_and_sparse() {
        let mut explicit = vec![0x12, 0x8B, 0x7F];
        explicit.extend_from_slice(&2i64.to_be_bytes());
        explicit.extend_from_slice(&1i64.to_be_bytes());
        assert!(matches!(decode(&explicit), Err(Error::Malformed { .. })));
        // Two 16-bit SPARSE words, index 5 then index 3.
        let sparse = [0x13, 0x8B, 0x7F, 0x00, 0xA1, 0x00, 0x61];
        assert!(matches!(decode(&sparse), Err(Error::Malformed { .. })));
    }
}
