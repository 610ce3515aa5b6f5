//! The fast paths of `Value::parse` and `Timestamp::parse` against their
//! general paths (`parse_without_fast_path`): over random and adversarial
//! text both give the same value, bit for bit, or the same error.

use cardinal_event::{ColumnType, DateMemo, Timestamp, Value};
use proptest::prelude::*;

/// Both paths' answers for `text` as `ty`, floats compared by their bits
/// (so `-0.0` differs from `0.0` and NaNs are compared exactly).
fn agree(text: &[u8], ty: ColumnType) -> Result<(), TestCaseError> {
    let fast = Value::parse(text, ty);
    let general = Value::parse_without_fast_path(text, ty);
    let bits = |v: &Result<Value, _>| match v {
        Ok(Value::Float(f)) => Ok(Some(f.to_bits())),
        Ok(_) => Ok(None),
        Err(e) => Err(*e),
    };
    prop_assert_eq!(
        bits(&fast),
        bits(&general),
        "{:?}",
        text.escape_ascii().to_string()
    );
    if !matches!(fast, Ok(Value::Float(_))) {
        prop_assert_eq!(fast, general, "{:?}", text.escape_ascii().to_string());
    }
    // The column parsers give the same answer without a `Value`.
    let typed = match ty {
        ColumnType::BigInt => Value::parse_bigint(text).map(|v| v.map(Value::Int)),
        ColumnType::Double => Value::parse_double(text).map(|v| v.map(Value::Float)),
        ColumnType::Timestamp => {
            Value::parse_timestamp_memo(text, &mut DateMemo::default()).map(|v| v.map(Value::Time))
        }
        _ => return Ok(()),
    };
    let typed = typed.map(|v| v.unwrap_or(Value::Null));
    prop_assert_eq!(
        bits(&typed),
        bits(&general),
        "{:?}",
        text.escape_ascii().to_string()
    );
    if !matches!(typed, Ok(Value::Float(_))) {
        prop_assert_eq!(typed, general, "{:?}", text.escape_ascii().to_string());
    }
    Ok(())
}

fn agree_time(text: &[u8]) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        Timestamp::parse(text),
        Timestamp::parse_without_fast_path(text),
        "{:?}",
        text.escape_ascii().to_string()
    );
    agree(text, ColumnType::Timestamp)
}

/// Timestamps in and around the fixed layouts: fields slightly out of
/// range, either separator, fractions of 0..=7 digits, suffixes valid and
/// not.
fn timestamp_text() -> impl Strategy<Value = String> {
    (
        0u32..=9999,
        0u32..=13,
        0u32..=32,
        prop::option::of((
            0u32..=25,
            0u32..=61,
            0u32..=61,
            prop::sample::select(vec!["T", " ", "t", "_"]),
        )),
        prop::option::of(prop::collection::vec(0u32..=9, 0..=7)),
        prop::sample::select(vec!["", "Z", "z", "+01:00", "-05:30", "ZZ", "+0100", " "]),
    )
        .prop_map(|(year, month, day, time, fraction, suffix)| {
            let mut text = format!("{year:04}-{month:02}-{day:02}");
            if let Some((hour, minute, second, separator)) = time {
                text.push_str(&format!("{separator}{hour:02}:{minute:02}:{second:02}"));
                if let Some(digits) = fraction {
                    text.push('.');
                    text.extend(
                        digits
                            .iter()
                            .map(|d| char::from_digit(*d, 10).expect("digit")),
                    );
                }
            }
            text.push_str(suffix);
            text
        })
}

/// Bytes of `text` with one replaced (by a digit, a separator or
/// anything).
fn mutated(text: String) -> impl Strategy<Value = Vec<u8>> {
    let len = text.len();
    (
        0..len.max(1),
        prop_oneof![
            Just(b'0'),
            Just(b'9'),
            Just(b'-'),
            Just(b':'),
            Just(b'/'),
            any::<u8>()
        ],
    )
        .prop_map(move |(at, byte)| {
            let mut bytes = text.clone().into_bytes();
            if let Some(b) = bytes.get_mut(at) {
                *b = byte;
            }
            bytes
        })
}

