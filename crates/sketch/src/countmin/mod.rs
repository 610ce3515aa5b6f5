//! Count-Min sketches: point frequencies, range counts and quantiles over an
//! integer domain, and heavy hitters.
//!
//! Three public sketches share one table type and one wire format:
//!
//! | type | `insert` takes | answers |
//! |---|---|---|
//! | [`CountMin`] | a 64-bit key hash and a weight | the weight of one key |
//! | [`DyadicCountMin`] | a value of a `domain_bits`-bit domain | range weights, ranks, quantiles |
//! | [`HeavyHitters`] | a 64-bit key hash and a weight | the `k` heaviest keys |
//!
//! # Notation
//!
//! - `N`: the total weight inserted (the L1 norm of the frequency vector).
//! - `w` (`width`): counters per row. `d` (`depth`): rows.
//! - `eps = e / w` and `delta = e^-d`: the additive error bound, as a fraction
//!   of `N`, and the probability that a point query breaks it (Cormode and
//!   Muthukrishnan 2005, "An Improved Data Stream Summary: The Count-Min Sketch
//!   and its Applications", J. Algorithms 55(1), Theorem 1). [`Accuracy`]
//!   turns a requested `(eps, delta)` into `w = ceil(e / eps)` and
//!   `d = ceil(ln(1 / delta))`.
//!
//! # The table
//!
//! `d` rows of `w` unsigned 64-bit counters, row-major. Key `x` adds its
//! weight to one counter per row, `row[i][h_i(x)]`, and a point query returns
//! the minimum of those `d` counters. With non-negative weights every counter
//! is at least the true weight of every key that maps to it, so the answer
//! never under-counts; Markov's inequality on one row and independence across
//! rows give `estimate <= f(x) + eps * N` with probability at least
//! `1 - delta`.
//!
//! With [`Update::Conservative`] (Estan and Varghese 2002, "New Directions in
//! Traffic Measurement and Accounting", SIGCOMM, section 3.3.2) an insert
//! raises each of the key's counters only as far as `min + weight`. Every
//! counter stays at least the weight of every key mapped to it, so the
//! guarantee above still holds, and the estimates are never larger (often
//! much smaller for skewed streams) than with [`Update::Plain`].
//!
//! # Row hashes
//!
//! Callers hash each key once to a `u64` (`crate::hash`) and hand that hash
//! to the sketch. Row `i` maps it with Dietzfelbinger's multiply-add-shift
//! scheme, which is strongly universal (so pairwise independent) from 64-bit
//! keys to 64-bit values (Dietzfelbinger 1996, "Universal hashing and
//! k-wise independent hashing", STACS; Thorup 2015, "High Speed Hashing for
//! Integers and Strings", arXiv:1504.06804, section 3.3, with `w = 64`,
//! `l = 64`, `w_bar = 128 >= w + l - 1`):
//!
//! ```text
//! h_i(x)   = ((a_i * x + b_i) mod 2^128) >> 64          a_i, b_i: u128 per row
//! column_i = (h_i(x) * w) >> 64                           Lemire 2019 range reduction
//! ```
//!
//! The range reduction gives each column `floor(2^64 / w)` or
//! `ceil(2^64 / w)` hash values, so the collision probability is `1 / w` up
//! to a relative `w / 2^64`, which `WIDTH_MAX` makes negligible (< 2^-40).
//! The seeds `a_i, b_i` come from SplitMix64 (Steele, Lea and Flood 2014)
//! started at [`Params::seed`]: sketches merge only when their seeds match,
//! and the seed is part of the encoding. Because the scheme is universal over
//! any 64-bit key, [`DyadicCountMin`] feeds raw domain values in unhashed.
//!
//! Kirsch-Mitzenmacher double hashing (`h1 + i * h2` from the two 32-bit
//! halves of one hash) would save the multiplies, but it is only
//! asymptotically as good and is not pairwise independent per row; one
//! 128-bit multiply per row costs a few nanoseconds.
//!
//! # Merging
//!
//! Two tables with the same parameters merge by adding counters. For plain
//! updates the result equals the table of the concatenated streams. For
//! conservative updates it does not: each merged counter is still at least
//! the weight of every key mapped to it and at most the plain counter, so the
//! merged sketch keeps the never-under-count guarantee and the `eps * N`
//! bound, but loses the conservative tightening that one sketch over both
//! streams would have had.
//!
//! Counters and `N` saturate at `u64::MAX` instead of wrapping; a stream of
//! that much weight is outside every use we know of, and saturation keeps the
//! never-under-count guarantee for keys whose weight is below the limit.
//!
//! # Wire format (version 1)
//!
//! All integers little-endian. A fixed 32-byte header, then a body whose
//! length the header fully determines:
//!
//! ```text
//!  0      2    3      4       5       6          8        12             16       24             32
//!  +------+----+------+-------+-------+----------+--------+--------------+--------+--------------+
//!  | "CM" | v1 | kind | flags | depth | reserved | width  | kind_param   | seed   | total_weight |
//!  | 2 B  | u8 | u8   | u8    | u8    | u16 = 0  | u32    | u32          | u64    | u64          |
//!  +------+----+------+-------+-------+----------+--------+--------------+--------+--------------+
//!
//!  kind 1 CountMin      kind_param = 0
//!       body: depth * width counters, u64, row-major
//!  kind 2 DyadicCountMin kind_param = domain_bits (1..=64)
//!       body: for each level 0..=domain_bits, its counters, u64:
//!             exact level:    2^(domain_bits - level) counters
//!             sketched level: depth * width counters, row-major
//!             (a level is exact when 2^(domain_bits - level) <= depth * width)
//!  kind 3 HeavyHitters  kind_param = capacity (the k of top-k)
//!       body: depth * width counters, u64, row-major,
//!             then candidate_count u32, reserved u32 = 0,
//!             then candidate_count keys, u64, strictly ascending
//!  flags: bit 0 = conservative update; other bits must be 0.
//! ```
//!
//! A worked example: `CountMin::new(Params { depth: 2, width: 3, .. })` with
//! seed 7 after one insert of weight 5 encodes to 32 + 2 * 3 * 8 = 80 bytes:
//!
//! ```text
//! 43 4d 01 01 01 02 00 00 | 03 00 00 00 | 00 00 00 00 | 07 00 .. 00 | 05 00 .. 00
//! then six counters, one 5 in each row at the columns the row hashes pick.
//! ```
//!
//! `decode` checks, in this order and before allocating: the magic, the
//! version, the kind, the flags, the parameters against the `*_MAX` limits,
//! the counter bytes against [`COUNTERS_BYTES_MAX`], and that the input
//! length equals the header's length exactly. Then it checks the table's
//! invariants (every row of a plain table sums to `total_weight`, no row of a
//! conservative table exceeds it), so most corruptions are reported as
//! errors instead of being read as a different sketch. `decode` never
//! allocates more than the input length.
//!
//! # Limits
//!
//! `new` and `decode` both reject parameters beyond [`WIDTH_MAX`],
//! [`DEPTH_MAX`], [`COUNTERS_BYTES_MAX`], [`DOMAIN_BITS_MAX`] and
//! [`CAPACITY_MAX`] with [`Error::InvalidParameter`] or
//! [`Error::LimitExceeded`]: parameters may come from user config, so every
//! constructor returns a `Result` rather than asserting.

