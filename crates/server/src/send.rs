//! The reference client: a blocking driver of the [`Client`] state machine
//! over one [`TcpStream`], behind `cardinal send`.
//!
//! ```text
//!   files ──► LineReader ──► batch ──► Client ──► socket ──► server
//!   (gzip,    whole records,  (a CSV    window of    ◄── hello ok, acks,
//!    zstd..)  about           file's    W ids,           errors, pings
//!             batch_bytes     header    held ≤ W + 1
//!                             first)
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
//! first line of each CSV file is its header, and every batch of the file
//! carries it as its own first line ([`crate::Batch::header`]): the server
//! matches its names to the stream's columns, so a file may hold them in
//! any order, and a header that lacks one is refused before anything is
//! counted. A record longer than `cardinal_source::LINE_BYTES_MAX` (1 MiB,
//! as the server's parser limit) or a header over
//! [`cardinal_engine::HEADER_LINE_BYTES_MAX`] stops the send with an error
//! naming the file and line; so every batch is at most
//! [`BATCH_BYTES_MAX`], a byte and a header line, under
//! [`crate::FRAME_BYTES_MIN`], and fits the frame limit of any server.
//!
//! **Ids.** The state machine numbers batches: one above every id sent
//! before in this run and above the `highest` id the server's hello ok
//! names for this client id, so ids are stable across reconnects within a
//! run (a resend keeps its id and the server acknowledges it as a
//! duplicate if it has it), and a later run with the same client id never
//! collides with an earlier run's batches. Without a ledger file it does
//! not skip them either: a rerun of a finished send is counted again.
//! With [`SendOptions::ledger`] ids are fixed per batch of the input, and
//! a rerun resumes: module `ledger`.
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
//! **Timeouts.** The give-up clock runs from the moment the send starts
//! waiting on the server (to connect, for a hello ok, for an ack) until it
//! progresses, and every wait is cut to what is left of it: connecting
//! waits at most the lesser of [`SendOptions::connect_timeout`] and that,
//! every read and every `write` call at most the lesser of
//! [`SendOptions::io_timeout`] and that. So a server that accepts and
//! then says nothing, trickles pings, or stops reading ends the send with
//! [`Error::GaveUp`] within [`SendOptions::give_up_after`] (and a
//! backoff's sleep is cut too), whatever it does.
//!
//! **Results.** A batch the server refuses (unknown stream, wrong format,
//! too old) is a failure in the [`Ledger`], not an error: the send goes on,
//! and [`Summary::failed`] says how many. With [`SendOptions::ledger`] each
//! ack is written as it arrives, one line `id accepted rejected duplicate
//! crc` (duplicate 0 or 1), flushed to the operating system at once, so a
//! test that kills the server mid-run reads exactly what was acknowledged,
//! and a rerun skips it (module `ledger`).
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

mod ledger;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cardinal_source::{CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, Chunk, Framing, Input, LineReader};

