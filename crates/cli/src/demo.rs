//! `cardinal demo`: the engine end to end on generated ad events, every
//! answer next to the exact truth.
//!
//! ```text
//!  cardinal-gen ──► DIR/impressions.csv + exact truth (in memory, truth.json)
//!  cardinal run DIR/schema.sql DIR/impressions.csv --out DIR   (all cores)
//!  print: reach, audiences, overlaps, quantiles, top sites, throughput
//! ```
//!
//! The schema is `demo/schema.sql`, embedded and written to `DIR` so the
//! run can be repeated by hand. The engine is the one `cardinal run` uses
//! ([`run::execute`]); the demo only reads its merged rollups. The generator
//! counts the truth exactly (bitsets over user indexes) while it writes, so
//! every estimate is printed with its 95% interval, the true value and the
//! error.
//!
//! `cardinal demo sketches` is the older tour of each sketch on its own
//! (Theta set expressions, Count-Min quantiles, raw insert speed).

mod sketches;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use cardinal_export::Results;
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig, PROVIDERS, STATES, Truth};
use cardinal_gen::text::Date;
use cardinal_rollup::{AggKind, AggState, Output};
use cardinal_route::{OutputSource, Plan, Summary};
use cardinal_sketch::Estimate;

use crate::progress;
use cardinal_engine::{EngineOptions, Executed};

use crate::run;

/// The demo's declarations.
const SCHEMA: &str = include_str!("demo/schema.sql");

/// Fewer events than this leave most (day, state) groups nearly empty.
const EVENTS_MIN: u64 = 10_000;
/// Users per event when `--users` is not given: `cardinal gen`'s default
/// ratio (10M events over 1M users), so most users are seen a few times.
const EVENTS_PER_USER: u64 = 10;
/// Fresh directories tried under the system temp dir before giving up.
const TEMP_DIR_ATTEMPTS_MAX: u32 = 100;
/// States shown in the reach table: the largest, a middling and the
/// smallest, so the error bars' width can be seen to follow the counts.
const REACH_STATES: [&str; 3] = ["CA", "KY", "WY"];
/// Sites shown in the top-sites table.
const TOP_SITES_SHOWN: usize = 5;
/// Campaigns listed under credited conversions, most credited first.
const CAMPAIGNS_SHOWN: usize = 8;

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:
  cardinal demo                              10M events; about 20 s on 2 cores
  cardinal demo --events 1000000 --out demo/ keep the per-day files in ./demo
  cardinal demo --keep-events --out demo/ && cardinal run demo/schema.sql demo/impressions.csv
  cardinal demo sketches                     every sketch on its own, next to exact sets"
)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Rows to generate (impressions, clicks and conversions together).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Distinct users events are drawn from (default: events / 10).
    #[arg(long)]
    users: Option<u64>,
    /// Days the events cover.
    #[arg(long, default_value_t = 30)]
    days: u32,
    /// Seed of the generator: the same seed gives the same events.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory for the schema, the truth and the per-day files (default: a
    /// fresh `cardinal-demo-*` directory under the system temp dir).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Engine worker threads, 1 to 256 (default: the number of cores).
    #[arg(long, value_parser = run::threads_arg)]
    threads: Option<usize>,
    /// Keep the generated `impressions.csv` (about 87 bytes per event).
    #[arg(long)]
    keep_events: bool,
    /// Never draw the progress line (it is drawn only when stderr is a
    /// terminal).
    #[arg(long)]
    no_progress: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Every sketch on its own (HLL, Theta, KLL, Count-Min, exact sets) on
    /// three generated audiences, next to the truth.
    Sketches(sketches::Args),
}

