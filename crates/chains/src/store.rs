//! The store: shards grouped under single writers, each group with its own
//! arena.
//!
//! ```text
//!  user id --mix--> h (64 bits)
//!                   | top shard_bits         | rest
//!                   | top group_bits |       |
//!                   v                v       v
//!  Store ─ groups[g] ─ shards[s] (Table, index.rs) ─ slot ─> Handle ─> Arena (arena.rs)
//!          one writer    ~1/2^shard_bits of keys      12 B      u32    pages of slots
//! ```
//!
//! A [`ShardGroup`] owns the shards whose top `group_bits` hash bits equal
//! its number, and one arena for their chains. Groups share nothing, so a
//! caller moves each to its own thread and routes appends with
//! [`Router::group_of`]; there are no locks. [`Store`] is the convenience of
//! holding all groups in one place (tests, single-threaded tools,
//! snapshots).
//!
//! Cost of every operation, which is what keeps the worst case bounded:
//! - append: one probe, one record write; sometimes a chain move (a copy of
//!   at most `CHAIN_BYTES_MAX`); sometimes a shard growth (a rehash of one
//!   shard, ~keys/shards entries);
//! - take: one probe, a walk of one chain, one backward shift;
//! - trim slice: `budget` index slots' age tags (one byte each); the chains
//!   of expired users are freed without being read.
//!
//! Expiry. The group's clock is the latest `now_ms` a trim slice was given;
//! records older than `clock - lookback` are expired. Reads (`chain`,
//! `take`, snapshots) never return an expired record and an append of one
//! is refused (counted in [`AppendOutcome::expired`]), so what a user sees
//! depends on the clock alone, not on where the trim cursor stands. The
//! bytes go later: a user whose records have all expired is removed by the
//! trim slice that next reaches the user's slot, and a chain that still
//! holds newer records sheds its expired ones when an append or a trim
//! reads it.
//!
//! Age tags. Beside each shard's slot array is an array of one `u8` per
//! slot: the time of the chain's newest record in units of
//! `ceil(lookback / 64)`, wrapping modulo 256. Appends raise it; the trim
//! reads it. A trim slice compares tags with the cutoff eight at a time:
//! a tag a whole unit before the cutoff's means every record has expired,
//! and the chain is freed and its key removed without reading the chain
//! (a cold chain costs a cache and a TLB miss: at 200M keys that read was
//! most of the store's time); a tag in the cutoff's own unit means the
//! user may have expired, and a slice leaves it for a later pass, which
//! frees it unread (`trim_all` reads it to decide); any later tag means
//! nothing of the user can go yet. So a user goes at most a unit and a
//! pass after its last record expired. A tag may be up to
//! [`TAG_FUTURE_UNITS_MAX`] units ahead of the clock (records newer than
//! the last trim) and is at most 66 units old when written or left by a
//! check; tags are trusted only while the last complete pass started at
//! most [`TAG_GAP_UNITS_MAX`] units ago, so a trusted
//! tag's wrapped age is its true age. Whenever a tag could be wrong (a
//! new or restored group, a record further ahead of the clock than the
//! tags reach, a long gap between slices, a clock going backwards) the
//! trim reads every chain instead of trusting tags (a full pass) until a
//! whole pass has run with none of these. Tags cost 1 byte per slot
//! (index 13 B per slot).

use crate::arena::{
    Arena, CHAIN_BYTES_MAX, CLASS_BYTES, CLASS_COUNT, HEADER_BYTES, class_for, set_used, used_of,
};
use crate::error::{Error, Result};
use crate::index::{
    GROWTH_DEN, GROWTH_NUM, LOAD_DEN, LOAD_NUM, Probe, SHARD_SLOTS_MAX, Table, mix,
};
use crate::record::{RECORD_BYTES_MAX, Record, encoded_len_at, time_ms_at};

/// Largest `shard_bits`: 2^20 shards. Each shard costs ~40 bytes of
/// bookkeeping and at least `SHARD_SLOTS_INITIAL_MIN` slots, so a million
/// shards are 40 MiB before the first key; past that the bookkeeping, not
/// the growth pause, dominates. [`Config::validate`] rejects more.
pub const SHARD_BITS_MAX: u8 = 20;
/// Smallest first capacity of a shard.
pub const SHARD_SLOTS_INITIAL_MIN: u32 = 4;
/// Keys per shard that [`Config::for_keys`] aims at: growing a shard of this
/// many keys rehashes them in well under the 1 ms goal. At 200M keys a
/// growth costs ~30-90 ns per key (a cold table in, a fresh one out), so
/// one operation at a time, shards of 8K keys passed 1 ms in 84 of 884K
/// growths and shards of 4K keys in 1 of 1.57M (bench/JOURNAL.md,
/// "Journeys"), for 40 bytes of bookkeeping per shard and no change in
/// throughput.
pub const SHARD_KEYS_TARGET: u64 = 4 * 1024;
/// How many candidates ahead of its cursor a trim slice prefetches (a
/// chain it will read, or the free-map word of one it will free): enough
/// to cover a memory access at the ~10-20 ns a cached candidate costs.
const TRIM_PREFETCH_CHAINS: usize = 16;
/// How many index slots ahead of its candidate scan a trim slice streams
/// slots into cache (6 KiB at 12 bytes a slot). The scan reads only the
/// slots whose tag is due, a few per cache line of slots and too sparse
/// for the hardware prefetcher: each was a cache (and often TLB) miss.
const TRIM_PREFETCH_SLOTS: usize = 512;
/// Slots per prefetch as the stream advances: under a 64-byte line's 5.3
/// slots, so every line is asked for.
const TRIM_PREFETCH_STEP: usize = 4;
/// Age tag units per lookback: a tag counts time in units of
/// `ceil(lookback_ms / 64)` (at least 1 ms), so a chain's oldest record is
/// known to within 1/64 of the lookback and a `u8` tag wraps after four
/// lookbacks.
pub const TAG_UNITS_PER_LOOKBACK: u64 = 64;
/// How long, in tag units, the tags stay trusted after the start of the
/// last complete trim pass (128 units: 2 lookbacks). A tag is at most
/// `TAG_UNITS_PER_LOOKBACK + 2` units old when written or checked, so
/// within this gap no tag is older than 194 units, and none is mistaken
/// for one ahead of the clock. Past it (trim slices too rare for the
/// store's size, or a long idle gap), the next slice starts a full pass
/// that reads every chain and rewrites every tag.
pub const TAG_GAP_UNITS_MAX: u64 = 128;
/// How far ahead of the clock, in tag units, a tag may be (32 units: half
/// a lookback): records newer than the last trim slice's `now_ms`, as
/// appends between slices make. A record further ahead gets this tag
/// (older than its time, so the tag can no longer be trusted to keep the
/// chain) and the trim reads every chain until a pass meets no such tag.
pub const TAG_FUTURE_UNITS_MAX: u64 = 32;

const _: () = assert!(TAG_GAP_UNITS_MAX + TAG_UNITS_PER_LOOKBACK + 2 < 256 - TAG_FUTURE_UNITS_MAX);
/// Pairs [`ShardGroup::append_batch`] hashes and prefetches ahead of its
/// appends. Each pair in flight holds an index line and a chain line on
/// their way from memory; 32 covers the memory latency (~100 ns) at the
/// ~10 ns a cached append costs, and keeps the window's lines (2 per pair,
/// 4 KiB) in L1. Measured in bench/JOURNAL.md ("Journeys").
pub const APPEND_BATCH_WINDOW: usize = 32;

/// A user id: the key of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UserId(pub u64);

