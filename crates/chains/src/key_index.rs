//! The store's index without the arena: user id to a `u32` value in
//! 2^shard_bits shard tables that grow one at a time (see `index.rs`).
//!
//! [`crate::ShardGroup`] keeps chain handles in these tables; [`KeyIndex`]
//! offers the same tables to callers that need only a `u64 -> u32` map that
//! never stalls, and lets the benchmark measure the index on its own (bytes
//! per key, the worst insert) at sizes whose chains would not fit in memory.

use crate::arena::Handle;
use crate::error::Result;
use crate::index::{Probe, Table, mix};
use crate::store::staggered;

/// What [`KeyIndex::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexInsert {
    /// The key was absent (otherwise its value was replaced).
    pub new_key: bool,
    /// The key's shard grew (rehashed its keys into a 5/4 larger table).
    pub shard_grew: bool,
}

/// A map from `u64` keys to `u32` values (any but `u32::MAX`), sharded
/// like the store's index: 12 bytes per slot, 14.1-17.6 bytes per key.
#[derive(Debug)]
pub struct KeyIndex {
    shard_bits: u8,
    shard_slots_initial: u32,
    shards: Vec<Table>,
    len: u64,
}

impl KeyIndex {
    /// An empty index of `2^shard_bits` shards of `shard_slots_initial`
    /// first slots, staggered over one growth step. The ranges are those of
    /// [`crate::Config`]: `shard_bits <= SHARD_BITS_MAX`,
    /// `SHARD_SLOTS_INITIAL_MIN <= shard_slots_initial <= SHARD_SLOTS_MAX /
    /// 2`; others fail with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    pub fn new(shard_bits: u8, shard_slots_initial: u32) -> Result<KeyIndex> {
        let config = crate::Config {
            shard_bits,
            group_bits: 0,
            lookback_ms: 0,
            shard_slots_initial,
        };
        config.validate()?;
        let count = 1u32 << shard_bits;
        let shards = (0..count)
            .map(|s| {
                Table::with_capacity(
                    staggered(shard_slots_initial, s, count),
                    u32::from(shard_bits),
                    false,
                )
            })
            .collect();
        Ok(KeyIndex {
            shard_bits,
            shard_slots_initial,
            shards,
            len: 0,
        })
    }

    /// Keys held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn shard_of(&self, h: u64) -> usize {
        if self.shard_bits == 0 {
            0
        } else {
            usize::try_from(h >> (64 - u32::from(self.shard_bits))).expect("shard_bits <= 20")
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: u64) -> Option<u32> {
        let h = mix(key);
        match self.shards[self.shard_of(h)].probe(key, h) {
            Probe::Found(_, handle) => Some(handle.0),
            Probe::Vacant(_) => None,
        }
    }

    /// Sets `key`'s value. Panics if `value` is `u32::MAX` (the empty
    /// mark). Fails with [`Error::LimitExceeded`](crate::Error::LimitExceeded) when the shard would grow
    /// past [`SHARD_SLOTS_MAX`](crate::SHARD_SLOTS_MAX); nothing changes then.
    pub fn insert(&mut self, key: u64, value: u32) -> Result<IndexInsert> {
        assert_ne!(value, u32::MAX, "u32::MAX marks an empty slot");
        let h = mix(key);
        let shard = self.shard_of(h);
        let table = &mut self.shards[shard];
        let mut outcome = IndexInsert::default();
        let i = match table.probe(key, h) {
            Probe::Found(i, _) => {
                table.set_handle(i, Handle(value));
                return Ok(outcome);
            }
            Probe::Vacant(i) if !table.needs_growth() => i,
            Probe::Vacant(_) => {
                let count = 1u32 << self.shard_bits;
                let initial = staggered(
                    self.shard_slots_initial,
                    u32::try_from(shard).expect("< 2^20"),
                    count,
                );
                table.grow(initial)?;
                outcome.shard_grew = true;
                match table.probe(key, h) {
                    Probe::Vacant(i) => i,
                    Probe::Found(..) => unreachable!("the key was absent before growing"),
                }
            }
        };
        table.put(i, key, Handle(value), 0);
        self.len += 1;
        outcome.new_key = true;
        Ok(outcome)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let h = mix(key);
        let shard = self.shard_of(h);
        let table = &mut self.shards[shard];
        match table.probe(key, h) {
            Probe::Found(i, handle) => {
                table.remove_at(i, &mut 0);
                self.len -= 1;
                Some(handle.0)
            }
            Probe::Vacant(_) => None,
        }
    }

    /// Every heap byte the index holds: the slots and the shard list.
    pub fn heap_bytes(&self) -> u64 {
        let slots: u64 = self.shards.iter().map(Table::heap_bytes).sum();
        slots + (self.shards.capacity() * size_of::<Table>()) as u64
    }
}
