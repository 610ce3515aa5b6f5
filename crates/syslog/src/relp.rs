//! RELP, the Reliable Event Logging Protocol: the frames a client (rsyslog's
//! `omrelp`, through librelp) sends, decoded incrementally from the bytes
//! buffered off a socket, and the `rsp` replies the server writes.
//!
//! The protocol is Rainer Gerhards' (librelp's `doc/relp.md`, 2008), as
//! librelp implements it (read in version 1.13, run against 1.11.0). A
//! client opens a session with `open`, sends each message as a `syslog`
//! command, and ends with `close`; the server answers every command with an
//! `rsp` carrying the command's transaction number (txnr). The reply to a
//! `syslog` command is the message's acknowledgement.
//!
//! # Frames
//!
//! ```text
//! FRAME   = TXNR SP COMMAND SP DATALEN [SP DATA] TRAILER
//! TXNR    = 1*9DIGIT          ; 1..=999999999 from a client; 0 is the server's hints
//! COMMAND = 1*32ALPHA         ; open, syslog, close from a client; rsp, serverclose from us
//! DATALEN = 1*9DIGIT          ; the octets in DATA; 0 means no SP and no DATA
//! TRAILER = LF
//! ```
//!
//! What rsyslog 8.2302 (librelp 1.11.0) sent to a test server, byte for
//! byte (`tests/data/rsyslog-omrelp.bin`):
//!
//! ```text
//! 1 open 86 relp_version=0\nrelp_software=librelp,1.11.0,http://librelp.adiscon.com\ncommands=syslog\n
//! 2 syslog 58 <13>2026-11-28T21:10:40.136747+00:00 vm mytag hello relp 1\n
//! 4 close 0\n
//! ```
//!
//! and the server's replies:
//!
//! ```text
//! 1 rsp 60 200 OK\nrelp_version=0\nrelp_software=cardinal\ncommands=syslog\n
//! 2 rsp 6 200 OK\n
//! 4 rsp 6 200 OK\n
//! 0 serverclose 0\n          (a hint, before the server closes the connection)
//! ```
//!
//! # Rules and limits
//!
//! - **DATA** is at most [`RELP_DATA_BYTES_MAX`] (128 KiB) bytes, librelp's
//!   default and the spec's figure. A larger DATALEN is an error as soon as
//!   its digits show it, before any data is buffered, so a reader never
//!   holds more than [`FRAME_BYTES_MAX`] undecoded bytes.
//! - **TXNR**: 1 to 9 digits (leading zeros allowed, as librelp reads them),
//!   value 1..=[`TXNR_MAX`]. A client numbers its commands from 1 on each
//!   connection and wraps back to 1 after 999,999,999 ([`next_txnr`]). A
//!   txnr of 0 is reserved for the server's hints: from a client it is an
//!   error. librelp's receiver closes a session whose txnr is not exactly
//!   the next one. [`decode`] is stateless and does not check the order; a
//!   server that answers every frame with that frame's own txnr, in
//!   arrival order, serves even a client that skips or repeats numbers.
//!   Exactly-once does not rest on txnrs at all: they restart at 1 on
//!   every connection, and librelp renumbers the frames it resends after a
//!   reconnect. The per-sender message ids (`ids`) do that job.
//!   (librelp's own counter steps from 999,999,999 to 1,000,000,000 before
//!   it wraps, a 10-digit number its frame builder refuses, so a librelp
//!   session breaks and reconnects after a billion commands; we reject 10
//!   digits, as librelp's receiver does.)
//! - **COMMAND**: 1 to [`COMMAND_BYTES_MAX`] ASCII letters, case-sensitive.
//!   `open`, `syslog` and `close` are [`Command`]'s variants; any other
//!   name decodes as [`Command::Other`] (librelp closes the session on an
//!   unknown command; we let the server answer `rsp 500` naming it and go
//!   on, which costs nothing and keeps the client's window moving). A
//!   client sending `rsp` is an error: only the server responds.
//! - **DATALEN**: 1 to [`DATALEN_DIGITS_MAX`] digits. With DATALEN 0 the
//!   trailer follows at once (`4 close 0\n`); with DATALEN above 0 one SP
//!   separates it from the data. Anything else is an error.
//! - **TRAILER**: exactly one LF after the data; any other byte there means
//!   the framing is lost, an error.
//! - **Errors close the session**: the spec's error handling is "the peer
//!   that detects the problem closes the underlying connection". The server
//!   sends [`serverclose`] and closes; the client reconnects and resends
//!   what was unacknowledged.
//!
//! # Sessions, for the server
//!
//! - **`open`**: reply with [`open_reply`], which checks the client's
//!   offers (`relp_version` must be present and numeric, `commands` must
//!   include `syslog`) and offers back `relp_version=0` (the version librelp
//!   speaks; its client accepts any version not above its own),
//!   `relp_software` and `commands=syslog`. On an error, reply `rsp 500`
//!   with the error's text and close. A second `open` in an open session is
//!   answered `200` and ignored, as librelp does.
//! - **`syslog`**: DATA is one syslog message. An empty message
//!   (`5 syslog 0\n`) decodes: the grammar allows it and librelp passes it
//!   on. There is nothing in it to record; acknowledge it with `200` and
//!   count it, so the client does not resend it forever.
//! - **`close`**: reply `rsp 200 OK`, then close. (librelp's server replies
//!   with an empty `rsp`, which its client then fails to parse as a
//!   response header; a `200 OK` reaches the client's close handler.)
//! - **What `rsp 500` does to a librelp client** (seen with rsyslog 8.2302
//!   and librelp 1.11.0, `tests/rsyslog_relp.rs`): it takes the frame off
//!   its list of unacknowledged frames, so that message is never resent;
//!   it reports an error, and omrelp suspends the action and retries its
//!   current message later. The error also makes librelp drop the rest of
//!   the bytes it read with the 500, so the replies right behind it are
//!   lost and those frames are resent after the next reconnect: duplicates
//!   that the message-id window absorbs. So reply 500 only for a frame
//!   refused on purpose (and count it). For trouble that may pass (a full
//!   disk, a WAL that would not sync), close the connection without
//!   replying: the client resends every frame still unacknowledged.
//! - **Reconnects**: after the server closes a session, librelp opens a new
//!   one only when it has a new message to send; it then resends its
//!   unacknowledged frames first, renumbered from 2 (the `open` is 1),
//!   then the new ones.
//! - **Window and flow control**: a librelp client keeps at most
//!   [`UNACKED_FRAMES_MAX`] (128, its default; rsyslog's `windowSize`)
//!   frames unacknowledged, then waits for replies before it sends more.
//!   Replies must go out in the order the commands came in. The server
//!   acknowledges a `syslog` frame only after its record is durable (the
//!   WAL's sync), so holding back `rsp` is the back-pressure: a client
//!   whose window is full stops. A server that stops reading once it holds
//!   [`UNACKED_FRAMES_MAX`] unanswered frames bounds its memory even
//!   against a client with a bigger window, which then waits on TCP.
//! - **`rsp` text**: at most [`RSP_TEXT_BYTES_MAX`] bytes on one line;
//!   [`rsp`] truncates and flattens what it is given.

