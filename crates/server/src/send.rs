//! The reference client: a blocking driver of the [`Client`] state machine
//! over one [`TcpStream`], behind `cardinal send`.
//!
//! ```text
//!   files ──► LineReader ──► batch ──► Client ──► socket ──► server
//!   (gzip,    whole records,  (header   window of    ◄── hello ok, acks,
//!    zstd..)  about           of a CSV  W ids,           errors, pings
//!             batch_bytes     dropped)  held ≤ W + 1
//! ```
//!
//! One thread does everything, in a loop: read input into batches while
//! the client has room ([`ClientConfig::held_batches_max`] is the window
//! plus one, so memory is the window plus one batch, never the whole
//! file); connect if there is something to send; write every frame flow
//! control allows; then read acks, blocking only when nothing more can be
//! sent or read (otherwise acks already arrived are taken without
//! waiting, so the ledger file keeps up).
//!
//! **Batches.** Inputs are read through `cardinal-source` (compression by
//! magic bytes: gzip, zstd, lz4, snappy) in chunks of about
//! [`SendOptions::batch_bytes`] whole records, one chunk a batch; a CSV
//! chunk is cut only between records (a newline in a quoted field does not
//! end one). A batch never mixes files. With [`SendOptions::header`] the
//! first line of each CSV file is its header and is not sent. A record
//! longer than `cardinal_source::LINE_BYTES_MAX` (1 MiB, as the server's
//! parser limit) stops the send with an error naming the file and line; so
//! every batch is at most [`BATCH_BYTES_MAX`] and a byte, under
//! [`crate::FRAME_BYTES_MIN`], and fits the frame limit of any server.
//!
//! **Ids.** The state machine numbers batches: one above every id sent
//! before in this run and above the `highest` id the server's hello ok
//! names for this client id, so ids are stable across reconnects within a
//! run (a resend keeps its id and the server acknowledges it as a
//! duplicate if it has it), and a later run with the same client id never
//! collides with an earlier run's batches. It does not skip them either:
//! a rerun of a finished send is counted again.
//!
//! **Reconnecting.** Any I/O error, end of stream, read or write timeout,
//! undecodable bytes from the server, or error frame whose code says to
//! reconnect drops the connection; the client then waits (exponential
//! backoff with jitter, [`BACKOFF_FIRST`] doubling to [`BACKOFF_MAX`]),
//! connects again and resends every unacknowledged batch in id order. It
//! gives up with [`Error::GaveUp`] when [`SendOptions::give_up_after`] has
//! passed since the first failure after the last progress (an ack or a
//! refused batch). An `idle` close is not a failure: the client connects
//! again when it has something to send. Codes that say stop (a bad token,
//! a superseded client id, a server that lost acknowledged batches) end
//! the send at once.
//!
//! **Timeouts.** Connecting waits at most [`SendOptions::connect_timeout`];
//! every read and write at most [`SendOptions::io_timeout`], so a server
//! that accepts and then hangs costs a timeout and a reconnect, never a
//! hung client.
//!
//! **Results.** A batch the server refuses (unknown stream, wrong format,
//! too old) is a failure in the [`Ledger`], not an error: the send goes on,
//! and [`Summary::failed`] says how many. With [`SendOptions::ledger`] each
//! ack is written as it arrives, one line `id accepted rejected duplicate`
//! (duplicate 0 or 1), flushed to the operating system at once, so a test
//! that kills the server mid-run reads exactly what was acknowledged.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use cardinal_server::send::{SendOptions, send};
//! use cardinal_server::{ClientId, Format, StreamName};
//!
//! let options = SendOptions::new(
//!     "127.0.0.1:7400",
//!     ClientId::new("loader-1")?,
//!     StreamName::new("impressions")?,
//!     Format::Csv,
//! );
//! let summary = send(&[PathBuf::from("imp.csv")], &options, |_| {})?;
//! assert_eq!(summary.failed, 0);
//! # Ok::<(), cardinal_server::Error>(())
//! ```

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cardinal_source::{CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, Chunk, Framing, Input, LineReader};

use crate::client::{Client, ClientConfig, Ledger, Outgoing, Received};
use crate::error::{Error, Result};
use crate::frame::{
    ClientId, Decoder, ErrorCode, FRAME_BYTES_MIN, Format, Frame, IN_FLIGHT_BATCHES_DEFAULT,
    IN_FLIGHT_BATCHES_MAX, StreamName, Token, encode,
};

