//! Cluster queries: every node answers for the whole cluster.
//!
//! With `--peers`, a live answer (`GET /v1/summaries/{name}`,
//! `GET /v1/overlap`) asks every peer, concurrently, for its *state* of
//! the same selection, merges those states into its own and only then
//! prints: a HyperLogLog union needs registers, not estimates, so the
//! answer is exactly the one a single node holding every record would
//! give (the engine's [`cardinal_engine::Answer::merge`]).
//!
//! ```text
//!   client ── GET /v1/summaries/reach?by=state ──▶ node A (coordinator)
//!                                                   │ at once, each peer on the
//!                                                   │ blocking pool (≤ PEER_REQUESTS_MAX):
//!                     GET /v1/state/reach?by=state  ├──▶ node B ─┐ its answer's rollup
//!                     GET /v1/state/reach?by=state  ├──▶ node C ─┤ as an image, with
//!                                                   │            │ what it covers
//!                     A's own answer meanwhile      │ ◀──────────┘
//!                     merge, check coverage, print ▼
//! ```
//!
//! The state route answers for its own node only and never asks a peer,
//! so no request loops, however the peers are listed.
//!
//! A state body is one line of JSON, then the images:
//!
//! ```text
//!  {"answers":[{"groups_matched":N,"image_bytes":L}, ...],
//!   "covers":[{"topic":"t","partition":0,"next":120}, ...],
//!   "partition_counts":{"t":8}}\n
//!  image 1 (L1 bytes, Rollup::encode_image) image 2 ...
//! ```
//!
//! One answer for a summary query; two (side A, side B, from one view)
//! for an overlap. The images carry their own checksum and are decoded
//! against the coordinator's own summary's shape, so a peer running
//! another schema is refused, never merged.
//!
//! Coverage: each node says, per Kafka partition feeding the stream, the
//! next offset its state reaches ([`Coverage`]). Two nodes covering one
//! partition double-count it: [`CoverageUnion::add`] refuses that,
//! naming both nodes and the partition. Partitions no node covers
//! (0..partition count, less those covered) are listed with the answer.
//!
//! A peer that does not answer within its timeout, or answers an error,
//! fails the query (503, naming the peer and why), unless the request
//! asks for a partial answer (`partial=true`): the answer is then merged
//! from the nodes that answered and says which nodes (and, from
//! coverage, which partitions) it lacks.
//!
//! # Measured
//!
//! 2026-11-28, the 2-core development machine (release build), three
//! nodes and a single server on loopback, one million generated
//! impressions (30 days, 200,000 users; each node a third), summary
//! `reach` of `day, state` (1,500 groups, `count`, `sum`, `hll`); one
//! kept-alive client, 300 requests after 10 warm-up ones
//! (`bench/serve/cluster.sh`; three runs, the machine shared with other
//! builds, so ranges):
//!
//! | request | single server p50 / p99 | cluster of 3 p50 / p99 |
//! |---|---|---|
//! | `reach?by=state&buckets=all` | 0.9-1.6 / 2.9-5.1 ms | 3.6-5.6 / 5.8-9.5 ms |
//! | `overlap` of two providers (`audiences`) | 0.3-0.4 / 0.5-1.5 ms | 1.1-1.2 / 4.9-5.1 ms |
//! | `reach` with every bucket (1,500 rows) | 2.4-3.5 / 7-17 ms | 21-29 / 44-110 ms |
//! | `/v1/state/reach` (1.2 MB) | 2.8 ms | |
//!
//! The last cluster row is the HyperLogLog merges of 3,000 groups'
//! sparse sketches (`Hll::register_insert`, `insert_cold` and sorting
//! were half the coordinator's profile), not the transport.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use crate::frame::Token;
use crate::source::{Coverage, TopicPartition};

/// How long a peer has to answer a state request by default
/// (`--peer-timeout`): a state answer on loopback takes 2 to 3 ms for a
/// summary of 1,500 groups (module doc, "Measured"), and a node that has
/// not answered in 2 s is down or stuck; a live query should say so
/// rather than wait.
pub const PEER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);

/// The most peers `--peers` may list: each query asks each of them, so
/// a longer list is a different design (a tree of coordinators).
pub const PEERS_MAX: usize = 64;