/// How the store is laid out. Checked by [`Config::validate`], which every
/// constructor calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The store has `2^shard_bits` shards, `0..=SHARD_BITS_MAX`.
    pub shard_bits: u8,
    /// The store has `2^group_bits` shard groups (writers), at most
    /// `shard_bits`.
    pub group_bits: u8,
    /// Records older than `now - lookback_ms` are dropped by trimming.
    pub lookback_ms: u64,
    /// First capacity of a shard, before staggering, at least
    /// [`SHARD_SLOTS_INITIAL_MIN`].
    pub shard_slots_initial: u32,
}

impl Default for Config {
    /// 256 shards in 1 group, a 30-day lookback, 64 slots per shard.
    fn default() -> Config {
        Config {
            shard_bits: 8,
            group_bits: 0,
            lookback_ms: 30 * 24 * 3600 * 1000,
            shard_slots_initial: 64,
        }
    }
}

impl Config {
    /// A layout for up to `keys_max` keys in `2^group_bits` groups: enough
    /// shards that each holds about [`SHARD_KEYS_TARGET`] keys at
    /// `keys_max`, so that no shard growth passes the 1 ms goal.
    pub fn for_keys(keys_max: u64, group_bits: u8, lookback_ms: u64) -> Config {
        let shards = keys_max.div_ceil(SHARD_KEYS_TARGET).max(1);
        let shard_bits = u8::try_from(64 - (shards - 1).leading_zeros())
            .expect("at most 64")
            .clamp(group_bits, SHARD_BITS_MAX);
        Config {
            shard_bits,
            group_bits,
            lookback_ms,
            shard_slots_initial: 16,
        }
    }

    /// Checks every field's range.
    pub fn validate(&self) -> Result<()> {
        if self.shard_bits > SHARD_BITS_MAX {
            return Err(invalid(
                "shard_bits",
                self.shard_bits.into(),
                "0..=SHARD_BITS_MAX (20)",
            ));
        }
        if self.group_bits > self.shard_bits {
            return Err(invalid(
                "group_bits",
                self.group_bits.into(),
                "0..=shard_bits",
            ));
        }
        if !(SHARD_SLOTS_INITIAL_MIN..=SHARD_SLOTS_MAX / 2).contains(&self.shard_slots_initial) {
            return Err(invalid(
                "shard_slots_initial",
                self.shard_slots_initial.into(),
                "SHARD_SLOTS_INITIAL_MIN..=SHARD_SLOTS_MAX / 2",
            ));
        }
        Ok(())
    }

    /// The router for this layout.
    pub fn router(&self) -> Router {
        Router {
            shard_bits: self.shard_bits,
            group_bits: self.group_bits,
        }
    }

    pub(crate) fn shard_count(&self) -> u32 {
        1 << self.shard_bits
    }

    pub(crate) fn shards_per_group(&self) -> u32 {
        1 << (self.shard_bits - self.group_bits)
    }
}

fn invalid(name: &'static str, value: u64, reason: &'static str) -> Error {
    Error::InvalidConfig {
        name,
        value,
        reason,
    }
}

/// Routes user ids to shards and shard groups. `Copy`, so the ingest stage
/// keeps one and sends each event to its group's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Router {
    shard_bits: u8,
    group_bits: u8,
}

impl Router {
    /// The shard (`0..2^shard_bits`) that holds `user`'s chain.
    #[inline]
    pub fn shard_of(&self, user: UserId) -> u32 {
        top_bits(mix(user.0), self.shard_bits)
    }

    /// The shard group (`0..2^group_bits`) that owns `user`'s chain.
    #[inline]
    pub fn group_of(&self, user: UserId) -> u32 {
        top_bits(mix(user.0), self.group_bits)
    }
}

#[inline]
fn top_bits(h: u64, bits: u8) -> u32 {
    if bits == 0 {
        0
    } else {
        u32::try_from(h >> (64 - u32::from(bits))).expect("bits <= 20")
    }
}

/// What an append did besides writing the record; the benchmark tags slow
/// operations by these causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AppendOutcome {
    /// The user had no chain before.
    pub new_key: bool,
    /// The chain outgrew its slot and moved to the next size class.
    pub chain_moved: bool,
    /// The user's shard grew (rehashed its keys into a 5/4 larger table).
    pub shard_grew: bool,
    /// Oldest records dropped because the chain reached [`CHAIN_BYTES_MAX`].
    pub records_evicted: u32,
    /// The record was older than the lookback at the group's clock (see
    /// the module doc, "Expiry") and was not stored; nothing changed.
    pub expired: bool,
}

/// What one trim slice did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrimOutcome {
    /// Index slots examined (the slice's budget unless a pass ended).
    pub slots_scanned: u64,
    /// Expired records dropped from the chains the slice read. The records
    /// of a chain freed unread are not counted (not knowing them is what
    /// makes that free cheap).
    pub records_dropped: u64,
    /// Chains whose records had all expired, removed with their key.
    pub chains_removed: u64,
    /// Of `chains_removed`, those freed without being read.
    pub chains_removed_unread: u64,
    /// Chains moved to a smaller size class after shrinking.
    pub chains_moved: u64,
    /// Chains read: every chain in a full pass; with trusted tags none in
    /// a slice, and in `trim_all` those whose age tag is in the cutoff's
    /// unit.
    pub chains_read: u64,
    /// The slice read every chain it met (tags not trusted, see the module
    /// doc).
    pub full_pass: bool,
    /// The slice finished a pass over every shard of the group.
    pub pass_done: bool,
}

impl TrimOutcome {
    /// Adds `other`'s counts to these (its flags are or-ed in): the
    /// outcome of several slices, groups or passes together.
    pub fn add(&mut self, other: &TrimOutcome) {
        self.slots_scanned += other.slots_scanned;
        self.records_dropped += other.records_dropped;
        self.chains_removed += other.chains_removed;
        self.chains_removed_unread += other.chains_removed_unread;
        self.chains_moved += other.chains_moved;
        self.chains_read += other.chains_read;
        self.full_pass |= other.full_pass;
        self.pass_done |= other.pass_done;
    }
}

/// The store's own byte counts. `heap_bytes` is every byte the store holds
/// from the global allocator (tests/memory.rs checks it against a counting
/// allocator); the arena's pages are mapped apart (`arena_bytes`,
/// `arena_mapped_bytes`); [`MemoryStats::held_bytes`] is both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Users with a chain in the index, including users whose records
    /// have all expired and whom the trim has not reached yet.
    pub keys: u64,
    /// Bytes of encoded records that have not expired at the clock.
    pub record_bytes: u64,
    /// Bytes of expired records still in chains (dropped when an append
    /// or the trim next reads the chain, or with the whole chain).
    pub expired_bytes: u64,
    /// Bytes of index slots and their age tags (13 per slot).
    pub index_bytes: u64,
    /// Bytes of arena slots in use (headers, records and slack).
    pub slot_bytes: u64,
    /// Bytes of arena pages (slots in use, free slots, uncarved space).
    /// A page whose slots are all freed is given back, except a size
    /// class's newest page, which is kept for the class's next chain.
    pub arena_bytes: u64,
    /// Arena pages held with no slot in use: at most one per size class
    /// per shard group ([`crate::CLASS_COUNT`]), each its class's newest.
    pub arena_pages_idle: u64,
    /// Bytes of the arena's 2 MiB chunks mapped from the kernel: pages held
    /// (`arena_bytes`), and pages returned (released, not resident) or not
    /// yet carved. Chunks faulted in ahead belong to the process:
    /// [`crate::arena_ready_bytes`].
    pub arena_mapped_bytes: u64,
    /// Chunks an arena mapped on the appending thread after it had started
    /// to get them faulted in ahead: times the prefault thread fell behind.
    pub arena_chunks_mapped_inline: u64,
    /// Every byte from the global allocator: index, free maps and all
    /// bookkeeping. Arena pages are mapped apart (`arena_bytes`).
    pub heap_bytes: u64,
}

