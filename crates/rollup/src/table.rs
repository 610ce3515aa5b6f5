//! One worker's partial rollup of one summary: a table from group key to
//! aggregate states.
//!
//! ```text
//!  index: HashMap<GroupKey, row>        keys: Vec<GroupKey>     states: Vec<AggState>
//!  GroupKey = | bucket i64 | key id u32 |                       row r owns states[r*A .. (r+1)*A]
//!  key ids index the worker's Interner: each distinct dimension key kept once
//! ```
//!
//! The dimension key is the record's dimension values encoded back to back
//! by the caller (`cardinal-route` writes tagged values into one reused
//! buffer); the rollup treats it as opaque bytes. Keys hold interned ids, so
//! a fold that finds its group allocates nothing: one interner probe (by
//! borrowed bytes), one index probe, then the aggregate folds. Interners are
//! per worker; a merge translates the other side's ids through their bytes.
//!
//! Limits: at most `groups_max` groups (a record that would open a group past
//! it is dropped and counted: a memory guard against a runaway dimension);
//! with a retention window, records older than `newest bucket - window` are
//! dropped and counted, and [`Rollup::evict_expired`] drops their groups.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use cardinal_event::Timestamp;

use crate::agg::{AggKind, AggState, Input, Output};
use crate::{Error, Result};

/// Longest encoded dimension key: a record whose key is longer is dropped
/// and counted (text dimensions are bounded by the line length already;
/// this bounds the interner's memory per group).
pub const KEY_BYTES_MAX: usize = 64 * 1024;

/// Default cap on groups per summary per worker: about 10 GB of dense
/// (11, 5) HyperLogLogs at worst, far less with small groups sparse.
pub const GROUPS_MAX_DEFAULT: u64 = 5_000_000;

/// The shape every partial of one summary shares.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// The aggregates, in output order.
    pub aggs: Vec<AggKind>,
}

/// Limits of one partial rollup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most groups; see [`GROUPS_MAX_DEFAULT`].
    pub groups_max: u64,
    /// Keep buckets within this many milliseconds of the newest bucket seen;
    /// `None` keeps everything.
    pub retention_ms: Option<i64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            groups_max: GROUPS_MAX_DEFAULT,
            retention_ms: None,
        }
    }
}

/// What happened to a folded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folded {
    /// Folded into its group.
    Ok,
    /// Dropped: its group would exceed `groups_max`.
    DroppedGroupLimit,
    /// Dropped: its bucket is older than the retention window.
    DroppedExpired,
    /// Dropped: its dimension key is longer than [`KEY_BYTES_MAX`].
    DroppedKeyTooLong,
}

/// The key of a group: its bucket start and interned dimension key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupKey {
    /// Bucket start, UTC milliseconds.
    pub bucket: i64,
    key: u32,
}

/// One output row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'a> {
    /// Bucket start.
    pub bucket: Timestamp,
    /// The encoded dimension key, as given to [`Rollup::fold`].
    pub key: &'a [u8],
    /// One answer per aggregate.
    pub outputs: Vec<Output>,
}

/// A worker's partial rollup of one summary.
#[derive(Debug, Clone)]
pub struct Rollup {
    shape: Shape,
    limits: Limits,
    index: HashMap<GroupKey, u32, FastBuild>,
    keys: Vec<GroupKey>,
    states: Vec<AggState>,
    interner: Interner,
    newest_bucket: i64,
    dropped_group_limit: u64,
    dropped_expired: u64,
    dropped_key_too_long: u64,
}

impl Rollup {
    /// An empty partial rollup.
    pub fn new(shape: Shape, limits: Limits) -> Result<Self> {
        if limits.groups_max == 0 || limits.groups_max > u64::from(u32::MAX) {
            return Err(Error::Limit {
                name: "groups_max",
                value: limits.groups_max,
                reason: "must be in 1..=2^32-1",
            });
        }
        for kind in &shape.aggs {
            kind.state()?; // validate parameters once, up front
        }
        Ok(Self {
            shape,
            limits,
            index: HashMap::default(),
            keys: Vec::new(),
            states: Vec::new(),
            interner: Interner::default(),
            newest_bucket: i64::MIN,
            dropped_group_limit: 0,
            dropped_expired: 0,
            dropped_key_too_long: 0,
        })
    }

