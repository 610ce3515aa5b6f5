//! What making a SQL answer's rows costs, apart from merging: the time
//! of `Prepared::finish` over one query's merged groups, for the row
//! shapes the SQL benchmark asks (bench/README.md, "SQL over summaries").
//!
//! ```text
//! cargo run --release -p cardinal-engine --example sql_rows
//! ```
//!
//! Folds 2,000,000 generated records (30 days, 50 states, a million
//! users, uniform revenue) into `day, state` groups of `hll(user_id)` and
//! `approx_quantile(revenue, 0.5, 0.9, 0.99)` (1,500 groups), then per
//! query merges them once into 50 rows by state and times `finish` on
//! them: the best of 5 rounds of 20, per call.

use std::time::Instant;

use cardinal_engine::sql::Prepared;
use cardinal_event::{Timestamp, Value};
use cardinal_rollup::{Input, Limits, Rollup};
use cardinal_route::Plan;

const SCHEMA: &str = "CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, state TEXT, revenue DOUBLE) \
     WITH (time = 'ts');
     CREATE SUMMARY t AS SELECT date_trunc('day', ts) AS day, state, hll(user_id) AS users,
       approx_quantile(revenue, 0.5, 0.9, 0.99) AS rev FROM s GROUP BY day, state;";

const QUERIES: [&str; 3] = [
    "SELECT state, users, users_lower, users_upper FROM t GROUP BY state",
    "SELECT state, rev_p99, rev_p99_lower, rev_p99_upper FROM t GROUP BY state",
    "SELECT state, rev_p50, rev_p90, rev_p99 FROM t GROUP BY state",
];

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn main() {
    let plan = Plan::compile(SCHEMA).expect("the schema compiles");
    let shape = cardinal_engine::shape_of(&plan.summaries[0]).expect("shape");
    let mut rollup = Rollup::new(shape, Limits::default()).expect("rollup");
    let mut key = Vec::new();
    for i in 0..2_000_000u64 {
        let h = splitmix(i);
        key.clear();
        let state = format!("s{}", h % 50);
        cardinal_route::encode_key_value(Value::Text(state.as_bytes()), &mut key);
        let day = Timestamp(i64::try_from((h >> 20) % 30 * 86_400_000).expect("a day"));
        let id = (h >> 8) & 0xf_ffff;
        let user = Input::Key {
            hash: cardinal_sketch::hash::user_id(id),
            id: Some(id),
            text: b"",
        };
        #[allow(clippy::cast_precision_loss)]
        let revenue = (h >> 11) as f64 / (1u64 << 53) as f64;
        rollup.fold(day, &key, &[user, Input::Number(revenue)]);
    }
    println!("{} groups", rollup.group_count());
    for query in QUERIES {
        let prepared = Prepared::new(&plan, query).expect("the query prepares");
        let (partial, matched) = prepared.partial(&rollup).expect("merged");
        let mut best = f64::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            for _ in 0..20 {
                std::hint::black_box(prepared.finish(&partial, matched).expect("rows"));
            }
            best = best.min(started.elapsed().as_secs_f64() / 20.0);
        }
        println!("{:.3} ms  {query}", best * 1e3);
    }
}
