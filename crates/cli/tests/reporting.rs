//! End-to-end tests of what `cardinal run` reports: the record count it
//! prints leaves rejects out, dimension text that is not UTF-8 prints
//! apart from any other, and a time no four-digit year spells never
//! reaches the output or a file name.

mod common;

use std::path::{Path, PathBuf};

use common::{cardinal, ok};

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("reporting", name)
}

/// The run's stderr, asserting it succeeded.
fn run_ok(dir: &Path, args: &[&str]) -> String {
    let output = cardinal(dir, args);
    ok(&output);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The `N records, ...; J rejected` line's two numbers.
fn records_and_rejects(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains(" records, ") && l.contains(" rejected"))
        .unwrap_or_else(|| panic!("no summary line in {stderr}"));
    let records = line
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a record count first");
    let rejects = line
        .rsplit_once("; ")
        .and_then(|(_, tail)| tail.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a reject count after '; '");
    (records, rejects)
}

/// "N records" counts the records folded: a record the parser rejects, a
/// record a summary rejects (a field not of its type) and a record whose
/// group key is too long are each counted once, as rejected, and not as
/// records. Checked on the row path (a summary reading an expression), on
/// the path that folds an aggregate at a time from parsed columns, and on
/// several threads.
#[test]
fn record_count_leaves_rejected_records_out() {
    let dir = dir("counts");
    let long = "k".repeat(cardinal_rollup::KEY_BYTES_MAX + 10);
    std::fs::write(
        dir.join("t.csv"),
        format!(
            "1,a\n\
             2\n\
             x,b\n\
             3,c\n\
             4,{long}\n\
             5,d\n"
        ),
    )
    .expect("input");
    let schemas = [
        // An aggregate at a time, from parsed columns.
        "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
         CREATE SUMMARY s AS SELECT word, count(*) AS c, sum(n) AS total FROM t GROUP BY word;",
        // Row by row: the summary reads an expression.
        "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
         CREATE SUMMARY s AS SELECT word, count(*) AS c, sum(n + 1) AS total FROM t GROUP BY word;",
        // Two summaries, only one of which finds the key too long.
        "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
         CREATE SUMMARY s AS SELECT word, sum(n) AS total FROM t GROUP BY word;
         CREATE SUMMARY u AS SELECT n, count(*) AS c FROM t GROUP BY n;",
    ];
    for schema in schemas {
        std::fs::write(dir.join("schema.sql"), schema).expect("schema");
        for threads in ["1", "2"] {
            let stderr = run_ok(
                &dir,
                &[
                    "run",
                    "schema.sql",
                    "t.csv",
                    "--quiet",
                    "--threads",
                    threads,
                ],
            );
            // Six lines: `2` is short a field, `x` is not a BIGINT, the
            // long word is past KEY_BYTES_MAX; three are folded.
            assert_eq!(
                records_and_rejects(&stderr),
                (3, 3),
                "{schema} on {threads} thread(s): {stderr}"
            );
        }
    }
}

/// Two different byte strings that are not UTF-8 print as two different
/// texts, in the per-day CSV files and the printed table, and a literal
/// backslash cannot pass for an escape: `caf` 0xE9 and `caf` 0xE8 (Latin-1)
/// once both printed as `caf\u{FFFD}`.
#[test]
fn dimensions_that_are_not_utf8_print_apart() {
    let dir = dir("utf8");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, word TEXT) WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, word, count(*) AS c
           FROM t GROUP BY day, word;",
    )
    .expect("schema");
    let mut input = Vec::new();
    for word in [
        &b"caf\xe9"[..],
        b"caf\xe8",
        b"caf\xe8",
        b"caf\\xe9",
        "caf\u{e9}".as_bytes(),
        b"caf\xef\xbf\xbd",
        b"caf\xc3",
    ] {
        input.extend_from_slice(b"2026-11-01T10:00:00Z,");
        input.extend_from_slice(word);
        input.push(b'\n');
    }
    std::fs::write(dir.join("t.csv"), input).expect("input");
    let output = cardinal(&dir, &["run", "schema.sql", "t.csv", "--out", "out"]);
    let table = ok(&output);
    let text = std::fs::read_to_string(dir.join("out/s/2026-11-01.csv")).expect("day file");
    let mut rows: Vec<&str> = text.lines().skip(1).collect();
    rows.sort_unstable();
    assert_eq!(
        rows,
        [
            "2026-11-01T00:00:00Z,caf\\\\xe9,1",
            "2026-11-01T00:00:00Z,caf\\xc3,1",
            "2026-11-01T00:00:00Z,caf\\xe8,2",
            "2026-11-01T00:00:00Z,caf\\xe9,1",
            "2026-11-01T00:00:00Z,café,1",
            "2026-11-01T00:00:00Z,caf\u{fffd},1",
        ],
        "{text}"
    );
    for word in [
        "caf\\xe9 ",
        "caf\\xe8 ",
        "caf\\\\xe9 ",
        "café ",
        "caf\\xc3 ",
    ] {
        assert!(table.contains(word), "{word} in {table}");
    }
}

/// Times are accepted in years 0001 to 9999 only. Year 0000, and an
/// offset or leap second that carries a time over either edge, reject
/// the record: 0000-01-01's week once started on `-001-12-27`, printed
/// so and written to a file of that name. A week bucket of the first
/// accepted day is 0001-01-01, a Monday.
#[test]
fn times_outside_the_years_are_rejected_and_never_name_a_file() {
    let dir = dir("years");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (ts TIMESTAMP, word TEXT) WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY weekly AS SELECT date_trunc('week', ts) AS week, count(*) AS c
           FROM t GROUP BY week;
         CREATE SUMMARY yearly AS SELECT date_trunc('year', ts) AS year, count(*) AS c
           FROM t GROUP BY year;",
    )
    .expect("schema");
    std::fs::write(
        dir.join("t.csv"),
        "0000-01-01,a\n\
         0000-12-31T23:59:59Z,a\n\
         0001-01-01T00:30:00+01:00,a\n\
         0001-01-01,b\n\
         0001-01-02T13:00:00-11:00,b\n\
         9999-12-31T23:30:00-01:00,a\n\
         9999-12-31T23:59:60Z,a\n\
         9999-12-31T23:59:59.999Z,b\n",
    )
    .expect("input");
    let stderr = run_ok(
        &dir,
        &["run", "schema.sql", "t.csv", "--out", "out", "--quiet"],
    );
    assert_eq!(records_and_rejects(&stderr), (3, 5), "{stderr}");
    for summary in ["weekly", "yearly"] {
        let mut names: Vec<String> = std::fs::read_dir(dir.join("out").join(summary))
            .expect("summary folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort_unstable();
        let expected = match summary {
            "weekly" => ["0001-01-01.csv", "9999-12-27.csv"],
            _ => ["0001-01-01.csv", "9999-01-01.csv"],
        };
        assert_eq!(names, expected, "{summary}");
        let first = std::fs::read_to_string(dir.join("out").join(summary).join(expected[0]))
            .expect("first day");
        assert!(
            first.ends_with("\n0001-01-01T00:00:00Z,2\n"),
            "{summary}: {first}"
        );
    }
}