pub fn run(args: &Args) -> Result<()> {
    if let Some(Command::Sketches(args)) = &args.command {
        return sketches::run(args);
    }
    ensure!(
        args.events >= EVENTS_MIN,
        "--events must be at least {EVENTS_MIN} for the answers to mean anything"
    );
    let users = args.users.unwrap_or(args.events / EVENTS_PER_USER).max(1);
    let dir = match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.clone()
        }
        None => fresh_temp_dir()?,
    };
    let schema_path = dir.join("schema.sql");
    let events_path = dir.join("impressions.csv");
    std::fs::write(&schema_path, SCHEMA)
        .with_context(|| format!("writing {}", schema_path.display()))?;
    let threads = args
        .threads
        .unwrap_or_else(cardinal_engine::threads_default);
    println!(
        "cardinal demo: {} ad events over {} users and {} days (seed {}), in {}\n",
        thousands(args.events),
        thousands(users),
        args.days,
        args.seed,
        dir.display()
    );

    // 1. Generate, counting the exact answers on the way.
    let generator = Impressions::new(ImpressionsConfig {
        events: args.events,
        users,
        days: args.days,
        seed: args.seed,
        format: Format::Csv,
        start: ImpressionsConfig::default().start,
    })?;
    let started = Instant::now();
    let file = std::fs::File::create(&events_path)
        .with_context(|| format!("creating {}", events_path.display()))?;
    let (written, truth) = generator
        .write_with_truth(file)
        .with_context(|| format!("writing {}", events_path.display()))?;
    let generate_secs = started.elapsed().as_secs_f64();
    std::fs::write(dir.join("truth.json"), truth.to_json()).context("writing truth.json")?;

    // 2. The engine: every summary, all cores, merged; then the files.
    let plan = Plan::compile(SCHEMA).map_err(|e| anyhow::anyhow!("demo schema:\n{e}"))?;
    let options = EngineOptions::new(threads, crate::memory::memory_max_default());
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let executed = run::execute(&plan, std::slice::from_ref(&events_path), &options, show)?;
    let started = Instant::now();
    let files = run::write_files(&executed, &dir, cardinal_export::Options::default())?;
    let files_secs = started.elapsed().as_secs_f64();
    if !args.keep_events {
        std::fs::remove_file(&events_path)
            .with_context(|| format!("removing {}", events_path.display()))?;
    }

    // 3. The answers, next to the truth.
    let start = generator.config().start;
    print_reach(&executed, &truth, start)?;
    let audience = print_audiences(&executed, &truth)?;
    print_overlaps(&audience, &truth)?;
    print_quantiles(&executed)?;
    print_top_sites(&executed)?;
    print_attribution(&executed)?;
    print_throughput(
        &executed,
        written.rows,
        written.bytes,
        generate_secs,
        files_secs,
    );
    print_files(&dir, &files, args.keep_events);
    Ok(())
}

/// A new, empty `cardinal-demo-<pid>[-n]` directory under the temp dir.
fn fresh_temp_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    let pid = std::process::id();
    for attempt in 0..TEMP_DIR_ATTEMPTS_MAX {
        let name = match attempt {
            0 => format!("cardinal-demo-{pid}"),
            n => format!("cardinal-demo-{pid}-{n}"),
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    bail!(
        "no free cardinal-demo-{pid}-* name under {} after {TEMP_DIR_ATTEMPTS_MAX} tries; pass --out",
        base.display()
    )
}

/// One summary's merged results, with its aggregates looked up by name.
struct Answer<'a> {
    summary: &'a Summary,
    kinds: &'a [AggKind],
    results: Results<'a>,
}

impl<'a> Answer<'a> {
    fn of(executed: &'a Executed<'_>, name: &str) -> Result<Self> {
        let (summary, rollup) = executed
            .rollup(name)
            .with_context(|| format!("the demo schema has no summary {name}"))?;
        Ok(Self {
            summary,
            kinds: &rollup.shape().aggs,
            results: run::results_of(summary, rollup)?,
        })
    }

    /// The index of the aggregate called `name` (its `AS` name).
    fn aggregate(&self, name: &str) -> Result<usize> {
        self.summary
            .outputs
            .iter()
            .find_map(|o| match o.source {
                OutputSource::Aggregate(i) if o.name == name => Some(i),
                _ => None,
            })
            .with_context(|| format!("summary {} has no aggregate {name}", self.summary.name))
    }

    /// The answer of aggregate `index` for one row's states.
    fn output(&self, states: &[AggState], index: usize) -> Output {
        cardinal_rollup::output_of(states, self.kinds, index)
    }
}

