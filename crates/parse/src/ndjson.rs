//! Nested NDJSON (the "v2" format): one JSON object per line, each schema
//! column found by its path of keys.
//!
//! The schema's paths form a small tree (`["user","id"]` and
//! `["user","state"]` share the `user` node). A hand-written scanner walks
//! each line once: at a key the tree knows it descends or records the
//! value's span; everything else is skipped, but still validated, so a
//! malformed line is a [`JsonSyntax`] reject however deep the damage is.
//!
//! - a string column's field is the string's content: a span into the
//!   chunk, or unescaped into the batch's side buffer if it has a
//!   backslash; numbers and `true` / `false` are their text; `null`, a
//!   missing key and a path through a non-object are absent;
//! - an object or array where a column is declared is a [`NotScalar`]
//!   reject naming the column;
//! - an object that repeats a key the schema reads (a column's key, or a
//!   key on the path to one) is a [`DuplicateKey`] reject: which value is
//!   meant is ambiguous (RFC 8259 §4), and taking the last one would mean
//!   forgetting what the first one already set below it. Other keys may
//!   repeat: nothing reads them;
//! - nesting is bounded by [`DEPTH_MAX`] (no recursion on input depth:
//!   skipped values are walked with a bit stack);
//! - every string, key or value, read or skipped, must be UTF-8 (RFC 8259
//!   §8.1), else the record is an [`InvalidUtf8`] reject; escapes are
//!   checked too, lone surrogates included. The check costs an OR per
//!   8 bytes on ASCII strings, and a UTF-8 validation of strings with a
//!   byte above 0x7F;
//! - a reject inside a member names where: the schema column, if the
//!   fault is in one's value, and the path of keys down to the member
//!   ([`Reject::path`](crate::Reject::path); inside a value the schema
//!   does not read, the member's key at the last level it knows).
//!
//! Why not `serde_json`: with borrowed `&RawValue` maps it allocates a map
//! per object and walks every value twice (once to find its end, once to
//! read it). Measured on 2026-11-21 on the 2-vCPU VM (the "Parsing"
//! section of `bench/JOURNAL.md`), on the impressions stream: about 1 GB/s
//! per core for the scanner, 0.16 GB/s for `serde_json`. `serde_json` stays as the oracle the scanner is
//! tested against (`tests/ndjson.rs`).
//!
//! [`JsonSyntax`]: crate::RejectReason::JsonSyntax
//! [`NotScalar`]: crate::RejectReason::NotScalar
//! [`DuplicateKey`]: crate::RejectReason::DuplicateKey
//! [`InvalidUtf8`]: crate::RejectReason::InvalidUtf8

use std::sync::Arc;

use cardinal_event::Schema;
use memchr::memchr;

use crate::batch::{Batch, RejectReason, Span};
use crate::structural::zero_bytes;
use crate::{DEPTH_MAX, Error, FIELDS_MAX, RECORD_BYTES_MAX, Result, UTF8_BOM};
use cardinal_event::bytes::bytes_eq;

const _: () = assert!(
    DEPTH_MAX <= 64,
    "skip_value keeps one bit per level in a u64"
);

/// One node of the path tree; node 0 is the record's root object.
#[derive(Debug, Clone)]
struct Node {
    key: Box<[u8]>,
    column: Option<usize>,
    children: Vec<usize>,
}

/// Reads NDJSON chunks into [`Batch`]es.
#[derive(Debug, Clone)]
pub struct NdjsonParser {
    nodes: Vec<Node>,
    width: usize,
    /// The schema's column names, for rejects.
    names: Vec<Arc<str>>,
    /// Scratch for keys with escapes.
    key: Vec<u8>,
    /// Per tree node: the number of the last record whose object had its
    /// key (a second one in the same record is a duplicate).
    seen: Vec<u64>,
    /// The number of the record being read, counted over every chunk.
    record: u64,
    /// The keys from a failed member up to the record's object, innermost
    /// first (content ranges in the chunk, and whether escaped).
    trail: Vec<KeySpan>,
}

/// A key's content in the chunk: start, end, and whether it has escapes.
#[derive(Debug, Clone, Copy)]
struct KeySpan {
    start: usize,
    end: usize,
    escaped: bool,
}

/// A reject reason and the column at fault, if one is.
type Fail = (RejectReason, Option<usize>);

const SYNTAX: Fail = (RejectReason::JsonSyntax, None);

