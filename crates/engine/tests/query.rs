//! Live answers against the batch engine: a query over a range, with a
//! condition and a roll-up, equals `execute` of the same records under a
//! summary that declares that range, filter and grouping directly (exact
//! aggregates equal, HyperLogLog bytes equal); the errors a request can
//! make; and an overlap against the exact intersection.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;

use cardinal_engine::query::{
    Buckets, Query, Selector, answer, overlap, overlap_of, overlap_query, results_of,
};
use cardinal_engine::{EngineOptions, Error, Executed, execute};
use cardinal_event::Timestamp;
use cardinal_rollup::{AggState, Output, Rollup};
use cardinal_route::Plan;
use proptest::prelude::*;

const STREAM: &str =
    "CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, t TEXT, c TEXT) WITH (time = 'ts');";

const HEADER: &str = "ts,n,x,t,c";

/// The aggregates both the queried summary and the direct one declare:
/// every kind, so every merge is exercised.
const AGGREGATES: &str = "count(*) AS events, count(x) AS xs, sum(x) AS sx, avg(n) AS an,
    min(x) AS lo, max(n) AS hi, sum(n) AS sn, min(ts) AS first_seen, hll(n) AS users,
    exact_distinct(t) AS texts, theta(n) AS th, topk(t, 3) AS top, quantiles(x) AS qs";

/// The queried summary: hours, three dimensions.
fn base_summary() -> String {
    format!(
        "CREATE SUMMARY base AS SELECT date_trunc('hour', ts) AS hour, t, c, n % 7 AS m,
           {AGGREGATES} FROM s GROUP BY hour, t, c, m;"
    )
}

/// The dimensions of `base`, by name, as written over the stream.
const DIMENSIONS: [(&str, &str); 3] = [("t", "t"), ("c", "c"), ("m", "n % 7")];

/// Conditions over `base`'s dimensions and the same over the stream's
/// columns.
const CONDITIONS: [(&str, &str); 6] = [
    ("c = 'c1'", "c = 'c1'"),
    ("m > 2 AND c <> 'c0'", "n % 7 > 2 AND c <> 'c0'"),
    (
        "t IN ('t1', 't2', 't3') OR m IS NULL",
        "t IN ('t1', 't2', 't3') OR n % 7 IS NULL",
    ),
    (
        "upper(c) = 'C2' OR substr(t, 2) = '7'",
        "upper(c) = 'C2' OR substr(t, 2) = '7'",
    ),
    ("NOT (m = 3)", "NOT (n % 7 = 3)"),
    ("m * 2 + 1 >= 7", "(n % 7) * 2 + 1 >= 7"),
];

