//! What the end-to-end tests of the binary share: a scratch directory, a
//! way to run `cardinal` in it, checks that it succeeded or failed, and
//! readers and writers of its files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty `cardinal-<suite>-<name>-<pid>` under the temp dir.
pub fn scratch_dir(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cardinal-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs the binary with `args` in `dir`.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn cardinal(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cardinal runs")
}

/// Asserts that the run succeeded (printing its stderr if not) and returns
/// its stdout.
pub fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

/// Asserts that the run failed and returns its stderr.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn failure(output: &Output) -> String {
    assert!(!output.status.success(), "expected a failure: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `bytes` gzipped (fast level).
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).expect("gzip");
    gz.finish().expect("gzip")
}

/// The lines of every file a summary wrote under `out`
/// (`out/<summary>/*.csv`), in file order, headers left out.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn csv_lines(out: &Path, summary: &str) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join(summary))
        .expect("summary folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        lines.extend(text.lines().skip(1).map(str::to_owned));
    }
    lines
}

/// One HTTP/1.1 request on a fresh connection to `address`, waiting up
/// to `read_timeout` for the answer: its status and body, `None` when the
/// connection failed (a server down).
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn http_request(
    address: std::net::SocketAddr,
    (method, path): (&str, &str),
    headers: &[(&str, &str)],
    body: &[u8],
    read_timeout: std::time::Duration,
) -> Option<(u16, String)> {
    use std::io::Write as _;
    let mut socket =
        std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(2)).ok()?;
    socket.set_read_timeout(Some(read_timeout)).ok()?;
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
    http_response(&mut socket)
}

/// Reads an HTTP response to its end: its status and body.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn http_response(socket: &mut std::net::TcpStream) -> Option<(u16, String)> {
    use std::io::Read as _;
    let mut response = Vec::new();
    socket.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// A `cardinal serve` child, killed when dropped, and its HTTP address.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub struct Served {
    /// The process.
    pub child: std::process::Child,
    /// Where its HTTP API listens.
    pub http: std::net::SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cardinal serve schema.sql` in `dir` (the schema written
/// there first) on a free HTTP port of 127.0.0.1, data in `dir/data`,
/// with `more` arguments; its log goes to `dir/serve.log`.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn serve(dir: &Path, schema: &str, more: &[&str]) -> Served {
    serve_at(dir, schema, "127.0.0.1:0", more)
}

/// [`serve`] with its HTTP API at `http` (a fixed port: a server
/// started again where a client expects it); the log is appended to.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn serve_at(dir: &Path, schema: &str, http: &str, more: &[&str]) -> Served {
    use std::io::BufRead as _;
    std::fs::write(dir.join("schema.sql"), schema).expect("schema");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("serve.log"))
        .expect("log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cardinal"))
        .args(["serve", "schema.sql", "--http", http, "--data", "data"])
        .args(["--listen", "127.0.0.1:0"])
        .args(["--threads", "1", "--snapshot-every", "1"])
        .args(more)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("cardinal serve starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server prints its addresses");
    let http = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '\n']).next())
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("no HTTP address in {line:?}; the server's log:\n{log}")
        });
    Served { child, http }
}

/// A small deterministic generator (xorshift), so seeded runs repeat.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub struct Rng(pub u64);

#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A free port on loopback for a server to bind later (a server
/// restarted on it keeps its address, so what points at it stays right).
///
/// Taken outside the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port bound to 0 and
/// released comes from that range, and any test's outgoing connection
/// or `127.0.0.1:0` listener may take it before the server binds it
/// (seen: "Address already in use" about once in 60 runs on a loaded
/// machine). Outside it, only a caller of this function takes a port,
/// each a different one: from a start that differs per process, each
/// checked free by binding it.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (low, high) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut ends = text.split_whitespace().map(|n| n.parse::<u32>().ok());
            Some((ends.next()??, ends.next()??))
        })
        .unwrap_or((32768, 60999));
    // The widest span outside the ephemeral range, above 10000.
    let (start, span) = if low.saturating_sub(10_000) >= 65_535 - high.min(65_535) {
        (10_000, low.saturating_sub(10_000))
    } else {
        (high + 1, 65_535 - high)
    };
    assert!(span >= 1000, "room for test ports outside {low}-{high}");
    let offset = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = start + (offset.wrapping_add(n) % span);
        let port = u16::try_from(port).expect("a port");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {start}..{}", start + span);
}

/// `GET path` from a server, within 30 s; `None` if it does not answer.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn get(address: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    http_request(
        address,
        ("GET", path),
        &[],
        b"",
        std::time::Duration::from_secs(30),
    )
}

/// A summary's rows (JSON lines) as a server answers them, sorted; `None`
/// while it does not answer 200.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn summary_rows(address: std::net::SocketAddr, summary: &str) -> Option<Vec<String>> {
    let (status, body) = get(address, &format!("/v1/summaries/{summary}?format=json"))?;
    (status == 200).then(|| {
        let mut rows: Vec<String> = body.lines().map(str::to_owned).collect();
        rows.sort();
        rows
    })
}

/// What `cardinal run schema.sql input` prints for `summary` (JSON
/// lines), sorted.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn truth(dir: &Path, input: &str, summary: &str) -> Vec<String> {
    let out = dir.join("truth.jsonl");
    ok(&cardinal(
        dir,
        &[
            "run",
            "schema.sql",
            input,
            "--quiet",
            "--no-progress",
            "--json",
            out.to_str().expect("utf-8"),
        ],
    ));
    let text = std::fs::read_to_string(&out).expect("run's JSON lines");
    let tag = format!("{{\"summary\":\"{summary}\"");
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(&tag))
        .map(str::to_owned)
        .collect();
    rows.sort();
    rows
}

/// `count` W1 events of `seed` (written to `dir/events.csv` by `cardinal
/// gen impressions`), without their header line.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn w1_events(dir: &Path, count: usize, seed: u64) -> Vec<String> {
    let file = dir.join("events.csv");
    ok(&cardinal(
        dir,
        &[
            "gen",
            "impressions",
            "--events",
            &count.to_string(),
            "--seed",
            &seed.to_string(),
            "-o",
            file.to_str().expect("utf-8"),
        ],
    ));
    std::fs::read_to_string(&file)
        .expect("events")
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

/// A server's resident memory, from `/metrics`.
#[allow(
    dead_code,
    reason = "each test binary compiles this module; not all use it"
)]
pub fn rss(address: std::net::SocketAddr) -> Option<u64> {
    let (_, body) = get(address, "/metrics")?;
    body.lines()
        .find(|l| l.starts_with("process_resident_memory_bytes "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