fn print_reach(executed: &Executed<'_>, truth: &Truth, start: Date) -> Result<()> {
    let reach = Answer::of(executed, "reach")?;
    let (impressions, revenue, users) = (
        reach.aggregate("impressions")?,
        reach.aggregate("revenue")?,
        reach.aggregate("users")?,
    );
    let days = truth.by_state_by_day.len();
    let shown_days = [0, days / 2, days - 1];
    println!("REACH: unique users by state by day (hll(user_id), 95% interval) vs the truth");
    println!(
        "  {:<10}  {:<5}  {:>11}  {:>9}  {:>26}  {:>8}  {:>6}",
        "day", "state", "impressions", "revenue", "users (95% interval)", "true", "error"
    );
    let mut inside = 0usize;
    let mut groups = 0usize;
    let mut errors: Vec<f64> = Vec::new();
    let mut revenue_total = 0.0;
    for row in reach.results.rows() {
        let day = day_index(row.bucket, start)?;
        let state = reach.results.dims(row).get(0).unwrap_or("NULL");
        let state_index = STATES
            .iter()
            .position(|&(name, _)| name == state)
            .with_context(|| format!("state {state} is not one the generator writes"))?;
        let true_users = truth.by_state_by_day[day][state_index];
        let Output::Estimate(estimate) = reach.output(row.states, users) else {
            bail!("reach.users is not an estimate");
        };
        if let Output::Number(Some(r)) = reach.output(row.states, revenue) {
            revenue_total += r;
        }
        groups += 1;
        inside += usize::from(contains(&estimate, true_users));
        errors.push(relative_error(estimate.value, true_users).abs());
        if shown_days.contains(&day) && REACH_STATES.contains(&state) {
            let Output::Count(count) = reach.output(row.states, impressions) else {
                bail!("reach.impressions is not a count");
            };
            let dollars = match reach.output(row.states, revenue) {
                Output::Number(Some(r)) => format!("${r:.2}"),
                _ => "NULL".into(),
            };
            println!(
                "  {:<10}  {:<5}  {:>11}  {:>9}  {:>26}  {:>8}  {:>6}",
                Date(start.0 + day as i64).to_iso_string(),
                state,
                thousands(count),
                dollars,
                interval(&estimate),
                thousands(true_users),
                percent(relative_error(estimate.value, true_users)),
            );
        }
    }
    errors.sort_by(f64::total_cmp);
    let median = errors.get(errors.len() / 2).copied().unwrap_or(0.0);
    let true_revenue = truth.revenue_micros_by_kind[0] as f64 / 1e6;
    println!(
        "  all {groups} (day, state) groups: the truth is inside the 95% interval in {inside} \
         ({:.1}%); median |error| {:.2}%",
        100.0 * inside as f64 / groups.max(1) as f64,
        100.0 * median
    );
    println!(
        "  revenue over all groups {} (true {})\n",
        dollars(revenue_total),
        dollars(true_revenue)
    );
    Ok(())
}

/// Each provider's all-days audience HyperLogLog, in [`PROVIDERS`] order.
fn print_audiences(
    executed: &Executed<'_>,
    truth: &Truth,
) -> Result<Vec<cardinal_sketch::hll::Hll>> {
    let audience = Answer::of(executed, "audience")?;
    let users = audience.aggregate("users")?;
    let mut by_name: BTreeMap<&str, &cardinal_sketch::hll::Hll> = BTreeMap::new();
    for row in audience.results.rows() {
        let AggState::Hll(hll) = &row.states[users] else {
            bail!("audience.users is not a HyperLogLog");
        };
        by_name.insert(audience.results.dims(row).get(0).unwrap_or("NULL"), hll);
    }
    println!("AUDIENCES: unique users per provider, all days (hll(user_id, 13, 6)) vs the truth");
    println!(
        "  {:<8}  {:>32}  {:>9}  {:>6}",
        "provider", "users (95% interval)", "true", "error"
    );
    let mut hlls = Vec::new();
    for (provider, &true_users) in PROVIDERS.iter().zip(&truth.providers) {
        let hll = by_name
            .get(provider.name)
            .with_context(|| format!("no impressions through {}", provider.name))?;
        let estimate = cardinal_sketch::Sketch::estimate(*hll);
        println!(
            "  {:<8}  {:>32}  {:>9}  {:>6}",
            provider.name,
            interval(&estimate),
            thousands(true_users),
            percent(relative_error(estimate.value, true_users)),
        );
        hlls.push((*hll).clone());
    }
    println!();
    Ok(hlls)
}

