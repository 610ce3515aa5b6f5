//! How a routed record becomes aggregate updates: each summary's feeds.

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Folded, KeyHash, Rollup, Shape};
use cardinal_route::{Arg, Routed, Summary};

use crate::batch::Counts;
use crate::fold::REJECTS_SHOWN_MAX;

/// How one aggregate takes a routed record, decided once per run from
/// its kind, so that folding a record is one `match` per aggregate on a
/// small enum and a direct call of the state's method: no [`cardinal_rollup::Input`] per
/// aggregate, no dispatch on (kind, argument) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feed {
    /// `count(*)`: every record.
    CountAll,
    /// `count(x)`: records whose argument `x` (an index into the routed
    /// arguments) is not NULL.
    Count(usize),
    /// sum, avg, min, max, quantiles: the argument as a number.
    Number(usize),
    /// hll, theta, exact_distinct: the argument's hash (and integer id).
    Key(usize),
    /// topk: the argument's hash, named by its text or printed integer.
    TopK(usize),
    /// Nothing: a quantile aggregate that reads another's sketch.
    Skip,
}

/// The feeds of a summary's aggregates, in shape order.
pub(crate) fn feeds_of(summary: &Summary, shape: &Shape) -> Vec<Feed> {
    summary
        .aggregates
        .iter()
        .zip(&shape.aggs)
        .map(|(aggregate, kind)| match (kind, aggregate.argument) {
            (AggKind::CountAll, _) | (_, None) => Feed::CountAll,
            (AggKind::Count, Some(a)) => Feed::Count(a),
            (
                AggKind::Sum
                | AggKind::SumInt
                | AggKind::Avg
                | AggKind::Min
                | AggKind::MinInt
                | AggKind::Max
                | AggKind::MaxInt
                | AggKind::Quantiles { .. },
                Some(a),
            ) => Feed::Number(a),
            (AggKind::Hll { .. } | AggKind::Theta { .. } | AggKind::ExactDistinct, Some(a)) => {
                Feed::Key(a)
            }
            (AggKind::TopK { .. }, Some(a)) => Feed::TopK(a),
            (AggKind::QuantilesOf { .. }, Some(_)) => Feed::Skip,
        })
        .collect()
}

/// Folds one routed record into `rollup` through the summary's `feeds`.
/// Top-k reports names: text is the routed argument's bytes; an integer is
/// printed when it becomes a candidate.
#[inline]
pub(crate) fn fold_routed(
    feeds: &[Feed],
    rollup: &mut Rollup,
    routed: &Routed,
    hashed: &mut HashMemo,
    key_hash: Option<KeyHash>,
) -> Folded {
    let bucket = routed.bucket.unwrap_or(Timestamp(0));
    rollup.fold_hashed(key_hash, bucket, &routed.key, |states| {
        update_states(feeds, states, &routed.args, |a| routed.text_of(a), hashed);
    })
}

/// [`fold_routed`] for a route whose group is known to be `at`
/// ([`cardinal_rollup::Rollup::fold_at`]): its key is not read.
#[inline]
pub(crate) fn fold_routed_at(
    feeds: &[Feed],
    rollup: &mut Rollup,
    routed: &Routed,
    hashed: &mut HashMemo,
    at: cardinal_rollup::GroupAt,
) -> Folded {
    let bucket = routed.bucket.unwrap_or(Timestamp(0));
    rollup.fold_at(at, bucket, |states| {
        update_states(feeds, states, &routed.args, |a| routed.text_of(a), hashed);
    })
}

/// Folds a route's arguments into its group's `states` through `feeds`.
#[inline(always)]
pub(crate) fn update_states<'t>(
    feeds: &[Feed],
    states: &mut [cardinal_rollup::AggState],
    args: &[Arg],
    text_of: impl Fn(usize) -> &'t [u8],
    hashed: &mut HashMemo,
) {
    for (state, &feed) in states.iter_mut().zip(feeds) {
        match feed {
            Feed::CountAll => state.fold_count(),
            Feed::Skip => {}
            Feed::Count(a) => {
                if args[a] != Arg::Null {
                    state.fold_count();
                }
            }
            Feed::Number(a) => fold_number_arg(state, &args[a]),
            Feed::Key(a) => {
                // By reference: a copy of the enum went through the
                // stack in pieces and was read back whole, a
                // store-forwarding stall per fold (perf annotate).
                let arg = &args[a];
                if let Some(hash) = hashed.hash(arg) {
                    state.fold_key(hash, id_of(arg));
                }
            }
            Feed::TopK(a) => {
                let arg = &args[a];
                if let Some(hash) = hashed.hash(arg) {
                    state.fold_topk(hash, || match *arg {
                        Arg::Int(v) => v.to_string().into_bytes().into(),
                        _ => text_of(a).into(),
                    });
                }
            }
        }
    }
}

