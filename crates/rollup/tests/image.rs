//! Rollup images: `encode -> decode -> encode` is the identity, a rollup
//! read back folds, merges and answers on exactly as the one written, and
//! the decoder refuses damaged and forged images without panicking or
//! allocating more than the image backs.
//!
//! Rollups here are random (every aggregate kind, small sketch settings so
//! that sketches leave their exact modes, limits with retention and a
//! future tolerance, parts split early) but from fixed seeds: proptest's
//! own seed is fixed too, so a failure reproduces as is.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Error, Input, Limits, Ranks, Rollup, Shape};
use cardinal_sketch::hash;
use cardinal_sketch::quantiles::seed_thread;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// Counts the bytes the calling thread asks the allocator for (new
/// blocks and the new sizes of grown ones), to bound what a decoder
/// allocates.
struct Counting;

thread_local! {
    static ALLOCATED_BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATED_BYTES.try_with(|n| n.set(n.get() + bytes as u64));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// per-thread counter is the only addition, and touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes `f` asked the allocator for, on this thread, and its result.
fn allocated_by<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATED_BYTES.with(Cell::get);
    let out = f();
    (ALLOCATED_BYTES.with(Cell::get) - before, out)
}

/// A small xorshift, so that a rollup is a function of its seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const DAY_MS: i64 = 86_400_000;

include!("shapes/every_kind.rs");

/// One record's inputs for `every_kind`, from `rng`; `wide` spreads keys
/// and values over many distinct values (sketches past exact), else few.
fn fold_one(rollup: &mut Rollup, rng: &mut Rng, buckets: u64, keys: u64, wide: bool) {
    let bucket = Timestamp(i64::try_from(rng.below(buckets)).expect("small") * DAY_MS);
    let key = format!("k{}", rng.below(keys));
    let spread = if wide { 1 << 40 } else { 40 };
    let user = rng.below(spread);
    let site = format!("site{}", rng.below(if wide { 1 << 20 } else { 6 }));
    #[expect(clippy::cast_precision_loss, reason = "test values")]
    let number = match rng.below(20) {
        0 => Input::Null,
        1 => Input::Number(1e-30 * rng.below(100) as f64),
        2 => Input::Number(f64::INFINITY),
        _ => Input::Number(rng.below(1_000_000) as f64 / 64.0 - 5_000.0),
    };
    let int = match rng.below(10) {
        0 => Input::Null,
        1 => Input::Int(i64::MAX - i64::try_from(rng.below(9)).expect("small")),
        _ => Input::Int(i64::try_from(rng.below(1_000)).expect("small") - 500),
    };
    let user_key = Input::Key {
        hash: hash::user_id(user),
        id: Some(user),
        text: &[],
    };
    let site_key = Input::Key {
        hash: hash::bytes(site.as_bytes(), 0),
        id: None,
        text: site.as_bytes(),
    };
    let inputs = [
        Input::Null,
        number,
        number,
        int,
        number,
        number,
        int,
        number,
        int,
        user_key,
        user_key,
        number,
        Input::Null,
        site_key,
        user_key,
    ];
    rollup.fold(bucket, key.as_bytes(), &inputs);
}

/// The limits a seed picks: none, a retention window, or a window measured
/// from the robust watermark with a future tolerance; and a group limit
/// that some rollups reach.
fn limits_of(rng: &mut Rng) -> Limits {
    let groups_max = if rng.below(3) == 0 { 40 } else { 10_000 };
    match rng.below(3) {
        0 => Limits {
            groups_max,
            retention_ms: None,
            future_ms: None,
        },
        1 => Limits {
            groups_max,
            retention_ms: Some(3 * DAY_MS),
            future_ms: None,
        },
        _ => Limits {
            groups_max,
            retention_ms: Some(4 * DAY_MS),
            future_ms: Some(2 * DAY_MS),
        },
    }
}

