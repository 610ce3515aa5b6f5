//! AK-style ad events: impressions, clicks and conversions, with the exact
//! answers to the questions cardinal estimates.
//!
//! The model, per generated impression:
//!
//! | field | drawn from |
//! |---|---|
//! | user | Zipf(s = [`USER_ZIPF_EXPONENT`]) over user indexes `0..users`; the id printed is a bijection of the index scattered over `0..2^63` (so it fits a signed BIGINT) |
//! | state | fixed per user: one of the 50 US states, weighted by 2020 census population |
//! | provider | one of the user's inventory providers, uniformly; membership is fixed per user (see [`PROVIDERS`]) |
//! | site | Zipf(1.1) over [`SITE_COUNT`] sites |
//! | campaign | Zipf(0.8) over [`CAMPAIGN_COUNT`] campaigns |
//! | revenue | log-normal, median $0.002 (a $2 CPM) |
//! | ts | evenly spread over the days in row order; [`LATE_RATE`] of impressions arrive up to [`LATE_SECS_MAX`] late |
//!
//! A click follows an impression with probability [`CLICK_RATE`] (same user,
//! site, provider and campaign, 1 to 60 s later) and a conversion follows a
//! click with probability [`CONVERSION_RATE`] (1 to 60 minutes later). Each
//! is written right after the event it follows, so rows are mostly, not
//! strictly, in time order. `--events` counts rows of every kind.
//!
//! Provider audiences overlap by designed amounts: each user's membership
//! comes from a per-mille position p fixed per user, and provider X holds the
//! users whose p falls in X's ranges. So alpha and beta share the 10% of
//! users with p in 450..550, for example. The audiences actually *observed*
//! (users with at least one impression through X) are smaller, because a user
//! with few events does not reach every provider it belongs to; [`Truth`]
//! counts those exactly, with one bitset over user indexes per provider and
//! per day.
//!
//! Rows are generated in blocks of [`BLOCK_ROWS`], each with its own
//! generator seeded from (seed, block), so a block's bytes do not depend on
//! the blocks before it: a parallel driver may generate blocks on several
//! cores and concatenate them in order.

// Maintainer note: the CSV header, the JSON field names and the column order
// are the stream declaration in issue 3 (`CREATE STREAM impressions ...`).
// Changing one means changing the declaration, the demo and the CLI tests.

use std::io::Write;

use crate::rng::{Cumulative, SplitMix64, Zipf, mix};
use crate::text::{Chunk, DAY_SECS, Date, push_micros, push_time_of_day, push_u64};
use crate::{Error, Result};

/// The CSV header, matching the `impressions` stream declaration.
pub const CSV_HEADER: &str = "ts,user_id,kind,state,site,provider,campaign,revenue\n";

/// Zipf exponent of user activity. Below 1 so that, at 10 events per user,
/// nearly every user shows up (rank 1 still gets about 1% of all events,
/// the heavy head real ad logs have).
pub const USER_ZIPF_EXPONENT: f64 = 0.8;
/// Sites events are spread over.
pub const SITE_COUNT: usize = 1_000;
/// Zipf exponent of site popularity.
pub const SITE_ZIPF_EXPONENT: f64 = 1.1;
/// Campaigns events are spread over.
pub const CAMPAIGN_COUNT: usize = 200;
/// Zipf exponent of campaign delivery.
pub const CAMPAIGN_ZIPF_EXPONENT: f64 = 0.8;
/// Share of impressions followed by a click: 1%, inside the 0.5%-2% of
/// display advertising.
pub const CLICK_RATE: f64 = 0.01;
/// Share of clicks followed by a conversion (3%).
pub const CONVERSION_RATE: f64 = 0.03;
/// Share of impressions that arrive late (0.1%).
pub const LATE_RATE: f64 = 0.001;
/// How late a late impression may be: 6 hours, so some cross midnight and
/// land in the previous day's bucket.
pub const LATE_SECS_MAX: u64 = 6 * 3600;
/// Rows per independently seeded block.
pub const BLOCK_ROWS: u64 = 1 << 16;

