//! The server's side of exactly-once: which batch ids of each client were
//! already admitted, in bounded memory, saved in snapshots.
//!
//! A client resends every batch it holds unacknowledged when it
//! reconnects, so the server sees again the batches whose acks were lost
//! with the connection. [`Dedup`] says, for one client and a batch id:
//!
//! - [`Verdict::New`]: never admitted: admit it (and mark it);
//! - [`Verdict::Duplicate`]: admitted before: acknowledge it again, once
//!   what was admitted so far is durable, and do not count it;
//! - [`Verdict::TooOld`]: older than the window: it cannot be told apart
//!   from a batch already counted, so it is refused ([`crate::ErrorCode::TooOld`]).
//!
//! It keeps the highest id admitted and a bitmap of the [`DEDUP_WINDOW`]
//! ids at and below it (128 bytes): id `i` is in the window when
//! `highest - i < DEDUP_WINDOW`, and its bit is `i % DEDUP_WINDOW` of a
//! ring, cleared as the highest id moves past. A client never needs more:
//! it sends a batch only if its id is below its lowest unresolved id plus
//! the in-flight limit ([`crate::IN_FLIGHT_BATCHES_MAX`] at most, which a
//! const assertion holds at or under the window), so every batch it can
//! resend is within the window of the highest id it ever sent. Ids need
//! not be consecutive, and a batch refused for a passing reason (the
//! server stopping) and resent later, below ids admitted since, is still
//! new: that is why the window is a bitmap and not only a high mark.
//!
//! [`DedupTable`] holds one [`Dedup`] per client id, at most
//! [`CLIENTS_MAX`]. A new client id in a full table evicts the least
//! recently used entry only if that entry has been idle (no batch, no
//! hello) for [`CLIENT_IDLE_SECS_MIN`]; while every entry is more recent
//! than that, the new client is refused ([`TableFull`], which the server
//! sends as `unavailable` with the seconds to wait) and nothing is
//! evicted. So a flood of new client ids, however fast, cannot make the
//! server forget a client that was active within the horizon: the flood
//! is what waits. Evictions are counted ([`DedupTable::evicted`],
//! `cardinal_dedup_evictions_total` in `/metrics`). A client that comes
//! back after its entry was evicted finds the server no longer knows the
//! batches it sent: the hello ok says so (`highest` below them, or none),
//! and the client stops ([`crate::Error::ServerForgot`]) rather than
//! risk counting twice.
//!
//! Times are wall-clock seconds since the Unix epoch, saved with each
//! entry, so the horizon holds across restarts. A clock that jumps back
//! only makes entries look recent (kept longer); one that jumps forward
//! by more than the horizon can make recent entries evictable, as any
//! idle timer would.
//!
//! # Where it sits in the server
//!
//! The server admits a batch (marks it here) in the order it appends
//! batches to its write-ahead log, after checking the stream and format,
//! so the table always says exactly which batches the log holds. A
//! snapshot saves the table as of the log position it covers
//! ([`DedupTable::encode`]); recovery decodes it and marks again every
//! batch the log holds after that position, so the table survives
//! restarts and a batch acknowledged before a crash is a duplicate after
//! it.
//!
//! # Image
//!
//! ```text
//!  header  | magic "CRDDEDUP" | version u32 = 2 | window u32 = 1024 | clients u32 | 0 u32 |  24 B
//!  clients | id bytes u8 | id | highest u64 | used secs u64 | window bits 128 B |   least recently used first
//!  trailer | crc32 of every byte before it u32 |
//! ```
//!
//! Little-endian; bit `j` (byte `j / 8`, bit `j % 8`) of a client's window
//! bits says whether id `highest - j` was admitted, so bit 0 is always
//! set and no bit stands for an id below 0. `used secs` is when the
//! client was last used; clients are in order of (used secs, id).
//! Version 1 had no `used secs`: it is still read, its clients taken as
//! used when it is decoded (so none is evictable before the horizon
//! passes again). The decoder checks the checksum (CRC-32/ISO-HDLC, as
//! frames) after the magic and version and before anything else, then
//! every count against the bytes left before sizing anything from it,
//! every client id by its rule, no id twice, the order of use, and the
//! bits above; it never panics and allocates a small multiple of the
//! image's length (a client entry is at least 146 bytes of image).
//! Worked example: one client `a` with batches 1 and 3 admitted is 24 +
//! (1 + 1 + 8 + 8 + 128) + 4 = 174 bytes, `highest` 3 and bits 0 and 2
//! set (byte `0x05`).
// Maintainer notes.
//
// Changing DEDUP_WINDOW changes the image (its bits and the window field):
// bump IMAGE_VERSION and decide how an old image is read; the decoder
// refuses a window it does not hold. Version 1 images (no times of use)
// are read by the same decoder; keep them readable while snapshots
// written by builds before version 2 may exist. The window must stay at or above
// IN_FLIGHT_BATCHES_MAX (asserted in frame.rs).

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::frame::{BatchId, CLIENT_ID_BYTES_MAX, ClientId};