/// Folds a routed argument into a sum, avg, min, max or quantiles state:
/// integers as integers (exact in integer sums, minima and maxima), the
/// rest as numbers. Always inlined: it is one match in each fold loop,
/// and as a call (LTO's choice with plain `#[inline]`) it was 1% of
/// Query 2A's samples.
#[inline(always)]
pub(crate) fn fold_number_arg(state: &mut cardinal_rollup::AggState, arg: &Arg) {
    match *arg {
        Arg::Int(i) => state.fold_int(i),
        Arg::Float(f) => state.fold_number(f),
        #[expect(clippy::cast_precision_loss, reason = "|ms| < 2^53 for every instant")]
        Arg::Time(t) => state.fold_number(t.0 as f64),
        Arg::Bool(b) => state.fold_number(f64::from(u8::from(b))),
        Arg::Null | Arg::Text { .. } => {}
    }
}

/// The integer id exact sets keep (the hash for text).
#[inline]
pub(crate) fn id_of(arg: &Arg) -> Option<u64> {
    match *arg {
        Arg::Int(i) => Some(u64::from_ne_bytes(i.to_ne_bytes())),
        _ => None,
    }
}

pub(crate) fn where_(record: &cardinal_parse::RecordRef<'_>) -> String {
    match record.line() {
        Some(line) => line.to_string(),
        None => format!("byte {}", record.offset()),
    }
}

/// `e` as a reject line shows it: its column counted from 1 and named
/// (`column 2 (user_id): not a BIGINT`).
pub(crate) fn eval_text(e: &cardinal_route::EvalError, schema: &cardinal_event::Schema) -> String {
    match e.column().and_then(|c| Some((c, schema.columns.get(c)?))) {
        Some((c, column)) => format!("column {} ({}): {}", c + 1, column.name, eval_reason(e)),
        None => e.to_string(),
    }
}

pub(crate) fn eval_reason(e: &cardinal_route::EvalError) -> String {
    let text = e.to_string();
    // "column N: reason" -> the reason, so counts group by kind.
    text.split_once(": ")
        .map_or(text.clone(), |(_, reason)| reason.to_string())
}

pub(crate) fn reject(
    counts: &mut Counts,
    lines: &mut String,
    shown: &std::sync::atomic::AtomicU64,
    reason: &str,
    text: &str,
) {
    counts.rejects += 1;
    *counts
        .rejects_by_reason
        .entry(reason.to_string())
        .or_default() += 1;
    if shown.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < REJECTS_SHOWN_MAX {
        eprintln!("{}rejected: {text}", crate::progress::erase());
    }
    lines.push_str(text);
    lines.push('\n');
}

/// The hash of the last integer argument hashed: summaries that count the
/// same user id one after the other hash it once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HashMemo {
    value: i64,
    hash: u64,
}

impl Default for HashMemo {
    fn default() -> Self {
        Self {
            value: 0,
            hash: cardinal_sketch::hash::user_id(0),
        }
    }
}

impl HashMemo {
    fn hash(&mut self, arg: &Arg) -> Option<u64> {
        match *arg {
            Arg::Int(value) => {
                if value != self.value {
                    *self = Self {
                        value,
                        hash: cardinal_sketch::hash::user_id(u64::from_ne_bytes(
                            value.to_ne_bytes(),
                        )),
                    };
                }
                Some(self.hash)
            }
            _ => arg.hash(),
        }
    }
}

