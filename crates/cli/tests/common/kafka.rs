//! A Kafka broker for the end-to-end tests, and what they do with it:
//! create topics, write records (idempotent, or in transactions that commit
//! or abort), delete records as retention would, and read back watermarks
//! and a group's committed offsets.
//!
//! Include it beside `common` where a test needs Kafka (the other test
//! binaries then do not link librdkafka):
//!
//! ```ignore
//! #[path = "common/kafka.rs"]
//! mod kafka;
//! ```
//!
//! Where the broker comes from (see [`Broker::from_env`]):
//! - `CARDINAL_KAFKA=HOST:PORT`: a running broker (CI starts one with
//!   `.ci/kafka start DIR`, which prints this address);
//! - `CARDINAL_KAFKA=start`: one started for this test process through
//!   `.ci/kafka start`, killed by its watchdog once the process exits;
//! - unset: the Kafka tests skip, saying so, unless
//!   `CARDINAL_REQUIRE_KAFKA=1` (CI), where they fail.
//!
//! Every call is bounded: a broker that stops answering fails the test
//! within [`ADMIN_TIMEOUT`] or [`PRODUCE_TIMEOUT`] instead of hanging it.

#![allow(
    dead_code,
    reason = "each test binary compiles this module; not all use all of it"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// How long one admin request (create a topic, delete records) or metadata
/// query may take. Topic creation on a single KRaft node takes well under
/// a second; a busy 2-core machine running the test suite beside the broker
/// can stall it for seconds, and half a minute means the broker is gone.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long writing a test's records, or one transaction's begin, commit
/// or abort, may take: the same reasoning as [`ADMIN_TIMEOUT`].
pub const PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a reachability check of `CARDINAL_KAFKA` may take: a broker on
/// loopback accepts in microseconds; seconds mean nothing listens.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a test may wait for records it expects to read, in all.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long closing a consumer may take. It takes ~100 ms (a group
/// consumer leaves its coordinator). librdkafka's destroy waits forever
/// while a partition list it returned is still alive (seen with
/// `position`'s; such a list holds references to the consumer's
/// partitions): drop those lists first. [`close`] turns a mistake of that
/// kind into a failure instead of a hung test run.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// One poll of a consumer: short, so that the overall deadline is checked
/// often.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The environment variable naming the broker (`HOST:PORT`, or `start`).
pub const KAFKA_ENV: &str = "CARDINAL_KAFKA";

/// The environment variable that turns a missing broker into a failure.
pub const REQUIRE_ENV: &str = "CARDINAL_REQUIRE_KAFKA";

/// Records to write, by partition: each message is one record's value.
pub type Records = BTreeMap<i32, Vec<Vec<u8>>>;

/// A broker the tests may use.
#[derive(Debug, Clone)]
pub struct Broker {
    bootstrap: String,
}

/// How a transaction written by [`Broker::produce_transactions`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `commit_transaction`: read_committed consumers see the records.
    Commit,
    /// `abort_transaction` after the records reached the broker: they are
    /// in the log, and read_committed consumers must skip them.
    Abort,
}

/// One transaction for [`Broker::produce_transactions`].
#[derive(Debug, Clone)]
pub struct Transaction {
    /// What it writes, by partition.
    pub records: Records,
    /// Whether it commits or aborts.
    pub end: End,
}

/// A group's committed position in one partition, as
/// [`Broker::committed`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The partition.
    pub partition: i32,
    /// The committed offset (the next record to read), `None` when the
    /// group has committed nothing for this partition.
    pub offset: Option<i64>,
    /// The metadata string committed with it (empty when none).
    pub metadata: String,
}

