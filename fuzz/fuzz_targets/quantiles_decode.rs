#![no_main]
//! `Quantiles::decode` (and `decode_state`) on arbitrary bytes: never
//! panics, and whatever it accepts re-encodes to bytes that decode to the
//! same encoding, and stays
//! usable (queries, inserts and merges do not panic, and a merge's image
//! decodes again).
use cardinal_sketch::{Sketch, quantiles::Quantiles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The same bytes as a state image (coins, waiting values, compactions,
    // KLL image): whatever decodes re-encodes to itself and answers.
    if let Ok(state) = Quantiles::decode_state(data) {
        let mut bytes = Vec::new();
        state.encode_state(&mut bytes);
        let again = Quantiles::decode_state(&bytes).expect("a state we wrote decodes");
        let mut twice = Vec::new();
        again.encode_state(&mut twice);
        assert_eq!(twice, bytes);
        let _ = state.quantile_interval(0.01);
        let _ = state.quantile_interval(0.5);
    }
    let Ok(mut sketch) = Quantiles::decode(data) else {
        return;
    };
    let bytes = sketch.encode();
    let again = Quantiles::decode(&bytes).expect("an encoding we wrote decodes");
    assert_eq!(again.encode(), bytes);
    assert_eq!(again.count(), sketch.count());

    let summary = sketch.estimate();
    assert_eq!(summary.count, sketch.count());
    let _ = sketch.rank(0.0);
    // Inserts and merges compact, which is where a forged level layout would bite.
    for i in 0..64 {
        sketch.insert(i as f64);
    }
    let before = sketch.count();
    if sketch.merge(&again).is_ok() {
        // The merge runs on our buffer: its image must be one DataSketches
        // reads back, holding both sketches' counts.
        assert_eq!(sketch.count(), before + again.count());
        let merged = sketch.encode();
        let back = Quantiles::decode(&merged).expect("a merged sketch's image decodes");
        assert_eq!(back.encode(), merged);
    }
    let _ = sketch.quantile(0.5);
});