/// A random rollup of `shape`: `records` folds over a few buckets and
/// keys, evictions now and then, and a merge of a second partial.
fn random_rollup(seed: u64, shape: &Shape, limits: Limits, records: usize) -> Rollup {
    let mut rng = Rng(seed | 1);
    let parts_after = match rng.below(3) {
        0 => 0,
        1 => 30,
        _ => usize::MAX,
    };
    let wide = rng.below(2) == 0;
    // One group now and then, so that its sketches see many values.
    let one = rng.below(4) == 0;
    let buckets = if one { 1 } else { 1 + rng.below(8) };
    let keys = if one { 1 } else { 1 + rng.below(30) };
    let new = || {
        Rollup::new(shape.clone(), limits)
            .expect("valid")
            .with_parts_after(parts_after)
    };
    let (mut rollup, mut other) = (new(), new());
    for i in 0..records {
        let into = if i % 3 == 0 { &mut other } else { &mut rollup };
        fold_one(into, &mut rng, buckets, keys, wide);
        if rng.below(50) == 0 {
            rollup.evict_expired_due();
        }
    }
    if rng.below(2) == 0 {
        // A merge past groups_max fails; the rollup stays a valid one.
        let _ = rollup.merge(&other);
    }
    if rng.below(3) == 0 {
        rollup.evict_future();
    }
    rollup
}

fn image_of(rollup: &Rollup) -> Vec<u8> {
    let mut image = Vec::new();
    let len = rollup.encode_image(&mut image);
    assert_eq!(len, image.len());
    image
}

/// Rows as text: NaN answers compare equal as text, not as floats.
fn answers(rollup: &Rollup) -> String {
    format!("{:?}", rollup.rows())
}

/// Folds the same `records` into `rollup` after starting the thread's
/// stream of KLL seeds at `stream`, so that new sketches flip the same
/// coins in every rollup given the same records.
fn fold_on(rollup: &mut Rollup, seed: u64, records: usize) {
    seed_thread(seed);
    let mut rng = Rng(seed | 1);
    let wide = rng.below(2) == 0;
    for _ in 0..records {
        fold_one(rollup, &mut rng, 10, 40, wide);
        if rng.below(40) == 0 {
            rollup.evict_expired_due();
        }
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x1ca9_e000_0000_0001),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(48))]

    /// `encode -> decode -> encode` gives the same bytes, and the rollup
    /// read back folds, evicts, merges and answers on as the original:
    /// after the same records and the same merge, both write the same
    /// image (every group, row and state, coins included) and answer the
    /// same rows.
    #[test]
    fn a_decoded_rollup_folds_on_exactly_as_the_original(
        seed in any::<u64>(),
        records in 0usize..3_000,
        more in 0usize..800,
    ) {
        let shape = every_kind();
        let limits = limits_of(&mut Rng(seed ^ 0x5a5a));
        seed_thread(seed);
        let mut original = random_rollup(seed, &shape, limits, records);
        let image = image_of(&original);
        let mut decoded = Rollup::decode_image(&image, &shape).expect("an image we wrote");
        prop_assert_eq!(&image_of(&decoded), &image, "encode -> decode -> encode");
        prop_assert_eq!(answers(&decoded), answers(&original));
        prop_assert_eq!(decoded.group_count(), original.group_count());
        prop_assert_eq!(decoded.parts(), original.parts());
        prop_assert_eq!(decoded.limits(), original.limits());
        prop_assert_eq!(decoded.dropped_group_limit(), original.dropped_group_limit());
        prop_assert_eq!(decoded.dropped_expired(), original.dropped_expired());
        prop_assert_eq!(decoded.evicted_before(), original.evicted_before());

        fold_on(&mut original, seed.rotate_left(7), more);
        fold_on(&mut decoded, seed.rotate_left(7), more);
        prop_assert_eq!(image_of(&decoded), image_of(&original), "after folding on");
        let other = random_rollup(seed.rotate_left(13), &shape, limits, more);
        // Groups the merge opens make new sketches: from the same seeds.
        seed_thread(seed ^ 1);
        let a = original.merge(&other);
        seed_thread(seed ^ 1);
        let b = decoded.merge(&other);
        prop_assert_eq!(a.is_ok(), b.is_ok());
        prop_assert_eq!(original.evict_future(), decoded.evict_future());
        prop_assert_eq!(original.evict_expired(), decoded.evict_expired());
        prop_assert_eq!(image_of(&decoded), image_of(&original), "after a merge");
        prop_assert_eq!(answers(&decoded), answers(&original));
        prop_assert_eq!(decoded.dropped_future(), original.dropped_future());
    }

    /// Images of rollups of one aggregate each (the other kinds' states
    /// cannot hide a state written wrong), wide values, many groups.
    #[test]
    fn every_kind_alone_round_trips(seed in any::<u64>(), kind in 0usize..15) {
        let all = every_kind();
        let aggs = match all.aggs[kind] {
            // A shared quantiles aggregate reads an earlier sketch.
            AggKind::QuantilesOf { ranks, .. } => vec![all.aggs[11], AggKind::QuantilesOf { of: 0, ranks }],
            other => vec![other],
        };
        let shape = Shape { aggs };
        let mut rollup = Rollup::new(shape.clone(), Limits::default()).expect("valid");
        let mut rng = Rng(seed | 1);
        seed_thread(seed);
        let width = shape.aggs.len();
        for _ in 0..2_000 {
            let bucket = Timestamp(i64::try_from(rng.below(3)).expect("small") * DAY_MS);
            let key = rng.below(50).to_le_bytes();
            let v = rng.below(1 << 20);
            let site = format!("s{}", rng.below(5_000));
            #[expect(clippy::cast_precision_loss, reason = "test values")]
            let input = match shape.aggs[0] {
                AggKind::SumInt | AggKind::MinInt | AggKind::MaxInt => {
                    Input::Int(i64::try_from(v).expect("small"))
                }
                AggKind::Hll { .. } | AggKind::ExactDistinct | AggKind::Theta { .. } => {
                    Input::Key { hash: hash::user_id(v), id: Some(v), text: &[] }
                }
                AggKind::TopK { .. } => Input::Key {
                    hash: hash::bytes(site.as_bytes(), 0),
                    id: None,
                    text: site.as_bytes(),
                },
                _ => Input::Number(v as f64 / 8.0),
            };
            let inputs = vec![input; width];
            rollup.fold(bucket, &key, &inputs);
        }
        let image = image_of(&rollup);
        let decoded = Rollup::decode_image(&image, &shape).expect("an image we wrote");
        prop_assert_eq!(image_of(&decoded), image);
        prop_assert_eq!(answers(&decoded), answers(&rollup));
    }
}

