//! RFC 5424 and RFC 3164 (BSD) syslog headers, parsed without allocation
//! into a [`Message`] that borrows from the received bytes.
//!
//! # Which dialect
//!
//! A message that starts `<PRI>1 ` (a valid PRI, version `1`, a space) is
//! RFC 5424. `<PRI>` and another version number followed by a space and a
//! timestamp or `-` is refused ([`HeaderError::Version`]): it claims a
//! protocol this parser does not know. Anything else is read as RFC 3164.
//!
//! Before parsing, trailing `\r` and `\n` bytes are dropped from the whole
//! message (what a line-framed sender leaves on it), so they end neither
//! the body nor a header field. A UTF-8 byte-order mark opening the body is
//! dropped too (RFC 5424's `MSG-UTF8`; some 3164 senders copy it).
//!
//! # PRI
//!
//! `<`, one to three digits, `>`; the value is `facility * 8 + severity`,
//! at most [`PRI_MAX`] (191). Leading zeros are accepted (`<013>`). A
//! message that starts with `<` but has no valid PRI is refused
//! ([`HeaderError::Pri`]): it is a broken header rather than text. A 3164
//! message without any PRI gets [`PRI_DEFAULT`] (13: `user.notice`), as
//! RFC 3164 §4.3.3 tells a relay to assume.
//!
//! # RFC 5424
//!
//! `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA[ MSG]`,
//! fields separated by exactly one space, per the RFC's ABNF:
//!
//! - TIMESTAMP: `-`, or `YYYY-MM-DDThh:mm:ss[.f]` followed by `Z` or
//!   `±hh:mm`, with one to [`FRACTION_DIGITS_MAX`] fraction digits;
//!   converted to UTC epoch milliseconds (digits past the millisecond are
//!   truncated). A `z` is accepted for `Z` as RFC 3339 allows; a leap
//!   second (`:60`) is accepted as [`Timestamp::parse`] accepts it, although
//!   RFC 5424 says senders must not use one.
//! - HOSTNAME, APP-NAME, PROCID, MSGID: `-` (absent) or printable US-ASCII
//!   (33..=126) of at most [`HOSTNAME_LEN_MAX`], [`APP_NAME_LEN_MAX`],
//!   [`PROCID_LEN_MAX`] and [`MSGID_LEN_MAX`] bytes; an empty field (two
//!   spaces) is refused.
//! - STRUCTURED-DATA: `-`, or one or more `[SD-ID *(SP NAME="VALUE")]`
//!   elements with nothing between them. SD-ID and PARAM-NAME are 1 to
//!   [`SD_NAME_LEN_MAX`] printable US-ASCII bytes other than `=`, space,
//!   `]` and `"`. In a PARAM-VALUE, `\"`, `\\` and `\]` are escapes and any
//!   other backslash is itself (RFC 5424 §6.3.3); an unescaped `]` is
//!   tolerated inside the quotes. The text must be UTF-8. It is kept raw
//!   ([`Message::structured_data`]); [`Message::sd_param`] reads one value.
//! - MSG: after the structured data, a space and the rest of the bytes, or
//!   nothing (the message may end right after the structured data). Its
//!   bytes are not checked: RFC 5424 allows any octets without a BOM.
//!
//! # RFC 3164 and what real senders put in its frame
//!
//! `<PRI>TIMESTAMP HOSTNAME TAG[PID]: MSG`, with these tolerances:
//!
//! - TIMESTAMP: `Mmm dd hh:mm:ss` with the day space-padded (`Nov  1`),
//!   zero-padded (`Nov 01`) or bare (`Nov 1`), month names in any case.
//!   Also accepted: a year after the day (`Mmm dd yyyy hh:mm:ss`, as some
//!   devices send); a fraction of up to [`FRACTION_DIGITS_MAX_3164`]
//!   digits; Cisco IOS's `*` or `.` clock-state mark before it, ` UTC` or
//!   ` GMT` after it, and a `:` right after it; and an RFC 3339 timestamp
//!   (as rsyslog's `RSYSLOG_ForwardFormat` and `RSYSLOG_FileFormat` send,
//!   up to 9 fraction digits, with its offset applied).
//! - Times without an offset are taken as UTC: the frame carries no zone
//!   and the receiver cannot know the sender's.
//! - Without a year, the year is the latest of `now`'s year + 1, `now`'s
//!   year and `now`'s year - 1 that puts the time at most
//!   [`FUTURE_DAYS_MAX`] days after `now` (so `Dec 31` received on Jan 2
//!   is last year's, and `Jan 1 00:01` received on Dec 31 at 23:59 from a
//!   sender whose clock is fast is next year's). A date none of those
//!   years has (`Feb 29` far from a leap year) is refused.
//! - Cisco IOS's sequence number before the timestamp (`<189>42: *Mar  1
//!   ...`) is skipped when a timestamp follows it.
//! - A timestamp-shaped text with impossible values (`Feb 30`, `25:00:00`)
//!   is refused ([`HeaderError::Timestamp`]); text that does not have a
//!   timestamp's shape is no timestamp: as RFC 3164 §4.3.2 says, all of it
//!   is then content, with no hostname (a TAG is still looked for).
//! - HOSTNAME: the word after the timestamp, printable US-ASCII of at most
//!   [`HOSTNAME_LEN_MAX`] bytes, unless that word is a TAG: then the
//!   hostname is missing (as in local `/dev/log` messages and Cisco's).
//!   `Oct 11 22:14:15 Use the BFG!` thus reads `Use` as the hostname: the
//!   frame cannot tell, and rsyslog reads it the same way.
//! - TAG: a word of 1 to [`TAG_LEN_MAX`] printable US-ASCII bytes other
//!   than `:`, `[` and `]`, followed by `:` and a space (or the end), or by
//!   `[PID]` (1 to [`PROCID_LEN_MAX`] bytes) with or without the `:`. The
//!   word is [`Message::app_name`], the PID [`Message::procid`]. The colon
//!   must be followed by a space so that an IPv6 hostname (`fe80::1`) is
//!   not read as a tag. A word that is not a TAG leaves app_name absent
//!   and stays in the body.
//! - MSG: the rest, after one space.
//!
//! A 3164 message is never refused for its content: only an empty
//! message, a bad PRI, another protocol version, or a timestamp with
//! impossible values is refused.

