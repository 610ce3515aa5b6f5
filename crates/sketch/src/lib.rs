//! Mergeable sketches for cardinal.
//!
//! `cardinal-sketch` is the summary layer of cardinal's data path
//! (`sources -> decode -> route -> summarize -> store -> query`): every
//! aggregate a rollup keeps that is not a plain number lives here. It depends
//! on no other cardinal crate, so it can be reused on its own.
//!
//! | type | answers | error |
//! |---|---|---|
//! | [`hll::Hll`] | distinct count, union, intersection (joint MLE) | ~1.04/sqrt(m) relative |
//! | [`quantiles::Quantiles`] | ranks and quantiles (KLL) | normalized rank error |
//! | [`countmin::CountMin`], [`countmin::DyadicCountMin`], [`countmin::HeavyHitters`] | frequencies, range counts, quantiles, heavy hitters | eps * total, w.p. 1 - delta |
//! | [`theta::Theta`] | distinct count of set expressions over many audiences | binomial bounds |
//! | [`exact::ExactSet`] | exact distinct count and set algebra (Roaring) | none |
//!
//! All sketches share one vocabulary: `new`, `insert`, `merge`, `estimate`,
//! `encode`, `decode`. The last four are the [`Sketch`] trait, so generic code
//! (rollups, codecs, fuzzers) can treat them alike. `insert` stays an inherent
//! method because each sketch takes a different item (a 64-bit hash, a value,
//! a weighted key).
//!
//! Approximate answers come as [`Estimate`]: a value and its 95% interval.
//!
//! Decoders never trust their bytes: each checks the body length a header
//! implies before allocating, so a forged header cannot make it allocate
//! memory the bytes do not back. Third-party decoders are not handed raw
//! bytes either: [`exact`] walks the Roaring layout and [`theta`] checks
//! the entry count before calling `roaring` or `datasketches`, because
//! both were measured allocating far more than their input (roaring 256
//! KiB from 23 bytes, DataSketches Theta v4 64 times the input) and
//! accepting duplicate or unsorted entries. The inputs that did are kept
//! under `crates/sketch/tests/fuzz/` and replayed by the tests.
//!
//! ```
//! use cardinal_sketch::{hash, hll::Hll, Sketch};
//!
//! let mut users = Hll::default(); // log2m 11, regwidth 5: postgresql-hll's defaults
//! for id in 0..10_000u64 {
//!     users.insert(hash::user_id(id));
//! }
//! let e = users.estimate();
//! assert!(e.lower <= 10_000.0 && 10_000.0 <= e.upper);
//! // The bytes are postgresql-hll's: paste them into `SELECT hll_cardinality('\x...'::hll)`.
//! let bytes = users.encode();
//! assert_eq!(Hll::decode(&bytes).unwrap().encode(), bytes);
//! ```

// Dependencies: `datasketches` (Apache's Rust port) for KLL and Theta
// images that Java and C++ DataSketches read (KLL inserts and merges run in
// `quantiles` itself; the port answers queries and validates decoding),
// `roaring` for exact sets in the portable format, `thiserror`. No other
// cardinal crate: this one can be published on its own, as csv-core stands
// apart from csv.

#![deny(missing_docs)]

pub mod countmin;
mod error;
mod estimate;
pub mod exact;
pub mod hash;
pub mod hll;
pub mod quantiles;
mod sort;
pub mod theta;

pub use error::{Error, Result};
pub use estimate::{CONFIDENCE_DEFAULT, Estimate, Z_95};

/// The shared vocabulary of every sketch, less `new` and `insert`.
///
/// Laws every implementation keeps (checked by the property tests in
/// `tests/`):
/// - `merge` is commutative and associative, and merging an empty sketch
///   changes nothing (one documented exception: the candidate list of
///   [`countmin::HeavyHitters`] is associative only while every key fits in
///   it, because a key dropped by an inner merge cannot come back);
/// - `decode(encode(s))` gives a sketch that encodes to the same bytes;
/// - `decode` never panics and never allocates more than a small multiple of
///   the input length plus the memory the sketch's parameters imply, and the
///   parameters are bounded by named `*_MAX` limits.
pub trait Sketch: Sized {
    /// What `estimate` answers (a count with an interval, a summary...).
    type Estimate;

    /// Folds `other` into `self`. Fails without changing `self` when the two
    /// were built with incompatible parameters.
    fn merge(&mut self, other: &Self) -> Result<()>;

    /// The sketch's main answer.
    fn estimate(&self) -> Self::Estimate;

    /// The portable byte encoding.
    fn encode(&self) -> Vec<u8>;

    /// Reads an encoding. Never panics, whatever the bytes.
    fn decode(bytes: &[u8]) -> Result<Self>;
}
