//! Rollup images: a whole [`Rollup`] as one checksummed run of bytes, to
//! write to disk and read back into a rollup that folds on exactly as the
//! one written would have.
//!
//! ```text
//!  header    | magic "CRDROLUP" | version u32 = 2 | 0 u32 |                       16 B
//!  shape     | aggregates u16 | 0 u16 | 0 u32 |                                    8 B
//!            per aggregate: | kind u8 | a u8 | ranks u8 | 0 u8 | b u32 | ranks x f64 |
//!  limits    | groups_max u64 | retention_ms i64 | future_ms i64 | which u8 | 0 x 7 |  32 B
//!  progress  | parts u32 | 0 u32 | parts_after u64 | newest_bucket i64 | evicted_at i64 |
//!            | dropped: group_limit u64 | expired u64 | key_too_long u64 | future u64 |
//!            | evicted u8 | evicted_future u8 | 0 x 6 |                          72 B
//!  watermark | seen u64 | kept u64 | at i64 | entries u32 | 0 u32 |             32 B
//!            entries x | bucket i64 | records u64 |
//!  groups    | groups u64 |
//!            groups x | bucket i64 | key bytes u32 | key | state x aggregates |
//!  trailer   | crc32 of every byte before it u32 |
//! ```
//!
//! Little-endian throughout. `which` says which of the optional limits are
//! set (bit 0 `retention_ms`, bit 1 `future_ms`; an unset one is written
//! 0). The aggregate kinds and their settings are written with their tags
//! and `a`, `b`:
//!
//! | kind | tag | a | b | ranks |
//! |---|---|---|---|---|
//! | `CountAll`, `Count`, `Sum`, `SumInt`, `Avg` | 1..=5 | 0 | 0 | 0 |
//! | `Min`, `MinInt`, `Max`, `MaxInt` | 6..=9 | 0 | 0 | 0 |
//! | `Hll` | 10 | log2m | regwidth | 0 |
//! | `ExactDistinct` | 11 | 0 | 0 | 0 |
//! | `Quantiles` | 12 | 0 | k | asked |
//! | `QuantilesOf` | 13 | of | 0 | asked |
//! | `TopK` | 14 | 0 | k | 0 |
//! | `Theta` | 15 | lg_k | 0 | 0 |
//!
//! and each state as its aggregate keeps it, in the sketches' own formats
//! where one holds the whole state:
//!
//! ```text
//!  count           | n u64 |
//!  sum, avg        | exact u8 | fixed i128 | count u64 | [ExactSum: 35 limbs u64 | flags u8] |
//!  sum of integers | sum i128 | count u64 |
//!  min, max        | some u8 | [value f64 bits] |        of integers: | some u8 | [value i64] |
//!  hll             | bytes u32 | postgresql-hll storage format |
//!  exact_distinct  | bytes u32 | portable 64-bit Roaring |
//!  quantiles       | bytes u32 | Quantiles::encode_state (coins, waiting values, compactions, KLL image) |
//!  quantiles of    | (nothing: it reads an earlier aggregate's sketch) |
//!  theta           | bytes u32 | compact Theta image |
//!  topk            | sketch u8 | names u32 | names x | key hash u64 | bytes u32 | text | |
//!    exact counts  | keys u32 | keys x | key hash u64 | count u64 | |
//!    a sketch      | bytes u32 | Count-Min image | candidates u32 |
//!                  | candidates x | key u64 | stored estimate u64 | |
//! ```
//!
//! Worked example: a rollup of `count(*)` with one group, day 0, key
//! `"CA"`, 3 records, no limits set and nothing dropped, is 16 + 8 + 8
//! (the one aggregate: tag 1) + 32 + 72 + 32 + 8 + (8 + 4 + 2 + 8) + 4 =
//! 202 bytes.
//!
//! # What the caller passes
//!
//! [`Rollup::decode_image`] takes the image and the [`Shape`] the caller
//! expects (the summary as compiled now), and refuses an image of any
//! other shape: the aggregates and every setting (`log2m`, `k`, ranks,
//! ...) must be equal, since states of other settings do not merge with
//! the caller's. Limits come from the image, with the drops, the
//! retention clock and the watermark counted under them; a caller whose
//! configured limits changed compares [`Rollup::limits`] and decides.
//!
//! # Exactly as before
//!
//! What decides how a rollup folds on is all written: each part's groups
//! in row order (read back into the same parts, rows and states), the
//! retention clock (`newest_bucket`, `evicted_at`), the watermark, the
//! drop counts, the split threshold, and states whole: a KLL sketch with
//! its coins and the values waiting in its slack, a heavy-hitters
//! sketch's candidates in their order with their stored estimates, not
//! only what the sketches' portable images hold. Not written: the index
//! (rebuilt from the keys), the last fold's group (a cache) and what a
//! [`crate::GroupAt`] was (none given out before survives). New KLL
//! sketches take their coins from the reading thread's stream
//! (`cardinal_sketch::quantiles::seed_thread`), as new ones always do.
//!
//! # Checks
//!
//! The checksum (CRC-32/ISO-HDLC, `crc32fast`, as the chain store's
//! snapshots) covers every byte before it and is checked, after the magic
//! and version, before anything else is read. A checksum does not stop a
//! forged image, so the decoder never trusts a length or count: each is
//! checked against the bytes that remain before anything is sized from
//! it, each state goes through its sketch's checked decoder, and every
//! group must be one the rollup could hold (see
//! [`Rollup::decode_image`]). It never panics, whatever the bytes, and
//! allocates a small multiple of the image's length: a group costs its
//! record (32 B), states (48 B each), index slots and fresh sketch
//! boxes, all for at least 12 bytes of image, and a sketch state at most
//! 8 times its bytes (a FULL HLL's registers, a Roaring bitmap) plus
//! the 64 free slots of a KLL sketch's slack.

