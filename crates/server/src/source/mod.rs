//! Sources: where batches come from, and the position each one reaches.
//!
//! Every source hands the service batches with a position, and positions
//! live in snapshots. There are two kinds, and the types keep them apart:
//!
//! - **push** sources (the native TCP protocol, HTTP, RELP) cannot be
//!   replayed upstream: a batch goes through the write-ahead log before it
//!   is acknowledged, and its position is the log sequence of its record
//!   ([`LogSeq`]);
//! - **pull** sources (Kafka) can be read again from any offset the
//!   broker still holds: a batch is folded straight from the broker, and
//!   its position is, per partition, the next offset to read
//!   ([`Position::Kafka`]), restored from the snapshot.
//!
//! A snapshot's trim point is the minimum over log positions only: an
//! offset never trims the log.

use std::collections::BTreeMap;

/// A write-ahead log sequence: the position of a push source's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogSeq(pub u64);

/// One Kafka partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: String,
    /// The partition's number.
    pub partition: i32,
}

/// Where a source's batch leaves its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// A push source's batch: the log sequence of its record.
    Log(LogSeq),
    /// A pull source's batch: its partition and the next offset to read
    /// after it (the offset of its last message plus one).
    Kafka {
        /// The partition read.
        at: TopicPartition,
        /// The next offset to read.
        next: i64,
    },
}

/// What a state covers, per partition of every Kafka-fed stream: the
/// next offset to read (every message below it is in the state). Empty
/// on a node without Kafka.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Per owned partition, the next offset its state reaches.
    pub partitions: BTreeMap<TopicPartition, i64>,
    /// Per topic, how many partitions it has (so that an answer can name
    /// the partitions nobody covered).
    pub partition_counts: BTreeMap<String, i32>,
}
