//! The AMPLab Big Data Benchmark tables, `rankings` and `uservisits`, in the
//! text format of the AMPLab S3 data (made by Intel HiBench's "hive"
//! generator), as described in `../shared/data/bdb/README.md`.
//!
//! ```text
//! rankings:   pageURL,pageRank,avgDuration
//! uservisits: sourceIP,destURL,visitDate,adRevenue,userAgent,countryCode,languageCode,searchWord,duration
//! ```
//!
//! Comma-separated, no header, no quoting, `\n` after every row. The shape:
//!
//! | field | model |
//! |---|---|
//! | `pageURL` | 10-100 random lowercase letters, a function of (seed, page) |
//! | `pageRank` | Poisson(20 * sqrt(rows / page)) for page 1, 2, ... |
//! | `avgDuration` | uniform 1..=99 |
//! | `sourceIP` | uniform octets `[1,254].[0,254].[0,254].[1,254]` |
//! | `destURL` | pages 1, 2, ... in order, each visited Poisson([`VISITS_PER_PAGE_MEAN`]) times in adjacent rows |
//! | `visitDate` | uniform over 1970-01-01..=2012-05-01 |
//! | `adRevenue` | Java's `Random.nextFloat` (k / 2^24) printed by Java's `Float.toString` |
//! | `userAgent` | uniform over a pool of [`USER_AGENT_POOL_LEN`]: about 75% common browser strings, 25% random `Word/d.d` |
//! | `countryCode,languageCode` | uniform over the 106 Java locale pairs of the data set |
//! | `searchWord` | uniform over a fixed [`SEARCH_WORD_COUNT`]-word vocabulary |
//! | `duration` | uniform 1..=10 |
//!
//! `destURL` is computed by the same function as `pageURL`, so uservisits
//! generated with a seed joins rankings generated with that seed (Query 3),
//! as long as rankings has at least `rows / 8.4` pages.
//!
//! Rows come in blocks seeded from (seed, block) for rankings (each page's
//! row is a function of the page), and uservisits draws each page's visits
//! from a generator seeded by (seed, page): any page's rows can be made
//! without the ones before it.

// Maintainer note: the vocabulary tables (browser strings, locale pairs) are
// the value sets of the real data; the search words are synthetic. The
// checks in tests/bdb.rs compare the shape with the sample rows, so a change
// here must keep them passing rather than change them.

use std::io::Write;

use crate::java_float::{UNIT_FLOAT_BYTES_MAX, write_unit_float};
use crate::rng::{SplitMix64, mix, poisson};
use crate::text::{Chunk, Date, push_2_digits, push_u64};
use crate::{Error, Result};

/// Mean visits per page: the sample has 8.5 rows per URL, the 1node data
/// set 150M visits over 18M pages (8.3).
pub const VISITS_PER_PAGE_MEAN: f64 = 8.4;
/// Entries in the user-agent pool.
pub const USER_AGENT_POOL_LEN: usize = 2_000;
/// Words in the search vocabulary.
pub const SEARCH_WORD_COUNT: usize = 1_000;
/// Rows at most per table: 2^40 (a petabyte of uservisits text).
pub const ROWS_MAX: u64 = 1 << 40;

/// Seeds the fixed vocabularies: they are the same for every `--seed`, the
/// way a dictionary file is.
const VOCABULARY_SEED: u64 = 0x6264_625f_766f_6361;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct BdbConfig {
    /// Rows to write.
    pub rows: u64,
    /// The same seed gives the same bytes, and the same URLs in both tables.
    pub seed: u64,
}

