//! Frames of the native ingest protocol and their codec.
//!
//! Every frame is a 9-byte header and a body (little-endian throughout,
//! as every cardinal format):
//!
//! ```text
//!  header | body bytes u32 | type u8 | crc32 u32 |                      9 B
//!  body   | the type's fields, exactly `body bytes` of them |
//!
//!  type 1 hello     | version u16 | client id bytes u8 | client id | token bytes u16 | token |
//!  type 2 hello ok  | version u16 | frame bytes max u32 | in-flight batches max u32 |
//!                   | dedup window u32 | known u8 | highest batch id u64 |
//!                   | server bytes u8 | server |
//!  type 3 batch     | batch id u64 | format u8 | stream bytes u8 | stream | payload ... |
//!                   format: bits 0-6 the format (1 csv, 2 ndjson), bit 7 set when
//!                   the payload's first line is a header (CSV only)
//!  type 4 ack       | batch id u64 | accepted u64 | rejected u64 | duplicate u8 |    25 B
//!  type 5 error     | code u16 | has batch u8 | batch id u64 | message bytes u16 | message |
//!  type 6 ping      | nonce u64 |
//!  type 7 pong      | nonce u64 |
//! ```
//!
//! The checksum is CRC-32/ISO-HDLC (`crc32fast`) over the header's first
//! five bytes and then the body. A batch's payload is the rest of its body.
//! A batch with the header bit carries its column names as the first line
//! of its payload, so every batch says how to read itself: the server
//! matches the names to the stream's columns at admission, keeps the line
//! in its log with the records, and reads the batch under it (a server
//! never assumes a column order the client did not state). The bit was a
//! malformed format before, so an older server refuses such a batch as
//! malformed rather than misreading it. A token of 0 bytes is no token; `known` 0 means the server has no batch
//! of this client and then `highest batch id` is 0; `has batch` 0 means the
//! error is about the connection and then `batch id` is 0. Flags are 0 or 1.
//! Every byte sequence the decoder accepts is the one [`encode`] writes for
//! the frame it returns, so `encode(decode(bytes)) == bytes`.
//!
//! Worked example: `Ping(7)` is the 17 bytes
//! `08 00 00 00 | 06 | crc32 of (08 00 00 00 06 07 00 00 00 00 00 00 00) | 07 00 00 00 00 00 00 00`.
//!
//! What each frame means, the handshake, flow control, acknowledgements
//! and what a client does on each error code are in `docs/protocol.md`;
//! this file is the byte-level truth it describes.
//!
//! # Why a checksum on a stream that TCP already checks
//!
//! An acknowledgement means the batch is durable, and the write-ahead log
//! checksums the bytes it was given: bytes damaged before they reach it
//! would be made durable, acknowledged and counted. TCP's 16-bit ones'
//! complement sum lets a damaged segment through far more often than its
//! width suggests (Stone and Partridge, "When the CRC and TCP checksum
//! disagree", SIGCOMM 2000: between one in 16 million and one in 10
//! billion segments) and nothing guards the bytes inside either host's
//! buffers. A CRC-32 per frame catches those, and catches a framing bug at
//! the frame it happens in rather than as garbage several frames later. It
//! costs 4 bytes a frame and one pass over bytes the server reads anyway:
//! `crc32fast` runs at several GB/s with PCLMULQDQ, a small part of what
//! parsing the same bytes costs.
//!
//! # Decoding
//!
//! [`Decoder::decode`] takes the bytes received so far and returns
//! `Ok(None)` while they hold less than one whole frame, so a reader calls
//! it after every read, blocking or not. The header is checked as soon as
//! its 9 bytes are there: a length over the receiver's limit or an unknown
//! type is refused at once, before any of the body is waited for, so a
//! forged length costs no memory. The body is then checked in full before
//! anything of it is used: checksum, every length against the bytes that
//! remain and against its named limit, every name against its rule, flags,
//! and no byte left over. Decoding never panics and allocates only for a
//! frame whose every byte has arrived (its strings and, from a slice, one
//! copy of its body; from a [`BytesMut`], the payload is split off without
//! a copy).
//!
//! A hello of another protocol version is refused from its first two body
//! bytes ([`Error::UnsupportedVersion`]), since the rest of its layout is
//! that version's. The header and the hello's version field never change
//! between versions, so any two builds can tell each other that much.
//
// Maintainer notes.
//
// Adding a frame type: its tag in `Frame::tag`, `type_name`, the range
// `Decoder::header` accepts and `Error::UnknownFrameType`'s message; the
// layout line above, `encode_body`, `parse_body`, the proptest strategy in
// tests/frames.rs, and the section in docs/protocol.md. Any change to an
// existing layout is a new protocol version, except to the header and the
// hello's version field, which never change.

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};

/// The protocol version this build speaks (and the only one it accepts).
pub const PROTOCOL_VERSION: u16 = 1;

/// The bytes of a frame header: body length, type and checksum.
pub const HEADER_BYTES: usize = 9;

