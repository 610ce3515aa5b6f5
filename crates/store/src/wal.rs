//! The write-ahead log: numbered records in checksummed segments, written
//! by one group-commit thread, acknowledged only once synced, and
//! recovered after a crash by cutting a torn tail and refusing anything
//! else.
//!
//! # Layout
//!
//! The log is a run of segment files, each named by the sequence of its
//! first record (`wal-00000000000000000001.log`, 20 digits so names sort
//! as numbers). A segment is a 32-byte header and then records, back to
//! back; all integers are little-endian:
//!
//! ```text
//! header  | magic "CARDWAL\0" 8 | version u32 | skipped u32 | base sequence u64 | crc32c u32 | zero u32 |
//!           crc32c covers bytes 0..24
//! record  | length u32 | crc32c u32 | sequence u64 | source id u64 | batch id u64 | payload (length bytes) |
//!           crc32c covers everything after itself: bytes 8..32 and the payload
//! ```
//!
//! Sequences start at 1 and go up by one with no gap across the whole log;
//! a segment's first record is its base sequence, and the next segment's
//! base is one past its last record plus its `skipped` count. `skipped`
//! is 0 except in a segment a repair or a move forward started past
//! sequences the log lost (module docs, Recovery and Moving forward); a
//! build before it refuses such a header (its bytes 12..16 were zero). A record of 64 KiB costs 32 bytes of
//! framing (0.05%); one of 1 KiB, 3%.
//!
//! # Group commit
//!
//! [`Wal::append`] may be called from any thread: it queues the record and
//! returns a [`Ticket`]. One writer thread takes everything queued since
//! its last turn, numbers it, writes it with one `append` and covers it
//! with one `sync_data` (`fdatasync`), then completes every ticket: an
//! acknowledgement ([`Ticket::wait`] returning the sequence) means the
//! record is durable. While a sync runs (about 3 ms at the median on this
//! machine's disk, 13 ms at p99, issue 38), records pile up for the next
//! turn, so the number of syncs per second stays roughly constant and
//! records per sync grow with the load. The queue is bounded
//! ([`QUEUE_BYTES_MAX`], [`QUEUE_RECORDS_MAX`]): a producer waits for room
//! rather than growing memory.
//!
//! A segment rolls before a record would take it past the configured
//! segment size (at most [`SEGMENT_BYTES_MAX`]): the old segment is synced
//! first, the new one is created, its header written and synced, and the
//! directory synced, so a segment holding an acknowledged record always
//! has a durable name and header, and only the newest segment can ever
//! have an unsynced tail.
//!
//! A failed write or sync *poisons* the log: the writer stops, the tickets
//! of that turn and every later call fail with [`Error::Poisoned`]. It is
//! never retried: Linux may drop the dirty pages of a failed `fsync` and
//! mark them clean, so a second `fsync` can succeed over lost data
//! (PostgreSQL, 2018). The server stops and recovers from what is on disk.
//!
//! # Recovery
//!
//! [`Wal::open`] reads every segment in order (after `posix_fadvise
//! (DONTNEED)`, see [`crate::fs`]) and checks every header, record checksum
//! and sequence. It tells a torn write from damage the way etcd's WAL does
//! (`wal/decoder.go`, `isTornEntry`), on the premise that a disk writes a
//! [`SECTOR_BYTES`] sector whole or not at all:
//!
//! - **Torn tail** (cut, reported in [`Recovery::cut`]): in the newest
//!   segment, with no valid record anywhere after it, a record that is
//!   *cut short by the end of the file*, or whose bytes *reach into zeros
//!   that run from a sector boundary to the end of the file* (the size of
//!   an extended file reached the disk, its data did not: ext4
//!   `data=writeback`, or preallocated space). A crash leaves exactly
//!   these, and what they lose was never acknowledged. The file is
//!   truncated there. A newest segment shorter than a header whose header
//!   is bad was created but never synced: it is removed.
//! - **Damage** (refuses to open: [`Error::Corrupt`] names the segment, the
//!   offset and what the record's own header says of its sequence, source
//!   and batch, unverified; [`Error::BadHeader`], [`Error::Gap`]): a
//!   *complete* record with a bad checksum and no such zeros (a flipped
//!   byte, even in the very last record), a record cut short that would be
//!   whole with the length the file leaves it (its length field flipped),
//!   a bad record with a valid one after it, any bad record in an older
//!   segment (those were synced whole before the next was created), a bad
//!   header, a sequence that does not continue the one before it. Cutting
//!   there could drop acknowledged records, so a person decides.
//!
//! With [`WalOptions::repair`] damage is *salvaged*, not cut: each
//! damaged segment is copied beside itself (`<segment>.damaged-at-
//! <offset>`), and every record in it whose own checksum holds and whose
//! sequence continues the log is kept (a bad header costs no record).
//! The kept records are written to new segments, through temp files
//! renamed over the old names; where sequences are missing, the next kept
//! record starts a segment whose header says how many sequences it skips.
//! [`Repair`] reports exactly what could not be kept: per missing range
//! the sequences, the damaged bytes, and what the damaged records' own
//! headers claim (the caller turns that into a client and batch); records
//! whose sequence was already taken (another writer's) are dropped and
//! counted. A crash during a repair leaves the copies; running it again
//! finishes it.
//!
//! A bad record's successor is looked for byte by byte, taking only a
//! record whose sequence is plausible (no lower than the bad one's, no
//! higher than the bytes left could hold) and whose checksum holds, so
//! garbage after a torn write is not taken for a record (a random match is
//! a 2^-32 checksum chance on top of the sequence's).
//!
//! The residual: a damaged last record whose genuine bytes end in zeros
//! across a sector boundary reads as a tear (a record's last bytes are
//! payload, a newline for every batch the server logs), and a flipped
//! length field of the very last record that is not also whole with the
//! length the file leaves reads as a record cut short.
//!
//! # Moving forward
//!
//! [`WalOptions::next_sequence_min`] makes the log never restart below a
//! sequence (the highest a snapshot names): when it ends below, opening
//! starts a segment at that sequence whose header says how many sequences
//! it skips, and [`Recovery::moved`] says so. A skipped range is part of
//! the log's history, so recovery, replay and the next open accept it;
//! anything else missing is still a gap.
//!
//! Then [`Wal::replay`] yields the records after a snapshot's sequence,
//! checking every checksum again.
//!
//! # Trimming
//!
//! [`Wal::remove_through`] deletes the whole segments whose records are
//! all at or below a sequence, once a snapshot covering them is durable.
//! The newest segment is never removed, so the log always knows its next
//! sequence.

// Maintainer notes: a change to the record or header layout changes
// `VERSION`, `encode_record`, `parse_record`, `encode_header`,
// `check_header`, the fuzz target `fuzz/fuzz_targets/wal_records.rs` and
// the layout above.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::error::Error;
use crate::fs::{Dir, DirFile};

/// The format version in every segment header.
pub const VERSION: u32 = 1;
/// A segment header's size.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// A record's framing before its payload.
pub const RECORD_HEADER_BYTES: usize = 32;
/// The largest payload of one record: 16 MiB and 4 KiB, room for the
/// largest batch the server accepts (16 MiB) and the envelope it wraps
/// it in, and small enough that a forged length cannot make the reader
/// look far.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = (16 << 20) + (4 << 10);
/// The largest segment size an option may ask for, and the default: 64
/// MiB, so recovery reads, checks and trims in pieces of at most that, and
/// a segment holds about a thousand 64 KiB batches.
pub const SEGMENT_BYTES_MAX: u64 = 64 << 20;
/// The least segment size an option may ask for (tests use small ones to
/// roll often): a header and one small record.
pub const SEGMENT_BYTES_MIN: u64 = 128;
/// The most payload bytes queued for the writer: 64 MiB, about what one
/// group commit writes at 2 GB/s in the 13 ms of a slow sync, beyond which
/// producers wait.
pub const QUEUE_BYTES_MAX: usize = 64 << 20;
/// The most records queued for the writer (bounds the per-record
/// bookkeeping of tiny records the byte limit would let through).
pub const QUEUE_RECORDS_MAX: usize = 65_536;

