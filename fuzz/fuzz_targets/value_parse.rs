#![no_main]
//! Any bytes through `Value::parse` and `Timestamp::parse` with their fast
//! paths and without: the answers must be equal (floats bit for bit).
use cardinal_event::{ColumnType, Timestamp, Value};
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
});
