//! [`Theta`]: distinct counts of set expressions over many audiences.
//!
//! HyperLogLog answers `|A ∪ B|` well but `|A ∩ B ∩ C|` and `|A \ B|` badly.
//! Theta sketches (Dasgupta, Lang, Rhodes and Thaler, "A Framework for
//! Estimating Stream Expression Cardinalities", ICDT 2016) keep the hashes
//! below a threshold `theta`, a uniform sample of the distinct items, and so
//! compose: the intersection of two samples taken at the same `theta` is a
//! sample of the intersection. This module wraps Apache DataSketches' Theta
//! implementation (`datasketches::theta`, the official Rust port).
//!
//! Notation: `k = 2^lg_k` is the nominal number of hashes kept; `theta` in
//! (0, 1] is the sampling fraction (stored as a 63-bit integer threshold,
//! `theta64 / 2^63`); an estimate is `retained / theta`.
//!
//! # Hashing
//!
//! Callers hash each item once with [`crate::hash`] (the engine's one hash
//! per event) and pass the `u64` to [`Theta::insert`]. DataSketches hashes
//! that `u64` again, as the 8 little-endian bytes through MurmurHash3 x64_128
//! with its default seed 9001, keeping 63 bits. The second hash is cheap
//! (~10 ns) and is what makes our images interchangeable with Java's and
//! C++'s: a Java `UpdateSketch.update(long)` of the same 64 bits lands on the
//! same hash. Sketches built with other seeds are rejected by `decode`.
//!
//! # Error
//!
//! Bounds are DataSketches' binomial bounds at 2 standard deviations, a
//! two-sided confidence of ~95.4% ([`CONFIDENCE`]), the closest choice
//! DataSketches offers to the crate's 95%. Measured, they mean it: over
//! 4,000 unions of 1 and 10 sketches (lg_k 12) of 10^4 to 10^5 distinct
//! values they covered the true count 0.960 of the time (0.954 to 0.966
//! per size; `cargo test -p cardinal-sketch --test calibration theta --
//! --nocapture`, 2026-11-28).
//!
//! - A single sketch or a union keeps about `k` hashes: relative standard
//!   error about `1 / sqrt(k)` (1.6% at lg_k 12).
//! - An intersection or difference keeps only the hashes of the result that
//!   fall below the smallest input `theta`, which the largest input sets:
//!   `theta ≈ k / max(|A|, |B|)`. So it keeps about
//!   `k |A ∩ B| / max(|A|, |B|)` hashes and its relative standard error is
//!   about `sqrt(max(|A|, |B|) / (k |A ∩ B|))`. Worked example: lg_k 12,
//!   `|A| = 10^7`, `|A ∩ B| = 10^5` gives `sqrt(10^7 / (4096 * 10^5))`,
//!   15.6%. Small intersections of large sets need a large `k`, and
//!   [`crate::Estimate::below_detection_limit`] says when the answer is noise.
//!
//! | lg_k | k | RSE of a union | retained bytes, at most |
//! |---|---|---|---|
//! | 10 | 1024 | 3.1% | 8 KiB |
//! | 12 | 4096 | 1.6% | 32 KiB |
//! | 16 | 65536 | 0.4% | 512 KiB |
//!
//! (RSE from `1 / sqrt(k)`; bytes are `k` hashes of 8 bytes in an encoded
//! image, twice that while a sketch is being filled.)
//!
//! # Representation
//!
//! DataSketches separates the mutable update sketch (a hash table) from the
//! immutable compact sketch (a sorted array), and cannot turn the latter back
//! into the former. A [`Theta`] therefore holds both: the hashes inserted
//! since the last merge or decode in an update sketch, and everything merged
//! or decoded in an ordered compact sketch. Reads take their union, trimmed
//! to `k` hashes.
//!
//! # Wire format
//!
//! `encode` writes DataSketches' compact Theta image, serial version 3,
//! ordered, readable by `CompactSketch.heapify` (Java) and
//! `compact_theta_sketch::deserialize` (C++). Integers are little-endian:
//!
//! ```text
//! byte  0        1        2        3..5     5       6..8
//!      | preLongs | serVer=3 | family=3 | unused | flags | seedHash u16 |  8 bytes
//!   preLongs 2 and 3 add:  | retained u32 | unused u32 |                  8 bytes
//!   preLongs 3 adds:       | theta64 u64 |                               8 bytes
//!   then:                  | retained hashes u64, ascending |
//! ```
//!
//! preLongs is 1 for an empty sketch or a single hash in exact mode, 2 in
//! exact mode, 3 in estimation mode (theta < 1). flags: bit 1 read-only,
//! bit 2 empty, bit 3 compact, bit 4 ordered. An empty sketch is
//! `01 03 03 00 00 1e 00 00`. `lg_k` is not part of the format: `decode`
//! picks one (see [`Theta::decode_with_lg_k`]).
//!
//! `decode` also reads serial versions 1 and 2 (old Java images) and 4 (the
//! bit-packed form of `serialize_compressed`), ordered or not.

