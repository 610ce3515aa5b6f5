//! HyperLogLog in the Aggregate Knowledge storage format (postgresql-hll,
//! java-hll, go-hll), byte for byte.
//!
//! Notation (Flajolet et al. 2007; Ertl 2017): `m = 2^log2m` registers of
//! `regwidth` bits each; a register holds 0 (untouched) up to
//! `2^regwidth - 1` (saturated, the "top" value).
//!
//! # From a hash to a register
//!
//! The 64-bit hash `x` (MurmurHash3 x64_128 h1, see [`crate::hash`]) picks
//! register `j = x & (m - 1)`; the rest `w = x >> log2m` gives the value
//! `p = trailing_zeros(w) + 1`, capped at the top value, and the register
//! keeps the maximum it has seen. `w == 0` changes no register. Note the
//! format counts *trailing* zeros, not the paper's leading zeros.
//!
//! # Representations
//!
//! A value walks UNDEFINED? EMPTY -> EXPLICIT -> registers, exactly as
//! postgresql-hll does:
//!
//! | state | in memory | encoded as |
//! |---|---|---|
//! | UNDEFINED | nothing | 3-byte header, type 0 |
//! | EMPTY | nothing | 3-byte header, type 1 |
//! | EXPLICIT | sorted `Vec<i64>` of hashes (signed order) | type 2, 8 bytes each |
//! | registers | sparse `Vec<u64>` or dense `Box<[u8]>` | type 3 SPARSE or 4 FULL |
//!
//! EXPLICIT keeps up to `T` hashes (the explicit threshold, see
//! [`Explicit`]); the next new hash promotes all of them into registers.
//!
//! The in-memory sparse/dense choice is ours and is invisible in the bytes: a
//! register set is encoded SPARSE or FULL from its *content* each time it is
//! written (postgresql-hll's rule, see [`MaxSparse`]), so two sketches with
//! the same registers always encode to the same bytes, whichever way they
//! were built. In memory a register set starts sparse — `(index << 8) |
//! value` words sorted by index, 8 bytes per non-zero register, with new
//! registers appended to an unsorted log that is sorted in once it is as
//! long as the sorted run, so that an insert is O(log n) amortized at any
//! `log2m` (see `sparse_set_max`) — and turns
//! dense (one byte per register, unpacked so that insert and union are plain
//! byte operations) once the sparse words would take more memory than the
//! dense array: `8 * len > m`. For the default (11, 5) that is 256 non-zero
//! registers, 2 KiB. Small groups stay small, and a decoder never allocates
//! more than a small multiple of the bytes it was given.
//!
//! # Estimators
//!
//! - [`Hll::cardinality`] is the AK estimator of java-hll and postgresql-hll,
//!   kept for parity with their numbers (the test vectors check it to 1e-9).
//! - [`Sketch::estimate`] is Ertl's improved raw estimator (arXiv:1702.01284,
//!   section 4, algorithm 6): no bias tables, no empirical thresholds, and a
//!   relative standard error of `sqrt(3 ln 2 - 1) / sqrt(m) ≈ 1.04 / sqrt(m)`
//!   for counts well above `m`, with a 95% interval that means 95% at every
//!   count (what `cardinal run` and SQL print; [`Hll::calibrated_estimate`]
//!   is the same). The interval once used `1.04 / sqrt(m)` at every count
//!   (the `estimate` row below, `estimator::ertl_estimate`); below about
//!   `10 m` the registers act
//!   partly as linear counting and the error is smaller than `1.04 /
//!   sqrt(m)` (0.72 / sqrt(m) at `n = m / 7`), so the interval of
//!   `estimate` is wide there: it covered the true count 99.8% of the time
//!   at n = 300 and 98.4% at n = 3,000 (m = 2048). The calibrated interval
//!   takes the standard error from the Cramér-Rao bound of Ertl's Poisson
//!   model at the estimate, `sqrt(m / I(n / m) - n)` (`I`: the Fisher
//!   information of one register's value; `- n` removes the Poisson
//!   variance of the count, which is fixed here, not drawn), times 1.015,
//!   the measured inefficiency of the estimator. Measured coverage
//!   (`cargo test --release -p cardinal-sketch --test calibration hll --
//!   --include-ignored --nocapture`, m = 2048, merges of 1 and 10 sketches,
//!   2026-11-28):
//!
//! | distinct | 300 | 1,000 | 3,000 | 10,000 | 30,000 | 10^5 | 10^6 |
//! |---|---|---|---|---|---|---|---|
//! | `estimate` (1.04/sqrt(m)) | 0.989 | 0.992 | 0.984 | 0.968 | 0.963 | 0.963 | 0.935 |
//! | `calibrated_estimate` | 0.937 | 0.949 | 0.948 | 0.944 | 0.960 | 0.963 | 0.937 |
//!
//! (600 to 2,000 sketches a count, 300 at 10^6; pooled, the calibrated
//! interval covers 0.950 of 4,200 trials from 300 to 10^5 and the printed
//! one 0.976. Up to 100 values a sketch is EXPLICIT, and exact.)
//!
//! ```
//! use cardinal_sketch::{hll::{Hll, Settings}, Sketch};
//! let mut h = Hll::new(Settings::new(11, 5).unwrap()).unwrap();
//! h.insert(cardinal_sketch::hash::bigint(1, 0));
//! assert_eq!(h.to_hex(), "\\x128b7f004403b7fb05c44a");
//! assert_eq!(h.cardinality(), Some(1.0));
//! ```

// ADVICE FOR MAINTAINERS
//
// The bytes are a contract with other implementations; the vector files in
// ../shared/vectors/hll are the judge. When you change anything here, run
// `cargo test -p cardinal-sketch --test hll_vectors`. The in-memory
// representations may change freely; `codec.rs` alone knows the bytes, and
// `kind()` alone decides SPARSE versus FULL.

