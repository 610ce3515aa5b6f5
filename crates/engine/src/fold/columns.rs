//! Batches routed from typed columns: Parquet's own, and a text batch's
//! parsed a column at a time ([`ParsedColumns`]).
//!
//! A record-at-a-time route asks each record for each value through
//! [`Record::value`]: a match on the column's storage, a NULL check, a
//! `Value` and then an [`Arg`] per field and summary, ~1,000 instructions
//! a record of W3 (bench/JOURNAL.md, "The Parquet gap taken apart"). When
//! every summary's bucket and arguments are plain columns ([`ColumnPlan`])
//! and a batch holds them as typed slices without NULLs
//! ([`ParquetBatch::column`]), each lane reads them straight from the
//! slices instead; a `text = 'literal'` filter is a byte comparison on its
//! slice, any other filter is evaluated on the record as before; the key
//! still comes from [`Summary::route_dims`] and the fold is the same
//! ([`Fold::fold_lanes`]). A row the slices cannot route as
//! [`Fold::record`] would (a time out of range, a key the evaluator
//! rejects) goes through [`Fold::record`], which rejects it the same way;
//! a batch with a NULL in a read column goes record by record.
//!
//! CSV and NDJSON batches have their typed columns parsed a batch at a
//! time into reused vectors ([`ParsedColumns::fill`]; a row with a NULL or
//! an unparsable value goes through [`Fold::record`]) when they are folded
//! from their columns ([`super::by_aggregate`]), or when some typed column
//! is read twice (W1: 7% less CPU, bench/JOURNAL.md, "CSV batches routed
//! from typed columns, landed; where W3's KLL time goes"); otherwise they
//! keep the record path.
//!
//! A Parquet text column read as a dictionary ([`TextColumn::dictionary`])
//! is worked out once per distinct value, not per row ([`Dictionaries`]):
//! its values' hashes for text arguments, and for each `text = 'literal'`
//! filter on it whether each value equals the literal. A row then reads
//! both by its key. A summary whose dimensions are all such columns keeps
//! its recent groups by (bucket, keys) ([`GroupCache`], over
//! `Rollup::last_folded`, `fold_at` and `holds`): a record it knows is
//! folded into its group without building, hashing and looking up its key
//! (together W3 from Parquet went from 3.05 to 2.28 CPU-s,
//! bench/JOURNAL.md, "Parquet dictionaries read as keys").
//!
//! When every lane of a worker holds its records back and reads its key
//! from text columns (`ColumnPlan::key`, `KeyColumn`), a Parquet batch is
//! held a lane at a time straight from its columns ([`Fold::hold_columns`]),
//! without a `Routed` per row; a row some lane cannot route goes through
//! [`Fold::record`] after the others.
//!
//! [`Record::value`]: cardinal_event::Record::value
//! [`Summary::route_dims`]: cardinal_route::Summary::route_dims
//! [`ColumnPlan`]: cardinal_route::ColumnPlan

use cardinal_event::bytes::bytes_eq;
use cardinal_event::{BucketMemo, ColumnType, DateMemo, Record, Timestamp, Value};
use cardinal_parse::{Batch, Column, Dictionary, DictionaryHandle, ParquetBatch, TextColumn};
use cardinal_rollup::{GroupAt, Rollup};
use cardinal_route::{Arg, ArgColumn, ColumnFilter, ColumnPlan, KeyColumn};

use super::{Fold, reject};
use crate::plan::AGGREGATES_MAX;
use crate::rejects::KEY_TOO_LONG;

/// One lane's filter, bucket and arguments as columns of one batch
/// ([`Fold::columns_of`], [`Fold::text_columns_of`]).
pub(crate) struct LaneColumns<'b> {
    /// The filter's column, when the lane owns a `text = 'literal'`
    /// filter (its literal is in the lane's plan).
    filter: Option<FilterSource<'b>>,
    /// The time column and the bucket width.
    bucket: Option<(Times<'b>, cardinal_route::TimeUnit)>,
    /// The dimensions' dictionaries, when the lane's [`GroupCache`] is
    /// for them ([`Fold::refresh_group_caches`]).
    dims: Option<Vec<Dictionary<'b>>>,
    args: Vec<ArgSource<'b>>,
}

/// Where a `text = 'literal'` filter's text is in a batch.
#[derive(Clone, Copy)]
enum FilterSource<'b> {
    /// Compared row by row.
    Text(Texts<'b>),
    /// A dictionary's keys, and whether each of its values equals the
    /// literal ([`Dictionaries`]).
    Dictionary(Dictionary<'b>, &'b [bool]),
}

