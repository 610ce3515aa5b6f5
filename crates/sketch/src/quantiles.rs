//! [`Quantiles`]: a mergeable quantile sketch over `f64` (KLL).
//!
//! The sketch is Apache DataSketches' KLL for doubles, image for image: a
//! rollup written here can be read by DataSketches Java and C++ and the
//! other way round. KLL is due to Karnin, Lang and Liberty, "Optimal
//! Quantile Approximation in Streams" (FOCS 2016); DataSketches keeps levels
//! of "compactors", each holding items of weight 2^level, and halves a full
//! level by keeping every other sorted item, chosen by a coin flip.
//!
//! Inserts run here, on one flat buffer laid out as DataSketches C++ lays
//! out its `kll_sketch` (free space, then level 0 growing down, then the
//! sorted levels above), compacting in place: no allocation except when the
//! buffer grows (doubling up to the first level's capacity, then once per
//! new level, about once each time `n` doubles).
//!
//! One thing differs from DataSketches' update: once the buffer has reached
//! its capacity it keeps `SLACK` (64) free slots more, so level 0 gathers
//! 64 new values before anything compacts, and then each level compacts
//! about once until the sketch is back within its capacity
//! (`Quantiles::settle`, as DataSketches' merge compresses). DataSketches
//! compacts whenever the buffer is full, every few values once level 0's
//! capacity is `m`, and each compaction moves every level below it: 22 ns
//! an insert against 16 here (`examples/quantile_speed.rs`, 150 sketches),
//! 6% of the engine's W1. Fewer, longer compactions lose no accuracy (the
//! test `batched_compaction_is_as_accurate_as_datasketches_update` holds
//! ours to DataSketches' own); an image is always within the capacity, a
//! sketch holding more first settled on a copy with the sketch's next
//! coins, so that every image and answer of one sketch agree. The Rust port
//! (`datasketches::kll::KllSketch`, 0.6) keeps a `Vec` per level and builds
//! new ones on every compaction (about 270 instructions per insert against
//! about 130 here, measured with callgrind on the engine's W1 workload).
//! Merges run here too (DataSketches' `merge` and `general_compress`, on
//! the same buffer), and so do queries (`Quantiles::sorted_view`, whose
//! answers a test holds to the port's). Decoding validation goes through
//! the port, which reads and writes the same images (the golden tests
//! check Java's byte for byte).
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
//! ## The 95% interval of a quantile's value
//!
//! DataSketches' `eps` bounds the error over *all* ranks of a sketch at
//! once (the largest gap between its CDF and the true one, at 99%), so one
//! query's error is far smaller. Each compaction at level `h` halves `c`
//! sorted items, keeping every other one by a coin: a query's rank moves
//! by `+/- 2^h` when an odd number of the `c` items lie at or below it,
//! and not at all otherwise, independently of the other compactions. With
//! the items a random sample of the stream, each at or below a query at
//! normalized rank `r` with probability `r`, the count below is binomial
//! and odd with probability `(1 - (1 - 2r)^c) / 2`, so the rank error at
//! `r` has variance `sum 4^h (1 - (1 - 2r)^c) / 2` over every compaction
//! the sketch and the sketches merged into it made: `sum 4^h / 2` at the
//! median, less towards the tails, where a compaction of few items rarely
//! straddles the query (at `r = 0.01` the count below among 26 items is
//! odd 20% of the time, against 50% at the median). The sketch keeps the weights `4^h /
//! 2` summed per half octave of `c` with their `c`-weighted sums (23
//! classes, `Compactions`), so a query evaluates the sum over at most 23
//! classes: [`Quantiles::rank_sigma_at`] is its square root over `n`.
//! Measured over 4,000 fresh streams a row (`tests/calibration.rs`,
//! `kll_error_steps`: k = 200, n = 10^4 to 10^6, one sketch and merges of
//! 10 and 100, ranks 0.05 and 0.5), the standard deviation of one
//! query's error is that within 3% (0.985 to 1.030 of it); over the
//! coins of one stream (`kll_sigma_probe`, k = 50 to 400) within about
//! 10%.
//!
//! [`Quantiles::rank_error_95`] at `r` is `e = 1.96 x rank_sigma_at(r)`
//! (0 in exact mode), and [`Quantiles::quantile_interval`] answers the
//! *values* at `r - e` and `r + e`: the true quantile `x` lies between
//! them exactly when its estimated rank is at least `r - e` and the
//! estimated rank of the values below it is under `r + e` (the ends
//! being retained items does not widen the interval beyond that). Measured coverage of the true quantile, each trial a fresh
//! stream of distinct values (KLL answers by rank, so any distinct values
//! answer alike) and fresh coins, 1,000 trials a cell, k = 200
//! (`cargo test --release -p cardinal-sketch --test calibration
//! kll_intervals_cover_95_percent_at_every_rank_large -- --ignored
//! --nocapture`, 2026-11-28):
//!
//! | values | merged | 0.01 | 0.05 | 0.25 | 0.5 | 0.75 | 0.95 | 0.99 | pooled |
//! |---|---|---|---|---|---|---|---|---|---|
//! | 1,000 | 1 | 0.940 | 0.965 | 0.948 | 0.958 | 0.961 | 0.951 | 0.937 | 0.951 |
//! | 1,000 | 10 | 0.950 | 0.965 | 0.955 | 0.963 | 0.967 | 0.959 | 0.933 | 0.956 |
//! | 1,000 | 100 | 0.931 | 0.950 | 0.964 | 0.953 | 0.953 | 0.948 | 0.933 | 0.947 |
//! | 3,000 | 1 | 0.950 | 0.962 | 0.960 | 0.978 | 0.960 | 0.958 | 0.967 | 0.962 |
//! | 3,000 | 10 | 0.969 | 0.974 | 0.971 | 0.917 | 0.976 | 0.965 | 0.970 | 0.963 |
//! | 3,000 | 100 | 0.960 | 0.968 | 0.966 | 0.978 | 0.959 | 0.964 | 0.970 | 0.966 |
//! | 10^4 | 1 | 0.964 | 0.968 | 0.961 | 0.965 | 0.969 | 0.972 | 0.945 | 0.963 |
//! | 10^4 | 10 | 0.958 | 0.923 | 0.972 | 0.966 | 0.975 | 0.967 | 0.961 | 0.960 |
//! | 10^4 | 100 | 0.957 | 0.965 | 0.960 | 0.956 | 0.962 | 0.962 | 0.946 | 0.958 |
//! | 3 x 10^4 | 1 | 0.955 | 0.950 | 0.947 | 0.946 | 0.944 | 0.961 | 0.954 | 0.951 |
//! | 3 x 10^4 | 10 | 0.969 | 0.937 | 0.934 | 0.928 | 0.955 | 0.932 | 0.953 | 0.944 |
//! | 3 x 10^4 | 100 | 0.925 | 0.950 | 0.945 | 0.950 | 0.937 | 0.955 | 0.943 | 0.944 |
//! | 10^5 | 1 | 0.941 | 0.960 | 0.951 | 0.954 | 0.943 | 0.946 | 0.950 | 0.949 |
//! | 10^5 | 10 | 0.960 | 0.935 | 0.951 | 0.980 | 0.932 | 0.945 | 0.942 | 0.949 |
//! | 10^5 | 100 | 0.963 | 0.950 | 0.944 | 0.941 | 0.943 | 0.944 | 0.954 | 0.948 |
//! | from 10^4, pooled | | 0.955 | 0.949 | 0.952 | 0.954 | 0.951 | 0.954 | 0.950 | 0.952 |
//!
//! Pooled over sizes and merges from 10^4 values, every rank covers
//! 0.949 to 0.955 (9,000 trials a rank; `tests/calibration.rs` holds each
//! to 0.94..=0.96 on a smaller grid by default). Before (the variance of
//! the median at every rank, times 0.94, a factor fitted pooled over
//! ranks on one stream per cell), the same grid measured 0.936 to 0.950
//! per rank (0.936 at the median) and 0.941 pooled.
//!
//! One cell is not calibrated to 94..96%, and cannot be by any interval
//! of fixed width: the cells range from 0.923 to 0.980 (binomial noise
//! is 0.007). One stream size and merge count fix the compaction
//! schedule, and the few compactions of the top levels carry much of the
//! variance, each a jump of `+/- 2^h`, so the error's distribution has
//! atoms: at 14,000 values merged from 10 sketches, rank 0.05, any
//! interval from 1.80 to 2.08 sigma covers 0.934 and any from 2.10 sigma
//! 0.994; at 10^5 values merged from 10, the median, 0.939 below 1.96
//! sigma and 0.979 from it; at 10^6 merged from 10, 0.930 anywhere from
//! 1.8 to 2.2 sigma (`kll_error_steps`, 4,000 trials a row, 400 at
//! 10^6; the standard deviation matches the model within 3% in every
//! row). Which side of an atom 1.96 sigma falls on changes with `n`;
//! over sizes spread through an octave it averages out: the value grid
//! of `kll_value_intervals_cover_95_percent_large` (uniform and Pareto
//! streams, 10^4 to 10^6 values, one sketch and merges of 10 and 100)
//! covers 0.954 over 25,704 trials.
//!
//! Below about 10^4 values the sketch has compacted a few times and the
//! error steps are coarser still: pooled from 1,000 to 3,000 values
//! coverage is 0.958 (cells 0.917 to 0.978); up to a few hundred values
//! every interval covers (the error is a few items). With heavily repeated
//! values coverage is higher (0.99 for a Zipf stream where half the
//! values are equal): a run of equal values is covered whatever the rank
//! error.
//!
//! A sketch read from DataSketches' image ([`Sketch::decode`]: the
//! format has no room for it, and Java, C++ and Python read and write it
//! as it is) or from a state image of version 0 does not know its
//! compactions, nor does a merge with it; [`Quantiles::encode_state`]
//! carries them, so a rollup restored or shipped between nodes keeps its
//! intervals. A sketch that does not know them takes the standard
//! deviation as `0.355 / k^0.9723` (0.0021 at k = 200) at every rank,
//! fitted so that its intervals covered 95% pooled over an earlier grid
//! (0.953 over 17,304 trials), but not per shape: a single sketch of 10^5
//! values errs more than that (0.89 coverage) and a merge of 10 less
//! (0.99).
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
//! KLL is randomized: each compaction flips a coin. Each sketch here has
//! its own SplitMix64 stream of coins, seeded when the sketch is made from
//! a per-thread stream of seeds that starts from a fixed value: the one
//! [`seed_thread`] names (the engine names each worker's thread by its
//! index), or else one per thread in the order threads make their first
//! sketch. The coins never depend on the values, and no two sketches share
//! them (sketches that flip the same coins at the same counts err
//! together). A merge compacts with the coins of the sketch merged into
//! (DataSketches' merge, run here: its own coins could not be seeded). A
//! program that makes its sketches in the same order, feeds them the same
//! values and merges them in the same order gets the same sketches, images
//! and answers in every run. Below `k` values (exact mode) everything is
//! deterministic. Tests fix the seed of their *data* and check errors
//! against bounds.
//!
//! Code that does not control which thread runs it, or what that thread
//! made before (a server answering queries), seeds explicitly:
//! [`Quantiles::with_seed`] makes a sketch whose coins come from a given
//! seed alone, and [`Quantiles::reseed`] restarts a sketch's coins, e.g. a
//! fresh sketch that a query's groups are about to be merged into, seeded
//! from the query's bucket, group and aggregate. The sketches merged *from*
//! flip no coins, so the answer is then a function of the states and the
//! query only.
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
// min/max envelope and that the level weights sum to n. Fuzzing (564k runs,
// 2026-11, 2-core VM) found no panic and no allocation beyond the input
// length in it. The one assertion a decoded image sits next to is in
// `total_capacity`: growing a 62nd level panics. An item on level L weighs
// 2^L <= n, so bounding n by COUNT_MAX = 2^56 keeps every sketch we decode,
// merge or grow under 57 levels. We could not build an image that reaches
// the assertion without the bound (the u64 weight budget leaves too few
// items on high levels to fill them), so this is defence in depth: `decode`
// pre-checks n, and `merge` and `insert` refuse to pass the limit.
//
// Decoding runs DataSketches' validation first and only then reads the
// same image into our buffer (`from_valid_image`, which still checks
// lengths and offsets rather than trusting them). Our buffer follows C++
// `kll_sketch`'s `compress_while_updating`, `randomly_halve_up/down`,
// `merge_sorted_arrays`, `merge` and `merge_higher_levels` with
// `kll_helper::general_compress`; capacities are DataSketches' integer
// formulas (`capacity_at_depth`). Property tests insert into merged and
// decoded sketches and check every image against DataSketches' decoder,
// and a test holds our merge's rank error to DataSketches' merge's.

