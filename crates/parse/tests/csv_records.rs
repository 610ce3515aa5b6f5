//! Delimited text read in pieces finds the records of the whole: quoted
//! fields may hold newlines, CRLF, doubled quotes and delimiters, and
//! neither a chunk boundary nor a byte range of a split file may fall
//! inside one. Valid CSV is checked against the `csv` crate; arbitrary
//! CSV-ish bytes against one parse of the whole input.

mod common;

use std::path::PathBuf;

use cardinal_parse::{Batch, CsvConfig, CsvParser, Extra, Missing};
use cardinal_source::{Framing, Input, LineReader, split_file_records};
use common::{load, render_records, render_rejects, schema};
use proptest::prelude::*;

const COLUMNS: [&str; 3] = ["a", "b", "c"];

/// A record's fields, and the rejects' reasons, without line numbers
/// (a byte range after the first does not know its lines).
#[derive(Debug, Default, PartialEq)]
struct Read {
    records: Vec<String>,
    rejects: Vec<String>,
}

impl Read {
    fn add(&mut self, batch: &Batch, lines: bool) {
        let strip = |s: String| {
            if lines {
                s
            } else {
                s.split_once(':')
                    .map(|(_, rest)| rest.to_owned())
                    .unwrap_or(s)
            }
        };
        self.records
            .extend(render_records(batch).into_iter().map(strip));
        self.rejects
            .extend(render_rejects(batch).into_iter().map(strip));
    }
}

fn parser(config: CsvConfig) -> CsvParser {
    CsvParser::new(&schema(&COLUMNS), config).expect("a valid schema")
}

/// The input parsed as one chunk.
fn whole(input: &[u8], config: CsvConfig, lines: bool) -> Read {
    let mut batch = Batch::new();
    load(&mut batch, input);
    parser(config).parse(&mut batch).expect("no header");
    let mut read = Read::default();
    read.add(&batch, lines);
    read
}

/// The input read through a reader with CSV framing in chunks of
/// `chunk_bytes`.
fn chunked(input: &[u8], config: CsvConfig, chunk_bytes: usize, lines: bool) -> Read {
    let source = Input::from_reader("t", std::io::Cursor::new(input.to_vec())).expect("memory");
    read_input(source, config, chunk_bytes, lines)
}

fn read_input(source: Input, config: CsvConfig, chunk_bytes: usize, lines: bool) -> Read {
    let framing = Framing::Csv {
        delimiter: config.delimiter,
    };
    let mut reader = LineReader::with_chunk_bytes(source, chunk_bytes).with_framing(framing);
    let mut parser = parser(config);
    let mut batch = Batch::new();
    let mut read = Read::default();
    while reader.read_chunk(batch.chunk_mut()).expect("short lines") {
        parser.parse(&mut batch).expect("no header");
        read.add(&batch, lines);
    }
    read
}

/// The input written to a file, split into `parts` byte ranges, each read
/// by its own reader, in order.
fn ranges(input: &[u8], config: CsvConfig, parts: usize, chunk_bytes: usize) -> Read {
    static FILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "cardinal-csv-records-{}-{n}.csv",
        std::process::id()
    ));
    std::fs::write(&path, input).expect("temp file");
    let framing = Framing::Csv {
        delimiter: config.delimiter,
    };
    let cuts = split_file_records(&path, parts, framing).expect("plain file");
    let mut read = Read::default();
    for range in cuts {
        let source = Input::open_range(&path, range).expect("a range");
        let part = read_input(source, config, chunk_bytes, false);
        read.records.extend(part.records);
        read.rejects.extend(part.rejects);
    }
    std::fs::remove_file(&path).expect("temp file");
    read
}

/// The `csv` crate's records of `input`, rendered as `render_records`
/// renders fields.
fn oracle(input: &[u8]) -> Vec<String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input);
    reader
        .byte_records()
        .map(|record| {
            let record = record.expect("valid CSV");
            let fields: Vec<String> = record
                .iter()
                .map(|field| field.escape_ascii().to_string())
                .collect();
            fields.join("|")
        })
        .collect()
}

/// A field: plain text (a quote inside is data), or quoted with newlines,
/// CRLF, doubled quotes and delimiters inside.
fn field() -> impl Strategy<Value = Vec<u8>> {
    let plain = proptest::collection::vec(
        prop_oneof![Just("x"), Just("7"), Just(" "), Just("5\"")],
        0..4,
    )
    .prop_map(|parts| parts.concat().into_bytes());
    let quoted = proptest::collection::vec(
        prop_oneof![
            Just("y"),
            Just("\n"),
            Just("\r\n"),
            Just("\"\""),
            Just(","),
            Just("\n\n"),
        ],
        0..6,
    )
    .prop_map(|parts| format!("\"{}\"", parts.concat()).into_bytes());
    prop_oneof![plain, quoted]
}

/// Valid CSV of three fields per record, `\n` or `\r\n` after each, the
/// last one maybe without.
fn valid_csv() -> impl Strategy<Value = Vec<u8>> {
    let record = (
        proptest::collection::vec(field(), 3),
        prop_oneof![Just("\n"), Just("\r\n")],
    );
    (proptest::collection::vec(record, 1..40), any::<bool>()).prop_map(|(records, last)| {
        let mut out = Vec::new();
        let count = records.len();
        for (i, (fields, end)) in records.into_iter().enumerate() {
            // A record of three empty fields is `,,`, never a blank line.
            out.extend(fields.join(&b","[..]));
            if last || i + 1 < count {
                out.extend_from_slice(end.as_bytes());
            }
        }
        out
    })
}

