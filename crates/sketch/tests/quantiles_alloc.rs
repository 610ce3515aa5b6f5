//! A KLL sketch allocates only when its buffer grows: doubling up to the
//! first level's capacity, then once per new level (a level is added each
//! time `n` roughly doubles). Compactions work in place.

use cardinal_sketch::Sketch;
use cardinal_sketch::quantiles::Quantiles;

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;

#[test]
fn inserting_allocates_once_per_level_not_per_compaction() {
    let mut q = Quantiles::new(200).expect("valid k");
    let before = counting_alloc::allocations();
    let mut x: u64 = 1;
    for _ in 0..1_000_000 {
        // A 64-bit LCG: spread values, no allocation.
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        q.insert((x >> 11) as f64);
    }
    let allocations = counting_alloc::allocations() - before;
    assert_eq!(q.count(), 1_000_000);
    // Growth 8, 16, ..., 200 is 6 allocations; 1e6 values at k = 200 end
    // with about 16 levels (15 added, measured 21 in all). Tens of thousands
    // of compactions ran, so one allocation per compaction would fail this.
    assert!(allocations <= 6 + 20, "{allocations} allocations");
    assert!(q.encode().len() < 8 * 1000, "about 3k items retained");
}
