//! The record fold path: routes each record through every summary of its
//! stream and folds it into the worker's partial rollups, one [`Lane`] per
//! summary (its summary, feeds, filter and bucket owners, route, rollup).
//! [`Fold::record`] takes every record of every format; the faster paths
//! over a batch's columns ([`columns`], [`by_aggregate`]) fold the same
//! way and fall back to it for any row they cannot route.
//!
//! Routing follows paths chosen when the summary compiles
//! (`cardinal_route::Paths`: a text column or a constant `substr` of one is
//! cut from the field's bytes, a typed column is read straight from the
//! record, the rest goes to the evaluator). Summaries with equal filters or
//! equal time buckets share one evaluation (`filter_owner`,
//! `bucket_owner`); the column cache is used only when some typed column is
//! read twice. Folding goes through per-aggregate [`Feed`]s decided once
//! (count, number, key, top-k): `Rollup::fold_with` finds the group and the
//! worker calls the state's `fold_count` / `fold_number` / `fold_key` /
//! `fold_topk` directly. Quantile aggregates over the same argument and `k`
//! share one KLL sketch (`AggKind::QuantilesOf`). Routing keeps one
//! `DateMemo` in its `Scratch`, so a day of timestamps converts its date
//! once and a second of them its time of day once.
//!
//! Large rollups make each fold a chain of cache misses. Once a lane's
//! rollup has [`PREFETCH_GROUPS_MIN`] groups, its routes wait in a ring of
//! [`PREFETCH_DEPTH`] ([`Deferred`]): `Rollup::prefetch` hashes the key and
//! prefetches its index slot when a route enters, `prefetch_group` its
//! group record and states halfway, `prefetch_key` a long key's bytes at
//! three quarters, and `fold_hashed` folds it when it leaves, in arrival
//! order (rings are flushed at the end of every batch). The ring adds
//! instructions and removes waiting: measure it in time, not in
//! instructions (bench/JOURNAL.md, "Routing, folding and output:
//! instructions per record"). Past the rollup's split into parts, a lane
//! holds its routes per part instead and folds a part at a time
//! ([`pending`](crate::pending)).
//!
//! Per record the hot path makes no libc call for short byte strings: keys
//! and text filters are hashed and compared with word loads
//! (`cardinal_event::bytes`). The `bcmp` calls they replaced took 32% of
//! W1's time by `perf` and 0.6% by callgrind, so check wall time with
//! `perf record -e cpu-clock` as well as instruction counts; `perf
//! annotate` also shows store-forwarding stalls, which is why routed
//! arguments are converted where they are read and folded by reference
//! (bench/JOURNAL.md, "W1 and W3 per-record glue").
//!
//! Results are unchanged by any of this: the property test
//! `deferred_folds_equal_direct_folds` below folds through the ring, at
//! once and held per part, with the group limit hit, and compares.

use std::io::{BufWriter, Write};
use std::sync::Mutex;

use anyhow::Result;
use cardinal_event::Record;
use cardinal_rollup::{BytesGauge, Folded, KeyHash, Limits, MemoryBudget, Rollup, Shape};
use cardinal_route::{ColumnCache, ColumnPlan, Routed, Scratch, Summary};

use crate::counts::Counts;
use crate::error::{budget_error, group_limit_error};
use crate::feed::{Feed, HashMemo, feeds_of, fold_routed_at};
use crate::pending::{PENDING_BYTES_MAX, Pending};
use crate::rejects::{
    BAD_HEADER, INPUT_CUT_SHORT, KEY_TOO_LONG, REJECTS_KEPT_MAX, REJECTS_SHOWN_MAX, eval_reason,
    eval_text,
};

mod by_aggregate;
pub(crate) mod columns;
mod lane;

use lane::{LaneFold, reads_a_typed_column_twice, route_lanes};

/// Counts `reason` against `counts`, shows `text` on stderr while fewer
/// than [`REJECTS_SHOWN_MAX`] were shown, and keeps it for the rejects
/// file (`lines`).
pub(crate) fn reject(
    counts: &mut Counts,
    lines: &mut String,
    shown: &std::sync::atomic::AtomicU64,
    reason: &str,
    text: &str,
) {
    counts.rejects += 1;
    *counts
        .rejects_by_reason
        .entry(reason.to_string())
        .or_default() += 1;
    if shown.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < REJECTS_SHOWN_MAX {
        eprintln!("{}rejected: {text}", crate::progress::erase());
    }
    lines.push_str(text);
    lines.push('\n');
}

