//! One worker's partial rollup of one summary: a table from group key to
//! aggregate states.
//!
//! ```text
//!  parts:  1, or PARTS (256) once the rollup has held parts_after groups;
//!          a key's part is the top 8 bits of key_hash(bucket, key bytes). Each:
//!  index:  Index           slots of (hash high 32 bits | row + 1), probed by
//!                          the hash's low bits, linear, at most half full
//!  groups: Rows<Group>     Group = | bucket i64 | len u32 | key bytes or arena start (20) |
//!  arena:  Vec<u8>         the key bytes of groups whose key is over 20 bytes
//!  states: Rows<AggState>  row r's A states, side by side
//! ```
//!
//! Parts exist for the caller that orders its folds by part
//! ([`Rollup::part_of`]): a part of a 1.5M-group rollup is under 1 MB, so
//! folds into one part one after another stay in the cache. Growth is per
//! part, so no single rehash moves the whole table, and merges go part by
//! part. Group records and states are kept in blocks of 256 rows that never
//! move ([`crate::rows`]): growing a part allocates a block instead of
//! copying the part and leaving its old buffer behind.
//!
//! A key of at most [`INLINE_KEY_BYTES`] (an IP prefix, a state, a small
//! integer: most dimension keys) sits in its 32-byte group record, so a
//! fold that misses the cache on a large table waits for the index slot,
//! then the group record and the states together, not for the key bytes
//! after the group. Hashes are not stored: growing the index and merging
//! rehash the keys, which is cheap next to the misses a stored hash would
//! have cost in a wider record.
//!
//! The dimension key is the record's dimension values encoded back to back
//! by the caller (`cardinal-route` writes tagged values into one reused
//! buffer); the rollup treats it as opaque bytes. A fold hashes (bucket,
//! key) once and probes the table once; a new group appends its key to the
//! arena (no allocation per group beyond amortized growth), so a fold that
//! finds its group allocates nothing. A fold whose (bucket, key) equals the
//! previous fold's skips the hash and the probe. A merge probes with the
//! other side's stored hashes and key bytes.
//!
//! A large table makes each fold a chain of cache misses (index slot, group
//! record, states), so the engine overlaps them instead of waiting: it
//! hashes a key and prefetches its slot when a route enters its ring
//! ([`Rollup::prefetch`]), the group record and states halfway
//! ([`Rollup::prefetch_group`]), a long key's bytes at three quarters
//! ([`Rollup::prefetch_key`]), and folds by the hash when it leaves
//! ([`Rollup::fold_hashed`]), in arrival order. Past the split it holds
//! routes per part and folds a part at a time ([`Rollup::fold_held`],
//! without the last-fold comparison); a part about to fold at least half
//! as many records as it has groups, within [`PART_PREFETCH_BYTES_MAX`], is
//! loaded whole first in address order ([`Rollup::prefetch_part`]), and a
//! few of its lines per record while the part before it folds
//! ([`Rollup::part_lines`], [`Rollup::prefetch_part_lines`]). A new group
//! is opened out of line of the probe. The batch fold finds groups in
//! arrival order ([`Rollup::locate`], [`Rollup::locate_at`]) and reuses the
//! last one ([`Rollup::last_folded`]). Query 2A's 512K groups at 2M rows
//! took half the time with the ring; its 1.45M groups at 20M rows another
//! tenth with parts loaded whole (bench/JOURNAL.md, 2026-11-21).
//!
//! Limits: at most `groups_max` groups (a record that would open a group past
//! it is dropped and counted: a memory guard against a runaway dimension);
//! with a retention window, records older than `newest bucket - window` are
//! dropped and counted, and [`Rollup::evict_expired`] drops their groups.
//! With a future tolerance, the retention window is measured from the
//! stream's robust watermark ([`crate::watermark`]) instead of the newest
//! bucket, so one event in year 9999 cannot evict the rest, and
//! [`Rollup::evict_future`] drops the groups of buckets more than the
//! tolerance ahead of it, counting their records. Those groups are dropped
//! once, from the merged answer, not as records arrive: a worker's own
//! watermark lags the stream's (it may have read an older file first), and
//! records it would have refused would then depend on the thread count.

use cardinal_event::Timestamp;
use cardinal_event::bytes::{bytes_eq, prefetch, prefetch_lines, tail_word};

use crate::agg::{AggKind, AggState, Input, Output};
use crate::rows::{ItemsMut, Rows};
use crate::watermark::Watermark;
use crate::{Error, Result};

/// Longest encoded dimension key: a record whose key is longer is dropped
/// and counted (text dimensions are bounded by the line length already;
/// this bounds the arena's memory per group).
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
    /// Measure the retention window from the stream's robust watermark
    /// ([`crate::WATERMARK_RECORDS`]), and let [`Rollup::evict_future`]
    /// drop the groups of buckets more than this many milliseconds ahead
    /// of it; `None` measures from the newest bucket seen and keeps any.
    pub future_ms: Option<i64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            groups_max: GROUPS_MAX_DEFAULT,
            retention_ms: None,
            future_ms: None,
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
    /// One part while the rollup is small; [`PARTS`] once it has held
    /// `parts_after` groups, each group in the part its hash's top bits
    /// name ([`Rollup::part_of`]).
    parts: Vec<Part>,
    /// Groups in all parts.
    group_count: usize,
    /// Groups at which one part splits into [`PARTS`].
    parts_after: usize,
    /// The part and row the last fold went to (row [`NO_ROW`] if none):
    /// runs of records with one key skip the hash and the probe.
    last: (u32, u32),
    /// How many times groups have moved (split into parts, evicted):
    /// a [`GroupAt`] of another count is stale.
    moves: u32,
    newest_bucket: i64,
    /// [`Rollup::newest_bucket`] when [`Rollup::evict_expired_due`] last
    /// evicted.
    evicted_at: i64,
    drops: Drops,
    /// The robust watermark, kept only with a future tolerance.
    watermark: Watermark,
}

/// Where a group of a [`Rollup`] is, for [`Rollup::fold_at`]: from
/// [`Rollup::last_folded`], and good while [`Rollup::holds`] says so
/// (until the rollup's groups move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupAt {
    part: u32,
    row: u32,
    moves: u32,
}

/// One aggregate's states of a rollup's groups ([`Rollup::aggregate_states`]).
#[derive(Debug)]
pub struct AggregateStates<'r> {
    /// The first part's: all of a rollup's that has not split, and then
    /// the states are reached without going through its part.
    first: ItemsMut<'r, AggState>,
    /// The other parts, item [`AggregateStates::aggregate`] of theirs.
    rest: &'r mut [Part],
    moves: u32,
    /// Below every part's state width (checked when made).
    aggregate: usize,
}

impl AggregateStates<'_> {
    /// The state of the group `at` names.
    ///
    /// # Panics
    ///
    /// If `at` is stale ([`Rollup::holds`] is false).
    #[inline]
    pub fn at(&mut self, at: GroupAt) -> &mut AggState {
        assert!(at.moves == self.moves, "a group of the rollup as it is");
        match at.part.checked_sub(1) {
            None => self.first.at(at.row as usize),
            Some(part) => self.rest[part as usize]
                .states
                .item_mut(at.row as usize, self.aggregate),
        }
    }
}

/// A share of a rollup's groups: a table from (bucket, key) to row, the
/// rows' group records and states.
#[derive(Debug, Clone)]
struct Part {
    /// Row ids, found by [`key_hash`] of (bucket, key bytes).
    table: Index,
    /// One per row, in the order groups opened.
    groups: Rows<Group>,
    /// Every group's key bytes, back to back, append-only (until eviction).
    arena: Vec<u8>,
    /// Row `r`'s states, one per aggregate.
    states: Rows<AggState>,
}

impl Part {
    fn new(width: usize) -> Self {
        Self {
            table: Index::default(),
            groups: Rows::new(1),
            arena: Vec::new(),
            states: Rows::new(width),
        }
    }

    /// Bytes of the part's index, group records and state slots (not the
    /// long keys' arena, nor what states hold on the heap): what a probe
    /// and a fold touch.
    fn table_bytes(&self) -> usize {
        self.table.heap_bytes() + self.groups.heap_bytes() + self.states.heap_bytes()
    }

    /// Moves each group, with its states, into `into[choose(group, key)]`,
    /// dropping the groups `choose` maps to `None`, then rebuilds the
    /// indexes of `into` (a split spreads one part over all; an eviction
    /// keeps a part's recent groups).
    fn move_groups(
        self,
        into: &mut [Part],
        mut choose: impl FnMut(&Group, &[u8]) -> Option<usize>,
    ) {
        let width = self.states.width();
        let mut states = self.states.into_items();
        for group in self.groups.firsts() {
            let key = group.key(&self.arena);
            let row = states.by_ref().take(width);
            match choose(group, key) {
                Some(at) => {
                    let part = &mut into[at];
                    part.groups
                        .push([Group::new(group.bucket, key, &mut part.arena)]);
                    part.states.push(row);
                }
                None => row.for_each(drop),
            }
        }
        for part in into {
            part.table.rebuild(&part.groups, &part.arena);
        }
    }
}

