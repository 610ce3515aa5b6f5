//! The impression generator: determinism, well-formed CSV and NDJSON, and a
//! truth file that a plain recount of the generated CSV agrees with.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cardinal_gen::impressions::{
    CSV_HEADER, Format, Impressions, ImpressionsConfig, PROVIDERS, STATES, Truth,
};
use cardinal_gen::text::Date;

fn config(events: u64, seed: u64, format: Format) -> ImpressionsConfig {
    ImpressionsConfig {
        events,
        users: 3_000,
        days: 3,
        seed,
        format,
        start: Date::new(2026, 11, 1),
    }
}

fn generate(config: ImpressionsConfig) -> String {
    let mut out = Vec::new();
    let written = Impressions::new(config.clone())
        .expect("valid")
        .write(&mut out)
        .expect("in memory");
    assert_eq!(written.rows, config.events);
    assert_eq!(written.bytes, out.len() as u64);
    String::from_utf8(out).expect("utf-8")
}

/// One parsed CSV row.
#[derive(Debug, PartialEq)]
struct Row {
    ts: String,
    user_id: u64,
    kind: String,
    state: String,
    site: String,
    provider: String,
    campaign: String,
    revenue_micros: u64,
}

/// `12.000345` as micro-units, insisting on six decimals.
fn micros(text: &str) -> u64 {
    let (whole, fraction) = text.split_once('.').expect("a decimal point");
    assert_eq!(fraction.len(), 6, "{text}");
    whole.parse::<u64>().expect("whole") * 1_000_000 + fraction.parse::<u64>().expect("fraction")
}

/// Checks `2026-11-01T00:00:07Z` and the day range; returns the day.
fn check_ts(ts: &str, start: Date, days: i64) -> i64 {
    let b = ts.as_bytes();
    assert_eq!(b.len(), 20, "{ts}");
    assert!(
        b[10] == b'T' && b[13] == b':' && b[16] == b':' && b[19] == b'Z',
        "{ts}"
    );
    let date = Date::parse(&ts[..10]).expect("a date");
    let hour: u32 = ts[11..13].parse().expect("hour");
    let minute: u32 = ts[14..16].parse().expect("minute");
    let second: u32 = ts[17..19].parse().expect("second");
    assert!(hour < 24 && minute < 60 && second < 60, "{ts}");
    let day = date.0 - start.0;
    assert!((0..days).contains(&day), "{ts}");
    day
}

fn parse_csv(text: &str) -> Vec<Row> {
    let body = text.strip_prefix(CSV_HEADER).expect("the header first");
    assert!(body.ends_with('\n'));
    body.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 8, "{line}");
            Row {
                ts: f[0].to_owned(),
                user_id: f[1].parse().expect("user_id"),
                kind: f[2].to_owned(),
                state: f[3].to_owned(),
                site: f[4].to_owned(),
                provider: f[5].to_owned(),
                campaign: f[6].to_owned(),
                revenue_micros: micros(f[7]),
            }
        })
        .collect()
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    for format in [Format::Csv, Format::Json] {
        let a = generate(config(20_000, 1, format));
        assert_eq!(a, generate(config(20_000, 1, format)));
        assert_ne!(a, generate(config(20_000, 2, format)));
    }
}

