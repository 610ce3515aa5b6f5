//! Partial rollups merged in any split equal one rollup over everything:
//! counts, sums, min, max, avg and exact sets exactly, HyperLogLog and Theta
//! byte for byte. (KLL is randomised and heavy hitters keep a bounded
//! candidate list; their laws are tested in cardinal-sketch.)

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, AggState, Folded, Input, Limits, Output, Rollup, Shape};
use cardinal_sketch::{Sketch, hash};
use proptest::prelude::*;

fn shape() -> Shape {
    Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Count,
            AggKind::Sum,
            AggKind::Avg,
            AggKind::Min,
            AggKind::Max,
            AggKind::Hll {
                log2m: 11,
                regwidth: 5,
            },
            AggKind::ExactDistinct,
            AggKind::Theta { lg_k: 5 },
        ],
    }
}

/// (day, state, site, user, revenue) records.
type Event = (i64, u8, Option<u8>, u64, Option<f64>);

fn fold(rollup: &mut Rollup, event: &Event) -> Folded {
    let (day, state, site, user, revenue) = *event;
    // Two dimensions encoded back to back; 0xFF stands for a NULL site.
    // Sites 0 and 1 are padded past the 20 bytes a group keeps inline, so
    // that keys both in the group record and in the arena merge.
    let site = site.map_or(0xFF, |s| b'a' + s % 3);
    let pad = if site == b'c' || site == 0xFF {
        0
    } else {
        20 + usize::from(state % 4)
    };
    let mut dims = vec![b'A' + state % 4, site];
    dims.resize(2 + pad, b'.');
    let key = Input::Key {
        hash: hash::user_id(user),
        id: Some(user),
        text: &[],
    };
    let number = revenue.map_or(Input::Null, Input::Number);
    rollup.fold(
        Timestamp(day * 86_400_000),
        &dims,
        &[
            Input::Null,
            number,
            number,
            number,
            number,
            number,
            key,
            key,
            key,
        ],
    )
}

/// Everything comparable about a rollup: outputs, and sketch bytes.
fn fingerprint(rollup: &Rollup) -> Vec<String> {
    let mut rows: Vec<String> = rollup
        .groups()
        .map(|(bucket, key, states)| {
            let bytes: Vec<Vec<u8>> = states
                .iter()
                .map(|s| match s {
                    AggState::Hll(h) => h.encode(),
                    AggState::Theta(t) => t.encode(),
                    AggState::Exact(e) => e.encode(),
                    _ => Vec::new(),
                })
                .collect();
            format!("{bucket:?} {key:?} {bytes:?}")
        })
        .collect();
    rows.sort();
    rows.extend(rollup.rows().iter().map(|r| format!("{r:?}")));
    rows
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (
            0i64..3,
            any::<u8>(),
            prop::option::of(any::<u8>()),
            0u64..500,
            prop::option::of(-1e6f64..1e6),
        ),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_split_merges_to_the_single_rollup(
        events in events(),
        workers in 1usize..5,
        seed in any::<u64>(),
        parts_after in proptest::collection::vec(prop_oneof![0usize..40, Just(usize::MAX)], 5),
    ) {
        // The single rollup keeps one part; each partial splits into parts
        // after its own number of groups (or never), so merges go between
        // one part and many in every combination.
        let mut single = Rollup::new(shape(), Limits::default())
            .expect("valid")
            .with_parts_after(usize::MAX);
        for e in &events {
            fold(&mut single, e);
        }
        let mut partials: Vec<Rollup> = (0..workers)
            .map(|w| Rollup::new(shape(), Limits::default()).expect("valid").with_parts_after(parts_after[w]))
            .collect();
        let mut x = seed | 1;
        for e in &events {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            fold(&mut partials[usize::try_from(x % workers as u64).expect("< workers")], e);
        }
        // Merge in a rotated order, so that the merge order differs too.
        let first = usize::try_from(seed % workers as u64).expect("< workers");
        let mut merged = partials[first].clone();
        for (i, p) in partials.iter().enumerate() {
            if i != first {
                merged.merge(p).expect("same shape");
            }
        }
        prop_assert_eq!(fingerprint(&merged), fingerprint(&single));
    }
}

/// A rollup of one `count(*)` under `limits`.
fn counting(limits: Limits) -> Rollup {
    Rollup::new(
        Shape {
            aggs: vec![AggKind::CountAll],
        },
        limits,
    )
    .expect("valid")
}

#[test]
fn group_limit_drops_and_counts() {
    let limits = Limits {
        groups_max: 2,
        retention_ms: None,
        future_ms: None,
    };
    let mut rollup = counting(limits);
    let day = Timestamp(0);
    assert_eq!(rollup.fold(day, b"a", &[Input::Null]), Folded::Ok);
    assert_eq!(rollup.fold(day, b"b", &[Input::Null]), Folded::Ok);
    assert_eq!(
        rollup.fold(day, b"c", &[Input::Null]),
        Folded::DroppedGroupLimit
    );
    assert_eq!(rollup.fold(day, b"a", &[Input::Null]), Folded::Ok);
    assert_eq!(rollup.dropped_group_limit(), 1);
    assert_eq!(rollup.rows()[0].outputs, vec![Output::Count(2)]);
}

