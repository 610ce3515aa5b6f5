//! Cardinality from the register-value histogram.
//!
//! Both estimators read only `counts[k]`, the number of registers holding
//! value `k` (`0..=top`), so a sparse sketch never expands to `m` registers to
//! be estimated.
//!
//! - [`ak_cardinality`] is the estimator of java-hll and postgresql-hll
//!   (Flajolet et al. 2007 with AK's small- and large-range corrections), as
//!   `specs/hll-storage.md` gives it. Only for parity with those numbers: its
//!   linear-counting switch at `2.5 m` leaves a bias bump, and its large-range
//!   correction is ad hoc.
//! - [`ertl_estimate`] is Ertl's improved raw estimator (O. Ertl, "New
//!   cardinality estimation algorithms for HyperLogLog sketches",
//!   arXiv:1702.01284, section 4, algorithm 6), unbiased from 0 to beyond
//!   2^64 / m without tables. Its relative standard error is
//!   `sqrt(3 ln 2 - 1) / sqrt(m)` (section 3.1, equation (3)), about
//!   `1.04 / sqrt(m)`: 2.3% for m = 2048.
//!
//! In Ertl's notation a register takes values `0..=q+1`, where `q + 1` means
//! "at least `q + 1`". With AK hashing the value is `trailing_zeros(w) + 1`
//! for the `64 - log2m` bits of `w`, capped at `top = 2^regwidth - 1`, so
//! `q = min(top - 1, 64 - log2m)`: for (11, 5) the cap binds (`q = 30`), and
//! for regwidth 8 the hash length does (`q = 53`, and value `q + 1` never
//! occurs because `w == 0` sets nothing).

use crate::{CONFIDENCE_DEFAULT, Estimate, Z_95};

/// Counts register values into `counts` (length `top + 1`).
pub(super) fn histogram_dense(registers: &[u8], counts: &mut [u64]) {
    // Clearing the sub-histograms is a large part of the cost for m = 2048,
    // so size them for the register width: 64 values cover regwidth <= 6.
    if counts.len() <= 64 {
        histogram_dense_sized::<64>(registers, counts);
    } else {
        histogram_dense_sized::<256>(registers, counts);
    }
    // A register above `top` would be lost here: the caller guarantees none.
    debug_assert_eq!(counts.iter().sum::<u64>(), registers.len() as u64);
}

fn histogram_dense_sized<const VALUES: usize>(registers: &[u8], counts: &mut [u64]) {
    debug_assert!(counts.len() <= VALUES);
    // Four interleaved sub-histograms break the store-to-load dependency
    // between neighbouring registers of equal value. u32 counts suffice
    // because each sees at most m / 4 <= 2^29 registers.
    let mut partial = [[0u32; VALUES]; 4];
    let mut chunks = registers.chunks_exact(4);
    for chunk in &mut chunks {
        partial[0][usize::from(chunk[0])] += 1;
        partial[1][usize::from(chunk[1])] += 1;
        partial[2][usize::from(chunk[2])] += 1;
        partial[3][usize::from(chunk[3])] += 1;
    }
    for &r in chunks.remainder() {
        partial[0][usize::from(r)] += 1;
    }
    for (k, count) in counts.iter_mut().enumerate() {
        *count = partial.iter().map(|p| u64::from(p[k])).sum();
    }
}

/// java-hll's `HLL.cardinality()` for a register set.
pub(super) fn ak_cardinality(counts: &[u64], log2m: u8, regwidth: u8) -> f64 {
    let m = (1u64 << log2m) as f64;
    let alpha = match log2m {
        4 => 0.673,
        5 => 0.697,
        6 => 0.709,
        _ => 0.7213 / (1.0 + 1.079 / m),
    };
    let sum: f64 = counts
        .iter()
        .enumerate()
        .map(|(k, &c)| c as f64 * (-(k as f64)).exp2())
        .sum();
    let zeros = counts[0];
    let estimate = alpha * m * m / sum;
    if zeros > 0 && estimate < 2.5 * m {
        return m * (m / zeros as f64).ln();
    }
    // L = (2^regwidth - 2) + log2m bits of hash the registers can express.
    let two_to_l = (((1u32 << regwidth) - 2 + u32::from(log2m)) as f64).exp2();
    if estimate <= two_to_l / 30.0 {
        estimate
    } else {
        -two_to_l * (1.0 - estimate / two_to_l).ln()
    }
}

