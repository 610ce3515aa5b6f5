//! Parquet input: the row groups of a file, decoded a bounded batch at a
//! time, only the columns some summary reads.
//!
//! Parquet stores columns, not lines, so this reader does not use
//! [`Batch`](crate::Batch)'s spans over a text chunk. A [`ParquetFile`] is
//! opened once per input: its footer is read, each declared column that a
//! summary reads is matched to a top-level column of the file by name
//! (case-insensitive) and its type checked, before any row is read. Jobs
//! then read ranges of row groups ([`ParquetFile::read`]), so that several
//! workers share one file. Each [`ParquetBatch`] holds up to
//! [`PARQUET_BATCH_ROWS`] rows as Arrow arrays, downcast once per batch to
//! the concrete column types below, and a [`ParquetRecord`] is one row of
//! it, read through [`cardinal_event::Record`] without printing numbers
//! as text and parsing them back:
//!
//! ```text
//!   file column (Arrow type)                   declared    value
//!   Int8..Int64, UInt8..UInt32                 BIGINT      Int (widened)
//!   UInt64                                     BIGINT      Int; above i64::MAX: reject, OutOfRange
//!   Float32, Float64                           DOUBLE      Float (widened exactly)
//!   Utf8, LargeUtf8, Utf8View, Binary...       TEXT        Text (borrowed)
//!   Utf8, LargeUtf8, Utf8View, Binary...       other       parsed from the text, as CSV is
//!   Date32, Date64, Timestamp(unit, any tz)    TIMESTAMP   Time: UTC ms, sub-ms floored
//!   Int32, Int64                               TIMESTAMP   Time: epoch s or ms by magnitude
//!   Boolean                                    BOOLEAN     Bool
//!   NULL of any of these                       any         Null
//! ```
//!
//! Any other pairing is an [`Error::ParquetColumnType`] naming the file,
//! the column, the file's type and the declared type.
//!
//! Text is asked for with a schema hint, whatever the file's Arrow
//! metadata says, in one of two forms. A column whose chunks are
//! dictionary-encoded (nearly all of its values, by the footer) is read
//! as an Arrow *dictionary*: each row a key into its row group's
//! dictionary, so a caller can work out a value's hash or a comparison
//! once per distinct value ([`TextColumn::dictionary`]). Any other text
//! column is read as *views* (`Utf8View`, `BinaryView`), which point into
//! the pages instead of copying each value. Either way a batch's memory
//! stays near its pages' size. Batches never span two row groups
//! ([`ParquetReader`]), so that a batch's keys index one dictionary.
//!
//! Limits: [`PARQUET_BATCH_ROWS`] rows are decoded at once (the Arrow
//! reader's batch size), and a batch that holds more than
//! [`PARQUET_BATCH_BYTES_MAX`] bytes of arrays stops the input with
//! [`Error::ParquetBatchBytesMax`]. A corrupt file is an [`Error::Parquet`]
//! for the whole input, never a panic (the `parse_parquet` fuzz target
//! feeds arbitrary bytes to [`ParquetFile::from_bytes`]).
//!
//! The `parquet` crate is not trusted with raw bytes. It asserts on a
//! negative column-chunk offset in a footer, so [`ParquetFile`] checks every
//! chunk's range against the file length first; and its page decoders
//! panic on some corrupt pages ("Decoder for dict should have been set",
//! found by flipping one byte), which cannot be checked from outside, so
//! every call into it runs under `catch_unwind` and a panic becomes
//! [`Error::ParquetPanic`] for that input (the reader is dropped). It is
//! built without default features (zstd, lz4, snappy, pure-Rust gzip,
//! simdutf8), with `arrow-array`, `arrow-schema`, `arrow-buffer` and
//! `bytes`.

// Maintainer note: the value mapping is written twice on purpose: once as
// the type check in `check_type` (what a file may hold for a declared type)
// and once as the downcast in `Values::of` (how each Arrow array is read).
// A type accepted by one must be handled by the other; the tests write one
// file with every accepted type and read it back. `ParquetBatch::column`
// hands out a subset of `Values` as typed slices: what it gives must be
// what `ParquetRecord::value` gives row by row (times through the same
// `Column::time`); cli/tests/parquet.rs compares the two paths.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrowPrimitiveType, BinaryArray, BinaryViewArray, RecordBatch};
use arrow_buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, TimeUnit as ArrowTimeUnit};
use bytes::Bytes;
use cardinal_event::{ColumnType, Record, Schema, Timestamp, Value, ValueError};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder,
};

use crate::{Error, Result};

/// The four bytes that start (and end) every Parquet file.
pub const PARQUET_MAGIC: [u8; 4] = *b"PAR1";

/// Rows decoded at once: 8192, Arrow's usual batch. Small enough that a
/// batch of a few columns stays in L2 while it is routed (8192 rows x 8
/// columns x 16 bytes of views or values is 1 MiB), large enough that the
/// per-batch downcasts cost nothing per row.
pub const PARQUET_BATCH_ROWS: usize = 8192;