/// The batch ids per client the server remembers below the highest it
/// admitted, the highest included: 1,024, four times
/// [`crate::IN_FLIGHT_BATCHES_MAX`], in a 128-byte bitmap per client. A
/// resend older than this is refused as [`Verdict::TooOld`].
pub const DEDUP_WINDOW: usize = 1024;

/// The most client ids a [`DedupTable`] remembers: 4,096, about 1 MiB of
/// tables (an entry is about 250 bytes with its id and map slot) and
/// 600 KiB in each snapshot. A new client id past it evicts the least
/// recently used one if it is idle for [`CLIENT_IDLE_SECS_MIN`], and is
/// refused otherwise.
pub const CLIENTS_MAX: usize = 4096;

/// How long a client id must be idle (no batch admitted, no hello)
/// before a new client may evict it: 15 minutes. A client resends what
/// it holds as soon as it reconnects, and `cardinal send` gives up after
/// 60 s without progress (`send::GIVE_UP_AFTER_DEFAULT`), so every
/// automatic resend falls well inside it. The price is paid by new
/// clients only: once [`CLIENTS_MAX`] ids were used within 15 minutes (a
/// flood, 4.5 new ids a second sustained), a new id waits up to that long
/// (`unavailable`, with the seconds to wait); known clients go on.
pub const CLIENT_IDLE_SECS_MIN: u64 = 15 * 60;

const WINDOW_BYTES: usize = DEDUP_WINDOW / 8;
const _: () = assert!(DEDUP_WINDOW.is_multiple_of(8));
const _: () = assert!(DEDUP_WINDOW <= u32::MAX as usize);
const _: () = assert!(CLIENTS_MAX <= u32::MAX as usize);

const MAGIC: &[u8; 8] = b"CRDDEDUP";
const IMAGE_VERSION: u32 = 2;
/// The version before times of use were saved (module doc, Image).
const IMAGE_VERSION_UNTIMED: u32 = 1;
const IMAGE_HEADER_BYTES: usize = 24;
const ENTRY_BYTES_MIN: usize = 1 + 1 + 8 + 8 + WINDOW_BYTES;

/// What to do with a batch id (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Never admitted: admit it.
    New,
    /// Admitted before: acknowledge again, do not count.
    Duplicate,
    /// Older than the window: refuse.
    TooOld,
}

/// One client's admitted batch ids: the highest and a window below it.
#[derive(Clone, PartialEq, Eq)]
pub struct Dedup {
    highest: u64,
    /// Bit `id % DEDUP_WINDOW` for each id in the window; every other bit
    /// is clear.
    ring: [u8; WINDOW_BYTES],
}

impl std::fmt::Debug for Dedup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedup")
            .field("highest", &self.highest)
            .field("admitted_in_window", &self.admitted_in_window())
            .finish()
    }
}

fn slot(id: u64) -> (usize, u8) {
    let index = usize::try_from(id % DEDUP_WINDOW as u64).expect("below the window");
    (index / 8, 1 << (index % 8))
}

impl Dedup {
    /// A client's table after its first admitted batch.
    pub fn first(id: BatchId) -> Dedup {
        let mut dedup = Dedup {
            highest: id.0,
            ring: [0; WINDOW_BYTES],
        };
        let (byte, bit) = slot(id.0);
        dedup.ring[byte] |= bit;
        dedup
    }

    /// The highest batch id admitted.
    pub fn highest(&self) -> BatchId {
        BatchId(self.highest)
    }

    /// How many ids of the window are admitted.
    pub fn admitted_in_window(&self) -> u32 {
        self.ring.iter().map(|b| b.count_ones()).sum()
    }

