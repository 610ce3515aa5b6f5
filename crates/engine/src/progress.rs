//! Counters the workers share with whoever watches a run: bytes read,
//! records folded, records rejected ([`Progress`]).
//!
//! Workers add to the three shared atomics once per chunk, never per
//! record, so that watching a run costs the fold nothing: each worker
//! keeps its own [`Counts`] and holds a [`Tap`] that adds only what is new
//! since its last chunk. A reader takes a [`Snapshot`] at any time, as
//! often as it likes, without stopping anyone: `cardinal run` redraws its
//! progress line four times a second from it (`TICKS_PER_SEC` in
//! `crates/cli/src/progress.rs`, which draws the line), and a server will
//! read its metrics from it. A snapshot lags the workers by at most a
//! chunk each; the run's exact totals are the [`Counts`] it returns.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::counts::Counts;

/// The counters workers share with the ticker.
#[derive(Debug, Default)]
pub struct Progress {
    bytes: AtomicU64,
    records: AtomicU64,
    rejects: AtomicU64,
}

impl Progress {
    /// A worker's handle: remembers what it last reported, so one call per
    /// chunk adds only what is new.
    pub fn tap(&self) -> Tap<'_> {
        Tap {
            progress: self,
            reported: Snapshot::default(),
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            bytes: self.bytes.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            rejects: self.rejects.load(Ordering::Relaxed),
        }
    }
}

/// What to print before a message on stderr so that it does not run into
/// the progress line: on a terminal, "return to the line start and erase
/// it" (the ticker redraws the line below at its next tick); elsewhere,
/// nothing.
pub fn erase() -> &'static str {
    if std::io::stderr().is_terminal() {
        "\r\x1b[2K"
    } else {
        ""
    }
}

/// One worker's handle on the shared counters.
#[derive(Debug)]
pub struct Tap<'a> {
    progress: &'a Progress,
    reported: Snapshot,
}

impl Tap<'_> {
    /// Publishes what the worker's counts gained since the last call.
    pub fn report(&mut self, counts: &Counts) {
        let now = Snapshot {
            bytes: counts.bytes,
            records: counts.records,
            rejects: counts.rejects,
        };
        debug_assert!(now.bytes >= self.reported.bytes, "counts only grow");
        let p = self.progress;
        p.bytes
            .fetch_add(now.bytes - self.reported.bytes, Ordering::Relaxed);
        p.records
            .fetch_add(now.records - self.reported.records, Ordering::Relaxed);
        p.rejects
            .fetch_add(now.rejects - self.reported.rejects, Ordering::Relaxed);
        self.reported = now;
    }
}

/// The counters at one instant.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Bytes of input read (after decompression).
    pub bytes: u64,
    /// Records folded ([`Counts::records`]).
    pub records: u64,
    /// Records rejected.
    pub rejects: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_publish_only_what_is_new() {
        let progress = Progress::default();
        let mut a = progress.tap();
        let mut b = progress.tap();
        let mut counts = Counts {
            bytes: 100,
            records: 10,
            rejects: 1,
            ..Counts::default()
        };
        a.report(&counts);
        a.report(&counts);
        counts.bytes = 150;
        counts.records = 15;
        a.report(&counts);
        b.report(&Counts {
            bytes: 7,
            records: 1,
            ..Counts::default()
        });
        assert_eq!(
            progress.snapshot(),
            Snapshot {
                bytes: 157,
                records: 16,
                rejects: 1
            }
        );
    }
}
