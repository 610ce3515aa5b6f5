//! The Parquet reader: files written with the parquet crate's own
//! `ArrowWriter`, read back through `cardinal_event::Record`, value for
//! value; type checks before any row is read; row numbers across row
//! groups; and corrupt files (cut short, bytes flipped) that must give an
//! error or rows, never a panic.

use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, DictionaryArray, Float32Array, Float64Array,
    Int8Array, Int16Array, Int32Array, Int64Array, LargeStringArray, ListArray, RecordBatch,
    StringArray, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray, UInt8Array, UInt32Array, UInt64Array,
};
use cardinal_event::{Column, ColumnType, Record, Schema, Timestamp, Value, ValueError};
use cardinal_parse::{Error, PARQUET_BATCH_ROWS, ParquetFile, is_parquet};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use proptest::prelude::*;

/// Writes `columns` as one Parquet file with row groups of
/// `row_group_rows`.
fn write(columns: Vec<(&str, ArrayRef)>, row_group_rows: usize) -> Vec<u8> {
    let batch = RecordBatch::try_from_iter(columns).expect("columns of equal length");
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let mut out = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    out
}

fn schema(columns: &[(&str, ColumnType)]) -> Schema {
    Schema {
        columns: columns
            .iter()
            .map(|&(name, ty)| Column {
                name: name.into(),
                ty,
                path: vec![name.into()],
            })
            .collect(),
    }
}

fn open(bytes: Vec<u8>, schema: &Schema) -> Result<ParquetFile, Error> {
    let reads: Vec<usize> = (0..schema.columns.len()).collect();
    ParquetFile::from_bytes(bytes, "t.parquet".into(), schema, &reads)
}

/// Every row's typed values, row number first, in file order.
fn rows(file: &ParquetFile, schema: &Schema) -> Vec<(u64, Vec<Result<String, ValueError>>)> {
    let mut out = Vec::new();
    let mut reader = file.read(0..file.row_groups()).expect("reader");
    while let Some(batch) = reader.next_batch().expect("batch") {
        assert!(batch.len() <= PARQUET_BATCH_ROWS);
        for i in 0..batch.len() {
            let record = batch.record(i);
            let values = schema
                .columns
                .iter()
                .enumerate()
                .map(|(c, column)| record.value(c, column.ty).map(|v| format!("{v:?}")))
                .collect();
            out.push((record.row(), values));
        }
    }
    out
}

fn show(value: Value<'_>) -> Result<String, ValueError> {
    Ok(format!("{value:?}"))
}