impl NdjsonParser {
    /// A parser that finds each column of `schema` at its `path` (a column
    /// with an empty path is looked up by its name at the top level).
    pub fn new(schema: &Schema) -> Result<Self> {
        let width = schema.columns.len();
        if width == 0 {
            return Err(Error::EmptySchema);
        }
        if width > FIELDS_MAX {
            return Err(Error::TooManyColumns {
                columns: width,
                max: FIELDS_MAX,
            });
        }
        let mut nodes = vec![Node {
            key: Box::default(),
            column: None,
            children: Vec::new(),
        }];
        for (column, declared) in schema.columns.iter().enumerate() {
            let path = if declared.path.is_empty() {
                std::slice::from_ref(&declared.name)
            } else {
                &declared.path[..]
            };
            let problem = |problem| Error::Path {
                column: declared.name.clone(),
                path: path.to_vec(),
                problem,
            };
            if path.len() >= DEPTH_MAX {
                return Err(problem("is deeper than DEPTH_MAX"));
            }
            let mut node = 0;
            for key in path {
                if nodes[node].column.is_some() {
                    return Err(problem("passes through another column's value"));
                }
                let found = nodes[node]
                    .children
                    .iter()
                    .copied()
                    .find(|&c| *nodes[c].key == *key.as_bytes());
                node = match found {
                    Some(child) => child,
                    None => {
                        nodes.push(Node {
                            key: key.as_bytes().into(),
                            column: None,
                            children: Vec::new(),
                        });
                        let child = nodes.len() - 1;
                        nodes[node].children.push(child);
                        child
                    }
                };
            }
            if nodes[node].column.is_some() || !nodes[node].children.is_empty() {
                return Err(problem("is another column's path or a prefix of one"));
            }
            nodes[node].column = Some(column);
        }
        Ok(Self {
            width,
            names: schema
                .columns
                .iter()
                .map(|c| c.name.as_str().into())
                .collect(),
            key: Vec::new(),
            seen: vec![u64::MAX; nodes.len()],
            record: 0,
            trail: Vec::new(),
            nodes,
        })
    }

    /// Parses the batch's chunk, replacing its records and rejects.
    #[allow(clippy::cast_possible_truncation)]
    pub fn parse(&mut self, batch: &mut Batch) {
        batch.begin(self.width);
        let Batch {
            chunk,
            fields,
            starts,
            lines,
            side,
            rejects,
            ..
        } = batch;
        let data = chunk.bytes();
        // A byte-order mark opening the input is not part of its first
        // record.
        let mut pos = if chunk.offset == 0 && data.starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        let mut line = 0u32;
        while pos < data.len() {
            let end = memchr(b'\n', &data[pos..]).map_or(data.len(), |k| pos + k);
            let blank = data[pos..end]
                .iter()
                .all(|b| matches!(b, b' ' | b'\t' | b'\r'));
            if end - pos > RECORD_BYTES_MAX {
                let reason = RejectReason::RecordBytesMax;
                rejects.push(Batch::reject_at(chunk, pos, line, None, reason));
            } else if !blank {
                let base = fields.len();
                let side_mark = side.len();
                fields.resize(base + self.width, Span::ABSENT);
                self.record += 1;
                self.trail.clear();
                let mut scan = Scan {
                    data,
                    pos,
                    end,
                    side,
                    key: &mut self.key,
                    seen: &mut self.seen,
                    record: self.record,
                    trail: &mut self.trail,
                };
                match scan.record(&self.nodes, &mut fields[base..]) {
                    Ok(()) => {
                        // Offsets and lines fit 31 bits (Batch::begin).
                        starts.push(pos as u32);
                        lines.push(line);
                    }
                    Err((reason, column)) => {
                        fields.truncate(base);
                        side.truncate(side_mark);
                        let mut reject = Batch::reject_at(chunk, pos, line, column, reason);
                        reject.path = path_of(data, &self.trail);
                        rejects.push(reject);
                    }
                }
            }
            pos = end + 1;
            line += 1;
        }
        batch.name_rejects(|column| self.names.get(column).cloned());
    }
}

/// The keys of `trail` (innermost first) as a path from the record's
/// object, `user.geo.state`; `None` if empty. Keys are unescaped, and any
/// byte that is not UTF-8 becomes U+FFFD.
#[cold]
fn path_of(data: &[u8], trail: &[KeySpan]) -> Option<Arc<str>> {
    if trail.is_empty() {
        return None;
    }
    let mut path = String::new();
    let mut key = Vec::new();
    for (i, span) in trail.iter().rev().enumerate() {
        if i > 0 {
            path.push('.');
        }
        key.clear();
        if span.escaped {
            unescape(&data[span.start..span.end], &mut key);
        } else {
            key.extend_from_slice(&data[span.start..span.end]);
        }
        path.push_str(&String::from_utf8_lossy(&key));
    }
    Some(path.into())
}