/// The unit a disk writes whole or not at all, on which torn writes are
/// told from damage (module docs, Recovery): 512 bytes, the smallest
/// logical sector of any disk Linux drives, and etcd's `minSectorSize`.
/// A 4 KiB-sector disk tears at multiples of it, which the rule covers.
pub const SECTOR_BYTES: usize = 512;
/// The most payload bytes of a damaged record kept in [`Claimed::head`]:
/// 1 KiB, more than the server's envelope before its records (at most
/// 522 bytes: stream and origin names of up to 255 each), so a caller can
/// name the client and batch of a record it lost.
pub const CLAIMED_HEAD_BYTES_MAX: usize = 1024;
/// The most damaged records described per missing range of a repair:
/// 16, enough to name who to ask for a resend in any ordinary case, while
/// a segment of garbage cannot make the report as large as the segment.
pub const CLAIMED_PER_LOSS_MAX: usize = 16;

const MAGIC: [u8; 8] = *b"CARDWAL\0";
const SEGMENT_PREFIX: &str = "wal-";
const SEGMENT_SUFFIX: &str = ".log";
const SEQUENCE_DIGITS: usize = 20;

const _: () = assert!(SEGMENT_BYTES_MIN >= (SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES) as u64);
const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as u64);
const _: () = assert!(RECORD_PAYLOAD_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(QUEUE_BYTES_MAX >= RECORD_PAYLOAD_BYTES_MAX);

/// Who sent a record: a client connection's or a Kafka partition's id,
/// chosen by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(pub u64);

/// The sender's id for the batch a record holds (for deduplication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId(pub u64);

/// One record read back from the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its place in the log, from 1, with no gaps.
    pub sequence: u64,
    /// Who sent it.
    pub source: SourceId,
    /// The sender's batch id.
    pub batch: BatchId,
    /// The bytes appended.
    pub payload: &'a [u8],
}

/// How a log opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalOptions {
    /// Roll to a new segment before one would grow past this many bytes
    /// (`SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX`; a record larger than the
    /// segment size gets a segment of its own).
    pub segment_bytes: u64,
    /// Repair damage instead of refusing to open (module docs, Recovery).
    pub repair: bool,
    /// The least sequence the next append may get: a log that ends below
    /// it moves forward to it (module docs, Moving forward). 1 asks
    /// nothing.
    pub next_sequence_min: u64,
}

impl Default for WalOptions {
    fn default() -> WalOptions {
        WalOptions {
            segment_bytes: SEGMENT_BYTES_MAX,
            repair: false,
            next_sequence_min: 1,
        }
    }
}

/// A torn tail that opening cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The segment's file name.
    pub segment: String,
    /// Where the file now ends (0 when the segment was removed).
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// What was found there.
    pub reason: String,
}

/// What a damaged record's own header says of it: unverified, as its
/// checksum failed, but what a person needs to find who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The sequence it claims.
    pub sequence: u64,
    /// The source it claims.
    pub source: SourceId,
    /// The batch id it claims.
    pub batch: BatchId,
    /// The payload length it claims.
    pub length: u32,
    /// The first payload bytes there are, at most
    /// [`CLAIMED_HEAD_BYTES_MAX`] (the caller's envelope and origin).
    pub head: Vec<u8>,
}

/// Sequences a repair could not keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The first missing sequence.
    pub first: u64,
    /// The last one, when a kept record after the range tells it (`None`:
    /// the range runs to the end of the log, and `claimed` says how many
    /// damaged records were there).
    pub last: Option<u64>,
    /// Where the damaged bytes were (or the segment after a gap with none).
    pub segment: String,
    /// Their offset in it.
    pub offset: u64,
    /// How many damaged bytes were passed over (0: the records were
    /// missing, not damaged).
    pub bytes: u64,
    /// What the damaged records' own headers claim, at most
    /// [`CLAIMED_PER_LOSS_MAX`].
    pub claimed: Vec<Claimed>,
}

impl Lost {
    /// How many sequences are missing, when known.
    pub fn count(&self) -> Option<u64> {
        self.last.map(|last| last + 1 - self.first)
    }
}

/// Damage that opening with [`WalOptions::repair`] salvaged (module docs,
/// Recovery).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The first damaged segment's file name.
    pub segment: String,
    /// Where its damage starts (0: its header, or a gap before it).
    pub offset: u64,
    /// The copy of the first damaged segment kept beside it.
    pub copy: Option<String>,
    /// Copies of every segment the repair rewrote, the first's included.
    pub copies: Vec<String>,
    /// The segments the repair wrote, with the records it kept.
    pub written: Vec<String>,
    /// Records kept from the damaged segments.
    pub salvaged: u64,
    /// The sequences that could not be kept.
    pub lost: Vec<Lost>,
    /// Valid records dropped because their sequence was already taken
    /// (another writer's, or a segment copied in twice).
    pub stale: u64,
    /// The error opening would have refused with.
    pub reason: String,
}

impl Repair {
    /// The sequences lost, when every range's end is known.
    pub fn lost_count(&self) -> Option<u64> {
        self.lost.iter().map(Lost::count).sum()
    }
}

/// A log that ended below [`WalOptions::next_sequence_min`] and moved
/// forward to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The sequence the log would have given next.
    pub from: u64,
    /// The sequence it gives next now.
    pub to: u64,
    /// The segment started at `to`.
    pub segment: String,
}

/// What opening found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Segments in the log after opening.
    pub segments: usize,
    /// The first sequence the log holds (equal to `next_sequence` when
    /// it holds none).
    pub first_sequence: u64,
    /// The sequence the next append gets.
    pub next_sequence: u64,
    /// The torn tail that was cut, if any.
    pub cut: Option<Cut>,
    /// The damage that was repaired, if any.
    pub repaired: Option<Repair>,
    /// The move forward past the log's end, if any.
    pub moved: Option<Moved>,
}

/// Upper bounds (seconds) of the buckets of [`WalStats::sync_seconds`]:
/// 0.25 ms to 4 s, doubling.
pub const SYNC_SECONDS_BUCKETS: [f64; 15] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
    2.048, 4.096,
];

/// Upper bounds of the buckets of [`WalStats::sync_records`]: records one
/// group commit covered, 1 to 4,096, doubling.
pub const SYNC_RECORDS_BUCKETS: [u64; 13] =
    [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// Counters since opening, for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records written and synced.
    pub records: u64,
    /// Bytes written, framing included.
    pub bytes: u64,
    /// `sync_data` calls that covered records.
    pub syncs: u64,
    /// Segments created.
    pub rolls: u64,
    /// Group commits' `sync_data` durations: per bucket of
    /// [`SYNC_SECONDS_BUCKETS`] (not cumulative), and one more for longer.
    pub sync_seconds: [u64; 16],
    /// The sum of those durations, in microseconds.
    pub sync_micros_sum: u64,
    /// Records per group commit: per bucket of [`SYNC_RECORDS_BUCKETS`]
    /// (not cumulative), and one more for more.
    pub sync_records: [u64; 14],
}

/// A segment's file name for its base sequence.
pub fn segment_name(base: u64) -> String {
    format!("{SEGMENT_PREFIX}{base:0SEQUENCE_DIGITS$}{SEGMENT_SUFFIX}")
}

/// The base sequence a segment's file name carries, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEQUENCE_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A segment header: `skipped` sequences before `base` are not in the log
/// on purpose (module docs, Layout).
fn encode_header(base: u64, skipped: u32) -> [u8; SEGMENT_HEADER_BYTES] {
    assert!(u64::from(skipped) < base, "sequences start at 1");
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&skipped.to_le_bytes());
    header[16..24].copy_from_slice(&base.to_le_bytes());
    let crc = crc32c::crc32c(&header[..24]);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    header
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
}