fn print_overlaps(audience: &[cardinal_sketch::hll::Hll], truth: &Truth) -> Result<()> {
    println!(
        "OVERLAP: users two providers share, by joint maximum likelihood over their two \
         HyperLogLogs (Ertl 2017)"
    );
    println!(
        "  {:<17}  {:>32}  {:>9}  {:>6}  in 95%",
        "pair", "shared users (95% interval)", "true", "error"
    );
    for &(a, b, true_shared) in &truth.overlaps {
        let overlap = audience[a].intersection(&audience[b]).with_context(|| {
            format!(
                "intersecting {} and {}",
                PROVIDERS[a].name, PROVIDERS[b].name
            )
        })?;
        let e = overlap.intersection;
        let shown = if e.below_detection_limit() {
            format!("below detection (0..{})", thousands_f(e.upper))
        } else {
            interval(&e)
        };
        let error = if true_shared == 0 {
            "-".to_string()
        } else {
            percent(relative_error(e.value, true_shared))
        };
        println!(
            "  {:<17}  {:>32}  {:>9}  {:>6}  {}",
            format!("{} ∩ {}", PROVIDERS[a].name, PROVIDERS[b].name),
            shown,
            thousands(true_shared),
            error,
            if contains(&e, true_shared) {
                "yes"
            } else {
                "NO"
            },
        );
    }
    println!();
    Ok(())
}

fn print_quantiles(executed: &Executed<'_>) -> Result<()> {
    let providers = Answer::of(executed, "providers")?;
    let (impressions, revenue) = (
        providers.aggregate("impressions")?,
        providers.aggregate("revenue")?,
    );
    // Merge each provider's days: quantile sketches merge like the rest.
    let mut merged: BTreeMap<String, (u64, AggState)> = BTreeMap::new();
    for row in providers.results.rows() {
        let name = providers
            .results
            .dims(row)
            .get(0)
            .unwrap_or_default()
            .to_owned();
        let Output::Count(count) = providers.output(row.states, impressions) else {
            bail!("providers.impressions is not a count");
        };
        match merged.get_mut(&name) {
            Some((total, state)) => {
                *total += count;
                state.merge(cardinal_rollup::state_of(
                    row.states,
                    providers.kinds,
                    revenue,
                ))?;
            }
            None => {
                let state = cardinal_rollup::state_of(row.states, providers.kinds, revenue);
                merged.insert(name, (count, state.clone()));
            }
        }
    }
    let mut rank_error = 0.0;
    let mut lines = Vec::new();
    for provider in &PROVIDERS {
        let Some((count, state)) = merged.get(provider.name) else {
            continue;
        };
        let Output::Quantiles {
            values,
            rank_error: e,
        } = state.output(&providers.kinds[revenue])
        else {
            bail!("providers.revenue is not quantiles");
        };
        rank_error = f64::max(rank_error, e);
        let cells: Vec<String> = values
            .iter()
            .map(|(_, v)| v.map_or_else(|| "NULL".to_owned(), |v| format!("${v:.4}")))
            .collect();
        lines.push(format!(
            "  {:<8}  {:>11}  {}",
            provider.name,
            thousands(*count),
            cells
                .iter()
                .map(|c| format!("{c:>9}"))
                .collect::<Vec<_>>()
                .join("  ")
        ));
    }
    println!(
        "REVENUE QUANTILES per impression by provider, the days' KLL sketches merged \
         (rank error ±{:.2}%)",
        100.0 * rank_error
    );
    println!(
        "  {:<8}  {:>11}  {:>9}  {:>9}  {:>9}",
        "provider", "impressions", "p50", "p90", "p99"
    );
    for line in lines {
        println!("{line}");
    }
    println!();
    Ok(())
}

