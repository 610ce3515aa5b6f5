//! End-to-end test of `cardinal demo`: a small run in a temporary directory,
//! checked against the generator's truth file and the files it writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Small enough for a debug build, large enough that every provider pair
/// with a designed overlap shares hundreds of users.
const EVENTS: &str = "200000";
const DAYS: usize = 30;

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("cardinal-demo-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The numbers in a printed cell: `1,505 (1,389..1,625)` -> [1505, 1389, 1625].
fn numbers(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == ',' || c == '.'))
        .flat_map(|part| part.split(".."))
        .map(|n| n.replace(',', ""))
        .filter(|n| !n.is_empty())
        .map(|n| n.parse().expect("a number"))
        .collect()
}

/// `"both": N` per provider pair from truth.json's `provider_overlaps`
/// (one object per line, as the generator writes it).
fn true_overlaps(truth: &str) -> BTreeMap<String, u64> {
    let mut pairs = BTreeMap::new();
    for line in truth.lines().filter(|l| l.contains("\"both\"")) {
        let field = |key: &str| {
            let start = line.find(&format!("\"{key}\": ")).expect(key) + key.len() + 4;
            line[start..]
                .split([',', '}'])
                .next()
                .expect("value")
                .trim_matches('"')
                .to_owned()
        };
        pairs.insert(
            format!("{} ∩ {}", field("a"), field("b")),
            field("both").parse().expect("count"),
        );
    }
    pairs
}

#[test]
fn demo_prints_the_truth_inside_its_intervals_and_one_file_per_day() {
    let dir = temp_dir("small");
    let output = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["demo", "--events", EVENTS, "--no-progress", "--out"])
        .arg(&dir)
        .output()
        .expect("cardinal runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "exit {:?}\n{out}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for section in [
        "REACH",
        "AUDIENCES",
        "OVERLAP",
        "REVENUE QUANTILES",
        "TOP SITES",
        "THROUGHPUT",
        "FILES",
    ] {
        assert!(out.contains(section), "missing {section}:\n{out}");
    }

    // Every provider pair: the printed truth is the generator's, and it lies
    // inside the printed 95% interval. The seed is fixed, so this is one
    // deterministic draw: for the five pairs with a designed overlap each
    // interval misses with probability about 5%, so another seed may
    // legitimately miss one (1 - 0.95^5 = 23%); the five disjoint pairs
    // print "below detection (0..x)", which always holds their 0.
    let truth = std::fs::read_to_string(dir.join("truth.json")).expect("truth.json");
    let overlaps = true_overlaps(&truth);
    assert_eq!(overlaps.len(), 10, "{truth}");
    for (pair, &shared) in &overlaps {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(pair.as_str()))
            .unwrap_or_else(|| panic!("no line for {pair}:\n{out}"));
        let rest = &line.trim_start()[pair.len()..];
        let cells = numbers(rest);
        let (lower, upper, printed_truth) = if rest.contains("below detection") {
            (0.0, cells[1], cells[2])
        } else {
            (cells[1], cells[2], cells[3])
        };
        assert_eq!(printed_truth, shared as f64, "{line}");
        assert!(
            lower <= shared as f64 && shared as f64 <= upper,
            "{pair}: truth {shared} outside {lower}..{upper}\n{line}"
        );
        assert!(line.ends_with("yes"), "{line}");
    }
    // The audiences' printed truth is the generator's, too.
    for provider in ["alpha", "beta", "gamma", "delta", "epsilon"] {
        let start = truth.find(&format!("\"{provider}\": ")).expect(provider) + provider.len() + 4;
        let users: f64 = truth[start..]
            .split([',', '}'])
            .next()
            .expect("count")
            .parse()
            .expect("number");
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{provider} ")) && l.contains('('))
            .unwrap_or_else(|| panic!("no audience line for {provider}"));
        assert_eq!(numbers(line)[3], users, "{line}");
    }

    // Per-day files: every day in exactly one file, named after it, holding
    // only that day's rows.
    for summary in ["reach", "providers", "top_sites"] {
        let files = csv_files(&dir.join(summary));
        assert_eq!(files.len(), DAYS, "{summary}: {files:?}");
        for (i, file) in files.iter().enumerate() {
            let day = file
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            assert_eq!(day, format!("2026-11-{:02}", i + 1), "{file:?}");
            let text = std::fs::read_to_string(file).expect("readable");
            assert!(text.lines().count() > 1, "{file:?} has no rows");
            for row in text.lines().skip(1) {
                assert!(
                    row.starts_with(&format!("{day}T00:00:00Z,")),
                    "{file:?}: {row}"
                );
            }
        }
    }
    assert!(dir.join("audience/all.csv").is_file());
    assert!(dir.join("schema.sql").is_file());
    // Without --keep-events the generated events are removed.
    assert!(!dir.join("impressions.csv").exists());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

fn csv_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn demo_refuses_too_few_events() {
    let output = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["demo", "--events", "10", "--no-progress", "--out"])
        .arg(temp_dir("tiny"))
        .output()
        .expect("cardinal runs");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--events must be at least"));
}

#[test]
fn demo_serve_kills_the_server_midway_and_loses_nothing() {
    let dir = temp_dir("serve");
    let output = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["demo", "serve", "--events", EVENTS, "--out"])
        .arg(&dir)
        .output()
        .expect("cardinal runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "3. SIGKILL the server after",
        "4. start it again: recovered from",
        "(no gap)",
        "SIGTERM: stopped; snapshot",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in\n{stdout}");
    }
    // Exact counts equal the generator's truth.
    let line = stdout
        .lines()
        .find(|l| l.contains("impressions counted by the server"))
        .expect("the impressions line");
    assert!(line.ends_with("exact"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