use std::fmt;

use thiserror::Error;

/// The most bytes of DATA a frame may carry: 128 KiB.
///
/// This is librelp's default `maxDataSize` (`RELP_DFLT_MAX_DATA_SIZE`) and
/// the spec's "in relp version 1, it is always 128K". rsyslog's omrelp
/// truncates each message to the sender's `maxMessageSize` (8 KiB unless
/// raised) before sending, and imrelp's own `maxDataSize` defaults to that
/// same `maxMessageSize`, so every message of a default rsyslog fits, with
/// room for senders that raised it sixteenfold. A frame declaring more is
/// an error that closes the session (librelp's `oversizeMode=abort`): a
/// stateless decoder cannot skip data it will not buffer.
pub const RELP_DATA_BYTES_MAX: usize = 128 * 1024;

/// The largest transaction number: the nine digits the grammar allows.
pub const TXNR_MAX: u64 = 999_999_999;

/// The most digits in TXNR: the grammar's `NUMBER = 1*9DIGIT`.
pub const TXNR_DIGITS_MAX: usize = 9;

/// The most letters in COMMAND: the grammar's `COMMAND = 1*32ALPHA`.
pub const COMMAND_BYTES_MAX: usize = 32;

/// The most digits in DATALEN: the grammar's `NUMBER = 1*9DIGIT`.
pub const DATALEN_DIGITS_MAX: usize = 9;

