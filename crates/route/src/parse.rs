//! Declarations from text: the statement heads are read here, token by
//! token, and everything SQL proper (the select list, expressions, literals,
//! identifiers) is parsed by `sqlparser`.
//!
//! sqlparser has no `CREATE STREAM`, `CREATE SUMMARY` or `CREATE
//! ATTRIBUTION`. Rewriting the keywords to ones it knows (`TABLE`, `VIEW`)
//! would hand us sqlparser's `CreateTable` with forty fields to refuse one by
//! one and no place for `PATH` or `MODEL`. Instead the whole script is
//! tokenized once by sqlparser's tokenizer (which keeps each token's line
//! and column), and one `sqlparser::Parser` walks it: this module reads the
//! heads with the parser's token primitives and calls `parse_select_item`,
//! `parse_expr` and `parse_identifier` for the rest. Positions come from the
//! original tokens, so every error points into the text as written.
//
// ADVICE FOR HACKERS: a new statement needs a branch in `statement`, a
// variant in `Declaration`, its compile step in `compile.rs`, and rows in
// `tests/cases/*.txt` (read by `tests/declarations.rs`) and `docs/sql.md`.

use sqlparser::ast::{self, Ident, SelectItem, Spanned};
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan, Tokenizer};

use crate::error::{Error, Result, snippet};
use crate::{DECLARATION_BYTES_MAX, EXPR_DEPTH_MAX};

const SUPPORTED_STATEMENTS: &str = "expected CREATE STREAM, CREATE SUMMARY or CREATE ATTRIBUTION";

/// Declarations as written: parsed, not yet resolved against each other or
/// type-checked. [`Declarations::compile`] turns them into a [`crate::Plan`].
#[derive(Debug, Clone)]
pub struct Declarations {
    pub(crate) source: String,
    pub(crate) statements: Vec<Declaration>,
}

#[derive(Debug, Clone)]
pub(crate) enum Declaration {
    Stream(StreamDecl),
    Summary(SummaryDecl),
    Attribution(AttributionDecl),
}

#[derive(Debug, Clone)]
pub(crate) struct StreamDecl {
    pub name: Ident,
    pub columns: Vec<ColumnDecl>,
    pub options: Vec<(Ident, ast::ValueWithSpan)>,
}

#[derive(Debug, Clone)]
pub(crate) struct ColumnDecl {
    pub name: Ident,
    pub ty: (String, Span),
    pub path: Option<(String, Span)>,
}

#[derive(Debug, Clone)]
pub(crate) struct SummaryDecl {
    pub name: Ident,
    /// Each select item with the span of all its tokens (sqlparser's
    /// spans of calls stop before the closing parenthesis).
    pub items: Vec<(SelectItem, Span)>,
    pub stream: Ident,
    pub filter: Option<ast::Expr>,
    pub group_by: Vec<ast::Expr>,
}

#[derive(Debug, Clone)]
pub(crate) struct AttributionDecl {
    pub name: Ident,
    pub stream: Ident,
    pub user: Ident,
    pub model: (String, Span),
    pub half_life_days: Option<(u64, Span)>,
    pub lookback_days: (u64, Span),
    /// The expressions, boxed: a declaration stays as small as the others.
    pub touch: Box<ast::Expr>,
    pub conversion: Box<ast::Expr>,
    /// `VALUE`, `CAMPAIGN` and `SITE`, each with its keyword's span.
    pub value: Option<(Box<ast::Expr>, Span)>,
    pub campaign: Option<(Box<ast::Expr>, Span)>,
    pub site: Option<(Box<ast::Expr>, Span)>,
}

impl Declarations {
    /// Parses a script of `;`-separated declarations.
    pub fn parse(sql: &str) -> Result<Self> {
        if sql.len() > DECLARATION_BYTES_MAX {
            return Err(Error::TooLong {
                bytes: sql.len(),
                max: DECLARATION_BYTES_MAX,
            });
        }
        let dialect = GenericDialect {};
        let tokens = Tokenizer::new(&dialect, sql)
            .tokenize_with_location()
            .map_err(|e| at(sql, e.location, 1, e.message.to_lowercase()))?;
        let mut reader = Reader {
            source: sql,
            parser: Parser::new(&dialect)
                .with_recursion_limit(EXPR_DEPTH_MAX)
                .with_tokens_with_locations(tokens.clone()),
            tokens: &tokens,
        };
        let mut statements = Vec::new();
        loop {
            while reader.parser.consume_token(&Token::SemiColon) {}
            if reader.peek().token == Token::EOF {
                break;
            }
            statements.push(reader.statement()?);
        }
        Ok(Self {
            source: sql.to_owned(),
            statements,
        })
    }
}

