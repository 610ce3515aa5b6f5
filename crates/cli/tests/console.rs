//! The browser console (`GET /` of `cardinal serve`) in a real headless
//! Chromium, driven by `tests/console/drive.cjs` with playwright-core:
//! the page against a server holding the demo's events, checked against
//! the public API the driver queries itself (every series and band of a
//! chart equal to its own `/v1/sql` answer, the overlap to
//! `/v1/overlap`, a bad query's caret text); with a token; and with the
//! server killed and started again under it. Screenshots of each view go
//! to `CARDINAL_CONSOLE_SHOTS` (default: the test's scratch directory);
//! the README's picture is the `console.png` of `page_checks_out`. The
//! same checks run against one node of a two-node cluster.
//!
//! What it needs: `node`, playwright-core (`CARDINAL_PLAYWRIGHT`, the
//! package's directory) and Chromium (`CARDINAL_CHROMIUM`, default
//! `/usr/bin/chromium`). `.ci/run` installs them and sets
//! `CARDINAL_REQUIRE_CHROMIUM=1`, under which a missing one fails the
//! test; elsewhere the tests skip, saying so.
//!
//! Also here, without a browser: the console's files over HTTP (types,
//! no token needed, `ETag`/`304`, a name not embedded is `404`).

mod common;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Served, http_request, ok, scratch_dir, serve_at};

/// The demo's declarations: the console's first view is the demo's
/// `reach`, its overlap the `audience` summary's.
const SCHEMA: &str = include_str!("../src/demo/schema.sql");

/// Demo events loaded: a user's size (50,000 rows, about 30 days).
const EVENTS: &str = "50000";

/// How long one driver run may take before the test kills it: the
/// driver bounds itself at 90 s (`CARDINAL_TIMEOUT_S`); this is the
/// backstop if it hangs outside its own timer.
const DRIVER_DEADLINE: Duration = Duration::from_secs(150);

/// The tools a browser run needs.
struct Browser {
    node: PathBuf,
    playwright: PathBuf,
    chromium: PathBuf,
}

