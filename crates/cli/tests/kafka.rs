//! `cardinal serve --kafka` as a user runs it: a real broker, real nodes
//! on 127.0.0.1, `kill -9` at seeded random moments while records stream
//! in (some in transactions that abort); once the nodes have caught up,
//! the cluster's answer from any node equals `cardinal run` over the
//! committed records (counts, exact sums and HyperLogLog estimates from
//! equal sketches): nothing counted twice, nothing skipped, nothing
//! aborted counted. Then the operator's mistakes: a node restarted with
//! partitions its state does not own, two nodes for one partition, and
//! records deleted by retention before a node read them.
//!
//! The broker: `CARDINAL_KAFKA` (`common/kafka.rs`); CI starts one and
//! requires it.

#![allow(
    clippy::cast_possible_truncation,
    reason = "small seeded indexes on a 64-bit test machine"
)]

mod common;
#[path = "common/kafka.rs"]
mod kafka;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Rng, free_port, get, rss, scratch_dir, truth, w1_events as events};
use kafka::{Broker, End, OwnBroker, Records, Transaction};

/// W1's header line.
const HEADER: &str = "ts,user_id,kind,state,site,provider,campaign,revenue";

/// W1's schema, as bench/engine declares it.
const SCHEMA: &str = include_str!("../../../bench/engine/schemas/impressions.sql");

/// How long nodes may take to fold everything produced, after the last
/// restart: seconds here; a minute means something is stuck.
const CATCH_UP: Duration = Duration::from_secs(90);

