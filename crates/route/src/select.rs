//! The route crate's part in answering SQL queries over summaries: the
//! query's text parsed and bounded as declarations are, and its
//! expressions compiled by the same compiler, against whatever columns
//! the query sees (a summary's bucket and dimensions before merging, its
//! answer's columns after). The evaluator is `cardinal-engine`'s `sql`
//! module; nothing here knows about merging.

use sqlparser::ast;
use sqlparser::tokenizer::Span;

use crate::compile::{Compiler, Context, Scope};
use crate::error::Result;
use crate::expr::{Expr, Type};
use crate::parse::{at_span, span_of};
use crate::{Error, Format, Plan, Schema, Stream};

/// Parses `text`, one `SELECT` query (a trailing `;` allowed), with the
/// bounds of a declaration: [`crate::QUERY_BYTES_MAX`] bytes,
/// [`crate::EXPR_DEPTH_MAX`] levels. Errors quote the text with a caret.
pub fn parse_query(text: &str) -> Result<ast::Query> {
    crate::parse::parse_query(text)
}

/// Compiles `e`, an expression of the query `text`, against `schema`:
/// column `i` of the schema is field `i` of the records it will be
/// evaluated over. `owner` names the columns in messages ("the columns
/// of summary reach"). Aggregate calls are refused, as in a query's
/// condition; the caller rewrites the ones it answers first.
pub fn compile_expr(
    text: &str,
    schema: &Schema,
    owner: &str,
    e: &ast::Expr,
) -> Result<(Expr, Type)> {
    let compiler = Compiler {
        source: text,
        plan: Plan::default(),
    };
    let stream = Stream {
        name: owner.to_owned(),
        schema: schema.clone(),
        format: Format::Csv,
        header: false,
        time: None,
        delimiter: b',',
        credit_of: None,
    };
    let scope = Scope {
        compiler: &compiler,
        stream: &stream,
        owner: owner.to_owned(),
    };
    let typed = scope.expr(e, Context::Query)?;
    crate::compile::assert_depth(&typed.expr);
    Ok((typed.expr, typed.ty))
}

/// An error at `span` of `text`, with its caret.
pub fn error_at(text: &str, span: Span, message: impl Into<String>) -> Error {
    at_span(text, crate::compile::widen(text, span), message.into())
}

/// Where `e` was written in its text (sqlparser's span, or `fallback`).
pub fn span_of_expr(e: &ast::Expr, fallback: Span) -> Span {
    span_of(e, fallback)
}