mod codec;
mod estimator;
pub mod joint;

use crate::{Error, Estimate, Result, Sketch};

/// Smallest `log2m`: the AK estimator's `alpha` is undefined below 16 registers.
pub const LOG2M_MIN: u8 = 4;
/// Largest `log2m` the storage format can express (5 bits). A dense sketch of
/// this size takes 2 GiB in memory.
pub const LOG2M_MAX: u8 = 31;
/// Smallest register width in bits.
pub const REGWIDTH_MIN: u8 = 1;
/// Largest register width the format can express (3 bits of `regwidth - 1`).
pub const REGWIDTH_MAX: u8 = 8;
/// Most hashes an EXPLICIT sketch holds, whatever its threshold says: java-hll's
/// cap (2^17). Decoding more is an error; inserting more promotes.
pub const EXPLICIT_LEN_MAX: u64 = 1 << 17;
/// Cap on the automatic explicit threshold: postgresql-hll's (its values are
/// at most 128 KiB of hashes).
pub const EXPLICIT_AUTO_MAX: u64 = 16_383;
/// Largest `log2m` postgresql-hll reads (java-hll reads up to [`LOG2M_MAX`]).
pub const POSTGRESQL_LOG2M_MAX: u8 = 17;
/// Largest register width postgresql-hll reads (java-hll reads up to
/// [`REGWIDTH_MAX`]).
pub const POSTGRESQL_REGWIDTH_MAX: u8 = 7;
/// Largest explicit threshold postgresql-hll reads.
pub const POSTGRESQL_EXPLICIT_MAX: u64 = 16_383;

/// The explicit threshold: how many distinct hashes a sketch keeps exactly
/// before it promotes to registers. Stored in the header (byte 2, bits 5..0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explicit {
    /// Never EXPLICIT: the first hash goes to registers (code 0).
    Off,
    /// As many hashes as fit in the bytes of the registers,
    /// `ceil(m * regwidth / 8) / 8`, at most [`EXPLICIT_AUTO_MAX`] (code 63).
    Auto,
    /// A power of two from 1 to 2^61 (code `log2(t) + 1`); the effective
    /// threshold is capped at [`EXPLICIT_LEN_MAX`].
    Threshold(u64),
}

/// When registers are written SPARSE rather than FULL. Not stored in the bytes
/// (postgresql-hll's `hll_set_max_sparse`); only used when sparse is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxSparse {
    /// SPARSE while it is strictly smaller in bits than FULL:
    /// `nfilled * (log2m + regwidth) < m * regwidth` (postgresql-hll's -1).
    #[default]
    Auto,
    /// SPARSE while at most this many registers are non-zero; 0 means always
    /// FULL.
    Registers(u32),
}

/// The parameters of a sketch. Two sketches merge only if `log2m`,
/// `regwidth`, `explicit` and `sparse` are equal (`max_sparse` only affects
/// how bytes are written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// log2 of the number of registers, [`LOG2M_MIN`]..=[`LOG2M_MAX`].
    pub log2m: u8,
    /// Bits per register, [`REGWIDTH_MIN`]..=[`REGWIDTH_MAX`].
    pub regwidth: u8,
    /// The explicit threshold.
    pub explicit: Explicit,
    /// Whether the SPARSE encoding may be used.
    pub sparse: bool,
    /// When SPARSE is used (if `sparse`).
    pub max_sparse: MaxSparse,
}

impl Default for Settings {
    /// postgresql-hll's defaults: log2m 11, regwidth 5, automatic explicit
    /// threshold, sparse on (header bytes `8B 7F`). Every peer reads them.
    fn default() -> Self {
        Self {
            log2m: 11,
            regwidth: 5,
            explicit: Explicit::Auto,
            sparse: true,
            max_sparse: MaxSparse::Auto,
        }
    }
}

impl Settings {
    /// Settings with the given precision and the defaults for the rest.
    pub fn new(log2m: u8, regwidth: u8) -> Result<Self> {
        let settings = Self {
            log2m,
            regwidth,
            ..Self::default()
        };
        settings.validate()?;
        Ok(settings)
    }

    /// Checks every parameter against its range.
    pub fn validate(&self) -> Result<()> {
        let invalid = |name, value: u64, reason| Error::InvalidParameter {
            sketch: "hll",
            name,
            value: i64::try_from(value).unwrap_or(i64::MAX),
            reason,
        };
        if !(LOG2M_MIN..=LOG2M_MAX).contains(&self.log2m) {
            return Err(invalid("log2m", self.log2m.into(), "must be in 4..=31"));
        }
        if !(REGWIDTH_MIN..=REGWIDTH_MAX).contains(&self.regwidth) {
            return Err(invalid(
                "regwidth",
                self.regwidth.into(),
                "must be in 1..=8",
            ));
        }
        if let Explicit::Threshold(t) = self.explicit
            && (!t.is_power_of_two() || t > 1 << 61)
        {
            return Err(invalid(
                "explicit threshold",
                t,
                "must be a power of two from 1 to 2^61 (or off, or auto)",
            ));
        }
        Ok(())
    }

    /// Checks that postgresql-hll reads values with these parameters: log2m
    /// up to [`POSTGRESQL_LOG2M_MAX`], regwidth up to
    /// [`POSTGRESQL_REGWIDTH_MAX`] and an explicit threshold up to
    /// [`POSTGRESQL_EXPLICIT_MAX`]. The storage format (and java-hll) goes
    /// further; postgresql-hll refuses such values when they are read.
    pub fn check_postgresql(&self) -> Result<()> {
        self.validate()?;
        let refused = |name, value: u64, reason| Error::InvalidParameter {
            sketch: "hll",
            name,
            value: i64::try_from(value).unwrap_or(i64::MAX),
            reason,
        };
        if self.log2m > POSTGRESQL_LOG2M_MAX {
            return Err(refused(
                "log2m",
                self.log2m.into(),
                "postgresql-hll reads log2m 4..=17 only (java-hll reads up to 31)",
            ));
        }
        if self.regwidth > POSTGRESQL_REGWIDTH_MAX {
            return Err(refused(
                "regwidth",
                self.regwidth.into(),
                "postgresql-hll reads regwidth 1..=7 only (java-hll reads up to 8)",
            ));
        }
        if let Explicit::Threshold(t) = self.explicit
            && t > POSTGRESQL_EXPLICIT_MAX
        {
            return Err(refused(
                "explicit threshold",
                t,
                "postgresql-hll reads explicit thresholds up to 16383 only",
            ));
        }
        Ok(())
    }

