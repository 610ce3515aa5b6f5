//! The continuous engine against the batch engine: fed the same records as
//! batches from several producer threads in any interleaving, it ends with
//! exactly the state `execute` reaches over them (exact aggregates equal,
//! HyperLogLog bytes equal), and a snapshot taken mid-stream equals
//! `execute` over the batches it says it covers.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use cardinal_engine::{Continuous, ContinuousOptions, EngineOptions, execute};
use cardinal_rollup::{AggState, Rollup};
use cardinal_route::Plan;
use proptest::prelude::*;

/// Exact aggregates and HyperLogLogs only: KLL quantiles compact in
/// arrival order and agree only within their bounds.
const SQL: &str = "
    CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, t TEXT) WITH (time = 'ts');
    CREATE SUMMARY by_day AS SELECT date_trunc('day', ts) AS day, t,
        count(*), count(x), sum(x), avg(n), min(x), max(n), sum(n), hll(n), exact_distinct(t)
      FROM s GROUP BY day, t;
    CREATE SUMMARY wide AS SELECT date_trunc('hour', ts) AS hour, n % 97 AS m,
        count(*), hll(t), min(n), max(x)
      FROM s WHERE x > 0.25 GROUP BY hour, m;";

const HEADER: &str = "ts,n,x,t";

/// Record `i` of a stream drawn from `seed`: a few days, a few hundred
/// users, texts of some thirty values, some NULLs and some bad rows.
fn record(seed: u64, i: u64) -> String {
    let h = splitmix(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let day = 1 + h % 5;
    let hour = (h >> 8) % 24;
    let n = (h >> 16) % 700;
    let x = ((h >> 32) % 10_000) as f64 / 4096.0;
    let t = (h >> 48) % 31;
    match (h >> 60) % 16 {
        0 => format!("2026-11-0{day}T{hour:02}:00:00Z,{n},,t{t}"),
        1 => format!("2026-11-0{day}T{hour:02}:00:00Z,not a number,{x},t{t}"),
        _ => format!("2026-11-0{day}T{hour:02}:17:00Z,{n},{x},t{t}"),
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The batches: records `0..n` cut into pieces of the given sizes.
fn batches(seed: u64, n: u64, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut turn = 0;
    while i < n {
        let size = sizes[turn % sizes.len()].max(1) as u64;
        let mut bytes = Vec::new();
        for j in i..(i + size).min(n) {
            writeln!(bytes, "{}", record(seed, j)).expect("write to a Vec");
        }
        out.push(bytes);
        i += size;
        turn += 1;
    }
    out
}

/// A group's states in a comparable form: HyperLogLogs as their bytes,
/// the rest as their output.
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
                    _ => format!("{:?}", state.output(kind)),
                })
                .collect();
            format!("{bucket:?} {key:?} {}", states.join(" "))
        })
        .collect();
    rows.sort();
    rows
}

/// `execute` over the given batches, as one file under `header`.
fn executed(
    plan: &Plan,
    header: &str,
    batches: &[Vec<u8>],
    threads: usize,
    name: &str,
) -> Vec<Vec<String>> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "cardinal-continuous-{}-{name}.csv",
        std::process::id()
    ));
    let mut bytes = format!("{header}\n").into_bytes();
    for batch in batches {
        bytes.extend_from_slice(batch);
    }
    std::fs::write(&path, bytes).expect("temp file");
    let options = EngineOptions::new(threads, 1 << 30);
    let executed = execute(plan, std::slice::from_ref(&path), &options).expect("execute");
    std::fs::remove_file(&path).expect("remove temp file");
    executed.rollups.iter().map(canonical).collect()
}

