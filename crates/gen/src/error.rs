//! The one error type of `cardinal-gen`.
//!
//! Generators fail for two reasons only: a configuration they cannot honour
//! (checked in `new`, before any byte is written) and an I/O error from the
//! writer they were handed. Broken invariants are `assert!` failures.

/// What went wrong while generating.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of its documented range.
    #[error("invalid {name}: {reason}")]
    InvalidParameter {
        /// The configuration field, as the CLI flag spells it.
        name: &'static str,
        /// What range is accepted and why.
        reason: String,
    },
    /// The writer failed.
    #[error("writing generated data: {0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
