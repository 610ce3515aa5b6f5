//! Per-day files for `cardinal serve --out DIR`: each day's CSV written
//! once the day has closed, byte for byte as `cardinal run --out` writes
//! it, and written again only when a late event changes it.
//!
//! ```text
//!  OUT/                         locked as run locks it (one writer of OUT)
//!    <summary>/YYYY-MM-DD.csv     a closed day: header + that day's rows
//!    <summary>/all.csv            a summary without a time bucket (only
//!                                 from flush_open)
//!
//!  after each snapshot, per summary:      clock = the newest watermark of
//!                                         the stream's summaries
//!    groups ──by UTC day of bucket──> day D closed when
//!                                       clock >= closes_at(D) + lateness
//!    closed day D: rows -> CSV bytes (results_of_groups + write_csv,
//!                  the writer run uses) -> fingerprint
//!      fingerprint == remembered[(summary, D)]  -> nothing
//!      otherwise -> temp file, fsync, rename, folder fsync (AtomicFile)
//!                   and remember the new fingerprint
//! ```
//!
//! **Days.** `run --out` puts the rows of a summary in one file per UTC
//! calendar day of their bucket start (`export::write_daily_csv`): an hour
//! bucket's 24 buckets share a day's file, and a week, month, quarter or
//! year bucket is alone in the file of the day it starts. So a file holds
//! every bucket starting in its day, and it can change until the last of
//! them ends: `closes_at(D)` is the end of the day for units up to a day,
//! and the end of the bucket starting on `D` for longer units.
//!
//! **The clock.** Event time, not the wall clock: a replayed or delayed
//! stream closes its days when its events say the day is over. A day is
//! closed once the stream's time has passed its end by the lateness
//! ([`DayFilesConfig::lateness_ms`], default [`LATENESS_MS_DEFAULT`]). The
//! stream's time is what its rollups know of it, [`Rollup::watermark`]: a
//! bucket start, the robust watermark when the summaries have a future
//! tolerance (one record dated 9999 does not close every day), else the
//! newest bucket. Every summary of a stream sees the same records, so the
//! clock of a summary is the newest watermark among the summaries of its
//! stream passed together: a `date_trunc('day')` summary beside a
//! `date_trunc('hour')` one closes its days to the hour, not a day late.
//! A bucket start is a lower bound on the time of the newest events, so a
//! day never closes early; it may close up to one bucket late.
//!
//! **Writing.** A closed day's bytes are those `run --out` writes for that
//! day: the rows come from the engine's [`results_of_groups`] (the
//! decoding and column names `run` prints through), and the CSV from
//! [`cardinal_export::write_csv`], the code `write_daily_csv` writes each
//! day's file with. They go through [`AtomicFile`]: a temp file beside the
//! target, synced, renamed over it, the folder synced, so a reader (or a
//! crash) sees the old file or the new one, never half of one.
//!
//! **Rewrites.** Each written day's fingerprint (length, CRC-32 and
//! CRC-32C of its bytes: two independent 32-bit checks, a changed day
//! passes both by chance about once in 2^64) is remembered per (summary,
//! day). A day whose bytes are unchanged is not written again; one a late
//! event changed is rewritten whole. The first time a process decides
//! about a day (after a restart, say), a file already there is read and
//! fingerprinted, so an unchanged day is not rewritten: files are read
//! lazily, one per day the rollups hold, rather than every file under
//! `OUT` at open, so history the rollups no longer hold costs nothing.
//! (So a file removed by hand while the server runs comes back when its
//! day changes, or at the next start.)
//!
//! **Cost.** Nothing in a rollup says which groups changed since the last
//! call, so each [`DayFiles::update`] renders every closed day the rollups
//! hold and compares fingerprints: O(groups of closed days) formatting per
//! call, the work `run --out` does once at its end. Open days cost one
//! look at their bucket. Measured 2026-11-27 on the 2-core Xeon VM,
//! `dev` profile, other builds running (`cargo run -p cardinal-server
//! --example day_files`: W1's stream, its `reach` and a reach by day,
//! state and site, 105k groups over 31 days, 98.6k of them in 29 closed
//! days):
//!
//! | call | files | time |
//! |---|---|---|
//! | first, every closed day written (58 files, 4.7 MB, each synced) | 58 | 0.76 s |
//! | nothing changed: every closed day rendered and compared | 0 | 0.14 s (1.4 µs per group) |
//! | after one late event | 2 rewritten | 0.17 s |
//! | a restarted writer's first (58 files read) | 0 | 0.19 s |
//!
//! So a server snapshotting every few seconds spends a few percent of a
//! core here at 100k groups, growing with the groups of the closed days
//! held; [`DayFiles::update_view`] skips a view of the same batches as
//! the last (an idle server), and a retention window bounds the days
//! held, and so this work.
//!
//! **What is left alone.** Files of days the rollups no longer hold
//! (dropped by retention, or from before the state began) stay as they
//! are: a closed day's file is the export, not a cache of the state.
//! Folders of summaries the plan does not declare are not touched. A day
//! file that is not a regular file (a folder, a link) is refused, never
//! followed.
//!
//! **Open days at shutdown.** Days never closed are not written by
//! [`DayFiles::update`]; [`DayFiles::flush_open`] writes them too (and a
//! summary without a time bucket as `all.csv`), in the same way, and a day
//! flushed early is rewritten later only if its bytes change. A server does
//! not call it at a clean shutdown: a shutdown is most often a restart,
//! the state survives it in the snapshot and the days close when their
//! events say so, and a file appearing under `OUT` means to its readers
//! that the day is over (a loader that picks new files up would load half
//! a day). `flush_open` is for when the stream has ended for good.
//!
//! Names: every path is made by [`join_under`], the rule `run` uses, from
//! a summary name the dialect already checked and a date; nothing from a
//! request becomes a path. `OUT` itself must be a folder (or missing), and
//! each summary's folder a folder (not a link): both are checked at open.