use std::borrow::Cow;

use cardinal_event::Timestamp;

/// The largest PRI: facility 23 (local7) times 8 plus severity 7 (debug),
/// per RFC 5424 §6.2.1.
pub const PRI_MAX: u8 = 191;

/// The PRI of a 3164 message that has none: 13, `user.notice`, which
/// RFC 3164 §4.3.3 tells a relay to assume.
pub const PRI_DEFAULT: u8 = 13;

/// RFC 5424's limit on HOSTNAME (`1*255PRINTUSASCII`), the longest FQDN;
/// applied to 3164 hostnames too.
pub const HOSTNAME_LEN_MAX: usize = 255;

/// RFC 5424's limit on APP-NAME (`1*48PRINTUSASCII`).
pub const APP_NAME_LEN_MAX: usize = 48;

/// RFC 5424's limit on PROCID (`1*128PRINTUSASCII`); applied to a 3164
/// TAG's `[PID]` too.
pub const PROCID_LEN_MAX: usize = 128;

/// RFC 5424's limit on MSGID (`1*32PRINTUSASCII`).
pub const MSGID_LEN_MAX: usize = 32;

/// RFC 5424's limit on SD-ID and PARAM-NAME (`SD-NAME = 1*32PRINTUSASCII`).
pub const SD_NAME_LEN_MAX: usize = 32;

/// RFC 5424's limit on TIME-SECFRAC (`"." 1*6DIGIT`): microseconds.
pub const FRACTION_DIGITS_MAX: usize = 6;

/// Fraction digits accepted in a 3164 frame's timestamp: nanoseconds, the
/// finest any sender we know of writes; RFC 3164 has no fraction at all.
pub const FRACTION_DIGITS_MAX_3164: usize = 9;

/// The longest 3164 TAG name. RFC 3164 says 32 characters for the whole
/// TAG, but rsyslog and others write longer program names; 48 is RFC
/// 5424's APP-NAME limit, so a tag relayed from a 5424 message fits.
pub const TAG_LEN_MAX: usize = APP_NAME_LEN_MAX;

/// The most digits of a Cisco IOS sequence number before a 3164
/// timestamp: the counter is 32-bit, 10 decimal digits.
pub const SEQUENCE_DIGITS_MAX: usize = 10;

/// How far past `now` an inferred-year 3164 timestamp may lie: a week
/// covers senders' clocks that run a few days fast, while a message from
/// last December received in January still gets last year.
pub const FUTURE_DAYS_MAX: i64 = 7;

const MS_PER_DAY: i64 = 86_400_000;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Which RFC a message's header follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// RFC 5424, `<PRI>1 ...`.
    Rfc5424,
    /// RFC 3164 (BSD syslog) and its real-world variants.
    Rfc3164,
}