/// The largest frame either side may ever send, header included: 16 MiB.
/// A server advertises its own limit in [`FRAME_BYTES_MIN`]`..=` this; a
/// frame over the receiver's limit is refused from its header
/// ([`Error::FrameTooLarge`]) and the connection closed. A frame is held
/// whole in memory, up to the in-flight limit of them per connection, so
/// this bounds a connection's buffers at 4 GiB even if a server advertised
/// the most of both; the defaults hold 32 MiB.
pub const FRAME_BYTES_MAX: usize = 16 << 20;

/// The smallest frame limit a server may advertise: 2 MiB, so that a batch
/// of one record of the parser's largest (`cardinal_parse::RECORD_BYTES_MAX`,
/// 1 MiB) always fits with room for its stream name.
pub const FRAME_BYTES_MIN: usize = 2 << 20;

/// The frame limit a server advertises unless configured otherwise: 4 MiB,
/// four of the 1 MiB batches a client is expected to send.
pub const FRAME_BYTES_DEFAULT: usize = 4 << 20;

/// The most batches a server may let one client hold unacknowledged
/// (advertised in the hello ok; at most [`crate::DEDUP_WINDOW`], so that a
/// client that respects it never resends a batch the deduplication window
/// has left).
pub const IN_FLIGHT_BATCHES_MAX: u32 = 256;

/// The in-flight limit a server advertises unless configured otherwise: 8
/// batches. A group commit takes about 3 ms at the median and 13 ms at p99
/// here (issue 38), so 8 batches of 1 MiB cover one commit at well over
/// 1 GB/s: the window never limits speed, and a connection holds at most
/// 32 MiB at the default frame limit.
pub const IN_FLIGHT_BATCHES_DEFAULT: u32 = 8;

/// The longest client id, in bytes (ASCII, so also characters): 64, as a
/// stream name, and room for a host name and a process number.
pub const CLIENT_ID_BYTES_MAX: usize = 64;

/// The longest token, in bytes: 256, room for any bearer token in use
/// (a 32-byte secret in hex or base64, a JWT of a few claims).
pub const TOKEN_BYTES_MAX: usize = 256;

/// The longest error message, in bytes of UTF-8: 1 KiB, one readable line
/// with a name or two in it. [`ErrorFrame::new`] cuts longer ones.
pub const MESSAGE_BYTES_MAX: usize = 1024;

/// The longest server name in a hello ok, in bytes of printable ASCII
/// (`cardinal 0.1.0`).
pub const SERVER_NAME_BYTES_MAX: usize = 64;

