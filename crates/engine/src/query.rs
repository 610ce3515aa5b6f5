//! Live answers: a summary's merged rollup (from [`crate::View`] or
//! [`crate::execute`]) narrowed to a time range, filtered on its
//! dimensions, rolled up to a subset of them, and printed as `cardinal
//! run` prints; and the overlap of two groups' audiences.
//!
//! ```text
//!  rollup of summary S: (bucket, key) -> states, one per aggregate
//!    for each group:
//!      bucket in [from, to)?                 whole buckets: a bucket is kept
//!                                            when its start is in the range
//!      key -> values (route's key_values)
//!      WHERE over the values?                compiled by the dialect's own
//!                                            compiler against a schema of
//!                                            S's dimensions; TRUE keeps it
//!      key' = the `by` values, re-encoded    route's encode_key_value
//!      bucket' = bucket, or 0 (buckets: all)
//!      answer[(bucket', key')] merge= states each aggregate's own merge:
//!                                            HLL union, KLL merge, Count-Min
//!                                            and Theta merges, exact sets,
//!                                            sums, min/max
//!  answer -> Results (the table, CSV and JSON rows `cardinal run` prints)
//! ```
//!
//! Nothing here is a second implementation: the condition is compiled by
//! [`Summary::compile_condition`] (the `CREATE SUMMARY ... WHERE`
//! compiler, so the same expressions, types, three-valued logic and error
//! positions), keys are read and written by the route crate's key
//! encoding, and states merge with [`AggState::merge`], as workers'
//! partials do. So a query's answer equals what [`crate::execute`] gives
//! for a summary that declares the same filter and grouping directly:
//! exact aggregates and HyperLogLog bytes equal, order-dependent sketches
//! (KLL) within their error bounds (the tests check this).
//!
//! A summary without a time bucket keeps every group at bucket 0, as the
//! fold path does, and refuses `from`/`to`. With [`Buckets::All`] the
//! range's buckets collapse into one row per group of `by` (bucket 0,
//! printed without a bucket column), the answer to "how many distinct
//! users in November" rather than one row per day.
//!
//! [`overlap`] selects two sets of groups the same way (a range and a
//! condition each), unions each side's HyperLogLogs of one aggregate, and
//! estimates |A ∩ B| with the sketch crate's joint maximum-likelihood
//! estimator ([`cardinal_sketch::hll::Hll::intersection`]), with its 95%
//! interval; an interval that reaches 0 is below the detection limit.
//
// ADVICE FOR HACKERS: `results_of` is what `cardinal run` prints; its
// output is pinned byte for byte by `cargo test -p cardinal --test golden`.
// A change to the columns it names changes every output of the binary.

use std::fmt::Write as _;

use cardinal_event::{ColumnType, Record, Timestamp, Value, ValueError};
use cardinal_export::{Columns, Results, Rows};
use cardinal_rollup::{AggKind, AggState, Folded, GroupAt, Limits, Rollup, answer_seed};
use cardinal_route::{Expr, OutputSource, Plan, Scratch, Summary, encode_key_value, key_values};
use cardinal_sketch::hll::Hll;
use cardinal_sketch::hll::joint::Overlap;
use cardinal_sketch::{Estimate, Sketch as _};

use crate::error::Error;

/// The longest condition a query may carry: 16 KiB, far beyond any
/// condition a person writes over a summary's few dimensions (a `NOT IN`
/// list of a few hundred names fits), and a bound on what one request
/// makes the compiler parse. Longer ones are refused with
/// [`Error::ConditionTooLong`].
pub const WHERE_BYTES_MAX: usize = 16 << 10;

/// The bucket an answer without buckets puts every group in (the fold
/// path's bucket for a summary without a time bucket).
const NO_BUCKET: Timestamp = Timestamp(0);

/// Whether an answer keeps the summary's time buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Buckets {
    /// One row per bucket and group of `by` (the default).
    #[default]
    Keep,
    /// The range's buckets merged: one row per group of `by`, no bucket
    /// column.
    All,
}

