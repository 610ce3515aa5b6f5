//! The ledger file of `cardinal send --ledger FILE`: what the server
//! acknowledged, written as it arrives, and what a rerun of the same send
//! reads to resume exactly once.
//!
//! ```text
//!   # cardinal send ledger 1 client=<id> stream=<name> format=csv header=1 delimiter=44 batch-bytes=262144 files=<16 hex>
//!   # first=<batch id>
//!   <id> <accepted> <rejected> <duplicate 0|1> <crc32 of the batch's payload, 8 hex>
//!   ...
//! ```
//!
//! The first line names the send: a rerun with other options or other
//! files cuts its batches elsewhere, so it is refused rather than
//! resumed. The `first` line is written (and synced) once the server's
//! hello ok has said which ids are free and before any batch is sent:
//! from then on batch `i` of the input (counting from 0, in the order the
//! files are read) has id `first + i`, in this run and in every rerun.
//! Each ack adds a line, written to the operating system as it arrives,
//! so a killed client leaves every ack it received in the file.
//!
//! **Resuming.** A rerun reads the input again, cut at the same record
//! ends (the same files, batch size, format and header rule give the same
//! batches), skips each batch whose id the ledger holds (its checksum
//! must match: an input changed since stops the send) and sends the rest
//! with their old ids. A batch that was durable but whose ack was lost is
//! answered as a duplicate and not counted again; one the server never
//! took is counted now. So a rerun of the same command after any failure
//! counts every record once. A last line cut short (a client killed in
//! the middle of writing it, which a single `write` makes unlikely) is
//! dropped: its batch is resent and answered as a duplicate.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::frame::{Ack, BatchId};

/// The first words of a ledger file's first line.
const MAGIC: &str = "# cardinal send ledger 1";

/// The ledger file's size a resume reads at most: 1 GiB, 20 million acks
/// of about 50 bytes, 5 TB of input in batches of 256 KiB.
pub const LEDGER_BYTES_MAX: u64 = 1 << 30;

/// An open ledger file.
#[derive(Debug)]
pub(crate) struct LedgerFile {
    file: File,
    path: PathBuf,
    /// The id of the input's first batch, once known.
    first: Option<BatchId>,
    /// Acknowledged ids read from the file, with their payloads' checksums.
    acked: HashMap<u64, u32>,
}

impl LedgerFile {
    /// Opens `path`: a new ledger headed by `run`, or an earlier one of
    /// the same send (its first line is `run`) to resume from.
    pub(crate) fn open(path: &Path, run: &str) -> Result<LedgerFile> {
        assert!(run.starts_with(MAGIC) && !run.contains('\n'));
        let fail = |reason: String| Error::LedgerFile {
            path: path.display().to_string(),
            reason,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| fail(e.to_string()))?;
        let length = file.metadata().map_err(|e| fail(e.to_string()))?.len();
        if length > LEDGER_BYTES_MAX {
            return Err(fail(format!(
                "{length} bytes is over the {LEDGER_BYTES_MAX} a resume reads"
            )));
        }
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| fail(format!("reading it: {e}")))?;
        let mut ledger = LedgerFile {
            file,
            path: path.to_owned(),
            first: None,
            acked: HashMap::new(),
        };
        if text.is_empty() {
            ledger.append(&format!("{run}\n"))?;
            return Ok(ledger);
        }
        // A line cut short by a killed writer is dropped (module doc).
        let whole = text.rfind('\n').map_or(0, |end| end + 1);
        if whole < text.len() {
            ledger
                .file
                .set_len(whole as u64)
                .map_err(|e| fail(format!("cutting its last, partial line: {e}")))?;
        }
        ledger
            .file
            .seek(SeekFrom::End(0))
            .map_err(|e| fail(e.to_string()))?;
        let mut lines = text[..whole].lines().enumerate();
        match lines.next() {
            Some((_, line)) if line == run => {}
            Some((_, line)) if line.starts_with(MAGIC) => {
                return Err(fail(format!(
                    "it was written by another send ({}), and this one is {}: a resume needs \
                     the same files, stream, client id, format, header rule, delimiter and \
                     batch size, which cut the same batches (or give another --ledger file)",
                    &line[MAGIC.len()..].trim(),
                    &run[MAGIC.len()..].trim()
                )));
            }
            _ => {
                return Err(fail(
                    "it is not a ledger of cardinal send (give a new file, or an \
                     earlier send's ledger to resume it)"
                        .into(),
                ));
            }
        }
        for (n, line) in lines {
            let bad = |why: &str| fail(format!("line {}: {why}: {line:?}", n + 1));
            if let Some(first) = line.strip_prefix("# first=") {
                let first: u64 = first.parse().map_err(|_| bad("not an id"))?;
                if ledger.first.is_some() || !ledger.acked.is_empty() {
                    return Err(bad("a second first id, or one after acks"));
                }
                ledger.first = Some(BatchId(first));
                continue;
            }
            let fields: Vec<&str> = line.split(' ').collect();
            let [id, accepted, rejected, duplicate, crc] = fields[..] else {
                return Err(bad("not 5 fields"));
            };
            let id: u64 = id.parse().map_err(|_| bad("the id"))?;
            for count in [accepted, rejected] {
                count.parse::<u64>().map_err(|_| bad("a count"))?;
            }
            if !matches!(duplicate, "0" | "1") {
                return Err(bad("the duplicate flag"));
            }
            let crc = u32::from_str_radix(crc, 16).map_err(|_| bad("the checksum"))?;
            if ledger.first.is_none_or(|first| id < first.0) {
                return Err(bad("an id below the first"));
            }
            if ledger.acked.insert(id, crc).is_some() {
                return Err(bad("an id acknowledged twice"));
            }
        }
        Ok(ledger)
    }

    /// The id of the input's first batch, if an earlier run fixed it.
    pub(crate) fn first(&self) -> Option<BatchId> {
        self.first
    }

    /// Fixes the id of the input's first batch, durably, before any batch
    /// is sent.
    pub(crate) fn set_first(&mut self, first: BatchId) -> Result<()> {
        assert!(self.first.is_none(), "the first id is fixed once");
        assert!(self.acked.is_empty());
        self.append(&format!("# first={first}\n"))?;
        self.file.sync_data().map_err(|e| Error::LedgerFile {
            path: self.path.display().to_string(),
            reason: format!("syncing it: {e}"),
        })?;
        self.first = Some(first);
        Ok(())
    }

    /// The checksum an earlier run acknowledged batch `id` with, if it did.
    pub(crate) fn acked(&self, id: BatchId) -> Option<u32> {
        self.acked.get(&id.0).copied()
    }

    /// Adds `ack`'s line, for a batch whose payload had checksum `crc`.
    pub(crate) fn record(&mut self, ack: &Ack, crc: u32) -> Result<()> {
        debug_assert!(self.first.is_some_and(|first| first <= ack.id));
        self.append(&format!(
            "{} {} {} {} {crc:08x}\n",
            ack.id,
            ack.accepted,
            ack.rejected,
            u8::from(ack.duplicate)
        ))
    }

    /// Writes `line` with one `write` call, so a kill leaves it whole or
    /// absent.
    fn append(&mut self, line: &str) -> Result<()> {
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| Error::LedgerFile {
                path: self.path.display().to_string(),
                reason: e.to_string(),
            })
    }
}

