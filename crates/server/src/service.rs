//! The durable core of `cardinal serve`, free of sockets: batches in,
//! acknowledgements out once they are durable and folded, snapshots,
//! recovery, live views. The network edge (`net`) drives it from async
//! tasks; tests drive it directly over a simulated disk.
//!
//! ```text
//!  ingest(origin, stream, records)          one lock: the order of the log
//!    stream and format check ── refused                       is the order
//!    dedup / keys check ── duplicate ─────────────────────┐  of the engines
//!      (key with another body: refused; table full of     │
//!       recent entries: refused with seconds to wait)     │
//!    engine.try_submit ── full: refused (503, stop reading)│
//!    wal.append(envelope) ─> ticket; predict its wal seq   │
//!    dedup / keys admit; note wal seq of engine seq        │
//!    completer queue  <──(ticket, receipt, reply)──────────┘ (a barrier)
//!
//!  completer thread, in log order: ticket.wait (synced; its sequence
//!    asserted equal to the prediction) -> receipt.wait (folded) ->
//!    reply {accepted, rejected, sequence}: the acknowledgement
//!
//!  snapshot(): per engine snapshot_to_save -> covers S: its position is
//!    the wal seq before its first batch not covered; then, under the
//!    lock, the dedup and key tables; wait until the log is synced
//!    through the last append (a barrier); write; trim the log through
//!    the oldest kept snapshot's sequence.
//! ```
//!
//! **The promise.** A batch is acknowledged only after the sync that
//! covers its log record, and every acknowledged batch is in the state
//! after any crash: either in a snapshot's engine images (its stream's
//! position is at or past its record) or replayed from the log (after the
//! position). Deduplication: an admitted id is in the snapshot's table or
//! in a record replayed after it, so a resend after a restart is answered
//! as a duplicate, never counted twice. The table saved is taken *after*
//! the engines' views, so an id whose record is at or below a position is
//! in it; and the snapshot is written only once the log is synced through
//! every id the table holds, so it never names a batch that a crash could
//! still lose (a resend of that batch would be acknowledged and dropped).
//!
//! **One admission path.** [`Service::ingest`] is the only place a batch
//! is admitted, for every edge: the native protocol's connections offer
//! each batch to it ([`crate::connection::Connection::offer`]) and HTTP
//! calls it directly, and neither keeps a table of its own. The order of
//! its checks is the promise's: an unknown stream is refused before the
//! tables are asked, so a duplicate is recognised only for a stream the
//! service has.
//!
//! **Order.** The engine is offered a batch before the log gets it: a full
//! engine refuses with nothing written (the client retries; HTTP answers
//! 503), and a log that fails after the engine took a batch poisons the
//! service, which stops and recovers from disk (the in-memory state is
//! thrown away, so the batch folded but not logged is never served).
//!
//! **Positions.** Each input stream has its own engine (batches are one
//! stream's records) and its own position, saved as `stream/<name>` in
//! the snapshot: every record of that stream at or below it is in the
//! images. A stream idle since its last covered batch takes the last
//! sequence appended, so an idle stream does not hold back trimming.
//! Replay starts after the lowest position and gives each stream only the
//! records after its own. The log never restarts below the highest
//! position a kept snapshot names (`LogFloor`): a log that ends below it
//! (a repair cut a record the snapshot covers, or segments were deleted)
//! moves forward past it when every stream is saved through it, and
//! otherwise opening refuses naming the missing sequences (`--repair`
//! goes on); else new appends would reuse sequences a snapshot counts as
//! read, and new snapshots would be named below the old one. With every
//! snapshot damaged, the log alone rebuilds the state when it reaches
//! back to sequence 1; damaged snapshots are renamed `<name>.damaged`.
//!
//! **Records set aside.** A batch admitted is one replay reads back (the
//! size and envelope are checked at admission), and the engine folds a
//! batch of any size. Should folding a logged batch still fail (a bug the
//! batch triggers: the worker's panic is caught and names its batch),
//! the live service fails and exits, and the next start meets the same
//! record in replay: it stops, naming the record's sequence, segment and
//! sender, rather than crash in a loop. `--repair` then copies the record
//! and its sender into `set-aside-<sequence>.record` (synced) and starts
//! again; every later start skips that record, and its id or key stays
//! admitted, so a retry is answered as a duplicate instead of stopping
//! the engine again. The copy is the operator's to inspect.
//!
//! **Log records.** The payload of each record is an envelope
//! ([`Envelope`]): version, origin (a client id and its batch id, an
//! idempotency key, or nothing), the stream's name, then the records as
//! received. A CSV batch that carries its header line keeps it there (a
//! flag says so), so replay reads each batch under the header it was
//! admitted with; the header is checked at admission, before the batch
//! is logged, with the check the engine's reading relies on, so nothing
//! enters the log that replay cannot read.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use cardinal_engine::{Continuous, ContinuousOptions, Receipt, SubmitError, View, check_images};
use cardinal_rollup::Limits;
use cardinal_route::{Format as StreamFormat, OutputSource, Plan};
use cardinal_store::{Dir, Loaded, Snapshot, Snapshots, Ticket, Wal, WalOptions, WalStats};

use crate::dedup::{DedupTable, Verdict};
use crate::frame::{BatchId, ClientId, ErrorCode, Format};
use crate::keys::{self, Digest, KeyTable, Lookup};
use crate::source::{Coverage, LogSeq, Offsets, Pull, TopicPartition};
use cardinal_syslog::ids::IdTable;

/// The largest batch of records the service takes: 16 MiB, what one log
/// record holds once its envelope is added ([`ENVELOPE_BYTES_MAX`]). Every
/// edge's limit is at most this (the native frame, the HTTP body), so a
/// batch an edge admits is one the log takes and replay reads back; the
/// engine folds a batch of any size (it cuts one larger than a chunk at
/// record ends).
pub const BATCH_BYTES_MAX: usize = 16 << 20;

/// The most bytes an envelope adds to its records: version, origin kind,
/// two length bytes, a stream name and an origin of at most 255 bytes
/// each, and a batch id (524 bytes), rounded up.
pub const ENVELOPE_BYTES_MAX: usize = 1 << 10;

const _: () = assert!(4 + 255 + 255 + 8 <= ENVELOPE_BYTES_MAX);
const _: () =
    assert!(BATCH_BYTES_MAX + ENVELOPE_BYTES_MAX <= cardinal_store::wal::RECORD_PAYLOAD_BYTES_MAX);
const _: () = assert!(crate::frame::FRAME_BYTES_MAX <= BATCH_BYTES_MAX);

/// Batches each worker's queue holds for a stream fed by a pull source:
/// 8, where push sources get the engine's default. A pull source's batch
/// is a full 1 MiB and the broker keeps what is not yet taken, so a
/// shallow queue costs no speed (the source refills it as fast as a
/// worker empties it) and bounds what a slow engine holds to 8 MiB a
/// worker.
pub const PULL_QUEUE_BATCHES: usize = 8;

/// Reject lines kept for `GET /v1/rejects` (the newest; older ones are
/// counted, not kept).
pub const REJECTS_KEPT: usize = 1_000;

/// How a service runs.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Worker threads of each stream's engine.
    pub threads: usize,
    /// Bytes each engine's rollups may hold.
    pub memory_max: u64,
    /// Batches each worker's queue holds before ingest is refused.
    pub queue_batches: usize,
    /// Group limits and retention of every summary.
    pub limits: Limits,
    /// How far behind the stream attributions release held events.
    pub attribution_lateness_ms: u64,
    /// The log's segment size.
    pub segment_bytes: u64,
    /// Repair a damaged log instead of refusing to start.
    pub repair: bool,
    /// Streams fed by a pull source (Kafka), by stream name: their
    /// batches bypass the log, and their positions are offsets saved in
    /// their own snapshot section (module doc, Pull sources).
    pub pulled: BTreeMap<String, Pull>,
}

impl ServiceOptions {
    /// Defaults for `threads` workers and a memory budget.
    pub fn new(threads: usize, memory_max: u64) -> ServiceOptions {
        let engine = ContinuousOptions::new(threads, memory_max);
        ServiceOptions {
            threads,
            memory_max,
            queue_batches: engine.queue_batches,
            limits: engine.limits,
            attribution_lateness_ms: engine.attribution_lateness_ms,
            segment_bytes: WalOptions::default().segment_bytes,
            repair: false,
            pulled: BTreeMap::new(),
        }
    }

    fn engine(&self, stream: &str) -> ContinuousOptions {
        let mut options = ContinuousOptions::new(self.threads, self.memory_max);
        options.stream = Some(stream.to_owned());
        options.queue_batches = self.queue_batches;
        if self
            .pulled
            .keys()
            .any(|name| name.eq_ignore_ascii_case(stream))
        {
            options.queue_batches = options.queue_batches.min(PULL_QUEUE_BATCHES);
        }
        options.limits = self.limits;
        options.attribution_lateness_ms = self.attribution_lateness_ms;
        options
    }
}

/// Who sent a batch, for deduplication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A native-protocol client and its batch id.
    Client(ClientId, BatchId),
    /// An HTTP request's `Idempotency-Key`.
    Key(String),
    /// An HTTP request without a key (a retry counts again).
    None,
    /// Syslog messages (RELP or plain TCP): the ids of those that carried
    /// one, each counted once per sender ([`cardinal_syslog::ids`]).
    Syslog(SyslogIds),
}

/// The message ids of a syslog batch, as its log record keeps them so
/// that recovery marks them again: each id is its sender's number in
/// `senders` and the id's digest ([`cardinal_syslog::ids::id_digest`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyslogIds {
    /// The senders (`HOSTNAME/APP-NAME`), each once.
    pub senders: Vec<String>,
    /// Per message with an id: its sender's index and the id's digest.
    pub ids: Vec<(u16, u64)>,
}

impl SyslogIds {
    /// The most bytes the envelope's encoding of these ids takes for `senders` of
    /// `sender_bytes` bytes in all and `ids` ids.
    pub fn encoded_bytes(senders: usize, sender_bytes: usize, ids: usize) -> usize {
        2 + 2 * senders + sender_bytes + 4 + 10 * ids
    }

    /// `senders u16 | senders x (len u16, name) | ids u32 | ids x (sender
    /// u16, digest u64)`, little-endian.
    fn encode(&self, out: &mut Vec<u8>) {
        let n = u16::try_from(self.senders.len()).expect("a batch's senders fit in u16");
        out.extend_from_slice(&n.to_le_bytes());
        for sender in &self.senders {
            let len = u16::try_from(sender.len()).expect("sender names are short");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(sender.as_bytes());
        }
        let n = u32::try_from(self.ids.len()).expect("a batch's ids fit in u32");
        out.extend_from_slice(&n.to_le_bytes());
        for (sender, digest) in &self.ids {
            out.extend_from_slice(&sender.to_le_bytes());
            out.extend_from_slice(&digest.to_le_bytes());
        }
    }

    /// Reads what [`SyslogIds::encode`] wrote from the front of `bytes`;
    /// the rest.
    fn decode(bytes: &[u8]) -> Result<(SyslogIds, &[u8])> {
        let bad = |what: &str| anyhow!("a log record's syslog ids are damaged: {what}");
        let mut rest = bytes;
        let mut take = |n: usize| -> Result<&[u8]> {
            ensure!(rest.len() >= n, bad("cut short"));
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let n = usize::from(u16::from_le_bytes(take(2)?.try_into().expect("2")));
        let mut senders = Vec::with_capacity(n.min(bytes.len() / 3));
        for _ in 0..n {
            let len = usize::from(u16::from_le_bytes(take(2)?.try_into().expect("2")));
            let name = std::str::from_utf8(take(len)?).map_err(|_| bad("a sender name"))?;
            cardinal_syslog::ids::check_sender(name).map_err(|e| bad(&e))?;
            senders.push(name.to_owned());
        }
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        ensure!(n <= bytes.len() / 10, bad("more ids than bytes"));
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let sender = u16::from_le_bytes(take(2)?.try_into().expect("2"));
            ensure!(
                usize::from(sender) < senders.len(),
                bad("an id of no sender")
            );
            let digest = u64::from_le_bytes(take(8)?.try_into().expect("8"));
            ids.push((sender, digest));
        }
        Ok((SyslogIds { senders, ids }, rest))
    }

