//! The idempotency keys of HTTP ingest: a bounded table of the keys of
//! recent requests, each with a digest of its body and what it was
//! answered, so a retried `POST` with an `Idempotency-Key` it already
//! carried is answered again, not counted twice (as Stripe's API and the
//! IETF `Idempotency-Key` draft do).
//!
//! Keys are opaque to the server: 1 to [`KEY_BYTES_MAX`] visible ASCII
//! bytes (`!`..=`~`), a UUID for example. A key is scoped to its stream:
//! the same key sent to two streams names two requests. With the key the
//! table keeps a [`Digest`] of the records the request carried; the same
//! key with other records is not a retry but a mistake, refused
//! ([`Lookup::Reused`], HTTP 422 `idempotency key reused with a different
//! request`) rather than answered with the first request's counts.
//!
//! Bounds: at most [`KEYS_MAX`] keys. A new key in a full table forgets
//! the oldest key only once that key was taken [`KEY_IDLE_SECS_MIN`] ago;
//! while every key is more recent, the new key is refused ([`TableFull`],
//! HTTP 503 with `Retry-After`) and nothing is forgotten, so a flood of
//! new keys cannot make a recent request count twice on its retry.
//! Requests without a key are not limited by this table. Keys forgotten
//! are counted ([`KeyTable::evicted`]). The table is saved in snapshots
//! and rebuilt from the write-ahead log after them (a record's envelope
//! holds its stream, key and records, so the digest is computed again).
//!
//! # Image
//!
//! ```text
//!  header | magic "CRDKEYS\0" | version u32 = 2 | count u32 |
//!  keys   | stream len u8 | stream | key len u8 | key | flags u8 | digest u64 |
//!         | accepted u64 | rejected u64 | taken secs u64 |        oldest first
//!  trailer| crc32 (IEEE) of every byte before it u32 |
//! ```
//!
//! Little-endian. `flags` bit 0: the counts are known (a key replayed
//! from the log is known to be taken, its counts are not); bit 1: the
//! digest is known; other bits 0. A key whose digest is not known came
//! from a version 1 image (no streams, no digests: its stream is empty
//! and it matches the key on any stream and any body, as version 1 did,
//! until it is forgotten). Version 1 (`flag u8 | accepted | rejected`
//! after the key, no stream, digest or time) is still read, its keys
//! taken as new at decode time. The decoder checks the checksum, then
//! every length against the bytes left, every key and stream name by its
//! rule, flags, no key twice and the order of time; it never panics.
//
// Maintainer notes.
//
// The digest is computed over the records the service is handed (after
// the HTTP edge took off a header line) and again over the records a log
// record's envelope holds at replay: both must be the same bytes, so a
// change to what the edge strips must not reach the envelope unnoticed.

use std::collections::{HashMap, VecDeque};

use crate::error::Error;
use crate::frame::StreamName;

/// The most keys held: 65,536, about 16 MiB with their digests and map
/// slots at the longest keys, and at most 11 MiB of each snapshot.
pub const KEYS_MAX: usize = 65_536;
/// The longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 128;
/// How long a key is kept at least, once taken, while newer keys come:
/// 5 minutes. HTTP clients retry within seconds to minutes (curl's
/// `--retry-max-time`, a load balancer's retry), so a retry finds its
/// key. It also sets how many keyed requests a second the table sustains
/// before refusing new keys with 503: [`KEYS_MAX`] / 300 s, about 218.
pub const KEY_IDLE_SECS_MIN: u64 = 5 * 60;

const MAGIC: &[u8; 8] = b"CRDKEYS\0";
const VERSION: u32 = 2;
/// The version without streams, digests or times (module doc, Image).
const VERSION_UNSCOPED: u32 = 1;
const FLAG_COUNTS: u8 = 1;
const FLAG_DIGEST: u8 = 2;