/// A live question about one summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// The summary asked about.
    pub summary: String,
    /// Keep buckets starting at or after this instant.
    pub from: Option<Timestamp>,
    /// Keep buckets starting before this instant.
    pub to: Option<Timestamp>,
    /// A condition over the summary's dimensions, in the dialect
    /// (`state = 'CA' AND site <> 'x'`); groups it is TRUE for are kept.
    pub where_: Option<String>,
    /// The dimensions to roll up to, in the order to print them; `None`:
    /// all of them, in the summary's order.
    pub by: Option<Vec<String>>,
    /// Whether to keep the buckets or merge the range's into one.
    pub buckets: Buckets,
}

/// A query's answer: its own rollup (one group per bucket and `by`
/// values) and the names of its columns.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The merged groups.
    pub rollup: Rollup,
    /// Groups of the summary the range and condition kept (before
    /// merging); after [`Answer::merge`], summed over the merged answers
    /// (a group two nodes hold counts twice).
    pub groups_matched: usize,
    columns: Columns,
    times: Vec<bool>,
}

impl Answer {
    /// The rows, ordered, as `cardinal run` prints them: through
    /// [`cardinal_export::table_head`], [`cardinal_export::write_csv`] or
    /// [`cardinal_export::write_json_lines`].
    pub fn results(&self) -> Result<Results<'_>, Error> {
        results_with(self.columns.clone(), self.times.clone(), &self.rollup)
    }

    /// An answer holding `rollup` as it is, `groups_matched` stored
    /// groups merged into it: a SQL query's partial answer
    /// ([`crate::sql::Prepared::partial`]), merged with peers' as any
    /// answer is. Its columns are empty (the query prints its own).
    pub fn of_rollup(rollup: Rollup, groups_matched: usize) -> Self {
        Self {
            rollup,
            groups_matched,
            columns: Columns {
                bucket: None,
                dims: Vec::new(),
                aggs: Vec::new(),
            },
            times: Vec::new(),
        }
    }

    /// The names of the answer's columns.
    pub fn columns(&self) -> &Columns {
        &self.columns
    }

    /// Merges another answer's rollup to the same query into this one:
    /// the states another node holds for the same selection (decoded from
    /// its image, [`Rollup::decode_image`]), which matched
    /// `groups_matched` of its groups. States merge as workers' partials
    /// do, so the merged answer is the one a single rollup holding both
    /// sides' groups would give (HyperLogLog bytes equal).
    ///
    /// # Errors
    ///
    /// [`Error::Merge`] when `other` is of another shape (another
    /// summary, or other settings) or the merged answer would pass the
    /// group limit.
    pub fn merge(&mut self, other: &Rollup, groups_matched: usize) -> Result<(), Error> {
        let before = self.rollup.group_count();
        // The groups only `other` holds are opened seeded first, as
        // `answer` opens its own; another shape, or a group past the
        // limit, the merge below reports.
        if self.rollup.shape() == other.shape() {
            for (bucket, key, _) in other.groups() {
                if locate_seeded(&mut self.rollup, bucket, key).is_err() {
                    break;
                }
            }
        }
        self.rollup.merge(other)?;
        assert!(self.rollup.group_count() >= before, "merging never drops");
        assert!(self.rollup.group_count() <= before + other.group_count());
        self.groups_matched += groups_matched;
        Ok(())
    }
}

/// The summary of `plan` called `name` (case-insensitive, as the dialect
/// resolves names) and its index.
pub fn find_summary<'p>(plan: &'p Plan, name: &str) -> Result<(usize, &'p Summary), Error> {
    plan.summaries
        .iter()
        .enumerate()
        .find(|(_, s)| s.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::UnknownSummary {
            name: name.to_owned(),
            known: names(plan.summaries.iter().map(|s| s.name.clone())),
        })
}

