//! The vocabulary every stage of cardinal's data path shares.
//!
//! `sources -> decode -> route -> summarize -> store -> query`: each stage
//! hands the next one records whose fields are borrowed byte slices until an
//! expression needs their typed [`Value`]. This crate names those types:
//!
//! - [`Timestamp`]: event time in UTC milliseconds, parsed from text without
//!   allocation, truncated to [`TimeUnit`] buckets (`date_trunc`);
//! - [`UserId`]: the 64-bit id journeys and unique counts key on;
//! - [`ColumnType`], [`Column`], [`Schema`]: what a declared stream holds;
//! - [`Value`]: one typed field, borrowing text from the record's buffer,
//!   read from raw bytes by [`Value::parse`] with a [`ValueError`] reason;
//! - [`Record`]: raw field access, implemented by each input format.
//!
//! [`Value::parse`] has fast paths, each tested and fuzzed against
//! [`Value::parse_without_fast_path`]: 8-digit integers by SWAR, Clinger's exact
//! float case with a plain digit loop for decimals of at most 19 digits,
//! and the fixed ISO-8601 layouts. A [`DateMemo`] (which
//! [`Value::parse_memo`] and [`Record::value_memo`] take) converts a
//! timestamp's date only when its first 10 bytes change and its `HH:MM:SS`
//! only when those 8 bytes change, so a day of events converts its date
//! once; a [`BucketMemo`] keeps the last bucket.
//!
//! ```
//! use cardinal_event::{ColumnType, Timestamp, TimeUnit, Value};
//! let ts = Timestamp::parse(b"2026-11-04T13:45:59Z").unwrap();
//! assert_eq!(ts.truncate(TimeUnit::Day).to_string(), "2026-11-04T00:00:00Z");
//! assert_eq!(ColumnType::parse("bigint").unwrap(), ColumnType::BigInt);
//! assert_eq!(Value::Text(b"CA").as_text(), Some(&b"CA"[..]));
//! ```

#![deny(missing_docs)]

pub mod bytes;
mod error;
mod time;

pub use error::{Error, Result};
pub use time::{
    BUCKET_WIDTH_MS_MAX, BUCKET_WIDTH_MS_MIN, BucketMemo, BucketWidth, DateMemo, EPOCH_MS_MIN,
    TimeUnit, Timestamp,
};

/// A user's 64-bit id. Kept apart from other `u64`s by type so that a count
/// or a hash cannot be passed where an id is meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserId(pub u64);

/// The column types a stream declaration may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// Event time ([`Timestamp`]).
    Timestamp,
    /// A signed 64-bit integer.
    BigInt,
    /// A 64-bit float.
    Double,
    /// Bytes, usually UTF-8.
    Text,
    /// `true` / `false`.
    Bool,
}

impl ColumnType {
    /// Reads a SQL type name: TIMESTAMP (or DATE: a date is its midnight,
    /// UTC), BIGINT (or INT, INTEGER, LONG),
    /// DOUBLE (or FLOAT, REAL), TEXT (or VARCHAR, STRING), BOOLEAN (or BOOL).
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_uppercase().as_str() {
            "TIMESTAMP" | "DATE" => Ok(Self::Timestamp),
            "BIGINT" | "INT" | "INTEGER" | "LONG" => Ok(Self::BigInt),
            "DOUBLE" | "FLOAT" | "REAL" => Ok(Self::Double),
            "TEXT" | "VARCHAR" | "STRING" => Ok(Self::Text),
            "BOOLEAN" | "BOOL" => Ok(Self::Bool),
            _ => Err(Error::ColumnType {
                name: name.to_owned(),
            }),
        }
    }

    /// The type's SQL name, as error messages show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Timestamp => "TIMESTAMP",
            Self::BigInt => "BIGINT",
            Self::Double => "DOUBLE",
            Self::Text => "TEXT",
            Self::Bool => "BOOLEAN",
        }
    }
}

/// One declared column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The name expressions refer to it by.
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// For nested JSON input, the path of keys from the record's root
    /// (`["user", "id"]` for `user.id`); a single key otherwise.
    pub path: Vec<String>,
}

