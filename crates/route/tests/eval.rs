//! Compiled evaluation against a naive interpreter: random well-typed
//! expressions are written as SQL, compiled through the whole pipeline
//! (sqlparser, type checking, the compiled tree) and evaluated over random
//! rows; a direct recursive evaluation of the same expression, written
//! plainly here over owned values, must give the same answer or the same
//! error.

use cardinal_event::{Timestamp, Value};
use cardinal_route::{EvalError, Plan, Scratch};
use proptest::prelude::*;

/// Columns: `i BIGINT, f DOUBLE, t TEXT, b BOOLEAN, ts TIMESTAMP`.
const STREAM: &str = "CREATE STREAM s (i BIGINT, f DOUBLE, t TEXT, b BOOLEAN, ts TIMESTAMP);";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    Int,
    Float,
    Text,
    Bool,
    Time,
}

/// An expression as the test knows it: SQL text plus a plain evaluator.
#[derive(Debug, Clone)]
enum T {
    Column(usize),
    Null,
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    TimeText(String),
    Not(Box<T>),
    And(Box<T>, Box<T>),
    Or(Box<T>, Box<T>),
    Compare(&'static str, Box<T>, Box<T>),
    Arith(&'static str, Box<T>, Box<T>),
    Neg(Box<T>),
    IsNull(Box<T>, bool),
    In(Box<T>, Vec<T>, bool),
    Substr(Box<T>, Box<T>, Option<Box<T>>),
    Lower(Box<T>),
    Upper(Box<T>),
    DateTrunc(&'static str, Box<T>),
    /// `time_bucket(width, t)`: the width as written and in milliseconds.
    TimeBucket((&'static str, i64), Box<T>),
    Coalesce(Vec<T>),
}

const COLUMNS: [&str; 5] = ["i", "f", "t", "b", "ts"];

impl T {
    fn sql(&self) -> String {
        match self {
            T::Column(i) => COLUMNS[*i].to_owned(),
            T::Null => "NULL".into(),
            T::Int(i) => i.to_string(),
            T::Float(f) => format!("{f:?}"),
            T::Text(s) | T::TimeText(s) => format!("'{s}'"),
            T::Bool(b) => b.to_string().to_uppercase(),
            T::Not(a) => format!("(NOT {})", a.sql()),
            T::And(a, b) => format!("({} AND {})", a.sql(), b.sql()),
            T::Or(a, b) => format!("({} OR {})", a.sql(), b.sql()),
            T::Compare(op, a, b) | T::Arith(op, a, b) => format!("({} {op} {})", a.sql(), b.sql()),
            T::Neg(a) => format!("(- {})", a.sql()),
            T::IsNull(a, negated) => {
                format!(
                    "({} IS {}NULL)",
                    a.sql(),
                    if *negated { "NOT " } else { "" }
                )
            }
            T::In(a, list, negated) => format!(
                "({} {}IN ({}))",
                a.sql(),
                if *negated { "NOT " } else { "" },
                list.iter().map(T::sql).collect::<Vec<_>>().join(", ")
            ),
            T::Substr(a, start, None) => format!("substr({}, {})", a.sql(), start.sql()),
            T::Substr(a, start, Some(length)) => {
                format!(
                    "substring({} FROM {} FOR {})",
                    a.sql(),
                    start.sql(),
                    length.sql()
                )
            }
            T::Lower(a) => format!("lower({})", a.sql()),
            T::Upper(a) => format!("upper({})", a.sql()),
            T::DateTrunc(unit, a) => format!("date_trunc('{unit}', {})", a.sql()),
            T::TimeBucket((width, _), a) => format!("time_bucket('{width}', {})", a.sql()),
            T::Coalesce(list) => format!(
                "coalesce({})",
                list.iter().map(T::sql).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Owned values for the naive evaluator.
#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Int(i64),
    Float(f64),
    Text(Vec<u8>),
    Bool(bool),
    Time(Timestamp),
}

type Row = Vec<Option<String>>;

fn column(row: &Row, index: usize) -> Result<V, EvalError> {
    let Some(text) = &row[index] else {
        return Ok(V::Null);
    };
    let ty = [
        cardinal_event::ColumnType::BigInt,
        cardinal_event::ColumnType::Double,
        cardinal_event::ColumnType::Text,
        cardinal_event::ColumnType::Bool,
        cardinal_event::ColumnType::Timestamp,
    ][index];
    match Value::parse(text.as_bytes(), ty) {
        Ok(value) => Ok(owned(value)),
        Err(reason) => Err(EvalError::Field {
            column: index,
            reason,
        }),
    }
}

fn owned(value: Value<'_>) -> V {
    match value {
        Value::Null => V::Null,
        Value::Int(i) => V::Int(i),
        Value::Float(f) => V::Float(f),
        Value::Text(t) => V::Text(t.to_vec()),
        Value::Bool(b) => V::Bool(b),
        Value::Time(t) => V::Time(t),
    }
}

/// `Some(ordering)`, `None` when unordered (NaN), or `Err(())` when NULL.
fn order(a: &V, b: &V) -> Result<Option<std::cmp::Ordering>, ()> {
    Ok(match (a, b) {
        (V::Null, _) | (_, V::Null) => return Err(()),
        (V::Int(x), V::Int(y)) => Some(x.cmp(y)),
        (V::Int(x), V::Float(y)) => (*x as f64).partial_cmp(y),
        (V::Float(x), V::Int(y)) => x.partial_cmp(&(*y as f64)),
        (V::Float(x), V::Float(y)) => x.partial_cmp(y),
        (V::Text(x), V::Text(y)) => Some(x.cmp(y)),
        (V::Bool(x), V::Bool(y)) => Some(x.cmp(y)),
        (V::Time(x), V::Time(y)) => Some(x.cmp(y)),
        _ => panic!("the generator compares only comparable types: {a:?} {b:?}"),
    })
}

fn naive(t: &T, row: &Row) -> Result<V, EvalError> {
    use std::cmp::Ordering::*;
    Ok(match t {
        T::Column(i) => column(row, *i)?,
        T::Null => V::Null,
        T::Int(i) => V::Int(*i),
        T::Float(f) => V::Float(*f),
        T::Text(s) => V::Text(s.as_bytes().to_vec()),
        T::TimeText(s) => V::Time(Timestamp::parse(s.as_bytes()).expect("generated")),
        T::Bool(b) => V::Bool(*b),
        T::Not(a) => match naive(a, row)? {
            V::Bool(b) => V::Bool(!b),
            _ => V::Null,
        },
        T::And(a, b) => {
            let left = naive(a, row)?;
            if left == V::Bool(false) {
                return Ok(V::Bool(false));
            }
            let right = naive(b, row)?;
            if right == V::Bool(false) {
                V::Bool(false)
            } else if left == V::Bool(true) && right == V::Bool(true) {
                V::Bool(true)
            } else {
                V::Null
            }
        }
        T::Or(a, b) => {
            let left = naive(a, row)?;
            if left == V::Bool(true) {
                return Ok(V::Bool(true));
            }
            let right = naive(b, row)?;
            if right == V::Bool(true) {
                V::Bool(true)
            } else if left == V::Bool(false) && right == V::Bool(false) {
                V::Bool(false)
            } else {
                V::Null
            }
        }
        T::Compare(op, a, b) => {
            let left = naive(a, row)?;
            let right = naive(b, row)?;
            match order(&left, &right) {
                Err(()) => V::Null,
                Ok(None) => V::Bool(*op == "<>"),
                Ok(Some(o)) => V::Bool(match *op {
                    "=" => o == Equal,
                    "<>" => o != Equal,
                    "<" => o == Less,
                    "<=" => o != Greater,
                    ">" => o == Greater,
                    _ => o != Less,
                }),
            }
        }
        T::Arith(op, a, b) => {
            let left = naive(a, row)?;
            let right = naive(b, row)?;
            match (left, right) {
                (V::Int(x), V::Int(y)) => {
                    let result = match *op {
                        "+" => x.checked_add(y),
                        "-" => x.checked_sub(y),
                        "*" => x.checked_mul(y),
                        _ if y == 0 => return Err(EvalError::DivisionByZero),
                        "/" => x.checked_div(y),
                        _ => x.checked_rem(y),
                    };
                    V::Int(result.ok_or(EvalError::Overflow)?)
                }
                (V::Null, _) | (_, V::Null) => V::Null,
                (x, y) => {
                    let float = |v: V| match v {
                        V::Int(i) => i as f64,
                        V::Float(f) => f,
                        other => panic!("not a number: {other:?}"),
                    };
                    let (x, y) = (float(x), float(y));
                    V::Float(match *op {
                        "+" => x + y,
                        "-" => x - y,
                        "*" => x * y,
                        "/" => x / y,
                        _ => x % y,
                    })
                }
            }
        }
        T::Neg(a) => match naive(a, row)? {
            V::Int(i) => V::Int(i.checked_neg().ok_or(EvalError::Overflow)?),
            V::Float(f) => V::Float(-f),
            _ => V::Null,
        },
        T::IsNull(a, negated) => V::Bool((naive(a, row)? == V::Null) != *negated),
        T::In(a, list, negated) => {
            let needle = naive(a, row)?;
            if needle == V::Null {
                return Ok(V::Null);
            }
            let mut saw_null = false;
            for item in list {
                match order(&needle, &naive(item, row)?) {
                    Ok(Some(Equal)) => return Ok(V::Bool(!*negated)),
                    Err(()) => saw_null = true,
                    _ => {}
                }
            }
            if saw_null { V::Null } else { V::Bool(*negated) }
        }
        T::Substr(a, start, length) => {
            let text = naive(a, row)?;
            let start = naive(start, row)?;
            let length = match length {
                Some(l) => Some(naive(l, row)?),
                None => None,
            };
            let (V::Text(text), V::Int(start)) = (text, start) else {
                return Ok(V::Null);
            };
            let length = match length {
                None => None,
                Some(V::Int(l)) => Some(l),
                Some(_) => return Ok(V::Null),
            };
            if length.is_some_and(|l| l < 0) {
                return Ok(V::Text(Vec::new()));
            }
            // Character positions p with start <= p < start + length.
            let text = String::from_utf8(text).expect("generated text is UTF-8");
            let kept: String = text
                .chars()
                .enumerate()
                .filter(|&(i, _)| {
                    let p = i as i128 + 1;
                    p >= i128::from(start)
                        && length.is_none_or(|l| p < i128::from(start) + i128::from(l))
                })
                .map(|(_, c)| c)
                .collect();
            V::Text(kept.into_bytes())
        }
        // Letters beyond ASCII change case too, a char at a time; bytes
        // that are not UTF-8 by the ASCII rule.
        T::Lower(a) | T::Upper(a) => {
            let lower = matches!(t, T::Lower(_));
            match naive(a, row)? {
                V::Text(text) => V::Text(match String::from_utf8(text) {
                    Ok(text) if lower => text
                        .chars()
                        .flat_map(char::to_lowercase)
                        .collect::<String>()
                        .into(),
                    Ok(text) => text
                        .chars()
                        .flat_map(char::to_uppercase)
                        .collect::<String>()
                        .into(),
                    Err(e) if lower => e.into_bytes().to_ascii_lowercase(),
                    Err(e) => e.into_bytes().to_ascii_uppercase(),
                }),
                _ => V::Null,
            }
        }
        // Epoch-aligned by hand, not through the code under test.
        T::TimeBucket((_, width_ms), a) => match naive(a, row)? {
            V::Time(t) => V::Time(cardinal_event::Timestamp(t.0 - t.0.rem_euclid(*width_ms))),
            _ => V::Null,
        },
        T::DateTrunc(unit, a) => match naive(a, row)? {
            V::Time(t) => V::Time(t.truncate(cardinal_event::TimeUnit::parse(unit).expect("unit"))),
            _ => V::Null,
        },
        T::Coalesce(list) => {
            for item in list {
                let v = naive(item, row)?;
                if v != V::Null {
                    return Ok(v);
                }
            }
            V::Null
        }
    })
}

/// A small deterministic generator of well-typed trees.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        let len = u64::try_from(items.len()).expect("small");
        items[usize::try_from(self.below(len)).expect("below len")]
    }

    fn expr(&mut self, ty: Ty, depth: u32) -> T {
        let leaf = depth == 0 || self.below(3) == 0;
        if self.below(25) == 0 {
            return T::Null;
        }
        match ty {
            Ty::Int => match if leaf {
                self.below(2)
            } else {
                2 + self.below(3)
            } {
                0 => T::Column(0),
                1 => {
                    T::Int(self.pick(&[0, 1, 2, 3, -7, 1000, i64::MAX, 4_611_686_018_427_387_904]))
                }
                2 => T::Arith(
                    self.pick(&["+", "-", "*", "/", "%"]),
                    Box::new(self.expr(Ty::Int, depth - 1)),
                    Box::new(self.expr(Ty::Int, depth - 1)),
                ),
                3 => T::Neg(Box::new(self.expr(Ty::Int, depth - 1))),
                _ => T::Coalesce(vec![
                    self.expr(Ty::Int, depth - 1),
                    self.expr(Ty::Int, depth - 1),
                ]),
            },
            Ty::Float => match if leaf {
                self.below(2)
            } else {
                2 + self.below(2)
            } {
                0 => T::Column(1),
                1 => T::Float(self.pick(&[0.5, 2.25, 1e10, 0.0, 3.0])),
                2 => {
                    let (a, b) = match self.below(3) {
                        0 => (Ty::Float, Ty::Int),
                        1 => (Ty::Int, Ty::Float),
                        _ => (Ty::Float, Ty::Float),
                    };
                    T::Arith(
                        self.pick(&["+", "-", "*", "/", "%"]),
                        Box::new(self.expr(a, depth - 1)),
                        Box::new(self.expr(b, depth - 1)),
                    )
                }
                _ => T::Neg(Box::new(self.expr(Ty::Float, depth - 1))),
            },
            Ty::Text => match if leaf {
                self.below(2)
            } else {
                2 + self.below(4)
            } {
                0 => T::Column(2),
                1 => T::Text(
                    self.pick(&[
                        "",
                        "CA",
                        "ny",
                        "héllo",
                        "Mixed Case",
                        "ÉTÉ",
                        "straße",
                        "Ωμέγα",
                    ])
                    .to_owned(),
                ),
                2 => T::Lower(Box::new(self.expr(Ty::Text, depth - 1))),
                3 => T::Upper(Box::new(self.expr(Ty::Text, depth - 1))),
                4 => {
                    let length = if self.below(2) == 0 {
                        Some(Box::new(self.expr(Ty::Int, depth - 1)))
                    } else {
                        None
                    };
                    T::Substr(
                        Box::new(self.expr(Ty::Text, depth - 1)),
                        Box::new(self.expr(Ty::Int, depth - 1)),
                        length,
                    )
                }
                _ => T::Coalesce(vec![
                    self.expr(Ty::Text, depth - 1),
                    self.expr(Ty::Text, depth - 1),
                ]),
            },
            Ty::Time => match if leaf { 0 } else { self.below(3) } {
                0 => T::Column(4),
                1 => T::TimeBucket(
                    self.pick(&[
                        ("1 second", 1_000),
                        ("30s", 30_000),
                        ("5 minutes", 300_000),
                        ("15 min", 900_000),
                        ("1h", 3_600_000),
                        ("6 hours", 21_600_000),
                        ("1 day", 86_400_000),
                    ]),
                    Box::new(self.expr(Ty::Time, depth - 1)),
                ),
                _ => T::DateTrunc(
                    self.pick(&["minute", "hour", "day", "week", "month"]),
                    Box::new(self.expr(Ty::Time, depth - 1)),
                ),
            },
            Ty::Bool => match if leaf {
                self.below(2)
            } else {
                2 + self.below(6)
            } {
                0 => T::Column(3),
                1 => T::Bool(self.below(2) == 0),
                2 => T::Not(Box::new(self.expr(Ty::Bool, depth - 1))),
                3 => T::And(
                    Box::new(self.expr(Ty::Bool, depth - 1)),
                    Box::new(self.expr(Ty::Bool, depth - 1)),
                ),
                4 => T::Or(
                    Box::new(self.expr(Ty::Bool, depth - 1)),
                    Box::new(self.expr(Ty::Bool, depth - 1)),
                ),
                5 => {
                    let ty = self.any_type();
                    T::IsNull(Box::new(self.expr(ty, depth - 1)), self.below(2) == 0)
                }
                6 => {
                    let (a, b) = self.comparable();
                    let left = self.expr(a, depth - 1);
                    let right = if b == Ty::Time && self.below(2) == 0 {
                        T::TimeText(
                            self.pick(&["2026-11-01", "2026-11-04T13:45:00Z"])
                                .to_owned(),
                        )
                    } else {
                        self.expr(b, depth - 1)
                    };
                    T::Compare(
                        self.pick(&["=", "<>", "<", "<=", ">", ">="]),
                        Box::new(left),
                        Box::new(right),
                    )
                }
                _ => {
                    let (a, b) = self.comparable();
                    let needle = self.expr(a, depth - 1);
                    let list = (0..1 + self.below(3))
                        .map(|_| self.expr(b, depth - 1))
                        .collect();
                    T::In(Box::new(needle), list, self.below(2) == 0)
                }
            },
        }
    }

    fn any_type(&mut self) -> Ty {
        self.pick(&[Ty::Int, Ty::Float, Ty::Text, Ty::Bool, Ty::Time])
    }

    fn comparable(&mut self) -> (Ty, Ty) {
        match self.below(6) {
            0 => (Ty::Int, Ty::Float),
            1 => (Ty::Float, Ty::Int),
            _ => {
                let ty = self.any_type();
                (ty, ty)
            }
        }
    }
}

fn field(index: usize) -> impl Strategy<Value = Option<String>> {
    let valid: Vec<&'static str> = match index {
        0 => vec![
            "0",
            "1",
            "-3",
            "42",
            "9223372036854775807",
            "-9223372036854775808",
            "4611686018427387904",
        ],
        1 => vec!["0.5", "-2.25", "1.1885166E-4", "NaN", "Infinity", "3", "0"],
        2 => vec!["", "CA", "ca", "héllo wörld", "Mixed Case", "abcdefghij"],
        3 => vec!["true", "false", "1", "0", "TRUE"],
        _ => vec![
            "2026-11-04T13:45:59Z",
            "2026-11-01",
            "1969-12-31T23:59:59.999Z",
            "2026-02-28 23:00:00",
        ],
    };
    let garbage = match index {
        2 => "still text",
        _ => "x1",
    };
    prop_oneof![
        6 => proptest::sample::select(valid).prop_map(|s| Some(s.to_owned())),
        1 => Just(None),
        1 => Just(Some(String::new())),
        1 => Just(Some(garbage.to_owned())),
    ]
}

fn row() -> impl Strategy<Value = Row> {
    (field(0), field(1), field(2), field(3), field(4))
        .prop_map(|(a, b, c, d, e)| vec![a, b, c, d, e])
}

/// A record whose absent fields are absent, not empty.
struct TestRow<'a>(&'a Row);

impl cardinal_event::Record for TestRow<'_> {
    fn field(&self, column: usize) -> Option<&[u8]> {
        self.0.get(column)?.as_deref().map(str::as_bytes)
    }
}

fn same(compiled: &Result<Value<'_>, EvalError>, naive: &Result<V, EvalError>) -> bool {
    match (compiled, naive) {
        (Ok(Value::Float(a)), Ok(V::Float(b))) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        (Ok(a), Ok(b)) => owned(*a) == *b,
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

/// The text comparisons a filter reads on their own path pass where the
/// same expression, evaluated as a value, is TRUE: every operator and an
/// IN list, negated or not, against NULL, empty, equal, cased and longer
/// texts.
#[test]
fn text_filters_pass_where_their_value_is_true() {
    let filters = [
        "t = 'CA'",
        "t <> 'CA'",
        "t < 'ca'",
        "t <= 'CA'",
        "t > 'CA'",
        "t >= 'abcdefghijklmnopq'",
        "t = ''",
        "t <> ''",
        "t IN ('CA', 'ny', '')",
        "t NOT IN ('CA', 'abcdefghijklmnopqrstuvwxyz')",
        "t IN ('CA') OR f > 1",
        "NOT (t = 'ca') AND i IS NOT NULL",
    ];
    let texts = [
        None,
        Some(""),
        Some("CA"),
        Some("ca"),
        Some("ny"),
        Some("abcdefghijklmnopq"),
        Some("abcdefghijklmnopqrstuvwxyz"),
    ];
    for filter in filters {
        let sql = format!(
            "{STREAM}\nCREATE SUMMARY x AS SELECT count(*) FROM s WHERE {filter};
             CREATE SUMMARY y AS SELECT ({filter}) AS k, count(*) FROM s GROUP BY k;"
        );
        let plan = Plan::compile(&sql).expect("compiles");
        let (x, y) = (&plan.summaries[0], &plan.summaries[1]);
        let mut scratch = Scratch::new();
        for text in texts {
            for number in [None, Some("0.5"), Some("2"), Some("x")] {
                let row: Row = vec![
                    number.map(str::to_owned),
                    number.map(str::to_owned),
                    text.map(str::to_owned),
                    None,
                    None,
                ];
                let record = TestRow(&row);
                let passes = x.passes(&record, &mut scratch);
                let value = y.dimensions[0]
                    .eval(&record, &mut scratch)
                    .map(|v| v == Value::Bool(true));
                assert_eq!(passes, value, "{filter} on {row:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A filter passes exactly the rows on which the naive evaluation is
    /// TRUE, and fails with its error: `Summary::passes` reads a filter
    /// as a truth value, with paths of its own for text columns compared
    /// with text literals.
    #[test]
    fn filters_pass_where_naive_is_true(seed in any::<u64>(), rows in proptest::collection::vec(row(), 1..16)) {
        let mut generator = Gen(seed);
        let tree = generator.expr(Ty::Bool, 4);
        let sql = format!("{STREAM}\nCREATE SUMMARY x AS SELECT count(*) FROM s WHERE {};", tree.sql());
        let plan = Plan::compile(&sql).map_err(|e| TestCaseError::fail(format!("{sql}\n{e}")))?;
        let summary = &plan.summaries[0];
        let mut scratch = Scratch::new();
        for row in &rows {
            let passes = summary.passes(&TestRow(row), &mut scratch);
            let expected = naive(&tree, row).map(|v| v == V::Bool(true));
            prop_assert_eq!(passes, expected, "{}\nrow {:?}", sql, row);
        }
    }

    #[test]
    fn compiled_equals_naive(seed in any::<u64>(), ty_index in 0usize..5, rows in proptest::collection::vec(row(), 1..16)) {
        let mut generator = Gen(seed);
        let ty = [Ty::Int, Ty::Float, Ty::Text, Ty::Bool, Ty::Time][ty_index];
        let tree = generator.expr(ty, 4);
        let sql = format!("{STREAM}\nCREATE SUMMARY x AS SELECT {} AS k, count(*) FROM s GROUP BY k;", tree.sql());
        let plan = Plan::compile(&sql).map_err(|e| TestCaseError::fail(format!("{sql}\n{e}")))?;
        let key = &plan.summaries[0].dimensions[0];
        let mut scratch = Scratch::new();
        for row in &rows {
            let record = TestRow(row);
            let compiled = key.eval(&record, &mut scratch);
            let expected = naive(&tree, row);
            prop_assert!(same(&compiled, &expected), "{sql}\nrow {row:?}\ncompiled {compiled:?}\nnaive {expected:?}");
        }
    }
}