/// Answers `query` over `rollup`, the merged rollup of `summary`: keeps
/// the groups whose bucket starts in `[from, to)` and whose dimensions
/// pass `where_`, and merges the groups that agree on `by` (and on the
/// bucket, unless [`Buckets::All`]) with each aggregate's own merge.
///
/// # Errors
///
/// [`Error::WrongSummary`], [`Error::NoTimeBucket`], [`Error::EmptyRange`],
/// [`Error::UnknownDimension`], [`Error::DuplicateDimension`],
/// [`Error::ConditionTooLong`], [`Error::Condition`] (with the position in
/// the condition), [`Error::Evaluate`], [`Error::GroupLimit`].
pub fn answer(summary: &Summary, rollup: &Rollup, query: &Query) -> Result<Answer, Error> {
    if !query.summary.eq_ignore_ascii_case(&summary.name) {
        return Err(Error::WrongSummary {
            asked: query.summary.clone(),
            given: summary.name.clone(),
        });
    }
    let selection = Selection::compile(summary, query.from, query.to, query.where_.as_deref())?;
    let by = match &query.by {
        None => (0..summary.dimensions.len()).collect(),
        Some(by) => dimensions_of(summary, by)?,
    };
    let mut out = Rollup::new(
        rollup.shape().clone(),
        Limits {
            groups_max: rollup.limits().groups_max,
            retention_ms: None,
            future_ms: None,
        },
    )?;
    // The same key when every dimension is kept in order: copied, not
    // decoded and encoded again.
    let whole = by.iter().copied().eq(0..summary.dimensions.len());
    let mut values: Vec<Value<'_>> = Vec::with_capacity(summary.dimensions.len());
    let mut key = Vec::new();
    let mut scratch = Scratch::new();
    let mut matched = 0;
    for (bucket, group_key, states) in rollup.groups() {
        if !selection.keeps_bucket(bucket) {
            continue;
        }
        values.clear();
        values.extend(key_values(group_key));
        assert_eq!(
            values.len(),
            summary.dimensions.len(),
            "a group key holds one value per dimension"
        );
        if !selection.keeps(summary, &values, &mut scratch)? {
            continue;
        }
        matched += 1;
        key.clear();
        if whole {
            key.extend_from_slice(group_key);
        } else {
            for &d in &by {
                encode_key_value(values[d], &mut key);
            }
        }
        let bucket = match query.buckets {
            Buckets::Keep => bucket,
            Buckets::All => NO_BUCKET,
        };
        let at = locate_seeded(&mut out, bucket, &key).map_err(|dropped| {
            assert_eq!(
                dropped,
                Folded::DroppedGroupLimit,
                "no retention, no key too long"
            );
            Error::GroupLimit {
                groups_max: rollup.limits().groups_max,
            }
        })?;
        for (into, from) in out.states_at(at).iter_mut().zip(states) {
            into.merge(from)?;
        }
    }
    assert!(out.group_count() <= matched);
    let columns = Columns {
        bucket: match query.buckets {
            Buckets::Keep => bucket_column(summary),
            Buckets::All => None,
        },
        dims: by.iter().map(|&d| summary.dimension_name(d)).collect(),
        aggs: aggregate_names(summary),
    };
    Ok(Answer {
        rollup: out,
        groups_matched: matched,
        columns,
        times: times_of(summary),
    })
}

/// [`Rollup::locate`] in an answer's rollup, with the states of a group
/// it opens seeded from `(bucket, key, aggregate)` ([`answer_seed`]):
/// their sketches then flip coins of the answer's own, not of this
/// thread's stream, so the same query over the same states answers the
/// same bytes on any thread.
pub(crate) fn locate_seeded(
    out: &mut Rollup,
    bucket: Timestamp,
    key: &[u8],
) -> Result<GroupAt, Folded> {
    let groups = out.group_count();
    let at = out.locate(bucket, key)?;
    if out.group_count() > groups {
        for (aggregate, state) in out.states_at(at).iter_mut().enumerate() {
            state.reseed(answer_seed(bucket.0, key, aggregate));
        }
    }
    Ok(at)
}