impl Broker {
    /// The broker named by `CARDINAL_KAFKA`, or `None` (printing why) when
    /// there is none, so the calling test can return early.
    ///
    /// Panics, so that the test fails, when `CARDINAL_REQUIRE_KAFKA=1` and
    /// the variable is unset or the broker does not accept connections, or
    /// when `CARDINAL_KAFKA=start` and the broker does not start.
    pub fn from_env() -> Option<Broker> {
        let required = std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1");
        let named = std::env::var(KAFKA_ENV).unwrap_or_default();
        let named = named.trim();
        if named.is_empty() {
            let why = format!(
                "{KAFKA_ENV} is not set: set it to a broker's HOST:PORT (`.ci/kafka start DIR` \
                 starts one and prints it), or to `start` to start one for this test run"
            );
            assert!(!required, "{REQUIRE_ENV}=1 but {why}");
            eprintln!("skipped: no Kafka broker: {why}");
            return None;
        }
        if named == "start" {
            return Some(Broker {
                bootstrap: started_broker().clone(),
            });
        }
        if let Err(why) = reachable(named) {
            let why = format!(
                "the Kafka broker {KAFKA_ENV}={named} does not accept connections ({why}): \
                 start one with `.ci/kafka start DIR`, or unset {KAFKA_ENV} to skip"
            );
            assert!(!required, "{REQUIRE_ENV}=1 but {why}");
            eprintln!("skipped: {why}");
            return None;
        }
        Some(Broker {
            bootstrap: named.to_owned(),
        })
    }

