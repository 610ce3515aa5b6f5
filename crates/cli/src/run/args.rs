//! The flags of `cardinal run`.

use std::path::PathBuf;

use cardinal_engine::THREADS_MAX;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples (the schemas are in a checkout; `cardinal demo --out DIR` writes one too):
  cardinal gen impressions --events 1000000 -o imp.csv
  cardinal run bench/engine/schemas/impressions.sql imp.csv
  cardinal run bench/engine/schemas/impressions.sql imp.csv --out results/ --hll-hex
  gzip -k imp.csv && cat imp.csv.gz | cardinal run bench/engine/schemas/impressions.sql - --json - | head -3"
)]
pub struct Args {
    /// The declarations: CREATE STREAM and CREATE SUMMARY statements.
    pub(super) schema: PathBuf,
    /// Input files (gzip, zstd, lz4 or snappy detected by magic bytes), `-`
    /// for stdin, or directories: every file under one, in name order,
    /// names starting with `.` skipped.
    #[arg(required = true)]
    pub(super) inputs: Vec<PathBuf>,
    /// The stream the inputs belong to (default: the only one declared).
    #[arg(long)]
    pub(super) stream: Option<String>,
    /// Worker threads, 1 to 256 (default: the number of cores).
    #[arg(long, value_parser = threads_arg)]
    pub(super) threads: Option<usize>,
    /// Write `OUT/<summary>/YYYY-MM-DD.csv`, one file per day, each atomically.
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Write JSON lines to this file (`-` for stdout).
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Add each HyperLogLog as postgresql-hll hex to file outputs.
    #[arg(long)]
    pub(super) hll_hex: bool,
    /// Add `<name>_sketch` columns with each quantile (KLL) and Theta
    /// sketch as its Apache DataSketches image, hex or base64: what
    /// DataSketches' `deserialize` reads, to merge hourly files into daily
    /// percentiles downstream.
    #[arg(long, value_name = "ENCODING", value_parser = ["hex", "base64"])]
    pub(super) sketch_bytes: Option<String>,
    /// With --hll-hex, allow HyperLogLog parameters that java-hll reads but
    /// postgresql-hll refuses (log2m above 17, regwidth 8).
    #[arg(long, requires = "hll_hex")]
    pub(super) java_hll: bool,
    /// Write every rejected record (input, line, reason) to this file.
    #[arg(long)]
    pub(super) rejects: Option<PathBuf>,
    /// Exit with status 3 if any record was rejected, or dropped by
    /// --retention-days or --future-tolerance (its answer is incomplete).
    #[arg(long)]
    pub(super) strict: bool,
    /// Most groups in a summary's answer (a memory guard): a summary with
    /// more fails the run, naming it, on any thread count.
    #[arg(long, default_value_t = cardinal_rollup::GROUPS_MAX_DEFAULT)]
    pub(super) groups_max: u64,
    /// Keep only buckets within this many days of the stream's watermark
    /// (about its newest bucket; see --future-tolerance).
    #[arg(long)]
    pub(super) retention_days: Option<u32>,
    /// Drop the records of buckets more than DAYS ahead of the stream's
    /// watermark (the 128th newest record's bucket), counted per summary;
    /// the retention window is measured from that watermark. Default: the
    /// retention window (at least 1 day) with --retention-days, else off.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) future_tolerance: Option<u32>,
    /// Most bytes the summaries' groups and sketches may hold together,
    /// counted as they grow (e.g. 512MiB, 8G; default: half the memory of
    /// the machine or its cgroup). Reaching it stops the run with an error
    /// naming the summary that holds the most; nothing is written.
    #[arg(long, value_name = "SIZE", value_parser = crate::memory::memory_arg)]
    pub(super) memory_max: Option<u64>,
    /// Print no result tables (files and the summary line only).
    #[arg(long)]
    pub(super) quiet: bool,
    /// Write every credit row of the schema's CREATE ATTRIBUTIONs as a JSON
    /// line to this file (`-` for stdout).
    #[arg(long)]
    pub(super) attributions: Option<PathBuf>,
    /// Keep attribution chains across runs: restore them from
    /// `DIR/<attribution>.chains` (and `.names`) at start if present, and
    /// write them there at the end (each atomically).
    #[arg(long, value_name = "DIR")]
    pub(super) chains_snapshot: Option<PathBuf>,
    /// Never draw the progress line (it is drawn only when stderr is a
    /// terminal).
    #[arg(long)]
    pub(super) no_progress: bool,
    /// Rows of each summary's table printed to stdout (0: every row).
    /// `--out` and `--json` always write every row.
    #[arg(long, value_name = "N", default_value_t = TABLE_ROWS_DEFAULT)]
    pub(super) max_rows: usize,
}

/// Milliseconds in a day, for the flags given in days.
pub(crate) const DAY_MS: i64 = 86_400_000;

/// The least future tolerance, in days: the default with
/// `--retention-days 0`, and the least `--future-tolerance` takes. A
/// record of the next daily bucket must never count as being in the future.
pub(crate) const FUTURE_TOLERANCE_DAYS_MIN: u32 = 1;

/// Rows of a summary's printed table unless `--max-rows` says otherwise.
const TABLE_ROWS_DEFAULT: usize = 100;

/// Reads `--threads`: 1 to [`THREADS_MAX`].
pub fn threads_arg(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=THREADS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("expected 1 to {THREADS_MAX} (THREADS_MAX)")),
    }
}
