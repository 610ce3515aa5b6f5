//! `cardinal serve` as a user runs it: real processes, real sockets on
//! 127.0.0.1, `kill -9` at seeded random moments while batches stream in
//! with retries; after the last restart every summary equals `cardinal
//! run` over the same input, byte for byte (counts, sums, min, max and
//! HyperLogLog estimates from equal sketches): nothing acknowledged lost,
//! nothing counted twice.

#![allow(
    clippy::cast_possible_truncation,
    reason = "small seeded indexes on a 64-bit test machine"
)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{cardinal, failure, ok, scratch_dir};

const SCHEMA: &str =
    "CREATE STREAM events (ts TIMESTAMP, user_id BIGINT, state TEXT, amount BIGINT)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY by_state AS
  SELECT date_trunc('day', ts) AS day, state, count(*) AS events, sum(amount) AS amount,
         min(amount) AS least, max(amount) AS most, hll(user_id) AS users
  FROM events GROUP BY day, state;
CREATE SUMMARY reach AS
  SELECT date_trunc('hour', ts) AS hour, count(*) AS events, hll(user_id) AS users
  FROM events GROUP BY hour;
";

const HEADER: &str = "ts,user_id,state,amount";

/// A small deterministic generator (xorshift), so runs repeat.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `batches` batches of `rows` records each (no header), a bad line now
/// and then (rejected, and counted once too).
fn batches(seed: u64, batches: usize, rows: usize) -> Vec<String> {
    let mut rng = Rng(seed | 1);
    let states = ["CA", "TX", "NY", "WA", "FL", "OR"];
    (0..batches)
        .map(|b| {
            let mut text = String::new();
            for r in 0..rows {
                let second = (b * rows + r) as u64 * 37 % (3 * 86_400);
                let (d, h, m, s) = (
                    1 + second / 86_400,
                    second / 3600 % 24,
                    second / 60 % 60,
                    second % 60,
                );
                if rng.next().is_multiple_of(997) {
                    text.push_str("not a time,1,CA,1\n");
                    continue;
                }
                let user = rng.next() % 50_000;
                let state = states[(rng.next() % states.len() as u64) as usize];
                let amount = rng.next() % 1000;
                text.push_str(&format!(
                    "2026-11-{d:02}T{h:02}:{m:02}:{s:02}Z,{user},{state},{amount}\n"
                ));
            }
            text
        })
        .collect()
}

struct Server {
    child: Child,
    http: SocketAddr,
}

/// A failing test must not leave its server running.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cardinal serve` on free ports and reads its addresses.
fn start(dir: &Path, data: &str) -> Server {
    start_with(dir, data, &[])
}

fn start_with(dir: &Path, data: &str, more: &[&str]) -> Server {
    let mut args = vec![
        "serve",
        "schema.sql",
        "--http",
        "127.0.0.1:0",
        "--data",
        data,
    ];
    args.extend(["--threads", "2", "--snapshot-every", "1"]);
    if !more.contains(&"--listen") {
        args.extend(["--listen", "127.0.0.1:0"]);
    }
    args.extend(more);
    // Its log goes to a file beside the data, for a failing test to show.
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
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the server prints its addresses");
    // "cardinal serve: native protocol on A, HTTP on http://B, data in D"
    let http = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("no HTTP address in {line:?}; the server's log:\n{log}")
        })
        .parse()
        .expect("an address");
    Server { child, http }
}

/// One HTTP request; `None` when the connection failed (the server is
/// down), else the status and body.
fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<(u16, String)> {
    let mut socket = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).ok()?;
    // A server may answer (413) and close before the body is all sent.
    let _ = socket.write_all(body);
    let mut response = Vec::new();
    socket.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// Posts batch `i` until it is acknowledged (200), whatever restarts in
/// between; its key makes every retry count once.
fn post_until_acked(server: &dyn Fn() -> SocketAddr, i: usize, batch: &str) -> String {
    let key = format!("batch-{i}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "batch {i} never acknowledged");
        let answer = request(
            server(),
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", &key)],
            batch.as_bytes(),
        );
        match answer {
            Some((200, body)) => return body,
            Some((503, _)) | None => std::thread::sleep(Duration::from_millis(20)),
            Some((status, body)) => panic!("batch {i}: {status} {body}"),
        }
    }
}

fn json_of(address: SocketAddr, summary: &str) -> String {
    let (status, body) = request(
        address,
        "GET",
        &format!("/v1/summaries/{summary}?format=json"),
        &[],
        b"",
    )
    .expect("the server answers");
    assert_eq!(status, 200, "{body}");
    body
}

