//! End-to-end tests of `cardinal run`: generated impressions through three
//! summaries, checked against the generator's exact truth and against the
//! same run on another thread count.

mod common;

use std::path::{Path, PathBuf};

use common::{cardinal, ok};

const SCHEMA: &str = "
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');

CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users,
         exact_distinct(user_id) AS exact_users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;

CREATE SUMMARY providers AS
  SELECT provider, hll(user_id) AS users, exact_distinct(user_id) AS exact_users
  FROM impressions WHERE kind = 'impression' GROUP BY provider;
";

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("run", name)
}

/// Reads `out/<summary>/*.csv` into sorted lines (headers dropped).
fn csv_lines(dir: &Path, summary: &str) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(summary))
        .expect("summary folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        lines.extend(text.lines().skip(1).map(str::to_owned));
    }
    lines
}

#[test]
fn run_matches_the_truth_and_any_thread_count() {
    let dir = dir("truth");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    ok(&cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "60000",
            "--users",
            "20000",
            "--days",
            "3",
            "-o",
            "imp.csv",
            "--truth",
            "truth.json",
        ],
    ));
    ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "imp.csv",
            "--threads",
            "1",
            "--out",
            "one",
            "--quiet",
        ],
    ));
    ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "imp.csv",
            "--threads",
            "3",
            "--out",
            "three",
            "--quiet",
        ],
    ));
    for summary in ["reach", "providers"] {
        let (one, three) = (
            csv_lines(&dir.join("one"), summary),
            csv_lines(&dir.join("three"), summary),
        );
        assert!(!one.is_empty());
        // Exact aggregates and HLL estimates are identical for any split.
        assert_eq!(one, three, "{summary}");
    }
    // The exact set and the truth agree per provider; the HLL interval holds it.
    let truth = std::fs::read_to_string(dir.join("truth.json")).expect("truth");
    for line in csv_lines(&dir.join("one"), "providers") {
        let f: Vec<&str> = line.split(',').collect();
        // provider, users, lower, upper, exact_users, exact lower, exact upper
        let (provider, lower, upper, exact): (&str, f64, f64, &str) = (
            f[0],
            f[2].parse().expect("lower"),
            f[3].parse().expect("upper"),
            f[4],
        );
        let needle = format!("\"{provider}\": {exact}");
        assert!(truth.contains(&needle), "truth lacks {needle}: {truth}");
        let exact: f64 = exact.parse().expect("exact");
        assert!(lower <= exact && exact <= upper, "{line}");
    }
    // Uniques by state by day: the exact set equals the truth in every group.
    let mut checked = 0;
    for line in csv_lines(&dir.join("one"), "reach") {
        // day, state, events, revenue, users, lower, upper, exact_users, ...
        let f: Vec<&str> = line.split(',').collect();
        let day = &f[0][..10];
        let day_line = truth
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("\"{day}\"")))
            .unwrap_or_else(|| panic!("no truth for {day}"));
        let needle = format!("\"{}\": {}", f[1], f[7]);
        assert!(day_line.contains(&needle), "{day}: truth lacks {needle}");
        checked += 1;
    }
    assert!(checked >= 3 * 50, "{checked} groups");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_are_reported_counted_and_strict_fails() {
    let dir = dir("rejects");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    std::fs::write(
        dir.join("bad.csv"),
        "ts,user_id,kind,state,site,provider,campaign,revenue\n\
         2026-11-01T00:00:01Z,1,impression,CA,s,alpha,c,0.5\n\
         2026-11-01T00:00:02Z,not-a-number,impression,CA,s,alpha,c,0.5\n\
         2026-11-01T00:00:03Z,2,impression,CA\n\
         2026-11-01T00:00:04Z,3,impression,NY,s,beta,c,0.25\n",
    )
    .expect("input");
    let output = cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "bad.csv",
            "--rejects",
            "rejects.txt",
            "--strict",
        ],
    );
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("4 records") || stderr.contains("3 records"),
        "{stderr}"
    );
    assert!(stderr.contains("rejected"), "{stderr}");
    let rejects = std::fs::read_to_string(dir.join("rejects.txt")).expect("rejects file");
    assert!(rejects.contains("bad.csv:3"), "{rejects}");
    assert!(rejects.contains("bad.csv:4"), "{rejects}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("CA") && stdout.contains("NY"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn schema_errors_point_at_the_text() {
    let dir = dir("schema");
    std::fs::write(
        dir.join("bad.sql"),
        SCHEMA.replace("state,\n         count", "sate,\n         count"),
    )
    .expect("schema");
    std::fs::write(dir.join("empty.csv"), "").expect("input");
    let output = cardinal(&dir, &["run", "bad.sql", "empty.csv"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown column sate"), "{stderr}");
    assert!(stderr.contains('^'), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_record_one_summary_rejects_is_folded_into_none() {
    // `plain` never reads revenue, `money` does: the row with a bad revenue
    // must be counted by neither, so that both summaries describe the same
    // records.
    let dir = dir("all-or-none");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM s (ts TIMESTAMP, state TEXT, revenue DOUBLE) WITH (format = 'csv', header = true, time = 'ts');
         CREATE SUMMARY plain AS SELECT state, count(*) AS n FROM s GROUP BY state;
         CREATE SUMMARY money AS SELECT state, count(*) AS n, sum(revenue) AS r FROM s GROUP BY state;",
    )
    .expect("schema");
    std::fs::write(
        dir.join("in.csv"),
        "ts,state,revenue\n\
         2026-11-01T00:00:01Z,CA,0.5\n\
         2026-11-01T00:00:02Z,CA,zero\n\
         2026-11-01T00:00:03Z,CA,1.5\n",
    )
    .expect("input");
    let output = cardinal(&dir, &["run", "schema.sql", "in.csv", "--json", "-"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for line in lines {
        assert!(line.contains("\"n\":2"), "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compressed file, and stdin, cannot be split into byte ranges: every
/// worker takes chunks of it in turn. The results, the rejects and the
/// reject lines must be those of one worker reading the plain file.
#[test]
fn a_compressed_input_or_stdin_is_shared_by_every_worker() {
    use std::io::Write;
    let dir = dir("shared");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    ok(&cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "40000",
            "--users",
            "10000",
            "--days",
            "2",
            "-o",
            "imp.csv",
        ],
    ));
    // Two bad lines far apart, so that they land in different chunks
    // (a reader's chunks are 512 KiB; the file is ~3.5 MB).
    let text = std::fs::read_to_string(dir.join("imp.csv")).expect("csv");
    let mut lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 30_000);
    lines.insert(
        5_000,
        "2026-11-01T00:00:02Z,not-a-number,impression,CA,s,alpha,c,0.5",
    );
    lines.insert(30_000, "2026-11-01T00:00:03Z,2,impression,CA");
    let text = lines.join("\n") + "\n";
    std::fs::write(dir.join("imp.csv"), &text).expect("csv");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(dir.join("imp.csv.gz")).expect("gz"),
        flate2::Compression::fast(),
    );
    gz.write_all(text.as_bytes()).expect("gzip");
    gz.finish().expect("gzip");

    let run = |input: &str, threads: &str, out: &str| {
        let output = cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                input,
                "--threads",
                threads,
                "--out",
                out,
                "--rejects",
                &format!("{out}.rejects"),
                "--quiet",
            ],
        );
        ok(&output);
        let mut rejects: Vec<String> = std::fs::read_to_string(dir.join(format!("{out}.rejects")))
            .expect("rejects file")
            .lines()
            .map(|l| {
                l.replace("imp.csv.gz", "imp.csv")
                    .replace("<stdin>", "imp.csv")
            })
            .collect();
        rejects.sort();
        rejects
    };
    let plain = run("imp.csv", "1", "plain");
    assert_eq!(plain.len(), 2, "{plain:?}");
    assert!(
        plain.iter().any(|l| l.contains("imp.csv:5001")),
        "{plain:?}"
    );
    assert_eq!(run("imp.csv.gz", "3", "gz"), plain);
    let piped = {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cardinal"))
            .args([
                "run",
                "schema.sql",
                "-",
                "--threads",
                "2",
                "--out",
                "stdin",
                "--rejects",
                "stdin.rejects",
                "--quiet",
            ])
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cardinal runs");
        let mut stdin = child.stdin.take().expect("stdin");
        let bytes = std::fs::read(dir.join("imp.csv.gz")).expect("gz");
        let writer = std::thread::spawn(move || stdin.write_all(&bytes).expect("pipe"));
        ok(&child.wait_with_output().expect("exit"));
        writer.join().expect("writer");
        std::fs::read_to_string(dir.join("stdin.rejects"))
            .expect("rejects file")
            .lines()
            .count()
    };
    assert_eq!(piped, 2);
    for summary in ["reach", "providers"] {
        let plain = csv_lines(&dir.join("plain"), summary);
        assert!(!plain.is_empty());
        assert_eq!(csv_lines(&dir.join("gz"), summary), plain, "{summary}");
        assert_eq!(csv_lines(&dir.join("stdin"), summary), plain, "{summary}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_printed_table_is_a_head_of_the_rows() {
    let dir = dir("head");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut text = String::from("ts,user_id,kind,state,site,provider,campaign,revenue\n");
    for (i, state) in ["AK", "AL", "AZ", "CA", "NY"].iter().enumerate() {
        text.push_str(&format!(
            "2026-11-01T00:00:0{i}Z,{i},impression,{state},s,alpha,c,0.5\n"
        ));
    }
    std::fs::write(dir.join("five.csv"), text).expect("input");
    let head = ok(&cardinal(
        &dir,
        &["run", "schema.sql", "five.csv", "--max-rows", "2"],
    ));
    assert!(head.contains("AK") && head.contains("AL"), "{head}");
    assert!(!head.contains("NY"), "{head}");
    assert!(head.contains("... 3 more rows"), "{head}");
    assert!(head.contains("--max-rows 0 prints every row"), "{head}");
    let all = ok(&cardinal(
        &dir,
        &["run", "schema.sql", "five.csv", "--max-rows", "0"],
    ));
    assert!(all.contains("NY") && !all.contains("more row"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}
