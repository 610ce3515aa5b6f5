//! Java's `Float.toString`, byte for byte.
//!
//! The AMPLab tables were written by a Java generator, so `adRevenue` is
//! printed by `Float.toString(float)`. Its layout rules (Java SE 17 API docs
//! of `Float.toString`):
//!
//! | value | layout | examples |
//! |---|---|---|
//! | 0 | `0.0` (`-0.0` for negative zero) | `0.0` |
//! | 1e-3 <= \|x\| < 1e7 | plain decimal, at least one digit after the point | `0.35`, `0.001`, `100.0` |
//! | otherwise | one digit, point, at least one digit, `E`, exponent | `1.1885166E-4`, `1.0E7` |
//! | NaN, infinities | words | `NaN`, `Infinity`, `-Infinity` |
//!
//! The digits are the shortest decimal that reads back as the same float,
//! the nearest one when several are equally short, and the even one on an
//! exact tie (OpenJDK 17 prints 2^-12 as `2.4414062E-4`, where Rust's `{:e}`
//! rounds the tie up to `...063`). That holds on the range this crate prints,
//! [2^-24, 1): [`write_unit_float`] does it with integer arithmetic on the
//! float's rounding interval, no formatting machinery and no allocation, and
//! [`java_float_reference`] is the simple version it is tested against.
//!
//! Outside that range Java 17 is not shortest and this module does not
//! follow it: integral floats from 2^25 to 2^63 are printed with all their
//! exact digits (`1.23456792E8`, shortest `1.2345679E8`), and some tiny ones
//! get a ninth digit (`1.17549435E-38`). Both functions refuse such values.
//!
//! Checked on 2026-11-21 against OpenJDK 17.0.15's `Float.toString` on every
//! `k / 2^24` for k in 0..2^24 (every value `Random.nextFloat` returns, so
//! every `adRevenue` the HiBench generator can print) and on the 2.1M floats
//! in [2^-24, 1) among every 97th positive bit pattern: identical bytes. The
//! table in the tests was printed by that JDK, and `tests/bdb.rs` reads every
//! `adRevenue` of the real sample rows back and prints it again.

// Maintainer note: the fast path's predicate is `is_unit_fast(x)`; if it is
// widened, the u128 bounds in `write_unit_float` must be re-derived (the
// largest product is hi * 10^17 with hi < 2^26, below 2^83).

/// Smallest value the fast path takes: 2^-24, the smallest non-zero value of
/// Java's `Random.nextFloat`.
pub const UNIT_FAST_MIN: f32 = 1.0 / 16_777_216.0;

/// Bytes [`write_unit_float`] writes at most: `9.9999994E-4` would be 12; 9
/// significant digits, a point, a leading `0.` and zeros stay below 16.
pub const UNIT_FLOAT_BYTES_MAX: usize = 16;

/// Whether [`write_unit_float`] takes `x`.
pub fn is_unit_fast(x: f32) -> bool {
    (UNIT_FAST_MIN..1.0).contains(&x) || x == 0.0
}

/// The simple version [`write_unit_float`] is tested against: for q = 1,
/// 2, ... decimal places, the two q-place decimals around x (exact integer
/// arithmetic) are printed and parsed back with Rust's correctly rounding
/// `str::parse::<f32>`; the first q with a candidate that reads back as x
/// gives the digits, the nearer candidate winning (ties to the even one,
/// which is what Java 17 does and Rust's `{:e}` does not). It allocates.
///
/// # Panics
///
/// If `!is_unit_fast(x)`.
pub fn java_float_reference(x: f32) -> String {
    assert!(
        is_unit_fast(x),
        "the reference covers the fast path's domain"
    );
    if x == 0.0 {
        return "0.0".to_owned();
    }
    let (value, shift) = exact_units(x);
    let unit = 1u128 << shift;
    for places in 1..=17u32 {
        let scaled = value * 10u128.pow(places);
        let below = scaled / unit;
        let remainder = scaled % unit;
        let reads_back = |d: u128| {
            let text = format!("{d}e-{places}");
            text.parse::<f32>().expect("a valid float literal") == x
        };
        let mut candidates = [below, below + 1]
            .into_iter()
            .filter(|&d| d > 0 && reads_back(d));
        let (Some(first), second) = (candidates.next(), candidates.next()) else {
            continue;
        };
        let d = match second {
            None => first,
            Some(_) if remainder * 2 < unit => below,
            Some(_) if remainder * 2 > unit => below + 1,
            Some(_) if below.is_multiple_of(2) => below,
            Some(_) => below + 1,
        };
        let mut out = [0u8; UNIT_FLOAT_BYTES_MAX];
        let len = write_java_decimal(d, places, &mut out);
        return String::from_utf8_lossy(&out[..len]).into_owned();
    }
    unreachable!("9 significant digits always identify a float")
}

