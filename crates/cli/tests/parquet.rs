//! `cardinal run` over Parquet: the same rows as CSV and as Parquet (written
//! here with the parquet crate's `ArrowWriter`, in several encodings and
//! row groups) must give exactly the same summaries, HyperLogLog bytes
//! included, on one thread and on two; and Parquet's own errors and
//! rejects read as the text formats' do.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{cardinal, failure, ok};

use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BooleanArray, Date32Array, DictionaryArray, Float32Array, Float64Array, Int32Array,
    Int64Array, RecordBatch, StringArray, StringViewArray, TimestampMicrosecondArray,
    TimestampMillisecondArray, UInt64Array,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

fn dir(name: &str) -> PathBuf {
    common::scratch_dir("parquet", name)
}

/// Every `out/<summary>/*.csv` line, headers included, in file order.
fn results(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for summary in std::fs::read_dir(dir).expect("out folder") {
        for file in std::fs::read_dir(summary.expect("entry").path()).expect("summary folder") {
            files.push(file.expect("entry").path());
        }
    }
    files.sort();
    let mut lines = Vec::new();
    for file in files {
        lines.push(format!("== {}", file.display()));
        let text = std::fs::read_to_string(&file).expect("readable");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines
}

/// Writes `columns` as Parquet: zstd pages, row groups of
/// `row_group_rows`, and dictionary encoding off for `plain` columns.
fn write_parquet(
    path: &Path,
    columns: Vec<(&str, ArrayRef)>,
    row_group_rows: usize,
    plain: &[&str],
) {
    let mut properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group_rows))
        .set_compression(Compression::ZSTD(ZstdLevel::default()));
    for column in plain {
        properties = properties
            .set_column_dictionary_enabled(ColumnPath::from(vec![(*column).to_owned()]), false);
    }
    write_parquet_with(path, columns, properties);
}

