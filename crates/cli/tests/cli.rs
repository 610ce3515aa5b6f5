//! End-to-end tests of the `cardinal` binary: run it as a user would, in a
//! temporary directory, and check what it prints and how it exits.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn cardinal(args: &[&str], stdin: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("cardinal-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cardinal runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("cardinal finishes")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

#[test]
fn hll_build_prints_postgresql_hll_hex() {
    // hll_add(hll_empty(), hll_hash_bigint(1)) in postgresql-hll.
    let out = stdout(&cardinal(&["hll", "build"], "1\n"));
    assert_eq!(out, "\\x128b7f004403b7fb05c44a\n");
    let out = stdout(&cardinal(&["hll", "build", "--explicit", "off"], "1\n"));
    assert_eq!(out, "\\x138b408944\n");
    let out = stdout(&cardinal(&["hll", "build", "--hash", "text"], ""));
    assert_eq!(out, "\\x118b7f\n");
}

#[test]
fn hll_build_refuses_parameters_postgresql_hll_cannot_read() {
    for (flag, value) in [
        ("--log2m", "18"),
        ("--regwidth", "8"),
        ("--explicit", "16384"),
    ] {
        // No input: the refusal comes before stdin is read.
        let output = cardinal(&["hll", "build", flag, value], "");
        assert!(!output.status.success(), "{flag} {value} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("postgresql-hll reads") && stderr.contains("--java-hll"),
            "{flag} {value}: {stderr}"
        );
    }
    // java-hll reads them: the flag writes them.
    let out = stdout(&cardinal(
        &[
            "hll",
            "build",
            "--log2m",
            "18",
            "--regwidth",
            "8",
            "--java-hll",
        ],
        "1\n",
    ));
    assert!(out.starts_with("\\x12f2"), "{out}");
}

#[test]
fn run_hll_hex_refuses_parameters_postgresql_hll_cannot_read() {
    let dir = std::env::temp_dir().join(format!("cardinal-cli-pg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let schema = dir.join("schema.sql");
    std::fs::write(
        &schema,
        "CREATE STREAM t (id BIGINT) WITH (format = 'csv', header = true);\n\
         CREATE SUMMARY wide AS SELECT hll(id, 18, 5) AS users FROM t;\n",
    )
    .expect("schema");
    let input = dir.join("in.csv");
    std::fs::write(&input, "id\n1\n2\n").expect("input");
    let out = dir.join("out");
    let (schema, input, out) = (
        schema.to_str().expect("utf-8"),
        input.to_str().expect("utf-8"),
        out.to_str().expect("utf-8"),
    );
    let refused = cardinal(&["run", schema, input, "--out", out, "--hll-hex"], "");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("summary wide") && stderr.contains("postgresql-hll reads log2m 4..=17"),
        "{stderr}"
    );
    stdout(&cardinal(
        &[
            "run",
            schema,
            input,
            "--out",
            out,
            "--hll-hex",
            "--java-hll",
            "--quiet",
        ],
        "",
    ));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn hll_build_inspect_and_union_round_trip() {
    let a: String = (0..50_000).map(|i| format!("{i}\n")).collect();
    let b: String = (25_000..75_000).map(|i| format!("{i}\n")).collect();
    let a_hex = stdout(&cardinal(&["hll", "build"], &a)).trim().to_owned();
    let b_hex = stdout(&cardinal(&["hll", "build"], &b)).trim().to_owned();
    let union = stdout(&cardinal(&["hll", "union", &a_hex, &b_hex], ""))
        .trim()
        .to_owned();
    // `-` reads values from stdin, one per line, blank lines skipped: the
    // same union, and the same inspection.
    let piped = stdout(&cardinal(
        &["hll", "union", "-"],
        &format!("{a_hex}\n\n{b_hex}\n"),
    ));
    assert_eq!(piped.trim(), union);
    let inspect = stdout(&cardinal(&["hll", "inspect", &union], ""));
    assert_eq!(
        stdout(&cardinal(&["hll", "inspect", "-"], &format!("{union}\n"))),
        inspect
    );
    assert!(
        inspect.contains("type FULL, log2m 11, regwidth 5"),
        "{inspect}"
    );
    let estimate: f64 = inspect
        .lines()
        .find_map(|l| l.trim().strip_prefix("hll_cardinality "))
        .expect("cardinality line")
        .parse()
        .expect("number");
    // 75,000 distinct ids; 3 standard errors of 2.3% is 7%.
    assert!((estimate / 75_000.0 - 1.0).abs() < 0.07, "{estimate}");
    // `hll --help` says "intersect": the word works as well as `overlap`.
    for word in ["overlap", "intersect"] {
        let overlap = stdout(&cardinal(&["hll", word, &a_hex, &b_hex], ""));
        let both: f64 = overlap
            .lines()
            .find_map(|l| l.strip_prefix("|A ∩ B|"))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("an |A ∩ B| line")
            .parse()
            .expect("number");
        // 25,000 shared ids; the joint estimate's error at this overlap is
        // well within 25%.
        assert!((both / 25_000.0 - 1.0).abs() < 0.25, "{word}: {overlap}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let output = cardinal(&["hll", "inspect", "\\x99"], "");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("reading \"\\\\x99\" as a postgresql-hll value"),
        "{stderr}"
    );

    let output = cardinal(&["hll", "build"], "12\nnot-a-number\n");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 2: \"not-a-number\" is not a 64-bit integer"),
        "{stderr}"
    );

    let output = cardinal(&["hll", "build", "--log2m", "3"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("log2m = 3 is out of range"));
}

#[test]
fn mismatched_parameters_refuse_to_union() {
    let a = stdout(&cardinal(&["hll", "build", "--log2m", "12"], "1\n"))
        .trim()
        .to_owned();
    let b = stdout(&cardinal(&["hll", "build"], "1\n"))
        .trim()
        .to_owned();
    let output = cardinal(&["hll", "union", &a, &b], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("log2m 12 vs 11"));
}

#[test]
fn demo_sketches_answer_every_question_next_to_the_truth() {
    let out = stdout(&cardinal(&["demo", "sketches", "--users", "20000"], ""));
    for section in [
        "REACH",
        "OVERLAP",
        "EXPRESSIONS",
        "REVENUE QUANTILES",
        "TOP SITES",
        "SPEED",
    ] {
        assert!(out.contains(section), "missing {section}:\n{out}");
    }
    // The reach rows: truth, then an estimate whose 95% interval holds it
    // (three audiences; with fixed seeds this is deterministic).
    let mut rows = 0;
    for line in out
        .lines()
        .filter(|l| l.trim_start().starts_with("provider"))
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let truth: f64 = fields[2].parse().expect("truth");
        let bounds = fields[4].trim_matches(|c| c == '(' || c == ')');
        let (lower, upper) = bounds.split_once("..").expect("interval");
        let (lower, upper): (f64, f64) =
            (lower.parse().expect("lower"), upper.parse().expect("upper"));
        assert!(lower <= truth && truth <= upper, "{line}");
        rows += 1;
    }
    assert_eq!(rows, 3, "{out}");
    assert!(out.contains("SELECT hll_cardinality('\\x128b7f"), "{out}");
}

#[test]
fn demo_sketches_refuse_a_tiny_population() {
    let output = cardinal(&["demo", "sketches", "--users", "10"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--users must be at least 1000"));
}
