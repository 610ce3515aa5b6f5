//! The 32-byte header shared by the Count-Min sketches, and the checked
//! readers behind `decode`. The layout is drawn in the parent module's doc.

use super::{Params, SKETCH, Update};
use crate::{Error, Result};

/// The bytes every encoding starts with: "CM".
pub(super) const MAGIC: [u8; 2] = *b"CM";

/// The format version this crate writes and reads.
pub(super) const FORMAT_VERSION: u8 = 1;

/// Header length in bytes.
pub(super) const HEADER_BYTES: usize = 32;

/// Flag bit 0: conservative update.
const FLAG_CONSERVATIVE: u8 = 1;

/// Which sketch the bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    CountMin = 1,
    Dyadic = 2,
    HeavyHitters = 3,
}

/// The decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) kind: Kind,
    pub(super) params: Params,
    /// `domain_bits` for [`Kind::Dyadic`], `capacity` for
    /// [`Kind::HeavyHitters`], 0 otherwise.
    pub(super) kind_param: u32,
    pub(super) total_weight: u64,
}

impl Header {
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let depth = u8::try_from(self.params.depth).expect("depth <= DEPTH_MAX <= 255");
        let flags = match self.params.update {
            Update::Plain => 0,
            Update::Conservative => FLAG_CONSERVATIVE,
        };
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[FORMAT_VERSION, self.kind as u8, flags, depth, 0, 0]);
        out.extend_from_slice(&self.params.width.to_le_bytes());
        out.extend_from_slice(&self.kind_param.to_le_bytes());
        out.extend_from_slice(&self.params.seed.to_le_bytes());
        out.extend_from_slice(&self.total_weight.to_le_bytes());
        assert_eq!(out.len() - start, HEADER_BYTES);
    }

    /// Reads and checks the header; returns it with the body that follows.
    /// Checks the parameters against the limits, but not the body length,
    /// which depends on the kind.
    pub(super) fn read(bytes: &[u8], expected: Kind) -> Result<(Self, &[u8])> {
        let Some((head, body)) = bytes.split_first_chunk::<HEADER_BYTES>() else {
            return Err(Error::Truncated {
                sketch: SKETCH,
                expected: HEADER_BYTES as u64,
                found: bytes.len() as u64,
            });
        };
        if head[0..2] != MAGIC {
            return Err(malformed(format!(
                "magic {:02x?} is not \"CM\"",
                &head[0..2]
            )));
        }
        if head[2] != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                sketch: SKETCH,
                expected: FORMAT_VERSION,
                found: head[2],
            });
        }
        if head[3] != expected as u8 {
            return Err(malformed(format!(
                "kind {} where kind {} ({expected:?}) was expected",
                head[3], expected as u8
            )));
        }
        let update = match head[4] {
            0 => Update::Plain,
            FLAG_CONSERVATIVE => Update::Conservative,
            flags => return Err(malformed(format!("unknown flags {flags:#04x}"))),
        };
        if head[6..8] != [0, 0] {
            return Err(malformed(
                "reserved header bytes 6..8 are not zero".to_string(),
            ));
        }
        let params = Params {
            depth: u32::from(head[5]),
            width: read_u32(&head[8..12]),
            update,
            seed: read_u64(&head[16..24]),
        };
        params.validate()?;
        let header = Self {
            kind: expected,
            params,
            kind_param: read_u32(&head[12..16]),
            total_weight: read_u64(&head[24..32]),
        };
        Ok((header, body))
    }
}

pub(super) fn malformed(reason: String) -> Error {
    Error::Malformed {
        sketch: SKETCH,
        reason,
    }
}

/// Checks that `body` holds exactly `expected_bytes`, so callers allocate
/// only what the input backs. Callers check the counter limit first (the
/// header's parameters pass `counters_bytes_check`); the body may hold more
/// than counters, such as heavy-hitter keys.
pub(super) fn expect_body_len(body: &[u8], expected_bytes: u64) -> Result<()> {
    let found = body.len() as u64;
    if found < expected_bytes {
        return Err(Error::Truncated {
            sketch: SKETCH,
            expected: HEADER_BYTES as u64 + expected_bytes,
            found: HEADER_BYTES as u64 + found,
        });
    }
    if found > expected_bytes {
        return Err(malformed(format!(
            "{} bytes follow the {expected_bytes}-byte body",
            found - expected_bytes
        )));
    }
    Ok(())
}

/// Reads little-endian u64 counters; `body.len()` must be a multiple of 8
/// already checked against the header.
pub(super) fn read_counters(body: &[u8]) -> Vec<u64> {
    assert_eq!(body.len() % 8, 0);
    body.chunks_exact(8).map(read_u64).collect()
}

pub(super) fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("callers pass 4 bytes"))
}

pub(super) fn read_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("callers pass 8 bytes"))
}
