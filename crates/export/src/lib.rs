//! Results out: a summary's merged rows as people and tools want them.
//!
//! - [`table()`]: an aligned text table; approximate columns show the value
//!   and its 95% interval, and "below detection" where the interval holds 0.
//! - [`write_daily_csv`]: `OUT/<summary>/YYYY-MM-DD.csv`, one file per day,
//!   each written once and atomically (a temp file in the same directory,
//!   synced, then renamed), so a day's rows are in exactly one file and a
//!   crash never leaves half a file under the final name (the seed's Hadoop
//!   lesson: parallel writers clobbering each other's per-day files).
//! - [`write_json_lines`]: one JSON object per row.
//! - HyperLogLog columns can be added as postgresql-hll hex
//!   (`\x...`, [`Options::hll_hex`]), so `COPY` into a table with an `hll`
//!   column works and analysts keep using `hll_union_agg`.
//!
//! CSV columns: the bucket (ISO-8601, if the summary has one), the dimensions, then per aggregate its
//! value; approximate aggregates add `<name>_lower` and `<name>_upper`;
//! quantiles add one column per rank (`<name>_p50`...); top-k writes
//! `item:count` pairs separated by `|`.
//!
//! Rows are gathered in [`Rows`] (every dimension value's text in one
//! buffer, no allocation per row) and ordered once: a radix sort on a
//! 24-byte key per row (bucket, then the first 16 bytes of an
//! order-preserving encoding of the dimension values), values compared only
//! within runs of equal keys; keys whose varying bytes take few values sort
//! as mixed-radix codes (Query 2A's 1.45M keys in three passes). The rows
//! are then permuted with loads ahead, the writers load each row's states
//! and text a few rows ahead, and a day's CSV goes to its temp file a 1 MiB
//! chunk at a time. `min`/`max` of a time are kept as milliseconds and
//! printed as timestamps ([`Results::with_times`]), as buckets are.
//!
//! The caller decodes each group's dimension key into display values (the
//! engine uses `cardinal-route`'s key encoding) and hands [`Results`] over:
//!
//! ```
//! use cardinal_event::Timestamp;
//! use cardinal_export::{Columns, Results, Rows};
//! use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
//! let mut r = Rollup::new(Shape { aggs: vec![AggKind::CountAll] }, Limits::default()).unwrap();
//! r.fold(Timestamp(0), b"CA", &[Input::Null]);
//! let mut rows = Rows::default();
//! for (bucket, key, states) in r.groups() {
//!     rows.push(bucket, states);
//!     rows.push_str(&String::from_utf8_lossy(key));
//! }
//! let columns = Columns { bucket: Some("day".into()), dims: vec!["state".into()], aggs: vec!["events".into()] };
//! let results = Results::new(columns, &r.shape().aggs, rows).unwrap();
//! let text = cardinal_export::table(&results);
//! assert!(text.contains("1970-01-01") && text.contains("CA"));
//! ```

#![deny(missing_docs)]

mod error;
mod outdir;
mod table;

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use cardinal_event::Timestamp;
use cardinal_event::bytes::{prefetch, prefetch_lines};
use cardinal_rollup::{AggKind, AggState, Output, output_of};
use cardinal_sketch::Estimate;

pub use error::{Error, Result};
pub use outdir::{AtomicFile, FILE_NAME_BYTES_MAX, OutDir, STAGING_PREFIX, join_under};
pub use table::{Cell, CellType, Table, TableColumn, float_text};

/// The names of a summary's output columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The bucket column (e.g. `day`), or `None` for a summary without a
    /// time bucket: no bucket column, and one file `all.csv` instead of one
    /// per day.
    pub bucket: Option<String>,
    /// One name per dimension.
    pub dims: Vec<String>,
    /// One name per aggregate.
    pub aggs: Vec<String>,
}

/// One group's result: bucket, its aggregate states and where its
/// dimension values are in its [`Results`] (read them with
/// [`Results::dims`]).
#[derive(Debug, Clone, Copy)]
pub struct ResultRow<'a> {
    /// Bucket start.
    pub bucket: Timestamp,
    /// One state per aggregate.
    pub states: &'a [AggState],
    /// The row's dimension values: `spans[first..first + count]`.
    first: u32,
    count: u32,
}

/// Where one dimension value's display text is in [`Rows`]' text buffer;
/// [`Span::NULL`] for NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    /// NULL: no text (a real span never starts past its end).
    const NULL: Span = Span {
        start: u32::MAX,
        end: 0,
    };
}

/// Rows gathered for [`Results::new`]: every dimension value's display
/// text back to back in one buffer, so that building the results of a
/// million groups allocates a few growing buffers, not a `Vec` and a
/// `String` per row.
///
/// Start each row with [`Rows::push`], then give its dimension values in
/// order with [`Rows::push_null`], [`Rows::push_str`] or
/// [`Rows::push_with`].
#[derive(Debug, Clone, Default)]
pub struct Rows<'a> {
    rows: Vec<ResultRow<'a>>,
    spans: Vec<Span>,
    /// The values' text, back to back.
    text: String,
}

impl<'a> Rows<'a> {
    /// No rows yet, with room for `rows` rows of `dims` dimensions.
    pub fn with_capacity(rows: usize, dims: usize) -> Self {
        Self {
            rows: Vec::with_capacity(rows),
            spans: Vec::with_capacity(rows * dims),
            text: String::new(),
        }
    }

    /// Starts a row: its bucket and states; its dimension values follow.
    pub fn push(&mut self, bucket: Timestamp, states: &'a [AggState]) {
        self.rows.push(ResultRow {
            bucket,
            states,
            first: u32::try_from(self.spans.len()).expect("fewer than 2^32 dimension values"),
            count: 0,
        });
    }

    /// A row of `dims` values, for callers that have them at hand.
    pub fn push_row(&mut self, bucket: Timestamp, dims: &[Option<&str>], states: &'a [AggState]) {
        self.push(bucket, states);
        for dim in dims {
            match dim {
                None => self.push_null(),
                Some(text) => self.push_str(text),
            }
        }
    }

    /// The current row's next dimension value is NULL.
    pub fn push_null(&mut self) {
        self.add(Span::NULL);
    }

    /// The current row's next dimension value is `text`.
    pub fn push_str(&mut self, text: &str) {
        self.push_bytes(text.as_bytes());
    }

    /// The current row's next dimension value is `bytes` as text, escaped
    /// as [`push_text_escaped`] does, so that two different byte strings
    /// never print alike. ASCII without a backslash, the usual case, is
    /// copied without a UTF-8 check.
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        let start = self.offset();
        push_text_escaped(&mut self.text, bytes);
        let end = self.offset();
        self.add(Span { start, end });
    }

    /// The current row's next dimension value is what `write` prints
    /// (e.g. a number printed in place, with `write!`).
    pub fn push_with(&mut self, write: impl FnOnce(&mut dyn std::fmt::Write)) {
        let start = self.offset();
        write(&mut self.text);
        let end = self.offset();
        self.add(Span { start, end });
    }

    fn offset(&self) -> u32 {
        u32::try_from(self.text.len()).expect("under 4 GiB of dimension text")
    }

    fn add(&mut self, span: Span) {
        let row = self
            .rows
            .last_mut()
            .expect("Rows::push starts a row before its values");
        row.count += 1;
        self.spans.push(span);
    }

    /// Rows so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// One row's dimension values, from [`Results::dims`].
#[derive(Debug, Clone, Copy)]
pub struct Dims<'r> {
    spans: &'r [Span],
    text: &'r str,
}