/// Decodes each group's key into display values and names the columns:
/// what `cardinal run` prints for `summary`'s merged `rollup`.
pub fn results_of<'a>(summary: &Summary, rollup: &'a Rollup) -> Result<Results<'a>, Error> {
    let columns = Columns {
        bucket: bucket_column(summary),
        dims: (0..summary.dimensions.len())
            .map(|i| summary.dimension_name(i))
            .collect(),
        aggs: aggregate_names(summary),
    };
    results_with(columns, times_of(summary), rollup)
}

/// [`results_of`] over some of `rollup`'s groups only (one day's, say):
/// the rows `cardinal run` prints for those groups, so one day's rows
/// written with [`cardinal_export::write_csv`] are byte for byte that
/// day's file under `run --out`. `groups` comes from
/// [`Rollup::groups`] of `rollup` (it lends the aggregates' kinds); a
/// group given twice prints twice.
pub fn results_of_groups<'a>(
    summary: &Summary,
    rollup: &'a Rollup,
    groups: impl ExactSizeIterator<Item = (Timestamp, &'a [u8], &'a [AggState])>,
) -> Result<Results<'a>, Error> {
    assert!(
        groups.len() <= rollup.group_count(),
        "groups of this rollup"
    );
    let columns = Columns {
        bucket: bucket_column(summary),
        dims: (0..summary.dimensions.len())
            .map(|i| summary.dimension_name(i))
            .collect(),
        aggs: aggregate_names(summary),
    };
    results_of_rows(columns, times_of(summary), &rollup.shape().aggs, groups)
}

/// The rows of `rollup` under `columns`, with its keys decoded.
fn results_with(columns: Columns, times: Vec<bool>, rollup: &Rollup) -> Result<Results<'_>, Error> {
    let groups = rollup.groups();
    let rows = rows_of(&columns, rollup.group_count(), groups);
    Ok(Results::new(columns, &rollup.shape().aggs, rows)?.with_times(times))
}

/// The rows of `groups` under `columns`, with their keys decoded.
fn results_of_rows<'a>(
    columns: Columns,
    times: Vec<bool>,
    kinds: &'a [AggKind],
    groups: impl ExactSizeIterator<Item = (Timestamp, &'a [u8], &'a [AggState])>,
) -> Result<Results<'a>, Error> {
    let rows = rows_of(&columns, groups.len(), groups);
    Ok(Results::new(columns, kinds, rows)?.with_times(times))
}

/// One row per group, its key decoded into display values.
fn rows_of<'a>(
    columns: &Columns,
    capacity: usize,
    groups: impl Iterator<Item = (Timestamp, &'a [u8], &'a [AggState])>,
) -> Rows<'a> {
    let mut rows = Rows::with_capacity(capacity, columns.dims.len());
    for (bucket, key, states) in groups {
        rows.push(bucket, states);
        for value in key_values(key) {
            match value {
                Value::Null => rows.push_null(),
                Value::Text(t) => rows.push_bytes(t),
                Value::Int(i) => rows.push_with(|text| {
                    let _ = write!(text, "{i}");
                }),
                Value::Float(f) => rows.push_with(|text| {
                    let _ = write!(text, "{f}");
                }),
                Value::Bool(b) => rows.push_with(|text| {
                    let _ = write!(text, "{b}");
                }),
                Value::Time(t) => rows.push_with(|text| {
                    let _ = write!(text, "{t}");
                }),
            }
        }
    }
    rows
}

/// The bucket column's name, if the summary has a bucket.
fn bucket_column(summary: &Summary) -> Option<String> {
    summary.bucket.as_ref().map(|_| {
        summary
            .outputs
            .iter()
            .find(|o| o.source == OutputSource::Bucket)
            .map_or_else(|| "bucket".into(), |o| o.name.clone())
    })
}

/// The aggregates' output names, in aggregate order.
/// The output names of `summary`'s HyperLogLog aggregates (what
/// [`overlap`] can compare), in declaration order.
pub fn hll_aggregates(summary: &Summary, rollup: &Rollup) -> Vec<String> {
    (0..summary.aggregates.len())
        .filter(|&i| matches!(rollup.shape().aggs[i], AggKind::Hll { .. }))
        .map(|i| aggregate_name(summary, i))
        .collect()
}

