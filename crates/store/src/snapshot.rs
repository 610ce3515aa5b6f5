//! Snapshots: the engine's whole state at a WAL sequence, in one
//! checksummed file, written atomically, the newest few kept.
//!
//! # Layout
//!
//! `snap-<sequence, 20 digits>.snap`, all integers little-endian:
//!
//! ```text
//! | magic "CARDSNAP" 8 | version u32 | zero u32 | sequence u64 | positions u32 | sections u32 |
//! positions, each:  | name length u16 | name (UTF-8) | position u64 |
//! sections, each:   | name length u16 | name (UTF-8) | length u64 | bytes |
//! | crc32c u32 over every byte before it |
//! ```
//!
//! `sequence` is the last WAL record the state includes: recovery loads
//! the snapshot and replays the WAL after it. *Positions* map a source to
//! how far the state has read it (`"wal"` to that same sequence now; Kafka
//! partitions to their offsets later), so a source is one name, not a
//! format change. *Sections* are opaque named bytes: the server stores a
//! rollup image per summary, the chains and the deduplication table, each
//! checked again by its own decoder. Names are unique and sorted (a
//! `BTreeMap`), so the same state always writes the same bytes.
//!
//! The checksum is checked over the whole file before anything is decoded,
//! and the decoder checks every count and length against the bytes that
//! are left before it allocates, so a damaged or forged file costs no more
//! memory than its own size and never panics. (Under `--cfg fuzzing` the
//! checksum is not enforced, so the fuzzer reaches the structure.)
//!
//! # Writing
//!
//! [`Snapshots::write`] streams the file to `snap-….snap.tmp`, syncs it,
//! renames it over its final name and syncs the directory: a crash leaves
//! either the old set of snapshots or the new one, never a half-written
//! file under a snapshot's name. Then it removes all but the newest
//! [`SNAPSHOTS_KEPT`] and any temp file a crash left behind.
//!
//! # Loading
//!
//! [`Snapshots::load_newest`] tries the newest first; one that fails its
//! checksum or decoder is skipped with its reason (the server logs it) and
//! the previous one is tried. Falling back is safe because WAL segments
//! are removed only through the *oldest kept* snapshot's sequence (the
//! server passes [`Snapshots::oldest_kept`] to `Wal::remove_through`), so
//! the records after any kept snapshot are still in the log.
//! [`Snapshots::write`] refuses a snapshot named below the newest kept,
//! so a stale snapshot can never win over newer state; the server renames
//! damaged ones aside once it has recovered past them.

// Maintainer notes: a layout change bumps `SNAPSHOT_VERSION` and touches
// `Snapshot::encode_head`, `Snapshots::write`, `Snapshot::decode`, the
// fuzz target `fuzz/fuzz_targets/snapshot_file.rs` and the layout above.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Error;
use crate::fs::Dir;

/// The format version in every snapshot.
pub const SNAPSHOT_VERSION: u32 = 1;
/// Snapshots kept on disk: the newest and two to fall back on if it is
/// damaged (three, as a torn or flipped newest file is rare and two bad
/// files in a row rarer still, while each costs a full state's disk).
pub const SNAPSHOTS_KEPT: usize = 3;
/// The longest position or section name: 255 bytes of UTF-8 (a file
/// name's limit; the server's names are at most 64 characters).
pub const NAME_BYTES_MAX: usize = 255;
/// The most positions one snapshot holds: 2^20 sources (Kafka partitions
/// of every topic, with room to spare).
pub const POSITIONS_MAX: usize = 1 << 20;
/// The most sections one snapshot holds: 2^16 (a rollup image per
/// summary, and a few more).
pub const SECTIONS_MAX: usize = 1 << 16;

const MAGIC: [u8; 8] = *b"CARDSNAP";
const HEAD_BYTES: usize = 32;
const CRC_BYTES: usize = 4;
const PREFIX: &str = "snap-";
const SUFFIX: &str = ".snap";
const TEMP_SUFFIX: &str = ".snap.tmp";
const SEQUENCE_DIGITS: usize = 20;

