// `every_kind()`: the shape the rollup image tests and the `rollup_image`
// fuzz target share, whose seed images (`tests/fuzz/rollup_image/seed-*`)
// start the fuzz corpus. Included by both; the includer imports `AggKind`,
// `Ranks` and `Shape`.

/// Every aggregate kind, with settings small enough that a few hundred
/// records take sketches out of their exact modes (HLL to registers, KLL
/// compacting, top-k to a Count-Min sketch past 1,024 keys is too many
/// for a test: k = 2 keeps candidates few and evictions frequent).
fn every_kind() -> Shape {
    let ranks = |r: &[f64]| Ranks::new(r).expect("valid ranks");
    Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Count,
            AggKind::Sum,
            AggKind::SumInt,
            AggKind::Avg,
            AggKind::Min,
            AggKind::MinInt,
            AggKind::Max,
            AggKind::MaxInt,
            AggKind::Hll {
                log2m: 6,
                regwidth: 5,
            },
            AggKind::ExactDistinct,
            AggKind::Quantiles {
                k: 8,
                ranks: ranks(&[0.5]),
            },
            AggKind::QuantilesOf {
                of: 11,
                ranks: ranks(&[0.1, 0.9]),
            },
            AggKind::TopK { k: 2 },
            AggKind::Theta { lg_k: 5 },
        ],
    }
}
