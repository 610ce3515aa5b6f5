//! No heap allocation per record in steady state: once a batch has seen a
//! chunk, parsing another chunk of the same shape allocates nothing, for
//! CSV (fast and general paths, with side-buffer fields and rejects) and
//! NDJSON (with escapes). Counted by a global allocator that wraps the
//! system one; this target holds one test so nothing else allocates
//! concurrently.

mod common;

use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser};
use common::schema;

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = counting_alloc::allocations();
    f();
    counting_alloc::allocations() - before
}

#[test]
fn steady_state_parsing_does_not_allocate() {
    let name = "steady".into();
    let csv_text = "2026-11-01,42,\"say \"\"hi\"\"\"\n2026-11-02,43,plain\nshort\n".repeat(2_000);
    let json_text =
        "{\"ts\":\"a\\u00e9\",\"user\":{\"id\":1},\"x\":[1,{\"y\":2}]}\n[]\n".repeat(2_000);
    let csv_schema = schema(&["ts", "user_id", "note"]);
    let json_schema = schema(&["ts", "user.id", "x.y"]);

    let mut csv = CsvParser::new(&csv_schema, CsvConfig::default()).expect("fits");
    let mut ndjson = NdjsonParser::new(&json_schema).expect("fits");
    let mut batch = Batch::new();
    for fast in [true, false] {
        // Warm up: the batch's buffers grow to this chunk's needs.
        batch
            .chunk_mut()
            .set(&name, Some(1), 0, csv_text.as_bytes());
        csv.parse(&mut batch).expect("no header");
        csv.parse_without_fast_path(&mut batch).expect("no header");
        let count = allocations_during(|| {
            for _ in 0..3 {
                let parsed = if fast {
                    csv.parse(&mut batch)
                } else {
                    csv.parse_without_fast_path(&mut batch)
                };
                parsed.expect("no header");
            }
        });
        assert_eq!((batch.len(), batch.rejects().len()), (4_000, 2_000));
        assert_eq!(count, 0, "CSV (fast: {fast}) allocated in steady state");
    }

    batch
        .chunk_mut()
        .set(&name, Some(1), 0, json_text.as_bytes());
    ndjson.parse(&mut batch);
    let count = allocations_during(|| {
        for _ in 0..3 {
            ndjson.parse(&mut batch);
        }
    });
    assert_eq!((batch.len(), batch.rejects().len()), (2_000, 2_000));
    assert_eq!(count, 0, "NDJSON allocated in steady state");
}
