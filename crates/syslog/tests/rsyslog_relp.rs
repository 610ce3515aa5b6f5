//! rsyslog's omrelp (librelp) against a small RELP server built on
//! `relp`: the session opens with our offers, messages arrive, a frame
//! answered `rsp 500` is never resent, and frames left unanswered when the
//! server closes are resent on a new connection, renumbered from 2.
//!
//! Needs `rsyslogd` with the omrelp and imtcp modules (Debian 12:
//! `rsyslog`, `rsyslog-relp`), so it is ignored by default:
//!
//! ```text
//! cargo test -p cardinal-syslog --test rsyslog_relp -- --ignored
//! ```

use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;
use std::time::{Duration, Instant};

use cardinal_syslog::relp::{self, FRAME_BYTES_MAX, RSP_ERROR, RSP_OK};

/// How long the whole exchange may take: rsyslog retries a suspended
/// action every second (`action.resumeInterval="1"`).
const DEADLINE: Duration = Duration::from_secs(30);

/// Messages sent through rsyslog: the first batch before the server
/// closes the first connection, the second after. librelp reconnects (and
/// resends what was unanswered) only when it has a new message to send.
const PROBES: u32 = 40;
const PROBES_AFTER_CLOSE: u32 = 10;

/// The probe answered `rsp 500`.
const REFUSED: u32 = 10;

/// The probe after which the server sends `serverclose` and closes the
/// first connection without answering it.
const CLOSE_AT: u32 = 20;

/// A syslog frame the server saw: which connection, its txnr, the message.
#[derive(Debug)]
struct Seen {
    connection: usize,
    txnr: u64,
    message: String,
}

/// An rsyslogd of our own, killed and cleaned up on drop.
struct Rsyslogd {
    child: Child,
    dir: PathBuf,
}

impl Drop for Rsyslogd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("rsyslogd's files are kept in {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn start_rsyslogd(relp_port: u16) -> Rsyslogd {
    let dir = std::env::temp_dir().join(format!("cardinal-rsyslog-relp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    let d = dir.display();
    let config = format!(
        r#"global(workDirectory="{d}")
module(load="imtcp")
module(load="omrelp")
input(type="imtcp" port="0" address="127.0.0.1" listenPortFileName="{d}/inport")
template(name="bare" type="string" string="%msg%")
if $msg contains "probe" then action(type="omrelp" target="127.0.0.1" port="{relp_port}" template="bare"
    action.resumeInterval="1" action.resumeRetryCount="-1")
"#
    );
    fs::write(dir.join("rsyslog.conf"), config).expect("config");
    let log = fs::File::create(dir.join("rsyslogd.log")).expect("log");
    let child = Command::new("rsyslogd")
        .arg("-n")
        .arg("-f")
        .arg(dir.join("rsyslog.conf"))
        .arg("-i")
        .arg(dir.join("rsyslogd.pid"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("rsyslogd on PATH (Debian: rsyslog, rsyslog-relp)");
    Rsyslogd { child, dir }
}

/// Serves RELP connections until `stop`, reporting each syslog frame.
fn serve(listener: TcpListener, stop: Arc<AtomicBool>, seen: Sender<Seen>) {
    listener.set_nonblocking(true).expect("nonblocking");
    let mut connection = 0;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                connection += 1;
                serve_connection(stream, connection, &stop, &seen);
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(10))
            }
            Err(error) => panic!("accept: {error}"),
        }
    }
}

