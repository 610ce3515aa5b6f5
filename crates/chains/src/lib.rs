//! The in-memory store of per-user event chains for cardinal.
//!
//! `cardinal-chains` keeps, for hundreds of millions of 64-bit user ids, each
//! user's append-only chain of events (impressions, clicks, visits), and on a
//! conversion hands the chain over for attribution and frees it. It sits
//! beside the rollups in the summarize stage of the data path (`sources ->
//! decode -> route -> summarize -> store -> query`): the route stage sends
//! each event to the owner of its user's shard group.
//!
//! The design answers issue 4 and the seed's "Big Memory" series: no
//! operation may stall the way a whole-table resize does.
//!
//! - [`Store`] holds [`ShardGroup`]s; a group owns a fixed set of shards
//!   and has one writer. [`Router`] says which group owns a user.
//! - Each shard is a compact open-addressing table (12 bytes per slot,
//!   14-18 bytes per key) that grows by 5/4 on its own, with staggered
//!   sizes (`index.rs`).
//! - Chains live in size-class slabs of 256 KiB pages addressed by 4-byte
//!   handles (`arena.rs`), in 2 MiB chunks that a prefault thread backs
//!   with huge pages ahead of need (`chunk.rs`); a [`Record`] encodes in
//!   16-64 bytes (`record.rs`).
//! - [`KeyIndex`] is the same sharded index on its own, `u64 -> u32`.
//! - [`ShardGroup::append_batch`] appends many records with their memory
//!   accesses overlapped (prefetching), with the result of one append each.
//! - [`ShardGroup::trim_slice`] drops records older than the lookback window
//!   a bounded number of slots at a time.
//! - [`Store::write_snapshot_file`] and [`Store::read_snapshot_file`] save
//!   and restore the whole store in a checksummed format (`snapshot.rs`).
//! - [`attribution::attribute`] credits touch points by model.
//!
//! Every limit is a named constant: [`CHAIN_BYTES_MAX`] (oldest records
//! evicted), [`RECORD_BYTES_MAX`], [`ATTRS_BYTES_MAX`] and [`TIME_MS_MAX`]
//! (rejected), [`ARENA_BYTES_MAX`] and [`SHARD_SLOTS_MAX`] (the append fails
//! and changes nothing), [`SHARD_BITS_MAX`] (config rejected).
//! The snapshot decoder checks every checksum, record and key before use,
//! and sizes a shard from its key count only after the section's bytes
//! have arrived.
//!
//! Speed at scale comes from overlapping cache misses, not from fewer
//! instructions: [`ShardGroup::append_batch`] takes windows of
//! [`APPEND_BATCH_WINDOW`] pairs, hashes them and prefetches their index
//! lines, probes them and prefetches their chain slots, then appends
//! (property-tested against a twin store appending one at a time). At 200M
//! keys every append still touches three or four random lines of a 16 GB
//! heap, so the store is bound by TLB misses: the arena's chunks are on
//! huge pages faulted in ahead by the prefault thread (a glibc heap advised
//! for huge pages ran ~35% faster but paid ~5 ms at each first touch on the
//! appending thread); the index's tables still come from the global
//! allocator on 4 KiB pages (on compacted huge-page slabs they ran ~9%
//! faster with fifteen times the millisecond tail: bench/JOURNAL.md).
//!
//! Back of the envelope, from the long run of 2026-11-21 (206M keys after
//! 1.4B appends, bench/README.md): 13 B of index slot and age tag per
//! 0.68-0.85 keys (18.0 B/key at steady state with 16 trim slots per
//! append), 2 B of chain header and under 1/8 slack per chain, records of
//! 16-64 B (36 on average in the benchmark), 30 B/key of overhead in all,
//! 82 B/key of RSS; 2.27 M appends per store CPU-second at steady state.
//! [`Config::for_keys`] aims at [`SHARD_KEYS_TARGET`] keys per shard, so a
//! growth (~30-90 ns per key at 200M keys) stays far under 1 ms.
//!
//! ```
//! use cardinal_chains::attribution::{self, Conversion, Model};
//! use cardinal_chains::{CampaignId, Config, Kind, Record, SiteId, Store, UserId};
//!
//! let mut store = Store::new(Config::default())?;
//! let user = UserId(42);
//! for (t, campaign) in [(1_000, 1), (2_000, 2), (3_000, 1)] {
//!     store.append(user, &Record::new(t, Kind::CLICK, CampaignId(campaign), SiteId(7))?)?;
//! }
//! // A conversion: take the chain (freeing it) and credit its touch points.
//! let mut chain = Vec::new();
//! assert!(store.take(user, &mut chain)?);
//! let conversion = Conversion { user, time_ms: 4_000, revenue_micros: 30_000_000 };
//! let mut rows = Vec::new();
//! attribution::attribute(&conversion, &chain, 10_000, Model::Linear, |r| r.kind == Kind::CLICK, &mut rows);
//! assert_eq!(rows.len(), 3);
//! assert!((rows[0].revenue_micros - 10_000_000.0).abs() < 1e-6);
//! assert_eq!(store.keys(), 0);
//! # Ok::<(), cardinal_chains::Error>(())
//! ```

// Dependencies: `crc32fast` (snapshot checksums), `thiserror`, `libc`
// (`mmap` and `madvise` for the arena's chunks; the benchmark example also
// reads the thread CPU clock and page faults with it); the benchmark
// compares against `hashbrown`. No other cardinal crate: `UserId`, `Kind`,
// `CampaignId` and `SiteId` are this crate's own until they move to
// `cardinal-event`.

#![deny(missing_docs)]

mod arena;
pub mod attribution;
mod chunk;
mod error;
mod index;
mod key_index;
mod record;
mod snapshot;
mod store;

pub use arena::{ARENA_BYTES_MAX, CHAIN_BYTES_MAX, CLASS_COUNT, PAGE_BYTES};
pub use chunk::{arena_mapped_bytes, arena_ready_bytes, set_huge_pages, start_prefault_thread};
pub use error::{Error, Result};
pub use index::{SHARD_SLOTS_MAX, mix};
pub use key_index::{IndexInsert, KeyIndex};
pub use record::{
    ATTRS_BYTES_MAX, CampaignId, Kind, RECORD_BYTES_MAX, RECORD_BYTES_MIN, Record, SiteId,
    TIME_MS_MAX,
};
pub use snapshot::{SNAPSHOT_VERSION, SnapshotStats};
pub use store::{
    APPEND_BATCH_WINDOW, AppendOutcome, Config, MemoryStats, Router, SHARD_BITS_MAX,
    SHARD_KEYS_TARGET, SHARD_SLOTS_INITIAL_MIN, ShardGroup, Store, TAG_GAP_UNITS_MAX,
    TAG_UNITS_PER_LOOKBACK, TrimOutcome, UserId,
};
