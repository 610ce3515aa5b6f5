//! Declarations to plans: names resolved against the stream schema, types
//! checked, aggregates validated with the sketch crate's own limits, so that
//! every mistake a declaration can hold is reported here, with its position,
//! and none at run time.

use cardinal_event::{BucketWidth, Column, ColumnType, Schema, TimeUnit, Timestamp};
use cardinal_sketch::{hll, quantiles, theta};
use sqlparser::ast::{
    self, BinaryOperator, DuplicateTreatment, FunctionArg, FunctionArgExpr, FunctionArguments,
    Ident, ObjectNamePart, SelectItem, UnaryOperator,
};
use sqlparser::tokenizer::Span;

use crate::error::Result;

// A theta sketch fills up to 2^(lg_k + 1) hashes of 8 bytes before it
// trims, within one group's state budget at every lg_k compile accepts.
const _: () = assert!((8u64 << (theta::LG_K_MAX + 1)) <= crate::GROUP_STATE_BYTES_MAX);

use crate::expr::{ArithOp, CaseOp, CompareOp, Expr, Literal, MathOp, Type};
use crate::parse::{
    AttributionDecl, Declaration, Declarations, StreamDecl, SummaryDecl, at_span, span_of,
};
use crate::{
    Aggregate, AggregateKind, Attribution, Bucket, Format, Model, Output, OutputSource, Plan,
    Stream, Summary,
};

const SUPPORTED_EXPRESSIONS: &str = "expressions are column names, literals, comparisons, AND/OR/NOT, IN, IS [NOT] NULL, + - * / %, substr/substring, lower, upper, date_trunc, time_bucket, coalesce";
const SUPPORTED_AGGREGATES: &str = "aggregates are count(*), count(x), sum, min, max, avg, hll(x [, log2m [, regwidth]]), exact_distinct(x), quantiles(x [, k]), approx_quantile(x, q, ...), topk(x, k), theta(x [, lg_k])";
const DEFAULT_HALF_LIFE_DAYS: u64 = 7;
/// Lookback and half-life above ten years are surely typos.
const DAYS_MAX: u64 = 3_660;

impl Declarations {
    /// Resolves names, checks types and compiles every declaration.
    pub fn compile(&self) -> Result<Plan> {
        let mut compiler = Compiler {
            source: &self.source,
            plan: Plan::default(),
        };
        for statement in &self.statements {
            match statement {
                Declaration::Stream(decl) => compiler.stream(decl)?,
                Declaration::Summary(decl) => compiler.summary(decl)?,
                Declaration::Attribution(decl) => compiler.attribution(decl)?,
            }
        }
        Ok(compiler.plan)
    }
}

pub(crate) struct Compiler<'a> {
    pub(crate) source: &'a str,
    pub(crate) plan: Plan,
}

/// An aggregate before its argument is shared with equal ones.
type Pending = (AggregateKind, Option<Expr>);

/// An expression's compiled form, its type, and where it was written.
pub(crate) struct Typed {
    pub(crate) expr: Expr,
    pub(crate) ty: Type,
    pub(crate) span: Span,
}

