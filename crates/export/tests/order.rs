//! `Results::new` orders rows exactly as a stable sort by (bucket, dimension
//! values) would, NULLs, empty text, zero bytes and ties included.

use cardinal_event::Timestamp;
use cardinal_export::{Columns, ResultRow, Results};
use cardinal_rollup::{AggKind, AggState};
use proptest::prelude::*;

fn dim() -> impl Strategy<Value = Option<String>> {
    // Few distinct characters (NUL and 0xff-ish bytes among them) so that
    // prefixes, escapes and exact ties all happen.
    prop_oneof![
        1 => Just(None),
        6 => proptest::collection::vec(prop_oneof![Just('\0'), Just('a'), Just('b'), Just('ÿ')], 0..12)
            .prop_map(|chars| Some(chars.into_iter().collect::<String>())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rows_sort_as_a_stable_sort_by_bucket_and_dims(
        rows in proptest::collection::vec(
            ((0i64..3), proptest::collection::vec(dim(), 2)),
            0..60,
        )
    ) {
        let kinds = [AggKind::CountAll];
        // Each row's count is its input position, so ties are told apart.
        let states: Vec<AggState> = (0..rows.len() as u64).map(AggState::Count).collect();
        let input: Vec<ResultRow<'_>> = rows
            .iter()
            .zip(&states)
            .map(|((bucket, dims), state)| ResultRow {
                bucket: Timestamp(*bucket),
                dims: dims.clone(),
                states: std::slice::from_ref(state),
            })
            .collect();
        let mut expected = input.clone();
        expected.sort_by(|a, b| a.bucket.cmp(&b.bucket).then_with(|| a.dims.cmp(&b.dims)));
        let columns = Columns {
            bucket: Some("day".into()),
            dims: vec!["a".into(), "b".into()],
            aggs: vec!["n".into()],
        };
        let results = Results::new(columns, &kinds, input).expect("matching columns");
        let got: Vec<(i64, Vec<Option<String>>, u64)> = results
            .rows()
            .iter()
            .map(|r| (r.bucket.0, r.dims.clone(), match r.states[0] { AggState::Count(n) => n, _ => unreachable!() }))
            .collect();
        let want: Vec<(i64, Vec<Option<String>>, u64)> = expected
            .iter()
            .map(|r| (r.bucket.0, r.dims.clone(), match r.states[0] { AggState::Count(n) => n, _ => unreachable!() }))
            .collect();
        prop_assert_eq!(got, want);
    }
}
