//! Delimited text: a table of cases (quoting, escapes, CRLF, empty fields,
//! header mapping, limits), the fast path with each scanner this CPU runs
//! against the general path on arbitrary input, and arbitrary bytes
//! without a panic.

mod common;

use cardinal_parse::{
    Batch, CsvConfig, CsvParser, Error, Extra, FIELDS_MAX, Missing, RECORD_BYTES_MAX, Result,
    Scanner,
};
use common::{load, render_records, render_rejects, schema};
use proptest::prelude::*;

/// One case: a config, the input, and the records and rejects expected
/// (rendered by `common`: `line:field|field`, `line:column:Reason`).
struct Case {
    name: &'static str,
    config: CsvConfig,
    input: &'static str,
    records: &'static [&'static str],
    rejects: &'static [&'static str],
}

const STRICT: CsvConfig = CsvConfig {
    delimiter: b',',
    header: false,
    missing: Missing::Reject,
    extra: Extra::Reject,
};
const LENIENT: CsvConfig = CsvConfig {
    missing: Missing::Null,
    extra: Extra::Ignore,
    ..STRICT
};
const HEADER: CsvConfig = CsvConfig {
    header: true,
    ..STRICT
};
const HEADER_LENIENT: CsvConfig = CsvConfig {
    header: true,
    ..LENIENT
};

/// How a chunk is parsed: the general path (`None`), or the fast path with
/// a scanner.
type Path = Option<Scanner>;

/// The general path and the fast path with every scanner this CPU runs,
/// so that each is exercised wherever the tests run.
fn paths() -> Vec<Path> {
    std::iter::once(None)
        .chain(
            Scanner::ALL
                .into_iter()
                .filter(|s| s.is_supported())
                .map(Some),
        )
        .collect()
}

fn parse_on(parser: &mut CsvParser, batch: &mut Batch, path: Path) -> Result<()> {
    match path {
        None => parser.parse_without_fast_path(batch),
        Some(scanner) => {
            parser.set_scanner(scanner);
            parser.parse(batch)
        }
    }
}

