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
use sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan, Tokenizer, Whitespace};

use crate::error::{Error, Result, snippet};
use crate::{DECLARATION_BYTES_MAX, EXPR_DEPTH_MAX, EXPR_OPERATORS_MAX};

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
        check_nesting(sql, &tokens)?;
        let mut reader = Reader {
            source: sql,
            parser: Parser::new(&dialect)
                // A guard two levels above what the tree may have: the
                // parser spends a level on the whole expression and one on
                // a right operand, which are not levels of the tree.
                // `check_nesting` and `check_depth` refuse what is too
                // deep, with its position, by the tree's own count.
                .with_recursion_limit(EXPR_DEPTH_MAX + 2)
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

/// One condition on its own, as a query writes it (`state = 'CA' AND
/// n > 3`): tokenized, its nesting bounded and parsed as one expression
/// exactly as a `WHERE` inside a declaration is, with errors placed in
/// `text` itself. `form` tells what is expected, for the messages.
pub(crate) fn parse_condition(text: &str, form: &str) -> Result<ast::Expr> {
    if text.len() > DECLARATION_BYTES_MAX {
        return Err(Error::TooLong {
            bytes: text.len(),
            max: DECLARATION_BYTES_MAX,
        });
    }
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| at(text, e.location, 1, e.message.to_lowercase()))?;
    check_nesting(text, &tokens)?;
    let mut reader = Reader {
        source: text,
        parser: Parser::new(&dialect)
            .with_recursion_limit(EXPR_DEPTH_MAX + 2)
            .with_tokens_with_locations(tokens.clone()),
        tokens: &tokens,
    };
    if reader.peek().token == Token::EOF {
        let end = reader.peek();
        return reader.fail(&end, format!("expected a condition; {form}"));
    }
    let e = reader.expr(form)?;
    let next = reader.peek();
    if next.token != Token::EOF {
        return reader.fail(
            &next,
            format!(
                "unexpected {} after the condition; {form}",
                Reader::quote(&next.token)
            ),
        );
    }
    Ok(e)
}

/// The message of every refusal for depth, wherever it is found.
fn too_deep() -> String {
    format!("expression nested more than {EXPR_DEPTH_MAX} levels deep")
}

