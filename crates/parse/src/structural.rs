//! The structural bytes of delimited text, 64 at a time, as bitmasks.
//!
//! The CSV fast path needs only two facts about each byte of a quote-free
//! line: is it the delimiter, is it a newline. A [`Classify`] answers both
//! for a block of 64 bytes at once, as two `u64` masks with bit `i` set when
//! byte `i` matches (little-endian order: byte 0 is the lowest bit):
//!
//! ```text
//!   block        a , b b , c \r \n d d , e ...
//!   bit          0 1 2 3 4 5 6  7  8 9 10 11
//!   delimiters   0 1 0 0 1 0 0  0  0 0 1  0   -> 0b0100_0001_0010
//!   newlines     0 0 0 0 0 0 0  1  0 0 0  0   -> 0b0000_1000_0000
//! ```
//!
//! The scanner then walks set bits (`trailing_zeros`, clear the lowest) and
//! counts delimiters it does not split with `count_ones`, so its work is
//! per field, not per byte. `\r` needs no mask: only the byte before a
//! newline can be a dropped CR, and the scanner looks at that one byte.
//!
//! Three classifiers give identical masks:
//!
//! | classifier | where | per 64-byte block |
//! |---|---|---|
//! | [`Swar`] | everywhere | 8 words: exact zero-byte test (Hacker's Delight §6-1) and a multiply gathering the 8 flag bits |
//! | [`Sse2`] | x86_64 (SSE2 is part of the baseline) | 4 loads, 8 `pcmpeqb`, 8 `pmovmskb` |
//! | [`Avx2`] | x86_64 with AVX2, BMI1 and POPCNT, detected at run time | 2 loads, 4 `vpcmpeqb`, 4 `vpmovmskb` |
//!
//! [`Scanner`] names them for callers; the parser picks the fastest the CPU
//! has once, when it is built ([`Scanner::detect`]).

// Maintainer note: this module holds the crate's only `unsafe`: the
// intrinsics and unaligned loads of the x86_64 classifiers. An
// `Sse2` or `Avx2` value is a proof that the CPU runs its instructions
// (`Avx2::new` checks), which is what each `// SAFETY:` comment leans on;
// keep their constructors private to this module. The scanner that uses
// the masks is generic over `Classify` (`csv::scan_blocks`) and is
// instantiated inside a `#[target_feature]` function per classifier, so
// that the `#[inline(always)]` `block` methods, and the intrinsics in
// them, inline into code compiled for those features.

/// Bytes per block: one bit of a `u64` mask per byte.
pub(crate) const BLOCK: usize = 64;

/// Where the delimiters and newlines of one block are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Masks {
    /// Bit `i`: byte `i` is the delimiter.
    pub(crate) delimiters: u64,
    /// Bit `i`: byte `i` is `\n`.
    pub(crate) newlines: u64,
}

impl Masks {
    /// The masks of the first `len` bytes only (a block cut short by the
    /// end of the text, whose padding may equal the delimiter).
    #[inline(always)]
    pub(crate) fn below(self, len: usize) -> Masks {
        debug_assert!(len < BLOCK);
        let keep = (1u64 << len) - 1;
        Masks {
            delimiters: self.delimiters & keep,
            newlines: self.newlines & keep,
        }
    }
}

/// Classifies blocks of 64 bytes.
pub(crate) trait Classify: Copy {
    /// The delimiter and newline masks of `block`.
    fn block(self, block: &[u8; BLOCK], delimiter: u8) -> Masks;
}

/// Which classifier the CSV fast path runs. All give the same records and
/// rejects; they differ in speed and in the CPUs that have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scanner {
    /// 8 bytes per step in `u64` arithmetic; runs everywhere.
    Swar,
    /// 16 bytes per step with SSE2 (every x86_64 CPU).
    Sse2,
    /// 32 bytes per step with AVX2 (x86_64 CPUs since about 2013, with
    /// BMI1 and POPCNT for the bit walking).
    Avx2,
}

impl Scanner {
    /// Every scanner, slowest first.
    pub const ALL: [Scanner; 3] = [Scanner::Swar, Scanner::Sse2, Scanner::Avx2];