impl MemoryStats {
    fn add(&mut self, other: &MemoryStats) {
        self.keys += other.keys;
        self.record_bytes += other.record_bytes;
        self.expired_bytes += other.expired_bytes;
        self.index_bytes += other.index_bytes;
        self.slot_bytes += other.slot_bytes;
        self.arena_bytes += other.arena_bytes;
        self.arena_pages_idle += other.arena_pages_idle;
        self.arena_mapped_bytes += other.arena_mapped_bytes;
        self.arena_chunks_mapped_inline += other.arena_chunks_mapped_inline;
        self.heap_bytes += other.heap_bytes;
    }

    /// Bytes the store holds in use: the heap and the arena's pages.
    pub fn held_bytes(&self) -> u64 {
        self.heap_bytes + self.arena_bytes
    }
}

/// Shards with one writer: the unit a caller moves to a thread.
#[derive(Debug)]
pub struct ShardGroup {
    group: u32,
    config: Config,
    shards: Vec<Table>,
    arena: Arena,
    /// A slot's worth of bytes for moving chains between slots of one arena,
    /// allocated by the first move ([`ShardGroup::scratch`]).
    scratch: Vec<u8>,
    keys: u64,
    cursor_shard: usize,
    cursor_slot: usize,
    /// The age tags' unit, `ceil(lookback_ms / TAG_UNITS_PER_LOOKBACK)`.
    tag_unit_ms: u64,
    /// The latest `now_ms` a trim slice was given: the tags' clock.
    clock_ms: u64,
    /// The clock's tag unit, and the time that unit starts at: an append
    /// at the clock's time (the common case) takes its tag without a
    /// division.
    clock_unit: u8,
    clock_unit_start_ms: u64,
    /// The clock when the current trim pass started.
    pass_start_ms: u64,
    /// The clock when the last complete pass started: every chain has been
    /// checked by a trim or had its tag written since.
    checked_since_ms: u64,
    /// The current pass reads every chain (the tags were not trusted).
    full_pass: bool,
    /// A tag was written older than its chain's newest record (a record
    /// too far ahead of the clock) since the current pass started: the
    /// next pass reads every chain too.
    tags_clamped: bool,
}

impl ShardGroup {
    /// An empty group number `group` of the layout `config`, its shards'
    /// capacities staggered over one growth step (index.rs).
    pub fn new(config: Config, group: u32) -> Result<ShardGroup> {
        let mut new = ShardGroup::without_shards(config, group)?;
        new.shards = (0..config.shards_per_group())
            .map(|local| {
                Table::with_capacity(
                    initial_capacity(&config, group, local as usize),
                    u32::from(config.shard_bits),
                    true,
                )
            })
            .collect();
        Ok(new)
    }

    /// Group `group` of `config` with no shard tables yet, which allocates
    /// nothing: [`ShardGroup::new`] adds every table at once, a snapshot
    /// restore one per section as the section arrives
    /// ([`ShardGroup::restore_shard`]).
    pub(crate) fn without_shards(config: Config, group: u32) -> Result<ShardGroup> {
        config.validate()?;
        if group >= 1 << config.group_bits {
            return Err(invalid("group", group.into(), "0..2^group_bits"));
        }
        Ok(ShardGroup {
            group,
            config,
            shards: Vec::new(),
            arena: Arena::new(),
            scratch: Vec::new(),
            keys: 0,
            cursor_shard: 0,
            cursor_slot: 0,
            tag_unit_ms: config.lookback_ms.div_ceil(TAG_UNITS_PER_LOOKBACK).max(1),
            clock_ms: 0,
            clock_unit: 0,
            clock_unit_start_ms: 0,
            pass_start_ms: 0,
            checked_since_ms: 0,
            // No tag is known to be right until a pass has read them all.
            full_pass: true,
            tags_clamped: false,
        })
    }

    /// The age tag of a chain whose newest record is at `time_ms`: its tag
    /// unit, wrapping. The time is clamped to no older than just expired at
    /// the clock (a later tag keeps a chain longer, never shorter) and to
    /// at most [`TAG_FUTURE_UNITS_MAX`] ahead of it; the second clamp makes
    /// the tag older than the chain (the `bool`), and whoever writes such a
    /// tag calls [`ShardGroup::clamped_at`].
    #[inline]
    fn tag_for(&self, time_ms: u64) -> (u8, bool) {
        if time_ms.wrapping_sub(self.clock_unit_start_ms) < self.tag_unit_ms {
            return (self.clock_unit, false);
        }
        tag_of(
            time_ms,
            self.clock_ms,
            self.config.lookback_ms,
            self.tag_unit_ms,
        )
    }

    /// A tag older than its chain was written at `slot` of local shard
    /// `shard`: the rest of this pass reads every chain, and so does the
    /// next one if the slot is behind the cursor (this pass will not come
    /// back to it).
    fn clamped_at(&mut self, shard: usize, slot: usize) {
        self.full_pass = true;
        if (shard, slot) < (self.cursor_shard, self.cursor_slot) {
            self.tags_clamped = true;
        }
    }

    fn set_clock(&mut self, clock_ms: u64) {
        self.clock_ms = clock_ms;
        self.clock_unit = unit_of(clock_ms, self.tag_unit_ms);
        self.clock_unit_start_ms = clock_ms / self.tag_unit_ms * self.tag_unit_ms;
    }

    /// Records older than this have expired (module doc, "Expiry").
    #[inline]
    fn cutoff_ms(&self) -> u64 {
        self.clock_ms.saturating_sub(self.config.lookback_ms)
    }

    /// The buffer for chain moves, allocated on first use: a group that
    /// never moves a chain (one fresh from a snapshot) does not pay for it.
    fn scratch(scratch: &mut Vec<u8>) -> &mut [u8] {
        if scratch.is_empty() {
            *scratch = vec![0; CHAIN_BYTES_MAX + RECORD_BYTES_MAX];
        }
        scratch
    }

