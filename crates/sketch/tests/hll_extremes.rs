//! HyperLogLogs at the largest parameters the format allows: inserts stay
//! cheap while the registers are sparse.

use std::time::{Duration, Instant};

use cardinal_sketch::hll::{Explicit, Hll, Kind, Settings};
use cardinal_sketch::{Sketch, hash};

/// Two million distinct values into `hll(31, 8)`, which keeps its registers
/// sparse up to 2^28 of them. Inserting each new register into a sorted
/// list moved half the list each time: minutes for this test. The bound is
/// far above the seconds an O(log n) insert takes, even on a loaded machine.
#[test]
fn sparse_inserts_at_log2m_31_are_not_quadratic() {
    let settings = Settings {
        explicit: Explicit::Off,
        ..Settings::new(31, 8).expect("valid")
    };
    let n = 2_000_000u64;
    let start = Instant::now();
    let mut forward = Hll::new(settings).expect("valid");
    for i in 0..n {
        forward.insert(hash::user_id(i));
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(20),
        "{n} sparse inserts took {elapsed:?}"
    );
    assert_eq!(forward.kind(), Kind::Sparse);
    let e = forward.estimate();
    assert!(e.lower <= n as f64 && n as f64 <= e.upper, "{e:?}");

    // The same values in another order, with duplicates, give the same
    // registers and the same bytes.
    let mut backward = Hll::new(settings).expect("valid");
    for i in (0..n).rev().chain(0..1000) {
        backward.insert(hash::user_id(i));
    }
    assert_eq!(forward, backward);
    let bytes = forward.encode();
    assert_eq!(bytes, backward.encode());
    assert_eq!(Hll::decode(&bytes).expect("own bytes"), forward);
}

/// Sparse registers raised after they were set, interleaved with new ones,
/// at sizes around each reorganisation of the sparse list: the registers are
/// those of a dense sketch fed the same hashes.
#[test]
fn sparse_registers_equal_dense_ones() {
    let settings = Settings {
        explicit: Explicit::Off,
        ..Settings::new(16, 6).expect("valid")
    };
    let mut sparse = Hll::new(settings).expect("valid");
    let mut reference = vec![0u8; 1 << 16];
    let top = sparse.register_value_max();
    let mut state = 7u64;
    for step in 0..8_000u64 {
        // A few keys again and again (raising registers), and new ones.
        let key = if step % 3 == 0 { step % 97 } else { step };
        state = state.wrapping_add(hash::user_id(key));
        let h = hash::user_id(key ^ (state & 0xF0));
        sparse.insert(h);
        let index = (h & 0xFFFF) as usize;
        let w = h >> 16;
        if w != 0 {
            let value = u8::try_from(w.trailing_zeros() + 1)
                .expect("small")
                .min(top);
            reference[index] = reference[index].max(value);
        }
        if step % 500 == 0 || step == 7_999 {
            assert_eq!(
                sparse.registers().expect("defined"),
                reference,
                "step {step}"
            );
        }
    }
}