// Maintainer notes.
//
// Changing any of the following changes the bytes, so bump
// `FORMAT_VERSION` and keep a reader for the old version: the header layout,
// the row order, the level order of `DyadicCountMin`, the exact-level rule
// (`dyadic::level_is_exact`), the SplitMix64 seed derivation
// (`RowHashes::new`, `dyadic::level_seed`) or the hash and range reduction in
// `RowHashes::column`. The last two do not change the layout but do change
// which counter a key lands in, so old sketches would merge silently wrong.

mod dyadic;
mod heavy;
mod wire;

pub use dyadic::{DyadicCountMin, DyadicParams, FloatDomain};
pub use heavy::{HeavyHitter, HeavyHitters};

use crate::{Error, Estimate, Result, Sketch};
use wire::{Header, Kind};

/// The sketch family name used in errors.
const SKETCH: &str = "countmin";

/// The largest row width. `2^22` counters (32 MiB per row) gives
/// `eps = e / 2^22 ~ 6.5e-7`, finer than any rollup needs; the limit also
/// keeps the range-reduction bias below `2^-40` (see "Row hashes").
pub const WIDTH_MAX: u32 = 1 << 22;

/// The largest number of rows. `delta = e^-32 ~ 1.3e-14`; more rows cost
/// time per insert and buy nothing measurable. Fits the header's `u8`.
pub const DEPTH_MAX: u32 = 32;

