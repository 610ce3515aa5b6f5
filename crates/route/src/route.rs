//! One record through one summary: filter, bucket, group key, arguments.
//!
//! The group key is the dimension values encoded back to back in a reused
//! byte buffer, so that the rollup can hash and intern it as one slice:
//!
//! ```text
//!   | tag u8 | payload | tag u8 | payload | ...      one entry per dimension
//!
//!   tag 0 NULL       no payload
//!   tag 1 BOOLEAN    1 byte, 0 or 1
//!   tag 2 BIGINT     8 bytes, little-endian i64
//!   tag 3 DOUBLE     8 bytes, little-endian IEEE 754 bits
//!   tag 4 TEXT       u32 little-endian length, then the bytes
//!   tag 5 TIMESTAMP  8 bytes, little-endian ms since the epoch
//! ```
//!
//! `'CA'` then `42` encodes as `04 02000000 43 41 02 2a00000000000000`.
//! [`key_values`] reads it back.

use cardinal_event::bytes::{bytes_eq, tail_word};
use cardinal_event::{Record, Timestamp, Value};
use cardinal_sketch::hash;

use cardinal_event::ColumnType;

use crate::Summary;
use crate::error::EvalError;
use crate::expr::Scratch;
use crate::expr::{CompareOp, Expr, Literal};

const TAG_NULL: u8 = 0;
const TAG_BOOL: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_FLOAT: u8 = 3;
const TAG_TEXT: u8 = 4;
const TAG_TIME: u8 = 5;

/// An aggregate argument's value for one record. Text is kept only as its
/// hash: every aggregate over text counts distinct values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// NULL: aggregates skip it.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A timestamp.
    Time(Timestamp),
    /// Text, hashed once with [`hash::bytes`] (seed 0, postgresql-hll's
    /// `hll_hash_text`).
    Text {
        /// The 64-bit hash.
        hash: u64,
    },
}

impl Arg {
    /// Text `bytes` as an argument: their hash. A caller that hashes a
    /// value once for many rows (a dictionary's) takes it from here too.
    #[inline]
    pub fn text(bytes: &[u8]) -> Arg {
        Arg::Text {
            hash: hash::bytes(bytes, hash::SEED_DEFAULT),
        }
    }

    /// The 64-bit hash sketches take: [`hash::user_id`] for integers (equal
    /// to postgresql-hll's `hll_hash_bigint`), the text hash for text.
    pub fn hash(&self) -> Option<u64> {
        match *self {
            Arg::Int(i) => Some(hash::user_id(u64::from_ne_bytes(i.to_ne_bytes()))),
            Arg::Text { hash } => Some(hash),
            _ => None,
        }
    }
}

/// One record's route through a summary. Reuse one per worker: its buffers
/// keep their capacity, so routing stops allocating once warm.
#[derive(Debug, Default, Clone)]
pub struct Routed {
    /// The start of the record's time bucket, if the summary has one.
    pub bucket: Option<Timestamp>,
    /// The encoded dimension values (see the module doc).
    pub key: Vec<u8>,
    /// One value per [`Summary::arguments`] entry.
    pub args: Vec<Arg>,
    /// Where each text argument's bytes are in `text` (empty for others),
    /// for aggregates that report values, not only count them (`topk`).
    spans: Vec<(u32, u32)>,
    text: Vec<u8>,
}

impl Routed {
    /// Readies `count` argument slots and forgets the previous record's
    /// text. Slots are kept between records: written in place, never
    /// cleared and pushed again.
    #[inline]
    pub fn begin_args(&mut self, count: usize) {
        if self.args.len() != count {
            self.args.resize(count, Arg::Null);
            self.spans.resize(count, (0, 0));
        }
        self.text.clear();
    }

    /// Sets argument `index` to a non-text value.
    #[inline]
    pub fn set_arg(&mut self, index: usize, arg: Arg) {
        self.args[index] = arg;
        self.spans[index] = (0, 0);
    }

    /// Sets argument `index` to text: its hash, and its bytes for the
    /// aggregates that report values, as a record's text column gives.
    #[inline]
    pub fn set_text_arg(&mut self, index: usize, bytes: &[u8]) {
        self.set_hashed_text_arg(index, bytes, Arg::text(bytes));
    }

    /// [`Routed::set_text_arg`] with the argument `arg` already made from
    /// `bytes` by [`Arg::text`].
    #[inline]
    pub fn set_hashed_text_arg(&mut self, index: usize, bytes: &[u8], arg: Arg) {
        debug_assert_eq!(arg, Arg::text(bytes));
        self.args[index] = arg;
        self.spans[index] = push_text(bytes, &mut self.text);
    }

