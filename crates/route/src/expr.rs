//! Compiled expressions: a small typed tree, evaluated per record.
//!
//! A tree, not bytecode: the trees the dialect produces are a handful of
//! nodes (a comparison, a `date_trunc`, a column), so walking boxes costs
//! little next to parsing the field text, and a tree keeps the evaluator a
//! plain `match` that the naive interpreter in the tests can mirror line by
//! line. Depth is bounded by [`crate::EXPR_DEPTH_MAX`], which the parser
//! checks on the tree sqlparser returns (long chains such as `a + b + ...`
//! included) before anything walks it, and the compiler asserts on the
//! tree it makes; so the recursive walks (evaluating, cloning, comparing,
//! dropping) cannot overflow.
//!
//! Values borrow: a column's text is a slice of the record, `substr` of it
//! a narrower slice, and only `lower`/`upper` write new bytes, into the
//! caller's [`Scratch`] buffer. While evaluating, text that lives in the
//! scratch buffer is held as a byte range (`Text::Scratch`), because the
//! buffer may still grow; the range becomes a slice once the whole tree is
//! done and the buffer is only read. After the buffer has grown to the
//! largest record seen, evaluation allocates nothing.
//!
//! Semantics follow SQL's three-valued logic: a comparison, arithmetic or
//! function with a NULL operand is NULL (except `coalesce`, `IS NULL`, and
//! `AND`/`OR` where the other side decides); a filter keeps a record only
//! when it evaluates to TRUE. Integers are checked (overflow and division by
//! zero are [`EvalError`]s); floats follow IEEE 754, and a comparison with
//! NaN is false (`<>` true). An integer compared with a float is compared as
//! `f64`.

use std::cmp::Ordering;

use cardinal_event::bytes::bytes_eq;
use cardinal_event::{BucketWidth, ColumnType, Record, TimeUnit, Timestamp, Value};

use crate::error::EvalError;

/// The static type of an expression, checked when a declaration compiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Type {
    /// Only the literal `NULL` has this type; it fits anywhere.
    Null,
    /// `TRUE` / `FALSE`.
    Bool,
    /// A signed 64-bit integer.
    Int,
    /// A 64-bit float.
    Float,
    /// Bytes, usually UTF-8.
    Text,
    /// A point in time.
    Time,
}

impl Type {
    /// The type of a declared column.
    pub fn of_column(ty: ColumnType) -> Self {
        match ty {
            ColumnType::Timestamp => Type::Time,
            ColumnType::BigInt => Type::Int,
            ColumnType::Double => Type::Float,
            ColumnType::Text => Type::Text,
            ColumnType::Bool => Type::Bool,
        }
    }

    /// Whether this is `Int` or `Float` (or `Null`, which fits).
    pub fn is_numeric(self) -> bool {
        matches!(self, Type::Int | Type::Float | Type::Null)
    }

    /// The SQL name, for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Type::Null => "NULL",
            Type::Bool => "BOOLEAN",
            Type::Int => "BIGINT",
            Type::Float => "DOUBLE",
            Type::Text => "TEXT",
            Type::Time => "TIMESTAMP",
        }
    }
}

/// A constant, owned by the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// An integer literal.
    Int(i64),
    /// A literal with a fraction or exponent.
    Float(f64),
    /// A quoted string.
    Text(Box<[u8]>),
    /// A quoted string compared with a timestamp, read as one at compile
    /// time.
    Time(Timestamp),
}

impl Literal {
    fn value(&self) -> Value<'_> {
        match self {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Int(i) => Value::Int(*i),
            Literal::Float(f) => Value::Float(*f),
            Literal::Text(t) => Value::Text(t),
            Literal::Time(t) => Value::Time(*t),
        }
    }
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `=`
    Eq,
    /// `<>` or `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

/// Arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integer division truncates toward zero, as in PostgreSQL)
    Div,
    /// `%`
    Rem,
}

/// `lower` or `upper`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaseOp {
    /// ASCII lower case.
    Lower,
    /// ASCII upper case.
    Upper,
}