/// The checksum of a batch's payload in the ledger: CRC-32 (ISO-HDLC, as
/// the frames').
pub(crate) fn payload_crc(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("cardinal-ledger-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        dir
    }

    fn ack(id: u64, accepted: u64) -> Ack {
        Ack {
            id: BatchId(id),
            accepted,
            rejected: 0,
            duplicate: false,
        }
    }

    #[test]
    fn a_ledger_resumes_with_its_first_id_and_acks() {
        let path = temp("resume");
        let run = format!("{MAGIC} client=c stream=s");
        let mut ledger = LedgerFile::open(&path, &run).expect("new");
        assert_eq!(ledger.first(), None);
        ledger.set_first(BatchId(40)).expect("first");
        ledger.record(&ack(40, 3), 0xdead_beef).expect("ack");
        ledger.record(&ack(42, 5), 7).expect("ack");
        drop(ledger);
        // A line cut short by a kill is dropped.
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(b"43 1 0").expect("write");
        drop(file);
        let ledger = LedgerFile::open(&path, &run).expect("resume");
        assert_eq!(ledger.first(), Some(BatchId(40)));
        assert_eq!(ledger.acked(BatchId(42)), Some(7));
        assert_eq!(ledger.acked(BatchId(40)), Some(0xdead_beef));
        assert_eq!(ledger.acked(BatchId(41)), None);
        assert_eq!(ledger.acked(BatchId(43)), None);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.ends_with("00000007\n"), "{text}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn another_sends_ledger_or_a_damaged_one_is_refused() {
        let path = temp("other");
        let run = format!("{MAGIC} client=c stream=s");
        let mut ledger = LedgerFile::open(&path, &run).expect("new");
        ledger.set_first(BatchId(1)).expect("first");
        drop(ledger);
        let other = format!("{MAGIC} client=c stream=t");
        let error = LedgerFile::open(&path, &other).expect_err("another send");
        assert!(error.to_string().contains("another send"), "{error}");
        std::fs::write(&path, format!("{run}\n# first=5\n4 1 0 0 00000000\n")).expect("write");
        let error = LedgerFile::open(&path, &run).expect_err("below first");
        assert!(error.to_string().contains("below the first"), "{error}");
        std::fs::write(&path, "some other file\n").expect("write");
        assert!(LedgerFile::open(&path, &run).is_err());
        let _ = std::fs::remove_file(&path);
    }
}
