//! `CREATE ATTRIBUTION`: per-user chains, conversions credited by model,
//! credit rows into summaries and JSON lines; all at the end of a run, or
//! as an event-time frontier advances in a long-running engine.
//!
//! ```text
//!  workers (parallel, any split): parse -> touch / conversion conditions
//!      -> Event { time, input position, user, campaign, site | value }
//!      pushed to the Collector's list of the user's shard group
//!      (Router::group_of)
//!  Setup::absorb(collectors): the lists move into the attribution's held
//!      events, per shard group; campaign and site codes become the
//!      attribution's own
//!  Setup::release(frontier_ms), one owner thread per shard group (its
//!      single writer): the group's held events with time <= frontier,
//!      in (event time, input position) order, applied: a touch is
//!      appended to the user's chain, a conversion takes the chain (emit
//!      and free) and credits it by model; trim slices run as event time
//!      advances. The rest stay held for a later frontier.
//!  caller: credit rows of the release, sorted by (conversion time,
//!      position, touch order) -> fold_credits into the summaries over the
//!      credit stream, JSON lines, snapshot
//! ```
//!
//! **`cardinal run`** absorbs every worker's events when the input ends
//! and releases them once, at `u64::MAX`. Each group's events are then
//! all held at once and applied in (event time, input index, byte offset)
//! order, so the credit rows are a function of the inputs alone: not of
//! `--threads`, nor of how inputs are split into byte ranges or jobs, nor
//! of which worker saw which record. The price is that every touch and
//! conversion is held ([`EVENT_BYTES`], 48 bytes each) until the input
//! ends, and no credit row leaves before it does.
//!
//! **A long-running engine** absorbs its workers' collectors as batches
//! arrive and releases at a frontier that trails its watermark (say, the
//! watermark minus an allowed lateness). Within a release, events are
//! applied in the same (time, position) order, and a release only applies
//! events at or before its frontier, so as long as no event arrives at or
//! before a frontier already released, the credit rows of all releases,
//! concatenated, are exactly those of one release at the end, whatever
//! the batches and frontiers were. Credit rows leave as the frontier
//! passes their conversions, and only the events past the frontier stay
//! held (`Setup::held_bytes` counts them, so a caller can bound them by
//! releasing further). An event that arrives at or before a released
//! frontier is late: it is applied at the next release, ahead of the
//! others, in arrival order, and counted in [`Stats::late`], never
//! dropped. Nothing else touches the chains between two releases, so
//! that is as if it were applied the moment it arrived. A late touch can
//! no longer credit the conversions already released, and a late
//! conversion credits the chain as it then is.
//!
//! Campaigns and sites are interned to the chains' 32-bit codes per
//! attribution (code 0 is NULL), at most [`NAMES_MAX`] distinct values of
//! each; later new values are kept as NULL and counted.

use std::collections::HashMap;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use cardinal_chains::attribution;
use cardinal_chains::{Config, Store, TIME_MS_MAX, UserId};
use cardinal_event::{ColumnType, Record, Timestamp, Value, ValueError};
use cardinal_rollup::{Limits, Rollup, Shape};
use cardinal_route::{Attribution, EvalError, Expr, Model, Plan, Routed, Scratch, Summary};

use crate::feed::{HashMemo, feeds_of, fold_routed};
use crate::rejects::eval_reason;

mod image;
mod stream;
#[cfg(test)]
mod tests;

pub use stream::EVENT_BYTES;
use stream::{Event, Held, What};

/// Most distinct campaigns, and most distinct sites, one attribution keeps
/// (codes `1..=NAMES_MAX`). A touch point with a new value past the limit
/// keeps NULL instead, and the run warns with the count.
pub const NAMES_MAX: u32 = 1 << 20;

/// Users a store is laid out for (more still fit: shards grow).
const KEYS_EXPECTED: u64 = 1 << 20;
/// Most shard groups (owner threads) per attribution: 2^4.
const GROUP_BITS_MAX: u8 = 4;
const DAY_MS: u64 = 86_400_000;
const MICROS: f64 = 1e6;
const NAMES_MAGIC: &str = "cardinal-names 1";

