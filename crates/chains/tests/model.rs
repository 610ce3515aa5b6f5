//! The store against a plain `BTreeMap<u64, Vec<Record>>` oracle (issue 4):
//! random appends, conversions, trims and restarts (snapshot and restore),
//! with the store's expiry rule (the oracle holds what a read must return:
//! the records not older than the lookback at the latest trim's clock),
//! on a layout small enough that shards grow, chains change classes and
//! reach `CHAIN_BYTES_MAX` within a few hundred operations. A counting
//! allocator checks the store's `heap_bytes` after every operation, and
//! every run ends by converting all users: the arena must then hold only
//! idle pages, at most one per size class and shard group.

use std::collections::BTreeMap;

use cardinal_chains::{
    CHAIN_BYTES_MAX, CLASS_COUNT, CampaignId, Config, Kind, PAGE_BYTES, RECORD_BYTES_MIN, Record,
    SiteId, Store, UserId,
};
use proptest::prelude::*;

#[path = "support/live_bytes.rs"]
mod live_bytes;

use live_bytes::live;

/// Runs `f` and adds what it allocated net to `store_bytes`. The callers'
/// output buffers are presized, so all of it is the store's.
fn counted<T>(store_bytes: &mut i64, f: impl FnOnce() -> T) -> T {
    let before = live();
    let value = f();
    *store_bytes += live() - before;
    value
}

/// Records one `take` may return: a full chain of the smallest records.
const CHAIN_RECORDS_MAX: usize = CHAIN_BYTES_MAX / RECORD_BYTES_MIN;

const USERS: u64 = 48;
const LOOKBACK_MS: u64 = 5_000;

#[derive(Debug, Clone)]
enum Op {
    /// Append `count` records to a user, at times up to `skew_ms` before now.
    Append {
        user: u64,
        count: u16,
        skew_ms: u64,
        revenue: i64,
        attrs: u8,
    },
    /// Appends to several users through one `append_batch` call: `(user,
    /// skew_ms, attrs)` per record.
    Batch { items: Vec<(u64, u64, u8)> },
    /// A conversion: take the chain.
    Take { user: u64 },
    /// Advance the clock, then run a full trim pass.
    Trim { advance_ms: u64 },
    /// Advance the clock, then run one bounded trim slice.
    TrimSlice { advance_ms: u64, budget: u64 },
    /// Snapshot to bytes and restore from them.
    Restart,
    /// Fill `users` more users (ids from `BURST_USER_FIRST`, repeating
    /// across bursts) up to `CHAIN_BYTES_MAX` each: more than a page of the
    /// largest class, so whole pages empty when they convert or expire.
    Burst { users: u64 },
}

const BURST_USER_FIRST: u64 = 1_000;
/// Slots of the largest class in one page (16 of 16,392 bytes) plus a few.
const BURST_USERS_MAX: u64 = 40;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..USERS, 1u16..4, 0u64..8_000, prop_oneof![Just(0i64), any::<i64>()], 0u8..=40)
            .prop_map(|(user, count, skew_ms, revenue, attrs)| Op::Append { user, count, skew_ms, revenue, attrs }),
        1 => (0..USERS, 200u16..400, 0u64..100, Just(7i64), 40u8..=40)
            .prop_map(|(user, count, skew_ms, revenue, attrs)| Op::Append { user, count, skew_ms, revenue, attrs }),
        2 => proptest::collection::vec((0..USERS, 0u64..8_000, 0u8..=40), 1..100)
            .prop_map(|items| Op::Batch { items }),
        2 => (0..USERS).prop_map(|user| Op::Take { user }),
        1 => (0u64..4_000).prop_map(|advance_ms| Op::Trim { advance_ms }),
        1 => (0u64..4_000, 1u64..64).prop_map(|(advance_ms, budget)| Op::TrimSlice { advance_ms, budget }),
        // Idle gaps: the age tags (units of 79 ms here) wrap after 20.2 s
        // and are trusted for 12.6 s after a pass starts.
        1 => (8_000u64..60_000).prop_map(|advance_ms| Op::Trim { advance_ms }),
        1 => (8_000u64..60_000, 1u64..64).prop_map(|(advance_ms, budget)| Op::TrimSlice { advance_ms, budget }),
        1 => Just(Op::Restart),
    ]
}