fn start(plan: &Arc<Plan>, threads: usize, queue_batches: usize) -> Continuous {
    let mut options = ContinuousOptions::new(threads, 1 << 30);
    options.queue_batches = queue_batches;
    Continuous::start(Arc::clone(plan), &options).expect("start")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x00c0_ffee),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_interleaving_ends_where_execute_ends(
        seed in any::<u64>(),
        n in 0u64..3_000,
        sizes in prop::collection::vec(1usize..400, 1..6),
        producers in 1usize..4,
        threads in 1usize..4,
        queue_batches in 1usize..4,
        pauses in prop::collection::vec(0u8..4, 1..8),
    ) {
        let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
        let all = batches(seed, n, &sizes);
        let engine = start(&plan, threads, queue_batches);
        std::thread::scope(|scope| {
            for p in 0..producers {
                let (engine, all, pauses) = (&engine, &all, &pauses);
                scope.spawn(move || {
                    // Producer p sends every producers-th batch, yielding
                    // now and then so that the interleavings vary.
                    for (k, batch) in all.iter().enumerate().skip(p).step_by(producers) {
                        for _ in 0..pauses[k % pauses.len()] {
                            std::thread::yield_now();
                        }
                        engine.submit(batch.clone()).expect("submit");
                    }
                });
            }
        });
        let (rollups, counts, covers) = engine.finish().expect("finish");
        prop_assert_eq!(covers, all.len() as u64);
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        let want = executed(&plan, HEADER, &all, 1 + (seed % 3) as usize, "all");
        prop_assert_eq!(got, want);
        let lines: u64 = all.iter().map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64).sum();
        prop_assert_eq!(counts.records + counts.rejects, lines);
    }

    #[test]
    fn a_snapshot_equals_execute_over_the_batches_it_covers(
        seed in any::<u64>(),
        n in 1u64..2_000,
        sizes in prop::collection::vec(1usize..300, 1..5),
        threads in 1usize..4,
        cut in 0usize..=100,
    ) {
        let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
        let all = batches(seed, n, &sizes);
        let engine = start(&plan, threads, 2);
        let k = all.len() * cut / 100;
        for batch in &all[..k] {
            engine.submit(batch.clone()).expect("submit");
        }
        {
            let view = engine.snapshot().expect("snapshot");
            prop_assert_eq!(view.covers().get(), k as u64);
            let got: Vec<Vec<String>> = view.rollups().iter().map(canonical).collect();
            prop_assert_eq!(got, executed(&plan, HEADER, &all[..k], threads, "first"));
        }
        // A second snapshot with nothing new is the same view.
        {
            let view = engine.snapshot().expect("snapshot");
            prop_assert_eq!(view.covers().get(), k as u64);
        }
        for batch in &all[k..] {
            engine.submit(batch.clone()).expect("submit");
        }
        let (rollups, _, covers) = engine.finish().expect("finish");
        prop_assert_eq!(covers, all.len() as u64);
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        prop_assert_eq!(got, executed(&plan, HEADER, &all, threads, "rest"));
    }
}

#[test]
fn a_full_queue_gives_the_batch_back() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 1, 1);
    let batch = batches(7, 20_000, &[20_000]).remove(0);
    // One worker, one slot: some try must find the queue full while the
    // worker folds the batch before it.
    let mut full = 0;
    let mut accepted = 0u64;
    for _ in 0..64 {
        match engine.try_submit(batch.clone()) {
            Ok(_) => accepted += 1,
            Err(cardinal_engine::SubmitError::Full(back)) => {
                assert_eq!(back.bytes, batch, "the bytes come back whole");
                full += 1;
            }
            Err(e @ cardinal_engine::SubmitError::Stopped(_)) => panic!("{e}"),
        }
    }
    assert!(full > 0, "64 tries never found the queue full");
    let (_, counts, covers) = engine.finish().expect("finish");
    assert_eq!(covers, accepted);
    assert_eq!(counts.records + counts.rejects, accepted * 20_000);
}

#[test]
fn a_plan_it_cannot_run_is_refused() {
    let parquet = "CREATE STREAM p (ts TIMESTAMP, n BIGINT) WITH (format = 'parquet', time = 'ts');
        CREATE SUMMARY a AS SELECT count(*) FROM p;";
    let plan = Arc::new(Plan::compile(parquet).expect("compiles"));
    let error = Continuous::start(plan, &ContinuousOptions::new(1, 1 << 30)).expect_err("parquet");
    assert!(format!("{error:#}").contains("Parquet"), "{error:#}");
}