/// Users at most: user indexes and ids must stay below 2^63.
pub const USERS_MAX: u64 = 1 << 40;
/// Days at most: a century of timestamps.
pub const DAYS_MAX: u32 = 36_525;
/// Bits the truth's bitsets may take ((providers + days + 1) x users):
/// 2^33 bits is 1 GiB. More is refused rather than swapped.
pub const TRUTH_BITS_MAX: u64 = 1 << 33;

/// Log-normal revenue per kind, in micro-dollars: (median, sigma).
const REVENUE_MICROS: [(f64, f64); 3] = [(2_000.0, 0.9), (350_000.0, 0.6), (30_000_000.0, 1.0)];
/// Revenue cap: $1M keeps sums of billions of events inside u64 micros.
const REVENUE_MICROS_MAX: f64 = 1e12;

/// The kind of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ad was shown.
    Impression = 0,
    /// The ad was clicked.
    Click = 1,
    /// The click led to a purchase.
    Conversion = 2,
}

impl Kind {
    /// The three kinds, in column order of [`Truth`] arrays.
    pub const ALL: [Kind; 3] = [Kind::Impression, Kind::Click, Kind::Conversion];

    /// The name written in the `kind` column.
    pub fn name(self) -> &'static str {
        ["impression", "click", "conversion"][self as usize]
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The "v1" CSV with the [`CSV_HEADER`].
    Csv,
    /// The "v2" nested NDJSON: `{"ts":..,"kind":..,"user":{"id":..,"state":..},
    /// "ad":{"site":..,"provider":..,"campaign":..},"revenue":..}`.
    Json,
}

/// An inventory provider and the per-mille user positions it holds.
#[derive(Debug, Clone, Copy)]
pub struct Provider {
    /// The name written in the `provider` column.
    pub name: &'static str,
    /// Half-open per-mille ranges of the user position.
    pub ranges: &'static [(u16, u16)],
}

/// The providers and their designed audiences (per-mille of all users):
/// alpha 550, beta 250, gamma 300, delta 200, epsilon 30. Designed pairwise
/// overlaps: alpha-beta 100, alpha-delta 50, alpha-epsilon 30, beta-gamma
/// 100, gamma-delta 50; the other pairs are disjoint. Every user belongs to
/// at least one provider.
pub const PROVIDERS: [Provider; 5] = [
    Provider {
        name: "alpha",
        ranges: &[(0, 550)],
    },
    Provider {
        name: "beta",
        ranges: &[(450, 700)],
    },
    Provider {
        name: "gamma",
        ranges: &[(600, 900)],
    },
    Provider {
        name: "delta",
        ranges: &[(850, 1000), (0, 50)],
    },
    Provider {
        name: "epsilon",
        ranges: &[(200, 230)],
    },
];

/// The 50 US states and their 2020 census populations in thousands.
pub const STATES: [(&str, u64); 50] = [
    ("AL", 5_024),
    ("AK", 733),
    ("AZ", 7_152),
    ("AR", 3_012),
    ("CA", 39_538),
    ("CO", 5_774),
    ("CT", 3_606),
    ("DE", 990),
    ("FL", 21_538),
    ("GA", 10_712),
    ("HI", 1_455),
    ("ID", 1_839),
    ("IL", 12_813),
    ("IN", 6_786),
    ("IA", 3_190),
    ("KS", 2_938),
    ("KY", 4_506),
    ("LA", 4_658),
    ("ME", 1_362),
    ("MD", 6_177),
    ("MA", 7_030),
    ("MI", 10_077),
    ("MN", 5_706),
    ("MS", 2_961),
    ("MO", 6_155),
    ("MT", 1_084),
    ("NE", 1_962),
    ("NV", 3_105),
    ("NH", 1_377),
    ("NJ", 9_289),
    ("NM", 2_118),
    ("NY", 20_201),
    ("NC", 10_439),
    ("ND", 779),
    ("OH", 11_799),
    ("OK", 3_959),
    ("OR", 4_237),
    ("PA", 13_002),
    ("RI", 1_097),
    ("SC", 5_118),
    ("SD", 887),
    ("TN", 6_910),
    ("TX", 29_146),
    ("UT", 3_272),
    ("VT", 643),
    ("VA", 8_631),
    ("WA", 7_705),
    ("WV", 1_794),
    ("WI", 5_894),
    ("WY", 577),
];

