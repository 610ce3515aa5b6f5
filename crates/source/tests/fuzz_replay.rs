//! Replays the inputs kept under `tests/fuzz/source_decompress/` through
//! the checks of the fuzz target of that name: detection, every decoder
//! and the line reader return chunks or errors, never panic, and chunk
//! offsets follow chunk lengths, damage ends the input where the chunks
//! end (see `tests/fuzz/README.md`).

use std::path::Path;

use cardinal_source::{Chunk, Error, Input, LineReader};

#[test]
fn source_decompress_inputs_replay() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/source_decompress");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz inputs") {
        let path = entry.expect("listable").path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let data = std::fs::read(&path).expect("readable");
        replayed += 1;
        let Ok(input) = Input::from_reader("fuzz", std::io::Cursor::new(data.clone())) else {
            continue;
        };
        let mut reader = LineReader::with_chunk_bytes(input, 16 + data.len() % 4096);
        let mut chunk = Chunk::default();
        let mut offset = Some(0);
        loop {
            match reader.read_chunk(&mut chunk) {
                Ok(true) => {
                    if let Some(expected) = offset {
                        assert_eq!(chunk.offset, expected, "{}", path.display());
                    }
                    offset = Some(chunk.offset + chunk.len() as u64);
                }
                Ok(false) => break,
                Err(e) if e.is_recoverable() => offset = None,
                Err(Error::Damaged {
                    decoded_offset,
                    partial_bytes,
                    compressed_offset,
                    ..
                }) => {
                    if let Some(expected) = offset {
                        assert_eq!(
                            decoded_offset - partial_bytes,
                            expected,
                            "{}",
                            path.display()
                        );
                    }
                    assert!(compressed_offset <= data.len() as u64, "{}", path.display());
                    assert!(matches!(reader.read_chunk(&mut chunk), Ok(false)));
                    break;
                }
                Err(_) => break,
            }
        }
    }
    assert!(replayed > 0, "{} holds no inputs", dir.display());
}
