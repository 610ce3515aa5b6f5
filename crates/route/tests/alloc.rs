//! Routing a record allocates nothing once warm: a counting global
//! allocator watches 100,000 records go through a summary that filters,
//! buckets, lowercases and cuts text, and feeds sketches (issue 3, "no heap
//! allocation per event in steady state").

use cardinal_route::{Plan, Routed, Scratch};

#[path = "../../../tests/support/counting_alloc.rs"]
mod counting_alloc;

const SQL: &str = "
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, lower(state) AS state, upper(substr(site, 1, 4)) AS site,
         coalesce(campaign, 'none') AS campaign,
         count(*) AS events, sum(revenue * 2) AS revenue, hll(user_id) AS users,
         theta(user_id) AS users_theta, topk(site, 10) AS top_sites
  FROM impressions
  WHERE kind IN ('impression', 'click') AND revenue >= 0 AND ts >= '2026-01-01' AND NOT provider IS NULL
  GROUP BY day, state, site, campaign;
";

#[test]
fn routing_allocates_nothing_when_warm() {
    let start = counting_alloc::allocations();
    let plan = Plan::compile(SQL).expect("compiles");
    assert!(counting_alloc::allocations() > start, "the counter counts");
    let reach = &plan.summaries[0];
    // Rows are built before counting: in the engine they are the parser's
    // borrowed slices into its reused buffer.
    let states = ["CA", "NY", "TX", "WA", "Oregon-Long-Name"];
    let kinds = ["impression", "click", "conversion"];
    let rows: Vec<[String; 8]> = (0..1_000u64)
        .map(|i| {
            [
                format!("2026-11-{:02}T{:02}:00:00Z", 1 + i % 28, i % 24),
                (i * 7919 % 1_000).to_string(),
                kinds[(i % 3) as usize].to_owned(),
                states[(i % 5) as usize].to_owned(),
                format!("site-{}.example", i % 37),
                "provider".to_owned(),
                if i % 4 == 0 {
                    String::new()
                } else {
                    format!("c{}", i % 9)
                },
                format!("{}.25", i % 100),
            ]
        })
        .collect();
    let mut scratch = Scratch::new();
    let mut routed = Routed::default();
    let mut kept = 0u64;
    let mut hashes = 0u64;
    let mut run = |count: usize, kept: &mut u64, hashes: &mut u64| {
        for row in rows.iter().cycle().take(count) {
            if reach
                .route(row.as_slice(), &mut scratch, &mut routed)
                .expect("rows are well formed")
            {
                *kept += 1;
                *hashes ^= routed
                    .args
                    .iter()
                    .filter_map(|a| a.hash())
                    .fold(0, |x, h| x ^ h);
                *hashes ^= routed.key.len() as u64;
            }
        }
    };
    run(rows.len(), &mut kept, &mut hashes); // warm-up: buffers reach their size
    let before = counting_alloc::allocations();
    run(100_000, &mut kept, &mut hashes);
    let after = counting_alloc::allocations();
    assert_eq!(
        after - before,
        0,
        "allocations while routing 100,000 warm records"
    );
    // Two thirds of the kinds pass the filter.
    assert!(kept > 60_000, "{kept}");
    assert_ne!(hashes, 0);
}
