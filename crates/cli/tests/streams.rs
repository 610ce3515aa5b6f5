//! Inputs that are streams, and inputs that end in damage: a named pipe
//! (FIFO) or a `<(command)` pipe is opened once and read from its first
//! byte, with the same answers as the same bytes in a regular file; a
//! damaged compressed input keeps every whole row decoded before the
//! damage, and its one reject says where reading stopped.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{cardinal, gzip, ok};

/// Rows of `n,word` under a header, counted and summed: a row lost, read
/// twice or read as the header shows in the two numbers; `bad` rows make
/// rejects, whose count shows too.
const SCHEMA: &str = "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv', header = true);
CREATE SUMMARY total AS SELECT count(*) AS n, sum(n) AS s FROM t;";

/// How long a run over a pipe may take before it is taken to hang (a
/// FIFO opened a second time waits for a writer that never comes).
const RUN_SECS_MAX: u64 = 20;

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("streams", name)
}

/// The CSV text the pipe tests read: a header, 3000 rows (past a pipe's
/// 64 KiB buffer, so the writer blocks until the reader reads) and a row
/// whose number does not parse.
fn csv_text() -> Vec<u8> {
    let mut text = b"n,word\n".to_vec();
    for i in 0..3000 {
        writeln!(text, "{i},word{}", i % 97).expect("vec");
        if i == 1500 {
            text.extend_from_slice(b"x,bad\n");
        }
    }
    text
}

/// Runs `command` to its end, killed after [`RUN_SECS_MAX`] so that a
/// hang fails the test instead of stalling it.
fn run_bounded(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cardinal runs");
    let (mut stdout, mut stderr) = (
        child.stdout.take().expect("stdout"),
        child.stderr.take().expect("stderr"),
    );
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).map(|_| bytes)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(RUN_SECS_MAX) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} still runs after {RUN_SECS_MAX} s: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().expect("reader").expect("stdout"),
        stderr: err.join().expect("reader").expect("stderr"),
    }
}