/// Record `i` of a stream drawn from `seed`: six hours of two days, a few
/// hundred users, some NULL numbers, an occasional bad row.
fn record(seed: u64, i: u64) -> String {
    let h = splitmix(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let day = 1 + h % 2;
    let hour = (h >> 8) % 6;
    let n = (h >> 16) % 700;
    let x = ((h >> 32) % 10_000) as f64 / 4096.0;
    let t = (h >> 44) % 12;
    let c = (h >> 52) % 4;
    let ts = format!("2026-11-0{day}T0{hour}:{:02}:00Z", (h >> 24) % 60);
    match (h >> 60) % 16 {
        0 => format!("{ts},,{x},t{t},c{c}"),
        1 => format!("{ts},not a number,{x},t{t},c{c}"),
        2 => format!("{ts},{n},,t{t},c{c}"),
        _ => format!("{ts},{n},{x},t{t},c{c}"),
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `execute` of `plan` over `lines` under [`HEADER`], on one thread.
fn run<'p>(plan: &'p Plan, lines: impl Iterator<Item = String>, name: &str) -> Executed<'p> {
    let path: PathBuf =
        std::env::temp_dir().join(format!("cardinal-query-{}-{name}.csv", std::process::id()));
    let mut bytes = format!("{HEADER}\n").into_bytes();
    for line in lines {
        writeln!(bytes, "{line}").expect("write to a Vec");
    }
    std::fs::write(&path, bytes).expect("temp file");
    let options = EngineOptions::new(1, 1 << 30);
    let executed = execute(plan, std::slice::from_ref(&path), &options).expect("execute");
    std::fs::remove_file(&path).expect("remove temp file");
    executed
}

/// Every group's states in a comparable form: HyperLogLogs as their
/// bytes, KLL quantiles as their count of values (their compactions
/// depend on the order of merges), the rest as their output.
fn canonical(rollup: &Rollup) -> Vec<String> {
    let kinds = &rollup.shape().aggs;
    let mut rows: Vec<String> = rollup
        .groups()
        .map(|(bucket, key, states)| {
            let states: Vec<String> = states
                .iter()
                .zip(kinds)
                .map(|(state, kind)| match state {
                    AggState::Hll(hll) => hll.to_hex(),
                    AggState::Quantiles(q) => format!("kll n={}", q.count()),
                    _ => format!("{:?}", state.output(kind)),
                })
                .collect();
            format!("{bucket:?} {key:?} {}", states.join(" "))
        })
        .collect();
    rows.sort();
    rows
}

fn hour(index: u64) -> Timestamp {
    // Hours 0..6 of 2026-11-01 and 2026-11-02, numbered 0..12.
    let day = 1 + index / 6;
    let text = format!("2026-11-0{day}T0{}:00:00Z", index % 6);
    Timestamp::parse(text.as_bytes()).expect("a time")
}

/// The direct summary: `query`'s range, condition and grouping declared.
fn direct_summary(
    from: Option<Timestamp>,
    to: Option<Timestamp>,
    condition: Option<&str>,
    by: &[usize],
    buckets: Buckets,
) -> String {
    let mut select = Vec::new();
    let mut group = Vec::new();
    if buckets == Buckets::Keep {
        select.push("date_trunc('hour', ts) AS hour".to_owned());
        group.push("hour".to_owned());
    }
    for &d in by {
        let (name, expr) = DIMENSIONS[d];
        select.push(format!("{expr} AS {name}"));
        group.push(name.to_owned());
    }
    select.push(AGGREGATES.to_owned());
    let mut filter = Vec::new();
    if let Some(from) = from {
        filter.push(format!("ts >= '{from}'"));
    }
    if let Some(to) = to {
        filter.push(format!("ts < '{to}'"));
    }
    if let Some(condition) = condition {
        filter.push(format!("({condition})"));
    }
    format!(
        "CREATE SUMMARY direct AS SELECT {} FROM s{}{};",
        select.join(", "),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filter.join(" AND "))
        },
        if group.is_empty() {
            String::new()
        } else {
            format!(" GROUP BY {}", group.join(", "))
        }
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x0a5e_0038),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_query_equals_execute_of_the_summary_it_describes(
        seed in any::<u64>(),
        records in 200u64..1_500,
        range in (proptest::option::of(0u64..12), proptest::option::of(1u64..13)),
        condition in proptest::option::of(0..CONDITIONS.len()),
        by in proptest::sample::subsequence(vec![0usize, 1, 2], 0..=3).prop_shuffle(),
        collapse in any::<bool>(),
    ) {
        let (from, to) = match range {
            (Some(a), Some(b)) if a >= b => (Some(b - 1), Some(a + 1)),
            other => other,
        };
        let (from, to) = (from.map(hour), to.map(hour));
        let buckets = if collapse { Buckets::All } else { Buckets::Keep };
        let sql = format!(
            "{STREAM}\n{}\n{}",
            base_summary(),
            direct_summary(from, to, condition.map(|c| CONDITIONS[c].1), &by, buckets)
        );
        let plan = Plan::compile(&sql).expect("compiles");
        let executed = run(&plan, (0..records).map(|i| record(seed, i)), "equal");
        let query = Query {
            summary: "base".into(),
            from,
            to,
            where_: condition.map(|c| CONDITIONS[c].0.to_owned()),
            by: Some(by.iter().map(|&d| DIMENSIONS[d].0.to_owned()).collect()),
            buckets,
        };
        let answered = answer(&plan.summaries[0], &executed.rollups[0], &query).expect("answers");
        prop_assert_eq!(canonical(&answered.rollup), canonical(&executed.rollups[1]));
        // And it prints as `cardinal run` prints the direct summary.
        let printed = cardinal_export::table(&answered.results().expect("results"));
        let expected = results_of(&plan.summaries[1], &executed.rollups[1]).expect("results");
        prop_assert_eq!(
            mask_quantiles(&printed),
            mask_quantiles(&cardinal_export::table(&expected))
        );
    }
}

