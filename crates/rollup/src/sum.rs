//! [`ExactSum`]: the exact sum of any number of doubles, rounded once.
//!
//! Every finite double is an integer multiple of 2^-1074 (the smallest
//! subnormal) below 2^1024, so a sum of doubles is an integer in units of
//! 2^-1074 below 2^2098 times the number of values. [`ExactSum`] keeps that
//! integer whole, in [`LIMB_COUNT`] 64-bit limbs of two's complement: an
//! addition is a shift of the 53-bit significand into two or three limbs
//! and a carry, exact and independent of order and of how values are split
//! into partial sums (a merge adds the limbs). The answer is the sum
//! rounded once to the nearest double, ties to even, as if computed with
//! infinite precision (Neal's "superaccumulator" idea, arXiv:1505.05571, in
//! its simplest form: wide limbs and an eager carry).
//!
//! Infinities and NaN are kept apart as flags and answer as IEEE addition
//! does in any order: an infinity, or NaN for a NaN or infinities of both
//! signs. A finite sum beyond the largest double rounds to an infinity of
//! its sign.
//!
//! The rollup's `sum` state keeps ordinary values in an i128 fixed point
//! (see `agg.rs`) and boxes an [`ExactSum`] only for the first value the
//! fixed point cannot hold exactly.

/// Bit of the accumulator that weighs 2^0: bit 0 weighs 2^-1074.
const ONE_BIT: u32 = 1074;

/// Limbs of the accumulator: 2240 bits, for values below 2^1024 (bit 2098)
/// times up to 2^64 values, plus a sign bit.
const LIMB_COUNT: usize = 35;

const _: () = assert!(LIMB_COUNT * 64 > 1024 + ONE_BIT as usize + 64 + 1);

/// Bytes of an [`ExactSum`]'s image: its limbs and a byte of flags.
pub(crate) const EXACT_SUM_IMAGE_BYTES: usize = LIMB_COUNT * 8 + 1;

/// The exact sum of doubles. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactSum {
    /// The finite sum in units of 2^-1074, two's complement, little-endian.
    limbs: [u64; LIMB_COUNT],
    /// Whether a +infinity was added.
    positive_infinity: bool,
    /// Whether a -infinity was added.
    negative_infinity: bool,
    /// Whether a NaN was added.
    nan: bool,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self {
            limbs: [0; LIMB_COUNT],
            positive_infinity: false,
            negative_infinity: false,
            nan: false,
        }
    }
}

impl ExactSum {
    /// Adds one double, exactly.
    pub fn add(&mut self, v: f64) {
        let bits = v.to_bits();
        let exponent = u32::try_from((bits >> 52) & 0x7ff).expect("11 bits");
        let fraction = bits & ((1 << 52) - 1);
        let negative = bits >> 63 == 1;
        if exponent == 0x7ff {
            if fraction != 0 {
                self.nan = true;
            } else if negative {
                self.negative_infinity = true;
            } else {
                self.positive_infinity = true;
            }
            return;
        }
        // v = mantissa * 2^(exponent - 1075) for normal values, and
        // fraction * 2^-1074 for subnormal ones: at bit `exponent - 1`.
        let (mantissa, offset) = if exponent == 0 {
            (fraction, 0)
        } else {
            (fraction | 1 << 52, exponent - 1)
        };
        self.add_magnitude(u128::from(mantissa), offset, negative);
    }

    /// Adds `units * 2^-64`, exactly (the rollup's fixed point).
    pub fn add_fixed(&mut self, units: i128) {
        self.add_magnitude(units.unsigned_abs(), ONE_BIT - 64, units < 0);
    }

    /// Appends the sum's image, [`EXACT_SUM_IMAGE_BYTES`] long: the limbs,
    /// least significant first, little-endian, then a byte of flags (bit
    /// 0 +infinity, bit 1 -infinity, bit 2 NaN).
    pub(crate) fn write_image(&self, out: &mut Vec<u8>) {
        for limb in &self.limbs {
            out.extend_from_slice(&limb.to_le_bytes());
        }
        out.push(
            u8::from(self.positive_infinity)
                | u8::from(self.negative_infinity) << 1
                | u8::from(self.nan) << 2,
        );
    }

