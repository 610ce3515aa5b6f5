//! The robust watermark of a stream: where a retention window and the
//! future tolerance are measured from, so that one event far in the future
//! (a `9999-12-31`) neither evicts every other group nor opens its own.
//!
//! The watermark is a high order statistic of the buckets seen, not their
//! maximum: the `k`-th newest bucket of the records seen, where
//! `k = min(WATERMARK_RECORDS, seen / 2 + 1)`. Once a stream has shown
//! twice [`WATERMARK_RECORDS`] records it takes that many records at or
//! after a bucket to move the watermark there; before, the median of what
//! it has shown. Kafka's and Druid's ingestion compare each event with the
//! wall clock (`earlyMessageRejectionPeriod`); a batch run replays history,
//! so the stream's own time is the reference here.
//!
//! ```text
//!  top:  (bucket, records) newest first, just enough entries to hold
//!        WATERMARK_RECORDS records (all of them while fewer were seen)
//!        [(day 9, 40), (day 8, 100)]  -> 128th newest record: day 8
//! ```
//!
//! A stream in time order keeps one or two entries, and a record of the
//! newest bucket only bumps a count. Merging two watermarks merges their
//! entries: the `k` newest records of a union are among the `k` newest of
//! either side, so the merged watermark is the one a single reader of all
//! the records would have, whatever the split.

/// Records at or after a bucket that move the watermark to it (once the
/// stream has shown twice as many): more than any burst of bad clocks
/// should hold, few enough that a stream in time order moves the
/// watermark within a batch of records.
pub const WATERMARK_RECORDS: u64 = 128;

/// Most entries a watermark's `top` holds: every entry but the last holds
/// a record and together they hold fewer than [`WATERMARK_RECORDS`]
/// (`settle` drops the last while the others hold that many), so at most
/// `WATERMARK_RECORDS` entries, plus the last. An image with more is
/// refused.
pub(crate) const WATERMARK_ENTRIES_MAX: usize = 129;

const _: () = assert!(WATERMARK_ENTRIES_MAX as u64 == WATERMARK_RECORDS + 1);

/// A robust high watermark over buckets; see the module doc.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watermark {
    /// (bucket, records seen of it), newest first, holding at least
    /// `min(seen, WATERMARK_RECORDS)` records.
    top: Vec<(i64, u64)>,
    /// Records in `top`.
    kept: u64,
    /// Records seen, `top`'s or not.
    seen: u64,
    /// The watermark as of the last change, `i64::MIN` before any record.
    at: i64,
}

impl Watermark {
    /// Counts a record of `bucket`.
    #[inline]
    pub(crate) fn observe(&mut self, bucket: i64) {
        self.seen += 1;
        match self.top.first_mut() {
            // A stream in time order: a record of the newest bucket, which
            // alone holds enough records to be the watermark.
            Some((newest, records)) if *newest == bucket && *records >= WATERMARK_RECORDS => {
                *records += 1;
                self.kept += 1;
                debug_assert_eq!(self.at, bucket);
                return;
            }
            _ => {}
        }
        if self.kept >= WATERMARK_RECORDS && self.top.last().is_some_and(|&(b, _)| bucket < b) {
            // Older than every record the watermark can be taken from; only
            // `k` may have grown.
            if self.seen <= 2 * WATERMARK_RECORDS {
                self.settle();
            }
            return;
        }
        self.add(bucket, 1);
        self.settle();
    }

    /// Takes in the records another watermark has seen.
    pub(crate) fn merge(&mut self, other: &Watermark) {
        for &(bucket, records) in &other.top {
            self.add(bucket, records);
        }
        self.seen += other.seen;
        self.settle();
    }

    /// The watermark: the `k`-th newest bucket seen (module doc), or
    /// `None` before any record.
    #[inline]
    pub(crate) fn get(&self) -> Option<i64> {
        (self.seen > 0).then_some(self.at)
    }

    /// Records seen of buckets after `bucket`, which is not older than the
    /// watermark (every such record is in `top`).
    pub(crate) fn records_after(&self, bucket: i64) -> u64 {
        assert!(
            self.get().is_none_or(|at| bucket >= at),
            "the records after the watermark are all kept"
        );
        self.top
            .iter()
            .take_while(|&&(b, _)| b > bucket)
            .map(|&(_, n)| n)
            .sum()
    }

    /// Appends the watermark's image: `| seen u64 | kept u64 | at i64 |
    /// entries u32 | 0 u32 |` then each entry of `top`, newest first, as
    /// `| bucket i64 | records u64 |` (little-endian).
    pub(crate) fn write_image(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.seen.to_le_bytes());
        out.extend_from_slice(&self.kept.to_le_bytes());
        out.extend_from_slice(&self.at.to_le_bytes());
        let entries = u32::try_from(self.top.len()).expect("at most WATERMARK_ENTRIES_MAX");
        assert!(self.top.len() <= WATERMARK_ENTRIES_MAX);
        out.extend_from_slice(&entries.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for &(bucket, records) in &self.top {
            out.extend_from_slice(&bucket.to_le_bytes());
            out.extend_from_slice(&records.to_le_bytes());
        }
    }

