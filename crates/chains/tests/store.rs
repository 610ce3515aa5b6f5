//! The store's API contracts: routing to shard groups (and groups on their
//! own threads), bounded trim slices, limits, and the index's bytes per key.

use cardinal_chains::{
    CHAIN_BYTES_MAX, CampaignId, Config, Error, Kind, Record, SHARD_BITS_MAX, SiteId, Store, UserId,
};

fn click(time_ms: u64) -> Record {
    Record::new(time_ms, Kind::CLICK, CampaignId(1), SiteId(1)).expect("time in range")
}

#[test]
fn groups_move_to_threads_and_come_back() {
    let config = Config {
        shard_bits: 6,
        group_bits: 1,
        ..Config::default()
    };
    let store = Store::new(config).expect("valid");
    let router = store.router();
    let mut groups = store.into_groups();
    std::thread::scope(|scope| {
        for group in &mut groups {
            scope.spawn(move || {
                for user in (0..10_000u64).map(UserId) {
                    if router.group_of(user) == group.group() {
                        group.append(user, &click(user.0)).expect("room");
                    } else {
                        // The wrong owner refuses, naming the right one.
                        let err = group.append(user, &click(0)).expect_err("not the owner");
                        assert!(matches!(err, Error::WrongGroup { owner, .. } if owner == router.group_of(user)));
                    }
                }
            });
        }
    });
    assert!(groups.iter().all(|g| g.keys() > 4_000));
    groups.reverse();
    let store = Store::from_groups(config, groups).expect("all groups");
    assert_eq!(store.keys(), 10_000);
    let mut out = Vec::new();
    assert!(store.chain(UserId(1234), &mut out).expect("routed"));
    assert_eq!(out, vec![click(1234)]);
    assert!(Store::from_groups(config, Vec::new()).is_err());
}

#[test]
fn shard_of_and_group_of_agree() {
    let config = Config {
        shard_bits: 10,
        group_bits: 3,
        ..Config::default()
    };
    let router = config.router();
    for user in (0..5_000u64).map(UserId) {
        let shard = router.shard_of(user);
        assert!(shard < 1024);
        assert_eq!(router.group_of(user), shard >> 7);
    }
}

#[test]
fn trim_slices_are_bounded_and_a_pass_trims_everything() {
    let config = Config {
        shard_bits: 4,
        group_bits: 0,
        lookback_ms: 100,
        shard_slots_initial: 16,
    };
    let mut store = Store::new(config).expect("valid");
    for user in 0..2_000u64 {
        store.append(UserId(user), &click(user % 50)).expect("room");
        store.append(UserId(user), &click(1_000)).expect("room");
    }
    let before = store.memory().record_bytes;
    let mut passes = 0;
    let mut dropped = 0;
    let mut slices = 0;
    while passes < 1 {
        let slice = store.trim_slice(1_000, 32);
        assert!(slice.slots_scanned <= 32);
        dropped += slice.records_dropped;
        passes += u32::from(slice.pass_done);
        slices += 1;
    }
    assert!(slices > 50, "a pass takes many slices ({slices})");
    assert_eq!(dropped, 2_000);
    assert_eq!(store.keys(), 2_000);
    assert_eq!(store.memory().record_bytes, before / 2);
    // A later cutoff empties every chain; the keys go with them.
    let all = store.trim_all(2_000);
    assert_eq!(all.chains_removed, 2_000);
    assert_eq!(store.keys(), 0);
    assert_eq!(store.memory().record_bytes, 0);
}

#[test]
fn a_full_chain_evicts_its_oldest_records() {
    let mut store = Store::new(Config::default()).expect("valid");
    let user = UserId(5);
    let per_chain = CHAIN_BYTES_MAX / 16;
    let mut evicted = 0;
    for t in 0..(per_chain as u64 + 10) {
        evicted += store.append(user, &click(t)).expect("room").records_evicted;
    }
    assert_eq!(evicted, 10);
    let mut out = Vec::new();
    store.take(user, &mut out).expect("own group");
    assert_eq!(out.len(), per_chain);
    assert_eq!(out[0], click(10));
    // A big record may evict several small ones.
    for t in 0..per_chain as u64 {
        store.append(user, &click(t)).expect("room");
    }
    let mut big = click(99_999);
    big.revenue_micros = 1;
    big.set_attrs(&[7; 40]).expect("fits");
    assert_eq!(store.append(user, &big).expect("room").records_evicted, 4);
}