    /// The text of argument `index` when it is [`Arg::Text`], else empty.
    pub fn text_of(&self, index: usize) -> &[u8] {
        match self.spans.get(index) {
            Some(&(start, end)) => &self.text[start as usize..end as usize],
            None => &[],
        }
    }
}

impl Summary {
    /// Routes `record`: `Ok(false)` when the filter drops it; `Ok(true)`
    /// with `out` filled when it belongs to the summary; an [`EvalError`]
    /// when a field it reads is not its declared type (the caller counts
    /// and rejects the record).
    pub fn route<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<bool, EvalError> {
        if !self.passes(record, scratch)? {
            return Ok(false);
        }
        self.route_passed(record, scratch, out)?;
        Ok(true)
    }

    /// Which of the summary's filter and arguments are plain columns, for
    /// a caller that reads typed columns (see [`ColumnPlan`]).
    pub fn column_plan(&self) -> ColumnPlan {
        let filter = match &self.filter {
            None => ColumnFilter::None,
            Some(filter) => match text_eq(filter) {
                Some((column, text)) => ColumnFilter::TextEq {
                    column,
                    literal: text.into(),
                },
                None => ColumnFilter::Evaluate,
            },
        };
        let args = self
            .paths
            .args
            .iter()
            .map(|path| match *path {
                ArgPath::Typed { column, ty } => ArgColumn::Typed { column, ty },
                ArgPath::Text { column } => ArgColumn::Text { column },
                ArgPath::General => ArgColumn::Evaluate,
            })
            .collect();
        let key: Option<Vec<KeyColumn>> = self
            .paths
            .dims
            .iter()
            .map(|path| match *path {
                DimPath::Column(key) => Some(key),
                DimPath::General => None,
            })
            .collect();
        let dims = key.as_ref().and_then(|key| {
            key.iter()
                .map(|key| key.cut.is_none().then_some(key.column))
                .collect()
        });
        ColumnPlan {
            filter,
            bucket: self.bucket,
            dims,
            key,
            args,
        }
    }

    /// Whether `record` passes the summary's `WHERE` (true without one).
    /// Summaries with equal filters can share one evaluation and then call
    /// [`Summary::route_passed`].
    pub fn passes<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Scratch,
    ) -> Result<bool, EvalError> {
        match &self.filter {
            None => Ok(true),
            // `text_column = 'literal'`, the usual event-kind filter: a
            // byte comparison (an absent field is NULL, so not TRUE).
            Some(filter) if let Some((column, text)) = text_eq(filter) => Ok(record
                .field(column)
                .is_some_and(|field| bytes_eq(field, text))),
            Some(filter) => {
                scratch.clear();
                Ok(filter.truth(record, scratch.buffer())? == Some(true))
            }
        }
    }

    /// Fills `out` for a record known to pass the filter.
    pub fn route_passed<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<(), EvalError> {
        self.route_passed_in(record, None, scratch, out)
    }

    /// [`Summary::route_passed`], given the record's bucket when another
    /// summary with an equal [`Summary::bucket`] has computed it for this
    /// record (`known`), so that it is read and truncated once.
    pub fn route_passed_in<R: Record + ?Sized>(
        &self,
        record: &R,
        known: Option<Timestamp>,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<(), EvalError> {
        out.bucket = None;
        if let (Some(_), Some(t)) = (&self.bucket, known) {
            out.bucket = Some(t);
        } else if let Some(bucket) = &self.bucket {
            match record.value_memo(
                bucket.column,
                cardinal_event::ColumnType::Timestamp,
                &mut scratch.date,
            ) {
                Ok(Value::Time(t)) => out.bucket = Some(t.truncate(bucket.unit)),
                Ok(_) => {
                    return Err(EvalError::MissingTime {
                        column: bucket.column,
                    });
                }
                Err(reason) => {
                    return Err(EvalError::Field {
                        column: bucket.column,
                        reason,
                    });
                }
            }
        }
        self.route_dims(record, scratch, out)?;
        self.route_args(record, scratch, out)
    }

    /// Encodes the record's dimension values into `out.key` (the part of
    /// [`Summary::route_passed_in`] that a caller reading typed columns,
    /// [`Summary::column_plan`], still asks for).
    #[inline]
    pub fn route_dims<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<(), EvalError> {
        out.key.clear();
        scratch.clear();
        for (index, path) in self.paths.dims.iter().enumerate() {
            match *path {
                DimPath::Column(key) => key.encode(record.field(key.column), &mut out.key),
                DimPath::General => {
                    let held = self.dimensions[index].eval_held(record, scratch.buffer())?;
                    encode(held.resolve(scratch.bytes()), &mut out.key);
                }
            }
        }
        Ok(())
    }

    #[inline]
    fn route_args<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<(), EvalError> {
        out.begin_args(self.paths.args.len());
        for (index, path) in self.paths.args.iter().enumerate() {
            // Each path converts its own value: a Value gathered from the
            // three paths was copied through the stack in pieces and read
            // back whole, a store-forwarding stall per argument (perf).
            let (arg, span) = match *path {
                ArgPath::Typed { column, ty } => arg_of(
                    record
                        .value_memo(column, ty, &mut scratch.date)
                        .map_err(|reason| EvalError::Field { column, reason })?,
                    &mut out.text,
                ),
                ArgPath::Text { column } => match record.field(column) {
                    None => (Arg::Null, (0, 0)),
                    Some(text) => text_arg(text, &mut out.text),
                },
                ArgPath::General => {
                    self.route_arg(index, record, scratch, out)?;
                    continue;
                }
            };
            out.args[index] = arg;
            out.spans[index] = span;
        }
        debug_assert_eq!(out.args.len(), self.arguments.len());
        Ok(())
    }

    /// Evaluates argument `index`'s expression on `record` into `out` (after
    /// [`Routed::begin_args`]): for an argument a [`ColumnPlan`] marks
    /// [`ArgColumn::Evaluate`].
    pub fn route_arg<R: Record + ?Sized>(
        &self,
        index: usize,
        record: &R,
        scratch: &mut Scratch,
        out: &mut Routed,
    ) -> Result<(), EvalError> {
        let held = self.arguments[index].eval_held(record, scratch.buffer())?;
        let (arg, span) = arg_of(held.resolve(scratch.bytes()), &mut out.text);
        out.args[index] = arg;
        out.spans[index] = span;
        Ok(())
    }
}

