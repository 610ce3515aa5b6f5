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
//!  free slot:     untouched (its bit is set in the page's free map)
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
//! A freed slot gets its bit set in its page's free map, one bit per slot
//! kept beside the page (at most 1,366 bytes, for the 24-byte class: 0.5%
//! of the page). Neither a free nor an allocation touches the slot's own
//! bytes: the trim frees expired chains it never reads (store.rs), and a
//! free that had to load a cold slot to thread a list through it would
//! cost a cache and TLB miss per chain. A class keeps a doubly linked list
//! of its pages that have at least an eighth of their slots free
//! ([`REUSE_DIVISOR`]), and reuses those, lowest slot first and each until
//! it is full again, before it carves its newest page further. Reusing a
//! page only once it is that free puts consecutive new chains a few slots
//! apart instead of one per page all over the arena (slots are freed in
//! hash order, which is random in the arena): at 200M keys the write of a
//! new chain into a cold, TLB-missing slot was a fifth of the store's time.
//! The price is at most an eighth of a page's slots idle until more leave.
//!
//! Pages live in 2 MiB chunks mapped from the kernel, eight pages to a
//! chunk, page `p` in chunk `p / 8` (chunk.rs: a large arena's chunks come
//! faulted in ahead on huge pages, so a slot access seldom misses the TLB).
//! Each page counts its slots in use, so "this page is now empty" is known
//! at the free that empties it, in O(1):
//!
//! - a page that is not its class's newest (carved to the end) gives its
//!   bytes back to the kernel (the whole chunk once none of its pages is
//!   held) and its number goes on the arena's list of returned page
//!   numbers, which the next new page of any class takes before the arena
//!   grows;
//! - the class's newest page is kept and rewound to its start. One empty
//!   page per class is the bound on what an emptied store holds (at most
//!   [`CLASS_COUNT`] = 57 pages, 14.25 MiB per shard group), and it is what
//!   stops a class whose last chain leaves and comes back from allocating
//!   and freeing a page each time: a page is allocated only when the newest
//!   one is full, and released only after all of its slots were freed, so
//!   the 256 KiB of zeroing is paid over at least a page's worth of slots.
//!
//! No operation walks a list: allocation takes the lowest set bit of the
//! class's first page with free slots (from a word index below which the
//! map is known to be clear), and a free sets a bit and links or unlinks
//! one page.
//
// ADVICE FOR HACKERS: the snapshot (snapshot.rs) stores chains by content,
// not by handle, so changing the classes, the page size or the unit needs no
// format change. Changing `UNIT_BYTES` or `PAGE_BYTES` changes
// `ARENA_BYTES_MAX`; the memory test in tests/memory.rs checks that
// `Arena::heap_bytes` still matches the allocator, and that the chunks
// mapped match the process's count (`arena_mapped_bytes`).

use crate::chunk::{CHUNK_BYTES, Chunk, Reserve};
use crate::error::{Error, Result};

/// Bytes of chain content (encoded records) one user may hold. When an
/// append would pass it, the chain's oldest records are dropped to make
/// room and counted in [`crate::AppendOutcome::records_evicted`]: with a
/// lookback window, the oldest touch points are the least useful ones. 16
/// KiB is the seed's largest chain (Big Memory, part 1: "16 B to 16 KB").
pub const CHAIN_BYTES_MAX: usize = 16 * 1024;

/// Bytes of one arena page. Large enough that page bookkeeping is noise
/// (a 40-byte `pages` entry and a free map of at most 1,366 bytes per
/// 256 KiB) and that the largest slot fits;
/// small enough that a class's partly filled (or emptied and kept) newest
/// page wastes at most 256 KiB (all 57 classes: 14.25 MiB per shard group).
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
const WORD_BITS: usize = u64::BITS as usize;
/// A page goes on its class's list for reuse once at least
/// `1 / REUSE_DIVISOR` of its slots are free (module doc).
pub(crate) const REUSE_DIVISOR: usize = 8;

/// Pages in one chunk of mapped memory (chunk.rs): page `p` lives in chunk
/// `p / PAGES_PER_CHUNK`.
const PAGES_PER_CHUNK: usize = CHUNK_BYTES / PAGE_BYTES;