/// The batch size [`SendOptions::new`] picks: 256 KiB of records, the
/// chunk `cardinal run` reads (`cardinal_source::CHUNK_BYTES_DEFAULT`), so
/// the server parses batches of the size its parser was tuned on; eight of
/// them in flight cover a 13 ms group commit at 150 MB/s.
pub const BATCH_BYTES_DEFAULT: usize = 256 << 10;

/// The smallest batch size: `cardinal_source::CHUNK_BYTES_MIN` (16 B, for
/// tests that want many batches from little input).
pub const BATCH_BYTES_MIN: usize = CHUNK_BYTES_MIN;

/// The largest batch size: 1 MiB (`cardinal_source::CHUNK_BYTES_MAX`). A
/// batch is a chunk, at most this plus one record of at most 1 MiB, so
/// its frame is under [`FRAME_BYTES_MIN`], the least frame limit a server
/// may advertise.
pub const BATCH_BYTES_MAX: usize = CHUNK_BYTES_MAX;

/// The bytes a batch frame adds to its payload, at most: the header, the
/// id, the format, the stream name's length and the longest stream name.
const BATCH_OVERHEAD_BYTES_MAX: usize = crate::frame::HEADER_BYTES + 8 + 1 + 1 + 64;

// A chunk is at most the larger of its target size and one line of
// `LINE_BYTES_MAX` bytes and one more (`cardinal_source`'s `lines.rs`), so
// every batch frame fits the least frame limit a server may advertise.
// `Run::fill` checks each batch against it too.
const _: () = assert!(cardinal_source::LINE_BYTES_MAX <= BATCH_BYTES_MAX);
const _: () = assert!(BATCH_BYTES_MAX + 1 + BATCH_OVERHEAD_BYTES_MAX <= FRAME_BYTES_MIN);
const _: () =
    assert!(BATCH_BYTES_MIN <= BATCH_BYTES_DEFAULT && BATCH_BYTES_DEFAULT <= BATCH_BYTES_MAX);

/// The first wait before reconnecting: 50 ms, about a TCP connect's worth
/// of retries on loopback, so a server restarting is found quickly.
pub const BACKOFF_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between connection attempts: 2 s, so a server that
/// comes back is found within 2 s while a dead one costs a few attempts a
/// minute.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// `malformed` closes in a row, with no batch acknowledged between, after
/// which the client stops (`docs/protocol.md`: a client bug, not damage).
pub const MALFORMED_IN_A_ROW_MAX: u32 = 3;

/// How long reconnecting may go on without progress unless configured
/// otherwise: 60 s, longer than a server's restart and recovery here.
pub const GIVE_UP_AFTER_DEFAULT: Duration = Duration::from_secs(60);

/// How long one connection attempt may take unless configured otherwise:
/// 5 s (a refused connection fails at once; this bounds a dropped SYN).
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);

/// How long one read or write may block unless configured otherwise: 30 s.
/// A read waits only while batches are in flight, and a group commit takes
/// milliseconds, so 30 s of silence is a hung server or a dead link.
pub const IO_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The bytes one socket read asks for: 64 KiB, thousands of acks.
const READ_BYTES: usize = 64 << 10;

/// What `send` needs to know.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// The server, `host:port`.
    pub to: String,
    /// The client id, stable across reconnects (see [`default_client_id`]).
    pub client: ClientId,
    /// The stream every batch goes to.
    pub stream: StreamName,
    /// The records' format.
    pub format: Format,
    /// The token to present, if the server requires one.
    pub token: Option<Token>,
    /// Aim for batches of this many bytes of whole records
    /// ([`BATCH_BYTES_MIN`]`..=`[`BATCH_BYTES_MAX`]).
    pub batch_bytes: usize,
    /// The most batch ids in flight (`1..=`[`IN_FLIGHT_BATCHES_MAX`]); the
    /// lesser of this and the server's applies.
    pub window: u32,
    /// CSV only: the first line of each file is a header, not sent.
    pub header: bool,
    /// CSV only: the field delimiter, so that batches are cut between
    /// records (a quote opens a field only after it).
    pub delimiter: u8,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// How long one read or write on the socket may block.
    pub io_timeout: Duration,
    /// How long reconnecting may go on without progress before failing.
    pub give_up_after: Duration,
    /// A file to write each ack to as it arrives (module doc).
    pub ledger: Option<PathBuf>,
}