/// Two attributions and summaries over both the stream and the credit
/// stream.
const ATTRIBUTION_SQL: &str = "
    CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT,
      site TEXT, revenue DOUBLE)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE ATTRIBUTION lin ON s BY user_id MODEL linear LOOKBACK 2 DAYS
      TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
      VALUE revenue CAMPAIGN campaign SITE site;
    CREATE ATTRIBUTION last ON s BY user_id MODEL last_touch LOOKBACK 1 DAYS
      TOUCH WHERE kind = 'click' OR kind = 'view'
      CONVERSION WHERE kind = 'conversion' CAMPAIGN site;
    CREATE SUMMARY by_campaign AS
      SELECT campaign, sum(credit) AS credit, sum(revenue) AS revenue,
             count(*) AS touches
      FROM lin GROUP BY campaign;
    CREATE SUMMARY by_site AS
      SELECT campaign AS site, sum(credit) AS credit, count(*) AS touches
      FROM last GROUP BY site;
    CREATE SUMMARY kinds AS
      SELECT date_trunc('day', ts) AS day, kind, count(*), hll(user_id)
      FROM s GROUP BY day, kind;";

const ATTRIBUTION_HEADER: &str = "ts,user_id,kind,campaign,site,revenue";

/// Journeys in time order (one record a second: no two at one time), a
/// few dozen users over four days.
fn journeys(seed: u64, n: u64, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut bytes = Vec::new();
    let mut turn = 0;
    for i in 0..n {
        let h = splitmix(seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let secs = i * 97;
        let (day, rest) = (1 + secs / 86_400, secs % 86_400);
        let kind = ["click", "view", "click", "conversion", "other"][(h % 5) as usize];
        writeln!(
            bytes,
            "2026-11-{day:02}T{:02}:{:02}:{:02}Z,{},{kind},c{},s{},{}.5",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60,
            (h >> 8) % 40,
            (h >> 16) % 7,
            (h >> 24) % 5,
            (h >> 32) % 100
        )
        .expect("write to a Vec");
        if bytes.iter().filter(|&&c| c == b'\n').count() >= sizes[turn % sizes.len()].max(1) {
            out.push(std::mem::take(&mut bytes));
            turn += 1;
        }
    }
    if !bytes.is_empty() {
        out.push(bytes);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 16,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x0a77_0a77),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Credits flow into the credit summaries at each snapshot (as the
    /// frontier passes their conversions), and the end equals `execute`:
    /// input in time order is never late, whatever the snapshots.
    #[test]
    fn attribution_credits_at_snapshots_and_ends_where_execute_ends(
        seed in any::<u64>(),
        n in 1u64..3_000,
        sizes in prop::collection::vec(1usize..300, 1..5),
        threads in 1usize..4,
        snapshot_every in 1usize..6,
        lateness_hours in 0u64..30,
    ) {
        let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
        let all = journeys(seed, n, &sizes);
        let mut options = ContinuousOptions::new(threads, 1 << 30);
        options.queue_batches = 2;
        options.attribution_lateness_ms = lateness_hours * 3_600_000;
        let engine = Continuous::start(Arc::clone(&plan), &options).expect("start");
        let mut credited_before_the_end = 0;
        for (k, batch) in all.iter().enumerate() {
            engine.submit(batch.clone()).expect("submit");
            if k % snapshot_every == snapshot_every - 1 {
                let view = engine.snapshot().expect("snapshot");
                prop_assert_eq!(view.summaries(), ["kinds", "by_campaign", "by_site"]);
                for stats in view.attribution_stats() {
                    prop_assert_eq!(stats.late, 0);
                }
                credited_before_the_end = view.rollup("by_campaign").expect("by_campaign").group_count();
            }
        }
        let (rollups, _, _) = engine.finish().expect("finish");
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        prop_assert_eq!(got, executed(&plan, ATTRIBUTION_HEADER, &all, 2, "attribution"));
        // Four days of journeys at a lateness under 30 hours: some credit
        // reaches a summary before the end once a snapshot is a day in.
        if n > 2_000 && lateness_hours < 24 && snapshot_every == 1 {
            prop_assert!(credited_before_the_end > 0);
        }
    }
}

#[test]
fn credits_reach_the_summaries_before_the_end() {
    let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
    let all = journeys(11, 3_000, &[100]);
    let mut options = ContinuousOptions::new(2, 1 << 30);
    options.attribution_lateness_ms = 3_600_000;
    let engine = Continuous::start(Arc::clone(&plan), &options).expect("start");
    let half = all.len() / 2;
    for batch in &all[..half] {
        engine.submit(batch.clone()).expect("submit");
    }
    let view = engine.snapshot().expect("snapshot");
    let credited = view
        .rollup("by_campaign")
        .expect("by_campaign")
        .group_count();
    let conversions: u64 = view.attribution_stats().iter().map(|s| s.conversions).sum();
    assert!(credited > 0, "no credit by the middle of four days");
    assert!(conversions > 0);
    drop(view);
    for batch in &all[half..] {
        engine.submit(batch.clone()).expect("submit");
    }
    engine.finish().expect("finish");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 16,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5afe_5afe),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// What a server does across a restart: the images of a snapshot,
    /// then the batches after it, end where `execute` over all of them
    /// ends.
    #[test]
    fn an_engine_started_from_a_snapshots_images_goes_on_exactly(
        seed in any::<u64>(),
        n in 1u64..2_000,
        sizes in prop::collection::vec(1usize..300, 1..5),
        threads in 1usize..4,
        cut in 0usize..=100,
    ) {
        let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
        let all = batches(seed, n, &sizes);
        let k = all.len() * cut / 100;
        let first = start(&plan, threads, 2);
        for batch in &all[..k] {
            first.submit(batch.clone()).expect("submit");
        }
        let images = first.snapshot().expect("snapshot").images().expect("images");
        drop(first);
        let mut options = ContinuousOptions::new(threads, 1 << 30);
        options.queue_batches = 2;
        let second = Continuous::start_from(Arc::clone(&plan), &options, &images).expect("restart");
        for batch in &all[k..] {
            second.submit(batch.clone()).expect("submit");
        }
        let (rollups, _, _) = second.finish().expect("finish");
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        prop_assert_eq!(got, executed(&plan, HEADER, &all, threads, "restart"));
    }
}

#[test]
fn images_of_another_schema_are_refused() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 1, 2);
    engine
        .submit(batches(3, 100, &[100]).remove(0))
        .expect("submit");
    let mut images = engine
        .snapshot()
        .expect("snapshot")
        .images()
        .expect("images");
    engine.finish().expect("finish");
    let options = ContinuousOptions::new(1, 1 << 30);
    // One summary missing.
    let error =
        Continuous::start_from(Arc::clone(&plan), &options, &images[..1]).expect_err("missing");
    assert!(
        format!("{error:#}").contains("no summary wide"),
        "{error:#}"
    );
    // The two images swapped: each summary gets the other's shape.
    images.swap(0, 1);
    images[0].0 = "by_day".to_string();
    images[1].0 = "wide".to_string();
    let error = Continuous::start_from(Arc::clone(&plan), &options, &images).expect_err("shape");
    assert!(format!("{error:#}").contains("by_day"), "{error:#}");
    // A flipped byte.
    images.swap(0, 1);
    images[0].0 = "by_day".to_string();
    images[1].0 = "wide".to_string();
    let last = images[0].1.len() - 1;
    images[0].1[last / 2] ^= 0x10;
    assert!(Continuous::start_from(plan, &options, &images).is_err());
}

