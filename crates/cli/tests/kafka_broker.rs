//! The Kafka test harness against a real broker, and the librdkafka calls
//! a Kafka source is built on, each checked once: a read_committed
//! `BaseConsumer` on explicitly assigned partitions and offsets (no group
//! membership) skips aborted transactions; pause and resume; offsets
//! committed with metadata strings and read back; watermarks and the last
//! stable offset of an open transaction; and an offset deleted by
//! retention reported as an error under `auto.offset.reset=error`, never
//! skipped silently, then recovered from by re-assigning that partition
//! alone (`incremental_unassign` and `incremental_assign`).
//!
//! Needs a broker: `CARDINAL_KAFKA=HOST:PORT` or `CARDINAL_KAFKA=start`
//! (see tests/common/kafka.rs); skips without one unless
//! `CARDINAL_REQUIRE_KAFKA=1`.

#[path = "common/kafka.rs"]
mod kafka;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka::{Broker, End, POLL_INTERVAL, READ_TIMEOUT, Transaction, numbered, read_to_end};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

/// The partition count of the source's topics in the benchmarks.
const PARTITIONS: i32 = 6;

/// A short fetch back-off: with the default (1 s) a consumer that has
/// caught up waits up to a second before it fetches again, which is a
/// second of added latency per record batch in a test.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// How long a question to the broker (positions, commits) may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The values read, by partition, without offsets.
fn values(read: &BTreeMap<i32, Vec<(i64, Vec<u8>)>>) -> BTreeMap<i32, Vec<String>> {
    read.iter()
        .map(|(p, records)| {
            let values = records
                .iter()
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .collect();
            (*p, values)
        })
        .collect()
}

/// `tags` concatenated per partition, as [`numbered`] writes them.
fn expected(tags: &[(&str, usize)], partitions: &[i32]) -> BTreeMap<i32, Vec<String>> {
    partitions
        .iter()
        .map(|p| {
            let values = tags
                .iter()
                .flat_map(|(tag, count)| (0..*count).map(move |n| format!("{tag}-p{p}-{n}")))
                .collect();
            (*p, values)
        })
        .collect()
}

fn assign_from(consumer: &BaseConsumer, topic: &str, offsets: &[(i32, i64)]) {
    let mut assignment = TopicPartitionList::new();
    for (partition, offset) in offsets {
        assignment
            .add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .expect("an assignment");
    }
    consumer.assign(&assignment).expect("assign");
}

fn partition_list(topic: &str, partitions: &[i32]) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for partition in partitions {
        list.add_partition(topic, *partition);
    }
    list
}

