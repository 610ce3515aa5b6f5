//! Inserts per second at the extreme parameters each sketch accepts, to show
//! that no parameter turns an insert quadratic.
//!
//! ```text
//! cargo run --profile bench -p cardinal-sketch --example insert_extremes -- [--n VALUES]
//! ```
//!
//! Prints one line per sketch and parameter: values inserted, wall and CPU
//! seconds, and millions of inserts per CPU second. Each sketch starts empty and takes `n`
//! distinct random values (splitmix64, fixed seed), so a sparse HyperLogLog
//! at a large `log2m` stays sparse the whole way (it turns dense only past
//! `m / 8` registers). Rates that fall as `n` grows would show a
//! super-linear insert.

use std::hint::black_box;
use std::time::Instant;

use cardinal_sketch::exact::ExactSet;
use cardinal_sketch::hll::{Hll, Settings};
use cardinal_sketch::quantiles::{self, Quantiles};
use cardinal_sketch::theta::{self, Theta};

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// CPU seconds of this process (user + system), from `/proc/self/stat`
/// in clock ticks of 10 ms; 0 where that file does not exist. On a
/// shared machine the wall clock counts other processes' time too.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name: utime and stime are
    // the 12th and 13th.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn report(name: &str, n: usize, run: impl FnOnce()) {
    let (start, cpu_start) = (Instant::now(), cpu_secs());
    run();
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu_start;
    println!(
        "{name:<20} {n:>9} values {secs:>8.3} s wall {cpu:>7.2} s cpu {:>7.2} M/s per cpu s",
        n as f64 / cpu.max(0.01) / 1e6
    );
}

fn main() {
    let mut n: usize = 3_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--n" => n = value.parse().expect("--n VALUES"),
            other => panic!("unknown flag {other}"),
        }
    }
    let mut state = 0x5EED_0E47_4E3E;
    let values: Vec<u64> = (0..n).map(|_| splitmix(&mut state)).collect();

    for (log2m, regwidth) in [(11, 5), (17, 7), (24, 8), (31, 8)] {
        let settings = Settings::new(log2m, regwidth).expect("valid");
        report(&format!("hll({log2m}, {regwidth})"), n, || {
            let mut hll = Hll::new(settings).expect("valid");
            for &value in &values {
                hll.insert(value);
            }
            black_box(&hll);
        });
    }
    for k in [quantiles::K_MIN, quantiles::K_DEFAULT, quantiles::K_MAX] {
        report(&format!("quantiles(k {k})"), n, || {
            let mut sketch = Quantiles::new(k).expect("valid");
            for &value in &values {
                sketch.insert((value >> 11) as f64);
            }
            black_box(&sketch);
        });
    }
    for lg_k in [theta::LG_K_MIN, theta::LG_K_MAX] {
        report(&format!("theta(lg_k {lg_k})"), n, || {
            let mut sketch = Theta::new(lg_k).expect("valid");
            for &value in &values {
                sketch.insert(value);
            }
            black_box(&sketch);
        });
    }
    report("exact_distinct", n, || {
        let mut set = ExactSet::new();
        for &value in &values {
            set.insert(value);
        }
        black_box(&set);
    });
}
