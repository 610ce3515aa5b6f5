//! The statistical benchmark of `specs/intersections.md`: joint
//! maximum-likelihood intersections against inclusion-exclusion.
//!
//! ```text
//! cargo run --release -p cardinal-sketch --example intersections -- \
//!     [--trials N] [--trials-ratio-100 N] [--b-size N] [--threads N]
//! ```
//!
//! m = 8192 (log2m 13, regwidth 6), |B| = b-size (10^6), |A| = ratio x |B|,
//! overlap = |A ∩ B| / min(|A|, |B|), over ratio {1, 10, 100} x overlap
//! {0.01, 0.05, 0.1, 0.5}. Keys are SplitMix64 outputs hashed with
//! `hash::user_id`; SplitMix64 is a bijection of its counter, so the keys of
//! one trial are all distinct and the three parts are truly disjoint.
//!
//! Cost: each trial builds three sketches, A \ B, B \ A and A ∩ B, and forms
//! A and B by register-wise maximum (a union, exact for HyperLogLog). The
//! four overlap cells of one ratio share the work: A ∩ B grows with the
//! overlap and A \ B and B \ A shrink, so keys are inserted in that order
//! and each sketch is snapshotted (cloned) at every cell's size. Each cell
//! still sees sets of exactly the sizes it names.

// Sizes, ranks and call counts here are at most ~10^8, far inside every
// integer type they are cast to.
#![allow(clippy::cast_possible_truncation)]

use std::time::{Duration, Instant};

use cardinal_sketch::Sketch;
use cardinal_sketch::hash;
use cardinal_sketch::hll::{Hll, Settings};

const LOG2M: u8 = 13;
const REGWIDTH: u8 = 6;
const RATIOS: [u64; 3] = [1, 10, 100];
const OVERLAPS: [f64; 4] = [0.01, 0.05, 0.1, 0.5];
const SEED: u64 = 0x5EED_2026_1121;

fn new_sketch() -> Hll {
    Hll::new(Settings::new(LOG2M, REGWIDTH).expect("valid settings")).expect("valid settings")
}

/// A ∪ B by register-wise maximum.
fn union(a: &Hll, b: &Hll) -> Hll {
    let mut union = a.clone();
    union.merge(b).expect("same settings");
    union
}

/// SplitMix64 (Steele, Lea and Flood 2014).
struct SplitMix(u64);

impl SplitMix {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

struct Options {
    trials: usize,
    trials_ratio_100: usize,
    b_size: u64,
    threads: usize,
}

fn parse_options() -> Options {
    let mut options = Options {
        trials: 1000,
        trials_ratio_100: 0,
        b_size: 1_000_000,
        threads: 2,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} needs a number"))
        };
        match flag.as_str() {
            "--trials" => options.trials = value(),
            "--trials-ratio-100" => options.trials_ratio_100 = value(),
            "--b-size" => options.b_size = value() as u64,
            "--threads" => options.threads = value(),
            other => panic!("unknown flag {other}"),
        }
    }
    if options.trials_ratio_100 == 0 {
        options.trials_ratio_100 = options.trials;
    }
    options
}

/// One trial's outcome in one cell.
#[derive(Clone, Copy)]
struct Outcome {
    error_inclusion_exclusion: f64,
    error_joint: f64,
    covered: bool,
    below_detection_limit: bool,
}

