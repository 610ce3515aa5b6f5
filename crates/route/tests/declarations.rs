//! Declarations as data: every case in `tests/cases/*.txt` is a script and
//! either the plan it compiles to (in the compact form `describe` prints)
//! or the exact error text, caret included.
//!
//! A case is:
//!
//! ```text
//! === a name
//! CREATE STREAM ...;
//! --- plan            (or: --- error)
//! the expected text
//! ```
//!
//! Lines starting with `#` between cases are comments. Run with
//! `ROUTE_BLESS=1` to rewrite the expected texts from what the code does
//! now, then review the diff.

use std::fmt::Write as _;
use std::path::Path;

use cardinal_route::{AggregateKind, Expr, Literal, OutputSource, Plan, Schema};

struct Case {
    name: String,
    sql: String,
    kind: String,
    expected: String,
}

fn read_cases(text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for chunk in text.split("\n=== ").skip(1) {
        let (name, rest) = chunk.split_once('\n').expect("a case has a name line");
        let marker = rest
            .find("\n--- ")
            .unwrap_or_else(|| panic!("case {name}: no --- line"));
        let sql = &rest[..marker];
        let after = &rest[marker + 5..];
        let (kind, expected) = after.split_once('\n').unwrap_or((after, ""));
        cases.push(Case {
            name: name.trim().to_owned(),
            sql: sql.to_owned(),
            kind: kind.trim().to_owned(),
            expected: expected.trim_end().to_owned(),
        });
    }
    cases
}

fn write_cases(header: &str, cases: &[Case]) -> String {
    let mut out = header.trim_end().to_owned();
    out.push('\n');
    for case in cases {
        let _ = write!(
            out,
            "\n=== {}\n{}\n--- {}\n{}\n",
            case.name, case.sql, case.kind, case.expected
        );
    }
    out
}