/// Bytes that are CSV-ish but often malformed: stray and unbalanced
/// quotes, text after a closing quote, blank lines.
fn csvish() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            Just("\""),
            Just("\"\""),
            Just(","),
            Just("\n"),
            Just("\r\n"),
            Just("\r"),
            Just("ab"),
            Just("\"q\n\""),
        ],
        0..80,
    )
    .prop_map(|tokens| tokens.concat().into_bytes())
}

const LENIENT: CsvConfig = CsvConfig {
    delimiter: b',',
    header: false,
    missing: Missing::Null,
    extra: Extra::Ignore,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any chunk size and any split into 1, 2 or 3 byte ranges read the
    /// records the `csv` crate reads.
    #[test]
    fn pieces_read_the_records_the_csv_crate_reads(
        input in valid_csv(),
        chunk_bytes in 16usize..80,
    ) {
        let expected = oracle(&input);
        let fields = |read: Read| -> Vec<String> {
            read.records
                .into_iter()
                .map(|r| r.split_once(':').map(|(_, f)| f.to_owned()).unwrap_or(r))
                .collect()
        };
        let one = whole(&input, CsvConfig::default(), true);
        prop_assert!(one.rejects.is_empty(), "{:?}", one.rejects);
        prop_assert_eq!(fields(one), expected.clone());
        let pieces = chunked(&input, CsvConfig::default(), chunk_bytes, true);
        prop_assert!(pieces.rejects.is_empty(), "{:?}", pieces.rejects);
        prop_assert_eq!(fields(pieces), expected.clone());
        for parts in 1..=3 {
            let split = ranges(&input, CsvConfig::default(), parts, chunk_bytes);
            prop_assert!(split.rejects.is_empty(), "{:?}", split.rejects);
            prop_assert_eq!(split.records, expected.clone(), "{} parts", parts);
        }
    }

    /// On malformed input too, pieces find what one parse of the whole
    /// finds: the same records and rejects, with the same line numbers.
    #[test]
    fn pieces_equal_the_whole_on_any_csvish_bytes(
        input in csvish(),
        chunk_bytes in 16usize..64,
        lenient in any::<bool>(),
    ) {
        let config = if lenient { LENIENT } else { CsvConfig::default() };
        prop_assert_eq!(
            chunked(&input, config, chunk_bytes, true),
            whole(&input, config, true)
        );
        let unnumbered = whole(&input, config, false);
        for parts in 2..=3 {
            prop_assert_eq!(&ranges(&input, config, parts, chunk_bytes), &unnumbered);
        }
    }
}

/// A quoted field's newline at a chunk boundary: the reader of the seed
/// cut there, and the second half of the field was read as a record.
#[test]
fn a_quoted_newline_at_a_chunk_boundary_stays_in_its_field() {
    let input = b"1,\"first line\nsecond line\",z\n2,b,c\n";
    let expected = oracle(input);
    assert_eq!(expected.len(), 2);
    for chunk_bytes in 16..input.len() + 2 {
        let read = chunked(input, CsvConfig::default(), chunk_bytes, false);
        assert_eq!(read.records, expected, "chunks of {chunk_bytes}");
        assert!(read.rejects.is_empty(), "chunks of {chunk_bytes}");
    }
}

/// A large file whose quoted line breaks lie far from where it is split is
/// cut at newlines without being read through (only the bytes before each
/// range start are looked at), and one with a quoted line break just
/// before a split point is cut at record starts: both give the records of
/// one reader.
#[test]
fn large_files_split_where_records_start() {
    use cardinal_source::QUOTE_FREE_BEFORE_BYTES;
    let window = usize::try_from(QUOTE_FREE_BEFORE_BYTES).expect("fits");
    let quoted = b"q,\"one\nfield, two lines\",x\n";
    let plain_rows = |bytes: usize| {
        let mut rows = Vec::new();
        let mut n = 0u64;
        while rows.len() < bytes {
            rows.extend_from_slice(format!("{n},plain,{}\n", n * 7).as_bytes());
            n += 1;
        }
        rows
    };
    // Quoted fields only at both ends, each more than a window away from
    // the middle, where two parts are cut.
    let mut far = quoted.repeat(50);
    far.extend(plain_rows(3 * window));
    far.extend(quoted.repeat(50));
    // The same, with quoted line breaks all through it.
    let mut near = Vec::new();
    while near.len() < 3 * window {
        near.extend_from_slice(quoted);
        near.extend(plain_rows(4096));
    }
    // A quoted line break exactly where a cut at newlines would start the
    // second of two parts, with quote-free rows before and after it.
    let after = plain_rows(3 * window);
    let mut trap = plain_rows(after.len() - 64);
    let pad = after.len() + 20 - trap.len() - "pad,,0\n".len();
    trap.extend_from_slice(format!("pad,{},0\n", "x".repeat(pad)).as_bytes());
    assert_eq!(trap.len(), after.len() + 20);
    let line_break = trap.len() + "q,\"one\n".len();
    trap.extend_from_slice(quoted);
    trap.extend_from_slice(&after);
    let path = std::env::temp_dir().join(format!("cardinal-trap-{}.csv", std::process::id()));
    std::fs::write(&path, &trap).expect("temp file");
    let by_lines = cardinal_source::split_file(&path, 2).expect("plain file");
    std::fs::remove_file(&path).expect("temp file");
    assert_eq!(
        by_lines[1].start, line_break as u64,
        "the cut at newlines falls in the field"
    );
    for input in [&far, &near, &trap] {
        let expected = chunked(input, CsvConfig::default(), 1 << 16, false);
        assert!(expected.rejects.is_empty());
        for parts in [2, 3] {
            let read = ranges(input, CsvConfig::default(), parts, 1 << 16);
            assert_eq!(read.records.len(), expected.records.len(), "{parts} parts");
            assert!(read.records == expected.records, "{parts} parts");
            assert!(read.rejects.is_empty(), "{parts} parts");
        }
    }
}