/// The most bytes read from one peer's state answer: 256 MiB, about
/// 20,000 groups of full 14-bit HyperLogLogs (12 KiB each); a peer
/// sending more is refused (named, as a failed peer), so a broken or
/// hostile peer cannot exhaust the coordinator's memory.
pub const STATE_BYTES_MAX: u64 = 256 << 20;

/// The longest first line (the JSON description) of a state answer:
/// 1 MiB, room for the offsets of 10,000 partitions.
pub const STATE_META_BYTES_MAX: usize = 1 << 20;

/// Peer requests in flight at once, over every query this node
/// coordinates: each holds a thread of the blocking pool while it waits,
/// and the pool must keep threads for views and snapshots. A request
/// past it waits for a slot within its peer timeout.
pub const PEER_REQUESTS_MAX: usize = 32;

/// The most answers one state body carries: two (the sides of an
/// overlap).
pub const STATE_ANSWERS_MAX: usize = 2;

/// The media type of a state answer.
pub const STATE_MEDIA_TYPE: &str = "application/vnd.cardinal.state";

/// The other nodes of a cluster, and how this node asks them.
#[derive(Debug)]
pub struct Peers {
    urls: Vec<String>,
    this: String,
    timeout: Duration,
    token: Option<Token>,
    agent: ureq::Agent,
    permits: Arc<tokio::sync::Semaphore>,
    /// Per peer, queries it gave no usable state for
    /// (`cardinal_peer_failures_total`).
    failures: Vec<std::sync::atomic::AtomicU64>,
}

impl Peers {
    /// The peers at `urls` (`http://host:port` each), asked within
    /// `timeout` with `token` (the server's own); `this` names this node
    /// in messages.
    ///
    /// # Errors
    ///
    /// A message naming the URL that is not `http://host:port`, listed
    /// twice, or over [`PEERS_MAX`] peers.
    pub fn new(
        urls: &[String],
        this: String,
        timeout: Duration,
        token: Option<Token>,
    ) -> Result<Self, String> {
        if urls.len() > PEERS_MAX {
            return Err(format!("{} peers listed; at most {PEERS_MAX}", urls.len()));
        }
        let mut checked: Vec<String> = Vec::with_capacity(urls.len());
        for url in urls {
            let url = check_peer_url(url)?;
            if checked.contains(&url) {
                return Err(format!("peer {url} is listed twice"));
            }
            checked.push(url);
        }
        assert!(!timeout.is_zero(), "a peer timeout above zero");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(PEER_REQUESTS_MAX)
            .max_idle_connections_per_host(PEER_REQUESTS_MAX)
            .build()
            .into();
        Ok(Self {
            failures: checked.iter().map(|_| Default::default()).collect(),
            urls: checked,
            this,
            timeout,
            token,
            agent,
            permits: Arc::new(tokio::sync::Semaphore::new(PEER_REQUESTS_MAX)),
        })
    }

    /// The peers' base URLs, as checked.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// How this node is named in messages.
    pub fn this(&self) -> &str {
        &self.this
    }

    /// How long a peer has to answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Counts a query peer `index` gave no usable state for.
    pub fn failed(&self, index: usize) {
        self.failures[index].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Per peer, its URL and the queries it gave no usable state for.
    pub fn failures(&self) -> impl Iterator<Item = (&str, u64)> {
        self.urls.iter().zip(&self.failures).map(|(url, failures)| {
            (
                url.as_str(),
                failures.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
    }
}

/// `url` as `http://host:port` without a trailing slash, or why not.
fn check_peer_url(url: &str) -> Result<String, String> {
    let trimmed = url.trim().trim_end_matches('/');
    let Some(authority) = trimmed.strip_prefix("http://") else {
        return Err(format!(
            "peer {url:?}: an HTTP base URL such as http://10.0.0.2:7480 (HTTPS: a TLS \
             terminator's plain side)"
        ));
    };
    if authority.is_empty()
        || authority.contains(['/', '?', '#', '@', ','])
        || !authority.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "peer {url:?}: host:port only, with no path, query or user"
        ));
    }
    Ok(trimmed.to_owned())
}

/// A number naming this server process among a cluster's, drawn at
/// start (std's per-process random hash keys, the time and the process
/// id): a coordinator that gets a state carrying its own number has
/// itself among its peers, and two peers carrying one number are one
/// node listed twice; either would count its records twice.
pub fn node_id() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// One node's answer to a state request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// The answering process's [`node_id`].
    pub node: u64,
    /// Per answer: the groups it matched and its rollup's image.
    pub answers: Vec<(usize, Vec<u8>)>,
    /// What the node's state covers.
    pub coverage: Coverage,
}

