//! Sorting a KLL level's values before it compacts
//! ([`crate::quantiles`]): a bitonic network over AVX-512 registers where
//! the CPU has them, else the standard library's sort.
//!
//! A large sketch's level 0 gathers 64 to about 130 unsorted values, and
//! sorting them was about half of an insert's time: a comparison sort's
//! branches on random values go the wrong way about every other time. A
//! bitonic network compares fixed pairs, eight at a time, and never
//! branches on the values. Padded with +inf to 16, 32, 64 or 128 values,
//! 64 random doubles sort in ~120 ns against ~420 ns, 72 in ~310 against
//! ~480, 128 in ~340 against ~950 (AMD Zen 4; `sort_speed` below).
//! Longer runs (a small sketch's first levels) take the standard sort: a
//! network of 256 values, in 32 registers, made a large sketch's insert
//! 20% slower than none.
//!
//! Every exchange keeps both values: equal values (`-0.0` and `0.0`
//! among them) swap places and are never duplicated or lost, so the
//! output is a permutation of the input, in the order `partial_cmp`
//! gives. Where two such values sit may differ from the standard sort's
//! (whose sort is unstable too). No NaN may be sorted: a sketch never
//! stores one.

/// Sorts `values` ascending. No value may be NaN.
pub(crate) fn sort_values(values: &mut [f64]) {
    debug_assert!(!values.iter().any(|v| v.is_nan()), "no NaN is sorted");
    #[cfg(target_arch = "x86_64")]
    if (NETWORK_MIN..=NETWORK_MAX).contains(&values.len())
        && std::arch::is_x86_feature_detected!("avx512f")
    {
        // SAFETY: the CPU has AVX-512F, which `network::sort` is compiled
        // for.
        unsafe { network::sort(values) };
        return;
    }
    sort_by_comparison(values);
}

/// The standard library's sort, for every length and CPU (and the
/// reference the network is tested against). Faster than `total_cmp`'s,
/// or one of the values' bits as integers (bench/JOURNAL.md, "KLL's
/// level sort on AVX-512").
fn sort_by_comparison(values: &mut [f64]) {
    values.sort_unstable_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
}

/// Shorter runs are sorted by insertion (the standard sort's own choice
/// there), in a few compares.
const NETWORK_MIN: usize = 9;

/// Longer runs (a small sketch's first levels) take the standard sort.
const NETWORK_MAX: usize = 128;

#[cfg(target_arch = "x86_64")]
mod network {
    use std::arch::x86_64::{
        __m512d, __mmask8, _mm512_mask_blend_pd, _mm512_mask_loadu_pd, _mm512_mask_storeu_pd,
        _mm512_max_pd, _mm512_min_pd, _mm512_permute_pd, _mm512_permutex_pd, _mm512_set1_pd,
        _mm512_shuffle_f64x2,
    };

    /// Registers of eight values.
    const LANES: usize = 8;

    /// The stages of a network of `n` values (16, 32, 64 or 128), each
    /// `stage(r, k, j)`: in blocks of `k` values, alternately ascending
    /// and descending, compare each value with the one `j` away. A
    /// network of `n` is the one of `n / 2`, then a merge of blocks of
    /// `n`. Written out so that every stage is unrolled (loops over them
    /// were not, and sorted 64 values in 155 ns instead of 121).
    macro_rules! bitonic {
        ($r:expr; 16) => {
            stage($r, 2, 1);
            stage($r, 4, 2);
            stage($r, 4, 1);
            bitonic!($r; merge 8);
            bitonic!($r; merge 16);
        };
        ($r:expr; 32) => {
            bitonic!($r; 16);
            bitonic!($r; merge 32);
        };
        ($r:expr; 64) => {
            bitonic!($r; 32);
            bitonic!($r; merge 64);
        };
        ($r:expr; 128) => {
            bitonic!($r; 64);
            bitonic!($r; merge 128);
        };
        ($r:expr; merge $k:literal) => {
            if $k >= 128 { stage($r, $k, 64); }
            if $k >= 64 { stage($r, $k, 32); }
            if $k >= 32 { stage($r, $k, 16); }
            if $k >= 16 { stage($r, $k, 8); }
            stage($r, $k, 4);
            stage($r, $k, 2);
            stage($r, $k, 1);
        };
    }