fn write_parquet_with(
    path: &Path,
    columns: Vec<(&str, ArrayRef)>,
    properties: parquet::file::properties::WriterPropertiesBuilder,
) {
    let batch = RecordBatch::try_from_iter(columns).expect("columns of equal length");
    let file = std::fs::File::create(path).expect("create");
    let mut writer =
        ArrowWriter::try_new(file, batch.schema(), Some(properties.build())).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

/// Runs `schema` over `input` on 1 and 2 threads, writing CSV files with
/// HyperLogLog hex under `out-<tag>-<threads>`; returns both results.
fn run_both(dir: &Path, schema: &str, input: &str, tag: &str) -> [Vec<String>; 2] {
    [1, 2].map(|threads| {
        let out = format!("out-{tag}-{threads}");
        ok(&cardinal(
            dir,
            &[
                "run",
                schema,
                input,
                "--threads",
                &threads.to_string(),
                "--out",
                &out,
                "--hll-hex",
                "--quiet",
            ],
        ));
        results(&dir.join(&out))
            .into_iter()
            .map(|line| line.replace(&out, "out"))
            .collect()
    })
}

/// Writes `csv.sql` and `parquet.sql`: `CREATE STREAM <stream>` in each
/// format with the options `with` (e.g. `, time = 'ts'`), then
/// `summaries`.
fn write_schemas(dir: &Path, stream: &str, with: &str, summaries: &str) {
    for (format, header) in [("csv", ", header = true"), ("parquet", "")] {
        std::fs::write(
            dir.join(format!("{format}.sql")),
            format!("CREATE STREAM {stream} WITH (format = '{format}'{header}{with});{summaries}"),
        )
        .expect("schema");
    }
}

/// Runs `csv.sql` over `csv` and `parquet.sql` over `parquet`
/// ([`write_schemas`]) on 1 and 2 threads, asserts that the four results
/// are the same lines, and returns them.
fn run_formats_alike(dir: &Path, csv: &str, parquet: &str) -> Vec<String> {
    let [csv_one, csv_two] = run_both(dir, "csv.sql", csv, "csv");
    let [parquet_one, parquet_two] = run_both(dir, "parquet.sql", parquet, "parquet");
    assert_eq!(csv_one, csv_two);
    assert_eq!(parquet_one, csv_one);
    assert_eq!(parquet_two, csv_one);
    csv_one
}

const IMPRESSIONS: &str = "
  (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
   site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)";

const IMPRESSION_SUMMARIES: &str = "
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS events, sum(revenue) AS revenue, min(revenue) AS low,
         max(revenue) AS high, hll(user_id) AS users, exact_distinct(user_id) AS exact_users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;

CREATE SUMMARY sites AS
  SELECT date_trunc('week', ts) AS week, provider, upper(substr(site, 1, 5)) AS prefix,
         count(*) AS events, hll(site) AS sites, hll(campaign) AS campaigns
  FROM impressions WHERE revenue > 0.001
  GROUP BY week, provider, prefix;
";

/// An attribution over the impressions, and its credit by campaign.
const IMPRESSION_ATTRIBUTION: &str = "
CREATE ATTRIBUTION credit ON impressions BY user_id MODEL linear LOOKBACK 30 DAYS
  TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
  VALUE revenue CAMPAIGN campaign SITE site;

CREATE SUMMARY by_campaign AS
  SELECT campaign, sum(credit) AS conversions, sum(revenue) AS revenue, count(*) AS touches
  FROM credit
  GROUP BY campaign;
";

/// The impressions generator's rows as CSV and as Parquet (typed time,
/// ids and revenue; dictionary, plain and view text) give the same
/// answers on 1 and 2 threads, with an attribution over them or not
/// (Parquet batches routed from their columns either way).
#[test]
fn impressions_from_parquet_equal_impressions_from_csv() {
    let dir = dir("impressions");
    ok(&cardinal(
        &dir,
        &[
            "gen",
            "impressions",
            "--events",
            "40000",
            "--users",
            "9000",
            "--days",
            "9",
            "-o",
            "imp.csv",
        ],
    ));
    let text = std::fs::read_to_string(dir.join("imp.csv")).expect("generated");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("ts,user_id,kind,state,site,provider,campaign,revenue")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 40_000);
    assert!(rows.iter().all(|r| r.len() == 8), "no quoted commas");
    let column = |i: usize| rows.iter().map(move |r| r[i]);
    let ms = |t: &str| {
        let parsed = cardinal_time(t);
        assert!(parsed % 1000 == 0);
        parsed
    };
    let kind: DictionaryArray<Int32Type> = column(2).map(Some).collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "TS",
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(column(0).map(|t| ms(t) * 1000))
                    .with_timezone("UTC"),
            ),
        ),
        (
            "user_id",
            Arc::new(Int64Array::from_iter_values(
                column(1).map(|u| u.parse::<i64>().expect("an id")),
            )),
        ),
        ("kind", Arc::new(kind)),
        ("state", Arc::new(StringArray::from_iter_values(column(3)))),
        ("site", Arc::new(StringArray::from_iter_values(column(4)))),
        (
            "provider",
            Arc::new(StringViewArray::from_iter_values(column(5))),
        ),
        (
            "campaign",
            Arc::new(StringArray::from_iter_values(column(6))),
        ),
        (
            "revenue",
            Arc::new(Float64Array::from_iter_values(
                column(7).map(|r| r.parse::<f64>().expect("revenue")),
            )),
        ),
    ];
    write_parquet(&dir.join("imp.parquet"), columns, 6_000, &["site"]);
    write_schemas(
        &dir,
        &format!("impressions {IMPRESSIONS}"),
        ", time = 'ts'",
        IMPRESSION_SUMMARIES,
    );
    let lines = run_formats_alike(&dir, "imp.csv", "imp.parquet");
    assert!(lines.len() > 100, "{}", lines.len());
    assert!(lines.iter().any(|l| l.contains(",\\x")), "HLL hex written");
    write_schemas(
        &dir,
        &format!("impressions {IMPRESSIONS}"),
        ", time = 'ts'",
        &format!("{IMPRESSION_SUMMARIES}{IMPRESSION_ATTRIBUTION}"),
    );
    let attributed = run_formats_alike(&dir, "imp.csv", "imp.parquet");
    let credit: Vec<&String> = attributed
        .iter()
        .skip_while(|l| !l.contains("by_campaign"))
        .skip(1)
        .take_while(|l| !l.starts_with("=="))
        .collect();
    assert!(credit.len() > 3, "campaigns credited: {credit:?}");
    for line in &lines {
        assert!(attributed.contains(line), "{line}");
    }
}

