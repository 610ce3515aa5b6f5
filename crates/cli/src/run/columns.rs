//! Parquet batches routed from typed columns.
//!
//! A record-at-a-time route asks each record for each value through
//! [`Record::value`]: a match on the column's storage, a NULL check, a
//! `Value` and then an [`Arg`] per field and summary (W3 spent ~1,000
//! instructions a record there, bench/README.md "The Parquet gap taken
//! apart"). When every summary's bucket and arguments are plain columns
//! ([`ColumnPlan`]) and a batch holds them as typed slices without NULLs
//! ([`ParquetBatch::column`]), each lane reads them straight from the
//! slices; a `text = 'literal'` filter is a byte comparison on its slice,
//! any other filter is evaluated on the record as before; the key still
//! comes from [`Summary::route_dims`] and the fold is the same
//! ([`Fold::fold_lanes`]). A row the slices cannot route
//! as [`Fold::record`] would (a time out of range, a key the evaluator
//! rejects) goes through [`Fold::record`], which rejects it the same way;
//! a batch with a NULL in a read column goes record by record.
//!
//! [`Record::value`]: cardinal_event::Record::value
//! [`Summary::route_dims`]: cardinal_route::Summary::route_dims
//! [`ColumnPlan`]: cardinal_route::ColumnPlan

use cardinal_event::ColumnType;
use cardinal_event::bytes::bytes_eq;
use cardinal_parse::{Column, ParquetBatch, ParquetRecord, TextColumn};
use cardinal_route::{Arg, ArgColumn, ColumnFilter};

use super::Fold;

/// One lane's filter, bucket and arguments as typed columns of one
/// Parquet batch ([`Fold::columns_of`]).
pub(super) struct LaneColumns<'b> {
    /// The filter's text column, when the lane owns a filter (its literal
    /// is in the lane's plan).
    filter: Option<TextColumn<'b>>,
    /// The time column and the bucket width.
    bucket: Option<(Column<'b>, cardinal_route::TimeUnit)>,
    args: Vec<ArgSource<'b>>,
}

