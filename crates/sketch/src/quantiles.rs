//! [`Quantiles`]: a mergeable quantile sketch over `f64` (KLL).
//!
//! This is a thin layer over Apache DataSketches' KLL sketch
//! (`datasketches::kll::KllSketch`, the official Rust port), so a rollup
//! written here can be read by DataSketches Java and C++ and the other way
//! round. KLL is due to Karnin, Lang and Liberty, "Optimal Quantile
//! Approximation in Streams" (FOCS 2016); DataSketches' implementation keeps
//! levels of "compactors", each holding items of weight 2^level, and halves a
//! full level by keeping every other sorted item, chosen by a coin flip.
//!
//! Notation (the paper's): `k` sets the capacity of the top compactor and so
//! the accuracy; `m = 8` is the smallest capacity of a low level; `n` is the
//! number of values the sketch has seen ([`Quantiles::count`]).
//!
//! # Error
//!
//! [`Quantiles::rank_error`] is DataSketches' single-sided normalized rank
//! error, `eps = 2.296 / k^0.9723` (0.0133 at k = 200). DataSketches documents
//! it as a best fit to the error measured at **99% confidence** in repeated
//! trials: for any one query, `|estimated rank - true rank| <= eps` with
//! probability 0.99. It is an empirical fit, not the proven bound of the
//! paper (whose constants are larger). After merges `eps` follows the
//! smallest `k` merged in, as DataSketches does.
//!
//! | k | eps (99%) | retained items, about | encoded bytes, about |
//! |---|---|---|---|
//! | 100 | 0.0261 | 300 | 2.4 KiB |
//! | 200 | 0.0133 | 600 | 4.8 KiB |
//! | 400 | 0.0068 | 1200 | 9.6 KiB |
//!
//! (eps from the formula above; sizes are ~3k items of 8 bytes, the steady
//! state of KLL's geometric capacities, once `n` is much larger than `k`.)
//!
//! # Determinism
//!
//! KLL is randomized: each compaction flips a coin. DataSketches 0.6 draws
//! the coin from a thread-local SplitMix64 generator seeded from the
//! process's randomized hash keys (`datasketches::common::random`), and
//! offers **no way to fix the seed**. So once `n > k` two runs over the same
//! input can give different retained items, answers (within `eps`) and
//! bytes. Below that (exact mode) everything is deterministic. Tests fix the
//! seed of their *data* and check errors against bounds, never bytes of
//! sketches that compacted.
//!
//! # Wire format
//!
//! `encode` writes DataSketches' standard compact KLL image for `double`
//! items (`KllDoublesSketch` in Java, `kll_sketch<double>` in C++), all
//! integers little-endian:
//!
//! ```text
//! byte  0       1        2        3      4..6   6    7
//!      | preInts | serVer | family | flags | k u16 | m | unused |    8 bytes
//!   empty (flags bit 0): nothing follows; preInts 2, serVer 1
//!   one value (flags bit 2): | value f64 |;  preInts 2, serVer 2
//!   otherwise, preInts 5, serVer 1:
//!      | n u64 | min_k u16 | num_levels u8 | unused u8 |               12 bytes
//!      | level offsets: num_levels x u32 |
//!      | min f64 | max f64 | retained items f64 ... (level 0 first) |
//! ```
//!
//! family is 15 (KLL). Level 0 may be stored unsorted (flags bit 1 clear).
//! Example: an empty sketch with k = 200 is `02 01 0f 01 c8 00 08 00`.
//!
//! # Limits
//!
//! [`K_MIN`]..=[`K_MAX`] is KLL's own range of `k`. [`COUNT_MAX`] bounds `n`
//! so that the number of levels stays below KLL's hard maximum of 61, which
//! DataSketches enforces with an assertion (see the maintainer note below).

// Maintainer notes.
//
// Decoding defence. `KllSketch::deserialize` (0.6.0) checks the preamble,
// checks that the level offsets are nondecreasing and within the capacity
// that k and num_levels imply (at most ~3k + 8 * 61 items), checks the
// payload length before it allocates, rejects NaN, checks sortedness, the
// min/max envelope and that the level weights sum to n. Fuzzing found no
// panic and no allocation beyond the input length in it. What it accepts
// that can still panic later: an image whose n is near 2^60, with items on
// level 60. The next insert or merge that compacts the top level pushes a
// 62nd level, and `total_capacity` asserts `num_levels <= 61`. An item on
// level L weighs 2^L <= n, so bounding n by COUNT_MAX = 2^56 bounds the
// levels by 57 for every sketch we decode, merge or grow; `decode`
// pre-checks n and `merge` and `insert` refuse to pass the limit.
//
// If DataSketches gains a seeded generator, document it above and make the
// property tests compare bytes.