#[test]
fn read_committed_assign_pause_commit_metadata_and_out_of_range() {
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let topic = kafka::unique_name("kafka-smoke");
    broker.create_topic(&topic, PARTITIONS);

    // Per partition: 2 plain records (offsets 0-1), a committed transaction
    // of 3 (2-4) and its marker (5), an aborted one of 4 (6-9) and its
    // marker (10), a committed one of 2 (11-12) and its marker (13).
    broker.produce(&topic, &numbered("plain", PARTITIONS, 2));
    broker.produce_transactions(
        &topic,
        &[
            Transaction {
                records: numbered("commit1", PARTITIONS, 3),
                end: End::Commit,
            },
            Transaction {
                records: numbered("abort", PARTITIONS, 4),
                end: End::Abort,
            },
            Transaction {
                records: numbered("commit2", PARTITIONS, 2),
                end: End::Commit,
            },
        ],
    );
    for &p in &all {
        assert_eq!(
            broker.watermarks(&topic, p),
            (0, 14),
            "watermarks of partition {p}: every offset counts, aborted records and markers too"
        );
    }

    // read_committed from explicit offsets: partition 5 from offset 2.
    let group = kafka::unique_name("kafka-smoke-group");
    let consumer = broker.consumer(
        &group,
        &[("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)],
    );
    let mut starts: Vec<(i32, i64)> = all.iter().map(|&p| (p, 0)).collect();
    starts[5].1 = 2;
    assign_from(&consumer, &topic, &starts);
    let read = read_to_end(&consumer, &all);
    let mut want = expected(&[("plain", 2), ("commit1", 3), ("commit2", 2)], &all[..5]);
    want.extend(expected(&[("commit1", 3), ("commit2", 2)], &[5]));
    assert_eq!(
        values(&read),
        want,
        "read_committed skips the aborted transaction"
    );
    let offsets: Vec<i64> = read[&0].iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4, 11, 12], "offsets of partition 0");
    // After the last record (offset 12) the position is the offset past the
    // final commit marker: the high watermark, so "lag = high watermark -
    // position" reaches 0 when a transactional partition is read to its end.
    //
    // A list librdkafka returns (position, committed_offsets) holds
    // references to the consumer's partitions: the consumer's destroy
    // waits for them, forever if the list outlives it. Drop such lists
    // before the consumer (here: at the end of this block).
    {
        let position = consumer.position().expect("position");
        for &p in &all {
            let element = position
                .find_partition(&topic, p)
                .expect("an assigned partition");
            assert_eq!(
                element.offset(),
                Offset::Offset(14),
                "position of partition {p} at its end"
            );
        }
    }

    // Pause partition 0, write one more committed transaction everywhere:
    // only the other partitions deliver it, until partition 0 resumes.
    consumer
        .pause(&partition_list(&topic, &[0]))
        .expect("pause");
    broker.produce_transactions(
        &topic,
        &[Transaction {
            records: numbered("commit3", PARTITIONS, 1),
            end: End::Commit,
        }],
    );
    let others = read_to_end(&consumer, &all[1..]);
    assert!(
        !others.contains_key(&0),
        "a paused partition delivers nothing: {others:?}"
    );
    assert_eq!(values(&others), expected(&[("commit3", 1)], &all[1..]));
    consumer
        .resume(&partition_list(&topic, &[0]))
        .expect("resume");
    let first = read_to_end(&consumer, &[0]);
    assert_eq!(
        first[&0],
        [(14, b"commit3-p0-0".to_vec())],
        "partition 0 after resume"
    );

    // Commit positions with a metadata string each, synchronously, then
    // read them back twice: through this consumer and through another
    // client of the same group (what a restarted node does).
    let mut commit = TopicPartitionList::new();
    for &p in &all {
        let mut element = commit.add_partition(&topic, p);
        element.set_offset(Offset::Offset(16)).expect("an offset");
        element.set_metadata(format!("node=0/2 epoch=7 partition={p}"));
    }
    consumer
        .commit(&commit, CommitMode::Sync)
        .expect("commit with metadata");
    {
        let back = consumer
            .committed_offsets(partition_list(&topic, &all), ANSWER_TIMEOUT)
            .expect("committed_offsets");
        for &p in &all {
            let element = back
                .find_partition(&topic, p)
                .expect("a committed partition");
            assert_eq!(element.offset(), Offset::Offset(16));
            assert_eq!(
                element.metadata(),
                format!("node=0/2 epoch=7 partition={p}")
            );
        }
    }
    let committed = broker.committed(&group, &topic, PARTITIONS);
    assert_eq!(committed.len(), all.len());
    for entry in &committed {
        assert_eq!(entry.offset, Some(16), "{entry:?}");
        assert_eq!(
            entry.metadata,
            format!("node=0/2 epoch=7 partition={}", entry.partition)
        );
    }
    let never = broker.committed(&kafka::unique_name("kafka-smoke-never"), &topic, PARTITIONS);
    assert!(
        never
            .iter()
            .all(|c| c.offset.is_none() && c.metadata.is_empty()),
        "{never:?}"
    );
    kafka::close(consumer);

    // Retention deletes partition 1 below offset 5; a consumer that wants
    // offset 0 there gets an error (auto.offset.reset=error), while
    // partition 2 keeps delivering.
    assert_eq!(broker.delete_records(&topic, 1, 5), 5, "new low watermark");
    assert_eq!(broker.watermarks(&topic, 1), (5, 16));
    let late = broker.consumer(
        &kafka::unique_name("kafka-smoke-late"),
        &[("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)],
    );
    assign_from(&late, &topic, &[(1, 0), (2, 0)]);
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut partition_2 = 0;
    let error = loop {
        assert!(
            Instant::now() < deadline,
            "no out-of-range error within {READ_TIMEOUT:?}"
        );
        match late.poll(POLL_INTERVAL) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Ok(message)) => {
                assert_eq!(
                    message.partition(),
                    2,
                    "partition 1 delivers nothing below its low watermark"
                );
                partition_2 += 1;
            }
            Some(Err(e)) => break e,
        }
    };
    eprintln!(
        "out of range: Display {error}; Debug {error:?}; partition 2 records so far {partition_2}"
    );
    assert_eq!(
        error,
        KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset),
        "the error names no partition: find it by comparing positions with low watermarks"
    );
    // The other partition keeps delivering, and the failed one stays put:
    // no second error, no records, its position unchanged. The error does
    // not say which partition failed: the low watermarks do.
    let mut errors_after = Vec::new();
    let mut partition_2_ended = false;
    while !partition_2_ended {
        assert!(
            Instant::now() < deadline,
            "partition 2 not read to its end within {READ_TIMEOUT:?}"
        );
        match late.poll(POLL_INTERVAL) {
            None => {}
            Some(Ok(message)) => {
                assert_eq!(message.partition(), 2);
                partition_2 += 1;
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => partition_2_ended |= partition == 2,
            Some(Err(e)) => errors_after.push(e),
        }
    }
    {
        let position = late.position().expect("position");
        let of = |p| position.find_partition(&topic, p).map(|e| e.offset());
        eprintln!(
            "after the error: position of partition 1 {:?}, of partition 2 {:?}; later errors {errors_after:?}",
            of(1),
            of(2)
        );
        assert_eq!(
            partition_2, 8,
            "partition 2: 2 plain and 6 committed records"
        );
        assert_eq!(of(2), Some(Offset::Offset(16)));
    }
    let (low, _) = broker.watermarks(&topic, 1);
    assert_eq!(low, 5);
    // `seek_partitions` cannot move a partition out of this state (it
    // answers "Local: Erroneous state"); taking the partition out of the
    // assignment and adding it back at the low watermark, the rest of the
    // assignment untouched, reads what is left.
    {
        let mut seek = TopicPartitionList::new();
        seek.add_partition_offset(&topic, 1, Offset::Offset(low))
            .expect("a seek");
        let sought = late
            .seek_partitions(seek, ANSWER_TIMEOUT)
            .expect("seek_partitions");
        let error = sought.elements()[0]
            .error()
            .expect_err("seek of a failed partition");
        assert_eq!(
            error,
            KafkaError::OffsetFetch(RDKafkaErrorCode::State),
            "{error}"
        );
    }
    late.incremental_unassign(&partition_list(&topic, &[1]))
        .expect("incremental_unassign");
    let mut again = TopicPartitionList::new();
    again
        .add_partition_offset(&topic, 1, Offset::Offset(low))
        .expect("an assignment");
    late.incremental_assign(&again).expect("incremental_assign");
    {
        let assignment = late.assignment().expect("assignment");
        let mut assigned: Vec<i32> = assignment
            .elements()
            .iter()
            .map(|e| e.partition())
            .collect();
        assigned.sort_unstable();
        assert_eq!(assigned, [1, 2], "partition 2 stayed assigned");
    }
    let rest = read_to_end(&late, &[1]);
    assert!(
        !rest.contains_key(&2),
        "partition 2 is not read again: {rest:?}"
    );
    let offsets: Vec<i64> = rest[&1].iter().map(|(o, _)| *o).collect();
    assert_eq!(
        offsets,
        [11, 12, 14],
        "partition 1 from its low watermark (5)"
    );
    kafka::close(late);
}