const _: () = assert!(FRAME_BYTES_MIN <= FRAME_BYTES_DEFAULT);
const _: () = assert!(FRAME_BYTES_DEFAULT <= FRAME_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(IN_FLIGHT_BATCHES_DEFAULT <= IN_FLIGHT_BATCHES_MAX);
const _: () = assert!(IN_FLIGHT_BATCHES_MAX as usize <= crate::dedup::DEDUP_WINDOW);
const _: () = assert!(CLIENT_ID_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(SERVER_NAME_BYTES_MAX <= u8::MAX as usize);
const _: () = assert!(TOKEN_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(MESSAGE_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(cardinal_route::NAME_CHARS_MAX <= u8::MAX as usize);

/// A batch id: chosen by the client, increasing per client, never reused
/// by a client id (see `docs/protocol.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

impl std::fmt::Display for BatchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A client's name for itself, stable across its reconnects: 1 to
/// [`CLIENT_ID_BYTES_MAX`] of `[A-Za-z0-9_.-]`, starting with a letter, a
/// digit or `_` (so never `.`, `..` or something that reads as a flag).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(String);

impl ClientId {
    /// Checks `id` against the rule of the type doc.
    pub fn new(id: &str) -> Result<ClientId> {
        check_client_id(id.as_bytes())?;
        Ok(ClientId(id.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_client_id(id: &[u8]) -> Result<()> {
    let bad = |reason: String| Error::BadName {
        what: "client id",
        reason: format!(
            "{reason}; client ids are 1 to {CLIENT_ID_BYTES_MAX} ASCII letters, digits, \
             '_', '.' and '-', starting with a letter, digit or '_'"
        ),
    };
    let Some(&first) = id.first() else {
        return Err(bad("it is empty".into()));
    };
    if id.len() > CLIENT_ID_BYTES_MAX {
        return Err(bad(format!("it is {} bytes long", id.len())));
    }
    if let Some(&c) = id
        .iter()
        .find(|&&c| !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-')))
    {
        return Err(bad(format!("it holds the byte {c:#04x}")));
    }
    if !(first.is_ascii_alphanumeric() || first == b'_') {
        return Err(bad(format!("it starts with '{}'", char::from(first))));
    }
    Ok(())
}

/// The name of a declared stream, by the dialect's rule
/// ([`cardinal_route::check_name`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamName(String);

impl StreamName {
    /// Checks `name` against the dialect's rule for names.
    pub fn new(name: &str) -> Result<StreamName> {
        cardinal_route::check_name(name).map_err(|reason| Error::BadName {
            what: "stream name",
            reason,
        })?;
        debug_assert!(name.len() <= cardinal_route::NAME_CHARS_MAX);
        Ok(StreamName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for StreamName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A secret a client presents in its hello: 1 to [`TOKEN_BYTES_MAX`]
/// bytes. Its `Debug` shows only its length, so it never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl Token {
    /// Checks the length of `bytes`.
    pub fn new(bytes: &[u8]) -> Result<Token> {
        if bytes.is_empty() || bytes.len() > TOKEN_BYTES_MAX {
            return Err(Error::BadName {
                what: "token",
                reason: format!(
                    "it is {} bytes long; tokens are 1 to {TOKEN_BYTES_MAX} bytes",
                    bytes.len()
                ),
            });
        }
        Ok(Token(bytes.to_vec()))
    }

    /// The token's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether `self` and `other` are the same token, in time that depends
    /// only on the longer one's length, never on where they differ (a
    /// server must not let a client find the token byte by byte).
    pub fn matches(&self, other: &Token) -> bool {
        let (a, b) = (self.as_bytes(), other.as_bytes());
        let mut diff = u8::from(a.len() != b.len());
        for i in 0..a.len().max(b.len()) {
            let x = a.get(i).copied().unwrap_or(0);
            let y = b.get(i).copied().unwrap_or(0);
            diff |= std::hint::black_box(x ^ y);
        }
        diff == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({} bytes)", self.0.len())
    }
}

/// The encoding of a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Delimited text, one record per line (tag 1).
    Csv,
    /// Newline-delimited JSON objects (tag 2).
    Ndjson,
}

impl Format {
    fn tag(self) -> u8 {
        match self {
            Format::Csv => 1,
            Format::Ndjson => 2,
        }
    }

    fn from_tag(tag: u8) -> Option<Format> {
        match tag {
            1 => Some(Format::Csv),
            2 => Some(Format::Ndjson),
            _ => None,
        }
    }

    /// The name of the format as the dialect writes it (`csv`, `ndjson`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Ndjson => "ndjson",
        }
    }
}

/// What an error frame is about. A client's action for each is in
/// `docs/protocol.md`; [`ErrorCode::action`] says it in code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1: the hello's protocol version is not spoken here.
    UnsupportedVersion,
    /// 2: the token is missing or wrong.
    NotAuthorized,
    /// 3: the client id breaks its rule.
    BadClientId,
    /// 4: a valid frame out of place (a batch before the hello, a second
    /// hello, a frame only a server sends).
    Protocol,
    /// 5: a frame that could not be decoded (checksum, unknown type, a
    /// field out of range).
    Malformed,
    /// 6: a frame over the receiver's frame limit.
    TooLarge,
    /// 7: a batch names a stream the server does not have.
    UnknownStream,
    /// 8: a batch's format is not its stream's, or its header line does
    /// not fit the stream's columns (one missing, one named twice, one
    /// the stream does not declare where it takes none).
    BadFormat,
    /// 9: a batch id older than the deduplication window: it cannot be
    /// told apart from one already counted, so it is refused.
    TooOld,
    /// 10: the server is shutting down.
    ServerStopping,
    /// 11: the server cannot make batches durable now (its storage failed;
    /// it stops and recovers).
    Unavailable,
    /// 12: the connection was idle for too long.
    Idle,
    /// 13: another connection said hello with this client id.
    Superseded,
    /// 14: the server holds as many connections as it allows.
    TooManyConnections,
    /// A code this build does not know (from a newer peer).
    Other(u16),
}

/// What a client does on an error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    /// The batch named failed for good (not counted, not to be resent);
    /// go on with the others.
    DropBatch,
    /// Close, wait (backing off), reconnect and resend every unacknowledged
    /// batch.
    Reconnect,
    /// Stop: retrying cannot help.
    Stop,
}

impl ErrorCode {
    /// The code's number on the wire.
    pub fn number(self) -> u16 {
        match self {
            ErrorCode::UnsupportedVersion => 1,
            ErrorCode::NotAuthorized => 2,
            ErrorCode::BadClientId => 3,
            ErrorCode::Protocol => 4,
            ErrorCode::Malformed => 5,
            ErrorCode::TooLarge => 6,
            ErrorCode::UnknownStream => 7,
            ErrorCode::BadFormat => 8,
            ErrorCode::TooOld => 9,
            ErrorCode::ServerStopping => 10,
            ErrorCode::Unavailable => 11,
            ErrorCode::Idle => 12,
            ErrorCode::Superseded => 13,
            ErrorCode::TooManyConnections => 14,
            ErrorCode::Other(n) => n,
        }
    }

    /// The code of a number (unknown numbers are [`ErrorCode::Other`]; 0
    /// is not a code and is refused by the decoder).
    pub fn from_number(n: u16) -> ErrorCode {
        match n {
            1 => ErrorCode::UnsupportedVersion,
            2 => ErrorCode::NotAuthorized,
            3 => ErrorCode::BadClientId,
            4 => ErrorCode::Protocol,
            5 => ErrorCode::Malformed,
            6 => ErrorCode::TooLarge,
            7 => ErrorCode::UnknownStream,
            8 => ErrorCode::BadFormat,
            9 => ErrorCode::TooOld,
            10 => ErrorCode::ServerStopping,
            11 => ErrorCode::Unavailable,
            12 => ErrorCode::Idle,
            13 => ErrorCode::Superseded,
            14 => ErrorCode::TooManyConnections,
            n => ErrorCode::Other(n),
        }
    }

    /// The code's name in messages and metrics (`unknown_stream`).
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::NotAuthorized => "not_authorized",
            ErrorCode::BadClientId => "bad_client_id",
            ErrorCode::Protocol => "protocol",
            ErrorCode::Malformed => "malformed",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnknownStream => "unknown_stream",
            ErrorCode::BadFormat => "bad_format",
            ErrorCode::TooOld => "too_old",
            ErrorCode::ServerStopping => "server_stopping",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Idle => "idle",
            ErrorCode::Superseded => "superseded",
            ErrorCode::TooManyConnections => "too_many_connections",
            ErrorCode::Other(_) => "other",
        }
    }

    /// What a client does on this code, with or without a batch id
    /// (`docs/protocol.md`, "Errors"). A code about a batch fails that
    /// batch; a code about the connection is transient or final. An
    /// unknown code fails its batch if it names one and stops otherwise:
    /// a client does not retry what it does not understand.
    pub fn action(self, about_batch: bool) -> ClientAction {
        match self {
            ErrorCode::UnknownStream | ErrorCode::BadFormat | ErrorCode::TooOld if about_batch => {
                ClientAction::DropBatch
            }
            ErrorCode::Other(_) if about_batch => ClientAction::DropBatch,
            ErrorCode::Malformed
            | ErrorCode::ServerStopping
            | ErrorCode::Unavailable
            | ErrorCode::Idle
            | ErrorCode::TooManyConnections => ClientAction::Reconnect,
            _ => ClientAction::Stop,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorCode::Other(n) => write!(f, "error code {n}"),
            code => f.write_str(code.name()),
        }
    }
}

/// The first frame of a connection, from the client. Its protocol version
/// is [`PROTOCOL_VERSION`], written and checked by the codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Who the client is, stable across its reconnects.
    pub client: ClientId,
    /// The token, where the server requires one.
    pub token: Option<Token>,
}

/// What a server tells a client it must respect, in its hello ok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame the client may send, header included
    /// ([`FRAME_BYTES_MIN`]`..=`[`FRAME_BYTES_MAX`]).
    pub frame_bytes_max: u32,
    /// The most batches the client may hold unacknowledged: it sends a
    /// batch only if its id is below the lowest unresolved id plus this
    /// (`1..=`[`IN_FLIGHT_BATCHES_MAX`]).
    pub in_flight_batches_max: u32,
    /// The server's deduplication window in batch ids
    /// ([`crate::DEDUP_WINDOW`]); at least the in-flight limit.
    pub dedup_window: u32,
}

impl Limits {
    /// The limits a server advertises unless configured otherwise.
    pub fn default_limits() -> Limits {
        Limits {
            frame_bytes_max: u32::try_from(FRAME_BYTES_DEFAULT).expect("asserted to fit"),
            in_flight_batches_max: IN_FLIGHT_BATCHES_DEFAULT,
            dedup_window: u32::try_from(crate::dedup::DEDUP_WINDOW).expect("asserted to fit"),
        }
    }

    /// Why these limits are out of range, if they are.
    pub fn check(&self) -> Result<(), String> {
        let frame = self.frame_bytes_max as usize;
        if !(FRAME_BYTES_MIN..=FRAME_BYTES_MAX).contains(&frame) {
            return Err(format!(
                "frame bytes max {frame} is outside {FRAME_BYTES_MIN}..={FRAME_BYTES_MAX}"
            ));
        }
        if !(1..=IN_FLIGHT_BATCHES_MAX).contains(&self.in_flight_batches_max) {
            return Err(format!(
                "in-flight batches max {} is outside 1..={IN_FLIGHT_BATCHES_MAX}",
                self.in_flight_batches_max
            ));
        }
        if self.dedup_window < self.in_flight_batches_max {
            return Err(format!(
                "dedup window {} is below the in-flight limit {}",
                self.dedup_window, self.in_flight_batches_max
            ));
        }
        Ok(())
    }
}

/// The server's answer to an accepted hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloOk {
    /// The server's name and version, printable ASCII
    /// (`1..=`[`SERVER_NAME_BYTES_MAX`] bytes).
    pub server: String,
    /// What the client must respect.
    pub limits: Limits,
    /// The highest batch id the server holds from this client id, if any:
    /// a client starts new ids above it, and stops if it is below a batch
    /// the server acknowledged to it ([`Error::ServerForgot`]).
    pub highest: Option<BatchId>,
}

/// Records for a stream, from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The client's id for this batch.
    pub id: BatchId,
    /// The stream the records go to.
    pub stream: StreamName,
    /// How the records are encoded.
    pub format: Format,
    /// CSV only: the payload's first line is a header naming the columns
    /// of the records after it (matched to the stream's by name).
    pub header: bool,
    /// Whole records (a last record without its final newline is whole).
    pub payload: Bytes,
}

