//! Dimension text out: any byte strings, UTF-8 or not, print as texts
//! that tell them apart, in tables and per-day CSV files alike.

use cardinal_event::Timestamp;
use cardinal_export::{
    Columns, Options, Results, Rows, table, text_escaped, text_unescaped, write_daily_csv,
    write_json_lines,
};
use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
use proptest::prelude::*;

/// The bytes `text` was escaped from: the inverse of
/// [`text_escaped`], written from its documented rules alone.
fn unescaped(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = match (b, tail) {
            (b'\\', [b'\\', tail @ ..]) => {
                out.push(b'\\');
                tail
            }
            (b'\\', [b'x', h, l, tail @ ..]) => {
                let hex = std::str::from_utf8(&[*h, *l])
                    .expect("ASCII hex")
                    .to_owned();
                out.push(u8::from_str_radix(&hex, 16).expect("two hex digits"));
                tail
            }
            (b'\\', _) => panic!("a lone backslash in {text:?}"),
            (b, tail) => {
                out.push(b);
                tail
            }
        };
    }
    out
}

/// A rollup of one count per key, each key folded `i + 1` times.
fn rollup_of(keys: &[Vec<u8>]) -> Rollup {
    let shape = Shape {
        aggs: vec![AggKind::CountAll],
    };
    let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..=i {
            rollup.fold(Timestamp(0), key, &[Input::Null]);
        }
    }
    rollup
}

fn results_of(rollup: &Rollup) -> Results<'_> {
    let mut rows = Rows::default();
    for (bucket, key, states) in rollup.groups() {
        rows.push(bucket, states);
        rows.push_bytes(key);
    }
    let columns = Columns {
        bucket: Some("day".into()),
        dims: vec!["word".into()],
        aggs: vec!["n".into()],
    };
    Results::new(columns, &rollup.shape().aggs, rows).expect("matching columns")
}

#[test]
fn invalid_utf8_is_escaped_and_backslashes_too() {
    assert_eq!(text_escaped(b"plain ascii"), "plain ascii");
    assert_eq!(text_escaped("café ✓".as_bytes()), "café ✓");
    assert_eq!(text_escaped(b"caf\xe9"), "caf\\xe9");
    assert_eq!(text_escaped(b"caf\xe8"), "caf\\xe8");
    assert_eq!(text_escaped(b"caf\\xe9"), "caf\\\\xe9");
    assert_eq!(text_escaped(b"\xc3"), "\\xc3");
    assert_eq!(text_escaped(b"\xf0\x9f\x98"), "\\xf0\\x9f\\x98");
    assert_eq!(text_escaped("\u{fffd}".as_bytes()), "\u{fffd}");
}

/// Latin-1 `café` and `cafè` are two groups: they once printed alike
/// (`caf\u{FFFD}`), as two rows of the same text in one day's file.
#[test]
fn two_invalid_keys_print_as_two_texts_in_files_and_tables() {
    let keys: Vec<Vec<u8>> = vec![
        b"caf\xe9".to_vec(),
        b"caf\xe8".to_vec(),
        "caf\u{fffd}".as_bytes().to_vec(),
        b"caf\\xe9".to_vec(),
    ];
    let rollup = rollup_of(&keys);
    let results = results_of(&rollup);
    let dir = std::env::temp_dir().join(format!("cardinal-export-text-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let written = write_daily_csv(&dir, "s", &results, Options::default()).expect("write");
    let text = std::fs::read_to_string(&written[0]).expect("read");
    std::fs::remove_dir_all(&dir).expect("clean up");
    let mut lines: Vec<&str> = text.lines().skip(1).collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "1970-01-01T00:00:00Z,caf\\\\xe9,4",
            "1970-01-01T00:00:00Z,caf\\xe8,2",
            "1970-01-01T00:00:00Z,caf\\xe9,1",
            "1970-01-01T00:00:00Z,caf\u{fffd},3",
        ]
    );
    let table = table(&results);
    for cell in ["caf\\xe9 ", "caf\\xe8 ", "caf\u{fffd} ", "caf\\\\xe9 "] {
        assert!(table.contains(cell), "{cell} in {table}");
    }
    let mut json = Vec::new();
    write_json_lines(&mut json, "s", &results, Options::default()).expect("write");
    let words: std::collections::BTreeSet<String> = String::from_utf8(json)
        .expect("UTF-8")
        .lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).expect("JSON");
            row["word"].as_str().expect("text").to_owned()
        })
        .collect();
    assert_eq!(words.len(), keys.len(), "{words:?}");
}