impl SendOptions {
    /// The defaults: no token, [`BATCH_BYTES_DEFAULT`],
    /// [`IN_FLIGHT_BATCHES_DEFAULT`], a CSV header, `,`,
    /// [`CONNECT_TIMEOUT_DEFAULT`], [`IO_TIMEOUT_DEFAULT`],
    /// [`GIVE_UP_AFTER_DEFAULT`], no ledger file.
    pub fn new(to: &str, client: ClientId, stream: StreamName, format: Format) -> SendOptions {
        SendOptions {
            to: to.to_owned(),
            client,
            stream,
            format,
            token: None,
            batch_bytes: BATCH_BYTES_DEFAULT,
            window: IN_FLIGHT_BATCHES_DEFAULT,
            header: true,
            delimiter: b',',
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            io_timeout: IO_TIMEOUT_DEFAULT,
            give_up_after: GIVE_UP_AFTER_DEFAULT,
            ledger: None,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::SendOption { reason });
        if !(BATCH_BYTES_MIN..=BATCH_BYTES_MAX).contains(&self.batch_bytes) {
            return bad(format!(
                "batch bytes {} is outside {BATCH_BYTES_MIN}..={BATCH_BYTES_MAX}",
                self.batch_bytes
            ));
        }
        if !(1..=IN_FLIGHT_BATCHES_MAX).contains(&self.window) {
            return bad(format!(
                "window {} is outside 1..={IN_FLIGHT_BATCHES_MAX}",
                self.window
            ));
        }
        if matches!(self.delimiter, b'"' | b'\n' | b'\r') || !self.delimiter.is_ascii() {
            return bad(
                "the delimiter must be an ASCII character other than a quote or line break".into(),
            );
        }
        for (name, value) in [
            ("connect timeout", self.connect_timeout),
            ("io timeout", self.io_timeout),
            ("give up after", self.give_up_after),
        ] {
            if value.is_zero() {
                return bad(format!("{name} must be more than 0"));
            }
        }
        Ok(())
    }
}

/// A stable client id for sending `files` to `stream`:
/// `send-<stream>-<16 hex digits>`, the digits a hash (64-bit FNV-1a) of
/// the files' canonical paths (`-`, stdin, as itself). The same send run
/// again gets the same id, so the server's deduplication table holds one
/// entry for it, not one per process, and the rerun's ids start above the
/// first run's. Two sends of the same files to the same stream at once
/// would supersede each other: give one another id.
pub fn default_client_id(stream: &StreamName, files: &[PathBuf]) -> ClientId {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
    const STREAM_CHARS_MAX: usize = 40;
    let mut hash = FNV_OFFSET;
    for file in files {
        let canonical = if file.as_os_str() == "-" {
            file.clone()
        } else {
            std::fs::canonicalize(file).unwrap_or_else(|_| file.clone())
        };
        for &byte in canonical.as_os_str().as_encoded_bytes().iter().chain(&[0]) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }
    // Stream names are ASCII, so any cut is at a character boundary.
    let stream = &stream.as_str()[..stream.as_str().len().min(STREAM_CHARS_MAX)];
    let id = format!("send-{stream}-{hash:016x}");
    ClientId::new(&id).expect("stream names are client id characters, and 62 bytes at most")
}

/// Where a send is, for a progress display.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Time since the send started.
    pub elapsed: Duration,
    /// Batches made from the input so far.
    pub batches: u64,
    /// Their payload bytes (headers not sent are not counted).
    pub bytes: u64,
    /// Payload bytes of acknowledged batches.
    pub bytes_acked: u64,
    /// Batch frames written, resends included.
    pub sends: u64,
    /// Batches acknowledged.
    pub acked: u64,
    /// Of those, acknowledged as duplicates of an earlier send.
    pub duplicates: u64,
    /// Batches refused for good.
    pub failed: u64,
    /// Records accepted, as the acks say.
    pub accepted: u64,
    /// Records rejected, as the acks say.
    pub rejected: u64,
    /// Batches sent on the current connection and not yet resolved.
    pub in_flight: usize,
    /// Connections lost or refused, each followed by another attempt.
    pub reconnects: u64,
}

