//! Joint maximum-likelihood estimation of |A ∩ B| from two HyperLogLogs.
//!
//! Inclusion-exclusion (`|A| + |B| - |A ∪ B|` from three single-sketch
//! estimates) carries the error of the union, so a small overlap drowns in
//! it. This module instead fits one model to both register arrays at once,
//! following O. Ertl, "New cardinality estimation algorithms for HyperLogLog
//! sketches", arXiv:1702.01284 (2017), the section on joint estimation of two
//! sketches built with the same parameters and hash.
//!
//! # Notation
//!
//! - `m`: the number of registers (both sketches must share `log2m`).
//! - `top`: the saturated register value, `2^regwidth - 1`
//!   (`value_max` in code). A register holds `0..=top`.
//! - `K_A(j)`, `K_B(j)`: the value of register `j` in sketch A and B.
//! - `λa`, `λb`, `λx`: the rates of the three disjoint parts A \ B, B \ A
//!   and A ∩ B (`a`, `b`, `x` in code). The estimate of |A ∩ B| is `λx`.
//!
//! # The per-register distribution (AK hashing, Poissonization)
//!
//! An element with 64-bit hash `h` goes to register `j = h & (m - 1)` and
//! offers the value `p = trailing_zeros(h >> log2m) + 1`, capped at `top`
//! (see `specs/hll-storage.md`). For `1 <= k < top`,
//! `P(p = k) = 2^-k`, so `P(p > k) = 2^-k` for `0 <= k < top`, and
//! `P(p > top) = 0` because of the cap: the value `top` means "at least
//! `top`", and only `q = top - 1` levels are geometric (Ertl's `q`).
//!
//! Let the number of elements be Poisson with mean `λ` (Poissonization:
//! Ertl's statistical model; the error it adds is negligible for `λ >> 1`). Each
//! register then receives an independent Poisson(`λ/m`) number of elements,
//! and the number of those that offer a value `> k` is Poisson with mean
//! `λ/m · P(p > k)`. The register is `<= k` exactly when there are none:
//!
//! ```text
//! F_λ(k) = P(K <= k) = exp(-λ/m · 2^-k)   for 0 <= k < top
//! F_λ(top) = 1,   F_λ(-1) = 0
//! ```
//!
//! Writing `F_λ(k) = exp(-λ α_k)` with `α_k = 2^-k / m` (`α_top = 0`) and
//! `F_λ(k - 1) = F_λ(k) · exp(-λ β_k)` with `β_k = α_{k-1} - α_k`
//! (`β_k = 2^-k/m` for `1 <= k < top`, `β_top = 2^-(top-1)/m`,
//! `β_0 = ∞`), the probability of one register value is
//!
//! ```text
//! g_λ(k) = P(K = k) = F_λ(k) - F_λ(k-1) = exp(-λ α_k) · (1 - exp(-λ β_k))
//! ```
//!
//! # The joint distribution of a register pair
//!
//! Register `j` of A is the maximum of the values offered by A \ B and
//! A ∩ B, and register `j` of B the maximum of those offered by B \ A and
//! A ∩ B. The three maxima `M_a`, `M_b`, `M_x` are independent with CDFs
//! `F_λa`, `F_λb`, `F_λx`, and `K_A = max(M_a, M_x)`, `K_B = max(M_b, M_x)`,
//! so `P(K_A <= u, K_B <= v) = F_λa(u) F_λb(v) F_λx(min(u, v))`. Hence:
//!
//! - `K_A = i < K_B = k`: then `M_x <= i < k`, so `M_b = k` and
//!   `max(M_a, M_x) = i`: probability `g_{λa+λx}(i) · g_λb(k)`.
//! - `K_A = i > K_B = k`: symmetric, `g_λa(i) · g_{λb+λx}(k)`.
//! - `K_A = K_B = k`: by inclusion-exclusion over the four corners,
//!   `h(k) = exp(-(λa+λb+λx) α_k) · φ_k` with
//!
//! ```text
//! φ_k = 1 - e^{-(λa+λx) β_k} - e^{-(λb+λx) β_k} + e^{-(λa+λb+λx) β_k}
//!     = (1 - e^{-(λa+λx) β_k}) (1 - e^{-(λb+λx) β_k})
//!       + e^{-(λa+λb+2λx) β_k} (e^{λx β_k} - 1)
//! ```
//!
//! The second form is a sum of non-negative terms and is what the code
//! evaluates (with `expm1`), so `φ_k` keeps its relative precision when it
//! is tiny. `β_0 = ∞` gives `φ_0 = 1`.
//!
//! The log-likelihood is therefore a function of five count vectors only
//! (Ertl's `C_{1<}`, `C_{1>}`, `C_{2<}`, `C_{2>}`, `C_=`), built in one pass
//! over the register pairs ([`PairCounts`]):
//!
//! ```text
//! ln L = Σ_k C_{1<}(k) ln g_{λa+λx}(k) + C_{1>}(k) ln g_λa(k)
//!      + C_{2<}(k) ln g_{λb+λx}(k) + C_{2>}(k) ln g_λb(k) + C_=(k) ln h(k)
//! ```
//!
//! where `C_{1<}(k)` counts registers with `K_A = k < K_B`, `C_{2>}(k)` those
//! with `K_A < K_B = k`, and so on. Gradient and Hessian are analytic
//! (`d/dλ ln(1 - e^{-λβ}) = β / expm1(λβ)`, and for `ln φ` the usual
//! `φ''/φ - φ'φ'^T/φ²`; every entry of `φ'` is non-negative and every
//! entry of `φ''` but `∂²φ/∂λa∂λb = β² e^{-(λa+λb+λx)β}` is non-positive, so
//! only that cross term can cancel).
//!
//! # Fitting and intervals
//!
//! The maximum over `λ >= 0` is found by Newton's method on `θ = ln λ`
//! (where each single-rate term `-λα + ln(1 - e^{-λβ})` is concave:
//! its `θ`-derivative `-λα + λβ / expm1(λβ)` decreases in `λ`), with a
//! backtracking line search, steps capped at `e^3` per iteration, and a box
//! `RATE_MIN <= λ`: a coordinate that the gradient pushes into the floor is
//! held there and reported as exactly 0. The first start is the
//! inclusion-exclusion solution (clamped into the feasible region); a second
//! start on the other side of the overlap range is cheap insurance against a
//! second local maximum, and the better of the two is kept.
//!
//! The 95% interval of `λx` is the profile-likelihood interval
//!
//! ```text
//! { u >= 0 : ln L̂ - max_{λa, λb} ln L(λa, λb, u) <= χ²₁(0.95) / 2 = 1.9207 }
//! ```
//!
//! the inversion of the likelihood-ratio test of `λx = u`. The profile is
//! unimodal, so the set is an interval around `λ̂x`; its lower end is 0, and
//! the answer [`Estimate::below_detection_limit`], exactly when the drop at
//! `u = 0` is within the limit. The same cut holds on both sides and whether
//! or not `λ̂x` is on the boundary: for every `u > 0` the true value is
//! interior and the statistic is asymptotically χ²₁ wherever the estimate
//! lands. Only the test of `u = 0` itself has the null distribution
//! ½χ²₀ + ½χ²₁ (Self and Liang, JASA 82, 1987), whose 95% point is 2.706;
//! the profile is continuous in `u`, so that changes nothing but the single
//! point 0, and "below detection limit" is a test of `λx = 0` at level 2.5%,
//! like the lower end of a Wald interval. In the normal limit (estimate
//! `max(Z, 0)` with `Z ~ N(u, 1)`) this interval covers at least 95% at
//! every `u`: a miss below needs `Z < -(u² + 3.84) / (2u) <= -1.96`. A
//! one-sided bound with the 2.706 / 2 drop when `λ̂x = 0` (the earlier rule
//! here) covers only 92.5% at `u = 1.645` standard errors, and the Wald
//! interval is worse just above the boundary, where the likelihood in `λx`
//! is skewed; the profile interval follows that skew and is close to Wald
//! far from 0 (`λ̂ ± 1.96 sqrt([(-H)^{-1}]_ii)`, `H` the Hessian in `λ` at
//! the maximum).
//!
//! Each end is found by a bracket grown from the Wald end (doubling the
//! step) and the Illinois variant of regula falsi to a relative 10^-3 in
//! `λ`, returning the end of the final bracket just outside the interval.
//! Every point is a two-rate Newton fit with `λx` held, warm-started from
//! the previous one: a few fits per end, about 0.15 ms per call at
//! m = 8192.
//!
//! `λa` and `λb` keep the Wald interval (clamped at 0) when interior; on
//! their boundary (B ⊆ A, identical sketches) they get the same profile
//! interval, `[0, u]`. The union's interval is Wald on the sum, plus the
//! profile upper ends of coordinates on their boundary. (Optimizing in `θ`
//! changes none of this: at a stationary point `H_θ = D H_λ D` with
//! `D = diag(λ)`, so the delta method gives back the same variance.)
//!
//! # Measured
//!
//! At m = 8192 (log2m 13, regwidth 6), |B| = 10^6, the statistical benchmark
//! in `examples/intersections.rs` compares this with inclusion-exclusion over
//! the grid of `specs/intersections.md`; the numbers are in
//! `bench/README.md`.