/// UTC milliseconds of the generator's `YYYY-MM-DDTHH:MM:SSZ`.
fn cardinal_time(text: &str) -> i64 {
    let t = cardinal_event::Timestamp::parse(text.as_bytes()).expect("a time");
    t.0
}

/// The columns of the second test, as CSV text and Arrow arrays from the
/// same values.
struct Typed {
    csv: String,
    columns: Vec<(&'static str, ArrayRef)>,
}

fn typed(rows: usize) -> Typed {
    let mut csv = String::from("day,at,n,small,ratio,flag,tag,score\n");
    let (mut day, mut at, mut n, mut small, mut ratio, mut flag, mut tag, mut score) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for i in 0..rows {
        let i64_ = i64::try_from(i).expect("small");
        let d = 20_000 + i32::try_from(i % 5).expect("small");
        let t = i64::from(d) * 86_400_000 + (i64_ * 7_919_357) % 86_400_000;
        let v = (i64_ * 2_654_435_761) % 1_000_003 - 500_000;
        let s = (i % 50 != 7).then(|| i32::try_from(i % 1000).expect("small") - 500);
        let r = (i % 9 != 0).then_some((i % 64) as f32 * 0.25);
        let b = (i % 11 != 3).then_some(i % 3 == 0);
        let g = ["red", "green", "blue", "a longer tag than twelve bytes"][i % 4];
        let sc = (i % 13 != 0).then(|| (i64_ * 31 % 997) as f64 / 16.0);
        let date = cardinal_event::Timestamp(i64::from(d) * 86_400_000).to_string();
        let time = cardinal_event::Timestamp(t).to_string();
        let text = |x: Option<String>| x.unwrap_or_default();
        csv.push_str(&format!(
            "{},{},{v},{},{},{},{g},{}\n",
            &date[..10],
            time,
            text(s.map(|s| s.to_string())),
            text(r.map(|r| r.to_string())),
            text(b.map(|b| b.to_string())),
            text(sc.map(|s| s.to_string())),
        ));
        day.push(d);
        at.push(t);
        n.push(v);
        small.push(s);
        ratio.push(r);
        flag.push(b);
        tag.push(g);
        score.push(sc);
    }
    let tag: DictionaryArray<Int32Type> = tag.into_iter().map(Some).collect();
    Typed {
        csv,
        columns: vec![
            ("day", Arc::new(Date32Array::from(day))),
            ("at", Arc::new(TimestampMillisecondArray::from(at))),
            ("n", Arc::new(Int64Array::from(n))),
            ("small", Arc::new(Int32Array::from(small))),
            ("ratio", Arc::new(Float32Array::from(ratio))),
            ("flag", Arc::new(BooleanArray::from(flag))),
            ("tag", Arc::new(tag)),
            ("score", Arc::new(Float64Array::from(score))),
        ],
    }
}

const TYPED: &str = "(day DATE, at TIMESTAMP, n BIGINT, small INT, ratio DOUBLE, flag BOOLEAN,
  tag TEXT, score DOUBLE)";

const TYPED_SUMMARIES: &str = "
CREATE SUMMARY by_day AS
  SELECT date_trunc('day', at) AS d, flag,
         count(*) AS rows, count(small) AS smalls, sum(small) AS small_sum,
         min(ratio) AS ratio_min, max(ratio) AS ratio_max, sum(ratio) AS ratio_sum,
         avg(score) AS score_avg, count(score) AS scores, hll(n) AS ns, exact_distinct(tag) AS tags
  FROM t WHERE small IS NULL OR small > -400
  GROUP BY d, flag;