#[test]
fn csv_is_well_formed_and_realistic() {
    let start = Date::new(2026, 11, 1);
    let rows = parse_csv(&generate(config(100_000, 7, Format::Csv)));
    assert_eq!(rows.len(), 100_000);
    let states: BTreeSet<&str> = STATES.iter().map(|s| s.0).collect();
    let providers: BTreeSet<&str> = PROVIDERS.iter().map(|p| p.name).collect();
    let mut kinds: HashMap<&str, u64> = HashMap::new();
    let mut home: HashMap<u64, &str> = HashMap::new();
    let mut out_of_order = 0;
    for (i, row) in rows.iter().enumerate() {
        check_ts(&row.ts, start, 3);
        assert!(row.user_id <= i64::MAX as u64, "fits a BIGINT");
        *kinds.entry(&row.kind).or_default() += 1;
        assert!(states.contains(row.state.as_str()), "{row:?}");
        assert!(providers.contains(row.provider.as_str()), "{row:?}");
        assert!(
            row.site
                .strip_prefix("site")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        );
        assert!(
            row.campaign
                .strip_prefix("campaign")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        );
        assert!(row.revenue_micros > 0);
        // A user's home state never changes.
        assert_eq!(*home.entry(row.user_id).or_insert(&row.state), row.state);
        if i > 0 && row.ts < rows[i - 1].ts {
            out_of_order += 1;
        }
    }
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    let impressions = kinds["impression"] as f64;
    let ctr = kinds["click"] as f64 / impressions;
    assert!((0.005..0.02).contains(&ctr), "CTR {ctr}");
    let conversion_rate = kinds["conversion"] as f64 / kinds["click"] as f64;
    assert!((0.01..0.06).contains(&conversion_rate), "{conversion_rate}");
    // Mostly ordered: clicks and late impressions step back, ~1.2% of rows.
    assert!((100..5_000).contains(&out_of_order), "{out_of_order}");
    // Ids are scattered over the BIGINT range, not 0..users.
    assert!(home.keys().filter(|&&id| id > 1 << 40).count() > home.len() * 9 / 10);
}

/// A tiny JSON reader: enough to check that each line is one well-formed
/// object and to pull its values out by path.
mod json {
    #[derive(Debug, PartialEq)]
    pub enum Value {
        Object(Vec<(String, Value)>),
        String(String),
        Number(String),
    }

    impl Value {
        pub fn get(&self, path: &[&str]) -> &Value {
            let mut value = self;
            for key in path {
                let Value::Object(fields) = value else {
                    panic!("{key}: not an object")
                };
                value = &fields.iter().find(|(k, _)| k == key).expect(key).1;
            }
            value
        }

        pub fn text(&self) -> &str {
            match self {
                Value::String(s) | Value::Number(s) => s,
                Value::Object(_) => panic!("an object"),
            }
        }
    }

    pub fn parse(text: &str) -> Value {
        let bytes = text.as_bytes();
        let mut at = 0;
        let value = value(bytes, &mut at);
        assert_eq!(at, bytes.len(), "trailing bytes in {text}");
        value
    }

    fn value(b: &[u8], at: &mut usize) -> Value {
        match b[*at] {
            b'{' => {
                *at += 1;
                let mut fields = Vec::new();
                loop {
                    let Value::String(key) = value(b, at) else {
                        panic!("a key")
                    };
                    assert_eq!(b[*at], b':');
                    *at += 1;
                    fields.push((key, value(b, at)));
                    *at += 1;
                    match b[*at - 1] {
                        b',' => {}
                        b'}' => return Value::Object(fields),
                        other => panic!("unexpected {}", other as char),
                    }
                }
            }
            b'"' => {
                let end = *at
                    + 1
                    + b[*at + 1..]
                        .iter()
                        .position(|&c| c == b'"')
                        .expect("closed");
                let s = std::str::from_utf8(&b[*at + 1..end]).expect("utf-8");
                assert!(!s.contains('\\'), "no escapes expected");
                *at = end + 1;
                Value::String(s.to_owned())
            }
            b'-' | b'0'..=b'9' => {
                let start = *at;
                while *at < b.len()
                    && matches!(b[*at], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    *at += 1;
                }
                let n = std::str::from_utf8(&b[start..*at]).expect("ascii");
                assert!(n.parse::<f64>().is_ok(), "{n}");
                Value::Number(n.to_owned())
            }
            other => panic!("unexpected {}", other as char),
        }
    }
}

#[test]
fn json_is_well_formed_and_says_what_the_csv_says() {
    let csv = parse_csv(&generate(config(20_000, 3, Format::Csv)));
    let ndjson = generate(config(20_000, 3, Format::Json));
    assert!(ndjson.ends_with('\n'));
    let lines: Vec<&str> = ndjson.lines().collect();
    assert_eq!(lines.len(), csv.len());
    for (line, row) in lines.iter().zip(&csv) {
        let v = json::parse(line);
        let Some(json::Value::Object(top)) = Some(&v) else {
            panic!("an object")
        };
        let keys: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["ts", "kind", "user", "ad", "revenue"]);
        let from_json = Row {
            ts: v.get(&["ts"]).text().to_owned(),
            user_id: v.get(&["user", "id"]).text().parse().expect("id"),
            kind: v.get(&["kind"]).text().to_owned(),
            state: v.get(&["user", "state"]).text().to_owned(),
            site: v.get(&["ad", "site"]).text().to_owned(),
            provider: v.get(&["ad", "provider"]).text().to_owned(),
            campaign: v.get(&["ad", "campaign"]).text().to_owned(),
            revenue_micros: micros(v.get(&["revenue"]).text()),
        };
        assert_eq!(&from_json, row);
    }
}

