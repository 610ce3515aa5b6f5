//! What PostgreSQL clients send besides queries over summaries, answered
//! from the plan: session chatter (`SET`, `SHOW`, `BEGIN`, `-- ping`),
//! constant selects (`SELECT 1`, `SELECT version()`), and reads of the
//! catalogs that psql's `\d` and Grafana's table and column pickers
//! make. No second SQL engine: each catalog is a few virtual rows, and
//! a small evaluator reads the shapes those clients send over them.
//!
//! Recognised shapes (anything else that reads a catalog gets its
//! columns and no rows; a statement that is none of these goes to the
//! summary planner, whose errors name what is wrong):
//!
//! | statement | answer |
//! |---|---|
//! | empty, `;`, `-- ping` | EmptyQueryResponse |
//! | `BEGIN`, `START TRANSACTION`, `COMMIT`, `END`, `ROLLBACK`, `ABORT` | accepted, nothing done (every answer is read-only) |
//! | `SET ...`, `RESET ...`, `DISCARD ...`, `DEALLOCATE ...` | accepted, nothing changed |
//! | `SHOW name` | [`setting`]; an unknown name is `42704` |
//! | `SELECT` without `FROM` | constants, `version()`, `current_schema()`, `current_database()`, `current_user`, `current_setting(name)`, casts, `+ - * /`, `||` |
//! | `information_schema.tables` | one row per summary, schema `public`, type `VIEW` |
//! | `information_schema.columns` | one row per column of `SELECT * FROM summary`, `data_type` as PostgreSQL names it |
//! | `information_schema.schemata` | `public` |
//! | `pg_catalog.pg_class` (with `pg_namespace`) | one row per summary, `relkind` `v` (psql's `\d`, `\d name`) |
//! | `pg_catalog.pg_attribute` | the summary's columns, by `attrelid` (psql's `\d name`) |
//! | any other `pg_catalog.*` or `information_schema.*` | its columns, no rows |
//!
//! The evaluator knows what those shapes use: comparisons, `AND`/`OR`/
//! `NOT`, `IN` lists, `CASE`, `quote_ident`, `parse_ident`,
//! `array_length`, subscripts, `~` and `!~` with anchored patterns of
//! plain names (`'^(reach)$'`, what psql sends for `\d reach`; a
//! trailing `.*` for `\d rea*`), and the schema test Grafana builds from
//! `search_path` (an `IN (subquery)`, true of `public` only: every table
//! is in `public`, which is on the path). A function it does not know is
//! NULL in a catalog query.
//!
//! ADVICE FOR HACKERS: a client whose catalog query comes back wrong
//! shows up here as a shape to add to the table above (and a test in
//! `crates/cli/tests/pg.rs` with the client's exact text), not as a
//! more general evaluator.

use std::cmp::Ordering;
use std::collections::HashMap;

use cardinal_export::{Cell, CellType, Table, TableColumn};
use cardinal_route::Plan;
use cardinal_route::sqlparser::ast;
use cardinal_route::sqlparser::dialect::PostgreSqlDialect;
use cardinal_route::sqlparser::parser::Parser;
use cardinal_route::sqlparser::tokenizer::{Token, Tokenizer};

use super::{Refused, SERVER_VERSION, SERVER_VERSION_NUM, error_info};

