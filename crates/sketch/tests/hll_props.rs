//! Laws of the HyperLogLog (STYLE.md section 7), checked with proptest on
//! encoded bytes, plus fixed-seed statistics and a byte-flipping decoder test.

use cardinal_sketch::hll::{Explicit, Hll, Kind, MaxSparse, Settings};
use cardinal_sketch::{Sketch, hash};
use proptest::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Settings small enough to walk every representation with few inserts.
fn settings() -> impl Strategy<Value = Settings> {
    (
        4u8..=12,
        1u8..=8,
        prop_oneof![
            Just(Explicit::Off),
            Just(Explicit::Auto),
            (0u32..6).prop_map(|k| Explicit::Threshold(1 << k))
        ],
        any::<bool>(),
        prop_oneof![
            Just(MaxSparse::Auto),
            (0u32..64).prop_map(MaxSparse::Registers)
        ],
    )
        .prop_map(|(log2m, regwidth, explicit, sparse, max_sparse)| Settings {
            log2m,
            regwidth,
            explicit,
            sparse,
            max_sparse,
        })
}

fn build(settings: Settings, keys: &[u64]) -> Hll {
    let mut h = Hll::new(settings).expect("valid settings");
    for &key in keys {
        h.insert(hash::user_id(key));
    }
    h
}

fn union(a: &Hll, b: &Hll) -> Hll {
    let mut u = a.clone();
    u.merge(b).expect("same settings");
    u
}

fn keys() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0u64..5_000, 0..1_500)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn interval_contains_estimate(s in settings(), a in keys(), b in keys()) {
        for h in [build(s, &a), union(&build(s, &a), &build(s, &b))] {
            let e = h.estimate();
            prop_assert!(e.lower <= e.value && e.value <= e.upper, "{:?} {:?}", s, e);
        }
    }

    #[test]
    fn overlap_intervals_contain_their_estimates(
        log2m in 4u8..=10,
        regwidth in 3u8..=6,
        a in 0u64..3_000,
        b in 0u64..3_000,
        shared in 0u64..3_000,
    ) {
        let s = Settings { explicit: Explicit::Off, ..Settings::new(log2m, regwidth).expect("valid") };
        let left: Vec<u64> = (0..a + shared).collect();
        let right: Vec<u64> = (a..a + shared + b).collect();
        let overlap = build(s, &left).intersection(&build(s, &right)).expect("same settings");
        for e in [overlap.intersection, overlap.a_only, overlap.b_only, overlap.union] {
            prop_assert!(e.lower <= e.value && e.value <= e.upper, "{:?}", e);
        }
    }

    #[test]
    fn merge_is_commutative(s in settings(), a in keys(), b in keys()) {
        let (a, b) = (build(s, &a), build(s, &b));
        prop_assert_eq!(union(&a, &b).encode(), union(&b, &a).encode());
    }

    #[test]
    fn merge_is_associative(s in settings(), a in keys(), b in keys(), c in keys()) {
        let (a, b, c) = (build(s, &a), build(s, &b), build(s, &c));
        prop_assert_eq!(union(&union(&a, &b), &c).encode(), union(&a, &union(&b, &c)).encode());
    }

    #[test]
    fn merge_equals_inserting_everything(s in settings(), a in keys(), b in keys()) {
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        prop_assert_eq!(union(&build(s, &a), &build(s, &b)).encode(), build(s, &all).encode());
    }

    #[test]
    fn empty_is_the_identity(s in settings(), a in keys()) {
        let a = build(s, &a);
        let empty = Hll::new(s).expect("valid");
        prop_assert_eq!(union(&a, &empty).encode(), a.encode());
        prop_assert_eq!(union(&empty, &a).encode(), a.encode());
    }

    #[test]
    fn duplicates_change_nothing(s in settings(), a in keys()) {
        let once = build(s, &a);
        let twice: Vec<u64> = a.iter().chain(&a).copied().collect();
        prop_assert_eq!(build(s, &twice).encode(), once.encode());
        prop_assert_eq!(union(&once, &once).encode(), once.encode());
    }

    #[test]
    fn registers_never_decrease(s in settings(), a in keys()) {
        let mut h = Hll::new(s).expect("valid");
        let mut previous = h.registers().expect("defined");
        for key in a {
            h.insert(hash::user_id(key));
            let now = h.registers().expect("defined");
            prop_assert!(now.iter().zip(&previous).all(|(n, p)| n >= p));
            previous = now;
        }
    }

    #[test]
    fn encode_decode_encode_is_identity(s in settings(), a in keys()) {
        let h = build(s, &a);
        let bytes = h.encode();
        let decoded = Hll::decode_with(&bytes, s.max_sparse).expect("own bytes decode");
        prop_assert_eq!(decoded.encode(), bytes);
        prop_assert_eq!(decoded.cardinality().map(f64::to_bits), h.cardinality().map(f64::to_bits));
    }

    #[test]
    fn sparse_is_chosen_by_content_not_history(s in settings(), a in keys()) {
        // Whatever the in-memory form, a FULL-then-decoded sketch and the
        // original encode alike.
        let h = build(s, &a);
        let always_full = Hll::decode_with(&h.encode(), MaxSparse::Registers(0)).expect("decodes");
        let mut back = Hll::decode_with(&always_full.encode(), s.max_sparse).expect("decodes");
        back.set_max_sparse(s.max_sparse);
        prop_assert_eq!(back.encode(), h.encode());
    }
}