/// Distinct byte strings and their codes (`index + 1`; 0 is NULL).
#[derive(Debug, Default, Clone)]
struct Names {
    codes: HashMap<Box<[u8]>, u32>,
    names: Vec<Box<[u8]>>,
    /// Values refused at [`NAMES_MAX`].
    overflow: u64,
}

impl Names {
    fn code(&mut self, name: &[u8]) -> u32 {
        if let Some(&code) = self.codes.get(name) {
            return code;
        }
        if self.names.len() >= NAMES_MAX as usize {
            self.overflow += 1;
            return 0;
        }
        self.names.push(name.into());
        let code = u32::try_from(self.names.len()).expect("at most NAMES_MAX");
        self.codes.insert(name.into(), code);
        code
    }

    fn name(&self, code: u32) -> Option<&[u8]> {
        let index = usize::try_from(code).ok()?.checked_sub(1)?;
        self.names.get(index).map(|n| &n[..])
    }

    /// Codes of `other`'s names in `self` (adding the new ones), indexed
    /// by `other`'s codes.
    fn absorb(&mut self, other: &Names) -> Vec<u32> {
        let mut map = Vec::with_capacity(other.names.len() + 1);
        map.push(0);
        for name in &other.names {
            map.push(self.code(name));
        }
        self.overflow += other.overflow;
        map
    }
}

/// Counts a run reports; a release reports those since the previous one
/// (add them up with [`Stats::add`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Touch points applied to chains.
    pub touches: u64,
    /// Conversions applied.
    pub conversions: u64,
    /// Conversions with no chain, or none of whose records were in the
    /// window: no credit rows.
    pub conversions_uncredited: u64,
    /// Records skipped: NULL user or time, a time before 1970 or past the
    /// chains' 48-bit limit.
    pub skipped: u64,
    /// Conversion values that are not a finite number of micro-units
    /// (their credit rows' revenue is NULL).
    pub values_out_of_range: u64,
    /// Touch points dropped by the chains' limits (evicted past
    /// `CHAIN_BYTES_MAX`, or refused when a group is full).
    pub touches_dropped: u64,
    /// Touch points that arrived already older than the lookback at the
    /// chains' clock (the latest event time trimmed at): input out of time
    /// order by more than a lookback. No conversion at or after the clock
    /// could credit them.
    pub touches_expired: u64,
    /// Touch points and conversions absorbed at or before a frontier
    /// already released, applied out of time order (never in a run, which
    /// releases once).
    pub late: u64,
}

impl Stats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Stats) {
        self.touches += other.touches;
        self.conversions += other.conversions;
        self.conversions_uncredited += other.conversions_uncredited;
        self.skipped += other.skipped;
        self.values_out_of_range += other.values_out_of_range;
        self.touches_dropped += other.touches_dropped;
        self.touches_expired += other.touches_expired;
        self.late += other.late;
    }
}

/// The attributions over one input stream: their chains, dictionaries and
/// held events, from the start of a run (or of a long-running engine) to
/// its end.
#[derive(Debug)]
pub(crate) struct Setup<'p> {
    attributions: Vec<&'p Attribution>,
    /// The type of each attribution's user column.
    user_types: Vec<ColumnType>,
    stores: Vec<Store>,
    /// Per attribution, per shard group: the events not yet applied.
    held: Vec<Vec<Held>>,
    /// Shared with the [`Credits`] released, copied only when a new name
    /// arrives while a caller still holds them.
    names: Vec<Arc<[Names; 2]>>,
    /// Per attribution: counts of the events absorbed (skipped records,
    /// values out of range, late events) not yet reported by a release.
    absorbed: Vec<Stats>,
    /// The highest frontier released: an event at or before it is late.
    released_ms: Option<u64>,
    snapshot_dir: Option<PathBuf>,
}

