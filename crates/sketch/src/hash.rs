//! Hashing identical to postgresql-hll's `hll_hash_*` functions.
//!
//! postgresql-hll hashes a value's bytes with MurmurHash3 x64_128 and keeps
//! the first 64-bit half, h1, as a signed bigint. We return it as `u64` (the
//! same bits); `as i64` gives the SQL value. The seed is a 32-bit value: a
//! negative SQL seed is taken as `seed as u32`, as postgresql-hll does.
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
#[inline]
pub fn bytes(value: &[u8], seed: u32) -> u64 {
    mur3::murmurhash3_x64_128(value, seed).0
}

/// `hll_hash_bigint`: the 8 little-endian bytes of `value`.
#[inline]
pub fn bigint(value: i64, seed: u32) -> u64 {
    bytes(&value.to_le_bytes(), seed)
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
    bytes(&value.to_le_bytes(), SEED_DEFAULT)
}