    /// Reads [`ExactSum::write_image`]: any limbs are a sum; `None` for
    /// unknown flag bits.
    pub(crate) fn from_image(bytes: &[u8; EXACT_SUM_IMAGE_BYTES]) -> Option<Self> {
        let (limbs, flags) = bytes.split_at(LIMB_COUNT * 8);
        if flags[0] & !0b111 != 0 {
            return None;
        }
        let mut sum = Self::default();
        for (limb, word) in sum.limbs.iter_mut().zip(limbs.chunks_exact(8)) {
            *limb = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        }
        sum.positive_infinity = flags[0] & 1 != 0;
        sum.negative_infinity = flags[0] & 2 != 0;
        sum.nan = flags[0] & 4 != 0;
        Some(sum)
    }

    /// Adds another sum, exactly.
    pub fn merge(&mut self, other: &ExactSum) {
        let mut carry = false;
        for (a, &b) in self.limbs.iter_mut().zip(&other.limbs) {
            let (sum, c1) = a.overflowing_add(b);
            let (sum, c2) = sum.overflowing_add(u64::from(carry));
            *a = sum;
            carry = c1 || c2;
        }
        self.positive_infinity |= other.positive_infinity;
        self.negative_infinity |= other.negative_infinity;
        self.nan |= other.nan;
    }

    /// Adds or subtracts `magnitude * 2^(offset - 1074)`.
    fn add_magnitude(&mut self, magnitude: u128, offset: u32, negative: bool) {
        if magnitude == 0 {
            return;
        }
        let limb = usize::try_from(offset / 64).expect("small");
        let shift = offset % 64;
        // The magnitude shifted within its first limb spans three limbs.
        let low = magnitude << shift;
        let high = if shift == 0 {
            0
        } else {
            magnitude >> (128 - shift)
        };
        let parts = [
            low.to_le_bytes()[..8].try_into().map(u64::from_le_bytes),
            low.to_le_bytes()[8..].try_into().map(u64::from_le_bytes),
            high.to_le_bytes()[..8].try_into().map(u64::from_le_bytes),
        ]
        .map(|part| part.expect("eight bytes"));
        debug_assert!(limb + 3 <= LIMB_COUNT);
        let mut carry = false;
        for (i, limb_value) in self.limbs[limb..].iter_mut().enumerate() {
            let part = parts.get(i).copied().unwrap_or(0);
            if i >= parts.len() && !carry {
                break;
            }
            if negative {
                let (difference, b1) = limb_value.overflowing_sub(part);
                let (difference, b2) = difference.overflowing_sub(u64::from(carry));
                *limb_value = difference;
                carry = b1 || b2;
            } else {
                let (sum, c1) = limb_value.overflowing_add(part);
                let (sum, c2) = sum.overflowing_add(u64::from(carry));
                *limb_value = sum;
                carry = c1 || c2;
            }
        }
    }

