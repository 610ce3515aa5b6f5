//! Golden outputs of `cardinal run` and `cardinal demo`: every byte a run
//! writes, compared with files under `tests/golden/`, so that moving or
//! reworking the engine cannot change an answer unnoticed.
//!
//! - The bench schemas (`bench/engine/schemas/`) over small generated
//!   inputs (a few malformed rows added, so rejects are written too): plain
//!   text on 1 thread and split into byte ranges on 3, gzip on 3, Parquet
//!   on 1 and 3.
//! - `cardinal demo` on 1 and 3 threads: its stdout with wall-clock
//!   figures masked ([`mask_wall_clock`]), and its two all-days files.
//! - The attribution schemas of `attribute.rs` and `parquet.rs` on 1 and 3
//!   threads: summary files, JSON lines and credit rows.
//!
//! Each case is one transcript file: the command, exit status, stdout,
//! stderr (masked), then every file the run wrote, each under a `==> name`
//! line. Sketch answers at a fixed thread count are the same in every run
//! by design (`run::execute`), so nothing else is masked. A difference
//! fails with the first differing line and the output it belongs to;
//! `CARDINAL_BLESS=1 cargo test -p cardinal --test golden` rewrites the
//! files instead. `tests/golden/README.md` lists them.
//
// The inputs and schemas are written out here rather than taken from the
// other test files: a golden file holds only while its input stays the
// same, and the other tests are free to change theirs.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow_array::{ArrayRef, Date32Array, Float64Array, Int32Array, Int64Array, StringArray};
use arrow_array::{RecordBatch, TimestampMicrosecondArray};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// Where the golden files live.
const GOLDEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");

/// The environment variable that rewrites the golden files.
const BLESS: &str = "CARDINAL_BLESS";

/// Byte-range size for the split runs: a few ranges per generated file,
/// where the default (64 MiB) would leave each small file whole.
const SPLIT_BYTES_MIN: &str = "200000";

/// Rows per Parquet row group: several jobs per file on 3 threads.
const PARQUET_ROW_GROUP_ROWS: usize = 2_000;

/// Impressions generated for the bench schema: 2 days, so two files per
/// summary, and enough users that the HyperLogLogs leave their exact
/// range and the quantile sketches compact in the larger groups.
const IMPRESSIONS_EVENTS: &str = "8000";
const IMPRESSIONS_USERS: &str = "1500";
const IMPRESSIONS_DAYS: &str = "2";

/// Uservisits rows for Query 2A: nearly every row is its own group,
/// so this sets the size of its golden files.
const USERVISITS_ROWS: &str = "400";

/// Events of `cardinal demo`: the size of its own end-to-end test.
const DEMO_EVENTS: &str = "200000";

const BENCH_SCHEMAS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/engine/schemas");

fn bench_schema(name: &str) -> String {
    let path = Path::new(BENCH_SCHEMAS).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bench schema as the bench harness runs it on Parquet
/// (`harness.py`, `schema_for`): the format option replaced.
fn parquet_schema(text: &str) -> String {
    let parquet = ["header = true", "header = false"]
        .iter()
        .find_map(|header| {
            let csv = format!("format = 'csv', {header}");
            text.contains(&csv)
                .then(|| text.replace(&csv, "format = 'parquet'"))
        })
        .expect("a csv stream with a header option");
    assert_ne!(parquet, text);
    parquet
}

// ---- running and recording ---------------------------------------------------

/// One `cardinal run`: schema and inputs (relative to the scratch folder),
/// thread count, whether plain inputs are split into byte ranges, extra
/// flags.
struct Run<'a> {
    schema: &'a str,
    inputs: &'a [&'a str],
    threads: usize,
    split: bool,
    extra: &'a [&'a str],
}

/// Runs `cardinal` in `dir` with `args`, and the byte-range threshold only
/// when `split` (so a value in the caller's environment changes nothing).
fn cardinal(dir: &Path, args: &[&str], split: bool) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cardinal"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("CARDINAL_SPLIT_BYTES_MIN");
    if split {
        command.env("CARDINAL_SPLIT_BYTES_MIN", SPLIT_BYTES_MIN);
    }
    command.output().expect("cardinal runs")
}