//! # Limits
//!
//! Every count and length is checked against the bytes left at the
//! fewest bytes its items take ([`GROUP_BYTES_MIN`] a group,
//! `KIND_BYTES_MIN` an aggregate's kind, 16 a watermark entry or top-k
//! count, 12 a top-k name) before anything is sized from it, and against
//! the limit the rollup itself keeps, whatever the bytes left: groups
//! `groups_max` (of the image's limits), keys [`crate::KEY_BYTES_MAX`],
//! watermark entries `WATERMARK_ENTRIES_MAX` (129: what 128 records
//! settle to), ranks [`crate::RANKS_MAX`], a top-k state's exact keys
//! [`crate::TOPK_EXACT_KEYS_MAX`] and its sketch's candidates its
//! capacity (four per reported item, at least 16) with names for at
//! most twice that, and every count of records [`RECORDS_MAX`] (2^62, so
//! that folding on cannot overflow one). Past any of them the image is
//! refused
//! ([`Error::ImageMalformed`]); nothing is dropped or truncated.

// Maintainer notes.
//
// Adding an aggregate kind: give it the next tag in `write_kind` /
// `read_kind` and the table above, a state layout in `write_state` /
// `read_state`, and a case in tests/image.rs's `any_shape`. Changing any
// layout here, or a sketch's state format under it, changes the bytes:
// bump IMAGE_VERSION, and keep reading the old one where it can be read
// (version 1 differs from 2 only in the KLL states, whose own version
// field tells them apart: `Quantiles::decode_state` reads both).

use cardinal_sketch::Sketch;
use cardinal_sketch::countmin::{CountMin, HeavyHitters, Params};
use cardinal_sketch::exact::ExactSet;
use cardinal_sketch::hll::{Hll, Settings};
use cardinal_sketch::quantiles::Quantiles;
use cardinal_sketch::theta::Theta;

use crate::agg::{
    AggKind, AggState, RANKS_MAX, Ranks, TOPK_EXACT_KEYS_MAX, TOPK_NAMES_PER_CANDIDATE_MAX,
    TopCounts, TopState,
};
use crate::sum::{EXACT_SUM_IMAGE_BYTES, ExactSum};
use crate::table::{Drops, Limits, Progress, Rollup, Shape};
use crate::watermark::{WATERMARK_ENTRIES_MAX, Watermark};
use crate::{Error, Result};

/// The bytes an image starts with.
const MAGIC: &[u8; 8] = b"CRDROLUP";

/// The image format version this crate writes: 2, whose KLL states carry
/// their sketch's compactions (`Quantiles::encode_state`'s version 1), so
/// that a restored or shipped sketch keeps its calibrated intervals.
pub const IMAGE_VERSION: u32 = 2;

/// The oldest image format version this crate reads: 1, the same layout
/// with KLL states of version 0 (no compactions: a sketch read from one
/// that has compacted takes the interval's fallback width, see the
/// module docs of `cardinal_sketch::quantiles`).
pub const IMAGE_VERSION_OLDEST: u32 = 1;

/// Bytes of the header (magic, version, reserved).
const HEADER_BYTES: usize = 16;

/// Bytes of the checksum at the end.
const CHECKSUM_BYTES: usize = 4;

/// Fewest bytes a group takes in an image (bucket and key length, an empty
/// key, states of no bytes): forged group counts are checked against the
/// bytes left at this rate.
pub const GROUP_BYTES_MIN: u64 = 8 + 4;