/// The usual operations with bursts among them, for fewer cases: a burst is
/// thousands of appends.
fn op_with_bursts() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => op(),
        1 => (17..BURST_USERS_MAX).prop_map(|users| Op::Burst { users }),
    ]
}

/// `Op::Burst` as the appends it stands for.
fn expand(ops: &[Op]) -> Vec<Op> {
    let mut expanded = Vec::with_capacity(ops.len());
    for op in ops {
        match *op {
            Op::Burst { users } => {
                expanded.extend((0..users).map(|i| Op::Append {
                    user: BURST_USER_FIRST + i,
                    count: 260,
                    skew_ms: 0,
                    revenue: 7,
                    attrs: 40,
                }));
            }
            ref other => expanded.push(other.clone()),
        }
    }
    expanded
}

fn record(time_ms: u64, i: u64, revenue: i64, attrs: u8) -> Record {
    let mut r = Record::new(
        time_ms,
        Kind(u8::try_from(i % 4).expect("small")),
        CampaignId(u32::try_from(i % 1000).expect("small")),
        SiteId(7),
    )
    .expect("time in range");
    r.revenue_micros = revenue;
    let bytes: Vec<u8> = (0..attrs).map(|b| b.wrapping_mul(31)).collect();
    r.set_attrs(&bytes).expect("at most 40 bytes");
    r
}

/// Every user id an operation may name.
fn user_ids() -> impl Iterator<Item = u64> {
    (0..USERS).chain(BURST_USER_FIRST..BURST_USER_FIRST + BURST_USERS_MAX)
}

fn chain_bytes(chain: &[Record]) -> usize {
    chain.iter().map(Record::encoded_len).sum()
}

fn check(
    store: &Store,
    oracle: &BTreeMap<u64, Vec<Record>>,
    store_bytes: i64,
) -> Result<(), TestCaseError> {
    // Users whose records all expired stay in the index until the trim
    // reaches them; reads never see them.
    prop_assert!(store.keys() >= oracle.len() as u64);
    let mut out = Vec::new();
    for user in user_ids() {
        out.clear();
        let found = store.chain(UserId(user), &mut out).expect("own group");
        match oracle.get(&user) {
            Some(expected) => {
                prop_assert!(found);
                prop_assert_eq!(&out, expected);
            }
            None => prop_assert!(!found),
        }
    }
    let record_bytes: usize = oracle.values().map(|c| chain_bytes(c)).sum();
    let memory = store.memory();
    prop_assert_eq!(memory.record_bytes, record_bytes as u64);
    prop_assert!(memory.slot_bytes >= memory.record_bytes + memory.expired_bytes + 2 * memory.keys);
    prop_assert!(memory.arena_bytes >= memory.slot_bytes);
    prop_assert_eq!(i64::try_from(memory.heap_bytes).expect("fits"), store_bytes);
    prop_assert!(memory.arena_pages_idle * PAGE_BYTES as u64 <= memory.arena_bytes);
    prop_assert!(memory.arena_bytes <= memory.arena_mapped_bytes);
    Ok(())
}

