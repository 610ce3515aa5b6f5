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
        let e = hll.estimate();
        // UNDEFINED has no estimate (NaN); every other interval holds its.
        assert!(
            e.value.is_nan() || (e.lower <= e.value && e.value <= e.upper),
            "{e:?}"
        );
        let _ = hll.cardinality();
        if hll.settings().log2m > LOG2M_REENCODE_MAX {
            return;
        }
        let bytes = hll.encode();
        let again = Hll::decode(&bytes).expect("own encoding decodes");
        assert_eq!(again.encode(), bytes);
        // Inserts after decoding (through the sparse log when sparse): the
        // sketch still reads back from its lower-case hex as itself.
        let mut grown = again;
        for chunk in data.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            grown.insert(u64::from_le_bytes(word));
        }
        let hex = grown.to_hex();
        assert_eq!(hex, hex.to_ascii_lowercase());
        assert_eq!(Hll::from_hex(&hex).expect("own hex"), grown);
    }
});
