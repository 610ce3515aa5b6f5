//! [`HeavyHitters`]: the `k` heaviest keys of a stream, from a Count-Min
//! table and a bounded set of candidate keys (Cormode and Muthukrishnan
//! 2005, section 5.1, with a fixed-size candidate set instead of a
//! threshold).
//!
//! Each insert updates the table and reads the key's new estimate. The
//! candidate set keeps at most `capacity` keys: a key already in it has its
//! stored estimate refreshed; a new key enters while there is room, or
//! replaces the candidate with the smallest stored estimate (the floor) when
//! its own estimate is larger. Keys are 64-bit hashes or ids; the caller maps
//! them back to names.
//!
//! # Guarantee
//!
//! Stored estimates are point estimates from the moment of the key's last
//! insert, so a candidate's stored estimate is at least its true weight. If a
//! key `x` of true weight `f` is missing at the end, then when it was last
//! turned away or evicted, `k = capacity` other keys had stored estimates at
//! least `f`. If each of those is within `eps * N` of its true weight (each
//! holds with probability at least `1 - delta`), their true weights sum to at
//! least `k * (f - eps * N)`, and with `f` itself that is at most `N`:
//!
//! ```text
//! f <= N * (1 + k * eps) / (k + 1)
//! ```
//!
//! So every key heavier than `N * (1 + k * eps) / (k + 1)` is a candidate at
//! the end. With `eps <= 1 / k` that threshold is below `2 * N / k`. The
//! reported estimates carry the usual Count-Min interval.
//!
//! # The interval of a reported count
//!
//! Each [`HeavyHitter::estimate`] is [`CountMin::frequency`]'s: `upper` is
//! the estimate, which never under-counts; `lower = max(0, est - eps N)`
//! holds with probability at least `1 - delta`, and `confidence` says so
//! (0.9933 with the default depth 5), not 0.95. It is a one-sided
//! worst-case guarantee (Markov's inequality on each row), not a
//! calibrated interval: measured over 4,400 reported items (Zipf streams
//! of 20,000 and 100,000 weights over 10^3 and 10^5 keys, one sketch and
//! merges of 10, default conservative update), the true count was inside
//! it every time (coverage 1.0; `tests/calibration.rs`). Heavy keys are
//! over-counted far less than `eps N`, above all with conservative update,
//! where a heavy key's counters rise only with its own weight. A
//! calibrated 95% bound would need the distribution of that over-count,
//! which conservative update makes depend on the stream's order.
//!
//! # Limits
//!
//! `capacity` is at most [`CAPACITY_MAX`]. Merging keeps the `capacity` best
//! of the union of both candidate sets after re-querying the merged table,
//! so merge is commutative (ties break by key), but not associative in
//! general: a key dropped by an inner merge cannot come back. It is
//! associative whenever the union of all candidate sets fits in `capacity`.

use super::wire::{self, Header, Kind};
use super::{CAPACITY_MAX, CountMin, Params, SKETCH};
use crate::hash::U64KeyBuild;
use crate::{Error, Estimate, Result, Sketch};
use std::collections::HashMap;

/// One reported heavy hitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeavyHitter {
    /// The key hash or id given to `insert`.
    pub key: u64,
    /// Its weight, as [`CountMin::frequency`] answers it.
    pub estimate: Estimate,
}

/// The heaviest keys of a stream.
///
/// ```
/// use cardinal_sketch::countmin::{HeavyHitters, Params};
///
/// let mut pages = HeavyHitters::new(Params::default(), 3).unwrap();
/// for i in 0..10_000u64 {
///     let page = if i % 2 == 0 { 7 } else { i }; // page 7 gets half the views
///     pages.insert(page, 1);
/// }
/// let top = pages.top(1);
/// assert_eq!(top[0].key, 7);
/// assert!(top[0].estimate.upper >= 5000.0);
/// ```
#[derive(Debug, Clone)]
pub struct HeavyHitters {
    sketch: CountMin,
    capacity: u32,
    /// `(key, stored estimate)`, at most `capacity`, in no particular order.
    candidates: Vec<(u64, u64)>,
    /// Key to index in `candidates`.
    slots: HashMap<u64, usize, U64KeyBuild>,
    /// Index of the candidate with the smallest stored estimate, when full.
    floor_index: usize,
}