    /// What to do with `id`.
    pub fn check(&self, id: BatchId) -> Verdict {
        if id.0 > self.highest {
            return Verdict::New;
        }
        if self.highest - id.0 >= DEDUP_WINDOW as u64 {
            return Verdict::TooOld;
        }
        let (byte, bit) = slot(id.0);
        if self.ring[byte] & bit != 0 {
            Verdict::Duplicate
        } else {
            Verdict::New
        }
    }

    /// Checks `id` and marks it admitted if it is new; returns the
    /// verdict of [`Dedup::check`].
    pub fn admit(&mut self, id: BatchId) -> Verdict {
        let verdict = self.check(id);
        if verdict != Verdict::New {
            return verdict;
        }
        if id.0 > self.highest {
            let gap = id.0 - self.highest;
            if gap >= DEDUP_WINDOW as u64 {
                self.ring = [0; WINDOW_BYTES];
            } else {
                // Each step up moves the window's bottom up too: the slots
                // of the ids up to and including the new top held the ids
                // now leaving the window, so they start clear.
                for passed in self.highest + 1..=id.0 {
                    let (byte, bit) = slot(passed);
                    self.ring[byte] &= !bit;
                }
            }
            self.highest = id.0;
        }
        let (byte, bit) = slot(id.0);
        debug_assert!(self.ring[byte] & bit == 0, "a new id's slot is clear");
        self.ring[byte] |= bit;
        debug_assert_eq!(self.check(id), Verdict::Duplicate);
        verdict
    }

    /// Bit `j` says whether `highest - j` was admitted (the image's order).
    fn window_bits(&self) -> [u8; WINDOW_BYTES] {
        let mut bits = [0; WINDOW_BYTES];
        for j in 0..DEDUP_WINDOW {
            let Some(id) = self.highest.checked_sub(j as u64) else {
                break;
            };
            let (byte, bit) = slot(id);
            if self.ring[byte] & bit != 0 {
                bits[j / 8] |= 1 << (j % 8);
            }
        }
        bits
    }

    fn from_window_bits(highest: u64, bits: &[u8; WINDOW_BYTES]) -> Result<Dedup, String> {
        if bits[0] & 1 == 0 {
            return Err(format!("the highest id {highest} is not marked admitted"));
        }
        let mut ring = [0; WINDOW_BYTES];
        for j in 0..DEDUP_WINDOW {
            if bits[j / 8] & (1 << (j % 8)) == 0 {
                continue;
            }
            let Some(id) = highest.checked_sub(j as u64) else {
                return Err(format!(
                    "bit {j} stands for an id below 0 (highest {highest})"
                ));
            };
            let (byte, bit) = slot(id);
            ring[byte] |= bit;
        }
        Ok(Dedup { highest, ring })
    }
}

#[derive(Debug, Clone)]
struct Entry {
    dedup: Dedup,
    /// When the client last admitted a batch or said hello, in seconds
    /// since the Unix epoch: the least recent is evicted first, and only
    /// once idle for [`CLIENT_IDLE_SECS_MIN`].
    used_secs: u64,
}

/// A new client id met a table full of clients used within
/// [`CLIENT_IDLE_SECS_MIN`]: none may be evicted, so the new one is
/// refused until the least recently used entry has been idle that long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull {
    /// Seconds until an entry may be evicted (at least 1).
    pub retry_after_secs: u64,
}

/// The [`Dedup`] of every client id, bounded by [`CLIENTS_MAX`] (see the
/// module doc).
#[derive(Debug, Clone, Default)]
pub struct DedupTable {
    clients: HashMap<ClientId, Entry>,
    evicted: u64,
}

impl DedupTable {
    /// An empty table.
    pub fn new() -> DedupTable {
        DedupTable::default()
    }

    /// The client ids held.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Whether no client id is held.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Client ids evicted since this table was made or decoded (not saved:
    /// a counter for metrics).
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The table of `client`, if held.
    pub fn get(&self, client: &ClientId) -> Option<&Dedup> {
        self.clients.get(client).map(|entry| &entry.dedup)
    }

    /// The highest batch id admitted from `client`, if it is held.
    pub fn highest(&self, client: &ClientId) -> Option<BatchId> {
        self.get(client).map(Dedup::highest)
    }