use std::collections::{HashMap, HashSet};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use cardinal_engine::{EngineSeq, View, results_of_groups};
use cardinal_event::{TimeUnit, Timestamp};
use cardinal_export::{AtomicFile, OutDir, join_under};
use cardinal_rollup::{AggState, Rollup};
use cardinal_route::{Plan, Summary};

use crate::error::{Error, Result};

/// The lateness a server closes days with unless told otherwise: one hour
/// past the day's end, as the attribution frontier trails its stream
/// (`ATTRIBUTION_LATENESS_MS_DEFAULT`): long enough for a client's
/// retries after a short outage, short enough that yesterday's files are
/// there early in the morning.
pub const LATENESS_MS_DEFAULT: u64 = 3_600_000;

/// Most distinct days of one summary tracked (one file each): about a
/// century of daily files, as `run --out` allows (`OUTPUT_DAYS_MAX`), and
/// a bound on the files and fingerprints a few bad timestamps spread over
/// the calendar can make. A summary spanning more fails
/// [`DayFiles::update`] with [`Error::DaysMax`] and nothing of it is
/// written; a retention window keeps it under.
pub const DAYS_MAX: usize = 36_600;

/// Bytes read at a time when fingerprinting a file already on disk.
const READ_CHUNK_BYTES: usize = 1 << 16;

/// Milliseconds in a UTC day.
const DAY_MS: i64 = 86_400_000;

/// The day key of a summary without a time bucket (its one `all.csv`).
const ALL: i64 = i64::MIN;

/// One group of a rollup, as [`Rollup::groups`] gives it: bucket start,
/// key and states.
type Group<'r> = (Timestamp, &'r [u8], &'r [AggState]);

/// How [`DayFiles`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayFilesConfig {
    /// How far the stream's time must be past a day's last bucket before
    /// its file is written.
    pub lateness_ms: u64,
    /// What the files carry beyond `run`'s columns (`--hll-hex`), as
    /// `run --out` takes it.
    pub options: cardinal_export::Options,
}

impl Default for DayFilesConfig {
    fn default() -> Self {
        Self {
            lateness_ms: LATENESS_MS_DEFAULT,
            options: cardinal_export::Options::default(),
        }
    }
}

/// One file written by [`DayFiles::update`] or [`DayFiles::flush_open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The summary.
    pub summary: String,
    /// The start of the file's UTC day; `None` for `all.csv`.
    pub day: Option<Timestamp>,
    /// Where it is.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Whether a file with other bytes was there before (a late event
    /// changed the day, or the file was not this state's).
    pub rewrite: bool,
    /// Whether the day had closed (false only from
    /// [`DayFiles::flush_open`]).
    pub closed: bool,
}