#[test]
fn a_receipt_says_what_became_of_its_batch() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 2, 2);
    let mut receipts = Vec::new();
    for (k, batch) in batches(5, 3_000, &[250]).into_iter().enumerate() {
        let lines = batch.iter().filter(|&&c| c == b'\n').count() as u64;
        let bad = batch
            .split(|&c| c == b'\n')
            .filter(|line| line.windows(12).any(|w| w == b"not a number"))
            .count() as u64;
        let (seq, receipt) = engine.submit_with_receipt(batch).expect("submit");
        assert_eq!(seq.get(), k as u64);
        receipts.push((seq, lines, bad, receipt));
    }
    for (seq, lines, bad, receipt) in receipts {
        let outcome = receipt.wait().expect("folded");
        assert_eq!(outcome.seq, seq);
        assert_eq!(outcome.records + outcome.rejects, lines);
        assert_eq!(outcome.rejects, bad, "batch {seq}");
        assert_eq!(outcome.first_rejects.len() as u64, bad.min(10));
        assert!(
            outcome
                .first_rejects
                .iter()
                .all(|line| line.starts_with(&format!("stream s batch {seq}:"))
                    && line.contains("not a BIGINT")),
            "{:?}",
            outcome.first_rejects
        );
    }
    engine.finish().expect("finish");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 12,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x0a77_5afe),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A restart with attribution: the chains, dictionaries and held
    /// events go through the images, and the end equals `execute`.
    #[test]
    fn attribution_state_survives_a_restart_through_the_images(
        seed in any::<u64>(),
        n in 1u64..2_500,
        sizes in prop::collection::vec(1usize..300, 1..4),
        threads in 1usize..3,
        cut in 0usize..=100,
        lateness_hours in 0u64..30,
    ) {
        let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
        let all = journeys(seed, n, &sizes);
        let k = all.len() * cut / 100;
        let mut options = ContinuousOptions::new(threads, 1 << 30);
        options.attribution_lateness_ms = lateness_hours * 3_600_000;
        let first = Continuous::start(Arc::clone(&plan), &options).expect("start");
        for batch in &all[..k] {
            first.submit(batch.clone()).expect("submit");
        }
        // A plain snapshot has no attribution state to image.
        prop_assert!(first.snapshot().expect("snapshot").images().is_err());
        let images = first.snapshot_to_save().expect("snapshot").images().expect("images");
        prop_assert_eq!(&images.last().expect("images").0, cardinal_engine::continuous::ATTRIBUTION_IMAGE);
        drop(first);
        let second = Continuous::start_from(Arc::clone(&plan), &options, &images).expect("restart");
        for batch in &all[k..] {
            second.submit(batch.clone()).expect("submit");
        }
        let (rollups, _, _) = second.finish().expect("finish");
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        prop_assert_eq!(got, executed(&plan, ATTRIBUTION_HEADER, &all, 2, "attribution-restart"));
    }
}