    /// The bootstrap address, `HOST:PORT`, as `cardinal serve --kafka`
    /// takes it.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// A client configuration with this broker's address and nothing else.
    pub fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        config
    }

    /// An admin client (topics, records, configs).
    pub fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.config().create().expect("an admin client")
    }

    /// Creates `name` with `partitions` partitions (replication factor 1)
    /// and waits until every partition has a leader.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        self.create_topic_with(name, partitions, &[]);
    }

    /// [`Broker::create_topic`] with topic configs, such as
    /// `("retention.ms", "1000")` or `("segment.bytes", "1048576")`.
    pub fn create_topic_with(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (key, value) in configs {
            topic = topic.set(key, value);
        }
        let results = wait(
            &format!("creating topic {name}"),
            self.admin().create_topics([&topic], &admin_options()),
        )
        .unwrap_or_else(|e| panic!("creating topic {name}: {e}"));
        for result in results {
            if let Err((topic, code)) = result {
                panic!("creating topic {topic}: {code}");
            }
        }
        // The controller has answered; wait until the broker serves every
        // partition, so that the first produce or fetch finds a leader.
        let client: BaseConsumer = self.config().create().expect("a metadata client");
        let deadline = Instant::now() + ADMIN_TIMEOUT;
        loop {
            let metadata = client
                .fetch_metadata(Some(name), ADMIN_TIMEOUT)
                .unwrap_or_else(|e| panic!("metadata of topic {name}: {e}"));
            let ready = metadata.topics().iter().any(|t| {
                t.name() == name
                    && t.error().is_none()
                    && t.partitions().len() == usize::try_from(partitions).unwrap_or(0)
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "topic {name} has no leader for every partition after {ADMIN_TIMEOUT:?}"
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Grows `topic` to `partitions` partitions.
    pub fn add_partitions(&self, topic: &str, partitions: usize) {
        let grow = rdkafka::admin::NewPartitions::new(topic, partitions);
        let results = wait(
            &format!("adding partitions to {topic}"),
            self.admin().create_partitions(&[grow], &admin_options()),
        )
        .unwrap_or_else(|e| panic!("adding partitions to {topic}: {e}"));
        for result in results {
            result.unwrap_or_else(|(name, e)| panic!("adding partitions to {name}: {e}"));
        }
    }

    /// Writes `records` to `topic` with an idempotent producer
    /// (`enable.idempotence=true`, so `acks=all`, in order, no duplicates on
    /// retries) and waits until all are acknowledged. Panics naming the
    /// first record that failed.
    pub fn produce(&self, topic: &str, records: &Records) {
        let producer = self.producer(&[("enable.idempotence", "true")]);
        send_all(&producer, topic, records);
        flush(&producer, topic);
    }

    /// Writes `transactions` to `topic` in order, each in its own
    /// transaction of one transactional producer (`transactional.id` made
    /// unique per call), committing or aborting each as it says. An aborted
    /// transaction's records are flushed to the broker before the abort, so
    /// they are in the log and a read_committed consumer must skip them.
    pub fn produce_transactions(&self, topic: &str, transactions: &[Transaction]) {
        let id = unique_name(&format!("{topic}-tx"));
        let producer = self.producer(&[("transactional.id", &id)]);
        producer
            .init_transactions(PRODUCE_TIMEOUT)
            .unwrap_or_else(|e| panic!("init_transactions ({id}): {e}"));
        for (n, transaction) in transactions.iter().enumerate() {
            producer
                .begin_transaction()
                .unwrap_or_else(|e| panic!("begin_transaction {n} ({id}): {e}"));
            send_all(&producer, topic, &transaction.records);
            flush(&producer, topic);
            match transaction.end {
                End::Commit => producer
                    .commit_transaction(PRODUCE_TIMEOUT)
                    .unwrap_or_else(|e| panic!("commit_transaction {n} ({id}): {e}")),
                End::Abort => producer
                    .abort_transaction(PRODUCE_TIMEOUT)
                    .unwrap_or_else(|e| panic!("abort_transaction {n} ({id}): {e}")),
            }
        }
    }

    /// Deletes the records of `topic`'s `partition` before offset `before`
    /// (exclusive), as retention would, and returns the partition's new low
    /// watermark. A consumer then asking for an offset below it gets
    /// "offset out of range".
    pub fn delete_records(&self, topic: &str, partition: i32, before: i64) -> i64 {
        let mut offsets = TopicPartitionList::new();
        offsets
            .add_partition_offset(topic, partition, Offset::Offset(before))
            .expect("an offset to delete before");
        let result = wait(
            &format!("deleting records of {topic}[{partition}]"),
            self.admin().delete_records(&offsets, &admin_options()),
        )
        .unwrap_or_else(|e| panic!("deleting records of {topic}[{partition}]: {e}"));
        let element = result
            .find_partition(topic, partition)
            .unwrap_or_else(|| panic!("no result for {topic}[{partition}]"));
        element
            .error()
            .unwrap_or_else(|e| panic!("deleting records of {topic}[{partition}]: {e}"));
        match element.offset() {
            Offset::Offset(low) => low,
            other => panic!("deleting records of {topic}[{partition}]: low watermark {other:?}"),
        }
    }

    /// The low watermark and the last stable offset of `topic`'s
    /// `partition`, as a read_committed consumer sees them (librdkafka's
    /// default `isolation.level`): the first offset still in the log, and
    /// the offset below which every transaction has ended (the high
    /// watermark when none is open). Both count every offset: aborted
    /// records and transaction markers too.
    pub fn watermarks(&self, topic: &str, partition: i32) -> (i64, i64) {
        self.watermarks_as(topic, partition, "read_committed")
    }

    /// The low and high watermarks of `topic`'s `partition` as a
    /// read_uncommitted client sees them: the high one counts the records
    /// of open transactions too.
    pub fn watermarks_uncommitted(&self, topic: &str, partition: i32) -> (i64, i64) {
        self.watermarks_as(topic, partition, "read_uncommitted")
    }

    fn watermarks_as(&self, topic: &str, partition: i32, isolation: &str) -> (i64, i64) {
        let client: BaseConsumer = self
            .config()
            .set("isolation.level", isolation)
            .create()
            .expect("a metadata client");
        client
            .fetch_watermarks(topic, partition, ADMIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("watermarks of {topic}[{partition}]: {e}"))
    }

    /// What consumer group `group` has committed for `topic`'s partitions
    /// `0..partitions`: offsets and metadata strings. Reads them with a
    /// consumer that joins nothing (`committed_offsets` asks the group
    /// coordinator directly).
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<Committed> {
        let client: BaseConsumer = self
            .config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("a consumer to read committed offsets");
        let mut asked = TopicPartitionList::new();
        asked.add_partition_range(topic, 0, partitions - 1);
        let answer = client
            .committed_offsets(asked, ADMIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("committed offsets of group {group} on {topic}: {e}"));
        let mut committed: Vec<Committed> = answer
            .elements()
            .iter()
            .map(|e| Committed {
                partition: e.partition(),
                offset: match e.offset() {
                    Offset::Offset(n) => Some(n),
                    _ => None,
                },
                metadata: e.metadata().to_owned(),
            })
            .collect();
        committed.sort_by_key(|c| c.partition);
        committed
    }

    /// A consumer with the settings a Kafka source reads with: group
    /// `group` (for commits only: it joins no group unless it subscribes),
    /// no automatic commits or offset stores, `auto.offset.reset=error`
    /// (an offset below the low watermark is an error, never a silent
    /// jump), `isolation.level=read_committed`, and
    /// `enable.partition.eof=true` (a `PartitionEOF` error each time a
    /// partition is read to its end). `settings` add to or override these.
    pub fn consumer(&self, group: &str, settings: &[(&str, &str)]) -> BaseConsumer {
        let mut config = self.config();
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true");
        for (key, value) in settings {
            config.set(*key, *value);
        }
        config.create().expect("a consumer")
    }

    fn producer(&self, settings: &[(&str, &str)]) -> BaseProducer<Deliveries> {
        let mut config = self.config();
        // Small batches, sent at once: tests write little.
        config.set("linger.ms", "5");
        for (key, value) in settings {
            config.set(*key, *value);
        }
        config
            .create_with_context(Deliveries::default())
            .expect("a producer")
    }
}

/// Reads from `consumer` (already assigned) until each of `partitions` has
/// been read to its end (a `PartitionEOF` after its last record), and
/// returns the records by partition, as (offset, value). Panics on any
/// other error, or after [`READ_TIMEOUT`].
pub fn read_to_end(
    consumer: &BaseConsumer,
    partitions: &[i32],
) -> BTreeMap<i32, Vec<(i64, Vec<u8>)>> {
    let mut records: BTreeMap<i32, Vec<(i64, Vec<u8>)>> = BTreeMap::new();
    let mut ended: BTreeSet<i32> = BTreeSet::new();
    let deadline = Instant::now() + READ_TIMEOUT;
    while partitions.iter().any(|p| !ended.contains(p)) {
        assert!(
            Instant::now() < deadline,
            "partitions {partitions:?} not read to their end after {READ_TIMEOUT:?}: ended {ended:?}"
        );
        match consumer.poll(POLL_INTERVAL) {
            None => {}
            Some(Ok(message)) => {
                let partition = message.partition();
                ended.remove(&partition);
                records.entry(partition).or_default().push((
                    message.offset(),
                    message.payload().unwrap_or_default().to_vec(),
                ));
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                ended.insert(partition);
            }
            Some(Err(e)) => panic!("reading: {e}"),
        }
    }
    records
}

/// Drops `consumer` (librdkafka's close and destroy) on another thread and
/// waits up to [`CLOSE_TIMEOUT`] for it: a hung destroy fails the test
/// instead of hanging the test run (the stuck thread is left behind).
pub fn close(consumer: BaseConsumer) {
    let (closed, wait) = std::sync::mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        drop(consumer);
        let _ = closed.send(());
    });
    wait.recv_timeout(CLOSE_TIMEOUT).unwrap_or_else(|_| {
        panic!("closing a consumer took more than {CLOSE_TIMEOUT:?}: librdkafka's destroy hung")
    });
    let took = started.elapsed();
    if took > Duration::from_secs(2) {
        eprintln!("closing a consumer took {took:?}");
    }
}

/// A name no other test of any run shares (topics, groups, transactional
/// ids): `prefix`, this process id and a counter.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Records `count` values per partition, `"{tag}-p{partition}-{n}"`.
pub fn numbered(tag: &str, partitions: i32, count: usize) -> Records {
    (0..partitions)
        .map(|p| {
            let values = (0..count)
                .map(|n| format!("{tag}-p{p}-{n}").into_bytes())
                .collect();
            (p, values)
        })
        .collect()
}

fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(ADMIN_TIMEOUT))
        .operation_timeout(Some(ADMIN_TIMEOUT))
}