/// What a finished send did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Batches made from the input.
    pub batches: u64,
    /// Batch frames written, resends included.
    pub sends: u64,
    /// Batches acknowledged (each once).
    pub acked: u64,
    /// Of those, acknowledged as duplicates (counted by the server on an
    /// earlier send whose ack was lost).
    pub duplicates: u64,
    /// Batches refused for good: in [`Ledger::failures`] with why.
    pub failed: u64,
    /// Records accepted, as the acks say.
    pub accepted: u64,
    /// Records rejected, as the acks say.
    pub rejected: u64,
    /// Connections lost or refused, each followed by another attempt.
    pub reconnects: u64,
    /// Payload bytes of the batches.
    pub bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Acknowledged ids and failures.
    pub ledger: Ledger,
}

impl Summary {
    /// Whether every batch was acknowledged.
    pub fn all_acked(&self) -> bool {
        self.failed == 0 && self.acked == self.batches
    }
}

/// Sends `files` (`-` is stdin) as `options` say, calling `progress` as
/// batches are sent and acknowledged. Returns when every batch is resolved
/// (acknowledged or refused: see [`Summary::all_acked`]), or fails: an
/// input that cannot be read, a server that refuses the client for good,
/// or no progress for [`SendOptions::give_up_after`].
pub fn send(
    files: &[PathBuf],
    options: &SendOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<Summary> {
    options.check()?;
    let mut run = Run::new(files, options)?;
    loop {
        run.fill()?;
        progress(&run.progress());
        if run.input.is_none() && run.client.is_done() {
            break;
        }
        if run.conn.is_none() {
            if run.client.held() > 0 {
                run.connect()?;
            }
            continue;
        }
        run.send_ready()?;
        let blocking = run.input.is_none() || !run.client.can_push();
        if run.conn.is_some() && (run.client.in_flight() > 0 || !blocking) {
            run.receive(blocking)?;
        }
    }
    Ok(run.summary())
}

/// The files still to read and the one being read.
struct Inputs<'a> {
    rest: std::slice::Iter<'a, PathBuf>,
    reader: Option<LineReader>,
    /// Whether the current file's header is still to be dropped.
    header_due: bool,
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

struct Run<'a> {
    options: &'a SendOptions,
    client: Client,
    input: Option<Inputs<'a>>,
    chunk: Chunk,
    conn: Option<Conn>,
    decoder: Decoder,
    out: Vec<u8>,
    ledger_file: Option<std::fs::File>,
    started: Instant,
    /// Payload bytes of batches sent and not resolved, by id.
    sizes: HashMap<u64, u64>,
    counts: Progress,
    backoff: Duration,
    /// When the first failure since the last progress happened.
    down_since: Option<Instant>,
    attempts: u64,
    /// `malformed` closes in a row (reset by progress).
    malformed: u32,
    jitter: u64,
}

impl<'a> Run<'a> {
    fn new(files: &'a [PathBuf], options: &'a SendOptions) -> Result<Run<'a>> {
        let config = ClientConfig {
            token: options.token.clone(),
            in_flight_batches_max: options.window,
            // The window plus one batch read ahead (module doc).
            held_batches_max: options.window as usize + 1,
            ..ClientConfig::new(options.client.clone())
        };
        let ledger_file = match &options.ledger {
            Some(path) => Some(std::fs::File::create(path).map_err(|e| Error::LedgerFile {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?),
            None => None,
        };
        let seed = u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::from(d.subsec_nanos()) ^ d.as_secs());
        Ok(Run {
            options,
            client: Client::new(config),
            input: Some(Inputs {
                rest: files.iter(),
                reader: None,
                header_due: false,
            }),
            chunk: Chunk::default(),
            conn: None,
            decoder: Decoder::default(),
            out: Vec::new(),
            ledger_file,
            started: Instant::now(),
            sizes: HashMap::new(),
            counts: Progress::default(),
            backoff: BACKOFF_FIRST,
            down_since: None,
            malformed: 0,
            attempts: 0,
            jitter: seed | 1,
        })
    }

