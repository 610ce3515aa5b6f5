//! What `cardinal run` writes, and what it must not: names that would leave
//! the output folder, outputs that are inputs, two runs on one `--out`, and
//! the debris of interrupted runs. See the README's "Output directories".

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cardinal, failure, ok};

/// Lines of `n,word`, counted and summed.
const COUNT_AND_SUM: &str = "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
CREATE SUMMARY total AS SELECT count(*) AS n, sum(n) AS s FROM t;";

const INPUT: &str = "1,a\n2,b\n3,c\n";

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("outputs", name)
}

/// `dir` with `schema.sql` and `in.csv` written.
fn setup(name: &str, schema: &str) -> PathBuf {
    let dir = dir(name);
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    std::fs::write(dir.join("in.csv"), INPUT).expect("input");
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Entries of `dir` whose names start with `.cardinal-tmp-`.
fn staging_left(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(".cardinal-tmp-"))
                .collect()
        })
        .unwrap_or_default()
}

// Class: a summary name is a path. `CREATE SUMMARY "../../x"` with
// `--out outdir/o` wrote ./x; it must fail when the schema compiles, with
// the position, before any input is read or any file written.
#[test]
fn a_summary_name_that_leaves_the_output_folder_is_refused() {
    let dir = setup(
        "climb",
        "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
CREATE SUMMARY \"../../x\" AS SELECT count(*) AS n FROM t;",
    );
    std::fs::create_dir_all(dir.join("outdir")).expect("outdir");
    let stderr = failure(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--out",
            "outdir/o",
            "--quiet",
        ],
    ));
    assert!(stderr.contains("line 2, column 16"), "{stderr}");
    assert!(stderr.contains("a name cannot hold '.'"), "{stderr}");
    assert!(!dir.join("x").exists());
    assert!(!dir.join("outdir/o").exists(), "nothing is written");
}

// A name the writers cannot use (here past NAME_CHARS_MAX) failed only
// after the fold, with the summaries before it already written.
#[test]
fn a_bad_name_fails_before_any_summary_is_written() {
    let long = "n".repeat(300);
    let dir = setup(
        "long",
        &format!(
            "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
CREATE SUMMARY a AS SELECT count(*) AS n FROM t;
CREATE SUMMARY {long} AS SELECT count(*) AS n FROM t;"
        ),
    );
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--out", "out", "--quiet"],
    ));
    assert!(stderr.contains("line 3, column 16"), "{stderr}");
    assert!(stderr.contains("NAME_CHARS_MAX"), "{stderr}");
    assert!(!dir.join("out/a").exists(), "no summary is written");
}

// Class: outputs clobber inputs. `--rejects in.csv` emptied the input
// before it was read: exit 0, 0 records.
#[test]
fn rejects_into_an_input_is_refused() {
    let dir = setup("rejects", COUNT_AND_SUM);
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--rejects", "./in.csv"],
    ));
    assert!(
        stderr.contains("--rejects ./in.csv is an input (in.csv)"),
        "{stderr}"
    );
    assert_eq!(read(&dir.join("in.csv")), INPUT);
}

// `--json` over the schema (by another name for the same file: a hard
// link) or over an input.
#[test]
fn json_over_the_schema_or_an_input_is_refused() {
    let dir = setup("json", COUNT_AND_SUM);
    std::fs::hard_link(dir.join("schema.sql"), dir.join("linked.sql")).expect("link");
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--json", "linked.sql"],
    ));
    assert!(stderr.contains("is the schema"), "{stderr}");
    assert_eq!(read(&dir.join("schema.sql")), COUNT_AND_SUM);
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--json", "in.csv"],
    ));
    assert!(stderr.contains("is an input"), "{stderr}");
    assert_eq!(read(&dir.join("in.csv")), INPUT);
    // Two outputs that are one file would truncate each other.
    let stderr = failure(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--json",
            "o.json",
            "--rejects",
            "o.json",
        ],
    ));
    assert!(stderr.contains("also the file of --json"), "{stderr}");
}

// A run replaces its summaries' folders whole: an input inside one would
// be removed with it.
#[test]
fn an_input_inside_a_summary_folder_is_refused() {
    let dir = setup("inside", COUNT_AND_SUM);
    std::fs::create_dir_all(dir.join("out/total")).expect("folder");
    std::fs::write(dir.join("out/total/in.csv"), INPUT).expect("input");
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "out/total/in.csv", "--out", "out"],
    ));
    assert!(stderr.contains("replaces"), "{stderr}");
    assert_eq!(read(&dir.join("out/total/in.csv")), INPUT);
}

