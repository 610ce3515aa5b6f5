//! Laws and accuracy of `Theta`, and robustness of its decoder.
//!
//! Theta has no randomness of its own (the hash decides everything), so
//! with fixed-seed data every result here is deterministic: merges are
//! compared byte for byte and set expressions against exact truth.

#[path = "support/mutate.rs"]
mod mutate;

use std::collections::BTreeSet;

use cardinal_sketch::{Sketch, hash, theta::Theta};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn sketch_of(lg_k: u8, ids: impl IntoIterator<Item = u64>) -> Theta {
    let mut t = Theta::new(lg_k).expect("valid lg_k");
    ids.into_iter().for_each(|id| t.insert(hash::user_id(id)));
    t
}

fn ids() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0u64..2000, 0..300)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn merge_is_commutative(a in ids(), b in ids()) {
        let (ta, tb) = (sketch_of(5, a), sketch_of(5, b));
        let mut ab = ta.clone();
        ab.merge(&tb).expect("same seed");
        let mut ba = tb.clone();
        ba.merge(&ta).expect("same seed");
        prop_assert_eq!(ab.encode(), ba.encode());
    }

    #[test]
    fn merge_is_associative(a in ids(), b in ids(), c in ids()) {
        let (ta, tb, tc) = (sketch_of(5, a), sketch_of(5, b), sketch_of(5, c));
        let mut left = ta.clone();
        left.merge(&tb).expect("same seed");
        left.merge(&tc).expect("same seed");
        let mut bc = tb.clone();
        bc.merge(&tc).expect("same seed");
        let mut right = ta.clone();
        right.merge(&bc).expect("same seed");
        prop_assert_eq!(left.encode(), right.encode());
        prop_assert_eq!(Theta::union(&[&ta, &tb, &tc]).expect("same seed").encode(), left.encode());
    }

    #[test]
    fn merging_empty_changes_nothing(a in ids()) {
        let ta = sketch_of(5, a);
        let empty = Theta::new(5).expect("valid lg_k");
        let mut with_empty = ta.clone();
        with_empty.merge(&empty).expect("same seed");
        prop_assert_eq!(with_empty.encode(), ta.encode());
        let mut into_empty = empty.clone();
        into_empty.merge(&ta).expect("same seed");
        prop_assert_eq!(into_empty.encode(), ta.encode());
    }

    #[test]
    fn encode_decode_encode_is_identity(a in ids(), lg_k in 5u8..9) {
        let bytes = sketch_of(lg_k, a).encode();
        let back = Theta::decode(&bytes).expect("own encoding");
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn small_expressions_are_exact(a in ids(), b in ids(), c in ids()) {
        // Below k = 4096 hashes theta stays 1 and every answer is exact.
        let (sa, sb, sc): (BTreeSet<u64>, BTreeSet<u64>, BTreeSet<u64>) =
            (a.iter().copied().collect(), b.iter().copied().collect(), c.iter().copied().collect());
        let (ta, tb, tc) = (sketch_of(12, a), sketch_of(12, b), sketch_of(12, c));
        let abc = Theta::intersection(&[&ta, &tb, &tc]).expect("same seed").estimate();
        let truth = sa.iter().filter(|id| sb.contains(id) && sc.contains(id)).count();
        prop_assert!(abc.is_exact());
        prop_assert_eq!(abc.value, truth as f64);
        let a_not_b = ta.a_not_b(&tb).expect("same seed").estimate();
        prop_assert_eq!(a_not_b.value, sa.difference(&sb).count() as f64);
    }
}

