//! One summary's lane of a worker's fold.

use anyhow::Result;
use cardinal_event::{Record, Timestamp};
use cardinal_rollup::{Folded, KeyHash};
use cardinal_route::{Arg, Scratch, Summary};

use super::{Lane, PREFETCH_DEPTH};
use crate::feed::{HashMemo, fold_routed, update_states};

/// What [`Lane::fold_route`] did with a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneFold {
    /// Held back per part of a large rollup.
    Held,
    /// Put in the prefetch ring.
    Deferred,
    /// Folded at once (or dropped, as said).
    Folded(Folded),
}

impl Lane<'_> {
    /// Folds the lane's current route (`routed`): held back per part when
    /// the rollup is in parts and the lane may hold, through the prefetch
    /// ring when the rollup has `prefetch_groups_min` groups, else at once
    /// after what the lane holds (folds stay in arrival order). A key too
    /// long is folded at once, to be dropped and rejected by the caller.
    #[inline]
    pub(crate) fn fold_route(
        &mut self,
        hashed: &mut HashMemo,
        prefetch_groups_min: usize,
    ) -> LaneFold {
        let key_fits = self.routed.key.len() <= cardinal_rollup::KEY_BYTES_MAX;
        if key_fits && self.can_pend && self.rollup.parts() > 1 {
            if let Some(held) = self.pend(hashed) {
                return held;
            }
        } else if key_fits && self.rollup.group_count() >= prefetch_groups_min {
            self.defer(hashed);
            return LaneFold::Deferred;
        }
        self.flush(hashed);
        LaneFold::Folded(fold_routed(
            &self.feeds,
            &mut self.rollup,
            &self.routed,
            hashed,
            None,
        ))
    }

    /// Holds the current route back in its part's buffer (see
    /// [`Pending`](crate::pending::Pending); the worker bounds what its lanes hold together,
    /// [`Fold::bound_pending`](super::Fold::bound_pending)): [`LaneFold::Held`], or the route dropped
    /// as older than the retention window, which is decided here, in
    /// arrival order, as a fold at once decides it ([`Rollup::admit`](cardinal_rollup::Rollup::admit)).
    /// `None` (holding nothing) when the route must be folded at once:
    /// when the held routes could then open more groups than the limit,
    /// whose choice of groups would depend on the order.
    fn pend(&mut self, hashed: &mut HashMemo) -> Option<LaneFold> {
        if self.near_group_limit(1) {
            self.drain(hashed);
            return None;
        }
        // Routes of the prefetch ring came first.
        self.flush(hashed);
        if !self
            .rollup
            .admit(self.routed.bucket.unwrap_or(Timestamp(0)))
        {
            return Some(LaneFold::Folded(Folded::DroppedExpired));
        }
        self.pending.push(&self.rollup, &self.routed);
        Some(LaneFold::Held)
    }

    /// Holds back a route of (`bucket`, `key`) with arguments `args`, from
    /// a caller that asked [`Lane::holds`], admitted by the retention
    /// window in arrival order as [`Lane::pend`] admits; `false` when the
    /// key is too long to hold, which is folded at once to be dropped (and
    /// counted) as [`Lane::fold_route`] drops it: the caller rejects the
    /// record. Always inlined into the two loops that hold a run's rows
    /// (as a call, its arguments went through the stack).
    #[inline(always)]
    pub(crate) fn hold(&mut self, bucket: Timestamp, key: &[u8], args: &[Arg]) -> bool {
        let hash = KeyHash::of(bucket, key);
        if key.len() > cardinal_rollup::KEY_BYTES_MAX {
            let folded = self.rollup.fold_held(hash, bucket, key, |_| {});
            debug_assert_eq!(folded, Folded::DroppedKeyTooLong);
            return false;
        }
        if self.rollup.admit(bucket) {
            self.pending.push_key(&self.rollup, hash, bucket, key, args);
        }
        true
    }

    /// [`Lane::hold`] of a key of `len` bytes, at most 16, given as two
    /// words, zero past them (a short text dimension's,
    /// [`cardinal_route::KeyColumn::short_key`]): hashed from the words and
    /// held without being written out first. Such a key is never too
    /// long to hold.
    #[inline(always)]
    pub(crate) fn hold_words(
        &mut self,
        bucket: Timestamp,
        words: [u64; 2],
        len: usize,
        args: &[Arg],
    ) {
        let hash = KeyHash::of_words(bucket, words, len);
        if self.rollup.admit(bucket) {
            self.pending
                .push_words(&self.rollup, hash, bucket, words, len, args);
        }
    }

    /// Whether `rows` more routes held back could open more groups than
    /// the rollup's limit (with those already held), whose choice of
    /// groups would then depend on the order: such routes fold at once.
    fn near_group_limit(&self, rows: usize) -> bool {
        let groups_max = usize::try_from(self.rollup.limits().groups_max).unwrap_or(usize::MAX);
        let groups = self.rollup.group_count();
        groups < groups_max && groups + self.pending.rows() + rows > groups_max
    }

    /// Whether the lane holds back each of `rows` more routes whose key
    /// fits ([`Lane::pend`]): its rollup is split into parts, and they
    /// cannot bring it to its group limit.
    pub(crate) fn holds(&self, rows: usize) -> bool {
        self.can_pend && self.rollup.parts() > 1 && !self.near_group_limit(rows)
    }

    /// Folds the routes held per part.
    pub(crate) fn drain(&mut self, hashed: &mut HashMemo) {
        let feeds = &self.feeds;
        self.pending
            .drain(&mut self.rollup, |rollup, hash, bucket, key, args| {
                let folded = rollup.fold_held(hash, bucket, key, |states| {
                    update_states(feeds, states, args, |_| &[], hashed);
                });
                debug_assert_ne!(folded, Folded::DroppedKeyTooLong, "checked when held back");
            });
    }

    /// Holds the current route back (see [`Deferred`](super::Deferred)), folding the
    /// oldest held one if the ring is full. The key fits
    /// [`cardinal_rollup::KEY_BYTES_MAX`], so the fold cannot be a reject.
    fn defer(&mut self, hashed: &mut HashMemo) {
        let bucket = self.routed.bucket.unwrap_or(Timestamp(0));
        let hash = self.rollup.prefetch(bucket, &self.routed.key);
        if self.deferred.len == PREFETCH_DEPTH {
            self.fold_oldest(hashed);
        }
        let d = &mut self.deferred;
        let at = (d.first + d.len) % PREFETCH_DEPTH;
        std::mem::swap(&mut d.ring[at].0, &mut self.routed);
        d.ring[at].1 = Some(hash);
        d.len += 1;
        // The route PREFETCH_DEPTH / 2 back has its slot by now: load its
        // group record and states; the one 3/4 back has those: load its
        // key bytes.
        if d.len > PREFETCH_DEPTH / 2 {
            let halfway = (d.first + d.len - 1 - PREFETCH_DEPTH / 2) % PREFETCH_DEPTH;
            if let Some(hash) = d.ring[halfway].1 {
                self.rollup.prefetch_group(hash);
            }
        }
        if d.len > PREFETCH_DEPTH * 3 / 4 {
            let later = (d.first + d.len - 1 - PREFETCH_DEPTH * 3 / 4) % PREFETCH_DEPTH;
            if let Some(hash) = d.ring[later].1 {
                self.rollup.prefetch_key(hash);
            }
        }
    }

    /// Folds the oldest held-back route.
    fn fold_oldest(&mut self, hashed: &mut HashMemo) {
        let d = &mut self.deferred;
        let (routed, hash) = &d.ring[d.first];
        let folded = fold_routed(&self.feeds, &mut self.rollup, routed, hashed, *hash);
        debug_assert_ne!(folded, Folded::DroppedKeyTooLong, "checked when held back");
        d.first = (d.first + 1) % PREFETCH_DEPTH;
        d.len -= 1;
    }

    /// Folds every held-back route, oldest first.
    pub(crate) fn flush(&mut self, hashed: &mut HashMemo) {
        while self.deferred.len > 0 {
            self.fold_oldest(hashed);
        }
    }
}