/// Parts of a rollup past `parts_after` groups: a power of two, chosen by
/// the top bits of a key's hash. 256 parts of a rollup of 1.5M groups hold
/// ~6K groups each, under 1 MB of index, group records and states: folds
/// that come to one part together (see [`Rollup::part_of`]) stay in the
/// core's cache and its TLB reach instead of missing three times each.
pub const PARTS: usize = 256;

/// Groups at which a rollup splits into [`PARTS`] parts, by default: below
/// it one table fits the caches and parts would only spread it out.
pub const PARTS_AFTER_DEFAULT: usize = 1 << 16;

/// The most bytes of index, group records and states of one part that
/// [`Rollup::prefetch_part`] loads: a core's L2 cache on the machines we
/// measure on (Query 2A's parts, ~5.7K groups, hold ~550 KB).
pub const PART_PREFETCH_BYTES_MAX: usize = 1 << 20;

/// The top hash bits that choose a part.
const PART_BITS: u32 = PARTS.trailing_zeros();

/// Records a rollup dropped, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Drops {
    pub(crate) group_limit: u64,
    pub(crate) expired: u64,
    pub(crate) key_too_long: u64,
    pub(crate) future: u64,
    /// Whether [`Rollup::evict_expired`] has dropped any group.
    pub(crate) evicted: bool,
    /// Whether [`Rollup::evict_expired`] has dropped a group of a bucket
    /// past the future tolerance.
    pub(crate) evicted_future: bool,
}

/// What a rollup keeps beside its groups that decides how it folds on:
/// what a state image ([`crate::image`]) writes before the groups.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    /// 1, or [`PARTS`].
    pub(crate) parts: usize,
    pub(crate) parts_after: usize,
    pub(crate) newest_bucket: i64,
    pub(crate) evicted_at: i64,
    pub(crate) drops: Drops,
    pub(crate) watermark: Watermark,
}

/// `last` when no fold has found a row yet (never a row: `groups_max` is
/// below 2^32).
const NO_ROW: u32 = u32::MAX;

/// How many groups ahead a merge starts loading the other side's groups
/// and their places in this side's index.
const MERGE_PREFETCH_DEPTH: usize = 8;

/// Where [`Rollup::prefetch_part_lines`] has got to in one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLines {
    part: usize,
    /// About how many lines the part has.
    lines: usize,
    /// 0: the index, 1: group records, 2: states, 3: done.
    region: u8,
    block: usize,
    line: usize,
}

impl PartLines {
    /// About how many cache lines the part has.
    pub fn lines(&self) -> usize {
        self.lines
    }
}

/// How many `T`s share a 64-byte cache line (at least one): the step of
/// a walk that loads a slice line by line.
#[inline]
fn items_per_line<T>() -> usize {
    (64 / std::mem::size_of::<T>().max(1)).max(1)
}

/// A key's hash from [`Rollup::prefetch`], for [`Rollup::fold_hashed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

/// Keys of at most this many bytes are kept in their group record; longer
/// ones in the rollup's arena. 20 makes a [`Group`] 32 bytes, two to a
/// cache line.
const INLINE_KEY_BYTES: usize = 20;

/// A group's bucket and key: the key's bytes themselves (zero padded) if it
/// has at most [`INLINE_KEY_BYTES`], else where they start in the arena
/// (`u64`, little-endian, in the first 8 bytes of `key`).
///
/// Aligned to its size so that no record straddles two cache lines: the
/// fold's prefetch loads the line a record starts in, and a record split
/// across two (as a 16-byte-aligned heap block puts every other one) left
/// its key bytes in a line nobody had asked for, a full miss per fold.
#[derive(Debug, Clone, Copy)]
#[repr(align(32))]
struct Group {
    bucket: i64,
    len: u32,
    key: [u8; INLINE_KEY_BYTES],
}

const _: () = assert!(
    std::mem::size_of::<Group>() == 32 && std::mem::align_of::<Group>() == 32,
    "a Group is half a cache line, never split across two"
);

impl Group {
    /// The group of (bucket, key), appending a long key to `arena`.
    fn new(bucket: i64, key: &[u8], arena: &mut Vec<u8>) -> Self {
        let len = u32::try_from(key.len()).expect("key length <= KEY_BYTES_MAX");
        let mut inline = [0u8; INLINE_KEY_BYTES];
        if key.len() <= INLINE_KEY_BYTES {
            inline[..key.len()].copy_from_slice(key);
        } else {
            inline[..8].copy_from_slice(&(arena.len() as u64).to_le_bytes());
            arena.extend_from_slice(key);
        }
        Self {
            bucket,
            len,
            key: inline,
        }
    }

    /// Where the key's bytes start in the arena (`None`: kept inline).
    #[inline]
    fn arena_start(&self) -> Option<usize> {
        (self.len as usize > INLINE_KEY_BYTES).then(|| {
            let start = u64::from_le_bytes(self.key[..8].try_into().expect("8 bytes"));
            usize::try_from(start).expect("an arena offset")
        })
    }

    #[inline]
    fn key<'a>(&'a self, arena: &'a [u8]) -> &'a [u8] {
        let len = self.len as usize;
        match self.arena_start() {
            None => &self.key[..len],
            Some(start) => &arena[start..start + len],
        }
    }