/// Where one argument's values are in a batch.
#[derive(Clone, Copy)]
enum ArgSource<'b> {
    Int(&'b [i64]),
    Float(&'b [f64]),
    Time(Column<'b>),
    Text(TextColumn<'b>),
    /// An expression, evaluated on the record.
    Evaluate,
}

impl<'a> Fold<'a> {
    /// Every lane's [`ColumnPlan`](cardinal_route::ColumnPlan) resolved
    /// to the typed columns of `batch`; `None` when some lane has no plan
    /// or some column is not a typed slice in this batch (a NULL, a type
    /// read through text): its records then go through [`Fold::record`].
    pub(super) fn columns_of<'b>(&self, batch: &'b ParquetBatch) -> Option<Vec<LaneColumns<'b>>> {
        self.plans
            .iter()
            .enumerate()
            .map(|(s, plan)| {
                let filter = match &plan.filter {
                    ColumnFilter::TextEq { column, .. } if self.lanes[s].filter_owner == s => {
                        let Column::Text(text) = batch.column(*column)? else {
                            return None;
                        };
                        Some(text)
                    }
                    _ => None,
                };
                let bucket = match plan.bucket {
                    Some(bucket) => match batch.column(bucket.column)? {
                        column @ (Column::Time(..) | Column::Date(_)) => {
                            Some((column, bucket.unit))
                        }
                        _ => return None,
                    },
                    None => None,
                };
                let args = plan
                    .args
                    .iter()
                    .map(|arg| match *arg {
                        ArgColumn::Typed { column, ty } => match (batch.column(column)?, ty) {
                            (Column::Int(v), ColumnType::BigInt) => Some(ArgSource::Int(v)),
                            (Column::Float(v), ColumnType::Double) => Some(ArgSource::Float(v)),
                            (c @ (Column::Time(..) | Column::Date(_)), ColumnType::Timestamp) => {
                                Some(ArgSource::Time(c))
                            }
                            _ => None,
                        },
                        ArgColumn::Text { column } => match batch.column(column)? {
                            Column::Text(text) => Some(ArgSource::Text(text)),
                            _ => None,
                        },
                        ArgColumn::Evaluate => Some(ArgSource::Evaluate),
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some(LaneColumns {
                    filter,
                    bucket,
                    args,
                })
            })
            .collect()
    }

    /// [`Fold::record`] for a row of a batch whose columns `columns` gave:
    /// the same routes, read from typed slices instead of through
    /// [`Record::value`](cardinal_event::Record::value). A row whose time
    /// is out of range (or whose key the evaluator rejects) goes through
    /// [`Fold::record`], which rejects it as it would anyway.
    pub(super) fn record_columns(
        &mut self,
        columns: &[LaneColumns<'_>],
        record: &ParquetRecord<'_>,
        name: &str,
        at: impl Fn() -> String,
    ) {
        if self.route_columns(columns, record).is_err() {
            self.record(record, name, at);
            return;
        }
        self.counts.records += 1;
        self.fold_lanes(name, &at);
    }

    /// Routes one row through every lane from typed columns; `Err` when the
    /// row must go through [`Fold::record`] instead.
    #[inline]
    fn route_columns(
        &mut self,
        columns: &[LaneColumns<'_>],
        record: &ParquetRecord<'_>,
    ) -> Result<(), ()> {
        let i = record.index();
        let plans = &self.plans;
        for (s, lane_columns) in columns.iter().enumerate() {
            let owner = self.lanes[s].filter_owner;
            let pass = if owner == s {
                match &plans[s].filter {
                    ColumnFilter::None => true,
                    ColumnFilter::TextEq { literal, .. } => lane_columns
                        .filter
                        .is_some_and(|text| bytes_eq(text.value(i), literal)),
                    ColumnFilter::Evaluate => self.lanes[s]
                        .summary
                        .passes(record, &mut self.scratch)
                        .map_err(drop)?,
                }
            } else {
                self.lanes[owner].passed
            };
            let known = super::known_bucket(&self.lanes, s);
            let lane = &mut self.lanes[s];
            lane.passed = pass;
            if !pass {
                continue;
            }
            lane.routed.bucket = match (known, &lane_columns.bucket) {
                (Some(t), Some(_)) => Some(t),
                (_, Some((column, unit))) => Some(column.time(i).map_err(drop)?.truncate(*unit)),
                (_, None) => None,
            };
            lane.summary
                .route_dims(record, &mut self.scratch, &mut lane.routed)
                .map_err(drop)?;
            lane.routed.begin_args(lane_columns.args.len());
            for (index, source) in lane_columns.args.iter().enumerate() {
                match *source {
                    ArgSource::Int(v) => lane.routed.set_arg(index, Arg::Int(v[i])),
                    ArgSource::Float(v) => lane.routed.set_arg(index, Arg::Float(v[i])),
                    ArgSource::Time(column) => {
                        let t = column.time(i).map_err(drop)?;
                        lane.routed.set_arg(index, Arg::Time(t));
                    }
                    ArgSource::Text(text) => lane.routed.set_text_arg(index, text.value(i)),
                    ArgSource::Evaluate => lane
                        .summary
                        .route_arg(index, record, &mut self.scratch, &mut lane.routed)
                        .map_err(drop)?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::run::{Limits, ParquetFile, Plan, REJECTS_SHOWN_MAX, Shape, Summary, shape_of};
    use arrow_array::TimestampMillisecondArray;
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use cardinal_parse::PARQUET_BATCH_ROWS;

    /// A Parquet file of `rows` rows in row groups of `group_rows`, whose
    /// `x` is NULL in the rows `null_x` names.
    fn parquet(rows: usize, group_rows: usize, null_x: impl Fn(usize) -> bool) -> Vec<u8> {
        let ts: Vec<i64> = (0..rows as i64)
            .map(|i| 1_790_000_000_000 + i * 60_000)
            .collect();
        let id: Vec<i64> = (0..rows as i64).map(|i| i % 97).collect();
        let kind: Vec<&str> = (0..rows).map(|i| ["a", "b"][i % 2]).collect();
        let x: Vec<Option<f64>> = (0..rows)
            .map(|i| (!null_x(i)).then_some(i as f64))
            .collect();
        let batch = RecordBatch::try_from_iter([
            (
                "ts",
                Arc::new(TimestampMillisecondArray::from(ts)) as ArrayRef,
            ),
            ("id", Arc::new(Int64Array::from(id))),
            ("kind", Arc::new(StringArray::from(kind))),
            ("x", Arc::new(Float64Array::from(x))),
        ])
        .expect("batch");
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let mut bytes = Vec::new();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties))
                .expect("writer");
        writer.write(&batch).expect("write");
        writer.close().expect("close");
        bytes
    }

    const SQL: &str = "
        CREATE STREAM t (ts TIMESTAMP, id BIGINT, kind TEXT, x DOUBLE)
          WITH (format = 'parquet', time = 'ts');
        CREATE SUMMARY a AS SELECT date_trunc('day', ts) AS day, kind,
            count(*), sum(x), hll(id), topk(kind, 2), min(ts)
          FROM t WHERE kind = 'a' GROUP BY day, kind;
        CREATE SUMMARY b AS SELECT upper(kind) AS k, count(*), max(x) FROM t GROUP BY k;";

    /// Which batches of the file are routed from typed columns.
    fn typed_batches(sql: &str, bytes: Vec<u8>) -> Vec<bool> {
        let plan = Plan::compile(sql).expect("compiles");
        let summaries: Vec<&Summary> = plan.summaries.iter().collect();
        let shapes: Vec<Shape> = summaries
            .iter()
            .map(|s| shape_of(s).expect("shape"))
            .collect();
        let shown = std::sync::atomic::AtomicU64::new(REJECTS_SHOWN_MAX);
        let stream = &plan.streams[0];
        let fold = Fold::new(&summaries, &shapes, Limits::default(), &shown, stream).expect("fold");
        let mut reads: Vec<usize> = summaries.iter().flat_map(|s| s.reads.clone()).collect();
        reads.sort_unstable();
        reads.dedup();
        let file = ParquetFile::from_bytes(bytes, "t".into(), &stream.schema, &reads)
            .expect("a Parquet file");
        let mut reader = file.read(0..file.row_groups()).expect("reader");
        let mut typed = Vec::new();
        while let Some(batch) = reader.next_batch().expect("a batch") {
            typed.push(fold.columns_of(batch).is_some());
        }
        typed
    }

    #[test]
    fn batches_without_nulls_route_from_typed_columns() {
        let rows = 3 * PARQUET_BATCH_ROWS;
        // Batches are cut at row group ends: the second group has a NULL.
        let typed = typed_batches(
            SQL,
            parquet(rows, PARQUET_BATCH_ROWS, |i| i == PARQUET_BATCH_ROWS + 5),
        );
        assert_eq!(typed, [true, false, true]);
        // Any other filter is evaluated on the record, the rest still
        // read from the columns.
        let other = SQL.replace("WHERE kind = 'a'", "WHERE x > 1 AND kind IN ('a', 'b')");
        let typed = typed_batches(&other, parquet(rows, PARQUET_BATCH_ROWS, |_| false));
        assert_eq!(typed, [true, true, true]);
        // So is an argument that is an expression.
        let other = SQL.replace("max(x)", "max(x * 2)");
        let typed = typed_batches(&other, parquet(rows, PARQUET_BATCH_ROWS, |_| false));
        assert_eq!(typed, [true, true, true]);
    }
}