/// The text of `span` in `text` (`None` for NULL).
fn text_of(text: &str, span: Span) -> Option<&str> {
    // Spans cut between values, so on character boundaries; an empty
    // string would stand in if one did not.
    (span != Span::NULL).then(|| {
        text.get(span.start as usize..span.end as usize)
            .unwrap_or_default()
    })
}

impl<'r> Dims<'r> {
    /// `row`'s values, whose spans are in `spans` and text in `text`.
    fn of(row: &ResultRow<'_>, spans: &'r [Span], text: &'r str) -> Self {
        Dims {
            spans: &spans[row.first as usize..(row.first + row.count) as usize],
            text,
        }
    }

    /// Value `index` (`None`: NULL, or no such dimension).
    pub fn get(&self, index: usize) -> Option<&'r str> {
        text_of(self.text, *self.spans.get(index)?)
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether the row has no dimensions.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The values in order (`None`: NULL).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Option<&'r str>> + 'r {
        let text = self.text;
        self.spans.iter().map(move |&span| text_of(text, span))
    }

    /// The values' bytes (`None`: NULL), for sorting without UTF-8 checks.
    fn bytes(&self) -> impl Iterator<Item = Option<&'r [u8]>> + 'r {
        let text = self.text.as_bytes();
        self.spans.iter().map(move |&span| {
            (span != Span::NULL).then(|| &text[span.start as usize..span.end as usize])
        })
    }

    /// The values as owned strings (for tests and small outputs).
    pub fn to_vec(&self) -> Vec<Option<String>> {
        self.iter().map(|d| d.map(str::to_owned)).collect()
    }
}

/// A summary's merged results, ready to export: rows ordered by bucket then
/// dimension values.
#[derive(Debug, Clone)]
pub struct Results<'a> {
    columns: Columns,
    kinds: &'a [AggKind],
    /// Per aggregate: its values are instants ([`Results::with_times`]).
    times: Vec<bool>,
    rows: Vec<ResultRow<'a>>,
    spans: Vec<Span>,
    text: String,
}

impl<'a> Results<'a> {
    /// Checks the names against the rows and sorts the rows.
    pub fn new(columns: Columns, kinds: &'a [AggKind], rows: Rows<'a>) -> Result<Self> {
        let Rows {
            mut rows,
            spans,
            text,
        } = rows;
        let bad = rows
            .iter()
            .find(|r| r.count as usize != columns.dims.len() || r.states.len() != kinds.len());
        if columns.aggs.len() != kinds.len() || bad.is_some() {
            return Err(Error::Columns {
                names: columns.dims.len() + columns.aggs.len(),
                columns: bad.map_or(kinds.len(), |r| r.count as usize + r.states.len()),
            });
        }
        let order = key_order(&rows, &spans, &text);
        rows = gather_rows(&rows, &order);
        sort_ties(&mut rows, &order, &spans, &text);
        Ok(Self {
            columns,
            kinds,
            times: Vec::new(),
            rows,
            spans,
            text,
        })
    }

    /// Marks the aggregates whose values are instants (`min(ts)`, kept as
    /// milliseconds since the epoch): outputs print them as timestamps,
    /// `2026-11-01T00:00:07Z`, as they print buckets. One flag per
    /// aggregate; missing flags are `false`.
    #[must_use]
    pub fn with_times(mut self, times: Vec<bool>) -> Self {
        self.times = times;
        self
    }

    /// Aggregate `i`'s `output` as an instant, when its values are
    /// instants and it has one.
    fn instant(&self, i: usize, output: &Output) -> Option<Timestamp> {
        instant(&self.times, i, output)
    }

    /// The rows, ordered.
    pub fn rows(&self) -> &[ResultRow<'a>] {
        &self.rows
    }