    /// The key's [`key_hash`].
    #[inline]
    fn hash(&self, arena: &[u8]) -> u64 {
        key_hash(self.bucket, self.key(arena))
    }
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
        // A negative window would keep nothing, and a negative tolerance
        // would put the newest bucket kept behind the watermark.
        for (name, window) in [
            ("retention_ms", limits.retention_ms),
            ("future_ms", limits.future_ms),
        ] {
            if let Some(ms) = window.filter(|&ms| ms < 0) {
                return Err(Error::Limit {
                    name,
                    value: ms.unsigned_abs(),
                    reason: "must not be negative",
                });
            }
        }
        for (index, kind) in shape.aggs.iter().enumerate() {
            kind.state()?; // validate parameters once, up front
            if let AggKind::QuantilesOf { of, .. } = *kind
                && (usize::from(of) >= index
                    || !matches!(shape.aggs[usize::from(of)], AggKind::Quantiles { .. }))
            {
                return Err(Error::Shape {
                    reason: format!(
                        "aggregate {index} reads the quantiles of aggregate {of}, which is not an earlier quantiles aggregate"
                    ),
                });
            }
        }
        let width = shape.aggs.len();
        Ok(Self {
            shape,
            limits,
            parts: vec![Part::new(width)],
            group_count: 0,
            parts_after: PARTS_AFTER_DEFAULT,
            last: (0, NO_ROW),
            moves: 0,
            newest_bucket: i64::MIN,
            evicted_at: i64::MIN,
            drops: Drops::default(),
            watermark: Watermark::default(),
        })
    }

    /// Hands over every group and drop count, leaving this rollup empty
    /// but still at the same point of its stream: the newest bucket and
    /// the last eviction stay, so retention goes on as before. The robust
    /// watermark goes with the groups, so that merging what successive
    /// calls hand over sees each record once. A continuous engine's
    /// workers hand their partials over this way: the pause is a move,
    /// not a copy.
    pub fn take_groups(&mut self) -> Rollup {
        let width = self.shape.aggs.len();
        let mut rest = Self {
            shape: self.shape.clone(),
            limits: self.limits,
            parts: vec![Part::new(width)],
            group_count: 0,
            parts_after: self.parts_after,
            last: (0, NO_ROW),
            moves: 0,
            newest_bucket: self.newest_bucket,
            evicted_at: self.evicted_at,
            drops: Drops::default(),
            watermark: Watermark::default(),
        };
        // A GroupAt taken before must not reach into the new parts.
        rest.moves = self.moves.wrapping_add(1);
        std::mem::swap(self, &mut rest);
        rest
    }

    /// The same rollup, splitting into [`PARTS`] parts once it holds
    /// `groups` groups (at once if it already does) instead of at
    /// [`PARTS_AFTER_DEFAULT`]: for tests that want parts with few groups.
    #[must_use]
    pub fn with_parts_after(mut self, groups: usize) -> Self {
        self.parts_after = groups;
        self.split_if_due();
        self
    }

    /// Folds one record: its bucket, its encoded dimension key and one
    /// evaluated argument per aggregate.
    pub fn fold(&mut self, bucket: Timestamp, key: &[u8], inputs: &[Input<'_>]) -> Folded {
        assert_eq!(
            inputs.len(),
            self.shape.aggs.len(),
            "one input per aggregate"
        );
        self.fold_row(None, bucket, key, true, true, |states, aggs| {
            for ((state, kind), &input) in states.iter_mut().zip(aggs).zip(inputs) {
                state.fold(kind, input);
            }
        })
    }

    /// Folds one record through `update`, which gets the record's group's
    /// states (one per aggregate, in shape order) and folds the record's
    /// arguments into them itself: the path for an engine that decided at
    /// plan time which [`AggState`] method feeds each aggregate
    /// ([`AggState::fold_number`], ...), instead of building one
    /// [`Input`] per aggregate per record. Drops are as in
    /// [`Rollup::fold`]; `update` is not called for a dropped record.
    #[inline]
    pub fn fold_with(
        &mut self,
        bucket: Timestamp,
        key: &[u8],
        update: impl FnOnce(&mut [AggState]),
    ) -> Folded {
        self.fold_hashed(None, bucket, key, update)
    }

    /// [`Rollup::fold_with`] for a record whose (bucket, key) was hashed
    /// already ([`Rollup::prefetch`] or [`KeyHash::of`] gave `hash`), so it
    /// is not hashed again.
    #[inline]
    pub fn fold_hashed(
        &mut self,
        hash: Option<KeyHash>,
        bucket: Timestamp,
        key: &[u8],
        update: impl FnOnce(&mut [AggState]),
    ) -> Folded {
        self.fold_row(hash, bucket, key, true, true, |states, _| update(states))
    }

    /// [`Rollup::fold_hashed`] for records that come a part at a time
    /// (held back and folded by part, [`Rollup::part_of`]): the group is
    /// looked up without first comparing the key with the last fold's,
    /// which records of one part of a large rollup rarely repeat. The
    /// record was admitted when it was held back ([`Rollup::admit`], in
    /// arrival order), so its bucket is not checked against the retention
    /// window again; the other drops are as in [`Rollup::fold_with`].
    #[inline]
    pub fn fold_held(
        &mut self,
        hash: KeyHash,
        bucket: Timestamp,
        key: &[u8],
        update: impl FnOnce(&mut [AggState]),
    ) -> Folded {
        self.fold_row(Some(hash), bucket, key, false, false, |states, _| {
            update(states);
        })
    }

    /// Finds or opens the group of (bucket, key) (hashing it unless `hash`
    /// is given; first comparing it with the last fold's group if
    /// `check_last`; checking the retention window if `admit`) and calls
    /// `update` with its states and the shape's aggregates; `update` is
    /// not called for a dropped record.
    #[inline]
    fn fold_row(
        &mut self,
        hash: Option<KeyHash>,
        bucket: Timestamp,
        key: &[u8],
        check_last: bool,
        admit: bool,
        update: impl FnOnce(&mut [AggState], &[AggKind]),
    ) -> Folded {
        match self.group_of(hash, bucket, key, check_last, admit) {
            Ok((part, row)) => {
                let states = self.parts[part as usize].states.row_mut(row as usize);
                update(states, &self.shape.aggs);
                Folded::Ok
            }
            Err(dropped) => dropped,
        }
    }

    /// The group a record of (bucket, key) folds into, found or opened as
    /// [`Rollup::fold_with`] would, without folding anything: for an engine
    /// that finds a batch's groups first and then folds the batch one
    /// aggregate at a time ([`Rollup::states_at`]). A dropped record is
    /// counted as [`Rollup::fold_with`] counts it, and `Err` says why.
    /// Opening a group may move the others ([`Rollup::opens_in_place`]
    /// says when it cannot): a [`GroupAt`] given out before then is stale.
    #[inline]
    pub fn locate(&mut self, bucket: Timestamp, key: &[u8]) -> Result<GroupAt, Folded> {
        let (part, row) = self.group_of(None, bucket, key, true, true)?;
        Ok(GroupAt {
            part,
            row,
            moves: self.moves,
        })
    }

    /// [`Rollup::locate`] for a record of `bucket` whose group is known to
    /// be `at` (a caller that remembers which group recent keys went to):
    /// the retention window admits or drops it as [`Rollup::locate`]
    /// would, and the key is not read.
    ///
    /// # Panics
    ///
    /// If `at` is stale ([`Rollup::holds`] is false).
    #[inline]
    pub fn locate_at(&mut self, at: GroupAt, bucket: Timestamp) -> Result<GroupAt, Folded> {
        assert!(self.holds(at), "a group of the rollup as it is");
        debug_assert_eq!(
            self.parts[at.part as usize].groups.row(at.row as usize)[0].bucket,
            bucket.0
        );
        if !self.admit(bucket) {
            return Err(Folded::DroppedExpired);
        }
        self.last = (at.part, at.row);
        Ok(at)
    }

    /// The states of the group `at` names (one per aggregate, in shape
    /// order), to fold into.
    ///
    /// # Panics
    ///
    /// If `at` is stale ([`Rollup::holds`] is false).
    #[inline]
    pub fn states_at(&mut self, at: GroupAt) -> &mut [AggState] {
        assert!(self.holds(at), "a group of the rollup as it is");
        self.parts[at.part as usize].states.row_mut(at.row as usize)
    }

    /// The states of aggregate `aggregate` of every group, for a caller
    /// that folds many located records into one aggregate at a time:
    /// [`AggregateStates::at`]`(at)` is [`Rollup::states_at`]`(at)[aggregate]`
    /// with the aggregate checked once, here, not per record.
    ///
    /// # Panics
    ///
    /// If there is no such aggregate.
    #[inline]
    pub fn aggregate_states(&mut self, aggregate: usize) -> AggregateStates<'_> {
        assert!(
            aggregate < self.shape.aggs.len(),
            "aggregate {aggregate} of {}",
            self.shape.aggs.len()
        );
        let (first, rest) = self.parts.split_first_mut().expect("a rollup has a part");
        AggregateStates {
            first: first.states.items_mut(aggregate),
            rest,
            moves: self.moves,
            aggregate,
        }
    }

    /// Whether `groups` more groups can open without any group moving
    /// (the rollup splitting into parts): [`GroupAt`]s that
    /// [`Rollup::locate`] gives out for that many new groups all stay
    /// good.
    #[inline]
    pub fn opens_in_place(&self, groups: usize) -> bool {
        self.parts.len() > 1 || self.group_count.saturating_add(groups) < self.parts_after
    }

    /// The (part, row) of (bucket, key)'s group for [`Rollup::fold_row`]
    /// and [`Rollup::locate`], or why the record is dropped (counted).
    #[inline(always)]
    fn group_of(
        &mut self,
        hash: Option<KeyHash>,
        bucket: Timestamp,
        key: &[u8],
        check_last: bool,
        admit: bool,
    ) -> Result<(u32, u32), Folded> {
        if key.len() > KEY_BYTES_MAX {
            self.drops.key_too_long += 1;
            return Err(Folded::DroppedKeyTooLong);
        }
        if admit && !self.admit(bucket) {
            return Err(Folded::DroppedExpired);
        }
        let (last_part, last_row) = self.last;
        let last = check_last
            .then(|| {
                self.parts[last_part as usize]
                    .groups
                    .first_of(last_row as usize)
            })
            .flatten();
        match last {
            Some(group)
                if group.bucket == bucket.0
                    && bytes_eq(group.key(&self.parts[last_part as usize].arena), key) =>
            {
                Ok(self.last)
            }
            _ => {
                let hash = hash.map_or_else(|| key_hash(bucket.0, key), |h| h.0);
                debug_assert_eq!(hash, key_hash(bucket.0, key), "a KeyHash of this key");
                match self.find_or_open(hash, bucket.0, key) {
                    Some(at) => {
                        self.last = at;
                        Ok(at)
                    }
                    None => {
                        self.drops.group_limit += 1;
                        Err(Folded::DroppedGroupLimit)
                    }
                }
            }
        }
    }

    /// Records that groups have moved: the last fold's position and
    /// every [`GroupAt`] given out are stale.
    fn moved(&mut self) {
        self.last = (0, NO_ROW);
        self.moves = self.moves.wrapping_add(1);
    }

    /// Whether a record of `bucket` is within the retention window (else
    /// it is counted as dropped); the newest bucket moves up to it. Every
    /// fold asks this first; a caller that holds records back and folds
    /// them later ([`Rollup::fold_held`]) asks it when it holds each one,
    /// so that records are admitted in arrival order.
    #[inline]
    pub fn admit(&mut self, bucket: Timestamp) -> bool {
        if self.limits.future_ms.is_some() {
            self.watermark.observe(bucket.0);
        }
        if let Some(window) = self.limits.retention_ms
            && bucket.0 < self.clock().saturating_sub(window)
        {
            self.drops.expired += 1;
            return false;
        }
        self.newest_bucket = self.newest_bucket.max(bucket.0);
        true
    }

    /// Where the retention window is measured from: the robust watermark
    /// with a future tolerance, else the newest bucket admitted.
    #[inline]
    fn clock(&self) -> i64 {
        if self.limits.future_ms.is_some() {
            self.watermark.get().unwrap_or(i64::MIN)
        } else {
            self.newest_bucket
        }
    }

    /// The group the last fold went to, if it went to one and the groups
    /// have not moved since: a caller that knows the next record has the
    /// same (bucket, key) without building the key can fold it there
    /// ([`Rollup::fold_at`]).
    #[inline]
    pub fn last_folded(&self) -> Option<GroupAt> {
        let (part, row) = self.last;
        (row != NO_ROW).then_some(GroupAt {
            part,
            row,
            moves: self.moves,
        })
    }

    /// Whether `at` still names its group (no group has moved since).
    #[inline]
    pub fn holds(&self, at: GroupAt) -> bool {
        at.moves == self.moves
    }

    /// [`Rollup::fold_with`] for a record of `bucket` whose group is `at`
    /// ([`Rollup::last_folded`] for a record of the same bucket and key):
    /// the same fold without the key. A record older than the retention
    /// window is dropped as [`Rollup::fold_with`] drops it.
    ///
    /// # Panics
    ///
    /// If `at` is stale ([`Rollup::holds`] is false).
    #[inline]
    pub fn fold_at(
        &mut self,
        at: GroupAt,
        bucket: Timestamp,
        update: impl FnOnce(&mut [AggState]),
    ) -> Folded {
        match self.locate_at(at, bucket) {
            Ok(at) => {
                update(self.parts[at.part as usize].states.row_mut(at.row as usize));
                Folded::Ok
            }
            Err(dropped) => dropped,
        }
    }

    /// The part of the groups whose [`KeyHash`] is `hash`: folds that come
    /// to one part one after another (an engine that sorts a batch of
    /// records by part, say) touch only that part's tables, which fit the
    /// caches when the whole rollup does not. 0 while the rollup has one
    /// part; below [`PARTS`] always.
    #[inline]
    pub fn part_of(&self, hash: KeyHash) -> usize {
        part_index(hash.0, self.parts.len())
    }

    /// How many parts the rollup has: 1, or [`PARTS`] once it has held
    /// `parts_after` groups.
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Starts loading the index slot of (bucket, key) into the cache and
    /// returns the key's hash, for [`Rollup::prefetch_group`] and
    /// [`Rollup::fold_hashed`] a few records later. With hundreds of
    /// thousands of groups a fold's probe is a chain of cache misses (index
    /// slot, group record, key bytes, states); a caller that knows the next
    /// records' keys early overlaps them with other work. Only a hint: what
    /// is folded does not change.
    #[inline]
    pub fn prefetch(&self, bucket: Timestamp, key: &[u8]) -> KeyHash {
        let hash = KeyHash::of(bucket, key);
        self.prefetch_slot(hash);
        hash
    }

    /// [`Rollup::prefetch`] of a key already hashed.
    #[inline]
    pub fn prefetch_slot(&self, hash: KeyHash) {
        if let Some(slot) = self.parts[self.part_of(hash)].table.slot_of(hash.0) {
            prefetch(slot);
        }
    }

    /// The second stage of [`Rollup::prefetch`], once the slot has had time
    /// to arrive: starts loading the group record and the states of the
    /// rows whose tag matches in the slots probed (usually one).
    #[inline]
    pub fn prefetch_group(&self, hash: KeyHash) {
        let part = &self.parts[self.part_of(hash)];
        part.table.rows_tagged(hash.0, |row| {
            let row = row as usize;
            if let Some(group) = part.groups.first_of(row) {
                prefetch(group);
            }
            if let Some(states) = part.states.get(row) {
                prefetch_lines(states);
            }
        });
    }

    /// Starts loading all of part `part`'s index, group records and
    /// states into the cache, line by line in address order, if `records`
    /// folds about to come to it pay for that and they fit a core's cache
    /// ([`PART_PREFETCH_BYTES_MAX`]); whether it did. With about as many
    /// records as groups (a held-back fold, see [`Rollup::part_of`]) most
    /// lines of the part are touched anyway: loaded in order, they stream
    /// in at the memory's bandwidth instead of missing one by one behind
    /// each record's probe.
    pub fn prefetch_part(&self, part: usize, records: usize) -> bool {
        fn lines<T>(items: &[T]) {
            for line in items.chunks(items_per_line::<T>()) {
                prefetch(&line[0]);
            }
        }
        let Some(part) = self.part_to_load(part, records) else {
            return false;
        };
        lines(&part.table.slots);
        part.groups.blocks().for_each(lines);
        part.states.blocks().for_each(lines);
        true
    }

    /// A cursor at the first cache line of part `part`'s index, group
    /// records and states, for [`Rollup::prefetch_part_lines`], if part
    /// `part` exists and would be loaded whole for `records` folds
    /// ([`Rollup::prefetch_part`]'s test).
    pub fn part_lines(&self, part: usize, records: usize) -> Option<PartLines> {
        let p = self.part_to_load(part, records)?;
        Some(PartLines {
            part,
            lines: p.table_bytes().div_ceil(64),
            region: 0,
            block: 0,
            line: 0,
        })
    }

    /// Part `part`, if `records` folds about to come to it pay for loading
    /// it whole (about as many as it has groups: most of its lines are
    /// touched anyway) and its tables fit [`PART_PREFETCH_BYTES_MAX`].
    fn part_to_load(&self, part: usize, records: usize) -> Option<&Part> {
        let p = self.parts.get(part)?;
        (records >= p.groups.len() / 2 && p.table_bytes() <= PART_PREFETCH_BYTES_MAX).then_some(p)
    }

    /// Starts loading the next `n` cache lines of `cursor`'s part: a part
    /// loaded a few lines per fold of the part before it, so that its
    /// lines come from memory while that part folds, not in one burst
    /// when its own folds start. `false` once every line was asked for.
    #[inline]
    pub fn prefetch_part_lines(&self, cursor: &mut PartLines, mut n: usize) -> bool {
        /// Asks for line `line` of `items`; whether it has one.
        #[inline]
        fn line_of<T>(items: &[T], line: usize) -> bool {
            match items.get(line * items_per_line::<T>()) {
                Some(item) => {
                    prefetch(item);
                    true
                }
                None => false,
            }
        }
        let part = &self.parts[cursor.part];
        while n > 0 {
            let asked = match cursor.region {
                0 => (cursor.block == 0).then(|| line_of(&part.table.slots, cursor.line)),
                1 => part
                    .groups
                    .block(cursor.block)
                    .map(|block| line_of(block, cursor.line)),
                2 => part
                    .states
                    .block(cursor.block)
                    .map(|block| line_of(block, cursor.line)),
                _ => return false,
            };
            match asked {
                // A line asked for.
                Some(true) => {
                    cursor.line += 1;
                    n -= 1;
                }
                // The end of a block: the next block.
                Some(false) => {
                    cursor.block += 1;
                    cursor.line = 0;
                }
                // The end of a region: the next region.
                None => {
                    cursor.region += 1;
                    cursor.block = 0;
                    cursor.line = 0;
                }
            }
        }
        true
    }

    /// The third stage of [`Rollup::prefetch`], once the group records
    /// have arrived: starts loading the key bytes of the rows whose tag
    /// matches and whose key is too long to sit in the group record.
    #[inline]
    pub fn prefetch_key(&self, hash: KeyHash) {
        let part = &self.parts[self.part_of(hash)];
        part.table.rows_tagged(hash.0, |row| {
            if let Some(group) = part.groups.first_of(row as usize)
                && let Some(start) = group.arena_start()
                && let Some(byte) = part.arena.get(start)
            {
                prefetch(byte);
            }
        });
    }

    /// Folds another partial rollup of the same summary into this one.
    ///
    /// Goes through the other side part by part: when both sides have
    /// [`PARTS`] parts, the groups of one part of the other side all land
    /// in the same part here, so the merge works in one part's tables at a
    /// time.
    pub fn merge(&mut self, other: &Rollup) -> Result<()> {
        if self.shape != other.shape {
            return Err(Error::Shape {
                reason: format!("{:?} and {:?}", self.shape, other.shape),
            });
        }
        if self.parts.len() == 1 && self.group_count + other.group_count >= self.parts_after {
            self.split();
        }
        for from in &other.parts {
            // Room for the larger side's groups at once (one rebuild
            // instead of one per doubling, and no growth to undo the
            // prefetches) when the parts correspond. Not for both sides'
            // sum: workers that read parts of one input mostly hold the
            // same groups (Query 2A's two workers 1.45M each, 1.45M
            // together), and room for the sum rebuilt every part's index
            // at twice the size it needs; groups past the larger side's
            // grow it as folds do.
            if self.parts.len() == other.parts.len() {
                let groups_max = usize::try_from(self.limits.groups_max).unwrap_or(usize::MAX);
                if let Some(first) = from.groups.first_of(0) {
                    let into = part_index(first.hash(&from.arena), self.parts.len());
                    let into = &mut self.parts[into];
                    let most = into.groups.len().max(from.groups.len()).min(groups_max);
                    into.table.reserve(most, &into.groups, &into.arena);
                }
            }
            // Both sides hash with the same fixed function, so a hash of the
            // other side's key is its hash here. Hashed in one sequential
            // pass so the probes below can start theirs early.
            let hashes: Vec<KeyHash> = from
                .groups
                .firsts()
                .map(|g| KeyHash(g.hash(&from.arena)))
                .collect();
            for (row, group) in from.groups.firsts().enumerate() {
                // The probes of the groups MERGE_PREFETCH_DEPTH ahead are
                // under way, as in a worker's fold (see `Rollup::prefetch`).
                if let Some(&ahead) = hashes.get(row + MERGE_PREFETCH_DEPTH) {
                    self.prefetch_slot(ahead);
                }
                if let Some(&halfway) = hashes.get(row + MERGE_PREFETCH_DEPTH / 2) {
                    self.prefetch_group(halfway);
                    if let Some(states) = from.states.get(row + MERGE_PREFETCH_DEPTH / 2) {
                        prefetch_lines(states);
                    }
                }
                let (part, target) = self
                    .find_or_open(hashes[row].0, group.bucket, group.key(&from.arena))
                    .ok_or(Error::Limit {
                        name: "groups_max",
                        value: self.limits.groups_max,
                        reason: "the merged rollup has more groups than the limit",
                    })?;
                let into = self.parts[part as usize].states.row_mut(target as usize);
                for (into, from) in into.iter_mut().zip(from.states.row(row)) {
                    into.merge(from)?;
                }
            }
        }
        self.newest_bucket = self.newest_bucket.max(other.newest_bucket);
        self.watermark.merge(&other.watermark);
        self.drops.group_limit += other.drops.group_limit;
        self.drops.expired += other.drops.expired;
        self.drops.key_too_long += other.drops.key_too_long;
        self.drops.future += other.drops.future;
        self.drops.evicted |= other.drops.evicted;
        self.drops.evicted_future |= other.drops.evicted_future;
        Ok(())
    }

    /// Whether [`Rollup::evict_expired_due`] would evict now: the newest
    /// bucket has moved a quarter of the retention window (at least 1 ms)
    /// past where the last such eviction left it.
    pub fn eviction_due(&self) -> bool {
        self.limits.retention_ms.is_some_and(|window| {
            // A watermark goes back only while a stream's first records
            // are few (an outlier first): evict again from where it is.
            self.clock() < self.evicted_at
                || self.clock().saturating_sub(self.evicted_at) >= (window / 4).max(1)
        })
    }

    /// [`Rollup::evict_expired`] when [`Rollup::eviction_due`]: a stream
    /// in time order keeps at most about 1.25 windows of groups while it is
    /// folded, and each group is moved at most a few times. Returns how
    /// many groups were dropped.
    pub fn evict_expired_due(&mut self) -> usize {
        if !self.eviction_due() {
            return 0;
        }
        self.evicted_at = self.clock();
        self.evict_expired()
    }

    /// Drops groups whose bucket is older than the retention window. Returns
    /// how many were dropped.
    pub fn evict_expired(&mut self) -> usize {
        let Some(window) = self.limits.retention_ms else {
            return 0;
        };
        let oldest = self.clock().saturating_sub(window);
        let dropped = self.keep_buckets(oldest..=i64::MAX);
        self.drops.evicted |= dropped > 0;
        dropped
    }

    /// Drops the groups of buckets more than the future tolerance ahead of
    /// the watermark, and counts their records as dropped
    /// ([`Rollup::dropped_future`]). Meant for a merged answer: the
    /// watermark of a partial lags the stream's. Returns how many groups
    /// were dropped.
    pub fn evict_future(&mut self) -> usize {
        let (Some(tolerance), Some(watermark)) = (self.limits.future_ms, self.watermark.get())
        else {
            return 0;
        };
        let newest = watermark.saturating_add(tolerance);
        self.drops.future = self.watermark.records_after(newest);
        let dropped = self.keep_buckets(i64::MIN..=newest);
        self.drops.evicted_future |= dropped > 0;
        dropped
    }

    /// Drops the groups whose bucket is outside `keep`; how many.
    fn keep_buckets(&mut self, keep: std::ops::RangeInclusive<i64>) -> usize {
        let (oldest, newest) = (*keep.start(), *keep.end());
        let width = self.shape.aggs.len();
        let before = self.group_count;
        let mut rebuilt = false;
        for part in &mut self.parts {
            // A part with no expired group stays as it is: rebuilding it
            // would only move its groups (and, with freed memory kept by
            // the allocator, grow the heap: a 1.5M-group rollup with
            // nothing to evict went from 511 to 686 MB).
            if part
                .groups
                .firsts()
                .all(|group| (oldest..=newest).contains(&group.bucket))
            {
                continue;
            }
            let old = std::mem::replace(part, Part::new(width));
            old.move_groups(std::slice::from_mut(part), |group, _| {
                (oldest..=newest).contains(&group.bucket).then_some(0)
            });
            rebuilt = true;
        }
        if rebuilt {
            self.group_count = self.parts.iter().map(|p| p.groups.len()).sum();
            self.moved();
        }
        before - self.group_count
    }

    /// The answers, one row per group, ordered by bucket then key bytes.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let mut rows: Vec<Row<'_>> = self
            .groups()
            .map(|(bucket, key, states)| Row {
                bucket,
                key,
                outputs: (0..states.len())
                    .map(|i| crate::agg::output_of(states, &self.shape.aggs, i))
                    .collect(),
            })
            .collect();
        rows.sort_unstable_by(|a, b| a.bucket.cmp(&b.bucket).then_with(|| a.key.cmp(b.key)));
        rows
    }

    /// Each group's bucket, key and raw states, unordered, for exporters
    /// that need the sketches themselves (e.g. postgresql-hll hex).
    pub fn groups(&self) -> impl Iterator<Item = (Timestamp, &[u8], &[AggState])> {
        self.parts.iter().flat_map(move |part| {
            part.groups
                .firsts()
                .zip(part.states.iter())
                .map(move |(group, states)| {
                    (Timestamp(group.bucket), group.key(&part.arena), states)
                })
        })
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.group_count
    }

    /// Records dropped because of `groups_max`.
    pub fn dropped_group_limit(&self) -> u64 {
        self.drops.group_limit
    }

    /// Records dropped because their bucket was older than the retention.
    pub fn dropped_expired(&self) -> u64 {
        self.drops.expired
    }

    /// The newest bucket start any record folded here (or into a merged
    /// partial) had, whatever was evicted since; `None` before the first.
    pub fn newest_bucket(&self) -> Option<Timestamp> {
        (self.newest_bucket != i64::MIN).then_some(Timestamp(self.newest_bucket))
    }

    /// Where this rollup takes its stream to be, as a bucket start: the
    /// robust watermark with a future tolerance (so one record dated
    /// 9999-12-31 does not move it), else the newest bucket; `None` before
    /// the first record. Retention is measured from here, and a server
    /// closes a day's file once this has passed the day's end.
    pub fn watermark(&self) -> Option<Timestamp> {
        let clock = self.clock();
        (clock != i64::MIN).then_some(Timestamp(clock))
    }

    /// When [`Rollup::evict_expired`] (here or in a merged partial) has
    /// dropped groups: the oldest bucket start the retention window keeps,
    /// every group of an older bucket gone.
    pub fn evicted_before(&self) -> Option<Timestamp> {
        let window = self.limits.retention_ms?;
        self.drops
            .evicted
            .then(|| Timestamp(self.clock().saturating_sub(window)))
    }

    /// Records of the groups [`Rollup::evict_future`] dropped: their bucket
    /// was further ahead of the stream's watermark than the future
    /// tolerance.
    pub fn dropped_future(&self) -> u64 {
        self.drops.future
    }

    /// When [`Rollup::evict_expired`] (here or in a merged partial) has
    /// dropped groups of buckets past the future tolerance: the newest
    /// bucket start it keeps, every group of a later bucket gone.
    pub fn evicted_after(&self) -> Option<Timestamp> {
        let tolerance = self.limits.future_ms?;
        self.drops
            .evicted_future
            .then(|| Timestamp(self.clock().saturating_add(tolerance)))
    }

    /// Records dropped because their key was longer than [`KEY_BYTES_MAX`].
    pub fn dropped_key_too_long(&self) -> u64 {
        self.drops.key_too_long
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The (part, row) of (bucket, key), opening it if it is new, unless
    /// that would pass `groups_max`: one probe either way. Splits the
    /// rollup into parts first when it is due.
    #[inline]
    fn find_or_open(&mut self, hash: u64, bucket: i64, key: &[u8]) -> Option<(u32, u32)> {
        let part_index = part_index(hash, self.parts.len());
        let part = &mut self.parts[part_index];
        if part.table.is_full() {
            part.table.grow(&part.groups, &part.arena);
        }
        match part.table.find(hash, |row| {
            let group = &part.groups.row(row as usize)[0];
            group.bucket == bucket && bytes_eq(group.key(&part.arena), key)
        }) {
            #[expect(clippy::cast_possible_truncation, reason = "below PARTS")]
            Ok(row) => Some((part_index as u32, row)),
            Err(slot) => self.open(part_index, slot, hash, bucket, key),
        }
    }

    /// Opens the group of (bucket, key) at `slot` of part `part_index`'s
    /// index (where [`Index::find`] found no row), unless the rollup holds
    /// `groups_max` groups: the cold half of [`Rollup::find_or_open`],
    /// kept out of line so that a fold that finds its group (most folds)
    /// runs the probe alone.
    #[inline(never)]
    fn open(
        &mut self,
        part_index: usize,
        slot: usize,
        hash: u64,
        bucket: i64,
        key: &[u8],
    ) -> Option<(u32, u32)> {
        if self.group_count as u64 >= self.limits.groups_max {
            return None;
        }
        let part = &mut self.parts[part_index];
        let row = u32::try_from(part.groups.len()).expect("groups_max < 2^32");
        part.table.insert_at(slot, hash, row);
        part.states.push(
            self.shape
                .aggs
                .iter()
                .map(|kind| kind.state().expect("validated in new")),
        );
        part.groups.push([Group::new(bucket, key, &mut part.arena)]);
        self.group_count += 1;
        #[expect(clippy::cast_possible_truncation, reason = "below PARTS")]
        let at = (part_index as u32, row);
        if self.split_if_due() {
            // The group moved: find it again in its part.
            return self.find_or_open(hash, bucket, key);
        }
        Some(at)
    }

    /// Splits the one part into [`PARTS`] if the rollup has reached
    /// `parts_after` groups; whether it did.
    fn split_if_due(&mut self) -> bool {
        let due = self.parts.len() == 1 && self.group_count >= self.parts_after;
        if due {
            self.split();
        }
        due
    }

    /// Moves every group of the one part into the part its hash names.
    fn split(&mut self) {
        debug_assert_eq!(self.parts.len(), 1);
        let width = self.shape.aggs.len();
        let old = std::mem::replace(&mut self.parts[0], Part::new(width));
        let mut parts: Vec<Part> = (0..PARTS).map(|_| Part::new(width)).collect();
        old.move_groups(&mut parts, |group, key| {
            Some(part_index(key_hash(group.bucket, key), PARTS))
        });
        self.parts = parts;
        self.moved();
    }

    /// The rollup's [`Progress`], for its image.
    pub(crate) fn progress(&self) -> Progress {
        Progress {
            parts: self.parts.len(),
            parts_after: self.parts_after,
            newest_bucket: self.newest_bucket,
            evicted_at: self.evicted_at,
            drops: self.drops,
            watermark: self.watermark.clone(),
        }
    }

    /// An empty rollup at `progress` (checked against the shape and
    /// limits), to take its groups back with [`Rollup::restore_group`].
    pub(crate) fn resumed(shape: Shape, limits: Limits, progress: Progress) -> Result<Self> {
        let mut rollup = Self::new(shape, limits)?;
        match progress.parts {
            1 => {}
            PARTS => rollup.split(),
            parts => {
                return Err(Error::ImageMalformed {
                    reason: format!("{parts} parts: a rollup has 1 or {PARTS}"),
                });
            }
        }
        if limits.future_ms.is_none() && progress.watermark.get().is_some() {
            return Err(Error::ImageMalformed {
                reason: "a watermark without a future tolerance".to_string(),
            });
        }
        rollup.parts_after = progress.parts_after;
        rollup.newest_bucket = progress.newest_bucket;
        rollup.evicted_at = progress.evicted_at;
        rollup.drops = progress.drops;
        rollup.watermark = progress.watermark;
        rollup.moved();
        Ok(rollup)
    }

    /// Opens the group of (bucket, key) with `states`, at the next row of
    /// its part, for a rollup read back from its image: groups come back
    /// in the order [`Rollup::groups`] gave them, so each part's rows are
    /// in their old order. Refuses (why, for the image's error) a group
    /// the rollup could not have held: a key past [`KEY_BYTES_MAX`], a
    /// group twice, past `groups_max`, or one part holding as many groups
    /// as split it.
    pub(crate) fn restore_group(
        &mut self,
        bucket: i64,
        key: &[u8],
        states: Vec<AggState>,
    ) -> Result<(), &'static str> {
        assert_eq!(states.len(), self.shape.aggs.len(), "a state per aggregate");
        if key.len() > KEY_BYTES_MAX {
            return Err("a key longer than KEY_BYTES_MAX");
        }
        if self.group_count as u64 >= self.limits.groups_max {
            return Err("more groups than groups_max");
        }
        if self.parts.len() == 1 && self.group_count + 1 >= self.parts_after {
            return Err("one part with as many groups as split it");
        }
        let hash = key_hash(bucket, key);
        let at = part_index(hash, self.parts.len());
        let part = &mut self.parts[at];
        if part.table.is_full() {
            part.table.grow(&part.groups, &part.arena);
        }
        let found = part.table.find(hash, |row| {
            let group = &part.groups.row(row as usize)[0];
            group.bucket == bucket && bytes_eq(group.key(&part.arena), key)
        });
        let Err(slot) = found else {
            return Err("a group twice");
        };
        let row = u32::try_from(part.groups.len()).expect("groups_max < 2^32");
        part.table.insert_at(slot, hash, row);
        part.states.push(states);
        part.groups.push([Group::new(bucket, key, &mut part.arena)]);
        self.group_count += 1;
        Ok(())
    }

    /// Heap bytes this rollup holds, counted from what it allocated: the
    /// tables, the per-row group records, the key arenas and the state
    /// slots (by capacity), plus each state's own payload
    /// ([`AggState::heap_bytes`]).
    pub fn heap_bytes(&self) -> usize {
        let parts = self.parts.capacity() * std::mem::size_of::<Part>();
        parts
            + self
                .parts
                .iter()
                .map(|part| {
                    let states: usize =
                        part.states.iter().flatten().map(AggState::heap_bytes).sum();
                    states + part.table_bytes() + part.arena.capacity()
                })
                .sum::<usize>()
    }
}

