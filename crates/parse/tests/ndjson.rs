//! Nested NDJSON: a table of cases (nesting, escapes, missing paths, wrong
//! types, malformed lines, limits), the scanner against `serde_json` on
//! generated records, and arbitrary bytes without a panic.

mod common;

use std::collections::HashMap;

use cardinal_event::{ColumnType, Value};
use cardinal_parse::{Batch, DEPTH_MAX, Error, NdjsonParser};
use common::{load, render_records, render_rejects, schema};
use proptest::prelude::*;
use serde_json::value::RawValue;

/// Columns: `ts`, `user.id`, `user.geo.state`, `revenue`.
const COLUMNS: &[&str] = &["ts", "user.id", "user.geo.state", "revenue"];

/// One case: input lines, expected records (`line:field|...`, `~` absent)
/// and rejects (`line:column(name):Reason`).
struct Case {
    name: &'static str,
    input: &'static str,
    records: &'static [&'static str],
    rejects: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "flat and nested",
        input: r#"{"ts":"2026-11-01","user":{"id":42,"geo":{"state":"CA"}},"revenue":0.5}"#,
        records: &["1:2026-11-01|42|CA|0.5"],
        rejects: &[],
    },
    Case {
        name: "any key order, unknown keys skipped",
        input: r#"{"x":[1,{"y":[true,null]}],"revenue":-1.5e-3,"user":{"geo":{"state":"NY","z":{}},"id":-7},"ts":"t"}"#,
        records: &["1:t|-7|NY|-1.5e-3"],
        rejects: &[],
    },
    Case {
        name: "whitespace everywhere",
        input: " { \"ts\" : \"a\" ,\t\"user\" : { \"id\" : 1 } } \r",
        records: &["1:a|1|~|~"],
        rejects: &[],
    },
    Case {
        name: "missing paths and null are absent",
        input: "{\"ts\":null,\"user\":{}}\n{}\n{\"user\":{\"geo\":null}}",
        records: &["1:~|~|~|~", "2:~|~|~|~", "3:~|~|~|~"],
        rejects: &[],
    },
    Case {
        name: "path through a scalar is absent",
        input: r#"{"user":"bob","revenue":1}"#,
        records: &["1:~|~|~|1"],
        rejects: &[],
    },
    Case {
        name: "booleans and numbers keep their text",
        input: r#"{"ts":true,"revenue":false,"user":{"id":1E+2}}"#,
        records: &["1:true|1E+2|~|false"],
        rejects: &[],
    },
    Case {
        name: "escapes unescaped",
        input: r#"{"ts":"a\"b\\c\/\n\u00e9\ud83d\ude00","user":{"geo":{"state":"\u0043A"}}}"#,
        records: &["1:a\\\"b\\\\c/\\n\\xc3\\xa9\\xf0\\x9f\\x98\\x80|~|CA|~"],
        rejects: &[],
    },
    Case {
        name: "escaped keys match",
        input: r#"{"\u0074s":"x","us\u0065r":{"id":3}}"#,
        records: &["1:x|3|~|~"],
        rejects: &[],
    },
    Case {
        name: "last duplicate wins",
        input: r#"{"ts":"a","ts":"b"}"#,
        records: &["1:b|~|~|~"],
        rejects: &[],
    },
    Case {
        name: "blank lines skipped",
        input: "\n  \r\n{\"ts\":\"a\"}\n\n",
        records: &["3:a|~|~|~"],
        rejects: &[],
    },
    Case {
        name: "object where a scalar is declared",
        input: "{\"ts\":{\"a\":1}}\n{\"user\":{\"id\":[1]}}\n{\"ts\":\"ok\"}",
        records: &["3:ok|~|~|~"],
        rejects: &["1:0(ts):NotScalar", "2:1(user.id):NotScalar"],
    },
    Case {
        name: "a byte-order mark opens the input",
        input: "\u{feff}{\"ts\":\"a\"}\n{\"ts\":\"b\"}",
        records: &["1:a|~|~|~", "2:b|~|~|~"],
        rejects: &[],
    },
    Case {
        name: "not an object",
        input: "[1,2]\n\"x\"\n42\nnull \n-1",
        records: &[],
        rejects: &[
            "1:-:NotAnObject",
            "2:-:NotAnObject",
            "3:-:NotAnObject",
            "4:-:NotAnObject",
            "5:-:NotAnObject",
        ],
    },
    Case {
        // Not JSON at all: malformed, not a value of another kind.
        name: "text that is not JSON",
        input: "not json\nnul\ntrue false\nts=1",
        records: &[],
        rejects: &[
            "1:-:JsonSyntax",
            "2:-:JsonSyntax",
            "3:-:JsonSyntax",
            "4:-:JsonSyntax",
        ],
    },
    Case {
        name: "syntax errors",
        input: concat!(
            "{\"ts\":\"a\"\n",
            "{\"ts\":\"a\",}\n",
            "{\"ts\" \"a\"}\n",
            "{\"ts\":01}\n",
            "{\"ts\":1.}\n",
            "{\"ts\":tru}\n",
            "{\"ts\":\"a\"} x\n",
            "{\"x\":[1,]}\n",
            "{\"x\":{\"a\"}}\n",
            "{\"ts\":\"tab\there\"}\n",
            "{ts:1}\n",
        ),
        records: &[],
        rejects: &[
            "1:-:JsonSyntax",
            "2:-:JsonSyntax",
            "3:-:JsonSyntax",
            "4:-:JsonSyntax",
            "5:-:JsonSyntax",
            "6:-:JsonSyntax",
            "7:-:JsonSyntax",
            "8:-:JsonSyntax",
            "9:-:JsonSyntax",
            "10:-:JsonSyntax",
            "11:-:JsonSyntax",
        ],
    },
    Case {
        name: "bad escapes",
        input: "{\"ts\":\"\\x\"}\n{\"ts\":\"\\u12\"}\n{\"ts\":\"\\ud800\"}\n{\"ts\":\"\\udc00x\"}\n{\"x\":\"\\q\"}",
        records: &[],
        rejects: &[
            "1:-:BadEscape",
            "2:-:BadEscape",
            "3:-:BadEscape",
            "4:-:BadEscape",
            "5:-:BadEscape",
        ],
    },
];