fn aggregate_names(summary: &Summary) -> Vec<String> {
    (0..summary.aggregates.len())
        .map(|i| aggregate_name(summary, i))
        .collect()
}

fn aggregate_name(summary: &Summary, i: usize) -> String {
    summary
        .outputs
        .iter()
        .find(|o| o.source == OutputSource::Aggregate(i))
        .map_or_else(|| format!("agg{i}"), |o| o.name.clone())
}

fn times_of(summary: &Summary) -> Vec<bool> {
    (0..summary.aggregates.len())
        .map(|i| summary.aggregate_is_time(i))
        .collect()
}

/// `names` comma-separated, or `none`.
fn names(names: impl Iterator<Item = String>) -> String {
    let list: Vec<String> = names.collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// The indexes of the dimensions `by` names (case-insensitive).
fn dimensions_of(summary: &Summary, by: &[String]) -> Result<Vec<usize>, Error> {
    let known: Vec<String> = (0..summary.dimensions.len())
        .map(|i| summary.dimension_name(i))
        .collect();
    let mut indexes: Vec<usize> = Vec::with_capacity(by.len());
    for name in by {
        let Some(index) = known.iter().position(|k| k.eq_ignore_ascii_case(name)) else {
            return Err(Error::UnknownDimension {
                name: name.clone(),
                summary: summary.name.clone(),
                known: names(known.iter().cloned()),
            });
        };
        if indexes.contains(&index) {
            return Err(Error::DuplicateDimension { name: name.clone() });
        }
        indexes.push(index);
    }
    assert!(indexes.len() <= summary.dimensions.len());
    Ok(indexes)
}

/// Which groups a query or an overlap side keeps: a range of bucket
/// starts and a compiled condition.
struct Selection {
    from: Option<Timestamp>,
    to: Option<Timestamp>,
    condition: Option<Expr>,
}

impl Selection {
    fn compile(
        summary: &Summary,
        from: Option<Timestamp>,
        to: Option<Timestamp>,
        condition: Option<&str>,
    ) -> Result<Self, Error> {
        if summary.bucket.is_none() && (from.is_some() || to.is_some()) {
            return Err(Error::NoTimeBucket {
                summary: summary.name.clone(),
            });
        }
        if let (Some(from), Some(to)) = (from, to)
            && from >= to
        {
            return Err(Error::EmptyRange { from, to });
        }
        let condition = match condition {
            None => None,
            Some(text) if text.len() > WHERE_BYTES_MAX => {
                return Err(Error::ConditionTooLong {
                    bytes: text.len(),
                    max: WHERE_BYTES_MAX,
                });
            }
            Some(text) => Some(
                summary
                    .compile_condition(text)
                    .map_err(|source| Error::Condition { source })?,
            ),
        };
        Ok(Self {
            from,
            to,
            condition,
        })
    }

    fn keeps_bucket(&self, bucket: Timestamp) -> bool {
        self.from.is_none_or(|from| bucket >= from) && self.to.is_none_or(|to| bucket < to)
    }

    /// Whether the condition is TRUE over a group's dimension `values`
    /// (NULL and FALSE drop it, as a summary's WHERE drops a record).
    fn keeps(
        &self,
        summary: &Summary,
        values: &[Value<'_>],
        scratch: &mut Scratch,
    ) -> Result<bool, Error> {
        let Some(condition) = &self.condition else {
            return Ok(true);
        };
        let record = KeyRecord { values };
        match condition.eval(&record, scratch) {
            Ok(value) => Ok(value == Value::Bool(true)),
            Err(source) => Err(Error::Evaluate {
                summary: summary.name.clone(),
                source,
            }),
        }
    }
}

/// A group's decoded dimension values read as a record: field `i` is
/// dimension `i`, already typed (the condition's columns are typed as the
/// dimensions are, [`Summary::dimension_schema`]).
struct KeyRecord<'v, 'k> {
    values: &'v [Value<'k>],
}

impl Record for KeyRecord<'_, '_> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        match self.values.get(column)? {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    fn value(&self, column: usize, ty: ColumnType) -> Result<Value<'_>, ValueError> {
        let value = self.values.get(column).copied().unwrap_or(Value::Null);
        debug_assert!(
            matches!(
                (value, ty),
                (Value::Null, _)
                    | (Value::Text(_), ColumnType::Text)
                    | (Value::Int(_), ColumnType::BigInt)
                    | (Value::Float(_), ColumnType::Double)
                    | (Value::Bool(_), ColumnType::Bool)
                    | (Value::Time(_), ColumnType::Timestamp)
            ),
            "dimension {column} holds {value:?}, typed {ty:?}"
        );
        Ok(value)
    }
}