#[test]
fn every_accepted_type_reads_as_its_value() {
    let day = 20_393; // 2025-11-01
    let ms = i64::from(day) * 86_400_000 + 3_723_456; // 01:02:03.456
    let dictionary: DictionaryArray<Int32Type> =
        vec![Some("CA"), None, Some("CA")].into_iter().collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "i8",
            Arc::new(Int8Array::from(vec![Some(-8), None, Some(8)])),
        ),
        ("i16", Arc::new(Int16Array::from(vec![-16, 0, 16]))),
        ("i32", Arc::new(Int32Array::from(vec![-32, 0, i32::MAX]))),
        (
            "i64",
            Arc::new(Int64Array::from(vec![i64::MIN, 0, i64::MAX])),
        ),
        ("u8", Arc::new(UInt8Array::from(vec![0, 1, u8::MAX]))),
        ("u32", Arc::new(UInt32Array::from(vec![0, 1, u32::MAX]))),
        (
            "u64",
            Arc::new(UInt64Array::from(vec![0, i64::MAX as u64, u64::MAX])),
        ),
        ("f32", Arc::new(Float32Array::from(vec![0.25, -1.5, 0.1]))),
        (
            "f64",
            Arc::new(Float64Array::from(vec![Some(0.1), None, Some(f64::NAN)])),
        ),
        (
            "utf8",
            Arc::new(StringArray::from(vec![
                "a",
                "",
                "long text past twelve bytes",
            ])),
        ),
        (
            "large",
            Arc::new(LargeStringArray::from(vec!["x", "y", "z"])),
        ),
        ("dict", Arc::new(dictionary)),
        (
            "bin",
            Arc::new(BinaryArray::from(vec![&b"\xff"[..], b"", b"b"])),
        ),
        (
            "date",
            Arc::new(Date32Array::from(vec![Some(day), None, Some(0)])),
        ),
        (
            "ts_s",
            Arc::new(TimestampSecondArray::from(vec![ms / 1000, 0, -1])),
        ),
        (
            "ts_ms",
            Arc::new(TimestampMillisecondArray::from(vec![ms, 0, -1]).with_timezone("UTC")),
        ),
        (
            "ts_us",
            Arc::new(
                TimestampMicrosecondArray::from(vec![ms * 1000 + 999, 0, -1])
                    .with_timezone("+05:00"),
            ),
        ),
        (
            "ts_ns",
            Arc::new(TimestampNanosecondArray::from(vec![
                ms * 1_000_000 + 1,
                0,
                -1,
            ])),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(vec![Some(true), Some(false), None])),
        ),
        ("n_text", Arc::new(StringArray::from(vec!["42", "", "4x"]))),
        (
            "t_text",
            Arc::new(StringArray::from(vec![
                "2025-11-01T01:02:03.456Z",
                "",
                "soon",
            ])),
        ),
    ];
    let declared = schema(&[
        ("I8", ColumnType::BigInt),
        ("i16", ColumnType::BigInt),
        ("i32", ColumnType::BigInt),
        ("i64", ColumnType::BigInt),
        ("u8", ColumnType::BigInt),
        ("u32", ColumnType::BigInt),
        ("u64", ColumnType::BigInt),
        ("f32", ColumnType::Double),
        ("f64", ColumnType::Double),
        ("utf8", ColumnType::Text),
        ("large", ColumnType::Text),
        ("dict", ColumnType::Text),
        ("bin", ColumnType::Text),
        ("date", ColumnType::Timestamp),
        ("ts_s", ColumnType::Timestamp),
        ("ts_ms", ColumnType::Timestamp),
        ("ts_us", ColumnType::Timestamp),
        ("ts_ns", ColumnType::Timestamp),
        ("flag", ColumnType::Bool),
        ("n_text", ColumnType::BigInt),
        ("t_text", ColumnType::Timestamp),
    ]);
    let file = open(write(columns, 2), &declared).expect("every type is accepted");
    assert_eq!((file.rows(), file.row_groups()), (3, 2));
    let got = rows(&file, &declared);
    let t = |ms: i64| show(Value::Time(Timestamp(ms)));
    let int = |i: i64| show(Value::Int(i));
    let text = |s: &'static [u8]| show(Value::Text(s));
    let null = || show(Value::Null);
    let expected = vec![
        vec![
            int(-8),
            int(-16),
            int(-32),
            int(i64::MIN),
            int(0),
            int(0),
            int(0),
            show(Value::Float(0.25)),
            show(Value::Float(0.1)),
            text(b"a"),
            text(b"x"),
            text(b"CA"),
            text(b"\xff"),
            t(ms - 3_723_456),
            t(ms / 1000 * 1000),
            t(ms),
            t(ms),
            t(ms),
            show(Value::Bool(true)),
            int(42),
            t(ms),
        ],
        vec![
            null(),
            int(0),
            int(0),
            int(0),
            int(1),
            int(1),
            int(i64::MAX),
            show(Value::Float(-1.5)),
            null(),
            text(b""),
            text(b"y"),
            null(),
            text(b""),
            null(),
            t(0),
            t(0),
            t(0),
            t(0),
            show(Value::Bool(false)),
            null(),
            null(),
        ],
        vec![
            int(8),
            int(16),
            int(i64::from(i32::MAX)),
            int(i64::MAX),
            int(255),
            int(i64::from(u32::MAX)),
            Err(ValueError::OutOfRange),
            // A FLOAT widens exactly: 0.1f32 is not 0.1f64.
            show(Value::Float(f64::from(0.1f32))),
            show(Value::Float(f64::NAN)),
            text(b"long text past twelve bytes"),
            text(b"z"),
            text(b"CA"),
            text(b"b"),
            t(0),
            t(-1000),
            t(-1),
            t(-1),
            t(-1),
            null(),
            Err(ValueError::BigInt),
            Err(ValueError::Timestamp),
        ],
    ];
    for (row, ((number, values), want)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(*number, row as u64 + 1);
        for (c, (value, want)) in values.iter().zip(want).enumerate() {
            assert_eq!(
                value, want,
                "row {row}, column {}",
                declared.columns[c].name
            );
        }
    }
    assert_eq!(got.len(), expected.len());
}