impl Compiler<'_> {
    fn fail<T>(&self, span: Span, message: impl Into<String>) -> Result<T> {
        Err(at_span(
            self.source,
            widen(self.source, span),
            message.into(),
        ))
    }

    /// The source text under `span`, as written.
    fn text(&self, span: Span) -> String {
        source_text(self.source, span)
    }

    fn check_new_name(&self, name: &Ident) -> Result<()> {
        // Names become file names (see name.rs): refused here, with the
        // position, never after a run has done its work.
        if let Err(message) = crate::name::check_name(&name.value) {
            return self.fail(name.span, message);
        }
        let taken = self
            .plan
            .streams
            .iter()
            .any(|s| s.name.eq_ignore_ascii_case(&name.value))
            || self
                .plan
                .summaries
                .iter()
                .any(|s| s.name.eq_ignore_ascii_case(&name.value))
            || self
                .plan
                .attributions
                .iter()
                .any(|s| s.name.eq_ignore_ascii_case(&name.value));
        if taken {
            return self.fail(name.span, format!("{} is already declared", name.value));
        }
        Ok(())
    }

    fn stream_index(&self, name: &Ident) -> Result<usize> {
        match self
            .plan
            .streams
            .iter()
            .position(|s| s.name.eq_ignore_ascii_case(&name.value))
        {
            Some(index) => Ok(index),
            None => {
                let known: Vec<&str> = self.plan.streams.iter().map(|s| s.name.as_str()).collect();
                self.fail(
                    name.span,
                    format!(
                        "unknown stream {}; declare it first with CREATE STREAM (declared: {})",
                        name.value,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
            }
        }
    }

    fn stream(&mut self, decl: &StreamDecl) -> Result<()> {
        self.check_new_name(&decl.name)?;
        let mut format = Format::Csv;
        let mut header = None;
        let mut time = None;
        let mut delimiter = None;
        let mut seen: Vec<String> = Vec::new();
        for (key, value) in &decl.options {
            let key_name = key.value.to_ascii_lowercase();
            if seen.contains(&key_name) {
                return self.fail(key.span, format!("option {key_name} is given twice"));
            }
            seen.push(key_name.clone());
            let text = match &value.value {
                ast::Value::SingleQuotedString(s) => Some(s.as_str()),
                _ => None,
            };
            match (key_name.as_str(), text, &value.value) {
                ("format", Some(text), _) => {
                    format = match text.to_ascii_lowercase().as_str() {
                        "csv" => Format::Csv,
                        // Newline-delimited JSON goes by all three names.
                        "json" | "ndjson" | "jsonl" => Format::Json,
                        "amplab" => Format::Amplab,
                        "parquet" => Format::Parquet,
                        _ => {
                            return self.fail(
                                value.span,
                                format!("unknown format '{text}'; formats are 'csv', 'json', 'amplab' and 'parquet'"),
                            );
                        }
                    }
                }
                ("header", _, ast::Value::Boolean(b)) => header = Some((*b, key.span)),
                ("time", Some(text), _) => time = Some((text.to_owned(), value.span)),
                ("delimiter", Some(text), _) => {
                    let &[byte] = text.as_bytes() else {
                        return self.fail(
                            value.span,
                            "the delimiter must be a single ASCII character, such as ',' or '|'",
                        );
                    };
                    if !byte.is_ascii() || byte == b'\n' || byte == b'\r' || byte == b'"' {
                        return self.fail(
                            value.span,
                            "the delimiter must be an ASCII character other than a quote or line break",
                        );
                    }
                    delimiter = Some((byte, key.span));
                }
                ("format" | "time" | "delimiter", None, _) => {
                    return self.fail(value.span, format!("{key_name} takes a quoted string"));
                }
                ("header", _, _) => {
                    return self.fail(value.span, "header takes true or false");
                }
                _ => {
                    return self.fail(
                        key.span,
                        format!(
                            "unknown option {}; options are format, header, time and delimiter",
                            key.value
                        ),
                    );
                }
            }
        }
        if let (Format::Json | Format::Parquet, Some((_, span))) = (format, header) {
            return self.fail(span, "header applies to 'csv' streams only");
        }
        if let (Format::Json | Format::Parquet, Some((_, span))) = (format, delimiter) {
            return self.fail(span, "delimiter applies to 'csv' and 'amplab' streams only");
        }
        let mut columns: Vec<Column> = Vec::new();
        for column in &decl.columns {
            if columns
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(&column.name.value))
            {
                return self.fail(
                    column.name.span,
                    format!("column {} is declared twice", column.name.value),
                );
            }
            let ty = match ColumnType::parse(&column.ty.0) {
                Ok(ty) => ty,
                Err(e) => return self.fail(column.ty.1, e.to_string()),
            };
            let path = match &column.path {
                Some((path, span)) => {
                    if format != Format::Json {
                        return self.fail(*span, "PATH applies to 'json' streams only");
                    }
                    split_path(path).ok_or(()).or_else(|()| {
                        self.fail(*span, "a path is keys separated by '.', none of them empty")
                    })?
                }
                // A quoted dotted name is a path in JSON, and just a name
                // in delimited text.
                None if format == Format::Json && column.name.quote_style.is_some() => {
                    split_path(&column.name.value).ok_or(()).or_else(|()| {
                        self.fail(
                            column.name.span,
                            "a path is keys separated by '.', none of them empty",
                        )
                    })?
                }
                None => vec![column.name.value.clone()],
            };
            columns.push(Column {
                name: column.name.value.clone(),
                ty,
                path,
            });
        }
        let schema = Schema { columns };
        let time = match time {
            None => None,
            Some((name, span)) => match schema.index_of(&name) {
                Some(index) if schema.columns[index].ty == ColumnType::Timestamp => Some(index),
                Some(_) => {
                    return self.fail(
                        span,
                        format!("time column {name} must be declared TIMESTAMP"),
                    );
                }
                None => {
                    return self.fail(
                        span,
                        format!("time names {name}, which is not a column of the stream"),
                    );
                }
            },
        };
        let delimiter = delimiter.map_or(b',', |(byte, _)| byte);
        self.plan.streams.push(Stream {
            name: decl.name.value.clone(),
            schema,
            format,
            header: header.is_some_and(|(h, _)| h),
            time,
            delimiter,
            credit_of: None,
        });
        Ok(())
    }

    fn summary(&mut self, decl: &SummaryDecl) -> Result<()> {
        self.check_new_name(&decl.name)?;
        let stream_index = self.stream_index(&decl.stream)?;
        let stream = &self.plan.streams[stream_index];
        let scope = Scope {
            compiler: self,
            stream,
            owner: format!("stream {}", stream.name),
        };
        let filter = match &decl.filter {
            None => None,
            Some(e) => {
                let typed = scope.expr(e, Context::Where)?;
                if !matches!(typed.ty, Type::Bool | Type::Null) {
                    return self.fail(
                        typed.span,
                        format!("WHERE needs a condition, and this is {}", typed.ty.name()),
                    );
                }
                Some(typed.expr)
            }
        };

        // The select list: each item an aggregate or a group key.
        enum Item {
            Aggregate(Pending),
            Key(Typed),
        }
        let mut items = Vec::new();
        for (item, item_span) in &decl.items {
            let (expr, alias) = match item {
                SelectItem::UnnamedExpr(e) => (e, None),
                SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
                other => {
                    return self.fail(
                        span_of(other, decl.name.span),
                        "only expressions, each with an optional AS name, can be selected; * is not supported",
                    );
                }
            };
            let name = alias.map_or_else(|| self.text(*item_span), |a| a.value.clone());
            let item = match scope.aggregate(expr)? {
                Some(aggregate) => Item::Aggregate(aggregate),
                None => Item::Key(scope.expr(expr, Context::Select)?),
            };
            items.push((name, alias, expr, item));
        }
        // No two columns of the output may share a name, counting the
        // columns an estimate or quantiles add after their own.
        let mut written: Vec<(Written, usize)> = Vec::new();
        for (i, (name, _, expr, item)) in items.iter().enumerate() {
            let kind = match item {
                Item::Aggregate((kind, _)) => Some(kind),
                Item::Key(_) => None,
            };
            if name.eq_ignore_ascii_case(JSON_SUMMARY_KEY) {
                return self.fail(
                    span_of(*expr, decl.name.span),
                    format!("{JSON_SUMMARY_KEY} is the key that JSON lines give the summary's name; call this output something else with AS"),
                );
            }
            for column in written_columns(name, kind) {
                let clash = written.iter().find(|(other, _)| other.clashes(&column));
                if let Some((other, owner)) = clash {
                    let column = column.shown(other);
                    let message = if items[*owner].0.eq_ignore_ascii_case(&column)
                        && name.eq_ignore_ascii_case(&column)
                    {
                        format!("two output columns are called {column}; name one with AS")
                    } else {
                        format!(
                            "two output columns would be called {column}: {} and {name} both write one; name one with AS",
                            items[*owner].0
                        )
                    };
                    return self.fail(span_of(*expr, decl.name.span), message);
                }
                written.push((column, i));
            }
        }

        // GROUP BY entries name select items: by ordinal, by alias, or by
        // an expression that compiles to the same tree as the item's.
        let mut grouped = vec![false; items.len()];
        for entry in &decl.group_by {
            let span = span_of(entry, decl.name.span);
            let target = match entry {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => {
                        let ordinal: usize = n.parse().unwrap_or(0);
                        if ordinal == 0 || ordinal > items.len() {
                            return self.fail(
                                span,
                                format!(
                                    "GROUP BY {n}: ordinals count select items from 1 to {}",
                                    items.len()
                                ),
                            );
                        }
                        Some(ordinal - 1)
                    }
                    _ => None,
                },
                ast::Expr::Identifier(ident) => items.iter().position(|(_, alias, ..)| {
                    alias.is_some_and(|a| a.value.eq_ignore_ascii_case(&ident.value))
                }),
                _ => None,
            };
            let target = match target {
                Some(target) => Some(target),
                None => {
                    let compiled = scope.expr(entry, Context::Group)?.expr;
                    items.iter().position(
                        |(.., item)| matches!(item, Item::Key(typed) if typed.expr == compiled),
                    )
                }
            };
            let Some(target) = target else {
                return self.fail(
                    span,
                    format!(
                        "GROUP BY {} is not in the select list; group by select items, by name or ordinal",
                        self.text(span)
                    ),
                );
            };
            if let Item::Aggregate(_) = items[target].3 {
                return self.fail(
                    span,
                    format!("cannot group by the aggregate {}", items[target].0),
                );
            }
            if grouped[target] {
                return self.fail(span, format!("{} is grouped twice", items[target].0));
            }
            grouped[target] = true;
        }

        let time = stream.time;
        let mut bucket = None;
        let mut dimensions = Vec::new();
        let mut dimension_types = Vec::new();
        let mut aggregates = Vec::new();
        let mut outputs = Vec::new();
        for (i, (name, _, _, item)) in items.into_iter().enumerate() {
            let source = match item {
                Item::Aggregate(aggregate) => {
                    aggregates.push(aggregate);
                    OutputSource::Aggregate(aggregates.len() - 1)
                }
                Item::Key(typed) => {
                    if !grouped[i] {
                        return self.fail(
                            typed.span,
                            format!(
                                "{} must appear in GROUP BY or be used in an aggregate; {SUPPORTED_AGGREGATES}",
                                self.text(typed.span)
                            ),
                        );
                    }
                    // date_trunc or time_bucket over the time column
                    // itself is the summary's bucket.
                    let bucket_of = match &typed.expr {
                        Expr::DateTrunc(unit, inner) => match **inner {
                            Expr::Column { index, .. } if Some(index) == time => Some(*unit),
                            _ => None,
                        },
                        Expr::TimeBucket { width, expr } => match **expr {
                            Expr::Column { index, .. } if Some(index) == time => {
                                Some(TimeUnit::Fixed(*width))
                            }
                            _ => None,
                        },
                        _ => None,
                    };
                    match (bucket_of, time) {
                        (Some(unit), Some(column)) => {
                            if bucket.is_some() {
                                return self.fail(
                                    typed.span,
                                    "a summary has one time bucket; this is a second date_trunc or time_bucket over the time column",
                                );
                            }
                            bucket = Some(Bucket { unit, column });
                            OutputSource::Bucket
                        }
                        _ => {
                            dimensions.push(typed.expr);
                            dimension_types.push(typed.ty);
                            OutputSource::Dimension(dimensions.len() - 1)
                        }
                    }
                }
            };
            outputs.push(Output { name, source });
        }

        let mut arguments: Vec<Expr> = Vec::new();
        let mut aggregates_compiled = Vec::new();
        for (kind, arg) in aggregates {
            let argument = arg.map(|e| match arguments.iter().position(|x| *x == e) {
                Some(index) => index,
                None => {
                    arguments.push(e);
                    arguments.len() - 1
                }
            });
            aggregates_compiled.push(Aggregate { kind, argument });
        }
        let mut reads = Vec::new();
        let mut add = |index: usize| {
            if !reads.contains(&index) {
                reads.push(index);
            }
        };
        for e in filter.iter().chain(&dimensions).chain(&arguments) {
            assert_depth(e);
            e.columns(&mut add);
        }
        if let Some(b) = &bucket {
            add(b.column);
        }
        reads.sort_unstable();
        assert!(reads.iter().all(|&c| c < stream.schema.columns.len()));
        assert!(
            aggregates_compiled
                .iter()
                .all(|a| a.argument.is_none_or(|i| i < arguments.len()))
        );
        assert_eq!(outputs.len(), decl.items.len());
        assert_eq!(dimension_types.len(), dimensions.len());
        let paths = crate::route::Paths::of(&dimensions, &arguments);
        let summary = Summary {
            paths,
            name: decl.name.value.clone(),
            stream: stream_index,
            schema: stream.schema.clone(),
            reads,
            filter,
            bucket,
            dimensions,
            dimension_types,
            arguments,
            aggregates: aggregates_compiled,
            outputs,
        };
        self.plan.summaries.push(summary);
        Ok(())
    }

    fn attribution(&mut self, decl: &AttributionDecl) -> Result<()> {
        self.check_new_name(&decl.name)?;
        let stream_index = self.stream_index(&decl.stream)?;
        let stream = &self.plan.streams[stream_index];
        let check_days = |(days, span): (u64, Span), what: &str| -> Result<u32> {
            if days == 0 || days > DAYS_MAX {
                return self.fail(span, format!("{what} must be 1 to {DAYS_MAX} days"));
            }
            Ok(u32::try_from(days).expect("at most DAYS_MAX"))
        };
        let (model_name, model_span) = &decl.model;
        let model = match model_name.to_ascii_lowercase().as_str() {
            "last_touch" => Model::LastTouch,
            "first_touch" => Model::FirstTouch,
            "linear" => Model::Linear,
            "position_based" => Model::PositionBased,
            "time_decay" => Model::TimeDecay {
                half_life_days: check_days(
                    decl.half_life_days
                        .unwrap_or((DEFAULT_HALF_LIFE_DAYS, *model_span)),
                    "HALF LIFE",
                )?,
            },
            _ => {
                return self.fail(
                    *model_span,
                    format!("unknown model {model_name}; models are last_touch, first_touch, linear, time_decay and position_based"),
                );
            }
        };
        if let (Some((_, span)), false) = (
            decl.half_life_days,
            matches!(model, Model::TimeDecay { .. }),
        ) {
            return self.fail(span, "HALF LIFE applies to the time_decay model only");
        }
        let lookback_days = check_days(decl.lookback_days, "LOOKBACK")?;
        if let Some(owner) = stream.credit_of {
            return self.fail(
                decl.stream.span,
                format!(
                    "{} is the credit stream of attribution {}; attributions read input streams",
                    stream.name, self.plan.attributions[owner].name
                ),
            );
        }
        let Some(time) = stream.time else {
            return self.fail(
                decl.stream.span,
                format!(
                    "attribution needs event time: declare stream {} WITH (time = 'column')",
                    stream.name
                ),
            );
        };
        let scope = Scope {
            compiler: self,
            stream,
            owner: format!("stream {}", stream.name),
        };
        let user = scope.expr(&ast::Expr::Identifier(decl.user.clone()), Context::Where)?;
        let user = match (user.expr, user.ty) {
            (Expr::Column { index, .. }, Type::Int | Type::Text) => index,
            (_, ty) => {
                return self.fail(
                    decl.user.span,
                    format!(
                        "the user id column must be BIGINT or TEXT, and {} is {}",
                        decl.user.value,
                        ty.name()
                    ),
                );
            }
        };
        let condition = |e: &ast::Expr, what: &str| -> Result<Expr> {
            let typed = scope.expr(e, Context::Where)?;
            if !matches!(typed.ty, Type::Bool | Type::Null) {
                return self.fail(
                    typed.span,
                    format!("{what} needs a condition, and this is {}", typed.ty.name()),
                );
            }
            Ok(typed.expr)
        };
        let touch = condition(&decl.touch, "TOUCH WHERE")?;
        let conversion = condition(&decl.conversion, "CONVERSION WHERE")?;
        let value = match &decl.value {
            None => None,
            Some((e, _)) => {
                let typed = scope.expr(e, Context::Select)?;
                if !matches!(typed.ty, Type::Int | Type::Float | Type::Null) {
                    return self.fail(
                        typed.span,
                        format!(
                            "VALUE needs a number (BIGINT or DOUBLE), and this is {}",
                            typed.ty.name()
                        ),
                    );
                }
                Some(typed.expr)
            }
        };
        let dimension = |d: &Option<(Box<ast::Expr>, Span)>, what: &str| -> Result<Option<Expr>> {
            let Some((e, _)) = d else { return Ok(None) };
            let typed = scope.expr(e, Context::Select)?;
            if !matches!(typed.ty, Type::Int | Type::Text | Type::Null) {
                return self.fail(
                    typed.span,
                    format!(
                        "{what} needs TEXT or BIGINT, and this is {}",
                        typed.ty.name()
                    ),
                );
            }
            Ok(Some(typed.expr))
        };
        let campaign = dimension(&decl.campaign, "CAMPAIGN")?;
        let site = dimension(&decl.site, "SITE")?;
        let columns = crate::CREDIT_COLUMNS
            .iter()
            .map(|(name, ty)| Column {
                name: (*name).to_owned(),
                ty: *ty,
                path: vec![(*name).to_owned()],
            })
            .collect();
        for e in [&touch, &conversion]
            .into_iter()
            .chain(&value)
            .chain(&campaign)
            .chain(&site)
        {
            assert_depth(e);
        }
        let credit_stream = self.plan.streams.len();
        self.plan.streams.push(Stream {
            name: decl.name.value.clone(),
            schema: Schema { columns },
            format: Format::Csv,
            header: false,
            time: Some(0),
            delimiter: b',',
            credit_of: Some(self.plan.attributions.len()),
        });
        self.plan.attributions.push(Attribution {
            name: decl.name.value.clone(),
            stream: stream_index,
            credit_stream,
            user,
            time,
            model,
            lookback_days,
            touch,
            conversion,
            value,
            campaign,
            site,
        });
        Ok(())
    }
}

