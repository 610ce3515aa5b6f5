//! SQL on a live server, as a user asks it: `POST /v1/sql` and `cardinal
//! query "SELECT ..."` over 50,000 events posted to `cardinal serve`,
//! each answer checked against `cardinal run` over the same file; a bad
//! query's caret; the query size limit and one byte more.

mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use common::{cardinal, failure, ok, scratch_dir, serve};

const SCHEMA: &str = "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, state TEXT, provider TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state, count(*) AS events, sum(revenue) AS revenue,
         hll(user_id) AS users
  FROM impressions GROUP BY day, state;
";

const EVENTS: u64 = 50_000;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 50,000 impressions over 10 days, 8 states, 20,000 users.
fn events() -> String {
    let mut csv = String::from("ts,user_id,state,provider,revenue\n");
    for i in 0..EVENTS {
        let h = splitmix(i);
        let state = ["CA", "TX", "NY", "WA", "FL", "OR", "NV", "AZ"][(h % 8) as usize];
        let provider = ["alpha", "beta"][((h >> 8) % 2) as usize];
        let _ = writeln!(
            csv,
            "2026-11-{:02}T{:02}:00:00Z,{},{state},{provider},{}",
            1 + (h >> 12) % 10,
            (h >> 20) % 24,
            (h >> 28) % 20_000,
            ((h >> 44) % 1000) as f64 / 100.0
        );
    }
    csv
}

fn post(address: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    common::http_request(
        address,
        ("POST", path),
        &[],
        body.as_bytes(),
        Duration::from_secs(30),
    )
    .expect("the server answers")
}

/// Posts the events and waits until every one is in the live view.
fn load(address: std::net::SocketAddr, csv: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = common::http_request(
            address,
            ("POST", "/v1/streams/impressions"),
            &[
                ("Content-Type", "text/csv; header=present"),
                ("Idempotency-Key", "all"),
            ],
            csv.as_bytes(),
            Duration::from_secs(30),
        );
        match answer {
            Some((200, _)) => break,
            Some((503, _)) | None if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("posting the events: {other:?}"),
        }
    }
    loop {
        let (status, body) = post(address, "/v1/sql?format=csv", "SELECT events FROM reach");
        if status == 200 && body.lines().nth(1) == Some(&EVENTS.to_string()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the events never showed: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `cardinal run`'s rows of `reach`: (day, state) -> the CSV fields.
fn run_rows(dir: &std::path::Path) -> HashMap<(String, String), Vec<String>> {
    ok(&cardinal(
        dir,
        &["run", "schema.sql", "events.csv", "--out", "out"],
    ));
    let mut rows = HashMap::new();
    for line in common::csv_lines(&dir.join("out"), "reach") {
        let fields: Vec<String> = line.split(',').map(str::to_owned).collect();
        rows.insert((fields[0].clone(), fields[1].clone()), fields[2..].to_vec());
    }
    rows
}

#[test]
fn sql_answers_equal_cardinal_run_over_the_same_events() {
    let dir = scratch_dir("sql", "answers");
    let csv = events();
    std::fs::write(dir.join("events.csv"), &csv).expect("events");
    let server = serve(&dir, SCHEMA, &[]);
    load(server.http, &csv);
    let expected = run_rows(&dir);
    assert_eq!(expected.len(), 80, "10 days of 8 states");

    // Every stored row, as `run` prints it: exact columns equal, the
    // HyperLogLog's estimate and interval equal.
    let (status, body) = post(
        server.http,
        "/v1/sql?format=csv",
        "SELECT day, state, events, revenue, users, users_lower, users_upper FROM reach",
    );
    assert_eq!(status, 200, "{body}");
    let mut lines = body.lines();
    assert_eq!(
        lines.next(),
        Some("day,state,events,revenue,users,users_lower,users_upper")
    );
    let mut seen = 0;
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let want = &expected[&(fields[0].to_owned(), fields[1].to_owned())];
        assert_eq!(fields[2..], want[..], "{line}");
        seen += 1;
    }
    assert_eq!(seen, 80);

    // Re-aggregated: each state's ten days merged; the events add up and
    // the union's estimate lies within its own interval.
    let (status, body) = post(
        server.http,
        "/v1/sql",
        "SELECT state, events, users, users_lower, users_upper FROM reach \
         WHERE day >= '2026-11-01' AND day < '2026-11-11' GROUP BY state ORDER BY events DESC",
    );
    assert_eq!(status, 200, "{body}");
    let rows: serde_json::Value = serde_json::from_str(&body).expect("a JSON array");
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 8);
    let total: u64 = rows
        .iter()
        .map(|r| r["events"].as_u64().expect("int"))
        .sum();
    assert_eq!(total, EVENTS);
    for row in rows {
        let (v, lo, hi) = (
            row["users"].as_f64().expect("f"),
            row["users_lower"].as_f64().expect("f"),
            row["users_upper"].as_f64().expect("f"),
        );
        assert!(lo <= v && v <= hi, "{row}");
    }
    let counts: Vec<u64> = rows
        .iter()
        .map(|r| r["events"].as_u64().expect("int"))
        .collect();
    assert!(
        counts.windows(2).all(|w| w[0] >= w[1]),
        "ORDER BY events DESC"
    );

    // The README's and --help's commands, as written.
    let address = format!("http://{}", server.http);
    let table = ok(&cardinal(
        &dir,
        &[
            "query",
            "SELECT state, users, users_lower, users_upper FROM reach GROUP BY state ORDER BY users DESC LIMIT 10",
            "--server",
            &address,
        ],
    ));
    assert!(table.starts_with("state"), "{table}");
    assert!(table.ends_with("(8 rows)\n"), "{table}");
    let weekly = ok(&cardinal(
        &dir,
        &[
            "query",
            "SELECT date_trunc('week', day) AS week, events FROM reach GROUP BY 1",
            "--format",
            "csv",
            "--server",
            &address,
        ],
    ));
    let weeks: u64 = weekly
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .nth(1)
                .expect("events")
                .parse::<u64>()
                .expect("n")
        })
        .sum();
    assert_eq!(weeks, EVENTS, "{weekly}");
}

