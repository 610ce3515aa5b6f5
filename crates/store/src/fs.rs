//! The file layer: everything the store writes goes through [`Dir`], a
//! handle on one directory of flat file names.
//!
//! Two implementations:
//!
//! - [`OsDir`]: `std::fs`. `sync_data` is `fdatasync(2)`; `sync_dir`
//!   fsyncs the opened directory, which is what makes a created, renamed
//!   or removed name durable on Linux (ext4, xfs).
//! - [`SimDir`]: in memory, for tests. It remembers what was made durable
//!   and what was not, and [`SimDir::crash`] returns the directory a power
//!   cut would leave, deterministically from a seed.
//!
//! # What a crash keeps
//!
//! `kill -9` loses nothing the process wrote (the kernel holds it); a
//! power cut loses what was not synced. `SimDir` models the power cut the
//! way the Linux page cache and a journaling file system behave, and no
//! kinder:
//!
//! - **File data.** Bytes appended since the file's last `sync_data` are
//!   the *unsynced tail*. A crash keeps all of the synced bytes and, of
//!   the tail, one of: nothing (most often), all of it, a prefix cut at a
//!   random byte (a torn write), or a prefix whose last part reads as
//!   zeros (ext4 `data=writeback`: the size reached the disk, the data did
//!   not) from a [`SECTOR_BYTES`] boundary of the file on, as a disk
//!   writes a sector whole or not at all (the premise of the WAL's rule
//!   for telling a tear from damage). A truncate not yet synced may be undone, bringing the old bytes
//!   back.
//! - **Names.** Creates, renames and removes since the directory's last
//!   `sync_dir` form a log; a crash applies a random prefix of it
//!   (journaled metadata reaches the disk in order, and all of it only
//!   after `sync_dir`). So a created file may vanish, a renamed one revert
//!   to its old name and a removed one come back.
//!
//! Nothing else is lost: bytes synced under a durable name survive every
//! crash, which is the promise the WAL builds on.
//!
//! # Reading at recovery
//!
//! After a failed `fsync` the kernel may have marked the dirty pages clean
//! without writing them, and a process started later (the restart that
//! recovers) would read those pages from the cache: records that are not
//! on the disk, which the next reboot loses after they were replayed and
//! acknowledged as duplicates. [`Dir::read_uncached_into`], which WAL
//! recovery reads every segment with, first asks the kernel to drop the
//! file's clean cached pages (`posix_fadvise(POSIX_FADV_DONTNEED)`), so
//! the read comes from the disk. The residual, documented rather than
//! closed: the advice is advice (pages mapped by another process, or
//! under writeback at that instant, stay), and `O_DIRECT`, which would
//! close it, needs aligned buffers and fails on some file systems (tmpfs).
//!
//! # Faults
//!
//! [`SimDir::fail_next`] makes the next `append` or `sync_data` fail with
//! `EIO`, as a dying disk or a full thin volume does. After a failed
//! `sync_data` Linux may already have dropped the dirty pages and marked
//! them clean, so a retry can report success for data that is gone
//! (PostgreSQL's "fsyncgate", 2018): the WAL therefore never retries, it
//! stops.
//!
//! # Crash points
//!
//! [`SimDir::crash_at`] arms a crash before the n-th mutating operation
//! (append, sync, create, truncate, rename, remove, directory sync): the
//! directory a power cut at that instant would leave is captured, and the
//! live directory goes on as if nothing happened, so a writer thread
//! running into the crash point needs no cooperation. Tests read the image
//! with [`SimDir::crashed`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{File as StdFile, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::wal::SECTOR_BYTES;

/// A file opened for appending through a [`Dir`].
pub trait DirFile: Send + fmt::Debug {
    /// Appends `bytes` at the end of the file.
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes every byte appended so far durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
}

