#![no_main]
//! Decodes arbitrary bytes as each Count-Min sketch kind. Decoding must
//! return `Err` or a sketch whose encoding decodes to the same bytes again;
//! it must never panic. Findings go to `crates/sketch/tests/fuzz/countmin/`,
//! where `tests/countmin.rs` replays them.
use cardinal_sketch::Sketch;
use cardinal_sketch::countmin::{CountMin, DyadicCountMin, HeavyHitters};
use libfuzzer_sys::fuzz_target;

fn check<S: Sketch>(data: &[u8]) {
    if let Ok(sketch) = S::decode(data) {
        let bytes = sketch.encode();
        let again = S::decode(&bytes).expect("a decoded sketch re-encodes validly");
        assert_eq!(again.encode(), bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    check::<CountMin>(data);
    check::<DyadicCountMin>(data);
    check::<HeavyHitters>(data);
});
