//! Replays the inputs kept under `tests/fuzz/protocol_frames/` (crashes
//! the fuzzer found, fixed since, and seeds) through the fuzz target's own
//! checks. The fuzzer ignores checksums (`--cfg fuzzing`) and a test does
//! not, so each input is replayed with its checksums made right first:
//! every frame's, walking the stream as the decoder does, and the
//! deduplication image's trailer, each on its own copy.

use std::path::Path;

include!("fuzz/protocol_frames.rs");

fn inputs() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/protocol_frames");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("listable").path())
        .filter(|path| path.extension().is_none_or(|e| e != "md"))
        .map(|path| {
            (
                path.display().to_string(),
                std::fs::read(&path).expect("readable"),
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no inputs", dir.display());
    files
}

/// `data` with every whole frame's checksum recomputed.
fn reseal_frames(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0;
    while let Some(head) = out.get(at..at + 9) {
        let body = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + 9).checked_add(body).filter(|&end| end <= out.len()) else {
            break;
        };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&out[at..at + 5]);
        hasher.update(&out[at + 9..end]);
        out[at + 5..at + 9].copy_from_slice(&hasher.finalize().to_le_bytes());
        at = end;
    }
    out
}

/// `data` with its last four bytes the checksum of the rest.
fn reseal_image(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    if out.len() >= 4 {
        let split = out.len() - 4;
        let crc = crc32fast::hash(&out[..split]);
        out[split..].copy_from_slice(&crc.to_le_bytes());
    }
    out
}

#[test]
fn protocol_frames_inputs_replay() {
    for (name, data) in inputs() {
        println!("{name}");
        check_protocol_frames(&data);
        check_protocol_frames(&reseal_frames(&data));
        check_protocol_frames(&reseal_image(&data));
    }
}