/// Number text: signs, leading zeros, a point, an exponent in either
/// case, long mantissas, and the names of infinities and NaNs.
fn number_text() -> impl Strategy<Value = String> {
    let digits = prop::collection::vec(prop_oneof![3 => 0u8..=9, 1 => Just(0u8)], 0..=24)
        .prop_map(|d| d.iter().map(|d| char::from(b'0' + d)).collect::<String>());
    (
        prop::sample::select(vec!["", "-", "+", "--"]),
        digits.clone(),
        prop::option::of(digits),
        prop::option::of((
            prop::sample::select(vec!["e", "E", "e+", "E-", "e-"]),
            0u32..=400,
        )),
    )
        .prop_map(|(sign, int, fraction, exponent)| {
            let mut text = format!("{sign}{int}");
            if let Some(fraction) = fraction {
                text.push('.');
                text.push_str(&fraction);
            }
            if let Some((marker, value)) = exponent {
                text.push_str(&format!("{marker}{value}"));
            }
            text
        })
}

const ADVERSARIAL: &[&str] = &[
    "1e23",
    "9007199254740993",
    "9007199254740992",
    "9007199254740991",
    "-9007199254740993",
    "1.1885166E-4",
    "0.332717",
    "1e22",
    "1e-22",
    "1e-23",
    "4.9e-324",
    "2.2250738585072014E-308",
    "1.7976931348623157e308",
    "1.7976931348623159e308",
    "0.1",
    "0.3",
    "123456789012345678",
    "1234567890123456789",
    "12345678901234567890",
    "0000000000000000000000001",
    "0.0000000000000000000000000001",
    "-0",
    "-0.0",
    "+0",
    "0e0",
    "0e9999",
    "1e",
    "1e+",
    ".5",
    "5.",
    "-.5",
    ".",
    "-",
    "+",
    "",
    "e5",
    "1.e5",
    "inf",
    "-inf",
    "+inf",
    "infinity",
    "Infinity",
    "-Infinity",
    "+Infinity",
    "INF",
    "nan",
    "NaN",
    "-NaN",
    "+nan",
    "1_000",
    "1,5",
    " 1",
    "1 ",
    "0x10",
    "1e0x",
    "١",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "+9223372036854775807",
    "00000000000000000009",
    "99999999999999999999",
    "-00000000000000000001",
    "12345678",
    "1234567x",
    "x2345678",
    "123456789",
];