use datasketches::kll::{KllFloat, KllSketch};

use crate::{CONFIDENCE_DEFAULT, Error, Estimate, Result, Sketch, Z_95};

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
#[derive(Clone)]
pub struct Quantiles {
    k: u16,
    /// The smallest `k` merged in (DataSketches' `min_k`): sets the error.
    min_k: u16,
    /// Values summarized.
    n: u64,
    /// Level `i` is `items[levels[i] as usize..levels[i + 1] as usize]`;
    /// `levels.len()` is the number of levels plus one, and the last entry
    /// is `items.len()`.
    levels: Vec<u32>,
    /// The retained items, free space first, then level 0 (newest first,
    /// unsorted unless `level_zero_sorted`), then levels 1.. each sorted.
    /// At most [`total_capacity`] of the level count long; grows by
    /// doubling up to it, so a sketch of few values stays small.
    items: Vec<f64>,
    /// Exact minimum and maximum; meaningful when `n > 0`.
    min: f64,
    max: f64,
    level_zero_sorted: bool,
    /// The level count `full` and `bottom` were worked out for (0: not
    /// yet). Capacities take a 64-bit division per level, and a long
    /// sketch's bottom level fills every few values: worked out per
    /// compaction they cost W1 about 1%.
    capacities_of: u8,
    /// [`total_capacity`] of `capacities_of` levels.
    full: u32,
    /// [`level_capacity`] of level 0 of `capacities_of` levels.
    bottom: u32,
    /// The state of this sketch's own stream of compaction coins
    /// (SplitMix64), seeded when it was made ([`next_seed`]).
    coins: u64,
    /// The compactions this sketch and the sketches merged into it made,
    /// as much of them as the variance of a query's rank error needs
    /// (`Compactions`); unknown for a sketch read from an image that
    /// does not carry them. See the module docs on the 95% interval.
    compactions: Compactions,
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

/// The sketch's contents, not its coins: two sketches that hold the same
/// values at the same levels print the same (tests compare folds that
/// make their sketches in different orders by their debug text).
impl std::fmt::Debug for Quantiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quantiles")
            .field("k", &self.k)
            .field("min_k", &self.min_k)
            .field("n", &self.n)
            .field("levels", &self.levels)
            .field("items", &self.items)
            .field("min", &self.min)
            .field("max", &self.max)
            .field("level_zero_sorted", &self.level_zero_sorted)
            .finish_non_exhaustive()
    }
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
        Self::with_coins(k, next_seed())
    }

    /// An empty sketch with accuracy parameter `k` whose compactions flip
    /// the coins of a stream started from `seed` alone, not from the
    /// thread's stream of seeds: the same values and merges in the same
    /// order give the same sketch on any thread, after any other sketches
    /// (see the module docs on Determinism).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] if `k` is outside [`K_MIN`]..=[`K_MAX`].
    pub fn with_seed(k: u16, seed: u64) -> Result<Self> {
        Self::with_coins(k, coins_of_seed(seed))
    }

    /// Restarts this sketch's coins from `seed` alone (as
    /// [`Quantiles::with_seed`]): compactions from here on, its own and
    /// those of merges into it, flip that stream's coins. What it already
    /// holds is unchanged. A caller that merges many sketches into a fresh
    /// one to answer a query reseeds the fresh one with a function of the
    /// query and the group, so the answer does not depend on the thread
    /// that computes it or on how many sketches that thread made before.
    /// Give every sketch its own seed: sketches that flip the same coins
    /// at the same counts err together.
    pub fn reseed(&mut self, seed: u64) {
        self.coins = coins_of_seed(seed);
    }

    /// An empty sketch with accuracy parameter `k` whose compactions flip
    /// the coins of the stream `coins` (a state, not a thread's seed).
    fn with_coins(k: u16, coins: u64) -> Result<Self> {
        if !(K_MIN..=K_MAX).contains(&k) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "k",
                value: i64::from(k),
                reason: "KLL supports 8..=65535",
            });
        }
        Ok(Self {
            k,
            min_k: k,
            n: 0,
            levels: vec![0, 0],
            items: Vec::new(),
            min: 0.0,
            max: 0.0,
            level_zero_sorted: false,
            capacities_of: 0,
            full: 0,
            bottom: 0,
            coins,
            compactions: Compactions::default(),
        })
    }

    /// Adds one value.
    ///
    /// NaN has no rank, so a NaN is ignored: it is not counted and changes
    /// nothing. Infinities are ordinary values. Once the sketch holds
    /// [`COUNT_MAX`] values, further values are dropped (see there).
    #[inline]
    pub fn insert(&mut self, value: f64) {
        if self.n >= COUNT_MAX || value.is_nan() {
            return;
        }
        if self.n == 0 {
            (self.min, self.max) = (value, value);
        } else {
            if value < self.min {
                self.min = value;
            }
            if value > self.max {
                self.max = value;
            }
        }
        if self.levels[0] == 0 {
            self.make_room();
        }
        self.levels[0] -= 1;
        self.items[self.levels[0] as usize] = value;
        self.n += 1;
        self.level_zero_sorted = false;
    }

    /// Frees a slot below level 0: grows the buffer while it is below the
    /// full capacity of its level count, then once by `SLACK` slots,
    /// else compacts until the sketch is within its capacity again
    /// ([`Self::settle`]; see the module docs).
    #[cold]
    fn make_room(&mut self) {
        let full = self.capacities().0 as usize;
        if self.items.len() < full {
            let grown = (self.items.len() * 2).clamp(GROW_MIN, full);
            self.shift_up(grown);
        } else if self.items.len() < full + SLACK {
            self.shift_up(full + SLACK);
        } else {
            self.settle();
        }
        debug_assert!(self.levels[0] > 0);
    }

    /// Values held.
    fn retained(&self) -> usize {
        self.items.len() - self.levels[0] as usize
    }

    /// Compacts the lowest level at its capacity until the sketch holds
    /// no more than its capacity (DataSketches' bound, which its image
    /// needs): at least `SLACK` slots free again. More values than the
    /// capacities sum to means some level holds at least its own. Each
    /// compaction flips the sketch's next coin.
    fn settle(&mut self) {
        while self.retained() > self.capacities().0 as usize {
            self.compress_while_updating();
        }
    }

    /// This sketch as DataSketches' image must hold it: itself, or a
    /// copy [`settled`](Self::settle) with the coins the sketch would flip
    /// next (the copy's; the sketch's own stay unflipped), so that every
    /// image and answer of the same sketch is the same.
    fn settled(&self) -> std::borrow::Cow<'_, Self> {
        if self.n == 0 || self.retained() <= total_capacity(self.k, self.num_levels()) as usize {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut copy = self.clone();
        copy.settle();
        std::borrow::Cow::Owned(copy)
    }

    fn num_levels(&self) -> usize {
        self.levels.len() - 1
    }

    /// [`total_capacity`] and level 0's [`level_capacity`] at the current
    /// level count, worked out once per level count.
    #[inline]
    fn capacities(&mut self) -> (u32, u32) {
        let levels = self.num_levels();
        if usize::from(self.capacities_of) != levels {
            self.full = total_capacity(self.k, levels);
            self.bottom = level_capacity(self.k, levels, 0);
            self.capacities_of = u8::try_from(levels).expect("below LEVELS_MAX");
        }
        (self.full, self.bottom)
    }

    /// Reallocates `items` to `len` slots, moving the retained items to the
    /// top (the new slots are free space below level 0).
    fn shift_up(&mut self, len: usize) {
        let delta = len - self.items.len();
        let mut items = Vec::with_capacity(len);
        items.resize(delta, 0.0);
        items.extend_from_slice(&self.items);
        self.items = items;
        let delta = u32::try_from(delta).expect("capacity fits u32");
        for offset in &mut self.levels {
            *offset += delta;
        }
    }

    /// Compacts the lowest level at or over its capacity into the level
    /// above: DataSketches' `compress_while_updating` (C++ `kll_sketch`),
    /// in place. The buffer is full (`levels[0] == 0`).
    fn compress_while_updating(&mut self) {
        let level = self.find_level_to_compact();
        if level + 1 == self.num_levels() {
            self.add_empty_top_level();
        }
        let raw_beg = self.levels[level] as usize;
        let raw_lim = self.levels[level + 1] as usize;
        let pop_above = self.levels[level + 2] as usize - raw_lim;
        let odd = (raw_lim - raw_beg) % 2 == 1;
        let adj_beg = raw_beg + usize::from(odd);
        let adj_pop = raw_lim - adj_beg;
        let half = adj_pop / 2;
        debug_assert_eq!(adj_beg + 2 * half, raw_lim);
        let sorted = level > 0 || self.level_zero_sorted;
        self.compactions.record(level, 2 * half);
        halve_into_level_above(
            &mut self.items,
            adj_beg,
            half,
            pop_above,
            sorted,
            &mut self.coins,
        );
        let half32 = u32::try_from(half).expect("capacity fits u32");
        self.levels[level + 1] -= half32;
        if odd {
            // The odd one out (the first item) stays on this level.
            self.levels[level] = self.levels[level + 1] - 1;
            let to = self.levels[level] as usize;
            self.items[to] = self.items[raw_beg];
        } else {
            self.levels[level] = self.levels[level + 1];
        }
        if level > 0 {
            let start = self.levels[0] as usize;
            self.items.copy_within(start..raw_beg, start + half);
        }
        for offset in &mut self.levels[..level] {
            *offset += half32;
        }
    }

    /// Level `level`'s items (empty past the top level).
    fn level(&self, level: usize) -> &[f64] {
        if level < self.num_levels() {
            &self.items[self.levels[level] as usize..self.levels[level + 1] as usize]
        } else {
            &[]
        }
    }

    /// The second half of a merge (DataSketches' `merge_higher_levels`):
    /// our levels and `other`'s from level 1 on, level by level merged
    /// into one work buffer after our level 0 (which holds `other`'s by
    /// now), compacted to capacity ([`general_compress`], flipping this
    /// sketch's coins), and made this sketch's buffer.
    fn merge_higher_levels(&mut self, other: &Self) {
        let levels_in = self.num_levels().max(other.num_levels());
        let above_zero = other.retained() - other.level(0).len();
        let mut work = Vec::with_capacity(self.retained() + above_zero);
        let mut in_levels = Vec::with_capacity(levels_in + 2);
        in_levels.push(0);
        work.extend_from_slice(self.level(0));
        in_levels.push(offset_of(work.len()));
        for level in 1..levels_in {
            merge_sorted_into(&mut work, self.level(level), other.level(level), |&v| v);
            in_levels.push(offset_of(work.len()));
        }
        let (num_levels, capacity, out_levels) = general_compress(
            self.k,
            levels_in,
            &mut work,
            &mut in_levels,
            self.level_zero_sorted,
            &mut self.coins,
            &mut self.compactions,
        );
        let pop = (out_levels[num_levels] - out_levels[0]) as usize;
        let free = capacity as usize - pop;
        let mut items = vec![0.0; capacity as usize];
        items[free..].copy_from_slice(&work[out_levels[0] as usize..][..pop]);
        self.items = items;
        self.levels = out_levels[..=num_levels]
            .iter()
            .map(|&offset| offset - out_levels[0] + offset_of(free))
            .collect();
        // The capacities were worked out for the old level count.
        self.capacities_of = 0;
    }

    fn find_level_to_compact(&mut self) -> usize {
        let num_levels = self.num_levels();
        if self.levels[1] - self.levels[0] >= self.capacities().1 {
            return 0;
        }
        (1..num_levels)
            .find(|&level| {
                self.levels[level + 1] - self.levels[level]
                    >= level_capacity(self.k, num_levels, level)
            })
            .expect("a full buffer has a level at capacity")
    }

    fn add_empty_top_level(&mut self) {
        let num_levels = self.num_levels() + 1;
        assert!(
            num_levels <= LEVELS_MAX,
            "COUNT_MAX keeps sketches below 57 levels"
        );
        let want = total_capacity(self.k, num_levels) as usize + SLACK;
        if want > self.items.len() {
            self.shift_up(want);
        }
        let top = u32::try_from(self.items.len()).expect("capacity fits u32");
        self.levels.push(top);
    }

    /// [`Sketch::encode`] of a sketch that holds no more than its capacity
    /// ([`Self::settled`]).
    fn encode_settled(&self) -> Vec<u8> {
        self.encode_without_newest(0)
    }

    /// The image of this sketch less the `pending` newest values of level
    /// 0 (0 for the sketch itself), which must leave it within its
    /// capacity: [`Self::encode_settled`], and the image part of
    /// [`Self::encode_state`].
    fn encode_without_newest(&self, pending: usize) -> Vec<u8> {
        let start = self.levels[0] as usize + pending;
        assert!(
            start <= self.levels[1] as usize,
            "pending values are level 0's"
        );
        debug_assert!(
            self.n == 0
                || self.retained() - pending <= total_capacity(self.k, self.num_levels()) as usize
        );
        let sorted = if self.level_zero_sorted {
            FLAG_LEVEL_ZERO_SORTED
        } else {
            0
        };
        let [k0, k1] = self.k.to_le_bytes();
        let header = |pre_ints: u8, ser_ver: u8, flags: u8| {
            [pre_ints, ser_ver, FAMILY_KLL, flags | sorted, k0, k1, M, 0]
        };
        let n = self.n - pending as u64;
        if n == 0 {
            return header(2, 1, FLAG_EMPTY).to_vec();
        }
        let retained = &self.items[start..];
        if n == 1 {
            let mut bytes = header(2, 2, FLAG_SINGLE_ITEM).to_vec();
            bytes.extend_from_slice(&retained[0].to_le_bytes());
            return bytes;
        }
        let num_levels = self.num_levels();
        let mut bytes =
            Vec::with_capacity(FULL_DATA_START + 4 * num_levels + 16 + 8 * retained.len());
        bytes.extend_from_slice(&header(5, 1, 0));
        bytes.extend_from_slice(&n.to_le_bytes());
        bytes.extend_from_slice(&self.min_k.to_le_bytes());
        bytes.push(u8::try_from(num_levels).expect("at most LEVELS_MAX levels"));
        bytes.push(0);
        // Offsets as in a buffer of full capacity: free space first.
        let free =
            total_capacity(self.k, num_levels) - u32::try_from(retained.len()).expect("fits");
        let start32 = offset_of(start);
        for &offset in &self.levels[..num_levels] {
            bytes.extend_from_slice(&(offset.max(start32) - start32 + free).to_le_bytes());
        }
        bytes.extend_from_slice(&self.min.to_le_bytes());
        bytes.extend_from_slice(&self.max.to_le_bytes());
        for item in retained {
            bytes.extend_from_slice(&item.to_le_bytes());
        }
        bytes
    }

    /// The DataSketches sketch with the same image: the reference the
    /// tests hold [`Self::sorted_view`]'s answers to.
    #[cfg(test)]
    fn to_kll(&self) -> KllSketch<KllFloat<f64>> {
        KllSketch::deserialize(&self.encode()).expect("our image is a valid KLL image")
    }

    /// The retained values in order with their cumulative weights, as
    /// DataSketches' `KllSketch::sorted_view` builds them from this
    /// sketch's image: of the [`settled`](Self::settled) sketch, a value at
    /// level `h` weighing `2^h`. Built here from the buffer rather than
    /// through the image, which cost two thirds of a quantile query (the
    /// encode, DataSketches' decode and validation, and its view; profiled
    /// on bench query (b)); the tests hold the answers to DataSketches'.
    fn sorted_view(&self) -> SortedView {
        debug_assert!(self.n > 0, "an empty sketch has no view");
        let settled = self.settled();
        // Every level above 0 is sorted, and level 0 once sorted: merge
        // the runs pairwise, as DataSketches does, equal values keeping
        // the lower level first (a stable sort of the whole took twice as
        // long).
        let mut runs: Vec<Vec<(f64, u64)>> = (0..settled.num_levels())
            .map(|h| settled.level(h).iter().map(|&v| (v, 1u64 << h)).collect())
            .filter(|run: &Vec<_>| !run.is_empty())
            .collect();
        if !settled.level_zero_sorted
            && let Some(zero) = runs.first_mut().filter(|run| run[0].1 == 1)
        {
            zero.sort_by(|a, b| a.0.partial_cmp(&b.0).expect("a sketch holds no NaN"));
        }
        while runs.len() > 1 {
            let mut merged = Vec::with_capacity(runs.len().div_ceil(2));
            let mut pairs = runs.into_iter();
            while let Some(low) = pairs.next() {
                merged.push(match pairs.next() {
                    Some(high) => {
                        let mut run = Vec::with_capacity(low.len() + high.len());
                        merge_sorted_into(&mut run, &low, &high, |&(value, _)| value);
                        run
                    }
                    None => low,
                });
            }
            runs = merged;
        }
        let mut entries = runs.pop().unwrap_or_default();
        let mut total = 0u64;
        for entry in &mut entries {
            total += entry.1;
            entry.1 = total;
        }
        debug_assert_eq!(total, settled.n, "weights sum to the values summarized");
        SortedView {
            entries,
            min: settled.min,
            max: settled.max,
        }
    }

    /// The sketch's whole state, to resume it later exactly where it is
    /// ([`Quantiles::decode_state`]): its coins, and the values the
    /// compact image cannot hold yet.
    ///
    /// ```text
    ///  | coins u64 | pending u16 | version u16 = 1 | pending x value f64, oldest first |
    ///  | known u8 | classes u8 | classes x | class u8 | weight f64 | sized f64 | |
    ///  | KLL image |
    /// ```
    ///
    /// The middle part is what the interval needs of the compactions the
    /// sketch made (see the module docs on the 95% interval): whether
    /// they are known (1) or not (0: the sketch, or one merged into it,
    /// was read from an image that does not carry them), and per size
    /// class that has any, in increasing order, the sum of `4^h / 2` over
    /// its compactions and that sum weighted by their sizes. Version 0
    /// (`STATE_VERSION_UNTRACKED`, written before the compactions were)
    /// has no such part: a sketch read from it that has compacted does
    /// not know them, as one read from [`Sketch::decode`].
    ///
    /// [`Sketch::encode`] settles a copy of a sketch past its capacity
    /// (up to `SLACK` values of level 0 wait for a compaction): an image
    /// of the settled copy answers the same, but a sketch read back from
    /// it would compact at other counts than this one, and with other
    /// coins. Here the image is of the sketch less its `pending` newest
    /// values, which is within its capacity and a valid KLL image (weights
    /// summing to `n - pending`), and the pending values follow it, to be
    /// inserted again. All integers little-endian.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let capacity = total_capacity(self.k, self.num_levels()) as usize;
        let pending = if self.n == 0 {
            0
        } else {
            self.retained().saturating_sub(capacity)
        };
        assert!(
            pending <= SLACK,
            "a sketch past its capacity by at most SLACK"
        );
        out.extend_from_slice(&self.coins.to_le_bytes());
        out.extend_from_slice(&u16::try_from(pending).expect("<= SLACK").to_le_bytes());
        out.extend_from_slice(&STATE_VERSION.to_le_bytes());
        // Level 0 keeps its newest value first: the pending ones, in the
        // order they were inserted, are the first `pending`, backwards.
        let level_zero = self.levels[0] as usize;
        for &value in self.items[level_zero..level_zero + pending].iter().rev() {
            out.extend_from_slice(&value.to_le_bytes());
        }
        self.compactions.encode(out);
        out.extend_from_slice(&self.encode_without_newest(pending));
    }

    /// Reads [`Quantiles::encode_state`]: a sketch that folds, merges and
    /// answers from here on exactly as the one written would have (same
    /// values at the same levels, same coins; its buffer may be smaller,
    /// which changes when it grows, not what it holds). Never panics;
    /// allocates about what [`Sketch::decode`] does, plus `SLACK` slots.
    ///
    /// # Errors
    ///
    /// As [`Sketch::decode`] for the image; [`Error::Truncated`] and
    /// [`Error::Malformed`] for a state prefix that is cut short, names
    /// more than `SLACK` pending values or a NaN, or pending values
    /// that the image has room for (a state [`Quantiles::encode_state`]
    /// never writes).
    pub fn decode_state(bytes: &[u8]) -> Result<Self> {
        const PREFIX_BYTES: usize = 12;
        let malformed = |reason: &str| Error::Malformed {
            sketch: SKETCH,
            reason: reason.to_string(),
        };
        let Some((prefix, rest)) = bytes.split_first_chunk::<PREFIX_BYTES>() else {
            return Err(Error::Truncated {
                sketch: SKETCH,
                expected: PREFIX_BYTES as u64,
                found: bytes.len() as u64,
            });
        };
        let coins = u64::from_le_bytes(prefix[..8].try_into().expect("8 bytes"));
        let pending = usize::from(u16::from_le_bytes([prefix[8], prefix[9]]));
        let version = u16::from_le_bytes([prefix[10], prefix[11]]);
        if version != STATE_VERSION && version != STATE_VERSION_UNTRACKED {
            return Err(malformed(&format!(
                "state version {version}; this build reads {STATE_VERSION_UNTRACKED} and \
                 {STATE_VERSION}: read it with the build that wrote it"
            )));
        }
        if pending > SLACK {
            return Err(malformed("more pending values than SLACK"));
        }
        if rest.len() < 8 * pending {
            return Err(Error::Truncated {
                sketch: SKETCH,
                expected: (PREFIX_BYTES + 8 * pending) as u64,
                found: bytes.len() as u64,
            });
        }
        let (values, rest) = rest.split_at(8 * pending);
        let (compactions, image) = if version == STATE_VERSION {
            let (compactions, used) = Compactions::decode(rest)?;
            (Some(compactions), &rest[used..])
        } else {
            (None, rest)
        };
        check_count(image)?;
        KllSketch::<KllFloat<f64>>::deserialize(image).map_err(|error| Error::Malformed {
            sketch: SKETCH,
            reason: error.to_string(),
        })?;
        let mut q = Self::from_valid_image(image, coins)?;
        if let Some(compactions) = compactions {
            if compactions.known && compactions.by_size.is_none() && !q.is_exact() {
                return Err(malformed("a sketch that compacted records no compactions"));
            }
            q.compactions = compactions;
        }
        if pending > 0 {
            // Only a sketch at its capacity has values waiting.
            let full = total_capacity(q.k, q.num_levels()) as usize;
            if q.n < 2 || q.retained() != full || q.level_zero_sorted {
                return Err(malformed(
                    "pending values behind an image with room for them",
                ));
            }
            if q.n + pending as u64 > COUNT_MAX {
                return Err(Error::LimitExceeded {
                    sketch: SKETCH,
                    limit: "COUNT_MAX",
                    max: COUNT_MAX,
                    found: q.n + pending as u64,
                });
            }
        }
        let retained = q.retained();
        for word in values.chunks_exact(8) {
            let value = f64::from_le_bytes(word.try_into().expect("8 bytes"));
            if value.is_nan() {
                return Err(malformed("a pending value is NaN"));
            }
            q.insert(value);
        }
        // Pair with `encode_state`: the values went back to level 0
        // without a compaction (the buffer had SLACK slots to give).
        assert_eq!(q.retained(), retained + pending);
        Ok(q)
    }

    /// Reads an image DataSketches has validated (or written), into a
    /// sketch that flips `coins`.
    fn from_valid_image(bytes: &[u8], coins: u64) -> Result<Self> {
        let malformed = |reason: &str| Error::Malformed {
            sketch: SKETCH,
            reason: reason.to_string(),
        };
        let header = bytes.get(..8).ok_or_else(|| malformed("short header"))?;
        let flags = header[3];
        let k = u16::from_le_bytes([header[4], header[5]]);
        let mut q = Self::with_coins(k, coins)?;
        q.level_zero_sorted = flags & FLAG_LEVEL_ZERO_SORTED != 0;
        let f64_at = |at: usize| -> Result<f64> {
            let word = bytes
                .get(at..at + 8)
                .ok_or_else(|| malformed("short image"))?;
            Ok(f64::from_le_bytes(word.try_into().expect("8 bytes")))
        };
        if flags & FLAG_EMPTY != 0 {
            return Ok(q);
        }
        if flags & FLAG_SINGLE_ITEM != 0 {
            let value = f64_at(8)?;
            q.insert(value);
            q.level_zero_sorted = flags & FLAG_LEVEL_ZERO_SORTED != 0;
            return Ok(q);
        }
        let fixed = bytes
            .get(..FULL_DATA_START)
            .ok_or_else(|| malformed("short preamble"))?;
        q.n = u64::from_le_bytes(fixed[8..16].try_into().expect("8 bytes"));
        q.min_k = u16::from_le_bytes([fixed[16], fixed[17]]);
        let num_levels = usize::from(fixed[18]);
        if !(1..=LEVELS_MAX).contains(&num_levels) {
            return Err(malformed("level count"));
        }
        let capacity = total_capacity(k, num_levels);
        let mut offsets = Vec::with_capacity(num_levels + 1);
        for level in 0..num_levels {
            let at = FULL_DATA_START + 4 * level;
            let word = bytes
                .get(at..at + 4)
                .ok_or_else(|| malformed("short offsets"))?;
            offsets.push(u32::from_le_bytes(word.try_into().expect("4 bytes")));
        }
        offsets.push(capacity);
        if offsets.windows(2).any(|pair| pair[0] > pair[1]) {
            return Err(malformed("level offsets"));
        }
        let free = offsets[0];
        let items_at = FULL_DATA_START + 4 * num_levels;
        q.min = f64_at(items_at)?;
        q.max = f64_at(items_at + 8)?;
        let retained = (capacity - free) as usize;
        let payload = bytes
            .get(items_at + 16..items_at + 16 + 8 * retained)
            .ok_or_else(|| malformed("short items"))?;
        q.items = payload
            .chunks_exact(8)
            .map(|word| f64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        q.levels = offsets.iter().map(|offset| offset - free).collect();
        // The image does not say how the sketch compacted.
        if !q.is_exact() {
            q.compactions = Compactions::unknown();
        }
        Ok(q)
    }

    /// The value whose normalized rank is about `rank` (inclusive: the
    /// fraction of values `<=` the answer), within [`Self::rank_error`].
    /// Rank 0 and 1 give the exact minimum and maximum.
    ///
    /// `None` if the sketch is empty or `rank` is NaN or outside `0..=1`.
    pub fn quantile(&self, rank: f64) -> Option<f64> {
        if !(0.0..=1.0).contains(&rank) || self.n == 0 {
            return None;
        }
        self.sorted_view().quantile(rank)
    }

    /// [`Self::quantile`] at each of `ranks`, from one sorted view (what a
    /// row of several quantile columns asks; building the view is most of
    /// the cost). `None` for a rank outside `0..=1` or an empty sketch.
    pub fn quantiles(&self, ranks: &[f64]) -> Vec<Option<f64>> {
        let valid = |r: f64| (0.0..=1.0).contains(&r);
        if self.n == 0 || !ranks.iter().copied().any(valid) {
            return vec![None; ranks.len()];
        }
        let view = self.sorted_view();
        ranks
            .iter()
            .map(|&rank| valid(rank).then(|| view.quantile(rank)).flatten())
            .collect()
    }

    /// The normalized rank of `value`: the estimated fraction of values
    /// `<= value`, within [`Self::rank_error`].
    ///
    /// `None` if the sketch is empty or `value` is NaN.
    pub fn rank(&self, value: f64) -> Option<f64> {
        if self.n == 0 || value.is_nan() {
            return None;
        }
        // DataSketches' `KllSketch::rank` (inclusive), over the settled
        // sketch its image holds.
        let settled = self.settled();
        let weight: u64 = (0..settled.num_levels())
            .map(|h| (settled.level(h).iter().filter(|&&v| v <= value).count() as u64) << h)
            .sum();
        let rank = weight as f64 / settled.n as f64;
        debug_assert!((0.0..=1.0).contains(&rank));
        Some(rank)
    }

    /// Values summarized (NaN excluded).
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Whether no value has been inserted.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The smallest value seen, exact; `None` if empty.
    pub fn min(&self) -> Option<f64> {
        (self.n > 0).then_some(self.min)
    }

    /// The largest value seen, exact; `None` if empty.
    pub fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }

    /// The accuracy parameter this sketch was built with.
    pub fn k(&self) -> u16 {
        self.k
    }

    /// Heap bytes held: the item buffer, the level offsets and, once the
    /// sketch has compacted, its compactions' sums (368 bytes).
    pub fn heap_bytes(&self) -> usize {
        let compactions = self
            .compactions
            .by_size
            .as_ref()
            .map_or(0, |by_size| std::mem::size_of_val(&**by_size));
        self.items.capacity() * 8 + self.levels.capacity() * 4 + compactions
    }

    /// Whether the sketch still holds every value it summarized (none
    /// compacted away yet, as while fewer than about `k` arrived): its
    /// quantiles are then exact, with no rank error.
    pub fn is_exact(&self) -> bool {
        (self.items.len() - self.levels[0] as usize) as u64 == self.n
    }

    /// KLL's single-sided normalized rank error: with 99% confidence a
    /// [`Self::rank`] or [`Self::quantile`] answer is off by at most this
    /// fraction of [`Self::count`] in rank. DataSketches fits it
    /// empirically (`2.296 / k^0.9723`, for the smallest `k` merged in); see
    /// the module docs.
    pub fn rank_error(&self) -> f64 {
        let eps = 2.296 / f64::from(self.min_k).powf(0.9723);
        assert!(eps > 0.0);
        assert!(eps < 1.0);
        eps
    }
}

