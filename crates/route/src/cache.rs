//! Each field parsed once per record, however many summaries read it.
//!
//! Three summaries that bucket by day, filter on `kind` and count distinct
//! `user_id` would otherwise parse the timestamp three times and the user id
//! twice per record. [`ColumnCache::record`] wraps a record so that the
//! first read of a typed (non-text) column parses it and later reads in the
//! same record return the parsed value:
//!
//! ```text
//!   slots: | stamp u32 | value |   one per column, reused for every record
//!   a slot is valid when its stamp equals the cache's current stamp;
//!   starting a record bumps the stamp, which invalidates every slot at once
//! ```
//!
//! Text columns are not cached: their value is a slice of the record, which
//! `Record::field` hands out as cheaply as a cache would. Parse errors are
//! cached too, so a bad field is reported with the same reason by every
//! summary that reads it.

use std::cell::Cell;

use cardinal_event::{ColumnType, DateMemo, Record, Timestamp, Value, ValueError};

/// A parsed non-text value, or why the field is not its type.
#[derive(Debug, Clone, Copy)]
enum Scalar {
    Null,
    Int(i64),
    Float(f64),
    Bool(bool),
    Time(Timestamp),
    Error(ValueError),
}

impl Scalar {
    fn of(result: Result<Value<'_>, ValueError>) -> Option<Scalar> {
        Some(match result {
            Ok(Value::Null) => Scalar::Null,
            Ok(Value::Int(i)) => Scalar::Int(i),
            Ok(Value::Float(f)) => Scalar::Float(f),
            Ok(Value::Bool(b)) => Scalar::Bool(b),
            Ok(Value::Time(t)) => Scalar::Time(t),
            Ok(Value::Text(_)) => return None,
            Err(e) => Scalar::Error(e),
        })
    }

    fn value(self) -> Result<Value<'static>, ValueError> {
        match self {
            Scalar::Null => Ok(Value::Null),
            Scalar::Int(i) => Ok(Value::Int(i)),
            Scalar::Float(f) => Ok(Value::Float(f)),
            Scalar::Bool(b) => Ok(Value::Bool(b)),
            Scalar::Time(t) => Ok(Value::Time(t)),
            Scalar::Error(e) => Err(e),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    stamp: u32,
    value: Scalar,
}

const EMPTY: Slot = Slot {
    stamp: 0,
    value: Scalar::Null,
};

/// Parsed values of the current record's typed columns. One per worker,
/// reused for every record; allocation-free once it has seen the widest
/// record.
#[derive(Debug)]
pub struct ColumnCache {
    /// The current record's stamp; never 0 while a record is open, so that
    /// fresh slots (stamp 0) are never valid.
    stamp: u32,
    slots: Vec<Cell<Slot>>,
}

impl ColumnCache {
    /// A cache for records of `columns` columns (a stream's width);
    /// columns past it are read through, uncached.
    pub fn new(columns: usize) -> Self {
        Self {
            stamp: 0,
            slots: vec![Cell::new(EMPTY); columns],
        }
    }

    /// Starts a new record: every value cached for the previous one is
    /// forgotten. Reads through the returned view parse each typed column at
    /// most once.
    pub fn record<'a, R: Record + ?Sized>(&'a mut self, record: &'a R) -> Cached<'a, R> {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            // After 2^32 records: clear the stale stamps rather than let a
            // slot from 2^32 records ago look current.
            for slot in &self.slots {
                slot.set(EMPTY);
            }
            self.stamp = 1;
        }
        Cached {
            record,
            stamp: self.stamp,
            slots: &self.slots,
        }
    }
}

/// A record seen through a [`ColumnCache`]; see the module doc.
#[derive(Debug)]
pub struct Cached<'a, R: ?Sized> {
    record: &'a R,
    stamp: u32,
    slots: &'a [Cell<Slot>],
}

impl<R: Record + ?Sized> Record for Cached<'_, R> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        self.record.field(column)
    }

    fn value(&self, column: usize, ty: ColumnType) -> Result<Value<'_>, ValueError> {
        self.value_memo(column, ty, &mut DateMemo::default())
    }

    #[inline(always)]
    fn value_memo(
        &self,
        column: usize,
        ty: ColumnType,
        memo: &mut DateMemo,
    ) -> Result<Value<'_>, ValueError> {
        if ty == ColumnType::Text {
            return self.record.value(column, ty);
        }
        if let Some(slot) = self.slots.get(column) {
            let slot = slot.get();
            if slot.stamp == self.stamp {
                return slot.value.value();
            }
        }
        let result = self.record.value_memo(column, ty, memo);
        if let (Some(slot), Some(value)) = (self.slots.get(column), Scalar::of(result)) {
            slot.set(Slot {
                stamp: self.stamp,
                value,
            });
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell as Counter;

    /// A record that counts how often its fields are parsed.
    struct Counting<'a> {
        fields: &'a [&'a str],
        parses: Counter<usize>,
    }

    impl Record for Counting<'_> {
        fn field(&self, column: usize) -> Option<&[u8]> {
            self.fields.get(column).map(|f| f.as_bytes())
        }

        fn value(&self, column: usize, ty: ColumnType) -> Result<Value<'_>, ValueError> {
            self.parses.set(self.parses.get() + 1);
            match self.field(column) {
                None => Ok(Value::Null),
                Some(bytes) => Value::parse(bytes, ty),
            }
        }
    }

    #[test]
    fn typed_columns_parse_once_per_record() {
        let mut cache = ColumnCache::new(4);
        let first = Counting {
            fields: &["2026-11-04T13:45:59Z", "7", "x", "7y"],
            parses: Counter::new(0),
        };
        {
            let view = cache.record(&first);
            for _ in 0..3 {
                assert_eq!(
                    view.value(0, ColumnType::Timestamp),
                    Ok(Value::Time(
                        Timestamp::parse(b"2026-11-04T13:45:59Z").expect("valid")
                    ))
                );
                assert_eq!(view.value(1, ColumnType::BigInt), Ok(Value::Int(7)));
                assert_eq!(view.value(3, ColumnType::BigInt), Err(ValueError::BigInt));
                assert_eq!(view.value(2, ColumnType::Text), Ok(Value::Text(b"x")));
            }
            // Absent columns past the slots are read through, uncached.
            assert_eq!(view.value(9, ColumnType::BigInt), Ok(Value::Null));
        }
        // Three typed columns once each, text three times, the absent one once.
        assert_eq!(first.parses.get(), 3 + 3 + 1);

        // The next record never sees the previous record's values.
        let second = Counting {
            fields: &["", "8"],
            parses: Counter::new(0),
        };
        let view = cache.record(&second);
        assert_eq!(view.value(0, ColumnType::Timestamp), Ok(Value::Null));
        assert_eq!(view.value(1, ColumnType::BigInt), Ok(Value::Int(8)));
        assert_eq!(view.value(3, ColumnType::BigInt), Ok(Value::Null));
    }

    #[test]
    fn stamps_wrap_without_reviving_old_values() {
        let mut cache = ColumnCache::new(1);
        let old = Counting {
            fields: &["1"],
            parses: Counter::new(0),
        };
        {
            let view = cache.record(&old);
            assert_eq!(view.value(0, ColumnType::BigInt), Ok(Value::Int(1)));
        }
        // Jump to just before the wrap; the slot's stamp is 1.
        cache.stamp = u32::MAX;
        let new = Counting {
            fields: &["2"],
            parses: Counter::new(0),
        };
        let view = cache.record(&new);
        assert_eq!(view.stamp, 1);
        assert_eq!(view.value(0, ColumnType::BigInt), Ok(Value::Int(2)));
    }
}