/// A parsed syslog message: its header fields and body, borrowed from the
/// received bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    /// The header's dialect.
    pub dialect: Dialect,
    /// PRI / 8: 0 (kern) to 23 (local7). 1 (user) for a 3164 message
    /// without PRI ([`PRI_DEFAULT`]).
    pub facility: u8,
    /// PRI % 8: 0 (emerg) to 7 (debug). 5 (notice) for a 3164 message
    /// without PRI.
    pub severity: u8,
    /// When the message says it happened, UTC; `None` for 5424's `-` or a
    /// 3164 message without a timestamp.
    pub timestamp: Option<Timestamp>,
    /// HOSTNAME; `None` for `-` or when missing.
    pub hostname: Option<&'a str>,
    /// APP-NAME, or a 3164 TAG's name; `None` for `-` or when missing.
    pub app_name: Option<&'a str>,
    /// PROCID, or a 3164 TAG's `[PID]`; `None` for `-` or when missing.
    pub procid: Option<&'a str>,
    /// MSGID (5424 only); `None` for `-`.
    pub msgid: Option<&'a str>,
    /// The STRUCTURED-DATA text as received, escapes included (5424
    /// only); `None` for `-`.
    pub structured_data: Option<&'a str>,
    /// MSG: without a leading UTF-8 BOM or trailing `\r` / `\n`; empty
    /// when the message has none.
    pub body: &'a [u8],
}

/// Why a message's header was refused. Each names the field and what is
/// wrong with it; [`HeaderError::reason`] is a short label for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Nothing but line ends.
    #[error("empty syslog message: nothing before the line end")]
    Empty,
    /// A `<` that does not open a valid PRI.
    #[error(
        "bad PRI: {problem}; a syslog message starts with '<', a priority of 0 to 191 (facility * 8 + severity), and '>'"
    )]
    Pri {
        /// What is wrong.
        problem: &'static str,
    },
    /// `<PRI>N ` with a version other than 1.
    #[error(
        "unsupported syslog protocol version after the PRI: only RFC 5424's version 1 ('<PRI>1 ') and RFC 3164 headers are read"
    )]
    Version,
    /// The TIMESTAMP field.
    #[error("bad timestamp at byte {at}: {problem}")]
    Timestamp {
        /// Where the field starts in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The HOSTNAME field.
    #[error("bad hostname at byte {at}: {problem}")]
    Hostname {
        /// Where the field starts in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The APP-NAME field.
    #[error("bad APP-NAME at byte {at}: {problem}")]
    AppName {
        /// Where the field starts in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The PROCID field.
    #[error("bad PROCID at byte {at}: {problem}")]
    ProcId {
        /// Where the field starts in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The MSGID field.
    #[error("bad MSGID at byte {at}: {problem}")]
    MsgId {
        /// Where the field starts in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// The STRUCTURED-DATA field.
    #[error("bad structured data at byte {at}: {problem}")]
    StructuredData {
        /// Where the fault is in the message.
        at: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// Structured data that is not UTF-8 (RFC 5424 §6.3.3).
    #[error("structured data is not UTF-8 at byte {at}: RFC 5424 PARAM-VALUEs are UTF-8")]
    Utf8 {
        /// Where the first invalid byte is in the message.
        at: usize,
    },
}

impl HeaderError {
    /// A short, stable label to count rejects by: `empty`, `pri`,
    /// `version`, `timestamp`, `hostname`, `app_name`, `procid`, `msgid`,
    /// `structured_data` or `utf8`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Pri { .. } => "pri",
            Self::Version => "version",
            Self::Timestamp { .. } => "timestamp",
            Self::Hostname { .. } => "hostname",
            Self::AppName { .. } => "app_name",
            Self::ProcId { .. } => "procid",
            Self::MsgId { .. } => "msgid",
            Self::StructuredData { .. } => "structured_data",
            Self::Utf8 { .. } => "utf8",
        }
    }
}

/// Parses one syslog message (see the module doc for the rules). `now` is
/// when it arrived: a 3164 timestamp without a year takes its year from it.
///
/// ```
/// use cardinal_event::Timestamp;
/// use cardinal_syslog::header::{parse, Dialect};
/// let now = Timestamp::parse(b"2026-11-28T12:00:00Z").unwrap();
/// let m = parse(b"<34>1 2026-11-28T11:59:59.5+01:00 web1 su - ID47 - 'su root' failed", now).unwrap();
/// assert_eq!((m.dialect, m.facility, m.severity), (Dialect::Rfc5424, 4, 2));
/// assert_eq!(m.timestamp.unwrap().to_string(), "2026-11-28T10:59:59.500Z");
/// assert_eq!((m.hostname, m.app_name, m.procid, m.msgid), (Some("web1"), Some("su"), None, Some("ID47")));
/// assert_eq!(m.body, b"'su root' failed");
///
/// let m = parse(b"<13>Nov  1 08:00:00 web1 sshd[42]: Accepted key", now).unwrap();
/// assert_eq!(m.timestamp.unwrap().to_string(), "2026-11-01T08:00:00Z");
/// assert_eq!((m.app_name, m.procid), (Some("sshd"), Some("42")));
/// ```
pub fn parse(bytes: &[u8], now: Timestamp) -> Result<Message<'_>, HeaderError> {
    let end = bytes
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |i| i + 1);
    let bytes = &bytes[..end];
    if bytes.is_empty() {
        return Err(HeaderError::Empty);
    }
    let (pri, pos) = if bytes[0] == b'<' {
        let (pri, pos) = parse_pri(bytes)?;
        (Some(pri), pos)
    } else {
        (None, 0)
    };
    if pri.is_some() {
        let rest = &bytes[pos..];
        if rest.starts_with(b"1 ") {
            return parse_5424(bytes, pri.unwrap_or(PRI_DEFAULT), pos + 2);
        }
        if claims_other_version(rest) {
            return Err(HeaderError::Version);
        }
    }
    parse_3164(bytes, pri.unwrap_or(PRI_DEFAULT), pos, now)
}

/// Reads `<PRI>` at the start of `bytes` (which starts with `<`); returns
/// the value and where the rest starts.
fn parse_pri(bytes: &[u8]) -> Result<(u8, usize), HeaderError> {
    let fail = |problem| Err(HeaderError::Pri { problem });
    let digits = bytes[1..]
        .iter()
        .take(4)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return fail("no digits after '<'");
    }
    if digits > 3 {
        return fail("more than 3 digits");
    }
    if bytes.get(1 + digits) != Some(&b'>') {
        return fail("the digits are not closed by '>'");
    }
    let value = bytes[1..1 + digits]
        .iter()
        .fold(0u16, |v, &d| v * 10 + u16::from(d - b'0'));
    match u8::try_from(value) {
        Ok(v) if v <= PRI_MAX => Ok((v, 2 + digits)),
        _ => fail("above 191"),
    }
}