    /// Marks `client` as used at `now_secs` (on its hello), so an active
    /// client is not evicted.
    pub fn touch(&mut self, client: &ClientId, now_secs: u64) {
        if let Some(entry) = self.clients.get_mut(client) {
            entry.used_secs = entry.used_secs.max(now_secs);
        }
    }

    /// What to do with batch `id` of `client`, without marking it.
    pub fn check(&self, client: &ClientId, id: BatchId) -> Verdict {
        self.get(client)
            .map_or(Verdict::New, |dedup| dedup.check(id))
    }

    /// Whether a batch of `client` could be admitted at `now_secs`: a held
    /// client always can; a new one when the table has room or holds an
    /// entry idle for [`CLIENT_IDLE_SECS_MIN`].
    pub fn room(&self, client: &ClientId, now_secs: u64) -> Result<(), TableFull> {
        if self.clients.contains_key(client) || self.clients.len() < CLIENTS_MAX {
            return Ok(());
        }
        let (_, oldest) = self.least_recent().expect("a full table holds a client");
        let idle_secs = now_secs.saturating_sub(oldest);
        if idle_secs >= CLIENT_IDLE_SECS_MIN {
            return Ok(());
        }
        Err(TableFull {
            retry_after_secs: (CLIENT_IDLE_SECS_MIN - idle_secs).max(1),
        })
    }

    /// Checks batch `id` of `client` and marks it admitted if new, adding
    /// the client when it is not held. A new client in a full table
    /// evicts the least recently used entry if it has been idle for
    /// [`CLIENT_IDLE_SECS_MIN`], and is refused otherwise (nothing
    /// changes).
    pub fn admit(
        &mut self,
        client: &ClientId,
        id: BatchId,
        now_secs: u64,
    ) -> Result<Verdict, TableFull> {
        self.room(client, now_secs)?;
        Ok(self.admit_logged(client, id, now_secs))
    }

    /// Marks batch `id` of `client` admitted as [`DedupTable::admit`]
    /// does, for a batch the log already holds (recovery replays it): it
    /// cannot be refused, so a full table evicts its least recently used
    /// entry however recent (counted). A table rebuilt from the log holds
    /// no more than the running one did, so this evicts only when the
    /// clock went back across a restart.
    pub fn admit_logged(&mut self, client: &ClientId, id: BatchId, now_secs: u64) -> Verdict {
        if let Some(entry) = self.clients.get_mut(client) {
            entry.used_secs = entry.used_secs.max(now_secs);
            return entry.dedup.admit(id);
        }
        if self.clients.len() >= CLIENTS_MAX {
            let (oldest, _) = self.least_recent().expect("a full table holds a client");
            let oldest = oldest.clone();
            self.clients.remove(&oldest);
            self.evicted += 1;
        }
        self.clients.insert(
            client.clone(),
            Entry {
                dedup: Dedup::first(id),
                used_secs: now_secs,
            },
        );
        assert!(self.clients.len() <= CLIENTS_MAX);
        Verdict::New
    }

    /// The least recently used client and when it was used (ties broken
    /// by id, so every table with the same entries picks the same one).
    fn least_recent(&self) -> Option<(&ClientId, u64)> {
        self.clients
            .iter()
            .min_by(|(a, x), (b, y)| (x.used_secs, a.as_str()).cmp(&(y.used_secs, b.as_str())))
            .map(|(id, entry)| (id, entry.used_secs))
    }