/// Common browser strings and their weights in the pool (about the shares
/// seen in the data: Internet Explorer 6 on XP leads with ~13%).
const BROWSERS: [(&str, u32); 32] = [
    ("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", 269),
    ("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 5.2)", 201),
    (
        "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1; .NET CLR 1.1.4322)",
        164,
    ),
    ("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 5.1)", 153),
    ("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)", 145),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.2) AppleWebKit/525.13 (KHTML like Gecko) Chrome/xxx",
        130,
    ),
    ("Mozilla/4.0 (compatible; MSIE 8.0; Windows NT 6.1)", 73),
    (
        "Mozilla/5.0 (iPhone; U; CPU like Mac OS X)AppleWebKit/420.1 (KHTML like Gecko) Version/3.0 Mobile/4A93Safari/419.3",
        67,
    ),
    ("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)", 54),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.2)AppleWebKit/525.13 (KHTML like Gecko) Version/3.1Safari/525.13",
        50,
    ),
    ("Mozilla/4.0 (compatible; MSIE 5.5; Windows NT 5.0)", 38),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.2) AppleWebKit/525.13 (KHTML like Gecko) Chrome/0.2.149.27 Safari/525.13",
        24,
    ),
    (
        "Mozilla/4.0 (compatible; MSIE 5.5; Windows 98; Win 9x 4.90)",
        20,
    ),
    ("Navigator/9.0.0.6", 16),
    (
        "Netscape 4.8 (Windows Vista): Mozilla/4.8 (Windows NT 6.0; U)",
        15,
    ),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.1)Gecko/20070309 Firefox/2.0.0.3",
        15,
    ),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.2)Gecko/2008070208 Firefox/3.0.1",
        14,
    ),
    ("Opera/8.0 (Macintosh; PPC Mac OS X; U; en)", 12),
    (
        "iPhone 3.0: Mozilla/5.0 (iPhone; U; CPU iPhone OS 3_0 like Mac OS X; en-us) AppleWebKit/528.18 (KHTML like Gecko) Version/4.0 Mobile/7A341 Safari/528.16",
        11,
    ),
    (
        "Netscape 7.1 (Win 98): Mozilla/5.0 (Windows; U; Win98; en-US; rv:1.4) Gecko Netscape/7.1 (ax)",
        10,
    ),
    (
        "Mozilla/5.0 (Windows; U; Windows NT 5.1)Gecko/20070803 Firefox/1.5.0.12",
        10,
    ),
    (
        "Opera 8.0 (Win 2000): Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0; en) Opera 8.0",
        9,
    ),
    ("Opera 7.51 (Win XP): Opera/7.51 (Windows NT 5.1; U)", 9),
    ("Netscape 4.8 ( Win XP): Mozilla/4.8 (Windows NT 5.1; U)", 8),
    (
        "Mozilla/5.0 (Macintosh; U; PPC Mac OS X; en) AppleWebKit/125.2 (KHTML like Gecko) Safari/125.8",
        8,
    ),
    ("Mozilla/5.0 (Macintosh; PPC Mac OS X; U; en)Opera 8.0", 8),
    (
        "Opera 9.2 (Windows Vista): Opera/9.20 (Windows NT 6.0; U; en)",
        7,
    ),
    ("Opera 7.5 (Win XP): Opera/7.50 (Windows XP; U)", 6),
    (
        "Mozilla/5.0 (Macintosh; U; PPC Mac OS X; en) AppleWebKit/125.2 (KHTML like Gecko) Safari/85.8",
        4,
    ),
    ("Opera 7.5 (Win ME): Opera/7.50 (Windows ME; U)", 3),
    ("Netscape 2.02 (Win 95): Mozilla/2.02E (Win95; U)", 3),
    (
        "Netscape 3.01 gold (Win 95): Mozilla/3.01Gold (Win95; I)",
        1,
    ),
];

/// Pool entries that are browser strings (75%); the rest are random words.
const BROWSER_SLOTS: usize = 1_500;