/// Three audiences over a universe of 10^6 ids, each id in A, B, C with
/// probability 0.5, 0.4, 0.3 from a fixed seed: |A| ~ 500k, |A ∩ B ∩ C|
/// ~ 60k. At lg_k 12 the intersection's relative standard error is about
/// sqrt(500k / (4096 * 60k)) = 4.5% (module docs); the ~95.4% bounds must
/// hold the truth, and the value must be within 3 RSE (13.5%) of it.
#[test]
fn three_way_intersection_and_difference_within_bounds() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0101);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for id in 0..1_000_000u64 {
        if rng.random_bool(0.5) {
            a.push(id);
        }
        if rng.random_bool(0.4) {
            b.push(id);
        }
        if rng.random_bool(0.3) {
            c.push(id);
        }
    }
    let (sb, sc): (BTreeSet<u64>, BTreeSet<u64>) =
        (b.iter().copied().collect(), c.iter().copied().collect());
    let truth_abc = a
        .iter()
        .filter(|id| sb.contains(id) && sc.contains(id))
        .count() as f64;
    let truth_a_not_b = a.iter().filter(|id| !sb.contains(id)).count() as f64;
    let truth_union = {
        let mut all: BTreeSet<u64> = a.iter().copied().collect();
        all.extend(&sb);
        all.extend(&sc);
        all.len() as f64
    };
    let (ta, tb, tc) = (sketch_of(12, a), sketch_of(12, b), sketch_of(12, c));

    let checks = [
        (
            "A ∩ B ∩ C",
            Theta::intersection(&[&ta, &tb, &tc]).expect("same seed"),
            truth_abc,
            0.135,
        ),
        (
            "A \\ B",
            ta.a_not_b(&tb).expect("same seed"),
            truth_a_not_b,
            0.1,
        ),
        (
            "A ∪ B ∪ C",
            Theta::union(&[&ta, &tb, &tc]).expect("same seed"),
            truth_union,
            0.05,
        ),
    ];
    for (name, sketch, truth, tolerance) in checks {
        let e = sketch.estimate();
        let half_width = (e.upper - e.lower) / 2.0;
        let error = (e.value - truth).abs();
        assert!(
            error <= 1.5 * half_width,
            "{name}: {truth} too far from {e:?}"
        );
        let relative = (e.value - truth).abs() / truth;
        assert!(relative <= tolerance, "{name}: off by {relative}");
    }
    // (A ∩ B) \ C composes.
    let ab = Theta::intersection(&[&ta, &tb]).expect("same seed");
    let e = ab.a_not_b(&tc).expect("same seed").estimate();
    assert!(e.value > 0.0 && e.lower <= e.upper);
}

#[test]
fn jaccard_within_bounds() {
    let ta = sketch_of(10, 0..20_000);
    let tb = sketch_of(10, 10_000..30_000);
    let j = ta.jaccard(&tb).expect("same seed");
    let truth = 10_000.0 / 30_000.0;
    assert!(j.lower <= truth && truth <= j.upper, "{j:?}");
}

#[test]
fn flipped_bytes_never_panic() {
    let valid: Vec<Vec<u8>> = [0u64, 1, 2, 20, 100, 1000]
        .iter()
        .map(|&n| sketch_of(5, 0..n).encode())
        .collect();
    let small = sketch_of(5, 0..50);
    let mut accepted = 0;
    for bytes in mutate::mutants(&valid, 0x5eed_0102, 5000) {
        if let Ok(mut t) = Theta::decode(&bytes) {
            accepted += 1;
            let again = t.encode();
            assert_eq!(Theta::decode(&again).expect("own encoding").encode(), again);
            let e = t.estimate();
            assert!(e.lower <= e.value && e.value <= e.upper);
            let _ = Theta::intersection(&[&t, &small])
                .expect("same seed")
                .estimate();
            let _ = t.a_not_b(&small).expect("same seed").estimate();
            t.merge(&small).expect("same seed");
        }
    }
    assert!(accepted > 50, "only {accepted} mutants decoded");
}

#[test]
fn fuzz_inputs_replay() {
    for (name, bytes) in mutate::fuzz_inputs("theta_decode") {
        // libFuzzer names crashes `crash-*`; the other files are inputs the
        // pre-checks exist to reject (see tests/fuzz/README.md).
        if let Ok(t) = Theta::decode(&bytes) {
            assert!(name.contains("crash-"), "{name} should be rejected");
            let again = t.encode();
            assert_eq!(
                Theta::decode(&again).expect(&name).encode(),
                again,
                "{name}"
            );
        }
    }
}