/// `x` as `value / 2^shift` exactly, with `value = 4 * mantissa`: the units
/// in which both the float and the ends of its rounding interval are
/// integers.
fn exact_units(x: f32) -> (u128, u32) {
    let bits = x.to_bits();
    let biased_exponent = (bits >> 23) & 0xff;
    let fraction = bits & 0x7f_ffff;
    // x >= 2^-24 is normal: the implicit bit is set.
    debug_assert!((103..=126).contains(&biased_exponent));
    let mantissa = u128::from(fraction | 0x80_0000);
    // x = mantissa * 2^(biased_exponent - 150) = 4 * mantissa * 2^-shift.
    (4 * mantissa, 152 - biased_exponent)
}

/// Writes Java's `Float.toString(x)` for `x` in [2^-24, 1) or 0 into `out`
/// and returns the byte count. No allocation, no `core::fmt`.
///
/// Method: a positive float `M * 2^E` (24-bit M) reads back from every
/// decimal strictly inside (and, when M is even, on the ends of) the
/// interval `[(4M - 2) / 4, (4M + 2) / 4] * 2^E` (the lower end is
/// `(4M - 1) / 4` when M = 2^23, where the float below is closer). For
/// q = 1, 2, ... decimal places we look for an integer d with
/// `lo * 10^q <= d * 2^(2-E) <= hi * 10^q`; the first q that has one gives
/// the shortest digits, and among them we take the one nearest x (ties to
/// even, as Java does).
///
/// # Panics
///
/// If `!is_unit_fast(x)`.
pub fn write_unit_float(x: f32, out: &mut [u8; UNIT_FLOAT_BYTES_MAX]) -> usize {
    assert!(is_unit_fast(x), "write_unit_float takes [2^-24, 1) or 0");
    if x == 0.0 {
        out[..3].copy_from_slice(b"0.0");
        return 3;
    }
    let (value, shift) = exact_units(x);
    // At a power of two the float below is half as far away.
    let low = if x.to_bits() & 0x7f_ffff == 0 {
        value - 1
    } else {
        value - 2
    };
    let high = value + 2;
    // Round-half-even on reading: the interval's ends read back as x only
    // when x's mantissa is even.
    let inclusive = (value / 4) % 2 == 0;
    let unit = 1u128 << shift;

    let mut power = 1u128;
    for places in 1..=17u32 {
        power *= 10;
        let low_scaled = low * power;
        let high_scaled = high * power;
        let mut d_low = low_scaled.div_ceil(unit);
        if !inclusive && d_low * unit == low_scaled {
            d_low += 1;
        }
        let mut d_high = high_scaled / unit;
        if !inclusive && d_high * unit == high_scaled {
            d_high -= 1;
        }
        if d_low > d_high {
            continue;
        }
        // The nearest d to x * 10^places, ties to even, kept inside.
        let value_scaled = value * power;
        let mut nearest = value_scaled / unit;
        let remainder = value_scaled % unit;
        if remainder * 2 > unit || (remainder * 2 == unit && nearest % 2 == 1) {
            nearest += 1;
        }
        let d = nearest.clamp(d_low, d_high);
        return write_java_decimal(d, places, out);
    }
    unreachable!("9 significant digits always identify a float")
}