/// The (countryCode, languageCode) pairs: Java's locales with a country, as
/// ISO 3166 alpha-3 and `COUNTRY-LANGUAGE` codes.
const LOCALES: [&str; 106] = [
    "ALB,ALB-SQ",
    "ARE,ARE-AR",
    "ARG,ARG-ES",
    "AUS,AUS-EN",
    "AUT,AUT-DE",
    "BEL,BEL-FR",
    "BEL,BEL-NL",
    "BGR,BGR-BG",
    "BHR,BHR-AR",
    "BIH,BIH-SR",
    "BLR,BLR-BE",
    "BOL,BOL-ES",
    "BRA,BRA-PT",
    "CAN,CAN-EN",
    "CAN,CAN-FR",
    "CHE,CHE-DE",
    "CHE,CHE-FR",
    "CHE,CHE-IT",
    "CHL,CHL-ES",
    "CHN,CHN-ZH",
    "COL,COL-ES",
    "CRI,CRI-ES",
    "CYP,CYP-EL",
    "CZE,CZE-CS",
    "DEU,DEU-DE",
    "DNK,DNK-DA",
    "DOM,DOM-ES",
    "DZA,DZA-AR",
    "ECU,ECU-ES",
    "EGY,EGY-AR",
    "ESP,ESP-CA",
    "ESP,ESP-ES",
    "EST,EST-ET",
    "FIN,FIN-FI",
    "FRA,FRA-FR",
    "GBR,GBR-EN",
    "GRC,GRC-EL",
    "GTM,GTM-ES",
    "HKG,HKG-ZH",
    "HND,HND-ES",
    "HRV,HRV-HR",
    "HUN,HUN-HU",
    "IDN,IDN-IN",
    "IND,IND-EN",
    "IND,IND-HI",
    "IRL,IRL-EN",
    "IRL,IRL-GA",
    "IRQ,IRQ-AR",
    "ISL,ISL-IS",
    "ISR,ISR-IW",
    "ITA,ITA-IT",
    "JOR,JOR-AR",
    "JPN,JPN-JA",
    "KOR,KOR-KO",
    "KWT,KWT-AR",
    "LBN,LBN-AR",
    "LBY,LBY-AR",
    "LTU,LTU-LT",
    "LUX,LUX-DE",
    "LUX,LUX-FR",
    "LVA,LVA-LV",
    "MAR,MAR-AR",
    "MEX,MEX-ES",
    "MKD,MKD-MK",
    "MLT,MLT-EN",
    "MLT,MLT-MT",
    "MNE,MNE-SR",
    "MYS,MYS-MS",
    "NIC,NIC-ES",
    "NLD,NLD-NL",
    "NOR,NOR-NO",
    "NZL,NZL-EN",
    "OMN,OMN-AR",
    "PAN,PAN-ES",
    "PER,PER-ES",
    "PHL,PHL-EN",
    "POL,POL-PL",
    "PRI,PRI-ES",
    "PRT,PRT-PT",
    "PRY,PRY-ES",
    "QAT,QAT-AR",
    "ROU,ROU-RO",
    "RUS,RUS-RU",
    "SAU,SAU-AR",
    "SCG,SCG-SR",
    "SDN,SDN-AR",
    "SGP,SGP-EN",
    "SGP,SGP-ZH",
    "SLV,SLV-ES",
    "SRB,SRB-SR",
    "SVK,SVK-SK",
    "SVN,SVN-SL",
    "SWE,SWE-SV",
    "SYR,SYR-AR",
    "THA,THA-TH",
    "TUN,TUN-AR",
    "TUR,TUR-TR",
    "TWN,TWN-ZH",
    "UKR,UKR-UK",
    "URY,URY-ES",
    "USA,USA-EN",
    "USA,USA-ES",
    "VEN,VEN-ES",
    "VNM,VNM-VI",
    "YEM,YEM-AR",
    "ZAF,ZAF-EN",
];

/// Days from 1970-01-01 to 2012-05-01 inclusive.
const VISIT_DAYS: usize = 15_462;

/// Writes `rows` rows of the rankings table.
pub fn write_rankings<W: Write>(config: BdbConfig, out: W) -> Result<u64> {
    check_rows(config.rows)?;
    let mut chunk = Chunk::new(out);
    let mut url = Vec::with_capacity(100);
    let rows = config.rows as f64;
    for page in 1..=config.rows {
        let mut rng = page_rng(config.seed, page);
        page_url(&mut rng, &mut url);
        chunk.buf.extend_from_slice(&url);
        chunk.buf.push(b',');
        let rank = poisson(&mut rng, 20.0 * (rows / page as f64).sqrt());
        push_u64(&mut chunk.buf, rank);
        chunk.buf.push(b',');
        push_u64(&mut chunk.buf, 1 + rng.below(99));
        chunk.buf.push(b'\n');
        chunk.row_done()?;
    }
    chunk.finish()
}

/// Writes `rows` rows of the uservisits table.
pub fn write_uservisits<W: Write>(config: BdbConfig, out: W) -> Result<u64> {
    check_rows(config.rows)?;
    let vocabulary = Vocabulary::new();
    let mut chunk = Chunk::new(out);
    let mut url = Vec::with_capacity(100);
    let mut row = 0u64;
    let mut page = 0u64;
    while row < config.rows {
        page += 1;
        let mut page_rng = page_rng(config.seed, page);
        page_url(&mut page_rng, &mut url);
        // The visits come from their own stream, so that the URL stream
        // stays the one rankings uses.
        let mut rng = SplitMix64::new(mix(page_rng.next() ^ 0x7669_7369_7473));
        let visits = poisson(&mut rng, VISITS_PER_PAGE_MEAN).min(config.rows - row);
        for _ in 0..visits {
            vocabulary.write_visit(&mut rng, &url, &mut chunk.buf);
            chunk.row_done()?;
        }
        row += visits;
    }
    chunk.finish()
}