/// The largest counter table, in bytes, of any one sketch (all levels of a
/// [`DyadicCountMin`] together). Sketches live in rollup tables by the
/// thousand; 64 MiB is far above any sensible size and bounds what a hostile
/// header can make `new` allocate.
pub const COUNTERS_BYTES_MAX: u64 = 64 << 20;

/// The widest integer domain of a [`DyadicCountMin`]: all of `u64`.
pub const DOMAIN_BITS_MAX: u32 = 64;

/// The most candidate keys a [`HeavyHitters`] keeps (its `k`). Each
/// candidate costs about 40 bytes in memory and 8 in the encoding, and the
/// eviction scan is linear in `k`.
pub const CAPACITY_MAX: u32 = 4096;

/// The seed used when callers do not pick one. Sketches merge only with equal
/// seeds, so a rollup should keep this unless it has a reason not to.
pub const SEED_DEFAULT: u64 = 0x636f_756e_746d_696e; // "countmin"

const _: () = assert!(DEPTH_MAX <= u8::MAX as u32);
const _: () = assert!((WIDTH_MAX as u64) * (DEPTH_MAX as u64) * 8 > COUNTERS_BYTES_MAX);
const _: () = assert!(COUNTERS_BYTES_MAX / 8 <= u32::MAX as u64);

/// How an insert updates the key's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Update {
    /// Add the weight to every one of the key's `depth` counters.
    Plain,
    /// Raise each of the key's counters to at least `min + weight` (Estan and
    /// Varghese 2002). Never larger estimates than `Plain`, same guarantee.
    #[default]
    Conservative,
}

/// The dimensions, update rule and seed of a Count-Min table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Rows, `d`, in `1..=DEPTH_MAX`.
    pub depth: u32,
    /// Counters per row, `w`, in `1..=WIDTH_MAX`.
    pub width: u32,
    /// Plain or conservative update.
    pub update: Update,
    /// Seed of the row hashes. Sketches merge only with equal seeds.
    pub seed: u64,
}

impl Default for Params {
    /// `eps = 0.001`, `delta = 0.01`: `depth = 5`, `width = 2719` (106 KiB).
    fn default() -> Self {
        Self {
            depth: 5,
            width: 2719,
            update: Update::default(),
            seed: SEED_DEFAULT,
        }
    }
}

impl Params {
    /// The additive error bound as a fraction of `N`: `eps = e / width`.
    pub fn eps(&self) -> f64 {
        std::f64::consts::E / f64::from(self.width)
    }

    /// The probability that one point query exceeds `eps * N`:
    /// `delta = e^-depth`.
    pub fn delta(&self) -> f64 {
        (-f64::from(self.depth)).exp()
    }

    /// The number of counters, `depth * width`.
    pub fn counter_count(&self) -> u64 {
        u64::from(self.depth) * u64::from(self.width)
    }

    /// Checks the parameters against the limits.
    fn validate(&self) -> Result<()> {
        if self.depth == 0 || self.depth > DEPTH_MAX {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "depth",
                value: i64::from(self.depth),
                reason: "must be in 1..=DEPTH_MAX (32)",
            });
        }
        if self.width == 0 || self.width > WIDTH_MAX {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "width",
                value: i64::from(self.width),
                reason: "must be in 1..=WIDTH_MAX (4194304)",
            });
        }
        counters_bytes_check(self.counter_count())
    }
}

/// A requested error bound, turned into [`Params`] by [`Accuracy::params`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// Additive error as a fraction of the total weight, in (0, 1).
    pub eps: f64,
    /// Probability of exceeding it, per query, in (0, 1).
    pub delta: f64,
}

