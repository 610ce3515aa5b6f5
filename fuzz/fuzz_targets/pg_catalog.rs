//! The PostgreSQL front end's catalog answers (information_schema,
//! pg_catalog, SHOW, constant selects) from arbitrary text: an answer,
//! a refusal, or "the planner's", never a panic.

#![no_main]

use std::sync::OnceLock;

use cardinal_route::Plan;
use cardinal_server::net::pg::fuzzing::catalog;
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, state TEXT, revenue DOUBLE) WITH (time = 'ts');
CREATE SUMMARY reach AS SELECT date_trunc('day', ts) AS day, state, count(*) AS events,
  hll(user_id) AS users, approx_quantile(revenue, 0.5) AS rev FROM s GROUP BY day, state;";

fuzz_target!(|data: &[u8]| {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    let plan = PLAN.get_or_init(|| Plan::compile(SCHEMA).expect("plan"));
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = catalog(plan, text);
    assert_eq!(first, catalog(plan, text), "the same answer twice");
});
