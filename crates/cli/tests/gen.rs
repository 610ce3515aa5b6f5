//! End-to-end tests of `cardinal gen`: run the binary in a temporary
//! directory as a user would, and check the files, stdout and stderr.

use std::path::PathBuf;
use std::process::{Command, Output};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cardinal-gen-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn cardinal(dir: &PathBuf, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cardinal runs");
    assert!(
        output.status.success(),
        "{args:?}: exit {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn impressions_to_a_file_with_truth() {
    let dir = temp_dir("impressions");
    let args = [
        "gen",
        "impressions",
        "--events",
        "5000",
        "--users",
        "500",
        "--days",
        "2",
        "--seed",
        "9",
        "-o",
        "events.csv",
        "--truth",
        "truth.json",
    ];
    let output = cardinal(&dir, &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("truth (truth.json): "), "{stderr}");
    assert!(stderr.contains("unique users with impressions"), "{stderr}");
    assert!(stderr.contains("alpha∩beta"), "{stderr}");
    assert!(stderr.contains("wrote "), "{stderr}");
    let csv = std::fs::read_to_string(dir.join("events.csv")).expect("events.csv");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("ts,user_id,kind,state,site,provider,campaign,revenue")
    );
    assert_eq!(lines.clone().count(), 5000);
    assert!(lines.all(|l| l.split(',').count() == 8));
    assert!(
        csv.lines()
            .nth(1)
            .expect("row")
            .starts_with("2026-11-01T00:00:")
    );
    let truth = std::fs::read_to_string(dir.join("truth.json")).expect("truth.json");
    assert!(truth.contains("\"users_by_provider\""), "{truth}");
    assert!(truth.contains("\"2026-11-02\""), "{truth}");
    assert!(!truth.contains("\"2026-11-03\""), "{truth}");

    // The same flags give the same bytes on stdout.
    let stdout = cardinal(&dir, &args[..args.len() - 4]).stdout;
    assert_eq!(stdout, csv.as_bytes());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn impressions_json_and_start_date() {
    let dir = temp_dir("json");
    let out = cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "3",
            "--format",
            "json",
            "--start",
            "2024-02-29",
        ],
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(text.lines().count(), 3);
    for line in text.lines() {
        assert!(line.starts_with("{\"ts\":\"2024-"), "{line}");
        assert!(line.contains(",\"user\":{\"id\":"), "{line}");
        assert!(line.contains(",\"ad\":{\"site\":\"site"), "{line}");
        assert!(line.ends_with('}'), "{line}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn amplab_tables() {
    let dir = temp_dir("bdb");
    cardinal(
        &dir,
        &["gen", "uservisits", "--rows", "1000", "-o", "uservisits"],
    );
    cardinal(
        &dir,
        &["gen", "rankings", "--rows", "200", "-o", "rankings"],
    );
    let visits = std::fs::read_to_string(dir.join("uservisits")).expect("uservisits");
    let rankings = std::fs::read_to_string(dir.join("rankings")).expect("rankings");
    assert_eq!(visits.lines().count(), 1000);
    assert_eq!(rankings.lines().count(), 200);
    assert!(visits.lines().all(|l| l.split(',').count() == 9));
    assert!(rankings.lines().all(|l| l.split(',').count() == 3));
    // Every visited URL is a rankings page (same default seed).
    let pages: std::collections::HashSet<&str> = rankings
        .lines()
        .map(|l| l.split(',').next().expect("url"))
        .collect();
    assert!(
        visits
            .lines()
            .all(|l| pages.contains(l.split(',').nth(1).expect("url")))
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_flags_are_clear_errors() {
    let dir = temp_dir("bad");
    for (args, expected) in [
        (
            &["gen", "impressions", "--start", "2026-02-30"][..],
            "not a date like 2026-11-01",
        ),
        (&["gen", "impressions", "--users", "0"][..], "invalid users"),
        (
            &["gen", "impressions", "--format", "xml"][..],
            "invalid value 'xml'",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_cardinal"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("cardinal runs");
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    // `cardinal gen ... | head -1`: the reader goes away after one line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["gen", "uservisits", "--rows", "2000000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("cardinal runs");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 64];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
    drop(stdout);
    let status = child.wait().expect("exits");
    assert!(status.success(), "{status:?}");
}
