//! `cardinal run` within its limits: the memory budget (`--memory-max`),
//! events far ahead of the stream (`--future-tolerance`), and the most
//! days one summary may write as files (`OUTPUT_DAYS_MAX`). Each limit
//! gives the same outcome on any thread count.

mod common;

use std::fmt::Write as _;
use std::path::PathBuf;

use common::{cardinal, csv_lines, ok};

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("limits", name)
}

/// 30,000 groups of theta, quantiles and topk states hold well over 16
/// MiB: under `--memory-max 16MiB` the run stops with an error naming the
/// budget and the summary, writes nothing, and never dies of an
/// allocation failure; with room, the same run passes.
#[test]
fn the_memory_budget_stops_a_run_with_an_error() {
    let dir = dir("memory-max");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (name TEXT, user_id BIGINT, v DOUBLE) WITH (format = 'csv');
         CREATE SUMMARY small AS SELECT count(*) AS n FROM t;
         CREATE SUMMARY wide AS SELECT name, theta(user_id) AS users,
           quantiles(v) AS v, topk(user_id, 5) AS top FROM t GROUP BY name;",
    )
    .expect("schema");
    // Six files dealt out to the workers, 10,000 names each, half shared
    // with the next file: 30,000 names in all.
    let mut files = Vec::new();
    for file in 0..6u32 {
        let mut input = String::new();
        for i in 0..10_000u32 {
            let name = (file * 5_000 + i) % 30_000;
            let _ = writeln!(input, "n{name},{},{}.5", i * 7 + file, i % 100);
        }
        let path = format!("t{file}.csv");
        std::fs::write(dir.join(&path), input).expect("input");
        files.push(path);
    }
    for threads in ["1", "2", "3"] {
        let out = format!("out{threads}");
        let mut args = vec!["run", "schema.sql"];
        args.extend(files.iter().map(String::as_str));
        args.extend(["--quiet", "--threads", threads, "--out", &out]);
        let output = cardinal(&dir, &[&args[..], &["--memory-max", "16MiB"]].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{threads} threads: {stderr}");
        assert!(
            stderr.contains("the rollups reached --memory-max (16.0 MiB): summary wide holds"),
            "{threads} threads: {stderr}"
        );
        assert!(!stderr.contains("memory allocation"), "{stderr}");
        assert!(
            !dir.join(&out).join("wide").exists(),
            "{threads} threads wrote {out}"
        );
        // With room the run passes and writes every group.
        ok(&cardinal(
            &dir,
            &[&args[..], &["--memory-max", "4GiB"]].concat(),
        ));
        assert_eq!(csv_lines(&dir.join(&out), "wide").len(), 30_000);
    }
    // A budget below 1 MiB, or not a size, is refused before the run.
    for bad in ["1000", "12 parsecs"] {
        let output = cardinal(&dir, &["run", "schema.sql", "t0.csv", "--memory-max", bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {output:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--retention-days 7` over twenty days in time order, with a few events
/// of `9999-12-31` among them (one the first line of a file, so the first
/// record some worker sees): they are dropped (counted, or their group
/// evicted), the window is that of the stream (days 13 to 20), the answer
/// is the same on any thread count, and `--strict` fails on the drops. It
/// used to keep the year 9999 alone, with status 0.
#[test]
fn a_few_future_timestamps_cannot_evict_the_stream() {
    let dir = dir("future");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, v BIGINT) WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY daily AS SELECT date_trunc('day', ts) AS day, count(*) AS n
           FROM t GROUP BY day;",
    )
    .expect("schema");
    let mut files = Vec::new();
    for file in 0..4u32 {
        let mut input = String::new();
        if file == 2 {
            input.push_str("9999-12-31T00:00:00Z,1\n");
        }
        for day in file * 5 + 1..=file * 5 + 5 {
            for i in 0..2_000 {
                let _ = writeln!(input, "2026-10-{day:02}T{:02}:00:00Z,{i}", i % 24);
                if day == 3 && i == 1_000 {
                    input.push_str("9999-12-31T23:00:00Z,1\n");
                }
            }
        }
        let path = format!("t{file}.csv");
        std::fs::write(dir.join(&path), input).expect("input");
        files.push(path);
    }
    let want: Vec<String> = (13..=20)
        .map(|day| format!("2026-10-{day:02}T00:00:00Z,2000"))
        .collect();
    for threads in ["1", "2", "3"] {
        let out = format!("out{threads}");
        let mut args = vec!["run", "schema.sql"];
        args.extend(files.iter().map(String::as_str));
        args.extend(["--retention-days", "7", "--threads", threads, "--quiet"]);
        let output = cardinal(&dir, &[&args[..], &["--out", &out]].concat());
        ok(&output);
        assert_eq!(
            csv_lines(&dir.join(&out), "daily"),
            want,
            "{threads} threads"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("further ahead of the stream than --future-tolerance"),
            "{threads} threads: {stderr}"
        );
        let strict = cardinal(&dir, &[&args[..], &["--strict"]].concat());
        assert_eq!(
            strict.status.code(),
            Some(3),
            "{threads} threads: {strict:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A summary whose answer spans more days than `OUTPUT_DAYS_MAX` (36,600)
/// cannot write a file per day under `--out`: the run fails naming it and
/// writes nothing; JSON lines, one stream, still work.
#[test]
fn a_summary_cannot_write_more_days_than_the_cap() {
    let dir = dir("days");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, v BIGINT) WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY daily AS SELECT date_trunc('day', ts) AS day, count(*) AS n
           FROM t GROUP BY day;
         CREATE SUMMARY total AS SELECT count(*) AS n FROM t;",
    )
    .expect("schema");
    // One record a day from 1900-01-01 for 36,601 days.
    let mut input = String::new();
    let (mut year, mut month, mut day) = (1900, 1, 1);
    for _ in 0..36_601 {
        let _ = writeln!(input, "{year:04}-{month:02}-{day:02}T12:00:00Z,1");
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let days_in_month = match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        day += 1;
        if day > days_in_month {
            (day, month) = (1, month + 1);
            if month > 12 {
                (month, year) = (1, year + 1);
            }
        }
    }
    std::fs::write(dir.join("t.csv"), input).expect("input");
    for threads in ["1", "2"] {
        let args = [
            "run",
            "schema.sql",
            "t.csv",
            "--quiet",
            "--threads",
            threads,
        ];
        let output = cardinal(&dir, &[&args[..], &["--out", "out"]].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{threads} threads: {stderr}");
        assert!(
            stderr.contains("summary daily spans more than 36600 days (OUTPUT_DAYS_MAX)"),
            "{threads} threads: {stderr}"
        );
        assert!(
            !dir.join("out/daily").exists(),
            "{threads} threads wrote files"
        );
        ok(&cardinal(
            &dir,
            &[&args[..], &["--json", "all.json"]].concat(),
        ));
        let json = std::fs::read_to_string(dir.join("all.json")).expect("json");
        assert_eq!(json.lines().count(), 36_601 + 1, "{threads} threads");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
