//! The one error type of `cardinal-chains`.
//!
//! Every operating error of the crate is a value of [`Error`]: a record or
//! configuration out of range, a named limit reached, an append routed to the
//! wrong owner, snapshot bytes that do not decode, and I/O. Broken invariants
//! are `assert!` failures, not errors (STYLE.md, section 4).

/// What went wrong in a chain-store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is outside the range the store supports.
    #[error("config: {name} = {value} is out of range: {reason}")]
    InvalidConfig {
        /// The field's name as [`crate::Config`] spells it.
        name: &'static str,
        /// The rejected value.
        value: u64,
        /// The supported range, as a phrase.
        reason: &'static str,
    },
    /// A record field is outside what the record encoding can hold.
    #[error("record: {field} = {value} exceeds {max}")]
    InvalidRecord {
        /// The field (`time_ms`, `attrs`).
        field: &'static str,
        /// The rejected value (for `attrs`, its length).
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// A named limit would be exceeded (see the `*_MAX` constants); the
    /// operation changed nothing.
    #[error("limit {limit} = {max} reached (asked for {found})")]
    LimitExceeded {
        /// The name of the constant that sets the limit.
        limit: &'static str,
        /// The limit's value.
        max: u64,
        /// What the operation asked for.
        found: u64,
    },
    /// An operation reached a shard group that does not own the user id;
    /// callers route with [`crate::Router::group_of`].
    #[error("user {user_id} belongs to shard group {owner}, not {group}")]
    WrongGroup {
        /// The user id.
        user_id: u64,
        /// The group that was asked.
        group: u32,
        /// The group that owns the user.
        owner: u32,
    },
    /// The snapshot ends before the structure it describes.
    #[error("snapshot: truncated {part}: need {expected} bytes, have {found}")]
    SnapshotTruncated {
        /// Which part (`header`, `section`, `trailer`).
        part: &'static str,
        /// Bytes the structure asks for.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The snapshot's format version is not one this crate reads.
    #[error("snapshot: unsupported format version {found} (expected {expected})")]
    SnapshotVersion {
        /// The version this crate writes and reads.
        expected: u32,
        /// The version found.
        found: u32,
    },
    /// A checksum in the snapshot does not match its bytes.
    #[error(
        "snapshot: checksum mismatch in {part} {index}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    SnapshotChecksum {
        /// Which part (`header`, `shard`, `trailer`).
        part: &'static str,
        /// The shard index for a shard section, else 0.
        index: u64,
        /// The checksum stored in the snapshot.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The snapshot breaks a rule other than length, version or checksum.
    #[error("snapshot: malformed: {reason}")]
    SnapshotMalformed {
        /// A sentence naming the rule and where it broke.
        reason: String,
    },
    /// The kernel refused the memory for a new arena chunk.
    #[error("arena: could not map {bytes} bytes: {source}")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
        /// The kernel's answer.
        source: std::io::Error,
    },
    /// Reading or writing a snapshot file failed.
    #[error("snapshot: I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