/// The columns of a stream, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schema {
    /// The columns; a record's field `i` is column `i`.
    pub columns: Vec<Column>,
}

impl Schema {
    /// The index of the column called `name` (case-insensitive), if any.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }
}

/// Read access to one record's raw fields, as a parser laid them out.
///
/// Implemented by each input format's record view (delimited text, NDJSON,
/// Parquet rows) and by test rows, so that expression evaluation in `route`
/// is written once and monomorphised per format.
pub trait Record {
    /// The raw bytes of column `column` (unescaped; for JSON the string's
    /// content or the number's text), or `None` when the field is absent.
    fn field(&self, column: usize) -> Option<&[u8]>;

    /// The typed value of `column`, declared as `ty`: `Null` when the field
    /// is absent or empty, an error when its text is not a `ty`.
    ///
    /// Text formats keep the default, which parses [`Record::field`]'s
    /// bytes; formats that carry typed values (Parquet) override it and skip
    /// the text round trip. Text columns must still be readable through
    /// `field`.
    fn value(&self, column: usize, ty: ColumnType) -> Result<Value<'_>, ValueError> {
        match self.field(column) {
            None => Ok(Value::Null),
            Some(bytes) => Value::parse(bytes, ty),
        }
    }

    /// [`Record::value`] for a caller that reads records one after the
    /// other and keeps `memo` between them: a record of text fields parses
    /// a timestamp with [`Value::parse_memo`], so a date repeated from the
    /// previous timestamp is not parsed again. The answer is always
    /// [`Record::value`]'s; the default (for records with typed fields of
    /// their own) is `value` itself.
    fn value_memo(
        &self,
        column: usize,
        ty: ColumnType,
        memo: &mut DateMemo,
    ) -> Result<Value<'_>, ValueError> {
        let _ = memo;
        self.value(column, ty)
    }
}

/// Parses `bytes` with [`Value::parse_memo`]: the body of
/// [`Record::value_memo`] for records whose fields are text.
#[inline]
pub fn text_value_memo<'a>(
    field: Option<&'a [u8]>,
    ty: ColumnType,
    memo: &mut DateMemo,
) -> Result<Value<'a>, ValueError> {
    match field {
        None => Ok(Value::Null),
        Some(bytes) => Value::parse_memo(bytes, ty, memo),
    }
}

impl<T: AsRef<[u8]>> Record for [T] {
    fn field(&self, column: usize) -> Option<&[u8]> {
        self.get(column).map(AsRef::as_ref)
    }

    fn value_memo(
        &self,
        column: usize,
        ty: ColumnType,
        memo: &mut DateMemo,
    ) -> Result<Value<'_>, ValueError> {
        text_value_memo(self.field(column), ty, memo)
    }
}

/// One typed field. Text borrows from the record's buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// Missing or empty.
    Null,
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// Bytes, usually UTF-8.
    Text(&'a [u8]),
    /// A boolean.
    Bool(bool),
    /// A point in time.
    Time(Timestamp),
}

