//! Writing rows by hand: integers, dates and a chunked output buffer.
//!
//! The generators build each row by appending bytes to one reused
//! [`Chunk`] buffer and hand the writer large slices (256 KiB), so the
//! caller needs no `BufWriter` and no row allocates or goes through
//! `core::fmt`. Dates use the proleptic Gregorian calendar and days since
//! 1970-01-01, converted with Howard Hinnant's `civil_from_days` /
//! `days_from_civil` algorithms ("chrono-Compatible Low-Level Date
//! Algorithms", 2013).

use std::io::Write;

use crate::{Error, Result};

/// Bytes a [`Chunk`] gathers before it writes them out: large enough that
/// the writer's per-call cost vanishes, small enough to stay in L2.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// Bytes one generated row may take at most; a chunk is flushed early
/// enough to always fit one more. The longest rows are uservisits (a
/// 100-letter URL and a 150-byte user agent, about 330 bytes).
pub const ROW_BYTES_MAX: usize = 1024;

const _: () = assert!(ROW_BYTES_MAX * 16 <= CHUNK_BYTES);

/// A reused output buffer in front of a writer.
#[derive(Debug)]
pub struct Chunk<W: Write> {
    out: W,
    /// Bytes of the rows not yet written.
    pub buf: Vec<u8>,
    bytes_written: u64,
}

impl<W: Write> Chunk<W> {
    /// An empty chunk in front of `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            buf: Vec::with_capacity(CHUNK_BYTES),
            bytes_written: 0,
        }
    }

    /// Call after each row: writes the buffer out once it is nearly full.
    #[inline]
    pub fn row_done(&mut self) -> Result<()> {
        debug_assert!(self.buf.capacity() >= CHUNK_BYTES);
        if self.buf.len() > CHUNK_BYTES - ROW_BYTES_MAX {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        self.out.write_all(&self.buf).map_err(Error::Io)?;
        self.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is left, flushes the writer and returns the bytes
    /// written in all.
    pub fn finish(mut self) -> Result<u64> {
        self.write_out()?;
        self.out.flush().map_err(Error::Io)?;
        Ok(self.bytes_written)
    }
}

/// "00" to "99", for writing integers two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends the decimal digits of `n`.
#[inline]
pub fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = usize::try_from(n % 100).expect("below 100") * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = usize::try_from(n).expect("below 100") * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + u8::try_from(n).expect("a digit");
    }
    buf.extend_from_slice(&digits[at..]);
}

/// Appends `n` (below 100) as two digits, zero-padded.
#[inline]
pub fn push_2_digits(buf: &mut Vec<u8>, n: u64) {
    debug_assert!(n < 100);
    let pair = usize::try_from(n).expect("below 100") * 2;
    buf.extend_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
}

/// Appends `micros / 10^6` with exactly six decimals (`12.000345`).
#[inline]
pub fn push_micros(buf: &mut Vec<u8>, micros: u64) {
    push_u64(buf, micros / 1_000_000);
    buf.push(b'.');
    let fraction = micros % 1_000_000;
    push_2_digits(buf, fraction / 10_000);
    push_2_digits(buf, fraction / 100 % 100);
    push_2_digits(buf, fraction % 100);
}

/// A calendar day, as days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date(pub i64);

/// Seconds in a day.
pub const DAY_SECS: u64 = 86_400;

impl Date {
    /// The day `year-month-day`.
    ///
    /// # Panics
    ///
    /// If the month or day is out of range for the calendar.
    pub fn new(year: i64, month: u32, day: u32) -> Self {
        assert!((1..=12).contains(&month), "month {month}");
        assert!(
            (1..=days_in_month(year, month)).contains(&day),
            "day {day} of {year}-{month}"
        );
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let year_of_era = y.rem_euclid(400);
        let month_from_march = i64::from((month + 9) % 12);
        let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
        let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
        Self(era * 146_097 + day_of_era - 719_468)
    }