#[test]
fn summaries_list_their_columns_for_sql() {
    let dir = scratch_dir("sql", "schema");
    let server = serve(&dir, SCHEMA, &[]);
    let (status, body) = common::http_request(
        server.http,
        ("GET", "/v1/summaries"),
        &[],
        b"",
        Duration::from_secs(20),
    )
    .expect("answer");
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let reach = &listed["summaries"][0];
    assert_eq!(reach["name"], "reach");
    assert_eq!(
        reach["bucket"],
        serde_json::json!({"column": "day", "unit": "day"})
    );
    assert_eq!(
        reach["dimensions"],
        serde_json::json!([{"name": "state", "type": "text"}])
    );
    assert_eq!(reach["aggregates"][0]["kind"], "count(*)");
    assert_eq!(reach["aggregates"][2]["kind"], "hll(log2m=11, regwidth=5)");
    assert_eq!(
        reach["aggregates"][2]["columns"],
        serde_json::json!([
            {"name": "users", "type": "double precision"},
            {"name": "users_lower", "type": "double precision"},
            {"name": "users_upper", "type": "double precision"},
            {"name": "users_hll", "type": "text"},
        ])
    );
    assert_eq!(
        reach["aggregates"][0]["columns"],
        serde_json::json!([{"name": "events", "type": "bigint"}])
    );
}

#[test]
fn bad_queries_are_refused_with_a_caret_and_the_limit_holds() {
    let dir = scratch_dir("sql", "refusals");
    let server = serve(&dir, SCHEMA, &[]);
    let (status, body) = post(server.http, "/v1/sql", "SELECT stat FROM reach");
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_str(&body).expect("JSON error");
    let message = error["error"].as_str().expect("message");
    assert!(
        message.contains("line 1, column 8: unknown column stat"),
        "{message}"
    );
    assert!(message.contains('^'), "{message}");

    let address = format!("http://{}", server.http);
    let stderr = failure(&cardinal(
        &dir,
        &[
            "query",
            "SELECT users FROM reach WHERE users > 1",
            "--server",
            &address,
        ],
    ));
    assert!(stderr.contains("filter aggregates with HAVING"), "{stderr}");
    assert!(stderr.contains('^'), "{stderr}");
    let stderr = failure(&cardinal(
        &dir,
        &[
            "query",
            "SELECT users FROM reach",
            "--by",
            "state",
            "--server",
            &address,
        ],
    ));
    assert!(
        stderr.contains("--by selects a summary's groups by flags"),
        "{stderr}"
    );

    // The largest query admitted, then one byte more.
    let max = cardinal_route::QUERY_BYTES_MAX;
    let head = "SELECT events FROM reach -- ";
    let largest = format!("{head}{}", "x".repeat(max - head.len()));
    assert_eq!(largest.len(), max);
    let (status, body) = post(server.http, "/v1/sql?format=csv", &largest);
    assert_eq!((status, body.as_str()), (200, "events\n0\n"));
    let (status, body) = post(server.http, "/v1/sql", &format!("{largest}x"));
    assert_eq!(status, 413, "{body}");
    assert!(body.contains(&format!("at most {max} bytes")), "{body}");
    let (status, body) = post(
        server.http,
        "/v1/sql?format=xml",
        "SELECT events FROM reach",
    );
    assert_eq!(status, 400, "{body}");
}
