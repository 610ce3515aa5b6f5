//! `cardinal send FILE... --to ADDR --stream NAME`: flags into
//! [`cardinal_server::send::SendOptions`], the send, a progress line on
//! stderr while it runs (only on a terminal), a summary at the end.
//! The exit status is 0 only when every batch was acknowledged.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cardinal_server::send::{
    BATCH_BYTES_MAX, BATCH_BYTES_MIN, Progress, SendOptions, Summary, default_client_id, send,
};
use cardinal_server::{ClientId, Format, IN_FLIGHT_BATCHES_MAX, StreamName, Token};

use crate::progress::{TICKS_PER_SEC, bytes, count, duration};

/// The failures the summary lists one by one (the rest are counted).
const FAILURES_SHOWN_MAX: usize = 10;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The default client id is stable for the same stream and files:
send-<stream>-<hash of the files' canonical paths>. A rerun is the same client to the
server and its batch ids start above the first run's; it sends everything again.

Exit status: 0 when every batch was acknowledged; 1 otherwise (batches refused, a
server unreachable for --give-up-secs, an unreadable input), with the reason on stderr.

Examples:
  cardinal send imp.csv --to 127.0.0.1:7400 --stream impressions
  cardinal send day1.ndjson.gz day2.ndjson.gz --to 127.0.0.1:7400 --stream events --ledger acked.txt
  cardinal gen impressions --events 100000 -o - | cardinal send - --to 127.0.0.1:7400 --stream impressions"
)]
pub struct Args {
    /// Input files of CSV or NDJSON records (gzip, zstd, lz4 or snappy
    /// compressed too); `-` reads stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The server's native protocol address, host:port.
    #[arg(long, value_name = "ADDR")]
    pub to: String,
    /// The stream the records go to (declared in the server's schema).
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// The client id (default: derived from the stream and the files, see
    /// below).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// The records' format (default: ndjson when every file name has .ndjson,
    /// .jsonl or .json in it, else csv).
    #[arg(long, value_parser = ["csv", "ndjson"])]
    pub format: Option<String>,
    /// CSV: the first line of each file is a record, not a header.
    #[arg(long)]
    pub no_header: bool,
    /// CSV: the field delimiter (so batches are cut between records).
    #[arg(long, default_value = ",", value_name = "C")]
    pub delimiter: char,
    /// Aim for batches of this many KiB of whole records.
    #[arg(long, value_name = "K", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub batch_kib: u32,
    /// The most batches in flight (the server's limit applies if lower).
    #[arg(long, value_name = "W", default_value_t = cardinal_server::IN_FLIGHT_BATCHES_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(IN_FLIGHT_BATCHES_MAX)))]
    pub window: u32,
    /// A file holding the token the server requires (its first line).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Write each acknowledged batch to FILE as it arrives: `id accepted
    /// rejected duplicate`.
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Fail when the server has been unreachable (or made no progress) for
    /// this long.
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub give_up_secs: u64,
    /// No progress line and no summary (errors are still printed).
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(args: &Args) -> Result<i32> {
    let options = options(args)?;
    let show = !args.quiet && std::io::stderr().is_terminal();
    let tick = Duration::from_secs(1) / TICKS_PER_SEC;
    let mut drawn: Option<Instant> = None;
    let mut last = Progress::default();
    let result = send(&args.files, &options, |progress| {
        last = *progress;
        if show && drawn.is_none_or(|at| at.elapsed() >= tick) {
            // "\r" returns to the line start, ESC[2K erases the old line.
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K{}", line(progress));
            drawn = Some(Instant::now());
        }
    });
    if drawn.is_some() {
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
    }
    let summary = match result {
        Ok(summary) => summary,
        Err(error) => {
            if !args.quiet && last.batches > 0 {
                eprintln!("{}", partial(&last));
            }
            return Err(error).with_context(|| format!("sending to {}", args.to));
        }
    };
    if !args.quiet {
        eprint!("{}", report(&summary, &options));
    }
    if summary.all_acked() {
        return Ok(0);
    }
    eprintln!(
        "error: {} of {} batches were not acknowledged ({} refused by the server)",
        summary.batches - summary.acked,
        summary.batches,
        summary.failed
    );
    Ok(1)
}

fn options(args: &Args) -> Result<SendOptions> {
    let Some(stream) = &args.stream else {
        bail!(
            "--stream NAME is required: the stream the records go to, as the server's schema declares it"
        );
    };
    let stream = StreamName::new(stream).with_context(|| format!("--stream {stream}"))?;
    let client = match &args.client_id {
        Some(id) => ClientId::new(id).with_context(|| format!("--client-id {id}"))?,
        None => default_client_id(&stream, &args.files),
    };
    let format = match args.format.as_deref() {
        Some("ndjson") => Format::Ndjson,
        Some(_) => Format::Csv,
        None => format_of(&args.files),
    };
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
            let first = first.strip_suffix(b"\r").unwrap_or(first);
            Some(Token::new(first).with_context(|| format!("the token in {}", path.display()))?)
        }
        None => None,
    };
    let delimiter = u8::try_from(args.delimiter)
        .ok()
        .filter(|&d| d.is_ascii() && !matches!(d, b'"' | b'\n' | b'\r'))
        .with_context(|| {
            format!(
                "--delimiter {:?}: an ASCII character other than a quote or line break",
                args.delimiter
            )
        })?;
    let batch_bytes = (args.batch_kib as usize) << 10;
    debug_assert!((BATCH_BYTES_MIN..=BATCH_BYTES_MAX).contains(&batch_bytes));
    Ok(SendOptions {
        token,
        batch_bytes,
        window: args.window,
        header: !args.no_header,
        delimiter,
        give_up_after: Duration::from_secs(args.give_up_secs),
        ledger: args.ledger.clone(),
        ..SendOptions::new(&args.to, client, stream, format)
    })
}