/// Runs `run` in `dir` with every output on (`--out`, `--json`,
/// `--rejects`, and `--attributions` with `attributions`), and returns
/// its transcript. `tag` names the output files.
fn transcript_of_run(dir: &Path, tag: &str, run: &Run<'_>, attributions: bool) -> String {
    let threads = run.threads.to_string();
    let (out, json, rejects, credit) = (
        format!("{tag}.out"),
        format!("{tag}.jsonl"),
        format!("{tag}.rejects"),
        format!("{tag}.credit.jsonl"),
    );
    let mut args = vec!["run", run.schema];
    args.extend_from_slice(run.inputs);
    args.extend_from_slice(&[
        "--threads",
        &threads,
        "--out",
        &out,
        "--json",
        &json,
        "--rejects",
        &rejects,
        "--no-progress",
    ]);
    if attributions {
        args.extend_from_slice(&["--attributions", &credit]);
    }
    args.extend_from_slice(run.extra);
    let output = cardinal(dir, &args, run.split);
    let mut transcript = Transcript::new(&args, run.split, false, &output);
    transcript.folder(dir, &out);
    transcript.file(dir, &json);
    transcript.file(dir, &rejects);
    if attributions {
        transcript.file(dir, &credit);
    }
    transcript.text
}

/// A case's record: `==> name` sections, each followed by its text.
struct Transcript {
    text: String,
}

impl Transcript {
    /// The command, its exit status, stdout (with wall-clock figures
    /// masked if `mask_stdout`) and stderr with them masked.
    fn new(args: &[&str], split: bool, mask_stdout: bool, output: &std::process::Output) -> Self {
        let mut text = String::new();
        let env = if split {
            format!("CARDINAL_SPLIT_BYTES_MIN={SPLIT_BYTES_MIN} ")
        } else {
            String::new()
        };
        writeln!(text, "==> command\n{env}cardinal {}", args.join(" ")).expect("string");
        writeln!(text, "==> exit status\n{:?}", output.status.code()).expect("string");
        let mut transcript = Self { text };
        let stdout = utf8("stdout", &output.stdout);
        if mask_stdout {
            transcript.section("stdout", &mask_wall_clock(stdout));
        } else {
            transcript.section("stdout", stdout);
        }
        let stderr = mask_wall_clock(utf8("stderr", &output.stderr));
        transcript.section("stderr", &sort_reject_lines(&stderr));
        transcript
    }

    fn section(&mut self, name: &str, body: &str) {
        writeln!(self.text, "==> {name}").expect("string");
        self.text.push_str(body);
        if !body.is_empty() && !body.ends_with('\n') {
            self.text.push_str("\n\\ no newline at end\n");
        }
    }

