//! End-to-end tests of `CREATE ATTRIBUTION` in `cardinal run`: a small
//! journey file credited by hand for every model, a split into two runs
//! joined by a chains snapshot, and generated impressions checked against
//! a plain replay (a `BTreeMap` of chains) on one and two threads.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const STREAM: &str = "
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
";

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("attr", name)
}

/// Runs the binary, asserts it succeeded and returns its stderr (where
/// the attribution counts are reported).
fn cardinal(dir: &Path, args: &[&str]) -> String {
    let output = common::cardinal(dir, args);
    common::ok(&output);
    String::from_utf8(output.stderr).expect("utf-8")
}

/// The value of `"key":` in a flat JSON object line, unquoted.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        + key.len()
        + 3;
    let rest = &line[start..];
    let end = if let Some(quoted) = rest.strip_prefix('"') {
        quoted.find('"').expect("closing quote") + 2
    } else {
        rest.find([',', '}']).expect("end of value")
    };
    rest[..end].trim_matches('"')
}

/// One credit row: (attribution, user, conversion time, touch time,
/// campaign, credit, revenue).
type Row = (String, String, String, String, String, f64, f64);

fn rows(path: &Path) -> Vec<Row> {
    std::fs::read_to_string(path)
        .expect("attribution rows")
        .lines()
        .map(|l| {
            (
                field(l, "attribution").to_owned(),
                field(l, "user_id").to_owned(),
                field(l, "conversion_ts").to_owned(),
                field(l, "touch_ts").to_owned(),
                field(l, "campaign").to_owned(),
                field(l, "credit").parse().expect("credit"),
                field(l, "revenue").parse().expect("revenue"),
            )
        })
        .collect()
}

fn attributions(lookback_days: u32, touch: &str) -> String {
    let mut sql = STREAM.to_owned();
    for (name, model) in [
        ("last", "last_touch"),
        ("first", "first_touch"),
        ("lin", "linear"),
        ("pos", "position_based"),
        ("decay", "time_decay HALF LIFE 2 DAYS"),
    ] {
        sql.push_str(&format!(
            "CREATE ATTRIBUTION {name} ON impressions BY user_id MODEL {model} LOOKBACK {lookback_days} DAYS
               TOUCH WHERE {touch} CONVERSION WHERE kind = 'conversion'
               VALUE revenue CAMPAIGN campaign SITE site;\n"
        ));
    }
    sql.push_str(
        "CREATE SUMMARY lin_by_campaign AS SELECT campaign, sum(credit) AS conversions,
           sum(revenue) AS revenue, count(*) AS touches FROM lin GROUP BY campaign;\n",
    );
    sql
}

fn day(d: u32, hour: u32) -> String {
    format!("2026-11-{:02}T{hour:02}:00:00Z", d + 1)
}

/// The journeys: (time, user, kind, campaign, revenue).
fn journeys() -> Vec<(String, u32, &'static str, &'static str, f64)> {
    vec![
        // User 2's first click is 20 days before its conversion: outside.
        (day(0, 0), 2, "click", "c1", 0.0),
        // User 1: three clicks; the first exactly 10 days before.
        (day(0, 12), 1, "click", "c1", 0.0),
        (day(1, 0), 4, "impression", "c9", 0.0),
        (day(3, 0), 3, "conversion", "", 7.0), // no touch points at all
        (day(4, 0), 3, "click", "c2", 0.0),    // after user 3's conversion
        (day(5, 12), 1, "click", "c2", 0.0),
        (day(8, 12), 1, "click", "c3", 0.0),
        (day(10, 12), 1, "conversion", "", 100.0),
        // User 1 again: the chain was freed; one new click.
        (day(11, 0), 1, "click", "c1", 0.0),
        (day(12, 0), 1, "conversion", "", 50.0),
        // User 2: two clicks at the same time; input order breaks the tie.
        (day(15, 0), 2, "click", "c2", 0.0),
        (day(15, 0), 2, "click", "c3", 0.0),
        (day(20, 0), 2, "conversion", "", 10.0),
    ]
}

fn write_journeys(path: &Path, events: &[(String, u32, &str, &str, f64)]) {
    let mut text = "ts,user_id,kind,state,site,provider,campaign,revenue\n".to_owned();
    for (ts, user, kind, campaign, revenue) in events {
        text.push_str(&format!(
            "{ts},{user},{kind},CA,s{user},p,{campaign},{revenue}\n"
        ));
    }
    std::fs::write(path, text).expect("write input");
}

