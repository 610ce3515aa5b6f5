//! Where delimited-text records end, so that chunks and byte ranges are
//! cut between records, never inside a quoted field.
//!
//! RFC 4180 lets a quoted field hold newlines (`"a\nb"`), so a newline
//! ends a record only outside quotes. [`Framing::Csv`] follows the record
//! grammar of `cardinal-parse`'s general CSV path byte for byte:
//!
//! - a `"` opens a quoted field only at a field's start (after the
//!   delimiter or at the record's start); elsewhere it is data;
//! - inside quotes `""` is one quote and `"` followed by anything else
//!   closes the field;
//! - after a closing quote, text other than the delimiter or a newline is
//!   a reject, and the record ends at the next newline (where the parser
//!   resumes).
//!
//! A record whose end lies more than [`LINE_BYTES_MAX`] bytes after its
//! start (an unterminated quote, or a field too long to hold) is cut at
//! the end of its first line, where the parser's unterminated-quote
//! recovery resumes; so every cut depends only on the bytes from the
//! record's start, never on where a chunk or range happens to begin, and
//! any reader that starts at a record start finds the same records.
//!
//! Cost: a chunk without a `"` byte is cut at its last newline after one
//! `memchr`, as [`Framing::Lines`] cuts it; only the lines from the first
//! quote on are walked field by field (`memchr` to the next quote, and
//! `memchr2` over unquoted fields).

use memchr::{memchr, memchr2, memrchr};

use crate::LINE_BYTES_MAX;

/// A UTF-8 byte-order mark, which `cardinal-parse` skips at the start of an
/// input before the first record.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// How a reader finds the ends of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// Every newline ends a record (NDJSON, and text without quoting).
    #[default]
    Lines,
    /// Delimited text with RFC 4180 quoting: newlines inside quoted fields
    /// are data.
    Csv {
        /// The field delimiter (a quote opens a field only after it).
        delimiter: u8,
    },
}

/// How the records of some bytes that start at a record start end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// `bytes[..end]` are whole records, each ending with its newline;
    /// the record at `end`, if any, runs past the bytes.
    Whole(usize),
    /// `bytes[..start]` are whole records; the record at `start` does not
    /// end within [`LINE_BYTES_MAX`] bytes.
    Long(usize),
}

impl Framing {
    /// Where the whole records of `bytes` end. `bytes` starts at a record
    /// start; `input_start`: it starts the input (a byte-order mark there
    /// is skipped, as the parser skips it).
    pub(crate) fn cut(self, bytes: &[u8], input_start: bool) -> Cut {
        match self {
            Framing::Lines => Cut::Whole(memrchr(b'\n', bytes).map_or(0, |n| n + 1)),
            Framing::Csv { delimiter } => csv_cut(bytes, delimiter, input_start),
        }
    }
}

/// [`Framing::cut`] for delimited text.
fn csv_cut(bytes: &[u8], delimiter: u8, input_start: bool) -> Cut {
    let len = bytes.len();
    let mut pos = 0;
    let mut first = input_start && bytes.starts_with(UTF8_BOM);
    loop {
        let Some(k) = memchr(b'"', &bytes[pos..]) else {
            // Quote-free lines to the end: every newline ends a record.
            let end = memrchr(b'\n', &bytes[pos..]).map_or(pos, |n| pos + n + 1);
            if len - end > LINE_BYTES_MAX {
                return Cut::Long(end);
            }
            return Cut::Whole(end);
        };
        let quote = pos + k;
        // The lines before the quote's are whole quote-free records.
        pos = memrchr(b'\n', &bytes[pos..quote]).map_or(pos, |n| pos + n + 1);
        while pos <= quote {
            let from = if first && pos == 0 {
                UTF8_BOM.len()
            } else {
                pos
            };
            first = false;
            let window = &bytes[..len.min(pos + LINE_BYTES_MAX)];
            match record_end(window, from, delimiter) {
                Some(end) => pos = end,
                None if window.len() < len => return Cut::Long(pos),
                None => return Cut::Whole(pos),
            }
        }
    }
}

/// One past the newline that ends the record at `start` in `bytes`, read
/// as `cardinal-parse`'s general path reads it; `None` if the record runs
/// to the end of `bytes` (a closing quote may still follow).
///
/// Maintainer note: this must end records where `parse_record` in
/// `cardinal-parse`'s `csv.rs` does (its tests compare the two on
/// arbitrary input, read in chunks of every size).
fn record_end(bytes: &[u8], start: usize, delimiter: u8) -> Option<usize> {
    let mut p = start;
    loop {
        if bytes.get(p) == Some(&b'"') {
            p += 1;
            loop {
                let quote = p + memchr(b'"', &bytes[p..])?;
                match bytes.get(quote + 1) {
                    // `""`: one quote of data.
                    Some(b'"') => p = quote + 2,
                    // A quote at the end may be the first of `""`.
                    None => return None,
                    Some(_) => {
                        p = quote + 1;
                        break;
                    }
                }
            }
            match bytes[p] {
                b if b == delimiter => p += 1,
                // A newline (possibly after a CR) ends the record; any other
                // text after the quote is a reject that ends at the newline.
                _ => return memchr(b'\n', &bytes[p..]).map(|n| p + n + 1),
            }
        } else {
            let end = p + memchr2(delimiter, b'\n', &bytes[p..])?;
            if bytes[end] == b'\n' {
                return Some(end + 1);
            }
            p = end + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: Framing = Framing::Csv { delimiter: b',' };

    #[test]
    fn quoted_newlines_do_not_end_records() {
        let text = b"a,\"x\ny\"\nb,2\nc,\"open\n";
        assert_eq!(CSV.cut(text, false), Cut::Whole(12));
        assert_eq!(Framing::Lines.cut(text, false), Cut::Whole(text.len()));
        // Doubled quotes, a quote inside an unquoted field, CRLF.
        let text = b"\"a\"\"\nb\",5\" x\r\n\"q\"\r\nrest";
        assert_eq!(CSV.cut(text, false), Cut::Whole(19));
        // A quote at the end may be the first of a pair.
        assert_eq!(CSV.cut(b"\"a\nb\"", false), Cut::Whole(0));
        // Text after a closing quote: the record ends at the newline.
        assert_eq!(CSV.cut(b"\"a\"b\nc\n\"", false), Cut::Whole(7));
        // A byte-order mark before a quoted first field.
        assert_eq!(CSV.cut(b"\xEF\xBB\xBF\"a\n\",x", true), Cut::Whole(0));
        assert_eq!(CSV.cut(b"\xEF\xBB\xBF\"a\n\",x", false), Cut::Whole(6));
    }

    #[test]
    fn records_past_the_limit_are_long() {
        let mut text = b"a\n\"".to_vec();
        text.resize(2 + LINE_BYTES_MAX + 1, b'x');
        assert_eq!(CSV.cut(&text, false), Cut::Long(2));
        text.truncate(2 + LINE_BYTES_MAX);
        assert_eq!(CSV.cut(&text, false), Cut::Whole(2));
    }
}