    /// The sum rounded once to the nearest double, ties to even; an
    /// infinity past the largest double; NaN or an infinity as IEEE
    /// addition gives them.
    pub fn value(&self) -> f64 {
        if self.nan || (self.positive_infinity && self.negative_infinity) {
            return f64::NAN;
        }
        if self.positive_infinity {
            return f64::INFINITY;
        }
        if self.negative_infinity {
            return f64::NEG_INFINITY;
        }
        let negative = self.limbs[LIMB_COUNT - 1] >> 63 == 1;
        let mut magnitude = self.limbs;
        if negative {
            // Two's complement: invert and add one.
            let mut carry = true;
            for limb in &mut magnitude {
                let (sum, c) = (!*limb).overflowing_add(u64::from(carry));
                *limb = sum;
                carry = c;
            }
        }
        let Some(top_limb) = magnitude.iter().rposition(|&limb| limb != 0) else {
            return 0.0;
        };
        // The highest set bit, counted from bit 0 (2^-1074).
        let top =
            u32::try_from(top_limb).expect("small") * 64 + 63 - magnitude[top_limb].leading_zeros();
        let bit = |i: u32| -> u64 {
            let limb = usize::try_from(i / 64).expect("small");
            (magnitude[limb] >> (i % 64)) & 1
        };
        let sign = if negative { -1.0 } else { 1.0 };
        if top < 53 {
            // At most 53 bits: exact, a subnormal or a small normal.
            #[expect(clippy::cast_precision_loss, reason = "below 2^53: exact")]
            let units = magnitude[0] as f64;
            return sign * units * f64::from_bits(1); // 2^-1074, exact
        }
        // The 53 bits from `top` down, the next (round) bit, and whether
        // any bit below it is set (sticky).
        let mut significand = 0u64;
        for i in (top - 52..=top).rev() {
            significand = significand << 1 | bit(i);
        }
        let round = bit(top - 53) == 1;
        // Bits 0..below: whole limbs, then the low bits of the next.
        let below = top - 53;
        let whole = usize::try_from(below / 64).expect("small");
        let sticky = magnitude[..whole].iter().any(|&limb| limb != 0)
            || magnitude[whole] & ((1u64 << (below % 64)) - 1) != 0;
        let mut exponent = top; // of the significand's top bit
        if round && (sticky || significand & 1 == 1) {
            significand += 1;
            if significand == 1 << 53 {
                significand = 1 << 52;
                exponent += 1;
            }
        }
        // The value is significand * 2^(exponent - 52 - 1074), with the top
        // bit at 2^(exponent - 1074); exponent >= 53 makes it normal.
        let unbiased = i64::from(exponent) - i64::from(ONE_BIT);
        if unbiased > 1023 {
            return sign * f64::INFINITY;
        }
        let biased = u64::try_from(unbiased + 1023).expect("normal");
        let bits = (u64::from(negative) << 63) | (biased << 52) | (significand & ((1 << 52) - 1));
        f64::from_bits(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(values: &[f64]) -> f64 {
        let mut s = ExactSum::default();
        for &v in values {
            s.add(v);
        }
        s.value()
    }

    #[test]
    fn small_values_are_not_lost() {
        assert_eq!(sum(&[1e-20; 1000]), 9.999_999_999_999_999e-18);
        assert_eq!(sum(&[3e-19, 3e-19]), 6e-19);
        assert_eq!(sum(&[5e-324, 5e-324, -5e-324]), 5e-324);
        assert_eq!(sum(&[1e300, 1.0, -1e300]), 1.0);
        assert_eq!(sum(&[f64::MAX, f64::MAX, -f64::MAX]), f64::MAX);
        assert_eq!(sum(&[f64::MAX, f64::MAX]), f64::INFINITY);
        assert_eq!(sum(&[-f64::MAX, -f64::MAX]), f64::NEG_INFINITY);
        assert_eq!(sum(&[]), 0.0);
        assert_eq!(sum(&[-2.5, 2.5]), 0.0);
        assert_eq!(sum(&[-2.5, 1.0]), -1.5);
    }

    #[test]
    fn ties_round_to_even() {
        // 2^53 + 1 is halfway between 2^53 and 2^53 + 2: even is 2^53.
        let two53 = 9_007_199_254_740_992.0;
        assert_eq!(sum(&[two53, 1.0]), two53);
        // 2^53 + 3 is halfway between 2^53 + 2 and 2^53 + 4: even is + 4.
        assert_eq!(sum(&[two53, 3.0]), two53 + 4.0);
        // Just above the halfway point rounds up.
        assert_eq!(sum(&[two53, 1.0, 1e-300]), two53 + 2.0);
        assert_eq!(sum(&[-two53, -1.0, -1e-300]), -two53 - 2.0);
    }

    #[test]
    fn non_finite_values_answer_as_ieee() {
        assert_eq!(sum(&[1.0, f64::INFINITY]), f64::INFINITY);
        assert_eq!(sum(&[f64::NEG_INFINITY, 1e308]), f64::NEG_INFINITY);
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(sum(&[1.0, f64::NAN]).is_nan());
    }

    #[test]
    fn fixed_units_and_merges_are_exact() {
        let mut a = ExactSum::default();
        a.add_fixed(3); // 3 * 2^-64
        a.add(1e-30);
        let mut b = ExactSum::default();
        b.add_fixed(-1 << 64); // -1
        b.add(1.0);
        a.merge(&b);
        let mut want = ExactSum::default();
        want.add(3.0 * 2f64.powi(-64));
        want.add(1e-30);
        assert_eq!(a, want);
        assert_eq!(a.value(), 3.0 * 2f64.powi(-64) + 1e-30);
    }
}
