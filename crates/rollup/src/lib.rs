//! The summarize stage: per-worker partial rollups, merged on read.
//!
//! A summary (`CREATE SUMMARY ... GROUP BY day, state`) becomes one
//! [`Rollup`] per worker: a table from (time bucket, dimension values) to
//! aggregate states ([`AggState`]). Workers fold their own records with no
//! lock and no shared summary; a query or snapshot merges the partials.
//! Every aggregate merges order-independently (sums are kept in fixed point
//! for that reason), so the merged answer does not depend on how the input
//! was split across workers or files.
//!
//! A rollup is written to disk and read back whole as an [`image`]
//! ([`Rollup::encode_image`], [`Rollup::decode_image`]): a versioned,
//! checksummed run of bytes holding its shape, limits, clocks and every
//! group's states, read back into a rollup that folds on exactly as the
//! one written; the decoder checks every length against the bytes and
//! never panics.
//!
//! ```
//! use cardinal_event::Timestamp;
//! use cardinal_rollup::{AggKind, Input, Limits, Output, Rollup, Shape};
//!
//! let shape = Shape { aggs: vec![AggKind::CountAll, AggKind::Sum] };
//! let mut a = Rollup::new(shape.clone(), Limits::default()).unwrap();
//! let mut b = Rollup::new(shape, Limits::default()).unwrap();
//! let day = Timestamp(0);
//! a.fold(day, b"CA", &[Input::Null, Input::Number(1.5)]);
//! b.fold(day, b"CA", &[Input::Null, Input::Number(2.5)]);
//! a.merge(&b).unwrap();
//! let rows = a.rows();
//! assert_eq!(rows[0].outputs, vec![Output::Count(2), Output::Number(Some(4.0))]);
//!
//! let mut image = Vec::new();
//! a.encode_image(&mut image);
//! let read = Rollup::decode_image(&image, a.shape()).unwrap();
//! assert_eq!(read.rows(), rows);
//! ```

#![deny(missing_docs)]

mod agg;
mod budget;
mod error;
pub mod image;
mod rows;
mod sum;
mod table;
mod watermark;

pub use agg::{
    AggKind, AggState, Input, Output, RANKS_DEFAULT, RANKS_MAX, Ranks, TOPK_EXACT_KEYS_MAX,
    TOPK_K_MAX, TopCounts, answer_seed, output_of, state_of,
};
pub use budget::{BytesGauge, MemoryBudget};
pub use error::{Error, Result};
pub use sum::ExactSum;
pub use table::{
    AggregateStates, Folded, GROUPS_MAX_DEFAULT, GroupAt, KEY_BYTES_MAX, KeyHash, Limits,
    PART_PREFETCH_BYTES_MAX, PARTS, PARTS_AFTER_DEFAULT, PartLines, Rollup, Row, Shape,
};
pub use watermark::WATERMARK_RECORDS;
