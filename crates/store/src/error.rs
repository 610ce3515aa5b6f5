//! The one error type of `cardinal-store`.

use std::io;

use crate::wal::Claimed;

/// What went wrong writing, reading or recovering the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file operation failed.
    #[error("{op} {name}: {source}")]
    Io {
        /// What was being done (`append`, `sync_data`, `read`, ...).
        op: &'static str,
        /// The file (or directory) it was done to.
        name: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// An earlier write or sync failed, so the log stopped for good: a
    /// failed `fsync` may have dropped the data while marking it clean,
    /// and a retry could report a success that is not one. Restart and
    /// recover.
    #[error(
        "the write-ahead log stopped after a failed write or sync ({cause}); restart to recover"
    )]
    Poisoned {
        /// The failure that stopped it.
        cause: String,
    },
    /// The log was closed.
    #[error("the write-ahead log is closed")]
    Closed,
    /// A payload larger than `wal::RECORD_PAYLOAD_BYTES_MAX`.
    #[error("a record payload of {len} bytes is over the limit of {max}")]
    PayloadTooLarge {
        /// The payload's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An option is out of its range.
    #[error("{name} = {value} is out of range {min}..={max}")]
    Option {
        /// The option's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The least allowed.
        min: u64,
        /// The most allowed.
        max: u64,
    },
    /// A segment's header is damaged or does not match its file name.
    #[error("WAL segment {segment}: bad header: {reason}")]
    BadHeader {
        /// The segment's file name.
        segment: String,
        /// What is wrong.
        reason: String,
    },
    /// A record that fails its checksum and was not torn by a crash: a
    /// complete one, or one with valid records after it, or one in a
    /// segment that is not the newest (`wal` module docs, Recovery).
    /// `--repair` keeps a copy and salvages every intact record.
    #[error(
        "WAL segment {segment}: damaged record at offset {offset} ({reason}){}; {after}; \
         refusing to open (a repair keeps a copy of the segment and salvages every intact \
         record)",
        claimed_words(.claimed.as_deref())
    )]
    Corrupt {
        /// The segment's file name.
        segment: String,
        /// The byte offset of the bad record in the segment.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// What follows it (a valid record at some offset, or a newer
        /// segment).
        after: String,
        /// What the record's own header claims (unverified), when a whole
        /// header is there.
        claimed: Option<Box<Claimed>>,
    },
    /// A sequence is missing: a valid record or segment does not continue
    /// the sequence before it.
    #[error(
        "WAL segment {segment} at offset {offset}: expected sequence {expected}, found {found}; \
         refusing to open"
    )]
    Gap {
        /// The segment's file name.
        segment: String,
        /// The byte offset of the record (0 for a segment's base).
        offset: u64,
        /// The sequence that should come next.
        expected: u64,
        /// The sequence found.
        found: u64,
    },
    /// `replay` was asked for records after a sequence the log no longer
    /// holds (its segments were removed), so some would be skipped.
    #[error(
        "replay after sequence {after}: the log starts at {first}, records in between are gone"
    )]
    ReplayGap {
        /// The sequence replay was asked to start after.
        after: u64,
        /// The first sequence the log holds.
        first: u64,
    },
    /// A snapshot file is damaged or not a snapshot.
    #[error("snapshot {name}: {reason}")]
    Snapshot {
        /// The file name (empty when decoding bytes with no file).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Snapshot files exist but none of them is valid.
    #[error("no valid snapshot: {}", reasons.join("; "))]
    NoValidSnapshot {
        /// Why each was refused, newest first.
        reasons: Vec<String>,
    },
}

/// `; its header claims sequence N, source S, batch B` for a message.
fn claimed_words(claimed: Option<&Claimed>) -> String {
    claimed.map_or_else(String::new, |c| {
        format!(
            "; its header claims sequence {}, source {}, batch {}, {} payload bytes",
            c.sequence, c.source.0, c.batch.0, c.length
        )
    })
}

impl Error {
    pub(crate) fn io(op: &'static str, name: &str, source: io::Error) -> Error {
        Error::Io {
            op,
            name: name.to_string(),
            source,
        }
    }
}