fn print_top_sites(executed: &Executed<'_>) -> Result<()> {
    let top = Answer::of(executed, "top_sites")?;
    let (impressions, sites) = (top.aggregate("impressions")?, top.aggregate("sites")?);
    let mut merged: Option<AggState> = None;
    let mut total = 0u64;
    for row in top.results.rows() {
        if let Output::Count(n) = top.output(row.states, impressions) {
            total += n;
        }
        match &mut merged {
            Some(state) => state.merge(&row.states[sites])?,
            None => merged = Some(row.states[sites].clone()),
        }
    }
    let Some(state) = merged else {
        bail!("no rows in top_sites");
    };
    let Output::TopK(items) = state.output(&top.kinds[sites]) else {
        bail!("top_sites.sites is not a top-k");
    };
    println!("TOP SITES over all days (topk(site, 10) per day, merged; Count-Min heavy hitters)");
    println!(
        "  {:>4}  {:<8}  {:>32}  {:>6}",
        "rank", "site", "impressions (95% interval)", "share"
    );
    for (rank, (name, estimate)) in items.iter().take(TOP_SITES_SHOWN).enumerate() {
        println!(
            "  {:>4}  {:<8}  {:>32}  {:>5.1}%",
            rank + 1,
            String::from_utf8_lossy(name),
            interval(estimate),
            100.0 * estimate.value / total.max(1) as f64,
        );
    }
    println!();
    Ok(())
}

fn print_attribution(executed: &Executed<'_>) -> Result<()> {
    let credit = Answer::of(executed, "by_campaign")?;
    let (conversions, revenue, touches) = (
        credit.aggregate("conversions")?,
        credit.aggregate("revenue")?,
        credit.aggregate("touches")?,
    );
    let stats = executed
        .credits
        .first()
        .map(|c| c.stats)
        .context("the demo schema declares an attribution")?;
    println!(
        "CREDITED CONVERSIONS by campaign (CREATE ATTRIBUTION credit: linear over clicks, 30-day lookback; exact)"
    );
    println!(
        "  {} conversions, {} of them with no click in the window; {} clicks kept in per-user chains",
        thousands(stats.conversions),
        thousands(stats.conversions_uncredited),
        thousands(stats.touches),
    );
    println!(
        "  {:<12}  {:>11}  {:>12}  {:>8}",
        "campaign", "conversions", "revenue", "touches"
    );
    let mut rows: Vec<(String, f64, f64, u64)> = credit
        .results
        .rows()
        .iter()
        .map(|row| {
            let number = |i| match credit.output(row.states, i) {
                Output::Number(Some(x)) => x,
                Output::Count(n) => n as f64,
                _ => 0.0,
            };
            let name = credit.results.dims(row).get(0).unwrap_or("NULL").to_owned();
            let touches = match credit.output(row.states, touches) {
                Output::Count(n) => n,
                _ => 0,
            };
            (name, number(conversions), number(revenue), touches)
        })
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (name, conversions, revenue, touches) in rows.iter().take(CAMPAIGNS_SHOWN) {
        println!(
            "  {name:<12}  {conversions:>11.2}  {:>12}  {:>8}",
            dollars(*revenue),
            thousands(*touches)
        );
    }
    if rows.len() > CAMPAIGNS_SHOWN {
        println!("  ... {} more campaigns", rows.len() - CAMPAIGNS_SHOWN);
    }
    println!();
    Ok(())
}

fn print_throughput(
    executed: &Executed<'_>,
    rows: u64,
    bytes: u64,
    generate_secs: f64,
    files_secs: f64,
) {
    let counts = &executed.counts;
    let engine_secs = executed.elapsed_secs.max(1e-9);
    let generate = generate_secs.max(1e-9);
    println!("THROUGHPUT");
    println!(
        "  generate  {:>12} rows  {:>8}  in {:>6.2} s  {:>9} events/s  {:>9}/s  1 thread, exact truth counted",
        thousands(rows),
        progress::bytes(bytes),
        generate_secs,
        progress::count(rows as f64 / generate),
        progress::bytes(rate(bytes, generate)),
    );
    println!(
        "  engine    {:>12} rows  {:>8}  in {:>6.2} s  {:>9} events/s  {:>9}/s  {} thread(s), {} summaries, {} rejected",
        thousands(counts.records),
        progress::bytes(counts.bytes),
        executed.elapsed_secs,
        progress::count(counts.records as f64 / engine_secs),
        progress::bytes(rate(counts.bytes, engine_secs)),
        executed.threads,
        executed.summaries.len(),
        counts.rejects,
    );
    println!(
        "  files     written in {files_secs:.2} s; wall time {:.1} s in all\n",
        generate_secs + executed.elapsed_secs + files_secs
    );
    for line in run::drop_lines(executed) {
        println!("  {line}");
    }
}

