//! SIGINT and SIGTERM during `cardinal run`: remove the run's temp files,
//! say which summaries were written whole, and exit with 128 + the signal.
//!
//! The signals are blocked in every thread (the mask is set before the
//! workers start, and they inherit it) and taken by one thread waiting in
//! `sigwait`, so the cleanup runs as ordinary code, not in a signal
//! handler. The writer holds [`Progress`]'s lock while it writes and
//! commits a summary, so the cleanup never sees a summary half committed:
//! it waits for the one being written (at most one summary's files) and
//! then removes the staging folder whole.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What an interrupted run must clean up and report.
#[derive(Debug, Default)]
pub struct Progress {
    /// The output directory's staging folder, while there is one.
    pub staging: Option<PathBuf>,
    /// The output directory, for the message.
    pub out: Option<PathBuf>,
    /// Summaries written whole, in order.
    pub written: Vec<String>,
    /// Summaries still to write.
    pub pending: Vec<String>,
    /// Temp files of output files not committed yet (`--json FILE` and the
    /// like): removed, so the files they would replace stay as they were.
    pub temp_files: Vec<PathBuf>,
}

static PROGRESS: Mutex<Progress> = Mutex::new(Progress {
    staging: None,
    out: None,
    written: Vec::new(),
    pending: Vec::new(),
    temp_files: Vec::new(),
});

/// The run's progress, locked: while the guard lives, an interrupt waits.
pub fn lock() -> MutexGuard<'static, Progress> {
    PROGRESS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Blocks SIGINT and SIGTERM in this thread and those it starts from now
/// on, and starts the thread that takes them. Call before starting any
/// other thread.
#[cfg(unix)]
pub fn watch() -> anyhow::Result<()> {
    // SAFETY: `set` is a local sigset_t initialised by sigemptyset before
    // any other use; the calls only read and write it and the thread's
    // signal mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        anyhow::ensure!(rc == 0, "blocking SIGINT and SIGTERM: error {rc}");
        set
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` is initialised above and `signal` is a valid
            // place for the result.
            while unsafe { libc::sigwait(&set, &mut signal) } != 0 {}
            stop(signal)
        })?;
    Ok(())
}

/// Without Unix signals, an interrupt ends the process as it always has.
#[cfg(not(unix))]
pub fn watch() -> anyhow::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn stop(signal: libc::c_int) -> ! {
    let progress = lock();
    let name = if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    };
    let mut message = format!("interrupted by {name}");
    let mut unremoved: Vec<String> = Vec::new();
    for temp in &progress.temp_files {
        match std::fs::remove_file(temp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => unremoved.push(format!("{} ({e})", temp.display())),
        }
    }
    if progress.staging.is_none() && !progress.temp_files.is_empty() {
        if unremoved.is_empty() {
            message.push_str("; temp files removed; output files left as they were");
        } else {
            message.push_str(&format!(
                "; could not remove {}; the next run writing the same file will",
                unremoved.join(", ")
            ));
        }
    }
    if let Some(staging) = &progress.staging {
        let removed = match std::fs::remove_dir_all(staging) {
            Ok(()) | Err(_) if !unremoved.is_empty() => format!(
                "could not remove {}; the next run writing the same file will",
                unremoved.join(", ")
            ),
            Ok(()) => "temp files removed".to_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "temp files removed".to_owned(),
            Err(e) => format!(
                "could not remove {} ({e}); the next run on the folder will",
                staging.display()
            ),
        };
        let out = progress
            .out
            .as_ref()
            .map_or_else(String::new, |o| o.display().to_string());
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        message.push_str(&format!(
            "; {removed}; summaries complete under {out}: {}; not written: {}",
            list(&progress.written),
            if progress.pending.is_empty() && progress.written.is_empty() {
                "all".to_owned()
            } else {
                list(&progress.pending)
            }
        ));
    }
    eprintln!("{message}");
    std::process::exit(128 + signal)
}
