#![no_main]
//! Any bytes through `Value::parse` and `Timestamp::parse` with their fast
//! paths and without: the answers must be equal (floats bit for bit).
//! Timestamps also go through `Value::parse_memo` after the input's first
//! half, so a memo holding another (or the same) date is exercised too, and
//! an accepted one must be in range, print and read back, and truncate in
//! range (fixed `time_bucket` widths too). The bytes as a bucket width
//! parse to a valid width or an error.
use cardinal_event::{BucketWidth, ColumnType, DateMemo, TimeUnit, Timestamp, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for ty in [
        ColumnType::BigInt,
        ColumnType::Double,
        ColumnType::Timestamp,
        ColumnType::Bool,
        ColumnType::Text,
    ] {
        let fast = Value::parse(data, ty);
        let general = Value::parse_without_fast_path(data, ty);
        match (fast, general) {
            (Ok(Value::Float(a)), Ok(Value::Float(b))) => {
                assert_eq!(a.to_bits(), b.to_bits(), "{ty:?} {:?}", data.escape_ascii().to_string());
            }
            (a, b) => assert_eq!(a, b, "{ty:?} {:?}", data.escape_ascii().to_string()),
        }
    }
    assert_eq!(
        Timestamp::parse(data),
        Timestamp::parse_without_fast_path(data)
    );
    // An accepted time is in years 0001..=9999, and so is each of its
    // buckets; it prints with a four-digit year and reads back.
    if let Ok(t) = Timestamp::parse(data) {
        assert!(t.is_in_range(), "{t}");
        assert_eq!(Timestamp::parse(t.to_string().as_bytes()), Ok(t));
        for unit in [
            TimeUnit::Second,
            TimeUnit::Minute,
            TimeUnit::Hour,
            TimeUnit::Day,
            TimeUnit::Week,
            TimeUnit::Month,
            TimeUnit::Quarter,
            TimeUnit::Year,
            TimeUnit::Fixed(BucketWidth::from_ms(1_000).expect("a width")),
            TimeUnit::Fixed(BucketWidth::from_ms(300_000).expect("a width")),
            TimeUnit::Fixed(BucketWidth::from_ms(86_400_000).expect("a width")),
        ] {
            let start = t.truncate(unit);
            assert!(start.is_in_range(), "{t} {unit:?}: {start}");
        }
    }
    let general = Value::parse_without_fast_path(data, ColumnType::Timestamp);
    let mut memo = DateMemo::default();
    assert_eq!(Value::parse_memo(data, ColumnType::Timestamp, &mut memo), general);
    assert_eq!(Value::parse_memo(data, ColumnType::Timestamp, &mut memo), general);
    let (first, second) = data.split_at(data.len() / 2);
    let mut memo = DateMemo::default();
    let _ = Value::parse_memo(first, ColumnType::Timestamp, &mut memo);
    assert_eq!(
        Value::parse_memo(second, ColumnType::Timestamp, &mut memo),
        Value::parse_without_fast_path(second, ColumnType::Timestamp)
    );
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(width) = BucketWidth::parse(text)
    {
        assert_eq!(86_400_000 % width.ms(), 0, "{text:?}");
        assert_eq!(BucketWidth::parse(&width.to_string()), Ok(width), "{text:?}");
    }
});