/// Ertl's improved raw estimator with a 95% interval of the asymptotic
/// relative error `sqrt(3 ln 2 - 1) / sqrt(m)` (about `1.04 / sqrt(m)`)
/// at every count: what `Hll::estimate` and `cardinal run` print. Below
/// about `10 m` the true error is smaller and this interval is wide (it
/// covered 99.8% of the time at `n = m / 7`); see [`ertl_calibrated`].
pub(super) fn ertl_estimate(counts: &[u64], log2m: u8) -> Estimate {
    let (value, filled, m, _) = ertl_value(counts, log2m);
    let relative_error = (3.0 * std::f64::consts::LN_2 - 1.0).sqrt() / m.sqrt();
    interval(value, filled, Z_95 * relative_error * value)
}

/// Ertl's improved raw estimator with a calibrated 95% interval: `1.96`
/// times [`standard_error`] at the estimate, times the measured
/// [`EFFICIENCY`] of the estimator.
pub(super) fn ertl_calibrated(counts: &[u64], log2m: u8) -> Estimate {
    let (value, filled, m, q) = ertl_value(counts, log2m);
    interval(
        value,
        filled,
        Z_95 * EFFICIENCY * standard_error(value, m, q),
    )
}

/// The measured standard deviation of Ertl's estimator over the
/// Cramér-Rao bound [`standard_error`]: 0.99 to 1.022, mean 1.013, at
/// n = 300 to 10^5 with m = 2048 (2,000 sketches each,
/// `tests/calibration.rs`, `hll_sd_probe`). The estimator is efficient
/// asymptotically, not exactly.
const EFFICIENCY: f64 = 1.015;

/// The estimate, the registers proven filled, `m` and `q`.
fn ertl_value(counts: &[u64], log2m: u8) -> (f64, f64, f64, usize) {
    let top = counts.len() - 1;
    assert!(top >= 1, "a register holds at least one bit");
    let q = (top - 1).min(64 - usize::from(log2m));
    let m = (1u64 << log2m) as f64;
    let saturated = counts[q + 1..].iter().sum::<u64>() as f64;
    let mut z = m * tau(1.0 - saturated / m);
    for k in (1..=q).rev() {
        z = 0.5 * (z + counts[k] as f64);
    }
    z += m * sigma(counts[0] as f64 / m);
    let alpha_infinity = 1.0 / (2.0 * std::f64::consts::LN_2);
    // At least one distinct hash hit each non-zero register, so the count
    // is proven to be at least `filled`. The raw estimate can fall below it
    // for few values; it is raised to it, so that the interval, which
    // starts at `filled`, always holds the estimate.
    let filled = m - counts[0] as f64;
    let value = (alpha_infinity * m * m / z).max(filled);
    (value, filled, m, q)
}

/// `value` +/- `spread`, the lower bound no lower than `filled`.
fn interval(value: f64, filled: f64, spread: f64) -> Estimate {
    // `max` keeps `filled` when the subtraction is NaN (infinite value).
    let lower = (value - spread).max(filled);
    let upper = value + spread;
    debug_assert!(lower <= value && value <= upper, "{lower} {value} {upper}");
    Estimate {
        value,
        lower,
        upper,
        confidence: CONFIDENCE_DEFAULT,
    }
}