impl PartialEq for HeavyHitters {
    /// Equal tables, capacities and candidate key sets (the encoding's
    /// notion of equality; stored estimates are a cache).
    fn eq(&self, other: &Self) -> bool {
        self.sketch == other.sketch
            && self.capacity == other.capacity
            && self.sorted_keys() == other.sorted_keys()
    }
}

impl Eq for HeavyHitters {}

impl HeavyHitters {
    /// An empty sketch keeping up to `capacity` candidates, `capacity` in
    /// `1..=CAPACITY_MAX`.
    pub fn new(params: Params, capacity: u32) -> Result<Self> {
        Self::check_capacity(capacity)?;
        let sketch = CountMin::new(params)?;
        Ok(Self::with_parts(sketch, capacity))
    }

    fn with_parts(sketch: CountMin, capacity: u32) -> Self {
        assert!(capacity >= 1);
        assert!(capacity <= CAPACITY_MAX);
        let capacity_usize = capacity as usize;
        Self {
            sketch,
            capacity,
            candidates: Vec::with_capacity(capacity_usize),
            slots: HashMap::with_capacity_and_hasher(capacity_usize, U64KeyBuild::default()),
            floor_index: 0,
        }
    }

    fn check_capacity(capacity: u32) -> Result<()> {
        if capacity == 0 || capacity > CAPACITY_MAX {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "capacity",
                value: i64::from(capacity),
                reason: "must be in 1..=CAPACITY_MAX (4096)",
            });
        }
        Ok(())
    }

    /// The underlying Count-Min table.
    pub fn sketch(&self) -> &CountMin {
        &self.sketch
    }

    /// The most candidates kept, `k`.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The total weight inserted, `N`.
    pub fn total_weight(&self) -> u64 {
        self.sketch.total_weight()
    }

    /// Adds `weight` to `key` and updates the candidate set.
    pub fn insert(&mut self, key: u64, weight: u64) {
        let count = self.sketch.insert_then_count(key, weight);
        if let Some(&index) = self.slots.get(&key) {
            debug_assert_eq!(self.candidates[index].0, key);
            self.candidates[index].1 = count;
            if index == self.floor_index {
                self.floor_index = floor_index(&self.candidates);
            }
        } else if self.candidates.len() < self.capacity as usize {
            self.slots.insert(key, self.candidates.len());
            self.candidates.push((key, count));
            self.floor_index = floor_index(&self.candidates);
        } else if count > self.candidates[self.floor_index].1 {
            let (evicted, _) = self.candidates[self.floor_index];
            self.slots.remove(&evicted);
            self.slots.insert(key, self.floor_index);
            self.candidates[self.floor_index] = (key, count);
            self.floor_index = floor_index(&self.candidates);
        }
        debug_assert_eq!(self.slots.len(), self.candidates.len());
        debug_assert!(self.candidates.len() <= self.capacity as usize);
    }

    /// The candidates as the sketch keeps them: `(key, stored estimate)`
    /// in the order it holds them. The encoding keeps only the keys, which
    /// is all [`HeavyHitters::top`] and a merge need; the stored estimates
    /// (each key's count at its last insert) and the order decide which
    /// candidate a later insert evicts, so a sketch resumed with
    /// [`HeavyHitters::from_candidates`] needs them to evict the same.
    pub fn candidates(&self) -> &[(u64, u64)] {
        &self.candidates
    }

    /// The sketch of table `sketch` with `candidates` as
    /// [`HeavyHitters::candidates`] gave them, in that order: one that
    /// inserts and merges on exactly as the one they came from.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for a capacity outside
    /// `1..=CAPACITY_MAX`; [`Error::Malformed`] for more candidates than
    /// the capacity, a key twice, or a stored estimate above the key's
    /// count in the table (counts never decrease, so no sketch stores one).
    pub fn from_candidates(
        sketch: CountMin,
        capacity: u32,
        candidates: &[(u64, u64)],
    ) -> Result<Self> {
        Self::check_capacity(capacity)?;
        if candidates.len() > capacity as usize {
            return Err(wire::malformed(format!(
                "{} candidates exceed the capacity {capacity}",
                candidates.len()
            )));
        }
        let mut heavy = Self::with_parts(sketch, capacity);
        for &(key, stored) in candidates {
            if stored > heavy.sketch.count(key) {
                return Err(wire::malformed(format!(
                    "candidate {key:#x} stores {stored}, above its count {}",
                    heavy.sketch.count(key)
                )));
            }
            if heavy.slots.insert(key, heavy.candidates.len()).is_some() {
                return Err(wire::malformed(format!("candidate {key:#x} appears twice")));
            }
            heavy.candidates.push((key, stored));
        }
        heavy.floor_index = floor_index(&heavy.candidates);
        debug_assert_eq!(heavy.slots.len(), heavy.candidates.len());
        Ok(heavy)
    }

    /// Whether `key` is currently one of the candidates `top` chooses from.
    pub fn is_candidate(&self, key: u64) -> bool {
        self.slots.contains_key(&key)
    }

    /// The weight of any key, from the table.
    pub fn frequency(&self, key: u64) -> Estimate {
        self.sketch.frequency(key)
    }

    /// Up to `k` candidates (at most `capacity`), heaviest first by current
    /// estimate, ties broken by ascending key.
    pub fn top(&self, k: usize) -> Vec<HeavyHitter> {
        let mut ranked = self.ranked();
        ranked.truncate(k);
        ranked
            .into_iter()
            .map(|(key, _)| HeavyHitter {
                key,
                estimate: self.sketch.frequency(key),
            })
            .collect()
    }

    /// Every candidate with its current count, heaviest first, ties by key.
    fn ranked(&self) -> Vec<(u64, u64)> {
        let mut ranked: Vec<(u64, u64)> = self
            .candidates
            .iter()
            .map(|&(key, _)| (key, self.sketch.count(key)))
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked
    }

    fn sorted_keys(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self.candidates.iter().map(|&(key, _)| key).collect();
        keys.sort_unstable();
        keys
    }

    /// Replaces the candidates with `keys` (distinct, at most `capacity`),
    /// storing their current counts.
    fn set_candidates(&mut self, keys: impl IntoIterator<Item = u64>) {
        self.candidates.clear();
        self.slots.clear();
        for key in keys {
            let previous = self.slots.insert(key, self.candidates.len());
            assert!(previous.is_none(), "candidate keys are distinct");
            self.candidates.push((key, self.sketch.count(key)));
        }
        assert!(self.candidates.len() <= self.capacity as usize);
        self.floor_index = floor_index(&self.candidates);
    }
}

