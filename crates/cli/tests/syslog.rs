//! `cardinal serve --relp` and `--syslog` fed by a real rsyslog, as the
//! design's Summarizer was: rsyslog reads a file of W1 events (`imfile`),
//! puts each line's file offset in MSGID (a unique id per message), and
//! forwards them over RELP with a disk-assisted queue, while the server is
//! killed with `kill -9` at seeded moments and started again. Once rsyslog
//! has sent everything, the server's `reach` rows equal `cardinal run`'s
//! over the same events, byte for byte (counts, exact sums, HyperLogLog
//! estimates): every message counted once. Then the same over plain TCP
//! (`omfwd`, octet-counted), without kills.
//!
//! rsyslog: `CARDINAL_RSYSLOGD` or `/usr/sbin/rsyslogd` with the
//! `rsyslog-relp` module (`common/rsyslog.rs`); without it the tests skip,
//! saying so, unless `CARDINAL_REQUIRE_RSYSLOG=1` (CI), where they fail.

#![allow(
    clippy::cast_possible_truncation,
    reason = "small seeded indexes on a 64-bit test machine"
)]

mod common;
#[path = "common/rsyslog.rs"]
mod rsyslog;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Rng, free_port, get, rss, scratch_dir, summary_rows as rows, truth, w1_events as events,
};
use rsyslog::Rsyslog;

/// W1's schema, as bench/engine declares it.
const SCHEMA: &str = include_str!("../../../bench/engine/schemas/impressions.sql");

/// W1's header line.
const HEADER: &str = "ts,user_id,kind,state,site,provider,campaign,revenue";

/// How long rsyslog and the server may take to deliver and fold every
/// event after the last restart: seconds here (rsyslog retries a
/// suspended action every second); a minute and a half means stuck.
const DELIVERED: Duration = Duration::from_secs(90);

/// A `cardinal serve` child on fixed ports (a restart keeps them, so
/// rsyslog finds it again), killed when dropped.
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

fn start(dir: &Path, http: u16, listener: &[&str]) -> Server {
    start_env(dir, http, listener, &[])
}

fn start_env(dir: &Path, http: u16, listener: &[&str], env: &[(&str, &str)]) -> Server {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .expect("log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args([
            "serve",
            "schema.sql",
            "--data",
            "data",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .args([
            "--threads",
            "1",
            "--snapshot-every",
            "1",
            "--memory-max",
            "256MiB",
        ])
        .args(listener)
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cardinal serve starts");
    // It prints its addresses once it listens.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the server prints its addresses");
    assert!(
        !line.is_empty(),
        "the server did not start:\n{}",
        log_of(dir)
    );
    Server {
        child,
        http: SocketAddr::from(([127, 0, 0, 1], http)),
    }
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
}

/// Appends `lines` to the file rsyslog follows.
fn append(feed: &Path, lines: &[String]) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(feed)
        .expect("the feed");
    let mut text = lines.join("\n");
    text.push('\n');
    file.write_all(text.as_bytes()).expect("appended");
}