/// The column and literal of a `text_column = 'literal'` filter.
fn text_eq(filter: &Expr) -> Option<(usize, &[u8])> {
    match filter {
        Expr::Compare(CompareOp::Eq, column, literal) => match (&**column, &**literal) {
            (
                Expr::Column {
                    index,
                    ty: ColumnType::Text,
                },
                Expr::Literal(Literal::Text(text)),
            ) => Some((*index, text)),
            _ => None,
        },
        _ => None,
    }
}

/// How a caller holding typed columns (a Parquet batch, or a text batch
/// parsed a column at a time) routes a record
/// ([`Summary::column_plan`]): it reads the bucket and the plain-column
/// arguments directly, takes the filter as [`ColumnFilter`] says, asks
/// [`Summary::route_dims`] for the key and [`Summary::route_arg`] for
/// the arguments that are expressions, and fills the [`Routed`] with
/// [`Routed::begin_args`], [`Routed::set_arg`] and
/// [`Routed::set_text_arg`], giving what [`Summary::route`] gives.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnPlan {
    /// The filter.
    pub filter: ColumnFilter,
    /// The time bucket: the column's value truncated to the unit; a NULL
    /// or unreadable time is an error, as in [`Summary::route`].
    pub bucket: Option<crate::Bucket>,
    /// The text columns that are the dimensions, when every dimension is
    /// one as it is ([`Summary::route_dims`] encodes their bytes): a
    /// caller that knows two records' fields are equal (their dictionary
    /// keys are) knows their keys are.
    pub dims: Option<Vec<usize>>,
    /// The dimensions as text columns, cut or not, when every dimension
    /// is one ([`KeyColumn::encode`] writes the key [`Summary::route_dims`]
    /// writes): a caller holding a batch's text columns builds each row's
    /// key from them without the record.
    pub key: Option<Vec<KeyColumn>>,
    /// One per argument.
    pub args: Vec<ArgColumn>,
}

/// One dimension of a [`ColumnPlan::key`]: a text column's bytes, or
/// `substr` of them with constant bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyColumn {
    /// The text column.
    pub column: usize,
    /// `substr`'s start and length, if the dimension cuts the text.
    cut: Option<(i64, Option<i64>)>,
}

impl KeyColumn {
    /// Appends this dimension's entry for a field (`None`: NULL) to `key`:
    /// what [`Summary::route_dims`] writes for it.
    #[inline]
    pub fn encode(&self, field: Option<&[u8]>, key: &mut Vec<u8>) {
        match self.text(field) {
            None => key.push(TAG_NULL),
            Some(text) => encode_text(text, key),
        }
    }

    /// The key this dimension alone makes of a field (what
    /// [`KeyColumn::encode`] writes into an empty key) as two
    /// little-endian words, zero past it, and its length in bytes, when
    /// the field is not NULL and its text fits: at most 11 bytes. A
    /// caller that holds such keys as
    /// words needs no key buffer (`Rollup`'s `KeyHash::of_words` hashes
    /// them).
    #[inline(always)]
    pub fn short_key(&self, field: Option<&[u8]>) -> Option<([u64; 2], usize)> {
        short_text_key(self.text(field)?)
    }

