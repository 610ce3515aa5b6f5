//! Delimited text: the v1 CSV (RFC 4180 quoting) and the AMPLab tables.
//!
//! Two paths parse the same grammar:
//!
//! - the **general path** ([`CsvParser::parse_without_fast_path`]) reads
//!   one record at a time: quoted fields per RFC 4180 (`""` inside quotes
//!   is one quote, delimiters and newlines inside quotes are data), and
//!   `memchr2` to the next delimiter or newline for unquoted ones;
//! - the **fast path** runs over stretches of whole lines that contain no
//!   quote at all (the predicate, checked with one `memchr` per stretch).
//!   There a field ends at every delimiter and a record at every newline,
//!   so a [`Scanner`] classifies 64 bytes at a time into a delimiter mask
//!   and a newline mask (`crate::structural`: SWAR, SSE2, or AVX2 when
//!   the CPU has it, chosen once per parser) and the scan walks their set
//!   bits: up to the projection's last needed field each bit ends a span;
//!   after it the line's remaining fields are counted with `count_ones`
//!   up to the next newline bit, not split. Impressions and AMPLab files
//!   never quote, so they run on the fast path from end to end; a chunk
//!   with a few quoted lines runs the general path only on those lines
//!   (a quote anywhere in a line sends the whole line there: a quoted
//!   field may hold delimiters and newlines).
//!
//! A record of the file's width in schema order leaves the fast path in
//! one copy of its scratch row; any other record (too few or too many
//! fields, too long, reordered by a header) goes through `Out::finish`,
//! which both paths share and which applies the header mapping, the
//! limits and the [`Missing`] / [`Extra`] policies. The fast path with
//! each scanner is tested against the general path on arbitrary input
//! (`tests/csv.rs`, and the `parse_csv` fuzz target).
//!
//! Per line, on 200K lines with one thread (callgrind, AVX2, 2026-11-21):
//! impressions (8 columns, all split) 725 -> 340 instructions, AMPLab
//! uservisits projected to the 2 columns Query 2A reads (4 split, 5
//! counted) 1,012 -> 350.
//!
//! Rules both paths follow:
//!
//! - `\n` ends a record; a `\r` just before it is dropped (CRLF files);
//!   the chunk's end counts as a newline;
//! - a blank line (empty, or a lone `\r`) is skipped, not a record;
//! - a quote that does not start a field is data (`5" screen`), as in the
//!   `csv` crate; text after a closing quote is a [`TextAfterQuote`]
//!   reject;
//! - a quoted field may span lines, but not chunks: a reader with
//!   `cardinal_source::Framing::Csv` cuts chunks (and byte ranges of split
//!   files) only between records, following these same rules, so a chunk
//!   never ends inside a quoted field (`source/src/records.rs` must end
//!   records where `parse_record` does; `tests/csv_records.rs` compares
//!   them, and both against the `csv` crate). Fed chunks cut at any
//!   newline instead, a quoted newline at a boundary shows up as an
//!   [`UnterminatedQuote`] reject.
//! - after a reject parsing resumes on the next line (for an unterminated
//!   quote, the line after the record's first line).
//!
//! [`TextAfterQuote`]: crate::RejectReason::TextAfterQuote
//! [`UnterminatedQuote`]: crate::RejectReason::UnterminatedQuote

// Maintainer note: the two paths must agree byte for byte; a rule changed
// in `parse_record` (blank lines, CR handling, the last line without a
// newline) must change in `scan_blocks` / `Cursor` too, and
// `tests/csv.rs`'s `fast_path_equals_general_path` will say so if it does
// not. A limit or policy changed in `Out::finish` must keep
// `Out::finish_plain`'s shortcut (the file's width, within
// RECORD_BYTES_MAX, identity map) a case that `finish` accepts unchanged.

use std::sync::Arc;

use cardinal_event::Schema;
use cardinal_source::Chunk;
use memchr::{memchr, memchr2, memrchr};

use crate::batch::{Batch, Reject, RejectReason, Span};
#[cfg(target_arch = "x86_64")]
use crate::structural::{Avx2, Sse2};
use crate::structural::{BLOCK, Classify, Masks, Scanner, Swar};
use crate::{Error, FIELDS_MAX, RECORD_BYTES_MAX, Result, UTF8_BOM};

/// What to do with a record that has fewer fields than the file's columns
/// (and with a header that lacks a declared column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Reject the record ([`RejectReason::TooFewFields`]); a header that
    /// lacks a declared column is an [`Error::HeaderMissingColumn`].
    Reject,
    /// Read the missing fields as absent (SQL NULL).
    Null,
}

/// What to do with a record that has more fields than the file's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// Reject the record ([`RejectReason::TooManyFields`]).
    Reject,
    /// Drop the extra fields.
    Ignore,
}

