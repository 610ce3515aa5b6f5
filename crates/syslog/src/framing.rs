//! Plain TCP syslog (RFC 6587): finding where each message ends in a byte
//! stream from rsyslog's `omfwd`, Vector's syslog sink, syslog-ng and
//! network devices, which send no acknowledgements and no txnrs.
//!
//! RFC 6587 knows two framings, told apart by a frame's first byte:
//!
//! - **Octet counting** (§3.4.1) when it is a digit:
//!   `MSG-LEN SP SYSLOG-MSG`, MSG-LEN in decimal, so the message may hold
//!   any byte. rsyslog's `omfwd` with `TCP_Framing="octet-counted"` sent
//!   (`tests/data/rsyslog-omfwd-octet-counted.bin`):
//!
//!   ```text
//!   40 <13>Nov 28 21:11:03 vm mytag hello tcp 140 <13>Nov 28 21:11:03 vm mytag hello tcp 2
//!   ```
//!
//! - **Non-transparent framing** (§3.4.2) otherwise: one message a line,
//!   as rsyslog's default `omfwd` sends (`tests/data/rsyslog-omfwd-traditional.bin`):
//!
//!   ```text
//!   <13>Nov 28 21:10:55 vm mytag hello tcp 1\n<13>Nov 28 21:10:55 vm mytag hello tcp 2\n
//!   ```
//!
//! Syslog messages start with `<` (the PRI), never with a digit, so the
//! first byte decides. [`Framer`] keeps the one thing a connection must
//! remember between reads: how much of a too-long message is left to skip.
//!
//! # Rules and limits
//!
//! - **Octet counting** needs MSG-LEN to be 1 to
//!   [`OCTET_COUNT_DIGITS_MAX`] digits without a leading zero, then one SP
//!   (RFC 6587: `NONZERO-DIGIT *DIGIT`). Digits followed by anything else,
//!   or more than nine of them, are not a count: the frame is read as a
//!   line (a sender of plain text lines that start with a date,
//!   `2026-11-28 ...`, still works; a line starting `123 ` is read as a
//!   count, the RFC's own ambiguity). The message is exactly MSG-LEN bytes,
//!   kept as sent.
//! - **Lines** end at LF; a CR before the LF is dropped (CRLF senders). A
//!   NUL also ends a line: some senders (appliances, GELF-style TCP
//!   appenders, rsyslog's imtcp with `AddtlFrameDelimiter=0`) terminate
//!   messages with NUL, and a NUL inside a syslog message is no use to
//!   anyone. Empty lines (and runs of LF or NUL, such as an LF a sender
//!   puts after an octet-counted frame) are skipped.
//! - **Length**: a message longer than `max` (normally
//!   [`SYSLOG_FRAME_BYTES_MAX`], 64 KiB) is skipped and reported as
//!   [`Decoded::Oversize`] (count it as a rejected message); the stream
//!   stays in sync: a line is skipped through its LF, an octet-counted
//!   message through its declared length. rsyslog truncates such messages
//!   instead; a truncated record would be counted as if it were whole.
//! - **Declared lengths over [`OCTET_COUNT_BYTES_MAX`]** (1 MiB) are an
//!   error that closes the connection: no syslog sender writes messages
//!   that big, so the stream is broken (or not syslog), and skipping up to
//!   a gigabyte of it in silence would hide that.
//! - **Bounded buffers**: once the input holds
//!   [`buffer_bytes_max`]`(max)` bytes (`max` plus the longest octet-count
//!   header), [`Framer::decode`] and [`decode`] return something other
//!   than `Ok(None)`. A reader never needs to buffer more.

use thiserror::Error;

/// The longest syslog message we take over plain TCP: 64 KiB.
///
/// rsyslog's `maxMessageSize` is 8 KiB unless raised, RFC 5424 §6.1 asks
/// receivers to take 2,048 octets and says they SHOULD take 8,192, and
/// Vector's syslog source defaults to 100 KiB. 64 KiB is eight times
/// rsyslog's default (room for a Java stack trace in one message) and half
/// the RELP limit, while a thousand connections' buffers stay near 64 MiB.
/// Longer messages are skipped and counted (see the module doc).
pub const SYSLOG_FRAME_BYTES_MAX: usize = 64 * 1024;