/// The most bytes of decoded arrays one batch may hold: 256 MiB. A batch
/// of [`PARQUET_BATCH_ROWS`] rows of the columns summaries read is a few
/// MiB in practice; this bound is reached only by values of megabytes
/// each, which no event stream has. Reaching it stops the input with
/// [`Error::ParquetBatchBytesMax`].
pub const PARQUET_BATCH_BYTES_MAX: usize = 256 << 20;

const MS_PER_DAY: i64 = 86_400_000;

/// Whether `prefix` (an input's first bytes) starts a Parquet file.
pub fn is_parquet(prefix: &[u8]) -> bool {
    prefix.starts_with(&PARQUET_MAGIC)
}

/// Where a Parquet file's bytes come from.
#[derive(Debug, Clone)]
enum Source {
    /// A file on disk, opened again by each reader (a reader seeks).
    Path(std::path::PathBuf),
    /// Bytes in memory (tests and the fuzzer).
    Bytes(Bytes),
}

/// A Parquet input whose footer is read and whose columns are matched to a
/// declared schema. Shared by the jobs that read its row groups.
#[derive(Debug)]
pub struct ParquetFile {
    input: Arc<str>,
    source: Source,
    /// The footer, with text columns hinted as views.
    metadata: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// Per declared column: its position among the decoded columns, if it
    /// is read.
    positions: Vec<Option<usize>>,
    /// Declared types, per declared column.
    types: Vec<ColumnType>,
    /// The first row of each row group, and the file's row count last.
    row_group_starts: Vec<u64>,
    /// The compressed bytes of the read columns, per row group.
    row_group_bytes: Vec<u64>,
}