/// How a delimited file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvConfig {
    /// The field delimiter: any byte but `"`, `\r` and `\n`.
    pub delimiter: u8,
    /// Whether the first line names the columns. Header names are matched
    /// to the schema's column names (ASCII case-insensitive, surrounding
    /// spaces and a UTF-8 byte-order mark ignored), in any order; columns
    /// the schema does not declare are skipped, as a projection would (a
    /// misspelt declared column is still caught: the header lacks it).
    /// Without a header, file column `i` is schema column `i`.
    pub header: bool,
    /// Records with fewer fields.
    pub missing: Missing,
    /// Records with more fields.
    pub extra: Extra,
}

impl Default for CsvConfig {
    /// Comma-separated, no header, short and long records rejected.
    fn default() -> Self {
        Self {
            delimiter: b',',
            header: false,
            missing: Missing::Reject,
            extra: Extra::Reject,
        }
    }
}

impl CsvConfig {
    /// The seed's v1 CSV: comma-separated with a header, strict.
    pub fn v1() -> Self {
        Self {
            header: true,
            ..Self::default()
        }
    }

    /// The AMPLab Big Data Benchmark text tables (uservisits, rankings):
    /// comma-separated, no header, no quoting in practice, strict. Java
    /// floats such as `1.1885166E-4` are plain field text here and read by
    /// `cardinal_event::Value::parse`. Schemas: [`crate::amplab`].
    pub fn amplab() -> Self {
        Self::default()
    }
}

/// File column index -> schema column, for a dropped column.
const DROPPED: u32 = u32::MAX;

/// Reads delimited text chunks into [`Batch`]es. One parser per input: it
/// remembers whether the input's header has been read.
#[derive(Debug, Clone)]
pub struct CsvParser {
    config: CsvConfig,
    names: Vec<Arc<str>>,
    width: usize,
    /// Columns per file record (the header's, or the schema's).
    file_width: usize,
    /// File column -> schema column or `DROPPED`, from the header.
    map: Vec<u32>,
    /// `map` with the columns outside the projection dropped too.
    row_map: Vec<u32>,
    /// `map` is the identity: file column `i` is schema column `i`.
    identity: bool,
    /// Per schema column: whether it is in the projection.
    wanted: Vec<bool>,
    /// The schema columns outside the projection, ascending.
    blank: Vec<u32>,
    /// The columns of `blank` below `needed`: the ones the fast path
    /// splits and then blanks.
    blank_split: Vec<u32>,
    /// How many leading file fields the fast path splits: one past the
    /// last file column the projection maps to (at least 1).
    needed: usize,
    header_pending: bool,
    /// The current record's fields in file order (capacity FIELDS_MAX).
    row: Vec<Span>,
    /// The fast path's classifier, supported by this CPU.
    scanner: Scanner,
    /// The fast path's scratch: the current record's split fields, then
    /// absent ones (FIELDS_MAX long).
    spans: Vec<Span>,
}

impl CsvParser {
    /// A parser for records of `schema` laid out as `config` says.
    pub fn new(schema: &Schema, config: CsvConfig) -> Result<Self> {
        let width = schema.columns.len();
        if width == 0 {
            return Err(Error::EmptySchema);
        }
        if width > FIELDS_MAX {
            return Err(Error::TooManyColumns {
                columns: width,
                max: FIELDS_MAX,
            });
        }
        if matches!(config.delimiter, b'"' | b'\r' | b'\n') {
            return Err(Error::Delimiter {
                delimiter: char::from(config.delimiter),
            });
        }
        let map = (0..width)
            .map(|c| u32::try_from(c).expect("width <= FIELDS_MAX"))
            .collect();
        let mut parser = Self {
            config,
            names: schema
                .columns
                .iter()
                .map(|c| c.name.as_str().into())
                .collect(),
            width,
            file_width: width,
            map,
            row_map: Vec::new(),
            identity: true,
            wanted: vec![true; width],
            blank: Vec::new(),
            blank_split: Vec::new(),
            needed: width,
            header_pending: config.header,
            row: Vec::with_capacity(FIELDS_MAX),
            scanner: Scanner::detect(),
            spans: vec![Span::ABSENT; FIELDS_MAX],
        };
        parser.refresh_projection();
        Ok(parser)
    }

    /// Keeps only the schema columns `columns` (the union of what the
    /// stream's summaries read); the others read as absent (`None`).
    ///
    /// On quote-free lines the fast path then stops splitting after the
    /// last file column it needs and only counts the delimiters left on
    /// the line, so records and rejects are those of the full parse with
    /// the other columns blanked out: a record's field count is still
    /// checked against the file's columns ([`Missing`], [`Extra`]) and
    /// [`FIELDS_MAX`], and [`RECORD_BYTES_MAX`] still applies. Lines with a
    /// quote anywhere take the general path whole, since a quoted field
    /// past the projection may hold delimiters or newlines.
    ///
    /// May be called before or after the header is read; an empty list
    /// keeps no column (a `count(*)` reads none).
    ///
    /// # Panics
    ///
    /// If a column is not below the schema's width (a plan's column list
    /// comes from code that resolved it against the same schema).
    pub fn project(&mut self, columns: &[usize]) {
        self.wanted.fill(false);
        for &column in columns {
            assert!(
                column < self.width,
                "column {column} of {} columns",
                self.width
            );
            self.wanted[column] = true;
        }
        self.refresh_projection();
    }

