//! The errors of `cardinal-route`: declarations that do not compile, and
//! records an expression cannot evaluate.
//!
//! A declaration error points at the offending text:
//!
//! ```text
//! line 2, column 30: unknown column "sate" in stream impressions (it has ts, user_id, state)
//!   |
//! 2 | CREATE SUMMARY s AS SELECT sate, count(*) FROM impressions GROUP BY 1;
//!   |                            ^^^^
//! ```
//!
//! Lines and columns count from 1, columns in characters (as sqlparser's
//! tokenizer counts them), so the caret lines up under the text in any
//! UTF-8 terminal.

use cardinal_event::ValueError;

/// A declaration that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text at `line`, `column` is outside the dialect or does not
    /// type-check. `message` says what is wrong and what is supported;
    /// `snippet` quotes the line with a caret under the offending text.
    #[error("line {line}, column {column}: {message}\n{snippet}")]
    At {
        /// 1-based line.
        line: u64,
        /// 1-based column, in characters.
        column: u64,
        /// What is wrong, and what would be accepted.
        message: String,
        /// The quoted line and the caret.
        snippet: String,
    },
    /// The declarations are longer than [`crate::DECLARATION_BYTES_MAX`].
    #[error("declarations are {bytes} bytes long; the limit is {max} bytes")]
    TooLong {
        /// Their length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

impl Error {
    /// The message without position or snippet.
    pub fn message(&self) -> String {
        match self {
            Error::At { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// Why an expression could not be evaluated over one record. Small and
/// `Copy` so that the ingest loop can count records by reason (see
/// [`EvalError::kind_index`]) without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The field's bytes are not its declared type. Shown with the
    /// column counted from 1, as the parsers' rejects show theirs.
    #[error("column {}: {reason}", .column + 1)]
    Field {
        /// The column index in the stream schema, from 0.
        column: usize,
        /// What the bytes are not.
        reason: ValueError,
    },
    /// The record has no event time, so it has no bucket.
    #[error("column {}: no event time", .column + 1)]
    MissingTime {
        /// The time column's index, from 0.
        column: usize,
    },
    /// Integer arithmetic overflowed 64 bits.
    #[error("integer overflow")]
    Overflow,
    /// An integer was divided by zero.
    #[error("integer division by zero")]
    DivisionByZero,
}

impl EvalError {
    /// How many distinct [`EvalError::kind_index`] values there are.
    pub const KIND_COUNT: usize = 4;

    /// The schema column at fault (from 0), when one is.
    pub fn column(&self) -> Option<usize> {
        match *self {
            EvalError::Field { column, .. } | EvalError::MissingTime { column } => Some(column),
            EvalError::Overflow | EvalError::DivisionByZero => None,
        }
    }

    /// A dense index per kind, for an array of counters.
    pub fn kind_index(&self) -> usize {
        match self {
            EvalError::Field { .. } => 0,
            EvalError::MissingTime { .. } => 1,
            EvalError::Overflow => 2,
            EvalError::DivisionByZero => 3,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The most characters of a source line [`snippet`] shows: a window
/// around the caret, so a refusal of a 40 KB one-line expression quotes
/// a couple of screen lines of it, not all of it. A declaration's lines
/// are shorter (the longest in the test cases is 251 characters) and
/// are shown whole.
pub(crate) const SNIPPET_CHARS_MAX: usize = 256;

/// Renders `line | text` and a caret line under characters
/// `column..column + width` (1-based, in characters). A line longer than
/// [`SNIPPET_CHARS_MAX`] is cut to a window that starts a little before
/// the caret, with `...` where text was left out.
pub(crate) fn snippet(source: &str, line: u64, column: u64, width: u64) -> String {
    let index = usize::try_from(line.saturating_sub(1)).unwrap_or(usize::MAX);
    let text = source.lines().nth(index).unwrap_or("");
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    let chars: Vec<char> = text.chars().collect();
    let skip = usize::try_from(column.saturating_sub(1))
        .unwrap_or(usize::MAX)
        .min(chars.len());
    // The window: all of a short line; else from a sixth of the window
    // before the caret, at most SNIPPET_CHARS_MAX characters.
    let (start, end) = if chars.len() <= SNIPPET_CHARS_MAX {
        (0, chars.len())
    } else {
        let start = skip
            .saturating_sub(SNIPPET_CHARS_MAX / 6)
            .min(chars.len() - SNIPPET_CHARS_MAX);
        (start, start + SNIPPET_CHARS_MAX)
    };
    assert!(start <= skip && end - start <= SNIPPET_CHARS_MAX);
    let before = if start > 0 { "..." } else { "" };
    let after = if end < chars.len() { "..." } else { "" };
    let shown: String = chars[start..end].iter().collect();
    // Tabs stay tabs under the caret so that it lines up however they
    // render; every other character becomes a space.
    let pad: String = " ".repeat(before.len())
        + &chars[start..skip]
            .iter()
            .map(|&c| if c == '\t' { '\t' } else { ' ' })
            .collect::<String>();
    let available = end.saturating_sub(skip).max(1);
    let width = usize::try_from(width.max(1))
        .unwrap_or(usize::MAX)
        .min(available);
    format!(
        "{gutter} |\n{number} | {before}{shown}{after}\n{gutter} | {pad}{}",
        "^".repeat(width)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_under_the_text() {
        let source = "first\nSELECT\tsate FROM t";
        assert_eq!(
            snippet(source, 2, 8, 4),
            "  |\n2 | SELECT\tsate FROM t\n  |       \t^^^^"
        );
        // Past the end of the line: one caret after the last character.
        assert_eq!(snippet("ab", 1, 3, 9), "  |\n1 | ab\n  |   ^");
    }

    #[test]
    fn a_long_line_is_cut_to_a_window_around_the_caret() {
        // Issue 43, item 16: an 8,000-term expression's refusal quoted
        // the whole 40 KB line.
        let line = "a = 1 OR ".repeat(8_000);
        let at = 5_000 * 9 + 1;
        let shown = snippet(&line, 1, at, 1);
        assert!(shown.len() < 3 * SNIPPET_CHARS_MAX, "{shown}");
        let lines: Vec<&str> = shown.lines().collect();
        let text = lines[1].strip_prefix("1 | ").expect("the source line");
        assert!(text.starts_with("...") && text.ends_with("..."), "{text}");
        let caret = lines[2].find('^').expect("a caret");
        // The caret stands under the character it names.
        assert_eq!(&lines[1][caret..caret + 5], "a = 1");
        // The start and the end of a long line are shown without dots on
        // their own side.
        let first = snippet(&line, 1, 1, 1);
        assert!(first.lines().nth(1).expect("line").starts_with("1 | a = 1"));
        let last = snippet(&line, 1, 72_000, 1);
        assert!(last.lines().nth(1).expect("line").starts_with("1 | ..."));
    }

    #[test]
    fn eval_kinds_are_dense() {
        let kinds = [
            EvalError::Field {
                column: 0,
                reason: ValueError::BigInt,
            },
            EvalError::MissingTime { column: 0 },
            EvalError::Overflow,
            EvalError::DivisionByZero,
        ];
        for (i, kind) in kinds.iter().enumerate() {
            assert_eq!(kind.kind_index(), i);
        }
        assert_eq!(kinds.len(), EvalError::KIND_COUNT);
    }
}