    /// Appends the table's image (module doc) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut entries: Vec<(&ClientId, &Entry)> = self.clients.iter().collect();
        entries.sort_by(|(a, x), (b, y)| (x.used_secs, a.as_str()).cmp(&(y.used_secs, b.as_str())));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
        out.extend_from_slice(&u32::try_from(DEDUP_WINDOW).expect("fits").to_le_bytes());
        let clients = u32::try_from(entries.len()).expect("CLIENTS_MAX fits u32");
        out.extend_from_slice(&clients.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for (client, entry) in entries {
            let id = client.as_str().as_bytes();
            out.push(u8::try_from(id.len()).expect("client ids fit u8"));
            out.extend_from_slice(id);
            out.extend_from_slice(&entry.dedup.highest.to_le_bytes());
            out.extend_from_slice(&entry.used_secs.to_le_bytes());
            out.extend_from_slice(&entry.dedup.window_bits());
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads an image written by [`DedupTable::encode`] (module doc for
    /// what is checked), this version's or version 1's (whose clients,
    /// saved without a time of use, are taken as used at `now_secs`).
    pub fn decode(image: &[u8], now_secs: u64) -> Result<DedupTable> {
        let bad = |reason: String| Error::DedupImage { reason };
        if image.len() < IMAGE_HEADER_BYTES + 4 {
            return Err(bad(format!(
                "{} bytes is shorter than any image",
                image.len()
            )));
        }
        if &image[..8] != MAGIC {
            return Err(bad("not a deduplication table (magic)".into()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().expect("4"));
        let version = u32_at(8);
        if version != IMAGE_VERSION && version != IMAGE_VERSION_UNTIMED {
            return Err(bad(format!(
                "format version {version}, this build reads {IMAGE_VERSION_UNTIMED} and \
                 {IMAGE_VERSION}"
            )));
        }
        let timed = version == IMAGE_VERSION;
        let entry_bytes_min = if timed {
            ENTRY_BYTES_MIN
        } else {
            ENTRY_BYTES_MIN - 8
        };
        let (body, trailer) = image.split_at(image.len() - 4);
        let stored = u32::from_le_bytes(trailer.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed && !cfg!(fuzzing) {
            return Err(bad(format!(
                "checksum {stored:#010x} does not match its bytes ({computed:#010x})"
            )));
        }
        let window = u32_at(12);
        if window as usize != DEDUP_WINDOW {
            return Err(bad(format!(
                "a window of {window} ids, this build keeps {DEDUP_WINDOW}"
            )));
        }
        let clients = u32_at(16) as usize;
        if u32_at(20) != 0 {
            return Err(bad("reserved header bytes are not 0".into()));
        }
        let mut at = IMAGE_HEADER_BYTES;
        if clients > CLIENTS_MAX || clients > (body.len() - at) / entry_bytes_min {
            return Err(bad(format!(
                "{clients} clients in {} bytes (at most {CLIENTS_MAX}, {entry_bytes_min} bytes each)",
                body.len() - at
            )));
        }
        let mut table = DedupTable {
            clients: HashMap::with_capacity(clients),
            evicted: 0,
        };
        let mut previous: Option<(u64, ClientId)> = None;
        for index in 0..clients {
            let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
                let bytes = body
                    .get(*at..*at + n)
                    .ok_or_else(|| bad(format!("the image ends inside client {index}")))?;
                *at += n;
                Ok(bytes)
            };
            let len = usize::from(take(&mut at, 1)?[0]);
            if len > CLIENT_ID_BYTES_MAX {
                return Err(bad(format!("client {index}'s id is {len} bytes")));
            }
            let id = std::str::from_utf8(take(&mut at, len)?)
                .map_err(|_| bad(format!("client {index}'s id is not UTF-8")))?;
            let client = ClientId::new(id).map_err(|e| bad(format!("client {index}: {e}")))?;
            let highest = u64::from_le_bytes(take(&mut at, 8)?.try_into().expect("8 bytes"));
            let used_secs = if timed {
                u64::from_le_bytes(take(&mut at, 8)?.try_into().expect("8 bytes"))
            } else {
                now_secs
            };
            let bits: &[u8; WINDOW_BYTES] = take(&mut at, WINDOW_BYTES)?
                .try_into()
                .expect("WINDOW_BYTES bytes");
            let dedup = Dedup::from_window_bits(highest, bits)
                .map_err(|reason| bad(format!("client {client}: {reason}")))?;
            // Version 2 writes clients in their order of use; an image out
            // of order was not written by encode.
            if timed
                && let Some((before, ref before_id)) = previous
                && (before, before_id.as_str()) > (used_secs, client.as_str())
            {
                return Err(bad(format!("client {client} is out of the order of use")));
            }
            previous = Some((used_secs, client.clone()));
            let entry = Entry { dedup, used_secs };
            if table.clients.insert(client.clone(), entry).is_some() {
                return Err(bad(format!("client {client} is in the image twice")));
            }
        }
        if at != body.len() {
            return Err(bad(format!(
                "{} bytes left after the last client",
                body.len() - at
            )));
        }
        debug_assert_eq!(table.clients.len(), clients);
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_window() {
        let mut dedup = Dedup::first(BatchId(5));
        assert_eq!(dedup.check(BatchId(5)), Verdict::Duplicate);
        assert_eq!(dedup.check(BatchId(4)), Verdict::New);
        assert_eq!(dedup.check(BatchId(0)), Verdict::New);
        assert_eq!(dedup.admit(BatchId(9)), Verdict::New);
        assert_eq!(dedup.admit(BatchId(4)), Verdict::New);
        assert_eq!(dedup.admit(BatchId(4)), Verdict::Duplicate);
        let top = 9 + DEDUP_WINDOW as u64 - 1;
        assert_eq!(dedup.admit(BatchId(top)), Verdict::New);
        // 9 is the window's bottom now; 4 and 5 fell out of it.
        assert_eq!(dedup.check(BatchId(9)), Verdict::Duplicate);
        assert_eq!(dedup.check(BatchId(8)), Verdict::TooOld);
        assert_eq!(dedup.check(BatchId(5)), Verdict::TooOld);
        assert_eq!(dedup.check(BatchId(10)), Verdict::New);
        assert_eq!(dedup.admitted_in_window(), 2);
    }

    #[test]
    fn a_slot_reused_by_a_later_id_starts_clear() {
        let mut dedup = Dedup::first(BatchId(3));
        let next = 3 + DEDUP_WINDOW as u64;
        // Same ring slot as 3, one window later.
        assert_eq!(dedup.admit(BatchId(next - 1)), Verdict::New);
        assert_eq!(dedup.check(BatchId(next)), Verdict::New);
        assert_eq!(dedup.admit(BatchId(next)), Verdict::New);
        assert_eq!(dedup.check(BatchId(3)), Verdict::TooOld);
        // A jump of more than a window forgets everything below.
        assert_eq!(
            dedup.admit(BatchId(next + 5 * DEDUP_WINDOW as u64)),
            Verdict::New
        );
        assert_eq!(dedup.admitted_in_window(), 1);
    }

    #[test]
    fn a_full_table_evicts_only_an_entry_idle_past_the_horizon() {
        let mut table = DedupTable::new();
        let id = |n: usize| ClientId::new(&format!("c{n}")).expect("valid");
        let t0 = 1_000_000;
        for n in 0..CLIENTS_MAX {
            let now = t0 + n as u64 / 1000;
            assert_eq!(table.admit(&id(n), BatchId(1), now), Ok(Verdict::New));
        }
        table.touch(&id(0), t0 + 10);
        // A flood of new ids within the horizon: refused, nothing evicted.
        let soon = t0 + 10;
        for n in CLIENTS_MAX..CLIENTS_MAX + 10 {
            let full = table.admit(&id(n), BatchId(1), soon).expect_err("full");
            assert_eq!(full.retry_after_secs, CLIENT_IDLE_SECS_MIN - 10);
        }
        assert_eq!(table.evicted(), 0);
        assert_eq!(table.len(), CLIENTS_MAX);
        // A known client goes on.
        assert_eq!(table.admit(&id(5), BatchId(2), soon), Ok(Verdict::New));
        // Past the horizon, the least recently used (id 1, as 0 was
        // touched and 5 used) is evicted.
        let later = t0 + CLIENT_IDLE_SECS_MIN;
        assert_eq!(table.room(&id(CLIENTS_MAX), later), Ok(()));
        assert_eq!(
            table.admit(&id(CLIENTS_MAX), BatchId(1), later),
            Ok(Verdict::New)
        );
        assert_eq!(table.evicted(), 1);
        assert_eq!(table.highest(&id(0)), Some(BatchId(1)));
        assert_eq!(table.highest(&id(1)), None);
        assert_eq!(table.highest(&id(5)), Some(BatchId(2)));
    }

    #[test]
    fn a_replayed_batch_is_never_refused() {
        let mut table = DedupTable::new();
        let id = |n: usize| ClientId::new(&format!("c{n}")).expect("valid");
        for n in 0..CLIENTS_MAX {
            table.admit_logged(&id(n), BatchId(1), 7);
        }
        assert!(table.room(&id(CLIENTS_MAX), 7).is_err());
        assert_eq!(
            table.admit_logged(&id(CLIENTS_MAX), BatchId(1), 7),
            Verdict::New
        );
        assert_eq!(table.evicted(), 1);
    }
}
