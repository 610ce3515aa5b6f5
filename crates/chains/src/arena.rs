//! The chain arena: size-class slabs carved out of large pages.
//!
//! Every chain lives in one slot. A slot belongs to a size class; all slots
//! of a page have the same class. A slot starts with the chain's byte count
//! and holds the concatenated record encodings (see `record.rs`):
//!
//! ```text
//!  page (PAGE_BYTES = 256 KiB, one class, here 40-byte slots)
//!  +--------+--------+--------+-- ... --+--------+------+
//!  | slot 0 | slot 1 | slot 2 |         | slot n | tail |   tail = PAGE_BYTES % 40, unused
//!  +--------+--------+--------+-- ... --+--------+------+
//!
//!  slot in use:   | used u16 | record | record | ... | slack |
//!  free slot:     | next free handle u32 | ...                 |
//! ```
//!
//! A [`Handle`] is the slot's offset in 8-byte units from the start of the
//! arena's first page, as if the pages were laid end to end: `page =
//! handle / UNITS_PER_PAGE`, `byte = (handle % UNITS_PER_PAGE) * 8`. A u32
//! therefore addresses 2^32 * 8 B = 32 GiB per arena ([`ARENA_BYTES_MAX`]),
//! and the index stores 4 bytes per chain instead of an 8-byte pointer. The
//! class of a slot is its page's class, kept in a byte per page.
//!
//! Classes grow from 24 bytes in 8-byte steps up to 64, then by about 1/8
//! (rounded to 8 bytes) up to a slot of [`CHAIN_BYTES_MAX`] + 2 bytes:
//! [`CLASS_COUNT`] classes. An eighth bounds the slack of a slot at 12.5% of
//! its chain (plus up to 7 bytes of rounding); the price is that a growing
//! chain moves about every eighth of its size, so the bytes it copies sum to
//! about 8x its final size: for a 40-byte record, ~320 bytes of `memcpy`
//! amortized, ~30 ns. A 1/4 step would halve the copying and double the
//! slack; the index's byte budget (<= 32 B/key of overhead, issue 4) chose
//! the finer step.
//!
//! Freed slots go on a per-class free list threaded through the slots
//! themselves, and are reused before the class's newest page is bumped.
//! Pages are never returned to the allocator: memory a class once needed
//! stays with that class. This bounds fragmentation work to zero at the
//! price of keeping a class's peak; issue 4's workload (steady appends and
//! trims) keeps the mix of classes stable.
//
// ADVICE FOR HACKERS: the snapshot (snapshot.rs) stores chains by content,
// not by handle, so changing the classes, the page size or the unit needs no
// format change. Changing `UNIT_BYTES` or `PAGE_BYTES` changes
// `ARENA_BYTES_MAX`; the memory test in tests/memory.rs checks that
// `Arena::heap_bytes` still matches the allocator.

use crate::error::{Error, Result};

/// Bytes of chain content (encoded records) one user may hold. When an
/// append would pass it, the chain's oldest records are dropped to make
/// room and counted in [`crate::AppendOutcome::records_evicted`]: with a
/// lookback window, the oldest touch points are the least useful ones. 16
/// KiB is the seed's largest chain (Big Memory, part 1: "16 B to 16 KB").
pub const CHAIN_BYTES_MAX: usize = 16 * 1024;

/// Bytes of one arena page. Large enough that page bookkeeping is noise
/// (8 bytes of `pages` entry and 1 byte of class per 256 KiB) and that the
/// largest slot fits; small enough that a class's partly filled newest page
/// wastes at most 256 KiB (all classes: 15 MiB per shard group).
pub const PAGE_BYTES: usize = UNITS_PER_PAGE as usize * UNIT_BYTES;

/// Bytes one shard group's arena may hold: what a u32 handle in 8-byte
/// units addresses. An append that needs a page past it fails with
/// [`Error::LimitExceeded`] and changes nothing; more shard groups give
/// more room.
pub const ARENA_BYTES_MAX: u64 = (1u64 << 32) * UNIT_BYTES as u64;