#[test]
fn truth_agrees_with_a_recount_of_the_csv() {
    let config = config(60_000, 11, Format::Csv);
    let start = config.start;
    let mut out = Vec::new();
    let (written, truth): (_, Truth) = Impressions::new(config)
        .expect("valid")
        .write_with_truth(&mut out)
        .expect("in memory");
    assert_eq!(written.rows, 60_000);
    let rows = parse_csv(std::str::from_utf8(&out).expect("utf-8"));

    let mut events_by_kind = [0u64; 3];
    let mut revenue_by_kind = [0u64; 3];
    let mut users = BTreeSet::new();
    let mut by_provider: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    let mut by_day_state: BTreeMap<(i64, &str), BTreeSet<u64>> = BTreeMap::new();
    for row in &rows {
        let kind = ["impression", "click", "conversion"]
            .iter()
            .position(|k| *k == row.kind)
            .expect("a kind");
        events_by_kind[kind] += 1;
        revenue_by_kind[kind] += row.revenue_micros;
        if kind != 0 {
            continue;
        }
        let day = check_ts(&row.ts, start, 3);
        users.insert(row.user_id);
        by_provider
            .entry(&row.provider)
            .or_default()
            .insert(row.user_id);
        by_day_state
            .entry((day, &row.state))
            .or_default()
            .insert(row.user_id);
    }
    assert_eq!(truth.events_by_kind, events_by_kind);
    assert_eq!(truth.revenue_micros_by_kind, revenue_by_kind);
    assert_eq!(truth.users_seen, users.len() as u64);
    for (p, provider) in PROVIDERS.iter().enumerate() {
        let recount = by_provider.get(provider.name).map_or(0, BTreeSet::len);
        assert_eq!(truth.providers[p], recount as u64, "{}", provider.name);
    }
    assert_eq!(truth.overlaps.len(), 10);
    let empty = BTreeSet::new();
    for &(a, b, both) in &truth.overlaps {
        let x = by_provider.get(PROVIDERS[a].name).unwrap_or(&empty);
        let y = by_provider.get(PROVIDERS[b].name).unwrap_or(&empty);
        assert_eq!(both, x.intersection(y).count() as u64);
    }
    // The designed overlaps show: alpha and beta share users, alpha and
    // gamma share none.
    assert!(truth.overlaps[0].2 > 100);
    assert_eq!(truth.overlaps[1].2, 0);
    assert_eq!(truth.by_state_by_day.len(), 3);
    for (day, states) in truth.by_state_by_day.iter().enumerate() {
        for (s, &count) in states.iter().enumerate() {
            let recount = by_day_state
                .get(&(day as i64, STATES[s].0))
                .map_or(0, BTreeSet::len);
            assert_eq!(count, recount as u64, "day {day} {}", STATES[s].0);
        }
    }
    assert!(truth.late_impressions > 0);

    // The JSON names everything it counts.
    let json = truth.to_json();
    for needle in [
        "\"events_by_kind\": {\"impression\": ",
        "\"revenue_total\": ",
        "{\"a\": \"alpha\", \"b\": \"beta\", \"both\": ",
        "\"2026-11-03\": {\"AL\": ",
    ] {
        assert!(json.contains(needle), "{needle} in {json}");
    }
}

#[test]
fn bad_configurations_are_refused() {
    for bad in [
        ImpressionsConfig {
            users: 0,
            ..ImpressionsConfig::default()
        },
        ImpressionsConfig {
            days: 0,
            ..ImpressionsConfig::default()
        },
    ] {
        assert!(Impressions::new(bad).is_err());
    }
    let too_big = Impressions::new(ImpressionsConfig {
        users: 1 << 30,
        days: 30,
        ..ImpressionsConfig::default()
    })
    .expect("generating is fine");
    assert!(too_big.write_with_truth(std::io::sink()).is_err());
}
