//! Speed of cardinal's HyperLogLog, for `bench/hll/run.sh`.
//!
//! Prints one JSON line per measured repetition, the shape the Java peers in
//! `bench/hll/java` print as well:
//!
//! ```text
//! {"impl":"cardinal","op":"insert_prehashed","ops":4194304,"wall_s":0.01,"cpu_s":0.01}
//! ```
//!
//! Operations, all on (log2m 11, regwidth 5) sketches whose registers are
//! dense before timing starts (explicit off, sparse off, pre-filled):
//!
//! | op | one op is |
//! |---|---|
//! | `insert_prehashed` | `Hll::insert` of a random 64-bit value taken as a hash |
//! | `hash_insert` | `hash::user_id` of a `u64` key, then `Hll::insert` |
//! | `union` | `Sketch::merge` of one FULL sketch into another |
//! | `estimate` | `Sketch::estimate` (Ertl's estimator) of a FULL sketch |
//! | `cardinality` | `Hll::cardinality` (the java-hll estimator) of a FULL sketch |
//!
//! `union` lines carry `bytes`, the 1280 bytes of one operand's registers in
//! the storage format (2048 * 5 bits), and `bytes_mem`, the bytes of one
//! operand's registers in memory (one byte per register).
//!
//! Values come from splitmix64 with the same seed as the Java peers, so both
//! sides insert the same 64-bit values.
//!
//! ```text
//! cargo run --release -p cardinal-sketch --example hll_speed -- [--small] [--op NAME]
//!     [--n VALUES] [--reps R] [--warmups W] [--calls C]
//! ```
//!
//! `--small` runs each timed function exactly once over 65536 values (1000
//! calls for the per-sketch operations), for instruction counts under
//! callgrind; see `bench/hll/callgrind.sh`.

use std::hint::black_box;
use std::time::Instant;

use cardinal_sketch::Sketch;
use cardinal_sketch::hash;
use cardinal_sketch::hll::{Explicit, Hll, Settings};

const LOG2M: u8 = 11;
const REGWIDTH: u8 = 5;
/// 2048 registers of 5 bits, as the storage format packs them.
const REGISTER_BYTES_PACKED: u64 = (1 << LOG2M) * REGWIDTH as u64 / 8;
/// The Java peers use the same seed (`HllPeers.SEED`).
const SEED: u64 = 0x5EED_CA4D_1A11;

struct Config {
    values: usize,
    reps: usize,
    warmups: usize,
    calls: usize,
    op: Option<String>,
}

fn main() {
    let config = parse_args();
    let values = splitmix64(SEED, config.values);
    let wanted = |op: &str| config.op.as_deref().is_none_or(|o| o == op);

    if wanted("insert_prehashed") {
        let mut hll = full(&values);
        measure(&config, "insert_prehashed", values.len(), None, || {
            insert_prehashed_all(black_box(&mut hll), black_box(&values));
        });
        black_box(&hll);
    }
    if wanted("hash_insert") {
        let mut hll = full(&values);
        measure(&config, "hash_insert", values.len(), None, || {
            hash_insert_all(black_box(&mut hll), black_box(&values));
        });
        black_box(&hll);
    }

    let half = values.len() / 2;
    let a = full(&values[..half]);
    let b = full(&values[half..]);
    if wanted("union") {
        let mut target = a.clone();
        let bytes = Some((REGISTER_BYTES_PACKED, register_bytes_in_memory(&b)));
        measure(&config, "union", config.calls, bytes, || {
            union_many(black_box(&mut target), black_box(&b), config.calls);
        });
        black_box(&target);
    }
    if wanted("estimate") {
        measure(&config, "estimate", config.calls, None, || {
            black_box(estimate_many(black_box(&a), config.calls));
        });
    }
    if wanted("cardinality") {
        measure(&config, "cardinality", config.calls, None, || {
            black_box(cardinality_many(black_box(&a), config.calls));
        });
    }
    if wanted("intersection") {
        // Two FULL (11, 5) sketches sharing a third of their values: an
        // interior fit, so both ends of the profile interval are searched.
        let third = values.len() / 3;
        let x = full(&values[..2 * third]);
        let y = full(&values[third..]);
        let calls = (config.calls / 100).max(10);
        measure(&config, "intersection", calls, None, || {
            black_box(intersection_many(black_box(&x), black_box(&y), calls));
        });
    }
}

// The timed loops are separate functions that are never inlined, so that
// callgrind can count their instructions alone (`--toggle-collect`) and a
// profile names them. Each call site inside them is monomorphic and inlined.

#[inline(never)]
fn insert_prehashed_all(hll: &mut Hll, hashes: &[u64]) {
    for &h in hashes {
        hll.insert(h);
    }
}

