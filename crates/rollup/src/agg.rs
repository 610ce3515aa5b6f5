//! Aggregate states: what one group of a summary keeps per aggregate, how a
//! record's argument folds into it, how two partial states merge, and what
//! it answers.
//!
//! Every state merges, and merging is order-independent, so workers can fold
//! their own records and the merged result does not depend on how input was
//! split:
//!
//! | aggregate | state | merge | answer |
//! |---|---|---|---|
//! | `count(*)`, `count(x)` | u64 | add | exact |
//! | `sum(x)`, `avg(x)` | i128 fixed point (2^-64), else [`ExactSum`], + count | add | exact sum rounded once, order-independent |
//! | `min(x)`, `max(x)` | f64 | min / max | exact |
//! | `hll(x)` | [`Hll`] | register max | estimate, 95% interval (calibrated at every count: [`AggState::estimate_95`]) |
//! | `exact_distinct(x)` | [`ExactSet`] | set union | exact |
//! | `quantiles(x)` | [`Quantiles`] (KLL) | KLL merge | rank error bound; 95% interval of values: [`AggState::quantile_intervals`] |
//! | `topk(x, k)` | exact counts while at most [`TOPK_EXACT_KEYS_MAX`] keys, then [`HeavyHitters`] + candidate names | add counts / counter add | exact, then upper bound, eps·N below it at confidence 1 - delta (one-sided, not 95%) |
//! | `theta(x)` | [`Theta`] | union | estimate, ~95% bounds |
//!
//! Sums are exact because floating-point addition is not associative:
//! summed as f64, the same records split differently across workers give
//! results that differ in the last bits, and small values vanish next to
//! large ones. A sum is kept as the exact sum of its values and rounded to
//! the nearest double once, when it is answered, so it does not depend on
//! order or split, for every finite double. The common values, multiples of
//! 2^-64 below 2^62 in magnitude (every double from 2^-11 to 2^62, and
//! smaller ones with few significant bits), add exactly into an i128 fixed
//! point: a few shifts and one add, with no allocation. The first value it
//! cannot hold exactly (a tiny or huge one, or an overflow of the i128)
//! boxes an [`ExactSum`], a 2240-bit accumulator that holds any sum of
//! doubles exactly, and such values add there. Infinities and NaN are kept
//! there too, so a sum answers as PostgreSQL and DuckDB do (an infinity, or
//! NaN), in any order; a finite sum beyond the largest double answers as an
//! infinity of its sign. `avg(x)` divides the rounded sum by the count.
//!
//! Every state is 48 bytes, whatever the aggregate, and a group's states
//! sit side by side: an [`AggState`] is as large as its largest variant,
//! so KLL, Theta and top-k states are boxed, and an HLL stays inline in 40
//! bytes because `sketch::hll` packs its settings in 8. Boxing the HLL
//! instead cost an allocation and a cache miss per group (494 MB and 1.29 s
//! against 362 MB and 0.89 s for 1.5M groups, `rollup_memory`, 2026-11-21);
//! states of 80 bytes (top-k's two maps inline) cost 341 bytes a group
//! against 241. Quantile aggregates over the same argument and `k` share
//! one KLL sketch ([`AggKind::QuantilesOf`]).

use std::collections::HashMap;

use cardinal_sketch::countmin::{HeavyHitters, Params};
use cardinal_sketch::exact::ExactSet;
use cardinal_sketch::hash::U64KeyBuild;
use cardinal_sketch::hll::{Hll, Settings};
use cardinal_sketch::quantiles::Quantiles;
use cardinal_sketch::theta::Theta;
use cardinal_sketch::{Estimate, Sketch};

use crate::Result;
use crate::sum::ExactSum;

/// Scale of the fixed-point sum: units of 2^-64.
const SUM_SCALE: f64 = 18_446_744_073_709_551_616.0;

/// Values at or above this magnitude go to the exact accumulator: 2^62, so
/// that the i128 (2^127 units of 2^-64, that is 2^63) cannot overflow
/// before 2 such values, and a sum of many values below it is checked.
const SUM_FIXED_VALUE_MAX: f64 = 4_611_686_018_427_387_904.0;

/// [`SUM_FIXED_VALUE_MAX`] for integers.
const SUM_FIXED_INT_MAX: u64 = 1 << 62;

/// Largest `k` of `topk(x, k)`: the candidate list is bounded (and so is the
/// memory of names kept for it).
pub const TOPK_K_MAX: u32 = 1_000;

/// Distinct keys a `topk` state counts exactly before it turns into a
/// Count-Min heavy-hitters sketch. A group that sees few distinct values
/// (sites per day, say) keeps exact counts in a map well under the sketch's
/// ~106 KiB table, and an insert is one map probe instead of five counter
/// updates and a candidate check; past the limit the counts go into the
/// sketch (each key with its count as weight) and the state stays a sketch.
pub const TOPK_EXACT_KEYS_MAX: usize = 1_024;

/// Names a `topk` state keeps per candidate of its sketch, at most: new
/// candidates' names are added as they come and pruned to the current
/// candidates' when they reach this many times the capacity, so names of
/// evicted candidates cost a bounded amount. A state image with more is
/// refused.
pub(crate) const TOPK_NAMES_PER_CANDIDATE_MAX: usize = 2;

/// Most ranks one `approx_quantile` may ask for.
pub const RANKS_MAX: usize = 8;

/// The ranks a quantile aggregate answers at, kept inline so that
/// [`AggKind`] stays `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Ranks {
    len: u8,
    values: [f64; RANKS_MAX],
}

impl Ranks {
    /// Up to [`RANKS_MAX`] ranks, each in `[0, 1]`.
    pub fn new(ranks: &[f64]) -> Result<Self> {
        if ranks.len() > RANKS_MAX || ranks.iter().any(|r| !(0.0..=1.0).contains(r)) {
            return Err(crate::Error::Limit {
                name: "quantile ranks",
                value: ranks.len() as u64,
                reason: "at most RANKS_MAX (8) ranks, each in [0, 1]",
            });
        }
        let mut values = [0.0; RANKS_MAX];
        values[..ranks.len()].copy_from_slice(ranks);
        Ok(Self {
            len: u8::try_from(ranks.len()).expect("<= 8"),
            values,
        })
    }

    /// The ranks.
    pub fn as_slice(&self) -> &[f64] {
        &self.values[..usize::from(self.len)]
    }
}

