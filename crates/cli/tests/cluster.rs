//! Cluster queries through real processes on 127.0.0.1: three `cardinal
//! serve` nodes, each with `--peers` naming the other two, each fed a
//! different third of one generated impressions file over HTTP. Every
//! node answers for the whole cluster: `reach` by state over all buckets
//! equals `cardinal run` over the whole file (HyperLogLog estimates
//! bit-identical, so the registers are), every summary and `/v1/overlap`
//! equal what one server holding everything answers; a killed peer fails
//! a query with 503 naming it unless `partial=true`, which answers and
//! says what it lacks; a peer with another token is named as refusing
//! it. Every wait is bounded by a deadline.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{cardinal, ok, scratch_dir};

const SCHEMA: &str = "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT,
  state TEXT, site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS impressions, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression' GROUP BY day, state;
CREATE SUMMARY reach_by_state AS
  SELECT state, count(*) AS impressions, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression' GROUP BY state;
CREATE SUMMARY audiences AS
  SELECT date_trunc('day', ts) AS day, provider, hll(user_id) AS users
  FROM impressions GROUP BY day, provider;
";

const TOKEN: &str = "cluster-test-token-0123456789";

/// How long any one wait of this suite may take before it fails.
const DEADLINE: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    http: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cardinal serve` with its HTTP API on `http` (port 0: any),
/// its data in `dir/data`, and `more` flags.
fn start(dir: &Path, http: SocketAddr, more: &[String]) -> Server {
    std::fs::create_dir_all(dir).expect("node dir");
    let http_text = http.to_string();
    let mut args: Vec<&str> = vec![
        "serve",
        "../schema.sql",
        "--http",
        &http_text,
        "--listen",
        "127.0.0.1:0",
        "--data",
        "data",
        "--threads",
        "1",
        "--token-file",
        "token",
    ];
    args.extend(more.iter().map(String::as_str));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .expect("log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(&args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cardinal serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server prints its addresses");
    let http = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|address| address.trim().parse().ok())
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("no HTTP address in {line:?}; the server's log:\n{log}")
        });
    Server { child, http }
}

/// `n` distinct free ports ([`common::free_port`]): a node's peers must
/// know its address before it starts.
fn free_ports(n: usize) -> Vec<SocketAddr> {
    (0..n)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], common::free_port())))
        .collect()
}

/// A response: status, head (lower-cased header lines) and body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// The values of header `name` (lower case), in order.
    fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }
}

/// A GET with the bearer token, on a fresh connection.
fn get(address: SocketAddr, path: &str) -> Answer {
    let mut socket =
        TcpStream::connect_timeout(&address, Duration::from_secs(5)).expect("connects");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .expect("request sent");
    let mut response = Vec::new();
    socket.read_to_end(&mut response).expect("response read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// psql, when there is one (required when `CARDINAL_REQUIRE_PG_CLIENTS`
/// is set, as in CI).
fn psql_of() -> Option<String> {
    let found = Command::new("psql")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CARDINAL_REQUIRE_PG_CLIENTS").is_none(),
            "psql is required and missing"
        );
        eprintln!("skipped the PostgreSQL part: no psql");
        return None;
    }
    Some("psql".to_owned())
}

/// `POST /v1/sql` of `query`: the status, body and head.
fn sql(address: SocketAddr, query: &str) -> (u16, String, String) {
    let mut socket =
        TcpStream::connect_timeout(&address, Duration::from_secs(5)).expect("connects");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        socket,
        "POST /v1/sql HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{query}",
        query.len()
    )
    .expect("request sent");
    let mut response = Vec::new();
    socket.read_to_end(&mut response).expect("response read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned(), head.to_owned())
}

/// A 200's body, failing with the answer otherwise.
fn body_of(address: SocketAddr, path: &str) -> (String, Answer) {
    let answer = get(address, path);
    assert_eq!(
        answer.status, 200,
        "GET {path} from {address}: {}",
        answer.body
    );
    (answer.body.clone(), answer)
}

/// Posts `records` (with the header line) to the impressions stream.
fn post(address: SocketAddr, header: &str, records: &str) {
    let body = format!("{header}\n{records}");
    let answer = common::http_request(
        address,
        ("POST", "/v1/streams/impressions"),
        &[
            ("Content-Type", "text/csv; header=present"),
            ("Authorization", &format!("Bearer {TOKEN}")),
        ],
        body.as_bytes(),
        DEADLINE,
    );
    match answer {
        Some((200, text)) => assert!(text.contains("\"rejected\":0"), "{text}"),
        other => panic!("posting to {address}: {other:?}"),
    }
}

/// `json` without its `groups_a` and `groups_b` fields (in a cluster
/// they count each node's groups).
fn without_group_counts(json: &str) -> String {
    json.split(',')
        .filter(|field| !field.contains("\"groups_a\"") && !field.contains("\"groups_b\""))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_node_answers_for_the_whole_cluster() {
    let dir = scratch_dir("cluster", "whole");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    ok(&cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "50000",
            "--users",
            "20000",
            "--days",
            "30",
            "-o",
            "imp.csv",
        ],
    ));
    let text = std::fs::read_to_string(dir.join("imp.csv")).expect("generated");
    let (header, records) = text.split_once('\n').expect("a header line");
    let mut thirds = [String::new(), String::new(), String::new()];
    for (i, line) in records.lines().enumerate() {
        thirds[i % 3].push_str(line);
        thirds[i % 3].push('\n');
    }

    // Three nodes on addresses known before they start.
    let addresses = free_ports(3);
    let urls: Vec<String> = addresses.iter().map(|a| format!("http://{a}")).collect();
    let peers_of = |i: usize| -> Vec<String> {
        let others: Vec<&str> = (0..3)
            .filter(|&j| j != i)
            .map(|j| urls[j].as_str())
            .collect();
        vec![
            "--peers".to_owned(),
            others.join(","),
            "--peer-timeout".to_owned(),
            "2".to_owned(),
        ]
    };
    let node_dir = |i: usize| dir.join(format!("node{i}"));
    for i in 0..4 {
        std::fs::create_dir_all(node_dir(i)).expect("node dir");
        std::fs::write(node_dir(i).join("token"), TOKEN).expect("token");
    }
    // Node 0 and the single server also speak the PostgreSQL protocol.
    let pg = free_ports(2);
    let pg_of = |i: usize| vec!["--pg".to_owned(), pg[i].to_string()];
    let mut nodes: Vec<Server> = (0..3)
        .map(|i| {
            let mut more = peers_of(i);
            if i == 0 {
                more.extend(pg_of(0));
            }
            start(&node_dir(i), addresses[i], &more)
        })
        .collect();
    // One server holding everything: what the cluster must equal.
    let single = start(
        &node_dir(3),
        "127.0.0.1:0".parse().expect("address"),
        &pg_of(1),
    );
    for (node, third) in nodes.iter().zip(&thirds) {
        post(node.http, header, third);
    }
    post(single.http, header, records);

    // The truth: `cardinal run` over the whole file.
    let run = ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "imp.csv",
            "--json",
            "-",
            "--threads",
            "1",
        ],
    ));
    let truth: String = run
        .lines()
        .filter(|l| l.starts_with("{\"summary\":\"reach_by_state\""))
        .map(|l| format!("{}\n", l.replace("\"reach_by_state\"", "\"reach\"")))
        .collect();
    assert!(truth.lines().count() >= 40, "most states:\n{truth}");

    for node in &nodes {
        let (by_state, answer) = body_of(
            node.http,
            "/v1/summaries/reach?by=state&buckets=all&format=json",
        );
        assert_eq!(by_state, truth, "node {}", node.http);
        assert_eq!(answer.header("cardinal-nodes"), ["3/3"]);
        assert!(answer.header("cardinal-missing-node").is_empty());
        // Kept buckets, and every other summary, as the single server.
        for path in [
            "/v1/summaries/reach?format=csv",
            "/v1/summaries/audiences?format=json",
            "/v1/summaries/reach?where=state%20IN%20('CA'%2C'TX')&from=2026-11-03&to=2026-11-20&format=table",
        ] {
            assert_eq!(
                body_of(node.http, path).0,
                body_of(single.http, path).0,
                "{path} from {}",
                node.http
            );
        }
        let overlap = "/v1/overlap?summary=audiences&a=provider%3D'alpha'&b=provider%3D'beta'";
        assert_eq!(
            without_group_counts(&body_of(node.http, overlap).0),
            without_group_counts(&body_of(single.http, overlap).0),
            "{overlap} from {}",
            node.http
        );
        // SQL: each peer's partial answer merged before rows are made.
        for query in [
            "SELECT state, impressions, revenue, users, users_lower, users_upper FROM reach GROUP BY state",
            "SELECT date_trunc('week', day) AS week, users FROM reach WHERE state IN ('CA', 'TX') GROUP BY 1",
            "SELECT * FROM reach",
        ] {
            let (status, answer, head) = sql(node.http, query);
            assert_eq!(status, 200, "{query} from {}: {answer}", node.http);
            assert!(
                head.to_ascii_lowercase().contains("cardinal-nodes: 3/3"),
                "{head}"
            );
            assert_eq!(
                answer,
                sql(single.http, query).1,
                "{query} from {}",
                node.http
            );
        }
    }
    // Over the PostgreSQL wire too, node 0 answers for the cluster.
    if let Some(psql) = psql_of() {
        let query = "SELECT state, impressions, users, users_lower, users_upper FROM reach GROUP BY state ORDER BY state";
        let ask = |address: SocketAddr| {
            let output = Command::new(&psql)
                .args([
                    "-X",
                    "-At",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &address.port().to_string(),
                ])
                .args(["-d", "cardinal", "-U", "test", "-c", query])
                .env("PGPASSWORD", TOKEN)
                .env("PGCONNECT_TIMEOUT", "10")
                .output()
                .expect("psql runs");
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).into_owned()
        };
        let (cluster, one) = (ask(pg[0]), ask(pg[1]));
        assert!(cluster.lines().count() >= 40, "{cluster}");
        assert_eq!(cluster, one);
    }
    let (status, answer, _) = sql(
        nodes[0].http,
        "SELECT state, impressions, users FROM reach GROUP BY state ORDER BY state",
    );
    assert_eq!(status, 200, "{answer}");
    let by_state: Vec<serde_json::Value> = serde_json::from_str(&answer).expect("JSON");
    for row in &by_state {
        let line = truth
            .lines()
            .find(|l| l.contains(&format!("\"state\":{}", row["state"])))
            .unwrap_or_else(|| panic!("{row} in {truth}"));
        let run: serde_json::Value = serde_json::from_str(line).expect("run's JSON");
        assert_eq!(run["impressions"], row["impressions"], "{row}");
        assert_eq!(
            run["users"]["value"].as_f64().map(f64::round),
            row["users"].as_f64(),
            "{row}"
        );
    }

    // Every node as node 1 reaches it (the console's health view):
    // this node first, then its peers in the order listed, each healthy
    // with its own third of the events in its metrics.
    let listed = |at: SocketAddr| -> Vec<serde_json::Value> {
        let answer = get(at, "/v1/nodes");
        assert_eq!(answer.status, 200, "{}", answer.body);
        let listed: serde_json::Value = serde_json::from_str(&answer.body).expect("JSON");
        listed["nodes"].as_array().expect("nodes").clone()
    };
    let accepted = |node: &serde_json::Value| -> Option<u64> {
        node["metrics"]
            .as_str()?
            .lines()
            .find(|l| l.starts_with("cardinal_events_accepted_total{stream=\"impressions\"}"))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    };
    let seen = listed(nodes[1].http);
    let order = [1, 0, 2];
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (node, &i) in seen.iter().zip(&order) {
        assert!(
            node["url"].as_str().expect("url").starts_with(&urls[i]),
            "{node}"
        );
        assert_eq!(node["this"], i == 1, "{node}");
        assert_eq!(node["health_status"], 200, "{node}");
        assert_eq!(node["health"], "ok", "{node}");
        assert_eq!(
            accepted(node),
            Some(thirds[i].lines().count() as u64),
            "{node}"
        );
    }

    // The summary list from any node is the cluster's: groups and bytes
    // summed over each node's own list (`scope=node`), the newest bucket
    // the newest of theirs, and each node's own under "nodes".
    let list = |at: SocketAddr, path: &str| -> (serde_json::Value, Answer) {
        let answer = get(at, path);
        assert_eq!(answer.status, 200, "{}", answer.body);
        let value = serde_json::from_str(&answer.body).expect("JSON");
        (value, answer)
    };
    let own: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| list(n.http, "/v1/summaries?scope=node").0)
        .collect();
    let (whole, answer) = list(nodes[1].http, "/v1/summaries");
    assert_eq!(answer.header("cardinal-nodes"), ["3/3"]);
    let entry = |list: &serde_json::Value, name: &str| -> serde_json::Value {
        list["summaries"]
            .as_array()
            .expect("summaries")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
            .clone()
    };
    for name in ["reach", "audiences"] {
        let cluster = entry(&whole, name);
        let each: Vec<serde_json::Value> = own.iter().map(|o| entry(o, name)).collect();
        assert!(each.iter().all(|e| e.get("nodes").is_none()), "{each:?}");
        let sum = |member: &str| {
            each.iter()
                .map(|e| e[member].as_u64().expect("a count"))
                .sum::<u64>()
        };
        assert_eq!(cluster["groups"].as_u64(), Some(sum("groups")), "{cluster}");
        assert_eq!(cluster["bytes"].as_u64(), Some(sum("bytes")), "{cluster}");
        let newest = each
            .iter()
            .filter_map(|e| e["newest_bucket"].as_str())
            .max();
        assert!(newest.is_some(), "{each:?}");
        assert_eq!(cluster["newest_bucket"].as_str(), newest, "{cluster}");
        let listed = cluster["nodes"].as_array().expect("nodes");
        for (node, &i) in listed.iter().zip(&order) {
            let url = node["url"].as_str().expect("url");
            assert!(url.starts_with(&urls[i]), "{node}");
            assert_eq!(
                url.matches("(this node)").count(),
                usize::from(i == 1),
                "{node}"
            );
            assert_eq!(node["groups"], each[i]["groups"], "{node}");
            assert!(each[i]["groups"].as_u64() > Some(0), "{node}");
        }
        assert_eq!(listed.len(), 3, "{cluster}");
    }
    let refused = get(nodes[1].http, "/v1/summaries?scope=cluster");
    assert_eq!(refused.status, 400, "{}", refused.body);

    // A peer killed: the query fails naming it, unless it asks for a
    // partial answer, which says what it lacks.
    let _ = nodes[2].child.kill();
    let _ = nodes[2].child.wait();
    let seen = listed(nodes[1].http);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[2]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        seen[2]
    );
    assert_eq!(seen[2]["health"], serde_json::Value::Null, "{}", seen[2]);
    assert_eq!(seen[0]["health"], "ok", "this node still answers");
    // The summary list still answers, from the nodes that do, naming the
    // one that does not.
    let (whole, answer) = list(nodes[1].http, "/v1/summaries");
    assert_eq!(answer.header("cardinal-nodes"), ["2/3"]);
    let missing = answer.header("cardinal-missing-node");
    assert_eq!(missing.len(), 1, "{}", answer.head);
    assert!(missing[0].starts_with(&urls[2]), "{missing:?}");
    let reach = entry(&whole, "reach");
    let two: u64 = [0, 1]
        .iter()
        .map(|&i| entry(&own[i], "reach")["groups"].as_u64().expect("a count"))
        .sum();
    assert_eq!(reach["groups"].as_u64(), Some(two), "{reach}");
    assert_eq!(reach["nodes"].as_array().map(Vec::len), Some(2), "{reach}");
    let failed = get(nodes[0].http, "/v1/summaries/reach?by=state&buckets=all");
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(failed.body.contains(&urls[2]), "{}", failed.body);
    assert!(failed.body.contains("partial=true"), "{}", failed.body);
    let (partial, answer) = body_of(
        nodes[0].http,
        "/v1/summaries/reach?by=state&buckets=all&partial=true",
    );
    assert_eq!(answer.header("cardinal-nodes"), ["2/3"]);
    let missing = answer.header("cardinal-missing-node");
    assert_eq!(missing.len(), 1, "{}", answer.head);
    assert!(missing[0].starts_with(&urls[2]), "{missing:?}");
    assert_ne!(partial, truth, "two thirds of the events");
    let overlap = get(
        nodes[1].http,
        "/v1/overlap?summary=audiences&a=provider%3D'alpha'&b=provider%3D'beta'",
    );
    assert_eq!(overlap.status, 503, "{}", overlap.body);
    assert!(overlap.body.contains(&urls[2]), "{}", overlap.body);
    // `cardinal query --partial` prints the answer and says what it lacks.
    let output = cardinal(
        &node_dir(0),
        &[
            "query",
            "reach",
            "--server",
            &urls[0],
            "--token-file",
            "token",
            "--by",
            "state",
            "--all-buckets",
            "--partial",
        ],
    );
    let printed = ok(&output);
    assert!(printed.contains("CA"), "{printed}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains(&urls[2]), "{said}");
    let output = cardinal(
        &node_dir(0),
        &[
            "query",
            "reach",
            "--server",
            &urls[0],
            "--token-file",
            "token",
        ],
    );
    let said = common::failure(&output);
    assert!(said.contains("503") && said.contains(&urls[2]), "{said}");

    let (metrics, _) = body_of(nodes[0].http, "/metrics");
    let failures = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "cardinal_peer_failures_total{{peer=\"{}\"}}",
                urls[2]
            ))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(
        failures,
        Some(4),
        "two queries, two `cardinal query`: {metrics}"
    );

    // The peer back with another token: named as refusing this node's.
    std::fs::write(node_dir(2).join("token"), "another-token-0123456789").expect("token");
    // The listener sets SO_REUSEADDR: the killed node's port is free.
    nodes[2] = start(&node_dir(2), addresses[2], &peers_of(2));
    let refused = get(nodes[0].http, "/v1/summaries/reach?by=state&buckets=all");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.body.contains(&urls[2]) && refused.body.contains("token"),
        "{}",
        refused.body
    );
}

/// A node among its own peers (under another name) would count its
/// records twice: its queries fail with 409 saying so.
#[test]
fn a_node_listed_among_its_own_peers_is_refused() {
    let dir = scratch_dir("cluster", "itself");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let node_dir = dir.join("node");
    std::fs::create_dir_all(&node_dir).expect("node dir");
    std::fs::write(node_dir.join("token"), TOKEN).expect("token");
    let address = free_ports(1)[0];
    let itself = format!("http://localhost:{}", address.port());
    let node = start(&node_dir, address, &["--peers".to_owned(), itself.clone()]);
    let refused = get(node.http, "/v1/summaries/reach?partial=true");
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(
        refused.body.contains(&itself) && refused.body.contains("this node itself"),
        "{}",
        refused.body
    );
}

/// Waits until every thread of process `pid` is stopped. `kill -STOP`
/// returns once the signal is queued, but the stop is taken by one
/// thread that must first be scheduled, and on a loaded machine the
/// others can answer a request meanwhile (seen: a peer "stopped" for a
/// millisecond answered the query in 0.6 ms).
fn stopped(pid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
        let all = tasks.filter_map(Result::ok).all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // "tid (name) S ...": the state follows the last ')'.
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            state.is_some_and(|rest| rest.starts_with('T') || rest.starts_with('t'))
        });
        if all {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} not stopped within 10 s of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A peer that stops answering (SIGSTOP: connected, silent) holds a
/// query no longer than `--peer-timeout`: 503 naming it, or with
/// `partial=true` the answer without it.
#[test]
fn a_silent_peer_costs_a_query_its_timeout_only() {
    let dir = scratch_dir("cluster", "silent");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let addresses = free_ports(2);
    let urls: Vec<String> = addresses.iter().map(|a| format!("http://{a}")).collect();
    let mut nodes = Vec::new();
    for i in 0..2 {
        let node_dir = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&node_dir).expect("node dir");
        std::fs::write(node_dir.join("token"), TOKEN).expect("token");
        let more = [
            "--peers".to_owned(),
            urls[1 - i].clone(),
            "--peer-timeout".to_owned(),
            "0.3".to_owned(),
        ];
        nodes.push(start(&node_dir, addresses[i], &more));
    }
    let (answer, _) = body_of(nodes[0].http, "/v1/summaries/reach?format=csv");
    assert!(answer.starts_with("day,state,"), "{answer}");
    let pid = nodes[1].child.id();
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([name, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        if name == "-STOP" {
            stopped(pid);
        }
    };
    signal("-STOP");
    let started = std::time::Instant::now();
    let failed = get(nodes[0].http, "/v1/summaries/reach");
    let took = started.elapsed();
    signal("-CONT");
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(
        failed.body.contains(&urls[1]) && failed.body.contains("no answer within 0.3 s"),
        "{}",
        failed.body
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    signal("-STOP");
    let partial = get(nodes[0].http, "/v1/summaries/reach?partial=true");
    signal("-CONT");
    assert_eq!(partial.status, 200, "{}", partial.body);
    assert_eq!(partial.header("cardinal-nodes"), ["1/2"]);
    assert!(
        partial.header("cardinal-missing-node")[0].starts_with(&urls[1]),
        "{}",
        partial.head
    );
}
