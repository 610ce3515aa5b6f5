//! Attribution models against hand-computed examples (issue 4), including
//! ties, empty chains and touch points outside the lookback window.

use std::num::NonZeroU64;

use cardinal_chains::attribution::{Conversion, Credit, Model, attribute};
use cardinal_chains::{CampaignId, Kind, Record, SiteId, UserId};

const DAY_MS: u64 = 24 * 3600 * 1000;

fn touch(time_ms: u64, campaign: u32, kind: Kind) -> Record {
    Record::new(time_ms, kind, CampaignId(campaign), SiteId(1)).expect("time in range")
}

fn conversion(time_ms: u64) -> Conversion {
    Conversion {
        user: UserId(9),
        time_ms,
        revenue_micros: 70_000_000,
    }
}

fn is_touch(r: &Record) -> bool {
    r.kind == Kind::CLICK || r.kind == Kind::IMPRESSION
}

/// (campaign, credit) pairs, in row order.
fn credits(chain: &[Record], conv: Conversion, lookback_ms: u64, model: Model) -> Vec<(u32, f64)> {
    let mut out: Vec<Credit> = Vec::new();
    let n = attribute(&conv, chain, lookback_ms, model, is_touch, &mut out);
    assert_eq!(n, out.len());
    for row in &out {
        assert_eq!(row.conversion, conv);
        assert_eq!(chain[row.touch_index], row.touch);
        assert!((row.revenue_micros - row.credit * 70_000_000.0).abs() < 1e-6);
    }
    if !out.is_empty() {
        let total: f64 = out.iter().map(|c| c.credit).sum();
        assert!((total - 1.0).abs() < 1e-12, "credits sum to {total}");
    }
    out.iter().map(|c| (c.touch.campaign.0, c.credit)).collect()
}

fn assert_close(got: &[(u32, f64)], want: &[(u32, f64)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{got:?} vs {want:?}");
        assert!((g.1 - w.1).abs() < 1e-12, "{got:?} vs {want:?}");
    }
}

/// Touches at days 0, 10, 20 (campaigns 1, 2, 3), conversion at day 20.
fn three_touches() -> Vec<Record> {
    vec![
        touch(0, 1, Kind::CLICK),
        touch(10 * DAY_MS, 2, Kind::IMPRESSION),
        touch(20 * DAY_MS, 3, Kind::CLICK),
    ]
}

#[test]
fn every_model_on_three_touches() {
    let chain = three_touches();
    let conv = conversion(20 * DAY_MS);
    let lookback = 30 * DAY_MS;
    assert_close(
        &credits(&chain, conv, lookback, Model::LastTouch),
        &[(3, 1.0)],
    );
    assert_close(
        &credits(&chain, conv, lookback, Model::FirstTouch),
        &[(1, 1.0)],
    );
    let third = 1.0 / 3.0;
    assert_close(
        &credits(&chain, conv, lookback, Model::Linear),
        &[(1, third), (2, third), (3, third)],
    );
    // Ages 20, 10, 0 days with a 10-day half-life: weights 1/4, 1/2, 1;
    // their sum is 7/4, so 1/7, 2/7, 4/7.
    let half_life_ms = NonZeroU64::new(10 * DAY_MS).expect("non-zero");
    assert_close(
        &credits(&chain, conv, lookback, Model::TimeDecay { half_life_ms }),
        &[(1, 1.0 / 7.0), (2, 2.0 / 7.0), (3, 4.0 / 7.0)],
    );
    assert_close(
        &credits(&chain, conv, lookback, Model::PositionBased),
        &[(1, 0.4), (2, 0.2), (3, 0.4)],
    );
}

#[test]
fn position_based_for_one_two_and_five_touches() {
    let conv = conversion(100);
    let one = [touch(50, 1, Kind::CLICK)];
    assert_close(
        &credits(&one, conv, 1000, Model::PositionBased),
        &[(1, 1.0)],
    );
    let two = [touch(50, 1, Kind::CLICK), touch(60, 2, Kind::CLICK)];
    assert_close(
        &credits(&two, conv, 1000, Model::PositionBased),
        &[(1, 0.5), (2, 0.5)],
    );
    let five: Vec<Record> = (1..=5)
        .map(|c| touch(10 * u64::from(c), c, Kind::CLICK))
        .collect();
    // 0.2 shared by three middle touches: 1/15 each.
    let m = 0.2 / 3.0;
    assert_close(
        &credits(&five, conv, 1000, Model::PositionBased),
        &[(1, 0.4), (2, m), (3, m), (4, m), (5, 0.4)],
    );
}

