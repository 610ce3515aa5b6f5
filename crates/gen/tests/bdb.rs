//! The generated AMPLab tables against the real sample rows in
//! `../shared/data/bdb/hibench_amplab_sample` (read in place, never copied):
//! the same field count and formats, the same value sets where the data has
//! fixed ones, rows grouped by URL, and Java's float printing on every real
//! `adRevenue`.
//!
//! A missing sample folder skips the sample checks with a warning (as the HLL
//! vector tests do); `CARDINAL_REQUIRE_VECTORS` makes it a failure. Set
//! `CARDINAL_BDB_SAMPLES` to read them from elsewhere.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cardinal_gen::bdb::{BdbConfig, write_rankings, write_uservisits};
use cardinal_gen::java_float::{UNIT_FLOAT_BYTES_MAX, is_unit_fast, write_unit_float};

fn samples_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CARDINAL_BDB_SAMPLES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/data/bdb/hibench_amplab_sample")
        });
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("CARDINAL_REQUIRE_VECTORS").is_none(),
        "BDB samples required but {} is missing",
        dir.display()
    );
    eprintln!(
        "warning: {} is missing; sample checks skipped",
        dir.display()
    );
    None
}

fn sample(name: &str) -> Option<String> {
    let dir = samples_dir()?;
    let text = std::fs::read_to_string(dir.join(name)).expect("sample readable");
    Some(text)
}

fn uservisits(rows: u64, seed: u64) -> String {
    let mut out = Vec::new();
    write_uservisits(BdbConfig { rows, seed }, &mut out).expect("in memory");
    String::from_utf8(out).expect("ascii")
}

fn rankings(rows: u64, seed: u64) -> String {
    let mut out = Vec::new();
    write_rankings(BdbConfig { rows, seed }, &mut out).expect("in memory");
    String::from_utf8(out).expect("ascii")
}

/// The format of one uservisits row, field by field, as the README states
/// it. Returns the fields.
fn check_uservisit(line: &str) -> Vec<&str> {
    let fields: Vec<&str> = line.split(',').collect();
    assert_eq!(fields.len(), 9, "{line}");
    let octets: Vec<u32> = fields[0]
        .split('.')
        .map(|o| {
            assert!(!o.starts_with('0') || o == "0", "no zero padding: {line}");
            o.parse().expect("octet")
        })
        .collect();
    assert_eq!(octets.len(), 4, "{line}");
    assert!(
        (1..=254).contains(&octets[0]) && (1..=254).contains(&octets[3]),
        "{line}"
    );
    assert!(octets[1] <= 254 && octets[2] <= 254, "{line}");
    check_url(fields[1]);
    let date = fields[2].as_bytes();
    assert_eq!(date.len(), 10, "{line}");
    assert!(date[4] == b'-' && date[7] == b'-', "{line}");
    assert!(("1970-01-01"..="2012-05-01").contains(&fields[2]), "{line}");
    check_java_float(fields[3]);
    assert!(!fields[4].is_empty(), "{line}");
    let (country, language) = (fields[5], fields[6]);
    assert!(
        country.len() == 3 && country.bytes().all(|b| b.is_ascii_uppercase()),
        "{line}"
    );
    assert_eq!(language.len(), 6, "{line}");
    assert!(
        language.starts_with(country) && &language[3..4] == "-",
        "{line}"
    );
    assert!(!fields[7].is_empty(), "{line}");
    let duration: u32 = fields[8].parse().expect("duration");
    assert!((1..=10).contains(&duration), "{line}");
    fields
}

fn check_url(url: &str) {
    assert!((10..=100).contains(&url.len()), "{url}");
    assert!(url.bytes().all(|b| b.is_ascii_lowercase()), "{url}");
}

/// `text` is what Java's `Float.toString` prints for the float it reads as.
fn check_java_float(text: &str) {
    let value: f32 = text.parse().expect("a float");
    assert!(is_unit_fast(value), "{text} in [0, 1)");
    let mut out = [0u8; UNIT_FLOAT_BYTES_MAX];
    let len = write_unit_float(value, &mut out);
    assert_eq!(std::str::from_utf8(&out[..len]).expect("ascii"), text);
}

/// Checks that equal URLs are adjacent and returns the run lengths.
fn url_runs<'a>(urls: impl Iterator<Item = &'a str>) -> Vec<u64> {
    let mut runs = Vec::new();
    let mut seen = BTreeSet::new();
    let mut last = "";
    for url in urls {
        if url == last {
            *runs.last_mut().expect("a run") += 1;
        } else {
            assert!(seen.insert(url.to_owned()), "{url} visited in two runs");
            runs.push(1);
            last = url;
        }
    }
    runs
}

