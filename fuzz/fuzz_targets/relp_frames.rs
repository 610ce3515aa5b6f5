#![no_main]
//! Any bytes into the RELP frame decoder and the `open` offer check: the
//! checks are in `crates/syslog/tests/fuzz/relp_frames.rs` (shared with
//! the crate's proptests): every step makes progress within the input,
//! a buffer of `FRAME_BYTES_MAX` bytes always decodes or fails, and every
//! decoded frame re-encodes to one that decodes the same.
use libfuzzer_sys::fuzz_target;

include!("../../crates/syslog/tests/fuzz/relp_frames.rs");

fuzz_target!(|data: &[u8]| check_relp_frames(data));
