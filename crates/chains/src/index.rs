//! One shard of the index: a linear-probing table from user id to chain
//! handle, 12 bytes per slot, that grows by 5/4 on its own.
//!
//! ```text
//!  slots: [ key lo u32 | key hi u32 | handle u32 ] x capacity     (12 B each, 4-aligned)
//!           handle == u32::MAX  <=>  the slot is empty
//! ```
//!
//! The user id is mixed once ([`mix`], a bijection) into a 64-bit hash `h`.
//! The store picks the shard from the top `shard_bits` of `h`; the table
//! takes its home slot from the remaining bits by multiply-shift
//! (`(h << shard_bits) * capacity >> 64`, Lemire's "fastrange"), which works
//! for any capacity, so shards need not be powers of two. Collisions probe
//! forward (linear probing, Knuth TAOCP vol. 3, 6.4 algorithm L) and
//! deletion shifts later entries back (algorithm R), so there are no
//! tombstones and no rehash is ever needed to clean them: the seed's worry
//! about open addressing under constant insert and delete (Big Memory, part
//! 3.5) does not arise.
//!
//! Load and bytes per key. A shard grows when an insert would pass
//! `LOAD_MAX` = 0.85 and grows by `GROWTH` = 5/4, so right after growing its
//! load is 0.68. Its bytes per key stay between 12/0.85 = 14.1 and 12/0.68 =
//! 17.6, under the issue's 18 B/key at every moment. The store staggers the
//! shards' first capacities over one growth step (`capacity_i = initial *
//! (5/4)^(i / shards)`), and since the hash spreads keys evenly, shards
//! cross their thresholds at evenly spread moments: at any time about
//! 1/shards of the index is growing, so the transient copy is one shard,
//! never the whole index (hashbrown's peak is 2x, 34 B/key for u64 -> u64).
//!
//! Expected probes at load a (Knuth 6.4 (44)): a hit reads (1 + 1/(1-a))/2
//! slots, 3.8 at 0.85; a miss (a new key) reads (1 + 1/(1-a)^2)/2, 22.7 at
//! 0.85 and 5.4 at 0.68. Those 12-byte slots are contiguous: a hit touches
//! one or two cache lines, a miss four or five.
//!
//! | `LOAD_MAX`, `GROWTH` | B/key range | miss probes at `LOAD_MAX` |
//! |---|---|---|
//! | 0.80, 5/4 | 15.0 - 18.75 | 13.0 (over 18 B/key after growing) |
//! | 0.85, 5/4 | 14.1 - 17.6 | 22.7 |
//! | 0.90, 5/4 | 13.3 - 16.7 | 50.5 |
//! | 0.85, 3/2 | 14.1 - 21.2 | 22.7 (over 18 B/key) |

use crate::arena::Handle;

/// Slots a shard may have. An insert that would grow a shard past it fails
/// with [`crate::Error::LimitExceeded`]; choose `shard_bits` so that shards
/// stay far below it (growing a shard of n keys takes about 10 ns * n, so
/// the 1 ms goal wants n below ~100k; see [`crate::Config::for_keys`]).
pub const SHARD_SLOTS_MAX: u32 = 1 << 28;

/// The load past which a shard grows, as a fraction `LOAD_NUM / LOAD_DEN`.
pub(crate) const LOAD_NUM: u64 = 85;
pub(crate) const LOAD_DEN: u64 = 100;
/// Growth factor `GROWTH_NUM / GROWTH_DEN`.
pub(crate) const GROWTH_NUM: u64 = 5;
pub(crate) const GROWTH_DEN: u64 = 4;
/// Bytes of one slot.
pub(crate) const SLOT_BYTES: usize = 12;
const EMPTY: u32 = u32::MAX;

const _: () = assert!(size_of::<[u32; 3]>() == SLOT_BYTES);