/// A worker's partial rollups and the buffers routing reuses: every
/// record of every format goes through [`Fold::record`].
pub(crate) struct Fold<'a> {
    shown: &'a std::sync::atomic::AtomicU64,
    /// One per summary, in order: everything one record's pass through
    /// the summary touches, side by side.
    pub(crate) lanes: Vec<Lane<'a>>,
    pub(crate) counts: Counts,
    /// Each typed field parsed once per record, whatever reads it; `None`
    /// when no typed column is read twice.
    pub(crate) cache: Option<ColumnCache>,
    /// Every lane's [`ColumnPlan`]: Parquet batches that hold their
    /// columns as typed slices are routed from them
    /// ([`Fold::columns_of`]), and text batches from `parsed`.
    plans: Vec<ColumnPlan>,
    /// The typed columns of the current text batch
    /// ([`columns::ParsedColumns`]), filled when the batch folds an
    /// aggregate at a time or the column cache is on; `None` when a
    /// typed column read is of a type the path does not carry. A batch
    /// that does neither goes record by record: a column read once parses
    /// as cheaply in the route, without a second pass over the batch.
    pub(crate) parsed: Option<columns::ParsedColumns>,
    /// What lanes work out once per value of a Parquet batch's
    /// dictionary-encoded text columns.
    dictionaries: columns::Dictionaries,
    hashed: HashMemo,
    scratch: Scratch,
    /// A row's key as [`Fold::hold_columns`] builds it (reused).
    held_key: Vec<u8>,
    /// What [`Fold::fold_by_aggregate`] reuses.
    by_aggregate: by_aggregate::ByAggregate,
    /// Whether text batches may be folded an aggregate at a time
    /// ([`Fold::fold_by_aggregate`]; tests turn it off to compare).
    by_aggregate_on: bool,
    /// Reject lines not yet written to the rejects file.
    reject_lines: String,
    /// The first reject lines of the batch being folded, kept for its
    /// caller (a continuous engine's batch receipt), when `Some`.
    pub(crate) kept_rejects: Option<Vec<String>>,
    /// Lanes whose rollup has at least this many groups hold routes back
    /// and prefetch ([`PREFETCH_GROUPS_MIN`]; tests vary it).
    prefetch_groups_min: usize,
    /// Bytes of records all lanes together may hold per part before the
    /// lane holding the most folds them ([`PENDING_BYTES_MAX`]; tests vary
    /// it).
    pending_bytes_max: usize,
    /// The memory budget of the run, shared by every worker; `None`
    /// counts nothing.
    pub(crate) budget: Option<&'a MemoryBudget>,
    /// Each lane's rollup's bytes, as reported to `budget`.
    pub(crate) gauges: Vec<BytesGauge>,
    /// `counts.records` when the budget was last checked.
    records_checked: u64,
}

/// One summary's part of a [`Fold`].
pub(crate) struct Lane<'a> {
    summary: &'a Summary,
    /// How each aggregate takes the routed record.
    feeds: Vec<Feed>,
    /// The first summary with an equal filter, which evaluates it for
    /// both (this lane's own index when it is the first).
    filter_owner: usize,
    /// The first summary with an equal time bucket (this lane's own index
    /// when it is the first): when it routed the record, its bucket is
    /// this lane's too.
    bucket_owner: usize,
    /// Whether the current record passed the filter.
    passed: bool,
    /// The current record's route.
    routed: Routed,
    pub(crate) rollup: Rollup,
    /// Routes waiting to be folded while their groups load.
    deferred: Deferred,
    /// Whether routes may be held back per part ([`Pending`]): no
    /// aggregate reads text and no retention window drops by arrival.
    can_pend: bool,
    /// Routes held back per part of a large rollup.
    pending: Pending,
    /// The groups of recent (bucket, dictionary keys) of Parquet batches
    /// whose dimensions are dictionary-encoded text columns.
    groups: columns::GroupCache,
    /// The current record's group, when `groups` knew it: its key was
    /// not built.
    cached: Option<cardinal_rollup::GroupAt>,
    /// The current record's (bucket, dictionary keys) when `groups` did
    /// not know them: its group is remembered once it is folded.
    to_remember: Option<(i64, u64)>,
}

