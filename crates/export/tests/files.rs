//! Per-day files, JSON lines and tables from a small rollup.

use cardinal_event::Timestamp;
use cardinal_export::{
    Columns, Options, Results, Rows, table, table_head, write_daily_csv, write_json_lines,
};
use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
use cardinal_sketch::hash;

const DAY: i64 = 86_400_000;

/// The rollup's groups as results, the key bytes being the state's name.
fn results<'a>(columns: &Columns, rollup: &'a Rollup) -> Results<'a> {
    let mut rows = Rows::default();
    for (bucket, key, states) in rollup.groups() {
        rows.push_row(bucket, &[Some(&String::from_utf8_lossy(key))], states);
    }
    Results::new(columns.clone(), &rollup.shape().aggs, rows).expect("matching columns")
}

fn sample() -> (Columns, Rollup) {
    let shape = Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Sum,
            AggKind::Hll {
                log2m: 11,
                regwidth: 5,
            },
        ],
    };
    let mut rollup = Rollup::new(shape, Limits::default()).expect("valid");
    for (day, state, user, revenue) in [
        (0, "CA", 1u64, 1.5),
        (0, "CA", 2, 2.0),
        (0, "NY, \"upstate\"", 1, 0.25),
        (1, "CA", 3, 4.0),
        (1, "CA", 3, 4.0),
    ] {
        let key = Input::Key {
            hash: hash::bigint(i64::try_from(user).expect("small"), 0),
            id: Some(user),
            text: &[],
        };
        rollup.fold(
            Timestamp(day * DAY + 3_600_000),
            state.as_bytes(),
            &[Input::Null, Input::Number(revenue), key],
        );
    }
    let columns = Columns {
        bucket: Some("hour".into()),
        dims: vec!["state".into()],
        aggs: vec!["events".into(), "revenue".into(), "users".into()],
    };
    (columns, rollup)
}

#[test]
fn one_atomic_file_per_day() {
    let (columns, rollup) = sample();
    let dir = std::env::temp_dir().join(format!("cardinal-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = write_daily_csv(
        &dir,
        "reach",
        &results(&columns, &rollup),
        Options {
            hll_hex: true,
            sketch_bytes: None,
        },
    )
    .expect("written");
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["1970-01-01.csv", "1970-01-02.csv"]);
    let first = std::fs::read_to_string(&files[0]).expect("readable");
    assert_eq!(
        first,
        "hour,state,events,revenue,users,users_lower,users_upper,users_hll\n\
         1970-01-01T01:00:00Z,CA,2,3.5,2,2,2,\\x128b7fde0820a06c76c0a8004403b7fb05c44a\n\
         1970-01-01T01:00:00Z,\"NY, \"\"upstate\"\"\",1,0.25,1,1,1,\\x128b7f004403b7fb05c44a\n"
    );
    // No temp files are left behind.
    let leftovers = std::fs::read_dir(dir.join("reach")).expect("dir").count();
    assert_eq!(leftovers, 2);
    // Writing again replaces the files whole.
    write_daily_csv(
        &dir,
        "reach",
        &results(&columns, &rollup),
        Options::default(),
    )
    .expect("written");
    assert!(
        !std::fs::read_to_string(&files[0])
            .expect("readable")
            .contains("_hll")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_lines_and_table() {
    let (columns, rollup) = sample();
    let mut out = Vec::new();
    write_json_lines(
        &mut out,
        "reach",
        &results(&columns, &rollup),
        Options::default(),
    )
    .expect("written");
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text.lines().count(), 3);
    assert!(text.starts_with("{\"summary\":\"reach\",\"hour\":\"1970-01-01T01:00:00Z\",\"state\":\"CA\",\"events\":2,\"revenue\":3.5,\"users\":{\"value\":2,\"lower\":2,\"upper\":2,\"confidence\":1}}"), "{text}");
    assert!(text.contains("\"state\":\"NY, \\\"upstate\\\"\""), "{text}");

    let rendered = table(&results(&columns, &rollup));
    let lines: Vec<&str> = rendered.lines().collect();
    assert!(lines[0].starts_with("hour"), "{rendered}");
    assert!(lines[1].starts_with("----"), "{rendered}");
    assert_eq!(lines.len(), 5, "{rendered}");

    // A head of the table: the first rows in order, then what was left out.
    let head = table_head(&results(&columns, &rollup), 2);
    let head_lines: Vec<&str> = head.lines().collect();
    assert_eq!(head_lines.len(), 5, "{head}");
    assert_eq!(head_lines[..4], lines[..4], "{head}");
    assert_eq!(head_lines[4], "... 1 more row", "{head}");
    assert_eq!(table_head(&results(&columns, &rollup), 3), rendered);
}

#[test]
fn mismatched_columns_are_refused() {
    let (mut columns, rollup) = sample();
    columns.aggs.pop();
    let mut rows = Rows::default();
    for (bucket, _, states) in rollup.groups() {
        rows.push_row(bucket, &[None], states);
    }
    assert!(Results::new(columns.clone(), &rollup.shape().aggs, rows).is_err());
    // A row with fewer dimension values than columns is refused too.
    let (columns, rollup) = sample();
    let mut rows = Rows::default();
    for (bucket, _, states) in rollup.groups() {
        rows.push(bucket, states);
    }
    assert!(Results::new(columns, &rollup.shape().aggs, rows).is_err());
}