    /// Sorts `values` (at most 128) with the smallest network that holds
    /// them: 16, 32, 64 or 128 values.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sort(values: &mut [f64]) {
        debug_assert!(values.len() <= super::NETWORK_MAX);
        if values.len() <= 16 {
            let mut r = load::<2>(values);
            bitonic!(&mut r; 16);
            store(&r, values);
        } else if values.len() <= 32 {
            let mut r = load::<4>(values);
            bitonic!(&mut r; 32);
            store(&r, values);
        } else if values.len() <= 64 {
            let mut r = load::<8>(values);
            bitonic!(&mut r; 64);
            store(&r, values);
        } else {
            let mut r = load::<16>(values);
            bitonic!(&mut r; 128);
            store(&r, values);
        }
    }

    /// The lanes of `n` values starting at `from` (none when
    /// `from >= n`).
    #[inline(always)]
    fn lanes(n: usize, from: usize) -> __mmask8 {
        match n.saturating_sub(from) {
            0 => 0,
            left @ 1..LANES => (1u8 << left) - 1,
            _ => 0xff,
        }
    }

    /// `values` in `R` registers, +inf past them.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load<const R: usize>(values: &[f64]) -> [__m512d; R] {
        debug_assert!(values.len() <= R * LANES);
        let mut r = [_mm512_set1_pd(f64::INFINITY); R];
        for (x, register) in r.iter_mut().enumerate() {
            let mask = lanes(values.len(), x * LANES);
            if mask != 0 {
                // SAFETY: the masked lanes are values x * 8.. of `values`,
                // all below its length.
                *register = unsafe {
                    _mm512_mask_loadu_pd(*register, mask, values.as_ptr().add(x * LANES))
                };
            }
        }
        r
    }

    /// The first `values.len()` values of `r` into `values`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store<const R: usize>(r: &[__m512d; R], values: &mut [f64]) {
        for (x, register) in r.iter().enumerate() {
            let mask = lanes(values.len(), x * LANES);
            if mask != 0 {
                // SAFETY: as in `load`.
                unsafe {
                    _mm512_mask_storeu_pd(values.as_mut_ptr().add(x * LANES), mask, *register);
                }
            }
        }
    }

    /// One stage of the network: value `i` against value `i ^ j`, the
    /// smaller first where `i`'s block of `k` ascends.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn stage<const R: usize>(r: &mut [__m512d; R], k: usize, j: usize) {
        if j >= LANES {
            // Whole registers against whole registers.
            let apart = j / LANES;
            for x in 0..R {
                let y = x ^ apart;
                if y > x {
                    let (a, b) = (r[x], r[y]);
                    // Equal values: `low` takes b's, `high` a's.
                    let low = _mm512_min_pd(a, b);
                    let high = _mm512_max_pd(b, a);
                    if (x * LANES) & k == 0 {
                        (r[x], r[y]) = (low, high);
                    } else {
                        (r[x], r[y]) = (high, low);
                    }
                }
            }
        } else {
            for (x, register) in r.iter_mut().enumerate() {
                // The lanes that ascend, then the lanes that keep the
                // smaller of their pair.
                let ascending: u8 = match k {
                    2 => 0x33,
                    4 => 0x0f,
                    _ if (x * LANES) & k == 0 => 0xff,
                    _ => 0,
                };
                let lower: u8 = match j {
                    1 => 0x55,
                    2 => 0x33,
                    _ => 0x0f,
                };
                let v = *register;
                let partner = match j {
                    1 => _mm512_permute_pd::<0x55>(v),
                    2 => _mm512_permutex_pd::<0x4e>(v),
                    _ => _mm512_shuffle_f64x2::<0x4e>(v, v),
                };
                // Equal values: both return the partner's, a swap.
                let low = _mm512_min_pd(v, partner);
                let high = _mm512_max_pd(v, partner);
                *register = _mm512_mask_blend_pd(!(ascending ^ lower), high, low);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `values` sorted by both sorts: the same values (bit for bit, as
    /// multisets) in an order `partial_cmp` accepts.
    fn check(values: &[f64]) {
        let mut sorted = values.to_vec();
        sort_values(&mut sorted);
        assert!(
            sorted.windows(2).all(|w| w[0] <= w[1]),
            "not sorted: {sorted:?}"
        );
        let bits = |v: &[f64]| {
            let mut b: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
            b.sort_unstable();
            b
        };
        assert_eq!(bits(&sorted), bits(values), "not a permutation");
        let mut reference = values.to_vec();
        sort_by_comparison(&mut reference);
        // Equal as numbers (a -0.0 may stand where the reference has 0.0).
        assert_eq!(sorted, reference);
    }

    #[test]
    fn every_length_sorts() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for len in 0..=NETWORK_MAX + 40 {
            for round in 0..20 {
                let values: Vec<f64> = (0..len)
                    .map(|_| {
                        let r = crate::quantiles::splitmix64(&mut state);
                        // Few distinct values in some rounds: many ties.
                        let v = if round % 2 == 0 { r % 7 } else { r % 1_000_000 };
                        #[allow(clippy::cast_precision_loss)]
                        let v = v as f64 / 3.0 - 1.0;
                        v
                    })
                    .collect();
                check(&values);
            }
        }
    }

    #[test]
    fn zeros_of_both_signs_and_infinities_are_kept() {
        let values = [
            0.0,
            -0.0,
            f64::INFINITY,
            -0.0,
            f64::NEG_INFINITY,
            0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
        ];
        for len in 0..=NETWORK_MAX {
            let cycled: Vec<f64> = values.iter().copied().cycle().take(len).collect();
            check(&cycled);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_values_sort_as_the_standard_sort_does(
            values in proptest::collection::vec(
                proptest::num::f64::NORMAL
                    | proptest::num::f64::ZERO
                    | proptest::num::f64::INFINITE
                    | proptest::num::f64::SUBNORMAL,
                0..=NETWORK_MAX + 8,
            )
        ) {
            check(&values);
        }
    }

    /// Times both sorts on runs of the lengths a large sketch's level 0
    /// has (bench/JOURNAL.md, "KLL's level sort on AVX-512"):
    /// `cargo test --release -p cardinal-sketch sort_speed -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn sort_speed() {
        let mut state = 12_345u64;
        for len in [16, 32, 64, 72, 100, 128] {
            let runs: Vec<Vec<f64>> = (0..100_000)
                .map(|_| {
                    (0..len)
                        .map(|_| {
                            #[allow(clippy::cast_precision_loss)]
                            let v = (crate::quantiles::splitmix64(&mut state) % 10_000) as f64;
                            v / 1e6
                        })
                        .collect()
                })
                .collect();
            let time = |sort: fn(&mut [f64])| {
                let mut runs = runs.clone();
                let start = std::time::Instant::now();
                for run in &mut runs {
                    sort(run);
                }
                #[allow(clippy::cast_precision_loss)]
                let ns = start.elapsed().as_nanos() as f64 / runs.len() as f64;
                (ns, runs)
            };
            let (standard, by_comparison) = time(sort_by_comparison);
            let (ours, sorted) = time(sort_values);
            assert_eq!(sorted, by_comparison);
            println!("{len} values: standard sort {standard:.0} ns, sort_values {ours:.0} ns");
        }
    }
}