    /// File `name` under `dir`, or a note that the run did not write it.
    fn file(&mut self, dir: &Path, name: &str) {
        match std::fs::read(dir.join(name)) {
            Ok(bytes) => self.section(name, utf8(name, &bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.section(&format!("{name} (not written)"), "");
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }

    /// Every file under folder `name` of `dir`, in path order.
    fn folder(&mut self, dir: &Path, name: &str) {
        let mut files = Vec::new();
        files_under(&dir.join(name), &mut files);
        files.sort();
        if files.is_empty() {
            self.section(&format!("{name}/ (no files)"), "");
        }
        for file in files {
            let relative = file.strip_prefix(dir).expect("under dir");
            self.file(dir, &relative.to_string_lossy());
        }
    }
}

fn files_under(folder: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files_under(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// `bytes` as text: every output of these cases is UTF-8 (text that is
/// not is printed escaped), so anything else is a failure, not a
/// difference to mask.
fn utf8<'b>(name: &str, bytes: &'b [u8]) -> &'b str {
    std::str::from_utf8(bytes).unwrap_or_else(|e| panic!("{name} is not UTF-8: {e}"))
}

/// `text` with each run of consecutive `rejected: ` lines sorted.
///
/// Workers print the first rejects they find to stderr as they find them
/// (`run.rs`, `reject`), so on several workers their order is the order
/// in which the workers reached them, which the scheduler decides: on 3
/// workers over byte ranges it changed from run to run. Which lines are
/// printed does not change while there are at most `REJECTS_SHOWN_MAX`
/// (10) of them, as in every case here, and the `--rejects` file, in
/// worker order, is compared as written.
fn sort_reject_lines(text: &str) -> String {
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut start = 0;
    while start < lines.len() {
        let length = lines[start..]
            .iter()
            .take_while(|l| l.starts_with("rejected: ") && l.ends_with('\n'))
            .count();
        lines[start..start + length].sort_unstable();
        start += length.max(1);
    }
    lines.concat()
}

/// Masks the wall-clock figures of printed text, and nothing else:
///
/// - a duration after `in` or `wall time`: `in   0.32 s` -> `in # s`;
/// - a rate of rows: `    1.76 M events/s`, `2.80 M records/s` ->
///   ` # events/s`, `# records/s`;
/// - a rate of bytes: `     154 MB/s` -> ` #/s`.
///
/// The padding before a masked figure goes with it, as its width is the
/// figure's.
fn mask_wall_clock(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        masked.push_str(&mask_line(line));
    }
    masked
}

fn mask_line(line: &str) -> String {
    // Tokens as (start, end) byte offsets, split on spaces.
    let mut tokens: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                tokens.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        tokens.push((s, line.len()));
    }
    let word = |i: usize| &line[tokens[i].0..tokens[i].1];
    let is_number = |i: usize| {
        let w = word(i);
        w.bytes().any(|b| b.is_ascii_digit()) && w.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    };
    // Spans to replace: (first token, last token, replacement).
    let mut spans: Vec<(usize, usize, String)> = Vec::new();
    for i in 0..tokens.len() {
        let w = word(i).trim_end_matches([',', ';', ':']);
        let tail = &word(i)[w.len()..];
        if (w == "in" || w == "time")
            && i + 2 < tokens.len()
            && is_number(i + 1)
            && word(i + 2).trim_end_matches([',', ';', ':']) == "s"
        {
            spans.push((i + 1, i + 1, "#".to_owned()));
        } else if (w == "events/s" || w == "records/s") && i >= 1 {
            let first = if i >= 2 && is_number(i - 2) && ["k", "M"].contains(&word(i - 1)) {
                i - 2
            } else if is_number(i - 1) {
                i - 1
            } else {
                continue;
            };
            spans.push((first, i, format!("# {w}{tail}")));
        } else if w.ends_with("B/s")
            && ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"].contains(&w)
            && i >= 1
            && is_number(i - 1)
        {
            spans.push((i - 1, i, format!("#/s{tail}")));
        }
    }
    let mut out = String::with_capacity(line.len());
    let mut at = 0;
    for (first, last, replacement) in spans {
        // The padding before the figure: back to the previous token's end.
        let padding_start = if first == 0 { 0 } else { tokens[first - 1].1 };
        if padding_start < at {
            continue;
        }
        out.push_str(&line[at..padding_start]);
        out.push(' ');
        out.push_str(&replacement);
        at = tokens[last].1;
    }
    out.push_str(&line[at..]);
    out
}

// ---- comparing ---------------------------------------------------------------

/// Compares (or with `CARDINAL_BLESS=1` writes) each `(file name,
/// transcript)`; panics naming every golden file that differs.
fn check(cases: &[(String, String)]) {
    let bless = std::env::var_os(BLESS).is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    for (name, actual) in cases {
        let path = Path::new(GOLDEN_DIR).join(name);
        if bless {
            std::fs::create_dir_all(GOLDEN_DIR).expect("golden folder");
            std::fs::write(&path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            continue;
        }
        let expected = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                failures.push(format!("{}: {e} (bless with {BLESS}=1)", path.display()));
                continue;
            }
        };
        if let Some(difference) = first_difference(&expected, actual) {
            failures.push(format!("tests/golden/{name}: {difference}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden file(s) differ; if the change is meant, rewrite them with \
         `{BLESS}=1 cargo test -p cardinal --test golden`:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The first line where `actual` differs from `expected`, with the section
/// (output file) it is in, or `None` when they are the same.
fn first_difference(expected: &str, actual: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (mut want, mut got) = (expected.lines(), actual.lines());
    let mut section = "(start)";
    let mut line_number = 0usize;
    loop {
        line_number += 1;
        match (want.next(), got.next()) {
            (Some(w), Some(g)) if w == g => {
                if let Some(name) = w.strip_prefix("==> ") {
                    section = name;
                }
            }
            (None, None) => return Some("the same lines, different line ends".to_owned()),
            (w, g) => {
                // Long lines (HyperLogLog hex) are shown around the first
                // differing character only.
                let column = match (w, g) {
                    (Some(w), Some(g)) => w
                        .char_indices()
                        .zip(g.chars())
                        .find(|((_, a), b)| a != b)
                        .map_or(w.len().min(g.len()), |((i, _), _)| i),
                    _ => 0,
                };
                let show = |l: Option<&str>| {
                    l.map_or("(end of file)".to_owned(), |l| {
                        format!("{:?}", excerpt(l, column))
                    })
                };
                return Some(format!(
                    "line {line_number}, column {}, in `{section}`:\n  expected {}\n  actual   {}",
                    column + 1,
                    show(w),
                    show(g)
                ));
            }
        }
    }
}

/// About `EXCERPT_CHARS` characters of `line` around byte `at`, with
/// `...` where it is cut.
fn excerpt(line: &str, at: usize) -> String {
    const EXCERPT_CHARS: usize = 80;
    let boundary = |mut i: usize| {
        i = i.min(line.len());
        while !line.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = boundary(at.saturating_sub(EXCERPT_CHARS / 2));
    let end = boundary(start + EXCERPT_CHARS);
    let mut text = String::new();
    if start > 0 {
        text.push_str("...");
    }
    text.push_str(&line[start..end]);
    if end < line.len() {
        text.push_str("...");
    }
    text
}

// ---- inputs ------------------------------------------------------------------

/// Runs `cardinal gen` in `dir` and asserts that it succeeded.
fn generate(dir: &Path, args: &[&str]) {
    let mut all = vec!["gen"];
    all.extend_from_slice(args);
    common::ok(&cardinal(dir, &all, false));
}

/// Inserts `bad` lines into the text of `path` after data lines
/// `positions` (1-based, after the header if any), written to `to`.
fn with_bad_lines(dir: &Path, from: &str, to: &str, bad: &[(usize, &str)]) {
    let text = std::fs::read_to_string(dir.join(from)).expect("generated");
    let mut lines: Vec<&str> = text.lines().collect();
    for &(position, line) in bad.iter().rev() {
        assert!(position < lines.len());
        lines.insert(position, line);
    }
    std::fs::write(dir.join(to), lines.join("\n") + "\n").expect("write input");
}

/// Text lines split on commas (the generators never quote).
fn fields(text: &str, skip: usize) -> Vec<Vec<&str>> {
    text.lines()
        .skip(skip)
        .map(|l| l.split(',').collect())
        .collect()
}

fn epoch_ms(text: &str) -> i64 {
    cardinal_event::Timestamp::parse(text.as_bytes())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .0
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).expect("columns of equal length");
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP_ROWS))
        .build();
    let file = std::fs::File::create(path).expect("create");
    let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

/// `imp.parquet` from the generated impressions in `from`, typed as
/// DuckDB's copy in the bench is (TIMESTAMP, BIGINT, text, DOUBLE).
fn impressions_parquet(dir: &Path, from: &str) {
    let text = std::fs::read_to_string(dir.join(from)).expect("generated");
    let rows = fields(&text, 1);
    let column = |i: usize| rows.iter().map(move |r| r[i]);
    let text_column = |i: usize| -> ArrayRef { Arc::new(StringArray::from_iter_values(column(i))) };
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "ts",
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(column(0).map(|t| epoch_ms(t) * 1000))
                    .with_timezone("UTC"),
            ),
        ),
        (
            "user_id",
            Arc::new(Int64Array::from_iter_values(
                column(1).map(|u| u.parse::<i64>().expect("an id")),
            )),
        ),
        ("kind", text_column(2)),
        ("state", text_column(3)),
        ("site", text_column(4)),
        ("provider", text_column(5)),
        ("campaign", text_column(6)),
        (
            "revenue",
            Arc::new(Float64Array::from_iter_values(
                column(7).map(|r| r.parse::<f64>().expect("revenue")),
            )),
        ),
    ];
    write_parquet(&dir.join("imp.parquet"), columns);
}

/// `uv.parquet` from the generated uservisits in `from` (DATE as days,
/// INT as i32).
fn uservisits_parquet(dir: &Path, from: &str) {
    let text = std::fs::read_to_string(dir.join(from)).expect("generated");
    let rows = fields(&text, 0);
    assert!(rows.iter().all(|r| r.len() == 9), "no quoted commas");
    let column = |i: usize| rows.iter().map(move |r| r[i]);
    let text_column = |i: usize| -> ArrayRef { Arc::new(StringArray::from_iter_values(column(i))) };
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("sourceIP", text_column(0)),
        ("destURL", text_column(1)),
        (
            "visitDate",
            Arc::new(Date32Array::from_iter_values(column(2).map(|d| {
                i32::try_from(epoch_ms(d).div_euclid(86_400_000)).expect("a date")
            }))),
        ),
        (
            "adRevenue",
            Arc::new(Float64Array::from_iter_values(
                column(3).map(|r| r.parse::<f64>().expect("adRevenue")),
            )),
        ),
        ("userAgent", text_column(4)),
        ("countryCode", text_column(5)),
        ("languageCode", text_column(6)),
        ("searchWord", text_column(7)),
        (
            "duration",
            Arc::new(Int32Array::from_iter_values(
                column(8).map(|d| d.parse::<i32>().expect("duration")),
            )),
        ),
    ];
    write_parquet(&dir.join("uv.parquet"), columns);
}