/// A function of one number or instant (`floor(x)`, `extract(epoch from
/// t)`, `to_timestamp(s)`): what Grafana's time macros expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathOp {
    /// `floor(x)`: an integer stays as it is.
    Floor,
    /// `ceil(x)` / `ceiling(x)`.
    Ceil,
    /// `round(x)`: half away from zero, as PostgreSQL rounds doubles.
    Round,
    /// `abs(x)`.
    Abs,
    /// `extract(epoch from t)`: an instant as seconds since the Unix
    /// epoch (a DOUBLE; milliseconds are its fraction).
    Epoch,
    /// `to_timestamp(s)`: seconds since the Unix epoch (fraction kept to
    /// the millisecond, truncated toward minus infinity) as an instant.
    ToTimestamp,
}

/// A compiled, type-checked expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// Field `index` of the record, read as `ty`.
    Column {
        /// The column's index in the stream schema.
        index: usize,
        /// Its declared type.
        ty: ColumnType,
    },
    /// A constant.
    Literal(Literal),
    /// `NOT e`.
    Not(Box<Expr>),
    /// `a AND b`.
    And(Box<Expr>, Box<Expr>),
    /// `a OR b`.
    Or(Box<Expr>, Box<Expr>),
    /// `a op b`, giving a boolean.
    Compare(CompareOp, Box<Expr>, Box<Expr>),
    /// `a op b` over numbers.
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    /// `-e`.
    Neg(Box<Expr>),
    /// `e IS NULL` (`negated`: `IS NOT NULL`).
    IsNull {
        /// The tested expression.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `e [NOT] IN (list)`.
    InList {
        /// The tested expression.
        expr: Box<Expr>,
        /// The candidates.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `substr(text, start [, length])`, counting characters from 1.
    Substr {
        /// The text.
        text: Box<Expr>,
        /// The first character, 1-based; may be below 1 as in PostgreSQL.
        start: Box<Expr>,
        /// How many characters, or to the end.
        length: Option<Box<Expr>>,
    },
    /// `lower(text)` / `upper(text)` (ASCII letters only).
    Case(CaseOp, Box<Expr>),
    /// `date_trunc('unit', time)`.
    DateTrunc(TimeUnit, Box<Expr>),
    /// `time_bucket('5 minutes', time)`: the start of the fixed-width
    /// bucket, aligned to the Unix epoch, that holds the time
    /// ([`BucketWidth`]). Over a finer bucket's start it gives the coarser
    /// bucket that holds that finer one whenever the width is a multiple
    /// of the finer width.
    TimeBucket {
        /// The width.
        width: BucketWidth,
        /// The time.
        expr: Box<Expr>,
    },
    /// `coalesce(a, b, ...)`: the first operand that is not NULL.
    Coalesce(Vec<Expr>),
    /// A function of one number or instant ([`MathOp`]).
    Math(MathOp, Box<Expr>),
}

/// The per-record buffer that `lower` and `upper` write into. Reuse one per
/// worker: it keeps its capacity, so evaluation stops allocating once it
/// has seen the longest text.
#[derive(Debug, Default)]
pub struct Scratch {
    bytes: Vec<u8>,
    /// The date of the last timestamp routing read, so that records of
    /// one day parse it once ([`cardinal_event::DateMemo`]).
    pub(crate) date: cardinal_event::DateMemo,
}

impl Scratch {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes it currently holds (capacity, not contents, is what
    /// matters between records).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
    }

    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Text while a tree is being evaluated: borrowed from the record or the
/// plan, or a range of the scratch buffer (which may still grow).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Text<'a> {
    Borrowed(&'a [u8]),
    Scratch(u32, u32),
}

/// A value during evaluation. See [`Text`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Held<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(Text<'a>),
    Time(Timestamp),
}

impl<'a> Held<'a> {
    fn from_value(value: Value<'a>) -> Self {
        match value {
            Value::Null => Held::Null,
            Value::Bool(b) => Held::Bool(b),
            Value::Int(i) => Held::Int(i),
            Value::Float(f) => Held::Float(f),
            Value::Text(t) => Held::Text(Text::Borrowed(t)),
            Value::Time(t) => Held::Time(t),
        }
    }

    /// The value, reading scratch ranges from `scratch`.
    pub(crate) fn resolve<'s>(self, scratch: &'s [u8]) -> Value<'s>
    where
        'a: 's,
    {
        match self {
            Held::Null => Value::Null,
            Held::Bool(b) => Value::Bool(b),
            Held::Int(i) => Value::Int(i),
            Held::Float(f) => Value::Float(f),
            Held::Text(t) => Value::Text(text_bytes(t, scratch)),
            Held::Time(t) => Value::Time(t),
        }
    }
}