pub(crate) const UNIT_BYTES: usize = UNIT_BYTES_U32 as usize;
const UNIT_BYTES_U32: u32 = 8;
pub(crate) const HEADER_BYTES: usize = 2;
const UNITS_PER_PAGE: u32 = 32 * 1024;
/// Pages a u32 handle reaches: 2^32 units / units per page.
const PAGES_MAX: usize = (u32::MAX / UNITS_PER_PAGE) as usize + 1;
const SLOT_BYTES_MIN: usize = 24;
const SLOT_BYTES_MAX: usize = (CHAIN_BYTES_MAX + HEADER_BYTES).div_ceil(UNIT_BYTES) * UNIT_BYTES;
const FREE_NONE: u32 = u32::MAX;

const _: () = assert!(PAGE_BYTES == 256 * 1024);
const _: () = assert!(PAGES_MAX as u64 * PAGE_BYTES as u64 == ARENA_BYTES_MAX);
const _: () = assert!(SLOT_BYTES_MAX <= PAGE_BYTES);
const _: () = assert!(CHAIN_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(SLOT_BYTES_MIN >= HEADER_BYTES + crate::record::RECORD_BYTES_MIN);

const fn next_class_bytes(bytes: usize) -> usize {
    let step = if bytes < 64 {
        UNIT_BYTES
    } else {
        bytes / 8 / UNIT_BYTES * UNIT_BYTES
    };
    let next = bytes + step;
    if next > SLOT_BYTES_MAX {
        SLOT_BYTES_MAX
    } else {
        next
    }
}

const fn class_count() -> usize {
    let mut count = 1;
    let mut bytes = SLOT_BYTES_MIN;
    while bytes < SLOT_BYTES_MAX {
        bytes = next_class_bytes(bytes);
        count += 1;
    }
    count
}

/// Number of size classes.
pub const CLASS_COUNT: usize = class_count();

/// Slot bytes of each class, ascending.
// Slot sizes are at most SLOT_BYTES_MAX (16,392), so `as u32` keeps them.
#[allow(clippy::cast_possible_truncation)]
pub(crate) const CLASS_BYTES: [u32; CLASS_COUNT] = {
    let mut table = [0u32; CLASS_COUNT];
    let mut bytes = SLOT_BYTES_MIN;
    let mut i = 0;
    while i < CLASS_COUNT {
        table[i] = bytes as u32;
        bytes = next_class_bytes(bytes);
        i += 1;
    }
    table
};

const _: () = assert!(CLASS_COUNT < u8::MAX as usize);
const _: () = assert!(CLASS_BYTES[CLASS_COUNT - 1] as usize == SLOT_BYTES_MAX);

/// The smallest class whose slot holds `bytes` (header included).
pub(crate) fn class_for(bytes: usize) -> usize {
    assert!(
        bytes <= SLOT_BYTES_MAX,
        "chain larger than the largest slot"
    );
    let class = CLASS_BYTES.partition_point(|&slot| (slot as usize) < bytes);
    debug_assert!(CLASS_BYTES[class] as usize >= bytes);
    debug_assert!(class == 0 || (CLASS_BYTES[class - 1] as usize) < bytes);
    class
}

/// A chain's slot: its offset in 8-byte units (see the module doc).
/// `u32::MAX` is never a slot, so the index uses it to mark empty entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handle(pub(crate) u32);

/// The slab arena of one shard group.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    pages: Vec<Box<[u8]>>,
    page_class: Vec<u8>,
    /// Per class: the first free slot, or `FREE_NONE`.
    free_head: Vec<u32>,
    /// Per class: the page being carved (`FREE_NONE` if none) and the unit
    /// in it where the next slot starts.
    bump: Vec<(u32, u32)>,
    /// Per class: slots handed out and not freed.
    slots_live: Vec<u64>,
}