impl Quantiles {
    /// The standard deviation of the normalized rank error of a query at
    /// the median, where it is largest, from the compactions this sketch
    /// and the sketches merged into it made (0 in exact mode), or `None`
    /// for a sketch read from an image that does not record them. See
    /// [`Self::rank_sigma_at`] and the module docs on the 95% interval.
    pub fn rank_sigma(&self) -> Option<f64> {
        self.rank_sigma_at(0.5)
    }

    /// The standard deviation of the normalized rank error of a query at
    /// `rank` (clamped to `0..=1`): the square root of the variance the
    /// module docs work out (on the 95% interval) over `n`. 0 in exact
    /// mode; `None` for
    /// a sketch read from an image that does not record its compactions
    /// ([`Sketch::decode`], or an old state image).
    pub fn rank_sigma_at(&self, rank: f64) -> Option<f64> {
        if self.n == 0 || self.is_exact() {
            return Some(0.0);
        }
        let variance = self.settled().compactions.variance_at(rank)?;
        Some(variance.sqrt() / self.n as f64)
    }

    /// The two-sided 95% normalized rank error of a query at `rank`: with
    /// probability about 0.95 a [`Self::quantile`] answer's true rank is
    /// within this of `rank`: `1.96` times [`Self::rank_sigma_at`], or for
    /// a sketch that does not know its compactions `1.96 x 0.355 /
    /// k^0.9723` at every rank. 0 while the sketch holds every value. See
    /// the module docs on the 95% interval for how it is worked out and
    /// measured.
    pub fn rank_error_95(&self, rank: f64) -> f64 {
        if self.n == 0 || self.is_exact() {
            return 0.0;
        }
        let sigma = self
            .rank_sigma_at(rank)
            .unwrap_or_else(|| RANK_SIGMA_FIT / f64::from(self.min_k).powf(0.9723));
        let eps = (Z_95 * sigma).min(1.0);
        assert!(eps >= 0.0);
        eps
    }