#[test]
fn empty_chain_and_no_touch_points_give_no_rows() {
    let conv = conversion(100);
    for model in [
        Model::LastTouch,
        Model::FirstTouch,
        Model::Linear,
        Model::PositionBased,
    ] {
        assert!(credits(&[], conv, 1000, model).is_empty());
        // Visits are not touch points under this filter.
        assert!(credits(&[touch(50, 1, Kind::VISIT)], conv, 1000, model).is_empty());
    }
}

#[test]
fn touch_points_outside_the_window_earn_nothing() {
    let conv = conversion(10 * DAY_MS);
    let chain = [
        touch(0, 1, Kind::CLICK),          // 10 days before: outside a 7-day window
        touch(3 * DAY_MS, 2, Kind::CLICK), // exactly 7 days before: inside (inclusive)
        touch(5 * DAY_MS, 3, Kind::CLICK), // inside
        touch(10 * DAY_MS + 1, 4, Kind::CLICK), // after the conversion: outside
    ];
    let lookback = 7 * DAY_MS;
    assert_close(
        &credits(&chain, conv, lookback, Model::FirstTouch),
        &[(2, 1.0)],
    );
    assert_close(
        &credits(&chain, conv, lookback, Model::LastTouch),
        &[(3, 1.0)],
    );
    assert_close(
        &credits(&chain, conv, lookback, Model::Linear),
        &[(2, 0.5), (3, 0.5)],
    );
    // A window reaching before the epoch saturates at 0.
    assert_close(
        &credits(&chain, conv, u64::MAX, Model::FirstTouch),
        &[(1, 1.0)],
    );
}

#[test]
fn ties_are_broken_by_chain_order() {
    let conv = conversion(100);
    // Appended out of time order; two touches share t = 80 and two t = 20.
    let chain = [
        touch(80, 1, Kind::CLICK),
        touch(20, 2, Kind::CLICK),
        touch(80, 3, Kind::CLICK),
        touch(20, 4, Kind::CLICK),
    ];
    // Time order: 2 (20), 4 (20), 1 (80), 3 (80). The later-appended of the
    // two latest is last; the earlier-appended of the two earliest is first.
    assert_close(&credits(&chain, conv, 1000, Model::LastTouch), &[(3, 1.0)]);
    assert_close(&credits(&chain, conv, 1000, Model::FirstTouch), &[(2, 1.0)]);
    assert_close(
        &credits(&chain, conv, 1000, Model::PositionBased),
        &[(2, 0.4), (4, 0.1), (1, 0.1), (3, 0.4)],
    );
    // Equal ages get equal time-decay weights: 2^-0.8 for t = 20 and 2^-0.2
    // for t = 80 with a 100 ms half-life.
    let half_life_ms = NonZeroU64::new(100).expect("non-zero");
    let (old, new) = (2f64.powf(-0.8), 2f64.powf(-0.2));
    let total = 2.0 * (old + new);
    assert_close(
        &credits(&chain, conv, 1000, Model::TimeDecay { half_life_ms }),
        &[
            (2, old / total),
            (4, old / total),
            (1, new / total),
            (3, new / total),
        ],
    );
}

#[test]
fn time_decay_with_a_vanishing_half_life_falls_back_to_linear() {
    let conv = conversion(u64::from(u32::MAX) * 1000);
    let chain = [touch(0, 1, Kind::CLICK), touch(1, 2, Kind::CLICK)];
    let half_life_ms = NonZeroU64::new(1).expect("non-zero");
    assert_close(
        &credits(&chain, conv, u64::MAX, Model::TimeDecay { half_life_ms }),
        &[(1, 0.5), (2, 0.5)],
    );
}

#[test]
fn rows_append_after_existing_ones() {
    let chain = three_touches();
    let conv = conversion(20 * DAY_MS);
    let mut out = Vec::new();
    attribute(
        &conv,
        &chain,
        30 * DAY_MS,
        Model::Linear,
        is_touch,
        &mut out,
    );
    attribute(
        &conv,
        &chain,
        30 * DAY_MS,
        Model::LastTouch,
        is_touch,
        &mut out,
    );
    assert_eq!(out.len(), 4);
    assert_eq!(out[3].touch.campaign, CampaignId(3));
    assert_eq!(out[3].credit, 1.0);
}