impl Accuracy {
    /// `width = ceil(e / eps)`, `depth = ceil(ln(1 / delta))` (Cormode and
    /// Muthukrishnan 2005, section 3), conservative update, default seed.
    ///
    /// Errors name `eps_ppm` or `delta_ppm` (the value in parts per million,
    /// because [`Error::InvalidParameter`] carries an integer) when a value
    /// is outside (0, 1) or asks for more than [`WIDTH_MAX`] or [`DEPTH_MAX`].
    pub fn params(&self) -> Result<Params> {
        let ppm = |value: f64| -> i64 {
            // `as` from f64 saturates and maps NaN to 0, which is what an
            // error message wants.
            #[allow(clippy::cast_possible_truncation)]
            let ppm = (value * 1e6).round() as i64;
            ppm
        };
        if !(self.eps > 0.0 && self.eps < 1.0) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "eps_ppm",
                value: ppm(self.eps),
                reason: "eps must be in (0, 1)",
            });
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "delta_ppm",
                value: ppm(self.delta),
                reason: "delta must be in (0, 1)",
            });
        }
        let width = (std::f64::consts::E / self.eps).ceil();
        if width > f64::from(WIDTH_MAX) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "eps_ppm",
                value: ppm(self.eps),
                reason: "eps must be at least e / WIDTH_MAX (~6.5e-7)",
            });
        }
        let depth = (1.0 / self.delta).ln().ceil().max(1.0);
        if depth > f64::from(DEPTH_MAX) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "delta_ppm",
                value: ppm(self.delta),
                reason: "delta must be at least e^-DEPTH_MAX (~1.3e-14)",
            });
        }
        // Both are integers in range, checked just above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let params = Params {
            depth: depth as u32,
            width: width as u32,
            update: Update::default(),
            seed: SEED_DEFAULT,
        };
        assert!(params.eps() <= self.eps * (1.0 + 1e-12));
        assert!(params.delta() <= self.delta * (1.0 + 1e-12));
        Ok(params)
    }
}

fn counters_bytes_check(counter_count: u64) -> Result<()> {
    let bytes = counter_count.saturating_mul(8);
    if bytes > COUNTERS_BYTES_MAX {
        return Err(Error::LimitExceeded {
            sketch: SKETCH,
            limit: "COUNTERS_BYTES_MAX",
            max: COUNTERS_BYTES_MAX,
            found: bytes,
        });
    }
    Ok(())
}

/// Depths up to this keep each row's cell during a conservative insert
/// (the default depth is 5); deeper tables compute it twice.
const CELLS_KEPT_MAX: usize = 8;

/// SplitMix64 (Steele, Lea and Flood 2014, "Fast Splittable Pseudorandom
/// Number Generators", OOPSLA): one step, used to derive hash seeds.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `depth` row hash functions of one table (see "Row hashes").
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowHashes {
    /// `(a_i, b_i)` per row.
    seeds: Vec<(u128, u128)>,
    width: u32,
}

impl RowHashes {
    fn new(params: &Params) -> Self {
        assert!(params.depth >= 1);
        assert!(params.depth <= DEPTH_MAX);
        assert!(params.width >= 1);
        assert!(params.width <= WIDTH_MAX);
        let mut state = params.seed;
        let mut next_u128 = || {
            let high = u128::from(splitmix64(&mut state));
            let low = u128::from(splitmix64(&mut state));
            (high << 64) | low
        };
        let seeds = (0..params.depth)
            .map(|_| (next_u128(), next_u128()))
            .collect();
        Self {
            seeds,
            width: params.width,
        }
    }

    /// The column of `key` in row `row`.
    #[inline]
    fn column(&self, row: usize, key: u64) -> usize {
        Self::column_of(self.seeds[row], self.width as usize, key)
    }

    /// The column of `key` in the row whose seeds are `(a, b)`, for a
    /// table `width` wide.
    #[inline(always)]
    fn column_of((a, b): (u128, u128), width: usize, key: u64) -> usize {
        let hash = a.wrapping_mul(u128::from(key)).wrapping_add(b) >> 64;
        let column = (hash * width as u128) >> 64;
        debug_assert!(column < width as u128);
        // Below `width`, a u32.
        #[allow(clippy::cast_possible_truncation)]
        let column = column as usize;
        column
    }
}

/// A Count-Min sketch over 64-bit key hashes.
///
/// ```
/// use cardinal_sketch::countmin::{Accuracy, CountMin};
/// use cardinal_sketch::{hash, Sketch};
///
/// let mut clicks = CountMin::with_accuracy(Accuracy { eps: 0.001, delta: 0.01 }).unwrap();
/// for id in 0..1000u64 {
///     clicks.insert(hash::user_id(id % 10), 1);
/// }
/// let e = clicks.frequency(hash::user_id(3));
/// assert!(e.lower <= 100.0 && 100.0 <= e.upper);
/// assert_eq!(CountMin::decode(&clicks.encode()).unwrap(), clicks);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountMin {
    params: Params,
    hashes: RowHashes,
    /// `depth * width` counters, row-major.
    counters: Vec<u64>,
    total_weight: u64,
}

impl CountMin {
    /// An empty sketch with the given dimensions. Allocates its whole table.
    pub fn new(params: Params) -> Result<Self> {
        params.validate()?;
        let counter_count = usize::try_from(params.counter_count())
            .expect("COUNTERS_BYTES_MAX keeps the counter count within usize");
        Ok(Self {
            hashes: RowHashes::new(&params),
            params,
            counters: vec![0; counter_count],
            total_weight: 0,
        })
    }

