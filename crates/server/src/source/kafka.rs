//! The Kafka source: a pull source (module doc of `source`). Each node
//! reads the partitions it is assigned, folds them, and keeps each
//! partition's next offset in its own snapshots; Kafka keeps and
//! replicates the records.
//!
//! ```text
//!  consumer thread (one per node)                watcher thread (one per node)
//!   poll ── message ──► its partition's batch     every WATCH_EVERY: watermarks (lag),
//!    a batch of BATCH_BYTES_TARGET, or the          broker state; after each snapshot:
//!    poll idle, or FLUSH_EVERY passed:              the fence checked, then the offsets
//!    ──► Service::offer_pulled(partition,           the snapshot covers committed (lag
//!         next offset, bytes)                       display only, never read back)
//!    full: the batch is held, the partition
//!    paused; offered again, then resumed
//! ```
//!
//! **Exactly once.** A batch's position is its partition and the offset
//! after its last message. The service keeps, per engine, which batch
//! carried which position; a snapshot saves, in the stream's own section,
//! each partition's next offset as of the same batch boundary as the
//! engine images ([`crate::source::Offsets`]). A start seeks every owned
//! partition to its snapshot's offset (the earliest retained one for a
//! partition never saved) and folds from there: what the images hold is
//! never read again, and nothing after them is skipped. The consumer uses
//! `isolation.level=read_committed`, so records of aborted transactions
//! are never counted, and `auto.offset.reset=error`, so an offset the
//! broker no longer holds (deleted by retention) stops the node naming
//! the partition and the missing offsets instead of skipping them.
//!
//! **Batches, not messages** (SAMZA-245): librdkafka fetches ahead into
//! one queue bounded by [`PREFETCH_KBYTES`]; the consumer thread takes
//! messages one by one from it (a function call each, no loop over
//! partitions) into per-partition batches. A full engine holds a batch
//! back and pauses its partition, so a slow fold stops fetching instead
//! of filling memory: at most one batch being built and one held per
//! partition, plus the prefetch queue and the engine's bounded queues.
//!
//! **Ownership and fencing.** Partitions are assigned statically (`--node
//! I/N`: partition p belongs to node p mod N; or `--partitions`), never
//! by a consumer-group rebalance. Two nodes started for one partition by
//! mistake are caught by a fencing epoch kept in the metadata of the
//! group's committed offsets: a start reads it, takes the next epoch with
//! a random instance id, and commits it; the watcher checks before each
//! commit that the epoch is still its own, and fails the node naming the
//! other instance when it is not (and cluster queries refuse answers in
//! which two nodes cover one partition).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::service::{Offer, Service};
use crate::source::Pull;

/// The bytes a partition's batch is handed to the engine at: 1 MiB, the
/// engine's chunk size, so one batch is one chunk of work for a worker
/// (bigger batches only delay freshness; smaller ones cost a queue slot
/// and a hand-over each).
pub const BATCH_BYTES_TARGET: usize = 1 << 20;

/// How long a partly built batch may wait for more messages before it is
/// offered anyway: 50 ms, so a record is folded well inside the 1 s
/// freshness goal even on a slow topic.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// How often a held batch is offered again while the engine is full.
pub const RETRY_FULL_EVERY: Duration = Duration::from_millis(5);

/// librdkafka's prefetch queue, in KiB (`queued.max.messages.kbytes`): 32
/// MiB for all partitions together (the high-level consumer keeps one
/// queue), enough to keep a worker busy while a fetch is in flight, and a
/// bound on what a node holds from the broker beyond its batches.
pub const PREFETCH_KBYTES: u32 = 32 << 10;

/// The most bytes one fetch response brings (`fetch.max.bytes`): 16 MiB,
/// several batches of every partition per round trip on loopback, and a
/// third of librdkafka's default, so a node's memory beside its state is
/// this, the prefetch queue and the engine's queues.
pub const FETCH_BYTES_MAX: u32 = 16 << 20;

/// How old a partition's watermarks may be for its lag to be shown: three
/// watcher rounds. Older (the broker away or slow), the lag is not known,
/// and `/metrics` leaves it out rather than show a stale 0.
pub const WATERMARKS_FRESH: Duration = Duration::from_secs(3);

impl PartitionStats {
    /// The high watermark less where reading stands, when the watermarks
    /// are fresh ([`WATERMARKS_FRESH`]).
    pub fn lag(&self) -> Option<i64> {
        let (_, high, at) = self.watermarks?;
        (at.elapsed() <= WATERMARKS_FRESH).then(|| (high - self.read).max(0))
    }
}

/// The highest partition number `--partitions` takes, plus one: 65,536,
/// far past what one topic holds in practice (Kafka advises thousands per
/// broker), and a bound on the set a range makes.
pub const PARTITIONS_MAX: i32 = 1 << 16;

/// How often the watcher reads the partitions' watermarks for the lag.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The longest a call to the broker may take before the node says the
/// broker is away (it keeps trying).
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The consumer group whose committed offsets show lag and hold the
/// fence when none is given: `cardinal-<topic>`.
pub fn default_group(topic: &str) -> String {
    format!("cardinal-{topic}")
}

