//! Routes held back per rollup part and folded a part at a time: the
//! fold order of a large summary.
//!
//! A summary with 1.5M groups (AMPLab Query 2A's IP prefixes) has ~170 MB
//! of index, group records and states. Folded in arrival order, every
//! record misses the cache, and the TLB, three times: the prefetch ring
//! ([`Deferred`](crate::fold::Deferred)) overlaps the misses but cannot
//! remove them. Once such a rollup splits into parts ([`Rollup::parts`],
//! by the top bits of the key hash), a lane instead appends each routed
//! record to the buffer of its part here, and folds them part by part when
//! the worker's lanes together hold [`PENDING_BYTES_MAX`] (the lane holding
//! the most folds, `Fold::bound_pending`) or the worker ends
//! (`Fold::finish`): each part's tables (under 1 MB) are loaded once and
//! stay in the core's cache while thousands of records fold into them. A
//! part about to fold about as many records as it has groups is loaded
//! whole first, in address order ([`Rollup::prefetch_part`]), which
//! streams instead of missing record by record; it is also asked for a few
//! lines per record while the part before it folds
//! ([`Rollup::prefetch_part_lines`]), so that its lines come from memory
//! during those folds, not behind its own first probes (Query 2A from
//! Parquet: -10% of engine time, bench/JOURNAL.md, "Query 2A's held path
//! slimmed: Parquet at DuckDB's speed with one worker"). A held record
//! folds by `Rollup::fold_held`, without the last-fold comparison. (The
//! radix-partitioned aggregation of DuckDB and ClickHouse's two-level
//! tables, kept streaming and bounded; bench/JOURNAL.md, "Folding a part
//! at a time".)
//!
//! The buffers are written in order, in place: a record whose key is at
//! most 16 bytes in fixed-size stores (`PartBuffer::push_short`), a longer
//! one out of line. Each append loads the line its part's next record will
//! start in, since x86 stores leave the core in order and one store waiting
//! for its line held every later one.
//!
//! What is folded does not change: one group's records are in one part's
//! buffer in arrival order, so each group folds exactly its records in
//! order; only groups interleave differently. The lane holds records back
//! only while that cannot change which groups open (the group limit cannot
//! be reached by what it holds) and when no aggregate reads text
//! (`topk` keeps names). Under a retention window each record is admitted
//! or dropped when it is held, in arrival order ([`Rollup::admit`]), and
//! the held records fold before the lane evicts expired groups.
//!
//! A held record is encoded as
//!
//! ```text
//!   | key hash u64 | head u8 | key length u8 (255: then u32) | [bucket i64] |
//!   | per argument: tag u8, value u64 | key bytes |
//! ```
//!
//! little-endian, back to back in its part's buffer. The head's top bit
//! says whether a bucket follows (a bucket of 0, or none, is not written),
//! its low bits count the arguments. Query 2A's records (a 13-byte key:
//! the text tag, its length and an 8-byte IP prefix; one number; no
//! bucket) take 32 bytes; with a fixed 24-byte header they took 46, and
//! writing them is most of the cost of holding them back.

use cardinal_event::Timestamp;
use cardinal_event::bytes::{prefetch, short_words};
use cardinal_rollup::{KeyHash, Rollup};
use cardinal_route::{Arg, Routed};

use crate::plan::AGGREGATES_MAX;

/// Bytes of records one worker holds back, all lanes together, before the
/// lane holding the most folds them (about 1.5M records of Query 2A).
/// Query 2A ran as fast with 32 MiB as with 256 MiB (bench/JOURNAL.md,
/// "Shorter output and held-record paths"): what counts is that one
/// part's records fold together, while its tables are in the cache and
/// the TLB's reach, not how many. 64 MiB holds 126 MB less per worker than
/// 256 did.
pub(crate) const PENDING_BYTES_MAX: usize = 64 << 20;

/// The first size of each of `parts` part buffers: its share of
/// [`PENDING_BYTES_MAX`] and an eighth more. Records spread over the parts
/// by their key hash, and the lanes fold when they hold the bound or up to
/// a batch more (Parquet: 4 MB, 6% of it), so a buffer of exactly its
/// share overflowed at about every other part and was copied into one
/// twice its size: fresh pages zeroed and faulted in, a seventh of Query
/// 2A's page faults.
fn part_bytes(parts: usize) -> usize {
    PENDING_BYTES_MAX / parts * 9 / 8
}