    /// Reads batches while the client has room.
    fn fill(&mut self) -> Result<()> {
        while self.client.can_push() {
            let Some(payload) = self.next_batch()? else {
                return Ok(());
            };
            let bytes = payload.len() as u64;
            self.client.push(Outgoing {
                stream: self.options.stream.clone(),
                format: self.options.format,
                payload,
            })?;
            self.counts.batches += 1;
            self.counts.bytes += bytes;
        }
        Ok(())
    }

    /// The next non-empty batch of the input, or `None` at its end (then
    /// `self.input` is `None`).
    fn next_batch(&mut self) -> Result<Option<Bytes>> {
        loop {
            let Some(inputs) = self.input.as_mut() else {
                return Ok(None);
            };
            let Some(reader) = inputs.reader.as_mut() else {
                let Some(path) = inputs.rest.next() else {
                    self.input = None;
                    return Ok(None);
                };
                inputs.reader = Some(open(path, self.options)?);
                inputs.header_due = self.options.format == Format::Csv && self.options.header;
                continue;
            };
            match reader.read_chunk(&mut self.chunk) {
                Ok(false) => inputs.reader = None,
                Ok(true) => {
                    let mut bytes = self.chunk.bytes();
                    if inputs.header_due {
                        inputs.header_due = false;
                        let end = bytes
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(bytes.len(), |n| n + 1);
                        bytes = &bytes[end..];
                    }
                    if bytes.len() + BATCH_OVERHEAD_BYTES_MAX > FRAME_BYTES_MIN {
                        let line = self
                            .chunk
                            .first_line
                            .map_or_else(|| "?".to_owned(), |l| l.to_string());
                        let reason = format!(
                            "{}:{line}: a batch of {} bytes from here would be over the least \
                             frame limit a server may have ({FRAME_BYTES_MIN} bytes)",
                            self.chunk.input,
                            bytes.len()
                        );
                        return Err(Error::Input { reason });
                    }
                    if !bytes.is_empty() {
                        return Ok(Some(Bytes::copy_from_slice(bytes)));
                    }
                }
                Err(cardinal_source::Error::LineTooLong {
                    input, line, bytes, ..
                }) => {
                    let line = line.map_or_else(|| "?".to_owned(), |l| l.to_string());
                    let reason = format!(
                        "{input}:{line}: a record of {bytes} bytes is over the limit of {} \
                         bytes and cannot be sent",
                        cardinal_source::LINE_BYTES_MAX
                    );
                    return Err(Error::Input { reason });
                }
                Err(e) => {
                    return Err(Error::Input {
                        reason: e.to_string(),
                    });
                }
            }
        }
    }
}

/// A reader of `path` (`-`: stdin) cutting chunks as the format needs.
fn open(path: &Path, options: &SendOptions) -> Result<LineReader> {
    let input = if path.as_os_str() == "-" {
        Input::stdin()
    } else {
        Input::open(path)
    }
    .map_err(|e| Error::Input {
        reason: e.to_string(),
    })?;
    let framing = match options.format {
        Format::Csv => Framing::Csv {
            delimiter: options.delimiter,
        },
        Format::Ndjson => Framing::Lines,
    };
    Ok(LineReader::with_chunk_bytes(input, options.batch_bytes).with_framing(framing))
}

