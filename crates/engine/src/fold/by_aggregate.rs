//! Text batches folded an aggregate at a time.
//!
//! Row by row, each record passes through every summary in turn: its
//! filter, bucket, key and arguments go into a [`Routed`] per summary
//! ([`Fold::record_columns`]), and [`Fold::fold_lanes`] folds each route
//! through the summary's [`Feed`]s, matching on each argument's kind and
//! the state's kind per record and aggregate. Impressions from CSV (W1)
//! spent about 1,900 of its 3,500 instructions a record there, on three
//! small summaries whose groups all sit in the caches (bench/JOURNAL.md,
//! "W1 folded an aggregate at a time").
//!
//! When every summary of a batch's stream takes its arguments from plain
//! columns (typed or text: [`ColumnPlan`]; any filter and dimensions),
//! [`Fold::fold_by_aggregate`] takes a run of rows at a time instead, and
//! a summary whose rollup is small (one part, far from splitting or
//! prefetching) folds it an aggregate at a time:
//!
//! 1. each filter once, into the rows that pass it (a `text = 'literal'`
//!    filter on the field's bytes, any other evaluated on the record for
//!    the whole batch first: one that reads only text columns once per
//!    recent value of its fields, [`FilterMemo`]), and each bucket once
//!    per row (a memo of the last one, `cardinal_event::BucketMemo`);
//!    dimensions that are not plain columns are evaluated for the whole
//!    batch too, on the rows that pass the summary's filter (a row an
//!    evaluation fails on goes through [`Fold::record`], which rejects it
//!    as row by row does), once per recent value when they all read one
//!    field ([`KeyMemo`]; both memos: bench/JOURNAL.md, "Keys memoized by
//!    their texts, exact sets in a hash set while sparse");
//! 2. per summary, each passing row's group, found or opened in arrival
//!    order ([`Rollup::locate`]), so drops, the retention window and the
//!    group limit see the records as the row path does; a summary whose
//!    key is short text fields (or none; one of up to 16 bytes, or
//!    several whose texts and lengths fit 16), or whose evaluated key
//!    encodes in 16 bytes, first asks its memory of recent (bucket, texts
//!    or key) pairs ([`Recent`], then `Rollup::locate_at`); a summary keyed
//!    by its bucket alone reuses the previous row's group;
//! 3. per aggregate, one loop over those rows and groups
//!    (`Rollup::aggregate_states`, which checks the aggregate once), its
//!    argument's column read straight from the parsed slice; an integer
//!    column's hashes are worked out once per run, whichever summaries
//!    count it, and a text column's once per recent text ([`text_hash`]).
//!
//! A summary whose rollup is large routes the run's rows one at a time
//! from the same columns and folds them as row by row does (held back per
//! part, or prefetched: [`Fold::route_run`]), so a large summary does not
//! send its small neighbours row by row, and a batch whose summaries are
//! all large is routed from its columns too. No summary can reject a row
//! that every typed column gave a value for, so the summaries need not see
//! a row together.
//!
//! A lane that holds every row of a run holds them a lane at a time
//! ([`Fold::hold_run`]). A lane keyed by one text dimension of at most 11
//! bytes (Query 2A's IP prefix) builds the key as two words
//! (`KeyColumn::short_key`), hashes them (`KeyHash::of_words`, equal to
//! `KeyHash::of` of the bytes) and holds them (`Lane::hold_words`,
//! `Pending::push_words`) without writing the key into a buffer first
//! (bench/JOURNAL.md, "Query 2A from text routed and held from its parsed
//! columns").
//!
//! Each group's states see their records in arrival order, so every
//! state, sketches included, ends up as the row path leaves it. A row that
//! a typed column could not give a value for ([`ParsedColumns::bad`]) goes
//! through [`Fold::record`] between the runs, in its place. An attribution
//! sees the batch's records before they fold
//! ([`fold_chunk`](crate::worker::fold_chunk)), and its rejects are
//! written in row order among the fold's.
//!
//! W1 went from 3.88 to 2.59 CPU-s at 20M rows on one worker
//! (bench/JOURNAL.md, "W1 folded an aggregate at a time"), and other
//! summaries gain too (a day-by-state `count(*)` over W1's file: 1.31 to
//! 0.73 user-s, "Summaries other than W1's: the batch fold for all of
//! them, and filters read as truth values").
//!
//! [`Routed`]: cardinal_route::Routed
//! [`Feed`]: super::Feed
//! [`ColumnPlan`]: cardinal_route::ColumnPlan
//! [`Rollup::locate`]: cardinal_rollup::Rollup::locate

use cardinal_event::bytes::bytes_eq;
use cardinal_event::{BucketMemo, ColumnType, Timestamp};
use cardinal_parse::{Batch, RecordRef};
use cardinal_rollup::{AggState, Folded, GroupAt, Rollup};
use cardinal_route::{Arg, ArgColumn, ColumnFilter, KeyColumn};

use super::columns::ParsedColumns;
use super::lane::LaneFold;
use super::{Fold, reject};
use crate::feed::{Feed, fold_number_arg, id_of};
use crate::plan::AGGREGATES_MAX;
use crate::rejects::{KEY_TOO_LONG, where_};

/// The attribution's rejects of a batch not written yet: (row, reason,
/// line), in row order.
type Observed = std::iter::Peekable<std::vec::IntoIter<(usize, String, String)>>;

/// What [`Fold::fold_by_aggregate`] reuses from batch to batch.
#[derive(Debug)]
pub(crate) struct ByAggregate {
    /// Per lane that owns its filter: the rows of the run that pass it.
    passing: Vec<Vec<u32>>,
    /// Per lane that owns an evaluated filter ([`ColumnFilter::Evaluate`]):
    /// whether each row of the batch passes it.
    verdicts: Vec<Vec<bool>>,
    /// Per row of the batch: an evaluated filter or dimension could not
    /// be evaluated (a field it reads is not of its type), so the row goes
    /// through [`Fold::record`], which rejects it as row by row does.
    refused: Vec<bool>,
    /// Per lane whose dimensions are not all plain columns (`plan.key`
    /// is `None`): each row's encoded key, evaluated for the whole batch
    /// ([`Summary::route_dims`]), back to back, and where each row's
    /// ends (empty for a row the lane's filter does not pass).
    ///
    /// [`Summary::route_dims`]: cardinal_route::Summary::route_dims
    keys: Vec<(Vec<u8>, Vec<u32>)>,
    /// Per lane whose dimensions are evaluated, once its first batch
    /// decided: the keys of the recent fields of the one column they read,
    /// if one ([`KeyMemo`]).
    key_memos: Vec<Option<Option<KeyMemo>>>,
    /// Per lane that owns an evaluated filter, once its first batch
    /// decided: the verdicts of the recent fields of the text columns the
    /// filter reads, if it reads only text columns ([`FilterMemo`]).
    filter_memos: Vec<Option<Option<FilterMemo>>>,
    /// Where `Summary::route_dims` writes a key (reused).
    routed: cardinal_route::Routed,
    /// Per lane that owns its bucket: each row's bucket, in milliseconds,
    /// from the run's first row.
    buckets: Vec<Vec<i64>>,
    /// The current lane's passing rows that have a group, with it.
    groups: Vec<(u32, GroupAt)>,
    /// Integer columns hashed in the current run: the column and each
    /// row's hash, from the run's first row.
    hashes: Vec<(usize, Vec<u64>)>,
    /// Per text column that a distinct count or `topk` takes, from its
    /// first batch: the hashes of its recent texts ([`text_hash`]).
    text_hashes: Vec<(usize, TextMemo<u64>)>,
    /// A row's key (reused).
    key: Vec<u8>,
    /// The (row, lane) of keys too long, rejected in row order after the
    /// run.
    too_long: Vec<(u32, usize)>,
    /// Batches folded so (for tests).
    batches: u64,
    /// Per lane, for the current batch: whether it folds an aggregate at
    /// a time ([`Fold::small`]), or routes its rows one at a time.
    small: Vec<bool>,
    /// Per lane: the groups of recent (bucket, key texts) ([`Recent`]).
    recent: Vec<Vec<Recent>>,
    /// `64 - log2` of the slots per lane: [`RECENT_SLOTS`]' (tests vary
    /// it, down to 2 slots).
    recent_shift: u32,
}