    /// The quantile at `rank` with a 95% interval of *values*: `lower` is
    /// the quantile at `rank - e`, `upper` the quantile at `rank + e`
    /// (clamped to `0..=1`), where `e` is [`Self::rank_error_95`] at
    /// `rank`. The interval covers the true quantile (the smallest value
    /// with at least `rank` of the values at or below it) with probability
    /// about 0.95 (`confidence`), measured in `tests/calibration.rs`. A
    /// sketch that holds every value answers exactly (confidence 1, bounds
    /// equal to the value).
    ///
    /// `None` if the sketch is empty or `rank` is NaN or outside `0..=1`.
    pub fn quantile_interval(&self, rank: f64) -> Option<Estimate> {
        self.quantile_intervals(&[rank]).pop().flatten()
    }

    /// [`Self::quantile_interval`] at each of `ranks`, from one sorted
    /// view (building it is most of the cost; a SQL row naming several
    /// quantiles and their bounds asks for them together). `None` for a
    /// rank outside `0..=1` or an empty sketch.
    pub fn quantile_intervals(&self, ranks: &[f64]) -> Vec<Option<Estimate>> {
        let valid = |r: f64| (0.0..=1.0).contains(&r);
        if self.n == 0 || !ranks.iter().copied().any(valid) {
            return vec![None; ranks.len()];
        }
        let view = self.sorted_view();
        let at = |r: f64| {
            view.quantile(r)
                .expect("a rank in 0..=1 of a sketch with values")
        };
        ranks
            .iter()
            .map(|&rank| {
                if !valid(rank) {
                    return None;
                }
                if self.is_exact() {
                    return Some(Estimate::exact(at(rank)));
                }
                let eps = self.rank_error_95(rank);
                let [value, lower, upper] =
                    [rank, (rank - eps).max(0.0), (rank + eps).min(1.0)].map(at);
                assert!(lower <= value && value <= upper);
                Some(Estimate {
                    value,
                    lower,
                    upper,
                    confidence: CONFIDENCE_DEFAULT,
                })
            })
            .collect()
    }
}