impl Arena {
    /// An empty arena. It allocates nothing until its first slot: a
    /// snapshot restore creates one per shard group as the group's sections
    /// arrive, and an empty group must cost next to nothing.
    pub(crate) fn new() -> Arena {
        Arena::default()
    }

    /// A slot of `class`. Fails with [`Error::LimitExceeded`] when a new
    /// page would pass [`ARENA_BYTES_MAX`]; nothing changes then.
    pub(crate) fn alloc(&mut self, class: usize) -> Result<Handle> {
        assert!(class < CLASS_COUNT);
        if self.free_head.is_empty() {
            self.free_head = vec![FREE_NONE; CLASS_COUNT];
            self.bump = vec![(FREE_NONE, 0); CLASS_COUNT];
            self.slots_live = vec![0; CLASS_COUNT];
        }
        let head = self.free_head[class];
        if head != FREE_NONE {
            let (page, byte) = locate(head);
            let next = u32::from_le_bytes(
                self.pages[page][byte..byte + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            self.free_head[class] = next;
            // The next allocation of this class reads the new head's link:
            // start loading it now, while the caller fills this slot.
            if next != FREE_NONE {
                self.prefetch(Handle(next));
            }
            self.slots_live[class] += 1;
            return Ok(Handle(head));
        }
        let slot_units = CLASS_BYTES[class] / UNIT_BYTES_U32;
        let (mut page, mut unit) = self.bump[class];
        if page == FREE_NONE || unit + slot_units > UNITS_PER_PAGE {
            if self.pages.len() >= PAGES_MAX {
                return Err(Error::LimitExceeded {
                    limit: "ARENA_BYTES_MAX",
                    max: ARENA_BYTES_MAX,
                    found: (self.pages.len() as u64 + 1) * PAGE_BYTES as u64,
                });
            }
            page = u32::try_from(self.pages.len()).expect("PAGES_MAX fits a u32");
            unit = 0;
            // `vec![0; n]` asks for zeroed memory, which the allocator gets
            // from the kernel for a 256 KiB block: pages are touched (and
            // counted in RSS) as slots are carved, not all at once.
            self.pages.push(vec![0u8; PAGE_BYTES].into_boxed_slice());
            self.page_class
                .push(u8::try_from(class).expect("CLASS_COUNT < 255"));
        }
        let handle = page * UNITS_PER_PAGE + unit;
        self.bump[class] = (page, unit + slot_units);
        self.slots_live[class] += 1;
        debug_assert_ne!(handle, FREE_NONE);
        Ok(Handle(handle))
    }

    /// Prefetches the first cache line of `handle`'s slot, where an append
    /// reads the chain's length (and, for a chain of up to ~60 bytes,
    /// writes its record).
    #[inline]
    pub(crate) fn prefetch(&self, handle: Handle) {
        let (page, byte) = locate(handle.0);
        crate::index::prefetch(&self.pages[page][byte]);
    }

    /// Returns a slot to its class's free list.
    pub(crate) fn free(&mut self, handle: Handle) {
        let class = self.class_of(handle);
        assert!(
            self.slots_live[class] > 0,
            "free of a slot in an empty class"
        );
        let (page, byte) = locate(handle.0);
        self.pages[page][byte..byte + 4].copy_from_slice(&self.free_head[class].to_le_bytes());
        self.free_head[class] = handle.0;
        self.slots_live[class] -= 1;
    }

    #[inline]
    pub(crate) fn class_of(&self, handle: Handle) -> usize {
        usize::from(self.page_class[locate(handle.0).0])
    }

    /// The whole slot, header included.
    #[inline]
    pub(crate) fn slot(&self, handle: Handle) -> &[u8] {
        let (page, byte) = locate(handle.0);
        let bytes = CLASS_BYTES[usize::from(self.page_class[page])] as usize;
        &self.pages[page][byte..byte + bytes]
    }

    #[inline]
    pub(crate) fn slot_mut(&mut self, handle: Handle) -> &mut [u8] {
        let (page, byte) = locate(handle.0);
        let bytes = CLASS_BYTES[usize::from(self.page_class[page])] as usize;
        &mut self.pages[page][byte..byte + bytes]
    }

    /// The chain's content: its encoded records.
    #[inline]
    pub(crate) fn chain(&self, handle: Handle) -> &[u8] {
        let slot = self.slot(handle);
        let used = usize::from(u16::from_le_bytes([slot[0], slot[1]]));
        &slot[HEADER_BYTES..HEADER_BYTES + used]
    }

    /// Slots handed out and not freed, per class (empty before the first
    /// allocation).
    pub(crate) fn slots_live(&self) -> &[u64] {
        &self.slots_live
    }

    /// Bytes of pages.
    pub(crate) fn page_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_BYTES as u64
    }

    /// Every heap byte the arena holds: pages and bookkeeping vectors.
    pub(crate) fn heap_bytes(&self) -> u64 {
        let vec_bytes = self.pages.capacity() * size_of::<Box<[u8]>>()
            + self.page_class.capacity()
            + self.free_head.capacity() * size_of::<u32>()
            + self.bump.capacity() * size_of::<(u32, u32)>()
            + self.slots_live.capacity() * size_of::<u64>();
        self.page_bytes() + vec_bytes as u64
    }
}

/// Sets a slot's chain byte count.
#[inline]
pub(crate) fn set_used(slot: &mut [u8], used: usize) {
    let used = u16::try_from(used).expect("chain bytes are at most CHAIN_BYTES_MAX");
    assert!(HEADER_BYTES + usize::from(used) <= slot.len());
    slot[..HEADER_BYTES].copy_from_slice(&used.to_le_bytes());
}

#[inline]
pub(crate) fn used_of(slot: &[u8]) -> usize {
    usize::from(u16::from_le_bytes([slot[0], slot[1]]))
}

#[inline]
fn locate(handle: u32) -> (usize, usize) {
    let page = (handle / UNITS_PER_PAGE) as usize;
    let byte = (handle % UNITS_PER_PAGE) as usize * UNIT_BYTES;
    (page, byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_ascend_by_at_most_an_eighth_past_64() {
        assert_eq!(&CLASS_BYTES[..6], &[24, 32, 40, 48, 56, 64]);
        for pair in CLASS_BYTES.windows(2) {
            assert!(pair[0] < pair[1]);
            assert_eq!(pair[1] % 8, 0);
            if pair[0] >= 64 {
                assert!(pair[1] - pair[0] <= pair[0] / 8);
            }
        }
        assert_eq!(class_for(1), 0);
        assert_eq!(class_for(24), 0);
        assert_eq!(class_for(25), 1);
        assert_eq!(class_for(SLOT_BYTES_MAX), CLASS_COUNT - 1);
    }

    #[test]
    fn free_slots_are_reused_before_new_ones() {
        let mut arena = Arena::new();
        let a = arena.alloc(3).expect("room");
        let b = arena.alloc(3).expect("room");
        assert_ne!(a, b);
        assert_eq!(arena.class_of(a), 3);
        arena.free(a);
        assert_eq!(arena.alloc(3).expect("room"), a);
        assert_eq!(arena.slots_live()[3], 2);
        assert_eq!(arena.page_bytes(), PAGE_BYTES as u64);
        // A second class takes its own page.
        let c = arena.alloc(CLASS_COUNT - 1).expect("room");
        assert_eq!(arena.slot(c).len(), SLOT_BYTES_MAX);
        assert_eq!(arena.page_bytes(), 2 * PAGE_BYTES as u64);
    }

    #[test]
    fn a_full_page_starts_another() {
        let mut arena = Arena::new();
        let class = CLASS_COUNT - 1;
        let per_page = PAGE_BYTES / CLASS_BYTES[class] as usize;
        for _ in 0..=per_page {
            arena.alloc(class).expect("room");
        }
        assert_eq!(arena.page_bytes(), 2 * PAGE_BYTES as u64);
    }
}