    /// This group's number.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The layout this group belongs to.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Users with a chain in this group.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    fn locate(&self, user: UserId) -> Result<(usize, u64)> {
        let h = mix(user.0);
        let shard = top_bits(h, self.config.shard_bits);
        let per_group = self.config.shards_per_group();
        let owner = shard / per_group;
        if owner != self.group {
            return Err(Error::WrongGroup {
                user_id: user.0,
                group: self.group,
                owner,
            });
        }
        Ok(((shard % per_group) as usize, h))
    }

    /// Appends `record` to `user`'s chain, creating the chain if needed.
    ///
    /// Limits: a chain past [`CHAIN_BYTES_MAX`] drops its oldest records
    /// (counted in the outcome); a full arena ([`crate::ARENA_BYTES_MAX`])
    /// or shard ([`SHARD_SLOTS_MAX`]) fails with [`Error::LimitExceeded`]
    /// and changes nothing. A user of another group fails with
    /// [`Error::WrongGroup`].
    pub fn append(&mut self, user: UserId, record: &Record) -> Result<AppendOutcome> {
        let (shard, h) = self.locate(user)?;
        self.append_located(user, shard, h, record)
    }

    /// [`ShardGroup::append`] of every pair in order, with the same result
    /// as one call per pair: each outcome is pushed to `outcomes`, and the
    /// first error stops the batch (the pairs before it stay appended, as
    /// `outcomes.len()` tells).
    ///
    /// Faster than one call per pair on a store larger than the caches: the
    /// pairs go in windows of [`APPEND_BATCH_WINDOW`]; for a window, every
    /// user is hashed and its index slot prefetched, then every user is
    /// probed and its chain's slot prefetched, then the appends run on
    /// cache lines already on their way, so the window's misses overlap
    /// instead of following one another.
    pub fn append_batch(
        &mut self,
        batch: &[(UserId, Record)],
        outcomes: &mut Vec<AppendOutcome>,
    ) -> Result<()> {
        let mut hashes = [0u64; APPEND_BATCH_WINDOW];
        for window in batch.chunks(APPEND_BATCH_WINDOW) {
            for ((user, _), h) in window.iter().zip(&mut hashes) {
                *h = mix(user.0);
                if let Some(shard) = self.local_shard(*h) {
                    self.shards[shard].prefetch(*h);
                }
            }
            // Probing before any append of the window sees the state before
            // the window: a handle found here may have moved by the time its
            // append runs, and a new user's slot is where the arena would
            // put the window's next chain of its class. Both are only
            // prefetch hints; the append probes and allocates again.
            let mut new_of_class = [0u8; CLASS_COUNT];
            for ((user, record), &h) in window.iter().zip(&hashes) {
                let Some(shard) = self.local_shard(h) else {
                    continue;
                };
                match self.shards[shard].probe(user.0, h) {
                    Probe::Found(_, handle) => self.arena.prefetch(handle),
                    Probe::Vacant(_) => {
                        let class = class_for(HEADER_BYTES + record.encoded_len());
                        let nth = &mut new_of_class[class];
                        self.arena.prefetch_nth_free(class, usize::from(*nth));
                        *nth += 1;
                    }
                }
            }
            for ((user, record), &h) in window.iter().zip(&hashes) {
                let Some(shard) = self.local_shard(h) else {
                    // The error `append` gives, at this pair's turn.
                    return Err(self.locate(*user).expect_err("not this group's user"));
                };
                outcomes.push(self.append_located(*user, shard, h, record)?);
            }
        }
        Ok(())
    }

    /// The local shard of hash `h`, or `None` if another group owns it.
    #[inline]
    fn local_shard(&self, h: u64) -> Option<usize> {
        let shard = top_bits(h, self.config.shard_bits);
        let per_group = self.config.shards_per_group();
        (shard / per_group == self.group).then_some((shard % per_group) as usize)
    }

    fn append_located(
        &mut self,
        user: UserId,
        shard: usize,
        h: u64,
        record: &Record,
    ) -> Result<AppendOutcome> {
        let mut outcome = AppendOutcome::default();
        let time_ms = record.time_ms();
        let cutoff = self.cutoff_ms();
        if time_ms < cutoff {
            outcome.expired = true;
            return Ok(outcome);
        }
        let mut bytes = [0u8; RECORD_BYTES_MAX];
        let n = record.encode_into(&mut bytes);
        let bytes = &bytes[..n];
        let (tag, clamped) = self.tag_for(time_ms);
        let probe = self.shards[shard].probe(user.0, h);
        // The tag stands for the chain's newest record.
        if let Probe::Found(i, _) = probe
            && tag_age(self.clock_unit, tag)
                < tag_age(self.clock_unit, self.shards[shard].tags()[i])
        {
            self.shards[shard].set_tag(i, tag);
            if clamped {
                self.clamped_at(shard, i);
            }
        }
        let table = &mut self.shards[shard];
        let arena = &mut self.arena;
        match probe {
            Probe::Found(i, handle) => {
                let class = arena.class_of(handle);
                let slot = arena.slot_mut(handle);
                let mut used = used_of(slot);
                // A chain whose oldest record has expired sheds its expired
                // records now that it is in hand (the first record shares
                // the header's cache line).
                if used > 0 && time_ms_at(&slot[HEADER_BYTES..]) < cutoff {
                    let (kept, _, _) =
                        retain_recent(&mut slot[HEADER_BYTES..HEADER_BYTES + used], cutoff);
                    set_used(slot, kept);
                    used = kept;
                }
                outcome.new_key = used == 0;
                if HEADER_BYTES + used + n <= CLASS_BYTES[class] as usize
                    && used + n <= CHAIN_BYTES_MAX
                {
                    slot[HEADER_BYTES + used..HEADER_BYTES + used + n].copy_from_slice(bytes);
                    set_used(slot, used + n);
                } else {
                    // Expired records out of time order may hide behind a
                    // live first one: drop them before evicting live ones.
                    let (used, _, _) =
                        retain_recent(&mut slot[HEADER_BYTES..HEADER_BYTES + used], cutoff);
                    set_used(slot, used);
                    let evict_bytes = evict_prefix(arena.chain(handle), n, &mut outcome);
                    let kept = used - evict_bytes;
                    let new_class = class_for(HEADER_BYTES + kept + n);
                    if new_class == class {
                        let slot = arena.slot_mut(handle);
                        slot.copy_within(
                            HEADER_BYTES + evict_bytes..HEADER_BYTES + used,
                            HEADER_BYTES,
                        );
                        slot[HEADER_BYTES + kept..HEADER_BYTES + kept + n].copy_from_slice(bytes);
                        set_used(slot, kept + n);
                    } else {
                        let moved = arena.alloc(new_class)?;
                        let scratch = ShardGroup::scratch(&mut self.scratch);
                        scratch[..kept].copy_from_slice(&arena.chain(handle)[evict_bytes..]);
                        scratch[kept..kept + n].copy_from_slice(bytes);
                        let slot = arena.slot_mut(moved);
                        slot[HEADER_BYTES..HEADER_BYTES + kept + n]
                            .copy_from_slice(&scratch[..kept + n]);
                        set_used(slot, kept + n);
                        arena.free(handle);
                        table.set_handle(i, moved);
                        outcome.chain_moved = true;
                    }
                }
            }
            Probe::Vacant(mut i) => {
                let handle = arena.alloc(class_for(HEADER_BYTES + n))?;
                if table.needs_growth() {
                    // A shard restored smaller than a new one (or empty)
                    // grows straight to the staggered first capacity.
                    let initial = initial_capacity(&self.config, self.group, shard);
                    if let Err(e) = table.grow(initial) {
                        arena.free(handle);
                        return Err(e);
                    }
                    outcome.shard_grew = true;
                    // The rehash reordered the shard: a trim pass inside it
                    // starts the shard again so it checks every chain.
                    if shard == self.cursor_shard {
                        self.cursor_slot = 0;
                    }
                    i = match table.probe(user.0, h) {
                        Probe::Vacant(i) => i,
                        Probe::Found(..) => unreachable!("the key was absent before growing"),
                    };
                }
                let slot = arena.slot_mut(handle);
                slot[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(bytes);
                set_used(slot, n);
                table.put(i, user.0, handle, tag);
                self.keys += 1;
                outcome.new_key = true;
                if clamped {
                    self.clamped_at(shard, i);
                }
            }
        }
        Ok(outcome)
    }

    /// Appends `user`'s records that have not expired, in append order, to
    /// `out`; `false` if there are none.
    pub fn chain(&self, user: UserId, out: &mut Vec<Record>) -> Result<bool> {
        let (shard, h) = self.locate(user)?;
        match self.shards[shard].probe(user.0, h) {
            Probe::Found(_, handle) => {
                Ok(decode_recent(self.arena.chain(handle), self.cutoff_ms(), out) > 0)
            }
            Probe::Vacant(_) => Ok(false),
        }
    }

    /// A conversion: appends `user`'s records that have not expired, in
    /// append order, to `out`, then frees the chain and forgets the user.
    /// `false` if there were none.
    pub fn take(&mut self, user: UserId, out: &mut Vec<Record>) -> Result<bool> {
        let (shard, h) = self.locate(user)?;
        let cutoff = self.cutoff_ms();
        let table = &mut self.shards[shard];
        match table.probe(user.0, h) {
            Probe::Found(i, handle) => {
                let found = decode_recent(self.arena.chain(handle), cutoff, out) > 0;
                self.arena.free(handle);
                let mut other = 0;
                let cursor = if shard == self.cursor_shard {
                    &mut self.cursor_slot
                } else {
                    &mut other
                };
                table.remove_at(i, cursor);
                self.keys -= 1;
                Ok(found)
            }
            Probe::Vacant(_) => Ok(false),
        }
    }

    /// Advances the group's clock to `now_ms` (it never goes back) and trims
    /// the next `slots_budget` index slots, continuing where the previous
    /// slice stopped: a user whose records have all expired is removed with
    /// the chain, and a chain the slice reads sheds its expired records
    /// (and moves to a smaller class if it fits one). The cost of a slice
    /// is bounded by its budget (and `CHAIN_BYTES_MAX` per chain it reads),
    /// never by the store's size: trimming is never a stop-the-world sweep.
    ///
    /// With trusted age tags (module doc) a slice reads the tags of its
    /// slots (64 to a cache line) and frees the chains whose tag is a unit
    /// or more before the cutoff's without reading them; it reads no chain.
    /// A user whose tag is in the cutoff's own unit may have expired or
    /// not: it waits for a later pass, which frees it unread once the
    /// cutoff has passed its unit (its expired records are hidden from
    /// reads meanwhile, and [`ShardGroup::trim_all`] reads it to decide).
    /// Otherwise a slice reads every chain it meets (a full pass; after a
    /// gap, from the first shard).
    ///
    /// A pass visits every chain present when it started.
    pub fn trim_slice(&mut self, now_ms: u64, slots_budget: u64) -> TrimOutcome {
        self.slice(now_ms, slots_budget, false)
    }

    /// [`ShardGroup::trim_slice`]; `exact` also reads the chains whose tag
    /// is in the cutoff's own unit, so that a whole pass frees every user
    /// whose records have all expired ([`ShardGroup::trim_all`]).
    fn slice(&mut self, now_ms: u64, slots_budget: u64, exact: bool) -> TrimOutcome {
        let unit = self.tag_unit_ms;
        self.set_clock(self.clock_ms.max(now_ms));
        if !self.full_pass
            && self.clock_ms / unit - self.checked_since_ms / unit > TAG_GAP_UNITS_MAX
        {
            self.full_pass = true;
            self.cursor_shard = 0;
            self.cursor_slot = 0;
            self.pass_start_ms = self.clock_ms;
        }
        let cutoff = self.cutoff_ms();
        let lookback = self.config.lookback_ms;
        // `clock - cutoff` is at most a lookback: at most 64 units.
        #[allow(clippy::cast_possible_truncation)]
        let ages = Ages {
            now: (self.clock_ms / unit) as u8,
            cutoff: (self.clock_ms / unit - cutoff / unit) as u8,
        };
        // The tags the slice acts on: trusted and not exact, only those
        // that prove expiry (reading the cutoff unit's chains, each a cold
        // cache and TLB miss, was a tenth of the store's time at 200M keys).
        let scan = Ages {
            now: ages.now,
            cutoff: ages.cutoff + u8::from(!self.full_pass && !exact),
        };
        let mut outcome = TrimOutcome {
            full_pass: self.full_pass,
            ..TrimOutcome::default()
        };
        // Where the prefetching scan stands, and how many chains it has
        // asked for that the slice has not reached yet.
        let mut ahead = self.cursor_slot;
        let mut in_flight = 0;
        let mut streamed = self.cursor_slot;
        'slots: while outcome.slots_scanned < slots_budget {
            // A shard restored without keys has no slots: skip it.
            while self.cursor_slot >= self.shards[self.cursor_shard].capacity() as usize {
                self.cursor_slot = 0;
                ahead = 0;
                in_flight = 0;
                streamed = 0;
                self.cursor_shard += 1;
                if self.cursor_shard == self.shards.len() {
                    self.cursor_shard = 0;
                    outcome.pass_done = true;
                    self.checked_since_ms = self.pass_start_ms;
                    self.pass_start_ms = self.clock_ms;
                    self.full_pass = self.tags_clamped;
                    self.tags_clamped = false;
                    break 'slots;
                }
            }
            let trusted = !self.full_pass;
            let table = &mut self.shards[self.cursor_shard];
            let capacity = table.capacity() as usize;
            let budget_left =
                usize::try_from(slots_budget - outcome.slots_scanned).unwrap_or(usize::MAX);
            let limit = capacity.min(self.cursor_slot.saturating_add(budget_left));
            // The chains are not in slot order: for the next
            // `TRIM_PREFETCH_CHAINS` candidates, ask for the chain the slice
            // will read, or the free-map word it will write for a chain it
            // frees unread, so their lines arrive while the slice works on
            // earlier ones.
            ahead = ahead.max(self.cursor_slot);
            streamed = streamed.max(ahead);
            let stream_to = limit.min(ahead + TRIM_PREFETCH_SLOTS);
            while streamed < stream_to {
                table.prefetch_slot(streamed);
                streamed += TRIM_PREFETCH_STEP;
            }
            while in_flight < TRIM_PREFETCH_CHAINS && ahead < limit {
                let next = scan.next_candidate(table, ahead, limit, trusted);
                if next == limit {
                    ahead = limit;
                    break;
                }
                ahead = next + 1;
                let (_, handle) = table.entry(next).expect("a candidate is occupied");
                if trusted && ages.expired_whole(table.tags()[next]) {
                    self.arena.prefetch_free(handle);
                } else {
                    self.arena.prefetch(handle);
                }
                in_flight += 1;
            }
            // Slots with nothing to do are passed over in one tight loop
            // over the tags, within budget.
            let next = scan.next_candidate(table, self.cursor_slot, limit, trusted);
            outcome.slots_scanned += (next - self.cursor_slot) as u64;
            self.cursor_slot = next;
            if next == limit {
                continue;
            }
            outcome.slots_scanned += 1;
            let (_, handle) = table.entry(next).expect("a candidate is occupied");
            let expired_whole = trusted && ages.expired_whole(table.tags()[next]);
            in_flight = in_flight.saturating_sub(1);
            let (kept, dropped, newest) = if expired_whole {
                outcome.chains_removed_unread += 1;
                (0, 0, 0)
            } else {
                outcome.chains_read += 1;
                let slot = self.arena.slot_mut(handle);
                let used = used_of(slot);
                let (kept, dropped, newest) =
                    retain_recent(&mut slot[HEADER_BYTES..HEADER_BYTES + used], cutoff);
                outcome.records_dropped += dropped;
                if kept > 0 && dropped > 0 {
                    set_used(slot, kept);
                }
                (kept, dropped, newest)
            };
            if kept == 0 {
                self.arena.free(handle);
                // The backward shift may pull a later entry into this slot:
                // the cursor stays to examine it.
                let mut cursor = self.cursor_slot;
                table.remove_at(self.cursor_slot, &mut cursor);
                debug_assert_eq!(cursor, self.cursor_slot);
                self.keys -= 1;
                outcome.chains_removed += 1;
                continue;
            }
            // The exact tag of what is left.
            let (tag, clamped) = tag_of(newest, self.clock_ms, lookback, unit);
            if clamped {
                self.tags_clamped = true;
                self.full_pass = true;
                outcome.full_pass = true;
            }
            table.set_tag(self.cursor_slot, tag);
            if dropped == 0 {
                self.cursor_slot += 1;
                continue;
            }
            let class = class_for(HEADER_BYTES + kept);
            if class < self.arena.class_of(handle)
                && let Ok(moved) = self.arena.alloc(class)
            {
                let scratch = ShardGroup::scratch(&mut self.scratch);
                scratch[..kept].copy_from_slice(self.arena.chain(handle));
                let slot = self.arena.slot_mut(moved);
                slot[HEADER_BYTES..HEADER_BYTES + kept].copy_from_slice(&scratch[..kept]);
                set_used(slot, kept);
                self.arena.free(handle);
                table.set_handle(self.cursor_slot, moved);
                outcome.chains_moved += 1;
            }
            self.cursor_slot += 1;
        }
        outcome
    }

    /// Runs one whole trim pass from the first shard, in slices. For tests
    /// and for a caller that wants a trim boundary (before a snapshot).
    pub fn trim_all(&mut self, now_ms: u64) -> TrimOutcome {
        self.cursor_shard = 0;
        self.cursor_slot = 0;
        self.pass_start_ms = self.clock_ms.max(now_ms);
        let mut total = TrimOutcome::default();
        loop {
            let slice = self.slice(now_ms, 4096, true);
            total.add(&slice);
            if slice.pass_done {
                return total;
            }
        }
    }

    /// This group's byte counts. The record and expired bytes come from a
    /// walk of the arena, page by page (the store does not count them as
    /// it runs: a chain the trim frees unread has unknown bytes), so this
    /// costs a read of the arena: ~3 s for 12 GB. For reports and tests,
    /// not for a hot path.
    pub fn memory(&self) -> MemoryStats {
        let index_bytes: u64 = self.shards.iter().map(Table::heap_bytes).sum();
        let slot_bytes = self
            .arena
            .slots_live()
            .iter()
            .zip(CLASS_BYTES)
            .map(|(&count, bytes)| count * u64::from(bytes))
            .sum();
        let own = self.shards.capacity() * size_of::<Table>() + self.scratch.capacity();
        let cutoff = self.cutoff_ms();
        let (mut record_bytes, mut expired_bytes) = (0, 0);
        self.arena.for_each_chain(|chain| {
            let mut at = 0;
            while at < chain.len() {
                let len = encoded_len_at(&chain[at..]).expect("the arena holds valid records");
                if time_ms_at(&chain[at..]) >= cutoff {
                    record_bytes += len as u64;
                } else {
                    expired_bytes += len as u64;
                }
                at += len;
            }
        });
        MemoryStats {
            keys: self.keys,
            record_bytes,
            expired_bytes,
            index_bytes,
            slot_bytes,
            arena_bytes: self.arena.page_bytes(),
            arena_pages_idle: self.arena.pages_idle(),
            arena_mapped_bytes: self.arena.mapped_bytes(),
            arena_chunks_mapped_inline: self.arena.chunks_mapped_inline(),
            heap_bytes: index_bytes + self.arena.heap_bytes() + own as u64,
        }
    }

    /// Bytes this group holds: index slots and tags, arena pages and the
    /// arena's own heap. Cheap (no walk of the arena, unlike
    /// [`ShardGroup::memory`]): what a memory budget is checked against.
    pub fn held_bytes(&self) -> u64 {
        let index_bytes: u64 = self.shards.iter().map(Table::heap_bytes).sum();
        let own = self.shards.capacity() * size_of::<Table>() + self.scratch.capacity();
        index_bytes + self.arena.page_bytes() + self.arena.heap_bytes() + own as u64
    }

    /// Calls `f(user, chain bytes)` for every chain of local shard `shard`
    /// that holds a record that has not expired, with the expired records
    /// left out (snapshot writing).
    pub(crate) fn for_each_chain(&self, shard: usize, mut f: impl FnMut(u64, &[u8])) {
        let cutoff = self.cutoff_ms();
        let mut recent = Vec::new();
        let table = &self.shards[shard];
        for i in 0..table.capacity() as usize {
            if let Some((key, handle)) = table.entry(i) {
                recent.clear();
                recent.extend_from_slice(self.arena.chain(handle));
                let (kept, _, _) = retain_recent(&mut recent, cutoff);
                if kept > 0 {
                    f(key, &recent[..kept]);
                }
            }
        }
    }

    /// The clock of the group's trim (module doc, "Expiry").
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// Sets the clock of a group being restored, before its chains.
    pub(crate) fn restore_clock(&mut self, clock_ms: u64) {
        assert_eq!(self.keys, 0, "the clock is restored first");
        self.set_clock(clock_ms);
        self.pass_start_ms = clock_ms;
        self.checked_since_ms = clock_ms;
    }

    pub(crate) fn shard_len(&self, shard: usize) -> u32 {
        self.shards[shard].len()
    }

    pub(crate) fn shard_count_local(&self) -> usize {
        self.shards.len()
    }

    /// Adds the group's next shard table, sized for the `keys` keys its
    /// snapshot section holds, and returns its local number (snapshot
    /// restore: no shard grows while restoring).
    ///
    /// The size comes from `keys` alone, which the caller has checked
    /// against the section's bytes, never from `shard_slots_initial`: a
    /// header could ask for 2^27 slots in each of 2^20 shards, and a
    /// decoder allocates only what the bytes it has read back. A shard
    /// without keys gets a table of no slots; shards grow to at least
    /// their staggered `shard_slots_initial` later, as in a new store.
    pub(crate) fn restore_shard(&mut self, keys: u64) -> Result<usize> {
        let shard = self.shards.len();
        assert!(shard < self.config.shards_per_group() as usize);
        let shard_bits = u32::from(self.config.shard_bits);
        if keys == 0 {
            self.shards.push(Table::empty(shard_bits, true));
            return Ok(shard);
        }
        // The load right after growing (0.68) times the stagger, so restored
        // shards again reach their thresholds at spread-out moments.
        let base = keys * LOAD_DEN * GROWTH_NUM / (LOAD_NUM * GROWTH_DEN) + 1;
        let base = u32::try_from(base)
            .ok()
            .filter(|&b| b <= SHARD_SLOTS_MAX / 2)
            .ok_or(Error::LimitExceeded {
                limit: "SHARD_SLOTS_MAX",
                max: SHARD_SLOTS_MAX.into(),
                found: base,
            })?;
        let capacity = staggered(
            base.max(SHARD_SLOTS_INITIAL_MIN),
            global_shard(&self.config, self.group, shard),
            self.config.shard_count(),
        );
        self.shards
            .push(Table::with_capacity(capacity, shard_bits, true));
        Ok(shard)
    }

    /// Whether every shard of the group has its table (snapshot restore).
    pub(crate) fn shards_complete(&self) -> bool {
        self.shards.len() == self.config.shards_per_group() as usize
    }

    /// Gives back the spare capacity of the shard list, once complete.
    pub(crate) fn finish_restore(&mut self) {
        assert!(self.shards_complete());
        self.shards.shrink_to_fit();
    }

    /// Inserts a chain read from a snapshot into local shard `shard`, whose
    /// bytes the caller has validated record by record. Fails if the key is
    /// already present or belongs to another shard.
    pub(crate) fn restore_chain(&mut self, shard: usize, key: u64, chain: &[u8]) -> Result<()> {
        let (local, h) = self
            .locate(UserId(key))
            .map_err(|_| malformed(format!("user {key} is not in shard group {}", self.group)))?;
        if local != shard {
            return Err(malformed(format!(
                "user {key} is not in the section of its shard"
            )));
        }
        assert!(!chain.is_empty() && chain.len() <= CHAIN_BYTES_MAX);
        let table = &mut self.shards[shard];
        let Probe::Vacant(i) = table.probe(key, h) else {
            return Err(malformed(format!("user {key} appears twice")));
        };
        if table.needs_growth() {
            return Err(malformed(
                "a shard holds more keys than its section said".to_string(),
            ));
        }
        let handle = self.arena.alloc(class_for(HEADER_BYTES + chain.len()))?;
        let slot = self.arena.slot_mut(handle);
        slot[HEADER_BYTES..HEADER_BYTES + chain.len()].copy_from_slice(chain);
        set_used(slot, chain.len());
        // Tags are derived data, not in the snapshot: computed again here
        // (and not trusted before the first full pass, module doc).
        let mut newest = 0;
        let mut at = 0;
        while at < chain.len() {
            newest = newest.max(time_ms_at(&chain[at..]));
            at += encoded_len_at(&chain[at..]).expect("validated by the caller");
        }
        let (tag, clamped) = self.tag_for(newest);
        self.shards[shard].put(i, key, handle, tag);
        if clamped {
            self.clamped_at(shard, i);
        }
        self.keys += 1;
        Ok(())
    }
}

