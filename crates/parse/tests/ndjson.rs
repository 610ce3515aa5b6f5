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
        // A key the schema reads, twice in one object: ambiguous, and
        // taking the last `user` would have to forget the first one's
        // `id`. Keys nothing reads may repeat.
        name: "duplicate keys the schema reads",
        input: concat!(
            "{\"ts\":\"a\",\"ts\":\"b\"}\n",
            "{\"user\":{\"id\":1},\"user\":{\"geo\":{}}}\n",
            "{\"user\":{\"geo\":{\"state\":\"CA\",\"state\":null}}}\n",
            "{\"user\":5,\"user\":{\"id\":1}}\n",
            "{\"x\":1,\"x\":{},\"ts\":\"c\",\"user\":{\"y\":1,\"y\":2}}\n",
            "{\"ts\":\"d\",\"user\":{\"id\":1}}",
        ),
        records: &["5:c|~|~|~", "6:d|1|~|~"],
        rejects: &[
            "1:0(ts)@ts:DuplicateKey",
            "2:-@user:DuplicateKey",
            "3:2(user.geo.state)@user.geo.state:DuplicateKey",
            "4:-@user:DuplicateKey",
        ],
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
        rejects: &["1:0(ts)@ts:NotScalar", "2:1(user.id)@user.id:NotScalar"],
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
        // Inside a member: its path, and the column if the value is one.
        rejects: &[
            "1:-@ts:JsonSyntax",
            "2:-:JsonSyntax",
            "3:-@ts:JsonSyntax",
            "4:-@ts:JsonSyntax",
            "5:0(ts)@ts:JsonSyntax",
            "6:0(ts)@ts:JsonSyntax",
            "7:-:JsonSyntax",
            "8:-@x:JsonSyntax",
            "9:-@x:JsonSyntax",
            "10:0(ts)@ts:JsonSyntax",
            "11:-:JsonSyntax",
        ],
    },
    Case {
        name: "bad escapes",
        input: "{\"ts\":\"\\x\"}\n{\"ts\":\"\\u12\"}\n{\"ts\":\"\\ud800\"}\n{\"ts\":\"\\udc00x\"}\n{\"x\":\"\\q\"}",
        records: &[],
        rejects: &[
            "1:0(ts)@ts:BadEscape",
            "2:0(ts)@ts:BadEscape",
            "3:0(ts)@ts:BadEscape",
            "4:0(ts)@ts:BadEscape",
            "5:-@x:BadEscape",
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

/// JSON text is UTF-8 (RFC 8259 §8.1): a string that is not, read or
/// skipped, key or value, rejects its record, at the member's path.
#[test]
fn strings_that_are_not_utf8_are_rejects_at_their_path() {
    let columns = schema(COLUMNS);
    let mut parser = NdjsonParser::new(&columns).expect("valid paths");
    let mut batch = Batch::new();
    let input: &[u8] = b"{\"ts\":\"caf\xc3\"}\n\
        {\"user\":{\"geo\":{\"state\":\"C\xffA\"}}}\n\
        {\"x\":[\"\xed\xa0\x80\"]}\n\
        {\"\xc0\xaf\":1}\n\
        {\"ts\":\"long enough for whole words \xf0\x9f\x98\"}\n\
        {\"ts\":\"caf\xc3\xa9\",\"x\":\"\xf0\x9f\x98\x80 and more text\"}\n";
    load(&mut batch, input);
    parser.parse(&mut batch);
    assert_eq!(render_records(&batch), ["6:caf\\xc3\\xa9|~|~|~"]);
    assert_eq!(
        render_rejects(&batch),
        [
            "1:0(ts)@ts:InvalidUtf8",
            "2:2(user.geo.state)@user.geo.state:InvalidUtf8",
            "3:-@x:InvalidUtf8",
            "4:-:InvalidUtf8",
            "5:0(ts)@ts:InvalidUtf8",
        ]
    );
    assert_eq!(
        batch.rejects()[1].to_string(),
        "t:2: column 3 (user.geo.state): at user.geo.state: JSON string is not UTF-8"
    );
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
    assert_eq!(render_rejects(&batch), ["2:-@x:DepthMax"]);
    // Far deeper than any stack would allow if skipping recursed.
    load(&mut batch, deep(100_000).as_bytes());
    parser.parse(&mut batch);
    assert_eq!(render_rejects(&batch), ["1:-@x:DepthMax"]);
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

/// An object's members in order, duplicates kept (`serde_json`'s maps
/// keep the last).
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// Whether the object `text` repeats a key on one of `paths`, at its
/// level or, through objects, below.
fn repeats_a_path_key(text: &str, paths: &[Vec<&str>]) -> bool {
    let Ok(Members(members)) = serde_json::from_str::<Members>(text) else {
        return false;
    };
    let mut heads: Vec<&str> = paths.iter().filter_map(|p| p.first().copied()).collect();
    heads.sort_unstable();
    heads.dedup();
    heads.into_iter().any(|head| {
        let values: Vec<&RawValue> = members
            .iter()
            .filter(|(key, _)| key == head)
            .map(|(_, value)| &**value)
            .collect();
        let below: Vec<Vec<&str>> = paths
            .iter()
            .filter(|p| p.len() > 1 && p[0] == head)
            .map(|p| p[1..].to_vec())
            .collect();
        values.len() > 1
            || values
                .first()
                .is_some_and(|value| !below.is_empty() && repeats_a_path_key(value.get(), &below))
    })
}

/// Objects whose keys may repeat.
fn json_with_repeats() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<i32>().prop_map(|n| n.to_string()),
        "[a-c\u{e9}\u{1f600} ]{0,6}".prop_map(|s| serde_json::to_string(&s).expect("string")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        proptest::collection::vec(
            (prop_oneof!["ts", "user", "id", "geo", "state", "x"], inner),
            0..4,
        )
        .prop_map(|members| {
            let members: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Repeated keys and bytes that are not UTF-8: a record is kept
    /// exactly when `serde_json` reads the line and no key the schema reads
    /// repeats, and then has `serde_json`'s values.
    #[test]
    fn repeats_and_bad_utf8_agree_with_serde_json(value in json_with_repeats(), cut in any::<bool>()) {
        let columns = ["ts", "user.id", "user.geo.state", "x"];
        let paths: Vec<Vec<&str>> = columns.iter().map(|c| c.split('.').collect()).collect();
        let mut parser = NdjsonParser::new(&schema(&columns)).expect("valid");
        let mut batch = Batch::new();
        let mut line = value.into_bytes();
        // Cut a two-byte character in half: not UTF-8 any more.
        if let Some(at) = line.windows(2).position(|w| w == "\u{e9}".as_bytes()).filter(|_| cut) {
            line.remove(at + 1);
        }
        load(&mut batch, &line);
        parser.parse(&mut batch);
        let text = std::str::from_utf8(&line).ok();
        let expected = text
            .filter(|text| !repeats_a_path_key(text, &paths))
            .and_then(|text| oracle(text, &paths).ok());
        match expected {
            Some(row) => {
                prop_assert_eq!(batch.rejects(), &[], "{:?}", text);
                let got: Vec<Option<Vec<u8>>> = batch.record(0).fields().map(|f| f.map(<[u8]>::to_vec)).collect();
                prop_assert_eq!(got, row, "{:?}", text);
            }
            None => {
                prop_assert_eq!(batch.len(), 0, "{:?}", line.escape_ascii().to_string());
                prop_assert_eq!(batch.rejects().len(), 1);
            }
        }
    }

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
