//! Syslog in: what `cardinal serve --relp` and `--syslog` read, free of
//! sockets.
//!
//! - [`relp`]: RELP frames (`txnr command datalen data\n`), decoded
//!   incrementally from a byte stream, and the `rsp` replies;
//! - [`framing`]: RFC 6587 plain TCP syslog: octet counting when a frame
//!   starts with a digit, else one message a line;
//! - [`header`]: RFC 5424 and RFC 3164 (BSD) headers, parsed into a
//!   [`header::Message`] and its body;
//! - [`record`]: a message made into one record of its stream (CSV fields
//!   in the stream's declared order, or an NDJSON object), with the
//!   header's fields as columns under documented names;
//! - [`ids`]: the bounded, per-sender window of recent message ids that
//!   makes a resent message count once, saved in snapshots.

#![warn(missing_docs)]

pub mod framing;
pub mod header;
pub mod ids;
pub mod record;
pub mod relp;