/// Records routed at least this many groups ago are folded through
/// [`Deferred`]: below it a rollup's index, groups and states fit in the
/// caches and prefetching only costs instructions.
pub(crate) const PREFETCH_GROUPS_MIN: usize = 1 << 16;

/// How many routed records a lane holds back before folding the oldest:
/// the prefetch distance, in records. The group record and states are
/// prefetched halfway.
pub(crate) const PREFETCH_DEPTH: usize = 8;

/// A lane's routed records waiting to be folded, oldest first, in a ring
/// of [`PREFETCH_DEPTH`] routes. A record's index slot is prefetched when it
/// enters, its group and states halfway, and it is folded when it leaves,
/// in arrival order, so the rollup sees exactly the folds it would have
/// seen. Routes are swapped in and out, never copied.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    ring: Vec<(Routed, Option<KeyHash>)>,
    first: usize,
    len: usize,
}

impl<'a> Fold<'a> {
    pub(crate) fn new(
        summaries: &'a [&'a Summary],
        shapes: &'a [Shape],
        limits: Limits,
        shown: &'a std::sync::atomic::AtomicU64,
        stream: &cardinal_route::Stream,
    ) -> Result<Self> {
        let lanes: Vec<Lane<'a>> = summaries
            .iter()
            .zip(shapes)
            .map(|(summary, shape)| -> Result<Lane<'a>> {
                let feeds = feeds_of(summary, shape);
                // topk keeps its candidates' names, which held records do
                // not carry.
                let can_pend = !feeds.iter().any(|feed| matches!(feed, Feed::TopK(_)));
                Ok(Lane {
                    summary,
                    feeds,
                    filter_owner: summaries
                        .iter()
                        .position(|t| t.filter == summary.filter)
                        .expect("a summary's filter equals itself"),
                    bucket_owner: summaries
                        .iter()
                        .position(|t| t.bucket == summary.bucket)
                        .expect("a summary's bucket equals itself"),
                    passed: false,
                    routed: Routed::default(),
                    rollup: Rollup::new(shape.clone(), limits)?,
                    deferred: Deferred {
                        ring: vec![(Routed::default(), None); PREFETCH_DEPTH],
                        first: 0,
                        len: 0,
                    },
                    can_pend,
                    pending: Pending::default(),
                    groups: columns::GroupCache::default(),
                    cached: None,
                    to_remember: None,
                })
            })
            .collect::<Result<_>>()?;
        let width = stream.schema.columns.len();
        let twice = reads_a_typed_column_twice(summaries);
        let plans: Vec<ColumnPlan> = summaries.iter().map(|s| s.column_plan()).collect();
        let dictionaries = columns::Dictionaries::new(&plans, |s| lanes[s].filter_owner);
        Ok(Self {
            shown,
            lanes,
            counts: Counts::default(),
            cache: twice.then(|| ColumnCache::new(width)),
            parsed: columns::ParsedColumns::new(width, &plans),
            dictionaries,
            plans,
            hashed: HashMemo::default(),
            scratch: Scratch::default(),
            held_key: Vec::new(),
            by_aggregate: by_aggregate::ByAggregate::default(),
            by_aggregate_on: true,
            reject_lines: String::new(),
            kept_rejects: None,
            prefetch_groups_min: PREFETCH_GROUPS_MIN,
            pending_bytes_max: PENDING_BYTES_MAX,
            budget: None,
            gauges: vec![BytesGauge::default(); summaries.len()],
            records_checked: 0,
        })
    }

    /// Routes `record` (from input `name`; `at` says where in it, for
    /// rejects) through every summary and folds it into their rollups.
    ///
    /// The record is routed through every summary before it is folded into
    /// any: a record that one summary rejects is folded into none, so that
    /// every summary counts the same records.
    pub(crate) fn record<R: Record + ?Sized>(
        &mut self,
        raw: &R,
        name: &str,
        at: impl Fn() -> String,
    ) {
        let routed = match &mut self.cache {
            Some(cache) => route_lanes(&mut self.lanes, &cache.record(raw), &mut self.scratch),
            None => route_lanes(&mut self.lanes, raw, &mut self.scratch),
        };
        if let Err((s, e)) = routed {
            let summary = &self.lanes[s].summary;
            let text = format!(
                "{name}:{}: {}: {}",
                at(),
                summary.name,
                eval_text(&e, &summary.schema)
            );
            reject(
                &mut self.counts,
                &mut self.reject_lines,
                self.shown,
                &eval_reason(&e),
                &text,
            );
            return;
        }
        self.counts.records += 1;
        self.fold_lanes(name, &at);
    }

    /// Folds the record every lane has routed (`lane.routed`, for the
    /// lanes it `passed`) into their rollups. The caller counted it in
    /// `records`; a key too long for some lane rejects it, and it is
    /// counted there instead.
    fn fold_lanes(&mut self, name: &str, at: &impl Fn() -> String) {
        let mut held = false;
        let mut too_long = false;
        for lane in &mut self.lanes {
            if !lane.passed {
                continue;
            }
            // Routed from columns into a group the lane knew: no key.
            if let Some(group) = lane.cached.take() {
                fold_routed_at(
                    &lane.feeds,
                    &mut lane.rollup,
                    &lane.routed,
                    &mut self.hashed,
                    group,
                );
                continue;
            }
            let folded = match lane.fold_route(&mut self.hashed, self.prefetch_groups_min) {
                LaneFold::Held => {
                    held = true;
                    continue;
                }
                LaneFold::Deferred => continue,
                LaneFold::Folded(folded) => folded,
            };
            if let Some((bucket, name)) = lane.to_remember.take()
                && folded == Folded::Ok
                && let Some(group) = lane.rollup.last_folded()
            {
                lane.groups.remember(bucket, name, group);
            }
            if folded == Folded::DroppedKeyTooLong {
                too_long = true;
                reject(
                    &mut self.counts,
                    &mut self.reject_lines,
                    self.shown,
                    KEY_TOO_LONG,
                    &format!("{name}: {}", at()),
                );
            }
        }
        if too_long {
            self.counts.records -= 1;
        }
        if held {
            self.bound_pending();
        }
    }

    /// Folds the records of the lane holding the most once the lanes
    /// together hold `pending_bytes_max`: the bound is per worker, however
    /// many large summaries it folds.
    fn bound_pending(&mut self) {
        let held: usize = self.lanes.iter().map(|lane| lane.pending.bytes()).sum();
        if held >= self.pending_bytes_max
            && let Some(lane) = self
                .lanes
                .iter_mut()
                .max_by_key(|lane| lane.pending.bytes())
        {
            lane.drain(&mut self.hashed);
        }
    }

    /// Folds every route of the prefetch ring: at the end of each batch,
    /// so that nothing in it waits across inputs.
    pub(crate) fn flush(&mut self) {
        for lane in &mut self.lanes {
            lane.flush(&mut self.hashed);
            // A retention window bounds memory too: groups of buckets it
            // has left are dropped as the stream moves on. The records held
            // back arrived before this point, so they fold first, as they
            // would have folded at once.
            if lane.rollup.eviction_due() {
                lane.drain(&mut self.hashed);
                lane.rollup.evict_expired_due();
            }
        }
    }

    /// Folds every held-back route, in the ring and held per part: the
    /// rollups are then whole.
    pub(crate) fn finish(&mut self) {
        for lane in &mut self.lanes {
            lane.flush(&mut self.hashed);
            lane.drain(&mut self.hashed);
        }
    }

    /// Counts and reports a rejected record.
    pub(crate) fn reject(&mut self, reason: &str, text: &str) {
        reject(
            &mut self.counts,
            &mut self.reject_lines,
            self.shown,
            reason,
            text,
        );
    }

    /// An input that could not be read past some point (`error`, the
    /// source's; `rest`, what is not read): what was read before it is
    /// folded, the rest is one reject, and the run goes on with the other
    /// inputs. Bad input does not stop the run, and what could be read is
    /// not thrown away; `--strict` fails the run as for any reject. Always
    /// shown, however many rejects were.
    pub(crate) fn cut_short(&mut self, error: impl std::fmt::Display, rest: &str) {
        self.unreadable(&format!("{error}; the rest of {rest} is not read"));
    }

    /// An input whose header does not fit the stream: one reject for the
    /// whole input, always shown; the run goes on (`--strict` fails it).
    pub(crate) fn bad_header(&mut self, error: impl std::fmt::Display) {
        let text = format!("{error}; none of this input is read");
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) >= REJECTS_SHOWN_MAX {
            eprintln!("{}rejected: {text}", crate::progress::erase());
        }
        self.reject(BAD_HEADER, &text);
    }

    /// [`Fold::cut_short`]'s reject, worded by the caller: `text` says
    /// what could not be read and what is lost.
    pub(crate) fn unreadable(&mut self, text: &str) {
        if self.shown.load(std::sync::atomic::Ordering::Relaxed) >= REJECTS_SHOWN_MAX {
            eprintln!("{}rejected: {text}", crate::progress::erase());
        }
        self.reject(INPUT_CUT_SHORT, text);
    }

    /// Fails once a summary's partial rollup has had to refuse a group:
    /// its answer would pass `--groups-max` on any thread count, since the
    /// groups of one worker are among the answer's; and once the rollups of
    /// every worker together hold more than the memory budget. Checked
    /// after every batch, so the run stops early instead of folding the
    /// rest first (or failing to allocate).
    pub(crate) fn within_limits(&mut self) -> Result<()> {
        for lane in &self.lanes {
            if lane.rollup.dropped_group_limit() > 0 {
                return Err(group_limit_error(
                    &lane.summary.name,
                    lane.rollup.limits().groups_max,
                ));
            }
        }
        if let Some(budget) = self.budget {
            let records = self.counts.records - self.records_checked;
            self.records_checked = self.counts.records;
            for (lane, gauge) in self.lanes.iter().zip(&mut self.gauges) {
                gauge.update(&lane.rollup, records, budget);
            }
            if !budget.holds()
                && let Some((lane, gauge)) = self
                    .lanes
                    .iter()
                    .zip(&self.gauges)
                    .max_by_key(|(_, gauge)| gauge.reported())
            {
                return Err(budget_error(
                    &lane.summary.name,
                    gauge.reported(),
                    lane.rollup.group_count(),
                    budget.bytes_max(),
                ));
            }
        }
        Ok(())
    }

    /// Folds everything held back, then hands over each lane's groups
    /// ([`Rollup::take_groups`]) and the counts since the last hand-over,
    /// leaving the fold empty but at the same point of its stream: what a
    /// continuous engine's worker gives at a snapshot. The groups' bytes
    /// leave the memory budget with them.
    pub(crate) fn hand_over(&mut self) -> (Vec<Rollup>, Counts) {
        self.finish();
        let rollups = self
            .lanes
            .iter_mut()
            .map(|lane| {
                // Held routes and cached group positions are of the
                // groups handed over.
                lane.pending = Pending::default();
                lane.groups = columns::GroupCache::default();
                lane.cached = None;
                lane.to_remember = None;
                lane.rollup.take_groups()
            })
            .collect();
        if let Some(budget) = self.budget {
            for gauge in &mut self.gauges {
                gauge.release(budget);
            }
        }
        self.gauges.fill(BytesGauge::default());
        self.records_checked = 0;
        (rollups, std::mem::take(&mut self.counts))
    }

    /// Appends the pending reject lines to the rejects file, if any.
    pub(crate) fn flush_rejects(
        &mut self,
        rejects_file: Option<&Mutex<BufWriter<std::fs::File>>>,
    ) -> Result<()> {
        if !self.reject_lines.is_empty() {
            if let Some(kept) = &mut self.kept_rejects {
                let room = REJECTS_KEPT_MAX.saturating_sub(kept.len());
                kept.extend(self.reject_lines.lines().take(room).map(str::to_owned));
            }
            if let Some(file) = rejects_file {
                file.lock()
                    .expect("rejects lock")
                    .write_all(self.reject_lines.as_bytes())?;
            }
            self.reject_lines.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;
    use crate::feed::{fold_routed, id_of};
    use crate::plan::shape_of;
    use cardinal_event::Timestamp;
    use cardinal_rollup::AggKind;
    use cardinal_rollup::Input;
    use cardinal_route::{Arg, Plan};
    use proptest::prelude::*;

    const SQL: &str = "
        CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, t TEXT) WITH (time = 'ts');
        CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, t,
            count(*), count(x), sum(x), avg(n), min(x), max(n), hll(n), theta(t),
            exact_distinct(n), exact_distinct(t), approx_quantile(x, 0.5), topk(t, 3), topk(n, 3),
            approx_quantile(x, 0.9, 0.99)
          FROM s GROUP BY day, t;";

    /// The shape with every quantile aggregate keeping its own sketch.
    fn unshared(shape: &Shape) -> Shape {
        let aggs = shape
            .aggs
            .iter()
            .map(|kind| match *kind {
                AggKind::QuantilesOf { of, ranks } => {
                    let AggKind::Quantiles { k, .. } = shape.aggs[usize::from(of)] else {
                        unreachable!("QuantilesOf reads a Quantiles");
                    };
                    AggKind::Quantiles { k, ranks }
                }
                other => other,
            })
            .collect();
        Shape { aggs }
    }

    /// The general path: one [`Input`] per aggregate, built from the
    /// aggregate's kind and routed argument, folded by [`Rollup::fold`].
    fn fold_general(summary: &Summary, rollup: &mut Rollup, routed: &Routed) -> Folded {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for aggregate in &summary.aggregates {
            names.push(match aggregate.argument.map(|a| (a, routed.args[a])) {
                Some((_, Arg::Int(v))) => v.to_string().into_bytes(),
                Some((a, _)) => routed.text_of(a).to_vec(),
                None => Vec::new(),
            });
        }
        let inputs: Vec<Input<'_>> = summary
            .aggregates
            .iter()
            .zip(&rollup.shape().aggs.clone())
            .zip(&names)
            .map(|((aggregate, kind), name)| {
                let Some(a) = aggregate.argument else {
                    return Input::Null;
                };
                let arg = routed.args[a];
                match kind {
                    AggKind::CountAll => Input::Null,
                    AggKind::Count if arg == Arg::Null => Input::Null,
                    AggKind::Count => Input::Number(0.0),
                    AggKind::Hll { .. }
                    | AggKind::Theta { .. }
                    | AggKind::ExactDistinct
                    | AggKind::TopK { .. } => match arg.hash() {
                        Some(hash) => Input::Key {
                            hash,
                            id: id_of(&arg),
                            text: name,
                        },
                        None => Input::Null,
                    },
                    _ => match arg {
                        Arg::Int(i) => Input::Int(i),
                        Arg::Float(f) => Input::Number(f),
                        #[expect(clippy::cast_precision_loss, reason = "instants")]
                        Arg::Time(t) => Input::Number(t.0 as f64),
                        Arg::Bool(b) => Input::Number(f64::from(u8::from(b))),
                        Arg::Null | Arg::Text { .. } => Input::Null,
                    },
                }
            })
            .collect();
        rollup.fold(routed.bucket.unwrap_or(Timestamp(0)), &routed.key, &inputs)
    }

    /// Everything comparable about a rollup's groups, in group order.
    fn fingerprint(rollup: &Rollup) -> Vec<String> {
        let mut rows: Vec<String> = rollup.rows().iter().map(|r| format!("{r:?}")).collect();
        rows.push(format!(
            "{} groups, {} dropped at the limit, {} expired",
            rollup.group_count(),
            rollup.dropped_group_limit(),
            rollup.dropped_expired()
        ));
        rows
    }

    proptest! {
        /// Holding routes back to prefetch their groups, or per part of
        /// the rollup, folds exactly what folding at once does: same
        /// groups, same states, same drops (the group limit is hit in
        /// many cases; a retention window of 0 to 2 days drops late rows
        /// and evicts old days between batches), whichever lanes defer and
        /// wherever batches end.
        #[test]
        fn deferred_folds_equal_direct_folds(
            rows in proptest::collection::vec((0u8..4, 0u16..600, -5i64..5, 0u8..8), 0..1500),
            batch in 1usize..200,
            groups_max in 300u64..2000,
            pending_bytes_max in 1usize..5000,
            retention_days in proptest::option::of(0i64..3),
        ) {
            let plan = Plan::compile(
                "CREATE STREAM s (ts TIMESTAMP, ip TEXT, n BIGINT, site TEXT) WITH (time = 'ts');
                 CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, substr(ip, 1, 3) AS p,
                   count(*), sum(n), hll(n), topk(site, 3) FROM s GROUP BY day, p;
                 CREATE SUMMARY b AS SELECT date_trunc('day', ts) AS day, ip, count(*), min(n)
                   FROM s WHERE site <> 's0' GROUP BY day, ip;",
            )
            .expect("compiles");
            let summaries: Vec<&Summary> = plan.summaries.iter().collect();
            let shapes: Vec<Shape> = summaries.iter().map(|s| shape_of(s).expect("shape")).collect();
            let limits = Limits { groups_max, retention_ms: retention_days.map(|d| d * 86_400_000), future_ms: None };
            let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
            let stream = &plan.streams[0];
            // Through the prefetch ring, at once, and held per part (the
            // rollups split into parts from the first group).
            let mut folds = [(0, usize::MAX), (usize::MAX, usize::MAX), (usize::MAX, 0)].map(
                |(min, parts_after)| {
                    let mut fold =
                        Fold::new(&summaries, &shapes, limits, &shown, stream).expect("fold");
                    fold.prefetch_groups_min = min;
                    fold.pending_bytes_max = pending_bytes_max;
                    for lane in &mut fold.lanes {
                        lane.rollup = lane.rollup.clone().with_parts_after(parts_after);
                    }
                    fold
                },
            );
            for fold in &mut folds {
                for (i, (day, ip, n, site)) in rows.iter().enumerate() {
                    let fields = [
                        format!("2026-11-0{}T00:00:00Z", day + 1),
                        format!("{ip:04}"),
                        n.to_string(),
                        format!("s{site}"),
                    ];
                    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                    fold.record(fields.as_slice(), "test", || i.to_string());
                    if (i + 1) % batch == 0 {
                        fold.flush();
                    }
                }
                fold.finish();
                // As the run ends: the window of the newest bucket.
                for lane in &mut fold.lanes {
                    lane.rollup.evict_expired();
                }
            }
            let [deferred, direct, held] = folds;
            for ((a, b), c) in deferred.lanes.iter().zip(&direct.lanes).zip(&held.lanes) {
                prop_assert_eq!(fingerprint(&a.rollup), fingerprint(&b.rollup));
                prop_assert_eq!(fingerprint(&c.rollup), fingerprint(&b.rollup));
            }
            // Summary b has no topk: it held its records per part.
            prop_assert!(held.lanes[1].can_pend && !held.lanes[0].can_pend);
        }

        /// Feeds fold exactly what the general path folds, and quantile
        /// aggregates sharing one sketch answer what sketches of their own
        /// answer (few records per group, so the sketches stay exact).
        #[test]
        fn feeds_fold_like_inputs(
            rows in proptest::collection::vec(
                (0u8..3, proptest::option::of(-5i64..5), proptest::option::of(-2.0f64..2.0), 0u8..4),
                0..120,
            )
        ) {
            let plan = Plan::compile(SQL).expect("compiles");
            let summary = &plan.summaries[0];
            let shape = shape_of(summary).expect("shape");
            let feeds = feeds_of(summary, &shape);
            prop_assert!(feeds.contains(&Feed::Skip), "the second quantile aggregate shares");
            let mut fast = Rollup::new(shape.clone(), Limits::default()).expect("rollup");
            let mut general = Rollup::new(unshared(&shape), Limits::default()).expect("rollup");
            let mut scratch = Scratch::default();
            let mut routed = Routed::default();
            let mut hashed = HashMemo::default();
            for (day, n, x, t) in rows {
                let fields = [
                    format!("2026-11-0{}T10:00:00Z", day + 1),
                    n.map(|n| n.to_string()).unwrap_or_default(),
                    x.map(|x| x.to_string()).unwrap_or_default(),
                    if t == 0 { String::new() } else { format!("t{t}") },
                ];
                let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                prop_assert!(summary.route(fields.as_slice(), &mut scratch, &mut routed).expect("routes"));
                prop_assert_eq!(
                    fold_routed(&feeds, &mut fast, &routed, &mut hashed, None),
                    fold_general(summary, &mut general, &routed)
                );
            }
            prop_assert_eq!(fast.rows(), general.rows());
        }
    }
}
