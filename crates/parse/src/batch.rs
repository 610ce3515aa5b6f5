//! A batch: one chunk of input bytes plus where each record's fields are.
//!
//! Parsing copies nothing that it does not have to. The chunk's bytes stay
//! where the source put them, and each record is a row of `width` spans
//! (one per schema column) into those bytes:
//!
//! ```text
//!   chunk   |2026-11-01T00:00:07Z,42,impression,"say ""hi""",0.002\n...
//!            ^0                  ^21 ^24        ^35
//!   fields  | 0+20 | 21+2 | 24+10 | side 0+8 | 48+5 | <- record 0, width 5
//!           | ...                                   | <- record 1
//!   side    |say "hi"|          unescaped text only
//!   starts  | 0 | ...           byte offset of each record in the chunk
//!   lines   | 0 | ...           line index of each record in the chunk
//! ```
//!
//! A span is 8 bytes, `start: u32, len: u32`. The top bit of `len` says the
//! bytes are in the side buffer rather than the chunk; `start == u32::MAX`
//! marks an absent field (a JSON path that is missing or `null`, a CSV
//! column the header lacks). 32-bit offsets are enough because a chunk holds
//! at most `LINE_BYTES_MAX + CHUNK_BYTES_MAX` (2 MiB) and the side buffer
//! holds at most as many bytes as the chunk (unescaping only shrinks text,
//! and `\u` escapes write no more UTF-8 bytes than their six characters).
//!
//! Only two kinds of field go to the side buffer: a quoted CSV field with a
//! doubled quote (`""`) and a JSON string with a backslash escape. A quoted
//! CSV field without one is a span between its quotes.
//!
//! Every vector is cleared, never freed, when the next chunk is parsed, so a
//! batch reused across chunks stops allocating once it has seen the largest
//! chunk. Per record that costs `8 * width + 8` bytes of spans; the
//! impressions stream (8 columns, ~87 bytes per CSV line) keeps about 0.8
//! bytes of spans per input byte.
//!
//! Rejected records leave no spans: their partial row is truncated away and
//! a [`Reject`] is appended instead, so `record(i)` indexes only good ones.

// Maintainer note: `Span`'s encoding (SIDE bit, ABSENT) is read in one
// place, `Batch::field`; the writers are the two parsers. The 2^31 bound it
// relies on is asserted in `Batch::begin` against the chunk length; if
// cardinal-source's CHUNK_BYTES_MAX or LINE_BYTES_MAX grow past 1 GiB, the
// spans must widen.

use std::sync::Arc;

use cardinal_event::Record;
use cardinal_source::Chunk;

/// Where one field's bytes are: in the chunk or in the side buffer, or
/// absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

/// The `len` bit that means "in the side buffer".
const SIDE: u32 = 1 << 31;

/// The largest chunk a batch accepts (spans are 31-bit).
pub(crate) const BATCH_BYTES_MAX: usize = (1 << 31) - 1;

impl Span {
    /// An absent field.
    pub(crate) const ABSENT: Span = Span {
        start: u32::MAX,
        len: 0,
    };

    /// Bytes `start..end` of the chunk.
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn chunk(start: usize, end: usize) -> Span {
        // Both are below BATCH_BYTES_MAX, asserted once per chunk in
        // `Batch::begin`, so the casts cannot truncate.
        debug_assert!(start <= end);
        debug_assert!(end <= BATCH_BYTES_MAX);
        Span {
            start: start as u32,
            len: (end - start) as u32,
        }
    }

    /// The bytes this span names, given the chunk and the side buffer;
    /// `None` when absent.
    #[inline]
    pub(crate) fn resolve<'a>(self, chunk: &'a [u8], side: &'a [u8]) -> Option<&'a [u8]> {
        if self.start == u32::MAX {
            return None;
        }
        let start = self.start as usize;
        if self.len & SIDE != 0 {
            side.get(start..start + (self.len & !SIDE) as usize)
        } else {
            chunk.get(start..start + self.len as usize)
        }
    }

    /// Bytes `start..end` of the side buffer.
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn side(start: usize, end: usize) -> Span {
        assert!(start <= end);
        assert!(end <= BATCH_BYTES_MAX, "side buffer outgrew 31-bit spans");
        Span {
            start: start as u32,
            len: (end - start) as u32 | SIDE,
        }
    }
}

