#![no_main]
//! Placeholder: the countmin decoder target is being written.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = data;
});
