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

pub mod kafka;

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

/// A stream fed by a pull source: its Kafka topic and the partitions
/// this node owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// The topic the stream reads.
    pub topic: String,
    /// The partitions this node reads (static assignment).
    pub partitions: std::collections::BTreeSet<i32>,
    /// How many partitions the topic has, as the broker says at start.
    pub partition_count: i32,
}

/// The next offset to read per partition: a pull-fed stream's position,
/// saved in its own snapshot section ([`Offsets::encode`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offsets {
    /// The topic.
    pub topic: String,
    /// How many partitions the topic had when these were saved.
    pub partition_count: i32,
    /// Per partition read, the next offset to read: every message below
    /// it is in the state the snapshot holds.
    pub next: BTreeMap<i32, i64>,
}

/// The version byte of [`Offsets::encode`].
const OFFSETS_VERSION: u8 = 1;

impl Offsets {
    /// `version u8 = 1 | topic len u16 | topic | partition count i32 |
    /// n u32 | n × (partition i32, next offset i64)`, little-endian. The
    /// snapshot file around it carries the checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(11 + self.topic.len() + 12 * self.next.len());
        out.push(OFFSETS_VERSION);
        let topic = self.topic.as_bytes();
        let len = u16::try_from(topic.len()).expect("a Kafka topic name is at most 249 bytes");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(topic);
        out.extend_from_slice(&self.partition_count.to_le_bytes());
        let n = u32::try_from(self.next.len()).expect("partitions fit in i32");
        out.extend_from_slice(&n.to_le_bytes());
        for (&partition, &next) in &self.next {
            out.extend_from_slice(&partition.to_le_bytes());
            out.extend_from_slice(&next.to_le_bytes());
        }
        out
    }

    /// Reads what [`Offsets::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> anyhow::Result<Offsets> {
        fn take<'a>(bytes: &mut &'a [u8], n: usize) -> anyhow::Result<&'a [u8]> {
            anyhow::ensure!(bytes.len() >= n, "Kafka offsets section cut short");
            let (head, rest) = bytes.split_at(n);
            *bytes = rest;
            Ok(head)
        }
        fn array<const N: usize>(bytes: &mut &[u8]) -> anyhow::Result<[u8; N]> {
            Ok(take(bytes, N)?.try_into().expect("N bytes taken"))
        }
        let mut rest = bytes;
        let version = array::<1>(&mut rest)?[0];
        anyhow::ensure!(
            version == OFFSETS_VERSION,
            "Kafka offsets section of version {version}, which this build does not read"
        );
        let len = u16::from_le_bytes(array(&mut rest)?) as usize;
        let topic = std::str::from_utf8(take(&mut rest, len)?)
            .map_err(|_| anyhow::anyhow!("Kafka offsets section: a topic that is not UTF-8"))?
            .to_owned();
        let partition_count = i32::from_le_bytes(array(&mut rest)?);
        let n = u32::from_le_bytes(array(&mut rest)?) as usize;
        anyhow::ensure!(
            rest.len() == n * 12,
            "Kafka offsets section: {n} partitions in {} bytes",
            rest.len()
        );
        let mut next = BTreeMap::new();
        for _ in 0..n {
            let partition = i32::from_le_bytes(array(&mut rest)?);
            let offset = i64::from_le_bytes(array(&mut rest)?);
            anyhow::ensure!(
                (0..partition_count).contains(&partition) && offset >= 0,
                "Kafka offsets section: partition {partition} at offset {offset} of a topic \
                 with {partition_count} partitions"
            );
            anyhow::ensure!(
                next.insert(partition, offset).is_none(),
                "Kafka offsets section: partition {partition} twice"
            );
        }
        Ok(Offsets {
            topic,
            partition_count,
            next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_refuse_damage() {
        let offsets = Offsets {
            topic: "ad-events".into(),
            partition_count: 6,
            next: [(0, 17), (2, 0), (4, 1 << 40)].into_iter().collect(),
        };
        let bytes = offsets.encode();
        assert_eq!(Offsets::decode(&bytes).expect("decodes"), offsets);
        for cut in 0..bytes.len() {
            assert!(Offsets::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(Offsets::decode(&long).is_err());
        let mut outside = offsets.clone();
        outside.next.insert(6, 1);
        assert!(Offsets::decode(&outside.encode()).is_err());
    }
}