    /// An empty sketch sized for `accuracy` (see [`Accuracy::params`]).
    pub fn with_accuracy(accuracy: Accuracy) -> Result<Self> {
        Self::new(accuracy.params()?)
    }

    /// Builds a sketch from decoded parts, checking the table's invariants.
    fn from_parts(params: Params, counters: Vec<u64>, total_weight: u64) -> Result<Self> {
        params.validate()?;
        assert_eq!(counters.len() as u64, params.counter_count());
        let width = usize::try_from(params.width).expect("width fits usize");
        for (row, cells) in counters.chunks_exact(width).enumerate() {
            let row_sum = cells.iter().fold(0u64, |sum, &c| sum.saturating_add(c));
            let consistent = match params.update {
                Update::Plain => row_sum == total_weight,
                Update::Conservative => row_sum <= total_weight,
            };
            if !consistent {
                return Err(Error::Malformed {
                    sketch: SKETCH,
                    reason: format!(
                        "row {row} sums to {row_sum}, which does not fit total weight \
                         {total_weight} for {:?} update",
                        params.update
                    ),
                });
            }
        }
        Ok(Self {
            hashes: RowHashes::new(&params),
            params,
            counters,
            total_weight,
        })
    }

    /// The sketch's parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The total weight inserted, `N` (saturating at `u64::MAX`).
    pub fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// Adds `weight` to the key whose hash is `key_hash`.
    #[inline]
    pub fn insert(&mut self, key_hash: u64, weight: u64) {
        self.insert_then_count(key_hash, weight);
    }

    /// Inserts and returns the key's new point estimate, saving a second pass
    /// over the rows for [`HeavyHitters`].
    fn insert_then_count(&mut self, key_hash: u64, weight: u64) -> u64 {
        self.total_weight = self.total_weight.saturating_add(weight);
        let width = self.params.width as usize;
        let seeds = &self.hashes.seeds;
        debug_assert_eq!(self.counters.len(), seeds.len() * width);
        // Row by row: each row's counters and seeds are zipped, so that
        // neither is indexed (and bounds-checked) per row.
        let rows = || self.counters.chunks_exact(width).zip(seeds);
        match self.params.update {
            Update::Plain => {
                let mut count_min = u64::MAX;
                for (counters, &seed) in self.counters.chunks_exact_mut(width).zip(seeds) {
                    let counter = &mut counters[RowHashes::column_of(seed, width, key_hash)];
                    *counter = counter.saturating_add(weight);
                    count_min = count_min.min(*counter);
                }
                count_min
            }
            Update::Conservative if seeds.len() <= CELLS_KEPT_MAX => {
                // The usual depths: each row's cell is computed once and
                // kept for the raise.
                let mut cells = [0usize; CELLS_KEPT_MAX];
                let mut count_min = u64::MAX;
                for (row, ((counters, &seed), cell)) in rows().zip(cells.iter_mut()).enumerate() {
                    let column = RowHashes::column_of(seed, width, key_hash);
                    *cell = row * width + column;
                    count_min = count_min.min(counters[column]);
                }
                let count_min = count_min.saturating_add(weight);
                for &cell in &cells[..seeds.len()] {
                    let counter = &mut self.counters[cell];
                    *counter = (*counter).max(count_min);
                }
                debug_assert!(self.count(key_hash) >= count_min);
                count_min
            }
            Update::Conservative => {
                // Deeper tables compute each column twice rather than keep
                // an array of DEPTH_MAX cells.
                let count_min = rows()
                    .map(|(counters, &seed)| counters[RowHashes::column_of(seed, width, key_hash)])
                    .min()
                    .expect("depth >= 1")
                    .saturating_add(weight);
                for (counters, &seed) in self.counters.chunks_exact_mut(width).zip(seeds) {
                    let counter = &mut counters[RowHashes::column_of(seed, width, key_hash)];
                    *counter = (*counter).max(count_min);
                }
                debug_assert!(self.count(key_hash) >= count_min);
                count_min
            }
        }
    }

    /// The minimum of the key's counters: an upper bound on its weight.
    #[inline]
    fn count(&self, key_hash: u64) -> u64 {
        let width = self.params.width as usize;
        (0..self.params.depth as usize)
            .map(|row| self.counters[row * width + self.hashes.column(row, key_hash)])
            .min()
            .expect("depth >= 1")
    }