/// What a summary computes per group, with its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AggKind {
    /// `count(*)`: every record.
    CountAll,
    /// `count(x)`: records whose argument is not null.
    Count,
    /// `sum(x)` of floats.
    Sum,
    /// `sum(x)` of integers, exact ([`AggState::SumInt`]).
    SumInt,
    /// `avg(x)`.
    Avg,
    /// `min(x)` of floats (or instants).
    Min,
    /// `min(x)` of integers, exact.
    MinInt,
    /// `max(x)` of floats (or instants).
    Max,
    /// `max(x)` of integers, exact.
    MaxInt,
    /// `hll(x [, log2m [, regwidth]])`.
    Hll {
        /// log2 of the register count.
        log2m: u8,
        /// Bits per register.
        regwidth: u8,
    },
    /// `exact_distinct(x)`.
    ExactDistinct,
    /// `quantiles(x)` or `approx_quantile(x, q...)`: a KLL sketch with this
    /// `k`, answering at `ranks` (0.5, 0.9 and 0.99 when empty).
    Quantiles {
        /// KLL's accuracy parameter.
        k: u16,
        /// The ranks asked for.
        ranks: Ranks,
    },
    /// A second quantile aggregate over the same argument with the same
    /// `k` as aggregate `of` (an earlier [`AggKind::Quantiles`] of the same
    /// shape): it keeps no sketch of its own (its state is
    /// [`AggState::Shared`]) and answers at its own `ranks` from `of`'s
    /// sketch, which is the sketch it would have built. Three
    /// `approx_quantile(revenue, ...)` columns cost one sketch update per
    /// record instead of three. Read its answer with [`output_of`].
    QuantilesOf {
        /// The aggregate whose sketch it reads.
        of: u8,
        /// The ranks asked for.
        ranks: Ranks,
    },
    /// `topk(x, k)`.
    TopK {
        /// How many items to report.
        k: u32,
    },
    /// `theta(x)` with `2^lg_k` retained hashes.
    Theta {
        /// log2 of the nominal entries.
        lg_k: u8,
    },
}

/// One record's evaluated argument for one aggregate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Input<'a> {
    /// The argument is null (or the aggregate is `count(*)`, which ignores
    /// it): only `count(*)` counts the record.
    Null,
    /// A number, for sum, avg, min, max and quantiles.
    Number(f64),
    /// An integer, for the same: exact in sums, minima and maxima.
    Int(i64),
    /// A distinct-count argument: its 64-bit hash (computed once per record
    /// and argument by the caller, see `cardinal_sketch::hash`) and, for
    /// exact sets, the integer id itself when the argument is an integer.
    Key {
        /// The postgresql-hll-compatible hash of the value.
        hash: u64,
        /// The value as a u64 id, for `exact_distinct` (None for text,
        /// which then uses the hash).
        id: Option<u64>,
        /// The value's bytes, for `topk` names.
        text: &'a [u8],
    },
}

/// The state of one aggregate in one group.
#[derive(Debug, Clone)]
pub enum AggState {
    /// `count(*)` and `count(x)`.
    Count(u64),
    /// `sum(x)` and `avg(x)`: exact sum and the count of values.
    Sum {
        /// Sum of the values that are multiples of 2^-64 below 2^62, in
        /// units of 2^-64.
        fixed: i128,
        /// Sum of the other values (tiny, huge, not finite, or an overflow
        /// of `fixed`), exact; boxed on the first such value.
        exact: Option<Box<ExactSum>>,
        /// Values summed.
        count: u64,
    },
    /// `sum(x)` of integers. Exact: each value is below 2^63 in
    /// magnitude and there are fewer than 2^64 of them, so the sum stays
    /// below 2^127.
    SumInt {
        /// The sum.
        sum: i128,
        /// Values summed.
        count: u64,
    },
    /// `min(x)`; `None` until a value arrives.
    Min(Option<f64>),
    /// `max(x)`; `None` until a value arrives.
    Max(Option<f64>),
    /// `min(x)` of integers; `None` until a value arrives.
    MinInt(Option<i64>),
    /// `max(x)` of integers; `None` until a value arrives.
    MaxInt(Option<i64>),
    /// `hll(x)`: inline (40 bytes), so a group's sketch is one allocation
    /// (its registers) and one miss fewer than a boxed one.
    Hll(Hll),
    /// `exact_distinct(x)`.
    Exact(ExactSet),
    /// `quantiles(x)`.
    Quantiles(Box<Quantiles>),
    /// An [`AggKind::QuantilesOf`]: nothing of its own.
    Shared,
    /// `topk(x, k)`: counts and the names of the current candidates
    /// (boxed: its two maps inline made every state 80 bytes).
    TopK(Box<TopState>),
    /// `theta(x)`.
    Theta(Box<Theta>),
}

// Every group of a summary holds one state per aggregate, as large as the
// largest variant: the larger sketches are boxed and the HLL keeps its
// settings in 8 bytes, so a `sum` or `count` group stays small (Query 2A's
// 1.45M groups held 80 bytes each for a 32-byte sum).
const _: () = assert!(std::mem::size_of::<AggState>() <= 48);

/// A `topk(x, k)` state: counts and the names of the current candidates.
#[derive(Debug, Clone)]
pub struct TopState {
    /// Exact counts, then a sketch ([`TOPK_EXACT_KEYS_MAX`]).
    pub counts: TopCounts,
    /// Text of keys by key hash: of every key while counts are exact;
    /// then of the candidates, pruned to them whenever it reaches twice
    /// the candidate capacity and after merges, so it stays bounded.
    pub names: HashMap<u64, Box<[u8]>, U64KeyBuild>,
    /// How many to report.
    pub k: u32,
}

/// The counts of a `topk` state.
#[derive(Debug, Clone)]
pub enum TopCounts {
    /// Count per key hash, while there are at most [`TOPK_EXACT_KEYS_MAX`].
    Exact(HashMap<u64, u64, U64KeyBuild>),
    /// Frequencies and candidate keys.
    Sketch(Box<HeavyHitters>),
}

impl TopCounts {
    /// Candidates a sketch keeps for `topk(x, k)`: four per reported item
    /// keep the reported top k stable under merges (the candidate list is
    /// what merges).
    pub(crate) fn capacity(k: u32) -> u32 {
        (k * 4).max(16)
    }

    /// A sketch holding `exact`'s counts, heaviest first so that they
    /// become the candidates.
    fn sketch_of(exact: &HashMap<u64, u64, U64KeyBuild>, k: u32) -> Result<Box<HeavyHitters>> {
        let mut sketch = Box::new(HeavyHitters::new(Params::default(), Self::capacity(k))?);
        for (key, n) in Self::ranked(exact) {
            sketch.insert(key, n);
        }
        Ok(sketch)
    }

    /// Exact counts as (key, count), heaviest first, ties by key.
    fn ranked(exact: &HashMap<u64, u64, U64KeyBuild>) -> Vec<(u64, u64)> {
        let mut ranked: Vec<(u64, u64)> = exact.iter().map(|(&key, &n)| (key, n)).collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }

