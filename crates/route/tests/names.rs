//! Names of streams, summaries and attributions become file names: any
//! name the compiler accepts is one safe path component, and two accepted
//! names never name one file.

use cardinal_route::{NAME_CHARS_MAX, Plan, check_name};
use proptest::prelude::*;

/// A script declaring a stream and two summaries with the given names,
/// quoted (so any text reaches the compiler as a name).
fn script(first: &str, second: &str) -> String {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    format!(
        "CREATE STREAM s (a TEXT);\nCREATE SUMMARY {} AS SELECT count(*) FROM s;\nCREATE SUMMARY {} AS SELECT count(*) FROM s;",
        quote(first),
        quote(second)
    )
}

proptest! {
    #[test]
    fn accepted_names_are_single_distinct_file_names(
        first in "[a-zA-Z0-9_./\\\\ -]{0,6}|.{0,4}",
        second in "[a-zA-Z0-9_./\\\\ -]{0,6}|.{0,4}",
    ) {
        if let Ok(plan) = Plan::compile(&script(&first, &second)) {
            let names: Vec<&str> = plan.summaries.iter().map(|s| s.name.as_str()).collect();
            prop_assert_eq!(names.len(), 2);
            for name in &names {
                prop_assert_eq!(check_name(name), Ok(()));
                prop_assert!(!name.contains(['/', '\\', '.', '\0']));
                prop_assert!(!name.is_empty() && name.len() <= NAME_CHARS_MAX);
                let mut components = std::path::Path::new(name).components();
                prop_assert!(matches!(components.next(), Some(std::path::Component::Normal(_))));
                prop_assert!(components.next().is_none());
            }
            prop_assert!(!names[0].eq_ignore_ascii_case(names[1]));
        }
    }
}

#[test]
fn the_rules_match_the_limit() {
    let longest = "n".repeat(NAME_CHARS_MAX);
    assert!(Plan::compile(&script(&longest, "b")).is_ok());
    let longer = "n".repeat(NAME_CHARS_MAX + 1);
    assert!(Plan::compile(&script(&longer, "b")).is_err());
    // A NUL in a quoted name is refused when the script compiles.
    assert!(Plan::compile(&script("a\0b", "b")).is_err());
}