    /// The classifier the fast path runs: the fastest this CPU has
    /// ([`Scanner::detect`]) unless [`set_scanner`](Self::set_scanner)
    /// chose another.
    pub fn scanner(&self) -> Scanner {
        self.scanner
    }

    /// Runs the fast path with `scanner` (all give the same batches; tests
    /// and benchmarks compare them).
    ///
    /// # Panics
    ///
    /// If this CPU does not run `scanner` ([`Scanner::is_supported`]).
    pub fn set_scanner(&mut self, scanner: Scanner) {
        assert!(scanner.is_supported(), "{scanner:?} is not supported here");
        self.scanner = scanner;
    }

    /// Recomputes what the projection means for this file's column order.
    fn refresh_projection(&mut self) {
        self.row_map = self
            .map
            .iter()
            .map(|&c| {
                if c != DROPPED && self.wanted[c as usize] {
                    c
                } else {
                    DROPPED
                }
            })
            .collect();
        self.needed = self
            .row_map
            .iter()
            .rposition(|&c| c != DROPPED)
            .map_or(1, |f| f + 1);
        self.blank = (0..self.width)
            .filter(|&c| !self.wanted[c])
            .map(|c| u32::try_from(c).expect("width <= FIELDS_MAX"))
            .collect();
        self.blank_split = self
            .blank
            .iter()
            .copied()
            .filter(|&c| (c as usize) < self.needed)
            .collect();
        assert!(
            self.file_width <= FIELDS_MAX,
            "a header has at most FIELDS_MAX names"
        );
        assert!(self.needed >= 1);
        assert!(self.needed <= FIELDS_MAX);
        assert!(self.needed <= self.file_width.max(1));
    }

    /// Parses the batch's chunk, replacing its records and rejects.
    ///
    /// With a header configured, the input's first chunk must start the
    /// input (offset 0); its first line is read as the header. An `Err` is
    /// a header that does not fit the schema; malformed records are
    /// [`Reject`]s in the batch.
    pub fn parse(&mut self, batch: &mut Batch) -> Result<()> {
        self.parse_chunk(batch, true)?;
        self.name_rejects(batch);
        Ok(())
    }

    /// [`parse`](Self::parse) on the general path only: the reference the
    /// fast path is tested against.
    pub fn parse_without_fast_path(&mut self, batch: &mut Batch) -> Result<()> {
        self.parse_chunk(batch, false)?;
        self.name_rejects(batch);
        Ok(())
    }

    /// Names the schema column of each reject's file column, if it maps
    /// to one.
    fn name_rejects(&self, batch: &mut Batch) {
        batch.name_rejects(|column| {
            let schema = *self.map.get(column)?;
            (schema != DROPPED).then(|| self.names[schema as usize].clone())
        });
    }

    /// The columns of the file: those its header named, or the schema's
    /// without a header.
    pub fn file_width(&self) -> usize {
        self.file_width
    }

    /// Reads the header from `line` (for a reader that starts after it, as
    /// the readers of later byte ranges of one file do).
    pub fn read_header(&mut self, input: &Arc<str>, line: &[u8]) -> Result<()> {
        let mut chunk = Chunk::default();
        chunk.set(input, Some(1), 0, line);
        self.header_pending = true;
        self.take_header(&chunk).map(|_| ())
    }