impl ParquetFile {
    /// Opens the file at `path` as input `input` and maps the declared
    /// columns `reads` (indexes into `schema`) to its columns.
    pub fn open(path: &Path, input: Arc<str>, schema: &Schema, reads: &[usize]) -> Result<Self> {
        let fail = |message: String| Error::Parquet {
            input: input.clone(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        let len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
        let metadata = guarded(&input, || {
            ArrowReaderMetadata::load(&file, footer_options())
        })
        .map_err(footer_error)?;
        Self::new(
            input.clone(),
            Source::Path(path.to_owned()),
            len,
            metadata,
            schema,
            reads,
        )
    }

    /// Reads a whole Parquet file from memory, as [`ParquetFile::open`]
    /// does from disk.
    pub fn from_bytes(
        bytes: impl Into<Bytes>,
        input: Arc<str>,
        schema: &Schema,
        reads: &[usize],
    ) -> Result<Self> {
        let bytes: Bytes = bytes.into();
        let metadata = guarded(&input, || {
            ArrowReaderMetadata::load(&bytes, footer_options())
        })
        .map_err(footer_error)?;
        let len = bytes.len() as u64;
        Self::new(input, Source::Bytes(bytes), len, metadata, schema, reads)
    }

    fn new(
        input: Arc<str>,
        source: Source,
        len: u64,
        metadata: ArrowReaderMetadata,
        schema: &Schema,
        reads: &[usize],
    ) -> Result<Self> {
        let fail = |message: String| Error::Parquet {
            input: input.clone(),
            message,
        };
        check_chunks(metadata.metadata(), len).map_err(|message| Error::ParquetFooter {
            input: input.clone(),
            message,
        })?;
        let fields = metadata.schema().fields().clone();
        // Each read column's root index in the file.
        let mut roots: Vec<(usize, usize)> = Vec::with_capacity(reads.len());
        for &column in reads {
            let declared = schema.columns.get(column).expect("reads index the schema");
            let mut found = fields
                .iter()
                .enumerate()
                .filter(|(_, f)| f.name().eq_ignore_ascii_case(&declared.name));
            let Some((root, field)) = found.next() else {
                return Err(Error::ParquetColumnMissing {
                    input,
                    column: declared.name.clone(),
                });
            };
            if let Some((_, other)) = found.next() {
                return Err(fail(format!(
                    "columns {:?} and {:?} both match declared column {:?}",
                    field.name(),
                    other.name(),
                    declared.name
                )));
            }
            if !check_type(field.data_type(), declared.ty) {
                return Err(Error::ParquetColumnType {
                    input,
                    column: declared.name.clone(),
                    file_type: field.data_type().to_string(),
                    declared: declared.ty.name(),
                });
            }
            roots.push((root, column));
        }
        roots.sort_unstable();
        let mut positions = vec![None; schema.columns.len()];
        for (position, &(_, column)) in roots.iter().enumerate() {
            positions[column] = Some(position);
        }
        // Ask for text as dictionaries or views (see the module doc);
        // every other column keeps the type the file's own schema gives it.
        let parquet_metadata = metadata.metadata().clone();
        let hinted: Vec<Field> = fields
            .iter()
            .enumerate()
            .map(|(root, field)| {
                let read = roots.binary_search_by_key(&root, |&(r, _)| r).is_ok();
                match (read, text_of(field.data_type())) {
                    (true, Some(text)) => {
                        let read_as = if dictionary_encoded(&parquet_metadata, root) {
                            DataType::Dictionary(Box::new(DataType::Int32), Box::new(text))
                        } else {
                            view_of(&text)
                        };
                        field.as_ref().clone().with_data_type(read_as)
                    }
                    _ => field.as_ref().clone(),
                }
            })
            .collect();
        let hinted = Arc::new(arrow_schema::Schema::new_with_metadata(
            hinted,
            metadata.schema().metadata().clone(),
        ));
        let metadata = guarded(&input, || {
            ArrowReaderMetadata::try_new(parquet_metadata, footer_options().with_schema(hinted))
        })?;
        let descriptor = metadata.parquet_schema();
        let mask = ProjectionMask::roots(descriptor, roots.iter().map(|&(root, _)| root));
        let mut row_group_starts = vec![0u64];
        let mut row_group_bytes = Vec::new();
        for group in metadata.metadata().row_groups() {
            let rows = u64::try_from(group.num_rows())
                .map_err(|_| fail(format!("a row group has {} rows", group.num_rows())))?;
            let last = *row_group_starts.last().expect("starts with 0");
            let next = last
                .checked_add(rows)
                .ok_or_else(|| fail("row counts overflow".into()))?;
            row_group_starts.push(next);
            let bytes = (0..group.num_columns())
                .filter(|&leaf| mask.leaf_included(leaf))
                .map(|leaf| u64::try_from(group.column(leaf).compressed_size()).unwrap_or(0))
                .sum();
            row_group_bytes.push(bytes);
        }
        assert_eq!(row_group_starts.len(), row_group_bytes.len() + 1);
        Ok(Self {
            input,
            source,
            metadata,
            mask,
            positions,
            types: schema.columns.iter().map(|c| c.ty).collect(),
            row_group_starts,
            row_group_bytes,
        })
    }

    /// The input's name.
    pub fn input(&self) -> &Arc<str> {
        &self.input
    }

    /// How many row groups the file has.
    pub fn row_groups(&self) -> usize {
        self.row_group_bytes.len()
    }

    /// The file's rows.
    pub fn rows(&self) -> u64 {
        *self.row_group_starts.last().expect("starts with 0")
    }

    /// The compressed bytes of the read columns in `row_groups`.
    pub fn bytes(&self, row_groups: Range<usize>) -> u64 {
        self.row_group_bytes[row_groups].iter().sum()
    }

    /// A reader of the row groups `row_groups`.
    ///
    /// # Panics
    ///
    /// If the range is not within `0..self.row_groups()`.
    pub fn read(&self, row_groups: Range<usize>) -> Result<ParquetReader<'_>> {
        assert!(row_groups.start <= row_groups.end);
        assert!(row_groups.end <= self.row_groups());
        let first_row = self.row_group_starts[row_groups.start];
        Ok(ParquetReader {
            file: self,
            groups: row_groups,
            inner: None,
            failed: false,
            batch: ParquetBatch {
                input: self.input.clone(),
                first_row,
                len: 0,
                columns: Vec::new(),
            },
        })
    }

    /// An Arrow reader of row group `group` alone.
    fn read_group(&self, group: usize) -> Result<ParquetRecordBatchReader> {
        let groups = vec![group];
        Ok(match &self.source {
            Source::Path(path) => {
                let file = std::fs::File::open(path).map_err(|e| Error::Parquet {
                    input: self.input.clone(),
                    message: e.to_string(),
                })?;
                guarded(&self.input, || {
                    ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
                        .with_projection(self.mask.clone())
                        .with_row_groups(groups)
                        .with_batch_size(PARQUET_BATCH_ROWS)
                        .build()
                })?
            }
            Source::Bytes(bytes) => guarded(&self.input, || {
                ParquetRecordBatchReaderBuilder::new_with_metadata(
                    bytes.clone(),
                    self.metadata.clone(),
                )
                .with_projection(self.mask.clone())
                .with_row_groups(groups)
                .with_batch_size(PARQUET_BATCH_ROWS)
                .build()
            })?,
        })
    }
}

/// Runs a call into the parquet crate, turning its error, or its panic,
/// into an [`Error`] for `input`.
///
/// The parquet crate's decoders assert on some corrupt pages (found by the
/// flipped-bytes test: "Decoder for dict should have been set") instead of
/// returning errors, and its footer parser cannot be checked from outside
/// before it runs. A panic there is about the file's bytes, not about our
/// state, so it is caught here and the input stops with
/// [`Error::ParquetPanic`]; the reader that panicked is dropped, never
/// called again.
///
/// The panic is caught quietly: the default hook would print it, with a
/// backtrace under `RUST_BACKTRACE`, as if the program had crashed, before
/// the error says what happened ([`quiet_panics`]).
/// A failure to read a footer ([`guarded`]'s error) as
/// [`Error::ParquetFooter`], without the reader's own "Parquet error: "
/// prefix (the message says Parquet already).
fn footer_error(error: Error) -> Error {
    match error {
        Error::Parquet { input, message } | Error::ParquetPanic { input, message } => {
            let message = match message.strip_prefix("Parquet error: ") {
                Some(rest) => rest.to_owned(),
                None => message,
            };
            Error::ParquetFooter { input, message }
        }
        other => other,
    }
}

fn guarded<T, E: std::fmt::Display>(
    input: &Arc<str>,
    call: impl FnOnce() -> Result<T, E>,
) -> Result<T> {
    quiet_panics();
    GUARDED.set(true);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
    GUARDED.set(false);
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::Parquet {
            input: input.clone(),
            message: e.to_string(),
        }),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            Err(Error::ParquetPanic {
                input: input.clone(),
                message,
            })
        }
    }
}