/// Counters since [`DayFiles::open`], for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DayStats {
    /// Files written where there was none.
    pub created: u64,
    /// Files written over a file with other bytes.
    pub rewritten: u64,
    /// Days rendered and found equal to their file: nothing written.
    pub unchanged: u64,
    /// Groups rendered as CSV rows (the work of the calls).
    pub groups_rendered: u64,
    /// Files already on disk read to fingerprint them.
    pub files_read: u64,
}

/// A file's bytes in brief: equal bytes give equal fingerprints, and
/// different bytes the same one about once in 2^64 (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    bytes: u64,
    crc32: u32,
    crc32c: u32,
}

impl Fingerprint {
    fn of(bytes: &[u8]) -> Self {
        let mut builder = FingerprintBuilder::default();
        builder.add(bytes);
        builder.finish()
    }
}

/// A [`Fingerprint`] of bytes given in pieces.
#[derive(Default)]
struct FingerprintBuilder {
    bytes: u64,
    crc32: crc32fast::Hasher,
    crc32c: u32,
}

impl FingerprintBuilder {
    fn add(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len() as u64;
        self.crc32.update(bytes);
        self.crc32c = crc32c::crc32c_append(self.crc32c, bytes);
    }

    fn finish(self) -> Fingerprint {
        Fingerprint {
            bytes: self.bytes,
            crc32: self.crc32.finalize(),
            crc32c: self.crc32c,
        }
    }
}

/// One summary's folder and what was written in it.
#[derive(Debug)]
struct Folder {
    name: String,
    path: PathBuf,
    /// Per day start in days since the epoch ([`ALL`] for `all.csv`): the
    /// fingerprint of the file there, `None` where there is none. Holds
    /// only days the rollup held at the last call, at most [`DAYS_MAX`].
    known: HashMap<i64, Option<Fingerprint>>,
}

/// Writes closed days' files under `OUT` (see the module doc).
#[derive(Debug)]
pub struct DayFiles {
    /// `OUT`, locked for the life of the value.
    out: OutDir,
    config: DayFilesConfig,
    /// One per summary of the plan, in plan order.
    folders: Vec<Folder>,
    /// Rendered CSV of the day at hand, reused.
    buffer: Vec<u8>,
    stats: DayStats,
    /// The batches the last view of [`DayFiles::update_view`] covered.
    covers: Option<EngineSeq>,
}

/// Whether a call writes closed days only or every day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Days {
    Closed,
    All,
}

impl DayFiles {
    /// Takes `out` for writing day files of `plan`'s summaries: creates it
    /// if missing (refusing a path that is not a folder), takes its lock
    /// as `run --out` does ([`OutDir::open`]: a second writer of `out`,
    /// server or run, fails at once with the reason), and checks that
    /// each summary's folder is a plain folder where it exists. Folders
    /// are created when their first file is written.
    pub fn open(out: &Path, plan: &Plan, config: DayFilesConfig) -> Result<Self> {
        match std::fs::symlink_metadata(out) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() && out.is_dir() => {}
            Ok(_) => return Err(out_error(out, "it exists and is not a folder")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(out_error(out, e)),
        }
        let locked = OutDir::open(out).map_err(|e| out_error(out, e))?;
        let mut folders = Vec::with_capacity(plan.summaries.len());
        for summary in &plan.summaries {
            let path = join_under(out, &summary.name).map_err(|e| out_error(out, e))?;
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(out_error(
                        &path,
                        "the summary's folder is not a folder (links are not followed)",
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(out_error(&path, e)),
            }
            debug_assert_eq!(path.parent(), Some(out));
            folders.push(Folder {
                name: summary.name.clone(),
                path,
                known: HashMap::new(),
            });
        }
        assert_eq!(folders.len(), plan.summaries.len());
        Ok(Self {
            out: locked,
            config,
            folders,
            buffer: Vec::new(),
            stats: DayStats::default(),
            covers: None,
        })
    }

    /// `OUT`.
    pub fn dir(&self) -> &Path {
        self.out.dir()
    }

    /// Counters since [`DayFiles::open`].
    pub fn stats(&self) -> DayStats {
        self.stats
    }

    /// Writes the file of every closed day whose bytes differ from what
    /// its file holds (see the module doc), for each summary and its
    /// merged rollup (a view's, after a snapshot). Returns the files
    /// written. A summary without a time bucket has no days and is left
    /// for [`DayFiles::flush_open`].
    ///
    /// Fails on the first summary that cannot be written (an I/O error, a
    /// summary the plan given to [`DayFiles::open`] does not declare, more
    /// than [`DAYS_MAX`] days); files written before stay written and are
    /// remembered, so the next call goes on where this one stopped.
    pub fn update<'a>(
        &mut self,
        summaries: impl IntoIterator<Item = (&'a Summary, &'a Rollup)>,
    ) -> Result<Vec<Written>> {
        self.write(summaries, Days::Closed)
    }