/// Whether the text after a PRI looks like `VERSION SP TIMESTAMP` with a
/// version other than 1: RFC 5424's shape, `NONZERO-DIGIT 0*2DIGIT`, then
/// a space and `-` or a 4-digit year and `-`.
fn claims_other_version(rest: &[u8]) -> bool {
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if !(1..=3).contains(&digits) || rest[0] == b'0' || rest.get(digits) != Some(&b' ') {
        return false;
    }
    let after = &rest[digits + 1..];
    after.starts_with(b"- ")
        || after == b"-"
        || (after.len() >= 5 && after[..4].iter().all(u8::is_ascii_digit) && after[4] == b'-')
}

/// The word at `pos`: up to the next space or the end.
fn word(bytes: &[u8], pos: usize) -> &[u8] {
    let rest = &bytes[pos.min(bytes.len())..];
    let len = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    &rest[..len]
}

fn is_print_ascii(b: u8) -> bool {
    (33..=126).contains(&b)
}

/// A field that is printable US-ASCII (checked by the caller) as `&str`.
fn ascii_str(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

fn parse_5424(bytes: &[u8], pri: u8, mut pos: usize) -> Result<Message<'_>, HeaderError> {
    // TIMESTAMP
    let at = pos;
    let text = word(bytes, pos);
    let timestamp = if text == b"-" {
        None
    } else {
        let fail = |problem| HeaderError::Timestamp { at, problem };
        if text.is_empty() {
            return Err(fail("missing (a timestamp or '-' must follow the version)"));
        }
        Some(rfc3339(text, FRACTION_DIGITS_MAX).map_err(fail)?)
    };
    pos += text.len();

    let hostname = header_field(bytes, &mut pos, HOSTNAME_LEN_MAX, |at, problem| {
        HeaderError::Hostname { at, problem }
    })?;
    let app_name = header_field(bytes, &mut pos, APP_NAME_LEN_MAX, |at, problem| {
        HeaderError::AppName { at, problem }
    })?;
    let procid = header_field(bytes, &mut pos, PROCID_LEN_MAX, |at, problem| {
        HeaderError::ProcId { at, problem }
    })?;
    let msgid = header_field(bytes, &mut pos, MSGID_LEN_MAX, |at, problem| {
        HeaderError::MsgId { at, problem }
    })?;

    // STRUCTURED-DATA
    let sd_fail = |at, problem| HeaderError::StructuredData { at, problem };
    if bytes.get(pos) != Some(&b' ') {
        return Err(sd_fail(
            pos,
            "missing (structured data or '-' must follow MSGID)",
        ));
    }
    pos += 1;
    let sd_start = pos;
    let structured_data = match bytes.get(pos) {
        Some(b'-') => {
            pos += 1;
            None
        }
        Some(b'[') => {
            while bytes.get(pos) == Some(&b'[') {
                pos = sd_element(bytes, pos)?;
            }
            let raw = &bytes[sd_start..pos];
            let text = std::str::from_utf8(raw).map_err(|e| HeaderError::Utf8 {
                at: sd_start + e.valid_up_to(),
            })?;
            Some(text)
        }
        _ => {
            return Err(sd_fail(
                pos,
                "expected '-' or '[' (structured data or '-' must follow MSGID)",
            ));
        }
    };
    let body = match bytes.get(pos) {
        None => &bytes[pos..],
        Some(b' ') => &bytes[pos + 1..],
        Some(_) => {
            return Err(sd_fail(
                pos,
                "expected a space or the end after the structured data",
            ));
        }
    };
    let (facility, severity) = (pri / 8, pri % 8);
    Ok(Message {
        dialect: Dialect::Rfc5424,
        facility,
        severity,
        timestamp,
        hostname,
        app_name,
        procid,
        msgid,
        structured_data,
        body: body.strip_prefix(UTF8_BOM).unwrap_or(body),
    })
}

