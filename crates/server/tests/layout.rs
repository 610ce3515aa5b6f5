//! A summary's state is kept under its layout (bucket, dimensions,
//! aggregates): a start whose schema changed a summary's layout since the
//! snapshot is refused, naming the summary and both layouts, instead of
//! reading days as hours or one dimension's values as another's. A change
//! that keeps the layout (a filter, a comment) starts as before.

use std::sync::Arc;

use cardinal_route::Plan;
use cardinal_server::Format;
use cardinal_server::service::{Origin, Service, ServiceOptions};
use cardinal_store::{Dir, SimDir};

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

    let refused = [
        (
            "hours for days",
            "CREATE SUMMARY s AS SELECT date_trunc('hour', ts) AS day, state, count(*) AS c,
               hll(n) AS users FROM a GROUP BY day, state;",
            "bucket day by hour",
        ),
        (
            "another dimension",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state AS region,
               count(*) AS c, hll(n) AS users FROM a GROUP BY day, region;",
            "dimensions (region text)",
        ),
        (
            "a larger sketch",
            "CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state, count(*) AS c,
               hll(n, 12, 5) AS users FROM a GROUP BY day, state;",
            "users hll(log2m=12, regwidth=5)",
        ),
    ];
    for (what, summary, now) in refused {
        let error = open(&plan(summary), &dir)
            .err()
            .unwrap_or_else(|| panic!("{what}: refused"));
        let text = format!("{error:#}");
        assert!(
            text.contains("summary s was declared differently")
                && text.contains("then: bucket day by day; dimensions (state text)")
                && text.contains(now)
                && text.contains("--data"),
            "{what}: {text}"
        );
    }

    // The same layout under another filter and with a comment: taken.
    let kept = plan(
        "-- only some states now
         CREATE SUMMARY s AS SELECT date_trunc('day', ts) AS day, state, count(*) AS c,
           hll(n) AS users FROM a WHERE state <> 'NY' GROUP BY day, state;",
    );
    let service = open(&kept, &dir).expect("the layout is the same");
    service.close().expect("closes");
    let service = open(&written, &dir).expect("the schema it was written under");
    service.close().expect("closes");
}