    /// Each id with its sender's name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.ids
            .iter()
            .map(|&(sender, digest)| (self.senders[usize::from(sender)].as_str(), digest))
    }
}

/// A batch of syslog messages for [`Service::ingest_syslog`]: each
/// message made into one record of its stream, and its id if it had one.
#[derive(Debug, Clone, Default)]
pub struct SyslogBatch {
    /// The records, one after another.
    pub records: Vec<u8>,
    /// Per message, where its record ends in `records`.
    pub ends: Vec<usize>,
    /// Per message, its sender and id digest, if it carried an id.
    pub ids: Vec<Option<(String, u64)>>,
}

/// A batch's log record payload (module doc, Log records):
/// `version u8 = 1 | origin u8 (0 none, 1 client, 2 key, 3 syslog) | stream
/// len u8 | stream | origin len u8 | origin bytes | batch id u64 | records`
/// (a syslog batch's ids, [`SyslogIds`], go between the batch id and the
/// records, its origin bytes and batch id empty), or, for
/// a batch whose records start with a header line, `version u8 = 2 |
/// flags u8 = 1 |` and the rest as in version 1. Batches without a header
/// are written in version 1, so a log of them stays readable by builds
/// that know only it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// Who sent it.
    pub origin: Origin,
    /// The stream's name as the plan declares it.
    pub stream: &'a str,
    /// The records, as received.
    pub records: &'a [u8],
    /// CSV only: the first line of `records` is their header.
    pub header: bool,
}

/// The envelope of a batch without a header line.
const ENVELOPE_VERSION: u8 = 1;

/// The envelope with a flags byte after the version.
const ENVELOPE_VERSION_FLAGS: u8 = 2;

/// Of the flags byte: the records start with a header line.
const ENVELOPE_FLAG_HEADER: u8 = 1;

impl Envelope<'_> {
    /// A snapshot's mark: no stream, no records. A service with pull-fed
    /// streams appends one before each snapshot so that the snapshot's
    /// log sequence (its name) moves forward even when no push source
    /// wrote; replay skips it.
    pub fn mark() -> Envelope<'static> {
        Envelope {
            origin: Origin::None,
            stream: "",
            records: &[],
            header: false,
        }
    }

    /// Whether this is a snapshot's mark ([`Envelope::mark`]).
    pub fn is_mark(&self) -> bool {
        self.stream.is_empty() && self.records.is_empty() && self.origin == Origin::None
    }

    /// The payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, name, id) = match &self.origin {
            Origin::None => (0u8, "", 0),
            Origin::Client(client, id) => (1, client.as_str(), id.0),
            Origin::Key(key) => (2, key.as_str(), 0),
            Origin::Syslog(_) => (3, "", 0),
        };
        let mut out = Vec::with_capacity(14 + self.stream.len() + name.len() + self.records.len());
        if self.header {
            out.push(ENVELOPE_VERSION_FLAGS);
            out.push(ENVELOPE_FLAG_HEADER);
        } else {
            out.push(ENVELOPE_VERSION);
        }
        out.push(kind);
        out.push(u8::try_from(self.stream.len()).expect("stream names are short"));
        out.extend_from_slice(self.stream.as_bytes());
        out.push(u8::try_from(name.len()).expect("ids and keys are short"));
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        if let Origin::Syslog(ids) = &self.origin {
            ids.encode(&mut out);
        }
        out.extend_from_slice(self.records);
        out
    }

    /// Reads a payload made by [`Envelope::encode`], checking every field.
    pub fn decode(payload: &[u8]) -> Result<Envelope<'_>> {
        let bad = |what: &str| anyhow!("a log record's envelope is damaged: {what}");
        let (header, payload) = match payload {
            [ENVELOPE_VERSION, ..] => (false, &payload[1..]),
            [ENVELOPE_VERSION_FLAGS, flags, rest @ ..] => {
                ensure!(
                    *flags == ENVELOPE_FLAG_HEADER,
                    bad(&format!("flags {flags:#04x}"))
                );
                (true, rest)
            }
            [version, ..] => bail!(
                "a log record's envelope has version {version}; this build reads \
                 {ENVELOPE_VERSION} and {ENVELOPE_VERSION_FLAGS}"
            ),
            [] => return Err(bad("too short")),
        };
        let [kind, stream_len, rest @ ..] = payload else {
            return Err(bad("too short"));
        };
        let stream_len = usize::from(*stream_len);
        ensure!(rest.len() > stream_len, bad("cut in the stream name"));
        let stream = std::str::from_utf8(&rest[..stream_len]).map_err(|_| bad("stream name"))?;
        let rest = &rest[stream_len..];
        let name_len = usize::from(rest[0]);
        ensure!(rest.len() > name_len + 8, bad("cut in the origin"));
        let name = std::str::from_utf8(&rest[1..=name_len]).map_err(|_| bad("origin"))?;
        let id = u64::from_le_bytes(rest[1 + name_len..9 + name_len].try_into().expect("8"));
        let mut records = &rest[9 + name_len..];
        ensure!(*kind == 1 || id == 0, bad("a batch id without a client"));
        let origin = match kind {
            0 if name.is_empty() => Origin::None,
            1 => Origin::Client(
                ClientId::new(name).map_err(|e| bad(&e.to_string()))?,
                BatchId(id),
            ),
            2 => {
                keys::check_key(name).map_err(|e| bad(&e))?;
                Origin::Key(name.to_owned())
            }
            3 if name.is_empty() => {
                let (ids, rest) = SyslogIds::decode(records)?;
                records = rest;
                Origin::Syslog(ids)
            }
            other => return Err(bad(&format!("origin kind {other}"))),
        };
        Ok(Envelope {
            origin,
            stream,
            records,
            header,
        })
    }
}

/// Why a batch was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No input stream by that name.
    #[error("no stream called {name} (streams: {known})")]
    UnknownStream {
        /// The name asked for.
        name: String,
        /// The input streams.
        known: String,
    },
    /// The batch's format is not its stream's.
    #[error("stream {stream} reads {expected}, not {given}")]
    WrongFormat {
        /// The stream.
        stream: String,
        /// Its declared format.
        expected: &'static str,
        /// The batch's.
        given: &'static str,
    },
    /// The batch is over [`BATCH_BYTES_MAX`] (an edge's limit is at most
    /// that, so only a caller of the library meets this).
    #[error("a batch of {bytes} bytes is over the limit of {BATCH_BYTES_MAX} bytes")]
    TooLarge {
        /// The batch's size.
        bytes: usize,
    },
    /// Every queue of the stream's engine is full: retry later.
    #[error("the stream's queues are full: retry later")]
    Full,
    /// The batch's header line does not fit the stream's columns.
    #[error("the batch's header line does not fit its stream: {reason}")]
    BadHeader {
        /// The stream.
        stream: String,
        /// Why, naming the column.
        reason: String,
    },
    /// The batch id is older than the deduplication window.
    #[error("batch {id} is older than the deduplication window: it may have been counted")]
    TooOld {
        /// The batch id.
        id: BatchId,
    },
    /// A new client id while the deduplication table is full of clients
    /// used within [`crate::CLIENT_IDLE_SECS_MIN`]: none may be
    /// forgotten, so the new one waits.
    #[error(
        "the server holds {max} client ids, all used in the last {horizon} s: a new client id \
         is taken once one has been idle that long (retry after {retry_after_secs} s)",
        max = crate::CLIENTS_MAX,
        horizon = crate::CLIENT_IDLE_SECS_MIN
    )]
    ClientsFull {
        /// Seconds until one may be evicted.
        retry_after_secs: u64,
    },
    /// A new syslog sender while the table of senders' message ids is
    /// full of senders active within
    /// [`cardinal_syslog::ids::SENDER_IDLE_SECS_MIN`].
    #[error(
        "the server holds {max} syslog senders' message ids, all used in the last {horizon} s: \
         a new sender is taken once one has been idle that long (retry after \
         {retry_after_secs} s)",
        max = cardinal_syslog::ids::SENDERS_MAX,
        horizon = cardinal_syslog::ids::SENDER_IDLE_SECS_MIN
    )]
    SendersFull {
        /// Seconds until one may be evicted.
        retry_after_secs: u64,
    },
    /// A new idempotency key while the key table is full of keys taken
    /// within [`keys::KEY_IDLE_SECS_MIN`].
    #[error(
        "the server holds {max} idempotency keys, all taken in the last {horizon} s: a new key \
         is taken once the oldest is that old (retry after {retry_after_secs} s)",
        max = keys::KEYS_MAX,
        horizon = keys::KEY_IDLE_SECS_MIN
    )]
    KeysFull {
        /// Seconds until the oldest key may be forgotten.
        retry_after_secs: u64,
    },
    /// The idempotency key was taken on this stream by a request with
    /// other records.
    #[error("idempotency key reused with a different request (key {key})")]
    KeyReused {
        /// The key.
        key: String,
    },
    /// The stream is fed by a pull source: push batches would be
    /// counted beside the topic's without a position to resume from.
    #[error(
        "stream {stream} is fed from Kafka topic {topic}; it takes no batches over TCP or HTTP \
         (produce them to the topic)"
    )]
    Pulled {
        /// The stream.
        stream: String,
        /// Its topic.
        topic: String,
    },
    /// The service stopped (shutting down, or its log failed).
    #[error("the service is stopping: {0}")]
    Stopped(String),
}

impl Refused {
    /// The native protocol's code for this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            Refused::UnknownStream { .. } | Refused::Pulled { .. } => ErrorCode::UnknownStream,
            Refused::WrongFormat { .. } | Refused::BadHeader { .. } => ErrorCode::BadFormat,
            Refused::TooOld { .. } => ErrorCode::TooOld,
            Refused::TooLarge { .. } => ErrorCode::TooLarge,
            Refused::Full
            | Refused::ClientsFull { .. }
            | Refused::KeysFull { .. }
            | Refused::SendersFull { .. } => ErrorCode::Unavailable,
            Refused::KeyReused { .. } => ErrorCode::Protocol,
            Refused::Stopped(_) => ErrorCode::ServerStopping,
        }
    }

    /// Seconds a client should wait before it retries, for a refusal that
    /// passes with time.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Refused::Full => Some(1),
            Refused::ClientsFull { retry_after_secs }
            | Refused::KeysFull { retry_after_secs }
            | Refused::SendersFull { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

/// Why a pull source's batch was not taken ([`Service::offer_pulled`]).
#[derive(Debug)]
pub enum Offer {
    /// Every queue of the stream's engine is full: the bytes, given back
    /// to offer again once the engine has room.
    Full(Vec<u8>),
    /// The service stopped or failed.
    Stopped(String),
}

/// Seconds since the Unix epoch: the clock of the deduplication and key
/// tables' horizons (a clock before the epoch reads 0).
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A batch made durable and folded (or recognised as a duplicate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    /// Records folded (0 for a duplicate, or the first answer's counts for
    /// an idempotency key when known).
    pub accepted: u64,
    /// Records rejected.
    pub rejected: u64,
    /// Whether the batch was taken before.
    pub duplicate: bool,
    /// The first rejects' lines (reason, position, line).
    pub first_rejects: Vec<String>,
    /// The log sequence of the batch's record (0 for a duplicate).
    pub sequence: u64,
}

/// The promise of a batch's acknowledgement: a channel the completer
/// answers once, from its own thread.
pub type Reply = tokio::sync::oneshot::Receiver<Result<Acked, String>>;

/// Answers a batch taken before as a duplicate (`accepted` and `rejected`
/// the first answer's counts when known): the completer sends it once
/// everything queued before it is durable, so a duplicate's ack never
/// overtakes the original's.
fn answer_duplicate(
    completer: &Sender<Item>,
    (accepted, rejected): (u64, u64),
    reply: tokio::sync::oneshot::Sender<Result<Acked, String>>,
) -> Result<(), Refused> {
    let acked = Acked {
        accepted,
        rejected,
        duplicate: true,
        first_rejects: Vec::new(),
        sequence: 0,
    };
    completer
        .send(Item::Barrier { acked, reply })
        .map_err(|_| Refused::Stopped("shutting down".into()))
}

/// What the completer waits on, in log order.
enum Item {
    Batch {
        ticket: Ticket,
        receipt: Receipt,
        stream: usize,
        /// The log sequence the service predicted for the record when it
        /// appended it: the ticket must say the same.
        predicted: u64,
        /// Who sent it, for the rejects log (`client c batch 7`).
        origin: String,
        queued: Instant,
        reply: tokio::sync::oneshot::Sender<Result<Acked, String>>,
    },
    /// A pull source's batch: counted once folded (nothing to
    /// acknowledge; its position is saved by snapshots).
    Pulled {
        receipt: Receipt,
        stream: usize,
        /// When its oldest message was produced (ms since the epoch), if
        /// the broker said.
        produced_ms: Option<i64>,
        /// Which messages, for the rejects log (`topic ad-events
        /// partition 3 offsets 100..=199`).
        origin: String,
    },
    /// Answers once everything queued before it is done.
    Barrier {
        acked: Acked,
        reply: tokio::sync::oneshot::Sender<Result<Acked, String>>,
    },
    /// For a snapshot: once everything before it is durable.
    Sync(std::sync::mpsc::SyncSender<Result<(), String>>),
}

/// Per input stream: its engine and the log sequences of its batches not
/// yet covered by a snapshot.
#[derive(Debug)]
struct Stream {
    name: String,
    format: StreamFormat,
    engine: Continuous,
    /// The pull source feeding it, if one does.
    pull: Option<Pull>,
}

/// Where a batch an engine took leaves its source (module doc,
/// Positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// A push source's batch: its log record's sequence.
    Log(LogSeq),
    /// A pull source's batch: its partition and the next offset after it.
    Offset(i32, i64),
}

