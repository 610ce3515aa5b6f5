//! Hashing identical to postgresql-hll's `hll_hash_*` functions.
//!
//! postgresql-hll hashes a value's bytes with MurmurHash3 x64_128 and keeps
//! the first 64-bit half, h1, as a signed bigint. We return it as `u64` (the
//! same bits); `as i64` gives the SQL value. The seed is a 32-bit value: a
//! negative SQL seed is taken as `seed as u32`, as postgresql-hll does.
//!
//! The engine hashes each user id once ([`user_id`]: h1 with seed 0, as
//! `hll_hash_bigint`) and hands the 64-bit hash to every sketch that reads
//! it. The 8-byte case has its own specialised MurmurHash3; text
//! ([`bytes`], `hll_hash_text`) has a general one that reads a tail as two
//! words. Both are tested against the `mur3` crate, a dev-dependency only.
//!
//! Bytes hashed per SQL type: boolean 1 byte, smallint 2, integer 4, bigint 8
//! (little-endian), text and bytea their raw bytes. Checked values (from a
//! live postgresql-hll 2.20, see `specs/hll-storage.md`):
//!
//! ```
//! use cardinal_sketch::hash;
//! assert_eq!(hash::bigint(1, 0) as i64, 19144387141682250);
//! assert_eq!(hash::integer(1, 0) as i64, -8604791237420463362);
//! assert_eq!(hash::bytes(b"hello", 0) as i64, -3758069500696749310);
//! assert_eq!(hash::bigint(1, 42) as i64, -3171019155122926524);
//! assert_eq!(hash::bytes(b"", 0), 0);
//! ```

/// The default seed of postgresql-hll's hash functions.
pub const SEED_DEFAULT: u32 = 0;

/// `hll_hash_bytea` / `hll_hash_text`: MurmurHash3 x64_128 h1 of raw bytes.
///
/// Written out here rather than taken from `mur3` (which the tests keep
/// as the reference): text dimensions and `topk` names are mostly under 16
/// bytes, all tail, and the reference reads a tail one byte at a time
/// through a 15-way switch (~70 instructions for a 6-byte site name, 2% of
/// the engine's W1 instructions). Here a tail is two zero-padded
/// little-endian words, read with a few loads, and both are mixed: a zero
/// word mixes to zero, which is what the reference's skipped cases add.
#[inline]
pub fn bytes(value: &[u8], seed: u32) -> u64 {
    let mut h1 = u64::from(seed);
    let mut h2 = u64::from(seed);
    let mut blocks = value.chunks_exact(16);
    for block in &mut blocks {
        let (k1, k2) = (word_at(block, 0), word_at(block, 8));
        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    let (k1, k2) = if tail.len() > 8 {
        (word_at(tail, 0), short_word(&tail[8..]))
    } else {
        (short_word(tail), 0)
    };
    finish(h1 ^ mix_k1(k1), h2 ^ mix_k2(k2), value.len() as u64)
}

/// MurmurHash3 x64_128's finalisation of (h1, h2) for an input of `len`
/// bytes, keeping only h1.
#[inline]
fn finish(mut h1: u64, mut h2: u64, len: u64) -> u64 {
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1.wrapping_add(h2)
}

/// The 8 bytes of `bytes` at `at`, little-endian.
#[inline]
fn word_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The 0 to 8 bytes of `tail` as a little-endian word, zero-padded: two
/// overlapping 4- or 2-byte loads (or one byte), by the length's range,
/// which texts of one column mostly share (as `cardinal_event::bytes::
/// tail_word`, which this crate does not depend on).
#[inline]
fn short_word(tail: &[u8]) -> u64 {
    let len = tail.len();
    if len == 8 {
        return word_at(tail, 0);
    }
    debug_assert!(len < 8);
    if len >= 4 {
        let low = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes"));
        let high = u32::from_le_bytes(tail[len - 4..].try_into().expect("4 bytes"));
        u64::from(low) | u64::from(high) << (8 * (len - 4))
    } else if len >= 2 {
        let low = u16::from_le_bytes(tail[..2].try_into().expect("2 bytes"));
        let high = u16::from_le_bytes(tail[len - 2..].try_into().expect("2 bytes"));
        u64::from(low) | u64::from(high) << (8 * (len - 2))
    } else if len == 1 {
        u64::from(tail[0])
    } else {
        0
    }
}

/// MurmurHash3 x64_128's premix of a block's or tail's first word.
#[inline]
fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(MURMUR_C1)
        .rotate_left(31)
        .wrapping_mul(MURMUR_C2)
}

/// MurmurHash3 x64_128's premix of a block's or tail's second word.
#[inline]
fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(MURMUR_C2)
        .rotate_left(33)
        .wrapping_mul(MURMUR_C1)
}

/// `hll_hash_bigint`: the 8 little-endian bytes of `value`.
///
/// This is the engine's hot hash (one per event), so it runs MurmurHash3
/// x64_128 specialised to an 8-byte input: no block loop, one tail word,
/// the finalisation, and only h1 kept. `tests` check it against the general
/// implementation on random inputs.
#[inline]
pub fn bigint(value: i64, seed: u32) -> u64 {
    murmur3_h1_of_8_bytes(u64::from_le_bytes(value.to_le_bytes()), seed)
}

