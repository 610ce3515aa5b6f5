//! Exactly-once for syslog: the recent message ids of each sender, in
//! bounded memory, saved in snapshots.
//!
//! RELP transaction numbers restart with every session, so they cannot
//! tell a resent message from a new one. A sender that puts a unique id
//! in each message (an rsyslog template writing one into MSGID or into
//! structured data: `docs/syslog.md`) can: the server keeps, per sender,
//! the ids of the last [`IDS_PER_SENDER`] messages it admitted, and a
//! message whose id is among them is acknowledged again and not counted.
//!
//! **Why a window of recent ids is enough.** rsyslog's `omrelp` resends,
//! after a reconnect, the messages of its window that were never
//! acknowledged: at most `windowSize` (128 by default) messages, the last
//! it sent. The ones the server had admitted are therefore among the
//! newest ids the server holds for that sender, so a window of 1,024 ids,
//! eight times the default `windowSize`, holds every id a resend can
//! carry. Ids need not be ordered or numeric: a UUID, a sequence number
//! or a file offset all work, since the window compares digests.
//!
//! **Digests.** An id is kept as its 64-bit digest ([`id_digest`]): fixed
//! across builds and platforms, since snapshots carry it. Two distinct
//! ids of one sender whose digests collide within one window (1,024 ids)
//! happen with probability about `1024^2 / 2^65`, 3e-14: the later one
//! would be taken as a duplicate. A sender can only collide with itself.
//!
//! **Senders.** A sender is the message's HOSTNAME and APP-NAME, joined by
//! `/`. The table holds at most [`SENDERS_MAX`]; a new sender in a full
//! table evicts the least recently used one only if it has been idle for
//! [`SENDER_IDLE_SECS_MIN`], and is refused otherwise ([`Full`], which a
//! RELP listener answers with `rsp 500`, so rsyslog keeps the message in
//! its queue and retries): a flood of new senders waits, and never makes
//! the server forget a sender that was active within the horizon. The
//! same rules as the native protocol's table of client ids.
//!
//! **Memory.** A sender's window is a ring of digests, grown as needed to
//! [`IDS_PER_SENDER`] (8 KiB), so the table holds at most 8 MiB of
//! digests; a lookup scans one sender's ring (1,024 compares).
//!
//! # Image
//!
//! ```text
//!  header  | magic "CRDSYSID" | version u32 = 1 | senders u32 |               16 B
//!  senders | name len u16 | name | used secs u64 | ids u16 | ids × digest u64 |
//!          |   least recently used first; digests oldest first
//!  trailer | crc32 of every byte before it u32 |
//! ```
//!
//! Little-endian. The decoder checks the checksum first (CRC-32/ISO-HDLC),
//! then every count against the bytes left before sizing anything from
//! it, each name by [`check_sender`], no sender twice, the order of use,
//! and never panics.

use std::collections::HashMap;

/// Ids remembered per sender: 1,024, eight times rsyslog `omrelp`'s
/// default `windowSize` (128). An `omrelp` whose `windowSize` is larger
/// than this could resend an id the window already dropped, and that
/// message would count twice: `docs/syslog.md` says to keep it at most
/// this.
pub const IDS_PER_SENDER: usize = 1024;

/// Senders the table remembers: 1,024, at most 8 MiB of digests and as
/// much in each snapshot.
pub const SENDERS_MAX: usize = 1024;

/// How long a sender must be idle before a new sender may evict it: 15
/// minutes, as for the native protocol's clients. rsyslog retries a
/// suspended action within seconds to minutes (`action.resumeInterval`,
/// 30 s by default), so its resends fall well inside it.
pub const SENDER_IDLE_SECS_MIN: u64 = 15 * 60;

/// The longest id taken: 128 bytes. RFC 5424 caps MSGID at 32; structured
/// data values can be longer (a UUID is 36), and 128 leaves room. A
/// longer id is refused as a reject, never truncated (two ids sharing a
/// prefix would collide).
pub const ID_BYTES_MAX: usize = 128;