const CASES: &[Case] = &[
    Case {
        name: "plain",
        config: STRICT,
        input: "a,b,c\nd,e,f\n",
        records: &["1:a|b|c", "2:d|e|f"],
        rejects: &[],
    },
    Case {
        name: "no final newline",
        config: STRICT,
        input: "a,b,c\nd,e,f",
        records: &["1:a|b|c", "2:d|e|f"],
        rejects: &[],
    },
    Case {
        name: "empty fields",
        config: STRICT,
        input: ",,\na,,\n,,c\n",
        records: &["1:||", "2:a||", "3:||c"],
        rejects: &[],
    },
    Case {
        name: "crlf",
        config: STRICT,
        input: "a,b,c\r\nd,e,\r\n",
        records: &["1:a|b|c", "2:d|e|"],
        rejects: &[],
    },
    Case {
        name: "lone cr is data",
        config: STRICT,
        input: "a\r,b,c\n",
        records: &["1:a\\r|b|c"],
        rejects: &[],
    },
    Case {
        name: "blank lines skipped",
        config: STRICT,
        input: "\na,b,c\n\r\n\nd,e,f\n",
        records: &["2:a|b|c", "5:d|e|f"],
        rejects: &[],
    },
    Case {
        name: "quoted",
        config: STRICT,
        input: "\"a\",\"b,b\",\"\"\n",
        records: &["1:a|b,b|"],
        rejects: &[],
    },
    Case {
        name: "a byte-order mark opens a file without a header",
        config: STRICT,
        input: "\u{feff}a,b,c\nd,e,f\n",
        records: &["1:a|b|c", "2:d|e|f"],
        rejects: &[],
    },
    Case {
        name: "doubled quotes",
        config: STRICT,
        input: "\"say \"\"hi\"\"\",x,\"\"\"\"\n",
        records: &["1:say \\\"hi\\\"|x|\\\""],
        rejects: &[],
    },
    Case {
        name: "quoted newline",
        config: STRICT,
        input: "\"a\nb\",c,d\ne,f,g\n",
        records: &["1:a\\nb|c|d", "3:e|f|g"],
        rejects: &[],
    },
    Case {
        name: "quoted crlf end",
        config: STRICT,
        input: "a,b,\"c\"\r\nd,e,f\n",
        records: &["1:a|b|c", "2:d|e|f"],
        rejects: &[],
    },
    Case {
        name: "quote inside unquoted is data",
        config: STRICT,
        input: "5\" screen,b,c\n",
        records: &["1:5\\\" screen|b|c"],
        rejects: &[],
    },
    Case {
        name: "text after quote",
        config: STRICT,
        input: "\"a\"x,b,c\nd,e,f\n",
        records: &["2:d|e|f"],
        rejects: &["1:0(a):TextAfterQuote"],
    },
    Case {
        name: "unterminated quote",
        config: STRICT,
        input: "a,b,c\nd,\"e,f\n",
        records: &["1:a|b|c"],
        rejects: &["2:1(b):UnterminatedQuote"],
    },
    Case {
        name: "unterminated resumes next line",
        config: STRICT,
        input: "d,\"e,f\ng,h,i\n",
        records: &["2:g|h|i"],
        rejects: &["1:1(b):UnterminatedQuote"],
    },
    Case {
        name: "too few",
        config: STRICT,
        input: "a,b\nc,d,e\n",
        records: &["2:c|d|e"],
        rejects: &["1:2(c):TooFewFields"],
    },
    Case {
        name: "too many",
        config: STRICT,
        input: "a,b,c,d\nc,d,e\n",
        records: &["2:c|d|e"],
        rejects: &["1:3:TooManyFields"],
    },
    Case {
        name: "too few as null",
        config: LENIENT,
        input: "a,b\nc\n",
        records: &["1:a|b|~", "2:c|~|~"],
        rejects: &[],
    },
    Case {
        name: "too many ignored",
        config: LENIENT,
        input: "a,b,c,d,e\n",
        records: &["1:a|b|c"],
        rejects: &[],
    },
    Case {
        name: "tab delimiter",
        config: CsvConfig {
            delimiter: b'\t',
            ..STRICT
        },
        input: "a\tb,b\tc\n",
        records: &["1:a|b,b|c"],
        rejects: &[],
    },
    Case {
        name: "pipe delimiter, quoted pipe",
        config: CsvConfig {
            delimiter: b'|',
            ..STRICT
        },
        input: "a|\"b|b\"|c\n",
        records: &["1:a|b|b|c"],
        rejects: &[],
    },
    Case {
        name: "header in order",
        config: HEADER,
        input: "a,b,c\n1,2,3\n",
        records: &["2:1|2|3"],
        rejects: &[],
    },
    Case {
        name: "header reordered",
        config: HEADER,
        input: "c,A,b\n3,1,2\n",
        records: &["2:1|2|3"],
        rejects: &[],
    },
    Case {
        name: "header quoted, spaced, bom",
        config: HEADER,
        input: "\u{feff}\"a\", b ,c\r\n1,2,3\r\n",
        records: &["2:1|2|3"],
        rejects: &[],
    },
    Case {
        name: "header after blank line",
        config: HEADER,
        input: "\na,b,c\n1,2,3\n",
        records: &["3:1|2|3"],
        rejects: &[],
    },
    Case {
        name: "header missing column as null",
        config: HEADER_LENIENT,
        input: "b,a\n2,1\n",
        records: &["2:1|2|~"],
        rejects: &[],
    },
    Case {
        // A log with more columns than a summary needs: the schema declares
        // the ones it reads, the header maps them, the rest are skipped.
        name: "header columns the schema lacks are skipped",
        config: HEADER,
        input: "x,c,y,a,b,z\n0,3,0,1,2,0\n0,3,0,1,2\n",
        records: &["2:1|2|3"],
        rejects: &["3:5:TooFewFields"],
    },
    Case {
        name: "header extra column ignored",
        config: HEADER_LENIENT,
        input: "a,x,b,c\n1,9,2,3\n",
        records: &["2:1|2|3"],
        rejects: &[],
    },
    Case {
        name: "header width rules records",
        config: HEADER_LENIENT,
        input: "b,a\n2,1,0\n2\n",
        records: &["2:1|2|~", "3:~|2|~"],
        rejects: &[],
    },
];

