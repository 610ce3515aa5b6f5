//! Parsing never panics: random text, random mutations of valid
//! declarations, and every input the `route_sql` fuzz target ever crashed
//! on (kept in `tests/fuzz/route_sql/`) either compile or return an error
//! that points inside the text.

use std::path::Path;

use cardinal_route::{Error, Plan};
use proptest::prelude::*;

/// Valid scripts to mutate: the plan cases' inputs.
fn seeds() -> Vec<String> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/plans.txt"),
    )
    .expect("plan cases");
    text.split("\n=== ")
        .skip(1)
        .filter_map(|case| {
            let (_, rest) = case.split_once('\n')?;
            Some(rest[..rest.find("\n--- ")?].to_owned())
        })
        .collect()
}

const FRAGMENTS: &[&str] = &[
    "(",
    ")",
    ",",
    ";",
    "'",
    "\"",
    "*",
    "-",
    "--",
    "/*",
    "NULL",
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "AS",
    "IN (",
    "IS NOT NULL",
    "date_trunc('day', ",
    "count(*)",
    "hll(",
    "é",
    "\t",
    "\n",
    "9223372036854775808",
    "1e999",
    "CREATE",
    "STREAM",
    "SUMMARY",
    "ATTRIBUTION",
    "PATH",
    "MODEL",
    "LOOKBACK",
    "DAYS",
    "HALF LIFE",
    "BY user_id",
    "TOUCH WHERE",
    "CONVERSION WHERE",
    "VALUE",
    "CAMPAIGN",
    "SITE",
    "substring(",
    " FROM ",
    " FOR ",
    "''",
    "\u{0}",
];

