//! Event time: UTC milliseconds since the Unix epoch, parsed from text
//! without allocation and truncated to buckets.
//!
//! Calendar arithmetic uses Howard Hinnant's `days_from_civil` and
//! `civil_from_days` ("chrono-Compatible Low-Level Date Algorithms"), exact
//! for the proleptic Gregorian calendar over the whole `i64` range we accept
//! (years 0001..=9999).
//!
//! Every instant is within [`Timestamp::MIN`]..=[`Timestamp::MAX`], years
//! [`Timestamp::YEAR_MIN`]..=[`Timestamp::YEAR_MAX`], and so is every bucket
//! start [`Timestamp::truncate`] gives for one: 0001-01-01 is both a
//! January 1 and a Monday, so no week, month, quarter or year bucket of an
//! accepted instant starts before it. (0000-01-01 was a Saturday: its week
//! starts on -0001-12-27, a day no four-digit year spells and no file may
//! be named after.) Text that spells a time outside the range, whether by
//! its year or by an offset or leap second that carries it over an edge,
//! is rejected when it is parsed.

use crate::{Error, Result};

const MS_PER_SECOND: i64 = 1_000;
const MS_PER_MINUTE: i64 = 60 * MS_PER_SECOND;
const MS_PER_HOUR: i64 = 60 * MS_PER_MINUTE;
const MS_PER_DAY: i64 = 24 * MS_PER_HOUR;

/// A point in time: milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

/// A summary's or expression's time buckets: the calendar units
/// `date_trunc` knows, or a fixed width (`time_bucket`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    /// 1000 milliseconds.
    Second,
    /// 60 seconds.
    Minute,
    /// 60 minutes.
    Hour,
    /// A UTC calendar day.
    Day,
    /// An ISO week, starting on Monday.
    Week,
    /// A calendar month.
    Month,
    /// Three calendar months, from January, April, July or October.
    Quarter,
    /// A calendar year.
    Year,
    /// `time_bucket('5 minutes', ts)`: buckets of one fixed width, aligned
    /// to the Unix epoch (and so to every UTC midnight, since the width
    /// divides a day: see [`BucketWidth`]).
    Fixed(BucketWidth),
}

/// The narrowest fixed bucket, in milliseconds: one second. Narrower
/// buckets would make a group per event at any rate worth summarizing,
/// and every width is then a whole number of seconds, as TimescaleDB's
/// and PostgreSQL's interval spellings of widths are in practice.
pub const BUCKET_WIDTH_MS_MIN: i64 = MS_PER_SECOND;

/// The widest fixed bucket, in milliseconds: one UTC day. A wider width
/// would not divide a day (see [`BucketWidth`]); `date_trunc('week', ..)`
/// and the calendar units cover longer buckets.
pub const BUCKET_WIDTH_MS_MAX: i64 = MS_PER_DAY;

/// The width of `time_bucket` buckets, in milliseconds: a whole number of
/// seconds, at least [`BUCKET_WIDTH_MS_MIN`], that divides a UTC day
/// evenly (1, 2, 3, 4, 5, 6, 10, 15, 20, 30 seconds or minutes; 1, 2, 3,
/// 4, 6, 8, 12 or 24 hours; 90 seconds, 45 minutes and so on).
///
/// Buckets start at whole multiples of the width since 1970-01-01T00:00Z,
/// as TimescaleDB aligns widths below a week. Because the width divides a
/// day, every UTC midnight is a bucket start too: a bucket lies within one
/// UTC day (per-day files and day closing need nothing new), and the
/// alignment is the same whatever midnight one counts from (TimescaleDB's
/// default origin, 2000-01-03, gives the same buckets). A width that does
/// not divide a day (7 minutes) would shift against midnight from day to
/// day, so it is refused.
///
/// ```
/// use cardinal_event::{BucketWidth, TimeUnit, Timestamp};
/// let five = BucketWidth::parse("5 minutes").unwrap();
/// assert_eq!(five.ms(), 300_000);
/// let t = Timestamp::parse(b"2026-11-04T13:47:59Z").unwrap();
/// assert_eq!(t.truncate(TimeUnit::Fixed(five)).to_string(), "2026-11-04T13:45:00Z");
/// assert!(BucketWidth::parse("7 minutes").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketWidth(i64);

impl BucketWidth {
    /// The width of `ms` milliseconds, if it is a valid width (see the
    /// type's doc); the error says which rule it breaks.
    pub fn from_ms(ms: i64) -> Result<Self> {
        let fail = |reason| {
            Err(Error::BucketWidth {
                text: format!("{ms} ms"),
                reason,
            })
        };
        if ms < BUCKET_WIDTH_MS_MIN {
            return fail(WIDTH_TOO_SMALL);
        }
        if ms > BUCKET_WIDTH_MS_MAX {
            return fail(WIDTH_TOO_LARGE);
        }
        if ms % MS_PER_SECOND != 0 {
            return fail(WIDTH_NOT_SECONDS);
        }
        if MS_PER_DAY % ms != 0 {
            return fail(WIDTH_NOT_A_DIVISOR);
        }
        Ok(Self(ms))
    }