/// The index of the smallest stored estimate (the first, on ties); 0 when
/// empty.
fn floor_index(candidates: &[(u64, u64)]) -> usize {
    candidates
        .iter()
        .enumerate()
        .min_by_key(|(_, (_, count))| *count)
        .map_or(0, |(index, _)| index)
}

impl Sketch for HeavyHitters {
    /// All candidates, heaviest first.
    type Estimate = Vec<HeavyHitter>;

    /// Merges the tables, then keeps the `capacity` heaviest keys of both
    /// candidate sets by the merged table's estimates.
    fn merge(&mut self, other: &Self) -> Result<()> {
        if self.capacity != other.capacity {
            return Err(Error::Incompatible {
                sketch: SKETCH,
                reason: format!("capacities differ: {} vs {}", self.capacity, other.capacity),
            });
        }
        self.sketch.merge(&other.sketch)?;
        let mut union = self.sorted_keys();
        union.extend(other.candidates.iter().map(|&(key, _)| key));
        union.sort_unstable();
        union.dedup();
        let mut ranked: Vec<(u64, u64)> = union
            .into_iter()
            .map(|key| (key, self.sketch.count(key)))
            .collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(self.capacity as usize);
        self.set_candidates(ranked.into_iter().map(|(key, _)| key));
        Ok(())
    }

    fn estimate(&self) -> Vec<HeavyHitter> {
        self.top(self.capacity as usize)
    }