// Maintainer notes.
//
// - The model assumes the AK hash-to-register rule of `specs/hll-storage.md`
//   (trailing zeros of `h >> log2m`, plus one, capped at `top`). If the
//   register rule ever changes (e.g. to leading zeros or a different cap),
//   `Level::new` is the one place that encodes it.
// - With log2m + regwidth large (13, 6) the cap `top` = 63 is unreachable:
//   `h >> log2m` has only 64 - log2m bits, so values above 64 - log2m never
//   occur. Those levels carry probability below 2^-50 and count 0, so they
//   do not move the fit; the model does not special-case them.
// - `fit` and `derivatives` share the term layout of `PairCounts`: a change
//   to one of the five vectors changes both, and `log_likelihood_reference`
//   in the tests.

use super::{Hll, Kind};
use crate::{CONFIDENCE_DEFAULT, Error, Estimate, Result, Sketch, Z_95};

/// Rates below this many elements are the boundary `λ = 0`: the fit never
/// goes lower, and a coordinate held here is reported as 0. One thousandth
/// of an element is far below anything a sketch can resolve, and keeps
/// `ln λ` finite.
pub const RATE_MIN: f64 = 1e-3;

/// Newton iterations per start. Measured fits converge in 5-15; the limit
/// only stops a pathological input (e.g. every register saturated, where the
/// likelihood keeps rising towards infinity).
pub const ITERATIONS_MAX: u32 = 200;

/// The largest step in `ln λ` per Newton iteration (a factor of e^3 ≈ 20).
const STEP_LOG_MAX: f64 = 3.0;

/// Half the 0.95 quantile of χ²₁: the drop in log-likelihood that bounds
/// the 95% profile-likelihood interval (see the module doc).
const PROFILE_DROP: f64 = 3.841_458_820_694_124 / 2.0;

/// The largest register value the format allows (regwidth 8).
pub const VALUE_MAX_MAX: u8 = 255;

const A: usize = 0;
const B: usize = 1;
const X: usize = 2;

/// Two register arrays of equal length, from sketches with the same
/// `log2m` and `regwidth`.
#[derive(Debug, Clone, Copy)]
pub struct RegisterPair<'r> {
    /// Sketch A's registers, `m` values in `0..=value_max`.
    pub a: &'r [u8],
    /// Sketch B's registers, `m` values in `0..=value_max`.
    pub b: &'r [u8],
    /// The saturated register value, `2^regwidth - 1` (`top`).
    pub value_max: u8,
}

/// Ertl's five count vectors, each indexed by register value `0..=top`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairCounts {
    /// The number of registers, `m`.
    pub m: u32,
    /// The saturated register value, `top`.
    pub value_max: u8,
    /// `C_{1<}(k)`: registers with `K_A = k < K_B`.
    pub a_below: Vec<u32>,
    /// `C_{1>}(k)`: registers with `K_A = k > K_B`.
    pub a_above: Vec<u32>,
    /// `C_{2<}(k)`: registers with `K_B = k < K_A`.
    pub b_below: Vec<u32>,
    /// `C_{2>}(k)`: registers with `K_B = k > K_A`.
    pub b_above: Vec<u32>,
    /// `C_=(k)`: registers with `K_A = K_B = k`.
    pub equal: Vec<u32>,
}

impl PairCounts {
    /// The register-value histogram of sketch A.
    pub fn histogram_a(&self) -> Vec<u32> {
        sum3(&self.a_below, &self.a_above, &self.equal)
    }

    /// The register-value histogram of sketch B.
    pub fn histogram_b(&self) -> Vec<u32> {
        sum3(&self.b_below, &self.b_above, &self.equal)
    }

    /// The register-value histogram of the union (register-wise maximum):
    /// the larger of a pair is `K_A` in `C_{1>}`, `K_B` in `C_{2>}`.
    pub fn histogram_union(&self) -> Vec<u32> {
        sum3(&self.a_above, &self.b_above, &self.equal)
    }

    /// Whether some register is non-zero in both sketches. If none is, no
    /// element of A ∩ B can exist (an element sets its register in both),
    /// except one whose hash leaves every register unchanged.
    pub fn any_shared_nonzero(&self) -> bool {
        // A pair with min(K_A, K_B) > 0 shows up with its smaller value at a
        // level k >= 1 in a_below, b_below or equal.
        let level = |counts: &[u32]| counts.iter().skip(1).any(|&c| c > 0);
        level(&self.a_below) || level(&self.b_below) || level(&self.equal)
    }
}

fn sum3(first: &[u32], second: &[u32], third: &[u32]) -> Vec<u32> {
    assert_eq!(first.len(), second.len());
    assert_eq!(first.len(), third.len());
    first
        .iter()
        .zip(second)
        .zip(third)
        .map(|((p, q), r)| p + q + r)
        .collect()
}

/// Builds the five count vectors in one pass over the register pairs.
///
/// # Panics
///
/// If the arrays differ in length, `m` is not a power of two, or a value
/// exceeds `value_max`.
pub fn pair_counts(pair: &RegisterPair<'_>) -> PairCounts {
    let m = pair.a.len();
    assert_eq!(m, pair.b.len(), "register arrays must have the same length");
    assert!(m.is_power_of_two(), "m = {m} must be a power of two");
    assert!(pair.value_max >= 1, "a register needs at least one bit");
    let levels = usize::from(pair.value_max) + 1;
    let mut counts = PairCounts {
        m: u32::try_from(m).expect("m <= 2^31 by the format's log2m limit"),
        value_max: pair.value_max,
        a_below: vec![0; levels],
        a_above: vec![0; levels],
        b_below: vec![0; levels],
        b_above: vec![0; levels],
        equal: vec![0; levels],
    };
    for (&ka, &kb) in pair.a.iter().zip(pair.b) {
        assert!(
            ka <= pair.value_max,
            "register value {ka} above {}",
            pair.value_max
        );
        assert!(
            kb <= pair.value_max,
            "register value {kb} above {}",
            pair.value_max
        );
        let (ka, kb) = (usize::from(ka), usize::from(kb));
        match ka.cmp(&kb) {
            std::cmp::Ordering::Less => {
                counts.a_below[ka] += 1;
                counts.b_above[kb] += 1;
            }
            std::cmp::Ordering::Greater => {
                counts.a_above[ka] += 1;
                counts.b_below[kb] += 1;
            }
            std::cmp::Ordering::Equal => counts.equal[ka] += 1,
        }
    }
    debug_assert_eq!(
        counts
            .equal
            .iter()
            .chain(&counts.a_below)
            .chain(&counts.a_above)
            .map(|&c| u64::from(c))
            .sum::<u64>(),
        m as u64
    );
    counts
}

