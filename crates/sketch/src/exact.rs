//! [`ExactSet`]: exact sets of 64-bit ids, compressed (Roaring).
//!
//! When a rollup cell is small enough, or an answer must be exact (billing,
//! audits, the ground truth the sketches are tested against), cardinal keeps
//! the ids themselves in a Roaring bitmap (Chambi, Lemire, Kaser and Godin,
//! "Better bitmap performance with Roaring bitmaps", Software: Practice and
//! Experience 46(5), 2016; Lemire et al., "Consistently faster and smaller
//! compressed bitmaps with Roaring", SPE 46(11), 2016). This wraps the
//! pure-Rust `roaring::RoaringTreemap`, a sorted map from the high 32 bits of
//! each id to a 32-bit Roaring bitmap of the low 32 bits. A 32-bit bitmap in
//! turn splits its values by their high 16 bits into containers of up to
//! 2^16 values, each stored as the cheapest of:
//!
//! | container | when | bytes |
//! |---|---|---|
//! | array | at most 4096 values | 2 per value |
//! | bitmap | more than 4096 values | 8192 |
//! | run | runs of consecutive values | 2 + 4 per run |
//!
//! so a set costs between ~0.0001 and 2 bytes per id, plus 4 bytes per used
//! 2^32 range.
//!
//! # Wire format
//!
//! `encode` writes the portable 64-bit Roaring format of the Roaring format
//! specification (<https://github.com/RoaringBitmap/RoaringFormatSpec>,
//! "Extension for 64-bit implementations"), the layout CRoaring's
//! `Roaring64Map::write(portable = true)` and Java's
//! `Roaring64NavigableMap` in portable mode share. All integers are
//! little-endian:
//!
//! ```text
//! | buckets u64 |                                                     8 bytes
//! then per bucket, keys strictly ascending:
//! | key u32 (high 32 bits of the ids) | 32-bit portable bitmap ... |
//!
//! 32-bit portable bitmap, with run containers (cookie 12347):
//! | cookie u16 = 12347 | containers - 1 u16 |                         4 bytes
//! | run flags: 1 bit per container, ceil(containers / 8) bytes |
//! | per container: | key u16 | cardinality - 1 u16 |                 4 bytes each
//! | per container: | offset u32 |          (only if containers >= 4) 4 bytes each
//! | container payloads, in key order |
//!
//! 32-bit portable bitmap, without run containers (cookie 12346):
//! | cookie u32 = 12346 | containers u32 |                             8 bytes
//! | per container: | key u16 | cardinality - 1 u16 |                 4 bytes each
//! | per container: | offset u32 |                                    4 bytes each
//! | container payloads, in key order |
//!
//! payloads: array  | value u16 | x cardinality
//!           bitmap | word u64  | x 1024
//!           run    | runs u16 | (start u16, length - 1 u16) x runs |
//! ```
//!
//! Worked example: the set {1, 2^32 + 5} is two buckets, each one array
//! container holding one value:
//!
//! ```text
//! 02 00 00 00 00 00 00 00                      2 buckets
//! 00 00 00 00  3a 30 00 00  01 00 00 00        key 0, cookie 12346, 1 container
//!              00 00 00 00  10 00 00 00        key 0, card 1; offset 16
//!              01 00                           value 1
//! 01 00 00 00  3a 30 00 00  01 00 00 00  00 00 00 00  10 00 00 00  05 00
//! ```
//!
//! roaring-rs writes the bucket count as a u64 and each bucket's key as a
//! u32 followed by a standard 32-bit bitmap, which is exactly this layout
//! (`roaring::treemap::serialization`, 0.12.0).

// Maintainer notes.
//
// Decoding defence. `RoaringTreemap::deserialize_from` (0.12.0) loops over a
// u64 bucket count read from the input, and for each bucket allocates from
// header fields before it knows the bytes exist: up to 65536 container
// descriptions and offsets (512 KiB) and a 65536-container Vec (~2 MiB),
// 8 KiB per bitmap container and 256 KiB per run container, all from a
// header of a few bytes. It also accepts duplicate bucket keys (the last
// wins, so a re-encode is smaller than the input), keys out of order, and
// empty buckets, none of which the format allows. `validate` walks the
// layout first, without allocating, and checks every count against the
// bytes that remain, so by the time roaring allocates, each allocation is
// backed by input of at least an eighth of its size. Bucket keys must be
// strictly ascending and buckets non-empty.
//
// If roaring's format changes (it has not since 0.5), the pinned byte
// example in the tests fails first.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use roaring::RoaringTreemap;