#[test]
fn sample_rows_have_the_shape_we_check() {
    // The checks below are the README's description; first make sure the
    // real rows pass them, so that the generator is held to the data.
    for name in ["uservisits1", "uservisits2"] {
        let Some(text) = sample(name) else { return };
        let rows: Vec<Vec<&str>> = text.lines().map(check_uservisit).collect();
        assert_eq!(rows.len(), 1000);
        let runs = url_runs(rows.iter().map(|f| f[1]));
        assert!(
            (100..140).contains(&runs.len()),
            "{name}: {} URLs",
            runs.len()
        );
    }
    for name in ["rankings1", "rankings2"] {
        let Some(text) = sample(name) else { return };
        for line in text.lines() {
            let fields: Vec<&str> = line.split(',').collect();
            assert_eq!(fields.len(), 3, "{line}");
            check_url(fields[0]);
            let _: u64 = fields[1].parse().expect("pageRank");
            let duration: u32 = fields[2].parse().expect("avgDuration");
            assert!((1..=99).contains(&duration), "{line}");
        }
    }
}

#[test]
fn every_real_ad_revenue_prints_back_the_same() {
    let mut count = 0;
    let mut scientific = 0;
    for name in ["uservisits1", "uservisits2"] {
        let Some(text) = sample(name) else { return };
        for line in text.lines() {
            let revenue = line.split(',').nth(3).expect("adRevenue");
            check_java_float(revenue);
            count += 1;
            scientific += usize::from(revenue.contains('E'));
        }
    }
    assert_eq!(count, 2000);
    // Expected 0.1% in E notation; the sample happens to have few or none.
    assert!(scientific < 10, "{scientific}");
}

#[test]
fn generated_uservisits_match_the_sample_shape() {
    let text = uservisits(20_000, 42);
    assert!(text.ends_with('\n'));
    let rows: Vec<Vec<&str>> = text.lines().map(check_uservisit).collect();
    assert_eq!(rows.len(), 20_000);
    let runs = url_runs(rows.iter().map(|f| f[1]));
    // 20,000 / 8.4 = 2381 pages; Poisson(8.4) runs have sd 2.9, so the
    // mean over ~2400 runs is within 0.2 of 8.4 at 3 standard errors.
    let mean = 20_000.0 / runs.len() as f64;
    assert!((8.2..8.6).contains(&mean), "{mean} rows per URL");
    // Mean row length: the data set's is ~169-171 bytes.
    let bytes_per_row = text.len() as f64 / 20_000.0;
    assert!((160.0..180.0).contains(&bytes_per_row), "{bytes_per_row}");
    // About 0.1% of adRevenue in E notation (20 expected; Poisson sd 4.5).
    let scientific = rows.iter().filter(|f| f[3].contains('E')).count();
    assert!((5..40).contains(&scientific), "{scientific}");
    // Every locale of the data appears, and no other.
    let locales: BTreeSet<String> = rows.iter().map(|f| format!("{},{}", f[5], f[6])).collect();
    if let Some(real) = sample("uservisits1").zip(sample("uservisits2")) {
        let real_locales: BTreeSet<String> = format!("{}{}", real.0, real.1)
            .lines()
            .map(|l| l.split(',').skip(5).take(2).collect::<Vec<_>>().join(","))
            .collect();
        assert_eq!(locales, real_locales);
        // The most common user agent is the data's (IE 6 on XP, ~13%).
        let mut agents: HashMap<&str, usize> = HashMap::new();
        for f in &rows {
            *agents.entry(f[4]).or_default() += 1;
        }
        let top = agents.iter().max_by_key(|(_, n)| **n).expect("agents");
        assert_eq!(*top.0, "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)");
        assert!(real.0.contains(top.0));
    }
}

#[test]
fn rankings_urls_are_the_pages_uservisits_visits() {
    let ranking = rankings(5_000, 9);
    let urls: Vec<&str> = ranking
        .lines()
        .map(|l| l.split(',').next().expect("url"))
        .collect();
    for line in ranking.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 3);
        check_url(fields[0]);
        let duration: u32 = fields[2].parse().expect("avgDuration");
        assert!((1..=99).contains(&duration));
    }
    // Page 1's rank is Poisson(20 * sqrt(5000)) ~ 1414 +- 38.
    let first_rank: f64 = ranking
        .lines()
        .next()
        .expect("row")
        .split(',')
        .nth(1)
        .expect("rank")
        .parse()
        .expect("int");
    assert!((1_250.0..1_600.0).contains(&first_rank), "{first_rank}");
    // uservisits with the same seed visits pages 1, 2, ... in order.
    let visits = uservisits(2_000, 9);
    let visited: Vec<&str> = visits
        .lines()
        .map(|l| l.split(',').nth(1).expect("url"))
        .collect();
    let mut distinct = visited.clone();
    distinct.dedup();
    let position: Vec<usize> = distinct
        .iter()
        .map(|u| urls.iter().position(|r| r == u).expect("a rankings page"))
        .collect();
    assert!(
        position.windows(2).all(|w| w[0] < w[1]),
        "pages in ascending order"
    );
}

#[test]
fn same_seed_same_bytes() {
    assert_eq!(uservisits(3_000, 1), uservisits(3_000, 1));
    assert_ne!(uservisits(3_000, 1), uservisits(3_000, 2));
    assert_eq!(rankings(3_000, 1), rankings(3_000, 1));
    assert_ne!(rankings(3_000, 1), rankings(3_000, 2));
    // A shorter run is a prefix of a longer one.
    assert!(uservisits(3_000, 1).starts_with(&uservisits(1_000, 1)));
}
