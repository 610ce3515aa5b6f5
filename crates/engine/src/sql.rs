//! SQL over summaries: `SELECT ... FROM <summary> ...`, answered by
//! merging the summary's stored states.
//!
//! Each summary reads as a table: its bucket column (`day`), its
//! dimensions, and per aggregate the columns `cardinal run` prints
//! (`users`, `users_lower`, `users_upper`; `revenue_p99`,
//! `revenue_rank_error`). A query never sees events, only the stored
//! groups, and it re-merges their aggregate states, so every approximate
//! value it prints is the estimate of the merged sketch with *that*
//! sketch's interval: the interval stays right however the query
//! re-aggregates (a union's error is not the sum of the parts' errors).
//!
//! ```text
//!  text ── route::parse_query (sqlparser, bounded) ──▶ ast::Query
//!  plan:  FROM -> one summary; names -> source columns (bucket, dims)
//!         or aggregate columns; sum/min/max(agg) and overlap(...)
//!         rewritten; groups = GROUP BY, or the non-aggregate columns
//!         selected; every expression compiled by the route crate's
//!         compiler (the CREATE SUMMARY one)
//!  scan:  for each stored group (bucket, key, states):
//!           WHERE over (bucket, dims)             TRUE keeps it
//!           key' = the group expressions' values  route's key encoding
//!           answer[key'] merge= states            each aggregate's merge
//!           (an overlap side merges only where its condition holds)
//!  rows:  for each answer group: group values, then each aggregate's
//!         output (estimate and bounds, quantiles, ...) as cells;
//!         HAVING, the select list, ORDER BY, OFFSET, LIMIT
//! ```
//!
//! The one rule for grouping: aggregate columns always merge over the
//! stored groups that agree on the query's groups. `GROUP BY` names
//! those groups; without it they are the non-aggregate columns the query
//! selects, so `SELECT * FROM reach` is the stored rows, `SELECT state,
//! users FROM reach` merges each state's days, and `SELECT users FROM
//! reach` merges everything into one row.
//!
//! Intervals are columns, as `run` prints them: `<agg>_lower` and
//! `<agg>_upper` (and `<agg>_rank_error` for quantiles); `overlap(agg,
//! condition_a, condition_b)` as a whole select item gives three
//! columns, its estimate of |A ∩ B| and the interval's bounds.
//! `sum`, `min` and `max` of an aggregate column of the same kind are
//! accepted as the merge they name (what Grafana and BI tools write);
//! any other aggregate call is refused with the rule.
//!
//! Answers are deterministic: groups merge in the rollup's order, the
//! answer's states are seeded from the query (quantile sketches compact
//! with coins), and rows without ORDER BY come sorted by their groups.

use std::cmp::Ordering;
use std::collections::HashMap;

use cardinal_event::{ColumnType, Record, Timestamp, Value, ValueError};
use cardinal_export::{Cell, CellType, Table, TableColumn};
use cardinal_rollup::{AggKind, AggState, Folded, Limits, Output, Rollup, Shape};
use cardinal_route::sqlparser::ast;
use cardinal_route::sqlparser::tokenizer::Span;
use cardinal_route::{
    Expr, Plan, Schema, Scratch, Summary, Type, compile_expr, encode_key_value, error_at,
    key_values, parse_query, span_of_expr,
};

use crate::error::Error;
use crate::query::find_summary;

/// The most stored groups one query may merge: a million. Merging a
/// group costs its states' bytes (a 2 KiB HyperLogLog, a few KiB of
/// KLL), so a million is a couple of GB read, about a second; a query
/// whose WHERE keeps more is refused before it merges anything, with
/// the count and the remedy (a narrower time range).
pub const SQL_GROUPS_SCANNED_MAX: usize = 1_000_000;

/// The most rows an answer returns: 1,000,000 (more is an export, which
/// `run --out` and `serve --out` write as files). LIMIT may ask fewer.
pub const SQL_ROWS_MAX: usize = 1_000_000;

/// A parsed, resolved and compiled query over one summary of a plan.
#[derive(Debug)]
pub struct Prepared {
    summary: usize,
    summary_name: String,
    /// Whether field 0 of a source record is the bucket.
    has_bucket: bool,
    filter: Option<Expr>,
    groups: Vec<GroupColumn>,
    /// The summary's aggregates the query reads, in its order.
    used: Vec<usize>,
    /// Whether each used aggregate's min or max holds instants.
    times: Vec<bool>,
    overlaps: Vec<OverlapSide>,
    /// The columns rows are computed over: groups, then each used
    /// aggregate's columns, then each overlap's.
    post: Vec<PostColumn>,
    select: Vec<(TableColumn, Expr)>,
    having: Option<Expr>,
    order: Vec<OrderKey>,
    limit: Option<usize>,
    offset: usize,
    groups_max: Option<u64>,
}

#[derive(Debug)]
struct GroupColumn {
    expr: Expr,
    ty: Type,
}

#[derive(Debug)]
struct OverlapSide {
    /// Index into `used` of the HyperLogLog.
    used: usize,
    a: Expr,
    b: Expr,
}

#[derive(Debug, Clone)]
struct PostColumn {
    name: String,
    ty: Type,
    from: PostSource,
}

