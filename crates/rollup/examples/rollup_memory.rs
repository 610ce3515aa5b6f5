//! Bytes per group of a high-cardinality summary, from the rollup's own
//! accounting ([`Rollup::heap_bytes`]).
//!
//! The summary is `GROUP BY day, site, state` with `count(*)`,
//! `sum(revenue)` and `hll(user_id)` (postgresql-hll's defaults, log2m 11,
//! regwidth 5): 1000 sites x 50 states x 30 days = 1.5 M groups. Each group
//! gets `EVENTS` records (default 10) from distinct users; keys are encoded
//! as the engine encodes two text dimensions (a tag byte, a u32 length, the
//! bytes, for each).
//!
//! ```text
//! cargo run --release -p cardinal-rollup --example rollup_memory -- [EVENTS]
//! ```

use cardinal_event::Timestamp;
use cardinal_rollup::{AggKind, AggState, Input, Limits, Rollup, Shape};
use cardinal_sketch::hash;

const SITES: u64 = 1000;
const STATES: u64 = 50;
const DAYS: i64 = 30;
const DAY_MS: i64 = 86_400_000;
/// The engine's tag of a text dimension value.
const TAG_TEXT: u8 = 4;

fn push_text(key: &mut Vec<u8>, text: &[u8]) {
    key.push(TAG_TEXT);
    key.extend_from_slice(&u32::try_from(text.len()).expect("short").to_le_bytes());
    key.extend_from_slice(text);
}

fn main() {
    let events: u64 = std::env::args()
        .nth(1)
        .map_or(10, |a| a.parse().expect("EVENTS is a count"));
    let shape = Shape {
        aggs: vec![
            AggKind::CountAll,
            AggKind::Sum,
            AggKind::Hll {
                log2m: 11,
                regwidth: 5,
            },
        ],
    };
    let mut rollup = Rollup::new(shape, Limits::default()).expect("valid shape");
    let mut key = Vec::with_capacity(64);
    let mut user = 0u64;
    // Records arrive day by day, each day cycling through its groups
    // `events` times, as a time-ordered stream would.
    for day in 0..DAYS {
        for _ in 0..events {
            for site in 0..SITES {
                for state in 0..STATES {
                    key.clear();
                    push_text(&mut key, format!("site{site:04}").as_bytes());
                    push_text(&mut key, format!("S{state:02}").as_bytes());
                    user += 1;
                    let inputs = [
                        Input::Null,
                        Input::Number(0.001 * (user % 1000) as f64),
                        Input::Key {
                            hash: hash::user_id(user),
                            id: Some(user),
                            text: &[],
                        },
                    ];
                    rollup.fold(Timestamp(day * DAY_MS), &key, &inputs);
                }
            }
        }
    }
    let groups = rollup.group_count();
    let bytes = rollup.heap_bytes();
    let payload: usize = rollup
        .groups()
        .flat_map(|(_, _, states)| states)
        .map(AggState::heap_bytes)
        .sum();
    println!("groups: {groups}, records per group: {events}");
    println!(
        "heap bytes: {bytes} ({:.1} MB), {:.0} per group",
        bytes as f64 / 1e6,
        bytes as f64 / groups as f64
    );
    println!(
        "  sketch payloads: {:.0} per group; table, keys and state slots: {:.0} per group \
         (AggState is {} bytes, key {} bytes)",
        payload as f64 / groups as f64,
        (bytes - payload) as f64 / groups as f64,
        std::mem::size_of::<AggState>(),
        key.len()
    );
}