/// Relative error of Ertl's estimator over 200 sketches per cardinality.
///
/// Bound: the relative standard error is 1.04 / sqrt(m) = 2.30% at m = 2048.
/// The mean of 200 independent relative errors has a standard error of
/// 2.30% / sqrt(200) = 0.16%, so |mean| < 0.6% is about 3.7 standard errors
/// (bias check); the root-mean-square error must be within 20% of 2.30%
/// (its own sampling error over 200 trials is about 5%, so 4 sigma).
/// The 95% interval must cover the truth in at least 90% of trials: with
/// p = 0.95 and n = 200 the binomial standard deviation is 1.5%, so 90% is
/// more than 3 sigma below.
/// Every precision and register width, from one distinct value to past
/// saturation of small widths: the interval always holds the estimate
/// (and the estimate is never below the registers already proven filled).
#[test]
fn interval_contains_estimate_at_every_cardinality() {
    let mut rng = StdRng::seed_from_u64(0x001e_5711);
    for log2m in [4u8, 5, 7, 10, 13] {
        for regwidth in 1u8..=8 {
            let settings = Settings {
                explicit: Explicit::Off,
                ..Settings::new(log2m, regwidth).expect("valid")
            };
            let mut h = Hll::new(settings).expect("valid");
            let m = 1u64 << log2m;
            let mut next_check = 1u64;
            for n in 1..=(64 * m) {
                h.insert(rng.random());
                if n == next_check {
                    next_check += next_check / 8 + 1;
                    let e = h.estimate();
                    let filled = h
                        .registers()
                        .expect("defined")
                        .iter()
                        .filter(|&&r| r != 0)
                        .count() as f64;
                    assert!(
                        e.lower <= e.value && e.value <= e.upper && filled <= e.value,
                        "log2m {log2m} regwidth {regwidth} n {n} filled {filled}: {e:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn ertl_estimate_error_matches_theory() {
    let mut rng = StdRng::seed_from_u64(20261121);
    let m = 2048.0f64;
    let expected_rse = (3.0 * std::f64::consts::LN_2 - 1.0).sqrt() / m.sqrt();
    for &n in &[100u64, 1_000, 5_000, 50_000, 300_000] {
        let trials = 200;
        let (mut sum, mut sum_sq, mut covered) = (0.0, 0.0, 0);
        for _ in 0..trials {
            let mut h = Hll::new(Settings {
                explicit: Explicit::Off,
                ..Settings::default()
            })
            .expect("valid");
            for _ in 0..n {
                h.insert(hash::user_id(rng.random()));
            }
            let e = h.estimate();
            let relative = e.value / n as f64 - 1.0;
            sum += relative;
            sum_sq += relative * relative;
            covered += usize::from(e.lower <= n as f64 && n as f64 <= e.upper);
        }
        let mean = sum / f64::from(trials);
        let rms = (sum_sq / f64::from(trials)).sqrt();
        assert!(mean.abs() < 0.006, "n = {n}: bias {mean}");
        if n >= 5_000 {
            // Below ~2.5 m the estimator is far better than the asymptotic
            // error; only an upper bound applies there.
            assert!(
                (rms / expected_rse - 1.0).abs() < 0.2,
                "n = {n}: rms {rms} vs {expected_rse}"
            );
        } else {
            assert!(rms < expected_rse * 1.2, "n = {n}: rms {rms}");
        }
        assert!(covered >= 180, "n = {n}: interval covered {covered}/200");
    }
}

/// The AK estimator agrees with Ertl's where both are unbiased (mid range).
#[test]
fn ak_and_ertl_agree_mid_range() {
    let h = build(Settings::default(), &(0..200_000).collect::<Vec<_>>());
    let ak = h.cardinality().expect("defined");
    let ertl = h.estimate().value;
    assert!((ak / ertl - 1.0).abs() < 0.02, "ak {ak} vs ertl {ertl}");
    assert_eq!(h.kind(), Kind::Full);
}

/// Flipping, truncating and extending valid encodings: `decode` returns an
/// error or a sketch that re-encodes stably, and never panics.
#[test]
fn decode_survives_corrupted_bytes() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut samples = Vec::new();
    for (log2m, regwidth, n) in [
        (4, 1, 3),
        (11, 5, 0),
        (11, 5, 100),
        (11, 5, 400),
        (11, 5, 5_000),
        (6, 8, 90),
        (14, 6, 2_000),
    ] {
        let s = Settings::new(log2m, regwidth).expect("valid");
        samples.push(build(s, &(0..n).collect::<Vec<_>>()).encode());
    }
    let (mut ok, mut err) = (0, 0);
    for _ in 0..20_000 {
        let mut bytes = samples[rng.random_range(0..samples.len())].clone();
        match rng.random_range(0..4) {
            0 => {
                let i = rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            1 => {
                let i = rng.random_range(0..bytes.len());
                bytes[i] = rng.random();
            }
            2 => bytes.truncate(rng.random_range(0..bytes.len())),
            _ => bytes.extend((0..rng.random_range(1..16)).map(|_| rng.random::<u8>())),
        }
        match Hll::decode(&bytes) {
            Ok(h) => {
                let again = h.encode();
                let back = Hll::decode(&again).expect("own encoding decodes");
                assert_eq!(back.encode(), again);
                ok += 1;
            }
            Err(_) => err += 1,
        }
    }
    assert!(ok > 1_000 && err > 1_000, "ok {ok}, err {err}");
}

/// A forged header cannot make the decoder allocate what the bytes do not
/// back: log2m 31 asks for 2^31 registers.
#[test]
fn forged_headers_fail_fast() {
    for header in [[0x14u8, 0xFF, 0x7F], [0x14, 0x1F, 0x00], [0x13, 0xFF, 0x7F]] {
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(&[0xFF; 64]);
        let result = Hll::decode(&bytes);
        if let Ok(h) = result {
            assert!(
                h.heap_bytes() <= 64 * 8 * 8,
                "decoded {} heap bytes",
                h.heap_bytes()
            );
        }
    }
}
