//! Laws of `ExactSet` against a `BTreeSet` oracle, and robustness of its
//! decoder.

#[path = "support/mutate.rs"]
mod mutate;

use std::collections::BTreeSet;

use cardinal_sketch::{Sketch, exact::ExactSet};
use proptest::prelude::*;

/// Ids clustered in a few 2^32 buckets and 2^16 containers, so arrays,
/// bitmaps and several buckets all occur (sets that move to Roaring),
/// ids spread over all of `u64` (sets that stay hash sets), or a mix of
/// both (either, by their share), so that every operation meets both
/// kinds on either side.
fn ids() -> impl Strategy<Value = Vec<u64>> {
    let clustered =
        || (0u64..3, 0u64..3, 0u64..6000).prop_map(|(hi, mid, lo)| (hi << 32) | (mid << 16) | lo);
    prop_oneof![
        prop::collection::vec(clustered(), 0..6000),
        prop::collection::vec(any::<u64>(), 0..3000),
        prop::collection::vec(prop_oneof![3 => clustered(), 1 => any::<u64>()], 0..6000),
    ]
}

fn pair(a: &[u64]) -> (ExactSet, BTreeSet<u64>) {
    (a.iter().copied().collect(), a.iter().copied().collect())
}

fn same(set: &ExactSet, oracle: &BTreeSet<u64>) -> bool {
    set.len() == oracle.len() as u64 && set.iter().eq(oracle.iter().copied())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn algebra_matches_btreeset(a in ids(), b in ids()) {
        let ((ea, oa), (eb, ob)) = (pair(&a), pair(&b));
        prop_assert!(same(&ea.union(&eb), &oa.union(&ob).copied().collect()));
        prop_assert!(same(&ea.intersection(&eb), &oa.intersection(&ob).copied().collect()));
        prop_assert!(same(&ea.difference(&eb), &oa.difference(&ob).copied().collect()));
        let mut in_place = ea.clone();
        in_place.union_with(&eb);
        prop_assert_eq!(&in_place, &ea.union(&eb));
        let mut in_place = ea.clone();
        in_place.intersect_with(&eb);
        prop_assert_eq!(&in_place, &ea.intersection(&eb));
        let mut in_place = ea.clone();
        in_place.difference_with(&eb);
        prop_assert_eq!(&in_place, &ea.difference(&eb));
        for id in b.iter().take(50) {
            prop_assert_eq!(ea.contains(*id), oa.contains(id));
        }
        prop_assert_eq!(ea.estimate().value, oa.len() as f64);
    }

    #[test]
    fn merge_is_commutative_and_associative(a in ids(), b in ids(), c in ids()) {
        let (ea, eb, ec) = (pair(&a).0, pair(&b).0, pair(&c).0);
        let mut ab = ea.clone();
        ab.merge(&eb).expect("never fails");
        let mut ba = eb.clone();
        ba.merge(&ea).expect("never fails");
        prop_assert_eq!(ab.encode(), ba.encode());
        let mut left = ab;
        left.merge(&ec).expect("never fails");
        let mut right = ea.clone();
        right.merge(&eb.union(&ec)).expect("never fails");
        prop_assert_eq!(left.encode(), right.encode());
    }

    #[test]
    fn merging_empty_changes_nothing(a in ids()) {
        let ea = pair(&a).0;
        let mut with_empty = ea.clone();
        with_empty.merge(&ExactSet::new()).expect("never fails");
        prop_assert_eq!(with_empty.encode(), ea.encode());
        let mut into_empty = ExactSet::new();
        into_empty.merge(&ea).expect("never fails");
        prop_assert_eq!(into_empty.encode(), ea.encode());
    }

    #[test]
    fn encode_decode_encode_is_identity(a in ids()) {
        let set = pair(&a).0;
        let bytes = set.encode();
        let back = ExactSet::decode(&bytes).expect("own encoding");
        prop_assert_eq!(&back, &set);
        prop_assert_eq!(back.encode(), bytes);
    }
}

/// Dense ids move to Roaring, spread ones stay in a hash set, both write
/// the same bytes as a Roaring bitmap of the same ids, and a decoded set
/// takes the form its ids call for (a small one a hash set).
#[test]
fn density_picks_the_representation() {
    let dense: ExactSet = (0..1000u64).map(|i| i * 3).collect();
    assert!(dense.is_roaring());
    let mut state = 0x5eed_u64;
    let spread: ExactSet = (0..5000)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            state
        })
        .collect();
    assert!(!spread.is_roaring());
    assert_eq!(spread.len(), 5000);
    for set in [&dense, &spread] {
        let back = ExactSet::decode(&set.encode()).expect("own encoding");
        assert_eq!(back.is_roaring(), set.is_roaring());
        assert_eq!(&back, set);
        assert_eq!(back.encode(), set.encode());
        assert!(back.iter().eq(set.iter()));
    }
    // Sixty-three ids in one container are not looked at yet; the
    // sixty-fourth moves them.
    let mut growing: ExactSet = (0..63u64).collect();
    assert!(!growing.is_roaring());
    let small = ExactSet::decode(&growing.encode()).expect("own encoding");
    assert!(!small.is_roaring());
    growing.insert(63);
    assert!(growing.is_roaring());
    assert!(
        ExactSet::decode(&growing.encode())
            .expect("own encoding")
            .is_roaring()
    );
}

#[test]
fn flipped_bytes_never_panic() {
    let valid: Vec<Vec<u8>> = vec![
        ExactSet::new().encode(),
        [1u64, 2, 3].into_iter().collect::<ExactSet>().encode(),
        (0..5000u64).collect::<ExactSet>().encode(),
        (0..70_000u64).step_by(7).collect::<ExactSet>().encode(),
        [0, 1 << 32, 5 << 40, u64::MAX]
            .into_iter()
            .collect::<ExactSet>()
            .encode(),
    ];
    let mut accepted = 0;
    for bytes in mutate::mutants(&valid, 0x5eed_0201, 5000) {
        if let Ok(set) = ExactSet::decode(&bytes) {
            accepted += 1;
            let again = set.encode();
            assert_eq!(ExactSet::decode(&again).expect("own encoding"), set);
        }
    }
    assert!(accepted > 50, "only {accepted} mutants decoded");
}

#[test]
fn fuzz_inputs_replay() {
    for (name, bytes) in mutate::fuzz_inputs("exact_decode") {
        // libFuzzer names crashes `crash-*`; the other files are inputs the
        // pre-checks exist to reject (see tests/fuzz/README.md).
        if let Ok(set) = ExactSet::decode(&bytes) {
            assert!(name.contains("crash-"), "{name} should be rejected");
            let again = set.encode();
            assert_eq!(ExactSet::decode(&again).expect(&name), set, "{name}");
        }
    }
}