/// Most records any count of an image may say were seen (a group's
/// count, a sum's values, a top-k key's count, a drop count, the
/// watermark's records): 2^62, 146 years of 10^9 records a second, so
/// that no count a rollup folds on from can overflow (and an integer
/// sum, at most 2^63 in magnitude per value, stays within its i128). An
/// image with a larger one is refused.
pub const RECORDS_MAX: u64 = 1 << 62;

/// Bytes of one watermark entry.
const WATERMARK_ENTRY_BYTES: u64 = 16;

/// Fewest bytes an aggregate's kind takes (no ranks).
const KIND_BYTES_MIN: u64 = 8;

/// Bytes of a `topk` state's exact count or candidate entry.
const TOPK_ENTRY_BYTES: u64 = 16;

/// Fewest bytes a `topk` name takes (key hash, length, no text).
const TOPK_NAME_BYTES_MIN: u64 = 12;

/// Under the fuzzer (`--cfg fuzzing`, set by cargo-fuzz) the checksum is
/// not enforced, so that mutated images reach the structural checks behind
/// it, which must hold on their own (as the chain store's snapshots do).
const CHECKSUM_IGNORED: bool = cfg!(fuzzing);

impl Rollup {
    /// Appends the rollup's image to `out` (see the [module doc](self));
    /// returns its length in bytes. Deterministic: equal rollups (the
    /// same groups in the same rows, the same states and clocks) give the
    /// same bytes, and [`Rollup::decode_image`] of them gives a rollup
    /// that encodes to them again.
    ///
    /// # Panics
    ///
    /// If the shape has more than 65,535 aggregates (the format's count
    /// is a u16; a summary has a few).
    pub fn encode_image(&self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        write_shape(self.shape(), out);
        write_limits(self.limits(), out);
        write_progress(&self.progress(), out);
        out.extend_from_slice(&(self.group_count() as u64).to_le_bytes());
        let kinds = &self.shape().aggs;
        let mut groups = 0usize;
        for (bucket, key, states) in self.groups() {
            out.extend_from_slice(&bucket.0.to_le_bytes());
            let key_len = u32::try_from(key.len()).expect("keys are at most KEY_BYTES_MAX");
            out.extend_from_slice(&key_len.to_le_bytes());
            out.extend_from_slice(key);
            for (state, kind) in states.iter().zip(kinds) {
                write_state(state, kind, out);
            }
            groups += 1;
        }
        assert_eq!(groups, self.group_count(), "every group written once");
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.len() - start
    }

    /// Reads an image that [`Rollup::encode_image`] wrote, for a summary
    /// of shape `expected` (see the [module doc](self): limits and clocks
    /// come from the image). Never panics and allocates at most a small
    /// multiple of `image.len()`, whatever the bytes.
    ///
    /// # Errors
    ///
    /// - [`Error::ImageTruncated`] for an image too short for its header
    ///   and checksum, or that ends inside what it describes;
    /// - [`Error::ImageMalformed`] for a wrong magic, and for anything that
    ///   breaks the format once the checksum matched: a count or length
    ///   past the bytes left, an unknown kind or flag, nonzero reserved
    ///   bytes, a state its sketch's decoder refuses or of other settings
    ///   than the shape's, a group twice, past `groups_max` or the key
    ///   length limit, a watermark no stream makes, bytes after the groups;
    /// - [`Error::ImageVersion`] for another format version;
    /// - [`Error::ImageChecksum`] when the checksum does not match (checked
    ///   before anything past the version is read);
    /// - [`Error::Shape`] for an image of another shape than `expected`,
    ///   and [`Error::Limit`] for limits [`Rollup::new`] refuses.
    pub fn decode_image(image: &[u8], expected: &Shape) -> Result<Rollup> {
        if image.len() < HEADER_BYTES + CHECKSUM_BYTES {
            return Err(Error::ImageTruncated {
                part: "header",
                needed: (HEADER_BYTES + CHECKSUM_BYTES) as u64,
                remaining: image.len() as u64,
            });
        }
        if &image[..8] != MAGIC {
            return Err(malformed(
                "the image does not start with CRDROLUP".to_string(),
            ));
        }
        let version = u32::from_le_bytes(image[8..12].try_into().expect("4 bytes"));
        if !(IMAGE_VERSION_OLDEST..=IMAGE_VERSION).contains(&version) {
            return Err(Error::ImageVersion {
                expected: IMAGE_VERSION,
                found: version,
            });
        }
        let (body, stored) = image.split_at(image.len() - CHECKSUM_BYTES);
        let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed && !CHECKSUM_IGNORED {
            return Err(Error::ImageChecksum { stored, computed });
        }
        let mut r = Reader {
            bytes: body,
            at: 12,
        };
        r.zeros(4, "header")?;
        let shape = read_shape(&mut r)?;
        if shape != *expected {
            return Err(Error::Shape {
                reason: format!("the image is of {shape:?}, expected {expected:?}"),
            });
        }
        let limits = read_limits(&mut r)?;
        let progress = read_progress(&mut r)?;
        let mut rollup = Rollup::resumed(shape, limits, progress)?;
        let groups = r.u64("groups")?;
        if groups > r.remaining() / GROUP_BYTES_MIN {
            return Err(malformed(format!(
                "{groups} groups cannot fit in the {} bytes left",
                r.remaining()
            )));
        }
        let kinds = rollup.shape().aggs.clone();
        for group in 0..groups {
            let bucket = r.i64("group")?;
            let key_len = r.u32("group")?;
            let key = r.take(u64::from(key_len), "key")?;
            let mut states = Vec::with_capacity(kinds.len());
            for (index, kind) in kinds.iter().enumerate() {
                let state = read_state(&mut r, kind).map_err(|error| match error {
                    Error::ImageMalformed { reason } => {
                        malformed(format!("group {group}, aggregate {index}: {reason}"))
                    }
                    other => other,
                })?;
                states.push(state);
            }
            rollup
                .restore_group(bucket, key, states)
                .map_err(|reason| malformed(format!("group {group}: {reason}")))?;
        }
        if r.remaining() != 0 {
            return Err(malformed(format!(
                "{} bytes follow the last group",
                r.remaining()
            )));
        }
        // Pair with `encode_image`: every group counted was read.
        assert_eq!(rollup.group_count() as u64, groups);
        Ok(rollup)
    }
}