/// Why a record was rejected. Fieldless and `Copy`, so an ingest loop can
/// keep one counter per reason in an array ([`RejectReason::index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// More than [`FIELDS_MAX`](crate::FIELDS_MAX) fields.
    #[error("more than FIELDS_MAX fields")]
    FieldsMax,
    /// More than [`RECORD_BYTES_MAX`](crate::RECORD_BYTES_MAX) bytes.
    #[error("record longer than RECORD_BYTES_MAX bytes")]
    RecordBytesMax,
    /// Fewer fields than columns (CSV, with [`Missing::Reject`](crate::Missing)).
    #[error("fewer fields than columns")]
    TooFewFields,
    /// More fields than columns (CSV, with [`Extra::Reject`](crate::Extra)).
    #[error("more fields than columns")]
    TooManyFields,
    /// A quoted CSV field that is not closed in the chunk.
    #[error("quoted field not closed")]
    UnterminatedQuote,
    /// Text between a closing quote and the next delimiter.
    #[error("text after a closing quote")]
    TextAfterQuote,
    /// A JSON line that is not an object.
    #[error("JSON record is not an object")]
    NotAnObject,
    /// Malformed JSON.
    #[error("malformed JSON")]
    JsonSyntax,
    /// A malformed JSON string escape, or a lone UTF-16 surrogate.
    #[error("malformed JSON string escape")]
    BadEscape,
    /// A JSON object or array where a column wants a scalar.
    #[error("object or array where a scalar column is declared")]
    NotScalar,
    /// JSON nested deeper than [`DEPTH_MAX`](crate::DEPTH_MAX).
    #[error("JSON nested deeper than DEPTH_MAX")]
    DepthMax,
    /// A JSON object that repeats a key the schema reads (a column's key,
    /// or a key on the path to one): which value is meant is ambiguous.
    #[error("JSON object repeats a key the schema reads")]
    DuplicateKey,
    /// A JSON string that is not UTF-8 (RFC 8259 §8.1).
    #[error("JSON string is not UTF-8")]
    InvalidUtf8,
}

impl RejectReason {
    /// Every reason, in [`index`](Self::index) order.
    pub const ALL: [RejectReason; 13] = [
        Self::FieldsMax,
        Self::RecordBytesMax,
        Self::TooFewFields,
        Self::TooManyFields,
        Self::UnterminatedQuote,
        Self::TextAfterQuote,
        Self::NotAnObject,
        Self::JsonSyntax,
        Self::BadEscape,
        Self::NotScalar,
        Self::DepthMax,
        Self::DuplicateKey,
        Self::InvalidUtf8,
    ];