/// A running `cardinal serve` node.
struct Node {
    child: Child,
    http: SocketAddr,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a node is started.
#[derive(Clone)]
struct NodeArgs {
    dir: PathBuf,
    data: String,
    port: u16,
    more: Vec<String>,
}

fn spawn(args: &NodeArgs) -> Child {
    spawn_env(args, &[])
}

fn spawn_env(args: &NodeArgs, env: &[(&str, &str)]) -> Child {
    let port = args.port.to_string();
    let mut argv: Vec<String> = [
        "serve",
        "schema.sql",
        "--data",
        &args.data,
        "--http",
        &format!("127.0.0.1:{port}"),
        "--threads",
        "1",
        "--snapshot-every",
        "1",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    if !args.more.iter().any(|a| a == "--memory-max") {
        argv.extend(["--memory-max".to_owned(), "256MiB".to_owned()]);
    }
    argv.extend(args.more.iter().cloned());
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.dir.join(format!("{}.log", args.data)))
        .expect("log file");
    Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(&argv)
        .envs(env.iter().copied())
        .current_dir(&args.dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cardinal serve starts")
}

fn log_of(args: &NodeArgs) -> String {
    std::fs::read_to_string(args.dir.join(format!("{}.log", args.data))).unwrap_or_default()
}

/// Starts a node and waits for its address line.
fn start(args: &NodeArgs) -> Node {
    start_env(args, &[])
}

/// [`start`] with more environment variables.
fn start_env(args: &NodeArgs, env: &[(&str, &str)]) -> Node {
    let mut child = spawn_env(args, env);
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the node prints its address");
    let http = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ']).next())
        .unwrap_or_else(|| panic!("no HTTP address in {line:?}; log:\n{}", log_of(args)))
        .parse()
        .expect("an address");
    Node { child, http }
}

/// A node that must refuse to start: its exit status and log.
fn refused(args: &NodeArgs) -> String {
    let mut child = spawn(args);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("waits") {
            assert!(
                !status.success(),
                "the node started; log:\n{}",
                log_of(args)
            );
            return log_of(args);
        }
        assert!(
            Instant::now() < deadline,
            "the node neither started nor refused; log:\n{}",
            log_of(args)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node's per-partition lag, from `/metrics`: `None` while the
/// node does not answer or has not yet heard every partition's watermark.
fn lags(address: SocketAddr) -> Option<Vec<i64>> {
    let (status, body) = get(address, "/metrics")?;
    if status != 200 {
        return None;
    }
    let of = |family: &str| -> Vec<i64> {
        body.lines()
            .filter(|l| l.starts_with(family))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    };
    let lags = of("cardinal_kafka_lag_records{");
    let partitions = of("cardinal_kafka_offset_read{").len();
    (partitions > 0 && lags.len() == partitions).then_some(lags)
}

/// Waits until every node has read every partition it owns to the end,
/// and stayed there for longer than the nodes take to read the
/// watermarks again (so a watermark read before the last records were
/// written cannot pass for the end).
fn caught_up(nodes: &[&Node]) {
    let deadline = Instant::now() + CATCH_UP;
    let mut since: Option<Instant> = None;
    loop {
        let all = nodes
            .iter()
            .all(|node| lags(node.http).is_some_and(|lags| lags.iter().all(|&l| l == 0)));
        match (all, since) {
            (true, Some(at)) if at.elapsed() > Duration::from_millis(2_500) => return,
            (true, None) => since = Some(Instant::now()),
            (true, Some(_)) => {}
            (false, _) => since = None,
        }
        assert!(
            Instant::now() < deadline,
            "nodes did not catch up: {:?}",
            nodes.iter().map(|n| lags(n.http)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A summary's rows (JSON lines) as a node answers them, sorted.
fn rows(address: SocketAddr, summary: &str) -> Vec<String> {
    common::summary_rows(address, summary).expect("the node answers 200")
}

/// Spreads `lines` over `partitions` partitions as messages: mostly one
/// record each, every seventh message three records joined by newlines.
fn messages(lines: &[String], partitions: i32, rng: &mut Rng) -> Records {
    let mut records = Records::new();
    let mut i = 0;
    while i < lines.len() {
        let take = if rng.below(7) == 0 { 3 } else { 1 };
        let end = (i + take).min(lines.len());
        let message = lines[i..end].join("\n").into_bytes();
        let p = rng.below(partitions as u64) as i32;
        records.entry(p).or_default().push(message);
        i = end;
    }
    records
}

fn node_args(dir: &Path, data: &str, port: u16, more: &[String]) -> NodeArgs {
    NodeArgs {
        dir: dir.to_path_buf(),
        data: data.to_owned(),
        port,
        more: more.to_vec(),
    }
}

fn kafka_args(broker: &Broker, topic: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--kafka".to_owned(),
        broker.bootstrap().to_owned(),
        "--kafka-topic".to_owned(),
        format!("impressions={topic}"),
    ];
    args.extend(extra.iter().map(ToString::to_string));
    args
}

/// The end-to-end run of one seed with `nodes` nodes (module doc).
fn cluster_run(seed: u64, nodes: u32) {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", &format!("cluster-{seed}-{nodes}"));
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let topic = kafka::unique_name(&format!("w1-{seed}"));
    broker.create_topic(&topic, 6);
    let lines = events(&dir, 30_000, seed);
    // The records counted are the committed ones, in the order produced.
    let mut committed: Vec<String> = Vec::new();
    let ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
    let args: Vec<NodeArgs> = (0..nodes)
        .map(|i| {
            let peers: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i as usize)
                .map(|(_, port)| format!("http://127.0.0.1:{port}"))
                .collect();
            let mut extra = vec!["--node".to_owned(), format!("{i}/{nodes}")];
            if !peers.is_empty() {
                extra.push("--peers".to_owned());
                extra.push(peers.join(","));
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            node_args(
                &dir,
                &format!("d{i}"),
                ports[i as usize],
                &kafka_args(&broker, &topic, &extra),
            )
        })
        .collect();
    let mut running: Vec<Node> = args.iter().map(start).collect();
    let rounds = 4;
    let per_round = lines.len().div_ceil(rounds);
    for (round, chunk) in lines.chunks(per_round).enumerate() {
        // Half idempotent, half in a committed transaction; then an
        // aborted transaction of records that must never count (a state
        // no generated event has).
        let (plain, in_transaction) = chunk.split_at(chunk.len() / 2);
        broker.produce(&topic, &messages(plain, 6, &mut rng));
        let aborted: Vec<String> = plain
            .iter()
            .take(200)
            .map(|l| {
                let mut fields: Vec<&str> = l.split(',').collect();
                fields[3] = "ZZ";
                fields.join(",")
            })
            .collect();
        broker.produce_transactions(
            &topic,
            &[
                Transaction {
                    records: messages(in_transaction, 6, &mut rng),
                    end: End::Commit,
                },
                Transaction {
                    records: messages(&aborted, 6, &mut rng),
                    end: End::Abort,
                },
            ],
        );
        committed.extend(chunk.iter().cloned());
        // kill -9 one node at a random moment, and start it again.
        std::thread::sleep(Duration::from_millis(rng.below(1_500)));
        let victim = rng.below(u64::from(nodes)) as usize;
        let node = &mut running[victim];
        node.child.kill().expect("kill -9");
        node.child.wait().expect("reaped");
        eprintln!("seed {seed} round {round}: killed node {victim}");
        running[victim] = start(&args[victim]);
    }
    // A message that is no record: rejected and kept, as on any edge
    // (and by `cardinal run` over the same lines).
    let junk = "not a record".to_owned();
    broker.produce(
        &topic,
        &[(0, vec![junk.clone().into_bytes()])].into_iter().collect(),
    );
    committed.push(junk);
    let all: Vec<&Node> = running.iter().collect();
    caught_up(&all);
    let input = dir.join("committed.csv");
    std::fs::write(&input, format!("{HEADER}\n{}\n", committed.join("\n"))).expect("input");
    let expected = truth(&dir, "committed.csv", "reach");
    assert!(!expected.is_empty());
    // The rejects name where they came from; some node holds each.
    let rejects: String = running
        .iter()
        .filter_map(|node| get(node.http, "/v1/rejects").map(|(_, body)| body))
        .collect();
    assert!(
        rejects.contains(&format!("topic {topic} partition 0 offsets "))
            && rejects.contains("fewer fields than columns"),
        "{rejects}"
    );
    for (i, node) in running.iter().enumerate() {
        let got = rows(node.http, "reach");
        assert!(
            got == expected,
            "seed {seed}: node {i}'s answer differs from cardinal run: {} rows against {}; \
             first difference: {:?}\nlog:\n{}",
            got.len(),
            expected.len(),
            got.iter().zip(&expected).find(|(a, b)| a != b),
            log_of(&args[i])
        );
    }
}

#[test]
fn one_node_counts_every_committed_record_once_across_kills() {
    cluster_run(1, 1);
}

#[test]
fn a_cluster_counts_every_committed_record_once_across_kills() {
    for seed in [2, 3] {
        cluster_run(seed, 2);
    }
}

/// Consumes `topic` to its end with one node on `data`, then stops it
/// cleanly (its snapshot then covers everything read).
fn read_all_and_stop(broker: &Broker, args: &NodeArgs) {
    let mut node = start(args);
    caught_up(&[&node]);
    // SIGTERM: a last snapshot, exit 0.
    // SAFETY: kill(2) with the child's pid and a signal number.
    let pid = i32::try_from(node.child.id()).expect("a pid");
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = node.child.wait().expect("waits");
    assert!(status.success(), "log:\n{}", log_of(args));
    let _ = broker;
}

#[test]
fn a_state_is_never_read_with_partitions_it_does_not_own() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "ownership");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("own");
    broker.create_topic(&topic, 4);
    let lines = events(&dir, 2_000, 11);
    let mut rng = Rng(5);
    broker.produce(&topic, &messages(&lines, 4, &mut rng));
    let port = free_port();
    let whole = node_args(&dir, "d", port, &kafka_args(&broker, &topic, &[]));
    read_all_and_stop(&broker, &whole);
    // The same state, now as node 0 of 2: partitions 1 and 3 are in it.
    let half = node_args(
        &dir,
        "d",
        port,
        &kafka_args(&broker, &topic, &["--node", "0/2"]),
    );
    let log = refused(&half);
    assert!(
        log.contains("holds partitions 1, 3") && log.contains("not assigned"),
        "{log}"
    );
    // A partition added to the topic: the offsets no longer say what was
    // read.
    broker.add_partitions(&topic, 6);
    let log = refused(&whole);
    assert!(
        log.contains("had 4 partitions") && log.contains("has 6 now"),
        "{log}"
    );
}

#[test]
fn records_deleted_before_they_were_read_stop_the_node_naming_them() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "retention");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("gone");
    broker.create_topic(&topic, 1);
    let lines = events(&dir, 1_000, 12);
    let one = |slice: &[String]| -> Records {
        [(0, slice.iter().map(|l| l.clone().into_bytes()).collect())]
            .into_iter()
            .collect()
    };
    broker.produce(&topic, &one(&lines[..500]));
    let args = node_args(&dir, "d", free_port(), &kafka_args(&broker, &topic, &[]));
    read_all_and_stop(&broker, &args);
    // 500 more, and retention deletes through offset 699 before the node
    // is back: offsets 500 to 699 were never read.
    broker.produce(&topic, &one(&lines[500..]));
    assert_eq!(broker.delete_records(&topic, 0, 700), 700);
    let log = refused(&args);
    assert!(
        log.contains("partition 0: offsets 500 to 699") && log.contains("retention"),
        "{log}"
    );
}

#[test]
fn two_nodes_reading_one_partition_are_caught() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "fence");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("fence");
    broker.create_topic(&topic, 2);
    let lines = events(&dir, 2_000, 13);
    let mut rng = Rng(7);
    broker.produce(&topic, &messages(&lines, 2, &mut rng));
    let first_args = node_args(&dir, "a", free_port(), &kafka_args(&broker, &topic, &[]));
    let mut first = start(&first_args);
    caught_up(&[&first]);
    // A second node started by mistake for partition 1.
    let second_args = node_args(
        &dir,
        "b",
        free_port(),
        &kafka_args(&broker, &topic, &["--partitions", "1"]),
    );
    let second = start(&second_args);
    caught_up(&[&second]);
    // More records: the first node's next snapshot finds the fence taken
    // and stops, non-zero, saying why.
    broker.produce(&topic, &messages(&lines[..100], 2, &mut rng));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = first.child.try_wait().expect("waits") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the first node kept reading a partition another node claimed; log:\n{}",
            log_of(&first_args)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = log_of(&first_args);
    assert!(
        log.contains("partition 1 of Kafka topic") && log.contains("claimed by another node"),
        "{log}"
    );
    drop(second);
}

/// A GET's status and head (header lines), on a fresh connection.
fn head_of(address: SocketAddr, path: &str) -> (u16, String, String) {
    use std::io::{Read as _, Write as _};
    let mut socket = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
        .expect("the node answers");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("sent");
    let mut response = String::new();
    socket.read_to_string(&mut response).expect("read");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// A cluster's answer says which partitions it covers (each node's
/// state to its next offset) and which none does; two nodes covering
/// one partition (here in different consumer groups, so no fence stops
/// either) fail the query naming both and the partition.
#[test]
fn a_cluster_answer_says_what_it_covers_and_refuses_a_partition_counted_twice() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "covers");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("covers");
    broker.create_topic(&topic, 3);
    let lines = events(&dir, 3_000, 17);
    let mut rng = Rng(11);
    broker.produce(&topic, &messages(&lines, 3, &mut rng));
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let url = |i: usize| format!("http://127.0.0.1:{}", ports[i]);
    let node = |i: usize, data: &str, partitions: &str, peers: &[usize]| {
        let peers: Vec<String> = peers.iter().map(|&j| url(j)).collect();
        let group = format!("covers-{data}");
        let extra = [
            "--partitions",
            partitions,
            "--kafka-group",
            &group,
            "--peers",
            &peers.join(","),
        ];
        node_args(&dir, data, ports[i], &kafka_args(&broker, &topic, &extra))
    };
    // Partitions 0 and 1 covered, 2 by nobody.
    let a = start(&node(0, "a", "0", &[1]));
    let b = start(&node(1, "b", "1", &[0]));
    caught_up(&[&a, &b]);
    let (status, head, body) = head_of(a.http, "/v1/summaries/reach?buckets=all&by=state");
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("cardinal-nodes: 2/2"), "{head}");
    let covers = head
        .lines()
        .find_map(|l| l.strip_prefix("cardinal-covers: "))
        .unwrap_or_else(|| panic!("no Cardinal-Covers: {head}"));
    let covered: Vec<&str> = covers.split(',').collect();
    assert_eq!(covered.len(), 2, "{covers}");
    let topic_lower = topic.to_ascii_lowercase();
    assert!(
        covered[0].starts_with(&format!("{topic_lower}/0=")),
        "{covers}"
    );
    assert!(
        covered[1].starts_with(&format!("{topic_lower}/1=")),
        "{covers}"
    );
    assert!(
        head.contains(&format!("cardinal-missing-partitions: {topic_lower}/2")),
        "{head}"
    );
    drop(b);
    // Partition 1 read by a second node as well: counted twice.
    let c = start(&node(2, "c", "1-2", &[0]));
    let (status, _, body) = head_of(c.http, "/v1/summaries/reach");
    assert_eq!(status, 200, "{body}");
    let a2 = {
        drop(a);
        start(&node(0, "a2", "0-1", &[2]))
    };
    caught_up(&[&a2, &c]);
    let (status, _, body) = head_of(a2.http, "/v1/summaries/reach");
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains(&format!("partition {topic}/1"))
            && body.contains(&url(0))
            && body.contains(&url(2)),
        "{body}"
    );
}

