//! A KLL sketch allocates only when its buffer grows: doubling up to the
//! first level's capacity, then once per new level (a level is added each
//! time `n` roughly doubles). Compactions work in place.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cardinal_sketch::Sketch;
use cardinal_sketch::quantiles::Quantiles;

struct Counting;

// Counted per thread: the test harness's other threads may allocate while
// the test runs, and only the folding thread's allocations are in question.
thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: delegates every call to the system allocator unchanged and only
// counts allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn inserting_allocates_once_per_level_not_per_compaction() {
    let mut q = Quantiles::new(200).expect("valid k");
    let before = ALLOCATIONS.with(Cell::get);
    let mut x: u64 = 1;
    for _ in 0..1_000_000 {
        // A 64-bit LCG: spread values, no allocation.
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        q.insert((x >> 11) as f64);
    }
    let allocations = ALLOCATIONS.with(Cell::get) - before;
    assert_eq!(q.count(), 1_000_000);
    // Growth 8, 16, ..., 200 is 6 allocations; 1e6 values at k = 200 end
    // with about 16 levels (15 added, measured 21 in all). Tens of thousands
    // of compactions ran, so one allocation per compaction would fail this.
    assert!(allocations <= 6 + 20, "{allocations} allocations");
    assert!(q.encode().len() < 8 * 1000, "about 3k items retained");
}