use crate::{Error, Estimate, Result, Sketch};

const SKETCH: &str = "exact";

/// Most containers in one 32-bit bitmap: one per value of the high 16 bits
/// (the format stores the count in 16 bits, minus one, or rejects more).
pub const CONTAINERS_MAX: usize = 1 << 16;

/// Most values an array container holds before the format switches it to a
/// bitmap container (Roaring format specification).
pub const ARRAY_VALUES_MAX: usize = 4096;

/// Cookie of a 32-bit bitmap with run containers (low 16 bits).
const COOKIE_RUNS: u16 = 12347;
/// Cookie of a 32-bit bitmap without run containers (all 32 bits).
const COOKIE_NO_RUNS: u32 = 12346;
/// Bytes of a bitmap container's payload: 2^16 bits.
const BITMAP_CONTAINER_BYTES: usize = 8192;
/// With run containers, offsets are written only from this many containers.
const OFFSETS_CONTAINERS_MIN: usize = 4;

/// An exact set of `u64` ids with set algebra, in a compressed bitmap
/// when its ids are dense enough for one, else in a hash set.
///
/// Roaring compresses ids that share their high bits (user numbers, row
/// ids). Ids spread over the whole `u64` range (hashed cookies, the
/// hashes of text) share nothing: `RoaringTreemap` then spends a bucket, a
/// container and three allocations on each id, ~250 bytes and ~700 ns an
/// insert. So a set starts as a hash set of its ids (~16 bytes each) and
/// moves to Roaring, once and for good, when a Roaring image of its ids
/// would take under half the memory ([`ExactSet::insert`] checks at each
/// power of two from 64 ids to 4,096, then at each power of four). Either
/// way the set, its algebra and its bytes ([`Sketch::encode`], the
/// portable Roaring format below) are the same.
///
/// ```
/// use cardinal_sketch::{exact::ExactSet, Sketch};
///
/// let mut a = ExactSet::new();
/// let mut b = ExactSet::new();
/// for id in 0..100u64 {
///     a.insert(id);
///     b.insert(id + 50);
/// }
/// assert_eq!(a.intersection(&b).len(), 50);
/// assert_eq!(a.union(&b).estimate().value, 150.0);
/// let bytes = a.encode();
/// assert_eq!(ExactSet::decode(&bytes).unwrap(), a);
/// ```
#[derive(Debug, Clone)]
pub struct ExactSet {
    ids: Ids,
}

/// An [`ExactSet`]'s ids.
#[derive(Debug, Clone)]
enum Ids {
    /// Ids too spread for Roaring.
    Sparse(HashSet<u64, BuildHasherDefault<IdHasher>>),
    /// Ids dense enough for Roaring.
    Roaring(RoaringTreemap),
}

/// The hash of an id in a sparse set: SplitMix64's finalizer, so that ids
/// that differ only in their high bits (or are all multiples of 2^32)
/// spread over the table.
#[derive(Debug, Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; any other input still hashes.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id;
    }
}

/// A sparse set looks at its density when its size reaches a power of two
/// from this one up to [`DENSITY_CHECK_EVERY_DOUBLING_MAX`], then a power
/// of four ([`density_check_due`]).
const DENSITY_CHECK_MIN: u64 = 64;

/// The largest size checked at every doubling. Each check sorts a copy of
/// the ids: checked at every doubling, a set sorts about twice its size
/// in all (5% of an `exact_distinct` of 8.9M ids in 1,500 groups); at
/// every fourfold growth past this, about a third of it.
const DENSITY_CHECK_EVERY_DOUBLING_MAX: u64 = 1 << 12;

