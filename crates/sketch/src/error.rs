//! The one error type of `cardinal-sketch`.
//!
//! Every operating error of the crate is a value of [`Error`]: bytes that do
//! not decode, parameters out of range, merges of sketches that were built
//! with different parameters. Broken invariants are `assert!` failures, not
//! errors (see STYLE.md, section 4).

/// What went wrong in a sketch operation.
///
/// `sketch` fields name the sketch family (`"hll"`, `"countmin"`, ...) so a
/// caller that decodes a column of mixed sketches can say which one failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes end before the structure they describe.
    #[error("{sketch}: truncated input: need {expected} bytes, have {found}")]
    Truncated {
        /// The sketch family.
        sketch: &'static str,
        /// Bytes the header asks for.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The format version in the header is not one this crate reads.
    #[error("{sketch}: unsupported format version {found} (expected {expected})")]
    UnsupportedVersion {
        /// The sketch family.
        sketch: &'static str,
        /// The version this crate writes and reads.
        expected: u8,
        /// The version found in the bytes.
        found: u8,
    },
    /// The bytes are not a valid encoding for a reason other than length or
    /// version (an unknown type tag, unsorted elements, a bad checksum...).
    #[error("{sketch}: malformed encoding: {reason}")]
    Malformed {
        /// The sketch family.
        sketch: &'static str,
        /// A sentence saying which rule the bytes break.
        reason: String,
    },
    /// A parameter is outside the range the sketch supports.
    #[error("{sketch}: parameter {name} = {value} is out of range: {reason}")]
    InvalidParameter {
        /// The sketch family.
        sketch: &'static str,
        /// The parameter's name as the docs spell it (`log2m`, `regwidth`...).
        name: &'static str,
        /// The rejected value.
        value: i64,
        /// The supported range, as a phrase.
        reason: &'static str,
    },
    /// Two sketches cannot be merged or compared because they were built with
    /// different parameters (postgresql-hll refuses the same unions).
    #[error("{sketch}: incompatible sketches: {reason}")]
    Incompatible {
        /// The sketch family.
        sketch: &'static str,
        /// Which parameters differ, with both values.
        reason: String,
    },
    /// A named limit would be exceeded (see the `*_MAX` constants).
    #[error("{sketch}: limit {limit} = {max} exceeded (asked for {found})")]
    LimitExceeded {
        /// The sketch family.
        sketch: &'static str,
        /// The name of the constant that sets the limit.
        limit: &'static str,
        /// The limit's value.
        max: u64,
        /// What the input asked for.
        found: u64,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
