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
//! ```
//! use cardinal_event::{ColumnType, Timestamp, TimeUnit, Value};
//! let ts = Timestamp::parse(b"2026-11-04T13:45:59Z").unwrap();
//! assert_eq!(ts.truncate(TimeUnit::Day).to_string(), "2026-11-04T00:00:00Z");
//! assert_eq!(ColumnType::parse("bigint").unwrap(), ColumnType::BigInt);
//! assert_eq!(Value::Text(b"CA").as_text(), Some(&b"CA"[..]));
//! ```

#![deny(missing_docs)]

mod error;
mod time;

pub use error::{Error, Result};
pub use time::{TimeUnit, Timestamp};

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
}

impl<T: AsRef<[u8]>> Record for [T] {
    fn field(&self, column: usize) -> Option<&[u8]> {
        self.get(column).map(AsRef::as_ref)
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
    /// (any case).
    ///
    /// ```
    /// use cardinal_event::{ColumnType, Value};
    /// assert_eq!(Value::parse(b"-42", ColumnType::BigInt), Ok(Value::Int(-42)));
    /// assert_eq!(Value::parse(b"1.1885166E-4", ColumnType::Double), Ok(Value::Float(1.1885166E-4)));
    /// assert_eq!(Value::parse(b"", ColumnType::Double), Ok(Value::Null));
    /// assert!(Value::parse(b"12x", ColumnType::BigInt).is_err());
    /// ```
    pub fn parse(bytes: &'a [u8], ty: ColumnType) -> Result<Self, ValueError> {
        if bytes.is_empty() && ty != ColumnType::Text {
            return Ok(Value::Null);
        }
        match ty {
            ColumnType::Text => Ok(Value::Text(bytes)),
            ColumnType::BigInt => parse_i64(bytes).map(Value::Int).ok_or(ValueError::BigInt),
            ColumnType::Double => parse_f64(bytes).map(Value::Float).ok_or(ValueError::Double),
            ColumnType::Bool => match bytes {
                b"1" => Ok(Value::Bool(true)),
                b"0" => Ok(Value::Bool(false)),
                _ if bytes.eq_ignore_ascii_case(b"true") => Ok(Value::Bool(true)),
                _ if bytes.eq_ignore_ascii_case(b"false") => Ok(Value::Bool(false)),
                _ => Err(ValueError::Bool),
            },
            ColumnType::Timestamp => Timestamp::parse(bytes)
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
    #[error("not a TIMESTAMP (YYYY-MM-DD[ HH:MM:SS] or ISO-8601)")]
    Timestamp,
    /// A typed value (from a binary format such as Parquet) outside the
    /// declared type's range: an unsigned integer above `i64::MAX`, a time
    /// outside [`Timestamp::MIN`]..=[`Timestamp::MAX`].
    #[error("out of range for the declared type")]
    OutOfRange,
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

/// A float in Rust's or Java's text forms.
fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    match text {
        "Infinity" | "+Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
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
