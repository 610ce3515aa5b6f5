//! `CREATE ATTRIBUTION` in `cardinal run`: per-user chains, conversions
//! credited by model, credit rows into summaries and JSON lines.
//!
//! ```text
//!  workers (parallel, any split): parse -> touch / conversion conditions
//!      -> Event { time, input position, user, campaign, site | value }
//!      pushed to the list of the user's shard group (Router::group_of)
//!  owners (one thread per shard group, its single writer): the group's
//!      events from every worker, sorted by (event time, input position),
//!      applied in that order: a touch is appended to the user's chain, a
//!      conversion takes the chain (emit and free) and credits it by model;
//!      trim slices run as event time advances
//!  main: credit rows sorted by (conversion time, position, touch order)
//!      -> summaries over the credit stream, JSON lines, snapshot
//! ```
//!
//! Sorting by (event time, input index, byte offset) makes the result a
//! function of the inputs alone: not of `--threads`, nor of how inputs are
//! split into byte ranges or jobs, nor of which worker saw which record.
//! The price is that every touch and conversion is held (48 bytes each)
//! until the input ends, and no credit row leaves before it does; a
//! long-running server needs a watermark instead (ARCHITECTURE.md,
//! "Attribution in `cardinal run`").
//!
//! Campaigns and sites are interned to the chains' 32-bit codes per
//! attribution (code 0 is NULL), at most [`NAMES_MAX`] distinct values of
//! each; later new values are kept as NULL and counted.

use std::collections::HashMap;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use cardinal_chains::attribution::{self, Conversion};
use cardinal_chains::{CampaignId, Config, Kind, ShardGroup, SiteId, Store, TIME_MS_MAX, UserId};
use cardinal_event::{ColumnType, Record, Timestamp, Value, ValueError};
use cardinal_rollup::{Limits, Rollup, Shape};
use cardinal_route::{Attribution, EvalError, Expr, Model, Plan, Routed, Scratch, Summary};

use crate::feed::{HashMemo, feeds_of, fold_routed};

/// Most distinct campaigns, and most distinct sites, one attribution keeps
/// (codes `1..=NAMES_MAX`). A touch point with a new value past the limit
/// keeps NULL instead, and the run warns with the count.
pub const NAMES_MAX: u32 = 1 << 20;

/// Events an owner applies between two trim slices.
const TRIM_EVERY_EVENTS: usize = 4096;
/// Index slots one trim slice visits: bounded work, never a sweep.
const TRIM_SLOTS_BUDGET: u64 = 4096;
/// Users a store is laid out for (more still fit: shards grow).
const KEYS_EXPECTED: u64 = 1 << 20;
/// Most shard groups (owner threads) per attribution: 2^4.
const GROUP_BITS_MAX: u8 = 4;
const DAY_MS: u64 = 86_400_000;
const MICROS: f64 = 1e6;
/// Chains hold touch points only; the kind is written, never read back.
const TOUCH_KIND: Kind = Kind::CLICK;
const NAMES_MAGIC: &str = "cardinal-names 1";

/// One touch point or conversion, as the owner applies it.
#[derive(Debug, Clone, Copy)]
struct Event {
    time_ms: u64,
    input: u32,
    offset: u64,
    user: u64,
    what: What,
}

#[derive(Debug, Clone, Copy)]
enum What {
    Touch { campaign: u32, site: u32 },
    Conversion { value_micros: Option<i64> },
}

impl Event {
    fn order(&self) -> (u64, u32, u64) {
        (self.time_ms, self.input, self.offset)
    }
}

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

/// Counts a run reports.
#[derive(Debug, Default, Clone, Copy)]
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
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.touches += other.touches;
        self.conversions += other.conversions;
        self.conversions_uncredited += other.conversions_uncredited;
        self.skipped += other.skipped;
        self.values_out_of_range += other.values_out_of_range;
        self.touches_dropped += other.touches_dropped;
        self.touches_expired += other.touches_expired;
    }
}