impl<'p> Setup<'p> {
    /// The attributions reading `stream`; `None` if there are none. With
    /// `snapshot_dir`, each attribution's chains and dictionaries are
    /// restored from `DIR/<name>.chains` and `DIR/<name>.names` if present.
    pub(crate) fn new(
        plan: &'p Plan,
        stream: usize,
        threads: usize,
        snapshot_dir: Option<&Path>,
    ) -> Result<Option<Setup<'p>>> {
        let attributions: Vec<&Attribution> = plan
            .attributions
            .iter()
            .filter(|a| a.stream == stream)
            .collect();
        if attributions.is_empty() {
            return Ok(None);
        }
        let group_bits = u8::try_from(threads.max(1).ilog2())
            .unwrap_or(GROUP_BITS_MAX)
            .min(GROUP_BITS_MAX);
        let mut stores = Vec::new();
        let mut names = Vec::new();
        for a in &attributions {
            let lookback_ms = u64::from(a.lookback_days) * DAY_MS;
            let restored = match snapshot_dir {
                Some(dir) => restore(dir, &a.name)?,
                None => None,
            };
            match restored {
                Some((store, dictionaries)) => {
                    ensure!(
                        store.config().lookback_ms == lookback_ms,
                        "the chains snapshot of {} was written with a lookback of {} days, and it is now {} days",
                        a.name,
                        store.config().lookback_ms / DAY_MS,
                        a.lookback_days
                    );
                    stores.push(store);
                    names.push(Arc::new(dictionaries));
                }
                None => {
                    stores.push(Store::new(Config::for_keys(
                        KEYS_EXPECTED,
                        group_bits,
                        lookback_ms,
                    ))?);
                    names.push(Arc::new([Names::default(), Names::default()]));
                }
            }
        }
        let user_types = attributions
            .iter()
            .map(|a| plan.streams[a.stream].schema.columns[a.user].ty)
            .collect();
        let held = stores
            .iter()
            .map(|s| s.groups().iter().map(|_| Held::default()).collect())
            .collect();
        Ok(Some(Setup {
            absorbed: vec![Stats::default(); attributions.len()],
            attributions,
            user_types,
            stores,
            held,
            names,
            released_ms: None,
            snapshot_dir: snapshot_dir.map(Path::to_path_buf),
        }))
    }

    /// A worker's collector.
    pub(crate) fn collector(&self) -> Collector<'p> {
        Collector::with_routing(&self.attributions, &self.user_types, &self.routing())
    }

    /// How each attribution's store routes users: its router and its
    /// number of shard groups. A collector made elsewhere with the same
    /// routing ([`Collector::new`]) hands this setup events it can apply.
    pub(crate) fn routing(&self) -> Vec<(cardinal_chains::Router, usize)> {
        self.stores
            .iter()
            .map(|store| (store.router(), store.groups().len()))
            .collect()
    }

    /// Takes every event the collectors hold and holds it until a
    /// [`Setup::release`] reaches its time, leaving the collectors empty to
    /// observe more. An event at or before a frontier already released is
    /// late (see the module doc): it goes to the next release, counted.
    pub(crate) fn absorb(&mut self, collectors: &mut [Collector<'p>]) {
        let collected: Vec<Collected> = collectors.iter_mut().map(Collector::take).collect();
        self.absorb_collected(collected);
    }

    /// [`Setup::absorb`] of what collectors handed over ([`Collector::take`]),
    /// in the order given.
    pub(crate) fn absorb_collected(&mut self, collected: Vec<Collected>) {
        for collected in collected {
            for (i, (stats, local, mut events)) in collected.attributions.into_iter().enumerate() {
                let absorbed = &mut self.absorbed[i];
                absorbed.add(&stats);
                // Copies the dictionaries only if released credits still
                // share them and a name is new.
                let names = &mut self.names[i];
                let new = local.iter().any(|l| !l.names.is_empty() || l.overflow > 0);
                let (campaign_map, site_map) = if new {
                    let [campaigns, sites] = Arc::make_mut(names);
                    (campaigns.absorb(&local[0]), sites.absorb(&local[1]))
                } else {
                    (vec![0], vec![0])
                };
                for (held, from) in self.held[i].iter_mut().zip(&mut events) {
                    let mut events = std::mem::take(from);
                    for e in &mut events {
                        if let What::Touch { campaign, site } = &mut e.what {
                            *campaign = campaign_map[*campaign as usize];
                            *site = site_map[*site as usize];
                        }
                    }
                    absorbed.late += held.absorb(events, self.released_ms);
                }
            }
        }
    }

    /// Applies, per shard group on its owner thread, every held event with
    /// time <= `frontier_ms` (the late ones first, in arrival order; then
    /// in (time, position) order), and returns each attribution's new
    /// credit rows in (conversion time, position, touch order) order, with
    /// the counts since the previous release. Later events stay held. A
    /// frontier below one already released releases only late events. A
    /// run releases once, at `u64::MAX`.
    ///
    /// After an error the attribution's chains may hold part of the
    /// release: the caller stops.
    pub(crate) fn release(&mut self, frontier_ms: u64) -> Result<Vec<Credits<'p>>> {
        let frontier_ms = self.released_ms.map_or(frontier_ms, |r| r.max(frontier_ms));
        let mut all = Vec::new();
        for (i, &attribution) in self.attributions.iter().enumerate() {
            let mut stats = std::mem::take(&mut self.absorbed[i]);
            let model = chains_model(attribution.model);
            let lookback_ms = u64::from(attribution.lookback_days) * DAY_MS;
            let results: Vec<Result<(Vec<CreditRow>, Stats)>> = std::thread::scope(|scope| {
                let handles: Vec<_> = self.stores[i]
                    .groups_mut()
                    .iter_mut()
                    .zip(&mut self.held[i])
                    .filter(|(_, held)| held.has_work(frontier_ms))
                    .map(|(group, held)| {
                        scope.spawn(move || held.release(group, frontier_ms, model, lookback_ms))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("a chains owner panicked")))
                    })
                    .collect()
            });
            let mut rows = Vec::new();
            for result in results {
                let (group_rows, group_stats) = result?;
                rows.extend(group_rows);
                stats.add(&group_stats);
            }
            rows.sort_unstable_by_key(CreditRow::order);
            all.push(Credits {
                attribution,
                rows,
                names: Arc::clone(&self.names[i]),
                stats,
            });
        }
        self.released_ms = Some(frontier_ms);
        Ok(all)
    }

    /// Events held for a later release, over every attribution.
    pub(crate) fn held_events(&self) -> usize {
        self.held.iter().flatten().map(Held::len).sum()
    }

    /// Bytes the held events take ([`EVENT_BYTES`] per event of the
    /// vectors' capacity): what a caller bounds by releasing further.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held.iter().flatten().map(Held::bytes).sum()
    }

    /// Bytes the attributions hold: their chains (index and arena, no
    /// walk) and the events held for a later release; what a continuous
    /// engine counts against its memory budget beside the rollups.
    pub(crate) fn state_bytes(&self) -> u64 {
        self.stores.iter().map(Store::held_bytes).sum::<u64>() + self.held_bytes() as u64
    }

    /// Writes each attribution's chains and dictionaries to the snapshot
    /// directory, if the run has one (`DIR/<name>.chains`,
    /// `DIR/<name>.names`), each through a temp file renamed into place.
    /// Callers that clean up after an interrupt hold their lock meanwhile,
    /// so that an interrupt never leaves the temp files behind. Events
    /// still held are not in the snapshot: a caller releases first.
    pub(crate) fn save(&self) -> Result<()> {
        let Some(dir) = &self.snapshot_dir else {
            return Ok(());
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for ((a, store), names) in self.attributions.iter().zip(&self.stores).zip(&self.names) {
            // Names first: a dictionary newer than its chains only has
            // codes no chain uses yet.
            write_names(
                &cardinal_export::join_under(dir, &format!("{}.names", a.name))?,
                names,
            )?;
            let path = cardinal_export::join_under(dir, &format!("{}.chains", a.name))?;
            store
                .write_snapshot_file(&path)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

fn chains_model(model: Model) -> attribution::Model {
    match model {
        Model::LastTouch => attribution::Model::LastTouch,
        Model::FirstTouch => attribution::Model::FirstTouch,
        Model::Linear => attribution::Model::Linear,
        Model::PositionBased => attribution::Model::PositionBased,
        Model::TimeDecay { half_life_days } => attribution::Model::TimeDecay {
            half_life_ms: NonZeroU64::new(u64::from(half_life_days) * DAY_MS)
                .expect("the compiler refuses a zero half-life"),
        },
    }
}

/// A worker's side of the attributions: evaluates the touch and conversion
/// conditions over each record and keeps the matches per shard group.
#[derive(Debug)]
pub(crate) struct Collector<'p> {
    attributions: Vec<Compiled<'p>>,
    scratch: Scratch,
}

#[derive(Debug)]
struct Compiled<'p> {
    attribution: &'p Attribution,
    time: Expr,
    user: Expr,
    router: cardinal_chains::Router,
    /// Per shard group.
    events: Vec<Vec<Event>>,
    /// This worker's campaign and site codes.
    names: [Names; 2],
    stats: Stats,
}

/// What a collector gathered, owned (no borrow of the plan): how a
/// continuous engine's worker hands its events to the thread that owns the
/// chains ([`Setup::absorb_collected`]). Per attribution: the counts, the
/// worker's campaign and site codes, and the events per shard group.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    attributions: Vec<(Stats, [Names; 2], Vec<Vec<Event>>)>,
}