fn malformed(reason: String) -> Error {
    Error::ImageMalformed { reason }
}

/// A cursor over an image's bytes that checks every read against what is
/// left.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.at) as u64
    }

    /// The next `len` bytes, if that many are left.
    fn take(&mut self, len: u64, part: &'static str) -> Result<&'a [u8]> {
        if len > self.remaining() {
            return Err(Error::ImageTruncated {
                part,
                needed: len,
                remaining: self.remaining(),
            });
        }
        let len = usize::try_from(len).expect("at most the bytes left");
        let bytes = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, part: &'static str) -> Result<[u8; N]> {
        Ok(self
            .take(N as u64, part)?
            .try_into()
            .expect("take gave N bytes"))
    }

    fn u8(&mut self, part: &'static str) -> Result<u8> {
        Ok(self.array::<1>(part)?[0])
    }

    fn u16(&mut self, part: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(part)?))
    }

    fn u32(&mut self, part: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(part)?))
    }

    fn u64(&mut self, part: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(part)?))
    }

    fn i64(&mut self, part: &'static str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(part)?))
    }

    fn i128(&mut self, part: &'static str) -> Result<i128> {
        Ok(i128::from_le_bytes(self.array(part)?))
    }

    /// A count of records, at most [`RECORDS_MAX`].
    fn records(&mut self, part: &'static str) -> Result<u64> {
        let records = self.u64(part)?;
        if records > RECORDS_MAX {
            return Err(malformed(format!(
                "{records} records in the {part}, more than RECORDS_MAX"
            )));
        }
        Ok(records)
    }

    /// `len` reserved bytes, which must be zero.
    fn zeros(&mut self, len: u64, part: &'static str) -> Result<()> {
        if self.take(len, part)?.iter().any(|&b| b != 0) {
            return Err(malformed(format!(
                "reserved bytes of the {part} are not zero"
            )));
        }
        Ok(())
    }

    /// A count of items of at least `item_bytes` each, checked against
    /// the bytes left before anything is sized from it.
    fn count(&mut self, count: u64, item_bytes: u64, part: &'static str) -> Result<usize> {
        if count > self.remaining() / item_bytes {
            return Err(malformed(format!(
                "{count} {part} cannot fit in the {} bytes left",
                self.remaining()
            )));
        }
        Ok(usize::try_from(count).expect("at most the bytes left"))
    }
}

fn write_shape(shape: &Shape, out: &mut Vec<u8>) {
    let count = u16::try_from(shape.aggs.len()).expect("a summary has few aggregates");
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    for kind in &shape.aggs {
        let (tag, a, b, ranks): (u8, u8, u32, &[f64]) = match *kind {
            AggKind::CountAll => (1, 0, 0, &[]),
            AggKind::Count => (2, 0, 0, &[]),
            AggKind::Sum => (3, 0, 0, &[]),
            AggKind::SumInt => (4, 0, 0, &[]),
            AggKind::Avg => (5, 0, 0, &[]),
            AggKind::Min => (6, 0, 0, &[]),
            AggKind::MinInt => (7, 0, 0, &[]),
            AggKind::Max => (8, 0, 0, &[]),
            AggKind::MaxInt => (9, 0, 0, &[]),
            AggKind::Hll { log2m, regwidth } => (10, log2m, u32::from(regwidth), &[]),
            AggKind::ExactDistinct => (11, 0, 0, &[]),
            AggKind::Quantiles { k, ref ranks } => (12, 0, u32::from(k), ranks.as_slice()),
            AggKind::QuantilesOf { of, ref ranks } => (13, of, 0, ranks.as_slice()),
            AggKind::TopK { k } => (14, 0, k, &[]),
            AggKind::Theta { lg_k } => (15, lg_k, 0, &[]),
        };
        let ranks_len = u8::try_from(ranks.len()).expect("at most RANKS_MAX");
        out.extend_from_slice(&[tag, a, ranks_len, 0]);
        out.extend_from_slice(&b.to_le_bytes());
        for rank in ranks {
            out.extend_from_slice(&rank.to_bits().to_le_bytes());
        }
    }
}