/// What to generate.
#[derive(Debug, Clone)]
pub struct ImpressionsConfig {
    /// Rows to write (impressions, clicks and conversions together).
    pub events: u64,
    /// Distinct user indexes events are drawn from.
    pub users: u64,
    /// Days the timestamps cover, starting at `start` 00:00:00 UTC.
    pub days: u32,
    /// The same seed gives the same bytes.
    pub seed: u64,
    /// CSV or nested NDJSON.
    pub format: Format,
    /// The first day.
    pub start: Date,
}

impl Default for ImpressionsConfig {
    fn default() -> Self {
        Self {
            events: 10_000_000,
            users: 1_000_000,
            days: 30,
            seed: 42,
            format: Format::Csv,
            start: Date::new(2026, 11, 1),
        }
    }
}

/// One user's fixed attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The id written in `user_id`, unique per index, below 2^63.
    pub id: u64,
    /// Index into [`STATES`].
    pub state: usize,
    /// Bit i set when the user belongs to `PROVIDERS[i]`.
    pub providers: u8,
}

/// Rows and bytes written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Rows, not counting the CSV header.
    pub rows: u64,
    /// Bytes, header included.
    pub bytes: u64,
}

/// The impression generator, with its tables built.
#[derive(Debug)]
pub struct Impressions {
    config: ImpressionsConfig,
    users: Zipf,
    sites: Cumulative,
    campaigns: Cumulative,
    states: Cumulative,
    /// Provider bit mask per per-mille user position.
    memberships: [u8; 1000],
    /// `YYYY-MM-DDT` per day.
    day_prefixes: Vec<[u8; 11]>,
    /// Seeds the per-user attributes, apart from the event stream.
    user_seed: u64,
}