impl Collected {
    /// The event times gathered.
    pub(crate) fn times_ms(&self) -> impl Iterator<Item = u64> + '_ {
        self.attributions
            .iter()
            .flat_map(|(_, _, groups)| groups)
            .flatten()
            .map(|e| e.time_ms)
    }
}

impl<'p> Collector<'p> {
    /// A collector for `plan`'s attributions over `stream`, routing users
    /// as `routing` says ([`Setup::routing`] of a setup of the same plan
    /// and stream); `None` if no attribution reads the stream.
    pub(crate) fn new(
        plan: &'p Plan,
        stream: usize,
        routing: &[(cardinal_chains::Router, usize)],
    ) -> Option<Self> {
        let attributions: Vec<&Attribution> = plan
            .attributions
            .iter()
            .filter(|a| a.stream == stream)
            .collect();
        if attributions.is_empty() {
            return None;
        }
        let user_types: Vec<ColumnType> = attributions
            .iter()
            .map(|a| plan.streams[a.stream].schema.columns[a.user].ty)
            .collect();
        Some(Self::with_routing(&attributions, &user_types, routing))
    }

    fn with_routing(
        attributions: &[&'p Attribution],
        user_types: &[ColumnType],
        routing: &[(cardinal_chains::Router, usize)],
    ) -> Self {
        assert_eq!(
            attributions.len(),
            routing.len(),
            "a routing per attribution"
        );
        Collector {
            attributions: attributions
                .iter()
                .zip(routing)
                .zip(user_types)
                .map(|((a, &(router, groups)), &user_type)| Compiled {
                    attribution: a,
                    time: Expr::Column {
                        index: a.time,
                        ty: ColumnType::Timestamp,
                    },
                    user: Expr::Column {
                        index: a.user,
                        ty: user_type,
                    },
                    router,
                    events: vec![Vec::new(); groups],
                    names: [Names::default(), Names::default()],
                    stats: Stats::default(),
                })
                .collect(),
            scratch: Scratch::default(),
        }
    }

    /// Bytes the events gathered since the last [`Collector::take`] take
    /// ([`EVENT_BYTES`] per event of the vectors' capacity).
    pub(crate) fn held_bytes(&self) -> u64 {
        let events: usize = self
            .attributions
            .iter()
            .flat_map(|c| &c.events)
            .map(Vec::capacity)
            .sum();
        (events * EVENT_BYTES) as u64
    }

    /// Hands over everything gathered so far, leaving the collector empty
    /// to observe more.
    pub(crate) fn take(&mut self) -> Collected {
        Collected {
            attributions: self
                .attributions
                .iter_mut()
                .map(|c| {
                    let groups = c.events.len();
                    (
                        std::mem::take(&mut c.stats),
                        std::mem::take(&mut c.names),
                        std::mem::replace(&mut c.events, vec![Vec::new(); groups]),
                    )
                })
                .collect(),
        }
    }
}

impl Collector<'_> {
    /// Looks at one record of input `input` starting at byte `offset`.
    /// An error is the record's (a field that is not its type).
    pub(crate) fn observe(
        &mut self,
        record: &impl Record,
        input: u32,
        offset: u64,
    ) -> Result<(), EvalError> {
        let scratch = &mut self.scratch;
        for c in &mut self.attributions {
            let a = c.attribution;
            let conversion = matches!(a.conversion.eval(record, scratch)?, Value::Bool(true));
            if !conversion && !matches!(a.touch.eval(record, scratch)?, Value::Bool(true)) {
                continue;
            }
            let time_ms = match c.time.eval(record, scratch)? {
                Value::Time(Timestamp(t)) => u64::try_from(t).ok().filter(|&t| t <= TIME_MS_MAX),
                _ => None,
            };
            let user = match c.user.eval(record, scratch)? {
                Value::Int(i) => Some(u64::from_ne_bytes(i.to_ne_bytes())),
                Value::Text(t) => Some(cardinal_sketch::hash::bytes(t, 0)),
                _ => None,
            };
            let (Some(time_ms), Some(user)) = (time_ms, user) else {
                c.stats.skipped += 1;
                continue;
            };
            let what = if conversion {
                // A NULL value, or one that is not a finite number of
                // micro-units (counted), credits with a NULL revenue, as no
                // VALUE does.
                let value_micros = match &a.value {
                    None => None,
                    Some(e) => {
                        let micros = match e.eval(record, scratch)? {
                            Value::Int(i) => Some(i.checked_mul(1_000_000)),
                            #[expect(
                                clippy::cast_possible_truncation,
                                reason = "finite and under 2^63 in magnitude: exact after round"
                            )]
                            Value::Float(f) => {
                                let micros = (f * MICROS).round();
                                // i64::MAX as f64 rounds up to 2^63: refuse it.
                                Some(
                                    (micros.is_finite() && micros.abs() < 9.0e18)
                                        .then_some(micros as i64),
                                )
                            }
                            _ => None,
                        };
                        if micros == Some(None) {
                            c.stats.values_out_of_range += 1;
                        }
                        micros.flatten()
                    }
                };
                What::Conversion { value_micros }
            } else {
                let mut codes = [0u32; 2];
                for (i, e) in [&a.campaign, &a.site].into_iter().enumerate() {
                    let Some(e) = e else { continue };
                    codes[i] = match e.eval(record, scratch)? {
                        Value::Text(t) => c.names[i].code(t),
                        Value::Int(v) => c.names[i].code(v.to_string().as_bytes()),
                        _ => 0,
                    };
                }
                What::Touch {
                    campaign: codes[0],
                    site: codes[1],
                }
            };
            let group = c.router.group_of(UserId(user)) as usize;
            c.events[group].push(Event {
                time_ms,
                input,
                offset,
                user,
                what,
            });
        }
        Ok(())
    }
}

