//! [`Table`]: a SQL answer, typed column by column, and its writers.
//!
//! `cardinal run` prints a summary's rows with [`crate::Results`], whose
//! columns follow from the aggregates' kinds. A SQL query chooses its own
//! columns (`SELECT state, users_upper - users_lower AS width`), so its
//! answer is a plain table: a name and a [`CellType`] per column, a
//! [`Cell`] per column and row. The types are the ones every client
//! knows (PostgreSQL's `bool`, `int8`, `float8`, `text`, `timestamptz`),
//! and each writer prints them one way:
//!
//! | type | JSON | CSV / table |
//! |---|---|---|
//! | `Bool` | `true` | `true` |
//! | `Int` | `42` | `42` |
//! | `Float` | `0.25`; `null` for NaN and infinities | shortest text that reads back, `NaN`, `inf` |
//! | `Text` | a JSON string | the text (CSV quotes it when needed) |
//! | `Time` | `"2026-11-04T00:00:00Z"` | `2026-11-04T00:00:00Z` |
//!
//! NULL is `null` in JSON and an empty field in CSV, as in `run`'s CSV.

use std::fmt::Write as _;

use cardinal_event::Timestamp;

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CellType {
    /// `true` / `false` (PostgreSQL `bool`).
    Bool,
    /// A 64-bit integer (`int8`): counts, integer sums, integer
    /// dimensions.
    Int,
    /// A double (`float8`): estimates and their bounds, sums of doubles,
    /// quantiles, arithmetic.
    Float,
    /// UTF-8 text (`text`); dimension values that are not UTF-8 are
    /// printed with their bytes escaped, as `run` prints them.
    Text,
    /// An instant in milliseconds since the Unix epoch, UTC
    /// (`timestamptz`).
    Time,
}

impl CellType {
    /// The PostgreSQL name of the type.
    pub fn pg_name(self) -> &'static str {
        match self {
            CellType::Bool => "boolean",
            CellType::Int => "bigint",
            CellType::Float => "double precision",
            CellType::Text => "text",
            CellType::Time => "timestamp with time zone",
        }
    }
}

/// One value of a [`Table`].
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A double.
    Float(f64),
    /// Text.
    Text(String),
    /// An instant.
    Time(Timestamp),
}

impl Cell {
    /// The cell as text, as CSV and the PostgreSQL text format print it;
    /// `None` for NULL.
    pub fn text(&self) -> Option<String> {
        match self {
            Cell::Null => None,
            Cell::Bool(b) => Some(b.to_string()),
            Cell::Int(i) => Some(i.to_string()),
            Cell::Float(f) => Some(float_text(*f)),
            Cell::Text(t) => Some(t.clone()),
            Cell::Time(t) => Some(t.to_string()),
        }
    }
}

/// A column's name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableColumn {
    /// The column's name (its `AS` name, or the expression's text).
    pub name: String,
    /// What its cells hold (a cell may also be NULL).
    pub ty: CellType,
}