/// Paired with the parser's `check_depth`: compiling keeps a level per
/// operator or call of the parsed tree, or drops one (parentheses, the
/// aggregate's call), never adds one, so a plan's trees are as shallow as
/// the text's, and evaluating them recurses at most that deep.
pub(crate) fn assert_depth(e: &Expr) {
    assert!(
        e.depth() <= crate::EXPR_DEPTH_MAX,
        "compiled trees are no deeper than parsed ones"
    );
}

/// The key of a JSON line that holds the summary's name, before the
/// output's columns (`cardinal-export`'s `write_json_lines`).
const JSON_SUMMARY_KEY: &str = "summary";

/// A column name an output is written under, compared as names are,
/// without regard to ASCII case.
#[derive(Debug, Clone, PartialEq)]
enum Written {
    /// This name.
    Name(String),
    /// Every name that starts with this one and then a digit: the columns
    /// of the default ranks of `quantiles(x)`, which the rollup chooses.
    RankPrefix(String),
}

impl Written {
    fn clashes(&self, other: &Written) -> bool {
        let under = |prefix: &str, name: &str| {
            name.len() > prefix.len()
                && name.is_char_boundary(prefix.len())
                && name[..prefix.len()].eq_ignore_ascii_case(prefix)
                && name[prefix.len()..].starts_with(|c: char| c.is_ascii_digit())
        };
        match (self, other) {
            (Written::Name(a), Written::Name(b)) => a.eq_ignore_ascii_case(b),
            (Written::Name(name), Written::RankPrefix(prefix))
            | (Written::RankPrefix(prefix), Written::Name(name)) => under(prefix, name),
            (Written::RankPrefix(a), Written::RankPrefix(b)) => {
                under(a, b) || under(b, a) || a.eq_ignore_ascii_case(b)
            }
        }
    }

    /// The name two clashing columns share, as a message shows it.
    fn shown(&self, other: &Written) -> String {
        match (self, other) {
            (Written::Name(name), _) | (Written::RankPrefix(_), Written::Name(name)) => {
                name.clone()
            }
            (Written::RankPrefix(prefix), Written::RankPrefix(_)) => format!("{prefix}..."),
        }
    }
}

/// The columns an output named `name` is written as, in CSV headers and
/// JSON keys: its name, and after an estimate its bounds (and an HLL's
/// hex image), after quantiles one column per rank and the rank error.
//
// ADVICE FOR HACKERS: these mirror `csv_header` and `write_json_lines` in
// crates/export (and the rank labels, `p{rank * 100}`, its quantile
// columns); a column added there needs its name here, so that no summary
// writes two columns, or two JSON keys, of one name.
fn written_columns(name: &str, kind: Option<&AggregateKind>) -> Vec<Written> {
    let mut columns = vec![Written::Name(name.to_owned())];
    let suffixes: &[&str] = match kind {
        Some(AggregateKind::Hll { .. }) => &["_lower", "_upper", "_hll"],
        Some(AggregateKind::ExactDistinct | AggregateKind::Theta { .. }) => &["_lower", "_upper"],
        Some(AggregateKind::Quantiles { ranks, .. }) => {
            match ranks.as_slice() {
                // One asked rank is written under the name itself.
                [_] => {}
                [] => columns.push(Written::RankPrefix(format!("{name}_p"))),
                ranks => columns.extend(
                    ranks
                        .iter()
                        .map(|q| Written::Name(format!("{name}_p{}", rank_label(*q)))),
                ),
            }
            &["_rank_error"]
        }
        _ => &[],
    };
    columns.extend(
        suffixes
            .iter()
            .map(|suffix| Written::Name(format!("{name}{suffix}"))),
    );
    columns
}