    /// [`DayFiles::update`] over a continuous engine's snapshot: each of
    /// the view's summaries (found in `plan` by name) with its rollup. A
    /// view covering the same batches as the last one given here
    /// ([`View::covers`]) holds the same state, so an idle server's
    /// snapshots cost nothing. `covers` counts from 0 in each life of an
    /// engine: give one [`DayFiles`] the views of one engine.
    pub fn update_view(&mut self, plan: &Plan, view: &View<'_>) -> Result<Vec<Written>> {
        if self.covers == Some(view.covers()) {
            return Ok(Vec::new());
        }
        let mut pairs = Vec::with_capacity(view.rollups().len());
        for (name, rollup) in view.summaries().iter().zip(view.rollups()) {
            let Some(summary) = plan.summaries.iter().find(|s| &s.name == name) else {
                return Err(out_error(
                    self.out.dir(),
                    format!("the view's summary {name} is not in the plan"),
                ));
            };
            pairs.push((summary, rollup));
        }
        let written = self.update(pairs)?;
        self.covers = Some(view.covers());
        Ok(written)
    }

    /// [`DayFiles::update`], and also the days that have not closed (and a
    /// summary without a time bucket as `all.csv`), written the same way:
    /// for a stream that has ended for good. Not for a clean shutdown
    /// before a restart (see the module doc).
    pub fn flush_open<'a>(
        &mut self,
        summaries: impl IntoIterator<Item = (&'a Summary, &'a Rollup)>,
    ) -> Result<Vec<Written>> {
        self.write(summaries, Days::All)
    }

    fn write<'a>(
        &mut self,
        summaries: impl IntoIterator<Item = (&'a Summary, &'a Rollup)>,
        days: Days,
    ) -> Result<Vec<Written>> {
        let summaries: Vec<(&Summary, &Rollup)> = summaries.into_iter().collect();
        // The clock of each stream: the newest watermark among its
        // summaries (module doc).
        let mut clocks: HashMap<usize, i64> = HashMap::new();
        for (summary, rollup) in &summaries {
            if let Some(watermark) = rollup.watermark() {
                let clock = clocks.entry(summary.stream).or_insert(i64::MIN);
                *clock = (*clock).max(watermark.0);
            }
        }
        let mut written = Vec::new();
        for (summary, rollup) in summaries {
            let clock = clocks.get(&summary.stream).copied().unwrap_or(i64::MIN);
            self.write_summary(summary, rollup, clock, days, &mut written)?;
        }
        Ok(written)
    }

    /// One summary's part of [`DayFiles::write`].
    fn write_summary(
        &mut self,
        summary: &Summary,
        rollup: &Rollup,
        clock: i64,
        days: Days,
        written: &mut Vec<Written>,
    ) -> Result<()> {
        let Some(index) = self.folders.iter().position(|f| f.name == summary.name) else {
            return Err(out_error(
                self.out.dir(),
                format!(
                    "summary {} is not one of the plan's day files were opened for",
                    summary.name
                ),
            ));
        };
        let Some(bucket) = summary.bucket else {
            if days == Days::All && rollup.group_count() > 0 {
                let groups: Vec<_> = rollup.groups().collect();
                self.write_day(index, summary, rollup, None, false, groups, written)?;
            }
            return Ok(());
        };
        // One look at each group's bucket: which days exist (all of them
        // count against DAYS_MAX, as run counts them), and the groups of
        // the days to render now.
        let lateness = i64::try_from(self.config.lateness_ms).unwrap_or(i64::MAX);
        let mut held: HashSet<i64> = HashSet::new();
        let mut chosen: Vec<(i64, Group<'_>)> = Vec::new();
        for group in rollup.groups() {
            let start = group.0;
            let day = start.0.div_euclid(DAY_MS);
            if held.insert(day) && held.len() > DAYS_MAX {
                return Err(Error::DaysMax {
                    summary: summary.name.clone(),
                    days_max: DAYS_MAX,
                });
            }
            if days == Days::All || is_closed(start, bucket.unit, clock, lateness) {
                chosen.push((day, group));
            }
        }
        // Forget days the rollup no longer holds: their files stay as they
        // are, and a day that comes back is read from its file again.
        self.folders[index]
            .known
            .retain(|day, _| held.contains(day));
        chosen.sort_unstable_by_key(|(day, _)| *day);
        let mut at = 0;
        while at < chosen.len() {
            let day = chosen[at].0;
            let len = chosen[at..].iter().take_while(|(d, _)| *d == day).count();
            let closed = is_closed(chosen[at].1.0, bucket.unit, clock, lateness);
            let groups = chosen[at..at + len]
                .iter()
                .map(|(_, group)| *group)
                .collect();
            self.write_day(index, summary, rollup, Some(day), closed, groups, written)?;
            at += len;
        }
        debug_assert!(self.folders[index].known.len() <= held.len());
        Ok(())
    }

    /// Renders one day's rows (or a bucketless summary's, `day` `None`),
    /// and writes its file if its bytes differ from the file's.
    #[allow(clippy::too_many_arguments)]
    fn write_day<'r>(
        &mut self,
        index: usize,
        summary: &Summary,
        rollup: &'r Rollup,
        day: Option<i64>,
        closed: bool,
        groups: Vec<Group<'r>>,
        written: &mut Vec<Written>,
    ) -> Result<()> {
        assert!(!groups.is_empty(), "a day file holds at least one row");
        let start = day.map(|d| Timestamp(d * DAY_MS));
        let name = match start {
            Some(start) => {
                if !start.is_in_range() {
                    return Err(out_error(
                        &self.folders[index].path,
                        format!("bucket {start} is outside the years 0001 to 9999"),
                    ));
                }
                let (year, month, date) = start.date();
                format!("{year:04}-{month:02}-{date:02}.csv")
            }
            None => "all.csv".to_string(),
        };
        let folder = &self.folders[index];
        let path = join_under(&folder.path, &name).map_err(|e| out_error(&folder.path, e))?;
        self.stats.groups_rendered += groups.len() as u64;
        let results = results_of_groups(summary, rollup, groups.into_iter())
            .map_err(|e| out_error(&path, e))?;
        self.buffer.clear();
        cardinal_export::write_csv(&mut self.buffer, &results, self.config.options)
            .map_err(|e| out_error(&path, e))?;
        drop(results);
        let fingerprint = Fingerprint::of(&self.buffer);
        let key = day.unwrap_or(ALL);
        let before = match self.folders[index].known.get(&key) {
            Some(known) => *known,
            None => {
                let on_disk = fingerprint_file(&path)?;
                self.stats.files_read += u64::from(on_disk.is_some());
                on_disk
            }
        };
        if before == Some(fingerprint) {
            self.stats.unchanged += 1;
            self.folders[index].known.insert(key, before);
            return Ok(());
        }
        let folder_path = self.folders[index].path.clone();
        if !folder_path.exists() {
            std::fs::create_dir(&folder_path).map_err(|e| out_error(&folder_path, e))?;
            // The new folder reaches the disk with OUT (best effort, as
            // AtomicFile syncs a file's folder).
            let _ = std::fs::File::open(self.out.dir()).and_then(|d| d.sync_all());
        }
        let mut file = AtomicFile::create(&path).map_err(|e| out_error(&path, e))?;
        file.write_all(&self.buffer)
            .map_err(|e| out_error(file.temp_path(), e))?;
        file.commit().map_err(|e| out_error(&path, e))?;
        self.folders[index].known.insert(key, Some(fingerprint));
        if before.is_some() {
            self.stats.rewritten += 1;
        } else {
            self.stats.created += 1;
        }
        written.push(Written {
            summary: summary.name.clone(),
            day: start,
            path,
            bytes: fingerprint.bytes,
            rewrite: before.is_some(),
            closed,
        });
        Ok(())
    }
}