/// A sketch's retained values in increasing order, each with the sum of
/// the weights up to it ([`Quantiles::sorted_view`]).
struct SortedView {
    entries: Vec<(f64, u64)>,
    min: f64,
    max: f64,
}

impl SortedView {
    /// DataSketches' inclusive quantile: the exact minimum and maximum at
    /// ranks 0 and 1, else the first value whose cumulative weight
    /// reaches `ceil(rank * n)`. `rank` must be in `0..=1`.
    fn quantile(&self, rank: f64) -> Option<f64> {
        debug_assert!((0.0..=1.0).contains(&rank));
        let &(_, total) = self.entries.last()?;
        if rank == 0.0 {
            return Some(self.min);
        }
        if rank == 1.0 {
            return Some(self.max);
        }
        // At most `total` for a rank in 0..1.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let weight = (rank * total as f64).ceil() as u64;
        let index = self.entries.partition_point(|&(_, w)| w < weight);
        Some(self.entries[index.min(self.entries.len() - 1)].0)
    }
}

/// Classes of compaction sizes kept apart by [`Compactions`]: half
/// octaves of the number of items halved, from 2 (class 0) up; sizes of
/// 2^12 and more share the last class, where `(1 - 2r)^c` is below 10^-3
/// for every rank `r` from 10^-3 to `1 - 10^-3`, so the classes' mean is
/// as good as any there.
const SIZE_CLASSES: usize = 23;

