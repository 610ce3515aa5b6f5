//! How fast W1 could go: the three summaries of
//! `bench/engine/schemas/impressions.sql` written by hand for that one
//! schema, on the engine's own reader, CSV scanner, value parsers and
//! sketches, with one fused loop per record in place of the engine's
//! general fold. What the engine spends over this is the price of being
//! general; what this spends is a floor no fold over these parts goes
//! under (bench/JOURNAL.md, "W1's floor").
//!
//! ```sh
//! cargo run --release -p cardinal --example w1_floor -- FILE [STAGE]
//! ```
//!
//! `FILE` is an impressions CSV from `cardinal gen impressions`. `STAGE`
//! stops after a part of the work, to see what each costs: `scan` (read
//! and split the lines), `parse` (and parse the time, user id and
//! revenue of every record), `fold` (and fold the three summaries, the
//! default). Prints CPU seconds of the process and what it folded, to
//! compare with `cardinal run`'s output.
//!
//! Against the engine's summaries it cuts corners no general fold can:
//! state, provider and site texts become dense numbers in small tables
//! that are not bounded; each day's groups sit in arrays indexed by those
//! numbers; the sum of revenue is an `f64`, not the exact fixed-point sum;
//! the top sites are exact counts per site number, never a heavy-hitters
//! sketch; no limit, retention or reject is checked.

use std::collections::HashMap;
use std::sync::Arc;

use cardinal_event::{DateMemo, Value};
use cardinal_parse::{Batch, CsvConfig, CsvParser};
use cardinal_sketch::hash;
use cardinal_sketch::hll::Hll;
use cardinal_sketch::quantiles::Quantiles;
use cardinal_source::{Input, LineReader};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// CPU seconds of this process (every thread) so far.
fn cpu_secs() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is writable memory of a rusage; RUSAGE_SELF is valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: getrusage filled it.
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Dense numbers for short texts, in order of first appearance: a
/// direct-mapped memory of recent texts (as the engine's `TextMemo`) in
/// front of a map.
struct Interner {
    /// (text words, length + 1, number); length 0 is an empty slot.
    recent: Vec<([u64; 2], usize, usize)>,
    ids: HashMap<Vec<u8>, usize>,
}

impl Default for Interner {
    fn default() -> Self {
        Self {
            recent: vec![([0, 0], 0, 0); 4096],
            ids: HashMap::new(),
        }
    }
}

impl Interner {
    #[inline(always)]
    fn id(&mut self, text: &[u8]) -> usize {
        let Some(words) = cardinal_event::bytes::short_words(text) else {
            return self.slow(text);
        };
        let mixed = (words[0] ^ text.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ words[1].wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        let slot = (mixed >> 52) as usize;
        let (known, len, id) = self.recent[slot];
        if known == words && len == text.len() + 1 {
            return id;
        }
        let id = self.slow(text);
        self.recent[slot] = (words, text.len() + 1, id);
        id
    }

    #[cold]
    fn slow(&mut self, text: &[u8]) -> usize {
        if let Some(&id) = self.ids.get(text) {
            return id;
        }
        let id = self.ids.len();
        self.ids.insert(text.to_vec(), id);
        id
    }
}

/// A group of `reach` (by day and state).
struct Reach {
    events: u64,
    revenue: f64,
    users: Hll,
}

/// A group of `providers` (by day and provider).
struct Provider {
    events: u64,
    users: Hll,
    revenue: Quantiles,
}

/// A group of `top_sites` (by day).
#[derive(Default)]
struct TopSites {
    events: u64,
    /// Impressions per site number.
    sites: Vec<u64>,
}

/// One day's groups, indexed by state and provider number.
#[derive(Default)]
struct Day {
    reach: Vec<Option<Reach>>,
    providers: Vec<Option<Provider>>,
    top: TopSites,
}

fn slot<T>(groups: &mut Vec<Option<T>>, id: usize, make: impl FnOnce() -> T) -> &mut T {
    if groups.len() <= id {
        groups.resize_with(id + 1, || None);
    }
    groups[id].get_or_insert_with(make)
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd)]
enum Stage {
    Scan,
    Parse,
    Fold,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: w1_floor FILE [scan|parse|fold]");
    let stage = match args.next().as_deref() {
        None | Some("fold") => Stage::Fold,
        Some("parse") => Stage::Parse,
        Some("scan") => Stage::Scan,
        Some(other) => panic!("unknown stage {other}"),
    };
    let start = cpu_secs();