/// Checks an `Idempotency-Key` against the rule of the module doc.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!(
            "an idempotency key is 1 to {KEY_BYTES_MAX} bytes, this one is {}",
            key.len()
        ));
    }
    if !key.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
        return Err("an idempotency key is visible ASCII (no spaces or controls)".into());
    }
    Ok(())
}

/// What a key's request was answered, when known (a key replayed from the
/// log after a restart is known to be taken, its counts are not).
pub type Counts = Option<(u64, u64)>;

/// A request's records, summed up to tell a retry from another request
/// under the same key: CRC-32 (IEEE) and CRC-32C of the length and the
/// bytes, side by side. Two checksums over different polynomials miss a
/// change with odds of about 2^-64; this tells a mistaken reuse from a
/// retry, it does not stand against a forged collision (which could only
/// make the forger's own key look retried).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(pub u64);

impl Digest {
    /// The digest of `records`.
    pub fn of(records: &[u8]) -> Digest {
        let length = (records.len() as u64).to_le_bytes();
        let mut ieee = crc32fast::Hasher::new();
        ieee.update(&length);
        ieee.update(records);
        let castagnoli = crc32c::crc32c_append(crc32c::crc32c(&length), records);
        Digest(u64::from(ieee.finalize()) << 32 | u64::from(castagnoli))
    }
}

/// What the table says about a key and a request's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Not held: a new request.
    New,
    /// Taken by the same request before: answer these counts again.
    Retry(Counts),
    /// Taken by a request with other records.
    Reused,
}

/// A new key met a table full of keys taken within
/// [`KEY_IDLE_SECS_MIN`]: refused until the oldest has been held that
/// long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull {
    /// Seconds until the oldest key may be forgotten (at least 1).
    pub retry_after_secs: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    digest: Option<Digest>,
    counts: Counts,
    taken_secs: u64,
}

/// A key and the stream it is scoped to (empty for a version 1 key).
type Scoped = (String, String);

/// The table (module doc).
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    /// Oldest first.
    order: VecDeque<Scoped>,
    entries: HashMap<Scoped, Entry>,
    evicted: u64,
}

