//! How a routed record becomes aggregate updates: each summary's feeds.

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Folded, KeyHash, Rollup, Shape};
use cardinal_route::{Arg, Routed, Summary};

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