/// The three rates of the model, in elements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// `λa`: |A \ B|.
    pub a_only: f64,
    /// `λb`: |B \ A|.
    pub b_only: f64,
    /// `λx`: |A ∩ B|.
    pub shared: f64,
}

impl Rates {
    fn to_array(self) -> [f64; 3] {
        [self.a_only, self.b_only, self.shared]
    }
}

/// The joint answer for two sketches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// |A ∩ B| with its 95% interval. When the interval reaches 0 the
    /// overlap is [below the detection limit](Estimate::below_detection_limit).
    pub intersection: Estimate,
    /// |A \ B|.
    pub a_only: Estimate,
    /// |B \ A|.
    pub b_only: Estimate,
    /// |A ∪ B| from the same fit (slightly better than a single-sketch
    /// estimate of the merged registers).
    pub union: Estimate,
    /// The inclusion-exclusion point estimate `|A| + |B| - |A ∪ B|` from
    /// Ertl's improved single-sketch estimator, kept for comparison. May be
    /// negative.
    pub inclusion_exclusion: f64,
}

/// One register level's constants: `F_λ(k) = exp(-λ α)`,
/// `F_λ(k-1) = F_λ(k) exp(-λ β)`; `β = ∞` for level 0.
#[derive(Debug, Clone, Copy)]
struct Level {
    alpha: f64,
    beta: f64,
}

impl Level {
    fn new(k: u8, value_max: u8, m: f64) -> Self {
        assert!(k <= value_max);
        let scale = |level: u8| (-f64::from(level)).exp2() / m;
        if k == 0 {
            Level {
                alpha: 1.0 / m,
                beta: f64::INFINITY,
            }
        } else if k < value_max {
            Level {
                alpha: scale(k),
                beta: scale(k),
            }
        } else {
            Level {
                alpha: 0.0,
                beta: scale(k - 1),
            }
        }
    }
}

/// A non-zero count at one level, ready for the likelihood loop.
#[derive(Debug, Clone, Copy)]
struct Term {
    count: f64,
    level: Level,
}

/// The count vectors reduced to their non-zero entries: the likelihood
/// evaluates only these (typically 20-30 levels per vector).
#[derive(Debug, Clone)]
struct Terms {
    a_below: Vec<Term>,
    a_above: Vec<Term>,
    b_below: Vec<Term>,
    b_above: Vec<Term>,
    equal: Vec<Term>,
}

impl Terms {
    fn new(counts: &PairCounts) -> Self {
        let m = f64::from(counts.m);
        let terms = |vector: &[u32]| -> Vec<Term> {
            (0..=counts.value_max)
                .zip(vector)
                .filter(|&(_, &count)| count > 0)
                .map(|(k, &count)| Term {
                    count: f64::from(count),
                    level: Level::new(k, counts.value_max, m),
                })
                .collect()
        };
        Terms {
            a_below: terms(&counts.a_below),
            a_above: terms(&counts.a_above),
            b_below: terms(&counts.b_below),
            b_above: terms(&counts.b_above),
            equal: terms(&counts.equal),
        }
    }
}

/// `ln(1 - e^{-y})` for `y > 0`, accurate at both ends (Mächler, "Accurately
/// computing log(1 - exp(-|a|))", 2012).
fn ln_one_minus_exp(y: f64) -> f64 {
    if y < std::f64::consts::LN_2 {
        (-(-y).exp_m1()).ln()
    } else {
        (-(-y).exp()).ln_1p()
    }
}

/// `ln g_λ(k)` and its first two derivatives in `λ`.
#[inline]
fn single_term(rate: f64, level: Level) -> (f64, f64, f64) {
    let mut value = -rate * level.alpha;
    let mut first = -level.alpha;
    let mut second = 0.0;
    if level.beta.is_finite() {
        let y = rate * level.beta;
        value += ln_one_minus_exp(y);
        let up = y.exp_m1();
        first += level.beta / up;
        second -= level.beta * level.beta / (up * -(-y).exp_m1());
    }
    (value, first, second)
}

/// `ln h(k)` alone (line searches need no derivatives).
#[inline]
fn equal_value(rates: [f64; 3], level: Level) -> f64 {
    let [a, b, x] = rates;
    let mut value = -(a + b + x) * level.alpha;
    if level.beta.is_finite() {
        let beta = level.beta;
        let phi = (-(-(a + x) * beta).exp_m1()) * (-(-(b + x) * beta).exp_m1())
            + (-(a + b + 2.0 * x) * beta).exp() * (x * beta).exp_m1();
        value += phi.ln();
    }
    value
}

/// The log-likelihood at `rates` (up to a constant).
fn log_likelihood_terms(terms: &Terms, rates: [f64; 3]) -> f64 {
    let [a, b, x] = rates;
    let single = |list: &[Term], rate: f64| -> f64 {
        list.iter()
            .map(|t| t.count * single_term(rate, t.level).0)
            .sum()
    };
    let mut total = single(&terms.a_below, a + x)
        + single(&terms.a_above, a)
        + single(&terms.b_below, b + x)
        + single(&terms.b_above, b);
    total += terms
        .equal
        .iter()
        .map(|t| t.count * equal_value(rates, t.level))
        .sum::<f64>();
    total
}

/// The log-likelihood of `counts` at `rates`, up to an additive constant.
pub fn log_likelihood(counts: &PairCounts, rates: Rates) -> f64 {
    log_likelihood_terms(&Terms::new(counts), rates.to_array())
}

/// Log-likelihood, gradient and Hessian in `λ` space.
#[derive(Debug, Clone, Copy)]
struct Derivatives {
    value: f64,
    gradient: [f64; 3],
    hessian: [[f64; 3]; 3],
}

fn derivatives(terms: &Terms, rates: [f64; 3]) -> Derivatives {
    let mut d = Derivatives {
        value: 0.0,
        gradient: [0.0; 3],
        hessian: [[0.0; 3]; 3],
    };
    // A single-rate term whose rate is the sum of the coordinates listed.
    let mut single = |list: &[Term], coordinates: &[usize]| {
        let rate: f64 = coordinates.iter().map(|&i| rates[i]).sum();
        for t in list {
            let (value, first, second) = single_term(rate, t.level);
            d.value += t.count * value;
            for &i in coordinates {
                d.gradient[i] += t.count * first;
                for &j in coordinates {
                    d.hessian[i][j] += t.count * second;
                }
            }
        }
    };
    single(&terms.a_below, &[A, X]);
    single(&terms.a_above, &[A]);
    single(&terms.b_below, &[B, X]);
    single(&terms.b_above, &[B]);

    let [a, b, x] = rates;
    for t in &terms.equal {
        let (count, Level { alpha, beta }) = (t.count, t.level);
        d.value -= count * (a + b + x) * alpha;
        for g in &mut d.gradient {
            *g -= count * alpha;
        }
        if !beta.is_finite() {
            continue;
        }
        let ua = -(-a * beta).exp_m1(); // 1 - e^{-a β}
        let ub = -(-b * beta).exp_m1();
        let p = (-(a + x) * beta).exp(); // e^{-(a+x) β}
        let q = (-(b + x) * beta).exp();
        let r = p * (-b * beta).exp(); // e^{-(a+b+x) β}
        let phi = (-(-(a + x) * beta).exp_m1()) * (-(-(b + x) * beta).exp_m1())
            + p * q * (x * beta).exp_m1();
        let first = [beta * p * ub, beta * q * ua, beta * (p + q * ua)];
        let b2 = beta * beta;
        let second = [
            [-b2 * p * ub, b2 * r, -b2 * p * ub],
            [b2 * r, -b2 * q * ua, -b2 * q * ua],
            [-b2 * p * ub, -b2 * q * ua, -b2 * (p + q * ua)],
        ];
        d.value += count * phi.ln();
        for i in 0..3 {
            d.gradient[i] += count * first[i] / phi;
            for j in 0..3 {
                d.hessian[i][j] += count * (second[i][j] / phi - first[i] * first[j] / (phi * phi));
            }
        }
    }
    d
}