impl KeyTable {
    /// An empty table.
    pub fn new() -> KeyTable {
        KeyTable::default()
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Keys forgotten since this table was made or decoded (not saved: a
    /// counter for metrics).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    fn entry(&self, stream: &str, key: &str) -> Option<&Entry> {
        self.entries
            .get(&(stream.to_owned(), key.to_owned()))
            .or_else(|| self.entries.get(&(String::new(), key.to_owned())))
    }

    /// What `key` on `stream` with records of `digest` is (a key of a
    /// version 1 image, with no stream and no digest, is a retry of any
    /// request with that key).
    pub fn lookup(&self, stream: &str, key: &str, digest: Digest) -> Lookup {
        match self.entry(stream, key) {
            None => Lookup::New,
            Some(entry) if entry.digest.is_none_or(|d| d == digest) => Lookup::Retry(entry.counts),
            Some(_) => Lookup::Reused,
        }
    }

    /// Whether a new key could be taken at `now_secs`.
    pub fn room(&self, now_secs: u64) -> Result<(), TableFull> {
        if self.order.len() < KEYS_MAX {
            return Ok(());
        }
        let oldest = self.order.front().expect("a full table holds a key");
        let held_secs = now_secs.saturating_sub(self.entries[oldest].taken_secs);
        if held_secs >= KEY_IDLE_SECS_MIN {
            return Ok(());
        }
        Err(TableFull {
            retry_after_secs: (KEY_IDLE_SECS_MIN - held_secs).max(1),
        })
    }

    /// Takes `key` on `stream` for records of `digest` at `now_secs`,
    /// forgetting the oldest key if the table is full and it is old
    /// enough; refused, changing nothing, otherwise.
    ///
    /// # Panics
    ///
    /// If the key is held (the caller looks it up first).
    pub fn insert(
        &mut self,
        stream: &str,
        key: &str,
        digest: Digest,
        now_secs: u64,
    ) -> Result<(), TableFull> {
        self.room(now_secs)?;
        let taken = self.insert_logged(stream, key, digest, now_secs);
        assert!(taken, "key {key} on {stream} is held: look it up first");
        Ok(())
    }

    /// Takes `key` as [`KeyTable::insert`] does, for a request the log
    /// already holds (recovery replays it): never refused, so a full
    /// table forgets its oldest key however recent (counted). Returns
    /// false, changing nothing, when the key is held.
    pub fn insert_logged(
        &mut self,
        stream: &str,
        key: &str,
        digest: Digest,
        now_secs: u64,
    ) -> bool {
        let scoped = (stream.to_owned(), key.to_owned());
        if self.entries.contains_key(&scoped) {
            return false;
        }
        if self.order.len() >= KEYS_MAX
            && let Some(oldest) = self.order.pop_front()
        {
            self.entries.remove(&oldest);
            self.evicted += 1;
        }
        self.order.push_back(scoped.clone());
        self.entries.insert(
            scoped,
            Entry {
                digest: Some(digest),
                counts: None,
                taken_secs: now_secs,
            },
        );
        assert!(self.order.len() <= KEYS_MAX);
        assert_eq!(self.order.len(), self.entries.len());
        true
    }

    /// Records what `key`'s request on `stream` was answered (if it is
    /// still held).
    pub fn set_counts(&mut self, stream: &str, key: &str, accepted: u64, rejected: u64) {
        if let Some(entry) = self.entries.get_mut(&(stream.to_owned(), key.to_owned())) {
            entry.counts = Some((accepted, rejected));
        }
    }

    /// Appends the table's image (module doc) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let count = u32::try_from(self.order.len()).expect("KEYS_MAX fits in u32");
        out.extend_from_slice(&count.to_le_bytes());
        for scoped in &self.order {
            let (stream, key) = scoped;
            let entry = &self.entries[scoped];
            out.push(u8::try_from(stream.len()).expect("stream names are short"));
            out.extend_from_slice(stream.as_bytes());
            out.push(u8::try_from(key.len()).expect("keys are checked to KEY_BYTES_MAX"));
            out.extend_from_slice(key.as_bytes());
            let mut flags = 0;
            if entry.counts.is_some() {
                flags |= FLAG_COUNTS;
            }
            if entry.digest.is_some() {
                flags |= FLAG_DIGEST;
            }
            out.push(flags);
            out.extend_from_slice(&entry.digest.map_or(0, |d| d.0).to_le_bytes());
            let (accepted, rejected) = entry.counts.unwrap_or((0, 0));
            out.extend_from_slice(&accepted.to_le_bytes());
            out.extend_from_slice(&rejected.to_le_bytes());
            out.extend_from_slice(&entry.taken_secs.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads an image made by [`KeyTable::encode`] (this version's or
    /// version 1's, whose keys are taken as new at `now_secs`), checking
    /// everything.
    pub fn decode(image: &[u8], now_secs: u64) -> Result<KeyTable, Error> {
        let bad = |reason: String| Error::BadImage {
            what: "idempotency keys",
            reason,
        };
        if image.len() < MAGIC.len() + 12 {
            return Err(bad(format!("{} bytes is too short", image.len())));
        }
        let (body, crc) = image.split_at(image.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        if crc32fast::hash(body) != stored && !cfg!(fuzzing) {
            return Err(bad("checksum does not match".into()));
        }
        if &body[..8] != MAGIC {
            return Err(bad("not a key table (magic)".into()));
        }
        let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
        if version != VERSION && version != VERSION_UNSCOPED {
            return Err(bad(format!(
                "version {version}, this build reads {VERSION_UNSCOPED} and {VERSION}"
            )));
        }
        let count = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
        if count > KEYS_MAX {
            return Err(bad(format!("{count} keys, over the limit of {KEYS_MAX}")));
        }
        let mut rest = &body[16..];
        let mut take = |n: usize, i: usize| -> Result<&[u8], Error> {
            if rest.len() < n {
                return Err(bad(format!("key {i} is cut short")));
            }
            let (taken, after) = rest.split_at(n);
            rest = after;
            Ok(taken)
        };
        let u64_of = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
        let mut table = KeyTable::new();
        let mut previous_secs = 0;
        for i in 0..count {
            let stream = if version == VERSION {
                let len = usize::from(take(1, i)?[0]);
                let stream = std::str::from_utf8(take(len, i)?)
                    .map_err(|_| bad(format!("key {i}'s stream is not text")))?;
                if !stream.is_empty() {
                    StreamName::new(stream).map_err(|e| bad(format!("key {i}'s stream: {e}")))?;
                }
                stream.to_owned()
            } else {
                String::new()
            };
            let len = usize::from(take(1, i)?[0]);
            let key = std::str::from_utf8(take(len, i)?)
                .map_err(|_| bad(format!("key {i} is not text")))?
                .to_owned();
            check_key(&key).map_err(|reason| bad(format!("key {i}: {reason}")))?;
            let (flags, digest, accepted, rejected, taken_secs) = if version == VERSION {
                let flags = take(1, i)?[0];
                let digest = u64_of(take(8, i)?);
                let accepted = u64_of(take(8, i)?);
                let rejected = u64_of(take(8, i)?);
                let taken_secs = u64_of(take(8, i)?);
                (flags, digest, accepted, rejected, taken_secs)
            } else {
                let flag = take(1, i)?[0];
                let accepted = u64_of(take(8, i)?);
                let rejected = u64_of(take(8, i)?);
                if flag > 1 {
                    return Err(bad(format!("key {i} has flag {flag}")));
                }
                (flag, 0, accepted, rejected, now_secs)
            };
            if flags & !(FLAG_COUNTS | FLAG_DIGEST) != 0 {
                return Err(bad(format!("key {i} has flags {flags:#04x}")));
            }
            let has_digest = flags & FLAG_DIGEST != 0;
            if has_digest == stream.is_empty() {
                return Err(bad(format!(
                    "key {i}: a digest goes with a stream, and only with one"
                )));
            }
            if (!has_digest && digest != 0)
                || (flags & FLAG_COUNTS == 0 && (accepted, rejected) != (0, 0))
            {
                return Err(bad(format!(
                    "key {i} holds values its flags say are absent"
                )));
            }
            if taken_secs < previous_secs {
                return Err(bad(format!("key {i} is out of the order it was taken in")));
            }
            previous_secs = taken_secs;
            let scoped = (stream, key);
            if table.entries.contains_key(&scoped) {
                return Err(bad(format!("key {i} appears twice")));
            }
            table.order.push_back(scoped.clone());
            table.entries.insert(
                scoped,
                Entry {
                    digest: has_digest.then_some(Digest(digest)),
                    counts: (flags & FLAG_COUNTS != 0).then_some((accepted, rejected)),
                    taken_secs,
                },
            );
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes left over", rest.len())));
        }
        debug_assert_eq!(table.order.len(), count);
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_is_scoped_to_its_stream_and_its_body() {
        let mut table = KeyTable::new();
        let one = Digest::of(b"1,2\n");
        let other = Digest::of(b"1,3\n");
        assert_ne!(one, other);
        assert_ne!(Digest::of(b""), Digest::of(b"\0"));
        assert_eq!(table.lookup("ev", "a", one), Lookup::New);
        table.insert("ev", "a", one, 10).expect("room");
        assert_eq!(table.lookup("ev", "a", one), Lookup::Retry(None));
        table.set_counts("ev", "a", 3, 1);
        assert_eq!(table.lookup("ev", "a", one), Lookup::Retry(Some((3, 1))));
        assert_eq!(table.lookup("ev", "a", other), Lookup::Reused);
        assert_eq!(table.lookup("clicks", "a", other), Lookup::New);
        assert!(!table.insert_logged("ev", "a", one, 11));
    }

    #[test]
    fn a_full_table_forgets_only_keys_past_the_horizon() {
        let mut table = KeyTable::new();
        let digest = Digest::of(b"x\n");
        table.insert("ev", "victim", digest, 100).expect("room");
        for i in 1..KEYS_MAX {
            table
                .insert("ev", &format!("k{i}"), digest, 100)
                .expect("room");
        }
        assert_eq!(table.len(), KEYS_MAX);
        let full = table.insert("ev", "flood", digest, 160).expect_err("full");
        assert_eq!(full.retry_after_secs, KEY_IDLE_SECS_MIN - 60);
        assert_eq!(table.lookup("ev", "victim", digest), Lookup::Retry(None));
        assert_eq!(table.evicted(), 0);
        let later = 100 + KEY_IDLE_SECS_MIN;
        table
            .insert("ev", "flood", digest, later)
            .expect("the oldest is old enough");
        assert_eq!(table.lookup("ev", "victim", digest), Lookup::New);
        assert_eq!(table.evicted(), 1);
        assert_eq!(table.len(), KEYS_MAX);
    }

    #[test]
    fn keys_follow_the_rule() {
        assert!(check_key("0b1f6c3e-7a1d-4c1e-9d8e-2f7a5b3c4d5e").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a b").is_err());
        assert!(check_key(&"x".repeat(KEY_BYTES_MAX + 1)).is_err());
        assert!(check_key("é").is_err());
    }

    /// A version 1 image (as builds before keys were scoped wrote it):
    /// its keys match on any stream and any body.
    #[test]
    fn a_version_1_image_is_read() {
        let mut image = Vec::new();
        image.extend_from_slice(MAGIC);
        image.extend_from_slice(&1u32.to_le_bytes());
        image.extend_from_slice(&1u32.to_le_bytes());
        image.push(2);
        image.extend_from_slice(b"k1");
        image.push(1);
        image.extend_from_slice(&5u64.to_le_bytes());
        image.extend_from_slice(&0u64.to_le_bytes());
        let crc = crc32fast::hash(&image);
        image.extend_from_slice(&crc.to_le_bytes());
        let table = KeyTable::decode(&image, 50).expect("version 1");
        let any = Digest::of(b"anything");
        assert_eq!(table.lookup("ev", "k1", any), Lookup::Retry(Some((5, 0))));
        let mut again = Vec::new();
        table.encode(&mut again);
        let back = KeyTable::decode(&again, 60).expect("version 2");
        assert_eq!(
            back.lookup("clicks", "k1", any),
            Lookup::Retry(Some((5, 0)))
        );
    }

    proptest! {
        #[test]
        fn images_round_trip_and_damage_is_refused(
            keys in proptest::collection::vec(
                ("[a-z]{1,8}", "[!-~]{1,20}", any::<u64>(), any::<Option<(u64, u64)>>()),
                0..40,
            ),
            flip in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let mut table = KeyTable::new();
            for (n, (stream, key, digest, counts)) in keys.iter().enumerate() {
                table.insert_logged(stream, key, Digest(*digest), n as u64);
                if let Some((a, r)) = counts {
                    table.set_counts(stream, key, *a, *r);
                }
            }
            let mut image = Vec::new();
            table.encode(&mut image);
            let back = KeyTable::decode(&image, 0).expect("decodes");
            let mut again = Vec::new();
            back.encode(&mut again);
            prop_assert_eq!(&again, &image);
            let i = flip.index(image.len());
            image[i] ^= mask;
            prop_assert!(KeyTable::decode(&image, 0).is_err());
            prop_assert!(KeyTable::decode(&again[..again.len() - 1], 0).is_err());
        }
    }
}