impl Run<'_> {
    /// Connects, says hello and waits for the hello ok; on a failure,
    /// backs off (or gives up).
    fn connect(&mut self) -> Result<()> {
        debug_assert!(self.conn.is_none());
        self.attempts += 1;
        let stream = match self.open_socket() {
            Ok(stream) => stream,
            Err(why) => return self.lost(why),
        };
        self.conn = Some(Conn {
            stream,
            buf: Vec::with_capacity(READ_BYTES),
        });
        let hello = self.client.connected();
        self.write(&hello)?;
        while self.conn.is_some() && !self.client.is_ready() {
            self.receive(true)?;
        }
        Ok(())
    }

    fn open_socket(&self) -> std::result::Result<TcpStream, String> {
        let to = &self.options.to;
        let addrs = to
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {to}: {e}"))?;
        let mut last = format!("{to} resolves to no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.options.connect_timeout) {
                Ok(stream) => {
                    let set = |r: std::io::Result<()>| r.map_err(|e| format!("{addr}: {e}"));
                    set(stream.set_nodelay(true))?;
                    set(stream.set_read_timeout(Some(self.options.io_timeout)))?;
                    set(stream.set_write_timeout(Some(self.options.io_timeout)))?;
                    return Ok(stream);
                }
                Err(e) => last = format!("connecting to {addr}: {e}"),
            }
        }
        Err(last)
    }

    /// Writes every frame the client has ready.
    fn send_ready(&mut self) -> Result<()> {
        while self.conn.is_some() {
            let Some(frame) = self.client.poll_send() else {
                break;
            };
            if let Frame::Batch(batch) = &frame {
                self.counts.sends += 1;
                self.sizes.insert(batch.id.0, batch.payload.len() as u64);
            }
            self.write(&frame)?;
        }
        Ok(())
    }

    fn write(&mut self, frame: &Frame) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        self.out.clear();
        encode(frame, &mut self.out);
        match conn.stream.write_all(&self.out) {
            Ok(()) => Ok(()),
            Err(e) => self.lost(format!("writing to {}: {}", self.options.to, io_words(&e))),
        }
    }

    /// Reads what the server sent and handles every whole frame: waiting
    /// up to the io timeout for some if `blocking`, else taking only what
    /// has arrived.
    fn receive(&mut self, blocking: bool) -> Result<()> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let start = conn.buf.len();
        conn.buf.resize(start + READ_BYTES, 0);
        if !blocking && let Err(e) = conn.stream.set_nonblocking(true) {
            conn.buf.truncate(start);
            return self.lost(format!("{}: {e}", self.options.to));
        }
        let read = conn.stream.read(&mut conn.buf[start..]);
        if !blocking && let Err(e) = conn.stream.set_nonblocking(false) {
            conn.buf.truncate(start);
            return self.lost(format!("{}: {e}", self.options.to));
        }
        let got = match read {
            Ok(0) => {
                conn.buf.truncate(start);
                return self.lost(format!("{} closed the connection", self.options.to));
            }
            Ok(got) => got,
            Err(e) if !blocking && e.kind() == ErrorKind::WouldBlock => 0,
            Err(e) if e.kind() == ErrorKind::Interrupted => 0,
            Err(e) => {
                conn.buf.truncate(start);
                return self.lost(format!(
                    "reading from {}: {}",
                    self.options.to,
                    io_words(&e)
                ));
            }
        };
        conn.buf.truncate(start + got);
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Ok(());
            };
            let (frame, used) = match self.decoder.decode(&conn.buf) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => return Ok(()),
                Err(e) => return self.lost(format!("undecodable bytes from the server: {e}")),
            };
            conn.buf.drain(..used);
            self.handle(frame)?;
        }
    }

    fn handle(&mut self, frame: Frame) -> Result<()> {
        match self.client.receive(frame)? {
            Received::Ready { .. } | Received::Pinged | Received::Pong(_) => {}
            Received::Acked(ack) => {
                if let Some(file) = self.ledger_file.as_mut() {
                    let line = format!(
                        "{} {} {} {}\n",
                        ack.id,
                        ack.accepted,
                        ack.rejected,
                        u8::from(ack.duplicate)
                    );
                    file.write_all(line.as_bytes())
                        .map_err(|e| Error::LedgerFile {
                            path: self
                                .options
                                .ledger
                                .as_ref()
                                .map_or_else(String::new, |p| p.display().to_string()),
                            reason: e.to_string(),
                        })?;
                }
                self.counts.bytes_acked += self.sizes.remove(&ack.id.0).unwrap_or(0);
                self.progressed();
            }
            Received::Failed(failure) => {
                self.sizes.remove(&failure.batch.0);
                self.progressed();
            }
            Received::Reconnect { code, message } => {
                if code == ErrorCode::Idle && self.client.is_ready() && self.client.in_flight() == 0
                {
                    // Not a failure: connect again when there is something
                    // to send. (An idle close with batches in flight, or
                    // before the hello ok, is a server's fault: backoff.)
                    self.close();
                    return Ok(());
                }
                if code == ErrorCode::Malformed {
                    // Damage on the way is retried; the same refusal again
                    // and again is a client bug, and resending cannot fix it.
                    self.malformed += 1;
                    if self.malformed >= MALFORMED_IN_A_ROW_MAX {
                        self.close();
                        return Err(Error::Refused {
                            code,
                            message: format!(
                                "{message} ({} times in a row, with no batch acknowledged \
                                 between: not damage on the way)",
                                self.malformed
                            ),
                        });
                    }
                }
                return self.lost(format!("{} said {code}: {message}", self.options.to));
            }
        }
        Ok(())
    }

    fn progressed(&mut self) {
        self.malformed = 0;
        self.down_since = None;
        self.backoff = BACKOFF_FIRST;
        self.attempts = 0;
    }

    fn close(&mut self) {
        self.conn = None;
        self.client.disconnected();
    }

    /// The connection failed (or could not be made) for `why`: close it,
    /// then wait before the next attempt, or give up.
    fn lost(&mut self, why: String) -> Result<()> {
        self.close();
        let now = Instant::now();
        let since = *self.down_since.get_or_insert(now);
        let waited = now.duration_since(since);
        let Some(left) = self
            .options
            .give_up_after
            .checked_sub(waited)
            .filter(|l| !l.is_zero())
        else {
            return Err(Error::GaveUp {
                to: self.options.to.clone(),
                waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                attempts: self.attempts,
                last: why,
                acked: self.client.ledger().batches_acked(),
                unresolved: self.client.held(),
            });
        };
        self.counts.reconnects += 1;
        // Equal jitter: half the backoff, plus up to the other half at
        // random, so clients cut off together do not return together.
        self.jitter ^= self.jitter << 13;
        self.jitter ^= self.jitter >> 7;
        self.jitter ^= self.jitter << 17;
        let half = self.backoff / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
        let wait = (half + Duration::from_nanos(self.jitter % nanos)).min(left);
        std::thread::sleep(wait);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        Ok(())
    }

    fn progress(&mut self) -> Progress {
        let ledger = self.client.ledger();
        self.counts.elapsed = self.started.elapsed();
        self.counts.acked = ledger.batches_acked();
        self.counts.duplicates = ledger.duplicates();
        self.counts.failed = ledger.failed();
        self.counts.accepted = ledger.accepted();
        self.counts.rejected = ledger.rejected();
        self.counts.in_flight = self.client.in_flight();
        self.counts
    }

    fn summary(&mut self) -> Summary {
        let p = self.progress();
        Summary {
            batches: p.batches,
            sends: p.sends,
            acked: p.acked,
            duplicates: p.duplicates,
            failed: p.failed,
            accepted: p.accepted,
            rejected: p.rejected,
            reconnects: p.reconnects,
            bytes: p.bytes,
            elapsed: p.elapsed,
            ledger: self.client.ledger().clone(),
        }
    }
}