    /// The number of registers, `m = 2^log2m`.
    #[inline]
    pub fn register_count(&self) -> u64 {
        register_count(self.log2m)
    }

    /// The saturated register value, `2^regwidth - 1`.
    #[inline]
    pub fn register_value_max(&self) -> u8 {
        register_value_max(self.regwidth)
    }

    /// The number of hashes EXPLICIT holds before promoting.
    pub fn explicit_threshold(&self) -> u64 {
        match self.explicit {
            Explicit::Off => 0,
            Explicit::Auto => {
                let full_bytes = (self.register_count() * u64::from(self.regwidth)).div_ceil(8);
                (full_bytes / 8).min(EXPLICIT_AUTO_MAX)
            }
            Explicit::Threshold(t) => t.min(EXPLICIT_LEN_MAX),
        }
    }

    /// Whether `other` can be merged with `self`.
    fn check_compatible(&self, other: &Settings) -> Result<()> {
        if self.log2m != other.log2m
            || self.regwidth != other.regwidth
            || self.explicit != other.explicit
            || self.sparse != other.sparse
        {
            return Err(Error::Incompatible {
                sketch: "hll",
                reason: format!(
                    "log2m {} vs {}, regwidth {} vs {}, explicit {:?} vs {:?}, sparse {} vs {} \
                     (all four must be equal, as in postgresql-hll)",
                    self.log2m,
                    other.log2m,
                    self.regwidth,
                    other.regwidth,
                    self.explicit,
                    other.explicit,
                    self.sparse,
                    other.sparse
                ),
            });
        }
        Ok(())
    }
}

/// The storage type a sketch encodes as (header byte 0, low nibble).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The "unknown" value of postgresql-hll; absorbs everything in a union.
    Undefined,
    /// No value inserted.
    Empty,
    /// A sorted list of the distinct hashes.
    Explicit,
    /// Non-zero registers as (index, value) words.
    Sparse,
    /// All registers.
    Full,
}

/// [`Settings`] as a sketch keeps them, in 8 bytes where the struct takes
/// 32: a rollup holds a sketch inline in every group's state, so this
/// decides the size of every aggregate state of a summary with `hll(x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Packed {
    log2m: u8,
    regwidth: u8,
    /// The storage format's byte 2: bit 6 sparse, bits 5..0 the explicit
    /// threshold's code (0 off, 63 auto, else `log2(t) + 1`).
    cutoff: u8,
    /// Whether `max_sparse` is [`MaxSparse::Auto`].
    max_sparse_auto: bool,
    /// [`MaxSparse::Registers`]' count.
    max_sparse: u32,
}

impl Packed {
    /// Packs valid settings.
    pub(super) fn of(settings: &Settings) -> Self {
        let code = match settings.explicit {
            Explicit::Off => codec::EXPLICIT_CODE_OFF,
            Explicit::Auto => codec::EXPLICIT_CODE_AUTO,
            Explicit::Threshold(t) => u8::try_from(t.trailing_zeros() + 1).expect("t <= 2^61"),
        };
        let (max_sparse_auto, max_sparse) = match settings.max_sparse {
            MaxSparse::Auto => (true, 0),
            MaxSparse::Registers(n) => (false, n),
        };
        Self {
            log2m: settings.log2m,
            regwidth: settings.regwidth,
            cutoff: (u8::from(settings.sparse) << 6) | code,
            max_sparse_auto,
            max_sparse,
        }
    }

    /// The settings of a stored header: its log2m, regwidth and cutoff
    /// byte (bit 7 clear), with [`MaxSparse::Auto`], which is not stored.
    pub(super) fn of_header(log2m: u8, regwidth: u8, cutoff: u8) -> Self {
        debug_assert_eq!(cutoff & 0x80, 0);
        Self {
            log2m,
            regwidth,
            cutoff,
            max_sparse_auto: true,
            max_sparse: 0,
        }
    }

    /// The settings packed.
    pub(super) fn settings(self) -> Settings {
        Settings {
            log2m: self.log2m,
            regwidth: self.regwidth,
            explicit: match self.cutoff & 0x3F {
                codec::EXPLICIT_CODE_OFF => Explicit::Off,
                codec::EXPLICIT_CODE_AUTO => Explicit::Auto,
                code => Explicit::Threshold(1 << (code - 1)),
            },
            sparse: self.cutoff & 0x40 != 0,
            max_sparse: if self.max_sparse_auto {
                MaxSparse::Auto
            } else {
                MaxSparse::Registers(self.max_sparse)
            },
        }
    }

    /// The storage format's byte 2 (sparse flag and explicit code).
    pub(super) fn cutoff(self) -> u8 {
        self.cutoff
    }

    fn set_max_sparse(&mut self, max_sparse: MaxSparse) {
        *self = Self::of(&Settings {
            max_sparse,
            ..self.settings()
        });
    }

    #[inline]
    fn register_count(self) -> u64 {
        register_count(self.log2m)
    }

    #[inline]
    fn register_value_max(self) -> u8 {
        register_value_max(self.regwidth)
    }
}

/// `m = 2^log2m`, for [`Settings`] and [`Packed`] alike.
#[inline]
fn register_count(log2m: u8) -> u64 {
    1 << log2m
}

