//! The `cardinal` binary: flags, wiring and output. Everything it computes
//! comes from the library crates; this file only turns user input into typed
//! values, calls them, and prints.

mod demo;
// `gen` is a reserved word in Rust 2024; the file keeps the verb's name.
#[path = "gen.rs"]
mod generate;
mod hll;
mod interrupt;
mod memory;
mod progress;
mod run;
mod send;
mod serve;

use clap::{Parser, Subcommand};

/// Largest allocation glibc's malloc serves from its heap rather than a
/// mapping of its own: its maximum (half its 64 MiB heap size).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: libc::c_int = 32 << 20;

/// Free memory at the top of the heap that glibc's malloc keeps instead of
/// returning it to the kernel.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD_BYTES: libc::c_int = 1 << 30;

/// Keeps memory the process frees for its next allocations instead of
/// handing it back to the kernel, which zeroes and maps it again page by
/// page when it is asked for once more (a Parquet reader allocates and
/// frees each page's buffers; a rollup grows in blocks). With glibc's
/// defaults a one-worker Query 2A from Parquet took 130K page faults and
/// 0.31 s of system time in 1.8 CPU-s; with these, 108K and 0.27 s, about
/// 2% of its CPU time. The cost: memory freed at a peak stays with the
/// process (for its own reuse). Other allocators and platforms are left
/// alone.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // any other thread exists, and both values are in its documented
    // range (it returns 0 and changes nothing otherwise).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}

/// cardinal: a streaming rollup engine with error bars.
///
/// Sketches answer "how many unique users", "how much do two audiences
/// overlap", "what is the p99" in bounded memory, each with its 95%
/// interval. HyperLogLogs are byte-compatible with postgresql-hll.
#[derive(Debug, Parser)]
#[command(name = "cardinal", version, propagate_version = true)]
#[command(after_help = "Start here, in a checkout (the README's two commands):
  cargo run --release -- demo     10M generated ad events through the engine,
                                  every answer next to the truth (~6 s on 2 cores)
  cargo test --workspace          the tests

Examples:
  cardinal demo --events 1000000 --out demo/
  cardinal gen impressions --events 1000000 -o imp.csv --truth truth.json
  cardinal run demo/schema.sql imp.csv --out results/
  seq 1 100000 | cardinal hll build

`cardinal <command> --help` shows each command's flags and examples.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate ad events, run them through the engine, and print every answer
    /// next to the exact truth.
    ///
    /// The demo generates impressions with `cardinal gen`'s model (the exact
    /// answers counted on the way), writes its schema to the output directory
    /// and runs it with `cardinal run`'s engine on every core: reach by
    /// state by day, provider audiences and their pairwise overlaps,
    /// revenue quantiles and top sites, each estimate with its 95%
    /// interval, the true value and the error; then the per-day files and
    /// the throughput.
    Demo(demo::Args),
    /// Generate synthetic inputs, deterministic for a seed: ad impressions
    /// with their exact answers, or the AMPLab tables.
    #[command(
        subcommand,
        after_help = "Examples:
  cardinal gen impressions --events 1000000 -o imp.csv --truth truth.json
  cardinal gen uservisits --rows 100000 -o uservisits.txt
  cardinal gen rankings --rows 3 --seed 7"
    )]
    Gen(generate::Command),
    /// Fold input files into the summaries a SQL schema declares; print or
    /// write them with their error bars.
    ///
    /// The schema holds CREATE STREAM and CREATE SUMMARY statements
    /// (docs/sql.md). Every input is read once, on every core; each record is
    /// folded into every summary of its stream.
    Run(run::Args),
    /// Build, inspect, union and intersect HyperLogLogs as postgresql-hll
    /// hex.
    ///
    /// Values are `\x...` hex, as `SELECT hll_cardinality('\x...'::hll)`
    /// reads them.
    #[command(
        subcommand,
        after_help = "Examples:
  seq 1 100000 | cardinal hll build
  cardinal hll inspect '\\x128B7F004403B7FB05C44A'
  cardinal hll overlap \"$(seq 1 60000 | cardinal hll build)\" \"$(seq 40001 100000 | cardinal hll build)\""
    )]
    Hll(hll::Command),
    Serve(Box<serve::ServeArgs>),
    Query(serve::QueryArgs),
    /// Send CSV or NDJSON files to a `cardinal serve` over its native
    /// protocol; exit 0 only when every batch was acknowledged.
    ///
    /// Records go in batches of whole records, a window of them in flight;
    /// each is acknowledged once the server has made it durable. A lost
    /// connection is retried with backoff and every unacknowledged batch is
    /// resent: the server counts a resent batch once. The protocol is in
    /// docs/protocol.md.
    Send(send::Args),
}