/// The longest header, up to and including the SP before DATA:
/// `TXNR SP COMMAND SP DATALEN SP`.
pub const HEADER_BYTES_MAX: usize =
    TXNR_DIGITS_MAX + 1 + COMMAND_BYTES_MAX + 1 + DATALEN_DIGITS_MAX + 1;

/// The most bytes a buffered, undecoded frame can need: the longest header,
/// [`RELP_DATA_BYTES_MAX`] of data, and the LF. Once a reader holds this
/// many bytes, [`decode`] returns a frame or an error, never `Ok(None)`; so
/// a reader's buffer never needs to grow past it.
pub const FRAME_BYTES_MAX: usize = HEADER_BYTES_MAX + RELP_DATA_BYTES_MAX + 1;

/// The most bytes of human-readable text in an `rsp`: the spec's
/// `HUMAN-TEXT = *80ALPHA`; librelp's client reads no more than 80.
pub const RSP_TEXT_BYTES_MAX: usize = 80;

/// The frames a librelp client keeps unacknowledged before it waits for
/// replies: librelp's `RELP_DFLT_WINDOW_SIZE` (rsyslog omrelp's
/// `windowSize` when not set). A server that stops reading a connection
/// holding this many unanswered frames stalls no default client and bounds
/// its memory for any client.
pub const UNACKED_FRAMES_MAX: usize = 128;

/// The RELP version we offer: 0, the version librelp speaks (its
/// `RELP_CURR_PROTOCOL_VERSION`). The spec calls it experimental, but every
/// deployed client uses it.
pub const RELP_VERSION: u32 = 0;

/// The `rsp` code for success.
pub const RSP_OK: u16 = 200;

/// The `rsp` code for an error. To a librelp client it means the frame is
/// refused for good: it will not be resent.
pub const RSP_ERROR: u16 = 500;

// The header fits the longest command; the buffered frame bound follows.
const _: () = assert!(HEADER_BYTES_MAX == 53);
const _: () = assert!(FRAME_BYTES_MAX == 53 + 131_072 + 1);
// Nine digits hold the data limit and TXNR_MAX, and u64 holds nine digits.
const _: () = assert!(RELP_DATA_BYTES_MAX < 1_000_000_000);
const _: () = assert!(TXNR_MAX == 1_000_000_000 - 1);

/// A command a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// `open`: starts the session; DATA holds the client's offers.
    Open,
    /// `syslog`: DATA is one syslog message.
    Syslog,
    /// `close`: ends the session; no DATA.
    Close,
    /// Any other name of 1 to 32 ASCII letters (`starttls`, a future
    /// command, a hint): the server answers `rsp 500`.
    Other(&'a str),
}

impl<'a> Command<'a> {
    /// The command's name as it appears on the wire.
    pub fn name(&self) -> &'a str {
        match self {
            Command::Open => "open",
            Command::Syslog => "syslog",
            Command::Close => "close",
            Command::Other(name) => name,
        }
    }
}

/// One frame from a client, borrowing the input it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The transaction number, 1..=[`TXNR_MAX`]; the reply carries it.
    pub txnr: u64,
    /// What the client asks.
    pub command: Command<'a>,
    /// The command's data: offers for `open`, the message for `syslog`;
    /// at most [`RELP_DATA_BYTES_MAX`] bytes.
    pub data: &'a [u8],
}

impl Frame<'_> {
    /// Appends the frame's encoding to `out`, as a client sends it (tests,
    /// load generators).
    ///
    /// # Panics
    ///
    /// If the frame could not be decoded back: a txnr outside
    /// 1..=[`TXNR_MAX`], a command name that is not 1 to 32 ASCII letters
    /// or is `rsp`, or data over [`RELP_DATA_BYTES_MAX`].
    pub fn encode(&self, out: &mut Vec<u8>) {
        let name = self.command.name();
        assert!(
            (1..=TXNR_MAX).contains(&self.txnr),
            "txnr {} out of range",
            self.txnr
        );
        assert!(
            !name.is_empty() && name.len() <= COMMAND_BYTES_MAX,
            "command length"
        );
        assert!(
            name.bytes().all(|b| b.is_ascii_alphabetic()),
            "command must be letters"
        );
        assert!(name != "rsp", "a client does not send rsp");
        assert!(
            self.data.len() <= RELP_DATA_BYTES_MAX,
            "data over the limit"
        );
        write_frame(self.txnr, name, &[self.data], out);
    }
}