// Maintainer notes.
//
// Decoding defence. `CompactThetaSketch::deserialize` (0.6.0) checks the
// payload length of versions 1 to 3 before allocating (8 bytes per hash),
// but version 4 allocates 8 bytes per entry for entries that may take one
// bit each: 64 times the input. It also accepts images that break the
// invariants its set operations rely on: an "ordered" flag over unsorted
// hashes (unions and differences then stop early and drop hashes), and
// duplicate hashes (estimates count them twice; version 4 produces them from
// zero deltas). So `decode` pre-reads the version 4 count against
// RETAINED_MAX, and post-checks the count, sortedness and uniqueness,
// sorting unordered images itself. Fuzzing found no panic in the
// deserializer or in set operations on what `decode` accepts.
//
// Merge laws. Unions trim to the k smallest hashes and set theta to the
// (k+1)-th, which does not depend on the order of the inputs, so with equal
// lg_k merges commute and associate byte for byte; `tests/theta.rs` checks
// it. Keep every read going through `compact()` so the trimming is uniform.

use datasketches::common::NumStdDev;
use datasketches::theta::{
    CompactThetaSketch, ThetaANotB, ThetaIntersection, ThetaJaccardSimilarity, ThetaSketch,
    ThetaSketchBuilder, ThetaUnionBuilder,
};

use crate::{Error, Estimate, Result, Sketch};

const SKETCH: &str = "theta";

/// Smallest `lg_k` (DataSketches' minimum): k = 32, 18% RSE.
pub const LG_K_MIN: u8 = 5;

/// Largest `lg_k` cardinal accepts: k = 2^20 hashes, 8 MiB encoded and up to
/// 16 MiB while filling, already 0.1% RSE. DataSketches goes to 26 (1 GiB per
/// sketch), more than a rollup cell should ever hold.
pub const LG_K_MAX: u8 = 20;

/// The default `lg_k` (DataSketches' default): k = 4096, 1.6% RSE.
pub const LG_K_DEFAULT: u8 = 12;

/// Most hashes a decoded image may hold: `2^(LG_K_MAX + 1)`, what an update
/// sketch at [`LG_K_MAX`] can hold before it trims (DataSketches' compact
/// images of update sketches are not trimmed to k). Larger images are
/// rejected with [`Error::LimitExceeded`].
pub const RETAINED_MAX: usize = 1 << (LG_K_MAX + 1);

/// Two-sided confidence of the bounds: 2 standard deviations of a normal,
/// `erf(2 / sqrt(2))`.
pub const CONFIDENCE: f64 = 0.954_499_736_103_641_6;

/// Standard deviations DataSketches' bounds are asked for.
const NUM_STD_DEV: NumStdDev = NumStdDev::Two;

/// Header bytes every compact image starts with.
const PREAMBLE_BYTES: usize = 8;

/// A Theta sketch of a set of 64-bit hashes, supporting unions,
/// intersections and differences of any number of sets, with bounds.
///
/// ```
/// use cardinal_sketch::{hash, theta::Theta, Sketch};
///
/// let mut a = Theta::default();
/// let mut b = Theta::default();
/// for id in 0..3000u64 {
///     a.insert(hash::user_id(id));
/// }
/// for id in 2000..5000u64 {
///     b.insert(hash::user_id(id));
/// }
/// let both = Theta::intersection(&[&a, &b]).unwrap();
/// assert_eq!(both.estimate().value, 1000.0); // exact below k = 4096
/// let only_a = a.a_not_b(&b).unwrap();
/// assert_eq!(only_a.estimate().value, 2000.0);
/// ```
#[derive(Debug)]
pub struct Theta {
    lg_k: u8,
    /// Hashes inserted since the last merge or decode.
    updates: ThetaSketch,
    /// Everything merged or decoded: ordered, sorted, no duplicates.
    merged: CompactThetaSketch,
}

