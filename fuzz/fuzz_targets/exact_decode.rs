#![no_main]
//! `ExactSet::decode` on arbitrary bytes: never panics, and whatever it
//! accepts re-encodes to bytes that decode to an equal set.
use cardinal_sketch::{Sketch, exact::ExactSet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(set) = ExactSet::decode(data) else {
        return;
    };
    let bytes = set.encode();
    let again = ExactSet::decode(&bytes).expect("an encoding we wrote decodes");
    assert_eq!(again, set);
    assert_eq!(again.encode(), bytes);

    let small: ExactSet = [0, 1, 1 << 32, u64::MAX].into_iter().collect();
    let union = set.union(&small);
    let intersection = set.intersection(&small);
    let difference = set.difference(&small);
    assert_eq!(union.len() + intersection.len(), set.len() + small.len());
    assert_eq!(difference.len() + intersection.len(), set.len());
});