use crate::client::{BATCH_ID_MAX, Client, ClientConfig, Ledger, Outgoing, Received};
use crate::error::{Error, Result};
use crate::frame::{
    BatchId, ClientId, Decoder, ErrorCode, FRAME_BYTES_MIN, Format, Frame,
    IN_FLIGHT_BATCHES_DEFAULT, IN_FLIGHT_BATCHES_MAX, StreamName, Token, encode,
};
use cardinal_engine::HEADER_LINE_BYTES_MAX;
pub use ledger::LEDGER_BYTES_MAX;
use ledger::{LedgerFile, payload_crc};

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
// `LINE_BYTES_MAX` bytes and one more (`cardinal_source`'s `lines.rs`),
// and a batch is a chunk with its file's header line and a newline before
// it, so every batch frame fits the least frame limit a server may
// advertise. `Run::next_batch` checks each batch against it too.
const _: () = assert!(cardinal_source::LINE_BYTES_MAX <= BATCH_BYTES_MAX);
const _: () = assert!(
    BATCH_BYTES_MAX + 1 + HEADER_LINE_BYTES_MAX + 1 + BATCH_OVERHEAD_BYTES_MAX <= FRAME_BYTES_MIN
);
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
    /// CSV only: the first line of each file is a header, sent as the
    /// first line of each of the file's batches (module doc).
    pub header: bool,
    /// CSV only: the field delimiter, so that batches are cut between
    /// records (a quote opens a field only after it).
    pub delimiter: u8,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// How long one read or write on the socket may block.
    pub io_timeout: Duration,
    /// How long the send may wait on the server without progress (an ack
    /// or a refusal) before failing, whatever the server does.
    pub give_up_after: Duration,
    /// A file to write each ack to as it arrives, and to resume from when
    /// it holds an earlier run of the same send (module `ledger`).
    pub ledger: Option<PathBuf>,
    /// How long the server keeps a silent client id
    /// ([`crate::CLIENT_IDLE_SECS_MIN`] unless the server is built
    /// otherwise): a server that does not know this client after it sent
    /// batches and was silent that long may have counted and forgotten
    /// them, and the send stops ([`Error::ServerUnknown`]).
    pub server_forgets_after: Duration,
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
            server_forgets_after: Duration::from_secs(crate::CLIENT_IDLE_SECS_MIN),
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
    const STREAM_CHARS_MAX: usize = 40;
    let hash = files_hash(files);
    // Stream names are ASCII, so any cut is at a character boundary.
    let stream = &stream.as_str()[..stream.as_str().len().min(STREAM_CHARS_MAX)];
    let id = format!("send-{stream}-{hash:016x}");
    ClientId::new(&id).expect("stream names are client id characters, and 62 bytes at most")
}

/// A 64-bit FNV-1a hash of the files' canonical paths (`-` as itself).
fn files_hash(files: &[PathBuf]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
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
    hash
}

/// The first line of a ledger file: what cuts and numbers the batches.
fn ledger_run_line(files: &[PathBuf], options: &SendOptions) -> String {
    format!(
        "# cardinal send ledger 1 client={} stream={} format={} header={} delimiter={} \
         batch-bytes={} files={:016x}",
        options.client,
        options.stream,
        options.format.name(),
        u8::from(options.header && options.format == Format::Csv),
        options.delimiter,
        options.batch_bytes,
        files_hash(files)
    )
}

/// Where a send is, for a progress display.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Time since the send started.
    pub elapsed: Duration,
    /// Batches made from the input so far.
    pub batches: u64,
    /// Of those, skipped: acknowledged to an earlier run, as the ledger
    /// file says.
    pub skipped: u64,
    /// Their payload bytes (header lines included; skipped batches not).
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
    /// Of those, skipped: acknowledged to an earlier run, as the ledger
    /// file says (not sent, not in [`Summary::acked`]).
    pub skipped: u64,
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
    /// Payload bytes of the batches, skipped ones aside.
    pub bytes: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Acknowledged ids and failures.
    pub ledger: Ledger,
}

