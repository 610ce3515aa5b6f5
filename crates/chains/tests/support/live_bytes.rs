//! A global allocator that counts the heap bytes the calling thread holds,
//! for the tests that check the store's own byte counts against it.
//!
//! Included by those test targets with
//! `#[path = "support/live_bytes.rs"] mod live_bytes;` (a test target has
//! one global allocator, so each includes its own copy of this module).
//!
//! Counted per thread: the test harness's other threads allocate too
//! (output capture, result reporting), and a process-wide counter picked up
//! their bytes now and then. The store lives and dies on the test's own
//! thread; proptest runs its cases there too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

fn add_live(delta: i64) {
    // `try_with`: a thread being torn down may still free memory.
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + delta));
}

// SAFETY: every method forwards to `System` with the caller's arguments,
// so `System`'s guarantees hold; the counter is a side effect only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add_live(i64::try_from(layout.size()).expect("fits"));
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add_live(i64::try_from(layout.size()).expect("fits"));
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_live(-i64::try_from(layout.size()).expect("fits"));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let delta =
            i64::try_from(new_size).expect("fits") - i64::try_from(layout.size()).expect("fits");
        add_live(delta);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes this thread holds, net, since it started. Starts the
/// arenas' prefault thread first (once): a store that grows past a few
/// chunks would otherwise start it, and the spawn's allocations, made on
/// this thread and kept by the new one, would count against the store.
pub fn live() -> i64 {
    cardinal_chains::start_prefault_thread();
    LIVE_BYTES.with(Cell::get)
}
