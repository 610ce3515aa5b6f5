//! A global allocator that counts the allocations of the calling thread,
//! for the tests that prove a hot path allocates nothing in steady state.
//!
//! Included by those test targets with
//! `#[path = "../../../tests/support/counting_alloc.rs"] mod counting_alloc;`
//! (a test target has one global allocator, so each includes its own copy of
//! this module rather than linking a shared crate).
//!
//! Counted per thread: the test harness's own threads allocate too, and must
//! not be blamed on the code under test. A const-initialised `Cell` needs no
//! allocation and no destructor, so the allocator may touch it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// per-thread counter is the only addition, and touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations (and reallocations) made by this thread so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}