fn read_shape(r: &mut Reader<'_>) -> Result<Shape> {
    let count = r.u16("shape")?;
    r.zeros(6, "shape")?;
    let count = r.count(u64::from(count), KIND_BYTES_MIN, "aggregates")?;
    let mut aggs = Vec::with_capacity(count);
    for index in 0..count {
        let [tag, a, ranks_len, reserved] = r.array::<4>("shape")?;
        let b = r.u32("shape")?;
        if reserved != 0 || usize::from(ranks_len) > RANKS_MAX {
            return Err(malformed(format!("aggregate {index}: bad kind bytes")));
        }
        let mut ranks = [0.0; RANKS_MAX];
        for rank in &mut ranks[..usize::from(ranks_len)] {
            *rank = f64::from_bits(r.u64("shape")?);
        }
        let ranks = &ranks[..usize::from(ranks_len)];
        let plain = |kind: AggKind| {
            if a == 0 && b == 0 && ranks.is_empty() {
                Ok(kind)
            } else {
                Err(malformed(format!(
                    "aggregate {index}: settings on {kind:?}"
                )))
            }
        };
        let narrow = |value: u32| {
            u8::try_from(value).map_err(|_| malformed(format!("aggregate {index}: {value}")))
        };
        let kind = match tag {
            1 => plain(AggKind::CountAll)?,
            2 => plain(AggKind::Count)?,
            3 => plain(AggKind::Sum)?,
            4 => plain(AggKind::SumInt)?,
            5 => plain(AggKind::Avg)?,
            6 => plain(AggKind::Min)?,
            7 => plain(AggKind::MinInt)?,
            8 => plain(AggKind::Max)?,
            9 => plain(AggKind::MaxInt)?,
            10 if ranks.is_empty() => AggKind::Hll {
                log2m: a,
                regwidth: narrow(b)?,
            },
            11 => plain(AggKind::ExactDistinct)?,
            12 if a == 0 => AggKind::Quantiles {
                k: u16::try_from(b)
                    .map_err(|_| malformed(format!("aggregate {index}: k = {b}")))?,
                ranks: Ranks::new(ranks)?,
            },
            13 if b == 0 => AggKind::QuantilesOf {
                of: a,
                ranks: Ranks::new(ranks)?,
            },
            14 if a == 0 && ranks.is_empty() => AggKind::TopK { k: b },
            15 if b == 0 && ranks.is_empty() => AggKind::Theta { lg_k: a },
            _ => {
                return Err(malformed(format!(
                    "aggregate {index}: unknown kind {tag} or settings"
                )));
            }
        };
        aggs.push(kind);
    }
    Ok(Shape { aggs })
}

fn write_limits(limits: Limits, out: &mut Vec<u8>) {
    out.extend_from_slice(&limits.groups_max.to_le_bytes());
    out.extend_from_slice(&limits.retention_ms.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&limits.future_ms.unwrap_or(0).to_le_bytes());
    let which = u8::from(limits.retention_ms.is_some()) | u8::from(limits.future_ms.is_some()) << 1;
    out.push(which);
    out.extend_from_slice(&[0; 7]);
}

fn read_limits(r: &mut Reader<'_>) -> Result<Limits> {
    let groups_max = r.u64("limits")?;
    let retention_ms = r.i64("limits")?;
    let future_ms = r.i64("limits")?;
    let which = r.u8("limits")?;
    r.zeros(7, "limits")?;
    let optional = |bit: u8, value: i64| match (which & bit != 0, value) {
        (true, value) => Ok(Some(value)),
        (false, 0) => Ok(None),
        (false, _) => Err(malformed("an unset limit is not zero".to_string())),
    };
    if which & !0b11 != 0 {
        return Err(malformed(format!("unknown limit bits {which:#04x}")));
    }
    Ok(Limits {
        groups_max,
        retention_ms: optional(1, retention_ms)?,
        future_ms: optional(2, future_ms)?,
    })
}