    /// Reads an interval as TimescaleDB's `time_bucket` and PostgreSQL's
    /// interval input spell a width: a positive whole number and a unit,
    /// with or without a space between (`'5 minutes'`, `'30s'`, `'1 h'`).
    /// Units, any case: `second(s)`, `sec(s)`, `s`; `minute(s)`, `min(s)`,
    /// `m`; `hour(s)`, `hr(s)`, `h`; `day(s)`, `d`. The width must then be
    /// valid (see the type's doc).
    pub fn parse(text: &str) -> Result<Self> {
        let fail = |reason| {
            Err(Error::BucketWidth {
                text: text.chars().take(64).collect(),
                reason,
            })
        };
        let trimmed = text.trim();
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return fail("it must start with a positive whole number, as in '5 minutes'");
        }
        let (number, unit) = trimmed.split_at(digits);
        let unit = unit.trim_start().to_ascii_lowercase();
        let unit_ms = match unit.as_str() {
            "second" | "seconds" | "sec" | "secs" | "s" => MS_PER_SECOND,
            "minute" | "minutes" | "min" | "mins" | "m" => MS_PER_MINUTE,
            "hour" | "hours" | "hr" | "hrs" | "h" => MS_PER_HOUR,
            "day" | "days" | "d" => MS_PER_DAY,
            "week" | "weeks" | "w" | "month" | "months" | "mon" | "mons" | "quarter"
            | "quarters" | "year" | "years" | "y" => {
                return fail(
                    "widths of a week or more do not divide a day; use date_trunc('week' | 'month' | 'quarter' | 'year', ts)",
                );
            }
            "" => return fail("the unit is missing: second, minute, hour or day"),
            _ => {
                return fail(
                    "unknown unit: second(s), sec(s), s, minute(s), min(s), m, hour(s), hr(s), h, day(s) or d",
                );
            }
        };
        // More digits than any valid width has would overflow the count
        // of milliseconds before it is checked.
        let Some(ms) = number
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_ms))
        else {
            return fail(WIDTH_TOO_LARGE);
        };
        if ms == 0 {
            return fail(WIDTH_TOO_SMALL);
        }
        Self::from_ms(ms).map_err(|e| match e {
            Error::BucketWidth { reason, .. } => Error::BucketWidth {
                text: text.chars().take(64).collect(),
                reason,
            },
            other => other,
        })
    }

    /// The width in milliseconds.
    pub const fn ms(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for TimeUnit {
    /// The unit as [`TimeUnit::parse`] reads it (`day`, `quarter`), or a
    /// fixed width as [`BucketWidth`] prints it (`5 minutes`). Snapshots
    /// record this text in a summary's layout: it must not change.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            TimeUnit::Second => "second",
            TimeUnit::Minute => "minute",
            TimeUnit::Hour => "hour",
            TimeUnit::Day => "day",
            TimeUnit::Week => "week",
            TimeUnit::Month => "month",
            TimeUnit::Quarter => "quarter",
            TimeUnit::Year => "year",
            TimeUnit::Fixed(width) => return width.fmt(f),
        };
        f.write_str(name)
    }
}

impl std::fmt::Display for BucketWidth {
    /// The width in the largest unit that divides it: `5 minutes`,
    /// `90 seconds`, `1 day`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (count, unit) = [
            (MS_PER_DAY, "day"),
            (MS_PER_HOUR, "hour"),
            (MS_PER_MINUTE, "minute"),
        ]
        .into_iter()
        .find(|(unit, _)| self.0 % unit == 0)
        .map_or((self.0 / MS_PER_SECOND, "second"), |(ms, unit)| {
            (self.0 / ms, unit)
        });
        write!(f, "{count} {unit}{}", if count == 1 { "" } else { "s" })
    }
}

const WIDTH_TOO_SMALL: &str = "a bucket is at least 1 second wide";
const WIDTH_TOO_LARGE: &str = "a bucket is at most 1 day wide; use date_trunc('week' | 'month' | 'quarter' | 'year', ts) for longer ones";
const WIDTH_NOT_SECONDS: &str = "a width is a whole number of seconds";
const WIDTH_NOT_A_DIVISOR: &str = "a width must divide a day evenly (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 minutes; 1, 2, 3, 4, 6, 8, 12 hours, ...) so that buckets align with every UTC midnight";

const _: () = assert!(MS_PER_DAY % BUCKET_WIDTH_MS_MIN == 0);
const _: () = assert!(BUCKET_WIDTH_MS_MAX % BUCKET_WIDTH_MS_MIN == 0);

impl TimeUnit {
    /// The fewest milliseconds a bucket of this unit spans (a February, a
    /// first quarter or a year of 365 days for the calendar units): an
    /// instant less than that past a bucket's start is in that bucket
    /// ([`BucketMemo`]).
    pub const fn shortest_ms(self) -> i64 {
        match self {
            Self::Second => MS_PER_SECOND,
            Self::Minute => MS_PER_MINUTE,
            Self::Hour => MS_PER_HOUR,
            Self::Day => MS_PER_DAY,
            Self::Week => 7 * MS_PER_DAY,
            Self::Month => 28 * MS_PER_DAY,
            Self::Quarter => 90 * MS_PER_DAY,
            Self::Year => 365 * MS_PER_DAY,
            Self::Fixed(width) => width.0,
        }
    }

    /// Reads `second`, `minute`, `hour`, `day`, `week`, `month`,
    /// `quarter` or `year` (any case), as PostgreSQL's `date_trunc` names
    /// them.
    pub fn parse(unit: &str) -> Result<Self> {
        match unit.to_ascii_lowercase().as_str() {
            "second" => Ok(Self::Second),
            "minute" => Ok(Self::Minute),
            "hour" => Ok(Self::Hour),
            "day" => Ok(Self::Day),
            "week" => Ok(Self::Week),
            "month" => Ok(Self::Month),
            "quarter" => Ok(Self::Quarter),
            "year" => Ok(Self::Year),
            _ => Err(Error::TimeUnit {
                unit: unit.to_owned(),
            }),
        }
    }
}

impl Timestamp {
    /// The first year a time may be in. Year 0000 is left out: its first
    /// two days' week starts in year -1, which would print as `-0001`.
    pub const YEAR_MIN: i64 = 1;