/// What a recognised statement answers.
#[derive(Debug)]
pub enum Answer {
    /// Rows.
    Rows(Table),
    /// A command done (its tag).
    Command(&'static str),
    /// A transaction begun (a no-op).
    Begin,
    /// A transaction ended (`COMMIT` or `ROLLBACK`; a no-op).
    End(&'static str),
    /// Nothing to do.
    Empty,
}

/// The OID of the first summary's relation; summary `i` is this plus
/// `i` (user relations start at 16384 in PostgreSQL).
const FIRST_OID: i64 = 16_384;
/// The OID of schema `public`, as in PostgreSQL.
const PUBLIC_OID: i64 = 2_200;
/// The database name reported (`current_database()`); clients may ask
/// for any, every one is this server's summaries.
const DATABASE: &str = "cardinal";
/// The owner reported for every relation.
const OWNER: &str = "cardinal";

/// A server setting (`SHOW`, `current_setting`), by name in any case.
pub fn setting(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "server_version" => SERVER_VERSION,
        "server_version_num" => SERVER_VERSION_NUM,
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" | "integer_datetimes" => "on",
        "default_transaction_read_only" | "transaction_read_only" => "on",
        "is_superuser" => "off",
        "timezone" | "log_timezone" => "UTC",
        "datestyle" => "ISO, MDY",
        "intervalstyle" => "postgres",
        "search_path" => "public",
        "transaction_isolation" | "default_transaction_isolation" => "read committed",
        "max_identifier_length" => "63",
        "application_name" => "",
        "extra_float_digits" => "1",
        "lc_collate" | "lc_ctype" | "lc_messages" | "lc_monetary" | "lc_numeric" | "lc_time" => "C",
        _ => return None,
    })
}

/// The answer to `text` when it is one of the shapes above; `None` when
/// it is for the summary planner.
///
/// # Errors
///
/// `42704` for an unknown setting, `0A000` for a constant select this
/// module cannot evaluate.
pub fn answer(plan: &Plan, text: &str) -> Result<Option<Answer>, Refused> {
    let words = first_words(text);
    let word = |i: usize| words.get(i).map_or("", String::as_str);
    match word(0) {
        "" => return Ok(Some(Answer::Empty)),
        "begin" | "start" => return Ok(Some(Answer::Begin)),
        "commit" | "end" => return Ok(Some(Answer::End("COMMIT"))),
        "rollback" | "abort" => return Ok(Some(Answer::End("ROLLBACK"))),
        "set" => return Ok(Some(Answer::Command("SET"))),
        "reset" => return Ok(Some(Answer::Command("RESET"))),
        "discard" => return Ok(Some(Answer::Command("DISCARD ALL"))),
        "deallocate" => return Ok(Some(Answer::Command("DEALLOCATE"))),
        "show" => {
            let name = word(1);
            let value = setting(name).ok_or_else(|| {
                error_info(
                    "42704",
                    format!("unrecognized configuration parameter \"{name}\""),
                )
            })?;
            return Ok(Some(Answer::Rows(one_value(name, value))));
        }
        "select" | "with" => {}
        _ => return Ok(None),
    }
    // A query the dialect's parser reads, or the planner's to refuse.
    let Ok(statements) = Parser::parse_sql(&PostgreSqlDialect {}, text) else {
        return Ok(None);
    };
    let [ast::Statement::Query(query)] = statements.as_slice() else {
        return Ok(None);
    };
    let ast::SetExpr::Select(select) = query.body.as_ref() else {
        return Ok(None);
    };
    let relations = relations(select);
    if select.from.is_empty() {
        return constant(select).map(|table| Some(Answer::Rows(table)));
    }
    let Some(first) = relations.first() else {
        return Ok(None);
    };
    if !relations.iter().all(|r| is_catalog(r)) {
        return Ok(None);
    }
    let catalog = Catalog::new(plan);
    let rows = match first.as_str() {
        "information_schema.tables" => catalog.tables(),
        "information_schema.columns" => catalog.columns(),
        "information_schema.schemata" => vec![row(&[("schema_name", Value::text("public"))])],
        "pg_catalog.pg_class" => catalog.classes(),
        "pg_catalog.pg_attribute" => catalog.attributes(),
        _ => Vec::new(),
    };
    Ok(Some(Answer::Rows(evaluate(select, query, &rows))))
}

/// The first two words of `text`, lower case (comments skipped).
fn first_words(text: &str) -> Vec<String> {
    let dialect = PostgreSqlDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, text).tokenize() else {
        return vec!["?".to_owned()];
    };
    tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
        .take(2)
        .map(|t| match t {
            Token::Word(w) => w.value.to_ascii_lowercase(),
            other => other.to_string(),
        })
        .collect()
}

