//! Results out: a summary's merged rows as people and tools want them.
//!
//! - [`table`]: an aligned text table; approximate columns show the value
//!   and its 95% interval, and "below detection" where the interval holds 0.
//! - [`write_daily_csv`]: `OUT/<summary>/YYYY-MM-DD.csv`, one file per day,
//!   each written once and atomically (a temp file in the same directory,
//!   synced, then renamed), so a day's rows are in exactly one file and a
//!   crash never leaves half a file under the final name (the seed's Hadoop
//!   lesson: parallel writers clobbering each other's per-day files).
//! - [`write_json_lines`]: one JSON object per row.
//! - HyperLogLog columns can be added as postgresql-hll hex
//!   (`\x...`, [`Options::hll_hex`]), so `COPY` into a table with an `hll`
//!   column works and analysts keep using `hll_union_agg`.
//!
//! CSV columns: the bucket (ISO-8601, if the summary has one), the dimensions, then per aggregate its
//! value; approximate aggregates add `<name>_lower` and `<name>_upper`;
//! quantiles add one column per rank (`<name>_p50`...); top-k writes
//! `item:count` pairs separated by `|`.
//!
//! The caller decodes each group's dimension key into display values (the
//! engine uses `cardinal-route`'s key encoding) and hands [`Results`] over:
//!
//! ```
//! use cardinal_event::Timestamp;
//! use cardinal_export::{Columns, ResultRow, Results};
//! use cardinal_rollup::{AggKind, Input, Limits, Rollup, Shape};
//! let mut r = Rollup::new(Shape { aggs: vec![AggKind::CountAll] }, Limits::default()).unwrap();
//! r.fold(Timestamp(0), b"CA", &[Input::Null]);
//! let rows = r
//!     .groups()
//!     .map(|(bucket, key, states)| ResultRow {
//!         bucket,
//!         dims: vec![Some(String::from_utf8_lossy(key).into_owned())],
//!         states,
//!     })
//!     .collect();
//! let columns = Columns { bucket: Some("day".into()), dims: vec!["state".into()], aggs: vec!["events".into()] };
//! let results = Results::new(columns, &r.shape().aggs, rows).unwrap();
//! let text = cardinal_export::table(&results);
//! assert!(text.contains("1970-01-01") && text.contains("CA"));
//! ```

#![deny(missing_docs)]

mod error;

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, AggState, Output};
use cardinal_sketch::Estimate;

pub use error::{Error, Result};

/// The names of a summary's output columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The bucket column (e.g. `day`), or `None` for a summary without a
    /// time bucket: no bucket column, and one file `all.csv` instead of one
    /// per day.
    pub bucket: Option<String>,
    /// One name per dimension.
    pub dims: Vec<String>,
    /// One name per aggregate.
    pub aggs: Vec<String>,
}

/// One group's result: bucket, dimension values for display (`None` is
/// NULL) and its aggregate states.
#[derive(Debug, Clone)]
pub struct ResultRow<'a> {
    /// Bucket start.
    pub bucket: Timestamp,
    /// Dimension values as text.
    pub dims: Vec<Option<String>>,
    /// One state per aggregate.
    pub states: &'a [AggState],
}

/// A summary's merged results, ready to export: rows ordered by bucket then
/// dimension values.
#[derive(Debug, Clone)]
pub struct Results<'a> {
    columns: Columns,
    kinds: &'a [AggKind],
    rows: Vec<ResultRow<'a>>,
}

impl<'a> Results<'a> {
    /// Checks the names against the rows and sorts the rows.
    pub fn new(
        columns: Columns,
        kinds: &'a [AggKind],
        mut rows: Vec<ResultRow<'a>>,
    ) -> Result<Self> {
        let bad = rows
            .iter()
            .find(|r| r.dims.len() != columns.dims.len() || r.states.len() != kinds.len());
        if columns.aggs.len() != kinds.len() || bad.is_some() {
            return Err(Error::Columns {
                names: columns.dims.len() + columns.aggs.len(),
                columns: bad.map_or(kinds.len(), |r| r.dims.len() + r.states.len()),
            });
        }
        sort_rows(&mut rows);
        Ok(Self {
            columns,
            kinds,
            rows,
        })
    }