/// An I/O error in words, a timeout said as one.
fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => "timed out".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_client_ids_are_stable_valid_and_differ_by_input() {
        let stream = StreamName::new("impressions").expect("valid");
        let a = default_client_id(&stream, &[PathBuf::from("a.csv")]);
        assert_eq!(a, default_client_id(&stream, &[PathBuf::from("a.csv")]));
        assert_ne!(a, default_client_id(&stream, &[PathBuf::from("b.csv")]));
        assert!(a.as_str().starts_with("send-impressions-"), "{a}");
        let long = StreamName::new(&"s".repeat(64)).expect("valid");
        let id = default_client_id(&long, &[PathBuf::from("-")]);
        assert!(id.as_str().len() <= crate::CLIENT_ID_BYTES_MAX);
    }

    #[test]
    fn options_out_of_range_are_refused() {
        let base = SendOptions::new(
            "127.0.0.1:1",
            ClientId::new("c").expect("valid"),
            StreamName::new("s").expect("valid"),
            Format::Csv,
        );
        assert!(base.check().is_ok());
        for options in [
            SendOptions {
                batch_bytes: BATCH_BYTES_MAX + 1,
                ..base.clone()
            },
            SendOptions {
                window: 0,
                ..base.clone()
            },
            SendOptions {
                give_up_after: Duration::ZERO,
                ..base.clone()
            },
            SendOptions {
                delimiter: b'"',
                ..base.clone()
            },
        ] {
            assert!(matches!(options.check(), Err(Error::SendOption { .. })));
        }
    }
}