impl Summary {
    /// Whether every batch was acknowledged (in this run or, as the
    /// ledger file says, an earlier one).
    pub fn all_acked(&self) -> bool {
        self.failed == 0 && self.acked + self.skipped == self.batches
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
        if run.client.held() == 0 {
            // Nothing to wait on the server for: the give-up clock stops.
            run.stalled_since = None;
        }
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
    /// Whether the current file's header is still to be read.
    header_due: bool,
    /// The current file's header line and its newline, sent before the
    /// records of each of its batches after the first.
    header: Option<Bytes>,
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
    ledger: Option<LedgerFile>,
    /// The index in the input of the next batch made.
    index: u64,
    /// Checksums of the batches pushed and not resolved, by id (with a
    /// ledger file).
    crcs: HashMap<u64, u32>,
    /// With a ledger file whose first id is not fixed yet: the index and
    /// checksum of each batch pushed without an id, in push order (the
    /// client numbers them in that order as it first sends them).
    unnumbered: std::collections::VecDeque<(u64, u32)>,
    /// With a ledger file: whether it was new (no first id), so the
    /// client numbers this run's batches (else they are pushed with ids).
    numbered_by_client: bool,
    started: Instant,
    /// Payload bytes of batches sent and not resolved, by id.
    sizes: HashMap<u64, u64>,
    counts: Progress,
    backoff: Duration,
    /// Since when the send has waited on the server without progress:
    /// the give-up clock (module doc, Timeouts).
    stalled_since: Option<Instant>,
    attempts: u64,
    /// `malformed` closes in a row (reset by progress).
    malformed: u32,
    jitter: u64,
    /// When the client last wrote a hello or a batch (what keeps its
    /// client id in use on the server), for [`Client::silent_for`].
    spoke: Option<Instant>,
}

impl<'a> Run<'a> {
    fn new(files: &'a [PathBuf], options: &'a SendOptions) -> Result<Run<'a>> {
        let config = ClientConfig {
            token: options.token.clone(),
            in_flight_batches_max: options.window,
            // The window plus one batch read ahead (module doc).
            held_batches_max: options.window as usize + 1,
            server_forgets_after: options.server_forgets_after,
            ..ClientConfig::new(options.client.clone())
        };
        let ledger = match &options.ledger {
            Some(path) => Some(LedgerFile::open(path, &ledger_run_line(files, options))?),
            None => None,
        };
        let ledger_new = ledger.as_ref().is_some_and(|l| l.first().is_none());
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
                header: None,
            }),
            chunk: Chunk::default(),
            conn: None,
            decoder: Decoder::default(),
            out: Vec::new(),
            ledger,
            index: 0,
            crcs: HashMap::new(),
            unnumbered: std::collections::VecDeque::new(),
            numbered_by_client: ledger_new,
            started: Instant::now(),
            sizes: HashMap::new(),
            counts: Progress::default(),
            backoff: BACKOFF_FIRST,
            stalled_since: None,
            malformed: 0,
            attempts: 0,
            jitter: seed | 1,
            spoke: None,
        })
    }

    /// Reads batches while the client has room. With a ledger file, batch
    /// `i` of the input gets id `first + i`, and one an earlier run had
    /// acknowledged is skipped (module `ledger`).
    fn fill(&mut self) -> Result<()> {
        while self.client.can_push() {
            let Some((payload, header)) = self.next_batch()? else {
                return Ok(());
            };
            let index = self.index;
            self.index += 1;
            let bytes = payload.len() as u64;
            self.counts.batches += 1;
            self.counts.bytes += bytes;
            let outgoing = Outgoing {
                stream: self.options.stream.clone(),
                format: self.options.format,
                header,
                payload,
            };
            let Some(ledger) = self.ledger.as_ref() else {
                self.client.push(outgoing)?;
                continue;
            };
            let crc = payload_crc(&outgoing.payload);
            let (false, Some(first)) = (self.numbered_by_client, ledger.first()) else {
                // A new ledger: the client numbers the batches as it
                // first sends them, from the server's hello ok, and
                // `Run::number` fixes the first id then.
                debug_assert_eq!(self.counts.skipped, 0);
                self.unnumbered.push_back((index, crc));
                self.client.push(outgoing)?;
                continue;
            };
            let id = first
                .0
                .checked_add(index)
                .filter(|&id| id <= BATCH_ID_MAX)
                .map(BatchId)
                .ok_or_else(|| Error::SendOption {
                    reason: format!("batch {index} of the input has no id left above {first}"),
                })?;
            match ledger.acked(id) {
                Some(acked) if acked == crc => {
                    self.counts.skipped += 1;
                    self.counts.bytes -= bytes;
                    continue;
                }
                Some(_) => {
                    return Err(Error::Input {
                        reason: format!(
                            "batch {index} of the input (id {id}) is not the batch the ledger \
                             file says was acknowledged: the input changed since that send, \
                             so resuming it would count some records twice and others never \
                             (send the changed input with a new --ledger file)"
                        ),
                    });
                }
                None => {}
            }
            self.crcs.insert(id.0, crc);
            self.client.push_with_id(outgoing, id)?;
        }
        Ok(())
    }

    /// The next non-empty batch of the input and whether it starts with
    /// its file's header line, or `None` at its end (then `self.input` is
    /// `None`).
    fn next_batch(&mut self) -> Result<Option<(Bytes, bool)>> {
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
                inputs.header = None;
                continue;
            };
            match reader.read_chunk(&mut self.chunk) {
                Ok(false) => inputs.reader = None,
                Ok(true) => {
                    let bytes = self.chunk.bytes();
                    let mut records = bytes;
                    if inputs.header_due {
                        inputs.header_due = false;
                        let end = bytes
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(bytes.len(), |n| n + 1);
                        let line = &bytes[..end];
                        if line.len() > HEADER_LINE_BYTES_MAX + 2 {
                            let reason = format!(
                                "{}:1: a header line of {} bytes is over the limit of \
                                 {HEADER_LINE_BYTES_MAX} bytes",
                                self.chunk.input,
                                line.len()
                            );
                            return Err(Error::Input { reason });
                        }
                        let mut header = line.to_vec();
                        if !header.ends_with(b"\n") {
                            header.push(b'\n');
                        }
                        inputs.header = Some(Bytes::from(header));
                        records = &bytes[end..];
                    }
                    let header = inputs.header.as_ref().map_or(0, Bytes::len);
                    if header + records.len() + BATCH_OVERHEAD_BYTES_MAX > FRAME_BYTES_MIN {
                        let line = self
                            .chunk
                            .first_line
                            .map_or_else(|| "?".to_owned(), |l| l.to_string());
                        let reason = format!(
                            "{}:{line}: a batch of {} bytes from here would be over the least \
                             frame limit a server may have ({FRAME_BYTES_MIN} bytes)",
                            self.chunk.input,
                            header + records.len()
                        );
                        return Err(Error::Input { reason });
                    }
                    if records.is_empty() {
                        continue;
                    }
                    // Every batch of a file with a header starts with it.
                    let Some(line) = &inputs.header else {
                        return Ok(Some((Bytes::copy_from_slice(records), false)));
                    };
                    let mut payload = Vec::with_capacity(line.len() + records.len());
                    payload.extend_from_slice(line);
                    payload.extend_from_slice(records);
                    return Ok(Some((Bytes::from(payload), true)));
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
        let Some(left) = self.time_left() else {
            return self.lost(self.stalled());
        };
        let stream = match self.open_socket(left) {
            Ok(stream) => stream,
            Err(why) => return self.lost(why),
        };
        self.conn = Some(Conn {
            stream,
            buf: Vec::with_capacity(READ_BYTES),
        });
        if let Some(spoke) = self.spoke {
            self.client.silent_for(spoke.elapsed());
        }
        let hello = self.client.connected();
        self.write(&hello)?;
        while self.conn.is_some() && !self.client.is_ready() {
            self.receive(true)?;
        }
        Ok(())
    }

    /// What is left of the give-up clock, starting it if it is not
    /// running; `None` once it has run out.
    fn time_left(&mut self) -> Option<Duration> {
        let since = *self.stalled_since.get_or_insert_with(Instant::now);
        self.options
            .give_up_after
            .checked_sub(since.elapsed())
            .filter(|left| !left.is_zero())
    }

    /// The give-up clock ran out, in words.
    fn stalled(&self) -> String {
        format!(
            "timed out: no progress from {} for {} s",
            self.options.to,
            self.options.give_up_after.as_secs_f64()
        )
    }

    fn open_socket(&self, left: Duration) -> std::result::Result<TcpStream, String> {
        let to = &self.options.to;
        let addrs = to
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {to}: {e}"))?;
        let mut last = format!("{to} resolves to no address");
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.options.connect_timeout.min(left)) {
                Ok(stream) => {
                    let set = |r: std::io::Result<()>| r.map_err(|e| format!("{addr}: {e}"));
                    set(stream.set_nodelay(true))?;
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
                self.number(batch.id)?;
            }
            self.write(&frame)?;
        }
        Ok(())
    }

    /// With a ledger file, before batch `id` is first sent: fixes the
    /// input's first id in the ledger (durably) if it is not yet, and
    /// checks that `id` is the first id plus the batch's index, as a
    /// resume will take it (module `ledger`).
    fn number(&mut self, id: BatchId) -> Result<()> {
        let Some(ledger) = self.ledger.as_mut() else {
            return Ok(());
        };
        if self.crcs.contains_key(&id.0) {
            return Ok(());
        }
        let (index, crc) = self
            .unnumbered
            .pop_front()
            .expect("a batch first sent was pushed without an id");
        let first = match ledger.first() {
            Some(first) => first,
            None => {
                assert_eq!(index, 0, "the input's first batch is sent first");
                ledger.set_first(id)?;
                id
            }
        };
        if first.0.checked_add(index) != Some(id.0) {
            return Err(Error::Protocol {
                reason: format!(
                    "batch {index} of the input got id {id}, not {first} + {index}: the \
                     server's ids for client {} moved during the send (another process with \
                     this client id?), so the ledger file could not resume it",
                    self.options.client
                ),
            });
        }
        self.crcs.insert(id.0, crc);
        Ok(())
    }

    /// Writes `frame`, each `write` call bounded by the io timeout and
    /// what is left of the give-up clock (module doc, Timeouts).
    fn write(&mut self, frame: &Frame) -> Result<()> {
        if self.conn.is_none() {
            return Ok(());
        }
        if matches!(frame, Frame::Hello(_) | Frame::Batch(_)) {
            self.spoke = Some(Instant::now());
        }
        self.out.clear();
        encode(frame, &mut self.out);
        let mut at = 0;
        while at < self.out.len() {
            let Some(left) = self.time_left() else {
                return self.lost(self.stalled());
            };
            let conn = self.conn.as_mut().expect("checked above");
            let wrote = conn
                .stream
                .set_write_timeout(Some(self.options.io_timeout.min(left)))
                .and_then(|()| conn.stream.write(&self.out[at..]));
            match wrote {
                Ok(0) => return self.lost(format!("{} closed the connection", self.options.to)),
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return self.lost(format!("writing to {}: {}", self.options.to, io_words(&e)));
                }
            }
        }
        Ok(())
    }

    /// Reads what the server sent and handles every whole frame: waiting
    /// up to the io timeout for some if `blocking`, else taking only what
    /// has arrived.
    fn receive(&mut self, blocking: bool) -> Result<()> {
        if self.conn.is_none() {
            return Ok(());
        }
        let left = if blocking {
            let Some(left) = self.time_left() else {
                return self.lost(self.stalled());
            };
            left
        } else {
            Duration::ZERO
        };
        let conn = self.conn.as_mut().expect("checked above");
        if blocking
            && let Err(e) = conn
                .stream
                .set_read_timeout(Some(self.options.io_timeout.min(left)))
        {
            return self.lost(format!("{}: {e}", self.options.to));
        }
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
                // An HTTP port answers HTTP however often it is asked.
                Err(Error::Http) => return Err(Error::Http),
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
                if let Some(ledger) = self.ledger.as_mut() {
                    let crc = self
                        .crcs
                        .remove(&ack.id.0)
                        .expect("every batch pushed with a ledger has its checksum");
                    ledger.record(&ack, crc)?;
                }
                self.counts.bytes_acked += self.sizes.remove(&ack.id.0).unwrap_or(0);
                self.progressed();
            }
            Received::Failed(failure) => {
                self.sizes.remove(&failure.batch.0);
                self.crcs.remove(&failure.batch.0);
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
        self.stalled_since = None;
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
        let since = *self.stalled_since.get_or_insert_with(Instant::now);
        let waited = since.elapsed();
        let Some(left) = self.time_left() else {
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
            skipped: p.skipped,
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
