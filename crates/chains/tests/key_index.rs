//! `KeyIndex` against a `BTreeMap<u64, u32>` oracle: random inserts,
//! replacements, removals and lookups on layouts small enough that shards
//! grow within a few dozen inserts.

use std::collections::BTreeMap;

use cardinal_chains::{Error, KeyIndex, SHARD_BITS_MAX};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u32),
    Remove(u64),
    Get(u64),
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys, 0..u32::MAX).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys).prop_map(Op::Remove),
        2 => (0..keys).prop_map(Op::Get),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn key_index_matches_a_btreemap(
        shard_bits in 0u8..4,
        ops in proptest::collection::vec(op(400), 1..600),
    ) {
        let mut index = KeyIndex::new(shard_bits, 4).expect("valid");
        let mut oracle = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    // Spread the small keys over the whole u64 range too.
                    let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let outcome = index.insert(key, v).expect("room");
                    prop_assert_eq!(outcome.new_key, oracle.insert(key, v).is_none());
                }
                Op::Remove(k) => {
                    let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    prop_assert_eq!(index.remove(key), oracle.remove(&key));
                }
                Op::Get(k) => {
                    let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    prop_assert_eq!(index.get(key), oracle.get(&key).copied());
                }
            }
            prop_assert_eq!(index.len(), oracle.len() as u64);
        }
        for (&key, &value) in &oracle {
            prop_assert_eq!(index.get(key), Some(value));
        }
    }
}

#[test]
fn key_index_rejects_a_bad_layout() {
    assert!(matches!(
        KeyIndex::new(SHARD_BITS_MAX + 1, 16),
        Err(Error::InvalidConfig {
            name: "shard_bits",
            ..
        })
    ));
    assert!(matches!(
        KeyIndex::new(4, 3),
        Err(Error::InvalidConfig {
            name: "shard_slots_initial",
            ..
        })
    ));
}

#[test]
#[should_panic(expected = "u32::MAX marks an empty slot")]
fn key_index_refuses_the_empty_mark_as_a_value() {
    let mut index = KeyIndex::new(2, 4).expect("valid");
    let _ = index.insert(1, u32::MAX);
}