/// The credit rows worked out by hand: per attribution, (user, touch day,
/// campaign, credit, revenue).
fn expected() -> BTreeMap<&'static str, Vec<(u32, &'static str, f64, f64)>> {
    let third = 1.0 / 3.0;
    // Time decay, half-life 2 days: user 1's touches are 10, 5 and 2 days
    // old: weights 2^-5, 2^-2.5, 2^-1.
    let w = [0.5f64.powf(5.0), 0.5f64.powf(2.5), 0.5];
    let total: f64 = w.iter().sum();
    let mut e = BTreeMap::new();
    let second = [(1, "c1", 1.0, 50.0)];
    e.insert(
        "last",
        vec![(1, "c3", 1.0, 100.0), second[0], (2, "c3", 1.0, 10.0)],
    );
    e.insert(
        "first",
        vec![(1, "c1", 1.0, 100.0), second[0], (2, "c2", 1.0, 10.0)],
    );
    e.insert(
        "lin",
        vec![
            (1, "c1", third, 100.0 * third),
            (1, "c2", third, 100.0 * third),
            (1, "c3", third, 100.0 * third),
            second[0],
            (2, "c2", 0.5, 5.0),
            (2, "c3", 0.5, 5.0),
        ],
    );
    e.insert(
        "pos",
        vec![
            (1, "c1", 0.4, 40.0),
            (1, "c2", 0.2, 20.0),
            (1, "c3", 0.4, 40.0),
            second[0],
            (2, "c2", 0.5, 5.0),
            (2, "c3", 0.5, 5.0),
        ],
    );
    e.insert(
        "decay",
        vec![
            (1, "c1", w[0] / total, 100.0 * w[0] / total),
            (1, "c2", w[1] / total, 100.0 * w[1] / total),
            (1, "c3", w[2] / total, 100.0 * w[2] / total),
            second[0],
            (2, "c2", 0.5, 5.0),
            (2, "c3", 0.5, 5.0),
        ],
    );
    e
}

fn check_hand_rows(rows: &[Row]) {
    let expected = expected();
    for (name, want) in &expected {
        let got: Vec<&Row> = rows.iter().filter(|r| r.0 == *name).collect();
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.1, w.0.to_string(), "{name} user");
            assert_eq!(g.4, w.1, "{name} campaign: {g:?}");
            assert!((g.5 - w.2).abs() < 1e-12, "{name} credit {g:?} vs {w:?}");
            assert!((g.6 - w.3).abs() < 1e-9, "{name} revenue {g:?} vs {w:?}");
        }
    }
    assert_eq!(rows.len(), expected.values().map(Vec::len).sum::<usize>());
}