/// Which partitions a node reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assignment {
    /// `--node I/N`: partition p belongs to node p mod N.
    Node {
        /// This node, from 0.
        index: u32,
        /// How many nodes share the topics.
        count: u32,
    },
    /// `--partitions LIST`: these partitions.
    Partitions(BTreeSet<i32>),
}

impl Assignment {
    /// Parses `I/N` (`0/2`), with I < N.
    pub fn node(text: &str) -> Result<Assignment> {
        let (index, count) = text
            .split_once('/')
            .with_context(|| format!("--node {text}: expected I/N, such as 0/2"))?;
        let index: u32 = index
            .trim()
            .parse()
            .with_context(|| format!("--node {text}: I is not a number"))?;
        let count: u32 = count
            .trim()
            .parse()
            .with_context(|| format!("--node {text}: N is not a number"))?;
        ensure!(
            count >= 1 && index < count,
            "--node {text}: I must be below N (nodes are numbered from 0)"
        );
        Ok(Assignment::Node { index, count })
    }

    /// Parses a list of partitions and ranges: `0,2,4-7`.
    pub fn partitions(text: &str) -> Result<Assignment> {
        let mut set = BTreeSet::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("--partitions {text}: {part} is not a partition or a range a-b");
            match part.split_once('-') {
                Some((a, b)) => {
                    let a: i32 = a.trim().parse().with_context(bad)?;
                    let b: i32 = b.trim().parse().with_context(bad)?;
                    ensure!(0 <= a && a <= b, "{}", bad());
                    ensure!(
                        b < PARTITIONS_MAX,
                        "--partitions {text}: partition {b} is past the limit of {PARTITIONS_MAX}"
                    );
                    set.extend(a..=b);
                }
                None => {
                    let p: i32 = part.parse().with_context(bad)?;
                    ensure!(p >= 0, "{}", bad());
                    ensure!(
                        p < PARTITIONS_MAX,
                        "--partitions {text}: partition {p} is past the limit of {PARTITIONS_MAX}"
                    );
                    set.insert(p);
                }
            }
        }
        ensure!(!set.is_empty(), "--partitions {text}: no partition");
        Ok(Assignment::Partitions(set))
    }

    /// The partitions of a topic of `count` partitions this node owns.
    pub fn owned(&self, topic: &str, count: i32) -> Result<BTreeSet<i32>> {
        Ok(match self {
            Assignment::Node { index, count: n } => (0..count)
                .filter(|p| u32::try_from(*p).is_ok_and(|p| p % n == *index))
                .collect(),
            Assignment::Partitions(set) => {
                let outside: Vec<String> = set
                    .iter()
                    .filter(|&&p| p >= count)
                    .map(ToString::to_string)
                    .collect();
                ensure!(
                    outside.is_empty(),
                    "--partitions names {} of topic {topic}, which has {count} partitions \
                     (0 to {})",
                    outside.join(", "),
                    count - 1
                );
                set.clone()
            }
        })
    }

    /// In words: `node 0 of 2` or `partitions 0, 2`.
    pub fn describe(&self) -> String {
        match self {
            Assignment::Node { index, count } => format!("node {index} of {count}"),
            Assignment::Partitions(set) => format!(
                "partitions {}",
                set.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// How a node reads Kafka (`serve --kafka ...`).
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// Per stream fed from Kafka, its topic (`--kafka-topic STREAM=TOPIC`).
    pub topics: Vec<(String, String)>,
    /// Which partitions this node reads.
    pub assignment: Assignment,
    /// The consumer group for committed offsets, or `cardinal-<topic>`.
    pub group: Option<String>,
    /// How long a start waits for the broker before it gives up.
    pub start_wait: Duration,
}

/// `STREAM=TOPIC`, as `--kafka-topic` takes it.
pub fn topic_arg(text: &str) -> Result<(String, String)> {
    let (stream, topic) = text
        .split_once('=')
        .with_context(|| format!("--kafka-topic {text}: expected STREAM=TOPIC"))?;
    let (stream, topic) = (stream.trim(), topic.trim());
    ensure!(
        !stream.is_empty() && !topic.is_empty(),
        "--kafka-topic {text}: expected STREAM=TOPIC"
    );
    // Kafka's own rule for topic names.
    ensure!(
        topic.len() <= 249
            && topic
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
        "--kafka-topic {text}: a topic name is at most 249 letters, digits, '.', '_' or '-'"
    );
    Ok((stream.to_owned(), topic.to_owned()))
}

fn client_config(brokers: &str, group: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        // librdkafka otherwise backs off a second once its queue is full.
        .set("fetch.queue.backoff.ms", "1")
        .set("queued.max.messages.kbytes", PREFETCH_KBYTES.to_string())
        // One fetch response in memory at a time is at most this (the
        // default is 50 MiB); a message larger than it still arrives.
        .set("fetch.max.bytes", FETCH_BYTES_MAX.to_string())
        .set("socket.timeout.ms", "10000")
        .set("log_level", "3");
    config
}

/// A consumer of `group` on `brokers`, with the settings above.
fn consumer(brokers: &str, group: &str) -> Result<BaseConsumer> {
    client_config(brokers, group)
        .create()
        .context("creating a Kafka consumer")
}

/// The pull plans of a start: per stream, its topic, partition count and
/// owned partitions, read from the broker's metadata (waiting for the
/// broker up to `start_wait`).
pub fn resolve(config: &KafkaConfig) -> Result<BTreeMap<String, Pull>> {
    let mut pulled = BTreeMap::new();
    let deadline = Instant::now() + config.start_wait;
    for (stream, topic) in &config.topics {
        let group = config.group.clone().unwrap_or_else(|| default_group(topic));
        let consumer = consumer(&config.brokers, &group)?;
        let count = loop {
            match consumer.fetch_metadata(Some(topic), BROKER_TIMEOUT) {
                Ok(metadata) => {
                    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
                        bail!("the broker has no topic {topic}")
                    };
                    if let Some(error) = found.error() {
                        bail!(
                            "Kafka topic {topic} (--kafka-topic {stream}={topic}): {error:?}; \
                             create it first (docs/kafka.md)"
                        );
                    }
                    let count = i32::try_from(found.partitions().len())
                        .context("a topic of more than 2^31 partitions")?;
                    ensure!(count > 0, "Kafka topic {topic} has no partitions");
                    break count;
                }
                Err(error) if Instant::now() < deadline => {
                    eprintln!(
                        "cardinal serve: waiting for the Kafka broker {}: {error}",
                        config.brokers
                    );
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(error) => bail!(
                    "the Kafka broker {} did not answer within {} s: {error}",
                    config.brokers,
                    config.start_wait.as_secs()
                ),
            }
        };
        let partitions = config.assignment.owned(topic, count)?;
        ensure!(
            !partitions.is_empty(),
            "{} owns no partition of topic {topic}, which has {count}",
            config.assignment.describe()
        );
        pulled.insert(
            stream.clone(),
            Pull {
                topic: topic.clone(),
                partitions,
                partition_count: count,
            },
        );
    }
    Ok(pulled)
}

/// The fencing metadata committed with the offsets: `cardinal epoch=E
/// instance=X node=D`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    epoch: u64,
    instance: String,
    node: String,
}

impl Fence {
    fn text(&self) -> String {
        format!(
            "cardinal epoch={} instance={} node={}",
            self.epoch, self.instance, self.node
        )
    }

    fn parse(text: &str) -> Option<Fence> {
        let rest = text.strip_prefix("cardinal ")?;
        let mut epoch = None;
        let mut instance = None;
        let mut node = None;
        for field in rest.split(' ') {
            match field.split_once('=') {
                Some(("epoch", v)) => epoch = v.parse().ok(),
                Some(("instance", v)) => instance = Some(v.to_owned()),
                Some(("node", v)) => node = Some(v.to_owned()),
                _ => {}
            }
        }
        Some(Fence {
            epoch: epoch?,
            instance: instance?,
            node: node.unwrap_or_default(),
        })
    }
}

/// Per partition, what `/metrics` shows.
#[derive(Debug, Clone, Default)]
pub struct PartitionStats {
    /// The next offset handed to the engine.
    pub read: i64,
    /// The next offset the last snapshot covers.
    pub covered: i64,
    /// The partition's low and high watermarks, as last read, and when
    /// (`None` until the broker has told them: no lag is shown before).
    pub watermarks: Option<(i64, i64, Instant)>,
    /// Whether the partition is paused (its engine full).
    pub paused: bool,
}

/// What the Kafka source reports: per partition offsets and lag, errors
/// by kind, the broker's state.
#[derive(Debug, Default)]
pub struct Stats {
    /// Per (topic, partition).
    pub partitions: Mutex<BTreeMap<(String, i32), PartitionStats>>,
    /// Consumer errors by kind (librdkafka's error name).
    pub errors: Mutex<BTreeMap<String, u64>>,
    /// Why the broker is away, while it is (`None`: connected).
    pub broker_away: Mutex<Option<String>>,
    /// Messages handed to engines.
    pub messages: AtomicU64,
    /// Bytes handed to engines.
    pub bytes: AtomicU64,
    /// Batches held back because an engine was full.
    pub batches_held: AtomicU64,
    /// Offset commits that failed (the next snapshot commits again).
    pub commit_failures: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stats {
    fn error(&self, kind: &str) {
        *lock(&self.errors).entry(kind.to_owned()).or_default() += 1;
    }
}

/// The running source: its two threads, stopped by [`Kafka::stop`].
#[derive(Debug)]
pub struct Kafka {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// What `/metrics` and `/healthz` show.
    pub stats: Arc<Stats>,
}

/// Gives the service in use now (the edge swaps it after an in-process
/// recovery).
pub type Current = Arc<dyn Fn() -> Arc<Service> + Send + Sync>;

impl Kafka {
    /// Fences the owned partitions, then starts the consumer and the
    /// watcher. `service` must have been opened with the plans
    /// [`resolve`] gave.
    pub fn start(config: &KafkaConfig, current: Current, stats: Arc<Stats>) -> Result<Kafka> {
        let service = current();
        let instance = format!("{:016x}", random_u64());
        let node = config.assignment.describe().replace(' ', "-");
        let mut fences = Vec::new();
        for (stream, topic) in &config.topics {
            let (index, pull) = service
                .pulled(stream)
                .with_context(|| format!("stream {stream} is not fed from Kafka"))?;
            let group = config.group.clone().unwrap_or_else(|| default_group(topic));
            // The watcher's consumer checks retention and claims the fence
            // now, and commits after each snapshot later. Retention first:
            // a start refused for lost records takes no fence.
            let watcher = consumer(&config.brokers, &group)?;
            let covered = service.covered_offsets(index);
            let lost = gaps(&watcher, pull, &covered)?;
            ensure!(lost.is_empty(), "{}", describe_gaps(&pull.topic, &lost));
            let fence = claim(&watcher, pull, &covered, &instance, &node)?;
            fences.push((stream.clone(), group, fence, watcher));
        }
        drop(service);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (stream, group, fence, watcher) in fences {
            let reader = Reader {
                consumer: consumer(&config.brokers, &group)?,
                stream: stream.clone(),
                current: Arc::clone(&current),
                stats: Arc::clone(&stats),
                stop: Arc::clone(&stop),
            };
            threads.push(
                std::thread::Builder::new()
                    .name("kafka".into())
                    .spawn(move || reader.run())
                    .context("starting the Kafka consumer thread")?,
            );
            let watch = Watcher {
                consumer: watcher,
                stream,
                fence,
                current: Arc::clone(&current),
                stats: Arc::clone(&stats),
                stop: Arc::clone(&stop),
            };
            threads.push(
                std::thread::Builder::new()
                    .name("kafka-watch".into())
                    .spawn(move || watch.run())
                    .context("starting the Kafka watcher thread")?,
            );
        }
        Ok(Kafka {
            stop,
            threads,
            stats,
        })
    }

    /// Stops reading: the threads end (batches being built are dropped;
    /// the next start reads them again from the snapshot's offsets).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// 64 random bits from the OS's hasher keys (no RNG dependency needed for
/// an instance id).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// The committed offsets of `pull`'s partitions in `group`, with their
/// metadata.
fn committed(consumer: &BaseConsumer, pull: &Pull) -> Result<BTreeMap<i32, (i64, String)>> {
    let mut list = TopicPartitionList::new();
    for &p in &pull.partitions {
        list.add_partition(&pull.topic, p);
    }
    let got = consumer
        .committed_offsets(list, BROKER_TIMEOUT)
        .with_context(|| format!("reading the committed offsets of topic {}", pull.topic))?;
    Ok(got
        .elements()
        .iter()
        .map(|e| {
            let offset = match e.offset() {
                Offset::Offset(o) => o,
                _ => -1,
            };
            (e.partition(), (offset, e.metadata().to_owned()))
        })
        .collect())
}

/// Commits `offsets` (the next offset to read, Kafka's convention) with
/// the fence as metadata.
fn commit(
    consumer: &BaseConsumer,
    pull: &Pull,
    offsets: &BTreeMap<i32, i64>,
    fence: &Fence,
    mode: CommitMode,
) -> Result<()> {
    let mut list = TopicPartitionList::new();
    let text = fence.text();
    for &p in &pull.partitions {
        let Some(&next) = offsets.get(&p) else {
            continue;
        };
        let mut element = list.add_partition(&pull.topic, p);
        element
            .set_offset(Offset::Offset(next))
            .context("an offset to commit")?;
        element.set_metadata(&text);
    }
    if list.count() == 0 {
        return Ok(());
    }
    consumer
        .commit(&list, mode)
        .with_context(|| format!("committing offsets of topic {}", pull.topic))
}

/// Takes the next fencing epoch for the owned partitions (module doc,
/// Ownership and fencing): commits it with the snapshot's offsets (the
/// earliest retained ones for partitions never saved) and reads it back,
/// so two nodes starting at once for one partition cannot both win.
fn claim(
    consumer: &BaseConsumer,
    pull: &Pull,
    covered: &BTreeMap<i32, i64>,
    instance: &str,
    node: &str,
) -> Result<Fence> {
    let before = committed(consumer, pull)?;
    let epoch = before
        .values()
        .filter_map(|(_, metadata)| Fence::parse(metadata))
        .map(|f| f.epoch)
        .max()
        .unwrap_or(0)
        + 1;
    let fence = Fence {
        epoch,
        instance: instance.to_owned(),
        node: node.to_owned(),
    };
    let mut offsets = BTreeMap::new();
    for &p in &pull.partitions {
        let next = match covered.get(&p) {
            Some(&next) => next,
            None => {
                let (low, _) = consumer
                    .fetch_watermarks(&pull.topic, p, BROKER_TIMEOUT)
                    .with_context(|| format!("reading partition {p} of {}", pull.topic))?;
                low
            }
        };
        offsets.insert(p, next);
    }
    commit(consumer, pull, &offsets, &fence, CommitMode::Sync)?;
    let after = committed(consumer, pull)?;
    for (p, (_, metadata)) in &after {
        let held = Fence::parse(metadata);
        ensure!(
            held.as_ref() == Some(&fence),
            "partition {p} of topic {} was claimed by another node while this one started ({}): \
             two nodes must never read one partition; check --node/--partitions",
            pull.topic,
            held.map_or_else(|| metadata.clone(), |f| f.text())
        );
    }
    Ok(fence)
}

/// Per partition whose next offset is below the earliest the broker
/// holds: the offsets lost, `[next, low)`.
fn gaps(
    consumer: &BaseConsumer,
    pull: &Pull,
    next: &BTreeMap<i32, i64>,
) -> Result<Vec<(i32, i64, i64)>> {
    let mut gaps = Vec::new();
    for (&p, &at) in next {
        let (low, _) = consumer
            .fetch_watermarks(&pull.topic, p, BROKER_TIMEOUT)
            .with_context(|| format!("reading partition {p} of {}", pull.topic))?;
        if at < low {
            gaps.push((p, at, low));
        }
    }
    Ok(gaps)
}

fn describe_gaps(topic: &str, gaps: &[(i32, i64, i64)]) -> String {
    let list: Vec<String> = gaps
        .iter()
        .map(|(p, from, low)| format!("partition {p}: offsets {from} to {}", low - 1))
        .collect();
    format!(
        "Kafka topic {topic} no longer holds records this node has not read ({}): retention \
         deleted them before they were folded. They are lost to this state; raise the topic's \
         retention, and rebuild from the earliest offsets with a new --data directory (or \
         accept the loss: docs/kafka.md, Records deleted before they were read)",
        list.join("; ")
    )
}

/// Messages taken from the consumer's queue at most this many at a time.
const TAKE_MESSAGES_MAX: usize = 4096;

/// One message taken from the queue: a record, or an error librdkafka
/// reports (with its partition, or -1 for the client as a whole).
enum Taken<'m> {
    Record {
        partition: i32,
        offset: i64,
        payload: &'m [u8],
        /// When it was produced (ms since the epoch), if the broker says.
        produced_ms: Option<i64>,
    },
    Error {
        partition: i32,
        code: RDKafkaErrorCode,
    },
}

/// The consumer's message queue, read many messages per call
/// (`rd_kafka_consume_batch_queue`): a poll per message cost 4.5 CPU-s
/// for 10 M W1 messages where a batch call costs 1.9 (the read floor of
/// bench/kafka went from 2.4 to 3.7-4.2 M messages/s), and the poll was
/// the source's bottleneck.
struct Queue<'c> {
    queue: *mut rdkafka::bindings::rd_kafka_queue_t,
    out: Vec<*mut rdkafka::bindings::rd_kafka_message_t>,
    _consumer: std::marker::PhantomData<&'c BaseConsumer>,
}

impl<'c> Queue<'c> {
    fn of(consumer: &'c BaseConsumer) -> Queue<'c> {
        // SAFETY: the consumer's own queue; the reference it returns is
        // released in `drop`, before the consumer (borrowed for 'c) can be.
        let queue = unsafe {
            rdkafka::bindings::rd_kafka_queue_get_consumer(consumer.client().native_ptr())
        };
        assert!(!queue.is_null(), "a consumer with a group has a queue");
        Queue {
            queue,
            out: vec![std::ptr::null_mut(); TAKE_MESSAGES_MAX],
            _consumer: std::marker::PhantomData,
        }
    }

    /// Waits up to `wait` for messages, hands each to `each`, and returns
    /// how many were taken.
    fn take(&mut self, wait: Duration, mut each: impl FnMut(Taken<'_>)) -> usize {
        use rdkafka::bindings as rd;
        let wait = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `out` has room for its length of pointers; librdkafka
        // fills at most that many and returns how many (or -1).
        let got = unsafe {
            rd::rd_kafka_consume_batch_queue(
                self.queue,
                wait,
                self.out.as_mut_ptr(),
                self.out.len(),
            )
        };
        let got = usize::try_from(got).unwrap_or(0);
        for &message in &self.out[..got] {
            // SAFETY: a message librdkafka returned, valid until destroyed
            // below; its payload is `len` bytes when not null.
            unsafe {
                let m = &*message;
                if m.err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    let payload = if m.payload.is_null() {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(m.payload.cast::<u8>(), m.len)
                    };
                    let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
                    let at = rd::rd_kafka_message_timestamp(message, &raw mut kind);
                    each(Taken::Record {
                        partition: m.partition,
                        offset: m.offset,
                        payload,
                        produced_ms: (at >= 0).then_some(at),
                    });
                } else {
                    each(Taken::Error {
                        partition: m.partition,
                        code: RDKafkaErrorCode::from(m.err),
                    });
                }
                rd::rd_kafka_message_destroy(message);
            }
        }
        got
    }
}

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        // SAFETY: the reference `of` took, released once.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.queue) };
    }
}