#[inline(never)]
fn hash_insert_all(hll: &mut Hll, keys: &[u64]) {
    for &k in keys {
        hll.insert(hash::user_id(k));
    }
}

#[inline(never)]
fn union_many(target: &mut Hll, other: &Hll, calls: usize) {
    for _ in 0..calls {
        // Folding the same sketch in again does the full per-register work
        // (nothing skips registers that are already at the maximum), and
        // black_box keeps the calls from being merged or hoisted.
        black_box(&mut *target)
            .merge(black_box(other))
            .expect("same settings");
    }
}

#[inline(never)]
fn estimate_many(hll: &Hll, calls: usize) -> f64 {
    let mut total = 0.0;
    for _ in 0..calls {
        total += black_box(hll).estimate().value;
    }
    total
}

#[inline(never)]
fn cardinality_many(hll: &Hll, calls: usize) -> f64 {
    let mut total = 0.0;
    for _ in 0..calls {
        total += black_box(hll)
            .cardinality()
            .expect("a FULL sketch has a cardinality");
    }
    total
}

#[inline(never)]
fn intersection_many(a: &Hll, b: &Hll, calls: usize) -> f64 {
    let mut total = 0.0;
    for _ in 0..calls {
        total += black_box(a)
            .intersection(black_box(b))
            .expect("same settings")
            .intersection
            .value;
    }
    total
}

/// A (11, 5) sketch with explicit and sparse off, filled with `values` so that
/// its registers are dense in memory and FULL in the storage format.
fn full(values: &[u64]) -> Hll {
    let mut settings = Settings::new(LOG2M, REGWIDTH).expect("(11, 5) is valid");
    settings.explicit = Explicit::Off;
    settings.sparse = false;
    let mut hll = Hll::new(settings).expect("(11, 5) is valid");
    for &v in values {
        hll.insert(v);
    }
    assert_eq!(hll.encode()[0] & 0x0F, 4, "the sketch must encode as FULL");
    hll
}

/// The bytes one sketch's registers take in memory.
fn register_bytes_in_memory(hll: &Hll) -> u64 {
    u64::try_from(hll.heap_bytes()).expect("usize fits in u64")
}

/// Runs `body` `warmups` times unmeasured, then `reps` times measured, and
/// prints one line per measured repetition.
fn measure(
    config: &Config,
    op: &str,
    ops: usize,
    bytes: Option<(u64, u64)>,
    mut body: impl FnMut(),
) {
    for _ in 0..config.warmups {
        body();
    }
    for _ in 0..config.reps {
        let cpu0 = thread_cpu_ns();
        let wall0 = Instant::now();
        body();
        let wall = wall0.elapsed();
        let cpu = thread_cpu_ns() - cpu0;
        let mut line = format!(
            "{{\"impl\":\"cardinal\",\"op\":\"{op}\",\"ops\":{ops},\"wall_s\":{:.9},\"cpu_s\":{:.9}",
            wall.as_secs_f64(),
            cpu as f64 / 1e9,
        );
        if let Some((packed, in_memory)) = bytes {
            let calls = ops as u64;
            line.push_str(&format!(
                ",\"bytes\":{},\"bytes_mem\":{}",
                packed * calls,
                in_memory * calls
            ));
        }
        line.push('}');
        println!("{line}");
    }
}

/// CPU time of the calling thread. std has only wall clocks, and
/// `/proc/thread-self/stat` counts in 10 ms ticks, too coarse for these runs.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock id is a
    // constant the kernel supports for every thread.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    let secs = u64::try_from(ts.tv_sec).expect("CPU time is not negative");
    let nanos = u64::try_from(ts.tv_nsec).expect("CPU time is not negative");
    secs * 1_000_000_000 + nanos
}

/// splitmix64 (Steele, Lea and Flood, OOPSLA 2014), as in the Java peers.
fn splitmix64(seed: u64, n: usize) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect()
}

fn parse_args() -> Config {
    let mut config = Config {
        values: 1 << 22,
        reps: 5,
        warmups: 3,
        calls: 20_000,
        op: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            let text = args
                .next()
                .unwrap_or_else(|| panic!("{name} needs a value"));
            text.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {text}"))
        };
        match arg.as_str() {
            "--small" => {
                config.values = 1 << 16;
                config.reps = 1;
                config.warmups = 0;
                config.calls = 1000;
            }
            "--n" => config.values = number("--n"),
            "--reps" => config.reps = number("--reps"),
            "--warmups" => config.warmups = number("--warmups"),
            "--calls" => config.calls = number("--calls"),
            "--op" => config.op = Some(args.next().expect("--op needs a name")),
            other => panic!("unknown argument: {other}"),
        }
    }
    assert!(config.values >= 2, "--n must be at least 2");
    config
}
