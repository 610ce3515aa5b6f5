//! What the engine reads off a compiled plan before it folds anything: the
//! stream the inputs belong to ([`pick_stream`]) and each summary's rollup
//! shape ([`shape_of`], at most [`AGGREGATES_MAX`] aggregates). A leaf: it
//! names nothing else of the crate.

use anyhow::{Context, Result, bail, ensure};
use cardinal_rollup::{AggKind, Shape};
use cardinal_route::{AggregateKind, Plan, Summary};

/// Most aggregates one summary may have: each record's inputs live in a
/// fixed array on the stack, so routing allocates nothing.
pub const AGGREGATES_MAX: usize = 16;

/// The stream the inputs of `plan` belong to: the one called `name`
/// (case-insensitive), or the only one declared when `name` is `None`.
/// Credit streams, written by attributions, are never picked.
pub fn pick_stream(plan: &Plan, name: Option<&str>) -> Result<usize> {
    // Credit streams are written by attributions, not read from inputs.
    let inputs: Vec<usize> = (0..plan.streams.len())
        .filter(|&i| plan.streams[i].credit_of.is_none())
        .collect();
    let names = || {
        inputs
            .iter()
            .map(|&i| plan.streams[i].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(name) => inputs
            .iter()
            .copied()
            .find(|&i| plan.streams[i].name.eq_ignore_ascii_case(name))
            .with_context(|| format!("no stream called {name} (declared: {})", names())),
        None => match inputs[..] {
            [only] => Ok(only),
            [] => bail!("the schema declares no stream (CREATE STREAM ...)"),
            _ => bail!(
                "the schema declares {} streams ({}); say which one the inputs are with --stream",
                inputs.len(),
                names()
            ),
        },
    }
}

/// The rollup shape of a compiled summary.
pub fn shape_of(summary: &Summary) -> Result<Shape> {
    ensure!(
        summary.aggregates.len() <= AGGREGATES_MAX,
        "summary {} has {} aggregates; at most {AGGREGATES_MAX}",
        summary.name,
        summary.aggregates.len()
    );
    let aggs = summary
        .aggregates
        .iter()
        .enumerate()
        .map(|(index, a)| -> Result<AggKind> {
            // A quantile aggregate over the argument and k of an earlier
            // one reads that one's sketch.
            if let AggregateKind::Quantiles { k, ranks } = &a.kind
                && let Some(of) = summary.aggregates[..index].iter().position(|b| {
                    b.argument == a.argument
                        && matches!(b.kind, AggregateKind::Quantiles { k: other, .. } if other == *k)
                })
            {
                return Ok(AggKind::QuantilesOf {
                    of: u8::try_from(of).expect("at most AGGREGATES_MAX aggregates"),
                    ranks: cardinal_rollup::Ranks::new(ranks)?,
                });
            }
            Ok(match &a.kind {
                AggregateKind::CountAll => AggKind::CountAll,
                AggregateKind::Count => AggKind::Count,
                AggregateKind::Sum => AggKind::Sum,
                AggregateKind::SumInt => AggKind::SumInt,
                AggregateKind::Min => AggKind::Min,
                AggregateKind::MinInt => AggKind::MinInt,
                AggregateKind::Max => AggKind::Max,
                AggregateKind::MaxInt => AggKind::MaxInt,
                AggregateKind::Avg => AggKind::Avg,
                AggregateKind::Hll { log2m, regwidth } => AggKind::Hll {
                    log2m: *log2m,
                    regwidth: *regwidth,
                },
                AggregateKind::ExactDistinct => AggKind::ExactDistinct,
                AggregateKind::Quantiles { k, ranks } => AggKind::Quantiles {
                    k: *k,
                    ranks: cardinal_rollup::Ranks::new(ranks)?,
                },
                AggregateKind::TopK { k } => AggKind::TopK { k: *k },
                AggregateKind::Theta { lg_k } => AggKind::Theta { lg_k: *lg_k },
            })
        })
        .collect::<Result<_>>()?;
    Ok(Shape { aggs })
}