/// The bit of a batch's format byte that says its payload starts with a
/// header line.
const HEADER_BIT: u8 = 0x80;

impl Batch {
    /// The bytes of this batch's frame, header included.
    pub fn frame_bytes(&self) -> usize {
        HEADER_BYTES + BATCH_FIXED_BYTES + self.stream.as_str().len() + self.payload.len()
    }
}

const BATCH_FIXED_BYTES: usize = 8 + 1 + 1;

/// A batch made durable, from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The batch.
    pub id: BatchId,
    /// Records accepted (0 on a duplicate).
    pub accepted: u64,
    /// Records rejected (counted by reason on the server; 0 on a
    /// duplicate).
    pub rejected: u64,
    /// The batch was already durable, from an earlier send: acknowledged
    /// again and not counted again. Its counts were in the first ack; the
    /// server does not keep them.
    pub duplicate: bool,
}

/// A refusal, from the server (a client sends none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// The batch refused, or none when the error is about the connection.
    pub batch: Option<BatchId>,
    /// What went wrong.
    pub code: ErrorCode,
    /// In words, for people (at most [`MESSAGE_BYTES_MAX`] bytes).
    pub message: String,
}

impl ErrorFrame {
    /// An error frame; a message over [`MESSAGE_BYTES_MAX`] bytes is cut at
    /// a character boundary.
    pub fn new(batch: Option<BatchId>, code: ErrorCode, message: &str) -> ErrorFrame {
        let mut end = message.len().min(MESSAGE_BYTES_MAX);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        ErrorFrame {
            batch,
            code,
            message: message[..end].to_owned(),
        }
    }
}