/// Reads ` FIELD` at `*pos`: a space, then `-` (absent) or 1 to `max`
/// printable US-ASCII bytes up to the next space or the end.
fn header_field<'a>(
    bytes: &'a [u8],
    pos: &mut usize,
    max: usize,
    fail: impl Fn(usize, &'static str) -> HeaderError,
) -> Result<Option<&'a str>, HeaderError> {
    if bytes.get(*pos) != Some(&b' ') {
        return Err(fail(*pos, "missing: the header ends before it"));
    }
    let at = *pos + 1;
    let text = word(bytes, at);
    *pos = at + text.len();
    if text.is_empty() {
        return Err(fail(at, "empty (two spaces in a row?); write '-' for none"));
    }
    if text == b"-" {
        return Ok(None);
    }
    if text.len() > max {
        return Err(fail(at, "longer than RFC 5424 allows"));
    }
    if !text.iter().all(|&b| is_print_ascii(b)) {
        return Err(fail(at, "not printable US-ASCII (bytes 33 to 126)"));
    }
    ascii_str(text)
        .map(Some)
        .ok_or_else(|| fail(at, "not printable US-ASCII (bytes 33 to 126)"))
}

/// The length of an SD-NAME at `pos` (0 if there is none); at most
/// [`SD_NAME_LEN_MAX`] + 1 bytes are looked at.
fn sd_name_len(bytes: &[u8], pos: usize) -> usize {
    bytes[pos.min(bytes.len())..]
        .iter()
        .take(SD_NAME_LEN_MAX + 1)
        .take_while(|&&b| is_print_ascii(b) && !matches!(b, b'=' | b']' | b'"'))
        .count()
}

/// Validates one SD-ELEMENT starting with `[` at `pos`; returns where it
/// ends (after its `]`).
fn sd_element(bytes: &[u8], mut pos: usize) -> Result<usize, HeaderError> {
    let fail = |at, problem| HeaderError::StructuredData { at, problem };
    pos += 1;
    let id = sd_name_len(bytes, pos);
    if id == 0 {
        return Err(fail(pos, "an SD-ID must follow '['"));
    }
    if id > SD_NAME_LEN_MAX {
        return Err(fail(pos, "SD-ID longer than 32 bytes"));
    }
    pos += id;
    loop {
        match bytes.get(pos) {
            Some(b']') => return Ok(pos + 1),
            Some(b' ') => pos += 1,
            Some(_) => {
                return Err(fail(
                    pos,
                    "expected ' ' and a parameter, or ']', after the SD-ID or a parameter",
                ));
            }
            None => return Err(fail(pos, "unterminated element: ']' is missing")),
        }
        let name = sd_name_len(bytes, pos);
        if name == 0 {
            return Err(fail(pos, "a PARAM-NAME must follow the space"));
        }
        if name > SD_NAME_LEN_MAX {
            return Err(fail(pos, "PARAM-NAME longer than 32 bytes"));
        }
        pos += name;
        if bytes.get(pos) != Some(&b'=') || bytes.get(pos + 1) != Some(&b'"') {
            return Err(fail(pos, "expected '=\"' after the PARAM-NAME"));
        }
        pos += 2;
        pos = param_value_end(bytes, pos)
            .ok_or_else(|| fail(pos, "unterminated PARAM-VALUE: the closing '\"' is missing"))?
            + 1;
    }
}

/// Where the PARAM-VALUE starting at `pos` ends: the index of its closing
/// quote. `\"`, `\\` and `\]` are escapes; another backslash is itself.
fn param_value_end(bytes: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        match bytes.get(pos)? {
            b'"' => return Some(pos),
            b'\\' if matches!(bytes.get(pos + 1), Some(b'"' | b'\\' | b']')) => pos += 2,
            _ => pos += 1,
        }
    }
}

