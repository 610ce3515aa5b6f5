//! Unit tests of the dictionaries and of streaming release.

use super::*;

#[test]
fn names_absorb_and_round_trip() {
    let mut local = Names::default();
    assert_eq!(local.code(b"b"), 1);
    assert_eq!(local.code(b"a"), 2);
    assert_eq!(local.code(b"b"), 1);
    let mut global = Names::default();
    global.code(b"a");
    assert_eq!(global.absorb(&local), vec![0, 2, 1]);
    assert_eq!(global.name(2), Some(&b"b"[..]));
    assert_eq!(global.name(0), None);
    let dir = std::env::temp_dir().join(format!("cardinal-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("x.names");
    let pair = [global, local];
    write_names(&path, &pair).expect("write");
    let text = std::fs::read_to_string(&path).expect("read");
    let back = read_names(&text).expect("parse");
    assert_eq!(back[0].names, pair[0].names);
    assert_eq!(back[1].names, pair[1].names);
    assert!(read_names(&text.replace("end\n", "")).is_err());
    assert!(read_names("cardinal-names 1\n1\n6\n0\nend\n").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names_stop_at_the_limit() {
    let mut names = Names::default();
    for i in 0..NAMES_MAX {
        names.code(&i.to_le_bytes());
    }
    assert_eq!(names.code(b"one more"), 0);
    assert_eq!(names.overflow, 1);
    assert_eq!(names.code(&0u32.to_le_bytes()), 1);
}

mod streaming {
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    use super::*;

    const SQL: &str = "
        CREATE STREAM s (ts TIMESTAMP, user_id BIGINT, kind TEXT, campaign TEXT,
          site TEXT, revenue DOUBLE)
          WITH (format = 'csv', header = true, time = 'ts');
        CREATE ATTRIBUTION lin ON s BY user_id MODEL linear LOOKBACK 2 DAYS
          TOUCH WHERE kind = 'click' CONVERSION WHERE kind = 'conversion'
          VALUE revenue CAMPAIGN campaign SITE site;
        CREATE ATTRIBUTION last ON s BY user_id MODEL last_touch LOOKBACK 1 DAYS
          TOUCH WHERE kind = 'click' OR kind = 'view'
          CONVERSION WHERE kind = 'conversion' CAMPAIGN site;
        CREATE SUMMARY by_campaign AS
          SELECT campaign, sum(credit) AS credit, sum(revenue) AS revenue,
                 count(*) AS touches
          FROM lin GROUP BY campaign;
    ";

    const MINUTE_MS: u64 = 60_000;
    const KINDS: [&str; 4] = ["click", "view", "conversion", "click"];

    /// One input record: its columns, and where it was read.
    #[derive(Debug, Clone)]
    struct Row {
        time_ms: u64,
        user: i64,
        kind: &'static str,
        campaign: String,
        site: String,
        revenue: f64,
        input: u32,
        offset: u64,
    }

    impl Record for Row {
        fn field(&self, column: usize) -> Option<&[u8]> {
            match column {
                2 => Some(self.kind.as_bytes()),
                3 => Some(self.campaign.as_bytes()),
                4 => Some(self.site.as_bytes()),
                _ => None,
            }
        }

        fn value(&self, column: usize, _: ColumnType) -> Result<Value<'_>, ValueError> {
            Ok(match column {
                0 => Value::Time(Timestamp(i64::try_from(self.time_ms).expect("small"))),
                1 => Value::Int(self.user),
                5 => Value::Float(self.revenue),
                _ => self.field(column).map_or(Value::Null, Value::Text),
            })
        }
    }

    /// Records from generated tuples (minute, user, kind, campaign,
    /// input): every record at a distinct (input, offset).
    fn rows(tuples: &[(u16, u8, u8, u8, u8)]) -> Vec<Row> {
        tuples
            .iter()
            .enumerate()
            .map(|(i, &(minute, user, kind, campaign, input))| Row {
                time_ms: u64::from(minute) * MINUTE_MS,
                user: i64::from(user),
                kind: KINDS[usize::from(kind)],
                campaign: format!("c{campaign}"),
                site: format!("s{}", campaign % 3),
                revenue: f64::from(minute % 7) + 0.25,
                input: u32::from(input),
                offset: i as u64 * 100,
            })
            .collect()
    }

    /// A credit row with its codes resolved: codes depend on the order
    /// names were absorbed in, names do not.
    type Resolved = (
        u64,
        u32,
        u64,
        u32,
        u64,
        u64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        u64,
        Option<u64>,
    );

    fn resolved(credits: &Credits<'_>) -> Vec<Resolved> {
        credits
            .rows
            .iter()
            .map(|r| {
                (
                    r.conversion_ms,
                    r.input,
                    r.offset,
                    r.rank,
                    r.touch_ms,
                    r.user,
                    credits.names[0].name(r.campaign).map(<[u8]>::to_vec),
                    credits.names[1].name(r.site).map(<[u8]>::to_vec),
                    r.credit.to_bits(),
                    r.revenue.map(f64::to_bits),
                )
            })
            .collect()
    }

    /// What a sequence of releases added up to, per attribution, and the
    /// credit summaries' rollups they were folded into.
    struct Outcome {
        rows: Vec<Vec<Resolved>>,
        stats: Vec<Stats>,
        rollups: Vec<Rollup>,
    }

    struct Credited<'p> {
        summaries: Vec<&'p Summary>,
        shapes: Vec<Shape>,
    }

    impl<'p> Credited<'p> {
        fn new(plan: &'p Plan) -> Credited<'p> {
            let credit_streams: Vec<usize> =
                plan.attributions.iter().map(|a| a.credit_stream).collect();
            let summaries: Vec<&Summary> = plan
                .summaries
                .iter()
                .filter(|s| credit_streams.contains(&s.stream))
                .collect();
            let shapes = summaries
                .iter()
                .map(|s| crate::shape_of(s).expect("shape"))
                .collect();
            Credited { summaries, shapes }
        }
    }

    /// Absorbs `batches[b]` (each a list of (worker, row) in arrival
    /// order) and then releases at `frontiers[b]`, or `u64::MAX` after
    /// the last batch.
    fn stream(
        plan: &Plan,
        threads: usize,
        workers: usize,
        batches: &[Vec<(usize, Row)>],
        frontiers: &[u64],
    ) -> Outcome {
        assert_eq!(batches.len(), frontiers.len() + 1);
        let credited = Credited::new(plan);
        let mut rollups = credit_rollups(&credited.shapes, Limits::default()).expect("rollups");
        let mut setup = Setup::new(plan, 0, threads, None)
            .expect("setup")
            .expect("attributions");
        let mut collectors: Vec<Collector<'_>> = (0..workers).map(|_| setup.collector()).collect();
        let mut outcome = Outcome {
            rows: vec![Vec::new(); 2],
            stats: vec![Stats::default(); 2],
            rollups: Vec::new(),
        };
        let mut released = None;
        for (b, batch) in batches.iter().enumerate() {
            for (worker, row) in batch {
                collectors[*worker]
                    .observe(row, row.input, row.offset)
                    .expect("typed fields");
            }
            setup.absorb(&mut collectors);
            let frontier = frontiers.get(b).copied().unwrap_or(u64::MAX);
            let credits = setup.release(frontier).expect("release");
            fold_credits(
                &credits,
                &credited.summaries,
                &credited.shapes,
                &mut rollups,
            )
            .expect("fold");
            for (i, c) in credits.iter().enumerate() {
                // Without late events, a release credits only conversions
                // past the previous frontier and up to its own.
                if c.stats.late == 0 {
                    assert!(c.rows.iter().all(|r| r.conversion_ms <= frontier
                        && released.is_none_or(|f| r.conversion_ms > f)));
                }
                outcome.rows[i].extend(resolved(c));
                outcome.stats[i].add(&c.stats);
            }
            released = Some(frontier);
        }
        assert_eq!(setup.held_events(), 0);
        assert_eq!(
            setup.held_bytes(),
            0,
            "a release to the end frees the held events"
        );
        outcome.rollups = rollups;
        outcome
    }

    /// Everything absorbed from one worker in input order, released once.
    fn at_the_end(plan: &Plan, rows: &[Row]) -> Outcome {
        let batch = rows.iter().map(|r| (0, r.clone())).collect();
        stream(plan, 1, 1, &[batch], &[])
    }

    fn rollup_rows(rollups: &[Rollup]) -> Vec<String> {
        rollups.iter().map(|r| format!("{:?}", r.rows())).collect()
    }

    /// Increasing frontiers, in minutes, from arbitrary minutes.
    fn frontiers_ms(minutes: &[u16]) -> Vec<u64> {
        let mut minutes = minutes.to_vec();
        minutes.sort_unstable();
        minutes.dedup();
        minutes.iter().map(|&m| u64::from(m) * MINUTE_MS).collect()
    }

    fn config(seed: u64) -> ProptestConfig {
        ProptestConfig {
            cases: 96,
            rng_seed: RngSeed::Fixed(seed),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config(0x5eed_a771))]

        /// Batches from several workers, released at increasing frontiers
        /// with no event arriving at or before a frontier already
        /// released: the same credit rows, counts and credit rollups as
        /// one release at the end, on any number of shard groups.
        #[test]
        fn releases_in_order_equal_one_release(
            tuples in proptest::collection::vec(
                (0u16..6000, 0u8..12, 0u8..4, 0u8..6, 0u8..3), 0..400),
            choices in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u16>()), 400),
            frontier_minutes in proptest::collection::vec(0u16..6500, 0..6),
            threads in 1usize..9,
            workers in 1usize..4,
        ) {
            let plan = Plan::compile(SQL).expect("compiles");
            let rows = rows(&tuples);
            let frontiers = frontiers_ms(&frontier_minutes);
            // A record may arrive in any batch up to the one released at
            // the first frontier at or past its time.
            let mut batches: Vec<Vec<(u16, usize, Row)>> = vec![Vec::new(); frontiers.len() + 1];
            for (row, &(batch, worker, arrival)) in rows.iter().zip(&choices) {
                let due = frontiers.partition_point(|&f| f < row.time_ms);
                let b = usize::from(batch) % (due + 1);
                batches[b].push((arrival, usize::from(worker) % workers, row.clone()));
            }
            let batches: Vec<Vec<(usize, Row)>> = batches
                .into_iter()
                .map(|mut batch| {
                    batch.sort_by_key(|(arrival, _, _)| *arrival);
                    batch.into_iter().map(|(_, w, r)| (w, r)).collect()
                })
                .collect();
            let streamed = stream(&plan, threads, workers, &batches, &frontiers);
            let reference = at_the_end(&plan, &rows);
            prop_assert_eq!(&streamed.rows, &reference.rows);
            prop_assert_eq!(&streamed.stats, &reference.stats);
            prop_assert_eq!(streamed.stats[0].late + streamed.stats[1].late, 0);
            prop_assert_eq!(rollup_rows(&streamed.rollups), rollup_rows(&reference.rollups));
        }

        /// Batches in any order of time: every event at or before a
        /// frontier already released is counted late, and every touch
        /// and conversion absorbed is applied.
        #[test]
        fn late_events_are_counted_and_applied(
            tuples in proptest::collection::vec(
                (0u16..6000, 0u8..12, 0u8..4, 0u8..6, 0u8..3), 0..400),
            choices in proptest::collection::vec((any::<u8>(), any::<u8>()), 400),
            frontier_minutes in proptest::collection::vec(0u16..6500, 0..6),
            threads in 1usize..9,
            workers in 1usize..4,
        ) {
            let plan = Plan::compile(SQL).expect("compiles");
            let rows = rows(&tuples);
            let frontiers = frontiers_ms(&frontier_minutes);
            let mut batches: Vec<Vec<(usize, Row)>> = vec![Vec::new(); frontiers.len() + 1];
            let mut late = 0u64;
            for (row, &(batch, worker)) in rows.iter().zip(&choices) {
                let b = usize::from(batch) % batches.len();
                // Batch b is absorbed after the releases at frontiers[..b].
                if b > 0 && row.time_ms <= frontiers[b - 1] {
                    late += 1;
                }
                batches[b].push((usize::from(worker) % workers, row.clone()));
            }
            let streamed = stream(&plan, threads, workers, &batches, &frontiers);
            let count = |kinds: &[&str]| rows.iter().filter(|r| kinds.contains(&r.kind)).count() as u64;
            let [lin, last] = [streamed.stats[0], streamed.stats[1]];
            prop_assert_eq!(lin.touches, count(&["click"]));
            prop_assert_eq!(last.touches, count(&["click", "view"]));
            prop_assert_eq!(lin.conversions, count(&["conversion"]));
            prop_assert_eq!(last.conversions, count(&["conversion"]));
            // Each attribution sees the late records it matches.
            let late_matched = |kinds: &[&str]| {
                let mut n = 0u64;
                for (b, batch) in batches.iter().enumerate().skip(1) {
                    n += batch
                        .iter()
                        .filter(|(_, r)| kinds.contains(&r.kind) && r.time_ms <= frontiers[b - 1])
                        .count() as u64;
                }
                n
            };
            prop_assert_eq!(lin.late, late_matched(&["click", "conversion"]));
            prop_assert_eq!(last.late, late_matched(&["click", "view", "conversion"]));
            prop_assert_eq!(last.late, late);
            prop_assert_eq!(lin.skipped + last.skipped, 0);
        }
    }

    /// Credits leave as the frontier passes their conversions, while the
    /// events past it stay held and counted.
    #[test]
    fn credits_flow_before_the_end() {
        let plan = Plan::compile(SQL).expect("compiles");
        let hour = 60;
        let tuples = [
            (hour, 1, 0, 1, 0),     // click
            (2 * hour, 1, 2, 0, 0), // conversion: credits the click
            (3 * hour, 2, 0, 2, 0), // click
            (5 * hour, 2, 2, 0, 0), // conversion, past the first frontier
        ];
        let rows = rows(&tuples);
        let mut setup = Setup::new(&plan, 0, 2, None).expect("setup").expect("some");
        let mut collectors = vec![setup.collector()];
        for r in &rows {
            collectors[0].observe(r, r.input, r.offset).expect("typed");
        }
        setup.absorb(&mut collectors);
        assert_eq!(setup.held_events(), 8, "four records, two attributions");
        let credits = setup.release(4 * 60 * MINUTE_MS).expect("release");
        assert_eq!(credits[0].rows.len(), 1);
        assert_eq!(credits[0].rows[0].conversion_ms, 2 * 60 * MINUTE_MS);
        assert_eq!(
            (credits[0].stats.touches, credits[0].stats.conversions),
            (2, 1)
        );
        assert_eq!(setup.held_events(), 2, "each attribution's last conversion");
        assert!(setup.held_bytes() >= 2 * EVENT_BYTES);
        // A late click, before the released frontier: applied at the next
        // release and counted, before the held conversion it precedes.
        collectors[0]
            .observe(
                &Row {
                    time_ms: 4 * 60 * MINUTE_MS - 1,
                    ..rows[2].clone()
                },
                1,
                0,
            )
            .expect("typed");
        setup.absorb(&mut collectors);
        let credits = setup.release(u64::MAX).expect("release");
        assert_eq!(credits[0].stats.late, 1);
        assert_eq!(
            credits[0].rows.len(),
            2,
            "the conversion credits both clicks"
        );
        assert_eq!(setup.held_events(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 48,
            rng_seed: RngSeed::Fixed(0x1a6e_0001),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The attributions' image: encode -> restore -> encode is the
        /// identity, a restored setup releases exactly what the original
        /// does, and every truncation and sampled byte flip is refused.
        #[test]
        fn the_attribution_image_round_trips_and_refuses_damage(
            tuples in prop::collection::vec((0u16..600, 0u8..12, 0u8..4, 0u8..9, 0u8..3), 0..120),
            frontier_minute in 0u64..600,
            threads in 1usize..5,
        ) {
            let plan = Plan::compile(SQL).expect("compiles");
            let rows = rows(&tuples);
            let fresh = || Setup::new(&plan, 0, threads, None).expect("setup").expect("attributions");
            let mut setup = fresh();
            let mut collector = setup.collector();
            for row in &rows {
                collector.observe(row, row.input, row.offset).expect("typed");
            }
            setup.absorb(std::slice::from_mut(&mut collector));
            setup.release(frontier_minute * MINUTE_MS).expect("release");
            let mut image = Vec::new();
            setup.encode_state(&mut image).expect("encode");
            let mut restored = fresh();
            restored.restore_state(&image).expect("restore");
            let mut again = Vec::new();
            restored.encode_state(&mut again).expect("encode");
            prop_assert_eq!(&again, &image);
            // Both go on alike.
            let a: Vec<Vec<Resolved>> = setup.release(u64::MAX).expect("release").iter().map(resolved).collect();
            let b: Vec<Vec<Resolved>> = restored.release(u64::MAX).expect("release").iter().map(resolved).collect();
            prop_assert_eq!(a, b);
            for cut in (0..image.len()).step_by(image.len() / 61 + 1) {
                prop_assert!(fresh().restore_state(&image[..cut]).is_err(), "cut at {}", cut);
            }
            for at in (0..image.len()).step_by(image.len() / 61 + 1) {
                let mut damaged = image.clone();
                damaged[at] ^= 0x20;
                prop_assert!(fresh().restore_state(&damaged).is_err(), "flip at {}", at);
            }
        }
    }
}