    /// A dense index in `0..ALL.len()`, for arrays of counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A rejected record: where it was and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The input's name (shared with the chunk: no copy).
    pub input: Arc<str>,
    /// The 1-based line the record starts on, when the reader knows line
    /// numbers (a byte range after the first does not).
    pub line: Option<u64>,
    /// The byte offset of the record's first byte in the input.
    pub offset: u64,
    /// The 0-based schema column (CSV: file column) at fault, when one is.
    pub column: Option<usize>,
    /// That column's name in the schema, when it is one of its columns
    /// (a CSV file column past the header's, or one the schema does not
    /// declare, has none).
    pub name: Option<Arc<str>>,
    /// NDJSON: the keys, joined by `.`, of the member where the record
    /// went wrong (`user.geo.state`; inside a value the schema does not
    /// read, the member's key at the last level the schema knows), when
    /// the fault is inside a member.
    pub path: Option<Arc<str>>,
    /// Why.
    pub reason: RejectReason,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.input)?,
            None => write!(f, "{}:@{}", self.input, self.offset)?,
        }
        if let Some(column) = self.column {
            write!(f, ": column {}", column + 1)?;
            if let Some(name) = &self.name {
                write!(f, " ({name})")?;
            }
        }
        if let Some(path) = &self.path {
            write!(f, ": at {path}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// One chunk of input and its parsed records, reused from chunk to chunk.
#[derive(Debug, Default)]
pub struct Batch {
    pub(crate) chunk: Chunk,
    pub(crate) width: usize,
    /// `width` spans per record, record after record.
    pub(crate) fields: Vec<Span>,
    /// Byte offset of each record in the chunk.
    pub(crate) starts: Vec<u32>,
    /// Line index of each record in the chunk (0 for the chunk's first line).
    pub(crate) lines: Vec<u32>,
    /// Unescaped text.
    pub(crate) side: Vec<u8>,
    pub(crate) rejects: Vec<Reject>,
}

impl Batch {
    /// An empty batch; its buffers grow to the largest chunk it sees.
    pub fn new() -> Self {
        Self::default()
    }

    /// The chunk to fill before parsing (with
    /// `cardinal_source::LineReader::read_chunk` or [`Chunk::set`]).
    pub fn chunk_mut(&mut self) -> &mut Chunk {
        &mut self.chunk
    }

    /// The chunk the records point into.
    pub fn chunk(&self) -> &Chunk {
        &self.chunk
    }

    /// The number of good records.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether there are no good records.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Columns per record (the schema's width).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Record `index`.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`: in debug builds here, else when a field
    /// (of a batch with columns), the line or the offset of the record is
    /// read, by those lookups' own bounds checks. The folding loops call
    /// this per row and field, where a second check cost 1% of W1's
    /// instructions.
    #[inline]
    pub fn record(&self, index: usize) -> RecordRef<'_> {
        debug_assert!(index < self.len(), "record {index} of {}", self.len());
        RecordRef { batch: self, index }
    }

    /// Calls `f` with each good record's index and field `column`
    /// (`None` where absent), in order: what `record(i).field(column)`
    /// gives for each `i`, without looking up the record and checking the
    /// column per field (a typed column's parse reads every row's field:
    /// 3% of W1's instructions went to those lookups, and 1.4% more to an
    /// iterator's steps over the spans). Never calls `f` when records
    /// have no such column.
    #[inline(always)]
    pub fn for_each_field<'a>(&'a self, column: usize, mut f: impl FnMut(usize, Option<&'a [u8]>)) {
        if column >= self.width {
            return;
        }
        let (chunk, side) = (self.chunk.bytes(), self.side.as_slice());
        let mut at = column;
        let mut index = 0;
        while let Some(span) = self.fields.get(at) {
            f(index, span.resolve(chunk, side));
            at += self.width;
            index += 1;
        }
    }

    /// The good records in order.
    pub fn records(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> {
        (0..self.len()).map(|index| RecordRef { batch: self, index })
    }

    /// The records rejected from this chunk, in input order.
    pub fn rejects(&self) -> &[Reject] {
        &self.rejects
    }

    /// How many of the good records start before input offset `offset`:
    /// where a reject at `offset` falls among them.
    pub fn records_before(&self, offset: u64) -> usize {
        self.starts
            .partition_point(|&start| self.chunk.offset + u64::from(start) < offset)
    }

    /// Forgets the records of the last chunk (keeping every buffer's
    /// capacity) and prepares for `width` columns.
    pub(crate) fn begin(&mut self, width: usize) {
        assert!(
            self.chunk.len() <= BATCH_BYTES_MAX,
            "chunk of {} bytes outgrows 31-bit spans",
            self.chunk.len()
        );
        self.width = width;
        self.fields.clear();
        self.starts.clear();
        self.lines.clear();
        self.side.clear();
        self.rejects.clear();
    }

    /// A reject for the record at `start` on chunk line `line`.
    pub(crate) fn reject_at(
        chunk: &Chunk,
        start: usize,
        line: u32,
        column: Option<usize>,
        reason: RejectReason,
    ) -> Reject {
        Reject {
            input: chunk.input.clone(),
            line: chunk.first_line.map(|first| first + u64::from(line)),
            offset: chunk.offset + start as u64,
            column,
            name: None,
            path: None,
            reason,
        }
    }

    /// Names the column of each reject of the last chunk: schema column
    /// `name_of(column)` (the parser knows how its columns map).
    pub(crate) fn name_rejects(&mut self, name_of: impl Fn(usize) -> Option<Arc<str>>) {
        for reject in &mut self.rejects {
            reject.name = reject.column.and_then(&name_of);
        }
    }

    /// The bytes of field `column` of record `index`.
    #[inline]
    fn field(&self, index: usize, column: usize) -> Option<&[u8]> {
        if column >= self.width {
            return None;
        }
        self.fields[index * self.width + column].resolve(self.chunk.bytes(), &self.side)
    }
}

/// A view of one parsed record, borrowing its batch.
#[derive(Clone, Copy)]
pub struct RecordRef<'a> {
    batch: &'a Batch,
    index: usize,
}

impl<'a> RecordRef<'a> {
    /// The raw bytes of column `column` (unescaped), or `None` when absent.
    #[inline]
    pub fn field(&self, column: usize) -> Option<&'a [u8]> {
        self.batch.field(self.index, column)
    }

    /// The 1-based line the record starts on, when known.
    pub fn line(&self) -> Option<u64> {
        let line = self.batch.lines[self.index];
        self.batch
            .chunk
            .first_line
            .map(|first| first + u64::from(line))
    }

    /// The byte offset of the record's first byte in the input.
    pub fn offset(&self) -> u64 {
        self.batch.chunk.offset + u64::from(self.batch.starts[self.index])
    }

    /// Every column's bytes, in schema order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = Option<&'a [u8]>> + 'a {
        let (batch, index) = (self.batch, self.index);
        (0..batch.width).map(move |column| batch.field(index, column))
    }
}