/// A SQL answer: columns and rows of cells, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// The columns, in `SELECT` order.
    pub columns: Vec<TableColumn>,
    /// The rows; each has one cell per column.
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// The table as one JSON array of objects, a member per column.
    pub fn json(&self) -> String {
        let mut out = String::from("[");
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.push_json_object(&mut out, row);
        }
        out.push_str("]\n");
        out
    }

    /// The table as JSON lines: one object per row, each on its line.
    pub fn json_lines(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            self.push_json_object(&mut out, row);
            out.push('\n');
        }
        out
    }

    /// The table as CSV with a header line; NULL is an empty field.
    pub fn csv(&self) -> String {
        let mut out = String::new();
        let names: Vec<String> = self.columns.iter().map(|c| csv_text(&c.name)).collect();
        out.push_str(&names.join(","));
        out.push('\n');
        for row in &self.rows {
            let fields: Vec<String> = row
                .iter()
                .map(|c| c.text().map_or_else(String::new, |t| csv_text(&t)))
                .collect();
            out.push_str(&fields.join(","));
            out.push('\n');
        }
        out
    }

    /// The table aligned for a terminal: numbers right-aligned, NULL
    /// shown as `NULL`, control characters escaped, and a row count.
    pub fn aligned(&self) -> String {
        let mut cells: Vec<Vec<String>> =
            vec![self.columns.iter().map(|c| c.name.clone()).collect()];
        for row in &self.rows {
            cells.push(
                row.iter()
                    .map(|c| c.text().map_or_else(|| "NULL".to_owned(), |t| shown(&t)))
                    .collect(),
            );
        }
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|r| r[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for (r, line) in cells.iter().enumerate() {
            let mut text = String::new();
            for (i, cell) in line.iter().enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                let pad = widths[i] - cell.chars().count();
                let right = r > 0 && matches!(self.columns[i].ty, CellType::Int | CellType::Float);
                if right {
                    text.extend(std::iter::repeat_n(' ', pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        let n = self.rows.len();
        let _ = writeln!(out, "({n} row{})", if n == 1 { "" } else { "s" });
        out
    }

    fn push_json_object(&self, out: &mut String, row: &[Cell]) {
        out.push('{');
        for (i, (column, cell)) in self.columns.iter().zip(row).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&crate::json_string(column.name.as_bytes()));
            out.push(':');
            match cell {
                Cell::Null => out.push_str("null"),
                Cell::Bool(b) => {
                    let _ = write!(out, "{b}");
                }
                Cell::Int(i) => {
                    let _ = write!(out, "{i}");
                }
                Cell::Float(f) if f.is_finite() => out.push_str(&float_text(*f)),
                Cell::Float(_) => out.push_str("null"),
                Cell::Text(t) => out.push_str(&crate::json_string(t.as_bytes())),
                Cell::Time(t) => {
                    let _ = write!(out, "\"{t}\"");
                }
            }
        }
        out.push('}');
    }
}

/// A double as text: the shortest form that reads back to the same bits
/// (Rust's `Display`), `NaN`, `inf`, `-inf`.
pub fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        format!("{f}")
    }
}

fn csv_text(text: &str) -> String {
    let mut out = String::new();
    crate::push_csv_field(&mut out, text);
    out
}

/// Text as a terminal cell: control characters escaped, so a cell stays
/// on its line.
fn shown(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.chars().flat_map(char::escape_default).collect()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        Table {
            columns: vec![
                TableColumn {
                    name: "day".into(),
                    ty: CellType::Time,
                },
                TableColumn {
                    name: "state".into(),
                    ty: CellType::Text,
                },
                TableColumn {
                    name: "users".into(),
                    ty: CellType::Float,
                },
                TableColumn {
                    name: "events".into(),
                    ty: CellType::Int,
                },
            ],
            rows: vec![
                vec![
                    Cell::Time(Timestamp(0)),
                    Cell::Text("C,A".into()),
                    Cell::Float(12.5),
                    Cell::Int(3),
                ],
                vec![Cell::Null, Cell::Null, Cell::Float(f64::NAN), Cell::Int(-1)],
            ],
        }
    }

    #[test]
    fn json_types_each_cell() {
        assert_eq!(
            sample().json(),
            "[{\"day\":\"1970-01-01T00:00:00Z\",\"state\":\"C,A\",\"users\":12.5,\"events\":3},\
             {\"day\":null,\"state\":null,\"users\":null,\"events\":-1}]\n"
        );
        assert_eq!(sample().json_lines().lines().count(), 2);
    }

    #[test]
    fn csv_quotes_and_leaves_null_empty() {
        assert_eq!(
            sample().csv(),
            "day,state,users,events\n1970-01-01T00:00:00Z,\"C,A\",12.5,3\n,,NaN,-1\n"
        );
    }

    #[test]
    fn aligned_right_aligns_numbers() {
        let text = sample().aligned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "day                   state  users  events");
        assert_eq!(lines[1], "1970-01-01T00:00:00Z  C,A     12.5       3");
        assert_eq!(lines[3], "(2 rows)");
    }
}
