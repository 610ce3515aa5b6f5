//! Steady state allocates nothing: once a record's group exists, folding it
//! (interning its dimensions, finding the group, updating count, sum, min,
//! max and a dense HyperLogLog) makes no heap allocation.

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
use cardinal_sketch::hash;

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;

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
    let before = counting_alloc::allocations();
    for i in 200_000..300_000 {
        fold(&mut rollup, i);
    }
    let after = counting_alloc::allocations();
    assert_eq!(
        after - before,
        0,
        "allocations while folding 100,000 records"
    );
    assert_eq!(rollup.group_count(), 150);
}