/// A one-row, one-column table of text.
fn one_value(name: &str, value: &str) -> Table {
    Table {
        columns: vec![TableColumn {
            name: name.to_owned(),
            ty: CellType::Text,
        }],
        rows: vec![vec![Cell::Text(value.to_owned())]],
    }
}

/// The relations a select reads, `schema.name` in lower case (a
/// `pg_` name without a schema is `pg_catalog`'s, as the search path
/// makes it).
fn relations(select: &ast::Select) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |factor: &ast::TableFactor| {
        if let ast::TableFactor::Table { name, .. } = factor {
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().map(|i| i.value.to_ascii_lowercase()))
                .collect();
            let qualified = match parts.as_slice() {
                [one] if one.starts_with("pg_") => format!("pg_catalog.{one}"),
                [one] => one.clone(),
                [.., schema, table] => format!("{schema}.{table}"),
                [] => String::new(),
            };
            out.push(qualified);
        } else {
            out.push("(subquery)".to_owned());
        }
    };
    for from in &select.from {
        add(&from.relation);
        for join in &from.joins {
            add(&join.relation);
        }
    }
    out
}

fn is_catalog(relation: &str) -> bool {
    relation.starts_with("pg_catalog.") || relation.starts_with("information_schema.")
}

// ---- Virtual rows --------------------------------------------------

/// A value of the evaluator.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Text(String),
    Array(Vec<String>),
}

impl Value {
    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    /// The value as text, as a comparison with text reads it.
    fn as_text(&self) -> Option<String> {
        match self {
            Value::Null => None,
            Value::Bool(b) => Some(if *b { "t" } else { "f" }.to_owned()),
            Value::Int(i) => Some(i.to_string()),
            Value::Text(t) => Some(t.clone()),
            Value::Array(a) => Some(format!("{{{}}}", a.join(","))),
        }
    }

