//! One event in a user's chain, and its 16-64 byte encoding.
//!
//! A chain is the concatenation of its records' encodings, oldest first, with
//! no padding. Each encoding starts with a 16-byte head; an optional revenue
//! and optional opaque attribute bytes follow:
//!
//! ```text
//!  0        6      7       8            12          16          24
//!  | time_ms u48 | kind u8 | flags u8 | campaign u32 | site u32 | revenue i64? | attrs ...? |
//!                            |
//!                            +-- bit 7: revenue present; bits 0-5: attrs length (0..=40)
//! ```
//!
//! All integers are little-endian. The length of a record follows from its
//! first 8 bytes (`16 + 8 * has_revenue + attrs_len`), so a chain is walked
//! without an index. Worked example: a click at 1,700,000,000,000 ms for
//! campaign 7 on site 9 with no revenue and no attributes is 16 bytes:
//! `00 68 e5 cf 8b 01 02 00 07 00 00 00 09 00 00 00`.
//!
//! Why these widths: 48 bits of milliseconds reach the year 10889; campaign
//! and site ids are dictionary codes issued by the engine (u32, like
//! `RollupId`); revenue is in micro-units of the account currency, the
//! convention of ad servers, so sums stay exact. The attribute bytes carry
//! what a deployment wants to keep per touch (a creative id, a URL hash) and
//! bring a record to the 16-64 bytes the issue asks the store to handle.

use crate::error::{Error, Result};

/// Bytes of a record without revenue or attributes.
pub const RECORD_BYTES_MIN: usize = 16;
/// Bytes of the largest record: head, revenue and [`ATTRS_BYTES_MAX`]
/// attribute bytes. Bounds the per-record work of every chain operation.
pub const RECORD_BYTES_MAX: usize = 64;
/// Attribute bytes per record. [`Record::set_attrs`] rejects more with
/// [`Error::InvalidRecord`].
pub const ATTRS_BYTES_MAX: usize = RECORD_BYTES_MAX - RECORD_BYTES_MIN - REVENUE_BYTES;
/// Largest event time: the 48 bits the encoding keeps. [`Record::new`]
/// rejects later times with [`Error::InvalidRecord`].
pub const TIME_MS_MAX: u64 = (1 << 48) - 1;

const REVENUE_BYTES: usize = 8;
const FLAG_REVENUE: u8 = 0x80;
const FLAG_ATTRS_MASK: u8 = 0x3f;

const _: () = assert!(ATTRS_BYTES_MAX == 40);
const _: () = assert!(ATTRS_BYTES_MAX <= FLAG_ATTRS_MASK as usize);

/// What kind of event a record is. The store does not interpret kinds; the
/// constants are the engine's vocabulary, and attribution's callers decide
/// which kinds are touch points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Kind(pub u8);

impl Kind {
    /// An ad impression.
    pub const IMPRESSION: Kind = Kind(1);
    /// A click.
    pub const CLICK: Kind = Kind(2);
    /// A page visit.
    pub const VISIT: Kind = Kind(3);
    /// A conversion (a purchase, a sign-up).
    pub const CONVERSION: Kind = Kind(4);
}

/// A campaign's dictionary code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CampaignId(pub u32);

/// A site's dictionary code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SiteId(pub u32);

/// One event of a user's chain. `Copy` and allocation-free (the attribute
/// bytes live inline), so the hot path passes records by reference.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    time_ms: u64,
    /// The event's kind.
    pub kind: Kind,
    /// The campaign the event belongs to.
    pub campaign: CampaignId,
    /// The site the event happened on.
    pub site: SiteId,
    /// Revenue in micro-units; 0 is stored in no bytes.
    pub revenue_micros: i64,
    attrs_len: u8,
    attrs: [u8; ATTRS_BYTES_MAX],
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("time_ms", &self.time_ms)
            .field("kind", &self.kind.0)
            .field("campaign", &self.campaign.0)
            .field("site", &self.site.0)
            .field("revenue_micros", &self.revenue_micros)
            .field("attrs", &self.attrs())
            .finish()
    }
}

