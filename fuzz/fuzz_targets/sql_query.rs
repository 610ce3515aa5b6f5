//! SQL queries from arbitrary bytes, over a small live summary: planning
//! must return a plan or an error, never panic (nor exhaust the stack);
//! a plan must run to rows or an error, every row as wide as its columns,
//! and the same query twice gives the same rows.

#![no_main]

use std::sync::OnceLock;

use cardinal_engine::sql::Prepared;
use cardinal_event::Timestamp;
use cardinal_rollup::{Input, Limits, Rollup};
use cardinal_route::{Plan, Value, encode_key_value};
use libfuzzer_sys::fuzz_target;

const SCHEMA: &str = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, state TEXT, revenue DOUBLE) WITH (time = 'ts');
CREATE SUMMARY reach AS SELECT date_trunc('hour', ts) AS hour, state, count(*) AS events,
  sum(revenue) AS revenue, min(ts) AS first_seen, hll(user_id) AS users,
  exact_distinct(user_id) AS exact_users, approx_quantile(revenue, 0.5, 0.99) AS rev,
  topk(state, 2) AS top, theta(user_id) AS th
  FROM s GROUP BY hour, state;";

fn fixture() -> &'static (Plan, Rollup) {
    static FIXTURE: OnceLock<(Plan, Rollup)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let plan = Plan::compile(SCHEMA).expect("plan");
        let shape = cardinal_engine::shape_of(&plan.summaries[0]).expect("shape");
        let mut rollup = Rollup::new(shape, Limits::default()).expect("rollup");
        for i in 0..200u64 {
            let state: &[u8] = [b"CA".as_slice(), b"TX", b"NY"][(i % 3) as usize];
            let mut key = Vec::new();
            encode_key_value(Value::Text(state), &mut key);
            let hash = cardinal_sketch::hash::user_id(i % 50);
            let user = Input::Key { hash, id: Some(i % 50), text: b"" };
            let revenue = Input::Number(i as f64 / 7.0);
            let inputs = [
                Input::Null,
                revenue,
                Input::Int(i64::try_from(i).expect("small") * 60_000),
                user,
                user,
                revenue,
                Input::Key { hash: cardinal_sketch::hash::bytes(state, 0), id: None, text: state },
                user,
            ];
            rollup.fold(Timestamp((i % 6) as i64 * 3_600_000), &key, &inputs);
        }
        (plan, rollup)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (plan, rollup) = fixture();
    let Ok(prepared) = Prepared::new(plan, text) else {
        return;
    };
    let columns = prepared.columns();
    let Ok(first) = prepared.run(rollup) else {
        return;
    };
    for row in &first.table.rows {
        assert_eq!(row.len(), columns.len());
    }
    let again = prepared.run(rollup).expect("ran once");
    assert_eq!(first.table.json(), again.table.json());
});