/// Solves `matrix · solution = rhs` for a symmetric positive definite
/// `matrix` restricted to the coordinates in `free` (Cholesky). `None` if
/// the restricted matrix is not positive definite.
// The textbook index form of Cholesky reads better than iterator chains here.
#[allow(clippy::needless_range_loop)]
fn solve_positive_definite(
    matrix: &[[f64; 3]; 3],
    rhs: [f64; 3],
    free: [bool; 3],
) -> Option<[f64; 3]> {
    let index: Vec<usize> = (0..3).filter(|&i| free[i]).collect();
    let n = index.len();
    let mut lower = [[0.0; 3]; 3];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = matrix[index[i]][index[j]];
            for k in 0..j {
                sum -= lower[i][k] * lower[j][k];
            }
            if i == j {
                // Not positive definite (or NaN): no Newton step here.
                if sum.is_nan() || sum <= 0.0 || sum.is_infinite() {
                    return None;
                }
                lower[i][i] = sum.sqrt();
            } else {
                lower[i][j] = sum / lower[j][j];
            }
        }
    }
    let mut y = [0.0; 3];
    for i in 0..n {
        let mut sum = rhs[index[i]];
        for k in 0..i {
            sum -= lower[i][k] * y[k];
        }
        y[i] = sum / lower[i][i];
    }
    let mut z = [0.0; 3];
    for i in (0..n).rev() {
        let mut sum = y[i];
        for k in i + 1..n {
            sum -= lower[k][i] * z[k];
        }
        z[i] = sum / lower[i][i];
    }
    let mut solution = [0.0; 3];
    for (i, &coordinate) in index.iter().enumerate() {
        solution[coordinate] = z[i];
    }
    Some(solution)
}

/// The inverse of `matrix` restricted to `free` (zero elsewhere), or `None`
/// if that block is not positive definite.
fn inverse_positive_definite(matrix: &[[f64; 3]; 3], free: [bool; 3]) -> Option<[[f64; 3]; 3]> {
    let mut inverse = [[0.0; 3]; 3];
    for j in (0..3).filter(|&j| free[j]) {
        let mut unit = [0.0; 3];
        unit[j] = 1.0;
        let column = solve_positive_definite(matrix, unit, free)?;
        for i in 0..3 {
            inverse[i][j] = column[i];
        }
    }
    Some(inverse)
}

/// A local maximum of the log-likelihood.
#[derive(Debug, Clone, Copy)]
struct Fit {
    rates: [f64; 3],
    log_likelihood: f64,
}

/// Newton's method on `θ = ln λ` within `[RATE_MIN, rate_max]`, holding the
/// coordinates in `fixed` at their start values.
fn fit(terms: &Terms, start: [f64; 3], fixed: [bool; 3], rate_max: f64) -> Fit {
    let theta_min = RATE_MIN.ln();
    let theta_max = rate_max.ln();
    assert!(theta_min < theta_max);
    let clamp = |theta: f64| theta.clamp(theta_min, theta_max);
    let mut theta = start.map(|rate| clamp(rate.max(RATE_MIN).ln()));
    let rates_of = |theta: [f64; 3]| theta.map(f64::exp);
    let mut current = derivatives(terms, rates_of(theta));
    for _ in 0..ITERATIONS_MAX {
        let rates = rates_of(theta);
        // Chain rule: ∂/∂θ_i = λ_i ∂/∂λ_i, and
        // ∂²/∂θ_i∂θ_j = λ_i λ_j ∂²/∂λ_i∂λ_j + δ_ij λ_i ∂/∂λ_i.
        let gradient: [f64; 3] = std::array::from_fn(|i| rates[i] * current.gradient[i]);
        let mut negative_hessian = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                negative_hessian[i][j] = -rates[i] * rates[j] * current.hessian[i][j];
            }
            negative_hessian[i][i] -= gradient[i];
        }
        // A coordinate on a bound whose gradient points outwards stays there.
        let free: [bool; 3] = std::array::from_fn(|i| {
            let held_low = theta[i] <= theta_min && gradient[i] <= 0.0;
            let held_high = theta[i] >= theta_max && gradient[i] >= 0.0;
            !fixed[i] && !held_low && !held_high
        });
        if !free.iter().any(|&f| f) {
            break;
        }
        let step = match solve_positive_definite(&negative_hessian, gradient, free) {
            Some(step) => step,
            // Not concave here (near a boundary with the gradient pointing
            // inwards): move along the gradient, scaled per coordinate by the
            // curvature where it is negative and by the step cap where not.
            None => std::array::from_fn(|i| {
                if !free[i] {
                    0.0
                } else if negative_hessian[i][i] > 0.0 {
                    gradient[i] / negative_hessian[i][i]
                } else {
                    STEP_LOG_MAX.copysign(gradient[i])
                }
            }),
        };
        let longest = step.iter().fold(0.0f64, |acc, s| acc.max(s.abs()));
        let shrink = if longest > STEP_LOG_MAX {
            STEP_LOG_MAX / longest
        } else {
            1.0
        };
        let slope: f64 = (0..3).map(|i| gradient[i] * step[i] * shrink).sum();
        // Backtracking line search with the Armijo condition.
        let mut scale = shrink;
        let mut accepted = None;
        for _ in 0..40 {
            let candidate: [f64; 3] = std::array::from_fn(|i| clamp(theta[i] + scale * step[i]));
            let value = log_likelihood_terms(terms, rates_of(candidate));
            if value.is_finite() && value >= current.value + 1e-4 * slope * (scale / shrink) {
                accepted = Some((candidate, value));
                break;
            }
            scale *= 0.5;
        }
        let Some((candidate, value)) = accepted else {
            break;
        };
        let moved = (0..3).fold(0.0f64, |acc, i| acc.max((candidate[i] - theta[i]).abs()));
        let gain = value - current.value;
        theta = candidate;
        current = derivatives(terms, rates_of(theta));
        if moved < 1e-10 || (gain <= 1e-12 * current.value.abs().max(1.0) && moved < 1e-7) {
            break;
        }
    }
    let rates = rates_of(theta);
    assert!(
        rates
            .iter()
            .all(|r| r.is_finite() && *r >= RATE_MIN * (1.0 - 1e-12))
    );
    Fit {
        rates,
        log_likelihood: current.value,
    }
}

/// Ertl's improved raw estimator (arXiv:1702.01284) for one
/// sketch from its register-value histogram: the same estimator as
/// `Hll::estimate`, so inclusion-exclusion here matches the sketches' own
/// numbers.
pub fn improved_estimate(histogram: &[u32], m: u32) -> f64 {
    assert!(
        histogram.len() >= 2,
        "a register has at least the values 0 and 1"
    );
    assert!(m.is_power_of_two(), "m = {m} must be a power of two");
    let histogram: Vec<u64> = histogram.iter().map(|&c| u64::from(c)).collect();
    assert_eq!(
        histogram.iter().sum::<u64>(),
        u64::from(m),
        "the histogram must count all m registers"
    );
    let log2m = u8::try_from(m.trailing_zeros()).expect("log2m < 32");
    super::estimator::ertl_estimate(&histogram, log2m).value
}

/// The inclusion-exclusion estimate `|A| + |B| - |A ∪ B|` from Ertl's
/// improved estimator on A, B and their register-wise maximum.
pub fn inclusion_exclusion(counts: &PairCounts) -> f64 {
    improved_estimate(&counts.histogram_a(), counts.m)
        + improved_estimate(&counts.histogram_b(), counts.m)
        - improved_estimate(&counts.histogram_union(), counts.m)
}

/// The joint maximum-likelihood estimate of the two sketches' overlap.
///
/// # Panics
///
/// As [`pair_counts`].
pub fn estimate(pair: &RegisterPair<'_>) -> Overlap {
    estimate_counts(&pair_counts(pair))
}