#[test]
fn a_damaged_attribution_image_is_refused() {
    let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
    let options = ContinuousOptions::new(1, 1 << 30);
    let engine = Continuous::start(Arc::clone(&plan), &options).expect("start");
    for batch in journeys(9, 500, &[100]) {
        engine.submit(batch).expect("submit");
    }
    let images = engine
        .snapshot_to_save()
        .expect("snapshot")
        .images()
        .expect("images");
    engine.finish().expect("finish");
    let last = images.len() - 1;
    let image = &images[last].1;
    for at in (0..image.len()).step_by(image.len() / 97 + 1) {
        let mut damaged = images.clone();
        damaged[last].1[at] ^= 0x04;
        let error = Continuous::start_from(Arc::clone(&plan), &options, &damaged)
            .expect_err("a damaged image");
        let error = format!("{error:#}");
        assert!(error.contains("checksum"), "byte {at}: {error}");
    }
    // Without it, the engine refuses to start.
    let error = Continuous::start_from(Arc::clone(&plan), &options, &images[..last])
        .expect_err("no attribution state");
    assert!(format!("{error:#}").contains("lack"), "{error:#}");
}

#[test]
fn the_merged_state_counts_against_the_memory_budget() {
    // One group per user and hour: some thousands of groups with an
    // HyperLogLog each, far past a 256 KiB budget once merged.
    let sql = "CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, t TEXT) WITH (time = 'ts');
        CREATE SUMMARY per_user AS SELECT date_trunc('hour', ts) AS hour, n, count(*), hll(t)
          FROM s GROUP BY hour, n;";
    let plan = Arc::new(Plan::compile(sql).expect("compiles"));
    let mut options = ContinuousOptions::new(1, 256 << 10);
    options.queue_batches = 1;
    let engine = Continuous::start(plan, &options).expect("start");
    let mut failed = None;
    for batch in batches(13, 40_000, &[500]) {
        if let Err(e) = engine.submit(batch) {
            failed = Some(e.into());
            break;
        }
        // Each snapshot moves the worker's groups into the merged state.
        if let Err(e) = engine.snapshot() {
            failed = Some(e);
            break;
        }
    }
    let error = format!("{:#}", failed.expect("the budget is reached"));
    assert!(error.contains("per_user"), "{error}");
    assert!(error.contains("memory"), "{error}");
}