    /// The last year a time may be in: four digits, as text spells it.
    pub const YEAR_MAX: i64 = 9999;

    /// The earliest time accepted: 0001-01-01T00:00:00Z, a Monday. Typed
    /// inputs (Parquet) are held to the same range, so every accepted time
    /// and every bucket start of one prints as `YYYY-MM-DD...` with a
    /// four-digit year (see the module doc).
    pub const MIN: Timestamp = Timestamp(-62_135_596_800_000);

    /// The latest time accepted: 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// Whether this instant is within [`Timestamp::MIN`]..=[`Timestamp::MAX`].
    pub const fn is_in_range(self) -> bool {
        Self::MIN.0 <= self.0 && self.0 <= Self::MAX.0
    }

    /// Parses `YYYY-MM-DD`, `YYYY-MM-DD HH:MM[:SS]` or ISO-8601
    /// `YYYY-MM-DDTHH:MM[:SS[.fff...]][Z|±HH|±HHMM|±HH:MM]`. A missing
    /// offset means UTC. Fractions beyond milliseconds are truncated. A
    /// time outside [`Timestamp::MIN`]..=[`Timestamp::MAX`] is an error,
    /// also when only its offset or a leap second takes it there
    /// (`0001-01-01T00:00+01:00`).
    ///
    /// ```
    /// use cardinal_event::Timestamp;
    /// let t = Timestamp::parse(b"2026-11-01T00:00:07Z").unwrap();
    /// assert_eq!(t.0, 1_793_491_207_000);
    /// assert_eq!(Timestamp::parse(b"2026-11-01 01:00:07+01:00").unwrap(), t);
    /// ```
    #[inline]
    pub fn parse(text: &[u8]) -> Result<Self> {
        match parse_fixed(text) {
            Some(t) => Ok(t),
            None => Self::parse_without_fast_path(text),
        }
    }

    /// [`parse`](Self::parse) without its fast path for the fixed layouts:
    /// the reference the fast path is tested (and fuzzed) against.
    pub fn parse_without_fast_path(text: &[u8]) -> Result<Self> {
        let fail = |reason| Error::Timestamp {
            text: String::from_utf8_lossy(&text[..text.len().min(64)]).into_owned(),
            reason,
        };
        if let Some(epoch) = Self::parse_epoch(text) {
            return epoch.ok_or_else(|| fail(OUT_OF_RANGE));
        }
        if text.len() < 10 {
            return Err(fail("shorter than YYYY-MM-DD"));
        }
        let year = digits(&text[0..4]).ok_or_else(|| fail("year is not 4 digits"))?;
        let month = digits(&text[5..7]).ok_or_else(|| fail("month is not 2 digits"))?;
        let day = digits(&text[8..10]).ok_or_else(|| fail("day is not 2 digits"))?;
        if text[4] != b'-' || text[7] != b'-' {
            return Err(fail("date separators must be '-'"));
        }
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return Err(fail("no such date"));
        }
        if year < Self::YEAR_MIN {
            return Err(fail(OUT_OF_RANGE));
        }
        let mut ms = days_from_civil(year, month, day) * MS_PER_DAY;
        let rest = &text[10..];
        if rest.is_empty() {
            return Ok(Self(ms));
        }
        if rest.len() < 6 || !(rest[0] == b'T' || rest[0] == b' ') {
            return Err(fail(
                "time must follow the date as THH:MM[:SS] or ' HH:MM[:SS]'",
            ));
        }
        let hour = digits(&rest[1..3]).ok_or_else(|| fail("hour is not 2 digits"))?;
        let minute = digits(&rest[4..6]).ok_or_else(|| fail("minute is not 2 digits"))?;
        if rest[3] != b':' {
            return Err(fail("time separators must be ':'"));
        }
        // Seconds are optional, as in ISO 8601 and PostgreSQL; a fraction
        // belongs to the seconds only (ISO reads 12:00.5 as half a minute).
        let (second, mut rest) = match &rest[6..] {
            [b':', s1, s2, tail @ ..] => (
                digits(&[*s1, *s2]).ok_or_else(|| fail("second is not 2 digits"))?,
                tail,
            ),
            [b':' | b'.', ..] => return Err(fail("second is not 2 digits")),
            tail => (0, tail),
        };
        if hour > 23 || minute > 59 || second > 60 {
            return Err(fail("no such time of day"));
        }
        ms += hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * MS_PER_SECOND;
        if let [b'.', tail @ ..] = rest {
            let count = tail.iter().take_while(|b| b.is_ascii_digit()).count();
            if count == 0 {
                return Err(fail("a '.' must be followed by digits"));
            }
            let mut fraction_ms = 0;
            for (i, &d) in tail[..count].iter().take(3).enumerate() {
                fraction_ms += i64::from(d - b'0') * [100, 10, 1][i];
            }
            ms += fraction_ms;
            rest = &tail[count..];
        }
        // The offset: Z, or ±HH, ±HHMM or ±HH:MM (ISO 8601's three forms).
        let (sign, h1, h2, m1, m2) = match *rest {
            [] | [b'Z' | b'z'] => {
                return Self(ms).in_range().ok_or_else(|| fail(OUT_OF_RANGE));
            }
            [sign @ (b'+' | b'-'), h1, h2] => (sign, h1, h2, b'0', b'0'),
            [sign @ (b'+' | b'-'), h1, h2, m1, m2]
            | [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => (sign, h1, h2, m1, m2),
            _ => return Err(fail("unexpected text after the time")),
        };
        let hours = digits(&[h1, h2]).ok_or_else(|| fail("offset hour"))?;
        let minutes = digits(&[m1, m2]).ok_or_else(|| fail("offset minute"))?;
        if hours > 23 || minutes > 59 {
            return Err(fail("offset out of range"));
        }
        let offset = hours * MS_PER_HOUR + minutes * MS_PER_MINUTE;
        Self(if sign == b'+' {
            ms - offset
        } else {
            ms + offset
        })
        .in_range()
        .ok_or_else(|| fail(OUT_OF_RANGE))
    }

