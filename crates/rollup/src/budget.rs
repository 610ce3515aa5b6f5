//! A memory budget shared by the partial rollups of every worker.
//!
//! Each worker keeps a [`BytesGauge`] per rollup and tells it, after each
//! batch, how many records it folded; the gauge reports the rollup's bytes
//! to the shared [`MemoryBudget`] (one atomic counter) and says whether the
//! budget still holds. The bytes are those [`Rollup::heap_bytes`] counts
//! (tables, group records, key arenas, states and every sketch's own heap,
//! as [`crate::AggState::heap_bytes`] reports it).
//!
//! Asking every state of a large rollup after every batch would cost more
//! than the fold, so a gauge asks them again (a rescan) only when the
//! rollup has grown by an eighth in groups, or has folded, since the last
//! rescan, [`RESCAN_RECORDS_PER_GROUP`] records per group it holds and at
//! least [`RESCAN_RECORDS_MIN`] (the records that can grow the sketches of
//! groups it already holds); between rescans it counts each new group at
//! the average size the last rescan found. A rescan then costs at most one
//! state visit per eight records folded, and far less where records
//! outnumber groups: W1's rollups (hundreds to thousands of groups, ten
//! million records) rescan every 65,536 records. A rescan every two
//! records per group took 7% of W1's time.
//!
//! The count can run under the truth by what the records since the last
//! rescan grew existing states (at most eight records per group or
//! 65,536 records, a sketch that doubles its buffer on the last), and over
//! the budget by one batch's growth, before a worker sees it: the budget is
//! a line that stops the run before the allocator fails, not an exact cap
//! on the process.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Rollup;

/// The bytes every partial rollup of a run may hold together.
#[derive(Debug)]
pub struct MemoryBudget {
    bytes_max: u64,
    used: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `bytes_max` bytes, none of it used.
    pub fn new(bytes_max: u64) -> Self {
        Self {
            bytes_max,
            used: AtomicU64::new(0),
        }
    }

    /// The budget.
    pub fn bytes_max(&self) -> u64 {
        self.bytes_max
    }

    /// Bytes the gauges have reported, over every worker.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether the reported bytes are within the budget.
    pub fn holds(&self) -> bool {
        self.used() <= self.bytes_max
    }

    /// Moves the count of something other than a rollup (an engine's
    /// attribution chains, its held events) from `from` bytes to `to`: the
    /// caller keeps what it reported last, as a [`BytesGauge`] does.
    pub fn report_other(&self, from: u64, to: u64) {
        self.report(from, to);
    }

    /// Moves the count from `from` bytes to `to` bytes (one gauge's change).
    fn report(&self, from: u64, to: u64) {
        if to >= from {
            self.used.fetch_add(to - from, Ordering::Relaxed);
        } else {
            self.used.fetch_sub(from - to, Ordering::Relaxed);
        }
    }
}

/// Groups of growth that always trigger a rescan, however small the
/// rollup: below it a rescan is cheaper than any bookkeeping.
const RESCAN_GROUPS_MIN: usize = 1024;

/// Records folded per group held that trigger a rescan.
pub const RESCAN_RECORDS_PER_GROUP: u64 = 8;

/// Records folded that a rescan waits for at least, however few the
/// groups: a rollup of a few groups would otherwise rescan every few
/// thousand records.
pub const RESCAN_RECORDS_MIN: u64 = 1 << 16;

/// One rollup's bytes as reported to a [`MemoryBudget`]; see the module
/// doc.
#[derive(Debug, Clone, Default)]
pub struct BytesGauge {
    /// Bytes reported to the budget.
    reported: u64,
    /// Groups and bytes at the last rescan.
    scanned_groups: usize,
    scanned_bytes: u64,
    /// Records folded since the last rescan.
    records_since: u64,
}

impl BytesGauge {
    /// Counts `rollup`'s bytes after `records` more records were folded
    /// into it (rescanning its states when due), reports them to `budget`
    /// and returns them.
    pub fn update(&mut self, rollup: &Rollup, records: u64, budget: &MemoryBudget) -> u64 {
        self.records_since = self.records_since.saturating_add(records);
        let groups = rollup.group_count();
        let grown = groups.saturating_sub(self.scanned_groups);
        let due = grown >= RESCAN_GROUPS_MIN.max(self.scanned_groups / 8)
            || self.records_since
                >= (RESCAN_RECORDS_PER_GROUP * self.scanned_groups as u64).max(RESCAN_RECORDS_MIN)
            || groups < self.scanned_groups;
        let bytes = if due {
            self.rescan(rollup)
        } else {
            let per_group = self.scanned_bytes / self.scanned_groups.max(1) as u64;
            self.scanned_bytes + per_group * grown as u64
        };
        budget.report(self.reported, bytes);
        self.reported = bytes;
        bytes
    }

    /// Counts `rollup`'s bytes state by state now.
    pub fn rescan(&mut self, rollup: &Rollup) -> u64 {
        self.scanned_groups = rollup.group_count();
        self.scanned_bytes = rollup.heap_bytes() as u64;
        self.records_since = 0;
        self.scanned_bytes
    }

    /// The bytes last reported.
    pub fn reported(&self) -> u64 {
        self.reported
    }

    /// Takes this gauge's bytes out of `budget` (its rollup is gone or
    /// counted elsewhere).
    pub fn release(&mut self, budget: &MemoryBudget) {
        budget.report(self.reported, 0);
        self.reported = 0;
    }
}

#[cfg(test)]
mod tests {
    use cardinal_event::Timestamp;

    use super::*;
    use crate::{AggKind, Input, Limits, Shape};

    #[test]
    fn gauges_report_growth_and_release_it() {
        let shape = Shape {
            aggs: vec![AggKind::CountAll],
        };
        let budget = MemoryBudget::new(1 << 20);
        let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
        let mut gauge = BytesGauge::default();
        let empty = gauge.update(&rollup, 0, &budget);
        assert_eq!(budget.used(), empty);
        for key in 0..20_000_u32 {
            rollup.fold(Timestamp(0), &key.to_le_bytes(), &[Input::Null]);
        }
        let full = gauge.update(&rollup, 20_000, &budget);
        assert!(full > empty + 20_000 * 48, "{full} bytes");
        assert_eq!(budget.used(), full);
        assert!(!budget.holds(), "{full} bytes in a 1 MiB budget");
        gauge.release(&budget);
        assert_eq!(budget.used(), 0);
    }
}