/// How many held records ahead of the fold a drain loads the index slot;
/// the group record and states are loaded halfway.
const DRAIN_PREFETCH_DEPTH: usize = 8;

/// How far past its end a part's buffer is loaded after each record.
const WRITE_AHEAD_BYTES: usize = 64;

/// Bytes of a held record's hash and head byte.
const HASH_HEAD_BYTES: usize = 9;

/// The head bit saying a bucket follows the key length.
const HEAD_BUCKET: u8 = 0x80;

/// A key length byte saying a u32 length follows.
const LONG_KEY: u8 = 0xff;

/// Bytes of one held argument: tag, value.
const ARG_BYTES: usize = 9;

/// Records held back, one buffer per part of the lane's rollup.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    parts: Vec<PartBuffer>,
    rows: usize,
    bytes: usize,
    /// Decoded arguments of the record being folded (reused).
    args: Vec<Arg>,
}

/// One part's held records: `bytes[..end]`, then room that the next
/// records are written into in place (no staging copy on the stack,
/// whose narrow stores a wide reload would wait on).
#[derive(Debug)]
struct PartBuffer {
    bytes: Vec<u8>,
    end: usize,
    /// Records held.
    rows: usize,
}

impl PartBuffer {
    fn new(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            end: 0,
            rows: 0,
        }
    }

    /// The `len` bytes after the held records, growing the buffer if they
    /// do not fit.
    #[inline]
    fn room(&mut self, len: usize) -> &mut [u8] {
        if self.bytes.len() < self.end + len {
            let grown = (self.bytes.len() * 2).max(self.end + len);
            self.bytes.resize(grown, 0);
        }
        &mut self.bytes[self.end..self.end + len]
    }

    fn held(&self) -> &[u8] {
        &self.bytes[..self.end]
    }

    /// Appends a record whose key is at most 16 bytes (`words`, from
    /// [`short_words`]): written in place as fixed-size words, the key's
    /// two whatever its length (what they write past the key is the next
    /// record's room). Returns the record's length.
    #[inline(always)]
    fn push_short(
        &mut self,
        hash: KeyHash,
        bucket: Timestamp,
        key_len: usize,
        words: [u64; 2],
        args: &[Arg],
    ) -> usize {
        debug_assert!(key_len <= 16 && args.len() <= AGGREGATES_MAX);
        let bucketed = bucket.0 != 0;
        let header = HASH_HEAD_BYTES + 1 + if bucketed { 8 } else { 0 };
        let at = header + args.len() * ARG_BYTES;
        let row = self.room(at + 16);
        let (fixed, rest) = row.split_at_mut(HASH_HEAD_BYTES + 1);
        fixed[..8].copy_from_slice(&hash.bits().to_le_bytes());
        fixed[8] = head(bucket, args);
        #[expect(clippy::cast_possible_truncation, reason = "at most 16")]
        let short_len = key_len as u8;
        fixed[9] = short_len;
        let rest = if bucketed {
            let (bucket_bytes, rest) = rest.split_at_mut(8);
            bucket_bytes.copy_from_slice(&bucket.0.to_le_bytes());
            rest
        } else {
            rest
        };
        let (fields, key) = rest.split_at_mut(args.len() * ARG_BYTES);
        write_args(fields, args);
        key[..8].copy_from_slice(&words[0].to_le_bytes());
        key[8..16].copy_from_slice(&words[1].to_le_bytes());
        let len = at + key_len;
        self.end += len;
        self.rows += 1;
        len
    }

    /// Appends a record whose key is longer than 16 bytes. Returns the
    /// record's length.
    #[inline(never)]
    fn push_long(&mut self, hash: KeyHash, bucket: Timestamp, key: &[u8], args: &[Arg]) -> usize {
        let key_len = key.len();
        let long_key = key_len >= usize::from(LONG_KEY);
        let header =
            HASH_HEAD_BYTES + if long_key { 5 } else { 1 } + if bucket.0 == 0 { 0 } else { 8 };
        let at = header + args.len() * ARG_BYTES;
        let len = at + key_len;
        let row = self.room(len);
        row[0..8].copy_from_slice(&hash.bits().to_le_bytes());
        row[8] = head(bucket, args);
        let mut next = if long_key {
            row[9] = LONG_KEY;
            let key_len = u32::try_from(key_len).expect("key within KEY_BYTES_MAX");
            row[10..14].copy_from_slice(&key_len.to_le_bytes());
            14
        } else {
            #[expect(clippy::cast_possible_truncation, reason = "below LONG_KEY")]
            let short_len = key_len as u8;
            row[9] = short_len;
            10
        };
        if bucket.0 != 0 {
            row[next..next + 8].copy_from_slice(&bucket.0.to_le_bytes());
            next += 8;
        }
        debug_assert_eq!(next, header);
        write_args(&mut row[header..at], args);
        row[at..].copy_from_slice(key);
        self.end += len;
        self.rows += 1;
        len
    }
}

