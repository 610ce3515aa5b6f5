//! The one error type of `cardinal-rollup`.

/// What went wrong building or merging rollups.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A sketch refused its parameters or a merge.
    #[error(transparent)]
    Sketch(#[from] cardinal_sketch::Error),
    /// Two partial rollups of different shapes were merged.
    #[error("cannot merge rollups of different shapes: {reason}")]
    Shape {
        /// What differs.
        reason: String,
    },
    /// A configured limit is out of range.
    #[error("{name} = {value} is out of range: {reason}")]
    Limit {
        /// The limit's name.
        name: &'static str,
        /// The rejected value.
        value: u64,
        /// The supported range.
        reason: &'static str,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
