//! The HTTP edge of `cardinal serve` under attack and misuse, through
//! real processes and sockets on 127.0.0.1 (issue 43, items 10, 11, 16
//! and 17): idle and half-sent connections, stalled bodies, the common
//! mistakes' answers, and `/metrics` as promtool reads it. Every loop is
//! bounded by a deadline.

#[allow(dead_code, reason = "this suite uses a few of the shared helpers")]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::scratch_dir;

const SCHEMA: &str =
    "CREATE STREAM events (ts TIMESTAMP, user_id BIGINT, state TEXT, amount BIGINT)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE STREAM clicks (ts TIMESTAMP, user_id BIGINT, site TEXT)
  WITH (format = 'json', time = 'ts');
CREATE SUMMARY by_state AS
  SELECT date_trunc('day', ts) AS day, state, count(*) AS events, hll(user_id) AS users
  FROM events GROUP BY day, state;
CREATE SUMMARY by_site AS
  SELECT date_trunc('day', ts) AS day, site, count(*) AS clicks
  FROM clicks GROUP BY day, site;
";

const ROWS: &str = "2026-11-01T00:00:00Z,1,CA,5\n2026-11-01T00:00:01Z,2,TX,7\n";

struct Server {
    child: Child,
    http: SocketAddr,
    native: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cardinal serve` on free ports, under `ulimit -n NOFILE` when
/// given (through `sh`, which then execs the server).
fn start(dir: &Path, nofile: Option<u32>, more: &[&str]) -> Server {
    std::fs::write(dir.join("schema.sql"), SCHEMA).expect("schema");
    let mut args = vec![
        "serve",
        "schema.sql",
        "--http",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.1:0",
        "--data",
        "data",
        "--threads",
        "1",
        "--snapshot-every",
        "1",
    ];
    args.extend(more);
    let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let binary = env!("CARGO_BIN_EXE_cardinal");
    let mut command = match nofile {
        Some(n) => {
            let mut sh = Command::new("sh");
            sh.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(binary)
                .args(&args);
            sh
        }
        None => {
            let mut direct = Command::new(binary);
            direct.args(&args);
            direct
        }
    };
    let mut child = command
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
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("no HTTP address in {line:?}; the server's log:\n{log}")
        })
        .parse()
        .expect("an address");
    let native = line
        .split("native protocol on ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|address| address.parse().ok())
        .expect("the native address");
    Server {
        child,
        http,
        native,
    }
}

/// One request on a fresh connection: the status and body, `None` when
/// the connection failed.
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
        Duration::from_secs(20),
    )
}

/// Posts `ROWS` until it is acknowledged; how long that took.
fn post_until_acked(address: SocketAddr, key: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let answer = request(
            address,
            "POST",
            "/v1/streams/events",
            &[("Content-Type", "text/csv"), ("Idempotency-Key", key)],
            ROWS.as_bytes(),
        );
        if let Some((200, _)) = answer {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "not acknowledged within {within:?}: last answer {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metrics(address: SocketAddr) -> String {
    let (status, body) = request(address, "GET", "/metrics", &[], b"").expect("an answer");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample `name{labels}` (labels as written), if any.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Issue 43, item 10: 1,100 half-sent requests under `ulimit -n 1024`
/// took every descriptor, and the next snapshot failed with EMFILE and
/// stopped the server. Here 600 half-sent requests against a server
/// under `ulimit -n 256`: a legitimate client is still served within a
/// few seconds, snapshots go on, and the half-sent requests are closed.
#[test]
fn half_sent_requests_take_neither_the_service_nor_its_descriptors() {
    let dir = scratch_dir("http", "descriptors");
    let mut server = start(&dir, Some(256), &[]);
    let at = server.http;
    post_until_acked(at, "before", Duration::from_secs(10));
    let mut flood = Vec::new();
    for _ in 0..600 {
        // A connection the server may refuse or close at once: counted
        // the same (it holds nothing).
        if let Ok(mut socket) = TcpStream::connect_timeout(&at, Duration::from_secs(2)) {
            let _ = socket.write_all(b"POST /v1/streams/events HTTP/1.1\r\nHost: x\r\n");
            flood.push(socket);
        }
    }
    // The native edge's cap shrank to fit too: a flood of silent
    // connections there is refused past it.
    for _ in 0..300 {
        if let Ok(socket) = TcpStream::connect_timeout(&server.native, Duration::from_secs(2)) {
            flood.push(socket);
        }
    }
    let served = post_until_acked(at, "during", Duration::from_secs(5));
    eprintln!("served {served:?} after 600 half-sent requests and 300 silent native connections");
    // Snapshots go on: one is written after the flood.
    let log_path = dir.join("serve.log");
    let before = std::fs::read_to_string(&log_path).expect("log").len();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let log = std::fs::read_to_string(&log_path).expect("log");
        if log[before..].contains("cardinal serve: snapshot ") {
            break;
        }
        assert!(
            server.child.try_wait().expect("wait").is_none(),
            "the server stopped:\n{log}"
        );
        assert!(
            Instant::now() < deadline,
            "no snapshot after the flood:\n{log}"
        );
        post_until_acked(at, &format!("k{}", log.len()), Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(&log_path).expect("log");
    assert!(log.contains("256 file descriptors (ulimit -n)"), "{log}");
    assert!(!log.contains("Too many open files"), "{log}");
    let body = metrics(at);
    let evicted = sample(
        &body,
        "cardinal_http_connections_closed_total{reason=\"evicted\"}",
    )
    .expect("evictions counted");
    assert!(evicted > 0.0, "{body}");
    let open = sample(&body, "process_open_fds").expect("open fds");
    let max = sample(&body, "process_max_fds").expect("max fds");
    assert!(max <= 256.0 && open <= max - 100.0, "open {open} of {max}");
    // A half-sent request made now (the flood's closings settled) is
    // admitted, evicting an idle one, and closed at the header read
    // timeout (10 s).
    let mut late = TcpStream::connect(at).expect("connect");
    late.write_all(b"POST /v1/streams/events HTTP/1.1\r\nHost: x\r\n")
        .expect("half a head");
    late.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let waited = Instant::now();
    let mut answer = Vec::new();
    match late.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.contains(" 503 "), "admitted: {answer}");
    assert!(
        waited.elapsed() > Duration::from_secs(8) && waited.elapsed() < Duration::from_secs(15),
        "closed after {:?}: {answer}",
        waited.elapsed()
    );
    eprintln!(
        "a half-sent request closed after {:?}: {answer:?}",
        waited.elapsed()
    );
    drop(flood);
    let _ = server.child.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 11: 16 chunked bodies that stall reserved the whole
/// body limit each against the 256 MiB in-flight budget, and were never
/// timed out, so every other ingest got 503. Now a body reserves what it
/// has read, and a stalled one is answered 408 at its deadline.
#[test]
fn stalled_bodies_neither_block_ingest_nor_stay() {
    let dir = scratch_dir("http", "stalled");
    let server = start(&dir, None, &[]);
    let at = server.http;
    let mut stalled = Vec::new();
    for i in 0..24 {
        let mut socket = TcpStream::connect(at).expect("connect");
        let head = if i % 2 == 0 {
            "POST /v1/streams/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1c\r\n"
                .to_owned()
        } else {
            format!(
                "POST /v1/streams/events HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
                16 << 20
            )
        };
        socket.write_all(head.as_bytes()).expect("head");
        socket
            .write_all(&ROWS.as_bytes()[..10])
            .expect("a little body");
        stalled.push(socket);
    }
    let started = Instant::now();
    let served = post_until_acked(at, "legit", Duration::from_secs(3));
    eprintln!("served in {served:?} beside 24 stalled bodies");
    let body = metrics(at);
    let in_flight = sample(&body, "cardinal_http_in_flight_bytes").expect("in flight");
    assert!(in_flight < 1024.0, "stalled bodies hold {in_flight} bytes");
    // Each stalled body is answered 408 at its deadline and closed.
    for socket in &mut stalled {
        socket
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let (status, body) = common::http_response(socket).expect("an answer");
        assert_eq!(status, 408, "{body}");
    }
    assert!(started.elapsed() < Duration::from_secs(16));
    let body = metrics(at);
    assert_eq!(
        sample(&body, "cardinal_http_body_timeouts_total"),
        Some(24.0),
        "{body}"
    );
    assert_eq!(sample(&body, "cardinal_http_in_flight_bytes"), Some(0.0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 16: the common mistakes get answers that say what is
/// wrong, and a lower-case `bearer` is a bearer.
#[test]
fn common_mistakes_are_answered_by_name() {
    let dir = scratch_dir("http", "mistakes");
    std::fs::write(dir.join("token"), "short\n").expect("token");
    let mut permissions = std::fs::metadata(dir.join("token"))
        .expect("token")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
    std::fs::set_permissions(dir.join("token"), permissions).expect("chmod");
    let server = start(&dir, None, &["--token-file", "token"]);
    let at = server.http;
    let log = std::fs::read_to_string(dir.join("serve.log")).expect("log");
    assert!(log.contains("is 5 bytes: use at least 16"), "{log}");
    assert!(log.contains("chmod 600"), "{log}");
    let auth = ("Authorization", "bearer  short");
    // RFC 7235: the scheme is case-insensitive.
    let (status, body) =
        request(at, "POST", "/v1/streams/events", &[auth], ROWS.as_bytes()).expect("an answer");
    assert_eq!(status, 200, "{body}");
    let (status, _) = request(
        at,
        "POST",
        "/v1/streams/events",
        &[("Authorization", "Basic short")],
        ROWS.as_bytes(),
    )
    .expect("an answer");
    assert_eq!(status, 401);
    // A JSON array is read as its records, not rejected whole.
    let array = br#"[{"ts": "2026-11-01T00:00:00Z", "user_id": 1, "site": "a.example"},
 {"ts": "2026-11-01T00:00:01Z",
  "user_id": 2, "site": "b\nexample"}]"#;
    let (status, body) = request(
        at,
        "POST",
        "/v1/streams/clicks",
        &[auth, ("Content-Type", "application/json")],
        array,
    )
    .expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"accepted\":2,\"rejected\":0"), "{body}");
    let (status, body) = request(
        at,
        "POST",
        "/v1/streams/clicks",
        &[auth, ("Content-Type", "application/json")],
        b"[{\"ts\": 1},",
    )
    .expect("an answer");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not a JSON array"), "{body}");
    // UTF-16 is not read as UTF-8.
    let (status, body) = request(
        at,
        "POST",
        "/v1/streams/events",
        &[auth, ("Content-Type", "text/csv; charset=utf-16")],
        ROWS.as_bytes(),
    )
    .expect("an answer");
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("utf-16"), "{body}");
    let (status, _) = request(
        at,
        "POST",
        "/v1/streams/events",
        &[auth, ("Content-Type", "text/csv; charset=\"UTF-8\"")],
        ROWS.as_bytes(),
    )
    .expect("an answer");
    assert_eq!(status, 200);
    // A parameter a route does not read is refused, naming those it does.
    let (status, body) =
        request(at, "GET", "/v1/summaries/by_state?bucket=all", &[auth], b"").expect("an answer");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("bucket") && body.contains("buckets"),
        "{body}"
    );
    let (status, body) = request(
        at,
        "GET",
        "/v1/summaries/by_state?buckets=all",
        &[auth],
        b"",
    )
    .expect("an answer");
    assert_eq!(status, 200, "{body}");
    // A refusal quoting a long condition is cut.
    let long = "state%20%3D%20%27CA%27%20OR%20".repeat(400) + "state%20%3D%20%27CA%27";
    let (status, body) = request(
        at,
        "GET",
        &format!("/v1/summaries/by_state?where={long}"),
        &[auth],
        b"",
    )
    .expect("an answer");
    assert_eq!(status, 400, "{body}");
    assert!(body.len() <= 1025, "{} bytes: {body}", body.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, item 17: `/metrics` passes `promtool check metrics` (run
/// when promtool is installed; `.ci/run` installs it and sets
/// `CARDINAL_REQUIRE_PROMTOOL=1`, so CI never skips), its reject reasons
/// are codes, and it has what operators look for.
#[test]
fn metrics_pass_promtool_and_label_with_codes() {
    let dir = scratch_dir("http", "metrics");
    let server = start(&dir, None, &["--retention-days", "1"]);
    let at = server.http;
    // The watermark is robust (the 128th newest record's bucket): 200
    // records of 2026-11-05 move it there, and a record of 2026-11-01 is
    // then past the one-day retention.
    let newest: String = (0..200)
        .map(|i| format!("2026-11-05T00:00:{:02}Z,{i},CA,5\n", i % 60))
        .collect();
    let rows = "not a time,2,TX,7\n2026-11-01T00:00:00Z,3,TX,7\n2026-11-05T00:00:01Z,4\n";
    for batch in [newest.as_str(), rows] {
        let (status, body) =
            request(at, "POST", "/v1/streams/events", &[], batch.as_bytes()).expect("an answer");
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = request(at, "GET", "/v1/summaries/by_state", &[], b"").expect("an answer");
    assert_eq!(status, 200);
    let (status, _) = request(at, "GET", "/nowhere", &[], b"").expect("an answer");
    assert_eq!(status, 404);
    let body = metrics(at);
    for series in [
        "cardinal_events_rejected_total{stream=\"events\",reason=\"not_timestamp\"} 1",
        "cardinal_events_rejected_total{stream=\"events\",reason=\"too_few_fields\"} 1",
        "cardinal_rollup_groups{summary=\"by_state\"} 1",
        "cardinal_events_dropped_total{summary=\"by_state\",reason=\"retention\"} 1",
        "cardinal_events_dropped_total{summary=\"by_state\",reason=\"future_tolerance\"} 0",
        // 2026-11-05T00:00:00Z, the newest day bucket.
        "cardinal_stream_watermark_seconds{stream=\"events\"} 1793836800",
        "cardinal_http_requests_total{route=\"/v1/streams/{name}\",status=\"200\"} 2",
        "cardinal_http_requests_total{route=\"/v1/summaries/{name}\",status=\"200\"} 1",
        "cardinal_http_requests_total{route=\"unmatched\",status=\"404\"} 1",
        "cardinal_query_duration_seconds_count 1",
        "cardinal_build_info{version=\"",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_max_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(body.contains(series), "{series} in\n{body}");
    }
    assert!(!body.contains("cardinal_summary_"), "{body}");
    // Every reason label is a code, whatever the reasons' wording.
    for line in body.lines().filter(|l| l.contains("reason=\"")) {
        let reason = line
            .split("reason=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a reason");
        assert!(
            reason
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "{line}"
        );
    }
    let required = std::env::var_os("CARDINAL_REQUIRE_PROMTOOL").is_some();
    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    match promtool {
        Ok(mut child) => {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(body.as_bytes())
                .expect("to promtool");
            let out = child.wait_with_output().expect("promtool ends");
            assert!(
                out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
                "promtool check metrics: {}{}\n{body}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(error) => {
            assert!(!required, "promtool is required here: {error}");
            eprintln!("promtool not installed ({error}): the lint is left to CI");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
