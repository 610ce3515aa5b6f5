//! Accuracy per byte: Count-Min quantiles (dyadic levels + binary search)
//! against KLL, on the same data.
//!
//! Data (fixed seed): 1M log-normal "revenue" values, `exp(3 + 1.2 z)`, and
//! 1M Zipf(1.2) latencies in whole milliseconds over `1..=100_000`. Count-Min
//! sketches see the values through `FloatDomain` (order-preserving `f64`
//! buckets of relative width `2^-(domain_bits - 12)`); KLL sees them as they
//! are. For each rank `q` in 0.01, 0.02, ..., 0.99 the sketch answers a value
//! `x`, and its rank error is the distance from `q` to the true rank interval
//! `[F(< x), F(<= x)]` of `x` in the data. Count-Min answers the smallest
//! value of a bucket, so its error includes the bucketing.
//!
//! Every row is the same from run to run: the data's seed is fixed, and
//! each KLL sketch's coins come from a fixed per-thread stream (see
//! `quantiles`).
//!
//! Run: `cargo run --release -p cardinal-sketch --example quantile_accuracy`

use cardinal_sketch::Sketch;
use cardinal_sketch::countmin::{DyadicCountMin, DyadicParams, FloatDomain, Params, Update};
use cardinal_sketch::quantiles::Quantiles;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

const VALUE_COUNT: usize = 1_000_000;

/// `(domain_bits, depth, width)` of the Count-Min configurations.
const COUNT_MIN_CONFIGS: [(u32, u32, u32); 6] = [
    (16, 2, 64),
    (20, 2, 128),
    (20, 3, 512),
    (24, 4, 1024),
    (32, 4, 1024),
    (32, 5, 4096),
];

/// KLL `k` values.
const KLL_KS: [u16; 4] = [50, 100, 200, 400];

fn log_normal(rng: &mut StdRng) -> f64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    let v: f64 = rng.random();
    let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
    (3.0 + 1.2 * z).exp()
}

/// Zipf(s) over `1..=n` by inverse CDF.
fn zipf_sampler(n: usize, s: f64) -> impl FnMut(&mut StdRng) -> f64 {
    let mut total = 0.0;
    let mut cumulative: Vec<f64> = (1..=n)
        .map(|rank| {
            total += (rank as f64).powf(-s);
            total
        })
        .collect();
    for c in &mut cumulative {
        *c /= total;
    }
    move |rng| {
        let u: f64 = rng.random();
        (cumulative.partition_point(|&c| c < u) + 1) as f64
    }
}

/// Distance from `q` to the true rank interval of `x` in sorted `data`.
fn rank_error(sorted: &[f64], x: f64, q: f64) -> f64 {
    let n = sorted.len() as f64;
    let below = sorted.partition_point(|&v| v < x) as f64 / n;
    let at_or_below = sorted.partition_point(|&v| v <= x) as f64 / n;
    (below - q).max(q - at_or_below).max(0.0)
}

struct Row {
    sketch: &'static str,
    params: String,
    encoded_bytes: usize,
    insert_ns: f64,
    error_max: f64,
    error_mean: f64,
}

fn errors(sorted: &[f64], mut quantile: impl FnMut(f64) -> f64) -> (f64, f64) {
    let mut error_max = 0.0f64;
    let mut error_sum = 0.0;
    for percent in 1..=99 {
        let q = f64::from(percent) / 100.0;
        let error = rank_error(sorted, quantile(q), q);
        error_max = error_max.max(error);
        error_sum += error;
    }
    (error_max, error_sum / 99.0)
}

fn measure(data: &[f64]) -> Vec<Row> {
    let mut sorted = data.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mut rows = Vec::new();
    for (domain_bits, depth, width) in COUNT_MIN_CONFIGS {
        let domain = FloatDomain::new(domain_bits).expect("valid domain");
        let level = Params {
            depth,
            width,
            update: Update::Conservative,
            ..Params::default()
        };
        let mut sketch =
            DyadicCountMin::new(DyadicParams { domain_bits, level }).expect("valid params");
        let start = Instant::now();
        for &value in data {
            sketch.insert(domain.to_domain(value), 1);
        }
        let insert_ns = start.elapsed().as_nanos() as f64 / data.len() as f64;
        let (error_max, error_mean) = errors(&sorted, |q| {
            domain.from_domain(sketch.quantile(q).expect("not empty"))
        });
        rows.push(Row {
            sketch: "count-min",
            params: format!("bits={domain_bits} d={depth} w={width}"),
            encoded_bytes: sketch.encode().len(),
            insert_ns,
            error_max,
            error_mean,
        });
    }
    for k in KLL_KS {
        let mut sketch = Quantiles::new(k).expect("valid k");
        let start = Instant::now();
        for &value in data {
            sketch.insert(value);
        }
        let insert_ns = start.elapsed().as_nanos() as f64 / data.len() as f64;
        assert_eq!(sketch.count(), data.len() as u64);
        let (error_max, error_mean) = errors(&sorted, |q| sketch.quantile(q).expect("not empty"));
        rows.push(Row {
            sketch: "kll",
            params: format!("k={k}"),
            encoded_bytes: Sketch::encode(&sketch).len(),
            insert_ns,
            error_max,
            error_mean,
        });
    }
    rows
}

fn print(title: &str, rows: &[Row]) {
    println!("\n{title}");
    println!(
        "| sketch | parameters | encoded bytes | insert ns/value | max rank error | mean rank error |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.5} | {:.5} |",
            row.sketch, row.params, row.encoded_bytes, row.insert_ns, row.error_max, row.error_mean
        );
    }
}

fn main() {
    let mut rng = StdRng::seed_from_u64(20_260_521);
    let revenue: Vec<f64> = (0..VALUE_COUNT).map(|_| log_normal(&mut rng)).collect();
    let mut latency = zipf_sampler(100_000, 1.2);
    let latencies_ms: Vec<f64> = (0..VALUE_COUNT).map(|_| latency(&mut rng)).collect();
    print("revenue: 1M log-normal exp(3 + 1.2 z)", &measure(&revenue));
    print(
        "latency_ms: 1M Zipf(1.2) over 1..=100000",
        &measure(&latencies_ms),
    );
}