const _: () = assert!(PAGE_BYTES == 256 * 1024);
const _: () =
    assert!(CHUNK_BYTES.is_multiple_of(PAGE_BYTES) && PAGES_PER_CHUNK <= u8::MAX as usize);
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

/// Words of a page's free map for `class`: one bit per slot.
fn free_map_words(class: usize) -> usize {
    (PAGE_BYTES / CLASS_BYTES[class] as usize).div_ceil(WORD_BITS)
}

/// Free slots at which a page of each class goes on the list for reuse.
// At most 10,922 slots a page: fits a u32.
#[allow(clippy::cast_possible_truncation)]
const REUSE_FREE_MIN: [u32; CLASS_COUNT] = {
    let mut table = [0u32; CLASS_COUNT];
    let mut i = 0;
    while i < CLASS_COUNT {
        let slots = PAGE_BYTES / CLASS_BYTES[i] as usize;
        let min = slots / REUSE_DIVISOR;
        table[i] = if min == 0 { 1 } else { min as u32 };
        i += 1;
    }
    table
};

/// One page's bookkeeping.
#[derive(Debug)]
struct Page {
    /// One bit per slot, set while the slot is free for reuse (freed after
    /// being handed out; the uncarved rest of the newest page is not in
    /// it). Empty while the page is returned.
    free: Box<[u64]>,
    class: u8,
    /// Slots handed out and not freed.
    slots_live: u32,
    /// Bits set in `free`.
    slots_free: u32,
    /// No word of `free` before this one has a bit set.
    free_word: u32,
    /// On its class's list of pages to reuse.
    listed: bool,
    /// Links in the class's list of pages with free slots (held pages), or
    /// in the arena's list of returned pages (`next` only).
    prev: u32,
    next: u32,
}

impl Page {
    /// Whether the page holds its bytes: every class's free map has at
    /// least one word, and a returned page has none.
    fn held(&self) -> bool {
        !self.free.is_empty()
    }
}