    /// The text this dimension takes from a field (`None`: NULL): the
    /// field, or the part of it `substr` keeps. Two fields with the same
    /// text have the same [`KeyColumn::encode`] entry.
    #[inline]
    pub fn text<'a>(&self, field: Option<&'a [u8]>) -> Option<&'a [u8]> {
        let text = field?;
        Some(match self.cut {
            None => text,
            Some((start, length)) => {
                let (from, to) = crate::expr::substr_range(text, start, length);
                &text[from..to]
            }
        })
    }
}

/// How a [`ColumnPlan`] takes its summary's filter.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnFilter {
    /// No filter: every record passes.
    None,
    /// `text_column = 'literal'`: the field's bytes equal the literal's (a
    /// NULL field does not pass).
    TextEq {
        /// The text column.
        column: usize,
        /// The literal's bytes.
        literal: Box<[u8]>,
    },
    /// Anything else: [`Summary::passes`] on the record.
    Evaluate,
}

/// Where one argument comes from in a [`ColumnPlan`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgColumn {
    /// A typed column, read as its declared type (NULL is [`Arg::Null`]).
    Typed {
        /// The column.
        column: usize,
        /// Its declared type.
        ty: ColumnType,
    },
    /// A text column ([`Routed::set_text_arg`]; NULL is [`Arg::Null`]).
    Text {
        /// The column.
        column: usize,
    },
    /// An expression: [`Summary::route_arg`] on the record.
    Evaluate,
}

/// An argument's value as an [`Arg`] and, for text, where its bytes went in
/// `text` (see [`text_arg`]).
#[inline(always)]
fn arg_of(value: Value<'_>, text: &mut Vec<u8>) -> (Arg, (u32, u32)) {
    let arg = match value {
        Value::Null => Arg::Null,
        Value::Bool(b) => Arg::Bool(b),
        Value::Int(i) => Arg::Int(i),
        Value::Float(f) => Arg::Float(f),
        Value::Time(t) => Arg::Time(t),
        Value::Text(t) => return text_arg(t, text),
    };
    (arg, (0, 0))
}

/// A text argument: its hash, and its bytes appended to `text` for the
/// aggregates that report values (`topk`).
#[inline]
fn text_arg(bytes: &[u8], text: &mut Vec<u8>) -> (Arg, (u32, u32)) {
    (Arg::text(bytes), push_text(bytes, text))
}

/// Appends `bytes` to `text`; their span in it.
#[inline]
fn push_text(bytes: &[u8], text: &mut Vec<u8>) -> (u32, u32) {
    // Fields are bounded by the parsers' line limit, far below 4 GiB.
    let start = u32::try_from(text.len()).unwrap_or(u32::MAX);
    text.extend_from_slice(bytes);
    let end = u32::try_from(text.len()).unwrap_or(u32::MAX);
    (start, end)
}

/// How [`Summary::route_passed`] evaluates each dimension and argument,
/// decided when the summary is compiled. Each fast path gives exactly what
/// the expression evaluator gives for its shape (the tests compare them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Paths {
    dims: Vec<DimPath>,
    args: Vec<ArgPath>,
}

/// How one dimension is encoded.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DimPath {
    /// A text column's field bytes, or `substr(text_column, start[,
    /// length])` of them with constant bounds (Query 2A's
    /// `substr(sourceIP, 1, 8)`).
    Column(KeyColumn),
    /// Anything else: the evaluator.
    General,
}

/// How one aggregate argument is read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ArgPath {
    /// A typed (non-text) column: the record's (cached) value.
    Typed { column: usize, ty: ColumnType },
    /// A text column: its field's bytes.
    Text { column: usize },
    /// Anything else: the evaluator.
    General,
}

impl Paths {
    pub(crate) fn of(dimensions: &[Expr], arguments: &[Expr]) -> Self {
        let dims = dimensions
            .iter()
            .map(|dimension| match dimension {
                Expr::Column {
                    index,
                    ty: ColumnType::Text,
                } => DimPath::Column(KeyColumn {
                    column: *index,
                    cut: None,
                }),
                Expr::Substr {
                    text,
                    start,
                    length,
                } if let Expr::Column {
                    index,
                    ty: ColumnType::Text,
                } = &**text
                    && let Expr::Literal(Literal::Int(start)) = &**start
                    && let Some(length) = match length.as_deref() {
                        None => Some(None),
                        Some(Expr::Literal(Literal::Int(length))) => Some(Some(*length)),
                        Some(_) => None,
                    } =>
                {
                    DimPath::Column(KeyColumn {
                        column: *index,
                        cut: Some((*start, length)),
                    })
                }
                _ => DimPath::General,
            })
            .collect();
        let args = arguments
            .iter()
            .map(|argument| match *argument {
                Expr::Column {
                    index,
                    ty: ColumnType::Text,
                } => ArgPath::Text { column: index },
                Expr::Column { index, ty } => ArgPath::Typed { column: index, ty },
                _ => ArgPath::General,
            })
            .collect();
        Self { dims, args }
    }

