#![no_main]
//! Any bytes as a Parquet file, read with the columns `ts` TIMESTAMP,
//! `user_id` BIGINT, `state` TEXT, `site` TEXT and `revenue` DOUBLE: an
//! error or rows, never a panic, and every row's values readable.
use cardinal_event::{Column, ColumnType, Record, Schema};
use cardinal_parse::ParquetFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
    let Ok(file) = ParquetFile::from_bytes(data.to_vec(), "fuzz".into(), &schema, &reads) else {
        return;
    };
    let Ok(mut reader) = file.read(0..file.row_groups()) else {
        return;
    };
    let mut rows = 0u64;
    while let Ok(Some(batch)) = reader.next_batch() {
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
});