CREATE SUMMARY by_date AS
  SELECT day, tag, min(at) AS first, max(at) AS last, sum(n) AS n_sum, hll(n) AS ns
  FROM t WHERE ratio IS NOT NULL AND flag
  GROUP BY day, tag;
";

#[test]
fn typed_columns_and_nulls_equal_their_text() {
    let dir = dir("typed");
    let Typed { csv, columns } = typed(30_000);
    std::fs::write(dir.join("t.csv"), csv).expect("csv");
    write_parquet(&dir.join("t.parquet"), columns, 4_096, &["tag"]);
    write_schemas(
        &dir,
        &format!("t {TYPED}"),
        ", time = 'at'",
        TYPED_SUMMARIES,
    );
    let lines = run_formats_alike(&dir, "t.csv", "t.parquet");
    assert!(lines.len() > 40, "{}", lines.len());
}

#[test]
fn formats_must_match_their_stream() {
    let dir = dir("formats");
    let Typed { csv, columns } = typed(10);
    std::fs::write(dir.join("t.csv"), csv).expect("csv");
    write_parquet(&dir.join("t.parquet"), columns, 4, &[]);
    write_schemas(&dir, &format!("t {TYPED}"), "", TYPED_SUMMARIES);
    let error = failure(&cardinal(&dir, &["run", "csv.sql", "t.parquet"]));
    assert!(
        error.contains("t.parquet is a Parquet file; declare stream t WITH (format = 'parquet')"),
        "{error}"
    );
    let error = failure(&cardinal(&dir, &["run", "parquet.sql", "t.csv"]));
    assert!(
        error.contains("t.csv is not a Parquet file (it does not start with PAR1)"),
        "{error}"
    );
    let error = failure(&cardinal(&dir, &["run", "parquet.sql", "-"]));
    assert!(error.contains("cannot be read from stdin"), "{error}");
    // A column of the wrong type stops the run before any row is read.
    std::fs::write(
        dir.join("wrong.sql"),
        "CREATE STREAM t (flag TIMESTAMP) WITH (format = 'parquet');
         CREATE SUMMARY s AS SELECT count(flag) FROM t;",
    )
    .expect("schema");
    let error = failure(&cardinal(&dir, &["run", "wrong.sql", "t.parquet"]));
    assert!(
        error.contains(
            "t.parquet: column \"flag\" is Boolean in the Parquet file, which cannot be read as TIMESTAMP"
        ),
        "{error}"
    );
}

/// Writes `t.parquet`, `n` = 0..1000 in row groups of 100, and
/// `schema.sql`, whose summary `total` counts and sums them.
fn thousand_rows(dir: &Path) {
    let n: Vec<i64> = (0..1000).collect();
    write_parquet(
        &dir.join("t.parquet"),
        vec![("n", Arc::new(Int64Array::from(n)) as ArrayRef)],
        100,
        &["n"],
    );
    std::fs::write(
        dir.join("schema.sql"),
        "CREATE STREAM t (n BIGINT) WITH (format = 'parquet');
         CREATE SUMMARY total AS SELECT count(*) AS rows, sum(n) AS s FROM t;",
    )
    .expect("schema");
}

/// A run's stderr said one input could not be read (past some point),
/// without a panic's message.
fn one_unreadable_input(stderr: &str) {
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("1 rejected (input unreadable past this point: 1)"),
        "{stderr}"
    );
}

/// `--strict` fails a run over `file` of `schema.sql` with exit status 3.
fn fails_strictly(dir: &Path, file: &str) {
    let strict = cardinal(dir, &["run", "schema.sql", file, "--quiet", "--strict"]);
    assert_eq!(strict.status.code(), Some(3), "{strict:?}");
}