/// The body of a state answer (module doc): the description line, then
/// each answer's image.
pub fn encode_state(
    node: u64,
    answers: &[(usize, &cardinal_rollup::Rollup)],
    coverage: &Coverage,
) -> Vec<u8> {
    assert!(!answers.is_empty() && answers.len() <= STATE_ANSWERS_MAX);
    let mut images = Vec::new();
    let mut described = Vec::with_capacity(answers.len());
    for (groups_matched, rollup) in answers {
        let bytes = rollup.encode_image(&mut images);
        described.push(format!(
            "{{\"groups_matched\":{groups_matched},\"image_bytes\":{bytes}}}"
        ));
    }
    let covers: Vec<String> = coverage
        .partitions
        .iter()
        .map(|(at, next)| {
            format!(
                "{{\"topic\":{},\"partition\":{},\"next\":{next}}}",
                cardinal_export::json_string(at.topic.as_bytes()),
                at.partition
            )
        })
        .collect();
    let counts: Vec<String> = coverage
        .partition_counts
        .iter()
        .map(|(topic, count)| format!("{}:{count}", cardinal_export::json_string(topic.as_bytes())))
        .collect();
    let mut out = format!(
        "{{\"node\":\"{node:016x}\",\"answers\":[{}],\"covers\":[{}],\"partition_counts\":{{{}}}}}\n",
        described.join(","),
        covers.join(","),
        counts.join(",")
    )
    .into_bytes();
    out.extend_from_slice(&images);
    out
}

/// Reads a state answer's body ([`encode_state`]); the images are
/// checked when decoded against the summary's shape.
///
/// # Errors
///
/// A message saying what is malformed.
pub fn decode_state(body: &[u8]) -> Result<NodeState, String> {
    let end = body
        .iter()
        .take(STATE_META_BYTES_MAX)
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("no description line in the first {STATE_META_BYTES_MAX} bytes"))?;
    let meta: serde_json::Value = serde_json::from_slice(&body[..end])
        .map_err(|e| format!("the description line is not JSON: {e}"))?;
    let malformed = |what: &str| format!("the description line has no valid {what}");
    let node = meta["node"]
        .as_str()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or_else(|| malformed("node"))?;
    let listed = meta["answers"]
        .as_array()
        .filter(|a| !a.is_empty() && a.len() <= STATE_ANSWERS_MAX)
        .ok_or_else(|| malformed("answers"))?;
    let mut rest = &body[end + 1..];
    let mut answers = Vec::with_capacity(listed.len());
    for answer in listed {
        let groups = answer["groups_matched"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| malformed("groups_matched"))?;
        let bytes = answer["image_bytes"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= rest.len())
            .ok_or_else(|| malformed("image_bytes (or the body is cut short)"))?;
        answers.push((groups, rest[..bytes].to_vec()));
        rest = &rest[bytes..];
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last image", rest.len()));
    }
    let mut coverage = Coverage::default();
    for cover in meta["covers"]
        .as_array()
        .ok_or_else(|| malformed("covers"))?
    {
        let topic = cover["topic"]
            .as_str()
            .ok_or_else(|| malformed("covers topic"))?;
        let partition = cover["partition"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| p >= 0)
            .ok_or_else(|| malformed("covers partition"))?;
        let next = cover["next"]
            .as_i64()
            .ok_or_else(|| malformed("covers next"))?;
        coverage.partitions.insert(
            TopicPartition {
                topic: topic.to_owned(),
                partition,
            },
            next,
        );
    }
    for (topic, count) in meta["partition_counts"]
        .as_object()
        .ok_or_else(|| malformed("partition_counts"))?
    {
        let count = count
            .as_i64()
            .and_then(|c| i32::try_from(c).ok())
            .filter(|&c| c >= 0)
            .ok_or_else(|| malformed("partition count"))?;
        coverage.partition_counts.insert(topic.clone(), count);
    }
    assert!(answers.len() == listed.len());
    Ok(NodeState {
        node,
        answers,
        coverage,
    })
}