    /// Reads a time since the Unix epoch, in seconds or milliseconds by its
    /// magnitude: an optional sign, digits, and an optional fraction (`.`
    /// and digits). A whole part below [`EPOCH_MS_MIN`] in magnitude is
    /// seconds (`1793491207`, `1793491207.25`), anything from it up is
    /// milliseconds (`1793491207000`). Digits past the millisecond are
    /// floored, as Parquet's finer units are.
    ///
    /// `None` when the text is not such a number (so that it is read as a
    /// date instead); `Some(None)` when it is one but outside
    /// [`Timestamp::MIN`]..=[`Timestamp::MAX`].
    ///
    /// The magnitude rule misreads two ranges, both far from event data:
    /// milliseconds between 1966-10-31T14:13:20Z and 1973-03-03T09:46:40Z
    /// (below 10^11 ms in magnitude) are read as seconds, and seconds from
    /// 5138-11-16T09:46:40Z on as milliseconds.
    ///
    /// ```
    /// use cardinal_event::Timestamp;
    /// let t = Timestamp::parse(b"2026-11-01T00:00:07Z").unwrap();
    /// assert_eq!(Timestamp::parse_epoch(b"1793491207"), Some(Some(t)));
    /// assert_eq!(Timestamp::parse_epoch(b"1793491207000"), Some(Some(t)));
    /// assert_eq!(Timestamp::parse_epoch(b"1793491207.5").map(|t| t.unwrap().0), Some(t.0 + 500));
    /// assert_eq!(Timestamp::parse_epoch(b"2026-11-01"), None);
    /// ```
    #[inline]
    pub fn parse_epoch(text: &[u8]) -> Option<Option<Self>> {
        let (negative, rest) = match text {
            [b'-', rest @ ..] => (true, rest),
            [b'+', rest @ ..] => (false, rest),
            _ => (false, text),
        };
        let whole_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let (whole, fraction) = rest.split_at(whole_len);
        let fraction = match fraction {
            [] => &[][..],
            [b'.', digits @ ..] if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
                digits
            }
            _ => return None,
        };
        if whole.is_empty() {
            return None;
        }
        // Leading zeros aside, more than 15 whole digits is past any
        // accepted time in either unit (MAX is 15 digits of ms).
        let significant = whole.iter().skip_while(|&&b| b == b'0').count();
        if significant > 15 {
            return Some(None);
        }
        let magnitude = whole
            .iter()
            .fold(0i64, |acc, &b| acc * 10 + i64::from(b - b'0'));
        // In milliseconds, the fraction's first three digits count; any
        // digit after them floors (away from zero for a negative time).
        let (scale, ms_digits) = if magnitude < EPOCH_MS_MIN {
            (MS_PER_SECOND, 3)
        } else {
            (1, 0)
        };
        let mut ms = magnitude * scale;
        let mut place = scale;
        for &d in fraction.iter().take(ms_digits) {
            place /= 10;
            ms += i64::from(d - b'0') * place;
        }
        let below_ms = fraction.iter().skip(ms_digits).any(|&d| d != b'0');
        let ms = if negative {
            -ms - i64::from(below_ms)
        } else {
            ms
        };
        Some(Self(ms).in_range())
    }

    /// A whole number since the epoch read by [`Timestamp::parse_epoch`]'s
    /// magnitude rule: seconds below [`EPOCH_MS_MIN`] in magnitude, else
    /// milliseconds; `None` outside [`Timestamp::MIN`]..=[`Timestamp::MAX`].
    /// For inputs whose integers are typed (a Parquet integer column
    /// declared `TIMESTAMP`).
    ///
    /// ```
    /// use cardinal_event::Timestamp;
    /// assert_eq!(Timestamp::from_epoch(1_793_491_207), Timestamp::from_epoch(1_793_491_207_000));
    /// assert_eq!(Timestamp::from_epoch(i64::MAX), None);
    /// ```
    #[inline]
    pub const fn from_epoch(value: i64) -> Option<Self> {
        let ms = if value.unsigned_abs() < EPOCH_MS_MIN.unsigned_abs() {
            value * MS_PER_SECOND
        } else {
            value
        };
        let t = Self(ms);
        if t.is_in_range() { Some(t) } else { None }
    }

    /// `Some(self)` when [`Timestamp::is_in_range`].
    fn in_range(self) -> Option<Self> {
        self.is_in_range().then_some(self)
    }

    /// The start of the bucket of `unit` that holds this instant.
    #[inline]
    pub fn truncate(self, unit: TimeUnit) -> Self {
        let ms = self.0;
        match unit {
            TimeUnit::Second => Self(ms - ms.rem_euclid(MS_PER_SECOND)),
            TimeUnit::Minute => Self(ms - ms.rem_euclid(MS_PER_MINUTE)),
            TimeUnit::Hour => Self(ms - ms.rem_euclid(MS_PER_HOUR)),
            TimeUnit::Day => Self(ms - ms.rem_euclid(MS_PER_DAY)),
            TimeUnit::Week => {
                // 1970-01-01 was a Thursday; ISO weeks start on Monday,
                // three days later in the cycle.
                let days = ms.div_euclid(MS_PER_DAY);
                let monday = days - (days + 3).rem_euclid(7);
                Self(monday * MS_PER_DAY)
            }
            TimeUnit::Month => {
                let (year, month, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
                Self(days_from_civil(year, month, 1) * MS_PER_DAY)
            }
            TimeUnit::Quarter => {
                let (year, month, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
                let first = (month - 1) / 3 * 3 + 1;
                Self(days_from_civil(year, first, 1) * MS_PER_DAY)
            }
            TimeUnit::Year => {
                let (year, _, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
                Self(days_from_civil(year, 1, 1) * MS_PER_DAY)
            }
            TimeUnit::Fixed(width) => Self(ms - ms.rem_euclid(width.0)),
        }
    }

    /// The UTC calendar date, `(year, month, day)`.
    pub fn date(self) -> (i64, i64, i64) {
        civil_from_days(self.0.div_euclid(MS_PER_DAY))
    }
}

/// The smallest magnitude of a time since the epoch that
/// [`Timestamp::parse_epoch`] reads as milliseconds: 10^11. Below it a
/// number is seconds. 10^11 seconds is in the year 5138 and 10^11
/// milliseconds is 1973-03-03T09:46:40Z, so seconds of any time before
/// 5138 and milliseconds of any time since March 1973 are read right:
/// the rule Grafana's and most log shippers' epoch times fall under.
pub const EPOCH_MS_MIN: i64 = 100_000_000_000;

/// The reason a parsed time outside [`Timestamp::MIN`]..=[`Timestamp::MAX`]
/// is rejected.
const OUT_OF_RANGE: &str = "out of range: years 0001 to 9999 (UTC) only";

// Every bucket start of an accepted instant is accepted too: the first
// accepted instant starts a day (and so a second, minute and hour), and
// is a Monday (1970-01-01 was a Thursday, three days later in the week);
// `bounds_are_the_first_and_last_spellable_times` checks it is a January 1.
const _: () = assert!(Timestamp::MIN.0 % MS_PER_DAY == 0);
const _: () = assert!((Timestamp::MIN.0 / MS_PER_DAY + 3).rem_euclid(7) == 0);
const _: () = assert!((Timestamp::MAX.0 + 1) % MS_PER_DAY == 0);

/// [`Timestamp::truncate`] to one unit, remembering the last bucket: an
/// instant less than [`TimeUnit::shortest_ms`] past its start takes it
/// without the arithmetic, which is most instants of a stream in time
/// order (an out-of-line call of about 19 instructions a row for W1's
/// day buckets).
#[derive(Debug, Clone, Copy)]
pub struct BucketMemo {
    unit: TimeUnit,
    /// The last bucket's start.
    start: i64,
    /// `unit.shortest_ms()` once a bucket is remembered; 0 before, so
    /// that nothing matches.
    span: i64,
}

impl BucketMemo {
    /// Remembers nothing yet.
    pub fn new(unit: TimeUnit) -> Self {
        Self {
            unit,
            start: 0,
            span: 0,
        }
    }

    /// `t.truncate(unit)`.
    #[inline]
    pub fn truncate(&mut self, t: Timestamp) -> Timestamp {
        if let Some(past) = t.0.checked_sub(self.start)
            && (0..self.span).contains(&past)
        {
            return Timestamp(self.start);
        }
        let start = t.truncate(self.unit);
        self.start = start.0;
        self.span = self.unit.shortest_ms();
        start
    }
}

impl std::fmt::Display for Timestamp {
    /// ISO-8601 in UTC: `2026-11-01T00:00:07Z`, with `.fff` when the
    /// milliseconds are not zero. A year outside 0000..=9999, which no
    /// accepted time has, is printed in ISO 8601's expanded form with a
    /// sign (`-0001-12-27T00:00:00Z`, `+10000-01-01T00:00:00Z`), never as
    /// a text that reads as something else.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (year, month, day) = self.date();
        let in_day = self.0.rem_euclid(MS_PER_DAY);
        let (hour, minute) = (in_day / MS_PER_HOUR, in_day % MS_PER_HOUR / MS_PER_MINUTE);
        let (second, ms) = (
            in_day % MS_PER_MINUTE / MS_PER_SECOND,
            in_day % MS_PER_SECOND,
        );
        if (0..=9999).contains(&year) {
            write!(f, "{year:04}")?;
        } else {
            write!(f, "{year:+05}")?;
        }
        write!(f, "-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}")?;
        if ms != 0 {
            write!(f, ".{ms:03}")?;
        }
        write!(f, "Z")
    }
}

/// Digit lanes of a little-endian word: bytes `i` with bit `i` of `lanes`.
const fn lane_mask(lanes: u8) -> u64 {
    let mut mask = 0u64;
    let mut i = 0;
    while i < 8 {
        if lanes & (1 << i) != 0 {
            mask |= 0xff << (8 * i);
        }
        i += 1;
    }
    mask
}

const ZEROS: u64 = 0x3030_3030_3030_3030;
/// `YYYY-MM-` (bytes 0..8): digits in lanes 0-3, 5, 6.
const DATE_HEAD_DIGITS: u64 = lane_mask(0b0110_1111);
const DATE_HEAD: u64 = u64::from_le_bytes(*b"0000-00-");
/// `YY-MM-DD` (bytes 2..10).
const DATE_TAIL_DIGITS: u64 = lane_mask(0b1101_1011);
const DATE_TAIL: u64 = u64::from_le_bytes(*b"00-00-00");
/// `HH:MM:SS` (bytes 11..19).
const TIME_DIGITS: u64 = lane_mask(0b1101_1011);
const TIME: u64 = u64::from_le_bytes(*b"00:00:00");

/// Whether `word` has an ASCII digit in every lane of `digits` and the
/// bytes of `template` elsewhere (SWAR: a digit is a byte 0x30..=0x39,
/// i.e. high nibble 3 before and after adding 6). No carry crosses a lane
/// when the answer is yes: digit lanes stay below 0x40 and the separators
/// (`-`, `:`) below 0xfa; when it is no, the separator or high-nibble test
/// fails on its own.
#[inline(always)]
fn matches_layout(word: u64, digits: u64, template: u64) -> bool {
    const HIGH_NIBBLES: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const SIXES: u64 = 0x0606_0606_0606_0606;
    let high = HIGH_NIBBLES & digits;
    (word & !digits) == (template & !digits)
        && (word & high) == (ZEROS & high)
        && (word.wrapping_add(SIXES) & high) == (ZEROS & high)
}

/// Digit `i` of a word already checked by [`matches_layout`].
#[inline(always)]
fn lane(word: u64, i: u32) -> i64 {
    ((word >> (8 * i)) & 0x0f) as i64
}

/// Cumulative days before each month (index 1..=12) in a common year.
const DAYS_BEFORE_MONTH: [i64; 13] = [0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
/// Days in each month (index 1..=12) of a common year.
const DAYS_IN_MONTH: [i64; 13] = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// [`days_from_civil`] for years 0..=9999 only, with no signed division:
/// the years before `year` (counted from year 0, shifted by 400 so that
/// year 0's leap day needs no negative numbers) plus the days before the
/// month, then the epoch's day number subtracted.
#[inline(always)]
// Indexes are checked before use: months 1..=12, exponents 0..=22.
#[allow(clippy::cast_possible_truncation)]
fn days_from_civil_4digit(year: i64, month: i64, day: i64) -> i64 {
    debug_assert!((0..=9999).contains(&year));
    debug_assert!((1..=12).contains(&month));
    // Day 0 is 0000-01-01 shifted by 400 years (146,097 days): whole
    // years before `year` from there, and leap days among them.
    let y = (year + 399) as u64; // the last full year, plus 400
    let leap_days = y / 4 - y / 100 + y / 400;
    let leap_this = month > 2 && is_leap(year);
    let days = 365 * (year + 400)
        + leap_days as i64
        + 1
        + DAYS_BEFORE_MONTH[month as usize]
        + i64::from(leap_this)
        + day
        - 1;
    // 1970-01-01 in the same count.
    const EPOCH: i64 = 365 * 2370 + (2369 / 4 - 2369 / 100 + 2369 / 400) + 1;
    days - EPOCH
}

/// The milliseconds of the date `YYYY-MM-DD` held in `head` (bytes 0..8)
/// and `tail` (bytes 2..10), or `None` when it is not a valid date in
/// that layout.
#[inline(always)]
// Indexes are checked before use: months 1..=12.
#[allow(clippy::cast_possible_truncation)]
fn parse_date(head: u64, tail: u64) -> Option<i64> {
    if !matches_layout(head, DATE_HEAD_DIGITS, DATE_HEAD)
        || !matches_layout(tail, DATE_TAIL_DIGITS, DATE_TAIL)
    {
        return None;
    }
    let year = lane(head, 0) * 1000 + lane(head, 1) * 100 + lane(head, 2) * 10 + lane(head, 3);
    let month = lane(head, 5) * 10 + lane(head, 6);
    let day = lane(tail, 6) * 10 + lane(tail, 7);
    if !(1..=12).contains(&month) || day < 1 || year < Timestamp::YEAR_MIN {
        return None;
    }
    if day > DAYS_IN_MONTH[month as usize] && !(month == 2 && day == 29 && is_leap(year)) {
        return None;
    }
    Some(days_from_civil_4digit(year, month, day) * MS_PER_DAY)
}

/// The fast path of [`Timestamp::parse`]: `YYYY-MM-DD`, and
/// `YYYY-MM-DD[T ]HH:MM:SS` with an optional `.fff` or `.ffffff` and an
/// optional `Z`, checked 8 bytes at a time. `None` sends anything else
/// (and every error) to the general parser, so the two can only differ
/// by this path accepting text the general one refuses or reading it
/// differently, which `tests/time.rs` and the `value_parse` fuzz target
/// check.
#[inline]
// Indexes are checked before use: months 1..=12, exponents 0..=22.
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn parse_fixed(text: &[u8]) -> Option<Timestamp> {
    parse_fixed_memo(text, &mut DateMemo::default())
}

/// The date (`YYYY-MM-DD`, the first 10 bytes) of the last timestamp a
/// caller parsed and its milliseconds since the epoch. An event stream's
/// timestamps share their date for hours on end, so a parser that keeps
/// one of these across records checks and converts a date once per day
/// of data, not once per record: the two words that hold the date are
/// compared with the memo's, and only a different date is parsed.
///
/// ```text
///   head: bytes 0..8  `YYYY-MM-`     tail: bytes 2..10  `YY-MM-DD`
/// ```
///
/// Together they cover the date exactly, and the date part of the fast
/// path of [`Timestamp::parse`] reads nothing else, so equal words give
/// an equal date (or reject). Only valid dates are kept; a fresh memo holds
/// 1970-01-01, so it never matches text it has not checked.
///
/// The time of day is kept the same way: bytes 11..19 (`HH:MM:SS`) of the
/// last timestamp of the memo's date that had a valid one, and its
/// milliseconds. A stream of a few events a second repeats its second
/// from record to record (85% of W1's do), and the word compared
/// is all the time part reads before its fraction and zone, which are
/// read each time. A new date clears it (no valid time is a zero word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateMemo {
    head: u64,
    tail: u64,
    date_ms: i64,
    time: u64,
    time_ms: i64,
}

impl Default for DateMemo {
    fn default() -> Self {
        const EPOCH: &[u8; 10] = b"1970-01-01";
        Self {
            head: u64::from_le_bytes(*EPOCH.first_chunk::<8>().expect("10 bytes")),
            tail: u64::from_le_bytes(*EPOCH.last_chunk::<8>().expect("10 bytes")),
            date_ms: 0,
            time: 0,
            time_ms: 0,
        }
    }
}

/// [`parse_fixed`] with the date of the previous call kept in `memo`.
#[inline(always)]
// Indexes are checked before use: months 1..=12.
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn parse_fixed_memo(text: &[u8], memo: &mut DateMemo) -> Option<Timestamp> {
    let len = text.len();
    if len < 10 {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(text[at..at + 8].try_into().expect("8 bytes"));
    let head = word(0);
    let tail = word(2);
    let date_ms = if head == memo.head && tail == memo.tail {
        memo.date_ms
    } else {
        let date_ms = parse_date(head, tail)?;
        *memo = DateMemo {
            head,
            tail,
            date_ms,
            time: 0,
            time_ms: 0,
        };
        date_ms
    };
    if len == 10 {
        return Some(Timestamp(date_ms));
    }
    if len < 19 || !(text[10] == b'T' || text[10] == b' ') {
        return None;
    }
    let time = word(11);
    let mut ms = if time == memo.time {
        memo.time_ms
    } else {
        if !matches_layout(time, TIME_DIGITS, TIME) {
            return None;
        }
        let hour = lane(time, 0) * 10 + lane(time, 1);
        let minute = lane(time, 3) * 10 + lane(time, 4);
        let second = lane(time, 6) * 10 + lane(time, 7);
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let ms = date_ms + hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * MS_PER_SECOND;
        // A leap second at the very end (9999-12-31T23:59:60) is past
        // MAX with any fraction; the general path says why.
        if ms > Timestamp::MAX.0 - 999 {
            return None;
        }
        memo.time = time;
        memo.time_ms = ms;
        ms
    };
    let mut rest = &text[19..];
    if let [b'.', tail @ ..] = rest {
        let digits = match tail {
            [a, b, c, d, e, f, more @ ..] if !more.first().is_some_and(u8::is_ascii_digit) => {
                [a, b, c, d, e, f]
                    .iter()
                    .all(|d| d.is_ascii_digit())
                    .then_some(6)?
            }
            [a, b, c, more @ ..] if !more.first().is_some_and(u8::is_ascii_digit) => {
                [a, b, c].iter().all(|d| d.is_ascii_digit()).then_some(3)?
            }
            _ => return None,
        };
        ms += i64::from(tail[0] - b'0') * 100
            + i64::from(tail[1] - b'0') * 10
            + i64::from(tail[2] - b'0');
        rest = &tail[digits..];
    }
    match rest {
        [] | [b'Z'] => Some(Timestamp(ms)),
        _ => None,
    }
}

fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_index = (month + 9) % 12; // March = 0
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day number since 1970-01-01 (Hinnant).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Timestamp {
        Timestamp::parse(text.as_bytes()).expect(text)
    }

    #[test]
    fn bounds_are_the_first_and_last_spellable_times() {
        assert_eq!(t("0001-01-01T00:00:00Z"), Timestamp::MIN);
        assert_eq!(t("9999-12-31T23:59:59.999Z"), Timestamp::MAX);
        assert_eq!(
            days_from_civil(Timestamp::YEAR_MIN, 1, 1) * MS_PER_DAY,
            Timestamp::MIN.0
        );
        assert_eq!(
            days_from_civil(Timestamp::YEAR_MAX + 1, 1, 1) * MS_PER_DAY - 1,
            Timestamp::MAX.0
        );
        assert_eq!(Timestamp::MIN.date(), (Timestamp::YEAR_MIN, 1, 1));
        assert_eq!(Timestamp::MAX.date(), (Timestamp::YEAR_MAX, 12, 31));
        for unit in [TimeUnit::Week, TimeUnit::Month, TimeUnit::Year] {
            assert_eq!(Timestamp::MIN.truncate(unit), Timestamp::MIN, "{unit:?}");
        }
    }

    /// Years outside 0001..=9999 are rejected however the text reaches
    /// them: year 0000 (whose first week starts in year -1, once printed
    /// as `-001-12-27`), or an offset or leap second across either edge.
    #[test]
    fn rejects_times_outside_the_years() {
        for bad in [
            "0000-01-01",
            "0000-01-01T00:00:00Z",
            "0000-12-31T23:59:59.999Z",
            "0000-06-15 12:00:00",
            "0001-01-01T00:00:00+00:01",
            "0001-01-01T00:59+01",
            "9999-12-31T23:59:60Z",
            "9999-12-31T23:59:60.5",
            "9999-12-31T23:30:00-01:00",
            "9999-12-31T23:00-0100",
        ] {
            let error = Timestamp::parse(bad.as_bytes()).expect_err(bad);
            assert!(error.to_string().contains("out of range"), "{bad}: {error}");
            assert_eq!(parse_fixed(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(t("0001-01-01T01:00+01:00"), Timestamp::MIN);
        assert_eq!(t("9999-12-31T22:59:59.999-01:00"), Timestamp::MAX);
        assert_eq!(t("0001-01-01").0, Timestamp::MIN.0);
    }

    #[test]
    fn display_marks_years_no_accepted_time_has() {
        let day = |days: i64| Timestamp(days * MS_PER_DAY).to_string();
        let min_days = Timestamp::MIN.0 / MS_PER_DAY;
        assert_eq!(day(min_days - 366 - 5), "-0001-12-27T00:00:00Z");
        assert_eq!(day(min_days - 366), "0000-01-01T00:00:00Z");
        assert_eq!(
            Timestamp(Timestamp::MAX.0 + 1).to_string(),
            "+10000-01-01T00:00:00Z"
        );
    }

    #[test]
    fn forms_agree() {
        let base = t("2026-11-01T00:00:07Z");
        assert_eq!(t("2026-11-01 00:00:07"), base);
        assert_eq!(t("2026-11-01T00:00:07"), base);
        assert_eq!(t("2026-10-31T19:00:07-05:00"), base);
        assert_eq!(t("2026-11-01T00:00:07.250Z").0, base.0 + 250);
        assert_eq!(t("2026-11-01T00:00:07.2509Z").0, base.0 + 250);
        assert_eq!(t("2026-11-01").0, base.0 - 7_000);
        assert_eq!(t("1970-01-01").0, 0);
        assert_eq!(t("1969-12-31T23:59:59Z").0, -1_000);
        // Seconds are optional; offsets take ISO 8601's three forms (and a
        // lowercase z), as PostgreSQL reads them.
        assert_eq!(t("2026-11-01T00:00Z").0, base.0 - 7_000);
        assert_eq!(t("2026-11-01 00:00").0, base.0 - 7_000);
        assert_eq!(t("2026-11-01T01:00+01").0, base.0 - 7_000);
        assert_eq!(t("2026-11-01T01:30:07+0130"), base);
        assert_eq!(t("2026-10-31T19:00:07.000-0500"), base);
        assert_eq!(t("2026-11-01T00:00:07z"), base);
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "2026-11",
            "2026/11/01",
            "2026-13-01",
            "2026-02-29",
            "2026-11-01T25:00:00",
            "2026-11-01T00:00:00.Z",
            "2026-11-01T00:00:00+01:0",
            "2026-11-01T00:00:00+1",
            "2026-11-01T00:00:00+01:00:00",
            "2026-11-01T00:00:00+24:00",
            "2026-11-01T00:00:00ZZ",
            "2026-11-01T00:00:0",
            "2026-11-01T00:0",
            "2026-11-01T00",
            "2026-11-01T00:00.5",
            "20x6-11-01",
        ] {
            assert!(Timestamp::parse(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(Timestamp::parse(b"2024-02-29").is_ok());
    }

    #[test]
    fn truncation() {
        let x = t("2026-11-04T13:45:59.999Z"); // a Wednesday
        assert_eq!(x.truncate(TimeUnit::Minute), t("2026-11-04T13:45:00Z"));
        assert_eq!(x.truncate(TimeUnit::Hour), t("2026-11-04T13:00:00Z"));
        assert_eq!(x.truncate(TimeUnit::Day), t("2026-11-04"));
        assert_eq!(x.truncate(TimeUnit::Week), t("2026-11-02"));
        assert_eq!(x.truncate(TimeUnit::Month), t("2026-11-01"));
        assert_eq!(x.truncate(TimeUnit::Quarter), t("2026-10-01"));
        assert_eq!(x.truncate(TimeUnit::Year), t("2026-01-01"));
        assert_eq!(
            t("2026-03-31T23:59:59.999Z").truncate(TimeUnit::Quarter),
            t("2026-01-01")
        );
        assert_eq!(
            t("1969-12-31T23:59:59.5Z").truncate(TimeUnit::Second),
            t("1969-12-31T23:59:59Z")
        );
        assert_eq!(t("1969-05-01").truncate(TimeUnit::Year), t("1969-01-01"));
        assert_eq!(
            t("1969-12-31T12:00:00Z").truncate(TimeUnit::Day),
            t("1969-12-31")
        );
        assert_eq!(t("1970-01-01").truncate(TimeUnit::Week), t("1969-12-29"));
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "2026-11-01T00:00:07Z",
            "1969-07-20T20:17:40.123Z",
            "2000-02-29T23:59:59Z",
        ] {
            assert_eq!(t(text).to_string(), text);
        }
    }

    #[test]
    fn civil_round_trip_over_four_centuries() {
        for days in -146_097 * 2..146_097 * 2 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn fixed_layouts_take_the_fast_path() {
        for text in [
            "2026-11-01",
            "2026-11-01T00:00:07Z",
            "2026-11-01 00:00:07",
            "2026-11-01T00:00:07.250Z",
            "2026-11-01 00:00:07.250123",
            "2024-02-29T23:59:60Z",
        ] {
            let fast = parse_fixed(text.as_bytes());
            assert!(fast.is_some(), "{text}");
            assert_eq!(
                fast.map(Ok),
                Some(Timestamp::parse_without_fast_path(text.as_bytes()))
            );
        }
        for text in [
            "2026-11-01T00:00:07+01:00",
            "2026-11-01T00:00:07.2Z",
            "2026-02-29",
        ] {
            assert_eq!(parse_fixed(text.as_bytes()), None, "{text}");
        }
    }

    #[test]
    fn four_digit_day_numbers_agree_with_hinnant() {
        for year in 0..=9999 {
            for month in 1..=12 {
                for day in [1, 28, days_in_month(year, month)] {
                    assert_eq!(
                        days_from_civil_4digit(year, month, day),
                        days_from_civil(year, month, day),
                        "{year}-{month}-{day}"
                    );
                }
            }
        }
    }

    #[test]
    fn units_parse() {
        assert_eq!(TimeUnit::parse("DAY"), Ok(TimeUnit::Day));
        assert!(TimeUnit::parse("fortnight").is_err());
    }

    #[test]
    fn units_print_as_they_parse() {
        use TimeUnit as U;
        let calendar = [
            U::Second,
            U::Minute,
            U::Hour,
            U::Day,
            U::Week,
            U::Month,
            U::Quarter,
            U::Year,
        ];
        for unit in calendar {
            assert_eq!(TimeUnit::parse(&unit.to_string()), Ok(unit));
        }
        let width = BucketWidth::parse("15 minutes").expect("a width");
        assert_eq!(U::Fixed(width).to_string(), "15 minutes");
    }
}