/// The attributions over one input stream, their stores and dictionaries,
/// from the start of a run to its end.
#[derive(Debug)]
pub(crate) struct Setup<'p> {
    attributions: Vec<&'p Attribution>,
    /// The type of each attribution's user column.
    user_types: Vec<ColumnType>,
    stores: Vec<Store>,
    names: Vec<[Names; 2]>,
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
                    names.push(dictionaries);
                }
                None => {
                    stores.push(Store::new(Config::for_keys(
                        KEYS_EXPECTED,
                        group_bits,
                        lookback_ms,
                    ))?);
                    names.push([Names::default(), Names::default()]);
                }
            }
        }
        let user_types = attributions
            .iter()
            .map(|a| plan.streams[a.stream].schema.columns[a.user].ty)
            .collect();
        Ok(Some(Setup {
            attributions,
            user_types,
            stores,
            names,
            snapshot_dir: snapshot_dir.map(Path::to_path_buf),
        }))
    }

    /// A worker's collector.
    pub(crate) fn collector(&self) -> Collector<'p> {
        Collector {
            attributions: self
                .attributions
                .iter()
                .zip(&self.stores)
                .zip(&self.user_types)
                .map(|((a, store), &user_type)| Compiled {
                    attribution: a,
                    time: Expr::Column {
                        index: a.time,
                        ty: ColumnType::Timestamp,
                    },
                    user: Expr::Column {
                        index: a.user,
                        ty: user_type,
                    },
                    router: store.router(),
                    events: vec![Vec::new(); store.groups().len()],
                    names: [Names::default(), Names::default()],
                    stats: Stats::default(),
                })
                .collect(),
            scratch: Scratch::default(),
        }
    }

    /// Applies every worker's events in (time, position) order, one
    /// thread per shard group, and returns each attribution's credit rows
    /// in (conversion time, position, touch order) order. With a snapshot
    /// directory, writes the chains and dictionaries back.
    pub(crate) fn apply(&mut self, collectors: Vec<Collector<'p>>) -> Result<Vec<Credits<'p>>> {
        let mut collectors = collectors;
        let mut all = Vec::new();
        for (i, &attribution) in self.attributions.iter().enumerate() {
            let mut stats = Stats::default();
            let groups = self.stores[i].groups().len();
            let mut events: Vec<Vec<Event>> = vec![Vec::new(); groups];
            for collector in &mut collectors {
                let compiled = &mut collector.attributions[i];
                stats.add(&compiled.stats);
                let [campaigns, sites] = &mut self.names[i];
                let campaign_map = campaigns.absorb(&compiled.names[0]);
                let site_map = sites.absorb(&compiled.names[1]);
                for (into, from) in events.iter_mut().zip(&mut compiled.events) {
                    into.extend(from.drain(..).map(|mut e| {
                        if let What::Touch { campaign, site } = &mut e.what {
                            *campaign = campaign_map[*campaign as usize];
                            *site = site_map[*site as usize];
                        }
                        e
                    }));
                }
            }
            let model = chains_model(attribution.model);
            let lookback_ms = u64::from(attribution.lookback_days) * DAY_MS;
            let config = *self.stores[i].config();
            let store = std::mem::replace(&mut self.stores[i], Store::new(config)?);
            let results: Vec<Result<(ShardGroup, Vec<CreditRow>, Stats)>> =
                std::thread::scope(|scope| {
                    let handles: Vec<_> = store
                        .into_groups()
                        .into_iter()
                        .zip(events)
                        .map(|(group, mut events)| {
                            scope.spawn(move || {
                                events.sort_unstable_by_key(Event::order);
                                apply_group(group, &events, model, lookback_ms)
                            })
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
            let mut groups = Vec::new();
            let mut rows = Vec::new();
            for result in results {
                let (group, group_rows, group_stats) = result?;
                groups.push(group);
                rows.extend(group_rows);
                stats.add(&group_stats);
            }
            self.stores[i] = Store::from_groups(config, groups)?;
            rows.sort_unstable_by_key(CreditRow::order);
            all.push(Credits {
                attribution,
                rows,
                names: self.names[i].clone(),
                stats,
            });
        }
        Ok(all)
    }

    /// Writes each attribution's chains and dictionaries to the snapshot
    /// directory, if the run has one (`DIR/<name>.chains`,
    /// `DIR/<name>.names`), each through a temp file renamed into place.
    /// Callers that clean up after an interrupt hold their lock meanwhile,
    /// so that an interrupt never leaves the temp files behind.
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

/// One owner's work: its group's events, in order.
fn apply_group(
    mut group: ShardGroup,
    events: &[Event],
    model: attribution::Model,
    lookback_ms: u64,
) -> Result<(ShardGroup, Vec<CreditRow>, Stats)> {
    let mut stats = Stats::default();
    let mut rows = Vec::new();
    let mut chain = Vec::new();
    let mut credits = Vec::new();
    // Touches wait here and go to the group in batches (`append_batch`
    // overlaps their memory accesses), always before the next trim slice or
    // conversion, so the group sees the events in their order.
    let mut touches = Vec::with_capacity(TOUCH_BATCH);
    let mut outcomes = Vec::with_capacity(TOUCH_BATCH);
    for (n, e) in events.iter().enumerate() {
        if n % TRIM_EVERY_EVENTS == 0 {
            append_touches(&mut group, &mut touches, &mut outcomes, &mut stats)?;
            group.trim_slice(e.time_ms, TRIM_SLOTS_BUDGET);
        }
        let user = UserId(e.user);
        match e.what {
            What::Touch { campaign, site } => {
                let record = cardinal_chains::Record::new(
                    e.time_ms,
                    TOUCH_KIND,
                    CampaignId(campaign),
                    SiteId(site),
                )?;
                touches.push((user, record));
                if touches.len() == TOUCH_BATCH {
                    append_touches(&mut group, &mut touches, &mut outcomes, &mut stats)?;
                }
            }
            What::Conversion { value_micros } => {
                append_touches(&mut group, &mut touches, &mut outcomes, &mut stats)?;
                chain.clear();
                credits.clear();
                group.take(user, &mut chain)?;
                let conversion = Conversion {
                    user,
                    time_ms: e.time_ms,
                    revenue_micros: value_micros.unwrap_or(0),
                };
                let n = attribution::attribute(
                    &conversion,
                    &chain,
                    lookback_ms,
                    model,
                    |_| true,
                    &mut credits,
                );
                if n == 0 {
                    stats.conversions_uncredited += 1;
                }
                for (rank, c) in credits.iter().enumerate() {
                    rows.push(CreditRow {
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
            }
        }
    }
    append_touches(&mut group, &mut touches, &mut outcomes, &mut stats)?;
    Ok((group, rows, stats))
}

/// Touches [`apply_group`] hands to the chains at once.
const TOUCH_BATCH: usize = 4 * cardinal_chains::APPEND_BATCH_WINDOW;

/// Appends the waiting touches in order and empties the list. A touch that
/// finds its group's arena or shard full is dropped and counted, as are
/// the records a full chain evicts; the touches after it still go in.
fn append_touches(
    group: &mut ShardGroup,
    touches: &mut Vec<(UserId, cardinal_chains::Record)>,
    outcomes: &mut Vec<cardinal_chains::AppendOutcome>,
    stats: &mut Stats,
) -> Result<()> {
    let mut rest = &touches[..];
    while !rest.is_empty() {
        outcomes.clear();
        let result = group.append_batch(rest, outcomes);
        stats.touches_dropped += outcomes
            .iter()
            .map(|o| u64::from(o.records_evicted))
            .sum::<u64>();
        stats.touches_expired += outcomes.iter().filter(|o| o.expired).count() as u64;
        match result {
            Ok(()) => break,
            Err(cardinal_chains::Error::LimitExceeded { .. }) => {
                stats.touches_dropped += 1;
                rest = &rest[outcomes.len() + 1..];
            }
            Err(other) => return Err(other.into()),
        }
    }
    touches.clear();
    Ok(())
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
                c.stats.conversions += 1;
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
                c.stats.touches += 1;
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
    names: [Names; 2],
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

    /// Campaign and site values dropped at [`NAMES_MAX`].
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

/// Folds every credit row of `credits` into the summaries that read its
/// credit stream; one rollup per summary, in order.
pub(crate) fn fold_credits(
    credits: &[Credits<'_>],
    summaries: &[&Summary],
    shapes: &[Shape],
    limits: Limits,
) -> Result<Vec<Rollup>> {
    let mut rollups = Vec::new();
    let mut scratch = Scratch::default();
    let mut hashed = HashMemo::default();
    let mut routed = Routed::default();
    for (summary, shape) in summaries.iter().zip(shapes) {
        let mut rollup = Rollup::new(shape.clone(), limits)?;
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
            fold_routed(&feeds, &mut rollup, &routed, &mut hashed, None);
        }
        rollups.push(rollup);
    }
    Ok(rollups)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_absorb_and_round_trip() {
        let mut local = Names::default();
        assert_eq!(local.code(b"b"), 1);
        assert_eq!(local.code(b"a"), 2);
        assert_eq!(local.code(b"b"), 1);
        let mut global = Names::default();
        global.code(b"a");
        assert_eq!(global.absorb(&local), vec![0, 2, 1]);
        assert_eq!(global.name(2), Some(&b"b"[..]));
        assert_eq!(global.name(0), None);
        let dir = std::env::temp_dir().join(format!("cardinal-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("x.names");
        let pair = [global, local];
        write_names(&path, &pair).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        let back = read_names(&text).expect("parse");
        assert_eq!(back[0].names, pair[0].names);
        assert_eq!(back[1].names, pair[1].names);
        assert!(read_names(&text.replace("end\n", "")).is_err());
        assert!(read_names("cardinal-names 1\n1\n6\n0\nend\n").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_stop_at_the_limit() {
        let mut names = Names::default();
        for i in 0..NAMES_MAX {
            names.code(&i.to_le_bytes());
        }
        assert_eq!(names.code(b"one more"), 0);
        assert_eq!(names.overflow, 1);
        assert_eq!(names.code(&0u32.to_le_bytes()), 1);
    }
}