/// Whether a set growing from `before` to `after` ids passed a size at
/// which it looks at its density: a power of two from
/// [`DENSITY_CHECK_MIN`] to [`DENSITY_CHECK_EVERY_DOUBLING_MAX`], or an
/// even power of two past it.
fn density_check_due(before: u64, after: u64) -> bool {
    if after < DENSITY_CHECK_MIN || after <= before {
        return false;
    }
    let mut size = 1u64 << after.ilog2();
    while size > before && size >= DENSITY_CHECK_MIN {
        if size <= DENSITY_CHECK_EVERY_DOUBLING_MAX || size.ilog2().is_multiple_of(2) {
            return true;
        }
        size >>= 1;
    }
    false
}

/// Bytes a sparse set takes per id: 8 for the id and 1 control byte per
/// slot, at a load of about 5/8.
const SPARSE_BYTES_PER_ID: usize = 15;

/// Bytes `RoaringTreemap` (0.12) takes, roughly, per 2^32 bucket (its tree
/// entry, bitmap and container vector), per 2^16 container (its entry and
/// array), and per id in an array container.
const ROARING_BUCKET_BYTES: usize = 180;
const ROARING_CONTAINER_BYTES: usize = 56;
const ROARING_ID_BYTES: usize = 2;

impl Default for ExactSet {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for ExactSet {
    fn eq(&self, other: &Self) -> bool {
        match (&self.ids, &other.ids) {
            (Ids::Roaring(a), Ids::Roaring(b)) => a == b,
            _ => self.len() == other.len() && self.ids_iter().all(|id| other.contains(id)),
        }
    }
}

impl ExactSet {
    /// An empty set.
    pub fn new() -> Self {
        Self {
            ids: Ids::Sparse(HashSet::default()),
        }
    }

    /// Adds `id`; returns whether it was new.
    pub fn insert(&mut self, id: u64) -> bool {
        let added = match &mut self.ids {
            Ids::Sparse(ids) => {
                let added = ids.insert(id);
                let len = ids.len() as u64;
                if added && density_check_due(len - 1, len) {
                    self.settle();
                }
                added
            }
            Ids::Roaring(ids) => ids.insert(id),
        };
        debug_assert!(self.contains(id));
        added
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u64) -> bool {
        match &self.ids {
            Ids::Sparse(ids) => ids.contains(&id),
            Ids::Roaring(ids) => ids.contains(id),
        }
    }

    /// The number of ids.
    pub fn len(&self) -> u64 {
        match &self.ids {
            Ids::Sparse(ids) => ids.len() as u64,
            Ids::Roaring(ids) => ids.len(),
        }
    }

    /// Whether the set has no ids.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the ids are held in a Roaring bitmap (dense enough for one)
    /// rather than a hash set.
    pub fn is_roaring(&self) -> bool {
        matches!(self.ids, Ids::Roaring(_))
    }

    /// Bytes of heap memory the set holds, roughly.
    pub fn heap_bytes(&self) -> usize {
        match &self.ids {
            Ids::Sparse(ids) => ids.capacity() * 9,
            Ids::Roaring(ids) => ids.serialized_size(),
        }
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        match &self.ids {
            Ids::Sparse(_) => Iter::Sorted(self.sorted().into_iter()),
            Ids::Roaring(ids) => Iter::Roaring(Box::new(ids.iter())),
        }
    }

    /// The ids in no particular order.
    fn ids_iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.ids {
            Ids::Sparse(ids) => Box::new(ids.iter().copied()),
            Ids::Roaring(ids) => Box::new(ids.iter()),
        }
    }

    /// A sparse set's ids, sorted.
    fn sorted(&self) -> Vec<u64> {
        let mut sorted: Vec<u64> = self.ids_iter().collect();
        sorted.sort_unstable();
        sorted
    }

    /// The number of ids in `lower..=upper`.
    pub fn count_range(&self, lower: u64, upper: u64) -> u64 {
        if lower > upper {
            return 0;
        }
        match &self.ids {
            Ids::Sparse(ids) => ids
                .iter()
                .filter(|&&id| (lower..=upper).contains(&id))
                .count() as u64,
            Ids::Roaring(ids) => ids.range_cardinality(lower..=upper),
        }
    }

