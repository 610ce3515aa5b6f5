//! Messages made into records: CSV with header columns interleaved and
//! quoted, NDJSON with header members added, refusals by reason, and
//! properties: CSV records split back into the expected fields, and no
//! message panics or writes more than one line.

use cardinal_event::Timestamp;
use cardinal_syslog::header::{Dialect, Message, parse};
use cardinal_syslog::record::{BodyFormat, HEADER_COLUMNS, Layout, RecordError};
use proptest::prelude::*;

fn now() -> Timestamp {
    Timestamp::parse(b"2026-11-28T21:00:00Z").expect("a test timestamp")
}

fn message(input: &[u8]) -> Message<'_> {
    parse(input, now()).expect("a test message parses")
}

fn record(layout: &Layout, m: &Message<'_>) -> Result<String, RecordError> {
    let mut out = b"previous\n".to_vec();
    let result = layout.append(m, &mut out);
    match result {
        Ok(()) => Ok(String::from_utf8(out[9..].to_vec()).expect("UTF-8 in these tests")),
        Err(e) => {
            assert_eq!(out, b"previous\n", "a refused record leaves out as it was");
            Err(e)
        }
    }
}

/// A message with every header field, and a body.
fn full(body: &str) -> Vec<u8> {
    format!("<14>1 2026-11-28T21:07:11.5+01:00 web1 app 42 ID7 [m@1 k=\"v\"] {body}").into_bytes()
}

#[test]
fn csv_interleaves_header_columns() {
    let layout = Layout::new(
        &[
            "syslog_timestamp",
            "a",
            "syslog_hostname",
            "b",
            "syslog_facility",
            "syslog_severity",
            "syslog_app_name",
            "syslog_procid",
            "syslog_msgid",
            "syslog_structured_data",
        ],
        BodyFormat::Csv,
    );
    assert_eq!((layout.header_columns(), layout.body_columns()), (8, 2));
    let cases: &[(&str, &str)] = &[
        (
            "1,x",
            "2026-11-28T20:07:11.500Z,1,web1,x,1,6,app,42,ID7,\"[m@1 k=\"\"v\"\"]\"\n",
        ),
        // A quoted field with a comma and quotes stays one field, as sent.
        (
            "1,\"x, \"\"y\"\"\"",
            "2026-11-28T20:07:11.500Z,1,web1,\"x, \"\"y\"\"\",1,6,app,42,ID7,\"[m@1 k=\"\"v\"\"]\"\n",
        ),
        // Empty body fields; a quote that does not start a field is data.
        (
            ",",
            "2026-11-28T20:07:11.500Z,,web1,,1,6,app,42,ID7,\"[m@1 k=\"\"v\"\"]\"\n",
        ),
        (
            "5\" screen,\"\"",
            "2026-11-28T20:07:11.500Z,5\" screen,web1,\"\",1,6,app,42,ID7,\"[m@1 k=\"\"v\"\"]\"\n",
        ),
    ];
    for (body, want) in cases {
        let input = full(body);
        assert_eq!(
            record(&layout, &message(&input)).as_deref(),
            Ok(*want),
            "{body}"
        );
    }
}

#[test]
fn csv_absent_header_fields_are_empty() {
    let layout = Layout::new(
        &[
            "SYSLOG_TIMESTAMP",
            "syslog_hostname",
            "Syslog_App_Name",
            "syslog_procid",
            "syslog_msgid",
            "syslog_structured_data",
            "syslog_facility",
            "syslog_severity",
            "msg",
        ],
        BodyFormat::Csv,
    );
    assert_eq!(layout.header_columns(), 8);
    assert_eq!(
        record(&layout, &message(b"<0>1 - - - - - -")).as_deref(),
        Ok(",,,,,,0,0,\n")
    );
    assert_eq!(
        record(&layout, &message(b"<191>Nov 28 20:00:00 h,1 tag: \"hi\"")).as_deref(),
        Ok("2026-11-28T20:00:00.000Z,\"h,1\",tag,,,,23,7,\"hi\"\n")
    );
}