/// A small image of every kind, for the damage tests: a few groups.
fn small_image() -> (Shape, Vec<u8>) {
    let shape = every_kind();
    seed_thread(1);
    let limits = Limits {
        groups_max: 100,
        retention_ms: Some(4 * DAY_MS),
        future_ms: Some(2 * DAY_MS),
    };
    let rollup = random_rollup(7, &shape, limits, 40);
    assert!(rollup.group_count() >= 3, "{}", rollup.group_count());
    (shape, image_of(&rollup))
}

#[test]
fn every_single_byte_flip_is_refused() {
    let (shape, image) = small_image();
    let mut damaged = image.clone();
    for at in 0..image.len() {
        for flip in [0x01, 0x10, 0x80, 0xff] {
            damaged[at] ^= flip;
            let decoded = Rollup::decode_image(&damaged, &shape);
            assert!(decoded.is_err(), "byte {at} ^ {flip:#04x} accepted");
            damaged[at] ^= flip;
        }
    }
    // The checksum refuses them, before anything else is read, except
    // where the magic or version are hit first.
    let mut damaged = image.clone();
    damaged[100] ^= 1;
    assert!(matches!(
        Rollup::decode_image(&damaged, &shape),
        Err(Error::ImageChecksum { .. })
    ));
}

#[test]
fn every_truncation_is_refused() {
    let (shape, image) = small_image();
    for len in 0..image.len() {
        assert!(
            Rollup::decode_image(&image[..len], &shape).is_err(),
            "{len} of {} bytes accepted",
            image.len()
        );
    }
    let mut longer = image.clone();
    longer.push(0);
    assert!(Rollup::decode_image(&longer, &shape).is_err());
}

#[test]
fn an_image_of_another_shape_is_refused() {
    let (shape, image) = small_image();
    let mut other = shape.clone();
    other.aggs[9] = AggKind::Hll {
        log2m: 7,
        regwidth: 5,
    };
    assert!(matches!(
        Rollup::decode_image(&image, &other),
        Err(Error::Shape { .. })
    ));
    other.aggs.pop();
    assert!(matches!(
        Rollup::decode_image(&image, &other),
        Err(Error::Shape { .. })
    ));
}