impl Default for ByAggregate {
    fn default() -> Self {
        Self {
            passing: Vec::new(),
            verdicts: Vec::new(),
            refused: Vec::new(),
            keys: Vec::new(),
            key_memos: Vec::new(),
            filter_memos: Vec::new(),
            routed: cardinal_route::Routed::default(),
            buckets: Vec::new(),
            groups: Vec::new(),
            hashes: Vec::new(),
            text_hashes: Vec::new(),
            key: Vec::new(),
            too_long: Vec::new(),
            batches: 0,
            small: Vec::new(),
            recent: Vec::new(),
            recent_shift: 64 - RECENT_SLOTS.trailing_zeros(),
        }
    }
}

/// A direct-mapped memory of values worked out from a row's short texts
/// alone: a row whose texts equal a remembered row's takes the value
/// without working it out again. The texts are a [`Recent`] of bucket 0
/// ([`Recent::of`], [`Recent::of_texts`]) whose group is unused; a slot
/// holds the last texts that fell in it and their value. A lane's
/// evaluated keys ([`KeyMemo`]), its evaluated filter's verdicts
/// ([`FilterMemo`]) and a text column's hashes ([`text_hash`]) are
/// remembered so; a value whose working out fails is not.
#[derive(Debug)]
struct TextMemo<V> {
    slots: Vec<(Recent, Option<V>)>,
    /// `64 - log2` of the slots.
    shift: u32,
}

impl<V: Copy> TextMemo<V> {
    /// An empty memory of `slots` slots, a power of two.
    fn new(slots: usize) -> Self {
        assert!(slots.is_power_of_two() && slots > 1, "{slots} slots");
        Self {
            slots: vec![(Recent::EMPTY, None); slots],
            shift: 64 - slots.trailing_zeros(),
        }
    }

    /// The slot of `texts`, and the value remembered for them there, if
    /// any (else [`put`](Self::put) it there once worked out).
    #[inline]
    fn lookup(&self, texts: &Recent) -> (usize, Option<V>) {
        let slot = texts.slot(self.shift);
        let (known, value) = &self.slots[slot];
        (slot, value.filter(|_| known.same(texts)))
    }

    /// Remembers `value` for `texts` in their `slot` (from
    /// [`lookup`](Self::lookup)).
    #[inline]
    fn put(&mut self, slot: usize, texts: Recent, value: V) {
        self.slots[slot] = (texts, Some(value));
    }
}

/// Slots of a lane's [`KeyMemo`].
const KEYS_OF_FIELDS_SLOTS: usize = 256;

/// The keys that a lane whose dimensions are evaluated from one field
/// (`lower(state)`, `coalesce(site, 'none')`) worked out for recent values
/// of that field: a row with the same field takes the same key without
/// evaluating its dimensions again (the evaluation reads nothing else).
/// Fields and keys of up to 16 bytes; a key as its two zero-padded words
/// and its length.
#[derive(Debug)]
struct KeyMemo {
    /// The one column the dimensions read ([`one_column`]).
    column: usize,
    keys: TextMemo<([u64; 2], u8)>,
}

impl KeyMemo {
    /// The memo of `summary`'s evaluated dimensions, if they read one
    /// column.
    fn of(summary: &cardinal_route::Summary) -> Option<Self> {
        one_column(&summary.dimensions).map(|column| Self {
            column,
            keys: TextMemo::new(KEYS_OF_FIELDS_SLOTS),
        })
    }
}

/// Slots of a lane's [`FilterMemo`].
const VERDICTS_OF_FIELDS_SLOTS: usize = 512;

/// Whether an evaluated filter that reads only text columns
/// (`kind = 'impression' AND state <> 'TX'`) passed recent fields: a row
/// whose fields equal one's takes its verdict without evaluating the
/// filter again (a filter reads nothing but its fields). The fields are
/// packed as [`Recent::of_texts`] packs key texts.
#[derive(Debug)]
struct FilterMemo {
    /// The text columns the filter reads ([`text_columns_of`]).
    columns: Vec<usize>,
    verdicts: TextMemo<bool>,
}

impl FilterMemo {
    /// The memo of `summary`'s filter, if it reads only text columns.
    fn of(summary: &cardinal_route::Summary) -> Option<Self> {
        let filter = summary.filter.as_ref()?;
        text_columns_of(filter, &summary.schema).map(|columns| Self {
            columns,
            verdicts: TextMemo::new(VERDICTS_OF_FIELDS_SLOTS),
        })
    }
}

/// The text columns `filter` reads, when it reads only text columns
/// (typed ones take many values, which a memory of recent fields would
/// rarely meet again).
fn text_columns_of(
    filter: &cardinal_route::Expr,
    schema: &cardinal_event::Schema,
) -> Option<Vec<usize>> {
    let mut columns = Vec::new();
    filter.columns(&mut |column| {
        if !columns.contains(&column) {
            columns.push(column);
        }
    });
    let text = columns.iter().all(|&c| {
        schema
            .columns
            .get(c)
            .is_some_and(|c| c.ty == ColumnType::Text)
    });
    (text && !columns.is_empty()).then_some(columns)
}

/// The one column that all of `dimensions` read, if they read exactly one.
fn one_column(dimensions: &[cardinal_route::Expr]) -> Option<usize> {
    let mut one = None;
    let mut others = false;
    for dimension in dimensions {
        dimension.columns(&mut |column| match one {
            None => one = Some(column),
            Some(c) if c == column => {}
            Some(_) => others = true,
        });
    }
    one.filter(|_| !others)
}

/// Slots of a text column's hashes ([`text_hash`]).
const HASHES_OF_TEXTS_SLOTS: usize = 512;

/// [`Arg::text`]'s hash of `text`, from `memo` (a column's) when a recent
/// text of the column was the same: `topk(site, 10)` over W1's file
/// hashed each row's site. Texts of up to 16 bytes are remembered.
#[inline(always)]
fn text_hash(memo: &mut TextMemo<u64>, text: &[u8]) -> u64 {
    let hash =
        |text: &[u8]| cardinal_sketch::hash::bytes(text, cardinal_sketch::hash::SEED_DEFAULT);
    let Some(probe) = Recent::of(0, Some(text)) else {
        return hash(text);
    };
    let (slot, known) = memo.lookup(&probe);
    known.unwrap_or_else(|| {
        let known = hash(text);
        memo.put(slot, probe, known);
        known
    })
}

/// Slots of a lane's [`Recent`] groups: a day of 50 states or a few
/// hundred sites' worth, in 24 KiB.
const RECENT_SLOTS: usize = 512;

/// A group a lane whose key is plain text fields (or none) found
/// recently, by its bucket and the fields' texts in the key (each field,
/// or its `substr`: [`KeyColumn::text`]): a row whose bucket and texts
/// equal one's goes to its group without its key being built, hashed and
/// looked up ([`Rollup::locate_at`]). One text of up to 16 bytes is held
/// as two zero-padded words and its length (or [`RECENT_NULL`]); several
/// as their lengths and bytes back to back, when that fits 16 bytes
/// ([`Recent::of_texts`]). The group is used only while the rollup
/// [`holds`](Rollup::holds) it.
#[derive(Debug, Clone, Copy)]
struct Recent {
    bucket: i64,
    words: [u64; 2],
    len: u32,
    at: Option<GroupAt>,
}

/// [`Recent::len`] of a NULL field (a key of one field).
const RECENT_NULL: u32 = u32::MAX;

impl Recent {
    /// An empty slot: it has no group (`at` is `None`), so no probe
    /// finds one in it, even a probe of bucket 0 and an empty text, whose
    /// words and length it shares. The memos that hold a `Recent` as
    /// their fields mark their empty slots themselves.
    const EMPTY: Recent = Recent {
        bucket: 0,
        words: [0, 0],
        len: 0,
        at: None,
    };