    /// Whether this CPU runs `self`.
    pub fn is_supported(self) -> bool {
        match self {
            Scanner::Swar => true,
            Scanner::Sse2 => cfg!(target_arch = "x86_64"),
            Scanner::Avx2 => avx2_detected(),
        }
    }

    /// The fastest scanner this CPU runs.
    pub fn detect() -> Scanner {
        let best = Scanner::ALL
            .into_iter()
            .rev()
            .find(|s| s.is_supported())
            .expect("Swar runs everywhere");
        debug_assert!(best.is_supported());
        best
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_detected() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("popcnt")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_detected() -> bool {
    false
}

const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The high bit of every byte of `x` that is zero, and no other bit
/// (exact, unlike the classic `(x - 0x01..) & !x & 0x80..`, which flags
/// bytes above a zero: no carry crosses a byte here because
/// `(x & 0x7f) + 0x7f <= 0xfe`). Hacker's Delight, 2nd ed., §6-1.
#[inline(always)]
pub(crate) fn zero_bytes(x: u64) -> u64 {
    let low7_nonzero = (x & !HIGH_BITS).wrapping_add(!HIGH_BITS);
    !(low7_nonzero | x | !HIGH_BITS)
}

/// The 8 byte flags of `zero_bytes` (high bits) as 8 bits, lane `i` to
/// bit `i`. After the shift lane `i` is bit `8i`; `GATHER` is the sum of
/// `2^(7 + 7j)` for `j` in `0..8`, so the product's terms sit at bits
/// `8i + 7 + 7j`. These are 64 distinct bits (no carry mixes them), and
/// the ones in the top byte are exactly `j = 7 - i`, at bit `56 + i`.
#[inline(always)]
#[allow(clippy::cast_possible_truncation)]
fn gather(flags: u64) -> u64 {
    const GATHER: u64 = 0x0102_0408_1020_4080;
    ((flags >> 7).wrapping_mul(GATHER) >> 56) & 0xff
}

/// The portable classifier: 8 bytes per step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Swar;

impl Classify for Swar {
    #[inline(always)]
    fn block(self, block: &[u8; BLOCK], delimiter: u8) -> Masks {
        let delimiters = LOW_BITS * u64::from(delimiter);
        let newlines = LOW_BITS * u64::from(b'\n');
        let mut masks = Masks {
            delimiters: 0,
            newlines: 0,
        };
        for (k, word) in block.chunks_exact(8).enumerate() {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            masks.delimiters |= gather(zero_bytes(word ^ delimiters)) << (8 * k);
            masks.newlines |= gather(zero_bytes(word ^ newlines)) << (8 * k);
        }
        masks
    }
}

/// The SSE2 classifier: 16 bytes per step. SSE2 is part of x86_64, so
/// any value may exist.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sse2;

#[cfg(target_arch = "x86_64")]
impl Classify for Sse2 {
    #[inline(always)]
    #[allow(clippy::cast_sign_loss)]
    fn block(self, block: &[u8; BLOCK], delimiter: u8) -> Masks {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let mut masks = Masks {
            delimiters: 0,
            newlines: 0,
        };
        // SAFETY: SSE2 is in every x86_64 CPU (the target's baseline), so
        // the intrinsics run; each load reads 16 bytes at offset 16 * k,
        // k < 4, inside the 64-byte `block`, and `loadu` needs no
        // alignment.
        unsafe {
            let delimiters = _mm_set1_epi8(delimiter.cast_signed());
            let newlines = _mm_set1_epi8(b'\n'.cast_signed());
            for k in 0..BLOCK / 16 {
                let bytes = _mm_loadu_si128(block.as_ptr().add(16 * k).cast::<__m128i>());
                let d = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, delimiters)) as u32;
                let n = _mm_movemask_epi8(_mm_cmpeq_epi8(bytes, newlines)) as u32;
                masks.delimiters |= u64::from(d) << (16 * k);
                masks.newlines |= u64::from(n) << (16 * k);
            }
        }
        masks
    }
}

/// The AVX2 classifier: 32 bytes per step. Only [`Avx2::new`] makes one,
/// after checking the CPU.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2 {
    _detected: (),
}