/// Writes the checksum of `image` again, as a forger would.
fn fix_checksum(image: &mut [u8]) {
    let at = image.len() - 4;
    let crc = crc32(&image[..at]);
    image[at..].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32/ISO-HDLC, bit by bit: the test's own reference for the
/// image's checksum, not the crate it uses.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The most bytes a decode of `image` may ask the allocator for: a small
/// multiple of its length (see the image module's doc), plus a constant
/// for the fixed parts (parts tables, a shape).
fn allocation_bound(image: &[u8]) -> u64 {
    64 * image.len() as u64 + (1 << 20)
}

/// An image of one `count(*)` group and one `hll` state, for forging.
fn one_group_image() -> (Shape, Vec<u8>, usize) {
    let shape = Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Hll {
                log2m: 11,
                regwidth: 5,
            },
        ],
    };
    let mut rollup = Rollup::new(shape.clone(), Limits::default()).expect("valid");
    let user = Input::Key {
        hash: hash::user_id(1),
        id: Some(1),
        text: &[],
    };
    rollup.fold(Timestamp(0), b"CA", &[Input::Null, user]);
    let image = image_of(&rollup);
    // Header 16, shape 8 + 2 x 8, limits 32, progress 72, watermark 32.
    let groups_at = 16 + 8 + 16 + 32 + 72 + 32;
    (shape, image, groups_at)
}

#[test]
fn the_worked_example_has_the_documented_length() {
    let shape = Shape {
        aggs: vec![AggKind::CountAll],
    };
    let mut rollup = Rollup::new(shape.clone(), Limits::default()).expect("valid");
    for _ in 0..3 {
        rollup.fold(Timestamp(0), b"CA", &[Input::Null]);
    }
    let image = image_of(&rollup);
    assert_eq!(image.len(), 202);
    assert_eq!(&image[..8], b"CRDROLUP");
    assert_eq!(&image[190..198], &3u64.to_le_bytes());
    assert_eq!(
        image_of(&Rollup::decode_image(&image, &shape).expect("ours")),
        image
    );
}