fn write_progress(progress: &Progress, out: &mut Vec<u8>) {
    let parts = u32::try_from(progress.parts).expect("1 or PARTS");
    out.extend_from_slice(&parts.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(progress.parts_after as u64).to_le_bytes());
    out.extend_from_slice(&progress.newest_bucket.to_le_bytes());
    out.extend_from_slice(&progress.evicted_at.to_le_bytes());
    let drops = &progress.drops;
    for count in [
        drops.group_limit,
        drops.expired,
        drops.key_too_long,
        drops.future,
    ] {
        out.extend_from_slice(&count.to_le_bytes());
    }
    out.extend_from_slice(&[
        u8::from(drops.evicted),
        u8::from(drops.evicted_future),
        0,
        0,
        0,
        0,
        0,
        0,
    ]);
    progress.watermark.write_image(out);
}

fn read_progress(r: &mut Reader<'_>) -> Result<Progress> {
    let parts = r.u32("progress")?;
    r.zeros(4, "progress")?;
    let parts_after = r.u64("progress")?;
    let newest_bucket = r.i64("progress")?;
    let evicted_at = r.i64("progress")?;
    let group_limit = r.records("progress")?;
    let expired = r.records("progress")?;
    let key_too_long = r.records("progress")?;
    let future = r.records("progress")?;
    let [evicted, evicted_future] = r.array::<2>("progress")?;
    r.zeros(6, "progress")?;
    let flag = |byte: u8| match byte {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(malformed(format!("a flag byte of {byte}"))),
    };
    let drops = Drops {
        group_limit,
        expired,
        key_too_long,
        future,
        evicted: flag(evicted)?,
        evicted_future: flag(evicted_future)?,
    };
    let seen = r.records("watermark")?;
    let kept = r.u64("watermark")?;
    let at = r.i64("watermark")?;
    let entries = r.u32("watermark")?;
    r.zeros(4, "watermark")?;
    if entries as usize > WATERMARK_ENTRIES_MAX {
        return Err(malformed(format!(
            "{entries} watermark entries, more than WATERMARK_ENTRIES_MAX"
        )));
    }
    let entries = r.count(
        u64::from(entries),
        WATERMARK_ENTRY_BYTES,
        "watermark entries",
    )?;
    let mut top = Vec::with_capacity(entries);
    for _ in 0..entries {
        top.push((r.i64("watermark")?, r.u64("watermark")?));
    }
    let watermark = Watermark::from_image(seen, kept, at, top)
        .map_err(|reason| malformed(reason.to_string()))?;
    Ok(Progress {
        parts: usize::try_from(parts).unwrap_or(usize::MAX),
        parts_after: usize::try_from(parts_after).unwrap_or(usize::MAX),
        newest_bucket,
        evicted_at,
        drops,
        watermark,
    })
}