impl<'a> Value<'a> {
    /// Reads raw field bytes as a value of type `ty`. Empty bytes are
    /// [`Value::Null`] for every type but text. Floats accept Java's forms
    /// (`1.1885166E-4`, `NaN`, `Infinity`); booleans `true`/`false`/`1`/`0`
    /// (any case). Spaces and tabs around a number, time or boolean are
    /// not part of it (`" 42 "` is 42); text keeps them.
    ///
    /// ```
    /// use cardinal_event::{ColumnType, Value};
    /// assert_eq!(Value::parse(b"-42", ColumnType::BigInt), Ok(Value::Int(-42)));
    /// assert_eq!(Value::parse(b"1.1885166E-4", ColumnType::Double), Ok(Value::Float(1.1885166E-4)));
    /// assert_eq!(Value::parse(b"", ColumnType::Double), Ok(Value::Null));
    /// assert!(Value::parse(b"12x", ColumnType::BigInt).is_err());
    /// assert_eq!(Value::parse(b" 42\t", ColumnType::BigInt), Ok(Value::Int(42)));
    /// assert!(Value::parse(b"  ", ColumnType::BigInt).is_err());
    /// ```
    #[inline]
    pub fn parse(bytes: &'a [u8], ty: ColumnType) -> Result<Self, ValueError> {
        match ty {
            ColumnType::BigInt => {
                Self::parse_bigint(bytes).map(|v| v.map_or(Value::Null, Value::Int))
            }
            ColumnType::Double => {
                Self::parse_double(bytes).map(|v| v.map_or(Value::Null, Value::Float))
            }
            ColumnType::Timestamp => match time::parse_fixed(bytes) {
                Some(value) => Ok(Value::Time(value)),
                None => Self::parse_without_fast_path(bytes, ty),
            },
            ColumnType::Text | ColumnType::Bool => Self::parse_without_fast_path(bytes, ty),
        }
    }

    /// [`Value::parse`] for one of a run of fields parsed one after the
    /// other: a timestamp whose date (its first 10 bytes) equals the one
    /// `memo` holds takes the date's milliseconds from it (see
    /// [`DateMemo`]); anything else is [`Value::parse`]. The answer is
    /// always [`Value::parse`]'s, whatever `memo` holds.
    #[inline]
    pub fn parse_memo(
        bytes: &'a [u8],
        ty: ColumnType,
        memo: &mut DateMemo,
    ) -> Result<Self, ValueError> {
        if ty == ColumnType::Timestamp {
            return Self::parse_timestamp_memo(bytes, memo)
                .map(|v| v.map_or(Value::Null, Value::Time));
        }
        Self::parse(bytes, ty)
    }

    /// [`Value::parse`] of a BIGINT field without building a [`Value`]:
    /// `Ok(None)` for NULL (empty). For a caller that parses a whole column
    /// of one type, where the match on the type and on the answer cost as
    /// much as the digits.
    #[inline]
    pub fn parse_bigint(bytes: &[u8]) -> Result<Option<i64>, ValueError> {
        if bytes.is_empty() {
            return Ok(None);
        }
        match parse_i64_fast(bytes) {
            Some(value) => Ok(Some(value)),
            None => bigint_padded(bytes),
        }
    }

    /// [`Value::parse`] of a DOUBLE field without building a [`Value`]
    /// (see [`Value::parse_bigint`]): `Ok(None)` for NULL.
    #[inline(always)]
    pub fn parse_double(bytes: &[u8]) -> Result<Option<f64>, ValueError> {
        if let Some(value) = parse_f64_fast(bytes) {
            return Ok(Some(value));
        }
        match Value::parse_without_fast_path(bytes, ColumnType::Double)? {
            Value::Float(value) => Ok(Some(value)),
            _ => Ok(None),
        }
    }

    /// [`Value::parse_memo`] of a TIMESTAMP field without building a
    /// [`Value`] (see [`Value::parse_bigint`]): `Ok(None)` for NULL.
    #[inline(always)]
    pub fn parse_timestamp_memo(
        bytes: &[u8],
        memo: &mut DateMemo,
    ) -> Result<Option<Timestamp>, ValueError> {
        if let Some(value) = time::parse_fixed_memo(bytes, memo) {
            return Ok(Some(value));
        }
        match Value::parse_without_fast_path(bytes, ColumnType::Timestamp)? {
            Value::Time(value) => Ok(Some(value)),
            _ => Ok(None),
        }
    }