/// State under the ingest lock.
#[derive(Debug)]
struct Ingest {
    dedup: DedupTable,
    keys: KeyTable,
    /// Recent syslog message ids per sender.
    syslog: IdTable,
    /// The sequence the next log append gets.
    next_sequence: u64,
    /// Per stream: the engine sequence of the first entry of `pending`,
    /// and where each batch from it on leaves its source.
    pending: Vec<(u64, VecDeque<At>)>,
    /// Per stream fed by a pull source: per partition, the next offset
    /// after the batches a snapshot has covered (the snapshot's, at
    /// open).
    covered: Vec<BTreeMap<i32, i64>>,
    completer: Option<Sender<Item>>,
}

/// Counters for `/metrics`: monotonic since start.
#[derive(Debug, Default)]
pub struct Counters {
    /// Batches acknowledged (duplicates included).
    pub batches_acked: AtomicU64,
    /// Batches acknowledged as duplicates.
    pub batches_duplicate: AtomicU64,
    /// Batches refused because queues were full.
    pub batches_refused_full: AtomicU64,
    /// Records folded, per stream (index as in [`Service::streams`]).
    pub records: Vec<AtomicU64>,
    /// Records rejected, per stream.
    pub rejects: Vec<AtomicU64>,
    /// Acknowledgement latency histogram (seconds, [`LATENCY_BUCKETS`]).
    pub ack_seconds: Histogram,
    /// Snapshots written.
    pub snapshots: AtomicU64,
    /// Seconds the last snapshot took, in microseconds.
    pub snapshot_micros: AtomicU64,
    /// Bytes of the last snapshot.
    pub snapshot_bytes: AtomicU64,
    /// Pull sources: from the produce time of a batch's oldest message to
    /// the batch folded, so in every answer after (seconds,
    /// [`LATENCY_BUCKETS`]).
    pub pulled_freshness: Histogram,
    /// Bytes of batches taken, logged (push) or read (pull): what makes a
    /// snapshot due ([`Service::progress_bytes`]).
    pub bytes_in: AtomicU64,
}

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
    4.096,
];

/// A fixed-bucket histogram of seconds (Prometheus' cumulative buckets
/// are computed when read).
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket of [`LATENCY_BUCKETS`] and one more for larger values.
    pub counts: [AtomicU64; 15],
    /// The sum of the values, in microseconds.
    pub sum_micros: AtomicU64,
}