/// The engine's state at a WAL sequence (module docs, Layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The last WAL record the state includes.
    pub sequence: u64,
    /// How far each source has been read.
    pub positions: BTreeMap<String, u64>,
    /// Named opaque bytes.
    pub sections: BTreeMap<String, Vec<u8>>,
}

/// A snapshot's file name for its sequence.
pub fn snapshot_name(sequence: u64) -> String {
    format!("{PREFIX}{sequence:0SEQUENCE_DIGITS$}{SUFFIX}")
}

/// The sequence a snapshot's file name carries, if it is one.
pub fn parse_snapshot_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != SEQUENCE_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn bad(reason: impl Into<String>) -> Error {
    Error::Snapshot {
        name: String::new(),
        reason: reason.into(),
    }
}

fn check_name(kind: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(bad(format!(
            "{kind} name of {} bytes, expected 1..={NAME_BYTES_MAX}",
            name.len()
        )));
    }
    Ok(())
}

/// Reads the snapshot's fields front to back, checking each length first.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], Error> {
        if len > self.left() {
            return Err(bad(format!(
                "{what} of {len} bytes at offset {} runs past the end ({} left)",
                self.at,
                self.left()
            )));
        }
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }
    fn u16(&mut self, what: &str) -> Result<u16, Error> {
        Ok(u16::from_le_bytes(
            self.take(2, what)?.try_into().expect("two bytes"),
        ))
    }
    fn u32(&mut self, what: &str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("four bytes"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("eight bytes"),
        ))
    }
    fn name(&mut self, kind: &str) -> Result<String, Error> {
        let len = usize::from(self.u16(kind)?);
        let bytes = self.take(len, kind)?;
        let name = std::str::from_utf8(bytes).map_err(|_| {
            bad(format!(
                "{kind} name at offset {} is not UTF-8",
                self.at - len
            ))
        })?;
        check_name(kind, name)?;
        Ok(name.to_string())
    }
}