    fn parse_chunk(&mut self, batch: &mut Batch, fast: bool) -> Result<()> {
        batch.begin(self.width);
        let mut pos = 0;
        // A byte-order mark opening a file without a header is not part of
        // its first field.
        let bom = !self.header_pending
            && batch.chunk.offset == 0
            && batch.chunk.bytes().starts_with(UTF8_BOM);
        if self.header_pending && !batch.chunk.is_empty() {
            pos = self.take_header(&batch.chunk)?;
        } else if bom {
            pos = UTF8_BOM.len();
        }
        let Batch {
            chunk,
            fields,
            starts,
            lines,
            side,
            rejects,
            ..
        } = batch;
        let data = chunk.bytes();
        let delimiter = self.config.delimiter;
        let scanner = self.scanner;
        let mut out = Out {
            chunk,
            map: &self.row_map,
            identity: self.identity,
            blank: &self.blank,
            blank_split: &self.blank_split,
            needed: self.needed,
            skipped: 0,
            width: self.width,
            file_width: self.file_width,
            missing: self.config.missing,
            extra: self.config.extra,
            capture: false,
            captured: false,
            direct: self.identity,
            base: 0,
            row: &mut self.row,
            spans: &mut self.spans,
            overflow: false,
            fields,
            starts,
            lines,
            side,
            side_mark: 0,
            rejects,
            line: 0,
            line_pos: 0,
        };
        out.row.clear();
        if !fast {
            parse_records(data, pos, data.len(), delimiter, &mut out);
            return Ok(());
        }
        if bom && pos < data.len() {
            // The fast path starts at a line's start: the first record
            // takes the general one.
            pos = parse_record(data, pos, delimiter, &mut out);
        }
        while pos < data.len() {
            match memchr(b'"', &data[pos..]) {
                None => {
                    out.sync_line(data, pos);
                    scan(scanner, data, pos, data.len(), delimiter, &mut out);
                    break;
                }
                Some(k) => {
                    let quote = pos + k;
                    let line_start = memrchr(b'\n', &data[pos..quote]).map_or(pos, |k| pos + k + 1);
                    out.sync_line(data, pos);
                    scan(scanner, data, pos, line_start, delimiter, &mut out);
                    pos = parse_records(data, line_start, quote, delimiter, &mut out);
                }
            }
        }
        Ok(())
    }

    /// Reads the header line of `chunk`, maps it to the schema, and returns
    /// where the records start.
    fn take_header(&mut self, chunk: &Chunk) -> Result<usize> {
        if chunk.offset != 0 && self.header_pending {
            return Err(Error::HeaderNotAtStart {
                input: chunk.input.clone(),
                offset: chunk.offset,
            });
        }
        let data = chunk.bytes();
        let (mut fields, mut starts, mut lines, mut side, mut rejects) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut row = Vec::with_capacity(FIELDS_MAX);
        let mut out = Out {
            chunk,
            map: &[],
            identity: true,
            blank: &[],
            blank_split: &[],
            needed: FIELDS_MAX,
            skipped: 0,
            width: 0,
            file_width: 0,
            missing: Missing::Null,
            extra: Extra::Ignore,
            capture: true,
            captured: false,
            direct: false,
            base: 0,
            row: &mut row,
            spans: &mut [],
            overflow: false,
            fields: &mut fields,
            starts: &mut starts,
            lines: &mut lines,
            side: &mut side,
            side_mark: 0,
            rejects: &mut rejects,
            line: 0,
            line_pos: 0,
        };
        // A UTF-8 byte-order mark before the header is not part of it.
        let mut pos = if data.starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        while pos < data.len() && !out.captured && out.rejects.is_empty() {
            pos = parse_record(data, pos, self.config.delimiter, &mut out);
        }
        if let Some(reject) = rejects.first() {
            return Err(Error::HeaderMalformed {
                input: chunk.input.clone(),
                reason: reject.reason,
            });
        }
        let names: Vec<String> = row
            .iter()
            .map(|span| {
                let bytes = span.resolve(data, &side).unwrap_or_default();
                String::from_utf8_lossy(bytes).trim().to_owned()
            })
            .collect();
        self.map_header(&chunk.input, &names)?;
        self.header_pending = false;
        Ok(pos)
    }

    fn map_header(&mut self, input: &Arc<str>, names: &[String]) -> Result<()> {
        let mut seen = vec![false; self.width];
        let mut map = Vec::with_capacity(names.len());
        for name in names {
            match self.names.iter().position(|n| n.eq_ignore_ascii_case(name)) {
                Some(column) if seen[column] => {
                    return Err(Error::HeaderDuplicate {
                        input: input.clone(),
                        name: name.clone(),
                    });
                }
                Some(column) => {
                    seen[column] = true;
                    map.push(u32::try_from(column).expect("width <= FIELDS_MAX"));
                }
                None => map.push(DROPPED),
            }
        }
        if self.config.missing == Missing::Reject
            && let Some(column) = seen.iter().position(|&s| !s)
        {
            return Err(Error::HeaderMissingColumn {
                input: input.clone(),
                name: self.names[column].to_string(),
            });
        }
        self.file_width = names.len();
        self.identity =
            self.file_width == self.width && map.iter().enumerate().all(|(i, &c)| c as usize == i);
        self.map = map;
        self.refresh_projection();
        Ok(())
    }
}