/// Checks a segment header against the base its name gives; returns its
/// `skipped` count.
fn check_header(bytes: &[u8], base: u64) -> Result<u64, String> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err(format!(
            "{} bytes, shorter than a {SEGMENT_HEADER_BYTES}-byte header",
            bytes.len()
        ));
    }
    let stored = le_u32(bytes, 24);
    let computed = crc32c::crc32c(&bytes[..24]);
    if stored != computed {
        return Err(format!(
            "header checksum {stored:#010x} does not match its bytes ({computed:#010x})"
        ));
    }
    if bytes[..8] != MAGIC {
        return Err("not a WAL segment (bad magic)".to_string());
    }
    let version = le_u32(bytes, 8);
    if version != VERSION {
        return Err(format!("version {version}, expected {VERSION}"));
    }
    if le_u32(bytes, 28) != 0 {
        return Err("reserved header bytes are not zero".to_string());
    }
    let found = le_u64(bytes, 16);
    if found != base {
        return Err(format!(
            "header base sequence {found}, file name says {base}"
        ));
    }
    let skipped = u64::from(le_u32(bytes, 12));
    if skipped >= base {
        return Err(format!(
            "header skips {skipped} sequences before base {base}"
        ));
    }
    Ok(skipped)
}

/// Appends one framed record to `out`.
fn encode_record(
    out: &mut Vec<u8>,
    sequence: u64,
    source: SourceId,
    batch: BatchId,
    payload: &[u8],
) {
    assert!(payload.len() <= RECORD_PAYLOAD_BYTES_MAX);
    let len = u32::try_from(payload.len()).expect("payload limit fits u32");
    let mut head = [0u8; RECORD_HEADER_BYTES];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[8..16].copy_from_slice(&sequence.to_le_bytes());
    head[16..24].copy_from_slice(&source.0.to_le_bytes());
    head[24..32].copy_from_slice(&batch.0.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head[8..]), payload);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
}

/// Why the bytes at an offset are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BadRecord {
    /// The record runs past the end of the bytes.
    Incomplete(String),
    /// The record is whole but wrong.
    Invalid(String),
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::Incomplete(why) | BadRecord::Invalid(why) => f.write_str(why),
        }
    }
}

/// Reads the record at `at`: the record and the offset after it.
fn parse_record(bytes: &[u8], at: usize) -> Result<(Record<'_>, usize), BadRecord> {
    let left = bytes.len().saturating_sub(at);
    if left < RECORD_HEADER_BYTES {
        return Err(BadRecord::Incomplete(format!(
            "record header cut short: {left} of {RECORD_HEADER_BYTES} bytes"
        )));
    }
    let len = le_u32(bytes, at) as usize;
    if len > RECORD_PAYLOAD_BYTES_MAX {
        return Err(BadRecord::Invalid(format!(
            "length {len} over the limit of {RECORD_PAYLOAD_BYTES_MAX}"
        )));
    }
    let end = at + RECORD_HEADER_BYTES + len;
    if end > bytes.len() {
        return Err(BadRecord::Incomplete(format!(
            "record of {} bytes cut short at {left}",
            RECORD_HEADER_BYTES + len
        )));
    }
    let stored = le_u32(bytes, at + 4);
    let computed = crc32c::crc32c(&bytes[at + 8..end]);
    if stored != computed {
        return Err(BadRecord::Invalid(format!(
            "checksum {stored:#010x} does not match its bytes ({computed:#010x})"
        )));
    }
    let record = Record {
        sequence: le_u64(bytes, at + 8),
        source: SourceId(le_u64(bytes, at + 16)),
        batch: BatchId(le_u64(bytes, at + 24)),
        payload: &bytes[at + RECORD_HEADER_BYTES..end],
    };
    Ok((record, end))
}

/// The first valid record after `from` whose sequence could follow
/// `expected` (module docs, Recovery): its offset and sequence.
fn find_valid_after(bytes: &[u8], from: usize, expected: u64) -> Option<(usize, u64)> {
    let last = bytes.len().checked_sub(RECORD_HEADER_BYTES)?;
    let most = expected.saturating_add(u64::try_from(bytes.len() / RECORD_HEADER_BYTES).ok()?);
    (from..=last).find_map(|at| {
        let sequence = le_u64(bytes, at + 8);
        if sequence < expected || sequence > most {
            return None;
        }
        parse_record(bytes, at).ok().map(|_| (at, sequence))
    })
}

/// What the header at `at` claims, if a whole record header is there.
fn claimed_at(bytes: &[u8], at: usize) -> Option<Claimed> {
    if bytes.len().saturating_sub(at) < RECORD_HEADER_BYTES {
        return None;
    }
    let length = le_u32(bytes, at);
    let from = at + RECORD_HEADER_BYTES;
    let until = from
        .saturating_add(length as usize)
        .min(from + CLAIMED_HEAD_BYTES_MAX)
        .min(bytes.len());
    Some(Claimed {
        sequence: le_u64(bytes, at + 8),
        source: SourceId(le_u64(bytes, at + 16)),
        batch: BatchId(le_u64(bytes, at + 24)),
        length,
        head: bytes[from..until].to_vec(),
    })
}

/// The damaged records' claims in `bytes[from..until]`, walking their
/// claimed lengths (at most [`CLAIMED_PER_LOSS_MAX`]), and whether the
/// walk ends exactly at `until` (then they count the records there).
fn claims_between(bytes: &[u8], from: usize, until: usize) -> (Vec<Claimed>, bool) {
    let mut claims = Vec::new();
    let mut at = from;
    while at < until && claims.len() < CLAIMED_PER_LOSS_MAX {
        let Some(claimed) = claimed_at(&bytes[..until], at) else {
            break;
        };
        let length = claimed.length as usize;
        claims.push(claimed);
        if length > RECORD_PAYLOAD_BYTES_MAX {
            break;
        }
        at += RECORD_HEADER_BYTES + length;
    }
    if at != until && whole_with_its_length_flipped(&bytes[from..until]) {
        // One record whose length field is what was damaged.
        claims.truncate(1);
        return (claims, true);
    }
    (claims, at == until)
}

/// Whether `bytes` are one whole record but for its length field.
fn whole_with_its_length_flipped(bytes: &[u8]) -> bool {
    if bytes.len() <= RECORD_HEADER_BYTES
        || bytes.len() > RECORD_HEADER_BYTES + RECORD_PAYLOAD_BYTES_MAX
    {
        return false;
    }
    let mut fixed = bytes.to_vec();
    let len = u32::try_from(bytes.len() - RECORD_HEADER_BYTES).expect("under the payload limit");
    fixed[..4].copy_from_slice(&len.to_le_bytes());
    parse_record(&fixed, 0).is_ok()
}

/// Whether the bad record at `at` is a torn write (module docs,
/// Recovery): what it looks like, or `None` for damage.
fn tear(bytes: &[u8], at: usize, bad: &BadRecord) -> Option<String> {
    match bad {
        BadRecord::Incomplete(why) => {
            // A length field flipped upwards also runs past the end: if the
            // record is whole with the length the file leaves it, the bytes
            // all reached the disk and one of them is wrong.
            if whole_with_its_length_flipped(&bytes[at..]) {
                return None;
            }
            Some(format!("{why}, by the end of the file"))
        }
        BadRecord::Invalid(why) => {
            let length = if bytes.len() - at >= 4 {
                le_u32(bytes, at) as usize
            } else {
                0
            };
            let end = at
                .saturating_add(RECORD_HEADER_BYTES)
                .saturating_add(length)
                .min(bytes.len());
            // Where the zeros the file ends with begin.
            let zeros = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            let sector = zeros.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
            if zeros <= at || sector < end {
                Some(format!(
                    "{why}, and zeros run from offset {} to the end of the file (a sector \
                     that never reached the disk)",
                    zeros.max(at)
                ))
            } else {
                None
            }
        }
    }
}

