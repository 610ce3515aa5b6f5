//! `cardinal send` end to end: the binary against a small acking server on
//! 127.0.0.1 (the protocol crate's own connection state machine behind a
//! real socket, judging batches with a deduplication table of its own),
//! checking exit codes, the summary and the ledger file. Faults
//! and resends are tested at the library level (`crates/server/tests/send.rs`).

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cardinal_server::{
    Ack, Action, Connection, Decoder, DedupTable, ErrorCode, ErrorFrame, Frame, ServerConfig,
    Verdict, encode,
};
use common::{cardinal, failure, ok, scratch_dir};

/// Serves connections one at a time until dropped; keeps every admitted
/// payload.
struct Server {
    addr: String,
    payloads: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr").to_string();
        let payloads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (payloads, stop) = (payloads.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut dedup = DedupTable::new();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((socket, _)) => serve(socket, &mut dedup, &payloads, &stop),
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        Server {
            addr,
            payloads,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the server does not panic");
        }
    }
}

fn serve(
    mut socket: TcpStream,
    dedup: &mut DedupTable,
    payloads: &Mutex<Vec<u8>>,
    stop: &AtomicBool,
) {
    socket.set_nonblocking(false).expect("blocking");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    let mut conn = Connection::new(&ServerConfig::default());
    let decoder = Decoder::default();
    let (mut buf, mut out, mut read) = (Vec::new(), Vec::new(), vec![0u8; 64 << 10]);
    while !stop.load(Ordering::Relaxed) {
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
        while let Some((frame, used)) = decoder.decode(&buf).expect("decodes") {
            buf.drain(..used);
            let action = conn.receive(frame, |client| {
                dedup.touch(client, 0);
                Ok(dedup.highest(client))
            });
            let reply = match action {
                Action::Send(frame) | Action::Close(frame) => frame,
                Action::Offer(batch) if batch.stream.as_str() != "events" => {
                    let message = format!("no stream named {}", batch.stream);
                    let error = ErrorFrame::new(Some(batch.id), ErrorCode::UnknownStream, &message);
                    Frame::Error(error)
                }
                Action::Offer(batch) => {
                    let client = conn.client().expect("after the hello");
                    let verdict = dedup.admit(client, batch.id, 0).expect("room");
                    let duplicate = verdict == Verdict::Duplicate;
                    assert_ne!(verdict, Verdict::TooOld);
                    // Each batch carries its file's header as its first
                    // line; the records follow it.
                    let mut records: &[u8] = &batch.payload;
                    if batch.header {
                        let end = records.iter().position(|&b| b == b'\n').expect("a line");
                        assert_eq!(&records[..end], b"ts,user,state", "the file's header");
                        records = &records[end + 1..];
                    }
                    if !duplicate {
                        payloads.lock().expect("lock").extend_from_slice(records);
                    }
                    let records = records.iter().filter(|&&b| b == b'\n').count();
                    Frame::Ack(Ack {
                        id: batch.id,
                        accepted: if duplicate { 0 } else { records as u64 },
                        rejected: 0,
                        duplicate,
                    })
                }
                Action::Nothing => continue,
            };
            out.clear();
            encode(&reply, &mut out);
            if socket.write_all(&out).is_err() || conn.is_closed() {
                return;
            }
        }
    }
}

fn input(dir: &std::path::Path) -> (String, Vec<u8>) {
    let records: Vec<u8> = (0..2000)
        .flat_map(|i| format!("2026-11-27T00:00:{:02}Z,{i},CA\n", i % 60).into_bytes())
        .collect();
    let mut file = b"ts,user,state\n".to_vec();
    file.extend_from_slice(&records);
    std::fs::write(dir.join("events.csv"), file).expect("write");
    ("events.csv".to_owned(), records)
}