/// One frame of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Type 1, client to server, first.
    Hello(Hello),
    /// Type 2, server to client, the answer to an accepted hello.
    HelloOk(HelloOk),
    /// Type 3, client to server.
    Batch(Batch),
    /// Type 4, server to client.
    Ack(Ack),
    /// Type 5, server to client.
    Error(ErrorFrame),
    /// Type 6, either way: answer with a pong of the same nonce.
    Ping(u64),
    /// Type 7, either way.
    Pong(u64),
}

impl Frame {
    fn tag(&self) -> u8 {
        match self {
            Frame::Hello(_) => 1,
            Frame::HelloOk(_) => 2,
            Frame::Batch(_) => 3,
            Frame::Ack(_) => 4,
            Frame::Error(_) => 5,
            Frame::Ping(_) => 6,
            Frame::Pong(_) => 7,
        }
    }

    /// The frame type's name, for messages.
    pub fn name(&self) -> &'static str {
        type_name(self.tag())
    }
}

fn type_name(tag: u8) -> &'static str {
    match tag {
        1 => "hello",
        2 => "hello ok",
        3 => "batch",
        4 => "ack",
        5 => "error",
        6 => "ping",
        7 => "pong",
        _ => "unknown",
    }
}

/// Appends the bytes of `frame` to `out`.
///
/// # Panics
///
/// If a field is out of its range (a frame built by hand with a message
/// over [`MESSAGE_BYTES_MAX`], limits outside [`Limits::check`], a frame
/// over [`FRAME_BYTES_MAX`], ...): frames come from code, and the decoder
/// would refuse such bytes.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    encode_body(frame, out);
    let body_bytes = out.len() - start - HEADER_BYTES;
    assert!(
        HEADER_BYTES + body_bytes <= FRAME_BYTES_MAX,
        "a {} frame of {} bytes is over FRAME_BYTES_MAX",
        frame.name(),
        HEADER_BYTES + body_bytes
    );
    let length = u32::try_from(body_bytes).expect("FRAME_BYTES_MAX fits u32");
    out[start..start + 4].copy_from_slice(&length.to_le_bytes());
    out[start + 4] = frame.tag();
    let crc = checksum(&out[start..start + 5], &out[start + HEADER_BYTES..]);
    out[start + 5..start + HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(
        Decoder::new(FRAME_BYTES_MAX)
            .header(&out[start..])
            .ok()
            .flatten()
            .map(|h| h.frame_bytes()),
        Some(out.len() - start)
    );
}

fn checksum(head: &[u8], body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head);
    hasher.update(body);
    hasher.finalize()
}