/// A held record's head byte: its argument count, and whether a bucket
/// follows the key length.
#[inline(always)]
fn head(bucket: Timestamp, args: &[Arg]) -> u8 {
    debug_assert!(args.len() <= AGGREGATES_MAX);
    #[expect(clippy::cast_possible_truncation, reason = "at most AGGREGATES_MAX")]
    let count = args.len() as u8;
    if bucket.0 == 0 {
        count
    } else {
        count | HEAD_BUCKET
    }
}

/// Writes `args` into `fields`, [`ARG_BYTES`] each: tag, then value.
#[inline(always)]
fn write_args(fields: &mut [u8], args: &[Arg]) {
    for (arg, field) in args.iter().zip(fields.chunks_exact_mut(ARG_BYTES)) {
        let (tag, value) = encode(arg);
        field[0] = tag;
        field[1..].copy_from_slice(&value.to_le_bytes());
    }
}

/// A held record, read from a part's buffer.
struct Held<'b> {
    hash: KeyHash,
    bucket: Timestamp,
    args: &'b [u8],
    key: &'b [u8],
}

impl Pending {
    /// Records held.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of the records held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `routed` back in the buffer of the part of `rollup` its key
    /// belongs to.
    pub(crate) fn push(&mut self, rollup: &Rollup, routed: &Routed) {
        let bucket = routed.bucket.unwrap_or(Timestamp(0));
        let hash = KeyHash::of(bucket, &routed.key);
        self.push_key(rollup, hash, bucket, &routed.key, &routed.args);
    }

    /// Holds back the record of (`bucket`, `key`), whose [`KeyHash`] is
    /// `hash`, with its arguments `args`, in the buffer of its part.
    /// Always inlined: the short record's path is a few stores, and as a
    /// call its arguments and registers went through the stack.
    #[inline(always)]
    pub(crate) fn push_key(
        &mut self,
        rollup: &Rollup,
        hash: KeyHash,
        bucket: Timestamp,
        key: &[u8],
        args: &[Arg],
    ) {
        debug_assert_eq!(hash, KeyHash::of(bucket, key));
        match short_words(key) {
            Some(words) => self.push_words(rollup, hash, bucket, words, key.len(), args),
            None => {
                assert!(args.len() <= AGGREGATES_MAX, "arguments of one summary");
                let at = self.part_for(rollup, hash);
                let len = self.parts[at].push_long(hash, bucket, key, args);
                self.pushed(at, len);
            }
        }
    }

    /// [`Pending::push_key`] of a key of `len` bytes, at most 16, given
    /// as two little-endian words, zero past them ([`short_words`]), and
    /// its [`KeyHash::of_words`]: for a caller that builds short keys as
    /// words and never writes them out.
    #[inline(always)]
    pub(crate) fn push_words(
        &mut self,
        rollup: &Rollup,
        hash: KeyHash,
        bucket: Timestamp,
        words: [u64; 2],
        len: usize,
        args: &[Arg],
    ) {
        debug_assert_eq!(hash, KeyHash::of_words(bucket, words, len));
        assert!(args.len() <= AGGREGATES_MAX, "arguments of one summary");
        let at = self.part_for(rollup, hash);
        let len = self.parts[at].push_short(hash, bucket, len, words, args);
        self.pushed(at, len);
    }

    /// The part buffer of `hash`'s part of `rollup`.
    #[inline(always)]
    fn part_for(&mut self, rollup: &Rollup, hash: KeyHash) -> usize {
        if self.parts.len() != rollup.parts() {
            self.use_parts(rollup.parts());
        }
        rollup.part_of(hash)
    }