impl Default for Theta {
    /// An empty sketch with `lg_k` = [`LG_K_DEFAULT`].
    fn default() -> Self {
        Self::new(LG_K_DEFAULT).expect("LG_K_DEFAULT is within LG_K_MIN..=LG_K_MAX")
    }
}

impl Clone for Theta {
    fn clone(&self) -> Self {
        // ThetaSketch is not Clone: fold the updates into the compact part.
        Self::from_compact(self.lg_k, self.compact())
    }
}

impl Theta {
    /// An empty sketch keeping `k = 2^lg_k` hashes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] if `lg_k` is outside
    /// [`LG_K_MIN`]..=[`LG_K_MAX`].
    pub fn new(lg_k: u8) -> Result<Self> {
        if !(LG_K_MIN..=LG_K_MAX).contains(&lg_k) {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "lg_k",
                value: i64::from(lg_k),
                reason: "cardinal supports 5..=20",
            });
        }
        let updates = update_sketch(lg_k);
        let merged = updates.compact(true);
        assert!(merged.is_empty());
        Ok(Self {
            lg_k,
            updates,
            merged,
        })
    }

    /// Adds one item, given as its [`crate::hash`] value.
    pub fn insert(&mut self, hash: u64) {
        self.updates.update(hash);
        debug_assert!(!self.updates.is_empty());
    }

    /// The configured `lg_k`.
    pub fn lg_k(&self) -> u8 {
        self.lg_k
    }

    /// Whether nothing was ever inserted or merged in.
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty() && self.merged.is_empty()
    }

    /// The sampling fraction `theta` in (0, 1]; 1 means exact.
    pub fn theta(&self) -> f64 {
        self.compact().theta()
    }

    /// Heap bytes the sketch holds, boxed as a rollup keeps it: this
    /// struct, the update table (by its current size, which grows to
    /// `2^(lg_k + 1)` slots) and the merged hashes (by capacity). Cheap:
    /// nothing is compacted to measure it.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.updates.estimated_size() + self.merged.estimated_size()
    }

    /// The number of hashes the sketch keeps.
    pub fn retained(&self) -> usize {
        self.compact().num_retained()
    }

    /// The union of `sketches`, keeping `2^lg_k` hashes for the largest
    /// `lg_k` among them. An empty slice gives an empty sketch.
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] if DataSketches refuses an input (it cannot
    /// for sketches of this module, which all share one seed).
    pub fn union(sketches: &[&Theta]) -> Result<Theta> {
        let lg_k = sketches
            .iter()
            .map(|s| s.lg_k)
            .max()
            .unwrap_or(LG_K_DEFAULT);
        let compacts: Vec<CompactThetaSketch> = sketches.iter().map(|s| s.compact()).collect();
        let result = union_compacts(lg_k, compacts.iter())?;
        Ok(Self::from_compact(lg_k, result))
    }

    /// The intersection of `sketches` (`A ∩ B ∩ C ...`). The result keeps the
    /// largest `lg_k` among them for later merges. See the module docs for
    /// its error, which grows as the intersection shrinks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidParameter`] for an empty slice (the intersection of
    /// no sets is the universe, which no sketch represents);
    /// [`Error::Incompatible`] if DataSketches refuses an input.
    pub fn intersection(sketches: &[&Theta]) -> Result<Theta> {
        let Some(lg_k) = sketches.iter().map(|s| s.lg_k).max() else {
            return Err(Error::InvalidParameter {
                sketch: SKETCH,
                name: "sketches",
                value: 0,
                reason: "an intersection needs at least one sketch",
            });
        };
        let mut intersection = ThetaIntersection::default();
        for sketch in sketches {
            intersection
                .update(&sketch.compact())
                .map_err(incompatible)?;
        }
        assert!(intersection.has_result());
        let result = intersection
            .to_sketch(true)
            .expect("the intersection was updated");
        Ok(Self::from_compact(lg_k, result))
    }

    /// `self \ other`: the items of `self` not in `other`, with this
    /// sketch's `lg_k`. Its error behaves like an intersection's.
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] if DataSketches refuses an input.
    pub fn a_not_b(&self, other: &Theta) -> Result<Theta> {
        let (a, b) = (self.compact(), other.compact());
        let result = ThetaANotB::default()
            .compute(&a, &b, true)
            .map_err(incompatible)?;
        assert!(result.num_retained() <= a.num_retained());
        Ok(Self::from_compact(self.lg_k, result))
    }

    /// The Jaccard similarity `|A ∩ B| / |A ∪ B|` with bounds at
    /// [`CONFIDENCE`] (DataSketches' 2-standard-deviation bounds). Two empty
    /// sketches are identical (1); one empty one shares nothing (0).
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] if DataSketches refuses an input.
    pub fn jaccard(&self, other: &Theta) -> Result<Estimate> {
        let (a, b) = (self.compact(), other.compact());
        let j = ThetaJaccardSimilarity::default()
            .compute(&a, &b)
            .map_err(incompatible)?;
        let exact = j.lower_bound() == j.upper_bound();
        Ok(Estimate {
            value: j.estimate(),
            lower: j.lower_bound(),
            upper: j.upper_bound(),
            confidence: if exact { 1.0 } else { CONFIDENCE },
        })
    }

    /// [`Sketch::decode`] with a chosen `lg_k`: the format does not record
    /// it, and it sets how many hashes later inserts and merges keep. A
    /// rollup that knows its configured `lg_k` should use this.
    ///
    /// # Errors
    ///
    /// As [`Sketch::decode`], and [`Error::InvalidParameter`] for an `lg_k`
    /// that [`Theta::new`] rejects.
    pub fn decode_with_lg_k(bytes: &[u8], lg_k: u8) -> Result<Self> {
        let mut theta = Self::decode(bytes)?;
        let empty = Self::new(lg_k)?;
        theta.lg_k = empty.lg_k;
        theta.updates = empty.updates;
        Ok(theta)
    }

    fn from_compact(lg_k: u8, merged: CompactThetaSketch) -> Self {
        assert!((LG_K_MIN..=LG_K_MAX).contains(&lg_k));
        debug_assert!(is_strictly_ascending(&merged));
        Self {
            lg_k,
            updates: update_sketch(lg_k),
            merged,
        }
    }

    /// Everything the sketch holds, as one ordered compact sketch trimmed to
    /// `k` hashes (unless nothing was inserted since the last merge, when it
    /// is the merged part as it stands).
    fn compact(&self) -> CompactThetaSketch {
        if self.updates.is_empty() {
            return self.merged.clone();
        }
        let updates = self.updates.compact(true);
        union_compacts(self.lg_k, [&self.merged, &updates].into_iter())
            .expect("sketches of this module share DataSketches' default seed")
    }
}

