//! The demo's answers printed beside the truth: each estimate with its
//! 95% interval, the true value and the error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use cardinal_engine::Executed;
use cardinal_export::Results;
use cardinal_gen::impressions::{PROVIDERS, STATES, Truth};
use cardinal_gen::text::Date;
use cardinal_rollup::{AggKind, AggState, Output};
use cardinal_route::{OutputSource, Summary};
use cardinal_sketch::Estimate;

use super::{CAMPAIGNS_SHOWN, REACH_STATES, TOP_SITES_SHOWN};
use crate::{progress, run};

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
            results: cardinal_engine::results_of(summary, rollup)?,
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

pub(super) fn print_reach(executed: &Executed<'_>, truth: &Truth, start: Date) -> Result<()> {
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
pub(super) fn print_audiences(
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

pub(super) fn print_overlaps(audience: &[cardinal_sketch::hll::Hll], truth: &Truth) -> Result<()> {
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

pub(super) fn print_quantiles(executed: &Executed<'_>) -> Result<()> {
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

pub(super) fn print_top_sites(executed: &Executed<'_>) -> Result<()> {
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
    // Count-Min's bounds hold with their own confidence (one-sided,
    // from the sketch's depth), not 95%: the label says which.
    let confidence = items.first().map_or(0.95, |(_, e)| e.confidence);
    println!(
        "  {:>4}  {:<8}  {:>32}  {:>6}",
        "rank",
        "site",
        if confidence >= 1.0 {
            "impressions (exact)".to_owned()
        } else {
            format!("impressions ({:.1}% bounds)", 100.0 * confidence)
        },
        "share"
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

pub(super) fn print_attribution(executed: &Executed<'_>) -> Result<()> {
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

pub(super) fn print_throughput(
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

pub(super) fn print_files(dir: &Path, files: &[(String, Vec<PathBuf>)], kept_events: bool) {
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
pub(super) fn thousands(n: u64) -> String {
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
}