/// The longest sender name: HOSTNAME (at most 255 bytes), `/`, APP-NAME
/// (at most 48 bytes), as RFC 5424 caps them.
pub const SENDER_BYTES_MAX: usize = 255 + 1 + 48;

const MAGIC: &[u8; 8] = b"CRDSYSID";
const IMAGE_VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;

const _: () = assert!(IDS_PER_SENDER <= u16::MAX as usize);
const _: () = assert!(SENDER_BYTES_MAX <= u16::MAX as usize);

/// The 64-bit digest of a message id: FNV-1a over its bytes, then a
/// splitmix64 finalizer so that near ids (sequence numbers, offsets)
/// spread over all 64 bits. Fixed: snapshots carry these digests.
pub fn id_digest(id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in id {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= id.len() as u64;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Checks a sender name: 1 to [`SENDER_BYTES_MAX`] bytes of printable
/// ASCII without spaces (what RFC 5424 allows in HOSTNAME and APP-NAME,
/// with the `/` that joins them).
pub fn check_sender(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > SENDER_BYTES_MAX {
        return Err(format!(
            "a sender name of {} bytes; 1 to {SENDER_BYTES_MAX} are allowed",
            name.len()
        ));
    }
    if let Some(b) = name.bytes().find(|b| !(33..=126).contains(b)) {
        return Err(format!("a sender name with byte {b:#04x}"));
    }
    Ok(())
}

/// The table is full of senders active within [`SENDER_IDLE_SECS_MIN`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the table of syslog senders is full of recent senders; retry in {retry_after_secs} s")]
pub struct Full {
    /// Seconds until the least recently used sender becomes evictable.
    pub retry_after_secs: u64,
}

/// A damaged or foreign image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the syslog id table's image is damaged: {0}")]
pub struct ImageError(String);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    /// Digests, oldest first once the ring has wrapped at `next`.
    ring: Vec<u64>,
    /// Where the next digest goes once `ring` is full.
    next: usize,
    used: u64,
}

impl Window {
    fn contains(&self, digest: u64) -> bool {
        self.ring.contains(&digest)
    }

    fn push(&mut self, digest: u64, window: usize) {
        if self.ring.len() < window {
            self.ring.push(digest);
        } else {
            self.ring[self.next] = digest;
            self.next = (self.next + 1) % window;
        }
    }

    fn oldest_first(&self) -> impl Iterator<Item = u64> + '_ {
        let (newer, older) = self.ring.split_at(self.next);
        older.iter().chain(newer).copied()
    }
}

/// The recent message ids of every sender (module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdTable {
    senders: HashMap<String, Window>,
    senders_max: usize,
    ids_per_sender: usize,
    evicted: u64,
}

impl Default for IdTable {
    fn default() -> Self {
        IdTable::new()
    }
}

impl IdTable {
    /// An empty table with the documented limits.
    pub fn new() -> IdTable {
        IdTable::with_limits(SENDERS_MAX, IDS_PER_SENDER)
    }

    /// An empty table with other limits (tests).
    pub fn with_limits(senders_max: usize, ids_per_sender: usize) -> IdTable {
        assert!(senders_max >= 1 && (1..=IDS_PER_SENDER).contains(&ids_per_sender));
        IdTable {
            senders: HashMap::new(),
            senders_max,
            ids_per_sender,
            evicted: 0,
        }
    }

    /// How many senders the table holds.
    pub fn senders(&self) -> usize {
        self.senders.len()
    }

    /// Senders evicted to make room, since this table was made.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Whether `sender` has a message with this id digest admitted within
    /// its window.
    pub fn contains(&self, sender: &str, digest: u64) -> bool {
        self.senders.get(sender).is_some_and(|w| w.contains(digest))
    }