#[test]
fn text_fields_and_nulls() {
    let declared = schema(&[("s", ColumnType::Text), ("n", ColumnType::BigInt)]);
    let bytes = write(
        vec![
            (
                "s",
                Arc::new(StringArray::from(vec![Some("a"), None])) as ArrayRef,
            ),
            ("n", Arc::new(Int64Array::from(vec![1, 2]))),
        ],
        10,
    );
    let file = open(bytes, &declared).expect("opens");
    let mut reader = file.read(0..1).expect("reader");
    let batch = reader.next_batch().expect("reads").expect("a batch");
    assert_eq!(batch.record(0).field(0), Some(&b"a"[..]));
    assert_eq!(batch.record(1).field(0), None);
    assert_eq!(batch.record(1).value(0, ColumnType::Text), Ok(Value::Null));
    // Numbers have no text: read them typed.
    assert_eq!(batch.record(0).field(1), None);
    assert_eq!(
        batch.record(0).value(1, ColumnType::BigInt),
        Ok(Value::Int(1))
    );
}

#[test]
fn only_the_read_columns_are_matched_and_decoded() {
    let list =
        ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1)]), Some(vec![])]);
    let bytes = write(
        vec![
            ("nested", Arc::new(list) as ArrayRef),
            ("n", Arc::new(Int64Array::from(vec![7, 8]))),
        ],
        10,
    );
    let declared = schema(&[
        ("nested", ColumnType::Text),
        ("n", ColumnType::BigInt),
        ("absent", ColumnType::Text),
    ]);
    let file = ParquetFile::from_bytes(bytes.clone(), "t".into(), &declared, &[1])
        .expect("unread columns are not checked");
    let mut reader = file.read(0..1).expect("reader");
    let batch = reader.next_batch().expect("reads").expect("a batch");
    assert_eq!(
        batch.record(1).value(1, ColumnType::BigInt),
        Ok(Value::Int(8))
    );
    assert_eq!(batch.record(1).value(0, ColumnType::Text), Ok(Value::Null));
    let error = ParquetFile::from_bytes(bytes.clone(), "t".into(), &declared, &[1, 2])
        .expect_err("a read column must exist");
    assert_eq!(
        error.to_string(),
        "t: the Parquet file has no column \"absent\""
    );
    let error = ParquetFile::from_bytes(bytes, "t".into(), &declared, &[0])
        .expect_err("a list is not text");
    assert!(
        matches!(error, Error::ParquetColumnType { ref column, declared: "TEXT", .. } if column == "nested"),
        "{error}"
    );
}

#[test]
fn type_mismatches_are_refused_before_reading() {
    let bytes = write(
        vec![
            (
                "revenue",
                Arc::new(Float64Array::from(vec![1.5])) as ArrayRef,
            ),
            ("flag", Arc::new(BooleanArray::from(vec![true]))),
            ("n", Arc::new(Int32Array::from(vec![1]))),
        ],
        10,
    );
    for (column, ty, message) in [
        (
            "revenue",
            ColumnType::BigInt,
            "column \"revenue\" is Float64 in the Parquet file, which cannot be read as BIGINT",
        ),
        (
            "flag",
            ColumnType::Timestamp,
            "column \"flag\" is Boolean in the Parquet file, which cannot be read as TIMESTAMP",
        ),
        (
            "n",
            ColumnType::Text,
            "column \"n\" is Int32 in the Parquet file, which cannot be read as TEXT",
        ),
    ] {
        let error = open(bytes.clone(), &schema(&[(column, ty)])).expect_err(column);
        assert_eq!(error.to_string(), format!("t.parquet: {message}"));
    }
}