/// One credited touch point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreditRow {
    conversion_ms: u64,
    input: u32,
    offset: u64,
    /// The touch point's place among its conversion's rows (time order).
    rank: u32,
    touch_ms: u64,
    user: u64,
    campaign: u32,
    site: u32,
    credit: f64,
    /// `None` when the attribution declares no `VALUE`.
    revenue: Option<f64>,
}

impl CreditRow {
    fn order(&self) -> (u64, u32, u64, u32) {
        (self.conversion_ms, self.input, self.offset, self.rank)
    }
}

/// One attribution's credit rows and the names they refer to.
#[derive(Debug)]
pub struct Credits<'p> {
    /// The attribution that credited them.
    pub attribution: &'p Attribution,
    /// One row per touch point credited, in (conversion time, position,
    /// touch order).
    pub rows: Vec<CreditRow>,
    /// The attribution's dictionaries as of the release.
    names: Arc<[Names; 2]>,
    /// What the attribution counted.
    pub stats: Stats,
}

impl Credits<'_> {
    /// Row `index` as a record of the credit stream.
    fn record(&self, index: usize) -> CreditRecord<'_> {
        let row = &self.rows[index];
        CreditRecord {
            row,
            campaign: self.names[0].name(row.campaign),
            site: self.names[1].name(row.site),
            model: self.attribution.model.name(),
        }
    }

    /// Campaign and site values dropped at [`NAMES_MAX`], since the
    /// attribution started.
    pub fn names_overflow(&self) -> u64 {
        self.names[0].overflow + self.names[1].overflow
    }

    /// Writes one JSON object per credit row.
    pub fn write_json_lines(&self, out: &mut impl Write) -> Result<()> {
        // Campaign and site bytes print as summaries print text: escaped,
        // so two different values never print alike.
        let text = |bytes: Option<&[u8]>| {
            bytes.map_or_else(
                || "null".to_owned(),
                |bytes| {
                    cardinal_export::json_string(cardinal_export::text_escaped(bytes).as_bytes())
                },
            )
        };
        let time = |ms: u64| {
            let t = Timestamp(i64::try_from(ms).expect("at most TIME_MS_MAX"));
            cardinal_export::json_string(t.to_string().as_bytes())
        };
        let name = cardinal_export::json_string(self.attribution.name.as_bytes());
        let model = cardinal_export::json_string(self.attribution.model.name().as_bytes());
        for index in 0..self.rows.len() {
            let record = self.record(index);
            let row = record.row;
            writeln!(
                out,
                "{{\"attribution\":{name},\"conversion_ts\":{},\"user_id\":{},\"touch_ts\":{},\"campaign\":{},\"site\":{},\"model\":{model},\"credit\":{},\"revenue\":{}}}",
                time(row.conversion_ms),
                i64::from_ne_bytes(row.user.to_ne_bytes()),
                time(row.touch_ms),
                text(record.campaign),
                text(record.site),
                row.credit,
                row.revenue
                    .map_or_else(|| "null".to_owned(), |r| r.to_string()),
            )?;
        }
        Ok(())
    }
}