#[test]
fn a_broker_that_goes_away_and_comes_back_loses_and_doubles_nothing() {
    // A broker of its own: this one is stopped and started again.
    if Broker::from_env().is_none() {
        return;
    }
    let dir = scratch_dir("kafka", "broker-restart");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let own = OwnBroker::start(&dir.join("broker"));
    let broker = &own.broker;
    let topic = kafka::unique_name("away");
    broker.create_topic(&topic, 3);
    let lines = events(&dir, 6_000, 14);
    let mut rng = Rng(9);
    let (first, second) = lines.split_at(3_000);
    broker.produce(&topic, &messages(first, 3, &mut rng));
    let args = node_args(&dir, "d", free_port(), &kafka_args(broker, &topic, &[]));
    let node = start(&args);
    caught_up(&[&node]);
    // The broker goes away: the node says so, degraded, and still answers.
    own.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(node.http, "/healthz").expect("the node answers");
        assert_eq!(status, 200, "{body}");
        if body.starts_with("degraded") {
            break;
        }
        assert!(Instant::now() < deadline, "never degraded: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(
        dir.join("first.csv"),
        format!("{HEADER}\n{}\n", first.join("\n")),
    )
    .expect("input");
    assert_eq!(rows(node.http, "reach"), truth(&dir, "first.csv", "reach"));
    // Back, with the same data and port; more records.
    own.restart();
    broker.produce(&topic, &messages(second, 3, &mut rng));
    caught_up(&[&node]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(node.http, "/healthz").expect("the node answers");
        if (status, body.trim()) == (200, "ok") {
            break;
        }
        assert!(Instant::now() < deadline, "still {status} {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(
        dir.join("all.csv"),
        format!("{}\n{}\n", HEADER, lines.join("\n")),
    )
    .expect("input");
    assert_eq!(rows(node.http, "reach"), truth(&dir, "all.csv", "reach"));
}

#[test]
fn a_slow_node_holds_its_memory_while_the_topic_holds_far_more() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "slow");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("slow");
    broker.create_topic(&topic, 6);
    // About 400 MB of records: 25 times the node's 16 MiB budget.
    let lines = events(&dir, 4_600_000, 15);
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    assert!(bytes > 390_000_000, "{bytes} bytes");
    let mut rng = Rng(11);
    broker.produce(&topic, &messages(&lines, 6, &mut rng));
    drop(lines);
    // 400 MB a run: not left in the temp dir.
    std::fs::remove_file(dir.join("events.csv")).expect("the events file");
    let mut more = kafka_args(&broker, &topic, &[]);
    more.extend(["--memory-max".into(), "16MiB".into()]);
    let args = node_args(&dir, "d", free_port(), &more);
    // Each worker sleeps 4 ms before each 1 MiB batch: the fold is the
    // bottleneck, so batches are held and partitions paused.
    let node = start_env(&args, &[("CARDINAL_FAILPOINT_FOLD_DELAY_MS", "4")]);
    let mut peak = 0;
    let deadline = Instant::now() + CATCH_UP;
    loop {
        if let Some(rss) = rss(node.http) {
            peak = peak.max(rss);
        }
        if lags(node.http).is_some_and(|lags| lags.iter().all(|&l| l == 0)) {
            break;
        }
        assert!(Instant::now() < deadline, "the node did not catch up");
        std::thread::sleep(Duration::from_millis(50));
    }
    caught_up(&[&node]);
    let (_, metrics) = get(node.http, "/metrics").expect("metrics");
    let held: u64 = metrics
        .lines()
        .find(|l| l.starts_with("cardinal_kafka_batches_held_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("held batches counted");
    assert!(
        held > 0,
        "the engine was never full: the test did not slow it"
    );
    // What the node may hold beside its state: librdkafka's prefetch
    // (32 MiB) and one fetch (16 MiB), a batch built and one held per
    // partition, 8 batches per worker's queue; with the binary, far below
    // the topic's size.
    assert!(
        peak < 250 << 20,
        "the node's memory reached {} MiB reading a topic of {} MiB",
        peak >> 20,
        bytes >> 20
    );
    eprintln!(
        "peak RSS {} MiB reading {} MiB, {held} batches held",
        peak >> 20,
        bytes >> 20
    );
}

#[test]
fn changing_the_number_of_nodes_rebuilds_from_the_topic_as_documented() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let dir = scratch_dir("kafka", "resize");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let topic = kafka::unique_name("resize");
    broker.create_topic(&topic, 6);
    let lines = events(&dir, 8_000, 16);
    let mut rng = Rng(13);
    broker.produce(&topic, &messages(&lines, 6, &mut rng));
    // One node reads everything, then is stopped (docs/kafka.md, step 1).
    let one = node_args(&dir, "one", free_port(), &kafka_args(&broker, &topic, &[]));
    read_all_and_stop(&broker, &one);
    // Steps 2 and 3: its data moved aside, two nodes with fresh data
    // directories, each reading its half from the earliest offset.
    std::fs::rename(dir.join("one"), dir.join("one.aside")).expect("moved aside");
    let ports = [free_port(), free_port()];
    let two: Vec<NodeArgs> = (0..2)
        .map(|i| {
            let peer = format!("http://127.0.0.1:{}", ports[1 - i]);
            node_args(
                &dir,
                &format!("two-{i}"),
                ports[i],
                &kafka_args(
                    &broker,
                    &topic,
                    &["--node", &format!("{i}/2"), "--peers", &peer],
                ),
            )
        })
        .collect();
    let nodes: Vec<Node> = two.iter().map(start).collect();
    caught_up(&nodes.iter().collect::<Vec<_>>());
    std::fs::write(
        dir.join("all.csv"),
        format!("{HEADER}\n{}\n", lines.join("\n")),
    )
    .expect("input");
    let expected = truth(&dir, "all.csv", "reach");
    for node in &nodes {
        assert_eq!(rows(node.http, "reach"), expected);
    }
}