#[derive(Debug, Clone, Copy)]
enum PostSource {
    Group(usize),
    /// Output `field` of used aggregate `usize`.
    Agg(usize, AggField),
    /// Overlap `usize`'s estimate part.
    Overlap(usize, Bound),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum AggField {
    /// The value (count, sum, estimate, min, max, top-k text).
    Value,
    /// An estimate's bound.
    Estimate(Bound),
    /// Quantile at rank index `usize`, or its bound.
    Quantile(usize, Bound),
    RankError,
    /// The state's bytes as hex text: a KLL or Theta sketch's Apache
    /// DataSketches image, a HyperLogLog's postgresql-hll `\\x...`.
    Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Bound {
    Value,
    Lower,
    Upper,
}

#[derive(Debug)]
struct OrderKey {
    expr: Expr,
    descending: bool,
    nulls_first: bool,
}

/// The SQL answer with how much it read.
#[derive(Debug, Clone)]
pub struct SqlAnswer {
    /// The rows.
    pub table: Table,
    /// Stored groups the query's WHERE kept (and merged).
    pub groups_matched: usize,
}

impl Prepared {
    /// Parses and compiles `text` against `plan`.
    ///
    /// # Errors
    ///
    /// [`Error::Sql`] with the line, column and caret of the mistake, or
    /// [`Error::UnknownSummary`].
    pub fn new(plan: &Plan, text: &str) -> Result<Self, Error> {
        let query = parse_query(text).map_err(|source| Error::Sql { source })?;
        Planner::new(plan, text, &query)?.plan(&query)
    }

    /// The index in the plan of the summary the query reads.
    pub fn summary(&self) -> usize {
        self.summary
    }

    /// The name of the summary the query reads.
    pub fn summary_name(&self) -> &str {
        &self.summary_name
    }

    /// The answer's columns (names and types), known before running.
    pub fn columns(&self) -> Vec<TableColumn> {
        self.select.iter().map(|(c, _)| c.clone()).collect()
    }

    /// Answers the query over `rollup`, the summary's merged rollup.
    ///
    /// # Errors
    ///
    /// [`Error::ScanLimit`] past [`SQL_GROUPS_SCANNED_MAX`],
    /// [`Error::GroupLimit`], [`Error::SqlEvaluate`] (overflow, division
    /// by zero).
    pub fn run(&self, rollup: &Rollup) -> Result<SqlAnswer, Error> {
        let partial = self.partial(rollup)?;
        self.finish(&partial.0, partial.1)
    }

    /// The query's answer groups over `rollup`, before rows are made: a
    /// rollup of the query's own shape, mergeable with other nodes'
    /// ([`Rollup::merge`]), and the stored groups it merged.
    ///
    /// # Errors
    ///
    /// As [`Prepared::run`].
    pub fn partial(&self, rollup: &Rollup) -> Result<(Rollup, usize), Error> {
        let groups_max = self.groups_max.unwrap_or(rollup.limits().groups_max);
        let mut out = Rollup::new(
            self.shape(rollup.shape()),
            Limits {
                groups_max,
                retention_ms: None,
                future_ms: None,
            },
        )?;
        let mut scratch = Scratch::new();
        if rollup.group_count() > SQL_GROUPS_SCANNED_MAX {
            let mut kept = 0usize;
            for (bucket, key, _) in rollup.groups() {
                let values = self.source_values(bucket, key);
                if self.keeps(&values, &mut scratch)? {
                    kept += 1;
                    if kept > SQL_GROUPS_SCANNED_MAX {
                        return Err(Error::ScanLimit {
                            summary: self.summary_name.clone(),
                            max: SQL_GROUPS_SCANNED_MAX,
                        });
                    }
                }
            }
        }
        // A query without groups answers one row, from empty states when
        // no stored group matches (`SELECT events FROM reach` is 0, as
        // `SELECT count(*)` of an empty table is).
        if self.groups.is_empty() {
            crate::query::locate_seeded(&mut out, NO_BUCKET, &[])
                .map_err(|_| Error::GroupLimit { groups_max })?;
        }
        let mut matched = 0;
        let mut key = Vec::new();
        for (bucket, group_key, states) in rollup.groups() {
            let values = self.source_values(bucket, group_key);
            if !self.keeps(&values, &mut scratch)? {
                continue;
            }
            matched += 1;
            key.clear();
            let record = ValueRecord { values: &values };
            for group in &self.groups {
                let value = group
                    .expr
                    .eval(&record, &mut scratch)
                    .map_err(|source| self.evaluate(source))?;
                encode_key_value(value, &mut key);
            }
            // Seeded from the group, so that quantile merges compact with
            // the same coins on every run and thread.
            let at = crate::query::locate_seeded(&mut out, NO_BUCKET, &key).map_err(|dropped| {
                assert_eq!(dropped, Folded::DroppedGroupLimit, "no retention");
                Error::GroupLimit { groups_max }
            })?;
            let into = out.states_at(at);
            for (slot, &a) in self.used.iter().enumerate() {
                into[slot].merge(&states[holder(&rollup.shape().aggs, a)])?;
            }
            for (o, side) in self.overlaps.iter().enumerate() {
                let a = self.used[side.used];
                let base = self.used.len() + 2 * o;
                if self.truth(&side.a, &values, &mut scratch)? {
                    into[base].merge(&states[a])?;
                }
                if self.truth(&side.b, &values, &mut scratch)? {
                    into[base + 1].merge(&states[a])?;
                }
            }
        }
        Ok((out, matched))
    }

    /// The shape of the query's answer groups: the used aggregates' kinds,
    /// then two HyperLogLogs per overlap.
    fn shape(&self, shape: &Shape) -> Shape {
        let mut aggs: Vec<AggKind> = self
            .used
            .iter()
            .map(|&a| standalone(&shape.aggs, a))
            .collect();
        for side in &self.overlaps {
            let kind = shape.aggs[self.used[side.used]];
            aggs.push(kind);
            aggs.push(kind);
        }
        Shape { aggs }
    }

    /// The rows of `partial` (from [`Prepared::partial`], possibly merged
    /// over nodes), filtered, projected, ordered and limited.
    ///
    /// # Errors
    ///
    /// [`Error::SqlEvaluate`] (overflow, division by zero).
    pub fn finish(&self, partial: &Rollup, groups_matched: usize) -> Result<SqlAnswer, Error> {
        let kinds = &partial.shape().aggs;
        let mut scratch = Scratch::new();
        let mut rows: Vec<(Vec<Cell>, Vec<Cell>)> = Vec::with_capacity(partial.group_count());
        let mut post: Vec<Cell> = Vec::with_capacity(self.post.len());
        let mut answers: Vec<RowAnswers> = kinds.iter().map(|_| RowAnswers::default()).collect();
        for column in &self.post {
            if let PostSource::Agg(slot, AggField::Quantile(_, Bound::Lower | Bound::Upper)) =
                column.from
            {
                answers[slot].bounded = true;
            }
        }
        for (_, key, states) in partial.groups() {
            let group_values: Vec<Value<'_>> = key_values(key).collect();
            post.clear();
            for a in &mut answers {
                a.output = None;
                a.intervals = None;
            }
            for column in &self.post {
                post.push(match column.from {
                    PostSource::Group(g) => cell_of(group_values[g]),
                    PostSource::Agg(slot, field) => agg_cell(
                        &states[slot],
                        &kinds[slot],
                        field,
                        self.times[slot],
                        &mut answers[slot],
                    ),
                    PostSource::Overlap(o, bound) => {
                        let base = self.used.len() + 2 * o;
                        overlap_cell(&states[base], &states[base + 1], bound)?
                    }
                });
            }
            let record = CellRecord { cells: &post };
            if let Some(having) = &self.having
                && !matches!(
                    having
                        .eval(&record, &mut scratch)
                        .map_err(|e| self.evaluate(e))?,
                    Value::Bool(true)
                )
            {
                continue;
            }
            let mut out = Vec::with_capacity(self.select.len());
            for (_, expr) in &self.select {
                let value = expr
                    .eval(&record, &mut scratch)
                    .map_err(|e| self.evaluate(e))?;
                out.push(cell_of(value));
            }
            let mut keys = Vec::with_capacity(self.order.len().max(self.groups.len()));
            if self.order.is_empty() {
                keys.extend(post[..self.groups.len()].iter().cloned());
            } else {
                for order in &self.order {
                    let value = order
                        .expr
                        .eval(&record, &mut scratch)
                        .map_err(|e| self.evaluate(e))?;
                    keys.push(cell_of(value));
                }
            }
            rows.push((keys, out));
        }
        rows.sort_by(|(a, _), (b, _)| {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let (descending, nulls_first) = self
                    .order
                    .get(i)
                    .map_or((false, false), |o| (o.descending, o.nulls_first));
                let order = compare_cells(x, y, descending, nulls_first);
                if order != Ordering::Equal {
                    return order;
                }
            }
            Ordering::Equal
        });
        let limit = self.limit.unwrap_or(SQL_ROWS_MAX).min(SQL_ROWS_MAX);
        let rows = rows
            .into_iter()
            .skip(self.offset)
            .take(limit)
            .map(|(_, row)| row)
            .collect();
        Ok(SqlAnswer {
            table: Table {
                columns: self.columns(),
                rows,
            },
            groups_matched,
        })
    }

    fn source_values<'k>(&self, bucket: Timestamp, key: &'k [u8]) -> Vec<Value<'k>> {
        let mut values = Vec::with_capacity(8);
        if self.has_bucket {
            values.push(Value::Time(bucket));
        }
        values.extend(key_values(key));
        values
    }

    fn keeps(&self, values: &[Value<'_>], scratch: &mut Scratch) -> Result<bool, Error> {
        match &self.filter {
            None => Ok(true),
            Some(filter) => self.truth(filter, values, scratch),
        }
    }

    fn truth(&self, e: &Expr, values: &[Value<'_>], scratch: &mut Scratch) -> Result<bool, Error> {
        let record = ValueRecord { values };
        let value = e
            .eval(&record, scratch)
            .map_err(|source| self.evaluate(source))?;
        Ok(value == Value::Bool(true))
    }

    fn evaluate(&self, source: cardinal_route::EvalError) -> Error {
        Error::SqlEvaluate {
            summary: self.summary_name.clone(),
            source,
        }
    }
}

/// A summary as SQL sees it: what `GET /v1/summaries` lists and the
/// PostgreSQL catalog answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    /// The summary's name (its table's name).
    pub name: String,
    /// The bucket column's name and width (`day`, `"day"`), if any.
    pub bucket: Option<(String, String)>,
    /// The dimensions' names and types.
    pub dimensions: Vec<TableColumn>,
    /// Each aggregate: its name, its declaration (`hll(log2m=11,
    /// regwidth=5)`), and the columns it gives.
    pub aggregates: Vec<(String, String, Vec<TableColumn>)>,
    /// Every column of `SELECT * FROM <summary>`, in order.
    pub columns: Vec<TableColumn>,
}