    /// Counts a record of `len` bytes just held in part `at`'s buffer.
    #[inline(always)]
    fn pushed(&mut self, at: usize, len: usize) {
        let part = &self.parts[at];
        // The part's next record comes hundreds of records later: load the
        // line it will start in now, or its stores wait for it then, and
        // stores leave the core in order.
        if let Some(ahead) = part.bytes.get(part.end + WRITE_AHEAD_BYTES) {
            prefetch(ahead);
        }
        self.bytes += len;
        self.rows += 1;
    }

    /// Makes one buffer per part of a rollup of `parts` parts (records
    /// are held only while a rollup's parts do not change).
    #[cold]
    fn use_parts(&mut self, parts: usize) {
        debug_assert_eq!(self.rows, 0, "parts change only while nothing is held");
        self.parts = (0..parts)
            .map(|_| PartBuffer::new(part_bytes(parts)))
            .collect();
    }

    /// Folds every held record into `rollup`, part by part, each through
    /// `fold(rollup, hash, bucket, key, arguments)`, and empties the
    /// buffers (keeping their memory for the next records).
    pub(crate) fn drain(
        &mut self,
        rollup: &mut Rollup,
        mut fold: impl FnMut(&mut Rollup, KeyHash, Timestamp, &[u8], &[Arg]),
    ) {
        if self.rows == 0 {
            return;
        }
        for index in 0..self.parts.len() {
            // The next part with records, if it is to be loaded whole: a
            // few of its lines per record of this one.
            let mut next = self.parts[index + 1..]
                .iter()
                .position(|part| part.rows > 0)
                .and_then(|ahead| {
                    let at = index + 1 + ahead;
                    rollup.part_lines(at, self.parts[at].rows)
                });
            let part = &mut self.parts[index];
            let lines_per_record = next.map_or(0, |next| next.lines().div_ceil(part.rows.max(1)));
            // A part with about as many records as groups, small enough
            // for a core's cache, is loaded whole, in address order; else
            // each record's slot and group are loaded a few records ahead.
            let warmed = rollup.prefetch_part(index, part.rows);
            let buffer = part.held();
            let (mut ahead, mut halfway) = (0, 0);
            if !warmed {
                for _ in 0..DRAIN_PREFETCH_DEPTH {
                    if let Some(held) = read(buffer, &mut ahead) {
                        rollup.prefetch_slot(held.hash);
                    }
                }
                for _ in 0..DRAIN_PREFETCH_DEPTH / 2 {
                    if let Some(held) = read(buffer, &mut halfway) {
                        rollup.prefetch_group(held.hash);
                    }
                }
            }
            let mut at = 0;
            while let Some(held) = read(buffer, &mut at) {
                if let Some(next) = &mut next {
                    rollup.prefetch_part_lines(next, lines_per_record);
                }
                if !warmed {
                    if let Some(next) = read(buffer, &mut ahead) {
                        rollup.prefetch_slot(next.hash);
                    }
                    if let Some(next) = read(buffer, &mut halfway) {
                        rollup.prefetch_group(next.hash);
                    }
                }
                let count = held.args.len() / ARG_BYTES;
                if self.args.len() < count {
                    self.args.resize(count, Arg::Null);
                }
                for (arg, bytes) in self.args.iter_mut().zip(held.args.chunks_exact(ARG_BYTES)) {
                    *arg = decode(bytes);
                }
                fold(
                    rollup,
                    held.hash,
                    held.bucket,
                    held.key,
                    &self.args[..count],
                );
            }
            part.end = 0;
            part.rows = 0;
        }
        self.rows = 0;
        self.bytes = 0;
    }
}

