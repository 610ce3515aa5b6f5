//! The attributions' state as bytes: what a continuous engine's snapshot
//! saves so that it can start again where it was.
//!
//! ```text
//!  "CRDATTRB" | version u32 | attributions u32
//!  per attribution:
//!    name: len u16, bytes           (checked against the plan's)
//!    chains: len u64, the chain store's own snapshot (CRDCHAIN, checksummed)
//!    names x2 (campaigns, sites): overflow u64 | count u32 | (len u32, bytes)*
//!    absorbed stats: 8 x u64
//!    groups u32; per group: applied u64, then fresh, waiting, late:
//!      count u64, events of EVENT_IMAGE_BYTES each:
//!      time u64 | input u32 | offset u64 | user u64 | kind u8 (0 touch,
//!      1 conversion, 2 conversion with a value) | a u32 | b u32 (touch:
//!      campaign, site; value: the i64's low and high words)
//!  released frontier: flag u8, u64
//!  crc32 of everything before it (u32)
//! ```
//!
//! Every integer is little-endian. The checksum is checked before anything
//! is read; every count is checked against the bytes left before anything
//! is sized from it, so a forged count cannot allocate what the bytes do
//! not back; codes of campaigns and sites must name a dictionary entry.

use anyhow::{Context, Result, bail, ensure};
use cardinal_chains::Store;

use super::stream::{Event, Held, What};
use super::{NAMES_MAX, Names, Setup, Stats};

const MAGIC: &[u8; 8] = b"CRDATTRB";
/// The layout drawn above.
const VERSION: u32 = 1;
/// Under the fuzzer (`--cfg fuzzing`, set by cargo-fuzz) the checksum is
/// not enforced, so that mutations reach the structure behind it; every
/// other check stays.
const CHECKSUM_IGNORED: bool = cfg!(fuzzing);
/// Bytes of one held event in an image.
const EVENT_IMAGE_BYTES: usize = 8 + 4 + 8 + 8 + 1 + 4 + 4;

impl Setup<'_> {
    /// Appends the attributions' state (chains, dictionaries, held events,
    /// counts, the released frontier) to `out`.
    pub(crate) fn encode_state(&self, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_u32(out, self.attributions.len());
        for (i, a) in self.attributions.iter().enumerate() {
            let name = a.name.as_bytes();
            out.extend_from_slice(
                &u16::try_from(name.len())
                    .context("a name of at most NAME_CHARS_MAX")?
                    .to_le_bytes(),
            );
            out.extend_from_slice(name);
            let mut chains = Vec::new();
            self.stores[i]
                .snapshot(&mut chains)
                .with_context(|| format!("the chains of {}", a.name))?;
            out.extend_from_slice(&(chains.len() as u64).to_le_bytes());
            out.extend_from_slice(&chains);
            for dictionary in self.names[i].iter() {
                out.extend_from_slice(&dictionary.overflow.to_le_bytes());
                put_u32(out, dictionary.names.len());
                for name in &dictionary.names {
                    put_u32(out, name.len());
                    out.extend_from_slice(name);
                }
            }
            for n in stats_fields(&self.absorbed[i]) {
                out.extend_from_slice(&n.to_le_bytes());
            }
            put_u32(out, self.held[i].len());
            for held in &self.held[i] {
                let (parts, applied) = held.parts();
                out.extend_from_slice(&applied.to_le_bytes());
                for events in parts {
                    out.extend_from_slice(&(events.len() as u64).to_le_bytes());
                    for e in events {
                        put_event(out, e);
                    }
                }
            }
        }
        match self.released_ms {
            Some(ms) => {
                out.push(1);
                out.extend_from_slice(&ms.to_le_bytes());
            }
            None => out.extend_from_slice(&[0; 9]),
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Replaces this setup's state (fresh from [`Setup::new`] over the
    /// same plan and stream) with the one `image` holds. Refuses an image
    /// of other attributions, or with another routing of users, and any
    /// damage, without panicking.
    pub(crate) fn restore_state(&mut self, image: &[u8]) -> Result<()> {
        ensure!(
            image.len() >= MAGIC.len() + 4 + 4,
            "the attribution image is cut short"
        );
        let (body, crc) = image.split_at(image.len() - 4);
        let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        ensure!(
            CHECKSUM_IGNORED || crc32fast::hash(body) == crc,
            "the attribution image fails its checksum"
        );
        let mut r = Reader { bytes: body };
        ensure!(r.take(8)? == MAGIC, "not an attribution image");
        let version = r.u32()?;
        ensure!(
            version == VERSION,
            "attribution image version {version}, expected {VERSION}"
        );
        let count = r.u32()? as usize;
        ensure!(
            count == self.attributions.len(),
            "the image holds {count} attributions, the schema {}",
            self.attributions.len()
        );
        let mut stores = Vec::with_capacity(count);
        let mut names = Vec::with_capacity(count);
        let mut absorbed = Vec::with_capacity(count);
        let mut helds = Vec::with_capacity(count);
        for (i, a) in self.attributions.iter().enumerate() {
            let len = usize::from(r.u16()?);
            let name = r.take(len)?;
            ensure!(
                name == a.name.as_bytes(),
                "the image holds attribution {:?} where the schema has {}",
                String::from_utf8_lossy(name),
                a.name
            );
            let len = r.len()?;
            let store = Store::restore(r.take(len)?)
                .with_context(|| format!("the chains of {}", a.name))?;
            ensure!(
                store.config() == self.stores[i].config(),
                "the chains of {} were laid out otherwise ({:?}, now {:?})",
                a.name,
                store.config(),
                self.stores[i].config()
            );
            let mut dictionaries = [Names::default(), Names::default()];
            for dictionary in &mut dictionaries {
                dictionary.overflow = r.u64()?;
                let count = r.u32()? as usize;
                ensure!(count <= NAMES_MAX as usize, "more than NAMES_MAX names");
                ensure!(count * 4 <= r.bytes.len(), "a forged count of names");
                for _ in 0..count {
                    let len = r.u32()? as usize;
                    let name = r.take(len)?;
                    let before = dictionary.names.len();
                    dictionary.code(name);
                    ensure!(dictionary.names.len() == before + 1, "a name is repeated");
                }
            }
            let mut stats = Stats::default();
            for field in stats_fields_mut(&mut stats) {
                *field = r.u64()?;
            }
            let groups = r.u32()? as usize;
            ensure!(
                groups == self.held[i].len(),
                "the image holds {groups} shard groups of {}, the chains {}",
                a.name,
                self.held[i].len()
            );
            let mut held = Vec::with_capacity(groups);
            for _ in 0..groups {
                let applied = r.u64()?;
                let mut parts: [Vec<Event>; 3] = Default::default();
                for part in &mut parts {
                    let count = r.len()?;
                    ensure!(
                        count
                            .checked_mul(EVENT_IMAGE_BYTES)
                            .is_some_and(|b| b <= r.bytes.len()),
                        "a forged count of held events"
                    );
                    part.reserve_exact(count);
                    for _ in 0..count {
                        part.push(r.event(&dictionaries)?);
                    }
                }
                let [fresh, waiting, late] = parts;
                held.push(Held::from_parts(fresh, waiting, late, applied));
            }
            stores.push(store);
            names.push(std::sync::Arc::new(dictionaries));
            absorbed.push(stats);
            helds.push(held);
        }
        let released_ms = match r.u8()? {
            0 => {
                r.u64()?;
                None
            }
            1 => Some(r.u64()?),
            other => bail!("a released-frontier flag of {other}"),
        };
        ensure!(
            r.bytes.is_empty(),
            "{} bytes after the attribution image",
            r.bytes.len()
        );
        self.stores = stores;
        self.names = names;
        self.absorbed = absorbed;
        self.held = helds;
        self.released_ms = released_ms;
        Ok(())
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).expect("counts fit u32").to_le_bytes());
}