/// Whether the file of the UTC day holding bucket `start` of `unit` can no
/// longer change: the stream's `clock` has passed the end of the day's
/// last bucket by `lateness`.
fn is_closed(start: Timestamp, unit: TimeUnit, clock: i64, lateness: i64) -> bool {
    closes_at(start, unit).saturating_add(lateness) <= clock
}

/// The end of the last bucket of `unit` starting on the UTC day of bucket
/// `start`: the day's end for units up to a day, else the end of the one
/// bucket that starts that day (the next bucket's start). A fixed width
/// (`time_bucket`) divides a day (`cardinal_event::BucketWidth`), so its
/// buckets end at the day's end like the units up to a day.
fn closes_at(start: Timestamp, unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second
        | TimeUnit::Minute
        | TimeUnit::Hour
        | TimeUnit::Day
        | TimeUnit::Fixed(_) => {
            debug_assert!(DAY_MS % unit.shortest_ms() == 0);
            (start.0.div_euclid(DAY_MS) + 1) * DAY_MS
        }
        TimeUnit::Week | TimeUnit::Month | TimeUnit::Quarter | TimeUnit::Year => {
            // Every calendar bucket is shorter than twice its shortest, so
            // four days past its shortest span is inside the next bucket.
            let next = Timestamp(start.0 + unit.shortest_ms() + 4 * DAY_MS).truncate(unit);
            debug_assert!(next > start);
            debug_assert_eq!(next.truncate(unit), next);
            next.0
        }
    }
}