/// MurmurHash3's 64-bit finalizer (fmix64): a bijection, so distinct ids
/// never collide in full and the table could recover a key from its hash.
#[inline]
pub fn mix(user_id: u64) -> u64 {
    let mut h = user_id;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// Asks the CPU to start loading the cache line holding `value`, without
/// waiting for it: a hint that never faults and changes nothing observable.
/// Other targets than x86-64 get no hint.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = std::ptr::from_ref(value).cast::<i8>();
        // SAFETY: a prefetch reads nothing architecturally and cannot fault,
        // whatever the address; this one is a live reference anyway. SSE is
        // part of the x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// A key's low and high halves, as a slot stores them.
// Truncation is the point: the two halves together keep every bit.
#[allow(clippy::cast_possible_truncation)]
#[inline]
fn split(key: u64) -> [u32; 2] {
    [key as u32, (key >> 32) as u32]
}

/// Where a lookup ended: the slot holding the key, or the empty slot where
/// it would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    Found(usize, Handle),
    Vacant(usize),
}

#[derive(Debug)]
pub(crate) struct Table {
    slots: Vec<[u32; 3]>,
    /// One age tag per slot, moved with its entry (the store's trim reads
    /// them, see store.rs), or none at all: a table made `untagged` (the
    /// bare [`crate::KeyIndex`]) keeps this empty and pays nothing.
    tags: Vec<u8>,
    tagged: bool,
    len: u32,
    shard_bits: u32,
}

impl Table {
    /// A table of no slots, which allocates nothing: a snapshot's empty
    /// shard. Lookups find nothing and the first insert grows it
    /// ([`Table::needs_growth`] is true at capacity 0).
    pub(crate) fn empty(shard_bits: u32, tagged: bool) -> Table {
        assert!(shard_bits < 64);
        Table {
            slots: Vec::new(),
            tags: Vec::new(),
            tagged,
            len: 0,
            shard_bits,
        }
    }