    /// The weight of one key.
    ///
    /// The guarantee (Cormode and Muthukrishnan 2005, Theorem 1), for a key
    /// of true weight `f` with non-negative weights throughout:
    ///
    /// - `value = upper >= f` always;
    /// - `lower = max(0, value - eps * N) <= f` with probability at least
    ///   `1 - delta` over the choice of seed, and `confidence = 1 - delta`,
    ///   where `eps` and `delta` come from the actual dimensions
    ///   ([`Params::eps`], [`Params::delta`]), not the requested ones.
    ///
    /// A key whose counters include a zero was never inserted, and its
    /// answer is exactly zero.
    pub fn frequency(&self, key_hash: u64) -> Estimate {
        let count = self.count(key_hash);
        self.bound(count, 1)
    }

    /// An estimate for a sum of `cell_count` point counts: each over-counts
    /// by at most `eps * N` with probability `1 - delta`, independently.
    fn bound(&self, count_sum: u64, cell_count: u32) -> Estimate {
        if count_sum == 0 || cell_count == 0 {
            return Estimate::exact(count_sum as f64);
        }
        let value = count_sum as f64;
        let slack = f64::from(cell_count) * self.params.eps() * self.total_weight as f64;
        let confidence =
            (1.0 - self.params.delta()).powi(i32::try_from(cell_count).unwrap_or(i32::MAX));
        let estimate = Estimate {
            value,
            lower: (value - slack).max(0.0),
            upper: value,
            confidence,
        };
        assert!(estimate.lower <= estimate.value);
        estimate
    }

    fn check_compatible(&self, other: &Self) -> Result<()> {
        if self.params != other.params {
            return Err(Error::Incompatible {
                sketch: SKETCH,
                reason: format!("parameters differ: {:?} vs {:?}", self.params, other.params),
            });
        }
        Ok(())
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        for counter in &self.counters {
            out.extend_from_slice(&counter.to_le_bytes());
        }
    }

    fn header(&self, kind: Kind, kind_param: u32) -> Header {
        Header {
            kind,
            params: self.params,
            kind_param,
            total_weight: self.total_weight,
        }
    }
}

impl Sketch for CountMin {
    /// The total weight, exact.
    type Estimate = Estimate;