thread_local! {
    /// Whether this thread is inside [`guarded`], whose panics are caught
    /// and reported as errors.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once per process, a panic hook that says nothing for a panic
/// inside [`guarded`] and hands every other panic to the hook it replaced.
fn quiet_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.get() {
                previous(info);
            }
        }));
    });
}

/// How footers are read: with the writer's Arrow schema as the type
/// hint (so that, for one, an Arrow `Timestamp(Second)`, stored as a bare
/// INT64, reads as a time again) and without page indexes (every page of a
/// read column chunk is decoded anyway).
fn footer_options() -> ArrowReaderOptions {
    ArrowReaderOptions::new().with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Skip)
}

/// Checks that every column chunk the footer describes lies within the
/// file's `len` bytes. The parquet crate asserts (panics) on a negative
/// offset or size when it plans reads, so a forged footer is refused here
/// first, as an error.
fn check_chunks(
    metadata: &parquet::file::metadata::ParquetMetaData,
    len: u64,
) -> Result<(), String> {
    for (index, group) in metadata.row_groups().iter().enumerate() {
        for chunk in group.columns() {
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset());
            let size = chunk.compressed_size();
            let end = u64::try_from(start)
                .ok()
                .zip(u64::try_from(size).ok())
                .and_then(|(start, size)| start.checked_add(size));
            if end.is_none_or(|end| end > len) {
                return Err(format!(
                    "row group {index}: column chunk {} at offset {start}, {size} bytes, is not within the file's {len} bytes",
                    chunk.column_path()
                ));
            }
        }
    }
    Ok(())
}

/// `Utf8` or `Binary` when `data_type` is text (UTF-8 or not), whatever
/// its offsets, views or dictionary.
fn text_of(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(DataType::Utf8),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Some(DataType::Binary),
        DataType::Dictionary(_, value) => text_of(value),
        _ => None,
    }
}

/// The view type of `text` (`Utf8` or `Binary`).
fn view_of(text: &DataType) -> DataType {
    match text {
        DataType::Utf8 => DataType::Utf8View,
        _ => DataType::BinaryView,
    }
}

/// Whether the file's top-level column `root` is read as an Arrow
/// dictionary: when the column chunks whose data pages are all
/// dictionary-encoded (as the footer's page statistics, or failing them
/// its list of encodings, say) hold at least 7/8 of its values. The
/// Arrow reader decodes any other chunk of such a column into a
/// dictionary of its own per batch: correct, only slower, so a column
/// with a plain chunk or two (DuckDB writes the last, small row group's
/// chunks plain at times) still reads as dictionaries.
fn dictionary_encoded(metadata: &parquet::file::metadata::ParquetMetaData, root: usize) -> bool {
    use parquet::basic::Encoding;
    let only_dictionary = |mask: &parquet::basic::EncodingMask| {
        mask.is_only(Encoding::PLAIN_DICTIONARY) || mask.is_only(Encoding::RLE_DICTIONARY)
    };
    let descriptor = metadata.file_metadata().schema_descr();
    let (mut all, mut dictionary) = (0u64, 0u64);
    for group in metadata.row_groups() {
        for (leaf, chunk) in group.columns().iter().enumerate() {
            if descriptor.get_column_root_idx(leaf) != root {
                continue;
            }
            let values = u64::try_from(chunk.num_values()).unwrap_or(0);
            all += values;
            let pages_dictionary = match chunk.page_encoding_stats_mask() {
                Some(mask) => only_dictionary(mask),
                None => only_dictionary(chunk.encodings_mask()),
            };
            if chunk.dictionary_page_offset().is_some() && pages_dictionary {
                dictionary += values;
            }
        }
    }
    all > 0 && dictionary >= all - all / 8
}

