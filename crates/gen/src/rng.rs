//! Random numbers and the distributions the generators draw from.
//!
//! Everything is built on SplitMix64 (Steele, Lea, Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014): one 64-bit add and a
//! bijective finaliser per output. It is not cryptographic and does not need
//! to be; it is fast, seedable, and its finaliser doubles as the bijection
//! that scatters user indexes over the u64 space ([`id_of`]).
//!
//! Distributions:
//!
//! | type | draws | cost per draw |
//! |---|---|---|
//! | [`SplitMix64::below`] | uniform integer in `0..n` (Lemire's multiply-shift, bias < n / 2^64) | one multiply |
//! | [`SplitMix64::normal`] | standard normal (Box-Muller) | ln, sqrt, cos |
//! | [`Zipf`] | Zipf over `1..=n`, any n, no table (rejection-inversion) | ~1.1 iterations of a few exp/ln |
//! | [`Cumulative`] | a small weighted table (states, sites, campaigns) | binary search |
//! | [`poisson`] | Poisson(mean) | inversion below 30, normal approximation above |
//!
//! Results are the same bytes for the same seed on one platform. The Zipf
//! and normal draws go through the platform's `exp`/`ln`, so another libm
//! could in principle round one draw differently.

/// SplitMix64's state increment, the golden ratio in 64 bits.
pub const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64: a tiny, fast, seedable generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose first output depends on every bit of `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    #[expect(
        clippy::should_implement_trait,
        reason = "a generator is not an iterator: it never ends"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SPLITMIX_GAMMA);
        mix(self.0)
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn unit(&mut self) -> f64 {
        unit_of(self.next())
    }

    /// Uniform in `0..n` by Lemire's multiply-shift (the high half of a
    /// 64x64-bit product): no division, bias below n / 2^64.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no value to return");
        high_product(self.next(), n)
    }

    /// A standard normal draw by Box-Muller (one of the pair; the other is
    /// dropped so that the stream stays a plain function of the state).
    pub fn normal(&mut self) -> f64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// SplitMix64's finaliser: a bijection on u64 that mixes every input bit
/// into every output bit.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `index`-th output of the SplitMix64 sequence started at `seed`.
/// For a fixed seed this is a bijection of `index` (the state steps by an odd
/// constant and [`mix`] is a bijection), so distinct indexes give distinct
/// ids, scattered over the whole u64 space rather than packed in `0..n`.
pub fn id_of(index: u64, seed: u64) -> u64 {
    mix(seed
        .wrapping_add(index.wrapping_mul(SPLITMIX_GAMMA))
        .wrapping_add(SPLITMIX_GAMMA))
}

/// `bits` mapped to [0, 1) with 53-bit resolution.
pub fn unit_of(bits: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (bits >> 11) as f64 * SCALE
}

/// The high 64 bits of `a * b`: uniform in `0..b` when `a` is uniform.
pub fn high_product(a: u64, b: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) >> 64) as u64
}

/// Zipf's law over the ranks `1..=n`: P(k) proportional to k^-s.
///
/// Sampled by rejection-inversion (Hörmann and Derflinger, "Rejection-
/// inversion to generate variates from monotone discrete distributions",
/// ACM TOMACS 6(3), 1996), which needs no table, so `n` can be a billion
/// users. The helper functions follow section 4 of the paper, written with
/// `ln_1p`/`exp_m1` so that the exponent s = 1 needs no special case.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    squeeze: f64,
}

impl Zipf {
    /// Zipf over `1..=n` with exponent `s`.
    ///
    /// # Panics
    ///
    /// If `n` is 0 or `s` is not positive and finite.
    pub fn new(n: u64, exponent: f64) -> Self {
        assert!(n > 0, "Zipf needs at least one rank");
        assert!(
            exponent > 0.0 && exponent.is_finite(),
            "Zipf exponent must be positive"
        );
        let n = n as f64;
        let mut zipf = Self {
            n,
            exponent,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(n + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// One rank in `1..=n`.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "x + 0.5 is clamped to [1, n] and n came from a u64"
    )]
    pub fn sample(&self, rng: &mut SplitMix64) -> u64 {
        loop {
            let u = self.h_integral_n + rng.unit() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                let rank = k as u64;
                debug_assert!(rank >= 1);
                return rank;
            }
        }
    }

    /// h(x) = x^-s, the unnormalised density.
    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    /// H(x) = the integral of h, (x^(1-s) - 1) / (1 - s), and ln x at s = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let ln_x = x.ln();
        exp_m1_over_x((1.0 - self.exponent) * ln_x) * ln_x
    }

    /// The inverse of [`Self::h_integral`].
    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (ln_1p_over_x(t) * x).exp()
    }
}

/// ln(1 + x) / x, continuous at 0.
fn ln_1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x / 3.0)
    }
}

/// (e^x - 1) / x, continuous at 0.
fn exp_m1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0)
    }
}

/// A discrete distribution over a small table, as cumulative weights.
#[derive(Debug, Clone)]
pub struct Cumulative {
    /// Running sums of the weights; the last is the total.
    sums: Vec<u64>,
}

impl Cumulative {
    /// The distribution with these (integer) weights.
    ///
    /// # Panics
    ///
    /// If there are no weights or they sum to 0.
    pub fn new(weights: impl IntoIterator<Item = u64>) -> Self {
        let mut total = 0u64;
        let sums: Vec<u64> = weights
            .into_iter()
            .map(|w| {
                total = total.checked_add(w).expect("weights sum below 2^64");
                total
            })
            .collect();
        assert!(total > 0, "weights must not all be zero");
        Self { sums }
    }

    /// Zipf weights k^-s for k = 1..=n, in millionths.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "weights are in (0, 1e9]: they fit"
    )]
    pub fn zipf(n: usize, exponent: f64) -> Self {
        Self::new((1..=n).map(|k| ((k as f64).powf(-exponent) * 1e9).ceil() as u64))
    }

    /// The index drawn by 64 uniform random bits.
    pub fn index_of(&self, bits: u64) -> usize {
        let total = *self.sums.last().expect("new checks the table is not empty");
        let target = high_product(bits, total);
        let index = self.sums.partition_point(|&sum| sum <= target);
        debug_assert!(index < self.sums.len());
        index
    }

    /// How many entries the table has.
    pub fn len(&self) -> usize {
        self.sums.len()
    }

    /// Always false: `new` refuses empty tables.
    pub fn is_empty(&self) -> bool {
        self.sums.is_empty()
    }
}

/// A Poisson(mean) draw: inversion by sequential search for small means
/// (one uniform, about `mean` steps), the normal approximation rounded to
/// the nearest non-negative integer above [`POISSON_INVERSION_MEAN_MAX`]
/// (there the skew is below 0.2 and the generators only need the shape).
#[expect(
    clippy::cast_possible_truncation,
    reason = "the approximation is clamped to [0, 2^53]"
)]
pub fn poisson(rng: &mut SplitMix64, mean: f64) -> u64 {
    assert!(
        mean >= 0.0 && mean.is_finite(),
        "Poisson mean must be finite"
    );
    if mean > POISSON_INVERSION_MEAN_MAX {
        let draw = (mean + mean.sqrt() * rng.normal()).round();
        return draw.clamp(0.0, (1u64 << 53) as f64) as u64;
    }
    let mut u = rng.unit();
    let mut p = (-mean).exp();
    let mut k = 0u64;
    // The search stops once the cdf passes u; the step cap only guards
    // against rounding leaving u above the cdf's float limit.
    while u > p && k < POISSON_STEPS_MAX {
        u -= p;
        k += 1;
        p *= mean / k as f64;
    }
    k
}

/// Above this mean, [`poisson`] uses the normal approximation.
pub const POISSON_INVERSION_MEAN_MAX: f64 = 30.0;
/// Steps of the inversion search: far beyond any plausible draw at mean 30.
const POISSON_STEPS_MAX: u64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_of_is_injective_on_a_range() {
        let mut ids: Vec<u64> = (0..100_000).map(|i| id_of(i, 7)).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 100_000);
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64::new(1);
        for n in [1, 2, 3, 50, 1_000_000] {
            for _ in 0..1_000 {
                assert!(rng.below(n) < n);
            }
        }
    }

    #[test]
    fn zipf_rank_one_has_its_share() {
        // s = 1, n = 1000: P(1) = 1 / H_1000 = 0.1336. Over 200,000 draws the
        // standard error of the share is 0.00076; allow 5 of them.
        for exponent in [1.0, 0.8] {
            let zipf = Zipf::new(1_000, exponent);
            let mut rng = SplitMix64::new(3);
            let draws = 200_000;
            let mut ones = 0;
            for _ in 0..draws {
                let k = zipf.sample(&mut rng);
                assert!((1..=1_000).contains(&k));
                ones += u32::from(k == 1);
            }
            let harmonic: f64 = (1..=1_000).map(|k| f64::from(k).powf(-exponent)).sum();
            let expected = 1.0 / harmonic;
            let share = f64::from(ones) / f64::from(draws);
            assert!(
                (share - expected).abs() < 0.004,
                "{exponent}: {share} vs {expected}"
            );
        }
    }

    #[test]
    fn cumulative_follows_weights() {
        let table = Cumulative::new([1, 0, 3]);
        let mut rng = SplitMix64::new(9);
        let mut counts = [0u32; 3];
        for _ in 0..40_000 {
            counts[table.index_of(rng.next())] += 1;
        }
        assert_eq!(counts[1], 0);
        // Expected 10,000 and 30,000; the standard error is ~87.
        assert!((9_500..10_500).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn poisson_mean_is_right() {
        let mut rng = SplitMix64::new(5);
        for mean in [0.5, 8.4, 100.0] {
            let n = 20_000u32;
            let sum: u64 = (0..n).map(|_| poisson(&mut rng, mean)).sum();
            let average = sum as f64 / f64::from(n);
            // Standard error sqrt(mean / n); allow 5 of them.
            let tolerance = 5.0 * (mean / f64::from(n)).sqrt();
            assert!((average - mean).abs() < tolerance, "{mean}: {average}");
        }
    }
}