    /// Adds counters. See "Merging" in the module doc for what that means
    /// under conservative update.
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.check_compatible(other)?;
        assert_eq!(self.counters.len(), other.counters.len());
        for (mine, theirs) in self.counters.iter_mut().zip(&other.counters) {
            *mine = mine.saturating_add(*theirs);
        }
        self.total_weight = self.total_weight.saturating_add(other.total_weight);
        Ok(())
    }

    /// The total weight `N`, which the sketch knows exactly.
    fn estimate(&self) -> Estimate {
        Estimate::exact(self.total_weight as f64)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(wire::HEADER_BYTES + self.counters.len() * 8);
        self.header(Kind::CountMin, 0).write(&mut out);
        self.write_body(&mut out);
        assert_eq!(out.len(), wire::HEADER_BYTES + self.counters.len() * 8);
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let (header, body) = Header::read(bytes, Kind::CountMin)?;
        if header.kind_param != 0 {
            return Err(Error::Malformed {
                sketch: SKETCH,
                reason: format!(
                    "kind parameter {} must be 0 for a CountMin",
                    header.kind_param
                ),
            });
        }
        let counter_count = header.params.counter_count();
        wire::expect_body_len(body, counter_count.saturating_mul(8))?;
        let counters = wire::read_counters(body);
        Self::from_parts(header.params, counters, header.total_weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(update: Update) -> CountMin {
        CountMin::new(Params {
            depth: 4,
            width: 64,
            update,
            seed: 1,
        })
        .expect("valid params")
    }

    #[test]
    fn accuracy_gives_the_paper_dimensions() {
        let params = Accuracy {
            eps: 0.01,
            delta: 0.01,
        }
        .params()
        .expect("valid");
        assert_eq!(params.width, 272); // ceil(e / 0.01) = ceil(271.83)
        assert_eq!(params.depth, 5); // ceil(ln 100) = ceil(4.61)
        assert_eq!(
            Params::default(),
            Params {
                seed: SEED_DEFAULT,
                ..Accuracy {
                    eps: 0.001,
                    delta: 0.01
                }
                .params()
                .expect("valid")
            }
        );
    }

    #[test]
    fn accuracy_rejects_out_of_range_values() {
        for (eps, delta) in [
            (0.0, 0.1),
            (1.0, 0.1),
            (f64::NAN, 0.1),
            (0.1, 0.0),
            (0.1, 1.5),
            (1e-9, 0.1),
            (0.1, 1e-20),
        ] {
            let error = Accuracy { eps, delta }.params().expect_err("out of range");
            assert!(matches!(error, Error::InvalidParameter { .. }), "{error}");
        }
    }

    #[test]
    fn new_rejects_dimensions_beyond_the_limits() {
        let base = Params::default();
        assert!(CountMin::new(Params { depth: 0, ..base }).is_err());
        assert!(
            CountMin::new(Params {
                depth: DEPTH_MAX + 1,
                ..base
            })
            .is_err()
        );
        assert!(CountMin::new(Params { width: 0, ..base }).is_err());
        assert!(
            CountMin::new(Params {
                width: WIDTH_MAX + 1,
                ..base
            })
            .is_err()
        );
        let too_big = CountMin::new(Params {
            depth: DEPTH_MAX,
            width: WIDTH_MAX,
            ..base
        });
        assert!(matches!(too_big, Err(Error::LimitExceeded { .. })));
    }

    #[test]
    fn columns_stay_in_range_and_spread() {
        let params = Params {
            depth: 3,
            width: 7,
            update: Update::Plain,
            seed: 9,
        };
        let hashes = RowHashes::new(&params);
        let mut seen = [[0u32; 7]; 3];
        for key in 0..7000u64 {
            for (row, seen_row) in seen.iter_mut().enumerate() {
                seen_row[hashes.column(row, key)] += 1;
            }
        }
        // 1000 expected per column; a strongly universal hash on sequential
        // keys stays well within +-20%.
        for row in seen {
            assert!(row.iter().all(|&n| (800..1200).contains(&n)), "{row:?}");
        }
    }

    /// Inserts update exactly the counters a row-by-row reading of the
    /// definition does, for depths that keep their cells
    /// (`CELLS_KEPT_MAX`) and deeper ones that compute them twice, under
    /// both update rules.
    #[test]
    fn inserts_match_the_definition_at_every_depth() {
        for depth in [1, 2, 5, 8, 9, 16, DEPTH_MAX] {
            for update in [Update::Plain, Update::Conservative] {
                let params = Params {
                    depth,
                    width: 61,
                    update,
                    seed: SEED_DEFAULT,
                };
                let mut sketch = CountMin::new(params).expect("valid");
                let mut counters = vec![0u64; sketch.counters.len()];
                let width = params.width as usize;
                for i in 0..2000u64 {
                    let key = crate::hash::user_id(i % 97);
                    let weight = 1 + i % 3;
                    let cells: Vec<usize> = (0..depth as usize)
                        .map(|row| row * width + sketch.hashes.column(row, key))
                        .collect();
                    let want = match update {
                        Update::Plain => {
                            for &cell in &cells {
                                counters[cell] += weight;
                            }
                            cells.iter().map(|&cell| counters[cell]).min()
                        }
                        Update::Conservative => {
                            let raised = cells
                                .iter()
                                .map(|&cell| counters[cell])
                                .min()
                                .expect("depth >= 1")
                                + weight;
                            for &cell in &cells {
                                counters[cell] = counters[cell].max(raised);
                            }
                            Some(raised)
                        }
                    };
                    assert_eq!(
                        Some(sketch.insert_then_count(key, weight)),
                        want,
                        "depth {depth}, {update:?}"
                    );
                }
                assert_eq!(sketch.counters, counters, "depth {depth}, {update:?}");
            }
        }
    }

    #[test]
    fn plain_and_conservative_never_under_count() {
        for update in [Update::Plain, Update::Conservative] {
            let mut sketch = small(update);
            for key in 0..500u64 {
                sketch.insert(key, key % 7 + 1);
            }
            for key in 0..500u64 {
                assert!(sketch.frequency(key).upper >= (key % 7 + 1) as f64);
            }
            assert_eq!(
                sketch.total_weight(),
                (0..500u64).map(|k| k % 7 + 1).sum::<u64>()
            );
        }
    }

    #[test]
    fn conservative_is_never_looser_than_plain() {
        let mut plain = small(Update::Plain);
        let mut conservative = small(Update::Conservative);
        for key in 0..1000u64 {
            plain.insert(key % 300, 1 + key % 3);
            conservative.insert(key % 300, 1 + key % 3);
        }
        for key in 0..300 {
            assert!(conservative.count(key) <= plain.count(key));
        }
    }

    #[test]
    fn unseen_key_in_an_empty_sketch_is_exactly_zero() {
        let sketch = small(Update::Conservative);
        assert!(sketch.frequency(42).is_exact());
        assert_eq!(sketch.frequency(42).value, 0.0);
    }

    #[test]
    fn frequency_interval_uses_actual_eps_and_delta() {
        let mut sketch = small(Update::Plain);
        for key in 0..1000u64 {
            sketch.insert(key, 1);
        }
        let e = sketch.frequency(5);
        assert_eq!(e.upper, e.value);
        assert!((e.confidence - (1.0 - (-4.0f64).exp())).abs() < 1e-12);
        assert!((e.value - e.lower) <= std::f64::consts::E / 64.0 * 1000.0 + 1e-9);
    }

    #[test]
    fn merge_of_plain_sketches_equals_one_sketch_of_both_streams() {
        let mut left = small(Update::Plain);
        let mut right = small(Update::Plain);
        let mut both = small(Update::Plain);
        for key in 0..300u64 {
            left.insert(key, 2);
            both.insert(key, 2);
        }
        for key in 200..600u64 {
            right.insert(key, 3);
            both.insert(key, 3);
        }
        left.merge(&right).expect("same params");
        assert_eq!(left, both);
    }

    #[test]
    fn merge_rejects_other_parameters_and_leaves_self_alone() {
        let mut left = small(Update::Plain);
        left.insert(1, 1);
        let before = left.clone();
        for other in [
            small(Update::Conservative),
            CountMin::new(Params {
                seed: 2,
                ..*small(Update::Plain).params()
            })
            .expect("valid"),
        ] {
            assert!(matches!(
                left.merge(&other),
                Err(Error::Incompatible { .. })
            ));
            assert_eq!(left, before);
        }
    }

    #[test]
    fn weights_saturate_instead_of_wrapping() {
        let mut sketch = small(Update::Plain);
        sketch.insert(1, u64::MAX);
        sketch.insert(1, 5);
        assert_eq!(sketch.total_weight(), u64::MAX);
        assert_eq!(sketch.count(1), u64::MAX);
        assert_eq!(CountMin::decode(&sketch.encode()).expect("valid"), sketch);
    }

    #[test]
    fn worked_example_in_the_module_doc() {
        let mut sketch = CountMin::new(Params {
            depth: 2,
            width: 3,
            update: Update::Conservative,
            seed: 7,
        })
        .expect("valid");
        sketch.insert(12345, 5);
        let bytes = sketch.encode();
        assert_eq!(bytes.len(), 80);
        assert_eq!(&bytes[..8], &[0x43, 0x4d, 1, 1, 1, 2, 0, 0]);
        assert_eq!(&bytes[8..12], &[3, 0, 0, 0]);
        assert_eq!(&bytes[16..24], &7u64.to_le_bytes());
        assert_eq!(&bytes[24..32], &5u64.to_le_bytes());
        let counters: Vec<u64> = bytes[32..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(counters.iter().filter(|&&c| c == 5).count(), 2);
        assert_eq!(counters[..3].iter().sum::<u64>(), 5);
    }

    #[test]
    fn decode_rejects_broken_headers_and_lengths() {
        let mut sketch = small(Update::Plain);
        sketch.insert(3, 3);
        let bytes = sketch.encode();
        assert!(CountMin::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(CountMin::decode(&[bytes.clone(), vec![0]].concat()).is_err());
        assert!(CountMin::decode(&bytes[..10]).is_err());
        let mut broken = bytes.clone();
        broken[2] = 2;
        assert!(matches!(
            CountMin::decode(&broken),
            Err(Error::UnsupportedVersion { .. })
        ));
        let mut broken = bytes.clone();
        broken[4] = 0x80;
        assert!(matches!(
            CountMin::decode(&broken),
            Err(Error::Malformed { .. })
        ));
        let mut broken = bytes.clone();
        broken[24] = 4; // total weight no longer matches the rows
        assert!(matches!(
            CountMin::decode(&broken),
            Err(Error::Malformed { .. })
        ));
        let mut huge = bytes.clone();
        huge[5] = 32;
        huge[8..12].copy_from_slice(&WIDTH_MAX.to_le_bytes());
        assert!(matches!(
            CountMin::decode(&huge),
            Err(Error::LimitExceeded { .. })
        ));
    }
}
