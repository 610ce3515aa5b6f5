//! `Rollup::heap_bytes`, which the memory budget (`--memory-max`) counts,
//! tracks what the rollup really holds: the live bytes an allocator counts
//! for it as it grows, within a factor, for the sketches that grow the
//! most per group (theta, quantiles, topk) and for small groups.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Input, Limits, Ranks, Rollup, Shape};
use cardinal_sketch::hash;

/// Counts the live heap bytes of the calling thread (the test harness's
/// own threads allocate too).
struct Live;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn add(bytes: usize, sign: i64) {
    let bytes = i64::try_from(bytes).expect("an allocation below 2^63");
    // `try_with`: a thread being torn down may still allocate.
    let _ = LIVE_BYTES.try_with(|n| n.set(n.get() + sign * bytes));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// per-thread counter is the only addition, and touching it never allocates.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size(), 1);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add(layout.size(), -1);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        add(layout.size(), -1);
        add(new_size, 1);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

fn live_bytes() -> i64 {
    LIVE_BYTES.with(Cell::get)
}

/// Folds `records` records spread over `groups` keys into a rollup of
/// `aggs` (each argument the record's number, as a key or a value) and
/// checks after every step of growth that `heap_bytes` is within a factor
/// of two of the live bytes the rollup holds.
fn tracks(name: &str, aggs: Vec<AggKind>, groups: u64, records: u64) {
    let inputs = aggs.len();
    let before = live_bytes();
    let mut rollup = Rollup::new(Shape { aggs }, Limits::default()).expect("valid");
    let mut checked = 0;
    for i in 0..records {
        let key = (i % groups).to_le_bytes();
        let text = i.to_le_bytes();
        let input = if name == "quantiles" {
            Input::Int(i64::try_from(i).expect("small"))
        } else {
            Input::Key {
                hash: hash::user_id(i),
                id: Some(i),
                text: &text,
            }
        };
        rollup.fold(Timestamp(0), &key, &vec![input; inputs]);
        if (i + 1).is_power_of_two() || i + 1 == records {
            let live = u64::try_from(live_bytes() - before).expect("the rollup holds bytes");
            let counted = rollup.heap_bytes() as u64;
            assert!(
                counted * 2 >= live && counted <= live * 2,
                "{name}: {counted} bytes counted, {live} live after {} records",
                i + 1
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "{name}");
}

#[test]
fn heap_bytes_track_the_live_bytes_of_growing_sketches() {
    tracks("theta", vec![AggKind::Theta { lg_k: 12 }], 50, 200_000);
    tracks(
        "theta groups",
        vec![AggKind::Theta { lg_k: 12 }],
        20_000,
        60_000,
    );
    let quantiles = AggKind::Quantiles {
        k: 200,
        ranks: Ranks::new(&[0.5]).expect("valid"),
    };
    tracks("quantiles", vec![quantiles], 20, 200_000);
    tracks("topk", vec![AggKind::TopK { k: 10 }], 20, 100_000);
    tracks("topk groups", vec![AggKind::TopK { k: 10 }], 10_000, 30_000);
    tracks("count", vec![AggKind::CountAll], 100_000, 100_000);
}