/// What the variance of a query's rank error needs of the compactions a
/// sketch (and every sketch merged into it) made.
///
/// A compaction at level `h` halves `c` sorted items (an even number),
/// keeping every other one by a coin: a query's rank moves by `+/- 2^h`
/// when an odd number of the `c` items lie at or below it, and not at all
/// otherwise. With the items spread over the stream as a random sample
/// (each `<=` the query with probability `r`, the query's rank), the
/// count below is binomial and odd with probability `(1 - (1 - 2r)^c) /
/// 2`, so the compaction adds `4^h (1 - (1 - 2r)^c) / 2` to the variance:
/// `4^h / 2` at the median, less towards the tails, and the less the
/// fewer items it halved (a small compaction rarely straddles a query at
/// rank 0.01). The weights `4^h / 2` are kept summed per class of `c`
/// (half octaves, [`SIZE_CLASSES`]) with their `c`-weighted sum, so the
/// variance at any rank is a sum over at most 23 classes. A merge adds
/// the other's.
#[derive(Clone, Debug, PartialEq)]
struct Compactions {
    /// Per size class, the sum of `4^h / 2` and of `c 4^h / 2`; `None`
    /// before the first compaction (no allocation in exact mode).
    by_size: Option<Box<[[f64; 2]; SIZE_CLASSES]>>,
    /// Whether they are known: false for a sketch read from an image that
    /// does not carry them, and for any sketch such a one merged into.
    known: bool,
}

impl Default for Compactions {
    /// No compactions yet.
    fn default() -> Self {
        Self {
            by_size: None,
            known: true,
        }
    }
}

impl Compactions {
    /// Not known (read from an image that does not carry them).
    fn unknown() -> Self {
        Self {
            by_size: None,
            known: false,
        }
    }

    /// Records a compaction at `level` halving `size` items.
    #[inline]
    fn record(&mut self, level: usize, size: usize) {
        if size == 0 {
            return;
        }
        let weight = (2.0 * level as f64).exp2() / 2.0;
        let class = size_class(size);
        let by_size = self
            .by_size
            .get_or_insert_with(|| Box::new([[0.0; 2]; SIZE_CLASSES]));
        by_size[class][0] += weight;
        by_size[class][1] += weight * size as f64;
    }

    /// Adds another sketch's compactions (a merge).
    fn absorb(&mut self, other: &Self) {
        self.known &= other.known;
        if let Some(theirs) = &other.by_size {
            let ours = self
                .by_size
                .get_or_insert_with(|| Box::new([[0.0; 2]; SIZE_CLASSES]));
            for (a, b) in ours.iter_mut().zip(theirs.iter()) {
                a[0] += b[0];
                a[1] += b[1];
            }
        }
    }

    /// The variance of a query's rank error at normalized rank `rank`, in
    /// ranks squared (see the type's docs), or `None` if unknown.
    fn variance_at(&self, rank: f64) -> Option<f64> {
        if !self.known {
            return None;
        }
        let Some(by_size) = &self.by_size else {
            return Some(0.0);
        };
        // Symmetric in r and 1 - r; clamped so that 1 - 2r is in 0..=1.
        let r = rank.clamp(0.0, 1.0);
        let base = 1.0 - 2.0 * r.min(1.0 - r);
        Some(
            by_size
                .iter()
                .filter(|class| class[0] > 0.0)
                .map(|&[weight, sized]| weight * (1.0 - base.powf(sized / weight)))
                .sum(),
        )
    }
}