#[test]
fn csv_body_only_and_empty_records() {
    let one = Layout::new(&["msg"], BodyFormat::Csv);
    // The engine's reader skips a blank line: an empty record is "".
    assert_eq!(
        record(&one, &message(b"<13>1 - - - - - -")).as_deref(),
        Ok("\"\"\n")
    );
    assert_eq!(
        record(&one, &message(b"<13>1 - - - - - - ")).as_deref(),
        Ok("\"\"\n")
    );
    assert_eq!(
        record(&one, &message(b"<13>1 - - - - - - x")).as_deref(),
        Ok("x\n")
    );
    let host = Layout::new(&["syslog_hostname"], BodyFormat::Csv);
    assert_eq!(
        record(&host, &message(b"<13>1 - - - - - -")).as_deref(),
        Ok("\"\"\n")
    );
    assert_eq!(
        record(&host, &message(b"<13>1 - h - - - -")).as_deref(),
        Ok("h\n")
    );
    // No body column: the body must be empty.
    assert_eq!(
        record(&host, &message(b"<13>1 - h - - - - x")),
        Err(RecordError::FieldCount {
            expected: 0,
            found: 1
        })
    );
    let two = Layout::new(&["a", "b"], BodyFormat::Csv);
    assert_eq!(
        record(&two, &message(b"<13>1 - - - - - - ,")).as_deref(),
        Ok(",\n")
    );
    assert_eq!(
        record(&two, &message(b"<13>1 - - - - - - 1,2")).as_deref(),
        Ok("1,2\n")
    );
    // A BOM opening a record is quoted: a reader drops one opening its input.
    let bom = b"<13>1 - - - - - - \xEF\xBB\xBF\xEF\xBB\xBFx\"y,\xEF\xBB\xBFz";
    assert_eq!(
        record(&two, &message(bom)).as_deref(),
        Ok("\"\u{feff}x\"\"y\",\u{feff}z\n")
    );
}