impl Record {
    /// A record without revenue or attributes.
    ///
    /// Fails with [`Error::InvalidRecord`] when `time_ms > TIME_MS_MAX`.
    pub fn new(time_ms: u64, kind: Kind, campaign: CampaignId, site: SiteId) -> Result<Record> {
        if time_ms > TIME_MS_MAX {
            return Err(Error::InvalidRecord {
                field: "time_ms",
                value: time_ms,
                max: TIME_MS_MAX,
            });
        }
        Ok(Record {
            time_ms,
            kind,
            campaign,
            site,
            revenue_micros: 0,
            attrs_len: 0,
            attrs: [0; ATTRS_BYTES_MAX],
        })
    }

    /// The event time in milliseconds since the Unix epoch.
    pub fn time_ms(&self) -> u64 {
        self.time_ms
    }

    /// The attribute bytes.
    pub fn attrs(&self) -> &[u8] {
        &self.attrs[..usize::from(self.attrs_len)]
    }

    /// Replaces the attribute bytes. Fails with [`Error::InvalidRecord`],
    /// leaving the record unchanged, when `attrs` is longer than
    /// [`ATTRS_BYTES_MAX`].
    pub fn set_attrs(&mut self, attrs: &[u8]) -> Result<()> {
        let Ok(len) = u8::try_from(attrs.len()) else {
            return Err(attrs_too_long(attrs.len()));
        };
        if attrs.len() > ATTRS_BYTES_MAX {
            return Err(attrs_too_long(attrs.len()));
        }
        self.attrs = [0; ATTRS_BYTES_MAX];
        self.attrs[..attrs.len()].copy_from_slice(attrs);
        self.attrs_len = len;
        Ok(())
    }

    /// Bytes of this record's encoding, in `RECORD_BYTES_MIN..=RECORD_BYTES_MAX`.
    pub fn encoded_len(&self) -> usize {
        let revenue = if self.revenue_micros == 0 {
            0
        } else {
            REVENUE_BYTES
        };
        RECORD_BYTES_MIN + revenue + usize::from(self.attrs_len)
    }

    /// Writes the encoding into `out[..encoded_len()]` and returns its length.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`Record::encoded_len`].
    pub fn encode_into(&self, out: &mut [u8]) -> usize {
        let len = self.encoded_len();
        assert!(out.len() >= len, "record buffer too short");
        debug_assert!(self.time_ms <= TIME_MS_MAX);
        out[..6].copy_from_slice(&self.time_ms.to_le_bytes()[..6]);
        out[6] = self.kind.0;
        let has_revenue = self.revenue_micros != 0;
        out[7] = self.attrs_len | if has_revenue { FLAG_REVENUE } else { 0 };
        out[8..12].copy_from_slice(&self.campaign.0.to_le_bytes());
        out[12..16].copy_from_slice(&self.site.0.to_le_bytes());
        let mut at = RECORD_BYTES_MIN;
        if has_revenue {
            out[at..at + REVENUE_BYTES].copy_from_slice(&self.revenue_micros.to_le_bytes());
            at += REVENUE_BYTES;
        }
        out[at..len].copy_from_slice(self.attrs());
        len
    }

    /// Reads one record from the front of `bytes` and returns it with its
    /// length. `None` when the bytes are not a valid encoding (too short, an
    /// attribute length over the limit, unknown flag bits, a revenue field
    /// holding 0, which the encoder never writes). Never panics.
    pub fn decode(bytes: &[u8]) -> Option<(Record, usize)> {
        let len = encoded_len_at(bytes)?;
        if bytes.len() < len {
            return None;
        }
        let mut time = [0u8; 8];
        time[..6].copy_from_slice(&bytes[..6]);
        let flags = bytes[7];
        let attrs_len = flags & FLAG_ATTRS_MASK;
        let mut record = Record::new(
            u64::from_le_bytes(time),
            Kind(bytes[6]),
            CampaignId(u32::from_le_bytes(bytes[8..12].try_into().ok()?)),
            SiteId(u32::from_le_bytes(bytes[12..16].try_into().ok()?)),
        )
        .ok()?;
        let mut at = RECORD_BYTES_MIN;
        if flags & FLAG_REVENUE != 0 {
            let revenue = i64::from_le_bytes(bytes[at..at + REVENUE_BYTES].try_into().ok()?);
            if revenue == 0 {
                return None;
            }
            record.revenue_micros = revenue;
            at += REVENUE_BYTES;
        }
        record.attrs[..usize::from(attrs_len)].copy_from_slice(&bytes[at..len]);
        record.attrs_len = attrs_len;
        debug_assert_eq!(record.encoded_len(), len);
        Some((record, len))
    }
}

