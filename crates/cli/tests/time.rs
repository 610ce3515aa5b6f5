//! Event time end to end: `time_bucket` summaries over generated events
//! counted by hand, and the same events with their times spelled as
//! RFC 3339, epoch milliseconds and seconds in CSV, and as JSON numbers,
//! giving the same files.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use common::{cardinal, csv_lines, ok};

/// 2026-11-01T00:00:00Z in milliseconds since the epoch.
const START_MS: i64 = 1_793_491_200_000;
const DAY_MS: i64 = 86_400_000;
const FIVE_MINUTES_MS: i64 = 300_000;
/// Events over two days: about 17 per 5-minute bucket and state, so
/// every one has some.
const EVENTS: usize = 30_000;
const STATES: [&str; 3] = ["CA", "NY", "TX"];

/// A small seeded generator (SplitMix64), so the hand count is fixed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The events: milliseconds (any millisecond of the two days, in no
/// particular order) and a state.
fn events() -> Vec<(i64, &'static str)> {
    let mut rng = Rng(7);
    (0..EVENTS)
        .map(|_| {
            let ms = START_MS
                + i64::try_from(rng.next() % 2).expect("small") * DAY_MS
                + i64::try_from(rng.next() % 86_400_000).expect("small");
            let state = STATES[usize::try_from(rng.next() % 3).expect("small")];
            (ms, state)
        })
        .collect()
}

/// `ms` as RFC 3339 in UTC, for the two days the events cover, written
/// here by hand rather than by the code under test.
fn rfc3339(ms: i64) -> String {
    let since = ms - START_MS;
    assert!((0..2 * DAY_MS).contains(&since));
    let day = since / DAY_MS + 1;
    let in_day = since % DAY_MS;
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    if milli == 0 {
        format!("2026-11-{day:02}T{h:02}:{m:02}:{s:02}Z")
    } else {
        format!("2026-11-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
    }
}

/// The expected rows: `bucket,state,count`, by bucket then state.
fn hand_count(events: &[(i64, &str)]) -> Vec<String> {
    let mut counts: BTreeMap<(i64, &str), u64> = BTreeMap::new();
    for &(ms, state) in events {
        *counts
            .entry((ms / FIVE_MINUTES_MS * FIVE_MINUTES_MS, state))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((bucket, state), n)| format!("{},{state},{n}", rfc3339(bucket)))
        .collect()
}

fn schema(format: &str) -> String {
    let header = if format == "csv" {
        ", header = true"
    } else {
        ""
    };
    format!(
        "CREATE STREAM events (ts TIMESTAMP, state TEXT)
           WITH (format = '{format}'{header}, time = 'ts');
         CREATE SUMMARY five AS
           SELECT time_bucket('5 minutes', ts) AS t, state, count(*) AS events
           FROM events GROUP BY t, state;
         CREATE SUMMARY quarters AS
           SELECT time_bucket('15 minutes', ts) AS t, count(*) AS events
           FROM events GROUP BY t;"
    )
}

fn run(dir: &Path, format: &str, input: &str, out: &str) {
    std::fs::write(dir.join(format!("{out}.sql")), schema(format)).expect("schema");
    let stdout = ok(&cardinal(
        dir,
        &[
            "run",
            &format!("{out}.sql"),
            input,
            "--threads",
            "2",
            "--out",
            out,
            "--quiet",
            "--strict",
        ],
    ));
    let _ = stdout;
}

/// Five-minute buckets count what a hand count over the same events
/// counts; each day's file holds only its own buckets; and 15-minute
/// buckets add up the 5-minute ones they hold.
#[test]
fn five_minute_buckets_match_a_hand_count() {
    let dir = common::scratch_dir("time", "five");
    let events = events();
    let mut csv = String::from("ts,state\n");
    for &(ms, state) in &events {
        let _ = writeln!(csv, "{},{state}", rfc3339(ms));
    }
    std::fs::write(dir.join("events.csv"), csv).expect("input");
    run(&dir, "csv", "events.csv", "out");
    let want = hand_count(&events);
    assert_eq!(
        want.len(),
        2 * 288 * STATES.len(),
        "every bucket has events"
    );
    assert_eq!(csv_lines(&dir.join("out"), "five"), want);
    for day in ["2026-11-01", "2026-11-02"] {
        let file = std::fs::read_to_string(dir.join("out/five").join(format!("{day}.csv")))
            .expect("a file per day");
        assert!(file.lines().skip(1).all(|l| l.starts_with(day)), "{day}");
    }
    let mut quarters: BTreeMap<String, u64> = BTreeMap::new();
    for line in &want {
        let fields: Vec<&str> = line.split(',').collect();
        let minute: u32 = fields[0][14..16].parse().expect("minute");
        let quarter = format!("{}{:02}:00Z", &fields[0][..14], minute / 15 * 15);
        *quarters.entry(quarter).or_default() += fields[2].parse::<u64>().expect("count");
    }
    let quarters: Vec<String> = quarters
        .into_iter()
        .map(|(t, n)| format!("{t},{n}"))
        .collect();
    assert_eq!(csv_lines(&dir.join("out"), "quarters"), quarters);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same events with epoch times (milliseconds and seconds in CSV,
/// numbers in JSON) give the files RFC 3339 times give.
#[test]
fn epoch_times_in_csv_and_json_numbers_read_as_rfc3339_does() {
    let dir = common::scratch_dir("time", "epoch");
    let events = events();
    let (mut rfc, mut ms_csv, mut mixed_csv, mut json) = (
        String::from("ts,state\n"),
        String::from("ts,state\n"),
        String::from("ts,state\n"),
        String::new(),
    );
    for (i, &(ms, state)) in events.iter().enumerate() {
        let _ = writeln!(rfc, "{},{state}", rfc3339(ms));
        let _ = writeln!(ms_csv, "{ms},{state}");
        // Seconds with a fraction for some, milliseconds for the others.
        if i % 2 == 0 {
            let _ = writeln!(mixed_csv, "{}.{:03},{state}", ms / 1000, ms % 1000);
        } else {
            let _ = writeln!(mixed_csv, "{ms},{state}");
        }
        if i % 3 == 0 {
            let _ = writeln!(
                json,
                "{{\"ts\": {}.{:03}, \"state\": \"{state}\"}}",
                ms / 1000,
                ms % 1000
            );
        } else if i % 3 == 1 {
            let _ = writeln!(json, "{{\"ts\": {ms}, \"state\": \"{state}\"}}");
        } else {
            let _ = writeln!(json, "{{\"state\": \"{state}\", \"ts\": \"{ms}\"}}");
        }
    }
    for (name, text) in [
        ("rfc.csv", &rfc),
        ("ms.csv", &ms_csv),
        ("mixed.csv", &mixed_csv),
        ("events.ndjson", &json),
    ] {
        std::fs::write(dir.join(name), text).expect("input");
    }
    run(&dir, "csv", "rfc.csv", "rfc");
    run(&dir, "csv", "ms.csv", "ms");
    run(&dir, "csv", "mixed.csv", "mixed");
    run(&dir, "json", "events.ndjson", "json");
    let want = hand_count(&events);
    for out in ["rfc", "ms", "mixed", "json"] {
        assert_eq!(csv_lines(&dir.join(out), "five"), want, "{out}");
        assert_eq!(
            csv_lines(&dir.join(out), "quarters"),
            csv_lines(&dir.join("rfc"), "quarters"),
            "{out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