/// `cardinal run --json -` over the same records: the truth, per summary.
fn truth(dir: &Path, all: &[String]) -> Vec<(String, String)> {
    let input = dir.join("all.csv");
    let mut text = format!("{HEADER}\n");
    for batch in all {
        text.push_str(batch);
    }
    std::fs::write(&input, text).expect("input");
    let out = ok(&cardinal(
        dir,
        &[
            "run",
            "schema.sql",
            "all.csv",
            "--json",
            "-",
            "--threads",
            "1",
        ],
    ));
    ["by_state", "reach"]
        .iter()
        .map(|summary| {
            let prefix = format!("{{\"summary\":\"{summary}\"");
            let lines: String = out
                .lines()
                .filter(|l| l.starts_with(&prefix))
                .map(|l| format!("{l}\n"))
                .collect();
            ((*summary).to_owned(), lines)
        })
        .collect()
}

/// A clean stop: SIGTERM, and the exit status must be 0.
fn terminate(server: &mut Server) {
    let pid = server.child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let status = server.child.wait().expect("exit");
    assert!(status.success(), "SIGTERM exit {status:?}");
}

fn kill9(server: &mut Server) {
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
}

#[test]
fn kill_9_at_random_moments_loses_and_doubles_nothing() {
    for seed in [3u64, 11, 29] {
        let dir = scratch_dir("serve", &format!("kill9-{seed}"));
        std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
        let all = batches(seed, 120, 200);
        let truth = truth(&dir, &all);
        let server = std::sync::Arc::new(std::sync::Mutex::new(start(&dir, "data")));
        let address = {
            let server = std::sync::Arc::clone(&server);
            move || server.lock().expect("lock").http
        };
        // A killer thread: SIGKILL at seeded random moments during the
        // ingest (after a random batch, a random few milliseconds more),
        // then restart.
        let posted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let killer = {
            let server = std::sync::Arc::clone(&server);
            let posted = std::sync::Arc::clone(&posted);
            let dir = dir.clone();
            let count = all.len() as u64;
            std::thread::spawn(move || {
                let mut rng = Rng(seed * 7919);
                let mut at: Vec<u64> = (0..3).map(|_| rng.next() % (count - 10)).collect();
                at.sort_unstable();
                for after in at {
                    while (posted.load(std::sync::atomic::Ordering::Acquire) as u64) < after {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(Duration::from_millis(rng.next() % 20));
                    let mut server = server.lock().expect("lock");
                    kill9(&mut server);
                    *server = start(&dir, "data");
                }
            })
        };
        let mut accepted = 0;
        for (i, batch) in all.iter().enumerate() {
            let body = post_until_acked(&address, i, batch);
            assert!(body.contains("\"accepted\":"), "{body}");
            accepted += 1;
            posted.store(i + 1, std::sync::atomic::Ordering::Release);
        }
        killer.join().expect("killer");
        assert_eq!(accepted, all.len());
        // Resend a part once more: all duplicates now.
        for (i, batch) in all.iter().enumerate().skip(seed as usize % 7).step_by(7) {
            let body = post_until_acked(&address, i, batch);
            assert!(
                body.contains("\"duplicate\":true"),
                "batch {i} again: {body}"
            );
        }
        // One more kill and restart: the answer survives it too.
        {
            let mut server = server.lock().expect("lock");
            kill9(&mut server);
            *server = start(&dir, "data");
        }
        for (summary, expected) in &truth {
            let got = json_of(address(), summary);
            assert_eq!(&got, expected, "seed {seed}, summary {summary}");
        }
        let mut server = server.lock().expect("lock");
        terminate(&mut server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A port free now (bound and released), for a server restarted on the
/// same address while `cardinal send` keeps reconnecting to it.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address")
        .port()
}

#[test]
fn cardinal_send_through_kill_9_counts_every_acknowledged_batch_once() {
    for seed in [5u64, 17] {
        let dir = scratch_dir("serve", &format!("send-kill9-{seed}"));
        std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
        let all = batches(seed, 80, 150);
        let truth = truth(&dir, &all);
        let listen = format!("127.0.0.1:{}", free_port());
        let server_args = ["--listen", listen.as_str()];
        let mut server = start_with(&dir, "data", &server_args);
        // The client reads stdin as it comes, so the kills land mid-stream.
        let mut send = Command::new(env!("CARGO_BIN_EXE_cardinal"))
            .args([
                "send",
                "-",
                "--to",
                &listen,
                "--stream",
                "events",
                "--no-header",
                "--batch-kib",
                "4",
                "--ledger",
                "ledger.txt",
                "--give-up-secs",
                "30",
                "--quiet",
            ])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cardinal send starts");
        let mut stdin = send.stdin.take().expect("stdin");
        let mut rng = Rng(seed * 104_729);
        let kills: Vec<usize> = (0..3)
            .map(|_| (rng.next() % all.len() as u64) as usize)
            .collect();
        for (i, batch) in all.iter().enumerate() {
            stdin.write_all(batch.as_bytes()).expect("to send's stdin");
            stdin.flush().expect("flush");
            std::thread::sleep(Duration::from_millis(3));
            if kills.contains(&i) {
                std::thread::sleep(Duration::from_millis(rng.next() % 15));
                kill9(&mut server);
                server = start_with(&dir, "data", &server_args);
            }
        }
        drop(stdin);
        let out = send.wait_with_output().expect("send exits");
        assert!(
            out.status.success(),
            "send: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The ledger: ids 1..=n each acknowledged, the records counted once.
        let ledger = std::fs::read_to_string(dir.join("ledger.txt")).expect("ledger");
        let mut ids = std::collections::BTreeMap::new();
        let mut counted = 0;
        for line in ledger.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let id: u64 = fields[0].parse().expect("id");
            let duplicate = fields[3] == "true" || fields[3] == "1";
            if !duplicate {
                counted += fields[1].parse::<u64>().expect("accepted")
                    + fields[2].parse::<u64>().expect("rejected");
            }
            *ids.entry(id).or_insert(0) += 1;
        }
        let n = *ids.keys().last().expect("acks");
        assert_eq!(ids.len() as u64, n, "every id 1..={n} acknowledged");
        let lines: u64 = all.iter().map(|b| b.lines().count() as u64).sum();
        assert!(counted <= lines, "acks count {counted} of {lines} lines");
        for (summary, expected) in &truth {
            assert_eq!(
                &json_of(server.http, summary),
                expected,
                "seed {seed}, {summary}"
            );
        }
        kill9(&mut server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn day_files_are_run_out_files_of_closed_days() {
    let dir = scratch_dir("serve", "days");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let all = batches(5, 30, 300);
    let mut server = start_with(&dir, "data", &["--out", "served", "--out-lateness", "0"]);
    for (i, batch) in all.iter().enumerate() {
        let at = server.http;
        post_until_acked(&move || at, i, batch);
    }
    terminate(&mut server);
    truth(&dir, &all);
    ok(&cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "all.csv",
            "--out",
            "ran",
            "--threads",
            "1",
        ],
    ));
    // Events reach 2026-11-03: the first two days are closed.
    for day in ["2026-11-01", "2026-11-02"] {
        let served = std::fs::read(dir.join(format!("served/by_state/{day}.csv")))
            .unwrap_or_else(|e| panic!("served {day}: {e}"));
        let ran = std::fs::read(dir.join(format!("ran/by_state/{day}.csv"))).expect("ran");
        assert_eq!(served, ran, "{day}");
    }
    assert!(
        !dir.join("served/by_state/2026-11-03.csv").exists(),
        "an open day is not written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http_limits_and_errors_are_clear() {
    let dir = scratch_dir("serve", "limits");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut server = start(&dir, "data");
    let at = server.http;
    let post = |path: &str, headers: &[(&str, &str)], body: &[u8]| {
        request(at, "POST", path, headers, body).expect("answer")
    };
    let (status, body) = post("/v1/streams/nope", &[], b"x\n");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no stream called nope"), "{body}");
    let (status, body) = post(
        "/v1/streams/events",
        &[("Content-Type", "application/x-ndjson")],
        b"{}\n",
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(
        "/v1/streams/events",
        &[("Content-Type", "text/csv; header=present")],
        b"user_id,ts,state,amount\n",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("declared columns"), "{body}");
    let big = vec![b'x'; (16 << 20) + 1];
    let (status, _) = post("/v1/streams/events", &[], &big);
    assert_eq!(status, 413);
    let (status, body) = post(
        "/v1/streams/events",
        &[("Content-Type", "text/csv; header=present")],
        format!("{HEADER}\n2026-11-01T00:00:00Z,1,CA,5\nbad,1,CA,5\n").as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\":1,\"rejected\":1"), "{body}");
    let (status, body) = request(at, "GET", "/v1/rejects", &[], b"").expect("answer");
    assert_eq!(status, 200);
    assert!(body.contains("not a TIMESTAMP"), "{body}");
    assert!(body.contains("log record 1: stream events"), "{body}");
    let (status, body) = request(at, "GET", "/metrics", &[], b"").expect("answer");
    assert_eq!(status, 200);
    // The text format: every sample under its own family's TYPE line, no
    // family twice.
    let mut family = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().expect("a name").to_owned();
            assert!(seen.insert(family.clone()), "{family} twice");
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().expect("a name");
            let base = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_sum"))
                .or_else(|| name.strip_suffix("_count"))
                .filter(|base| *base == family)
                .unwrap_or(name);
            assert_eq!(base, family, "{line} outside its family");
        }
    }
    for family in [
        "cardinal_engine_queue_capacity_batches{stream=\"events\"}",
        "cardinal_events_accepted_total{stream=\"events\"} 1",
        "cardinal_wal_fsync_seconds_bucket",
        "cardinal_rollup_groups{summary=\"by_state\"} 1",
    ] {
        assert!(body.contains(family), "{family} in\n{body}");
    }
    let (status, body) = request(
        at,
        "GET",
        "/v1/summaries/by_state?where=nope%20%3D%201",
        &[],
        b"",
    )
    .expect("answer");
    assert_eq!(status, 400, "{body}");
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Frames read from a blocking socket, keeping what arrived past one.
struct Frames {
    socket: TcpStream,
    buf: Vec<u8>,
}

impl Frames {
    fn connect(address: &str) -> Frames {
        let socket = TcpStream::connect(address).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Frames {
            socket,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, frames: &[cardinal_server::Frame]) {
        let mut out = Vec::new();
        for frame in frames {
            cardinal_server::encode(frame, &mut out);
        }
        self.socket.write_all(&out).expect("write");
    }

    fn next(&mut self) -> cardinal_server::Frame {
        let decoder = cardinal_server::Decoder::default();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((frame, used)) = decoder.decode(&self.buf).expect("a valid frame") {
                self.buf.drain(..used);
                return frame;
            }
            let n = self.socket.read(&mut chunk).expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[test]
fn a_batch_id_sent_again_on_a_new_connection_counts_once() {
    use cardinal_server::{Batch, BatchId, ClientId, Format, Frame, Hello, StreamName};
    let dir = scratch_dir("serve", "resend");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    let hello = |client: &str| {
        Frame::Hello(Hello {
            client: ClientId::new(client).expect("id"),
            token: None,
        })
    };
    let records = "2026-11-01T00:00:00Z,1,CA,5\n2026-11-01T00:00:01Z,2,CA,7\n";
    let mut acks = Vec::new();
    for _ in 0..2 {
        let mut frames = Frames::connect(&listen);
        let batch = Batch {
            id: BatchId(1),
            stream: StreamName::new("events").expect("stream"),
            format: Format::Csv,
            payload: bytes::Bytes::from_static(records.as_bytes()),
        };
        frames.send(&[hello("resender"), Frame::Batch(batch)]);
        assert!(matches!(frames.next(), Frame::HelloOk(_)));
        match frames.next() {
            Frame::Ack(ack) => acks.push((ack.accepted, ack.duplicate)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(acks, [(2, false), (0, true)]);
    // One connection per client id: a second hello supersedes the first.
    let mut first = Frames::connect(&listen);
    first.send(&[hello("twice")]);
    assert!(matches!(first.next(), Frame::HelloOk(_)));
    let mut second = Frames::connect(&listen);
    second.send(&[hello("twice")]);
    assert!(matches!(second.next(), Frame::HelloOk(_)));
    match first.next() {
        Frame::Error(e) => assert_eq!(e.code, cardinal_server::ErrorCode::Superseded),
        other => panic!("{other:?}"),
    }
    let body = json_of(server.http, "reach");
    assert!(body.contains("\"events\":2"), "{body}");
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_token_guards_both_edges_and_is_required_off_loopback() {
    let dir = scratch_dir("serve", "token");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    // Beyond loopback without a token: refused before anything starts.
    let refused = cardinal(
        &dir,
        &[
            "serve",
            "schema.sql",
            "--listen",
            "0.0.0.0:0",
            "--http",
            "127.0.0.1:0",
        ],
    );
    let stderr = failure(&refused);
    assert!(stderr.contains("requires a token"), "{stderr}");
    std::fs::write(dir.join("token"), "s3cret-token\n").expect("token");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(
        &dir,
        "data",
        &["--listen", listen.as_str(), "--token-file", "token"],
    );
    let row = b"2026-11-01T00:00:00Z,1,CA,5\n";
    let (status, _) = request(server.http, "POST", "/v1/streams/events", &[], row).expect("answer");
    assert_eq!(status, 401);
    let (status, _) = request(
        server.http,
        "POST",
        "/v1/streams/events",
        &[("Authorization", "Bearer s3cret-tokeN")],
        row,
    )
    .expect("answer");
    assert_eq!(status, 401);
    let (status, body) = request(
        server.http,
        "POST",
        "/v1/streams/events",
        &[("Authorization", "Bearer s3cret-token")],
        row,
    )
    .expect("answer");
    assert_eq!(status, 200, "{body}");
    let (status, _) = request(server.http, "GET", "/healthz", &[], b"").expect("answer");
    assert_eq!(status, 200, "health needs no token");
    // The native protocol: a hello without the token is refused.
    std::fs::write(dir.join("rows.csv"), row).expect("rows");
    let out = cardinal(
        &dir,
        &[
            "send",
            "rows.csv",
            "--to",
            &listen,
            "--stream",
            "events",
            "--no-header",
        ],
    );
    let stderr = failure(&out);
    assert!(stderr.contains("token"), "{stderr}");
    let out = cardinal(
        &dir,
        &[
            "send",
            "rows.csv",
            "--to",
            &listen,
            "--stream",
            "events",
            "--no-header",
            "--token-file",
            "token",
        ],
    );
    ok(&out);
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_memory_budget_holds_over_the_network() {
    let dir = scratch_dir("serve", "budget");
    // One group per user: the budget is reached after a few thousand.
    let schema = SCHEMA.replace(
        "CREATE SUMMARY reach AS",
        "CREATE SUMMARY per_user AS SELECT user_id, count(*) AS events, hll(state) AS states \
         FROM events GROUP BY user_id;\nCREATE SUMMARY reach AS",
    );
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    let mut server = start_with(&dir, "data", &["--memory-max", "1MiB"]);
    let mut refused = None;
    for (i, batch) in batches(9, 40, 2_000).iter().enumerate() {
        let key = format!("b{i}");
        let (status, body) = request(
            server.http,
            "POST",
            "/v1/streams/events",
            &[("Idempotency-Key", &key)],
            batch.as_bytes(),
        )
        .expect("an answer");
        if status != 200 {
            refused = Some((status, body));
            break;
        }
    }
    let (status, body) = refused.expect("the budget is reached");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--memory-max"), "{body}");
    assert!(body.contains("per_user"), "{body}");
    // The server stops (exit status 1) and says why.
    let status = server.child.wait().expect("exit");
    assert!(!status.success());
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("--memory-max"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn retention_bounds_a_served_state_across_restarts() {
    let dir = scratch_dir("serve", "retention");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut server = start_with(&dir, "data", &["--retention-days", "1"]);
    for (i, batch) in batches(13, 30, 300).iter().enumerate() {
        let at = server.http;
        post_until_acked(&move || at, i, batch);
    }
    let days = |server: &Server| {
        let body = json_of(server.http, "by_state");
        let mut days: Vec<String> = body
            .lines()
            .filter_map(|l| l.split("\"day\":\"").nth(1))
            .map(|rest| rest[..10].to_owned())
            .collect();
        days.sort();
        days.dedup();
        days
    };
    let kept = days(&server);
    assert!(!kept.is_empty());
    assert!(
        !kept.contains(&"2026-11-01".to_owned()),
        "the first day is past the retention: {kept:?}"
    );
    kill9(&mut server);
    let mut server = start_with(&dir, "data", &["--retention-days", "1"]);
    assert_eq!(days(&server), kept, "the same days after a restart");
    // A clean stop writes a snapshot; a start under other limits than it
    // was saved under is refused, not silently run under the old ones.
    terminate(&mut server);
    let refused = refused_within(
        &dir,
        &[
            "serve",
            "schema.sql",
            "--data",
            "data",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--retention-days",
            "2",
        ],
    );
    assert!(refused.contains("--retention-days"), "{refused}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `cardinal ARGS` expecting it to fail at start: its stderr; a
/// panic if it still runs after 30 s (it is killed first).
fn refused_within(dir: &Path, args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cardinal starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(!status.success(), "it was meant to be refused");
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut stderr)
                .expect("read");
            return stderr;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cardinal {args:?} was not refused within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