/// Asks every peer for `path_and_query` (a state route's path and
/// query string) at once: per peer, in the order listed, its answer or
/// why there is none (no answer within the timeout, an error status, a
/// body past [`STATE_BYTES_MAX`] or malformed).
pub async fn fetch(peers: &Arc<Peers>, path_and_query: &str) -> Vec<Result<NodeState, String>> {
    ask_all(peers, path_and_query, STATE_BYTES_MAX, |status, body| {
        if status != 200 {
            let text = String::from_utf8_lossy(&body);
            let first = text.lines().next().unwrap_or("").trim();
            return Err(match status {
                401 => format!(
                    "it refused this node's token (401: {first}): give every node the same --token-file"
                ),
                _ => format!("it answered {status}: {first}"),
            });
        }
        decode_state(&body)
    })
    .await
}

/// Asks every peer for `path_and_query` at once, reading at most
/// `limit` bytes of each answer: per peer, in the order listed, its
/// status and body as text, or why there is none (no answer within the
/// timeout, a body past `limit`). Any status is an answer.
pub async fn fetch_text(
    peers: &Arc<Peers>,
    path_and_query: &str,
    limit: u64,
) -> Vec<Result<(u16, String), String>> {
    ask_all(peers, path_and_query, limit, |status, body| {
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    })
    .await
}

/// Asks every peer for `path_and_query` at once, each answer's status
/// and body (at most `limit` bytes) read by `read`, each request on the
/// blocking pool under the [`PEER_REQUESTS_MAX`] permits and bounded by
/// the peer timeout.
async fn ask_all<T: Send + 'static>(
    peers: &Arc<Peers>,
    path_and_query: &str,
    limit: u64,
    read: fn(u16, Vec<u8>) -> Result<T, String>,
) -> Vec<Result<T, String>> {
    let mut tasks = Vec::with_capacity(peers.urls.len());
    for index in 0..peers.urls.len() {
        let peers = Arc::clone(peers);
        let url = format!("{}{path_and_query}", peers.urls[index]);
        tasks.push(tokio::spawn(async move {
            let timeout = peers.timeout;
            let asked = async {
                let permit = Arc::clone(&peers.permits)
                    .acquire_owned()
                    .await
                    .map_err(|_| "the server is stopping".to_owned())?;
                let peers = Arc::clone(&peers);
                tokio::task::spawn_blocking(move || {
                    let answer = ask(&peers, &url, limit).and_then(|(s, b)| read(s, b));
                    drop(permit);
                    answer
                })
                .await
                .map_err(|e| format!("the request failed: {e}"))?
            };
            // The agent's own timeout bounds the request; this one also
            // bounds the wait for a slot.
            match tokio::time::timeout(timeout + timeout / 4, asked).await {
                Ok(answer) => answer,
                Err(_) => Err(format!(
                    "no answer within {} s (--peer-timeout)",
                    timeout.as_secs_f64()
                )),
            }
        }));
    }
    let mut answers = Vec::with_capacity(tasks.len());
    for task in tasks {
        answers.push(
            task.await
                .unwrap_or_else(|e| Err(format!("the request failed: {e}"))),
        );
    }
    assert_eq!(answers.len(), peers.urls.len());
    answers
}

/// One blocking request: the answer's status and body, at most `limit`
/// bytes of it.
fn ask(peers: &Peers, url: &str, limit: u64) -> Result<(u16, Vec<u8>), String> {
    let mut request = peers.agent.get(url);
    if let Some(token) = &peers.token {
        let value = format!("Bearer {}", String::from_utf8_lossy(token.as_bytes()));
        request = request.header("Authorization", &value);
    }
    let words = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) => format!(
            "no answer within {} s (--peer-timeout)",
            peers.timeout.as_secs_f64()
        ),
        ureq::Error::BodyExceedsLimit(_) => format!("its answer is over {limit} bytes"),
        other => other.to_string(),
    };
    let mut response = request.call().map_err(words)?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(words)?;
    Ok((status, body))
}

/// Two nodes' states both cover one partition: the answer would count
/// its records twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoveredTwice {
    /// The partition.
    pub partition: TopicPartition,
    /// The node that covered it first.
    pub first: String,
    /// The node that covered it too.
    pub second: String,
}

impl std::fmt::Display for CoveredTwice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "partition {}/{} is counted by two nodes, {} and {}: each partition must be \
             consumed by exactly one node (check each node's --node and --partitions)",
            self.partition.topic, self.partition.partition, self.first, self.second
        )
    }
}

