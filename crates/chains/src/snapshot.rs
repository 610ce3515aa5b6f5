//! Snapshots: the whole store as one checksummed stream, by content.
//!
//! ```text
//!  header   (44 B)  | magic "CRDCHAIN" | version u32 = 2 | shard_bits u8 | group_bits u8 | 0 u16 |
//!                   | lookback_ms u64 | shard_slots_initial u32 | 0 u32 | clock_ms u64 |
//!                   | crc32 of bytes 0..40 u32 |
//!  section  x 2^shard_bits, in shard order:
//!           | key_count u64 | body_bytes u64 | body | crc32 of (key_count, body_bytes, body) u32 |
//!           body = key_count x | user_id u64 | chain_bytes u16 | chain (record encodings) |
//!  trailer  (24 B)  | magic "CHAINEND" | keys u64 | crc32 of the section crcs u32 | crc32 of bytes 0..20 u32 |
//! ```
//!
//! `clock_ms` is the trim clock (the latest of the groups'): a restored
//! store expires records as the written one did. Only records that have
//! not expired at the clock are written, and only users that have one.
//!
//! Little-endian throughout; crc32 is CRC-32/ISO-HDLC (`crc32fast`). Chains
//! are stored by content, not as arena pages: a restore walks and checks
//! every record anyway (a decoder never trusts bytes), so copying pages
//! would save little, and content snapshots survive any change of size
//! classes or page size. Restoring presizes each shard from its
//! `key_count`, so no shard grows while loading.
//!
//! The decoder never panics and never allocates more than a small multiple
//! of the bytes it has read. Nothing is sized from the header, which a crc
//! does not protect against forgery: a group (and its arena) is created at
//! its first section and each shard's table at its own section, sized from
//! `key_count` alone; a shard without keys gets a table of no slots, and
//! `shard_slots_initial` only sets what shards grow to later. A section
//! body is read through `Read::take`, which grows the buffer only as bytes
//! arrive; `key_count` must fit in the body at 26 bytes per key (8 + 2 + a
//! 16-byte record) before a shard is presized. So a section of 20 bytes
//! costs at most a table entry and a group, and a key at most ~2 slots.
//!
//! Files are written to `<path>.tmp`, synced, renamed over `<path>` and the
//! directory synced, so a crash leaves either the old or the new snapshot.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::arena::CHAIN_BYTES_MAX;
use crate::error::{Error, Result};
use crate::record::Record;
use crate::store::{Config, ShardGroup, Store, malformed};

const MAGIC: &[u8; 8] = b"CRDCHAIN";
const TRAILER_MAGIC: &[u8; 8] = b"CHAINEND";
/// The snapshot format version this crate writes and reads.
pub const SNAPSHOT_VERSION: u32 = 2;
const HEADER_BYTES: usize = 44;
const TRAILER_BYTES: usize = 24;
const ENTRY_BYTES_MIN: u64 = 8 + 2 + crate::record::RECORD_BYTES_MIN as u64;
const IO_BUFFER_BYTES: usize = 1 << 20;

/// What a snapshot write or restore moved, and how fast.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SnapshotStats {
    /// Bytes of the snapshot.
    pub bytes: u64,
    /// Chains in it.
    pub keys: u64,
    /// Wall time of the whole write (sync and rename included) or restore.
    pub elapsed: Duration,
}

impl SnapshotStats {
    /// Snapshot bytes per second, in GB (10^9 bytes).
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
}

struct CountingWriter<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> CountingWriter<W> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.write_all(bytes)?;
        self.bytes += bytes.len() as u64;
        Ok(())
    }
}

