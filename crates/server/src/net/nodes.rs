//! `GET /v1/nodes`: each node of the cluster as this node reaches it,
//! its health and its `/metrics`, so one page (the console's health
//! view) shows every node and its lag without asking other origins.
//!
//! ```text
//!  {"nodes":[{"url":"http://127.0.0.1:7480 (this node)","this":true,
//!             "error":null,"health_status":200,"health":"ok",
//!             "metrics":"# HELP cardinal_up_seconds ..."}, ...]}
//! ```
//!
//! This node first, then each peer of `--peers` in the order listed,
//! asked at once (the cluster's permits and `--peer-timeout`, as for
//! cluster queries). A peer that does not answer has `error` saying why
//! and `null` for the rest; one that answers its health but not its
//! metrics keeps what it answered. The metrics are the Prometheus text
//! each node serves (docs/http.md lists the families): each node's
//! event-time watermark per stream (`cardinal_stream_watermark_seconds`)
//! and, reading Kafka, its records behind per partition
//! (`cardinal_kafka_lag_records`) are its lag. Without `--peers` the
//! list is this node alone.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::Edge;
use super::cluster;
use super::http::{admitted, blocking, health, json};

/// The most bytes of a peer's `/metrics` read: far above a node's own
/// (tens of KiB with a few summaries and partitions), so only a
/// misbehaving peer reaches it; its entry then says so.
pub const NODE_METRICS_BYTES_MAX: u64 = 4 << 20;

/// The most bytes of a peer's `/healthz` read: one message line of at
/// most 1,024 bytes (the error bound of every route), with room.
const NODE_HEALTH_BYTES_MAX: u64 = 4 << 10;

/// One node's entry.
struct Node {
    url: String,
    this: bool,
    error: Option<String>,
    health: Option<(u16, String)>,
    metrics: Option<String>,
}

impl Node {
    fn json(&self) -> String {
        let text = |t: &str| cardinal_export::json_string(t.as_bytes());
        let or_null = |t: Option<&str>| t.map_or_else(|| "null".to_owned(), text);
        format!(
            "{{\"url\":{},\"this\":{},\"error\":{},\"health_status\":{},\"health\":{},\"metrics\":{}}}",
            text(&self.url),
            self.this,
            or_null(self.error.as_deref()),
            self.health
                .as_ref()
                .map_or_else(|| "null".to_owned(), |(s, _)| s.to_string()),
            or_null(self.health.as_ref().map(|(_, t)| t.trim_end())),
            or_null(self.metrics.as_deref()),
        )
    }
}

/// `GET /v1/nodes`.
pub async fn nodes(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &[]) {
        return refused;
    }
    let work = Arc::clone(&edge);
    let Some(metrics) = blocking(move || super::metrics::render(&work)).await else {
        return json(
            StatusCode::INTERNAL_SERVER_ERROR,
            "{\"error\":\"metrics failed\"}\n".to_owned(),
        );
    };
    let (status, text) = health(&edge);
    let this = edge
        .peers
        .as_ref()
        .map_or_else(|| "this node".to_owned(), |peers| peers.this().to_owned());
    let mut list = vec![Node {
        url: this,
        this: true,
        error: None,
        health: Some((status.as_u16(), text)),
        metrics: Some(metrics),
    }];
    if let Some(peers) = &edge.peers {
        let (healths, metrics) = tokio::join!(
            cluster::fetch_text(peers, "/healthz", NODE_HEALTH_BYTES_MAX),
            cluster::fetch_text(peers, "/metrics", NODE_METRICS_BYTES_MAX),
        );
        for ((url, health), metrics) in peers.urls().iter().zip(healths).zip(metrics) {
            let (health, health_error) = match health {
                Ok(answer) => (Some(answer), None),
                Err(why) => (None, Some(why)),
            };
            let (metrics, metrics_error) = match metrics {
                Ok((200, text)) => (Some(text), None),
                Ok((status, text)) => (
                    None,
                    Some(format!(
                        "/metrics answered {status}: {}",
                        text.lines().next().unwrap_or("").trim()
                    )),
                ),
                Err(why) => (None, Some(format!("/metrics: {why}"))),
            };
            list.push(Node {
                url: url.clone(),
                this: false,
                error: health_error.or(metrics_error),
                health,
                metrics,
            });
        }
    }
    let body = format!(
        "{{\"nodes\":[{}]}}\n",
        list.iter().map(Node::json).collect::<Vec<_>>().join(",")
    );
    json(StatusCode::OK, body)
}