/// The most digits in an octet count's MSG-LEN: nine, as in RELP; more
/// are not a count (the frame is read as a line).
pub const OCTET_COUNT_DIGITS_MAX: usize = 9;

/// The longest frame header: MSG-LEN's digits and the SP. It also covers a
/// line's CR LF, so `max` plus this bounds every frame's buffered bytes.
pub const HEADER_BYTES_MAX: usize = OCTET_COUNT_DIGITS_MAX + 1;

/// The largest MSG-LEN taken as a message to skip rather than a broken
/// stream: 1 MiB. rsyslog's imtcp takes octet counts up to 200,000 by
/// default (`MaxFrameSize`) and reads larger ones as a framing error; we
/// skip counts up to 1 MiB (a sender with a raised `maxMessageSize`) and
/// close the connection above. Must exceed any `max` passed in.
pub const OCTET_COUNT_BYTES_MAX: usize = 1024 * 1024;

const _: () = assert!(SYSLOG_FRAME_BYTES_MAX < OCTET_COUNT_BYTES_MAX);
const _: () = assert!(
    HEADER_BYTES_MAX >= 2,
    "a line's CR LF fits the header allowance"
);
const _: () = assert!(
    OCTET_COUNT_BYTES_MAX < 1_000_000_000,
    "nine digits hold every count we accept"
);

/// The most bytes a reader needs to buffer for messages of at most `max`
/// bytes: with this many, decoding always makes progress.
pub const fn buffer_bytes_max(max: usize) -> usize {
    max + HEADER_BYTES_MAX
}

/// What one step of decoding found at the front of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// One syslog message, without its framing (no MSG-LEN, no LF, no
    /// trailing CR); never empty, at most `max` bytes.
    Message(&'a [u8]),
    /// The start of a message longer than `max`, skipped so the connection
    /// stays in sync; count it as one rejected message. `bytes` is its
    /// declared length with octet counting, else the bytes of it skipped
    /// in this step; the rest of it comes back as [`Decoded::Skipped`].
    Oversize {
        /// The message's length as far as known.
        bytes: usize,
    },
    /// Bytes that carry no message: empty lines and stray delimiters, or
    /// more of a message already reported as [`Decoded::Oversize`].
    Skipped {
        /// How many bytes were skipped (equals the step's consumed count).
        bytes: usize,
    },
}

/// A stream that cannot be syslog framing; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FramingError {
    /// An octet count over [`OCTET_COUNT_BYTES_MAX`].
    #[error(
        "syslog framing: an octet count declares {declared} bytes, over the {max}-byte limit; \
         the stream is broken or not RFC 6587 syslog"
    )]
    OctetCountTooLarge {
        /// The declared MSG-LEN.
        declared: u64,
        /// The limit, [`OCTET_COUNT_BYTES_MAX`].
        max: usize,
    },
}

impl FramingError {
    /// A short, fixed label for counting errors by kind (a metric's label).
    pub fn reason(&self) -> &'static str {
        match self {
            FramingError::OctetCountTooLarge { .. } => "octet_count_too_large",
        }
    }
}

/// What is left of a too-long message after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// Nothing: the next byte starts a frame.
    Nothing,
    /// This many more bytes of an octet-counted message.
    Bytes(usize),
    /// The rest of a line, through its LF or NUL.
    Line,
}

/// Whether `byte` ends a line.
fn is_delimiter(byte: u8) -> bool {
    byte == b'\n' || byte == 0
}

/// Decodes one step from the front of `input`, which must start a frame.
///
/// Returns `Ok(Some((decoded, consumed)))` with `consumed` in
/// `1..=input.len()`, `Ok(None)` when more bytes are needed (never once
/// `input.len() >= buffer_bytes_max(max)`), or an error for a stream that
/// cannot be syslog framing.
///
/// This function remembers nothing: after an [`Decoded::Oversize`] whose
/// message goes on past `input`, the next bytes are the rest of that
/// message, not a frame. A connection therefore decodes with a [`Framer`],
/// which skips them; this function is its first step, for callers that
/// hold whole messages (tests, one datagram of lines).
///
/// # Panics
///
/// If `max` is 0 or not below [`OCTET_COUNT_BYTES_MAX`].
pub fn decode(input: &[u8], max: usize) -> Result<Option<(Decoded<'_>, usize)>, FramingError> {
    Ok(decode_frame(input, max)?.map(|(decoded, consumed, _)| (decoded, consumed)))
}

