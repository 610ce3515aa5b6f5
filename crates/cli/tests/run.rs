//! End-to-end tests of `cardinal run`: generated impressions through three
//! summaries, checked against the generator's exact truth and against the
//! same run on another thread count.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use common::{cardinal, csv_lines, gzip, ok};

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

/// Lines of `n,word`, counted and summed: which rows were read, and that
/// none was read twice, shows in two numbers.
const COUNT_AND_SUM: &str = "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
CREATE SUMMARY total AS SELECT count(*) AS n, sum(n) AS s FROM t;";

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("run", name)
}

/// Runs `schema.sql` over `imp.csv` in `dir` on `threads` workers,
/// writing the per-day files under `dir/out`.
fn run_into(dir: &Path, threads: &str, out: &str) {
    ok(&cardinal(
        dir,
        &[
            "run",
            "schema.sql",
            "imp.csv",
            "--threads",
            threads,
            "--out",
            out,
            "--quiet",
        ],
    ));
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
    run_into(&dir, "1", "one");
    run_into(&dir, "3", "three");
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
    // Two folded; the parser's reject and the summaries' counted apart.
    assert!(stderr.contains("2 records,"), "{stderr}");
    assert!(stderr.contains("rejected"), "{stderr}");
    let rejects = std::fs::read_to_string(dir.join("rejects.txt")).expect("rejects file");
    // The parser's rejects and the summaries' count columns alike, from 1;
    // the summaries' also name theirs.
    let mut lines: Vec<&str> = rejects.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "bad.csv:3: reach: column 2 (user_id): not a BIGINT",
            "bad.csv:4: column 5 (site): fewer fields than columns",
        ],
        "{rejects}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("CA") && stdout.contains("NY"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With one worker, rejects come out in line order: the parser's (a
