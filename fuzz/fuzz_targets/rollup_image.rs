#![no_main]
//! Any bytes into `Rollup::decode_image` (the checksum is not enforced
//! under `--cfg fuzzing`, so mutations reach the structure behind it): an
//! error or a rollup, never a panic, never more memory than the input
//! backs (libFuzzer's -rss_limit_mb and -malloc_limit_mb catch that). A
//! rollup it accepts writes an image that reads back to the same bytes,
//! answers, and folds and merges on without panicking.
//!
//! The shape is `every_kind()` of `crates/rollup/tests/shapes/`, shared
//! with the image tests, whose seed images
//! (`crates/rollup/tests/fuzz/rollup_image/seed-*`) start the corpus.
use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, Input, Ranks, Rollup, Shape};
use libfuzzer_sys::fuzz_target;

include!("../../crates/rollup/tests/shapes/every_kind.rs");

fuzz_target!(|data: &[u8]| {
    let shape = every_kind();
    let Ok(mut rollup) = Rollup::decode_image(data, &shape) else {
        return;
    };
    let mut image = Vec::new();
    rollup.encode_image(&mut image);
    let again = Rollup::decode_image(&image, &shape).expect("an image we wrote decodes");
    let mut twice = Vec::new();
    again.encode_image(&mut twice);
    assert_eq!(twice, image);
    assert_eq!(
        format!("{:?}", again.rows()),
        format!("{:?}", rollup.rows())
    );
    // Folds and merges on what was decoded.
    let key = Input::Key {
        hash: 0x9e37_79b9_7f4a_7c15,
        id: Some(7),
        text: b"seven",
    };
    let inputs = [
        Input::Null,
        Input::Number(1.5),
        Input::Number(1.5),
        Input::Int(3),
        Input::Number(1.5),
        Input::Number(1.5),
        Input::Int(3),
        Input::Number(1.5),
        Input::Int(3),
        key,
        key,
        Input::Number(1.5),
        Input::Null,
        key,
        key,
    ];
    let buckets: Vec<Timestamp> = rollup
        .groups()
        .map(|(bucket, _, _)| bucket)
        .take(4)
        .collect();
    for bucket in buckets {
        for _ in 0..70 {
            rollup.fold(bucket, b"k", &inputs);
        }
    }
    let _ = rollup.merge(&again);
    rollup.evict_expired();
    rollup.evict_future();
    let _ = rollup.rows();
});