#[test]
fn row_group_ranges_number_rows_from_the_file_start() {
    let n = 20_000;
    let bytes = write(
        vec![(
            "n",
            Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
        )],
        9_000,
    );
    let declared = schema(&[("n", ColumnType::BigInt)]);
    let file = open(bytes, &declared).expect("opens");
    assert_eq!(file.row_groups(), 3);
    let mut seen = Vec::new();
    for group in [2, 0, 1] {
        let mut reader = file.read(group..group + 1).expect("reader");
        while let Some(batch) = reader.next_batch().expect("batch") {
            assert!(batch.len() <= PARQUET_BATCH_ROWS);
            for i in 0..batch.len() {
                let record = batch.record(i);
                let Ok(Value::Int(v)) = record.value(0, ColumnType::BigInt) else {
                    panic!("an integer");
                };
                // Row numbers are 1-based positions in the whole file.
                assert_eq!(record.row(), v as u64 + 1);
                seen.push(v);
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..n).collect::<Vec<_>>());
}

#[test]
fn magic_bytes() {
    let bytes = write(
        vec![("n", Arc::new(Int64Array::from(vec![1])) as ArrayRef)],
        10,
    );
    assert!(is_parquet(&bytes));
    assert!(!is_parquet(b"PAR"));
    assert!(!is_parquet(b"ts,user_id\n"));
}

/// A small file of every common column kind, for the corruption tests.
fn sample() -> (Vec<u8>, Schema) {
    let n = 300;
    let dictionary: DictionaryArray<Int32Type> =
        (0..n).map(|i| Some(["CA", "NY", "TX"][i % 3])).collect();
    let bytes = write(
        vec![
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from_iter_values(
                    (0..n as i64).map(|i| i * 1_000_000),
                )) as ArrayRef,
            ),
            (
                "user_id",
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ),
            ("state", Arc::new(dictionary)),
            (
                "site",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("site{i}")),
                )),
            ),
            (
                "revenue",
                Arc::new(Float64Array::from_iter(
                    (0..n).map(|i| (i % 7 != 0).then_some(i as f64 / 8.0)),
                )),
            ),
        ],
        100,
    );
    let declared = schema(&[
        ("ts", ColumnType::Timestamp),
        ("user_id", ColumnType::BigInt),
        ("state", ColumnType::Text),
        ("site", ColumnType::Text),
        ("revenue", ColumnType::Double),
    ]);
    (bytes, declared)
}

/// Reads every value of a possibly corrupt file: an error or rows, never a
/// panic. Returns how many rows were read.
fn read_all(bytes: Vec<u8>, schema: &Schema) -> Result<u64, Error> {
    let file = open(bytes, schema)?;
    let mut reader = file.read(0..file.row_groups())?;
    let mut rows = 0;
    while let Some(batch) = reader.next_batch()? {
        for i in 0..batch.len() {
            let record = batch.record(i);
            for (c, column) in schema.columns.iter().enumerate() {
                let _ = std::hint::black_box(record.value(c, column.ty));
                let _ = std::hint::black_box(record.field(c));
            }
            rows += 1;
        }
    }
    Ok(rows)
}