/// A credit row seen through the credit stream's schema
/// (`cardinal_route::CREDIT_COLUMNS`).
struct CreditRecord<'a> {
    row: &'a CreditRow,
    campaign: Option<&'a [u8]>,
    site: Option<&'a [u8]>,
    model: &'static str,
}

impl Record for CreditRecord<'_> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        match column {
            3 => self.campaign,
            4 => self.site,
            5 => Some(self.model.as_bytes()),
            _ => None,
        }
    }

    fn value(&self, column: usize, _: ColumnType) -> Result<Value<'_>, ValueError> {
        let time = |ms: u64| Value::Time(Timestamp(i64::try_from(ms).unwrap_or(i64::MAX)));
        Ok(match column {
            0 => time(self.row.conversion_ms),
            1 => time(self.row.touch_ms),
            2 => Value::Int(i64::from_ne_bytes(self.row.user.to_ne_bytes())),
            3..=5 => self.field(column).map_or(Value::Null, Value::Text),
            6 => Value::Float(self.row.credit),
            7 => self.row.revenue.map_or(Value::Null, Value::Float),
            _ => Value::Null,
        })
    }
}

/// The summaries over the credit streams of the attributions that read
/// `stream`, in declaration order.
pub(crate) fn credit_summaries(plan: &Plan, stream: usize) -> Vec<&Summary> {
    plan.summaries
        .iter()
        .filter(|s| {
            plan.attributions
                .iter()
                .any(|a| a.stream == stream && a.credit_stream == s.stream)
        })
        .collect()
}