    fn truth(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    fn cell(&self) -> Cell {
        match self {
            Value::Null => Cell::Null,
            Value::Bool(b) => Cell::Bool(*b),
            Value::Int(i) => Cell::Int(*i),
            other => Cell::Text(other.as_text().unwrap_or_default()),
        }
    }
}

/// A virtual row: attribute name (lower case, unqualified) to value.
type Row = HashMap<String, Value>;

fn row(pairs: &[(&str, Value)]) -> Row {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// The summaries as relations.
struct Catalog {
    /// Each summary's name and columns (what `SELECT *` answers).
    relations: Vec<(String, Vec<TableColumn>)>,
}

impl Catalog {
    fn new(plan: &Plan) -> Catalog {
        let relations = plan
            .summaries
            .iter()
            .map(|s| {
                let text = format!("SELECT * FROM \"{}\"", s.name.replace('"', "\"\""));
                let columns = cardinal_engine::sql::Prepared::new(plan, &text)
                    .map(|p| p.columns())
                    .unwrap_or_default();
                (s.name.clone(), columns)
            })
            .collect();
        Catalog { relations }
    }

    fn oid(index: usize) -> i64 {
        FIRST_OID + i64::try_from(index).expect("few summaries")
    }

    fn tables(&self) -> Vec<Row> {
        self.relations
            .iter()
            .map(|(name, _)| {
                row(&[
                    ("table_catalog", Value::text(DATABASE)),
                    ("table_schema", Value::text("public")),
                    ("table_name", Value::text(name)),
                    ("table_type", Value::text("VIEW")),
                    ("is_insertable_into", Value::text("NO")),
                ])
            })
            .collect()
    }

    fn columns(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (name, columns) in &self.relations {
            for (i, column) in columns.iter().enumerate() {
                rows.push(row(&[
                    ("table_catalog", Value::text(DATABASE)),
                    ("table_schema", Value::text("public")),
                    ("table_name", Value::text(name)),
                    ("column_name", Value::text(&column.name)),
                    (
                        "ordinal_position",
                        Value::Int(i64::try_from(i + 1).expect("few columns")),
                    ),
                    ("data_type", Value::text(column.ty.pg_name())),
                    ("udt_name", Value::text(udt_name(column.ty))),
                    ("is_nullable", Value::text("YES")),
                    ("column_default", Value::Null),
                ]));
            }
        }
        rows
    }

    fn classes(&self) -> Vec<Row> {
        self.relations
            .iter()
            .enumerate()
            .map(|(i, (name, columns))| {
                let f = Value::Bool(false);
                row(&[
                    ("oid", Value::Int(Self::oid(i))),
                    ("relname", Value::text(name)),
                    ("relnamespace", Value::Int(PUBLIC_OID)),
                    ("nspname", Value::text("public")),
                    ("relkind", Value::text("v")),
                    ("relowner", Value::Int(10)),
                    ("relchecks", Value::Int(0)),
                    ("relhasindex", f.clone()),
                    ("relhasrules", f.clone()),
                    ("relhastriggers", f.clone()),
                    ("relrowsecurity", f.clone()),
                    ("relforcerowsecurity", f.clone()),
                    ("relhasoids", f.clone()),
                    ("relispartition", f.clone()),
                    ("relispopulated", Value::Bool(true)),
                    ("reltablespace", Value::Int(0)),
                    ("reloftype", Value::Int(0)),
                    ("relpersistence", Value::text("p")),
                    ("relreplident", Value::text("d")),
                    (
                        "relnatts",
                        Value::Int(i64::try_from(columns.len()).expect("few columns")),
                    ),
                    ("reloptions", Value::Null),
                    ("amname", Value::Null),
                ])
            })
            .collect()
    }

    fn attributes(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (i, (_, columns)) in self.relations.iter().enumerate() {
            for (n, column) in columns.iter().enumerate() {
                let f = Value::Bool(false);
                rows.push(row(&[
                    ("attrelid", Value::Int(Self::oid(i))),
                    ("attname", Value::text(&column.name)),
                    ("atttypid", Value::Int(type_oid(column.ty))),
                    (
                        "attnum",
                        Value::Int(i64::try_from(n + 1).expect("few columns")),
                    ),
                    ("atttypmod", Value::Int(-1)),
                    ("attnotnull", f.clone()),
                    ("attisdropped", f.clone()),
                    ("atthasdef", f.clone()),
                    ("attidentity", Value::text("")),
                    ("attgenerated", Value::text("")),
                    ("attcollation", Value::Int(0)),
                    ("attstorage", Value::text("p")),
                    ("attstattarget", Value::Int(-1)),
                ]));
            }
        }
        rows
    }
}

fn udt_name(ty: CellType) -> &'static str {
    match ty {
        CellType::Bool => "bool",
        CellType::Int => "int8",
        CellType::Float => "float8",
        CellType::Text => "text",
        CellType::Time => "timestamptz",
    }
}

fn type_oid(ty: CellType) -> i64 {
    match ty {
        CellType::Bool => 16,
        CellType::Int => 20,
        CellType::Float => 701,
        CellType::Text => 25,
        CellType::Time => 1184,
    }
}

fn type_of_oid(oid: i64) -> Option<&'static str> {
    Some(match oid {
        16 => "boolean",
        20 => "bigint",
        701 => "double precision",
        25 => "text",
        1184 => "timestamp with time zone",
        _ => return None,
    })
}

// ---- Evaluating a select over virtual rows -------------------------

/// A constant select (`SELECT 1`, `SELECT version()`): one row.
fn constant(select: &ast::Select) -> Result<Table, Refused> {
    let empty = Row::new();
    let mut columns = Vec::new();
    let mut cells = Vec::new();
    for item in &select.projection {
        let (expr, name) = item_parts(item).ok_or_else(|| {
            error_info(
                "0A000",
                "a select without FROM takes expressions (name a summary: SELECT ... FROM <summary>)"
                    .into(),
            )
        })?;
        let value = eval(expr, &empty, true).ok_or_else(|| {
            error_info(
                "0A000",
                format!(
                    "{expr} is not supported without FROM: name a summary (SELECT ... FROM <summary>)"
                ),
            )
        })?;
        columns.push(TableColumn {
            name,
            ty: cell_type(&value),
        });
        cells.push(value.cell());
    }
    Ok(Table {
        columns,
        rows: vec![cells],
    })
}