#[test]
fn every_batch_acknowledged_exits_0_with_a_summary_and_a_ledger() {
    let dir = scratch_dir("send", "ok");
    let (file, records) = input(&dir);
    let server = Server::start();
    let output = cardinal(
        &dir,
        &[
            "send",
            &file,
            "--to",
            &server.addr,
            "--stream",
            "events",
            "--batch-kib",
            "4",
            "--ledger",
            "acked.txt",
        ],
    );
    ok(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(*server.payloads.lock().expect("lock"), records);
    let ledger = std::fs::read_to_string(dir.join("acked.txt")).expect("ledger");
    let batches = ledger.lines().filter(|l| !l.starts_with('#')).count();
    assert!(batches > 5, "{ledger}");
    assert!(
        stderr.contains(&format!("acknowledged {batches} batches (0 as duplicates")),
        "{stderr}"
    );
    assert!(
        stderr.contains("records accepted 2000, rejected 0"),
        "{stderr}"
    );
    assert!(stderr.contains("client id send-events-"), "{stderr}");
}

#[test]
fn refused_batches_exit_1() {
    let dir = scratch_dir("send", "refused");
    let (file, _) = input(&dir);
    let server = Server::start();
    let output = cardinal(
        &dir,
        &["send", &file, "--to", &server.addr, "--stream", "other"],
    );
    let stderr = failure(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr.contains("refused (unknown_stream): no stream named other"),
        "{stderr}"
    );
    assert!(stderr.contains("were not acknowledged"), "{stderr}");
}

#[test]
fn no_server_and_no_stream_exit_1_with_the_reason() {
    let dir = scratch_dir("send", "gone");
    let (file, _) = input(&dir);
    // A port nobody listens on, outside the ephemeral range.
    let addr = format!("127.0.0.1:{}", common::free_port());
    let output = cardinal(
        &dir,
        &[
            "send",
            &file,
            "--to",
            &addr,
            "--stream",
            "events",
            "--give-up-secs",
            "1",
        ],
    );
    let stderr = failure(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("gave up on"), "{stderr}");
    let output = cardinal(&dir, &["send", &file, "--to", &addr]);
    let stderr = failure(&output);
    assert!(stderr.contains("--stream NAME is required"), "{stderr}");
}

/// A listener that completes connections (the kernel's backlog does) and
/// never answers: the stuck server of issue 43, item 14.
fn silent_listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    (listener, addr)
}

/// Issue 43, item 14: `--give-up-secs` holds against a server that
/// accepts and never answers (it waited out a 30 s read timeout, twice,
/// before).
#[test]
fn give_up_secs_holds_against_a_server_that_never_answers() {
    let dir = scratch_dir("send", "silent");
    let (file, _) = input(&dir);
    let (_listener, addr) = silent_listener();
    let started = std::time::Instant::now();
    let output = cardinal(
        &dir,
        &[
            "send",
            &file,
            "--to",
            &addr,
            "--stream",
            "events",
            "--give-up-secs",
            "2",
        ],
    );
    let took = started.elapsed();
    let stderr = failure(&output);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("gave up on"), "{stderr}");
    assert!(stderr.contains("without progress"), "{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "gave up after {took:?}, not about 2 s"
    );
}

/// Issue 43, item 14: `cardinal query --timeout` holds against a server
/// that accepts and never answers (it waited 300 s before).
#[test]
fn query_times_out_on_a_server_that_never_answers() {
    let dir = scratch_dir("send", "query-silent");
    let (_listener, addr) = silent_listener();
    let started = std::time::Instant::now();
    let output = cardinal(
        &dir,
        &[
            "query",
            "reach",
            "--server",
            &format!("http://{addr}"),
            "--timeout",
            "2",
        ],
    );
    let took = started.elapsed();
    let stderr = failure(&output);
    assert!(stderr.contains("no answer from"), "{stderr}");
    assert!(stderr.contains("--timeout"), "{stderr}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "failed after {took:?}, not about 2 s"
    );
}
