#![no_main]
//! Any bytes through the CSV parser, on the general path and on the fast
//! path with every scanner this CPU runs: never a panic, and each fast
//! path's records and rejects equal the general path's. The first byte
//! picks the configuration (delimiter, header, missing/extra policy), the
//! second the projection (a subset of the three columns, or none).
use std::sync::Arc;

use cardinal_event::{Column, ColumnType, Schema};
use cardinal_parse::{Batch, CsvConfig, CsvParser, Extra, Missing, Scanner};
use libfuzzer_sys::fuzz_target;

type Rendered = (
    Vec<Vec<Option<Vec<u8>>>>,
    Vec<(Option<u64>, Option<usize>, String)>,
);

fn run(
    config: CsvConfig,
    keep: Option<&[usize]>,
    data: &[u8],
    scanner: Option<Scanner>,
) -> Result<Rendered, String> {
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
    if let Some(columns) = keep {
        parser.project(columns);
    }
    let mut batch = Batch::new();
    let name: Arc<str> = "fuzz".into();
    batch.chunk_mut().set(&name, Some(1), 0, data);
    let parsed = match scanner {
        None => parser.parse_without_fast_path(&mut batch),
        Some(scanner) => {
            parser.set_scanner(scanner);
            parser.parse(&mut batch)
        }
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
    let [selector, projection, text @ ..] = data else {
        return;
    };
    let (selector, projection) = (*selector, *projection);
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
    // Bit 3 of the projection byte: project at all; bits 0-2: which of
    // the three columns to keep.
    let columns: Vec<usize> = (0..3).filter(|c| projection & (1 << c) != 0).collect();
    let keep = (projection & 8 != 0).then_some(&columns[..]);
    let general = run(config, keep, text, None);
    for scanner in Scanner::ALL.into_iter().filter(|s| s.is_supported()) {
        let fast = run(config, keep, text, Some(scanner));
        assert_eq!(fast, general, "{scanner:?} differs from the general path");
    }
});