/// The part of `parts` (1 or [`PARTS`]) that a key hash belongs to: its top
/// bits. The index of a part probes by the low bits and tags with the high
/// 32, so within one part the tag still tells most keys apart.
#[inline]
fn part_index(hash: u64, parts: usize) -> usize {
    if parts == 1 {
        0
    } else {
        debug_assert_eq!(parts, PARTS);
        (hash >> (64 - PART_BITS)) as usize
    }
}

impl KeyHash {
    /// The hash of (bucket, key) that [`Rollup::prefetch`] gives and
    /// [`Rollup::fold_hashed`] and [`Rollup::part_of`] take; the same in
    /// every rollup.
    #[inline]
    pub fn of(bucket: Timestamp, key: &[u8]) -> Self {
        Self(key_hash(bucket.0, key))
    }

    /// [`KeyHash::of`] a key of `len` bytes, at most 16, given as two
    /// little-endian words that are zero past them (as
    /// [`cardinal_event::bytes::short_words`] reads a key): for a caller
    /// that holds short keys as words, not bytes.
    ///
    /// # Panics
    ///
    /// In debug builds, if `len` is over 16 or a byte past it is not zero.
    #[inline(always)]
    pub fn of_words(bucket: Timestamp, words: [u64; 2], len: usize) -> Self {
        debug_assert!(len <= 16);
        debug_assert!(
            len >= 16 || (u128::from(words[0]) | u128::from(words[1]) << 64) >> (8 * len) == 0,
            "zero past the key"
        );
        let mut h = bucket.0.cast_unsigned() ^ KEY_HASH_SEED;
        // key_hash's steps: a word per whole 8 bytes, then the zero-padded
        // tail with the length.
        let tail = if len >= 8 {
            h = fold_mul(h ^ words[0], KEY_HASH_K);
            if len == 16 {
                h = fold_mul(h ^ words[1], KEY_HASH_K);
                0
            } else {
                words[1]
            }
        } else {
            words[0]
        };
        Self(fold_mul(h ^ tail, KEY_HASH_K ^ len as u64))
    }

