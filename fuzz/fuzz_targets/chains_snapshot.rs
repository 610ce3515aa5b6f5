#![no_main]
//! Any bytes into the chain-store snapshot decoder: it must return an error
//! or a store whose own snapshot restores to the same content, never panic,
//! and never allocate more than the input backs (libFuzzer's -rss_limit_mb
//! and -malloc_limit_mb catch that). Every header is tried, up to
//! `SHARD_BITS_MAX`: the decoder sizes nothing from the header, so 2^20
//! shards of 2^27 slots each cost nothing until their sections arrive.
use cardinal_chains::Store;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