/// The txnr a client uses after `txnr`: the next number, wrapping from
/// [`TXNR_MAX`] back to 1 (the spec's rule; 0 is never a command's).
pub fn next_txnr(txnr: u64) -> u64 {
    debug_assert!((1..=TXNR_MAX).contains(&txnr));
    if txnr >= TXNR_MAX { 1 } else { txnr + 1 }
}

/// What is wrong with a frame or an `open`'s offers. Every error closes
/// the session (after an `rsp 500` for a bad `open`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RelpError {
    /// A byte that the grammar does not allow where it stands.
    #[error(
        "RELP frame: expected {expected} in the {field}, found {found}; the stream is not RELP or lost its framing"
    )]
    UnexpectedByte {
        /// The field being read: `txnr`, `command`, `datalen` or `data`.
        field: &'static str,
        /// What the grammar allows there.
        expected: &'static str,
        /// The byte found instead.
        found: Byte,
    },
    /// A field longer than the grammar allows.
    #[error("RELP frame: the {field} is longer than {max} {unit}")]
    FieldTooLong {
        /// The field: `txnr`, `command` or `datalen`.
        field: &'static str,
        /// Its most characters.
        max: usize,
        /// What the characters are: digits or letters.
        unit: &'static str,
    },
    /// Txnr 0, reserved for the server's hints.
    #[error(
        "RELP frame: txnr 0 is reserved for the server's hints; a client numbers its commands from 1"
    )]
    TxnrZero,
    /// A client sent `rsp`, which only the server sends.
    #[error("RELP frame: the client sent `rsp` (txnr {txnr}); only the server responds")]
    RspFromClient {
        /// The frame's txnr.
        txnr: u64,
    },
    /// DATALEN over [`RELP_DATA_BYTES_MAX`].
    #[error(
        "RELP frame: DATALEN {datalen} is over the {max}-byte limit; lower the sender's \
         maxMessageSize (rsyslog) to at most {max}"
    )]
    DataTooLong {
        /// The declared length (as far as its digits were read).
        datalen: u64,
        /// The limit, [`RELP_DATA_BYTES_MAX`].
        max: usize,
    },
    /// The byte after the data is not the LF trailer: DATALEN did not
    /// count the data.
    #[error(
        "RELP frame: expected LF after {datalen} bytes of data (txnr {txnr}), found {found}; DATALEN does not match the data"
    )]
    MissingTrailer {
        /// The frame's txnr.
        txnr: u64,
        /// The frame's DATALEN.
        datalen: usize,
        /// The byte found where the LF belongs.
        found: Byte,
    },
    /// An `open` without the `relp_version` offer.
    #[error(
        "RELP open: the client's offers lack relp_version; a RELP client must say which version it speaks"
    )]
    VersionMissing,
    /// An `open` whose `relp_version` is not a number.
    #[error("RELP open: relp_version must be a number of at most 9 digits")]
    VersionInvalid,
    /// An `open` whose `commands` offer lacks `syslog`.
    #[error(
        "RELP open: the client does not offer the syslog command (commands=syslog); it has nothing to send us"
    )]
    SyslogNotOffered,
}

impl RelpError {
    /// A short, fixed label for counting errors by kind (a metric's label).
    pub fn reason(&self) -> &'static str {
        match self {
            RelpError::UnexpectedByte { .. } => "unexpected_byte",
            RelpError::FieldTooLong { .. } => "field_too_long",
            RelpError::TxnrZero => "txnr_zero",
            RelpError::RspFromClient { .. } => "rsp_from_client",
            RelpError::DataTooLong { .. } => "data_too_long",
            RelpError::MissingTrailer { .. } => "missing_trailer",
            RelpError::VersionMissing => "relp_version_missing",
            RelpError::VersionInvalid => "relp_version_invalid",
            RelpError::SyslogNotOffered => "syslog_not_offered",
        }
    }
}

/// A byte in an error message: printable ASCII quoted, anything else in hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Byte(pub u8);

impl fmt::Display for Byte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b'\n' => f.write_str("LF"),
            b'\r' => f.write_str("CR"),
            b' ' => f.write_str("SP"),
            b if b.is_ascii_graphic() => write!(f, "'{}'", char::from(b)),
            b => write!(f, "byte 0x{b:02x}"),
        }
    }
}