/// `2^regwidth - 1`, for [`Settings`] and [`Packed`] alike.
#[inline]
fn register_value_max(regwidth: u8) -> u8 {
    u8::try_from((1u16 << regwidth) - 1).expect("regwidth <= 8")
}

/// In-memory state. See the module doc for the walk between states.
#[derive(Debug, Clone)]
enum Repr {
    Undefined,
    Empty,
    /// Distinct hashes sorted by signed value, as the format stores them.
    Explicit(Vec<i64>),
    /// Non-zero registers as `(index << 8) | value`: a run sorted by index
    /// (one word per register), then a log of registers that were not in
    /// the run when they were set, unsorted, marked with
    /// [`SPARSE_LOG_FLAG`] (see [`sparse_set_max`]). Readers go through
    /// [`sparse_words`], which folds the log in.
    Sparse(Vec<u64>),
    /// All `m` registers, one byte each.
    Dense(Box<[u8]>),
}

impl PartialEq for Repr {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Undefined, Self::Undefined) | (Self::Empty, Self::Empty) => true,
            (Self::Explicit(a), Self::Explicit(b)) => a == b,
            (Self::Sparse(a), Self::Sparse(b)) => sparse_words(a) == sparse_words(b),
            (Self::Dense(a), Self::Dense(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Repr {}

/// A HyperLogLog sketch in the AK storage format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hll {
    packed: Packed,
    repr: Repr,
}

// Inline in a rollup's aggregate states (see [`Packed`]).
const _: () = assert!(std::mem::size_of::<Hll>() <= 40);

impl Default for Hll {
    /// An EMPTY sketch with [`Settings::default`].
    fn default() -> Self {
        Self {
            packed: Packed::of(&Settings::default()),
            repr: Repr::Empty,
        }
    }
}

impl Hll {
    /// An EMPTY sketch.
    pub fn new(settings: Settings) -> Result<Self> {
        settings.validate()?;
        Ok(Self {
            packed: Packed::of(&settings),
            repr: Repr::Empty,
        })
    }

    /// An UNDEFINED sketch (postgresql-hll's `hll` "unknown" value).
    pub fn undefined(settings: Settings) -> Result<Self> {
        settings.validate()?;
        Ok(Self {
            packed: Packed::of(&settings),
            repr: Repr::Undefined,
        })
    }

    /// The sketch's parameters.
    pub fn settings(&self) -> Settings {
        self.packed.settings()
    }

    /// Changes when registers are written SPARSE. Changes no register.
    pub fn set_max_sparse(&mut self, max_sparse: MaxSparse) {
        self.packed.set_max_sparse(max_sparse);
    }

    /// The saturated register value, `2^regwidth - 1`.
    #[inline]
    pub fn register_value_max(&self) -> u8 {
        self.packed.register_value_max()
    }

    /// Adds one 64-bit hash (see [`crate::hash`]); do not pass raw ids.
    #[inline]
    pub fn insert(&mut self, hash: u64) {
        if let Repr::Dense(registers) = &mut self.repr {
            dense_insert(
                registers,
                self.packed.log2m,
                self.packed.register_value_max(),
                hash,
            );
        } else {
            self.insert_cold(hash);
        }
    }

    #[inline(never)]
    fn insert_cold(&mut self, hash: u64) {
        let threshold = self.settings().explicit_threshold();
        match &mut self.repr {
            Repr::Undefined => {}
            Repr::Empty => {
                if threshold == 0 {
                    self.repr = Repr::Sparse(Vec::new());
                    self.register_insert(hash);
                } else {
                    self.repr = Repr::Explicit(vec![hash as i64]);
                }
            }
            Repr::Explicit(values) => {
                let value = hash as i64;
                match values.binary_search(&value) {
                    Ok(_) => {}
                    Err(position) if (values.len() as u64) < threshold => {
                        values.insert(position, value);
                    }
                    Err(_) => {
                        self.promote_explicit();
                        self.register_insert(hash);
                    }
                }
            }
            Repr::Sparse(_) | Repr::Dense(_) => self.register_insert(hash),
        }
    }

    /// Turns an EXPLICIT sketch into registers holding the same hashes.
    fn promote_explicit(&mut self) {
        let Repr::Explicit(values) = std::mem::replace(&mut self.repr, Repr::Sparse(Vec::new()))
        else {
            unreachable!("promote_explicit is only called on EXPLICIT sketches");
        };
        for value in values {
            self.register_insert(value as u64);
        }
        debug_assert!(matches!(self.repr, Repr::Sparse(_) | Repr::Dense(_)));
    }

    /// Updates the register `hash` maps to. The sketch must hold registers.
    fn register_insert(&mut self, hash: u64) {
        let log2m = self.packed.log2m;
        let top = self.packed.register_value_max();
        match &mut self.repr {
            Repr::Dense(registers) => dense_insert(registers, log2m, top, hash),
            Repr::Sparse(words) => {
                let Some((index, value)) = register_of(hash, log2m, top) else {
                    return;
                };
                if sparse_set_max(words, index, value) {
                    self.densify_if_large();
                }
            }
            _ => unreachable!("register_insert needs registers"),
        }
    }

    /// Moves sparse registers to a dense array once that is smaller.
    fn densify_if_large(&mut self) {
        let m = self.packed.register_count();
        if let Repr::Sparse(words) = &mut self.repr
            && (words.len() as u64) * 8 > m
        {
            // The log may hold a register twice: count each once.
            sparse_flush(words);
            if (words.len() as u64) * 8 > m {
                self.repr = Repr::Dense(sparse_to_dense(words, m));
            }
        }
    }

    /// The storage type [`Sketch::encode`] writes for the current content.
    pub fn kind(&self) -> Kind {
        match &self.repr {
            Repr::Undefined => Kind::Undefined,
            Repr::Empty => Kind::Empty,
            Repr::Explicit(_) => Kind::Explicit,
            Repr::Sparse(words) => self.registers_kind(sparse_words(words).len() as u64),
            Repr::Dense(registers) => {
                let filled = registers.iter().filter(|&&r| r != 0).count() as u64;
                self.registers_kind(filled)
            }
        }
    }

    /// postgresql-hll's choice between SPARSE and FULL for `filled` non-zero
    /// registers.
    fn registers_kind(&self, filled: u64) -> Kind {
        let s = self.settings();
        if !s.sparse {
            return Kind::Full;
        }
        let sparse = match s.max_sparse {
            MaxSparse::Auto => {
                filled * u64::from(s.log2m + s.regwidth)
                    < s.register_count() * u64::from(s.regwidth)
            }
            MaxSparse::Registers(n) => filled <= u64::from(n),
        };
        if sparse { Kind::Sparse } else { Kind::Full }
    }

    /// The hashes of an EXPLICIT sketch, sorted by signed value.
    pub fn explicit_values(&self) -> Option<&[i64]> {
        match &self.repr {
            Repr::Explicit(values) => Some(values),
            _ => None,
        }
    }

    /// All `m` register values, with an EXPLICIT sketch's hashes folded in
    /// (as if promoted). `None` for UNDEFINED.
    pub fn registers(&self) -> Option<Vec<u8>> {
        let m = self.packed.register_count();
        let m_usize = usize::try_from(m).expect("m fits in memory");
        match &self.repr {
            Repr::Undefined => None,
            Repr::Empty => Some(vec![0; m_usize]),
            Repr::Explicit(values) => {
                let mut registers = vec![0; m_usize];
                for &value in values {
                    dense_insert(
                        &mut registers,
                        self.packed.log2m,
                        self.register_value_max(),
                        value as u64,
                    );
                }
                Some(registers)
            }
            Repr::Sparse(words) => Some(sparse_to_dense(&sparse_words(words), m).into_vec()),
            Repr::Dense(registers) => Some(registers.to_vec()),
        }
    }

    /// The register-value histogram: `counts[k]` registers hold value `k`,
    /// for `k` in `0..=top`. `None` for UNDEFINED and EXPLICIT (whose answers
    /// are exact).
    fn histogram(&self) -> Option<Vec<u64>> {
        let top = usize::from(self.register_value_max());
        let mut counts = vec![0u64; top + 1];
        match &self.repr {
            Repr::Undefined | Repr::Explicit(_) => return None,
            Repr::Empty => counts[0] = self.packed.register_count(),
            Repr::Sparse(words) => {
                let words = sparse_words(words);
                counts[0] = self.packed.register_count() - words.len() as u64;
                for &word in words.iter() {
                    counts[usize::from(sparse_value(word))] += 1;
                }
            }
            Repr::Dense(registers) => estimator::histogram_dense(registers, &mut counts),
        }
        debug_assert_eq!(counts.iter().sum::<u64>(), self.packed.register_count());
        Some(counts)
    }

    /// [`Sketch::estimate`]'s value with a calibrated 95% interval: the
    /// standard error of the Cramér-Rao bound at the estimate, which is
    /// smaller than `1.04 / sqrt(m)` below about `10 m` (see the module
    /// docs for the derivation and the measured coverage). Exact for EMPTY
    /// and EXPLICIT, unbounded for UNDEFINED, as `estimate`.
    pub fn calibrated_estimate(&self) -> Estimate {
        match &self.repr {
            Repr::Sparse(_) | Repr::Dense(_) => {
                let counts = self.histogram().expect("registers have a histogram");
                estimator::ertl_calibrated(&counts, self.packed.log2m)
            }
            _ => self.estimate(),
        }
    }

    /// The AK estimator of java-hll and postgresql-hll (see
    /// `specs/hll-storage.md`), for numbers identical to theirs. `None` for
    /// UNDEFINED; NaN where java-hll gives NaN. Prefer [`Sketch::estimate`].
    pub fn cardinality(&self) -> Option<f64> {
        match &self.repr {
            Repr::Undefined => None,
            Repr::Empty => Some(0.0),
            Repr::Explicit(values) => Some(values.len() as f64),
            _ => {
                let counts = self.histogram().expect("registers have a histogram");
                Some(estimator::ak_cardinality(
                    &counts,
                    self.packed.log2m,
                    self.packed.regwidth,
                ))
            }
        }
    }

    /// The postgresql-hll text form of the bytes, `\x` and lower-case hex as
    /// PostgreSQL prints it, ready for `SELECT hll_cardinality('\x...'::hll)`.
    pub fn to_hex(&self) -> String {
        let bytes = self.encode();
        let mut hex = String::with_capacity(2 + 2 * bytes.len());
        hex.push_str("\\x");
        for byte in bytes {
            hex.push_str(&format!("{byte:02x}"));
        }
        hex
    }

    /// Reads the `\x...` text form (the `\x` is optional, case is ignored),
    /// with [`MaxSparse::Auto`]; see [`Hll::from_hex_with`].
    pub fn from_hex(text: &str) -> Result<Self> {
        Self::decode(&parse_hex(text)?)
    }

    /// Reads the `\x...` text form with a given [`MaxSparse`] (not stored in
    /// the bytes), as [`Hll::decode_with`] does for bytes.
    pub fn from_hex_with(text: &str, max_sparse: MaxSparse) -> Result<Self> {
        Self::decode_with(&parse_hex(text)?, max_sparse)
    }

    /// Decodes with a given [`MaxSparse`] (not stored in the bytes).
    pub fn decode_with(bytes: &[u8], max_sparse: MaxSparse) -> Result<Self> {
        let mut hll = codec::decode(bytes)?;
        hll.packed.set_max_sparse(max_sparse);
        Ok(hll)
    }

    /// Bytes of heap memory this sketch holds.
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Undefined | Repr::Empty => 0,
            Repr::Explicit(values) => values.capacity() * 8,
            Repr::Sparse(words) => words.capacity() * 8,
            Repr::Dense(registers) => registers.len(),
        }
    }

    /// Folds a register set (dense, in `other`) into `self`'s registers.
    fn merge_registers(&mut self, other: &Repr) {
        debug_assert!(matches!(self.repr, Repr::Sparse(_) | Repr::Dense(_)));
        if let Repr::Sparse(words) = &mut self.repr {
            sparse_flush(words);
        }
        match (&mut self.repr, other) {
            (Repr::Dense(a), Repr::Dense(b)) => dense_union(a, b),
            (Repr::Dense(a), Repr::Sparse(b)) => {
                for &word in sparse_words(b).iter() {
                    let index = usize::try_from(sparse_index(word)).expect("index < m");
                    a[index] = a[index].max(sparse_value(word));
                }
            }
            (Repr::Sparse(a), Repr::Dense(b)) => {
                let mut dense = b.clone();
                for &word in a.iter() {
                    let index = usize::try_from(sparse_index(word)).expect("index < m");
                    dense[index] = dense[index].max(sparse_value(word));
                }
                self.repr = Repr::Dense(dense);
            }
            (Repr::Sparse(a), Repr::Sparse(b)) => {
                *a = sparse_union(a, &sparse_words(b));
                self.densify_if_large();
            }
            _ => unreachable!("merge_registers takes register sets"),
        }
    }
}