    /// The hash as a number, for a caller that keeps it in a buffer of its
    /// own and gives it back with [`KeyHash::from_bits`].
    #[inline]
    pub fn bits(self) -> u64 {
        self.0
    }

    /// A hash kept with [`KeyHash::bits`]. A fold given a hash that is not
    /// its key's misses its group (debug builds assert).
    #[inline]
    pub fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
}

/// Row ids by key hash: open addressing with linear probing over a
/// power-of-two array of 8-byte slots, each `(hash & 0xffffffff00000000) |
/// (row + 1)`, 0 when empty; at most half full, so a probe for a new key
/// reads about 2.5 slots, mostly in one cache line. The slot a hash starts
/// at is its low bits; the high 32 bits are kept as a tag so that most
/// mismatches are told apart without reading the group. Rows are below
/// `groups_max` < 2^32, so `row + 1` fits the low half. Growing rehashes
/// the groups' keys, most of them inline in the group records it reads in
/// order.
#[derive(Debug, Clone, Default)]
struct Index {
    slots: Vec<u64>,
    len: usize,
}

/// The tag half of a slot.
const TAG_MASK: u64 = 0xffff_ffff_0000_0000;

/// Slots of the first table (grown from empty).
const INDEX_SLOTS_MIN: usize = 16;

