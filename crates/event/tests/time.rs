//! Properties of event time: parsing what we print gives the same instant,
//! and a bucket start is in its own bucket and not after the instant.

use cardinal_event::{BucketMemo, BucketWidth, EPOCH_MS_MIN, TimeUnit, Timestamp};
use proptest::prelude::*;

/// Years 0001..=9999 in milliseconds.
const MS_MIN: i64 = Timestamp::MIN.0;
const MS_MAX: i64 = Timestamp::MAX.0;

/// Every calendar unit.
const UNITS: [TimeUnit; 8] = [
    TimeUnit::Second,
    TimeUnit::Minute,
    TimeUnit::Hour,
    TimeUnit::Day,
    TimeUnit::Week,
    TimeUnit::Month,
    TimeUnit::Quarter,
    TimeUnit::Year,
];

proptest! {
    #[test]
    fn display_then_parse_is_identity(ms in MS_MIN..=MS_MAX) {
        let t = Timestamp(ms);
        prop_assert_eq!(Timestamp::parse(t.to_string().as_bytes()).expect("own output parses"), t);
    }

    #[test]
    fn truncation_is_idempotent_and_not_later(ms in MS_MIN + 40 * 86_400_000..=MS_MAX, unit in 0usize..8) {
        let unit = UNITS[unit];
        let t = Timestamp(ms);
        let start = t.truncate(unit);
        prop_assert!(start <= t);
        prop_assert_eq!(start.truncate(unit), start);
    }

    /// A memo of the last bucket truncates as `truncate` does, over
    /// runs of nearby instants in and out of order, across month, year
    /// and leap-day edges.
    #[test]
    fn bucket_memo_truncates_as_truncate_does(
        base in MS_MIN + 400 * 86_400_000..=MS_MAX - 400 * 86_400_000,
        steps in prop::collection::vec(-40i64 * 86_400_000..40 * 86_400_000, 1..60),
        unit in 0usize..8,
    ) {
        let unit = UNITS[unit];
        let mut memo = BucketMemo::new(unit);
        let mut ms = base;
        for step in steps {
            // Mostly small steps forward, as a stream in time order.
            ms = (ms + step / 7).clamp(MS_MIN, MS_MAX);
            let t = Timestamp(ms);
            prop_assert_eq!(memo.truncate(t), t.truncate(unit), "{}", t);
        }
    }

    /// Any instant at all either is in range, prints, and parses back to
    /// itself, or prints as no accepted time does (an ISO 8601 expanded
    /// year with a sign) and its text is rejected.
    #[test]
    fn any_millis_round_trip_or_are_rejected(ms in any::<i64>()) {
        let t = Timestamp(ms);
        let text = t.to_string();
        if t.is_in_range() {
            prop_assert_eq!(Timestamp::parse(text.as_bytes()), Ok(t));
        } else {
            prop_assert!(Timestamp::parse(text.as_bytes()).is_err(), "{}", text);
            prop_assert!(!text.starts_with(|c: char| c.is_ascii_digit()), "{}", text);
        }
    }

    /// Text near either edge, with any offset or leap second, parses to
    /// an instant in range or is rejected, and every bucket start of an
    /// accepted instant is in range and prints with a four-digit year.
    #[test]
    fn parsed_times_and_their_buckets_stay_in_range(
        edge in prop::bool::ANY,
        day in 0i64..3,
        hour in 0i64..24,
        second in 0i64..61,
        offset_minutes in -1439i64..=1439,
        unit in 0usize..8,
    ) {
        let date = if edge {
            format!("0001-01-{:02}", day + 1)
        } else {
            format!("9999-12-{:02}", 29 + day)
        };
        let sign = if offset_minutes < 0 { '-' } else { '+' };
        let text = format!(
            "{date}T{hour:02}:59:{second:02}.999{sign}{:02}:{:02}",
            offset_minutes.abs() / 60,
            offset_minutes.abs() % 60
        );
        if let Ok(t) = Timestamp::parse(text.as_bytes()) {
            prop_assert!(t.is_in_range(), "{}", text);
            let start = t.truncate(UNITS[unit]);
            prop_assert!(start.is_in_range(), "{} {:?}", text, UNITS[unit]);
            prop_assert!(start.to_string().as_bytes()[..4].iter().all(u8::is_ascii_digit));
        }
    }

    #[test]
    fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let _ = Timestamp::parse(&bytes);
    }

    /// An instant printed as RFC 3339, as epoch milliseconds and as epoch
    /// seconds with a fraction parses to the same timestamp wherever the
    /// magnitude rule reads that unit (`EPOCH_MS_MIN`).
    #[test]
    fn rfc3339_and_epoch_spellings_agree(ms in MS_MIN..=MS_MAX) {
        let t = Timestamp(ms);
        prop_assert_eq!(Timestamp::parse(t.to_string().as_bytes()), Ok(t));
        if ms.abs() >= EPOCH_MS_MIN {
            prop_assert_eq!(Timestamp::parse(ms.to_string().as_bytes()), Ok(t));
        }
        if (ms.div_euclid(1000)).abs() < EPOCH_MS_MIN && (ms >= 0 || ms % 1000 == 0) {
            let sign = if ms < 0 { "-" } else { "" };
            let seconds = format!("{sign}{}.{:03}", ms.abs() / 1000, ms.abs() % 1000);
            prop_assert_eq!(Timestamp::parse(seconds.as_bytes()), Ok(t), "{}", seconds);
        }
        if ms % 1000 == 0 && (ms / 1000).abs() < EPOCH_MS_MIN {
            prop_assert_eq!(Timestamp::parse((ms / 1000).to_string().as_bytes()), Ok(t));
        }
    }

    /// A negative time with a fraction of a second floors, as RFC 3339
    /// text of the same instant does.
    #[test]
    fn negative_epoch_fractions_floor(ms in MS_MIN..0i64, micros in 0i64..1000) {
        let t = Timestamp(ms);
        // `ms` and `micros` spell the instant ms + micros/1000: -x.yyyzzz
        // seconds where the printed value is its negation.
        let total_us = ms * 1000 + micros;
        let text = format!("-{}.{:06}", (-total_us) / 1_000_000, (-total_us) % 1_000_000);
        let want = Timestamp(total_us.div_euclid(1000));
        prop_assert_eq!(Timestamp::parse(text.as_bytes()), Ok(want), "{} {}", text, t);
    }

    /// Fixed-width buckets: the start is not later, is a multiple of the
    /// width, is at most a width earlier, and the memo agrees.
    #[test]
    fn fixed_buckets_are_aligned_to_the_epoch(
        ms in MS_MIN..=MS_MAX,
        width in prop::sample::select(vec![1i64, 2, 5, 10, 30, 60, 90, 300, 900, 3_600, 21_600, 86_400]),
        steps in prop::collection::vec(-600_000i64..600_000, 1..20),
    ) {
        let width = BucketWidth::from_ms(width * 1000).expect("divides a day");
        let unit = TimeUnit::Fixed(width);
        let t = Timestamp(ms);
        let start = t.truncate(unit);
        prop_assert!(start <= t);
        prop_assert!(t.0 - start.0 < width.ms());
        prop_assert_eq!(start.0.rem_euclid(width.ms()), 0);
        prop_assert_eq!(start.truncate(TimeUnit::Day), t.truncate(TimeUnit::Day), "within one UTC day");
        let mut memo = BucketMemo::new(unit);
        let mut at = ms;
        for step in steps {
            at = (at + step).clamp(MS_MIN, MS_MAX);
            prop_assert_eq!(memo.truncate(Timestamp(at)), Timestamp(at).truncate(unit));
        }
    }
}

