#![no_main]
//! Any bytes through the CSV parser, on both paths: never a panic, and the
//! fast path's records and rejects equal the general path's. The first
//! byte picks the configuration (delimiter, header, missing/extra policy).
use std::sync::Arc;

use cardinal_event::{Column, ColumnType, Schema};
use cardinal_parse::{Batch, CsvConfig, CsvParser, Extra, Missing};
use libfuzzer_sys::fuzz_target;

type Rendered = (
    Vec<Vec<Option<Vec<u8>>>>,
    Vec<(Option<u64>, Option<usize>, String)>,
);

fn run(config: CsvConfig, data: &[u8], fast: bool) -> Result<Rendered, String> {
    let schema = Schema {
        columns: ["a", "b", "c"]
            .iter()
            .map(|name| Column {
                name: (*name).into(),
                ty: ColumnType::Text,
                path: vec![(*name).into()],
            })
            .collect(),
    };
    let mut parser = CsvParser::new(&schema, config).expect("valid config");
    let mut batch = Batch::new();
    let name: Arc<str> = "fuzz".into();
    batch.chunk_mut().set(&name, Some(1), 0, data);
    let parsed = if fast {
        parser.parse(&mut batch)
    } else {
        parser.parse_without_fast_path(&mut batch)
    };
    parsed.map_err(|e| e.to_string())?;
    let records = batch
        .records()
        .map(|r| r.fields().map(|f| f.map(<[u8]>::to_vec)).collect())
        .collect();
    let rejects = batch
        .rejects()
        .iter()
        .map(|r| (r.line, r.column, format!("{:?}", r.reason)))
        .collect();
    Ok((records, rejects))
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
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
    let fast = run(config, text, true);
    let general = run(config, text, false);
    assert_eq!(fast, general, "fast path differs from the general path");
});