pub(crate) fn malformed(reason: String) -> Error {
    Error::SnapshotMalformed { reason }
}

/// Local shard `shard` of group `group`'s number in the whole store.
fn global_shard(config: &Config, group: u32, shard: usize) -> u32 {
    group * config.shards_per_group() + u32::try_from(shard).expect("< 2^20")
}

/// The capacity a new store gives a shard: the configured first capacity,
/// staggered. A shard never grows to less, so one restored smaller (or
/// empty) grows straight to it.
fn initial_capacity(config: &Config, group: u32, shard: usize) -> u32 {
    staggered(
        config.shard_slots_initial,
        global_shard(config, group, shard),
        config.shard_count(),
    )
}

/// `base * (5/4)^(index / count)`: capacities spread evenly over one growth
/// step, so shards that fill at the same rate grow at different times.
pub(crate) fn staggered(base: u32, index: u32, count: u32) -> u32 {
    let step = GROWTH_NUM as f64 / GROWTH_DEN as f64;
    let capacity = f64::from(base) * step.powf(f64::from(index) / f64::from(count));
    // The product is at most base * 1.25 <= SHARD_SLOTS_MAX / 2 * 1.25.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let capacity = capacity.round() as u32;
    capacity.clamp(base, SHARD_SLOTS_MAX)
}