impl Histogram {
    /// Adds one observation.
    pub fn observe(&self, value: Duration) {
        let secs = value.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// The newest reject lines (bounded) and counts by reason.
#[derive(Debug, Default)]
pub struct Rejects {
    /// The newest lines, each `<who sent it>: <the engine's reject line>`
    /// (`client loader-1 batch 7: stream events batch 3:byte 28: ...`).
    pub lines: VecDeque<String>,
    /// Lines seen but no longer kept, or never kept (past the first ten of
    /// a batch).
    pub dropped: u64,
}

/// What opening found and did.
#[derive(Debug, Clone, Default)]
pub struct Opened {
    /// The snapshot started from, if any.
    pub snapshot: Option<String>,
    /// Newer snapshots skipped as damaged, with why.
    pub skipped: Vec<String>,
    /// The log's torn tail that was cut, in words.
    pub cut: Option<String>,
    /// The log damage repaired, in words.
    pub repaired: Option<String>,
    /// The log moved forward past its end to a snapshot's position, in
    /// words.
    pub moved: Option<String>,
    /// Every snapshot was damaged and the log rebuilt the state, in words.
    pub fallback: Option<String>,
    /// Damaged snapshots renamed aside (`<name>.damaged`).
    pub snapshots_set_aside: Vec<String>,
    /// Records replayed from the log, and their bytes.
    pub replayed: u64,
    /// Bytes of records replayed.
    pub replayed_bytes: u64,
    /// How long opening took.
    pub seconds: f64,
    /// Records this start set aside, in words (module doc, Records set
    /// aside).
    pub set_aside: Vec<String>,
    /// Records skipped because they were set aside, by this start or an
    /// earlier one.
    pub skipped_records: usize,
}

/// What a snapshot wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Its file name.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// How long it took, views to trim.
    pub seconds: f64,
    /// Log segments removed after it.
    pub trimmed: usize,
    /// The longest a worker paused for it.
    pub paused: Duration,
}

/// The service (module doc).
#[derive(Debug)]
pub struct Service {
    plan: Arc<Plan>,
    streams: Vec<Stream>,
    /// Each summary's layout, saved in every snapshot ([`layouts`]).
    layouts: Vec<LayoutPart>,
    wal: Wal,
    snapshots: Snapshots,
    ingest: Mutex<Ingest>,
    /// One snapshot at a time.
    snapshotting: Mutex<()>,
    completer: Mutex<Option<JoinHandle<()>>>,
    failed: Arc<Mutex<Option<String>>>,
    stopping: Arc<AtomicBool>,
    /// Counters for metrics.
    pub counters: Arc<Counters>,
    /// Rejected records' lines.
    pub rejects: Arc<Mutex<Rejects>>,
    opened: Opened,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn position_key(stream: &str) -> String {
    format!("stream/{stream}")
}

fn image_key(stream: &str, image: &str) -> String {
    format!("engine/{stream}/{image}")
}

/// The snapshot section of a pull-fed stream's offsets
/// ([`Offsets::encode`]).
fn offsets_key(stream: &str) -> String {
    format!("source/kafka/{stream}")
}

/// One part of a summary's layout as a snapshot records it
/// ([`layouts`]).
#[derive(Debug)]
struct LayoutPart {
    summary: String,
    /// The snapshot section that holds it.
    section: String,
    text: String,
}

/// Per summary, its layout as a snapshot records it, in two parts.
///
/// - `layout/{summary}`: the bucket, the dimensions with their types,
///   and the aggregates with their declarations (as `GET /v1/summaries`
///   describes them).
/// - `layout-expressions/{summary}`: what each dimension and aggregate
///   argument computes, as canonical text of its compiled expression
///   ([`cardinal_route::Expr::canonical`]: spacing, keyword and column
///   case do not change it). Recorded since 2026-11-29 in a section of
///   its own, so that a snapshot written before then, which has only the
///   first part, still starts.
///
/// A state kept under one layout means nothing under another (groups of
/// days read as hours, a dimension's values as another's, unique users
/// counted by `user_id` merged with ones counted by `device_id`), and a
/// rollup image only knows its aggregates' kinds: so a start whose
/// schema changed a summary's layout since the snapshot is refused,
/// naming the summary and both layouts. A changed filter still starts:
/// old groups stay as they were counted.
fn layouts(plan: &Plan) -> Result<Vec<LayoutPart>> {
    let described = cardinal_engine::sql::describe(plan)?;
    let mut parts = Vec::with_capacity(2 * described.len());
    for (d, summary) in described.iter().zip(&plan.summaries) {
        assert_eq!(d.name, summary.name, "describe keeps the plan's order");
        let bucket = d.bucket.as_ref().map_or_else(
            || "none".to_owned(),
            |(column, unit)| format!("{column} by {unit}"),
        );
        let dimensions: Vec<String> = d
            .dimensions
            .iter()
            .map(|c| format!("{} {}", c.name, c.ty.pg_name()))
            .collect();
        let aggregates: Vec<String> = d
            .aggregates
            .iter()
            .map(|(name, kind, _)| format!("{name} {kind}"))
            .collect();
        parts.push(LayoutPart {
            summary: d.name.clone(),
            section: format!("layout/{}", d.name),
            text: format!(
                "bucket {bucket}; dimensions ({}); aggregates ({})",
                dimensions.join(", "),
                aggregates.join(", ")
            ),
        });
        let canonical = |e: &cardinal_route::Expr| e.canonical(&summary.schema);
        let mut dimensions = Vec::new();
        let mut arguments = Vec::new();
        for output in &summary.outputs {
            match output.source {
                OutputSource::Bucket => {}
                OutputSource::Dimension(i) => {
                    dimensions.push(format!(
                        "{} = {}",
                        output.name,
                        canonical(&summary.dimensions[i])
                    ));
                }
                OutputSource::Aggregate(i) => {
                    let argument = summary.aggregates[i]
                        .argument
                        .map_or_else(|| "*".to_owned(), |a| canonical(&summary.arguments[a]));
                    arguments.push(format!("{} of {argument}", output.name));
                }
            }
        }
        parts.push(LayoutPart {
            summary: d.name.clone(),
            section: format!("layout-expressions/{}", d.name),
            text: format!(
                "dimensions ({}); aggregates ({})",
                dimensions.join(", "),
                arguments.join(", ")
            ),
        });
    }
    Ok(parts)
}

/// Refuses `snapshot` when a part of a summary's layout it recorded
/// differs from `now`'s ([`layouts`]); a part the snapshot does not hold
/// (written before that part was recorded) has nothing to compare.
fn check_layouts(snapshot: &Snapshot, now: &[LayoutPart]) -> Result<()> {
    for part in now {
        let Some(then) = snapshot.sections.get(&part.section) else {
            continue;
        };
        let then = String::from_utf8_lossy(then);
        if then != part.text {
            bail!(
                "summary {} was declared differently when the snapshot was written:\n  \
                 then: {then}\n  now:  {}\nits state means nothing under the new \
                 declaration: start with the schema it was written under, or declare the new \
                 one as a summary of another name, or use a new --data directory",
                part.summary,
                part.text
            );
        }
    }
    Ok(())
}

/// Per stream, the offsets a snapshot saved for it (empty for push-fed
/// streams and fresh starts), checked against the pull sources of this
/// start: a snapshot that read partitions this node no longer owns, or a
/// topic whose partition count changed, is refused, saying what to do
/// (docs/kafka.md, Changing the number of nodes).
fn pulled_positions(
    snapshot: Option<&Snapshot>,
    streams: &[Stream],
) -> Result<Vec<BTreeMap<i32, i64>>> {
    let mut covered = vec![BTreeMap::new(); streams.len()];
    let Some(snapshot) = snapshot else {
        return Ok(covered);
    };
    for key in snapshot.sections.keys() {
        if let Some(name) = key.strip_prefix("source/kafka/") {
            ensure!(
                streams.iter().any(|s| s.name == name),
                "the snapshot holds Kafka offsets of stream {name}, which this schema does not \
                 declare"
            );
        }
    }
    for (index, stream) in streams.iter().enumerate() {
        let Some(bytes) = snapshot.sections.get(&offsets_key(&stream.name)) else {
            continue;
        };
        let saved = Offsets::decode(bytes)
            .with_context(|| format!("the snapshot's Kafka offsets of stream {}", stream.name))?;
        let Some(pull) = &stream.pull else {
            bail!(
                "stream {} was fed from Kafka topic {} (its snapshot holds offsets of partitions \
                 {}), and this start gives it no --kafka-topic: start with --kafka-topic {}={} \
                 and the same partitions, or with a new --data directory",
                stream.name,
                saved.topic,
                list_partitions(saved.next.keys()),
                stream.name,
                saved.topic
            );
        };
        ensure!(
            saved.topic == pull.topic,
            "stream {} was read from Kafka topic {}, and this start reads topic {}: a state \
             holds one topic's records; start with --kafka-topic {}={} or a new --data directory",
            stream.name,
            saved.topic,
            pull.topic,
            stream.name,
            saved.topic
        );
        ensure!(
            saved.partition_count == pull.partition_count,
            "topic {} had {} partitions when this node's snapshot was written and has {} now: \
             records are spread over partitions by key, so offsets of the old partitions no \
             longer say what was read. Rebuild every node's state (docs/kafka.md, Changing the \
             number of partitions)",
            pull.topic,
            saved.partition_count,
            pull.partition_count
        );
        let foreign: Vec<i32> = saved
            .next
            .keys()
            .copied()
            .filter(|p| !pull.partitions.contains(p))
            .collect();
        ensure!(
            foreign.is_empty(),
            "this node's snapshot holds partitions {} of topic {}, which it is not assigned now \
             (it is assigned {}): their records are in this state, and the node that owns them \
             now would count them again. Start with the assignment the state was built under, \
             or follow docs/kafka.md, Changing the number of nodes",
            list_partitions(foreign.iter()),
            pull.topic,
            list_partitions(pull.partitions.iter())
        );
        covered[index] = saved.next;
    }
    Ok(covered)
}

/// `0, 2, 4` (or `none`).
fn list_partitions<'a>(partitions: impl Iterator<Item = &'a i32>) -> String {
    let list: Vec<String> = partitions.map(ToString::to_string).collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

const DEDUP_SECTION: &str = "dedup";
const KEYS_SECTION: &str = "keys";
const SYSLOG_SECTION: &str = "syslog-ids";

/// The highest log position the kept snapshots name, against what the
/// loaded state covers: the log never restarts below it (module doc,
/// Positions), or new appends would reuse sequences a snapshot already
/// counts as read, and new snapshots would be named below the old ones.
#[derive(Debug)]
struct LogFloor {
    /// The highest sequence any kept snapshot names: a stream's position,
    /// or a damaged snapshot's file name (a lower bound of its positions).
    named: u64,
    /// The snapshot file that names it.
    by: String,
    /// Every stream's records through this sequence are in the loaded
    /// state (the loaded snapshot's sequence, its least position).
    covered: u64,
    /// Streams saved only through a position below `named`.
    behind: Vec<(String, u64)>,
}

impl LogFloor {
    fn of(
        snapshot: Option<&Snapshot>,
        loaded: Option<&str>,
        damaged: &[(u64, String)],
    ) -> LogFloor {
        let mut floor = LogFloor {
            named: 0,
            by: String::new(),
            covered: snapshot.map_or(0, |s| s.sequence),
            behind: Vec::new(),
        };
        if let (Some(snapshot), Some(name)) = (snapshot, loaded) {
            let highest = snapshot
                .positions
                .values()
                .copied()
                .chain([snapshot.sequence])
                .max()
                .unwrap_or(0);
            floor.named = highest;
            floor.by = name.to_owned();
        }
        for (sequence, name) in damaged {
            if *sequence > floor.named {
                floor.named = *sequence;
                floor.by = format!("the damaged snapshot {name}");
            }
        }
        if let Some(snapshot) = snapshot {
            floor.behind = snapshot
                .positions
                .iter()
                .filter(|(_, position)| **position < floor.named)
                .map(|(key, position)| {
                    let name = key.strip_prefix("stream/").unwrap_or(key);
                    (name.to_owned(), *position)
                })
                .collect();
        }
        assert!(floor.covered <= floor.named);
        floor
    }

    /// What the log is asked to start at least at: past `named` when
    /// nothing the state needs is missing, or a person said to go on.
    fn next_sequence_min(&self, repair: bool) -> u64 {
        if self.covered >= self.named || repair {
            self.named + 1
        } else {
            1
        }
    }

    /// Refuses a log that ends below `named` (unless it moved forward), or
    /// says in words how it moved.
    fn check(&self, recovery: &cardinal_store::Recovery) -> Result<Option<String>> {
        let end = recovery
            .moved
            .as_ref()
            .map_or(recovery.next_sequence, |moved| moved.from)
            - 1;
        if end >= self.named {
            assert!(
                recovery.moved.is_none(),
                "a log that reaches the floor stays"
            );
            return Ok(None);
        }
        let behind = self
            .behind
            .iter()
            .map(|(stream, position)| format!("{stream} (saved through {position})"))
            .collect::<Vec<_>>()
            .join(", ");
        let missing = format!(
            "the write-ahead log ends at sequence {end}, below sequence {} that {} names",
            self.named, self.by
        );
        let Some(moved) = &recovery.moved else {
            bail!(
                "{missing}: records {}..={} are missing (log segments deleted, or cut by a \
                 repair), and acknowledged batches of streams {} may be among them. Put the \
                 missing wal-* segments back, or start with --repair to go on from sequence {} \
                 without them",
                end + 1,
                self.named,
                if behind.is_empty() {
                    "whose snapshot is damaged".to_owned()
                } else {
                    behind
                },
                self.named + 1
            );
        };
        assert_eq!(moved.to, self.named + 1, "moved to the floor");
        Ok(Some(if self.covered >= self.named {
            format!(
                "{missing}; every stream's state is saved through it, so nothing is missing: \
                 the log moved forward to sequence {} ({})",
                moved.to, moved.segment
            )
        } else {
            format!(
                "{missing}: records {}..={} are missing, and acknowledged batches of streams {} \
                 may be among them; --repair moved the log forward to sequence {} ({})",
                end + 1,
                self.named,
                if behind.is_empty() {
                    "whose snapshot is damaged".to_owned()
                } else {
                    behind
                },
                moved.to,
                moved.segment
            )
        }))
    }
}

/// A damaged log record's claimed origin in words: its sequence, and the
/// client and batch (or idempotency key) and stream its envelope names,
/// unverified (its checksum failed).
fn describe_claimed(claimed: &cardinal_store::Claimed) -> String {
    let origin = match Envelope::decode(&claimed.head) {
        Ok(envelope) => {
            let who = match &envelope.origin {
                Origin::Client(client, id) => format!("client {} batch {id}", client.as_str()),
                Origin::Key(key) => format!("idempotency key {key}"),
                Origin::None => "a request without an idempotency key".to_owned(),
                Origin::Syslog(ids) => syslog_text(ids),
            };
            format!("{who} on stream {}", envelope.stream)
        }
        Err(_) => format!(
            "source {} batch {}, its envelope unreadable",
            claimed.source.0, claimed.batch.0
        ),
    };
    format!(
        "sequence {}, {origin} (as its damaged bytes claim)",
        claimed.sequence
    )
}

/// A log repair in words: what was kept, exactly what could not be, and
/// where the copies are.
fn describe_repair(repair: &cardinal_store::Repair) -> String {
    let lost = if repair.lost.is_empty() {
        "nothing lost".to_owned()
    } else {
        let ranges: Vec<String> = repair
            .lost
            .iter()
            .map(|lost| {
                let range = match lost.last {
                    Some(last) if last == lost.first => format!("sequence {last}"),
                    Some(last) => format!(
                        "sequences {}..={last} ({} records)",
                        lost.first,
                        last + 1 - lost.first
                    ),
                    None => format!("the records from sequence {} on", lost.first),
                };
                let claims: Vec<String> = lost.claimed.iter().map(describe_claimed).collect();
                format!(
                    "{range}, at offset {} of {} ({} damaged bytes{}{})",
                    lost.offset,
                    lost.segment,
                    lost.bytes,
                    if claims.is_empty() { "" } else { "; records: " },
                    claims.join("; ")
                )
            })
            .collect();
        let count = repair.lost_count();
        format!(
            "lost {} record{}: {}",
            count.map_or_else(|| "an unknown number of".to_owned(), |n| n.to_string()),
            if count == Some(1) { "" } else { "s" },
            ranges.join(" | ")
        )
    };
    format!(
        "repaired {} (damage from offset {}): kept {} records of the damaged segments, {lost}; \
         {} records of sequences already taken dropped; copies: {}; segments written: {}. \
         The damage: {}",
        repair.segment,
        repair.offset,
        repair.salvaged,
        repair.stale,
        repair.copies.join(", "),
        repair.written.join(", "),
        repair.reason
    )
}

fn format_name(format: StreamFormat) -> &'static str {
    match format {
        StreamFormat::Csv => "csv",
        StreamFormat::Json => "ndjson",
        StreamFormat::Amplab => "amplab",
        StreamFormat::Parquet => "parquet",
    }
}

/// A log record replay could not fold: its engine stopped on it (module
/// doc, Records set aside).
#[derive(Debug)]
struct Unfoldable {
    sequence: u64,
    why: String,
}

impl std::fmt::Display for Unfoldable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log record {} cannot be folded: {}",
            self.sequence, self.why
        )
    }
}

impl std::error::Error for Unfoldable {}

/// The file a record set aside is kept in (module doc, Records set aside).
fn set_aside_name(sequence: u64) -> String {
    format!("{SET_ASIDE_PREFIX}{sequence:020}{SET_ASIDE_SUFFIX}")
}

const SET_ASIDE_PREFIX: &str = "set-aside-";
const SET_ASIDE_SUFFIX: &str = ".record";

/// The most records one start sets aside: past it the log is not a few
/// bad records but a bug to report, and the start stops.
pub const SET_ASIDE_PER_START_MAX: usize = 16;

/// The log sequences of the records set aside in `dir`.
fn set_aside_in(dir: &dyn Dir) -> Result<std::collections::BTreeSet<u64>> {
    Ok(dir
        .list()
        .context("listing the data directory")?
        .iter()
        .filter_map(|name| {
            name.strip_prefix(SET_ASIDE_PREFIX)?
                .strip_suffix(SET_ASIDE_SUFFIX)?
                .parse()
                .ok()
        })
        .collect())
}

/// The log segment holding `sequence`, by the segments' names
/// (`wal-<first sequence>.log`).
fn segment_of(segments: &[String], sequence: u64) -> String {
    segments
        .iter()
        .rfind(|name| {
            cardinal_store::wal::parse_segment_name(name).is_some_and(|base| base <= sequence)
        })
        .cloned()
        .unwrap_or_else(|| "no segment".to_owned())
}

/// Who sent a logged batch, in words.
fn origin_text(origin: &Origin, sequence: u64) -> String {
    match origin {
        Origin::Client(client, id) => format!("client {} batch {id}", client.as_str()),
        Origin::Key(key) => format!("idempotency key {key}"),
        Origin::None => format!("log record {sequence} (no client id or key)"),
        Origin::Syslog(ids) => format!("log record {sequence} ({})", syslog_text(ids)),
    }
}

/// A syslog batch's senders, in words.
fn syslog_text(ids: &SyslogIds) -> String {
    match ids.senders.as_slice() {
        [] => "syslog messages without ids".to_owned(),
        [one] => format!("syslog messages from {one}"),
        [one, rest @ ..] => format!("syslog messages from {one} and {} more", rest.len()),
    }
}