impl Index {
    /// Whether one more row would make the table more than half full.
    #[inline]
    fn is_full(&self) -> bool {
        (self.len + 1) * 2 > self.slots.len()
    }

    /// The row whose group `eq` accepts among those with `hash`'s tag, or
    /// the empty slot where a new row with `hash` goes.
    #[inline]
    fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Result<u32, usize> {
        debug_assert!(!self.slots.is_empty() && self.len < self.slots.len());
        let mask = self.slots.len() - 1;
        let tag = hash & TAG_MASK;
        #[expect(clippy::cast_possible_truncation, reason = "the low bits index")]
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return Err(at);
            }
            #[expect(clippy::cast_possible_truncation, reason = "the row half")]
            let row = (slot as u32).wrapping_sub(1);
            if slot & TAG_MASK == tag && eq(row) {
                return Ok(row);
            }
            at = (at + 1) & mask;
        }
    }

    /// The slot a probe for `hash` starts at (`None` before the first
    /// group).
    #[inline]
    fn slot_of(&self, hash: u64) -> Option<&u64> {
        #[expect(clippy::cast_possible_truncation, reason = "the low bits index")]
        let at = hash as usize & self.slots.len().wrapping_sub(1);
        self.slots.get(at)
    }

    /// Calls `visit` with each row whose slot on `hash`'s probe path has
    /// its tag, up to the first empty slot.
    #[inline]
    fn rows_tagged(&self, hash: u64, mut visit: impl FnMut(u32)) {
        if self.slots.is_empty() {
            return;
        }
        let mask = self.slots.len() - 1;
        let tag = hash & TAG_MASK;
        #[expect(clippy::cast_possible_truncation, reason = "the low bits index")]
        let mut at = hash as usize & mask;
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return;
            }
            if slot & TAG_MASK == tag {
                #[expect(clippy::cast_possible_truncation, reason = "the row half")]
                visit((slot as u32).wrapping_sub(1));
            }
            at = (at + 1) & mask;
        }
    }

    /// Puts `row` in the empty slot `at` that [`Index::find`] returned.
    #[inline]
    fn insert_at(&mut self, at: usize, hash: u64, row: u32) {
        debug_assert_eq!(self.slots[at], 0);
        self.slots[at] = (hash & TAG_MASK) | (u64::from(row) + 1);
        self.len += 1;
    }

    /// Grows once, if needed, so that `rows` rows fit at most half full.
    fn reserve(&mut self, rows: usize, groups: &Rows<Group>, arena: &[u8]) {
        let slots = ((rows + 1) * 2).next_power_of_two().max(INDEX_SLOTS_MIN);
        if slots > self.slots.len() {
            self.fill(slots, groups, arena);
        }
    }

    /// Doubles the slots (or makes the first ones) and puts every row of
    /// `groups` back, by its key's hash.
    fn grow(&mut self, groups: &Rows<Group>, arena: &[u8]) {
        let slots = (self.slots.len() * 2).max(INDEX_SLOTS_MIN);
        self.fill(slots, groups, arena);
    }

    /// Rebuilds from `groups` (after eviction), at the smallest size that
    /// keeps them at most half full.
    fn rebuild(&mut self, groups: &Rows<Group>, arena: &[u8]) {
        let slots = ((groups.len() + 1) * 2)
            .next_power_of_two()
            .max(INDEX_SLOTS_MIN);
        self.fill(slots, groups, arena);
    }

    fn fill(&mut self, slots: usize, groups: &Rows<Group>, arena: &[u8]) {
        self.slots.clear();
        self.slots.resize(slots, 0);
        self.len = 0;
        let mask = slots - 1;
        for (row, group) in groups.firsts().enumerate() {
            // Every (bucket, key) is distinct: the first empty slot from
            // its hash's start is its place.
            let hash = group.hash(arena);
            #[expect(clippy::cast_possible_truncation, reason = "the low bits index")]
            let mut at = hash as usize & mask;
            while self.slots[at] != 0 {
                at = (at + 1) & mask;
            }
            self.insert_at(at, hash, u32::try_from(row).expect("< groups_max"));
        }
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }
}