/// Time `ms` in tag units of `unit_ms`, wrapping.
// The wrap is the point: tag ages are differences modulo 256.
#[allow(clippy::cast_possible_truncation)]
#[inline]
fn unit_of(ms: u64, unit_ms: u64) -> u8 {
    (ms / unit_ms) as u8
}

/// The age tag of a chain whose newest record is at `time_ms`, under the
/// tags' clock `clock_ms`, and whether it had to be clamped to
/// [`TAG_FUTURE_UNITS_MAX`] ahead of the clock: see
/// [`ShardGroup::tag_for`].
// The wrap is the point: tags are units modulo 256.
#[allow(clippy::cast_possible_truncation)]
#[inline]
fn tag_of(time_ms: u64, clock_ms: u64, lookback_ms: u64, unit_ms: u64) -> (u8, bool) {
    let oldest = clock_ms.saturating_sub(lookback_ms.saturating_add(unit_ms));
    let units = time_ms.max(oldest) / unit_ms;
    let newest = clock_ms / unit_ms + TAG_FUTURE_UNITS_MAX;
    (units.min(newest) as u8, units > newest)
}

/// Wrapped ages at or past this are tags ahead of the clock.
// 256 - 32 = 224 fits a u8.
#[allow(clippy::cast_possible_truncation)]
const FUTURE_AGE_MIN: u8 = (256 - TAG_FUTURE_UNITS_MAX) as u8;