    /// Turns exact counts past [`TOPK_EXACT_KEYS_MAX`] keys into a sketch
    /// (see [`TopCounts::make_sketch`]); nothing otherwise.
    fn bound(&mut self, names: &mut HashMap<u64, Box<[u8]>, U64KeyBuild>, k: u32) -> Result<()> {
        match self {
            TopCounts::Exact(exact) if exact.len() > TOPK_EXACT_KEYS_MAX => {
                self.make_sketch(names, k)
            }
            _ => Ok(()),
        }
    }

    /// Turns exact counts into a sketch (nothing for a sketch), keeping
    /// only the candidates' names.
    fn make_sketch(
        &mut self,
        names: &mut HashMap<u64, Box<[u8]>, U64KeyBuild>,
        k: u32,
    ) -> Result<()> {
        if let TopCounts::Exact(exact) = self {
            let sketch = Self::sketch_of(exact, k)?;
            names.retain(|key, _| sketch.is_candidate(*key));
            *self = TopCounts::Sketch(sketch);
        }
        Ok(())
    }

    /// Whether `key` may be reported: any counted key while exact.
    fn keeps(&self, key: u64) -> bool {
        match self {
            TopCounts::Exact(exact) => exact.contains_key(&key),
            TopCounts::Sketch(sketch) => sketch.is_candidate(key),
        }
    }
}

/// What one aggregate answers for one group.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// An exact integer (counts).
    Count(u64),
    /// An exact number (sum, avg, min, max); `None` when no value arrived.
    Number(Option<f64>),
    /// An exact integer (sum, min and max of integers); `None` when no
    /// value arrived.
    Int(Option<i128>),
    /// An approximate count with its interval.
    Estimate(Estimate),
    /// Quantiles at the asked ranks with the sketch's rank error.
    Quantiles {
        /// `(rank, value)` pairs, one per asked rank ([`AggKind::ranks`]);
        /// the value is `None` when no number arrived (an empty sketch).
        values: Vec<(f64, Option<f64>)>,
        /// Normalized rank error of the sketch: 0 while it holds every
        /// value (its quantiles are then exact).
        rank_error: f64,
    },
    /// The top items with their estimated counts.
    TopK(Vec<(Vec<u8>, Estimate)>),
}

/// The ranks a quantile aggregate answers at when it names none.
pub const RANKS_DEFAULT: [f64; 3] = [0.5, 0.9, 0.99];

impl AggKind {
    /// The ranks a quantile aggregate answers at: those asked, or
    /// [`RANKS_DEFAULT`]; empty for any other aggregate. An empty sketch
    /// answers each with `None`, so every row of a summary has the same
    /// columns.
    pub fn ranks(&self) -> &[f64] {
        match self {
            AggKind::Quantiles { ranks, .. } | AggKind::QuantilesOf { ranks, .. } => {
                match ranks.as_slice() {
                    [] => &RANKS_DEFAULT,
                    asked => asked,
                }
            }
            _ => &[],
        }
    }

    /// A fresh state for this aggregate.
    pub fn state(&self) -> Result<AggState> {
        Ok(match *self {
            AggKind::CountAll | AggKind::Count => AggState::Count(0),
            AggKind::Sum | AggKind::Avg => AggState::Sum {
                fixed: 0,
                exact: None,
                count: 0,
            },
            AggKind::SumInt => AggState::SumInt { sum: 0, count: 0 },
            AggKind::Min => AggState::Min(None),
            AggKind::Max => AggState::Max(None),
            AggKind::MinInt => AggState::MinInt(None),
            AggKind::MaxInt => AggState::MaxInt(None),
            AggKind::Hll { log2m, regwidth } => {
                AggState::Hll(Hll::new(Settings::new(log2m, regwidth)?)?)
            }
            AggKind::ExactDistinct => AggState::Exact(ExactSet::new()),
            AggKind::Quantiles { k, .. } => AggState::Quantiles(Box::new(Quantiles::new(k)?)),
            AggKind::QuantilesOf { .. } => AggState::Shared,
            AggKind::TopK { k } => {
                if k == 0 || k > TOPK_K_MAX {
                    return Err(crate::Error::Limit {
                        name: "topk k",
                        value: u64::from(k),
                        reason: "must be in 1..=TOPK_K_MAX (1000)",
                    });
                }
                AggState::TopK(Box::new(TopState {
                    counts: TopCounts::Exact(HashMap::default()),
                    names: HashMap::default(),
                    k,
                }))
            }
            AggKind::Theta { lg_k } => AggState::Theta(Box::new(Theta::new(lg_k)?)),
        })
    }
}

impl AggState {
    /// Folds one record's argument into the state. `count(*)` states count
    /// every call; every other state ignores [`Input::Null`] and inputs of a
    /// kind it does not take (the planner type-checks, so those do not
    /// happen in a compiled summary).
    ///
    /// The general entry point; an engine that knows at plan time what
    /// each aggregate takes calls [`AggState::fold_count`],
    /// [`AggState::fold_number`], [`AggState::fold_key`] or
    /// [`AggState::fold_topk`] directly, which is what this does.
    #[inline]
    pub fn fold(&mut self, kind: &AggKind, input: Input<'_>) {
        match input {
            Input::Null => {
                if *kind == AggKind::CountAll {
                    self.fold_count();
                }
            }
            Input::Number(v) => match self {
                AggState::Count(n) => *n += 1,
                _ => self.fold_number(v),
            },
            Input::Int(v) => match self {
                AggState::Count(n) => *n += 1,
                _ => self.fold_int(v),
            },
            Input::Key { hash, id, text } => match self {
                AggState::Count(n) => *n += 1,
                AggState::TopK(_) => self.fold_topk(hash, || text.into()),
                _ => self.fold_key(hash, id),
            },
        }
    }

    /// Counts one record into a `count` state (nothing for other states).
    #[inline]
    pub fn fold_count(&mut self) {
        if let AggState::Count(n) = self {
            *n += 1;
        }
    }

    /// Folds a number into a sum, avg, min, max or quantiles state
    /// (nothing for other states). Non-finite values follow PostgreSQL
    /// and DuckDB: a sum with an infinity is that infinity, with both
    /// infinities or a NaN it is NaN; NaN sorts above every number, so it
    /// is the max of any values it is among and the min of only NaNs.
    /// Quantile sketches skip NaN (it has no rank).
    #[inline]
    pub fn fold_number(&mut self, v: f64) {
        match self {
            AggState::Sum {
                fixed,
                exact,
                count,
            } => {
                add_value(fixed, exact, v);
                *count += 1;
            }
            AggState::Min(m) => *m = Some(m.map_or(v, |m| min_of(m, v))),
            AggState::Max(m) => *m = Some(m.map_or(v, |m| max_of(m, v))),
            AggState::Quantiles(q) => q.insert(v),
            AggState::SumInt { .. } | AggState::MinInt(_) | AggState::MaxInt(_) => {
                debug_assert!(false, "the planner sends integer aggregates integers");
            }
            _ => {}
        }
    }