#[test]
fn truncated_files_are_errors() {
    let (bytes, declared) = sample();
    assert_eq!(read_all(bytes.clone(), &declared), Ok(300));
    for len in (0..bytes.len()).step_by(7) {
        let error =
            read_all(bytes[..len].to_vec(), &declared).expect_err("a cut footer cannot be read");
        assert!(
            matches!(error, Error::ParquetFooter { .. }),
            "cut at {len}: {error}"
        );
    }
    // The footer intact but the data pages cut out.
    let footer = bytes.len() - 400.min(bytes.len() / 2);
    let mut cut = bytes[..20].to_vec();
    cut.extend_from_slice(&bytes[footer..]);
    assert!(matches!(
        read_all(cut, &declared),
        Err(Error::ParquetFooter { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Flipped bytes anywhere: an error, or rows read without panicking.
    #[test]
    fn flipped_bytes_never_panic(flips in proptest::collection::vec((any::<usize>(), 1u8..), 1..6)) {
        let (mut bytes, declared) = sample();
        for (at, xor) in flips {
            let at = at % bytes.len();
            bytes[at] ^= xor;
        }
        let _ = read_all(bytes, &declared);
    }

    /// Values written are the values read, whatever they are.
    #[test]
    fn values_round_trip(
        rows in proptest::collection::vec(
            (any::<Option<i64>>(), any::<Option<f64>>(), any::<Option<String>>(), any::<bool>()),
            0..400,
        ),
        row_group_rows in 1usize..200,
    ) {
        let ints: Int64Array = rows.iter().map(|r| r.0).collect();
        let floats: Float64Array = rows.iter().map(|r| r.1).collect();
        let texts: StringArray = rows.iter().map(|r| r.2.as_deref()).collect();
        let flags: BooleanArray = rows.iter().map(|r| Some(r.3)).collect();
        let bytes = write(
            vec![
                ("i", Arc::new(ints) as ArrayRef),
                ("f", Arc::new(floats)),
                ("s", Arc::new(texts)),
                ("b", Arc::new(flags)),
            ],
            row_group_rows,
        );
        let declared = schema(&[
            ("i", ColumnType::BigInt),
            ("f", ColumnType::Double),
            ("s", ColumnType::Text),
            ("b", ColumnType::Bool),
        ]);
        let file = open(bytes, &declared).expect("opens");
        let got = self::rows(&file, &declared);
        prop_assert_eq!(got.len(), rows.len());
        for ((number, values), (i, f, s, b)) in got.iter().zip(&rows) {
            let want = [
                show(i.map_or(Value::Null, Value::Int)),
                show(f.map_or(Value::Null, Value::Float)),
                show(s.as_deref().map_or(Value::Null, |s| Value::Text(s.as_bytes()))),
                show(Value::Bool(*b)),
            ];
            prop_assert_eq!(values.as_slice(), &want[..], "row {}", number);
        }
    }
}

/// Writes `columns` with row groups of `row_group_rows`, `plain` columns
/// without dictionaries and dictionary pages of at most
/// `dictionary_bytes`.
fn write_with(
    columns: Vec<(&str, ArrayRef)>,
    row_group_rows: usize,
    plain: &[&str],
    dictionary_bytes: usize,
) -> Vec<u8> {
    let batch = RecordBatch::try_from_iter(columns).expect("columns of equal length");
    let mut properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_dictionary_page_size_limit(dictionary_bytes);
    for column in plain {
        properties = properties.set_column_dictionary_enabled(
            parquet::schema::types::ColumnPath::from(vec![(*column).to_owned()]),
            false,
        );
    }
    let mut out = Vec::new();
    let mut writer =
        ArrowWriter::try_new(&mut out, batch.schema(), Some(properties.build())).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
    out
}

/// Per batch: its length, and for each text column whether it came as
/// keys into a dictionary, with every row's text read through it
/// checked against the record's field.
fn dictionary_batches(bytes: Vec<u8>, declared: &Schema) -> Vec<(usize, Vec<bool>)> {
    let file = open(bytes, declared).expect("opens");
    let mut reader = file.read(0..file.row_groups()).expect("reader");
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch().expect("reads") {
        let keyed = (0..declared.columns.len())
            .map(|c| {
                let Some(cardinal_parse::Column::Text(text)) = batch.column(c) else {
                    panic!("column {c} is text without NULLs");
                };
                let dictionary = text.dictionary();
                for i in 0..batch.len() {
                    let record = batch.record(i);
                    let field = record.field(c);
                    assert_eq!(Some(text.value(i)), field);
                    if let Some(d) = dictionary {
                        assert_eq!(Some(d.value(d.key(i))), field);
                    }
                }
                dictionary.is_some()
            })
            .collect();
        out.push((batch.len(), keyed));
    }
    out
}

#[test]
fn dictionary_encoded_text_reads_as_keys_a_row_group_per_batch() {
    let declared = schema(&[
        ("few", ColumnType::Text),
        ("plain", ColumnType::Text),
        ("spills", ColumnType::Text),
        ("tail", ColumnType::Text),
    ]);
    let rows = 3 * 1_000 + 100;
    let few: Vec<String> = (0..rows).map(|i| format!("v{}", (i / 7) % 5)).collect();
    let plain = few.clone();
    // Unique long values overflow a 1 KiB dictionary page: the writer
    // falls back to plain pages in every row group.
    let spills: Vec<String> = (0..rows).map(|i| format!("value-{i:040}")).collect();
    // Plain pages in the last row group only, under 1/8 of the values.
    let tail: Vec<String> = (0..rows)
        .map(|i| {
            if i >= 3_000 {
                format!("tail-{i:040}")
            } else {
                format!("t{}", i % 3)
            }
        })
        .collect();
    let text = |v: &Vec<String>| Arc::new(StringArray::from_iter_values(v)) as ArrayRef;
    let bytes = write_with(
        vec![
            ("few", text(&few)),
            ("plain", text(&plain)),
            ("spills", text(&spills)),
            ("tail", text(&tail)),
        ],
        1_000,
        &["plain"],
        1 << 10,
    );
    let batches = dictionary_batches(bytes, &declared);
    // One batch per row group, never across two.
    let lengths: Vec<usize> = batches.iter().map(|(len, _)| *len).collect();
    assert_eq!(lengths, [1_000, 1_000, 1_000, 100]);
    let keyed: Vec<Vec<bool>> = batches.into_iter().map(|(_, keyed)| keyed).collect();
    // `tail` is read as a dictionary throughout: its plain group comes as
    // a dictionary the reader builds.
    assert_eq!(keyed, vec![vec![true, false, false, true]; 4]);
}

/// An integer column declared TIMESTAMP holds epoch seconds or
/// milliseconds by magnitude, as text does; rows and typed slices agree,
/// and a value outside the years is a reject, never a wrong time.
#[test]
fn integer_columns_declared_timestamp_are_epoch_times() {
    let ms: i64 = 1_793_491_207_123; // 2026-11-01T00:00:07.123Z
    let bytes = write(
        vec![
            (
                "ts",
                Arc::new(Int64Array::from(vec![
                    Some(ms),
                    Some(ms / 1000),
                    None,
                    Some(i64::MAX),
                    Some(-1),
                ])) as ArrayRef,
            ),
            (
                "t32",
                Arc::new(Int32Array::from(vec![1_793_491_207, 0, 1, -1, i32::MAX])),
            ),
        ],
        10,
    );
    let declared = schema(&[
        ("ts", ColumnType::Timestamp),
        ("t32", ColumnType::Timestamp),
    ]);
    let file = open(bytes, &declared).expect("integers are accepted as times");
    let time = |ms: i64| Ok(format!("{:?}", Value::Time(Timestamp(ms))));
    let null = Ok(format!("{:?}", Value::Null));
    let got: Vec<Vec<Result<String, ValueError>>> =
        rows(&file, &declared).into_iter().map(|(_, r)| r).collect();
    assert_eq!(
        got,
        [
            vec![time(ms), time(1_793_491_207_000)],
            vec![time(1_793_491_207_000), time(0)],
            vec![null, time(1_000)],
            vec![Err(ValueError::OutOfRange), time(-1_000)],
            vec![time(-1_000), time(i64::from(i32::MAX) * 1000)],
        ]
    );
    // The typed slice of the column without NULLs reads the same times.
    let mut reader = file.read(0..file.row_groups()).expect("reader");
    let batch = reader.next_batch().expect("batch").expect("a batch");
    let column = batch.column(1).expect("a typed column");
    let slice: Vec<i64> = (0..batch.len())
        .map(|i| column.time(i).expect("in range").0)
        .collect();
    assert_eq!(
        slice,
        [
            1_793_491_207_000,
            0,
            1_000,
            -1_000,
            i64::from(i32::MAX) * 1000
        ]
    );
}