    /// The watermark of an image's fields (`top` read already, at most
    /// [`WATERMARK_ENTRIES_MAX`] entries), if they are one that observing
    /// and merging can make: buckets strictly descending, each with
    /// records, `kept` their sum, at least `min(seen, WATERMARK_RECORDS)`
    /// and at most `seen`, and nothing for [`Watermark::settle`] to drop or
    /// move. Why not, otherwise.
    pub(crate) fn from_image(
        seen: u64,
        kept: u64,
        at: i64,
        top: Vec<(i64, u64)>,
    ) -> Result<Self, &'static str> {
        if top.len() > WATERMARK_ENTRIES_MAX {
            return Err("more watermark entries than WATERMARK_ENTRIES_MAX");
        }
        if top.windows(2).any(|pair| pair[0].0 <= pair[1].0) {
            return Err("watermark buckets not strictly descending");
        }
        if top.iter().any(|&(_, records)| records == 0) {
            return Err("a watermark entry without records");
        }
        let sum = top
            .iter()
            .try_fold(0u64, |sum, &(_, records)| sum.checked_add(records));
        if sum != Some(kept) || kept > seen || kept < seen.min(WATERMARK_RECORDS) {
            return Err("watermark counts that do not add up");
        }
        if seen == 0 {
            return if at == 0 {
                Ok(Self::default())
            } else {
                Err("a watermark of no records at a bucket")
            };
        }
        let mut watermark = Self {
            top,
            kept,
            seen,
            at,
        };
        let before = (watermark.top.len(), watermark.at);
        watermark.settle();
        if (watermark.top.len(), watermark.at) != before {
            return Err("a watermark that is not settled");
        }
        Ok(watermark)
    }

    /// Adds `records` records of `bucket` to `top`.
    fn add(&mut self, bucket: i64, records: u64) {
        match self.top.binary_search_by(|&(b, _)| bucket.cmp(&b)) {
            Ok(i) => self.top[i].1 += records,
            Err(i) => self.top.insert(i, (bucket, records)),
        }
        self.kept += records;
    }

    /// Drops the entries the watermark can no longer be taken from and
    /// finds the watermark again.
    fn settle(&mut self) {
        if self.top.is_empty() {
            return;
        }
        while let Some(&(_, last)) = self.top.last() {
            if self.kept - last < WATERMARK_RECORDS {
                break;
            }
            self.top.pop();
            self.kept -= last;
        }
        let k = WATERMARK_RECORDS.min(self.seen / 2 + 1);
        let mut records = 0;
        for &(bucket, n) in &self.top {
            records += n;
            if records >= k {
                self.at = bucket;
                break;
            }
        }
        debug_assert!(records >= k, "top holds the k newest records");
        debug_assert!(self.kept <= self.seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `k`-th newest of `buckets`, `k` as the module doc says.
    fn reference(buckets: &[i64]) -> Option<i64> {
        let mut sorted = buckets.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let k = WATERMARK_RECORDS.min(buckets.len() as u64 / 2 + 1);
        sorted.get(usize::try_from(k).expect("small") - 1).copied()
    }

    /// A small xorshift, so the test needs no dependency.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn a_few_future_records_do_not_move_it() {
        let mut watermark = Watermark::default();
        assert_eq!(watermark.get(), None);
        watermark.observe(253_402_214_400_000); // 9999-12-31, first
        for day in 0..10_i64 {
            for _ in 0..1_000 {
                watermark.observe(day);
            }
            for _ in 0..5 {
                watermark.observe(253_402_214_400_000);
            }
            assert_eq!(watermark.get(), Some(day));
        }
        assert!(watermark.top.len() <= 2, "{:?}", watermark.top);
    }

    #[test]
    fn it_is_the_k_th_newest_bucket_however_the_records_are_split() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for len in [0_usize, 1, 2, 3, 10, 200, 257, 5_000] {
            let buckets: Vec<i64> = (0..len)
                .map(|i| {
                    let jitter = i64::try_from(next(&mut state) % 50).expect("small");
                    i64::try_from(i / 40).expect("small") + jitter - 25
                })
                .collect();
            let mut whole = Watermark::default();
            let mut parts = [
                Watermark::default(),
                Watermark::default(),
                Watermark::default(),
            ];
            for (i, &bucket) in buckets.iter().enumerate() {
                whole.observe(bucket);
                assert_eq!(whole.get(), reference(&buckets[..=i]), "{len}: record {i}");
                let part = usize::try_from(next(&mut state) % 3).expect("small");
                parts[part].observe(bucket);
            }
            let mut merged = Watermark::default();
            for part in &parts {
                merged.merge(part);
            }
            assert_eq!(merged.get(), reference(&buckets), "{len} merged");
            assert_eq!(merged.seen, whole.seen);
            if let Some(at) = merged.get() {
                let after = buckets.iter().filter(|&&b| b > at + 10).count() as u64;
                assert_eq!(merged.records_after(at + 10), after, "{len} merged");
            }
        }
    }
}
