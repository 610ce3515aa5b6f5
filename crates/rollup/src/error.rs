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
    /// A rollup image's checksum does not match its bytes: the image is
    /// damaged (nothing of it was decoded).
    #[error("rollup image checksum {stored:#010x} does not match its bytes ({computed:#010x})")]
    ImageChecksum {
        /// The checksum the image carries.
        stored: u32,
        /// The checksum of its bytes.
        computed: u32,
    },
    /// A rollup image of a format version this build does not read.
    #[error(
        "rollup image format version {found}, this build reads {oldest} to {expected}: \
         read it with a build of its version",
        oldest = crate::image::IMAGE_VERSION_OLDEST
    )]
    ImageVersion {
        /// The version this build writes (the newest it reads).
        expected: u32,
        /// The version in the image.
        found: u32,
    },
    /// A rollup image ends before what it describes.
    #[error("rollup image truncated in {part}: need {needed} bytes, {remaining} remain")]
    ImageTruncated {
        /// What was being read.
        part: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the image.
        remaining: u64,
    },
    /// A rollup image breaks a rule of its format (its checksum matched:
    /// it was written wrong, or forged).
    #[error("malformed rollup image: {reason}")]
    ImageMalformed {
        /// Which rule, and where.
        reason: String,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