/// The table with every quantiles cell cut (they agree within their rank
/// error, not digit for digit) and the spaces that align it squeezed.
fn mask_quantiles(table: &str) -> String {
    table
        .lines()
        .map(|line| {
            let cut = line.find("p50=").map_or(line, |at| &line[..at]);
            cut.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn base_plan() -> Plan {
    Plan::compile(&format!(
        "{STREAM}\n{}\nCREATE SUMMARY flat AS SELECT c, count(*) AS events, hll(n) AS users FROM s GROUP BY c;",
        base_summary()
    ))
    .expect("compiles")
}

#[test]
fn everything_asked_gives_the_rollup_back() {
    let plan = base_plan();
    let executed = run(&plan, (0..500).map(|i| record(7, i)), "whole");
    let query = Query {
        summary: "BASE".into(),
        ..Query::default()
    };
    let answered = answer(&plan.summaries[0], &executed.rollups[0], &query).expect("answers");
    assert_eq!(answered.groups_matched, executed.rollups[0].group_count());
    assert_eq!(
        cardinal_export::table(&answered.results().expect("results")),
        cardinal_export::table(
            &results_of(&plan.summaries[0], &executed.rollups[0]).expect("results")
        )
    );
    let mut csv = Vec::new();
    cardinal_export::write_csv(
        &mut csv,
        &answered.results().expect("results"),
        cardinal_export::Options::default(),
    )
    .expect("csv");
    let csv = String::from_utf8(csv).expect("UTF-8");
    assert!(csv.starts_with(
        "hour,t,c,m,events,xs,sx,an,lo,hi,sn,first_seen,users,users_lower,users_upper,"
    ));
    assert_eq!(csv.lines().count(), 1 + executed.rollups[0].group_count());
}

#[test]
fn a_condition_keeps_only_the_groups_it_is_true_for() {
    let plan = base_plan();
    let executed = run(&plan, (0..800).map(|i| record(11, i)), "kept");
    let query = Query {
        summary: "base".into(),
        where_: Some("c = 'c2' AND m IS NOT NULL".into()),
        by: Some(vec!["c".into()]),
        buckets: Buckets::All,
        ..Query::default()
    };
    let answered = answer(&plan.summaries[0], &executed.rollups[0], &query).expect("answers");
    let results = answered.results().expect("results");
    let rows = results.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(results.dims(&rows[0]).to_vec(), vec![Some("c2".to_owned())]);
    // Brute force: the records of c2 with a number.
    let expected = (0..800)
        .map(|i| record(11, i))
        .filter(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            fields[4] == "c2" && fields[1].parse::<i64>().is_ok()
        })
        .count() as u64;
    assert_eq!(
        rows[0].states[0].output(&answered.rollup.shape().aggs[0]),
        Output::Count(expected)
    );
}

/// The message of `query`'s error over `plan`'s `base`.
fn error_of(plan: &Plan, rollup: &Rollup, index: usize, query: Query) -> Error {
    answer(&plan.summaries[index], rollup, &query).expect_err("refused")
}

#[test]
fn bad_requests_are_errors_that_say_why() {
    let plan = base_plan();
    let executed = run(&plan, (0..100).map(|i| record(3, i)), "errors");
    let rollup = &executed.rollups[0];
    let base = |f: fn(&mut Query)| {
        let mut q = Query {
            summary: "base".into(),
            ..Query::default()
        };
        f(&mut q);
        q
    };

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.by = Some(vec!["state".into()])),
    );
    assert!(matches!(e, Error::UnknownDimension { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "unknown dimension state of summary base (it has t, c, m)"
    );

    let e = error_of(&plan, rollup, 0, base(|q| q.by = Some(vec!["hour".into()])));
    assert!(
        matches!(e, Error::UnknownDimension { .. }),
        "the bucket is not a dimension: {e}"
    );

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.by = Some(vec!["c".into(), "C".into()])),
    );
    assert!(matches!(e, Error::DuplicateDimension { .. }), "{e}");

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.where_ = Some("c = 'x' AND sate = 1".into())),
    );
    assert_eq!(
        e.to_string(),
        "where: line 1, column 13: unknown column sate in the dimensions of summary base (it has t, c, m)\n  |\n1 | c = 'x' AND sate = 1\n  |             ^^^^"
    );

    let e = error_of(&plan, rollup, 0, base(|q| q.where_ = Some("c = ".into())));
    let Error::Condition {
        source: cardinal_route::Error::At { line, column, .. },
    } = &e
    else {
        panic!("a compile error with a position: {e}");
    };
    assert_eq!((*line, *column), (1, 4), "{e}");

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.where_ = Some("c = 'x' c".into())),
    );
    assert!(e.to_string().contains("column 9"), "{e}");

    let e = error_of(&plan, rollup, 0, base(|q| q.where_ = Some("m + 1".into())));
    assert!(
        e.to_string()
            .contains("a condition is needed, and this is BIGINT"),
        "{e}"
    );

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.where_ = Some("count(*) > 3".into())),
    );
    assert!(
        e.to_string()
            .contains("aggregate count is not allowed in a query's condition"),
        "{e}"
    );

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.where_ = Some("c = 'c1'".repeat(4000))),
    );
    assert!(matches!(e, Error::ConditionTooLong { .. }), "{e}");

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| q.where_ = Some("m / 0 = 1".into())),
    );
    assert!(matches!(e, Error::Evaluate { .. }), "{e}");

    let e = error_of(
        &plan,
        rollup,
        0,
        base(|q| {
            q.from = Some(Timestamp(10));
            q.to = Some(Timestamp(10));
        }),
    );
    assert!(matches!(e, Error::EmptyRange { .. }), "{e}");

    let e = error_of(
        &plan,
        &executed.rollups[1],
        1,
        Query {
            summary: "flat".into(),
            from: Some(Timestamp(0)),
            ..Query::default()
        },
    );
    assert!(matches!(e, Error::NoTimeBucket { .. }), "{e}");

    let e = error_of(
        &plan,
        rollup,
        0,
        Query {
            summary: "flat".into(),
            ..Query::default()
        },
    );
    assert!(matches!(e, Error::WrongSummary { .. }), "{e}");

    let e = cardinal_engine::query::find_summary(&plan, "nope").expect_err("unknown");
    assert_eq!(
        e.to_string(),
        "unknown summary nope (the schema has base, flat)"
    );

    let side = Selector::default();
    let e = overlap(&plan.summaries[0], rollup, &side, &side, "usres").expect_err("unknown");
    assert!(matches!(e, Error::UnknownAggregate { .. }), "{e}");
    let e = overlap(&plan.summaries[0], rollup, &side, &side, "events").expect_err("not hll");
    assert!(matches!(e, Error::NotHll { .. }), "{e}");
}

