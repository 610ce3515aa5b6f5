//! Declarations from arbitrary bytes: compiling must return a plan or an
//! error, never panic (nor exhaust the stack); a plan that compiles holds
//! no expression deeper than `EXPR_DEPTH_MAX`, no two outputs of one name,
//! and must route records of any shape without panicking. Crash inputs go to
//! `crates/route/tests/fuzz/route_sql/`, replayed by `tests/robust.rs`.

#![no_main]

use cardinal_route::{EXPR_DEPTH_MAX, Plan, Routed, Scratch};
use libfuzzer_sys::fuzz_target;

/// Field texts that are valid for some column type and malformed for the
/// others.
const FIELDS: &[&str] = &[
    "",
    "0",
    "-9223372036854775808",
    "2.5",
    "NaN",
    "true",
    "2026-11-04T13:45:59Z",
    "héllo",
];

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(plan) = Plan::compile(sql) else {
        return;
    };
    // Names become file names: every name of a plan is a safe one.
    let names = plan.streams.iter().map(|s| &s.name);
    let names = names.chain(plan.summaries.iter().map(|s| &s.name));
    for name in names.chain(plan.attributions.iter().map(|a| &a.name)) {
        assert_eq!(cardinal_route::check_name(name), Ok(()), "{name:?}");
    }
    let mut scratch = Scratch::new();
    let mut routed = Routed::default();
    for summary in &plan.summaries {
        for e in summary
            .filter
            .iter()
            .chain(&summary.dimensions)
            .chain(&summary.arguments)
        {
            assert!(e.depth() <= EXPR_DEPTH_MAX);
        }
        for (i, output) in summary.outputs.iter().enumerate() {
            assert!(
                !summary.outputs[..i]
                    .iter()
                    .any(|o| o.name.eq_ignore_ascii_case(&output.name))
            );
        }
        let width = summary.schema.columns.len();
        for shift in 0..FIELDS.len() {
            let row: Vec<&str> = (0..width).map(|i| FIELDS[(i + shift) % FIELDS.len()]).collect();
            let _ = summary.route(row.as_slice(), &mut scratch, &mut routed);
        }
    }
});