/// How a quantile's rank `q` is labelled in output (`0.5` is `50`, the
/// column `{name}_p50` and the JSON key `p50`), as crates/export writes it.
fn rank_label(q: f64) -> String {
    format!("{}", q * 100.0)
}

/// Extends a span over the closing parentheses it leaves open: sqlparser's
/// spans of calls end at the last argument.
pub(crate) fn widen(source: &str, span: Span) -> Span {
    if span.start.line == 0 || span.start.line != span.end.line {
        return span;
    }
    let Some(line) = usize::try_from(span.start.line - 1)
        .ok()
        .and_then(|index| source.lines().nth(index))
    else {
        return span;
    };
    let mut open: i64 = 0;
    let mut quoted = false;
    let mut end = span.end;
    for (i, c) in line.chars().enumerate() {
        let column = u64::try_from(i + 1).unwrap_or(u64::MAX);
        if column < span.start.column {
            continue;
        }
        if column >= span.end.column && (open <= 0 || quoted) {
            break;
        }
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => open += 1,
            ')' if !quoted => {
                open -= 1;
                if column >= span.end.column {
                    end.column = column + 1;
                }
            }
            _ if column >= span.end.column && !c.is_whitespace() => break,
            _ => {}
        }
    }
    Span::new(span.start, end)
}

/// The text between a span's start and end (1-based lines and character
/// columns, end exclusive); the whole first line if the span is empty.
fn source_text(source: &str, span: Span) -> String {
    let mut out = String::new();
    for (number, line) in source.lines().enumerate() {
        let number = u64::try_from(number + 1).unwrap_or(u64::MAX);
        if number < span.start.line || number > span.end.line {
            continue;
        }
        let from = if number == span.start.line {
            span.start.column
        } else {
            1
        };
        let to = if number == span.end.line {
            span.end.column
        } else {
            u64::MAX
        };
        let piece: String = line
            .chars()
            .enumerate()
            .filter(|(i, _)| {
                let column = u64::try_from(i + 1).unwrap_or(u64::MAX);
                column >= from && column < to
            })
            .map(|(_, c)| c)
            .collect();
        // An item written over several lines is named on one.
        let piece = piece.trim();
        if !piece.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(piece);
        }
    }
    out
}

fn split_path(path: &str) -> Option<Vec<String>> {
    let keys: Vec<String> = path.split('.').map(str::to_owned).collect();
    (!keys.iter().any(String::is_empty)).then_some(keys)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Context {
    Where,
    Select,
    Group,
    /// A query's condition over a summary's dimensions
    /// ([`Summary::compile_condition`]).
    Query,
}

/// Names resolve against one stream.
pub(crate) struct Scope<'a> {
    pub(crate) compiler: &'a Compiler<'a>,
    pub(crate) stream: &'a Stream,
    /// What the columns are, for messages: `stream impressions`, or for a
    /// query `the dimensions of summary reach`.
    pub(crate) owner: String,
}

impl Summary {
    /// The name of dimension `i` as the summary's results call it: its
    /// output name (the `AS` name or the expression's text), or `dim{i}`.
    pub fn dimension_name(&self, i: usize) -> String {
        self.outputs
            .iter()
            .find(|o| o.source == OutputSource::Dimension(i))
            .map_or_else(|| format!("dim{i}"), |o| o.name.clone())
    }

    /// The summary's dimensions as a schema: column `i` is dimension `i`,
    /// named as [`Summary::dimension_name`] and typed as the dimension's
    /// values are (a dimension that is always NULL reads as TEXT).
    pub fn dimension_schema(&self) -> Schema {
        let columns = self
            .dimension_types
            .iter()
            .enumerate()
            .map(|(i, ty)| {
                let name = self.dimension_name(i);
                Column {
                    path: vec![name.clone()],
                    name,
                    ty: match ty {
                        Type::Bool => ColumnType::Bool,
                        Type::Int => ColumnType::BigInt,
                        Type::Float => ColumnType::Double,
                        Type::Time => ColumnType::Timestamp,
                        Type::Text | Type::Null => ColumnType::Text,
                    },
                }
            })
            .collect();
        Schema { columns }
    }

    /// Compiles `text`, a condition over the summary's dimensions
    /// (`state = 'CA' AND site <> 'x'`), with the compiler that compiles
    /// `CREATE SUMMARY ... WHERE`: the same expressions, types and
    /// three-valued logic, against [`Summary::dimension_schema`]. The
    /// condition reads column `i` as dimension `i`, so it evaluates over
    /// a record of a group's decoded key ([`crate::key_values`]).
    ///
    /// Errors are placed in `text` (line 1, the column of the mistake,
    /// with a caret), as a declaration's are.
    ///
    /// ```
    /// use cardinal_route::Plan;
    /// let plan = Plan::compile(
    ///     "CREATE STREAM s (ts TIMESTAMP, state TEXT, n BIGINT) WITH (time = 'ts');
    ///      CREATE SUMMARY t AS SELECT date_trunc('day', ts) AS day, state, n % 10 AS tail,
    ///        count(*) FROM s GROUP BY day, state, tail;",
    /// )?;
    /// let summary = &plan.summaries[0];
    /// assert!(summary.compile_condition("state = 'CA' AND tail > 3").is_ok());
    /// let error = summary.compile_condition("sate = 'CA'").unwrap_err();
    /// assert!(error.to_string().starts_with("line 1, column 1: unknown column sate"));
    /// # Ok::<(), cardinal_route::Error>(())
    /// ```
    pub fn compile_condition(&self, text: &str) -> Result<Expr> {
        const FORM: &str = "a condition over the summary's dimensions, as in WHERE";
        let parsed = crate::parse::parse_condition(text, FORM)?;
        let compiler = Compiler {
            source: text,
            plan: Plan::default(),
        };
        let stream = Stream {
            name: self.name.clone(),
            schema: self.dimension_schema(),
            format: Format::Csv,
            header: false,
            time: None,
            delimiter: b',',
            credit_of: None,
        };
        let scope = Scope {
            compiler: &compiler,
            stream: &stream,
            owner: format!("the dimensions of summary {}", self.name),
        };
        let typed = scope.expr(&parsed, Context::Query)?;
        if !matches!(typed.ty, Type::Bool | Type::Null) {
            return compiler.fail(
                typed.span,
                format!("a condition is needed, and this is {}", typed.ty.name()),
            );
        }
        assert_depth(&typed.expr);
        Ok(typed.expr)
    }
}

fn is_aggregate_name(name: &str) -> bool {
    matches!(
        name,
        "count"
            | "sum"
            | "min"
            | "max"
            | "avg"
            | "hll"
            | "exact_distinct"
            | "quantiles"
            | "approx_quantile"
            | "topk"
            | "theta"
    )
}