    /// Every dimension and argument through the evaluator: the reference
    /// the fast paths are tested against.
    #[cfg(test)]
    pub(crate) fn general(dimensions: usize, arguments: usize) -> Self {
        Self {
            dims: vec![DimPath::General; dimensions],
            args: vec![ArgPath::General; arguments],
        }
    }
}

/// Appends a text entry (see the module doc). Always inlined: a key's
/// short text (Query 2A's IP prefix) is two words and a length, and as a
/// call it was 74 instructions (callgrind).
#[inline(always)]
fn encode_text(text: &[u8], key: &mut Vec<u8>) {
    if key.is_empty()
        && let Some((words, len)) = short_text_key(text)
    {
        // The key's first 16 bytes as two word stores. The rollup's hash
        // reads a key a word at a time right after it is written, and a
        // word load takes its bytes from a store still in flight only if
        // one store holds them all: written as a 5-byte head and then the
        // text, each load waited for the stores to reach the cache (Query
        // 2A from Parquet, one worker: 1.71 -> 1.63 user CPU-s on average).
        let words = u128::from(words[0]) | u128::from(words[1]) << 64;
        key.extend_from_slice(&words.to_le_bytes());
        key.truncate(len);
        return;
    }
    encode_long_text(text, key);
}

/// The key of one text dimension, `text` (what [`encode_text`] writes
/// into an empty key), as two little-endian words, zero past it, and its
/// length (the 5-byte head and the text), when `text` is at most
/// [`SHORT_TEXT_KEY_MAX`] bytes.
#[inline(always)]
fn short_text_key(text: &[u8]) -> Option<([u64; 2], usize)> {
    if text.len() > SHORT_TEXT_KEY_MAX {
        return None;
    }
    let head = u64::from(TAG_TEXT) | (text.len() as u64) << 8;
    let (start, rest) = text.split_at(text.len().min(3));
    let first = head | tail_word(start) << 40;
    let second = match <[u8; 8]>::try_from(rest) {
        Ok(word) => u64::from_le_bytes(word),
        Err(_) => tail_word(rest),
    };
    Some(([first, second], 5 + text.len()))
}

/// [`encode_text`] of a text that does not start a key or is longer than
/// [`SHORT_TEXT_KEY_MAX`].
fn encode_long_text(text: &[u8], key: &mut Vec<u8>) {
    // Fields are bounded by the parsers' line limit, far below 4 GiB; a
    // longer one is cut rather than mis-encoded.
    let length = u32::try_from(text.len()).unwrap_or(u32::MAX);
    let text = &text[..length as usize];
    let head = u64::from(TAG_TEXT) | u64::from(length) << 8;
    key.reserve(5 + text.len());
    key.extend_from_slice(&head.to_le_bytes()[..5]);
    key.extend_from_slice(text);
}

/// The longest text whose key, as the only dimension, fits two words
/// ([`short_text_key`]): the 5-byte head and 11 bytes fill them.
const SHORT_TEXT_KEY_MAX: usize = 11;

fn encode(value: Value<'_>, key: &mut Vec<u8>) {
    match value {
        Value::Null => key.push(TAG_NULL),
        Value::Bool(b) => key.extend_from_slice(&[TAG_BOOL, u8::from(b)]),
        Value::Int(i) => {
            key.push(TAG_INT);
            key.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            key.push(TAG_FLOAT);
            key.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Text(t) => encode_text(t, key),
        Value::Time(t) => {
            key.push(TAG_TIME);
            key.extend_from_slice(&t.0.to_le_bytes());
        }
    }
}

/// Appends `value` to a group key as routing encodes a dimension's value
/// (see the module doc): a key of values read with [`key_values`], some
/// left out, encoded back with this is the key a summary grouping by the
/// rest would have made.
pub fn encode_key_value(value: Value<'_>, key: &mut Vec<u8>) {
    encode(value, key);
}

/// Reads the values of an encoded group key (see the module doc).
pub fn key_values(key: &[u8]) -> KeyValues<'_> {
    KeyValues { rest: key }
}