impl Snapshot {
    /// The header and positions: everything before the sections.
    fn encode_head(&self) -> Result<Vec<u8>, Error> {
        if self.positions.len() > POSITIONS_MAX {
            return Err(bad(format!(
                "{} positions, over the limit of {POSITIONS_MAX}",
                self.positions.len()
            )));
        }
        if self.sections.len() > SECTIONS_MAX {
            return Err(bad(format!(
                "{} sections, over the limit of {SECTIONS_MAX}",
                self.sections.len()
            )));
        }
        let mut out = Vec::with_capacity(HEAD_BYTES + self.positions.len() * 32);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.sequence.to_le_bytes());
        let positions = u32::try_from(self.positions.len()).expect("under POSITIONS_MAX");
        let sections = u32::try_from(self.sections.len()).expect("under SECTIONS_MAX");
        out.extend_from_slice(&positions.to_le_bytes());
        out.extend_from_slice(&sections.to_le_bytes());
        for (name, position) in &self.positions {
            check_name("position", name)?;
            push_name(&mut out, name);
            out.extend_from_slice(&position.to_le_bytes());
        }
        Ok(out)
    }

    /// The whole file's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let mut out = self.encode_head()?;
        for (name, bytes) in &self.sections {
            check_name("section", name)?;
            push_name(&mut out, name);
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Reads a snapshot file's bytes: an error, never a panic, for bytes
    /// that are not one.
    pub fn decode(bytes: &[u8]) -> Result<Snapshot, Error> {
        if bytes.len() < HEAD_BYTES + CRC_BYTES {
            return Err(bad(format!(
                "{} bytes, shorter than an empty snapshot ({})",
                bytes.len(),
                HEAD_BYTES + CRC_BYTES
            )));
        }
        let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
        let stored = u32::from_le_bytes(crc.try_into().expect("four bytes"));
        let computed = crc32c::crc32c(body);
        if stored != computed && !cfg!(fuzzing) {
            return Err(bad(format!(
                "checksum {stored:#010x} does not match its bytes ({computed:#010x})"
            )));
        }
        let mut reader = Reader { bytes: body, at: 0 };
        if reader.take(8, "magic")? != MAGIC {
            return Err(bad("not a snapshot (bad magic)"));
        }
        let version = reader.u32("version")?;
        if version != SNAPSHOT_VERSION {
            return Err(bad(format!(
                "version {version}, expected {SNAPSHOT_VERSION}"
            )));
        }
        if reader.u32("reserved")? != 0 {
            return Err(bad("reserved header bytes are not zero"));
        }
        let sequence = reader.u64("sequence")?;
        let positions_count = reader.u32("positions")? as usize;
        let sections_count = reader.u32("sections")? as usize;
        // The smallest position takes 2 + 1 + 8 bytes and the smallest
        // section 2 + 1 + 8: a count the bytes cannot hold is refused
        // before anything is built.
        if positions_count > POSITIONS_MAX || positions_count * 11 > reader.left() {
            return Err(bad(format!(
                "{positions_count} positions do not fit the file"
            )));
        }
        if sections_count > SECTIONS_MAX || sections_count * 11 > reader.left() {
            return Err(bad(format!(
                "{sections_count} sections do not fit the file"
            )));
        }
        let mut positions = BTreeMap::new();
        for _ in 0..positions_count {
            let name = reader.name("position")?;
            let position = reader.u64("position")?;
            if positions.insert(name.clone(), position).is_some() {
                return Err(bad(format!("position {name:?} appears twice")));
            }
        }
        let mut sections = BTreeMap::new();
        for _ in 0..sections_count {
            let name = reader.name("section")?;
            let len = reader.u64("section length")?;
            let len = usize::try_from(len).map_err(|_| bad("section length over usize"))?;
            let data = reader.take(len, "section")?;
            if sections.insert(name.clone(), data.to_vec()).is_some() {
                return Err(bad(format!("section {name:?} appears twice")));
            }
        }
        if reader.left() != 0 {
            return Err(bad(format!(
                "{} bytes after the last section",
                reader.left()
            )));
        }
        Ok(Snapshot {
            sequence,
            positions,
            sections,
        })
    }
}

fn push_name(out: &mut Vec<u8>, name: &str) {
    let len = u16::try_from(name.len()).expect("names are checked to NAME_BYTES_MAX");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(name.as_bytes());
}

/// The newest valid snapshot and the newer ones that were not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// Its file name.
    pub name: String,
    /// Newer snapshot files that were skipped, and why, newest first.
    pub skipped: Vec<String>,
}

/// The snapshots in a directory (module docs, Writing and Loading).
#[derive(Debug, Clone)]
pub struct Snapshots {
    dir: Arc<dyn Dir>,
}

impl Snapshots {
    /// The snapshots in `dir` (may be the WAL's directory: names differ).
    pub fn new(dir: Arc<dyn Dir>) -> Snapshots {
        Snapshots { dir }
    }

    /// The snapshot files' sequences and names, oldest first.
    pub fn list(&self) -> Result<Vec<(u64, String)>, Error> {
        let names = self.dir.list().map_err(|e| Error::io("list", "", e))?;
        let mut found: Vec<(u64, String)> = names
            .into_iter()
            .filter_map(|name| parse_snapshot_name(&name).map(|s| (s, name)))
            .collect();
        found.sort();
        Ok(found)
    }

    /// The sequence of the oldest snapshot kept: WAL segments through it
    /// may be removed (module docs, Loading).
    pub fn oldest_kept(&self) -> Result<Option<u64>, Error> {
        Ok(self.list()?.first().map(|(sequence, _)| *sequence))
    }

