//! `send` against a fake server on 127.0.0.1: a thread that speaks the
//! protocol with the crate's own [`Connection`] and [`Decoder`], judges
//! batches with a [`DedupTable`] of its own (the real server's admission
//! is the service's, tested in `lossy.rs`), makes every admitted batch
//! "durable" at once and keeps its payload. Its faults are scripted per connection: close after the n-th
//! batch with or without admitting it, stop with `server_stopping`, or
//! go away (listener closed) for a while and come back on the same port.
//!
//! The checks: the admitted payloads, joined in id order and each without
//! the header line it carries, are the input without its headers (every
//! record once: none lost, none doubled); the
//! ledger file and the summary agree with the server; a server that never
//! comes back, or hangs, fails the send within its give-up time.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cardinal_server::send::{SendOptions, Summary, send};
use cardinal_server::{
    Ack, Action, ClientId, Connection, Decoder, DedupTable, Error, ErrorCode, ErrorFrame, Format,
    Frame, ServerConfig, StreamName, Token, Verdict, encode,
};

/// What the fake server does on one connection (the first fault for the
/// first connection, and so on; a connection with no fault serves to the
/// end).
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Close after the n-th batch frame (1-based), admitted but not acked.
    DropAfterAdmitting(usize),
    /// Close on the n-th batch frame, before admitting it.
    DropBefore(usize),
    /// Close with `server_stopping` on the n-th batch frame.
    Stopping(usize),
    /// As `DropAfterAdmitting`, then close the listener for a while.
    Restart(usize, Duration),
    /// Ping the client (nonce 7) on the n-th batch frame.
    Ping(usize),
    /// Close with `malformed` on the n-th batch frame.
    Malformed(usize),
    /// As `DropAfterAdmitting`, then forget every client (as a server
    /// that evicted the client id, or lost its data directory).
    Forget(usize),
    /// From the n-th batch frame on, admit nothing and ack nothing, but
    /// ping the client every read timeout (20 ms), forever.
    PingsOnly(usize),
}

#[derive(Default)]
struct Seen {
    dedup: DedupTable,
    /// Admitted payloads by batch id.
    admitted: BTreeMap<u64, Bytes>,
    connections: usize,
    /// Pongs received, by nonce.
    pongs: Vec<u64>,
}

struct FakeServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeServer {
    fn start(faults: Vec<Fault>, config: ServerConfig) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || serve(listener, addr, &faults, &config, &seen, &stop))
        };
        FakeServer {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn admitted(&self) -> BTreeMap<u64, Bytes> {
        self.seen.lock().expect("lock").admitted.clone()
    }

    fn joined(&self) -> Vec<u8> {
        self.admitted().values().flat_map(|b| b.to_vec()).collect()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the fake server does not panic");
        }
    }
}

fn serve(
    mut listener: TcpListener,
    addr: SocketAddr,
    faults: &[Fault],
    config: &ServerConfig,
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
) {
    listener.set_nonblocking(true).expect("nonblocking");
    while !stop.load(Ordering::Relaxed) {
        let socket = match listener.accept() {
            Ok((socket, _)) => socket,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(e) => panic!("accept: {e}"),
        };
        let index = {
            let mut seen = seen.lock().expect("lock");
            seen.connections += 1;
            seen.connections - 1
        };
        let fault = faults.get(index).copied();
        serve_one(socket, fault, config, seen, stop);
        if let Some(Fault::Restart(_, down)) = fault {
            drop(listener);
            std::thread::sleep(down);
            listener = TcpListener::bind(addr).expect("rebind the same port");
            listener.set_nonblocking(true).expect("nonblocking");
        }
    }
}