#[test]
fn configs_out_of_range_are_rejected() {
    let bad = [
        Config {
            shard_bits: SHARD_BITS_MAX + 1,
            ..Config::default()
        },
        Config {
            shard_bits: 2,
            group_bits: 3,
            ..Config::default()
        },
        Config {
            shard_slots_initial: 3,
            ..Config::default()
        },
    ];
    for config in bad {
        assert!(
            matches!(Store::new(config), Err(Error::InvalidConfig { .. })),
            "{config:?}"
        );
    }
    let sized = Config::for_keys(500_000_000, 1, 1);
    assert_eq!(sized.shard_bits, 17);
    assert!(Store::new(Config::for_keys(0, 0, 1)).is_ok());
}

#[test]
fn the_index_stays_under_19_bytes_per_key_while_growing() {
    let config = Config {
        shard_bits: 6,
        group_bits: 0,
        lookback_ms: 1,
        shard_slots_initial: 16,
    };
    let mut store = Store::new(config).expect("valid");
    let mut growths = 0;
    for user in 0..200_000u64 {
        growths += u32::from(
            store
                .append(UserId(user), &click(0))
                .expect("room")
                .shard_grew,
        );
        if user % 1_000 == 999 {
            // 13 bytes per slot (12 of slot, 1 of age tag) at a load of
            // 0.68 to 0.85: 15.3 to 19.1 B/key; the slots alone, under 18.
            let m = store.memory();
            let per_key = m.index_bytes as f64 / m.keys as f64;
            assert!(per_key <= 13.0 / 0.68, "{per_key} B/key at {} keys", m.keys);
            assert!(
                per_key * 12.0 / 13.0 <= 18.0,
                "{per_key} B/key at {} keys",
                m.keys
            );
        }
    }
    // Each shard grows on its own, by 5/4 at a time: 64 shards from 16 to
    // ~4,100 slots (200k keys at a load of ~0.76) take about
    // 64 * log_1.25(256) ~ 1,590 growths.
    assert!((1_400..1_700).contains(&growths), "{growths}");
}

#[test]
fn a_batch_stops_at_a_user_of_another_group() {
    let config = Config {
        shard_bits: 6,
        group_bits: 1,
        ..Config::default()
    };
    let router = config.router();
    let mut groups = Store::new(config).expect("valid").into_groups();
    let group = &mut groups[0];
    let own: Vec<UserId> = (0..1_000u64)
        .map(UserId)
        .filter(|&u| router.group_of(u) == 0)
        .take(40)
        .collect();
    let stranger = (0..1_000u64)
        .map(UserId)
        .find(|&u| router.group_of(u) == 1)
        .expect("some user of group 1");
    // 40 pairs of the group (past one prefetch window), then a stranger,
    // then more of the group's own: the first 40 are appended, the rest not.
    let mut batch: Vec<(UserId, Record)> = own.iter().map(|&u| (u, click(u.0))).collect();
    batch.push((stranger, click(1)));
    batch.push((UserId(own[0].0), click(2)));
    let mut outcomes = Vec::new();
    let err = group
        .append_batch(&batch, &mut outcomes)
        .expect_err("a stranger in the batch");
    assert!(matches!(err, Error::WrongGroup { owner: 1, .. }));
    assert_eq!(outcomes.len(), 40);
    assert!(outcomes.iter().all(|o| o.new_key));
    assert_eq!(group.keys(), 40);
    let mut out = Vec::new();
    assert!(group.chain(own[0], &mut out).expect("own"));
    assert_eq!(out, vec![click(own[0].0)]);
}

/// A store with a lookback of 64 s: age tags in units of 1 s.
fn tagged_store() -> Store {
    Store::new(Config {
        shard_bits: 4,
        group_bits: 1,
        lookback_ms: 64_000,
        shard_slots_initial: 16,
    })
    .expect("valid")
}