/// Collects failed deliveries: a producer's `flush` succeeds even when
/// records were rejected, so each failure is kept here and checked after.
#[derive(Debug, Default)]
struct Deliveries {
    failed: Mutex<Vec<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            let mut failed = self.failed.lock().expect("delivery failures");
            failed.push(format!(
                "{}[{}]: {error}",
                message.topic(),
                message.partition()
            ));
        }
    }
}

fn send_all(producer: &BaseProducer<Deliveries>, topic: &str, records: &Records) {
    let deadline = Instant::now() + PRODUCE_TIMEOUT;
    for (partition, values) in records {
        for value in values {
            let mut record = BaseRecord::<(), [u8]>::to(topic)
                .partition(*partition)
                .payload(value.as_slice());
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        assert!(
                            Instant::now() < deadline,
                            "the producer's queue stayed full for {PRODUCE_TIMEOUT:?}"
                        );
                        record = back;
                        producer.poll(POLL_INTERVAL);
                    }
                    Err((e, _)) => panic!("producing to {topic}[{partition}]: {e}"),
                }
            }
        }
    }
}

fn flush(producer: &BaseProducer<Deliveries>, topic: &str) {
    producer
        .flush(PRODUCE_TIMEOUT)
        .unwrap_or_else(|e| panic!("flushing records to {topic}: {e}"));
    let failed = producer.context().failed.lock().expect("delivery failures");
    assert!(failed.is_empty(), "records not delivered: {failed:?}");
}