/// Whether a file column of `data_type` may be read as `declared`.
fn check_type(data_type: &DataType, declared: ColumnType) -> bool {
    use DataType as D;
    if text_of(data_type).is_some() {
        // Text is read as the declared type, parsed as CSV fields are.
        return true;
    }
    match declared {
        ColumnType::BigInt => matches!(
            data_type,
            D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::UInt8 | D::UInt16 | D::UInt32 | D::UInt64
        ),
        ColumnType::Double => matches!(data_type, D::Float32 | D::Float64),
        ColumnType::Timestamp => matches!(
            data_type,
            D::Date32 | D::Date64 | D::Timestamp(_, _) | D::Int32 | D::Int64
        ),
        ColumnType::Bool => matches!(data_type, D::Boolean),
        ColumnType::Text => false,
    }
}

/// Reads the row groups of one job, a batch at a time, one row group
/// after another: no batch spans two row groups, so a dictionary-encoded
/// column's batch holds keys into its row group's dictionary (a batch
/// across two would get a dictionary built for it, value by value).
#[derive(Debug)]
pub struct ParquetReader<'f> {
    file: &'f ParquetFile,
    /// The row groups not yet opened.
    groups: Range<usize>,
    /// The row group being read.
    inner: Option<ParquetRecordBatchReader>,
    /// Set once the Parquet reader has panicked: nothing is read again.
    failed: bool,
    batch: ParquetBatch,
}

impl ParquetReader<'_> {
    /// The next batch of rows, or `None` at the end of the row groups.
    pub fn next_batch(&mut self) -> Result<Option<&ParquetBatch>> {
        let next_row = self.batch.first_row + self.batch.len as u64;
        let decoded = loop {
            if self.failed {
                return Ok(None);
            }
            let inner = match &mut self.inner {
                Some(inner) => inner,
                None => match self.groups.next() {
                    Some(group) => self.inner.insert(self.file.read_group(group)?),
                    None => return Ok(None),
                },
            };
            match guarded(&self.file.input, || inner.next().transpose()) {
                Ok(Some(decoded)) => break decoded,
                Ok(None) => self.inner = None,
                Err(e) => {
                    if matches!(e, Error::ParquetPanic { .. }) {
                        self.failed = true;
                    }
                    return Err(e);
                }
            }
        };
        let bytes = decoded.get_array_memory_size();
        if bytes > PARQUET_BATCH_BYTES_MAX {
            return Err(Error::ParquetBatchBytesMax {
                input: self.file.input.clone(),
                row: next_row + 1,
                bytes,
            });
        }
        assert!(decoded.num_rows() <= PARQUET_BATCH_ROWS);
        self.batch.fill(&decoded, self.file, next_row)?;
        Ok(Some(&self.batch))
    }
}

/// Up to [`PARQUET_BATCH_ROWS`] decoded rows: one typed column view per
/// declared column (absent when no summary reads it).
#[derive(Debug)]
pub struct ParquetBatch {
    input: Arc<str>,
    /// The 0-based row number of row 0 in the file.
    first_row: u64,
    len: usize,
    columns: Vec<ColumnView>,
}

impl ParquetBatch {
    fn fill(&mut self, decoded: &RecordBatch, file: &ParquetFile, first_row: u64) -> Result<()> {
        self.first_row = first_row;
        self.len = decoded.num_rows();
        self.columns.clear();
        for (&position, &declared) in file.positions.iter().zip(&file.types) {
            let view = match position {
                None => ColumnView {
                    nulls: None,
                    values: Values::Absent,
                    declared,
                },
                Some(position) => {
                    let array = decoded.column(position);
                    assert_eq!(array.len(), self.len);
                    let values = Values::of(array.as_ref()).ok_or_else(|| Error::Parquet {
                        input: file.input.clone(),
                        message: format!(
                            "column {position} decoded as {}, which was not checked",
                            array.data_type()
                        ),
                    })?;
                    let values = match (values, declared) {
                        (Values::I64(v), ColumnType::Timestamp) => epoch_times(v.iter().copied()),
                        (Values::I32(v), ColumnType::Timestamp) => {
                            epoch_times(v.iter().map(|&x| i64::from(x)))
                        }
                        (values, _) => values,
                    };
                    ColumnView {
                        // No buffer when nothing is NULL: rows then skip the
                        // bit test.
                        nulls: array.logical_nulls().filter(|n| n.null_count() > 0),
                        values,
                        declared,
                    }
                }
            };
            self.columns.push(view);
        }
        Ok(())
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Row `index`.
    ///
    /// # Panics
    ///
    /// If `index >= self.len()`.
    pub fn record(&self, index: usize) -> ParquetRecord<'_> {
        assert!(index < self.len, "row {index} of {}", self.len);
        ParquetRecord { batch: self, index }
    }

    /// The input's name.
    pub fn input(&self) -> &Arc<str> {
        &self.input
    }