impl Sketch for Theta {
    type Estimate = Estimate;

    /// Folds `other` in (a union), keeping this sketch's `lg_k`.
    ///
    /// # Errors
    ///
    /// [`Error::Incompatible`] if DataSketches refuses `other`; `self` is
    /// unchanged.
    fn merge(&mut self, other: &Self) -> Result<()> {
        let (mine, theirs) = (self.compact(), other.compact());
        let merged = union_compacts(self.lg_k, [&mine, &theirs].into_iter())?;
        *self = Self::from_compact(self.lg_k, merged);
        Ok(())
    }

    /// The distinct count with bounds at [`CONFIDENCE`] (~95.4%); exact
    /// (confidence 1) while `theta` is 1.
    fn estimate(&self) -> Estimate {
        let compact = self.compact();
        let value = compact.estimate();
        if !compact.is_estimation_mode() {
            return Estimate::exact(value);
        }
        let lower = compact.lower_bound(NUM_STD_DEV);
        let upper = compact.upper_bound(NUM_STD_DEV);
        assert!(lower <= value);
        assert!(value <= upper);
        Estimate {
            value,
            lower,
            upper,
            confidence: CONFIDENCE,
        }
    }

    /// DataSketches' compact Theta image, serial version 3, ordered (see the
    /// module docs).
    fn encode(&self) -> Vec<u8> {
        let bytes = self.compact().serialize();
        assert!(bytes.len() >= PREAMBLE_BYTES);
        bytes
    }