/// The age in units of `tag` at clock unit `clock`: negative for a tag
/// ahead of the clock.
#[inline]
fn tag_age(clock: u8, tag: u8) -> i16 {
    let age = clock.wrapping_sub(tag);
    if age >= FUTURE_AGE_MIN {
        i16::from(age) - 256
    } else {
        i16::from(age)
    }
}

/// What a trim slice needs to read the age tags: the current unit, and the
/// age in units from which a chain's newest record may have expired (the
/// cutoff's unit).
#[derive(Debug, Clone, Copy)]
struct Ages {
    now: u8,
    cutoff: u8,
}

impl Ages {
    /// Whether a chain with `tag` has expired whole: its newest record's
    /// unit is before the cutoff's (and the tag is not ahead of the clock).
    #[inline]
    fn expired_whole(self, tag: u8) -> bool {
        tag_age(self.now, tag) > i16::from(self.cutoff)
    }

    /// The first slot in `from..to` the trim has work in, or `to`: with
    /// `trusted` tags, the first whose tag is in the cutoff's unit or
    /// before (module doc); otherwise the first occupied slot. An empty
    /// slot whose stale tag matched gets the current unit, so it matches
    /// again only a lookback later.
    #[inline]
    fn next_candidate(self, table: &mut Table, from: usize, to: usize, trusted: bool) -> usize {
        if !trusted {
            return table.next_occupied(from, to);
        }
        let mut at = from;
        while let Some(i) = self.next_due(table.tags(), at, to) {
            if table.entry(i).is_some() {
                return i;
            }
            table.set_empty_tag(i, self.now);
            at = i + 1;
        }
        to
    }

    /// The first tag in `tags[from..to]` of wrapped age in `cutoff..224`,
    /// eight tags at a time in a `u64` (SWAR): per byte, `d = now - tag`
    /// modulo 256 without borrows between bytes (Hacker's Delight 2-18),
    /// then `d >= cutoff` as `d >= 128 or (d & 127) >= cutoff`, the second
    /// from the high bit of `(d | 128) - cutoff`, which cannot borrow
    /// either (`cutoff` < 128); `d >= 224` (a tag ahead of the clock) is
    /// bits 7, 6 and 5 all set, brought to bit 7 by shifts within the byte.
    #[inline]
    fn next_due(self, tags: &[u8], from: usize, to: usize) -> Option<usize> {
        const H: u64 = 0x8080_8080_8080_8080;
        const ONES: u64 = 0x0101_0101_0101_0101;
        const _: () = assert!(FUTURE_AGE_MIN == 0b1110_0000);
        debug_assert!(self.cutoff < 128);
        let now = u64::from(self.now) * ONES;
        let cutoff = u64::from(self.cutoff) * ONES;
        let mut at = from;
        while at + 8 <= to {
            let t = u64::from_le_bytes(tags[at..at + 8].try_into().expect("8 bytes"));
            let d = ((now | H) - (t & !H)) ^ ((now ^ !t) & H);
            let ahead = d & (d << 1) & (d << 2);
            let due = (d | ((d | H) - cutoff)) & !ahead & H;
            if due != 0 {
                return Some(at + due.trailing_zeros() as usize / 8);
            }
            at += 8;
        }
        (at..to).find(|&i| tag_age(self.now, tags[i]) >= i16::from(self.cutoff))
    }
}