/// A cursor over one line, `pos..end`.
struct Scan<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    side: &'a mut Vec<u8>,
    key: &'a mut Vec<u8>,
    /// `NdjsonParser::seen`.
    seen: &'a mut [u64],
    /// `NdjsonParser::record`: this record's number.
    record: u64,
    /// `NdjsonParser::trail`.
    trail: &'a mut Vec<KeySpan>,
}

impl Scan<'_> {
    fn record(&mut self, nodes: &[Node], row: &mut [Span]) -> Result<(), Fail> {
        self.whitespace();
        if self.peek() != Some(b'{') {
            return Err(self.not_an_object());
        }
        self.pos += 1;
        self.object(nodes, 0, 1, row)?;
        self.whitespace();
        if self.pos != self.end {
            return Err(SYNTAX);
        }
        Ok(())
    }

    /// Why a line that does not start with `{` is refused: a JSON value
    /// of another kind (an array, string, number or literal) is not an
    /// object; anything else (`not json`) is malformed.
    #[cold]
    fn not_an_object(&self) -> Fail {
        let rest = self.data[self.pos..self.end].trim_ascii_end();
        let value = match rest.first() {
            Some(b'[' | b'"' | b'-' | b'0'..=b'9') => true,
            _ => matches!(rest, b"true" | b"false" | b"null"),
        };
        if value {
            (RejectReason::NotAnObject, None)
        } else {
            SYNTAX
        }
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        (self.pos < self.end).then(|| self.data[self.pos])
    }

    #[inline(always)]
    fn whitespace(&mut self) {
        while self.pos < self.end && matches!(self.data[self.pos], b' ' | b'\t' | b'\r') {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), Fail> {
        if self.peek() != Some(byte) {
            return Err(SYNTAX);
        }
        self.pos += 1;
        Ok(())
    }

    /// The members of an object whose `{` was just read, at nesting
    /// `depth`, matched against the children of tree node `node`.
    fn object(
        &mut self,
        nodes: &[Node],
        node: usize,
        depth: usize,
        row: &mut [Span],
    ) -> Result<(), Fail> {
        debug_assert!(depth <= DEPTH_MAX);
        self.whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.whitespace();
            if self.peek() != Some(b'"') {
                return Err(SYNTAX);
            }
            let (child, key) = self.key_child(nodes, node)?;
            let member = self.member(nodes, child, depth, row);
            self.whitespace();
            let next = match member {
                Err(fail) => Err(fail),
                Ok(()) => match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        Ok(false)
                    }
                    Some(b'}') => {
                        self.pos += 1;
                        Ok(true)
                    }
                    _ => Err(SYNTAX),
                },
            };
            match next {
                Ok(false) => {}
                Ok(true) => return Ok(()),
                Err(fail) => {
                    self.trail.push(key);
                    return Err(fail);
                }
            }
        }
    }

    /// A member's colon and value, after its key, which names tree node
    /// `child` if any. A second key of the same node in this record is a
    /// duplicate.
    #[inline(always)]
    fn member(
        &mut self,
        nodes: &[Node],
        child: Option<usize>,
        depth: usize,
        row: &mut [Span],
    ) -> Result<(), Fail> {
        self.whitespace();
        self.expect(b':')?;
        self.whitespace();
        let Some(child) = child else {
            return self.skip_value(depth);
        };
        let column = nodes[child].column;
        if std::mem::replace(&mut self.seen[child], self.record) == self.record {
            return Err((RejectReason::DuplicateKey, column));
        }
        match column {
            Some(column) => self
                .leaf(column, row)
                .map_err(|(reason, at)| (reason, at.or(Some(column)))),
            None if self.peek() == Some(b'{') => {
                if depth + 1 > DEPTH_MAX {
                    return Err((RejectReason::DepthMax, None));
                }
                self.pos += 1;
                self.object(nodes, child, depth + 1, row)
            }
            None => self.skip_value(depth),
        }
    }

    /// Reads a key and returns the child of `node` it names, if any, and
    /// where the key is.
    fn key_child(&mut self, nodes: &[Node], node: usize) -> Result<(Option<usize>, KeySpan), Fail> {
        let (start, end, escaped) = self.string()?;
        let span = KeySpan {
            start,
            end,
            escaped,
        };
        let children = &nodes[node].children;
        if children.is_empty() {
            return Ok((None, span));
        }
        let key: &[u8] = if escaped {
            self.key.clear();
            unescape(&self.data[start..end], self.key);
            self.key
        } else {
            &self.data[start..end]
        };
        // Word compares, not a `memcmp` call per candidate (10% of W1's
        // schema read from NDJSON).
        let child = children
            .iter()
            .copied()
            .find(|&c| bytes_eq(&nodes[c].key, key));
        Ok((child, span))
    }

    /// A declared column's value.
    fn leaf(&mut self, column: usize, row: &mut [Span]) -> Result<(), Fail> {
        let start = self.pos;
        row[column] = match self.peek() {
            Some(b'"') => {
                let (start, end, escaped) = self.string()?;
                if escaped {
                    let mark = self.side.len();
                    unescape(&self.data[start..end], self.side);
                    Span::side(mark, self.side.len())
                } else {
                    Span::chunk(start, end)
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
                Span::chunk(start, self.pos)
            }
            Some(b't') => {
                self.literal(b"true")?;
                Span::chunk(start, self.pos)
            }
            Some(b'f') => {
                self.literal(b"false")?;
                Span::chunk(start, self.pos)
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Span::ABSENT
            }
            Some(b'{' | b'[') => return Err((RejectReason::NotScalar, Some(column))),
            _ => return Err(SYNTAX),
        };
        Ok(())
    }

    /// A string at its opening quote: returns its content's range and
    /// whether it has escapes, after checking them.
    fn string(&mut self) -> Result<(usize, usize, bool), Fail> {
        debug_assert_eq!(self.peek(), Some(b'"'));
        self.pos += 1;
        let start = self.pos;
        let mut escaped = false;
        // The OR of the bytes passed over: its high bits say whether the
        // string may hold bytes that are not ASCII (whole words are ORed,
        // bytes past a stop included: a false alarm costs one check).
        let mut high = 0u64;
        loop {
            // Eight bytes at a time while a word fits, then byte by byte.
            while let Some(word) = self.data[self.pos..self.end].first_chunk::<8>() {
                let word = u64::from_le_bytes(*word);
                high |= word;
                let stops = string_stops(word);
                if stops != 0 {
                    self.pos += (stops.trailing_zeros() / 8) as usize;
                    break;
                }
                self.pos += 8;
            }
            while self.pos < self.end {
                let b = self.data[self.pos];
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                high |= u64::from(b);
                self.pos += 1;
            }
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    let end = self.pos - 1;
                    if high & 0x8080_8080_8080_8080 != 0
                        && std::str::from_utf8(&self.data[start..end]).is_err()
                    {
                        return Err((RejectReason::InvalidUtf8, None));
                    }
                    return Ok((start, end, escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                _ => return Err(SYNTAX),
            }
        }
    }

    /// Checks one escape at its backslash and steps over it.
    fn escape(&mut self) -> Result<(), Fail> {
        const BAD: Fail = (RejectReason::BadEscape, None);
        match self.data[self.pos + 1..self.end].first() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.pos += 2;
                Ok(())
            }
            Some(b'u') => {
                let unit = hex4(&self.data[self.pos + 2..self.end]).ok_or(BAD)?;
                self.pos += 6;
                match unit {
                    0xD800..=0xDBFF => {
                        let rest = &self.data[self.pos..self.end];
                        let low = match rest {
                            [b'\\', b'u', tail @ ..] => hex4(tail),
                            _ => None,
                        };
                        if !matches!(low, Some(0xDC00..=0xDFFF)) {
                            return Err(BAD);
                        }
                        self.pos += 6;
                        Ok(())
                    }
                    0xDC00..=0xDFFF => Err(BAD),
                    _ => Ok(()),
                }
            }
            _ => Err(BAD),
        }
    }

    /// A number per RFC 8259 §6.
    fn number(&mut self) -> Result<(), Fail> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(SYNTAX),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), Fail> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            return Err(SYNTAX);
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Fail> {
        if !self.data[self.pos..self.end].starts_with(word) {
            return Err(SYNTAX);
        }
        self.pos += word.len();
        Ok(())
    }

    /// A key and its colon, inside a skipped object.
    fn member_key(&mut self) -> Result<(), Fail> {
        if self.peek() != Some(b'"') {
            return Err(SYNTAX);
        }
        self.string()?;
        self.whitespace();
        self.expect(b':')
    }

    /// Steps over one value inside an object at nesting `depth`, checking
    /// its syntax. Iterative: bit `i` of `objects` says whether the
    /// container `i + 1` levels down is an object (else an array).
    fn skip_value(&mut self, depth: usize) -> Result<(), Fail> {
        let mut objects = 0u64;
        let mut level = 0usize;
        'value: loop {
            self.whitespace();
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    if depth + level + 1 > DEPTH_MAX {
                        return Err((RejectReason::DepthMax, None));
                    }
                    self.pos += 1;
                    let is_object = open == b'{';
                    if is_object {
                        objects |= 1 << level;
                    } else {
                        objects &= !(1 << level);
                    }
                    level += 1;
                    self.whitespace();
                    let close = if is_object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        level -= 1;
                    } else {
                        if is_object {
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                _ => return Err(SYNTAX),
            }
            // After a value: close containers or go on to the next member.
            loop {
                if level == 0 {
                    return Ok(());
                }
                self.whitespace();
                let is_object = objects >> (level - 1) & 1 == 1;
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        if is_object {
                            self.whitespace();
                            self.member_key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if is_object => {
                        self.pos += 1;
                        level -= 1;
                    }
                    Some(b']') if !is_object => {
                        self.pos += 1;
                        level -= 1;
                    }
                    _ => return Err(SYNTAX),
                }
            }
        }
    }
}