#[test]
fn adversarial_numbers_agree() {
    for text in ADVERSARIAL {
        for ty in [ColumnType::Double, ColumnType::BigInt] {
            agree(text.as_bytes(), ty).expect(text);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn timestamps_agree(text in timestamp_text()) {
        agree_time(text.as_bytes())?;
    }

    #[test]
    fn mutated_timestamps_agree(bytes in timestamp_text().prop_flat_map(mutated)) {
        agree_time(&bytes)?;
    }

    #[test]
    fn any_bytes_agree(bytes in prop::collection::vec(any::<u8>(), 0..32)) {
        agree_time(&bytes)?;
        agree(&bytes, ColumnType::Double)?;
        agree(&bytes, ColumnType::BigInt)?;
    }

    #[test]
    fn number_text_agrees(text in number_text()) {
        agree(text.as_bytes(), ColumnType::Double)?;
        agree(text.as_bytes(), ColumnType::BigInt)?;
    }

    #[test]
    fn printed_floats_agree(bits in any::<u64>(), digits in 0usize..=17) {
        let f = f64::from_bits(bits);
        for text in [format!("{f}"), format!("{f:e}"), format!("{f:E}"), format!("{f:.digits$}"), format!("{f:.digits$e}")] {
            agree(text.as_bytes(), ColumnType::Double)?;
        }
    }

    #[test]
    fn short_decimals_agree(mantissa in 0u64..=(1 << 54), exponent in -30i32..=30, negative in any::<bool>()) {
        let sign = if negative { "-" } else { "" };
        agree(format!("{sign}{mantissa}e{exponent}").as_bytes(), ColumnType::Double)?;
        agree(format!("{sign}{mantissa}E{exponent}").as_bytes(), ColumnType::Double)?;
    }

    /// A run of timestamps parsed with one [`DateMemo`] (as routing reads
    /// a column record after record) gives every one the general path's
    /// answer, whether its date repeats the previous one or not, after
    /// valid and invalid dates alike.
    #[test]
    fn memo_runs_agree(
        texts in prop::collection::vec(
            prop_oneof![
                timestamp_text().prop_map(String::into_bytes),
                timestamp_text().prop_flat_map(mutated),
                Just(b"2026-11-01T00:00:07Z".to_vec()),
                Just(b"2026-11-01T23:59:59.999Z".to_vec()),
                Just(b"2026-11-01 23:59:59".to_vec()),
                Just(b"2026-11-02T23:59:59Z".to_vec()),
                Just(b"2026-11-01".to_vec()),
                Just(b"2026-11-0".to_vec()),
            ],
            1..24,
        ),
    ) {
        let mut memo = DateMemo::default();
        for text in &texts {
            let fast = Value::parse_memo(text, ColumnType::Timestamp, &mut memo);
            let general = Value::parse_without_fast_path(text, ColumnType::Timestamp);
            prop_assert_eq!(fast, general, "{:?}", text.escape_ascii().to_string());
        }
    }

    /// Plain decimals (`0.002463`) on both sides of the 19-byte bound
    /// between the short and the long fast path, with leading zeros.
    #[test]
    fn plain_decimals_agree(
        integer in prop::collection::vec(0u8..=9, 1..=17),
        fraction in prop::option::of(prop::collection::vec(0u8..=9, 0..=17)),
        sign in prop::sample::select(vec!["", "-", "+"]),
    ) {
        let digits = |d: &[u8]| d.iter().map(|d| char::from(b'0' + d)).collect::<String>();
        let mut text = format!("{sign}{}", digits(&integer));
        if let Some(fraction) = &fraction {
            text.push('.');
            text.push_str(&digits(fraction));
        }
        agree(text.as_bytes(), ColumnType::Double)?;
    }

    /// Decimals of up to 16 digits with one byte replaced by another: a
    /// second dot, a sign, a letter, a byte with the top bit set, `/` and
    /// `:` around the digits; every length and every place of the dot and
    /// of the replaced byte.
    #[test]
    fn decimals_with_a_byte_replaced_agree(
        digits in prop::collection::vec(0u8..=9, 1..=16),
        dot in any::<prop::sample::Index>(),
        replaced in any::<prop::sample::Index>(),
        byte in prop::sample::select(vec![b'.', b'-', b'e', b'/', b':', b'0' + 0x80, b'.' + 0x80, 0, b' ']),
        replace in any::<bool>(),
    ) {
        let mut text: Vec<u8> = digits.iter().map(|d| b'0' + d).collect();
        let at = dot.index(text.len() + 1);
        if at < text.len() {
            text.insert(at, b'.');
        }
        agree(&text, ColumnType::Double)?;
        if replace {
            let at = replaced.index(text.len());
            text[at] = byte;
            agree(&text, ColumnType::Double)?;
        }
    }

    /// Spaces and tabs around a number or time do not change it (as in
    /// PostgreSQL and DuckDB); every path agrees on the padded text.
    #[test]
    fn padded_values_read_as_the_value(
        value in any::<i64>(),
        float in any::<f64>(),
        time in timestamp_text(),
        before in "[ \t]{0,3}",
        after in "[ \t]{0,3}",
    ) {
        for (text, ty) in [
            (value.to_string(), ColumnType::BigInt),
            (float.to_string(), ColumnType::Double),
            (time, ColumnType::Timestamp),
        ] {
            let padded = format!("{before}{text}{after}");
            agree(padded.as_bytes(), ty)?;
            let (alone, padded) = (Value::parse(text.as_bytes(), ty), Value::parse(padded.as_bytes(), ty));
            match (alone, padded) {
                (Ok(Value::Float(a)), Ok(Value::Float(b))) => prop_assert_eq!(a.to_bits(), b.to_bits()),
                (alone, padded) => prop_assert_eq!(alone, padded),
            }
        }
    }

    #[test]
    fn integers_agree(value in any::<i64>(), zeros in 0usize..4, plus in any::<bool>()) {
        let digits = value.unsigned_abs().to_string();
        let sign = if value < 0 { "-" } else if plus { "+" } else { "" };
        let text = format!("{sign}{}{digits}", "0".repeat(zeros));
        agree(text.as_bytes(), ColumnType::BigInt)?;
        prop_assert_eq!(Value::parse(text.as_bytes(), ColumnType::BigInt), Ok(Value::Int(value)));
    }
}