    /// Folds an integer into a sum, avg, min, max or quantiles state
    /// (nothing for other states): exactly into integer sums, minima and
    /// maxima, and into an `avg`'s fixed point below 2^62; as an f64 into
    /// the rest (a float aggregate whose argument mixes integers in, such
    /// as `coalesce(bigint_column, 0.5)`).
    #[inline]
    pub fn fold_int(&mut self, v: i64) {
        match self {
            AggState::SumInt { sum, count } => {
                *sum += i128::from(v);
                *count += 1;
            }
            AggState::MinInt(m) => *m = Some(m.map_or(v, |m| m.min(v))),
            AggState::MaxInt(m) => *m = Some(m.map_or(v, |m| m.max(v))),
            AggState::Sum {
                fixed,
                exact,
                count,
            } => {
                add_int(fixed, exact, v);
                *count += 1;
            }
            #[expect(clippy::cast_precision_loss, reason = "a float aggregate")]
            _ => self.fold_number(v as f64),
        }
    }

    /// Folds a distinct-count key (its hash, and for exact sets the
    /// integer id when there is one) into an hll, theta or exact state
    /// (nothing for other states; top-k takes [`AggState::fold_topk`]).
    #[inline]
    pub fn fold_key(&mut self, hash: u64, id: Option<u64>) {
        match self {
            AggState::Hll(h) => h.insert(hash),
            AggState::Exact(set) => {
                set.insert(id.unwrap_or(hash));
            }
            AggState::Theta(t) => t.insert(hash),
            _ => {}
        }
    }

