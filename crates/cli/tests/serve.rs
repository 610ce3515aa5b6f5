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

use common::{cardinal, failure, free_port, ok, scratch_dir};

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
    start_env(dir, data, more, &[])
}

/// [`start_with`] under more environment variables.
fn start_env(dir: &Path, data: &str, more: &[&str], env: &[(&str, &str)]) -> Server {
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
        .envs(env.iter().copied())
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
    common::http_request(
        address,
        (method, path),
        headers,
        body,
        Duration::from_secs(30),
    )
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
        for line in ledger.lines().filter(|l| !l.starts_with('#')) {
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
        b"user_id,ts,state\n2026-11-01T00:00:00Z,1,CA\n",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("amount"), "the missing column named: {body}");
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
            header: false,
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
    refused_within_env(dir, args, &[])
}

/// [`refused_within`] under more environment variables.
fn refused_within_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .envs(env.iter().copied())
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

fn hello_frame(client: &str) -> cardinal_server::Frame {
    cardinal_server::Frame::Hello(cardinal_server::Hello {
        client: cardinal_server::ClientId::new(client).expect("id"),
        token: None,
    })
}

fn batch_frame(id: u64, records: &'static str) -> cardinal_server::Frame {
    cardinal_server::Frame::Batch(cardinal_server::Batch {
        id: cardinal_server::BatchId(id),
        stream: cardinal_server::StreamName::new("events").expect("stream"),
        format: cardinal_server::Format::Csv,
        header: false,
        payload: bytes::Bytes::from_static(records.as_bytes()),
    })
}