#[test]
fn table() {
    let columns = schema(&["a", "b", "c"]);
    for case in CASES {
        for path in paths() {
            let mut parser = CsvParser::new(&columns, case.config).expect(case.name);
            let mut batch = Batch::new();
            load(&mut batch, case.input.as_bytes());
            parse_on(&mut parser, &mut batch, path).expect(case.name);
            assert_eq!(
                render_records(&batch),
                case.records,
                "{} ({path:?})",
                case.name
            );
            assert_eq!(
                render_rejects(&batch),
                case.rejects,
                "{} ({path:?})",
                case.name
            );
        }
    }
}

#[test]
fn header_errors() {
    let columns = schema(&["a", "b", "c"]);
    type Check = fn(&Error) -> bool;
    let cases: &[(&str, CsvConfig, Check)] = &[
        (
            "a,b\n",
            HEADER,
            |e| matches!(e, Error::HeaderMissingColumn { name, .. } if name == "c"),
        ),
        ("a,b,a\n", HEADER_LENIENT, |e| {
            matches!(e, Error::HeaderDuplicate { .. })
        }),
        ("a,\"b\"x,c\n", HEADER, |e| {
            matches!(e, Error::HeaderMalformed { .. })
        }),
    ];
    for (input, config, check) in cases {
        let mut parser = CsvParser::new(&columns, *config).expect("valid");
        let mut batch = Batch::new();
        load(&mut batch, input.as_bytes());
        let error = parser.parse(&mut batch).expect_err(input);
        assert!(check(&error), "{input}: {error}");
    }
    // A later range of a file: the header comes from its first line.
    let mut parser = CsvParser::new(&columns, HEADER).expect("valid");
    let mut batch = Batch::new();
    batch.chunk_mut().set(&"t".into(), None, 100, b"3,1,2\n");
    assert!(matches!(
        parser.parse(&mut batch),
        Err(Error::HeaderNotAtStart { offset: 100, .. })
    ));
    parser.read_header(&"t".into(), b"c,a,b\n").expect("fits");
    parser.parse(&mut batch).expect("header known");
    assert_eq!(render_records(&batch), ["?:1|2|3"]);
}

#[test]
fn config_errors() {
    let columns = schema(&["a"]);
    for delimiter in [b'"', b'\n', b'\r'] {
        let config = CsvConfig {
            delimiter,
            ..STRICT
        };
        assert!(matches!(
            CsvParser::new(&columns, config),
            Err(Error::Delimiter { .. })
        ));
    }
    assert!(matches!(
        CsvParser::new(&schema(&[]), STRICT),
        Err(Error::EmptySchema)
    ));
}

#[test]
fn fields_max_is_a_reject() {
    let columns = schema(&["a", "b", "c"]);
    let mut line = ",".repeat(FIELDS_MAX);
    line.push('\n');
    line.push_str("a,b,c\n");
    for path in paths() {
        let mut parser = CsvParser::new(&columns, LENIENT).expect("valid");
        let mut batch = Batch::new();
        load(&mut batch, line.as_bytes());
        parse_on(&mut parser, &mut batch, path).expect("no header");
        assert_eq!(
            render_rejects(&batch),
            [format!("1:{FIELDS_MAX}:FieldsMax")]
        );
        assert_eq!(render_records(&batch), ["2:a|b|c"]);
    }
}

#[test]
fn projection_keeps_limits() {
    let names = ["a", "b", "c"];
    // More than FIELDS_MAX fields past the projection, a record longer
    // than RECORD_BYTES_MAX past it, a short and a long line: each is
    // rejected as in the full parse.
    let mut input = ",".repeat(FIELDS_MAX + 3);
    input.push('\n');
    input.push_str("a,b,");
    input.push_str(&"x".repeat(RECORD_BYTES_MAX));
    input.push_str("\na\na,b,c,d\na,b,c\n");
    for config in [STRICT, LENIENT] {
        let (full, projections) = projected(input.as_bytes(), config, &names, &[0]);
        for (path, projection) in projections {
            assert_eq!(projection, full, "{path:?}");
        }
        assert_eq!(full.1[..2], ["1:1024:FieldsMax", "2:-:RecordBytesMax"]);
    }
    let (full, _) = projected(input.as_bytes(), STRICT, &names, &[0]);
    assert_eq!(full.0, ["Some(5):a|~|~"]);
    assert_eq!(full.1[2..], ["3:1(b):TooFewFields", "4:3:TooManyFields"]);
}