/// How every summary of `plan` reads as a table.
///
/// # Errors
///
/// [`Error::Plan`] for a summary whose shape cannot be made (a broken
/// invariant: a running server compiled it).
pub fn describe(plan: &Plan) -> Result<Vec<Described>, Error> {
    let mut out = Vec::with_capacity(plan.summaries.len());
    for (index, summary) in plan.summaries.iter().enumerate() {
        let kinds = crate::plan::shape_of(summary)
            .map_err(|e| Error::Plan(e.to_string()))?
            .aggs;
        let quoted = format!("SELECT * FROM \"{}\"", summary.name.replace('"', "\"\""));
        let columns = Prepared::new(plan, &quoted)?.columns();
        let bucket = summary
            .bucket
            .as_ref()
            .map(|b| (bucket_name(summary), b.unit.to_string()));
        let dimensions = summary
            .dimension_schema()
            .columns
            .into_iter()
            .map(|c| TableColumn {
                ty: cell_type(match c.ty {
                    ColumnType::Bool => Type::Bool,
                    ColumnType::BigInt => Type::Int,
                    ColumnType::Double => Type::Float,
                    ColumnType::Timestamp => Type::Time,
                    _ => Type::Text,
                }),
                name: c.name,
            })
            .collect();
        let planner = Planner::for_summary(plan, "", index)?;
        let mut aggregates = Vec::new();
        for i in 0..kinds.len() {
            let own: Vec<TableColumn> = planner
                .agg_order
                .iter()
                .filter(|c| planner.agg_columns[&c.to_ascii_lowercase()].0 == i)
                .map(|c| {
                    let (_, field) = planner.agg_columns[&c.to_ascii_lowercase()];
                    TableColumn {
                        name: c.clone(),
                        ty: cell_type(field_type(&kinds[i], field, summary.aggregate_is_time(i))),
                    }
                })
                .collect();
            aggregates.push((
                aggregate_name(summary, i),
                kind_text(&standalone(&kinds, i)),
                own,
            ));
        }
        out.push(Described {
            name: summary.name.clone(),
            bucket,
            dimensions,
            aggregates,
            columns,
        });
    }
    Ok(out)
}

/// An aggregate's declaration, for people: `count(*)`, `hll(log2m=11,
/// regwidth=5)`, `quantiles(k=200, ranks=0.5,0.99)`.
fn kind_text(kind: &AggKind) -> String {
    match kind {
        AggKind::CountAll => "count(*)".into(),
        AggKind::Count => "count".into(),
        AggKind::Sum | AggKind::SumInt => "sum".into(),
        AggKind::Avg => "avg".into(),
        AggKind::Min | AggKind::MinInt => "min".into(),
        AggKind::Max | AggKind::MaxInt => "max".into(),
        AggKind::Hll { log2m, regwidth } => format!("hll(log2m={log2m}, regwidth={regwidth})"),
        AggKind::ExactDistinct => "exact_distinct".into(),
        AggKind::Quantiles { k, .. } => {
            let ranks: Vec<String> = kind.ranks().iter().map(f64::to_string).collect();
            format!("quantiles(k={k}, ranks={})", ranks.join(","))
        }
        AggKind::QuantilesOf { .. } => "quantiles".into(),
        AggKind::TopK { k } => format!("topk(k={k})"),
        AggKind::Theta { lg_k } => format!("theta(lg_k={lg_k})"),
    }
}

/// The bucket every answer group is in: the query's groups are its key.
const NO_BUCKET: Timestamp = Timestamp(0);

/// Resolves names and compiles a query's parts.
struct Planner<'a> {
    text: &'a str,
    summary_index: usize,
    summary: &'a Summary,
    /// The columns of a stored group: the bucket (if any), then the
    /// dimensions.
    source: Schema,
    /// Aggregate column name (lower case) -> (aggregate, field).
    agg_columns: HashMap<String, (usize, AggField)>,
    /// Every aggregate column, in `run`'s order, for `*`.
    agg_order: Vec<String>,
    /// The state columns (`users_hll`, `rev_sketch`): selected by name
    /// only, not by `*`.
    hidden: Vec<String>,
    kinds: Vec<AggKind>,
}

/// A select item before compiling: its text, its output name, and the
/// expression rewritten.
struct Item {
    name: String,
    expr: ast::Expr,
    span: Span,
}

impl<'a> Planner<'a> {
    fn new(plan: &'a Plan, text: &'a str, query: &ast::Query) -> Result<Self, Error> {
        let select = select_of(text, query)?;
        let table = table_of(text, select)?;
        let (summary_index, _) = find_summary(plan, &table)?;
        Self::for_summary(plan, text, summary_index)
    }

    fn for_summary(plan: &'a Plan, text: &'a str, summary_index: usize) -> Result<Self, Error> {
        let summary = &plan.summaries[summary_index];
        let mut columns = Vec::new();
        if summary.bucket.is_some() {
            columns.push(cardinal_event::Column {
                path: vec![bucket_name(summary)],
                name: bucket_name(summary),
                ty: ColumnType::Timestamp,
            });
        }
        columns.extend(summary.dimension_schema().columns);
        let kinds: Vec<AggKind> = crate::plan::shape_of(summary)
            .map_err(|e| Error::Plan(e.to_string()))?
            .aggs;
        let mut agg_columns = HashMap::new();
        let mut agg_order = Vec::new();
        let mut hidden = Vec::new();
        for (i, kind) in kinds.iter().enumerate() {
            let name = aggregate_name(summary, i);
            let mut add = |column: String, field| {
                agg_columns.insert(column.to_ascii_lowercase(), (i, field));
                agg_order.push(column);
            };
            match kind {
                AggKind::Hll { .. } | AggKind::ExactDistinct | AggKind::Theta { .. } => {
                    add(name.clone(), AggField::Value);
                    add(format!("{name}_lower"), AggField::Estimate(Bound::Lower));
                    add(format!("{name}_upper"), AggField::Estimate(Bound::Upper));
                }
                AggKind::Quantiles { .. } | AggKind::QuantilesOf { .. } => {
                    let ranks = kind.ranks();
                    for (r, rank) in ranks.iter().enumerate() {
                        let column = if ranks.len() == 1 {
                            name.clone()
                        } else {
                            format!("{name}_p{}", rank * 100.0)
                        };
                        add(column.clone(), AggField::Quantile(r, Bound::Value));
                        add(
                            format!("{column}_lower"),
                            AggField::Quantile(r, Bound::Lower),
                        );
                        add(
                            format!("{column}_upper"),
                            AggField::Quantile(r, Bound::Upper),
                        );
                    }
                    add(format!("{name}_rank_error"), AggField::RankError);
                }
                _ => add(name.clone(), AggField::Value),
            }
            let bytes = match kind {
                AggKind::Hll { .. } => Some(format!("{name}_hll")),
                AggKind::Quantiles { .. } | AggKind::Theta { .. } => Some(format!("{name}_sketch")),
                _ => None,
            };
            if let Some(column) = bytes {
                agg_columns.insert(column.to_ascii_lowercase(), (i, AggField::Bytes));
                agg_order.push(column.clone());
                hidden.push(column);
            }
        }
        Ok(Self {
            text,
            summary_index,
            summary,
            source: Schema { columns },
            agg_columns,
            agg_order,
            hidden,
            kinds,
        })
    }

