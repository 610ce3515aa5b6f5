#![no_main]
//! Any bytes through the syslog header parser: never a panic; a parsed
//! message's fields within their limits; and every record made of it one
//! line ending in '\n' (or a refusal that leaves the buffer as it was).
//! The engine's own readers then read each record: a CSV record is one
//! record of the declared width whose header fields read back as the
//! message's, and an NDJSON record is never refused for repeating a
//! header column's key.
use std::sync::Arc;

use cardinal_event::{Column, ColumnType, Schema, Timestamp};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser, RejectReason};
use cardinal_syslog::header::{
    self, APP_NAME_LEN_MAX, HOSTNAME_LEN_MAX, MSGID_LEN_MAX, Message, PROCID_LEN_MAX,
};
use cardinal_syslog::record::{BodyFormat, Layout};
use libfuzzer_sys::fuzz_target;

/// When the messages arrive: 2026-11-28T21:00:00Z.
const NOW: Timestamp = Timestamp(1_795_899_600_000);

fn schema(columns: &[&str]) -> Schema {
    Schema {
        columns: columns
            .iter()
            .map(|name| Column {
                name: (*name).into(),
                ty: ColumnType::Text,
                path: vec![(*name).into()],
            })
            .collect(),
    }
}

fn check_fields(data: &[u8], m: &Message<'_>) {
    assert!(m.facility <= 23 && m.severity <= 7);
    assert!(m.hostname.is_none_or(|h| h.len() <= HOSTNAME_LEN_MAX));
    assert!(m.app_name.is_none_or(|a| a.len() <= APP_NAME_LEN_MAX));
    assert!(m.procid.is_none_or(|p| p.len() <= PROCID_LEN_MAX));
    assert!(m.msgid.is_none_or(|p| p.len() <= MSGID_LEN_MAX));
    assert!(m.timestamp.is_none_or(Timestamp::is_in_range));
    assert!(!m.body.ends_with(b"\n") && !m.body.ends_with(b"\r"));
    // The body is the message's tail.
    assert!(m.body.is_empty() || data.windows(m.body.len()).any(|w| w == m.body));
    let _ = m.sd_param("a", "b");
}

/// Reads `line` with the engine's reader for `format` and checks it.
fn read_back(line: &[u8], columns: &[&str], format: BodyFormat, m: &Message<'_>) {
    let schema = schema(columns);
    let mut batch = Batch::new();
    let name: Arc<str> = "fuzz".into();
    batch.chunk_mut().set(&name, Some(1), 0, line);
    match format {
        BodyFormat::Csv => {
            let mut parser = CsvParser::new(&schema, CsvConfig::default()).expect("a schema");
            parser.parse(&mut batch).expect("no header line to read");
            assert!(batch.rejects().is_empty(), "{:?}", batch.rejects());
            assert_eq!(batch.len(), 1);
            let record = batch.records().next().expect("one record");
            for (column, field) in columns.iter().zip(record.fields()) {
                let field = field.unwrap_or_default();
                let want = match *column {
                    "syslog_hostname" => m.hostname,
                    "syslog_app_name" => m.app_name,
                    "syslog_procid" => m.procid,
                    "syslog_structured_data" => m.structured_data,
                    _ => continue,
                };
                assert_eq!(field, want.unwrap_or_default().as_bytes(), "{column}");
            }
        }
        BodyFormat::Ndjson => {
            let mut parser = NdjsonParser::new(&schema).expect("a schema");
            parser.parse(&mut batch);
            assert_eq!(batch.len() + batch.rejects().len(), 1);
            // A body may repeat its own keys; never one the header adds.
            for reject in batch.rejects() {
                if reject.reason == RejectReason::DuplicateKey {
                    let column = reject.column.and_then(|c| columns.get(c));
                    assert!(
                        column.is_none_or(|c| !c.starts_with("syslog_")),
                        "{reject:?}"
                    );
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = header::parse(data, NOW) else {
        return;
    };
    check_fields(data, &m);
    let layouts: [(&[&str], BodyFormat); 5] = [
        (
            &["syslog_timestamp", "a", "syslog_hostname", "b"],
            BodyFormat::Csv,
        ),
        (&["msg"], BodyFormat::Csv),
        (
            &[
                "syslog_app_name",
                "syslog_procid",
                "syslog_structured_data",
                "syslog_facility",
                "syslog_severity",
                "syslog_msgid",
            ],
            BodyFormat::Csv,
        ),
        (
            &["syslog_hostname", "a", "syslog_timestamp"],
            BodyFormat::Ndjson,
        ),
        (
            &["syslog_structured_data", "syslog_severity"],
            BodyFormat::Ndjson,
        ),
    ];
    for (columns, format) in layouts {
        let layout = Layout::new(columns, format);
        let mut out = b"x".to_vec();
        match layout.append(&m, &mut out) {
            Ok(()) => {
                let line = &out[1..];
                assert_eq!(line.last(), Some(&b'\n'));
                assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                read_back(line, columns, format, &m);
            }
            Err(e) => {
                assert_eq!(out, b"x");
                assert!(!e.reason().is_empty());
            }
        }
    }
});