/// Where finished records go, and the current record's state.
struct Out<'a> {
    chunk: &'a Chunk,
    /// File column -> schema column, `DROPPED` for columns not kept.
    map: &'a [u32],
    identity: bool,
    /// Schema columns outside the projection (identity mode blanks them).
    blank: &'a [u32],
    /// The ones below `needed` (`CsvParser::blank_split`).
    blank_split: &'a [u32],
    /// Leading fields the fast path splits before it only counts.
    needed: usize,
    /// Fields of the current record counted but not stored (fast path,
    /// past `needed`).
    skipped: usize,
    width: usize,
    file_width: usize,
    missing: Missing,
    extra: Extra,
    /// Header mode: keep the first record's fields in `row` and stop.
    capture: bool,
    captured: bool,
    /// File columns are schema columns: fields go straight to `fields`
    /// from `base` on, with no copy through `row`.
    direct: bool,
    /// Where the current record's spans start in `fields` (direct mode).
    base: usize,
    /// The current record's fields in file order (not direct mode).
    row: &'a mut Vec<Span>,
    /// The fast path's scratch row (`CsvParser::spans`).
    spans: &'a mut [Span],
    /// The record had more than FIELDS_MAX fields.
    overflow: bool,
    fields: &'a mut Vec<Span>,
    starts: &'a mut Vec<u32>,
    lines: &'a mut Vec<u32>,
    side: &'a mut Vec<u8>,
    /// The side buffer's length when the current record began.
    side_mark: usize,
    rejects: &'a mut Vec<Reject>,
    /// The chunk line index of byte `line_pos`.
    line: u32,
    line_pos: usize,
}

impl Out<'_> {
    #[inline(always)]
    fn push_field(&mut self, span: Span) {
        if self.count() >= FIELDS_MAX {
            self.overflow = true;
        } else if self.direct {
            self.fields.push(span);
        } else {
            self.row.push(span);
        }
    }

    /// [`push_field`](Self::push_field) for the fast path, which never
    /// splits more than `needed` (at most FIELDS_MAX) fields of a record.
    #[inline(always)]
    fn push_needed(&mut self, span: Span) {
        debug_assert!(self.count() < self.needed);
        debug_assert!(self.needed <= FIELDS_MAX);
        if self.direct {
            self.fields.push(span);
        } else {
            self.row.push(span);
        }
    }

    /// Fields of the current record stored so far (at most FIELDS_MAX).
    #[inline(always)]
    fn stored(&self) -> usize {
        if self.direct {
            self.fields.len() - self.base
        } else {
            self.row.len()
        }
    }

    /// Fields of the current record so far, stored or only counted.
    #[inline(always)]
    fn count(&self) -> usize {
        self.stored() + self.skipped
    }

    /// Advances the line count to byte `pos` (a record start).
    #[allow(clippy::cast_possible_truncation)]
    fn sync_line(&mut self, data: &[u8], pos: usize) {
        debug_assert!(pos >= self.line_pos);
        // Lines are fewer than bytes, and bytes fit 31 bits (Batch::begin).
        self.line += data[self.line_pos..pos]
            .iter()
            .map(|&b| u32::from(b == b'\n'))
            .sum::<u32>();
        self.line_pos = pos;
    }

    fn reject(&mut self, start: usize, column: Option<usize>, reason: RejectReason) {
        self.rejects.push(Batch::reject_at(
            self.chunk, start, self.line, column, reason,
        ));
        self.row.clear();
        self.fields.truncate(self.base);
        self.overflow = false;
        self.skipped = 0;
        self.side.truncate(self.side_mark);
    }

    /// Ends the record spanning `start..end` (`end` at its newline or the
    /// chunk's end): checks it against the limits and policies, then lays
    /// its spans out in schema order.
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)]
    fn finish(&mut self, start: usize, end: usize) {
        if self.capture {
            self.captured = true;
            return;
        }
        let count = self.count();
        if self.overflow || count > FIELDS_MAX {
            return self.reject(start, Some(FIELDS_MAX), RejectReason::FieldsMax);
        }
        if end - start > RECORD_BYTES_MAX {
            return self.reject(start, None, RejectReason::RecordBytesMax);
        }
        if count != self.file_width {
            if count < self.file_width && self.missing == Missing::Reject {
                return self.reject(start, Some(count), RejectReason::TooFewFields);
            }
            if count > self.file_width && self.extra == Extra::Reject {
                return self.reject(start, Some(self.file_width), RejectReason::TooManyFields);
            }
        }
        // Fields past the file's columns are dropped; fields only counted
        // (past the projection) were never stored.
        let used = count.min(self.file_width).min(self.stored());
        if self.direct || self.identity {
            if self.direct {
                self.fields.truncate(self.base + used);
            } else {
                self.fields.extend_from_slice(&self.row[..used]);
            }
            let base = self.fields.len() - used;
            self.fields
                .extend(std::iter::repeat_n(Span::ABSENT, self.width - used));
            for &column in self.blank {
                self.fields[base + column as usize] = Span::ABSENT;
            }
        } else {
            let base = self.fields.len();
            self.fields.resize(base + self.width, Span::ABSENT);
            for (&column, &span) in self.map.iter().zip(&self.row[..used]) {
                if column != DROPPED {
                    self.fields[base + column as usize] = span;
                }
            }
        }
        // Offsets and line indexes fit 31 bits (Batch::begin).
        self.starts.push(start as u32);
        self.lines.push(self.line);
        self.row.clear();
        self.skipped = 0;
        self.base = self.fields.len();
        debug_assert_eq!(self.base, self.starts.len() * self.width);
    }

    /// Ends a fast-path record spanning `start..end` on line `line`: its
    /// split fields are `spans[..stored]`, and `skipped` more were
    /// counted. `spans[self.needed..self.width]` are absent.
    ///
    /// The common record (the file's width, not too long, columns in
    /// schema order) is copied out here in one go; any other goes through
    /// [`finish`](Self::finish), so the policies and rejects live in one
    /// place.
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)]
    fn finish_plain(
        &mut self,
        start: usize,
        end: usize,
        spans: &[Span; FIELDS_MAX],
        stored: usize,
        skipped: usize,
        line: u32,
    ) {
        debug_assert!(!self.capture);
        debug_assert_eq!(self.count(), 0);
        debug_assert!(stored <= self.needed);
        let count = stored + skipped;
        // `count <= FIELDS_MAX` follows from the width check, since
        // `file_width <= FIELDS_MAX` (`refresh_projection`).
        if !(self.direct && count == self.file_width && end - start <= RECORD_BYTES_MAX) {
            for &span in &spans[..stored] {
                self.push_needed(span);
            }
            self.skipped = skipped;
            self.line = line;
            return self.finish(start, end);
        }
        // Direct mode is the identity map, so the file's width is the
        // schema's and every split field is kept; a record of the file's
        // width has split all `needed` fields.
        debug_assert_eq!(self.file_width, self.width);
        debug_assert_eq!(stored, self.needed);
        debug_assert!(count <= FIELDS_MAX);
        let base = self.fields.len();
        copy_row(self.fields, spans, self.width);
        // Columns from `needed` on are absent in `spans` already.
        for &column in self.blank_split {
            self.fields[base + column as usize] = Span::ABSENT;
        }
        // Offsets and line indexes fit 31 bits (Batch::begin).
        self.starts.push(start as u32);
        self.lines.push(line);
        self.line = line;
        self.base = self.fields.len();
        debug_assert_eq!(self.base, self.starts.len() * self.width);
    }
}