    /// Makes room for `sender` if it is new: evicts the least recently
    /// used sender when the table is full and that one is idle for
    /// [`SENDER_IDLE_SECS_MIN`], or refuses ([`Full`]) and evicts nothing.
    pub fn room(&mut self, sender: &str, now: u64) -> Result<(), Full> {
        if self.senders.contains_key(sender) || self.senders.len() < self.senders_max {
            return Ok(());
        }
        let (oldest, used) = self
            .senders
            .iter()
            .map(|(name, w)| (name, w.used))
            .min_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)))
            .expect("a full table has senders");
        let idle = now.saturating_sub(used);
        if idle < SENDER_IDLE_SECS_MIN {
            return Err(Full {
                retry_after_secs: SENDER_IDLE_SECS_MIN - idle,
            });
        }
        let oldest = oldest.clone();
        self.senders.remove(&oldest);
        self.evicted += 1;
        Ok(())
    }

    /// Makes room for every new sender among `senders` at once (a batch
    /// may carry several): evicts least recently used senders idle for
    /// [`SENDER_IDLE_SECS_MIN`] until they fit, or refuses ([`Full`]) and
    /// evicts nothing.
    pub fn room_many<'a>(
        &mut self,
        senders: impl IntoIterator<Item = &'a str>,
        now: u64,
    ) -> Result<(), Full> {
        let mut new: Vec<&str> = senders
            .into_iter()
            .filter(|s| !self.senders.contains_key(*s))
            .collect();
        new.sort_unstable();
        new.dedup();
        let free = self.senders_max.saturating_sub(self.senders.len());
        if new.len() <= free {
            return Ok(());
        }
        let short = new.len() - free;
        if new.len() > self.senders_max {
            return Err(Full {
                retry_after_secs: SENDER_IDLE_SECS_MIN,
            });
        }
        let mut by_use: Vec<(u64, &String)> = self
            .senders
            .iter()
            .map(|(name, w)| (w.used, name))
            .collect();
        by_use.sort_unstable();
        let idle = now.saturating_sub(by_use[short - 1].0);
        if idle < SENDER_IDLE_SECS_MIN {
            return Err(Full {
                retry_after_secs: SENDER_IDLE_SECS_MIN - idle,
            });
        }
        let evict: Vec<String> = by_use[..short].iter().map(|(_, n)| (*n).clone()).collect();
        for name in evict {
            self.senders.remove(&name);
            self.evicted += 1;
        }
        Ok(())
    }

    /// Admits a message id of `sender` (after [`IdTable::room`] said yes
    /// for it). Panics if the table has no room: the caller checks first,
    /// under the same lock.
    pub fn admit(&mut self, sender: &str, digest: u64, now: u64) {
        assert!(
            self.senders.contains_key(sender) || self.senders.len() < self.senders_max,
            "room was checked for sender {sender}"
        );
        self.take(sender, digest, now);
    }

    /// Admits an id the log holds (recovery): the log never held more
    /// than a running table took, so room is made by evicting the least
    /// recently used sender whatever its age.
    pub fn admit_logged(&mut self, sender: &str, digest: u64, now: u64) {
        if !self.senders.contains_key(sender) && self.senders.len() >= self.senders_max {
            let oldest = self
                .senders
                .iter()
                .min_by(|a, b| a.1.used.cmp(&b.1.used).then_with(|| a.0.cmp(b.0)))
                .map(|(name, _)| name.clone())
                .expect("a full table has senders");
            self.senders.remove(&oldest);
            self.evicted += 1;
        }
        self.take(sender, digest, now);
    }

    fn take(&mut self, sender: &str, digest: u64, now: u64) {
        let window = self.ids_per_sender;
        let entry = match self.senders.get_mut(sender) {
            Some(entry) => entry,
            None => self.senders.entry(sender.to_owned()).or_insert(Window {
                ring: Vec::new(),
                next: 0,
                used: now,
            }),
        };
        entry.used = entry.used.max(now);
        if !entry.contains(digest) {
            entry.push(digest, window);
        }
    }

    /// Appends the image (module doc) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
        let n = u32::try_from(self.senders.len()).expect("senders fit in u32");
        out.extend_from_slice(&n.to_le_bytes());
        let mut senders: Vec<(&String, &Window)> = self.senders.iter().collect();
        senders.sort_by(|a, b| a.1.used.cmp(&b.1.used).then_with(|| a.0.cmp(b.0)));
        for (name, window) in senders {
            let len = u16::try_from(name.len()).expect("sender names are checked");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&window.used.to_le_bytes());
            let ids = u16::try_from(window.ring.len()).expect("a window fits in u16");
            out.extend_from_slice(&ids.to_le_bytes());
            for digest in window.oldest_first() {
                out.extend_from_slice(&digest.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads an image made by [`IdTable::encode`] (module doc), with the
    /// documented limits.
    pub fn decode(image: &[u8]) -> Result<IdTable, ImageError> {
        let bad = |what: String| ImageError(what);
        if image.len() < HEADER_BYTES + 4 {
            return Err(bad(format!("{} bytes, too short", image.len())));
        }
        if &image[..8] != MAGIC {
            return Err(bad("not a syslog id table (magic)".into()));
        }
        let version = u32::from_le_bytes(image[8..12].try_into().expect("4"));
        if version != IMAGE_VERSION {
            return Err(bad(format!(
                "version {version}; this build reads {IMAGE_VERSION}"
            )));
        }
        let (body, crc) = image.split_at(image.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("4"));
        let computed = crc32fast::hash(body);
        if stored != computed && !cfg!(fuzzing) {
            return Err(bad(format!(
                "checksum {stored:#010x}, computed {computed:#010x}"
            )));
        }
        let n = u32::from_le_bytes(body[12..16].try_into().expect("4")) as usize;
        let mut rest = &body[HEADER_BYTES..];
        // A sender is at least 2 + 1 + 8 + 2 bytes of image.
        if n > SENDERS_MAX || n > rest.len() / 13 {
            return Err(bad(format!("{n} senders in {} bytes", rest.len())));
        }
        let mut table = IdTable::new();
        let mut previous: Option<(u64, String)> = None;
        for _ in 0..n {
            let mut take = |len: usize| -> Result<&[u8], ImageError> {
                if rest.len() < len {
                    return Err(bad("cut short".into()));
                }
                let (head, tail) = rest.split_at(len);
                rest = tail;
                Ok(head)
            };
            let len = u16::from_le_bytes(take(2)?.try_into().expect("2")) as usize;
            let name = std::str::from_utf8(take(len)?)
                .map_err(|_| bad("a sender name that is not UTF-8".into()))?
                .to_owned();
            check_sender(&name).map_err(bad)?;
            let used = u64::from_le_bytes(take(8)?.try_into().expect("8"));
            let ids = u16::from_le_bytes(take(2)?.try_into().expect("2")) as usize;
            if ids == 0 || ids > IDS_PER_SENDER {
                return Err(bad(format!("sender {name} with {ids} ids")));
            }
            let digests = take(ids * 8)?;
            let key = (used, name.clone());
            if previous.as_ref().is_some_and(|p| *p >= key) {
                return Err(bad(format!("sender {name} out of order of use")));
            }
            previous = Some(key);
            let mut window = Window {
                ring: Vec::with_capacity(ids),
                next: 0,
                used,
            };
            for chunk in digests.chunks_exact(8) {
                let digest = u64::from_le_bytes(chunk.try_into().expect("8"));
                if window.contains(digest) {
                    return Err(bad(format!("sender {name} with an id twice")));
                }
                window.ring.push(digest);
            }
            if table.senders.insert(name.clone(), window).is_some() {
                return Err(bad(format!("sender {name} twice")));
            }
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes after the last sender", rest.len())));
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resent_id_is_known_until_the_window_passes_it() {
        let mut table = IdTable::with_limits(4, 8);
        for id in 0..8u32 {
            let digest = id_digest(id.to_string().as_bytes());
            assert!(!table.contains("h/app", digest));
            table.room("h/app", 100).expect("room");
            table.admit("h/app", digest, 100);
        }
        assert!((0..8u32).all(|id| table.contains("h/app", id_digest(id.to_string().as_bytes()))));
        assert!(!table.contains("other/app", id_digest(b"0")));
        table.admit("h/app", id_digest(b"8"), 101);
        assert!(!table.contains("h/app", id_digest(b"0")), "the oldest left");
        assert!(table.contains("h/app", id_digest(b"1")));
        assert!(table.contains("h/app", id_digest(b"8")));
    }

    #[test]
    fn a_flood_of_new_senders_waits_and_evicts_only_idle_ones() {
        let mut table = IdTable::with_limits(2, 4);
        table.admit("a/x", 1, 1_000);
        table.admit("b/x", 2, 1_010);
        let full = table.room("c/x", 1_100).expect_err("recent senders");
        assert_eq!(full.retry_after_secs, SENDER_IDLE_SECS_MIN - 100);
        assert_eq!(table.senders(), 2);
        assert!(table.room("a/x", 1_100).is_ok(), "a known sender has room");
        table
            .room("c/x", 1_000 + SENDER_IDLE_SECS_MIN)
            .expect("a is idle");
        table.admit("c/x", 3, 1_000 + SENDER_IDLE_SECS_MIN);
        assert!(!table.contains("a/x", 1) && table.contains("b/x", 2));
        assert_eq!(table.evicted(), 1);
    }

    #[test]
    fn room_for_several_new_senders_is_made_at_once_or_not_at_all() {
        let mut table = IdTable::with_limits(3, 4);
        table.admit("a/x", 1, 1_000);
        table.admit("b/x", 2, 5_000);
        assert!(
            table.room_many(["c/x", "d/x"], 1_500).is_err(),
            "a is recent"
        );
        assert_eq!(table.senders(), 2, "nothing evicted");
        table
            .room_many(["c/x", "d/x", "c/x"], 1_000 + SENDER_IDLE_SECS_MIN)
            .expect("a is idle");
        assert_eq!(table.senders(), 1);
        table.admit("c/x", 3, 1_000 + SENDER_IDLE_SECS_MIN);
        table.admit("d/x", 4, 1_000 + SENDER_IDLE_SECS_MIN);
        assert!(table.contains("b/x", 2) && !table.contains("a/x", 1));
    }

    #[test]
    fn images_round_trip_and_refuse_damage() {
        let mut table = IdTable::new();
        for (i, sender) in ["web1/nginx", "web2/nginx", "db/pg"].iter().enumerate() {
            for id in 0..(IDS_PER_SENDER + 7 * i) {
                table.admit(sender, id_digest(&id.to_le_bytes()), 50 + i as u64);
            }
        }
        let mut image = Vec::new();
        table.encode(&mut image);
        let back = IdTable::decode(&image).expect("decodes");
        for sender in ["web1/nginx", "web2/nginx", "db/pg"] {
            assert_eq!(
                back.senders[sender].oldest_first().collect::<Vec<_>>(),
                table.senders[sender].oldest_first().collect::<Vec<_>>()
            );
        }
        let mut again = Vec::new();
        back.encode(&mut again);
        assert_eq!(again, image, "stable bytes");
        for cut in 0..image.len() {
            assert!(IdTable::decode(&image[..cut]).is_err(), "cut at {cut}");
        }
        for at in [0, 9, 13, 17, 40, image.len() - 1] {
            let mut flipped = image.clone();
            flipped[at] ^= 0x10;
            assert!(IdTable::decode(&flipped).is_err(), "flip at {at}");
        }
    }

    #[test]
    fn digests_are_fixed() {
        // Snapshots carry digests: a change here breaks every saved table.
        assert_eq!(id_digest(b""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(id_digest(b"42"), 0x05b8_9bf6_8de9_61bc);
        assert_ne!(id_digest(b"1"), id_digest(b"2"));
    }
}