/// A Parquet file cut short (its footer, at the end, gone: a shipper's
/// file mid-write) does not stop the run: it is one reject, always shown,
/// the other inputs are folded, and `--strict` fails the run; as a cut
/// compressed text input.
#[test]
fn a_parquet_file_cut_short_is_one_reject() {
    let dir = dir("cut");
    thousand_rows(&dir);
    let bytes = std::fs::read(dir.join("t.parquet")).expect("written");
    std::fs::write(dir.join("cut.parquet"), &bytes[..bytes.len() / 2]).expect("cut");
    for threads in ["1", "2"] {
        let output = cardinal(
            &dir,
            &[
                "run",
                "schema.sql",
                "cut.parquet",
                "t.parquet",
                "--json",
                "-",
                "--threads",
                threads,
            ],
        );
        let stdout = ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stdout.contains(r#""rows":1000,"s":499500"#), "{stdout}");
        assert!(
            stderr.contains("rejected: cut.parquet: the Parquet footer cannot be read ("),
            "{stderr}"
        );
        assert!(stderr.contains("none of it is read"), "{stderr}");
        one_unreadable_input(&stderr);
    }
    fails_strictly(&dir, "cut.parquet");
}

/// A damaged row group does not stop the run: the row groups read before
/// it are folded, the rest of the job's groups are one reject (said once,
/// without a panic's message), and `--strict` fails the run; as a cut
/// compressed text input.
#[test]
fn a_damaged_row_group_is_one_reject() {
    use parquet::file::reader::FileReader;
    let dir = dir("damaged");
    thousand_rows(&dir);
    // Overwrite the first page header of row group 5 (rows 500..600).
    let mut bytes = std::fs::read(dir.join("t.parquet")).expect("written");
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(
        std::fs::File::open(dir.join("t.parquet")).expect("open"),
    )
    .expect("a Parquet file");
    let page = usize::try_from(reader.metadata().row_group(5).column(0).data_page_offset())
        .expect("an offset");
    bytes[page..page + 16].fill(0xff);
    std::fs::write(dir.join("damaged.parquet"), &bytes).expect("damaged");
    let output = cardinal(
        &dir,
        &[
            "run",
            "schema.sql",
            "damaged.parquet",
            "--json",
            "-",
            "--threads",
            "1",
        ],
    );
    let stdout = ok(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The job holding group 5 loses it and the groups after it in the
    // job (5..end); every other group is folded whole.
    let kept = (6..=10).find(|end| {
        let lost: i64 = (500..end * 100).sum();
        let want = format!(
            r#""rows":{},"s":{}"#,
            1000 - (end - 5) * 100,
            499_500 - lost
        );
        stdout.contains(&want) && stderr.contains(&format!("..{end} is not read"))
    });
    assert!(kept.is_some(), "{stdout}\n{stderr}");
    assert!(stderr.contains("damaged.parquet: Parquet"), "{stderr}");
    one_unreadable_input(&stderr);
    fails_strictly(&dir, "damaged.parquet");
}

#[test]
fn values_out_of_range_are_rejected_by_row() {
    let dir = dir("rejects");
    let ids = UInt64Array::from(vec![1, u64::MAX, 2, 1 << 63, 3]);
    write_parquet(
        &dir.join("ids.parquet"),
        vec![
            ("id", Arc::new(ids) as ArrayRef),
            (
                "n",
                Arc::new(StringArray::from(vec!["1", "2", "x", "4", ""])),
            ),
        ],
        2,
        &[],
    );
    std::fs::write(
        dir.join("ids.sql"),
        "CREATE STREAM t (id BIGINT, n BIGINT) WITH (format = 'parquet');
         CREATE SUMMARY s AS SELECT count(*) AS rows, hll(id) AS ids, sum(n) AS total FROM t;",
    )
    .expect("schema");
    let output = cardinal(
        &dir,
        &[
            "run",
            "ids.sql",
            "ids.parquet",
            "--rejects",
            "rejects.txt",
            "--json",
            "-",
            "--threads",
            "2",
        ],
    );
    let stdout = ok(&output);
    let rejects = std::fs::read_to_string(dir.join("rejects.txt")).expect("rejects");
    let mut rejects: Vec<&str> = rejects.lines().collect();
    rejects.sort_unstable();
    assert_eq!(
        rejects,
        [
            "ids.parquet:2: s: column 1 (id): out of range for the declared type",
            "ids.parquet:3: s: column 2 (n): not a BIGINT",
            "ids.parquet:4: s: column 1 (id): out of range for the declared type",
        ]
    );
    assert!(stdout.contains("\"rows\":2"), "{stdout}");
    assert!(stdout.contains("\"total\":1"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The records folded, the rejected ones apart.
    assert!(stderr.contains("2 records"), "{stderr}");
    assert!(stderr.contains("3 rejected"), "{stderr}");
}

/// Summaries with filters and arguments of every kind (plain columns and
/// expressions): Parquet batches without NULLs are routed from typed
/// columns, the rest record by record. Both must give what the same rows
/// as CSV give.
const COLUMN_SUMMARIES: &str = "
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS d, kind, count(*) AS n, sum(revenue) AS rev,
         max(revenue) AS top, min(ts) AS first, hll(user_id) AS users, sum(user_id) AS ids
  FROM t WHERE kind = 'impression' GROUP BY d, kind;

CREATE SUMMARY same AS
  SELECT date_trunc('day', ts) AS d, count(*) AS n, topk(site, 3) AS sites,
         hll(site) AS site_hll
  FROM t WHERE kind = 'impression' GROUP BY d;

CREATE SUMMARY clicks AS
  SELECT date_trunc('hour', ts) AS h, upper(substr(site, 1, 7)) AS s, count(*) AS n,
         exact_distinct(user_id) AS users
  FROM t WHERE kind = 'click' GROUP BY h, s;

CREATE SUMMARY days AS
  SELECT day, count(*) AS n, min(day) AS first_day, count(revenue) AS revs
  FROM t GROUP BY day;

CREATE SUMMARY big AS
  SELECT date_trunc('day', ts) AS d, count(*) AS n, sum(revenue) AS rev,
         sum(revenue * 2 + user_id % 7) AS mixed
  FROM t WHERE revenue > 0.5 AND kind IN ('click', 'conversion') GROUP BY d;
";

#[test]
fn typed_column_routes_equal_record_routes() {
    let dir = dir("columns");
    let rows = 20_000;
    // One row's time is out of range in Parquet (and not a time in CSV):
    // rejected either way. Some rows have no revenue: their batches go
    // record by record.
    let bad_time = 4_321;
    let no_revenue = 9_000..9_100;
    let mut csv = String::from("ts,day,user_id,kind,site,revenue\n");
    let (mut ts, mut day, mut user, mut kind, mut site, mut revenue) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..rows {
        let n = i64::try_from(i).expect("small");
        let t = if i == bad_time {
            i64::MAX / 2
        } else {
            1_790_000_000_000 + n * 37_000
        };
        let d = 20_500 + i32::try_from(i % 3).expect("small");
        let u = n * 7_919 % 5_000;
        let k = ["impression", "impression", "click", "conversion"][i % 4];
        let s = if i % 5 == 0 {
            format!("s{}", i % 7)
        } else {
            format!("site-{:02}.example.com", i % 23)
        };
        let r = (!no_revenue.contains(&i)).then(|| (i % 1_000) as f64 / 1_024.0);
        let time = if i == bad_time {
            "not a time".to_owned()
        } else {
            cardinal_event::Timestamp(t).to_string()
        };
        let date = cardinal_event::Timestamp(i64::from(d) * 86_400_000).to_string();
        let r_text = r.map(|r| r.to_string()).unwrap_or_default();
        csv.push_str(&format!("{time},{},{u},{k},{s},{r_text}\n", &date[..10]));
        ts.push(t);
        day.push(d);
        user.push(u);
        kind.push(k);
        site.push(s);
        revenue.push(r);
    }
    std::fs::write(dir.join("t.csv"), csv).expect("csv");
    write_parquet(
        &dir.join("t.parquet"),
        vec![
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(ts)) as ArrayRef,
            ),
            ("day", Arc::new(Date32Array::from(day))),
            ("user_id", Arc::new(Int64Array::from(user))),
            ("kind", Arc::new(StringArray::from(kind))),
            ("site", Arc::new(StringViewArray::from_iter_values(site))),
            ("revenue", Arc::new(Float64Array::from(revenue))),
        ],
        3_000,
        &["site"],
    );
    let columns = "(ts TIMESTAMP, day DATE, user_id BIGINT, kind TEXT, site TEXT, revenue DOUBLE)";
    write_schemas(
        &dir,
        &format!("t {columns}"),
        ", time = 'ts'",
        COLUMN_SUMMARIES,
    );
    let lines = run_formats_alike(&dir, "t.csv", "t.parquet");
    assert!(lines.len() > 200, "{}", lines.len());
    // The bad row is rejected, once, in both.
    for (schema, input) in [("csv.sql", "t.csv"), ("parquet.sql", "t.parquet")] {
        let output = cardinal(&dir, &["run", schema, input, "--out", "counted"]);
        ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("19999 records"), "{stderr}");
        assert!(stderr.contains("1 rejected"), "{stderr}");
    }
}

#[test]
fn dictionaries_that_change_by_row_group_equal_their_text() {
    let dir = dir("dictionaries");
    // Seven row groups whose dictionaries list the same values in other
    // orders and numbers, then a short one of unique kinds that spills
    // out of a 1 KiB dictionary page into plain pages: the filter and
    // the text arguments read by key must follow each dictionary.
    let group = 1_500;
    let rows = 7 * group + 200;
    let kinds = ["impression", "click", "conversion", "view"];
    let mut csv = String::from("ts,user_id,kind,site\n");
    let (mut ts, mut user, mut kind, mut site) = (vec![], vec![], vec![], vec![]);
    for i in 0..rows {
        let g = i / group;
        let n = i64::try_from(i).expect("small");
        let t = 1_790_000_000_000 + n * 60_000;
        let u = n % 333;
        let k = if g == 7 {
            format!("kind-{i:040}")
        } else {
            let in_use = if g == 3 { 3 } else { 4 };
            kinds[(i + g) % in_use].to_owned()
        };
        let s = format!("site-{}", (i * 7 + g) % (3 + g));
        let time = cardinal_event::Timestamp(t).to_string();
        csv.push_str(&format!("{time},{u},{k},{s}\n"));
        ts.push(t);
        user.push(u);
        kind.push(k);
        site.push(s);
    }
    std::fs::write(dir.join("t.csv"), csv).expect("csv");
    write_parquet_with(
        &dir.join("t.parquet"),
        vec![
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(ts)) as ArrayRef,
            ),
            ("user_id", Arc::new(Int64Array::from(user))),
            ("kind", Arc::new(StringArray::from_iter_values(kind))),
            ("site", Arc::new(StringArray::from_iter_values(site))),
        ],
        WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .set_dictionary_page_size_limit(1 << 10),
    );
    write_schemas(
        &dir,
        "t (ts TIMESTAMP, user_id BIGINT, kind TEXT, site TEXT)",
        ", time = 'ts'",
        "
CREATE SUMMARY imp AS
  SELECT date_trunc('hour', ts) AS h, site, count(*) AS n, hll(user_id) AS users,
         topk(kind, 2) AS kinds
  FROM t WHERE kind = 'impression' GROUP BY h, site;

CREATE SUMMARY kinds AS
  SELECT kind, count(*) AS n, hll(site) AS sites, topk(site, 3) AS top
  FROM t GROUP BY kind;

CREATE SUMMARY clicks AS
  SELECT count(*) AS n, exact_distinct(site) AS sites, hll(kind) AS kinds
  FROM t WHERE kind = 'click';
",
    );
    let lines = run_formats_alike(&dir, "t.csv", "t.parquet");
    // Six groups of 1,500 rows a quarter clicks, group 3 a third: 2,750
    // clicks at 9 sites.
    assert!(lines.iter().any(|l| l.starts_with("2750,9,")), "{lines:?}");
    assert!(lines.len() > 200, "{}", lines.len());
}