/// [`estimate`] from counts already built.
pub fn estimate_counts(counts: &PairCounts) -> Overlap {
    let terms = Terms::new(counts);
    let m = f64::from(counts.m);
    // Beyond 2^64 hashes per register the model has nothing left to say;
    // the cap only binds when every register of a sketch is saturated.
    let rate_max = m * 2f64.powi(64);
    let size_a = improved_estimate(&counts.histogram_a(), counts.m);
    let size_b = improved_estimate(&counts.histogram_b(), counts.m);
    let size_union = improved_estimate(&counts.histogram_union(), counts.m);
    let inclusion_exclusion = size_a + size_b - size_union;
    let smaller = size_a.min(size_b);

    let start = |shared: f64| -> [f64; 3] {
        let shared = shared.clamp(RATE_MIN, smaller.max(RATE_MIN));
        [
            (size_a - shared).max(0.01 * size_a),
            (size_b - shared).max(0.01 * size_b),
            shared,
        ]
    };
    let no_shared = !counts.any_shared_nonzero();
    let best = if no_shared {
        // No element can be shared: λx = 0 is the maximum, and the other two
        // rates separate.
        fit(
            &terms,
            [size_a, size_b, RATE_MIN],
            [false, false, true],
            rate_max,
        )
    } else {
        let first_start = inclusion_exclusion.max(0.01 * smaller);
        let second_start = if first_start < 0.1 * smaller {
            0.5 * smaller
        } else {
            0.01 * smaller
        };
        let first = fit(&terms, start(first_start), [false; 3], rate_max);
        let second = fit(&terms, start(second_start), [false; 3], rate_max);
        if second.log_likelihood > first.log_likelihood {
            second
        } else {
            first
        }
    };

    let on_boundary: [bool; 3] = std::array::from_fn(|i| best.rates[i] <= RATE_MIN * (1.0 + 1e-9));
    let free = on_boundary.map(|b| !b);
    let at_optimum = derivatives(&terms, best.rates);
    let negative_hessian = at_optimum.hessian.map(|row| row.map(|h| -h));
    let covariance = inverse_positive_definite(&negative_hessian, free);
    let value = |i: usize| if on_boundary[i] { 0.0 } else { best.rates[i] };

    // λx always gets the profile interval; λa and λb get it only on their
    // boundary (where Wald has nothing to say) and Wald otherwise.
    let wald = |i: usize| covariance.map_or(f64::INFINITY, |c| c[i][i].max(0.0).sqrt());
    let mut profiled: [Option<(f64, f64)>; 3] = [None; 3];
    for i in (0..3).filter(|&i| i == X || on_boundary[i]) {
        profiled[i] = Some(profile_interval(&terms, best, i, wald(i), rate_max));
    }
    let boundary_upper: [f64; 3] = std::array::from_fn(|i| match profiled[i] {
        Some((_, upper)) if on_boundary[i] => upper,
        _ => 0.0,
    });
    let coordinate = |i: usize| -> Estimate {
        match profiled[i] {
            Some((lower, upper)) => Estimate {
                value: value(i),
                lower,
                upper,
                confidence: CONFIDENCE_DEFAULT,
            },
            None => Estimate::normal(value(i), wald(i), 0.0),
        }
    };
    let union = {
        let total = value(A) + value(B) + value(X);
        let variance = covariance.map_or(f64::INFINITY, |c| c.iter().flatten().sum::<f64>());
        let deviation = Z_95 * variance.max(0.0).sqrt();
        // A coordinate on its boundary adds only to the upper end.
        let extra: f64 = boundary_upper.iter().sum();
        Estimate {
            value: total,
            lower: (total - deviation).max(0.0),
            upper: total + deviation + extra,
            confidence: CONFIDENCE_DEFAULT,
        }
    };
    let overlap = Overlap {
        intersection: coordinate(X),
        a_only: coordinate(A),
        b_only: coordinate(B),
        union,
        inclusion_exclusion,
    };
    assert!(overlap.intersection.value >= 0.0);
    assert!(overlap.intersection.lower <= overlap.intersection.value);
    assert!(!overlap.intersection.upper.is_nan());
    overlap
}

/// The profile log-likelihood of one coordinate: the other two rates
/// maximized with coordinate `i` held at a given value, each fit started
/// from the previous one.
struct Profile<'t> {
    terms: &'t Terms,
    best: Fit,
    i: usize,
    rate_max: f64,
    warm: [f64; 3],
}

impl<'t> Profile<'t> {
    fn new(terms: &'t Terms, best: Fit, i: usize, rate_max: f64) -> Self {
        Self {
            terms,
            best,
            i,
            rate_max,
            warm: best.rates,
        }
    }

    /// `ln L̂ - max ln L` with coordinate `i` held at `rate`, minus
    /// [`PROFILE_DROP`]: negative inside the interval, positive outside.
    fn excess(&mut self, rate: f64) -> f64 {
        let mut fixed = [false; 3];
        fixed[self.i] = true;
        let mut start = self.warm;
        start[self.i] = rate;
        let profile = fit(self.terms, start, fixed, self.rate_max);
        self.warm = profile.rates;
        let excess = self.best.log_likelihood - profile.log_likelihood - PROFILE_DROP;
        // A rate the data rule out entirely (a likelihood of 0 there) is
        // outside the interval.
        if excess.is_nan() {
            f64::INFINITY
        } else {
            excess
        }
    }
}

/// The root of `excess` between `inside` (excess < 0) and `outside`
/// (excess >= 0), by the Illinois variant of regula falsi, to a relative
/// 10^-3. Returns the end of the final bracket on the outside, so the
/// interval errs on the wide side.
fn profile_root(
    profile: &mut Profile<'_>,
    (mut inside, mut f_inside): (f64, f64),
    (mut outside, mut f_outside): (f64, f64),
) -> f64 {
    debug_assert!(
        f_inside < 0.0 && f_outside >= 0.0,
        "{inside} {f_inside} {outside} {f_outside}"
    );
    // Which end moved last: the Illinois rule halves the stale end's value.
    let mut last_inside: Option<bool> = None;
    for _ in 0..100 {
        if (outside - inside).abs() <= 1e-3 * outside.abs().max(inside.abs()).max(RATE_MIN) {
            break;
        }
        let mut next = outside - f_outside * (outside - inside) / (f_outside - f_inside);
        // Keep strictly inside the bracket; fall back to the midpoint if the
        // interpolation lands on an end.
        let (low, high) = (inside.min(outside), inside.max(outside));
        if !(next > low && next < high) {
            next = 0.5 * (low + high);
        }
        let f_next = profile.excess(next);
        if f_next < 0.0 {
            inside = next;
            f_inside = f_next;
            if last_inside == Some(true) {
                f_outside *= 0.5;
            }
            last_inside = Some(true);
        } else {
            outside = next;
            f_outside = f_next;
            if last_inside == Some(false) {
                f_inside *= 0.5;
            }
            last_inside = Some(false);
        }
    }
    outside
}