#[test]
fn retention_drops_old_buckets_and_evicts_their_groups() {
    const DAY: i64 = 86_400_000;
    let limits = Limits {
        groups_max: 100,
        retention_ms: Some(2 * DAY),
        future_ms: None,
    };
    let mut rollup = counting(limits);
    for day in [0, 1, 2, 3, 4] {
        assert_eq!(
            rollup.fold(Timestamp(day * DAY), b"", &[Input::Null]),
            Folded::Ok
        );
    }
    // Day 1 is older than 4 - 2: dropped. Day 2 is still in the window.
    assert_eq!(
        rollup.fold(Timestamp(DAY), b"", &[Input::Null]),
        Folded::DroppedExpired
    );
    assert_eq!(
        rollup.fold(Timestamp(2 * DAY), b"", &[Input::Null]),
        Folded::Ok
    );
    assert_eq!(rollup.evict_expired(), 2);
    let buckets: Vec<i64> = rollup.rows().iter().map(|r| r.bucket.0 / DAY).collect();
    assert_eq!(buckets, vec![2, 3, 4]);
    assert_eq!(rollup.rows()[0].outputs, vec![Output::Count(2)]);
}

/// Evicting when due bounds a stream in time order to about 1.25 windows
/// of buckets, hour buckets by a two-day window here, and moves each group
/// only a few times.
#[test]
fn evictions_when_due_keep_about_a_window_of_groups() {
    const HOUR: i64 = 3_600_000;
    let limits = Limits {
        groups_max: 100_000,
        retention_ms: Some(48 * HOUR),
        future_ms: None,
    };
    let mut rollup = counting(limits);
    let (mut most, mut evictions) = (0, 0);
    for hour in 0..30 * 24 {
        for key in [&b"a"[..], b"b", b"c"] {
            assert_eq!(
                rollup.fold(Timestamp(hour * HOUR), key, &[Input::Null]),
                Folded::Ok
            );
        }
        evictions += usize::from(rollup.evict_expired_due() > 0);
        most = most.max(rollup.group_count());
    }
    // The window holds 49 hours; a quarter of it more before eviction.
    assert!(most <= 3 * (49 + 12), "{most} groups");
    assert!(most >= 3 * 49, "{most} groups");
    // An eviction each 12 hours, not each hour.
    assert!((55..=62).contains(&evictions), "{evictions} evictions");
    assert_eq!(rollup.evict_expired_due(), 0, "not due again");
    let buckets: Vec<i64> = rollup.rows().iter().map(|r| r.bucket.0 / HOUR).collect();
    assert_eq!(
        buckets.first(),
        Some(&(30 * 24 - 1 - 48 - 11)),
        "{buckets:?}"
    );
}

#[test]
fn merge_refuses_another_shape() {
    let mut a = Rollup::new(
        Shape {
            aggs: vec![AggKind::CountAll],
        },
        Limits::default(),
    )
    .expect("valid");
    let b = Rollup::new(
        Shape {
            aggs: vec![AggKind::Sum],
        },
        Limits::default(),
    )
    .expect("valid");
    assert!(a.merge(&b).is_err());
}

#[test]
fn folds_at_a_known_group_equal_folds_by_key() {
    const DAY: i64 = 86_400_000;
    let shape = Shape {
        aggs: vec![AggKind::CountAll, AggKind::Sum],
    };
    let limits = Limits {
        retention_ms: Some(2 * DAY),
        ..Limits::default()
    };
    let mut by_key = Rollup::new(shape.clone(), limits).expect("valid");
    let mut at = Rollup::new(shape, limits).expect("valid");
    assert_eq!(at.last_folded(), None);
    let update = |v: f64| {
        move |states: &mut [AggState]| {
            states[0].fold_count();
            states[1].fold_number(v);
        }
    };
    // Each key's first record goes by key, the rest to where it went.
    let mut known: Vec<(i64, u8, cardinal_rollup::GroupAt)> = Vec::new();
    let records: Vec<(i64, u8)> = (0..300).map(|i| (i % 4, (i % 7) as u8)).collect();
    for (n, &(day, key)) in records.iter().enumerate() {
        let (bucket, v) = (Timestamp(day * DAY), n as f64);
        let expected = by_key.fold_with(bucket, &[key], update(v));
        let found = known
            .iter()
            .find(|&&(d, k, group)| d == day && k == key && at.holds(group));
        let folded = match found {
            Some(&(_, _, group)) => at.fold_at(group, bucket, update(v)),
            None => {
                let folded = at.fold_with(bucket, &[key], update(v));
                if folded == Folded::Ok {
                    known.push((day, key, at.last_folded().expect("folded")));
                }
                folded
            }
        };
        assert_eq!(folded, expected, "record {n}");
    }
    assert_eq!(at.rows(), by_key.rows());
    assert!(known.len() < 40, "most records folded at a known group");
    // Day 0 after day 3 (and day 1 after day 4) is older than the window.
    assert_eq!(at.dropped_expired(), by_key.dropped_expired());
    assert!(at.dropped_expired() > 0);
    // Evicting moves groups: what was known is stale.
    let group = at.last_folded().expect("folded");
    assert!(at.holds(group));
    at.evict_expired();
    assert!(!at.holds(group));
    assert_eq!(at.last_folded(), None);
}

