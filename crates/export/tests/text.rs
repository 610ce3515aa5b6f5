//! Dimension text out: any byte strings, UTF-8 or not, print as texts
//! that tell them apart, in tables and per-day CSV files alike.

use cardinal_event::Timestamp;
use cardinal_export::{
    Columns, Options, Results, Rows, table, text_escaped, write_daily_csv, write_json_lines,
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