    /// The (bucket, field) of a row, if the field is short enough to be
    /// remembered; `at` is left `None`.
    #[inline]
    fn of(bucket: i64, field: Option<&[u8]>) -> Option<Self> {
        let (words, len) = match field {
            None => ([0, 0], RECENT_NULL),
            Some(b) => {
                #[expect(clippy::cast_possible_truncation, reason = "at most 16")]
                let len = b.len() as u32;
                (cardinal_event::bytes::short_words(b)?, len)
            }
        };
        Some(Self {
            bucket,
            words,
            len,
            at: None,
        })
    }

    /// The (bucket, texts) of a row whose key is several fields (`None`:
    /// NULL), if they fit 16 bytes as each text's length byte (`0xff`:
    /// NULL) followed by its bytes, in key order; `at` is left `None`.
    /// The lengths make the packing one-to-one for the lane's number of
    /// fields: (`ab`, `c`) and (`a`, `bc`) differ.
    #[inline]
    fn of_texts<'t>(bucket: i64, texts: impl Iterator<Item = Option<&'t [u8]>>) -> Option<Self> {
        const WIDTH: usize = 16;
        let mut packed: u128 = 0;
        let mut used = 0;
        for text in texts {
            let (head, body, len) = match text {
                None => (0xff, 0, 0),
                Some(t) => {
                    let [low, high] = cardinal_event::bytes::short_words(t)?;
                    (
                        t.len() as u128,
                        u128::from(low) | u128::from(high) << 64,
                        t.len(),
                    )
                }
            };
            if used + 1 + len > WIDTH {
                return None;
            }
            // Here `used < WIDTH` and `body` has at most `WIDTH - 1 - used`
            // bytes, so no shift overflows or drops a byte.
            packed |= (head | body << 8) << (8 * used);
            used += 1 + len;
        }
        #[expect(clippy::cast_possible_truncation, reason = "the two halves")]
        let words = [packed as u64, (packed >> 64) as u64];
        #[expect(clippy::cast_possible_truncation, reason = "at most WIDTH")]
        let len = used as u32;
        Some(Self {
            bucket,
            words,
            len,
            at: None,
        })
    }

    /// Its slot of `2^(64 - shift)`.
    #[inline]
    fn slot(&self, shift: u32) -> usize {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mixed = (self.words[0] ^ self.bucket.cast_unsigned() ^ u64::from(self.len))
            .wrapping_mul(K)
            ^ self.words[1].wrapping_mul(K.rotate_left(31));
        #[expect(clippy::cast_possible_truncation, reason = "the top bits")]
        let slot = (mixed >> shift) as usize;
        slot
    }

    /// Whether it is of the same (bucket, field) as `other`.
    #[inline]
    fn same(&self, other: &Recent) -> bool {
        self.bucket == other.bucket && self.words == other.words && self.len == other.len
    }
}

impl ByAggregate {
    /// The hashes of recent texts of text column `column` ([`text_hash`]),
    /// kept from batch to batch.
    fn text_hashes_of(&mut self, column: usize) -> &mut TextMemo<u64> {
        let at = match self.text_hashes.iter().position(|(c, _)| *c == column) {
            Some(at) => at,
            None => {
                self.text_hashes
                    .push((column, TextMemo::new(HASHES_OF_TEXTS_SLOTS)));
                self.text_hashes.len() - 1
            }
        };
        &mut self.text_hashes[at].1
    }

    /// The hashes of integer column `column` for rows `lo..` of `values`,
    /// worked out on first use in a run.
    fn hashes_of(&mut self, column: usize, values: &[i64], lo: usize) -> &[u64] {
        let at = match self.hashes.iter().position(|(c, _)| *c == column) {
            Some(at) => at,
            None => {
                let hashes = values[lo..]
                    .iter()
                    .map(|&v| cardinal_sketch::hash::user_id(u64::from_ne_bytes(v.to_ne_bytes())))
                    .collect();
                self.hashes.push((column, hashes));
                self.hashes.len() - 1
            }
        };
        &self.hashes[at].1
    }
}