/// [`decode`], also saying what is left of a too-long message.
fn decode_frame(
    input: &[u8],
    max: usize,
) -> Result<Option<(Decoded<'_>, usize, Skip)>, FramingError> {
    assert!(max > 0, "a message limit of 0 bytes takes nothing");
    assert!(
        max < OCTET_COUNT_BYTES_MAX,
        "max must be below OCTET_COUNT_BYTES_MAX"
    );
    let Some(&first) = input.first() else {
        return Ok(None);
    };
    if is_delimiter(first) {
        let run = input.iter().take_while(|&&byte| is_delimiter(byte)).count();
        return Ok(Some((Decoded::Skipped { bytes: run }, run, Skip::Nothing)));
    }
    if (b'1'..=b'9').contains(&first) {
        match octet_count(input)? {
            Count::Partial => return Ok(None),
            Count::Line => {}
            Count::Frame { len, start } => return Ok(octet_frame(input, max, len, start)),
        }
    }
    Ok(line(input, max))
}

/// What the digits at the front of a frame turned out to be.
enum Count {
    /// All digits so far and the input ends: more bytes are needed.
    Partial,
    /// Not an octet count: read the frame as a line.
    Line,
    /// An octet count: the message's length and where it starts.
    Frame { len: usize, start: usize },
}

/// Reads `MSG-LEN SP` at the front of `input`, which starts with 1-9.
fn octet_count(input: &[u8]) -> Result<Count, FramingError> {
    debug_assert!(
        input
            .first()
            .is_some_and(|byte| (b'1'..=b'9').contains(byte))
    );
    let mut value: u64 = 0;
    for (at, &byte) in input.iter().enumerate() {
        if byte == b' ' {
            debug_assert!(at > 0, "the first byte is a digit");
            let max = OCTET_COUNT_BYTES_MAX;
            if value > u64::try_from(max).expect("the limit fits a u64") {
                return Err(FramingError::OctetCountTooLarge {
                    declared: value,
                    max,
                });
            }
            let len = usize::try_from(value).expect("a count under the limit fits a usize");
            return Ok(Count::Frame { len, start: at + 1 });
        }
        if !byte.is_ascii_digit() || at == OCTET_COUNT_DIGITS_MAX {
            return Ok(Count::Line);
        }
        value = value * 10 + u64::from(byte - b'0');
    }
    Ok(Count::Partial)
}

/// An octet-counted message of `len` bytes starting at `start`.
fn octet_frame(
    input: &[u8],
    max: usize,
    len: usize,
    start: usize,
) -> Option<(Decoded<'_>, usize, Skip)> {
    debug_assert!(len > 0, "MSG-LEN starts with a non-zero digit");
    let end = start + len;
    if len > max {
        let consumed = end.min(input.len());
        let skip = if end > consumed {
            Skip::Bytes(end - consumed)
        } else {
            Skip::Nothing
        };
        return Some((Decoded::Oversize { bytes: len }, consumed, skip));
    }
    if input.len() < end {
        return None;
    }
    Some((Decoded::Message(&input[start..end]), end, Skip::Nothing))
}

/// A line at the front of `input`, which starts with no delimiter.
fn line(input: &[u8], max: usize) -> Option<(Decoded<'_>, usize, Skip)> {
    // A line of `max` bytes plus CR LF fits this window; a line without a
    // delimiter in it is too long.
    let window = &input[..input.len().min(max + 2)];
    if let Some(end) = window.iter().position(|&byte| is_delimiter(byte)) {
        let mut message = &input[..end];
        if let [rest @ .., b'\r'] = message {
            message = rest;
        }
        let consumed = end + 1;
        let decoded = if message.is_empty() {
            Decoded::Skipped { bytes: consumed }
        } else if message.len() > max {
            Decoded::Oversize {
                bytes: message.len(),
            }
        } else {
            Decoded::Message(message)
        };
        return Some((decoded, consumed, Skip::Nothing));
    }
    if window.len() < max + 2 {
        return None;
    }
    // Too long: skip what is here, through the delimiter if it is here.
    match input[window.len()..]
        .iter()
        .position(|&byte| is_delimiter(byte))
    {
        Some(offset) => {
            let end = window.len() + offset;
            Some((Decoded::Oversize { bytes: end }, end + 1, Skip::Nothing))
        }
        None => Some((
            Decoded::Oversize { bytes: input.len() },
            input.len(),
            Skip::Line,
        )),
    }
}