/// Checks the one property: no panic, and an error's position is inside
/// the text.
fn check(sql: &str) {
    match Plan::compile(sql) {
        Ok(_) => {}
        Err(Error::At { line, column, .. }) => {
            let lines = sql.lines().count().max(1) as u64;
            assert!(
                line >= 1 && line <= lines + 1,
                "line {line} of {lines}: {sql:?}"
            );
            assert!(column >= 1, "{sql:?}");
        }
        Err(other) => panic!("unexpected error {other} for {sql:?}"),
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
}

fn char_boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &mut String, mutation: &Mutation) {
    match *mutation {
        Mutation::Delete(at, length) => {
            let from = char_boundary(text, at);
            let to = char_boundary(text, (from + length % 16).min(text.len())).max(from);
            if to > from {
                text.replace_range(from..to, "");
            }
        }
        Mutation::Insert(at, fragment) => {
            let at = char_boundary(text, at);
            text.insert_str(at, FRAGMENTS[fragment % FRAGMENTS.len()]);
        }
        Mutation::Duplicate(at, length) => {
            let from = char_boundary(text, at);
            let to = char_boundary(text, (from + length % 32).min(text.len())).max(from);
            let piece = text[from..to].to_owned();
            text.insert_str(to, &piece);
        }
        Mutation::Truncate(at) => {
            let at = char_boundary(text, at);
            text.truncate(at);
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Delete(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Duplicate(a, b)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(sql in "\\PC{0,200}") {
        check(&sql);
    }

    #[test]
    fn sql_shaped_text_never_panics(parts in proptest::collection::vec(0..FRAGMENTS.len(), 0..40)) {
        let sql: String = parts.iter().map(|&i| FRAGMENTS[i]).collect::<Vec<_>>().join(" ");
        check(&sql);
    }

    #[test]
    fn mutated_declarations_never_panic(seed in any::<usize>(), mutations in proptest::collection::vec(mutation(), 1..6)) {
        let seeds = seeds();
        let mut sql = seeds[seed % seeds.len()].clone();
        for m in &mutations {
            apply(&mut sql, m);
        }
        check(&sql);
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    for open in ["(", "NOT ", "- ", "lower(", "coalesce("] {
        let depth = 10_000;
        let sql = format!(
            "CREATE STREAM s (n BIGINT); CREATE SUMMARY x AS SELECT count(*) FROM s WHERE {}n",
            open.repeat(depth)
        );
        assert!(Plan::compile(&sql).is_err(), "{open}");
    }
}

#[test]
fn over_long_scripts_are_refused() {
    let sql = " ".repeat(cardinal_route::DECLARATION_BYTES_MAX + 1);
    assert!(matches!(Plan::compile(&sql), Err(Error::TooLong { .. })));
}

/// Inputs the fuzz target found, replayed (regression files of
/// `fuzz/fuzz_targets/route_sql.rs`).
#[test]
fn fuzz_regressions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/route_sql");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("regression folder") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("readable");
        if let Ok(sql) = std::str::from_utf8(&bytes) {
            check(sql);
        }
        count += 1;
    }
    assert!(count > 0, "no regression inputs in {}", dir.display());
}

/// The stack the refusals and the walks over compiled plans run on: far
/// below the 8 MiB of a main thread and the 2 MiB of a spawned one, so that
/// passing here shows the bound on expression depth, not the stack's size,
/// keeps them safe.
const SMALL_STACK_BYTES: usize = 256 * 1024;

/// The stack parsing runs on at the depth limit: sqlparser's recursive
/// descent spends up to about 16 KiB a level on nested calls (47 nested
/// `coalesce(` parsed in 768 KiB and overflowed 640 KiB, dev profile,
/// x86-64, 2026-11-27), so it gets more than the walks over plans, and
/// still far less than a main thread.
const PARSE_STACK_BYTES: usize = 1024 * 1024;

/// Runs `f` on a thread with a stack of `bytes`. A stack overflow there
/// aborts the whole test binary, so a failure is loud.
fn on_stack<T: Send + 'static>(bytes: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(bytes)
        .spawn(f)
        .expect("spawn a thread")
        .join()
        .expect("no panic on the small stack")
}

const DEEP_STREAM: &str = "CREATE STREAM s (v BIGINT, t TEXT, ts TIMESTAMP) WITH (time = 'ts');\n";

/// `term` written `count` times, joined by `operator`.
fn chain(term: &str, operator: &str, count: usize) -> String {
    vec![term; count].join(operator)
}

fn summary(body: &str) -> String {
    format!("{DEEP_STREAM}CREATE SUMMARY x AS SELECT {body};")
}

/// Left-deep chains (which sqlparser builds in a loop, not by recursion)
/// as long as the script limit allows, in every place an expression is
/// read, and nesting far past the limit, are refused with a position, on a
/// small stack: parsing, the drop of what sqlparser built, and any walk
/// over it stay bounded. Before chains were counted, `sum(v+v+...)` of
/// 8,000 terms overflowed a worker's stack and 16,000 ANDs the main
/// thread's.
#[test]
fn long_chains_are_refused_on_a_small_stack() {
    let whole = cardinal_route::DECLARATION_BYTES_MAX / 2 - 200;
    let cases = [
        (
            "sum of 8,000 terms",
            summary(&format!("sum({}) FROM s", chain("v", "+", 8_000))),
        ),
        (
            "16,000 ANDs",
            summary(&format!(
                "count(*) FROM s WHERE {}",
                chain("v = 1", " AND ", 16_000)
            )),
        ),
        (
            "a chain as long as the script limit",
            summary(&format!("sum({}) FROM s", chain("v", "+", whole))),
        ),
        // Chains just under EXPR_OPERATORS_MAX: sqlparser builds them whole,
        // then drops them (its error, or our depth check's).
        (
            "a chain under the operator bound",
            summary(&format!(
                "sum({}) FROM s",
                chain("v", "+", cardinal_route::EXPR_OPERATORS_MAX - 8)
            )),
        ),
        (
            "an unclosed call: sqlparser fails after building the chain",
            summary(&format!("sum({} FROM s", chain("v", "*", 8_000))),
        ),
        (
            "a chain of IS NULL",
            summary(&format!(
                "count(*) FROM s WHERE v{}",
                " IS NULL".repeat(8_000)
            )),
        ),
        (
            "a key",
            summary(&format!(
                "{} AS k, count(*) FROM s GROUP BY k",
                chain("t", " || ", 8_000)
            )),
        ),
        (
            "GROUP BY",
            summary(&format!(
                "count(*) FROM s GROUP BY {}",
                chain("v", "-", 8_000)
            )),
        ),
        (
            "chains in nested parentheses",
            summary(&format!(
                "count(*) FROM s WHERE {}v{}",
                format!("({} OR ", chain("v = 1", " OR ", 200)).repeat(40),
                ")".repeat(40)
            )),
        ),
        (
            "an attribution's condition",
            format!(
                "{DEEP_STREAM}CREATE ATTRIBUTION a ON s BY v MODEL linear LOOKBACK 7 DAYS TOUCH WHERE {} CONVERSION WHERE t = 'c';",
                chain("t = 'x'", " OR ", 8_000)
            ),
        ),
        (
            "10,000 NOTs",
            summary(&format!(
                "count(*) FROM s WHERE {}v = 1",
                "NOT ".repeat(10_000)
            )),
        ),
        (
            "10,000 minus signs",
            summary(&format!("sum({}v) FROM s", "- ".repeat(10_000))),
        ),
        (
            "10,000 negated calls",
            summary(&format!(
                "sum({}v{}) FROM s",
                "- coalesce(".repeat(10_000),
                ")".repeat(10_000)
            )),
        ),
        (
            "10,000 subqueries",
            summary(&format!(
                "count(*) FROM s WHERE v = {}1{}",
                "(SELECT ".repeat(10_000),
                ")".repeat(10_000)
            )),
        ),
    ];
    for (name, sql) in cases {
        assert!(sql.len() <= cardinal_route::DECLARATION_BYTES_MAX, "{name}");
        let error = on_stack(SMALL_STACK_BYTES, move || {
            Plan::compile(&sql).map(|_| ()).map_err(|e| e.to_string())
        });
        let Err(error) = error else {
            panic!("{name}: compiled");
        };
        assert!(
            error.contains(&format!(
                "nested more than {} levels deep",
                cardinal_route::EXPR_DEPTH_MAX
            )),
            "{name}: {error}"
        );
        assert!(error.starts_with("line "), "{name}: {error}");
    }
    // sqlparser fails on this one after building the chain as deep as the
    // operator bound lets it, and drops what it built.
    let unclosed = summary(&format!(
        "sum({} FROM s",
        chain("v", "+", cardinal_route::EXPR_OPERATORS_MAX - 8)
    ));
    let error = on_stack(SMALL_STACK_BYTES, move || Plan::compile(&unclosed).err());
    assert!(error.is_some());
}

/// The deepest expression of each shape the limit allows compiles, and
/// evaluates, prints, clones and drops on a small stack; one level more is
/// refused. Levels are operators, calls and parentheses; operands are not
/// (see `EXPR_DEPTH_MAX`).
#[test]
fn the_deepest_expressions_run_on_a_small_stack() {
    use cardinal_event::Value;
    use cardinal_route::{Declarations, EXPR_DEPTH_MAX, Scratch};

    /// A shape: its name, the select body at a number of levels, and the
    /// value of its aggregate's argument over the row `v = 1` (the filter,
    /// if any, is true there).
    type Shape = (&'static str, fn(usize) -> String, fn(usize) -> i64);
    let shapes: [Shape; 6] = [
        // sum( is one level, each + one more.
        (
            "a sum of a chain",
            |levels| format!("sum({}) FROM s", chain("v", "+", levels)),
            |levels| i64::try_from(levels).expect("small"),
        ),
        // Each AND is a level, and the last comparison one more.
        (
            "a chain of ANDs",
            |levels| format!("count(*) FROM s WHERE {}", chain("v = 1", " AND ", levels)),
            |_| 0,
        ),
        // Each parenthesis is a level, and the comparison one more.
        (
            "parentheses",
            |levels| {
                format!(
                    "count(*) FROM s WHERE {}v = 1{}",
                    "(".repeat(levels - 1),
                    ")".repeat(levels - 1)
                )
            },
            |_| 0,
        ),
        // Each NOT is a level, and the comparison one more; in pairs, so
        // that the filter stays true.
        (
            "NOTs",
            |levels| {
                format!(
                    "count(*) FROM s WHERE {}v = 1",
                    "NOT NOT ".repeat((levels - 1) / 2)
                )
            },
            |_| 0,
        ),
        // sum( and each minus sign on a column are levels.
        (
            "minus signs",
            |levels| format!("sum({}v) FROM s", "- - ".repeat((levels - 1) / 2)),
            |_| 1,
        ),
        // sum( and each coalesce( are levels.
        (
            "calls",
            |levels| {
                format!(
                    "sum({}v{}) FROM s",
                    "coalesce(".repeat(levels - 1),
                    ")".repeat(levels - 1)
                )
            },
            |_| 1,
        ),
    ];
    for (name, body, value) in shapes {
        // The NOT and minus shapes come in pairs of levels.
        let levels = if matches!(name, "NOTs" | "minus signs") {
            1 + 2 * ((EXPR_DEPTH_MAX - 1) / 2)
        } else {
            EXPR_DEPTH_MAX
        };
        let deepest = summary(&body(levels));
        let compiled = on_stack(PARSE_STACK_BYTES, move || {
            let plan = Plan::compile(&deepest).map_err(|e| format!("{name}: {e}"))?;
            let declarations = Declarations::parse(&deepest).map_err(|e| format!("{name}: {e}"))?;
            assert!(!format!("{:?}", declarations.clone()).is_empty());
            Ok::<_, String>((plan, declarations))
        });
        let (plan, declarations) = compiled.expect("the deepest expression compiles");
        let want = value(levels);
        on_stack(SMALL_STACK_BYTES, move || {
            let copy = plan.clone();
            assert!(!format!("{copy:?}").is_empty());
            let summary = &plan.summaries[0];
            for e in summary.filter.iter().chain(&summary.arguments) {
                assert!(e.depth() <= EXPR_DEPTH_MAX, "{name}");
            }
            let row: &[&str] = &["1", "a", "2026-11-04T00:00:00Z"];
            let mut scratch = Scratch::new();
            if let Some(filter) = &summary.filter {
                assert_eq!(
                    filter.eval(row, &mut scratch),
                    Ok(Value::Bool(true)),
                    "{name}"
                );
            }
            for argument in &summary.arguments {
                assert_eq!(
                    argument.eval(row, &mut scratch),
                    Ok(Value::Int(want)),
                    "{name}"
                );
            }
            drop((plan, copy, declarations));
        });
        let deeper = summary(&body(levels + 2));
        let refused = on_stack(PARSE_STACK_BYTES, move || {
            Plan::compile(&deeper)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let Err(error) = refused else {
            panic!("{name}: {} levels compiled", levels + 2);
        };
        assert!(
            error.contains(&format!("nested more than {EXPR_DEPTH_MAX} levels deep")),
            "{name}: {error}"
        );
    }
}

/// Pieces that each nest what follows them some known number of levels:
/// (opening text, closing text, levels). What follows an operator is in
/// parentheses, so that precedence cannot take it out from under it.
const NESTERS: &[(&str, &str, usize)] = &[
    ("(", ")", 1),
    ("- (", ")", 2),
    ("coalesce(", ")", 1),
    ("- coalesce(", ")", 2),
    ("v + (", ")", 2),
    ("(v * (", "))", 3),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Nesting of any mix of parentheses, prefix operators, calls and
    /// chains is refused exactly when its tree has more than
    /// `EXPR_DEPTH_MAX` levels, counted from how it was written, and what
    /// compiles evaluates; all on a stack far below a main thread's.
    #[test]
    fn depth_is_refused_exactly_past_the_limit(
        nesters in proptest::collection::vec(0..NESTERS.len(), 0..60),
        chain_operators in 0usize..60,
    ) {
        let open: String = nesters.iter().map(|&i| NESTERS[i].0).collect();
        let close: String = nesters.iter().rev().map(|&i| NESTERS[i].1).collect();
        let innermost = chain("v", " + ", chain_operators + 1);
        let sql = summary(&format!("sum({open}{innermost}{close}) FROM s"));
        // sum( is one level, and each operator of the innermost chain one.
        let levels = 1 + nesters.iter().map(|&i| NESTERS[i].2).sum::<usize>() + chain_operators;
        let outcome = on_stack(PARSE_STACK_BYTES, move || {
            let plan = Plan::compile(&sql).map_err(|e| e.to_string())?;
            let mut scratch = cardinal_route::Scratch::new();
            let row: &[&str] = &["1", "a", "2026-11-04T00:00:00Z"];
            for argument in &plan.summaries[0].arguments {
                assert!(argument.depth() < levels.max(1));
                argument.eval(row, &mut scratch).map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        });
        let max = cardinal_route::EXPR_DEPTH_MAX;
        if levels > max {
            let error = outcome.expect_err("deeper than the limit");
            prop_assert!(error.contains(&format!("nested more than {max} levels deep")), "{levels} levels: {error}");
        } else {
            prop_assert_eq!(outcome, Ok(()), "{} levels", levels);
        }
    }
}