/// Where one argument's values are in a batch.
#[derive(Clone, Copy)]
enum ArgSource<'b> {
    Int(&'b [i64]),
    Float(&'b [f64]),
    Time(Times<'b>),
    Text(Texts<'b>),
    /// A dictionary's keys, and each of its values as an argument
    /// ([`Dictionaries`]).
    Dictionary(Dictionary<'b>, &'b [Arg]),
    /// An expression, evaluated on the record.
    Evaluate,
}

/// A time column: Parquet's, converted per row, or parsed already.
#[derive(Clone, Copy)]
enum Times<'b> {
    Parquet(Column<'b>),
    /// Milliseconds since the epoch, one per row.
    Ms(&'b [i64]),
}

impl Times<'_> {
    #[inline]
    fn at(&self, i: usize) -> Result<Timestamp, ()> {
        match self {
            Times::Parquet(column) => column.time(i).map_err(drop),
            Times::Ms(ms) => Ok(Timestamp(ms[i])),
        }
    }
}

/// A text column: Parquet's views, or the record's field.
#[derive(Clone, Copy)]
enum Texts<'b> {
    Parquet(TextColumn<'b>),
    Field(usize),
}

impl<'b> Texts<'b> {
    #[inline]
    fn at<'r, R: Record + ?Sized>(&self, record: &'r R, i: usize) -> Option<&'r [u8]>
    where
        'b: 'r,
    {
        match self {
            Texts::Parquet(text) => Some(text.value(i)),
            Texts::Field(column) => record.field(*column),
        }
    }
}

/// What the lanes work out per value of a dictionary-encoded Parquet text
/// column rather than per row: each value's hash as a text argument, and
/// whether it equals a `text = 'literal'` filter's literal. A row then
/// reads both by its key. Worked out again when a batch brings another
/// dictionary (each row group has its own).
#[derive(Debug, Default)]
pub(crate) struct Dictionaries {
    memos: Vec<DictionaryMemo>,
}

/// [`Dictionaries`] of one column.
#[derive(Debug)]
struct DictionaryMemo {
    column: usize,
    /// Whether some lane reads the column as a text argument.
    hashed: bool,
    /// The literals of the filters that compare the column.
    literals: Vec<Box<[u8]>>,
    /// The dictionary the vectors below are for; `None` when the current
    /// batch holds no dictionary for the column.
    kept: Option<DictionaryHandle>,
    /// Per value, the argument [`Arg::text`] makes of it (when `hashed`).
    args: Vec<Arg>,
    /// Per literal, per value: equal.
    equal: Vec<Vec<bool>>,
}

impl Dictionaries {
    /// The columns `plans` compare with a literal or read as text
    /// arguments; `filter_owner(s)` is the lane that evaluates lane `s`'s
    /// filter.
    pub(crate) fn new(plans: &[ColumnPlan], filter_owner: impl Fn(usize) -> usize) -> Self {
        let mut this = Self::default();
        for (s, plan) in plans.iter().enumerate() {
            if let ColumnFilter::TextEq { column, literal } = &plan.filter
                && filter_owner(s) == s
            {
                let memo = this.memo(*column);
                if !memo.literals.iter().any(|l| **l == **literal) {
                    memo.literals.push(literal.clone());
                }
            }
            for arg in &plan.args {
                if let ArgColumn::Text { column } = *arg {
                    this.memo(column).hashed = true;
                }
            }
        }
        this
    }

    fn memo(&mut self, column: usize) -> &mut DictionaryMemo {
        let at = match self.memos.iter().position(|m| m.column == column) {
            Some(at) => at,
            None => {
                self.memos.push(DictionaryMemo {
                    column,
                    hashed: false,
                    literals: Vec::new(),
                    kept: None,
                    args: Vec::new(),
                    equal: Vec::new(),
                });
                self.memos.len() - 1
            }
        };
        &mut self.memos[at]
    }

    /// Brings every memo up to `batch`'s dictionaries.
    pub(crate) fn refresh(&mut self, batch: &ParquetBatch) {
        for memo in &mut self.memos {
            let dictionary = match batch.column(memo.column) {
                Some(Column::Text(text)) => text.dictionary(),
                _ => None,
            };
            let Some(dictionary) = dictionary else {
                memo.kept = None;
                continue;
            };
            if memo.kept.as_ref().is_some_and(|kept| kept.is(&dictionary)) {
                continue;
            }
            let values = (0..dictionary.len()).map(|key| dictionary.value(key));
            memo.args.clear();
            if memo.hashed {
                memo.args.extend(values.clone().map(Arg::text));
            }
            memo.equal.resize_with(memo.literals.len(), Vec::new);
            for (literal, equal) in memo.literals.iter().zip(&mut memo.equal) {
                equal.clear();
                equal.extend(values.clone().map(|value| bytes_eq(value, literal)));
            }
            memo.kept = Some(dictionary.handle());
        }
    }

    /// The memo of `column` when `text` is the dictionary it was worked
    /// out for.
    fn of<'b>(
        &'b self,
        column: usize,
        text: &TextColumn<'b>,
    ) -> Option<(Dictionary<'b>, &'b DictionaryMemo)> {
        let memo = self.memos.iter().find(|m| m.column == column)?;
        let dictionary = text.dictionary()?;
        memo.kept
            .as_ref()
            .is_some_and(|kept| kept.is(&dictionary))
            .then_some((dictionary, memo))
    }
}

/// A lane's groups by (bucket, dictionary keys), for a summary whose
/// dimensions are text columns that Parquet batches hold as dictionaries
/// ([`ColumnPlan::dims`]): equal keys into the same dictionaries are equal
/// text, so a record whose (bucket, keys) the cache knows is folded into
/// the group it names ([`Rollup::fold_at`]) without building its key,
/// hashing it and probing the table. Emptied when a batch brings other
/// dictionaries; an entry whose group has moved since is a miss
/// ([`Rollup::holds`]).
///
/// [`Rollup::fold_at`]: cardinal_rollup::Rollup::fold_at
/// [`Rollup::holds`]: cardinal_rollup::Rollup::holds
#[derive(Debug, Default)]
pub(crate) struct GroupCache {
    /// The dictionaries the keys are into, one per dimension; empty when
    /// the cache is off for the current batch.
    kept: Vec<DictionaryHandle>,
    /// Direct-mapped: (bucket, name, group), [`GROUP_CACHE_SLOTS`] of
    /// them once used.
    slots: Vec<(i64, u64, Option<GroupAt>)>,
}

/// Slots of a [`GroupCache`]: 4096 of 24 bytes, in L2, for the groups of
/// a few days of a summary by state, site or provider.
const GROUP_CACHE_SLOTS: usize = 1 << 12;

impl GroupCache {
    /// Keeps `dictionaries` (the dimensions' in this batch; `None` when
    /// some dimension has none), emptying the cache if they changed.
    fn refresh(&mut self, dictionaries: Option<Vec<Dictionary<'_>>>) {
        let Some(dictionaries) = dictionaries else {
            self.kept.clear();
            return;
        };
        let same = self.kept.len() == dictionaries.len()
            && self.kept.iter().zip(&dictionaries).all(|(k, d)| k.is(d));
        if !same {
            self.kept = dictionaries.iter().map(Dictionary::handle).collect();
            self.slots.clear();
            self.slots.resize(GROUP_CACHE_SLOTS, (0, 0, None));
        }
    }

    /// Whether the cache is for the current batch's dictionaries.
    fn on(&self) -> bool {
        !self.kept.is_empty()
    }

    #[inline]
    fn slot(bucket: i64, name: u64) -> usize {
        let mixed =
            (name ^ bucket.cast_unsigned().rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The top 12 bits: a slot of GROUP_CACHE_SLOTS.
        usize::try_from(mixed >> (64 - GROUP_CACHE_SLOTS.trailing_zeros())).unwrap_or(0)
    }

    /// The group of (bucket, name), if the cache knows it and it has not
    /// moved.
    #[inline]
    fn find(&self, bucket: i64, name: u64, rollup: &Rollup) -> Option<GroupAt> {
        match self.slots.get(Self::slot(bucket, name)) {
            Some(&(b, n, Some(at))) if b == bucket && n == name && rollup.holds(at) => Some(at),
            _ => None,
        }
    }

    /// Remembers that (bucket, name) folded into `group`.
    #[inline]
    pub(crate) fn remember(&mut self, bucket: i64, name: u64, group: GroupAt) {
        if let Some(slot) = self.slots.get_mut(Self::slot(bucket, name)) {
            *slot = (bucket, name, Some(group));
        }
    }
}

/// Row `i`'s dictionary keys as one number: mixed radix, each key's
/// radix its dictionary's length. `None` if the product of the lengths
/// overflows.
#[inline]
fn name_of(dims: &[Dictionary<'_>], i: usize) -> Option<u64> {
    let (mut name, mut radix) = (0u64, 1u64);
    for dictionary in dims {
        let key = u64::try_from(dictionary.key(i)).ok()?;
        name = name.checked_add(key.checked_mul(radix)?)?;
        radix = radix.checked_mul(u64::try_from(dictionary.len()).ok()?)?;
    }
    Some(name)
}

/// The typed columns of a text batch (CSV, NDJSON) that the summaries
/// read as typed values, parsed a column at a time. Reused from batch to
/// batch; a row with a NULL or unparsable value in one of them goes
/// through [`Fold::record`] (`bad`).
#[derive(Debug)]
pub(crate) struct ParsedColumns {
    /// The typed columns the plans read, each once, with its declared
    /// type (BIGINT, DOUBLE or TIMESTAMP).
    wanted: Vec<(usize, ColumnType)>,
    /// Per stream column, the values of the rows (those that parsed).
    ints: Vec<Vec<i64>>,
    floats: Vec<Vec<f64>>,
    /// Milliseconds since the epoch.
    times: Vec<Vec<i64>>,
    /// Per row: some value failed to parse or is NULL.
    bad: Vec<bool>,
    date: DateMemo,
}

impl ParsedColumns {
    /// Columns for a stream of `width` columns read by `plans`; `None`
    /// when a typed column they read is of a type the typed path does not
    /// carry (BOOLEAN): that stream's batches go record by record.
    pub(crate) fn new(width: usize, plans: &[ColumnPlan]) -> Option<Self> {
        let mut wanted: Vec<(usize, ColumnType)> = Vec::new();
        for plan in plans {
            if let Some(bucket) = plan.bucket {
                wanted.push((bucket.column, ColumnType::Timestamp));
            }
            for arg in &plan.args {
                if let ArgColumn::Typed { column, ty } = *arg {
                    wanted.push((column, ty));
                }
            }
        }
        // A column has one declared type, whoever reads it.
        wanted.sort_unstable_by_key(|&(column, _)| column);
        wanted.dedup_by_key(|&mut (column, _)| column);
        let carried = |&(column, ty): &(usize, ColumnType)| {
            column < width
                && matches!(
                    ty,
                    ColumnType::BigInt | ColumnType::Double | ColumnType::Timestamp
                )
        };
        wanted.iter().all(carried).then(|| Self {
            wanted,
            ints: vec![Vec::new(); width],
            floats: vec![Vec::new(); width],
            times: vec![Vec::new(); width],
            bad: Vec::new(),
            date: DateMemo::default(),
        })
    }

    /// Parses every typed column the plans read in `batch`.
    pub(crate) fn fill(&mut self, batch: &Batch) {
        self.bad.clear();
        self.bad.resize(batch.len(), false);
        let (date, bad) = (&mut self.date, &mut self.bad);
        for &(column, ty) in &self.wanted {
            match ty {
                ColumnType::BigInt => {
                    parse_column(
                        batch,
                        column,
                        bad,
                        &mut self.ints[column],
                        Value::parse_bigint,
                    );
                }
                ColumnType::Double => {
                    parse_column(
                        batch,
                        column,
                        bad,
                        &mut self.floats[column],
                        Value::parse_double,
                    );
                }
                ColumnType::Timestamp => {
                    parse_column(batch, column, bad, &mut self.times[column], |bytes| {
                        Value::parse_timestamp_memo(bytes, date).map(|t| t.map(|t| t.0))
                    });
                }
                // `new` keeps only the three types above.
                ColumnType::Bool | ColumnType::Text => unreachable!("not a carried type"),
            }
        }
    }

    /// Whether row `i` must go through [`Fold::record`].
    pub(crate) fn bad(&self, i: usize) -> bool {
        self.bad[i]
    }

    /// The values of BIGINT column `column`, one per row.
    pub(crate) fn ints(&self, column: usize) -> &[i64] {
        &self.ints[column]
    }

    /// The values of DOUBLE column `column`, one per row.
    pub(crate) fn floats(&self, column: usize) -> &[f64] {
        &self.floats[column]
    }

    /// The values of TIMESTAMP column `column` (milliseconds since the
    /// epoch), one per row.
    pub(crate) fn times(&self, column: usize) -> &[i64] {
        &self.times[column]
    }
}

/// Parses `column` of every row of `batch` into `out` (replacing what it
/// held) with `parse` (a typed [`Value`] parser: `Ok(None)` for NULL); a
/// row whose value is NULL or does not parse is marked in `bad` (and gets
/// a default in `out`, never read).
#[inline]
fn parse_column<T: Default + Clone>(
    batch: &Batch,
    column: usize,
    bad: &mut [bool],
    out: &mut Vec<T>,
    mut parse: impl FnMut(&[u8]) -> Result<Option<T>, cardinal_event::ValueError>,
) {
    // Sized first and written in place: a push per row checked the
    // capacity each time. Only the length changes: every row's value is
    // written below, so the last batch's values need no zeroing first
    // (a memset of every column per batch, 1.3% of W1's instructions).
    out.resize(bad.len(), T::default());
    if column >= batch.width() {
        // No record has the column: every value is NULL.
        bad.fill(true);
        out.fill(T::default());
        return;
    }
    let (bad, out) = (&mut bad[..], &mut out[..]);
    batch.for_each_field(column, |i, field| match field.map(&mut parse) {
        Some(Ok(Some(value))) => out[i] = value,
        _ => {
            bad[i] = true;
            out[i] = T::default();
        }
    });
}

/// The dictionaries of `plan`'s dimensions in `batch`, when every
/// dimension is a text column that `batch` holds as one.
fn dims_of<'b>(plan: &ColumnPlan, batch: &'b ParquetBatch) -> Option<Vec<Dictionary<'b>>> {
    plan.dims
        .as_ref()?
        .iter()
        .map(|&column| match batch.column(column)? {
            Column::Text(text) => text.dictionary(),
            _ => None,
        })
        .collect()
}

impl<'a> Fold<'a> {
    /// Every lane's [`ColumnPlan`] resolved to the typed columns of
    /// `batch`; `None` when some column is not a typed slice in this batch
    /// (a NULL, a type read through text): its records then go through
    /// [`Fold::record`].
    pub(crate) fn columns_of<'b>(
        &self,
        batch: &'b ParquetBatch,
        dictionaries: &'b Dictionaries,
    ) -> Option<Vec<LaneColumns<'b>>> {
        self.plans
            .iter()
            .enumerate()
            .map(|(s, plan)| {
                let filter = match &plan.filter {
                    ColumnFilter::TextEq { column, literal } if self.lanes[s].filter_owner == s => {
                        let Column::Text(text) = batch.column(*column)? else {
                            return None;
                        };
                        let memo = dictionaries.of(*column, &text).and_then(|(d, memo)| {
                            let at = memo.literals.iter().position(|l| **l == **literal)?;
                            Some(FilterSource::Dictionary(d, &memo.equal[at]))
                        });
                        Some(memo.unwrap_or(FilterSource::Text(Texts::Parquet(text))))
                    }
                    _ => None,
                };
                let bucket = match plan.bucket {
                    Some(bucket) => match batch.column(bucket.column)? {
                        column @ (Column::Time(..) | Column::Date(_)) => {
                            Some((Times::Parquet(column), bucket.unit))
                        }
                        _ => return None,
                    },
                    None => None,
                };
                let args = plan
                    .args
                    .iter()
                    .map(|arg| match *arg {
                        ArgColumn::Typed { column, ty } => match (batch.column(column)?, ty) {
                            (Column::Int(v), ColumnType::BigInt) => Some(ArgSource::Int(v)),
                            (Column::Float(v), ColumnType::Double) => Some(ArgSource::Float(v)),
                            (c @ (Column::Time(..) | Column::Date(_)), ColumnType::Timestamp) => {
                                Some(ArgSource::Time(Times::Parquet(c)))
                            }
                            _ => None,
                        },
                        ArgColumn::Text { column } => match batch.column(column)? {
                            Column::Text(text) => Some(match dictionaries.of(column, &text) {
                                Some((d, memo)) if memo.hashed => {
                                    ArgSource::Dictionary(d, &memo.args)
                                }
                                _ => ArgSource::Text(Texts::Parquet(text)),
                            }),
                            _ => None,
                        },
                        ArgColumn::Evaluate => Some(ArgSource::Evaluate),
                    })
                    .collect::<Option<Vec<_>>>()?;
                let dims = self.lanes[s]
                    .groups
                    .on()
                    .then(|| dims_of(plan, batch))
                    .flatten();
                Some(LaneColumns {
                    filter,
                    bucket,
                    dims,
                    args,
                })
            })
            .collect()
    }

    /// Routes and folds every row of `batch` (of input `input`) from its
    /// typed columns ([`Fold::columns_of`]), after bringing the
    /// [`Dictionaries`] and every lane's [`GroupCache`] up to its
    /// dictionaries, with `collector` (an attribution's) observing each
    /// row first; `false`, with nothing folded or observed, when some
    /// column is not a typed slice in this batch.
    pub(crate) fn parquet_columns(
        &mut self,
        batch: &ParquetBatch,
        input: u32,
        mut collector: Option<&mut crate::attribute::Collector<'_>>,
    ) -> bool {
        let mut dictionaries = std::mem::take(&mut self.dictionaries);
        dictionaries.refresh(batch);
        self.refresh_group_caches(batch);
        let columns = self.columns_of(batch, &dictionaries);
        let routed = columns.is_some();
        // An attribution sees each record just before it is folded, as
        // row by row: its rejects stay in row order among the folds', so
        // rows are not held a lane at a time.
        if let Some(columns) = columns
            && (collector.is_some() || !self.hold_columns(&columns, batch))
        {
            for index in 0..batch.len() {
                let record = batch.record(index);
                let at = || record.row().to_string();
                if let Some(collector) = collector.as_deref_mut()
                    && let Some((reason, text)) = crate::attribute::observe(
                        collector,
                        &record,
                        input,
                        record.row(),
                        batch.input(),
                        at,
                    )
                {
                    self.reject(&reason, &text);
                }
                self.record_columns(&columns, &record, index, batch.input(), at);
            }
        }
        self.dictionaries = dictionaries;
        routed
    }

    /// Holds back every row of `batch` a lane at a time, when every lane
    /// holds its routes back ([`crate::pending::Pending`]: a large rollup
    /// split into parts) and reads its filter, bucket, key and arguments
    /// from the batch's columns ([`ColumnPlan::key`]: every dimension a
    /// text column, cut or not); `false`, with nothing done, otherwise.
    ///
    /// The same routes as [`Fold::record_columns`] row by row, without a
    /// [`cardinal_route::Routed`] per row and lane: each lane's rows go
    /// from the columns straight into its part buffers (Query 2A from
    /// Parquet spent ~650 instructions a row routing and holding through
    /// the general path, `Pending::push` 228 of them; bench/JOURNAL.md,
    /// "Query 2A's held path slimmed: Parquet at DuckDB's speed with one
    /// worker"). A row that some lane cannot route (a time out of range)
    /// is routed after the others through [`Fold::record`], which rejects
    /// it as it would have; a key too long is folded at once
    /// to be rejected, as [`Fold::fold_lanes`] does. What the lanes hold is
    /// bounded as there, checked after each lane's rows: by one batch more.
    pub(crate) fn hold_columns(
        &mut self,
        columns: &[LaneColumns<'_>],
        batch: &ParquetBatch,
    ) -> bool {
        let rows = batch.len();
        let keys = self
            .lanes
            .iter()
            .enumerate()
            .map(|(s, lane)| -> Option<Vec<(KeyColumn, TextColumn<'_>)>> {
                let filter_ok = match self.plans[s].filter {
                    ColumnFilter::None => true,
                    ColumnFilter::TextEq { .. } => columns[lane.filter_owner].filter.is_some(),
                    ColumnFilter::Evaluate => false,
                };
                // Near its group limit a lane folds at once, as Lane::pend
                // does: row by row, then.
                let holds = lane.holds(rows)
                    && filter_ok
                    && !columns[s]
                        .args
                        .iter()
                        .any(|a| matches!(a, ArgSource::Evaluate));
                let key = self.plans[s].key.as_ref().filter(|_| holds)?;
                key.iter()
                    .map(|&key| match batch.column(key.column)? {
                        Column::Text(text) => Some((key, text)),
                        _ => None,
                    })
                    .collect()
            })
            .collect::<Option<Vec<_>>>();
        let Some(keys) = keys else {
            return false;
        };
        // Rows some lane cannot route, found before any lane holds a row:
        // every lane holds the same rows.
        let mut bad: Vec<usize> = Vec::new();
        for (s, lane_columns) in columns.iter().enumerate() {
            let times = lane_columns
                .args
                .iter()
                .filter_map(|a| match a {
                    ArgSource::Time(times @ Times::Parquet(_)) => Some(*times),
                    _ => None,
                })
                .chain(match lane_columns.bucket {
                    Some((times @ Times::Parquet(_), _)) => Some(times),
                    _ => None,
                })
                .collect::<Vec<_>>();
            if times.is_empty() {
                continue;
            }
            let filter = &columns[self.lanes[s].filter_owner].filter;
            for i in 0..rows {
                if passes(&self.plans[s].filter, filter.as_ref(), &batch.record(i), i)
                    && times.iter().any(|t| t.at(i).is_err())
                {
                    bad.push(i);
                }
            }
        }
        bad.sort_unstable();
        bad.dedup();
        let name = batch.input();
        let mut key = std::mem::take(&mut self.held_key);
        // Rows some lane rejected for a key too long: not folded records.
        let mut too_long: Vec<usize> = Vec::new();
        for (s, texts) in keys.iter().enumerate() {
            let lane = &mut self.lanes[s];
            lane.flush(&mut self.hashed);
            let lane_columns = &columns[s];
            let filter = &columns[lane.filter_owner].filter;
            let mut bad = bad.iter().copied().peekable();
            let mut args = [Arg::Null; AGGREGATES_MAX];
            let args = &mut args[..lane_columns.args.len()];
            let mut buckets = lane_columns
                .bucket
                .as_ref()
                .map(|(times, unit)| (times, BucketMemo::new(*unit)));
            for i in 0..rows {
                if bad.next_if_eq(&i).is_some()
                    || !passes(&self.plans[s].filter, filter.as_ref(), &batch.record(i), i)
                {
                    continue;
                }
                let bucket = match &mut buckets {
                    Some((times, memo)) => memo.truncate(times.at(i).expect("checked above")),
                    None => Timestamp(0),
                };
                for (arg, source) in args.iter_mut().zip(&lane_columns.args) {
                    *arg = match *source {
                        ArgSource::Int(v) => Arg::Int(v[i]),
                        ArgSource::Float(v) => Arg::Float(v[i]),
                        ArgSource::Time(times) => Arg::Time(times.at(i).expect("checked above")),
                        ArgSource::Text(Texts::Parquet(text)) => Arg::text(text.value(i)),
                        ArgSource::Dictionary(dictionary, values) => values[dictionary.key(i)],
                        ArgSource::Text(Texts::Field(_)) | ArgSource::Evaluate => {
                            unreachable!("a Parquet batch's columns, checked above")
                        }
                    };
                }
                // A key of one short text is held as words
                // (Lane::hold_words), unwritten.
                if let [(column, text)] = texts.as_slice()
                    && let Some((words, len)) = column.short_key(Some(text.value(i)))
                {
                    lane.hold_words(bucket, words, len, args);
                    continue;
                }
                key.clear();
                for (column, text) in texts {
                    column.encode(Some(text.value(i)), &mut key);
                }
                if !lane.hold(bucket, &key, args) {
                    too_long.push(i);
                    let row = batch.record(i).row();
                    reject(
                        &mut self.counts,
                        &mut self.reject_lines,
                        self.shown,
                        KEY_TOO_LONG,
                        &format!("{name}: {row}"),
                    );
                }
            }
            self.bound_pending();
        }
        self.held_key = key;
        too_long.sort_unstable();
        too_long.dedup();
        self.counts.records += (rows - bad.len() - too_long.len()) as u64;
        for i in bad {
            let record = batch.record(i);
            self.record(&record, name, || record.row().to_string());
        }
        true
    }

    /// Brings every lane's [`GroupCache`] up to `batch`'s dictionaries.
    pub(crate) fn refresh_group_caches(&mut self, batch: &ParquetBatch) {
        for (lane, plan) in self.lanes.iter_mut().zip(&self.plans) {
            lane.groups.refresh(dims_of(plan, batch));
        }
    }

    /// Every lane's [`ColumnPlan`] resolved to the columns of a text
    /// batch that `parsed` holds ([`ParsedColumns::fill`]); text is read
    /// from the records' fields.
    pub(crate) fn text_columns_of<'b>(&self, parsed: &'b ParsedColumns) -> Vec<LaneColumns<'b>> {
        self.plans
            .iter()
            .enumerate()
            .map(|(s, plan)| LaneColumns {
                dims: None,
                filter: match &plan.filter {
                    ColumnFilter::TextEq { column, .. } if self.lanes[s].filter_owner == s => {
                        Some(FilterSource::Text(Texts::Field(*column)))
                    }
                    _ => None,
                },
                bucket: plan
                    .bucket
                    .map(|bucket| (Times::Ms(&parsed.times[bucket.column]), bucket.unit)),
                args: plan
                    .args
                    .iter()
                    .map(|arg| match *arg {
                        ArgColumn::Typed { column, ty } => match ty {
                            ColumnType::BigInt => ArgSource::Int(&parsed.ints[column]),
                            ColumnType::Double => ArgSource::Float(&parsed.floats[column]),
                            ColumnType::Timestamp => {
                                ArgSource::Time(Times::Ms(&parsed.times[column]))
                            }
                            // `ParsedColumns::new` refused such plans.
                            ColumnType::Bool | ColumnType::Text => ArgSource::Evaluate,
                        },
                        ArgColumn::Text { column } => ArgSource::Text(Texts::Field(column)),
                        ArgColumn::Evaluate => ArgSource::Evaluate,
                    })
                    .collect(),
            })
            .collect()
    }

    /// [`Fold::record`] for row `i` of a batch whose columns `columns`
    /// gave: the same routes, read from typed columns instead of through
    /// [`Record::value`] per summary. A row
    /// whose time is out of range (or whose key the evaluator rejects)
    /// goes through [`Fold::record`], which rejects it as it would anyway.
    pub(crate) fn record_columns<R: Record + ?Sized>(
        &mut self,
        columns: &[LaneColumns<'_>],
        record: &R,
        i: usize,
        name: &str,
        at: impl Fn() -> String,
    ) {
        if self.route_columns(columns, record, i).is_err() {
            // Routed again by the record: nothing a lane found by its
            // dictionary keys carries over.
            for lane in &mut self.lanes {
                lane.cached = None;
                lane.to_remember = None;
            }
            self.record(record, name, at);
            return;
        }
        self.counts.records += 1;
        self.fold_lanes(name, &at);
    }

    /// Routes row `i` through every lane from typed columns; `Err` when the
    /// row must go through [`Fold::record`] instead.
    #[inline]
    fn route_columns<R: Record + ?Sized>(
        &mut self,
        columns: &[LaneColumns<'_>],
        record: &R,
        i: usize,
    ) -> Result<(), ()> {
        let plans = &self.plans;
        let prefetch_groups_min = self.prefetch_groups_min;
        for (s, lane_columns) in columns.iter().enumerate() {
            let owner = self.lanes[s].filter_owner;
            let pass = if owner == s {
                match &plans[s].filter {
                    ColumnFilter::Evaluate => self.lanes[s]
                        .summary
                        .passes(record, &mut self.scratch)
                        .map_err(drop)?,
                    filter => passes(filter, lane_columns.filter.as_ref(), record, i),
                }
            } else {
                self.lanes[owner].passed
            };
            let known = super::lane::known_bucket(&self.lanes, s);
            let lane = &mut self.lanes[s];
            lane.passed = pass;
            if !pass {
                continue;
            }
            lane.routed.bucket = match (known, &lane_columns.bucket) {
                (Some(t), Some(_)) => Some(t),
                (_, Some((times, unit))) => Some(times.at(i)?.truncate(*unit)),
                (_, None) => None,
            };
            // A lane whose dimensions are dictionary keys may know the
            // group; not while it holds routes back (a large rollup).
            lane.cached = None;
            lane.to_remember = None;
            let small = lane.rollup.parts() == 1 && lane.rollup.group_count() < prefetch_groups_min;
            if let Some(dims) = &lane_columns.dims
                && small
                && let Some(name) = name_of(dims, i)
            {
                let bucket = lane.routed.bucket.unwrap_or(Timestamp(0)).0;
                lane.cached = lane.groups.find(bucket, name, &lane.rollup);
                if lane.cached.is_none() {
                    lane.to_remember = Some((bucket, name));
                }
            }
            if lane.cached.is_none() {
                lane.summary
                    .route_dims(record, &mut self.scratch, &mut lane.routed)
                    .map_err(drop)?;
            }
            lane.routed.begin_args(lane_columns.args.len());
            for (index, source) in lane_columns.args.iter().enumerate() {
                match *source {
                    ArgSource::Int(v) => lane.routed.set_arg(index, Arg::Int(v[i])),
                    ArgSource::Float(v) => lane.routed.set_arg(index, Arg::Float(v[i])),
                    ArgSource::Time(times) => lane.routed.set_arg(index, Arg::Time(times.at(i)?)),
                    ArgSource::Text(text) => match text.at(record, i) {
                        Some(bytes) => lane.routed.set_text_arg(index, bytes),
                        None => lane.routed.set_arg(index, Arg::Null),
                    },
                    ArgSource::Dictionary(dictionary, args) => {
                        let key = dictionary.key(i);
                        lane.routed
                            .set_hashed_text_arg(index, dictionary.value(key), args[key]);
                    }
                    ArgSource::Evaluate => lane
                        .summary
                        .route_arg(index, record, &mut self.scratch, &mut lane.routed)
                        .map_err(drop)?,
                }
            }
        }
        Ok(())
    }
}

/// Whether row `i` (`record`) passes a lane's filter when it is read from
/// a column: none, or `text = 'literal'` compared on `source` (the
/// [`LaneColumns::filter`] of the lane that owns the filter; a lane
/// without one does not pass). Any other filter is evaluated on the
/// record by the caller.
#[inline(always)]
fn passes<R: Record + ?Sized>(
    filter: &ColumnFilter,
    source: Option<&FilterSource<'_>>,
    record: &R,
    i: usize,
) -> bool {
    match (filter, source) {
        (ColumnFilter::None, _) => true,
        (ColumnFilter::TextEq { .. }, Some(FilterSource::Dictionary(dictionary, equal))) => {
            equal[dictionary.key(i)]
        }
        (ColumnFilter::TextEq { literal, .. }, Some(FilterSource::Text(text))) => text
            .at(record, i)
            .is_some_and(|text| bytes_eq(text, literal)),
        (ColumnFilter::TextEq { .. }, None) => false,
        (ColumnFilter::Evaluate, _) => unreachable!("evaluated on the record"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use cardinal_parse::ParquetFile;
    use cardinal_rollup::{Limits, Shape};
    use cardinal_route::{Plan, Summary};

    use crate::plan::shape_of;
    use crate::rejects::REJECTS_SHOWN_MAX;
    use arrow_array::TimestampMillisecondArray;
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use cardinal_parse::PARQUET_BATCH_ROWS;

    /// A Parquet file of `rows` rows in row groups of `group_rows`, whose
    /// `x` is NULL in the rows `null_x` names.
    fn parquet(rows: usize, group_rows: usize, null_x: impl Fn(usize) -> bool) -> Vec<u8> {
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| 1_790_000_000_000 + i * 60_000)
            .collect();
        let id: Vec<i64> = (0..rows as i64).map(|i| i % 97).collect();
        let kind: Vec<&str> = (0..rows).map(|i| ["a", "b"][i % 2]).collect();
        let x: Vec<Option<f64>> = (0..rows)
            .map(|i| (!null_x(i)).then_some(i as f64))
            .collect();
        let batch = RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(ts)) as ArrayRef,
            ),
            ("id", Arc::new(Int64Array::from(id))),
            ("kind", Arc::new(StringArray::from(kind))),
            ("x", Arc::new(Float64Array::from(x))),
        ])
        .expect("batch");
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        write_parquet(&batch, properties)
    }

    /// `batch` as a Parquet file written with `properties`.
    fn write_parquet(
        batch: &RecordBatch,
        properties: parquet::file::properties::WriterProperties,
    ) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties))
                .expect("writer");
        writer.write(batch).expect("write");
        writer.close().expect("close");
        bytes
    }

    const SQL: &str = "
        CREATE STREAM t (ts TIMESTAMP, id BIGINT, kind TEXT, x DOUBLE)
          WITH (format = 'parquet', time = 'ts');
        CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, kind,
            count(*), sum(x), hll(id), topk(kind, 2), min(ts)
          FROM t WHERE kind = 'a' GROUP BY day, kind;
        CREATE SUMMARY b AS SELECT upper(kind) AS k, count(*), max(x) FROM t GROUP BY k;";

    /// Per batch of the file: `None` when it goes record by record, else
    /// whether summary `a`'s filter reads its column by dictionary key.
    fn typed_batches(sql: &str, bytes: Vec<u8>) -> Vec<Option<bool>> {
        let plan = Plan::compile(sql).expect("compiles");
        let summaries: Vec<&Summary> = plan.summaries.iter().collect();
        let shapes: Vec<Shape> = summaries
            .iter()
            .map(|s| shape_of(s).expect("shape"))
            .collect();
        let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
        let stream = &plan.streams[0];
        let mut fold =
            Fold::new(&summaries, &shapes, Limits::default(), &shown, stream).expect("fold");
        let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
        reads.sort_unstable();
        reads.dedup();
        let file = ParquetFile::from_bytes(bytes, "t".into(), &stream.schema, &reads)
            .expect("a Parquet file");
        let mut reader = file.read(0..file.row_groups()).expect("reader");
        let mut typed = Vec::new();
        while let Some(batch) = reader.next_batch().expect("a batch") {
            fold.dictionaries.refresh(batch);
            typed
                .push(fold.columns_of(batch, &fold.dictionaries).map(|columns| {
                    matches!(columns[0].filter, Some(FilterSource::Dictionary(..)))
                }));
        }
        typed
    }

    #[test]
    fn batches_without_nulls_route_from_typed_columns() {
        let rows = 3 * PARQUET_BATCH_ROWS;
        // Batches are cut at row group ends: the second group has a NULL.
        let typed = typed_batches(
            SQL,
            parquet(rows, PARQUET_BATCH_ROWS, |i| i == PARQUET_BATCH_ROWS + 5),
        );
        // `kind` is dictionary-encoded: its filter reads keys.
        assert_eq!(typed, [Some(true), None, Some(true)]);
        // Any other filter is evaluated on the record, the rest still
        // read from the columns.
        let other = SQL.replace("WHERE kind = 'a'", "WHERE x > 1 AND kind IN ('a', 'b')");
        let typed = typed_batches(&other, parquet(rows, PARQUET_BATCH_ROWS, |_| false));
        assert_eq!(typed, [Some(false); 3]);
        // So is an argument that is an expression.
        let other = SQL.replace("max(x)", "max(x * 2)");
        let typed = typed_batches(&other, parquet(rows, PARQUET_BATCH_ROWS, |_| false));
        assert_eq!(typed, [Some(true); 3]);
    }

    /// A file whose `ip` values repeat over `distinct` values, one of them
    /// too long for a key, whose time is out of range in two rows, with
    /// `kind` dictionary-encoded or not.
    fn held_parquet(rows: usize, distinct: usize, dictionary: bool) -> Vec<u8> {
        use arrow_array::TimestampMillisecondArray;
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| match i {
                // Rows of kind 'a', so that summary a reads their time.
                6 | 8_001 => i64::MAX,
                _ => 1_790_000_000_000 + i * 3_600_000,
            })
            .collect();
        let ip: Vec<String> = (0..rows)
            .map(|i| match i % distinct {
                3 => "9".repeat(cardinal_rollup::KEY_BYTES_MAX + 1),
                d => format!("{}.{}", d % 61, d),
            })
            .collect();
        let kind: Vec<&str> = (0..rows).map(|i| ["a", "b", "c"][i % 3]).collect();
        let x: Vec<f64> = (0..rows).map(|i| i as f64 / 8.0).collect();
        let id: Vec<i64> = (0..rows as i64).map(|i| i % 1_013).collect();
        let batch = RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(ts)) as ArrayRef,
            ),
            ("ip", Arc::new(StringArray::from(ip))),
            ("kind", Arc::new(StringArray::from(kind))),
            ("x", Arc::new(Float64Array::from(x))),
            ("id", Arc::new(Int64Array::from(id))),
        ])
        .expect("batch");
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(PARQUET_BATCH_ROWS))
            .set_dictionary_enabled(dictionary)
            .build();
        write_parquet(&batch, properties)
    }

    /// Rows held back a lane at a time from a batch's columns fold into
    /// what the record path folds them into: same groups, states and drops
    /// (with the group limit reached or not), same rejects (times out of
    /// range, a key too long for one summary only).
    #[test]
    fn batches_held_from_columns_fold_as_records_do() {
        let sql = "
            CREATE STREAM t (ts TIMESTAMP, ip TEXT, kind TEXT, x DOUBLE, id BIGINT)
              WITH (format = 'parquet', time = 'ts');
            CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, substr(ip, 1, 4) AS p,
                count(*), sum(x), hll(id), min(ts), hll(kind), max(id)
              FROM t WHERE kind = 'a' GROUP BY day, p;
            CREATE SUMMARY b AS SELECT ip, kind, count(*), max(x) FROM t GROUP BY ip, kind;";
        let plan = Plan::compile(sql).expect("compiles");
        let summaries: Vec<&Summary> = plan.summaries.iter().collect();
        let shapes: Vec<Shape> = summaries
            .iter()
            .map(|s| shape_of(s).expect("shape"))
            .collect();
        let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
        let stream = &plan.streams[0];
        let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
        reads.sort_unstable();
        reads.dedup();
        let rows = 3 * PARQUET_BATCH_ROWS + 100;
        // The last case evicts days older than a 3-day window as the
        // hourly rows move on: held rows fold before each eviction.
        for (dictionary, groups_max, retention_ms) in [
            (true, 100_000, None),
            (false, 100_000, None),
            (true, 700, None),
            (true, 100_000, Some(3 * 86_400_000)),
        ] {
            let bytes = held_parquet(rows, 3_000, dictionary);
            let file = ParquetFile::from_bytes(bytes, "t".into(), &stream.schema, &reads)
                .expect("a Parquet file");
            let limits = Limits {
                groups_max,
                retention_ms,
                future_ms: None,
            };
            let fold_with = |parts_after: usize| {
                let mut fold =
                    Fold::new(&summaries, &shapes, limits, &shown, stream).expect("fold");
                for lane in &mut fold.lanes {
                    lane.rollup = lane.rollup.clone().with_parts_after(parts_after);
                }
                fold
            };
            // Held from the columns: the rollups are in parts from the
            // first group.
            let mut held = fold_with(0);
            let mut reader = file.read(0..file.row_groups()).expect("reader");
            let (mut batches, mut held_batches) = (0, 0);
            while let Some(batch) = reader.next_batch().expect("a batch") {
                // Fold::parquet_columns, counting the batches held whole.
                let mut dictionaries = std::mem::take(&mut held.dictionaries);
                dictionaries.refresh(batch);
                held.refresh_group_caches(batch);
                let columns = held
                    .columns_of(batch, &dictionaries)
                    .expect("no NULLs: routed from columns");
                batches += 1;
                if held.hold_columns(&columns, batch) {
                    held_batches += 1;
                } else {
                    for index in 0..batch.len() {
                        let record = batch.record(index);
                        held.record_columns(&columns, &record, index, batch.input(), || {
                            record.row().to_string()
                        });
                    }
                }
                held.dictionaries = dictionaries;
                held.flush();
            }
            held.finish();
            // Record by record, folded at once.
            let mut direct = fold_with(usize::MAX);
            let mut reader = file.read(0..file.row_groups()).expect("reader");
            while let Some(batch) = reader.next_batch().expect("a batch") {
                for index in 0..batch.len() {
                    let record = batch.record(index);
                    direct.record(&record, batch.input(), || record.row().to_string());
                }
                direct.flush();
            }
            direct.finish();
            // Near the group limit, batches go row by row.
            if groups_max < 100_000 {
                assert!(held_batches < batches, "{held_batches} of {batches}");
            } else {
                assert_eq!(held_batches, batches);
            }
            for (h, d) in held.lanes.iter().zip(&direct.lanes) {
                let fingerprint = |rollup: &Rollup| {
                    let mut rows: Vec<String> =
                        rollup.rows().iter().map(|r| format!("{r:?}")).collect();
                    rows.sort();
                    rows.push(format!(
                        "{} groups, {} dropped, {} too long, {} expired",
                        rollup.group_count(),
                        rollup.dropped_group_limit(),
                        rollup.dropped_key_too_long(),
                        rollup.dropped_expired(),
                    ));
                    rows
                };
                assert_eq!(fingerprint(&h.rollup), fingerprint(&d.rollup));
            }
            assert_eq!(held.counts.records, direct.counts.records);
            assert_eq!(
                held.counts.rejects_by_reason,
                direct.counts.rejects_by_reason
            );
            let too_long = held.counts.rejects_by_reason.get("group key too long");
            assert_eq!(
                held.counts.rejects - too_long.copied().unwrap_or(0),
                2,
                "times out of range were rejected: {:?}",
                held.counts.rejects_by_reason
            );
            assert!(too_long > Some(&0), "summary b met the long key");
            if groups_max < 100_000 {
                assert!(held.lanes[1].rollup.dropped_group_limit() > 0);
            }
        }
    }
}
