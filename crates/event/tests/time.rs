//! Properties of event time: parsing what we print gives the same instant,
//! and a bucket start is in its own bucket and not after the instant.

use cardinal_event::{BucketMemo, TimeUnit, Timestamp};
use proptest::prelude::*;

/// Years 0000..=9999 in milliseconds.
const MS_MIN: i64 = -62_167_219_200_000;
const MS_MAX: i64 = 253_402_300_799_999;

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

    #[test]
    fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let _ = Timestamp::parse(&bytes);
    }
}
