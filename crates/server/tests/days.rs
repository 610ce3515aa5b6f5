//! `serve --out`'s day files against `run --out`'s: a running engine's
//! closed days are written byte for byte as `run` writes them over the
//! same records, open days are not, a late event rewrites exactly the
//! files of its day, nothing changed writes nothing, and a restarted
//! writer rewrites nothing (issue 38, "Per-day files").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cardinal_engine::{Continuous, ContinuousOptions, EngineOptions, View, execute, results_of};
use cardinal_export::OutDir;
use cardinal_rollup::{Limits, Rollup};
use cardinal_route::{Plan, Summary};
use cardinal_server::{DayFiles, DayFilesConfig, Error, Written};

/// Exact aggregates and HyperLogLogs only, so a view and `execute` agree
/// byte for byte. 2026-11-01 is a Sunday: the week of 2026-10-26 ends on
/// 2026-11-02, the next on 2026-11-09.
const SQL: &str = "
    CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, site TEXT, x DOUBLE) WITH (time = 'ts');
    CREATE SUMMARY by_day AS SELECT date_trunc('day', ts) AS day, site,
        count(*) AS events, sum(x) AS x, hll(user_id) AS users, min(ts) AS first
      FROM s GROUP BY day, site;
    CREATE SUMMARY by_hour AS SELECT date_trunc('hour', ts) AS hour,
        count(*) AS events, exact_distinct(site) AS sites
      FROM s WHERE x > 1.0 GROUP BY hour;
    CREATE SUMMARY by_week AS SELECT date_trunc('week', ts) AS week, count(*) AS events
      FROM s GROUP BY week;
    CREATE SUMMARY total AS SELECT site, count(*) AS events FROM s GROUP BY site;";

const HEADER: &str = "ts,user_id,site,x";

