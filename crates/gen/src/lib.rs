//! Deterministic synthetic event data for cardinal.
#![deny(missing_docs)]

mod error;
pub mod java_float;
pub mod rng;

pub use error::{Error, Result};
