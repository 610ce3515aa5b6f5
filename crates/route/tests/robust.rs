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