/// The stable, snake_case code of a reject reason as [`Counts`] keys it
/// (`rejects_by_reason`): what `/metrics` labels rejects with, where the
/// reasons' wording may change. Every reason the engine gives has its own
/// code (a test walks them); `other` is for none of them.
pub fn reject_code(reason: &str) -> &'static str {
    use cardinal_event::ValueError;
    use cardinal_parse::RejectReason;
    let parsed = RejectReason::ALL
        .iter()
        .find(|r| r.to_string() == reason)
        .map(|r| match r {
            RejectReason::FieldsMax => "fields_max",
            RejectReason::RecordBytesMax => "record_bytes_max",
            RejectReason::TooFewFields => "too_few_fields",
            RejectReason::TooManyFields => "too_many_fields",
            RejectReason::UnterminatedQuote => "unterminated_quote",
            RejectReason::TextAfterQuote => "text_after_quote",
            RejectReason::NotAnObject => "not_an_object",
            RejectReason::JsonSyntax => "json_syntax",
            RejectReason::BadEscape => "bad_escape",
            RejectReason::NotScalar => "not_scalar",
            RejectReason::DepthMax => "depth_max",
            RejectReason::DuplicateKey => "duplicate_key",
            RejectReason::InvalidUtf8 => "invalid_utf8",
            _ => "other",
        });
    if let Some(code) = parsed {
        return code;
    }
    let values = [
        (ValueError::BigInt, "not_bigint"),
        (ValueError::Double, "not_double"),
        (ValueError::Bool, "not_boolean"),
        (ValueError::Timestamp, "not_timestamp"),
        (ValueError::OutOfRange, "out_of_range"),
    ];
    if let Some((_, code)) = values.iter().find(|(v, _)| v.to_string() == reason) {
        return code;
    }
    let evaluated = [
        (
            cardinal_route::EvalError::MissingTime { column: 0 },
            "no_event_time",
        ),
        (cardinal_route::EvalError::Overflow, "integer_overflow"),
        (
            cardinal_route::EvalError::DivisionByZero,
            "division_by_zero",
        ),
    ];
    if let Some((_, code)) = evaluated.iter().find(|(e, _)| eval_reason(e) == reason) {
        return code;
    }
    match reason {
        KEY_TOO_LONG => "key_too_long",
        crate::worker::LINE_TOO_LONG => "line_too_long",
        crate::worker::INPUT_CUT_SHORT => "input_unreadable",
        crate::worker::BAD_HEADER => "bad_header",
        _ => "other",
    }
}

/// Every code [`reject_code`] gives, `other` last.
pub const REJECT_CODES: [&str; 26] = [
    "fields_max",
    "record_bytes_max",
    "too_few_fields",
    "too_many_fields",
    "unterminated_quote",
    "text_after_quote",
    "not_an_object",
    "json_syntax",
    "bad_escape",
    "not_scalar",
    "depth_max",
    "duplicate_key",
    "invalid_utf8",
    "not_bigint",
    "not_double",
    "not_boolean",
    "not_timestamp",
    "out_of_range",
    "no_event_time",
    "integer_overflow",
    "division_by_zero",
    "key_too_long",
    "line_too_long",
    "input_unreadable",
    "bad_header",
    "other",
];

/// The reject reason of a record whose group key is longer than
/// `rollup::KEY_BYTES_MAX`.
pub(crate) const KEY_TOO_LONG: &str = "group key too long";

#[cfg(test)]
mod reject_code_tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_code() {
        use cardinal_event::ValueError;
        let mut reasons: Vec<String> = cardinal_parse::RejectReason::ALL
            .iter()
            .map(ToString::to_string)
            .collect();
        for value in [
            ValueError::BigInt,
            ValueError::Double,
            ValueError::Bool,
            ValueError::Timestamp,
            ValueError::OutOfRange,
        ] {
            let field = cardinal_route::EvalError::Field {
                column: 3,
                reason: value,
            };
            reasons.push(eval_reason(&field));
        }
        for e in [
            cardinal_route::EvalError::MissingTime { column: 2 },
            cardinal_route::EvalError::Overflow,
            cardinal_route::EvalError::DivisionByZero,
        ] {
            reasons.push(eval_reason(&e));
        }
        for constant in [
            KEY_TOO_LONG,
            crate::worker::LINE_TOO_LONG,
            crate::worker::INPUT_CUT_SHORT,
            crate::worker::BAD_HEADER,
        ] {
            reasons.push(constant.to_owned());
        }
        let mut codes: Vec<&str> = reasons.iter().map(|r| reject_code(r)).collect();
        assert!(!codes.contains(&"other"), "{reasons:?} -> {codes:?}");
        assert_eq!(codes.len(), REJECT_CODES.len() - 1);
        for code in &codes {
            assert!(REJECT_CODES.contains(code), "{code}");
            assert!(
                code.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{code} is snake_case"
            );
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), REJECT_CODES.len() - 1, "codes are distinct");
        assert_eq!(reject_code("something new"), "other");
    }
}