#[test]
fn a_few_events_far_ahead_do_not_make_the_stream_late() {
    let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
    let mut all = journeys(21, 3_000, &[100]);
    // A click from the year 2099 amid the stream.
    all[3].extend_from_slice(b"2099-01-01T00:00:00Z,5,click,c1,s1,1.5\n");
    let engine =
        Continuous::start(Arc::clone(&plan), &ContinuousOptions::new(2, 1 << 30)).expect("start");
    for batch in &all {
        engine.submit(batch.clone()).expect("submit");
        let view = engine.snapshot().expect("snapshot");
        for stats in view.attribution_stats() {
            assert_eq!(stats.late, 0, "the stream became late");
        }
    }
    engine.finish().expect("finish");
}

#[test]
fn check_images_says_what_start_from_would() {
    let plan = Arc::new(Plan::compile(ATTRIBUTION_SQL).expect("compiles"));
    let options = ContinuousOptions::new(1, 1 << 30);
    let engine = Continuous::start(Arc::clone(&plan), &options).expect("start");
    for batch in journeys(4, 600, &[200]) {
        engine.submit(batch).expect("submit");
    }
    let images = engine
        .snapshot_to_save()
        .expect("snapshot")
        .images()
        .expect("images");
    engine.finish().expect("finish");
    cardinal_engine::check_images(&plan, &options, &images).expect("whole images");
    for at in 0..images.len() {
        let mut damaged = images.clone();
        let middle = damaged[at].1.len() / 2;
        damaged[at].1[middle] ^= 1;
        assert!(cardinal_engine::check_images(&plan, &options, &damaged).is_err());
        assert!(Continuous::start_from(Arc::clone(&plan), &options, &damaged).is_err());
    }
}

#[test]
fn a_view_lists_each_summarys_groups_bytes_and_newest_bucket() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 2, 2);
    let empty = engine.snapshot().expect("snapshot").summary_stats();
    assert!(
        empty
            .iter()
            .all(|s| s.groups == 0 && s.newest_bucket.is_none())
    );
    let all = batches(17, 2_000, &[300]);
    for batch in &all {
        engine.submit(batch.clone()).expect("submit");
    }
    let view = engine.snapshot().expect("snapshot");
    let stats = view.summary_stats();
    assert_eq!(
        stats.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["by_day", "wide"]
    );
    for (s, rollup) in stats.iter().zip(view.rollups()) {
        assert_eq!(s.groups, rollup.group_count());
        assert!(s.groups > 0 && s.bytes > 0);
    }
    // The records span 2026-11-01..05: the newest day bucket is the 5th,
    // the newest hour bucket within it.
    let day = |d: i64| (20_758 + d) * 86_400_000;
    assert_eq!(stats[0].newest_bucket.map(|t| t.0), Some(day(4)));
    let hour = stats[1].newest_bucket.expect("an hour").0;
    assert!((day(4)..day(5)).contains(&hour), "{hour}");
    drop(view);
    engine.finish().expect("finish");
}