    /// A Roaring bitmap of a sparse set's ids.
    fn to_roaring(&self) -> RoaringTreemap {
        match &self.ids {
            Ids::Sparse(_) => {
                RoaringTreemap::from_sorted_iter(self.sorted()).expect("sorted distinct ids")
            }
            Ids::Roaring(ids) => ids.clone(),
        }
    }

    /// Moves a sparse set to Roaring if a Roaring bitmap of its ids would
    /// take under half its memory (estimated from how many 2^32 buckets
    /// and 2^16 containers the ids fall in; see the constants).
    fn settle(&mut self) {
        if self.is_roaring() {
            return;
        }
        let sorted = self.sorted();
        if 2 * roaring_bytes(sorted.iter().copied()) < sorted.len() * SPARSE_BYTES_PER_ID {
            self.ids = Ids::Roaring(
                RoaringTreemap::from_sorted_iter(sorted).expect("sorted distinct ids"),
            );
        }
    }

    /// A decoded set in the form its ids call for: a hash set if it has
    /// fewer than [`DENSITY_CHECK_MIN`] ids (as a set that grew to them
    /// is) or if a Roaring bitmap of them takes more memory than a hash
    /// set; else the bitmap. (Between half and all of a hash set's memory
    /// it stays Roaring: a growing set moves at half, so a set that is
    /// encoded and decoded does not flip between the two.)
    fn from_roaring(ids: RoaringTreemap) -> Self {
        let len = usize::try_from(ids.len()).unwrap_or(usize::MAX);
        let sparse = ids.len() < DENSITY_CHECK_MIN
            || roaring_bytes(ids.iter()) > len.saturating_mul(SPARSE_BYTES_PER_ID);
        let ids = if sparse {
            Ids::Sparse(ids.iter().collect())
        } else {
            Ids::Roaring(ids)
        };
        Self { ids }
    }

    /// Adds every id of `other` (`self ∪= other`).
    pub fn union_with(&mut self, other: &ExactSet) {
        let len_before = self.len();
        match (&mut self.ids, &other.ids) {
            (Ids::Roaring(a), Ids::Roaring(b)) => *a |= b,
            (Ids::Roaring(a), Ids::Sparse(_)) => *a |= other.to_roaring(),
            (Ids::Sparse(_), Ids::Roaring(b)) => {
                let mut ids = self.to_roaring();
                ids |= b;
                self.ids = Ids::Roaring(ids);
            }
            (Ids::Sparse(a), Ids::Sparse(b)) => {
                let before = a.len() as u64;
                a.extend(b.iter().copied());
                let after = a.len() as u64;
                // A power of two passed on the way: look at the density.
                if density_check_due(before, after) {
                    self.settle();
                }
            }
        }
        assert!(self.len() >= len_before);
        assert!(self.len() >= other.len());
    }

    /// Keeps only the ids also in `other` (`self ∩= other`).
    pub fn intersect_with(&mut self, other: &ExactSet) {
        let len_before = self.len();
        match (&mut self.ids, &other.ids) {
            (Ids::Roaring(a), Ids::Roaring(b)) => *a &= b,
            (Ids::Sparse(a), _) => a.retain(|&id| other.contains(id)),
            // At most `other`'s few ids remain.
            (Ids::Roaring(a), Ids::Sparse(b)) => {
                let kept = b.iter().copied().filter(|&id| a.contains(id)).collect();
                self.ids = Ids::Sparse(kept);
            }
        }
        assert!(self.len() <= len_before);
        assert!(self.len() <= other.len());
    }

    /// Removes the ids of `other` (`self \= other`).
    pub fn difference_with(&mut self, other: &ExactSet) {
        let len_before = self.len();
        match (&mut self.ids, &other.ids) {
            (Ids::Roaring(a), Ids::Roaring(b)) => *a -= b,
            (Ids::Sparse(a), _) => a.retain(|&id| !other.contains(id)),
            (Ids::Roaring(a), Ids::Sparse(b)) => {
                for &id in b {
                    a.remove(id);
                }
            }
        }
        assert!(self.len() <= len_before);
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &ExactSet) -> ExactSet {
        let mut union = self.clone();
        union.union_with(other);
        union
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &ExactSet) -> ExactSet {
        let mut intersection = self.clone();
        intersection.intersect_with(other);
        intersection
    }

