//! The output directory contract: where a run's files go, and how it
//! owns them.
//!
//! ```text
//! OUT/                      locked (flock on the folder itself) by the run writing it
//!   .cardinal-tmp-<pid>/      the run's staging folder, removed when it ends
//!     <summary>/YYYY-MM-DD.csv    a summary being written
//!   <summary>/YYYY-MM-DD.csv  summaries of finished runs
//! ```
//!
//! - Every path made from a name goes through [`join_under`], which refuses
//!   a name that is not a single plain component, so no name writes outside
//!   its directory (whatever built it).
//! - One run at a time: [`OutDir::open`] takes an exclusive lock on the
//!   folder `OUT` itself and fails at once if another process holds it.
//!   The lock goes with the process, so a killed run leaves no stale lock,
//!   and there is no lock file among the results.
//! - A run owns the folders of its summaries: each is written whole in the
//!   staging folder, then swapped with `OUT/<summary>` in one rename
//!   (`renameat2(RENAME_EXCHANGE)` on Linux), and the old folder removed.
//!   Day files of an earlier run that this run did not write are gone with
//!   it; a reader sees the old folder or the new one, never a mix. Folders
//!   of summaries the run does not declare are left alone.
//! - Temp files carry the [`STAGING_PREFIX`]: a run that dies leaves its
//!   staging folder behind, and the next run on `OUT` (holding the lock, so
//!   no one else's) removes every such folder before it starts.
//! - A single output file (`--json FILE` and the like) is an [`AtomicFile`]:
//!   written as `.cardinal-tmp-<pid>-<name>` next to it, locked while
//!   written, synced, and renamed over `name` only when the run commits it.
//!   Until then the old file (if any) is untouched; a run that fails drops
//!   the temp file, and one killed outright leaves it for the next run
//!   writing that file (or `OUT`), which removes it once no process holds
//!   its lock.

use std::fs::{File, TryLockError};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::{Options, Results, io};

/// What a staging folder's name starts with; the process id follows.
pub const STAGING_PREFIX: &str = ".cardinal-tmp-";

/// The longest file name [`join_under`] makes, in bytes: the usual
/// `NAME_MAX` of Linux and macOS file systems. A longer name would fail
/// in the middle of writing; refusing it first says why.
pub const FILE_NAME_BYTES_MAX: usize = 255;

/// `dir/name`, where `name` must be one plain path component: not empty,
/// not `.` or `..`, without `/`, `\`, NUL or other control characters, at
/// most [`FILE_NAME_BYTES_MAX`] bytes. Every writer of a path made from a
/// summary or attribution name goes through here, so that no name leaves
/// the directory it was meant for.
pub fn join_under(dir: &Path, name: &str) -> Result<PathBuf> {
    let refuse = |reason: &'static str| {
        Err(Error::Name {
            name: name.escape_debug().to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("it is empty");
    }
    if name.len() > FILE_NAME_BYTES_MAX {
        return refuse("it is longer than FILE_NAME_BYTES_MAX (255 bytes)");
    }
    if name.contains(['/', '\\']) {
        return refuse("it holds a path separator");
    }
    if name.chars().any(char::is_control) {
        return refuse("it holds a control character");
    }
    let mut components = Path::new(name).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(one)), None) if one == name => {}
        _ => return refuse("it is not a plain file name"),
    }
    let path = dir.join(name);
    debug_assert_eq!(path.parent(), Some(dir));
    Ok(path)
}

/// An output directory held by this run (see the module doc).
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    staging: PathBuf,
    /// The folder, open and locked for the life of the value; closing it
    /// releases the lock.
    _lock: File,
}

