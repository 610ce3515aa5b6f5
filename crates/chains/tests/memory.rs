//! Memory accounting (issue 4): the store's own byte counts match what it
//! allocated, measured by a counting global allocator, through growth,
//! chain moves, conversions, trims and a restore.

use cardinal_chains::{CampaignId, Config, KeyIndex, Kind, Record, SiteId, Store, UserId};

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::live;

/// Heap bytes the store holds, as the allocator saw them: measured around
/// the construction of a `Box<Store>` so the store's own struct is part of
/// it, which `memory()` also counts (`size_of::<Store>()` is added here).
fn assert_accounted(store: &Store, baseline: i64, what: &str) {
    let allocated = live() - baseline - i64::try_from(size_of::<Store>()).expect("small");
    let reported = i64::try_from(store.memory().heap_bytes).expect("fits");
    assert_eq!(allocated, reported, "after {what}");
}

#[test]
fn heap_bytes_match_the_allocator() {
    // One test function: the counter is process-wide, and tests in one
    // binary run on parallel threads.
    let config = Config {
        shard_bits: 6,
        group_bits: 1,
        lookback_ms: 50_000,
        shard_slots_initial: 8,
    };
    let baseline = live();
    let mut store = Box::new(Store::new(config).expect("valid"));
    assert_accounted(&store, baseline, "new");

    let mut out = Vec::with_capacity(1024);
    let out_bytes = i64::try_from(out.capacity() * size_of::<Record>()).expect("fits");
    let baseline = baseline + out_bytes;
    let mut moves = 0;
    let mut growths = 0;
    for i in 0..60_000u64 {
        let user = UserId(i.wrapping_mul(0x9e37_79b9) % 5_000);
        let mut r = Record::new(i, Kind::CLICK, CampaignId(1), SiteId(2)).expect("time");
        r.revenue_micros = i64::try_from(i % 3).expect("small");
        let outcome = store.append(user, &r).expect("room");
        moves += u32::from(outcome.chain_moved);
        growths += u32::from(outcome.shard_grew);
        if i % 97 == 0 {
            out.clear();
            store.take(UserId(i % 5_000), &mut out).expect("own group");
        }
    }
    assert!(
        moves > 1_000 && growths > 50,
        "moves {moves}, growths {growths}"
    );
    assert_accounted(&store, baseline, "appends, moves, growth and conversions");

    store.trim_all(80_000);
    assert_accounted(&store, baseline, "trimming");

    let memory = store.memory();
    assert!(memory.keys > 1_000);
    assert!(
        memory.index_bytes <= 18 * memory.keys + 12 * 64 * 16,
        "{memory:?}"
    );

    let mut snapshot = Vec::new();
    store.snapshot(&mut snapshot).expect("in memory");
    drop(store);
    let snapshot_bytes = i64::try_from(snapshot.capacity()).expect("fits");
    let baseline = live();
    let restored = Box::new(Store::restore(snapshot.as_slice()).expect("own snapshot"));
    assert_accounted(&restored, baseline, "restore");
    assert_eq!(restored.memory().keys, memory.keys);
    assert_eq!(restored.memory().record_bytes, memory.record_bytes);
    let mapped = restored.memory().arena_mapped_bytes;
    assert!(mapped >= restored.memory().arena_bytes && mapped > 0);
    // The process's count includes chunks faulted in ahead, and one being
    // mapped by the prefault thread.
    assert!(cardinal_chains::arena_mapped_bytes() >= mapped);
    drop(restored);
    drop(snapshot);
    drop(out);
    assert_eq!(live(), baseline - snapshot_bytes - out_bytes);
    // Every chunk goes back: the store's own at its drop, those faulted in
    // for it once the prefault thread sees that no arena wants them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cardinal_chains::arena_mapped_bytes() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} B of chunks still mapped",
            cardinal_chains::arena_mapped_bytes()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn key_index_heap_bytes_match_the_allocator() {
    let baseline = live();
    let mut index = Box::new(KeyIndex::new(5, 8).expect("valid"));
    let own = i64::try_from(size_of::<KeyIndex>()).expect("small");
    let check = |index: &KeyIndex, what: &str| {
        let reported = i64::try_from(index.heap_bytes()).expect("fits");
        assert_eq!(live() - baseline - own, reported, "after {what}");
    };
    check(&index, "new");
    let mut growths = 0;
    for i in 0..50_000u64 {
        growths += u32::from(index.insert(i * 7919, 1).expect("room").shard_grew);
    }
    assert!(growths > 100, "growths {growths}");
    check(&index, "inserts and growth");
    for i in 0..25_000u64 {
        assert_eq!(index.remove(i * 7919), Some(1));
    }
    check(&index, "removals");
    assert!(index.heap_bytes() <= 18 * 50_000 + 12 * 8 * 32 * 2);
    drop(index);
    assert_eq!(live(), baseline);
}