impl Sketch for Hll {
    type Estimate = Estimate;

    /// The union, with postgresql-hll's rules: UNDEFINED absorbs, EMPTY is the
    /// identity, EXPLICIT sets may promote, registers take the maximum.
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.settings().check_compatible(&other.settings())?;
        match (&self.repr, &other.repr) {
            (Repr::Undefined, _) | (_, Repr::Empty) => {}
            (_, Repr::Undefined) => self.repr = Repr::Undefined,
            (Repr::Empty, _) => self.repr = other.repr.clone(),
            (_, Repr::Explicit(values)) => {
                for &value in values {
                    self.insert(value as u64);
                }
            }
            (Repr::Explicit(_), Repr::Sparse(_) | Repr::Dense(_)) => {
                let Repr::Explicit(values) = std::mem::replace(&mut self.repr, other.repr.clone())
                else {
                    unreachable!("matched EXPLICIT above");
                };
                for value in values {
                    self.register_insert(value as u64);
                }
            }
            (Repr::Sparse(_) | Repr::Dense(_), Repr::Sparse(_) | Repr::Dense(_)) => {
                self.merge_registers(&other.repr);
            }
        }
        Ok(())
    }

    /// Ertl's improved estimator with a 95% interval of `1.04 / sqrt(m)`
    /// relative error (wide below about `10 m`, see the module docs and
    /// [`Hll::calibrated_estimate`]); exact for EMPTY and EXPLICIT.
    /// UNDEFINED estimates as NaN with an unbounded interval.
    fn estimate(&self) -> Estimate {
        match &self.repr {
            Repr::Undefined => Estimate {
                value: f64::NAN,
                lower: 0.0,
                upper: f64::INFINITY,
                confidence: crate::CONFIDENCE_DEFAULT,
            },
            Repr::Empty => Estimate::exact(0.0),
            Repr::Explicit(values) => Estimate::exact(values.len() as f64),
            _ => {
                let counts = self.histogram().expect("registers have a histogram");
                estimator::ertl_calibrated(&counts, self.packed.log2m)
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Decodes with [`MaxSparse::Auto`]; see [`Hll::decode_with`].
    fn decode(bytes: &[u8]) -> Result<Self> {
        codec::decode(bytes)
    }
}

/// The register and value a hash updates, or `None` when `w == 0`.
#[inline]
fn register_of(hash: u64, log2m: u8, top: u8) -> Option<(u64, u8)> {
    let index = hash & ((1u64 << log2m) - 1);
    let w = hash >> log2m;
    if w == 0 {
        return None;
    }
    // trailing_zeros < 64, so the +1 fits in a u8 before the cap.
    let value = u8::try_from(w.trailing_zeros() + 1)
        .expect("at most 64")
        .min(top);
    Some((index, value))
}

// The hot path indexes with `as usize` casts: a 64-bit target makes them
// lossless (an index is below m <= 2^31).
const _: () = assert!(usize::BITS == 64, "cardinal targets 64-bit platforms");

/// The hot loop body: one hash into a dense register array.
#[inline]
#[expect(
    clippy::cast_possible_truncation,
    reason = "index < m <= 2^31; trailing_zeros < 64"
)]
fn dense_insert(registers: &mut [u8], log2m: u8, top: u8, hash: u64) {
    debug_assert_eq!(registers.len() as u64, 1u64 << log2m);
    // Masking with len - 1 (m is a power of two) shows the compiler that the
    // index is in bounds, so the hot loop carries no bounds check.
    let index = (hash as usize) & (registers.len() - 1);
    let w = hash >> log2m;
    // w == 0 leaves every register alone: value 0 never raises a register.
    // The arithmetic stays in 32-bit registers: computed in u8, the compiler
    // wrote a byte register whose false dependency on the previous
    // iteration's register load serialised the loop (2.6 ns instead of
    // 0.9 ns per insert on the 2-vCPU EPYC VM, 2026-11-21).
    let value = if w == 0 {
        0
    } else {
        (w.trailing_zeros() + 1).min(u32::from(top)) as u8
    };
    let register = &mut registers[index];
    *register = (*register).max(value);
}