impl Scope<'_> {
    fn fail<T>(&self, span: Span, message: impl Into<String>) -> Result<T> {
        self.compiler.fail(span, message)
    }

    fn column(&self, name: &str, span: Span) -> Result<Typed> {
        let schema = &self.stream.schema;
        let index = schema.index_of(name).or_else(|| {
            // `user.id` written unquoted matches the column whose path it is.
            schema
                .columns
                .iter()
                .position(|c| c.path.len() > 1 && c.path.join(".").eq_ignore_ascii_case(name))
        });
        match index {
            Some(index) => {
                let ty = schema.columns[index].ty;
                Ok(Typed {
                    expr: Expr::Column { index, ty },
                    ty: Type::of_column(ty),
                    span,
                })
            }
            None => {
                let names: Vec<&str> = schema.columns.iter().map(|c| c.name.as_str()).collect();
                self.fail(
                    span,
                    format!(
                        "unknown column {name} in {} (it has {})",
                        self.owner,
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    ),
                )
            }
        }
    }

    /// A select item that is an aggregate call, compiled; `None` if it is
    /// not one (aggregates nested inside it are caught by `expr`).
    fn aggregate(&self, e: &ast::Expr) -> Result<Option<Pending>> {
        let ast::Expr::Function(f) = e else {
            return Ok(None);
        };
        let name = function_name(f);
        if !is_aggregate_name(&name) {
            return Ok(None);
        }
        let span = span_of(e, Span::empty());
        let args = self.function_args(f, span, true)?;
        let usage = match name.as_str() {
            "count" => "count(*) or count(x)",
            "sum" | "avg" => "sum(x) or avg(x) over a number",
            "min" | "max" => "min(x) or max(x) over a number or timestamp",
            "hll" => "hll(x [, log2m [, regwidth]]) over a BIGINT or TEXT",
            "exact_distinct" => "exact_distinct(x) over a BIGINT or TEXT",
            "quantiles" => "quantiles(x [, k]) over a number",
            "approx_quantile" => "approx_quantile(x, q, ...) over a number, with q between 0 and 1",
            "topk" => "topk(x, k) over a BIGINT or TEXT",
            _ => "theta(x [, lg_k]) over a BIGINT or TEXT",
        };
        let wrong = |span: Span| self.fail::<Pending>(span, format!("{name}: expected {usage}"));
        // count(*) is the one wildcard.
        if name == "count" {
            return match args.as_slice() {
                [None] => Ok(Some((AggregateKind::CountAll, None))),
                [Some(arg)] => {
                    let typed = self.expr(arg, Context::Select)?;
                    Ok(Some((AggregateKind::Count, Some(typed.expr))))
                }
                _ => wrong(span).map(Some),
            };
        }
        let Some(Some(first)) = args.first() else {
            return wrong(span).map(Some);
        };
        let typed = self.expr(first, Context::Select)?;
        let rest = &args[1..];
        let mut params = Vec::new();
        for arg in rest {
            let Some(arg) = arg else {
                return wrong(span).map(Some);
            };
            params.push((
                literal_number(arg),
                literal_integer(arg),
                span_of(*arg, span),
            ));
        }
        let hashable = matches!(typed.ty, Type::Int | Type::Text);
        let integer = |index: usize, what: &str, min: u64, max: u64| -> Result<u64> {
            let (_, value, span) = &params[index];
            match value {
                Some(value) if (min..=max).contains(value) => Ok(*value),
                _ => self.fail(
                    *span,
                    format!("{name}: {what} must be a whole number from {min} to {max}"),
                ),
            }
        };
        let kind = match name.as_str() {
            "sum" | "avg" | "min" | "max" => {
                let ok = match name.as_str() {
                    "min" | "max" => typed.ty.is_numeric() || typed.ty == Type::Time,
                    _ => typed.ty.is_numeric(),
                };
                if !ok || !params.is_empty() {
                    return wrong(if ok { span } else { typed.span }).map(Some);
                }
                // Integers stay integers: an f64 holds them exactly only
                // up to 2^53, and 64-bit ids are larger.
                let integer = typed.ty == Type::Int;
                match name.as_str() {
                    "sum" if integer => AggregateKind::SumInt,
                    "sum" => AggregateKind::Sum,
                    "avg" => AggregateKind::Avg,
                    "min" if integer => AggregateKind::MinInt,
                    "min" => AggregateKind::Min,
                    _ if integer => AggregateKind::MaxInt,
                    _ => AggregateKind::Max,
                }
            }
            "hll" => {
                if !hashable || params.len() > 2 {
                    return wrong(if hashable { span } else { typed.span }).map(Some);
                }
                // As postgresql-hll's hll_add_agg: log2m alone keeps the
                // default regwidth.
                let defaults = hll::Settings::default();
                let log2m = if params.is_empty() {
                    defaults.log2m
                } else {
                    let log2m = integer(
                        0,
                        "log2m",
                        u64::from(hll::LOG2M_MIN),
                        u64::from(hll::LOG2M_MAX),
                    )?;
                    let log2m = u8::try_from(log2m).expect("checked range");
                    // Dense, a sketch holds one byte per register.
                    let dense_bytes = 1u64 << log2m;
                    if dense_bytes > crate::GROUP_STATE_BYTES_MAX {
                        return self.fail(
                            params[0].2,
                            format!(
                                "hll: log2m {log2m} needs {} MiB per group; at most {} MiB \
                                 (GROUP_STATE_BYTES_MAX, log2m {})",
                                dense_bytes >> 20,
                                crate::GROUP_STATE_BYTES_MAX >> 20,
                                crate::GROUP_STATE_BYTES_MAX.ilog2()
                            ),
                        );
                    }
                    log2m
                };
                let regwidth = if params.len() < 2 {
                    defaults.regwidth
                } else {
                    let regwidth = integer(
                        1,
                        "regwidth",
                        u64::from(hll::REGWIDTH_MIN),
                        u64::from(hll::REGWIDTH_MAX),
                    )?;
                    u8::try_from(regwidth).expect("checked range")
                };
                if let Err(e) = hll::Settings::new(log2m, regwidth) {
                    return self.fail(span, format!("hll: {e}"));
                }
                AggregateKind::Hll { log2m, regwidth }
            }
            "exact_distinct" => {
                if !hashable || !params.is_empty() {
                    return wrong(if hashable { span } else { typed.span }).map(Some);
                }
                AggregateKind::ExactDistinct
            }
            "quantiles" => {
                if !typed.ty.is_numeric() || params.len() > 1 {
                    return wrong(if typed.ty.is_numeric() {
                        span
                    } else {
                        typed.span
                    })
                    .map(Some);
                }
                let k = if params.is_empty() {
                    quantiles::K_DEFAULT
                } else {
                    let k = integer(
                        0,
                        "k",
                        u64::from(quantiles::K_MIN),
                        u64::from(quantiles::K_MAX),
                    )?;
                    u16::try_from(k).expect("checked range")
                };
                AggregateKind::Quantiles {
                    k,
                    ranks: Vec::new(),
                }
            }
            "approx_quantile" => {
                if !typed.ty.is_numeric() || params.is_empty() {
                    return wrong(if typed.ty.is_numeric() {
                        span
                    } else {
                        typed.span
                    })
                    .map(Some);
                }
                if params.len() > crate::RANKS_MAX {
                    return self.fail(
                        params[crate::RANKS_MAX].2,
                        "approx_quantile: at most 8 ranks (RANKS_MAX) per aggregate",
                    );
                }
                let mut ranks: Vec<f64> = Vec::new();
                for (value, _, span) in &params {
                    match value {
                        Some(q) if (0.0..=1.0).contains(q) => {
                            let label = rank_label(*q);
                            if ranks.iter().any(|r| rank_label(*r) == label) {
                                return self.fail(
                                    *span,
                                    format!("approx_quantile: this rank is asked already (each is written as p{label}); ask each rank once"),
                                );
                            }
                            ranks.push(*q);
                        }
                        _ => {
                            return self.fail(
                                *span,
                                "approx_quantile: each q must be a number between 0 and 1",
                            );
                        }
                    }
                }
                AggregateKind::Quantiles {
                    k: quantiles::K_DEFAULT,
                    ranks,
                }
            }
            "topk" => {
                if !hashable || params.len() != 1 {
                    return wrong(if hashable { span } else { typed.span }).map(Some);
                }
                let k = integer(0, "k", 1, u64::from(crate::TOPK_K_MAX))?;
                AggregateKind::TopK {
                    k: u32::try_from(k).expect("checked range"),
                }
            }
            _ => {
                if !hashable || params.len() > 1 {
                    return wrong(if hashable { span } else { typed.span }).map(Some);
                }
                let lg_k = if params.is_empty() {
                    theta::LG_K_DEFAULT
                } else {
                    let lg_k = integer(
                        0,
                        "lg_k",
                        u64::from(theta::LG_K_MIN),
                        u64::from(theta::LG_K_MAX),
                    )?;
                    u8::try_from(lg_k).expect("checked range")
                };
                AggregateKind::Theta { lg_k }
            }
        };
        Ok(Some((kind, Some(typed.expr))))
    }

    /// A function's plain positional arguments (`None` for `*`). Refuses
    /// DISTINCT, FILTER, OVER, named arguments and the like.
    fn function_args<'f>(
        &self,
        f: &'f ast::Function,
        span: Span,
        wildcard_ok: bool,
    ) -> Result<Vec<Option<&'f ast::Expr>>> {
        let name = function_name(f);
        if f.over.is_some()
            || f.filter.is_some()
            || f.null_treatment.is_some()
            || !f.within_group.is_empty()
        {
            return self.fail(
                span,
                format!("{name}: OVER, FILTER and WITHIN GROUP are not supported"),
            );
        }
        if !matches!(f.parameters, FunctionArguments::None) {
            return self.fail(span, format!("{name}: parametric calls are not supported"));
        }
        let list = match &f.args {
            FunctionArguments::List(list) => list,
            _ => {
                return self.fail(
                    span,
                    format!("{name} must be called with arguments in parentheses"),
                );
            }
        };
        if list.duplicate_treatment == Some(DuplicateTreatment::Distinct) {
            return self.fail(
                span,
                format!("{name}(DISTINCT ...) is not supported; count distinct values with hll, theta or exact_distinct"),
            );
        }
        if !list.clauses.is_empty() || list.duplicate_treatment.is_some() {
            return self.fail(span, format!("{name}: only plain arguments are supported"));
        }
        let mut args = Vec::new();
        for arg in &list.args {
            match arg {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => args.push(Some(e)),
                FunctionArg::Unnamed(FunctionArgExpr::Wildcard) if wildcard_ok => args.push(None),
                other => {
                    return self.fail(
                        span_of(other, span),
                        format!(
                            "{name}: arguments must be plain expressions{}",
                            if wildcard_ok {
                                " (or * in count(*))"
                            } else {
                                ""
                            }
                        ),
                    );
                }
            }
        }
        Ok(args)
    }

    pub(crate) fn expr(&self, e: &ast::Expr, context: Context) -> Result<Typed> {
        let span = span_of(e, Span::empty());
        let typed = |expr: Expr, ty: Type| Ok(Typed { expr, ty, span });
        match e {
            ast::Expr::Identifier(ident) => self.column(&ident.value, ident.span),
            ast::Expr::CompoundIdentifier(parts) => {
                let name: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
                self.column(&name.join("."), span)
            }
            ast::Expr::Value(v) => {
                let (literal, ty) = match &v.value {
                    ast::Value::Number(text, _) => match text.parse::<i64>() {
                        Ok(i) => (Literal::Int(i), Type::Int),
                        Err(_) => match text.parse::<f64>() {
                            Ok(f) => (Literal::Float(f), Type::Float),
                            Err(_) => return self.fail(span, format!("{text} is not a number")),
                        },
                    },
                    ast::Value::SingleQuotedString(s) => {
                        (Literal::Text(s.as_bytes().into()), Type::Text)
                    }
                    ast::Value::Boolean(b) => (Literal::Bool(*b), Type::Bool),
                    ast::Value::Null => (Literal::Null, Type::Null),
                    other => {
                        return self.fail(
                            span,
                            format!("literal {other} is not supported; literals are numbers, 'text', TRUE, FALSE and NULL"),
                        );
                    }
                };
                typed(Expr::Literal(literal), ty)
            }
            ast::Expr::Nested(inner) => {
                let inner = self.expr(inner, context)?;
                Ok(Typed { span, ..inner })
            }
            ast::Expr::UnaryOp { op, expr } => {
                let inner = self.expr(expr, context)?;
                match op {
                    UnaryOperator::Not => {
                        self.expect_bool(&inner, "NOT")?;
                        typed(Expr::Not(Box::new(inner.expr)), Type::Bool)
                    }
                    UnaryOperator::Minus => {
                        if !inner.ty.is_numeric() {
                            return self
                                .fail(inner.span, format!("cannot negate {}", inner.ty.name()));
                        }
                        // Fold negative literals so that i64::MIN is
                        // expressible and literal lists stay literals.
                        match inner.expr {
                            Expr::Literal(Literal::Int(i)) => {
                                typed(Expr::Literal(Literal::Int(-i)), Type::Int)
                            }
                            Expr::Literal(Literal::Float(f)) => {
                                typed(Expr::Literal(Literal::Float(-f)), Type::Float)
                            }
                            other => typed(Expr::Neg(Box::new(other)), inner.ty),
                        }
                    }
                    UnaryOperator::Plus if inner.ty.is_numeric() => Ok(Typed { span, ..inner }),
                    _ => self.fail(
                        span,
                        format!("operator {op} is not supported; {SUPPORTED_EXPRESSIONS}"),
                    ),
                }
            }
            ast::Expr::BinaryOp { left, op, right } => {
                // `-9223372036854775808` arrives as minus applied to a
                // number that does not fit; handled by the float fallback.
                let left = self.expr(left, context)?;
                let right = self.expr(right, context)?;
                let compare = |op| self.comparison(op, left_right(&left, &right), span);
                let arith = |op| {
                    for side in [&left, &right] {
                        if !side.ty.is_numeric() {
                            return self.fail(
                                side.span,
                                format!("arithmetic needs numbers, and this is {}", side.ty.name()),
                            );
                        }
                    }
                    let ty = match (left.ty, right.ty) {
                        (Type::Float, _) | (_, Type::Float) => Type::Float,
                        (Type::Int, _) | (_, Type::Int) => Type::Int,
                        _ => Type::Null,
                    };
                    typed(
                        Expr::Arith(
                            op,
                            Box::new(left.expr.clone()),
                            Box::new(right.expr.clone()),
                        ),
                        ty,
                    )
                };
                match op {
                    BinaryOperator::And | BinaryOperator::Or => {
                        self.expect_bool(&left, &op.to_string())?;
                        self.expect_bool(&right, &op.to_string())?;
                        let (a, b) = (Box::new(left.expr), Box::new(right.expr));
                        typed(
                            if *op == BinaryOperator::And {
                                Expr::And(a, b)
                            } else {
                                Expr::Or(a, b)
                            },
                            Type::Bool,
                        )
                    }
                    BinaryOperator::Eq => compare(CompareOp::Eq),
                    BinaryOperator::NotEq => compare(CompareOp::NotEq),
                    BinaryOperator::Lt => compare(CompareOp::Lt),
                    BinaryOperator::LtEq => compare(CompareOp::LtEq),
                    BinaryOperator::Gt => compare(CompareOp::Gt),
                    BinaryOperator::GtEq => compare(CompareOp::GtEq),
                    BinaryOperator::Plus => arith(ArithOp::Add),
                    BinaryOperator::Minus => arith(ArithOp::Sub),
                    BinaryOperator::Multiply => arith(ArithOp::Mul),
                    BinaryOperator::Divide => arith(ArithOp::Div),
                    BinaryOperator::Modulo => arith(ArithOp::Rem),
                    other => self.fail(
                        span,
                        format!("operator {other} is not supported; {SUPPORTED_EXPRESSIONS}"),
                    ),
                }
            }
            ast::Expr::IsNull(inner) | ast::Expr::IsNotNull(inner) => {
                let inner = self.expr(inner, context)?;
                typed(
                    Expr::IsNull {
                        expr: Box::new(inner.expr),
                        negated: matches!(e, ast::Expr::IsNotNull(_)),
                    },
                    Type::Bool,
                )
            }
            ast::Expr::InList {
                expr,
                list,
                negated,
            } => {
                let needle = self.expr(expr, context)?;
                let mut compiled = Vec::new();
                for item in list {
                    let item = self.expr(item, context)?;
                    let (_, item) = self.comparable(&needle, item)?;
                    compiled.push(item.expr);
                }
                typed(
                    Expr::InList {
                        expr: Box::new(needle.expr),
                        list: compiled,
                        negated: *negated,
                    },
                    Type::Bool,
                )
            }
            ast::Expr::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                let Some(from) = substring_from else {
                    return self.fail(
                        span,
                        "substring needs a start: substring(x, start [, length])",
                    );
                };
                let args = [Some(&**expr), Some(&**from), substring_for.as_deref()];
                self.substr(&args, span, context)
            }
            ast::Expr::Function(f) => self.function(f, span, context),
            ast::Expr::Between {
                expr,
                negated,
                low,
                high,
            } => {
                // `x BETWEEN a AND b` is `x >= a AND x <= b` (NOT: `x < a
                // OR x > b`), x evaluated twice: it reads no state.
                let value = self.expr(expr, context)?;
                let low = self.expr(low, context)?;
                let high = self.expr(high, context)?;
                let (lower_op, upper_op) = if *negated {
                    (CompareOp::Lt, CompareOp::Gt)
                } else {
                    (CompareOp::GtEq, CompareOp::LtEq)
                };
                let lower = self.comparison(lower_op, (&value, &low), span)?;
                let upper = self.comparison(upper_op, (&value, &high), span)?;
                let (a, b) = (Box::new(lower.expr), Box::new(upper.expr));
                typed(
                    if *negated {
                        Expr::Or(a, b)
                    } else {
                        Expr::And(a, b)
                    },
                    Type::Bool,
                )
            }
            ast::Expr::Floor { expr, field } | ast::Expr::Ceil { expr, field } => {
                let floor = matches!(e, ast::Expr::Floor { .. });
                if !matches!(
                    field,
                    ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime)
                ) {
                    return self.fail(span, "floor(x) and ceil(x) take one number");
                }
                let arg = self.expr(expr, context)?;
                if !matches!(arg.ty, Type::Int | Type::Float | Type::Null) {
                    return self.fail(
                        arg.span,
                        format!("floor and ceil need a number, and this is {}", arg.ty.name()),
                    );
                }
                let op = if floor { MathOp::Floor } else { MathOp::Ceil };
                typed(Expr::Math(op, Box::new(arg.expr)), arg.ty)
            }
            ast::Expr::Extract { field, expr, .. } => {
                if !matches!(field, ast::DateTimeField::Epoch) {
                    return self.fail(
                        span,
                        format!("extract({field} from ...) is not supported; extract(epoch from t) is"),
                    );
                }
                let time = self.expr(expr, context)?;
                if !matches!(time.ty, Type::Time | Type::Null) {
                    return self.fail(
                        time.span,
                        format!("extract(epoch from t) needs a timestamp, and this is {}", time.ty.name()),
                    );
                }
                typed(Expr::Math(MathOp::Epoch, Box::new(time.expr)), Type::Float)
            }
            ast::Expr::Cast {
                expr, data_type, ..
            } => {
                let inner = self.expr(expr, context)?;
                self.cast(inner, data_type, span)
            }
            ast::Expr::TypedString(typed_string) => {
                let text = match &typed_string.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    other => return self.fail(span, format!("expected a quoted literal, found {other}")),
                };
                let inner = Typed {
                    expr: Expr::Literal(Literal::Text(text.as_bytes().into())),
                    ty: Type::Text,
                    span,
                };
                self.cast(inner, &typed_string.data_type, span)
            }
            ast::Expr::CompoundFieldAccess { .. } => self.fail(
                span,
                "a nested name whose first key is a SQL keyword (such as user) must be quoted whole: \"user.id\"",
            ),
            _ => self.fail(
                span,
                format!("{e} is not supported; {SUPPORTED_EXPRESSIONS}"),
            ),
        }
    }

    /// `CAST(x AS type)`, `x::type`, `TIMESTAMP 'text'`: a text literal
    /// to an instant, or a value already of the type (`::timestamptz` on a
    /// bucket, `::float8` on a number). Other conversions are refused.
    fn cast(&self, inner: Typed, data_type: &ast::DataType, span: Span) -> Result<Typed> {
        use ast::DataType as D;
        let target = match data_type {
            D::Timestamp(..) | D::TimestampNtz(_) | D::Date | D::Datetime(_) => Type::Time,
            D::Float8 | D::Double(_) | D::DoublePrecision | D::Float(_) | D::Real | D::Float64 => {
                Type::Float
            }
            D::BigInt(_) | D::Int8(_) | D::Int(_) | D::Integer(_) | D::Int64 => Type::Int,
            D::Text | D::Varchar(_) | D::String(_) => Type::Text,
            D::Boolean | D::Bool => Type::Bool,
            other => return self.fail(span, format!("cast to {other} is not supported")),
        };
        match (inner.ty, target) {
            (from, to) if from == to || from == Type::Null => Ok(Typed { span, ..inner }),
            (Type::Text, Type::Time) => {
                let Expr::Literal(Literal::Text(bytes)) = &inner.expr else {
                    return self.fail(span, "only a text literal can be cast to a timestamp");
                };
                match Timestamp::parse(bytes) {
                    Ok(t) => Ok(Typed {
                        expr: Expr::Literal(Literal::Time(t)),
                        ty: Type::Time,
                        span,
                    }),
                    Err(e) => self.fail(inner.span, e.to_string()),
                }
            }
            (Type::Int, Type::Float) => Ok(Typed {
                expr: Expr::Arith(
                    ArithOp::Mul,
                    Box::new(inner.expr),
                    Box::new(Expr::Literal(Literal::Float(1.0))),
                ),
                ty: Type::Float,
                span,
            }),
            (Type::Float, Type::Int) => self.fail(
                span,
                "cast of a DOUBLE to BIGINT is not supported; use round(x) or floor(x)",
            ),
            (from, to) => self.fail(
                span,
                format!("cannot cast {} to {}", from.name(), to.name()),
            ),
        }
    }

    fn expect_bool(&self, typed: &Typed, what: &str) -> Result<()> {
        if matches!(typed.ty, Type::Bool | Type::Null) {
            Ok(())
        } else {
            self.fail(
                typed.span,
                format!("{what} needs a condition, and this is {}", typed.ty.name()),
            )
        }
    }

    /// Checks that two operands can be compared; a text literal compared
    /// with a timestamp becomes a timestamp literal here.
    fn comparable(&self, left: &Typed, right: Typed) -> Result<(Type, Typed)> {
        let convert = |text: &Typed| -> Result<Option<Typed>> {
            if let Expr::Literal(Literal::Text(bytes)) = &text.expr {
                return match Timestamp::parse(bytes) {
                    Ok(t) => Ok(Some(Typed {
                        expr: Expr::Literal(Literal::Time(t)),
                        ty: Type::Time,
                        span: text.span,
                    })),
                    Err(e) => self.fail(text.span, e.to_string()),
                };
            }
            Ok(None)
        };
        let ok = match (left.ty, right.ty) {
            (Type::Null, _) | (_, Type::Null) => true,
            (a, b) if a == b => true,
            (Type::Int | Type::Float, Type::Int | Type::Float) => true,
            (Type::Time, Type::Text) => {
                if let Some(converted) = convert(&right)? {
                    return Ok((Type::Time, converted));
                }
                false
            }
            // An instant against a number literal: epoch seconds or
            // milliseconds (Grafana's `${__from}`), by [`epoch_instant`].
            (Type::Time, Type::Int | Type::Float) => {
                let number = match right.expr {
                    Expr::Literal(Literal::Int(i)) => Some(i as f64),
                    Expr::Literal(Literal::Float(f)) => Some(f),
                    _ => None,
                };
                if let Some(t) = number.and_then(epoch_instant) {
                    return Ok((
                        Type::Time,
                        Typed {
                            expr: Expr::Literal(Literal::Time(t)),
                            ty: Type::Time,
                            span: right.span,
                        },
                    ));
                }
                false
            }
            _ => false,
        };
        if !ok {
            return self.fail(
                right.span,
                format!("cannot compare {} with {}", left.ty.name(), right.ty.name()),
            );
        }
        Ok((left.ty, right))
    }

    fn comparison(
        &self,
        op: CompareOp,
        (left, right): (&Typed, &Typed),
        span: Span,
    ) -> Result<Typed> {
        // Put a time-typed side on the left so a text literal on either
        // side is read as a timestamp.
        let (left, right, op) = if right.ty == Type::Time && left.ty == Type::Text {
            (right, left, flip(op))
        } else {
            (left, right, op)
        };
        let right = Typed {
            expr: right.expr.clone(),
            ty: right.ty,
            span: right.span,
        };
        let (_, right) = self.comparable(left, right)?;
        Ok(Typed {
            expr: Expr::Compare(op, Box::new(left.expr.clone()), Box::new(right.expr)),
            ty: Type::Bool,
            span,
        })
    }

    fn substr(&self, args: &[Option<&ast::Expr>], span: Span, context: Context) -> Result<Typed> {
        const USAGE: &str = "substr(text, start [, length]) with BIGINT start and length";
        let (text, start, length) = match args {
            [Some(text), Some(start)] | [Some(text), Some(start), None] => (text, start, None),
            [Some(text), Some(start), Some(length)] => (text, start, Some(length)),
            _ => return self.fail(span, format!("expected {USAGE}")),
        };
        let text = self.expr(text, context)?;
        if !matches!(text.ty, Type::Text | Type::Null) {
            return self.fail(text.span, format!("{USAGE}; this is {}", text.ty.name()));
        }
        let start = self.expr(start, context)?;
        let length = length.map(|l| self.expr(l, context)).transpose()?;
        for number in std::iter::once(&start).chain(length.as_ref()) {
            if !matches!(number.ty, Type::Int | Type::Null) {
                return self.fail(
                    number.span,
                    format!("{USAGE}; this is {}", number.ty.name()),
                );
            }
        }
        Ok(Typed {
            expr: Expr::Substr {
                text: Box::new(text.expr),
                start: Box::new(start.expr),
                length: length.map(|l| Box::new(l.expr)),
            },
            ty: Type::Text,
            span,
        })
    }

    /// `time_bucket('5 minutes', time)` or `time_bucket(INTERVAL '5
    /// minutes', time)`, TimescaleDB's spellings; the width is checked
    /// here ([`BucketWidth::parse`]), with the caret under it.
    fn time_bucket(
        &self,
        args: &[Option<&ast::Expr>],
        span: Span,
        context: Context,
    ) -> Result<Typed> {
        const USAGE: &str = "time_bucket('5 minutes', timestamp): a width of seconds, minutes, hours or a day that divides a day";
        let [Some(width), Some(time)] = args else {
            return self.fail(span, format!("expected {USAGE}"));
        };
        let width_span = span_of(*width, span);
        let text = match width {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) => Some(s),
                _ => None,
            },
            ast::Expr::Interval(interval)
                if interval.leading_field.is_none() && interval.last_field.is_none() =>
            {
                match interval.value.as_ref() {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => Some(s),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        };
        let Some(text) = text else {
            return self.fail(
                width_span,
                format!("expected {USAGE}; the width is a quoted interval such as '15 minutes'"),
            );
        };
        let width = match BucketWidth::parse(text) {
            Ok(width) => width,
            Err(cardinal_event::Error::BucketWidth { reason, .. }) => {
                return self.fail(
                    width_span,
                    format!("{text:?} is not a bucket width: {reason}"),
                );
            }
            Err(other) => return self.fail(width_span, other.to_string()),
        };
        let time = self.expr(time, context)?;
        if !matches!(time.ty, Type::Time | Type::Null) {
            return self.fail(time.span, format!("{USAGE}; this is {}", time.ty.name()));
        }
        Ok(Typed {
            expr: Expr::TimeBucket {
                width,
                expr: Box::new(time.expr),
            },
            ty: Type::Time,
            span,
        })
    }

    fn function(&self, f: &ast::Function, span: Span, context: Context) -> Result<Typed> {
        let name = function_name(f);
        if is_aggregate_name(&name) {
            return self.fail(
                span,
                match context {
                    Context::Where => format!("aggregate {name} is not allowed in WHERE, which filters records before they are summarized"),
                    Context::Select => format!("aggregate {name} must be a whole select item, not part of an expression"),
                    Context::Group => format!("cannot group by the aggregate {name}"),
                    Context::Query => format!("aggregate {name} is not allowed in a query's condition, which keeps groups by their dimensions"),
                },
            );
        }
        let args = self.function_args(f, span, false)?;
        match name.as_str() {
            "substr" | "substring" => self.substr(&args, span, context),
            "lower" | "upper" => {
                let [Some(arg)] = args.as_slice() else {
                    return self.fail(span, format!("expected {name}(text)"));
                };
                let arg = self.expr(arg, context)?;
                if !matches!(arg.ty, Type::Text | Type::Null) {
                    return self.fail(arg.span, format!("{name} needs TEXT, and this is {}", arg.ty.name()));
                }
                let op = if name == "lower" { CaseOp::Lower } else { CaseOp::Upper };
                Ok(Typed {
                    expr: Expr::Case(op, Box::new(arg.expr)),
                    ty: Type::Text,
                    span,
                })
            }
            "date_trunc" => {
                const USAGE: &str = "date_trunc('second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'quarter' | 'year', timestamp)";
                let [Some(unit), Some(time)] = args.as_slice() else {
                    return self.fail(span, format!("expected {USAGE}"));
                };
                let unit_span = span_of(*unit, span);
                let unit = match unit {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::SingleQuotedString(s) => TimeUnit::parse(s).ok(),
                        _ => None,
                    },
                    _ => None,
                };
                let Some(unit) = unit else {
                    return self.fail(unit_span, format!("expected {USAGE}"));
                };
                let time = self.expr(time, context)?;
                if !matches!(time.ty, Type::Time | Type::Null) {
                    return self.fail(time.span, format!("{USAGE}; this is {}", time.ty.name()));
                }
                Ok(Typed {
                    expr: Expr::DateTrunc(unit, Box::new(time.expr)),
                    ty: Type::Time,
                    span,
                })
            }
            "floor" | "ceil" | "ceiling" | "round" | "abs" | "to_timestamp" => {
                let [Some(arg)] = args.as_slice() else {
                    return self.fail(span, format!("expected {name}(number)"));
                };
                let arg = self.expr(arg, context)?;
                if !matches!(arg.ty, Type::Int | Type::Float | Type::Null) {
                    return self.fail(
                        arg.span,
                        format!("{name} needs a number, and this is {}", arg.ty.name()),
                    );
                }
                let (op, ty) = match name.as_str() {
                    "floor" => (MathOp::Floor, arg.ty),
                    "ceil" | "ceiling" => (MathOp::Ceil, arg.ty),
                    "round" => (MathOp::Round, arg.ty),
                    "abs" => (MathOp::Abs, arg.ty),
                    _ => (MathOp::ToTimestamp, Type::Time),
                };
                Ok(Typed {
                    expr: Expr::Math(op, Box::new(arg.expr)),
                    ty,
                    span,
                })
            }
            "time_bucket" => self.time_bucket(&args, span, context),
            "coalesce" => {
                if args.is_empty() {
                    return self.fail(span, "coalesce needs at least one argument");
                }
                let mut ty = Type::Null;
                let mut list = Vec::new();
                for arg in &args {
                    let Some(arg) = arg else {
                        return self.fail(span, "coalesce takes expressions");
                    };
                    let arg = self.expr(arg, context)?;
                    ty = match (ty, arg.ty) {
                        (Type::Null, t) | (t, Type::Null) => t,
                        (a, b) if a == b => a,
                        (Type::Int | Type::Float, Type::Int | Type::Float) => {
                            return self.fail(
                                arg.span,
                                "coalesce of BIGINT and DOUBLE: make both DOUBLE (for example x * 1.0)",
                            );
                        }
                        (a, b) => {
                            return self.fail(
                                arg.span,
                                format!("coalesce arguments must have one type; {} and {}", a.name(), b.name()),
                            );
                        }
                    };
                    list.push(arg.expr);
                }
                Ok(Typed {
                    expr: Expr::Coalesce(list),
                    ty,
                    span,
                })
            }
            _ => self.fail(
                span_of(&f.name, span),
                format!("unknown function {name}; functions are substr, substring, lower, upper, date_trunc, time_bucket, coalesce, floor, ceil, round, abs, to_timestamp, extract(epoch from t); {SUPPORTED_AGGREGATES}"),
            ),
        }
    }
}