/// An open transaction holds read_committed consumers at its first offset
/// (the last stable offset), below the high watermark, until it ends.
/// `fetch_watermarks` on a read_committed client (librdkafka's default)
/// answers that last stable offset as its "high" watermark, so "high -
/// position" is 0 while the consumer waits; a read_uncommitted client
/// answers the true high watermark.
#[test]
fn open_transaction_holds_read_committed_below_high_watermark() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let Some(broker) = Broker::from_env() else {
        return;
    };
    let topic = kafka::unique_name("kafka-open-tx");
    broker.create_topic(&topic, 1);
    broker.produce(&topic, &numbered("plain", 1, 2));
    let producer: BaseProducer = broker
        .config()
        .set("transactional.id", kafka::unique_name("kafka-open-tx-id"))
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(ANSWER_TIMEOUT)
        .expect("init_transactions");
    producer.begin_transaction().expect("begin_transaction");
    for n in 0..3 {
        let value = format!("open-{n}");
        producer
            .send(
                BaseRecord::<(), str>::to(&topic)
                    .partition(0)
                    .payload(&value),
            )
            .expect("send");
    }
    producer.flush(ANSWER_TIMEOUT).expect("flush");
    assert_eq!(
        broker.watermarks(&topic, 0),
        (0, 2),
        "the last stable offset"
    );
    assert_eq!(broker.watermarks_uncommitted(&topic, 0), (0, 5));

    let consumer = broker.consumer(
        &kafka::unique_name("kafka-open-tx-group"),
        &[("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)],
    );
    assign_from(&consumer, &topic, &[(0, 0)]);
    let read = read_to_end(&consumer, &[0]);
    assert_eq!(values(&read), expected(&[("plain", 2)], &[0]));
    {
        let position = consumer.position().expect("position");
        let at = position.find_partition(&topic, 0).map(|e| e.offset());
        assert_eq!(
            at,
            Some(Offset::Offset(2)),
            "held at the last stable offset"
        );
    }

    producer
        .commit_transaction(ANSWER_TIMEOUT)
        .expect("commit_transaction");
    let read = read_to_end(&consumer, &[0]);
    let offsets: Vec<i64> = read[&0].iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, [2, 3, 4]);
    {
        let position = consumer.position().expect("position");
        let at = position.find_partition(&topic, 0).map(|e| e.offset());
        assert_eq!(at, Some(Offset::Offset(6)), "past the commit marker");
    }
    assert_eq!(broker.watermarks(&topic, 0), (0, 6));
    assert_eq!(broker.watermarks_uncommitted(&topic, 0), (0, 6));
    kafka::close(consumer);
}