    /// Folds one record: its bucket, its encoded dimension key and one
    /// evaluated argument per aggregate.
    pub fn fold(&mut self, bucket: Timestamp, key: &[u8], inputs: &[Input<'_>]) -> Folded {
        if key.len() > KEY_BYTES_MAX {
            self.dropped_key_too_long += 1;
            return Folded::DroppedKeyTooLong;
        }
        assert_eq!(
            inputs.len(),
            self.shape.aggs.len(),
            "one input per aggregate"
        );
        if let Some(window) = self.limits.retention_ms
            && bucket.0 < self.newest_bucket.saturating_sub(window)
        {
            self.dropped_expired += 1;
            return Folded::DroppedExpired;
        }
        self.newest_bucket = self.newest_bucket.max(bucket.0);
        let key = GroupKey {
            bucket: bucket.0,
            key: self.interner.intern(key),
        };
        let row = match self.index.get(&key) {
            Some(&row) => row,
            None => match self.open(key) {
                Some(row) => row,
                None => {
                    self.dropped_group_limit += 1;
                    return Folded::DroppedGroupLimit;
                }
            },
        };
        let width = self.shape.aggs.len();
        let start = row as usize * width;
        for ((state, kind), &input) in self.states[start..start + width]
            .iter_mut()
            .zip(&self.shape.aggs)
            .zip(inputs)
        {
            state.fold(kind, input);
        }
        Folded::Ok
    }

    /// Opens a group for `key`, unless that would pass `groups_max`.
    fn open(&mut self, key: GroupKey) -> Option<u32> {
        if self.keys.len() as u64 >= self.limits.groups_max {
            return None;
        }
        let row = u32::try_from(self.keys.len()).expect("groups_max < 2^32");
        for kind in &self.shape.aggs {
            self.states.push(kind.state().expect("validated in new"));
        }
        self.keys.push(key);
        self.index.insert(key, row);
        Some(row)
    }

    /// Folds another partial rollup of the same summary into this one.
    pub fn merge(&mut self, other: &Rollup) -> Result<()> {
        if self.shape != other.shape {
            return Err(Error::Shape {
                reason: format!("{:?} and {:?}", self.shape, other.shape),
            });
        }
        let width = self.shape.aggs.len();
        for (row, other_key) in other.keys.iter().enumerate() {
            let key = GroupKey {
                bucket: other_key.bucket,
                key: self.interner.intern(other.interner.get(other_key.key)),
            };
            let target = match self.index.get(&key) {
                Some(&target) => target,
                None => self.open(key).ok_or(Error::Limit {
                    name: "groups_max",
                    value: self.limits.groups_max,
                    reason: "the merged rollup has more groups than the limit",
                })?,
            };
            let (to, from) = (target as usize * width, row * width);
            for i in 0..width {
                self.states[to + i].merge(&other.states[from + i])?;
            }
        }
        self.newest_bucket = self.newest_bucket.max(other.newest_bucket);
        self.dropped_group_limit += other.dropped_group_limit;
        self.dropped_expired += other.dropped_expired;
        self.dropped_key_too_long += other.dropped_key_too_long;
        Ok(())
    }

    /// Drops groups whose bucket is older than the retention window. Returns
    /// how many were dropped.
    pub fn evict_expired(&mut self) -> usize {
        let Some(window) = self.limits.retention_ms else {
            return 0;
        };
        let oldest = self.newest_bucket.saturating_sub(window);
        let width = self.shape.aggs.len();
        let before = self.keys.len();
        let mut keep = 0;
        for row in 0..self.keys.len() {
            if self.keys[row].bucket >= oldest {
                self.keys.swap(keep, row);
                for i in 0..width {
                    self.states.swap(keep * width + i, row * width + i);
                }
                keep += 1;
            }
        }
        self.keys.truncate(keep);
        self.states.truncate(keep * width);
        self.index.clear();
        for (row, key) in self.keys.iter().enumerate() {
            self.index
                .insert(*key, u32::try_from(row).expect("< groups_max"));
        }
        before - keep
    }

    /// The answers, one row per group, ordered by bucket then key bytes.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let width = self.shape.aggs.len();
        let mut rows: Vec<Row<'_>> = self
            .keys
            .iter()
            .enumerate()
            .map(|(row, key)| Row {
                bucket: Timestamp(key.bucket),
                key: self.interner.get(key.key),
                outputs: self.states[row * width..(row + 1) * width]
                    .iter()
                    .zip(&self.shape.aggs)
                    .map(|(state, kind)| state.output(kind))
                    .collect(),
            })
            .collect();
        rows.sort_by(|a, b| a.bucket.cmp(&b.bucket).then_with(|| a.key.cmp(b.key)));
        rows
    }

