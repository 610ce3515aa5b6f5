//! What `serve --out` costs per snapshot: a W1-like state (W1's stream
//! and `reach` summary, plus `reach_by_site`, reach by day, state and
//! site: about 100k groups over 30 days) fed to a continuous engine, then
//! [`DayFiles::update`] timed as a server calls it after each snapshot:
//! the first call (29 closed days written), a call with nothing new (every
//! closed day rendered and compared, nothing written), one after a late
//! event (one day rewritten per summary), and a restarted writer's first
//! call (each file read once, nothing written). The fastest of `RUNS` (3)
//! runs of each steady call is printed.
//!
//! ```text
//! cargo run -p cardinal-server --example day_files -- [SITES]
//! ```
//!
//! `SITES` (default 67) sets the groups: 30 days x 50 states x SITES.
//! Measured 2026-11-27 on the 2-core Xeon VM, `dev` profile (opt-level 1
//! for the workspace, 2 for dependencies), other builds running:
//!
//! ```text
//! 311550 events fed in 0.47 s; 105400 groups in 2 summaries
//! first update: 58 files, 4.7 MB, 0.761 s (98600 groups rendered)
//! update, nothing changed: 0.140 s (1423 ns per closed group)
//! update after a late event: 2 files rewritten in 0.168 s
//! restarted writer's first update: 58 files read, 0 written, 0.192 s
//! ```

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cardinal_engine::{Continuous, ContinuousOptions};
use cardinal_route::Plan;
use cardinal_server::{DayFiles, DayFilesConfig};

const SQL: &str = "
    CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
      site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE SUMMARY reach AS
      SELECT date_trunc('day', ts) AS day, state,
             count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users
      FROM impressions WHERE kind = 'impression'
      GROUP BY day, state;
    CREATE SUMMARY reach_by_site AS
      SELECT date_trunc('day', ts) AS day, state, site,
             count(*) AS events, sum(revenue) AS revenue, hll(user_id) AS users
      FROM impressions WHERE kind = 'impression'
      GROUP BY day, state, site;";

const HEADER: &str = "ts,user_id,kind,state,site,provider,campaign,revenue";
const DAYS: u64 = 30;
const STATES: u64 = 50;
const EVENTS_PER_GROUP: u64 = 3;
const RUNS: usize = 3;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sites: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(67);
    let plan = Arc::new(Plan::compile(SQL)?);
    let mut options = ContinuousOptions::new(2, 4 << 30);
    options.header = Some(HEADER.as_bytes().to_vec());
    let engine = Continuous::start(Arc::clone(&plan), &options)?;

    // Every (day, state, site) of October 1 to 30 a few events, in time
    // order, a day at a time, then two hours of October 31: days 1 to 29
    // have closed, the 30th (an hour of lateness) and the 31st have not.
    let fed = Instant::now();
    let mut events = 0u64;
    for day in 0..=DAYS {
        let mut batch = Vec::with_capacity(1 << 20);
        let hours = if day == DAYS { 2 } else { 24 };
        for i in 0..STATES * sites * EVENTS_PER_GROUP {
            let h = splitmix(day << 40 | i);
            let (state, site) = (
                (i / EVENTS_PER_GROUP) % STATES,
                i / EVENTS_PER_GROUP / STATES,
            );
            let hour = i * hours / (STATES * sites * EVENTS_PER_GROUP);
            writeln!(
                batch,
                "2026-10-{:02}T{hour:02}:{:02}:00Z,{},impression,s{state},site{site},p{},c{},{}",
                day + 1,
                h % 60,
                (h >> 8) % 100_000,
                (h >> 30) % 7,
                (h >> 33) % 11,
                ((h >> 40) % 1000) as f64 / 100.0
            )?;
            events += 1;
            if batch.len() >= 1 << 20 {
                engine.submit(std::mem::take(&mut batch))?;
            }
        }
        engine.submit(batch)?;
    }
    let out = std::env::temp_dir().join(format!("cardinal-day-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let config = DayFilesConfig {
        lateness_ms: 3_600_000,
        ..DayFilesConfig::default()
    };

    let view = engine.snapshot()?;
    let pairs = || {
        view.summaries()
            .iter()
            .zip(view.rollups())
            .map(|(name, rollup)| {
                let summary = plan.summaries.iter().find(|s| &s.name == name);
                (summary.expect("a summary of the plan"), rollup)
            })
            .collect::<Vec<_>>()
    };
    let groups: usize = view.rollups().iter().map(|r| r.group_count()).sum();
    println!(
        "{events} events fed in {:.2} s; {groups} groups in {} summaries",
        fed.elapsed().as_secs_f64(),
        view.rollups().len()
    );

    let mut files = DayFiles::open(&out, &plan, config)?;
    let start = Instant::now();
    let written = files.update(pairs())?;
    let first = start.elapsed();
    let bytes: u64 = written.iter().map(|w| w.bytes).sum();
    println!(
        "first update: {} files, {:.1} MB, {:.3} s ({} groups rendered)",
        written.len(),
        bytes as f64 / 1e6,
        first.as_secs_f64(),
        files.stats().groups_rendered
    );

    let mut unchanged = Duration::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        let written = files.update(pairs())?;
        unchanged = unchanged.min(start.elapsed());
        assert!(written.is_empty());
    }
    let rendered = files.stats().groups_rendered;
    println!(
        "update, nothing changed: {:.3} s ({:.0} ns per closed group)",
        unchanged.as_secs_f64(),
        unchanged.as_nanos() as f64 / (rendered as f64 / (RUNS + 1) as f64)
    );
    drop(view);

    engine.submit(b"2026-10-05T07:00:00Z,7,impression,s3,site5,p1,c1,1.5\n".to_vec())?;
    let view = engine.snapshot()?;
    let pairs = || {
        view.summaries()
            .iter()
            .zip(view.rollups())
            .map(|(name, rollup)| {
                let summary = plan.summaries.iter().find(|s| &s.name == name);
                (summary.expect("a summary of the plan"), rollup)
            })
            .collect::<Vec<_>>()
    };
    let start = Instant::now();
    let written = files.update(pairs())?;
    println!(
        "update after a late event: {} files rewritten in {:.3} s",
        written.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(written.iter().all(|w| w.rewrite));

    drop(files);
    let mut files = DayFiles::open(&out, &plan, config)?;
    let start = Instant::now();
    let written = files.update(pairs())?;
    println!(
        "restarted writer's first update: {} files read, {} written, {:.3} s",
        files.stats().files_read,
        written.len(),
        start.elapsed().as_secs_f64()
    );
    drop(files);
    drop(view);
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
