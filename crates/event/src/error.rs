//! The one error type of `cardinal-event`.

/// What went wrong reading a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Text that is not a timestamp in a supported form.
    #[error(
        "not a timestamp: {text:?} ({reason}); expected YYYY-MM-DD, YYYY-MM-DD HH:MM[:SS], ISO-8601 with T, fraction and Z, ±HH, ±HHMM or ±HH:MM, or seconds or milliseconds since 1970 (by magnitude: 10^11 and up is milliseconds)"
    )]
    Timestamp {
        /// The offending text, truncated to 64 bytes.
        text: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A time unit `date_trunc` does not know.
    #[error("unknown time unit {unit:?}: expected minute, hour, day, week or month")]
    TimeUnit {
        /// The unit as written.
        unit: String,
    },
    /// A `time_bucket` width that is not one.
    #[error("not a bucket width: {text:?}: {reason}")]
    BucketWidth {
        /// The width as written, truncated to 64 characters.
        text: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A column type name the dialect does not know.
    #[error(
        "unknown column type {name:?}: expected TIMESTAMP (or DATE), BIGINT, DOUBLE, TEXT or BOOLEAN"
    )]
    ColumnType {
        /// The type as written.
        name: String,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