impl Record for RecordRef<'_> {
    #[inline]
    fn field(&self, column: usize) -> Option<&[u8]> {
        RecordRef::field(self, column)
    }

    #[inline]
    fn value_memo(
        &self,
        column: usize,
        ty: cardinal_event::ColumnType,
        memo: &mut cardinal_event::DateMemo,
    ) -> Result<cardinal_event::Value<'_>, cardinal_event::ValueError> {
        cardinal_event::text_value_memo(RecordRef::field(self, column), ty, memo)
    }
}

impl std::fmt::Debug for RecordRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fields: Vec<Option<String>> = self
            .fields()
            .map(|field| field.map(|bytes| String::from_utf8_lossy(bytes).into_owned()))
            .collect();
        f.debug_struct("RecordRef")
            .field("line", &self.line())
            .field("offset", &self.offset())
            .field("fields", &fields)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_encode_where_bytes_are() {
        let name: Arc<str> = "t".into();
        let mut batch = Batch::new();
        batch.chunk_mut().set(&name, Some(10), 100, b"abc,def\n");
        batch.begin(3);
        batch.side.extend_from_slice(b"xyz");
        batch
            .fields
            .extend([Span::chunk(4, 7), Span::side(1, 3), Span::ABSENT]);
        batch.starts.push(0);
        batch.lines.push(2);
        let record = batch.record(0);
        assert_eq!(record.field(0), Some(&b"def"[..]));
        assert_eq!(record.field(1), Some(&b"yz"[..]));
        assert_eq!(record.field(2), None);
        assert_eq!(record.field(3), None);
        assert_eq!((record.line(), record.offset()), (Some(12), 100));
    }

    #[test]
    fn reasons_index_densely() {
        for (i, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
    }

    #[test]
    fn rejects_read_as_locations() {
        let reject = Reject {
            input: "a.csv".into(),
            line: Some(7),
            offset: 99,
            column: Some(2),
            name: None,
            path: None,
            reason: RejectReason::TooFewFields,
        };
        assert_eq!(
            reject.to_string(),
            "a.csv:7: column 3: fewer fields than columns"
        );
        let named = Reject {
            name: Some("revenue".into()),
            ..reject.clone()
        };
        assert_eq!(
            named.to_string(),
            "a.csv:7: column 3 (revenue): fewer fields than columns"
        );
        let reject = Reject {
            line: None,
            column: None,
            ..reject
        };
        assert_eq!(reject.to_string(), "a.csv:@99: fewer fields than columns");
        let json = Reject {
            input: "a.json".into(),
            column: Some(1),
            name: Some("user_id".into()),
            path: Some("user.id".into()),
            reason: RejectReason::JsonSyntax,
            ..named
        };
        assert_eq!(
            json.to_string(),
            "a.json:7: column 2 (user_id): at user.id: malformed JSON"
        );
    }
}