/// The slab arena of one shard group.
#[derive(Debug)]
pub(crate) struct Arena {
    pages: Vec<Page>,
    /// The memory of pages `8 * i .. 8 * i + 8` ([`PAGES_PER_CHUNK`]): a
    /// chunk is unmapped once none of its pages is held.
    chunks: Vec<ChunkSlot>,
    /// Chunks mapped (`Some` in `chunks`).
    chunks_mapped: u32,
    /// Where chunks come from (chunk.rs).
    reserve: Reserve,
    /// Pages holding their bytes.
    pages_held: u32,
    /// Bytes of the free maps of the pages held.
    free_map_bytes: u64,
    /// The first returned page (a page number, reused before the arena
    /// grows), or `FREE_NONE`.
    returned_head: u32,
    /// Per class: the first page with free slots on its list, or
    /// `FREE_NONE`.
    partial_head: Vec<u32>,
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
        Arena {
            pages: Vec::new(),
            chunks: Vec::new(),
            chunks_mapped: 0,
            reserve: Reserve::default(),
            pages_held: 0,
            free_map_bytes: 0,
            returned_head: FREE_NONE,
            partial_head: Vec::new(),
            bump: Vec::new(),
            slots_live: Vec::new(),
        }
    }

    /// A slot of `class`. Fails with [`Error::LimitExceeded`] when a new
    /// page would pass [`ARENA_BYTES_MAX`]; nothing changes then.
    pub(crate) fn alloc(&mut self, class: usize) -> Result<Handle> {
        assert!(class < CLASS_COUNT);
        if self.partial_head.is_empty() {
            self.partial_head = vec![FREE_NONE; CLASS_COUNT];
            self.bump = vec![(FREE_NONE, 0); CLASS_COUNT];
            self.slots_live = vec![0; CLASS_COUNT];
        }
        let partial = self.partial_head[class];
        if partial != FREE_NONE {
            let page = &mut self.pages[partial as usize];
            debug_assert!(page.slots_free > 0, "a page on the list has a free slot");
            let mut word = page.free_word as usize;
            while page.free[word] == 0 {
                word += 1;
            }
            let bits = page.free[word];
            page.free[word] = bits & (bits - 1);
            page.free_word = u32::try_from(word).expect("a page has under 2^32 words");
            page.slots_free -= 1;
            page.slots_live += 1;
            self.slots_live[class] += 1;
            let size = CLASS_BYTES[class] as usize;
            let slot = word * WORD_BITS + bits.trailing_zeros() as usize;
            let unit = slot * size / UNIT_BYTES;
            let handle = partial * UNITS_PER_PAGE
                + u32::try_from(unit).expect("a unit of a page fits a u32");
            // The class's next allocation likely takes the next free slot
            // of this word, and its caller writes it at once: start loading
            // it now, while this one is filled.
            let rest = page.free[word];
            let full = page.slots_free == 0;
            if rest != 0 {
                let next = word * WORD_BITS + rest.trailing_zeros() as usize;
                crate::index::prefetch(&self.page_memory(partial as usize)[next * size]);
            }
            if full {
                self.unlink_partial(partial);
            }
            return Ok(Handle(handle));
        }
        let slot_units = CLASS_BYTES[class] / UNIT_BYTES_U32;
        let (mut page, mut unit) = self.bump[class];
        if page == FREE_NONE || unit + slot_units > UNITS_PER_PAGE {
            page = self.take_page(class)?;
            unit = 0;
        }
        let handle = page * UNITS_PER_PAGE + unit;
        self.bump[class] = (page, unit + slot_units);
        self.pages[page as usize].slots_live += 1;
        self.slots_live[class] += 1;
        debug_assert_ne!(handle, FREE_NONE);
        Ok(Handle(handle))
    }

    /// A fresh page for `class`: a returned page number if there is one,
    /// else a new one past the last. Its bytes are zeroes: a fresh chunk's,
    /// or released (`Chunk::release`) when the page was returned.
    fn take_page(&mut self, class: usize) -> Result<u32> {
        let page = if self.returned_head == FREE_NONE {
            if self.pages.len() >= PAGES_MAX {
                return Err(Error::LimitExceeded {
                    limit: "ARENA_BYTES_MAX",
                    max: ARENA_BYTES_MAX,
                    found: (self.pages.len() as u64 + 1) * PAGE_BYTES as u64,
                });
            }
            self.pages.len()
        } else {
            self.returned_head as usize
        };
        // The chunk first: if the kernel refuses it, nothing has changed.
        let number = page / PAGES_PER_CHUNK;
        if number == self.chunks.len() {
            self.chunks.push(ChunkSlot {
                chunk: None,
                pages_held: 0,
            });
        }
        if self.chunks[number].chunk.is_none() {
            let chunk = self
                .reserve
                .take(self.chunks_mapped as usize)
                .map_err(|source| Error::OutOfMemory {
                    bytes: CHUNK_BYTES as u64,
                    source,
                })?;
            self.chunks[number].chunk = Some(chunk);
            self.chunks_mapped += 1;
        }
        self.chunks[number].pages_held += 1;
        if page == self.pages.len() {
            self.pages.push(Page {
                free: Box::default(),
                class: 0,
                slots_live: 0,
                slots_free: 0,
                free_word: 0,
                listed: false,
                prev: FREE_NONE,
                next: FREE_NONE,
            });
        } else {
            self.returned_head = self.pages[page].next;
        }
        let page = u32::try_from(page).expect("PAGES_MAX fits a u32");
        let entry = &mut self.pages[page as usize];
        debug_assert!(!entry.held() && entry.slots_live == 0);
        entry.free = vec![0u64; free_map_words(class)].into_boxed_slice();
        self.free_map_bytes += (entry.free.len() * size_of::<u64>()) as u64;
        entry.class = u8::try_from(class).expect("CLASS_COUNT < 255");
        entry.slots_free = 0;
        entry.free_word = 0;
        entry.listed = false;
        entry.prev = FREE_NONE;
        entry.next = FREE_NONE;
        self.pages_held += 1;
        Ok(page)
    }

    /// Prefetches the first cache line of `handle`'s slot, where an append
    /// reads the chain's length (and, for a chain of up to ~60 bytes,
    /// writes its record).
    #[inline]
    pub(crate) fn prefetch(&self, handle: Handle) {
        let (page, byte) = locate(handle.0);
        crate::index::prefetch(&self.page_memory(page)[byte]);
    }

    /// Prefetches the slot that the `nth` allocation of `class` from now
    /// (0 = the next) will likely return ([`Arena::nth_free`]): a batch of
    /// appends asks for the slots of its new chains while their index
    /// lines load, so writing a new chain does not wait for a cold line
    /// (with slots freed all over the arena, the next free one is rarely in
    /// cache).
    #[inline]
    pub(crate) fn prefetch_nth_free(&self, class: usize, nth: usize) {
        if let Some(handle) = self.nth_free(class, nth) {
            self.prefetch(handle);
        }
    }

    /// The slot the `nth` allocation of `class` from now returns if no
    /// slot of the class is freed in between and it comes from the class's
    /// first page with free slots or its newest page (`None` past those).
    fn nth_free(&self, class: usize, nth: usize) -> Option<Handle> {
        let &partial = self.partial_head.get(class)?;
        let size = CLASS_BYTES[class] as usize;
        let (page, byte) = if partial == FREE_NONE {
            let (page, unit) = self.bump[class];
            let byte = unit as usize * UNIT_BYTES + nth * size;
            if page == FREE_NONE || byte + size > PAGE_BYTES {
                return None;
            }
            (page, byte)
        } else {
            let entry = &self.pages[partial as usize];
            let mut skip = u32::try_from(nth).ok()?;
            let mut found = None;
            for (word, &bits) in entry.free.iter().enumerate().skip(entry.free_word as usize) {
                let ones = bits.count_ones();
                if skip >= ones {
                    skip -= ones;
                    continue;
                }
                let mut bits = bits;
                for _ in 0..skip {
                    bits &= bits - 1;
                }
                found = Some((word * WORD_BITS + bits.trailing_zeros() as usize) * size);
                break;
            }
            (partial, found?)
        };
        let unit = u32::try_from(byte / UNIT_BYTES).expect("a unit of a page fits a u32");
        Some(Handle(page * UNITS_PER_PAGE + unit))
    }

    /// Prefetches what [`Arena::free`] of `handle` writes: the word of its
    /// page's free map (the page's entry is read now, so it is on its way
    /// too). A trim frees chains it does not read; without this, each free
    /// waits for a cache miss on a free map.
    #[inline]
    pub(crate) fn prefetch_free(&self, handle: Handle) {
        let (index, byte) = locate(handle.0);
        let page = &self.pages[index];
        let slot = byte / CLASS_BYTES[usize::from(page.class)] as usize;
        if let Some(word) = page.free.get(slot / WORD_BITS) {
            crate::index::prefetch(word);
        }
    }

    /// Returns a slot to its page's free map, without touching the slot's
    /// bytes. When that leaves the page
    /// with no slot in use, the page's bytes go back to the allocator and
    /// its number is kept for the next page of any class; the class's
    /// page being carved is instead rewound to its start and kept, so a
    /// class whose last chain leaves and comes back does not allocate a
    /// page each time.
    pub(crate) fn free(&mut self, handle: Handle) {
        let (index, byte) = locate(handle.0);
        let number = u32::try_from(index).expect("pages are numbered by u32");
        let page = &mut self.pages[index];
        let class = usize::from(page.class);
        assert!(page.slots_live > 0, "free of a slot in an empty page");
        page.slots_live -= 1;
        let empty = page.slots_live == 0;
        let listed = page.listed;
        if !empty {
            let slot = byte / CLASS_BYTES[class] as usize;
            let (word, bit) = (slot / WORD_BITS, slot % WORD_BITS);
            debug_assert_eq!(page.free[word] >> bit & 1, 0, "double free");
            page.free[word] |= 1 << bit;
            page.slots_free += 1;
            let word = u32::try_from(word).expect("a page has under 2^32 words");
            page.free_word = page.free_word.min(word);
        }
        self.slots_live[class] -= 1;
        if empty {
            if listed {
                self.unlink_partial(number);
            }
            let page = &mut self.pages[index];
            page.slots_free = 0;
            page.free_word = 0;
            if self.bump[class].0 == number {
                page.free.fill(0);
                self.bump[class].1 = 0;
            } else {
                self.free_map_bytes -= (page.free.len() * size_of::<u64>()) as u64;
                page.free = Box::default();
                page.next = self.returned_head;
                self.returned_head = number;
                self.pages_held -= 1;
                self.release_page(index);
            }
        } else if !listed && self.pages[index].slots_free >= REUSE_FREE_MIN[class] {
            let head = self.partial_head[class];
            let page = &mut self.pages[index];
            page.listed = true;
            page.prev = FREE_NONE;
            page.next = head;
            if head != FREE_NONE {
                self.pages[head as usize].prev = number;
            }
            self.partial_head[class] = number;
        }
    }

    /// Takes `page` off its class's list of pages with free slots.
    fn unlink_partial(&mut self, page: u32) {
        let (class, prev, next) = {
            let entry = &mut self.pages[page as usize];
            debug_assert!(entry.listed);
            let links = (usize::from(entry.class), entry.prev, entry.next);
            entry.listed = false;
            entry.prev = FREE_NONE;
            entry.next = FREE_NONE;
            links
        };
        if prev == FREE_NONE {
            debug_assert_eq!(self.partial_head[class], page);
            self.partial_head[class] = next;
        } else {
            self.pages[prev as usize].next = next;
        }
        if next != FREE_NONE {
            self.pages[next as usize].prev = prev;
        }
    }

    #[inline]
    pub(crate) fn class_of(&self, handle: Handle) -> usize {
        usize::from(self.pages[locate(handle.0).0].class)
    }

    /// The whole slot, header included.
    #[inline]
    pub(crate) fn slot(&self, handle: Handle) -> &[u8] {
        let (page, byte) = locate(handle.0);
        let bytes = CLASS_BYTES[usize::from(self.pages[page].class)] as usize;
        &self.page_memory(page)[byte..byte + bytes]
    }

    #[inline]
    pub(crate) fn slot_mut(&mut self, handle: Handle) -> &mut [u8] {
        let (page, byte) = locate(handle.0);
        let bytes = CLASS_BYTES[usize::from(self.pages[page].class)] as usize;
        &mut self.page_memory_mut(page)[byte..byte + bytes]
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

    /// Pages holding their bytes.
    pub(crate) fn pages_held(&self) -> u64 {
        u64::from(self.pages_held)
    }

    /// Pages held with no slot in use. Only a class's newest page stays
    /// held when it empties, so this is at most one per class.
    pub(crate) fn pages_idle(&self) -> u64 {
        let idle = self
            .bump
            .iter()
            .filter(|&&(page, _)| page != FREE_NONE && self.pages[page as usize].slots_live == 0)
            .count();
        idle as u64
    }

    /// Bytes of pages held.
    pub(crate) fn page_bytes(&self) -> u64 {
        self.pages_held() * PAGE_BYTES as u64
    }

    /// Bytes of chunks mapped: pages held, and pages returned (released
    /// to the kernel, not resident) or not yet carved in chunks that hold a
    /// page.
    pub(crate) fn mapped_bytes(&self) -> u64 {
        u64::from(self.chunks_mapped) * CHUNK_BYTES as u64
    }

    /// Chunks the arena mapped on its own thread after it had started to
    /// ask for chunks faulted in ahead: the prefault thread fell behind.
    pub(crate) fn chunks_mapped_inline(&self) -> u64 {
        self.reserve.mapped_inline
    }

    /// Every byte the arena holds from the global allocator: free maps and
    /// bookkeeping vectors (the pages themselves are mapped chunks:
    /// [`Arena::page_bytes`], [`Arena::mapped_bytes`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let vec_bytes = self.pages.capacity() * size_of::<Page>()
            + self.chunks.capacity() * size_of::<ChunkSlot>()
            + self.partial_head.capacity() * size_of::<u32>()
            + self.bump.capacity() * size_of::<(u32, u32)>()
            + self.slots_live.capacity() * size_of::<u64>();
        self.free_map_bytes + vec_bytes as u64
    }

    /// The bytes of held page `page`.
    #[inline]
    fn page_memory(&self, page: usize) -> &[u8] {
        let chunk = self.chunks[page / PAGES_PER_CHUNK]
            .chunk
            .as_ref()
            .expect("a held page's chunk is mapped");
        let at = page % PAGES_PER_CHUNK * PAGE_BYTES;
        &chunk.bytes()[at..at + PAGE_BYTES]
    }

    #[inline]
    fn page_memory_mut(&mut self, page: usize) -> &mut [u8] {
        let chunk = self.chunks[page / PAGES_PER_CHUNK]
            .chunk
            .as_mut()
            .expect("a held page's chunk is mapped");
        let at = page % PAGES_PER_CHUNK * PAGE_BYTES;
        &mut chunk.bytes_mut()[at..at + PAGE_BYTES]
    }

    /// Gives a returned page's memory back to the kernel: the whole chunk
    /// once none of its pages is held, else the page's bytes alone.
    fn release_page(&mut self, page: usize) {
        let slot = &mut self.chunks[page / PAGES_PER_CHUNK];
        slot.pages_held -= 1;
        if slot.pages_held == 0 {
            slot.chunk = None;
            self.chunks_mapped -= 1;
        } else {
            let chunk = slot.chunk.as_mut().expect("a held page's chunk is mapped");
            chunk.release(page % PAGES_PER_CHUNK * PAGE_BYTES, PAGE_BYTES);
        }
    }
}

