//! A one-line progress display on stderr for long runs, drawn from the
//! engine's progress counters ([`cardinal_engine::progress`], which says
//! how the workers add to them) by a ticker thread [`TICKS_PER_SEC`] times
//! a second:
//!
//! ```text
//!   412 MB of 873 MB (47%)  98.1 MB/s  1.12 M events/s  0 rejected  ETA 5 s
//! ```
//!
//! The percentage and ETA appear only when the total is known (every input
//! a plain file). The line is drawn only when stderr is a terminal, and it
//! is erased when the run ends, so logs and pipes never see it.

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cardinal_engine::progress::{Progress, Snapshot};

/// Redraws per second: often enough to look alive, rarely enough that the
/// ticker costs nothing next to the workers.
pub const TICKS_PER_SEC: u32 = 4;

/// Redraws the line on stderr every tick until `stop` is dropped or
/// sent to, then erases it. Run it on its own thread.
pub fn show(progress: &Progress, total_bytes: Option<u64>, stop: &mpsc::Receiver<()>) {
    let started = Instant::now();
    let tick = Duration::from_secs(1) / TICKS_PER_SEC;
    let stderr = std::io::stderr();
    let mut drawn = false;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(tick) {
        let line = line(
            progress.snapshot(),
            total_bytes,
            started.elapsed().as_secs_f64(),
        );
        // "\r" returns to the line start, ESC[2K erases the old line.
        let _ = write!(stderr.lock(), "\r\x1b[2K{line}");
        drawn = true;
    }
    if drawn {
        let _ = write!(stderr.lock(), "\r\x1b[2K");
    }
}

/// The progress line for counters `now`, `elapsed_secs` into the run.
#[expect(
    clippy::cast_possible_truncation,
    reason = "a byte rate far below 2^64, rounded"
)]
pub fn line(now: Snapshot, total_bytes: Option<u64>, elapsed_secs: f64) -> String {
    let secs = elapsed_secs.max(1e-3);
    let bytes_per_sec = now.bytes as f64 / secs;
    let mut line = match total_bytes {
        Some(total) if total > 0 => {
            let done = now.bytes.min(total);
            format!(
                "{} of {} ({:.0}%)",
                bytes(done),
                bytes(total),
                100.0 * done as f64 / total as f64
            )
        }
        _ => bytes(now.bytes),
    };
    line += &format!(
        "  {}/s  {} events/s  {} rejected",
        bytes(bytes_per_sec.round() as u64),
        count(now.records as f64 / secs),
        now.rejects
    );
    if let Some(total) = total_bytes.filter(|&t| t > 0)
        && now.bytes > 0
        && bytes_per_sec > 0.0
    {
        let left = total.saturating_sub(now.bytes) as f64 / bytes_per_sec;
        line += &format!("  ETA {}", duration(left));
    } else {
        line += &format!("  {}", duration(elapsed_secs));
    }
    line
}

/// `873 MB`, `1.2 GB`, `512 B`: decimal units, three significant digits.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 999.5 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value < 9.995 {
        format!("{value:.2} {}", UNITS[unit])
    } else if value < 99.95 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// A rate or count in people's units: `812`, `45.3 k`, `1.12 M`.
pub fn count(n: f64) -> String {
    if n < 1e3 {
        format!("{n:.0}")
    } else if n < 1e6 {
        format!("{:.1} k", n / 1e3)
    } else {
        format!("{:.2} M", n / 1e6)
    }
}

/// `42 s`, `3 min 5 s`, `2 h 01 min`.
#[expect(
    clippy::cast_possible_truncation,
    reason = "saturating float-to-int of a non-negative duration"
)]
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_keep_three_significant_digits() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_000), "1.00 kB");
        assert_eq!(bytes(12_345), "12.3 kB");
        assert_eq!(bytes(873_150_826), "873 MB");
        assert_eq!(bytes(999_600_000), "1.00 GB");
        assert_eq!(bytes(u64::MAX), "18446744 TB");
    }

    #[test]
    fn counts_and_durations() {
        assert_eq!(count(812.4), "812");
        assert_eq!(count(45_300.0), "45.3 k");
        assert_eq!(count(1_123_000.0), "1.12 M");
        assert_eq!(duration(0.4), "0 s");
        assert_eq!(duration(59.4), "59 s");
        assert_eq!(duration(185.0), "3 min 5 s");
        assert_eq!(duration(7_260.0), "2 h 01 min");
        assert_eq!(duration(-3.0), "0 s");
    }

    #[test]
    fn line_with_a_known_total_shows_percent_and_eta() {
        let now = Snapshot {
            bytes: 400_000_000,
            records: 4_000_000,
            rejects: 2,
        };
        // 400 MB in 4 s: 100 MB/s, 1 M events/s, 400 MB left: 4 s.
        assert_eq!(
            line(now, Some(800_000_000), 4.0),
            "400 MB of 800 MB (50%)  100 MB/s  1.00 M events/s  2 rejected  ETA 4 s"
        );
    }

    #[test]
    fn line_without_a_total_shows_elapsed_time() {
        let now = Snapshot {
            bytes: 50_000_000,
            records: 500_000,
            rejects: 0,
        };
        assert_eq!(
            line(now, None, 2.0),
            "50.0 MB  25.0 MB/s  250.0 k events/s  0 rejected  2 s"
        );
    }

    #[test]
    fn line_at_the_start_and_past_the_total() {
        let nothing = Snapshot::default();
        // Nothing read yet: no rate to extrapolate, so no ETA.
        assert_eq!(
            line(nothing, Some(1_000), 0.0),
            "0 B of 1.00 kB (0%)  0 B/s  0 events/s  0 rejected  0 s"
        );
        // More bytes than the files held at planning time (a file grew):
        // the percentage stops at 100.
        let over = Snapshot {
            bytes: 2_000,
            records: 20,
            rejects: 0,
        };
        assert!(line(over, Some(1_000), 1.0).starts_with("1.00 kB of 1.00 kB (100%)"));
    }
}