/// Runs one trial of one ratio: all four overlap cells.
fn trial(ratio: u64, b_size: u64, index: usize, joint_time: &mut Duration) -> [Outcome; 4] {
    let mut keys = SplitMix(SEED ^ (ratio << 40) ^ (index as u64).wrapping_mul(0x9E37_79B9));
    let smaller = b_size; // ratio >= 1, so |B| is the smaller set
    let shared_sizes = OVERLAPS.map(|o| (o * smaller as f64).round() as u64);
    let mut insert_to = |registers: &mut Hll, inserted: &mut u64, target: u64| {
        while *inserted < target {
            registers.insert(hash::user_id(keys.next()));
            *inserted += 1;
        }
    };
    // A ∩ B grows with the overlap: snapshot in increasing order.
    let mut shared = new_sketch();
    let mut count = 0;
    let mut shared_snapshots = Vec::with_capacity(4);
    for &size in &shared_sizes {
        insert_to(&mut shared, &mut count, size);
        shared_snapshots.push(shared.clone());
    }
    // A \ B and B \ A shrink as the overlap grows: snapshot from the largest
    // overlap down.
    let mut only = |total: u64| -> Vec<Hll> {
        let mut registers = new_sketch();
        let mut count = 0;
        let mut snapshots = vec![new_sketch(); 4];
        for cell in (0..4).rev() {
            insert_to(&mut registers, &mut count, total - shared_sizes[cell]);
            snapshots[cell] = registers.clone();
        }
        snapshots
    };
    let a_only = only(ratio * b_size);
    let b_only = only(b_size);
    std::array::from_fn(|cell| {
        let a = union(&a_only[cell], &shared_snapshots[cell]);
        let b = union(&b_only[cell], &shared_snapshots[cell]);
        let truth = shared_sizes[cell] as f64;
        let started = Instant::now();
        let overlap = a.intersection(&b).expect("same settings");
        *joint_time += started.elapsed();
        let x = overlap.intersection;
        Outcome {
            error_inclusion_exclusion: (overlap.inclusion_exclusion - truth).abs() / truth,
            error_joint: (x.value - truth).abs() / truth,
            covered: x.lower <= truth && truth <= x.upper,
            below_detection_limit: x.below_detection_limit(),
        }
    })
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64 - 1.0) * q).round() as usize;
    values[rank]
}

fn main() {
    let options = parse_options();
    let started = Instant::now();
    println!(
        "m = {} (log2m {LOG2M}, regwidth {REGWIDTH}), |B| = {}, trials {} ({} at ratio 100), threads {}",
        1 << LOG2M,
        options.b_size,
        options.trials,
        options.trials_ratio_100,
        options.threads
    );
    println!();
    println!(
        "| ratio | overlap | trials | incl-excl median / p95 % | joint median / p95 % | joint coverage % | below detection % |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut results = Vec::new();
    let mut joint_time = Duration::ZERO;
    let mut joint_calls = 0u32;
    for ratio in RATIOS {
        let trials = if ratio == 100 {
            options.trials_ratio_100
        } else {
            options.trials
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let per_thread: Vec<(Vec<[Outcome; 4]>, Duration)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..options.threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut outcomes = Vec::new();
                        let mut time = Duration::ZERO;
                        loop {
                            let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if index >= trials {
                                break;
                            }
                            outcomes.push(trial(ratio, options.b_size, index, &mut time));
                        }
                        (outcomes, time)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("trial thread panicked"))
                .collect()
        });
        let mut outcomes = Vec::new();
        for (list, time) in per_thread {
            outcomes.extend(list);
            joint_time += time;
        }
        joint_calls += 4 * outcomes.len() as u32;
        for (cell, &overlap) in OVERLAPS.iter().enumerate() {
            let column = |f: fn(&Outcome) -> f64| -> Vec<f64> {
                outcomes.iter().map(|o| f(&o[cell])).collect()
            };
            let mut ie = column(|o| o.error_inclusion_exclusion);
            let mut jm = column(|o| o.error_joint);
            let n = outcomes.len() as f64;
            let row = Row {
                ratio,
                overlap,
                ie_median: 100.0 * quantile(&mut ie, 0.5),
                ie_p95: 100.0 * quantile(&mut ie, 0.95),
                joint_median: 100.0 * quantile(&mut jm, 0.5),
                joint_p95: 100.0 * quantile(&mut jm, 0.95),
                coverage: 100.0 * outcomes.iter().filter(|o| o[cell].covered).count() as f64 / n,
                below: 100.0
                    * outcomes
                        .iter()
                        .filter(|o| o[cell].below_detection_limit)
                        .count() as f64
                    / n,
            };
            println!(
                "| {} | {} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} |",
                row.ratio,
                row.overlap,
                outcomes.len(),
                row.ie_median,
                row.ie_p95,
                row.joint_median,
                row.joint_p95,
                row.coverage,
                row.below
            );
            results.push(row);
        }
    }
    println!();
    report_goals(&results);
    println!();
    println!(
        "joint estimate: {:.0} us per call on average ({} calls, m = {})",
        joint_time.as_secs_f64() * 1e6 / f64::from(joint_calls),
        joint_calls,
        1 << LOG2M
    );
    time_single_calls(options.b_size);
    println!("runtime: {:.0} s", started.elapsed().as_secs_f64());
}