fn text_bytes<'s>(text: Text<'s>, scratch: &'s [u8]) -> &'s [u8] {
    match text {
        Text::Borrowed(bytes) => bytes,
        Text::Scratch(start, end) => &scratch[start as usize..end as usize],
    }
}

impl Expr {
    /// Whether this expression's values are instants: a TIMESTAMP column
    /// (DATE columns are read as one), `date_trunc`, a time literal, or a
    /// `coalesce` whose operands are (the compiler gives them one type).
    pub fn is_time(&self) -> bool {
        match self {
            Expr::Column { ty, .. } => *ty == ColumnType::Timestamp,
            Expr::Literal(literal) => matches!(literal, Literal::Time(_)),
            Expr::DateTrunc(..) | Expr::Math(MathOp::ToTimestamp, _) | Expr::TimeBucket { .. } => {
                true
            }
            Expr::Coalesce(list) => list.iter().any(Expr::is_time),
            _ => false,
        }
    }

    /// Evaluates this expression over `record`. Text results borrow from
    /// the record, the plan, or `scratch` (which is cleared first).
    ///
    /// A field whose bytes are not its declared type is an
    /// [`EvalError::Field`], never a panic; so are integer overflow and
    /// integer division by zero.
    ///
    /// ```
    /// use cardinal_event::Value;
    /// use cardinal_route::{Plan, Scratch};
    ///
    /// let plan = Plan::compile(
    ///     "CREATE STREAM s (name TEXT, n BIGINT) WITH (format = 'csv');
    ///      CREATE SUMMARY t AS SELECT upper(substr(name, 1, 2)) AS k, count(*) FROM s GROUP BY k;",
    /// )
    /// .unwrap();
    /// let key = &plan.summaries[0].dimensions[0];
    /// let mut scratch = Scratch::new();
    /// let row: &[&str] = &["oakland", "3"];
    /// assert_eq!(key.eval(row, &mut scratch), Ok(Value::Text(b"OA")));
    /// ```
    pub fn eval<'a, R: Record + ?Sized>(
        &'a self,
        record: &'a R,
        scratch: &'a mut Scratch,
    ) -> Result<Value<'a>, EvalError> {
        scratch.clear();
        let held = self.eval_held(record, &mut scratch.bytes)?;
        Ok(held.resolve(&scratch.bytes))
    }

    /// Evaluates without clearing `scratch`: several results may hold
    /// ranges of the same buffer until the caller clears it.
    pub(crate) fn eval_held<'a, R: Record + ?Sized>(
        &'a self,
        record: &'a R,
        scratch: &mut Vec<u8>,
    ) -> Result<Held<'a>, EvalError> {
        match self {
            Expr::Column { index, ty } => {
                record
                    .value(*index, *ty)
                    .map(Held::from_value)
                    .map_err(|reason| EvalError::Field {
                        column: *index,
                        reason,
                    })
            }
            Expr::Literal(literal) => Ok(Held::from_value(literal.value())),
            Expr::Not(e) => Ok(match e.eval_held(record, scratch)? {
                Held::Bool(b) => Held::Bool(!b),
                _ => Held::Null,
            }),
            Expr::And(a, b) => {
                let left = truth(a.eval_held(record, scratch)?);
                if left == Some(false) {
                    return Ok(Held::Bool(false));
                }
                let right = truth(b.eval_held(record, scratch)?);
                Ok(match (left, right) {
                    (_, Some(false)) => Held::Bool(false),
                    (Some(true), Some(true)) => Held::Bool(true),
                    _ => Held::Null,
                })
            }
            Expr::Or(a, b) => {
                let left = truth(a.eval_held(record, scratch)?);
                if left == Some(true) {
                    return Ok(Held::Bool(true));
                }
                let right = truth(b.eval_held(record, scratch)?);
                Ok(match (left, right) {
                    (_, Some(true)) => Held::Bool(true),
                    (Some(false), Some(false)) => Held::Bool(false),
                    _ => Held::Null,
                })
            }
            Expr::Compare(op, a, b) => {
                let left = a.eval_held(record, scratch)?;
                let right = b.eval_held(record, scratch)?;
                Ok(match compare(left, right, scratch) {
                    Compared::Null => Held::Null,
                    Compared::Unordered => Held::Bool(*op == CompareOp::NotEq),
                    Compared::Order(order) => Held::Bool(op.holds(order)),
                })
            }
            Expr::Arith(op, a, b) => {
                let left = a.eval_held(record, scratch)?;
                let right = b.eval_held(record, scratch)?;
                arith(*op, left, right)
            }
            Expr::Neg(e) => match e.eval_held(record, scratch)? {
                Held::Int(i) => i.checked_neg().map(Held::Int).ok_or(EvalError::Overflow),
                Held::Float(f) => Ok(Held::Float(-f)),
                _ => Ok(Held::Null),
            },
            Expr::IsNull { expr, negated } => {
                let is_null = matches!(expr.eval_held(record, scratch)?, Held::Null);
                Ok(Held::Bool(is_null != *negated))
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                let needle = expr.eval_held(record, scratch)?;
                if matches!(needle, Held::Null) {
                    return Ok(Held::Null);
                }
                let mut saw_null = false;
                for candidate in list {
                    let candidate = candidate.eval_held(record, scratch)?;
                    match compare(needle, candidate, scratch) {
                        Compared::Order(Ordering::Equal) => return Ok(Held::Bool(!*negated)),
                        Compared::Null => saw_null = true,
                        _ => {}
                    }
                }
                Ok(if saw_null {
                    Held::Null
                } else {
                    Held::Bool(*negated)
                })
            }
            Expr::Substr {
                text,
                start,
                length,
            } => {
                // Every operand is evaluated (and may fail) before NULLs
                // decide, as for the other operators.
                let text = text.eval_held(record, scratch)?;
                let start = start.eval_held(record, scratch)?;
                let length = match length {
                    None => None,
                    Some(length) => Some(length.eval_held(record, scratch)?),
                };
                let (Held::Text(text), Held::Int(start)) = (text, start) else {
                    return Ok(Held::Null);
                };
                let length = match length {
                    None => None,
                    Some(Held::Int(length)) => Some(length),
                    Some(_) => return Ok(Held::Null),
                };
                let bytes = text_bytes(text, scratch);
                let (from, to) = substr_range(bytes, start, length);
                Ok(Held::Text(match text {
                    Text::Borrowed(bytes) => Text::Borrowed(&bytes[from..to]),
                    Text::Scratch(base, _) => Text::Scratch(offset(base, from), offset(base, to)),
                }))
            }
            Expr::Case(op, e) => {
                let Held::Text(text) = e.eval_held(record, scratch)? else {
                    return Ok(Held::Null);
                };
                let start = scratch.len();
                match text {
                    Text::Borrowed(bytes) => scratch.extend_from_slice(bytes),
                    Text::Scratch(from, to) => {
                        scratch.extend_from_within(from as usize..to as usize);
                    }
                }
                let written = &mut scratch[start..];
                if written.is_ascii() {
                    match op {
                        CaseOp::Lower => written.make_ascii_lowercase(),
                        CaseOp::Upper => written.make_ascii_uppercase(),
                    }
                } else {
                    change_case(*op, scratch, start);
                }
                Ok(Held::Text(Text::Scratch(
                    scratch_offset(start),
                    scratch_offset(scratch.len()),
                )))
            }
            Expr::DateTrunc(unit, e) => Ok(match e.eval_held(record, scratch)? {
                Held::Time(t) => Held::Time(t.truncate(*unit)),
                _ => Held::Null,
            }),
            Expr::TimeBucket { width, expr } => Ok(match expr.eval_held(record, scratch)? {
                Held::Time(t) => Held::Time(t.truncate(TimeUnit::Fixed(*width))),
                _ => Held::Null,
            }),
            Expr::Coalesce(list) => {
                for e in list {
                    let value = e.eval_held(record, scratch)?;
                    if !matches!(value, Held::Null) {
                        return Ok(value);
                    }
                }
                Ok(Held::Null)
            }
            Expr::Math(op, e) => math(*op, e.eval_held(record, scratch)?),
        }
    }

    /// The truth of a BOOLEAN expression over `record`: `Some(true)`,
    /// `Some(false)`, or `None` for NULL; what [`Expr::eval_held`] gives,
    /// read as a truth value (any other value is `None`), with the same
    /// errors. For filters, which need nothing more: the answer fits two
    /// registers where a [`Held`] in a `Result` goes through memory at
    /// every `?`, and a text column compared with text literals (`kind IN
    /// ('a', 'b')`, `state <> 'CA'`) is read and compared without a
    /// [`Held`] at all.
    pub(crate) fn truth<R: Record + ?Sized>(
        &self,
        record: &R,
        scratch: &mut Vec<u8>,
    ) -> Result<Option<bool>, EvalError> {
        match self {
            Expr::Not(e) => Ok(e.truth(record, scratch)?.map(|b| !b)),
            Expr::And(a, b) => {
                let left = a.truth(record, scratch)?;
                if left == Some(false) {
                    return Ok(Some(false));
                }
                Ok(match (left, b.truth(record, scratch)?) {
                    (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                })
            }
            Expr::Or(a, b) => {
                let left = a.truth(record, scratch)?;
                if left == Some(true) {
                    return Ok(Some(true));
                }
                Ok(match (left, b.truth(record, scratch)?) {
                    (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                })
            }
            Expr::Compare(op, a, b) => {
                if let (Some(index), Expr::Literal(Literal::Text(literal))) = (text_column(a), &**b)
                {
                    let Some(field) = text_field(record, index)? else {
                        return Ok(None);
                    };
                    let order = match op {
                        CompareOp::Eq => return Ok(Some(bytes_eq(field, literal))),
                        CompareOp::NotEq => return Ok(Some(!bytes_eq(field, literal))),
                        _ => field.cmp(literal),
                    };
                    return Ok(Some(op.holds(order)));
                }
                let (left, right) = match (&**a, &**b) {
                    // A column against a literal (`revenue > 0.01`): read
                    // as eval_held reads them, without its recursion.
                    (Expr::Column { index, ty }, Expr::Literal(literal)) => (
                        record
                            .value(*index, *ty)
                            .map(Held::from_value)
                            .map_err(|reason| EvalError::Field {
                                column: *index,
                                reason,
                            })?,
                        Held::from_value(literal.value()),
                    ),
                    _ => (a.eval_held(record, scratch)?, b.eval_held(record, scratch)?),
                };
                Ok(match compare(left, right, scratch) {
                    Compared::Null => None,
                    Compared::Unordered => Some(*op == CompareOp::NotEq),
                    Compared::Order(order) => Some(op.holds(order)),
                })
            }
            Expr::InList {
                expr,
                list,
                negated,
            } if let Some(index) = text_column(expr)
                && list
                    .iter()
                    .all(|e| matches!(e, Expr::Literal(Literal::Text(_)))) =>
            {
                let Some(field) = text_field(record, index)? else {
                    return Ok(None);
                };
                let found = list.iter().any(|e| match e {
                    Expr::Literal(Literal::Text(literal)) => bytes_eq(field, literal),
                    _ => unreachable!("checked: text literals"),
                });
                Ok(Some(found != *negated))
            }
            _ => Ok(truth(self.eval_held(record, scratch)?)),
        }
    }

    /// The levels of this tree as [`crate::EXPR_DEPTH_MAX`] counts them:
    /// each operator and call is one, columns and literals are none.
    /// Measured with a stack of its own, not by recursion, so it is safe on
    /// trees of any depth.
    pub fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(self, 1)];
        while let Some((e, depth)) = stack.pop() {
            if !matches!(e, Expr::Column { .. } | Expr::Literal(_)) {
                deepest = deepest.max(depth);
            }
            let mut push = |child| stack.push((child, depth + 1));
            match e {
                Expr::Column { .. } | Expr::Literal(_) => {}
                Expr::Not(e)
                | Expr::Neg(e)
                | Expr::Case(_, e)
                | Expr::DateTrunc(_, e)
                | Expr::Math(_, e)
                | Expr::TimeBucket { expr: e, .. } => push(e),
                Expr::IsNull { expr, .. } => push(expr),
                Expr::And(a, b)
                | Expr::Or(a, b)
                | Expr::Compare(_, a, b)
                | Expr::Arith(_, a, b) => {
                    push(a);
                    push(b);
                }
                Expr::InList { expr, list, .. } => {
                    push(expr);
                    list.iter().for_each(push);
                }
                Expr::Substr {
                    text,
                    start,
                    length,
                } => {
                    push(text);
                    push(start);
                    if let Some(length) = length {
                        push(length);
                    }
                }
                Expr::Coalesce(list) => list.iter().for_each(push),
            }
        }
        deepest
    }

    /// Calls `visit` on every column index this expression reads.
    pub fn columns(&self, visit: &mut impl FnMut(usize)) {
        match self {
            Expr::Column { index, .. } => visit(*index),
            Expr::Literal(_) => {}
            Expr::Not(e)
            | Expr::Neg(e)
            | Expr::Case(_, e)
            | Expr::DateTrunc(_, e)
            | Expr::Math(_, e)
            | Expr::TimeBucket { expr: e, .. } => {
                e.columns(visit);
            }
            Expr::IsNull { expr, .. } => expr.columns(visit),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Compare(_, a, b) | Expr::Arith(_, a, b) => {
                a.columns(visit);
                b.columns(visit);
            }
            Expr::InList { expr, list, .. } => {
                expr.columns(visit);
                list.iter().for_each(|e| e.columns(visit));
            }
            Expr::Substr {
                text,
                start,
                length,
            } => {
                text.columns(visit);
                start.columns(visit);
                if let Some(length) = length {
                    length.columns(visit);
                }
            }
            Expr::Coalesce(list) => list.iter().for_each(|e| e.columns(visit)),
        }
    }
}

