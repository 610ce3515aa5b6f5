//! `cardinal demo sketches`: every sketch on its own, on generated
//! audiences, next to the truth.
//!
//! Three inventory providers' audiences overlap by known amounts. Each user
//! sees a few impressions on Zipf-distributed sites with log-normal revenue.
//! One pass folds every event into the sketches a rollup would keep (each
//! user id hashed once, the hash handed to every sketch); exact Roaring sets
//! and sorted revenues give the truth to print beside each estimate.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use cardinal_gen::rng::{SplitMix64, id_of};
use cardinal_sketch::countmin::{DyadicCountMin, DyadicParams, HeavyHitters, Params};
use cardinal_sketch::exact::ExactSet;
use cardinal_sketch::hll::{Hll, Settings};
use cardinal_sketch::quantiles::Quantiles;
use cardinal_sketch::theta::Theta;
use cardinal_sketch::{Estimate, Sketch, hash};

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  cardinal demo sketches
  cardinal demo sketches --users 200000 --seed 7")]
pub struct Args {
    /// Users in the largest audience (provider A); B has a tenth, C a quarter.
    #[arg(long, default_value_t = 2_000_000)]
    users: u64,
    /// Seed of the generator: the same seed gives the same events.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// Sites impressions are spread over, Zipf-distributed.
const SITE_COUNT: usize = 1_000;
/// Zipf exponent of site popularity.
const SITE_ZIPF_EXPONENT: f64 = 1.1;
/// Revenue is kept in cents over a 2^24 domain (up to $167,772) for Count-Min.
const REVENUE_DOMAIN_BITS: u32 = 24;
/// Impressions per user are uniform in 1..=IMPRESSIONS_PER_USER_MAX.
const IMPRESSIONS_PER_USER_MAX: u64 = 5;

/// One audience's sketches and truth.
struct Audience {
    name: &'static str,
    hll: Hll,
    theta: Theta,
    exact: ExactSet,
}

impl Audience {
    fn new(name: &'static str) -> Result<Self> {
        // m = 8192 registers of 6 bits (6 KiB), the setting the intersection
        // goals are stated for; postgresql-hll reads it (log2m <= 17).
        Ok(Self {
            name,
            hll: Hll::new(Settings::new(13, 6)?)?,
            theta: Theta::new(12)?,
            exact: ExactSet::new(),
        })
    }
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.users >= 1_000,
        "--users must be at least 1000 for the overlaps to mean anything"
    );
    let n_a = args.users;
    let n_b = n_a / 10;
    let n_c = n_a / 4;
    // Index ranges into one stream of distinct ids: B shares 5% of itself
    // with A; C shares 20% of itself with A and reaches into B as well.
    let a_range = 0..n_a;
    let b_range = (n_a - n_b / 20)..(n_a - n_b / 20 + n_b);
    let c_range = (n_a - n_c / 5)..(n_a - n_c / 5 + n_c);
    let ids_total = b_range.end.max(c_range.end);

    let mut audiences = [
        Audience::new("provider A")?,
        Audience::new("provider B")?,
        Audience::new("provider C")?,
    ];
    let mut revenue_kll = Quantiles::new(200)?;
    let mut revenue_cm = DyadicCountMin::new(DyadicParams {
        domain_bits: REVENUE_DOMAIN_BITS,
        level: Params {
            width: 2048,
            depth: 4,
            ..Params::default()
        },
    })?;
    let mut sites = HeavyHitters::new(Params::default(), 64)?;
    let mut revenue_truth: Vec<f64> = Vec::new();
    let mut site_truth = vec![0u64; SITE_COUNT];
    let site_cdf = zipf_cdf(SITE_COUNT, SITE_ZIPF_EXPONENT);

