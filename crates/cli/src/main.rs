//! The `cardinal` binary: flags, wiring and output. Everything it computes
//! comes from the library crates; this file only turns user input into typed
//! values, calls them, and prints.

mod demo;
// `gen` is a reserved word in Rust 2024; the file keeps the verb's name.
#[path = "gen.rs"]
mod generate;
mod hll;
mod progress;
mod run;

use clap::{Parser, Subcommand};

/// cardinal: a streaming rollup engine with error bars.
///
/// Sketches answer "how many unique users", "how much do two audiences
/// overlap", "what is the p99" in bounded memory, each with its 95%
/// interval. HyperLogLogs are byte-compatible with postgresql-hll.
#[derive(Debug, Parser)]
#[command(name = "cardinal", version, propagate_version = true)]
#[command(after_help = "Examples:
  cardinal demo                       run the sketch demo on generated audiences
  cardinal gen impressions -o events.csv --truth truth.json
                                      10M ad events and their exact answers
  seq 1 100000 | cardinal hll build   count 100,000 ids; print postgresql-hll hex
  cardinal hll inspect '\\x128B7F004403B7FB05C44A'
  cardinal hll overlap A_HEX B_HEX    joint-likelihood intersection with its interval")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate overlapping audiences and answer reach, overlap, quantile and
    /// heavy-hitter questions with every sketch, next to the exact truth.
    Demo(demo::Args),
    /// Generate synthetic data, deterministic for a seed: ad impressions with
    /// their exact answers, or the AMPLab uservisits and rankings tables.
    #[command(subcommand)]
    Gen(generate::Command),
    /// Fold input files into the summaries a schema declares, and print or
    /// write the results with their error bars.
    Run(run::Args),
    /// Build, inspect, union and intersect HyperLogLogs in the postgresql-hll
    /// format (`\x...` hex, as `SELECT hll_cardinality('\x...'::hll)` reads).
    #[command(subcommand)]
    Hll(hll::Command),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Gen(command) => generate::run(command),
        Command::Hll(command) => hll::run(command),
        Command::Run(args) => match run::run(&args) {
            Ok(0) => Ok(()),
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
    };
    if let Err(error) = result {
        // A closed pipe (`cardinal ... | head`) is not a failure.
        if error.chain().any(|cause| {
            cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}
