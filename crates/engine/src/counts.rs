//! What a run counts: records folded, bytes read and rejects by reason,
//! kept per worker and summed ([`Counts`]). A leaf: it names nothing else
//! of the crate.

/// What workers counted, summed over them after a run.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Records folded: parsed, and routed by every summary of the stream
    /// (into its rollup, or left out by its `WHERE`). A rejected record is
    /// counted in `rejects` and not here, wherever it was rejected.
    pub records: u64,
    /// Bytes of input read (after decompression).
    pub bytes: u64,
    /// Records rejected, for any reason.
    pub rejects: u64,
    /// Rejected records by reason.
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
}

impl Counts {
    pub(crate) fn add(&mut self, other: &Counts) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.rejects += other.rejects;
        for (reason, n) in &other.rejects_by_reason {
            *self.rejects_by_reason.entry(reason.clone()).or_default() += n;
        }
    }
}