/// Routes `record` through every lane's filter and route; on the first
/// failure, the lane's index and the error (the record is then folded
/// into none).
#[inline]
pub(crate) fn route_lanes<Q: Record + ?Sized>(
    lanes: &mut [Lane<'_>],
    record: &Q,
    scratch: &mut Scratch,
) -> Result<(), (usize, cardinal_route::EvalError)> {
    for s in 0..lanes.len() {
        let owner = lanes[s].filter_owner;
        let pass = if owner == s {
            lanes[s].summary.passes(record, scratch)
        } else {
            // The owner comes first, so it has evaluated this record.
            Ok(lanes[owner].passed)
        };
        let known = known_bucket(lanes, s);
        let lane = &mut lanes[s];
        let routed = pass.and_then(|pass| {
            lane.passed = pass;
            if pass {
                lane.summary
                    .route_passed_in(record, known, scratch, &mut lane.routed)
            } else {
                Ok(())
            }
        });
        routed.map_err(|e| (s, e))?;
    }
    Ok(())
}

/// Lane `s`'s time bucket when the first lane with an equal bucket (its
/// `bucket_owner`, routed before it) has routed the current record.
#[inline]
pub(crate) fn known_bucket(lanes: &[Lane<'_>], s: usize) -> Option<Timestamp> {
    let owner = lanes[s].bucket_owner;
    (owner != s && lanes[owner].passed)
        .then(|| lanes[owner].routed.bucket)
        .flatten()
}

/// Whether some typed (non-text) column is read in more than one place
/// by `summaries` (filters, time buckets, dimensions, arguments): only
/// then does a [`ColumnCache`](cardinal_route::ColumnCache) save parsing; otherwise each field is
/// parsed once anyway and records are routed as they are.
pub(crate) fn reads_a_typed_column_twice(summaries: &[&Summary]) -> bool {
    let mut reads: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for summary in summaries {
        let schema = &summary.schema.columns;
        let mut count = |column: usize| {
            if schema
                .get(column)
                .is_some_and(|c| c.ty != cardinal_event::ColumnType::Text)
            {
                *reads.entry(column).or_default() += 1;
            }
        };
        for e in summary
            .filter
            .iter()
            .chain(&summary.dimensions)
            .chain(&summary.arguments)
        {
            e.columns(&mut count);
        }
        if let Some(bucket) = &summary.bucket {
            count(bucket.column);
        }
    }
    reads.values().any(|&n| n > 1)
}