/// The rollup's hash of (bucket, key bytes), for its in-memory table only
/// (never persisted; the same in every process, so partials can share it).
///
/// Each 8-byte little-endian word `w` of the key, then the zero-padded
/// tail, is folded in as `h = fold_mul(h ^ w, K)`, where `fold_mul` XORs the
/// high and low halves of the 128-bit product (the folded-multiply step of
/// wyhash and foldhash): every input bit reaches both the low bits the table
/// indexes by and the high bits it tags with. The start is the bucket XOR a
/// constant; the key's length is folded into the last step so keys that
/// differ only by trailing zero bytes differ. Not resistant to chosen keys:
/// a flood of colliding keys slows only its own worker, and `groups_max`
/// bounds it.
#[inline]
fn key_hash(bucket: i64, key: &[u8]) -> u64 {
    let mut h = bucket.cast_unsigned() ^ KEY_HASH_SEED;
    let mut words = key.chunks_exact(8);
    for word in &mut words {
        h = fold_mul(
            h ^ u64::from_le_bytes(word.try_into().expect("8 bytes")),
            KEY_HASH_K,
        );
    }
    fold_mul(
        h ^ tail_word(words.remainder()),
        KEY_HASH_K ^ key.len() as u64,
    )
}

/// [`key_hash`]'s multiplier: 2^64 / golden ratio, odd.
const KEY_HASH_K: u64 = 0x9e37_79b9_7f4a_7c15;

/// [`key_hash`]'s start offset (SplitMix64's second constant).
const KEY_HASH_SEED: u64 = 0xbf58_476d_1ce4_e5b9;