/// Hour `hour` (0..24) of November `day`'s records, a few per site.
fn records(day: u32, hour: u32) -> Vec<String> {
    (0..12u64)
        .map(|i| {
            let h = splitmix(u64::from(day * 100 + hour) * 1000 + i);
            format!(
                "2026-11-{day:02}T{hour:02}:{:02}:00Z,{},site{},{}",
                h % 60,
                (h >> 8) % 500,
                (h >> 20) % 5,
                ((h >> 32) % 400) as f64 / 100.0
            )
        })
        .collect()
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Every hour of November `first..=last`.
fn days(first: u32, last: u32) -> Vec<String> {
    (first..=last)
        .flat_map(|day| (0..24).flat_map(move |hour| records(day, hour)))
        .collect()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cardinal-days-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `cardinal run --out` over `lines`: `execute`, then the files `run`
/// writes (`results_of` through `OutDir::write_daily_csv`). Returns each
/// file's bytes by `summary/name`.
fn run_out(plan: &Plan, lines: &[String], name: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = temp(&format!("run-{name}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("in.csv");
    let mut bytes = format!("{HEADER}\n").into_bytes();
    for line in lines {
        writeln!(bytes, "{line}").expect("write to a Vec");
    }
    std::fs::write(&input, bytes).expect("input");
    let executed = execute(
        plan,
        std::slice::from_ref(&input),
        &EngineOptions::new(1, 1 << 30),
    )
    .expect("execute");
    let out_dir = dir.join("out");
    let out = OutDir::open(&out_dir).expect("out");
    for (summary, rollup) in executed.summaries.iter().zip(&executed.rollups) {
        let results = results_of(summary, rollup).expect("results");
        out.write_daily_csv(&summary.name, &results, cardinal_export::Options::default())
            .expect("write");
    }
    out.finish().expect("finish");
    let files = files_under(&out_dir);
    std::fs::remove_dir_all(&dir).expect("clean");
    files
}

/// Every file under `dir/<summary>/`, by `summary/name`; temp and staging
/// entries are not results.
fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for folder in std::fs::read_dir(dir).expect("read dir") {
        let folder = folder.expect("entry");
        let name = folder.file_name().into_string().expect("utf-8");
        if name.starts_with(".cardinal-tmp-") {
            continue;
        }
        for file in std::fs::read_dir(folder.path()).expect("read dir") {
            let file = file.expect("entry");
            let file_name = file.file_name().into_string().expect("utf-8");
            assert!(!file_name.starts_with(".cardinal-tmp-"), "{file_name} left");
            files.insert(
                format!("{name}/{file_name}"),
                std::fs::read(file.path()).expect("read"),
            );
        }
    }
    files
}

/// A running engine over `plan`'s stream.
struct Engine {
    plan: Arc<Plan>,
    engine: Continuous,
}

impl Engine {
    fn start(plan: &Arc<Plan>) -> Self {
        Self::start_with(plan, Limits::default())
    }

    fn start_with(plan: &Arc<Plan>, limits: Limits) -> Self {
        let mut options = ContinuousOptions::new(2, 1 << 30);
        options.limits = limits;
        options.header = Some(HEADER.as_bytes().to_vec());
        let engine = Continuous::start(Arc::clone(plan), &options).expect("start");
        Self {
            plan: Arc::clone(plan),
            engine,
        }
    }

    fn submit(&self, lines: &[String]) {
        for chunk in lines.chunks(53) {
            let mut batch = Vec::new();
            for line in chunk {
                writeln!(batch, "{line}").expect("write to a Vec");
            }
            self.engine.submit(batch).expect("submit");
        }
    }

    /// A snapshot's summaries with their rollups, as a server hands them
    /// to [`DayFiles::update`].
    fn with_view<T>(&self, f: impl FnOnce(Vec<(&Summary, &Rollup)>) -> T) -> T {
        let view: View<'_> = self.engine.snapshot().expect("snapshot");
        let pairs = pairs(&self.plan, &view);
        f(pairs)
    }
}

fn pairs<'a>(plan: &'a Plan, view: &'a View<'_>) -> Vec<(&'a Summary, &'a Rollup)> {
    view.summaries()
        .iter()
        .zip(view.rollups())
        .map(|(name, rollup)| {
            let summary = plan
                .summaries
                .iter()
                .find(|s| &s.name == name)
                .expect("a summary of the plan");
            (summary, rollup)
        })
        .collect()
}

fn config() -> DayFilesConfig {
    DayFilesConfig {
        lateness_ms: 3_600_000,
        ..DayFilesConfig::default()
    }
}

fn names(written: &[Written]) -> Vec<String> {
    let mut names: Vec<String> = written
        .iter()
        .map(|w| {
            format!(
                "{}/{}",
                w.summary,
                w.path.file_name().and_then(|n| n.to_str()).expect("a name")
            )
        })
        .collect();
    names.sort();
    names
}

/// Modification time and inode of each file, to see what was rewritten.
fn identities(dir: &Path) -> BTreeMap<String, (std::time::SystemTime, u64)> {
    use std::os::unix::fs::MetadataExt;
    files_under(dir)
        .into_keys()
        .map(|name| {
            let meta = std::fs::metadata(dir.join(&name)).expect("metadata");
            (name, (meta.modified().expect("mtime"), meta.ino()))
        })
        .collect()
}

#[test]
fn closed_days_are_written_as_run_writes_them_and_rewritten_only_when_changed() {
    let plan = Arc::new(Plan::compile(SQL).expect("plan"));
    let out = temp("serve");
    let engine = Engine::start(&plan);
    // November 1 to 5, every hour: the clock reaches 2026-11-05T23:00.
    let mut lines = days(1, 5);
    engine.submit(&lines);
    let mut files = DayFiles::open(&out, &plan, config()).expect("open");
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");

    // Days 1 to 4 have closed (their end plus an hour is before 23:00 on
    // the 5th); the 5th has not. The week of 2026-10-26 ended on the 2nd;
    // the one of 2026-11-02 has not. `total` has no days.
    let reference = run_out(&plan, &lines, "first");
    let mut expected: Vec<String> = reference
        .keys()
        .filter(|name| {
            (name.starts_with("by_day/") || name.starts_with("by_hour/"))
                && !name.ends_with("2026-11-05.csv")
                || *name == "by_week/2026-10-26.csv"
        })
        .cloned()
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 9, "{expected:?}");
    assert_eq!(names(&written), expected);
    assert!(written.iter().all(|w| w.closed && !w.rewrite));
    let served = files_under(&out);
    assert_eq!(served.keys().cloned().collect::<Vec<_>>(), expected);
    for (name, bytes) in &served {
        assert_eq!(
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(&reference[name]),
            "{name}"
        );
    }
    assert_eq!(files.stats().created, 9);

    // Nothing new: nothing written, every closed day found unchanged.
    let before = identities(&out);
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert!(written.is_empty(), "{written:?}");
    assert_eq!(files.stats().unchanged, 9);
    assert_eq!(identities(&out), before);

    // A late event on the 2nd (x > 1, so in by_hour too) changes that
    // day's files and no other.
    let late = "2026-11-02T07:30:00Z,99999,site4,3.5".to_string();
    lines.push(late.clone());
    engine.submit(std::slice::from_ref(&late));
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert_eq!(
        names(&written),
        ["by_day/2026-11-02.csv", "by_hour/2026-11-02.csv"]
    );
    assert!(written.iter().all(|w| w.rewrite && w.closed));
    // The 2nd is a Monday: its event is in the week of 2026-11-02, still
    // open, so the closed week's file stays as it was.
    let reference = run_out(&plan, &lines, "late");
    let after = identities(&out);
    for (name, identity) in &after {
        let changed = before[name] != *identity;
        assert_eq!(
            changed,
            name.ends_with("2026-11-02.csv") && !name.starts_with("by_week"),
            "{name}"
        );
        assert_eq!(files_under(&out)[name], reference[name], "{name}");
    }
    assert_eq!(files.stats().rewritten, 2);

    // The 6th's first hour is within the lateness of the 5th: nothing
    // closes. Its next hours close the 5th (at 01:00, an hour past its
    // end) and nothing else.
    let first_hour = records(6, 0);
    lines.extend(first_hour.iter().cloned());
    engine.submit(&first_hour);
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert!(written.is_empty(), "{written:?}");
    let more: Vec<String> = (1..3).flat_map(|hour| records(6, hour)).collect();
    lines.extend(more.iter().cloned());
    engine.submit(&more);
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert_eq!(
        names(&written),
        ["by_day/2026-11-05.csv", "by_hour/2026-11-05.csv"]
    );
    let reference = run_out(&plan, &lines, "sixth");
    for (name, bytes) in files_under(&out) {
        assert_eq!(bytes, reference[&name], "{name}");
    }

    // A restart: a new writer over the same folder, the same state,
    // rewrites nothing; it reads each closed day's file once.
    drop(files);
    let before = identities(&out);
    let mut files = DayFiles::open(&out, &plan, config()).expect("open again");
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert!(written.is_empty(), "{written:?}");
    assert_eq!(files.stats().files_read, 11);
    assert_eq!(files.stats().unchanged, 11);
    assert_eq!(identities(&out), before);
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    assert!(written.is_empty());
    assert_eq!(files.stats().files_read, 11, "a file is read once");

    // A view of the same batches as the last one holds the same state:
    // update_view renders nothing the second time.
    {
        let view = engine.engine.snapshot().expect("snapshot");
        assert!(files.update_view(&plan, &view).expect("update").is_empty());
        let rendered = files.stats().groups_rendered;
        assert!(files.update_view(&plan, &view).expect("update").is_empty());
        assert_eq!(files.stats().groups_rendered, rendered);
    }

    // At the end of the stream, flush_open writes the open days and the
    // bucketless summary, as run would have.
    let written = engine
        .with_view(|pairs| files.flush_open(pairs))
        .expect("flush");
    assert_eq!(
        names(&written),
        [
            "by_day/2026-11-06.csv",
            "by_hour/2026-11-06.csv",
            "by_week/2026-11-02.csv",
            "total/all.csv"
        ]
    );
    assert!(written.iter().all(|w| !w.closed));
    assert_eq!(files_under(&out), reference);
    drop(files);
    std::fs::remove_dir_all(&out).expect("clean");
}

#[test]
fn outputs_that_are_not_folders_are_refused() {
    let plan = Plan::compile(SQL).expect("plan");
    let base = temp("refuse");
    std::fs::create_dir_all(&base).expect("dir");

    // OUT a file.
    let file = base.join("file");
    std::fs::write(&file, "x").expect("file");
    let error = DayFiles::open(&file, &plan, config()).expect_err("a file");
    assert!(matches!(error, Error::DayFile { .. }), "{error}");
    assert_eq!(std::fs::read(&file).expect("read"), b"x");

    // A summary's folder a file, then a link to a folder outside OUT.
    let out = base.join("out");
    std::fs::create_dir_all(&out).expect("out");
    std::fs::write(out.join("by_day"), "x").expect("file");
    let error = DayFiles::open(&out, &plan, config()).expect_err("a file");
    assert!(error.to_string().contains("by_day"), "{error}");
    std::fs::remove_file(out.join("by_day")).expect("remove");
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::os::unix::fs::symlink(&outside, out.join("by_day")).expect("link");
    assert!(DayFiles::open(&out, &plan, config()).is_err());
    std::fs::remove_file(out.join("by_day")).expect("remove");

    // One writer of OUT at a time.
    let files = DayFiles::open(&out, &plan, config()).expect("open");
    assert!(DayFiles::open(&out, &plan, config()).is_err());
    assert!(OutDir::open(&out).is_err(), "run --out waits its turn too");
    drop(files);

    // A day file that is a folder is refused, not replaced or followed.
    let engine = Engine::start(&Arc::new(Plan::compile(SQL).expect("plan")));
    engine.submit(&days(1, 3));
    std::fs::create_dir_all(out.join("by_day/2026-11-01.csv")).expect("a folder");
    let mut files = DayFiles::open(&out, &plan, config()).expect("open");
    let error = engine
        .with_view(|pairs| files.update(pairs))
        .expect_err("a folder");
    assert!(error.to_string().contains("2026-11-01.csv"), "{error}");

    // A summary of another plan.
    let other = Plan::compile(
        "CREATE STREAM s (ts TIMESTAMP) WITH (time = 'ts');
         CREATE SUMMARY elsewhere AS SELECT date_trunc('day', ts) AS day, count(*) FROM s GROUP BY day;",
    )
    .expect("plan");
    let mut files = DayFiles::open(&out.join("other"), &other, config()).expect("open");
    let error = engine
        .with_view(|pairs| files.update(pairs))
        .expect_err("not its plan");
    assert!(error.to_string().contains("by_day"), "{error}");
    assert!(!outside.join("2026-11-01.csv").exists());
    std::fs::remove_dir_all(&base).expect("clean");
}

#[test]
fn a_record_far_ahead_closes_nothing_under_a_future_tolerance() {
    let plan = Arc::new(Plan::compile(SQL).expect("plan"));
    let out = temp("future");
    let limits = Limits {
        future_ms: Some(30 * 86_400_000),
        ..Limits::default()
    };
    let engine = Engine::start_with(&plan, limits);
    engine.submit(&days(1, 5));
    // A clock set wrong: its bucket is the newest, but the stream's
    // robust watermark stays on the 5th.
    engine.submit(&["9999-12-31T10:00:00Z,1,site1,2.0".to_string()]);
    let mut files = DayFiles::open(&out, &plan, config()).expect("open");
    let written = engine
        .with_view(|pairs| files.update(pairs))
        .expect("update");
    let names = names(&written);
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| !n.contains("2026-11-05") && !n.contains("9999"))
    );
    drop(files);
    std::fs::remove_dir_all(&out).expect("clean");
}