fn run(ops: &[Op], config: Config) -> Result<(), TestCaseError> {
    let mut store_bytes = 0i64;
    let mut store = counted(&mut store_bytes, || Store::new(config)).expect("valid config");
    let mut oracle: BTreeMap<u64, Vec<Record>> = BTreeMap::new();
    let mut now = 10_000u64;
    // The store's clock: the latest `now` a trim was given.
    let mut cutoff = 0u64;
    let mut serial = 0u64;
    let mut out = Vec::with_capacity(CHAIN_RECORDS_MAX);
    let mut outcomes = Vec::with_capacity(128);
    for op in &expand(ops) {
        match *op {
            Op::Append {
                user,
                count,
                skew_ms,
                revenue,
                attrs,
            } => {
                for _ in 0..count {
                    serial += 1;
                    now += 1;
                    let r = record(now - skew_ms.min(now), serial, revenue, attrs);
                    let outcome =
                        counted(&mut store_bytes, || store.append(UserId(user), &r)).expect("room");
                    prop_assert_eq!(outcome.expired, r.time_ms() < cutoff);
                    if outcome.expired {
                        prop_assert!(!outcome.new_key && outcome.records_evicted == 0);
                        continue;
                    }
                    let chain = oracle.entry(user).or_default();
                    prop_assert_eq!(outcome.new_key, chain.is_empty());
                    let mut evicted = 0;
                    while chain_bytes(chain) + r.encoded_len() > CHAIN_BYTES_MAX {
                        chain.remove(0);
                        evicted += 1;
                    }
                    prop_assert_eq!(outcome.records_evicted, evicted);
                    chain.push(r);
                }
            }
            Op::Batch { ref items } => {
                let mut batch = Vec::new();
                for &(user, skew_ms, attrs) in items {
                    serial += 1;
                    now += 1;
                    let r = record(now - skew_ms.min(now), serial, 0, attrs);
                    batch.push((UserId(user), r));
                }
                outcomes.clear();
                counted(&mut store_bytes, || {
                    store.append_batch(&batch, &mut outcomes)
                })
                .expect("room");
                prop_assert_eq!(outcomes.len(), batch.len());
                for ((user, r), outcome) in batch.iter().zip(&outcomes) {
                    prop_assert_eq!(outcome.expired, r.time_ms() < cutoff);
                    if outcome.expired {
                        continue;
                    }
                    let chain = oracle.entry(user.0).or_default();
                    prop_assert_eq!(outcome.new_key, chain.is_empty());
                    let mut evicted = 0;
                    while chain_bytes(chain) + r.encoded_len() > CHAIN_BYTES_MAX {
                        chain.remove(0);
                        evicted += 1;
                    }
                    prop_assert_eq!(outcome.records_evicted, evicted);
                    chain.push(*r);
                }
            }
            Op::Take { user } => {
                out.clear();
                let found = counted(&mut store_bytes, || store.take(UserId(user), &mut out))
                    .expect("own group");
                match oracle.remove(&user) {
                    Some(expected) => {
                        prop_assert!(found);
                        prop_assert_eq!(&out, &expected);
                    }
                    None => prop_assert!(!found),
                }
            }
            Op::Trim { advance_ms } => {
                now += advance_ms;
                counted(&mut store_bytes, || store.trim_all(now));
                cutoff = now.saturating_sub(LOOKBACK_MS);
                for chain in oracle.values_mut() {
                    chain.retain(|r| r.time_ms() >= cutoff);
                }
                oracle.retain(|_, c| !c.is_empty());
                // A whole pass leaves no user without a live record.
                prop_assert_eq!(store.keys(), oracle.len() as u64);
            }
            Op::TrimSlice { advance_ms, budget } => {
                // Which chains a slice reaches is the store's business;
                // what reads return is not: the clock alone decides it.
                now += advance_ms;
                let outcome = counted(&mut store_bytes, || store.trim_slice(now, budget));
                prop_assert!(outcome.slots_scanned <= budget * 2);
                prop_assert!(outcome.chains_removed_unread <= outcome.chains_removed);
                cutoff = now.saturating_sub(LOOKBACK_MS);
                for chain in oracle.values_mut() {
                    chain.retain(|r| r.time_ms() >= cutoff);
                }
                oracle.retain(|_, c| !c.is_empty());
            }
            Op::Restart => {
                let mut bytes = Vec::new();
                let stats = store.snapshot(&mut bytes).expect("in memory");
                prop_assert_eq!(stats.bytes, bytes.len() as u64);
                let mut restored_bytes = 0i64;
                let restored = counted(&mut restored_bytes, || Store::restore(bytes.as_slice()))
                    .expect("own snapshot");
                // Dropping the old store gives back every byte it counted.
                counted(&mut store_bytes, || drop(store));
                prop_assert_eq!(store_bytes, 0);
                store = restored;
                store_bytes = restored_bytes;
                prop_assert_eq!(*store.config(), config);
            }
            Op::Burst { .. } => unreachable!("expanded"),
        }
        check(&store, &oracle, store_bytes)?;
    }
    // A whole pass removes the users whose records all expired, then every
    // user converts: the arena gives back every page but each class's
    // newest, which it keeps empty.
    counted(&mut store_bytes, || store.trim_all(now));
    let cutoff = now.saturating_sub(LOOKBACK_MS);
    for chain in oracle.values_mut() {
        chain.retain(|r| r.time_ms() >= cutoff);
    }
    oracle.retain(|_, c| !c.is_empty());
    prop_assert_eq!(store.keys(), oracle.len() as u64);
    let users: Vec<u64> = oracle.keys().copied().collect();
    for user in users {
        out.clear();
        let found =
            counted(&mut store_bytes, || store.take(UserId(user), &mut out)).expect("own group");
        prop_assert!(found);
        prop_assert_eq!(&out, &oracle[&user]);
    }
    oracle.clear();
    check(&store, &oracle, store_bytes)?;
    let memory = store.memory();
    prop_assert_eq!(memory.slot_bytes, 0);
    prop_assert_eq!(
        memory.arena_bytes,
        memory.arena_pages_idle * PAGE_BYTES as u64
    );
    prop_assert!(memory.arena_pages_idle <= (CLASS_COUNT as u64) << config.group_bits);
    counted(&mut store_bytes, || drop(store));
    prop_assert_eq!(store_bytes, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
        run(&ops, Config { shard_bits: 3, group_bits: 1, lookback_ms: LOOKBACK_MS, shard_slots_initial: 4 })?;
    }

    #[test]
    fn one_shard_one_group_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops, Config { shard_bits: 0, group_bits: 0, lookback_ms: LOOKBACK_MS, shard_slots_initial: 4 })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn bursts_give_their_pages_back(ops in proptest::collection::vec(op_with_bursts(), 1..40)) {
        run(&ops, Config { shard_bits: 2, group_bits: 1, lookback_ms: LOOKBACK_MS, shard_slots_initial: 4 })?;
    }
}