use datasketches::common::SearchCriteria;
use datasketches::kll::{KllFloat, KllSketch};

use crate::{Error, Result, Sketch};

const SKETCH: &str = "quantiles";

/// Smallest `k` KLL accepts (its minimum level width `m`).
pub const K_MIN: u16 = 8;

/// Largest `k` KLL accepts. A sketch retains about `3 k` values, so this is
/// about 1.5 MiB per sketch; the rollup config should pick far less.
pub const K_MAX: u16 = u16::MAX;

/// The default `k`: DataSketches' default, eps = 1.33% at 99% confidence.
pub const K_DEFAULT: u16 = 200;

/// Most values a sketch may summarize: 2^56. An item on compaction level L
/// weighs 2^L, so this keeps every sketch under 57 levels, clear of KLL's
/// hard limit of 61 (asserted inside DataSketches). Ingest cannot reach it
/// (2^56 values is 2.3 years at 10^9 values per second). `insert` drops
/// values past it; `merge` and `decode` return [`Error::LimitExceeded`].
pub const COUNT_MAX: u64 = 1 << 56;

/// Offset of `n` in a full (more than one value) KLL image.
const N_OFFSET: usize = 8;
/// Flag bits of byte 3 that mark an image without an `n` field.
const FLAG_EMPTY: u8 = 1 << 0;
const FLAG_SINGLE_ITEM: u8 = 1 << 2;

/// A mergeable quantile sketch over `f64`: approximate ranks and quantiles
/// within [`Quantiles::rank_error`] at 99% confidence.
///
/// ```
/// use cardinal_sketch::{quantiles::Quantiles, Sketch};
///
/// let mut latency_ms = Quantiles::default();
/// for i in 1..=1000 {
///     latency_ms.insert(f64::from(i));
/// }
/// let p50 = latency_ms.quantile(0.5).unwrap();
/// assert!((p50 - 500.0).abs() <= 1000.0 * latency_ms.rank_error());
/// let bytes = latency_ms.encode();
/// assert_eq!(Quantiles::decode(&bytes).unwrap().count(), 1000);
/// ```
#[derive(Debug, Clone)]
pub struct Quantiles {
    kll: KllSketch<KllFloat<f64>>,
}

/// What [`Sketch::estimate`] reports for a [`Quantiles`] sketch.
///
/// The quantiles are `None` when the sketch is empty. `min` and `max` are
/// exact; `p50`, `p90` and `p99` are within `rank_error` in rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuantilesSummary {
    /// Values summarized (NaN excluded).
    pub count: u64,
    /// Smallest value seen, exact.
    pub min: Option<f64>,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest value seen, exact.
    pub max: Option<f64>,
    /// Single-sided normalized rank error at 99% confidence.
    pub rank_error: f64,
}

impl Default for Quantiles {
    /// A sketch with `k` = [`K_DEFAULT`] (200).
    fn default() -> Self {
        Self::new(K_DEFAULT).expect("K_DEFAULT is within K_MIN..=K_MAX")
    }
}