fn encode_body(frame: &Frame, out: &mut Vec<u8>) {
    match frame {
        Frame::Hello(hello) => {
            out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
            put_u8_len(out, hello.client.as_str().as_bytes());
            let token = hello.token.as_ref().map_or(&[][..], Token::as_bytes);
            let token_bytes = u16::try_from(token.len()).expect("TOKEN_BYTES_MAX fits u16");
            out.extend_from_slice(&token_bytes.to_le_bytes());
            out.extend_from_slice(token);
        }
        Frame::HelloOk(ok) => {
            if let Err(reason) = ok.limits.check() {
                panic!("hello ok with bad limits: {reason}");
            }
            assert!(server_name_ok(ok.server.as_bytes()), "bad server name");
            out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
            out.extend_from_slice(&ok.limits.frame_bytes_max.to_le_bytes());
            out.extend_from_slice(&ok.limits.in_flight_batches_max.to_le_bytes());
            out.extend_from_slice(&ok.limits.dedup_window.to_le_bytes());
            out.push(u8::from(ok.highest.is_some()));
            out.extend_from_slice(&ok.highest.map_or(0, |id| id.0).to_le_bytes());
            put_u8_len(out, ok.server.as_bytes());
        }
        Frame::Batch(batch) => {
            assert!(
                !batch.header || batch.format == Format::Csv,
                "a header line in a batch of {}",
                batch.format.name()
            );
            out.extend_from_slice(&batch.id.0.to_le_bytes());
            out.push(batch.format.tag() | if batch.header { HEADER_BIT } else { 0 });
            put_u8_len(out, batch.stream.as_str().as_bytes());
            out.extend_from_slice(&batch.payload);
        }
        Frame::Ack(ack) => {
            out.extend_from_slice(&ack.id.0.to_le_bytes());
            out.extend_from_slice(&ack.accepted.to_le_bytes());
            out.extend_from_slice(&ack.rejected.to_le_bytes());
            out.push(u8::from(ack.duplicate));
        }
        Frame::Error(error) => {
            let number = error.code.number();
            assert!(number != 0, "error code 0 is not a code");
            assert!(error.message.len() <= MESSAGE_BYTES_MAX, "message too long");
            out.extend_from_slice(&number.to_le_bytes());
            out.push(u8::from(error.batch.is_some()));
            out.extend_from_slice(&error.batch.map_or(0, |id| id.0).to_le_bytes());
            let bytes = u16::try_from(error.message.len()).expect("MESSAGE_BYTES_MAX fits u16");
            out.extend_from_slice(&bytes.to_le_bytes());
            out.extend_from_slice(error.message.as_bytes());
        }
        Frame::Ping(nonce) | Frame::Pong(nonce) => out.extend_from_slice(&nonce.to_le_bytes()),
    }
}

fn put_u8_len(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(u8::try_from(bytes.len()).expect("names are checked to fit u8"));
    out.extend_from_slice(bytes);
}

fn server_name_ok(name: &[u8]) -> bool {
    (1..=SERVER_NAME_BYTES_MAX).contains(&name.len())
        && name.iter().all(|&c| (b' '..=b'~').contains(&c))
}

/// A checked frame header: what a reader needs to know before it reads or
/// reserves room for a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The type byte (1 to 7).
    pub tag: u8,
    /// The bytes of the body after the header.
    pub body_bytes: u32,
    /// The checksum the header carries.
    pub crc: u32,
}

impl Header {
    /// The bytes of the whole frame, header included.
    pub fn frame_bytes(&self) -> usize {
        HEADER_BYTES + self.body_bytes as usize
    }
}

/// Decodes frames against a frame limit (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    frame_bytes_max: usize,
}

impl Default for Decoder {
    /// A decoder that accepts frames up to [`FRAME_BYTES_MAX`].
    fn default() -> Decoder {
        Decoder::new(FRAME_BYTES_MAX)
    }
}

impl Decoder {
    /// A decoder that refuses frames over `frame_bytes_max` bytes, header
    /// included. A server passes the limit it advertises; a client, which
    /// receives only small frames, can use [`Decoder::default`].
    ///
    /// # Panics
    ///
    /// If `frame_bytes_max` is outside
    /// [`FRAME_BYTES_MIN`]`..=`[`FRAME_BYTES_MAX`].
    pub fn new(frame_bytes_max: usize) -> Decoder {
        assert!(
            (FRAME_BYTES_MIN..=FRAME_BYTES_MAX).contains(&frame_bytes_max),
            "frame_bytes_max {frame_bytes_max} outside FRAME_BYTES_MIN..=FRAME_BYTES_MAX"
        );
        Decoder { frame_bytes_max }
    }

    /// The limit this decoder holds frames to.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }

    /// The header at the start of `buf`, checked (length within the limit,
    /// a known type); `Ok(None)` while `buf` holds fewer than
    /// [`HEADER_BYTES`].
    pub fn header(&self, buf: &[u8]) -> Result<Option<Header>> {
        let Some(head) = buf.get(..HEADER_BYTES) else {
            return Ok(None);
        };
        // No native frame starts so: its length would be over 1 GiB.
        if [&b"HTTP/"[..], b"GET /", b"POST ", b"PUT /", b"HEAD "]
            .iter()
            .any(|http| head.starts_with(http))
        {
            return Err(Error::Http);
        }
        let body_bytes = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let tag = head[4];
        let crc = u32::from_le_bytes(head[5..9].try_into().expect("4 bytes"));
        let frame_bytes = HEADER_BYTES as u64 + u64::from(body_bytes);
        if frame_bytes > self.frame_bytes_max as u64 {
            return Err(Error::FrameTooLarge {
                frame_bytes,
                frame_bytes_max: self.frame_bytes_max,
            });
        }
        if !(1..=7).contains(&tag) {
            return Err(Error::UnknownFrameType { tag });
        }
        Ok(Some(Header {
            tag,
            body_bytes,
            crc,
        }))
    }