#[test]
fn forged_lengths_are_refused_without_large_allocations() {
    let (shape, image, groups_at) = one_group_image();
    assert_eq!(&image[groups_at..groups_at + 8], &1u64.to_le_bytes());
    let key_len_at = groups_at + 8 + 8;
    let hll_len_at = key_len_at + 4 + 2 + 8;
    let forgeries: [(&str, usize, &[u8]); 7] = [
        ("group count", groups_at, &u64::MAX.to_le_bytes()),
        ("group count", groups_at, &1_000_000u64.to_le_bytes()),
        ("key length", key_len_at, &u32::MAX.to_le_bytes()),
        ("hll length", hll_len_at, &u32::MAX.to_le_bytes()),
        ("aggregate count", 16, &u16::MAX.to_le_bytes()),
        ("watermark entries", groups_at - 8, &u32::MAX.to_le_bytes()),
        ("parts", 16 + 8 + 16 + 32, &u32::MAX.to_le_bytes()),
    ];
    for (what, at, bytes) in forgeries {
        let mut forged = image.clone();
        forged[at..at + bytes.len()].copy_from_slice(bytes);
        fix_checksum(&mut forged);
        let (allocated, decoded) = allocated_by(|| Rollup::decode_image(&forged, &shape));
        assert!(decoded.is_err(), "a forged {what} accepted");
        assert!(
            allocated <= allocation_bound(&forged),
            "a forged {what}: {allocated} bytes allocated for {}",
            forged.len()
        );
    }
    // A group count past the bytes is refused by the count check itself.
    let mut forged = image.clone();
    forged[groups_at..groups_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    fix_checksum(&mut forged);
    let error = Rollup::decode_image(&forged, &shape).expect_err("forged");
    assert!(
        matches!(&error, Error::ImageMalformed { reason } if reason.contains("cannot fit")),
        "{error}"
    );
}

/// Any bytes under a good checksum: random mutations of a small image of
/// every kind, checksum fixed, never panic, never allocate past the
/// bound, and what decodes re-encodes to an image that decodes to the
/// same rollup (the fuzz target's property, on fixed seeds).
#[test]
fn mutated_images_with_good_checksums_decode_or_fail_cleanly() {
    let (shape, image) = small_image();
    let mut rng = Rng(0x00f0_0d5e_ed00_0001);
    let mut accepted = 0;
    for _ in 0..3_000 {
        let mut forged = image.clone();
        for _ in 0..=rng.below(4) {
            let at = usize::try_from(rng.below(forged.len() as u64 - 4)).expect("fits");
            forged[at] = match rng.below(4) {
                0 => 0,
                1 => 0xff,
                _ => u8::try_from(rng.below(256)).expect("a byte"),
            };
        }
        fix_checksum(&mut forged);
        let (allocated, decoded) = allocated_by(|| Rollup::decode_image(&forged, &shape));
        assert!(allocated <= allocation_bound(&forged), "{allocated} bytes");
        if let Ok(rollup) = decoded {
            accepted += 1;
            let again = image_of(&rollup);
            let twice = Rollup::decode_image(&again, &shape).expect("our own image");
            assert_eq!(image_of(&twice), again);
        }
    }
    // Most mutations break a checked rule; some (a count, a bucket, a
    // float's bits) give another valid rollup.
    assert!(accepted < 2_000, "{accepted} of 3000 accepted");
}

/// Replays the inputs in `tests/fuzz/rollup_image/` through the fuzz
/// target's property (`fuzz/fuzz_targets/rollup_image.rs`); the checksum
/// is enforced here, so each is also checked with its checksum fixed.
#[test]
fn fuzz_findings_replay() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/rollup_image");
    let shape = every_kind();
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("the findings directory exists") {
        let path = entry.expect("readable directory").path();
        if path.extension().is_some_and(|ext| ext == "md") {
            continue;
        }
        let bytes = std::fs::read(&path).expect("readable finding");
        let mut fixed = bytes.clone();
        if fixed.len() >= 4 {
            fix_checksum(&mut fixed);
        }
        for image in [&bytes, &fixed] {
            let (allocated, decoded) = allocated_by(|| Rollup::decode_image(image, &shape));
            assert!(allocated <= allocation_bound(image), "{}", path.display());
            if let Ok(rollup) = decoded {
                let again = image_of(&rollup);
                let twice = Rollup::decode_image(&again, &shape).expect("our own image");
                assert_eq!(image_of(&twice), again, "{}", path.display());
            }
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("seed-") {
            assert!(
                Rollup::decode_image(&bytes, &shape).is_ok(),
                "{name}: a seed image decodes"
            );
        }
        replayed += 1;
    }
    assert!(replayed >= 1, "no findings replayed from {}", dir.display());
}

/// Writes the fuzz target's seed images (run by hand with
/// `cargo test -p cardinal-rollup --test image -- --ignored`).
#[test]
#[ignore = "writes tests/fuzz/rollup_image/seed-*"]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/rollup_image");
    let (_, small) = small_image();
    std::fs::write(dir.join("seed-every-kind"), small).expect("writable");
    let shape = every_kind();
    seed_thread(2);
    let wide = random_rollup(3, &shape, Limits::default(), 400);
    std::fs::write(dir.join("seed-every-kind-wide"), image_of(&wide)).expect("writable");
}

/// The random rollups the round trips run on reach the states worth
/// writing: sketches past their exact modes, KLL values waiting in the
/// slack, exact sums boxed, a rollup split into parts, groups evicted,
/// records dropped, a watermark. Else the round trips would prove less
/// than they say.
#[test]
fn random_rollups_reach_every_state() {
    use cardinal_rollup::{AggState, TopCounts};
    let shape = every_kind();
    let (mut topk_sketch, mut waiting, mut exact_sum, mut parts, mut evicted, mut dropped) =
        (0, 0, 0, 0, 0, 0);
    for seed in 0..40u64 {
        let limits = limits_of(&mut Rng(seed ^ 0x5a5a));
        let rollup = random_rollup(
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            &shape,
            limits,
            3_000,
        );
        parts += usize::from(rollup.parts() > 1);
        evicted += usize::from(rollup.evicted_before().is_some());
        dropped += usize::from(rollup.dropped_group_limit() + rollup.dropped_expired() > 0);
        for (_, _, states) in rollup.groups() {
            for state in states {
                match state {
                    AggState::TopK(top) if matches!(top.counts, TopCounts::Sketch(_)) => {
                        topk_sketch += 1;
                    }
                    AggState::Sum { exact: Some(_), .. } => exact_sum += 1,
                    AggState::Quantiles(q) => {
                        let mut state = Vec::new();
                        q.encode_state(&mut state);
                        waiting += usize::from(state[8] != 0);
                    }
                    _ => {}
                }
            }
        }
    }
    for (what, count) in [
        ("top-k sketches", topk_sketch),
        ("KLL sketches with values waiting", waiting),
        ("boxed exact sums", exact_sum),
        ("rollups in parts", parts),
        ("rollups that evicted", evicted),
        ("rollups that dropped", dropped),
    ] {
        assert!(count > 0, "no {what}");
    }
}