// Another output inside a summary folder would be removed when the run
// replaces the folder whole.
#[test]
fn an_output_inside_a_summary_folder_is_refused() {
    let dir = setup("rejects-inside", COUNT_AND_SUM);
    std::fs::create_dir_all(dir.join("out/total")).expect("folder");
    let stderr = failure(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--out",
            "out",
            "--rejects",
            "out/total/r.txt",
        ],
    ));
    assert!(stderr.contains("--rejects out/total/r.txt"), "{stderr}");
}

// Two runs on one --out mixed their files. The second now stops at once
// while the first holds the folder's lock.
#[test]
fn a_second_run_on_a_locked_out_folder_stops() {
    let dir = setup("lock", COUNT_AND_SUM);
    std::fs::create_dir_all(dir.join("out")).expect("out");
    // What a run holds: a lock on the folder itself.
    let lock = std::fs::File::open(dir.join("out")).expect("open the folder");
    lock.lock().expect("lock");
    let stderr = failure(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--out", "out", "--quiet"],
    ));
    assert!(stderr.contains("another run is writing"), "{stderr}");
    assert!(!dir.join("out/total").exists());
    lock.unlock().expect("unlock");
    ok(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--out", "out", "--quiet"],
    ));
    assert!(read(&dir.join("out/total/all.csv")).contains("3,6"));
}

// Old day files of an earlier run stayed next to the new ones, and temp
// files of a killed run stayed forever. A run owns its summaries' folders
// (and only those) and removes what killed runs left.
#[test]
fn a_run_replaces_its_summary_folders_and_removes_debris() {
    let dir = setup("replace", COUNT_AND_SUM);
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("total")).expect("folder");
    std::fs::write(out.join("total/2020-01-01.csv"), "stale\n").expect("stale");
    std::fs::create_dir_all(out.join("other")).expect("folder");
    std::fs::write(out.join("other/keep.csv"), "kept\n").expect("kept");
    std::fs::create_dir_all(out.join(".cardinal-tmp-1/total")).expect("debris");
    std::fs::write(out.join(".cardinal-tmp-1/total/all.csv"), "half").expect("debris");
    ok(&cardinal(
        &dir,
        &["run", "schema.sql", "in.csv", "--out", "out", "--quiet"],
    ));
    assert!(
        !out.join("total/2020-01-01.csv").exists(),
        "the old folder is replaced whole"
    );
    assert!(read(&out.join("total/all.csv")).contains("3,6"));
    assert_eq!(read(&out.join("other/keep.csv")), "kept\n");
    assert_eq!(staging_left(&out), Vec::<String>::new());
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .expect("out")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["other", "total"], "a run leaves only its results");
}

/// Starts a run that reads a stdin never closed, waits until it holds
/// `out`, sends `signal` and returns its exit code and stderr.
fn interrupt(name: &str, signal: &str) -> (Option<i32>, String, PathBuf) {
    let dir = setup(name, COUNT_AND_SUM);
    interrupt_in(&dir, signal, &[])
}

/// As [`interrupt`], in `dir` (set up), with `extra` arguments to the run.
fn interrupt_in(dir: &Path, signal: &str, extra: &[&str]) -> (Option<i32>, String, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["run", "schema.sql", "-", "--out", "out", "--quiet"])
        .args(extra)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cardinal starts");
    let stdin = child.stdin.take().expect("stdin");
    let started = Instant::now();
    while staging_left(&dir.join("out")).is_empty() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The staging folder shows that the run is past its checks and reading.
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let output = child.wait_with_output().expect("cardinal ends");
    drop(stdin);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        dir.to_path_buf(),
    )
}

// Class: interrupted runs leave debris and say nothing. On SIGINT or
// SIGTERM the run removes its temp files, says which summaries were
// complete, and exits with 128 + the signal.
#[test]
fn an_interrupted_run_removes_its_temp_files_and_says_so() {
    for (signal, code, name) in [("-INT", 130, "SIGINT"), ("-TERM", 143, "SIGTERM")] {
        let (status, stderr, dir) = interrupt(&format!("signal{code}"), signal);
        assert_eq!(status, Some(code), "{stderr}");
        assert!(
            stderr.contains(&format!("interrupted by {name}")),
            "{stderr}"
        );
        assert!(stderr.contains("temp files removed"), "{stderr}");
        assert!(stderr.contains("not written: all"), "{stderr}");
        assert_eq!(staging_left(&dir.join("out")), Vec::<String>::new());
        assert!(!dir.join("out/total").exists());
    }
}

