//! Replays the inputs kept under `tests/fuzz/<target>/` through the checks
//! the fuzz targets of the same name make (`fuzz/fuzz_targets/`): crashes
//! found by `cargo fuzz` and seeds worth keeping (see
//! `tests/fuzz/README.md`).

mod common;

use std::path::Path;

use cardinal_event::{Column, ColumnType, Record, Schema};
use cardinal_parse::{Batch, CsvConfig, CsvParser, Extra, Missing, NdjsonParser, ParquetFile};
use common::{load, render_records, render_rejects, schema};

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("listable").path())
        .filter(|path| path.extension().is_none_or(|e| e != "md"))
        .map(|path| {
            let name = path.display().to_string();
            (name, std::fs::read(&path).expect("readable"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no inputs", dir.display());
    files
}

#[test]
fn parse_csv_inputs_replay() {
    for (name, data) in inputs("parse_csv") {
        let Some((&selector, text)) = data.split_first() else {
            continue;
        };
        let config = CsvConfig {
            delimiter: [b',', b'\t', b'|', b';'][usize::from(selector & 3)],
            header: selector & 4 != 0,
            missing: if selector & 8 != 0 {
                Missing::Null
            } else {
                Missing::Reject
            },
            extra: if selector & 16 != 0 {
                Extra::Ignore
            } else {
                Extra::Reject
            },
        };
        let mut results = Vec::new();
        for fast in [true, false] {
            let mut parser = CsvParser::new(&schema(&["a", "b", "c"]), config).expect("valid");
            let mut batch = Batch::new();
            load(&mut batch, text);
            let parsed = if fast {
                parser.parse(&mut batch)
            } else {
                parser.parse_without_fast_path(&mut batch)
            };
            results.push(parsed.map(|()| (render_records(&batch), render_rejects(&batch))));
        }
        assert_eq!(results[0], results[1], "{name}");
    }
}

#[test]
fn parse_ndjson_inputs_replay() {
    for (name, data) in inputs("parse_ndjson") {
        let columns = schema(&["ts", "user.id", "user.geo.state", "x"]);
        let mut parser = NdjsonParser::new(&columns).expect("valid");
        let mut batch = Batch::new();
        load(&mut batch, &data);
        parser.parse(&mut batch);
        // A byte-order mark opening the input is not part of its first line.
        let lines = data
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(&data)
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')))
            .count();
        assert_eq!(batch.len() + batch.rejects().len(), lines, "{name}");
        let _ = render_records(&batch);
    }
}

/// Reads a file as the `parse_parquet` target does: the rows read, or the
/// error's text.
fn parquet_rows(data: &[u8]) -> Result<u64, String> {
    let schema = Schema {
        columns: [
            ("ts", ColumnType::Timestamp),
            ("user_id", ColumnType::BigInt),
            ("state", ColumnType::Text),
            ("site", ColumnType::Text),
            ("revenue", ColumnType::Double),
        ]
        .iter()
        .map(|&(name, ty)| Column {
            name: name.into(),
            ty,
            path: vec![name.into()],
        })
        .collect(),
    };
    let reads: Vec<usize> = (0..schema.columns.len()).collect();
    let file = ParquetFile::from_bytes(data.to_vec(), "fuzz".into(), &schema, &reads)
        .map_err(|e| e.to_string())?;
    let mut reader = file.read(0..file.row_groups()).map_err(|e| e.to_string())?;
    let mut rows = 0u64;
    while let Some(batch) = reader.next_batch().map_err(|e| e.to_string())? {
        for i in 0..batch.len() {
            let record = batch.record(i);
            for (c, column) in schema.columns.iter().enumerate() {
                let _ = std::hint::black_box(record.value(c, column.ty));
                let _ = std::hint::black_box(record.field(c));
            }
            rows += 1;
            assert_eq!(record.row(), rows);
        }
    }
    assert!(rows <= file.rows());
    Ok(rows)
}

#[test]
fn parse_parquet_inputs_replay() {
    for (name, data) in inputs("parse_parquet") {
        let result = parquet_rows(&data);
        if name.contains("seed-") {
            assert_eq!(result, Ok(300), "{name}");
        } else {
            assert!(result.is_err(), "{name}: {result:?}");
        }
    }
}