/// The standard error of an estimate `n` from `m` registers of values
/// `0..=q+1`: the Cramér-Rao bound of the Poisson model at `lambda = n / m`
/// (Ertl, section 2), less the Poisson variance of the count itself (`n`),
/// because the count is fixed, not drawn: `sqrt(m / I(lambda) - n)`, where
/// `I` is the Fisher information of one register.
///
/// Ertl's estimator is nearly efficient ([`EFFICIENCY`]), so this is about its error: `1.04 n / sqrt(m)`
/// for `n` well above `m` (`sqrt(3 ln 2 - 1)`, eq. (3)), and less below,
/// where the registers act as linear counting (`0.72 n / sqrt(m)` at
/// `n = m / 7`, where the constant 1.04 gave intervals that covered 99.8%
/// of the time). Measured coverage is in the module docs of `hll`.
fn standard_error(n: f64, m: f64, q: usize) -> f64 {
    if !n.is_finite() || n <= 0.0 {
        return 0.0;
    }
    let lambda = n / m;
    // Register value k <= j with probability exp(-lambda / 2^j), j <= q;
    // value q + 1 means at least q + 1. Terms: p_k'^2 / p_k.
    let term = |p: f64, dp: f64| if p > 0.0 { dp * dp / p } else { 0.0 };
    let mut information = term((-lambda).exp(), -(-lambda).exp());
    for k in 1..=q {
        let scale = (k as f64).exp2();
        let a = lambda / scale;
        let p = (-a).exp() * -(-a).exp_m1();
        let dp = -(-a).exp() / scale + 2.0 * (-2.0 * a).exp() / scale;
        information += term(p, dp);
    }
    let scale = (q as f64).exp2();
    let a = lambda / scale;
    information += term(-(-a).exp_m1(), (-a).exp() / scale);
    if information <= 0.0 || !information.is_finite() {
        // Beyond the registers' range: the asymptotic error.
        return (3.0 * std::f64::consts::LN_2 - 1.0).sqrt() * n / m.sqrt();
    }
    (m / information - n).max(0.0).sqrt()
}

/// sigma(x) = x + sum_{k>=1} x^(2^k) 2^(k-1) (Ertl, eq. (16)); infinite at 1.
fn sigma(mut x: f64) -> f64 {
    debug_assert!((0.0..=1.0).contains(&x));
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

/// tau(x) = (1 - x - sum_{k>=1} (1 - x^(2^-k))^2 2^-k) / 3 (Ertl, eq. (17)).
fn tau(mut x: f64) -> f64 {
    debug_assert!((0.0..=1.0).contains(&x));
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_registers_estimate_zero() {
        let counts = [2048, 0, 0];
        assert_eq!(ertl_estimate(&counts, 11).value, 0.0);
        assert_eq!(ak_cardinality(&counts, 11, 2), 0.0);
    }

    #[test]
    fn one_register_hit_estimates_about_one() {
        let mut counts = vec![0u64; 32];
        counts[0] = 2047;
        counts[1] = 1;
        let e = ertl_estimate(&counts, 11);
        assert!((e.value - 1.0).abs() < 0.01, "{e:?}");
        assert_eq!(e.lower, 1.0);
    }

    proptest::proptest! {
        /// Any histogram of any precision and width, as registers filled by
        /// any number of values: the interval holds the estimate, which is
        /// at least the registers proven filled.
        #[test]
        fn interval_contains_estimate(
            log2m in 4u8..=31,
            regwidth in 1u8..=8,
            weights in proptest::collection::vec(0u64..1_000_000, 256),
            zero_share in 0u64..=1_000_000,
        ) {
            let top = (1usize << regwidth) - 1;
            let m = 1u64 << log2m;
            // Zeros take `zero_share` millionths of the registers, values
            // 1..=top the rest in proportion to their weights.
            let mut counts = vec![0u64; top + 1];
            // m <= 2^31 and shares below 2^20: the products fit in a u64.
            counts[0] = m * zero_share / 1_000_000;
            let total: u64 = weights[1..=top].iter().sum::<u64>().max(1);
            let mut left = m - counts[0];
            for k in 1..=top {
                let share = (m - counts[0]) * weights[k] / total;
                counts[k] = share.min(left);
                left -= counts[k];
            }
            counts[top] += left;
            let e = ertl_estimate(&counts, log2m);
            let filled = (m - counts[0]) as f64;
            proptest::prop_assert!(
                e.lower <= e.value && e.value <= e.upper && filled <= e.value,
                "{:?} {:?}", counts, e
            );
        }
    }

    #[test]
    fn sigma_and_tau_edges() {
        assert_eq!(sigma(0.0), 0.0);
        assert!(sigma(1.0).is_infinite());
        assert_eq!(tau(0.0), 0.0);
        assert_eq!(tau(1.0), 0.0);
        assert!(tau(0.5) > 0.0);
    }
}