// `--chains-snapshot DIR` rewrites `DIR/<attribution>.chains` and `.names`
// at the end of the run: a `.names` file given as an input (with no
// `.chains` yet, so nothing is restored) was read, then overwritten.
#[test]
fn a_chains_snapshot_file_given_as_an_input_is_refused() {
    let dir = setup(
        "chains",
        "CREATE STREAM j (ts TIMESTAMP, u BIGINT) WITH (format = 'csv', time = 'ts');
CREATE ATTRIBUTION credit ON j BY u MODEL last_touch LOOKBACK 30 DAYS
  TOUCH WHERE true CONVERSION WHERE false;",
    );
    let events = "2026-11-01T00:00:00Z,1\n";
    std::fs::create_dir_all(dir.join("snap")).expect("snap");
    std::fs::write(dir.join("snap/credit.names"), events).expect("input");
    let stderr = failure(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "snap/credit.names",
            "--chains-snapshot",
            "snap",
        ],
    ));
    assert!(stderr.contains("--chains-snapshot"), "{stderr}");
    assert_eq!(read(&dir.join("snap/credit.names")), events);
}

// --rejects FILE was created (emptied) before the inputs were read and
// --json FILE written in place, so an interrupted run left an empty or
// partial file where the previous run's was. Every output file is now
// written to a temp file beside it and renamed into place only when the
// run succeeds; an interrupt removes the temp files.
#[test]
fn an_interrupted_run_keeps_the_old_output_files() {
    let dir = setup("keep-files", COUNT_AND_SUM);
    std::fs::write(dir.join("rejects.txt"), "old rejects\n").expect("old");
    std::fs::write(dir.join("out.json"), "old json\n").expect("old");
    let (status, stderr, dir) = interrupt_in(
        &dir,
        "-TERM",
        &["--rejects", "rejects.txt", "--json", "out.json"],
    );
    assert_eq!(status, Some(143), "{stderr}");
    assert!(stderr.contains("temp files removed"), "{stderr}");
    assert_eq!(read(&dir.join("rejects.txt")), "old rejects\n");
    assert_eq!(read(&dir.join("out.json")), "old json\n");
    assert_eq!(staging_left(&dir), Vec::<String>::new());
    assert_eq!(staging_left(&dir.join("out")), Vec::<String>::new());
}

// A run that ends well replaces the files, and removes temp files of the
// same outputs that a killed run left.
#[test]
fn output_files_are_replaced_whole_and_debris_removed() {
    let dir = setup("replace-files", COUNT_AND_SUM);
    std::fs::write(dir.join("out.json"), "old json\n").expect("old");
    std::fs::write(dir.join(".cardinal-tmp-1-out.json"), "half").expect("debris");
    std::fs::write(dir.join(".cardinal-tmp-1-rejects.txt"), "half").expect("debris");
    ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--json",
            "out.json",
            "--rejects",
            "rejects.txt",
            "--quiet",
        ],
    ));
    let json = read(&dir.join("out.json"));
    assert!(
        !json.contains("old json") && json.contains("\"s\":6"),
        "{json}"
    );
    assert_eq!(read(&dir.join("rejects.txt")), "");
    assert_eq!(staging_left(&dir), Vec::<String>::new());
}

// A run removes `OUT/.cardinal-tmp-*` as debris, so an input there was
// deleted before it was read. It is refused before any work.
#[test]
fn an_input_among_temp_files_is_refused() {
    let dir = setup("temp-input", COUNT_AND_SUM);
    let input = dir.join("out/.cardinal-tmp-7/in.csv");
    std::fs::create_dir_all(input.parent().expect("parent")).expect("folder");
    std::fs::write(&input, INPUT).expect("input");
    let stderr = failure(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "out/.cardinal-tmp-7/in.csv",
            "--out",
            "out",
            "--quiet",
        ],
    ));
    assert!(stderr.contains(".cardinal-tmp-"), "{stderr}");
    assert_eq!(read(&input), INPUT, "the input is kept");
}