/// `append_batch` against one `append` per pair on a twin store: the same
/// outcomes (new key, chain move, shard growth, evictions), chains and byte
/// counts, over batches that cross the prefetch window and repeat users.
fn batch_equals_one_by_one(
    batches: &[Vec<(u64, u8)>],
    config: Config,
) -> Result<(), TestCaseError> {
    let mut one = Store::new(config).expect("valid config");
    let mut batched = Store::new(config).expect("valid config");
    let mut t = 1_000u64;
    let mut outcomes = Vec::new();
    for items in batches {
        let batch: Vec<(UserId, Record)> = items
            .iter()
            .map(|&(user, attrs)| {
                t += 1;
                (UserId(user), record(t, t, i64::from(attrs % 3), attrs))
            })
            .collect();
        outcomes.clear();
        batched.append_batch(&batch, &mut outcomes).expect("room");
        prop_assert_eq!(outcomes.len(), batch.len());
        for ((user, r), outcome) in batch.iter().zip(&outcomes) {
            prop_assert_eq!(&one.append(*user, r).expect("room"), outcome);
        }
        prop_assert_eq!(one.memory(), batched.memory());
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for user in 0..USERS * 4 {
        a.clear();
        b.clear();
        prop_assert_eq!(
            one.chain(UserId(user), &mut a).expect("own group"),
            batched.chain(UserId(user), &mut b).expect("own group")
        );
        prop_assert_eq!(&a, &b);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn append_batch_equals_one_append_per_pair(
        batches in proptest::collection::vec(
            proptest::collection::vec((0..USERS * 4, 0u8..=40), 0..200),
            1..12,
        )
    ) {
        batch_equals_one_by_one(&batches, Config { shard_bits: 3, group_bits: 0, lookback_ms: LOOKBACK_MS, shard_slots_initial: 4 })?;
        batch_equals_one_by_one(&batches, Config { shard_bits: 4, group_bits: 2, lookback_ms: LOOKBACK_MS, shard_slots_initial: 4 })?;
    }
}