#[test]
fn table() {
    let columns = schema(COLUMNS);
    for case in CASES {
        let mut parser = NdjsonParser::new(&columns).expect("valid paths");
        let mut batch = Batch::new();
        load(&mut batch, case.input.as_bytes());
        parser.parse(&mut batch);
        assert_eq!(render_records(&batch), case.records, "{}", case.name);
        assert_eq!(render_rejects(&batch), case.rejects, "{}", case.name);
    }
}

#[test]
fn wrong_types_surface_when_read() {
    // The parser hands over text; the declared type is checked where the
    // value is read, with a countable ValueError.
    let columns = schema(COLUMNS);
    let mut parser = NdjsonParser::new(&columns).expect("valid");
    let mut batch = Batch::new();
    load(
        &mut batch,
        br#"{"ts":"yesterday","user":{"id":"42"},"revenue":"1.5"}"#,
    );
    parser.parse(&mut batch);
    let record = batch.record(0);
    let read = |column, ty| Value::parse(record.field(column).expect("present"), ty);
    assert!(read(0, ColumnType::Timestamp).is_err());
    assert_eq!(read(1, ColumnType::BigInt), Ok(Value::Int(42)));
    assert_eq!(read(3, ColumnType::Double), Ok(Value::Float(1.5)));
}

#[test]
fn depth_is_bounded() {
    let columns = schema(COLUMNS);
    let mut parser = NdjsonParser::new(&columns).expect("valid");
    let deep = |levels: usize| format!("{{\"x\":{}1{}}}", "[".repeat(levels), "]".repeat(levels));
    let mut batch = Batch::new();
    let input = format!("{}\n{}\n", deep(DEPTH_MAX - 1), deep(DEPTH_MAX));
    load(&mut batch, input.as_bytes());
    parser.parse(&mut batch);
    assert_eq!(batch.len(), 1);
    assert_eq!(render_rejects(&batch), ["2:-:DepthMax"]);
    // Far deeper than any stack would allow if skipping recursed.
    load(&mut batch, deep(100_000).as_bytes());
    parser.parse(&mut batch);
    assert_eq!(render_rejects(&batch), ["1:-:DepthMax"]);
}