impl Store {
    /// Writes the whole store to `out` in the snapshot format; returns the
    /// bytes written and keys (`elapsed` is left zero).
    pub fn snapshot(&self, out: impl Write) -> Result<SnapshotStats> {
        let config = self.config();
        let mut w = CountingWriter {
            inner: out,
            bytes: 0,
        };
        let mut header = Vec::with_capacity(HEADER_BYTES);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        header.extend_from_slice(&[config.shard_bits, config.group_bits, 0, 0]);
        header.extend_from_slice(&config.lookback_ms.to_le_bytes());
        header.extend_from_slice(&config.shard_slots_initial.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        let clock_ms = self.groups().iter().map(ShardGroup::clock_ms).max();
        header.extend_from_slice(&clock_ms.unwrap_or(0).to_le_bytes());
        header.extend_from_slice(&crc32fast::hash(&header).to_le_bytes());
        assert_eq!(header.len(), HEADER_BYTES);
        w.put(&header)?;

        let mut body = Vec::new();
        let mut crcs = crc32fast::Hasher::new();
        let mut keys = 0u64;
        for group in self.groups() {
            for shard in 0..group.shard_count_local() {
                body.clear();
                body.extend_from_slice(&0u64.to_le_bytes());
                body.extend_from_slice(&0u64.to_le_bytes());
                let mut count = 0u64;
                group.for_each_chain(shard, |key, chain| {
                    let chain_bytes =
                        u16::try_from(chain.len()).expect("chains are at most CHAIN_BYTES_MAX");
                    body.extend_from_slice(&key.to_le_bytes());
                    body.extend_from_slice(&chain_bytes.to_le_bytes());
                    body.extend_from_slice(chain);
                    count += 1;
                });
                assert!(count <= u64::from(group.shard_len(shard)));
                let body_bytes = body.len() as u64 - 16;
                body[..8].copy_from_slice(&count.to_le_bytes());
                body[8..16].copy_from_slice(&body_bytes.to_le_bytes());
                let crc = crc32fast::hash(&body);
                body.extend_from_slice(&crc.to_le_bytes());
                crcs.update(&crc.to_le_bytes());
                w.put(&body)?;
                keys += count;
            }
        }
        assert!(keys <= self.keys());
        let mut trailer = Vec::with_capacity(TRAILER_BYTES);
        trailer.extend_from_slice(TRAILER_MAGIC);
        trailer.extend_from_slice(&keys.to_le_bytes());
        trailer.extend_from_slice(&crcs.finalize().to_le_bytes());
        trailer.extend_from_slice(&crc32fast::hash(&trailer).to_le_bytes());
        w.put(&trailer)?;
        w.inner.flush()?;
        Ok(SnapshotStats {
            bytes: w.bytes,
            keys,
            elapsed: Duration::ZERO,
        })
    }

    /// Reads a snapshot written by [`Store::snapshot`]. Returns an error,
    /// never panics, whatever the bytes; the layout comes from the header.
    pub fn restore(input: impl Read) -> Result<Store> {
        let mut input = input;
        let mut header = [0u8; HEADER_BYTES];
        read_exact(&mut input, &mut header, "header")?;
        if &header[..8] != MAGIC {
            return Err(malformed(
                "the header does not start with CRDCHAIN".to_string(),
            ));
        }
        let version = u32_at(&header, 8);
        if version != SNAPSHOT_VERSION {
            return Err(Error::SnapshotVersion {
                expected: SNAPSHOT_VERSION,
                found: version,
            });
        }
        check_crc(&header, "header", 0)?;
        let config = Config {
            shard_bits: header[12],
            group_bits: header[13],
            lookback_ms: u64_at(&header, 16),
            shard_slots_initial: u32_at(&header, 24),
        };
        let clock_ms = u64_at(&header, 32);
        if header[14..16] != [0, 0] || u32_at(&header, 28) != 0 {
            return Err(malformed("reserved header bytes are not zero".to_string()));
        }
        config.validate()?;

        // Nothing is sized from the header: a group and its arena come into
        // being with its first section, each shard's table with its own
        // section, sized from its key count.
        let mut groups: Vec<ShardGroup> = Vec::new();
        let mut crcs = crc32fast::Hasher::new();
        let mut body = Vec::new();
        let mut keys = 0u64;
        let per_group = config.shards_per_group();
        for global in 0..config.shard_count() {
            let index = u64::from(global);
            let mut head = [0u8; 16];
            read_exact(&mut input, &mut head, "section")?;
            let count = u64_at(&head, 0);
            let body_bytes = u64_at(&head, 8);
            if count > body_bytes / ENTRY_BYTES_MIN {
                return Err(malformed(format!(
                    "shard {index}: {count} keys cannot fit in {body_bytes} bytes"
                )));
            }
            body.clear();
            body.extend_from_slice(&head);
            let read = input
                .by_ref()
                .take(body_bytes.saturating_add(4))
                .read_to_end(&mut body)?;
            if read as u64 != body_bytes.saturating_add(4) {
                return Err(Error::SnapshotTruncated {
                    part: "section",
                    expected: body_bytes.saturating_add(4),
                    found: read as u64,
                });
            }
            check_crc(&body, "shard", index)?;
            let crc_at = body.len() - 4;
            crcs.update(&body[crc_at..]);
            if global % per_group == 0 {
                let mut group = ShardGroup::without_shards(config, global / per_group)?;
                group.restore_clock(clock_ms);
                groups.push(group);
            }
            let group = groups.last_mut().expect("pushed at its first section");
            let shard = group.restore_shard(count)?;
            restore_section(group, shard, &body[16..crc_at], count, index)?;
            keys += count;
            if group.shards_complete() {
                group.finish_restore();
            }
        }
        groups.shrink_to_fit();
        let mut trailer = [0u8; TRAILER_BYTES];
        read_exact(&mut input, &mut trailer, "trailer")?;
        if &trailer[..8] != TRAILER_MAGIC {
            return Err(malformed(
                "the trailer does not start with CHAINEND".to_string(),
            ));
        }
        check_crc(&trailer, "trailer", 0)?;
        if u64_at(&trailer, 8) != keys {
            return Err(malformed(format!(
                "the trailer counts {} keys, the sections {keys}",
                u64_at(&trailer, 8)
            )));
        }
        let sections = crcs.finalize();
        if u32_at(&trailer, 16) != sections && !CHECKSUMS_IGNORED {
            return Err(Error::SnapshotChecksum {
                part: "trailer",
                index: 0,
                stored: u32_at(&trailer, 16),
                computed: sections,
            });
        }
        let mut extra = [0u8; 1];
        if input.read(&mut extra)? != 0 {
            return Err(malformed("bytes follow the trailer".to_string()));
        }
        let store = Store::from_groups(config, groups)?;
        assert_eq!(store.keys(), keys);
        Ok(store)
    }

    /// Writes a snapshot to `path` atomically: to `<path>.tmp`, synced, then
    /// renamed over `path`, and the directory synced.
    pub fn write_snapshot_file(&self, path: &Path) -> Result<SnapshotStats> {
        let started = Instant::now();
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let file = File::create(&tmp)?;
        let mut writer = BufWriter::with_capacity(IO_BUFFER_BYTES, file);
        let mut stats = self.snapshot(&mut writer)?;
        let file = writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    /// Restores a store from a snapshot file.
    pub fn read_snapshot_file(path: &Path) -> Result<(Store, SnapshotStats)> {
        let started = Instant::now();
        let file = File::open(path)?;
        let bytes = file.metadata()?.len();
        let store = Store::restore(BufReader::with_capacity(IO_BUFFER_BYTES, file))?;
        let stats = SnapshotStats {
            bytes,
            keys: store.keys(),
            elapsed: started.elapsed(),
        };
        Ok((store, stats))
    }
}

fn restore_section(
    group: &mut ShardGroup,
    shard: usize,
    body: &[u8],
    count: u64,
    index: u64,
) -> Result<()> {
    let mut at = 0usize;
    for _ in 0..count {
        if body.len() - at < 10 {
            return Err(malformed(format!(
                "shard {index}: an entry runs past the section"
            )));
        }
        let key = u64_at(body, at);
        let chain_bytes = usize::from(u16::from_le_bytes([body[at + 8], body[at + 9]]));
        at += 10;
        if chain_bytes == 0 || chain_bytes > CHAIN_BYTES_MAX || chain_bytes > body.len() - at {
            return Err(malformed(format!(
                "shard {index}: user {key} has a chain of {chain_bytes} bytes"
            )));
        }
        let chain = &body[at..at + chain_bytes];
        let mut walked = 0;
        while walked < chain.len() {
            let Some((_, len)) = Record::decode(&chain[walked..]) else {
                return Err(malformed(format!(
                    "shard {index}: user {key} has an invalid record at chain byte {walked}"
                )));
            };
            walked += len;
        }
        group.restore_chain(shard, key, chain)?;
        at += chain_bytes;
    }
    if at != body.len() {
        return Err(malformed(format!(
            "shard {index}: {} bytes follow the last entry",
            body.len() - at
        )));
    }
    Ok(())
}

fn read_exact(input: &mut impl Read, buf: &mut [u8], part: &'static str) -> Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(Error::SnapshotTruncated {
                    part,
                    expected: buf.len() as u64,
                    found: filled as u64,
                });
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Under the fuzzer (`--cfg fuzzing`, set by cargo-fuzz) checksums are not
/// enforced, so that mutated inputs reach the structural checks behind them
/// instead of all stopping at the first crc. Every other check still runs,
/// which is what the fuzz target is for: the structure must be validated on
/// its own, not only trusted because its checksum matched.
const CHECKSUMS_IGNORED: bool = cfg!(fuzzing);

/// Checks the crc32 in the last 4 bytes of `bytes` against the rest.
fn check_crc(bytes: &[u8], part: &'static str, index: u64) -> Result<()> {
    let at = bytes.len() - 4;
    let stored = u32_at(bytes, at);
    let computed = crc32fast::hash(&bytes[..at]);
    if stored != computed && !CHECKSUMS_IGNORED {
        return Err(Error::SnapshotChecksum {
            part,
            index,
            stored,
            computed,
        });
    }
    Ok(())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(
        bytes[at..at + 4]
            .try_into()
            .expect("caller checked the length"),
    )
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(
        bytes[at..at + 8]
            .try_into()
            .expect("caller checked the length"),
    )
}