/// The 95% profile-likelihood interval of coordinate `i`: the rates whose
/// profile log-likelihood is within [`PROFILE_DROP`] of the maximum. The
/// Wald standard error `wald` (infinite or NaN when unavailable) only seeds
/// the search. The lower end is 0 when the drop at the boundary is within
/// the limit.
fn profile_interval(terms: &Terms, best: Fit, i: usize, wald: f64, rate_max: f64) -> (f64, f64) {
    let center = best.rates[i];
    let on_boundary = center <= RATE_MIN * (1.0 + 1e-9);
    let wald = if wald.is_finite() && wald > 0.0 {
        Some(Z_95 * wald)
    } else {
        None
    };

    // Upper end: grow a bracket from the Wald end (or from 1 element).
    let mut profile = Profile::new(terms, best, i, rate_max);
    let mut inside = (center, -PROFILE_DROP);
    let mut step = wald.unwrap_or(center.max(1.0));
    let upper = loop {
        let candidate = center + step;
        if candidate > rate_max {
            break f64::INFINITY;
        }
        let f = profile.excess(candidate);
        if f >= 0.0 {
            break profile_root(&mut profile, inside, (candidate, f));
        }
        inside = (candidate, f);
        step *= 2.0;
    };

    // Lower end: 0 unless the boundary itself is outside the interval.
    let lower = if on_boundary {
        0.0
    } else {
        let mut profile = Profile::new(terms, best, i, rate_max);
        let f_floor = profile.excess(RATE_MIN);
        if f_floor <= 0.0 {
            0.0
        } else {
            let mut outside = (RATE_MIN, f_floor);
            let mut inside = (center, -PROFILE_DROP);
            // Narrow the bracket with the Wald end when it is inside it.
            if let Some(half_width) = wald {
                let guess = center - half_width;
                if guess > RATE_MIN {
                    let f = profile.excess(guess);
                    if f >= 0.0 {
                        outside = (guess, f);
                    } else {
                        inside = (guess, f);
                    }
                }
            }
            profile_root(&mut profile, inside, outside)
        }
    };
    assert!(
        lower <= center.max(0.0) && upper >= center,
        "{lower} {center} {upper}"
    );
    (lower, upper)
}

impl Hll {
    /// The size of `self ∩ other` by joint maximum likelihood, with |A \ B|,
    /// |B \ A| and |A ∪ B| from the same fit, each with its 95% interval
    /// (`self` is A). See the [module doc](self) for the method.
    ///
    /// - Two EXPLICIT sketches answer exactly, by intersecting their sorted
    ///   hash lists.
    /// - An EMPTY side makes the intersection exactly 0.
    /// - Otherwise EXPLICIT and SPARSE sketches are read as registers.
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] if the settings differ (as for a merge) or
    /// either sketch is UNDEFINED.
    pub fn intersection(&self, other: &Hll) -> Result<Overlap> {
        self.check_intersectable(other)?;
        if let (Some(a), Some(b)) = (self.explicit_values(), other.explicit_values()) {
            let shared = sorted_intersection_len(a, b);
            let exact = |count: usize| Estimate::exact(count as f64);
            let union = a.len() + b.len() - shared;
            return Ok(Overlap {
                intersection: exact(shared),
                a_only: exact(a.len() - shared),
                b_only: exact(b.len() - shared),
                union: exact(union),
                inclusion_exclusion: shared as f64,
            });
        }
        if self.kind() == Kind::Empty || other.kind() == Kind::Empty {
            // Nothing can be shared.
            let (size_a, size_b) = (self.estimate(), other.estimate());
            let mut union = self.clone();
            union.merge(other)?;
            return Ok(Overlap {
                intersection: Estimate::exact(0.0),
                a_only: size_a,
                b_only: size_b,
                union: union.estimate(),
                inclusion_exclusion: 0.0,
            });
        }
        let registers = |h: &Hll| h.registers().expect("checked: not UNDEFINED");
        let (a, b) = (registers(self), registers(other));
        Ok(estimate(&RegisterPair {
            a: &a,
            b: &b,
            value_max: self.register_value_max(),
        }))
    }

    /// The inclusion-exclusion estimate `|A| + |B| - |A ∪ B|` from three
    /// single-sketch estimates, the method [`Hll::intersection`] replaces.
    /// Kept for comparison: its error follows the union, not the
    /// intersection, and it can be negative.
    ///
    /// # Errors
    ///
    /// As [`Hll::intersection`].
    pub fn inclusion_exclusion(&self, other: &Hll) -> Result<f64> {
        self.check_intersectable(other)?;
        let mut union = self.clone();
        union.merge(other)?;
        Ok(self.estimate().value + other.estimate().value - union.estimate().value)
    }

    fn check_intersectable(&self, other: &Hll) -> Result<()> {
        self.settings().check_compatible(&other.settings())?;
        if self.kind() == Kind::Undefined || other.kind() == Kind::Undefined {
            return Err(Error::Incompatible {
                sketch: "hll",
                reason: "an UNDEFINED sketch has no intersection".to_string(),
            });
        }
        Ok(())
    }
}

