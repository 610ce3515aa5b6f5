//! A restore allocates in proportion to the bytes it has read, never to what
//! the header asks for: a crc32 is no protection against a forged header,
//! and one of 44 bytes may ask for 2^20 shards of 2^27 slots each. Measured
//! with a counting global allocator that keeps the peak, as in memory.rs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use cardinal_chains::{
    CampaignId, Config, Error, Kind, Record, SHARD_BITS_MAX, SHARD_SLOTS_MAX, ShardGroup, SiteId,
    Store, UserId,
};

struct Counting;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static PEAK_BYTES: AtomicI64 = AtomicI64::new(0);

fn grew(delta: i64) {
    let now = LIVE_BYTES.fetch_add(delta, Ordering::SeqCst) + delta;
    PEAK_BYTES.fetch_max(now, Ordering::SeqCst);
}

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).expect("fits")
}

// SAFETY: every method forwards to `System` with the caller's arguments,
// so `System`'s guarantees hold; the counters are a side effect only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(size(layout));
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(size(layout));
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(size(layout), Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(i64::try_from(new_size).expect("fits") - size(layout));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the most heap it held at once.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, i64) {
    let baseline = LIVE_BYTES.load(Ordering::SeqCst);
    PEAK_BYTES.store(baseline, Ordering::SeqCst);
    let out = f();
    (out, PEAK_BYTES.load(Ordering::SeqCst) - baseline)
}

const MIB: i64 = 1 << 20;
const HEADER_BYTES: usize = 44;

/// A snapshot header with a valid crc.
fn header(shard_bits: u8, group_bits: u8, shard_slots_initial: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_BYTES);
    h.extend_from_slice(b"CRDCHAIN");
    h.extend_from_slice(&cardinal_chains::SNAPSHOT_VERSION.to_le_bytes());
    h.extend_from_slice(&[shard_bits, group_bits, 0, 0]);
    h.extend_from_slice(&1_000u64.to_le_bytes());
    h.extend_from_slice(&shard_slots_initial.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// `sections` sections of no keys, each with a valid crc: the least input
/// that makes the decoder create a shard (and, one per group, a group).
fn with_empty_sections(mut bytes: Vec<u8>, sections: usize) -> Vec<u8> {
    let mut section = [0u8; 16].to_vec();
    section.extend_from_slice(&crc32fast::hash(&[0u8; 16]).to_le_bytes());
    for _ in 0..sections {
        bytes.extend_from_slice(&section);
    }
    bytes
}

fn restore_is_truncated(bytes: &[u8]) -> i64 {
    let (result, peak) = peak_of(|| Store::restore(bytes).map(|s| s.keys()));
    assert!(
        matches!(result, Err(Error::SnapshotTruncated { .. })),
        "{result:?}"
    );
    peak
}

#[test]
fn restore_allocates_what_the_input_backs() {
    // One test function: the counters are process-wide, and tests in one
    // binary run on parallel threads.
    let slots_max = SHARD_SLOTS_MAX / 2;

    // A forged header alone, or with a few sections: the layout it asks for
    // (up to 2^20 x 2^27 slots, 1.5 PiB of index) is never allocated.
    for group_bits in [0, 10, SHARD_BITS_MAX] {
        let forged = header(SHARD_BITS_MAX, group_bits, slots_max);
        let peak = restore_is_truncated(&forged);
        assert!(
            peak < MIB,
            "header alone, group_bits {group_bits}: {peak} B"
        );
        let few = with_empty_sections(forged, 3);
        let peak = restore_is_truncated(&few);
        assert!(peak < MIB, "3 sections, group_bits {group_bits}: {peak} B");
    }

    // Many empty sections: each costs a table (no slots) and, with one
    // shard per group, a group; a small multiple of its 20 bytes.
    for group_bits in [0, SHARD_BITS_MAX] {
        let bytes = with_empty_sections(header(SHARD_BITS_MAX, group_bits, slots_max), 50_000);
        let read = i64::try_from(bytes.len()).expect("fits");
        let peak = restore_is_truncated(&bytes);
        let per_section = i64::try_from(size_of::<ShardGroup>()).expect("small");
        assert!(
            peak <= 2 * (50_000 * per_section) + read + MIB,
            "50k sections, group_bits {group_bits}: {peak} B for {read} B read"
        );
        eprintln!("group_bits {group_bits}: {peak} B peak for {read} B read");
    }

    // A valid snapshot of a few keys whose header asks for the largest
    // first capacity: restores with memory for its keys, exactly as with
    // the header it was written with, and keeps the header's config.
    let config = Config {
        shard_bits: 10,
        group_bits: 2,
        lookback_ms: 1_000,
        shard_slots_initial: 4,
    };
    let mut store = Store::new(config).expect("valid");
    for user in 0..2_000u64 {
        let r = Record::new(user, Kind::CLICK, CampaignId(1), SiteId(2)).expect("time");
        store.append(UserId(user), &r).expect("room");
    }
    let mut bytes = Vec::new();
    store.snapshot(&mut bytes).expect("in memory");
    drop(store);
    let (small, small_peak) = peak_of(|| Store::restore(bytes.as_slice()).expect("valid"));
    let small_memory = small.memory();
    drop(small);

    bytes[24..28].copy_from_slice(&slots_max.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..40]);
    bytes[40..44].copy_from_slice(&crc.to_le_bytes());
    let (large, large_peak) = peak_of(|| Store::restore(bytes.as_slice()).expect("valid"));
    assert_eq!(large.config().shard_slots_initial, slots_max);
    assert_eq!(large.keys(), 2_000);
    let memory = large.memory();
    assert_eq!(memory, small_memory);
    assert_eq!(large_peak, small_peak);
    // About 1.84 slots of 12 bytes per key (presized to the load right
    // after growing, times the stagger) and at most 5 slots (4 staggered)
    // of floor per shard; the empty of the 1,024 shards cost no slots.
    assert!(
        memory.index_bytes <= 24 * memory.keys + 60 * 1_024,
        "{memory:?}"
    );
    let read = i64::try_from(bytes.len()).expect("fits");
    let arena = i64::try_from(memory.arena_bytes).expect("fits");
    // Past the arena pages (256 KiB per size class used, per group), the
    // peak is a small multiple of the input.
    assert!(
        large_peak - arena <= 4 * read + MIB,
        "{large_peak} B peak, {arena} B of arena pages, {read} B read"
    );
    eprintln!("2000 keys: {large_peak} B peak, {arena} B arena pages, {read} B read");
}
