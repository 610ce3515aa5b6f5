#![no_main]
//! Any bytes into the protocol's decoders and state machines: the checks
//! are in `crates/server/tests/fuzz/protocol_frames.rs` (shared with the
//! crate's replay test). The checksums are not enforced under `--cfg
//! fuzzing`, so mutations reach the bodies' rules; libFuzzer's
//! -rss_limit_mb and -malloc_limit_mb catch a decoder allocating more
//! than the input backs. Inputs worth keeping, crashes included, go to
//! `crates/server/tests/fuzz/protocol_frames/`.
use libfuzzer_sys::fuzz_target;

include!("../../crates/server/tests/fuzz/protocol_frames.rs");

fuzz_target!(|data: &[u8]| check_protocol_frames(data));
