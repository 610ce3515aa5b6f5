//! Rejects as the engine words and counts them: the reasons it gives
//! besides the parser's and the evaluator's, where a rejected record is
//! ([`where_`]), the stable code of each reason ([`reject_code`]) and how
//! many reject lines are shown and kept. A leaf: it names nothing else of
//! the crate.

/// Reject lines a batch's receipt keeps (`Fold::kept_rejects`); the
/// rest are counted.
pub(crate) const REJECTS_KEPT_MAX: usize = 10;

/// Reject lines printed to stderr before only counting.
pub(crate) const REJECTS_SHOWN_MAX: u64 = 10;

/// The reject reason of a line past the reader's length limit, whichever
/// reader met it (counts are kept per reason, so both must say the same).
pub(crate) const LINE_TOO_LONG: &str = "line too long";

/// The reject reason of an input whose bytes could not be read past some
/// point (corrupt or cut compressed data, a read error).
pub(crate) const INPUT_CUT_SHORT: &str = "input unreadable past this point";

/// The reject reason of a CSV input whose header does not fit the stream
/// (lacks a declared column, names one twice, or is malformed): none of
/// that input is read, and the run goes on with the others.
pub(crate) const BAD_HEADER: &str = "header does not fit the stream";

/// Where a rejected record is, for its reject line: its line number, or
/// its byte offset when the input has no lines.
pub(crate) fn where_(record: &cardinal_parse::RecordRef<'_>) -> String {
    match record.line() {
        Some(line) => line.to_string(),
        None => format!("byte {}", record.offset()),
    }
}

/// `e` as a reject line shows it: its column counted from 1 and named
/// (`column 2 (user_id): not a BIGINT`).
pub(crate) fn eval_text(e: &cardinal_route::EvalError, schema: &cardinal_event::Schema) -> String {
    match e.column().and_then(|c| Some((c, schema.columns.get(c)?))) {
        Some((c, column)) => format!("column {} ({}): {}", c + 1, column.name, eval_reason(e)),
        None => e.to_string(),
    }
}

/// The reason of `e` without its column: what rejects are counted by.
pub(crate) fn eval_reason(e: &cardinal_route::EvalError) -> String {
    let text = e.to_string();
    // "column N: reason" -> the reason, so counts group by kind.
    text.split_once(": ")
        .map_or(text.clone(), |(_, reason)| reason.to_string())
}

/// The stable, snake_case code of a reject reason as [`Counts`](crate::Counts) keys it
/// (`rejects_by_reason`): what `/metrics` labels rejects with, where the
/// reasons' wording may change. Every reason the engine gives has its own
/// code (a test walks them); `other` is for none of them.
pub fn reject_code(reason: &str) -> &'static str {
    use cardinal_event::ValueError;
    use cardinal_parse::RejectReason;
    let parsed = RejectReason::ALL
        .iter()
        .find(|r| r.to_string() == reason)
        .map(|r| match r {
            RejectReason::FieldsMax => "fields_max",
            RejectReason::RecordBytesMax => "record_bytes_max",
            RejectReason::TooFewFields => "too_few_fields",
            RejectReason::TooManyFields => "too_many_fields",
            RejectReason::UnterminatedQuote => "unterminated_quote",
            RejectReason::TextAfterQuote => "text_after_quote",
            RejectReason::NotAnObject => "not_an_object",
            RejectReason::JsonSyntax => "json_syntax",
            RejectReason::BadEscape => "bad_escape",
            RejectReason::NotScalar => "not_scalar",
            RejectReason::DepthMax => "depth_max",
            RejectReason::DuplicateKey => "duplicate_key",
            RejectReason::InvalidUtf8 => "invalid_utf8",
            _ => "other",
        });
    if let Some(code) = parsed {
        return code;
    }
    let values = [
        (ValueError::BigInt, "not_bigint"),
        (ValueError::Double, "not_double"),
        (ValueError::Bool, "not_boolean"),
        (ValueError::Timestamp, "not_timestamp"),
        (ValueError::OutOfRange, "out_of_range"),
    ];
    if let Some((_, code)) = values.iter().find(|(v, _)| v.to_string() == reason) {
        return code;
    }
    let evaluated = [
        (
            cardinal_route::EvalError::MissingTime { column: 0 },
            "no_event_time",
        ),
        (cardinal_route::EvalError::Overflow, "integer_overflow"),
        (
            cardinal_route::EvalError::DivisionByZero,
            "division_by_zero",
        ),
    ];
    if let Some((_, code)) = evaluated.iter().find(|(e, _)| eval_reason(e) == reason) {
        return code;
    }
    match reason {
        KEY_TOO_LONG => "key_too_long",
        LINE_TOO_LONG => "line_too_long",
        INPUT_CUT_SHORT => "input_unreadable",
        BAD_HEADER => "bad_header",
        _ => "other",
    }
}

/// Every code [`reject_code`] gives, `other` last.
pub const REJECT_CODES: [&str; 26] = [
    "fields_max",
    "record_bytes_max",
    "too_few_fields",
    "too_many_fields",
    "unterminated_quote",
    "text_after_quote",
    "not_an_object",
    "json_syntax",
    "bad_escape",
    "not_scalar",
    "depth_max",
    "duplicate_key",
    "invalid_utf8",
    "not_bigint",
    "not_double",
    "not_boolean",
    "not_timestamp",
    "out_of_range",
    "no_event_time",
    "integer_overflow",
    "division_by_zero",
    "key_too_long",
    "line_too_long",
    "input_unreadable",
    "bad_header",
    "other",
];

/// The reject reason of a record whose group key is longer than
/// `rollup::KEY_BYTES_MAX`.
pub(crate) const KEY_TOO_LONG: &str = "group key too long";

#[cfg(test)]
mod reject_code_tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_code() {
        use cardinal_event::ValueError;
        let mut reasons: Vec<String> = cardinal_parse::RejectReason::ALL
            .iter()
            .map(ToString::to_string)
            .collect();
        for value in [
            ValueError::BigInt,
            ValueError::Double,
            ValueError::Bool,
            ValueError::Timestamp,
            ValueError::OutOfRange,
        ] {
            let field = cardinal_route::EvalError::Field {
                column: 3,
                reason: value,
            };
            reasons.push(eval_reason(&field));
        }
        for e in [
            cardinal_route::EvalError::MissingTime { column: 2 },
            cardinal_route::EvalError::Overflow,
            cardinal_route::EvalError::DivisionByZero,
        ] {
            reasons.push(eval_reason(&e));
        }
        for constant in [KEY_TOO_LONG, LINE_TOO_LONG, INPUT_CUT_SHORT, BAD_HEADER] {
            reasons.push(constant.to_owned());
        }
        let mut codes: Vec<&str> = reasons.iter().map(|r| reject_code(r)).collect();
        assert!(!codes.contains(&"other"), "{reasons:?} -> {codes:?}");
        assert_eq!(codes.len(), REJECT_CODES.len() - 1);
        for code in &codes {
            assert!(REJECT_CODES.contains(code), "{code}");
            assert!(
                code.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{code} is snake_case"
            );
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), REJECT_CODES.len() - 1, "codes are distinct");
        assert_eq!(reject_code("something new"), "other");
    }
}