    /// The rows, ordered.
    pub fn rows(&self) -> &[ResultRow<'a>] {
        &self.rows
    }
}

/// Sorts rows by bucket, then dimension values (NULL first, text by bytes),
/// then their original position: the order of a stable sort by (bucket,
/// dims), without comparing `Vec<Option<String>>`s.
///
/// Each row's dimension values are encoded once into one buffer so that
/// byte order is their order: NULL is `00`; a value is `01`, its bytes with
/// `00` escaped as `00 ff`, then `00 00` (a value's encoding is never a
/// prefix of a larger value's). Rows then sort unstably on (bucket, the
/// encoding's first 8 bytes as a big-endian integer, the encoding, original
/// index), which are unique, so the result equals the stable sort's.
fn sort_rows(rows: &mut Vec<ResultRow<'_>>) {
    struct SortKey {
        bucket: i64,
        prefix: u64,
        start: usize,
        end: usize,
        row: usize,
    }
    let mut bytes = Vec::new();
    let mut keys: Vec<SortKey> = Vec::with_capacity(rows.len());
    for (row, r) in rows.iter().enumerate() {
        let start = bytes.len();
        for dim in &r.dims {
            match dim {
                None => bytes.push(0),
                Some(text) => {
                    bytes.push(1);
                    for &b in text.as_bytes() {
                        if b == 0 {
                            bytes.extend_from_slice(&[0, 0xff]);
                        } else {
                            bytes.push(b);
                        }
                    }
                    bytes.extend_from_slice(&[0, 0]);
                }
            }
        }
        let mut prefix = [0u8; 8];
        let head = &bytes[start..];
        let n = head.len().min(8);
        prefix[..n].copy_from_slice(&head[..n]);
        keys.push(SortKey {
            bucket: r.bucket.0,
            prefix: u64::from_be_bytes(prefix),
            start,
            end: bytes.len(),
            row,
        });
    }
    keys.sort_unstable_by(|a, b| {
        (a.bucket, a.prefix)
            .cmp(&(b.bucket, b.prefix))
            .then_with(|| bytes[a.start..a.end].cmp(&bytes[b.start..b.end]))
            .then(a.row.cmp(&b.row))
    });
    let mut taken: Vec<Option<ResultRow<'_>>> = rows.drain(..).map(Some).collect();
    rows.extend(
        keys.iter()
            .map(|key| taken[key.row].take().expect("each row once")),
    );
}

/// What to add to file outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Add `<name>_hll` with each HyperLogLog as postgresql-hll hex.
    pub hll_hex: bool,
}

