//! A summary's state is kept under its layout (bucket, dimensions,
//! aggregates, and what each dimension and aggregate argument computes):
//! a start whose schema changed a summary's layout since the snapshot is
//! refused, naming the summary and both layouts, instead of reading days
//! as hours, one dimension's values as another's, or merging users
//! counted by one column into users counted by another. A change that
//! keeps the layout (a filter, a comment, spacing and case) starts as
//! before, and so does a snapshot written before the expressions were
//! recorded.

use std::sync::Arc;

use cardinal_route::Plan;
use cardinal_server::Format;
use cardinal_server::service::{Origin, Service, ServiceOptions};
use cardinal_store::{Dir, SimDir, Snapshots};

const STREAM: &str =
    "CREATE STREAM a (ts TIMESTAMP, state TEXT, n BIGINT) WITH (format = 'csv', time = 'ts');";

fn plan(summary: &str) -> Arc<Plan> {
    Arc::new(Plan::compile(&format!("{STREAM}\n{summary}")).expect("compiles"))
}

fn open(plan: &Arc<Plan>, dir: &SimDir) -> anyhow::Result<Service> {
    let dir: Arc<dyn Dir> = Arc::new(dir.clone());
    Service::open(Arc::clone(plan), dir, &ServiceOptions::new(1, 64 << 20))
}

#[test]
fn a_changed_layout_is_refused_and_a_kept_one_starts() {
    let written = plan(
        "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state, count(*) AS c,
           hll(n) AS users FROM a GROUP BY day, state;",
    );
    let mut dir = SimDir::new();
    let service = open(&written, &dir).expect("opens");
    let reply = service
        .ingest(
            Origin::None,
            "a",
            Format::Csv,
            false,
            b"2026-11-01T10:00:00Z,CA,1\n2026-11-02T11:00:00Z,TX,2\n",
        )
        .expect("taken");
    reply.blocking_recv().expect("answered").expect("acked");
    service.snapshot().expect("a snapshot");
    let image = dir.crash(0);
    service.close().expect("closes");
    dir = image;

    let declared = "then: bucket day by day; dimensions (state text)";
    let computed = "then: dimensions (state = state); aggregates (c of *, users of n)";
    let refused = [
        (
            "hours for days",
            "CREATE SUMMARY s AS SELECT date_trunc('hour', ts) AS day, state, count(*) AS c,
               hll(n) AS users FROM a GROUP BY day, state;",
            declared,
            "bucket day by hour",
        ),
        (
            "another dimension",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state AS region,
               count(*) AS c, hll(n) AS users FROM a GROUP BY day, region;",
            declared,
            "dimensions (region text)",
        ),
        (
            "a larger sketch",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state, count(*) AS c,
               hll(n, 12, 5) AS users FROM a GROUP BY day, state;",
            declared,
            "users hll(log2m=12, regwidth=5)",
        ),
        (
            "a dimension computed differently under its name",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, lower(state) AS state,
               count(*) AS c, hll(n) AS users FROM a GROUP BY day, state;",
            computed,
            "now:  dimensions (state = lower(state))",
        ),
        (
            "users counted by something else",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state, count(*) AS c,
               hll(n + 1) AS users FROM a GROUP BY day, state;",
            computed,
            "users of (n + 1)",
        ),
    ];
    for (what, summary, then, now) in refused {
        let error = open(&plan(summary), &dir)
            .err()
            .unwrap_or_else(|| panic!("{what}: refused"));
        let text = format!("{error:#}");
        assert!(
            text.contains("summary s was declared differently")
                && text.contains(then)
                && text.contains(now)
                && text.contains("--data"),
            "{what}: {text}"
        );
    }

    // The same layout under another filter, with a comment, and spelled
    // with other spacing and case: taken.
    let kept = plan(
        "-- only some states now
         CREATE SUMMARY s AS SELECT DATE_TRUNC('day', TS) AS day, state, COUNT(*) AS c,
           HLL( N ) AS users FROM a WHERE state <> 'NY' GROUP BY DAY, STATE;",
    );
    let service = open(&kept, &dir).expect("the layout is the same");
    service.close().expect("closes");
    let service = open(&written, &dir).expect("the schema it was written under");
    service.close().expect("closes");

    // A snapshot written before the expressions were recorded (no
    // `layout-expressions/` section) starts under a schema that changed
    // them: there is nothing to compare.
    let snapshots = Snapshots::new(Arc::new(dir.clone()));
    let mut older = snapshots
        .load_newest()
        .expect("reads")
        .expect("a snapshot")
        .snapshot;
    assert!(older.sections.remove("layout-expressions/s").is_some());
    assert!(older.sections.contains_key("layout/s"));
    snapshots.write(&older).expect("rewritten");
    let changed = plan(
        "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, lower(state) AS state,
           count(*) AS c, hll(n) AS users FROM a GROUP BY day, state;",
    );
    let service = open(&changed, &dir).expect("an older snapshot has no expressions to compare");
    service.close().expect("closes");
}