/// `hll_hash_integer`: the 4 little-endian bytes of `value`.
#[inline]
pub fn integer(value: i32, seed: u32) -> u64 {
    bytes(&value.to_le_bytes(), seed)
}

/// `hll_hash_smallint`: the 2 little-endian bytes of `value`.
#[inline]
pub fn smallint(value: i16, seed: u32) -> u64 {
    bytes(&value.to_le_bytes(), seed)
}

/// `hll_hash_boolean`: one byte, 1 or 0.
#[inline]
pub fn boolean(value: bool, seed: u32) -> u64 {
    bytes(&[u8::from(value)], seed)
}

/// A user id (`u64`) hashed as postgresql-hll's `hll_hash_bigint` would hash
/// the same bits as a signed bigint, with the default seed. This is the hash
/// the engine computes once per event and hands to every sketch.
#[inline]
pub fn user_id(value: u64) -> u64 {
    murmur3_h1_of_8_bytes(value, SEED_DEFAULT)
}

// MurmurHash3 x64_128 (Austin Appleby, public domain) for exactly 8 input
// bytes read little-endian as `word`. With fewer than 16 bytes there is no
// body block; the 8 bytes are the tail's k1 and k2 stays 0. Constants are the
// reference implementation's.
const MURMUR_C1: u64 = 0x87c3_7b91_1142_53d5;
const MURMUR_C2: u64 = 0x4cf5_ad43_2745_937f;

#[inline]
fn murmur3_h1_of_8_bytes(word: u64, seed: u32) -> u64 {
    let seed = u64::from(seed);
    finish(seed ^ mix_k1(word), seed, 8)
}

#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// A [`std::hash::Hasher`] for in-memory maps keyed by one `u64` that is
/// already a hash (or an id): one folded multiply instead of SipHash.
///
/// `finish` is the XOR of the halves of the 128-bit product of the key and
/// an odd constant, so both the low bits a table indexes by and the high
/// bits it tags with depend on every key bit, even for small sequential ids.
/// In-memory only: never persisted, and not resistant to chosen keys (the
/// maps it serves are bounded by a candidate capacity).
#[derive(Debug, Default, Clone, Copy)]
pub struct U64KeyHasher(u64);

impl std::hash::Hasher for U64KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is meant to be used; this keeps other key types
        // correct (if slower) rather than silently colliding.
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }

    #[inline]
    #[expect(clippy::cast_possible_truncation, reason = "halves of the product")]
    fn finish(&self) -> u64 {
        let product = u128::from(self.0) * 0x9e37_79b9_7f4a_7c15_u128;
        (product as u64) ^ ((product >> 64) as u64)
    }
}

/// Builds [`U64KeyHasher`]s: `HashMap<u64, V, U64KeyBuild>`.
pub type U64KeyBuild = std::hash::BuildHasherDefault<U64KeyHasher>;

#[cfg(test)]
mod tests {
    #[test]
    fn u64_key_hasher_spreads_sequential_ids() {
        use std::hash::{BuildHasher, Hasher};
        let build = super::U64KeyBuild::default();
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for id in 0..1024u64 {
            let mut h = build.build_hasher();
            h.write_u64(id);
            let h = h.finish();
            low.insert(h & 1023);
            top.insert(h >> 57);
        }
        assert!(low.len() > 600, "{}", low.len());
        assert_eq!(top.len(), 128);
    }

    use super::*;

    #[test]
    fn specialised_murmur_matches_the_general_one() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seed = i.wrapping_mul(2_654_435_761);
            assert_eq!(bigint(x as i64, seed), bytes(&x.to_le_bytes(), seed));
        }
        assert_eq!(user_id(u64::MAX), bytes(&u64::MAX.to_le_bytes(), 0));
        assert_eq!(user_id(0), bytes(&[0; 8], 0));
    }

    #[test]
    #[expect(clippy::cast_possible_truncation, reason = "random bits, cut")]
    fn bytes_matches_the_reference_murmur3() {
        // Every length through three blocks and a tail, random bytes and
        // seeds, against the `mur3` crate's x64_128 h1.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let data: Vec<u8> = (0..64).map(|_| next() as u8).collect();
            let seed = if round % 2 == 0 { 0 } else { next() as u32 };
            for len in 0..=data.len() {
                let value = &data[..len];
                assert_eq!(
                    bytes(value, seed),
                    mur3::murmurhash3_x64_128(value, seed).0,
                    "length {len}, seed {seed}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn bytes_matches_the_reference_on_any_input(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            seed in proptest::prelude::any::<u32>(),
        ) {
            proptest::prop_assert_eq!(bytes(&value, seed), mur3::murmurhash3_x64_128(&value, seed).0);
        }
    }

    #[test]
    fn postgresql_hll_checked_values() {
        assert_eq!(bigint(1, 0) as i64, 19_144_387_141_682_250);
        assert_eq!(integer(1, 0) as i64, -8_604_791_237_420_463_362);
        assert_eq!(bytes(b"hello", 0) as i64, -3_758_069_500_696_749_310);
        assert_eq!(bigint(1, 42) as i64, -3_171_019_155_122_926_524);
        assert_eq!(bytes(b"", 0), 0);
    }
}