/// A partition's batch being built, or held while its engine is full.
#[derive(Debug, Default)]
struct Building {
    bytes: Vec<u8>,
    first: i64,
    next: i64,
    messages: u64,
    since: Option<Instant>,
    held: bool,
    /// The oldest produce time among its messages (ms since the epoch).
    oldest_ms: Option<i64>,
}

/// The consumer thread.
struct Reader {
    consumer: BaseConsumer,
    stream: String,
    current: Current,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Reader {
    fn run(self) {
        let mut service = (self.current)();
        let failure = loop {
            match self.follow(&service) {
                // The service was replaced (recovered in process): read
                // again from the new one's offsets.
                Ok(Some(next)) => service = next,
                Ok(None) => break None,
                Err(error) => break Some(error),
            }
        };
        if let Some(error) = failure {
            let why = format!(
                "the Kafka source of stream {} failed: {error:#}",
                self.stream
            );
            eprintln!("cardinal serve: {why}");
            (self.current)().fail_from_source(&why);
        }
    }

    /// Reads for `service` until stopped (`None`), replaced (the new
    /// one), or failed.
    fn follow(&self, service: &Arc<Service>) -> Result<Option<Arc<Service>>> {
        let (index, pull) = service
            .pulled(&self.stream)
            .with_context(|| format!("stream {} is not fed from Kafka", self.stream))?;
        let pull = pull.clone();
        let covered = service.covered_offsets(index);
        let mut list = TopicPartitionList::new();
        for &p in &pull.partitions {
            let offset = covered
                .get(&p)
                .map_or(Offset::Beginning, |&o| Offset::Offset(o));
            list.add_partition_offset(&pull.topic, p, offset)
                .context("assigning a partition")?;
        }
        self.consumer
            .assign(&list)
            .context("assigning partitions")?;
        let mut queue = Queue::of(&self.consumer);
        let mut building: BTreeMap<i32, Building> = BTreeMap::new();
        {
            let mut stats = lock(&self.stats.partitions);
            for &p in &pull.partitions {
                let entry = stats.entry((pull.topic.clone(), p)).or_default();
                entry.read = covered.get(&p).copied().unwrap_or(0);
                entry.covered = entry.read;
                entry.paused = false;
            }
        }
        let mut last_flush = Instant::now();
        // Set by a consumer error: the next message clears the broker's
        // away state (a lock taken once, not per message).
        let mut errored = false;
        loop {
            // Stopping, a failed or replaced service: looked at once a
            // turn (a turn takes up to TAKE_MESSAGES_MAX messages).
            {
                if self.stop.load(Ordering::Acquire) {
                    return Ok(None);
                }
                let now = (self.current)();
                if !Arc::ptr_eq(&now, service) {
                    self.consumer.unassign().context("unassigning partitions")?;
                    return Ok(Some(now));
                }
                drop(now);
                if service.failed().is_some() {
                    // Ingest is refused; the edge recovers or exits.
                    std::thread::sleep(RETRY_FULL_EVERY * 10);
                    continue;
                }
            }
            let any_held = building.values().any(|b| b.held);
            let wait = if any_held {
                Duration::ZERO
            } else {
                FLUSH_EVERY / 2
            };
            let mut failed: Option<anyhow::Error> = None;
            let taken = queue.take(wait, |message| {
                if failed.is_some() {
                    return;
                }
                match message {
                    Taken::Record {
                        partition: p,
                        offset,
                        payload,
                        produced_ms,
                    } => {
                        if errored {
                            errored = false;
                            lock(&self.stats.broker_away).take();
                        }
                        let batch = building.entry(p).or_default();
                        if batch.bytes.is_empty() && !batch.held {
                            batch.first = offset;
                            batch.since = Some(Instant::now());
                        }
                        batch.bytes.extend_from_slice(payload);
                        if !payload.ends_with(b"\n") && !payload.is_empty() {
                            batch.bytes.push(b'\n');
                        }
                        batch.next = offset + 1;
                        batch.messages += 1;
                        if let Some(at) = produced_ms {
                            batch.oldest_ms = Some(batch.oldest_ms.map_or(at, |o| o.min(at)));
                        }
                        if batch.bytes.len() >= BATCH_BYTES_TARGET && !batch.held {
                            failed = self.offer(service, index, &pull, p, batch).err();
                        }
                    }
                    Taken::Error { partition, code } => {
                        errored = true;
                        failed = self
                            .consumer_error(service, &pull, &building, partition, code)
                            .err();
                    }
                }
            });
            if let Some(error) = failed {
                return Err(error);
            }
            if taken == 0 {
                self.idle(&pull, &building);
            }
            if any_held || last_flush.elapsed() >= FLUSH_EVERY {
                last_flush = Instant::now();
                for (&p, batch) in &mut building {
                    let due = batch.held
                        || batch
                            .since
                            .is_some_and(|since| since.elapsed() >= FLUSH_EVERY);
                    if due && batch.messages > 0 {
                        self.offer(service, index, &pull, p, batch)?;
                    }
                }
                if building.values().any(|b| b.held) {
                    std::thread::sleep(RETRY_FULL_EVERY);
                }
            }
        }
    }

    /// Nothing to read: the consumer's position of each partition with
    /// nothing waiting is where reading stands (past the markers that end
    /// transactions, which are never handed out), for the lag.
    fn idle(&self, pull: &Pull, building: &BTreeMap<i32, Building>) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        let mut stats = lock(&self.stats.partitions);
        for element in positions.elements() {
            let p = element.partition();
            let waiting = building.get(&p).is_some_and(|b| b.messages > 0 || b.held);
            if let (Offset::Offset(at), false) = (element.offset(), waiting)
                && let Some(entry) = stats.get_mut(&(pull.topic.clone(), p))
            {
                entry.read = entry.read.max(at);
            }
        }
    }