/// The iterator of [`key_values`]. Stops at the end of the key, or at the
/// first entry that is not well formed.
#[derive(Debug, Clone)]
pub struct KeyValues<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for KeyValues<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        let (&tag, rest) = self.rest.split_first()?;
        let eight = |rest: &'a [u8]| -> Option<([u8; 8], &'a [u8])> {
            let (head, tail) = rest.split_first_chunk::<8>()?;
            Some((*head, tail))
        };
        let (value, rest) = match tag {
            TAG_NULL => (Value::Null, rest),
            TAG_BOOL => {
                let (&b, rest) = rest.split_first()?;
                (Value::Bool(b != 0), rest)
            }
            TAG_INT => {
                let (bytes, rest) = eight(rest)?;
                (Value::Int(i64::from_le_bytes(bytes)), rest)
            }
            TAG_FLOAT => {
                let (bytes, rest) = eight(rest)?;
                (
                    Value::Float(f64::from_bits(u64::from_le_bytes(bytes))),
                    rest,
                )
            }
            TAG_TIME => {
                let (bytes, rest) = eight(rest)?;
                (Value::Time(Timestamp(i64::from_le_bytes(bytes))), rest)
            }
            TAG_TEXT => {
                let (length, rest) = rest.split_first_chunk::<4>()?;
                let length = usize::try_from(u32::from_le_bytes(*length)).ok()?;
                if rest.len() < length {
                    self.rest = &[];
                    return None;
                }
                let (text, rest) = rest.split_at(length);
                (Value::Text(text), rest)
            }
            _ => {
                self.rest = &[];
                return None;
            }
        };
        self.rest = rest;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plan;
    use cardinal_event::ValueError;

    #[test]
    fn column_plans_name_plain_columns_and_give_what_route_gives() {
        let plan = Plan::compile(
            "CREATE STREAM s (ts TIMESTAMP, n BIGINT, x DOUBLE, kind TEXT, site TEXT)
               WITH (time = 'ts');
             CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS d, upper(site) AS s,
               count(*), sum(x), sum(x * 2), hll(n), topk(site, 3), min(ts)
               FROM s WHERE kind = 'view' GROUP BY d, s;
             CREATE SUMMARY b AS SELECT count(*), sum(x) FROM s;
             CREATE SUMMARY c AS SELECT count(*) FROM s WHERE x > 1;
             CREATE SUMMARY d AS SELECT sum(x * 2) FROM s;",
        )
        .expect("compiles");
        let a = plan.summaries[0].column_plan();
        assert_eq!(
            a.filter,
            ColumnFilter::TextEq {
                column: 3,
                literal: b"view"[..].into()
            }
        );
        assert_eq!(
            a.bucket.map(|b| (b.column, b.unit)),
            Some((0, crate::TimeUnit::Day))
        );
        let b = plan.summaries[1].column_plan();
        assert_eq!(b.filter, ColumnFilter::None);
        assert_eq!(b.bucket, None);
        assert_eq!(
            b.args,
            [ArgColumn::Typed {
                column: 2,
                ty: ColumnType::Double
            }]
        );
        // Any other filter, and an argument that is an expression, are
        // evaluated on the record.
        assert_eq!(
            plan.summaries[2].column_plan().filter,
            ColumnFilter::Evaluate
        );
        assert_eq!(plan.summaries[3].column_plan().args, [ArgColumn::Evaluate]);

        // Filled from the plan's columns, a route equals the record's.
        let row = ["2026-11-04T13:45:59Z", "7", "0.5", "view", "Example.com"];
        let summary = &plan.summaries[0];
        let mut scratch = Scratch::new();
        let mut want = Routed::default();
        assert_eq!(summary.route(&row[..], &mut scratch, &mut want), Ok(true));
        let mut got = Routed {
            bucket: Some(
                Timestamp::parse(row[0].as_bytes())
                    .expect("a time")
                    .truncate(crate::TimeUnit::Day),
            ),
            ..Routed::default()
        };
        summary
            .route_dims(&row[..], &mut scratch, &mut got)
            .expect("a key");
        got.begin_args(a.args.len());
        for (index, arg) in a.args.iter().enumerate() {
            match *arg {
                ArgColumn::Typed { column, ty } => {
                    let value = row[..].value(column, ty).expect("a value");
                    got.set_arg(index, arg_of(value, &mut Vec::new()).0);
                }
                ArgColumn::Text { column } => got.set_text_arg(index, row[column].as_bytes()),
                ArgColumn::Evaluate => summary
                    .route_arg(index, &row[..], &mut scratch, &mut got)
                    .expect("an argument"),
            }
        }
        assert_eq!(got.bucket, want.bucket);
        assert_eq!(got.key, want.key);
        assert_eq!(got.args, want.args);
        for index in 0..a.args.len() {
            assert_eq!(got.text_of(index), want.text_of(index));
        }
    }

    /// `time_bucket` as the summary's bucket routes a record to its
    /// 5-minute bucket, epoch times included; as a dimension over another
    /// time it re-buckets (a 5-minute start into its 15-minute bucket).
    #[test]
    fn time_bucket_routes_to_fixed_buckets() {
        let plan = Plan::compile(
            "CREATE STREAM s (ts TIMESTAMP, fine TIMESTAMP) WITH (time = 'ts');
             CREATE SUMMARY x AS SELECT time_bucket('5 minutes', ts) AS t,
               time_bucket('15 minutes', fine) AS coarse, count(*) FROM s GROUP BY t, coarse;",
        )
        .expect("compiles");
        let summary = &plan.summaries[0];
        let mut scratch = Scratch::new();
        let mut out = Routed::default();
        let at = |text: &str| Timestamp::parse(text.as_bytes()).expect("valid");
        for (ts, fine, bucket, coarse) in [
            (
                "2026-11-04T13:47:59.999Z",
                "2026-11-04T13:40:00Z",
                "2026-11-04T13:45:00Z",
                "2026-11-04T13:30:00Z",
            ),
            (
                "2026-11-04T13:45:00Z",
                "2026-11-04T13:45:00Z",
                "2026-11-04T13:45:00Z",
                "2026-11-04T13:45:00Z",
            ),
            (
                "1793491207000",
                "1793491207",
                "2026-11-01T00:00:00Z",
                "2026-11-01T00:00:00Z",
            ),
            (
                "1969-12-31T23:59:59Z",
                "1969-12-31T23:59:59Z",
                "1969-12-31T23:55:00Z",
                "1969-12-31T23:45:00Z",
            ),
        ] {
            assert_eq!(
                summary.route(&[ts, fine][..], &mut scratch, &mut out),
                Ok(true),
                "{ts}"
            );
            assert_eq!(out.bucket, Some(at(bucket)), "{ts}");
            assert_eq!(
                key_values(&out.key).collect::<Vec<_>>(),
                [Value::Time(at(coarse))],
                "{ts}"
            );
        }
    }

    #[test]
    fn records_route_or_are_rejected_with_a_reason() {
        let plan = Plan::compile(
            "CREATE STREAM s (ts TIMESTAMP, n BIGINT, site TEXT) WITH (time = 'ts');
             CREATE SUMMARY x AS SELECT date_trunc('hour', ts) AS h, lower(site) AS site,
               hll(n), theta(n), exact_distinct(site), sum(n / 2) FROM s WHERE n > 0 GROUP BY h, site;",
        )
        .expect("compiles");
        let summary = &plan.summaries[0];
        // hll(n) and theta(n) share one argument.
        assert_eq!(summary.arguments.len(), 3);
        let mut scratch = Scratch::new();
        let mut out = Routed::default();
        let mut route = |row: &[&str]| summary.route(row, &mut scratch, &mut out);
        assert_eq!(
            route(&["2026-11-04T13:45:59Z", "7", "Example.COM"]),
            Ok(true)
        );
        assert_eq!(route(&["2026-11-04T13:45:59Z", "-1", "a"]), Ok(false));
        assert_eq!(route(&["2026-11-04T13:45:59Z", "", "a"]), Ok(false)); // NULL > 0
        assert_eq!(
            route(&["2026-11-04T13:45:59Z", "7x", "a"]),
            Err(EvalError::Field {
                column: 1,
                reason: ValueError::BigInt
            })
        );
        assert_eq!(
            route(&["", "7", "a"]),
            Err(EvalError::MissingTime { column: 0 })
        );
        assert_eq!(
            route(&["yesterday", "7", "a"]),
            Err(EvalError::Field {
                column: 0,
                reason: ValueError::Timestamp
            })
        );
        assert_eq!(route(&["2026-11-04T13:45:59Z", "9"]), Ok(true)); // absent site: NULL key
        assert_eq!(
            route(&["2026-11-04T13:45:59Z", "8", "Example.COM"]),
            Ok(true)
        );
        assert_eq!(
            out.bucket,
            Some(Timestamp::parse(b"2026-11-04T13:00:00Z").expect("valid"))
        );
        assert_eq!(
            key_values(&out.key).collect::<Vec<_>>(),
            [Value::Text(b"example.com")]
        );
        assert_eq!(out.args[0], Arg::Int(8));
        assert_eq!(out.args[0].hash(), Some(hash::user_id(8)));
        assert_eq!(
            out.args[1],
            Arg::Text {
                hash: hash::bytes(b"Example.COM", hash::SEED_DEFAULT)
            }
        );
        assert_eq!(out.args[2], Arg::Int(4));
        assert_eq!(out.text_of(1), b"Example.COM");
        assert_eq!(out.text_of(0), b"");
    }

    use proptest::prelude::*;

    proptest! {
        /// The paths decided at compile time route every record exactly as
        /// the evaluator does: same bucket, key, arguments, text and errors.
        #[test]
        fn fast_paths_route_like_the_evaluator(
            rows in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![
                        Just(None),
                        "[a-z0-9.]{0,12}".prop_map(Some),
                        (-99i64..99).prop_map(|n| Some(n.to_string())),
                        Just(Some("2026-11-04T13:45:59Z".to_owned())),
                        Just(Some("0.25".to_owned())),
                    ],
                    0..6,
                ),
                1..40,
            ),
            start in -3i64..12,
            length in proptest::option::of(-2i64..10),
        ) {
            let length = length.map_or(String::new(), |l| format!(", {l}"));
            let plan = Plan::compile(&format!(
                "CREATE STREAM s (ts TIMESTAMP, n BIGINT, site TEXT, x DOUBLE, t TEXT) WITH (time = 'ts');
                 CREATE SUMMARY a AS SELECT date_trunc('hour', ts) AS h, site, substr(t, {start}{length}) AS p,
                   lower(t) AS l, count(*), hll(n), topk(site, 3), sum(x), sum(n * 2), hll(t)
                   FROM s GROUP BY h, site, p, l;
                 CREATE SUMMARY k AS SELECT site, substr(t, {start}{length}) AS p, count(*)
                   FROM s GROUP BY site, p;"
            ))
            .expect("compiles");
            // Keys built from the plan's text columns are route_dims' keys.
            prop_assert_eq!(plan.summaries[0].column_plan().key, None);
            let text_key = &plan.summaries[1];
            let columns = text_key.column_plan().key.expect("text dimensions");
            for row in &rows {
                let fields: Vec<&[u8]> = row.iter().map(|f| f.as_deref().map_or(&b""[..], str::as_bytes)).collect();
                let record = fields.as_slice();
                let mut want = Routed::default();
                text_key.route_dims(record, &mut Scratch::new(), &mut want).expect("a key");
                let mut key = Vec::new();
                for column in &columns {
                    column.encode(record.field(column.column), &mut key);
                }
                prop_assert_eq!(key, want.key);
            }
            let fast = &plan.summaries[0];
            let mut general = fast.clone();
            general.paths = Paths::general(fast.dimensions.len(), fast.arguments.len());
            prop_assert_ne!(&fast.paths, &general.paths);
            let (mut scratch, mut a, mut b) = (Scratch::new(), Routed::default(), Routed::default());
            for row in &rows {
                let fields: Vec<&[u8]> = row.iter().map(|f| f.as_deref().map_or(&b""[..], str::as_bytes)).collect();
                let got = fast.route_passed(fields.as_slice(), &mut scratch, &mut a);
                let want = general.route_passed(fields.as_slice(), &mut scratch, &mut b);
                prop_assert_eq!(&got, &want);
                if got.is_ok() {
                    prop_assert_eq!(a.bucket, b.bucket);
                    prop_assert_eq!(&a.key, &b.key);
                    prop_assert_eq!(&a.args, &b.args);
                    for i in 0..a.args.len() {
                        prop_assert_eq!(a.text_of(i), b.text_of(i));
                    }
                }
            }
        }
    }

    proptest! {
        /// A text's entry is its tag, its length (u32, little-endian) and
        /// its bytes, whether it starts the key (written as whole words
        /// when short) or follows other entries.
        #[test]
        fn text_entries_are_tag_length_bytes(
            text in proptest::collection::vec(any::<u8>(), 0..40),
            before in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            let len = u32::try_from(text.len()).expect("short");
            let mut want = before.clone();
            want.push(TAG_TEXT);
            want.extend_from_slice(&len.to_le_bytes());
            want.extend_from_slice(&text);
            let mut key = before;
            encode_text(&text, &mut key);
            prop_assert_eq!(key, want);
        }
    }

    #[test]
    fn key_round_trip() {
        let values = [
            Value::Text(b"CA"),
            Value::Int(42),
            Value::Null,
            Value::Bool(true),
            Value::Float(-0.5),
            Value::Time(Timestamp(1_793_491_200_000)),
            Value::Text(b""),
        ];
        let mut key = Vec::new();
        for v in values {
            encode(v, &mut key);
        }
        assert_eq!(
            &key[..16],
            b"\x04\x02\x00\x00\x00CA\x02\x2a\x00\x00\x00\x00\x00\x00\x00"
        );
        assert_eq!(key_values(&key).collect::<Vec<_>>(), values);
        // Truncated keys end the iteration instead of panicking.
        for cut in 0..key.len() {
            assert!(key_values(&key[..cut]).count() <= values.len());
        }
    }
}