    /// The dimension values of `row`, one of [`Results::rows`].
    pub fn dims(&self, row: &ResultRow<'_>) -> Dims<'_> {
        Dims::of(row, &self.spans, &self.text)
    }
}

/// The order of `rows` by bucket, then dimension values (NULL first, text
/// by bytes), then their original position (a stable sort by (bucket,
/// dims)), up to runs of equal keys: each row's index in that order and
/// whether its key differs from the previous row's. [`sort_ties`]
/// finishes the runs.
///
/// The dimension values compare as the byte order of an encoding in which
/// NULL is `00` and a value is `01`, its bytes with `00` escaped as
/// `00 ff`, then `00 00` (a value's encoding is never a prefix of a larger
/// value's). Each row gets a 24-byte key once: its bucket (sign bit
/// flipped, so unsigned order is signed order) and the first 16 bytes of
/// its encoding. The keys are ordered by a stable least-significant-digit
/// radix sort, so rows with equal keys stay in input order, and only such
/// runs (dimension values longer than the prefix) are then sorted by their
/// values, stably. Query 2A's 8-byte IP prefixes never reach the values.
///
/// Most keys use few of the 256 values of few of their 24 bytes (the
/// padding of short keys and a summary's single bucket never vary; an IP
/// prefix's bytes are digits and dots). Numbering the values each varying
/// byte takes, in order, makes every key a mixed-radix number that orders
/// as the key does ([`Compact`]): Query 2A's 1.45M keys fit 28 bits, and
/// three passes over 8-byte codes sort them, where a byte at a time over
/// the 28-byte keys took eight. Keys that do not fit 64 bits with their
/// row's index take the byte-at-a-time sort.
fn key_order(rows: &[ResultRow<'_>], spans: &[Span], text: &str) -> Vec<(u32, bool)> {
    let keys: Vec<[u8; KEY_BYTES]> = rows
        .iter()
        .map(|row| {
            let mut bytes = [0u8; KEY_BYTES];
            bytes[..16].copy_from_slice(&prefix(Dims::of(row, spans, text)).to_le_bytes());
            bytes[16..].copy_from_slice(&(row.bucket.0.cast_unsigned() ^ (1 << 63)).to_le_bytes());
            bytes
        })
        .collect();
    match Compact::of(&keys) {
        Some(compact) => compact.sort(&keys),
        None => sort_keys(keys),
    }
}

/// The last step of [`key_order`]'s sort: sorts each run of rows with
/// equal keys (`order` as [`key_order`] gave it, `rows` gathered in that
/// order) by their dimension values, stably.
fn sort_ties(rows: &mut [ResultRow<'_>], order: &[(u32, bool)], spans: &[Span], text: &str) {
    let dims = |row: &ResultRow<'_>| Dims::of(row, spans, text);
    let mut start = 0;
    while start < order.len() {
        let end = start
            + 1
            + order[start + 1..]
                .iter()
                .take_while(|(_, new)| !new)
                .count();
        if end - start > 1 {
            rows[start..end].sort_by(|x, y| dims(x).bytes().cmp(dims(y).bytes()));
        }
        start = end;
    }
}

/// Bytes of a row's sort key (see [`key_order`]), least significant
/// first: 0..16 the dimensions' prefix, 16..24 the bucket.
const KEY_BYTES: usize = 24;

/// The byte-at-a-time sort of [`key_order`]: each row's index in key
/// order, and whether its key differs from the previous row's.
fn sort_keys(keys: Vec<[u8; KEY_BYTES]>) -> Vec<(u32, bool)> {
    #[derive(Clone, Copy)]
    struct Key {
        bytes: [u8; KEY_BYTES],
        row: u32,
    }
    let mut keys: Vec<Key> = keys
        .into_iter()
        .enumerate()
        .map(|(row, bytes)| Key {
            bytes,
            row: u32::try_from(row).expect("fewer than 2^32 rows"),
        })
        .collect();
    let mut counts = vec![[0u32; 256]; KEY_BYTES];
    for key in &keys {
        for (count, &byte) in counts.iter_mut().zip(&key.bytes) {
            count[usize::from(byte)] += 1;
        }
    }
    let mut other = keys.clone();
    for (i, count) in counts.iter().enumerate() {
        if count.iter().any(|&c| c as usize == keys.len()) {
            continue; // every key has the same byte here
        }
        let mut at = [0usize; 256];
        let mut sum = 0;
        for (slot, &c) in at.iter_mut().zip(count) {
            *slot = sum;
            sum += c as usize;
        }
        for key in &keys {
            let slot = &mut at[usize::from(key.bytes[i])];
            other[*slot] = *key;
            *slot += 1;
        }
        std::mem::swap(&mut keys, &mut other);
    }
    keys.iter()
        .enumerate()
        .map(|(i, key)| (key.row, i == 0 || keys[i - 1].bytes != key.bytes))
        .collect()
}

/// Sort keys as mixed-radix numbers: the bytes where keys differ, most
/// significant first, each replaced by its rank among the values that
/// byte takes. Ranks keep the order of byte values, so the numbers order
/// as the keys do, and equal keys get equal numbers.
struct Compact {
    /// The varying byte positions, most significant first, each with the
    /// rank of every byte value there and how many values occur.
    digits: Vec<(usize, [u8; 256], u64)>,
    /// Bits of a number (below 2^code_bits).
    code_bits: u32,
    /// Bits of a row index.
    row_bits: u32,
}

impl Compact {
    /// The numbering of `keys`, when each key's number and its row index
    /// fit 64 bits together.
    fn of(keys: &[[u8; KEY_BYTES]]) -> Option<Self> {
        const WORDS: usize = KEY_BYTES / 8;
        let word = |key: &[u8; KEY_BYTES], i: usize| {
            u64::from_le_bytes(key[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        };
        let first = keys.first()?;
        // The positions where some key differs from the first, most
        // significant first, then the values each takes there.
        let mut differ = [0u64; WORDS];
        for key in keys {
            for (i, differ) in differ.iter_mut().enumerate() {
                *differ |= word(key, i) ^ word(first, i);
            }
        }
        let varying: Vec<usize> = (0..KEY_BYTES)
            .rev()
            .filter(|&p| (differ[p / 8] >> (8 * (p % 8))) & 0xff != 0)
            .collect();
        let mut seen = vec![[0u64; 4]; varying.len()];
        for key in keys {
            for (seen, &position) in seen.iter_mut().zip(&varying) {
                let byte = key[position];
                seen[usize::from(byte >> 6)] |= 1 << (byte & 63);
            }
        }
        let row_bits = usize::BITS - keys.len().leading_zeros();
        let mut span: u128 = 1;
        let mut digits = Vec::with_capacity(varying.len());
        for (&position, seen) in varying.iter().zip(&seen) {
            let mut rank = [0u8; 256];
            let mut values: u64 = 0;
            for (value, rank) in rank.iter_mut().enumerate() {
                // At most 256 values, so a rank given is at most 255.
                *rank = u8::try_from(values.min(255)).expect("at most 255");
                values += (seen[value >> 6] >> (value & 63)) & 1;
            }
            span = span.checked_mul(u128::from(values))?;
            digits.push((position, rank, values));
        }
        let code_bits = 128 - (span - 1).leading_zeros();
        (code_bits + row_bits <= 64).then_some(Self {
            digits,
            code_bits,
            row_bits,
        })
    }

    /// [`sort_keys`] through the numbers: each row's index in key order,
    /// and whether its key differs from the previous row's.
    fn sort(&self, keys: &[[u8; KEY_BYTES]]) -> Vec<(u32, bool)> {
        let mut codes: Vec<u64> = keys
            .iter()
            .enumerate()
            .map(|(row, key)| {
                let code = self
                    .digits
                    .iter()
                    .fold(0u64, |code, (position, rank, values)| {
                        code * values + u64::from(rank[usize::from(key[*position])])
                    });
                code << self.row_bits | row as u64
            })
            .collect();
        radix_sort(&mut codes, self.row_bits, self.code_bits);
        let row_mask = (1u64 << self.row_bits) - 1;
        codes
            .iter()
            .enumerate()
            .map(|(i, &code)| {
                let row = u32::try_from(code & row_mask).expect("fewer than 2^32 rows");
                (
                    row,
                    i == 0 || codes[i - 1] >> self.row_bits != code >> self.row_bits,
                )
            })
            .collect()
    }
}

/// Bits of one pass of [`radix_sort`]: 2,048 counters, in the L1 cache.
const RADIX_BITS: u32 = 11;

/// Sorts `values` stably by their bits `low..low + bits`, least
/// significant digit first.
fn radix_sort(values: &mut Vec<u64>, low: u32, bits: u32) {
    let mut other = vec![0u64; values.len()];
    let mut shift = low;
    while shift < low + bits {
        let width = RADIX_BITS.min(low + bits - shift);
        let mask = (1u64 << width) - 1;
        // A digit is below 2^RADIX_BITS.
        #[allow(clippy::cast_possible_truncation)]
        let digit = |v: u64| ((v >> shift) & mask) as usize;
        let mut at = vec![0usize; 1 << width];
        for &v in values.iter() {
            at[digit(v)] += 1;
        }
        let mut sum = 0;
        for slot in &mut at {
            (*slot, sum) = (sum, sum + *slot);
        }
        for &v in values.iter() {
            let slot = &mut at[digit(v)];
            other[*slot] = v;
            *slot += 1;
        }
        std::mem::swap(values, &mut other);
        shift += width;
    }
}

/// The rows in `order` (from [`key_order`]). Each row is loaded
/// [`GATHER_AHEAD`] rows ahead, so the misses of a permutation of a
/// million rows overlap instead of coming one at a time. Their dimension
/// values stay where they are: the writers load them ahead as they go.
fn gather_rows<'a>(rows: &[ResultRow<'a>], order: &[(u32, bool)]) -> Vec<ResultRow<'a>> {
    let mut new_rows = Vec::with_capacity(rows.len());
    for i in 0..order.len() {
        if let Some(&(row, _)) = order.get(i + GATHER_AHEAD) {
            prefetch(&rows[row as usize]);
        }
        new_rows.push(rows[order[i].0 as usize]);
    }
    new_rows
}

/// How many rows ahead [`gather_rows`] starts loading a row.
const GATHER_AHEAD: usize = 16;

/// Rows ahead of the one being written whose states and dimension text a
/// writer starts loading (their spans twice as far ahead): a large
/// rollup's states, and the rows' text, are in group order, the rows in
/// key order.
const STATES_PREFETCH_ROWS: usize = 8;

/// The first 16 bytes of the order-preserving encoding of `dims` (see
/// [`key_order`]), zero-padded, as a big-endian integer.
fn prefix(dims: Dims<'_>) -> u128 {
    const LEN: usize = 16;
    let mut bytes = [0u8; LEN];
    let mut at = 0;
    for dim in dims.bytes() {
        // Here at < LEN.
        let Some(text) = dim else {
            at += 1; // NULL: 00
            if at >= LEN {
                break;
            }
            continue;
        };
        bytes[at] = 1;
        at += 1;
        let fits = text.len().min(LEN - at);
        if !text[..fits].contains(&0) {
            // No byte to escape: copy what fits at once.
            bytes[at..at + fits].copy_from_slice(&text[..fits]);
            at += fits;
        } else {
            for &b in text {
                if at >= LEN {
                    break;
                }
                bytes[at] = b;
                at += 1;
                if b == 0 && at < LEN {
                    bytes[at] = 0xff;
                    at += 1;
                }
            }
        }
        at += 2; // 00 00, or past the end when the text was cut
        if at >= LEN {
            break;
        }
    }
    u128::from_be_bytes(bytes)
}

/// What to add to file outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Add `<name>_hll` with each HyperLogLog as postgresql-hll hex.
    pub hll_hex: bool,
    /// Add `<name>_sketch` with each KLL quantile sketch and Theta sketch
    /// as its Apache DataSketches image (compact KLL doubles sketch,
    /// compact Theta sketch, serial version 3), in this encoding: what
    /// DataSketches' Java, C++ and Python `deserialize` read and merge.
    pub sketch_bytes: Option<SketchEncoding>,
}

/// How sketch images are written as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SketchEncoding {
    /// Lower-case hexadecimal, two digits a byte, no prefix.
    Hex,
    /// Standard base64 (RFC 4648, `+/`, padded).
    Base64,
}

