//! Short byte strings compared and loaded without libc calls.
//!
//! Dimension keys, event kinds and codes are mostly 1 to 16 bytes, and the
//! hot path compares or hashes one or more of them per record. A `memcmp`
//! or `memcpy` call for each costs more than the work: on CPUs where glibc
//! picks its AVX-512 variants it was the largest single cost of a
//! three-summary rollup (and invisible to callgrind, which emulates a CPU
//! without them). These read the bytes with a few overlapping word loads.
//!
//! Measured on 2026-11-21 on the benchmark VM (AVX-512, glibc's
//! `__memcmp_evex_movbe`): the `bcmp` calls for W1's empty `top_sites` key
//! and its `kind = 'impression'` filter took 32% of its time by `perf
//! record -e cpu-clock` (2M rows), while callgrind counted 0.6% of its
//! instructions there. Check wall time with `perf` as well as instruction
//! counts. Keys of 0-16 bytes are hashed ([`tail_word`]: two overlapping
//! 4- or 2-byte loads, behind branches on the length's range, which a
//! column's texts mostly share) and compared ([`bytes_eq`]) with word loads,
//! as is a text filter's literal; `route` and `rollup` share these.

/// The 0 to 7 bytes of `tail` as a little-endian word, zero-padded: read
/// as two overlapping 4- or 2-byte loads (or one byte), instead of a
/// `memcpy` call into a zeroed buffer. It branches on the length's range
/// (4 to 7, 2 or 3, 1, 0), which a column's texts mostly share, not on
/// its bits: provider names of 4 to 7 bytes sent the bit tests the wrong
/// way on about every fourth row.
#[inline]
pub fn tail_word(tail: &[u8]) -> u64 {
    debug_assert!(tail.len() < 8);
    let len = tail.len();
    if len >= 4 {
        let low = u32::from_le_bytes(tail[..4].try_into().expect("4 bytes"));
        let high = u32::from_le_bytes(tail[len - 4..].try_into().expect("4 bytes"));
        // The loads overlap in 8 - len bytes, which both put in place.
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

/// The 0 to 16 bytes of `bytes` as two little-endian words, zero-padded
/// (`None` past 16 bytes): a short key or field held, written or compared
/// as two words, read by word loads and [`tail_word`], without a `memcpy`
/// call. Always inlined: called per record, it did not inline across
/// crates on its own (Query 2A text: 1.5% more instructions).
#[inline(always)]
pub fn short_words(bytes: &[u8]) -> Option<[u64; 2]> {
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    match bytes.len() {
        0..8 => Some([tail_word(bytes), 0]),
        8..16 => Some([word(&bytes[..8]), tail_word(&bytes[8..])]),
        16 => Some([word(&bytes[..8]), word(&bytes[8..])]),
        _ => None,
    }
}

/// Whether two byte strings are equal: up to 32 bytes by two or four
/// overlapping loads per side (or [`tail_word`] under 4 bytes) instead of
/// a `memcmp` call; longer ones as slices. (Group keys of two or three
/// short texts are 17-30 bytes: a `memcmp` call per probe was 6% of a
/// (day, state, provider) count.)
#[inline]
pub fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    match len {
        8..=16 => word(a, 0) == word(b, 0) && word(a, len - 8) == word(b, len - 8),
        17..=32 => {
            word(a, 0) == word(b, 0)
                && word(a, 8) == word(b, 8)
                && word(a, len - 16) == word(b, len - 16)
                && word(a, len - 8) == word(b, len - 8)
        }
        4..=7 => half(a, 0) == half(b, 0) && half(a, len - 4) == half(b, len - 4),
        // A summary without dimensions has one empty key per bucket.
        0 => true,
        1..=3 => tail_word(a) == tail_word(b),
        _ => a == b,
    }
}

/// Asks the CPU to start loading the cache line that holds `item`, without
/// waiting for it: a hint that changes neither memory nor results. For
/// loops over large tables that know their next addresses a few steps
/// ahead (a rollup's fold and merge, an exporter's rows). Other targets
/// than x86-64 get no hint.
#[inline(always)]
pub fn prefetch<T>(item: &T) {
    prefetch_address(std::ptr::from_ref(item).cast());
}

/// [`prefetch`] of every cache line `items` spans, up to
/// [`PREFETCH_LINES_MAX`] lines from its start: an item that straddles
/// two lines (a 48-byte aggregate state at offset 32) misses on the second
/// line when only its first is asked for.
#[inline(always)]
pub fn prefetch_lines<T>(items: &[T]) {
    if items.is_empty() {
        return;
    }
    let range = items.as_ptr_range();
    let (start, end) = (range.start.cast::<u8>(), range.end.cast::<u8>());
    let last = end
        .addr()
        .saturating_sub(1)
        .min(start.addr() + CACHE_LINE_BYTES * PREFETCH_LINES_MAX - 1);
    let mut line = start.addr() & !(CACHE_LINE_BYTES - 1);
    while line <= last {
        prefetch_address(start.with_addr(line.max(start.addr())));
        line += CACHE_LINE_BYTES;
    }
}

/// The one prefetch instruction behind [`prefetch`] and
/// [`prefetch_lines`]; no hint on targets other than x86-64.
#[inline(always)]
fn prefetch_address(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has. It
    // reads nothing the program can observe and cannot fault, whatever
    // the address; callers pass addresses inside live items anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Bytes of a cache line, as [`prefetch_lines`] assumes.
const CACHE_LINE_BYTES: usize = 64;

/// Most lines one [`prefetch_lines`] asks for.
pub const PREFETCH_LINES_MAX: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_words_are_zero_padded_little_endian() {
        for len in 0..8usize {
            let bytes: Vec<u8> = (0..len)
                .map(|i| 0xa1 + u8::try_from(i).expect("< 8"))
                .collect();
            let mut padded = [0u8; 8];
            padded[..len].copy_from_slice(&bytes);
            assert_eq!(tail_word(&bytes), u64::from_le_bytes(padded), "len {len}");
        }
    }

    #[test]
    fn short_words_are_two_zero_padded_little_endian_words() {
        for len in 0..=17usize {
            let bytes: Vec<u8> = (0..len)
                .map(|i| 0xa1 + u8::try_from(i).expect("< 18"))
                .collect();
            let want = (len <= 16).then(|| {
                let mut padded = [0u8; 16];
                padded[..len].copy_from_slice(&bytes);
                [
                    u64::from_le_bytes(padded[..8].try_into().expect("8 bytes")),
                    u64::from_le_bytes(padded[8..].try_into().expect("8 bytes")),
                ]
            });
            assert_eq!(short_words(&bytes), want, "len {len}");
        }
    }

    #[test]
    fn bytes_eq_is_slice_equality() {
        // Every length from 0 to 40 (past each path's end), equal and
        // differing at each position.
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len)
                .map(|i| u8::try_from(i).expect("< 41") + 1)
                .collect();
            assert!(bytes_eq(&a, &a.clone()));
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!bytes_eq(&a, &b), "len {len}, byte {at}");
            }
            assert!(len == 0 || !bytes_eq(&a, &a[..len - 1]));
        }
    }
}
