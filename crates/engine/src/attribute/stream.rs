//! One shard group's events between the workers and its owner: held in
//! event-time order until a frontier releases them, then applied to the
//! group's chains.
//!
//! ```text
//!  absorb:  worker lists --remap codes--> fresh (arrival order, unsorted)
//!                                     \-> late  (time <= last frontier:
//!                                                arrival order, counted)
//!  release(frontier), on the group's owner thread:
//!      fresh sorted by (time, input, offset), merged into waiting (sorted)
//!      apply: late in arrival order, then waiting[..k], where waiting[k]
//!             is the first event with time > frontier
//!      keep:  waiting[k..] for a later frontier
//! ```
//!
//! An event is 48 bytes (asserted below): time u64, offset u64, user u64,
//! input u32, and a 16-byte `What` (two u32 codes, or an `Option<i64>`).
//! A group holds `fresh`, `waiting` and `late` as plain vectors, so held
//! memory is their capacity times 48 ([`Held::bytes`]); a release that
//! merges a non-empty `waiting` with `fresh` briefly holds both and their
//! merge. Vectors left mostly empty by a release are shrunk, so a long
//! run that releases as it goes holds only the events past its frontier.
//!
//! Trim slices run every [`TRIM_EVERY_EVENTS`] applied events, counted
//! over the group's whole life rather than per release: the chains then
//! see the same appends, takes and trims at the same events whichever
//! frontiers split the stream, and the releases add up to one release at
//! the end, the chains' counts of dropped and expired touches included.

use anyhow::Result;
use cardinal_chains::attribution::{self, Conversion};
use cardinal_chains::{CampaignId, Kind, ShardGroup, SiteId, UserId};

use super::{CreditRow, MICROS, Stats};

/// Events an owner applies between two trim slices.
const TRIM_EVERY_EVENTS: u64 = 4096;
/// Index slots one trim slice visits: bounded work, never a sweep.
const TRIM_SLOTS_BUDGET: u64 = 4096;
/// Chains hold touch points only; the kind is written, never read back.
const TOUCH_KIND: Kind = Kind::CLICK;
/// Touches the owner hands to the chains at once.
const TOUCH_BATCH: usize = 4 * cardinal_chains::APPEND_BATCH_WINDOW;

/// One touch point or conversion, as the owner applies it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Event {
    pub(super) time_ms: u64,
    pub(super) input: u32,
    pub(super) offset: u64,
    pub(super) user: u64,
    pub(super) what: What,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum What {
    Touch { campaign: u32, site: u32 },
    Conversion { value_micros: Option<i64> },
}

/// Bytes one held touch point or conversion costs, until released.
pub const EVENT_BYTES: usize = std::mem::size_of::<Event>();
const _: () = assert!(EVENT_BYTES == 48, "the docs and ARCHITECTURE.md say 48");

impl Event {
    pub(super) fn order(&self) -> (u64, u32, u64) {
        (self.time_ms, self.input, self.offset)
    }
}

/// One shard group's held events and its place in the trim schedule.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Absorbed since the last release, in arrival order.
    fresh: Vec<Event>,
    /// Past the frontier at the last release, sorted by [`Event::order`].
    waiting: Vec<Event>,
    /// Absorbed at or before the last frontier, in arrival order: applied
    /// first at the next release.
    late: Vec<Event>,
    /// Events applied over the group's life (the trim schedule).
    applied: u64,
}

impl Held {
    /// Takes `events` as they arrived. With a frontier already released,
    /// those at or before it are late; returns how many were.
    pub(super) fn absorb(&mut self, mut events: Vec<Event>, released_ms: Option<u64>) -> u64 {
        let Some(frontier) = released_ms else {
            // Nothing released yet (a run's only case): move the list in
            // rather than copy it when it is the first.
            if self.fresh.is_empty() {
                self.fresh = events;
            } else {
                self.fresh.append(&mut events);
            }
            return 0;
        };
        let mut late = 0;
        for e in events {
            if e.time_ms <= frontier {
                self.late.push(e);
                late += 1;
            } else {
                self.fresh.push(e);
            }
        }
        late
    }

    /// The held events (absorbed since the last release, waiting past the
    /// frontier in order, late in arrival order) and the events applied
    /// over the group's life: what an image of the group holds.
    pub(super) fn parts(&self) -> ([&[Event]; 3], u64) {
        ([&self.fresh, &self.waiting, &self.late], self.applied)
    }