    /// Parses `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = || Error::InvalidParameter {
            name: "start",
            reason: format!("{text:?} is not a date like 2026-11-01"),
        };
        let mut parts = text.split('-');
        let (Some(year), Some(month), Some(day), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        if year.len() != 4 || month.len() != 2 || day.len() != 2 {
            return Err(invalid());
        }
        let year: i64 = year.parse().map_err(|_| invalid())?;
        let month: u32 = month.parse().map_err(|_| invalid())?;
        let day: u32 = day.parse().map_err(|_| invalid())?;
        if !(1..=12).contains(&month) || !(1..=days_in_month(year, month)).contains(&day) {
            return Err(invalid());
        }
        Ok(Self::new(year, month, day))
    }

    /// Year, month (1-12) and day (1-31).
    pub fn civil(self) -> (i64, u32, u32) {
        let z = self.0 + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z.rem_euclid(146_097);
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_from_march = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
        let month = if month_from_march < 10 {
            month_from_march + 3
        } else {
            month_from_march - 9
        };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        (
            year,
            u32::try_from(month).expect("1..=12"),
            u32::try_from(day).expect("1..=31"),
        )
    }

    /// `YYYY-MM-DD` as 10 bytes.
    ///
    /// # Panics
    ///
    /// If the year is outside 0..=9999.
    pub fn iso(self) -> [u8; 10] {
        let (year, month, day) = self.civil();
        let year = u64::try_from(year).expect("year 0..=9999");
        assert!(year <= 9999, "year {year} has more than 4 digits");
        let mut buf = Vec::with_capacity(10);
        push_2_digits(&mut buf, year / 100);
        push_2_digits(&mut buf, year % 100);
        buf.push(b'-');
        push_2_digits(&mut buf, u64::from(month));
        buf.push(b'-');
        push_2_digits(&mut buf, u64::from(day));
        buf.try_into().expect("10 bytes")
    }

    /// `YYYY-MM-DD` as a string.
    pub fn to_iso_string(self) -> String {
        String::from_utf8_lossy(&self.iso()).into_owned()
    }
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Appends `HH:MM:SS` for `secs` seconds into a day.
#[inline]
pub fn push_time_of_day(buf: &mut Vec<u8>, secs: u64) {
    debug_assert!(secs < DAY_SECS);
    push_2_digits(buf, secs / 3600);
    buf.push(b':');
    push_2_digits(buf, secs / 60 % 60);
    buf.push(b':');
    push_2_digits(buf, secs % 60);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_match_display() {
        for n in [0, 7, 10, 99, 100, 12_345, u64::from(u32::MAX), u64::MAX] {
            let mut buf = Vec::new();
            push_u64(&mut buf, n);
            assert_eq!(buf, n.to_string().as_bytes());
        }
        let mut buf = Vec::new();
        push_micros(&mut buf, 12_000_345);
        buf.push(b' ');
        push_micros(&mut buf, 7);
        assert_eq!(buf, b"12.000345 0.000007");
    }

    #[test]
    fn dates_round_trip() {
        assert_eq!(Date::new(1970, 1, 1), Date(0));
        assert_eq!(Date::new(2012, 5, 1), Date(15_461));
        assert_eq!(Date::new(2026, 11, 1).to_iso_string(), "2026-11-01");
        for day in -800_000..800_000 {
            let date = Date(day);
            let (y, m, d) = date.civil();
            assert_eq!(Date::new(y, m, d), date);
        }
        assert_eq!(
            Date::parse("2024-02-29").expect("leap day"),
            Date::new(2024, 2, 29)
        );
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "tomorrow",
            "2026-11-01-",
        ] {
            assert!(Date::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn time_of_day() {
        let mut buf = Vec::new();
        push_time_of_day(&mut buf, 86_399);
        assert_eq!(buf, b"23:59:59");
    }
}