    fn fail<T>(&self, span: Span, message: impl Into<String>) -> Result<T, Error> {
        Err(Error::Sql {
            source: error_at(self.text, span, message),
        })
    }

    fn is_source(&self, name: &str) -> bool {
        self.source
            .columns
            .iter()
            .any(|c| c.name.eq_ignore_ascii_case(name))
    }

    fn plan(self, query: &ast::Query) -> Result<Prepared, Error> {
        let select = select_of(self.text, query)?;
        let mut overlaps: Vec<(usize, ast::Expr, ast::Expr)> = Vec::new();
        // The select list, `*` expanded, each item rewritten.
        let mut items: Vec<Item> = Vec::new();
        for item in &select.projection {
            let (expr, alias) = match item {
                ast::SelectItem::UnnamedExpr(e) => (e, None),
                ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                ast::SelectItem::Wildcard(_) => {
                    for c in &self.source.columns {
                        items.push(Item {
                            name: c.name.clone(),
                            expr: ident(&c.name),
                            span: Span::empty(),
                        });
                    }
                    for c in self.agg_order.iter().filter(|c| !self.hidden.contains(c)) {
                        items.push(Item {
                            name: c.clone(),
                            expr: ident(c),
                            span: Span::empty(),
                        });
                    }
                    continue;
                }
                other => {
                    return self.fail(
                        span_of_item(other),
                        "this select item is not supported; select expressions, aliases or *",
                    );
                }
            };
            let span = span_of_expr(expr, Span::empty());
            // A whole `overlap(...)`: its estimate and both bounds.
            if let ast::Expr::Function(f) = expr
                && function_name(f) == "overlap"
            {
                let o = overlaps.len();
                overlaps.push(self.overlap_args(f, span)?);
                let name = alias.unwrap_or_else(|| "overlap".to_owned());
                for (suffix, bound) in [("", "value"), ("_lower", "lower"), ("_upper", "upper")] {
                    items.push(Item {
                        name: format!("{name}{suffix}"),
                        expr: ident(&format!("#overlap{o}_{bound}")),
                        span,
                    });
                }
                continue;
            }
            let rewritten = self.rewrite(expr, &mut overlaps)?;
            let name = alias.unwrap_or_else(|| output_name(expr));
            items.push(Item {
                name,
                expr: rewritten,
                span,
            });
        }
        if items.is_empty() {
            return self.fail(Span::empty(), "select at least one column");
        }
        // The groups: GROUP BY's, or the selected non-aggregate columns.
        let mut group_asts: Vec<(String, ast::Expr)> = Vec::new();
        match &select.group_by {
            ast::GroupByExpr::Expressions(list, modifiers) => {
                if !modifiers.is_empty() {
                    return self.fail(
                        Span::empty(),
                        "GROUP BY modifiers (ROLLUP, CUBE) are not supported",
                    );
                }
                for e in list {
                    let (name, e) = self.group_item(e, select, &items)?;
                    group_asts.push((name, e));
                }
            }
            ast::GroupByExpr::All(_) => {
                return self.fail(
                    Span::empty(),
                    "GROUP BY ALL is not supported; name the groups",
                );
            }
        }
        let explicit = !group_asts.is_empty();
        if !explicit {
            for item in &items {
                if !self.reads_aggregates(&item.expr) && reads_columns(&item.expr) {
                    group_asts.push((item.name.clone(), item.expr.clone()));
                }
            }
        }
        let mut groups = Vec::new();
        for (_, e) in &group_asts {
            let (expr, ty) = self.compile_source(e)?;
            groups.push(GroupColumn { expr, ty });
        }
        let filter = match &select.selection {
            None => None,
            Some(e) => {
                if let Some(span) = self.find_aggregate(e) {
                    return self.fail(
                        span,
                        "WHERE keeps stored groups by their bucket and dimensions; filter aggregates with HAVING",
                    );
                }
                let (expr, ty) = self.compile_source(e)?;
                if !matches!(ty, Type::Bool | Type::Null) {
                    return self.fail(
                        span_of_expr(e, Span::empty()),
                        format!("WHERE needs a condition, and this is {}", ty.name()),
                    );
                }
                Some(expr)
            }
        };
        // HAVING and ORDER BY, rewritten as the select list is.
        let having = match &select.having {
            None => None,
            Some(e) => Some((
                self.rewrite(e, &mut overlaps)?,
                span_of_expr(e, Span::empty()),
            )),
        };
        let mut order_asts = Vec::new();
        if let Some(order_by) = &query.order_by {
            let ast::OrderByKind::Expressions(list) = &order_by.kind else {
                return self.fail(
                    Span::empty(),
                    "ORDER BY ALL is not supported; name the columns",
                );
            };
            for o in list {
                let e = match &o.expr {
                    ast::Expr::Value(v) if let Some(k) = ordinal(&v.value) => {
                        let Some(item) = items.get(k.wrapping_sub(1)) else {
                            return self.fail(
                                v.span,
                                format!(
                                    "ORDER BY {k}: the select list has {} columns",
                                    items.len()
                                ),
                            );
                        };
                        item.expr.clone()
                    }
                    ast::Expr::Identifier(id)
                        if let Some(item) = items
                            .iter()
                            .find(|i| i.name.eq_ignore_ascii_case(&id.value)) =>
                    {
                        item.expr.clone()
                    }
                    other => self.rewrite(other, &mut overlaps)?,
                };
                let descending = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
                order_asts.push((e, descending, o.options.nulls_first.unwrap_or(descending)));
            }
        }
        // The aggregates read, and the columns rows are computed over.
        let mut used: Vec<usize> = Vec::new();
        let mut note = |e: &ast::Expr| {
            visit_idents(e, &mut |name| {
                if let Some(&(a, _)) = self.agg_columns.get(&name.to_ascii_lowercase())
                    && !used.contains(&a)
                {
                    used.push(a);
                }
            });
        };
        items.iter().for_each(|i| note(&i.expr));
        if let Some((h, _)) = &having {
            note(h);
        }
        order_asts.iter().for_each(|(e, _, _)| note(e));
        let mut overlap_sides = Vec::new();
        for (agg, _, _) in &overlaps {
            if !used.contains(agg) {
                used.push(*agg);
            }
        }
        used.sort_unstable();
        for (agg, a, b) in &overlaps {
            let (a, _) = self.compile_condition(a, "an overlap's side")?;
            let (b, _) = self.compile_condition(b, "an overlap's side")?;
            overlap_sides.push(OverlapSide {
                used: used.iter().position(|u| u == agg).expect("noted"),
                a,
                b,
            });
        }
        let mut post = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            post.push(PostColumn {
                name: format!("#group{g}"),
                ty: group.ty,
                from: PostSource::Group(g),
            });
        }
        let mut named: Vec<String> = Vec::new();
        let mut name_all =
            |e: &ast::Expr| visit_idents(e, &mut |n| named.push(n.to_ascii_lowercase()));
        items.iter().for_each(|i| name_all(&i.expr));
        if let Some((h, _)) = &having {
            name_all(h);
        }
        order_asts.iter().for_each(|(e, _, _)| name_all(e));
        for (slot, &a) in used.iter().enumerate() {
            for column in &self.agg_order {
                let (agg, field) = self.agg_columns[&column.to_ascii_lowercase()];
                // Only the columns the query names: each quantile column
                // and bound builds a sorted view of its sketch per row
                // (16 views a row for `revenue_p99` alone, before).
                if !named.contains(&column.to_ascii_lowercase()) {
                    continue;
                }
                if agg == a {
                    post.push(PostColumn {
                        name: column.clone(),
                        ty: field_type(&self.kinds[a], field, self.summary.aggregate_is_time(a)),
                        from: PostSource::Agg(slot, field),
                    });
                }
            }
        }
        for o in 0..overlap_sides.len() {
            for (bound, name) in [
                (Bound::Value, "value"),
                (Bound::Lower, "lower"),
                (Bound::Upper, "upper"),
            ] {
                post.push(PostColumn {
                    name: format!("#overlap{o}_{name}"),
                    ty: Type::Float,
                    from: PostSource::Overlap(o, bound),
                });
            }
        }
        let post_schema = Schema {
            columns: post
                .iter()
                .map(|c| cardinal_event::Column {
                    path: vec![c.name.clone()],
                    name: c.name.clone(),
                    ty: column_type(c.ty),
                })
                .collect(),
        };
        // Group expressions in the select list, HAVING and ORDER BY read
        // the group's column.
        let grouped = |e: &ast::Expr| -> ast::Expr { replace_groups(e, &group_asts) };
        let mut select_out = Vec::new();
        for item in &items {
            let e = grouped(&item.expr);
            let (expr, ty) = self.compile_post(&e, &post_schema, item.span, explicit)?;
            select_out.push((
                TableColumn {
                    name: item.name.clone(),
                    ty: cell_type(ty),
                },
                expr,
            ));
        }
        let having = match having {
            None => None,
            Some((e, span)) => {
                let (expr, ty) = self.compile_post(&grouped(&e), &post_schema, span, explicit)?;
                if !matches!(ty, Type::Bool | Type::Null) {
                    return self.fail(
                        span,
                        format!("HAVING needs a condition, and this is {}", ty.name()),
                    );
                }
                Some(expr)
            }
        };
        let mut order = Vec::new();
        for (e, descending, nulls_first) in order_asts {
            let span = span_of_expr(&e, Span::empty());
            let (expr, _) = self.compile_post(&grouped(&e), &post_schema, span, explicit)?;
            order.push(OrderKey {
                expr,
                descending,
                nulls_first,
            });
        }
        let (limit, offset) = self.limits(query)?;
        Ok(Prepared {
            summary: self.summary_index,
            summary_name: self.summary.name.clone(),
            has_bucket: self.summary.bucket.is_some(),
            filter,
            groups,
            times: used
                .iter()
                .map(|&a| self.summary.aggregate_is_time(a))
                .collect(),
            used,
            overlaps: overlap_sides,
            post,
            select: select_out,
            having,
            order,
            limit,
            offset,
            groups_max: None,
        })
    }

    /// A GROUP BY item: an ordinal or a select alias names a select
    /// item; anything else is an expression over the stored columns.
    fn group_item(
        &self,
        e: &ast::Expr,
        select: &ast::Select,
        items: &[Item],
    ) -> Result<(String, ast::Expr), Error> {
        let _ = select;
        match e {
            ast::Expr::Value(v) if let Some(k) = ordinal(&v.value) => {
                match items.get(k.wrapping_sub(1)) {
                    Some(item) => Ok((item.name.clone(), item.expr.clone())),
                    None => self.fail(
                        v.span,
                        format!("GROUP BY {k}: the select list has {} columns", items.len()),
                    ),
                }
            }
            ast::Expr::Identifier(id) if !self.is_source(&id.value) => {
                match items
                    .iter()
                    .find(|i| i.name.eq_ignore_ascii_case(&id.value))
                {
                    Some(item) => Ok((item.name.clone(), item.expr.clone())),
                    None => Ok((id.value.clone(), e.clone())),
                }
            }
            _ => Ok((output_name(e), e.clone())),
        }
    }

    fn overlap_args(
        &self,
        f: &ast::Function,
        span: Span,
    ) -> Result<(usize, ast::Expr, ast::Expr), Error> {
        const USAGE: &str = "overlap(hll_column, condition_a, condition_b)";
        let args = function_args(f);
        let [Some(agg), Some(a), Some(b)] = args.as_slice() else {
            return self.fail(span, format!("expected {USAGE}"));
        };
        let ast::Expr::Identifier(name) = agg else {
            return self.fail(
                span_of_expr(agg, span),
                format!("expected {USAGE}: the first argument names an hll aggregate"),
            );
        };
        match self.agg_columns.get(&name.value.to_ascii_lowercase()) {
            Some(&(i, AggField::Value)) if matches!(self.kinds[i], AggKind::Hll { .. }) => {
                Ok((i, (*a).clone(), (*b).clone()))
            }
            _ => self.fail(
                name.span,
                format!(
                    "{} is not an hll aggregate of summary {}; overlaps are estimated from HyperLogLogs",
                    name.value, self.summary.name
                ),
            ),
        }
    }

    /// Rewrites `sum`/`min`/`max` of an aggregate column into the column
    /// (its merge), and `overlap(...)` inside an expression into its
    /// estimate; refuses other aggregate calls with the rule.
    fn rewrite(
        &self,
        e: &ast::Expr,
        overlaps: &mut Vec<(usize, ast::Expr, ast::Expr)>,
    ) -> Result<ast::Expr, Error> {
        let span = span_of_expr(e, Span::empty());
        Ok(match e {
            ast::Expr::Function(f) => {
                let name = function_name(f);
                match name.as_str() {
                    "overlap" => {
                        let o = overlaps.len();
                        overlaps.push(self.overlap_args(f, span)?);
                        ident(&format!("#overlap{o}_value"))
                    }
                    "sum" | "min" | "max" | "count" | "avg" | "hll" | "exact_distinct"
                    | "quantiles" | "approx_quantile" | "topk" | "theta" | "merge" => {
                        let args = function_args(f);
                        let column = match args.as_slice() {
                            [Some(ast::Expr::Identifier(id))] => self
                                .agg_columns
                                .get(&id.value.to_ascii_lowercase())
                                .map(|&(a, field)| (id, a, field)),
                            _ => None,
                        };
                        let Some((id, a, field)) = column else {
                            return self.fail(
                                span,
                                format!(
                                    "{name}(...) over stored groups: aggregates are already columns of summary {}, merged over the query's groups ({}); select them by name, or sum/min/max of a count, sum, min or max column",
                                    self.summary.name,
                                    self.agg_order.join(", ")
                                ),
                            );
                        };
                        let fits = matches!(
                            (name.as_str(), &self.kinds[a], field),
                            ("merge", _, _)
                                | (
                                    "sum",
                                    AggKind::CountAll
                                        | AggKind::Count
                                        | AggKind::Sum
                                        | AggKind::SumInt,
                                    AggField::Value,
                                )
                                | ("min", AggKind::Min | AggKind::MinInt, AggField::Value)
                                | ("max", AggKind::Max | AggKind::MaxInt, AggField::Value)
                        );
                        if !fits {
                            return self.fail(
                                span,
                                format!(
                                    "{name}({}) is not how {} merges; select {} itself: it is merged over the query's groups with its own merge",
                                    id.value, id.value, id.value
                                ),
                            );
                        }
                        ast::Expr::Identifier(id.clone())
                    }
                    _ => {
                        let mut f = f.clone();
                        if let ast::FunctionArguments::List(list) = &mut f.args {
                            for arg in &mut list.args {
                                if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(
                                    inner,
                                )) = arg
                                {
                                    *inner = self.rewrite(inner, overlaps)?;
                                }
                            }
                        }
                        ast::Expr::Function(f)
                    }
                }
            }
            ast::Expr::BinaryOp { left, op, right } => ast::Expr::BinaryOp {
                left: Box::new(self.rewrite(left, overlaps)?),
                op: op.clone(),
                right: Box::new(self.rewrite(right, overlaps)?),
            },
            ast::Expr::UnaryOp { op, expr } => ast::Expr::UnaryOp {
                op: *op,
                expr: Box::new(self.rewrite(expr, overlaps)?),
            },
            ast::Expr::Nested(inner) => ast::Expr::Nested(Box::new(self.rewrite(inner, overlaps)?)),
            ast::Expr::Cast { expr, .. } => {
                let mut cast = e.clone();
                if let ast::Expr::Cast { expr: inner, .. } = &mut cast {
                    **inner = self.rewrite(expr, overlaps)?;
                }
                cast
            }
            other => other.clone(),
        })
    }

    /// Whether `e` names an aggregate column (or an overlap).
    fn reads_aggregates(&self, e: &ast::Expr) -> bool {
        let mut found = false;
        visit_idents(e, &mut |name| {
            found |= name.starts_with("#overlap")
                || self.agg_columns.contains_key(&name.to_ascii_lowercase());
        });
        found
    }

    /// Where `e` names an aggregate column, if it does.
    fn find_aggregate(&self, e: &ast::Expr) -> Option<Span> {
        let mut found = None;
        visit_exprs(e, &mut |e| {
            let hit = match e {
                ast::Expr::Identifier(id) => {
                    self.agg_columns
                        .contains_key(&id.value.to_ascii_lowercase())
                        && !self.is_source(&id.value)
                }
                ast::Expr::Function(f) => matches!(
                    function_name(f).as_str(),
                    "overlap" | "sum" | "count" | "min" | "max" | "avg"
                ),
                _ => false,
            };
            if hit && found.is_none() {
                found = Some(span_of_expr(e, Span::empty()));
            }
        });
        found
    }

    fn owner(&self) -> String {
        format!("summary {}", self.summary.name)
    }

    fn compile_source(&self, e: &ast::Expr) -> Result<(Expr, Type), Error> {
        if let Some(span) = self.find_aggregate(e) {
            return self.fail(
                span,
                "aggregates cannot be grouped by; group by the bucket or dimensions",
            );
        }
        compile_expr(self.text, &self.source, &self.owner(), e)
            .map_err(|source| Error::Sql { source })
    }

    fn compile_condition(&self, e: &ast::Expr, what: &str) -> Result<(Expr, Type), Error> {
        let (expr, ty) = self.compile_source(e)?;
        if !matches!(ty, Type::Bool | Type::Null) {
            return self.fail(
                span_of_expr(e, Span::empty()),
                format!("{what} needs a condition, and this is {}", ty.name()),
            );
        }
        Ok((expr, ty))
    }

    /// Compiles an expression over the answer's columns; a stored column
    /// that is not a group is refused with the rule.
    fn compile_post(
        &self,
        e: &ast::Expr,
        schema: &Schema,
        span: Span,
        explicit: bool,
    ) -> Result<(Expr, Type), Error> {
        let mut stray = None;
        visit_exprs(e, &mut |e| {
            if let ast::Expr::Identifier(id) = e
                && stray.is_none()
                && self.is_source(&id.value)
                && !schema
                    .columns
                    .iter()
                    .any(|c| c.name.eq_ignore_ascii_case(&id.value))
            {
                stray = Some((id.value.clone(), id.span));
            }
        });
        if let Some((name, at)) = stray {
            let at = if at.start.line == 0 { span } else { at };
            return self.fail(
                at,
                if explicit {
                    format!("{name} is neither grouped nor an aggregate: add it to GROUP BY")
                } else {
                    format!("{name} is read inside an expression over aggregates; select it on its own (it then groups) or GROUP BY it")
                },
            );
        }
        compile_expr(self.text, schema, &self.owner(), e).map_err(|source| Error::Sql { source })
    }

    fn limits(&self, query: &ast::Query) -> Result<(Option<usize>, usize), Error> {
        let Some(clause) = &query.limit_clause else {
            return Ok((None, 0));
        };
        let ast::LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        } = clause
        else {
            return self.fail(Span::empty(), "write LIMIT n OFFSET m");
        };
        if !limit_by.is_empty() {
            return self.fail(Span::empty(), "LIMIT BY is not supported");
        }
        let number = |e: &ast::Expr, what: &str| -> Result<usize, Error> {
            match e {
                ast::Expr::Value(v) if let Some(n) = ordinal(&v.value) => Ok(n),
                ast::Expr::Value(v) if matches!(v.value, ast::Value::Number(ref t, _) if t == "0") => {
                    Ok(0)
                }
                other => self.fail(
                    span_of_expr(other, Span::empty()),
                    format!("{what} needs a whole number"),
                ),
            }
        };
        let limit = limit.as_ref().map(|e| number(e, "LIMIT")).transpose()?;
        let offset = offset
            .as_ref()
            .map(|o| number(&o.value, "OFFSET"))
            .transpose()?
            .unwrap_or(0);
        Ok((limit, offset))
    }
}