    /// Reads a DataSketches compact Theta image (serial versions 1 to 4,
    /// ordered or not) built with the default seed, from any implementation.
    /// `lg_k` becomes [`LG_K_DEFAULT`], or more if the image holds more
    /// hashes (see [`Theta::decode_with_lg_k`]). Never panics; allocates at
    /// most about the input length.
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`] for fewer than 8 bytes, [`Error::LimitExceeded`]
    /// for more than [`RETAINED_MAX`] hashes, [`Error::Malformed`] for what
    /// DataSketches rejects (including a different seed) and for duplicate
    /// or mis-ordered hashes.
    fn decode(bytes: &[u8]) -> Result<Self> {
        check_packed_count(bytes)?;
        let compact = CompactThetaSketch::deserialize(bytes).map_err(|error| Error::Malformed {
            sketch: SKETCH,
            reason: error.to_string(),
        })?;
        let retained = compact.num_retained();
        if retained > RETAINED_MAX {
            return Err(retained_limit(retained));
        }
        let compact = if compact.is_ordered() {
            compact
        } else {
            // Sort a copy: a difference with an empty sketch does exactly that.
            let empty = update_sketch(LG_K_MIN).compact(true);
            ThetaANotB::default()
                .compute(&compact, &empty, true)
                .map_err(incompatible)?
        };
        if !is_strictly_ascending(&compact) {
            return Err(Error::Malformed {
                sketch: SKETCH,
                reason: "retained hashes are not strictly ascending (duplicates or an \
                         ordered flag over unsorted hashes)"
                    .to_string(),
            });
        }
        let lg_k = lg_k_for(compact.num_retained());
        Ok(Self::from_compact(lg_k, compact))
    }
}

/// An empty DataSketches update sketch with `lg_k` and the default seed.
fn update_sketch(lg_k: u8) -> ThetaSketch {
    assert!((LG_K_MIN..=LG_K_MAX).contains(&lg_k));
    ThetaSketchBuilder::default()
        .lg_k(lg_k)
        .build()
        .expect("lg_k is in DataSketches' range and the default seed is valid")
}

/// The union of compact sketches, trimmed to `2^lg_k` hashes, ordered.
fn union_compacts<'a>(
    lg_k: u8,
    compacts: impl Iterator<Item = &'a CompactThetaSketch>,
) -> Result<CompactThetaSketch> {
    assert!((LG_K_MIN..=LG_K_MAX).contains(&lg_k));
    let mut union = ThetaUnionBuilder::default()
        .lg_k(lg_k)
        .build()
        .expect("lg_k is in DataSketches' range and the default seed is valid");
    for compact in compacts {
        union.update(compact).map_err(incompatible)?;
    }
    let result = union.to_sketch(true);
    assert!(result.num_retained() <= 1 << lg_k);
    Ok(result)
}

/// The smallest `lg_k` at or above [`LG_K_DEFAULT`] whose `k` holds
/// `retained` hashes, capped at [`LG_K_MAX`].
fn lg_k_for(retained: usize) -> u8 {
    let mut lg_k = LG_K_DEFAULT;
    while lg_k < LG_K_MAX && (1usize << lg_k) < retained {
        lg_k += 1;
    }
    lg_k
}

fn is_strictly_ascending(compact: &CompactThetaSketch) -> bool {
    let hashes: Vec<u64> = compact.iter().map(|entry| entry.hash()).collect();
    hashes.windows(2).all(|pair| pair[0] < pair[1])
}

fn incompatible(error: datasketches::error::Error) -> Error {
    Error::Incompatible {
        sketch: SKETCH,
        reason: error.to_string(),
    }
}

fn retained_limit(retained: usize) -> Error {
    Error::LimitExceeded {
        sketch: SKETCH,
        limit: "RETAINED_MAX",
        max: RETAINED_MAX as u64,
        found: u64::try_from(retained).unwrap_or(u64::MAX),
    }
}

/// Checks the entry count of a bit-packed (serial version 4) image against
/// [`RETAINED_MAX`] before DataSketches allocates 8 bytes per entry.
///
/// Version 4 layout: `| preLongs | 4 | 3 | entryBits | countBytes | flags |
/// seedHash u16 |`, then `theta64 u64` if preLongs > 1, then the count in
/// `countBytes` little-endian bytes, then the packed deltas.
fn check_packed_count(bytes: &[u8]) -> Result<()> {
    if bytes.len() < PREAMBLE_BYTES {
        return Err(Error::Truncated {
            sketch: SKETCH,
            expected: PREAMBLE_BYTES as u64,
            found: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
        });
    }
    if bytes[1] != 4 {
        return Ok(());
    }
    let count_offset = if bytes[0] > 1 {
        PREAMBLE_BYTES + 8
    } else {
        PREAMBLE_BYTES
    };
    let count_bytes = usize::from(bytes[4]);
    if count_bytes > 4 {
        // DataSketches rejects this with its own message.
        return Ok(());
    }
    let Some(count_le) = bytes.get(count_offset..count_offset + count_bytes) else {
        return Ok(());
    };
    let count = count_le
        .iter()
        .rev()
        .fold(0usize, |count, &byte| (count << 8) | usize::from(byte));
    if count > RETAINED_MAX {
        return Err(retained_limit(count));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_lg_k() {
        assert!(Theta::new(LG_K_MIN - 1).is_err());
        assert!(Theta::new(LG_K_MAX + 1).is_err());
        assert!(Theta::new(LG_K_MIN).is_ok());
        assert_eq!(Theta::default().lg_k(), 12);
    }

    #[test]
    fn empty_is_exact_zero() {
        let t = Theta::default();
        assert!(t.is_empty());
        assert_eq!(t.estimate(), Estimate::exact(0.0));
        assert_eq!(t.encode(), [1, 3, 3, 0, 0, 0x1e, 0, 0]);
    }

    #[test]
    fn exact_mode_counts_distinct() {
        let mut t = Theta::default();
        for i in 0..100u64 {
            t.insert(crate::hash::user_id(i % 50));
        }
        assert_eq!(t.estimate(), Estimate::exact(50.0));
    }

    #[test]
    fn estimation_mode_has_bounds() {
        let mut t = Theta::new(8).expect("valid lg_k");
        for i in 0..10_000u64 {
            t.insert(crate::hash::user_id(i));
        }
        let e = t.estimate();
        assert!(e.lower < e.value && e.value < e.upper);
        assert_eq!(e.confidence, CONFIDENCE);
        assert!(e.lower <= 10_000.0 && 10_000.0 <= e.upper, "{e:?}");
        assert!(t.retained() <= 256);
    }

    #[test]
    fn intersection_needs_a_sketch() {
        assert!(matches!(
            Theta::intersection(&[]),
            Err(Error::InvalidParameter { .. })
        ));
    }

    #[test]
    fn union_of_nothing_is_empty() {
        assert!(Theta::union(&[]).expect("empty union").is_empty());
    }

    #[test]
    fn jaccard_of_halves() {
        let (mut a, mut b) = (Theta::default(), Theta::default());
        for i in 0..200u64 {
            a.insert(crate::hash::user_id(i));
            b.insert(crate::hash::user_id(i + 100));
        }
        let j = a.jaccard(&b).expect("same seed");
        assert!((j.value - 100.0 / 300.0).abs() < 1e-12);
        assert!(j.is_exact());
    }

    #[test]
    fn decode_sorts_unordered_images() {
        let mut t = Theta::default();
        for i in 0..100u64 {
            t.insert(crate::hash::user_id(i));
        }
        let unordered = t.updates.compact(false).serialize();
        let back = Theta::decode(&unordered).expect("unordered image decodes");
        assert_eq!(back.encode(), t.encode());
    }

    #[test]
    fn decode_rejects_duplicates() {
        let mut t = Theta::default();
        t.insert(1);
        t.insert(2);
        let mut bytes = t.encode();
        assert_eq!(bytes.len(), 32);
        let first: [u8; 8] = bytes[16..24].try_into().expect("8 bytes");
        bytes[24..32].copy_from_slice(&first);
        assert!(matches!(
            Theta::decode(&bytes),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn decode_rejects_huge_packed_count() {
        // Version 4, exact mode, 1-bit entries, a 4-byte count of 2^31.
        let bytes = [1, 4, 3, 1, 4, 0x1a, 0xcc, 0x93, 0, 0, 0, 0x80, 0xff, 0xff];
        assert!(matches!(
            Theta::decode(&bytes),
            Err(Error::LimitExceeded { .. })
        ));
    }

    #[test]
    fn lg_k_for_grows_with_retained() {
        assert_eq!(lg_k_for(0), LG_K_DEFAULT);
        assert_eq!(lg_k_for(4096), 12);
        assert_eq!(lg_k_for(4097), 13);
        assert_eq!(lg_k_for(usize::MAX), LG_K_MAX);
    }
}