    /// Declared column `column` as a typed slice of this batch's rows, for
    /// a caller that reads a batch a column at a time; `None` when the
    /// column has a NULL in this batch, is not read, or is stored as
    /// something other than these (the rows then give the same values
    /// through [`Record::value`]):
    ///
    /// ```text
    ///   declared   stored                       slice
    ///   BIGINT     Int64                        Int
    ///   DOUBLE     Float64                      Float
    ///   TIMESTAMP  Timestamp(any unit), Date64  Time (read with Column::time)
    ///   TIMESTAMP  Date32                       Date (read with Column::time)
    ///   TEXT       any text                     Text
    /// ```
    pub fn column(&self, column: usize) -> Option<Column<'_>> {
        let view = self.columns.get(column)?;
        if view.nulls.is_some() {
            return None;
        }
        Some(match (&view.values, view.declared) {
            (Values::I64(v), ColumnType::BigInt) => Column::Int(v),
            (Values::F64(v), ColumnType::Double) => Column::Float(v),
            (Values::Time(v, unit), ColumnType::Timestamp) => Column::Time(v, *unit),
            (Values::Date32(v), ColumnType::Timestamp) => Column::Date(v),
            (Values::Text(text), ColumnType::Text) => Column::Text(TextColumn(text)),
            _ => return None,
        })
    }
}

/// A column of a [`ParquetBatch`] without NULLs, typed
/// ([`ParquetBatch::column`]). Index `i` is row `i` of the batch.
#[derive(Debug, Clone, Copy)]
pub enum Column<'a> {
    /// A BIGINT column.
    Int(&'a [i64]),
    /// A DOUBLE column.
    Float(&'a [f64]),
    /// A TIMESTAMP column stored as times in a unit.
    Time(&'a [i64], ArrowTimeUnit),
    /// A TIMESTAMP column stored as days.
    Date(&'a [i32]),
    /// A TEXT column.
    Text(TextColumn<'a>),
}

/// A TEXT column of a [`ParquetBatch`] ([`Column::Text`]).
#[derive(Debug, Clone, Copy)]
pub struct TextColumn<'a>(&'a TextValues);

impl<'a> TextColumn<'a> {
    /// Row `i`'s bytes.
    #[inline]
    pub fn value(&self, i: usize) -> &'a [u8] {
        self.0.value(i)
    }

    /// The column's dictionary, when the batch holds it as keys into one
    /// (a dictionary-encoded column chunk): a caller can then work out
    /// something once per distinct value (a hash, a comparison) and read
    /// it per row by key.
    #[inline]
    pub fn dictionary(&self) -> Option<Dictionary<'a>> {
        match self.0 {
            TextValues::Views(_) => None,
            TextValues::Dictionary { keys, values } => Some(Dictionary { keys, values }),
        }
    }
}

/// The dictionary of a [`TextColumn`]: each row's key, and the distinct
/// values the keys index. Every key is below [`Dictionary::len`] (checked
/// when the batch is read).
#[derive(Debug, Clone, Copy)]
pub struct Dictionary<'a> {
    keys: &'a [i32],
    values: &'a BinaryArray,
}

impl<'a> Dictionary<'a> {
    /// Row `i`'s key: an index below [`Dictionary::len`].
    #[inline]
    pub fn key(&self, i: usize) -> usize {
        // Checked non-negative when the batch was read.
        self.keys[i].unsigned_abs() as usize
    }

    /// The number of distinct values.
    #[inline]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the dictionary has no values (every row is NULL).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Value `key`'s bytes.
    #[inline]
    pub fn value(&self, key: usize) -> &'a [u8] {
        self.values.value(key)
    }

    /// A handle that keeps this dictionary's values alive and tells
    /// whether a later batch's dictionary is the same one
    /// ([`DictionaryHandle::is`]).
    pub fn handle(&self) -> DictionaryHandle {
        DictionaryHandle(self.values.clone())
    }
}

/// A kept [`Dictionary`] ([`Dictionary::handle`]). Holding it keeps the
/// values' buffers allocated, so no other dictionary can be given their
/// addresses while it lives: the same addresses are the same dictionary.
#[derive(Debug, Clone)]
pub struct DictionaryHandle(BinaryArray);

impl DictionaryHandle {
    /// Whether `dictionary` is the one this handle keeps.
    pub fn is(&self, dictionary: &Dictionary<'_>) -> bool {
        let (a, b) = (&self.0, dictionary.values);
        a.len() == b.len()
            && a.offsets().inner().inner().as_ptr() == b.offsets().inner().inner().as_ptr()
            && a.values().as_ptr() == b.values().as_ptr()
    }
}

/// A text column's values.
#[derive(Debug)]
enum TextValues {
    /// One view per row.
    Views(BinaryViewArray),
    /// One key per row into `values`; every key of a non-NULL row is
    /// within `values` ([`TextValues::dictionary`] checks).
    Dictionary {
        keys: ScalarBuffer<i32>,
        values: BinaryArray,
    },
}