    /// Each group's bucket, key and raw states, unordered, for exporters
    /// that need the sketches themselves (e.g. postgresql-hll hex).
    pub fn groups(&self) -> impl Iterator<Item = (Timestamp, &[u8], &[AggState])> {
        let width = self.shape.aggs.len();
        self.keys.iter().enumerate().map(move |(row, key)| {
            (
                Timestamp(key.bucket),
                self.interner.get(key.key),
                &self.states[row * width..(row + 1) * width],
            )
        })
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.keys.len()
    }

    /// Records dropped because of `groups_max`.
    pub fn dropped_group_limit(&self) -> u64 {
        self.dropped_group_limit
    }

    /// Records dropped because their bucket was older than the retention.
    pub fn dropped_expired(&self) -> u64 {
        self.dropped_expired
    }

    /// Records dropped because their key was longer than [`KEY_BYTES_MAX`].
    pub fn dropped_key_too_long(&self) -> u64 {
        self.dropped_key_too_long
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Approximate heap bytes: states' payloads, the table and the interner.
    pub fn heap_bytes(&self) -> usize {
        let states: usize = self.states.iter().map(AggState::heap_bytes).sum();
        let table = self.keys.capacity() * std::mem::size_of::<GroupKey>()
            + self.states.capacity() * std::mem::size_of::<AggState>()
            + self.index.capacity() * (std::mem::size_of::<GroupKey>() + 4 + 1);
        states + table + self.interner.heap_bytes()
    }
}

/// Dimension keys, each kept once; ids index `strings`.
#[derive(Debug, Clone, Default)]
struct Interner {
    ids: HashMap<Box<[u8]>, u32, FastBuild>,
    strings: Vec<Box<[u8]>>,
}

impl Interner {
    #[inline]
    fn intern(&mut self, text: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = u32::try_from(self.strings.len()).expect("fewer than 2^32 distinct keys");
        self.strings.push(text.into());
        self.ids.insert(text.into(), id);
        id
    }

    fn get(&self, id: u32) -> &[u8] {
        &self.strings[id as usize]
    }

    fn heap_bytes(&self) -> usize {
        self.strings.iter().map(|s| 2 * s.len() + 40).sum()
    }
}

type FastBuild = BuildHasherDefault<FastHasher>;

/// A multiply-rotate hasher (the FxHash construction) for in-memory tables
/// keyed by interned ids and short strings: much cheaper than SipHash, and
/// these tables are per worker and never exposed to hash flooding from
/// outside beyond the group limit.
#[derive(Default, Clone, Copy)]
struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.write_u64(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.write_u64(u64::from_le_bytes(tail) ^ bytes.len() as u64);
    }

    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    #[inline]
    fn write_i64(&mut self, word: i64) {
        self.write_u64(word as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}