/// Waits until the server's `reach` equals `expected` and stays equal
/// for two seconds (a late resend counted twice would show).
fn delivered(server: &Server, expected: &[String], dir: &Path, rsyslog: &Rsyslog, what: &str) {
    let deadline = Instant::now() + DELIVERED;
    let mut since: Option<Instant> = None;
    let mut last: Option<Vec<String>> = None;
    loop {
        let got = rows(server.http, "reach");
        if got.as_deref() == Some(expected) {
            match since {
                Some(at) if at.elapsed() > Duration::from_secs(2) => return,
                Some(_) => {}
                None => since = Some(Instant::now()),
            }
        } else {
            assert!(
                since.is_none(),
                "{what}: the answer changed after it matched: {got:?}"
            );
            since = None;
        }
        if Instant::now() > deadline {
            let got = last.unwrap_or_default();
            let events = |rows: &[String]| -> u64 {
                rows.iter()
                    .filter_map(|r| r.split("\"events\":").nth(1))
                    .filter_map(|r| r.split([',', '}']).next()?.parse::<u64>().ok())
                    .sum()
            };
            let (_, rejects) = get(server.http, "/v1/rejects").unwrap_or_default();
            let (_, metrics) = get(server.http, "/metrics").unwrap_or_default();
            let metrics: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("cardinal_syslog") || l.starts_with("cardinal_events"))
                .collect();
            panic!(
                "{what}: the server's reach never equalled cardinal run's: {} events in {} rows \
                 against {} in {}; first difference: {:?}\nrejects: {rejects}\nmetrics: \
                 {metrics:?}\nserver log:\n{}\nrsyslog log:\n{}",
                events(&got),
                got.len(),
                events(expected),
                expected.len(),
                got.iter().zip(expected).find(|(a, b)| a != b),
                log_of(dir),
                rsyslog.log()
            );
        }
        last = got;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The rsyslog configuration docs/syslog.md ships, as tested: its RELP
/// block with this test's work directory, file and port, and for
/// `omfwd` its action in place of `omrelp`'s.
fn config(work: &Path, feed: &Path, port: u16, omfwd: bool) -> String {
    let doc = include_str!("../../../docs/syslog.md");
    let block = |tag: &str| -> &str {
        let marker = format!("<!-- tested: {tag} -->\n```\n");
        let start = doc.find(&marker).expect("the documented block") + marker.len();
        let len = doc[start..].find("```").expect("its end");
        &doc[start..start + len]
    };
    let mut text = block("relp")
        .replace("/var/spool/rsyslog", &work.display().to_string())
        .replace("/var/log/ads/impressions.csv", &feed.display().to_string())
        .replace("port=\"2514\"", &format!("port=\"{port}\""));
    if omfwd {
        let open = "ruleset(name=\"forward\") {\n";
        let start = text.find(open).expect("the ruleset") + open.len();
        let end = text.rfind("}").expect("its end");
        let action = block("omfwd").replace("port=\"1514\"", &format!("port=\"{port}\""));
        text.replace_range(start..end, &action);
    }
    assert!(text.contains(&format!("port=\"{port}\"")), "{text}");
    text
}

fn relp_run(seed: u64) {
    let Some(binary) = rsyslog::binary() else {
        return;
    };
    let dir = scratch_dir("syslog", &format!("relp-{seed}"));
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let lines = events(&dir, 50_000, seed);
    let (http, relp) = (free_port(), free_port());
    let listener = [
        "--relp".to_owned(),
        format!("impressions=127.0.0.1:{relp}"),
        "--syslog-id".to_owned(),
        "msgid".to_owned(),
    ];
    let listener: Vec<&str> = listener.iter().map(String::as_str).collect();
    let feed = dir.join("feed.csv");
    std::fs::write(&feed, "").expect("feed");
    let work = dir.join("rsyslog");
    std::fs::create_dir_all(&work).expect("work dir");
    std::fs::write(dir.join("rsyslog.conf"), config(&work, &feed, relp, false)).expect("config");
    let mut server = start(&dir, http, &listener);
    let rsyslog = Rsyslog::start(&binary, &dir, &dir.join("rsyslog.conf"));
    let rounds = 4;
    for (round, chunk) in lines.chunks(lines.len().div_ceil(rounds)).enumerate() {
        append(&feed, chunk);
        // kill -9 at a seeded moment while the chunk streams in.
        std::thread::sleep(Duration::from_millis(rng.below(400)));
        server.child.kill().expect("kill -9");
        server.child.wait().expect("reaped");
        eprintln!("seed {seed} round {round}: killed the server");
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        server = start(&dir, http, &listener);
    }
    let all = dir.join("all.csv");
    std::fs::write(&all, format!("{HEADER}\n{}\n", lines.join("\n"))).expect("input");
    let expected = truth(&dir, "all.csv", "reach");
    assert!(expected.len() > 10, "{expected:?}");
    delivered(
        &server,
        &expected,
        &dir,
        &rsyslog,
        &format!("RELP seed {seed}"),
    );
    quantiles_by_rank(&server, &dir, &lines, seed);
    let (_, metrics) = get(server.http, "/metrics").expect("metrics");
    eprintln!(
        "seed {seed}: {}",
        metrics
            .lines()
            .filter(|l| l.starts_with("cardinal_syslog"))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[test]
fn relp_counts_every_message_once_across_kills_seed_1() {
    relp_run(1);
}

#[test]
fn relp_counts_every_message_once_across_kills_seed_2() {
    relp_run(2);
}

#[test]
fn relp_counts_every_message_once_across_kills_seed_3() {
    relp_run(3);
}

#[test]
fn plain_tcp_octet_counted_counts_every_message() {
    let Some(binary) = rsyslog::binary() else {
        return;
    };
    let dir = scratch_dir("syslog", "omfwd");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let lines = events(&dir, 50_000, 7);
    let (http, port) = (free_port(), free_port());
    let listener = [
        "--syslog".to_owned(),
        format!("impressions=127.0.0.1:{port}"),
    ];
    let listener: Vec<&str> = listener.iter().map(String::as_str).collect();
    let feed: PathBuf = dir.join("feed.csv");
    std::fs::write(&feed, "").expect("feed");
    let work = dir.join("rsyslog");
    std::fs::create_dir_all(&work).expect("work dir");
    std::fs::write(dir.join("rsyslog.conf"), config(&work, &feed, port, true)).expect("config");
    let server = start(&dir, http, &listener);
    let rsyslog = Rsyslog::start(&binary, &dir, &dir.join("rsyslog.conf"));
    append(&feed, &lines);
    let all = dir.join("all.csv");
    std::fs::write(&all, format!("{HEADER}\n{}\n", lines.join("\n"))).expect("input");
    let expected = truth(&dir, "all.csv", "reach");
    delivered(&server, &expected, &dir, &rsyslog, "omfwd octet-counted");
}

/// Records the server has folded, from `/metrics`.
fn events_counted(address: SocketAddr) -> Option<u64> {
    let (status, body) = get(address, "/metrics")?;
    (status == 200).then_some(())?;
    body.lines()
        .find(|l| l.starts_with("cardinal_events_accepted_total{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Back-pressure: a fold slowed to a few thousand messages a second
/// holds back `rsp`, so rsyslog's queue grows (past its memory part, on
/// its disk) while cardinal's memory stays flat; once the fold catches
/// up every message is counted.
#[test]
fn a_slow_fold_holds_back_rsp_and_the_queue_grows_on_rsyslogs_disk() {
    let Some(binary) = rsyslog::binary() else {
        return;
    };
    let dir = scratch_dir("syslog", "slow");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let lines = events(&dir, 100_000, 5);
    let (http, relp) = (free_port(), free_port());
    let listener = [
        "--relp".to_owned(),
        format!("impressions=127.0.0.1:{relp}"),
        "--syslog-id".to_owned(),
        "msgid".to_owned(),
    ];
    let listener: Vec<&str> = listener.iter().map(String::as_str).collect();
    let feed = dir.join("feed.csv");
    std::fs::write(&feed, "").expect("feed");
    let work = dir.join("rsyslog");
    std::fs::create_dir_all(&work).expect("work dir");
    // A queue whose memory holds 2,000 messages: the rest goes to disk.
    let text =
        config(&work, &feed, relp, false).replace("queue.size=\"100000\"", "queue.size=\"2000\"");
    assert!(text.contains("queue.size=\"2000\""), "{text}");
    std::fs::write(dir.join("rsyslog.conf"), text).expect("config");
    // Each batch (at most omrelp's window, 128 messages) waits 10 ms
    // before it is folded: about 12,800 messages a second.
    let server = start_env(
        &dir,
        http,
        &listener,
        &[("CARDINAL_FAILPOINT_FOLD_DELAY_MS", "10")],
    );
    let rsyslog = Rsyslog::start(&binary, &dir, &dir.join("rsyslog.conf"));
    append(&feed, &lines);
    let (mut peak, mut spilled) = (0, 0u64);
    let deadline = Instant::now() + DELIVERED;
    loop {
        if let Some(rss) = rss(server.http) {
            peak = peak.max(rss);
        }
        let on_disk: u64 = std::fs::read_dir(&work)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("relp."))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        spilled = spilled.max(on_disk);
        if events_counted(server.http).is_some_and(|n| n >= lines.len() as u64 - 10) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slowed server did not take everything: {:?} of {}\nrsyslog: {}",
            events_counted(server.http),
            lines.len(),
            rsyslog.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "peak RSS {} MiB; rsyslog's queue reached {} KiB on disk",
        peak >> 20,
        spilled >> 10
    );
    assert!(
        spilled > 1 << 20,
        "rsyslog's queue never went to disk ({spilled} bytes): the fold was not the bottleneck"
    );
    // The binary, the runtime, the state of 100,000 events, and at most
    // one connection's 1,024 unacknowledged messages.
    assert!(
        peak < 120 << 20,
        "cardinal's memory reached {} MiB",
        peak >> 20
    );
    // rsyslog may lose a message as its spilled queue resumes
    // (docs/syslog.md); none is counted twice.
    let counted = events_counted(server.http).expect("metrics");
    assert!(
        counted <= lines.len() as u64,
        "{counted} events counted of {} sent",
        lines.len()
    );
}

/// Reads what the server sends until `done` says it is complete, or EOF,
/// within a few seconds.
fn read_until(socket: &mut std::net::TcpStream, done: impl Fn(&str) -> bool) -> String {
    use std::io::Read as _;
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buffer = [0u8; 4096];
    while !done(&String::from_utf8_lossy(&got)) {
        match socket.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buffer[..n]),
            Err(error) => panic!("reading: {error}; got {:?}", String::from_utf8_lossy(&got)),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn frame(txnr: u64, command: &str, data: &str) -> String {
    if data.is_empty() {
        format!("{txnr} {command} 0\n")
    } else {
        format!("{txnr} {command} {} {data}\n", data.len())
    }
}

/// The RELP edge by hand, as librelp speaks it: the open's offers, a
/// message acknowledged only once it is counted, a message that cannot
/// be read acknowledged and kept as a reject (counted by reason), an
/// unknown command answered 500, `close` answered after every
/// acknowledgement, and a frame past the data limit closing the session
/// with `serverclose`. With no rsyslog needed.
#[test]
fn relp_sessions_by_hand() {
    use std::io::Write as _;
    let dir = scratch_dir("syslog", "by-hand");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM s (syslog_hostname TEXT, ts TIMESTAMP, n BIGINT)
           WITH (format = 'csv', time = 'ts');
         CREATE SUMMARY per_host AS SELECT date_trunc('day', ts) AS day, syslog_hostname AS host,
           count(*) AS events, sum(n) AS total FROM s GROUP BY day, host;",
    )
    .expect("schema");
    let (http, relp) = (free_port(), free_port());
    let listener = [
        "--relp".to_owned(),
        format!("s=127.0.0.1:{relp}"),
        "--syslog-id".to_owned(),
        "msgid".to_owned(),
    ];
    let listener: Vec<&str> = listener.iter().map(String::as_str).collect();
    let server = start(&dir, http, &listener);
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", relp)).expect("connects");
    let offers =
        "relp_version=0\nrelp_software=librelp,1.11.0,http://librelp.adiscon.com\ncommands=syslog";
    socket
        .write_all(frame(1, "open", offers).as_bytes())
        .expect("open");
    let opened = read_until(&mut socket, |got| {
        got.ends_with('\n') && got.contains("commands")
    });
    assert!(opened.starts_with("1 rsp "), "{opened}");
    assert!(
        opened.contains("200 OK") && opened.contains("commands=syslog"),
        "{opened}"
    );
    let good = |id: u32, n: u32| {
        format!("<134>1 2026-11-28T10:00:00Z web1 app - {id} - 2026-11-28T09:00:00Z,{n}")
    };
    let mut batch = String::new();
    batch.push_str(&frame(2, "syslog", &good(1, 5)));
    batch.push_str(&frame(
        3,
        "syslog",
        "<134>1 not a timestamp web1 app - 2 - x",
    ));
    batch.push_str(&frame(4, "syslog", &good(3, 7)));
    batch.push_str(&frame(5, "syslog", &good(1, 5)));
    batch.push_str(&frame(6, "starttls", ""));
    socket.write_all(batch.as_bytes()).expect("messages");
    let acks = read_until(&mut socket, |got| got.matches('\n').count() >= 5);
    for txnr in 2..=5 {
        assert!(
            acks.contains(&format!("{txnr} rsp 6 200 OK\n")),
            "txnr {txnr}: {acks}"
        );
    }
    assert!(acks.contains("6 rsp ") && acks.contains(" 500 "), "{acks}");
    // Once acknowledged, counted: 5 and 7 from web1, the resend of id 1
    // not again.
    let (status, body) = common::http_request(
        server.http,
        ("POST", "/v1/sql?format=csv"),
        &[],
        b"SELECT host, events, total FROM per_host",
        Duration::from_secs(10),
    )
    .expect("answers");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "host,events,total\nweb1,2,12\n");
    let (_, rejects) = get(server.http, "/v1/rejects").expect("rejects");
    assert!(
        rejects.contains("RELP message from 127.0.0.1:"),
        "{rejects}"
    );
    let (_, metrics) = get(server.http, "/metrics").expect("metrics");
    assert!(
        metrics.contains("cardinal_syslog_rejects_total{reason=\"timestamp\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("cardinal_syslog"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(metrics.contains("cardinal_syslog_duplicates_total 1"));
    // close: answered, then the server's end.
    socket
        .write_all(frame(7, "close", "").as_bytes())
        .expect("close");
    let closed = read_until(&mut socket, |_| false);
    assert_eq!(closed, "7 rsp 6 200 OK\n");
    // A frame past the data limit: serverclose, then the socket closes.
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", relp)).expect("connects");
    socket
        .write_all(frame(1, "open", offers).as_bytes())
        .expect("open");
    read_until(&mut socket, |got| got.contains("commands"));
    let limit = cardinal_syslog::relp::RELP_DATA_BYTES_MAX;
    socket
        .write_all(format!("2 syslog {} ", limit + 1).as_bytes())
        .expect("a header past the limit");
    let refused = read_until(&mut socket, |_| false);
    assert_eq!(refused, "0 serverclose 0\n");
}

/// The seed's second format: NDJSON bodies, here in BSD (RFC 3164)
/// messages one a line over plain TCP, the event time taken from the
/// syslog header (`time = 'syslog_timestamp'`) and the host from it too.
#[test]
fn bsd_messages_with_json_bodies_over_plain_tcp() {
    use std::io::Write as _;
    let dir = scratch_dir("syslog", "bsd-json");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM clicks (syslog_timestamp TIMESTAMP, syslog_hostname TEXT,
           user_id BIGINT, campaign TEXT)
           WITH (format = 'json', time = 'syslog_timestamp');
         CREATE SUMMARY per_host AS SELECT date_trunc('day', syslog_timestamp) AS day,
           syslog_hostname AS host, count(*) AS clicks, exact_distinct(user_id) AS users
           FROM clicks GROUP BY day, host;",
    )
    .expect("schema");
    let (http, port) = (free_port(), free_port());
    let listener = ["--syslog".to_owned(), format!("clicks=127.0.0.1:{port}")];
    let listener: Vec<&str> = listener.iter().map(String::as_str).collect();
    let server = start(&dir, http, &listener);
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    let mut text = String::new();
    for i in 0..1_000u32 {
        let host = ["edge1", "edge2"][(i % 2) as usize];
        text.push_str(&format!(
            "<134>Nov {:>2} 10:00:{:02} {host} clicks[42]: {{\"user_id\": {}, \"campaign\": \"c{}\"}}\n",
            1 + i % 3,
            i % 60,
            i % 250,
            i % 7
        ));
    }
    // And one that is no JSON object: rejected, the rest counted.
    text.push_str("<134>Nov  1 10:00:00 edge1 clicks: not json\n");
    socket.write_all(text.as_bytes()).expect("sent");
    drop(socket);
    let query = b"SELECT host, clicks, users FROM per_host GROUP BY host ORDER BY host";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = common::http_request(
            server.http,
            ("POST", "/v1/sql?format=csv"),
            &[],
            query,
            Duration::from_secs(10),
        )
        .expect("answers");
        assert_eq!(status, 200, "{body}");
        if body == "host,clicks,users\nedge1,500,125\nedge2,500,125\n" {
            break;
        }
        assert!(Instant::now() < deadline, "{body}\n{}", log_of(&dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, rejects) = get(server.http, "/v1/rejects").expect("rejects");
    assert!(
        rejects.contains("syslog message from 127.0.0.1:"),
        "{rejects}"
    );
}

/// `providers` beside `cardinal run`'s: counts and HyperLogLog estimates
/// equal; each quantile (whose sketch depends on the order messages were
/// folded in) within twice its rank error of the quantile asked, by its
/// rank among the group's exact values.
fn quantiles_by_rank(server: &Server, dir: &Path, lines: &[String], seed: u64) {
    use std::collections::BTreeMap;
    let key = |row: &serde_json::Value| {
        (
            row["day"].as_str().expect("day").to_owned(),
            row["provider"].as_str().expect("provider").to_owned(),
        )
    };
    let truth: BTreeMap<_, serde_json::Value> = truth(dir, "all.csv", "providers")
        .iter()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .map(|row: serde_json::Value| (key(&row), row))
        .collect();
    let got = rows(server.http, "providers").expect("providers");
    assert_eq!(got.len(), truth.len(), "seed {seed}: providers' groups");
    let mut values: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f[2] == "impression" {
            let day = format!("{}T00:00:00Z", &f[0][..10]);
            values
                .entry((day, f[5].to_owned()))
                .or_default()
                .push(f[7].parse().expect("revenue"));
        }
    }
    for line in &got {
        let row: serde_json::Value = serde_json::from_str(line).expect("JSON");
        let key = key(&row);
        let want = &truth[&key];
        assert_eq!(row["events"], want["events"], "seed {seed} {key:?}");
        assert_eq!(row["users"], want["users"], "seed {seed} {key:?}");
        let exact = values.get_mut(&key).expect("the group's values");
        exact.sort_by(f64::total_cmp);
        for (column, q) in [
            ("revenue_p50", 0.5),
            ("revenue_p90", 0.9),
            ("revenue_p99", 0.99),
        ] {
            let name = column.trim_start_matches("revenue_");
            let value = row[column][name].as_f64().expect("a quantile");
            let error = row[column]["rank_error"].as_f64().expect("its rank error");
            // The value's ranks among the exact values: any rank between
            // those below it and those at or below it.
            let below = exact.partition_point(|v| *v < value) as f64;
            let at_or_below = exact.partition_point(|v| *v <= value) as f64;
            let n = exact.len() as f64;
            let slack = 2.0 * error + 1.0 / n;
            assert!(
                below / n - slack <= q && q <= at_or_below / n + slack,
                "seed {seed} {key:?} {column}: {value} ranks {}..{} of {n}, error {error}",
                below / n,
                at_or_below / n
            );
        }
    }
}