/// One side of an [`overlap`]: the groups whose bucket starts in
/// `[from, to)` and whose dimensions pass `where_`, their audiences
/// united.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Keep buckets starting at or after this instant.
    pub from: Option<Timestamp>,
    /// Keep buckets starting before this instant.
    pub to: Option<Timestamp>,
    /// A condition over the summary's dimensions (`state = 'CA'`).
    pub where_: Option<String>,
}

/// The estimated overlap of two groups' audiences ([`overlap`]).
#[derive(Debug, Clone)]
pub struct OverlapAnswer {
    /// The aggregate's output name.
    pub aggregate: String,
    /// Groups side A united (0: an empty audience); from answers merged
    /// over several nodes, summed over them ([`Answer::merge`]).
    pub groups_a: usize,
    /// Groups side B united.
    pub groups_b: usize,
    /// |A|, from A's sketch alone.
    pub size_a: Estimate,
    /// |B|, from B's sketch alone.
    pub size_b: Estimate,
    /// The joint maximum-likelihood fit: |A ∩ B|, |A \ B|, |B \ A|,
    /// |A ∪ B|, each with its 95% interval.
    pub overlap: Overlap,
}

impl OverlapAnswer {
    /// The answer as `cardinal hll overlap` prints it ([`overlap_text`]).
    pub fn text(&self) -> String {
        overlap_text(&self.size_a, &self.size_b, &self.overlap)
    }

    /// The answer as one JSON object: the estimates as rows carry theirs
    /// (`{"value":..,"lower":..,"upper":..,"confidence":..}`), and
    /// `below_detection_limit` for the intersection.
    pub fn json(&self) -> String {
        let e = cardinal_export::estimate_json;
        let o = &self.overlap;
        format!(
            "{{\"aggregate\":{},\"groups_a\":{},\"groups_b\":{},\"a\":{},\"b\":{},\"intersection\":{},\"below_detection_limit\":{},\"a_only\":{},\"b_only\":{},\"union\":{}}}",
            cardinal_export::json_string(self.aggregate.as_bytes()),
            self.groups_a,
            self.groups_b,
            e(&self.size_a),
            e(&self.size_b),
            e(&o.intersection),
            o.intersection.below_detection_limit(),
            e(&o.a_only),
            e(&o.b_only),
            e(&o.union),
        )
    }
}

/// Two audiences' sizes and joint fit as `cardinal hll overlap` prints
/// them: one line each, "below detection limit" when the intersection's
/// interval reaches 0, and inclusion-exclusion beside it.
pub fn overlap_text(size_a: &Estimate, size_b: &Estimate, overlap: &Overlap) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "|A|       {size_a}");
    let _ = writeln!(out, "|B|       {size_b}");
    let _ = writeln!(out, "|A ∩ B|   {}", overlap.intersection);
    let _ = writeln!(out, "|A \\ B|   {}", overlap.a_only);
    let _ = writeln!(out, "|B \\ A|   {}", overlap.b_only);
    let _ = writeln!(out, "|A ∪ B|   {}", overlap.union);
    let _ = writeln!(
        out,
        "inclusion-exclusion |A ∩ B| = {:.0} (no interval)",
        overlap.inclusion_exclusion
    );
    out
}