/// Empty rollups for `shapes` (the summaries over credit streams), to
/// fold releases into with [`fold_credits`].
pub(crate) fn credit_rollups(shapes: &[Shape], limits: Limits) -> Result<Vec<Rollup>> {
    Ok(shapes
        .iter()
        .map(|shape| Rollup::new(shape.clone(), limits))
        .collect::<Result<_, _>>()?)
}

/// Folds every credit row of `credits` (one release) into `rollups`, one
/// per summary that reads a credit stream, in order. Folding each release
/// as it comes into the same rollups gives the rollups of folding the
/// releases' rows all at once, in the same order.
pub(crate) fn fold_credits(
    credits: &[Credits<'_>],
    summaries: &[&Summary],
    shapes: &[Shape],
    rollups: &mut [Rollup],
) -> Result<()> {
    assert!(
        summaries.len() == shapes.len() && shapes.len() == rollups.len(),
        "a shape and a rollup per summary"
    );
    let mut scratch = Scratch::default();
    let mut hashed = HashMemo::default();
    let mut routed = Routed::default();
    for ((summary, shape), rollup) in summaries.iter().zip(shapes).zip(rollups) {
        let feeds = feeds_of(summary, shape);
        let of = credits
            .iter()
            .find(|c| c.attribution.credit_stream == summary.stream)
            .context("a summary over a credit stream without its attribution")?;
        for index in 0..of.rows.len() {
            let record = of.record(index);
            if !summary
                .route(&record, &mut scratch, &mut routed)
                .with_context(|| format!("summary {} over credit rows", summary.name))?
            {
                continue;
            }
            fold_routed(&feeds, rollup, &routed, &mut hashed, None);
        }
    }
    Ok(())
}

/// Restores `DIR/<name>.chains` and `DIR/<name>.names`; `None` if the
/// chains file does not exist.
fn restore(dir: &Path, name: &str) -> Result<Option<(Store, [Names; 2])>> {
    let chains = cardinal_export::join_under(dir, &format!("{name}.chains"))?;
    if !chains.exists() {
        return Ok(None);
    }
    let (store, _) = Store::read_snapshot_file(&chains)
        .with_context(|| format!("reading {}", chains.display()))?;
    let path = cardinal_export::join_under(dir, &format!("{name}.names"))?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let names = read_names(&text).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some((store, names)))
}

