//! A compiled expression as canonical text: what a snapshot records of
//! a summary's dimensions and aggregate arguments, so that a start whose
//! schema computes a dimension or an argument differently under the same
//! name is refused rather than merged into state kept under the old one.
//!
//! The text is printed from the compiled [`Expr`], not from the schema's
//! source or sqlparser's printing of it: spacing, keyword case, a
//! column's case (names are case-insensitive) and a new version of the
//! parser do not change it, and two expressions print alike only if they
//! compile alike. It is a fingerprint that people read in a refusal, not
//! SQL to run: every operation is parenthesized, and a column prints as
//! its lower-case name (with its JSON path when that is not the name).
//!
//! The text is stored in snapshots: once released it must not change
//! for an expression that compiles the same, or every data directory
//! kept under it would be refused at the next start. The test below pins
//! it, one expression of each kind.

use std::fmt::Write as _;

use cardinal_event::Schema;

use crate::expr::{ArithOp, CaseOp, CompareOp, Expr, Literal, MathOp};

impl Expr {
    /// This expression as canonical text (module docs), its columns named
    /// from `schema`, the stream schema it was compiled against.
    pub fn canonical(&self, schema: &Schema) -> String {
        let mut out = String::new();
        write(self, schema, &mut out);
        out
    }
}

fn write(expr: &Expr, schema: &Schema, out: &mut String) {
    let list = |items: &[Expr], out: &mut String| {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write(item, schema, out);
        }
    };
    match expr {
        Expr::Column { index, .. } => match schema.columns.get(*index) {
            Some(column) => {
                let name = column.name.to_ascii_lowercase();
                out.push_str(&name);
                if column.path != [column.name.as_str()] {
                    let _ = write!(out, "<{}>", column.path.join("."));
                }
            }
            None => {
                let _ = write!(out, "${index}");
            }
        },
        Expr::Literal(literal) => match literal {
            Literal::Null => out.push_str("NULL"),
            Literal::Bool(b) => out.push_str(if *b { "TRUE" } else { "FALSE" }),
            Literal::Int(i) => {
                let _ = write!(out, "{i}");
            }
            // Rust's shortest text that reads back as the same double.
            Literal::Float(f) => {
                let _ = write!(out, "{f:?}");
            }
            Literal::Text(bytes) => {
                out.push('\'');
                for chunk in bytes.utf8_chunks() {
                    out.push_str(&chunk.valid().replace('\'', "''"));
                    for byte in chunk.invalid() {
                        let _ = write!(out, "\\x{byte:02x}");
                    }
                }
                out.push('\'');
            }
            Literal::Time(t) => {
                let _ = write!(out, "TIMESTAMP({}ms)", t.0);
            }
        },
        Expr::Not(e) => {
            out.push_str("(NOT ");
            write(e, schema, out);
            out.push(')');
        }
        Expr::And(a, b) => binary(a, "AND", b, schema, out),
        Expr::Or(a, b) => binary(a, "OR", b, schema, out),
        Expr::Compare(op, a, b) => {
            let op = match op {
                CompareOp::Eq => "=",
                CompareOp::NotEq => "<>",
                CompareOp::Lt => "<",
                CompareOp::LtEq => "<=",
                CompareOp::Gt => ">",
                CompareOp::GtEq => ">=",
            };
            binary(a, op, b, schema, out);
        }
        Expr::Arith(op, a, b) => {
            let op = match op {
                ArithOp::Add => "+",
                ArithOp::Sub => "-",
                ArithOp::Mul => "*",
                ArithOp::Div => "/",
                ArithOp::Rem => "%",
            };
            binary(a, op, b, schema, out);
        }
        Expr::Neg(e) => {
            out.push_str("(-");
            write(e, schema, out);
            out.push(')');
        }
        Expr::IsNull { expr, negated } => {
            out.push('(');
            write(expr, schema, out);
            out.push_str(if *negated {
                " IS NOT NULL)"
            } else {
                " IS NULL)"
            });
        }
        Expr::InList {
            expr,
            list: items,
            negated,
        } => {
            out.push('(');
            write(expr, schema, out);
            out.push_str(if *negated { " NOT IN (" } else { " IN (" });
            list(items, out);
            out.push_str("))");
        }
        Expr::Substr {
            text,
            start,
            length,
        } => {
            out.push_str("substr(");
            write(text, schema, out);
            out.push_str(", ");
            write(start, schema, out);
            if let Some(length) = length {
                out.push_str(", ");
                write(length, schema, out);
            }
            out.push(')');
        }
        Expr::Case(op, e) => {
            out.push_str(match op {
                CaseOp::Lower => "lower(",
                CaseOp::Upper => "upper(",
            });
            write(e, schema, out);
            out.push(')');
        }
        Expr::DateTrunc(unit, e) => {
            let _ = write!(out, "date_trunc('{unit}', ");
            write(e, schema, out);
            out.push(')');
        }
        Expr::TimeBucket { width, expr } => {
            let _ = write!(out, "time_bucket('{width}', ");
            write(expr, schema, out);
            out.push(')');
        }
        Expr::Coalesce(items) => {
            out.push_str("coalesce(");
            list(items, out);
            out.push(')');
        }
        Expr::Math(op, e) => {
            out.push_str(match op {
                MathOp::Floor => "floor(",
                MathOp::Ceil => "ceil(",
                MathOp::Round => "round(",
                MathOp::Abs => "abs(",
                MathOp::Epoch => "extract(epoch from ",
                MathOp::ToTimestamp => "to_timestamp(",
            });
            write(e, schema, out);
            out.push(')');
        }
    }
}