/// Four hex digits at the start of `bytes`.
fn hex4(bytes: &[u8]) -> Option<u32> {
    let digits = bytes.get(..4)?;
    digits.iter().try_fold(0u32, |acc, &b| {
        let digit = char::from(b).to_digit(16)?;
        Some(acc << 4 | digit)
    })
}

/// Appends the unescaped UTF-8 of a string's content, already checked by
/// `Scan::escape`.
fn unescape(content: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < content.len() {
        let Some(k) = memchr(b'\\', &content[i..]) else {
            out.extend_from_slice(&content[i..]);
            return;
        };
        out.extend_from_slice(&content[i..i + k]);
        i += k;
        let byte = match content[i + 1] {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let unit = hex4(&content[i + 2..]).expect("checked escape");
                i += 6;
                let code = if (0xD800..=0xDBFF).contains(&unit) {
                    let low = hex4(&content[i + 2..]).expect("checked surrogate pair");
                    i += 6;
                    0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else {
                    unit
                };
                let c = char::from_u32(code).expect("checked: not a lone surrogate");
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                continue;
            }
            other => other,
        };
        out.push(byte);
        i += 2;
    }
}

/// The high bit of each byte of `word` (little-endian) that ends a run
/// of plain string bytes: a quote, a backslash or a control byte (below
/// 0x20), and no other bit ([`zero_bytes`] is exact per byte).
#[inline(always)]
fn string_stops(word: u64) -> u64 {
    const LOW_BITS: u64 = 0x0101_0101_0101_0101;
    zero_bytes(word ^ (LOW_BITS * u64::from(b'"')))
        | zero_bytes(word ^ (LOW_BITS * u64::from(b'\\')))
        | zero_bytes(word & (LOW_BITS * 0xe0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value in every lane, beside bytes that stop and bytes
    /// that do not: a lane's bit is set exactly for a quote, a backslash
    /// or a byte below 0x20.
    #[test]
    fn string_stops_are_exact() {
        for byte in 0..=255u8 {
            for lane in 0..8 {
                for filler in [b'a', b'"', 0x1f, 0x20, 0xff] {
                    let mut bytes = [filler; 8];
                    bytes[lane] = byte;
                    let stops = string_stops(u64::from_le_bytes(bytes));
                    for (i, &b) in bytes.iter().enumerate() {
                        let stop = b == b'"' || b == b'\\' || b < 0x20;
                        assert_eq!(stops >> (8 * i) & 0xff, if stop { 0x80 } else { 0 });
                    }
                }
            }
        }
    }

    #[test]
    fn unescapes_every_form() {
        let mut out = Vec::new();
        unescape(br#"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00z"#, &mut out);
        assert_eq!(out, "a\"b\\c/d\u{8}\u{c}\n\r\té😀z".as_bytes());
    }

    #[test]
    fn hex_digits() {
        assert_eq!(hex4(b"00e9"), Some(0xe9));
        assert_eq!(hex4(b"DBFFx"), Some(0xdbff));
        assert_eq!(hex4(b"12g4"), None);
        assert_eq!(hex4(b"123"), None);
    }
}