fn serve_connection(
    mut stream: TcpStream,
    connection: usize,
    stop: &AtomicBool,
    seen: &Sender<Seen>,
) {
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut buffer = Vec::with_capacity(FRAME_BYTES_MAX);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let read = match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(read) => read,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                continue;
            }
            Err(_) => return,
        };
        buffer.extend_from_slice(&chunk[..read]);
        assert!(buffer.len() <= FRAME_BYTES_MAX + chunk.len());
        let mut closing = false;
        let mut at = 0;
        while let Some((frame, consumed)) =
            relp::decode(&buffer[at..]).expect("rsyslog sends valid frames")
        {
            at += consumed;
            match frame.command {
                relp::Command::Open => {
                    relp::open_reply(frame.txnr, frame.data, "cardinal-test", &mut out)
                        .expect("librelp's offers are fine")
                }
                relp::Command::Syslog => {
                    let message = String::from_utf8_lossy(frame.data).trim().to_owned();
                    let probe: Option<u32> =
                        message.strip_prefix("probe ").and_then(|n| n.parse().ok());
                    seen.send(Seen {
                        connection,
                        txnr: frame.txnr,
                        message,
                    })
                    .expect("the test listens");
                    if probe == Some(REFUSED) {
                        relp::rsp(frame.txnr, RSP_ERROR, "refused", &mut out);
                    } else if connection == 1 && probe == Some(CLOSE_AT) {
                        relp::serverclose(&mut out);
                        closing = true;
                        break;
                    } else {
                        relp::rsp(frame.txnr, RSP_OK, "OK", &mut out);
                    }
                }
                relp::Command::Close => {
                    relp::rsp(frame.txnr, RSP_OK, "OK", &mut out);
                    closing = true;
                    break;
                }
                relp::Command::Other(name) => relp::rsp(
                    frame.txnr,
                    RSP_ERROR,
                    &format!("unknown command {name}"),
                    &mut out,
                ),
            }
        }
        buffer.drain(..at);
        if stream.write_all(&out).is_err() {
            return;
        }
        out.clear();
        if closing {
            return;
        }
    }
}

/// Waits for `path` to hold a port number.
fn read_port(path: &std::path::Path) -> u16 {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if let Some(port) = fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return port;
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!("rsyslogd did not write {}", path.display());
}

/// Adds the frames that arrive to `frames` until `done` holds of them.
fn collect(seen: &Receiver<Seen>, frames: &mut Vec<Seen>, done: impl Fn(&[Seen]) -> bool) {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if done(frames) {
            return;
        }
        if let Ok(frame) = seen.recv_timeout(Duration::from_millis(100)) {
            frames.push(frame);
        }
    }
    panic!("the frames that came did not complete the exchange: {frames:#?}");
}

/// Sends probes `range` through rsyslog's imtcp input.
fn send_probes(input: &mut TcpStream, range: std::ops::RangeInclusive<u32>) {
    for probe in range {
        writeln!(input, "<13>Nov 28 00:00:00 host test: probe {probe}").expect("send");
    }
    input.flush().expect("flush");
}

#[test]
#[ignore = "needs rsyslogd with omrelp and imtcp"]
fn omrelp_talks_to_our_relp_server() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let relp_port = listener.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let (sender, seen) = channel();
    let server = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || serve(listener, stop, sender))
    };
    let rsyslogd = start_rsyslogd(relp_port);
    let input_port = read_port(&rsyslogd.dir.join("inport"));
    let mut input = TcpStream::connect(("127.0.0.1", input_port)).expect("imtcp");
    let mut frames = Vec::new();
    send_probes(&mut input, 1..=PROBES);
    let unanswered = format!("probe {CLOSE_AT}");
    collect(&seen, &mut frames, |frames| {
        frames.iter().any(|frame| frame.message == unanswered)
    });
    send_probes(&mut input, PROBES + 1..=PROBES + PROBES_AFTER_CLOSE);
    collect(&seen, &mut frames, |frames| {
        let distinct: BTreeSet<&str> = frames.iter().map(|frame| frame.message.as_str()).collect();
        distinct.len() == usize::try_from(PROBES + PROBES_AFTER_CLOSE).expect("small")
    });
    stop.store(true, Ordering::Relaxed);
    drop(rsyslogd);
    server.join().expect("server");

    for frame in &frames {
        eprintln!(
            "connection {} txnr {}: {}",
            frame.connection, frame.txnr, frame.message
        );
    }
    let refused = format!("probe {REFUSED}");
    let count = |message: &str| {
        frames
            .iter()
            .filter(|frame| frame.message == message)
            .count()
    };
    assert_eq!(
        count(&refused),
        1,
        "a frame answered 500 is not resent: {frames:#?}"
    );
    // The probe the server left unanswered came again on a new connection.
    assert!(
        frames
            .iter()
            .any(|frame| frame.connection >= 2 && frame.message == unanswered),
        "{frames:#?}"
    );
    // On each connection the syslog frames are numbered from 2 (open is 1)
    // without gaps.
    for connection in 1..=frames
        .iter()
        .map(|frame| frame.connection)
        .max()
        .unwrap_or(0)
    {
        let txnrs: Vec<u64> = frames
            .iter()
            .filter(|frame| frame.connection == connection)
            .map(|frame| frame.txnr)
            .collect();
        let expected: Vec<u64> = (2..).take(txnrs.len()).collect();
        assert_eq!(txnrs, expected, "connection {connection}");
    }
}