/// A select item's expression and output name.
fn item_parts(item: &ast::SelectItem) -> Option<(&ast::Expr, String)> {
    match item {
        ast::SelectItem::UnnamedExpr(e) => Some((e, output_name(e))),
        ast::SelectItem::ExprWithAlias { expr, alias } => Some((expr, alias.value.clone())),
        _ => None,
    }
}

/// The name PostgreSQL gives an unnamed select item.
fn output_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Identifier(i) => i.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => {
            parts.last().map_or_else(String::new, |i| i.value.clone())
        }
        ast::Expr::Function(f) => f
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map_or_else(|| "?column?".to_owned(), |i| i.value.to_ascii_lowercase()),
        ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => output_name(expr),
        _ => "?column?".to_owned(),
    }
}

fn cell_type(value: &Value) -> CellType {
    match value {
        Value::Bool(_) => CellType::Bool,
        Value::Int(_) => CellType::Int,
        _ => CellType::Text,
    }
}

/// The rows of `select` over `rows`: WHERE, ORDER BY, the select list.
fn evaluate(select: &ast::Select, query: &ast::Query, rows: &[Row]) -> Table {
    let mut kept: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            select
                .selection
                .as_ref()
                .is_none_or(|w| eval(w, r, false).is_some_and(|v| v.truth()))
        })
        .collect();
    let items: Vec<(&ast::Expr, String)> = select
        .projection
        .iter()
        .flat_map(|item| match item {
            ast::SelectItem::Wildcard(_) | ast::SelectItem::QualifiedWildcard(..) => Vec::new(),
            other => item_parts(other).into_iter().collect(),
        })
        .collect();
    let values = |r: &Row| -> Vec<Value> {
        items
            .iter()
            .map(|(e, _)| eval(e, r, false).unwrap_or(Value::Null))
            .collect()
    };
    if let Some(order) = &query.order_by
        && let ast::OrderByKind::Expressions(keys) = &order.kind
    {
        let key_of = |r: &Row| -> Vec<Value> {
            let out = values(r);
            keys.iter()
                .map(|k| match &k.expr {
                    ast::Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => n
                            .parse::<usize>()
                            .ok()
                            .and_then(|i| out.get(i.wrapping_sub(1)).cloned())
                            .unwrap_or(Value::Null),
                        _ => Value::Null,
                    },
                    e => items
                        .iter()
                        .position(
                            |(_, name)| matches!(e, ast::Expr::Identifier(i) if i.value == *name),
                        )
                        .and_then(|i| out.get(i).cloned())
                        .unwrap_or_else(|| eval(e, r, false).unwrap_or(Value::Null)),
                })
                .collect()
        };
        kept.sort_by(|a, b| {
            let (a, b) = (key_of(a), key_of(b));
            for (k, (x, y)) in keys.iter().zip(a.iter().zip(&b)) {
                let mut order = compare(x, y);
                if k.options.sort == Some(ast::OrderBySort::Desc) {
                    order = order.reverse();
                }
                if order != Ordering::Equal {
                    return order;
                }
            }
            Ordering::Equal
        });
    }
    let rows: Vec<Vec<Value>> = kept.into_iter().map(values).collect();
    let columns = items
        .iter()
        .enumerate()
        .map(|(i, (_, name))| TableColumn {
            name: name.clone(),
            ty: rows
                .iter()
                .map(|r| &r[i])
                .find(|v| **v != Value::Null)
                .map_or(CellType::Text, cell_type),
        })
        .collect();
    Table {
        columns,
        rows: rows
            .iter()
            .map(|r| r.iter().map(Value::cell).collect())
            .collect(),
    }
}

fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Greater,
        (_, Value::Null) => Ordering::Less,
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (x, y) => x.as_text().cmp(&y.as_text()),
    }
}

