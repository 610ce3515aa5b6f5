//! Byte mutations shared by the decoder robustness tests: flip, truncate,
//! extend and overwrite with extreme values, from a fixed seed.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `count` mutants of the `valid` encodings, reproducible from `seed`.
pub fn mutants(valid: &[Vec<u8>], seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let mut bytes = valid[rng.random_range(0..valid.len())].clone();
        match rng.random_range(0..5) {
            0 => {
                for _ in 0..rng.random_range(1..=4) {
                    if !bytes.is_empty() {
                        let i = rng.random_range(0..bytes.len());
                        bytes[i] ^= 1 << rng.random_range(0..8);
                    }
                }
            }
            1 => {
                let len = rng.random_range(0..=bytes.len());
                bytes.truncate(len);
            }
            2 => {
                for _ in 0..rng.random_range(1..=16) {
                    bytes.push(rng.random());
                }
            }
            3 => {
                // An extreme 4- or 8-byte field: where counts and sizes live.
                let width = if rng.random() { 4 } else { 8 };
                if bytes.len() >= width {
                    let i = rng.random_range(0..=bytes.len() - width);
                    let value: [u8; 8] = match rng.random_range(0..3) {
                        0 => [0xff; 8],
                        1 => [0; 8],
                        _ => rng.random(),
                    };
                    bytes[i..i + width].copy_from_slice(&value[..width]);
                }
            }
            _ => {
                if !bytes.is_empty() {
                    let i = rng.random_range(0..bytes.len());
                    bytes[i] = rng.random();
                }
            }
        }
        out.push(bytes);
    }
    out
}

/// The checked-in inputs of a fuzz target (crashes and guarded cases).
pub fn fuzz_inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(target);
    let mut inputs = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return inputs;
    };
    for entry in entries {
        let path = entry.expect("readable directory entry").path();
        let bytes = std::fs::read(&path).expect("readable fuzz input");
        inputs.push((path.display().to_string(), bytes));
    }
    inputs.sort();
    inputs
}