impl SketchEncoding {
    /// `bytes` as text in this encoding.
    pub fn text(self, bytes: &[u8]) -> String {
        use base64::Engine as _;
        match self {
            SketchEncoding::Hex => {
                let mut out = String::with_capacity(bytes.len() * 2);
                for b in bytes {
                    let _ = write!(out, "{b:02x}");
                }
                out
            }
            SketchEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// A KLL or Theta state's DataSketches image in `encoding`; `None` for
/// any other state (a second quantile aggregate over the same sketch
/// shares the first's, and writes none of its own).
pub fn sketch_text(state: &AggState, encoding: SketchEncoding) -> Option<String> {
    use cardinal_sketch::Sketch as _;
    match state {
        AggState::Quantiles(q) => Some(encoding.text(&q.encode())),
        AggState::Theta(t) => Some(encoding.text(&t.encode())),
        _ => None,
    }
}

/// Whether aggregates of `kind` get a `<name>_sketch` column.
fn has_sketch(kind: &AggKind) -> bool {
    matches!(kind, AggKind::Quantiles { .. } | AggKind::Theta { .. })
}

/// The rows as an aligned text table, ordered by bucket and dimensions.
pub fn table(results: &Results<'_>) -> String {
    table_head(results, usize::MAX)
}

/// The first `max_rows` rows as an aligned text table (columns as wide as
/// those rows need), and when rows were left out a last line saying how
/// many: a table is for reading, files and JSON lines carry every row.
pub fn table_head(results: &Results<'_>, max_rows: usize) -> String {
    let columns = &results.columns;
    let mut header: Vec<String> = columns.bucket.iter().cloned().collect();
    header.extend(columns.dims.iter().cloned());
    header.extend(columns.aggs.iter().cloned());
    let mut cells: Vec<Vec<String>> = vec![header];
    for row in results.rows.iter().take(max_rows) {
        let mut line: Vec<String> = columns
            .bucket
            .iter()
            .map(|_| day_or_instant(row.bucket))
            .collect();
        line.extend(
            results
                .dims(row)
                .iter()
                .map(|d| d.map_or_else(|| "NULL".to_owned(), shown)),
        );
        line.extend((0..row.states.len()).map(|i| {
            let output = output_of(row.states, results.kinds, i);
            results
                .instant(i, &output)
                .map_or_else(|| human(&output), |t| t.to_string())
        }));
        cells.push(line);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|c| {
            cells
                .iter()
                .map(|line| line[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, line) in cells.iter().enumerate() {
        for (c, cell) in line.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            // Text left, numbers right, as people read tables.
            if c < columns.dims.len() + usize::from(columns.bucket.is_some()) {
                let _ = write!(out, "{cell}{:pad$}  ", "");
            } else {
                let _ = write!(out, "{:pad$}{cell}  ", "");
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        if i == 0 {
            let rule: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            out.push_str(&"-".repeat(rule));
            out.push('\n');
        }
    }
    let left_out = results.rows.len().saturating_sub(max_rows);
    if left_out > 0 {
        let _ = writeln!(
            out,
            "... {left_out} more row{}",
            if left_out == 1 { "" } else { "s" }
        );
    }
    out
}

/// Writes `dir/<summary>/YYYY-MM-DD.csv`, one file per UTC day of the rows'
/// buckets, each once and atomically. Returns the files written.
pub fn write_daily_csv(
    dir: &Path,
    summary: &str,
    results: &Results<'_>,
    options: Options,
) -> Result<Vec<PathBuf>> {
    let folder = join_under(dir, summary)?;
    std::fs::create_dir_all(&folder).map_err(|source| io(&folder, source))?;
    let header = csv_header(results, options);
    let rows = &results.rows;
    let mut written = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let day = rows[start].bucket.date();
        if results.columns.bucket.is_some() && !rows[start].bucket.is_in_range() {
            return Err(Error::BucketOutOfRange {
                bucket: rows[start].bucket.to_string(),
            });
        }
        let (end, name) = if results.columns.bucket.is_some() {
            let same_day = rows[start..]
                .iter()
                .take_while(|r| r.bucket.date() == day)
                .count();
            (
                start + same_day,
                format!("{:04}-{:02}-{:02}.csv", day.0, day.1, day.2),
            )
        } else {
            (rows.len(), "all.csv".to_string())
        };
        let path = folder.join(name);
        write_atomically(&path, |file| {
            // Written a chunk at a time: a million-row day is not held
            // whole (nor copied as its text grows).
            let mut body = String::with_capacity(CSV_CHUNK_BYTES + 4096);
            body.push_str(&header);
            for (at, row) in rows.iter().enumerate().take(end).skip(start) {
                if let Some(ahead) = rows.get(at + STATES_PREFETCH_ROWS) {
                    prefetch_lines(ahead.states);
                }
                if let Some(span) = rows
                    .get(at + 2 * STATES_PREFETCH_ROWS)
                    .and_then(|ahead| results.spans.get(ahead.first as usize))
                {
                    prefetch(span);
                }
                if let Some(ahead) = rows.get(at + STATES_PREFETCH_ROWS)
                    && ahead.count > 0
                    && let Some(byte) = results
                        .text
                        .as_bytes()
                        .get(results.spans[ahead.first as usize].start as usize)
                {
                    prefetch(byte);
                }
                push_csv_line(
                    &mut body,
                    row,
                    results.dims(row),
                    results.columns.bucket.is_some(),
                    results.kinds,
                    &results.times,
                    options,
                );
                if body.len() >= CSV_CHUNK_BYTES {
                    file.write_all(body.as_bytes())?;
                    body.clear();
                }
            }
            file.write_all(body.as_bytes())
        })?;
        written.push(path);
        start = end;
    }
    Ok(written)
}

/// Writes every row as CSV to `out`: the header, then one line per row,
/// with the columns and spelling of [`write_daily_csv`]'s files (a stream
/// rather than one file per day, for answers sent over a connection).
pub fn write_csv(out: &mut impl Write, results: &Results<'_>, options: Options) -> Result<()> {
    let mut body = String::with_capacity(4096);
    body.push_str(&csv_header(results, options));
    for row in &results.rows {
        push_csv_line(
            &mut body,
            row,
            results.dims(row),
            results.columns.bucket.is_some(),
            results.kinds,
            &results.times,
            options,
        );
        if body.len() >= CSV_CHUNK_BYTES {
            out.write_all(body.as_bytes())
                .map_err(|source| io(Path::new("-"), source))?;
            body.clear();
        }
    }
    out.write_all(body.as_bytes())
        .map_err(|source| io(Path::new("-"), source))
}

/// An estimate as the JSON object rows carry
/// (`{"value":..,"lower":..,"upper":..,"confidence":..}`), for answers
/// that are not rows (an overlap).
pub fn estimate_json(e: &Estimate) -> String {
    json_output(&Output::Estimate(*e))
}

/// Writes one JSON object per row to `out`.
pub fn write_json_lines(
    out: &mut impl Write,
    summary: &str,
    results: &Results<'_>,
    options: Options,
) -> Result<()> {
    let columns = &results.columns;
    for row in &results.rows {
        let mut line = format!("{{\"summary\":{}", json_string(summary.as_bytes()));
        if let Some(bucket) = &columns.bucket {
            let _ = write!(
                line,
                ",{}:\"{}\"",
                json_string(bucket.as_bytes()),
                row.bucket
            );
        }
        for (name, value) in columns.dims.iter().zip(results.dims(row).iter()) {
            let value = value.map_or_else(|| "null".to_string(), |v| json_string(v.as_bytes()));
            let _ = write!(line, ",{}:{value}", json_string(name.as_bytes()));
        }
        for (i, (name, state)) in columns.aggs.iter().zip(row.states).enumerate() {
            let _ = write!(line, ",{}:{}", json_string(name.as_bytes()), {
                let output = output_of(row.states, results.kinds, i);
                results
                    .instant(i, &output)
                    .map_or_else(|| json_output(&output), |t| format!("\"{t}\""))
            });
            if let (true, AggState::Hll(h)) = (options.hll_hex, state) {
                let _ = write!(
                    line,
                    ",{}:{}",
                    json_string(format!("{name}_hll").as_bytes()),
                    json_string(h.to_hex().as_bytes())
                );
            }
            if let Some(encoding) = options.sketch_bytes
                && has_sketch(&results.kinds[i])
                && let Some(text) = sketch_text(state, encoding)
            {
                let _ = write!(
                    line,
                    ",{}:{}",
                    json_string(format!("{name}_sketch").as_bytes()),
                    json_string(text.as_bytes())
                );
            }
        }
        line.push_str("}\n");
        out.write_all(line.as_bytes())
            .map_err(|source| io(Path::new("-"), source))?;
    }
    Ok(())
}

fn csv_header(results: &Results<'_>, options: Options) -> String {
    let columns = &results.columns;
    let mut fields: Vec<String> = columns.bucket.iter().cloned().collect();
    fields.extend(columns.dims.iter().cloned());
    // From the aggregates' kinds, not from a row: every row has the same
    // columns (an empty sketch's quantiles are empty fields).
    for (name, kind) in columns.aggs.iter().zip(results.kinds) {
        match kind {
            AggKind::Hll { .. } | AggKind::ExactDistinct | AggKind::Theta { .. } => {
                fields.extend([
                    name.clone(),
                    format!("{name}_lower"),
                    format!("{name}_upper"),
                ]);
            }
            // One asked rank (`approx_quantile(x, 0.5) AS p50`) is one column
            // under the alias; several get a column per rank.
            AggKind::Quantiles { .. } | AggKind::QuantilesOf { .. } => {
                match kind.ranks() {
                    [_] => fields.push(name.clone()),
                    ranks => {
                        fields.extend(ranks.iter().map(|rank| format!("{name}_p{}", rank * 100.0)))
                    }
                }
                fields.push(format!("{name}_rank_error"));
            }
            AggKind::CountAll
            | AggKind::Count
            | AggKind::Sum
            | AggKind::SumInt
            | AggKind::Avg
            | AggKind::Min
            | AggKind::MinInt
            | AggKind::Max
            | AggKind::MaxInt
            | AggKind::TopK { .. } => fields.push(name.clone()),
        }
        if options.hll_hex && matches!(kind, AggKind::Hll { .. }) {
            fields.push(format!("{name}_hll"));
        }
        if options.sketch_bytes.is_some() && has_sketch(kind) {
            fields.push(format!("{name}_sketch"));
        }
    }
    let mut line = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

/// Appends one row's CSV line to `out`: fields written in place, no
/// allocation per field (Query 2A writes 1.45M rows; building each field as
/// a `String` and joining them cost ~0.5 us a row).
fn push_csv_line(
    out: &mut String,
    row: &ResultRow<'_>,
    dims: Dims<'_>,
    bucket: bool,
    kinds: &[AggKind],
    times: &[bool],
    options: Options,
) {
    // Every field is followed by a comma; the last one becomes the newline.
    let start = out.len();
    if bucket {
        let _ = write!(out, "{},", row.bucket);
    }
    for d in dims.iter() {
        if let Some(d) = d {
            push_csv_field(out, d);
        }
        out.push(',');
    }
    for (i, state) in row.states.iter().enumerate() {
        let output = output_of(row.states, kinds, i);
        if let Some(t) = instant(times, i, &output) {
            let _ = write!(out, "{t},");
            continue;
        }
        match output {
            Output::Count(n) => {
                let _ = write!(out, "{n},");
            }
            Output::Number(v) => {
                if let Some(v) = v {
                    push_f64(out, v);
                }
                out.push(',');
            }
            Output::Int(v) => {
                if let Some(v) = v {
                    let _ = write!(out, "{v}");
                }
                out.push(',');
            }
            Output::Estimate(e) => {
                let _ = write!(out, "{:.0},{:.0},{:.0},", e.value, e.lower, e.upper);
            }
            Output::Quantiles { values, rank_error } => {
                for (_, v) in values {
                    if let Some(v) = v {
                        push_f64(out, v);
                    }
                    out.push(',');
                }
                push_f64(out, rank_error);
                out.push(',');
            }
            Output::TopK(items) => {
                let pairs: Vec<String> = items
                    .iter()
                    .map(|(name, e)| format!("{}:{}", topk_name(name), round(e.value)))
                    .collect();
                push_csv_field(out, &pairs.join("|"));
                out.push(',');
            }
        }
        if let (true, AggState::Hll(h)) = (options.hll_hex, state) {
            out.push_str(&h.to_hex());
            out.push(',');
        }
        if let Some(encoding) = options.sketch_bytes
            && has_sketch(&kinds[i])
        {
            if let Some(text) = sketch_text(state, encoding) {
                out.push_str(&text);
            }
            out.push(',');
        }
    }
    if out.len() > start {
        out.pop();
    }
    out.push('\n');
}

/// Bytes of CSV text a writer gathers before writing them to its file.
const CSV_CHUNK_BYTES: usize = 1 << 20;

/// Writes `path` through a temp file in the same directory that `write`
/// fills, synced, then renamed: the file appears whole or not at all.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    let temp = path.with_extension(format!("csv.tmp{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        write(&mut file)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(source) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(io(path, source));
    }
    Ok(())
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn day_or_instant(t: Timestamp) -> String {
    let text = t.to_string();
    match text.strip_suffix("T00:00:00Z") {
        Some(day) => day.to_string(),
        None => text,
    }
}

/// `output` as an instant when `times[i]` says aggregate `i` holds them.
fn instant(times: &[bool], i: usize, output: &Output) -> Option<Timestamp> {
    match *output {
        Output::Number(Some(ms)) if times.get(i).copied().unwrap_or(false) => {
            // An instant's milliseconds were an i64 before they were an
            // f64 (exactly: |ms| < 2^53 for every parsable time).
            #[allow(clippy::cast_possible_truncation)]
            Some(Timestamp(ms as i64))
        }
        _ => None,
    }
}

fn human(output: &Output) -> String {
    match output {
        Output::Count(n) => n.to_string(),
        Output::Number(None) => "NULL".to_string(),
        Output::Number(Some(v)) => readable(*v),
        Output::Int(None) => "NULL".to_string(),
        Output::Int(Some(v)) => v.to_string(),
        Output::Estimate(e) => estimate(e),
        Output::Quantiles { values, rank_error } => {
            let parts: Vec<String> = values
                .iter()
                .map(|(rank, v)| {
                    let v = v.map_or_else(|| "NULL".to_owned(), readable);
                    format!("p{}={v}", rank * 100.0)
                })
                .collect();
            if *rank_error == 0.0 {
                format!("{} (exact)", parts.join(" "))
            } else {
                format!("{} (rank ±{:.2}%)", parts.join(" "), rank_error * 100.0)
            }
        }
        Output::TopK(items) => items
            .iter()
            .map(|(name, e)| format!("{}:{}", shown(&text_escaped(name)), round(e.value)))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Text as a table cell: control characters (a quoted CSV field's
/// newline, a tab) escaped as Rust writes them (`\n`, `\t`, `\u{1b}`),
/// so that a cell stays on its line and in its column.
fn shown(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        text.to_owned()
    }
}

/// A number for a table: whole numbers without a fraction, two decimals
/// from 100 up, three from 1 up, four significant digits below 1 (a
/// revenue of 0.0015 must not read 0.00), scientific notation below a
/// millionth or from 10^15; trailing zeros dropped.
fn readable(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() || v == 0.0 {
        return format!("{v}");
    }
    if !(1e-6..1e15).contains(&a) {
        return format!("{v:.3e}");
    }
    if v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    let decimals = if a >= 100.0 {
        2
    } else {
        // Digits after the point for four significant ones: 3 from 1 up,
        // 4 from 0.1, 5 from 0.01, ...
        let mut decimals = 3;
        let mut scale = 1.0;
        while a < scale && decimals < 9 {
            scale /= 10.0;
            decimals += 1;
        }
        decimals
    };
    let text = format!("{v:.decimals$}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn estimate(e: &Estimate) -> String {
    if e.is_exact() {
        round(e.value)
    } else if e.below_detection_limit() {
        format!("below detection (<= {})", round(e.upper))
    } else {
        format!("{} ±{}", round(e.value), round((e.upper - e.lower) / 2.0))
    }
}

fn round(v: f64) -> String {
    format!("{v:.0}")
}

fn csv_field(text: &str) -> String {
    let mut out = String::new();
    push_csv_field(&mut out, text);
    out
}

/// Appends `text` as one CSV field: quoted (quotes doubled) when it holds
/// a comma, a quote or a line break.
fn push_csv_field(out: &mut String, text: &str) {
    if text
        .bytes()
        .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
    {
        out.push('"');
        out.push_str(&text.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(text);
    }
}

fn json_output(output: &Output) -> String {
    match output {
        Output::Count(n) => n.to_string(),
        Output::Number(None) => "null".to_string(),
        Output::Number(Some(v)) => json_number(*v),
        Output::Int(None) => "null".to_string(),
        Output::Int(Some(v)) => v.to_string(),
        Output::Estimate(e) => format!(
            "{{\"value\":{},\"lower\":{},\"upper\":{},\"confidence\":{}}}",
            json_number(e.value),
            json_number(e.lower),
            json_number(e.upper),
            json_number(e.confidence)
        ),
        Output::Quantiles { values, rank_error } => {
            let mut parts: Vec<String> = values
                .iter()
                .map(|(rank, v)| {
                    let v = v.map_or_else(|| "null".to_owned(), json_number);
                    format!("\"p{}\":{v}", rank * 100.0)
                })
                .collect();
            parts.push(format!("\"rank_error\":{}", json_number(*rank_error)));
            format!("{{{}}}", parts.join(","))
        }
        Output::TopK(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|(name, e)| {
                    format!(
                        "[{},{}]",
                        json_string(text_escaped(name).as_bytes()),
                        json_number(e.value)
                    )
                })
                .collect();
            format!("[{}]", parts.join(","))
        }
    }
}

/// `v` as a JSON value: a number, or for an infinity or NaN (which JSON
/// numbers cannot be) its CSV spelling as a string, `"inf"`, `"-inf"`
/// or `"NaN"`, as PostgreSQL's `to_json` quotes its own.
fn json_number(v: f64) -> String {
    let mut out = String::new();
    if v.is_finite() {
        push_f64(&mut out, v);
    } else {
        let _ = write!(out, "\"{v}\"");
    }
    out
}

/// Magnitudes printed positionally, as ECMAScript's `Number::toString`
/// (and so `JSON.stringify`) chooses: from 1e-7 up to 1e21. Outside them
/// a value is printed with an exponent (`1e+21`, `1.5e-7`), so that
/// 1e-300 is not three hundred zeros. Sums and prices are inside.
const POSITIONAL_MIN: f64 = 1e-7;
/// See [`POSITIONAL_MIN`].
const POSITIONAL_MAX: f64 = 1e21;

/// Appends `v` in the fewest digits that read back as `v`: positionally
/// as `format!("{v}")` does for magnitudes in
/// [`POSITIONAL_MIN`]`..`[`POSITIONAL_MAX`] (and 0), else as
/// `d.ddde±x`, as ECMAScript prints numbers. Infinities and NaN as
/// `Display` spells them (`inf`, `-inf`, `NaN`: PostgreSQL's and DuckDB's
/// CSV readers take them). The digits are zmij's: formatting through
/// `core::fmt` took ~800 instructions per value, 10% of Query 2A's
/// (callgrind), zmij a tenth. Where two strings of that length read back
/// as `v` (one value in 4,000 of random 64-bit patterns, none of Query
/// 2A's 1.45M sums), the last digit may differ from `Display`'s; the tests
/// check that every value reads back exactly, with as many digits as
/// `Display` prints.
fn push_f64(out: &mut String, v: f64) {
    if !v.is_finite() || v == 0.0 {
        let _ = write!(out, "{v}");
        return;
    }
    let mut buffer = zmij::Buffer::new();
    let printed = buffer.format_finite(v);
    let text = printed.as_bytes();
    let positional = (POSITIONAL_MIN..POSITIONAL_MAX).contains(&v.abs());
    if positional && !text.contains(&b'e') {
        // Positional already; an integer has a ".0" that Display omits.
        out.push_str(printed.strip_suffix(".0").unwrap_or(printed));
        return;
    }
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, exponent) = match text.iter().position(|&b| b == b'e') {
        Some(at) => {
            let exponent = std::str::from_utf8(&text[at + 1..])
                .ok()
                .and_then(|e| e.trim_start_matches('+').parse::<i32>().ok())
                .expect("zmij writes a decimal exponent");
            (&text[..at], exponent)
        }
        None => (text, 0),
    };
    // The value is 0.DIGITS x 10^point.
    let dot = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len());
    let mut point = i32::try_from(dot).expect("a short mantissa") + exponent;
    // At most 17 significant digits, and a zero before the point.
    let mut kept = [0u8; 24];
    let mut len = 0;
    for &b in mantissa.iter().filter(|&&b| b != b'.') {
        kept[len] = b;
        len += 1;
    }
    let leading = kept[..len].iter().take_while(|&&b| b == b'0').count();
    point -= i32::try_from(leading).expect("a short mantissa");
    while len > leading && kept[len - 1] == b'0' {
        len -= 1;
    }
    let digits = std::str::from_utf8(&kept[leading..len]).expect("ASCII digits");
    if negative {
        out.push('-');
    }
    let len = i32::try_from(digits.len()).expect("a short mantissa");
    if !positional {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e{:+}", point - 1);
    } else if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(digits);
    } else if point >= len {
        out.push_str(digits);
        out.extend(std::iter::repeat_n(
            '0',
            (point - len).unsigned_abs() as usize,
        ));
    } else {
        let (whole, fraction) = digits.split_at(point.unsigned_abs() as usize);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    }
}

/// Appends `bytes` to `out` as text that tells every byte string apart:
/// valid UTF-8 as itself, but a backslash as `\\`; each byte that is not
/// part of valid UTF-8 as `\xNN` (two lower-case hex digits). So `caf\xe9`
/// is the Latin-1 byte string `caf` 0xE9, `caf\\xe9` the UTF-8 text
/// `caf\xe9`, and no two byte strings give the same text, which
/// replacing invalid bytes with U+FFFD (as [`String::from_utf8_lossy`]
/// does) cannot promise. Dimension values and top-k names are written so.
///
/// ```
/// let mut out = String::new();
/// cardinal_export::push_text_escaped(&mut out, b"a\\b\xff\xc3");
/// assert_eq!(out, "a\\\\b\\xff\\xc3");
/// ```
pub fn push_text_escaped(out: &mut String, bytes: &[u8]) {
    if bytes.is_ascii() && !bytes.contains(&b'\\') {
        // SAFETY: ASCII bytes are UTF-8. (`str::from_utf8` checked
        // them again at ~12 instructions a byte: 5% of Query 2A's
        // output of 1.45M IP prefixes.)
        out.push_str(unsafe { std::str::from_utf8_unchecked(bytes) });
        return;
    }
    push_text_escaped_slow(out, bytes);
}

/// [`push_text_escaped`] of text with a backslash or a non-ASCII byte.
#[cold]
fn push_text_escaped_slow(out: &mut String, bytes: &[u8]) {
    let before = out.len();
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        let mut rest = valid;
        while let Some(at) = rest.find('\\') {
            out.push_str(&rest[..at]);
            out.push_str("\\\\");
            rest = &rest[at + 1..];
        }
        out.push_str(rest);
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    // Every byte is written as at least itself.
    debug_assert!(out.len() - before >= bytes.len());
}

/// A top-k name in a CSV cell `name:count|name:count`: escaped as
/// [`push_text_escaped`] does, and a `|` written `\x7c` (a byte that is
/// valid UTF-8 is otherwise never written so), so a reader splits the
/// cell on `|`, takes the count after each pair's last `:` (the count is
/// digits, so a `:` in a name needs no escape), and gives the name back
/// with [`text_unescaped`].
fn topk_name(bytes: &[u8]) -> String {
    text_escaped(bytes).replace('|', "\\x7c")
}

/// The bytes a text printed by [`push_text_escaped`] (or a top-k name)
/// stands for: `\\` is a backslash, `\xNN` the byte `NN`; `None` for a
/// text no escaping prints (a lone backslash, a bad hex pair).
///
/// ```
/// assert_eq!(cardinal_export::text_unescaped("caf\\xe9 a\\\\b").as_deref(), Some(&b"caf\xe9 a\\b"[..]));
/// ```
pub fn text_unescaped(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes.get(i + 1)? {
            b'\\' => {
                out.push(b'\\');
                i += 2;
            }
            b'x' => {
                let hex = std::str::from_utf8(bytes.get(i + 2..i + 4)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 4;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// `bytes` escaped as [`push_text_escaped`] does, in a new string.
pub fn text_escaped(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    push_text_escaped(&mut out, bytes);
    out
}

/// `bytes` as a quoted JSON string (invalid UTF-8 replaced), for writers of
/// other JSON lines.
pub fn json_string(bytes: &[u8]) -> String {
    format!("\"{}\"", json_escape(&String::from_utf8_lossy(bytes)))
}

fn json_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cardinal_rollup::{Input, Ranks};

    #[test]
    fn table_numbers_keep_small_values_readable() {
        for (v, want) in [
            (0.0, "0"),
            (12.0, "12"),
            (-3.0, "-3"),
            (0.0015, "0.0015"),
            (0.5015, "0.5015"),
            (0.002_463_7, "0.002464"),
            (4.567_89, "4.568"),
            (12_345.678, "12345.68"),
            (0.5, "0.5"),
            (1e-9, "1.000e-9"),
            (2e15, "2.000e15"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(readable(v), want, "{v}");
        }
    }

    #[test]
    fn instants_print_as_timestamps_where_flagged() {
        let number = Output::Number(Some(1_793_491_201_000.0));
        assert_eq!(
            instant(&[false, true], 1, &number),
            Some(Timestamp(1_793_491_201_000))
        );
        assert_eq!(instant(&[false, true], 0, &number), None);
        assert_eq!(instant(&[], 0, &number), None);
        assert_eq!(instant(&[true], 0, &Output::Number(None)), None);
    }
    use proptest::prelude::*;

    fn pushed(v: f64) -> String {
        let mut out = String::new();
        push_f64(&mut out, v);
        out
    }

    #[test]
    fn floats_print_as_display_does_between_the_bounds() {
        for v in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.1,
            1.5e-7,
            1e-7,
            1e16,
            9.99e20,
            123.456,
            1e-5,
            0.30000000000000004,
            100.0,
            1.1885166e-4,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(pushed(v), format!("{v}"), "{v:e}");
        }
    }

    #[test]
    fn floats_outside_the_bounds_print_with_an_exponent() {
        for (v, want) in [
            (1e21, "1e+21"),
            (-1.5e300, "-1.5e+300"),
            (9.9e-8, "9.9e-8"),
            (1e-300, "1e-300"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (123_456_789_012_345_680_000_000.0, "1.2345678901234569e+23"),
        ] {
            assert_eq!(pushed(v), want, "{v:e}");
        }
    }

    /// `v` printed reads back as `v`, in as many characters as `Display`
    /// prints between the bounds (the same notation, the same number of
    /// digits), or as `LowerExp` with the exponent's sign outside them.
    fn check_float(v: f64) -> Result<(), TestCaseError> {
        let ours = pushed(v);
        if v.is_nan() {
            prop_assert_eq!(ours, "NaN");
            return Ok(());
        }
        prop_assert_eq!(
            ours.parse::<f64>().map(f64::to_bits),
            Ok(v.to_bits()),
            "{}",
            ours
        );
        let like =
            if v == 0.0 || !v.is_finite() || (POSITIONAL_MIN..POSITIONAL_MAX).contains(&v.abs()) {
                format!("{v}")
            } else {
                let exp = format!("{v:e}");
                if exp.contains("e-") {
                    exp
                } else {
                    exp.replace('e', "e+")
                }
            };
        prop_assert_eq!(ours.len(), like.len(), "{} against {}", ours, like);
        Ok(())
    }

    proptest! {
        /// Any bit pattern, and values with few digits at any scale.
        #[test]
        fn float_bits_print_back_exactly(bits: u64, digits in 0u32..100_000, scale in -30i32..30) {
            check_float(f64::from_bits(bits))?;
            let w = f64::from(digits) * 10f64.powi(scale);
            check_float(w)?;
            // Few digits: the shortest string is unique, so it is Display's.
            if (POSITIONAL_MIN..POSITIONAL_MAX).contains(&w.abs()) {
                prop_assert_eq!(pushed(w), format!("{w}"));
            }
        }
    }

    #[test]
    fn non_finite_json_numbers_are_strings() {
        assert_eq!(json_number(f64::INFINITY), "\"inf\"");
        assert_eq!(json_number(f64::NEG_INFINITY), "\"-inf\"");
        assert_eq!(json_number(f64::NAN), "\"NaN\"");
        assert_eq!(json_number(2.5), "2.5");
    }

    /// The whole order-preserving encoding of `dims` (see [`key_order`]).
    fn encoding(dims: &[Option<String>]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for dim in dims {
            match dim {
                None => bytes.push(0),
                Some(text) => {
                    bytes.push(1);
                    for &b in text.as_bytes() {
                        if b == 0 {
                            bytes.extend_from_slice(&[0, 0xff]);
                        } else {
                            bytes.push(b);
                        }
                    }
                    bytes.extend_from_slice(&[0, 0]);
                }
            }
        }
        bytes
    }

    #[test]
    fn rows_keep_text_numbers_and_nulls() {
        let mut rows = Rows::default();
        rows.push(Timestamp(0), &[]);
        rows.push_bytes(b"a\xffb");
        rows.push_null();
        rows.push_with(|text| {
            let _ = write!(text, "{}", -42);
        });
        rows.push_bytes(b"plain");
        let dims = Dims {
            spans: &rows.spans,
            text: &rows.text,
        };
        assert_eq!(
            dims.to_vec(),
            [
                // Escaped, not replaced: see `push_text_escaped`.
                Some("a\\xffb".to_owned()),
                None,
                Some("-42".to_owned()),
                Some("plain".to_owned())
            ]
        );
    }

    #[test]
    fn csv_lines_quote_what_needs_it_and_leave_nulls_empty() {
        let mut rows = Rows::default();
        rows.push(Timestamp(0), &[]);
        rows.push_bytes(b"a,b");
        rows.push_null();
        rows.push_bytes(b"say \"hi\"");
        rows.push(Timestamp(0), &[]);
        rows.push_bytes(b"plain");
        rows.push_bytes(b"");
        rows.push_bytes(b"x\ny");
        let columns = Columns {
            bucket: None,
            dims: vec!["p".into(), "q".into(), "r".into()],
            aggs: Vec::new(),
        };
        let results = Results::new(columns, &[], rows).expect("consistent");
        let dir = std::env::temp_dir().join(format!("cardinal-export-csv-{}", std::process::id()));
        let written = write_daily_csv(&dir, "s", &results, Options::default()).expect("write");
        let text = std::fs::read_to_string(&written[0]).expect("read");
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            text,
            "p,q,r\n\"a,b\",,\"say \"\"hi\"\"\"\nplain,,\"x\ny\"\n"
        );
    }

    #[test]
    fn a_group_with_an_empty_sketch_has_every_column() {
        let kinds = [
            AggKind::Sum,
            AggKind::Quantiles {
                k: 200,
                ranks: Ranks::new(&[0.5]).expect("valid"),
            },
            AggKind::Quantiles {
                k: 200,
                ranks: Ranks::default(),
            },
        ];
        // Group "a" has only a NULL and sorts first: a header taken from
        // the first row would miss the ranks' columns.
        let groups: [(&str, &[Input<'_>]); 2] = [
            ("a", &[Input::Null]),
            ("b", &[Input::Number(2.0), Input::Number(4.0)]),
        ];
        let states: Vec<Vec<AggState>> = groups
            .iter()
            .map(|(_, inputs)| {
                kinds
                    .iter()
                    .map(|kind| {
                        let mut state = kind.state().expect("valid");
                        for &input in *inputs {
                            state.fold(kind, input);
                        }
                        state
                    })
                    .collect()
            })
            .collect();
        let mut rows = Rows::default();
        for ((d, _), states) in groups.iter().zip(&states) {
            rows.push_row(Timestamp(0), &[Some(d)], states);
        }
        let columns = Columns {
            bucket: None,
            dims: vec!["d".into()],
            aggs: vec!["s".into(), "p50".into(), "q".into()],
        };
        let results = Results::new(columns, &kinds, rows).expect("consistent");
        let dir =
            std::env::temp_dir().join(format!("cardinal-export-empty-{}", std::process::id()));
        let written = write_daily_csv(&dir, "s", &results, Options::default()).expect("write");
        let text = std::fs::read_to_string(&written[0]).expect("read");
        std::fs::remove_dir_all(&dir).expect("clean up");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "d,s,p50,p50_rank_error,q_p50,q_p90,q_p99,q_rank_error"
        );
        assert!(lines.iter().all(|l| l.split(',').count() == 8), "{text}");
        // An empty sketch answers NULL, exactly (a rank error of 0).
        assert!(lines[1].starts_with("a,,,0,"), "{text}");
        assert!(lines[2].starts_with("b,6,"), "{text}");

        let mut json = Vec::new();
        write_json_lines(&mut json, "s", &results, Options::default()).expect("write");
        let json = String::from_utf8(json).expect("UTF-8");
        let first: serde_json::Value =
            serde_json::from_str(json.lines().next().expect("a line")).expect("valid JSON");
        assert_eq!(first["s"], serde_json::Value::Null);
        assert_eq!(first["p50"]["p50"], serde_json::Value::Null);
        assert_eq!(first["q"]["p99"], serde_json::Value::Null);
        assert_eq!(first["q"]["rank_error"].as_f64(), Some(0.0));

        let table = table(&results);
        assert!(table.contains("p50=NULL p90=NULL p99=NULL"), "{table}");
    }

    #[test]
    fn table_cells_escape_control_characters() {
        let mut rows = Rows::default();
        rows.push(Timestamp(0), &[]);
        rows.push_bytes(b"multi\nline\tcell");
        let columns = Columns {
            bucket: None,
            dims: vec!["d".into()],
            aggs: Vec::new(),
        };
        let results = Results::new(columns, &[], rows).expect("consistent");
        assert_eq!(
            table(&results),
            "d\n-----------------\nmulti\\nline\\tcell\n"
        );
    }

    proptest! {
        #[test]
        fn prefix_is_the_encodings_first_16_bytes(
            dims in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(
                    prop_oneof![Just('\0'), Just('a'), Just('ÿ')], 0..20,
                ).prop_map(|c| c.into_iter().collect::<String>())),
                0..4,
            )
        ) {
            let mut rows = Rows::default();
            let refs: Vec<Option<&str>> = dims.iter().map(Option::as_deref).collect();
            rows.push_row(Timestamp(0), &refs, &[]);
            let got = prefix(Dims { spans: &rows.spans, text: &rows.text });
            let mut want = [0u8; 16];
            let full = encoding(&dims);
            let n = full.len().min(16);
            want[..n].copy_from_slice(&full[..n]);
            prop_assert_eq!(got, u128::from_be_bytes(want));
        }

        /// Sorting keys as mixed-radix numbers gives the byte-at-a-time
        /// sort's order and runs of equal keys, on keys of a few values
        /// per byte (which fit 64 bits) and of any bytes (which mostly do
        /// not, and then take the byte-at-a-time sort).
        #[test]
        fn compact_keys_sort_as_bytes_do(
            narrow in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(0u8), Just(7), Just(0x80), Just(0xff)], KEY_BYTES),
                1..200,
            ),
            wide in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, KEY_BYTES), 1..200),
        ) {
            let key = |bytes: &Vec<u8>| <[u8; KEY_BYTES]>::try_from(bytes.as_slice()).expect("24 bytes");
            let narrow: Vec<[u8; KEY_BYTES]> = narrow.iter().map(key).collect();
            let wide: Vec<[u8; KEY_BYTES]> = wide.iter().map(key).collect();
            // Four values in each of 24 bytes: 48 bits, with 8 of row.
            let compact = Compact::of(&narrow).expect("few values per byte fit 64 bits");
            prop_assert_eq!(compact.sort(&narrow), sort_keys(narrow.clone()));
            if let Some(compact) = Compact::of(&wide) {
                prop_assert_eq!(compact.sort(&wide), sort_keys(wide.clone()));
            }
        }
    }

    #[test]
    fn keys_of_many_values_per_byte_take_the_byte_sort() {
        let keys: Vec<[u8; KEY_BYTES]> = (0..=255u8).map(|b| [b; KEY_BYTES]).collect();
        assert!(Compact::of(&keys).is_none());
        let order = sort_keys(keys.clone());
        assert!(
            order
                .iter()
                .enumerate()
                .all(|(i, &(row, new))| row as usize == i && new)
        );
    }
}