/// The fingerprint of the regular file at `path`, `None` if there is
/// none; anything there but a regular file is refused.
fn fingerprint_file(path: &Path) -> Result<Option<Fingerprint>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(out_error(
                path,
                "a day file that is not a regular file (links are not followed)",
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(out_error(path, e)),
    }
    let mut file = std::fs::File::open(path).map_err(|e| out_error(path, e))?;
    let mut builder = FingerprintBuilder::default();
    let mut chunk = vec![0; READ_CHUNK_BYTES];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => builder.add(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(out_error(path, e)),
        }
    }
    Ok(Some(builder.finish()))
}

fn out_error(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::DayFile {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text.as_bytes()).expect("a time")
    }

    #[test]
    fn a_day_closes_at_the_end_of_its_last_bucket() {
        let day = at("2026-11-03");
        let next = at("2026-11-04").0;
        let width = |text| TimeUnit::Fixed(cardinal_event::BucketWidth::parse(text).expect(text));
        for unit in [
            TimeUnit::Second,
            TimeUnit::Minute,
            TimeUnit::Hour,
            TimeUnit::Day,
            width("1 second"),
            width("5 minutes"),
            width("6 hours"),
            width("1 day"),
        ] {
            assert_eq!(closes_at(day, unit), next, "{unit:?}");
            assert_eq!(closes_at(at("2026-11-03T23:00:00Z"), unit), next);
            // The day's last bucket starts that day and ends at its end.
            let last = Timestamp(next - 1).truncate(unit);
            assert_eq!(last.date(), day.date(), "{unit:?}");
            assert_eq!(closes_at(last, unit), next, "{unit:?}");
        }
        assert_eq!(
            closes_at(at("2026-11-02"), TimeUnit::Week),
            at("2026-11-09").0
        );
        assert_eq!(
            closes_at(at("2026-02-01"), TimeUnit::Month),
            at("2026-03-01").0
        );
        assert_eq!(
            closes_at(at("2028-02-01"), TimeUnit::Month),
            at("2028-03-01").0
        );
        assert_eq!(
            closes_at(at("2026-01-01"), TimeUnit::Month),
            at("2026-02-01").0
        );
        assert_eq!(
            closes_at(at("2026-07-01"), TimeUnit::Quarter),
            at("2026-10-01").0
        );
        assert_eq!(
            closes_at(at("2026-01-01"), TimeUnit::Quarter),
            at("2026-04-01").0
        );
        assert_eq!(
            closes_at(at("2028-01-01"), TimeUnit::Year),
            at("2029-01-01").0
        );
        // Closed exactly at end + lateness, not a millisecond before.
        let lateness = 3_600_000;
        assert!(!is_closed(
            day,
            TimeUnit::Hour,
            next + lateness - 1,
            lateness
        ));
        assert!(is_closed(day, TimeUnit::Hour, next + lateness, lateness));
        assert!(!is_closed(day, TimeUnit::Hour, i64::MIN, 0));
        assert!(!is_closed(day, TimeUnit::Hour, i64::MAX - 1, i64::MAX));
    }

    #[test]
    fn fingerprints_tell_bytes_apart_however_they_arrive() {
        let whole = Fingerprint::of(b"day,n\n2026-11-03,1\n");
        let mut pieces = FingerprintBuilder::default();
        pieces.add(b"day,n\n2026");
        pieces.add(b"-11-03,1\n");
        assert_eq!(pieces.finish(), whole);
        assert_ne!(Fingerprint::of(b"day,n\n2026-11-03,2\n"), whole);
        assert_ne!(Fingerprint::of(b""), Fingerprint::of(b"\0"));
    }
}