/// What the states merged into one answer cover together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoverageUnion {
    /// Per covered partition, the next offset its state reaches and the
    /// node whose state covers it.
    pub covers: BTreeMap<TopicPartition, (i64, String)>,
    /// Per topic, its partition count (the largest any node reported: a
    /// topic's partitions are only ever added).
    pub partition_counts: BTreeMap<String, i32>,
}

impl CoverageUnion {
    /// Adds `node`'s coverage.
    ///
    /// # Errors
    ///
    /// [`CoveredTwice`] when a partition `node` covers is covered already.
    pub fn add(&mut self, node: &str, coverage: &Coverage) -> Result<(), CoveredTwice> {
        for (at, next) in &coverage.partitions {
            if let Some((_, first)) = self.covers.get(at) {
                return Err(CoveredTwice {
                    partition: at.clone(),
                    first: first.clone(),
                    second: node.to_owned(),
                });
            }
            self.covers.insert(at.clone(), (*next, node.to_owned()));
        }
        for (topic, count) in &coverage.partition_counts {
            let known = self.partition_counts.entry(topic.clone()).or_insert(0);
            *known = (*known).max(*count);
        }
        Ok(())
    }

    /// The partitions no state covers, as ranges per topic
    /// (`(topic, first, last)`, inclusive), in order.
    pub fn missing(&self) -> Vec<(String, i32, i32)> {
        let mut missing = Vec::new();
        for (topic, &count) in &self.partition_counts {
            let mut next_missing = 0i32;
            let covered = self
                .covers
                .range(
                    TopicPartition {
                        topic: topic.clone(),
                        partition: 0,
                    }..,
                )
                .take_while(|(at, _)| &at.topic == topic)
                .map(|(at, _)| at.partition)
                .filter(|&p| p < count);
            for partition in covered {
                if partition > next_missing {
                    missing.push((topic.clone(), next_missing, partition - 1));
                }
                next_missing = partition + 1;
            }
            if next_missing < count {
                missing.push((topic.clone(), next_missing, count - 1));
            }
        }
        missing
    }

    /// `topic/partition=next,...` over every covered partition (the
    /// `Cardinal-Covers` header), `None` when none is.
    pub fn covers_text(&self) -> Option<String> {
        if self.covers.is_empty() {
            return None;
        }
        let mut text = String::new();
        for (at, (next, _)) in &self.covers {
            if !text.is_empty() {
                text.push(',');
            }
            let _ = write!(text, "{}/{}={next}", at.topic, at.partition);
        }
        Some(text)
    }

    /// `topic/first-last,topic/p,...` over the missing partitions (the
    /// `Cardinal-Missing-Partitions` header), `None` when none is.
    pub fn missing_text(&self) -> Option<String> {
        let missing = self.missing();
        if missing.is_empty() {
            return None;
        }
        let ranges: Vec<String> = missing
            .iter()
            .map(|(topic, first, last)| {
                if first == last {
                    format!("{topic}/{first}")
                } else {
                    format!("{topic}/{first}-{last}")
                }
            })
            .collect();
        Some(ranges.join(","))
    }
}