/// The instant an epoch number names, by the rule event times follow
/// ([`Timestamp::from_epoch`]): seconds below
/// [`cardinal_event::EPOCH_MS_MIN`] in magnitude, milliseconds from there
/// (a fraction of a millisecond is dropped, toward minus infinity); `None`
/// past the instants a timestamp prints (years 0 to 9999).
pub fn epoch_instant(number: f64) -> Option<Timestamp> {
    const MS_MAX: f64 = 253_402_300_799_999.0;
    const MS_MIN: f64 = -62_167_219_200_000.0;
    #[allow(clippy::cast_precision_loss, reason = "10^11 is exact in a double")]
    let seconds_below = cardinal_event::EPOCH_MS_MIN as f64;
    let ms = if number.abs() < seconds_below {
        number * 1000.0
    } else {
        number
    };
    // In range: |ms| < 2^48, exact as an integer.
    #[allow(clippy::cast_possible_truncation)]
    (MS_MIN..=MS_MAX)
        .contains(&ms)
        .then(|| Timestamp(ms.floor() as i64))
}

fn left_right<'a>(left: &'a Typed, right: &'a Typed) -> (&'a Typed, &'a Typed) {
    (left, right)
}

fn flip(op: CompareOp) -> CompareOp {
    match op {
        CompareOp::Lt => CompareOp::Gt,
        CompareOp::LtEq => CompareOp::GtEq,
        CompareOp::Gt => CompareOp::Lt,
        CompareOp::GtEq => CompareOp::LtEq,
        other => other,
    }
}