fn print_files(dir: &Path, files: &[(String, Vec<PathBuf>)], kept_events: bool) {
    println!("FILES under {}", dir.display());
    for (summary, paths) in files {
        let first = paths
            .first()
            .and_then(|p| p.file_name())
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let more = if paths.len() > 1 {
            format!(" .. ({} files, one per day)", paths.len())
        } else {
            String::new()
        };
        println!("  {summary}/{first}{more}");
    }
    println!("  schema.sql, truth.json");
    if kept_events {
        println!(
            "  impressions.csv: run it again with\n    cardinal run {} {}",
            dir.join("schema.sql").display(),
            dir.join("impressions.csv").display()
        );
    } else {
        println!("  (impressions.csv removed; --keep-events keeps it for `cardinal run`)");
    }
}

/// The index of the day a bucket starts, counted from `start`.
fn day_index(bucket: cardinal_event::Timestamp, start: Date) -> Result<usize> {
    const DAY_MS: i64 = 86_400_000;
    let day = bucket.0.div_euclid(DAY_MS) - start.0;
    usize::try_from(day).with_context(|| format!("bucket {bucket} is before the first day"))
}

fn contains(e: &Estimate, truth: u64) -> bool {
    let t = truth as f64;
    e.lower <= t && t <= e.upper
}

fn relative_error(estimate: f64, truth: u64) -> f64 {
    if truth == 0 {
        0.0
    } else {
        estimate / truth as f64 - 1.0
    }
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "a non-negative byte rate far below 2^64"
)]
fn rate(bytes: u64, secs: f64) -> u64 {
    (bytes as f64 / secs).round() as u64
}

fn percent(fraction: f64) -> String {
    format!("{:+.1}%", 100.0 * fraction)
}

/// `12,345 (12,001..12,702)`.
fn interval(e: &Estimate) -> String {
    format!(
        "{} ({}..{})",
        thousands_f(e.value),
        thousands_f(e.lower),
        thousands_f(e.upper)
    )
}

/// `$29,671.41`: dollars and cents with thousands separators.
#[expect(
    clippy::cast_possible_truncation,
    reason = "saturating float-to-int of a non-negative amount in cents"
)]
fn dollars(amount: f64) -> String {
    let cents = (amount.max(0.0) * 100.0).round() as u64;
    format!("${}.{:02}", thousands(cents / 100), cents % 100)
}

/// A count rounded to an integer, with thousands separators.
#[expect(
    clippy::cast_possible_truncation,
    reason = "saturating float-to-int of a non-negative count"
)]
fn thousands_f(n: f64) -> String {
    thousands(n.max(0.0).round() as u64)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(72_565), "72,565");
        assert_eq!(thousands(10_000_000), "10,000,000");
        assert_eq!(thousands_f(-0.4), "0");
        assert_eq!(thousands_f(1_234.6), "1,235");
        assert_eq!(dollars(29_671.414), "$29,671.41");
        assert_eq!(dollars(0.005), "$0.01");
    }

    #[test]
    fn days_count_from_the_first() {
        let start = Date::new(2026, 11, 1);
        let second = cardinal_event::Timestamp((start.0 + 1) * 86_400_000);
        assert_eq!(day_index(second, start).expect("after start"), 1);
        let before = cardinal_event::Timestamp((start.0 - 1) * 86_400_000);
        assert!(day_index(before, start).is_err());
    }

    #[test]
    fn the_embedded_schema_compiles_with_the_summaries_the_demo_reads() {
        let plan = Plan::compile(SCHEMA).expect("demo schema compiles");
        let names: Vec<&str> = plan.summaries.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["reach", "providers", "top_sites", "audience", "by_campaign"]
        );
    }
}
