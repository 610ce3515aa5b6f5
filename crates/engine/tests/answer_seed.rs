//! A live quantile answer is a function of the states and the query: the
//! same query over the same rollup gives the same bytes on any thread,
//! however many sketches that thread made before. (KLL flips coins when it
//! compacts; an answer's fresh sketches are seeded from the answer's
//! bucket, group and aggregate, not from the thread's stream of seeds.)

use std::io::Write;
use std::path::PathBuf;

use cardinal_engine::query::{Answer, Buckets, Query, answer};
use cardinal_engine::{EngineOptions, execute};
use cardinal_rollup::AggState;
use cardinal_route::Plan;
use cardinal_sketch::Sketch as _;
use cardinal_sketch::quantiles::Quantiles;

/// Records: enough per group that merging the groups compacts the answer's
/// sketch many times over (k = 200 keeps about 600 values).
const RECORDS: u64 = 40_000;

/// Groups of the summary, all merged into one row by the query.
const GROUPS: u64 = 16;

/// Sketches the second thread makes before it answers: each advances that
/// thread's stream of seeds.
const SKETCHES_BEFORE: usize = 1_000;

const SQL: &str = "CREATE STREAM s (ts TIMESTAMP, g BIGINT, x DOUBLE) WITH (time = 'ts');
CREATE SUMMARY lat AS SELECT date_trunc('day', ts) AS day, g, g % 2 AS h, count(*) AS n,
  quantiles(x) AS qs FROM s GROUP BY day, g, h;";

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The answer's quantile sketches (as images) and its printed table.
fn answered(plan: &Plan, rollup: &cardinal_rollup::Rollup) -> (Vec<Vec<u8>>, String) {
    let query = Query {
        summary: "lat".into(),
        by: Some(Vec::new()),
        buckets: Buckets::All,
        ..Query::default()
    };
    let answer = answer(&plan.summaries[0], rollup, &query).expect("answers");
    let images = answer
        .rollup
        .groups()
        .flat_map(|(_, _, states)| states.iter())
        .filter_map(|state| match state {
            AggState::Quantiles(q) => Some(q.encode()),
            _ => None,
        })
        .collect();
    let table = cardinal_export::table(&answer.results().expect("results"));
    (images, table)
}

/// The summary over the test's records, run on one worker.
fn executed(plan: &Plan, name: &str) -> cardinal_rollup::Rollup {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "cardinal-answer-seed-{}-{name}.csv",
        std::process::id()
    ));
    let mut bytes = b"ts,g,x\n".to_vec();
    for i in 0..RECORDS {
        let h = splitmix(i);
        let x = (h >> 11) as f64 / (1u64 << 53) as f64 * 1000.0;
        writeln!(bytes, "2026-11-01T00:00:00Z,{},{x}", i % GROUPS).expect("write to a Vec");
    }
    std::fs::write(&path, bytes).expect("temp file");
    let executed = execute(
        plan,
        std::slice::from_ref(&path),
        &EngineOptions::new(1, 1 << 30),
    )
    .expect("run");
    std::fs::remove_file(&path).expect("remove temp file");
    let rollup = executed.rollups.into_iter().next().expect("one summary");
    assert_eq!(rollup.group_count() as u64, GROUPS);
    rollup
}

/// The images of `answer`'s quantile sketches, group by group.
fn images(answer: &Answer) -> Vec<Vec<u8>> {
    let mut images: Vec<(i64, Vec<u8>, Vec<u8>)> = answer
        .rollup
        .groups()
        .map(|(bucket, key, states)| {
            let image = states
                .iter()
                .find_map(|state| match state {
                    AggState::Quantiles(q) => Some(q.encode()),
                    _ => None,
                })
                .expect("a quantiles state");
            (bucket.0, key.to_vec(), image)
        })
        .collect();
    images.sort();
    images.into_iter().map(|(_, _, image)| image).collect()
}

/// Makes [`SKETCHES_BEFORE`] sketches on this thread, advancing its
/// stream of seeds.
fn make_other_sketches() {
    let made: Vec<Quantiles> = (0..SKETCHES_BEFORE).map(|_| Quantiles::default()).collect();
    assert_eq!(made.len(), SKETCHES_BEFORE);
}

#[test]
fn a_quantile_answer_is_the_same_on_any_thread() {
    let plan = Plan::compile(SQL).expect("compiles");
    let rollup = &executed(&plan, "one");

    let (first, first_table) = answered(&plan, rollup);
    let (second, second_table) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let made: Vec<Quantiles> =
                    (0..SKETCHES_BEFORE).map(|_| Quantiles::default()).collect();
                assert_eq!(made.len(), SKETCHES_BEFORE);
                answered(&plan, rollup)
            })
            .join()
            .expect("the thread answers")
    });
    let (third, _) = answered(&plan, rollup);
    assert_eq!(first.len(), 1, "one row, one quantiles sketch");
    let merged = Quantiles::decode(&first[0]).expect("an image");
    assert_eq!(merged.count(), RECORDS);
    assert!(!merged.is_exact(), "the merge compacted, so coins mattered");
    assert_eq!(first, second, "same bytes on another thread");
    assert_eq!(first, third, "same bytes when asked again");
    assert_eq!(first_table, second_table);
}

/// Answers merged from several nodes (`Answer::merge`) are seeded as
/// `answer`'s own groups: a group that only a later answer holds is opened
/// with the answer's seeds, so merging a third answer into it compacts
/// with the same coins on any thread.
#[test]
fn merged_answers_are_the_same_on_any_thread() {
    let plan = Plan::compile(SQL).expect("compiles");
    let rollup = &executed(&plan, "merged");
    let part = |condition: &str| {
        let query = Query {
            summary: "lat".into(),
            where_: Some(condition.to_owned()),
            by: Some(vec!["h".to_owned()]),
            buckets: Buckets::All,
            ..Query::default()
        };
        answer(&plan.summaries[0], rollup, &query).expect("answers")
    };
    let merged = || {
        let mut first = part("h = 0");
        for condition in ["h = 1 AND g < 8", "h = 1 AND g >= 8"] {
            let next = part(condition);
            first
                .merge(&next.rollup, next.groups_matched)
                .expect("merges");
        }
        assert_eq!(first.rollup.group_count(), 2);
        images(&first)
    };
    let here = merged();
    let there = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                make_other_sketches();
                merged()
            })
            .join()
            .expect("the thread answers")
    });
    let odd = Quantiles::decode(&here[1]).expect("an image");
    assert_eq!(odd.count(), RECORDS / 2);
    assert_eq!(here, there, "same bytes on another thread");
}