#[test]
fn a_trim_frees_expired_users_unread_and_reads_only_the_cutoffs_unit() {
    let mut store = tagged_store();
    let t0 = 1_000_000_000;
    for user in 0..1_000 {
        store.append(UserId(user), &click(t0)).expect("room");
    }
    // The first pass of a new store reads every chain (its tags were
    // written before the store had a clock) and writes their exact tags.
    let first = store.trim_all(t0 + 500);
    assert!(first.full_pass);
    assert_eq!((first.chains_read, first.records_dropped), (1_000, 0));
    // Now nothing is read: every chain's newest record is 1 s old.
    let fresh = store.trim_all(t0 + 1_000);
    assert!(!fresh.full_pass);
    assert_eq!((fresh.chains_read, fresh.chains_removed), (0, 0));
    // Records ahead of the clock (by less than `TAG_FUTURE_UNITS_MAX`)
    // raise the tags as they are.
    for user in 0..1_000 {
        store
            .append(UserId(user), &click(t0 + 2_000))
            .expect("room");
    }
    assert_eq!(store.trim_all(t0 + 30_000).chains_read, 0);
    for user in 1_000..1_100 {
        store
            .append(UserId(user), &click(t0 + 30_000))
            .expect("room");
    }
    // At t0 + 65 s every first record has expired: reads no longer return
    // it, but no chain is read for it (its newest record is alive).
    let expired = store.trim_all(t0 + 65_000);
    assert_eq!((expired.chains_read, expired.chains_removed), (0, 0));
    let mut out = Vec::new();
    assert!(store.chain(UserId(5), &mut out).expect("own group"));
    assert_eq!(out, vec![click(t0 + 2_000)]);
    let memory = store.memory();
    assert_eq!(memory.expired_bytes, 1_000 * click(t0).encoded_len() as u64);
    assert_eq!(memory.record_bytes, 1_100 * click(t0).encoded_len() as u64);
    // At t0 + 66 s their newest record's unit is the cutoff's: those chains
    // are read, and shed the expired record.
    let boundary = store.trim_all(t0 + 66_000);
    assert_eq!(
        (boundary.chains_read, boundary.records_dropped),
        (1_000, 1_000)
    );
    assert_eq!(boundary.chains_removed, 0);
    assert_eq!(store.memory().expired_bytes, 0);
    // A unit later they have expired whole: freed unread.
    let gone = store.trim_all(t0 + 67_500);
    assert_eq!((gone.chains_read, gone.chains_removed_unread), (0, 1_000));
    assert_eq!(store.keys(), 100);
    assert!(!store.chain(UserId(5), &mut out).expect("own group"));
    // A record already expired at the clock is refused.
    let late = store.append(UserId(5), &click(t0 + 3_000)).expect("room");
    assert!(late.expired && !late.new_key);
    assert_eq!(store.keys(), 100);
    let last = store.trim_all(t0 + 95_500);
    assert_eq!((last.chains_read, last.chains_removed_unread), (0, 100));
    assert_eq!(store.keys(), 0);
}

/// Small trim slices over every slot of every group a few times, added up.
fn slice_passes(store: &mut Store, now: u64) -> cardinal_chains::TrimOutcome {
    let mut total = cardinal_chains::TrimOutcome::default();
    let mut passes = 0;
    while passes < 6 {
        let slice = store.trim_slice(now, 7);
        total.add(&slice);
        passes += u32::from(slice.pass_done);
    }
    total
}

#[test]
fn trusted_slices_read_no_chain_and_free_the_cutoffs_unit_a_unit_later() {
    let mut store = tagged_store();
    let t0 = 1_000_000_000;
    for user in 0..500 {
        store.append(UserId(user), &click(t0)).expect("room");
    }
    for user in 500..600 {
        store
            .append(UserId(user), &click(t0 + 10_000))
            .expect("room");
    }
    assert!(store.trim_all(t0 + 500).full_pass);
    // At t0 + 64.5 s the first 500 have expired (cutoff t0 + 500 ms), in
    // the cutoff's own unit: slices leave them, reading no chain, and
    // reads already return nothing of them.
    let boundary = slice_passes(&mut store, t0 + 64_500);
    assert!(!boundary.full_pass);
    assert_eq!((boundary.chains_read, boundary.chains_removed), (0, 0));
    assert_eq!(store.keys(), 600);
    assert!(!store.chain(UserId(7), &mut Vec::new()).expect("own group"));
    // Once the cutoff has passed their unit, a pass frees them unread.
    let gone = slice_passes(&mut store, t0 + 65_000);
    assert_eq!((gone.chains_read, gone.chains_removed_unread), (0, 500));
    assert_eq!(store.keys(), 100);
    assert!(
        store
            .chain(UserId(550), &mut Vec::new())
            .expect("own group")
    );
}