    /// Offers a partition's batch; a full engine holds it and pauses the
    /// partition, and a later offer that is taken resumes it.
    fn offer(
        &self,
        service: &Service,
        index: usize,
        pull: &Pull,
        partition: i32,
        batch: &mut Building,
    ) -> Result<()> {
        let bytes = std::mem::take(&mut batch.bytes);
        let len = bytes.len() as u64;
        let origin = format!(
            "topic {} partition {partition} offsets {}..={}",
            pull.topic,
            batch.first,
            batch.next - 1
        );
        match service.offer_pulled(index, partition, batch.next, bytes, origin, batch.oldest_ms) {
            Ok(()) => {
                self.stats
                    .messages
                    .fetch_add(batch.messages, Ordering::Relaxed);
                self.stats.bytes.fetch_add(len, Ordering::Relaxed);
                if let Some(entry) =
                    lock(&self.stats.partitions).get_mut(&(pull.topic.clone(), partition))
                {
                    entry.read = batch.next;
                    entry.paused = false;
                }
                if batch.held {
                    let mut list = TopicPartitionList::new();
                    list.add_partition(&pull.topic, partition);
                    self.consumer
                        .resume(&list)
                        .context("resuming a partition")?;
                }
                batch.held = false;
                batch.messages = 0;
                batch.since = None;
                batch.oldest_ms = None;
                Ok(())
            }
            Err(Offer::Full(bytes)) => {
                batch.bytes = bytes;
                if !batch.held {
                    batch.held = true;
                    self.stats.batches_held.fetch_add(1, Ordering::Relaxed);
                    let mut list = TopicPartitionList::new();
                    list.add_partition(&pull.topic, partition);
                    self.consumer.pause(&list).context("pausing a partition")?;
                    if let Some(entry) =
                        lock(&self.stats.partitions).get_mut(&(pull.topic.clone(), partition))
                    {
                        entry.paused = true;
                    }
                }
                Ok(())
            }
            // Failed or stopping: the loop notices the failure or stop.
            Err(Offer::Stopped(_)) => {
                batch.bytes.clear();
                Ok(())
            }
        }
    }