/// An error at `location`, `width` characters wide.
pub(crate) fn at(source: &str, location: Location, width: u64, message: String) -> Error {
    let (line, column) = if location.line == 0 {
        (1, 1)
    } else {
        (location.line, location.column)
    };
    Error::At {
        line,
        column,
        snippet: snippet(source, line, column, width),
        message,
    }
}

/// An error under `span` (its start; its width when on one line).
pub(crate) fn at_span(source: &str, span: Span, message: String) -> Error {
    let width = if span.start.line == span.end.line {
        span.end.column.saturating_sub(span.start.column)
    } else {
        u64::MAX
    };
    at(source, span.start, width, message)
}

struct Reader<'a> {
    source: &'a str,
    parser: Parser<'a>,
    tokens: &'a [TokenWithSpan],
}

impl Reader<'_> {
    fn peek(&self) -> TokenWithSpan {
        self.parser.peek_token()
    }

    /// The end of the last token consumed that is not whitespace.
    fn previous_end(&self) -> Option<Location> {
        let index = self.parser.index();
        self.tokens
            .get(..index)?
            .iter()
            .rev()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .map(|t| t.span.end)
    }

    fn fail<T>(&self, token: &TokenWithSpan, message: String) -> Result<T> {
        Err(at_span(self.source, token.span, message))
    }

    /// Turns a sqlparser error into ours. Its messages end with " at Line:
    /// L, Column: C"; the token that starts there gives the caret's width.
    fn sql_error(&self, error: ParserError, context: &str) -> Error {
        let (text, location) = match error {
            ParserError::RecursionLimitExceeded => (
                format!("expression nested more than {EXPR_DEPTH_MAX} levels deep"),
                self.peek().span.start,
            ),
            ParserError::TokenizerError(text) | ParserError::ParserError(text) => {
                split_location(&text).unwrap_or((text, self.peek().span.start))
            }
        };
        let width = self
            .tokens
            .iter()
            .find(|t| t.span.start == location)
            .filter(|t| t.span.start.line == t.span.end.line)
            .map_or(1, |t| t.span.end.column.saturating_sub(t.span.start.column));
        let text = text
            .replace("Expected: ", "expected ")
            .replace(", found: ", ", found ");
        at(self.source, location, width, format!("{text}; {context}"))
    }

    /// A token as messages quote it.
    fn quote(token: &Token) -> String {
        match token {
            Token::EOF => "the end of the input".to_owned(),
            other => format!("'{other}'"),
        }
    }

    fn word_is(token: &TokenWithSpan, word: &str) -> bool {
        matches!(&token.token, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
    }

    /// Consumes the unquoted word `word` if it comes next.
    fn take_word(&mut self, word: &str) -> bool {
        if Self::word_is(&self.peek(), word) {
            self.parser.advance_token();
            true
        } else {
            false
        }
    }

    fn expect_word(&mut self, word: &str, context: &str) -> Result<TokenWithSpan> {
        let token = self.peek();
        if Self::word_is(&token, word) {
            self.parser.advance_token();
            Ok(token)
        } else {
            self.fail(
                &token,
                format!(
                    "expected {word}, found {}; {context}",
                    Self::quote(&token.token)
                ),
            )
        }
    }

    fn expect_token(&mut self, expected: Token, context: &str) -> Result<TokenWithSpan> {
        let token = self.peek();
        if token.token == expected {
            self.parser.advance_token();
            Ok(token)
        } else {
            self.fail(
                &token,
                format!(
                    "expected '{expected}', found {}; {context}",
                    Self::quote(&token.token)
                ),
            )
        }
    }

    /// After an item of a parenthesised list: consumes a `,` (another item
    /// follows: `true`) or the closing `)` (`false`); anything else is an
    /// error naming what the item was.
    fn list_goes_on(&mut self, item: &str, context: &str) -> Result<bool> {
        let token = self.peek();
        match token.token {
            Token::Comma => {
                self.parser.advance_token();
                Ok(true)
            }
            Token::RParen => {
                self.parser.advance_token();
                Ok(false)
            }
            ref other => self.fail(
                &token,
                format!(
                    "expected ',' or ')' after {item}, found {}; {context}",
                    Self::quote(other)
                ),
            ),
        }
    }

    fn identifier(&mut self, what: &str, context: &str) -> Result<Ident> {
        let token = self.peek();
        match &token.token {
            Token::Word(w) if w.keyword == Keyword::NoKeyword || w.quote_style.is_some() => {
                self.parser.advance_token();
                Ok(Ident {
                    value: w.value.clone(),
                    quote_style: w.quote_style,
                    span: token.span,
                })
            }
            // Non-reserved keywords (`state`, `day`, `kind`...) are fine
            // as names; the parser's own rules decide.
            Token::Word(_) => self
                .parser
                .parse_identifier()
                .map_err(|e| self.sql_error(e, context)),
            other => self.fail(
                &token,
                format!("expected {what}, found {}; {context}", Self::quote(other)),
            ),
        }
    }

    fn uint(&mut self, what: &str, context: &str) -> Result<(u64, Span)> {
        let token = self.peek();
        match &token.token {
            Token::Number(text, _) => match text.parse::<u64>() {
                Ok(n) => {
                    self.parser.advance_token();
                    Ok((n, token.span))
                }
                Err(_) => self.fail(&token, format!("{what} must be a whole number of days")),
            },
            other => self.fail(
                &token,
                format!("expected {what}, found {}; {context}", Self::quote(other)),
            ),
        }
    }

    fn end_of_statement(&mut self, context: &str) -> Result<()> {
        let token = self.peek();
        match token.token {
            Token::SemiColon => {
                self.parser.advance_token();
                Ok(())
            }
            Token::EOF => Ok(()),
            ref other => self.fail(
                &token,
                format!(
                    "unexpected {} where the statement should end with ';'; {context}",
                    Self::quote(other)
                ),
            ),
        }
    }

    fn statement(&mut self) -> Result<Declaration> {
        let token = self.peek();
        if !Self::word_is(&token, "CREATE") {
            return self.fail(
                &token,
                format!("unexpected {}; {SUPPORTED_STATEMENTS}", token.token),
            );
        }
        self.parser.advance_token();
        let kind = self.peek();
        if self.take_word("STREAM") {
            self.stream().map(Declaration::Stream)
        } else if self.take_word("SUMMARY") {
            self.summary().map(Declaration::Summary)
        } else if self.take_word("ATTRIBUTION") {
            self.attribution().map(Declaration::Attribution)
        } else {
            self.fail(
                &kind,
                format!(
                    "CREATE {} is not supported; {SUPPORTED_STATEMENTS}",
                    kind.token
                ),
            )
        }
    }

    fn stream(&mut self) -> Result<StreamDecl> {
        const FORM: &str = "CREATE STREAM name (column TYPE [PATH 'a.b'], ...) WITH (format = 'csv' | 'json' | 'amplab' | 'parquet', header = true | false, time = 'column', delimiter = ',')";
        let name = self.identifier("a stream name", FORM)?;
        self.expect_token(Token::LParen, FORM)?;
        let mut columns = Vec::new();
        loop {
            let column = self.identifier("a column name", FORM)?;
            let ty = self.peek();
            let Token::Word(word) = &ty.token else {
                return self.fail(
                    &ty,
                    format!(
                        "expected a column type, found {}; types are TIMESTAMP, BIGINT, DOUBLE, TEXT, BOOLEAN",
                        Self::quote(&ty.token)
                    ),
                );
            };
            self.parser.advance_token();
            let mut path = None;
            if self.take_word("PATH") {
                let token = self.peek();
                let Token::SingleQuotedString(text) = &token.token else {
                    return self.fail(
                        &token,
                        format!(
                            "expected a quoted path such as 'user.id', found {}",
                            token.token
                        ),
                    );
                };
                self.parser.advance_token();
                path = Some((text.clone(), token.span));
            }
            columns.push(ColumnDecl {
                name: column,
                ty: (word.value.clone(), ty.span),
                path,
            });
            if !self.list_goes_on("a column", FORM)? {
                break;
            }
        }
        let mut options = Vec::new();
        if self.take_word("WITH") {
            self.expect_token(Token::LParen, FORM)?;
            loop {
                let key = self.identifier("an option name", FORM)?;
                self.expect_token(Token::Eq, FORM)?;
                let value = self
                    .parser
                    .parse_value()
                    .map_err(|e| self.sql_error(e, FORM))?;
                options.push((key, value));
                if !self.list_goes_on("an option", FORM)? {
                    break;
                }
            }
        }
        self.end_of_statement(FORM)?;
        Ok(StreamDecl {
            name,
            columns,
            options,
        })
    }

    fn summary(&mut self) -> Result<SummaryDecl> {
        const FORM: &str = "CREATE SUMMARY name AS SELECT expressions FROM stream [WHERE condition] [GROUP BY names or ordinals]";
        let name = self.identifier("a summary name", FORM)?;
        self.expect_word("AS", FORM)?;
        self.expect_word("SELECT", FORM)?;
        let mut items = Vec::new();
        loop {
            let start = self.peek().span.start;
            let item = self
                .parser
                .parse_select_item()
                .map_err(|e| self.sql_error(e, FORM))?;
            let end = self.previous_end().unwrap_or(start);
            items.push((item, Span::new(start, end)));
            if !self.parser.consume_token(&Token::Comma) {
                break;
            }
        }
        self.expect_word("FROM", FORM)?;
        let stream = self.identifier("a stream name", FORM)?;
        let mut filter = None;
        if self.take_word("WHERE") {
            filter = Some(
                self.parser
                    .parse_expr()
                    .map_err(|e| self.sql_error(e, FORM))?,
            );
        }
        let mut group_by = Vec::new();
        let group = self.peek();
        if self.take_word("GROUP") {
            self.expect_word("BY", FORM)?;
            loop {
                group_by.push(
                    self.parser
                        .parse_expr()
                        .map_err(|e| self.sql_error(e, FORM))?,
                );
                if !self.parser.consume_token(&Token::Comma) {
                    break;
                }
            }
        } else if !matches!(group.token, Token::SemiColon | Token::EOF) {
            return self.fail(
                &group,
                format!(
                    "unexpected {}: a summary takes only WHERE and GROUP BY after FROM; {FORM}",
                    Self::quote(&group.token)
                ),
            );
        }
        self.end_of_statement(FORM)?;
        Ok(SummaryDecl {
            name,
            items,
            stream,
            filter,
            group_by,
        })
    }

    fn attribution(&mut self) -> Result<AttributionDecl> {
        const FORM: &str = "CREATE ATTRIBUTION name ON stream BY user_column MODEL last_touch | first_touch | linear | time_decay [HALF LIFE n DAYS] | position_based LOOKBACK n DAYS TOUCH WHERE condition CONVERSION WHERE condition [VALUE expression] [CAMPAIGN expression] [SITE expression]";
        let name = self.identifier("an attribution name", FORM)?;
        self.expect_word("ON", FORM)?;
        let stream = self.identifier("a stream name", FORM)?;
        self.expect_word("BY", FORM)?;
        let user = self.identifier("the user id column", FORM)?;
        self.expect_word("MODEL", FORM)?;
        let token = self.peek();
        let model = match &token.token {
            Token::Word(w) => (w.value.clone(), token.span),
            other => {
                return self.fail(
                    &token,
                    format!("expected a model, found {}; {FORM}", Self::quote(other)),
                );
            }
        };
        self.parser.advance_token();
        let mut half_life_days = None;
        if self.take_word("HALF") {
            self.expect_word("LIFE", FORM)?;
            half_life_days = Some(self.uint("a half-life", FORM)?);
            self.expect_word("DAYS", FORM)?;
        }
        self.expect_word("LOOKBACK", FORM)?;
        let lookback_days = self.uint("a lookback", FORM)?;
        self.expect_word("DAYS", FORM)?;
        self.expect_word("TOUCH", FORM)?;
        self.expect_word("WHERE", FORM)?;
        let touch = Box::new(self.expr(FORM)?);
        self.expect_word("CONVERSION", FORM)?;
        self.expect_word("WHERE", FORM)?;
        let conversion = Box::new(self.expr(FORM)?);
        let (mut value, mut campaign, mut site) = (None, None, None);
        loop {
            let token = self.peek();
            let slot = if Self::word_is(&token, "VALUE") {
                &mut value
            } else if Self::word_is(&token, "CAMPAIGN") {
                &mut campaign
            } else if Self::word_is(&token, "SITE") {
                &mut site
            } else {
                break;
            };
            if slot.is_some() {
                return self.fail(&token, format!("{} is given twice; {FORM}", token.token));
            }
            self.parser.advance_token();
            *slot = Some((Box::new(self.expr(FORM)?), token.span));
        }
        self.end_of_statement(FORM)?;
        Ok(AttributionDecl {
            name,
            stream,
            user,
            model,
            half_life_days,
            lookback_days,
            touch,
            conversion,
            value,
            campaign,
            site,
        })
    }

    fn expr(&mut self, context: &str) -> Result<ast::Expr> {
        self.parser
            .parse_expr()
            .map_err(|e| self.sql_error(e, context))
    }
}

/// Splits sqlparser's "message at Line: L, Column: C" into its parts.
fn split_location(text: &str) -> Option<(String, Location)> {
    let (message, position) = text.rsplit_once(" at Line: ")?;
    let (line, column) = position.split_once(", Column: ")?;
    let location = Location {
        line: line.trim().parse().ok()?,
        column: column.trim().parse().ok()?,
    };
    Some((message.to_owned(), location))
}

/// The span of an AST node, or of `fallback` when sqlparser has none.
pub(crate) fn span_of(node: &impl Spanned, fallback: Span) -> Span {
    let span = node.span();
    if span.start.line == 0 { fallback } else { span }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_split_off() {
        let (message, location) =
            split_location("Expected: an expression, found: ) at Line: 3, Column: 14")
                .expect("has one");
        assert_eq!(message, "Expected: an expression, found: )");
        assert_eq!((location.line, location.column), (3, 14));
        assert!(split_location("no position").is_none());
    }
}