#[test]
fn a_record_far_ahead_of_the_clock_is_never_freed_unread_too_soon() {
    let mut store = tagged_store();
    let t0 = 1_000_000_000;
    store.append(UserId(1), &click(t0)).expect("room");
    store.trim_all(t0);
    // 100 s ahead of the clock: more than `TAG_FUTURE_UNITS_MAX` (32) units.
    store.append(UserId(2), &click(t0 + 100_000)).expect("room");
    // The tag had to be clamped: the trim reads every chain instead of
    // trusting tags, until a pass finds the record within reach of the
    // clock (30 units ahead at t0 + 70 s) and writes its exact tag.
    for (now, full) in [
        (t0 + 65_000, true),
        (t0 + 70_000, true),
        (t0 + 120_000, false),
    ] {
        let pass = store.trim_all(now);
        assert_eq!(pass.full_pass, full, "{now}");
        assert!(store.chain(UserId(2), &mut Vec::new()).expect("own group"));
    }
    assert_eq!(store.keys(), 1);
    // Its newest record reaches the cutoff's unit at t0 + 164 s: read, kept.
    let boundary = store.trim_all(t0 + 164_000);
    assert_eq!((boundary.chains_read, boundary.chains_removed), (1, 0));
    let gone = store.trim_all(t0 + 166_000);
    assert_eq!((gone.chains_removed_unread, gone.chains_removed), (1, 1));
    assert_eq!(store.keys(), 0);
}

#[test]
fn a_long_idle_gap_cannot_make_an_expired_chain_look_fresh() {
    let mut store = tagged_store();
    let t0 = 1_000_000_000;
    store.append(UserId(1), &click(t0)).expect("room");
    store.trim_all(t0);
    store.append(UserId(2), &click(t0 + 10_000)).expect("room");
    assert_eq!(store.trim_all(t0 + 10_000).chains_read, 0);
    // 256 units later both tags have wrapped to look 0 and 10 s old; the
    // gap since the last pass (over `TAG_GAP_UNITS_MAX` units) makes the
    // next slice start a full pass instead of trusting them.
    let later = t0 + 266_000;
    let all = store.trim_all(later);
    assert!(all.full_pass);
    assert_eq!((all.chains_read, all.chains_removed), (2, 2));
    assert_eq!(store.keys(), 0);
}

#[test]
fn slices_too_far_apart_still_trim_every_expired_record() {
    // Passes that take longer than the tags' trusted gap: each slice sees
    // 2 slots and the clock moves 10 s (10 units) per slice, so one pass of
    // ~500 slots spans ~2,500 units.
    let mut store = tagged_store();
    let mut now = 1_000_000_000;
    let mut next_user = 0;
    for _ in 0..3_000 {
        now += 10_000;
        store.append(UserId(next_user), &click(now)).expect("room");
        next_user += 1;
        store.trim_slice(now, 2);
    }
    // A trim pass at `now` drops every record older than the lookback.
    let all = store.trim_all(now + 1);
    let mut out = Vec::new();
    let mut live = 0;
    for user in 0..next_user {
        out.clear();
        if store.chain(UserId(user), &mut out).expect("own group") {
            assert!(out.iter().all(|r| r.time_ms() + 64_000 > now), "{user}");
            live += 1;
        }
    }
    assert_eq!(store.keys(), live);
    assert!(all.chains_read >= all.chains_removed);
    // 64 s of users at one per 10 s.
    assert!((6..=7).contains(&live), "{live}");
}

#[test]
fn a_tag_clamped_behind_the_trim_cursor_is_not_trusted_by_the_next_pass() {
    let mut store = tagged_store();
    let t0 = 1_000_000_000;
    let users = 0..200;
    for user in users.clone() {
        store.append(UserId(user), &click(t0)).expect("room");
    }
    store.trim_all(t0);
    assert!(!store.trim_all(t0 + 1_000).full_pass);
    // Half a pass of each group (13 bytes a slot), so that some users are
    // behind the cursor.
    let slots_per_group = store.memory().index_bytes / 13 / 2;
    assert!(!store.trim_slice(t0 + 1_000, slots_per_group / 2).pass_done);
    // 39 s (units) ahead of the clock: every tag is clamped to 32 ahead.
    for user in users.clone() {
        store
            .append(UserId(user), &click(t0 + 40_000))
            .expect("room");
    }
    // The rest of the pass runs at a clock within reach of the record, so
    // the chains it reads get their exact tags; those behind the cursor
    // keep the clamped ones, which the next pass must not trust.
    let rest = store.trim_slice(t0 + 10_000, u64::MAX);
    assert!(rest.pass_done);
    // At t0 + 98.5 s a clamped tag (unit t0 + 33 s) is 65 units old, past
    // the cutoff's unit, while the record (t0 + 40 s) is alive.
    let pass = store.trim_all(t0 + 98_500);
    assert!(pass.full_pass);
    assert_eq!(pass.chains_removed, 0);
    let mut out = Vec::new();
    for user in users {
        out.clear();
        assert!(store.chain(UserId(user), &mut out).expect("own group"));
        assert_eq!(out, vec![click(t0 + 40_000)], "user {user}");
    }
}