/// What is wrong with a segment, before it becomes an [`Error`].
#[derive(Debug)]
enum Damage {
    Header(String),
    Record {
        offset: usize,
        reason: String,
        after: String,
        claimed: Option<Box<Claimed>>,
    },
    Gap {
        offset: usize,
        expected: u64,
        found: u64,
    },
}

impl Damage {
    fn offset(&self) -> usize {
        match self {
            Damage::Header(_) => 0,
            Damage::Record { offset, .. } | Damage::Gap { offset, .. } => *offset,
        }
    }

    fn into_error(self, segment: &str) -> Error {
        let segment = segment.to_string();
        match self {
            Damage::Header(reason) => Error::BadHeader { segment, reason },
            Damage::Record {
                offset,
                reason,
                after,
                claimed,
            } => Error::Corrupt {
                segment,
                offset: offset as u64,
                reason,
                after,
                claimed,
            },
            Damage::Gap {
                offset,
                expected,
                found,
            } => Error::Gap {
                segment,
                offset: offset as u64,
                expected,
                found,
            },
        }
    }
}

/// A segment that checked out.
#[derive(Debug)]
struct Scanned {
    /// Its header's `skipped` count.
    skipped: u64,
    /// Where its valid records end.
    end: usize,
    /// The sequence after its last record.
    next: u64,
    /// A torn tail from `end` on: what was found there.
    torn: Option<String>,
}

/// Checks a whole segment (module docs, Recovery); `expected` is the
/// sequence the log before it ends at (`None` for the first segment).
fn scan_segment(
    bytes: &[u8],
    base: u64,
    expected: Option<u64>,
    newest: bool,
) -> Result<Scanned, Damage> {
    let skipped = check_header(bytes, base).map_err(Damage::Header)?;
    if let Some(expected) = expected
        && base - skipped != expected
    {
        return Err(Damage::Gap {
            offset: 0,
            expected,
            found: base,
        });
    }
    let mut at = SEGMENT_HEADER_BYTES;
    let mut expected = base;
    while at < bytes.len() {
        match parse_record(bytes, at) {
            Ok((record, end)) => {
                if record.sequence != expected {
                    return Err(Damage::Gap {
                        offset: at,
                        expected,
                        found: record.sequence,
                    });
                }
                expected += 1;
                at = end;
            }
            Err(bad) => {
                let after = match find_valid_after(bytes, at + 1, expected) {
                    Some((offset, sequence)) => {
                        format!("a valid record (sequence {sequence}) follows at offset {offset}")
                    }
                    None if !newest => "the segment is not the newest".to_string(),
                    None => match tear(bytes, at, &bad) {
                        Some(torn) => {
                            return Ok(Scanned {
                                skipped,
                                end: at,
                                next: expected,
                                torn: Some(torn),
                            });
                        }
                        None => {
                            "it is the last record, complete: damage, not a torn write".to_string()
                        }
                    },
                };
                return Err(Damage::Record {
                    offset: at,
                    reason: bad.to_string(),
                    after,
                    claimed: claimed_at(bytes, at).map(Box::new),
                });
            }
        }
    }
    Ok(Scanned {
        skipped,
        end: at,
        next: expected,
        torn: None,
    })
}

#[derive(Debug, Clone)]
struct Segment {
    base: u64,
    name: String,
    /// Sequences before `base` the log skips on purpose (module docs,
    /// Layout): the previous segment's records end at `base - skipped`.
    skipped: u64,
}

/// A ticket's outcome: the sequence, or why the log stopped.
type Outcome = Result<u64, Arc<str>>;

#[derive(Debug, Default)]
struct Slot {
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
}

impl Slot {
    fn complete(&self, outcome: Outcome) {
        let mut slot = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        assert!(slot.is_none(), "a ticket completes once");
        *slot = Some(outcome);
        self.done.notify_all();
    }
}

/// A queued record's promise: [`Ticket::wait`] returns its sequence once
/// it is durable.
#[derive(Debug)]
#[must_use = "a record is acknowledged only when its ticket's wait returns Ok"]
pub struct Ticket {
    slot: Arc<Slot>,
}

impl Ticket {
    /// Waits until the record is synced and returns its sequence, or the
    /// error that stopped the log ([`Error::Poisoned`]).
    pub fn wait(self) -> Result<u64, Error> {
        let mut slot = self.slot.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match slot.take() {
                Some(Ok(sequence)) => return Ok(sequence),
                Some(Err(cause)) => {
                    return Err(Error::Poisoned {
                        cause: cause.to_string(),
                    });
                }
                None => slot = self.slot.done.wait(slot).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    /// Whether the outcome is known (`wait` would not block).
    pub fn is_done(&self) -> bool {
        self.slot
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

#[derive(Debug)]
struct Pending {
    source: SourceId,
    batch: BatchId,
    payload: Vec<u8>,
    slot: Arc<Slot>,
}

#[derive(Debug, Clone, PartialEq)]
enum Run {
    Open,
    Closing,
    Poisoned(Arc<str>),
}

#[derive(Debug)]
struct Queue {
    items: VecDeque<Pending>,
    bytes: usize,
    run: Run,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signals the writer: records queued, or closing.
    pushed: Condvar,
    /// Signals producers: room in the queue, or the log stopped.
    room: Condvar,
    segments: Mutex<Vec<Segment>>,
    records: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    rolls: AtomicU64,
    sync_seconds: [AtomicU64; 16],
    sync_micros_sum: AtomicU64,
    sync_records: [AtomicU64; 14],
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding it; a poisoned lock still holds a
        // consistent queue.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn segments(&self) -> MutexGuard<'_, Vec<Segment>> {
        self.segments.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The write-ahead log: see the module docs.
#[derive(Debug)]
pub struct Wal {
    dir: Arc<dyn Dir>,
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    /// Replay reads no further than what opening found.
    recovered_next: u64,
}

impl Wal {
    /// Opens the log in `dir` (creating it when the directory holds no
    /// segment), checks it, cuts a torn tail or refuses damage (or repairs
    /// it), and starts the writer thread.
    pub fn open(dir: Arc<dyn Dir>, options: WalOptions) -> Result<(Wal, Recovery), Error> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&options.segment_bytes) {
            return Err(Error::Option {
                name: "segment_bytes",
                value: options.segment_bytes,
                min: SEGMENT_BYTES_MIN,
                max: SEGMENT_BYTES_MAX,
            });
        }
        let Recovered {
            segments,
            next,
            active_len,
            cut,
            repaired,
            moved,
        } = recover(dir.as_ref(), options)?;
        let active = segments.last().expect("recovery leaves a segment").clone();
        let file = dir
            .open_append(&active.name)
            .map_err(|e| Error::io("open", &active.name, e))?;
        let recovery = Recovery {
            segments: segments.len(),
            first_sequence: segments[0].base,
            next_sequence: next,
            cut,
            repaired,
            moved,
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                bytes: 0,
                run: Run::Open,
            }),
            pushed: Condvar::new(),
            room: Condvar::new(),
            segments: Mutex::new(segments),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            rolls: AtomicU64::new(0),
            sync_seconds: Default::default(),
            sync_micros_sum: AtomicU64::new(0),
            sync_records: Default::default(),
        });
        let writer = Writer {
            dir: Arc::clone(&dir),
            shared: Arc::clone(&shared),
            file,
            segment_len: u64::try_from(active_len).expect("usize fits u64"),
            segment_bytes: options.segment_bytes,
            next,
            buf: Vec::new(),
        };
        let handle = std::thread::Builder::new()
            .name("wal-writer".to_string())
            .spawn(move || writer.run())
            .map_err(|e| Error::io("spawn the writer thread", "", e))?;
        let wal = Wal {
            dir,
            shared,
            writer: Some(handle),
            recovered_next: next,
        };
        Ok((wal, recovery))
    }