/// Batches of every size a server admits fold as a file of the same
/// records does: 1 byte, a chunk, just over the 2 MiB a chunk could
/// hold (the old limit, where a worker panicked), and 16 MiB; a CSV
/// record with a quoted newline astride every cut, and a line over
/// the 1 MiB line limit rejected as `run` rejects it, not a failure.
#[test]
fn batches_of_any_admitted_size_fold_as_a_file_does() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 2, 4);
    let mut all: Vec<Vec<u8>> = vec![b"\n".to_vec()];
    for target in [1usize << 20, (2 << 20) + 1, 16 << 20] {
        let mut bytes = Vec::with_capacity(target + 200);
        let mut i = 0;
        while bytes.len() < target - 200 {
            if i % 4_099 == 7 {
                // A quoted field holding a newline: one record.
                writeln!(bytes, "2026-11-03T01:00:00Z,{},1.5,\"a\nb\"", i % 700).expect("vec");
            } else {
                writeln!(bytes, "{}", record(target as u64, i)).expect("vec");
            }
            i += 1;
        }
        all.push(bytes);
    }
    let mut receipts = Vec::new();
    for batch in &all {
        receipts.push(engine.submit_with_receipt(batch.clone()).expect("submit").1);
    }
    // A record longer than the line limit, inside a large batch: skipped
    // and rejected, the records around it folded.
    let mut long = Vec::new();
    writeln!(long, "{}", record(1, 1)).expect("vec");
    long.extend(std::iter::repeat_n(b'x', (1 << 20) + 10));
    long.push(b'\n');
    writeln!(long, "{}", record(1, 2)).expect("vec");
    long.extend(std::iter::repeat_n(b'\n', 3 << 20));
    let (_, receipt) = engine.submit_with_receipt(long).expect("submit");
    for receipt in receipts {
        receipt.wait().expect("every size folds");
    }
    let outcome = receipt.wait().expect("a long line is a reject");
    assert_eq!(outcome.rejects, 1, "{:?}", outcome.first_rejects);
    assert!(
        outcome.first_rejects[0].contains("line"),
        "{:?}",
        outcome.first_rejects
    );
    let (rollups, _, _) = engine.finish().expect("finish");
    let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
    all.push(format!("{}\n{}\n", record(1, 1), record(1, 2)).into_bytes());
    assert_eq!(got, executed(&plan, HEADER, &all, 2, "sizes"));
}

/// A panic while folding a batch stops the engine as an error would: the
/// batch is named, every waiter (its receipt, a later submit, a
/// snapshot) is told instead of waiting for ever.
#[test]
fn a_panic_in_a_worker_names_its_batch_and_wakes_every_waiter() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let mut options = ContinuousOptions::new(1, 1 << 30);
    options.panic_on = Some(b"POISON".to_vec());
    let engine = Continuous::start(Arc::clone(&plan), &options).expect("start");
    let good = batches(3, 100, &[50]);
    let (_, first) = engine.submit_with_receipt(good[0].clone()).expect("submit");
    let (seq, poisoned) = engine
        .submit_with_receipt(b"2026-11-01T00:00:00Z,1,1.0,POISON\n".to_vec())
        .expect("submit");
    first.wait().expect("the batch before folds");
    let why = poisoned.wait().expect_err("the poisoned batch fails");
    assert!(format!("{why:#}").contains("panicked"), "{why:#}");
    assert_eq!(engine.failed_batch(), Some(seq));
    assert!(engine.failure().is_some());
    assert!(
        engine.snapshot().is_err(),
        "a snapshot does not wait for ever"
    );
    assert!(engine.submit(good[1].clone()).is_err(), "nor does a submit");
    assert!(engine.finish().is_err());
}

/// The attributions' chains and held events count against the budget:
/// a stream of new users clicking grows them without bound, and the
/// engine stops with words naming them before the process would die of
/// memory (they were not counted, and only the kernel stopped it).
#[test]
fn attribution_chains_count_against_the_memory_budget() {
    let sql = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT)
          WITH (format = 'csv', time = 'ts');
        CREATE ATTRIBUTION a ON s BY user_id MODEL last_touch LOOKBACK 30 DAYS
          TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'buy' CAMPAIGN campaign;
        CREATE SUMMARY credits AS SELECT campaign, sum(credit) AS credit FROM a GROUP BY campaign;";
    let plan = Arc::new(Plan::compile(sql).expect("compiles"));
    let mut options = ContinuousOptions::new(2, 8 << 20);
    options.queue_batches = 2;
    let engine = Continuous::start(plan, &options).expect("start");
    let mut failed = None;
    // A million distinct users, one click each: far past 8 MiB of chains.
    'feed: for b in 0..100u64 {
        let mut batch = Vec::new();
        for i in 0..10_000u64 {
            let user = b * 10_000 + i;
            writeln!(
                batch,
                "2026-11-01T{:02}:{:02}:00Z,{user},click,c{}",
                b % 24,
                i % 60,
                user % 7
            )
            .expect("vec");
        }
        if let Err(e) = engine.submit(batch) {
            failed = Some(e.into());
            break 'feed;
        }
        if b % 5 == 4
            && let Err(e) = engine.snapshot()
        {
            failed = Some(e);
            break 'feed;
        }
    }
    let error = match failed {
        Some(e) => e,
        None => match engine.snapshot() {
            Ok(_) => panic!("the budget is never reached"),
            Err(e) => e,
        },
    };
    let error = format!("{error:#}");
    assert!(
        error.contains("--memory-max") && error.contains("chains"),
        "{error}"
    );
}