impl CompareOp {
    fn holds(self, order: Ordering) -> bool {
        match self {
            CompareOp::Eq => order == Ordering::Equal,
            CompareOp::NotEq => order != Ordering::Equal,
            CompareOp::Lt => order == Ordering::Less,
            CompareOp::LtEq => order != Ordering::Greater,
            CompareOp::Gt => order == Ordering::Greater,
            CompareOp::GtEq => order != Ordering::Less,
        }
    }
}

/// The index of a TEXT column reference.
fn text_column(e: &Expr) -> Option<usize> {
    match e {
        Expr::Column {
            index,
            ty: ColumnType::Text,
        } => Some(*index),
        _ => None,
    }
}

/// The bytes of TEXT column `index` of `record`, `None` for NULL, as
/// [`Expr::eval_held`] reads the column.
#[inline]
fn text_field<R: Record + ?Sized>(record: &R, index: usize) -> Result<Option<&[u8]>, EvalError> {
    match record.value(index, ColumnType::Text) {
        Ok(Value::Text(bytes)) => Ok(Some(bytes)),
        Ok(_) => Ok(None),
        Err(reason) => Err(EvalError::Field {
            column: index,
            reason,
        }),
    }
}

fn truth(value: Held<'_>) -> Option<bool> {
    match value {
        Held::Bool(b) => Some(b),
        _ => None,
    }
}

