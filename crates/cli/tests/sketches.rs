//! Sketches out, mergeable downstream: `cardinal run --sketch-bytes`
//! writes each hour's KLL and Theta state as its Apache DataSketches
//! image, and the `datasketches` Python package reads and merges the
//! hours into the day: its count, percentiles and audience agree with the
//! truth within the sketches' own error. Needs `CARDINAL_PYTHON` (a
//! Python with `datasketches`); with `CARDINAL_REQUIRE_PYTHON=1` (CI) a
//! missing one fails instead of skipping.

mod common;

use std::fmt::Write as _;
use std::process::Command;

use common::{cardinal, ok, scratch_dir};

const SCHEMA: &str = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY hourly AS
  SELECT date_trunc('hour', ts) AS hour, approx_quantile(revenue, 0.5, 0.99) AS rev,
         theta(user_id) AS th
  FROM s GROUP BY hour;
";

/// A Python that has `datasketches`, or `None` (then the test says why).
fn python() -> Option<String> {
    let python = std::env::var("CARDINAL_PYTHON").ok();
    let works = python.as_deref().is_some_and(|p| {
        Command::new(p)
            .args(["-c", "import datasketches"])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !works {
        assert!(
            std::env::var_os("CARDINAL_REQUIRE_PYTHON").is_none(),
            "CARDINAL_PYTHON ({python:?}) has no datasketches package"
        );
        eprintln!("skipped: set CARDINAL_PYTHON to a Python with datasketches");
        return None;
    }
    python
}

#[test]
fn datasketches_merges_the_hourly_sketches_into_the_day() {
    let Some(python) = python() else { return };
    let dir = scratch_dir("sketches", "merge");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    // 50,000 events over one day's 24 hours; revenue uniform in
    // [0, 1000) by a fixed permutation, 30,000 users.
    let events = 50_000u64;
    let mut csv = String::from("ts,user_id,revenue\n");
    let mut revenues = Vec::new();
    let mut users = std::collections::HashSet::new();
    for i in 0..events {
        let revenue = (i * 7919 % events) as f64 / 50.0;
        let user = i * 2_654_435_761 % 30_000;
        revenues.push(revenue);
        users.insert(user);
        let _ = writeln!(
            csv,
            "2026-11-01T{:02}:{:02}:00Z,{user},{revenue}",
            i % 24,
            i % 60
        );
    }
    std::fs::write(dir.join("events.csv"), csv).expect("events");
    revenues.sort_by(f64::total_cmp);
    for encoding in ["hex", "base64"] {
        let out = format!("out-{encoding}");
        ok(&cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                "events.csv",
                "--out",
                &out,
                "--sketch-bytes",
                encoding,
            ],
        ));
        let day = dir.join(&out).join("hourly").join("2026-11-01.csv");
        let text = std::fs::read_to_string(&day).expect("the day's file");
        assert!(
            text.lines()
                .next()
                .expect("header")
                .ends_with(",rev_sketch,th,th_lower,th_upper,th_sketch"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 25, "24 hours and a header");
        let merged = Command::new(&python)
            .arg(env!("CARGO_MANIFEST_DIR").to_owned() + "/tests/sketches/merge.py")
            .arg(&day)
            .arg(encoding)
            .output()
            .expect("python runs");
        assert!(
            merged.status.success(),
            "{}",
            String::from_utf8_lossy(&merged.stderr)
        );
        let fields: Vec<f64> = String::from_utf8_lossy(&merged.stdout)
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        let [n, p50, p99, eps, theta, lower, upper] = fields[..] else {
            panic!("{fields:?}");
        };
        assert_eq!(n, events as f64, "every value, once");
        // Each merged quantile's true rank lies within the rank error.
        for (rank, value) in [(0.5, p50), (0.99, p99)] {
            let below = revenues.partition_point(|&r| r < value) as f64 / events as f64;
            assert!(
                (below - rank).abs() <= eps,
                "{encoding}: p{rank} = {value} has rank {below}, eps {eps}"
            );
        }
        let truth = users.len() as f64;
        assert!(
            lower <= truth && truth <= upper,
            "{encoding}: {truth} outside [{lower}, {upper}] ({theta})"
        );
    }
}