/// A directory of flat file names the store reads and writes.
///
/// Names are plain file names made by the store itself (`wal-…`, `snap-…`),
/// never paths and never anything from a request.
pub trait Dir: Send + Sync + fmt::Debug {
    /// Creates `name` empty (truncating a file already there) and opens it
    /// for appending. The name is durable only after [`Dir::sync_dir`].
    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>>;
    /// Opens the existing file `name` for appending at its end.
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>>;
    /// Reads the whole of `name`.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Reads the whole of `name` into `buf` (emptied first), reusing its
    /// memory: a replay of many segments touches fresh pages once, not
    /// once per segment.
    fn read_into(&self, name: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        *buf = self.read(name)?;
        Ok(())
    }
    /// Reads the whole of `name` into `buf` from the disk, not from pages
    /// the kernel cached (module docs, Reading at recovery).
    fn read_uncached_into(&self, name: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        self.read_into(name, buf)
    }
    /// Cuts `name` to `len` bytes (durable after a `sync_data` of it).
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` (durable after `sync_dir`).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes `name` (durable after `sync_dir`).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// The names of the regular files in the directory, sorted.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Makes every create, rename and remove so far durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// Refuses a name that could reach outside the directory.
fn check_name(name: &str) -> io::Result<()> {
    let plain =
        !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if plain {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ))
    }
}

/// A real directory, through `std::fs`.
#[derive(Debug)]
pub struct OsDir {
    path: PathBuf,
    /// The directory itself, opened once for `fsync` in [`Dir::sync_dir`].
    handle: StdFile,
}

impl OsDir {
    /// Opens `path`, creating it (and its parents) if missing.
    pub fn open(path: impl AsRef<Path>) -> io::Result<OsDir> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path)?;
        let handle = StdFile::open(&path)?;
        Ok(OsDir { path, handle })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn join(&self, name: &str) -> io::Result<PathBuf> {
        check_name(name)?;
        Ok(self.path.join(name))
    }
}

/// A failpoint for tests of a full disk through real processes: with
/// this environment variable naming a path, every [`OsDir`] append, sync
/// and create fails with `ENOSPC` while a file exists at that path, and
/// works again once it is removed. Read once per process.
pub const FAILPOINT_DISK_FULL: &str = "CARDINAL_FAILPOINT_DISK_FULL";

/// `ENOSPC` while [`FAILPOINT_DISK_FULL`]'s file exists.
fn disk_full() -> io::Result<()> {
    static PATH: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| std::env::var_os(FAILPOINT_DISK_FULL).map(PathBuf::from));
    match path {
        Some(path) if path.exists() => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
        _ => Ok(()),
    }
}

#[derive(Debug)]
struct OsFile(StdFile);

impl DirFile for OsFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        disk_full()?;
        self.0.write_all(bytes)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        disk_full()?;
        self.0.sync_data()
    }
}

impl Dir for OsDir {
    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        disk_full()?;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.join(name)?)?;
        Ok(Box::new(OsFile(file)))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let file = OpenOptions::new().append(true).open(self.join(name)?)?;
        Ok(Box::new(OsFile(file)))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        // `fs::read` sizes the buffer from the file's length: one
        // allocation, no copies as it grows.
        std::fs::read(self.join(name)?)
    }
    fn read_into(&self, name: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        use std::io::Read;
        let mut file = std::fs::File::open(self.join(name)?)?;
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
        buf.clear();
        buf.try_reserve(len)?;
        file.read_to_end(buf)?;
        Ok(())
    }
    fn read_uncached_into(&self, name: &str, buf: &mut Vec<u8>) -> io::Result<()> {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let mut file = std::fs::File::open(self.join(name)?)?;
        // SAFETY: `posix_fadvise` reads no memory of ours; the descriptor
        // is open for the whole call (borrowed from `file`).
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // It returns the error number itself; a file system that ignores
        // the advice still reads correctly, so only a bad descriptor would
        // matter, and the read below reports that.
        debug_assert!(rc == 0 || rc == libc::ESPIPE, "posix_fadvise: {rc}");
        let len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
        buf.clear();
        buf.try_reserve(len)?;
        file.read_to_end(buf)?;
        Ok(())
    }
    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(self.join(name)?)?;
        file.set_len(len)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.join(from)?, self.join(to)?)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.join(name)?)
    }
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            if !entry.file_type()?.is_file() {
                continue;
            }
            // A name that is not UTF-8 was not made by the store.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.handle.sync_all()
    }
}

/// Which operation [`SimDir::fail_next`] makes fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next [`DirFile::append`] fails, writing nothing.
    Append,
    /// The next [`DirFile::sync_data`] fails, making nothing durable.
    SyncData,
}

/// One file's bytes in a [`SimDir`].
#[derive(Debug, Clone, Default)]
struct Inode {
    /// What a reader sees now.
    data: Vec<u8>,
    /// What a crash keeps for sure.
    durable: Vec<u8>,
    /// The shortest length a truncate left since the last sync, if any.
    truncated_to: Option<usize>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(String, u64),
    Unlink(String),
    /// A rename is one journal entry: it never half happens.
    Rename(String, String, u64),
}

#[derive(Debug, Default)]
struct SimState {
    inodes: HashMap<u64, Inode>,
    names: BTreeMap<String, u64>,
    durable_names: BTreeMap<String, u64>,
    /// Name changes since the last `sync_dir`, oldest first.
    log: Vec<DirOp>,
    next_inode: u64,
    faults: Vec<Fault>,
    /// Mutating operations so far.
    ops: u64,
    crash_at: Option<(u64, u64)>,
    crashed: Option<SimDir>,
}

/// An in-memory [`Dir`] that can crash; cloning gives another handle on
/// the same directory. See the module docs for what a crash keeps.
#[derive(Debug, Clone, Default)]
pub struct SimDir {
    state: Arc<Mutex<SimState>>,
}

/// SplitMix64 (Steele, Lea, Flood 2014): the crash's choices, from its seed.
#[derive(Debug)]
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..=max`.
    fn upto(&mut self, max: usize) -> usize {
        let span = u64::try_from(max)
            .expect("usize fits u64")
            .saturating_add(1);
        usize::try_from(self.next() % span).expect("below a usize")
    }
}