#[test]
fn bucket_widths_parse_as_timescaledb_spells_them() {
    for (text, seconds) in [
        ("1 second", 1),
        ("30 seconds", 30),
        ("5 minutes", 300),
        ("15 minutes", 900),
        ("1 hour", 3_600),
        ("6 hours", 21_600),
        ("1 day", 86_400),
        ("5 min", 300),
        ("5mins", 300),
        ("2h", 7_200),
        ("10s", 10),
        (" 90 SECONDS ", 90),
        ("45 m", 2_700),
        ("1 d", 86_400),
    ] {
        let width = BucketWidth::parse(text).expect(text);
        assert_eq!(width.ms(), seconds * 1000, "{text}");
        assert_eq!(BucketWidth::parse(&width.to_string()), Ok(width), "{text}");
    }
    assert_eq!(
        BucketWidth::parse("90 seconds").map(|w| w.to_string()),
        Ok("90 seconds".into())
    );
    assert_eq!(
        BucketWidth::parse("1 day").map(|w| w.to_string()),
        Ok("1 day".into())
    );
    for (bad, why) in [
        ("7 fortnights", "unknown unit"),
        ("0 minutes", "at least 1 second"),
        ("7 minutes", "divide a day"),
        ("2 days", "at most 1 day"),
        ("1 week", "date_trunc"),
        ("1 month", "date_trunc"),
        ("minutes", "positive whole number"),
        ("-5 minutes", "positive whole number"),
        ("1.5 minutes", "unknown unit"),
        ("5", "unit is missing"),
        ("99999999999999999999 seconds", "at most 1 day"),
        ("", "positive whole number"),
    ] {
        let error = BucketWidth::parse(bad).expect_err(bad).to_string();
        assert!(error.contains(why), "{bad}: {error}");
    }
    assert!(BucketWidth::from_ms(1500).is_err());
    assert!(BucketWidth::from_ms(500).is_err());
}

/// Where the magnitude rule reads epoch numbers, and where it breaks
/// (both edges are documented with `Timestamp::parse_epoch`).
#[test]
fn epoch_magnitude_rule() {
    let t = |text: &str| Timestamp::parse(text.as_bytes()).map(|t| t.to_string());
    assert_eq!(t("1793491207"), Ok("2026-11-01T00:00:07Z".into()));
    assert_eq!(t("1793491207000"), Ok("2026-11-01T00:00:07Z".into()));
    assert_eq!(
        t("1793491207.123456"),
        Ok("2026-11-01T00:00:07.123Z".into())
    );
    assert_eq!(t("1793491207123.9"), Ok("2026-11-01T00:00:07.123Z".into()));
    assert_eq!(t("+0"), Ok("1970-01-01T00:00:00Z".into()));
    assert_eq!(t("-1"), Ok("1969-12-31T23:59:59Z".into()));
    assert_eq!(t("-0.0005"), Ok("1969-12-31T23:59:59.999Z".into()));
    // The last second read as seconds, and the first read as ms.
    assert_eq!(t("99999999999"), Ok("5138-11-16T09:46:39Z".into()));
    assert_eq!(t("100000000000"), Ok("1973-03-03T09:46:40Z".into()));
    // Milliseconds before March 1973 are read as seconds.
    assert_eq!(t("86400000"), Ok("1972-09-27T00:00:00Z".into()));
    // The range holds in either unit.
    assert_eq!(t("253402300799999"), Ok("9999-12-31T23:59:59.999Z".into()));
    assert!(t("253402300800000").is_err());
    assert!(t("-62135596800001").is_err());
    assert!(t("1234567890123456789012").is_err());
    for bad in ["1.", ".5", "1e12", "0x10", "1 000", "--1", "1.2.3"] {
        assert!(t(bad).is_err(), "{bad}");
    }
}