impl Impressions {
    /// Checks the configuration and builds the tables.
    pub fn new(config: ImpressionsConfig) -> Result<Self> {
        let invalid = |name, reason: String| Err(Error::InvalidParameter { name, reason });
        if !(1..=USERS_MAX).contains(&config.users) {
            return invalid("users", format!("must be in 1..={USERS_MAX}"));
        }
        if !(1..=DAYS_MAX).contains(&config.days) {
            return invalid("days", format!("must be in 1..={DAYS_MAX}"));
        }
        let last_day = Date(config.start.0 + i64::from(config.days) - 1);
        if config.start.civil().0 < 1970 || last_day.civil().0 > 9999 {
            return invalid("start", "the days must lie in 1970..=9999".to_owned());
        }
        let mut memberships = [0u8; 1000];
        for (bit, provider) in PROVIDERS.iter().enumerate() {
            for &(low, high) in provider.ranges {
                for position in low..high {
                    memberships[usize::from(position)] |= 1 << bit;
                }
            }
        }
        assert!(
            memberships.iter().all(|&m| m != 0),
            "every user belongs to a provider"
        );
        let day_prefixes = (0..config.days)
            .map(|day| {
                let mut prefix = [b'T'; 11];
                prefix[..10].copy_from_slice(&Date(config.start.0 + i64::from(day)).iso());
                prefix
            })
            .collect();
        Ok(Self {
            users: Zipf::new(config.users, USER_ZIPF_EXPONENT),
            sites: Cumulative::zipf(SITE_COUNT, SITE_ZIPF_EXPONENT),
            campaigns: Cumulative::zipf(CAMPAIGN_COUNT, CAMPAIGN_ZIPF_EXPONENT),
            states: Cumulative::new(STATES.iter().map(|&(_, people)| people)),
            memberships,
            day_prefixes,
            user_seed: mix(config.seed ^ 0x7573_6572_7365_6564),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ImpressionsConfig {
        &self.config
    }

    /// The fixed attributes of the user with this index.
    pub fn user(&self, index: u64) -> User {
        debug_assert!(index < self.config.users);
        let bits = mix(index ^ self.user_seed);
        let position = ((bits & 0xffff_ffff) * 1000) >> 32;
        User {
            id: id63_of(index, self.config.seed),
            state: self.states.index_of(bits),
            providers: self.memberships[usize::try_from(position).expect("below 1000")],
        }
    }

    /// Writes every row to `out` (CSV with its header, or NDJSON).
    pub fn write<W: Write>(&self, out: W) -> Result<Written> {
        self.generate(out, None)
    }

    /// Writes every row to `out` and counts the exact answers on the way.
    pub fn write_with_truth<W: Write>(&self, out: W) -> Result<(Written, Truth)> {
        let bits = (PROVIDERS.len() as u64 + u64::from(self.config.days) + 1)
            .saturating_mul(self.config.users);
        if bits > TRUTH_BITS_MAX {
            return Err(Error::InvalidParameter {
                name: "truth",
                reason: format!(
                    "(providers + days + 1) x users = {bits} bits of bitsets, over the \
                     {TRUTH_BITS_MAX}-bit limit; lower --users or --days"
                ),
            });
        }
        let mut counter = Counter::new(&self.config);
        let written = self.generate(out, Some(&mut counter))?;
        Ok((written, counter.finish(self)))
    }

    fn generate<W: Write>(&self, out: W, mut counter: Option<&mut Counter>) -> Result<Written> {
        let config = &self.config;
        let mut chunk = Chunk::new(out);
        if config.format == Format::Csv {
            chunk.buf.extend_from_slice(CSV_HEADER.as_bytes());
        }
        let span_secs = u64::from(config.days) * DAY_SECS;
        let mut row = 0u64;
        while row < config.events {
            let block = row / BLOCK_ROWS;
            let block_end = ((block + 1) * BLOCK_ROWS).min(config.events);
            let mut rng = SplitMix64::new(mix(config.seed ^ mix(block.wrapping_add(1))));
            while row < block_end {
                let mut event = self.impression(&mut rng, row, span_secs);
                let mut kind = Kind::Impression;
                loop {
                    self.write_row(&mut chunk.buf, &event, kind);
                    chunk.row_done()?;
                    if let Some(counter) = counter.as_deref_mut() {
                        counter.count(&event, kind, span_secs);
                    }
                    row += 1;
                    let (rate, next, delay_min, delay_span) = match kind {
                        Kind::Impression => (CLICK_RATE, Kind::Click, 1, 60),
                        Kind::Click => (CONVERSION_RATE, Kind::Conversion, 60, 3540),
                        Kind::Conversion => break,
                    };
                    if row == block_end || rng.unit() >= rate {
                        break;
                    }
                    kind = next;
                    event.offset_secs =
                        (event.offset_secs + delay_min + rng.below(delay_span)).min(span_secs - 1);
                    event.revenue_micros = revenue_micros(&mut rng, kind);
                    event.late = false;
                }
            }
        }
        let bytes = chunk.finish()?;
        Ok(Written { rows: row, bytes })
    }

    fn impression(&self, rng: &mut SplitMix64, row: u64, span_secs: u64) -> Event {
        let index = self.users.sample(rng) - 1;
        let user = self.user(index);
        let even = u128::from(row) * u128::from(span_secs) / u128::from(self.config.events);
        let mut offset_secs = u64::try_from(even).expect("below span_secs");
        let late = rng.unit() < LATE_RATE;
        if late {
            offset_secs = offset_secs.saturating_sub(1 + rng.below(LATE_SECS_MAX));
        }
        let count = user.providers.count_ones();
        let pick = rng.below(u64::from(count));
        let mut mask = user.providers;
        for _ in 0..pick {
            mask &= mask - 1;
        }
        let provider = usize::try_from(mask.trailing_zeros()).expect("below 8");
        Event {
            index,
            user,
            offset_secs,
            late,
            site: self.sites.index_of(rng.next()),
            campaign: self.campaigns.index_of(rng.next()),
            provider,
            revenue_micros: revenue_micros(rng, Kind::Impression),
        }
    }

    fn write_row(&self, buf: &mut Vec<u8>, event: &Event, kind: Kind) {
        let day = usize::try_from(event.offset_secs / DAY_SECS).expect("below days");
        let json = self.config.format == Format::Json;
        if json {
            buf.extend_from_slice(b"{\"ts\":\"");
        }
        buf.extend_from_slice(&self.day_prefixes[day]);
        push_time_of_day(buf, event.offset_secs % DAY_SECS);
        buf.push(b'Z');
        let state = STATES[event.user.state].0.as_bytes();
        let provider = PROVIDERS[event.provider].name.as_bytes();
        if json {
            buf.extend_from_slice(b"\",\"kind\":\"");
            buf.extend_from_slice(kind.name().as_bytes());
            buf.extend_from_slice(b"\",\"user\":{\"id\":");
            push_u64(buf, event.user.id);
            buf.extend_from_slice(b",\"state\":\"");
            buf.extend_from_slice(state);
            buf.extend_from_slice(b"\"},\"ad\":{\"site\":\"site");
            push_u64(buf, event.site as u64 + 1);
            buf.extend_from_slice(b"\",\"provider\":\"");
            buf.extend_from_slice(provider);
            buf.extend_from_slice(b"\",\"campaign\":\"campaign");
            push_u64(buf, event.campaign as u64 + 1);
            buf.extend_from_slice(b"\"},\"revenue\":");
            push_micros(buf, event.revenue_micros);
            buf.extend_from_slice(b"}\n");
        } else {
            buf.push(b',');
            push_u64(buf, event.user.id);
            buf.push(b',');
            buf.extend_from_slice(kind.name().as_bytes());
            buf.push(b',');
            buf.extend_from_slice(state);
            buf.extend_from_slice(b",site");
            push_u64(buf, event.site as u64 + 1);
            buf.push(b',');
            buf.extend_from_slice(provider);
            buf.extend_from_slice(b",campaign");
            push_u64(buf, event.campaign as u64 + 1);
            buf.push(b',');
            push_micros(buf, event.revenue_micros);
            buf.push(b'\n');
        }
    }
}

/// One generated event before it is written.
#[derive(Debug, Clone, Copy)]
struct Event {
    index: u64,
    user: User,
    /// Seconds since `start` 00:00:00 UTC.
    offset_secs: u64,
    late: bool,
    site: usize,
    campaign: usize,
    provider: usize,
    revenue_micros: u64,
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "clamped to [1, REVENUE_MICROS_MAX] first"
)]
fn revenue_micros(rng: &mut SplitMix64, kind: Kind) -> u64 {
    let (median, sigma) = REVENUE_MICROS[kind as usize];
    (median * (sigma * rng.normal()).exp())
        .round()
        .clamp(1.0, REVENUE_MICROS_MAX) as u64
}

/// Mask of the low 63 bits.
const MASK_63: u64 = (1 << 63) - 1;

/// The user id of `index`: SplitMix64's finaliser cut down to 63 bits (each
/// xor-shift and each multiplication by an odd constant modulo 2^63 is a
/// bijection of `0..2^63`), so ids are distinct, scattered, and fit a
/// signed 64-bit BIGINT.
pub fn id63_of(index: u64, seed: u64) -> u64 {
    assert!(index <= MASK_63, "user index below 2^63");
    let mut z = (index ^ seed) & MASK_63;
    z = ((z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9)) & MASK_63;
    z = ((z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb)) & MASK_63;
    z ^ (z >> 31)
}

/// Bitsets over user indexes, filled while generating.
#[derive(Debug)]
struct Counter {
    words_per_set: usize,
    /// One bitset per provider, then one per day, then "any impression".
    bits: Vec<u64>,
    days: usize,
    events_by_kind: [u64; 3],
    revenue_micros_by_kind: [u64; 3],
    late_impressions: u64,
}

impl Counter {
    fn new(config: &ImpressionsConfig) -> Self {
        let words_per_set = usize::try_from(config.users.div_ceil(64)).expect("checked limit");
        let days = usize::try_from(config.days).expect("checked limit");
        let sets = PROVIDERS.len() + days + 1;
        Self {
            words_per_set,
            bits: vec![0; sets * words_per_set],
            days,
            events_by_kind: [0; 3],
            revenue_micros_by_kind: [0; 3],
            late_impressions: 0,
        }
    }

    #[inline]
    fn set(&mut self, set: usize, index: u64) {
        let word = usize::try_from(index / 64).expect("below users");
        self.bits[set * self.words_per_set + word] |= 1 << (index % 64);
    }

    fn count(&mut self, event: &Event, kind: Kind, span_secs: u64) {
        debug_assert!(event.offset_secs < span_secs);
        self.events_by_kind[kind as usize] += 1;
        self.revenue_micros_by_kind[kind as usize] += event.revenue_micros;
        if kind != Kind::Impression {
            return;
        }
        self.late_impressions += u64::from(event.late);
        let day = usize::try_from(event.offset_secs / DAY_SECS).expect("below days");
        self.set(event.provider, event.index);
        self.set(PROVIDERS.len() + day, event.index);
        self.set(PROVIDERS.len() + self.days, event.index);
    }

    fn set_words(&self, set: usize) -> &[u64] {
        &self.bits[set * self.words_per_set..(set + 1) * self.words_per_set]
    }

    fn finish(self, generator: &Impressions) -> Truth {
        let popcount = |words: &[u64]| words.iter().map(|w| u64::from(w.count_ones())).sum();
        let providers = (0..PROVIDERS.len())
            .map(|p| popcount(self.set_words(p)))
            .collect();
        let mut overlaps = Vec::new();
        for a in 0..PROVIDERS.len() {
            for b in a + 1..PROVIDERS.len() {
                let both = self
                    .set_words(a)
                    .iter()
                    .zip(self.set_words(b))
                    .map(|(x, y)| u64::from((x & y).count_ones()))
                    .sum();
                overlaps.push((a, b, both));
            }
        }
        let mut by_state_by_day = vec![[0u64; 50]; self.days];
        for (day, states) in by_state_by_day.iter_mut().enumerate() {
            for (word_index, &word) in self.set_words(PROVIDERS.len() + day).iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let index = word_index as u64 * 64 + u64::from(word.trailing_zeros());
                    states[generator.user(index).state] += 1;
                    word &= word - 1;
                }
            }
        }
        Truth {
            start: generator.config.start,
            users_seen: popcount(self.set_words(PROVIDERS.len() + self.days)),
            providers,
            overlaps,
            by_state_by_day,
            events_by_kind: self.events_by_kind,
            revenue_micros_by_kind: self.revenue_micros_by_kind,
            late_impressions: self.late_impressions,
        }
    }
}