/// Writes `d * 10^-places` (0 < value < 10) in Java's layout.
fn write_java_decimal(mut d: u128, mut places: u32, out: &mut [u8; UNIT_FLOAT_BYTES_MAX]) -> usize {
    debug_assert!(d > 0);
    while d.is_multiple_of(10) && places > 0 {
        d /= 10;
        places -= 1;
    }
    let mut digits = [0u8; 40];
    let mut count = 0;
    while d > 0 {
        digits[count] = b'0' + u8::try_from(d % 10).expect("a digit");
        d /= 10;
        count += 1;
    }
    digits[..count].reverse();
    let digits = &digits[..count];
    // x = 0.digits... with `places` places: the first digit's exponent.
    let exponent = i64::try_from(count).expect("few digits") - i64::from(places) - 1;
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    if exponent >= 0 {
        // Only 1.0 can get here (x < 1 rounds to at most 1).
        put(b"1.0");
    } else if exponent >= -3 {
        put(b"0.");
        for _ in 0..(-exponent - 1) {
            put(b"0");
        }
        put(digits);
    } else {
        put(&digits[..1]);
        put(b".");
        if digits.len() > 1 {
            put(&digits[1..]);
        } else {
            put(b"0");
        }
        put(b"E-");
        let magnitude = u8::try_from(-exponent).expect("exponent above -46");
        if magnitude >= 10 {
            put(&[b'0' + magnitude / 10]);
        }
        put(&[b'0' + magnitude % 10]);
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed by OpenJDK 17.0.15's `Float.toString` (2026-11-21).
    const JAVA: &[(f32, &str)] = &[
        (0.0, "0.0"),
        (0.35, "0.35"),
        (0.1, "0.1"),
        (0.001, "0.001"),
        (9.999_999e-4, "9.999999E-4"),
        (1.188_516_6e-4, "1.1885166E-4"),
        (0.115_967_035, "0.115967035"),
        (1e-4, "1.0E-4"),
        (5.960_464_5e-8, "5.9604645E-8"),
        (0.999_999_94, "0.99999994"),
        // Exact ties (k / 2^24 with few bits): Java keeps the even digit.
        (4_096.0 / 16_777_216.0, "2.4414062E-4"),
        (40_960.0 / 16_777_216.0, "0.0024414062"),
        (278_528.0 / 16_777_216.0, "0.016601562"),
    ];

    #[test]
    fn reference_matches_java() {
        for &(x, java) in JAVA {
            assert_eq!(java_float_reference(x), java, "{x:e}");
        }
    }

    fn fast(x: f32) -> String {
        let mut out = [0u8; UNIT_FLOAT_BYTES_MAX];
        let len = write_unit_float(x, &mut out);
        String::from_utf8(out[..len].to_vec()).expect("ascii")
    }

    #[test]
    fn fast_matches_java_table() {
        for &(x, java) in JAVA {
            assert_eq!(fast(x), java, "{x:e}");
        }
    }

    #[test]
    #[should_panic(expected = "[2^-24, 1)")]
    fn fast_refuses_values_java_prints_differently() {
        fast(1.234_567_9e8);
    }

    #[test]
    fn fast_matches_reference_on_the_nextfloat_grid() {
        // Every 61st k / 2^24 plus the smallest ones, where E notation and
        // the widest shifts live (the full grid was checked against Java).
        let ks = (0..(1u32 << 24)).step_by(61).chain(0..20_000);
        for k in ks {
            #[expect(clippy::cast_precision_loss, reason = "k < 2^24 is exact")]
            let x = k as f32 / 16_777_216.0;
            assert_eq!(fast(x), java_float_reference(x), "k = {k}");
        }
    }

    #[test]
    fn fast_matches_reference_on_other_floats_in_range() {
        // Floats in [2^-24, 1) that are not on the nextFloat grid: every
        // 997th bit pattern.
        let first = UNIT_FAST_MIN.to_bits();
        let last = 1.0f32.to_bits();
        for bits in (first..last).step_by(997) {
            let x = f32::from_bits(bits);
            assert_eq!(fast(x), java_float_reference(x), "{bits:#x}");
        }
    }
}