/// Parses an RFC 3339 timestamp with `T`, seconds, 1 to `fraction_max`
/// fraction digits and `Z` or `±hh:mm`, into UTC.
fn rfc3339(text: &[u8], fraction_max: usize) -> Result<Timestamp, &'static str> {
    const SHAPE: &str =
        "expected YYYY-MM-DDThh:mm:ss[.fraction] and 'Z' or '+hh:mm' / '-hh:mm' (RFC 3339)";
    let is_digits = |r: std::ops::Range<usize>| {
        text.get(r)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let shape_ok = text.len() >= 20
        && is_digits(0..4)
        && text[4] == b'-'
        && is_digits(5..7)
        && text[7] == b'-'
        && is_digits(8..10)
        && text[10] == b'T'
        && is_digits(11..13)
        && text[13] == b':'
        && is_digits(14..16)
        && text[16] == b':'
        && is_digits(17..19);
    if !shape_ok {
        return Err(SHAPE);
    }
    let mut rest = &text[19..];
    if let [b'.', tail @ ..] = rest {
        let digits = tail.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return Err("a '.' in the time must be followed by digits");
        }
        if digits > fraction_max {
            return Err("too many fraction digits (RFC 5424 allows 6)");
        }
        rest = &tail[digits..];
    }
    let offset_ok = match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    };
    if !offset_ok {
        return Err("the time must end with 'Z' or an offset '+hh:mm' / '-hh:mm'");
    }
    Timestamp::parse(text).map_err(|e| match e {
        cardinal_event::Error::Timestamp { reason, .. } => reason,
        _ => "not a valid time",
    })
}

fn parse_3164(
    bytes: &[u8],
    pri: u8,
    start: usize,
    now: Timestamp,
) -> Result<Message<'_>, HeaderError> {
    let mut pos = start;
    let mut found = timestamp_3164(bytes, pos, now)?;
    if found.is_none()
        && let Some(after) = sequence_end(bytes, pos)
    {
        found = timestamp_3164(bytes, after, now)?;
    }
    let mut timestamp = None;
    let mut hostname = None;
    if let Some((t, end)) = found {
        timestamp = Some(t);
        pos = end;
        if bytes.get(pos) == Some(&b' ') {
            pos += 1;
        }
        if tag(bytes, pos).is_none() {
            let host = word(bytes, pos);
            if !host.is_empty()
                && host.len() <= HOSTNAME_LEN_MAX
                && host.iter().all(|&b| is_print_ascii(b))
                && let Some(host) = ascii_str(host)
            {
                hostname = Some(host);
                pos += host.len();
                if bytes.get(pos) == Some(&b' ') {
                    pos += 1;
                }
            }
        }
    }
    let (app_name, procid) = match tag(bytes, pos) {
        Some(t) => {
            pos = t.body;
            (Some(t.name), t.pid)
        }
        None => (None, None),
    };
    let body = &bytes[pos.min(bytes.len())..];
    Ok(Message {
        dialect: Dialect::Rfc3164,
        facility: pri / 8,
        severity: pri % 8,
        timestamp,
        hostname,
        app_name,
        procid,
        msgid: None,
        structured_data: None,
        body: body.strip_prefix(UTF8_BOM).unwrap_or(body),
    })
}

/// Where the text after a Cisco IOS sequence number (`digits: `) at `pos`
/// starts, if there is one.
fn sequence_end(bytes: &[u8], pos: usize) -> Option<usize> {
    let rest = bytes.get(pos..)?;
    let digits = rest
        .iter()
        .take(SEQUENCE_DIGITS_MAX + 1)
        .take_while(|b| b.is_ascii_digit())
        .count();
    ((1..=SEQUENCE_DIGITS_MAX).contains(&digits) && rest[digits..].starts_with(b": "))
        .then_some(pos + digits + 2)
}

/// A 3164 TAG found at some position.
struct Tag<'a> {
    name: &'a str,
    pid: Option<&'a str>,
    /// Where the body starts after it.
    body: usize,
}