/// The dictionaries as text: a magic line, then per dictionary a count
/// line and one hex-encoded name per line, in code order; then `end`.
fn write_names(path: &Path, names: &[Names; 2]) -> Result<()> {
    let mut text = format!("{NAMES_MAGIC}\n");
    for dictionary in names {
        text.push_str(&format!("{}\n", dictionary.names.len()));
        for name in &dictionary.names {
            for byte in name.iter() {
                text.push_str(&format!("{byte:02x}"));
            }
            text.push('\n');
        }
    }
    text.push_str("end\n");
    let tmp = path.with_extension("names.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

fn read_names(text: &str) -> Result<[Names; 2]> {
    let mut lines = text.lines();
    ensure!(lines.next() == Some(NAMES_MAGIC), "not a names file");
    let mut out = [Names::default(), Names::default()];
    for dictionary in &mut out {
        let count: usize = lines.next().context("truncated")?.parse()?;
        ensure!(count <= NAMES_MAX as usize, "more than NAMES_MAX names");
        for _ in 0..count {
            let line = lines.next().context("truncated")?;
            ensure!(line.len() % 2 == 0, "odd hex");
            let bytes = (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()?;
            let before = dictionary.names.len();
            dictionary.code(&bytes);
            ensure!(dictionary.names.len() == before + 1, "a name is repeated");
        }
    }
    if lines.next() != Some("end") {
        bail!("truncated");
    }
    Ok(out)
}

/// Shows `record` (of input `input` at `offset`, in file `name`, where
/// `at` says) to an attribution's collector; the reject reason and line
/// when the record is not of its types.
pub(crate) fn observe<R: Record>(
    collector: &mut Collector<'_>,
    record: &R,
    input: u32,
    offset: u64,
    name: &str,
    at: impl Fn() -> String,
) -> Option<(String, String)> {
    let e = collector.observe(record, input, offset).err()?;
    Some((
        eval_reason(&e),
        format!("{name}:{}: attribution: {e}", at()),
    ))
}