#[test]
fn counting_crosses_blocks() {
    // Fields past the projection counted over several 64-byte blocks, the
    // newline in each position of a block, with and without a CR.
    let names = ["a", "b", "c", "d"];
    let mut input = String::new();
    for pad in 0..130 {
        let x = "x".repeat(pad);
        input.push_str(&format!("{x},b{x},c,d{x}\n"));
        input.push_str(&format!("{x},{x},c{x},d\r\n"));
        input.push_str(&format!("a,{x},{x},d,{x}\n"));
        input.push_str(&format!("y{x}{}\n", ",".repeat(pad % 7)));
    }
    for config in [STRICT, LENIENT] {
        for keep in [&[][..], &[0], &[1], &[0, 2], &[3], &[0, 1, 2, 3]] {
            let (full, projections) = projected(input.as_bytes(), config, &names, keep);
            assert_eq!(full.0.len() + full.1.len(), 4 * 130);
            for (path, projection) in projections {
                assert_eq!(projection, full, "{path:?} {keep:?}");
            }
        }
    }
}

#[test]
fn rows_of_every_width_class() {
    // Schemas of 1 to 40 columns (rows copied as blocks of 8 or 16 spans,
    // or one by one), records one field short, exact and one long.
    for width in [1usize, 2, 7, 8, 9, 15, 16, 17, 40] {
        let names: Vec<String> = (0..width).map(|c| format!("c{c}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut input = String::new();
        for line in 0..60 {
            let fields = width - 1 + line % 3;
            let row: Vec<String> = (0..fields)
                .map(|f| "v".repeat((line * 7 + f) % 11))
                .collect();
            input.push_str(&row.join(","));
            input.push_str(if line % 4 == 0 { "\r\n" } else { "\n" });
        }
        let keeps = [
            (0..width).collect::<Vec<_>>(),
            vec![0],
            vec![width - 1],
            vec![],
            (0..width).step_by(2).collect(),
        ];
        for config in [STRICT, LENIENT] {
            for keep in &keeps {
                let (full, projections) = projected(input.as_bytes(), config, &names, keep);
                assert!(!full.0.is_empty());
                for (path, projection) in projections {
                    assert_eq!(projection, full, "{width} {path:?} {keep:?}");
                }
            }
        }
    }
}

#[test]
fn scanners_are_forced_and_checked() {
    let mut parser = CsvParser::new(&schema(&["a"]), STRICT).expect("valid");
    assert!(parser.scanner().is_supported());
    assert_eq!(parser.scanner(), Scanner::detect());
    parser.set_scanner(Scanner::Swar);
    assert_eq!(parser.scanner(), Scanner::Swar);
    for scanner in Scanner::ALL {
        if !scanner.is_supported() {
            let result = std::panic::catch_unwind(move || {
                let mut parser = CsvParser::new(&schema(&["a"]), STRICT).expect("valid");
                parser.set_scanner(scanner);
            });
            assert!(result.is_err(), "{scanner:?} accepted but not supported");
        }
    }
}

#[test]
#[should_panic(expected = "column 3 of 3 columns")]
fn projection_outside_the_schema_panics() {
    let mut parser = CsvParser::new(&schema(&["a", "b", "c"]), STRICT).expect("valid");
    parser.project(&[3]);
}

#[test]
fn batches_are_reused_across_chunks() {
    let columns = schema(&["a", "b", "c"]);
    let mut parser = CsvParser::new(&columns, STRICT).expect("valid");
    let mut batch = Batch::new();
    load(&mut batch, "x,\"y\"\"\",z\nbad\n".repeat(100).as_bytes());
    parser.parse(&mut batch).expect("ok");
    assert_eq!((batch.len(), batch.rejects().len()), (100, 100));
    load(&mut batch, b"a,b,c\n");
    parser.parse(&mut batch).expect("ok");
    assert_eq!(render_records(&batch), ["1:a|b|c"]);
    assert!(batch.rejects().is_empty());
}

/// Text made mostly of the bytes the grammar cares about, and runs of
/// plain text (0 to 129 bytes) that move the rest across the scanners'
/// 16, 32 and 64-byte blocks.
fn csvish() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(vec![b',']), 3 => Just(vec![b'\n']), 2 => Just(vec![b'"']),
            1 => Just(vec![b'\r']), 6 => Just(vec![b'a']), 2 => Just(vec![b'b']),
            1 => any::<u8>().prop_map(|b| vec![b]),
            1 => (0..130usize).prop_map(|n| vec![b'x'; n]),
        ],
        0..300,
    )
    .prop_map(|tokens| tokens.concat())
}