/// The one KLL sketch of a one-group rollup.
fn the_sketch(rollup: &Rollup) -> &cardinal_sketch::quantiles::Quantiles {
    let (_, _, states) = rollup.groups().next().expect("one group");
    match &states[0] {
        cardinal_rollup::AggState::Quantiles(q) => q,
        other => panic!("not a quantiles state: {other:?}"),
    }
}

/// A KLL sketch restored from an image keeps what its 95% interval needs
/// (its compactions, version 2), and an image of version 1, written
/// before they were, is still read: its sketch answers the same
/// quantiles and, not knowing its compactions, takes the interval's
/// fallback width.
#[test]
fn kll_states_keep_their_compactions_and_version_1_is_read() {
    let shape = Shape {
        aggs: vec![AggKind::Quantiles {
            k: 200,
            ranks: Ranks::new(&[0.5]).expect("a rank"),
        }],
    };
    seed_thread(5);
    let mut rollup = Rollup::new(shape.clone(), Limits::default()).expect("valid");
    for i in 0..10_000u32 {
        let v = f64::from(i.wrapping_mul(2_654_435_761) % 100_003);
        rollup.fold(Timestamp(0), b"CA", &[Input::Number(v)]);
    }
    let original = the_sketch(&rollup);
    assert!(original.rank_sigma().expect("made here") > 0.0);
    let image = image_of(&rollup);
    assert_eq!(image[8..12], 2u32.to_le_bytes());
    let restored = Rollup::decode_image(&image, &shape).expect("ours");
    assert_eq!(the_sketch(&restored).rank_sigma(), original.rank_sigma());
    assert_eq!(
        the_sketch(&restored).quantile_interval(0.5),
        original.quantile_interval(0.5)
    );

    // The same image as version 1 wrote it: the state's version field 0
    // and no compactions part (2 bytes, 17 a size class).
    let mut state = Vec::new();
    original.encode_state(&mut state);
    let at = image
        .windows(state.len())
        .position(|w| w == state.as_slice())
        .expect("the state is in the image");
    let part = 12 + 8 * usize::from(u16::from_le_bytes([state[8], state[9]]));
    let classes = usize::from(state[part + 1]);
    let mut old_state = state[..part].to_vec();
    old_state[10..12].copy_from_slice(&0u16.to_le_bytes());
    old_state.extend_from_slice(&state[part + 2 + 17 * classes..]);
    let mut old = image[..at - 4].to_vec();
    old.extend_from_slice(&u32::try_from(old_state.len()).expect("small").to_le_bytes());
    old.extend_from_slice(&old_state);
    old.extend_from_slice(&image[at + state.len()..]);
    old[8..12].copy_from_slice(&1u32.to_le_bytes());
    fix_checksum(&mut old);
    let read = Rollup::decode_image(&old, &shape).expect("a version 1 image is read");
    assert_eq!(answers(&read), answers(&rollup));
    let sketch = the_sketch(&read);
    assert_eq!(sketch.rank_sigma(), None, "version 1 did not carry them");
    assert_eq!(sketch.quantile(0.5), original.quantile(0.5));
    // Written again, it is version 2 and still does not know them.
    let again = image_of(&read);
    assert_eq!(again[8..12], 2u32.to_le_bytes());
    let twice = Rollup::decode_image(&again, &shape).expect("ours");
    assert_eq!(the_sketch(&twice).rank_sigma(), None);
    // A version past this build's is refused, naming both.
    let mut newer = image.clone();
    newer[8..12].copy_from_slice(&3u32.to_le_bytes());
    fix_checksum(&mut newer);
    let error = Rollup::decode_image(&newer, &shape)
        .expect_err("version 3")
        .to_string();
    assert!(
        error.contains("version 3") && error.contains("1 to 2"),
        "{error}"
    );
}