    /// `self \ other`.
    pub fn difference(&self, other: &ExactSet) -> ExactSet {
        let mut difference = self.clone();
        difference.difference_with(other);
        difference
    }
}

/// Bytes a `RoaringTreemap` of `sorted` (ascending, distinct) would take,
/// roughly: per 2^32 bucket, per 2^16 container and per id (the
/// constants above).
fn roaring_bytes(sorted: impl Iterator<Item = u64>) -> usize {
    let (mut buckets, mut containers, mut ids) = (0, 0, 0);
    let mut previous: Option<u64> = None;
    for id in sorted {
        match previous {
            Some(p) if p >> 16 == id >> 16 => {}
            Some(p) if p >> 32 == id >> 32 => containers += 1,
            _ => {
                buckets += 1;
                containers += 1;
            }
        }
        ids += 1;
        previous = Some(id);
    }
    buckets * ROARING_BUCKET_BYTES + containers * ROARING_CONTAINER_BYTES + ids * ROARING_ID_BYTES
}

/// [`ExactSet::iter`]'s iterator: a sparse set's ids sorted, or a Roaring
/// bitmap's in order.
enum Iter<'a> {
    Sorted(std::vec::IntoIter<u64>),
    /// Boxed: roaring's iterator is 344 bytes.
    Roaring(Box<roaring::treemap::Iter<'a>>),
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match self {
            Iter::Sorted(ids) => ids.next(),
            Iter::Roaring(ids) => ids.next(),
        }
    }
}

impl Extend<u64> for ExactSet {
    fn extend<I: IntoIterator<Item = u64>>(&mut self, ids: I) {
        for id in ids {
            self.insert(id);
        }
    }
}

impl FromIterator<u64> for ExactSet {
    fn from_iter<I: IntoIterator<Item = u64>>(ids: I) -> Self {
        let mut set = Self::new();
        set.extend(ids);
        set
    }
}

impl Sketch for ExactSet {
    type Estimate = Estimate;