fn equal(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        (Value::Int(x), Value::Int(y)) => Value::Bool(x == y),
        (x, y) => Value::Bool(x.as_text() == y.as_text()),
    }
}

/// `e` over `r`; `None` when `e` is outside what this evaluator reads
/// (`strict`), or NULL for it in a catalog query.
fn eval(e: &ast::Expr, r: &Row, strict: bool) -> Option<Value> {
    use ast::BinaryOperator as Op;
    let go = |e: &ast::Expr| eval(e, r, strict);
    Some(match e {
        ast::Expr::Identifier(i) => return lookup(&i.value, r, strict),
        ast::Expr::CompoundIdentifier(parts) => {
            return lookup(&parts.last()?.value, r, strict);
        }
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => match n.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Text(n.clone()),
            },
            ast::Value::SingleQuotedString(s) => Value::Text(s.clone()),
            ast::Value::Boolean(b) => Value::Bool(*b),
            ast::Value::Null => Value::Null,
            _ => return fallback(strict),
        },
        ast::Expr::Nested(inner) => go(inner)?,
        ast::Expr::Collate { expr, .. } => go(expr)?,
        ast::Expr::Cast {
            expr, data_type, ..
        } => {
            let value = go(expr)?;
            let target = data_type.to_string().to_ascii_lowercase();
            match value {
                Value::Text(t) if target.starts_with("int") || target.ends_with("int") => {
                    t.trim().parse().map_or(Value::Null, Value::Int)
                }
                other => other,
            }
        }
        ast::Expr::IsNull(inner) => Value::Bool(go(inner)? == Value::Null),
        ast::Expr::IsNotNull(inner) => Value::Bool(go(inner)? != Value::Null),
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Not,
            expr,
        } => match go(expr)? {
            Value::Bool(b) => Value::Bool(!b),
            _ => Value::Null,
        },
        ast::Expr::BinaryOp { left, op, right } => {
            let (a, b) = (go(left)?, go(right)?);
            match op {
                Op::And => Value::Bool(a.truth() && b.truth()),
                Op::Or => Value::Bool(a.truth() || b.truth()),
                Op::Eq => equal(&a, &b),
                Op::NotEq => match equal(&a, &b) {
                    Value::Bool(x) => Value::Bool(!x),
                    other => other,
                },
                Op::Lt => Value::Bool(compare(&a, &b) == Ordering::Less),
                Op::Gt => Value::Bool(compare(&a, &b) == Ordering::Greater),
                Op::LtEq => Value::Bool(compare(&a, &b) != Ordering::Greater),
                Op::GtEq => Value::Bool(compare(&a, &b) != Ordering::Less),
                Op::StringConcat => match (a.as_text(), b.as_text()) {
                    (Some(x), Some(y)) => Value::Text(x + &y),
                    _ => Value::Null,
                },
                Op::Plus | Op::Minus | Op::Multiply | Op::Divide => match (a, b) {
                    (Value::Int(x), Value::Int(y)) => match op {
                        Op::Plus => x.checked_add(y).map_or(Value::Null, Value::Int),
                        Op::Minus => x.checked_sub(y).map_or(Value::Null, Value::Int),
                        Op::Multiply => x.checked_mul(y).map_or(Value::Null, Value::Int),
                        _ => x.checked_div(y).map_or(Value::Null, Value::Int),
                    },
                    _ => return fallback(strict),
                },
                Op::PGRegexMatch | Op::PGRegexNotMatch => {
                    let matched = matches_pattern(&a, &b);
                    Value::Bool(matched == (*op == Op::PGRegexMatch))
                }
                Op::PGCustomBinaryOperator(parts)
                    if parts.last().map(String::as_str) == Some("~") =>
                {
                    Value::Bool(matches_pattern(&a, &b))
                }
                _ => return fallback(strict),
            }
        }
        ast::Expr::InList {
            expr,
            list,
            negated,
        } => {
            let value = go(expr)?;
            let mut found = false;
            for item in list {
                found |= equal(&value, &go(item)?).truth();
            }
            Value::Bool(found != *negated)
        }
        // The schema test Grafana builds from search_path: every table
        // is in public, which is on the path.
        ast::Expr::InSubquery { expr, negated, .. } if !strict => {
            let value = go(expr)?;
            Value::Bool((value.as_text().as_deref() == Some("public")) != *negated)
        }
        ast::Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            let operand = match operand {
                Some(o) => Some(go(o)?),
                None => None,
            };
            for when in conditions {
                let test = go(&when.condition)?;
                let holds = match &operand {
                    Some(o) => equal(o, &test).truth(),
                    None => test.truth(),
                };
                if holds {
                    return go(&when.result);
                }
            }
            match else_result {
                Some(e) => go(e)?,
                None => Value::Null,
            }
        }
        ast::Expr::CompoundFieldAccess { root, access_chain } => {
            let mut value = go(root)?;
            for access in access_chain {
                let ast::AccessExpr::Subscript(ast::Subscript::Index { index }) = access else {
                    return fallback(strict);
                };
                value = match (value, go(index)?) {
                    (Value::Array(items), Value::Int(i)) => usize::try_from(i - 1)
                        .ok()
                        .and_then(|i| items.get(i).cloned())
                        .map_or(Value::Null, Value::Text),
                    _ => Value::Null,
                };
            }
            value
        }
        ast::Expr::Function(f) => return function(f, r, strict),
        _ => return fallback(strict),
    })
}