/// Exact answers about the generated impressions, counted while writing.
///
/// Unique counts are over **impressions** (the `reach` summary's `WHERE
/// kind = 'impression'`); days are event-time days of the `ts` column (a
/// late impression counts on the day its `ts` says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truth {
    /// The first day.
    pub start: Date,
    /// Distinct users with at least one impression.
    pub users_seen: u64,
    /// Distinct users per provider, in [`PROVIDERS`] order.
    pub providers: Vec<u64>,
    /// `(a, b, |a ∩ b|)` for every pair of providers, a < b.
    pub overlaps: Vec<(usize, usize, u64)>,
    /// Distinct users per day per state ([`STATES`] order).
    pub by_state_by_day: Vec<[u64; 50]>,
    /// Rows per kind, in [`Kind::ALL`] order.
    pub events_by_kind: [u64; 3],
    /// Revenue per kind in micro-dollars (exact: revenue is written with six
    /// decimals).
    pub revenue_micros_by_kind: [u64; 3],
    /// Impressions that were made late.
    pub late_impressions: u64,
}

impl Truth {
    /// Total revenue in micro-dollars.
    pub fn revenue_micros(&self) -> u64 {
        self.revenue_micros_by_kind.iter().sum()
    }

    /// The answers as one JSON object (hand-written: every key is ours and
    /// every value a number or a plain name).
    pub fn to_json(&self) -> String {
        let mut s = String::from("{\n");
        let events: Vec<String> = Kind::ALL
            .iter()
            .map(|k| format!("\"{}\": {}", k.name(), self.events_by_kind[*k as usize]))
            .collect();
        s += &format!("  \"events_by_kind\": {{{}}},\n", events.join(", "));
        let revenue: Vec<String> = Kind::ALL
            .iter()
            .map(|k| {
                format!(
                    "\"{}\": {}",
                    k.name(),
                    decimal_micros(self.revenue_micros_by_kind[*k as usize])
                )
            })
            .collect();
        s += &format!("  \"revenue_by_kind\": {{{}}},\n", revenue.join(", "));
        s += &format!(
            "  \"revenue_total\": {},\n",
            decimal_micros(self.revenue_micros())
        );
        s += &format!("  \"late_impressions\": {},\n", self.late_impressions);
        s += &format!("  \"users_seen\": {},\n", self.users_seen);
        let providers: Vec<String> = PROVIDERS
            .iter()
            .zip(&self.providers)
            .map(|(p, n)| format!("\"{}\": {n}", p.name))
            .collect();
        s += &format!("  \"users_by_provider\": {{{}}},\n", providers.join(", "));
        let overlaps: Vec<String> = self
            .overlaps
            .iter()
            .map(|&(a, b, n)| {
                format!(
                    "{{\"a\": \"{}\", \"b\": \"{}\", \"both\": {n}}}",
                    PROVIDERS[a].name, PROVIDERS[b].name
                )
            })
            .collect();
        s += &format!(
            "  \"provider_overlaps\": [\n    {}\n  ],\n",
            overlaps.join(",\n    ")
        );
        let days: Vec<String> = self
            .by_state_by_day
            .iter()
            .enumerate()
            .map(|(day, states)| {
                let date = Date(self.start.0 + day as i64).to_iso_string();
                let cells: Vec<String> = STATES
                    .iter()
                    .zip(states)
                    .map(|((name, _), n)| format!("\"{name}\": {n}"))
                    .collect();
                format!("\"{date}\": {{{}}}", cells.join(", "))
            })
            .collect();
        s += &format!(
            "  \"users_by_day_by_state\": {{\n    {}\n  }}\n}}\n",
            days.join(",\n    ")
        );
        s
    }
}