/// Bytes of the oldest records to drop from `chain` so that a record of
/// `n` more bytes fits [`CHAIN_BYTES_MAX`]; counts them in `outcome`.
fn evict_prefix(chain: &[u8], n: usize, outcome: &mut AppendOutcome) -> usize {
    let mut drop = 0;
    while chain.len() - drop + n > CHAIN_BYTES_MAX {
        drop += encoded_len_at(&chain[drop..]).expect("the arena holds valid records");
        outcome.records_evicted += 1;
    }
    debug_assert!(drop <= chain.len());
    drop
}

/// Keeps the records of `chain` with `time_ms >= cutoff`, in order,
/// compacted to the front; returns (bytes kept, records dropped, time of
/// the newest record kept, 0 if none).
fn retain_recent(chain: &mut [u8], cutoff: u64) -> (usize, u64, u64) {
    // Most chains keep every record: check before copying.
    let mut read = 0;
    let mut newest = 0;
    while read < chain.len() {
        let time = time_ms_at(&chain[read..]);
        if time < cutoff {
            break;
        }
        newest = newest.max(time);
        read += encoded_len_at(&chain[read..]).expect("the arena holds valid records");
    }
    if read == chain.len() {
        return (read, 0, newest);
    }
    let mut write = read;
    let mut dropped = 0;
    while read < chain.len() {
        let len = encoded_len_at(&chain[read..]).expect("the arena holds valid records");
        let time = time_ms_at(&chain[read..]);
        if time >= cutoff {
            if write != read {
                chain.copy_within(read..read + len, write);
            }
            write += len;
            newest = newest.max(time);
        } else {
            dropped += 1;
        }
        read += len;
    }
    assert_eq!(read, chain.len(), "a chain ends on a record boundary");
    (write, dropped, newest)
}

/// Decodes the records of `chain` with `time_ms >= cutoff` onto `out`;
/// returns how many.
fn decode_recent(chain: &[u8], cutoff: u64, out: &mut Vec<Record>) -> usize {
    let mut at = 0;
    let mut count = 0;
    while at < chain.len() {
        let (record, len) = Record::decode(&chain[at..]).expect("the arena holds valid records");
        if record.time_ms() >= cutoff {
            out.push(record);
            count += 1;
        }
        at += len;
    }
    count
}

/// Every shard group of a layout in one value.
#[derive(Debug)]
pub struct Store {
    config: Config,
    groups: Vec<ShardGroup>,
}

impl Store {
    /// An empty store.
    pub fn new(config: Config) -> Result<Store> {
        config.validate()?;
        let groups = (0..1u32 << config.group_bits)
            .map(|g| ShardGroup::new(config, g))
            .collect::<Result<_>>()?;
        Ok(Store { config, groups })
    }

    /// Reassembles a store from all its groups, in any order.
    pub fn from_groups(config: Config, mut groups: Vec<ShardGroup>) -> Result<Store> {
        config.validate()?;
        groups.sort_by_key(ShardGroup::group);
        let complete = groups.len() == 1 << config.group_bits
            && groups
                .iter()
                .enumerate()
                .all(|(i, g)| g.group as usize == i && g.config == config);
        if !complete {
            return Err(invalid(
                "groups",
                groups.len() as u64,
                "one group per number 0..2^group_bits, all of this config",
            ));
        }
        Ok(Store { config, groups })
    }

    /// Splits the store into its groups, to move each to its writer thread.
    pub fn into_groups(self) -> Vec<ShardGroup> {
        self.groups
    }

    /// The layout.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The router of the layout.
    pub fn router(&self) -> Router {
        self.config.router()
    }

    /// The groups, in order.
    pub fn groups(&self) -> &[ShardGroup] {
        &self.groups
    }

    /// The groups, in order, to drive one group at a time.
    pub fn groups_mut(&mut self) -> &mut [ShardGroup] {
        &mut self.groups
    }

    fn group_mut(&mut self, user: UserId) -> &mut ShardGroup {
        let g = self.router().group_of(user) as usize;
        &mut self.groups[g]
    }

    /// [`ShardGroup::append`] on the owning group.
    pub fn append(&mut self, user: UserId, record: &Record) -> Result<AppendOutcome> {
        self.group_mut(user).append(user, record)
    }

    /// [`ShardGroup::append_batch`] on the owning groups: each run of
    /// consecutive pairs of one group goes to that group as one batch, so
    /// the result is that of one [`Store::append`] per pair, in order. With
    /// one group the whole batch is one run; a multi-group caller that
    /// wants the prefetching should batch per group (its writer threads do).
    pub fn append_batch(
        &mut self,
        batch: &[(UserId, Record)],
        outcomes: &mut Vec<AppendOutcome>,
    ) -> Result<()> {
        let router = self.router();
        let mut rest = batch;
        while let Some((first, _)) = rest.first() {
            let g = router.group_of(*first);
            let run = rest
                .iter()
                .position(|(user, _)| router.group_of(*user) != g)
                .unwrap_or(rest.len());
            self.groups[g as usize].append_batch(&rest[..run], outcomes)?;
            rest = &rest[run..];
        }
        Ok(())
    }

    /// [`ShardGroup::chain`] on the owning group.
    pub fn chain(&self, user: UserId, out: &mut Vec<Record>) -> Result<bool> {
        self.groups[self.router().group_of(user) as usize].chain(user, out)
    }

    /// [`ShardGroup::take`] on the owning group.
    pub fn take(&mut self, user: UserId, out: &mut Vec<Record>) -> Result<bool> {
        self.group_mut(user).take(user, out)
    }

    /// One [`ShardGroup::trim_slice`] of `slots_budget` on every group.
    pub fn trim_slice(&mut self, now_ms: u64, slots_budget: u64) -> TrimOutcome {
        let mut total = TrimOutcome::default();
        for group in &mut self.groups {
            total.add(&group.trim_slice(now_ms, slots_budget));
        }
        total
    }

    /// [`ShardGroup::trim_all`] on every group.
    pub fn trim_all(&mut self, now_ms: u64) -> TrimOutcome {
        let mut total = TrimOutcome::default();
        for group in &mut self.groups {
            total.add(&group.trim_all(now_ms));
        }
        total
    }

    /// Users with a chain.
    pub fn keys(&self) -> u64 {
        self.groups.iter().map(ShardGroup::keys).sum()
    }

    /// Bytes the store holds, over all groups, without a walk
    /// ([`ShardGroup::held_bytes`]).
    pub fn held_bytes(&self) -> u64 {
        self.groups.iter().map(ShardGroup::held_bytes).sum::<u64>()
            + (self.groups.capacity() * size_of::<ShardGroup>()) as u64
    }

    /// The store's byte counts, over all groups ([`ShardGroup::memory`]:
    /// a walk of every arena).
    pub fn memory(&self) -> MemoryStats {
        let mut total = MemoryStats::default();
        for group in &self.groups {
            total.add(&group.memory());
        }
        total.heap_bytes += (self.groups.capacity() * size_of::<ShardGroup>()) as u64;
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::cast_possible_truncation)]
    fn the_swar_tag_scan_agrees_with_one_tag_at_a_time() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut tags = [0u8; 41];
        for round in 0..20_000u32 {
            for tag in &mut tags {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *tag = x as u8;
            }
            let ages = Ages {
                now: (round % 256) as u8,
                cutoff: (x >> 40) as u8 % 128,
            };
            let from = (x >> 50) as usize % 20;
            let to = from + (x >> 56) as usize % 21;
            let expected = (from..to).find(|&i| {
                let age = ages.now.wrapping_sub(tags[i]);
                age >= ages.cutoff && age < FUTURE_AGE_MIN
            });
            assert_eq!(
                ages.next_due(&tags, from, to),
                expected,
                "{ages:?} {from}..{to}"
            );
        }
    }
}
