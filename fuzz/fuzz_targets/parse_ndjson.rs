#![no_main]
//! Any bytes through the NDJSON scanner with nested column paths: never a
//! panic, every good record's fields readable, and every line accounted
//! for as a record, a reject or a blank line.
use std::sync::Arc;

use cardinal_event::{Column, ColumnType, Schema};
use cardinal_parse::{Batch, NdjsonParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let schema = Schema {
        columns: ["ts", "user.id", "user.geo.state", "x"]
            .iter()
            .map(|path| Column {
                name: (*path).into(),
                ty: ColumnType::Text,
                path: path.split('.').map(str::to_owned).collect(),
            })
            .collect(),
    };
    let mut parser = NdjsonParser::new(&schema).expect("valid paths");
    let mut batch = Batch::new();
    let name: Arc<str> = "fuzz".into();
    batch.chunk_mut().set(&name, Some(1), 0, data);
    parser.parse(&mut batch);
    for record in batch.records() {
        for field in record.fields() {
            std::hint::black_box(field);
        }
    }
    // A byte-order mark opening the input is not part of its first line.
    let lines = data
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(data)
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')))
        .count();
    assert_eq!(batch.len() + batch.rejects().len(), lines);
});
