#![no_main]
//! Any bytes in place of one of a continuous engine's snapshot images
//! (`View::images`: a summary's rollup image, or the attributions' state
//! with its chains), checked by `cardinal_engine::check_images` as a
//! server checks a snapshot before it trusts it: an error or Ok, never a
//! panic, never more memory than the input backs. Checksums are not
//! enforced under `--cfg fuzzing`, so mutations reach the structure.
//!
//! The first byte picks the image replaced; the valid images around it
//! come from an engine fed a few journeys once.
use std::sync::{Arc, OnceLock};

use cardinal_engine::{Continuous, ContinuousOptions, check_images};
use cardinal_route::Plan;
use libfuzzer_sys::fuzz_target;

const SQL: &str = "
    CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT,
      site TEXT, revenue DOUBLE)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE ATTRIBUTION lin ON s BY user_id MODEL linear LOOKBACK 2 DAYS
      TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
      VALUE revenue CAMPAIGN campaign SITE site;
    CREATE SUMMARY by_campaign AS
      SELECT campaign, sum(credit) AS credit, count(*) AS touches
      FROM lin GROUP BY campaign;
    CREATE SUMMARY kinds AS
      SELECT date_trunc('day', ts) AS day, kind, count(*), hll(user_id)
      FROM s GROUP BY day, kind;";

struct Fixture {
    plan: Plan,
    options: ContinuousOptions,
    images: Vec<(String, Vec<u8>)>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let plan = Plan::compile(SQL).expect("compiles");
        let options = ContinuousOptions::new(1, 1 << 30);
        let engine = Continuous::start(Arc::new(plan.clone()), &options).expect("start");
        let mut batch = Vec::new();
        for i in 0u64..400 {
            let kind = ["click", "view", "conversion"][(i % 3) as usize];
            batch.extend_from_slice(
                format!(
                    "2026-11-0{}T{:02}:00:00Z,{},{kind},c{},s{},{}.5\n",
                    1 + i / 200,
                    i % 24,
                    i % 17,
                    i % 5,
                    i % 3,
                    i % 9
                )
                .as_bytes(),
            );
        }
        engine.submit(batch).expect("submit");
        let images = engine
            .snapshot_to_save()
            .expect("snapshot")
            .images()
            .expect("images");
        engine.finish().expect("finish");
        Fixture {
            plan,
            options,
            images,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, bytes)) = data.split_first() else {
        return;
    };
    let fixture = fixture();
    let mut images = fixture.images.clone();
    let at = usize::from(pick) % images.len();
    images[at].1 = bytes.to_vec();
    let _ = check_images(&fixture.plan, &fixture.options, &images);
});