/// Issue 43, item 3: 4,100 throwaway client ids (one empty batch each)
/// evicted a victim's entry from the 4,096-client table, and the
/// victim's resend of an acknowledged batch was counted again. Now the
/// flood waits (`unavailable`) while the table is full of recent
/// clients, and the resend is a duplicate.
#[test]
fn a_flood_of_client_ids_cannot_make_a_resend_count_twice() {
    use cardinal_server::{ErrorCode, Frame};
    let dir = scratch_dir("serve", "flood");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    let records = "2026-11-01T00:00:00Z,1,CA,5\n2026-11-01T00:00:01Z,2,CA,7\n";
    let mut victim = Frames::connect(&listen);
    victim.send(&[hello_frame("victim"), batch_frame(1, records)]);
    assert!(matches!(victim.next(), Frame::HelloOk(_)));
    match victim.next() {
        Frame::Ack(ack) => assert_eq!((ack.accepted, ack.duplicate), (2, false)),
        other => panic!("{other:?}"),
    }
    drop(victim);
    // The flood, from 8 threads: each id says hello and sends one empty
    // batch on a connection of its own.
    let flood = 4100;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let listen = listen.clone();
            std::thread::spawn(move || {
                let (mut acked, mut refused) = (0, 0);
                for n in (t..flood).step_by(8) {
                    let mut frames = Frames::connect(&listen);
                    frames.send(&[hello_frame(&format!("flood-{n}")), batch_frame(1, "")]);
                    match frames.next() {
                        Frame::HelloOk(_) => match frames.next() {
                            Frame::Ack(_) => acked += 1,
                            Frame::Error(e) => {
                                assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
                                refused += 1;
                            }
                            other => panic!("{other:?}"),
                        },
                        Frame::Error(e) => {
                            assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
                            assert!(e.message.contains("retry after"), "{}", e.message);
                            refused += 1;
                        }
                        other => panic!("{other:?}"),
                    }
                }
                (acked, refused)
            })
        })
        .collect();
    let (mut acked, mut refused) = (0, 0);
    for thread in threads {
        let (a, r) = thread.join().expect("a flood thread");
        acked += a;
        refused += r;
    }
    assert_eq!(acked + refused, flood);
    // The victim holds one of the 4,096 places: 4,095 flood ids got in.
    assert_eq!(acked, 4095);
    // The victim resends its acknowledged batch: a duplicate.
    let mut victim = Frames::connect(&listen);
    victim.send(&[hello_frame("victim"), batch_frame(1, records)]);
    match victim.next() {
        Frame::HelloOk(ok) => assert_eq!(ok.highest, Some(cardinal_server::BatchId(1))),
        other => panic!("{other:?}"),
    }
    match victim.next() {
        Frame::Ack(ack) => assert_eq!((ack.accepted, ack.duplicate), (0, true)),
        other => panic!("{other:?}"),
    }
    let body = json_of(server.http, "reach");
    assert!(body.contains("\"events\":2"), "counted once: {body}");
    let (_, metrics) = request(server.http, "GET", "/metrics", &[], b"").expect("answer");
    assert!(
        metrics.contains("cardinal_dedup_evictions_total 0"),
        "{metrics}"
    );
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 4: an `Idempotency-Key` reused with another body was
/// answered 200 and the new body dropped. Keys are scoped to the stream
/// and checked against a digest of the body: another body is 422.
#[test]
fn an_idempotency_key_reused_with_another_body_is_refused() {
    let dir = scratch_dir("serve", "key-reuse");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut server = start(&dir, "data");
    let post = |body: &str| {
        request(
            server.http,
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", "k-1")],
            body.as_bytes(),
        )
        .expect("answer")
    };
    let first = "2026-11-01T00:00:00Z,1,CA,5\n";
    let other = "2026-11-01T00:00:00Z,2,TX,9\n2026-11-01T00:00:01Z,3,TX,9\n";
    let (status, body) = post(first);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"duplicate\":false"), "{body}");
    let (status, body) = post(other);
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("idempotency key reused with a different request"),
        "{body}"
    );
    let (status, body) = post(first);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"duplicate\":true"), "{body}");
    // After a restart (the key rebuilt from the log), the same answers.
    kill9(&mut server);
    server = start(&dir, "data");
    let post = |body: &str| {
        request(
            server.http,
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", "k-1")],
            body.as_bytes(),
        )
        .expect("answer")
    };
    assert_eq!(post(other).0, 422);
    assert!(post(first).1.contains("\"duplicate\":true"));
    let body = json_of(server.http, "reach");
    assert!(body.contains("\"events\":1"), "counted once: {body}");
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 12: connections that never said a hello (or dribbled a
/// byte now and then) held every native slot, and a refusal at the limit
/// carried code 11 where the protocol lists 14 `too_many_connections`.
#[test]
fn silent_connections_are_closed_and_cannot_take_every_slot() {
    use cardinal_server::{ErrorCode, Frame};
    let dir = scratch_dir("serve", "silent");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    // The global limit: three silent connections fill it; the fourth is
    // refused with code 14.
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(
        &dir,
        "data",
        &["--listen", listen.as_str(), "--connections", "3"],
    );
    let started = Instant::now();
    let mut silent: Vec<Frames> = (0..3).map(|_| Frames::connect(&listen)).collect();
    // One of them dribbles a byte of a hello every half second.
    let mut hello = Vec::new();
    cardinal_server::encode(&hello_frame("slow"), &mut hello);
    let dribbler = {
        let mut socket = silent[2].socket.try_clone().expect("clone");
        std::thread::spawn(move || {
            for byte in hello.iter().take(20) {
                if socket.write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut refused = Frames::connect(&listen);
    match refused.next() {
        Frame::Error(e) => assert_eq!(e.code, ErrorCode::TooManyConnections, "{}", e.message),
        other => panic!("{other:?}"),
    }
    assert_eq!(ErrorCode::TooManyConnections.number(), 14);
    // Each silent connection, the dribbler too, is told `idle` and closed
    // once the hello deadline (5 s) passes.
    for frames in &mut silent {
        match frames.next() {
            Frame::Error(e) => {
                assert_eq!(e.code, ErrorCode::Idle, "{}", e.message);
                assert!(e.message.contains("no hello"), "{}", e.message);
            }
            other => panic!("{other:?}"),
        }
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(4), "{waited:?}");
    assert!(waited < Duration::from_secs(9), "{waited:?}");
    dribbler.join().expect("dribbler");
    drop(silent);
    // The slots are free again: a client is served.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut frames = Frames::connect(&listen);
        frames.send(&[
            hello_frame("real"),
            batch_frame(1, "2026-11-01T00:00:00Z,1,CA,5\n"),
        ]);
        match frames.next() {
            Frame::HelloOk(_) => {
                assert!(matches!(frames.next(), Frame::Ack(_)));
                break;
            }
            Frame::Error(e) if e.code == ErrorCode::TooManyConnections => {
                assert!(Instant::now() < deadline, "slots never freed");
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("{other:?}"),
        }
    }
    kill9(&mut server);
    // The per-address limit: 64 connections from 127.0.0.1, then 14,
    // while the server's own limit (256) has room.
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    let held: Vec<Frames> = (0..64).map(|_| Frames::connect(&listen)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut refused = Frames::connect(&listen);
    match refused.next() {
        Frame::Error(e) => {
            assert_eq!(e.code, ErrorCode::TooManyConnections);
            assert!(e.message.contains("this address"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    drop(held);
    kill9(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sum of every `"name":N` in JSON lines.
fn sum_of(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    json.split(&key)
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().expect("a count")
        })
        .sum()
}

/// Waits up to `within` for the server to exit; its status.
fn exits_within(server: &mut Server, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = server.child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the server still runs {within:?} later"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The README's serving commands, as written, at a user's size: 50,000
/// generated impressions (4.4 MB) through `cardinal send` and through
/// one `curl --data-binary` of the whole file (a body over 2 MiB killed
/// the server and broke its data directory for good). Both count, and
/// survive a `kill -9` and a replay of the large record.
#[test]
fn the_readme_serving_commands_run_as_written() {
    let dir = scratch_dir("serve", "readme");
    let schema =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/engine/schemas/impressions.sql");
    std::fs::copy(&schema, dir.join("impressions.sql")).expect("schema");
    ok(&cardinal(
        &dir,
        &["gen", "impressions", "--events", "50000", "-o", "imp.csv"],
    ));
    let file = std::fs::read(dir.join("imp.csv")).expect("imp.csv");
    assert!(file.len() > 4 << 20, "{} bytes", file.len());
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["--listen", listen.as_str()];
    let mut server = start_with_schema(&dir, "impressions.sql", &args);
    ok(&cardinal(
        &dir,
        &[
            "send",
            "imp.csv",
            "--to",
            &listen,
            "--stream",
            "impressions",
        ],
    ));
    let (status, body) = request(
        server.http,
        "POST",
        "/v1/streams/impressions",
        &[
            ("Content-Type", "text/csv; header=present"),
            ("Idempotency-Key", "b1"),
        ],
        &file,
    )
    .expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\":50000,\"rejected\":0"), "{body}");
    let truth = ok(&cardinal(
        &dir,
        &["run", "impressions.sql", "imp.csv", "--json", "-"],
    ));
    let reach = |truth: &str| {
        truth
            .lines()
            .filter(|l| l.starts_with("{\"summary\":\"reach\""))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let expected = 2 * sum_of(&reach(&truth), "events");
    assert!(expected > 0);
    let served = |server: &Server| sum_of(&json_of(server.http, "reach"), "events");
    assert_eq!(served(&server), expected);
    let http = format!("http://{}", server.http);
    let table = ok(&cardinal(
        &dir,
        &[
            "query",
            "reach",
            "--server",
            &http,
            "--by",
            "state",
            "--all-buckets",
        ],
    ));
    assert!(table.contains("CA"), "{table}");
    // The README's SQL, as written: the top ten states, and weeks.
    let top = ok(&cardinal(
        &dir,
        &[
            "query",
            "SELECT state, users, users_lower, users_upper FROM reach GROUP BY state ORDER BY users DESC LIMIT 10",
            "--server",
            &http,
        ],
    ));
    assert!(top.ends_with("(10 rows)\n"), "{top}");
    let (status, weekly) = request(
        server.http,
        "POST",
        "/v1/sql?format=csv",
        &[],
        b"SELECT date_trunc('week', day) AS week, events, users FROM reach GROUP BY 1",
    )
    .expect("an answer");
    assert_eq!(status, 200, "{weekly}");
    let weeks: u64 = weekly
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
                .expect("events")
        })
        .sum();
    assert_eq!(weeks, expected, "{weekly}");
    let (status, body) = request(
        server.http,
        "GET",
        "/v1/overlap?summary=reach&a=state%3D%27CA%27&b=state%3D%27TX%27",
        &[],
        b"",
    )
    .expect("an answer");
    assert_eq!(status, 200, "{body}");
    let (status, _) = request(server.http, "GET", "/metrics", &[], b"").expect("an answer");
    assert_eq!(status, 200);
    // The large record replays: a restart serves the same answers.
    kill9(&mut server);
    let mut server = start_with_schema(&dir, "impressions.sql", &args);
    assert_eq!(served(&server), expected);
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`start_with`] for a schema file of another name.
fn start_with_schema(dir: &Path, schema: &str, more: &[&str]) -> Server {
    std::fs::copy(dir.join(schema), dir.join("schema.sql")).expect("schema");
    start_with(dir, "cardinal-data", more)
}

/// Bodies and frames of every size an edge admits fold, CSV and NDJSON:
/// 1 byte, the largest body (16 MiB) and one byte more (413), and a
/// native batch filling the advertised frame; a restart replays them all.
#[test]
fn bodies_and_frames_of_every_admitted_size_fold() {
    use cardinal_server::{Batch, BatchId, ClientId, Format, Frame, Hello, StreamName};
    const BOTH: &str =
        "CREATE STREAM c (ts TIMESTAMP, user_id BIGINT) WITH (format = 'csv', time = 'ts');
CREATE STREAM j (ts TIMESTAMP, user_id BIGINT) WITH (format = 'json', time = 'ts');
CREATE SUMMARY cs AS SELECT date_trunc('day', ts) AS day, count(*) AS events FROM c GROUP BY day;
CREATE SUMMARY js AS SELECT date_trunc('day', ts) AS day, count(*) AS events FROM j GROUP BY day;
";
    let dir = scratch_dir("serve", "sizes");
    std::fs::write(dir.join("schema.sql"), BOTH).expect("schema");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    let body_max = 16 << 20;
    // Records of one size each, to fill a body to the byte.
    let fill = |record: &str, bytes: usize| -> (Vec<u8>, u64) {
        let n = bytes / record.len();
        let mut out = record.repeat(n).into_bytes();
        let short = bytes - out.len();
        // Pad the last record's newline run to the exact size.
        out.extend(std::iter::repeat_n(b'\n', short));
        (out, n as u64)
    };
    let csv = "2026-11-01T00:00:00Z,1234567\n";
    let json = "{\"ts\":\"2026-11-01T00:00:00Z\",\"user_id\":1234567}\n";
    let mut expected = [0u64; 2];
    for (k, (stream, record, kind)) in [("c", csv, "text/csv"), ("j", json, "application/x-ndjson")]
        .into_iter()
        .enumerate()
    {
        for size in [1, body_max, body_max + 1] {
            let (body, n) = if size == 1 {
                (b"\n".to_vec(), 0)
            } else {
                fill(record, size)
            };
            assert_eq!(body.len(), size);
            let (status, answer) = request(
                server.http,
                "POST",
                &format!("/v1/streams/{stream}"),
                &[("Content-Type", kind)],
                &body,
            )
            .expect("an answer");
            if size > body_max {
                assert_eq!(status, 413, "{answer}");
                assert!(answer.contains("cardinal send"), "{answer}");
            } else {
                assert_eq!(status, 200, "{size} bytes: {answer}");
                assert!(
                    answer.contains(&format!("\"accepted\":{n},\"rejected\":0")),
                    "{answer}"
                );
                expected[k] += n;
            }
        }
    }
    // A native batch as large as the advertised frame allows.
    let mut frames = Frames::connect(&listen);
    frames.send(&[Frame::Hello(Hello {
        client: ClientId::new("large").expect("id"),
        token: None,
    })]);
    let Frame::HelloOk(ok_frame) = frames.next() else {
        panic!("no hello ok");
    };
    let frame_max = ok_frame.limits.frame_bytes_max as usize;
    let batch = |payload: Vec<u8>| Batch {
        id: BatchId(1),
        stream: StreamName::new("c").expect("stream"),
        format: Format::Csv,
        header: false,
        payload: bytes::Bytes::from(payload),
    };
    let mut empty = Vec::new();
    cardinal_server::encode(&Frame::Batch(batch(Vec::new())), &mut empty);
    let (payload, n) = fill(csv, frame_max - empty.len());
    frames.send(&[Frame::Batch(batch(payload))]);
    match frames.next() {
        Frame::Ack(ack) => assert_eq!(ack.accepted, n),
        other => panic!("{other:?}"),
    }
    expected[0] += n;
    let counts = |server: &Server| {
        [
            sum_of(&json_of(server.http, "cs"), "events"),
            sum_of(&json_of(server.http, "js"), "events"),
        ]
    };
    assert_eq!(counts(&server), expected);
    kill9(&mut server);
    let mut server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    assert_eq!(counts(&server), expected, "after a replay");
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A batch that makes the engine fail (here a failpoint's panic, as a
/// bug would): the request fails, `/healthz` says why, the process exits
/// non-zero within seconds; the next start refuses, naming the log
/// record and who sent it, rather than crash in a loop; `--repair` sets
/// the record aside in a file and starts with every acknowledged batch,
/// and the sender's retry is answered as a duplicate.
#[test]
fn a_batch_the_engine_cannot_fold_stops_the_server_and_repair_sets_it_aside() {
    let dir = scratch_dir("serve", "unfoldable");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let failpoint = [("CARDINAL_FAILPOINT_FOLD_PANIC", "POISON")];
    let mut server = start_env(&dir, "data", &[], &failpoint);
    let good = "2026-11-01T00:00:00Z,1,CA,5\n2026-11-01T00:00:01Z,2,TX,7\n";
    let post = |server: &Server, key: &str, body: &str| {
        request(
            server.http,
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", key)],
            body.as_bytes(),
        )
    };
    let (status, body) = post(&server, "good", good).expect("an answer");
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        post(&server, "bad", "2026-11-01T00:00:02Z,3,POISON,1\n").expect("an answer");
    assert_eq!(status, 503, "{body}");
    let (status, why) = request(server.http, "GET", "/healthz", &[], b"").expect("an answer");
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("panicked"), "{why}");
    let started = Instant::now();
    let status = exits_within(&mut server, Duration::from_secs(15));
    assert!(!status.success(), "{status:?}");
    eprintln!("exited {:?} after the failure", started.elapsed());
    // The next start meets the record and stops, naming it, in bounded
    // time (the failpoint still on: the record is still one it cannot fold).
    let stderr = refused_within_env(
        &dir,
        &[
            "serve",
            "schema.sql",
            "--data",
            "data",
            "--http",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
        ],
        &failpoint,
    );
    assert!(
        stderr.contains("log record 2")
            && stderr.contains("idempotency key bad")
            && stderr.contains("--repair"),
        "{stderr}"
    );
    // --repair sets it aside and starts; the retry is a duplicate.
    let mut server = start_env(&dir, "data", &["--repair"], &failpoint);
    let aside =
        std::fs::read(dir.join("data/set-aside-00000000000000000002.record")).expect("set aside");
    let aside = String::from_utf8_lossy(&aside);
    assert!(
        aside.contains("from idempotency key bad") && aside.contains("POISON"),
        "{aside}"
    );
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("set aside log record 2"), "{log}");
    let (status, body) =
        post(&server, "bad", "2026-11-01T00:00:02Z,3,POISON,1\n").expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"duplicate\":true"), "{body}");
    assert_eq!(sum_of(&json_of(server.http, "reach"), "events"), 2);
    terminate(&mut server);
    // Later starts skip it too, without --repair.
    let mut server = start_env(&dir, "data", &[], &failpoint);
    assert_eq!(sum_of(&json_of(server.http, "reach"), "events"), 2);
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cardinal send` pointed at the HTTP port fails at once, saying so and
/// naming the native port, instead of reading `HTTP` as a frame length
/// (1,347,703,889 bytes) and retrying for a minute.
#[test]
fn send_to_the_http_port_says_so_at_once() {
    let dir = scratch_dir("serve", "wrong-port");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    std::fs::write(
        dir.join("events.csv"),
        format!("{HEADER}\n2026-11-01T00:00:00Z,1,CA,5\n"),
    )
    .expect("input");
    let mut server = start(&dir, "data");
    let http = server.http.to_string();
    let started = Instant::now();
    let output = cardinal(
        &dir,
        &["send", "events.csv", "--to", &http, "--stream", "events"],
    );
    let stderr = failure(&output);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains("HTTP port") && stderr.contains("--listen"),
        "{stderr}"
    );
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cardinal run --json -` over `file` (its header read by name): the
/// truth, per summary.
fn truth_of_file(dir: &Path, file: &str) -> Vec<(String, String)> {
    let out = ok(&cardinal(
        dir,
        &["run", "schema.sql", file, "--json", "-", "--threads", "1"],
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

/// `batch`'s records (in the declared order `ts,user_id,state,amount`)
/// with their columns as `order` names them; `extra` is a column the
/// schema does not declare.
fn reordered(batch: &str, order: &[&str]) -> String {
    let mut text = String::new();
    for line in batch.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let out: Vec<String> = order
            .iter()
            .map(|name| match *name {
                "ts" => fields[0].to_owned(),
                "user_id" => fields[1].to_owned(),
                "state" => fields[2].to_owned(),
                "amount" => fields[3].to_owned(),
                _ => format!("x{}", fields[1]),
            })
            .collect();
        text.push_str(&out.join(","));
        text.push('\n');
    }
    text
}

/// Issue 43, item 2: a header is matched by name, in any order, on every
/// edge. `cardinal send` of a file whose header lists the columns in
/// another order (and one the schema lacks) and an HTTP body with
/// `header=present` in a third order are counted as `cardinal run`
/// counts the same records, before and after a restart that replays the
/// log; a file whose header lacks a declared column is refused, naming
/// it, and nothing of it is counted. Before, `send` read the columns by
/// position (states counted as amounts) and HTTP refused any other order.
#[test]
fn a_header_in_another_order_is_read_by_name_on_every_edge() {
    let dir = scratch_dir("serve", "header-order");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let all = batches(11, 30, 40);
    let truth = truth(&dir, &all);
    let file_order = ["state", "amount", "extra", "ts", "user_id"];
    let mut file = format!("{}\n", file_order.join(","));
    for batch in &all[..20] {
        file.push_str(&reordered(batch, &file_order));
    }
    std::fs::write(dir.join("reordered.csv"), &file).expect("input");
    // `cardinal run` reads the reordered file by name: the same answer.
    let mut run_file = file.clone();
    let body_order = ["amount", "user_id", "ts", "state"];
    for batch in &all[20..] {
        run_file.push_str(&reordered(batch, &file_order));
    }
    std::fs::write(dir.join("run.csv"), &run_file).expect("input");
    assert_eq!(truth_of_file(&dir, "run.csv"), truth, "run reads by name");

    let listen = format!("127.0.0.1:{}", free_port());
    let server_args = ["--listen", listen.as_str()];
    let mut server = start_with(&dir, "data", &server_args);
    // Small batches: every one after the first carries the header.
    let send = |file: &str| {
        cardinal(
            &dir,
            &[
                "send",
                file,
                "--to",
                &listen,
                "--stream",
                "events",
                "--batch-kib",
                "1",
                "--give-up-secs",
                "20",
            ],
        )
    };
    let stderr = ok_stderr(&send("reordered.csv"));
    assert!(stderr.contains(", 0 refused"), "{stderr}");
    let mut body = format!("{}\n", body_order.join(","));
    for batch in &all[20..] {
        body.push_str(&reordered(batch, &body_order));
    }
    let (status, answer) = request(
        server.http,
        "POST",
        "/v1/streams/events",
        &[("Content-Type", "text/csv; header=present")],
        body.as_bytes(),
    )
    .expect("answer");
    assert_eq!(status, 200, "{answer}");
    for (summary, expected) in &truth {
        assert_eq!(&json_of(server.http, summary), expected, "{summary}");
    }
    // A header without `amount`: refused before anything is counted.
    let mut lacking = "ts,user_id,state\n".to_owned();
    for batch in &all[..3] {
        lacking.push_str(&reordered(batch, &["ts", "user_id", "state"]));
    }
    std::fs::write(dir.join("lacking.csv"), lacking).expect("input");
    let output = send("lacking.csv");
    let stderr = failure(&output);
    assert!(stderr.contains("bad_format"), "{stderr}");
    assert!(
        stderr.contains("amount"),
        "the missing column named: {stderr}"
    );
    // Replay reads each batch under its own header.
    kill9(&mut server);
    let server = start_with(&dir, "data", &server_args);
    for (summary, expected) in &truth {
        assert_eq!(
            &json_of(server.http, summary),
            expected,
            "replayed {summary}"
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 15: `cardinal send --ledger` killed part way and run
/// again, the same command, counts every record once: the rerun skips
/// what the ledger shows acknowledged and resends the rest under the same
/// ids (a batch made durable whose ack the killed client never read is
/// answered as a duplicate). Before, the rerun counted every batch the
/// first run had acknowledged a second time.
#[test]
fn a_send_killed_part_way_and_run_again_with_its_ledger_counts_once() {
    let dir = scratch_dir("serve", "send-resume");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let all = batches(23, 400, 40);
    let truth = truth(&dir, &all);
    let mut file = format!("{HEADER}\n");
    for batch in &all {
        file.push_str(batch);
    }
    std::fs::write(dir.join("events.csv"), &file).expect("input");
    let listen = format!("127.0.0.1:{}", free_port());
    let server = start_with(&dir, "data", &["--listen", listen.as_str()]);
    let args = [
        "send",
        "events.csv",
        "--to",
        listen.as_str(),
        "--stream",
        "events",
        "--batch-kib",
        "1",
        "--window",
        "1",
        "--ledger",
        "ledger.txt",
        "--give-up-secs",
        "20",
    ];
    let mut send = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cardinal send starts");
    let acks = || {
        std::fs::read_to_string(dir.join("ledger.txt"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while acks() < 20 {
        assert!(Instant::now() < deadline, "no acks from the first send");
        assert!(
            send.try_wait().expect("wait").is_none(),
            "the first send finished before it was killed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    send.kill().expect("SIGKILL the send");
    send.wait().expect("reaped");
    let acked_first = acks();
    let output = cardinal(&dir, &args);
    let stderr = ok_stderr(&output);
    assert!(
        stderr.contains(&format!("skipped {acked_first} batches")),
        "{stderr}"
    );
    for (summary, expected) in &truth {
        assert_eq!(&json_of(server.http, summary), expected, "{summary}");
    }
    // The same command once more: nothing left to send, nothing counted.
    let stderr = ok_stderr(&cardinal(&dir, &args));
    assert!(stderr.contains("acknowledged 0 batches"), "{stderr}");
    for (summary, expected) in &truth {
        assert_eq!(&json_of(server.http, summary), expected, "{summary}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Asserts that the run succeeded and returns its stderr.
fn ok_stderr(output: &std::process::Output) -> String {
    ok(output);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Issue 43, item 14: `cardinal query` (its HTTP through `ureq`) prints
/// the live answer the server gives, and says who did not answer when
/// nothing listens.
#[test]
fn query_prints_the_live_answer() {
    let dir = scratch_dir("serve", "query");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let server = start(&dir, "data");
    let all = batches(3, 4, 50);
    for (i, batch) in all.iter().enumerate() {
        post_until_acked(&|| server.http, i, batch);
    }
    let address = format!("http://{}", server.http);
    for summary in ["by_state", "reach"] {
        let out = ok(&cardinal(
            &dir,
            &[
                "query",
                summary,
                "--server",
                &address,
                "--format",
                "json",
                "--timeout",
                "10",
            ],
        ));
        assert_eq!(out, json_of(server.http, summary), "{summary}");
    }
    let stderr = failure(&cardinal(&dir, &["query", "nope", "--server", &address]));
    assert!(stderr.contains("the server answered 4"), "{stderr}");
    drop(server);
    let gone = format!("http://127.0.0.1:{}", free_port());
    let stderr = failure(&cardinal(&dir, &["query", "reach", "--server", &gone]));
    assert!(stderr.contains("127.0.0.1"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 7: a second server must not write a data directory a
/// first one serves, even once a file in it that served as the lock is
/// unlinked (a tmp cleaner, a wrong `rm`): the lock is the directory's.
#[test]
fn a_second_server_is_refused_even_after_the_lock_file_is_unlinked() {
    let dir = scratch_dir("serve", "second-server");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut first = start(&dir, "data");
    let batch = "ts,user_id,state,amount\n2026-11-01T00:00:00Z,1,CA,5\n";
    post_until_acked(&|| first.http, 0, batch);
    // Whatever lock file the data directory holds goes, as a cleaner would
    // remove it (builds before this one locked `data/LOCK`).
    for entry in std::fs::read_dir(dir.join("data")).expect("data") {
        let path = entry.expect("entry").path();
        if path.file_name().is_some_and(|n| n == "LOCK") {
            std::fs::remove_file(&path).expect("unlink LOCK");
        }
    }
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
        ],
    );
    assert!(refused.contains("another cardinal serve"), "{refused}");
    // The first one is unharmed: it still acknowledges, and its log holds
    // only its own records.
    post_until_acked(&|| first.http, 1, batch);
    let body = json_of(first.http, "reach");
    assert!(body.contains("\"events\":2"), "{body}");
    terminate(&mut first);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, items 5 and 6b, as a user meets them: a flipped byte in the
/// last (complete) log record stops the start, naming the segment, the
/// offset and the batch's idempotency key; `--repair` keeps a copy, and
/// as the snapshot already holds that batch, the log goes on past it and
/// nothing acknowledged is missing.
#[test]
fn a_flipped_byte_in_the_last_log_record_is_refused_then_repaired() {
    let dir = scratch_dir("serve", "flipped-record");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut server = start(&dir, "data");
    for i in 0..3 {
        let batch = format!("ts,user_id,state,amount\n2026-11-01T00:00:0{i}Z,{i},CA,5\n");
        post_until_acked(&|| server.http, i, &batch);
    }
    terminate(&mut server);
    let data = dir.join("data");
    let segment = std::fs::read_dir(&data)
        .expect("data")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .find(|name| name.starts_with("wal-") && name.ends_with(".log"))
        .expect("a log segment");
    let path = data.join(&segment);
    let mut bytes = std::fs::read(&path).expect("read");
    // Walk the records (a 32-byte segment header, then records of a
    // 32-byte head and `length` payload bytes) to the last one.
    let mut at = 32;
    let mut last = at;
    while at + 32 <= bytes.len() {
        last = at;
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4")) as usize;
        at += 32 + len;
    }
    assert_eq!(at, bytes.len(), "whole records");
    // A byte of its CSV text (not the final newline).
    let flipped = bytes.len() - 3;
    bytes[flipped] ^= 0x01;
    std::fs::write(&path, &bytes).expect("write");
    let args = [
        "serve",
        "schema.sql",
        "--data",
        "data",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    ];
    let refused = refused_within(&dir, &args);
    assert!(
        refused.contains(&segment)
            && refused.contains(&format!("offset {last}"))
            && refused.contains("idempotency key batch-2"),
        "{refused}"
    );
    let mut server = start_with(&dir, "data", &["--repair"]);
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("lost 1 record"), "{log}");
    assert!(log.contains("moved forward"), "{log}");
    assert!(
        data.join(format!("{segment}.damaged-at-{last}")).exists(),
        "no copy of the damaged segment"
    );
    let body = json_of(server.http, "reach");
    assert!(body.contains("\"events\":3"), "{body}");
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 9: a full disk made the whole process exit, queries
/// included. Now (a failpoint stands in for the full disk) ingest is
/// refused with 503 and `Retry-After` while writes fail, queries answer
/// from the state before, and once writes succeed the service recovers
/// from disk in the same process: nothing acknowledged lost, nothing
/// counted twice, after a `kill -9` too.
#[test]
fn a_full_disk_refuses_ingest_answers_queries_and_recovers_in_process() {
    let dir = scratch_dir("serve", "disk-full");
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let full = dir.join("the-disk-is-full");
    let failpoint = full.to_str().expect("a UTF-8 path").to_owned();
    let mut server = start_env(
        &dir,
        "data",
        &[],
        &[("CARDINAL_FAILPOINT_DISK_FULL", failpoint.as_str())],
    );
    let records = "2026-11-01T00:00:00Z,1,CA,5\n2026-11-01T00:00:01Z,2,TX,7\n";
    let post = |server: &Server, key: &str| {
        request(
            server.http,
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", key)],
            records.as_bytes(),
        )
        .expect("an answer")
    };
    let events = |server: &Server| sum_of(&json_of(server.http, "reach"), "events");
    let (status, body) = post(&server, "before");
    assert_eq!(status, 200, "{body}");
    std::fs::write(&full, b"").expect("the disk fills");
    let (status, body) = post(&server, "during");
    assert_eq!(status, 503, "{body}");
    let (status, why) = request(server.http, "GET", "/healthz", &[], b"").expect("up");
    assert_eq!(status, 503, "{why}");
    assert!(why.contains("write-ahead log"), "{why}");
    // Queries answer from the state before the failure, which may hold
    // the batch whose write failed (answered 503, never acknowledged:
    // recovery from disk drops it); ingest waits.
    let during = events(&server);
    assert!(during == 2 || during == 4, "{during}");
    let (status, body) = post(&server, "also-during");
    assert_eq!(status, 503, "{body}");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "the process exited"
    );
    std::fs::remove_file(&full).expect("room again");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (status, _) = request(server.http, "GET", "/healthz", &[], b"").expect("up");
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery in process");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The refused batches are sent again: each counts once.
    for key in ["during", "also-during", "during"] {
        let (status, body) = post(&server, key);
        assert_eq!(status, 200, "{key}: {body}");
    }
    assert_eq!(events(&server), 6);
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("recovered in process"), "{log}");
    kill9(&mut server);
    let mut server = start(&dir, "data");
    assert_eq!(events(&server), 6);
    terminate(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A served `time_bucket` summary fed epoch-millisecond times answers a
/// live query whose `from` and `to` are epoch milliseconds or seconds (as
/// Grafana sends `${__from}`), with 5-minute buckets printed as RFC 3339
/// instants, and writes a closed day's file of them.
#[test]
fn five_minute_buckets_of_epoch_times_answer_epoch_ranges() {
    let dir = scratch_dir("serve", "epoch");
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM events (ts TIMESTAMP, user_id BIGINT, state TEXT, amount BIGINT)
           WITH (format = 'csv', header = true, time = 'ts');
         CREATE SUMMARY five AS
           SELECT time_bucket('5 minutes', ts) AS t, state, count(*) AS events
           FROM events GROUP BY t, state;",
    )
    .expect("schema");
    // 2026-11-01T00:00:00Z; events at 00:01:00 (two), 00:04:59.999,
    // 00:07:00, 00:12:00 and the next day's 00:00:30, which closes the
    // first day (lateness 0).
    let start: i64 = 1_793_491_200_000;
    let body: String = [
        (60_000, "CA"),
        (60_000, "CA"),
        (299_999, "NY"),
        (420_000, "CA"),
        (720_000, "CA"),
        (86_430_000, "TX"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (ms, state))| format!("{},{i},{state},1\n", start + ms))
    .collect();
    let mut server = start_with(&dir, "data", &["--out", "served", "--out-lateness", "0"]);
    let at = server.http;
    post_until_acked(&move || at, 0, &body);
    let csv = |query: &str| {
        let (status, body) = request(
            at,
            "GET",
            &format!("/v1/summaries/five?format=csv&{query}"),
            &[],
            b"",
        )
        .expect("the server answers");
        assert_eq!(status, 200, "{query}: {body}");
        body.lines().skip(1).map(str::to_owned).collect::<Vec<_>>()
    };
    let first_ten = [
        "2026-11-01T00:00:00Z,CA,2",
        "2026-11-01T00:00:00Z,NY,1",
        "2026-11-01T00:05:00Z,CA,1",
    ];
    // Milliseconds, seconds and RFC 3339 name the same range.
    let ms_range = format!("from={start}&to={}", start + 600_000);
    let s_range = format!("from={}&to={}", start / 1000, start / 1000 + 600);
    assert_eq!(csv(&ms_range), first_ten);
    assert_eq!(csv(&s_range), first_ten);
    assert_eq!(
        csv("from=2026-11-01T00:00:00Z&to=2026-11-01T00:10:00Z"),
        first_ten
    );
    assert_eq!(
        csv(&format!("from={}", start + 300_000)),
        [
            "2026-11-01T00:05:00Z,CA,1",
            "2026-11-01T00:10:00Z,CA,1",
            "2026-11-02T00:00:00Z,TX,1"
        ]
    );
    let (status, body) =
        request(at, "GET", "/v1/summaries/five?from=12x", &[], b"").expect("the server answers");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("epoch seconds or milliseconds"), "{body}");
    // The closed day's file holds its 5-minute buckets only; a stop
    // writes it at the latest.
    terminate(&mut server);
    let written = std::fs::read_to_string(dir.join("served/five/2026-11-01.csv"))
        .expect("the closed day's file");
    assert_eq!(
        written.lines().skip(1).collect::<Vec<_>>(),
        [first_ten.as_slice(), &["2026-11-01T00:10:00Z,CA,1"]].concat()
    );
    assert!(
        !dir.join("served/five/2026-11-02.csv").exists(),
        "an open day is not written"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
