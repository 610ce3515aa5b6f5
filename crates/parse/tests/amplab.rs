//! The AMPLab preset on the real sample rows in
//! `../shared/data/bdb/hibench_amplab_sample` (read in place, never
//! copied): every row parses, every field has the documented shape, every
//! `adRevenue` (Java floats, E notation included) reads as a DOUBLE, and
//! Query 2A's partial sums over the batches equal a naive oracle that
//! splits lines with `str::split`.
//!
//! A missing sample folder skips these tests with a warning, as the HLL
//! vector tests do; `CARDINAL_REQUIRE_VECTORS` makes it a failure. Set
//! `CARDINAL_BDB_SAMPLES` to read them from elsewhere.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cardinal_event::{ColumnType, Record, Value};
use cardinal_parse::{Batch, CsvConfig, CsvParser, amplab};
use cardinal_source::{Chunk, Input, LineReader};

fn samples_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CARDINAL_BDB_SAMPLES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/data/bdb/hibench_amplab_sample")
        });
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CARDINAL_REQUIRE_VECTORS").is_none(),
        "BDB samples required but {} is missing",
        dir.display()
    );
    eprintln!(
        "warning: {} is missing; AMPLab sample tests skipped",
        dir.display()
    );
    None
}

/// Parses a whole file with small chunks (so chunk boundaries are
/// crossed), calling `each` per record; returns (records, rejects).
fn parse_file(
    path: &Path,
    schema: &cardinal_event::Schema,
    mut each: impl FnMut(&dyn Record),
) -> (usize, usize) {
    let mut parser = CsvParser::new(schema, CsvConfig::amplab()).expect("preset fits");
    let mut reader = LineReader::with_chunk_bytes(Input::open(path).expect("readable"), 4096);
    let mut batch = Batch::new();
    let (mut records, mut rejects) = (0, 0);
    while read(&mut reader, batch.chunk_mut()) {
        parser.parse(&mut batch).expect("no header");
        for record in batch.records() {
            each(&record);
        }
        records += batch.len();
        rejects += batch.rejects().len();
    }
    (records, rejects)
}

fn read(reader: &mut LineReader, chunk: &mut Chunk) -> bool {
    reader.read_chunk(chunk).expect("readable")
}

fn text(record: &dyn Record, column: usize) -> &str {
    std::str::from_utf8(record.field(column).expect("present")).expect("ascii")
}

#[test]
fn uservisits_sample_rows_parse_with_their_types() {
    let Some(dir) = samples_dir() else { return };
    let schema = amplab::uservisits();
    let mut e_notation = 0;
    for name in ["uservisits1", "uservisits2"] {
        let (records, rejects) = parse_file(&dir.join(name), &schema, |record| {
            let ip = text(record, 0);
            assert_eq!(ip.split('.').count(), 4, "{ip}");
            assert!(
                ip.split('.').all(|octet| octet.parse::<u8>().is_ok()),
                "{ip}"
            );
            for (column, declared) in schema.columns.iter().enumerate() {
                let value = Value::parse(record.field(column).expect("present"), declared.ty);
                assert!(
                    value.is_ok(),
                    "{name}: {} = {:?}",
                    declared.name,
                    text(record, column)
                );
            }
            let revenue = text(record, 3);
            if revenue.contains("E-") {
                e_notation += 1;
                let value = Value::parse(revenue.as_bytes(), ColumnType::Double).expect("double");
                assert!(
                    value.as_f64().is_some_and(|v| v > 0.0 && v < 1e-3),
                    "{revenue}"
                );
            }
            assert_eq!(text(record, 5).len(), 3);
            assert!(text(record, 6).starts_with(text(record, 5)));
        });
        assert_eq!((records, rejects), (1000, 0), "{name}");
    }
    // The samples hold one E-notation revenue, 1.1885166E-4.
    assert_eq!(e_notation, 1);
}

#[test]
fn rankings_sample_rows_parse() {
    let Some(dir) = samples_dir() else { return };
    let schema = amplab::rankings();
    for name in ["rankings1", "rankings2"] {
        let (records, rejects) = parse_file(&dir.join(name), &schema, |record| {
            let url = text(record, 0);
            assert!((10..=100).contains(&url.len()) && url.bytes().all(|b| b.is_ascii_lowercase()));
            assert!(Value::parse(record.field(1).expect("rank"), ColumnType::BigInt).is_ok());
            let duration = Value::parse(record.field(2).expect("duration"), ColumnType::BigInt);
            assert!(matches!(duration, Ok(Value::Int(1..=99))), "{duration:?}");
        });
        assert_eq!((records, rejects), (1000, 0), "{name}");
    }
}

/// Query 2A (`SELECT substr(sourceIP, 1, 8), sum(adRevenue) GROUP BY 1`)
/// over the parsed batches against `str::split` on the raw lines.
#[test]
fn query_2a_partials_match_a_naive_oracle() {
    let Some(dir) = samples_dir() else { return };
    for name in ["uservisits1", "uservisits2"] {
        let path = dir.join(name);
        let mut parsed: BTreeMap<String, f64> = BTreeMap::new();
        parse_file(&path, &amplab::uservisits(), |record| {
            let ip = record.field(0).expect("ip");
            let key = String::from_utf8(ip[..ip.len().min(8)].to_vec()).expect("ascii");
            let revenue = Value::parse(record.field(3).expect("revenue"), ColumnType::Double);
            *parsed.entry(key).or_default() += revenue.expect("double").as_f64().expect("number");
        });
        let mut naive: BTreeMap<String, f64> = BTreeMap::new();
        for line in std::fs::read_to_string(&path).expect("readable").lines() {
            let fields: Vec<&str> = line.split(',').collect();
            let key: String = fields[0].chars().take(8).collect();
            *naive.entry(key).or_default() += fields[3].parse::<f64>().expect("float");
        }
        assert_eq!(parsed.len(), naive.len());
        for (key, sum) in &naive {
            assert_eq!(parsed[key].to_bits(), sum.to_bits(), "{name}: {key}");
        }
    }
}

/// The 2009 Pavlo sample is `|`-separated with the same nine columns: the
/// preset with another delimiter reads it.
#[test]
fn pavlo_sample_reads_with_a_pipe_delimiter() {
    let Some(dir) = samples_dir() else { return };
    let path = dir.join("../pavlo2009_sample/UserVisits.dat");
    let mut parser = CsvParser::new(
        &amplab::uservisits(),
        CsvConfig {
            delimiter: b'|',
            ..CsvConfig::amplab()
        },
    )
    .expect("fits");
    let mut batch = Batch::new();
    let bytes = std::fs::read(path).expect("readable");
    common::load(&mut batch, &bytes);
    parser.parse(&mut batch).expect("no header");
    assert_eq!((batch.len(), batch.rejects().len()), (55, 0));
    // Its dates are not zero-padded: a TIMESTAMP read rejects them, which
    // is what a summary over this file would report.
    let date = batch.record(0).field(2).expect("date");
    assert_eq!(date, b"1984-8-7");
    assert!(Value::parse(date, ColumnType::Timestamp).is_err());
}