/// The browser tools, or `None` (the test skips) when one is missing and
/// CI does not require them.
fn browser() -> Option<Browser> {
    let chromium = std::env::var_os("CARDINAL_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let playwright = std::env::var_os("CARDINAL_PLAYWRIGHT").map(PathBuf::from);
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = [
        (!node).then_some("node"),
        (!chromium.exists()).then_some("Chromium (CARDINAL_CHROMIUM or /usr/bin/chromium)"),
        playwright
            .as_deref()
            .is_none_or(|p| !p.join("package.json").exists())
            .then_some("playwright-core (CARDINAL_PLAYWRIGHT, the package's directory)"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>();
    if missing.is_empty() {
        return Some(Browser {
            node: PathBuf::from("node"),
            playwright: playwright.expect("checked"),
            chromium,
        });
    }
    assert!(
        std::env::var_os("CARDINAL_REQUIRE_CHROMIUM").is_none(),
        "CARDINAL_REQUIRE_CHROMIUM is set but these are missing: {}",
        missing.join(", ")
    );
    eprintln!(
        "skipped: missing {} (apt-get install chromium; npm install playwright-core)",
        missing.join(", ")
    );
    None
}

/// Where a test's screenshots go.
fn shots(dir: &Path, test: &str) -> PathBuf {
    let root =
        std::env::var_os("CARDINAL_CONSOLE_SHOTS").map_or_else(|| dir.join("shots"), PathBuf::from);
    let shots = root.join(test);
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    shots
}

/// The demo's events in `dir/imp.csv` (with its header line).
fn demo_events(dir: &Path) -> Vec<u8> {
    ok(&common::cardinal(
        dir,
        &["gen", "impressions", "--events", EVENTS, "-o", "imp.csv"],
    ));
    std::fs::read(dir.join("imp.csv")).expect("generated events")
}

/// Sends `body` to the impressions stream (CSV with its header), with
/// `auth` headers; asserts it was taken.
fn load(server: &Served, body: &[u8], auth: &[(&str, &str)]) {
    let mut headers = vec![("Content-Type", "text/csv; header=present")];
    headers.extend_from_slice(auth);
    let (status, answer) = http_request(
        server.http,
        ("POST", "/v1/streams/impressions"),
        &headers,
        body,
        Duration::from_secs(60),
    )
    .expect("the server answers the load");
    assert_eq!(status, 200, "{answer}");
}

/// Runs the driver in `mode` against `url`, passing each line it prints
/// to `on_line` as it comes; its exit success and everything it printed.
fn drive(
    browser: &Browser,
    url: &str,
    mode: &str,
    token: Option<&str>,
    shots: &Path,
    mut on_line: impl FnMut(&str),
) -> (bool, String) {
    // One browser at a time: three Chromiums and their servers at once
    // on two cores would stretch the driver's waits for no coverage.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/drive.cjs");
    let mut command = Command::new(&browser.node);
    command
        .arg(script)
        .env("CARDINAL_URL", url)
        .env("CARDINAL_MODE", mode)
        .env("CARDINAL_SHOTS", shots)
        .env("CARDINAL_PLAYWRIGHT", &browser.playwright)
        .env("CARDINAL_CHROMIUM", &browser.chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("CARDINAL_TOKEN", token);
    }
    let mut child = command.spawn().expect("node runs");
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (lines, received) = mpsc::channel();
    let forward = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = forward.send(line);
        }
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(format!("stderr: {line}"));
        }
    });
    let deadline = Instant::now() + DRIVER_DEADLINE;
    let mut printed = String::new();
    loop {
        match received.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                on_line(&line);
                printed.push_str(&line);
                printed.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            // Both pipes closed: the driver has ended.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            printed.push_str("killed: past the test's deadline\n");
            break;
        }
    }
    let status = child.wait().expect("the driver ends");
    (status.success(), printed)
}

#[test]
fn page_checks_out() {
    let Some(browser) = browser() else { return };
    let dir = scratch_dir("console", "full");
    let events = demo_events(&dir);
    let server = serve_at(&dir, SCHEMA, "127.0.0.1:0", &[]);
    load(&server, &events, &[]);
    // Two records that cannot be read, kept for the health view.
    let header = events.split(|&b| b == b'\n').next().expect("a header");
    let mut bad = header.to_vec();
    bad.extend_from_slice(b"\nnot-a-time,1,impression,CA,s,alpha,c,1.0\n2026-11-01T00:00:00Z\n");
    load(&server, &bad, &[]);
    let shots = shots(&dir, "full");
    let url = format!("http://{}", server.http);
    let (passed, printed) = drive(&browser, &url, "full", None, &shots, |_| {});
    assert!(passed, "the console's checks failed:\n{printed}");
    assert!(printed.contains("PASSED"), "{printed}");
    for view in [
        "console",
        "summaries",
        "chart",
        "overlap",
        "sql",
        "sql-error",
        "health",
    ] {
        let png = shots.join(format!("{view}.png"));
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "{} is a PNG", png.display());
    }
    eprintln!("screenshots in {}", shots.display());
}