enum Compared {
    Null,
    Unordered,
    Order(Ordering),
}

/// Orders two values of comparable types (the compiler has checked them).
fn compare(left: Held<'_>, right: Held<'_>, scratch: &[u8]) -> Compared {
    let order = match (left, right) {
        (Held::Null, _) | (_, Held::Null) => return Compared::Null,
        (Held::Int(a), Held::Int(b)) => Some(a.cmp(&b)),
        (Held::Int(a), Held::Float(b)) => (a as f64).partial_cmp(&b),
        (Held::Float(a), Held::Int(b)) => a.partial_cmp(&(b as f64)),
        (Held::Float(a), Held::Float(b)) => a.partial_cmp(&b),
        (Held::Text(a), Held::Text(b)) => Some(text_bytes(a, scratch).cmp(text_bytes(b, scratch))),
        (Held::Bool(a), Held::Bool(b)) => Some(a.cmp(&b)),
        (Held::Time(a), Held::Time(b)) => Some(a.cmp(&b)),
        // Types the compiler refuses to compare; treated as unequal.
        _ => None,
    };
    order.map_or(Compared::Unordered, Compared::Order)
}

/// The instants `to_timestamp` can make: those [`Timestamp`] prints,
/// years 0 to 9999.
const TO_TIMESTAMP_SECONDS_MAX: f64 = 253_402_300_799.0;
const TO_TIMESTAMP_SECONDS_MIN: f64 = -62_167_219_200.0;