fn main() {
    keep_freed_memory();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Gen(command) => generate::run(command),
        Command::Hll(command) => hll::run(command),
        Command::Serve(args) => serve::serve(&args),
        Command::Query(args) => serve::query(&args),
        Command::Run(args) => match run::run(&args) {
            Ok(0) => Ok(()),
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Send(args) => match send::run(&args) {
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
        eprintln!("error: {}", chain_text(&error));
        std::process::exit(1);
    }
}

/// An error and its causes joined by ": ", as `{:#}` joins them, saying
/// each thing once: our errors show their source in their own message
/// (`bad.gz: incomplete deflate stream`) and name their input, so a cause
/// the line already ends with is left out, and so is the input's name at
/// the start of a cause when the line before ends with it (`reading
/// bad.gz`).
fn chain_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.is_empty() {
            text = cause;
            continue;
        }
        if text.ends_with(&cause) {
            continue;
        }
        let name = text.rsplit(' ').next().unwrap_or_default();
        let rest = cause
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(": "))
            .filter(|_| !name.is_empty())
            .unwrap_or(&cause);
        text.push_str(": ");
        text.push_str(rest);
    }
    text
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn error_lines_say_each_cause_once() {
        let io = std::io::Error::other("incomplete deflate stream");
        let inner = anyhow::Error::new(io).context("bad.gz: incomplete deflate stream");
        let error = inner.context("reading bad.gz");
        assert_eq!(
            super::chain_text(&error),
            "reading bad.gz: incomplete deflate stream"
        );
        let plain = anyhow::anyhow!("no such file").context("opening x.csv");
        assert_eq!(super::chain_text(&plain), "opening x.csv: no such file");
    }

    /// Every verb teaches by example: its help ends with 2 to 4 of them.
    #[test]
    fn every_verb_has_two_to_four_examples() {
        fn walk(command: &clap::Command, path: &str, checked: &mut Vec<String>) {
            for sub in command.get_subcommands() {
                let path = format!("{path} {}", sub.get_name());
                let help = sub
                    .get_after_help()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let examples = help.split_once("Examples").map_or(0, |(_, list)| {
                    list.lines()
                        .filter(|l| {
                            let l = l.trim_start();
                            ["cardinal ", "seq ", "printf ", "gzip "]
                                .iter()
                                .any(|start| l.starts_with(start))
                        })
                        .count()
                });
                assert!(
                    (2..=4).contains(&examples),
                    "`{path} --help` has {examples} examples:\n{help}"
                );
                checked.push(path.clone());
                walk(sub, &path, checked);
            }
        }
        let mut checked = Vec::new();
        walk(&Cli::command(), "cardinal", &mut checked);
        assert_eq!(checked.len(), 16, "{checked:?}");
    }

    #[test]
    fn the_top_level_help_names_the_readme_commands() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("cargo run --release -- demo"), "{help}");
        assert!(help.contains("cargo test --workspace"), "{help}");
        for verb in ["demo", "gen", "run", "hll"] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(verb))
                .unwrap_or_else(|| panic!("no {verb} line in\n{help}"));
            assert!(line.len() > verb.len() + 10, "{line}");
        }
    }
}