impl OutDir {
    /// Creates `dir` if missing, takes its lock, removes staging folders
    /// that interrupted runs left, and makes this run's staging folder.
    /// Fails with [`Error::Locked`] if another run holds the lock.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| io(dir, source))?;
        // A folder opened read-only takes flock like a file (Linux, the
        // BSDs, macOS); no lock file is left among the results.
        let lock = File::open(dir).map_err(|source| io(dir, source))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(Error::Locked {
                    path: dir.display().to_string(),
                });
            }
            Err(TryLockError::Error(source)) => return Err(io(dir, source)),
        }
        for entry in std::fs::read_dir(dir).map_err(|source| io(dir, source))? {
            let entry = entry.map_err(|source| io(dir, source))?;
            if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(STAGING_PREFIX.as_bytes())
            {
                // An AtomicFile of a live run (one without --out here) is
                // held locked; everything else is debris.
                remove_unless_held(&entry.path())?;
            }
        }
        let staging = dir.join(format!("{STAGING_PREFIX}{}", std::process::id()));
        std::fs::create_dir(&staging).map_err(|source| io(&staging, source))?;
        Ok(OutDir {
            dir: dir.to_path_buf(),
            staging,
            _lock: lock,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// This run's staging folder: everything in it is temporary, and a
    /// process that must stop at once may remove it whole.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Writes `OUT/<summary>/YYYY-MM-DD.csv` as [`crate::write_daily_csv`]
    /// does, into the staging folder, then replaces `OUT/<summary>` with it
    /// whole. Returns the files' final paths.
    pub fn write_daily_csv(
        &self,
        summary: &str,
        results: &Results<'_>,
        options: Options,
    ) -> Result<Vec<PathBuf>> {
        let target = join_under(&self.dir, summary)?;
        let staged = join_under(&self.staging, summary)?;
        if staged.exists() {
            remove_any(&staged).map_err(|source| io(&staged, source))?;
        }
        let files = crate::write_daily_csv(&self.staging, summary, results, options)?;
        replace(&staged, &target).map_err(|source| io(&target, source))?;
        debug_assert!(!staged.exists());
        Ok(files
            .iter()
            .map(|file| target.join(file.file_name().expect("a day file has a name")))
            .collect())
    }

    /// Removes the staging folder and releases the lock.
    pub fn finish(self) -> Result<()> {
        let staging = self.staging.clone();
        drop(self);
        if staging.exists() {
            return Err(io(&staging, std::io::Error::other("staging folder left")));
        }
        Ok(())
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        // Best effort: what stays is removed by the next run's `open`.
        let _ = std::fs::remove_dir_all(&self.staging);
    }
}

/// A file written whole or not at all (see the module doc): bytes go to a
/// locked temp file beside the target, and [`AtomicFile::commit`] syncs it
/// and renames it over the target. Dropped uncommitted, the temp file is
/// removed and the target keeps what it held.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    /// The temp file, open and locked for the life of the value.
    file: File,
    committed: bool,
}

impl AtomicFile {
    /// Starts writing `target` (through a symbolic link, its destination):
    /// removes temp files of `target` that dead runs left, then creates and
    /// locks this run's, `.cardinal-tmp-<pid>-<name>` in the same folder.
    pub fn create(target: &Path) -> Result<Self> {
        let target = match std::fs::symlink_metadata(target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::fs::canonicalize(target).map_err(|source| io(target, source))?
            }
            _ => target.to_path_buf(),
        };
        let Some(name) = target.file_name() else {
            return Err(io(&target, std::io::Error::other("not a file name")));
        };
        // A device, pipe or socket is never renamed over: that would put
        // a regular file in place of `/dev/null` (it happened, as root).
        if let Ok(meta) = std::fs::metadata(&target)
            && !meta.is_file()
        {
            return Err(io(
                &target,
                std::io::Error::other(
                    "not a regular file: outputs are written whole to a new file renamed over \
                     the old one, which would replace a device or a pipe; write to a file, or \
                     to `-` (standard output) and redirect that",
                ),
            ));
        }
        let dir = match target.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        for entry in std::fs::read_dir(dir).map_err(|source| io(dir, source))? {
            let entry = entry.map_err(|source| io(dir, source))?;
            if is_temp_of(
                entry.file_name().as_encoded_bytes(),
                name.as_encoded_bytes(),
            ) {
                remove_unless_held(&entry.path())?;
            }
        }
        let mut temp_name =
            std::ffi::OsString::from(format!("{STAGING_PREFIX}{}-", std::process::id()));
        temp_name.push(name);
        let temp = dir.join(temp_name);
        // A temp file of this name still there is held by a live writer
        // (this process): never truncate it.
        let file = File::create_new(&temp).map_err(|source| io(&temp, source))?;
        if let Err(e) = file.try_lock() {
            let _ = std::fs::remove_file(&temp);
            return Err(io(&temp, std::io::Error::other(e.to_string())));
        }
        if let Ok(meta) = std::fs::metadata(&target) {
            // The new file keeps the old one's permissions.
            file.set_permissions(meta.permissions())
                .map_err(|source| io(&temp, source))?;
        }
        Ok(AtomicFile {
            target,
            temp,
            file,
            committed: false,
        })
    }

    /// The temp file being written.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The temp file's path: remove it to abandon the write.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// The file written on commit.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Syncs the temp file and renames it over the target. Callers flush
    /// their buffers into [`AtomicFile::file`] first.
    pub fn commit(mut self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|source| io(&self.temp, source))?;
        std::fs::rename(&self.temp, &self.target).map_err(|source| io(&self.target, source))?;
        self.committed = true;
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Best effort: the rename reaches the disk with the folder.
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

impl std::io::Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Whether file name `entry` is `.cardinal-tmp-<pid>-<name>`, a temp file
/// of an [`AtomicFile`] writing `name`.
fn is_temp_of(entry: &[u8], name: &[u8]) -> bool {
    let Some(rest) = entry.strip_prefix(STAGING_PREFIX.as_bytes()) else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && rest[digits..].strip_prefix(b"-") == Some(name)
}