// ---- 1. the bench schemas ----------------------------------------------------

/// The five runs of a bench schema: plain text on 1 thread and in byte
/// ranges on 3, gzip on 3, Parquet on 1 and 3.
fn bench_cases(dir: &Path, dataset: &str, text: &str, extra: &[&str]) -> Vec<(String, String)> {
    let gz = format!("{text}.gz");
    let parquet = format!("{}.parquet", text.split('.').next().expect("stem"));
    let runs = [
        ("text-t1", "csv.sql", text, 1, false),
        ("text-t3", "csv.sql", text, 3, true),
        ("gzip-t3", "csv.sql", gz.as_str(), 3, false),
        ("parquet-t1", "parquet.sql", parquet.as_str(), 1, false),
        ("parquet-t3", "parquet.sql", parquet.as_str(), 3, false),
    ];
    runs.iter()
        .map(|&(tag, schema, input, threads, split)| {
            let run = Run {
                schema,
                inputs: &[input],
                threads,
                split,
                extra,
            };
            (
                format!("run-{dataset}-{tag}.txt"),
                transcript_of_run(dir, tag, &run, false),
            )
        })
        .collect()
}

fn write_bench_schemas(dir: &Path, file: &str) {
    let csv = bench_schema(file);
    std::fs::write(dir.join("csv.sql"), &csv).expect("schema");
    std::fs::write(dir.join("parquet.sql"), parquet_schema(&csv)).expect("schema");
}