/// The same, without quotes: lines the fast path takes whole.
fn plain() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(vec![b',']), 3 => Just(vec![b'\n']), 1 => Just(vec![b'\r']),
            6 => Just(vec![b'a']), 1 => Just(vec![b'b']),
            1 => (0..130usize).prop_map(|n| vec![b'x'; n]),
            1 => (0..70usize).prop_map(|n| vec![b','; n]),
        ],
        0..300,
    )
    .prop_map(|tokens| tokens.concat())
}

/// Records and rejects, rendered.
type Rendered = (Vec<String>, Vec<String>);

/// `input` parsed on every path ([`paths`]), the general path first.
fn all_paths(input: &[u8], config: CsvConfig) -> Vec<(Path, Rendered)> {
    let columns = schema(&["a", "b", "c"]);
    paths()
        .into_iter()
        .map(|path| {
            let mut parser = CsvParser::new(&columns, config).expect("valid");
            let mut batch = Batch::new();
            load(&mut batch, input);
            let rendered = match parse_on(&mut parser, &mut batch, path) {
                Ok(()) => (render_records(&batch), render_rejects(&batch)),
                Err(e) => (vec![e.to_string()], Vec::new()),
            };
            (path, rendered)
        })
        .collect()
}

/// Every fast path gives the general path's records and rejects.
fn assert_paths_agree(input: &[u8], config: CsvConfig) -> std::result::Result<(), TestCaseError> {
    let results = all_paths(input, config);
    let (_, general) = &results[0];
    for (path, fast) in &results[1..] {
        prop_assert_eq!(fast, general, "{:?}", path);
    }
    Ok(())
}

/// Records with the columns outside `keep` shown as `~`, and rejects.
fn render_kept(batch: &Batch, keep: &[usize]) -> Rendered {
    let records = batch
        .records()
        .map(|record| {
            let fields: Vec<String> = record
                .fields()
                .enumerate()
                .map(|(column, field)| match field {
                    Some(bytes) if keep.contains(&column) => bytes.escape_ascii().to_string(),
                    _ => "~".to_owned(),
                })
                .collect();
            format!("{:?}:{}", record.line(), fields.join("|"))
        })
        .collect();
    (records, render_rejects(batch))
}

/// `input` parsed in full on the general path with the columns outside
/// `keep` masked, then projected to `keep` on every path ([`paths`]);
/// each with the columns outside `keep` masked.
fn projected(
    input: &[u8],
    config: CsvConfig,
    names: &[&str],
    keep: &[usize],
) -> (Rendered, Vec<(Path, Rendered)>) {
    let columns = schema(names);
    let run = |project: bool, path: Path| {
        let mut parser = CsvParser::new(&columns, config).expect("valid");
        if project {
            parser.project(keep);
        }
        let mut batch = Batch::new();
        load(&mut batch, input);
        match parse_on(&mut parser, &mut batch, path) {
            Ok(()) => {
                if project {
                    // Columns outside the projection are absent, not merely
                    // masked by the rendering.
                    for record in batch.records() {
                        for (column, field) in record.fields().enumerate() {
                            assert!(keep.contains(&column) || field.is_none());
                        }
                    }
                }
                render_kept(&batch, keep)
            }
            Err(e) => (vec![e.to_string()], Vec::new()),
        }
    };
    let projections = paths()
        .into_iter()
        .map(|path| (path, run(true, path)))
        .collect();
    (run(false, None), projections)
}

