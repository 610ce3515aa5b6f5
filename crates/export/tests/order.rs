//! `Results::new` orders rows exactly as a stable sort by (bucket, dimension
//! values) would, NULLs, empty text, zero bytes and ties included.

use cardinal_event::Timestamp;
use cardinal_export::{Columns, Results, Rows};
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
            ((-2i64..3).prop_map(|day| day * 86_400_000), proptest::collection::vec(dim(), 2)),
            0..60,
        )
    ) {
        let kinds = [AggKind::CountAll];
        // Each row's count is its input position, so ties are told apart.
        let states: Vec<AggState> = (0..rows.len() as u64).map(AggState::Count).collect();
        let mut input = Rows::default();
        for ((bucket, dims), state) in rows.iter().zip(&states) {
            let dims: Vec<Option<&str>> = dims.iter().map(Option::as_deref).collect();
            input.push_row(Timestamp(*bucket), &dims, std::slice::from_ref(state));
        }
        let mut expected: Vec<(i64, Vec<Option<String>>, u64)> = rows
            .iter()
            .enumerate()
            .map(|(i, (bucket, dims))| (*bucket, dims.clone(), i as u64))
            .collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let columns = Columns {
            bucket: Some("day".into()),
            dims: vec!["a".into(), "b".into()],
            aggs: vec!["n".into()],
        };
        let results = Results::new(columns, &kinds, input).expect("matching columns");
        let got: Vec<(i64, Vec<Option<String>>, u64)> = results
            .rows()
            .iter()
            .map(|r| (r.bucket.0, results.dims(r).to_vec(), match r.states[0] { AggState::Count(n) => n, _ => unreachable!() }))
            .collect();
        prop_assert_eq!(got, expected);
    }
}