fn math(op: MathOp, value: Held<'_>) -> Result<Held<'_>, EvalError> {
    Ok(match (op, value) {
        (MathOp::Floor | MathOp::Ceil | MathOp::Round, Held::Int(i)) => Held::Int(i),
        (MathOp::Floor, Held::Float(f)) => Held::Float(f.floor()),
        (MathOp::Ceil, Held::Float(f)) => Held::Float(f.ceil()),
        (MathOp::Round, Held::Float(f)) => Held::Float(f.round()),
        (MathOp::Abs, Held::Int(i)) => Held::Int(i.checked_abs().ok_or(EvalError::Overflow)?),
        (MathOp::Abs, Held::Float(f)) => Held::Float(f.abs()),
        // Milliseconds below 2^53 are exact in a double.
        #[allow(clippy::cast_precision_loss)]
        (MathOp::Epoch, Held::Time(t)) => Held::Float(t.0 as f64 / 1000.0),
        (MathOp::ToTimestamp, Held::Int(i)) => {
            let ms = i.checked_mul(1000).ok_or(EvalError::Overflow)?;
            Held::Time(Timestamp(ms))
        }
        (MathOp::ToTimestamp, Held::Float(f)) => {
            if !(TO_TIMESTAMP_SECONDS_MIN..=TO_TIMESTAMP_SECONDS_MAX).contains(&f) {
                return Err(EvalError::Overflow);
            }
            // In range: at most 2^48 milliseconds.
            #[allow(clippy::cast_possible_truncation)]
            Held::Time(Timestamp((f * 1000.0).floor() as i64))
        }
        _ => Held::Null,
    })
}

fn arith<'a>(op: ArithOp, left: Held<'a>, right: Held<'a>) -> Result<Held<'a>, EvalError> {
    match (left, right) {
        (Held::Int(a), Held::Int(b)) => {
            let result = match op {
                ArithOp::Add => a.checked_add(b),
                ArithOp::Sub => a.checked_sub(b),
                ArithOp::Mul => a.checked_mul(b),
                ArithOp::Div | ArithOp::Rem if b == 0 => return Err(EvalError::DivisionByZero),
                ArithOp::Div => a.checked_div(b),
                ArithOp::Rem => a.checked_rem(b),
            };
            result.map(Held::Int).ok_or(EvalError::Overflow)
        }
        (Held::Int(a), Held::Float(b)) => Ok(Held::Float(float_arith(op, a as f64, b))),
        (Held::Float(a), Held::Int(b)) => Ok(Held::Float(float_arith(op, a, b as f64))),
        (Held::Float(a), Held::Float(b)) => Ok(Held::Float(float_arith(op, a, b))),
        _ => Ok(Held::Null),
    }
}

/// `lower` or `upper` of the text `scratch[start..]` that is not all
/// ASCII, in place: letters beyond ASCII change case too (`ÉTÉ` -> `été`),
/// as in PostgreSQL and DuckDB. The cased text is written past the end and
/// moved down, so a scratch buffer that has grown allocates nothing. Bytes
/// that are not UTF-8 keep the ASCII rule.
#[cold]
fn change_case(op: CaseOp, scratch: &mut Vec<u8>, start: usize) {
    let end = scratch.len();
    if std::str::from_utf8(&scratch[start..end]).is_err() {
        match op {
            CaseOp::Lower => scratch[start..].make_ascii_lowercase(),
            CaseOp::Upper => scratch[start..].make_ascii_uppercase(),
        }
        return;
    }
    let mut at = start;
    while at < end {
        // Valid UTF-8: a char is its lead byte's length long.
        let len = match scratch[at] {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            _ => 4,
        };
        let c = std::str::from_utf8(&scratch[at..at + len])
            .ok()
            .and_then(|text| text.chars().next())
            .expect("a char of valid UTF-8");
        let mut out = [0u8; 4];
        match op {
            CaseOp::Lower => {
                for cased in c.to_lowercase() {
                    scratch.extend_from_slice(cased.encode_utf8(&mut out).as_bytes());
                }
            }
            CaseOp::Upper => {
                for cased in c.to_uppercase() {
                    scratch.extend_from_slice(cased.encode_utf8(&mut out).as_bytes());
                }
            }
        }
        at += len;
    }
    scratch.copy_within(end.., start);
    let cased = scratch.len() - end;
    scratch.truncate(start + cased);
}

fn float_arith(op: ArithOp, a: f64, b: f64) -> f64 {
    match op {
        ArithOp::Add => a + b,
        ArithOp::Sub => a - b,
        ArithOp::Mul => a * b,
        ArithOp::Div => a / b,
        ArithOp::Rem => a % b,
    }
}

/// The byte range of SQL `substr(text, start, length)`, counting UTF-8
/// characters (any byte that is not a continuation byte starts one). As in
/// PostgreSQL, the window `[start, start + length)` is clipped to the text,
/// so `substr('abc', 0, 2)` is `'a'`; a negative length gives `''`.
pub(crate) fn substr_range(bytes: &[u8], start: i64, length: Option<i64>) -> (usize, usize) {
    let first = start.max(1);
    let end = match length {
        None => i64::MAX,
        Some(length) if length < 0 => return (0, 0),
        Some(length) => start.saturating_add(length),
    };
    if end <= first {
        return (0, 0);
    }
    // ASCII up to the window's end (IP addresses, codes, URLs): characters
    // are bytes.
    let ascii_end = usize::try_from(end - 1)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    if bytes[..ascii_end].is_ascii() {
        let from = usize::try_from(first - 1)
            .unwrap_or(usize::MAX)
            .min(ascii_end);
        return (from, ascii_end);
    }
    let mut from = bytes.len();
    let mut to = bytes.len();
    let mut position: i64 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b & 0xC0 == 0x80 {
            continue;
        }
        position += 1;
        if position == first {
            from = i;
        }
        if position == end {
            to = i;
            break;
        }
    }
    if from > to {
        from = to;
    }
    (from, to)
}