impl TextValues {
    #[inline]
    fn value(&self, i: usize) -> &[u8] {
        match self {
            TextValues::Views(views) => views.value(i),
            TextValues::Dictionary { keys, values } => {
                let dictionary = Dictionary { keys, values };
                dictionary.value(dictionary.key(i))
            }
        }
    }

    /// A dictionary-typed `array`'s keys and values as bytes, if its
    /// every non-NULL key indexes its values.
    fn dictionary(array: &dyn Array) -> Option<TextValues> {
        let dictionary = array.as_dictionary_opt::<Int32Type>()?;
        let values = dictionary.values();
        let values = match values.data_type() {
            DataType::Utf8 => BinaryArray::from(values.as_string::<i32>().clone()),
            DataType::Binary => values.as_binary::<i32>().clone(),
            _ => return None,
        };
        let keys = dictionary.keys();
        let len = values.len();
        let within = |k: i32| usize::try_from(k).is_ok_and(|k| k < len);
        let valid = match keys.nulls().filter(|n| n.null_count() > 0) {
            // As unsigned, a negative key is above every length: one
            // maximum over the keys, which vectorizes.
            None => keys
                .values()
                .iter()
                .fold(0u32, |most, &k| most.max(k.cast_unsigned()))
                .try_into()
                .is_ok_and(|most: usize| keys.is_empty() || most < len),
            Some(nulls) => keys
                .values()
                .iter()
                .enumerate()
                .all(|(i, &k)| nulls.is_null(i) || within(k)),
        };
        valid.then(|| TextValues::Dictionary {
            keys: keys.values().clone(),
            values,
        })
    }
}

impl Column<'_> {
    /// Row `i` of a TIMESTAMP column, as [`Record::value`] reads it: an
    /// [`ValueError::OutOfRange`] outside the timestamp range (and for a
    /// column that is not a time).
    #[inline]
    pub fn time(&self, i: usize) -> Result<Timestamp, ValueError> {
        match *self {
            Column::Time(v, unit) => time_of(v[i], unit),
            Column::Date(v) => time_of(i64::from(v[i]) * MS_PER_DAY, ArrowTimeUnit::Millisecond),
            _ => Err(ValueError::OutOfRange),
        }
    }
}

/// One declared column of a batch.
#[derive(Debug)]
struct ColumnView {
    nulls: Option<NullBuffer>,
    values: Values,
    declared: ColumnType,
}

/// A column's values, downcast once per batch so that reading a row is a
/// match and an index, not a dynamic downcast.
#[derive(Debug)]
enum Values {
    /// Not read by any summary.
    Absent,
    I8(ScalarBuffer<i8>),
    I16(ScalarBuffer<i16>),
    I32(ScalarBuffer<i32>),
    I64(ScalarBuffer<i64>),
    U8(ScalarBuffer<u8>),
    U16(ScalarBuffer<u16>),
    U32(ScalarBuffer<u32>),
    U64(ScalarBuffer<u64>),
    F32(ScalarBuffer<f32>),
    F64(ScalarBuffer<f64>),
    Bool(BooleanBuffer),
    /// Days since the epoch.
    Date32(ScalarBuffer<i32>),
    /// Times in `unit`s since the epoch, UTC.
    Time(ScalarBuffer<i64>, ArrowTimeUnit),
    Text(TextValues),
}

impl Values {
    fn of(array: &dyn Array) -> Option<Values> {
        fn values<T: ArrowPrimitiveType>(array: &dyn Array) -> ScalarBuffer<T::Native> {
            array.as_primitive::<T>().values().clone()
        }
        Some(match array.data_type() {
            DataType::Int8 => Values::I8(values::<Int8Type>(array)),
            DataType::Int16 => Values::I16(values::<Int16Type>(array)),
            DataType::Int32 => Values::I32(values::<Int32Type>(array)),
            DataType::Int64 => Values::I64(values::<Int64Type>(array)),
            DataType::UInt8 => Values::U8(values::<UInt8Type>(array)),
            DataType::UInt16 => Values::U16(values::<UInt16Type>(array)),
            DataType::UInt32 => Values::U32(values::<UInt32Type>(array)),
            DataType::UInt64 => Values::U64(values::<UInt64Type>(array)),
            DataType::Float32 => Values::F32(values::<Float32Type>(array)),
            DataType::Float64 => Values::F64(values::<Float64Type>(array)),
            DataType::Boolean => Values::Bool(array.as_boolean().values().clone()),
            DataType::Date32 => Values::Date32(values::<Date32Type>(array)),
            DataType::Date64 => {
                Values::Time(values::<Date64Type>(array), ArrowTimeUnit::Millisecond)
            }
            DataType::Timestamp(ArrowTimeUnit::Second, _) => {
                Values::Time(values::<TimestampSecondType>(array), ArrowTimeUnit::Second)
            }
            DataType::Timestamp(ArrowTimeUnit::Millisecond, _) => Values::Time(
                values::<TimestampMillisecondType>(array),
                ArrowTimeUnit::Millisecond,
            ),
            DataType::Timestamp(ArrowTimeUnit::Microsecond, _) => Values::Time(
                values::<TimestampMicrosecondType>(array),
                ArrowTimeUnit::Microsecond,
            ),
            DataType::Timestamp(ArrowTimeUnit::Nanosecond, _) => Values::Time(
                values::<TimestampNanosecondType>(array),
                ArrowTimeUnit::Nanosecond,
            ),
            DataType::BinaryView => Values::Text(TextValues::Views(array.as_binary_view().clone())),
            DataType::Utf8View => Values::Text(TextValues::Views(
                array.as_string_view().clone().to_binary_view(),
            )),
            DataType::Dictionary(..) => Values::Text(TextValues::dictionary(array)?),
            _ => return None,
        })
    }
}

