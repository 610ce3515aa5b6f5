//! The AMPLab Big Data Benchmark tables, as schemas for
//! [`CsvConfig::amplab`](crate::CsvConfig::amplab).
//!
//! Column names and types follow the benchmark's Hive DDL; the field
//! formats are documented in `../shared/data/bdb/README.md` and checked
//! against its real sample rows in `tests/amplab.rs`.

use cardinal_event::{Column, ColumnType, Schema};

fn schema(columns: &[(&str, ColumnType)]) -> Schema {
    Schema {
        columns: columns
            .iter()
            .map(|&(name, ty)| Column {
                name: name.to_owned(),
                ty,
                path: vec![name.to_owned()],
            })
            .collect(),
    }
}

/// `uservisits`: `sourceIP, destURL, visitDate, adRevenue, userAgent,
/// countryCode, languageCode, searchWord, duration`. `adRevenue` is a Java
/// `Float.toString` (`0.332717`, `1.1885166E-4`), read as DOUBLE.
pub fn uservisits() -> Schema {
    schema(&[
        ("sourceIP", ColumnType::Text),
        ("destURL", ColumnType::Text),
        ("visitDate", ColumnType::Timestamp),
        ("adRevenue", ColumnType::Double),
        ("userAgent", ColumnType::Text),
        ("countryCode", ColumnType::Text),
        ("languageCode", ColumnType::Text),
        ("searchWord", ColumnType::Text),
        ("duration", ColumnType::BigInt),
    ])
}

/// `rankings`: `pageURL, pageRank, avgDuration`.
pub fn rankings() -> Schema {
    schema(&[
        ("pageURL", ColumnType::Text),
        ("pageRank", ColumnType::BigInt),
        ("avgDuration", ColumnType::BigInt),
    ])
}