/// How a run of digits at the front of a field ended.
enum Digits {
    /// The input ended inside the run: more bytes are needed.
    Partial,
    /// The run's value and the index of the byte after it.
    Done { value: u64, end: usize },
}

/// Reads 1 to `digits_max` ASCII digits starting at `start`. Errors on a
/// non-digit first byte and on a run longer than `digits_max`; `value_max`
/// lets the caller fail as soon as the digits so far exceed a limit.
fn digits(
    input: &[u8],
    start: usize,
    field: &'static str,
    digits_max: usize,
    value_max: u64,
) -> Result<Digits, RelpError> {
    debug_assert!(digits_max <= 9, "nine digits always fit a u64");
    let mut value: u64 = 0;
    let mut at = start;
    loop {
        let Some(&byte) = input.get(at) else {
            return Ok(Digits::Partial);
        };
        if !byte.is_ascii_digit() {
            if at == start {
                return Err(RelpError::UnexpectedByte {
                    field,
                    expected: "a digit",
                    found: Byte(byte),
                });
            }
            return Ok(Digits::Done { value, end: at });
        }
        if at - start == digits_max {
            return Err(RelpError::FieldTooLong {
                field,
                max: digits_max,
                unit: "digits",
            });
        }
        value = value * 10 + u64::from(byte - b'0');
        if value > value_max {
            return Err(RelpError::DataTooLong {
                datalen: value,
                max: RELP_DATA_BYTES_MAX,
            });
        }
        at += 1;
    }
}

/// Decodes one frame from the front of `input` (bytes buffered from the
/// socket).
///
/// Returns `Ok(Some((frame, consumed)))` with the frame and how many bytes
/// of `input` it took, `Ok(None)` when `input` holds only the start of a
/// frame (read more and call again with the longer buffer), or an error on
/// a malformed frame (the session is then closed). Once `input` holds
/// [`FRAME_BYTES_MAX`] bytes the answer is never `Ok(None)`: a header or
/// DATALEN that cannot become a valid frame within the limits is an error
/// as soon as its bytes show it.
pub fn decode(input: &[u8]) -> Result<Option<(Frame<'_>, usize)>, RelpError> {
    // TXNR SP (nine digits never exceed TXNR_MAX)
    let (txnr, at) = match digits(input, 0, "txnr", TXNR_DIGITS_MAX, TXNR_MAX)? {
        Digits::Partial => return Ok(None),
        Digits::Done { value, end } => (value, end),
    };
    if input[at] != b' ' {
        return Err(RelpError::UnexpectedByte {
            field: "txnr",
            expected: "a digit or SP",
            found: Byte(input[at]),
        });
    }
    if txnr == 0 {
        return Err(RelpError::TxnrZero);
    }

    // COMMAND SP
    let command_start = at + 1;
    let mut at = command_start;
    loop {
        let Some(&byte) = input.get(at) else {
            return Ok(None);
        };
        if byte == b' ' && at > command_start {
            break;
        }
        if !byte.is_ascii_alphabetic() {
            let expected = if at == command_start {
                "an ASCII letter"
            } else {
                "an ASCII letter or SP"
            };
            return Err(RelpError::UnexpectedByte {
                field: "command",
                expected,
                found: Byte(byte),
            });
        }
        if at - command_start == COMMAND_BYTES_MAX {
            return Err(RelpError::FieldTooLong {
                field: "command",
                max: COMMAND_BYTES_MAX,
                unit: "letters",
            });
        }
        at += 1;
    }
    let name = std::str::from_utf8(&input[command_start..at])
        .expect("the command was checked to be ASCII letters");
    let command = match name {
        "open" => Command::Open,
        "syslog" => Command::Syslog,
        "close" => Command::Close,
        "rsp" => return Err(RelpError::RspFromClient { txnr }),
        other => Command::Other(other),
    };

    // DATALEN, then LF (no data) or SP DATA LF.
    let limit = u64::try_from(RELP_DATA_BYTES_MAX).expect("the limit fits a u64");
    let (datalen, at) = match digits(input, at + 1, "datalen", DATALEN_DIGITS_MAX, limit)? {
        Digits::Partial => return Ok(None),
        Digits::Done { value, end } => (value, end),
    };
    let datalen = usize::try_from(datalen).expect("DATALEN was checked against a usize limit");
    let separator = input[at];
    if datalen == 0 {
        if separator != b'\n' {
            return Err(RelpError::UnexpectedByte {
                field: "datalen",
                expected: "LF after DATALEN 0",
                found: Byte(separator),
            });
        }
        let frame = Frame {
            txnr,
            command,
            data: &[],
        };
        return Ok(Some((frame, at + 1)));
    }
    if separator != b' ' {
        return Err(RelpError::UnexpectedByte {
            field: "datalen",
            expected: "a digit or SP",
            found: Byte(separator),
        });
    }
    let data_start = at + 1;
    let data_end = data_start + datalen;
    let Some(&trailer) = input.get(data_end) else {
        return Ok(None);
    };
    if trailer != b'\n' {
        return Err(RelpError::MissingTrailer {
            txnr,
            datalen,
            found: Byte(trailer),
        });
    }
    let consumed = data_end + 1;
    debug_assert!(consumed <= FRAME_BYTES_MAX);
    debug_assert!(consumed <= input.len());
    Ok(Some((
        Frame {
            txnr,
            command,
            data: &input[data_start..data_end],
        },
        consumed,
    )))
}