/// `(a op b)`.
fn binary(a: &Expr, op: &str, b: &Expr, schema: &Schema, out: &mut String) {
    out.push('(');
    write(a, schema, out);
    let _ = write!(out, " {op} ");
    write(b, schema, out);
    out.push(')');
}

#[cfg(test)]
mod tests {
    use crate::Plan;

    /// The texts snapshots hold: pinned, one expression of each kind.
    /// A change here refuses every data directory kept under the old
    /// text (module docs).
    #[test]
    fn canonical_text_is_pinned() {
        let plan = Plan::compile(
            "CREATE STREAM s (ts TIMESTAMP, User_Id BIGINT, state TEXT, revenue DOUBLE,
               ok BOOLEAN) WITH (time = 'ts');
             CREATE SUMMARY t AS SELECT
               date_trunc('day', ts) AS day,
               STATE AS a,
               lower(substr(state, 1, 2)) AS b,
               upper(coalesce(state, 'it''s')) AS c,
               (revenue * 2 + 1) / 3 - revenue % 2 AS d,
               -floor(revenue) AS e,
               (state IN ('CA', 'NY') AND NOT ok) OR revenue IS NULL OR state IS NOT NULL AS f,
               revenue >= 1.5 AND user_id <> 3 AND revenue < 2 AND revenue <= 2
                 AND revenue > 0 AND state = 'x' AS g,
               state NOT IN ('a') AS h,
               date_trunc('month', to_timestamp(user_id)) AS i,
               time_bucket('15 minutes', to_timestamp(user_id)) AS j,
               ceil(revenue) + round(revenue) + abs(revenue) AS k,
               extract(epoch from ts) AS l,
               to_timestamp(user_id) AS m,
               true AS n,
               hll(user_id) AS users, sum(revenue * 100) AS cents
             FROM s GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15;",
        )
        .expect("plan");
        let summary = &plan.summaries[0];
        let texts: Vec<String> = summary
            .dimensions
            .iter()
            .chain(&summary.arguments)
            .map(|e| e.canonical(&summary.schema))
            .collect();
        let pinned = [
            "state",
            "lower(substr(state, 1, 2))",
            "upper(coalesce(state, 'it''s'))",
            "((((revenue * 2) + 1) / 3) - (revenue % 2))",
            "(-floor(revenue))",
            "((((state IN ('CA', 'NY')) AND (NOT ok)) OR (revenue IS NULL)) OR (state IS NOT NULL))",
            "((((((revenue >= 1.5) AND (user_id <> 3)) AND (revenue < 2)) AND (revenue <= 2)) \
             AND (revenue > 0)) AND (state = 'x'))",
            "(state NOT IN ('a'))",
            "date_trunc('month', to_timestamp(user_id))",
            "time_bucket('15 minutes', to_timestamp(user_id))",
            "((ceil(revenue) + round(revenue)) + abs(revenue))",
            "extract(epoch from ts)",
            "to_timestamp(user_id)",
            "TRUE",
            "user_id",
            "(revenue * 100)",
        ];
        assert_eq!(texts, pinned);
    }
}
