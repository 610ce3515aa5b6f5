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
//! ([`run::execute`], over [`cardinal_engine::execute`]); the demo only reads its merged rollups. The generator
//! counts the truth exactly (bitsets over user indexes) while it writes, so
//! every estimate is printed with its 95% interval, the true value and the
//! error.
//!
//! `cardinal demo sketches` is the older tour of each sketch on its own
//! (Theta set expressions, Count-Min quantiles, raw insert speed).

mod answers;
mod serve;
mod sketches;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig};
use cardinal_route::Plan;

use cardinal_engine::EngineOptions;

use crate::run;
use answers::{
    print_attribution, print_audiences, print_files, print_overlaps, print_quantiles, print_reach,
    print_throughput, print_top_sites, thousands,
};

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
  cardinal demo                              10M events; about 6 s on 2 cores
  cardinal demo --events 1000000 --out demo/ keep the per-day files in ./demo
  cardinal demo sketches                     every sketch on its own, next to exact sets
  cardinal demo serve                        send into serve, kill -9 midway, nothing lost"
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
    /// The durable service end to end on loopback: `cardinal send` into
    /// `cardinal serve`, the server killed with SIGKILL midway and started
    /// again, the answers beside the truth.
    Serve(serve::Args),
}

pub fn run(args: &Args) -> Result<()> {
    match &args.command {
        Some(Command::Sketches(args)) => return sketches::run(args),
        Some(Command::Serve(args)) => return serve::run(args, SCHEMA),
        None => {}
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
#[cfg(test)]
mod tests {
    use super::*;

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