proptest! {
    /// Escaping is undone by its own rules, so two different byte strings
    /// never give the same text; ASCII without a backslash is unchanged.
    #[test]
    fn escaped_text_gives_back_its_bytes(
        bytes in proptest::collection::vec(
            prop_oneof![Just(b'\\'), Just(b'x'), Just(b'a'), Just(0xc3), Just(0xa9), any::<u8>()],
            0..24,
        )
    ) {
        let text = text_escaped(&bytes);
        prop_assert_eq!(unescaped(&text), bytes.clone());
        prop_assert_eq!(text_unescaped(&text), Some(bytes.clone()));
        if bytes.is_ascii() && !bytes.contains(&b'\\') {
            prop_assert_eq!(text.as_bytes(), &bytes[..]);
        }
        if let Ok(valid) = std::str::from_utf8(&bytes) {
            prop_assert_eq!(text, valid.replace('\\', "\\\\"));
        }
    }

    /// Any distinct byte strings as the dimension values of one rollup
    /// print as distinct cells of its day's file.
    #[test]
    fn distinct_keys_print_distinct(
        keys in proptest::collection::btree_set(
            proptest::collection::vec(prop_oneof![Just(b'\\'), Just(b'x'), Just(0xe9), Just(0xe8), any::<u8>()], 0..8),
            1..12,
        )
    ) {
        let keys: Vec<Vec<u8>> = keys.into_iter().collect();
        let rollup = rollup_of(&keys);
        let results = results_of(&rollup);
        let printed: std::collections::BTreeSet<Option<String>> = results
            .rows()
            .iter()
            .map(|row| results.dims(row).get(0).map(str::to_owned))
            .collect();
        prop_assert_eq!(printed.len(), keys.len());
    }
}

/// A bucket no parsed time has (a week of year 0, once `-001-12-27`) is
/// refused before any file is named after it.
#[test]
fn a_bucket_outside_the_years_names_no_file() {
    let shape = Shape {
        aggs: vec![AggKind::CountAll],
    };
    for bucket in [
        // 0000-01-01's week, and the last week of year 0.
        Timestamp(Timestamp::MIN.0 - (366 + 5) * 86_400_000),
        Timestamp(Timestamp::MIN.0 - 5 * 86_400_000),
        Timestamp(Timestamp::MAX.0 + 1),
    ] {
        let mut rollup = Rollup::new(shape.clone(), Limits::default()).expect("valid");
        rollup.fold(bucket, b"k", &[Input::Null]);
        let results = results_of(&rollup);
        let dir = std::env::temp_dir().join(format!(
            "cardinal-export-years-{}-{}",
            std::process::id(),
            bucket.0
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let error = write_daily_csv(&dir, "s", &results, Options::default())
            .expect_err("no file for an out-of-range bucket");
        let files = std::fs::read_dir(dir.join("s")).map_or(0, Iterator::count);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(files, 0, "{error}");
        let text = error.to_string();
        assert!(
            [
                "-0001-12-27T00:00:00Z",
                "0000-12-27T00:00:00Z",
                "+10000-01-01T00:00:00Z"
            ]
            .iter()
            .any(|bucket| text.contains(&format!("bucket {bucket} "))),
            "{text}"
        );
    }
}

/// Names a site may have: URLs hold `:` and `|`, CSV's own specials, a
/// backslash, bytes that are not UTF-8.
fn awkward_name() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            Just(b':'),
            Just(b'|'),
            Just(b','),
            Just(b'"'),
            Just(b'\n'),
            Just(b'\\'),
            Just(b'x'),
            Just(0xe9),
            any::<u8>()
        ],
        0..10,
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x00c5_0cab),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every CSV file reads back through a standard CSV reader: each
    /// dimension cell is its key's text, and a top-k cell splits on `|`
    /// into names (given back by `text_unescaped`) and their counts, for
    /// any names (a URL's `:` and `|` once made a cell unreadable).
    #[test]
    fn csv_files_read_back_through_a_csv_reader(
        names in proptest::collection::btree_set(awkward_name(), 1..6),
        key in awkward_name(),
    ) {
        let names: Vec<Vec<u8>> = names.into_iter().collect();
        let kind = AggKind::TopK { k: 8 };
        let shape = Shape { aggs: vec![kind] };
        let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
        for (i, name) in names.iter().enumerate() {
            let hash = cardinal_sketch::hash::bytes(name, 0);
            for _ in 0..=i {
                rollup.fold(Timestamp(0), &key, &[Input::Key { hash, id: None, text: name }]);
            }
        }
        let mut rows = Rows::default();
        for (bucket, group, states) in rollup.groups() {
            rows.push(bucket, states);
            rows.push_bytes(group);
        }
        let columns = Columns {
            bucket: Some("day".into()),
            dims: vec!["key".into()],
            aggs: vec!["top".into()],
        };
        let results = Results::new(columns, &rollup.shape().aggs, rows).expect("matching");
        let dir = std::env::temp_dir().join(format!("cardinal-export-csv-rt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = write_daily_csv(&dir, "s", &results, Options::default()).expect("write");
        let bytes = std::fs::read(&written[0]).expect("read");
        std::fs::remove_dir_all(&dir).expect("clean up");
        let mut reader = csv::ReaderBuilder::new().from_reader(&bytes[..]);
        let header: Vec<String> = reader.headers().expect("a header").iter().map(str::to_owned).collect();
        prop_assert_eq!(header, ["day", "key", "top"]);
        let records: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("a record")).collect();
        prop_assert_eq!(records.len(), 1);
        let record = &records[0];
        prop_assert_eq!(text_unescaped(&record[1]), Some(key.clone()));
        let mut read: Vec<(Vec<u8>, u64)> = record[2]
            .split('|')
            .map(|pair| {
                let (name, count) = pair.rsplit_once(':').expect("name:count");
                (text_unescaped(name).expect("an escaped name"), count.parse().expect("a count"))
            })
            .collect();
        read.sort();
        let mut expected: Vec<(Vec<u8>, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), i as u64 + 1))
            .collect();
        expected.sort();
        prop_assert_eq!(read, expected);
    }
}