    /// A consumer error: the broker away is waited out (counted, shown in
    /// `/healthz`); an offset the broker no longer holds fails the source
    /// naming the partitions and the lost offsets.
    fn consumer_error(
        &self,
        service: &Service,
        pull: &Pull,
        building: &BTreeMap<i32, Building>,
        partition: i32,
        code: RDKafkaErrorCode,
    ) -> Result<()> {
        self.stats.error(&format!("{code:?}"));
        let out_of_range = matches!(
            code,
            RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange
        );
        if out_of_range {
            // Where each partition stands: its batch's next offset, or the
            // snapshot's.
            let (index, _) = service
                .pulled(&self.stream)
                .context("stream no longer fed from Kafka")?;
            let mut next = service.covered_offsets(index);
            for (&(ref topic, p), stats) in lock(&self.stats.partitions).iter() {
                if *topic == pull.topic {
                    next.insert(p, stats.read);
                }
            }
            for (&p, b) in building {
                if b.messages > 0 {
                    next.insert(p, b.next);
                }
            }
            let gaps = gaps(&self.consumer, pull, &next)?;
            if !gaps.is_empty() {
                bail!("{}", describe_gaps(&pull.topic, &gaps));
            }
            bail!("Kafka topic {} partition {partition}: {code}", pull.topic);
        }
        *lock(&self.stats.broker_away) = Some(format!("{code}"));
        Ok(())
    }
}