    /// Counts a key into a top-k state (nothing for other states). `name`
    /// makes the value's text, called only when the key becomes a new
    /// candidate, so callers with integer values print them only then.
    #[inline]
    pub fn fold_topk(&mut self, hash: u64, name: impl FnOnce() -> Box<[u8]>) {
        if let AggState::TopK(top) = self {
            let TopState { counts, names, k } = &mut **top;
            match counts {
                TopCounts::Exact(exact) => {
                    let n = exact.entry(hash).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        names.insert(hash, name());
                        counts
                            .bound(names, *k)
                            .expect("the sketch's parameters are valid for every k");
                    }
                }
                TopCounts::Sketch(sketch) => {
                    sketch.insert(hash, 1);
                    if !names.contains_key(&hash) && sketch.is_candidate(hash) {
                        if names.len() >= TOPK_NAMES_PER_CANDIDATE_MAX * sketch.capacity() as usize
                        {
                            names.retain(|key, _| sketch.is_candidate(*key));
                        }
                        names.insert(hash, name());
                    }
                }
            }
        }
    }

    /// Folds another partial state of the same aggregate into this one.
    pub fn merge(&mut self, other: &AggState) -> Result<()> {
        match (self, other) {
            (AggState::Count(a), AggState::Count(b)) => *a += b,
            (
                AggState::Sum {
                    fixed,
                    exact,
                    count,
                },
                AggState::Sum {
                    fixed: f,
                    exact: e,
                    count: c,
                },
            ) => {
                match fixed.checked_add(*f) {
                    Some(sum) => *fixed = sum,
                    None => exact_sum(exact).add_fixed(*f),
                }
                if let Some(e) = e {
                    exact_sum(exact).merge(e);
                }
                *count += c;
            }
            (AggState::SumInt { sum, count }, AggState::SumInt { sum: s, count: c }) => {
                *sum += s;
                *count += c;
            }
            (AggState::Min(a), AggState::Min(b)) => *a = pick(*a, *b, min_of),
            (AggState::Max(a), AggState::Max(b)) => *a = pick(*a, *b, max_of),
            (AggState::MinInt(a), AggState::MinInt(b)) => *a = pick(*a, *b, Ord::min),
            (AggState::MaxInt(a), AggState::MaxInt(b)) => *a = pick(*a, *b, Ord::max),
            (AggState::Hll(a), AggState::Hll(b)) => a.merge(b)?,
            (AggState::Exact(a), AggState::Exact(b)) => a.merge(b)?,
            (AggState::Quantiles(a), AggState::Quantiles(b)) => a.merge(b)?,
            (AggState::TopK(top), AggState::TopK(theirs)) => {
                let TopState { counts, names, k } = &mut **top;
                let TopState {
                    counts: other,
                    names: n,
                    ..
                } = &**theirs;
                match (&mut *counts, other) {
                    (TopCounts::Exact(a), TopCounts::Exact(b)) => {
                        for (key, n) in b {
                            *a.entry(*key).or_insert(0) += n;
                        }
                    }
                    (TopCounts::Sketch(a), TopCounts::Exact(b)) => {
                        a.merge(&*TopCounts::sketch_of(b, *k)?)?;
                    }
                    (TopCounts::Exact(_), TopCounts::Sketch(b)) => {
                        counts.make_sketch(names, *k)?;
                        if let TopCounts::Sketch(a) = counts {
                            a.merge(b)?;
                        }
                    }
                    (TopCounts::Sketch(a), TopCounts::Sketch(b)) => a.merge(b)?,
                }
                for (hash, name) in n {
                    names.entry(*hash).or_insert_with(|| name.clone());
                }
                counts.bound(names, *k)?;
                names.retain(|hash, _| counts.keeps(*hash));
            }
            (AggState::Theta(a), AggState::Theta(b)) => a.merge(b)?,
            (AggState::Shared, AggState::Shared) => {}
            (a, b) => {
                return Err(crate::Error::Shape {
                    reason: format!("aggregate states differ: {} and {}", a.name(), b.name()),
                });
            }
        }
        Ok(())
    }

    /// The aggregate's answer. A [`AggState::Shared`] state has none of
    /// its own (empty quantiles): read it with [`output_of`].
    pub fn output(&self, kind: &AggKind) -> Output {
        match self {
            AggState::Count(n) => Output::Count(*n),
            AggState::Sum {
                fixed,
                exact,
                count,
            } => {
                // As in SQL, a sum or mean of no values (every one NULL)
                // is NULL.
                let sum = match exact {
                    None => from_fixed(*fixed),
                    Some(exact) => {
                        let mut all = exact.clone();
                        all.add_fixed(*fixed);
                        all.value()
                    }
                };
                Output::Number((*count > 0).then(|| match kind {
                    AggKind::Avg => sum / *count as f64,
                    _ => sum,
                }))
            }
            AggState::SumInt { sum, count } => Output::Int((*count > 0).then_some(*sum)),
            AggState::Min(m) | AggState::Max(m) => Output::Number(*m),
            AggState::MinInt(m) | AggState::MaxInt(m) => Output::Int(m.map(i128::from)),
            AggState::Hll(h) => Output::Estimate(h.estimate()),
            AggState::Exact(set) => Output::Estimate(set.estimate()),
            AggState::Quantiles(q) => Output::Quantiles {
                values: kind
                    .ranks()
                    .iter()
                    .copied()
                    .zip(q.quantiles(kind.ranks()))
                    .collect(),
                // A sketch that kept every value answers exactly.
                rank_error: if q.is_exact() { 0.0 } else { q.rank_error() },
            },
            AggState::TopK(top) => {
                let TopState { counts, names, k } = &**top;
                let k = usize::try_from(*k).unwrap_or(usize::MAX);
                let name = |key: u64| names.get(&key).map_or_else(Vec::new, |n| n.to_vec());
                Output::TopK(match counts {
                    TopCounts::Exact(exact) => TopCounts::ranked(exact)
                        .into_iter()
                        .take(k)
                        .map(|(key, n)| (name(key), Estimate::exact(n as f64)))
                        .collect(),
                    TopCounts::Sketch(sketch) => sketch
                        .top(k)
                        .into_iter()
                        .map(|hit| (name(hit.key), hit.estimate))
                        .collect(),
                })
            }
            AggState::Theta(t) => Output::Estimate(t.estimate()),
            AggState::Shared => Output::Quantiles {
                values: Vec::new(),
                rank_error: f64::NAN,
            },
        }
    }

    /// The quantile at each of `ranks` of a `quantiles(x)` state with
    /// its 95% interval of values, from one sorted view of the sketch
    /// ([`Quantiles::quantile_intervals`]): exact (confidence 1) while the
    /// sketch holds every value. `None` for an empty sketch, a rank
    /// outside `0..=1`, or any other state (read an
    /// [`AggKind::QuantilesOf`]'s through [`state_of`]). What `output`
    /// prints is unchanged: this is for callers that print intervals.
    pub fn quantile_intervals(&self, ranks: &[f64]) -> Vec<Option<Estimate>> {
        match self {
            AggState::Quantiles(q) => q.quantile_intervals(ranks),
            _ => vec![None; ranks.len()],
        }
    }

    /// The count a distinct-count state answers, with a calibrated 95%
    /// interval: an HLL's [`Hll::calibrated_estimate`] (narrower than the
    /// interval `output` prints below about 10 m values, where that one
    /// covers more than 95%), a Theta sketch's estimate (DataSketches'
    /// 2-sigma bounds, confidence 0.954), an exact set's count. `None` for
    /// any other state. What `output` prints is unchanged.
    pub fn estimate_95(&self) -> Option<Estimate> {
        match self {
            AggState::Hll(h) => Some(h.calibrated_estimate()),
            AggState::Theta(t) => Some(t.estimate()),
            AggState::Exact(set) => Some(set.estimate()),
            _ => None,
        }
    }

    /// Restarts the random choices of a randomized state from `seed`
    /// alone: a KLL sketch's compaction coins ([`Quantiles::reseed`]).
    /// Every other state is deterministic already (HLL, Theta and
    /// Count-Min hash with fixed seeds; exact sets and numbers flip no
    /// coins) and is left as it is. A caller that merges states into
    /// fresh ones to answer a query reseeds each fresh state with
    /// [`answer_seed`] first, so the answer is a function of the states
    /// merged and the query, whatever thread runs it.
    pub fn reseed(&mut self, seed: u64) {
        if let AggState::Quantiles(q) = self {
            q.reseed(seed);
        }
    }

    /// Bytes of heap memory the state holds beyond its 48 bytes: sketch
    /// payloads and the boxes of the boxed states, by capacity. Cheap (no
    /// state is encoded or compacted to be measured), so that a memory
    /// budget can ask every group's states now and then; hash maps are
    /// counted as their buckets plus a control byte each.
    pub fn heap_bytes(&self) -> usize {
        /// Bytes per bucket of a hash map of `u64` to `u64`, or of `u64`
        /// to a boxed slice (16 bytes), with its control byte.
        const MAP_BUCKET_BYTES: usize = 8 + 16 + 1;
        match self {
            AggState::Hll(h) => h.heap_bytes(),
            AggState::Exact(set) => set.heap_bytes(),
            AggState::Quantiles(q) => std::mem::size_of::<Quantiles>() + q.heap_bytes(),
            AggState::TopK(top) => {
                let TopState { counts, names, .. } = &**top;
                let counts = std::mem::size_of::<TopState>()
                    + match counts {
                        TopCounts::Exact(exact) => exact.capacity() * 17,
                        TopCounts::Sketch(sketch) => {
                            let counters =
                                usize::try_from(sketch.sketch().params().counter_count())
                                    .unwrap_or(usize::MAX);
                            let candidates =
                                usize::try_from(sketch.capacity()).unwrap_or(usize::MAX);
                            std::mem::size_of::<HeavyHitters>()
                                + counters.saturating_mul(8)
                                + candidates.saturating_mul(16 + MAP_BUCKET_BYTES)
                        }
                    };
                counts
                    + names.capacity() * MAP_BUCKET_BYTES
                    + names.values().map(|n| n.len()).sum::<usize>()
            }
            AggState::Theta(t) => t.heap_bytes(),
            _ => 0,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            AggState::Count(_) => "count",
            AggState::Sum { .. } | AggState::SumInt { .. } => "sum",
            AggState::Min(_) | AggState::MinInt(_) => "min",
            AggState::Max(_) | AggState::MaxInt(_) => "max",
            AggState::Hll(_) => "hll",
            AggState::Exact(_) => "exact_distinct",
            AggState::Quantiles(_) => "quantiles",
            AggState::TopK(_) => "topk",
            AggState::Theta(_) => "theta",
            AggState::Shared => "shared quantiles",
        }
    }
}

/// The seed of aggregate `aggregate`'s fresh state in the answer group
/// `(bucket, key)` ([`AggState::reseed`]): a hash of the three, so that
/// every state of an answer flips its own coins (states that flipped the
/// same coins would err together), and the same query over the same
/// states gives the same bytes in every run and on every thread.
pub fn answer_seed(bucket: i64, key: &[u8], aggregate: usize) -> u64 {
    /// SplitMix64's finalizer: mixes one 64-bit word into another.
    fn mix(state: u64, word: u64) -> u64 {
        let mut z = (state ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let mut seed = mix(0x616e_7377_6572, bucket as u64); // "answer"
    seed = mix(seed, aggregate as u64);
    seed = mix(seed, key.len() as u64);
    for chunk in key.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        seed = mix(seed, u64::from_le_bytes(word));
    }
    seed
}

/// The state aggregate `index` of a group answers from: its own, or for
/// an [`AggKind::QuantilesOf`] the sketch of the aggregate it reads.
/// `states` and `kinds` are one group's states and its shape's kinds.
pub fn state_of<'s>(states: &'s [AggState], kinds: &[AggKind], index: usize) -> &'s AggState {
    match kinds[index] {
        AggKind::QuantilesOf { of, .. } => &states[usize::from(of)],
        _ => &states[index],
    }
}

/// Aggregate `index`'s answer for a group (see [`state_of`]).
pub fn output_of(states: &[AggState], kinds: &[AggKind], index: usize) -> Output {
    state_of(states, kinds, index).output(&kinds[index])
}