/// The one SELECT of a query, or a refusal of what it holds beside.
fn select_of<'q>(text: &str, query: &'q ast::Query) -> Result<&'q ast::Select, Error> {
    let fail = |message: &str| {
        Err(Error::Sql {
            source: error_at(text, Span::empty(), message),
        })
    };
    if query.with.is_some() {
        return fail("WITH is not supported: one SELECT over one summary");
    }
    if query.fetch.is_some() || !query.locks.is_empty() {
        return fail("FETCH and FOR UPDATE are not supported");
    }
    let ast::SetExpr::Select(select) = &*query.body else {
        return fail(
            "UNION, INTERSECT, EXCEPT and VALUES are not supported: one SELECT over one summary",
        );
    };
    if select.distinct.is_some() {
        return fail("DISTINCT is not supported: GROUP BY gives each group once");
    }
    if !select.named_window.is_empty() || select.qualify.is_some() || select.into.is_some() {
        return fail("windows, QUALIFY and SELECT INTO are not supported");
    }
    Ok(select)
}

/// The one summary a SELECT reads (`reach`, `public.reach`).
fn table_of(text: &str, select: &ast::Select) -> Result<String, Error> {
    let fail = |span: Span, message: &str| {
        Err(Error::Sql {
            source: error_at(text, span, message),
        })
    };
    let [from] = select.from.as_slice() else {
        return fail(
            Span::empty(),
            if select.from.is_empty() {
                "name a summary: SELECT ... FROM <summary>"
            } else {
                "one summary per query: joins are not supported"
            },
        );
    };
    if !from.joins.is_empty() {
        return fail(
            Span::empty(),
            "one summary per query: joins are not supported",
        );
    }
    let ast::TableFactor::Table { name, .. } = &from.relation else {
        return fail(
            Span::empty(),
            "FROM names a summary; subqueries are not supported",
        );
    };
    let parts: Vec<&str> = name
        .0
        .iter()
        .filter_map(|p| match p {
            ast::ObjectNamePart::Identifier(id) => Some(id.value.as_str()),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [table] | ["public", table] => Ok((*table).to_owned()),
        _ => fail(
            Span::empty(),
            &format!("unknown table {name}: FROM names a summary"),
        ),
    }
}

fn bucket_name(summary: &Summary) -> String {
    summary
        .outputs
        .iter()
        .find(|o| o.source == cardinal_route::OutputSource::Bucket)
        .map_or_else(|| "bucket".into(), |o| o.name.clone())
}

fn aggregate_name(summary: &Summary, i: usize) -> String {
    summary
        .outputs
        .iter()
        .find(|o| o.source == cardinal_route::OutputSource::Aggregate(i))
        .map_or_else(|| format!("agg{i}"), |o| o.name.clone())
}

fn ident(name: &str) -> ast::Expr {
    ast::Expr::Identifier(ast::Ident::new(name))
}

fn function_name(f: &ast::Function) -> String {
    f.name.to_string().to_ascii_lowercase()
}

fn function_args(f: &ast::Function) -> Vec<Option<&ast::Expr>> {
    match &f.args {
        ast::FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|arg| match arg {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A select item's name when it has no alias: a column's own name, a
/// call's function name, else PostgreSQL's `?column?`.
fn output_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Identifier(id) => id.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => {
            parts.last().map_or_else(String::new, |p| p.value.clone())
        }
        ast::Expr::Function(f) => f.name.to_string().to_ascii_lowercase(),
        ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => output_name(expr),
        ast::Expr::Extract { .. } => "extract".to_owned(),
        _ => "?column?".to_owned(),
    }
}

fn span_of_item(item: &ast::SelectItem) -> Span {
    use ast::Spanned as _;
    item.span()
}

/// A positive whole-number literal (`GROUP BY 2`, `LIMIT 10`).
fn ordinal(value: &ast::Value) -> Option<usize> {
    match value {
        ast::Value::Number(text, _) => text.parse().ok().filter(|&n: &usize| n > 0),
        _ => None,
    }
}

/// Calls `visit` on every expression of `e`'s tree that the rewriter
/// and compiler walk (operators, calls, casts, lists), `e` first.
fn visit_exprs(e: &ast::Expr, visit: &mut impl FnMut(&ast::Expr)) {
    visit(e);
    match e {
        ast::Expr::BinaryOp { left, right, .. } => {
            visit_exprs(left, visit);
            visit_exprs(right, visit);
        }
        ast::Expr::UnaryOp { expr, .. }
        | ast::Expr::Nested(expr)
        | ast::Expr::Cast { expr, .. }
        | ast::Expr::IsNull(expr)
        | ast::Expr::IsNotNull(expr)
        | ast::Expr::Floor { expr, .. }
        | ast::Expr::Ceil { expr, .. }
        | ast::Expr::Extract { expr, .. } => visit_exprs(expr, visit),
        ast::Expr::Between {
            expr, low, high, ..
        } => {
            visit_exprs(expr, visit);
            visit_exprs(low, visit);
            visit_exprs(high, visit);
        }
        ast::Expr::InList { expr, list, .. } => {
            visit_exprs(expr, visit);
            list.iter().for_each(|e| visit_exprs(e, visit));
        }
        ast::Expr::Function(f) => {
            for arg in function_args(f).into_iter().flatten() {
                visit_exprs(arg, visit);
            }
        }
        _ => {}
    }
}

fn visit_idents(e: &ast::Expr, visit: &mut impl FnMut(&str)) {
    visit_exprs(e, &mut |e| {
        if let ast::Expr::Identifier(id) = e {
            visit(&id.value);
        }
    });
}

/// Whether `e` reads any column (a literal-only item does not group).
fn reads_columns(e: &ast::Expr) -> bool {
    let mut found = false;
    visit_idents(e, &mut |_| found = true);
    found
}

/// `e` with every subexpression written as a group's expression (same
/// text) replaced by that group's column.
fn replace_groups(e: &ast::Expr, groups: &[(String, ast::Expr)]) -> ast::Expr {
    let text = e.to_string();
    if let Some(g) = groups.iter().position(|(_, g)| g.to_string() == text) {
        return ident(&format!("#group{g}"));
    }
    match e {
        ast::Expr::BinaryOp { left, op, right } => ast::Expr::BinaryOp {
            left: Box::new(replace_groups(left, groups)),
            op: op.clone(),
            right: Box::new(replace_groups(right, groups)),
        },
        ast::Expr::UnaryOp { op, expr } => ast::Expr::UnaryOp {
            op: *op,
            expr: Box::new(replace_groups(expr, groups)),
        },
        ast::Expr::Nested(inner) => ast::Expr::Nested(Box::new(replace_groups(inner, groups))),
        ast::Expr::Cast { expr, .. } => {
            let mut cast = e.clone();
            if let ast::Expr::Cast { expr: inner, .. } = &mut cast {
                **inner = replace_groups(expr, groups);
            }
            cast
        }
        ast::Expr::Function(f) => {
            let mut f = f.clone();
            if let ast::FunctionArguments::List(list) = &mut f.args {
                for arg in &mut list.args {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(inner)) = arg {
                        *inner = replace_groups(inner, groups);
                    }
                }
            }
            ast::Expr::Function(f)
        }
        other => other.clone(),
    }
}

fn field_type(kind: &AggKind, field: AggField, is_time: bool) -> Type {
    match field {
        AggField::Bytes => Type::Text,
        AggField::RankError => Type::Float,
        AggField::Quantile(..) => Type::Float,
        AggField::Estimate(_) | AggField::Value => match kind {
            AggKind::CountAll
            | AggKind::Count
            | AggKind::SumInt
            | AggKind::MinInt
            | AggKind::MaxInt => Type::Int,
            AggKind::ExactDistinct => Type::Int,
            AggKind::Min | AggKind::Max if is_time => Type::Time,
            AggKind::TopK { .. } => Type::Text,
            _ => Type::Float,
        },
    }
}

fn column_type(ty: Type) -> ColumnType {
    match ty {
        Type::Bool => ColumnType::Bool,
        Type::Int => ColumnType::BigInt,
        Type::Float => ColumnType::Double,
        Type::Time => ColumnType::Timestamp,
        Type::Text | Type::Null => ColumnType::Text,
    }
}

fn cell_type(ty: Type) -> CellType {
    match ty {
        Type::Bool => CellType::Bool,
        Type::Int => CellType::Int,
        Type::Float => CellType::Float,
        Type::Time => CellType::Time,
        Type::Text | Type::Null => CellType::Text,
    }
}

fn cell_of(value: Value<'_>) -> Cell {
    match value {
        Value::Null => Cell::Null,
        Value::Bool(b) => Cell::Bool(b),
        Value::Int(i) => Cell::Int(i),
        Value::Float(f) => Cell::Float(f),
        Value::Text(t) => Cell::Text(match std::str::from_utf8(t) {
            Ok(text) => text.to_owned(),
            Err(_) => cardinal_export::text_escaped(t),
        }),
        Value::Time(t) => Cell::Time(t),
    }
}

/// What one group's aggregate answers, worked out once for the row
/// however many of its columns the query names: `users`, `users_lower`
/// and `users_upper` are one HyperLogLog estimate, and the quantiles of
/// a sketch and their bounds one sorted view.
#[derive(Default)]
struct RowAnswers {
    /// The query names a bound of one of its quantiles: its values are
    /// read from the intervals too, one view for all.
    bounded: bool,
    output: Option<Output>,
    /// Per rank of the aggregate, the quantile with its 95% interval.
    intervals: Option<Vec<Option<cardinal_sketch::Estimate>>>,
}

/// One output cell of an aggregate's merged state.
fn agg_cell(
    state: &AggState,
    kind: &AggKind,
    field: AggField,
    is_time: bool,
    answers: &mut RowAnswers,
) -> Cell {
    if field == AggField::Bytes {
        return match state {
            AggState::Hll(h) => Cell::Text(h.to_hex()),
            other => cardinal_export::sketch_text(other, cardinal_export::SketchEncoding::Hex)
                .map_or(Cell::Null, Cell::Text),
        };
    }
    if let AggField::Quantile(r, bound) = field
        && answers.bounded
    {
        // The calibrated 95% interval of the value at that rank (the
        // sketch crate's `quantile_interval`), for every rank of the
        // aggregate from one sorted view; once worked out, it answers
        // the values too.
        let intervals = answers
            .intervals
            .get_or_insert_with(|| state.quantile_intervals(kind.ranks()));
        return match intervals.get(r).copied().flatten() {
            Some(e) => Cell::Float(match bound {
                Bound::Value => e.value,
                Bound::Lower => e.lower,
                Bound::Upper => e.upper,
            }),
            None => Cell::Null,
        };
    }
    let output = answers.output.get_or_insert_with(|| state.output(kind));
    match (output, field) {
        (Output::Count(n), _) => i64::try_from(*n).map_or(Cell::Float(*n as f64), Cell::Int),
        (Output::Number(v), _) => match *v {
            None => Cell::Null,
            // An instant's milliseconds were an i64 before they were an
            // f64 (exactly: |ms| < 2^53 for every parsable time).
            #[allow(clippy::cast_possible_truncation)]
            Some(ms) if is_time => Cell::Time(Timestamp(ms as i64)),
            Some(v) => Cell::Float(v),
        },
        (Output::Int(v), _) => match *v {
            None => Cell::Null,
            Some(v) => i64::try_from(v).map_or(Cell::Float(v as f64), Cell::Int),
        },
        (Output::Estimate(e), field) => {
            let v = match field {
                AggField::Estimate(Bound::Lower) => e.lower,
                AggField::Estimate(Bound::Upper) => e.upper,
                _ => e.value,
            };
            // Counts of distinct values print whole, as `run` prints them.
            let v = v.round();
            if matches!(kind, AggKind::ExactDistinct) {
                // A count of distinct values, below 2^53.
                #[allow(clippy::cast_possible_truncation)]
                Cell::Int(v as i64)
            } else {
                Cell::Float(v)
            }
        }
        (Output::Quantiles { values, rank_error }, field) => match field {
            AggField::RankError => Cell::Float(*rank_error),
            AggField::Quantile(r, _) => match values.get(r) {
                Some(&(_, Some(value))) => Cell::Float(value),
                _ => Cell::Null,
            },
            _ => Cell::Null,
        },
        (Output::TopK(items), _) => Cell::Text(
            items
                .iter()
                .map(|(name, e)| format!("{}:{:.0}", cardinal_export::text_escaped(name), e.value))
                .collect::<Vec<_>>()
                .join("|"),
        ),
    }
}

/// The aggregate whose state holds aggregate `a`'s values: a quantile
/// aggregate over the same argument and `k` as an earlier one reads that
/// one's sketch (`AggKind::QuantilesOf`).
fn holder(kinds: &[AggKind], a: usize) -> usize {
    match kinds[a] {
        AggKind::QuantilesOf { of, .. } => usize::from(of),
        _ => a,
    }
}

/// Aggregate `a`'s kind as a state of its own: `QuantilesOf` becomes the
/// quantiles of the sketch it reads, at its own ranks.
fn standalone(kinds: &[AggKind], a: usize) -> AggKind {
    match &kinds[a] {
        AggKind::QuantilesOf { of, ranks } => match &kinds[usize::from(*of)] {
            AggKind::Quantiles { k, .. } => AggKind::Quantiles {
                k: *k,
                ranks: *ranks,
            },
            other => unreachable!("QuantilesOf reads a quantile sketch, not {other:?}"),
        },
        other => *other,
    }
}

fn overlap_cell(a: &AggState, b: &AggState, bound: Bound) -> Result<Cell, Error> {
    let (AggState::Hll(a), AggState::Hll(b)) = (a, b) else {
        unreachable!("overlap sides are HyperLogLogs");
    };
    let fit = a.intersection(b)?;
    let e = fit.intersection;
    Ok(Cell::Float(
        match bound {
            Bound::Value => e.value,
            Bound::Lower => e.lower,
            Bound::Upper => e.upper,
        }
        .round(),
    ))
}

/// Orders two cells of one column: NULLs where `nulls_first` says,
/// otherwise by value (mixed types by type, which one column never has).
fn compare_cells(a: &Cell, b: &Cell, descending: bool, nulls_first: bool) -> Ordering {
    let order = match (a, b) {
        (Cell::Null, Cell::Null) => return Ordering::Equal,
        (Cell::Null, _) => {
            return if nulls_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        (_, Cell::Null) => {
            return if nulls_first {
                Ordering::Greater
            } else {
                Ordering::Less
            };
        }
        (Cell::Bool(x), Cell::Bool(y)) => x.cmp(y),
        (Cell::Int(x), Cell::Int(y)) => x.cmp(y),
        (Cell::Float(x), Cell::Float(y)) => x.total_cmp(y),
        (Cell::Int(x), Cell::Float(y)) => (*x as f64).total_cmp(y),
        (Cell::Float(x), Cell::Int(y)) => x.total_cmp(&(*y as f64)),
        (Cell::Text(x), Cell::Text(y)) => x.cmp(y),
        (Cell::Time(x), Cell::Time(y)) => x.cmp(y),
        (x, y) => rank(x).cmp(&rank(y)),
    };
    if descending { order.reverse() } else { order }
}

fn rank(cell: &Cell) -> u8 {
    match cell {
        Cell::Null => 0,
        Cell::Bool(_) => 1,
        Cell::Int(_) | Cell::Float(_) => 2,
        Cell::Text(_) => 3,
        Cell::Time(_) => 4,
    }
}

/// A stored group's values read as a record: field `i` is value `i`.
struct ValueRecord<'v, 'k> {
    values: &'v [Value<'k>],
}

impl Record for ValueRecord<'_, '_> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        match self.values.get(column)? {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    fn value(&self, column: usize, _ty: ColumnType) -> Result<Value<'_>, ValueError> {
        Ok(self.values.get(column).copied().unwrap_or(Value::Null))
    }
}

/// An answer row's cells read as a record.
struct CellRecord<'c> {
    cells: &'c [Cell],
}

impl Record for CellRecord<'_> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        match self.cells.get(column)? {
            Cell::Text(text) => Some(text.as_bytes()),
            _ => None,
        }
    }

    fn value(&self, column: usize, _ty: ColumnType) -> Result<Value<'_>, ValueError> {
        Ok(match self.cells.get(column) {
            None | Some(Cell::Null) => Value::Null,
            Some(Cell::Bool(b)) => Value::Bool(*b),
            Some(Cell::Int(i)) => Value::Int(*i),
            Some(Cell::Float(f)) => Value::Float(*f),
            Some(Cell::Text(t)) => Value::Text(t.as_bytes()),
            Some(Cell::Time(t)) => Value::Time(*t),
        })
    }
}