/// Log record `sequence`: its payload and who sent it, in words.
fn logged_record(wal: &Wal, sequence: u64) -> Result<(Vec<u8>, String)> {
    let mut found: Option<(Vec<u8>, String)> = None;
    wal.replay(sequence.saturating_sub(1), |record| {
        if record.sequence == sequence {
            let origin = Envelope::decode(record.payload).map_or_else(
                |e| format!("an undecodable envelope ({e:#})"),
                |envelope| origin_text(&envelope.origin, sequence),
            );
            found = Some((record.payload.to_vec(), origin));
        }
    })
    .with_context(|| format!("reading log record {sequence}"))?;
    found.with_context(|| format!("log record {sequence} is not in the log"))
}

/// Sets log record `sequence` (in `segment`, sent by `origin`) aside: its
/// payload and a line saying who sent it go into
/// `set-aside-<sequence>.record`, written and synced before the start
/// goes on; every later start skips the record. Says what it did, for
/// stderr and `opened`.
fn set_aside(
    dir: &dyn Dir,
    sequence: u64,
    segment: &str,
    (payload, origin): &(Vec<u8>, String),
    why: &str,
) -> Result<String> {
    let name = set_aside_name(sequence);
    let staging = format!("{name}.tmp");
    let mut file = dir.create(&staging)?;
    let mut text = format!(
        "cardinal set-aside record\nsequence {sequence}\nsegment {segment}\nfrom {origin}\n\
         why {why}\npayload {} bytes follow (the log envelope: stream, origin, records)\n",
        payload.len()
    )
    .into_bytes();
    text.extend_from_slice(payload);
    file.append(&text)?;
    file.sync_data()?;
    drop(file);
    dir.rename(&staging, &name)?;
    dir.sync_dir()?;
    Ok(format!(
        "set aside log record {sequence} (segment {segment}; from {origin}) in {name}: {why}"
    ))
}

impl Service {
    /// Opens the store in `dir`: the newest valid snapshot, then the log
    /// after it; starts one engine per input stream and the completer.
    ///
    /// A log record an engine cannot fold stops the start naming it, its
    /// segment and who sent it; with [`ServiceOptions::repair`] it is set
    /// aside in a file of the data directory and the start begins again
    /// without it (module doc, Records set aside).
    pub fn open(plan: Arc<Plan>, dir: Arc<dyn Dir>, options: &ServiceOptions) -> Result<Service> {
        let mut set_aside_now = Vec::new();
        loop {
            let skip = set_aside_in(&*dir)?;
            match Service::open_once(Arc::clone(&plan), Arc::clone(&dir), options, &skip) {
                Ok(mut service) => {
                    service.opened.set_aside = set_aside_now;
                    service.opened.skipped_records = skip.len();
                    return Ok(service);
                }
                Err(failure) => {
                    let Some(unfoldable) = failure.downcast_ref::<Unfoldable>() else {
                        return Err(failure);
                    };
                    let sequence = unfoldable.sequence;
                    let why = unfoldable.why.clone();
                    let (wal, _) = Wal::open(
                        Arc::clone(&dir),
                        WalOptions {
                            segment_bytes: options.segment_bytes,
                            repair: false,
                            ..WalOptions::default()
                        },
                    )
                    .context("opening the write-ahead log")?;
                    let segment = segment_of(&wal.segments(), sequence);
                    let record = logged_record(&wal, sequence)?;
                    let origin = &record.1;
                    if !options.repair {
                        bail!(
                            "log record {sequence} (segment {segment}; from {origin}) cannot be \
                             folded: {why}. Start with --repair to set it aside in {} (kept, \
                             with who sent it) and go on without it",
                            set_aside_name(sequence)
                        );
                    }
                    ensure!(
                        set_aside_now.len() < SET_ASIDE_PER_START_MAX,
                        "{SET_ASIDE_PER_START_MAX} log records set aside in one start and another \
                         cannot be folded (record {sequence}, segment {segment}): {why}"
                    );
                    let said = set_aside(&*dir, sequence, &segment, &record, &why)?;
                    wal.close().context("closing the write-ahead log")?;
                    set_aside_now.push(said);
                }
            }
        }
    }