impl Compactions {
    /// Appends the state image's compactions part (see
    /// [`Quantiles::encode_state`]).
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(self.known));
        let Some(by_size) = self.by_size.as_deref().filter(|_| self.known) else {
            out.push(0);
            return;
        };
        let classes = by_size.iter().filter(|class| class[0] > 0.0).count();
        out.push(u8::try_from(classes).expect("SIZE_CLASSES fits u8"));
        for (class, &[weight, sized]) in by_size.iter().enumerate() {
            if weight > 0.0 {
                out.push(u8::try_from(class).expect("SIZE_CLASSES fits u8"));
                out.extend_from_slice(&weight.to_le_bytes());
                out.extend_from_slice(&sized.to_le_bytes());
            }
        }
    }

    /// Reads [`Self::encode`]'s part from the front of `bytes`: the
    /// compactions and the bytes read.
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`] if cut short, [`Error::Malformed`] for a flag
    /// other than 0 or 1, classes out of range or order, classes behind
    /// an unknown flag, or sums that no compactions make (not finite, not
    /// positive, or a mean size below 1).
    fn decode(bytes: &[u8]) -> Result<(Self, usize)> {
        const CLASS_BYTES: usize = 17;
        let malformed = |reason: &str| Error::Malformed {
            sketch: SKETCH,
            reason: format!("state compactions: {reason}"),
        };
        let truncated = |expected: usize| Error::Truncated {
            sketch: SKETCH,
            expected: expected as u64,
            found: bytes.len() as u64,
        };
        let [known, classes, ..] = *bytes else {
            return Err(truncated(2));
        };
        let classes = usize::from(classes);
        let known = match known {
            0 if classes == 0 => false,
            0 => return Err(malformed("classes of unknown compactions")),
            1 => true,
            _ => return Err(malformed("the known flag is neither 0 nor 1")),
        };
        if classes > SIZE_CLASSES {
            return Err(malformed("more size classes than SIZE_CLASSES"));
        }
        let used = 2 + CLASS_BYTES * classes;
        let body = bytes.get(2..used).ok_or_else(|| truncated(used))?;
        let mut compactions = Self {
            by_size: None,
            known,
        };
        let mut next = 0;
        for entry in body.chunks_exact(CLASS_BYTES) {
            let class = usize::from(entry[0]);
            if class < next || class >= SIZE_CLASSES {
                return Err(malformed("size classes out of range or order"));
            }
            next = class + 1;
            let weight = f64::from_le_bytes(entry[1..9].try_into().expect("8 bytes"));
            let sized = f64::from_le_bytes(entry[9..17].try_into().expect("8 bytes"));
            if !(weight.is_finite() && weight > 0.0 && sized.is_finite() && sized >= weight) {
                return Err(malformed("sums no compactions make"));
            }
            compactions
                .by_size
                .get_or_insert_with(|| Box::new([[0.0; 2]; SIZE_CLASSES]))[class] = [weight, sized];
        }
        Ok((compactions, used))
    }
}

/// The state image version [`Quantiles::encode_state`] writes: 1, with the
/// sketch's compactions.
const STATE_VERSION: u16 = 1;

/// The state image version written before the compactions were (its
/// field was reserved, 0): still read, the compactions then unknown.
const STATE_VERSION_UNTRACKED: u16 = 0;

/// The [`SIZE_CLASSES`] class of a compaction of `size` (at least 2)
/// items: half octaves, `2 floor(log2 c) - 2`, plus one in the upper
/// half of the octave.
fn size_class(size: usize) -> usize {
    let size = size as u64;
    let octave = 63 - size.leading_zeros() as usize;
    let upper = u128::from(size) * u128::from(size) >= 1u128 << (2 * octave + 1);
    (2 * octave + usize::from(upper))
        .saturating_sub(2)
        .min(SIZE_CLASSES - 1)
}

/// For a sketch that does not know its compactions (read from an image),
/// the standard deviation of one query's normalized rank error is taken
/// as `RANK_SIGMA_FIT / k^0.9723`: fitted so that such 95% intervals cover
/// 95% of the time over the calibration grid (see the module docs on the
/// 95% interval).
const RANK_SIGMA_FIT: f64 = 0.355;

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
        if other.n == 0 {
            return Ok(());
        }
        let (min, max) = if self.n == 0 {
            (other.min, other.max)
        } else {
            (self.min.min(other.min), self.max.max(other.max))
        };
        self.compactions.absorb(&other.compactions);
        // DataSketches' `merge`: the other's level 0 inserted as values,
        // then every higher level merged with ours and compacted.
        for &value in other.level(0) {
            self.insert(value);
        }
        if other.num_levels() >= 2 {
            self.merge_higher_levels(other);
            self.min_k = self.min_k.min(other.min_k);
        }
        self.n = count;
        (self.min, self.max) = (min, max);
        debug_assert!(
            self.retained() <= total_capacity(self.k, self.num_levels()) as usize + SLACK
        );
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
        self.settled().encode_settled()
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
        // DataSketches validates the image (see the maintainer note); we then
        // read the same bytes into our buffer.
        let kll =
            KllSketch::<KllFloat<f64>>::deserialize(bytes).map_err(|error| Error::Malformed {
                sketch: SKETCH,
                reason: error.to_string(),
            })?;
        // Pair with `check_count` and `new`: what we accepted is in range.
        assert!(kll.n() <= COUNT_MAX);
        assert!((K_MIN..=K_MAX).contains(&kll.k()));
        let q = Self::from_valid_image(bytes, next_seed())?;
        debug_assert_eq!(q.n, kll.n());
        Ok(q)
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

/// KLL's family id in the image preamble.
const FAMILY_KLL: u8 = 15;
/// Free slots a sketch keeps below level 0 past its capacity
/// ([`Quantiles::make_room`]).
const SLACK: usize = 64;

/// KLL's smallest level capacity `m` (DataSketches' default, the only one
/// its images use).
const M: u8 = 8;
/// Flag bit of byte 3: level 0 is stored sorted.
const FLAG_LEVEL_ZERO_SORTED: u8 = 1 << 1;
/// Where the level offsets start in a full image.
const FULL_DATA_START: usize = 20;
/// KLL's hard limit on levels (DataSketches asserts it); [`COUNT_MAX`]
/// keeps sketches below 57.
const LEVELS_MAX: usize = 61;
/// Smallest buffer a sketch allocates on its first value.
const GROW_MIN: usize = 8;

/// `3^d` for the capacity of a level `d` below the top.
const POWERS_OF_THREE: [u64; 31] = {
    let mut powers = [1u64; 31];
    let mut d = 1;
    while d < 31 {
        powers[d] = powers[d - 1] * 3;
        d += 1;
    }
    powers
};

/// Capacity of a level `depth` levels below the top: `k (2/3)^depth`,
/// rounded, computed in integers as DataSketches does (in two steps past
/// depth 30, where `3^depth` leaves u64).
fn capacity_at_depth(k: u16, depth: usize) -> u32 {
    fn shallow(k: u64, depth: usize) -> u64 {
        ((k << (depth + 1)) / POWERS_OF_THREE[depth]).div_ceil(2)
    }
    let k = u64::from(k);
    let capacity = if depth < POWERS_OF_THREE.len() {
        shallow(k, depth)
    } else {
        let first = depth / 2;
        shallow(shallow(k, first), depth - first)
    };
    u32::try_from(capacity).expect("at most k")
}

/// Capacity of `level` (0 is the bottom) in a sketch of `num_levels`
/// levels: at least [`M`].
fn level_capacity(k: u16, num_levels: usize, level: usize) -> u32 {
    capacity_at_depth(k, num_levels - level - 1).max(u32::from(M))
}

/// Capacity of a sketch of `num_levels` levels: the size of its buffer once
/// full, and what image offsets count from.
fn total_capacity(k: u16, num_levels: usize) -> u32 {
    (0..num_levels)
        .map(|level| level_capacity(k, num_levels, level))
        .sum()
}

/// An offset into a sketch's items (at most a few thousand).
fn offset_of(len: usize) -> u32 {
    u32::try_from(len).expect("capacity fits u32")
}

/// Appends the merge of `a` and `b`, each sorted by `value`, to `out`
/// (ties: `a`'s first): a merge's levels, and a sorted view's runs.
fn merge_sorted_into<T: Copy>(out: &mut Vec<T>, a: &[T], b: &[T], value: impl Fn(&T) -> f64) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if value(&b[j]) < value(&a[i]) {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

/// DataSketches' `kll_helper::general_compress`: compacts the levels of
/// `items` (level `l` is `items[in_levels[l]..in_levels[l + 1]]`, level 0
/// unsorted unless `level_zero_sorted`) from the bottom up, each one that
/// is at its capacity while the whole is past its own, into the level
/// above, a coin of `coins` choosing the half kept; compacting the top
/// level adds one. The levels end up packed from `items[0]`. Returns the
/// level count, the capacity of that many levels and the levels' offsets
/// (one more than the count).
fn general_compress(
    k: u16,
    levels_in: usize,
    items: &mut [f64],
    in_levels: &mut Vec<u32>,
    level_zero_sorted: bool,
    coins: &mut u64,
    compactions: &mut Compactions,
) -> (usize, u32, Vec<u32>) {
    debug_assert!(levels_in >= 1 && in_levels.len() == levels_in + 1);
    let mut num_levels = levels_in;
    let mut count = (in_levels[levels_in] - in_levels[0]) as usize;
    let mut target = total_capacity(k, num_levels) as usize;
    let mut out_levels = vec![0u32];
    let mut level = 0;
    loop {
        if level == num_levels - 1 {
            // The top level: an empty level above it, for the halving.
            in_levels.push(in_levels[level + 1]);
        }
        let raw_beg = in_levels[level] as usize;
        let raw_lim = in_levels[level + 1] as usize;
        let raw_pop = raw_lim - raw_beg;
        let out = out_levels[level] as usize;
        if count < target || raw_pop < level_capacity(k, num_levels, level) as usize {
            // As it is, moved down to where the levels below ended.
            debug_assert!(out <= raw_beg);
            items.copy_within(raw_beg..raw_lim, out);
            out_levels.push(offset_of(out + raw_pop));
        } else {
            let pop_above = in_levels[level + 2] as usize - raw_lim;
            let odd = raw_pop % 2 == 1;
            let adj_beg = raw_beg + usize::from(odd);
            let half = (raw_pop - usize::from(odd)) / 2;
            if odd {
                // The odd one out (the first item) stays on this level.
                items[out] = items[raw_beg];
                out_levels.push(offset_of(out + 1));
            } else {
                out_levels.push(offset_of(out));
            }
            let sorted = level > 0 || level_zero_sorted;
            compactions.record(level, 2 * half);
            halve_into_level_above(items, adj_beg, half, pop_above, sorted, coins);
            count -= half;
            in_levels[level + 1] -= offset_of(half);
            if level == num_levels - 1 {
                // The old top compacted: a new level, and its capacity.
                num_levels += 1;
                target += level_capacity(k, num_levels, 0) as usize;
                assert!(
                    num_levels <= LEVELS_MAX,
                    "COUNT_MAX keeps sketches below 57 levels"
                );
            }
        }
        if level == num_levels - 1 {
            break;
        }
        level += 1;
    }
    debug_assert_eq!((out_levels[num_levels] - out_levels[0]) as usize, count);
    debug_assert!(count <= target);
    (num_levels, offset_of(target), out_levels)
}

/// Compacts the `2 * half` items from `adj_beg` (a level less its odd
/// first item; sorted first unless `sorted`) into the `pop_above` items of
/// the level above, which start right after them: one coin of `coins`
/// keeps every other item, and the kept half ends up merged with the
/// level above, in the slots ending where it ends (C++
/// `randomly_halve_up` when the level above is empty, else
/// `randomly_halve_down` then `merge_sorted_arrays`). Both compactions,
/// an insert's and a merge's, go through here.
#[inline]
fn halve_into_level_above(
    items: &mut [f64],
    adj_beg: usize,
    half: usize,
    pop_above: usize,
    sorted: bool,
    coins: &mut u64,
) {
    let raw_lim = adj_beg + 2 * half;
    if !sorted {
        // No NaN is ever stored, so `partial_cmp`'s order (DataSketches'
        // own, the one `sort_values` gives) is total here.
        crate::sort::sort_values(&mut items[adj_beg..raw_lim]);
    }
    let coin = usize::from(splitmix64(coins) & 1 == 1);
    if pop_above == 0 {
        // Keep items 1 - coin, 3 - coin, ... in the upper half.
        for t in (0..half).rev() {
            items[adj_beg + half + t] = items[adj_beg + 2 * t + 1 - coin];
        }
    } else {
        // Keep items coin, 2 + coin, ... in the lower half, then merge
        // them with the level above into the slots ending where it ends.
        for t in 0..half {
            items[adj_beg + t] = items[adj_beg + 2 * t + coin];
        }
        merge_in_place(items, adj_beg, half, raw_lim, pop_above);
    }
}

/// Merges the sorted runs `items[a..a + len_a]` and `items[b..b + len_b]`
/// into `items[a + len_a..b + len_b]`, where `b = a + 2 len_a` (the run
/// halved out of a level just below the level above): the write position
/// never passes the read position of the second run. Ties take the first
/// run's item first.
fn merge_in_place(items: &mut [f64], a: usize, len_a: usize, b: usize, len_b: usize) {
    debug_assert_eq!(b, a + 2 * len_a);
    let (lim_a, lim_b) = (a + len_a, b + len_b);
    let (mut i, mut j, mut out) = (a, b, a + len_a);
    while i < lim_a && j < lim_b {
        if items[j] < items[i] {
            items[out] = items[j];
            j += 1;
        } else {
            items[out] = items[i];
            i += 1;
        }
        out += 1;
    }
    while i < lim_a {
        items[out] = items[i];
        i += 1;
        out += 1;
    }
    debug_assert_eq!(out, j);
}

thread_local! {
    /// This thread's stream of seeds for new sketches' coins, once
    /// started ([`next_seed`], [`seed_thread`]).
    static SEEDS: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Starts this thread's stream of seeds for new sketches' coins at a
/// value of `stream` alone, whenever it is called: the engine names each
/// worker's thread by the worker's index, so that a run whose workers get
/// the same work in every run gets the same sketches. A thread that never
/// calls it starts its stream from the order in which threads made their
/// first sketch.
pub fn seed_thread(stream: u64) {
    let mut state = stream.wrapping_mul(0xd1b5_4a32_d192_ed03);
    SEEDS.with(|seeds| seeds.set(Some(splitmix64(&mut state))));
}

/// The seed of a new sketch's coins: the next value of this thread's
/// stream of seeds, itself seeded by [`seed_thread`] or else from the
/// order in which threads made their first sketch. Every sketch gets its
/// own coins (sketches that flipped the same coins at the same counts
/// would err together, and their merge would add their errors instead of
/// averaging them out), and a process that makes its sketches in the same
/// order on the same threads gets the same coins in every run.
fn next_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static THREADS: AtomicU64 = AtomicU64::new(0);
    SEEDS.with(|seeds| {
        let mut state = seeds.get().unwrap_or_else(|| {
            let mut thread = THREADS
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0xd1b5_4a32_d192_ed03);
            splitmix64(&mut thread)
        });
        let seed = splitmix64(&mut state);
        seeds.set(Some(state));
        seed
    })
}

/// The coin state of a sketch seeded with `seed` alone
/// ([`Quantiles::with_seed`]): one SplitMix64 step, so that near seeds
/// (0, 1, 2...) start far-apart streams.
fn coins_of_seed(seed: u64) -> u64 {
    let mut state = seed ^ 0x6b6c_6c5f_7365_6564; // "kll_seed"
    splitmix64(&mut state)
}

/// SplitMix64: advances `state` and returns its next output.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datasketches::common::SearchCriteria;

    /// 100,000 values: every sketch of k = 200 compacts many times over.
    fn compacting_values() -> Vec<f64> {
        let mut state = 0x5eed_0003;
        (0..100_000)
            .map(|_| (splitmix64(&mut state) >> 11) as f64)
            .collect()
    }

    #[test]
    fn same_coins_and_values_make_the_same_sketch() {
        let mut a = Quantiles::new(200).expect("valid k");
        let mut b = a.clone();
        for v in compacting_values() {
            a.insert(v);
            b.insert(v);
        }
        assert!(!a.is_exact(), "estimation mode");
        assert_eq!(a.encode(), b.encode());
        assert_eq!(a.estimate(), b.estimate());
    }

    /// A merge flips the coins of the sketch merged into: the same sketch
    /// (coins included) merged with the same other gives the same image.
    /// Through DataSketches' merge, whose coins are its own and unseeded,
    /// two such merges differed.
    #[test]
    fn same_coins_merge_the_same() {
        let values = compacting_values();
        let mut a = Quantiles::new(200).expect("valid k");
        let mut b = Quantiles::new(200).expect("valid k");
        for (i, &v) in values.iter().enumerate() {
            if i % 3 == 0 { a.insert(v) } else { b.insert(v) }
        }
        let mut images = Vec::new();
        for _ in 0..4 {
            let mut merged = a.clone();
            merged.merge(&b).expect("same k");
            assert_eq!(merged.count(), values.len() as u64);
            assert!(KllSketch::<KllFloat<f64>>::deserialize(&merged.encode()).is_ok());
            images.push(merged.encode());
        }
        assert!(images.windows(2).all(|pair| pair[0] == pair[1]));
    }

    /// The sorted view built from the buffer answers what DataSketches'
    /// view of the same image answers, at every rank and value: exact,
    /// compacting, settled on a copy (level 0 past its capacity), merged,
    /// with ties and signed zeros.
    #[test]
    fn sorted_view_answers_as_datasketches_does() {
        let values = compacting_values();
        let mut state = 0x5eed_0004;
        let mut ties = Quantiles::with_seed(64, 7).expect("valid k");
        for _ in 0..20_000 {
            let v = (splitmix64(&mut state) % 50) as f64 - 25.0;
            ties.insert(if v == 0.0 && state % 2 == 0 { -0.0 } else { v });
        }
        let mut merged = Quantiles::with_seed(200, 3).expect("valid k");
        for chunk in values.chunks(7_000) {
            let mut part = Quantiles::with_seed(200, chunk.len() as u64).expect("valid k");
            chunk.iter().for_each(|&v| part.insert(v));
            merged.merge(&part).expect("same k");
        }
        let mut sketches = vec![ties, merged];
        for n in [1, 2, 150, 601, 5_000, 100_000] {
            let mut q = Quantiles::with_seed(200, n as u64).expect("valid k");
            values[..n].iter().for_each(|&v| q.insert(v));
            sketches.push(q);
        }
        let mut probes: Vec<f64> = values[..200].to_vec();
        probes.extend([-1.0, 0.0, -0.0, f64::MAX, 3.5, -25.0, 24.0]);
        for q in &sketches {
            let kll = q.to_kll();
            for i in 0..=2_000 {
                let rank = f64::from(i) / 2_000.0;
                let theirs = kll
                    .quantile(rank, SearchCriteria::Inclusive)
                    .expect("valid rank");
                assert_eq!(
                    q.quantile(rank),
                    theirs.map(KllFloat::into_inner),
                    "n {} rank {rank}",
                    q.count()
                );
            }
            for &v in &probes {
                let item = KllFloat::<f64>::new(v).expect("not NaN");
                assert_eq!(
                    q.rank(v),
                    kll.rank(&item, SearchCriteria::Inclusive),
                    "n {} value {v}",
                    q.count()
                );
            }
        }
    }

    #[test]
    fn every_sketch_flips_its_own_coins() {
        let sketch = || {
            let mut q = Quantiles::new(200).expect("valid k");
            for v in compacting_values() {
                q.insert(v);
            }
            q
        };
        let (a, b) = (sketch(), sketch());
        let c = std::thread::spawn(sketch).join().expect("a sketch");
        assert_ne!(a.coins, b.coins);
        // Same values, other coins: other retained items.
        assert_ne!(a.encode(), b.encode());
        assert_ne!(a.encode(), c.encode());
        assert_ne!(b.encode(), c.encode());
    }

    /// Threads that name the same stream of seeds make the same sketches,
    /// whichever thread made its first sketch first; other streams make
    /// other sketches.
    #[test]
    fn threads_seeded_alike_make_the_same_sketches() {
        let sketches = |stream: u64| {
            std::thread::spawn(move || {
                seed_thread(stream);
                (0..3)
                    .map(|_| {
                        let mut q = Quantiles::new(200).expect("valid k");
                        for v in compacting_values() {
                            q.insert(v);
                        }
                        q.encode()
                    })
                    .collect::<Vec<_>>()
            })
            .join()
            .expect("sketches")
        };
        let (a, b, c) = (sketches(7), sketches(7), sketches(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a[0], a[1], "each sketch its own coins");
    }

    #[test]
    fn a_sketch_knows_its_rank_error_until_read_from_an_image() {
        let mut q = Quantiles::with_seed(200, 1).expect("k");
        assert_eq!(q.rank_sigma(), Some(0.0), "empty");
        for v in compacting_values() {
            q.insert(v);
        }
        let sigma = q.rank_sigma().expect("made here");
        assert!(sigma > 0.0 && sigma < q.rank_error(), "{sigma}");
        assert!((q.rank_error_95(0.5) - Z_95 * sigma).abs() < 1e-15);
        let tail = q.rank_sigma_at(0.01).expect("made here");
        assert!(tail > 0.0 && tail < sigma, "{tail} {sigma}");
        assert_eq!(q.rank_sigma_at(0.01), q.rank_sigma_at(0.99));
        let read = Quantiles::decode(&q.encode()).expect("decodes");
        assert_eq!(read.rank_sigma(), None);
        let fallback = Z_95 * RANK_SIGMA_FIT / 200f64.powf(0.9723);
        assert!((read.rank_error_95(0.5) - fallback).abs() < 1e-15);
        let mut merged = Quantiles::with_seed(200, 2).expect("k");
        merged.merge(&read).expect("merges");
        assert_eq!(merged.rank_sigma(), None, "unknown once merged in");
        let mut state = Vec::new();
        q.encode_state(&mut state);
        let resumed = Quantiles::decode_state(&state).expect("decodes");
        assert_eq!(resumed.rank_sigma(), q.rank_sigma(), "the state keeps it");
        assert_eq!(resumed.rank_sigma_at(0.01), q.rank_sigma_at(0.01));
        // A state of version 0 (before the compactions were written):
        // the same bytes less the compactions part, which is 2 bytes
        // and 17 a size class.
        let part = 12 + 8 * usize::from(u16::from_le_bytes([state[8], state[9]]));
        let classes = usize::from(state[part + 1]);
        let mut old = state[..part].to_vec();
        old[10] = 0;
        old.extend_from_slice(&state[part + 2 + 17 * classes..]);
        let read = Quantiles::decode_state(&old).expect("an old state decodes");
        assert_eq!(read.rank_sigma(), None, "an old state does not know");
        assert_eq!(read.encode(), q.encode());
    }

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
        assert!(q.is_exact());
        // Two exact sketches merge into an exact one while they fit.
        let mut other = Quantiles::default();
        for i in 101..=150 {
            other.insert(f64::from(i));
        }
        q.merge(&other).expect("merges");
        assert!(q.is_exact());
        assert_eq!(q.quantile(0.5), Some(75.0));
        // The first compaction ends it.
        let mut long = Quantiles::default();
        let mut first_inexact = None;
        for i in 0..10_000 {
            long.insert(f64::from(i));
            if !long.is_exact() && first_inexact.is_none() {
                first_inexact = Some(i + 1);
            }
        }
        let first = first_inexact.expect("10,000 values compact");
        assert!((200..=700).contains(&first), "{first}");
        assert!(!long.is_exact());
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