/// The query whose answer is one side of an [`overlap`]: the side's
/// range and condition, no dimension, the buckets merged (at most one
/// group). A node answers it over its own rollup; answers of several
/// nodes merge ([`Answer::merge`]) before [`overlap_of`] fits them.
pub fn overlap_query(summary: &Summary, side: &Selector) -> Query {
    Query {
        summary: summary.name.clone(),
        from: side.from,
        to: side.to,
        where_: side.where_.clone(),
        by: Some(Vec::new()),
        buckets: Buckets::All,
    }
}

/// Estimates how many distinct values (users) the groups `a` selects and
/// the groups `b` selects share, from aggregate `aggregate` (an
/// `hll(...)`, by output name): each side's sketches are united over its
/// groups, then [`Hll::intersection`] fits both jointly. A side that
/// selects no group is an empty audience (the overlap is then exactly 0).
///
/// # Errors
///
/// [`Error::UnknownAggregate`], [`Error::NotHll`], and a selector's errors
/// as [`answer`] gives them.
pub fn overlap(
    summary: &Summary,
    rollup: &Rollup,
    a: &Selector,
    b: &Selector,
    aggregate: &str,
) -> Result<OverlapAnswer, Error> {
    hll_index(summary, rollup.shape(), aggregate)?;
    let side_a = answer(summary, rollup, &overlap_query(summary, a))?;
    let side_b = answer(summary, rollup, &overlap_query(summary, b))?;
    overlap_of(summary, &side_a, &side_b, aggregate)
}

/// [`overlap`] from the two sides' answers to [`overlap_query`], each
/// possibly merged from several nodes' answers: the sides' HyperLogLogs
/// of `aggregate` fitted jointly.
///
/// # Errors
///
/// [`Error::UnknownAggregate`], [`Error::NotHll`]; [`Error::Sketch`] when
/// the estimator refuses the two sketches.
///
/// # Panics
///
/// If an answer holds more than one group (it is not an answer to
/// [`overlap_query`]).
pub fn overlap_of(
    summary: &Summary,
    a: &Answer,
    b: &Answer,
    aggregate: &str,
) -> Result<OverlapAnswer, Error> {
    let index = hll_index(summary, a.rollup.shape(), aggregate)?;
    let kind = &a.rollup.shape().aggs[index];
    let audience = |side: &Answer| -> Result<Hll, Error> {
        assert!(side.rollup.group_count() <= 1, "no dimension, no bucket");
        let state = match side.rollup.groups().next() {
            Some((_, _, states)) => states[index].clone(),
            None => kind.state()?,
        };
        let AggState::Hll(hll) = state else {
            panic!("an hll aggregate's state is a HyperLogLog");
        };
        Ok(hll)
    };
    let hll_a = audience(a)?;
    let hll_b = audience(b)?;
    let overlap = hll_a.intersection(&hll_b)?;
    Ok(OverlapAnswer {
        aggregate: aggregate_name(summary, index),
        groups_a: a.groups_matched,
        groups_b: b.groups_matched,
        size_a: hll_a.estimate(),
        size_b: hll_b.estimate(),
        overlap,
    })
}

/// The index of `summary`'s HyperLogLog aggregate called `aggregate`.
fn hll_index(
    summary: &Summary,
    shape: &cardinal_rollup::Shape,
    aggregate: &str,
) -> Result<usize, Error> {
    let index = (0..summary.aggregates.len())
        .find(|&i| aggregate_name(summary, i).eq_ignore_ascii_case(aggregate))
        .ok_or_else(|| Error::UnknownAggregate {
            name: aggregate.to_owned(),
            summary: summary.name.clone(),
            known: names(aggregate_names(summary).into_iter()),
        })?;
    if !matches!(shape.aggs[index], AggKind::Hll { .. }) {
        return Err(Error::NotHll {
            name: aggregate_name(summary, index),
            summary: summary.name.clone(),
        });
    }
    Ok(index)
}