/// Lines for the projection: the grammar's bytes, runs of text long
/// enough to take several SWAR words, and now and then a long field.
fn csv_lines() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        6 => Just(&b","[..]), 4 => Just(&b"\n"[..]), 1 => Just(&b"\r\n"[..]),
        1 => Just(&b"\""[..]), 1 => Just(&b"\r"[..]), 6 => Just(&b"ab"[..]),
        2 => Just(&b"0123456789abc"[..]),
        1 => Just(&b"a much longer field of text, with a comma, to cross words"[..]),
    ];
    proptest::collection::vec(token, 0..120).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A projected parse keeps the needed fields and the rejects of the
    /// full parse, on both paths, with or without a header (in any column
    /// order).
    #[test]
    fn projection_equals_full_parse(
        body in csv_lines(),
        keep in proptest::sample::subsequence(vec![0usize, 1, 2, 3, 4], 0..=5),
        lenient in any::<bool>(),
        header in proptest::option::of(Just(vec!["a", "b", "c", "d", "e"]).prop_shuffle()),
    ) {
        let base = if lenient { LENIENT } else { STRICT };
        let mut input = Vec::new();
        if let Some(names) = &header {
            input.extend_from_slice(names.join(",").as_bytes());
            input.push(b'\n');
        }
        input.extend_from_slice(&body);
        let config = CsvConfig { header: header.is_some(), ..base };
        let (full, projections) = projected(&input, config, &["a", "b", "c", "d", "e"], &keep);
        for (path, projection) in projections {
            prop_assert_eq!(&projection, &full, "{:?}", path);
        }
    }

    #[test]
    fn fast_path_equals_general_path(
        input in csvish(),
        lenient in any::<bool>(),
        header in any::<bool>(),
        delimiter in prop_oneof![Just(b','), Just(b'\t'), Just(0u8), Just(b'x')],
    ) {
        let config = CsvConfig { header, delimiter, ..if lenient { LENIENT } else { STRICT } };
        assert_paths_agree(&input, config)?;
    }

    #[test]
    fn fast_path_equals_general_path_without_quotes(input in plain(), lenient in any::<bool>()) {
        assert_paths_agree(&input, if lenient { LENIENT } else { STRICT })?;
    }

    #[test]
    fn any_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..400), header in any::<bool>()) {
        assert_paths_agree(&input, CsvConfig { header, ..LENIENT })?;
    }

    /// Records plus rejects account for every non-blank line when nothing
    /// is quoted.
    #[test]
    fn every_line_is_a_record_or_a_reject(input in plain()) {
        let results = all_paths(&input, STRICT);
        let fast = &results.last().expect("the general path at least").1;
        let lines = input
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty() && *line != b"\r")
            .count();
        prop_assert_eq!(fast.0.len() + fast.1.len(), lines);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Inputs long enough that the fast path's rows outgrow their
    /// headroom in the batch several times (it writes spans straight into
    /// the batch, past its end), with bad and blank lines among them:
    /// the paths agree, projected or not.
    #[test]
    fn long_inputs_agree(
        body in csv_lines(),
        repeats in 40usize..80,
        keep in proptest::sample::subsequence(vec![0usize, 1, 2, 3, 4], 0..=5),
        lenient in any::<bool>(),
    ) {
        let line = b"alpha,b,c,delta,e\n";
        let mut input = Vec::new();
        for n in 0..repeats {
            for _ in 0..n % 7 * 20 {
                input.extend_from_slice(line);
            }
            input.extend_from_slice(&body);
            input.push(b'\n');
        }
        let config = if lenient { LENIENT } else { STRICT };
        assert_paths_agree(&input, config)?;
        let (full, projections) = projected(&input, config, &["a", "b", "c", "d", "e"], &keep);
        for (path, projection) in projections {
            prop_assert_eq!(&projection, &full, "{:?}", path);
        }
    }
}