impl Quantiles {
    /// An empty sketch with accuracy parameter `k`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] if `k` is outside [`K_MIN`]..=[`K_MAX`].
    pub fn new(k: u16) -> Result<Self> {
        if !(K_MIN..=K_MAX).contains(&k) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "k",
                value: i64::from(k),
                reason: "KLL supports 8..=65535",
            });
        }
        let kll = KllSketch::new(k).expect("k is within KLL's range, checked above");
        assert_eq!(kll.k(), k);
        assert!(kll.is_empty());
        Ok(Self { kll })
    }

    /// Adds one value.
    ///
    /// NaN has no rank, so a NaN is ignored: it is not counted and changes
    /// nothing. Infinities are ordinary values. Once the sketch holds
    /// [`COUNT_MAX`] values, further values are dropped (see there).
    pub fn insert(&mut self, value: f64) {
        if self.kll.n() >= COUNT_MAX {
            return;
        }
        let Ok(item) = KllFloat::<f64>::new(value) else {
            debug_assert!(value.is_nan());
            return;
        };
        let count_before = self.kll.n();
        self.kll.update(item);
        debug_assert_eq!(self.kll.n(), count_before + 1);
    }

    /// The value whose normalized rank is about `rank` (inclusive: the
    /// fraction of values `<=` the answer), within [`Self::rank_error`].
    /// Rank 0 and 1 give the exact minimum and maximum.
    ///
    /// `None` if the sketch is empty or `rank` is NaN or outside `0..=1`.
    pub fn quantile(&self, rank: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&rank) {
            return None;
        }
        let item = self.kll.quantile(rank, SearchCriteria::Inclusive).ok()??;
        Some(item.into_inner())
    }

    /// The normalized rank of `value`: the estimated fraction of values
    /// `<= value`, within [`Self::rank_error`].
    ///
    /// `None` if the sketch is empty or `value` is NaN.
    pub fn rank(&self, value: f64) -> Option<f64> {
        let item = KllFloat::<f64>::new(value).ok()?;
        let rank = self.kll.rank(&item, SearchCriteria::Inclusive)?;
        debug_assert!((0.0..=1.0).contains(&rank));
        Some(rank)
    }

    /// Values summarized (NaN excluded).
    pub fn count(&self) -> u64 {
        self.kll.n()
    }

    /// Whether no value has been inserted.
    pub fn is_empty(&self) -> bool {
        self.kll.is_empty()
    }

    /// The smallest value seen, exact; `None` if empty.
    pub fn min(&self) -> Option<f64> {
        self.kll.min_item().map(|item| **item)
    }

    /// The largest value seen, exact; `None` if empty.
    pub fn max(&self) -> Option<f64> {
        self.kll.max_item().map(|item| **item)
    }

    /// The accuracy parameter this sketch was built with.
    pub fn k(&self) -> u16 {
        self.kll.k()
    }

    /// KLL's single-sided normalized rank error: with 99% confidence a
    /// [`Self::rank`] or [`Self::quantile`] answer is off by at most this
    /// fraction of [`Self::count`] in rank. DataSketches fits it
    /// empirically (`2.296 / k^0.9723`, for the smallest `k` merged in); see
    /// the module docs.
    pub fn rank_error(&self) -> f64 {
        let eps = self.kll.normalized_rank_error();
        assert!(eps > 0.0);
        assert!(eps < 1.0);
        eps
    }
}

impl Sketch for Quantiles {
    type Estimate = QuantilesSummary;

    /// Folds `other` in. Sketches with different `k` merge; the result's
    /// [`Quantiles::rank_error`] is that of the smaller `k`.
    ///
    /// # Errors
    ///
    /// [`Error::LimitExceeded`] if the merged count would pass [`COUNT_MAX`];
    /// `self` is unchanged.
    fn merge(&mut self, other: &Self) -> Result<()> {
        let count = self.count().saturating_add(other.count());
        if count > COUNT_MAX {
            return Err(Error::LimitExceeded {
                sketch: SKETCH,
                limit: "COUNT_MAX",
                max: COUNT_MAX,
                found: count,
            });
        }
        self.kll
            .merge(&other.kll)
            .map_err(|error| Error::Incompatible {
                sketch: SKETCH,
                reason: error.to_string(),
            })?;
        assert_eq!(self.count(), count);
        Ok(())
    }

    fn estimate(&self) -> QuantilesSummary {
        QuantilesSummary {
            count: self.count(),
            min: self.min(),
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            max: self.max(),
            rank_error: self.rank_error(),
        }
    }

    /// DataSketches' compact KLL image for doubles (see the module docs),
    /// readable by `KllDoublesSketch.heapify` in Java and
    /// `kll_sketch<double>::deserialize` in C++.
    fn encode(&self) -> Vec<u8> {
        let bytes = self.kll.serialize();
        assert!(bytes.len() >= 8);
        bytes
    }