impl SimState {
    /// Counts one mutating operation, capturing the armed crash first.
    fn tick(&mut self) {
        if let Some((at, seed)) = self.crash_at
            && self.ops == at
        {
            self.crash_at = None;
            self.crashed = Some(self.image(seed));
        }
        self.ops += 1;
    }

    fn take_fault(&mut self, fault: Fault) -> io::Result<()> {
        if let Some(i) = self.faults.iter().position(|f| *f == fault) {
            self.faults.remove(i);
            return Err(io::Error::other(format!("injected {fault:?} failure")));
        }
        Ok(())
    }

    fn inode(&self, name: &str) -> io::Result<u64> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file")))
    }

    /// The directory a power cut now would leave.
    fn image(&self, seed: u64) -> SimDir {
        let mut choose = Choices(seed ^ 0x5851_f42d_4c95_7f2d);
        let mut names = self.durable_names.clone();
        for op in &self.log[..choose.upto(self.log.len())] {
            match op {
                DirOp::Link(name, inode) => {
                    names.insert(name.clone(), *inode);
                }
                DirOp::Unlink(name) => {
                    names.remove(name);
                }
                DirOp::Rename(from, to, inode) => {
                    names.remove(from);
                    names.insert(to.clone(), *inode);
                }
            }
        }
        let mut kept: BTreeMap<u64, Inode> = BTreeMap::new();
        let mut ids: Vec<u64> = names.values().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let inode = &self.inodes[&id];
            let bytes = crash_bytes(inode, &mut choose);
            kept.insert(
                id,
                Inode {
                    data: bytes.clone(),
                    durable: bytes,
                    truncated_to: None,
                },
            );
        }
        let state = SimState {
            inodes: kept.into_iter().collect(),
            durable_names: names.clone(),
            names,
            next_inode: self.next_inode,
            ..SimState::default()
        };
        SimDir {
            state: Arc::new(Mutex::new(state)),
        }
    }
}

/// One file's bytes after a crash (module docs, "What a crash keeps").
fn crash_bytes(inode: &Inode, choose: &mut Choices) -> Vec<u8> {
    // The base that certainly survives, and the bytes after it that may.
    let (base, tail): (&[u8], &[u8]) = match inode.truncated_to {
        None if inode.data.starts_with(&inode.durable) => {
            (&inode.durable, &inode.data[inode.durable.len()..])
        }
        // An unsynced truncate: either it is undone (the durable bytes
        // return and the appends after it are lost) or it holds.
        _ => {
            let cut = inode
                .truncated_to
                .unwrap_or(0)
                .min(inode.data.len())
                .min(inode.durable.len());
            if choose.next().is_multiple_of(2) {
                return inode.durable.clone();
            }
            (&inode.data[..cut], &inode.data[cut..])
        }
    };
    let mut bytes = base.to_vec();
    if tail.is_empty() {
        return bytes;
    }
    match choose.next() % 8 {
        // Lost: the most likely outcome of a power cut.
        0..=3 => {}
        4 => bytes.extend_from_slice(tail),
        5 | 6 => bytes.extend_from_slice(&tail[..choose.upto(tail.len())]),
        _ => {
            // A disk writes whole sectors: what reached it ends at a
            // sector boundary of the file (or is none of the tail).
            let len = choose.upto(tail.len());
            let reached = base.len() + choose.upto(len);
            let written = (reached / SECTOR_BYTES * SECTOR_BYTES).saturating_sub(base.len());
            bytes.extend_from_slice(&tail[..written]);
            bytes.resize(base.len() + len, 0);
        }
    }
    bytes
}