fn decimal_micros(micros: u64) -> String {
    let mut buf = Vec::new();
    push_micros(&mut buf, micros);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id63_is_injective_and_fits_bigint() {
        let mut ids: Vec<u64> = (0..100_000).map(|i| id63_of(i, 42)).collect();
        assert!(ids.iter().all(|&id| id <= MASK_63));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 100_000);
        // Scattered: the ids of 0..100,000 are not packed near 0.
        assert!(ids[50_000] > 1 << 60);
    }

    #[test]
    fn designed_overlaps_hold_over_users() {
        let generator = Impressions::new(ImpressionsConfig {
            users: 100_000,
            ..ImpressionsConfig::default()
        })
        .expect("valid");
        let mut members = [0u64; 5];
        let mut alpha_beta = 0u64;
        for index in 0..100_000 {
            let user = generator.user(index);
            for (p, count) in members.iter_mut().enumerate() {
                *count += u64::from(user.providers >> p & 1);
            }
            alpha_beta += u64::from(user.providers & 0b11 == 0b11);
        }
        // Designed: 55%, 25%, 30%, 20%, 3% and alpha-beta 10%; the standard
        // error of a share at n = 100,000 is below 0.16%, allow 0.8%.
        for (count, designed) in members.iter().zip([550, 250, 300, 200, 30]) {
            assert!(count.abs_diff(designed * 100) < 800, "{members:?}");
        }
        assert!(alpha_beta.abs_diff(10_000) < 800, "{alpha_beta}");
    }
}