#[test]
fn csv_refusals() {
    let layout = Layout::new(&["syslog_hostname", "a", "b"], BodyFormat::Csv);
    let cases: &[(&[u8], &str)] = &[
        (b"<13>1 - h - - - - 1", "field_count"),
        (b"<13>1 - h - - - - 1,2,3", "field_count"),
        (b"<13>1 - h - - - - ", "field_count"),
        (b"<13>1 - h - - - - 1,\"2", "unterminated_quote"),
        (b"<13>1 - h - - - - \"1\"x,2", "text_after_quote"),
        (b"<13>1 - h - - - - 1,\"a\nb\"", "line_break"),
        (b"<13>1 - h - - - - 1,a\rb", "line_break"),
    ];
    for (input, reason) in cases {
        let e = record(&layout, &message(input)).expect_err("is refused");
        assert_eq!(
            e.reason(),
            *reason,
            "{:?}: {e}",
            String::from_utf8_lossy(input)
        );
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(
        record(&layout, &message(b"<13>1 - h - - - - 1")),
        Err(RecordError::FieldCount {
            expected: 2,
            found: 1
        })
    );
    // Structured data may hold a line break, which a CSV line cannot.
    let sd = Layout::new(&["syslog_structured_data"], BodyFormat::Csv);
    let e = record(&sd, &message(b"<13>1 - - - - - [a b=\"x\ny\"]")).expect_err("is refused");
    assert_eq!(e.reason(), "header_line_break", "{e}");
    assert!(e.to_string().contains("syslog_structured_data"), "{e}");
}

#[test]
fn csv_timestamps_read_back() {
    let layout = Layout::new(&["syslog_timestamp"], BodyFormat::Csv);
    for text in [
        "2026-11-28T21:07:11Z",
        "2026-11-28T21:07:11.001Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z",
        "1969-12-31T23:59:59.999Z",
    ] {
        let input = format!("<13>1 {text} - - - - -");
        let m = message(input.as_bytes());
        let out = record(&layout, &m).expect("a record");
        let line = out.trim_end_matches('\n');
        assert_eq!(line.len(), 24, "{line}");
        assert_eq!(
            Timestamp::parse(line.as_bytes()).ok(),
            m.timestamp,
            "{line}"
        );
    }
}

#[test]
fn ndjson_adds_header_members() {
    let layout = Layout::new(
        &[
            "syslog_hostname",
            "a",
            "syslog_facility",
            "syslog_timestamp",
            "syslog_structured_data",
            "syslog_msgid",
        ],
        BodyFormat::Ndjson,
    );
    let head = r#""syslog_hostname":"web1","syslog_facility":1,"syslog_timestamp":"2026-11-28T20:07:11.500Z","syslog_structured_data":"[m@1 k=\"v\"]","syslog_msgid":"ID7""#;
    let cases: &[(&str, String)] = &[
        (r#"{"a":1}"#, format!("{{{head},\"a\":1}}\n")),
        ("{}", format!("{{{head}}}\n")),
        (" { } ", format!("{{{head} }}\n")),
        (
            "\t{\"a\": {\"b\": [1, \"}\", {}]}, \"c\": \"x\\\"y\"}  ",
            format!("{{{head},\"a\": {{\"b\": [1, \"}}\", {{}}]}}, \"c\": \"x\\\"y\"}}\n"),
        ),
        // A header column's name nested deeper is no duplicate.
        (
            r#"{"a":{"syslog_hostname":1}}"#,
            format!("{{{head},\"a\":{{\"syslog_hostname\":1}}}}\n"),
        ),
        // Nor is a header column the stream does not declare.
        (
            r#"{"syslog_procid":"1"}"#,
            format!("{{{head},\"syslog_procid\":\"1\"}}\n"),
        ),
    ];
    for (body, want) in cases {
        let input = full(body);
        assert_eq!(
            record(&layout, &message(&input)).as_deref(),
            Ok(&want[..]),
            "{body}"
        );
    }
    // Absent fields are null; strings are escaped.
    let m = message(b"<13>1 - - - - - [x q=\"a\\\\b \\\"c\\\" \x01\"] {}");
    assert_eq!(
        record(&layout, &m).as_deref(),
        Ok(
            "{\"syslog_hostname\":null,\"syslog_facility\":1,\"syslog_timestamp\":null,\"syslog_structured_data\":\"[x q=\\\"a\\\\\\\\b \\\\\\\"c\\\\\\\" \\u0001\\\"]\",\"syslog_msgid\":null}\n"
        )
    );
    // A stream without header columns passes the object through.
    let plain = Layout::new(&["a"], BodyFormat::Ndjson);
    assert_eq!(plain.header_columns(), 0);
    assert_eq!(
        record(&plain, &message(b"<13>1 - - - - - -  {\"a\":1} ")).as_deref(),
        Ok("{\"a\":1}\n")
    );
}

#[test]
fn ndjson_refusals() {
    let layout = Layout::new(&["syslog_hostname", "syslog_severity"], BodyFormat::Ndjson);
    let cases: &[(&str, &str)] = &[
        ("", "not_object"),
        ("   ", "not_object"),
        ("[1]", "not_object"),
        ("\"x\"", "not_object"),
        ("{", "not_object"),
        ("{\"a\":1} x", "not_object"),
        ("{\"a\":1}{\"b\":2}", "json_syntax"),
        ("{\"a\":[1}", "json_syntax"),
        ("{\"a\":1,}", "json_syntax"),
        ("{1:2}", "json_syntax"),
        ("{\"a\" 1}", "json_syntax"),
        ("{\"a\":\"1}", "json_syntax"),
        ("{\"a\":\n1}", "line_break"),
        ("{\"syslog_hostname\":\"x\"}", "duplicate_key"),
        ("{\"a\":1, \"syslog_severity\":2}", "duplicate_key"),
        ("{\"syslog\\u005fhostname\":\"x\"}", "duplicate_key"),
        ("{\"syslog_host\\u006eame\":\"x\"}", "duplicate_key"),
    ];
    for (body, reason) in cases {
        let input = format!("<13>1 - h - - - - {body}");
        let e = record(&layout, &message(input.as_bytes())).expect_err("is refused");
        assert_eq!(e.reason(), *reason, "{body}: {e}");
    }
    // A key spelt with other escapes is another key.
    let input = "<13>1 - h - - - - {\"syslog_hostname\\n\":1,\"Syslog_hostname\":2}";
    assert!(record(&layout, &message(input.as_bytes())).is_ok());
}

/// Splits one CSV line by RFC 4180, unquoting fields.
fn split_csv(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut fields = Vec::new();
    let mut p = 0;
    loop {
        let mut field = Vec::new();
        if bytes.get(p) == Some(&b'"') {
            p += 1;
            loop {
                match (bytes.get(p), bytes.get(p + 1)) {
                    (Some(b'"'), Some(b'"')) => {
                        field.push(b'"');
                        p += 2;
                    }
                    (Some(b'"'), _) => {
                        p += 1;
                        break;
                    }
                    (Some(&b), _) => {
                        field.push(b);
                        p += 1;
                    }
                    (None, _) => panic!("unterminated quote in {line:?}"),
                }
            }
        } else {
            while let Some(&b) = bytes.get(p).filter(|&&b| b != b',') {
                field.push(b);
                p += 1;
            }
        }
        fields.push(String::from_utf8(field).expect("UTF-8"));
        match bytes.get(p) {
            Some(b',') => p += 1,
            None => return fields,
            Some(_) => panic!("text after a quote in {line:?}"),
        }
    }
}

/// Writes a field as a sender might: quoted when it must be, and
/// sometimes when it need not.
fn csv_field(value: &str, quote: bool) -> String {
    if quote || value.contains(',') || value.starts_with('"') {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

fn header_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of("[!-~]{1,12}")
}

/// A generated case: the message's bytes, its body's fields (value, and
/// whether the sender quoted it), and picks of header columns to declare.
type Case = (Vec<u8>, Vec<(String, bool)>, Vec<Option<usize>>);

fn generated() -> impl Strategy<Value = Case> {
    let header = (
        0u8..=191,
        proptest::option::of(Timestamp::MIN.0 / 1000 + 1..Timestamp::MAX.0 / 1000 - 1),
        header_text(),
        header_text(),
        header_text(),
        header_text(),
        proptest::option::of("[ -~]{0,12}"),
    );
    let body = proptest::collection::vec(("[^\r\n\u{feff}]{0,8}", any::<bool>()), 0..5);
    // Which header columns, in which places among the body's.
    let columns = proptest::collection::vec(proptest::option::of(0usize..8), 0..10);
    (header, body, columns).prop_map(|(h, body, columns)| {
        let (pri, secs, host, app, procid, msgid, sd_value) = (h.0, h.1, h.2, h.3, h.4, h.5, h.6);
        let nil = |f: &Option<String>| f.clone().unwrap_or_else(|| "-".into());
        let ts = secs.map_or("-".to_owned(), |s| Timestamp(s * 1000).to_string());
        let sd = sd_value.map_or("-".to_owned(), |v| {
            format!(
                "[s@1 v=\"{}\"]",
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace(']', "\\]")
            )
        });
        let mut input = format!(
            "<{pri}>1 {ts} {} {} {} {} {sd}",
            nil(&host),
            nil(&app),
            nil(&procid),
            nil(&msgid)
        )
        .into_bytes();
        let fields: Vec<String> = body.iter().map(|(v, q)| csv_field(v, *q)).collect();
        if !body.is_empty() {
            input.push(b' ');
            input.extend_from_slice(fields.join(",").as_bytes());
        }
        (input, body, columns)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn csv_records_split_back((input, body, picks) in generated()) {
        let m = parse(&input, now()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Declared columns: the header ones picked, each once, and the
        // body's columns spread among them.
        let mut seen = [false; 8];
        let mut columns: Vec<String> = Vec::new();
        let mut body_left = body.len();
        for pick in picks {
            match pick {
                Some(h) if !seen[h] => {
                    seen[h] = true;
                    columns.push(HEADER_COLUMNS[h].to_owned());
                }
                _ if body_left > 0 => {
                    columns.push(format!("c{body_left}"));
                    body_left -= 1;
                }
                _ => {}
            }
        }
        columns.extend((1..=body_left).rev().map(|i| format!("c{i}")));
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        let layout = Layout::new(&names, BodyFormat::Csv);
        let mut out = Vec::new();
        let result = layout.append(&m, &mut out);
        result.map_err(|e| TestCaseError::fail(format!("{e}: {columns:?}")))?;
        let line = std::str::from_utf8(&out).expect("UTF-8");
        prop_assert!(line.ends_with('\n'));
        prop_assert_eq!(line.matches('\n').count(), 1);
        let got = split_csv(line.trim_end_matches('\n'));
        let mut body_values = body.iter().map(|(v, _)| v.clone());
        let expected: Vec<String> = columns
            .iter()
            .map(|c| match HEADER_COLUMNS.iter().position(|h| h == c) {
                Some(0) => m.timestamp.map_or(String::new(), |t| {
                    let text = Timestamp(t.0).to_string();
                    // Always with milliseconds.
                    if text.len() == 20 { format!("{}.000Z", &text[..19]) } else { text }
                }),
                Some(1) => m.hostname.unwrap_or_default().to_owned(),
                Some(2) => m.app_name.unwrap_or_default().to_owned(),
                Some(3) => m.procid.unwrap_or_default().to_owned(),
                Some(4) => m.msgid.unwrap_or_default().to_owned(),
                Some(5) => m.structured_data.unwrap_or_default().to_owned(),
                Some(6) => m.facility.to_string(),
                Some(7) => m.severity.to_string(),
                _ => body_values.next().expect("a body field per body column"),
            })
            .collect();
        if columns.is_empty() {
            prop_assert_eq!(line, "\n");
        } else {
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn records_are_one_line_or_refused(
        body in proptest::collection::vec(any::<u8>(), 0..64),
        sd in proptest::option::of(any::<String>()),
        columns in proptest::collection::vec(0usize..10, 0..6),
    ) {
        let names: Vec<&str> = columns
            .iter()
            .map(|&i| HEADER_COLUMNS.get(i).copied().unwrap_or(if i == 8 { "a" } else { "b" }))
            .collect();
        let m = Message {
            dialect: Dialect::Rfc5424,
            facility: 3,
            severity: 4,
            timestamp: Some(Timestamp(1_800_000_000_123)),
            hostname: Some("h,\"x\""),
            app_name: None,
            procid: Some("1"),
            msgid: None,
            structured_data: sd.as_deref(),
            body: &body,
        };
        for format in [BodyFormat::Csv, BodyFormat::Ndjson] {
            let layout = Layout::new(&names, format);
            let mut out = b"x".to_vec();
            match layout.append(&m, &mut out) {
                Ok(()) => {
                    prop_assert_eq!(out.last(), Some(&b'\n'));
                    prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
                }
                Err(e) => {
                    prop_assert_eq!(&out[..], b"x");
                    prop_assert!(!e.reason().is_empty());
                }
            }
        }
    }
}
