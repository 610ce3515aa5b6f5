//! Attribution: how much of a conversion each touch point earns.
//!
//! Pure functions over a chain (as [`crate::ShardGroup::take`] returns it)
//! and a conversion. The touch points are the records the caller's filter
//! accepts whose time lies in the lookback window `[conversion - lookback,
//! conversion]`, both ends included; records after the conversion or before
//! the window earn nothing. Touch points are ordered by time, and records
//! with equal times keep their chain (append) order, so ties are broken the
//! same way every time: the later-appended of two equal-time touches is the
//! "last" one.
//!
//! | model | credit of touch i of n (in time order) |
//! |---|---|
//! | last-touch | 1 for i = n, else 0 |
//! | first-touch | 1 for i = 1, else 0 |
//! | linear | 1/n |
//! | time-decay | 2^(-age_i / half_life), normalized to sum to 1 |
//! | position-based | n = 1: 1; n = 2: 1/2 each; n >= 3: 0.4 first, 0.4 last, 0.2/(n-2) each between |
//!
//! Position-based is the "U-shaped" 40/20/40 model of Google Analytics;
//! time-decay is its 7-day half-life model with the half-life a parameter.
//! Credits of one conversion sum to 1 (within floating-point rounding)
//! unless there are no touch points, when there are no rows. Zero-credit
//! rows (the non-winners of first- and last-touch) are not emitted.
//!
//! Worked example (hand-computed in the tests): touches at t = 0, 10, 20
//! days, conversion at 20 days, half-life 10 days: raw weights 1/4, 1/2, 1,
//! normalized 1/7, 2/7, 4/7.

use std::num::NonZeroU64;

use crate::record::Record;
use crate::store::UserId;

/// An attribution model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// All credit to the latest touch point.
    LastTouch,
    /// All credit to the earliest touch point.
    FirstTouch,
    /// Equal credit to every touch point.
    Linear,
    /// Credit halves for every `half_life_ms` between touch and conversion.
    TimeDecay {
        /// The half-life in milliseconds.
        half_life_ms: NonZeroU64,
    },
    /// 40% to the first, 40% to the last, 20% shared by the ones between.
    PositionBased,
}

/// A conversion to attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversion {
    /// The user who converted.
    pub user: UserId,
    /// When, in milliseconds since the epoch.
    pub time_ms: u64,
    /// The conversion's value in micro-units.
    pub revenue_micros: i64,
}

/// One attribution row: a conversion, one of its touch points and the
/// share of the conversion it earned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Credit {
    /// The conversion.
    pub conversion: Conversion,
    /// The touch point's position in the chain.
    pub touch_index: usize,
    /// The touch point.
    pub touch: Record,
    /// Its share, in `(0, 1]`.
    pub credit: f64,
    /// `credit * conversion.revenue_micros`.
    pub revenue_micros: f64,
}

/// Appends to `out` the credit rows of `conversion` over `chain`, under
/// `model`, counting only records for which `is_touch` holds within
/// `lookback_ms` before the conversion. Returns the number of rows added.
pub fn attribute(
    conversion: &Conversion,
    chain: &[Record],
    lookback_ms: u64,
    model: Model,
    is_touch: impl Fn(&Record) -> bool,
    out: &mut Vec<Credit>,
) -> usize {
    let start = out.len();
    let window_start = conversion.time_ms.saturating_sub(lookback_ms);
    for (touch_index, touch) in chain.iter().enumerate() {
        let t = touch.time_ms();
        if is_touch(touch) && window_start <= t && t <= conversion.time_ms {
            out.push(Credit {
                conversion: *conversion,
                touch_index,
                touch: *touch,
                credit: 0.0,
                revenue_micros: 0.0,
            });
        }
    }
    let rows = &mut out[start..];
    // Stable: equal times keep chain order.
    rows.sort_by_key(|c| c.touch.time_ms());
    let n = rows.len();
    if n == 0 {
        return 0;
    }
    match model {
        Model::LastTouch => rows[n - 1].credit = 1.0,
        Model::FirstTouch => rows[0].credit = 1.0,
        Model::Linear => rows.iter_mut().for_each(|c| c.credit = 1.0 / n as f64),
        Model::TimeDecay { half_life_ms } => {
            let half_life = half_life_ms.get() as f64;
            let mut total = 0.0;
            for c in rows.iter_mut() {
                let age = (conversion.time_ms - c.touch.time_ms()) as f64;
                c.credit = (-age / half_life).exp2();
                total += c.credit;
            }
            // The newest touch has weight >= 2^(-lookback / half_life) > 0,
            // but it can underflow for absurd ratios: fall back to linear.
            if total > 0.0 && total.is_finite() {
                rows.iter_mut().for_each(|c| c.credit /= total);
            } else {
                rows.iter_mut().for_each(|c| c.credit = 1.0 / n as f64);
            }
        }
        Model::PositionBased => match n {
            1 => rows[0].credit = 1.0,
            2 => rows.iter_mut().for_each(|c| c.credit = 0.5),
            _ => {
                let middle = 0.2 / (n - 2) as f64;
                rows.iter_mut().for_each(|c| c.credit = middle);
                rows[0].credit = 0.4;
                rows[n - 1].credit = 0.4;
            }
        },
    }
    let revenue = conversion.revenue_micros as f64;
    rows.iter_mut()
        .for_each(|c| c.revenue_micros = c.credit * revenue);
    // Drop the zero-credit rows of first- and last-touch, keeping order.
    let mut kept = start;
    for i in start..out.len() {
        if out[i].credit > 0.0 {
            out[kept] = out[i];
            kept += 1;
        }
    }
    out.truncate(kept);
    debug_assert!((out[start..].iter().map(|c| c.credit).sum::<f64>() - 1.0).abs() < 1e-9);
    kept - start
}