/// Reads a TAG at `pos`: `name:` then a space or the end, or `name[pid]`
/// with an optional `:`, then a space or the end.
fn tag(bytes: &[u8], pos: usize) -> Option<Tag<'_>> {
    let rest = bytes.get(pos..)?;
    let name_len = rest
        .iter()
        .take(TAG_LEN_MAX + 1)
        .take_while(|&&b| is_print_ascii(b) && !matches!(b, b':' | b'[' | b']'))
        .count();
    if name_len == 0 || name_len > TAG_LEN_MAX {
        return None;
    }
    let name = ascii_str(&rest[..name_len])?;
    let (pid, mut after) = match rest.get(name_len) {
        Some(b':') => (None, name_len + 1),
        Some(b'[') => {
            let pid_start = name_len + 1;
            let pid_len = rest[pid_start..]
                .iter()
                .take(PROCID_LEN_MAX + 1)
                .take_while(|&&b| is_print_ascii(b) && b != b']')
                .count();
            if pid_len == 0 || pid_len > PROCID_LEN_MAX {
                return None;
            }
            let close = pid_start + pid_len;
            if rest.get(close) != Some(&b']') {
                return None;
            }
            let pid = ascii_str(&rest[pid_start..close])?;
            let after = close + 1;
            let after = if rest.get(after) == Some(&b':') {
                after + 1
            } else {
                after
            };
            (Some(pid), after)
        }
        _ => return None,
    };
    match rest.get(after) {
        None => {}
        Some(b' ') => after += 1,
        Some(_) => return None,
    }
    Some(Tag {
        name,
        pid,
        body: pos + after,
    })
}

/// Month names as RFC 3164 spells them.
const MONTHS: [&[u8; 3]; 12] = [
    b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov", b"dec",
];

/// Two ASCII digits as a number.
fn two_digits(d: &[u8]) -> Option<i64> {
    match d {
        [a, b] if a.is_ascii_digit() && b.is_ascii_digit() => {
            Some(i64::from(a - b'0') * 10 + i64::from(b - b'0'))
        }
        _ => None,
    }
}

/// Reads a 3164 frame's timestamp at `pos` (see the module doc for the
/// forms); `Ok(None)` when the text there does not have a timestamp's
/// shape, `Err` when it has one but its values are impossible. Returns the
/// time and where the text after it starts (a space or the end).
fn timestamp_3164(
    bytes: &[u8],
    pos: usize,
    now: Timestamp,
) -> Result<Option<(Timestamp, usize)>, HeaderError> {
    let mut p = pos;
    if matches!(bytes.get(p), Some(b'*' | b'.')) {
        p += 1;
    }
    let at = p;
    let fail = |problem| HeaderError::Timestamp { at, problem };
    let Some(rest) = bytes.get(p..) else {
        return Ok(None);
    };
    // RFC 3339, as rsyslog's ForwardFormat and FileFormat send.
    if rest.len() >= 11
        && rest[..4].iter().all(u8::is_ascii_digit)
        && rest[4] == b'-'
        && rest[10] == b'T'
    {
        let text = word(bytes, p);
        let t = rfc3339(text, FRACTION_DIGITS_MAX_3164).map_err(fail)?;
        return Ok(Some((t, p + text.len())));
    }
    // Mmm
    let Some(month) = rest.get(..3).and_then(|m| {
        (1i64..)
            .zip(MONTHS)
            .find_map(|(number, name)| m.eq_ignore_ascii_case(&name[..]).then_some(number))
    }) else {
        return Ok(None);
    };
    p += 3;
    if bytes.get(p) != Some(&b' ') {
        return Ok(None);
    }
    p += 1;
    // dd, ' d' or 'd'
    let day = match bytes.get(p..p + 2) {
        Some([b' ', d]) if d.is_ascii_digit() => {
            p += 2;
            i64::from(d - b'0')
        }
        Some([a, b]) if a.is_ascii_digit() && b.is_ascii_digit() => {
            p += 2;
            i64::from(a - b'0') * 10 + i64::from(b - b'0')
        }
        Some([d, b' ']) if d.is_ascii_digit() => {
            p += 1;
            i64::from(d - b'0')
        }
        _ => return Ok(None),
    };
    if bytes.get(p) != Some(&b' ') {
        return Ok(None);
    }
    p += 1;
    // An optional year: `yyyy `.
    let mut year = None;
    if let Some(y) = bytes.get(p..p + 5)
        && y[..4].iter().all(u8::is_ascii_digit)
        && y[4] == b' '
    {
        year = Some(
            y[..4]
                .iter()
                .fold(0i64, |v, &d| v * 10 + i64::from(d - b'0')),
        );
        p += 5;
    }
    // hh:mm:ss
    let Some(time) = bytes.get(p..p + 8) else {
        return Ok(None);
    };
    let (Some(hour), Some(minute), Some(second), b':', b':') = (
        two_digits(&time[0..2]),
        two_digits(&time[3..5]),
        two_digits(&time[6..8]),
        time[2],
        time[5],
    ) else {
        return Ok(None);
    };
    p += 8;
    let mut ms = 0;
    if bytes.get(p) == Some(&b'.') {
        let digits = bytes[p + 1..]
            .iter()
            .take(FRACTION_DIGITS_MAX_3164 + 1)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 || digits > FRACTION_DIGITS_MAX_3164 {
            return Ok(None);
        }
        for (i, &d) in bytes[p + 1..p + 1 + digits].iter().take(3).enumerate() {
            ms += i64::from(d - b'0') * [100, 10, 1][i];
        }
        p += 1 + digits;
    }
    // Cisco: ` UTC` / ` GMT`, then `:`.
    for zone in [&b" UTC"[..], b" GMT"] {
        if bytes[p..].starts_with(zone) && matches!(bytes.get(p + 4), None | Some(b' ' | b':')) {
            p += 4;
        }
    }
    if bytes.get(p) == Some(&b':') {
        p += 1;
    }
    if !matches!(bytes.get(p), None | Some(b' ')) {
        return Ok(None);
    }
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return Err(fail("no such day or time of day"));
    }
    let civil = |year: i64| -> Option<Timestamp> {
        if !(Timestamp::YEAR_MIN..=Timestamp::YEAR_MAX).contains(&year) {
            return None;
        }
        let mut text = *b"0000-00-00T00:00:00Z";
        let put = |text: &mut [u8; 20], at: usize, value: i64, width: usize| {
            let mut v = value;
            for i in (0..width).rev() {
                text[at + i] = b'0' + u8::try_from(v.rem_euclid(10)).unwrap_or(0);
                v /= 10;
            }
        };
        put(&mut text, 0, year, 4);
        put(&mut text, 5, month, 2);
        put(&mut text, 8, day, 2);
        put(&mut text, 11, hour, 2);
        put(&mut text, 14, minute, 2);
        put(&mut text, 17, second, 2);
        let t = Timestamp::parse(&text).ok()?;
        let t = Timestamp(t.0 + ms);
        t.is_in_range().then_some(t)
    };
    let t = match year {
        Some(year) => civil(year).ok_or_else(|| fail("no such date"))?,
        None => {
            // A clock outside the accepted range is held to its edge, so
            // that the calendar arithmetic stays in range.
            let now = Timestamp(now.0.clamp(Timestamp::MIN.0, Timestamp::MAX.0));
            let (this_year, _, _) = now.date();
            let latest = now.0.saturating_add(FUTURE_DAYS_MAX * MS_PER_DAY);
            [this_year + 1, this_year, this_year - 1]
                .into_iter()
                .filter_map(civil)
                .find(|t| t.0 <= latest)
                .ok_or_else(|| fail("no such date in the year before, of or after the arrival"))?
        }
    };
    Ok(Some((t, p)))
}