impl SimDir {
    /// An empty directory.
    pub fn new() -> SimDir {
        SimDir::default()
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A test thread that panicked while holding the lock left the state
        // consistent (every operation completes under the lock).
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The directory a power cut at this instant would leave, as a new,
    /// independent directory; this one goes on unchanged. The same state
    /// and seed give the same image.
    pub fn crash(&self, seed: u64) -> SimDir {
        self.lock().image(seed)
    }

    /// Arms a crash before mutating operation number `op` (counting from
    /// 0 over this directory's life, see [`SimDir::ops`]); the image is
    /// kept for [`SimDir::crashed`].
    pub fn crash_at(&self, op: u64, seed: u64) {
        self.lock().crash_at = Some((op, seed));
    }

    /// The image captured by [`SimDir::crash_at`], once reached.
    pub fn crashed(&self) -> Option<SimDir> {
        self.lock().crashed.clone()
    }

    /// Mutating operations performed so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Makes the next operation of that kind fail with an I/O error.
    pub fn fail_next(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Overwrites the byte at `offset` of `name` with `byte`, durably, as
    /// silent corruption on the medium would.
    ///
    /// # Panics
    ///
    /// If there is no such file or byte (a mistake in the test).
    pub fn poke(&self, name: &str, offset: usize, byte: u8) {
        let mut state = self.lock();
        let id = state.inode(name).expect("poke: no such file");
        let inode = state.inodes.get_mut(&id).expect("named inodes exist");
        inode.data[offset] = byte;
        if offset < inode.durable.len() {
            inode.durable[offset] = byte;
        }
    }

    /// The length of `name` now, if it exists.
    pub fn len_of(&self, name: &str) -> Option<usize> {
        let state = self.lock();
        let id = state.names.get(name)?;
        Some(state.inodes[id].data.len())
    }
}

#[derive(Debug)]
struct SimFile {
    dir: SimDir,
    inode: u64,
}

impl DirFile for SimFile {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.dir.lock();
        state.tick();
        state.take_fault(Fault::Append)?;
        let inode = state.inodes.get_mut(&self.inode).expect("open inodes live");
        inode.data.extend_from_slice(bytes);
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut state = self.dir.lock();
        state.tick();
        state.take_fault(Fault::SyncData)?;
        let inode = state.inodes.get_mut(&self.inode).expect("open inodes live");
        inode.durable.clone_from(&inode.data);
        inode.truncated_to = None;
        Ok(())
    }
}

impl Dir for SimDir {
    fn create(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        check_name(name)?;
        let mut state = self.lock();
        state.tick();
        let id = state.next_inode;
        state.next_inode += 1;
        state.inodes.insert(id, Inode::default());
        state.names.insert(name.to_string(), id);
        state.log.push(DirOp::Link(name.to_string(), id));
        Ok(Box::new(SimFile {
            dir: self.clone(),
            inode: id,
        }))
    }
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DirFile>> {
        let id = self.lock().inode(name)?;
        Ok(Box::new(SimFile {
            dir: self.clone(),
            inode: id,
        }))
    }
    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let state = self.lock();
        let id = state.inode(name)?;
        Ok(state.inodes[&id].data.clone())
    }
    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let mut state = self.lock();
        state.tick();
        let id = state.inode(name)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let inode = state.inodes.get_mut(&id).expect("named inodes exist");
        if len < inode.data.len() {
            inode.data.truncate(len);
            inode.truncated_to = Some(inode.truncated_to.map_or(len, |t| t.min(len)));
        } else {
            inode.data.resize(len, 0);
        }
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(to)?;
        let mut state = self.lock();
        state.tick();
        let id = state.inode(from)?;
        state.names.remove(from);
        state.names.insert(to.to_string(), id);
        state
            .log
            .push(DirOp::Rename(from.to_string(), to.to_string(), id));
        Ok(())
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.lock();
        state.tick();
        state.inode(name)?;
        state.names.remove(name);
        state.log.push(DirOp::Unlink(name.to_string()));
        Ok(())
    }
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.lock().names.keys().cloned().collect())
    }
    fn sync_dir(&self) -> io::Result<()> {
        let mut state = self.lock();
        state.tick();
        state.durable_names = state.names.clone();
        state.log.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_bytes_survive_every_crash() {
        for seed in 0..200 {
            let dir = SimDir::new();
            let mut file = dir.create("a").expect("create");
            file.append(b"durable").expect("append");
            file.sync_data().expect("sync");
            dir.sync_dir().expect("sync dir");
            file.append(b" maybe").expect("append");
            let after = dir.crash(seed);
            let bytes = after.read("a").expect("a survives");
            assert!(bytes.starts_with(b"durable"), "seed {seed}: {bytes:?}");
            assert!(bytes.len() <= b"durable maybe".len());
            // Determinism: the same seed, the same image.
            assert_eq!(dir.crash(seed).read("a").expect("a"), bytes);
        }
    }

    #[test]
    fn a_crash_tears_drops_and_zero_fills_the_unsynced_tail() {
        let mut seen = [false; 4];
        for seed in 0..400 {
            let dir = SimDir::new();
            let mut file = dir.create("a").expect("create");
            dir.sync_dir().expect("sync dir");
            file.append(b"0123456789").expect("append");
            let bytes = dir.crash(seed).read("a").expect("a");
            match bytes.len() {
                0 => seen[0] = true,
                10 if bytes == b"0123456789" => seen[1] = true,
                _ if bytes.contains(&0) => seen[3] = true,
                _ => {
                    assert!(b"0123456789".starts_with(&bytes));
                    seen[2] = true;
                }
            }
        }
        assert_eq!(seen, [true; 4]);
    }

    #[test]
    fn unsynced_names_vanish_or_revert() {
        let mut outcomes = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let dir = SimDir::new();
            let mut file = dir.create("tmp").expect("create");
            file.append(b"x").expect("append");
            file.sync_data().expect("sync");
            dir.sync_dir().expect("sync dir");
            dir.rename("tmp", "final").expect("rename");
            let names = dir.crash(seed).list().expect("list");
            outcomes.insert(names);
        }
        // Before the rename, or after it: never both names, never neither.
        let expected: std::collections::BTreeSet<Vec<String>> =
            [vec!["final".to_string()], vec!["tmp".to_string()]].into();
        assert_eq!(outcomes, expected);
    }

    #[test]
    fn an_armed_crash_captures_before_the_operation() {
        let dir = SimDir::new();
        dir.crash_at(2, 7);
        let mut file = dir.create("a").expect("create"); // op 0
        dir.sync_dir().expect("sync dir"); // op 1
        file.append(b"abc").expect("append"); // op 2: crash before it
        file.sync_data().expect("sync");
        let image = dir.crashed().expect("captured");
        assert_eq!(image.read("a").expect("a"), b"");
        assert_eq!(dir.read("a").expect("a"), b"abc");
    }

    #[test]
    fn injected_faults_fail_once() {
        let dir = SimDir::new();
        let mut file = dir.create("a").expect("create");
        dir.fail_next(Fault::SyncData);
        file.append(b"abc").expect("append");
        assert!(file.sync_data().is_err());
        file.sync_data().expect("the next one succeeds");
    }

    #[test]
    fn os_dir_refuses_paths() {
        let root = std::env::temp_dir().join(format!("cardinal-store-fs-{}", std::process::id()));
        let dir = OsDir::open(&root).expect("open");
        assert!(dir.create("../escape").is_err());
        assert!(dir.create("a/b").is_err());
        let mut file = dir.create("x").expect("create");
        file.append(b"hello").expect("append");
        file.sync_data().expect("sync");
        dir.sync_dir().expect("sync dir");
        let mut buf = b"old".to_vec();
        dir.read_uncached_into("x", &mut buf)
            .expect("read past the cache");
        assert_eq!(buf, b"hello");
        dir.truncate("x", 2).expect("truncate");
        assert_eq!(dir.read("x").expect("read"), b"he");
        dir.rename("x", "y").expect("rename");
        assert_eq!(dir.list().expect("list"), vec!["y".to_string()]);
        dir.remove("y").expect("remove");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