/// Removes debris `path` (file or folder) unless a live process holds its
/// lock, as an [`AtomicFile`] being written does.
fn remove_unless_held(path: &Path) -> Result<()> {
    let held = match File::open(path) {
        Ok(file) => matches!(file.try_lock(), Err(TryLockError::WouldBlock)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        // Unreadable: let the removal say why, if it fails.
        Err(_) => false,
    };
    if held {
        return Ok(());
    }
    remove_any(path).map_err(|source| io(path, source))
}

/// Removes a file or a folder with everything in it.
fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Puts folder `new` at `target`, replacing whatever is there whole, then
/// removes `new` (which then holds the old contents, if any).
fn replace(new: &Path, target: &Path) -> std::io::Result<()> {
    assert!(new.is_dir(), "the staged folder is written");
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return std::fs::rename(new, target),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    if exchange(new, target)? {
        return remove_any(new);
    }
    // Without an atomic exchange: move the old aside, then the new in. A
    // reader may find no folder between the two renames, never a mix.
    let old = new.with_file_name(format!(
        "{}.old",
        new.file_name()
            .expect("a staged folder has a name")
            .to_string_lossy()
    ));
    remove_any(&old)?;
    std::fs::rename(target, &old)?;
    std::fs::rename(new, target)?;
    remove_any(&old)
}

/// Swaps `a` and `b` atomically; `Ok(false)` where the system cannot.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(a.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let b = CString::new(b.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: both are NUL-terminated strings that live across the call;
    // renameat2 reads them and keeps no pointer.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        // The file system or kernel has no exchange.
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(error),
    }
}

/// Swaps `a` and `b` atomically; `Ok(false)` where the system cannot.
#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<bool> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_under_the_directory() {
        let dir = Path::new("out");
        assert_eq!(join_under(dir, "reach").ok(), Some(dir.join("reach")));
        assert_eq!(join_under(dir, "a.chains").ok(), Some(dir.join("a.chains")));
        for name in [
            "", ".", "..", "../x", "../../x", "/tmp/x", "./a", "a/b", "a\\b", "a\0b", "a\nb",
        ] {
            assert!(join_under(dir, name).is_err(), "{name:?}");
        }
        assert!(join_under(dir, &"n".repeat(FILE_NAME_BYTES_MAX + 1)).is_err());
        assert!(join_under(dir, &"n".repeat(FILE_NAME_BYTES_MAX)).is_ok());
    }

    #[test]
    fn an_atomic_file_replaces_its_target_only_on_commit() {
        let dir = std::env::temp_dir().join(format!("cardinal-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let target = dir.join("out.json");
        std::fs::write(&target, "old").expect("old");
        // Debris of a dead run writing the same file, and an unrelated file.
        std::fs::write(dir.join(".cardinal-tmp-1-out.json"), "half").expect("debris");
        std::fs::write(dir.join(".cardinal-tmp-1-other.json"), "x").expect("other");
        {
            let mut file = AtomicFile::create(&target).expect("create");
            assert!(!dir.join(".cardinal-tmp-1-out.json").exists());
            std::io::Write::write_all(&mut file, b"new").expect("write");
            // A second writer of the same file leaves a held temp file alone.
            assert!(AtomicFile::create(&target).is_err());
            assert!(file.temp_path().exists());
            assert_eq!(std::fs::read_to_string(&target).expect("read"), "old");
        }
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "old");
        let mut file = AtomicFile::create(&target).expect("create");
        std::io::Write::write_all(&mut file, b"new").expect("write");
        let temp = file.temp_path().to_path_buf();
        file.commit().expect("commit");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
        assert!(!temp.exists());
        assert!(dir.join(".cardinal-tmp-1-other.json").exists());
        assert!(is_temp_of(b".cardinal-tmp-12-a.json", b"a.json"));
        assert!(!is_temp_of(b".cardinal-tmp--a.json", b"a.json"));
        assert!(!is_temp_of(b".cardinal-tmp-12-a.jsonx", b"a.json"));
        std::fs::remove_dir_all(&dir).expect("clean");
    }

    proptest::proptest! {
        /// Whatever the name, a path `join_under` accepts is one plain
        /// component directly under the directory.
        #[test]
        fn accepted_names_stay_under(name in "[./\\\\a-z\\x00-\\x1f]{0,6}|.{0,8}") {
            let dir = Path::new("out/o");
            if let Ok(path) = join_under(dir, &name) {
                proptest::prop_assert_eq!(path.parent(), Some(dir));
                proptest::prop_assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(name.as_str()));
                proptest::prop_assert!(path.components().all(|c| matches!(c, Component::Normal(_))));
            }
        }
    }

    #[test]
    fn a_device_or_a_directory_is_never_replaced() {
        for special in ["/dev/null", "/dev/zero"] {
            if std::path::Path::new(special).exists() {
                let error = AtomicFile::create(Path::new(special)).expect_err("refused");
                assert!(error.to_string().contains("not a regular file"), "{error}");
                let meta = std::fs::metadata(special).expect("still there");
                assert!(!meta.is_file(), "{special} is still a device");
            }
        }
        let dir = std::env::temp_dir().join(format!("cardinal-atomic-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        assert!(AtomicFile::create(&dir).is_err());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