    /// The frame at the start of `buf` and the bytes it took, or
    /// `Ok(None)` while `buf` holds less than a whole frame. The payload of
    /// a batch is copied out of `buf`.
    pub fn decode(&self, buf: &[u8]) -> Result<Option<(Frame, usize)>> {
        let Some(header) = self.header(buf)? else {
            return Ok(None);
        };
        let Some(frame) = buf.get(..header.frame_bytes()) else {
            return Ok(None);
        };
        check_crc(&header, frame)?;
        let body = Bytes::copy_from_slice(&frame[HEADER_BYTES..]);
        Ok(Some((parse_body(header.tag, &body)?, header.frame_bytes())))
    }

    /// The frame at the start of `buf`, split off it (a batch's payload is
    /// a view of `buf`'s memory, not a copy), or `Ok(None)` while `buf`
    /// holds less than a whole frame (then `buf` is unchanged; so it is on
    /// an error, after which the connection is closed).
    pub fn decode_buf(&self, buf: &mut BytesMut) -> Result<Option<Frame>> {
        let Some(header) = self.header(buf)? else {
            return Ok(None);
        };
        if buf.len() < header.frame_bytes() {
            return Ok(None);
        }
        check_crc(&header, &buf[..header.frame_bytes()])?;
        let frame = buf.split_to(header.frame_bytes()).freeze();
        parse_body(header.tag, &frame.slice(HEADER_BYTES..)).map(Some)
    }
}

fn check_crc(header: &Header, frame: &[u8]) -> Result<()> {
    let computed = checksum(&frame[..5], &frame[HEADER_BYTES..]);
    // Fuzzing skips the checksum so mutations reach the body's rules.
    if computed != header.crc && !cfg!(fuzzing) {
        return Err(Error::Checksum {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// A cursor over a whole body: running out of bytes here is a malformed
/// frame, not a short read.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
    frame: &'static str,
}

impl<'a> Reader<'a> {
    fn malformed(&self, reason: String) -> Error {
        Error::Malformed {
            frame: self.frame,
            reason,
        }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let left = self.body.len() - self.at;
        if n > left {
            return Err(self.malformed(format!(
                "the body ends inside {field}: {n} bytes needed, {left} left"
            )));
        }
        let bytes = &self.body[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2, field)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, field)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8 bytes"),
        ))
    }

    fn flag(&mut self, field: &str) -> Result<bool> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.malformed(format!("{field} is {other}, not 0 or 1"))),
        }
    }

    /// A length-prefixed field: the length is checked against `max` before
    /// the bytes are taken.
    fn sized(&mut self, len: usize, max: usize, field: &str) -> Result<&'a [u8]> {
        if len > max {
            return Err(self.malformed(format!("{field} is {len} bytes, over the limit of {max}")));
        }
        self.take(len, field)
    }

    fn end(&self) -> Result<()> {
        let left = self.body.len() - self.at;
        if left != 0 {
            return Err(self.malformed(format!("{left} bytes left after the last field")));
        }
        Ok(())
    }
}