fn fallback(strict: bool) -> Option<Value> {
    if strict { None } else { Some(Value::Null) }
}

/// A name: a row's attribute, or one of the SQL-standard niladic
/// functions.
fn lookup(name: &str, r: &Row, strict: bool) -> Option<Value> {
    let lower = name.to_ascii_lowercase();
    if let Some(v) = r.get(&lower) {
        return Some(v.clone());
    }
    match lower.as_str() {
        "current_user" | "user" | "session_user" | "current_role" => Some(Value::text(OWNER)),
        "current_catalog" => Some(Value::text(DATABASE)),
        "current_schema" => Some(Value::text("public")),
        _ => fallback(strict),
    }
}

fn function(f: &ast::Function, r: &Row, strict: bool) -> Option<Value> {
    let name = f
        .name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_ascii_lowercase())
        .unwrap_or_default();
    let args: Vec<&ast::Expr> = match &f.args {
        ast::FunctionArguments::List(list) => list
            .args
            .iter()
            .filter_map(|a| match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let arg = |i: usize| -> Option<Value> { eval(args.get(i)?, r, strict) };
    Some(match name.as_str() {
        "version" => Value::Text(format!(
            "PostgreSQL {SERVER_VERSION} (cardinal {}, SQL over summaries)",
            env!("CARGO_PKG_VERSION")
        )),
        "current_schema" => Value::text("public"),
        "current_database" => Value::text(DATABASE),
        "current_user" | "session_user" => Value::text(OWNER),
        "pg_backend_pid" => Value::Int(i64::from(std::process::id())),
        "current_setting" => {
            let name = arg(0)?.as_text()?;
            Value::text(setting(&name)?)
        }
        "quote_ident" => match arg(0)? {
            Value::Null => Value::Null,
            v => Value::Text(quote_ident(&v.as_text()?)),
        },
        "parse_ident" => match arg(0)? {
            Value::Text(t) => Value::Array(parse_ident(&t)),
            _ => Value::Null,
        },
        "array_length" => match arg(0)? {
            Value::Array(items) => Value::Int(i64::try_from(items.len()).ok()?),
            _ => Value::Null,
        },
        "trim" | "lower" | "upper" => match arg(0)? {
            Value::Text(t) => Value::Text(match name.as_str() {
                "trim" => t.trim().to_owned(),
                "lower" => t.to_lowercase(),
                _ => t.to_uppercase(),
            }),
            other => other,
        },
        "format_type" => match arg(0)? {
            Value::Int(oid) => type_of_oid(oid).map_or(Value::Null, Value::text),
            _ => Value::Null,
        },
        "pg_get_userbyid" => Value::text(OWNER),
        "pg_table_is_visible" | "has_table_privilege" | "has_schema_privilege" => Value::Bool(true),
        "pg_encoding_to_char" => Value::text("UTF8"),
        _ => return fallback(strict),
    })
}

/// An identifier as `quote_ident` prints it: bare when it is lower case
/// letters, digits and `_` (not starting with a digit), else in double
/// quotes with `"` doubled.
fn quote_ident(name: &str) -> String {
    let bare = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if bare {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// `parse_ident`: a dotted name split into its parts, quotes removed
/// (bare parts folded to lower case).
fn parse_ident(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    let mut part = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(c) = chars.next() {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            part.push('"');
                        } else {
                            break;
                        }
                    } else {
                        part.push(c);
                    }
                }
            }
            '.' => parts.push(std::mem::take(&mut part)),
            c => part.extend(c.to_lowercase()),
        }
    }
    parts.push(part);
    parts
}

