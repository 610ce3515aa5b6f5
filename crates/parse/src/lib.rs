//! Bytes to record batches: the decode stage of cardinal's data path.
//!
//! `sources -> decode -> route -> summarize`: `cardinal-source` hands over
//! [`Chunk`](cardinal_source::Chunk)s of whole lines; this crate finds each
//! record's fields in them without copying, into a reused [`Batch`]:
//!
//! - [`CsvParser`]: delimited text, RFC 4180 quoting, with or without a
//!   header ([`CsvConfig`]; [`CsvConfig::v1`] for the seed's CSV,
//!   [`CsvConfig::amplab`] with [`amplab`]'s schemas for the AMPLab
//!   tables), with a fast path for quote-free lines that classifies 64
//!   bytes at a time into delimiter and newline bitmasks (the [`Scanner`]:
//!   SWAR, SSE2, or AVX2 where the CPU has it);
//! - [`NdjsonParser`]: nested JSON objects, one per line, each column found
//!   by its path of keys.
//!
//! [`Batch::record`] gives a [`RecordRef`] implementing
//! [`cardinal_event::Record`]: raw field bytes borrowed from the batch,
//! turned into typed values by `cardinal_event::Value::parse` only where an
//! expression needs them. A malformed record becomes a [`Reject`] with
//! input, line, column and a countable [`RejectReason`], and the rest of
//! the chunk goes on.
//!
//! Parquet reads columns, not lines, so it has its own batch:
//! [`ParquetFile`] matches a file's columns to the schema and splits it by
//! row groups, [`ParquetReader`] decodes [`ParquetBatch`]es of Arrow
//! arrays, and each [`ParquetRecord`] implements
//! [`cardinal_event::Record`] with typed values.
//!
//! ```
//! use cardinal_event::{ColumnType, Record, Value};
//! use cardinal_parse::{Batch, CsvParser, CsvConfig, amplab};
//!
//! let mut parser = CsvParser::new(&amplab::uservisits(), CsvConfig::amplab())?;
//! let mut batch = Batch::new();
//! let text = b"1.2.3.4,abc,1978-10-17,1.1885166E-4,Mozilla,BGR,BGR-BG,word,10\nbad,row\n";
//! batch.chunk_mut().set(&"uservisits".into(), Some(1), 0, text);
//! parser.parse(&mut batch)?;
//! assert_eq!(batch.len(), 1);
//! let visit = batch.record(0);
//! assert_eq!(visit.field(0), Some(&b"1.2.3.4"[..]));
//! let revenue = Value::parse(visit.field(3).unwrap(), ColumnType::Double);
//! assert_eq!(revenue, Ok(Value::Float(1.1885166E-4)));
//! assert_eq!(batch.rejects()[0].to_string(), "uservisits:2: column 3 (visitDate): fewer fields than columns");
//! # Ok::<(), cardinal_parse::Error>(())
//! ```

// Why the batch lives here and not in `cardinal-event`: a `Batch` holds a
// `cardinal_source::Chunk`, and `event` needs only the `Record` trait that
// batches' records implement. Parquet is a module of this crate, not a crate
// of its own: its reader shares `Reject`s and the `Record` contract, and the
// engine is its only user; it fills its own `ParquetBatch` of Arrow arrays
// instead of spans over a text chunk. Change `Record` and both batch kinds,
// the engine's column paths and the fuzz targets change with it.

#![deny(missing_docs)]

pub mod amplab;
mod batch;
mod csv;
mod error;
mod ndjson;
mod parquet;
mod structural;

pub use batch::{Batch, RecordRef, Reject, RejectReason};
pub use csv::{CsvConfig, CsvParser, Extra, Missing};
pub use error::{Error, Result};
pub use ndjson::NdjsonParser;
pub use parquet::{
    Column, Dictionary, DictionaryHandle, PARQUET_BATCH_BYTES_MAX, PARQUET_BATCH_ROWS,
    PARQUET_MAGIC, ParquetBatch, ParquetFile, ParquetReader, ParquetRecord, TextColumn, is_parquet,
};
pub use structural::Scanner;

/// The most fields a record may have: 1024. Declared streams have tens of
/// columns; a line with a thousand delimiters is a wrong delimiter or
/// binary data. The limit also bounds a parser's per-record scratch row
/// (8 KiB). A record with more is a [`RejectReason::FieldsMax`] reject; a
/// schema with more columns is refused.
pub const FIELDS_MAX: usize = 1024;

/// The most bytes a record may span: [`cardinal_source::LINE_BYTES_MAX`]
/// (1 MiB). The source already bounds lines; this bounds records, which in
/// CSV may span lines inside quotes. A longer one is a
/// [`RejectReason::RecordBytesMax`] reject.
pub const RECORD_BYTES_MAX: usize = cardinal_source::LINE_BYTES_MAX;

/// The deepest a JSON record may nest objects and arrays: 64 levels (the
/// record's own object is level 1). Event records nest two or three
/// levels; the limit bounds the scanner's state, which does not recurse on
/// skipped values. Deeper records are [`RejectReason::DepthMax`] rejects,
/// and column paths must be shorter.
pub const DEPTH_MAX: usize = 64;

/// A UTF-8 byte-order mark, which some tools write at the start of a text
/// file; the CSV and NDJSON parsers skip it there, not read it as data.
pub(crate) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";