    /// A union; never fails.
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.union_with(other);
        Ok(())
    }

    /// The exact count (as `f64`, so exact up to 2^53 ids).
    fn estimate(&self) -> Estimate {
        Estimate::exact(self.len() as f64)
    }

    /// The portable 64-bit Roaring format (see the module docs).
    fn encode(&self) -> Vec<u8> {
        let sparse;
        let ids = match &self.ids {
            Ids::Roaring(ids) => ids,
            Ids::Sparse(_) => {
                sparse = self.to_roaring();
                &sparse
            }
        };
        let mut bytes = Vec::with_capacity(ids.serialized_size());
        ids.serialize_into(&mut bytes)
            .expect("writing to a Vec<u8> cannot fail");
        debug_assert_eq!(bytes.len(), ids.serialized_size());
        bytes
    }

    /// Reads the portable 64-bit Roaring format, from any implementation.
    /// Never panics; allocates at most about 8 times the input length.
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`] when a count asks for more bytes than remain,
    /// [`Error::Malformed`] for anything else the format forbids (unknown
    /// cookie, unsorted or duplicate keys, empty buckets, overlapping runs,
    /// bad cardinalities, trailing bytes).
    fn decode(bytes: &[u8]) -> Result<Self> {
        validate(bytes)?;
        let mut reader = bytes;
        let ids = RoaringTreemap::deserialize_from(&mut reader)
            .map_err(|error| malformed(format!("roaring: {error}")))?;
        // Pair with `validate`, which walked the same bytes to the end.
        assert!(reader.is_empty());
        Ok(Self::from_roaring(ids))
    }
}

/// Walks a portable 64-bit image without allocating, checking every count
/// against the bytes that remain (see the maintainer note).
fn validate(bytes: &[u8]) -> Result<()> {
    let mut cursor = Cursor { bytes, position: 0 };
    let buckets = cursor.u64()?;
    let mut key_previous = None;
    for _ in 0..buckets {
        // Each bucket takes at least 12 bytes, so a forged count runs out of
        // input here after a few iterations rather than looping 2^64 times.
        let key = cursor.u32()?;
        if key_previous.is_some_and(|previous| key <= previous) {
            return Err(malformed(format!(
                "bucket keys not strictly ascending at key {key}"
            )));
        }
        key_previous = Some(key);
        validate_bitmap(&mut cursor)?;
    }
    if cursor.remaining() != 0 {
        return Err(malformed(format!("{} trailing bytes", cursor.remaining())));
    }
    Ok(())
}

/// Walks one 32-bit portable bitmap.
fn validate_bitmap(cursor: &mut Cursor<'_>) -> Result<()> {
    let cookie = cursor.u32()?;
    let (containers, runs_flags_at) = if cookie == COOKIE_NO_RUNS {
        let containers = cursor.u32()? as usize;
        (containers, None)
    } else if (cookie & 0xffff) as u16 == COOKIE_RUNS {
        let containers = (cookie >> 16) as usize + 1;
        let at = cursor.position;
        cursor.skip(containers.div_ceil(8))?;
        (containers, Some(at))
    } else {
        return Err(malformed(format!("unknown cookie {cookie:#x}")));
    };
    if containers == 0 {
        return Err(malformed("empty bucket".to_string()));
    }
    if containers > CONTAINERS_MAX {
        return Err(malformed(format!(
            "{containers} containers, more than CONTAINERS_MAX = {CONTAINERS_MAX}"
        )));
    }
    let descriptions_at = cursor.position;
    cursor.skip(containers * 4)?;
    let has_offsets = runs_flags_at.is_none() || containers >= OFFSETS_CONTAINERS_MIN;
    if has_offsets {
        cursor.skip(containers * 4)?;
    }
    for index in 0..containers {
        let description = descriptions_at + index * 4;
        let cardinality = usize::from(cursor.u16_at(description + 2)) + 1;
        let is_run =
            runs_flags_at.is_some_and(|at| cursor.bytes[at + index / 8] & (1 << (index % 8)) != 0);
        if is_run {
            let runs = usize::from(cursor.u16()?);
            cursor.skip(runs * 4)?;
        } else if cardinality <= ARRAY_VALUES_MAX {
            cursor.skip(cardinality * 2)?;
        } else {
            cursor.skip(BITMAP_CONTAINER_BYTES)?;
        }
    }
    Ok(())
}

/// A bounds-checked little-endian reader over the input.
struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn skip(&mut self, count: usize) -> Result<&[u8]> {
        if count > self.remaining() {
            return Err(Error::Truncated {
                sketch: SKETCH,
                expected: u64::try_from(self.position + count).unwrap_or(u64::MAX),
                found: u64::try_from(self.bytes.len()).unwrap_or(u64::MAX),
            });
        }
        let start = self.position;
        self.position += count;
        assert!(self.position <= self.bytes.len());
        Ok(&self.bytes[start..self.position])
    }

    fn u16(&mut self) -> Result<u16> {
        let field = self.skip(2)?;
        Ok(u16::from_le_bytes([field[0], field[1]]))
    }

    fn u32(&mut self) -> Result<u32> {
        let field = self.skip(4)?;
        Ok(u32::from_le_bytes(field.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64> {
        let field = self.skip(8)?;
        Ok(u64::from_le_bytes(field.try_into().expect("8 bytes")))
    }

    /// A u16 at an index already walked over.
    fn u16_at(&self, index: usize) -> u16 {
        assert!(index + 2 <= self.position);
        u16::from_le_bytes([self.bytes[index], self.bytes[index + 1]])
    }
}

fn malformed(reason: String) -> Error {
    Error::Malformed {
        sketch: SKETCH,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes a growing set is checked at, one id at a time and in
    /// jumps: every power of two from 64 to 4,096, then 2^14, 2^16, ...
    #[test]
    fn density_checks_come_at_the_named_sizes() {
        let one_by_one: Vec<u64> = (1..=1u64 << 21)
            .filter(|&n| density_check_due(n - 1, n))
            .collect();
        let want: Vec<u64> = (6..=12)
            .chain([14, 16, 18, 20])
            .map(|k| 1u64 << k)
            .collect();
        assert_eq!(one_by_one, want);
        assert!(density_check_due(0, 64));
        assert!(density_check_due(100, 300)); // passes 128 and 256
        assert!(!density_check_due(1 << 14, (1 << 16) - 1)); // 2^15 is skipped
        assert!(density_check_due((1 << 16) - 1, 1 << 17));
        assert!(!density_check_due(10, 63));
        assert!(!density_check_due(300, 300));
    }

    #[test]
    fn insert_and_contains() {
        let mut s = ExactSet::new();
        assert!(s.insert(7));
        assert!(!s.insert(7));
        assert!(s.insert(u64::MAX));
        assert!(s.contains(7) && s.contains(u64::MAX) && !s.contains(8));
        assert_eq!(s.len(), 2);
        assert_eq!(s.estimate(), Estimate::exact(2.0));
    }

    #[test]
    fn algebra_in_place_matches_returning() {
        let a: ExactSet = (0..100).collect();
        let b: ExactSet = (50..150).collect();
        let mut c = a.clone();
        c.union_with(&b);
        assert_eq!(c, a.union(&b));
        let mut c = a.clone();
        c.intersect_with(&b);
        assert_eq!(c, a.intersection(&b));
        assert_eq!(c.len(), 50);
        let mut c = a.clone();
        c.difference_with(&b);
        assert_eq!(c, a.difference(&b));
        assert_eq!(c.len(), 50);
    }

    #[test]
    fn count_range_is_inclusive() {
        let s: ExactSet = (10..20).collect();
        assert_eq!(s.count_range(0, 9), 0);
        assert_eq!(s.count_range(10, 19), 10);
        assert_eq!(s.count_range(15, 15), 1);
        assert_eq!(s.count_range(20, 10), 0);
    }

    #[test]
    fn empty_encoding_is_eight_zero_bytes() {
        assert_eq!(ExactSet::new().encode(), [0; 8]);
        assert_eq!(ExactSet::decode(&[0; 8]), Ok(ExactSet::new()));
    }

    #[test]
    fn worked_example_bytes() {
        let s: ExactSet = [1, (1 << 32) + 5].into_iter().collect();
        let expected: Vec<u8> = [
            &[2, 0, 0, 0, 0, 0, 0, 0][..],
            &[
                0, 0, 0, 0, 0x3a, 0x30, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 1, 0,
            ],
            &[
                1, 0, 0, 0, 0x3a, 0x30, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 5, 0,
            ],
        ]
        .concat();
        assert_eq!(s.encode(), expected);
        assert_eq!(ExactSet::decode(&expected), Ok(s));
    }

    #[test]
    fn decode_rejects_forged_counts_without_allocating() {
        // 2^64 - 1 buckets in 8 bytes.
        assert!(matches!(
            ExactSet::decode(&[0xff; 8]),
            Err(Error::Truncated { .. })
        ));
        // One bucket claiming 2^32 - 1 containers without runs.
        let forged = [
            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3a, 0x30, 0, 0, 0xff, 0xff, 0xff, 0xff,
        ];
        assert!(matches!(
            ExactSet::decode(&forged),
            Err(Error::Malformed { .. })
        ));
        // One bucket claiming 65536 run containers in 4 bytes.
        let forged = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3b, 0x30, 0xff, 0xff];
        assert!(matches!(
            ExactSet::decode(&forged),
            Err(Error::Truncated { .. })
        ));
    }

    #[test]
    fn decode_rejects_duplicate_and_empty_buckets() {
        let one: ExactSet = [5].into_iter().collect();
        let bucket = &one.encode()[8..];
        let twice = [&[2, 0, 0, 0, 0, 0, 0, 0][..], bucket, bucket].concat();
        assert!(matches!(
            ExactSet::decode(&twice),
            Err(Error::Malformed { .. })
        ));
        let empty_bucket = [
            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3a, 0x30, 0, 0, 0, 0, 0, 0,
        ];
        assert!(matches!(
            ExactSet::decode(&empty_bucket),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn decode_rejects_trailing_bytes() {
        let mut bytes = ExactSet::new().encode();
        bytes.push(0);
        assert!(matches!(
            ExactSet::decode(&bytes),
            Err(Error::Malformed { .. })
        ));
    }
}