    fn open_once(
        plan: Arc<Plan>,
        dir: Arc<dyn Dir>,
        options: &ServiceOptions,
        skip: &std::collections::BTreeSet<u64>,
    ) -> Result<Service> {
        let started = Instant::now();
        let mut opened = Opened::default();
        let inputs: Vec<usize> = (0..plan.streams.len())
            .filter(|&i| {
                plan.streams[i].credit_of.is_none()
                    && !matches!(plan.streams[i].format, StreamFormat::Parquet)
            })
            .collect();
        ensure!(
            !inputs.is_empty(),
            "the schema declares no stream that can be fed over the network (CREATE STREAM ... \
             WITH (format = 'csv' or 'json'))"
        );
        let snapshots = Snapshots::new(Arc::clone(&dir));
        // Every snapshot damaged: the log alone rebuilds the state if it
        // reaches back to sequence 1 (checked at replay).
        let loaded: Option<Loaded> = match snapshots.load_newest() {
            Ok(loaded) => loaded,
            Err(cardinal_store::Error::NoValidSnapshot { reasons }) => {
                opened.skipped = reasons;
                None
            }
            Err(error) => return Err(error).context("reading the snapshots"),
        };
        let (snapshot, positions) = match loaded {
            Some(loaded) => {
                opened.snapshot = Some(loaded.name.clone());
                opened.skipped = loaded.skipped.clone();
                let positions = loaded.snapshot.positions.clone();
                (Some(loaded.snapshot), positions)
            }
            None => (None, BTreeMap::new()),
        };
        // Snapshot files newer than the one loaded are damaged (skipped).
        let loaded_sequence = snapshot.as_ref().map(|s| s.sequence);
        let damaged: Vec<(u64, String)> = snapshots
            .list()
            .context("listing the snapshots")?
            .into_iter()
            .filter(|(sequence, _)| loaded_sequence.is_none_or(|loaded| *sequence > loaded))
            .collect();
        let floor = LogFloor::of(snapshot.as_ref(), opened.snapshot.as_deref(), &damaged);
        let (wal, recovery) = match Wal::open(
            Arc::clone(&dir),
            WalOptions {
                segment_bytes: options.segment_bytes,
                repair: options.repair,
                next_sequence_min: floor.next_sequence_min(options.repair),
            },
        ) {
            Ok(opened) => opened,
            Err(error) => {
                let origin = match &error {
                    cardinal_store::Error::Corrupt {
                        claimed: Some(claimed),
                        ..
                    } => format!(" (the damaged record: {})", describe_claimed(claimed)),
                    _ => String::new(),
                };
                return Err(anyhow!(error).context(format!(
                    "opening the write-ahead log{origin}; start with --repair to keep a copy \
                     and salvage every intact record"
                )));
            }
        };
        opened.cut = recovery.cut.as_ref().map(|cut| {
            format!(
                "cut a torn tail of {} bytes at offset {} of {}: {}",
                cut.bytes, cut.offset, cut.segment, cut.reason
            )
        });
        opened.repaired = recovery.repaired.as_ref().map(describe_repair);
        opened.moved = floor.check(&recovery)?;

        let layouts = layouts(&plan)?;
        if let Some(snapshot) = &snapshot {
            check_layouts(snapshot, &layouts)?;
        }
        // Engines, from the snapshot's images when there is one.
        let mut streams = Vec::with_capacity(inputs.len());
        for &i in &inputs {
            let declared = &plan.streams[i];
            let engine_options = options.engine(&declared.name);
            let engine = match &snapshot {
                None => Continuous::start(Arc::clone(&plan), &engine_options)?,
                Some(snapshot) => {
                    let prefix = format!("engine/{}/", declared.name);
                    let images: Vec<(String, Vec<u8>)> = snapshot
                        .sections
                        .iter()
                        .filter_map(|(key, bytes)| {
                            key.strip_prefix(&prefix)
                                .map(|name| (name.to_owned(), bytes.clone()))
                        })
                        .collect();
                    check_images(&plan, &engine_options, &images).with_context(|| {
                        format!(
                            "the snapshot does not fit stream {} of this schema (was the schema \
                             changed? start with the schema it was written under, or a new --data \
                             directory)",
                            declared.name
                        )
                    })?;
                    let engine =
                        Continuous::start_from(Arc::clone(&plan), &engine_options, &images)?;
                    // Images keep the limits they were written under; a
                    // start asking for others is refused, not silently
                    // ignored (changing them on a live state is not done).
                    let view = engine.snapshot()?;
                    for (name, rollup) in view.summaries().iter().zip(view.rollups()) {
                        let saved = rollup.limits();
                        ensure!(
                            saved == engine_options.limits,
                            "summary {name} was saved under limits {saved:?}, and this start asks \
                             for {:?}: start with the same --groups-max, --retention-days and \
                             --future-tolerance (a served state's limits cannot change yet)",
                            engine_options.limits
                        );
                    }
                    drop(view);
                    engine
                }
            };
            let pull = options
                .pulled
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(&declared.name))
                .map(|(_, pull)| pull.clone());
            streams.push(Stream {
                name: declared.name.clone(),
                format: declared.format,
                engine,
                pull,
            });
        }
        for name in options.pulled.keys() {
            ensure!(
                streams.iter().any(|s| s.name.eq_ignore_ascii_case(name)),
                "--kafka-topic names stream {name}, which this schema does not declare as an \
                 input stream (streams: {})",
                streams
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let covered = pulled_positions(snapshot.as_ref(), &streams)?;
        if let Some(snapshot) = &snapshot {
            for key in snapshot.positions.keys() {
                let name = key.strip_prefix("stream/").unwrap_or(key);
                ensure!(
                    streams.iter().any(|s| s.name == name),
                    "the snapshot has a stream {name} this schema does not declare"
                );
            }
        }
        let mut dedup = match snapshot
            .as_ref()
            .and_then(|s| s.sections.get(DEDUP_SECTION))
        {
            Some(image) => {
                DedupTable::decode(image, now_secs()).context("the snapshot's dedup table")?
            }
            None => DedupTable::new(),
        };
        let mut keys = match snapshot.as_ref().and_then(|s| s.sections.get(KEYS_SECTION)) {
            Some(image) => {
                KeyTable::decode(image, now_secs()).context("the snapshot's idempotency keys")?
            }
            None => KeyTable::new(),
        };
        let mut syslog = match snapshot
            .as_ref()
            .and_then(|s| s.sections.get(SYSLOG_SECTION))
        {
            Some(image) => IdTable::decode(image).context("the snapshot's syslog message ids")?,
            None => IdTable::new(),
        };

        // Replay: every record after the lowest position; each stream
        // takes those after its own.
        let stream_positions: Vec<u64> = streams
            .iter()
            .map(|s| positions.get(&position_key(&s.name)).copied().unwrap_or(0))
            .collect();
        let after = snapshot.as_ref().map_or(0, |s| s.sequence);
        let mut pending: Vec<(u64, VecDeque<At>)> = vec![(0, VecDeque::new()); streams.len()];
        let mut failure: Option<anyhow::Error> = None;
        wal.replay(after, |record| {
            if failure.is_some() {
                return;
            }
            let mut step = || -> Result<()> {
                // A record set aside is counted as taken (its sender's
                // retry is a duplicate, not a second crash), never folded.
                let set_aside = skip.contains(&record.sequence);
                let envelope = Envelope::decode(record.payload)
                    .with_context(|| format!("log record {} (replaying)", record.sequence))?;
                if envelope.is_mark() {
                    return Ok(());
                }
                let index = streams
                    .iter()
                    .position(|s| s.name == envelope.stream)
                    .with_context(|| {
                        format!(
                            "log record {} is for stream {}, which this schema does not declare",
                            record.sequence, envelope.stream
                        )
                    })?;
                // The log holds it, so the tables take it whatever their
                // room (a running table never held more).
                match &envelope.origin {
                    Origin::Client(client, id) => {
                        dedup.admit_logged(client, *id, now_secs());
                    }
                    Origin::Key(key) => {
                        let digest = Digest::of(envelope.records);
                        keys.insert_logged(envelope.stream, key, digest, now_secs());
                    }
                    Origin::Syslog(ids) => {
                        for (sender, digest) in ids.iter() {
                            syslog.admit_logged(sender, digest, now_secs());
                        }
                    }
                    Origin::None => {}
                }
                if record.sequence > stream_positions[index] && !set_aside {
                    if envelope.header {
                        // Admission checked it; a schema changed since
                        // may not fit it, and that is said here, naming
                        // the record, rather than by a worker stopping.
                        let (line, _) = cardinal_engine::split_header(envelope.records);
                        streams[index].engine.check_header(line).with_context(|| {
                            format!(
                                "log record {} (replaying): its header line does not fit \
                                 stream {} of this schema",
                                record.sequence, envelope.stream
                            )
                        })?;
                    }
                    let seq = streams[index].engine.submit(cardinal_engine::Records {
                        bytes: envelope.records.to_vec(),
                        header: envelope.header,
                    })?;
                    let (first, list) = &mut pending[index];
                    if list.is_empty() {
                        *first = seq.get();
                    }
                    list.push_back(At::Log(LogSeq(record.sequence)));
                    opened.replayed += 1;
                    opened.replayed_bytes += envelope.records.len() as u64;
                }
                Ok(())
            };
            if let Err(e) = step() {
                failure = Some(e);
            }
        })
        .map_err(|error| match error {
            cardinal_store::Error::ReplayGap { first, .. }
                if snapshot.is_none() && !damaged.is_empty() =>
            {
                anyhow!(
                    "no valid snapshot ({}), and the write-ahead log starts at sequence {first}, \
                     not 1, so it cannot rebuild the state alone. Restore a snapshot from a \
                     backup; or, to start an empty store (losing every batch they hold), move \
                     these files out of the data directory: {}",
                    opened.skipped.join("; "),
                    damaged
                        .iter()
                        .map(|(_, name)| name.clone())
                        .chain(wal.segments())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            other => anyhow!(other).context("replaying the write-ahead log"),
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        // Every replayed batch folded before the service answers: an
        // engine that stops on one names its log record.
        for (index, stream) in streams.iter().enumerate() {
            if let Err(e) = stream.engine.snapshot() {
                let (first, list) = &pending[index];
                let sequence = stream.engine.failed_batch().and_then(|seq| {
                    list.get(usize::try_from(seq.get().checked_sub(*first)?).ok()?)
                });
                return Err(match sequence {
                    Some(&At::Log(LogSeq(sequence))) => anyhow::Error::new(Unfoldable {
                        sequence,
                        why: format!("{e:#}"),
                    }),
                    _ => e.context(format!("replaying stream {}", stream.name)),
                });
            }
        }
        if snapshot.is_none() && !damaged.is_empty() {
            opened.fallback = Some(format!(
                "no valid snapshot ({} damaged): rebuilt the state from the write-ahead log, \
                 which reaches back to sequence 1 ({} records)",
                damaged.len(),
                opened.replayed
            ));
        }
        // The damaged snapshots leave the kept set (the state no longer
        // counts on them, and a new snapshot may be named below them);
        // their bytes stay for a person to look at.
        for (_, name) in &damaged {
            let aside = format!("{name}.damaged");
            dir.rename(name, &aside)
                .with_context(|| format!("setting the damaged snapshot {name} aside"))?;
            opened.snapshots_set_aside.push(aside);
        }
        if !damaged.is_empty() {
            dir.sync_dir()
                .context("syncing the data directory after setting snapshots aside")?;
        }
        let counters = Arc::new(Counters {
            records: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            rejects: streams.iter().map(|_| AtomicU64::new(0)).collect(),
            ..Counters::default()
        });
        let rejects = Arc::new(Mutex::new(Rejects::default()));
        let failed = Arc::new(Mutex::new(None));
        let stopping = Arc::new(AtomicBool::new(false));
        let (send, receive) = channel();
        let completer = {
            let counters = Arc::clone(&counters);
            let rejects = Arc::clone(&rejects);
            let failed = Arc::clone(&failed);
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("completer".into())
                .spawn(move || {
                    // A panic here fails the service like any failure:
                    // ingest refused, the server exits and recovers.
                    let completed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        complete(receive, &counters, &rejects, &failed, &stopping);
                    }));
                    if completed.is_err() {
                        mark_failed(&failed, &stopping, "the completer thread panicked");
                    }
                })
                .context("starting the completer thread")?
        };
        opened.seconds = started.elapsed().as_secs_f64();
        let service = Service {
            plan,
            streams,
            wal,
            snapshots,
            ingest: Mutex::new(Ingest {
                dedup,
                keys,
                syslog,
                next_sequence: recovery.next_sequence,
                pending,
                covered,
                completer: Some(send),
            }),
            snapshotting: Mutex::new(()),
            layouts,
            completer: Mutex::new(Some(completer)),
            failed,
            stopping,
            counters,
            rejects,
            opened,
        };
        Ok(service)
    }

    /// What opening found and did.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The compiled schema.
    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// The input streams' names, in plan order.
    pub fn streams(&self) -> Vec<&str> {
        self.streams.iter().map(|s| s.name.as_str()).collect()
    }

    /// Why the service stopped working, if it did (a failed log write or
    /// sync, a failed engine): the server must exit and recover.
    pub fn failed(&self) -> Option<String> {
        if let Some(why) = lock(&self.failed).clone() {
            return Some(why);
        }
        // An engine thread that stopped with no batch waiting on it (the
        // attribution thread at a snapshot, say) fails the service too.
        let stopped = self.streams.iter().find_map(|s| {
            s.engine
                .failure()
                .map(|why| format!("the engine of stream {} stopped: {why}", s.name))
        })?;
        self.fail(&stopped);
        lock(&self.failed).clone()
    }

    /// Bytes of batches taken since the service opened, logged by push
    /// sources or read by pull sources: the edge writes a snapshot once
    /// this has moved (an idle service writes none) or moved by a lot.
    pub fn progress_bytes(&self) -> u64 {
        self.counters.bytes_in.load(Ordering::Relaxed)
    }

    /// The log's counters.
    pub fn wal_stats(&self) -> WalStats {
        self.wal.stats()
    }

    /// The log's segment files.
    pub fn wal_segments(&self) -> Vec<String> {
        self.wal.segments()
    }

    /// Keeps a record an edge rejected before it reached the engine (a
    /// syslog message whose header or body could not be read): its line
    /// for `GET /v1/rejects`, `<who>: <why>`, counted among stream
    /// `index`'s rejects.
    pub fn reject_at_edge(&self, index: usize, who: &str, why: &str) {
        self.counters.rejects[index].fetch_add(1, Ordering::Relaxed);
        let mut kept = lock(&self.rejects);
        if kept.lines.len() == REJECTS_KEPT {
            kept.lines.pop_front();
            kept.dropped += 1;
        }
        kept.lines.push_back(format!("{who}: {why}"));
    }

    /// Checks a batch's stream and format without taking it.
    pub fn check_stream(&self, stream: &str, format: Format) -> Result<usize, Refused> {
        let index = self
            .streams
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(stream))
            .ok_or_else(|| Refused::UnknownStream {
                name: stream.to_owned(),
                known: self.streams().join(", "),
            })?;
        let declared = self.streams[index].format;
        let fits = matches!(
            (declared, format),
            (StreamFormat::Csv | StreamFormat::Amplab, Format::Csv)
                | (StreamFormat::Json, Format::Ndjson)
        );
        if !fits {
            return Err(Refused::WrongFormat {
                stream: self.streams[index].name.clone(),
                expected: format_name(declared),
                given: match format {
                    Format::Csv => "csv",
                    Format::Ndjson => "ndjson",
                },
            });
        }
        Ok(index)
    }

    /// Takes a batch (module doc): refused at once, or a reply that comes
    /// once it is durable and folded. With `header`, the first line of a
    /// CSV batch's `records` is its header: checked against the stream's
    /// columns before anything else, and logged with the records.
    pub fn ingest(
        &self,
        origin: Origin,
        stream: &str,
        format: Format,
        header: bool,
        records: &[u8],
    ) -> Result<Reply, Refused> {
        let index = self.check_stream(stream, format)?;
        // What the log and replay take, checked before anything is done.
        if records.len() > BATCH_BYTES_MAX {
            return Err(Refused::TooLarge {
                bytes: records.len(),
            });
        }
        let name = self.pushed(index)?;
        if header {
            let (line, _) = cardinal_engine::split_header(records);
            self.streams[index]
                .engine
                .check_header(line)
                .map_err(|e| Refused::BadHeader {
                    stream: name.to_owned(),
                    reason: format!("{e:#}"),
                })?;
        }
        let (reply_to, reply) = tokio::sync::oneshot::channel();
        let (mut ingest, completer) = self.taking()?;
        // Admission, decided here for every edge: the stream (above),
        // then whether the batch was taken before, then whether a new
        // origin has room in its table; nothing is written before all
        // three pass.
        let now = now_secs();
        let digest = match &origin {
            Origin::Key(_) => Some(Digest::of(records)),
            _ => None,
        };
        match &origin {
            Origin::Client(client, id) => match ingest.dedup.check(client, *id) {
                Verdict::New => {
                    if let Err(full) = ingest.dedup.room(client, now) {
                        return Err(Refused::ClientsFull {
                            retry_after_secs: full.retry_after_secs,
                        });
                    }
                }
                Verdict::Duplicate => {
                    answer_duplicate(&completer, (0, 0), reply_to)?;
                    return Ok(reply);
                }
                Verdict::TooOld => return Err(Refused::TooOld { id: *id }),
            },
            Origin::Key(key) => {
                let digest = digest.expect("computed for a key");
                match ingest.keys.lookup(name, key, digest) {
                    Lookup::New => {
                        if let Err(full) = ingest.keys.room(now) {
                            return Err(Refused::KeysFull {
                                retry_after_secs: full.retry_after_secs,
                            });
                        }
                    }
                    Lookup::Retry(counts) => {
                        answer_duplicate(&completer, counts.unwrap_or((0, 0)), reply_to)?;
                        return Ok(reply);
                    }
                    Lookup::Reused => return Err(Refused::KeyReused { key: key.clone() }),
                }
            }
            Origin::None => {}
            Origin::Syslog(_) => unreachable!("syslog batches are taken by ingest_syslog"),
        }
        self.log_batch(
            &mut ingest,
            index,
            (origin, digest),
            header,
            records,
            &completer,
            reply_to,
            now,
        )?;
        Ok(reply)
    }

    /// Takes a batch of syslog messages (module doc; `cardinal_syslog`):
    /// as [`Service::ingest`], with each message's id checked against its
    /// sender's recent ids under the same lock. Messages seen before (or
    /// twice in the batch) are dropped and acknowledged with the rest; a
    /// batch of only those is answered as a duplicate once everything
    /// before it is durable. The second value is how many were dropped.
    pub fn ingest_syslog(
        &self,
        stream: &str,
        format: Format,
        batch: &SyslogBatch,
    ) -> Result<(Reply, usize), Refused> {
        let index = self.check_stream(stream, format)?;
        assert_eq!(batch.ends.len(), batch.ids.len(), "one id slot per message");
        let id_bytes = SyslogIds::encoded_bytes(
            batch.ids.len(),
            batch.ids.iter().flatten().map(|(s, _)| s.len()).sum(),
            batch.ids.len(),
        );
        if batch.records.len() + id_bytes > BATCH_BYTES_MAX {
            return Err(Refused::TooLarge {
                bytes: batch.records.len() + id_bytes,
            });
        }
        self.pushed(index)?;
        let (reply_to, reply) = tokio::sync::oneshot::channel();
        let (mut ingest, completer) = self.taking()?;
        let now = now_secs();
        // Which messages are new: not among their sender's recent ids,
        // and not an earlier message of this batch.
        let mut ids = SyslogIds::default();
        let mut senders: std::collections::HashMap<&str, u16> = std::collections::HashMap::new();
        let mut seen = std::collections::HashSet::new();
        let mut keep = Vec::with_capacity(batch.ids.len());
        for id in &batch.ids {
            let new = match id {
                None => true,
                Some((sender, digest)) => {
                    let new = !ingest.syslog.contains(sender, *digest)
                        && seen.insert((sender.as_str(), *digest));
                    if new {
                        let next = u16::try_from(senders.len()).expect("a batch's senders fit");
                        let at = *senders.entry(sender.as_str()).or_insert_with(|| {
                            ids.senders.push(sender.clone());
                            next
                        });
                        ids.ids.push((at, *digest));
                    }
                    new
                }
            };
            keep.push(new);
        }
        let dropped = keep.iter().filter(|k| !**k).count();
        if dropped == keep.len() {
            answer_duplicate(&completer, (0, 0), reply_to)?;
            return Ok((reply, dropped));
        }
        if let Err(full) = ingest
            .syslog
            .room_many(ids.senders.iter().map(String::as_str), now)
        {
            return Err(Refused::SendersFull {
                retry_after_secs: full.retry_after_secs,
            });
        }
        let kept;
        let records = if dropped == 0 {
            &batch.records[..]
        } else {
            let mut out = Vec::with_capacity(batch.records.len());
            let mut start = 0;
            for (&end, keep) in batch.ends.iter().zip(&keep) {
                if *keep {
                    out.extend_from_slice(&batch.records[start..end]);
                }
                start = end;
            }
            kept = out;
            &kept[..]
        };
        self.log_batch(
            &mut ingest,
            index,
            (Origin::Syslog(ids), None),
            false,
            records,
            &completer,
            reply_to,
            now,
        )?;
        Ok((reply, dropped))
    }

    /// Stream `index`'s name, if it takes pushed batches: a Kafka-fed
    /// stream reads its broker and refuses them.
    fn pushed(&self, index: usize) -> Result<&str, Refused> {
        let stream = &self.streams[index];
        match &stream.pull {
            Some(pull) => Err(Refused::Pulled {
                stream: stream.name.clone(),
                topic: pull.topic.clone(),
            }),
            None => Ok(&stream.name),
        }
    }

    /// The ingest lock and the completer, while the service takes
    /// batches: every edge's admission starts here, and decides under
    /// this lock.
    fn taking(&self) -> Result<(MutexGuard<'_, Ingest>, Sender<Item>), Refused> {
        let ingest = lock(&self.ingest);
        if self.stopping.load(Ordering::Acquire) {
            return Err(Refused::Stopped(
                self.failed().unwrap_or_else(|| "shutting down".into()),
            ));
        }
        let Some(completer) = ingest.completer.clone() else {
            return Err(Refused::Stopped("shutting down".into()));
        };
        Ok((ingest, completer))
    }

    /// The part of admission every edge shares, once its origin passed
    /// the tables' checks under the ingest lock: the engine takes the
    /// batch, the log appends it, the tables mark its origin, and the
    /// completer will answer `reply_to` once it is durable and folded.
    #[allow(clippy::too_many_arguments)]
    fn log_batch(
        &self,
        ingest: &mut MutexGuard<'_, Ingest>,
        index: usize,
        (origin, digest): (Origin, Option<Digest>),
        header: bool,
        records: &[u8],
        completer: &Sender<Item>,
        reply_to: tokio::sync::oneshot::Sender<Result<Acked, String>>,
        now: u64,
    ) -> Result<(), Refused> {
        let name = &self.streams[index].name;
        let payload = Envelope {
            origin: origin.clone(),
            stream: name,
            records,
            header,
        }
        .encode();
        // The log appends under this lock only, so room seen here is
        // there at the append below, which then never waits: a full log
        // is a refusal like a full engine, not a runtime thread parked.
        if !self.wal.has_room(payload.len()) {
            self.counters
                .batches_refused_full
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Full);
        }
        let engine = &self.streams[index].engine;
        let taken = engine.try_submit_with_receipt(cardinal_engine::Records {
            bytes: records.to_vec(),
            header,
        });
        let (seq, receipt) = match taken {
            Ok(taken) => taken,
            Err(SubmitError::Full(_)) => {
                self.counters
                    .batches_refused_full
                    .fetch_add(1, Ordering::Relaxed);
                return Err(Refused::Full);
            }
            Err(error @ SubmitError::Stopped(_)) => {
                let why = format!("the engine of stream {name} stopped: {error:#}");
                self.fail(&why);
                return Err(Refused::Stopped(why));
            }
        };
        let (source, batch) = match &origin {
            Origin::Client(_, id) => (index as u64, id.0),
            _ => (index as u64, 0),
        };
        let ticket = match self.wal.append(
            cardinal_store::SourceId(source),
            cardinal_store::BatchId(batch),
            payload,
        ) {
            Ok(ticket) => ticket,
            Err(error) => {
                // The engine holds a batch the log does not: stop, and
                // recover from disk.
                let why = format!("the write-ahead log failed: {error}");
                self.fail(&why);
                return Err(Refused::Stopped(why));
            }
        };
        let sequence = ingest.next_sequence;
        ingest.next_sequence += 1;
        self.counters
            .bytes_in
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        let (first, list) = &mut ingest.pending[index];
        if list.is_empty() {
            *first = seq.get();
        }
        debug_assert_eq!(
            *first + list.len() as u64,
            seq.get(),
            "engine numbers follow the log"
        );
        list.push_back(At::Log(LogSeq(sequence)));
        let origin_text = match &origin {
            Origin::Client(client, id) => format!("client {} batch {id}", client.as_str()),
            Origin::Key(key) => format!("idempotency key {key}"),
            Origin::None => format!("log record {sequence}"),
            Origin::Syslog(ids) => format!("log record {sequence}, {}", syslog_text(ids)),
        };
        // Room was checked above under this same lock: these cannot be
        // refused now.
        match origin {
            Origin::Client(client, id) => {
                let admitted = ingest.dedup.admit(&client, id, now);
                assert_eq!(admitted, Ok(Verdict::New), "checked under the lock");
            }
            Origin::Key(key) => {
                let digest = digest.expect("computed for a key");
                let taken = ingest.keys.insert(name, &key, digest, now);
                assert_eq!(taken, Ok(()), "checked under the lock");
            }
            Origin::Syslog(ids) => {
                for (sender, digest) in ids.iter() {
                    ingest.syslog.admit(sender, digest, now);
                }
            }
            Origin::None => {}
        }
        let item = Item::Batch {
            ticket,
            receipt,
            stream: index,
            predicted: sequence,
            origin: origin_text,
            queued: Instant::now(),
            reply: reply_to,
        };
        if completer.send(item).is_err() {
            return Err(Refused::Stopped("shutting down".into()));
        }
        Ok(())
    }