/// The same checks against one node of a two-node cluster, each node
/// holding half the events: every chart, the overlap and the SQL box
/// answer for the whole cluster, and the health view lists both nodes,
/// each with its own count. Then with the other node stopped: a chart
/// says why it cannot be drawn, and answers from the node left when
/// asked to (`partial=true`), naming the node it lacks.
#[test]
fn page_checks_out_in_a_cluster() {
    let Some(browser) = browser() else { return };
    let dir = scratch_dir("console", "cluster");
    let events = demo_events(&dir);
    let text = String::from_utf8(events).expect("UTF-8 events");
    let (header, records) = text.split_once('\n').expect("a header line");
    let mut halves = [format!("{header}\n"), format!("{header}\n")];
    for (i, line) in records.lines().enumerate() {
        halves[i % 2].push_str(line);
        halves[i % 2].push('\n');
    }
    let http: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let mut nodes: Vec<Served> = (0..2)
        .map(|i| {
            let node = dir.join(format!("node{i}"));
            std::fs::create_dir_all(&node).expect("node dir");
            let peer = format!("http://{}", http[1 - i]);
            serve_at(&node, SCHEMA, &http[i], &["--peers", &peer])
        })
        .collect();
    for (node, half) in nodes.iter().zip(&halves) {
        load(node, half.as_bytes(), &[]);
    }
    let mut bad = header.as_bytes().to_vec();
    bad.extend_from_slice(b"\nnot-a-time,1,impression,CA,s,alpha,c,1.0\n");
    load(&nodes[0], &bad, &[]);
    let shots = shots(&dir, "cluster");
    let url = format!("http://{}", http[0]);
    let (passed, printed) = drive(&browser, &url, "full", None, &shots, |_| {});
    assert!(
        passed,
        "the console's checks failed in a cluster:\n{printed}"
    );
    assert!(
        printed.contains("node 2 healthy, with its own count"),
        "both nodes listed:\n{printed}"
    );
    // The peer stopped: the charts say so, then answer from the node
    // that is left when asked to.
    drop(nodes.pop());
    let (passed, printed) = drive(&browser, &url, "peer-down", None, &shots, |_| {});
    assert!(
        passed,
        "the console's checks with a peer down failed:\n{printed}"
    );
}

/// What a new user sees first: a server with no events yet. The chart
/// says its summary holds none and names the stream to feed; once the
/// events are sent it draws them by itself.
#[test]
fn page_waits_for_the_first_events() {
    let Some(browser) = browser() else { return };
    let dir = scratch_dir("console", "empty");
    let events = demo_events(&dir);
    let server = serve_at(&dir, SCHEMA, "127.0.0.1:0", &[]);
    let url = format!("http://{}", server.http);
    let shots = shots(&dir, "empty");
    let mut sent = false;
    let (passed, printed) = drive(&browser, &url, "empty", None, &shots, |line| {
        if line.trim() == "READY-FOR-EVENTS" {
            load(&server, &events, &[]);
            sent = true;
        }
    });
    assert!(
        passed,
        "the console's empty-server checks failed:\n{printed}"
    );
    assert!(sent, "the driver asked for the events:\n{printed}");
}

#[test]
fn page_asks_for_the_token_once() {
    let Some(browser) = browser() else { return };
    let dir = scratch_dir("console", "token");
    let token = "console-test-token-0123456789";
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).expect("token file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 600");
    }
    let events = demo_events(&dir);
    let server = serve_at(
        &dir,
        SCHEMA,
        "127.0.0.1:0",
        &["--token-file", token_file.to_str().expect("UTF-8 path")],
    );
    let bearer = format!("Bearer {token}");
    load(&server, &events, &[("Authorization", &bearer)]);
    let url = format!("http://{}", server.http);
    let shots = shots(&dir, "token");
    let (passed, printed) = drive(&browser, &url, "token", Some(token), &shots, |_| {});
    assert!(passed, "the console's token checks failed:\n{printed}");
}

#[test]
fn page_says_the_server_is_down_and_recovers() {
    let Some(browser) = browser() else { return };
    let dir = scratch_dir("console", "down");
    let events = demo_events(&dir);
    let http = format!("127.0.0.1:{}", common::free_port());
    let mut server = Some(serve_at(&dir, SCHEMA, &http, &[]));
    load(server.as_ref().expect("started"), &events, &[]);
    let url = format!("http://{http}");
    let shots = shots(&dir, "down");
    let mut killed = false;
    let mut restarted = false;
    let (passed, printed) = drive(&browser, &url, "down", None, &shots, |line| {
        if line.trim() == "READY-FOR-KILL" {
            // SIGKILL: the page sees connections refused, as after a crash.
            drop(server.take());
            killed = true;
        } else if line.trim() == "BANNER-SHOWN" {
            server = Some(serve_at(&dir, SCHEMA, &http, &[]));
            restarted = true;
        }
    });
    assert!(passed, "the console's down checks failed:\n{printed}");
    assert!(
        killed && restarted,
        "the driver asked for both steps:\n{printed}"
    );
}

