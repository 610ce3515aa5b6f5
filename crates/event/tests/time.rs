//! Properties of event time: parsing what we print gives the same instant,
//! and a bucket start is in its own bucket and not after the instant.

use cardinal_event::{BucketMemo, TimeUnit, Timestamp};
use proptest::prelude::*;

/// Years 0001..=9999 in milliseconds.
const MS_MIN: i64 = Timestamp::MIN.0;
const MS_MAX: i64 = Timestamp::MAX.0;

/// Every unit.
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
}