    /// Offers stream `index`'s engine a batch read by its pull source:
    /// the messages of `partition` up to `next` (exclusive). Never waits:
    /// a full engine gives the bytes back ([`Offer::Full`]) and the source
    /// pauses the partition and offers again later. Nothing is logged
    /// (the broker keeps the records); the position is saved by the
    /// snapshots that cover the batch.
    pub fn offer_pulled(
        &self,
        index: usize,
        partition: i32,
        next: i64,
        records: Vec<u8>,
        origin: String,
        produced_ms: Option<i64>,
    ) -> Result<(), Offer> {
        let stream = &self.streams[index];
        assert!(stream.pull.is_some(), "offer_pulled to a push-fed stream");
        let ingest = &mut *lock(&self.ingest);
        if self.stopping.load(Ordering::Acquire) {
            return Err(Offer::Stopped(
                self.failed().unwrap_or_else(|| "shutting down".into()),
            ));
        }
        let Some(completer) = ingest.completer.clone() else {
            return Err(Offer::Stopped("shutting down".into()));
        };
        let len = records.len() as u64;
        let taken = stream
            .engine
            .try_submit_with_receipt(cardinal_engine::Records {
                bytes: records,
                header: false,
            });
        let (seq, receipt) = match taken {
            Ok(taken) => taken,
            Err(SubmitError::Full(records)) => return Err(Offer::Full(records.bytes)),
            Err(error @ SubmitError::Stopped(_)) => {
                let why = format!("the engine of stream {} stopped: {error}", stream.name);
                self.fail(&why);
                return Err(Offer::Stopped(why));
            }
        };
        let seq = seq.get();
        let (first, list) = &mut ingest.pending[index];
        if list.is_empty() {
            *first = seq;
        }
        debug_assert_eq!(*first + list.len() as u64, seq, "one entry per batch");
        list.push_back(At::Offset(partition, next));
        self.counters.bytes_in.fetch_add(len, Ordering::Relaxed);
        let item = Item::Pulled {
            receipt,
            stream: index,
            produced_ms,
            origin,
        };
        if completer.send(item).is_err() {
            return Err(Offer::Stopped("shutting down".into()));
        }
        Ok(())
    }

    /// The index of the stream called `name` and the pull source feeding
    /// it, if one does.
    pub fn pulled(&self, name: &str) -> Option<(usize, &Pull)> {
        self.streams
            .iter()
            .enumerate()
            .find(|(_, s)| s.name.eq_ignore_ascii_case(name))
            .and_then(|(i, s)| s.pull.as_ref().map(|pull| (i, pull)))
    }

    /// Per partition of stream `index`'s pull source, the next offset the
    /// last snapshot covers (at open: the snapshot started from). A
    /// partition absent has never been read into a snapshot.
    pub fn covered_offsets(&self, index: usize) -> BTreeMap<i32, i64> {
        lock(&self.ingest).covered[index].clone()
    }

    /// A client's hello: the highest batch id admitted from `client`
    /// (marking it used), or [`Refused::ClientsFull`] for a client the
    /// table does not hold while it has no room for a new one (its first
    /// batch would be refused the same way).
    pub fn hello(&self, client: &ClientId) -> Result<Option<BatchId>, Refused> {
        let now = now_secs();
        let mut ingest = lock(&self.ingest);
        if let Err(full) = ingest.dedup.room(client, now) {
            return Err(Refused::ClientsFull {
                retry_after_secs: full.retry_after_secs,
            });
        }
        ingest.dedup.touch(client, now);
        Ok(ingest.dedup.highest(client))
    }