/// The run's JSON answer and its summary line without the timing: the
/// records and bytes read, and the rejects by reason.
fn answer(output: &Output) -> (String, String) {
    let stdout = ok(output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = stderr
        .lines()
        .find(|line| line.contains(" records, "))
        .unwrap_or_else(|| panic!("a summary line: {stderr}"));
    let read = summary.split(" in ").next().expect("split");
    let rejected = summary.rsplit("; ").next().expect("split");
    (stdout, format!("{read}; {rejected}"))
}

fn run_args(input: &str, threads: &str) -> Vec<String> {
    [
        "run",
        "schema.sql",
        input,
        "--json",
        "-",
        "--threads",
        threads,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A FIFO (`mkfifo`) is opened once and read from its first byte, plain
/// or gzipped, on one worker or several: the answers and rejects are the
/// regular file's. Planning used to open it three times and read 14 bytes
/// before the worker did, so the run hung waiting for a second writer.
#[test]
fn a_fifo_is_read_once_from_its_first_byte() {
    let dir = dir("fifo");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let text = csv_text();
    for (name, bytes) in [("plain", text.clone()), ("gzipped", gzip(&text))] {
        std::fs::write(dir.join(name), &bytes).expect("input");
        for threads in ["1", "2"] {
            let expected = answer(&cardinal(&dir, &to_str(&run_args(name, threads))));
            assert!(expected.0.contains("\"n\":3000"), "{expected:?}");
            let fifo = dir.join(format!("{name}-{threads}.fifo"));
            let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
            assert!(made.success(), "mkfifo {}", fifo.display());
            let got = through_fifo(&dir, &fifo, bytes.clone(), &run_args_path(&fifo, threads));
            assert_eq!(answer(&got), expected, "{name} on {threads} threads");
            // The same FIFO inside a directory is a file of it.
            let sub = dir.join(format!("{name}-{threads}"));
            std::fs::create_dir(&sub).expect("dir");
            let inner = sub.join("in.fifo");
            let made = Command::new("mkfifo").arg(&inner).status().expect("mkfifo");
            assert!(made.success());
            let got = through_fifo(&dir, &inner, bytes.clone(), &run_args_path(&sub, threads));
            assert_eq!(answer(&got), expected, "{name} in a directory");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn to_str(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn run_args_path(path: &Path, threads: &str) -> Vec<String> {
    run_args(path.to_str().expect("utf-8 temp path"), threads)
}

/// Runs cardinal with `args` in `dir` while a thread writes `bytes` into
/// `fifo` once (opening it blocks until cardinal opens it to read).
fn through_fifo(dir: &Path, fifo: &Path, bytes: Vec<u8>, args: &[String]) -> Output {
    let path = fifo.to_path_buf();
    let writer = std::thread::spawn(move || {
        let mut pipe = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open the FIFO to write");
        pipe.write_all(&bytes)
    });
    let mut command = Command::new(env!("CARGO_BIN_EXE_cardinal"));
    command.args(args).current_dir(dir);
    let output = run_bounded(command);
    // A reader that stopped early leaves the writer blocked: that is a
    // failure, reported without waiting for it.
    let started = Instant::now();
    while !writer.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the FIFO was not read to its end: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    writer
        .join()
        .expect("writer")
        .expect("every byte written to the FIFO");
    output
}

/// A pipe named by its `/dev/fd` path (bash's `<(command)`) is read once
/// from its first byte: the 24 bytes planning read from it were lost to
/// the run, so the header and first rows were taken wrongly, with rc 0.
#[test]
fn a_process_substitution_pipe_is_read_once() {
    let dir = dir("dev-fd");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let text = csv_text();
    std::fs::write(dir.join("w.csv"), &text).expect("input");
    std::fs::write(dir.join("w.csv.gz"), gzip(&text)).expect("input");
    for threads in ["1", "2"] {
        let expected = answer(&cardinal(&dir, &to_str(&run_args("w.csv", threads))));
        for producer in ["cat w.csv", "cat w.csv.gz"] {
            let mut command = Command::new("bash");
            command
                .arg("-c")
                .arg(format!(
                    "exec \"$0\" run schema.sql <({producer}) --json - --threads {threads}"
                ))
                .arg(env!("CARGO_BIN_EXE_cardinal"))
                .current_dir(&dir);
            let got = run_bounded(command);
            assert_eq!(answer(&got), expected, "<({producer}), {threads} threads");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows of `n,w` without a header, for the damaged inputs.
const COUNT_AND_SUM: &str = "CREATE STREAM t (n BIGINT, word TEXT) WITH (format = 'csv');
CREATE SUMMARY total AS SELECT count(*) AS n, sum(n) AS s FROM t;";

/// `count(*)` and `sum(n)` of the rows `0..rows`, as the JSON prints them.
fn count_and_sum(rows: u64) -> String {
    format!("\"n\":{rows},\"s\":{}", rows * rows.saturating_sub(1) / 2)
}

/// gzip followed by junk keeps every row (`gzip -dc` decodes them all and
/// warns of trailing garbage): 100 of 100 rows, then one reject naming
/// the input and where reading stopped. Before, the one chunk holding
/// all 100 rows was thrown away with the error: 0 rows.
#[test]
fn gzip_then_junk_keeps_every_row() {
    let dir = dir("junk");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    let text: String = (0..100).map(|i| format!("{i},w\n")).collect();
    let mut bytes = gzip(text.as_bytes());
    let stored = bytes.len();
    bytes.extend_from_slice(b"trailing junk, not a gzip member\n");
    std::fs::write(dir.join("junk.csv.gz"), &bytes).expect("input");
    for threads in ["1", "2"] {
        let output = cardinal(&dir, &to_str(&run_args("junk.csv.gz", threads)));
        let stdout = ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stdout.contains(&count_and_sum(100)), "{stdout}\n{stderr}");
        assert!(
            stderr.contains("1 rejected (input unreadable past this point: 1)"),
            "{stderr}"
        );
        let reject = stderr
            .lines()
            .find(|line| line.contains("junk.csv.gz: "))
            .expect("the reject is shown");
        let at = reject
            .split(" at compressed byte ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("a compressed offset: {reject}"));
        assert!(at >= stored && at <= bytes.len(), "{reject}");
        assert!(
            reject.contains(&format!("(decoded byte {})", text.len())),
            "{reject}"
        );
        assert!(!reject.contains("partial line"), "{reject}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gzip input cut in the middle keeps every whole row gzip's own
/// decoder recovers, folded exactly once; the partial row at the cut is
/// dropped and named in the reject with both offsets.
#[test]
fn a_cut_gzip_keeps_every_whole_row_before_the_cut() {
    let dir = dir("cut");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    let text: String = (0..50_000)
        .map(|i| format!("{i},word{}\n", i % 89))
        .collect();
    let packed = gzip(text.as_bytes());
    let cut = packed.len() * 3 / 5;
    std::fs::write(dir.join("cut.csv.gz"), &packed[..cut]).expect("input");
    // What gzip's decoder recovers from the cut file, in whole lines.
    let mut decoded = Vec::new();
    let mut decoder = flate2::read::MultiGzDecoder::new(&packed[..cut]);
    let mut block = [0u8; 4096];
    loop {
        match decoder.read(&mut block) {
            Ok(0) => panic!("the cut is noticed"),
            Ok(n) => decoded.extend_from_slice(&block[..n]),
            Err(_) => break,
        }
    }
    let whole = decoded
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |last| last + 1);
    let rows = decoded[..whole].iter().filter(|&&b| b == b'\n').count() as u64;
    assert!(whole < decoded.len(), "the cut falls inside a row");
    for threads in ["1", "2"] {
        let output = cardinal(&dir, &to_str(&run_args("cut.csv.gz", threads)));
        let stdout = ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stdout.contains(&count_and_sum(rows)), "{rows}: {stdout}");
        let reject = stderr
            .lines()
            .find(|line| line.contains("cut.csv.gz: "))
            .expect("the reject is shown");
        assert!(
            reject.contains(&format!(
                " at compressed byte {cut} (decoded byte {}); the partial line at decoded byte {whole} ({} bytes) is dropped; the rest of this input is not read",
                decoded.len(),
                decoded.len() - whole
            )),
            "{reject}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A byte flipped inside a gzip member: deflate decodes wrong rows until
/// the member's CRC says so (a sum of billions was printed with exit 0).
/// The run now stops without output, naming the input and the member,
/// with or without `--strict`; a flip deflate decodes harmlessly (an
/// unused bit) gives the true answer.
#[test]
fn a_flipped_byte_in_a_gzip_member_fails_the_run() {
    let dir = dir("flipped");
    std::fs::write(dir.join("schema.sql"), COUNT_AND_SUM).expect("schema");
    let text: String = (0..20_000)
        .map(|i| format!("{i},word{}\n", i % 89))
        .collect();
    let packed = gzip(text.as_bytes());
    let mut failed = 0;
    for (k, at) in [packed.len() / 3, packed.len() / 2, packed.len() * 2 / 3]
        .into_iter()
        .enumerate()
    {
        let mut flipped = packed.clone();
        flipped[at] ^= 0x04;
        let name = format!("flipped{k}.csv.gz");
        std::fs::write(dir.join(&name), &flipped).expect("input");
        for threads in ["1", "2"] {
            let output = cardinal(&dir, &to_str(&run_args(&name, threads)));
            if output.status.success() {
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    stdout.contains(&count_and_sum(20_000)),
                    "a flip at {at}: {stdout}"
                );
                continue;
            }
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains(&name)
                    && stderr.contains("gzip member at compressed byte 0")
                    && stderr.contains("writes no output"),
                "{stderr}"
            );
            failed += 1;
        }
    }
    assert!(failed > 0, "no flip was caught");
    let _ = std::fs::remove_dir_all(&dir);
}