    /// Writes `snapshot` durably (module docs, Writing); returns its file
    /// name.
    ///
    /// Refuses a snapshot named below the newest one kept: snapshots only
    /// move forward (loading takes the newest name, so one written below
    /// it would never be loaded, and the stale one would win).
    pub fn write(&self, snapshot: &Snapshot) -> Result<String, Error> {
        let name = snapshot_name(snapshot.sequence);
        if let Some((newest, newest_name)) = self.list()?.pop()
            && snapshot.sequence < newest
        {
            return Err(Error::Snapshot {
                name,
                reason: format!(
                    "named below {newest_name}, which is kept: snapshots only move forward"
                ),
            });
        }
        let temp = format!(
            "{PREFIX}{:0SEQUENCE_DIGITS$}{TEMP_SUFFIX}",
            snapshot.sequence
        );
        let head = snapshot.encode_head()?;
        let io = |op, e| Error::io(op, &temp, e);
        let mut file = self.dir.create(&temp).map_err(|e| io("create", e))?;
        let mut crc = crc32c::crc32c(&head);
        file.append(&head).map_err(|e| io("append", e))?;
        let mut section_head = Vec::with_capacity(2 + NAME_BYTES_MAX + 8);
        for (section, bytes) in &snapshot.sections {
            check_name("section", section)?;
            section_head.clear();
            push_name(&mut section_head, section);
            section_head.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            crc = crc32c::crc32c_append(crc, &section_head);
            crc = crc32c::crc32c_append(crc, bytes);
            file.append(&section_head).map_err(|e| io("append", e))?;
            file.append(bytes).map_err(|e| io("append", e))?;
        }
        file.append(&crc.to_le_bytes())
            .map_err(|e| io("append", e))?;
        file.sync_data().map_err(|e| io("sync_data", e))?;
        drop(file);
        self.dir
            .rename(&temp, &name)
            .map_err(|e| Error::io("rename", &temp, e))?;
        self.dir
            .sync_dir()
            .map_err(|e| Error::io("sync_dir", "", e))?;
        self.prune()?;
        Ok(name)
    }

