#![no_main]
//! Any bytes into the HyperLogLog decoder: it must return an error or a
//! sketch whose encoding decodes again to the same bytes, never panic, and
//! never allocate more than the input backs (libFuzzer's -rss_limit_mb
//! catches that).
use cardinal_sketch::Sketch;
use cardinal_sketch::hll::Hll;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(hll) = Hll::decode(data) {
        let bytes = hll.encode();
        let again = Hll::decode(&bytes).expect("own encoding decodes");
        assert_eq!(again.encode(), bytes);
        let _ = hll.estimate();
        let _ = hll.cardinality();
    }
});