/// NDJSON when every file's name says JSON, else CSV.
fn format_of(files: &[PathBuf]) -> Format {
    let json = |file: &PathBuf| {
        let name = file.file_name().map(|n| n.to_string_lossy().to_lowercase());
        name.is_some_and(|n| [".ndjson", ".jsonl", ".json"].iter().any(|e| n.contains(e)))
    };
    if !files.is_empty() && files.iter().all(json) {
        Format::Ndjson
    } else {
        Format::Csv
    }
}

/// The progress line: bytes and events acknowledged, their rates, batches
/// acked and in flight, reconnects, elapsed time.
fn line(p: &Progress) -> String {
    let secs = p.elapsed.as_secs_f64().max(1e-3);
    let events = p.accepted + p.rejected;
    format!(
        "{} acked  {}/s  {} events/s  {} batches acked  {} in flight  {} reconnects  {}",
        bytes(p.bytes_acked),
        bytes(per_sec(p.bytes_acked, secs)),
        count(events as f64 / secs),
        p.acked,
        p.in_flight,
        p.reconnects,
        duration(p.elapsed.as_secs_f64())
    )
}

/// `n` per second over `secs`, rounded.
#[expect(
    clippy::cast_possible_truncation,
    reason = "a saturating float-to-int of a non-negative rate"
)]
fn per_sec(n: u64, secs: f64) -> u64 {
    (n as f64 / secs.max(1e-3)).round() as u64
}

/// What was done before a send failed.
fn partial(p: &Progress) -> String {
    format!(
        "before the failure: {} of {} batches acknowledged ({} records accepted, {} rejected), \
         {} reconnects",
        p.acked, p.batches, p.accepted, p.rejected, p.reconnects
    )
}

/// The summary printed at the end.
fn report(s: &Summary, options: &SendOptions) -> String {
    let secs = s.elapsed.as_secs_f64().max(1e-3);
    let mut text = format!(
        "sent {} in {} batches to {} (stream {}, client id {}) in {}\n",
        bytes(s.bytes),
        s.batches,
        options.to,
        options.stream,
        options.client,
        duration(secs)
    );
    text += &format!(
        "  acknowledged {} batches ({} as duplicates of an earlier send), {} refused\n",
        s.acked, s.duplicates, s.failed
    );
    text += &format!(
        "  records accepted {}, rejected {}; {} events/s, {}/s\n",
        s.accepted,
        s.rejected,
        count((s.accepted + s.rejected) as f64 / secs),
        bytes(per_sec(s.bytes, secs))
    );
    text += &format!(
        "  {} batch frames written, {} reconnects\n",
        s.sends, s.reconnects
    );
    let ranges: Vec<String> = s
        .ledger
        .acked_ranges()
        .take(FAILURES_SHOWN_MAX)
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    if !ranges.is_empty() {
        let more = s.ledger.acked_ranges().count() > FAILURES_SHOWN_MAX;
        text += &format!(
            "  acknowledged ids: {}{}\n",
            ranges.join(", "),
            if more { ", ..." } else { "" }
        );
    }
    for failure in s.ledger.failures().iter().take(FAILURES_SHOWN_MAX) {
        text += &format!(
            "  batch {} refused ({}): {}\n",
            failure.batch, failure.code, failure.message
        );
    }
    if s.failed > FAILURES_SHOWN_MAX as u64 {
        text += &format!(
            "  and {} more refused\n",
            s.failed - FAILURES_SHOWN_MAX as u64
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_file_names() {
        let files = |names: &[&str]| names.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            format_of(&files(&["a.ndjson.gz", "b.jsonl"])),
            Format::Ndjson
        );
        assert_eq!(format_of(&files(&["a.ndjson", "b.csv"])), Format::Csv);
        assert_eq!(format_of(&files(&["-"])), Format::Csv);
    }

    #[test]
    fn the_progress_line_says_rates_and_counts() {
        let p = Progress {
            elapsed: Duration::from_secs(2),
            bytes_acked: 50_000_000,
            accepted: 1_000_000,
            rejected: 0,
            acked: 200,
            in_flight: 8,
            reconnects: 1,
            ..Progress::default()
        };
        assert_eq!(
            line(&p),
            "50.0 MB acked  25.0 MB/s  500.0 k events/s  200 batches acked  8 in flight  \
             1 reconnects  2 s"
        );
    }
}