/// `line`'s fields (in [`HEADER`]'s order) as `order` names them.
fn permuted(line: &str, order: &[usize]) -> String {
    let fields: Vec<&str> = line.split(',').collect();
    let out: Vec<&str> = order.iter().map(|&i| fields[i]).collect();
    out.join(",")
}

/// Issue 43, item 2: a batch may carry its own header; each worker reads
/// each batch under its own (or the declared order when it has none),
/// whatever the batches before it carried, and ends where `execute` ends
/// over the records in the declared order.
#[test]
fn each_batch_is_read_under_its_own_header() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let all = batches(7, 3_000, &[90, 210, 40]);
    let orders: [&[usize]; 3] = [&[0, 1, 2, 3], &[3, 1, 0, 2], &[2, 3, 1, 0]];
    let names = ["ts", "n", "x", "t"];
    for threads in [1, 3] {
        let engine = start(&plan, threads, 2);
        for (k, batch) in all.iter().enumerate() {
            let text = std::str::from_utf8(batch).expect("text");
            let records = if k % 4 == 3 {
                // No header: the declared order.
                cardinal_engine::Records::from(batch.clone())
            } else {
                let order = orders[k % 3];
                let header: Vec<&str> = order.iter().map(|&i| names[i]).collect();
                let mut bytes = format!("{}\r\n", header.join(",")).into_bytes();
                for line in text.lines() {
                    writeln!(bytes, "{}", permuted(line, order)).expect("write");
                }
                let (line, _) = cardinal_engine::split_header(&bytes);
                engine
                    .check_header(line)
                    .expect("a header naming every column");
                cardinal_engine::Records {
                    bytes,
                    header: true,
                }
            };
            engine.submit(records).expect("submit");
        }
        let (rollups, _, _) = engine.finish().expect("finish");
        let got: Vec<Vec<String>> = rollups.iter().map(canonical).collect();
        assert_eq!(got, executed(&plan, HEADER, &all, threads, "headers"));
    }
}

/// A header that lacks a declared column, names one twice, or (on a
/// stream declared without a header) names one it does not declare is
/// refused with the column's name, before anything is submitted.
#[test]
fn check_header_names_what_does_not_fit() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let engine = start(&plan, 1, 2);
    for (line, words) in [
        ("ts,n,x", "\"t\""),
        ("ts,n,x,t,N", "\"N\" twice"),
        ("ts,n,x,t,extra", "does not declare"),
        ("ts,\"n,x,t", "malformed"),
    ] {
        let error = engine.check_header(line.as_bytes()).expect_err(line);
        let text = format!("{error:#}");
        assert!(text.contains(words), "{line}: {text}");
        assert!(text.contains("its columns are ts, n, x, t"), "{text}");
    }
    engine
        .check_header(b"T, x ,n,ts")
        .expect("any order, any case");
    // Declared with a header, a stream skips columns it does not declare,
    // as `cardinal run` does.
    let sql = SQL.replace("WITH (time = 'ts')", "WITH (time = 'ts', header = true)");
    let plan = Arc::new(Plan::compile(&sql).expect("compiles"));
    let engine = start(&plan, 1, 2);
    engine
        .check_header(b"extra,t,x,n,ts")
        .expect("an undeclared column skipped");
    engine.finish().expect("finish");
}