/// The rows as an aligned text table, ordered by bucket and dimensions.
pub fn table(results: &Results<'_>) -> String {
    let columns = &results.columns;
    let mut header: Vec<String> = columns.bucket.iter().cloned().collect();
    header.extend(columns.dims.iter().cloned());
    header.extend(columns.aggs.iter().cloned());
    let mut cells: Vec<Vec<String>> = vec![header];
    for row in &results.rows {
        let mut line: Vec<String> = columns
            .bucket
            .iter()
            .map(|_| day_or_instant(row.bucket))
            .collect();
        line.extend(
            row.dims
                .iter()
                .map(|d| d.clone().unwrap_or_else(|| "NULL".to_string())),
        );
        line.extend(
            row.states
                .iter()
                .zip(results.kinds)
                .map(|(s, k)| human(&s.output(k))),
        );
        cells.push(line);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|c| {
            cells
                .iter()
                .map(|line| line[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, line) in cells.iter().enumerate() {
        for (c, cell) in line.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            // Text left, numbers right, as people read tables.
            if c < columns.dims.len() + usize::from(columns.bucket.is_some()) {
                let _ = write!(out, "{cell}{:pad$}  ", "");
            } else {
                let _ = write!(out, "{:pad$}{cell}  ", "");
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        if i == 0 {
            let rule: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            out.push_str(&"-".repeat(rule));
            out.push('\n');
        }
    }
    out
}

/// Writes `dir/<summary>/YYYY-MM-DD.csv`, one file per UTC day of the rows'
/// buckets, each once and atomically. Returns the files written.
pub fn write_daily_csv(
    dir: &Path,
    summary: &str,
    results: &Results<'_>,
    options: Options,
) -> Result<Vec<PathBuf>> {
    let folder = dir.join(summary);
    std::fs::create_dir_all(&folder).map_err(|source| io(&folder, source))?;
    let header = csv_header(results, options);
    let rows = &results.rows;
    let mut written = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let day = rows[start].bucket.date();
        let (end, name) = if results.columns.bucket.is_some() {
            let same_day = rows[start..]
                .iter()
                .take_while(|r| r.bucket.date() == day)
                .count();
            (
                start + same_day,
                format!("{:04}-{:02}-{:02}.csv", day.0, day.1, day.2),
            )
        } else {
            (rows.len(), "all.csv".to_string())
        };
        let path = folder.join(name);
        let mut body = header.clone();
        for row in &rows[start..end] {
            body.push_str(&csv_line(
                row,
                results.columns.bucket.is_some(),
                results.kinds,
                options,
            ));
        }
        write_atomically(&path, body.as_bytes())?;
        written.push(path);
        start = end;
    }
    Ok(written)
}

/// Writes one JSON object per row to `out`.
pub fn write_json_lines(
    out: &mut impl Write,
    summary: &str,
    results: &Results<'_>,
    options: Options,
) -> Result<()> {
    let columns = &results.columns;
    for row in &results.rows {
        let mut line = format!("{{\"summary\":{}", json_string(summary.as_bytes()));
        if let Some(bucket) = &columns.bucket {
            let _ = write!(
                line,
                ",{}:\"{}\"",
                json_string(bucket.as_bytes()),
                row.bucket
            );
        }
        for (name, value) in columns.dims.iter().zip(&row.dims) {
            let value = value
                .as_ref()
                .map_or_else(|| "null".to_string(), |v| json_string(v.as_bytes()));
            let _ = write!(line, ",{}:{value}", json_string(name.as_bytes()));
        }
        for ((name, state), kind) in columns.aggs.iter().zip(row.states).zip(results.kinds) {
            let _ = write!(
                line,
                ",{}:{}",
                json_string(name.as_bytes()),
                json_output(&state.output(kind))
            );
            if let (true, AggState::Hll(h)) = (options.hll_hex, state) {
                let _ = write!(
                    line,
                    ",{}:{}",
                    json_string(format!("{name}_hll").as_bytes()),
                    json_string(h.to_hex().as_bytes())
                );
            }
        }
        line.push_str("}\n");
        out.write_all(line.as_bytes())
            .map_err(|source| io(Path::new("-"), source))?;
    }
    Ok(())
}

fn csv_header(results: &Results<'_>, options: Options) -> String {
    let columns = &results.columns;
    let mut fields: Vec<String> = columns.bucket.iter().cloned().collect();
    fields.extend(columns.dims.iter().cloned());
    let first = results.rows.first();
    for (i, name) in columns.aggs.iter().enumerate() {
        let sample = first.map(|row| row.states[i].output(&results.kinds[i]));
        match sample {
            Some(Output::Estimate(_)) => {
                fields.extend([
                    name.clone(),
                    format!("{name}_lower"),
                    format!("{name}_upper"),
                ]);
            }
            // One asked rank (`approx_quantile(x, 0.5) AS p50`) is one column
            // under the alias; several get a column per rank.
            Some(Output::Quantiles { values, .. }) if values.len() == 1 => {
                fields.extend([name.clone(), format!("{name}_rank_error")]);
            }
            Some(Output::Quantiles { values, .. }) => {
                fields.extend(
                    values
                        .iter()
                        .map(|(rank, _)| format!("{name}_p{}", rank * 100.0)),
                );
                fields.push(format!("{name}_rank_error"));
            }
            _ => fields.push(name.clone()),
        }
        if options.hll_hex && matches!(results.kinds[i], AggKind::Hll { .. }) {
            fields.push(format!("{name}_hll"));
        }
    }
    let mut line = fields
        .iter()
        .map(|f| csv_field(f.as_bytes()))
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

fn csv_line(row: &ResultRow<'_>, bucket: bool, kinds: &[AggKind], options: Options) -> String {
    let mut fields: Vec<String> = if bucket {
        vec![row.bucket.to_string()]
    } else {
        Vec::new()
    };
    fields.extend(row.dims.iter().map(|d| {
        d.as_deref()
            .map_or_else(String::new, |d| csv_field(d.as_bytes()))
    }));
    for (state, kind) in row.states.iter().zip(kinds) {
        match state.output(kind) {
            Output::Count(n) => fields.push(n.to_string()),
            Output::Number(v) => fields.push(v.map_or_else(String::new, |v| v.to_string())),
            Output::Estimate(e) => {
                fields.extend([round(e.value), round(e.lower), round(e.upper)]);
            }
            Output::Quantiles { values, rank_error } => {
                fields.extend(values.iter().map(|(_, v)| v.to_string()));
                fields.push(rank_error.to_string());
            }
            Output::TopK(items) => {
                let pairs: Vec<String> = items
                    .iter()
                    .map(|(name, e)| {
                        format!("{}:{}", String::from_utf8_lossy(name), round(e.value))
                    })
                    .collect();
                fields.push(csv_field(pairs.join("|").as_bytes()));
            }
        }
        if let (true, AggState::Hll(h)) = (options.hll_hex, state) {
            fields.push(h.to_hex());
        }
    }
    let mut line = fields.join(",");
    line.push('\n');
    line
}

/// Writes `bytes` to `path` through a synced temp file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = path.with_extension(format!("csv.tmp{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(source) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(io(path, source));
    }
    Ok(())
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

fn day_or_instant(t: Timestamp) -> String {
    let text = t.to_string();
    match text.strip_suffix("T00:00:00Z") {
        Some(day) => day.to_string(),
        None => text,
    }
}

fn human(output: &Output) -> String {
    match output {
        Output::Count(n) => n.to_string(),
        Output::Number(None) => "NULL".to_string(),
        Output::Number(Some(v)) => format!("{v:.2}"),
        Output::Estimate(e) => estimate(e),
        Output::Quantiles { values, rank_error } => {
            let parts: Vec<String> = values
                .iter()
                .map(|(rank, v)| format!("p{}={v:.4}", rank * 100.0))
                .collect();
            format!("{} (rank ±{:.2}%)", parts.join(" "), rank_error * 100.0)
        }
        Output::TopK(items) => items
            .iter()
            .map(|(name, e)| format!("{}:{}", String::from_utf8_lossy(name), round(e.value)))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn estimate(e: &Estimate) -> String {
    if e.is_exact() {
        round(e.value)
    } else if e.below_detection_limit() {
        format!("below detection (<= {})", round(e.upper))
    } else {
        format!("{} ±{}", round(e.value), round((e.upper - e.lower) / 2.0))
    }
}

fn round(v: f64) -> String {
    format!("{v:.0}")
}

fn csv_field(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.into_owned()
    }
}

fn json_output(output: &Output) -> String {
    match output {
        Output::Count(n) => n.to_string(),
        Output::Number(None) => "null".to_string(),
        Output::Number(Some(v)) => json_number(*v),
        Output::Estimate(e) => format!(
            "{{\"value\":{},\"lower\":{},\"upper\":{},\"confidence\":{}}}",
            json_number(e.value),
            json_number(e.lower),
            json_number(e.upper),
            json_number(e.confidence)
        ),
        Output::Quantiles { values, rank_error } => {
            let parts: Vec<String> = values
                .iter()
                .map(|(rank, v)| format!("\"p{}\":{}", rank * 100.0, json_number(*v)))
                .collect();
            format!(
                "{{{},\"rank_error\":{}}}",
                parts.join(","),
                json_number(*rank_error)
            )
        }
        Output::TopK(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|(name, e)| format!("[{},{}]", json_string(name), json_number(e.value)))
                .collect();
            format!("[{}]", parts.join(","))
        }
    }
}

fn json_number(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        "null".to_string()
    }
}

/// `bytes` as a quoted JSON string (invalid UTF-8 replaced), for writers of
/// other JSON lines.
pub fn json_string(bytes: &[u8]) -> String {
    format!("\"{}\"", json_escape(&String::from_utf8_lossy(bytes)))
}

fn json_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}
