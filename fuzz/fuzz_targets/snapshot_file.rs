#![no_main]
//! Any bytes into `Snapshot::decode` (the checksum is not enforced under
//! `--cfg fuzzing`, so mutations reach the structure behind it): an error
//! or a snapshot, never a panic, never more memory than the input backs.
//! A snapshot it accepts encodes to bytes that decode to the same
//! snapshot.
use cardinal_store::Snapshot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(snapshot) = Snapshot::decode(data) else {
        return;
    };
    let bytes = snapshot.encode().expect("a decoded snapshot encodes");
    assert_eq!(Snapshot::decode(&bytes).expect("decodes"), snapshot);
    // The body is the same bytes; only the checksum may differ.
    assert_eq!(bytes[..bytes.len() - 4], data[..data.len() - 4]);
});
