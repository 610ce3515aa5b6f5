//! The PostgreSQL front end's parameter binding from arbitrary bytes:
//! binding returns text or an error, never panics; and a text value bound
//! into a comparison stays one string literal whatever its bytes (no
//! quote in it can end the literal and add SQL): the bound query parses
//! to `a = '<the value>'`.

#![no_main]

use cardinal_route::sqlparser::ast::{self, Expr, SetExpr, Statement, Value};
use cardinal_route::sqlparser::dialect::PostgreSqlDialect;
use cardinal_route::sqlparser::parser::Parser;
use cardinal_server::net::pg::fuzzing::bind;
use libfuzzer_sys::fuzz_target;

/// Type OIDs clients bind: bool, int8, int2, int4, text, oid, float4,
/// float8, unknown, varchar, date, timestamp, timestamptz, numeric.
const OIDS: [u32; 14] = [16, 20, 21, 23, 25, 26, 700, 701, 705, 1043, 1082, 1114, 1184, 1700];

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    // Arbitrary text with up to three parameters of arbitrary types.
    let mut parts = rest.splitn(4, |&b| b == 0xff);
    let text = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let values: Vec<(Option<&[u8]>, u32, bool)> = parts
        .enumerate()
        .map(|(i, bytes)| {
            let pick = usize::from(head.rotate_left(3 * i as u32));
            let value = (pick % 7 != 0).then_some(bytes);
            (value, OIDS[pick % OIDS.len()], pick & 0x20 != 0)
        })
        .collect();
    let _ = bind(&text, &values);
    // The literal property, for a text value of any bytes.
    let value = rest;
    let Ok(bound) = bind("SELECT x FROM t WHERE a = $1", &[(Some(value), 25, false)]) else {
        assert!(std::str::from_utf8(value).is_err(), "UTF-8 text binds");
        return;
    };
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, &bound).expect("a bound query parses");
    let [Statement::Query(query)] = statements.as_slice() else {
        panic!("one statement: {bound}");
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        panic!("a select: {bound}");
    };
    let Some(Expr::BinaryOp { right, op: ast::BinaryOperator::Eq, .. }) = &select.selection else {
        panic!("a = $1: {bound}");
    };
    let Expr::Value(literal) = right.as_ref() else {
        panic!("a literal: {bound}");
    };
    let Value::SingleQuotedString(text) = &literal.value else {
        panic!("a string literal: {bound}");
    };
    assert_eq!(text.as_bytes(), value, "{bound}");
});