/// The held record at `*at` in `buffer`, moving `*at` past it; `None` at
/// the end.
#[inline]
fn read<'b>(buffer: &'b [u8], at: &mut usize) -> Option<Held<'b>> {
    let start = *at;
    let fixed = buffer.get(start..start + HASH_HEAD_BYTES + 1)?;
    let hash = u64::from_le_bytes(fixed[..8].try_into().expect("8 bytes"));
    let head = fixed[8];
    let mut next = start + HASH_HEAD_BYTES + 1;
    let key = match fixed[9] {
        LONG_KEY => {
            let len = u32::from_le_bytes(buffer[next..next + 4].try_into().expect("4 bytes"));
            next += 4;
            len as usize
        }
        len => usize::from(len),
    };
    let bucket = if head & HEAD_BUCKET == 0 {
        0
    } else {
        let bucket = i64::from_le_bytes(buffer[next..next + 8].try_into().expect("8 bytes"));
        next += 8;
        bucket
    };
    let args = usize::from(head & !HEAD_BUCKET) * ARG_BYTES;
    *at = next + args + key;
    Some(Held {
        hash: KeyHash::from_bits(hash),
        bucket: Timestamp(bucket),
        args: &buffer[next..next + args],
        key: &buffer[next + args..*at],
    })
}

/// An argument as (tag, value bits).
#[inline]
fn encode(arg: &Arg) -> (u8, u64) {
    match *arg {
        Arg::Null => (0, 0),
        Arg::Bool(b) => (1, u64::from(b)),
        Arg::Int(i) => (2, i.cast_unsigned()),
        Arg::Float(f) => (3, f.to_bits()),
        Arg::Time(t) => (4, t.0.cast_unsigned()),
        Arg::Text { hash } => (5, hash),
    }
}

/// The argument [`encode`] wrote as `bytes` (tag, then value).
#[inline]
fn decode(bytes: &[u8]) -> Arg {
    let value = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
    match bytes[0] {
        0 => Arg::Null,
        1 => Arg::Bool(value != 0),
        2 => Arg::Int(value.cast_signed()),
        3 => Arg::Float(f64::from_bits(value)),
        4 => Arg::Time(Timestamp(value.cast_signed())),
        5 => Arg::Text { hash: value },
        tag => unreachable!("argument tag {tag} was never written"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of((tag, value): (u8, u64)) -> Vec<u8> {
        let mut bytes = vec![tag];
        bytes.extend_from_slice(&value.to_le_bytes());
        bytes
    }

    proptest::proptest! {
        /// Held records come back from a drain exactly as pushed, each
        /// part's in order, on both the short path (a key of at most 16
        /// bytes) and the long one, with a length byte or a u32 length,
        /// with a bucket and without.
        #[test]
        fn held_records_drain_as_pushed(
            records in proptest::collection::vec(
                (
                    proptest::option::of(-5i64..5),
                    proptest::prop_oneof![
                        proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                        proptest::collection::vec(proptest::num::u8::ANY, 250..300),
                    ],
                    proptest::collection::vec((0u8..6, proptest::num::u64::ANY), 0..5),
                ),
                0..300,
            ),
        ) {
            use cardinal_rollup::{AggKind, Limits, Shape};
            let rollup = Rollup::new(Shape { aggs: vec![AggKind::CountAll] }, Limits::default())
                .expect("valid")
                .with_parts_after(0);
            let mut pending = Pending::default();
            let mut want = vec![Vec::new(); rollup.parts()];
            for (bucket, key, args) in &records {
                let mut routed = Routed::default();
                routed.bucket = bucket.map(|b| Timestamp(b * 86_400_000));
                routed.key.clone_from(key);
                routed.args = args.iter().map(|&(tag, value)| decode(&bytes_of((tag, value)))).collect();
                pending.push(&rollup, &routed);
                let at = routed.bucket.unwrap_or(Timestamp(0));
                let hash = KeyHash::of(at, key);
                let args: Vec<(u8, u64)> = routed.args.iter().map(encode).collect();
                want[rollup.part_of(hash)].push((hash.bits(), at.0, key.clone(), args));
            }
            proptest::prop_assert_eq!(pending.rows(), records.len());
            let mut got = Vec::new();
            let mut rollup = rollup;
            pending.drain(&mut rollup, |_, hash, bucket, key, args| {
                got.push((hash.bits(), bucket.0, key.to_vec(), args.iter().map(encode).collect::<Vec<_>>()));
            });
            let want: Vec<_> = want.into_iter().flatten().collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(pending.rows(), 0);
        }

        /// Every argument reads back as written (compared as encoded, so
        /// that a NaN compares equal to itself).
        #[test]
        fn arguments_round_trip(tag in 0u8..6, value: u64) {
            let arg = decode(&bytes_of((tag, value)));
            let written = encode(&arg);
            proptest::prop_assert_eq!(encode(&decode(&bytes_of(written))), written);
        }
    }
}
