#![no_main]
//! Any bytes into the HyperLogLog decoder: it must return an error or a
//! sketch whose encoding decodes again to the same bytes, never panic, and
//! never allocate more than the input backs (libFuzzer's -rss_limit_mb
//! catches that).
use cardinal_sketch::Sketch;
use cardinal_sketch::hll::Hll;
use libfuzzer_sys::fuzz_target;

/// Re-encoding is checked up to 2^20 registers. Above that a legitimate
/// 3-byte header can describe a FULL encoding of up to 2 GiB (log2m 31 with
/// sparse off), which is the format's size, not a decoder bug.
const LOG2M_REENCODE_MAX: u8 = 20;

fuzz_target!(|data: &[u8]| {
    if let Ok(hll) = Hll::decode(data) {
        let _ = hll.estimate();
        let _ = hll.cardinality();
        if hll.settings().log2m > LOG2M_REENCODE_MAX {
            return;
        }
        let bytes = hll.encode();
        let again = Hll::decode(&bytes).expect("own encoding decodes");
        assert_eq!(again.encode(), bytes);
    }
});