impl Fold<'_> {
    /// Whether a text batch can be folded from its parsed columns
    /// ([`Fold::fold_by_aggregate`]): no summary reads an expression. A
    /// batch whose summaries are all large routes every row from the
    /// columns ([`Fold::route_run`]): Query 2A from text, one summary of
    /// 1.45M groups, took 2.41 user-s so against 2.69 by record.
    pub(crate) fn folds_by_aggregate(&self) -> bool {
        self.by_aggregate_on
            && self
                .plans
                .iter()
                .all(|plan| !plan.args.iter().any(|a| matches!(a, ArgColumn::Evaluate)))
    }

    /// Whether lane `s`'s rollup is small enough for a batch of `rows`
    /// rows to fold an aggregate at a time: one part, and none of the
    /// batch's new groups can split it or bring it to prefetching. A
    /// larger one takes its rows one at a time, held back or prefetched
    /// as row by row ([`Fold::route_run`]).
    fn small(&self, s: usize, rows: usize) -> bool {
        let rollup = &self.lanes[s].rollup;
        rollup.parts() == 1
            && rollup.group_count().saturating_add(rows) < self.prefetch_groups_min
            && rollup.opens_in_place(rows)
    }

    /// Folds text batch `batch` (from input `name`), whose typed columns
    /// `parsed` holds, an aggregate at a time; [`Fold::folds_by_aggregate`]
    /// said it can. `observed` are the attribution's rejects of the batch
    /// (row, reason, line), written in row order among the folds' own, as
    /// the row path writes them (a record's attribution reject first).
    pub(crate) fn fold_by_aggregate(
        &mut self,
        parsed: &ParsedColumns,
        batch: &Batch,
        name: &str,
        observed: Vec<(usize, String, String)>,
    ) {
        let rows = batch.len();
        debug_assert!(self.folds_by_aggregate());
        // Routes in the prefetch rings fold first: folds stay in arrival
        // order (routes held per part stay held, in order).
        for lane in &mut self.lanes {
            lane.flush(&mut self.hashed);
        }
        let mut scratch = std::mem::take(&mut self.by_aggregate);
        scratch.batches += 1;
        scratch.small.clear();
        scratch
            .small
            .extend((0..self.lanes.len()).map(|s| self.small(s, rows)));
        self.evaluate_filters(&mut scratch, batch);
        self.evaluate_keys(&mut scratch, batch);
        let mut observed = observed.into_iter().peekable();
        let mut lo = 0;
        while lo < rows {
            let hi = (lo..rows)
                .find(|&i| parsed.bad(i) || scratch.refused[i])
                .unwrap_or(rows);
            if hi > lo {
                self.fold_run(&mut scratch, parsed, batch, lo..hi, name, &mut observed);
            }
            if hi < rows {
                self.observed_through(&mut observed, hi);
                let record = batch.record(hi);
                self.record(&record, name, || where_(&record));
            }
            lo = hi + 1;
        }
        self.observed_through(&mut observed, usize::MAX);
        self.by_aggregate = scratch;
    }

    /// Evaluates each evaluated filter (one its lane owns) on every row of
    /// `batch`, into `scratch.verdicts`; a row whose evaluation fails is
    /// marked in `scratch.refused`.
    fn evaluate_filters(&mut self, scratch: &mut ByAggregate, batch: &Batch) {
        let rows = batch.len();
        scratch.refused.clear();
        scratch.refused.resize(rows, false);
        scratch.verdicts.resize_with(self.lanes.len(), Vec::new);
        for (s, plan) in self.plans.iter().enumerate() {
            if self.lanes[s].filter_owner != s || !matches!(plan.filter, ColumnFilter::Evaluate) {
                continue;
            }
            let summary = self.lanes[s].summary;
            let verdicts = &mut scratch.verdicts[s];
            verdicts.clear();
            scratch.filter_memos.resize_with(self.lanes.len(), || None);
            let mut memo = scratch.filter_memos[s]
                .get_or_insert_with(|| FilterMemo::of(summary))
                .as_mut();
            verdicts.extend((0..rows).map(|i| {
                let record = batch.record(i);
                let known = memo.as_deref().and_then(|memo| {
                    let fields =
                        Recent::of_texts(0, memo.columns.iter().map(|&c| record.field(c)))?;
                    Some((fields, memo.verdicts.lookup(&fields)))
                });
                if let Some((_, (_, Some(verdict)))) = known {
                    return verdict;
                }
                match summary.passes(&record, &mut self.scratch) {
                    Ok(pass) => {
                        if let (Some((fields, (slot, _))), Some(memo)) =
                            (known, memo.as_deref_mut())
                        {
                            memo.verdicts.put(slot, fields, pass);
                        }
                        pass
                    }
                    Err(_) => {
                        scratch.refused[i] = true;
                        false
                    }
                }
            }));
        }
    }

    /// Evaluates the dimensions of each lane whose key is not plain
    /// columns on every row of `batch` that passes its filter, into
    /// `scratch.keys`; a row whose evaluation fails is marked in
    /// `scratch.refused` (row by row, a record that fails no filter is
    /// routed, and its dimensions' error rejects it).
    fn evaluate_keys(&mut self, scratch: &mut ByAggregate, batch: &Batch) {
        let rows = batch.len();
        scratch.keys.resize_with(self.lanes.len(), Default::default);
        for (s, plan) in self.plans.iter().enumerate() {
            if plan.key.is_some() {
                continue;
            }
            let owner = self.lanes[s].filter_owner;
            let filter = &self.plans[owner].filter;
            let summary = self.lanes[s].summary;
            let (bytes, ends) = &mut scratch.keys[s];
            bytes.clear();
            ends.clear();
            scratch.key_memos.resize_with(self.lanes.len(), || None);
            let mut memo = scratch.key_memos[s]
                .get_or_insert_with(|| KeyMemo::of(summary))
                .as_mut();
            for i in 0..rows {
                let record = batch.record(i);
                let passes = match filter {
                    ColumnFilter::None => true,
                    ColumnFilter::TextEq { column, literal } => record
                        .field(*column)
                        .is_some_and(|text| bytes_eq(text, literal)),
                    ColumnFilter::Evaluate => scratch.verdicts[owner][i],
                };
                if passes {
                    let known = memo.as_deref().and_then(|memo| {
                        let field = Recent::of(0, record.field(memo.column))?;
                        Some((field, memo.keys.lookup(&field)))
                    });
                    if let Some((_, (_, Some((words, len))))) = known {
                        let words = [words[0].to_le_bytes(), words[1].to_le_bytes()];
                        bytes.extend_from_slice(&words.as_flattened()[..usize::from(len)]);
                    } else {
                        match summary.route_dims(&record, &mut self.scratch, &mut scratch.routed) {
                            Ok(()) => {
                                let key = &scratch.routed.key;
                                bytes.extend_from_slice(key);
                                if let (Some((field, (slot, _))), Some(memo)) =
                                    (known, memo.as_deref_mut())
                                    && let Some(words) = cardinal_event::bytes::short_words(key)
                                {
                                    #[expect(
                                        clippy::cast_possible_truncation,
                                        reason = "at most 16"
                                    )]
                                    let len = key.len() as u8;
                                    memo.keys.put(slot, field, (words, len));
                                }
                            }
                            Err(_) => scratch.refused[i] = true,
                        }
                    }
                }
                #[expect(clippy::cast_possible_truncation, reason = "keys of a chunk")]
                ends.push(bytes.len() as u32);
            }
        }
    }

    /// Writes the attribution's rejects of rows up to `row`.
    fn observed_through(&mut self, observed: &mut Observed, row: usize) {
        while let Some((_, reason, text)) = observed.next_if(|(r, _, _)| *r <= row) {
            self.reject(&reason, &text);
        }
    }

    /// Folds rows `run` of `batch`, none of them bad, an aggregate at a
    /// time.
    fn fold_run(
        &mut self,
        scratch: &mut ByAggregate,
        parsed: &ParsedColumns,
        batch: &Batch,
        run: std::ops::Range<usize>,
        name: &str,
        observed: &mut Observed,
    ) {
        let lo = run.start;
        self.counts.records += run.len() as u64;
        scratch.hashes.clear();
        let lanes = self.lanes.len();
        scratch.passing.resize_with(lanes, Vec::new);
        scratch.buckets.resize_with(lanes, Vec::new);
        for (s, (lane, plan)) in self.lanes.iter().zip(&self.plans).enumerate() {
            if lane.filter_owner == s {
                let passing = &mut scratch.passing[s];
                passing.clear();
                #[expect(clippy::cast_possible_truncation, reason = "rows of a chunk")]
                match &plan.filter {
                    ColumnFilter::TextEq { column, literal } => passing.extend(
                        run.clone()
                            .filter(|&i| {
                                batch
                                    .record(i)
                                    .field(*column)
                                    .is_some_and(|text| bytes_eq(text, literal))
                            })
                            .map(|i| i as u32),
                    ),
                    ColumnFilter::Evaluate => {
                        let verdicts = &scratch.verdicts[s];
                        passing.extend(run.clone().filter(|&i| verdicts[i]).map(|i| i as u32));
                    }
                    ColumnFilter::None => passing.extend(run.clone().map(|i| i as u32)),
                }
            }
            if lane.bucket_owner == s
                && let Some(bucket) = plan.bucket
            {
                let buckets = &mut scratch.buckets[s];
                buckets.clear();
                let mut memo = BucketMemo::new(bucket.unit);
                buckets.extend(
                    parsed.times(bucket.column)[run.clone()]
                        .iter()
                        .map(|&ms| memo.truncate(Timestamp(ms)).0),
                );
            }
        }
        for s in 0..lanes {
            if scratch.small[s] {
                self.locate_run(scratch, batch, s, lo);
                self.fold_aggregates(scratch, parsed, batch, s, lo);
            } else if self.lanes[s].holds(scratch.passing[self.lanes[s].filter_owner].len()) {
                self.hold_run(scratch, parsed, batch, s, lo);
            } else {
                self.route_run(scratch, parsed, batch, s, lo);
            }
        }
        if !scratch.too_long.is_empty() {
            scratch.too_long.sort_unstable();
            // A row rejected by any lane is not a folded record (counted
            // with the run's above), however many lanes rejected it.
            let mut rows_rejected = 0;
            let mut last = None;
            for &(i, _) in &scratch.too_long {
                rows_rejected += u64::from(last != Some(i));
                last = Some(i);
            }
            self.counts.records -= rows_rejected;
            for &(i, _) in &scratch.too_long {
                self.observed_through(observed, i as usize);
                let record = batch.record(i as usize);
                reject(
                    &mut self.counts,
                    &mut self.reject_lines,
                    self.shown,
                    KEY_TOO_LONG,
                    &format!("{name}: {}", where_(&record)),
                );
            }
            scratch.too_long.clear();
        }
    }

    /// Routes the rows of the run that pass lane `s`'s filter one at a
    /// time, from the parsed columns, and folds each as
    /// [`Fold::fold_lanes`] would ([`super::Lane::fold_route`]): held back
    /// per part, prefetched, or at once. The lane's rollup is large; the
    /// other lanes' rows do not wait for it.
    fn route_run(
        &mut self,
        scratch: &mut ByAggregate,
        parsed: &ParsedColumns,
        batch: &Batch,
        s: usize,
        lo: usize,
    ) {
        let prefetch_groups_min = self.prefetch_groups_min;
        // Taken out while the run folds (and put back after it), so that a
        // held row can check the bound on every lane: a move, where a
        // clone allocated per run.
        let plans = std::mem::take(&mut self.plans);
        let plan = &plans[s];
        let owner = self.lanes[s].filter_owner;
        let buckets = plan
            .bucket
            .map(|_| &scratch.buckets[self.lanes[s].bucket_owner]);
        for &i in &scratch.passing[owner] {
            let row = i as usize;
            let record = batch.record(row);
            let lane = &mut self.lanes[s];
            lane.cached = None;
            lane.to_remember = None;
            let routed = &mut lane.routed;
            routed.bucket = buckets.map(|b| Timestamp(b[row - lo]));
            write_key(
                plan.key.as_deref(),
                &scratch.keys[s],
                &record,
                row,
                &mut routed.key,
            );
            routed.begin_args(plan.args.len());
            for (index, &source) in plan.args.iter().enumerate() {
                match source {
                    ArgColumn::Text { column } => match record.field(column) {
                        Some(bytes) => routed.set_text_arg(index, bytes),
                        None => routed.set_arg(index, Arg::Null),
                    },
                    source => routed.set_arg(index, arg_at(parsed, batch, source, row)),
                }
            }
            match lane.fold_route(&mut self.hashed, prefetch_groups_min) {
                LaneFold::Held => self.bound_pending(),
                LaneFold::Folded(Folded::DroppedKeyTooLong) => scratch.too_long.push((i, s)),
                LaneFold::Deferred | LaneFold::Folded(_) => {}
            }
        }
        self.plans = plans;
    }

    /// [`Fold::route_run`] for a lane that holds back every row of the
    /// run ([`super::Lane::holds`]): each row's bucket, key and arguments
    /// go from the columns straight into its part's buffer, without a
    /// [`Routed`] per row, as [`Fold::hold_columns`] holds a Parquet
    /// batch's rows ([`super::Lane::hold`]); a row whose key is too long
    /// is rejected after the run. What the lanes hold is bounded after the
    /// run.
    ///
    /// [`Fold::hold_columns`]: super::Fold::hold_columns
    /// [`Routed`]: cardinal_route::Routed
    fn hold_run(
        &mut self,
        scratch: &mut ByAggregate,
        parsed: &ParsedColumns,
        batch: &Batch,
        s: usize,
        lo: usize,
    ) {
        let plan = &self.plans[s];
        let lane = &mut self.lanes[s];
        // Routes of the prefetch ring came first.
        lane.flush(&mut self.hashed);
        lane.cached = None;
        lane.to_remember = None;
        let buckets = plan.bucket.map(|_| &scratch.buckets[lane.bucket_owner]);
        let mut args = [Arg::Null; AGGREGATES_MAX];
        let args = &mut args[..plan.args.len()];
        let key = &mut scratch.key;
        // A key of one text dimension, held as words when its text is
        // short (Query 2A's IP prefix): no key buffer written and read
        // back to hash and hold it.
        let single = match plan.key.as_deref() {
            Some(&[column]) => Some(column),
            _ => None,
        };
        for &i in &scratch.passing[lane.filter_owner] {
            let row = i as usize;
            let record = batch.record(row);
            let bucket = buckets.map_or(Timestamp(0), |b| Timestamp(b[row - lo]));
            for (arg, &source) in args.iter_mut().zip(&plan.args) {
                *arg = arg_at(parsed, batch, source, row);
            }
            if let Some(column) = single
                && let Some((words, len)) = column.short_key(record.field(column.column))
            {
                lane.hold_words(bucket, words, len, args);
                continue;
            }
            write_key(plan.key.as_deref(), &scratch.keys[s], &record, row, key);
            if !lane.hold(bucket, key, args) {
                scratch.too_long.push((i, s));
            }
        }
        self.bound_pending();
    }

    /// Finds or opens the group of each row of the run that passes lane
    /// `s`'s filter (`scratch.groups`), in row order: by the lane's
    /// [`Recent`] groups when the row's key texts (or evaluated key) are
    /// short enough for it.
    fn locate_run(&mut self, scratch: &mut ByAggregate, batch: &Batch, s: usize, lo: usize) {
        scratch.recent.resize_with(self.lanes.len(), Vec::new);
        let lane = &mut self.lanes[s];
        let plan = &self.plans[s];
        let key_columns = plan.key.as_deref();
        let buckets = plan.bucket.map(|_| &scratch.buckets[lane.bucket_owner]);
        let recent = &mut scratch.recent[s];
        // A key of evaluated dimensions is remembered by its encoding.
        let shift = scratch.recent_shift;
        if recent.is_empty() {
            recent.resize(1 << (64 - shift), Recent::EMPTY);
        }
        scratch.groups.clear();
        // A lane keyed by its bucket alone (`top_sites` by day) meets one
        // group per bucket, and its rows come in time order: a row of the
        // previous row's bucket takes that row's group without a probe.
        let keyless = key_columns == Some(&[]);
        let mut previous: Option<(i64, GroupAt)> = None;
        for &i in &scratch.passing[lane.filter_owner] {
            let record = batch.record(i as usize);
            let bucket = buckets.map_or(Timestamp(0), |b| Timestamp(b[i as usize - lo]));
            if keyless
                && let Some((b, at)) = previous
                && b == bucket.0
                && lane.rollup.holds(at)
            {
                // Counted by the rollup if dropped (expired).
                if let Ok(at) = lane.rollup.locate_at(at, bucket) {
                    scratch.groups.push((i, at));
                }
                continue;
            }
            let probe = match key_columns {
                Some([]) => Recent::of(bucket.0, Some(&[])),
                // By the text the key takes (a `substr` of a field keys
                // many fields to one group).
                Some([column]) => Recent::of(bucket.0, column.text(record.field(column.column))),
                Some(columns) => Recent::of_texts(
                    bucket.0,
                    columns.iter().map(|c| c.text(record.field(c.column))),
                ),
                None => Recent::of(bucket.0, Some(key_at(&scratch.keys[s], i as usize))),
            };
            if let Some(probe) = &probe
                && let slot = &recent[probe.slot(shift)]
                && let Some(at) = slot.at
                && slot.same(probe)
                && lane.rollup.holds(at)
            {
                // Counted by the rollup if dropped (expired).
                if let Ok(at) = lane.rollup.locate_at(at, bucket) {
                    scratch.groups.push((i, at));
                    previous = Some((bucket.0, at));
                }
                continue;
            }
            write_key(
                key_columns,
                &scratch.keys[s],
                &record,
                i as usize,
                &mut scratch.key,
            );
            match lane.rollup.locate(bucket, &scratch.key) {
                Ok(at) => {
                    scratch.groups.push((i, at));
                    previous = Some((bucket.0, at));
                    if let Some(probe) = probe {
                        recent[probe.slot(shift)] = Recent {
                            at: Some(at),
                            ..probe
                        };
                    }
                }
                Err(Folded::DroppedKeyTooLong) => scratch.too_long.push((i, s)),
                // Counted by the rollup.
                Err(_) => {}
            }
        }
    }

    /// Folds lane `s`'s located rows (`scratch.groups`) into their groups'
    /// states, one aggregate at a time, as [`update_states`](crate::feed::update_states) folds
    /// a route.
    fn fold_aggregates(
        &mut self,
        scratch: &mut ByAggregate,
        parsed: &ParsedColumns,
        batch: &Batch,
        s: usize,
        lo: usize,
    ) {
        let lane = &mut self.lanes[s];
        let plan = &self.plans[s];
        let rollup = &mut lane.rollup;
        let groups = std::mem::take(&mut scratch.groups);
        for (j, &feed) in lane.feeds.iter().enumerate() {
            match feed {
                Feed::Skip => {}
                Feed::CountAll => each_state(rollup, &groups, j, |_, state| state.fold_count()),
                Feed::Count(a) => match plan.args[a] {
                    // A typed value of a row that is not bad is not NULL.
                    ArgColumn::Typed { .. } => {
                        each_state(rollup, &groups, j, |_, state| state.fold_count())
                    }
                    ArgColumn::Text { column } => each_state(rollup, &groups, j, |i, state| {
                        if batch.record(i).field(column).is_some() {
                            state.fold_count();
                        }
                    }),
                    ArgColumn::Evaluate => unreachable!("checked by folds_by_aggregate"),
                },
                Feed::Number(a) => match plan.args[a] {
                    ArgColumn::Typed {
                        column,
                        ty: ColumnType::Double,
                    } => {
                        let values = parsed.floats(column);
                        each_state(rollup, &groups, j, |i, state| state.fold_number(values[i]));
                    }
                    ArgColumn::Typed {
                        column,
                        ty: ColumnType::BigInt,
                    } => {
                        let values = parsed.ints(column);
                        each_state(rollup, &groups, j, |i, state| state.fold_int(values[i]));
                    }
                    source => each_state(rollup, &groups, j, |i, state| {
                        fold_number_arg(state, &arg_at(parsed, batch, source, i));
                    }),
                },
                Feed::Key(a) => match plan.args[a] {
                    ArgColumn::Typed {
                        column,
                        ty: ColumnType::BigInt,
                    } => {
                        let values = parsed.ints(column);
                        let hashes = scratch.hashes_of(column, values, lo);
                        each_state(rollup, &groups, j, |i, state| {
                            let id = u64::from_ne_bytes(values[i].to_ne_bytes());
                            state.fold_key(hashes[i - lo], Some(id));
                        });
                    }
                    ArgColumn::Text { column } => {
                        let memo = scratch.text_hashes_of(column);
                        each_state(rollup, &groups, j, |i, state| {
                            if let Some(text) = batch.record(i).field(column) {
                                state.fold_key(text_hash(memo, text), None);
                            }
                        });
                    }
                    source => each_state(rollup, &groups, j, |i, state| {
                        let arg = arg_at(parsed, batch, source, i);
                        if let Some(hash) = arg.hash() {
                            state.fold_key(hash, id_of(&arg));
                        }
                    }),
                },
                Feed::TopK(a) => match plan.args[a] {
                    ArgColumn::Text { column } => {
                        let memo = scratch.text_hashes_of(column);
                        each_state(rollup, &groups, j, |i, state| {
                            if let Some(text) = batch.record(i).field(column) {
                                state.fold_topk(text_hash(memo, text), || text.into());
                            }
                        });
                    }
                    source => each_state(rollup, &groups, j, |i, state| {
                        let arg = arg_at(parsed, batch, source, i);
                        if let Some(hash) = arg.hash() {
                            state.fold_topk(hash, || match arg {
                                Arg::Int(v) => v.to_string().into_bytes().into(),
                                _ => text_at(batch, source, i).into(),
                            });
                        }
                    }),
                },
            }
        }
        scratch.groups = groups;
    }
}

