//! Deterministic synthetic event data for cardinal's demos, tests and
//! benchmarks.
//!
//! `cardinal-gen` stands beside the data path rather than on it: it makes
//! the bytes that the `source` and `parse` stages read. Every generator is
//! a plain function of its configuration and seed (the same seed gives the
//! same bytes), writes to any [`std::io::Write`] in large chunks, owns no
//! threads, and allocates nothing per row.
//!
//! | generator | writes | with |
//! |---|---|---|
//! | [`impressions::Impressions`] | AK-style ad events as CSV ("v1") or nested NDJSON ("v2") | the exact answers: [`impressions::Truth`] |
//! | [`bdb::write_uservisits`], [`bdb::write_rankings`] | the AMPLab Big Data Benchmark tables | Java's float printing: [`java_float`] |
//!
//! The building blocks are public for tests and other generators:
//! [`rng`] (SplitMix64, Zipf without tables, Poisson) and [`text`]
//! (hand-written integers and dates, the chunked output buffer).
//!
//! ```
//! use cardinal_gen::impressions::{Impressions, ImpressionsConfig};
//!
//! let config = ImpressionsConfig { events: 1_000, users: 100, ..Default::default() };
//! let mut csv = Vec::new();
//! let (written, truth) = Impressions::new(config)?.write_with_truth(&mut csv)?;
//! assert_eq!(written.rows, 1_000);
//! assert!(csv.starts_with(b"ts,user_id,kind,state,site,provider,campaign,revenue\n"));
//! assert_eq!(truth.events_by_kind.iter().sum::<u64>(), 1_000);
//! assert!(truth.users_seen <= 100);
//! # Ok::<(), cardinal_gen::Error>(())
//! ```

#![deny(missing_docs)]

pub mod bdb;
mod error;
pub mod impressions;
pub mod java_float;
pub mod rng;
pub mod text;

pub use error::{Error, Result};
