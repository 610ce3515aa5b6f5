//! Speed of [`Quantiles::insert`] (KLL), the way the engine's `providers`
//! summary feeds it: values spread over a few sketches at a time.
//!
//! ```text
//! cargo run --release -p cardinal-sketch --example quantile_speed -- \
//!     [--n VALUES] [--sketches S] [--k K] [--reps R]
//! ```
//!
//! Values are revenue-like (exponential, six decimals) from splitmix64 with
//! a fixed seed; each goes to a sketch picked by the same generator. Prints
//! one line per repetition: nanoseconds per insert and the retained items.
//! Under callgrind, `--reps 1` with a smaller `--n` gives the instruction
//! count per insert.

use std::hint::black_box;
use std::time::Instant;

use cardinal_sketch::quantiles::Quantiles;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() {
    let mut n: usize = 18_000_000;
    let mut sketches: usize = 10;
    let mut k: u16 = 200;
    let mut reps = 3;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--n" => n = value.parse().expect("--n VALUES"),
            "--sketches" => sketches = value.parse().expect("--sketches S"),
            "--k" => k = value.parse().expect("--k K"),
            "--reps" => reps = value.parse().expect("--reps R"),
            other => panic!("unknown flag {other}"),
        }
    }
    let mut state = 42;
    let values: Vec<(u32, f64)> = (0..n)
        .map(|_| {
            let r = splitmix(&mut state);
            let pick = u32::try_from((r >> 32) % sketches as u64).expect("fits");
            let uniform = ((r & 0xffff_ffff) as f64 + 0.5) / 4_294_967_296.0;
            let revenue = (-uniform.ln() * 0.004 * 1e6).round() / 1e6;
            (pick, revenue)
        })
        .collect();
    for _ in 0..reps {
        let mut all: Vec<Quantiles> = (0..sketches)
            .map(|_| Quantiles::new(k).expect("valid k"))
            .collect();
        let start = Instant::now();
        for &(pick, value) in &values {
            all[pick as usize].insert(black_box(value));
        }
        let elapsed = start.elapsed().as_secs_f64();
        let retained: usize = all.iter().map(|q| q.heap_bytes()).sum();
        println!(
            "{:.2} ns/insert over {n} values into {sketches} sketch(es), k {k}; {retained} heap bytes; p50 {:?}",
            elapsed * 1e9 / n as f64,
            all[0].quantile(0.5)
        );
    }
}