#[test]
fn hand_computed_credits_for_every_model() {
    let dir = dir("hand");
    std::fs::write(dir.join("schema.sql"), attributions(10, "kind = 'click'")).expect("schema");
    write_journeys(&dir.join("j.csv"), &journeys());
    let stderr = cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "j.csv",
            "--attributions",
            "credit.jsonl",
            "--json",
            "summary.jsonl",
            "--quiet",
        ],
    );
    assert!(
        stderr.contains("lin: 8 touch points, 4 conversions (1 without touch points in the window), 6 credit rows"),
        "{stderr}"
    );
    check_hand_rows(&rows(&dir.join("credit.jsonl")));
    // The summary over the linear credit stream: per campaign.
    let summary = std::fs::read_to_string(dir.join("summary.jsonl")).expect("summary");
    let mut by_campaign = BTreeMap::new();
    for line in summary.lines() {
        by_campaign.insert(
            field(line, "campaign").to_owned(),
            (
                field(line, "conversions").parse::<f64>().expect("number"),
                field(line, "touches").to_owned(),
            ),
        );
    }
    let third = 1.0 / 3.0;
    for (campaign, conversions, touches) in [
        ("c1", 1.0 + third, "2"),
        ("c2", 0.5 + third, "2"),
        ("c3", 0.5 + third, "2"),
    ] {
        let (got, got_touches) = &by_campaign[campaign];
        assert!((got - conversions).abs() < 1e-6, "{campaign}: {got}");
        assert_eq!(got_touches, touches);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_runs_joined_by_a_snapshot_equal_one_run() {
    let dir = dir("snapshot");
    std::fs::write(dir.join("schema.sql"), attributions(10, "kind = 'click'")).expect("schema");
    let events = journeys();
    // Split between user 1's clicks and its conversion.
    write_journeys(&dir.join("a.csv"), &events[..6]);
    write_journeys(&dir.join("b.csv"), &events[6..]);
    let run = |input: &str, out: &str| {
        cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                input,
                "--attributions",
                out,
                "--chains-snapshot",
                "chains",
                "--quiet",
            ],
        )
    };
    run("a.csv", "a.jsonl");
    assert!(dir.join("chains/lin.chains").exists());
    assert!(dir.join("chains/lin.names").exists());
    run("b.csv", "b.jsonl");
    let mut joined = rows(&dir.join("a.jsonl"));
    joined.extend(rows(&dir.join("b.jsonl")));
    check_hand_rows(&joined);
    // Two inputs in one run on two threads: the same rows.
    cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "a.csv",
            "b.csv",
            "--threads",
            "2",
            "--attributions",
            "both.jsonl",
            "--quiet",
        ],
    );
    check_hand_rows(&rows(&dir.join("both.jsonl")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn epoch_ms(ts: &str) -> i64 {
    let n = |range: std::ops::Range<usize>| ts[range].parse::<i64>().expect("digits");
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // Days from civil (proleptic Gregorian).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + n(11..13)) * 60 + n(14..16)) * 60_000 + n(17..19) * 1000
}

#[test]
fn generated_impressions_match_a_plain_replay_on_any_thread_count() {
    let dir = dir("generated");
    let sql = format!(
        "{STREAM}
CREATE ATTRIBUTION lin ON impressions BY user_id MODEL linear LOOKBACK 3 DAYS
  TOUCH WHERE kind IN ('impression', 'click') CONVERSION WHERE kind = 'conversion'
  VALUE revenue CAMPAIGN campaign;
CREATE SUMMARY by_campaign AS SELECT date_trunc('day', conversion_ts) AS day, campaign,
  sum(credit) AS conversions, sum(revenue) AS revenue, count(*) AS touches
  FROM lin GROUP BY day, campaign;"
    );
    std::fs::write(dir.join("schema.sql"), sql).expect("schema");
    cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "200000",
            "--users",
            "5000",
            "-o",
            "imp.csv",
        ],
    );
    // The same events in three files, each with the header.
    let text = std::fs::read_to_string(dir.join("imp.csv")).expect("generated");
    let (header, body) = text.split_once('\n').expect("header");
    let lines: Vec<&str> = body.lines().collect();
    let third = lines.len() / 3;
    for (i, part) in [
        &lines[..third],
        &lines[third..2 * third],
        &lines[2 * third..],
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(
            dir.join(format!("part{i}.csv")),
            format!("{header}\n{}\n", part.join("\n")),
        )
        .expect("part");
    }
    let run = |inputs: &[&str], threads: &str, tag: &str| {
        let mut args = vec!["run", "schema.sql"];
        args.extend_from_slice(inputs);
        let credit = format!("credit-{tag}.jsonl");
        let summary = format!("summary-{tag}.jsonl");
        args.extend_from_slice(&[
            "--threads",
            threads,
            "--attributions",
            &credit,
            "--json",
            &summary,
            "--quiet",
        ]);
        cardinal(&dir, &args);
        (
            std::fs::read_to_string(dir.join(&credit)).expect("credit"),
            std::fs::read_to_string(dir.join(&summary)).expect("summary"),
        )
    };
    let one = run(&["imp.csv"], "1", "one");
    let two = run(&["part0.csv", "part1.csv", "part2.csv"], "2", "two");
    assert_eq!(
        one, two,
        "1 thread over one file and 2 over three parts differ"
    );

    // The replay: events in time order (stable: input order on ties),
    // chains in a BTreeMap, a conversion takes its user's chain.
    let mut events: Vec<(i64, &str, &str, &str, &str)> = lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (epoch_ms(f[0]), f[1], f[2], f[6], f[7])
        })
        .collect();
    events.sort_by_key(|e| e.0);
    let lookback = 3 * 86_400_000;
    let mut chains: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    let mut want: Vec<(String, i64, i64, String, f64, f64)> = Vec::new();
    for (t, user, kind, campaign, revenue) in events {
        match kind {
            "impression" | "click" => chains.entry(user).or_default().push((t, campaign)),
            "conversion" => {
                let chain = chains.remove(user).unwrap_or_default();
                let touches: Vec<&(i64, &str)> = chain
                    .iter()
                    .filter(|(tt, _)| t - lookback <= *tt && *tt <= t)
                    .collect();
                let micros = (revenue.parse::<f64>().expect("revenue") * 1e6).round();
                let n = touches.len() as f64;
                for (tt, c) in touches {
                    want.push((
                        user.to_owned(),
                        t,
                        *tt,
                        (*c).to_owned(),
                        1.0 / n,
                        1.0 / n * micros / 1e6,
                    ));
                }
            }
            _ => {}
        }
    }
    let got: Vec<(String, i64, i64, String, f64, f64)> = one
        .0
        .lines()
        .map(|l| {
            (
                field(l, "user_id").to_owned(),
                epoch_ms(field(l, "conversion_ts")),
                epoch_ms(field(l, "touch_ts")),
                field(l, "campaign").to_owned(),
                field(l, "credit").parse().expect("credit"),
                field(l, "revenue").parse().expect("revenue"),
            )
        })
        .collect();
    let key = |r: &(String, i64, i64, String, f64, f64)| (r.1, r.0.clone(), r.2, r.3.clone());
    let mut got_sorted = got.clone();
    got_sorted.sort_by_key(key);
    want.sort_by_key(key);
    assert!(
        want.len() > 100,
        "the replay credits {} touches",
        want.len()
    );
    assert_eq!(got_sorted.len(), want.len());
    for (g, w) in got_sorted.iter().zip(&want) {
        assert_eq!(key(g), key(w));
        assert!(
            (g.4 - w.4).abs() < 1e-12 && (g.5 - w.5).abs() < 1e-9,
            "{g:?} vs {w:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A conversion whose value is NULL, or not a finite number (an infinity,
/// NaN, past the micro-unit range), credits its touch points with a NULL
/// revenue, as one without `VALUE` does; the out-of-range ones are
/// counted. Before, both credited a revenue of 0.
#[test]
fn conversions_without_a_usable_value_credit_a_null_revenue() {
    let dir = dir("null-values");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM ev (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT, value DOUBLE)
           WITH (format = 'csv', header = true, time = 'ts');
         CREATE ATTRIBUTION credit ON ev BY user_id MODEL last_touch LOOKBACK 7 DAYS
           TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
           VALUE value CAMPAIGN campaign;",
    )
    .expect("schema");
    let mut csv = String::from("ts,user_id,kind,campaign,value\n");
    for (user, value) in [(1, "4"), (2, ""), (3, "inf"), (4, "NaN"), (5, "1e300")] {
        csv.push_str(&format!("2026-11-01T00:00:00Z,{user},click,c{user},\n"));
        csv.push_str(&format!(
            "2026-11-02T00:00:00Z,{user},conversion,,{value}\n"
        ));
    }
    std::fs::write(dir.join("in.csv"), csv).expect("input");
    let stderr = cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "in.csv",
            "--attributions",
            "credit.jsonl",
            "--quiet",
        ],
    );
    assert!(
        stderr.contains("3 conversion values out of range (revenue NULL)"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(dir.join("credit.jsonl")).expect("rows");
    let mut revenue: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            (
                field(l, "user_id").to_owned(),
                field(l, "revenue").to_owned(),
            )
        })
        .collect();
    revenue.sort();
    assert_eq!(
        revenue,
        [
            ("1".to_owned(), "4".to_owned()),
            ("2".to_owned(), "null".to_owned()),
            ("3".to_owned(), "null".to_owned()),
            ("4".to_owned(), "null".to_owned()),
            ("5".to_owned(), "null".to_owned()),
        ],
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Campaign names that are not UTF-8 print escaped in the credit rows, as
/// in summaries: Latin-1 `caf\xe9` and `caf\xe8` were both `caf\u{fffd}`.
#[test]
fn credit_rows_print_campaigns_that_are_not_utf8_apart() {
    let dir = dir("not-utf8");
    let mut sql = STREAM.to_owned();
    sql.push_str(
        "CREATE ATTRIBUTION lin ON impressions BY user_id MODEL linear LOOKBACK 10 DAYS
           TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
           VALUE revenue CAMPAIGN campaign SITE site;\n",
    );
    std::fs::write(dir.join("schema.sql"), sql).expect("schema");
    let mut input = b"ts,user_id,kind,state,site,provider,campaign,revenue\n".to_vec();
    for (ts, campaign) in [(day(0, 0), &b"caf\xe9"[..]), (day(0, 1), b"caf\xe8")] {
        input.extend_from_slice(format!("{ts},1,click,CA,s,p,").as_bytes());
        input.extend_from_slice(campaign);
        input.extend_from_slice(b",0\n");
    }
    input.extend_from_slice(format!("{},1,conversion,CA,s,p,,10\n", day(1, 0)).as_bytes());
    std::fs::write(dir.join("j.csv"), input).expect("input");
    cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "j.csv",
            "--attributions",
            "credit.jsonl",
            "--quiet",
        ],
    );
    let mut campaigns: Vec<String> = rows(&dir.join("credit.jsonl"))
        .into_iter()
        .map(|row| row.4)
        .collect();
    campaigns.sort();
    assert_eq!(campaigns, ["caf\\\\xe8", "caf\\\\xe9"]);
    let _ = std::fs::remove_dir_all(&dir);
}