fn function_name(f: &ast::Function) -> String {
    let parts: Vec<String> = f
        .name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => ident.value.to_ascii_lowercase(),
            other => other.to_string(),
        })
        .collect();
    parts.join(".")
}

/// A whole-number literal parameter (`12`), if the argument is one.
fn literal_integer(e: &ast::Expr) -> Option<u64> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => text.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// A numeric literal parameter (`0.99`, `12`), if the argument is one.
fn literal_number(e: &ast::Expr) -> Option<f64> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => text.parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::tokenizer::Location;

    fn span(line: u64, from: u64, to: u64) -> Span {
        Span::new(Location::new(line, from), Location::new(line, to))
    }

    #[test]
    fn widen_closes_calls() {
        let source = "SELECT upper(lower(x)) , 'a(' FROM s";
        // sqlparser's span of the call ends after `x`.
        assert_eq!(widen(source, span(1, 8, 21)), span(1, 8, 23));
        // A span with nothing open stays as it is.
        assert_eq!(widen(source, span(1, 20, 21)), span(1, 20, 21));
        // Parentheses inside quotes do not count.
        assert_eq!(widen(source, span(1, 26, 30)), span(1, 26, 30));
    }

    #[test]
    fn source_text_spans_lines() {
        let source = "SELECT a,\n  sum(b)\nFROM s";
        assert_eq!(source_text(source, span(2, 3, 9)), "sum(b)");
        let across = Span::new(Location::new(1, 8), Location::new(2, 9));
        assert_eq!(source_text(source, across), "a, sum(b)");
    }

    #[test]
    fn paths_split_on_dots() {
        assert_eq!(
            split_path("user.id"),
            Some(vec!["user".to_owned(), "id".to_owned()])
        );
        assert_eq!(split_path("plain"), Some(vec!["plain".to_owned()]));
        assert_eq!(split_path("a..b"), None);
        assert_eq!(split_path(".a"), None);
    }
}