fn parse_body(tag: u8, body: &Bytes) -> Result<Frame> {
    let mut r = Reader {
        body,
        at: 0,
        frame: type_name(tag),
    };
    let frame = match tag {
        1 => {
            let version = r.u16("the version")?;
            if version != PROTOCOL_VERSION {
                return Err(Error::UnsupportedVersion {
                    found: version,
                    supported: PROTOCOL_VERSION,
                });
            }
            let len = usize::from(r.u8("the client id's length")?);
            let id = r.sized(len, CLIENT_ID_BYTES_MAX, "the client id")?;
            check_client_id(id)?;
            let client = ClientId(String::from_utf8(id.to_vec()).expect("checked ASCII"));
            let len = usize::from(r.u16("the token's length")?);
            let token = r.sized(len, TOKEN_BYTES_MAX, "the token")?;
            let token = if token.is_empty() {
                None
            } else {
                Some(Token::new(token)?)
            };
            Frame::Hello(Hello { client, token })
        }
        2 => {
            let version = r.u16("the version")?;
            if version != PROTOCOL_VERSION {
                return Err(Error::UnsupportedVersion {
                    found: version,
                    supported: PROTOCOL_VERSION,
                });
            }
            let limits = Limits {
                frame_bytes_max: r.u32("the frame limit")?,
                in_flight_batches_max: r.u32("the in-flight limit")?,
                dedup_window: r.u32("the dedup window")?,
            };
            limits.check().map_err(|reason| r.malformed(reason))?;
            let known = r.flag("the known flag")?;
            let highest = r.u64("the highest batch id")?;
            if !known && highest != 0 {
                return Err(r.malformed("a highest batch id without the known flag".into()));
            }
            let len = usize::from(r.u8("the server name's length")?);
            let name = r.sized(len, SERVER_NAME_BYTES_MAX, "the server name")?;
            if !server_name_ok(name) {
                return Err(Error::BadName {
                    what: "server name",
                    reason: format!(
                        "server names are 1 to {SERVER_NAME_BYTES_MAX} bytes of printable ASCII"
                    ),
                });
            }
            Frame::HelloOk(HelloOk {
                server: String::from_utf8(name.to_vec()).expect("checked ASCII"),
                limits,
                highest: known.then_some(BatchId(highest)),
            })
        }
        3 => {
            let id = BatchId(r.u64("the batch id")?);
            let byte = r.u8("the format")?;
            let header = byte & HEADER_BIT != 0;
            let tag = byte & !HEADER_BIT;
            let format =
                Format::from_tag(tag).ok_or_else(|| r.malformed(format!("format tag {tag}")))?;
            if header && format != Format::Csv {
                return Err(r.malformed(format!(
                    "the header bit is set in a batch of {}: only CSV carries a header line",
                    format.name()
                )));
            }
            let len = usize::from(r.u8("the stream name's length")?);
            let name = r.sized(len, cardinal_route::NAME_CHARS_MAX, "the stream name")?;
            let name = std::str::from_utf8(name).map_err(|_| Error::BadName {
                what: "stream name",
                reason: "it is not UTF-8".into(),
            })?;
            let stream = StreamName::new(name)?;
            let payload = body.slice(r.at..);
            r.at = body.len();
            Frame::Batch(Batch {
                id,
                stream,
                format,
                header,
                payload,
            })
        }
        4 => Frame::Ack(Ack {
            id: BatchId(r.u64("the batch id")?),
            accepted: r.u64("the accepted count")?,
            rejected: r.u64("the rejected count")?,
            duplicate: r.flag("the duplicate flag")?,
        }),
        5 => {
            let number = r.u16("the code")?;
            if number == 0 {
                return Err(r.malformed("error code 0".into()));
            }
            let has_batch = r.flag("the batch flag")?;
            let id = r.u64("the batch id")?;
            if !has_batch && id != 0 {
                return Err(r.malformed("a batch id without the batch flag".into()));
            }
            let len = usize::from(r.u16("the message's length")?);
            let message = r.sized(len, MESSAGE_BYTES_MAX, "the message")?;
            let message = std::str::from_utf8(message)
                .map_err(|_| r.malformed("the message is not UTF-8".into()))?;
            Frame::Error(ErrorFrame {
                batch: has_batch.then_some(BatchId(id)),
                code: ErrorCode::from_number(number),
                message: message.to_owned(),
            })
        }
        6 => Frame::Ping(r.u64("the nonce")?),
        7 => Frame::Pong(r.u64("the nonce")?),
        _ => return Err(Error::UnknownFrameType { tag }),
    };
    r.end()?;
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        encode(frame, &mut out);
        out
    }

    #[test]
    fn ping_is_the_worked_example() {
        let bytes = bytes_of(&Frame::Ping(7));
        assert_eq!(bytes.len(), 17);
        assert_eq!(&bytes[..5], &[8, 0, 0, 0, 6]);
        assert_eq!(&bytes[9..], &[7, 0, 0, 0, 0, 0, 0, 0]);
        let mut covered = bytes[..5].to_vec();
        covered.extend_from_slice(&bytes[9..]);
        assert_eq!(bytes[5..9], crc32fast::hash(&covered).to_le_bytes());
    }

    #[test]
    fn client_ids_follow_their_rule() {
        for good in ["a", "host-1.example_2", "_x", "9", &"n".repeat(64)] {
            assert!(ClientId::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "-x",
            ".x",
            "a b",
            "a/b",
            "é",
            &"n".repeat(65),
        ] {
            assert!(ClientId::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_match_only_themselves() {
        let a = Token::new(b"secret").expect("valid");
        assert!(a.matches(&Token::new(b"secret").expect("valid")));
        for other in [&b"secreT"[..], b"secret!", b"secre", b"Secret"] {
            assert!(!a.matches(&Token::new(other).expect("valid")));
        }
        assert_eq!(format!("{a:?}"), "Token(6 bytes)");
        assert!(Token::new(b"").is_err());
        assert!(Token::new(&[1; TOKEN_BYTES_MAX + 1]).is_err());
    }

    #[test]
    fn long_messages_are_cut_at_a_character() {
        let long = "é".repeat(MESSAGE_BYTES_MAX);
        let frame = ErrorFrame::new(None, ErrorCode::Protocol, &long);
        assert_eq!(frame.message.len(), MESSAGE_BYTES_MAX);
        let long = format!("x{}", "é".repeat(MESSAGE_BYTES_MAX));
        let frame = ErrorFrame::new(None, ErrorCode::Protocol, &long);
        assert_eq!(frame.message.len(), MESSAGE_BYTES_MAX - 1);
    }

    #[test]
    fn error_codes_round_trip_their_numbers() {
        for n in 1..=20 {
            assert_eq!(ErrorCode::from_number(n).number(), n);
        }
    }
}