/// An integer column declared `TIMESTAMP`, as milliseconds: each value in
/// seconds or milliseconds by its magnitude ([`Timestamp::from_epoch`],
/// the rule text follows); a value outside the range becomes one that
/// [`time_of`] rejects. One allocation per batch, so that rows and typed
/// slices read it as any millisecond column.
fn epoch_times(values: impl ExactSizeIterator<Item = i64>) -> Values {
    let ms: Vec<i64> = values
        .map(|v| Timestamp::from_epoch(v).map_or(i64::MIN, |t| t.0))
        .collect();
    Values::Time(ScalarBuffer::from(ms), ArrowTimeUnit::Millisecond)
}

/// `value` in `unit`s since the epoch as a [`Timestamp`] (floored to the
/// millisecond), if within [`Timestamp::MIN`]..=[`Timestamp::MAX`].
fn time_of(value: i64, unit: ArrowTimeUnit) -> Result<Timestamp, ValueError> {
    let ms = match unit {
        ArrowTimeUnit::Second => value.checked_mul(1000).ok_or(ValueError::OutOfRange)?,
        ArrowTimeUnit::Millisecond => value,
        ArrowTimeUnit::Microsecond => value.div_euclid(1000),
        ArrowTimeUnit::Nanosecond => value.div_euclid(1_000_000),
    };
    if (Timestamp::MIN.0..=Timestamp::MAX.0).contains(&ms) {
        Ok(Timestamp(ms))
    } else {
        Err(ValueError::OutOfRange)
    }
}

/// One row of a [`ParquetBatch`].
#[derive(Debug, Clone, Copy)]
pub struct ParquetRecord<'a> {
    batch: &'a ParquetBatch,
    index: usize,
}

impl ParquetRecord<'_> {
    /// The row's index in its batch (what [`ParquetBatch::column`]'s
    /// slices are indexed by).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The 1-based row number in the file, the Parquet counterpart of a
    /// text line number in rejects.
    pub fn row(&self) -> u64 {
        self.batch.first_row + self.index as u64 + 1
    }
}

impl Record for ParquetRecord<'_> {
    /// Text columns' bytes; `None` for NULL and for other types (which
    /// have no text: read them with [`Record::value`]).
    #[inline]
    fn field(&self, column: usize) -> Option<&[u8]> {
        let view = self.batch.columns.get(column)?;
        if view.nulls.as_ref().is_some_and(|n| n.is_null(self.index)) {
            return None;
        }
        match &view.values {
            Values::Text(text) => Some(text.value(self.index)),
            _ => None,
        }
    }

    #[inline]
    fn value(&self, column: usize, ty: ColumnType) -> Result<Value<'_>, ValueError> {
        let Some(view) = self.batch.columns.get(column) else {
            return Ok(Value::Null);
        };
        let i = self.index;
        if view.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return Ok(Value::Null);
        }
        debug_assert_eq!(ty, view.declared, "expressions read columns as declared");
        Ok(match &view.values {
            Values::Absent => Value::Null,
            Values::I8(v) => Value::Int(i64::from(v[i])),
            Values::I16(v) => Value::Int(i64::from(v[i])),
            Values::I32(v) => Value::Int(i64::from(v[i])),
            Values::I64(v) => Value::Int(v[i]),
            Values::U8(v) => Value::Int(i64::from(v[i])),
            Values::U16(v) => Value::Int(i64::from(v[i])),
            Values::U32(v) => Value::Int(i64::from(v[i])),
            Values::U64(v) => Value::Int(i64::try_from(v[i]).map_err(|_| ValueError::OutOfRange)?),
            Values::F32(v) => Value::Float(f64::from(v[i])),
            Values::F64(v) => Value::Float(v[i]),
            Values::Bool(v) => Value::Bool(v.value(i)),
            Values::Date32(v) => Value::Time(Column::Date(v).time(i)?),
            Values::Time(v, unit) => Value::Time(Column::Time(v, *unit).time(i)?),
            Values::Text(text) => match ty {
                ColumnType::Text => Value::Text(text.value(i)),
                _ => Value::parse(text.value(i), ty)?,
            },
        })
    }
}