fn serve_one(
    mut socket: TcpStream,
    fault: Option<Fault>,
    config: &ServerConfig,
    seen: &Mutex<Seen>,
    stop: &AtomicBool,
) {
    socket.set_nonblocking(false).expect("blocking");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut conn = Connection::new(config);
    let decoder = Decoder::new(config.limits.frame_bytes_max as usize);
    let mut buf = Vec::new();
    let mut batches = 0;
    let mut out = Vec::new();
    let mut read = [0u8; 64 << 10];
    let mut pinging = false;
    while !stop.load(Ordering::Relaxed) {
        if pinging {
            out.clear();
            encode(&Frame::Ping(9), &mut out);
            if socket.write_all(&out).is_err() {
                return;
            }
        }
        match socket.read(&mut read) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&read[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return,
        }
        loop {
            let (frame, used) = match decoder.decode(&buf) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => break,
                Err(e) => panic!("the client sent bytes that do not decode: {e}"),
            };
            buf.drain(..used);
            if matches!(frame, Frame::Batch(_)) {
                batches += 1;
                match fault {
                    Some(Fault::DropBefore(n)) if n == batches => return,
                    Some(Fault::PingsOnly(n)) if n <= batches => {
                        pinging = true;
                        continue;
                    }
                    Some(Fault::Ping(n)) if n == batches => {
                        out.clear();
                        encode(&Frame::Ping(7), &mut out);
                        socket.write_all(&out).expect("ping");
                    }
                    Some(Fault::Malformed(n)) if n == batches => {
                        if let Action::Close(frame) =
                            conn.stop(ErrorCode::Malformed, "a malformed batch, for a test")
                        {
                            out.clear();
                            encode(&frame, &mut out);
                            let _ = socket.write_all(&out);
                        }
                        // A lingering close, as the server does: stop
                        // writing, read what the client still sends, so
                        // it reads the error rather than a reset.
                        let _ = socket.shutdown(std::net::Shutdown::Write);
                        let _ = socket.set_read_timeout(Some(Duration::from_millis(500)));
                        let mut sink = [0u8; 64 << 10];
                        while matches!(socket.read(&mut sink), Ok(n) if n > 0) {}
                        return;
                    }
                    Some(Fault::Stopping(n)) if n == batches => {
                        if let Action::Close(frame) =
                            conn.stop(ErrorCode::ServerStopping, "stopping for a test")
                        {
                            out.clear();
                            encode(&frame, &mut out);
                            let _ = socket.write_all(&out);
                        }
                        return;
                    }
                    _ => {}
                }
            }
            let mut seen = seen.lock().expect("lock");
            let seen = &mut *seen;
            if let Frame::Pong(nonce) = frame {
                seen.pongs.push(nonce);
            }
            let dedup = &mut seen.dedup;
            let action = conn.receive(frame, |client| {
                dedup.touch(client, 0);
                Ok(dedup.highest(client))
            });
            let client = conn.client().cloned();
            let reply = match action {
                Action::Send(frame) => Some(frame),
                Action::Close(frame) => {
                    out.clear();
                    encode(&frame, &mut out);
                    let _ = socket.write_all(&out);
                    return;
                }
                Action::Offer(batch) if batch.stream.as_str() == "nope" => {
                    let message = "no stream named nope";
                    let error = ErrorFrame::new(Some(batch.id), ErrorCode::UnknownStream, message);
                    Some(Frame::Error(error))
                }
                Action::Offer(batch) => {
                    let client = client.expect("batches come after the hello");
                    let verdict = seen.dedup.admit(&client, batch.id, 0).expect("room");
                    let duplicate = match verdict {
                        Verdict::New => false,
                        Verdict::Duplicate => true,
                        Verdict::TooOld => panic!("batch {} too old", batch.id),
                    };
                    // A CSV batch carries its file's header first.
                    let mut payload = batch.payload.clone();
                    if batch.header {
                        let end = payload.iter().position(|&b| b == b'\n').expect("a line");
                        assert_eq!(&payload[..end], b"site,n,note", "the file's header");
                        payload = payload.slice(end + 1..);
                    }
                    let records = payload.iter().filter(|&&b| b == b'\n').count();
                    if !duplicate {
                        let before = seen.admitted.insert(batch.id.0, payload);
                        assert!(before.is_none(), "batch {} admitted twice", batch.id);
                    }
                    match fault {
                        Some(Fault::DropAfterAdmitting(n) | Fault::Restart(n, _))
                            if n == batches =>
                        {
                            return;
                        }
                        Some(Fault::Forget(n)) if n == batches => {
                            seen.dedup = DedupTable::new();
                            return;
                        }
                        _ => {}
                    }
                    Some(Frame::Ack(Ack {
                        id: batch.id,
                        accepted: if duplicate { 0 } else { records as u64 },
                        rejected: 0,
                        duplicate,
                    }))
                }
                Action::Nothing => None,
            };
            if let Some(frame) = reply {
                out.clear();
                encode(&frame, &mut out);
                if socket.write_all(&out).is_err() {
                    return;
                }
            }
        }
    }
}