#[inline]
#[expect(clippy::cast_possible_truncation, reason = "halves of the product")]
fn fold_mul(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_lines_ask_for_every_line_of_a_part_once() {
        let shape = Shape {
            aggs: vec![AggKind::CountAll, AggKind::Sum],
        };
        let mut rollup = Rollup::new(shape, Limits::default())
            .expect("valid")
            .with_parts_after(0);
        for i in 0..40_000u32 {
            rollup.fold_with(Timestamp(0), &i.to_le_bytes(), |states| {
                states[0].fold_count();
            });
        }
        let lines = |items: usize, size: usize| items.div_ceil(64 / size);
        for part in [0, 7, PARTS - 1] {
            let p = &rollup.parts[part];
            let want = lines(p.table.slots.len(), 8)
                + p.groups.blocks().map(|b| lines(b.len(), 32)).sum::<usize>()
                + p.states.blocks().map(|b| lines(b.len(), 48)).sum::<usize>();
            let mut cursor = rollup.part_lines(part, p.groups.len()).expect("fits");
            assert!(
                cursor.lines() >= want,
                "{} lines, {want} asked",
                cursor.lines()
            );
            let mut asked = 0;
            while rollup.prefetch_part_lines(&mut cursor, 1) {
                asked += 1;
                assert!(asked <= want, "every line once");
            }
            assert_eq!(asked, want);
            assert!(
                !rollup.prefetch_part_lines(&mut cursor, 3),
                "done stays done"
            );
            // Too few folds to pay for loading the part whole.
            assert_eq!(rollup.part_lines(part, p.groups.len() / 4), None);
        }
    }

    #[test]
    fn held_folds_equal_plain_folds() {
        let shape = Shape {
            aggs: vec![AggKind::CountAll, AggKind::Sum],
        };
        let limits = Limits {
            groups_max: 900,
            retention_ms: None,
            future_ms: None,
        };
        let new = || {
            Rollup::new(shape.clone(), limits)
                .expect("valid")
                .with_parts_after(64)
        };
        let (mut plain, mut held) = (new(), new());
        for i in 0..5_000u32 {
            let key = format!("k{}", i.wrapping_mul(2_654_435_761) % 1_000);
            let bucket = Timestamp(i64::from(i % 3) * 86_400_000);
            let v = f64::from(i);
            let update = |states: &mut [AggState]| {
                states[0].fold_count();
                states[1].fold_number(v);
            };
            let hash = KeyHash::of(bucket, key.as_bytes());
            assert_eq!(
                plain.fold_with(bucket, key.as_bytes(), update),
                held.fold_held(hash, bucket, key.as_bytes(), update)
            );
        }
        assert_eq!(held.parts(), PARTS, "folded past the split");
        assert_eq!(plain.dropped_group_limit(), held.dropped_group_limit());
        assert!(
            held.dropped_group_limit() > 0,
            "the group limit was reached"
        );
        let sorted = |r: &Rollup| {
            let mut rows = r.rows();
            rows.sort_by(|a, b| (a.bucket, a.key).cmp(&(b.bucket, b.key)));
            format!("{rows:?}")
        };
        assert_eq!(sorted(&plain), sorted(&held));
    }

    #[test]
    fn key_hash_spreads_low_and_high_bits() {
        // Keys that differ in one byte, as dimension keys of IP prefixes do,
        // land in different low-bit slots and carry different top-7-bit tags.
        let mut low = std::collections::HashSet::new();
        let mut tags = std::collections::HashSet::new();
        for i in 0..=255u8 {
            let key = [b'1', b'.', b'2', b'.', i, b'.', b'9', b'.', b'7'];
            let h = key_hash(0, &key);
            low.insert(h & 1023);
            tags.insert(h >> 57);
        }
        assert!(low.len() > 200, "{}", low.len());
        assert!(tags.len() > 100, "{}", tags.len());
        assert_ne!(key_hash(0, b"a"), key_hash(0, b"a\0"));
        assert_ne!(key_hash(0, b"a"), key_hash(86_400_000, b"a"));
    }

    #[test]
    fn shared_quantiles_read_an_earlier_sketch_and_merge() {
        use crate::agg::Ranks;
        let ranks = |r: &[f64]| Ranks::new(r).expect("valid ranks");
        let shape = Shape {
            aggs: vec![
                AggKind::Quantiles {
                    k: 200,
                    ranks: ranks(&[0.5]),
                },
                AggKind::QuantilesOf {
                    of: 0,
                    ranks: ranks(&[0.25, 1.0]),
                },
            ],
        };
        let mut a = Rollup::new(shape.clone(), Limits::default()).expect("valid");
        let mut b = Rollup::new(shape, Limits::default()).expect("valid");
        for v in 1..=100 {
            let inputs = [Input::Number(f64::from(v)), Input::Number(f64::from(v))];
            let into = if v % 2 == 0 { &mut a } else { &mut b };
            assert_eq!(into.fold(Timestamp(0), b"k", &inputs), Folded::Ok);
        }
        a.merge(&b).expect("same shape");
        let rows = a.rows();
        assert_eq!(
            rows[0].outputs[1],
            Output::Quantiles {
                values: vec![(0.25, Some(25.0)), (1.0, Some(100.0))],
                rank_error: match &rows[0].outputs[0] {
                    Output::Quantiles { rank_error, .. } => *rank_error,
                    other => panic!("{other:?}"),
                },
            }
        );
        // Only an earlier quantiles aggregate can be read.
        for aggs in [
            vec![AggKind::QuantilesOf {
                of: 0,
                ranks: ranks(&[]),
            }],
            vec![
                AggKind::Sum,
                AggKind::QuantilesOf {
                    of: 0,
                    ranks: ranks(&[]),
                },
            ],
        ] {
            assert!(Rollup::new(Shape { aggs }, Limits::default()).is_err());
        }
    }

    proptest::proptest! {
        /// A key hashed from its words is hashed as from its bytes, at
        /// every length up to 16 and in any bucket.
        #[test]
        fn key_hash_of_words_is_of_bytes(
            key in proptest::collection::vec(proptest::num::u8::ANY, 0..=16),
            bucket: i64,
        ) {
            let words = cardinal_event::bytes::short_words(&key).expect("at most 16 bytes");
            proptest::prop_assert_eq!(
                KeyHash::of_words(Timestamp(bucket), words, key.len()),
                KeyHash::of(Timestamp(bucket), &key)
            );
        }
    }

    proptest::proptest! {
        /// A located group's state of one aggregate is that group's, in
        /// a rollup of one part or of many: counts folded through
        /// [`Rollup::aggregate_states`] equal a map's.
        #[test]
        fn aggregate_states_are_their_groups(
            keys in proptest::collection::vec(0u8..40, 0..600),
            parts_after in proptest::prop_oneof![0usize..50, proptest::strategy::Just(usize::MAX)],
        ) {
            use std::collections::BTreeMap;
            let shape = Shape { aggs: vec![AggKind::CountAll, AggKind::CountAll] };
            let mut rollup = Rollup::new(shape, Limits::default())
                .expect("valid")
                .with_parts_after(parts_after);
            let mut want: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
            for &key in &keys {
                let at = rollup.locate(Timestamp(0), &[key]).expect("within the limits");
                rollup.aggregate_states(1).at(at).fold_count();
                *want.entry(vec![key]).or_default() += 1;
            }
            let got: BTreeMap<Vec<u8>, u64> = rollup
                .groups()
                .map(|(_, key, states)| {
                    proptest::prop_assert!(matches!(states[0], AggState::Count(0)));
                    let AggState::Count(n) = states[1] else { unreachable!("a count") };
                    Ok((key.to_vec(), n))
                })
                .collect::<Result<_, _>>()?;
            proptest::prop_assert_eq!(got, want);
            if rollup.group_count() > parts_after {
                proptest::prop_assert_eq!(rollup.parts(), PARTS);
            }
        }

        /// The index finds every group again through growth and eviction:
        /// per-group counts equal a map's, whatever the keys.
        #[test]
        fn counts_per_group_equal_a_maps(
            folds in proptest::collection::vec(
                (0i64..4, proptest::collection::vec(0u8..4, 0..44)),
                0..3000,
            ),
            evict_at in 0usize..3000,
            parts_after in proptest::prop_oneof![0usize..100, proptest::strategy::Just(usize::MAX)],
        ) {
            use std::collections::BTreeMap;
            let limits = Limits { retention_ms: Some(1), ..Limits::default() };
            let mut rollup = Rollup::new(Shape { aggs: vec![AggKind::CountAll] }, limits)
                .expect("valid")
                .with_parts_after(parts_after);
            let mut want: BTreeMap<(i64, Vec<u8>), u64> = BTreeMap::new();
            for (i, (bucket, key)) in folds.iter().enumerate() {
                if i == evict_at {
                    rollup.evict_expired();
                    let newest = rollup.newest_bucket;
                    want.retain(|(b, _), _| *b >= newest - 1);
                }
                if rollup.fold(Timestamp(*bucket), key, &[Input::Null]) == Folded::Ok {
                    *want.entry((*bucket, key.clone())).or_default() += 1;
                }
            }
            let got: BTreeMap<(i64, Vec<u8>), u64> = rollup
                .groups()
                .map(|(bucket, key, states)| {
                    let AggState::Count(n) = states[0] else { unreachable!("a count") };
                    ((bucket.0, key.to_vec()), n)
                })
                .collect();
            proptest::prop_assert_eq!(got.len(), rollup.group_count());
            proptest::prop_assert_eq!(got, want);
            // Split once it held parts_after groups (eviction may have
            // dropped some since), never before.
            if rollup.group_count() >= parts_after {
                proptest::prop_assert_eq!(rollup.parts(), PARTS);
            }
            if parts_after > folds.len() {
                proptest::prop_assert_eq!(rollup.parts(), 1);
            }
        }
    }
}
