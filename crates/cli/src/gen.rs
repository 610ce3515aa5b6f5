//! `cardinal gen`: synthetic data for demos, tests and benchmarks.
//!
//! Flags become a typed configuration here; the bytes come from
//! `cardinal-gen`, which writes in large chunks, so the output needs no
//! extra buffering.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cardinal_gen::bdb::{self, BdbConfig};
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig, Kind, PROVIDERS, Truth};
use cardinal_gen::text::Date;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// AK-style ad events (impressions, clicks, conversions) with known
    /// answers: Zipfian users, 50 states, overlapping provider audiences.
    #[command(after_help = "Examples:
  cardinal gen impressions --events 10000000 -o events.csv --truth truth.json
  cardinal gen impressions --events 100000 --users 5000 --days 7 --start 2026-01-01 -o week.csv
  cardinal gen impressions --format json --events 1000 | head -3")]
    Impressions(ImpressionsArgs),
    /// AMPLab Big Data Benchmark `uservisits` rows (no header, Java floats).
    #[command(after_help = "Examples:
  cardinal gen uservisits --rows 20000000 -o uservisits.txt   # ~3.4 GB
  cardinal gen uservisits --rows 3 --seed 7")]
    Uservisits(BdbArgs),
    /// AMPLab Big Data Benchmark `rankings` rows; the same --seed gives the
    /// URLs uservisits visits.
    #[command(after_help = "Examples:
  cardinal gen rankings --rows 1000 -o rankings.txt
  cardinal gen rankings --rows 3 --seed 7")]
    Rankings(BdbArgs),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum FormatArg {
    /// The "v1" CSV with a header.
    Csv,
    /// The "v2" nested NDJSON.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ImpressionsArgs {
    /// Rows to write (impressions, clicks and conversions together).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Distinct users events are drawn from (Zipf-distributed activity).
    #[arg(long, default_value_t = 1_000_000)]
    users: u64,
    /// Days the timestamps cover.
    #[arg(long, default_value_t = 30)]
    days: u32,
    /// The same seed gives the same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Csv)]
    format: FormatArg,
    /// First day (UTC), YYYY-MM-DD.
    #[arg(long, default_value = "2026-11-01")]
    start: String,
    /// Output file; `-` is stdout.
    #[arg(short, long, default_value = "-")]
    output: PathBuf,
    /// Also write the exact answers (uniques per provider, overlaps, uniques
    /// by state by day, revenue, counts) as JSON to this file.
    #[arg(long)]
    truth: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct BdbArgs {
    /// Rows to write.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// The same seed gives the same bytes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Output file; `-` is stdout.
    #[arg(short, long, default_value = "-")]
    output: PathBuf,
}

pub fn run(command: Command) -> Result<()> {
    let started = Instant::now();
    let (bytes, output) = match command {
        Command::Impressions(args) => (impressions(&args)?, args.output),
        Command::Uservisits(args) => {
            let config = BdbConfig {
                rows: args.rows,
                seed: args.seed,
            };
            let bytes = with_output(&args.output, |out| Ok(bdb::write_uservisits(config, out)?))?;
            (bytes, args.output)
        }
        Command::Rankings(args) => {
            let config = BdbConfig {
                rows: args.rows,
                seed: args.seed,
            };
            let bytes = with_output(&args.output, |out| Ok(bdb::write_rankings(config, out)?))?;
            (bytes, args.output)
        }
    };
    if !is_stdout(&output) {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "wrote {bytes} bytes to {} in {secs:.2} s ({:.0} MB/s)",
            output.display(),
            bytes as f64 / secs / 1e6
        );
    }
    Ok(())
}

fn impressions(args: &ImpressionsArgs) -> Result<u64> {
    let config = ImpressionsConfig {
        events: args.events,
        users: args.users,
        days: args.days,
        seed: args.seed,
        format: match args.format {
            FormatArg::Csv => Format::Csv,
            FormatArg::Json => Format::Json,
        },
        start: Date::parse(&args.start).context("reading --start")?,
    };
    let generator = Impressions::new(config)?;
    let Some(truth_path) = &args.truth else {
        return with_output(&args.output, |out| Ok(generator.write(out)?.bytes));
    };
    let (written, truth) = with_output(&args.output, |out| Ok(generator.write_with_truth(out)?))?;
    std::fs::write(truth_path, truth.to_json())
        .with_context(|| format!("writing {}", truth_path.display()))?;
    print_truth(&truth, truth_path);
    Ok(written.bytes)
}

fn print_truth(truth: &Truth, path: &Path) {
    let events: Vec<String> = Kind::ALL
        .iter()
        .map(|k| format!("{} {}", truth.events_by_kind[*k as usize], k.name()))
        .collect();
    eprintln!(
        "truth ({}): {}; revenue ${:.2}",
        path.display(),
        events.join(", "),
        truth.revenue_micros() as f64 / 1e6
    );
    eprintln!(
        "  unique users with impressions {}; by provider: {}",
        truth.users_seen,
        PROVIDERS
            .iter()
            .zip(&truth.providers)
            .map(|(p, n)| format!("{} {n}", p.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let overlaps: Vec<String> = truth
        .overlaps
        .iter()
        .filter(|&&(_, _, n)| n > 0)
        .map(|&(a, b, n)| format!("{}∩{} {n}", PROVIDERS[a].name, PROVIDERS[b].name))
        .collect();
    eprintln!("  overlaps: {}", overlaps.join(", "));
}

fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Runs `write` on stdout or on a new file at `path`.
fn with_output<T>(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<T>) -> Result<T> {
    if is_stdout(path) {
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        return write(&mut lock);
    }
    let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    write(&mut file).with_context(|| format!("writing {}", path.display()))
}