/// Blocks on an admin future: rdkafka's admin calls are futures resolved
/// by its own background thread, so no async runtime is needed, only a
/// waker that unparks this thread. Panics after [`ADMIN_TIMEOUT`] plus a
/// margin (the request itself times out first).
fn wait<F: Future>(what: &str, future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let deadline = Instant::now() + ADMIN_TIMEOUT + CONNECT_TIMEOUT;
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no answer from the broker after {:?}",
            ADMIN_TIMEOUT + CONNECT_TIMEOUT
        );
        std::thread::park_timeout(POLL_INTERVAL);
    }
}

/// Whether something accepts TCP connections at `address` (`HOST:PORT`).
fn reachable(address: &str) -> Result<(), String> {
    let addresses = address
        .to_socket_addrs()
        .map_err(|e| format!("not a HOST:PORT: {e}"))?;
    let mut last = String::from("it resolves to no address");
    for socket in addresses {
        match TcpStream::connect_timeout(&socket, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{socket}: {e}"),
        }
    }
    Err(last)
}

/// The address of the broker this test process started with `.ci/kafka
/// start` (`CARDINAL_KAFKA=start`), starting it on first use. Its folder
/// is `cardinal-kafka-<pid>` under the temp dir; `--owner` makes its
/// watchdog kill it once this process has exited.
fn started_broker() -> &'static String {
    static STARTED: OnceLock<String> = OnceLock::new();
    STARTED.get_or_init(|| {
        let script = repository_root().join(".ci/kafka");
        let dir = std::env::temp_dir().join(format!("cardinal-kafka-{}", std::process::id()));
        eprintln!(
            "starting a Kafka broker in {} ({})",
            dir.display(),
            script.display()
        );
        let output = std::process::Command::new(&script)
            .arg("start")
            .arg(&dir)
            .arg("--owner")
            .arg(std::process::id().to_string())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{KAFKA_ENV}=start: `.ci/kafka start` failed ({}):\n{stderr}",
            output.status
        );
        eprint!("{stderr}");
        String::from_utf8(output.stdout)
            .expect("an address")
            .trim()
            .to_owned()
    })
}

/// A broker of this test's own, in `dir`, that it may stop and start
/// again (same data, same port): for tests of a broker going away. Killed
/// by its watchdog once this process has exited.
#[derive(Debug)]
pub struct OwnBroker {
    dir: PathBuf,
    /// The broker, to use as any other.
    pub broker: Broker,
}

impl OwnBroker {
    /// Starts one in `dir` with `.ci/kafka start`.
    pub fn start(dir: &Path) -> OwnBroker {
        let address = ci_kafka(&[
            "start".as_ref(),
            dir.as_os_str(),
            "--owner".as_ref(),
            std::process::id().to_string().as_ref(),
        ]);
        OwnBroker {
            dir: dir.to_path_buf(),
            broker: Broker { bootstrap: address },
        }
    }

    /// Stops it (`.ci/kafka stop`): its data stays, for [`OwnBroker::restart`].
    pub fn stop(&self) {
        ci_kafka(&["stop".as_ref(), self.dir.as_os_str()]);
    }

    /// Starts it again, or stops and starts it (`.ci/kafka restart`): its data and
    /// port stay.
    pub fn restart(&self) {
        let address = ci_kafka(&["restart".as_ref(), self.dir.as_os_str()]);
        assert_eq!(
            address, self.broker.bootstrap,
            "the same port after a restart"
        );
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repository_root().join(".ci/kafka"))
            .arg("stop")
            .arg(&self.dir)
            .stdin(std::process::Stdio::null())
            .output();
    }
}

/// Runs `.ci/kafka ARGS`, which prints the broker's address; panics with
/// its error output when it fails.
fn ci_kafka(args: &[&std::ffi::OsStr]) -> String {
    let script = repository_root().join(".ci/kafka");
    let output = std::process::Command::new(&script)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`.ci/kafka {args:?}` failed ({}):\n{stderr}",
        output.status
    );
    String::from_utf8(output.stdout)
        .expect("an address")
        .trim()
        .to_owned()
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}