fn options(addr: SocketAddr, stream: &str, dir: &Path) -> SendOptions {
    SendOptions {
        batch_bytes: 512,
        window: 4,
        give_up_after: Duration::from_secs(5),
        io_timeout: Duration::from_secs(2),
        ledger: Some(dir.join("ledger.txt")),
        ..SendOptions::new(
            &addr.to_string(),
            ClientId::new("test-client").expect("valid"),
            StreamName::new(stream).expect("valid"),
            Format::Csv,
        )
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("cardinal-send-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CSV file of `rows` records after a header; returns its path and its
/// records.
fn csv(dir: &Path, name: &str, rows: usize) -> (PathBuf, Vec<u8>) {
    let mut records = Vec::new();
    for i in 0..rows {
        // Quoted fields holding most of the newlines: a batch must never
        // cut one.
        if i % 3 == 0 {
            let lines = "ab\n".repeat(i % 7 + 3);
            records.extend_from_slice(format!("{name},{i},\"{lines}\"\n").as_bytes());
        } else {
            records.extend_from_slice(format!("{name},{i},plain\n").as_bytes());
        }
    }
    let path = dir.join(name);
    let mut file = b"site,n,note\n".to_vec();
    file.extend_from_slice(&records);
    std::fs::write(&path, file).expect("write input");
    (path, records)
}

/// The ledger file's ack lines as (id, accepted, rejected, duplicate)
/// (after its `#` lines; the fifth field, a checksum, is the resume's).
fn ledger_lines(path: &Path) -> Vec<(u64, u64, u64, bool)> {
    std::fs::read_to_string(path)
        .expect("ledger file")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 5, "{line}");
            assert_eq!(f[4].len(), 8, "a crc32 in hex: {line}");
            let n: Vec<u64> = f[..4]
                .iter()
                .map(|n| n.parse().expect("a number"))
                .collect();
            (n[0], n[1], n[2], n[3] == 1)
        })
        .collect()
}

/// The ledger file agrees with the summary: each acked id once, the same
/// ids as the summary's ledger, the same counts.
fn check_ledger(summary: &Summary, path: &Path) {
    let lines = ledger_lines(path);
    let mut ids: Vec<u64> = lines.iter().map(|l| l.0).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "an id twice in the ledger file");
    assert_eq!(lines.len() as u64, summary.acked);
    let ranged: Vec<u64> = summary
        .ledger
        .acked_ranges()
        .flat_map(|(a, b)| a.0..=b.0)
        .collect();
    assert_eq!(ids, ranged);
    assert_eq!(lines.iter().map(|l| l.1).sum::<u64>(), summary.accepted);
    assert_eq!(
        lines.iter().filter(|l| l.3).count() as u64,
        summary.duplicates
    );
}

#[test]
fn every_record_arrives_once_and_each_batch_carries_its_header() {
    let dir = TempDir::new("plain");
    let (a, mut expected) = csv(&dir.0, "a.csv", 300);
    let (b, records_b) = csv(&dir.0, "b.csv", 200);
    expected.extend_from_slice(&records_b);
    let server = FakeServer::start(vec![Fault::Ping(2)], ServerConfig::default());
    let options = options(server.addr, "events", &dir.0);
    let mut calls = 0;
    let summary = send(&[a, b], &options, |_| calls += 1).expect("sent");
    assert_eq!(server.joined(), expected);
    assert!(summary.all_acked(), "{summary:?}");
    // The ping was answered (before batches sent after it were acked).
    assert_eq!(server.seen.lock().expect("lock").pongs, [7]);
    assert!(summary.batches > 10, "small batches: {}", summary.batches);
    assert_eq!(summary.acked, summary.batches);
    assert_eq!(summary.sends, summary.batches);
    assert_eq!(
        (summary.duplicates, summary.failed, summary.reconnects),
        (0, 0, 0)
    );
    let newlines = expected.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(summary.accepted, newlines);
    // Each batch's bytes: its records and its file's header line.
    let header_bytes = summary.batches * "site,n,note\n".len() as u64;
    assert_eq!(summary.bytes, expected.len() as u64 + header_bytes);
    assert!(calls > 0);
    // Each batch is whole records: no batch ends inside a quoted field.
    for payload in server.admitted().values() {
        assert!(payload.ends_with(b"\n"));
        let quotes = payload.iter().filter(|&&b| b == b'"').count();
        assert_eq!(quotes % 2, 0, "a record was split");
    }
    check_ledger(&summary, options.ledger.as_deref().expect("set"));
}