    /// A group from its [`Held::parts`]; `waiting` is put back in order.
    pub(super) fn from_parts(
        fresh: Vec<Event>,
        mut waiting: Vec<Event>,
        late: Vec<Event>,
        applied: u64,
    ) -> Self {
        waiting.sort_unstable_by_key(Event::order);
        Self {
            fresh,
            waiting,
            late,
            applied,
        }
    }

    /// Held events.
    pub(super) fn len(&self) -> usize {
        self.fresh.len() + self.waiting.len() + self.late.len()
    }

    /// Bytes the held events' vectors take.
    pub(super) fn bytes(&self) -> usize {
        (self.fresh.capacity() + self.waiting.capacity() + self.late.capacity()) * EVENT_BYTES
    }

    /// Whether [`Held::release`] at `frontier_ms` has anything to do.
    pub(super) fn has_work(&self, frontier_ms: u64) -> bool {
        !self.fresh.is_empty()
            || !self.late.is_empty()
            || self
                .waiting
                .first()
                .is_some_and(|e| e.time_ms <= frontier_ms)
    }

    /// Applies the late events in arrival order, then every other held
    /// event with time <= `frontier_ms` in (time, input, offset) order, to
    /// `group`; returns the credit rows (in application order) and counts.
    pub(super) fn release(
        &mut self,
        group: &mut ShardGroup,
        frontier_ms: u64,
        model: attribution::Model,
        lookback_ms: u64,
    ) -> Result<(Vec<CreditRow>, Stats)> {
        let mut fresh = std::mem::take(&mut self.fresh);
        fresh.sort_unstable_by_key(Event::order);
        self.waiting = if self.waiting.is_empty() {
            fresh
        } else {
            merge(std::mem::take(&mut self.waiting), fresh)
        };
        let due = self.waiting.partition_point(|e| e.time_ms <= frontier_ms);
        let mut owner = Owner::new(group, model, lookback_ms, self.applied);
        let applied = owner.apply(self.late.iter().chain(&self.waiting[..due]));
        let (rows, stats, applied) = match applied {
            Ok(()) => owner.finish()?,
            Err(e) => {
                // The events are spent either way: the group has seen part
                // of them, and applying them twice would be worse.
                self.late.clear();
                self.waiting.drain(..due);
                return Err(e);
            }
        };
        self.applied = applied;
        self.late.clear();
        self.waiting.drain(..due);
        shrink(&mut self.late);
        shrink(&mut self.waiting);
        Ok((rows, stats))
    }
}

/// Frees a vector's memory once it is mostly unused: all of it when empty
/// (a run's release at the end), else down to twice its length.
fn shrink(events: &mut Vec<Event>) {
    if events.is_empty() {
        *events = Vec::new();
    } else if events.capacity() > 4 * events.len() {
        events.shrink_to(2 * events.len());
    }
}

/// The two sorted lists as one, `a`'s event first among equal keys (keys
/// are unique within an attribution: one event per record).
fn merge(a: Vec<Event>, b: Vec<Event>) -> Vec<Event> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => {
                if y.order() < x.order() {
                    b.next()
                } else {
                    a.next()
                }
            }
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// A group's single writer during one release.
struct Owner<'g> {
    group: &'g mut ShardGroup,
    model: attribution::Model,
    lookback_ms: u64,
    /// Events applied over the group's life, this release's included.
    applied: u64,
    stats: Stats,
    rows: Vec<CreditRow>,
    chain: Vec<cardinal_chains::Record>,
    credits: Vec<attribution::Credit>,
    // Touches wait here and go to the group in batches (`append_batch`
    // overlaps their memory accesses), always before the next trim slice or
    // conversion, so the group sees the events in their order.
    touches: Vec<(UserId, cardinal_chains::Record)>,
    outcomes: Vec<cardinal_chains::AppendOutcome>,
}