#[test]
fn a_split_makes_known_groups_stale() {
    let shape = Shape {
        aggs: vec![AggKind::CountAll],
    };
    let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
    rollup.fold_with(Timestamp(0), b"a", |_| {});
    let group = rollup.last_folded().expect("folded");
    let rollup = rollup.with_parts_after(1);
    assert!(rollup.parts() > 1);
    assert!(!rollup.holds(group));
}

/// A part is loaded whole only for about as many records as it has
/// groups, and only while it fits the cache budget.
#[test]
fn a_part_is_loaded_whole_only_when_it_pays() {
    use cardinal_rollup::{KeyHash, PART_PREFETCH_BYTES_MAX};
    let shape = Shape {
        aggs: vec![AggKind::CountAll],
    };
    let mut rollup = Rollup::new(shape, Limits::default())
        .expect("valid")
        .with_parts_after(0);
    for i in 0u32..20_000 {
        rollup.fold_with(Timestamp(0), &i.to_le_bytes(), |_| {});
    }
    let part = rollup.part_of(KeyHash::of(Timestamp(0), &0u32.to_le_bytes()));
    let groups = rollup
        .groups()
        .filter(|(bucket, key, _)| rollup.part_of(KeyHash::of(*bucket, key)) == part)
        .count();
    assert!(groups > 10, "{groups} groups in part {part}");
    assert!(!rollup.prefetch_part(part, 0), "no records");
    assert!(!rollup.prefetch_part(part, groups / 4), "too few records");
    assert!(
        rollup.prefetch_part(part, groups),
        "as many records as groups"
    );
    assert!(
        !rollup.prefetch_part(rollup.parts(), groups),
        "no such part"
    );

    // One part past the budget: 64 states a group, and only keys of
    // that part.
    let mut wide = Rollup::new(
        Shape {
            aggs: vec![AggKind::CountAll; 64],
        },
        Limits::default(),
    )
    .expect("valid")
    .with_parts_after(0);
    let part = 7;
    let keys = (0u64..)
        .map(u64::to_le_bytes)
        .filter(|key| wide.part_of(KeyHash::of(Timestamp(0), key)) == part);
    let groups = PART_PREFETCH_BYTES_MAX / (64 * 48) + 1;
    for key in keys.take(groups).collect::<Vec<_>>() {
        wide.fold_with(Timestamp(0), &key, |_| {});
    }
    assert_eq!(wide.group_count(), groups);
    assert!(!wide.prefetch_part(part, usize::MAX), "past the budget");
}

/// With a future tolerance one record in year 9999 neither moves the
/// retention window (which is measured from the stream's watermark) nor
/// stays in the answer: the merged rollup drops its group and counts its
/// record, whichever partial read it first.
#[test]
fn a_future_bucket_neither_evicts_the_stream_nor_stays() {
    const DAY: i64 = 86_400_000;
    const YEAR_9999: i64 = 253_402_214_400_000;
    let limits = Limits {
        groups_max: 1_000,
        retention_ms: Some(7 * DAY),
        future_ms: Some(7 * DAY),
    };
    let mut partials = [counting(limits), counting(limits)];
    for (index, rollup) in partials.iter_mut().enumerate() {
        // The first partial reads the outlier first, the second in the
        // middle of its days.
        let days: Vec<i64> = if index == 0 { 0..10 } else { 10..20 }.collect();
        if index == 0 {
            assert_eq!(
                rollup.fold(Timestamp(YEAR_9999), b"", &[Input::Null]),
                Folded::Ok
            );
        }
        for day in days {
            for i in 0..300 {
                let folded = rollup.fold(Timestamp(day * DAY), b"", &[Input::Null]);
                assert_eq!(folded, Folded::Ok, "day {day}");
                if index == 1 && day == 15 && i == 7 {
                    rollup.fold(Timestamp(YEAR_9999), b"", &[Input::Null]);
                }
            }
            rollup.evict_expired_due();
        }
        assert_eq!(rollup.dropped_expired(), 0);
    }
    let [mut merged, second] = partials;
    merged.merge(&second).expect("same shape");
    merged.evict_expired();
    assert_eq!(merged.evict_future(), 1);
    assert_eq!(merged.dropped_future(), 2);
    assert_eq!(merged.evicted_after(), Some(Timestamp(26 * DAY)));
    let buckets: Vec<i64> = merged.rows().iter().map(|r| r.bucket.0 / DAY).collect();
    assert_eq!(buckets, (12..20).collect::<Vec<_>>());
    assert!(
        merged
            .rows()
            .iter()
            .all(|r| r.outputs == vec![Output::Count(300)])
    );
}