/// Users of `c` in the overlap stream: `a` holds 0..60,000 and `b`
/// 40,000..100,000 (20,000 shared), `z` 200,000..230,000 (none shared
/// with `a`), each spread over three days.
fn audience_lines() -> impl Iterator<Item = String> {
    let side = |c: &'static str, users: std::ops::Range<u64>| {
        users.map(move |u| format!("2026-11-0{}T10:00:00Z,{u},1.0,t,{c}", 1 + u % 3))
    };
    side("a", 0..60_000)
        .chain(side("b", 40_000..100_000))
        .chain(side("z", 200_000..230_000))
}

#[test]
fn overlap_holds_the_exact_intersection_in_its_interval() {
    let plan = Plan::compile(&format!(
        "{STREAM}\nCREATE SUMMARY reach AS SELECT date_trunc('day', ts) AS day, c,
           hll(n, 14, 6) AS users, count(*) AS events FROM s GROUP BY day, c;"
    ))
    .expect("compiles");
    let executed = run(&plan, audience_lines(), "overlap");
    let (summary, rollup) = (&plan.summaries[0], &executed.rollups[0]);
    let of = |c: &str| Selector {
        where_: Some(format!("c = '{c}'")),
        ..Selector::default()
    };
    let lines: Vec<String> = audience_lines().collect();
    let users = |c: &str| -> HashSet<&str> {
        lines
            .iter()
            .filter(|l| l.ends_with(&format!(",{c}")))
            .map(|l| l.split(',').nth(1).expect("a user"))
            .collect()
    };
    let exact = users("a").intersection(&users("b")).count() as f64;
    assert_eq!(exact, 20_000.0);

    let answer = overlap(summary, rollup, &of("a"), &of("b"), "users").expect("overlap");
    assert_eq!((answer.groups_a, answer.groups_b), (3, 3));
    let x = answer.overlap.intersection;
    assert!(
        x.lower <= exact && exact <= x.upper,
        "{x} should hold {exact}"
    );
    assert!(!x.below_detection_limit(), "{x}");
    assert!(answer.text().starts_with("|A|       "), "{}", answer.text());
    assert!(
        answer.json().contains("\"below_detection_limit\":false"),
        "{}",
        answer.json()
    );

    // Disjoint audiences: the interval reaches 0.
    let answer = overlap(summary, rollup, &of("a"), &of("z"), "users").expect("overlap");
    assert!(
        answer.overlap.intersection.below_detection_limit(),
        "{}",
        answer.text()
    );
    assert!(
        answer.text().contains("|A ∩ B|   below detection limit"),
        "{}",
        answer.text()
    );

    // A range narrows a side to its days: day 1 of `a` holds u % 3 == 0.
    let day_one = Selector {
        from: Some(Timestamp::parse(b"2026-11-01").expect("a time")),
        to: Some(Timestamp::parse(b"2026-11-02").expect("a time")),
        where_: Some("c = 'a'".into()),
    };
    let answer = overlap(summary, rollup, &day_one, &of("b"), "USERS").expect("overlap");
    assert_eq!(answer.groups_a, 1);
    let exact = (40_000..60_000u64).filter(|u| u % 3 == 0).count() as f64;
    let x = answer.overlap.intersection;
    assert!(
        x.lower <= exact && exact <= x.upper,
        "{x} should hold {exact}"
    );

    // A side that selects nothing is an empty audience.
    let answer = overlap(summary, rollup, &of("nobody"), &of("b"), "users").expect("overlap");
    assert_eq!(answer.groups_a, 0);
    assert!(answer.overlap.intersection.is_exact());
    assert_eq!(answer.overlap.intersection.value, 0.0);
}

