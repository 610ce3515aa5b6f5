#![no_main]
//! `Theta::decode` on arbitrary bytes: never panics, and whatever it accepts
//! re-encodes to bytes that decode to the same encoding, and set operations
//! on it do not panic.
use cardinal_sketch::{Sketch, theta::Theta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut sketch) = Theta::decode(data) else {
        return;
    };
    let bytes = sketch.encode();
    let again = Theta::decode(&bytes).expect("an encoding we wrote decodes");
    assert_eq!(again.encode(), bytes);

    let estimate = sketch.estimate();
    assert!(estimate.lower <= estimate.value && estimate.value <= estimate.upper);
    let mut small = Theta::new(5).expect("valid lg_k");
    for i in 0..100u64 {
        small.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    let _ = Theta::union(&[&sketch, &small, &again]).expect("same seed").estimate();
    let _ = Theta::intersection(&[&sketch, &small, &again]).expect("same seed").estimate();
    let _ = sketch.a_not_b(&small).expect("same seed").estimate();
    let _ = small.a_not_b(&sketch).expect("same seed").estimate();
    let _ = sketch.jaccard(&small).expect("same seed");
    sketch.insert(42);
    sketch.merge(&small).expect("same seed");
    let _ = sketch.estimate();
});