/// Register-wise maximum, the union of two dense sketches. The compiler
/// vectorises this loop (`pmaxub`).
fn dense_union(a: &mut [u8], b: &[u8]) {
    assert_eq!(a.len(), b.len(), "union of sketches with equal m");
    for (x, &y) in a.iter_mut().zip(b) {
        *x = (*x).max(y);
    }
}

#[inline]
fn sparse_index(word: u64) -> u64 {
    word >> 8
}

#[inline]
fn sparse_value(word: u64) -> u8 {
    (word & 0xFF) as u8
}

#[inline]
fn sparse_word(index: u64, value: u8) -> u64 {
    (index << 8) | u64::from(value)
}

/// Marks a sparse word as part of the unsorted log after the sorted run
/// (indexes are below 2^31, so the top bit of a word is free).
const SPARSE_LOG_FLAG: u64 = 1 << 63;

/// The log is sorted into the run once it is as long as the run, and at
/// least this long: few registers are then sorted often, and many rarely.
const SPARSE_LOG_LEN_MIN: usize = 64;

/// Raises register `index` to `value` in a sparse list (see [`Repr::Sparse`]).
/// Returns whether the list grew (a new register may have become non-zero).
///
/// A register in the sorted run is raised in place; any other is appended
/// to the log, which is sorted into the run when it is as long as the run.
/// Each word is so sorted O(1) times amortized, and an insert costs
/// O(log n) amortized at every size, where inserting into the sorted run
/// itself would move O(n) words per new register: quadratic for the 2^28
/// sparse registers of a sketch with `log2m` 31.
fn sparse_set_max(words: &mut Vec<u64>, index: u64, value: u8) -> bool {
    debug_assert!(value != 0);
    let sorted_len = words.partition_point(|&w| w & SPARSE_LOG_FLAG == 0);
    match words[..sorted_len].binary_search_by_key(&index, |&w| sparse_index(w)) {
        Ok(position) => {
            if sparse_value(words[position]) < value {
                words[position] = sparse_word(index, value);
            }
            false
        }
        Err(_) => {
            words.push(SPARSE_LOG_FLAG | sparse_word(index, value));
            if words.len() - sorted_len >= sorted_len.max(SPARSE_LOG_LEN_MIN) {
                sparse_flush(words);
            }
            true
        }
    }
}