/// Appends `spans[..width]` to `fields`. Rows of up to 8 and 16 spans
/// (most streams) are copied as one fixed-size block and cut back, which
/// compiles to a few vector moves instead of a loop or a `memcpy` call.
#[inline(always)]
fn copy_row(fields: &mut Vec<Span>, spans: &[Span; FIELDS_MAX], width: usize) {
    #[inline(always)]
    fn block<const N: usize>(fields: &mut Vec<Span>, spans: &[Span; FIELDS_MAX], width: usize) {
        let base = fields.len();
        let row: [Span; N] = spans[..N].try_into().expect("N <= FIELDS_MAX");
        fields.extend(row);
        fields.truncate(base + width);
    }
    if width <= 8 {
        block::<8>(fields, spans, width);
    } else if width <= 16 {
        block::<16>(fields, spans, width);
    } else {
        fields.extend_from_slice(&spans[..width]);
    }
}

/// The general path: parses records from `from` (a line start) until a
/// record starts after `bound` or the chunk ends, and returns where the
/// next record starts.
fn parse_records(data: &[u8], from: usize, bound: usize, delimiter: u8, out: &mut Out) -> usize {
    let mut pos = from;
    while pos < data.len() && pos <= bound {
        out.sync_line(data, pos);
        pos = parse_record(data, pos, delimiter, out);
    }
    pos
}