    println!(
        "cardinal demo: {ids_total} users over three audiences, seed {}",
        args.seed
    );
    let mut rng = SplitMix64::new(args.seed);
    let started = Instant::now();
    let mut events = 0u64;
    for index in 0..ids_total {
        let user_id = id_of(index, args.seed);
        // Hash once; every sketch gets the same 64-bit hash.
        let user_hash = hash::user_id(user_id);
        for (audience, range) in audiences.iter_mut().zip([&a_range, &b_range, &c_range]) {
            if range.contains(&index) {
                audience.hll.insert(user_hash);
                audience.theta.insert(user_hash);
                audience.exact.insert(user_id);
            }
        }
        for _ in 0..1 + rng.next() % IMPRESSIONS_PER_USER_MAX {
            let u = rng.unit();
            let site = site_cdf.partition_point(|&p| p < u);
            let revenue = (-1.0 + 1.2 * rng.normal()).exp();
            revenue_kll.insert(revenue);
            revenue_cm.insert(revenue_cents(revenue), 1);
            sites.insert(site as u64, 1);
            site_truth[site] += 1;
            revenue_truth.push(revenue);
            events += 1;
        }
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    println!(
        "folded {events} impressions into 3 HLL + 3 Theta + 3 exact sets, KLL, dyadic Count-Min \
         and heavy hitters in {ingest_secs:.2} s ({:.1} M events/s, one core)\n",
        events as f64 / ingest_secs / 1e6
    );

    print_reach(&audiences);
    print_overlaps(&audiences)?;
    print_expressions(&audiences)?;
    print_quantiles(&mut revenue_truth, &revenue_kll, &revenue_cm);
    print_top_sites(&sites, &site_truth);
    print_speed(args.seed);
    print_postgres_hint()?;
    Ok(())
}

fn print_reach(audiences: &[Audience]) {
    println!("REACH: unique users per audience (HLL log2m 13 regwidth 6; Theta lg_k 12)");
    println!(
        "  {:<11} {:>10} {:>30} {:>7} {:>6} {:>30}",
        "audience",
        "true",
        "HLL estimate (95% interval)",
        "error",
        "bytes",
        "Theta estimate (95% bounds)"
    );
    for a in audiences {
        let truth = a.exact.len() as f64;
        let e = a.hll.estimate();
        println!(
            "  {:<11} {:>10} {:>30} {:>6.2}% {:>6} {:>30}",
            a.name,
            a.exact.len(),
            interval(&e),
            100.0 * (e.value / truth - 1.0),
            a.hll.encode().len(),
            interval(&a.theta.estimate()),
        );
    }
    println!();
}

fn print_overlaps(audiences: &[Audience]) -> Result<()> {
    println!("OVERLAP: |X ∩ Y| from two HLLs by joint maximum likelihood (Ertl 2017)");
    println!(
        "  {:<7} {:>9} {:>32} {:>8} {:>22} {:>8}",
        "pair", "true", "joint MLE (95% interval)", "error", "inclusion-exclusion", "error"
    );
    for (i, j) in [(0, 1), (0, 2), (1, 2)] {
        let (x, y) = (&audiences[i], &audiences[j]);
        let truth = x.exact.intersection(&y.exact).len() as f64;
        let overlap = x.hll.intersection(&y.hll).context("intersection")?;
        let e = overlap.intersection;
        let shown = if e.below_detection_limit() {
            format!("below detection ({:.0}..{:.0})", e.lower, e.upper)
        } else {
            interval(&e)
        };
        println!(
            "  {:<7} {:>9} {:>32} {:>7.1}% {:>22.0} {:>7.1}%",
            format!("{}∩{}", letter(i), letter(j)),
            truth,
            shown,
            100.0 * (e.value / truth - 1.0),
            overlap.inclusion_exclusion,
            100.0 * (overlap.inclusion_exclusion / truth - 1.0),
        );
    }
    println!();
    Ok(())
}

fn print_expressions(audiences: &[Audience]) -> Result<()> {
    let [a, b, c] = audiences else {
        unreachable!("three audiences")
    };
    println!("EXPRESSIONS over three audiences (Theta sketches, lg_k 12, vs exact Roaring sets)");
    let abc = Theta::intersection(&[&a.theta, &b.theta, &c.theta])?;
    let abc_truth = a.exact.intersection(&b.exact).intersection(&c.exact).len();
    let a_not_b = a.theta.a_not_b(&b.theta)?;
    let a_not_b_truth = a.exact.difference(&b.exact).len();
    let union = Theta::union(&[&a.theta, &b.theta, &c.theta])?;
    let union_truth = a.exact.union(&b.exact).union(&c.exact).len();
    for (name, truth, e) in [
        ("A ∩ B ∩ C", abc_truth, abc.estimate()),
        ("A \\ B", a_not_b_truth, a_not_b.estimate()),
        ("A ∪ B ∪ C", union_truth, union.estimate()),
    ] {
        println!(
            "  {name:<10} true {truth:>9}   estimate {:>30}",
            interval(&e)
        );
    }
    println!();
    Ok(())
}

fn print_quantiles(truth: &mut [f64], kll: &Quantiles, cm: &DyadicCountMin) {
    truth.sort_by(f64::total_cmp);
    let n = truth.len() as f64;
    // The share of true values at or below `x`: how a quantile answer's rank
    // error is judged.
    let true_rank = |x: f64| truth.partition_point(|&v| v <= x) as f64 / n;
    println!(
        "REVENUE QUANTILES over {} impressions: KLL k=200 ({} bytes, rank error ±{:.2}%) and \
         dyadic Count-Min by binary search over range counts ({} bytes)",
        truth.len(),
        kll.encode().len(),
        100.0 * kll.rank_error(),
        cm.encode().len()
    );
    println!(
        "  {:>5} {:>9} {:>9} {:>11} {:>10} {:>11}",
        "rank", "true", "KLL", "(its rank)", "Count-Min", "(its rank)"
    );
    for rank in [0.25, 0.5, 0.9, 0.99] {
        let index = rank_index(truth.len(), rank);
        let kll_value = kll.quantile(rank).unwrap_or(f64::NAN);
        let cm_value = cm
            .quantile(rank)
            .map_or(f64::NAN, |cents| cents as f64 / 100.0);
        println!(
            "  {:>5} {:>9.4} {:>9.4} {:>11.4} {:>10.2} {:>11.4}",
            format!("p{}", rank * 100.0),
            truth[index],
            kll_value,
            true_rank(kll_value),
            cm_value,
            true_rank(cm_value),
        );
    }
    println!();
}

fn print_top_sites(sites: &HeavyHitters, truth: &[u64]) {
    println!(
        "TOP SITES by impressions (Count-Min heavy hitters, {} bytes)",
        sites.encode().len()
    );
    let mut exact: Vec<(usize, u64)> = truth.iter().copied().enumerate().collect();
    exact.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    println!(
        "  {:>4} {:>8} {:>10} {:>8} {:>10}",
        "rank", "true", "count", "sketch", "estimate"
    );
    for (rank, (hit, (site, count))) in sites.top(5).iter().zip(exact).enumerate() {
        println!(
            "  {:>4} {:>8} {:>10} {:>8} {:>10.0}",
            rank + 1,
            format!("site{site}"),
            count,
            format!("site{}", hit.key),
            hit.estimate.value
        );
    }
    println!();
}

fn print_speed(seed: u64) {
    const INSERTS: u64 = 20_000_000;
    let mut hll = Hll::default();
    let started = Instant::now();
    for i in 0..INSERTS {
        hll.insert(hash::user_id(i ^ seed));
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "SPEED: hash + HLL insert of {INSERTS} ids: {:.0} M ids/s on one core (estimate {:.0})\n",
        INSERTS as f64 / secs / 1e6,
        hll.estimate().value
    );
}

fn print_postgres_hint() -> Result<()> {
    let mut hll = Hll::default();
    for id in 1..=3 {
        hll.insert(hash::bigint(id, 0));
    }
    let mut hint = String::new();
    writeln!(
        hint,
        "POSTGRESQL: the bytes are postgresql-hll's. The audience {{1, 2, 3}} is"
    )?;
    writeln!(
        hint,
        "  SELECT hll_cardinality('{}'::hll);  -- 3",
        hll.to_hex()
    )?;
    writeln!(
        hint,
        "  (= hll_add_agg(hll_hash_bigint(x)) over x in 1..3; try `cardinal hll --help`)"
    )?;
    print!("{hint}");
    Ok(())
}

fn interval(e: &Estimate) -> String {
    format!("{:.0} ({:.0}..{:.0})", e.value, e.lower, e.upper)
}

fn letter(index: usize) -> char {
    ['A', 'B', 'C'][index]
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "saturating float-to-int, then clamped"
)]
fn revenue_cents(revenue: f64) -> u64 {
    let max = (1u64 << REVENUE_DOMAIN_BITS) - 1;
    ((revenue * 100.0).round() as u64).min(max)
}

/// The index of the `rank` quantile in `len` sorted values.
#[expect(
    clippy::cast_possible_truncation,
    reason = "0 <= len * rank < len, floored"
)]
fn rank_index(len: usize, rank: f64) -> usize {
    assert!((0.0..=1.0).contains(&rank), "rank in [0, 1]");
    ((len as f64 * rank) as usize).min(len - 1)
}

/// Cumulative Zipf weights over `n` items, normalised to end at 1.
fn zipf_cdf(n: usize, exponent: f64) -> Vec<f64> {
    let mut cdf: Vec<f64> = (1..=n).map(|rank| (rank as f64).powf(-exponent)).collect();
    let mut sum = 0.0;
    for p in &mut cdf {
        sum += *p;
        *p = sum;
    }
    for p in &mut cdf {
        *p /= sum;
    }
    cdf
}