/// The watcher thread (module doc).
struct Watcher {
    consumer: BaseConsumer,
    stream: String,
    fence: Fence,
    current: Current,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    fn run(self) {
        let mut committed_after = 0;
        let mut last_watch = Instant::now() - WATCH_EVERY;
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(100));
            let service = (self.current)();
            let Some((index, pull)) = service.pulled(&self.stream) else {
                return;
            };
            let pull = pull.clone();
            if last_watch.elapsed() >= WATCH_EVERY {
                last_watch = Instant::now();
                self.watermarks(&pull);
            }
            let snapshots = service.counters.snapshots.load(Ordering::Acquire);
            if snapshots == committed_after {
                continue;
            }
            let covered = service.covered_offsets(index);
            {
                let mut stats = lock(&self.stats.partitions);
                for (&p, &next) in &covered {
                    if let Some(entry) = stats.get_mut(&(pull.topic.clone(), p)) {
                        entry.covered = next;
                    }
                }
            }
            match self.fence_and_commit(&pull, &covered) {
                Ok(()) => committed_after = snapshots,
                Err(Fenced(why)) => {
                    eprintln!("cardinal serve: {why}");
                    service.fail_from_source(&why);
                    return;
                }
            }
        }
    }

    fn watermarks(&self, pull: &Pull) {
        for &p in &pull.partitions {
            match self
                .consumer
                .fetch_watermarks(&pull.topic, p, BROKER_TIMEOUT)
            {
                Ok((low, high)) => {
                    lock(&self.stats.broker_away).take();
                    if let Some(entry) =
                        lock(&self.stats.partitions).get_mut(&(pull.topic.clone(), p))
                    {
                        entry.watermarks = Some((low, high, Instant::now()));
                    }
                }
                Err(error) => {
                    let kind = error
                        .rdkafka_error_code()
                        .map_or_else(|| "Other".to_owned(), |c| format!("{c:?}"));
                    self.stats.error(&kind);
                    *lock(&self.stats.broker_away) = Some(format!("{error}"));
                    return;
                }
            }
        }
    }

    /// Checks the fence is still this node's, then commits the offsets the
    /// last snapshot covers. A broker that does not answer is waited out
    /// (the next snapshot tries again); another node's fence is fatal.
    fn fence_and_commit(
        &self,
        pull: &Pull,
        covered: &BTreeMap<i32, i64>,
    ) -> std::result::Result<(), Fenced> {
        let held = match committed(&self.consumer, pull) {
            Ok(held) => held,
            Err(_) => {
                self.stats.commit_failures.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        };
        for (p, (_, metadata)) in &held {
            if let Some(other) = Fence::parse(metadata)
                && other != self.fence
            {
                return Err(Fenced(format!(
                    "partition {p} of Kafka topic {} is now claimed by another node (epoch {}, \
                     instance {}, {}; this node holds epoch {}, instance {}): two nodes must \
                     never read one partition. This node stops; check --node/--partitions of \
                     both (docs/kafka.md, Ownership)",
                    pull.topic,
                    other.epoch,
                    other.instance,
                    other.node,
                    self.fence.epoch,
                    self.fence.instance
                )));
            }
        }
        if commit(&self.consumer, pull, covered, &self.fence, CommitMode::Sync).is_err() {
            self.stats.commit_failures.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

struct Fenced(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_parse_and_own() {
        let node = Assignment::node("1/3").expect("parses");
        assert_eq!(
            node.owned("t", 7).expect("owned"),
            [1, 4].into_iter().collect::<BTreeSet<_>>()
        );
        assert!(Assignment::node("3/3").is_err());
        assert!(Assignment::node("0/0").is_err());
        assert!(Assignment::node("x").is_err());
        let list = Assignment::partitions("0, 2-4,9").expect("parses");
        assert!(list.owned("t", 6).is_err(), "partition 9 of 6");
        assert_eq!(
            list.owned("t", 10).expect("owned"),
            [0, 2, 3, 4, 9].into_iter().collect::<BTreeSet<_>>()
        );
        assert!(Assignment::partitions("4-2").is_err());
        assert!(Assignment::partitions("0-2147483647").is_err());
        assert!(Assignment::partitions("65535").is_ok());
        assert!(Assignment::partitions("65536").is_err());
        assert!(Assignment::partitions("").is_err());
        // Every partition has exactly one owner among N nodes.
        for n in 1..5 {
            for p in 0..12 {
                let owners = (0..n)
                    .filter(|&i| {
                        Assignment::Node { index: i, count: n }
                            .owned("t", 12)
                            .expect("owned")
                            .contains(&p)
                    })
                    .count();
                assert_eq!(owners, 1);
            }
        }
    }

    #[test]
    fn fences_round_trip() {
        let fence = Fence {
            epoch: 7,
            instance: "00ff".into(),
            node: "node-0-of-2".into(),
        };
        assert_eq!(Fence::parse(&fence.text()), Some(fence));
        assert_eq!(Fence::parse(""), None);
        assert_eq!(Fence::parse("cardinal epoch=x instance=1"), None);
    }

    #[test]
    fn topic_args() {
        assert_eq!(
            topic_arg("impressions=ad-events").expect("parses"),
            ("impressions".into(), "ad-events".into())
        );
        assert!(topic_arg("impressions").is_err());
        assert!(topic_arg("a=b/c").is_err());
    }
}