/// Parses one record (or blank line) at `start` and returns where the next
/// one starts.
fn parse_record(data: &[u8], start: usize, delimiter: u8, out: &mut Out) -> usize {
    let len = data.len();
    debug_assert!(start < len);
    if data[start] == b'\n' {
        return start + 1;
    }
    if data[start] == b'\r' && matches!(data.get(start + 1), Some(b'\n') | None) {
        return (start + 2).min(len);
    }
    out.side_mark = out.side.len();
    let mut p = start;
    loop {
        if p < len && data[p] == b'"' {
            let content = p + 1;
            let mut segment = content;
            let mut escaped = false;
            let side_start = out.side.len();
            p = content;
            loop {
                let Some(k) = memchr(b'"', &data[p..]) else {
                    let column = out.count();
                    out.reject(start, Some(column), RejectReason::UnterminatedQuote);
                    return memchr(b'\n', &data[start..]).map_or(len, |k| start + k + 1);
                };
                let quote = p + k;
                if data.get(quote + 1) == Some(&b'"') {
                    out.side.extend_from_slice(&data[segment..=quote]);
                    escaped = true;
                    segment = quote + 2;
                    p = quote + 2;
                    continue;
                }
                let span = if escaped {
                    out.side.extend_from_slice(&data[segment..quote]);
                    Span::side(side_start, out.side.len())
                } else {
                    Span::chunk(content, quote)
                };
                out.push_field(span);
                p = quote + 1;
                break;
            }
            match data.get(p) {
                None => {
                    out.finish(start, p);
                    return p;
                }
                Some(&b) if b == delimiter => p += 1,
                Some(b'\n') => {
                    out.finish(start, p);
                    return p + 1;
                }
                Some(b'\r') if matches!(data.get(p + 1), Some(b'\n') | None) => {
                    out.finish(start, p + 1);
                    return (p + 2).min(len);
                }
                Some(_) => {
                    let column = out.count().saturating_sub(1);
                    out.reject(start, Some(column), RejectReason::TextAfterQuote);
                    return memchr(b'\n', &data[p..]).map_or(len, |k| p + k + 1);
                }
            }
        } else {
            let end = memchr2(delimiter, b'\n', &data[p..]).map_or(len, |k| p + k);
            if end < len && data[end] == delimiter {
                out.push_field(Span::chunk(p, end));
                p = end + 1;
                continue;
            }
            let field_end = if end > p && data[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            out.push_field(Span::chunk(p, field_end));
            out.finish(start, end);
            return if end < len { end + 1 } else { end };
        }
    }
}

/// The fast path over `from..to`: whole lines without a quote byte, 64
/// bytes per step, classified by `classify` into delimiter and newline
/// masks ([`crate::structural`]).
///
/// Work is per field, not per byte: each set bit of the masks up to the
/// projection's last needed field ends a span; past it, the record's
/// remaining fields are counted with `count_ones` over the delimiter mask
/// up to the next newline bit, a block at a time.
#[inline(always)]
fn scan_blocks<C: Classify>(
    classify: C,
    data: &[u8],
    from: usize,
    to: usize,
    delimiter: u8,
    out: &mut Out,
) {
    debug_assert!(
        memchr(b'"', &data[from..to]).is_none(),
        "fast path needs quote-free lines"
    );
    debug_assert!(from == 0 || data[from - 1] == b'\n');
    debug_assert!(to == from || to == data.len() || data[to - 1] == b'\n');
    debug_assert_eq!(out.count(), 0);
    debug_assert_eq!(out.line_pos, from);
    debug_assert!(out.needed >= 1);
    let data = &data[..to];
    out.side_mark = out.side.len();
    let spans = std::mem::take(&mut out.spans);
    assert!(
        out.needed <= spans.len(),
        "FIELDS_MAX spans for FIELDS_MAX fields"
    );
    assert!(
        out.width <= spans.len(),
        "FIELDS_MAX spans for FIELDS_MAX columns"
    );
    // The columns past the projection are never split: absent (records
    // are copied out of `spans` whole only when the file's columns are
    // the schema's, `Out::finish_plain`).
    spans[out.needed.min(out.width)..out.width].fill(Span::ABSENT);
    let mut cursor = Cursor {
        field_start: from,
        record_start: from,
        line: out.line,
        needed: out.needed,
        taken: 0,
        skipped: 0,
        spans: (&mut spans[..FIELDS_MAX])
            .try_into()
            .expect("FIELDS_MAX spans"),
    };
    let mut base = from;
    let mut blocks = data[from..].chunks_exact(BLOCK);
    for block in &mut blocks {
        let block = block.try_into().expect("64 bytes");
        cursor.block(data, base, classify.block(block, delimiter), out);
        base += BLOCK;
    }
    debug_assert_eq!(to - base, blocks.remainder().len());
    if base < to {
        // The last bytes, padded; the padding's bits are masked off (a
        // zero byte may be the delimiter).
        let mut block = [0; BLOCK];
        block[..to - base].copy_from_slice(&data[base..]);
        let masks = classify.block(&block, delimiter).below(to - base);
        cursor.block(data, base, masks, out);
    }
    if cursor.record_start < to {
        // The input's last line, without a newline: as if it had one.
        cursor.newline(data, to, out);
    }
    out.line = cursor.line;
    out.line_pos = to;
    out.spans = spans;
}

/// The fast path over `from..to` with `scanner`'s classifier.
fn scan(scanner: Scanner, data: &[u8], from: usize, to: usize, delimiter: u8, out: &mut Out) {
    match scanner {
        Scanner::Swar => scan_swar(data, from, to, delimiter, out),
        #[cfg(target_arch = "x86_64")]
        Scanner::Sse2 => scan_sse2(data, from, to, delimiter, out),
        #[cfg(target_arch = "x86_64")]
        Scanner::Avx2 => {
            let avx2 = Avx2::new().expect("the parser checked its scanner");
            // SAFETY: `avx2` exists, so this CPU has AVX2, BMI1 and
            // POPCNT, the features `scan_avx2` is compiled for.
            unsafe { scan_avx2(avx2, data, from, to, delimiter, out) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Scanner::Sse2 | Scanner::Avx2 => unreachable!("{scanner:?} is x86_64 only"),
    }
}

/// [`scan_blocks`] with the portable classifier.
fn scan_swar(data: &[u8], from: usize, to: usize, delimiter: u8, out: &mut Out) {
    scan_blocks(Swar, data, from, to, delimiter, out);
}

/// [`scan_blocks`] with SSE2 (in every x86_64 CPU).
#[cfg(target_arch = "x86_64")]
fn scan_sse2(data: &[u8], from: usize, to: usize, delimiter: u8, out: &mut Out) {
    scan_blocks(Sse2, data, from, to, delimiter, out);
}

/// [`scan_blocks`] with AVX2, compiled for AVX2, BMI1 (`tzcnt`, `blsr`)
/// and POPCNT, which `avx2` guarantees the CPU has.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,bmi1,popcnt")]
fn scan_avx2(avx2: Avx2, data: &[u8], from: usize, to: usize, delimiter: u8, out: &mut Out) {
    scan_blocks(avx2, data, from, to, delimiter, out);
}

/// The fast path's position: where the current field and record began,
/// and the record's split fields.
struct Cursor<'a> {
    field_start: usize,
    record_start: usize,
    line: u32,
    /// `Out::needed`: fields split per record before the rest are only
    /// counted.
    needed: usize,
    /// Fields of the current record split so far, in `spans[..taken]`;
    /// `needed` once the rest of the line is only counted.
    taken: usize,
    /// Fields counted past the projection (`taken == needed`), the one
    /// after the last split delimiter included.
    skipped: usize,
    /// `Out::spans`: split fields, then absent ones up to the width.
    spans: &'a mut [Span; FIELDS_MAX],
}

impl Cursor<'_> {
    /// Takes the structural bytes of the block at `base`, in order.
    #[inline(always)]
    fn block(&mut self, data: &[u8], base: usize, masks: Masks, out: &mut Out) {
        let Masks {
            delimiters,
            newlines,
        } = masks;
        // Delimiters and newlines not taken yet.
        let mut rest = delimiters | newlines;
        loop {
            if self.taken < self.needed {
                // Splitting: each bit ends a field, until the projection's
                // last one or a newline.
                loop {
                    if rest == 0 {
                        return;
                    }
                    let bit = rest & rest.wrapping_neg();
                    let pos = base + rest.trailing_zeros() as usize;
                    rest ^= bit;
                    if newlines & bit != 0 {
                        self.newline(data, pos, out);
                        break;
                    }
                    if self.delimiter(pos) {
                        break;
                    }
                }
            } else {
                // Past the projection: count delimiters up to the newline.
                let ends = newlines & rest;
                if ends == 0 {
                    self.skipped += (delimiters & rest).count_ones() as usize;
                    return;
                }
                let end = ends & ends.wrapping_neg();
                self.skipped += (delimiters & rest & (end - 1)).count_ones() as usize;
                self.newline(data, base + ends.trailing_zeros() as usize, out);
                // Everything above the newline; nothing when it is bit 63.
                rest &= (end << 1).wrapping_neg();
            }
        }
    }

    /// A field ends at delimiter `pos`; true when it was the last one
    /// the projection needs.
    #[inline(always)]
    fn delimiter(&mut self, pos: usize) -> bool {
        debug_assert!(self.taken < self.needed);
        self.spans[self.taken] = Span::chunk(self.field_start, pos);
        self.field_start = pos + 1;
        self.taken += 1;
        if self.taken == self.needed {
            // The one after this delimiter is the first field only
            // counted.
            self.skipped = 1;
            return true;
        }
        false
    }

    /// A record ends at `pos`: a newline, or the end of the last line.
    #[inline(always)]
    fn newline(&mut self, data: &[u8], pos: usize, out: &mut Out) {
        if self.taken == self.needed {
            debug_assert!(pos > self.record_start);
            out.finish_plain(
                self.record_start,
                pos,
                self.spans,
                self.taken,
                self.skipped,
                self.line,
            );
        } else {
            let end = if pos > self.field_start && data[pos - 1] == b'\r' {
                pos - 1
            } else {
                pos
            };
            // A blank line: nothing but an optional CR, no field split yet.
            if !(end == self.record_start && self.taken == 0) {
                self.spans[self.taken] = Span::chunk(self.field_start, end);
                out.finish_plain(
                    self.record_start,
                    pos,
                    self.spans,
                    self.taken + 1,
                    0,
                    self.line,
                );
            }
        }
        debug_assert_eq!(out.count(), 0);
        self.line += 1;
        self.field_start = pos + 1;
        self.record_start = pos + 1;
        self.taken = 0;
        self.skipped = 0;
    }
}
