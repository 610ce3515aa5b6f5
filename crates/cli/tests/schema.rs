//! End-to-end tests of schemas at the dialect's limits: expressions as deep
//! as `EXPR_DEPTH_MAX` allows run on every worker, deeper ones (chains
//! included) are refused with a caret and an exit status, never a signal,
//! and no summary writes two columns, or two JSON keys, of one name.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use common::{cardinal, failure, ok};

const STREAM: &str = "CREATE STREAM s (ts TIMESTAMP, v BIGINT, t TEXT) WITH (format = 'csv', header = true, time = 'ts');\n";

/// The records: `v` from 1 to `ROWS`, over three days and, independently,
/// three texts.
const ROWS: u64 = 3_000;

fn dir(name: &str) -> PathBuf {
    let dir = common::scratch_dir("schema", name);
    let mut csv = String::from("ts,v,t\n");
    for v in 1..=ROWS {
        let _ = writeln!(csv, "2026-11-0{}T12:00:00Z,{v},k{}", 1 + v % 3, (v / 3) % 3);
    }
    std::fs::write(dir.join("in.csv"), csv).expect("input");
    dir
}

/// `term` written `count` times, joined by `operator`.
fn chain(term: &str, operator: &str, count: usize) -> String {
    vec![term; count].join(operator)
}

/// Runs `schema` over the input; the run must fail with status 1 (not a
/// signal) and a caret under the text.
fn refused(dir: &Path, schema: &str) -> String {
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    let output = cardinal(
        dir,
        &["run", "schema.sql", "in.csv", "--threads", "4", "--quiet"],
    );
    let stderr = failure(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains('^'), "{stderr}");
    stderr
}

/// `sum(v+v+...)` of 8,000 terms (16 KB) aborted a worker with a stack
/// overflow, and 16,000 ANDs the main thread: both are refused with the
/// nesting limit and its position.
#[test]
fn long_chains_are_refused_with_a_caret_not_a_signal() {
    let dir = dir("chains");
    let sum = format!(
        "{STREAM}CREATE SUMMARY x AS SELECT sum({}) AS total FROM s;",
        chain("v", "+", 8_000)
    );
    let stderr = refused(&dir, &sum);
    assert!(
        stderr.contains("nested more than 48 levels deep"),
        "{stderr}"
    );
    let and = format!(
        "{STREAM}CREATE SUMMARY x AS SELECT count(*) AS n FROM s WHERE {};",
        chain("v > 0", " AND ", 16_000)
    );
    let stderr = refused(&dir, &and);
    assert!(
        stderr.contains("nested more than 48 levels deep"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The deepest expressions the limit allows run on the workers: a sum of
/// 48 levels (sum( and 47 +) under a filter of 48 levels (47 AND and a
/// comparison), on four threads.
#[test]
fn the_deepest_expressions_run_on_every_worker() {
    let dir = dir("deepest");
    let schema = format!(
        "{STREAM}CREATE SUMMARY x AS SELECT sum({}) AS total, count(*) AS n FROM s WHERE {};",
        chain("v", "+", 48),
        chain("v > 0", " AND ", 48)
    );
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    let stdout = ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--threads",
            "4",
            "--quiet",
            "--json",
            "-",
        ],
    ));
    let total = 48 * ROWS * (ROWS + 1) / 2;
    assert!(stdout.contains(&format!("\"total\":{total}")), "{stdout}");
    assert!(stdout.contains(&format!("\"n\":{ROWS}")), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The keys of every JSON object in `line`, each object's separately.
fn object_keys(line: &str) -> Vec<Vec<String>> {
    let mut objects: Vec<Vec<String>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut chars = line.chars().peekable();
    let mut last_string = None;
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut text = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => text.extend(chars.next()),
                        '"' => break,
                        c => text.push(c),
                    }
                }
                last_string = Some(text);
                continue;
            }
            '{' => {
                objects.push(Vec::new());
                open.push(objects.len() - 1);
            }
            '}' => {
                open.pop();
            }
            ':' => {
                if let (Some(key), Some(&object)) = (last_string.take(), open.last()) {
                    objects[object].push(key);
                }
            }
            _ => {}
        }
        last_string = None;
    }
    objects
}

fn assert_distinct(names: &[String], context: &str) {
    for (i, name) in names.iter().enumerate() {
        assert!(
            !names[..i]
                .iter()
                .any(|other| other.eq_ignore_ascii_case(name)),
            "{name} twice in {context}: {names:?}"
        );
    }
}

/// `approx_quantile(v, 0.5, 0.5)` wrote the JSON key "p50" twice and the
/// CSV column q_p50 twice: it is refused. A summary with every kind of
/// output that adds columns writes each name once, in CSV headers (with
/// `--hll-hex`) and in JSON lines.
#[test]
fn no_summary_writes_two_columns_of_one_name() {
    let dir = dir("names");
    let stderr = refused(
        &dir,
        &format!("{STREAM}CREATE SUMMARY x AS SELECT approx_quantile(v, 0.5, 0.5) AS q FROM s;"),
    );
    assert!(stderr.contains("this rank is asked already"), "{stderr}");
    let stderr = refused(
        &dir,
        &format!(
            "{STREAM}CREATE SUMMARY x AS SELECT hll(v) AS users, count(*) AS users_lower FROM s;"
        ),
    );
    assert!(
        stderr.contains("two output columns would be called users_lower"),
        "{stderr}"
    );

    let schema = format!(
        "{STREAM}CREATE SUMMARY x AS SELECT date_trunc('day', ts) AS day, t, count(*) AS n,
           hll(v) AS users, theta(v) AS th, exact_distinct(v) AS ex, quantiles(v) AS qs,
           approx_quantile(v, 0.5, 0.9) AS q, approx_quantile(v, 0.25) AS q25, topk(t, 3) AS top
         FROM s GROUP BY day, t;"
    );
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    let stdout = ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--threads",
            "4",
            "--quiet",
            "--hll-hex",
            "--out",
            "out",
            "--json",
            "-",
        ],
    ));
    let mut lines = 0;
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        for keys in object_keys(line) {
            assert_distinct(&keys, line);
        }
        lines += 1;
    }
    assert_eq!(lines, 9, "three days by three texts: {stdout}");
    let mut files = 0;
    for entry in std::fs::read_dir(dir.join("out/x")).expect("per-day files") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("csv");
        let header: Vec<String> = text
            .lines()
            .next()
            .expect("a header")
            .split(',')
            .map(str::to_owned)
            .collect();
        assert!(header.len() > 20, "{header:?}");
        assert_distinct(&header, "a CSV header");
        files += 1;
    }
    assert_eq!(files, 3);
    let _ = std::fs::remove_dir_all(&dir);
}