impl Message<'_> {
    /// The value of parameter `name` in the structured-data element
    /// `sd_id` (the first of each, should either repeat), with `\"`, `\\`
    /// and `\]` unescaped; borrowed when it has no escape.
    ///
    /// ```
    /// use cardinal_event::Timestamp;
    /// let m = cardinal_syslog::header::parse(
    ///     br#"<165>1 - - - - - [origin ip="192.0.2.1"][meta note="a \"b\" \] c"]"#,
    ///     Timestamp(0),
    /// ).unwrap();
    /// assert_eq!(m.sd_param("origin", "ip").as_deref(), Some("192.0.2.1"));
    /// assert_eq!(m.sd_param("meta", "note").as_deref(), Some(r#"a "b" ] c"#));
    /// assert_eq!(m.sd_param("meta", "ip"), None);
    /// ```
    pub fn sd_param(&self, sd_id: &str, name: &str) -> Option<Cow<'_, str>> {
        let sd = self.structured_data?;
        let bytes = sd.as_bytes();
        let mut pos = 0;
        // Walks elements as `sd_element` validated them, defensively: a
        // hand-made message's text may be anything.
        while bytes.get(pos) == Some(&b'[') {
            pos += 1;
            let id_len = sd_name_len(bytes, pos);
            let id = &bytes[pos..pos + id_len];
            pos += id_len;
            loop {
                match bytes.get(pos) {
                    Some(b']') => {
                        pos += 1;
                        break;
                    }
                    Some(b' ') => pos += 1,
                    _ => return None,
                }
                let name_len = sd_name_len(bytes, pos);
                let param = &bytes[pos..pos + name_len];
                pos += name_len;
                if bytes.get(pos..pos + 2) != Some(b"=\"") {
                    return None;
                }
                let start = pos + 2;
                let end = param_value_end(bytes, start)?;
                pos = end + 1;
                if id == sd_id.as_bytes() && param == name.as_bytes() {
                    return Some(unescape(sd.get(start..end)?));
                }
            }
        }
        None
    }
}

/// A PARAM-VALUE with `\"`, `\\` and `\]` unescaped.
fn unescape(value: &str) -> Cow<'_, str> {
    if !value.contains('\\') {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&next @ ('"' | '\\' | ']')) = chars.peek()
        {
            out.push(next);
            chars.next();
            continue;
        }
        out.push(c);
    }
    Cow::Owned(out)
}