/// record cut short or too long) among the summaries' (a bad value), on
/// each way a batch is folded (an aggregate at a time, from parsed
/// columns row by row, from the text row by row).
#[test]
fn rejects_come_out_in_line_order() {
    let dir = dir("reject-order");
    let stream = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, state TEXT, revenue DOUBLE)
        WITH (format = 'csv', header = true, time = 'ts');";
    let schemas = [
        // user_id read twice, plain columns: an aggregate at a time.
        "CREATE SUMMARY a AS SELECT state, hll(user_id) AS u FROM s GROUP BY state;
         CREATE SUMMARY b AS SELECT state, max(user_id) AS m, sum(revenue) AS r FROM s GROUP BY state;",
        // An expression: parsed columns, row by row.
        "CREATE SUMMARY a AS SELECT state, hll(user_id) AS u FROM s GROUP BY state;
         CREATE SUMMARY b AS SELECT state, max(user_id) AS m, sum(revenue * 2) AS r FROM s GROUP BY state;",
        // Every column read once: row by row from the text.
        "CREATE SUMMARY a AS SELECT state, hll(user_id) AS u, sum(revenue) AS r FROM s GROUP BY state;",
    ];
    std::fs::write(
        dir.join("in.csv"),
        "ts,user_id,state,revenue\n\
         2026-11-01T00:00:01Z,1,CA,0.5\n\
         2026-11-01T00:00:02Z,x,CA,0.5\n\
         2026-11-01T00:00:03Z,2,CA\n\
         2026-11-01T00:00:04Z,3,NY,1e999\n\
         2026-11-01T00:00:05Z,4,NY,1,2\n\
         2026-11-01T00:00:06Z,5,NY,0.25\n\
         2026-11-01T00:00:07Z,6\n",
    )
    .expect("input");
    for (n, summaries) in schemas.iter().enumerate() {
        std::fs::write(dir.join("schema.sql"), format!("{stream}\n{summaries}")).expect("schema");
        let output = cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                "in.csv",
                "--threads",
                "1",
                "--rejects",
                "rejects.txt",
                "--quiet",
            ],
        );
        ok(&output);
        let rejects = std::fs::read_to_string(dir.join("rejects.txt")).expect("rejects file");
        let lines: Vec<&str> = rejects
            .lines()
            .map(|line| line.split(':').nth(1).expect("a line number"))
            .collect();
        assert_eq!(lines, ["3", "4", "5", "6", "8"], "schema {n}:\n{rejects}");
        assert!(
            rejects.contains(": column 4 (revenue): out of range for the declared type"),
            "schema {n}:\n{rejects}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Output paths that cannot be written fail before any input is read
/// (here the input does not even exist), not after the run; and checking
/// a file that exists leaves it as it was.
#[test]
fn unwritable_outputs_fail_before_the_run() {
    let dir = dir("outputs");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    std::fs::write(dir.join("a-file"), "").expect("file");
    std::fs::write(dir.join("old.json"), "keep").expect("file");
    for (flag, path, says) in [
        ("--out", "a-file", "cannot write into a-file"),
        (
            "--json",
            "no/such/dir/x.json",
            "cannot write no/such/dir/x.json",
        ),
        ("--attributions", ".", "cannot write .: it is a folder"),
        ("--chains-snapshot", "a-file", "cannot write into a-file"),
    ] {
        let output = cardinal(&dir, &["run", "schema.sql", "missing.csv", flag, path]);
        assert_eq!(output.status.code(), Some(1), "{flag}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{flag}: {stderr}");
    }
    let output = cardinal(
        &dir,
        &["run", "schema.sql", "missing.csv", "--json", "old.json"],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing.csv"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.join("old.json")).expect("kept"),
        "keep"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stdin can be read once: naming it twice is a mistake to report, not
/// a second, empty input.
#[test]
fn stdin_named_twice_is_an_error() {
    let dir = dir("stdin-twice");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let output = cardinal(&dir, &["run", "schema.sql", "-", "-"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("stdin (-) is named more than once"),
        "{stderr}"
    );
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
    // (a reader's chunks are 256 KiB; the file is ~3.5 MB).
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
    std::fs::write(dir.join("imp.csv.gz"), gzip(text.as_bytes())).expect("gz");

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

/// A directory stands for every file under it, in name order (compressed
/// ones too), subdirectories included and names starting with `.` left
/// out; a directory with no file is an error that names it.
#[test]
fn a_directory_is_read_file_by_file() {
    let dir = dir("directory");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    let logs = dir.join("logs");
    std::fs::create_dir_all(logs.join("2026-11-02")).expect("dirs");
    std::fs::create_dir_all(dir.join("empty")).expect("dirs");
    std::fs::write(logs.join("a.csv"), "1,a\n2,b\n").expect("input");
    std::fs::write(logs.join("2026-11-02/b.csv"), "30,c\n").expect("input");
    std::fs::write(logs.join("c.csv.gz"), gzip(b"400,d\n")).expect("input");
    // An editor's leftover: rejected on every line if it were read.
    std::fs::write(logs.join(".a.csv.swp"), "not,a,record\n").expect("input");
    let output = cardinal(
        &dir,
        &["run", "schema.sql", "logs", "--json", "-", "--strict"],
    );
    let stdout = ok(&output);
    assert!(stdout.contains(r#""n":4,"s":433"#), "{stdout}");
    let stderr = common::failure(&cardinal(&dir, &["run", "schema.sql", "empty"]));
    assert!(
        stderr.contains("empty: the directory holds no file to read"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compressed input cut short (a log shipper's file mid-write) does not
/// stop the run: what could be read of it is folded, in order, the rest
/// is one reject that is always shown, and the other inputs are read
/// whole; `--strict` fails such a run. The same from stdin, which workers
/// read in turns.
#[test]
fn a_cut_compressed_input_is_read_up_to_the_cut() {
    use std::io::Write;
    let dir = dir("cut-short");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    let good: String = (0..1000).map(|i| format!("{i},w\n")).collect();
    std::fs::write(dir.join("good.csv"), good).expect("input");
    let text: String = (0..200_000)
        .map(|i| format!("{i},word{}\n", i % 977))
        .collect();
    let mut bytes = gzip(text.as_bytes());
    bytes.truncate(bytes.len() / 2);
    std::fs::write(dir.join("cut.csv.gz"), &bytes).expect("input");
    // The answer's count and sum: the good file's 0..1000, then the cut
    // file's first `k` lines, 0..k, none skipped.
    let check = |output: &std::process::Output, good: i64| {
        let stdout = ok(output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stdout.lines().next().expect("a JSON line");
        let number = |key: &str| -> i64 {
            let at = line.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
            line[at..]
                .split([',', '}'])
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a number")
        };
        let k = number("n") - good;
        assert!(
            k > 1000 && k < 200_000,
            "{k} lines of the cut file: {stderr}"
        );
        assert_eq!(
            number("s"),
            good * (good - 1) / 2 + k * (k - 1) / 2,
            "{line}"
        );
        assert!(
            stderr.contains("cut.csv.gz") && stderr.contains("the rest of this input is not read"),
            "{stderr}"
        );
        assert!(
            stderr.contains("1 rejected (input unreadable past this point: 1)"),
            "{stderr}"
        );
    };
    for threads in ["1", "2"] {
        let args = [
            "run",
            "schema.sql",
            "good.csv",
            "cut.csv.gz",
            "--json",
            "-",
            "--threads",
            threads,
        ];
        check(&cardinal(&dir, &args), 1000);
        let strict = cardinal(&dir, &[&args[..], &["--strict"]].concat());
        assert_eq!(strict.status.code(), Some(3), "{strict:?}");
        // The rejects file has the cut too: it is an input's last reject,
        // after which no chunk comes to write it out.
        let rejects = format!("rejects-{threads}.txt");
        ok(&cardinal(
            &dir,
            &[&args[..], &["--rejects", &rejects]].concat(),
        ));
        let written = std::fs::read_to_string(dir.join(&rejects)).expect("rejects file");
        assert!(written.contains("cut.csv.gz: incomplete"), "{written}");
    }
    // So has a line too long at the end of an input.
    let long = format!(
        "1,a\n2,{}\n",
        "x".repeat(cardinal_source::LINE_BYTES_MAX + 10)
    );
    std::fs::write(dir.join("long.csv"), long).expect("input");
    let output = cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "long.csv",
            "--quiet",
            "--rejects",
            "long.txt",
        ],
    );
    ok(&output);
    // The skipped line was read: the megabytes count it (1,048,597 bytes
    // in all, not the 4 of the line kept).
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("1 records, 1.0 MB in"), "{stderr}");
    let written = std::fs::read_to_string(dir.join("long.txt")).expect("rejects file");
    assert!(
        written.contains("long.csv:2: line longer than"),
        "{written}"
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["run", "schema.sql", "-", "--json", "-", "--threads", "2"])
        .current_dir(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cardinal runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&bytes).expect("pipe"));
    let output = child.wait_with_output().expect("cardinal finishes");
    writer.join().expect("writer");
    let stderr = String::from_utf8_lossy(&output.stderr).replace("<stdin>", "cut.csv.gz");
    check(
        &std::process::Output {
            stderr: stderr.into_bytes(),
            ..output
        },
        0,
    );
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
    // Each table is titled with its group count: five states, one
    // provider on one day.
    assert!(head.contains("reach (5 groups)"), "{head}");
    assert!(head.contains("providers (1 group)"), "{head}");
    let all = ok(&cardinal(
        &dir,
        &["run", "schema.sql", "five.csv", "--max-rows", "0"],
    ));
    assert!(all.contains("NY") && !all.contains("more row"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The typed columns of a text batch (BIGINT, DOUBLE, TIMESTAMP) folded
/// into count, sum, min, max and exact sets, checked against an oracle
/// that splits the lines and parses the numbers with the standard
/// library. Every typed column is read more than once, so the batch is
/// parsed a column at a time; NULLs and unparsable values go through the
/// record path, so both paths meet the same oracle. The same rows as
/// NDJSON meet it too.
#[test]
fn typed_text_columns_match_a_naive_oracle() {
    use std::collections::{BTreeMap, BTreeSet};
    const SCHEMA: &str = "
CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT, revenue DOUBLE)
  WITH (FORMAT, time = 'ts');
CREATE SUMMARY money AS
  SELECT date_trunc('day', ts) AS day, state, count(*) AS n, count(revenue) AS nr,
         sum(revenue) AS r, min(revenue) AS lo, max(revenue) AS hi,
         min(ts) AS first, max(ts) AS last, exact_distinct(user_id) AS users
  FROM s WHERE kind = 'impression' GROUP BY day, state;
CREATE SUMMARY hourly AS
  SELECT date_trunc('hour', ts) AS hour, count(*) AS n, sum(revenue) AS r,
         min(user_id) AS low, max(user_id) AS top, sum(user_id) AS total
  FROM s GROUP BY hour;
";
    // 2026-11-01T00:00:00Z in milliseconds.
    const NOV_1: i64 = 1_793_491_200_000;
    let dir = dir("typed-text");
    std::fs::write(
        dir.join("csv.sql"),
        SCHEMA.replace("FORMAT", "format = 'csv', header = true"),
    )
    .expect("schema");
    std::fs::write(
        dir.join("json.sql"),
        SCHEMA.replace("FORMAT", "format = 'json'"),
    )
    .expect("schema");
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let mut csv = String::from("ts,user_id,kind,state,revenue\n");
    let mut json = String::new();
    for _ in 0..30_000 {
        let second = next(3 * 86_400);
        let ts = match next(500) {
            0 => "yesterday".to_owned(),
            _ => format!(
                "2026-11-{:02}T{:02}:{:02}:{:02}Z",
                1 + second / 86_400,
                second / 3600 % 24,
                second / 60 % 60,
                second % 60
            ),
        };
        let user = match next(200) {
            0 => String::new(),
            1 => "x7".to_owned(),
            // 64-bit ids, which an f64 would round: sums, minima and
            // maxima of integers are exact.
            2 => (i64::MAX - next(1000) as i64).to_string(),
            3 => (i64::MIN + next(1000) as i64).to_string(),
            4 => ((1 << 53) + next(1000) as i64).to_string(),
            // Spaces around a number are not part of it; only spaces are
            // not a number.
            5 => format!(" {}\t", next(100)),
            6 => "  ".to_owned(),
            _ => (next(5000) as i64 - 100).to_string(),
        };
        let kind = if next(3) < 2 { "impression" } else { "click" };
        let state = match next(4) {
            0 => "CA",
            1 => "NY",
            2 => "TX",
            _ => "WA",
        };
        let revenue = match next(100) {
            0 => String::new(),
            1 => "bad".to_owned(),
            2 => format!("{}e-3", next(9000)),
            3 => format!("-{}.25", next(10)),
            4 => next(100).to_string(),
            5 => format!("  {}.5 ", next(100)),
            _ => format!("0.{:06}", next(1_000_000)),
        };
        csv.push_str(&format!("{ts},{user},{kind},{state},{revenue}\n"));
        // Numbers as numbers, NULL as null, anything else as a string.
        let number = |v: &str| match v {
            "" => "null".to_owned(),
            v if v.parse::<f64>().is_ok() => v.to_owned(),
            v => format!("\"{}\"", v.replace('\t', "\\t")),
        };
        json.push_str(&format!(
            "{{\"ts\":\"{ts}\",\"user_id\":{},\"kind\":\"{kind}\",\"state\":\"{state}\",\"revenue\":{}}}\n",
            number(&user),
            number(&revenue)
        ));
    }
    std::fs::write(dir.join("in.csv"), &csv).expect("input");
    std::fs::write(dir.join("in.json"), &json).expect("input");

    // The oracle. A record with any unparsable typed value is rejected by
    // `hourly` (which reads every typed column), so it is in neither.
    #[derive(Default, Debug)]
    struct Money {
        n: u64,
        nr: u64,
        r: f64,
        lo: f64,
        hi: f64,
        /// The earliest and latest time as written (ISO text orders as
        /// time does); outputs print instants the same way.
        first: String,
        last: String,
        users: BTreeSet<i64>,
    }
    #[derive(Default, Debug)]
    struct Hourly {
        n: u64,
        r: f64,
        low: Option<i64>,
        top: Option<i64>,
        total: Option<i128>,
    }
    let mut money: BTreeMap<(i64, String), Money> = BTreeMap::new();
    let mut hourly: BTreeMap<i64, Hourly> = BTreeMap::new();
    let mut rejected = 0;
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let ts = f[0].strip_prefix("2026-11-").map(|rest| {
            let n = |a: usize| rest[a..a + 2].parse::<i64>().expect("digits");
            NOV_1 + (((n(0) - 1) * 24 + n(3)) * 3600 + n(6) * 60 + n(9)) * 1000
        });
        let user: Result<Option<i64>, _> = match f[1] {
            "" => Ok(None),
            s => s.trim().parse().map(Some),
        };
        let revenue: Result<Option<f64>, _> = match f[4] {
            "" => Ok(None),
            s => s.trim().parse().map(Some),
        };
        let (Some(ts), Ok(user), Ok(revenue)) = (ts, user, revenue) else {
            rejected += 1;
            continue;
        };
        let h = hourly.entry(ts - ts.rem_euclid(3_600_000)).or_default();
        h.n += 1;
        h.r += revenue.unwrap_or(0.0);
        if let Some(u) = user {
            h.low = Some(h.low.map_or(u, |l| l.min(u)));
            h.top = Some(h.top.map_or(u, |t| t.max(u)));
            h.total = Some(h.total.unwrap_or(0) + i128::from(u));
        }
        if f[2] != "impression" {
            continue;
        }
        let m = money
            .entry((ts - ts.rem_euclid(86_400_000), f[3].to_owned()))
            .or_insert_with(|| Money {
                lo: f64::INFINITY,
                hi: f64::NEG_INFINITY,
                first: f[0].to_owned(),
                last: f[0].to_owned(),
                ..Money::default()
            });
        m.n += 1;
        if f[0] < m.first.as_str() {
            m.first = f[0].to_owned();
        }
        if f[0] > m.last.as_str() {
            m.last = f[0].to_owned();
        }
        if let Some(r) = revenue {
            m.nr += 1;
            m.r += r;
            m.lo = m.lo.min(r);
            m.hi = m.hi.max(r);
        }
        m.users.extend(user);
    }
    assert!(rejected > 100, "{rejected} rejected");

    let close = |got: &str, want: f64, what: &str| {
        let got: f64 = got.parse().expect(what);
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1.0),
            "{what}: {got} against {want}"
        );
    };
    for (format, threads) in [("csv", "1"), ("csv", "2"), ("json", "1"), ("json", "2")] {
        let out = format!("{format}{threads}");
        let (schema, input) = (format!("{format}.sql"), format!("in.{format}"));
        ok(&cardinal(
            &dir,
            &[
                "run",
                &schema,
                &input,
                "--threads",
                threads,
                "--out",
                &out,
                "--quiet",
            ],
        ));
        let lines = csv_lines(&dir.join(&out), "money");
        assert_eq!(lines.len(), money.len(), "{out}");
        for line in &lines {
            // day, state, n, nr, r, lo, hi, first, last, users, lower, upper
            let f: Vec<&str> = line.split(',').collect();
            let day = f[0].strip_prefix("2026-11-").expect("day")[..2]
                .parse::<i64>()
                .expect("day");
            let key = (NOV_1 + (day - 1) * 86_400_000, f[1].to_owned());
            let m = &money[&key];
            assert_eq!(f[2], m.n.to_string(), "{line}");
            assert_eq!(f[3], m.nr.to_string(), "{line}");
            close(f[4], m.r, line);
            close(f[5], m.lo, line);
            close(f[6], m.hi, line);
            assert_eq!(f[7], m.first, "{line}");
            assert_eq!(f[8], m.last, "{line}");
            assert_eq!(f[9], m.users.len().to_string(), "{line}");
        }
        let lines = csv_lines(&dir.join(&out), "hourly");
        assert_eq!(lines.len(), hourly.len(), "{out}");
        for line in &lines {
            // hour, n, r, low, top, total
            let f: Vec<&str> = line.split(',').collect();
            let rest = f[0].strip_prefix("2026-11-").expect("hour");
            let n = |a: usize| rest[a..a + 2].parse::<i64>().expect("digits");
            let h = &hourly[&(NOV_1 + ((n(0) - 1) * 24 + n(3)) * 3_600_000)];
            assert_eq!(f[1], h.n.to_string(), "{line}");
            close(f[2], h.r, line);
            assert_eq!(f[3], h.low.expect("a user").to_string(), "{line}");
            assert_eq!(f[4], h.top.expect("a user").to_string(), "{line}");
            assert_eq!(f[5], h.total.expect("a user").to_string(), "{line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--retention-days 3` over ten days in time order, with late events for
/// days long gone at the end: the answer holds exactly the buckets within
/// three days of the newest (days 7 to 10), each whole, whatever the thread
/// count; the workers drop older groups as the stream moves on, and the
/// merge drops the ones a worker kept because it had not seen the newest
/// day. The run reports both kinds of drop.
#[test]
fn retention_keeps_the_window_of_the_newest_bucket() {
    let dir = dir("retention");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, v BIGINT) WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY daily AS SELECT date_trunc('day', ts) AS day, count(*) AS n, sum(v) AS s
           FROM t GROUP BY day;",
    )
    .expect("schema");
    let mut input = String::new();
    for day in 1..=10 {
        for i in 0..20_000 {
            let _ = writeln!(input, "2026-11-{day:02}T{:02}:00:00Z,{i}", i % 24);
        }
    }
    for day in [1, 2, 6] {
        let _ = writeln!(input, "2026-11-{day:02}T12:00:00Z,1");
    }
    std::fs::write(dir.join("t.csv"), input).expect("input");
    for threads in ["1", "2"] {
        let out = format!("out{threads}");
        let output = cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                "t.csv",
                "--retention-days",
                "3",
                "--threads",
                threads,
                "--out",
                &out,
                "--quiet",
            ],
        );
        ok(&output);
        // The run says what the window dropped: the late records, and the
        // groups of the days before it.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let drops: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("daily:") && !l.contains("wrote"))
            .collect();
        assert_eq!(
            drops,
            [
                "daily: 3 records dropped: older than --retention-days",
                "daily: groups of buckets before 2026-11-07T00:00:00Z evicted: older than --retention-days"
            ],
            "{threads} threads: {stderr}"
        );
        let sum: u64 = (0..20_000).sum();
        let want: Vec<String> = (7..=10)
            .map(|day| format!("2026-11-{day:02}T00:00:00Z,20000,{sum}"))
            .collect();
        assert_eq!(
            csv_lines(&dir.join(&out), "daily"),
            want,
            "{threads} threads"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--groups-max` is a property of a summary's answer: a summary with more
/// groups fails the run with an error that names it, and nothing is
/// written, on any thread count (it used to count groups per worker, so
/// that 1 thread dropped records and 2 failed at the merge, or passed).
#[test]
fn group_limit_gives_the_same_outcome_on_any_thread_count() {
    let dir = dir("groups-max");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (name TEXT, v BIGINT) WITH (format = 'csv');
         CREATE SUMMARY by_name AS SELECT name, count(*) AS n FROM t GROUP BY name;
         CREATE SUMMARY total AS SELECT count(*) AS n FROM t;",
    )
    .expect("schema");
    // 3,000 names over six files dealt out to the workers, 1,000 names in
    // each, half of them shared with the next file: on 3 threads a worker
    // holds about 1,500 names, so a limit of 1,000 fails in the fold and
    // one of 2,999 at the merge.
    let mut files = Vec::new();
    for file in 0..6u32 {
        let mut input = String::new();
        for i in 0..1_000u32 {
            let _ = writeln!(input, "k{},{i}", (file * 500 + i) % 3_000);
        }
        let name = format!("t{file}.csv");
        std::fs::write(dir.join(&name), input).expect("input");
        files.push(name);
    }
    let mut answers = Vec::new();
    for threads in ["1", "2", "3"] {
        for (groups_max, fits) in [("1000", false), ("2999", false), ("3000", true)] {
            let out = format!("out-{threads}-{groups_max}");
            let mut args = vec!["run", "schema.sql"];
            args.extend(files.iter().map(String::as_str));
            args.extend(["--quiet", "--threads", threads, "--out", &out]);
            args.extend(["--groups-max", groups_max]);
            let output = cardinal(&dir, &args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            if fits {
                ok(&output);
                answers.push(csv_lines(&dir.join(&out), "by_name"));
                continue;
            }
            assert_eq!(
                output.status.code(),
                Some(1),
                "{threads} threads, {groups_max}: {stderr}"
            );
            assert!(
                stderr.contains(&format!(
                    "summary by_name has more than {groups_max} groups (--groups-max)"
                )),
                "{threads} threads, {groups_max}: {stderr}"
            );
            assert!(
                !dir.join(&out).join("by_name").exists(),
                "{threads} threads wrote {out}"
            );
        }
    }
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0].len(), 3_000);
    assert!(answers.iter().all(|a| *a == answers[0]), "one answer");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--threads` takes 1 to THREADS_MAX (256) and says so otherwise.
#[test]
fn thread_counts_out_of_range_are_refused() {
    let dir = dir("threads");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    std::fs::write(dir.join("empty.csv"), "").expect("input");
    for threads in ["0", "257", "many"] {
        let output = cardinal(
            &dir,
            &["run", "schema.sql", "empty.csv", "--threads", threads],
        );
        assert_eq!(output.status.code(), Some(2), "--threads {threads}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("expected 1 to 256"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A summary with KLL quantiles, folded by one worker, is the same in
/// every run: each sketch's compaction coins come from a fixed seed,
/// not from a per-process generator. 60,000 events over 3 days and 5
/// providers put about 4,000 values in each group, so every sketch has
/// compacted many times.
#[test]
fn quantiles_of_one_worker_are_the_same_every_run() {
    let dir = dir("quantiles_reproducible");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
           site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
           WITH (format = 'csv', header = true, time = 'ts');
         CREATE SUMMARY spend AS
           SELECT date_trunc('day', ts) AS day, provider, count(*) AS events,
                  approx_quantile(revenue, 0.5) AS p50, approx_quantile(revenue, 0.99) AS p99
           FROM impressions GROUP BY day, provider;",
    )
    .expect("schema");
    ok(&cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "60000",
            "--days",
            "3",
            "-o",
            "imp.csv",
        ],
    ));
    for out in ["first", "second"] {
        run_into(&dir, "1", out);
    }
    let first = csv_lines(&dir.join("first"), "spend");
    assert_eq!(first.len(), 3 * 5, "{first:?}");
    assert_eq!(first, csv_lines(&dir.join("second"), "spend"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker that meets a bad input does not keep the others waiting in
/// the rotation of a compressed input they share: the run ends, and with
/// `--strict` fails. Worker 0 gets the small file with a bad header first
/// (one reject for that file), and is the first in the gzipped input's
/// rotation.
#[test]
fn a_failed_worker_does_not_keep_the_others_waiting() {
    let dir = dir("failed_worker");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, n BIGINT) WITH (format = 'csv', header = true, time = 'ts');
         CREATE SUMMARY s AS SELECT count(*) AS events, sum(n) AS n FROM t;",
    )
    .expect("schema");
    std::fs::write(dir.join("bad.csv"), "foo,bar\n1,2\n").expect("bad.csv");
    let mut text = String::from("ts,n\n");
    for i in 0..400_000 {
        writeln!(text, "2026-11-01T00:00:{:02}Z,{i}", i % 60).expect("write to a String");
    }
    std::fs::write(dir.join("t.csv.gz"), gzip(text.as_bytes())).expect("t.csv.gz");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args([
            "run",
            "schema.sql",
            "bad.csv",
            "t.csv.gz",
            "--threads",
            "2",
            "--quiet",
            "--strict",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cardinal runs");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().expect("kills");
            panic!("the run is still waiting after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("header has no column \"ts\""), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several workers give the same answers in every run too, sketches
/// included: the jobs are dealt out the same way each time, a gzipped
/// input's chunks go to the workers in a fixed rotation, each worker's
/// sketches flip coins of a stream named by the worker, and KLL merges
/// flip the merged-into sketch's. Three inputs (two plain, one gzipped),
/// on 2 and on 3 workers, each run twice.
#[test]
fn answers_of_several_workers_are_the_same_every_run() {
    let dir = dir("workers_reproducible");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
           site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
           WITH (format = 'csv', header = true, time = 'ts');
         CREATE SUMMARY spend AS
           SELECT date_trunc('day', ts) AS day, provider, count(*) AS events,
                  sum(revenue) AS revenue, hll(user_id) AS users, theta(user_id) AS reach,
                  approx_quantile(revenue, 0.5) AS p50, approx_quantile(revenue, 0.99) AS p99,
                  topk(site, 3) AS sites
           FROM impressions GROUP BY day, provider;",
    )
    .expect("schema");
    for (seed, file) in [("1", "a.csv"), ("2", "b.csv"), ("3", "c.csv")] {
        let events = if file == "a.csv" { "30000" } else { "20000" };
        ok(&cardinal(
            &dir,
            &[
                "gen",
                "impressions",
                "--events",
                events,
                "--days",
                "3",
                "--seed",
                seed,
                "-o",
                file,
            ],
        ));
    }
    let text = std::fs::read(dir.join("c.csv")).expect("c.csv");
    std::fs::write(dir.join("c.csv.gz"), gzip(&text)).expect("c.csv.gz");
    for threads in ["2", "3"] {
        let outs = ["first", "second"].map(|run| format!("{run}-{threads}"));
        for out in &outs {
            ok(&cardinal(
                &dir,
                &[
                    "run",
                    "schema.sql",
                    "a.csv",
                    "b.csv",
                    "c.csv.gz",
                    "--threads",
                    threads,
                    "--out",
                    out,
                    "--quiet",
                ],
            ));
        }
        let first = csv_lines(&dir.join(&outs[0]), "spend");
        assert_eq!(first.len(), 3 * 5, "{first:?}");
        assert_eq!(
            first,
            csv_lines(&dir.join(&outs[1]), "spend"),
            "{threads} workers"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `cardinal run schema.sql <inputs> --json -` in `dir` on `threads`
/// workers, splitting plain files of any size into byte ranges, and
/// returns the output.
fn run_split(dir: &Path, inputs: &[&str], threads: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["run", "schema.sql"])
        .args(inputs)
        .args(["--json", "-", "--threads", threads])
        .args(extra)
        .env("CARDINAL_SPLIT_BYTES_MIN", "0")
        .current_dir(dir)
        .output()
        .expect("cardinal runs")
}

/// The number after `"key":` in the first JSON line of `stdout`.
fn json_number(stdout: &str, key: &str) -> i64 {
    let line = stdout.lines().next().expect("a JSON line");
    let at = line.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
    line[at..]
        .split([',', '}'])
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

/// RFC 4180 CSV whose quoted fields hold newlines (most of the file's
/// newlines are inside quotes, and each quoted line after the first
/// looks like a record of its own: `1000000,forged`). Chunks of the seed's
/// reader were cut at the last newline of each 256 KiB, usually inside a
/// quoted field, and its second half was folded as records; byte ranges
/// the same. Every thread count must read exactly the file's records.
#[test]
fn quoted_newlines_stay_inside_their_records_at_any_thread_count() {
    let dir = dir("quoted-newlines");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    // A fixed-seed generator: records of `n,<word>`, the word quoted with
    // newlines, CRLF, doubled quotes and commas inside, or plain.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let (mut text, mut count, mut sum) = (String::new(), 0i64, 0i64);
    while text.len() < 1_200_000 {
        let n = next(1000);
        let word = match next(4) {
            0 => "plain".to_owned(),
            1 => "\"say \"\"hi\"\",\n1000000,forged\r\n1000000,forged\"".to_owned(),
            _ => {
                let lines = next(5) + 1;
                let inner: Vec<String> = (0..lines).map(|_| "1000000,forged".to_owned()).collect();
                format!("\"{}\"", inner.join("\n"))
            }
        };
        text.push_str(&format!("{n},{word}\n"));
        count += 1;
        sum += i64::try_from(n).expect("small");
    }
    std::fs::write(dir.join("quoted.csv"), &text).expect("input");
    for threads in ["1", "2", "3"] {
        let output = run_split(&dir, &["quoted.csv"], threads, &["--strict"]);
        let stdout = ok(&output);
        assert_eq!(json_number(&stdout, "n"), count, "{threads} threads");
        assert_eq!(json_number(&stdout, "s"), sum, "{threads} threads");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Of two CSV inputs, the one whose header lacks a declared column is one
/// reject naming it, and the other is folded: the run succeeds, unless
/// `--strict`. The same when the bad file is split into byte ranges or
/// read by every worker in turns (gzipped).
#[test]
fn a_bad_header_is_one_reject_for_its_input() {
    let dir = dir("bad-header");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv', header = true);
         CREATE SUMMARY total AS SELECT count(*) AS n, sum(n) AS s FROM t;",
    )
    .expect("schema");
    std::fs::write(dir.join("good.csv"), "n,word\n1,a\n2,b\n").expect("input");
    let bad: String = std::iter::once("n,wrd\n".to_owned())
        .chain((0..50_000).map(|i| format!("{i},w\n")))
        .collect();
    std::fs::write(dir.join("bad.csv"), &bad).expect("input");
    std::fs::write(dir.join("bad.csv.gz"), gzip(bad.as_bytes())).expect("input");
    for (bad, threads) in [("bad.csv", "1"), ("bad.csv", "3"), ("bad.csv.gz", "3")] {
        let output = run_split(&dir, &["good.csv", bad], threads, &[]);
        let stdout = ok(&output);
        assert_eq!(json_number(&stdout, "n"), 2, "{bad} on {threads}");
        assert_eq!(json_number(&stdout, "s"), 3, "{bad} on {threads}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let rejected: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("rejected:"))
            .collect();
        assert_eq!(rejected.len(), 1, "{bad} on {threads}: {stderr}");
        assert!(
            rejected[0].contains(&format!("{bad}: header has no column \"word\"")),
            "{bad} on {threads}: {stderr}"
        );
        let strict = run_split(&dir, &["good.csv", bad], threads, &["--strict"]);
        assert_ne!(strict.status.code(), Some(0), "{bad} on {threads}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