/// Row `row`'s key in a lane's keys of a batch ([`ByAggregate::keys`]).
#[inline]
fn key_at(keys: &(Vec<u8>, Vec<u32>), row: usize) -> &[u8] {
    let (bytes, ends) = keys;
    let from = if row == 0 { 0 } else { ends[row - 1] as usize };
    &bytes[from..ends[row] as usize]
}

/// Writes row `row`'s group key into `key`, replacing what it held:
/// encoded from the record's fields by `columns`, or, for a lane whose
/// dimensions are not all plain columns (`columns` is `None`), copied
/// from its keys evaluated for the batch (`evaluated`,
/// [`ByAggregate::keys`]). Always inlined: it is the inner step of the
/// routing loops, where LTO left it a call.
#[inline(always)]
fn write_key(
    columns: Option<&[KeyColumn]>,
    evaluated: &(Vec<u8>, Vec<u32>),
    record: &RecordRef<'_>,
    row: usize,
    key: &mut Vec<u8>,
) {
    key.clear();
    match columns {
        Some(columns) => {
            for column in columns {
                column.encode(record.field(column.column), key);
            }
        }
        None => key.extend_from_slice(key_at(evaluated, row)),
    }
}

/// Calls `f` with each of `groups`' rows and its group's state of
/// aggregate `j`.
#[inline(always)]
fn each_state(
    rollup: &mut Rollup,
    groups: &[(u32, GroupAt)],
    j: usize,
    mut f: impl FnMut(usize, &mut AggState),
) {
    let mut states = rollup.aggregate_states(j);
    for &(i, at) in groups {
        f(i as usize, states.at(at));
    }
}