fn expr(e: &Expr, schema: &Schema) -> String {
    let column = |i: usize| schema.columns[i].name.clone();
    match e {
        Expr::Column { index, .. } => column(*index),
        Expr::Literal(Literal::Text(t)) => format!("'{}'", String::from_utf8_lossy(t)),
        Expr::Literal(Literal::Time(t)) => format!("TIMESTAMP '{t}'"),
        Expr::Literal(Literal::Int(i)) => i.to_string(),
        Expr::Literal(Literal::Float(f)) => format!("{f:?}"),
        Expr::Literal(Literal::Bool(b)) => b.to_string(),
        Expr::Literal(Literal::Null) => "NULL".into(),
        Expr::Not(a) => format!("NOT {}", expr(a, schema)),
        Expr::Neg(a) => format!("-{}", expr(a, schema)),
        Expr::And(a, b) => format!("({} AND {})", expr(a, schema), expr(b, schema)),
        Expr::Or(a, b) => format!("({} OR {})", expr(a, schema), expr(b, schema)),
        Expr::Compare(op, a, b) => format!("({} {op:?} {})", expr(a, schema), expr(b, schema)),
        Expr::Arith(op, a, b) => format!("({} {op:?} {})", expr(a, schema), expr(b, schema)),
        Expr::IsNull { expr: a, negated } => format!(
            "({} IS {}NULL)",
            expr(a, schema),
            if *negated { "NOT " } else { "" }
        ),
        Expr::InList {
            expr: a,
            list,
            negated,
        } => format!(
            "({} {}IN [{}])",
            expr(a, schema),
            if *negated { "NOT " } else { "" },
            list.iter()
                .map(|e| expr(e, schema))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Expr::Substr {
            text,
            start,
            length,
        } => format!(
            "substr({}, {}{})",
            expr(text, schema),
            expr(start, schema),
            length
                .as_ref()
                .map(|l| format!(", {}", expr(l, schema)))
                .unwrap_or_default()
        ),
        Expr::Case(op, a) => format!("{op:?}({})", expr(a, schema)),
        Expr::DateTrunc(unit, a) => format!("date_trunc({unit:?}, {})", expr(a, schema)),
        Expr::TimeBucket { width, expr: a } => {
            format!("time_bucket('{width}', {})", expr(a, schema))
        }
        Expr::Math(op, a) => format!("{op:?}({})", expr(a, schema)),
        Expr::Coalesce(list) => format!(
            "coalesce({})",
            list.iter()
                .map(|e| expr(e, schema))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn describe(plan: &Plan) -> String {
    let mut out = String::new();
    for s in &plan.streams {
        if let Some(a) = s.credit_of {
            let _ = writeln!(
                out,
                "stream {} credit of {} time={:?}",
                s.name,
                plan.attributions[a].name,
                s.time.map(|t| &s.schema.columns[t].name),
            );
            continue;
        }
        let columns: Vec<String> = s
            .schema
            .columns
            .iter()
            .map(|c| format!("{} {:?} [{}]", c.name, c.ty, c.path.join(".")))
            .collect();
        let _ = writeln!(
            out,
            "stream {} {:?} header={} time={:?} delimiter={:?}: {}",
            s.name,
            s.format,
            s.header,
            s.time.map(|t| &s.schema.columns[t].name),
            char::from(s.delimiter),
            columns.join(", ")
        );
    }
    for s in &plan.summaries {
        let schema = &s.schema;
        let reads: Vec<&str> = s
            .reads
            .iter()
            .map(|&i| schema.columns[i].name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "summary {} on {} reads [{}]",
            s.name,
            plan.streams[s.stream].name,
            reads.join(", ")
        );
        if let Some(f) = &s.filter {
            let _ = writeln!(out, "  filter {}", expr(f, schema));
        }
        if let Some(b) = &s.bucket {
            let _ = writeln!(
                out,
                "  bucket {:?} of {}",
                b.unit, schema.columns[b.column].name
            );
        }
        for d in &s.dimensions {
            let _ = writeln!(out, "  dimension {}", expr(d, schema));
        }
        for a in &s.aggregates {
            let arg = a
                .argument
                .map(|i| format!("arg{i} {}", expr(&s.arguments[i], schema)))
                .unwrap_or_else(|| "*".into());
            let kind = match &a.kind {
                AggregateKind::Quantiles { k, ranks } => format!("Quantiles k={k} ranks={ranks:?}"),
                other => format!("{other:?}"),
            };
            let _ = writeln!(out, "  aggregate {kind} ({arg})");
        }
        let outputs: Vec<String> = s
            .outputs
            .iter()
            .map(|o| match o.source {
                OutputSource::Bucket => format!("{}=bucket", o.name),
                OutputSource::Dimension(i) => format!("{}=d{i}", o.name),
                OutputSource::Aggregate(i) => format!("{}=a{i}", o.name),
            })
            .collect();
        let _ = writeln!(out, "  outputs {}", outputs.join(", "));
    }
    for a in &plan.attributions {
        let schema = &plan.streams[a.stream].schema;
        let _ = writeln!(
            out,
            "attribution {} on {} by {} time {} {:?} lookback {} days credit stream {}",
            a.name,
            plan.streams[a.stream].name,
            schema.columns[a.user].name,
            schema.columns[a.time].name,
            a.model,
            a.lookback_days,
            plan.streams[a.credit_stream].name,
        );
        let _ = writeln!(out, "  touch {}", expr(&a.touch, schema));
        let _ = writeln!(out, "  conversion {}", expr(&a.conversion, schema));
        for (what, e) in [
            ("value", &a.value),
            ("campaign", &a.campaign),
            ("site", &a.site),
        ] {
            if let Some(e) = e {
                let _ = writeln!(out, "  {what} {}", expr(e, schema));
            }
        }
    }
    out.trim_end().to_owned()
}

fn run(file: &Path) {
    let text = std::fs::read_to_string(file).expect("readable cases");
    let header = text.split("\n=== ").next().unwrap_or("");
    let mut cases = read_cases(&text);
    assert!(!cases.is_empty(), "{}: no cases", file.display());
    let bless = std::env::var_os("ROUTE_BLESS").is_some();
    let mut failures = Vec::new();
    for case in &mut cases {
        let (kind, got) = match Plan::compile(&case.sql) {
            Ok(plan) => ("plan", describe(&plan)),
            Err(e) => ("error", e.to_string()),
        };
        if bless {
            case.kind = kind.to_owned();
            case.expected = got;
        } else if case.kind != kind || case.expected != got {
            failures.push(format!(
                "case {}\n--- expected {}\n{}\n--- got {kind}\n{got}\n",
                case.name, case.kind, case.expected
            ));
        }
    }
    if bless {
        std::fs::write(file, write_cases(header, &cases)).expect("writable cases");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn plans() {
    run(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/plans.txt"));
}

#[test]
fn errors() {
    run(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/errors.txt"));
}