    fn encode(&self) -> Vec<u8> {
        let keys = self.sorted_keys();
        let mut out = Vec::with_capacity(
            wire::HEADER_BYTES + self.sketch.counters.len() * 8 + 8 + keys.len() * 8,
        );
        self.sketch
            .header(Kind::HeavyHitters, self.capacity)
            .write(&mut out);
        self.sketch.write_body(&mut out);
        let key_count = u32::try_from(keys.len()).expect("at most CAPACITY_MAX");
        out.extend_from_slice(&key_count.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for key in keys {
            out.extend_from_slice(&key.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let (header, body) = Header::read(bytes, Kind::HeavyHitters)?;
        Self::check_capacity(header.kind_param)?;
        let counters_bytes = header.params.counter_count().saturating_mul(8);
        // The candidate count sits after the counters: check that much first.
        let counters_len = usize::try_from(counters_bytes)
            .ok()
            .filter(|&len| len + 8 <= body.len());
        let Some(counters_len) = counters_len else {
            return Err(Error::Truncated {
                sketch: SKETCH,
                expected: wire::HEADER_BYTES as u64 + counters_bytes.saturating_add(8),
                found: bytes.len() as u64,
            });
        };
        let (cells, tail) = body.split_at(counters_len);
        let key_count = wire::read_u32(&tail[0..4]);
        if wire::read_u32(&tail[4..8]) != 0 {
            return Err(wire::malformed(
                "reserved bytes after the counters are not zero".to_string(),
            ));
        }
        if key_count > header.kind_param {
            return Err(wire::malformed(format!(
                "{key_count} candidates exceed the capacity {}",
                header.kind_param
            )));
        }
        let keys_bytes = u64::from(key_count) * 8;
        wire::expect_body_len(body, counters_bytes + 8 + keys_bytes)?;
        let keys: Vec<u64> = tail[8..].chunks_exact(8).map(wire::read_u64).collect();
        if keys.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(wire::malformed(
                "candidate keys are not strictly ascending".to_string(),
            ));
        }
        let sketch = CountMin::from_parts(
            header.params,
            wire::read_counters(cells),
            header.total_weight,
        )?;
        let mut heavy = Self::with_parts(sketch, header.kind_param);
        heavy.set_candidates(keys);
        Ok(heavy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::countmin::Update;

    fn small(capacity: u32) -> HeavyHitters {
        HeavyHitters::new(
            Params {
                depth: 4,
                width: 128,
                update: Update::Conservative,
                seed: 3,
            },
            capacity,
        )
        .expect("valid")
    }

    #[test]
    fn finds_the_heavy_keys_among_noise() {
        let mut heavy = small(4);
        for i in 0..20_000u64 {
            let key = match i % 10 {
                0..=2 => 1_000,
                3 | 4 => 2_000,
                5 => 3_000,
                _ => 10_000 + i,
            };
            heavy.insert(key, 1);
        }
        let keys: Vec<u64> = heavy.top(3).iter().map(|h| h.key).collect();
        assert_eq!(keys, [1_000, 2_000, 3_000]);
        assert!(heavy.top(3)[0].estimate.upper >= 6_000.0);
    }

    #[test]
    fn candidate_set_never_exceeds_capacity() {
        let mut heavy = small(8);
        for key in 0..1000u64 {
            heavy.insert(key, key % 13);
            assert!(heavy.candidates.len() <= 8);
            assert_eq!(heavy.slots.len(), heavy.candidates.len());
        }
        assert_eq!(heavy.top(100).len(), 8);
    }

    #[test]
    fn capacity_limits_are_enforced() {
        assert!(HeavyHitters::new(Params::default(), 0).is_err());
        assert!(HeavyHitters::new(Params::default(), CAPACITY_MAX + 1).is_err());
        assert!(HeavyHitters::new(Params::default(), CAPACITY_MAX).is_ok());
    }

    #[test]
    fn merge_keeps_the_heaviest_of_both_sides() {
        let mut left = small(2);
        let mut right = small(2);
        for _ in 0..50 {
            left.insert(1, 1);
            right.insert(2, 1);
        }
        left.insert(3, 40);
        right.insert(3, 40);
        left.merge(&right).expect("same params");
        let keys: Vec<u64> = left.top(2).iter().map(|h| h.key).collect();
        assert_eq!(keys, [3, 1]); // 3 has 80; 1 and 2 tie at 50, the smaller key wins
        assert!(left.merge(&small(3)).is_err());
    }

    #[test]
    fn decode_rejects_unsorted_or_too_many_candidates() {
        let mut heavy = small(2);
        heavy.insert(5, 1);
        heavy.insert(9, 1);
        let bytes = heavy.encode();
        let keys_at = bytes.len() - 16;
        let mut swapped = bytes.clone();
        swapped[keys_at..keys_at + 8].copy_from_slice(&9u64.to_le_bytes());
        swapped[keys_at + 8..].copy_from_slice(&5u64.to_le_bytes());
        assert!(matches!(
            HeavyHitters::decode(&swapped),
            Err(Error::Malformed { .. })
        ));
        let mut shrunk = bytes.clone();
        shrunk[12] = 1; // capacity 1 < 2 candidates
        assert!(matches!(
            HeavyHitters::decode(&shrunk),
            Err(Error::Malformed { .. })
        ));
        assert_eq!(HeavyHitters::decode(&bytes).expect("valid"), heavy);
    }
}