    /// [`parse`](Self::parse) without the fast paths for integers, floats
    /// and fixed-layout timestamps: the reference they are tested (and
    /// fuzzed) against.
    pub fn parse_without_fast_path(bytes: &'a [u8], ty: ColumnType) -> Result<Self, ValueError> {
        if bytes.is_empty() && ty != ColumnType::Text {
            return Ok(Value::Null);
        }
        if ty != ColumnType::Text
            && let Some(inner) = trimmed(bytes)
        {
            return Self::parse_without_fast_path(inner, ty);
        }
        match ty {
            ColumnType::Text => Ok(Value::Text(bytes)),
            ColumnType::BigInt => parse_i64(bytes).map(Value::Int).ok_or(ValueError::BigInt),
            ColumnType::Double => parse_f64(bytes).map(Value::Float),
            ColumnType::Bool => match bytes {
                b"1" => Ok(Value::Bool(true)),
                b"0" => Ok(Value::Bool(false)),
                _ if bytes.eq_ignore_ascii_case(b"true") => Ok(Value::Bool(true)),
                _ if bytes.eq_ignore_ascii_case(b"false") => Ok(Value::Bool(false)),
                _ => Err(ValueError::Bool),
            },
            ColumnType::Timestamp => Timestamp::parse_without_fast_path(bytes)
                .map(Value::Time)
                .map_err(|_| ValueError::Timestamp),
        }
    }

    /// The text, if this is text.
    pub fn as_text(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }

    /// A number as f64 (integers convert; a timestamp gives its
    /// milliseconds), if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            Value::Time(t) => Some(t.0 as f64),
            _ => None,
        }
    }

    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Why raw bytes are not a value of the declared type. Small and `Copy`, so
/// the ingest loop can count rejects by reason without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Not a 64-bit signed integer.
    #[error("not a BIGINT")]
    BigInt,
    /// Not a floating-point number.
    #[error("not a DOUBLE")]
    Double,
    /// Not a boolean.
    #[error("not a BOOLEAN (true, false, 1 or 0)")]
    Bool,
    /// Not a timestamp in a supported form.
    #[error("not a TIMESTAMP (YYYY-MM-DD[ HH:MM:SS], ISO-8601, or epoch seconds or milliseconds)")]
    Timestamp,
    /// A typed value (from a binary format such as Parquet) outside the
    /// declared type's range: an unsigned integer above `i64::MAX`, a time
    /// outside [`Timestamp::MIN`]..=[`Timestamp::MAX`].
    #[error("out of range for the declared type")]
    OutOfRange,
}

/// A typed field's value inside spaces or tabs (`" 5 "`), which
/// PostgreSQL's and DuckDB's readers take as the value; `None` when there
/// are none around it, or nothing else (a blank field is not NULL: only
/// an empty one is).
#[cold]
fn trimmed(bytes: &[u8]) -> Option<&[u8]> {
    let inner = bytes.trim_ascii();
    (inner.len() != bytes.len() && !inner.is_empty()).then_some(inner)
}

/// [`Value::parse_bigint`] of a field its fast path refused: an integer
/// inside spaces or tabs, or not one. Out of line, so the fast path stays
/// as small as it was.
#[cold]
#[inline(never)]
fn bigint_padded(bytes: &[u8]) -> Result<Option<i64>, ValueError> {
    trimmed(bytes)
        .and_then(parse_i64)
        .map(Some)
        .ok_or(ValueError::BigInt)
}

