#![no_main]
//! Any bytes as an input: compression detection, every decoder and the
//! line reader must return chunks or errors, never panic. Output is capped
//! so that a small, valid decompression bomb ends the run instead of the
//! fuzzer. Damage ends the input after every whole line before it: the
//! error's offsets continue the chunks', and nothing comes after it.
use cardinal_source::{Chunk, Error, Input, LineReader};
use libfuzzer_sys::fuzz_target;

/// Decompressed bytes read per input at most.
const OUTPUT_BYTES_MAX: usize = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::from_reader("fuzz", std::io::Cursor::new(data.to_vec())) else {
        return;
    };
    let chunk_bytes = 16 + data.len() % 4096;
    let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes);
    let mut chunk = Chunk::default();
    let mut total = 0;
    // Offsets follow chunk lengths until a skipped line jumps past one.
    let mut offset = Some(0);
    loop {
        match reader.read_chunk(&mut chunk) {
            Ok(true) => {
                if let Some(expected) = offset {
                    assert_eq!(chunk.offset, expected);
                }
                assert!(!chunk.is_empty());
                offset = Some(chunk.offset + chunk.len() as u64);
                total += chunk.len();
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
                    assert_eq!(decoded_offset - partial_bytes, expected);
                }
                assert!(compressed_offset <= data.len() as u64);
                assert!(matches!(reader.read_chunk(&mut chunk), Ok(false)));
                break;
            }
            Err(_) => break,
        }
        if total > OUTPUT_BYTES_MAX {
            break;
        }
    }
});