fn check_rows(rows: u64) -> Result<()> {
    if rows > ROWS_MAX {
        return Err(Error::InvalidParameter {
            name: "rows",
            reason: format!("must be at most {ROWS_MAX}"),
        });
    }
    Ok(())
}

/// The generator of page `page`'s URL (and rankings row).
fn page_rng(seed: u64, page: u64) -> SplitMix64 {
    SplitMix64::new(mix(seed ^ 0x7061_6765_7572_6c73).wrapping_add(mix(page)))
}

/// 10 to 100 uniform lowercase letters into `url`.
fn page_url(rng: &mut SplitMix64, url: &mut Vec<u8>) {
    url.clear();
    let len = 10 + rng.below(91);
    push_letters(rng, url, len);
}

/// Appends `len` uniform lowercase letters, about 12 per 64 random bits
/// (each multiply by 26 moves the next base-26 digit into the high word).
#[expect(
    clippy::cast_possible_truncation,
    reason = "the high word of x * 26 is below 26"
)]
fn push_letters(rng: &mut SplitMix64, out: &mut Vec<u8>, len: u64) {
    let mut left = 0;
    let mut bits = 0u64;
    for _ in 0..len {
        if left == 0 {
            bits = rng.next();
            left = 12;
        }
        let wide = u128::from(bits) * 26;
        out.push(b'a' + (wide >> 64) as u8);
        bits = wide as u64;
        left -= 1;
    }
}

/// The fixed value pools of uservisits.
#[derive(Debug)]
struct Vocabulary {
    /// `YYYY-MM-DD` per visit day.
    dates: Vec<[u8; 10]>,
    user_agents: Vec<Vec<u8>>,
    search_words: Vec<Vec<u8>>,
}

impl Vocabulary {
    fn new() -> Self {
        let dates = (0..VISIT_DAYS)
            .map(|day| Date(i64::try_from(day).expect("small")).iso())
            .collect();
        let mut rng = SplitMix64::new(VOCABULARY_SEED);
        let total: u32 = BROWSERS.iter().map(|&(_, w)| w).sum();
        let mut user_agents: Vec<Vec<u8>> = Vec::with_capacity(USER_AGENT_POOL_LEN);
        for &(agent, weight) in &BROWSERS {
            let slots = (BROWSER_SLOTS * weight as usize).div_ceil(total as usize);
            for _ in 0..slots.max(1) {
                user_agents.push(agent.as_bytes().to_vec());
            }
        }
        user_agents.truncate(BROWSER_SLOTS);
        while user_agents.len() < USER_AGENT_POOL_LEN {
            // A capitalised random word of 5 to 24 letters and a version.
            let mut agent = Vec::new();
            let len = 5 + rng.below(20);
            push_letters(&mut rng, &mut agent, len);
            agent[0] = agent[0].to_ascii_uppercase();
            agent.push(b'/');
            agent.push(b'0' + u8::try_from(rng.below(10)).expect("digit"));
            agent.push(b'.');
            agent.push(b'0' + u8::try_from(rng.below(10)).expect("digit"));
            user_agents.push(agent);
        }
        let search_words = (0..SEARCH_WORD_COUNT)
            .map(|_| search_word(&mut rng))
            .collect();
        Self {
            dates,
            user_agents,
            search_words,
        }
    }