#[test]
fn drops_stops_and_a_restart_lose_nothing_and_double_nothing() {
    let dir = TempDir::new("faults");
    let (a, expected) = csv(&dir.0, "a.csv", 600);
    let faults = vec![
        Fault::DropAfterAdmitting(3),
        Fault::DropBefore(2),
        Fault::Stopping(5),
        Fault::Restart(4, Duration::from_millis(300)),
        Fault::DropAfterAdmitting(1),
    ];
    let server = FakeServer::start(faults, ServerConfig::default());
    let options = options(server.addr, "events", &dir.0);
    let started = Instant::now();
    let summary = send(&[a], &options, |_| {}).expect("sent");
    assert_eq!(server.joined(), expected, "every record exactly once");
    assert!(summary.all_acked(), "{summary:?}");
    // One reconnect per fault that struck (the last one never does: the
    // first batch on its connection is a resend, acked as a duplicate),
    // and more while the server was down.
    assert!(summary.reconnects >= 4, "{summary:?}");
    // The batches admitted and dropped unacked were resent and
    // acknowledged as duplicates.
    assert!(summary.duplicates >= 2, "{summary:?}");
    assert!(summary.sends > summary.batches, "{summary:?}");
    // The accepted counts come from first admissions only.
    let newlines = expected.iter().filter(|&&b| b == b'\n').count() as u64;
    assert!(
        summary.accepted < newlines,
        "duplicates' counts are not known again"
    );
    // The ids the server admitted are exactly the acked ids.
    let admitted: Vec<u64> = server.admitted().keys().copied().collect();
    let acked: Vec<u64> = summary
        .ledger
        .acked_ranges()
        .flat_map(|(a, b)| a.0..=b.0)
        .collect();
    assert_eq!(admitted, acked);
    check_ledger(&summary, options.ledger.as_deref().expect("set"));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 43, item 3: the server admitted the client's first batches,
/// the connection dropped before any ack, and the server then forgot the
/// client id. `send` resent them (counted twice) without a word; now it
/// stops, says why, and sends nothing more. (Within the horizon the same
/// hello ok means the batches were lost in a crash and are resent: the
/// `drops_stops_and_a_restart` test and `lossy.rs` take that path.)
#[test]
fn a_server_that_forgot_a_client_whose_batches_went_unacked_stops_the_send() {
    let dir = TempDir::new("forgot");
    let (a, _) = csv(&dir.0, "a.csv", 200);
    let server = FakeServer::start(vec![Fault::Forget(1)], ServerConfig::default());
    let mut options = options(server.addr, "events", &dir.0);
    // A real server forgets a client id only after it has been silent for
    // CLIENT_IDLE_SECS_MIN; this one forgets at once, as if that long had
    // passed.
    options.server_forgets_after = Duration::ZERO;
    match send(&[a], &options, |_| {}) {
        Err(Error::ServerUnknown { sent }) => assert!(sent.0 >= 1, "{sent}"),
        other => panic!("{other:?}"),
    }
    // The batch the server took went in once: nothing was resent.
    let admitted: Vec<u64> = server.admitted().keys().copied().collect();
    assert_eq!(admitted, [1]);
}

#[test]
fn refused_batches_are_failures_not_errors() {
    let dir = TempDir::new("refused");
    let (a, _) = csv(&dir.0, "a.csv", 100);
    let server = FakeServer::start(Vec::new(), ServerConfig::default());
    let summary = send(&[a], &options(server.addr, "nope", &dir.0), |_| {}).expect("ran");
    assert!(!summary.all_acked());
    assert_eq!(summary.acked, 0);
    assert_eq!(summary.failed, summary.batches);
    assert!(server.admitted().is_empty());
    let failure = &summary.ledger.failures()[0];
    assert_eq!(failure.code, ErrorCode::UnknownStream);
    assert!(failure.message.contains("nope"), "{failure:?}");
}

#[test]
fn a_wrong_token_stops_at_once() {
    let dir = TempDir::new("token");
    let (a, _) = csv(&dir.0, "a.csv", 10);
    let config = ServerConfig {
        token: Some(Token::new(b"right").expect("valid")),
        ..ServerConfig::default()
    };
    let server = FakeServer::start(Vec::new(), config);
    let mut options = options(server.addr, "events", &dir.0);
    options.token = Some(Token::new(b"wrong").expect("valid"));
    let started = Instant::now();
    match send(std::slice::from_ref(&a), &options, |_| {}) {
        Err(Error::Refused { code, .. }) => assert_eq!(code, ErrorCode::NotAuthorized),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    options.token = Some(Token::new(b"right").expect("valid"));
    assert!(send(&[a], &options, |_| {}).expect("sent").all_acked());
}

#[test]
fn a_new_run_of_the_same_client_starts_above_the_servers_highest() {
    let dir = TempDir::new("rerun");
    let (a, _) = csv(&dir.0, "a.csv", 50);
    let server = FakeServer::start(Vec::new(), ServerConfig::default());
    // Without a ledger file: a rerun is a new send (with one, it resumes:
    // `a_rerun_with_the_ledger_resumes_exactly_once`).
    let options = SendOptions {
        ledger: None,
        ..options(server.addr, "events", &dir.0)
    };
    let first = send(std::slice::from_ref(&a), &options, |_| {}).expect("sent");
    let second = send(&[a], &options, |_| {}).expect("sent");
    let first_high = first.ledger.highest_acked().expect("acked").0;
    let (second_low, _) = second.ledger.acked_ranges().next().expect("acked");
    assert!(second_low.0 > first_high, "{second_low} <= {first_high}");
    assert_eq!(
        server.admitted().len() as u64,
        first.batches + second.batches
    );
}

#[test]
fn a_server_that_never_comes_back_fails_the_send_within_give_up_after() {
    let dir = TempDir::new("gone");
    let (a, _) = csv(&dir.0, "a.csv", 10);
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let mut options = options(addr, "events", &dir.0);
    options.give_up_after = Duration::from_millis(600);
    let started = Instant::now();
    let error = send(&[a], &options, |_| {}).expect_err("nobody listens");
    let took = started.elapsed();
    assert!(matches!(error, Error::GaveUp { acked: 0, .. }), "{error}");
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert!(took < Duration::from_millis(600 + 1500), "{took:?}");
}

#[test]
fn a_hung_server_costs_timeouts_not_a_hung_client() {
    let dir = TempDir::new("hung");
    let (a, _) = csv(&dir.0, "a.csv", 10);
    // Accepts (the kernel does, into the backlog) and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut options = options(listener.local_addr().expect("addr"), "events", &dir.0);
    options.io_timeout = Duration::from_millis(100);
    options.give_up_after = Duration::from_millis(500);
    let started = Instant::now();
    let error = send(&[a], &options, |_| {}).expect_err("nobody answers");
    assert!(matches!(error, Error::GaveUp { .. }), "{error}");
    assert!(error.to_string().contains("timed out"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(listener);
}

#[test]
fn a_record_over_the_line_limit_is_an_error_naming_file_and_line() {
    let dir = TempDir::new("long");
    let path = dir.0.join("long.csv");
    let mut bytes = b"h\nshort\n".to_vec();
    bytes.extend(std::iter::repeat_n(
        b'x',
        cardinal_source::LINE_BYTES_MAX + 10,
    ));
    bytes.extend_from_slice(b"\nafter\n");
    std::fs::write(&path, bytes).expect("write");
    let addr: SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let error = send(&[path], &options(addr, "events", &dir.0), |_| {}).expect_err("too long");
    let text = error.to_string();
    assert!(matches!(error, Error::Input { .. }), "{text}");
    assert!(text.contains("long.csv:3:"), "{text}");
}

#[test]
fn ndjson_gzip_and_a_missing_file() {
    use flate2::{Compression, write::GzEncoder};
    let dir = TempDir::new("gz");
    let lines: Vec<u8> = (0..400)
        .flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes())
        .collect();
    let path = dir.0.join("e.ndjson.gz");
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&lines).expect("gzip");
    std::fs::write(&path, gz.finish().expect("gzip")).expect("write");
    let server = FakeServer::start(Vec::new(), ServerConfig::default());
    let mut options = options(server.addr, "events", &dir.0);
    options.format = Format::Ndjson;
    let summary = send(&[path], &options, |_| {}).expect("sent");
    assert!(summary.all_acked());
    // NDJSON has no header: every line arrives.
    assert_eq!(server.joined(), lines);
    let missing = dir.0.join("missing.csv");
    options.ledger = None;
    let error = send(&[missing], &options, |_| {}).expect_err("missing");
    assert!(matches!(error, Error::Input { .. }));
    assert!(error.to_string().contains("missing.csv"), "{error}");
}

#[test]
fn the_same_malformed_refusal_again_and_again_stops_the_send() {
    let dir = TempDir::new("malformed");
    let (path, _) = csv(&dir.0, "m.csv", 2_000);
    // Once: damage on the way, resent and delivered.
    let server = FakeServer::start(vec![Fault::Malformed(1)], ServerConfig::default());
    let summary = send(
        std::slice::from_ref(&path),
        &options(server.addr, "events", &dir.0),
        |_| {},
    )
    .expect("one malformed close is retried");
    assert!(summary.reconnects >= 1);
    // Every connection: a client bug; stopped after three, well before
    // giving up.
    let always = vec![Fault::Malformed(1); 20];
    let server = FakeServer::start(always, ServerConfig::default());
    let started = std::time::Instant::now();
    let options = SendOptions {
        ledger: None,
        ..options(server.addr, "events", &dir.0)
    };
    match send(&[path], &options, |_| {}) {
        Err(Error::Refused { code, message }) => {
            assert_eq!(code, ErrorCode::Malformed);
            assert!(message.contains("3 times in a row"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Issue 43, item 15: a send that failed part way (here: its server gone
/// for longer than its give-up time, after admitting a batch it never
/// acknowledged) run again with the same ledger file skips what was
/// acknowledged and resends the rest with the same ids: every record is
/// admitted once, the unacknowledged-but-admitted batch is answered as a
/// duplicate. Before, the rerun sent everything again under new ids.
#[test]
fn a_rerun_with_the_ledger_resumes_exactly_once() {
    let dir = TempDir::new("resume");
    let (a, expected) = csv(&dir.0, "a.csv", 600);
    let server = FakeServer::start(
        vec![Fault::Restart(6, Duration::from_millis(2500))],
        ServerConfig::default(),
    );
    let options = SendOptions {
        give_up_after: Duration::from_millis(700),
        ..options(server.addr, "events", &dir.0)
    };
    let error = send(std::slice::from_ref(&a), &options, |_| {}).expect_err("gave up");
    assert!(matches!(error, Error::GaveUp { .. }), "{error}");
    let acked_before = ledger_lines(options.ledger.as_deref().expect("set")).len() as u64;
    assert!(
        acked_before >= 3,
        "{acked_before} acks before the server went"
    );
    // The server is back on the same port: the same command again.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(server.addr).is_err() {
        assert!(Instant::now() < deadline, "the fake server came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = send(std::slice::from_ref(&a), &options, |_| {}).expect("resumed");
    assert!(summary.all_acked(), "{summary:?}");
    assert_eq!(summary.skipped, acked_before, "{summary:?}");
    assert!(
        summary.duplicates >= 1,
        "the admitted, unacked batch: {summary:?}"
    );
    assert_eq!(server.joined(), expected, "every record exactly once");
    // A third run finds everything acknowledged and sends nothing.
    let admitted = server.admitted().len();
    let again = send(std::slice::from_ref(&a), &options, |_| {}).expect("nothing to do");
    assert!(again.all_acked(), "{again:?}");
    assert_eq!((again.sends, again.skipped), (0, again.batches));
    assert_eq!(server.admitted().len(), admitted);
    // An input changed since is refused, not resumed.
    let mut changed = std::fs::read(&a).expect("read");
    let at = changed.len() / 2;
    changed[at] = if changed[at] == b'x' { b'y' } else { b'x' };
    std::fs::write(&a, changed).expect("write");
    let error = send(std::slice::from_ref(&a), &options, |_| {}).expect_err("changed");
    assert!(error.to_string().contains("input changed"), "{error}");
    // Another send's options are refused too.
    let other = SendOptions {
        batch_bytes: 1024,
        ..options.clone()
    };
    let error = send(&[a], &other, |_| {}).expect_err("another send");
    assert!(error.to_string().contains("another send"), "{error}");
}

/// Issue 43, item 14: the give-up time holds whatever the server does,
/// here a server that keeps the connection busy with pings and never
/// acknowledges again (every read returned a ping, so no read ever timed
/// out and the send waited forever before).
#[test]
fn a_server_that_only_pings_fails_the_send_within_give_up_after() {
    let dir = TempDir::new("pings");
    let (a, _) = csv(&dir.0, "a.csv", 300);
    let server = FakeServer::start(vec![Fault::PingsOnly(3); 50], ServerConfig::default());
    let options = SendOptions {
        give_up_after: Duration::from_millis(800),
        ..options(server.addr, "events", &dir.0)
    };
    let started = Instant::now();
    let error = send(&[a], &options, |_| {}).expect_err("never acknowledged");
    let took = started.elapsed();
    assert!(matches!(error, Error::GaveUp { .. }), "{error}");
    assert!(took >= Duration::from_millis(800), "{took:?}");
    assert!(took < Duration::from_millis(800 + 1500), "{took:?}");
}