/// `value ~ pattern` for the patterns psql sends: `^(name)$` (several
/// names joined by `|`), a trailing `.*` inside for a prefix, `^pg_toast`
/// for a prefix. Anything else matches nothing.
fn matches_pattern(value: &Value, pattern: &Value) -> bool {
    let (Some(value), Some(pattern)) = (value.as_text(), pattern.as_text()) else {
        return false;
    };
    let anchored = pattern.strip_prefix('^');
    let Some(body) = anchored else {
        return false;
    };
    let (body, whole) = match body.strip_suffix('$') {
        Some(b) => (b, true),
        None => (body, false),
    };
    let body = body
        .strip_prefix('(')
        .and_then(|b| b.strip_suffix(')'))
        .unwrap_or(body);
    body.split('|').any(|alternative| {
        let (fixed, prefix) = match alternative.strip_suffix(".*") {
            Some(f) => (f, true),
            None => (alternative, !whole),
        };
        let special = |c: char| "\\.*+?[](){}|^$".contains(c);
        if fixed.chars().any(special) {
            return false;
        }
        if prefix {
            value.starts_with(fixed)
        } else {
            value == fixed
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_quote_and_parse_as_postgres_does() {
        assert_eq!(quote_ident("reach"), "reach");
        assert_eq!(quote_ident("Reach"), "\"Reach\"");
        assert_eq!(parse_ident("public.reach"), vec!["public", "reach"]);
        assert_eq!(parse_ident("\"A.b\".C"), vec!["A.b", "c"]);
    }

    #[test]
    fn patterns_are_the_ones_psql_sends() {
        let t = Value::text;
        assert!(matches_pattern(&t("reach"), &t("^(reach)$")));
        assert!(!matches_pattern(&t("reach2"), &t("^(reach)$")));
        assert!(matches_pattern(&t("reach2"), &t("^(rea.*)$")));
        assert!(matches_pattern(&t("pg_toast_1"), &t("^pg_toast")));
        assert!(!matches_pattern(&t("public"), &t("^pg_toast")));
    }

    #[test]
    fn chatter_is_recognised() {
        let plan = Plan::default();
        let answer = |text| answer(&plan, text).expect("answered");
        assert!(matches!(answer("-- ping"), Some(Answer::Empty)));
        assert!(matches!(answer("BEGIN"), Some(Answer::Begin)));
        assert!(matches!(
            answer("set extra_float_digits = 3"),
            Some(Answer::Command("SET"))
        ));
        let Some(Answer::Rows(table)) = answer("SHOW server_version") else {
            panic!("rows");
        };
        assert_eq!(table.rows, vec![vec![Cell::Text(SERVER_VERSION.into())]]);
        let Some(Answer::Rows(table)) =
            answer("SELECT current_setting('server_version_num')::int/100 as version")
        else {
            panic!("rows");
        };
        assert_eq!(table.columns[0].name, "version");
        assert_eq!(table.rows, vec![vec![Cell::Int(1500)]]);
        assert!(answer("SELECT users FROM reach").is_none());
    }
}