/// Three nodes, each holding a third of the records: each answers over
/// its own rollup, the answers travel as images, and the merged answer
/// equals the answer over every record (HyperLogLog bytes equal), and so
/// does an overlap fitted from the merged sides.
#[test]
fn answers_of_several_nodes_merge_into_the_whole_answer() {
    let plan = base_plan();
    let summary = &plan.summaries[0];
    let lines: Vec<String> = (0..1_500).map(|i| record(23, i)).collect();
    let whole = run(&plan, lines.iter().cloned(), "nodes-whole");
    let nodes: Vec<Executed<'_>> = (0..3)
        .map(|n| {
            let part = lines.iter().skip(n).step_by(3).cloned();
            run(&plan, part, &format!("node-{n}"))
        })
        .collect();
    let by = |dims: &[&str]| Some(dims.iter().map(|d| (*d).to_owned()).collect());
    for query in [
        Query {
            summary: "base".into(),
            by: by(&["c"]),
            buckets: Buckets::All,
            ..Query::default()
        },
        Query {
            summary: "base".into(),
            where_: Some("m > 2".into()),
            from: Some(hour(2)),
            to: Some(hour(9)),
            ..Query::default()
        },
    ] {
        let expected = answer(summary, &whole.rollups[0], &query).expect("answers");
        let mut merged = answer(summary, &nodes[0].rollups[0], &query).expect("answers");
        for node in &nodes[1..] {
            let theirs = answer(summary, &node.rollups[0], &query).expect("answers");
            let mut image = Vec::new();
            theirs.rollup.encode_image(&mut image);
            let decoded = Rollup::decode_image(&image, merged.rollup.shape()).expect("decodes");
            merged
                .merge(&decoded, theirs.groups_matched)
                .expect("merges");
        }
        // A group several nodes hold is counted once per node.
        let per_node: usize = nodes
            .iter()
            .map(|node| {
                answer(summary, &node.rollups[0], &query)
                    .expect("answers")
                    .groups_matched
            })
            .sum();
        assert_eq!(merged.groups_matched, per_node, "{query:?}");
        assert!(merged.groups_matched >= expected.groups_matched);
        assert_eq!(
            canonical(&merged.rollup),
            canonical(&expected.rollup),
            "{query:?}"
        );
    }

    let side = |c: &str| Selector {
        where_: Some(format!("c = '{c}'")),
        ..Selector::default()
    };
    let (a, b) = (side("c1"), side("c2"));
    let expected = overlap(summary, &whole.rollups[0], &a, &b, "users").expect("overlap");
    let merged_side = |selector: &Selector| {
        let query = overlap_query(summary, selector);
        let mut merged = answer(summary, &nodes[0].rollups[0], &query).expect("answers");
        for node in &nodes[1..] {
            let theirs = answer(summary, &node.rollups[0], &query).expect("answers");
            merged
                .merge(&theirs.rollup, theirs.groups_matched)
                .expect("merges");
        }
        merged
    };
    let fitted = overlap_of(summary, &merged_side(&a), &merged_side(&b), "users").expect("fits");
    assert_eq!(fitted.text(), expected.text());
    assert_eq!(
        fitted.size_a.value.to_bits(),
        expected.size_a.value.to_bits()
    );
    assert_eq!(
        fitted.overlap.intersection.value.to_bits(),
        expected.overlap.intersection.value.to_bits()
    );
}