    /// Records the counts an idempotency key's request on `stream` was
    /// answered.
    pub fn key_answered(&self, stream: &str, key: &str, accepted: u64, rejected: u64) {
        let Some(index) = self
            .streams
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(stream))
        else {
            return;
        };
        let name = &self.streams[index].name;
        lock(&self.ingest)
            .keys
            .set_counts(name, key, accepted, rejected);
    }

    /// Client ids and idempotency keys evicted from their tables since
    /// the service opened.
    pub fn evictions(&self) -> (u64, u64) {
        let ingest = lock(&self.ingest);
        (ingest.dedup.evicted(), ingest.keys.evicted())
    }

    /// A source's thread failed (its broker lost records, or another
    /// node claimed its partitions): the service fails as for any
    /// failure (ingest refused, `/healthz` says why, the process exits).
    pub fn fail_from_source(&self, why: &str) {
        self.fail(why);
    }

    fn fail(&self, why: &str) {
        mark_failed(&self.failed, &self.stopping, why);
    }

    /// The engine holding `summary` (index into the input streams).
    pub fn engine_of(&self, summary: &str) -> Option<usize> {
        self.streams.iter().position(|s| {
            s.engine
                .summaries()
                .iter()
                .any(|name| name.eq_ignore_ascii_case(summary))
        })
    }

    /// Batches waiting in stream `index`'s engine queues, and their
    /// capacity.
    pub fn queued(&self, index: usize) -> (usize, usize) {
        self.streams[index].engine.queued()
    }

    /// A live view of stream `index`'s engine: every batch folded so far
    /// merged (blocks while the workers hand over).
    pub fn view(&self, index: usize) -> Result<View<'_>> {
        self.streams[index].engine.snapshot()
    }

    /// A live view of stream `index`'s engine with what it covers: per
    /// Kafka partition feeding the stream, the next offset its state
    /// reaches (empty for push-fed streams).
    pub fn view_covered(&self, index: usize) -> Result<(View<'_>, Coverage)> {
        let stream = &self.streams[index];
        let view = stream.engine.snapshot()?;
        let mut coverage = Coverage::default();
        if let Some(pull) = &stream.pull {
            let covers = view.covers().get();
            let ingest = lock(&self.ingest);
            let mut next = ingest.covered[index].clone();
            let (first, list) = &ingest.pending[index];
            for (seq, at) in (*first..).zip(list) {
                if seq >= covers {
                    break;
                }
                if let At::Offset(partition, offset) = *at {
                    next.insert(partition, offset);
                }
            }
            coverage
                .partition_counts
                .insert(pull.topic.clone(), pull.partition_count);
            for (partition, offset) in next {
                coverage.partitions.insert(
                    TopicPartition {
                        topic: pull.topic.clone(),
                        partition,
                    },
                    offset,
                );
            }
        }
        Ok((view, coverage))
    }

    /// Waits until every batch appended so far is durable (synced) and
    /// folded: what a published output covers must never be lost by a
    /// crash. Call it after taking the views to publish: each batch they
    /// hold was appended before the ingest lock taken here was free.
    pub fn wait_durable(&self) -> Result<()> {
        let synced = queue_sync(&lock(&self.ingest))?;
        wait_synced(&synced)
    }

    /// Writes a snapshot of everything (module doc) and trims the log.
    pub fn snapshot(&self) -> Result<Written> {
        let _one = lock(&self.snapshotting);
        let started = Instant::now();
        let mut snapshot = Snapshot::default();
        let mut paused = Duration::ZERO;
        for (index, stream) in self.streams.iter().enumerate() {
            let view = stream.engine.snapshot_to_save()?;
            paused = paused.max(view.paused());
            for (name, image) in view.images()? {
                snapshot
                    .sections
                    .insert(image_key(&stream.name, &name), image);
            }
            let covers = view.covers().get();
            drop(view);
            let ingest = &mut *lock(&self.ingest);
            let last = ingest.next_sequence - 1;
            let (first, list) = &mut ingest.pending[index];
            while *first < covers
                && let Some(at) = list.pop_front()
            {
                *first += 1;
                if let At::Offset(partition, next) = at {
                    ingest.covered[index].insert(partition, next);
                }
            }
            match &stream.pull {
                Some(pull) => {
                    let offsets = Offsets {
                        topic: pull.topic.clone(),
                        partition_count: pull.partition_count,
                        next: ingest.covered[index].clone(),
                    };
                    snapshot
                        .sections
                        .insert(offsets_key(&stream.name), offsets.encode());
                }
                None => {
                    let position = list.iter().find_map(|at| match at {
                        At::Log(LogSeq(sequence)) => Some(sequence - 1),
                        At::Offset(..) => None,
                    });
                    snapshot
                        .positions
                        .insert(position_key(&stream.name), position.unwrap_or(last));
                }
            }
        }
        // With pull-fed streams, a mark moves the log's sequence so this
        // snapshot gets a name of its own (Envelope::mark); with only
        // pull-fed streams, it is the snapshot's sequence.
        let mut mark = None;
        if self.streams.iter().any(|s| s.pull.is_some()) {
            let mut ingest = lock(&self.ingest);
            let payload = Envelope::mark().encode();
            // A full log: this snapshot goes without its own name.
            if self.wal.has_room(payload.len()) {
                let ticket = self
                    .wal
                    .append(
                        cardinal_store::SourceId(u64::MAX),
                        cardinal_store::BatchId(0),
                        payload,
                    )
                    .map_err(|error| {
                        let why = format!("the write-ahead log failed: {error}");
                        self.fail(&why);
                        anyhow!(why)
                    })?;
                mark = Some((ingest.next_sequence, ticket));
                ingest.next_sequence += 1;
            }
        }
        let sync = {
            let ingest = lock(&self.ingest);
            let mut image = Vec::new();
            ingest.dedup.encode(&mut image);
            snapshot.sections.insert(DEDUP_SECTION.into(), image);
            let mut image = Vec::new();
            ingest.keys.encode(&mut image);
            snapshot.sections.insert(KEYS_SECTION.into(), image);
            let mut image = Vec::new();
            ingest.syslog.encode(&mut image);
            snapshot.sections.insert(SYSLOG_SECTION.into(), image);
            for part in &self.layouts {
                snapshot
                    .sections
                    .insert(part.section.clone(), part.text.as_bytes().to_vec());
            }
            queue_sync(&ingest)?
        };
        wait_synced(&sync)?;
        let mark = match mark {
            Some((sequence, ticket)) => {
                let synced = ticket
                    .wait()
                    .map_err(|error| anyhow!("the write-ahead log failed: {error}"))?;
                assert_eq!(synced, sequence, "the mark's sequence was predicted");
                Some(sequence)
            }
            None => None,
        };
        snapshot.sequence = match snapshot.positions.values().copied().min() {
            Some(lowest) => lowest,
            // Only pull-fed streams: the log holds nothing to replay.
            None => mark.unwrap_or_else(|| lock(&self.ingest).next_sequence - 1),
        };
        let bytes = snapshot.encode()?.len() as u64;
        let name = self
            .snapshots
            .write(&snapshot)
            .context("writing a snapshot")?;
        let trimmed = match self.snapshots.oldest_kept()? {
            Some(oldest) => self.wal.remove_through(oldest)?,
            None => 0,
        };
        let seconds = started.elapsed().as_secs_f64();
        self.counters.snapshots.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.counters
            .snapshot_micros
            .store(micros, Ordering::Relaxed);
        self.counters.snapshot_bytes.store(bytes, Ordering::Relaxed);
        Ok(Written {
            name,
            bytes,
            seconds,
            trimmed,
            paused,
        })
    }

    /// Stops taking batches (every later [`Service::ingest`] is refused
    /// with [`Refused::Stopped`]); what was taken is still acknowledged.
    pub fn stop_ingest(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// Clean shutdown: stops ingest, waits for every acknowledgement,
    /// writes a last snapshot (unless the service failed), and closes.
    pub fn close(self) -> Result<Option<Written>> {
        self.stop_ingest();
        let failed = self.failed();
        let written = match failed {
            Some(_) => None,
            None => Some(self.snapshot()?),
        };
        let completer = lock(&self.ingest).completer.take();
        drop(completer);
        if let Some(thread) = lock(&self.completer).take() {
            thread
                .join()
                .map_err(|_| anyhow!("the completer thread panicked"))?;
        }
        let Service { streams, wal, .. } = self;
        for stream in streams {
            stream.engine.finish()?;
        }
        wal.close()?;
        if let Some(why) = failed {
            bail!("the service had failed: {why}");
        }
        Ok(written)
    }
}

/// Queues a barrier behind everything appended so far (the caller holds
/// the ingest lock); [`wait_synced`] returns once all of it is durable
/// and folded.
fn queue_sync(ingest: &Ingest) -> Result<Receiver<Result<(), String>>> {
    let (done, synced) = std::sync::mpsc::sync_channel(1);
    ingest
        .completer
        .as_ref()
        .context("the service is closed")?
        .send(Item::Sync(done))
        .map_err(|_| anyhow!("the completer stopped"))?;
    Ok(synced)
}

/// Waits for a barrier [`queue_sync`] queued.
fn wait_synced(synced: &Receiver<Result<(), String>>) -> Result<()> {
    synced
        .recv()
        .map_err(|_| anyhow!("the completer stopped"))?
        .map_err(|e| anyhow!("{e}"))
}

/// Records the first reason the service failed and stops its ingest.
fn mark_failed(failed: &Mutex<Option<String>>, stopping: &AtomicBool, why: &str) {
    lock(failed).get_or_insert_with(|| why.to_owned());
    stopping.store(true, Ordering::Release);
}

/// Keeps a batch's first reject lines for `/v1/rejects`, each prefixed
/// with who sent it, and counts the rest.
fn keep_rejects(rejects: &Mutex<Rejects>, origin: &str, outcome: &cardinal_engine::Outcome) {
    if outcome.first_rejects.is_empty() && outcome.rejects == 0 {
        return;
    }
    let mut kept = lock(rejects);
    for line in &outcome.first_rejects {
        if kept.lines.len() == REJECTS_KEPT {
            kept.lines.pop_front();
            kept.dropped += 1;
        }
        kept.lines.push_back(format!("{origin}: {line}"));
    }
    kept.dropped += outcome.rejects - outcome.first_rejects.len() as u64;
}

/// The completer thread (module doc): answers items in log order.
fn complete(
    items: Receiver<Item>,
    counters: &Counters,
    rejects: &Mutex<Rejects>,
    failed: &Mutex<Option<String>>,
    stopping: &AtomicBool,
) {
    let mut broken: Option<String> = None;
    for item in items {
        match item {
            Item::Batch {
                ticket,
                receipt,
                stream,
                predicted,
                origin,
                queued,
                reply,
            } => {
                if let Some(why) = &broken {
                    let _ = reply.send(Err(why.clone()));
                    continue;
                }
                // Synced, then folded: either failing stops the service.
                let waited = ticket
                    .wait()
                    .map_err(|error| format!("the write-ahead log failed: {error}"))
                    .and_then(|sequence| {
                        let outcome = receipt.wait();
                        outcome
                            .map(|outcome| (sequence, outcome))
                            .map_err(|error| format!("an engine stopped: {error:#}"))
                    });
                let (sequence, outcome) = match waited {
                    Ok(done) => {
                        // What ingest predicted under its lock is what the
                        // log gave: the dedup and key tables, the stream
                        // positions and the snapshots all rest on it.
                        assert_eq!(
                            done.0, predicted,
                            "the log gave record {} the sequence {} where ingest predicted {}",
                            origin, done.0, predicted
                        );
                        done
                    }
                    Err(why) => {
                        mark_failed(failed, stopping, &why);
                        let _ = reply.send(Err(why.clone()));
                        broken = Some(why);
                        continue;
                    }
                };
                counters.records[stream].fetch_add(outcome.records, Ordering::Relaxed);
                counters.rejects[stream].fetch_add(outcome.rejects, Ordering::Relaxed);
                counters.batches_acked.fetch_add(1, Ordering::Relaxed);
                counters.ack_seconds.observe(queued.elapsed());
                keep_rejects(rejects, &origin, &outcome);
                let _ = reply.send(Ok(Acked {
                    accepted: outcome.records,
                    rejected: outcome.rejects,
                    duplicate: false,
                    first_rejects: outcome.first_rejects,
                    sequence,
                }));
            }
            Item::Pulled {
                receipt,
                stream,
                produced_ms,
                origin,
            } => {
                if broken.is_some() {
                    continue;
                }
                let outcome = match receipt.wait() {
                    Ok(outcome) => outcome,
                    Err(error) => {
                        let why = format!("an engine stopped: {error:#}");
                        mark_failed(failed, stopping, &why);
                        broken = Some(why);
                        continue;
                    }
                };
                counters.records[stream].fetch_add(outcome.records, Ordering::Relaxed);
                counters.rejects[stream].fetch_add(outcome.rejects, Ordering::Relaxed);
                keep_rejects(rejects, &origin, &outcome);
                if let Some(produced) = produced_ms {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                    let ms = u64::try_from(now.saturating_sub(produced)).unwrap_or(0);
                    counters.pulled_freshness.observe(Duration::from_millis(ms));
                }
            }
            Item::Barrier { acked, reply } => {
                let _ = match &broken {
                    Some(why) => reply.send(Err(why.clone())),
                    None => {
                        counters.batches_acked.fetch_add(1, Ordering::Relaxed);
                        counters.batches_duplicate.fetch_add(1, Ordering::Relaxed);
                        reply.send(Ok(acked))
                    }
                };
            }
            Item::Sync(done) => {
                let _ = done.send(match &broken {
                    Some(why) => Err(why.clone()),
                    None => Ok(()),
                });
            }
        }
    }
}