impl<'g> Owner<'g> {
    fn new(
        group: &'g mut ShardGroup,
        model: attribution::Model,
        lookback_ms: u64,
        applied: u64,
    ) -> Owner<'g> {
        Owner {
            group,
            model,
            lookback_ms,
            applied,
            stats: Stats::default(),
            rows: Vec::new(),
            chain: Vec::new(),
            credits: Vec::new(),
            touches: Vec::with_capacity(TOUCH_BATCH),
            outcomes: Vec::with_capacity(TOUCH_BATCH),
        }
    }

    fn apply<'e>(&mut self, events: impl Iterator<Item = &'e Event>) -> Result<()> {
        for e in events {
            if self.applied.is_multiple_of(TRIM_EVERY_EVENTS) {
                self.append_touches()?;
                self.group.trim_slice(e.time_ms, TRIM_SLOTS_BUDGET);
            }
            self.applied += 1;
            let user = UserId(e.user);
            match e.what {
                What::Touch { campaign, site } => {
                    self.stats.touches += 1;
                    let record = cardinal_chains::Record::new(
                        e.time_ms,
                        TOUCH_KIND,
                        CampaignId(campaign),
                        SiteId(site),
                    )?;
                    self.touches.push((user, record));
                    if self.touches.len() == TOUCH_BATCH {
                        self.append_touches()?;
                    }
                }
                What::Conversion { value_micros } => {
                    self.stats.conversions += 1;
                    self.append_touches()?;
                    self.convert(e, value_micros)?;
                }
            }
        }
        Ok(())
    }

    /// Takes the user's chain and credits it by the model.
    fn convert(&mut self, e: &Event, value_micros: Option<i64>) -> Result<()> {
        let user = UserId(e.user);
        self.chain.clear();
        self.credits.clear();
        self.group.take(user, &mut self.chain)?;
        let conversion = Conversion {
            user,
            time_ms: e.time_ms,
            revenue_micros: value_micros.unwrap_or(0),
        };
        let n = attribution::attribute(
            &conversion,
            &self.chain,
            self.lookback_ms,
            self.model,
            |_| true,
            &mut self.credits,
        );
        if n == 0 {
            self.stats.conversions_uncredited += 1;
        }
        for (rank, c) in self.credits.iter().enumerate() {
            self.rows.push(CreditRow {
                conversion_ms: e.time_ms,
                input: e.input,
                offset: e.offset,
                rank: u32::try_from(rank).expect("a chain holds under 2^32 records"),
                touch_ms: c.touch.time_ms(),
                user: e.user,
                campaign: c.touch.campaign.0,
                site: c.touch.site.0,
                credit: c.credit,
                revenue: value_micros.map(|_| c.revenue_micros / MICROS),
            });
        }
        Ok(())
    }

    /// Hands the last waiting touches to the group: the rows, the counts
    /// and the events applied so far.
    fn finish(mut self) -> Result<(Vec<CreditRow>, Stats, u64)> {
        self.append_touches()?;
        Ok((self.rows, self.stats, self.applied))
    }

    /// Appends the waiting touches in order and empties the list. A touch
    /// that finds its group's arena or shard full is dropped and counted,
    /// as are the records a full chain evicts; the touches after it still
    /// go in.
    fn append_touches(&mut self) -> Result<()> {
        let mut rest = &self.touches[..];
        while !rest.is_empty() {
            self.outcomes.clear();
            let result = self.group.append_batch(rest, &mut self.outcomes);
            self.stats.touches_dropped += self
                .outcomes
                .iter()
                .map(|o| u64::from(o.records_evicted))
                .sum::<u64>();
            self.stats.touches_expired += self.outcomes.iter().filter(|o| o.expired).count() as u64;
            match result {
                Ok(()) => break,
                Err(cardinal_chains::Error::LimitExceeded { .. }) => {
                    self.stats.touches_dropped += 1;
                    rest = &rest[self.outcomes.len() + 1..];
                }
                Err(other) => return Err(other.into()),
            }
        }
        self.touches.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(time_ms: u64, input: u32, offset: u64) -> Event {
        Event {
            time_ms,
            input,
            offset,
            user: 1,
            what: What::Conversion { value_micros: None },
        }
    }

    #[test]
    fn merge_keeps_the_order() {
        let a = vec![
            event(1, 0, 0),
            event(3, 0, 5),
            event(3, 1, 0),
            event(9, 0, 0),
        ];
        let b = vec![event(0, 2, 0), event(3, 0, 7), event(4, 0, 0)];
        let merged: Vec<_> = merge(a, b).iter().map(Event::order).collect();
        let mut sorted = merged.clone();
        sorted.sort_unstable();
        assert_eq!(merged, sorted);
        assert_eq!(merged.len(), 7);
    }

    #[test]
    fn late_events_are_split_off_by_the_frontier() {
        let mut held = Held::default();
        assert_eq!(held.absorb(vec![event(5, 0, 0), event(6, 0, 1)], None), 0);
        let late = held.absorb(
            vec![event(4, 0, 2), event(10, 0, 3), event(7, 0, 4)],
            Some(6),
        );
        assert_eq!(late, 1);
        assert_eq!(held.len(), 5);
        assert_eq!(held.late.len(), 1);
        assert!(held.bytes() >= 5 * EVENT_BYTES);
        assert!(held.has_work(0));
    }
}
