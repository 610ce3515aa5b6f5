//! The idempotency keys of HTTP ingest: a bounded table of the keys of
//! recent requests and what each was answered, so a retried `POST` with an
//! `Idempotency-Key` it already carried is answered again, not counted
//! twice (as Stripe's API does, with a bound instead of a day).
//!
//! Keys are opaque to the server: 1 to [`KEY_BYTES_MAX`] visible ASCII
//! bytes (`!`..=`~`), a UUID for example. The table holds the newest
//! [`KEYS_MAX`] keys; a retry after [`KEYS_MAX`] newer requests is taken
//! as new, and the limit is documented for clients. The table is saved in
//! snapshots and rebuilt from the write-ahead log after them, like the
//! native protocol's deduplication table.
//!
//! Image: `"CRDKEYS\0"`, version u32, count u32, then per key (oldest
//! first) its length u8, its bytes, a flag u8 (1: counts known) and
//! accepted u64, rejected u64; a CRC-32 (IEEE) of everything before it.

use std::collections::{HashMap, VecDeque};

use crate::error::Error;

/// The most keys held; the oldest is forgotten first.
pub const KEYS_MAX: usize = 65_536;
/// The longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 128;

const MAGIC: &[u8; 8] = b"CRDKEYS\0";
const VERSION: u32 = 1;

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

/// The table (module doc).
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    order: VecDeque<String>,
    counts: HashMap<String, Counts>,
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

    /// `Some(counts)` when `key` was taken before.
    pub fn get(&self, key: &str) -> Option<Counts> {
        self.counts.get(key).copied()
    }

    /// Takes `key` (forgetting the oldest when full); false when it was
    /// already held.
    pub fn insert(&mut self, key: &str) -> bool {
        if self.counts.contains_key(key) {
            return false;
        }
        if self.order.len() >= KEYS_MAX
            && let Some(oldest) = self.order.pop_front()
        {
            self.counts.remove(&oldest);
        }
        self.order.push_back(key.to_owned());
        self.counts.insert(key.to_owned(), None);
        true
    }

    /// Records what `key`'s request was answered (if it is still held).
    pub fn set_counts(&mut self, key: &str, accepted: u64, rejected: u64) {
        if let Some(counts) = self.counts.get_mut(key) {
            *counts = Some((accepted, rejected));
        }
    }

    /// Appends the table's image (module doc) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        let count = u32::try_from(self.order.len()).expect("KEYS_MAX fits in u32");
        out.extend_from_slice(&count.to_le_bytes());
        for key in &self.order {
            let len = u8::try_from(key.len()).expect("keys are checked to KEY_BYTES_MAX");
            out.push(len);
            out.extend_from_slice(key.as_bytes());
            let (flag, (accepted, rejected)) = match self.counts[key] {
                Some(counts) => (1, counts),
                None => (0, (0, 0)),
            };
            out.push(flag);
            out.extend_from_slice(&accepted.to_le_bytes());
            out.extend_from_slice(&rejected.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// Reads an image made by [`KeyTable::encode`], checking everything.
    pub fn decode(image: &[u8]) -> Result<KeyTable, Error> {
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
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        let count = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
        if count > KEYS_MAX {
            return Err(bad(format!("{count} keys, over the limit of {KEYS_MAX}")));
        }
        let mut rest = &body[16..];
        let mut table = KeyTable::new();
        for i in 0..count {
            let Some((&len, after)) = rest.split_first() else {
                return Err(bad(format!("key {i} is cut short")));
            };
            let len = usize::from(len);
            if after.len() < len + 17 {
                return Err(bad(format!("key {i} is cut short")));
            }
            let key = std::str::from_utf8(&after[..len])
                .map_err(|_| bad(format!("key {i} is not text")))?;
            check_key(key).map_err(|reason| bad(format!("key {i}: {reason}")))?;
            let flag = after[len];
            let accepted = u64::from_le_bytes(after[len + 1..len + 9].try_into().expect("8"));
            let rejected = u64::from_le_bytes(after[len + 9..len + 17].try_into().expect("8"));
            if !table.insert(key) {
                return Err(bad(format!("key {i} appears twice")));
            }
            match flag {
                0 => {}
                1 => table.set_counts(key, accepted, rejected),
                other => return Err(bad(format!("key {i} has flag {other}"))),
            }
            rest = &after[len + 17..];
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes left over", rest.len())));
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_is_taken_once_and_the_oldest_is_forgotten() {
        let mut table = KeyTable::new();
        assert!(table.insert("a"));
        assert!(!table.insert("a"));
        table.set_counts("a", 3, 1);
        assert_eq!(table.get("a"), Some(Some((3, 1))));
        for i in 0..KEYS_MAX {
            table.insert(&format!("k{i}"));
        }
        assert_eq!(table.len(), KEYS_MAX);
        assert_eq!(table.get("a"), None);
        assert!(table.get(&format!("k{}", KEYS_MAX - 1)).is_some());
    }

    #[test]
    fn keys_follow_the_rule() {
        assert!(check_key("0b1f6c3e-7a1d-4c1e-9d8e-2f7a5b3c4d5e").is_ok());
        assert!(check_key("").is_err());
        assert!(check_key("a b").is_err());
        assert!(check_key(&"x".repeat(KEY_BYTES_MAX + 1)).is_err());
        assert!(check_key("é").is_err());
    }

    proptest! {
        #[test]
        fn images_round_trip_and_damage_is_refused(
            keys in proptest::collection::vec(("[!-~]{1,20}", any::<Option<(u64, u64)>>()), 0..40),
            flip in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let mut table = KeyTable::new();
            for (key, counts) in &keys {
                table.insert(key);
                if let Some((a, r)) = counts {
                    table.set_counts(key, *a, *r);
                }
            }
            let mut image = Vec::new();
            table.encode(&mut image);
            let back = KeyTable::decode(&image).expect("decodes");
            let mut again = Vec::new();
            back.encode(&mut again);
            prop_assert_eq!(&again, &image);
            let i = flip.index(image.len());
            image[i] ^= mask;
            prop_assert!(KeyTable::decode(&image).is_err());
            prop_assert!(KeyTable::decode(&again[..again.len() - 1]).is_err());
        }
    }
}
