#![no_main]
//! Any bytes into the chain-store snapshot decoder: it must return an error
//! or a store whose own snapshot restores to the same content, never panic,
//! and never allocate more than the input backs (libFuzzer's -rss_limit_mb
//! catches that; a valid header alone makes up to 2^20 empty shards, which
//! is the format's layout, so headers asking for more than 2^12 shards are
//! skipped).
use cardinal_chains::Store;
use libfuzzer_sys::fuzz_target;

/// Byte 12 of the header is `shard_bits`.
const SHARD_BITS_FUZZ_MAX: u8 = 12;

fuzz_target!(|data: &[u8]| {
    if data.get(12).is_some_and(|&bits| bits > SHARD_BITS_FUZZ_MAX) {
        return;
    }
    if let Ok(store) = Store::restore(data) {
        let memory = store.memory();
        assert!(memory.slot_bytes >= memory.record_bytes);
        let mut bytes = Vec::new();
        store.snapshot(&mut bytes).expect("writing to memory succeeds");
        let again = Store::restore(bytes.as_slice()).expect("own snapshot restores");
        assert_eq!(again.keys(), store.keys());
        assert_eq!(again.memory().record_bytes, memory.record_bytes);
    }
});
