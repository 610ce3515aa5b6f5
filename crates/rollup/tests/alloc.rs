//! Steady state allocates nothing: once a record's group exists, folding it
//! (interning its dimensions, finding the group, updating count, sum, min,
//! max and a dense HyperLogLog) makes no heap allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
use cardinal_sketch::hash;

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
fn folding_into_existing_groups_allocates_nothing() {
    let shape = Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Sum,
            AggKind::Min,
            AggKind::Max,
            AggKind::Hll {
                log2m: 11,
                regwidth: 5,
            },
        ],
    };
    let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
    let keys: Vec<String> = (0..50).map(|i| format!("state{i}|site")).collect();
    let fold = |rollup: &mut Rollup, i: u64| {
        let key = keys[usize::try_from(i % 50).expect("< 50")].as_bytes();
        let user = Input::Key {
            hash: hash::user_id(i),
            id: Some(i),
            text: &[],
        };
        let revenue = Input::Number(i as f64 * 0.01);
        rollup.fold(
            Timestamp(i64::try_from(i % 3).expect("< 3") * 86_400_000),
            key,
            &[Input::Null, revenue, revenue, revenue, user],
        );
    };
    // Warm up: every group exists and every HyperLogLog is dense.
    for i in 0..200_000 {
        fold(&mut rollup, i);
    }
    let before = ALLOCATIONS.with(Cell::get);
    for i in 200_000..300_000 {
        fold(&mut rollup, i);
    }
    let after = ALLOCATIONS.with(Cell::get);
    assert_eq!(
        after - before,
        0,
        "allocations while folding 100,000 records"
    );
    assert_eq!(rollup.group_count(), 150);
}