fn put_event(out: &mut Vec<u8>, e: &Event) {
    out.extend_from_slice(&e.time_ms.to_le_bytes());
    out.extend_from_slice(&e.input.to_le_bytes());
    out.extend_from_slice(&e.offset.to_le_bytes());
    out.extend_from_slice(&e.user.to_le_bytes());
    let (kind, a, b) = match e.what {
        What::Touch { campaign, site } => (0u8, campaign, site),
        What::Conversion { value_micros: None } => (1, 0, 0),
        What::Conversion {
            value_micros: Some(v),
        } => {
            let v = v.cast_unsigned();
            #[expect(clippy::cast_possible_truncation, reason = "the low word")]
            (2, v as u32, (v >> 32) as u32)
        }
    };
    out.push(kind);
    out.extend_from_slice(&a.to_le_bytes());
    out.extend_from_slice(&b.to_le_bytes());
}

fn stats_fields(s: &Stats) -> [u64; 8] {
    [
        s.touches,
        s.conversions,
        s.conversions_uncredited,
        s.skipped,
        s.values_out_of_range,
        s.touches_dropped,
        s.touches_expired,
        s.late,
    ]
}

fn stats_fields_mut(s: &mut Stats) -> [&mut u64; 8] {
    [
        &mut s.touches,
        &mut s.conversions,
        &mut s.conversions_uncredited,
        &mut s.skipped,
        &mut s.values_out_of_range,
        &mut s.touches_dropped,
        &mut s.touches_expired,
        &mut s.late,
    ]
}

/// Reads an image front to back; every read checks what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(n <= self.bytes.len(), "the attribution image is cut short");
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A length or count (what it sizes is checked by its user).
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).context("a forged length")
    }

    fn event(&mut self, names: &[Names; 2]) -> Result<Event> {
        let time_ms = self.u64()?;
        let input = self.u32()?;
        let offset = self.u64()?;
        let user = self.u64()?;
        let kind = self.u8()?;
        let a = self.u32()?;
        let b = self.u32()?;
        let what = match kind {
            0 => {
                ensure!(
                    a as usize <= names[0].names.len() && b as usize <= names[1].names.len(),
                    "a held touch point names a campaign or site the dictionaries lack"
                );
                What::Touch {
                    campaign: a,
                    site: b,
                }
            }
            1 => What::Conversion { value_micros: None },
            2 => What::Conversion {
                value_micros: Some((u64::from(a) | (u64::from(b) << 32)).cast_signed()),
            },
            other => bail!("a held event of kind {other}"),
        };
        Ok(Event {
            time_ms,
            input,
            offset,
            user,
            what,
        })
    }
}