fn pick<T>(a: Option<T>, b: Option<T>, f: fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(f(x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The smaller of `a` and `b`, NaN above every number (as in PostgreSQL
/// and DuckDB): NaN only when both are.
#[inline]
fn min_of(a: f64, b: f64) -> f64 {
    // `f64::min` returns the other operand when one is NaN.
    a.min(b)
}

/// The larger of `a` and `b`, NaN above every number (as in PostgreSQL
/// and DuckDB): NaN when either is.
#[inline]
fn max_of(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Adds `v` to the fixed-point sum when it is exact there and does not
/// overflow it, else to the exact accumulator (which also keeps IEEE's
/// answer for infinities and NaN: an infinity, or NaN for a NaN or
/// infinities of both signs, in any order).
#[inline]
fn add_value(fixed: &mut i128, exact: &mut Option<Box<ExactSum>>, v: f64) {
    if let Some(units) = fixed_units(v)
        && let Some(sum) = fixed.checked_add(units)
    {
        *fixed = sum;
    } else {
        exact_sum(exact).add(v);
    }
}

/// [`add_value`] for an integer: exact into the fixed point below 2^62
/// (an f64 holds integers exactly only below 2^53), else exact into the
/// accumulator (every i64 times 2^64 is an i128).
#[inline]
fn add_int(fixed: &mut i128, exact: &mut Option<Box<ExactSum>>, v: i64) {
    let units = i128::from(v) << 64;
    if v.unsigned_abs() < SUM_FIXED_INT_MAX
        && let Some(sum) = fixed.checked_add(units)
    {
        *fixed = sum;
    } else {
        exact_sum(exact).add_fixed(units);
    }
}

/// The exact accumulator of a sum, boxed on first use.
#[cold]
fn exact_sum(exact: &mut Option<Box<ExactSum>>) -> &mut ExactSum {
    exact.get_or_insert_with(Box::default)
}

/// `v * SUM_SCALE` as an i128 when it is a whole number and
/// `|v| < SUM_FIXED_VALUE_MAX`, from the bits: `v` is `m * 2^e` (53-bit
/// `m`), so its units of 2^-64 are `m << (e + 64)`, or `m >> -(e + 64)`
/// when the bits shifted out are zero. `None` for any other value (one with
/// bits below 2^-64, one too large, an infinity or NaN): the fixed point
/// would not hold it exactly.
#[inline]
fn fixed_units(v: f64) -> Option<i128> {
    let bits = v.to_bits();
    // The exponent field is 11 bits.
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, exponent) = if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | 1 << 52, exponent - 1075)
    };
    // |v| < 2^62 (and finite): the top bit, at exponent + 52, is below
    // 62. Then the shift is at most 73 and the units stay below 2^126.
    if exponent > 61 - 52 {
        return None;
    }
    debug_assert!(v.abs() < SUM_FIXED_VALUE_MAX);
    let shift = exponent + 64;
    let magnitude = if shift >= 0 {
        i128::from(mantissa) << shift
    } else if mantissa == 0 {
        0
    } else {
        let down = shift.unsigned_abs();
        if down >= 64 || mantissa & ((1 << down) - 1) != 0 {
            return None;
        }
        i128::from(mantissa >> down)
    };
    Some(if bits >> 63 == 1 {
        -magnitude
    } else {
        magnitude
    })
}

#[expect(clippy::cast_precision_loss, reason = "the answer is an f64")]
fn from_fixed(fixed: i128) -> f64 {
    fixed as f64 / SUM_SCALE
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The bit-level conversion gives the float expression's units for
        /// every value the fixed point holds exactly, and refuses the rest.
        #[test]
        fn fixed_units_are_the_exact_product(bits in proptest::prelude::any::<u64>(), scale in -80i32..70) {
            let v = f64::from_bits(bits);
            let scaled = if v.is_finite() { v * 2f64.powi(scale) } else { 0.5 };
            for v in [v, scaled, 2f64.powi(scale) * 1.5, -2f64.powi(scale) * 0.5] {
                proptest::prop_assert_eq!(fixed_units(v), reference_units(v), "{:e}", v);
            }
        }
    }

    /// `v * 2^64` as an i128 when that is exact and `|v| < 2^62`.
    fn reference_units(v: f64) -> Option<i128> {
        let product = v * SUM_SCALE;
        #[expect(clippy::cast_possible_truncation, reason = "checked whole and small")]
        (v.is_finite() && v.abs() < SUM_FIXED_VALUE_MAX && product.fract() == 0.0)
            .then_some(product as i128)
    }

    #[test]
    fn fixed_units_at_the_edges() {
        for v in [
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            0.5 / SUM_SCALE,
            1.5 / SUM_SCALE,
            -2.5 / SUM_SCALE,
            0.002463,
            1e18,
            -4.6e18,
            4_611_686_018_427_387_904.0,
            1e-20,
            f64::INFINITY,
            f64::NAN,
        ] {
            assert_eq!(fixed_units(v), reference_units(v), "{v:e}");
        }
        assert_eq!(fixed_units(-2.5 / SUM_SCALE), None);
        assert_eq!(fixed_units(-2.0 / SUM_SCALE), Some(-2));
        assert_eq!(fixed_units(0.0), Some(0));
    }

    fn fold_all(kind: AggKind, inputs: &[Input<'_>]) -> AggState {
        let mut state = kind.state().expect("valid");
        for &input in inputs {
            state.fold(&kind, input);
        }
        state
    }

    #[test]
    fn sums_do_not_depend_on_order() {
        let values = [0.1, 0.2, 0.3, 1e15, -1e15, 1.1885166e-4, 7.0];
        let forward: Vec<Input<'_>> = values.iter().map(|&v| Input::Number(v)).collect();
        let mut backward = forward.clone();
        backward.reverse();
        let (a, b) = (
            fold_all(AggKind::Sum, &forward),
            fold_all(AggKind::Sum, &backward),
        );
        assert_eq!(a.output(&AggKind::Sum), b.output(&AggKind::Sum));
        let Output::Number(Some(sum)) = a.output(&AggKind::Sum) else {
            panic!("a sum")
        };
        assert!((sum - 7.600_118_851_66).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn tiny_and_huge_values_keep_their_precision() {
        let tiny: Vec<Input<'_>> = (0..1000)
            .map(|i| Input::Number(1.234_567_8e-7 * f64::from(i)))
            .collect();
        let Output::Number(Some(sum)) = fold_all(AggKind::Sum, &tiny).output(&AggKind::Sum) else {
            panic!("a sum")
        };
        let exact = 1.234_567_8e-7 * 499_500.0;
        assert!((sum / exact - 1.0).abs() < 1e-12, "{sum} vs {exact}");
        let huge = [
            Input::Number(1e30),
            Input::Number(1.5),
            Input::Number(-1e30),
        ];
        let Output::Number(Some(sum)) = fold_all(AggKind::Sum, &huge).output(&AggKind::Sum) else {
            panic!("a sum")
        };
        assert_eq!(sum, 1.5);
    }

    #[test]
    fn quantiles_answer_at_the_asked_ranks() {
        let inputs: Vec<Input<'_>> = (1..=1000).map(|i| Input::Number(f64::from(i))).collect();
        let kind = AggKind::Quantiles {
            k: 200,
            ranks: Ranks::new(&[0.5]).expect("valid"),
        };
        let Output::Quantiles { values, .. } = fold_all(kind, &inputs).output(&kind) else {
            panic!("quantiles")
        };
        assert_eq!(values.len(), 1);
        let p50 = values[0].1.expect("a sketch of 1,000 values");
        assert!((p50 - 500.0).abs() <= 15.0, "{values:?}");
        // 1,000 values are past what k = 200 keeps whole: KLL's bound. A
        // hundred are kept whole: exact, no error.
        let error = |inputs: &[Input<'_>]| match fold_all(kind, inputs).output(&kind) {
            Output::Quantiles { rank_error, .. } => rank_error,
            other => panic!("{other:?}"),
        };
        assert!(error(&inputs) > 0.013, "{}", error(&inputs));
        assert_eq!(error(&inputs[..100]), 0.0);
        let default = AggKind::Quantiles {
            k: 200,
            ranks: Ranks::default(),
        };
        let Output::Quantiles { values, .. } = fold_all(default, &inputs).output(&default) else {
            panic!("quantiles")
        };
        assert_eq!(
            values.iter().map(|v| v.0).collect::<Vec<_>>(),
            vec![0.5, 0.9, 0.99]
        );
        assert!(Ranks::new(&[1.5]).is_err());
        assert!(Ranks::new(&[0.1; 9]).is_err());
    }

    #[test]
    fn quantile_intervals_are_exact_then_bracket_the_answer() {
        let kind = AggKind::Quantiles {
            k: 200,
            ranks: Ranks::default(),
        };
        let mut state = kind.state().expect("a state");
        let interval = |state: &AggState, rank: f64| state.quantile_intervals(&[rank])[0];
        assert_eq!(interval(&state, 0.5), None, "empty");
        for i in 1..=100 {
            state.fold_number(f64::from(i));
        }
        let exact = interval(&state, 0.5).expect("values");
        assert!(exact.is_exact());
        assert_eq!(exact.value, 50.0);
        for i in 101..=100_000 {
            state.fold_number(f64::from(i));
        }
        let e = interval(&state, 0.99).expect("values");
        assert_eq!(e.confidence, cardinal_sketch::CONFIDENCE_DEFAULT);
        assert!(e.lower < e.value && e.value < e.upper);
        assert!(e.upper - e.lower < 2_000.0, "{e:?}");
        assert_eq!(interval(&AggState::Count(3), 0.5), None);
        assert_eq!(interval(&state, 1.5), None);
    }

    #[test]
    fn counts_and_nulls() {
        let inputs = [Input::Null, Input::Number(1.0), Input::Null];
        assert_eq!(
            fold_all(AggKind::CountAll, &inputs).output(&AggKind::CountAll),
            Output::Count(3)
        );
        assert_eq!(
            fold_all(AggKind::Count, &inputs).output(&AggKind::Count),
            Output::Count(1)
        );
        assert_eq!(
            fold_all(AggKind::Avg, &inputs).output(&AggKind::Avg),
            Output::Number(Some(1.0))
        );
        // As in SQL, an aggregate of no values is NULL, a sum too.
        for kind in [AggKind::Sum, AggKind::Avg, AggKind::Min, AggKind::Max] {
            assert_eq!(
                fold_all(kind, &[Input::Null, Input::Null]).output(&kind),
                Output::Number(None),
                "{kind:?}"
            );
        }
        assert_eq!(
            fold_all(AggKind::Sum, &[Input::Null, Input::Number(0.0)]).output(&AggKind::Sum),
            Output::Number(Some(0.0))
        );
        // An empty sketch answers every asked rank, with no value (and no
        // error: it holds every value it had).
        let quantiles = AggKind::Quantiles {
            k: 200,
            ranks: Ranks::new(&[0.5, 0.9]).expect("valid"),
        };
        assert_eq!(
            fold_all(quantiles, &inputs[..1]).output(&quantiles),
            Output::Quantiles {
                values: vec![(0.5, None), (0.9, None)],
                rank_error: 0.0,
            }
        );
    }

    /// Infinities and NaN give what PostgreSQL and DuckDB give, whatever
    /// the order of the values and however they were split into partial
    /// states: a sum with an infinity is that infinity, with both or a NaN
    /// NaN; NaN is the max of any values it is among, the min of NaNs only.
    #[test]
    fn non_finite_values_count_as_in_sql() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let show = |o: Output| match o {
            Output::Number(Some(v)) => format!("{v:?}"),
            other => format!("{other:?}"),
        };
        for (values, sum, avg, min, max) in [
            (&[inf, 1.0][..], "inf", "inf", "1.0", "inf"),
            (&[-inf, 1.0, 2.0], "-inf", "-inf", "-inf", "2.0"),
            (&[inf, -inf], "NaN", "NaN", "-inf", "inf"),
            (&[nan, 2.0], "NaN", "NaN", "2.0", "NaN"),
            (&[nan, nan], "NaN", "NaN", "NaN", "NaN"),
            (&[1e308, 1e308], "inf", "inf", "1e308", "1e308"),
        ] {
            for (kind, want) in [
                (AggKind::Sum, sum),
                (AggKind::Avg, avg),
                (AggKind::Min, min),
                (AggKind::Max, max),
            ] {
                let inputs: Vec<Input<'_>> = values.iter().map(|&v| Input::Number(v)).collect();
                let whole = fold_all(kind, &inputs);
                assert_eq!(show(whole.output(&kind)), want, "{kind:?} of {values:?}");
                let mut reversed = inputs.clone();
                reversed.reverse();
                assert_eq!(show(fold_all(kind, &reversed).output(&kind)), want);
                for cut in 0..=inputs.len() {
                    let (mut a, b) = (
                        fold_all(kind, &inputs[..cut]),
                        fold_all(kind, &inputs[cut..]),
                    );
                    a.merge(&b).expect("same shape");
                    assert_eq!(
                        show(a.output(&kind)),
                        want,
                        "{kind:?} of {values:?} cut at {cut}"
                    );
                }
            }
        }
    }

    /// Sums, minima and maxima of integers are exact at 64 bits, where an
    /// f64 would round (2^53 + 1, 64-bit ids), in any order and split;
    /// an integer sum past i64 is still exact. `avg` adds integers below
    /// 2^62 exactly: the mean of 2^60 + 1 and -2^60 is 0.5, where f64s
    /// (2^60 + 1 rounds to 2^60) would give 0.
    #[test]
    fn integer_sums_minima_and_maxima_are_exact() {
        let big = (1_i64 << 53) + 1;
        let values = [i64::MAX, big, -3, i64::MAX, i64::MIN + 1, 7];
        let sum: i128 = values.iter().copied().map(i128::from).sum();
        let inputs: Vec<Input<'_>> = values.iter().map(|&v| Input::Int(v)).collect();
        for (kind, want) in [
            (AggKind::SumInt, sum),
            (AggKind::MinInt, i128::from(i64::MIN + 1)),
            (AggKind::MaxInt, i128::from(i64::MAX)),
        ] {
            let mut reversed = inputs.clone();
            reversed.reverse();
            for inputs in [&inputs, &reversed] {
                for cut in 0..=inputs.len() {
                    let mut a = fold_all(kind, &inputs[..cut]);
                    a.merge(&fold_all(kind, &inputs[cut..]))
                        .expect("same shape");
                    assert_eq!(
                        a.output(&kind),
                        Output::Int(Some(want)),
                        "{kind:?} cut at {cut}"
                    );
                }
            }
            assert_eq!(
                fold_all(kind, &[Input::Null]).output(&kind),
                Output::Int(None)
            );
        }
        let avg = fold_all(
            AggKind::Avg,
            &[Input::Int((1 << 60) + 1), Input::Int(-(1 << 60))],
        );
        assert_eq!(avg.output(&AggKind::Avg), Output::Number(Some(0.5)));
        // A float aggregate over integers (a `coalesce` of an integer and a
        // float) takes them as numbers.
        let max = fold_all(AggKind::Max, &[Input::Int(3), Input::Number(2.5)]);
        assert_eq!(max.output(&AggKind::Max), Output::Number(Some(3.0)));
    }

    #[test]
    fn merge_refuses_other_shapes() {
        let mut a = AggKind::Sum.state().expect("valid");
        let b = AggKind::Min.state().expect("valid");
        assert!(a.merge(&b).is_err());
    }

    #[test]
    fn topk_keeps_names_of_candidates_only() {
        let kind = AggKind::TopK { k: 2 };
        let mut state = kind.state().expect("valid");
        for i in 0..2_000u64 {
            let name = if i % 3 == 0 {
                "hot".to_string()
            } else {
                format!("cold{i}")
            };
            let hash = cardinal_sketch::hash::bytes(name.as_bytes(), 0);
            state.fold(
                &kind,
                Input::Key {
                    hash,
                    id: None,
                    text: name.as_bytes(),
                },
            );
        }
        let Output::TopK(top) = state.output(&kind) else {
            panic!("top k")
        };
        assert_eq!(top[0].0, b"hot");
        let AggState::TopK(top) = &state else {
            unreachable!()
        };
        let names = &top.names;
        // Pruned to the candidates whenever it reaches twice their capacity (16).
        assert!(names.len() <= 2 * 16, "{}", names.len());
    }

    fn topk_fold(state: &mut AggState, kind: &AggKind, name: &str) {
        state.fold(
            kind,
            Input::Key {
                hash: cardinal_sketch::hash::bytes(name.as_bytes(), 0),
                id: None,
                text: name.as_bytes(),
            },
        );
    }

    #[test]
    fn topk_counts_exactly_while_few_keys_then_turns_into_a_sketch() {
        let kind = AggKind::TopK { k: 3 };
        let mut state = kind.state().expect("valid");
        // 100 sites, site i seen i + 1 times.
        for i in 0..100u32 {
            for _ in 0..=i {
                topk_fold(&mut state, &kind, &format!("site{i}"));
            }
        }
        let Output::TopK(top) = state.output(&kind) else {
            panic!("top k")
        };
        let expected: Vec<(Vec<u8>, Estimate)> = (97..100u32)
            .rev()
            .map(|i| {
                (
                    format!("site{i}").into_bytes(),
                    Estimate::exact(f64::from(i + 1)),
                )
            })
            .collect();
        assert_eq!(top, expected, "exact counts, exact intervals");
        // Past TOPK_EXACT_KEYS_MAX distinct keys the state is a sketch,
        // still answering the heaviest, with bounded names.
        for i in 0..TOPK_EXACT_KEYS_MAX {
            topk_fold(&mut state, &kind, &format!("once{i}"));
        }
        let AggState::TopK(top) = &state else {
            unreachable!()
        };
        let TopState { counts, names, .. } = &**top;
        assert!(matches!(counts, TopCounts::Sketch(_)));
        assert!(names.len() <= 2 * 16, "{}", names.len());
        let Output::TopK(top) = state.output(&kind) else {
            panic!("top k")
        };
        assert_eq!(top[0].0, b"site99");
        assert!(top[0].1.lower <= 100.0 && top[0].1.upper >= 100.0);
    }

    #[test]
    fn topk_merges_across_exact_and_sketch_states() {
        let kind = AggKind::TopK { k: 2 };
        let fill = |names: &[(&str, u32)]| {
            let mut state = kind.state().expect("valid");
            for &(name, times) in names {
                for _ in 0..times {
                    topk_fold(&mut state, &kind, name);
                }
            }
            state
        };
        // Two exact halves add up to the single stream's exact state.
        let mut a = fill(&[("a", 5), ("b", 3)]);
        let b = fill(&[("b", 4), ("c", 1)]);
        a.merge(&b).expect("same shape");
        let whole = fill(&[("a", 5), ("b", 7), ("c", 1)]);
        assert_eq!(a.output(&kind), whole.output(&kind));
        let Output::TopK(top) = a.output(&kind) else {
            panic!("top k")
        };
        assert_eq!(top[0], (b"b".to_vec(), Estimate::exact(7.0)));
        // A sketch (many distinct keys) merged with an exact state, both
        // ways: the heavy key of the exact side wins, with its name.
        let many: Vec<(String, u32)> = (0..=TOPK_EXACT_KEYS_MAX)
            .map(|i| (format!("k{i}"), 1))
            .collect();
        let many: Vec<(&str, u32)> = many.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        for sketch_first in [true, false] {
            let sketch = fill(&many);
            let exact = fill(&[("heavy", 500), ("a", 2)]);
            let (mut into, from) = if sketch_first {
                (sketch, exact)
            } else {
                (exact, sketch)
            };
            into.merge(&from).expect("same shape");
            let AggState::TopK(top) = &into else {
                unreachable!()
            };
            let counts = &top.counts;
            assert!(matches!(counts, TopCounts::Sketch(_)));
            let Output::TopK(top) = into.output(&kind) else {
                panic!("top k")
            };
            assert_eq!(top[0].0, b"heavy", "sketch first: {sketch_first}");
            assert!(top[0].1.lower <= 500.0 && top[0].1.upper >= 500.0);
        }
    }
}