fn gzip_file(dir: &Path, from: &str) {
    let bytes = std::fs::read(dir.join(from)).expect("input");
    std::fs::write(dir.join(format!("{from}.gz")), common::gzip(&bytes)).expect("gzip");
}

/// W1's schema (`impressions.sql`): three summaries with HyperLogLogs,
/// quantiles and top-k, HyperLogLog bytes written as hex too.
#[test]
fn bench_impressions_schema_outputs_are_unchanged() {
    let dir = common::scratch_dir("golden", "impressions");
    write_bench_schemas(&dir, "impressions.sql");
    generate(
        &dir,
        &[
            "impressions",
            "--events",
            IMPRESSIONS_EVENTS,
            "--users",
            IMPRESSIONS_USERS,
            "--days",
            IMPRESSIONS_DAYS,
            "--seed",
            "7",
            "-o",
            "clean.csv",
        ],
    );
    // Parquet from the clean rows: its values are typed, nothing to reject.
    impressions_parquet(&dir, "clean.csv");
    // A bad time, a short row and a bad revenue: three rejects.
    with_bad_lines(
        &dir,
        "clean.csv",
        "imp.csv",
        &[
            (
                200,
                "2026-11-01T25:00:00Z,1,impression,CA,site1,alpha,campaign1,0.1",
            ),
            (4_000, "2026-11-02T00:00:00Z,2,impression,CA"),
            (
                7_000,
                "2026-11-02T00:00:00Z,3,impression,CA,site1,alpha,campaign1,lots",
            ),
        ],
    );
    gzip_file(&dir, "imp.csv");
    check(&bench_cases(&dir, "impressions", "imp.csv", &["--hll-hex"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// W2's schema (`uservisits.sql`): Query 2A over the AMPLab text.
#[test]
fn bench_uservisits_schema_outputs_are_unchanged() {
    let dir = common::scratch_dir("golden", "uservisits");
    write_bench_schemas(&dir, "uservisits.sql");
    generate(
        &dir,
        &[
            "uservisits",
            "--rows",
            USERVISITS_ROWS,
            "--seed",
            "7",
            "-o",
            "clean.txt",
        ],
    );
    uservisits_parquet(&dir, "clean.txt");
    // A bad date and a bad adRevenue: one reject, as Query 2A does not
    // read visitDate (only the columns summaries read are parsed).
    with_bad_lines(
        &dir,
        "clean.txt",
        "uv.txt",
        &[
            (50, "1.2.3.4,http://a,1999-13-01,0.5,ua,USA,USA-EN,w,3"),
            (300, "5.6.7.8,http://b,1999-01-01,half,ua,USA,USA-EN,w,3"),
        ],
    );
    gzip_file(&dir, "uv.txt");
    check(&bench_cases(&dir, "uservisits", "uv.txt", &[]));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- 2. the demo -------------------------------------------------------------

#[test]
fn demo_output_is_unchanged() {
    let dir = common::scratch_dir("golden", "demo");
    let cases: Vec<(String, String)> = [1, 3]
        .iter()
        .map(|threads| {
            let out = format!("demo-t{threads}");
            let threads = threads.to_string();
            let args = [
                "demo",
                "--events",
                DEMO_EVENTS,
                "--threads",
                &threads,
                "--no-progress",
                "--out",
                &out,
            ];
            let output = cardinal(&dir, &args, false);
            // stdout masked too: its throughput lines are wall-clock.
            let mut transcript = Transcript::new(&args, false, true, &output);
            // The per-day files are `run`'s, checked above; the all-days
            // ones hold the audiences and the credited campaigns.
            transcript.file(&dir, &format!("{out}/audience/all.csv"));
            transcript.file(&dir, &format!("{out}/by_campaign/all.csv"));
            (format!("demo-t{threads}.txt"), transcript.text)
        })
        .collect();
    check(&cases);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- 3. attribution ----------------------------------------------------------

const IMPRESSIONS_STREAM: &str = "
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
";

/// `attribute.rs`'s five models over the hand journeys (lookback 10
/// days, clicks), and the linear credit by campaign.
fn every_model_schema() -> String {
    let mut sql = IMPRESSIONS_STREAM.to_owned();
    for (name, model) in [
        ("last", "last_touch"),
        ("first", "first_touch"),
        ("lin", "linear"),
        ("pos", "position_based"),
        ("decay", "time_decay HALF LIFE 2 DAYS"),
    ] {
        writeln!(
            sql,
            "CREATE ATTRIBUTION {name} ON impressions BY user_id MODEL {model} LOOKBACK 10 DAYS
               TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
               VALUE revenue CAMPAIGN campaign SITE site;"
        )
        .expect("string");
    }
    sql.push_str(
        "CREATE SUMMARY lin_by_campaign AS SELECT campaign, sum(credit) AS conversions,
           sum(revenue) AS revenue, count(*) AS touches FROM lin GROUP BY campaign;\n",
    );
    sql
}

fn day(d: u32, hour: u32) -> String {
    format!("2026-11-{:02}T{hour:02}:00:00Z", d + 1)
}

/// `attribute.rs`'s journeys: (time, user, kind, campaign, revenue),
/// with a window edge, ties and a conversion without touch points.
fn journeys() -> Vec<(String, u32, &'static str, &'static str, f64)> {
    vec![
        (day(0, 0), 2, "click", "c1", 0.0),
        (day(0, 12), 1, "click", "c1", 0.0),
        (day(1, 0), 4, "impression", "c9", 0.0),
        (day(3, 0), 3, "conversion", "", 7.0),
        (day(4, 0), 3, "click", "c2", 0.0),
        (day(5, 12), 1, "click", "c2", 0.0),
        (day(8, 12), 1, "click", "c3", 0.0),
        (day(10, 12), 1, "conversion", "", 100.0),
        (day(11, 0), 1, "click", "c1", 0.0),
        (day(12, 0), 1, "conversion", "", 50.0),
        (day(15, 0), 2, "click", "c2", 0.0),
        (day(15, 0), 2, "click", "c3", 0.0),
        (day(20, 0), 2, "conversion", "", 10.0),
    ]
}

fn write_journeys(path: &Path, events: &[(String, u32, &str, &str, f64)]) {
    let mut text = "ts,user_id,kind,state,site,provider,campaign,revenue\n".to_owned();
    for (ts, user, kind, campaign, revenue) in events {
        writeln!(text, "{ts},{user},{kind},CA,s{user},p,{campaign},{revenue}").expect("string");
    }
    std::fs::write(path, text).expect("write input");
}

/// Runs the attribution case `name` on 1 thread over `one` and on 3 over
/// `three`.
fn attribution_cases(
    dir: &Path,
    name: &str,
    one: &[&str],
    three: &[&str],
    split: bool,
) -> Vec<(String, String)> {
    [(1, one), (3, three)]
        .iter()
        .map(|&(threads, inputs)| {
            let tag = format!("{name}-t{threads}");
            let run = Run {
                schema: &format!("{name}.sql"),
                inputs,
                threads,
                split: split && threads > 1,
                extra: &[],
            };
            (
                format!("attribution-{tag}.txt"),
                transcript_of_run(dir, &tag, &run, true),
            )
        })
        .collect()
}

#[test]
fn attribution_outputs_are_unchanged() {
    let dir = common::scratch_dir("golden", "attribution");
    let mut cases = Vec::new();

    // Every model over the hand journeys; on 3 threads in two files.
    std::fs::write(dir.join("models.sql"), every_model_schema()).expect("schema");
    let events = journeys();
    write_journeys(&dir.join("j.csv"), &events);
    write_journeys(&dir.join("a.csv"), &events[..6]);
    write_journeys(&dir.join("b.csv"), &events[6..]);
    cases.extend(attribution_cases(
        &dir,
        "models",
        &["j.csv"],
        &["a.csv", "b.csv"],
        false,
    ));

    // The same in two runs joined by a chains snapshot: the second run
    // credits touch points the first one kept.
    let snapshot: String = ["a.csv", "b.csv"]
        .iter()
        .map(|input| {
            let run = Run {
                schema: "models.sql",
                inputs: &[input],
                threads: 1,
                split: false,
                extra: &["--chains-snapshot", "chains"],
            };
            transcript_of_run(&dir, &format!("snapshot-{}", &input[..1]), &run, true)
        })
        .collect();
    cases.push(("attribution-models-snapshot.txt".to_owned(), snapshot));

    // `attribute.rs`'s replay schema over generated impressions (linear,
    // 3 days, impressions and clicks), and `parquet.rs`'s summaries with
    // an attribution over the same rows; on 3 threads in byte ranges.
    std::fs::write(
        dir.join("replay.sql"),
        format!(
            "{IMPRESSIONS_STREAM}
CREATE ATTRIBUTION lin ON impressions BY user_id MODEL linear LOOKBACK 3 DAYS
  TOUCH WHERE kind IN ('impression', 'click') CONVERSION WHERE kind = 'conversion'
  VALUE revenue CAMPAIGN campaign;
CREATE SUMMARY by_campaign AS SELECT date_trunc('day', conversion_ts) AS day, campaign,
  sum(credit) AS conversions, sum(revenue) AS revenue, count(*) AS touches
  FROM lin GROUP BY day, campaign;"
        ),
    )
    .expect("schema");
    std::fs::write(
        dir.join("sites.sql"),
        format!(
            "{IMPRESSIONS_STREAM}
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS events, sum(revenue) AS revenue, min(revenue) AS low,
         max(revenue) AS high, hll(user_id) AS users, exact_distinct(user_id) AS exact_users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;
CREATE SUMMARY sites AS
  SELECT date_trunc('week', ts) AS week, provider, upper(substr(site, 1, 5)) AS prefix,
         count(*) AS events, hll(site) AS sites, hll(campaign) AS campaigns
  FROM impressions WHERE revenue > 0.001
  GROUP BY week, provider, prefix;
CREATE ATTRIBUTION credit ON impressions BY user_id MODEL linear LOOKBACK 30 DAYS
  TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
  VALUE revenue CAMPAIGN campaign SITE site;
CREATE SUMMARY by_campaign AS
  SELECT campaign, sum(credit) AS conversions, sum(revenue) AS revenue, count(*) AS touches
  FROM credit
  GROUP BY campaign;"
        ),
    )
    .expect("schema");
    generate(
        &dir,
        &[
            "impressions",
            "--events",
            "10000",
            "--users",
            "600",
            "--days",
            "6",
            "--seed",
            "11",
            "-o",
            "imp.csv",
        ],
    );
    cases.extend(attribution_cases(
        &dir,
        "replay",
        &["imp.csv"],
        &["imp.csv"],
        true,
    ));
    cases.extend(attribution_cases(
        &dir,
        "sites",
        &["imp.csv"],
        &["imp.csv"],
        true,
    ));

    // A conversion value that is NULL or out of range.
    std::fs::write(
        dir.join("values.sql"),
        "CREATE STREAM ev (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT, value DOUBLE)
           WITH (format = 'csv', header = true, time = 'ts');
         CREATE ATTRIBUTION credit ON ev BY user_id MODEL last_touch LOOKBACK 7 DAYS
           TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
           VALUE value CAMPAIGN campaign;",
    )
    .expect("schema");
    let mut values = String::from("ts,user_id,kind,campaign,value\n");
    for (user, value) in [(1, "4"), (2, ""), (3, "inf"), (4, "NaN"), (5, "1e300")] {
        writeln!(values, "2026-11-01T00:00:00Z,{user},click,c{user},").expect("string");
        writeln!(values, "2026-11-02T00:00:00Z,{user},conversion,,{value}").expect("string");
    }
    std::fs::write(dir.join("values.csv"), values).expect("input");
    cases.extend(attribution_cases(
        &dir,
        "values",
        &["values.csv"],
        &["values.csv"],
        false,
    ));

    // Campaign names that are not UTF-8 (Latin-1), printed escaped.
    let mut sql = IMPRESSIONS_STREAM.to_owned();
    sql.push_str(
        "CREATE ATTRIBUTION lin ON impressions BY user_id MODEL linear LOOKBACK 10 DAYS
           TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
           VALUE revenue CAMPAIGN campaign SITE site;\n",
    );
    std::fs::write(dir.join("latin1.sql"), sql).expect("schema");
    let mut input = b"ts,user_id,kind,state,site,provider,campaign,revenue\n".to_vec();
    for (ts, campaign) in [(day(0, 0), &b"caf\xe9"[..]), (day(0, 1), b"caf\xe8")] {
        input.extend_from_slice(format!("{ts},1,click,CA,s,p,").as_bytes());
        input.extend_from_slice(campaign);
        input.extend_from_slice(b",0\n");
    }
    input.extend_from_slice(format!("{},1,conversion,CA,s,p,,10\n", day(1, 0)).as_bytes());
    std::fs::write(dir.join("latin1.csv"), input).expect("input");
    cases.extend(attribution_cases(
        &dir,
        "latin1",
        &["latin1.csv"],
        &["latin1.csv"],
        false,
    ));

    check(&cases);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the filter and the comparison themselves ----------------------------------

#[test]
fn the_mask_hides_wall_clock_figures_only() {
    assert_eq!(
        mask_wall_clock(
            "  generate       200,000 rows   17.5 MB  in   0.12 s     1.66 M events/s     145 MB/s  1 thread\n"
        ),
        "  generate       200,000 rows   17.5 MB  in # s # events/s #/s  1 thread\n"
    );
    assert_eq!(
        mask_wall_clock("  files     written in 0.39 s; wall time 0.7 s in all\n"),
        "  files     written in # s; wall time # s in all\n"
    );
    assert_eq!(
        mask_wall_clock(
            "20000 records, 1.7 MB in 0.01 s: 950 records/s, 244 MB/s on 3 thread(s); 0 rejected"
        ),
        "20000 records, 1.7 MB in # s: # records/s, #/s on 3 thread(s); 0 rejected"
    );
    // Counts, sizes and other numbers stay.
    for line in [
        "reach: wrote 3 file(s) under out/reach\n",
        "  engine in 12 groups; 1.7 MB; 3 thread(s)\n",
        "lin: 8 touch points, 4 conversions, 6 credit rows\n",
    ] {
        assert_eq!(mask_wall_clock(line), line);
    }
}

#[test]
fn reject_lines_are_sorted_within_their_run_only() {
    let stderr =
        "rejected: b:2: x\nrejected: a:9: y\nreach: wrote 1 file(s)\nrejected: d\nrejected: c\n";
    assert_eq!(
        sort_reject_lines(stderr),
        "rejected: a:9: y\nrejected: b:2: x\nreach: wrote 1 file(s)\nrejected: c\nrejected: d\n"
    );
}

#[test]
fn a_changed_line_is_reported_with_its_section() {
    let golden = "==> command\ncardinal run\n==> out/a.csv\nday,n\n1,2\n";
    assert_eq!(first_difference(golden, golden), None);
    let changed = golden.replace("1,2", "1,3");
    let report = first_difference(golden, &changed).expect("a difference");
    assert!(
        report.starts_with("line 5, column 3, in `out/a.csv`"),
        "{report}"
    );
    let long = format!("==> out/h.csv\n{}a{}\n", "x".repeat(500), "y".repeat(500));
    let report = first_difference(&long, &long.replace('a', "b")).expect("a difference");
    assert!(report.contains("column 501"), "{report}");
    assert!(report.len() < 300, "{report}");
    let shorter = golden.replace("1,2\n", "");
    let report = first_difference(golden, &shorter).expect("a difference");
    assert!(report.contains("(end of file)"), "{report}");
    let no_newline = golden.trim_end();
    assert!(first_difference(golden, no_newline).is_some());
}