    /// Reads a DataSketches compact KLL image of doubles, from any
    /// implementation. Never panics; allocates at most about the input length.
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`] for fewer than 8 bytes, [`Error::LimitExceeded`]
    /// if `n` passes [`COUNT_MAX`], [`Error::Malformed`] for anything else
    /// DataSketches rejects (bad preamble, k, levels, NaN, unsorted levels,
    /// weights that do not sum to `n`, trailing bytes).
    fn decode(bytes: &[u8]) -> Result<Self> {
        check_count(bytes)?;
        let kll =
            KllSketch::<KllFloat<f64>>::deserialize(bytes).map_err(|error| Error::Malformed {
                sketch: SKETCH,
                reason: error.to_string(),
            })?;
        // Pair with `check_count` and `new`: what we accepted is in range.
        assert!(kll.n() <= COUNT_MAX);
        assert!((K_MIN..=K_MAX).contains(&kll.k()));
        Ok(Self { kll })
    }
}

/// Rejects images whose `n` passes [`COUNT_MAX`] before DataSketches parses
/// them (see the maintainer note at the top of the file).
fn check_count(bytes: &[u8]) -> Result<()> {
    let Some(header) = bytes.get(..8) else {
        return Err(Error::Truncated {
            sketch: SKETCH,
            expected: 8,
            found: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
        });
    };
    if header[3] & (FLAG_EMPTY | FLAG_SINGLE_ITEM) != 0 {
        return Ok(());
    }
    let Some(n_bytes) = bytes.get(N_OFFSET..N_OFFSET + 8) else {
        // DataSketches reports the truncation with the field's name.
        return Ok(());
    };
    let n = u64::from_le_bytes(n_bytes.try_into().expect("the slice is 8 bytes"));
    if n > COUNT_MAX {
        return Err(Error::LimitExceeded {
            sketch: SKETCH,
            limit: "COUNT_MAX",
            max: COUNT_MAX,
            found: n,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_rejects_k_below_min() {
        assert!(matches!(
            Quantiles::new(7),
            Err(Error::InvalidParameter { name: "k", .. })
        ));
        assert!(Quantiles::new(K_MIN).is_ok());
        assert!(Quantiles::new(K_MAX).is_ok());
    }

    #[test]
    fn default_k_is_200() {
        assert_eq!(Quantiles::default().k(), 200);
    }

    #[test]
    fn empty_answers_none() {
        let q = Quantiles::default();
        assert_eq!(q.count(), 0);
        assert_eq!(q.quantile(0.5), None);
        assert_eq!(q.rank(1.0), None);
        assert_eq!(q.min(), None);
        assert_eq!(q.max(), None);
        let s = q.estimate();
        assert_eq!(s.count, 0);
        assert_eq!(s.p50, None);
    }

    #[test]
    fn nan_is_ignored() {
        let mut q = Quantiles::default();
        q.insert(f64::NAN);
        assert_eq!(q.count(), 0);
        q.insert(1.0);
        q.insert(f64::NAN);
        assert_eq!(q.count(), 1);
        assert_eq!(q.rank(f64::NAN), None);
    }

    #[test]
    fn quantile_rejects_bad_ranks() {
        let mut q = Quantiles::default();
        q.insert(3.0);
        assert_eq!(q.quantile(-0.1), None);
        assert_eq!(q.quantile(1.1), None);
        assert_eq!(q.quantile(f64::NAN), None);
        assert_eq!(q.quantile(0.0), Some(3.0));
        assert_eq!(q.quantile(1.0), Some(3.0));
    }

    #[test]
    fn exact_mode_is_exact() {
        let mut q = Quantiles::default();
        for i in 1..=100 {
            q.insert(f64::from(i));
        }
        assert_eq!(q.min(), Some(1.0));
        assert_eq!(q.max(), Some(100.0));
        assert_eq!(q.quantile(0.5), Some(50.0));
        assert_eq!(q.rank(25.0), Some(0.25));
    }

    #[test]
    fn rank_error_at_default_k() {
        let eps = Quantiles::default().rank_error();
        assert!((eps - 2.296 / 200f64.powf(0.9723)).abs() < 1e-12);
        assert!((eps - 0.0133).abs() < 0.0001);
    }

    #[test]
    fn empty_encoding_is_datasketches() {
        assert_eq!(Quantiles::default().encode(), [2, 1, 15, 1, 200, 0, 8, 0]);
    }

    #[test]
    fn decode_rejects_short_input() {
        assert!(matches!(
            Quantiles::decode(&[]),
            Err(Error::Truncated { .. })
        ));
        assert!(matches!(
            Quantiles::decode(&[2, 1, 15]),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn decode_rejects_count_over_max() {
        let mut q = Quantiles::default();
        for i in 0..10 {
            q.insert(f64::from(i));
        }
        let mut bytes = q.encode();
        bytes[N_OFFSET..N_OFFSET + 8].copy_from_slice(&(COUNT_MAX + 1).to_le_bytes());
        assert!(matches!(
            Quantiles::decode(&bytes),
            Err(Error::LimitExceeded { .. })
        ));
    }

    #[test]
    fn round_trip_keeps_answers() {
        let mut q = Quantiles::new(16).expect("16 is a valid k");
        for i in 0..1000 {
            q.insert(f64::from(i));
        }
        let bytes = q.encode();
        let back = Quantiles::decode(&bytes).expect("own encoding decodes");
        assert_eq!(back.encode(), bytes);
        assert_eq!(back.count(), 1000);
        assert_eq!(back.quantile(0.5), q.quantile(0.5));
    }
}