/// Appends `txnr command datalen[ data...]\n` to `out`, the parts of the
/// data concatenated without a copy.
fn write_frame(txnr: u64, command: &str, data: &[&[u8]], out: &mut Vec<u8>) {
    let datalen: usize = data.iter().map(|part| part.len()).sum();
    debug_assert!(txnr <= TXNR_MAX);
    debug_assert!(datalen < 1_000_000_000, "DATALEN has at most nine digits");
    push_decimal(txnr, out);
    out.push(b' ');
    out.extend_from_slice(command.as_bytes());
    out.push(b' ');
    push_decimal(u64::try_from(datalen).expect("a usize fits a u64"), out);
    if datalen > 0 {
        out.push(b' ');
        for part in data {
            out.extend_from_slice(part);
        }
    }
    out.push(b'\n');
}

/// Appends `value` in decimal.
fn push_decimal(value: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + u8::try_from(rest % 10).expect("a digit fits a u8");
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends the reply `txnr rsp datalen code text\n` to `out`.
///
/// `text` is a short human-readable line (`OK`, or what is wrong): it is
/// cut to [`RSP_TEXT_BYTES_MAX`] bytes (at a character boundary) and any
/// CR or LF in it becomes a space, so text built from a client's bytes
/// cannot break the reply's framing. The SP after the code is always
/// written, even with empty text: librelp's client requires it.
///
/// # Panics
///
/// If `txnr` is outside 1..=[`TXNR_MAX`] (a reply answers a command a
/// client numbered) or `code` is not three digits.
pub fn rsp(txnr: u64, code: u16, text: &str, out: &mut Vec<u8>) {
    assert!(
        (1..=TXNR_MAX).contains(&txnr),
        "rsp answers a command's txnr, got {txnr}"
    );
    assert!(
        (100..=999).contains(&code),
        "rsp code must be three digits, got {code}"
    );
    let mut cut = text.len().min(RSP_TEXT_BYTES_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let text = &text.as_bytes()[..cut];
    let digit = |place: u16| b'0' + u8::try_from(code / place % 10).expect("a digit fits a u8");
    let head = [digit(100), digit(10), digit(1), b' '];
    let start = out.len();
    write_frame(txnr, "rsp", &[&head, text], out);
    // Flatten line breaks in the text (never in the header or trailer).
    let text_end = out.len() - 1;
    for byte in &mut out[text_end - text.len()..text_end] {
        if *byte == b'\n' || *byte == b'\r' {
            *byte = b' ';
        }
    }
    debug_assert!(out.len() - start <= HEADER_BYTES_MAX + 4 + RSP_TEXT_BYTES_MAX + 1);
}

/// The reply to a client's `open`: checks its offers and appends
/// `rsp 200` with our offers to `out`.
///
/// `offers` is the `open` frame's data: lines of `name[=value[,value...]]`.
/// `relp_version` must be present with a numeric first value (any version:
/// we answer with [`RELP_VERSION`], and librelp clients accept a server
/// version not above theirs); `commands` must include `syslog`. Other
/// offers (`relp_software`, future ones) are ignored, as librelp does.
/// `software` is our `relp_software` value, `name[,version[,url]]`.
///
/// On an error nothing is appended; the server replies
/// `rsp(txnr, RSP_ERROR, &error.to_string(), out)` and closes.
///
/// # Panics
///
/// If `software` holds a CR or LF (it would end the offer line), or
/// `txnr` is out of range (as for [`rsp`]).
pub fn open_reply(
    txnr: u64,
    offers: &[u8],
    software: &str,
    out: &mut Vec<u8>,
) -> Result<(), RelpError> {
    assert!(
        !software.contains(['\n', '\r']),
        "relp_software must be one line"
    );
    assert!(
        (1..=TXNR_MAX).contains(&txnr),
        "rsp answers a command's txnr, got {txnr}"
    );
    let mut version_offered = false;
    let mut syslog_offered = false;
    for line in offers.split(|&byte| byte == b'\n') {
        let (name, values) = match line.iter().position(|&byte| byte == b'=') {
            Some(equals) => (&line[..equals], &line[equals + 1..]),
            None => (line, &line[line.len()..]),
        };
        match name {
            b"relp_version" => {
                let first = values
                    .split(|&byte| byte == b',')
                    .next()
                    .unwrap_or_default();
                let numeric =
                    !first.is_empty() && first.len() <= 9 && first.iter().all(u8::is_ascii_digit);
                if !numeric {
                    return Err(RelpError::VersionInvalid);
                }
                version_offered = true;
            }
            b"commands" => {
                syslog_offered |= values
                    .split(|&byte| byte == b',')
                    .any(|value| value == b"syslog");
            }
            _ => {}
        }
    }
    if !version_offered {
        return Err(RelpError::VersionMissing);
    }
    if !syslog_offered {
        return Err(RelpError::SyslogNotOffered);
    }
    let mut version = Vec::with_capacity(4);
    push_decimal(u64::from(RELP_VERSION), &mut version);
    let parts: [&[u8]; 5] = [
        b"200 OK\nrelp_version=",
        &version,
        b"\nrelp_software=",
        software.as_bytes(),
        b"\ncommands=syslog",
    ];
    write_frame(txnr, "rsp", &parts, out);
    Ok(())
}

/// Appends the `serverclose` hint, `0 serverclose 0\n`, to `out`: sent
/// before the server closes a connection so the client notices at once
/// rather than on its next send. The client does not answer a hint.
pub fn serverclose(out: &mut Vec<u8>) {
    write_frame(0, "serverclose", &[], out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(input: &[u8]) -> (Frame<'_>, usize) {
        decode(input).expect("valid").expect("complete")
    }

    #[test]
    fn decodes_the_three_commands() {
        let (frame, used) = decoded(b"2 syslog 5 hello\n");
        assert_eq!(
            frame,
            Frame {
                txnr: 2,
                command: Command::Syslog,
                data: b"hello"
            }
        );
        assert_eq!(used, 17);
        let (frame, used) = decoded(b"4 close 0\n");
        assert_eq!(
            frame,
            Frame {
                txnr: 4,
                command: Command::Close,
                data: b""
            }
        );
        assert_eq!(used, 10);
        let (frame, _) = decoded(b"1 open 14 relp_version=0\n");
        assert_eq!(frame.command, Command::Open);
        assert_eq!(frame.data, b"relp_version=0");
    }

    #[test]
    fn an_empty_syslog_message_decodes() {
        let (frame, used) = decoded(b"5 syslog 0\n");
        assert_eq!(
            frame,
            Frame {
                txnr: 5,
                command: Command::Syslog,
                data: b""
            }
        );
        assert_eq!(used, 11);
    }

    #[test]
    fn data_may_hold_any_byte_even_lf() {
        let (frame, used) = decoded(b"7 syslog 3 a\nb\n");
        assert_eq!(frame.data, b"a\nb");
        assert_eq!(used, 15);
    }

    #[test]
    fn unknown_commands_decode_as_other() {
        let (frame, _) = decoded(b"3 starttls 0\n");
        assert_eq!(frame.command, Command::Other("starttls"));
        let (frame, _) = decoded(b"3 SYSLOG 1 x\n");
        assert_eq!(
            frame.command,
            Command::Other("SYSLOG"),
            "commands are case-sensitive"
        );
    }

    #[test]
    fn leading_zeros_are_read_as_librelp_reads_them() {
        let (frame, _) = decoded(b"007 syslog 01 x\n");
        assert_eq!(frame.txnr, 7);
        assert_eq!(frame.data, b"x");
    }

    #[test]
    fn malformed_frames_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"x", "unexpected_byte"),
            (b" 1 syslog 0\n", "unexpected_byte"),
            (b"1x", "unexpected_byte"),
            (b"0 syslog 0\n", "txnr_zero"),
            (b"1234567890 syslog 0\n", "field_too_long"),
            (b"1  syslog 0\n", "unexpected_byte"),
            (b"1 sys-log 0\n", "unexpected_byte"),
            (b"1 rsp 6 200 OK\n", "rsp_from_client"),
            (b"1 abcdefghijklmnopqrstuvwxyzabcdefg 0\n", "field_too_long"),
            (b"1 syslog \n", "unexpected_byte"),
            (b"1 syslog x\n", "unexpected_byte"),
            (b"1 syslog 0 \n", "unexpected_byte"),
            (b"1 syslog 0\r\n", "unexpected_byte"),
            (b"1 syslog 3\nabc\n", "unexpected_byte"),
            (b"1 syslog 0000000000", "field_too_long"),
            (b"1 syslog 131073 ", "data_too_long"),
            (b"1 syslog 999999", "data_too_long"),
            (b"1 syslog 3 abcd\n", "missing_trailer"),
            (b"1 syslog 2 ab\r\n", "missing_trailer"),
        ];
        for (input, reason) in cases {
            let error = decode(input).expect_err(&String::from_utf8_lossy(input));
            assert_eq!(
                error.reason(),
                *reason,
                "{:?}: {error}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn the_longest_command_and_txnr_decode() {
        let input = b"999999999 abcdefghijklmnopqrstuvwxyzabcdef 0\n";
        let (frame, used) = decoded(input);
        assert_eq!(frame.txnr, TXNR_MAX);
        assert_eq!(frame.command.name().len(), COMMAND_BYTES_MAX);
        assert_eq!(used, input.len());
    }

    #[test]
    fn a_partial_header_waits_for_more() {
        for input in [
            &b""[..],
            b"1",
            b"12 ",
            b"12 sys",
            b"12 syslog",
            b"12 syslog ",
            b"12 syslog 13",
            b"12 syslog 3 ab",
        ] {
            assert_eq!(
                decode(input),
                Ok(None),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn rsp_writes_code_and_text() {
        let mut out = Vec::new();
        rsp(5, RSP_OK, "OK", &mut out);
        assert_eq!(out, b"5 rsp 6 200 OK\n");
        out.clear();
        rsp(6, RSP_ERROR, "", &mut out);
        assert_eq!(out, b"6 rsp 4 500 \n");
    }

    #[test]
    fn rsp_text_is_one_short_line() {
        let mut out = Vec::new();
        rsp(1, RSP_ERROR, "bad\nthing\r", &mut out);
        assert_eq!(out, b"1 rsp 14 500 bad thing \n");
        out.clear();
        let long = "é".repeat(60);
        rsp(1, RSP_ERROR, &long, &mut out);
        let text = &out[b"1 rsp 84 500 ".len()..out.len() - 1];
        assert_eq!(text.len(), RSP_TEXT_BYTES_MAX);
        assert!(std::str::from_utf8(text).is_ok());
    }

    #[test]
    #[should_panic(expected = "txnr")]
    fn rsp_refuses_txnr_zero() {
        rsp(0, RSP_OK, "OK", &mut Vec::new());
    }

    #[test]
    fn serverclose_is_a_txnr_0_hint() {
        let mut out = Vec::new();
        serverclose(&mut out);
        assert_eq!(out, b"0 serverclose 0\n");
    }

    #[test]
    fn next_txnr_wraps_to_1() {
        assert_eq!(next_txnr(1), 2);
        assert_eq!(next_txnr(TXNR_MAX - 1), TXNR_MAX);
        assert_eq!(next_txnr(TXNR_MAX), 1);
    }

    #[test]
    fn byte_names_read_well() {
        assert_eq!(Byte(b'\n').to_string(), "LF");
        assert_eq!(Byte(b'x').to_string(), "'x'");
        assert_eq!(Byte(0).to_string(), "byte 0x00");
    }
}