/// A connection's framing state: decodes messages of at most `max` bytes
/// and remembers how much of a too-long message is left to skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framer {
    max: usize,
    skip: Skip,
}

impl Framer {
    /// A framer for a new connection, taking messages of at most `max`
    /// bytes (normally [`SYSLOG_FRAME_BYTES_MAX`]).
    ///
    /// # Panics
    ///
    /// If `max` is 0 or not below [`OCTET_COUNT_BYTES_MAX`].
    pub fn new(max: usize) -> Framer {
        assert!(max > 0, "a message limit of 0 bytes takes nothing");
        assert!(
            max < OCTET_COUNT_BYTES_MAX,
            "max must be below OCTET_COUNT_BYTES_MAX"
        );
        Framer {
            max,
            skip: Skip::Nothing,
        }
    }

    /// The longest message this framer takes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Whether the framer is in the middle of skipping a too-long message
    /// (if the connection ends now, that message was still counted once,
    /// when its [`Decoded::Oversize`] came back).
    pub fn is_skipping(&self) -> bool {
        self.skip != Skip::Nothing
    }

    /// Decodes one step from the front of `input`, the bytes buffered
    /// from the connection that earlier steps did not consume.
    ///
    /// Returns `Ok(Some((decoded, consumed)))` with `consumed` in
    /// `1..=input.len()` (drop that many bytes from the buffer), `Ok(None)`
    /// when more bytes are needed (never once `input.len() >=
    /// buffer_bytes_max(max)`), or an error that closes the connection.
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<Option<(Decoded<'a>, usize)>, FramingError> {
        if input.is_empty() {
            return Ok(None);
        }
        let step = match self.skip {
            Skip::Nothing => decode_frame(input, self.max)?,
            Skip::Bytes(left) => {
                let consumed = left.min(input.len());
                let skip = if left > consumed {
                    Skip::Bytes(left - consumed)
                } else {
                    Skip::Nothing
                };
                Some((Decoded::Skipped { bytes: consumed }, consumed, skip))
            }
            Skip::Line => match input.iter().position(|&byte| is_delimiter(byte)) {
                Some(end) => Some((Decoded::Skipped { bytes: end + 1 }, end + 1, Skip::Nothing)),
                None => Some((
                    Decoded::Skipped { bytes: input.len() },
                    input.len(),
                    Skip::Line,
                )),
            },
        };
        let Some((decoded, consumed, skip)) = step else {
            debug_assert!(
                input.len() < buffer_bytes_max(self.max),
                "a full buffer always decodes"
            );
            return Ok(None);
        };
        debug_assert!(consumed >= 1, "every step makes progress");
        debug_assert!(
            consumed <= input.len(),
            "a step consumes only what it was given"
        );
        self.skip = skip;
        Ok(Some((decoded, consumed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step over `input`, as (decoded, consumed), until more bytes
    /// are needed.
    fn steps(input: &[u8], max: usize) -> (Vec<(Decoded<'_>, usize)>, usize) {
        let mut framer = Framer::new(max);
        let mut at = 0;
        let mut out = Vec::new();
        while let Some((decoded, consumed)) = framer.decode(&input[at..]).expect("valid") {
            out.push((decoded, consumed));
            at += consumed;
        }
        (out, at)
    }

    #[test]
    fn lines_end_at_lf_crlf_or_nul() {
        let (got, used) = steps(b"<1>a\n<2>b\r\n<3>c\0<4>d", 100);
        assert_eq!(
            got,
            [
                (Decoded::Message(b"<1>a"), 5),
                (Decoded::Message(b"<2>b"), 6),
                (Decoded::Message(b"<3>c"), 5)
            ]
        );
        assert_eq!(used, 16, "the unterminated line waits");
    }

    #[test]
    fn empty_lines_are_skipped() {
        let (got, _) = steps(b"\n\n\0<1>a\n\r\n<2>b\n", 100);
        assert_eq!(
            got,
            [
                (Decoded::Skipped { bytes: 3 }, 3),
                (Decoded::Message(b"<1>a"), 5),
                (Decoded::Skipped { bytes: 2 }, 2),
                (Decoded::Message(b"<2>b"), 5),
            ]
        );
    }

    #[test]
    fn octet_counting_takes_exact_bytes() {
        let (got, used) = steps(b"5 <1>a\n3 x\0y12 <2>b", 100);
        assert_eq!(
            got,
            [
                (Decoded::Message(b"<1>a\n"), 7),
                (Decoded::Message(b"x\0y"), 5)
            ]
        );
        assert_eq!(used, 12, "the second count waits for its bytes");
    }

    #[test]
    fn digits_without_a_count_are_a_line() {
        let (got, _) = steps(b"2026-11-28 hello\n0 zero\n1234567890 ten\n12\tx\n", 100);
        let messages: Vec<_> = got.iter().map(|(decoded, _)| *decoded).collect();
        assert_eq!(
            messages,
            [
                Decoded::Message(b"2026-11-28 hello"),
                Decoded::Message(b"0 zero"),
                Decoded::Message(b"1234567890 ten"),
                Decoded::Message(b"12\tx"),
            ]
        );
    }

    #[test]
    fn partial_counts_wait() {
        let mut framer = Framer::new(100);
        for input in [&b"1"[..], b"123", b"123456789", b"5 <1>"] {
            assert_eq!(
                framer.decode(input),
                Ok(None),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn the_longest_line_fits_and_one_more_byte_is_oversize() {
        let max = 10;
        let (got, _) = steps(b"0123456789\r\nabcdefghijk\nz\n", max);
        assert_eq!(
            got,
            [
                (Decoded::Message(b"0123456789"), 12),
                (Decoded::Oversize { bytes: 11 }, 12),
                (Decoded::Message(b"z"), 2),
            ]
        );
    }

    #[test]
    fn a_long_line_is_skipped_across_reads() {
        let max = 4;
        let mut framer = Framer::new(max);
        // The whole buffer (max + header) holds no LF: oversize, consumed.
        assert_eq!(
            framer.decode(b"aaaaaaaaaaaaaa"),
            Ok(Some((Decoded::Oversize { bytes: 14 }, 14)))
        );
        assert!(framer.is_skipping());
        assert_eq!(
            framer.decode(b"bbbbbbbbbbbbb"),
            Ok(Some((Decoded::Skipped { bytes: 13 }, 13)))
        );
        assert_eq!(
            framer.decode(b"cc\n<1>x\n"),
            Ok(Some((Decoded::Skipped { bytes: 3 }, 3)))
        );
        assert!(!framer.is_skipping());
        assert_eq!(
            framer.decode(b"<1>x\n"),
            Ok(Some((Decoded::Message(b"<1>x"), 5)))
        );
    }

    #[test]
    fn a_long_octet_counted_message_is_skipped_by_its_count() {
        let mut framer = Framer::new(4);
        assert_eq!(
            framer.decode(b"12 0123"),
            Ok(Some((Decoded::Oversize { bytes: 12 }, 7)))
        );
        assert_eq!(
            framer.decode(b"4567"),
            Ok(Some((Decoded::Skipped { bytes: 4 }, 4)))
        );
        assert_eq!(
            framer.decode(b"89ab2 <1"),
            Ok(Some((Decoded::Skipped { bytes: 4 }, 4)))
        );
        assert_eq!(
            framer.decode(b"2 <1"),
            Ok(Some((Decoded::Message(b"<1"), 4)))
        );
    }

    #[test]
    fn a_huge_count_closes_the_connection() {
        let error = decode(b"1048577 x", 100).expect_err("over the limit");
        assert_eq!(error.reason(), "octet_count_too_large");
        assert!(decode(b"1048576 x", 100).is_ok());
    }

    #[test]
    #[should_panic(expected = "max")]
    fn max_must_be_below_the_count_limit() {
        Framer::new(OCTET_COUNT_BYTES_MAX);
    }
}