    /// Whether a record of `payload_bytes` would be queued now without
    /// waiting (the queue has room, or is empty). A caller that is the
    /// log's only appender (the server appends under one lock) checks
    /// this first so that [`Wal::append`] never waits on an async
    /// runtime's thread: room only grows until its next append.
    pub fn has_room(&self, payload_bytes: usize) -> bool {
        let queue = self.shared.queue();
        queue.items.is_empty()
            || (queue.items.len() < QUEUE_RECORDS_MAX
                && queue.bytes + payload_bytes <= QUEUE_BYTES_MAX)
    }

    /// Queues a record and returns its ticket; waits while the queue is
    /// full. Fails at once if the log is poisoned or closed, or the
    /// payload is over [`RECORD_PAYLOAD_BYTES_MAX`].
    pub fn append(
        &self,
        source: SourceId,
        batch: BatchId,
        payload: Vec<u8>,
    ) -> Result<Ticket, Error> {
        if payload.len() > RECORD_PAYLOAD_BYTES_MAX {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: RECORD_PAYLOAD_BYTES_MAX,
            });
        }
        let mut queue = self.shared.queue();
        loop {
            match &queue.run {
                Run::Poisoned(cause) => {
                    return Err(Error::Poisoned {
                        cause: cause.to_string(),
                    });
                }
                Run::Closing => return Err(Error::Closed),
                Run::Open => {}
            }
            let fits = queue.items.len() < QUEUE_RECORDS_MAX
                && queue.bytes + payload.len() <= QUEUE_BYTES_MAX;
            // An empty queue takes any record, so one as large as the limit
            // cannot wait forever.
            if fits || queue.items.is_empty() {
                break;
            }
            queue = self
                .shared
                .room
                .wait(queue)
                .unwrap_or_else(|p| p.into_inner());
        }
        let slot = Arc::new(Slot::default());
        queue.bytes += payload.len();
        queue.items.push_back(Pending {
            source,
            batch,
            payload,
            slot: Arc::clone(&slot),
        });
        drop(queue);
        self.shared.pushed.notify_one();
        Ok(Ticket { slot })
    }

    /// Calls `each` with every record after sequence `after`, in order, up
    /// to the end of the log as opening found it; returns how many. Call it
    /// before appending: records appended since opening are not read.
    ///
    /// Fails with [`Error::ReplayGap`] when records after `after` were
    /// already removed, and with [`Error::Corrupt`] if a segment changed
    /// under it since opening.
    pub fn replay(&self, after: u64, mut each: impl FnMut(Record<'_>)) -> Result<u64, Error> {
        let segments = self.shared.segments().clone();
        // A first segment that skips sequences holds the log from before
        // them: nothing between is missing by accident.
        let first = segments[0].base - segments[0].skipped;
        if after.saturating_add(1) < first {
            return Err(Error::ReplayGap { after, first });
        }
        let mut count = 0;
        let mut expected = after.saturating_add(1);
        // One buffer for every segment: fresh pages are touched once.
        let mut bytes = Vec::new();
        for (i, segment) in segments.iter().enumerate() {
            // Where its records end: the next segment's base, less what
            // that one skips; no further than opening found.
            let end = segments
                .get(i + 1)
                .map_or(self.recovered_next, |s| s.base - s.skipped)
                .min(self.recovered_next);
            if end <= expected || segment.base >= self.recovered_next {
                continue;
            }
            self.dir
                .read_into(&segment.name, &mut bytes)
                .map_err(|e| Error::io("read", &segment.name, e))?;
            let mut at = SEGMENT_HEADER_BYTES;
            let mut sequence = segment.base;
            while sequence < end {
                let (record, next) = parse_record(&bytes, at).map_err(|bad| Error::Corrupt {
                    segment: segment.name.clone(),
                    offset: at as u64,
                    reason: bad.to_string(),
                    after: "the segment changed since the log was opened".to_string(),
                    claimed: claimed_at(&bytes, at).map(Box::new),
                })?;
                if record.sequence != sequence {
                    return Err(Error::Gap {
                        segment: segment.name.clone(),
                        offset: at as u64,
                        expected: sequence,
                        found: record.sequence,
                    });
                }
                if sequence >= expected {
                    each(record);
                    count += 1;
                    expected = sequence + 1;
                }
                sequence += 1;
                at = next;
            }
        }
        Ok(count)
    }

    /// Deletes the segments whose records are all at or below `sequence`
    /// (never the newest) and syncs the directory; returns how many were
    /// deleted. Call it once a snapshot covering `sequence` is durable.
    pub fn remove_through(&self, sequence: u64) -> Result<usize, Error> {
        let mut segments = self.shared.segments();
        let mut removed = 0;
        // Segment 0's records end just below segment 1's base.
        while segments.len() > 1 && segments[1].base <= sequence.saturating_add(1) {
            let name = segments[0].name.clone();
            self.dir
                .remove(&name)
                .map_err(|e| Error::io("remove", &name, e))?;
            segments.remove(0);
            removed += 1;
        }
        if removed > 0 {
            self.dir
                .sync_dir()
                .map_err(|e| Error::io("sync_dir", "", e))?;
        }
        Ok(removed)
    }

    /// The segments' file names, oldest first.
    pub fn segments(&self) -> Vec<String> {
        self.shared
            .segments()
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// Counters since opening.
    pub fn stats(&self) -> WalStats {
        WalStats {
            records: self.shared.records.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
            syncs: self.shared.syncs.load(Ordering::Relaxed),
            rolls: self.shared.rolls.load(Ordering::Relaxed),
            sync_seconds: std::array::from_fn(|i| {
                self.shared.sync_seconds[i].load(Ordering::Relaxed)
            }),
            sync_micros_sum: self.shared.sync_micros_sum.load(Ordering::Relaxed),
            sync_records: std::array::from_fn(|i| {
                self.shared.sync_records[i].load(Ordering::Relaxed)
            }),
        }
    }

    /// Writes what is queued, stops the writer and reports whether the
    /// log was poisoned.
    pub fn close(mut self) -> Result<(), Error> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), Error> {
        {
            let mut queue = self.shared.queue();
            if queue.run == Run::Open {
                queue.run = Run::Closing;
            }
        }
        self.shared.pushed.notify_all();
        self.shared.room.notify_all();
        if let Some(handle) = self.writer.take() {
            // The writer catches its own failures; a panic there is a bug.
            handle.join().expect("the WAL writer thread does not panic");
        }
        match &self.shared.queue().run {
            Run::Poisoned(cause) => Err(Error::Poisoned {
                cause: cause.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // `close` reports the outcome; dropping cannot.
        let _ = self.stop();
    }
}

/// What [`recover`] leaves.
struct Recovered {
    segments: Vec<Segment>,
    next: u64,
    /// The active (newest) segment's length.
    active_len: usize,
    cut: Option<Cut>,
    repaired: Option<Repair>,
    moved: Option<Moved>,
}

/// Checks every segment in order (module docs, Recovery).
fn recover(dir: &dyn Dir, options: WalOptions) -> Result<Recovered, Error> {
    let names = dir.list().map_err(|e| Error::io("list", "", e))?;
    let taken: BTreeSet<String> = names.iter().cloned().collect();
    let mut found: Vec<Segment> = names
        .into_iter()
        .filter_map(|name| {
            parse_segment_name(&name).map(|base| Segment {
                base,
                name,
                skipped: 0,
            })
        })
        .collect();
    found.sort_by_key(|s| s.base);
    let mut kept: Vec<Segment> = Vec::new();
    let mut next: Option<u64> = None;
    let mut active_len = SEGMENT_HEADER_BYTES;
    let mut cut = None;
    let mut salvage: Option<Salvage> = None;
    let count = found.len();
    // One buffer for every segment: fresh pages are touched once.
    let mut bytes = Vec::new();
    for (i, segment) in found.iter().enumerate() {
        let newest = i + 1 == count;
        dir.read_uncached_into(&segment.name, &mut bytes)
            .map_err(|e| Error::io("read", &segment.name, e))?;
        if newest
            && bytes.len() <= SEGMENT_HEADER_BYTES
            && check_header(&bytes, segment.base).is_err()
        {
            // Created but its header never synced: nothing in it was acknowledged.
            dir.remove(&segment.name)
                .map_err(|e| Error::io("remove", &segment.name, e))?;
            dir.sync_dir().map_err(|e| Error::io("sync_dir", "", e))?;
            cut = Some(Cut {
                segment: segment.name.clone(),
                offset: 0,
                bytes: bytes.len() as u64,
                reason: "a new segment whose header was never synced; removed".to_string(),
            });
            next = next.or(Some(segment.base));
            break;
        }
        match scan_segment(&bytes, segment.base, next, newest) {
            Ok(scanned) => {
                if let Some(reason) = scanned.torn {
                    dir.truncate(&segment.name, scanned.end as u64)
                        .map_err(|e| Error::io("truncate", &segment.name, e))?;
                    // Durable before anything is appended, to this segment
                    // or to one a move forward starts.
                    dir.open_append(&segment.name)
                        .and_then(|mut file| file.sync_data())
                        .map_err(|e| Error::io("sync_data", &segment.name, e))?;
                    cut = Some(Cut {
                        segment: segment.name.clone(),
                        offset: scanned.end as u64,
                        bytes: (bytes.len() - scanned.end) as u64,
                        reason,
                    });
                }
                if let Some(salvage) = salvage.as_mut() {
                    // Damaged bytes before a segment that continues the
                    // log held no missing sequence.
                    salvage.pending = None;
                }
                next = Some(scanned.next);
                active_len = scanned.end;
                kept.push(Segment {
                    skipped: scanned.skipped,
                    ..segment.clone()
                });
            }
            Err(damage) => {
                if !options.repair {
                    return Err(damage.into_error(&segment.name));
                }
                let offset = damage.offset();
                let salvage = salvage.get_or_insert_with(|| Salvage::new(&segment.name, damage));
                // Sequences start at 1, whatever a file name says.
                let expected = next.unwrap_or(segment.base).max(1);
                let done = salvage_segment(
                    dir,
                    &Damaged {
                        segment,
                        bytes: &bytes,
                        offset,
                        expected,
                        newest,
                    },
                    salvage,
                    &taken,
                )?;
                next = Some(done.next);
                if let Some(last) = done.segments.last() {
                    active_len = done.active_len;
                    assert!(kept.last().is_none_or(|k| k.base < last.base));
                }
                kept.extend(done.segments);
                if done.cut.is_some() {
                    cut = done.cut;
                }
            }
        }
    }
    let repaired = salvage.map(Salvage::finish);
    let mut next = next.unwrap_or(1);
    let mut moved = None;
    if kept.is_empty() || next < options.next_sequence_min {
        // A new log, or one moved forward (module docs, Moving forward).
        let base = next.max(options.next_sequence_min);
        let skipped = u32::try_from(base - next).map_err(|_| Error::Option {
            name: "next_sequence_min",
            value: options.next_sequence_min,
            min: 1,
            max: next.saturating_add(u64::from(u32::MAX)),
        })?;
        let name = segment_name(base);
        let mut file = dir
            .create(&name)
            .map_err(|e| Error::io("create", &name, e))?;
        file.append(&encode_header(base, skipped))
            .map_err(|e| Error::io("append", &name, e))?;
        file.sync_data()
            .map_err(|e| Error::io("sync_data", &name, e))?;
        dir.sync_dir().map_err(|e| Error::io("sync_dir", "", e))?;
        if skipped > 0 {
            moved = Some(Moved {
                from: next,
                to: base,
                segment: name.clone(),
            });
        }
        kept.push(Segment {
            base,
            name,
            skipped: u64::from(skipped),
        });
        next = base;
        active_len = SEGMENT_HEADER_BYTES;
    }
    Ok(Recovered {
        segments: kept,
        next,
        active_len,
        cut,
        repaired,
        moved,
    })
}

/// A repair under way over the segments that failed their checks
/// (module docs, Recovery).
struct Salvage {
    repair: Repair,
    /// Damaged bytes passed over, whose missing sequences the next kept
    /// record tells (`last` is set then).
    pending: Option<Lost>,
    /// Whether the pending bytes' claimed lengths walk exactly to their
    /// end, so `claimed` counts their records.
    pending_exact: bool,
}

impl Salvage {
    fn new(segment: &str, damage: Damage) -> Salvage {
        let offset = damage.offset() as u64;
        Salvage {
            repair: Repair {
                segment: segment.to_string(),
                offset,
                copy: None,
                copies: Vec::new(),
                written: Vec::new(),
                salvaged: 0,
                lost: Vec::new(),
                stale: 0,
                reason: damage.into_error(segment).to_string(),
            },
            pending: None,
            pending_exact: false,
        }
    }

    /// Damaged bytes at `offset..until` of `segment`, passed over.
    fn pass_over(
        &mut self,
        segment: &str,
        bytes: &[u8],
        offset: usize,
        until: usize,
        expected: u64,
    ) {
        let (claims, exact) = claims_between(bytes, offset, until);
        match self.pending.as_mut() {
            Some(pending) => {
                pending.bytes += (until - offset) as u64;
                let room = CLAIMED_PER_LOSS_MAX - pending.claimed.len();
                pending.claimed.extend(claims.into_iter().take(room));
                self.pending_exact &= exact;
            }
            None => {
                self.pending = Some(Lost {
                    first: expected,
                    last: None,
                    segment: segment.to_string(),
                    offset: offset as u64,
                    bytes: (until - offset) as u64,
                    claimed: claims,
                });
                self.pending_exact = exact;
            }
        }
    }

    /// A kept record at `sequence` when `expected` was next: the missing
    /// range before it, if any, is lost.
    fn resume(&mut self, segment: &str, offset: usize, expected: u64, sequence: u64) {
        assert!(sequence >= expected);
        let pending = self.pending.take();
        if sequence == expected {
            return;
        }
        let mut lost = pending.unwrap_or_else(|| Lost {
            first: expected,
            last: None,
            segment: segment.to_string(),
            offset: offset as u64,
            bytes: 0,
            claimed: Vec::new(),
        });
        assert_eq!(lost.first, expected, "nothing was kept since the damage");
        lost.last = Some(sequence - 1);
        self.repair.lost.push(lost);
    }

    fn finish(mut self) -> Repair {
        if let Some(mut lost) = self.pending.take() {
            // Damage at the end of the log: its claimed lengths say how
            // many records it held when they walk exactly to its end.
            if self.pending_exact && !lost.claimed.is_empty() {
                lost.last = Some(lost.first + lost.claimed.len() as u64 - 1);
            }
            self.repair.lost.push(lost);
        }
        self.repair.copy = self.repair.copies.first().cloned();
        self.repair
    }
}

/// A segment that failed its checks, for [`salvage_segment`].
struct Damaged<'a> {
    segment: &'a Segment,
    bytes: &'a [u8],
    /// Where its damage starts (names the copy).
    offset: usize,
    /// The sequence the log before it ends at.
    expected: u64,
    newest: bool,
}

/// What [`salvage_segment`] leaves.
struct Salvaged {
    segments: Vec<Segment>,
    next: u64,
    active_len: usize,
    cut: Option<Cut>,
}

/// Keeps every record of a damaged segment whose checksum holds and whose
/// sequence continues the log, in runs of consecutive sequences, each
/// written as a segment; copies the damaged one aside (module docs,
/// Recovery).
fn salvage_segment(
    dir: &dyn Dir,
    damaged: &Damaged<'_>,
    salvage: &mut Salvage,
    taken: &BTreeSet<String>,
) -> Result<Salvaged, Error> {
    let Damaged {
        segment,
        bytes,
        offset,
        newest,
        ..
    } = *damaged;
    let name = &segment.name;
    // A valid header's skip was decided before: not a loss.
    let deliberate = match check_header(bytes, segment.base) {
        Ok(skipped) if segment.base - skipped == damaged.expected => skipped,
        _ => 0,
    };
    // Runs of consecutive records: first sequence, skipped, record bytes.
    let mut runs: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    let mut expected = damaged.expected;
    let mut at = SEGMENT_HEADER_BYTES.min(bytes.len());
    let mut cut = None;
    while at < bytes.len() {
        match parse_record(bytes, at) {
            Ok((record, end)) => {
                if record.sequence < expected {
                    salvage.repair.stale += 1;
                    at = end;
                    continue;
                }
                let gap = record.sequence - expected;
                if gap > u64::from(u32::MAX) {
                    // No log skips that far: a record's bytes that happen to
                    // check out (or forged ones) are passed over as damage.
                    salvage.pass_over(name, bytes, at, end, expected);
                    at = end;
                    continue;
                }
                let planned =
                    runs.is_empty() && record.sequence == segment.base && gap == deliberate;
                if !planned {
                    salvage.resume(name, at, expected, record.sequence);
                } else {
                    salvage.pending = None;
                }
                if runs.is_empty() || gap > 0 {
                    runs.push((record.sequence, gap, Vec::new()));
                }
                let run = runs.last_mut().expect("a run was started");
                run.2.extend_from_slice(&bytes[at..end]);
                salvage.repair.salvaged += 1;
                expected = record.sequence + 1;
                at = end;
            }
            Err(bad) => {
                let resume = find_valid_after(bytes, at + 1, expected);
                if resume.is_none()
                    && newest
                    && let Some(reason) = tear(bytes, at, &bad)
                {
                    cut = Some(Cut {
                        segment: name.clone(),
                        offset: at as u64,
                        bytes: (bytes.len() - at) as u64,
                        reason,
                    });
                    break;
                }
                let until = resume.map_or(bytes.len(), |(offset, _)| offset);
                salvage.pass_over(name, bytes, at, until, expected);
                at = until;
            }
        }
    }
    let copy = format!("{name}.damaged-at-{offset}");
    let mut file = dir
        .create(&copy)
        .map_err(|e| Error::io("create", &copy, e))?;
    file.append(bytes)
        .map_err(|e| Error::io("append", &copy, e))?;
    file.sync_data()
        .map_err(|e| Error::io("sync_data", &copy, e))?;
    let mut renames = Vec::with_capacity(runs.len());
    let mut segments = Vec::with_capacity(runs.len());
    for (first, skipped, records) in &runs {
        let target = segment_name(*first);
        if &target != name && taken.contains(&target) {
            return Err(Error::io(
                "repair",
                &target,
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("records salvaged from {name} would replace this segment"),
                ),
            ));
        }
        let skipped32 = u32::try_from(*skipped).expect("longer gaps are passed over as damage");
        let temp = format!("{target}.repair");
        let mut file = dir
            .create(&temp)
            .map_err(|e| Error::io("create", &temp, e))?;
        file.append(&encode_header(*first, skipped32))
            .map_err(|e| Error::io("append", &temp, e))?;
        file.append(records)
            .map_err(|e| Error::io("append", &temp, e))?;
        file.sync_data()
            .map_err(|e| Error::io("sync_data", &temp, e))?;
        renames.push((temp, target.clone()));
        segments.push(Segment {
            base: *first,
            name: target,
            skipped: *skipped,
        });
    }
    // The copy and the new segments are durable before the damaged
    // segment's name changes.
    dir.sync_dir().map_err(|e| Error::io("sync_dir", "", e))?;
    if !renames.iter().any(|(_, target)| target == name) {
        dir.remove(name).map_err(|e| Error::io("remove", name, e))?;
    }
    for (temp, target) in &renames {
        dir.rename(temp, target)
            .map_err(|e| Error::io("rename", temp, e))?;
    }
    dir.sync_dir().map_err(|e| Error::io("sync_dir", "", e))?;
    salvage.repair.copies.push(copy);
    salvage
        .repair
        .written
        .extend(segments.iter().map(|s| s.name.clone()));
    let active_len = runs.last().map_or(SEGMENT_HEADER_BYTES, |run| {
        SEGMENT_HEADER_BYTES + run.2.len()
    });
    Ok(Salvaged {
        segments,
        next: expected,
        active_len,
        cut,
    })
}

/// The writer thread's state (module docs, Group commit).
struct Writer {
    dir: Arc<dyn Dir>,
    shared: Arc<Shared>,
    file: Box<dyn DirFile>,
    segment_len: u64,
    segment_bytes: u64,
    next: u64,
    buf: Vec<u8>,
}

impl Writer {
    fn run(mut self) {
        let mut turn: VecDeque<Pending> = VecDeque::new();
        loop {
            {
                let mut queue = self.shared.queue();
                while queue.items.is_empty() && queue.run == Run::Open {
                    queue = self
                        .shared
                        .pushed
                        .wait(queue)
                        .unwrap_or_else(|p| p.into_inner());
                }
                if queue.items.is_empty() {
                    return;
                }
                std::mem::swap(&mut turn, &mut queue.items);
                queue.bytes = 0;
            }
            self.shared.room.notify_all();
            let first = self.next;
            // A panic in a write poisons the log as a failed write does:
            // every waiting ticket is told, none waits on a thread gone.
            let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.write(&turn).map_err(|e| e.to_string())
            }))
            .unwrap_or_else(|_| Err("the log's writer thread panicked".to_owned()));
            match written {
                Ok(()) => {
                    for (pending, sequence) in turn.drain(..).zip(first..) {
                        pending.slot.complete(Ok(sequence));
                    }
                }
                Err(cause) => {
                    let cause: Arc<str> = Arc::from(cause);
                    let mut queue = self.shared.queue();
                    queue.run = Run::Poisoned(Arc::clone(&cause));
                    for pending in turn.drain(..).chain(queue.items.drain(..)) {
                        pending.slot.complete(Err(Arc::clone(&cause)));
                    }
                    queue.bytes = 0;
                    drop(queue);
                    self.shared.room.notify_all();
                    return;
                }
            }
        }
    }

    /// Writes and syncs one turn's records, rolling segments as needed.
    fn write(&mut self, turn: &VecDeque<Pending>) -> Result<(), Error> {
        self.buf.clear();
        for pending in turn {
            let record_len = (RECORD_HEADER_BYTES + pending.payload.len()) as u64;
            let pending_len = self.buf.len() as u64;
            let holds_records = self.segment_len + pending_len > SEGMENT_HEADER_BYTES as u64;
            if holds_records && self.segment_len + pending_len + record_len > self.segment_bytes {
                self.flush()?;
                self.roll()?;
            }
            encode_record(
                &mut self.buf,
                self.next,
                pending.source,
                pending.batch,
                &pending.payload,
            );
            self.next += 1;
        }
        self.flush()?;
        self.shared
            .records
            .fetch_add(turn.len() as u64, Ordering::Relaxed);
        let n = turn.len() as u64;
        let bucket = SYNC_RECORDS_BUCKETS
            .iter()
            .position(|&le| n <= le)
            .unwrap_or(SYNC_RECORDS_BUCKETS.len());
        self.shared.sync_records[bucket].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Appends and syncs the buffered records to the active segment.
    fn flush(&mut self) -> Result<(), Error> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let name = self.active_name();
        self.file
            .append(&self.buf)
            .map_err(|e| Error::io("append", &name, e))?;
        let started = std::time::Instant::now();
        self.file
            .sync_data()
            .map_err(|e| Error::io("sync_data", &name, e))?;
        let took = started.elapsed();
        let bucket = SYNC_SECONDS_BUCKETS
            .iter()
            .position(|&le| took.as_secs_f64() <= le)
            .unwrap_or(SYNC_SECONDS_BUCKETS.len());
        self.shared.sync_seconds[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.shared
            .sync_micros_sum
            .fetch_add(micros, Ordering::Relaxed);
        let written = self.buf.len() as u64;
        self.segment_len += written;
        self.shared.bytes.fetch_add(written, Ordering::Relaxed);
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        self.buf.clear();
        Ok(())
    }

    /// Starts a new segment at the next sequence; the old one is synced.
    fn roll(&mut self) -> Result<(), Error> {
        assert!(self.buf.is_empty(), "the old segment is flushed first");
        let name = segment_name(self.next);
        let mut file = self
            .dir
            .create(&name)
            .map_err(|e| Error::io("create", &name, e))?;
        file.append(&encode_header(self.next, 0))
            .map_err(|e| Error::io("append", &name, e))?;
        file.sync_data()
            .map_err(|e| Error::io("sync_data", &name, e))?;
        self.dir
            .sync_dir()
            .map_err(|e| Error::io("sync_dir", "", e))?;
        self.file = file;
        self.segment_len = SEGMENT_HEADER_BYTES as u64;
        self.shared.segments().push(Segment {
            base: self.next,
            name,
            skipped: 0,
        });
        self.shared.rolls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn active_name(&self) -> String {
        self.shared
            .segments()
            .last()
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_sort() {
        assert_eq!(segment_name(1), "wal-00000000000000000001.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("wal-1.log"), None);
        assert_eq!(
            parse_segment_name("wal-00000000000000000001.log.set-aside"),
            None
        );
        assert!(segment_name(9) < segment_name(10));
    }

    #[test]
    fn a_record_round_trips_and_any_flip_is_caught() {
        let mut bytes = Vec::new();
        encode_record(&mut bytes, 7, SourceId(3), BatchId(9), b"hello");
        let (record, end) = parse_record(&bytes, 0).expect("valid");
        assert_eq!(end, bytes.len());
        assert_eq!(
            record,
            Record {
                sequence: 7,
                source: SourceId(3),
                batch: BatchId(9),
                payload: b"hello"
            }
        );
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[i] ^= 1 << bit;
                assert!(parse_record(&flipped, 0).is_err(), "byte {i} bit {bit}");
            }
        }
        for len in 0..bytes.len() {
            assert!(matches!(
                parse_record(&bytes[..len], 0),
                Err(BadRecord::Incomplete(_))
            ));
        }
    }

    #[test]
    fn a_header_checks_magic_version_and_base() {
        let header = encode_header(42, 0);
        assert_eq!(check_header(&header, 42), Ok(0));
        assert_eq!(check_header(&encode_header(42, 41), 42), Ok(41));
        assert!(check_header(&header, 43).is_err());
        assert!(check_header(&header[..31], 42).is_err());
        let mut flipped = header;
        flipped[20] ^= 1;
        assert!(check_header(&flipped, 42).is_err());
    }

    #[test]
    fn a_record_reaching_into_a_zero_sector_is_torn_and_a_short_zero_run_is_not() {
        // The third record spans the first sector boundary of the file.
        let payload = vec![b'x'; 300];
        let bytes = segment(&[(1, &payload), (2, &payload)], 1);
        let second = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + payload.len();
        assert!(second < SECTOR_BYTES && bytes.len() > SECTOR_BYTES);
        // The sector from 512 on never reached the disk: torn.
        let mut unwritten = bytes.clone();
        unwritten[SECTOR_BYTES..].fill(0);
        let scanned = scan_segment(&unwritten, 1, None, true).expect("torn");
        assert_eq!((scanned.end, scanned.next), (second, 2));
        assert!(scanned.torn.expect("torn").contains("zeros"));
        // Zeros from inside a sector only (no whole sector of them): a
        // record the disk wrote, with bad bytes: damage.
        let mut zeroed = bytes.clone();
        let from = bytes.len() - 10;
        zeroed[from..].fill(0);
        assert!(from > SECTOR_BYTES);
        assert!(matches!(
            scan_segment(&zeroed, 1, None, true),
            Err(Damage::Record { offset, .. }) if offset == second
        ));
    }

    fn segment(records: &[(u64, &[u8])], base: u64) -> Vec<u8> {
        let mut bytes = encode_header(base, 0).to_vec();
        for (sequence, payload) in records {
            encode_record(
                &mut bytes,
                *sequence,
                SourceId(1),
                BatchId(*sequence),
                payload,
            );
        }
        bytes
    }

    #[test]
    fn a_torn_tail_is_told_from_damage_in_the_middle() {
        let bytes = segment(&[(5, b"aaaa"), (6, b"bbbb"), (7, b"cccc")], 5);
        let third = SEGMENT_HEADER_BYTES + 2 * (RECORD_HEADER_BYTES + 4);
        // Cut short: torn.
        let scanned = scan_segment(&bytes[..bytes.len() - 1], 5, None, true).expect("torn");
        assert_eq!((scanned.end, scanned.next), (third, 7));
        assert!(scanned.torn.is_some());
        // The same bytes in an older segment: damage.
        assert!(matches!(
            scan_segment(&bytes[..bytes.len() - 1], 5, None, false),
            Err(Damage::Record { offset, .. }) if offset == third
        ));
        // A flip in the middle record: valid records follow, damage.
        let mut flipped = bytes.clone();
        flipped[third - 1] ^= 0x40;
        let second = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 4;
        match scan_segment(&flipped, 5, None, true) {
            Err(Damage::Record { offset, after, .. }) => {
                assert_eq!(offset, second);
                assert!(after.contains(&format!("offset {third}")), "{after}");
            }
            other => panic!("{other:?}"),
        }
        // Zeros after the last record (a size that reached the disk before
        // the data): torn.
        let mut zeros = bytes.clone();
        zeros.resize(bytes.len() + 100, 0);
        let scanned = scan_segment(&zeros, 5, None, true).expect("torn");
        assert_eq!(scanned.end, bytes.len());
        // A flip in the last record, whole: damage, naming what its header
        // claims.
        let mut last = bytes.clone();
        last[third + RECORD_HEADER_BYTES + 1] ^= 0x01;
        match scan_segment(&last, 5, None, true) {
            Err(Damage::Record {
                offset, claimed, ..
            }) => {
                assert_eq!(offset, third);
                let claimed = claimed.expect("a whole header");
                assert_eq!((claimed.sequence, claimed.batch), (7, BatchId(7)));
                assert_eq!(claimed.head, b"cbcc".to_vec());
            }
            other => panic!("{other:?}"),
        }
        // Its length flipped upwards: cut short, but whole with the length
        // the file leaves it: damage.
        let mut long = bytes.clone();
        long[third + 2] ^= 0x01;
        assert!(matches!(
            scan_segment(&long, 5, None, true),
            Err(Damage::Record { offset, .. }) if offset == third
        ));
        // A segment continues the one before it, or says what it skips.
        assert!(matches!(
            scan_segment(&bytes, 5, Some(4), true),
            Err(Damage::Gap { expected: 4, .. })
        ));
        let mut skipping = encode_header(5, 2).to_vec();
        skipping.extend_from_slice(&bytes[SEGMENT_HEADER_BYTES..]);
        assert_eq!(
            scan_segment(&skipping, 5, Some(3), true)
                .expect("skips")
                .skipped,
            2
        );
        // A skipped sequence is a gap, not a tear.
        let gap = segment(&[(5, b"a"), (7, b"b")], 5);
        assert!(matches!(
            scan_segment(&gap, 5, None, true),
            Err(Damage::Gap {
                expected: 6,
                found: 7,
                ..
            })
        ));
    }
}
