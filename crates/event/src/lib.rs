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
//! - [`Value`]: one typed field, borrowing text from the record's buffer.
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
    /// Reads a SQL type name: TIMESTAMP, BIGINT (or INT, INTEGER, LONG),
    /// DOUBLE (or FLOAT, REAL), TEXT (or VARCHAR, STRING), BOOLEAN (or BOOL).
    pub fn parse(name: &str) -> Result<Self> {
        match name.to_ascii_uppercase().as_str() {
            "TIMESTAMP" => Ok(Self::Timestamp),
            "BIGINT" | "INT" | "INTEGER" | "LONG" => Ok(Self::BigInt),
            "DOUBLE" | "FLOAT" | "REAL" => Ok(Self::Double),
            "TEXT" | "VARCHAR" | "STRING" => Ok(Self::Text),
            "BOOLEAN" | "BOOL" => Ok(Self::Bool),
            _ => Err(Error::ColumnType {
                name: name.to_owned(),
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ColumnType::parse("varchar"), Ok(ColumnType::Text));
        assert!(ColumnType::parse("json").is_err());
    }

    #[test]
    fn value_views() {
        assert_eq!(Value::Int(3).as_f64(), Some(3.0));
        assert_eq!(Value::Text(b"x").as_f64(), None);
        assert!(Value::Null.is_null());
    }
}