/// Decimal i64 with an optional sign; `None` on any other byte or overflow.
fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        // Accumulate negatively so that i64::MIN parses.
        value = value.checked_mul(10)?.checked_sub(i64::from(b - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// [`parse_i64`] without a check per digit: at most 19 digits (below
/// 10^19 < 2^64) accumulate in a `u64` that cannot overflow, 8 at a time
/// where there are 8, and the sign's range is checked once. Longer digit
/// strings (leading zeros) go to `parse_i64`.
#[inline(always)]
fn parse_i64_fast(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 19 {
        return parse_i64(bytes);
    }
    let mut value: u64 = 0;
    let mut eights = digits.chunks_exact(8);
    for chunk in &mut eights {
        value = value * 100_000_000 + eight_digits(chunk)?;
    }
    for &b in eights.remainder() {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value * 10 + u64::from(digit);
    }
    if negative {
        // i64::MIN's magnitude is one more than i64::MAX.
        if value <= i64::MAX.unsigned_abs() + 1 {
            Some(0i64.wrapping_sub_unsigned(value))
        } else {
            None
        }
    } else {
        i64::try_from(value).ok()
    }
}

/// The value of 8 ASCII digits, or `None` if one is not a digit (SWAR:
/// checked as in `time::matches_layout`, then combined pairwise: 8 digits
/// -> 4 two-digit lanes -> 2 four-digit lanes -> 1).
#[inline(always)]
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    let high = 0xf0f0_f0f0_f0f0_f0f0;
    if word & high != ZEROS || word.wrapping_add(0x0606_0606_0606_0606) & high != ZEROS {
        return None;
    }
    let v = word - ZEROS;
    // Lane i holds digit i (the most significant first, little-endian).
    let v = (v * 10 + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v * 100 + (v >> 16)) & 0x0000_ffff_0000_ffff;
    Some((v * 10_000 + (v >> 32)) & 0xffff_ffff)
}

/// Powers of ten exactly representable as f64: 10^0..=10^22 (5^22 <
/// 2^53, so each is exact).
const POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The most significant digits a mantissa may have on the fast path: 19
/// fit a `u64` without overflow.
const MANTISSA_DIGITS_MAX: usize = 19;

/// Clinger's fast path ("How to Read Floating Point Numbers Accurately",
/// PLDI 1990, §4): a decimal `m * 10^e` with `m <= 2^53` and `|e| <= 22`
/// is one correctly rounded multiplication or division of two exact
/// doubles, so it equals the correctly rounded value `str::parse` gives.
/// Reads `[+-]digits[.digits][(e|E)[+-]digits]` (Java's `1.1885166E-4`
/// too); anything else (`inf`, `NaN`, `.5`, `1.`, longer mantissas, larger
/// exponents) is `None` and goes to the general parser.
#[inline(always)]
// Indexes are checked before use: months 1..=12, exponents 0..=22.
#[allow(clippy::cast_possible_truncation)]
fn parse_f64_fast(bytes: &[u8]) -> Option<f64> {
    let (negative, rest) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    if rest.len() <= MANTISSA_DIGITS_MAX {
        return parse_f64_short(negative, rest);
    }
    parse_f64_fast_long(negative, rest)
}

/// [`parse_f64_fast`] after the sign, for any length: digits are counted
/// so that more than [`MANTISSA_DIGITS_MAX`] significant ones go to the
/// general parser before the mantissa could overflow.
// Indexes are checked before use: exponents 0..=22.
#[allow(clippy::cast_possible_truncation)]
fn parse_f64_fast_long(negative: bool, rest: &[u8]) -> Option<f64> {
    let mut mantissa: u64 = 0;
    let mut significant = 0usize;
    let mut i = 0;
    let digit_at = |i: usize| {
        rest.get(i)
            .map(|b| b.wrapping_sub(b'0'))
            .filter(|&d| d <= 9)
    };
    // Adds a digit; false once the mantissa has more significant digits
    // than fit (checked before the multiplication could overflow).
    let take = |digit: u8, mantissa: &mut u64, significant: &mut usize| {
        if *mantissa != 0 || digit != 0 {
            *significant += 1;
        }
        if *significant > MANTISSA_DIGITS_MAX {
            return false;
        }
        *mantissa = *mantissa * 10 + u64::from(digit);
        true
    };
    let mut integer_digits = 0;
    while let Some(d) = digit_at(i) {
        if !take(d, &mut mantissa, &mut significant) {
            return None;
        }
        i += 1;
        integer_digits += 1;
    }
    if integer_digits == 0 {
        return None;
    }
    let mut exponent: i64 = 0;
    if rest.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(d) = digit_at(i) {
            if !take(d, &mut mantissa, &mut significant) {
                return None;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        exponent -= i64::try_from(i - start).ok()?;
    }
    if matches!(rest.get(i), Some(b'e' | b'E')) {
        i += 1;
        let sign = match rest.get(i) {
            Some(b'-') => {
                i += 1;
                -1
            }
            Some(b'+') => {
                i += 1;
                1
            }
            _ => 1,
        };
        let start = i;
        let mut written: i64 = 0;
        while let Some(d) = digit_at(i) {
            // Four digits are already far past the fast path's range.
            if i - start >= 4 {
                return None;
            }
            written = written * 10 + i64::from(d);
            i += 1;
        }
        if i == start {
            return None;
        }
        exponent += sign * written;
    }
    if i != rest.len() || mantissa > 1 << 53 {
        return None;
    }
    // The mantissa is exact (at most 2^53), and so is the power of ten.
    #[allow(clippy::cast_precision_loss)]
    let m = mantissa as f64;
    let value = match exponent {
        0..=22 => m * POWERS_OF_TEN[exponent as usize],
        -22..=-1 => m / POWERS_OF_TEN[exponent.unsigned_abs() as usize],
        _ => return None,
    };
    Some(if negative { -value } else { value })
}

/// [`parse_f64_fast`] for text of at most [`MANTISSA_DIGITS_MAX`] bytes
/// after the sign, the usual decimal column (`0.002463`): it has at most
/// that many digits, so the mantissa cannot overflow and the count of
/// significant digits needs no tracking; each digit is one subtraction,
/// one compare and one multiply-add. The mantissa and exponent are the
/// ones the long path computes, so the value is the same to the bit (the
/// `value_parse` fuzz target and `tests/values.rs` compare both with
/// [`Value::parse_without_fast_path`]).
#[inline]
// Indexes are checked before use: exponents 0..=22.
#[allow(clippy::cast_possible_truncation)]
fn parse_f64_short(negative: bool, rest: &[u8]) -> Option<f64> {
    debug_assert!(rest.len() <= MANTISSA_DIGITS_MAX);
    let mut mantissa: u64 = 0;
    let mut i = 0;
    while let Some(&b) = rest.get(i) {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        mantissa = mantissa * 10 + u64::from(digit);
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut exponent: i64 = 0;
    if rest.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(&b) = rest.get(i) {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            mantissa = mantissa * 10 + u64::from(digit);
            i += 1;
        }
        if i == start {
            return None;
        }
        // At most 19 fraction digits.
        exponent = -((i - start) as i64);
    }
    if i != rest.len() {
        // An exponent, or not a number: the long path decides.
        return parse_f64_fast_long(negative, rest);
    }
    if mantissa > 1 << 53 {
        return None;
    }
    // The mantissa is exact (at most 2^53), and so is the power of ten.
    #[allow(clippy::cast_precision_loss)]
    let m = mantissa as f64;
    let value = match exponent {
        0 => m,
        -22..=-1 => m / POWERS_OF_TEN[exponent.unsigned_abs() as usize],
        _ => return None,
    };
    Some(if negative { -value } else { value })
}

/// A decimal or scientific f64, or an infinity or NaN spelled out (`inf`,
/// `Infinity`, `NaN`, any case, with a sign), as PostgreSQL and DuckDB
/// read them. A number too large for an f64 (`1e400`) is
/// [`ValueError::OutOfRange`], as in both, not an infinity.
fn parse_f64(bytes: &[u8]) -> Result<f64, ValueError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ValueError::Double)?;
    let value: f64 = text.parse().map_err(|_| ValueError::Double)?;
    if value.is_infinite() {
        let unsigned = text.trim_start_matches(['+', '-']);
        let spelled =
            unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity");
        if !spelled {
            return Err(ValueError::OutOfRange);
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"+7"), Some(7));
        for bad in [&b"-"[..], b"", b"1 ", b"0x1", b"1.0"] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fast_paths_take_the_common_forms() {
        assert_eq!(parse_f64_fast(b"1.1885166E-4"), Some(1.1885166E-4));
        assert_eq!(parse_f64_fast(b"0.002463"), Some(0.002463));
        assert_eq!(parse_f64_fast(b"-12.5e+3"), Some(-12_500.0));
        assert_eq!(
            parse_f64_fast(b"-0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        for general in [
            &b"1e23"[..],
            b"9007199254740993",
            b"NaN",
            b"Infinity",
            b".5",
            b"1.",
            b"1e400",
        ] {
            assert_eq!(parse_f64_fast(general), None, "{}", general.escape_ascii());
        }
        assert_eq!(
            parse_i64_fast(b"1389031213305979729"),
            Some(1_389_031_213_305_979_729)
        );
        assert_eq!(parse_i64_fast(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64_fast(b"9223372036854775808"), None);
        assert_eq!(parse_i64_fast(b"9999999999999999999"), None);
        assert_eq!(parse_i64_fast(b"1234567x"), None);
        assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
        assert_eq!(eight_digits(b"1234:678"), None);
    }

    #[test]
    fn typed_values() {
        assert_eq!(
            Value::parse(b"NaN", ColumnType::Double).map(|v| v.as_f64().map(f64::is_nan)),
            Ok(Some(true))
        );
        assert_eq!(
            Value::parse(b"-Infinity", ColumnType::Double),
            Ok(Value::Float(f64::NEG_INFINITY))
        );
        assert_eq!(
            Value::parse(b"TRUE", ColumnType::Bool),
            Ok(Value::Bool(true))
        );
        assert_eq!(Value::parse(b"", ColumnType::Text), Ok(Value::Text(b"")));
        assert_eq!(
            Value::parse(b"2026-11-01", ColumnType::Timestamp),
            Ok(Value::Time(Timestamp(1_793_491_200_000)))
        );
        assert_eq!(
            Value::parse(b"yes", ColumnType::Bool),
            Err(ValueError::Bool)
        );
    }

    /// Infinities spelled out are values, as in PostgreSQL and DuckDB; a
    /// number too large for an f64 is out of range, not an infinity.
    #[test]
    fn doubles_out_of_range_are_not_infinities() {
        for (text, want) in [
            ("inf", f64::INFINITY),
            ("+INF", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("Infinity", f64::INFINITY),
            ("-infinity", f64::NEG_INFINITY),
            ("1e308", 1e308),
            ("-1.7976931348623157e308", f64::MIN),
            ("1e-400", 0.0),
        ] {
            assert_eq!(
                Value::parse(text.as_bytes(), ColumnType::Double),
                Ok(Value::Float(want)),
                "{text}"
            );
        }
        for text in ["1e400", "-1e309", "1.8e308", "99e999"] {
            assert_eq!(
                Value::parse(text.as_bytes(), ColumnType::Double),
                Err(ValueError::OutOfRange),
                "{text}"
            );
        }
        for text in ["infin", "--inf", "inf1", "1e"] {
            assert_eq!(
                Value::parse(text.as_bytes(), ColumnType::Double),
                Err(ValueError::Double),
                "{text}"
            );
        }
    }

    #[test]
    fn slices_are_records() {
        let row: &[&str] = &["a", "1"];
        assert_eq!(row.field(1), Some(&b"1"[..]));
        assert_eq!(row.field(2), None);
    }

    #[test]
    fn schema_lookup_ignores_case() {
        let schema = Schema {
            columns: vec![Column {
                name: "user_id".into(),
                ty: ColumnType::BigInt,
                path: vec!["user".into(), "id".into()],
            }],
        };
        assert_eq!(schema.index_of("USER_ID"), Some(0));
        assert_eq!(schema.index_of("state"), None);
    }

    #[test]
    fn type_names() {
        for ty in [
            ColumnType::Timestamp,
            ColumnType::BigInt,
            ColumnType::Double,
            ColumnType::Text,
            ColumnType::Bool,
        ] {
            assert_eq!(ColumnType::parse(ty.name()), Ok(ty));
        }
        assert_eq!(ColumnType::parse("varchar"), Ok(ColumnType::Text));
        assert_eq!(ColumnType::parse("DATE"), Ok(ColumnType::Timestamp));
        assert!(ColumnType::parse("json").is_err());
    }

    #[test]
    fn value_views() {
        assert_eq!(Value::Int(3).as_f64(), Some(3.0));
        assert_eq!(Value::Text(b"x").as_f64(), None);
        assert!(Value::Null.is_null());
    }
}