#[test]
fn a_running_engine_answers_as_execute_does() {
    use std::sync::Arc;
    let plan = Arc::new(base_plan());
    let lines: Vec<String> = (0..1_200).map(|i| record(5, i)).collect();
    let mut options = cardinal_engine::ContinuousOptions::new(2, 1 << 30);
    options.header = Some(HEADER.as_bytes().to_vec());
    let engine = cardinal_engine::Continuous::start(Arc::clone(&plan), &options).expect("start");
    for chunk in lines.chunks(97) {
        let mut batch = Vec::new();
        for line in chunk {
            writeln!(batch, "{line}").expect("write to a Vec");
        }
        engine.submit(batch).expect("submit");
    }
    let query = Query {
        summary: "base".into(),
        from: Some(hour(2)),
        to: Some(hour(9)),
        where_: Some("m <> 4".into()),
        by: Some(vec!["c".into()]),
        buckets: Buckets::All,
    };
    let view = engine.snapshot().expect("snapshot");
    let live = answer(
        &plan.summaries[0],
        view.rollup("base").expect("base"),
        &query,
    )
    .expect("answers");
    let executed = run(&plan, lines.iter().cloned(), "live");
    let batch = answer(&plan.summaries[0], &executed.rollups[0], &query).expect("answers");
    assert_eq!(canonical(&live.rollup), canonical(&batch.rollup));
    assert_eq!(live.rollup.group_count(), 4);
}