    // The stream W1 declares, from the benchmark's own schema file.
    let sql = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench/engine/schemas/impressions.sql"),
    )
    .expect("bench/engine/schemas/impressions.sql");
    let schema = cardinal_route::Plan::compile(&sql)
        .expect("W1's schema compiles")
        .streams
        .swap_remove(0)
        .schema;
    let column = |name: &str| schema.index_of(name).expect("a W1 column");
    let (ts, user, kind, state, site, provider, revenue) = (
        column("ts"),
        column("user_id"),
        column("kind"),
        column("state"),
        column("site"),
        column("provider"),
        column("revenue"),
    );

    // The header line, then the records after it.
    let text = std::fs::File::open(&path).expect("the input");
    let mut header = Vec::new();
    std::io::BufRead::read_until(&mut std::io::BufReader::new(text), b'\n', &mut header)
        .expect("a header line");
    let size = std::fs::metadata(&path).expect("the input").len();
    let input = Input::open_range(&path, header.len() as u64..size).expect("the input");
    let name: Arc<str> = path.as_str().into();
    let mut parser = CsvParser::new(&schema, CsvConfig::v1()).expect("the W1 schema");
    parser
        .read_header(&name, header.trim_ascii_end())
        .expect("the W1 header");
    parser.project(&[ts, user, kind, state, site, provider, revenue]);
    let mut reader = LineReader::new(input);
    let mut batch = Batch::new();

    let (mut states, mut providers, mut sites) = (
        Interner::default(),
        Interner::default(),
        Interner::default(),
    );
    let mut days: HashMap<i64, Day> = HashMap::new();
    let (mut current, mut day_of) = (i64::MIN, Day::default());
    let mut memo = DateMemo::default();
    let (mut records, mut folded, mut checksum) = (0u64, 0u64, 0.0f64);
    while reader.read_chunk(batch.chunk_mut()).expect("read") {
        parser.parse(&mut batch).expect("parse");
        records += batch.len() as u64;
        if stage == Stage::Scan {
            continue;
        }
        for record in batch.records() {
            let field = |c| record.field(c).unwrap_or_default();
            let (Ok(Some(time)), Ok(Some(id)), Ok(Some(value))) = (
                Value::parse_timestamp_memo(field(ts), &mut memo),
                Value::parse_bigint(field(user)),
                Value::parse_double(field(revenue)),
            ) else {
                panic!("a bad record at line {:?}", record.line());
            };
            if stage == Stage::Parse {
                checksum += value + (id as f64) + time.0 as f64;
                continue;
            }
            if field(kind) != b"impression" {
                continue;
            }
            folded += 1;
            let day = time.0.div_euclid(DAY_MS);
            if day != current {
                let previous =
                    std::mem::replace(&mut day_of, days.remove(&day).unwrap_or_default());
                if current != i64::MIN {
                    days.insert(current, previous);
                }
                current = day;
            }
            let hash = hash::user_id(id.cast_unsigned());
            let reach = slot(&mut day_of.reach, states.id(field(state)), || Reach {
                events: 0,
                revenue: 0.0,
                users: Hll::default(),
            });
            reach.events += 1;
            reach.revenue += value;
            reach.users.insert(hash);
            let group = slot(&mut day_of.providers, providers.id(field(provider)), || {
                Provider {
                    events: 0,
                    users: Hll::default(),
                    revenue: Quantiles::default(),
                }
            });
            group.events += 1;
            group.users.insert(hash);
            group.revenue.insert(value);
            let site = sites.id(field(site));
            let top = &mut day_of.top;
            top.events += 1;
            if top.sites.len() <= site {
                top.sites.resize(site + 1, 0);
            }
            top.sites[site] += 1;
        }
    }
    if current != i64::MIN {
        days.insert(current, day_of);
    }
    let seconds = cpu_secs() - start;

    let (mut reach_groups, mut events, mut revenue, mut users) = (0, 0, 0.0, 0.0);
    for day in days.values() {
        for reach in day.reach.iter().flatten() {
            reach_groups += 1;
            events += reach.events;
            revenue += reach.revenue;
            users += cardinal_sketch::Sketch::estimate(&reach.users).value;
        }
    }
    let provider_groups: usize = days
        .values()
        .map(|d| d.providers.iter().flatten().count())
        .sum();
    println!(
        "{path}: stage {}, {records} records, {folded} impressions folded in {seconds:.2} CPU-s \
         ({:.2} M records per CPU-s); reach {reach_groups} groups, {events} events, revenue \
         {revenue:.6}, users summed {users:.0}; providers {provider_groups} groups; {} days; \
         checksum {checksum:.0}",
        match stage {
            Stage::Scan => "scan",
            Stage::Parse => "parse",
            Stage::Fold => "fold",
        },
        records as f64 / seconds / 1e6,
        days.len(),
    );
}