/// Appends a sketch's bytes with their length.
fn write_sized(bytes: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(bytes.len()).expect("a sketch's image is below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

fn write_state(state: &AggState, kind: &AggKind, out: &mut Vec<u8>) {
    match state {
        AggState::Count(n) => out.extend_from_slice(&n.to_le_bytes()),
        AggState::Sum {
            fixed,
            exact,
            count,
        } => {
            out.push(u8::from(exact.is_some()));
            out.extend_from_slice(&fixed.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            if let Some(exact) = exact {
                exact.write_image(out);
            }
        }
        AggState::SumInt { sum, count } => {
            out.extend_from_slice(&sum.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        AggState::Min(value) | AggState::Max(value) => {
            out.push(u8::from(value.is_some()));
            if let Some(value) = value {
                out.extend_from_slice(&value.to_bits().to_le_bytes());
            }
        }
        AggState::MinInt(value) | AggState::MaxInt(value) => {
            out.push(u8::from(value.is_some()));
            if let Some(value) = value {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
        AggState::Hll(hll) => write_sized(&hll.encode(), out),
        AggState::Exact(set) => write_sized(&set.encode(), out),
        AggState::Quantiles(q) => {
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            q.encode_state(out);
            let len = u32::try_from(out.len() - at - 4).expect("a KLL state is small");
            out[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
        AggState::Shared => {}
        AggState::Theta(theta) => write_sized(&theta.encode(), out),
        AggState::TopK(top) => write_topk(top, out),
    }
    debug_assert!(matches!(
        (state, kind),
        (AggState::Count(_), AggKind::CountAll | AggKind::Count)
            | (AggState::Sum { .. }, AggKind::Sum | AggKind::Avg)
            | (AggState::SumInt { .. }, AggKind::SumInt)
            | (AggState::Min(_), AggKind::Min)
            | (AggState::Max(_), AggKind::Max)
            | (AggState::MinInt(_), AggKind::MinInt)
            | (AggState::MaxInt(_), AggKind::MaxInt)
            | (AggState::Hll(_), AggKind::Hll { .. })
            | (AggState::Exact(_), AggKind::ExactDistinct)
            | (AggState::Quantiles(_), AggKind::Quantiles { .. })
            | (AggState::Shared, AggKind::QuantilesOf { .. })
            | (AggState::TopK(_), AggKind::TopK { .. })
            | (AggState::Theta(_), AggKind::Theta { .. })
    ));
}

fn write_topk(top: &TopState, out: &mut Vec<u8>) {
    let TopState { counts, names, .. } = top;
    out.push(u8::from(matches!(counts, TopCounts::Sketch(_))));
    let mut sorted: Vec<(&u64, &Box<[u8]>)> = names.iter().collect();
    sorted.sort_unstable_by_key(|&(hash, _)| *hash);
    out.extend_from_slice(&u32::try_from(sorted.len()).expect("bounded").to_le_bytes());
    for (hash, name) in sorted {
        out.extend_from_slice(&hash.to_le_bytes());
        write_sized(name, out);
    }
    match counts {
        TopCounts::Exact(exact) => {
            let mut sorted: Vec<(u64, u64)> = exact.iter().map(|(&k, &n)| (k, n)).collect();
            sorted.sort_unstable();
            let keys = u32::try_from(sorted.len()).expect("at most TOPK_EXACT_KEYS_MAX");
            out.extend_from_slice(&keys.to_le_bytes());
            for (key, n) in sorted {
                out.extend_from_slice(&key.to_le_bytes());
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        TopCounts::Sketch(sketch) => {
            write_sized(&sketch.sketch().encode(), out);
            let candidates = sketch.candidates();
            let count = u32::try_from(candidates.len()).expect("at most CAPACITY_MAX");
            out.extend_from_slice(&count.to_le_bytes());
            for &(key, stored) in candidates {
                out.extend_from_slice(&key.to_le_bytes());
                out.extend_from_slice(&stored.to_le_bytes());
            }
        }
    }
}

/// Reads the next sketch's bytes, after their length.
fn read_sized<'a>(r: &mut Reader<'a>, part: &'static str) -> Result<&'a [u8]> {
    let len = r.u32(part)?;
    r.take(u64::from(len), part)
}

/// A sketch's decoding error, as the image's.
fn sketch_error(error: &cardinal_sketch::Error) -> Error {
    malformed(error.to_string())
}

/// Reads one state of aggregate `kind`, checked against its settings.
fn read_state(r: &mut Reader<'_>, kind: &AggKind) -> Result<AggState> {
    let some = |r: &mut Reader<'_>| match r.u8("state")? {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(malformed(format!("a presence byte of {byte}"))),
    };
    Ok(match *kind {
        AggKind::CountAll | AggKind::Count => AggState::Count(r.records("state")?),
        AggKind::Sum | AggKind::Avg => {
            let has_exact = some(r)?;
            let fixed = r.i128("state")?;
            let count = r.records("state")?;
            let exact = if has_exact {
                let bytes = r.array::<EXACT_SUM_IMAGE_BYTES>("state")?;
                let sum = ExactSum::from_image(&bytes)
                    .ok_or_else(|| malformed("unknown flags of an exact sum".to_string()))?;
                Some(Box::new(sum))
            } else {
                None
            };
            AggState::Sum {
                fixed,
                exact,
                count,
            }
        }
        AggKind::SumInt => {
            let sum = r.i128("state")?;
            let count = r.records("state")?;
            // Each value is below 2^63 in magnitude.
            if sum.unsigned_abs() > u128::from(count) << 63 {
                return Err(malformed(format!("a sum of {count} integers of {sum}")));
            }
            AggState::SumInt { sum, count }
        }
        AggKind::Min | AggKind::Max => {
            let value = if some(r)? {
                Some(f64::from_bits(r.u64("state")?))
            } else {
                None
            };
            if *kind == AggKind::Min {
                AggState::Min(value)
            } else {
                AggState::Max(value)
            }
        }
        AggKind::MinInt | AggKind::MaxInt => {
            let value = if some(r)? {
                Some(r.i64("state")?)
            } else {
                None
            };
            if *kind == AggKind::MinInt {
                AggState::MinInt(value)
            } else {
                AggState::MaxInt(value)
            }
        }
        AggKind::Hll { log2m, regwidth } => {
            let bytes = read_sized(r, "hll")?;
            let settings = Settings::new(log2m, regwidth)?;
            // The header's second byte names the precision: refused
            // before the decoder sizes registers from it.
            if bytes.get(1) != Some(&(((regwidth - 1) << 5) | log2m)) {
                return Err(malformed("an hll of other settings".to_string()));
            }
            let hll = Hll::decode(bytes).map_err(|e| sketch_error(&e))?;
            if hll.settings() != settings {
                return Err(malformed("an hll of other settings".to_string()));
            }
            AggState::Hll(hll)
        }
        AggKind::ExactDistinct => {
            let bytes = read_sized(r, "exact set")?;
            AggState::Exact(ExactSet::decode(bytes).map_err(|e| sketch_error(&e))?)
        }
        AggKind::Quantiles { k, .. } => {
            let bytes = read_sized(r, "quantiles")?;
            let q = Quantiles::decode_state(bytes).map_err(|e| sketch_error(&e))?;
            if q.k() != k {
                return Err(malformed(format!("a quantiles sketch of k = {}", q.k())));
            }
            AggState::Quantiles(Box::new(q))
        }
        AggKind::QuantilesOf { .. } => AggState::Shared,
        AggKind::Theta { lg_k } => {
            let bytes = read_sized(r, "theta")?;
            let theta = Theta::decode_with_lg_k(bytes, lg_k).map_err(|e| sketch_error(&e))?;
            AggState::Theta(Box::new(theta))
        }
        AggKind::TopK { k } => AggState::TopK(Box::new(read_topk(r, k)?)),
    })
}

/// Reads a `topk` state of `k`: its names, then exact counts or a sketch,
/// each as a state of that `k` can be (see [`TopState`]).
fn read_topk(r: &mut Reader<'_>, k: u32) -> Result<TopState> {
    let is_sketch = match r.u8("topk")? {
        0 => false,
        1 => true,
        byte => return Err(malformed(format!("a topk mode of {byte}"))),
    };
    // A fresh state checks k and gives the maps their hasher.
    let AggState::TopK(fresh) = (AggKind::TopK { k }).state()? else {
        unreachable!("a topk kind makes a topk state")
    };
    let TopState { mut names, .. } = *fresh;
    let capacity = TopCounts::capacity(k);
    let names_max = if is_sketch {
        TOPK_NAMES_PER_CANDIDATE_MAX * capacity as usize
    } else {
        TOPK_EXACT_KEYS_MAX
    };
    let count = r.u32("topk")?;
    if count as usize > names_max {
        return Err(malformed(format!(
            "{count} topk names, at most {names_max}"
        )));
    }
    let count = r.count(u64::from(count), TOPK_NAME_BYTES_MIN, "topk names")?;
    names.reserve(count);
    let mut previous = None;
    for _ in 0..count {
        let hash = r.u64("topk")?;
        if previous.is_some_and(|p| hash <= p) {
            return Err(malformed("topk names not in ascending order".to_string()));
        }
        previous = Some(hash);
        names.insert(hash, read_sized(r, "topk")?.into());
    }
    let counts = if is_sketch {
        let table = CountMin::decode(read_sized(r, "topk")?).map_err(|e| sketch_error(&e))?;
        if *table.params() != Params::default() {
            return Err(malformed("a topk table of other parameters".to_string()));
        }
        let count = r.u32("topk")?;
        if count > capacity {
            return Err(malformed(format!(
                "{count} topk candidates, at most {capacity}"
            )));
        }
        let count = r.count(u64::from(count), TOPK_ENTRY_BYTES, "topk candidates")?;
        let mut candidates = Vec::with_capacity(count);
        for _ in 0..count {
            candidates.push((r.u64("topk")?, r.u64("topk")?));
        }
        let heavy = HeavyHitters::from_candidates(table, capacity, &candidates)
            .map_err(|e| sketch_error(&e))?;
        TopCounts::Sketch(Box::new(heavy))
    } else {
        let count = r.u32("topk")?;
        if count as usize > TOPK_EXACT_KEYS_MAX {
            return Err(malformed(format!(
                "{count} exact topk keys, at most TOPK_EXACT_KEYS_MAX"
            )));
        }
        let count = r.count(u64::from(count), TOPK_ENTRY_BYTES, "topk keys")?;
        let mut exact = std::collections::HashMap::default();
        exact.reserve(count);
        let mut previous = None;
        for _ in 0..count {
            let (key, n) = (r.u64("topk")?, r.records("topk")?);
            if previous.is_some_and(|p| key <= p) || n == 0 {
                return Err(malformed(
                    "topk counts not ascending by key, or zero".to_string(),
                ));
            }
            previous = Some(key);
            // While exact, every key counted has its name and only they.
            if !names.contains_key(&key) {
                return Err(malformed("an exact topk key without its name".to_string()));
            }
            exact.insert(key, n);
        }
        if exact.len() != names.len() {
            return Err(malformed("a topk name of no counted key".to_string()));
        }
        TopCounts::Exact(exact)
    };
    Ok(TopState { counts, names, k })
}