/// Row `i`'s argument from `source`, as a route would carry it (a text
/// argument hashed). Always inlined: LTO kept it a call in
/// [`Fold::hold_run`]'s loop, 3% of Query 2A's samples.
#[inline(always)]
fn arg_at(parsed: &ParsedColumns, batch: &Batch, source: ArgColumn, i: usize) -> Arg {
    match source {
        ArgColumn::Typed { column, ty } => match ty {
            ColumnType::BigInt => Arg::Int(parsed.ints(column)[i]),
            ColumnType::Double => Arg::Float(parsed.floats(column)[i]),
            ColumnType::Timestamp => Arg::Time(Timestamp(parsed.times(column)[i])),
            // `ParsedColumns::new` refused such plans.
            ColumnType::Bool | ColumnType::Text => unreachable!("not a parsed type"),
        },
        ArgColumn::Text { column } => batch.record(i).field(column).map_or(Arg::Null, Arg::text),
        ArgColumn::Evaluate => unreachable!("checked by folds_by_aggregate"),
    }
}

/// Row `i`'s text from a text `source` (empty for any other).
fn text_at(batch: &Batch, source: ArgColumn, i: usize) -> &[u8] {
    match source {
        ArgColumn::Text { column } => batch.record(i).field(column).unwrap_or_default(),
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    use cardinal_rollup::{Limits, Shape};
    use cardinal_route::{Plan, Summary};

    use crate::parser::Parser;
    use crate::plan::shape_of;
    use crate::rejects::REJECTS_SHOWN_MAX;
    use crate::worker::fold_chunk;

    /// The stream (its format left to fill in) and four summaries: two
    /// share a filter, two a bucket, two keys may be too long; c's and
    /// d's keys are not plain columns, d's filter is evaluated, and c's
    /// dimension `C_DIM` or d's filter `D_FILTER` reads `v`, failing when
    /// it is not a number.
    const SQL: &str = "
        CREATE STREAM t (ts TIMESTAMP, ip TEXT, kind TEXT, x DOUBLE, id BIGINT, v DOUBLE, site TEXT)
          WITH (format = 'FORMAT', time = 'ts');
        CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, substr(ip, 1, 2) AS p,
            count(*), count(site), sum(x), hll(id), min(ts), hll(kind), max(id), topk(site, 2),
            approx_quantile(x, 0.5), exact_distinct(id), avg(id), theta(site), count(x),
            topk(id, 2), max(ts), approx_quantile(x, 0.9, 0.1)
          FROM t WHERE kind = 'a' GROUP BY day, p;
        CREATE SUMMARY b AS SELECT ip, kind, count(*), max(x), sum(id), hll(site)
          FROM t GROUP BY ip, kind;
        CREATE SUMMARY c AS SELECT date_trunc('hour', ts) AS h, C_DIM AS e, count(*), min(x)
          FROM t WHERE kind = 'a' GROUP BY h, e;
        CREATE SUMMARY d AS SELECT date_trunc('day', ts) AS day, upper(site) AS s, ip, count(*), hll(id)
          FROM t WHERE D_FILTER GROUP BY day, s, ip;
        CREATE SUMMARY e AS SELECT date_trunc('day', ts) AS day, ip, count(*), sum(x), max(id)
          FROM t GROUP BY day, ip;
        CREATE SUMMARY f AS SELECT date_trunc('day', ts) AS day, count(*), topk(site, 2)
          FROM t WHERE kind = 'b' GROUP BY day;";

    /// One line of `format` (CSV or NDJSON): a time (days from the first,
    /// some going back), an ip, a kind, an optional x, an id that may be
    /// absent or not a number, and a site that may be missing (site 0: too
    /// few fields in CSV, an absent field in NDJSON).
    fn line(format: &str, row: &(u8, u16, u8, Option<i16>, u8, u8)) -> String {
        let &(day, ip, kind, x, id, site) = row;
        let ts = format!("2026-11-{:02}T{:02}:00:00Z", day / 4 + 1, day % 24);
        // 997: empty; 998: empty in CSV, absent (NULL) in NDJSON.
        let ip = match ip {
            // Too long a key for summaries b and d; a's cuts it.
            999 => Some("9".repeat(cardinal_rollup::KEY_BYTES_MAX + 1)),
            998 if format == "json" => None,
            997 | 998 => Some(String::new()),
            ip => Some(format!("{ip}.{}", ip % 7)),
        };
        let x = x.map(|x| (f64::from(x) / 8.0).to_string());
        let id = match id {
            0 => None,
            1 => Some("\"zz\"".to_string()),
            n => Some((n % 50).to_string()),
        };
        let site = (site > 0).then(|| format!("s{site}"));
        // Read by summary c's dimension or d's filter, and the
        // attribution: not a number in a quarter of rows.
        let v = if (usize::from(day) + usize::from(kind) + ip.as_ref().map_or(0, String::len)) % 4
            == 0
        {
            "\"q\""
        } else {
            "1.5"
        };
        if format == "json" {
            let kind = ["a", "b", "a,q"][usize::from(kind)];
            let mut line = format!("{{\"ts\": \"{ts}\", \"kind\": \"{kind}\"");
            if let Some(ip) = ip {
                line += &format!(", \"ip\": \"{ip}\"");
            }
            if let Some(x) = x {
                line += &format!(", \"x\": {x}");
            }
            if let Some(id) = id {
                line += &format!(", \"id\": {id}");
            }
            line += &format!(", \"v\": {v}");
            if let Some(site) = site {
                line += &format!(", \"site\": \"{site}\"");
            }
            line + "}\n"
        } else {
            let kind = ["a", "b", "\"a,q\""][usize::from(kind)];
            let (x, id) = (
                x.unwrap_or_default(),
                id.unwrap_or_default().replace('"', ""),
            );
            let site = site.map(|s| format!(",{s}")).unwrap_or_default();
            let v = v.replace('"', "");
            format!(
                "{ts},{},{kind},{x},{id},{v}{site}\n",
                ip.unwrap_or_default()
            )
        }
    }

    /// Folds `text` through `fold_chunk` in chunks of `lines` lines; the
    /// reject lines it wrote.
    fn fold_text<'p>(
        fold: &mut Fold<'_>,
        stream: &cardinal_route::Stream,
        collector: &mut Option<crate::attribute::Collector<'p>>,
        text: &str,
        lines: usize,
    ) -> String {
        // Tests run side by side in one process: a file per call.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "cardinal-by-aggregate-{}-{}.rejects",
            std::process::id(),
            CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let file = std::fs::File::create(&path).expect("a rejects file");
        let rejects = std::sync::Mutex::new(std::io::BufWriter::new(file));
        let mut parser = Parser::new(stream, None).expect("parser");
        let progress = crate::progress::Progress::default();
        let mut tap = progress.tap();
        let input: Arc<str> = "t.csv".into();
        let mut batch = cardinal_parse::Batch::new();
        // Chunks of `lines` lines, or fewer when they would pass 1 MiB.
        let mut chunks: Vec<(usize, String)> = Vec::new();
        for (n, line) in text.split_inclusive('\n').enumerate() {
            match chunks.last_mut() {
                Some((first, chunk))
                    if n - *first < lines && chunk.len() + line.len() <= 1 << 20 =>
                {
                    chunk.push_str(line);
                }
                _ => chunks.push((n, line.to_string())),
            }
        }
        let mut offset = 0;
        for (first, chunk) in chunks {
            batch
                .chunk_mut()
                .set(&input, Some(first as u64 + 1), offset, chunk.as_bytes());
            offset += chunk.len() as u64;
            // A run stops at the group limit after the batch that reached
            // it; both paths fold that batch whole, and the tests go on
            // to compare what the rollups dropped.
            if let Err(e) = fold_chunk(
                &mut parser,
                0,
                &mut batch,
                fold,
                collector,
                Some(&rejects),
                &mut tap,
            ) {
                assert!(e.to_string().contains("(--groups-max)"), "{e}");
            }
            // The lanes' held records stay within their bound, give or
            // take the last record (short keys here).
            let held: usize = fold.lanes.iter().map(|lane| lane.pending.bytes()).sum();
            assert!(held < fold.pending_bytes_max + 1024, "{held} bytes held");
        }
        fold.finish();
        drop(rejects);
        let lines = std::fs::read_to_string(&path).expect("the rejects");
        std::fs::remove_file(&path).expect("removed");
        lines
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Batches folded an aggregate at a time fold into what row by row
        /// folds them into: same groups, states (sketches included: each
        /// group's states see their records in order) and drops, with the
        /// group limit and the retention window hit or not; same rejects
        /// in the same order (unparsable ids, a key too long for one
        /// summary), and rows with a NULL in their place between runs.
        #[test]
        fn batches_by_aggregate_fold_as_rows_do(
            rows in proptest::collection::vec(
                (0u8..40, prop_oneof![50 => 0u16..90, 1 => Just(999u16), 10 => 997u16..999], 0u8..3,
                 proptest::option::weighted(0.95, -99i16..99), 0u8..60, 0u8..9),
                0..700,
            ),
            // Each row repeated, so that rows of a group follow each other
            // as a day of one site's or provider's events do.
            repeats in proptest::collection::vec(prop_oneof![3 => Just(1usize), 1 => 2usize..5], 700),
            lines in 1usize..300,
            groups_max in prop_oneof![Just(1_000_000u64), 20u64..400],
            retention_ms in prop_oneof![Just(None), Just(Some(86_400_000i64 * 3))],
            format in prop_oneof![Just("csv"), Just("json")],
            attribution in any::<bool>(),
            v_in_filter in any::<bool>(),
            text_filter in any::<bool>(),
            recent_shift in prop_oneof![Just(63u32), Just(60), Just(64 - RECENT_SLOTS.trailing_zeros())],
            large in prop_oneof![
                2 => Just(None),
                1 => (20usize..300, 0usize..400, 1usize..5000).prop_map(Some),
            ],
        ) {
            // Summary d's filter or c's dimension reads v (each alone, so
            // that neither's errors hide the other's).
            // Or, when v is in neither, d's filter may read only text
            // columns (remembered by their fields; site may be NULL).
            let (c_dim, d_filter) = match (v_in_filter, text_filter) {
                (true, _) => ("lower(site)", "v > 1 OR kind IN ('b')"),
                (false, false) => ("v > 1", "kind IN ('b') OR x > 1"),
                (false, true) => ("v > 1", "kind IN ('b') OR site <> 's3' AND ip <> '5.5'"),
            };
            let mut sql = SQL
                .replace("FORMAT", format)
                .replace("C_DIM", c_dim)
                .replace("D_FILTER", d_filter);
            if attribution {
                // Its records are every record: a bad id is its reject
                // too, and so is a bad v (summary c's or d's as well).
                sql += "CREATE ATTRIBUTION credit ON t BY id MODEL linear LOOKBACK 30 DAYS
                    TOUCH WHERE kind = 'b' CONVERSION WHERE kind = 'a' VALUE v CAMPAIGN site SITE ip;";
            }
            let plan = Plan::compile(&sql).expect("compiles");
            let summaries: Vec<&Summary> = plan.summaries.iter().collect();
            let shapes: Vec<Shape> = summaries.iter().map(|s| shape_of(s).expect("shape")).collect();
            let limits = Limits { groups_max, retention_ms, future_ms: None };
            let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
            let stream = &plan.streams[0];
            let rows: Vec<_> = rows
                .iter()
                .zip(&repeats)
                .flat_map(|(row, &n)| std::iter::repeat_n(*row, n))
                .collect();
            let text: String = rows.iter().map(|row| line(format, row)).collect();
            let [mut by_aggregate, mut by_row] = [true, false].map(|on| {
                let mut fold = Fold::new(&summaries, &shapes, limits, &shown, stream).expect("fold");
                fold.by_aggregate_on = on;
                fold.by_aggregate.recent_shift = recent_shift;
                // Rollups that grow large as the rows come: prefetched past
                // `min` groups, split into parts (held back per part, but
                // a's topk) past `parts_after`, the held bytes bounded.
                if let Some((min, parts_after, pending_bytes_max)) = large {
                    fold.prefetch_groups_min = min;
                    fold.pending_bytes_max = pending_bytes_max;
                    for lane in &mut fold.lanes {
                        lane.rollup = lane.rollup.clone().with_parts_after(parts_after);
                    }
                }
                fold
            });
            let collector = || {
                crate::attribute::Setup::new(&plan, 0, 1, None)
                    .expect("attribution setup")
                    .map(|setup| setup.collector())
            };
            let rejects = fold_text(&mut by_aggregate, stream, &mut collector(), &text, lines);
            prop_assert_eq!(
                rejects,
                fold_text(&mut by_row, stream, &mut collector(), &text, lines)
            );
            prop_assert!(by_aggregate.parsed.is_some(), "plain typed columns: parsed");
            prop_assert_eq!(by_row.by_aggregate.batches, 0);
            if groups_max > 100_000 && !rows.is_empty() && large.is_none() {
                prop_assert!(by_aggregate.by_aggregate.batches > 0);
            }
            for (a, r) in by_aggregate.lanes.iter().zip(&by_row.lanes) {
                let fingerprint = |rollup: &Rollup| {
                    let mut rows: Vec<String> =
                        rollup.rows().iter().map(|r| format!("{r:?}")).collect();
                    rows.push(format!(
                        "{} groups, {} dropped, {} too long, {} expired",
                        rollup.group_count(),
                        rollup.dropped_group_limit(),
                        rollup.dropped_key_too_long(),
                        rollup.dropped_expired(),
                    ));
                    rows
                };
                prop_assert_eq!(fingerprint(&a.rollup), fingerprint(&r.rollup));
                // The states themselves (an exact set's ids, say, which
                // its count does not show), found again on copies.
                let states = |rollup: &Rollup| {
                    let mut copy = rollup.clone();
                    rollup
                        .rows()
                        .iter()
                        .map(|row| match copy.locate(row.bucket, row.key) {
                            Ok(at) => format!("{:?}", copy.states_at(at)),
                            Err(dropped) => format!("{dropped:?}"),
                        })
                        .collect::<Vec<_>>()
                };
                prop_assert_eq!(states(&a.rollup), states(&r.rollup));
            }
            prop_assert_eq!(by_aggregate.counts.records, by_row.counts.records);
            prop_assert_eq!(&by_aggregate.counts.rejects_by_reason, &by_row.counts.rejects_by_reason);
        }
    }

    /// A summary that reads each typed column once (no column cache) and
    /// keeps a small rollup folds an aggregate at a time too: it is where
    /// a day-by-state `count(*)` gains most (1.31 to 0.73 user-s over W1's
    /// file), and it folds what row by row folds.
    #[test]
    fn columns_read_once_fold_by_aggregate() {
        let sql = "CREATE STREAM t (ts TIMESTAMP, ip TEXT, kind TEXT, x DOUBLE, id BIGINT, v DOUBLE, site TEXT)
              WITH (format = 'csv', time = 'ts');
            CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, ip, count(*), sum(x), hll(id)
              FROM t WHERE kind = 'a' GROUP BY day, ip;";
        let plan = Plan::compile(sql).expect("compiles");
        let summaries: Vec<&Summary> = plan.summaries.iter().collect();
        let shapes: Vec<Shape> = summaries
            .iter()
            .map(|s| shape_of(s).expect("shape"))
            .collect();
        let limits = Limits {
            groups_max: 1_000_000,
            retention_ms: None,
            future_ms: None,
        };
        let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
        let stream = &plan.streams[0];
        let text: String = (0..2_000u16)
            .map(|n| {
                let row = (
                    (n % 40) as u8,
                    n % 90,
                    (n % 3) as u8,
                    (n % 11 != 0).then_some((n % 199) as i16 - 99),
                    (n % 60) as u8,
                    (n % 9) as u8,
                );
                line("csv", &row)
            })
            .collect();
        let [mut by_aggregate, mut by_row] = [true, false].map(|on| {
            let mut fold = Fold::new(&summaries, &shapes, limits, &shown, stream).expect("fold");
            fold.by_aggregate_on = on;
            fold
        });
        assert!(
            by_aggregate.cache.is_none(),
            "no typed column is read twice"
        );
        let rejects = fold_text(&mut by_aggregate, stream, &mut None, &text, 300);
        assert_eq!(
            rejects,
            fold_text(&mut by_row, stream, &mut None, &text, 300)
        );
        assert!(by_aggregate.by_aggregate.batches > 0);
        assert_eq!(by_row.by_aggregate.batches, 0);
        let rows = |fold: &Fold<'_>| {
            let rollup = &fold.lanes[0].rollup;
            let mut copy = rollup.clone();
            rollup
                .rows()
                .iter()
                .map(|row| {
                    let at = copy.locate(row.bucket, row.key).expect("held");
                    format!("{row:?} {:?}", copy.states_at(at))
                })
                .collect::<Vec<_>>()
        };
        assert!(
            rows(&by_aggregate).len() > 20,
            "{}",
            rows(&by_aggregate).len()
        );
        assert_eq!(rows(&by_aggregate), rows(&by_row));
    }

    #[test]
    fn text_hashes_are_the_texts_hashes() {
        // More texts than slots, so that texts share slots; and texts
        // that differ only in length or past 16 bytes.
        let mut texts: Vec<Vec<u8>> = (0..2_000)
            .map(|n| format!("site{n}").into_bytes())
            .collect();
        texts.extend([
            b"".to_vec(),
            b"\0".to_vec(),
            b"\0\0".to_vec(),
            b"sixteen bytes..!".to_vec(),
            b"seventeen bytes..".to_vec(),
            b"seventeen bytes.!".to_vec(),
        ]);
        let mut memo = TextMemo::new(HASHES_OF_TEXTS_SLOTS);
        for round in 0..3 {
            for text in texts.iter().rev().skip(round) {
                assert_eq!(
                    text_hash(&mut memo, text),
                    cardinal_sketch::hash::bytes(text, cardinal_sketch::hash::SEED_DEFAULT),
                    "{:?}",
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    /// Several fields are remembered by their texts packed with their
    /// lengths: texts that split one string differently, a NULL and an
    /// empty text, and another bucket are other probes; 16 bytes with the
    /// lengths fit, 17 do not.
    #[test]
    fn recent_texts_keep_fields_apart() {
        let probe = |bucket: i64, texts: &[Option<&str>]| {
            Recent::of_texts(bucket, texts.iter().map(|t| t.map(str::as_bytes)))
        };
        let ab_c = probe(0, &[Some("ab"), Some("c")]).expect("fits");
        assert!(ab_c.same(&probe(0, &[Some("ab"), Some("c")]).expect("fits")));
        let distinct = [
            probe(0, &[Some("a"), Some("bc")]),
            probe(0, &[Some("abc"), Some("")]),
            probe(1, &[Some("ab"), Some("c")]),
            probe(0, &[Some("ab"), Some("d")]),
            probe(0, &[None, Some("c")]),
            probe(0, &[Some(""), Some("c")]),
        ];
        let distinct: Vec<Recent> = distinct.into_iter().map(|r| r.expect("fits")).collect();
        for (i, a) in std::iter::once(&ab_c).chain(&distinct).enumerate() {
            for (j, b) in std::iter::once(&ab_c).chain(&distinct).enumerate() {
                assert_eq!(a.same(b), i == j, "{a:?} {b:?}");
            }
        }
        // 2 + 14 bytes fit, 1 + 15 (the head's and the text's) with
        // another field's head do not.
        assert!(probe(0, &[Some("a"), Some("bcdefghijklmn")]).is_some());
        assert!(probe(0, &[Some("a"), Some("bcdefghijklmno")]).is_none());
        assert!(probe(0, &[Some("abcdefghijklmnop"), None]).is_none());
        assert!(probe(0, &[Some("abcdefghijklmnopq")]).is_none());
    }

    /// A lane remembers evaluated keys by a field only when every
    /// dimension reads that one column (or none).
    #[test]
    fn one_column_is_the_only_column_the_dimensions_read() {
        let columns = |dims: &str| {
            let sql = format!(
                "CREATE STREAM t (ts TIMESTAMP, state TEXT, site TEXT) WITH (format = 'csv', time = 'ts');
                 CREATE SUMMARY s AS SELECT {dims}, count(*) FROM t GROUP BY {dims};"
            );
            let plan = Plan::compile(&sql).expect("compiles");
            one_column(&plan.summaries[0].dimensions)
        };
        assert_eq!(columns("lower(state)"), Some(1));
        assert_eq!(columns("lower(state), substr(state, 1, 1)"), Some(1));
        assert_eq!(columns("coalesce(site, 'none'), 'x'"), Some(2));
        assert_eq!(columns("lower(state), site"), None);
        assert_eq!(columns("coalesce(state, site)"), None);
    }
}