    /// Removes all but the newest [`SNAPSHOTS_KEPT`] and leftover temp
    /// files.
    fn prune(&self) -> Result<(), Error> {
        let names = self.dir.list().map_err(|e| Error::io("list", "", e))?;
        let mut doomed: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with(PREFIX) && n.ends_with(TEMP_SUFFIX))
            .collect();
        let found = self.list()?;
        let extra = found.len().saturating_sub(SNAPSHOTS_KEPT);
        doomed.extend(found.into_iter().take(extra).map(|(_, name)| name));
        for name in &doomed {
            self.dir
                .remove(name)
                .map_err(|e| Error::io("remove", name, e))?;
        }
        if !doomed.is_empty() {
            self.dir
                .sync_dir()
                .map_err(|e| Error::io("sync_dir", "", e))?;
        }
        Ok(())
    }

    /// The newest snapshot that reads back whole, falling back past
    /// damaged ones (their reasons in [`Loaded::skipped`]). `Ok(None)` when
    /// there is no snapshot file; [`Error::NoValidSnapshot`] when there are
    /// some and none is valid.
    pub fn load_newest(&self) -> Result<Option<Loaded>, Error> {
        let found = self.list()?;
        if found.is_empty() {
            return Ok(None);
        }
        let mut skipped = Vec::new();
        for (sequence, name) in found.into_iter().rev() {
            let bytes = self
                .dir
                .read(&name)
                .map_err(|e| Error::io("read", &name, e))?;
            match Snapshot::decode(&bytes) {
                Ok(snapshot) if snapshot.sequence == sequence => {
                    return Ok(Some(Loaded {
                        snapshot,
                        name,
                        skipped,
                    }));
                }
                Ok(snapshot) => skipped.push(format!(
                    "snapshot {name}: holds sequence {}, its name says {sequence}",
                    snapshot.sequence
                )),
                Err(Error::Snapshot { reason, .. }) => {
                    skipped.push(format!("snapshot {name}: {reason}"));
                }
                Err(other) => return Err(other),
            }
        }
        Err(Error::NoValidSnapshot { reasons: skipped })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::SimDir;

    fn sample(sequence: u64) -> Snapshot {
        let mut snapshot = Snapshot {
            sequence,
            ..Snapshot::default()
        };
        snapshot.positions.insert("wal".to_string(), sequence);
        snapshot
            .positions
            .insert("kafka/events/3".to_string(), 9_000);
        snapshot
            .sections
            .insert("rollup/daily".to_string(), vec![7; 100]);
        snapshot.sections.insert("dedup".to_string(), Vec::new());
        snapshot
    }

    #[test]
    fn encode_decode_round_trips() {
        let snapshot = sample(42);
        let bytes = snapshot.encode().expect("encode");
        assert_eq!(Snapshot::decode(&bytes).expect("decode"), snapshot);
        assert_eq!(snapshot.encode().expect("again"), bytes);
    }

    #[test]
    fn every_flip_and_every_cut_is_refused() {
        let bytes = sample(42).encode().expect("encode");
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x10;
            assert!(Snapshot::decode(&flipped).is_err(), "byte {i}");
        }
        for len in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..len]).is_err(), "length {len}");
        }
    }

    #[test]
    fn a_forged_count_is_refused_before_allocating() {
        let mut bytes = Snapshot::default().encode().expect("encode");
        bytes[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let body = bytes.len() - 4;
        let crc = crc32c::crc32c(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        let err = Snapshot::decode(&bytes).expect_err("forged");
        assert!(err.to_string().contains("do not fit"), "{err}");
    }

    #[test]
    fn write_keeps_the_newest_and_streams_the_same_bytes_as_encode() {
        let dir = SimDir::new();
        let snapshots = Snapshots::new(Arc::new(dir.clone()));
        for sequence in [10, 20, 30, 40, 50] {
            snapshots.write(&sample(sequence)).expect("write");
        }
        let kept: Vec<u64> = snapshots
            .list()
            .expect("list")
            .iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(kept, vec![30, 40, 50]);
        assert_eq!(snapshots.oldest_kept().expect("oldest"), Some(30));
        assert_eq!(
            dir.read(&snapshot_name(50)).expect("read"),
            sample(50).encode().expect("encode")
        );
        let loaded = snapshots.load_newest().expect("load").expect("some");
        assert_eq!(loaded.snapshot, sample(50));
        assert!(loaded.skipped.is_empty());
        // Issue 43, item 6b: never named below the newest kept.
        let below = snapshots.write(&sample(45)).expect_err("below");
        assert!(below.to_string().contains("only move forward"), "{below}");
        snapshots
            .write(&sample(50))
            .expect("the same name replaces");
    }

    #[test]
    fn a_damaged_newest_falls_back_with_a_reason() {
        let dir = SimDir::new();
        let snapshots = Snapshots::new(Arc::new(dir.clone()));
        snapshots.write(&sample(1)).expect("write");
        snapshots.write(&sample(2)).expect("write");
        let name = snapshot_name(2);
        let len = dir.len_of(&name).expect("exists");
        dir.poke(&name, len / 2, 0xff);
        let loaded = snapshots.load_newest().expect("load").expect("some");
        assert_eq!(loaded.snapshot, sample(1));
        assert_eq!(loaded.skipped.len(), 1);
        assert!(
            loaded.skipped[0].contains("checksum"),
            "{:?}",
            loaded.skipped
        );
        // Both damaged: no valid snapshot, with both reasons.
        dir.poke(&snapshot_name(1), 3, 0);
        match snapshots.load_newest() {
            Err(Error::NoValidSnapshot { reasons }) => assert_eq!(reasons.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_snapshot_is_none() {
        let snapshots = Snapshots::new(Arc::new(SimDir::new()));
        assert_eq!(snapshots.load_newest().expect("load"), None);
    }
}