/// Times `Hll::intersection` on one thread, after the grid (so the other
/// thread is idle): an interior fit (profile-likelihood interval, both
/// ends), and a disjoint pair (fit on the boundary, upper end only).
fn time_single_calls(b_size: u64) {
    let mut keys = SplitMix(SEED ^ 0xA11CE);
    let mut sketch = |count: u64| {
        let mut h = new_sketch();
        for _ in 0..count {
            h.insert(hash::user_id(keys.next()));
        }
        h
    };
    let shared = sketch(b_size / 10);
    let a = union(&sketch(b_size - b_size / 10), &shared);
    let b = union(&sketch(b_size - b_size / 10), &shared);
    let disjoint = sketch(b_size);
    for (name, other) in [
        ("overlap 0.1, ratio 1", &b),
        ("disjoint, ratio 1", &disjoint),
    ] {
        let calls = 200;
        let started = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(a.intersection(other).expect("same settings"));
        }
        let per_call = started.elapsed().as_secs_f64() / f64::from(calls);
        println!(
            "Hll::intersection, {name}: {:.0} us per call (one thread)",
            per_call * 1e6
        );
    }
}

struct Row {
    ratio: u64,
    overlap: f64,
    ie_median: f64,
    ie_p95: f64,
    joint_median: f64,
    joint_p95: f64,
    coverage: f64,
    below: f64,
}

fn report_goals(results: &[Row]) {
    let cell = |ratio: u64, overlap: f64| {
        results
            .iter()
            .find(|r| r.ratio == ratio && r.overlap == overlap)
    };
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!("Goals (specs/intersections.md):");
    if let Some(r) = cell(10, 0.05) {
        let met = r.joint_median <= 0.4 * r.ie_median && r.joint_p95 <= 0.5 * r.ie_p95;
        println!(
            "- ratio 10, overlap 0.05: median {:.1} <= 0.4 x {:.1} = {:.1}, p95 {:.1} <= 0.5 x {:.1} = {:.1}: {}",
            r.joint_median,
            r.ie_median,
            0.4 * r.ie_median,
            r.joint_p95,
            r.ie_p95,
            0.5 * r.ie_p95,
            verdict(met)
        );
    }
    for (ratio, overlap, median_max, p95_max) in [
        (1, 0.05, 10.0, 30.0),
        (10, 0.1, 16.0, 45.0),
        (100, 0.5, 11.0, 32.0),
    ] {
        if let Some(r) = cell(ratio, overlap) {
            let met = r.joint_median <= median_max && r.joint_p95 <= p95_max;
            println!(
                "- ratio {ratio}, overlap {overlap}: {:.1} <= {median_max}, {:.1} <= {p95_max}: {}",
                r.joint_median,
                r.joint_p95,
                verdict(met)
            );
        }
    }
    let worse: Vec<String> = results
        .iter()
        .filter(|r| r.joint_median > r.ie_median || r.joint_p95 > r.ie_p95)
        .map(|r| format!("({}, {})", r.ratio, r.overlap))
        .collect();
    println!(
        "- never worse than inclusion-exclusion (median and p95, every cell): {}{}",
        verdict(worse.is_empty()),
        if worse.is_empty() {
            String::new()
        } else {
            format!(", worse in {}", worse.join(" "))
        }
    );
    let low: Vec<String> = results
        .iter()
        .filter(|r| r.coverage < 92.0)
        .map(|r| format!("({}, {}): {:.1}%", r.ratio, r.overlap, r.coverage))
        .collect();
    println!(
        "- 95% interval coverage >= 92% in every cell: {}{}",
        verdict(low.is_empty()),
        if low.is_empty() {
            String::new()
        } else {
            format!(", below in {}", low.join(" "))
        }
    );
}