    /// A table of `capacity` empty slots, with a tag per slot if `tagged`.
    pub(crate) fn with_capacity(capacity: u32, shard_bits: u32, tagged: bool) -> Table {
        assert!(capacity >= 4, "a shard has at least 4 slots");
        assert!(capacity <= SHARD_SLOTS_MAX);
        assert!(shard_bits < 64);
        Table {
            slots: vec![[0, 0, EMPTY]; capacity as usize],
            tags: if tagged {
                vec![0; capacity as usize]
            } else {
                Vec::new()
            },
            tagged,
            len: 0,
            shard_bits,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    pub(crate) fn capacity(&self) -> u32 {
        u32::try_from(self.slots.len()).expect("capacity <= SHARD_SLOTS_MAX")
    }

    /// Heap bytes of the slots and their tags.
    pub(crate) fn heap_bytes(&self) -> u64 {
        (self.slots.capacity() * SLOT_BYTES + self.tags.capacity()) as u64
    }

    /// The age tags, one per slot (empty for an untagged table). A tag of
    /// an empty slot means nothing.
    #[inline]
    pub(crate) fn tags(&self) -> &[u8] {
        &self.tags
    }

    /// Sets the tag of empty slot `i` (of a tagged table), which means
    /// nothing but saves a scan of the tags from reading the slot again.
    #[inline]
    pub(crate) fn set_empty_tag(&mut self, i: usize, tag: u8) {
        debug_assert_eq!(self.slots[i][2], EMPTY);
        self.tags[i] = tag;
    }

    /// Sets the tag of occupied slot `i` (of a tagged table).
    #[inline]
    pub(crate) fn set_tag(&mut self, i: usize, tag: u8) {
        debug_assert_ne!(self.slots[i][2], EMPTY);
        self.tags[i] = tag;
    }

    // The product's high half is below `slots.len()`, so it fits a usize.
    #[allow(clippy::cast_possible_truncation)]
    #[inline]
    fn home(&self, h: u64) -> usize {
        let bits = h << self.shard_bits;
        ((u128::from(bits) * self.slots.len() as u128) >> 64) as usize
    }

    /// Prefetches the slots a probe for hash `h` reads first: its home
    /// slot's cache line and the next one (a hit reads 1-4 slots), and the
    /// home slot's tag, which an insert writes.
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        if self.slots.is_empty() {
            return;
        }
        let i = self.home(h);
        prefetch(&self.slots[i]);
        prefetch(&self.slots[(i + 5).min(self.slots.len() - 1)]);
        if let Some(tag) = self.tags.get(i) {
            prefetch(tag);
        }
    }

    /// Prefetches the cache line holding slot `i`, if there is one (a
    /// trim streams the slots it will look at into cache ahead of its
    /// scan of the tags, which only reads the few it needs).
    #[inline]
    pub(crate) fn prefetch_slot(&self, i: usize) {
        if let Some(slot) = self.slots.get(i) {
            prefetch(slot);
        }
    }

    #[inline]
    pub(crate) fn probe(&self, key: u64, h: u64) -> Probe {
        let capacity = self.slots.len();
        let [lo, hi] = split(key);
        let mut i = self.home(h);
        // The table is never full (load <= 0.85), so the loop ends at an
        // empty slot within `capacity` steps, unless there are no slots.
        for _ in 0..capacity {
            let slot = self.slots[i];
            if slot[2] == EMPTY {
                return Probe::Vacant(i);
            }
            if slot[0] == lo && slot[1] == hi {
                return Probe::Found(i, Handle(slot[2]));
            }
            i += 1;
            if i == capacity {
                i = 0;
            }
        }
        assert_eq!(capacity, 0, "a shard table has no empty slot");
        // Not a slot to `put` into: an empty table needs growth first.
        Probe::Vacant(0)
    }

    /// Whether one more key would pass the load limit.
    pub(crate) fn needs_growth(&self) -> bool {
        u64::from(self.len + 1) * LOAD_DEN > u64::from(self.capacity()) * LOAD_NUM
    }

    /// The capacity growth would move to; `None` past [`SHARD_SLOTS_MAX`].
    pub(crate) fn grown_capacity(&self) -> Option<u32> {
        let grown = u64::from(self.capacity()) * GROWTH_NUM / GROWTH_DEN + 1;
        u32::try_from(grown).ok().filter(|&c| c <= SHARD_SLOTS_MAX)
    }

    /// Grows to the next capacity, or to `initial` if that is larger (a
    /// shard restored smaller than a new one); past [`SHARD_SLOTS_MAX`] an
    /// error, and nothing changes.
    pub(crate) fn grow(&mut self, initial: u32) -> crate::error::Result<()> {
        let Some(capacity) = self.grown_capacity().map(|c| c.max(initial)) else {
            return Err(crate::error::Error::LimitExceeded {
                limit: "SHARD_SLOTS_MAX",
                max: SHARD_SLOTS_MAX.into(),
                found: u64::from(self.capacity()) * GROWTH_NUM / GROWTH_DEN,
            });
        };
        self.resize(capacity);
        Ok(())
    }

    /// Rehashes every entry into a table of `capacity` slots; tags move
    /// with their entries.
    pub(crate) fn resize(&mut self, capacity: u32) {
        assert!(u64::from(self.len) * LOAD_DEN <= u64::from(capacity) * LOAD_NUM);
        let old = std::mem::replace(&mut self.slots, vec![[0, 0, EMPTY]; capacity as usize]);
        let old_tags = std::mem::replace(
            &mut self.tags,
            if self.tagged {
                vec![0; capacity as usize]
            } else {
                Vec::new()
            },
        );
        let len = self.len;
        self.len = 0;
        for (n, slot) in old.into_iter().enumerate() {
            if slot[2] != EMPTY {
                let key = u64::from(slot[0]) | (u64::from(slot[1]) << 32);
                let tag = old_tags.get(n).copied().unwrap_or(0);
                match self.probe(key, mix(key)) {
                    Probe::Vacant(i) => self.put(i, key, Handle(slot[2]), tag),
                    Probe::Found(..) => unreachable!("duplicate key in a shard"),
                }
            }
        }
        assert_eq!(self.len, len);
    }

    /// Fills the vacant slot `i` (from [`Table::probe`]), with age tag
    /// `tag` if the table is tagged.
    pub(crate) fn put(&mut self, i: usize, key: u64, handle: Handle, tag: u8) {
        assert_eq!(self.slots[i][2], EMPTY, "put into an occupied slot");
        assert_ne!(handle.0, EMPTY);
        let [lo, hi] = split(key);
        self.slots[i] = [lo, hi, handle.0];
        if self.tagged {
            self.tags[i] = tag;
        }
        self.len += 1;
        debug_assert!(u64::from(self.len) * LOAD_DEN <= u64::from(self.capacity()) * LOAD_NUM);
    }

    pub(crate) fn set_handle(&mut self, i: usize, handle: Handle) {
        assert_ne!(self.slots[i][2], EMPTY);
        assert_ne!(handle.0, EMPTY);
        self.slots[i][2] = handle.0;
    }

    /// The first occupied slot in `from..to`, or `to` if there is none.
    #[inline]
    pub(crate) fn next_occupied(&self, from: usize, to: usize) -> usize {
        self.slots[from..to]
            .iter()
            .position(|slot| slot[2] != EMPTY)
            .map_or(to, |i| from + i)
    }

    /// The entry in slot `i`, if any (for scans: trimming, snapshots).
    #[inline]
    pub(crate) fn entry(&self, i: usize) -> Option<(u64, Handle)> {
        let slot = self.slots[i];
        (slot[2] != EMPTY).then(|| {
            (
                u64::from(slot[0]) | (u64::from(slot[1]) << 32),
                Handle(slot[2]),
            )
        })
    }

    /// Empties slot `i` and shifts later entries of the probe run back
    /// (Knuth's algorithm R), so lookups never meet a tombstone. Tags move
    /// with their entries.
    ///
    /// `cursor` is a scan position (the trim's): if an entry moves from at
    /// or after it to before it, the cursor moves back to that entry's new
    /// slot, so a scan in progress still meets every entry once.
    pub(crate) fn remove_at(&mut self, mut i: usize, cursor: &mut usize) {
        assert_ne!(self.slots[i][2], EMPTY, "remove of an empty slot");
        let capacity = self.slots.len();
        let mut j = i;
        loop {
            j += 1;
            if j == capacity {
                j = 0;
            }
            let slot = self.slots[j];
            if slot[2] == EMPTY {
                break;
            }
            let key = u64::from(slot[0]) | (u64::from(slot[1]) << 32);
            let k = self.home(mix(key));
            // The entry at j may move to i unless its home lies cyclically
            // in (i, j].
            let stays = if i <= j {
                i < k && k <= j
            } else {
                i < k || k <= j
            };
            if !stays {
                self.slots[i] = slot;
                if self.tagged {
                    self.tags[i] = self.tags[j];
                }
                if i < *cursor && *cursor <= j {
                    *cursor = i;
                }
                i = j;
            }
        }
        self.slots[i] = [0, 0, EMPTY];
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(t: &mut Table, key: u64) {
        if t.needs_growth() {
            let c = t.grown_capacity().expect("below the limit");
            t.resize(c);
        }
        match t.probe(key, mix(key)) {
            Probe::Vacant(i) => t.put(i, key, Handle(u32::try_from(key % 1000).expect("small")), 0),
            Probe::Found(..) => panic!("duplicate"),
        }
    }

    #[test]
    fn insert_find_remove_against_a_reference() {
        let mut t = Table::with_capacity(4, 3, false);
        let keys: Vec<u64> = (0..5000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for &k in &keys {
            insert(&mut t, k);
        }
        assert_eq!(t.len(), 5000);
        assert!(u64::from(t.len()) * LOAD_DEN <= u64::from(t.capacity()) * LOAD_NUM);
        // Remove every other key; the rest must still be found.
        for &k in keys.iter().step_by(2) {
            match t.probe(k, mix(k)) {
                Probe::Found(i, _) => t.remove_at(i, &mut 0),
                Probe::Vacant(_) => panic!("lost key {k}"),
            }
        }
        for (n, &k) in keys.iter().enumerate() {
            let found = matches!(t.probe(k, mix(k)), Probe::Found(..));
            assert_eq!(found, n % 2 == 1, "key {k}");
        }
        assert_eq!(t.len(), 2500);
    }

    #[test]
    fn an_empty_table_finds_nothing_and_grows_on_insert() {
        let mut t = Table::empty(3, false);
        assert_eq!((t.capacity(), t.heap_bytes()), (0, 0));
        assert_eq!(t.probe(7, mix(7)), Probe::Vacant(0));
        assert!(t.needs_growth());
        t.resize(4);
        insert(&mut t, 7);
        assert!(matches!(t.probe(7, mix(7)), Probe::Found(..)));
    }

    #[test]
    fn mix_is_a_bijection_on_a_sample() {
        let mut seen: Vec<u64> = (0..10_000u64).map(mix).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10_000);
    }
}