/// The number of values two ascending, duplicate-free slices share.
fn sorted_intersection_len(a: &[i64], b: &[i64]) -> usize {
    debug_assert!(a.windows(2).all(|w| w[0] < w[1]));
    debug_assert!(b.windows(2).all(|w| w[0] < w[1]));
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    assert!(shared <= a.len().min(b.len()));
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64 (Steele, Lea and Flood 2014): a bijection of its counter,
    /// so keys from distinct counters never collide.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Register update of the AK format, on a plain byte array.
    fn insert(registers: &mut [u8], hash: u64, value_max: u8) {
        let log2m = registers.len().trailing_zeros();
        let index = usize::try_from(hash & (registers.len() as u64 - 1)).expect("index < m");
        let w = hash >> log2m;
        if w == 0 {
            return;
        }
        let value = u8::try_from(w.trailing_zeros() + 1)
            .expect("<= 64")
            .min(value_max);
        registers[index] = registers[index].max(value);
    }

    /// Registers for A and B with the given part sizes (small whole numbers,
    /// so the casts below are exact).
    #[allow(clippy::cast_possible_truncation)]
    fn sketches(log2m: u32, value_max: u8, sizes: Rates, seed: u64) -> (Vec<u8>, Vec<u8>) {
        let m = 1usize << log2m;
        let (mut a, mut b) = (vec![0u8; m], vec![0u8; m]);
        let mut state = seed;
        let count = |size: f64| size.round() as u64;
        for _ in 0..count(sizes.a_only) {
            insert(
                &mut a,
                crate::hash::user_id(splitmix(&mut state)),
                value_max,
            );
        }
        for _ in 0..count(sizes.b_only) {
            insert(
                &mut b,
                crate::hash::user_id(splitmix(&mut state)),
                value_max,
            );
        }
        for _ in 0..count(sizes.shared) {
            let hash = crate::hash::user_id(splitmix(&mut state));
            insert(&mut a, hash, value_max);
            insert(&mut b, hash, value_max);
        }
        (a, b)
    }

    /// The reference likelihood: one register pair at a time, straight from
    /// the CDFs `P(K_A <= u, K_B <= v) = F_a(u) F_b(v) F_x(min(u, v))`.
    fn log_likelihood_reference(a: &[u8], b: &[u8], value_max: u8, rates: Rates) -> f64 {
        let m = a.len() as f64;
        let cdf = |rate: f64, k: i32| -> f64 {
            if k < 0 {
                0.0
            } else if k >= i32::from(value_max) {
                1.0
            } else {
                (-rate / m * (-f64::from(k)).exp2()).exp()
            }
        };
        let joint = |u: i32, v: i32| {
            cdf(rates.a_only, u) * cdf(rates.b_only, v) * cdf(rates.shared, u.min(v))
        };
        a.iter()
            .zip(b)
            .map(|(&ka, &kb)| {
                let (u, v) = (i32::from(ka), i32::from(kb));
                let p = joint(u, v) - joint(u - 1, v) - joint(u, v - 1) + joint(u - 1, v - 1);
                p.ln()
            })
            .sum()
    }

    #[test]
    fn counts_partition_the_registers() {
        let (a, b) = sketches(
            8,
            31,
            Rates {
                a_only: 500.0,
                b_only: 300.0,
                shared: 200.0,
            },
            1,
        );
        let counts = pair_counts(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 31,
        });
        let sum = |v: &[u32]| v.iter().sum::<u32>();
        assert_eq!(sum(&counts.histogram_a()), 256);
        assert_eq!(sum(&counts.histogram_b()), 256);
        assert_eq!(sum(&counts.histogram_union()), 256);
        assert_eq!(sum(&counts.a_below), sum(&counts.b_above));
        assert_eq!(sum(&counts.a_above), sum(&counts.b_below));
        let union: Vec<u8> = a.iter().zip(&b).map(|(x, y)| *x.max(y)).collect();
        let mut histogram = vec![0u32; 32];
        for &k in &union {
            histogram[usize::from(k)] += 1;
        }
        assert_eq!(histogram, counts.histogram_union());
    }

    #[test]
    fn likelihood_matches_reference() {
        // Small regwidth so that saturated registers occur.
        for (value_max, sizes) in [
            (
                31,
                Rates {
                    a_only: 3000.0,
                    b_only: 1000.0,
                    shared: 400.0,
                },
            ),
            (
                7,
                Rates {
                    a_only: 200_000.0,
                    b_only: 50_000.0,
                    shared: 30_000.0,
                },
            ),
            (
                3,
                Rates {
                    a_only: 2000.0,
                    b_only: 900.0,
                    shared: 100.0,
                },
            ),
        ] {
            let (a, b) = sketches(8, value_max, sizes, 7);
            let counts = pair_counts(&RegisterPair {
                a: &a,
                b: &b,
                value_max,
            });
            for rates in [
                sizes,
                Rates {
                    a_only: 10.0,
                    b_only: 5000.0,
                    shared: 1.0,
                },
            ] {
                let fast = log_likelihood(&counts, rates);
                let reference = log_likelihood_reference(&a, &b, value_max, rates);
                assert!(
                    (fast - reference).abs() <= 1e-9 * reference.abs(),
                    "top {value_max}: {fast} vs {reference}"
                );
            }
        }
    }

    #[test]
    fn derivatives_match_finite_differences() {
        let (a, b) = sketches(
            8,
            15,
            Rates {
                a_only: 3000.0,
                b_only: 1000.0,
                shared: 400.0,
            },
            3,
        );
        let counts = pair_counts(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 15,
        });
        let terms = Terms::new(&counts);
        let at = [2500.0, 1300.0, 300.0];
        let d = derivatives(&terms, at);
        assert!((d.value - log_likelihood_terms(&terms, at)).abs() < 1e-9 * d.value.abs());
        for i in 0..3 {
            let h = 1e-3 * at[i];
            let mut up = at;
            up[i] += h;
            let mut down = at;
            down[i] -= h;
            let numeric =
                (log_likelihood_terms(&terms, up) - log_likelihood_terms(&terms, down)) / (2.0 * h);
            assert!(
                (numeric - d.gradient[i]).abs() < 1e-5 * d.gradient[i].abs().max(1e-3),
                "gradient {i}"
            );
            let (gu, gd) = (derivatives(&terms, up), derivatives(&terms, down));
            for j in 0..3 {
                let numeric = (gu.gradient[j] - gd.gradient[j]) / (2.0 * h);
                let analytic = d.hessian[i][j];
                assert!(
                    (numeric - analytic).abs() < 1e-4 * analytic.abs().max(1e-9),
                    "hessian {i} {j}"
                );
                assert_eq!(d.hessian[i][j], d.hessian[j][i]);
            }
        }
    }

    #[test]
    fn improved_estimate_is_close() {
        for n in [0.0, 10.0, 1000.0, 100_000.0, 10_000_000.0] {
            let (a, _) = sketches(
                12,
                63,
                Rates {
                    a_only: n,
                    b_only: 0.0,
                    shared: 0.0,
                },
                11,
            );
            let mut histogram = vec![0u32; 64];
            for &k in &a {
                histogram[usize::from(k)] += 1;
            }
            let e = improved_estimate(&histogram, 4096);
            // 4 standard errors of 1.04/sqrt(4096) = 1.6%.
            assert!((e - n).abs() <= 0.065 * n + 1e-9, "{e} vs {n}");
        }
    }

    #[test]
    fn recovers_the_overlap() {
        let sizes = Rates {
            a_only: 150_000.0,
            b_only: 80_000.0,
            shared: 50_000.0,
        };
        let (a, b) = sketches(12, 63, sizes, 5);
        let overlap = estimate(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 63,
        });
        let x = overlap.intersection;
        assert!(x.lower < 50_000.0 && 50_000.0 < x.upper, "{x:?}");
        assert!(!x.below_detection_limit());
        assert!(
            (overlap.union.value - 280_000.0).abs() < 0.06 * 280_000.0,
            "{:?}",
            overlap.union
        );
        assert!(
            (overlap.a_only.value - 150_000.0).abs() < 0.15 * 150_000.0,
            "{:?}",
            overlap.a_only
        );
    }

    #[test]
    fn disjoint_is_below_detection_limit() {
        let (a, b) = sketches(
            10,
            63,
            Rates {
                a_only: 20_000.0,
                b_only: 20_000.0,
                shared: 0.0,
            },
            9,
        );
        let overlap = estimate(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 63,
        });
        assert!(
            overlap.intersection.below_detection_limit(),
            "{:?}",
            overlap.intersection
        );
    }

    #[test]
    fn no_shared_register_is_disjoint() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        a[..32].fill(2);
        b[32..].fill(3);
        let overlap = estimate(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 31,
        });
        assert_eq!(overlap.intersection.value, 0.0);
        assert!(overlap.intersection.below_detection_limit());
        assert!(overlap.intersection.upper.is_finite() && overlap.intersection.upper > 0.0);
        assert!(overlap.a_only.value > 0.0 && overlap.b_only.value > 0.0);
    }

    #[test]
    fn empty_registers_give_zero() {
        let zeros = vec![0u8; 16];
        let overlap = estimate(&RegisterPair {
            a: &zeros,
            b: &zeros,
            value_max: 31,
        });
        for e in [
            overlap.intersection,
            overlap.a_only,
            overlap.b_only,
            overlap.union,
        ] {
            assert_eq!(e.value, 0.0);
            assert!(e.upper.is_finite() && e.upper < 10.0, "{e:?}");
        }
    }

    #[test]
    fn identical_sketches_are_all_shared() {
        let (a, _) = sketches(
            11,
            63,
            Rates {
                a_only: 100_000.0,
                b_only: 0.0,
                shared: 0.0,
            },
            13,
        );
        let overlap = estimate(&RegisterPair {
            a: &a,
            b: &a,
            value_max: 63,
        });
        assert_eq!(overlap.a_only.value, 0.0);
        assert_eq!(overlap.b_only.value, 0.0);
        let x = overlap.intersection.value;
        assert!((x - 100_000.0).abs() < 0.1 * 100_000.0, "{x}");
    }

    #[test]
    fn saturated_registers_stay_finite() {
        let full = vec![3u8; 64];
        let (a, _) = sketches(
            6,
            3,
            Rates {
                a_only: 300.0,
                b_only: 0.0,
                shared: 0.0,
            },
            2,
        );
        let overlap = estimate(&RegisterPair {
            a: &full,
            b: &a,
            value_max: 3,
        });
        assert!(!overlap.intersection.value.is_nan());
        let overlap = estimate(&RegisterPair {
            a: &full,
            b: &full,
            value_max: 3,
        });
        assert!(!overlap.intersection.value.is_nan());
    }

    #[test]
    fn swapping_mirrors_the_answer() {
        let (a, b) = sketches(
            11,
            63,
            Rates {
                a_only: 400_000.0,
                b_only: 30_000.0,
                shared: 5_000.0,
            },
            17,
        );
        let forward = estimate(&RegisterPair {
            a: &a,
            b: &b,
            value_max: 63,
        });
        let backward = estimate(&RegisterPair {
            a: &b,
            b: &a,
            value_max: 63,
        });
        let close = |p: f64, q: f64| (p - q).abs() <= 1e-6 * p.abs().max(1.0);
        assert!(close(
            forward.intersection.value,
            backward.intersection.value
        ));
        assert!(close(forward.a_only.value, backward.b_only.value));
        assert!(close(
            forward.intersection.upper,
            backward.intersection.upper
        ));
    }

    fn hll(log2m: u8, regwidth: u8, keys: std::ops::Range<u64>) -> Hll {
        let mut h = Hll::new(crate::hll::Settings::new(log2m, regwidth).expect("valid settings"))
            .expect("valid settings");
        for key in keys {
            h.insert(crate::hash::user_id(key));
        }
        h
    }

    #[test]
    fn explicit_sketches_answer_exactly() {
        let (a, b) = (hll(11, 5, 0..100), hll(11, 5, 60..130));
        assert!(a.explicit_values().is_some() && b.explicit_values().is_some());
        let overlap = a.intersection(&b).expect("compatible");
        assert_eq!(overlap.intersection, Estimate::exact(40.0));
        assert_eq!(overlap.a_only, Estimate::exact(60.0));
        assert_eq!(overlap.b_only, Estimate::exact(30.0));
        assert_eq!(overlap.union, Estimate::exact(130.0));
    }

    #[test]
    fn explicit_against_registers_uses_the_model() {
        let (a, b) = (hll(11, 5, 0..100), hll(11, 5, 0..50_000));
        assert!(a.explicit_values().is_some() && b.explicit_values().is_none());
        let x = a.intersection(&b).expect("compatible").intersection;
        assert!(!x.is_exact());
        assert!(x.lower <= 100.0 && 100.0 <= x.upper, "{x:?}");
    }

    #[test]
    fn empty_side_shares_nothing() {
        let (a, empty) = (hll(11, 5, 0..5000), hll(11, 5, 0..0));
        let overlap = a.intersection(&empty).expect("compatible");
        assert_eq!(overlap.intersection, Estimate::exact(0.0));
        assert_eq!(overlap.b_only, Estimate::exact(0.0));
        assert_eq!(overlap.union, a.estimate());
    }

    #[test]
    fn mismatched_or_undefined_sketches_are_errors() {
        let a = hll(11, 5, 0..5000);
        let other = hll(12, 5, 0..5000);
        assert!(matches!(
            a.intersection(&other),
            Err(Error::Incompatible { .. })
        ));
        assert!(matches!(
            a.inclusion_exclusion(&other),
            Err(Error::Incompatible { .. })
        ));
        let undefined = Hll::undefined(a.settings()).expect("valid settings");
        assert!(matches!(
            a.intersection(&undefined),
            Err(Error::Incompatible { .. })
        ));
        assert!(matches!(
            undefined.intersection(&a),
            Err(Error::Incompatible { .. })
        ));
    }

    #[test]
    fn inclusion_exclusion_matches_the_field() {
        let (a, b) = (hll(12, 6, 0..300_000), hll(12, 6, 200_000..400_000));
        let overlap = a.intersection(&b).expect("compatible");
        let direct = a.inclusion_exclusion(&b).expect("compatible");
        assert!(
            (overlap.inclusion_exclusion - direct).abs() < 1e-6 * direct.abs(),
            "{direct}"
        );
    }

    #[test]
    #[should_panic(expected = "same length")]
    fn mismatched_lengths_panic() {
        estimate(&RegisterPair {
            a: &[0; 16],
            b: &[0; 32],
            value_max: 31,
        });
    }

    /// The fit behind `estimate` for a pair: the terms, the maximum (from the
    /// reported rates) and the Wald standard error of `λx`.
    fn fitted(a: &[u8], b: &[u8], value_max: u8) -> (Terms, Fit, Overlap, f64) {
        let pair = RegisterPair { a, b, value_max };
        let overlap = estimate(&pair);
        let terms = Terms::new(&pair_counts(&pair));
        let rates = [
            overlap.a_only.value,
            overlap.b_only.value,
            overlap.intersection.value,
        ]
        .map(|r| r.max(RATE_MIN));
        let best = Fit {
            rates,
            log_likelihood: log_likelihood_terms(&terms, rates),
        };
        let negative_hessian = derivatives(&terms, rates)
            .hessian
            .map(|row| row.map(|h| -h));
        let wald = inverse_positive_definite(&negative_hessian, [true; 3])
            .map_or(f64::INFINITY, |c| c[X][X].sqrt());
        (terms, best, overlap, wald)
    }

    #[test]
    fn profile_interval_is_wald_far_from_the_boundary() {
        let sizes = Rates {
            a_only: 150_000.0,
            b_only: 80_000.0,
            shared: 50_000.0,
        };
        let (a, b) = sketches(12, 63, sizes, 5);
        let (terms, best, overlap, wald) = fitted(&a, &b, 63);
        let x = overlap.intersection;
        assert!(x.lower < x.value && x.value < x.upper, "{x:?}");
        // Point estimate unchanged: the interval is profiled around the MLE.
        assert!((best.rates[X] - x.value).abs() <= 1e-9 * x.value);
        // About 4 standard errors from 0, the likelihood is close to
        // quadratic: each end within 15% of the Wald half-width, the
        // interval skewed to the right (the likelihood flattens upwards).
        let half = Z_95 * wald;
        assert!(x.value > 4.0 * wald, "{x:?} {wald}");
        assert!(
            (x.value - half - x.lower).abs() < 0.15 * half,
            "{x:?} {half}"
        );
        assert!(
            (x.value + half - x.upper).abs() < 0.15 * half,
            "{x:?} {half}"
        );
        assert!(x.upper - x.value > x.value - x.lower, "{x:?}");
        // Both ends sit on the drop of χ²₁(0.95) / 2, from the outside.
        let mut profile = Profile::new(&terms, best, X, f64::MAX);
        for end in [x.lower, x.upper] {
            let excess = profile.excess(end);
            assert!((-1e-6..0.05).contains(&excess), "{end}: {excess}");
        }
    }

    #[test]
    fn profile_likelihood_falls_away_from_the_estimate() {
        let sizes = Rates {
            a_only: 30_000.0,
            b_only: 30_000.0,
            shared: 3_000.0,
        };
        let (a, b) = sketches(11, 63, sizes, 17);
        let (terms, best, overlap, _) = fitted(&a, &b, 63);
        let x = overlap.intersection;
        assert!(x.lower < x.value && x.value < x.upper, "{x:?}");
        // Walk outwards from the MLE on both sides: the drop never
        // decreases, and it crosses the limit exactly at the interval's ends.
        for (end, far) in [(x.upper, 3.0 * x.upper), (x.lower, RATE_MIN)] {
            let mut profile = Profile::new(&terms, best, X, f64::MAX);
            let mut previous = -PROFILE_DROP;
            for step in 1..=40 {
                let rate = x.value + (far - x.value) * f64::from(step) / 40.0;
                let excess = profile.excess(rate);
                assert!(excess >= previous - 1e-6, "{rate}: {excess} < {previous}");
                let beyond = if far > x.value {
                    rate > end
                } else {
                    rate < end
                };
                assert_eq!(excess > 0.0, beyond, "{rate}: {excess}, ends {x:?}");
                previous = excess;
            }
        }
    }

    #[test]
    fn small_overlap_reaches_zero_by_the_profile() {
        // |A ∩ B| = 300 of 20 000 at m = 1024: about one standard error.
        let mut below = 0;
        for seed in 0..8 {
            let sizes = Rates {
                a_only: 20_000.0,
                b_only: 20_000.0,
                shared: 300.0,
            };
            let (a, b) = sketches(10, 63, sizes, 100 + seed);
            let (terms, best, overlap, _) = fitted(&a, &b, 63);
            let x = overlap.intersection;
            assert!(x.lower <= x.value && x.value < x.upper && x.upper.is_finite());
            // The lower end is 0 exactly when the boundary is within the
            // drop, whether or not the MLE itself is on it.
            let at_zero = Profile::new(&terms, best, X, f64::MAX).excess(RATE_MIN);
            assert_eq!(x.below_detection_limit(), at_zero <= 0.0, "{x:?} {at_zero}");
            if x.below_detection_limit() {
                assert_eq!(x.lower, 0.0);
                below += 1;
            }
        }
        assert!(below >= 4, "{below}/8 below detection limit");
    }
}