    fn write_visit(&self, rng: &mut SplitMix64, url: &[u8], buf: &mut Vec<u8>) {
        // Four octets from one draw: 16 bits each, scaled by multiply-shift.
        let octets = rng.next();
        let octet = |shift: u32, span: u64| ((octets >> shift & 0xffff) * span) >> 16;
        push_u64(buf, 1 + octet(0, 254));
        buf.push(b'.');
        push_u64(buf, octet(16, 255));
        buf.push(b'.');
        push_u64(buf, octet(32, 255));
        buf.push(b'.');
        push_u64(buf, 1 + octet(48, 254));
        buf.push(b',');
        buf.extend_from_slice(url);
        buf.push(b',');
        let draw = rng.next();
        // Bits 40..64 pick the day, 0..24 the revenue, 24..40 the duration.
        let day = ((draw >> 40) * VISIT_DAYS as u64) >> 24;
        buf.extend_from_slice(&self.dates[usize::try_from(day).expect("below VISIT_DAYS")]);
        buf.push(b',');
        // Random.nextFloat: 24 random bits over 2^24.
        let revenue = (draw & 0xff_ffff) as f32 / 16_777_216.0;
        let mut digits = [0u8; UNIT_FLOAT_BYTES_MAX];
        let len = write_unit_float(revenue, &mut digits);
        buf.extend_from_slice(&digits[..len]);
        buf.push(b',');
        let pick = rng.next();
        // Bits 32..64 pick the agent, 16..32 the locale, 0..16 the word.
        let agent = ((pick >> 32) * USER_AGENT_POOL_LEN as u64) >> 32;
        buf.extend_from_slice(&self.user_agents[usize::try_from(agent).expect("in pool")]);
        buf.push(b',');
        let locale = (((pick >> 16) & 0xffff) * LOCALES.len() as u64) >> 16;
        buf.extend_from_slice(LOCALES[usize::try_from(locale).expect("in table")].as_bytes());
        buf.push(b',');
        let word = ((pick & 0xffff) * SEARCH_WORD_COUNT as u64) >> 16;
        buf.extend_from_slice(&self.search_words[usize::try_from(word).expect("in table")]);
        buf.push(b',');
        let duration = 1 + ((((draw >> 24) & 0xffff) * 10) >> 16);
        push_2_digits_trimmed(buf, duration);
        buf.push(b'\n');
    }
}

/// Appends 1..=10 without a leading zero.
fn push_2_digits_trimmed(buf: &mut Vec<u8>, n: u64) {
    debug_assert!((1..=10).contains(&n));
    if n < 10 {
        buf.push(b'0' + u8::try_from(n).expect("a digit"));
    } else {
        push_2_digits(buf, n);
    }
}

/// A pronounceable made-up word of 2 to 19 letters, like the dictionary
/// words of the data set: about 1 in 6 capitalised, 1 in 12 hyphenated.
fn search_word(rng: &mut SplitMix64) -> Vec<u8> {
    const ONSETS: [&[u8]; 20] = [
        b"b", b"c", b"d", b"f", b"g", b"h", b"l", b"m", b"n", b"p", b"r", b"s", b"t", b"v", b"tr",
        b"st", b"ch", b"pr", b"gl", b"th",
    ];
    const VOWELS: [&[u8]; 8] = [b"a", b"e", b"i", b"o", b"u", b"ea", b"io", b"y"];
    const CODAS: [&[u8]; 8] = [b"", b"", b"n", b"s", b"r", b"l", b"ng", b"ck"];
    let target = 2 + rng.below(18);
    let mut word = Vec::new();
    while (word.len() as u64) < target {
        for part in [&ONSETS[..], &VOWELS[..], &CODAS[..]] {
            let index = usize::try_from(rng.below(part.len() as u64)).expect("small");
            word.extend_from_slice(part[index]);
        }
    }
    word.truncate(usize::try_from(target).expect("small"));
    if rng.below(12) == 0 && word.len() >= 5 {
        let at = 2 + usize::try_from(rng.below(word.len() as u64 - 3)).expect("small");
        word.insert(at, b'-');
    }
    if rng.below(6) == 0 {
        word[0] = word[0].to_ascii_uppercase();
    }
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_shape() {
        let vocabulary = Vocabulary::new();
        assert_eq!(vocabulary.user_agents.len(), USER_AGENT_POOL_LEN);
        assert_eq!(vocabulary.search_words.len(), SEARCH_WORD_COUNT);
        assert!(vocabulary.user_agents.iter().all(|a| !a.contains(&b',')));
        assert!(vocabulary.search_words.iter().all(|w| !w.contains(&b',')));
        assert_eq!(vocabulary.dates[0], *b"1970-01-01");
        assert_eq!(vocabulary.dates[VISIT_DAYS - 1], *b"2012-05-01");
    }

    #[test]
    fn urls_are_shared_by_both_tables() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        page_url(&mut page_rng(7, 3), &mut a);
        page_url(&mut page_rng(7, 3), &mut b);
        assert_eq!(a, b);
        page_url(&mut page_rng(8, 3), &mut b);
        assert_ne!(a, b);
    }
}