/// The console's files over HTTP, without a browser: served with their
/// types and no token, revalidated by `ETag`, and nothing else under
/// `/console/`.
#[test]
fn console_files_are_served_without_a_token() {
    let dir = scratch_dir("console", "files");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "console-files-token-0123456789").expect("token file");
    let server = serve_at(
        &dir,
        SCHEMA,
        "127.0.0.1:0",
        &["--token-file", token_file.to_str().expect("UTF-8 path")],
    );
    let head = |path: &str, headers: &[(&str, &str)]| -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let mut socket = std::net::TcpStream::connect(server.http).expect("connects");
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            server.http
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        socket.write_all(request.as_bytes()).expect("sends");
        let mut response = Vec::new();
        socket.read_to_end(&mut response).expect("reads");
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        (status, text)
    };
    let header = |response: &str, name: &str| -> Option<String> {
        response
            .split("\r\n\r\n")
            .next()?
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            })
            .map(|(_, v)| v.trim().to_owned())
    };
    let (status, page) = head("/", &[]);
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        header(&page, "content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(page.contains("/console/app.js"), "{page}");
    assert!(header(&page, "content-security-policy").is_some_and(|p| p.contains("'self'")));
    for (file, ty) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("uPlot.iife.min.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("uPlot.min.css", "text/css; charset=utf-8"),
        ("LICENSE-uPlot", "text/plain; charset=utf-8"),
    ] {
        let (status, response) = head(&format!("/console/{file}"), &[]);
        assert_eq!(status, 200, "{file}: {response}");
        assert_eq!(
            header(&response, "content-type").as_deref(),
            Some(ty),
            "{file}"
        );
        let etag = header(&response, "etag").expect("an ETag");
        let (status, _) = head(&format!("/console/{file}"), &[("If-None-Match", &etag)]);
        assert_eq!(status, 304, "{file} unchanged");
    }
    for path in [
        "/console/",
        "/console/index.html.bak",
        "/console/..%2f..%2fschema.sql",
        "/console/app.js/x",
    ] {
        let (status, response) = head(path, &[]);
        assert_eq!(status, 404, "{path}: {response}");
    }
    let (status, response) = head("/?x=1", &[]);
    assert_eq!(status, 400, "an unknown parameter is refused: {response}");
    // The data still needs the token.
    let (status, _) = head("/v1/summaries", &[]);
    assert_eq!(status, 401);
}

/// What the console's first view starts from: `newest_bucket` names a
/// bucket only for a summary that has one (`null` for the demo's
/// `audience`, which keeps its groups over all time).
#[test]
fn newest_bucket_only_for_bucketed_summaries() {
    let dir = scratch_dir("console", "newest");
    let server = serve_at(&dir, SCHEMA, "127.0.0.1:0", &[]);
    load(
        &server,
        b"ts,user_id,kind,state,site,provider,campaign,revenue\n\
          2026-11-03T10:00:00Z,1,impression,CA,s1,alpha,c1,0.5\n\
          2026-11-04T09:00:00Z,2,impression,TX,s2,beta,c2,0.25\n",
        &[],
    );
    let (status, body) = common::get(server.http, "/v1/summaries").expect("an answer");
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let newest = |name: &str| {
        listed["summaries"]
            .as_array()
            .expect("summaries")
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed: {body}"))["newest_bucket"]
            .clone()
    };
    assert_eq!(newest("reach"), "2026-11-04T00:00:00Z");
    assert_eq!(newest("audience"), serde_json::Value::Null);
}
