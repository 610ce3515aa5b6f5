//! Helpers the parse test targets share: schemas, and batches rendered as
//! short strings so tables of cases stay readable.

#![allow(dead_code)]

use std::sync::Arc;

use cardinal_event::{Column, ColumnType, Schema};
use cardinal_parse::{Batch, CsvParser, NdjsonParser};
use cardinal_source::{Chunk, Input, LineReader};

/// A schema of text columns named `names`, each with a one-key path.
pub fn schema(names: &[&str]) -> Schema {
    Schema {
        columns: names
            .iter()
            .map(|name| Column {
                name: (*name).to_owned(),
                ty: ColumnType::Text,
                path: name.split('.').map(str::to_owned).collect(),
            })
            .collect(),
    }
}

/// A record as `line:field|field|...`, `~` for an absent field and
/// `\"`-style escapes for bytes that are not printable ASCII. Checks on
/// the way that each column read whole ([`Batch::for_each_field`]) gives
/// what the records' fields give, and nothing past the last column.
pub fn render_records(batch: &Batch) -> Vec<String> {
    for column in 0..=batch.width() {
        let by_record: Vec<(usize, Option<&[u8]>)> = batch
            .records()
            .enumerate()
            .map(|(i, r)| (i, r.field(column)))
            .filter(|_| column < batch.width())
            .collect();
        let mut whole = Vec::new();
        batch.for_each_field(column, |i, field| whole.push((i, field)));
        assert_eq!(whole, by_record, "column {column}");
    }
    batch
        .records()
        .map(|record| {
            let fields: Vec<String> = record
                .fields()
                .map(|field| match field {
                    None => "~".to_owned(),
                    Some(bytes) => bytes.escape_ascii().to_string(),
                })
                .collect();
            let line = record.line().map_or("?".to_owned(), |l| l.to_string());
            format!("{line}:{}", fields.join("|"))
        })
        .collect()
}

/// A reject as `line:column:Reason`, or `line:column@path:Reason` with
/// an NDJSON path.
pub fn render_rejects(batch: &Batch) -> Vec<String> {
    batch
        .rejects()
        .iter()
        .map(|r| {
            let line = r.line.map_or("?".to_owned(), |l| l.to_string());
            let column = r.column.map_or("-".to_owned(), |c| c.to_string());
            let name = r.name.as_ref().map_or(String::new(), |n| format!("({n})"));
            let path = r.path.as_ref().map_or(String::new(), |p| format!("@{p}"));
            format!("{line}:{column}{name}{path}:{:?}", r.reason)
        })
        .collect()
}

/// Loads `bytes` as one chunk of input `name` starting the input.
pub fn load(batch: &mut Batch, bytes: &[u8]) {
    let name: Arc<str> = "t".into();
    batch.chunk_mut().set(&name, Some(1), 0, bytes);
}

/// Which parser to run over a stream of chunks.
pub enum Parser {
    Csv(CsvParser),
    Ndjson(NdjsonParser),
}

/// Every record and reject of an input read through a [`LineReader`] in
/// chunks of `chunk_bytes`, rendered.
pub fn parse_stream(
    input: Input,
    chunk_bytes: usize,
    parser: &mut Parser,
) -> (Vec<String>, Vec<String>) {
    let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes);
    let mut batch = Batch::new();
    let (mut records, mut rejects) = (Vec::new(), Vec::new());
    while read(&mut reader, batch.chunk_mut()) {
        match parser {
            Parser::Csv(p) => p.parse(&mut batch).expect("header fits"),
            Parser::Ndjson(p) => p.parse(&mut batch),
        }
        records.extend(render_records(&batch));
        rejects.extend(render_rejects(&batch));
    }
    (records, rejects)
}

fn read(reader: &mut LineReader, chunk: &mut Chunk) -> bool {
    reader.read_chunk(chunk).expect("readable")
}