/// A chunk of [`PAGES_PER_CHUNK`] pages, and how many of them are held.
#[derive(Debug)]
struct ChunkSlot {
    chunk: Option<Chunk>,
    pages_held: u8,
}

impl Arena {
    /// Calls `f` with the chain of every slot in use, page by page: a
    /// sequential walk of the arena, for counts that are not kept as the
    /// store runs (the bytes of a chain freed unread are not known).
    pub(crate) fn for_each_chain(&self, mut f: impl FnMut(&[u8])) {
        for (number, page) in self.pages.iter().enumerate() {
            if !page.held() || page.slots_live == 0 {
                continue;
            }
            let bytes = self.page_memory(number);
            let class = usize::from(page.class);
            let size = CLASS_BYTES[class] as usize;
            // A page other than its class's newest was carved to the end.
            let carved = match self.bump.get(class) {
                Some(&(bump, unit)) if bump as usize == number => unit as usize * UNIT_BYTES / size,
                _ => PAGE_BYTES / size,
            };
            for slot in 0..carved {
                if page.free[slot / WORD_BITS] >> (slot % WORD_BITS) & 1 == 1 {
                    continue;
                }
                let at = slot * size;
                let used = used_of(&bytes[at..]);
                f(&bytes[at + HEADER_BYTES..at + HEADER_BYTES + used]);
            }
        }
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
    fn free_slots_are_reused_before_new_ones_once_an_eighth_of_the_page() {
        let mut arena = Arena::new();
        let class = 3;
        let per_page = PAGE_BYTES / CLASS_BYTES[class] as usize;
        let handles: Vec<Handle> = (0..per_page)
            .map(|_| arena.alloc(class).expect("room"))
            .collect();
        assert_eq!(arena.class_of(handles[0]), class);
        // Below an eighth free, the class carves a new page.
        let reuse = per_page / REUSE_DIVISOR;
        for &h in handles.iter().rev().take(reuse - 1) {
            arena.free(h);
        }
        let fresh = arena.alloc(class).expect("room");
        assert_eq!(page_of(fresh), 1);
        // At an eighth, the freed slots go first, lowest first, all of them.
        arena.free(handles[0]);
        let again: Vec<Handle> = (0..reuse)
            .map(|_| arena.alloc(class).expect("room"))
            .collect();
        let mut expected = vec![handles[0]];
        expected.extend(handles[per_page - reuse + 1..].iter().copied());
        assert_eq!(again, expected);
        assert_eq!(page_of(arena.alloc(class).expect("room")), 1);
        assert_eq!(arena.slots_live()[class], per_page as u64 + 2);
        assert_eq!(arena.page_bytes(), 2 * PAGE_BYTES as u64);
        // A second class takes its own page.
        let c = arena.alloc(CLASS_COUNT - 1).expect("room");
        assert_eq!(arena.slot(c).len(), SLOT_BYTES_MAX);
        assert_eq!(arena.page_bytes(), 3 * PAGE_BYTES as u64);
    }

    #[test]
    fn nth_free_names_the_slots_the_next_allocations_take() {
        let mut arena = Arena::new();
        let class = 2;
        let handles: Vec<Handle> = (0..300)
            .map(|_| arena.alloc(class).expect("room"))
            .collect();
        // Carving the newest page: the next slots in order.
        let ahead: Vec<Option<Handle>> = (0..4).map(|n| arena.nth_free(class, n)).collect();
        let taken: Vec<Option<Handle>> = (0..4).map(|_| arena.alloc(class).ok()).collect();
        assert_eq!(ahead, taken);
        // Reusing freed slots: lowest first, across words of the free map.
        for &h in handles.iter().step_by(7) {
            arena.free(h);
        }
        let ahead: Vec<Option<Handle>> = (0..30).map(|n| arena.nth_free(class, n)).collect();
        let taken: Vec<Option<Handle>> = (0..30).map(|_| arena.alloc(class).ok()).collect();
        assert_eq!(ahead, taken);
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

    #[test]
    fn class_count_and_page_entry_are_pinned() {
        // The docs of the module and of `PAGE_BYTES` quote them.
        assert_eq!(CLASS_COUNT, 57);
        assert_eq!(size_of::<Page>(), 40);
    }

    fn page_of(handle: Handle) -> usize {
        locate(handle.0).0
    }

    #[test]
    fn an_emptied_page_is_returned_and_reused_by_another_class() {
        let mut arena = Arena::new();
        let small = 0;
        let per_page = PAGE_BYTES / CLASS_BYTES[small] as usize;
        // Fill page 0 and start page 1, which is then the class's newest.
        let first: Vec<Handle> = (0..per_page)
            .map(|_| arena.alloc(small).expect("room"))
            .collect();
        assert!(first.iter().all(|&h| page_of(h) == 0));
        let newest = arena.alloc(small).expect("room");
        assert_eq!(page_of(newest), 1);
        assert_eq!(arena.pages_held(), 2);
        let heap_full = arena.heap_bytes();

        // Freeing all but one slot of page 0 keeps it; the last returns it.
        for &h in &first[1..] {
            arena.free(h);
        }
        assert_eq!(arena.pages_held(), 2);
        arena.free(first[0]);
        assert_eq!(arena.pages_held(), 1);
        assert_eq!(arena.page_bytes(), PAGE_BYTES as u64);
        let free_map = (free_map_words(small) * size_of::<u64>()) as u64;
        assert_eq!(arena.heap_bytes(), heap_full - free_map);
        assert_eq!(
            arena.mapped_bytes(),
            CHUNK_BYTES as u64,
            "page 1 still holds the chunk"
        );
        assert_eq!(arena.slots_live()[small], 1);

        // The class itself carves its newest page rather than taking a
        // returned one.
        let again = arena.alloc(small).expect("room");
        assert_eq!(page_of(again), 1);
        assert_eq!(arena.pages_idle(), 0);
        arena.free(again);

        // Another class's first page takes the returned number 0.
        let large = CLASS_COUNT - 1;
        let big = arena.alloc(large).expect("room");
        assert_eq!(page_of(big), 0);
        assert_eq!(arena.class_of(big), large);
        assert_eq!(arena.slot(big).len(), SLOT_BYTES_MAX);
        assert_eq!(arena.pages_held(), 2);
        // Its bytes are fresh zeroes, whatever the page held before.
        assert!(arena.slot(big).iter().all(|&b| b == 0));
        set_used(arena.slot_mut(big), CHAIN_BYTES_MAX);
        assert_eq!(arena.chain(big).len(), CHAIN_BYTES_MAX);
        // The small class's chain is untouched.
        assert_eq!(arena.class_of(newest), small);
        assert_eq!(arena.pages.len(), 2, "no page number past the two in use");
    }

    #[test]
    fn a_chunk_is_unmapped_once_none_of_its_pages_is_held() {
        let mut arena = Arena::new();
        let class = CLASS_COUNT - 1;
        let per_page = PAGE_BYTES / CLASS_BYTES[class] as usize;
        // Two chunks' worth of pages, plus one page of a third.
        let pages = 2 * PAGES_PER_CHUNK + 1;
        let handles: Vec<Handle> = (0..pages * per_page)
            .map(|_| arena.alloc(class).expect("room"))
            .collect();
        assert_eq!(arena.mapped_bytes(), 3 * CHUNK_BYTES as u64);
        for &h in &handles {
            arena.slot_mut(h)[2] = 0xAB;
        }
        // Empty the first chunk's pages: the chunk goes back whole.
        for &h in &handles[..PAGES_PER_CHUNK * per_page] {
            arena.free(h);
        }
        assert_eq!(arena.mapped_bytes(), 2 * CHUNK_BYTES as u64);
        assert_eq!(arena.pages_held(), pages as u64 - PAGES_PER_CHUNK as u64);
        // One page of the second chunk: released alone, the chunk stays.
        let second = &handles[PAGES_PER_CHUNK * per_page..(PAGES_PER_CHUNK + 1) * per_page];
        for &h in second {
            arena.free(h);
        }
        assert_eq!(arena.mapped_bytes(), 2 * CHUNK_BYTES as u64);
        // The chains left keep their bytes.
        for &h in &handles[(PAGES_PER_CHUNK + 1) * per_page..] {
            assert_eq!(arena.slot(h)[2], 0xAB);
        }
        // Returned pages are reused (the last returned first) and read as
        // zeroes, whether their chunk was mapped again or only released.
        for _ in 0..=PAGES_PER_CHUNK {
            let h = arena.alloc(class).expect("room");
            assert!(page_of(h) <= PAGES_PER_CHUNK, "a returned page number");
            assert!(arena.slot(h).iter().all(|&b| b == 0));
            for _ in 1..per_page {
                arena.alloc(class).expect("room");
            }
        }
        assert_eq!(arena.mapped_bytes(), 3 * CHUNK_BYTES as u64);
        assert_eq!(arena.pages_held(), pages as u64);
    }

    #[test]
    fn the_newest_page_of_a_class_is_kept_and_rewound() {
        let mut arena = Arena::new();
        let a = arena.alloc(5).expect("room");
        let b = arena.alloc(5).expect("room");
        arena.free(a);
        arena.free(b);
        assert_eq!(arena.pages_held(), 1);
        assert_eq!(arena.pages_idle(), 1);
        assert_eq!(arena.slots_live()[5], 0);
        // Rewound: carving starts again at the page's first slot.
        assert_eq!(arena.alloc(5).expect("room"), a);
        assert_eq!(arena.alloc(5).expect("room"), b);
        assert_eq!(arena.pages_held(), 1);
    }

    /// Random allocations and frees over a few classes against a model of
    /// the live slots: each slot keeps what was written to it, no two live
    /// slots overlap, and once every slot is freed at most one page per
    /// class that was used is held.
    #[test]
    fn random_allocs_and_frees_keep_contents_and_return_pages() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        let classes = [0usize, 2, 9, 30, CLASS_COUNT - 1];
        for seed in 0..4u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut arena = Arena::new();
            let mut live: Vec<(Handle, u8)> = Vec::new();
            let mut stamp = 0u8;
            for step in 0..40_000u32 {
                // Phases of growth and shrinkage so pages fill and empty.
                let grow = (step / 5_000) % 2 == 0;
                if live.is_empty() || rng.random_bool(if grow { 0.7 } else { 0.3 }) {
                    let class = classes[rng.random_range(0..classes.len())];
                    let handle = arena.alloc(class).expect("room");
                    stamp = stamp.wrapping_add(1);
                    arena.slot_mut(handle).fill(stamp);
                    live.push((handle, stamp));
                } else {
                    let at = rng.random_range(0..live.len());
                    let (handle, stamp) = live.swap_remove(at);
                    assert!(arena.slot(handle).iter().all(|&b| b == stamp));
                    arena.free(handle);
                }
            }
            let mut counts = [0u64; CLASS_COUNT];
            for &(handle, stamp) in &live {
                assert!(arena.slot(handle).iter().all(|&b| b == stamp));
                counts[arena.class_of(handle)] += 1;
            }
            assert_eq!(arena.slots_live(), &counts[..]);
            // The page walk meets exactly the live slots.
            for &(handle, _) in &live {
                set_used(arena.slot_mut(handle), page_of(handle) % 16);
            }
            let mut walked = 0;
            let mut bytes = 0;
            arena.for_each_chain(|chain| {
                walked += 1;
                bytes += chain.len();
            });
            assert_eq!(walked, live.len());
            let expected: usize = live.iter().map(|&(h, _)| page_of(h) % 16).sum();
            assert_eq!(bytes, expected);
            for &(handle, stamp) in &live {
                arena.slot_mut(handle).fill(stamp);
            }
            for (handle, _) in live.drain(..) {
                arena.free(handle);
            }
            assert!(arena.slots_live().iter().all(|&n| n == 0));
            assert!(arena.pages_held() <= classes.len() as u64);
            assert_eq!(arena.pages_idle(), arena.pages_held());
            assert!(arena.pages.len() > classes.len(), "pages were returned");
        }
    }
}