#[test]
fn paths_are_checked() {
    for (names, problem) in [
        (
            &["a", "a"][..],
            "is another column's path or a prefix of one",
        ),
        (&["a", "a.b"][..], "passes through another column's value"),
        (
            &["a.b", "a"][..],
            "is another column's path or a prefix of one",
        ),
    ] {
        match NdjsonParser::new(&schema(names)) {
            Err(Error::Path { problem: found, .. }) => assert_eq!(found, problem, "{names:?}"),
            other => panic!("{names:?}: {other:?}"),
        }
    }
    let deep: Vec<String> = (0..DEPTH_MAX).map(|i| format!("k{i}")).collect();
    assert!(NdjsonParser::new(&schema(&[deep.join(".").as_str()])).is_err());
}

/// The oracle: `serde_json` reads the line (checking all of it), then each
/// column's path is walked; a string gives its content, other scalars
/// their text, `null` and missing keys nothing. `Err` for a line the
/// scanner must reject.
fn oracle(line: &str, paths: &[Vec<&str>]) -> Result<Vec<Option<Vec<u8>>>, ()> {
    let root: HashMap<String, &RawValue> = serde_json::from_str(line).map_err(|_| ())?;
    let mut row = Vec::new();
    for path in paths {
        let mut map = Some(root.clone());
        let mut value = None;
        for (i, key) in path.iter().enumerate() {
            let Some(raw) = map.as_ref().and_then(|m| m.get(*key).copied()) else {
                value = None;
                break;
            };
            if i + 1 == path.len() {
                value = Some(raw);
            } else {
                map = serde_json::from_str(raw.get()).ok();
            }
        }
        row.push(match value.map(RawValue::get) {
            None | Some("null") => None,
            Some(text) if text.starts_with('"') => Some(
                serde_json::from_str::<String>(text)
                    .map_err(|_| ())?
                    .into_bytes(),
            ),
            Some(text) if text.starts_with(['{', '[']) => return Err(()),
            Some(text) => Some(text.as_bytes().to_vec()),
        });
    }
    Ok(row)
}

/// JSON text for a generated value tree, with unique keys per object.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        "[a-c\"\\\\/\u{e9}\u{1f600}\n\t ]{0,6}"
            .prop_map(|s| serde_json::to_string(&s).expect("string")),
        "[a-c]{0,3}".prop_map(|s| format!("\"{}\"", s.replace('a', "\\u0061"))),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::btree_map(
                prop_oneof!["ts", "user", "id", "geo", "state", "x"],
                inner,
                0..5
            )
            .prop_map(|m| {
                let members: Vec<String> = m
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\" : {v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn scanner_agrees_with_serde_json(value in json_value()) {
        let columns = ["ts", "user.id", "user.geo.state", "x"];
        let paths: Vec<Vec<&str>> = columns.iter().map(|c| c.split('.').collect()).collect();
        let mut parser = NdjsonParser::new(&schema(&columns)).expect("valid");
        let mut batch = Batch::new();
        let line = value.replace('\n', " ");
        load(&mut batch, line.as_bytes());
        parser.parse(&mut batch);
        match oracle(&line, &paths) {
            Ok(row) => {
                prop_assert_eq!(batch.rejects(), &[], "{}", line);
                let got: Vec<Option<Vec<u8>>> = batch.record(0).fields().map(|f| f.map(<[u8]>::to_vec)).collect();
                prop_assert_eq!(got, row, "{}", line);
            }
            Err(()) => {
                prop_assert_eq!(batch.len(), 0, "{}", line);
                prop_assert_eq!(batch.rejects().len(), 1, "{}", line);
            }
        }
    }

    #[test]
    fn any_bytes_never_panic(input in proptest::collection::vec(
        prop_oneof![
            3 => Just(b'{'), 3 => Just(b'}'), 2 => Just(b'['), 2 => Just(b']'), 4 => Just(b'"'),
            3 => Just(b':'), 3 => Just(b','), 2 => Just(b'\\'), 1 => Just(b'u'), 1 => Just(b'\n'),
            2 => Just(b'1'), 1 => Just(b't'), 1 => any::<u8>(),
        ],
        0..300,
    )) {
        let mut parser = NdjsonParser::new(&schema(COLUMNS)).expect("valid");
        let mut batch = Batch::new();
        load(&mut batch, &input);
        parser.parse(&mut batch);
        for record in batch.records() {
            let _ = record.fields().count();
        }
    }
}