fn offset(base: u32, by: usize) -> u32 {
    base + scratch_offset(by)
}

/// Scratch offsets fit in `u32`: the buffer holds copies of at most a few
/// fields of one record, and records are bounded far below 4 GiB by the
/// parsers' line limit.
fn scratch_offset(at: usize) -> u32 {
    u32::try_from(at).expect("scratch buffer stays below 4 GiB: it holds copies of one record")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substr_follows_postgres() {
        fn cut(text: &str, start: i64, length: Option<i64>) -> &str {
            let (from, to) = substr_range(text.as_bytes(), start, length);
            &text[from..to]
        }
        assert_eq!(cut("abcdef", 1, Some(3)), "abc");
        assert_eq!(cut("abcdef", 0, Some(3)), "ab");
        assert_eq!(cut("abcdef", -5, Some(3)), "");
        assert_eq!(cut("abcdef", 4, None), "def");
        assert_eq!(cut("abcdef", 7, None), "");
        assert_eq!(cut("abcdef", 2, Some(-1)), "");
        assert_eq!(cut("héllo", 2, Some(2)), "él");
        assert_eq!(cut("", 1, Some(8)), "");
        assert_eq!(cut("abc", i64::MAX, Some(i64::MAX)), "");
        assert_eq!(cut("abc", i64::MIN, Some(i64::MAX)), "");
    }

    #[test]
    fn substr_agrees_with_a_character_reference() {
        // PostgreSQL's definition over chars, written plainly, against the
        // byte-level cut (ASCII fast path and the UTF-8 walk).
        fn reference(text: &str, start: i64, length: Option<i64>) -> String {
            let end = match length {
                Some(l) if l < 0 => return String::new(),
                Some(l) => start.saturating_add(l),
                None => i64::MAX,
            };
            text.chars()
                .enumerate()
                .filter(|&(i, _)| {
                    let position = i as i64 + 1;
                    position >= start && position < end
                })
                .map(|(_, c)| c)
                .collect()
        }
        let texts = [
            "",
            "a",
            "158.112.27.3",
            "héllo",
            "ab€cd",
            "€€",
            "x€",
            "€x",
            "日本語テキスト",
        ];
        for text in texts {
            for start in -3..12 {
                for length in (-2..12).map(Some).chain([None]) {
                    let (from, to) = substr_range(text.as_bytes(), start, length);
                    assert_eq!(
                        &text[from..to],
                        reference(text, start, length),
                        "{text:?} {start} {length:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn three_valued_logic() {
        let null = || Box::new(Expr::Literal(Literal::Null));
        let yes = || Box::new(Expr::Literal(Literal::Bool(true)));
        let no = || Box::new(Expr::Literal(Literal::Bool(false)));
        let row: &[&str] = &[];
        let mut scratch = Scratch::new();
        let mut check = |e: Expr, want: Value<'static>| {
            assert_eq!(e.eval(row, &mut scratch), Ok(want), "{e:?}");
        };
        check(Expr::And(null(), no()), Value::Bool(false));
        check(Expr::And(null(), yes()), Value::Null);
        check(Expr::Or(null(), yes()), Value::Bool(true));
        check(Expr::Or(null(), no()), Value::Null);
        check(Expr::Not(null()), Value::Null);
    }
}
