//! The one error type of `cardinal-server`.

use crate::frame::{BatchId, ErrorCode};

/// What went wrong decoding bytes or driving the protocol.
///
/// The decoding variants say what a peer sent; a server answers each with
/// the [`ErrorCode`] of [`Error::code`] and closes the connection, since
/// after a bad frame it cannot know where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frame header announces more bytes than the receiver's limit. It is
    /// refused from its header alone, before any of its body is read or
    /// buffered.
    #[error("a frame of {frame_bytes} bytes is over the limit of {frame_bytes_max} bytes")]
    FrameTooLarge {
        /// The frame's size, header included, as its header announces it.
        frame_bytes: u64,
        /// The receiver's limit.
        frame_bytes_max: usize,
    },
    /// The peer speaks HTTP: a native client reached an HTTP port, or an
    /// HTTP client the native one. Said at once, instead of reading
    /// `HTTP` as a frame length of 1,347,703,889 bytes.
    #[error(
        "the peer speaks HTTP, not cardinal's native protocol: this is an HTTP port (native \
         clients such as `cardinal send` connect to the server's --listen address, \
         127.0.0.1:7400 by default; HTTP clients to --http, 127.0.0.1:7480)"
    )]
    Http,
    /// A frame header names a type this build does not know.
    #[error("unknown frame type {tag}: this build knows types 1 to 7 (protocol version 1)")]
    UnknownFrameType {
        /// The type byte of the header.
        tag: u8,
    },
    /// A frame's checksum does not match its bytes: they were damaged on
    /// the way (nothing of the frame was used).
    #[error("frame checksum {stored:#010x} does not match its bytes ({computed:#010x})")]
    Checksum {
        /// The checksum the header carries.
        stored: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// A hello asks for a protocol version this build does not speak.
    #[error("protocol version {found} is not supported: this build speaks version {supported}")]
    UnsupportedVersion {
        /// The version the peer asked for.
        found: u16,
        /// The one version this build speaks.
        supported: u16,
    },
    /// A frame's body breaks the rules of its type: a field out of range, a
    /// bad flag, a length past the body's end, bytes left over.
    #[error("malformed {frame} frame: {reason}")]
    Malformed {
        /// The frame type.
        frame: &'static str,
        /// What is wrong, in words.
        reason: String,
    },
    /// A client id, stream name, token or server name breaks its rule.
    #[error("bad {what}: {reason}")]
    BadName {
        /// Which kind of name.
        what: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A deduplication table image is damaged or forged: nothing of it was
    /// used.
    #[error("deduplication table image: {reason}")]
    DedupImage {
        /// What is wrong.
        reason: String,
    },
    /// A saved image (the idempotency keys) is damaged or forged: nothing
    /// of it was used.
    #[error("{what} image: {reason}")]
    BadImage {
        /// Which image.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The client holds as many unresolved batches as it is configured to
    /// ([`crate::ClientConfig::held_batches_max`]): push again after an
    /// acknowledgement.
    #[error("the client already holds {held} unacknowledged batches, its limit")]
    Full {
        /// The batches held.
        held: usize,
    },
    /// A batch cannot fit in any frame ([`crate::FRAME_BYTES_MAX`]).
    #[error(
        "a batch frame of {frame_bytes} bytes can never be sent: the limit is {frame_bytes_max}"
    )]
    BatchTooLarge {
        /// The size its frame would have.
        frame_bytes: usize,
        /// The protocol's limit.
        frame_bytes_max: usize,
    },
    /// The peer sent a valid frame that the protocol does not allow here
    /// (a batch before the hello, a second hello, an ack to a batch that is
    /// not in flight).
    #[error("protocol violation: {reason}")]
    Protocol {
        /// What was out of place.
        reason: String,
    },
    /// The server refused the connection for good (a version, token or
    /// client id it does not accept, or a protocol error of ours): the
    /// client must stop, not retry.
    #[error("the server refused the connection ({code}): {message}")]
    Refused {
        /// The server's code.
        code: ErrorCode,
        /// The server's message.
        message: String,
    },
    /// The server no longer knows batches it acknowledged to this client:
    /// its deduplication state was lost (wiped data, or the client id was
    /// evicted from a full table), so a resend could be counted twice. The
    /// client stops; what it holds unacknowledged is in doubt.
    #[error(
        "the server acknowledged batch {acked} but now knows this client only up to {known:?}: \
         it lost its deduplication state, so resending could count batches twice"
    )]
    ServerForgot {
        /// The highest batch id the server acknowledged to this client.
        acked: BatchId,
        /// The highest batch id the server says it has from this client.
        known: Option<BatchId>,
    },
    /// The server does not know this client id at all, yet the client
    /// sent it batches on an earlier connection and was silent long
    /// enough for the server to have forgotten it: they may have been
    /// counted and then forgotten, or lost before they were durable, and
    /// the protocol cannot tell which. The client stops rather than
    /// resend them.
    #[error(
        "the server does not know this client id, yet batches up to {sent} were sent to it: \
         they may have been counted before the server forgot this id, or never received; \
         resending could count them twice, so nothing more is sent (check what the server \
         holds, then send what is missing under a new client id)"
    )]
    ServerUnknown {
        /// The highest batch id the client sent.
        sent: BatchId,
    },
    /// A day file under `--out` (or its folder) could not be read or
    /// written, or is not what it must be (`OUT` a file, a summary's
    /// folder a link): the server's day files stop there, ingest does not.
    #[error("day files: {path}: {reason}")]
    DayFile {
        /// The file or folder.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A summary's state spans more days than [`crate::days::DAYS_MAX`]:
    /// none of its day files is written (as `run --out` refuses).
    #[error(
        "summary {summary} spans more than {days_max} days (DAYS_MAX), one file each under --out; \
         check its timestamps, or keep a window with a retention"
    )]
    DaysMax {
        /// The summary.
        summary: String,
        /// The limit.
        days_max: usize,
    },
    /// A send option is out of its range ([`crate::send::SendOptions`]).
    #[error("bad send option: {reason}")]
    SendOption {
        /// Which option, its value and its range.
        reason: String,
    },
    /// An input of `cardinal send` could not be read on (a missing file,
    /// damaged compressed data, a record over the line limit): the input's
    /// name and, where known, its line are in the reason.
    #[error("{reason}")]
    Input {
        /// What went wrong, starting with the input's name.
        reason: String,
    },
    /// The ledger file could not be written.
    #[error("ledger file {path}: {reason}")]
    LedgerFile {
        /// The file's path.
        path: String,
        /// The operating system's error.
        reason: String,
    },
    /// The server could not be reached, or dropped every connection, for
    /// longer than [`crate::send::SendOptions::give_up_after`] without
    /// acknowledging or refusing a batch.
    #[error(
        "gave up on {to} after {waited_ms} ms without progress ({attempts} attempts; last: \
         {last}); batches acknowledged: {acked}, not resolved: {unresolved}"
    )]
    GaveUp {
        /// The server's address.
        to: String,
        /// How long the client tried without progress, in milliseconds.
        waited_ms: u64,
        /// Connection attempts since the last progress.
        attempts: u64,
        /// The last failure, in words.
        last: String,
        /// Batches acknowledged in this run.
        acked: u64,
        /// Batches held and not resolved when it gave up.
        unresolved: usize,
    },
}

impl Error {
    /// The code a server sends back in an error frame before it closes a
    /// connection on this decoding error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::FrameTooLarge { .. } | Error::BatchTooLarge { .. } => ErrorCode::TooLarge,
            Error::Http => ErrorCode::Protocol,
            Error::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            Error::BadName { what, .. } if *what == "client id" => ErrorCode::BadClientId,
            Error::Protocol { .. } => ErrorCode::Protocol,
            Error::Refused { code, .. } => *code,
            _ => ErrorCode::Malformed,
        }
    }
}

/// The result type of `cardinal-server`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