/// Refuses, from the tokens alone and before sqlparser builds any tree,
/// nesting that surely passes [`EXPR_DEPTH_MAX`] and chains whose tree
/// could pass [`EXPR_OPERATORS_MAX`] levels.
///
/// Two counts are kept as the tokens go, each in constant time a token:
///
/// - A lower bound on the depth: the open parentheses (each is a call, a
///   parenthesised expression or a list, one level of the tree) and the
///   runs of prefix operators (`NOT NOT`, `- -`, also before a call:
///   `NOT coalesce(`) that enclose the current token. Past
///   [`EXPR_DEPTH_MAX`] the text is refused right at the level
///   too many. sqlparser would refuse it there too, by its recursion
///   limit, but it reports a prefix keyword that passes the limit as an
///   identifier and then a misleading "unexpected NOT" after it.
/// - An upper bound: sqlparser's recursion limit does not see chains
///   (`a + b + ...`, `x IS NULL IS NULL ...`), which it builds in a loop,
///   one tree level per operator; a 16 KB chain makes a tree 8,000 levels
///   deep that every recursive walk, and sqlparser's own drop when a later
///   token is wrong, would follow down the stack. Each node of a tree owns
///   at least one token that is not an operand (its operator, keyword or
///   parenthesis), and a node's ancestors own tokens at its level of
///   parentheses or the enclosing ones, between the same commas. So the
///   count over the open levels of such tokens since the last comma, plus
///   the deepest group closed since, plus one per open parenthesis, is at
///   least the depth of any tree sqlparser can build from the tokens read
///   so far. It over-counts (`a = 1 AND b = 2` counts three, for two
///   levels), so its limit is the looser [`EXPR_OPERATORS_MAX`], and
///   [`check_depth`] measures the tree sqlparser returns against
///   [`EXPR_DEPTH_MAX`].
fn check_nesting(source: &str, tokens: &[TokenWithSpan]) -> Result<()> {
    /// One open level of parentheses, within its current comma-separated
    /// segment.
    #[derive(Default)]
    struct Level {
        /// Tokens that are not operands, since the segment began.
        operators: usize,
        /// One more than the deepest bound of a group closed in it.
        groups: usize,
        /// The largest bound of this level's finished segments.
        finished: usize,
        /// The prefix operators just before the current token.
        prefixes: usize,
        /// The enclosing level's `prefixes` when this one opened.
        prefixes_outside: usize,
        /// The prefix run a word ended, taken up again if the word is a
        /// call (`NOT coalesce(`): the operators enclose the call.
        prefixes_before_word: usize,
    }
    let mut levels = vec![Level::default()];
    // The sum over `levels` of `operators + groups`, plus one per open
    // parenthesis.
    let mut upper: usize = 0;
    // The sum over `levels` of `prefixes + prefixes_outside`, plus one per
    // open parenthesis.
    let mut lower: usize = 0;
    let mut previous: Option<&Token> = None;
    for token in tokens {
        let nested = levels.len() > 1;
        let level = levels.last_mut().expect("the outermost level stays");
        match &token.token {
            Token::Whitespace(_) => continue,
            Token::LParen | Token::LBracket | Token::LBrace => {
                if matches!(previous, Some(Token::Word(_))) {
                    let before_word = std::mem::take(&mut level.prefixes_before_word);
                    level.prefixes += before_word;
                    lower += before_word;
                }
                let outside = std::mem::take(&mut level.prefixes);
                levels.push(Level {
                    prefixes_outside: outside,
                    ..Level::default()
                });
                upper += 1;
                lower += 1;
            }
            Token::RParen | Token::RBracket | Token::RBrace if nested => {
                let closed = levels.pop().expect("more than one level");
                let inner = closed.finished.max(closed.operators + closed.groups);
                upper -= closed.operators + closed.groups + 1;
                lower -= closed.prefixes + closed.prefixes_outside + 1;
                let level = levels.last_mut().expect("the outermost level stays");
                let groups = level.groups.max(inner + 1);
                upper += groups - level.groups;
                level.groups = groups;
            }
            Token::Comma | Token::SemiColon => {
                level.finished = level.finished.max(level.operators + level.groups);
                upper -= level.operators + level.groups;
                lower -= level.prefixes;
                level.operators = 0;
                level.groups = 0;
                level.prefixes = 0;
            }
            // Operands: leaves of the tree, which own no level.
            Token::Word(w) if w.keyword == Keyword::NoKeyword => {
                level.prefixes_before_word = std::mem::take(&mut level.prefixes);
                lower -= level.prefixes_before_word;
            }
            Token::Number(..) | Token::SingleQuotedString(_) => {
                lower -= std::mem::take(&mut level.prefixes);
            }
            other => {
                level.operators += 1;
                upper += 1;
                // A minus or plus sign, prefix or infix, and a NOT that
                // cannot be infix (`x NOT IN`, `IS NOT`) are each one
                // level above whatever follows them; other operators end
                // the run.
                let prefix = match other {
                    Token::Minus | Token::Plus => true,
                    Token::Word(w) if w.keyword == Keyword::NOT => {
                        level.prefixes > 0
                            || matches!(
                                previous,
                                None | Some(Token::LParen | Token::Comma | Token::SemiColon)
                            )
                            || matches!(
                                previous,
                                Some(Token::Word(p)) if matches!(p.keyword, Keyword::AND | Keyword::OR | Keyword::WHERE | Keyword::SELECT)
                            )
                    }
                    _ => false,
                };
                if prefix {
                    level.prefixes += 1;
                    lower += 1;
                    level.prefixes_before_word = 0;
                } else {
                    let ended = std::mem::take(&mut level.prefixes);
                    lower -= ended;
                    if matches!(other, Token::Word(_)) {
                        level.prefixes_before_word = ended;
                    }
                }
            }
        }
        previous = Some(&token.token);
        debug_assert_eq!(
            upper,
            levels.iter().map(|l| l.operators + l.groups).sum::<usize>() + levels.len() - 1
        );
        debug_assert_eq!(
            lower,
            levels
                .iter()
                .map(|l| l.prefixes + l.prefixes_outside)
                .sum::<usize>()
                + levels.len()
                - 1
        );
        if lower > EXPR_DEPTH_MAX {
            return Err(at_span(source, token.span, too_deep()));
        }
        if upper > EXPR_OPERATORS_MAX {
            return Err(at_span(
                source,
                token.span,
                format!(
                    "{}: it chains more than {EXPR_OPERATORS_MAX} operators (EXPR_OPERATORS_MAX), and each operator of a chain such as a + b + c is one level; split it, or list values with IN (...)",
                    too_deep()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses an expression sqlparser returned whose tree nests more than
/// [`EXPR_DEPTH_MAX`] levels (operators, calls and parentheses; operands
/// are not levels), pointing at the first operand under the level too
/// many, or at `start`, where the expression begins, if it has none.
///
/// The tree is walked with a stack of its own, not by recursion, so the
/// check is safe on the trees it refuses; trees it accepts are then shallow
/// enough for the recursive walks that follow (spans, compiling, printing,
/// evaluating, dropping). Nodes this dialect does not support count as
/// leaves here: the compiler refuses them, and [`check_nesting`]
/// has already bounded what lies under them.
pub(crate) fn check_depth(source: &str, root: &ast::Expr, start: Span) -> Result<()> {
    use ast::Expr as E;
    let refuse = |span: Span| {
        Err(at_span(
            source,
            span,
            format!(
                "{} (each operator of a chain such as a + b + c is one level); split it, or list values with IN (...)",
                too_deep()
            ),
        ))
    };
    let mut stack: Vec<(&ast::Expr, usize)> = vec![(root, 1)];
    let mut too_deep = false;
    while let Some((e, depth)) = stack.pop() {
        // Children go on the stack last first, so the walk visits them in
        // the order written and the first operand found lies leftmost.
        let mut children: Vec<&ast::Expr> = Vec::new();
        let mut position = None;
        match e {
            // When its recursion limit stops it inside a prefix keyword's
            // operand (`NOT NOT ... NOT v = 1`), sqlparser takes the keyword
            // for a column name and carries on, so the error that follows
            // would name the next token. No such name stands that deep in a
            // tree sqlparser parsed whole: each level costs it at most two.
            E::Identifier(ident)
                if ident.quote_style.is_none()
                    && depth > EXPR_DEPTH_MAX / 2
                    && ["NOT", "CASE", "CAST", "EXISTS"]
                        .iter()
                        .any(|k| ident.value.eq_ignore_ascii_case(k)) =>
            {
                return refuse(ident.span);
            }
            E::Identifier(ident) => position = Some(ident.span),
            E::CompoundIdentifier(parts) => position = parts.first().map(|p| p.span),
            E::Value(v) => position = Some(v.span),
            E::Nested(inner)
            | E::UnaryOp { expr: inner, .. }
            | E::IsNull(inner)
            | E::IsNotNull(inner)
            | E::IsTrue(inner)
            | E::IsNotTrue(inner)
            | E::IsFalse(inner)
            | E::IsNotFalse(inner)
            | E::IsUnknown(inner)
            | E::IsNotUnknown(inner)
            | E::Cast { expr: inner, .. }
            | E::Collate { expr: inner, .. }
            | E::CompoundFieldAccess { root: inner, .. } => children.push(inner),
            E::BinaryOp { left, right, .. }
            | E::IsDistinctFrom(left, right)
            | E::IsNotDistinctFrom(left, right)
            | E::AtTimeZone {
                timestamp: left,
                time_zone: right,
            }
            | E::Like {
                expr: left,
                pattern: right,
                ..
            }
            | E::ILike {
                expr: left,
                pattern: right,
                ..
            } => children.extend([&**left, &**right]),
            E::Between {
                expr, low, high, ..
            } => children.extend([&**expr, &**low, &**high]),
            E::InList { expr, list, .. } => {
                children.push(expr);
                children.extend(list);
            }
            E::Substring {
                expr,
                substring_from,
                substring_for,
                ..
            } => {
                children.push(expr);
                children.extend(substring_from.as_deref());
                children.extend(substring_for.as_deref());
            }
            E::Tuple(list) => children.extend(list),
            E::Function(f) => {
                position = f.name.0.first().and_then(|part| match part {
                    ast::ObjectNamePart::Identifier(ident) => Some(ident.span),
                    _ => None,
                });
                if let ast::FunctionArguments::List(list) = &f.args {
                    for arg in &list.args {
                        let (ast::FunctionArg::Unnamed(arg)
                        | ast::FunctionArg::Named { arg, .. }
                        | ast::FunctionArg::ExprNamed { arg, .. }) = arg;
                        if let ast::FunctionArgExpr::Expr(arg) = arg {
                            children.push(arg);
                        }
                    }
                }
            }
            _ => {}
        }
        if !children.is_empty() && depth > EXPR_DEPTH_MAX {
            too_deep = true;
        }
        if too_deep
            && children.is_empty()
            && let Some(span) = position.filter(|s| s.start.line > 0)
        {
            return refuse(span);
        }
        stack.extend(children.into_iter().rev().map(|child| (child, depth + 1)));
    }
    if too_deep {
        return refuse(start);
    }
    Ok(())
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
        if let Some(comment) = self.swallowed_operand(token.span.start) {
            return Err(comment);
        }
        if token.span.start.line == 0 {
            return Err(at(self.source, self.end_of_text(), 1, message));
        }
        Err(at_span(self.source, token.span, message))
    }

    /// Where the text ends: the end of its last token that is not
    /// whitespace. The end of the input has no position of its own, and an
    /// error there belongs here, not at the first character.
    fn end_of_text(&self) -> Location {
        self.tokens
            .iter()
            .rev()
            .find(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
            .map_or(Location { line: 1, column: 1 }, |t| t.span.end)
    }

    /// An error at the real problem when the statement holding `location`
    /// (line 0: the end of the input) has an operator followed at once by a `--` comment (`v = ----1`):
    /// the comment swallows the operand the writer meant, and the error the
    /// parser then finds, later and elsewhere, would mislead.
    fn swallowed_operand(&self, location: Location) -> Option<Error> {
        let before = self
            .tokens
            .iter()
            .take_while(|t| location.line == 0 || t.span.start < location);
        let mut operator: Option<&TokenWithSpan> = None;
        let mut found = None;
        for token in before {
            match &token.token {
                Token::SemiColon => found = None,
                Token::Whitespace(Whitespace::SingleLineComment { comment, prefix })
                    if prefix == "--" =>
                {
                    let glued = comment
                        .chars()
                        .next()
                        .is_some_and(|c| c == '-' || c == '(' || c.is_alphanumeric());
                    if let Some(operator) = operator.filter(|_| glued) {
                        found.get_or_insert((operator.clone(), token.span));
                    }
                }
                Token::Whitespace(_) => continue,
                _ => {}
            }
            operator = matches!(
                token.token,
                Token::Eq
                    | Token::Neq
                    | Token::Lt
                    | Token::Gt
                    | Token::LtEq
                    | Token::GtEq
                    | Token::Plus
                    | Token::Minus
                    | Token::Mul
                    | Token::Div
                    | Token::Mod
            )
            .then_some(token);
        }
        let (operator, comment) = found?;
        Some(at(
            self.source,
            comment.start,
            2,
            format!(
                "'--' starts a comment that runs to the end of the line, so the operand after '{}' is not read; write minus signs apart (- -1) or with parentheses (-(-1))",
                operator.token
            ),
        ))
    }

    /// Turns a sqlparser error into ours. Its messages end with " at Line:
    /// L, Column: C"; the token that starts there gives the caret's width.
    fn sql_error(&self, error: ParserError, context: &str) -> Error {
        let (text, location) = match error {
            ParserError::RecursionLimitExceeded => (too_deep(), self.peek().span.start),
            ParserError::TokenizerError(text) | ParserError::ParserError(text) => {
                split_location(&text).unwrap_or((text, self.peek().span.start))
            }
        };
        if let Some(comment) = self.swallowed_operand(location) {
            return comment;
        }
        let location = if location.line == 0 {
            self.end_of_text()
        } else {
            location
        };
        let width = self
            .tokens
            .iter()
            .find(|t| t.span.start == location)
            .filter(|t| t.span.start.line == t.span.end.line)
            .map_or(1, |t| t.span.end.column.saturating_sub(t.span.start.column));
        let text = text
            .replace("Expected: ", "expected ")
            .replace(", found: ", ", found ")
            .replace("found EOF", "found the end of the input");
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
            let first = self.peek().span;
            let item = self
                .parser
                .parse_select_item()
                .map_err(|e| self.sql_error(e, FORM))?;
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = &item {
                check_depth(self.source, e, first)?;
            }
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
            filter = Some(self.expr(FORM)?);
        }
        let mut group_by = Vec::new();
        let group = self.peek();
        if self.take_word("GROUP") {
            self.expect_word("BY", FORM)?;
            loop {
                group_by.push(self.expr(FORM)?);
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

    /// An expression, its depth checked before anything walks it.
    fn expr(&mut self, context: &str) -> Result<ast::Expr> {
        let first = self.peek().span;
        let e = self
            .parser
            .parse_expr()
            .map_err(|e| self.sql_error(e, context))?;
        check_depth(self.source, &e, first)?;
        Ok(e)
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

/// One `SELECT` query as a client sends it: tokenized, its nesting
/// bounded as a declaration's is ([`check_nesting`], then
/// [`check_depth`] on every expression the query holds), and parsed by
/// sqlparser's PostgreSQL dialect (so `x::timestamptz` and `"quoted"`
/// names read as psql and Grafana write them). One statement; a trailing
/// `;` is allowed.
pub(crate) fn parse_query(text: &str) -> Result<ast::Query> {
    use sqlparser::dialect::PostgreSqlDialect;
    if text.len() > crate::QUERY_BYTES_MAX {
        return Err(Error::TooLong {
            bytes: text.len(),
            max: crate::QUERY_BYTES_MAX,
        });
    }
    let dialect = PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, text)
        .tokenize_with_location()
        .map_err(|e| at(text, e.location, 1, e.message.to_lowercase()))?;
    check_nesting(text, &tokens)?;
    let mut parser = Parser::new(&dialect)
        .with_recursion_limit(EXPR_DEPTH_MAX + 2)
        .with_tokens_with_locations(tokens.clone());
    while parser.consume_token(&Token::SemiColon) {}
    if parser.peek_token().token == Token::EOF {
        return Err(at(
            text,
            Location::new(1, 1),
            1,
            "expected a SELECT query".into(),
        ));
    }
    let start = parser.peek_token();
    let statement = parser
        .parse_statement()
        .map_err(|e| parser_error(text, &e))?;
    while parser.consume_token(&Token::SemiColon) {}
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(at_span(
            text,
            next.span,
            format!(
                "unexpected {} after the query; send one query at a time",
                next.token
            ),
        ));
    }
    let ast::Statement::Query(query) = statement else {
        return Err(at_span(
            text,
            start.span,
            "only SELECT queries are answered here; summaries are declared in the server's schema"
                .into(),
        ));
    };
    let mut depth = Ok(());
    visit_query_exprs(&query, &mut |e| {
        if depth.is_ok() {
            depth = check_depth(text, e, span_of(e, start.span));
        }
    });
    depth?;
    Ok(*query)
}

/// Calls `visit` on each expression a query holds at its top level: the
/// select items, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT and OFFSET.
fn visit_query_exprs(query: &ast::Query, visit: &mut impl FnMut(&ast::Expr)) {
    if let ast::SetExpr::Select(select) = &*query.body {
        for item in &select.projection {
            match item {
                ast::SelectItem::UnnamedExpr(e)
                | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                    visit(e);
                }
                _ => {}
            }
        }
        select.selection.iter().for_each(&mut *visit);
        if let ast::GroupByExpr::Expressions(list, _) = &select.group_by {
            list.iter().for_each(&mut *visit);
        }
        select.having.iter().for_each(&mut *visit);
    }
    if let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(list),
        ..
    }) = &query.order_by
    {
        for item in list {
            visit(&item.expr);
        }
    }
    if let Some(ast::LimitClause::LimitOffset { limit, offset, .. }) = &query.limit_clause {
        limit.iter().for_each(&mut *visit);
        if let Some(offset) = offset {
            visit(&offset.value);
        }
    }
}

/// sqlparser's error, placed in `text` when it names a position.
fn parser_error(text: &str, error: &sqlparser::parser::ParserError) -> Error {
    let message = error.to_string();
    let message = message
        .strip_prefix("sql parser error: ")
        .unwrap_or(&message)
        .to_owned();
    // "... at Line: 1, Column: 8"
    if let Some(at_index) = message.rfind(" at Line: ") {
        let place = &message[at_index + " at Line: ".len()..];
        let mut parts = place.split(", Column: ");
        if let (Some(line), Some(column)) = (parts.next(), parts.next())
            && let (Ok(line), Ok(column)) = (line.trim().parse(), column.trim().parse())
        {
            return at(
                text,
                Location::new(line, column),
                1,
                message[..at_index].to_lowercase(),
            );
        }
    }
    at(text, Location::new(1, 1), 1, message.to_lowercase())
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