#[cfg(target_arch = "x86_64")]
impl Avx2 {
    /// The classifier, if this CPU has AVX2 (and BMI1 and POPCNT).
    pub(crate) fn new() -> Option<Avx2> {
        avx2_detected().then_some(Avx2 { _detected: () })
    }
}

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    #[allow(clippy::cast_sign_loss)]
    fn block(self, block: &[u8; BLOCK], delimiter: u8) -> Masks {
        use std::arch::x86_64::{
            __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
        };
        // SAFETY: an `Avx2` exists only after `avx2_detected` (see
        // `Avx2::new`), so the CPU runs AVX2; the two loads read bytes
        // 0..32 and 32..64 of the 64-byte `block`, and `loadu` needs no
        // alignment.
        unsafe {
            let delimiters = _mm256_set1_epi8(delimiter.cast_signed());
            let newlines = _mm256_set1_epi8(b'\n'.cast_signed());
            let low = _mm256_loadu_si256(block.as_ptr().cast::<__m256i>());
            let high = _mm256_loadu_si256(block.as_ptr().add(32).cast::<__m256i>());
            let mask = |bytes, splat| {
                u64::from(_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, splat)) as u32)
            };
            Masks {
                delimiters: mask(low, delimiters) | mask(high, delimiters) << 32,
                newlines: mask(low, newlines) | mask(high, newlines) << 32,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The masks byte by byte: the reference the classifiers match.
    fn reference(block: &[u8; BLOCK], delimiter: u8) -> Masks {
        let mut masks = Masks {
            delimiters: 0,
            newlines: 0,
        };
        for (i, &b) in block.iter().enumerate() {
            masks.delimiters |= u64::from(b == delimiter) << i;
            masks.newlines |= u64::from(b == b'\n') << i;
        }
        masks
    }

    fn blocks() -> Vec<[u8; BLOCK]> {
        let mut out = vec![[0; BLOCK], [b'\n'; BLOCK], [0xff; BLOCK], [b','; BLOCK]];
        // Every byte value in every lane, next to the structural bytes.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..512 {
            let mut block = [0; BLOCK];
            for (i, b) in block.iter_mut().enumerate() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = match state % 4 {
                    0 => b',',
                    1 => b'\n',
                    _ => u8::try_from((i + round) % 256).expect("below 256"),
                };
            }
            out.push(block);
        }
        out
    }

    #[test]
    fn classifiers_match_the_reference() {
        for block in blocks() {
            for delimiter in [b',', b'\t', 0, 0x80, 0xff, b'|'] {
                let expected = reference(&block, delimiter);
                assert_eq!(Swar.block(&block, delimiter), expected);
                #[cfg(target_arch = "x86_64")]
                {
                    assert_eq!(Sse2.block(&block, delimiter), expected);
                    if let Some(avx2) = Avx2::new() {
                        assert_eq!(avx2.block(&block, delimiter), expected);
                    }
                }
            }
        }
    }

    #[test]
    fn below_keeps_the_first_bytes() {
        let masks = Masks {
            delimiters: u64::MAX,
            newlines: 0b1011,
        };
        assert_eq!(
            masks.below(0),
            Masks {
                delimiters: 0,
                newlines: 0
            }
        );
        assert_eq!(
            masks.below(2),
            Masks {
                delimiters: 0b11,
                newlines: 0b11
            }
        );
        assert_eq!(masks.below(63).delimiters, u64::MAX >> 1);
    }

    #[test]
    fn zero_bytes_is_exact() {
        for byte in 0..=255u8 {
            let word = u64::from_le_bytes([byte, 0, 1, 0x80, 0xff, 0, 0x7f, byte]);
            let mask = zero_bytes(word);
            for (i, b) in word.to_le_bytes().iter().enumerate() {
                assert_eq!(mask >> (8 * i) & 0xff, if *b == 0 { 0x80 } else { 0 });
            }
        }
    }

    #[test]
    fn the_fastest_scanner_is_supported() {
        assert!(Scanner::detect().is_supported());
        assert!(Scanner::Swar.is_supported());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(Scanner::Avx2.is_supported(), Avx2::new().is_some());
    }
}