/// The length of the record encoded at the front of `bytes`, from its flags
/// byte alone; `None` when fewer than 8 bytes remain or the flags are
/// invalid. Chains are walked with this without decoding whole records.
pub(crate) fn encoded_len_at(bytes: &[u8]) -> Option<usize> {
    let flags = *bytes.get(7)?;
    let attrs_len = usize::from(flags & FLAG_ATTRS_MASK);
    if attrs_len > ATTRS_BYTES_MAX || flags & !(FLAG_REVENUE | FLAG_ATTRS_MASK) != 0 {
        return None;
    }
    let revenue = if flags & FLAG_REVENUE != 0 {
        REVENUE_BYTES
    } else {
        0
    };
    Some(RECORD_BYTES_MIN + revenue + attrs_len)
}

/// The event time of the record encoded at the front of `bytes`, which the
/// caller has checked holds at least a record head.
pub(crate) fn time_ms_at(bytes: &[u8]) -> u64 {
    let mut time = [0u8; 8];
    time[..6].copy_from_slice(&bytes[..6]);
    u64::from_le_bytes(time)
}

fn attrs_too_long(len: usize) -> Error {
    Error::InvalidRecord {
        field: "attrs",
        value: u64::try_from(len).unwrap_or(u64::MAX),
        max: ATTRS_BYTES_MAX as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click() -> Record {
        Record::new(1_700_000_000_000, Kind::CLICK, CampaignId(7), SiteId(9)).expect("valid time")
    }

    #[test]
    fn worked_example_from_the_module_doc() {
        let mut out = [0u8; RECORD_BYTES_MAX];
        let len = click().encode_into(&mut out);
        assert_eq!(len, 16);
        assert_eq!(
            out[..16],
            [
                0x00, 0x68, 0xe5, 0xcf, 0x8b, 0x01, 0x02, 0x00, 7, 0, 0, 0, 9, 0, 0, 0
            ]
        );
    }

    #[test]
    fn round_trip_smallest_and_largest() {
        let mut r = click();
        let mut out = [0u8; RECORD_BYTES_MAX];
        for (revenue, attrs) in [(0, 0), (-5, 0), (0, 40), (1_234_567, 40), (9, 3)] {
            r.revenue_micros = revenue;
            r.set_attrs(&[0xab; ATTRS_BYTES_MAX][..attrs])
                .expect("fits");
            let len = r.encode_into(&mut out);
            assert!((RECORD_BYTES_MIN..=RECORD_BYTES_MAX).contains(&len));
            assert_eq!(Record::decode(&out[..len]), Some((r, len)));
            assert_eq!(Record::decode(&out[..len - 1]), None);
        }
    }

    #[test]
    fn limits_are_enforced() {
        assert!(Record::new(TIME_MS_MAX, Kind::VISIT, CampaignId(0), SiteId(0)).is_ok());
        assert!(Record::new(TIME_MS_MAX + 1, Kind::VISIT, CampaignId(0), SiteId(0)).is_err());
        let mut r = click();
        assert!(r.set_attrs(&[1; ATTRS_BYTES_MAX + 1]).is_err());
        assert!(r.set_attrs(&[1; 300]).is_err());
        assert_eq!(r.attrs(), &[] as &[u8]);
    }

    #[test]
    fn decode_rejects_bad_flags_and_zero_revenue() {
        let mut out = [0u8; RECORD_BYTES_MAX];
        let len = click().encode_into(&mut out);
        let mut bad = out;
        bad[7] = 41; // attrs length over the limit
        assert_eq!(Record::decode(&bad), None);
        bad[7] = 0x40; // an unknown flag bit
        assert_eq!(Record::decode(&bad), None);
        bad[7] = FLAG_REVENUE; // revenue present but zero
        assert_eq!(Record::decode(&bad[..len + 8]), None);
    }
}