/// Sorts a sparse list's log into its run: one word per register, the
/// largest value for each, sorted by index, no log.
fn sparse_flush(words: &mut Vec<u64>) {
    if words.last().is_none_or(|&w| w & SPARSE_LOG_FLAG == 0) {
        return;
    }
    for word in words.iter_mut() {
        *word &= !SPARSE_LOG_FLAG;
    }
    // By index, then value: the last word of each index has the maximum.
    words.sort_unstable();
    words.dedup_by(|later, earlier| {
        let same = sparse_index(*later) == sparse_index(*earlier);
        if same {
            *earlier = *later;
        }
        same
    });
}

/// A sparse list as readers want it: sorted by index, one word per
/// register. Borrowed when the log is empty, as after decoding or a merge.
fn sparse_words(words: &[u64]) -> std::borrow::Cow<'_, [u64]> {
    if words.last().is_none_or(|&w| w & SPARSE_LOG_FLAG == 0) {
        std::borrow::Cow::Borrowed(words)
    } else {
        let mut words = words.to_vec();
        sparse_flush(&mut words);
        std::borrow::Cow::Owned(words)
    }
}

fn sparse_union(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (ia, ib) = (sparse_index(a[i]), sparse_index(b[j]));
        if ia < ib {
            out.push(a[i]);
            i += 1;
        } else if ib < ia {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(sparse_word(ia, sparse_value(a[i]).max(sparse_value(b[j]))));
            i += 1;
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

fn sparse_to_dense(words: &[u64], m: u64) -> Box<[u8]> {
    let mut dense = vec![0u8; usize::try_from(m).expect("m fits in memory")].into_boxed_slice();
    for &word in words {
        let index = usize::try_from(sparse_index(word)).expect("index < m");
        dense[index] = sparse_value(word);
    }
    dense
}

/// Parses `\x`-prefixed (optional) hex, as postgresql-hll prints `hll` values.
fn parse_hex(text: &str) -> Result<Vec<u8>> {
    let text = text.trim();
    let digits = text.strip_prefix("\\x").unwrap_or(text);
    let malformed = |reason: String| Error::Malformed {
        sketch: "hll",
        reason,
    };
    // A character that is not a digit says more than the count does.
    if let Some(c) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(malformed(format!("{c:?} is not a hex digit")));
    }
    let digits = digits.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err(malformed(format!(
            "hex text has an odd number of digits ({})",
            digits.len()
        )));
    }
    let nibble = |c: u8| -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => c - b'A' + 10,
        }
    };
    Ok(digits
        .chunks_exact(2)
        .map(|pair| nibble(pair[0]) << 4 | nibble(pair[1]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash;

    fn hll(log2m: u8, regwidth: u8) -> Hll {
        Hll::new(Settings::new(log2m, regwidth).expect("valid")).expect("valid")
    }

    #[test]
    fn spec_examples() {
        assert_eq!(Hll::default().to_hex(), "\\x118b7f");
        let mut h = hll(11, 5);
        h.insert(hash::bigint(1, 0));
        assert_eq!(h.to_hex(), "\\x128b7f004403b7fb05c44a");
        let mut off = Hll::new(Settings {
            explicit: Explicit::Off,
            ..Settings::default()
        })
        .expect("valid");
        off.insert(hash::bigint(1, 0));
        assert_eq!(off.to_hex(), "\\x138b408944");
    }

    #[test]
    fn explicit_walks_to_sparse_then_full() {
        let mut h = hll(11, 5);
        let threshold = h.settings().explicit_threshold();
        assert_eq!(threshold, 160);
        for i in 0..threshold {
            h.insert(hash::user_id(i));
        }
        assert_eq!(h.kind(), Kind::Explicit);
        h.insert(hash::user_id(threshold));
        assert_eq!(h.kind(), Kind::Sparse);
        for i in 0..100_000 {
            h.insert(hash::user_id(i));
        }
        assert_eq!(h.kind(), Kind::Full);
        let e = h.estimate();
        assert!(e.lower < 100_000.0 && 100_000.0 < e.upper, "{e}");
    }

    #[test]
    fn sparse_becomes_dense_in_memory_past_m_over_8() {
        let mut h = Hll::new(Settings {
            explicit: Explicit::Off,
            ..Settings::default()
        })
        .expect("valid");
        let mut i = 0;
        while matches!(h.repr, Repr::Sparse(_) | Repr::Empty) {
            h.insert(hash::user_id(i));
            i += 1;
        }
        assert!(matches!(h.repr, Repr::Dense(_)));
        assert_eq!(
            h.registers()
                .expect("registers")
                .iter()
                .filter(|&&r| r > 0)
                .count(),
            257
        );
    }

    #[test]
    fn a_sketch_gives_back_the_settings_it_was_made_with() {
        let mut all = Vec::new();
        for explicit in [Explicit::Off, Explicit::Auto, Explicit::Threshold(1)]
            .into_iter()
            .chain((0..=61).map(|bits| Explicit::Threshold(1 << bits)))
        {
            for max_sparse in [
                MaxSparse::Auto,
                MaxSparse::Registers(0),
                MaxSparse::Registers(7),
                MaxSparse::Registers(u32::MAX),
            ] {
                for (log2m, regwidth, sparse) in [(4, 1, false), (11, 5, true), (31, 8, true)] {
                    all.push(Settings {
                        log2m,
                        regwidth,
                        explicit,
                        sparse,
                        max_sparse,
                    });
                }
            }
        }
        for settings in all {
            let mut hll = Hll::new(settings).expect("valid settings");
            assert_eq!(hll.settings(), settings);
            hll.set_max_sparse(MaxSparse::Registers(3));
            assert_eq!(
                hll.settings(),
                Settings {
                    max_sparse: MaxSparse::Registers(3),
                    ..settings
                }
            );
            let back = Hll::decode_with(&hll.encode(), settings.max_sparse).expect("own bytes");
            assert_eq!(back.settings(), settings);
        }
    }

    #[test]
    fn merge_rejects_mismatched_settings() {
        let mut a = hll(11, 5);
        let b = hll(12, 5);
        let error = a.merge(&b).expect_err("mismatch");
        assert!(error.to_string().contains("log2m 11 vs 12"), "{error}");
    }

    #[test]
    fn undefined_absorbs_and_empty_is_identity() {
        let mut a = hll(11, 5);
        a.insert(7 << 11);
        let before = a.clone();
        a.merge(&hll(11, 5)).expect("same settings");
        assert_eq!(a, before);
        a.merge(&Hll::undefined(Settings::default()).expect("valid"))
            .expect("same settings");
        assert_eq!(a.kind(), Kind::Undefined);
        assert_eq!(a.cardinality(), None);
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let h = Hll::from_hex("\\x128b7f004403b7fb05c44a").expect("valid");
        assert_eq!(h.cardinality(), Some(1.0));
        let error = |text: &str| Hll::from_hex(text).expect_err(text).to_string();
        assert!(error("\\x128").contains("odd number of digits (3)"));
        assert!(error("zz").contains("'z' is not a hex digit"));
        // Not hex at all: the character says so, not the digit count.
        assert!(
            error("xyz").contains("'x' is not a hex digit"),
            "{}",
            error("xyz")
        );
    }

    #[test]
    fn hex_is_written_in_lower_case_and_read_in_either() {
        let mut h = hll(11, 5);
        h.insert(hash::bigint(1, 0));
        let hex = h.to_hex();
        assert_eq!(hex, hex.to_ascii_lowercase());
        let upper = format!("\\x{}", hex[2..].to_ascii_uppercase());
        assert_eq!(Hll::from_hex(&upper).expect("upper"), h);
        assert_eq!(Hll::from_hex(&hex).expect("lower"), h);
    }

    #[test]
    fn from_hex_keeps_a_given_max_sparse() {
        let mut h = Hll::new(Settings {
            explicit: Explicit::Off,
            ..Settings::default()
        })
        .expect("valid");
        for i in 0..10 {
            h.insert(hash::user_id(i));
        }
        assert_eq!(h.kind(), Kind::Sparse);
        let back = Hll::from_hex_with(&h.to_hex(), MaxSparse::Registers(0)).expect("own hex");
        assert_eq!(back.settings().max_sparse, MaxSparse::Registers(0));
        assert_eq!(back.kind(), Kind::Full);
        assert_eq!(back.registers(), h.registers());
    }

    #[test]
    fn postgresql_reads_a_narrower_range_than_the_format() {
        let refused = |settings: Settings| {
            settings
                .check_postgresql()
                .expect_err("outside postgresql-hll's ranges")
                .to_string()
        };
        assert!(Settings::default().check_postgresql().is_ok());
        let widest = Settings {
            explicit: Explicit::Threshold(8192),
            ..Settings::new(17, 7).expect("valid")
        };
        assert!(widest.check_postgresql().is_ok());
        assert!(
            Settings::new(4, 1)
                .expect("valid")
                .check_postgresql()
                .is_ok()
        );
        assert!(refused(Settings::new(18, 5).expect("valid")).contains("log2m 4..=17"));
        assert!(refused(Settings::new(11, 8).expect("valid")).contains("regwidth 1..=7"));
        let threshold = Settings {
            explicit: Explicit::Threshold(16_384),
            ..Settings::default()
        };
        assert!(refused(threshold).contains("up to 16383"));
    }

    #[test]
    fn zero_w_is_stored_in_explicit_but_sets_no_register() {
        let mut h = hll(11, 5);
        h.insert(5); // w == 0
        assert_eq!(h.kind(), Kind::Explicit);
        assert_eq!(
            h.registers()
                .expect("registers")
                .iter()
                .filter(|&&r| r > 0)
                .count(),
            0
        );
    }
}
