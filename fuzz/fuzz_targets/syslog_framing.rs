#![no_main]
//! Any bytes into RFC 6587 framing: the checks are in
//! `crates/syslog/tests/fuzz/syslog_framing.rs` (shared with the crate's
//! proptests). The first byte picks a small message limit; the rest is
//! framed whole, a byte at a time and in uneven reads through a bounded
//! buffer, and the three must agree, each step making progress.
use libfuzzer_sys::fuzz_target;

include!("../../crates/syslog/tests/fuzz/syslog_framing.rs");

fuzz_target!(|data: &[u8]| check_syslog_framing(data));