/// `text` as a header value: visible ASCII and spaces only (anything
/// else becomes `?`), cut to [`crate::frame::MESSAGE_BYTES_MAX`].
pub fn header_text(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    out.truncate(crate::frame::MESSAGE_BYTES_MAX);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.to_owned(),
            partition,
        }
    }

    fn coverage(covers: &[(&str, i32, i64)], counts: &[(&str, i32)]) -> Coverage {
        Coverage {
            partitions: covers.iter().map(|&(t, p, n)| (at(t, p), n)).collect(),
            partition_counts: counts.iter().map(|&(t, c)| (t.to_owned(), c)).collect(),
        }
    }

    #[test]
    fn a_partition_two_nodes_cover_is_refused_naming_both() {
        let mut union = CoverageUnion::default();
        union
            .add(
                "http://a:1",
                &coverage(&[("t", 0, 10), ("t", 1, 5)], &[("t", 4)]),
            )
            .expect("first");
        union
            .add("http://b:1", &coverage(&[("t", 2, 7)], &[("t", 4)]))
            .expect("disjoint");
        let twice = union
            .add(
                "http://c:1",
                &coverage(&[("t", 3, 1), ("t", 1, 9)], &[("t", 4)]),
            )
            .expect_err("t/1 twice");
        assert_eq!(twice.partition, at("t", 1));
        assert_eq!(twice.first, "http://a:1");
        assert_eq!(twice.second, "http://c:1");
        let text = twice.to_string();
        assert!(
            text.contains("t/1") && text.contains("http://a:1") && text.contains("http://c:1"),
            "{text}"
        );
        // Another topic's partition 1 is another partition.
        union
            .add("http://d:1", &coverage(&[("u", 1, 3)], &[("u", 2)]))
            .expect("another topic");
    }

    #[test]
    fn missing_partitions_are_listed_as_ranges() {
        let mut union = CoverageUnion::default();
        assert_eq!(union.missing(), vec![]);
        assert_eq!(union.covers_text(), None);
        assert_eq!(union.missing_text(), None);
        union
            .add(
                "a",
                &coverage(&[("t", 0, 10), ("t", 3, 4)], &[("t", 8), ("v", 2)]),
            )
            .expect("a");
        union
            .add("b", &coverage(&[("t", 7, 1)], &[("t", 6)]))
            .expect("b");
        assert_eq!(
            union.missing(),
            vec![
                ("t".to_owned(), 1, 2),
                ("t".to_owned(), 4, 6),
                ("v".to_owned(), 0, 1)
            ]
        );
        assert_eq!(union.missing_text().as_deref(), Some("t/1-2,t/4-6,v/0-1"));
        assert_eq!(union.covers_text().as_deref(), Some("t/0=10,t/3=4,t/7=1"));
        union
            .add(
                "c",
                &coverage(
                    &[
                        ("t", 1, 1),
                        ("t", 2, 1),
                        ("t", 4, 1),
                        ("t", 5, 1),
                        ("t", 6, 1),
                        ("v", 0, 0),
                        ("v", 1, 0),
                    ],
                    &[],
                ),
            )
            .expect("c");
        assert_eq!(union.missing(), vec![]);
    }

    #[test]
    fn a_state_body_round_trips_and_malformed_ones_are_refused() {
        let rollup = cardinal_rollup::Rollup::new(
            cardinal_rollup::Shape {
                aggs: vec![cardinal_rollup::AggKind::CountAll],
            },
            cardinal_rollup::Limits::default(),
        )
        .expect("a rollup");
        let covered = coverage(&[("imp", 0, 42), ("imp", 3, 7)], &[("imp", 4)]);
        let body = encode_state(0xfeed, &[(3, &rollup), (0, &rollup)], &covered);
        let state = decode_state(&body).expect("decodes");
        assert_eq!(state.node, 0xfeed);
        assert_eq!(state.coverage, covered);
        assert_eq!(state.answers.len(), 2);
        assert_eq!(state.answers[0].0, 3);
        let mut image = Vec::new();
        rollup.encode_image(&mut image);
        assert_eq!(state.answers[1].1, image);

        let cut = &body[..body.len() - 1];
        assert!(decode_state(cut).expect_err("cut").contains("image_bytes"));
        let mut longer = body.clone();
        longer.push(0);
        assert!(
            decode_state(&longer)
                .expect_err("longer")
                .contains("after the last image")
        );
        assert!(decode_state(b"no newline").is_err());
        assert!(decode_state(b"{\"node\":\"1\",\"answers\":[]}\n").is_err());
        assert!(
            decode_state(&body[body.iter().position(|&b| b == b',').expect("a comma")..]).is_err()
        );
        assert_ne!(node_id(), node_id(), "drawn afresh");
        assert!(decode_state(b"[1]\n").is_err());
    }

    #[test]
    fn peer_urls_are_base_urls() {
        let peers = Peers::new(
            &[
                "http://127.0.0.1:7481/".to_owned(),
                " http://b:7480".to_owned(),
            ],
            "http://a:7480".to_owned(),
            PEER_TIMEOUT_DEFAULT,
            None,
        )
        .expect("valid");
        assert_eq!(peers.urls(), ["http://127.0.0.1:7481", "http://b:7480"]);
        for bad in [
            "127.0.0.1:7481",
            "https://a:1",
            "http://a:1/v1",
            "http://",
            "http://u@a:1",
        ] {
            assert!(
                Peers::new(&[bad.to_owned()], String::new(), PEER_TIMEOUT_DEFAULT, None).is_err(),
                "{bad}"
            );
        }
        let twice = vec!["http://a:1".to_owned(), "http://a:1/".to_owned()];
        assert!(
            Peers::new(&twice, String::new(), PEER_TIMEOUT_DEFAULT, None)
                .expect_err("twice")
                .contains("twice")
        );
    }
}
