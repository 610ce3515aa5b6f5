//! The HTTP API (axum): ingest, live answers, rejects, metrics, health.
//! Every route, parameter, status and limit is described for users in
//! `docs/http.md`; keep the two in step.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/streams/{name}` | a CSV, NDJSON or JSON-array body; `Idempotency-Key` (scoped to the stream) makes retries count once; 200 `{accepted, rejected, duplicate, first_rejects, sequence}` after the log sync; 413 over [`super::Edge::body_bytes_max`]; 408 past the body's read deadline; 415 for a media type or charset not read; 422 when the key was used on this stream with another body; 503 + `Retry-After` when queues or the in-flight budget are full, or the key table is full of recent keys; 400 for an unknown stream or bad header line |
//! | `GET /v1/summaries` | the streams and, per summary, groups, bytes and newest bucket |
//! | `GET /v1/summaries/{name}?from=&to=&where=&by=&buckets=all&format=json\|csv\|table&partial=` | a live answer, printed as `cardinal run` prints; with `--peers`, for the whole cluster |
//! | `GET /v1/overlap?summary=&aggregate=&a=&b=&from=&to=&format=&partial=` | two groups' audiences' overlap (conditions `a` and `b`); with `--peers`, for the whole cluster |
//! | `GET /v1/state/{name}?from=&to=&where=&by=&buckets=` or `?overlap=true&a=&b=&from=&to=` | this node's own state of a selection, for a coordinating peer ([`super::cluster`]); never asks another node |
//! | `GET /v1/rejects` | the newest rejected lines |
//! | `POST /v1/sql?format=json\|jsonl\|csv\|table&partial=` | one SELECT over a summary (the body); 400 `{"error": ...}` with the caret text for a bad query; with `--peers`, for the whole cluster |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /healthz` | 200 once recovered and ready, 503 once failed |
//! | `GET /v1/nodes` | this node and each peer: health and `/metrics` text ([`super::nodes`]) |
//! | `GET /`, `GET /console/{file}` | the browser console ([`super::console`]) |
//!
//! A query parameter a route does not read is refused (400, naming the
//! ones it reads): `bucket=all` for `buckets=all` must not pass as a
//! query that silently ignored it.
//!
//! CSV bodies are records in the stream's declared column order; with
//! `Content-Type: text/csv; header=present` (RFC 4180) the first line is a
//! header naming the columns, matched to the declared ones by name in any
//! order (as `cardinal run` and `cardinal send` read them; a missing or
//! doubled column is a 400 naming it) and not counted. An
//! NDJSON stream also takes a JSON array of records (a body whose first
//! character other than white space is `[`): each element becomes one
//! line before the body is logged, so the log holds NDJSON either way. A
//! `charset` other than UTF-8 (or its subset US-ASCII) is refused with
//! 415, never read as UTF-8.
//!
//! Bodies: the bytes of ingest bodies read and awaiting their
//! acknowledgement are bounded by [`super::HTTP_IN_FLIGHT_BYTES_MAX`], and
//! a body reserves what it has *read*, as it reads it, never what its
//! `Content-Length` announces: a client that announces 16 MiB and sends
//! nothing holds nothing. A body must arrive by its deadline,
//! [`super::BODY_READ_TIMEOUT`] extended by a second per
//! [`super::BODY_RATE_MIN_BYTES_PER_SEC`] read, or it is answered 408 and
//! its connection closed, so a stalled body cannot hold a connection
//! either.
//!
//! With a token configured every route but `/healthz` and the console's
//! files needs
//! `Authorization: Bearer <token>` (the scheme in any case, RFC 7235
//! §2.1; the token compared in constant time). Nothing from a request
//! becomes a path.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, HttpBody as _};
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cardinal_engine::{
    Answer, Buckets, Selector, answer, hll_aggregates, overlap_of, overlap_query,
};
use cardinal_event::{ColumnType, Timestamp, Value};

use super::Edge;
use super::cluster::{self, CoverageUnion, NodeState};
use crate::frame::Format;
use crate::keys;
use crate::service::{Origin, Refused};
use crate::source::Coverage;

/// The routes, as `cardinal_http_requests_total` labels them (a request
/// no route matched is labelled `unmatched`).
pub const ROUTES: [&str; 12] = [
    "/v1/streams/{name}",
    "/v1/summaries",
    "/v1/summaries/{name}",
    "/v1/overlap",
    "/v1/rejects",
    "/metrics",
    "/healthz",
    "/v1/state/{name}",
    "/v1/sql",
    "/",
    "/console/{file}",
    "/v1/nodes",
];

/// The query parameters each route reads; any other is refused.
const SUMMARY_PARAMS: [&str; 7] = ["from", "to", "where", "by", "buckets", "format", "partial"];
const OVERLAP_PARAMS: [&str; 8] = [
    "summary",
    "aggregate",
    "a",
    "b",
    "from",
    "to",
    "format",
    "partial",
];
const STATE_PARAMS: [&str; 9] = [
    "from", "to", "where", "by", "buckets", "overlap", "a", "b", "sql",
];
const SQL_PARAMS: [&str; 2] = ["format", "partial"];

/// The longest SQL query a coordinator passes to its peers, in the
/// state request's URL: 16 KiB, under every HTTP stack's request-line
/// limit (hyper's is 64 KiB). A longer query is answered by one node
/// only when it has no peers.
pub const CLUSTER_SQL_BYTES_MAX: usize = 16 << 10;
/// The parameters of a summary query that select its groups: what a
/// coordinator passes on to its peers' state route.
const SELECTION_PARAMS: [&str; 5] = ["from", "to", "where", "by", "buckets"];

/// The router over `edge`.
pub fn router(edge: Arc<Edge>) -> Router {
    Router::new()
        .route(ROUTES[0], post(ingest))
        .route(ROUTES[1], get(summaries))
        .route(ROUTES[2], get(summary))
        .route(ROUTES[3], get(overlap_route))
        .route(ROUTES[4], get(rejects))
        .route(ROUTES[5], get(metrics))
        .route(ROUTES[6], get(healthz))
        .route(ROUTES[7], get(state))
        .route(ROUTES[8], post(sql_route))
        .route(ROUTES[9], get(super::console::index))
        .route(ROUTES[10], get(super::console::asset))
        .route(ROUTES[11], get(super::nodes::nodes))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&edge),
            track,
        ))
        .with_state(edge)
}

/// Counts each request by route and status, and times live answers.
async fn track(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .and_then(|matched| ROUTES.iter().find(|r| **r == matched.as_str()))
        .copied()
        .unwrap_or("unmatched");
    let started = Instant::now();
    let response = next.run(request).await;
    if route == ROUTES[2] || route == ROUTES[3] || route == ROUTES[8] {
        edge.metrics.query_seconds.observe(started.elapsed());
    }
    let status = response.status().as_u16();
    *edge
        .metrics
        .http_requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((route, status))
        .or_default() += 1;
    response
}

/// Refuses a query parameter outside `known`, naming those it reads.
#[allow(
    clippy::result_large_err,
    reason = "the refusal is the response itself, built once per refused request"
)]
pub(super) fn known_params(
    params: &HashMap<String, String>,
    known: &[&str],
) -> Result<(), Response> {
    let mut unknown: Vec<&str> = params
        .keys()
        .map(String::as_str)
        .filter(|name| !known.contains(name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort_unstable();
    let reads = if known.is_empty() {
        "this route reads no query parameters".to_owned()
    } else {
        format!("this route reads {}", known.join(", "))
    };
    Err(plain(
        StatusCode::BAD_REQUEST,
        format!("unknown query parameter {}: {reads}", unknown.join(", ")),
    ))
}

/// The longest message a plain-text error carries: a refusal quoting a
/// request (a 40 KB condition, say) is cut here, as the native
/// protocol cuts its error messages.
const MESSAGE_BYTES_MAX: usize = crate::frame::MESSAGE_BYTES_MAX;

/// `message` cut to at most [`crate::frame::MESSAGE_BYTES_MAX`] bytes at a character
/// boundary, saying how much was cut.
pub fn cut_message(message: String) -> String {
    if message.len() <= MESSAGE_BYTES_MAX {
        return message;
    }
    let mut end = MESSAGE_BYTES_MAX - 40;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = message.len() - end;
    let out = format!("{} [{cut} more bytes]", &message[..end]);
    assert!(out.len() <= MESSAGE_BYTES_MAX, "the cut message fits");
    out
}

fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    let mut body = cut_message(message.into());
    body.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

pub(super) fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// What every API route checks first, in this order: the token (a
/// request without it learns nothing more), then the parameters the
/// route knows ([`known_params`]).
#[allow(
    clippy::result_large_err,
    reason = "the refusal is the response itself, built once per refused request"
)]
pub(super) fn admitted(
    edge: &Edge,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
    known: &[&str],
) -> Result<(), Response> {
    authorized(edge, headers)?;
    known_params(params, known)
}

#[allow(
    clippy::result_large_err,
    reason = "the refusal is the response itself, built once per refused request"
)]
fn authorized(edge: &Edge, headers: &HeaderMap) -> Result<(), Response> {
    let Some(token) = &edge.protocol.token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .and_then(|v| crate::frame::Token::new(v.as_bytes()).ok());
    match given {
        Some(given) if token.matches(&given) => Ok(()),
        _ => Err((
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid bearer token is required\n",
        )
            .into_response()),
    }
}

/// The credentials of an `Authorization: Bearer <token>` value: the
/// scheme is matched in any case (RFC 7235 §2.1), white space around the
/// token is dropped.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|token| !token.is_empty())
}

/// The body's format from its `Content-Type`, and whether a CSV body
/// starts with a header line.
fn body_format(headers: &HeaderMap) -> Result<Option<(Format, bool)>, (StatusCode, String)> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            "Content-Type is not text".to_owned(),
        )
    })?;
    content_type(value).map_err(|why| (StatusCode::UNSUPPORTED_MEDIA_TYPE, why))
}

/// Reads a `Content-Type` value: the body's format (`None`: the stream's
/// own), and whether a CSV body starts with a header line
/// (`header=present`, RFC 4180). Refuses (for a 415) a media type not
/// read here, and a `charset` other than UTF-8 or US-ASCII: the bytes
/// are read as UTF-8, and UTF-16 read so would be garbage counted.
pub fn content_type(value: &str) -> Result<Option<(Format, bool)>, String> {
    let value = value.to_ascii_lowercase();
    let mut parts = value.split(';').map(str::trim);
    let mime = parts.next().unwrap_or("");
    let mut header_present = false;
    for parameter in parts {
        let (name, text) = parameter.split_once('=').unwrap_or((parameter, ""));
        let text = text.trim().trim_matches('"');
        match name.trim() {
            "header" => header_present = text == "present",
            "charset" if !matches!(text, "utf-8" | "utf8" | "us-ascii") => {
                return Err(format!(
                    "charset={text} is not read here: send UTF-8 (charset=utf-8)"
                ));
            }
            _ => {}
        }
    }
    match mime {
        "text/csv" => Ok(Some((Format::Csv, header_present))),
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/json" => Ok(Some((Format::Ndjson, false))),
        // curl --data-binary sends this by default: the stream's format.
        "application/x-www-form-urlencoded" | "application/octet-stream" | "text/plain" => Ok(None),
        other => Err(format!(
            "Content-Type {other} is not read here: text/csv or application/x-ndjson"
        )),
    }
}

async fn ingest(
    State(edge): State<Arc<Edge>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let headers = request.headers().clone();
    if let Err(refused) = admitted(&edge, &headers, &params, &[]) {
        return refused;
    }
    let service = edge.service();
    let format = match body_format(&headers) {
        Ok(format) => format,
        Err((status, why)) => return plain(status, why),
    };
    let stream_format = match service.check_stream(&name, Format::Csv) {
        Ok(_) => Format::Csv,
        Err(Refused::WrongFormat { .. }) => Format::Ndjson,
        Err(refused) => return plain(StatusCode::BAD_REQUEST, refused.to_string()),
    };
    let (format, header_present) = format.unwrap_or((stream_format, false));
    let origin = match headers.get("idempotency-key") {
        None => Origin::None,
        Some(value) => match value.to_str().map(str::to_owned) {
            Ok(key) => match keys::check_key(&key) {
                Ok(()) => Origin::Key(key),
                Err(why) => return plain(StatusCode::BAD_REQUEST, why),
            },
            Err(_) => return plain(StatusCode::BAD_REQUEST, "Idempotency-Key is not text"),
        },
    };
    let limit = edge.body_bytes_max;
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = length
        && length > limit as u64
    {
        return too_large(limit);
    }
    // Memory: the bodies in flight are bounded, whatever the clients; a
    // body reserves what it has read, and is held to a deadline.
    let mut in_flight = InFlight {
        edge: &edge,
        bytes: 0,
    };
    let mut body = match read_body(&edge, request.into_body(), limit, &mut in_flight).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    if format == Format::Ndjson && body.trim_ascii_start().starts_with(b"[") {
        // The lines take as many bytes again as the array, until it drops.
        if !in_flight.grow(body.len() as u64) {
            return closing(busy(
                &edge,
                "too many request bodies in flight: retry later",
            ));
        }
        body = match json_array_lines(&body) {
            Ok(lines) => lines,
            Err(why) => return plain(StatusCode::BAD_REQUEST, why),
        };
    }
    let key = match &origin {
        Origin::Key(key) => Some(key.clone()),
        _ => None,
    };
    // The service copies what it takes (into the engine's queue and the
    // log's), so the body is dropped before the wait.
    let reply = {
        // A header line is matched to the stream's columns by name, in any
        // order, and kept with the records (the service checks it).
        let header = header_present && format == Format::Csv;
        let reply = match service.ingest(origin, &name, format, header, &body) {
            Ok(reply) => reply,
            Err(Refused::Full) => return busy(&edge, "the stream's queues are full: retry later"),
            Err(refused @ Refused::KeysFull { .. }) => {
                let secs = refused.retry_after_secs().unwrap_or(1);
                let mut response = busy(&edge, &refused.to_string());
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                return response;
            }
            Err(refused @ Refused::KeyReused { .. }) => {
                return plain(StatusCode::UNPROCESSABLE_ENTITY, refused.to_string());
            }
            // A failed log recovers in process: the client retries.
            Err(refused @ Refused::Stopped(_)) => return busy(&edge, &refused.to_string()),
            Err(Refused::TooLarge { .. }) => return too_large(limit),
            Err(refused) => return plain(StatusCode::BAD_REQUEST, refused.to_string()),
        };
        drop(body);
        reply
    };
    match reply.await {
        Ok(Ok(acked)) => {
            if let (Some(key), false) = (&key, acked.duplicate) {
                service.key_answered(&name, key, acked.accepted, acked.rejected);
            }
            let rejects: Vec<String> = acked
                .first_rejects
                .iter()
                .map(|line| cardinal_export::json_string(line.as_bytes()))
                .collect();
            json(
                StatusCode::OK,
                format!(
                    "{{\"accepted\":{},\"rejected\":{},\"duplicate\":{},\"sequence\":{},\"first_rejects\":[{}]}}\n",
                    acked.accepted,
                    acked.rejected,
                    acked.duplicate,
                    acked.sequence,
                    rejects.join(",")
                ),
            )
        }
        Ok(Err(why)) => plain(StatusCode::SERVICE_UNAVAILABLE, why),
        Err(_) => plain(StatusCode::SERVICE_UNAVAILABLE, "the service stopped"),
    }
}

/// A 503 with `Retry-After`, counted.
fn busy(edge: &Edge, why: &str) -> Response {
    edge.metrics.http_busy.fetch_add(1, Ordering::Relaxed);
    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, why);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A response after which the connection is closed (the body was not
/// all read: what is left of it must not be taken for a next request).
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads an ingest body of at most `limit` bytes, growing `in_flight` by
/// each piece before keeping it, by the deadline the module doc gives.
#[allow(
    clippy::result_large_err,
    reason = "the refusal is the response itself, built once per refused request"
)]
async fn read_body(
    edge: &Edge,
    mut body: Body,
    limit: usize,
    in_flight: &mut InFlight<'_>,
) -> Result<Vec<u8>, Response> {
    let started = tokio::time::Instant::now();
    let mut bytes = Vec::new();
    loop {
        let earned = bytes.len() as u64 / super::BODY_RATE_MIN_BYTES_PER_SEC;
        let deadline = started + super::BODY_READ_TIMEOUT + Duration::from_secs(earned);
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout_at(deadline, next).await {
            Err(_) => {
                edge.metrics
                    .http_body_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                return Err(closing(plain(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive in time ({} bytes in {} s; a body gets {} s \
                         and one more per {} bytes)",
                        bytes.len(),
                        started.elapsed().as_secs(),
                        super::BODY_READ_TIMEOUT.as_secs(),
                        super::BODY_RATE_MIN_BYTES_PER_SEC
                    ),
                )));
            }
            Ok(None) => return Ok(bytes),
            Ok(Some(Err(error))) => {
                return Err(closing(plain(
                    StatusCode::BAD_REQUEST,
                    format!("reading the body failed: {error}"),
                )));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers carry nothing ingest reads.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if bytes.len() + data.len() > limit {
            return Err(closing(too_large(limit)));
        }
        if !in_flight.grow(data.len() as u64) {
            return Err(closing(busy(
                edge,
                "too many request bodies in flight: retry later",
            )));
        }
        bytes.extend_from_slice(&data);
    }
}

/// A JSON array of records as NDJSON: each element on a line of its own,
/// in order. Elements are copied as they are parsed (no tree is built);
/// a line break inside an element can only be white space between its
/// tokens (JSON strings escape theirs), so it becomes a space.
pub fn json_array_lines(body: &[u8]) -> Result<Vec<u8>, String> {
    struct Lines<'o>(&'o mut Vec<u8>);
    impl<'de> serde::de::Visitor<'de> for Lines<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array of records")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(record) = seq.next_element::<&'de serde_json::value::RawValue>()? {
                self.0.extend(
                    record
                        .get()
                        .bytes()
                        .map(|b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
                );
                self.0.push(b'\n');
            }
            Ok(())
        }
    }
    let mut out = Vec::with_capacity(body.len());
    let mut parser = serde_json::Deserializer::from_slice(body);
    serde::Deserializer::deserialize_seq(&mut parser, Lines(&mut out))
        .and_then(|()| parser.end())
        .map_err(|e| format!("the body starts with '[' but is not a JSON array of records: {e}"))?;
    assert!(
        out.len() <= body.len() + 1,
        "no line is longer than its element"
    );
    Ok(out)
}

/// Bytes of a request body counted against
/// [`super::HTTP_IN_FLIGHT_BYTES_MAX`] until dropped, grown as the body
/// is read.
struct InFlight<'e> {
    edge: &'e Edge,
    bytes: u64,
}

impl InFlight<'_> {
    /// Counts `more` bytes; `false` (nothing counted) when that would
    /// pass the budget while other bodies hold part of it. A body alone
    /// may always grow to its limit, so one large body is never refused.
    fn grow(&mut self, more: u64) -> bool {
        let counter = &self.edge.metrics.http_in_flight_bytes;
        let before = counter.fetch_add(more, Ordering::AcqRel);
        assert!(before >= self.bytes, "the counter holds this body's bytes");
        let others = before - self.bytes;
        if others > 0 && before + more > super::HTTP_IN_FLIGHT_BYTES_MAX {
            counter.fetch_sub(more, Ordering::AcqRel);
            return false;
        }
        self.bytes += more;
        true
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.edge
            .metrics
            .http_in_flight_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

fn too_large(limit: usize) -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "a body is at most {limit} bytes (--body-max): split it into several requests at \
             record ends, or use `cardinal send`, which does"
        ),
    )
}

/// Runs `f` on a blocking thread (views merge the workers' groups).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// The most bytes of a peer's `GET /v1/summaries?scope=node` read: a
/// summary's entry is well under 4 KiB (its columns' names and types),
/// so this is room for a thousand summaries; a peer sending more is
/// listed as missing, saying so.
pub const NODE_SUMMARIES_BYTES_MAX: u64 = 4 << 20;

/// One summary as one node holds it (`GET /v1/summaries`).
struct Listed {
    name: String,
    stream: String,
    /// The `"bucket"`, `"dimensions"` and `"aggregates"` members
    /// ([`schema_json`]).
    schema: String,
    groups: u64,
    bytes: u64,
    /// The start of its newest bucket (RFC 3339), `None` without one.
    newest_bucket: Option<String>,
}

/// `GET /v1/summaries`: the streams and, per summary, its table and how
/// much it holds. With `--peers`, unless `scope=node`, each peer is
/// asked for its own list at once and `groups`, `bytes` and
/// `newest_bucket` are the cluster's (summed, summed, the newest), with
/// each node's own under `"nodes"`; a peer that does not answer is
/// left out and named (`Cardinal-Nodes`, `Cardinal-Missing-Node`), the
/// list still answered: it says what can be asked, not an answer.
async fn summaries(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &["scope"]) {
        return refused;
    }
    let this_node_only = match params.get("scope").map(String::as_str) {
        None => false,
        Some("node") => true,
        Some(other) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("scope {other:?}: the only scope is node (this node's own list)"),
            );
        }
    };
    let asked = match (&edge.peers, this_node_only) {
        (Some(peers), false) => {
            let peers = Arc::clone(peers);
            Some(tokio::spawn(async move {
                cluster::fetch_text(&peers, "/v1/summaries?scope=node", NODE_SUMMARIES_BYTES_MAX)
                    .await
            }))
        }
        _ => None,
    };
    let work = Arc::clone(&edge);
    let local = blocking(move || -> anyhow::Result<(Vec<String>, Vec<Listed>)> {
        let service = work.service();
        let plan = service.plan();
        let mut streams = Vec::new();
        for name in service.streams() {
            let declared = plan
                .streams
                .iter()
                .find(|s| s.name == name)
                .expect("the service's streams are the plan's");
            let columns: Vec<String> = declared
                .schema
                .columns
                .iter()
                .map(|c| cardinal_export::json_string(c.name.as_bytes()))
                .collect();
            streams.push(format!(
                "{{\"name\":{},\"columns\":[{}]}}",
                cardinal_export::json_string(name.as_bytes()),
                columns.join(",")
            ));
        }
        let described = cardinal_engine::sql::describe(plan)?;
        let mut summaries = Vec::new();
        for index in 0..service.streams().len() {
            let view = service.view(index)?;
            for stats in view.summary_stats() {
                let described = described.iter().find(|d| d.name == stats.name);
                // A summary without a time bucket keeps its groups at
                // bucket 0: it has no newest bucket to name.
                let bucketed = described.is_none_or(|d| d.bucket.is_some());
                summaries.push(Listed {
                    schema: described.map_or_else(String::new, schema_json),
                    stream: service.streams()[index].to_owned(),
                    groups: stats.groups as u64,
                    bytes: stats.bytes as u64,
                    newest_bucket: stats
                        .newest_bucket
                        .filter(|_| bucketed)
                        .map(|t| t.to_string()),
                    name: stats.name,
                });
            }
        }
        Ok((streams, summaries))
    })
    .await;
    let (streams, summaries) = match local {
        Some(Ok(local)) => local,
        Some(Err(e)) => return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        None => return plain(StatusCode::INTERNAL_SERVER_ERROR, "the view failed"),
    };
    // With peers: per node that answered, its URL and, per summary name,
    // what it holds (this node first); and the headers saying which
    // nodes those are.
    let mut nodes: Vec<(String, Holdings)> = Vec::new();
    let mut gathered = Gathered::default();
    if let (Some(asked), Some(peers)) = (asked, &edge.peers) {
        let answers = asked.await.unwrap_or_else(|e| {
            peers
                .urls()
                .iter()
                .map(|_| Err(format!("the request failed: {e}")))
                .collect()
        });
        nodes.push((
            peers.this().to_owned(),
            summaries
                .iter()
                .map(|l| (l.name.clone(), (l.groups, l.bytes, l.newest_bucket.clone())))
                .collect(),
        ));
        for (url, answer) in peers.urls().iter().zip(answers) {
            match answer.and_then(|(status, body)| peer_summaries(status, &body)) {
                Ok(held) => nodes.push((url.clone(), held)),
                Err(why) => gathered.missing.push((url.clone(), why)),
            }
        }
        gathered.nodes = Some((nodes.len(), peers.urls().len() + 1));
    }
    let text = |t: &str| cardinal_export::json_string(t.as_bytes());
    let bucket_json = |t: Option<&str>| t.map_or_else(|| "null".to_owned(), text);
    let mut listed = Vec::with_capacity(summaries.len());
    for l in &summaries {
        let (mut groups, mut bytes, mut newest) = (l.groups, l.bytes, l.newest_bucket.as_deref());
        let mut each = String::new();
        if !nodes.is_empty() {
            (groups, bytes, newest) = (0, 0, None);
            let mut entries = Vec::with_capacity(nodes.len());
            for (url, held) in &nodes {
                let Some((g, b, t)) = held.get(&l.name) else {
                    continue;
                };
                groups = groups.saturating_add(*g);
                bytes = bytes.saturating_add(*b);
                // RFC 3339 instants of one format order as text.
                if let Some(t) = t.as_deref()
                    && newest.is_none_or(|n| t > n)
                {
                    newest = Some(t);
                }
                entries.push(format!(
                    "{{\"url\":{},\"groups\":{g},\"bytes\":{b},\"newest_bucket\":{}}}",
                    text(url),
                    bucket_json(t.as_deref())
                ));
            }
            each = format!(",\"nodes\":[{}]", entries.join(","));
        }
        listed.push(format!(
            "{{\"name\":{},\"stream\":{},{}\"groups\":{groups},\"bytes\":{bytes},\"newest_bucket\":{}{each}}}",
            text(&l.name),
            text(&l.stream),
            l.schema,
            bucket_json(newest),
        ));
    }
    let mut response = json(
        StatusCode::OK,
        format!(
            "{{\"streams\":[{}],\"summaries\":[{}]}}\n",
            streams.join(","),
            listed.join(",")
        ),
    );
    gathered.headers(&mut response);
    response
}

/// What one node holds, per summary name: its groups, bytes and newest
/// bucket (`GET /v1/summaries`).
type Holdings = HashMap<String, (u64, u64, Option<String>)>;

/// A peer's `GET /v1/summaries?scope=node` answer: per summary name, its
/// groups, bytes and newest bucket; or why it is not one.
fn peer_summaries(status: u16, body: &str) -> Result<Holdings, String> {
    if status != 200 {
        let first = body.lines().next().unwrap_or("").trim();
        return Err(format!("it answered {status}: {first}"));
    }
    let malformed = |why: &str| format!("its summary list is malformed: {why}");
    let value: serde_json::Value =
        serde_json::from_str(body).map_err(|e| malformed(&e.to_string()))?;
    let list = value["summaries"]
        .as_array()
        .ok_or_else(|| malformed("no \"summaries\" array"))?;
    let mut held = HashMap::with_capacity(list.len());
    for entry in list {
        let name = entry["name"]
            .as_str()
            .ok_or_else(|| malformed("a summary without a name"))?;
        let count = |member: &str| {
            entry[member]
                .as_u64()
                .ok_or_else(|| malformed(&format!("summary {name} without {member}")))
        };
        let newest = match &entry["newest_bucket"] {
            serde_json::Value::Null => None,
            serde_json::Value::String(t) => Some(t.clone()),
            _ => return Err(malformed(&format!("summary {name}'s newest_bucket"))),
        };
        held.insert(name.to_owned(), (count("groups")?, count("bytes")?, newest));
    }
    Ok(held)
}

/// A summary's table as `GET /v1/summaries` lists it: `"bucket"`,
/// `"dimensions"` and `"aggregates"` members, each followed by a comma.
fn schema_json(d: &cardinal_engine::sql::Described) -> String {
    let name = |n: &str| cardinal_export::json_string(n.as_bytes());
    let columns = |list: &[cardinal_export::TableColumn]| {
        list.iter()
            .map(|c| {
                format!(
                    "{{\"name\":{},\"type\":{}}}",
                    name(&c.name),
                    name(c.ty.pg_name())
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let bucket = d.bucket.as_ref().map_or_else(
        || "null".to_owned(),
        |(column, unit)| format!("{{\"column\":{},\"unit\":{}}}", name(column), name(unit)),
    );
    let aggregates: Vec<String> = d
        .aggregates
        .iter()
        .map(|(n, kind, own)| {
            format!(
                "{{\"name\":{},\"kind\":{},\"columns\":[{}]}}",
                name(n),
                name(kind),
                columns(own)
            )
        })
        .collect();
    format!(
        "\"bucket\":{bucket},\"dimensions\":[{}],\"aggregates\":[{}],",
        columns(&d.dimensions),
        aggregates.join(",")
    )
}

fn parse_time(name: &str, text: Option<&String>) -> Result<Option<Timestamp>, String> {
    let Some(text) = text else { return Ok(None) };
    match Value::parse(text.as_bytes(), ColumnType::Timestamp) {
        Ok(Value::Time(t)) => Ok(Some(t)),
        _ => Err(format!(
            "{name}={text:?} is not a time (2026-11-01, 2026-11-01T12:00:00Z, or epoch seconds or milliseconds such as 1793491200000)"
        )),
    }
}

/// A request's `from=` and `to=`.
fn time_range(
    params: &HashMap<String, String>,
) -> Result<(Option<Timestamp>, Option<Timestamp>), String> {
    Ok((
        parse_time("from", params.get("from"))?,
        parse_time("to", params.get("to"))?,
    ))
}

/// Runs `answer` on the summary called `name` and its merged rollup, from
/// a live view of the engine that holds it; with what that view covers
/// and the summary's index in the plan.
fn with_rollup<T>(
    service: &crate::service::Service,
    name: &str,
    answer: impl FnOnce(
        &cardinal_route::Summary,
        &cardinal_rollup::Rollup,
    ) -> Result<T, (StatusCode, String)>,
) -> Result<(T, Coverage, usize), (StatusCode, String)> {
    let (summary_index, declared) = cardinal_engine::query::find_summary(service.plan(), name)
        .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
    let index = service
        .engine_of(&declared.name)
        .ok_or((StatusCode::NOT_FOUND, format!("no engine holds {name}")))?;
    let (view, coverage) = service
        .view_covered(index)
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")))?;
    let rollup = view
        .rollup(&declared.name)
        .ok_or((StatusCode::NOT_FOUND, format!("no rollup for {name}")))?;
    Ok((answer(declared, rollup)?, coverage, summary_index))
}

/// A summary query from a request's parameters.
fn parse_query(
    name: &str,
    params: &HashMap<String, String>,
) -> Result<cardinal_engine::Query, String> {
    let mut query = cardinal_engine::Query {
        summary: name.to_owned(),
        ..Default::default()
    };
    (query.from, query.to) = time_range(params)?;
    query.where_ = params.get("where").cloned();
    query.by = params.get("by").map(|by| {
        by.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    });
    query.buckets = match params.get("buckets").map(String::as_str) {
        None | Some("keep") => Buckets::Keep,
        Some("all") => Buckets::All,
        Some(other) => return Err(format!("buckets={other:?}: keep or all")),
    };
    Ok(query)
}

/// A yes/no parameter (`true`, `1`, `false`, `0`; absent: no).
fn flag(params: &HashMap<String, String>, name: &str) -> Result<bool, String> {
    match params.get(name).map(String::as_str) {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1" | "") => Ok(true),
        Some(other) => Err(format!("{name}={other:?}: true or false")),
    }
}

/// `value` percent-encoded for a path segment or query value.
fn percent(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = std::fmt::Write::write_fmt(&mut out, format_args!("%{b:02X}"));
        }
    }
    out
}

/// `params` as a query string (`?a=1&b=2`, empty for none).
fn query_string<'a>(params: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (name, value) in params {
        out.push(if out.is_empty() { '?' } else { '&' });
        out.push_str(name);
        out.push('=');
        out.push_str(&percent(value));
    }
    out
}

/// Starts asking every peer for its state at `path_and_query`, when this
/// node has peers.
fn ask_peers(
    edge: &Edge,
    path_and_query: String,
) -> Option<tokio::task::JoinHandle<Vec<Result<NodeState, String>>>> {
    let peers = Arc::clone(edge.peers.as_ref()?);
    Some(tokio::spawn(async move {
        cluster::fetch(&peers, &path_and_query).await
    }))
}

/// The peers' answers, once all are in (empty without peers).
async fn peer_answers(
    asked: Option<tokio::task::JoinHandle<Vec<Result<NodeState, String>>>>,
    peers: usize,
) -> Vec<Result<NodeState, String>> {
    match asked {
        None => Vec::new(),
        Some(task) => task.await.unwrap_or_else(|e| {
            (0..peers)
                .map(|_| Err(format!("the request failed: {e}")))
                .collect()
        }),
    }
}

/// What the merged answer covers and lacks, for its headers.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    union: CoverageUnion,
    /// Nodes answered, of nodes asked (this one included); `None`
    /// without peers.
    nodes: Option<(usize, usize)>,
    /// Peers left out of a partial answer, and why.
    missing: Vec<(String, String)>,
}

impl Gathered {
    /// The answer's headers: `Cardinal-Nodes`, `Cardinal-Covers`,
    /// `Cardinal-Missing-Partitions`, one `Cardinal-Missing-Node` per
    /// peer left out (docs/http.md).
    fn headers(&self, response: &mut Response) {
        let headers = response.headers_mut();
        let mut put = |name: &'static str, text: String| {
            if let Ok(value) = HeaderValue::from_str(&cluster::header_text(&text)) {
                headers.append(name, value);
            }
        };
        if let Some((answered, asked)) = self.nodes {
            put("cardinal-nodes", format!("{answered}/{asked}"));
        }
        if let Some(covers) = self.union.covers_text() {
            put("cardinal-covers", covers);
        }
        if let Some(missing) = self.union.missing_text() {
            put("cardinal-missing-partitions", missing);
        }
        for (node, why) in &self.missing {
            put("cardinal-missing-node", format!("{node} {why}"));
        }
    }
}

/// Merges the peers' states into this node's `answers` (one per answer
/// asked, in order), checking that no partition is counted twice.
/// Without `partial`, a peer that gave no usable answer fails the query
/// (503, naming it and why).
fn gather(
    edge: &Edge,
    answers: &mut [Answer],
    coverage: &Coverage,
    states: Vec<Result<NodeState, String>>,
    partial: bool,
) -> Result<Gathered, (StatusCode, String)> {
    let mut gathered = Gathered::default();
    let this = edge
        .peers
        .as_ref()
        .map_or("this node", |peers| peers.this());
    let covered_twice = |twice: cluster::CoveredTwice| (StatusCode::CONFLICT, twice.to_string());
    gathered.union.add(this, coverage).map_err(covered_twice)?;
    let Some(peers) = &edge.peers else {
        assert!(states.is_empty(), "no peers, no peer answers");
        return Ok(gathered);
    };
    assert_eq!(states.len(), peers.urls().len(), "one answer per peer");
    let mut answered = 1;
    // Which process answered under each name: itself or one node listed
    // twice would count its records twice, whatever its coverage says.
    let mut nodes: Vec<(u64, &str)> = vec![(edge.node_id, this)];
    for (index, (url, state)) in peers.urls().iter().zip(states).enumerate() {
        if let Ok(state) = &state {
            if let Some((_, first)) = nodes.iter().find(|(node, _)| *node == state.node) {
                let why = if *first == this {
                    format!("peer {url} is this node itself: remove it from --peers")
                } else {
                    format!("peers {first} and {url} are one node, listed twice in --peers")
                };
                return Err((StatusCode::CONFLICT, why));
            }
            nodes.push((state.node, url));
        }
        // Everything of a peer's answer is checked before any of it is
        // merged: a partial answer leaves out a peer whole.
        let decoded = state.and_then(|state| {
            if state.answers.len() != answers.len() {
                return Err(format!(
                    "it sent {} states for {} asked",
                    state.answers.len(),
                    answers.len()
                ));
            }
            let mut rollups = Vec::with_capacity(answers.len());
            for ((groups, image), answer) in state.answers.iter().zip(answers.iter()) {
                let rollup = cardinal_rollup::Rollup::decode_image(image, answer.rollup.shape())
                    .map_err(|e| {
                        format!("its state does not fit this node's summary (the same schema on every node?): {e}")
                    })?;
                rollups.push((*groups, rollup));
            }
            Ok((rollups, state.coverage))
        });
        match decoded {
            Ok((rollups, coverage)) => {
                gathered.union.add(url, &coverage).map_err(covered_twice)?;
                for (answer, (groups, rollup)) in answers.iter_mut().zip(&rollups) {
                    answer.merge(rollup, *groups).map_err(|e| {
                        (
                            StatusCode::BAD_REQUEST,
                            format!("merging {url}'s state: {e}"),
                        )
                    })?;
                }
                answered += 1;
            }
            Err(why) => {
                peers.failed(index);
                gathered.missing.push((url.clone(), why));
            }
        }
    }
    gathered.nodes = Some((answered, peers.urls().len() + 1));
    if !gathered.missing.is_empty() && !partial {
        let named: Vec<String> = gathered
            .missing
            .iter()
            .map(|(url, why)| format!("peer {url}: {why}"))
            .collect();
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{}; ask with partial=true for an answer from the nodes that answered",
                named.join("; ")
            ),
        ));
    }
    Ok(gathered)
}

async fn summary(
    State(edge): State<Arc<Edge>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &SUMMARY_PARAMS) {
        return refused;
    }
    let query = match parse_query(&name, &params) {
        Ok(query) => query,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let partial = match flag(&params, "partial") {
        Ok(partial) => partial,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let format = params
        .get("format")
        .cloned()
        .unwrap_or_else(|| "json".into());
    if !matches!(format.as_str(), "json" | "csv" | "table") {
        return plain(
            StatusCode::BAD_REQUEST,
            format!("format={format:?}: json, csv or table"),
        );
    }
    // The peers work while this node answers.
    let asked = ask_peers(
        &edge,
        format!(
            "/v1/state/{}{}",
            percent(&name),
            query_string(
                SELECTION_PARAMS
                    .iter()
                    .filter_map(|&p| params.get(p).map(|v| (p, v.as_str())))
            )
        ),
    );
    let work = Arc::clone(&edge);
    let local = blocking(move || {
        let service = work.service();
        let bad = |e: cardinal_engine::Error| (StatusCode::BAD_REQUEST, e.to_string());
        let plan = Arc::clone(service.plan());
        with_rollup(&service, &name, |declared, rollup| {
            answer(declared, rollup, &query).map_err(bad)
        })
        .map(|answered| (answered, plan))
    })
    .await;
    let ((answered, coverage, index), plan) = match local {
        Some(Ok(local)) => local,
        Some(Err((status, why))) => return plain(status, why),
        None => return plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    let states = peer_answers(asked, edge.peers.as_ref().map_or(0, |p| p.urls().len())).await;
    let work = Arc::clone(&edge);
    let result = blocking(
        move || -> Result<(Vec<u8>, &'static str, Gathered), (StatusCode, String)> {
            let mut answers = [answered];
            let gathered = gather(&work, &mut answers, &coverage, states, partial)?;
            let [answered] = answers;
            let declared = &plan.summaries[index];
            let bad = |e: cardinal_engine::Error| (StatusCode::BAD_REQUEST, e.to_string());
            let results = answered.results().map_err(bad)?;
            let mut out = Vec::new();
            let internal =
                |e: cardinal_export::Error| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            let kind = match format.as_str() {
                "table" => {
                    out.extend_from_slice(cardinal_export::table(&results).as_bytes());
                    "text/plain; charset=utf-8"
                }
                "csv" => {
                    cardinal_export::write_csv(&mut out, &results, Default::default())
                        .map_err(internal)?;
                    "text/csv"
                }
                _ => {
                    cardinal_export::write_json_lines(
                        &mut out,
                        &declared.name,
                        &results,
                        Default::default(),
                    )
                    .map_err(internal)?;
                    "application/x-ndjson"
                }
            };
            Ok((out, kind, gathered))
        },
    )
    .await;
    match result {
        Some(Ok((body, kind, gathered))) => {
            let mut response =
                (StatusCode::OK, [(header::CONTENT_TYPE, kind)], body).into_response();
            gathered.headers(&mut response);
            response
        }
        Some(Err((status, why))) => plain(status, why),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    }
}

/// The aggregate an overlap compares: the one named, else the summary's
/// only HyperLogLog.
fn overlap_aggregate(
    declared: &cardinal_route::Summary,
    rollup: &cardinal_rollup::Rollup,
    aggregate: Option<String>,
) -> Result<String, (StatusCode, String)> {
    match aggregate {
        Some(aggregate) => Ok(aggregate),
        None => match &hll_aggregates(declared, rollup)[..] {
            [one] => Ok(one.clone()),
            hlls => Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "say which aggregate with aggregate= (hll aggregates of {}: {})",
                    declared.name,
                    hlls.join(", ")
                ),
            )),
        },
    }
}

async fn overlap_route(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &OVERLAP_PARAMS) {
        return refused;
    }
    let Some(name) = params.get("summary").cloned() else {
        return plain(StatusCode::BAD_REQUEST, "summary= is required");
    };
    let (from, to) = match time_range(&params) {
        Ok(range) => range,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let partial = match flag(&params, "partial") {
        Ok(partial) => partial,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let side = |key: &str| Selector {
        from,
        to,
        where_: params.get(key).cloned(),
    };
    let (a, b) = (side("a"), side("b"));
    let aggregate = params.get("aggregate").cloned();
    let text = params.get("format").is_some_and(|f| f == "text");
    let asked = ask_peers(
        &edge,
        format!(
            "/v1/state/{}{}",
            percent(&name),
            query_string(
                std::iter::once(("overlap", "true")).chain(
                    ["a", "b", "from", "to"]
                        .iter()
                        .filter_map(|&p| params.get(p).map(|v| (p, v.as_str())))
                )
            )
        ),
    );
    let work = Arc::clone(&edge);
    let local = blocking(move || {
        let service = work.service();
        let plan = Arc::clone(service.plan());
        with_rollup(&service, &name, |declared, rollup| {
            let aggregate = overlap_aggregate(declared, rollup, aggregate)?;
            let bad = |e: cardinal_engine::Error| (StatusCode::BAD_REQUEST, e.to_string());
            let side_a = answer(declared, rollup, &overlap_query(declared, &a)).map_err(bad)?;
            let side_b = answer(declared, rollup, &overlap_query(declared, &b)).map_err(bad)?;
            // The aggregate is checked before any peer's state is read
            // (fitting the sides says why it is not an HLL aggregate).
            if !hll_aggregates(declared, rollup)
                .iter()
                .any(|hll| hll.eq_ignore_ascii_case(&aggregate))
            {
                overlap_of(declared, &side_a, &side_b, &aggregate).map_err(bad)?;
            }
            Ok((aggregate, [side_a, side_b]))
        })
        .map(|answered| (answered, plan))
    })
    .await;
    let (((aggregate, mut sides), coverage, index), plan) = match local {
        Some(Ok(local)) => local,
        Some(Err((status, why))) => return plain(status, why),
        None => return plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    let states = peer_answers(asked, edge.peers.as_ref().map_or(0, |p| p.urls().len())).await;
    let work = Arc::clone(&edge);
    let result = blocking(
        move || -> Result<(String, Gathered), (StatusCode, String)> {
            let gathered = gather(&work, &mut sides, &coverage, states, partial)?;
            let declared = &plan.summaries[index];
            let answered = overlap_of(declared, &sides[0], &sides[1], &aggregate)
                .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
            let body = if text {
                answered.text()
            } else {
                format!("{}\n", answered.json())
            };
            Ok((body, gathered))
        },
    )
    .await;
    let (body, gathered) = match result {
        Some(Ok(answered)) => answered,
        Some(Err((status, why))) => return plain(status, why),
        None => return plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    let mut response = if text {
        plain(StatusCode::OK, body.trim_end().to_owned())
    } else {
        json(StatusCode::OK, body)
    };
    gathered.headers(&mut response);
    response
}

/// `GET /v1/state/{name}`: this node's own state of a selection, for a
/// peer coordinating a cluster query ([`cluster`]). Never asks another
/// node.
async fn state(
    State(edge): State<Arc<Edge>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &STATE_PARAMS) {
        return refused;
    }
    if let Some(text) = params.get("sql").cloned() {
        if params.len() > 1 {
            return plain(StatusCode::BAD_REQUEST, "sql= is read alone");
        }
        return sql_state(edge, name, text).await;
    }
    let sides = match flag(&params, "overlap") {
        Ok(sides) => sides,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let query = match parse_query(&name, &params) {
        Ok(query) => query,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let overlap_only = ["a", "b"].iter().find(|p| params.contains_key(**p));
    let query_only = ["where", "by", "buckets"]
        .iter()
        .find(|p| params.contains_key(**p));
    match (sides, overlap_only, query_only) {
        (false, Some(p), _) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("{p}= is read with overlap=true only"),
            );
        }
        (true, _, Some(p)) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("{p}= is not read with overlap=true (a= and b= select the sides)"),
            );
        }
        _ => {}
    }
    let side = |key: &str| Selector {
        from: query.from,
        to: query.to,
        where_: params.get(key).cloned(),
    };
    let (a, b) = (side("a"), side("b"));
    let work = Arc::clone(&edge);
    let result = blocking(move || {
        let service = work.service();
        let bad = |e: cardinal_engine::Error| (StatusCode::BAD_REQUEST, e.to_string());
        with_rollup(&service, &name, |declared, rollup| {
            if sides {
                let side_a = answer(declared, rollup, &overlap_query(declared, &a)).map_err(bad)?;
                let side_b = answer(declared, rollup, &overlap_query(declared, &b)).map_err(bad)?;
                Ok(vec![side_a, side_b])
            } else {
                Ok(vec![answer(declared, rollup, &query).map_err(bad)?])
            }
        })
        .map(|(answers, coverage, _)| {
            let answers: Vec<(usize, &cardinal_rollup::Rollup)> = answers
                .iter()
                .map(|a| (a.groups_matched, &a.rollup))
                .collect();
            cluster::encode_state(work.node_id, &answers, &coverage)
        })
    })
    .await;
    state_response(result)
}

/// This node's partial answer to a SQL query over summary `name`, for a
/// coordinating peer: the query's answer groups as one image.
async fn sql_state(edge: Arc<Edge>, name: String, text: String) -> Response {
    let work = Arc::clone(&edge);
    let result = blocking(move || {
        let service = work.service();
        let prepared = crate::sql::prepare(&service, &text).map_err(refused)?;
        if !prepared.summary_name().eq_ignore_ascii_case(&name) {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "the query reads summary {}, not {name}",
                    prepared.summary_name()
                ),
            ));
        }
        let (rollup, matched, coverage) =
            crate::sql::partial(&service, &prepared).map_err(refused)?;
        Ok(cluster::encode_state(
            work.node_id,
            &[(matched, &rollup)],
            &coverage,
        ))
    })
    .await;
    state_response(result)
}

/// A state route's answer: the encoded state, or why not.
fn state_response(result: Option<Result<Vec<u8>, (StatusCode, String)>>) -> Response {
    match result {
        Some(Ok(body)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, cluster::STATE_MEDIA_TYPE)],
            body,
        )
            .into_response(),
        Some(Err((status, why))) => plain(status, why),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "the state failed"),
    }
}

fn refused(refusal: crate::sql::Refusal) -> (StatusCode, String) {
    match refusal {
        crate::sql::Refusal::Query(e) => (StatusCode::BAD_REQUEST, e.to_string()),
        crate::sql::Refusal::Unavailable { status, why } => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            why,
        ),
    }
}

/// A SQL refusal as JSON: `{"error": "..."}`, the message with its
/// caret lines.
fn sql_error(status: StatusCode, why: &str) -> Response {
    json(
        status,
        format!(
            "{{\"error\":{}}}\n",
            cardinal_export::json_string(why.as_bytes())
        ),
    )
}

/// `POST /v1/sql`: the body is one SELECT over a summary (docs/sql.md);
/// the answer is JSON (an array of objects), JSON lines, CSV or an
/// aligned table; with peers, for the whole cluster.
async fn sql_route(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &SQL_PARAMS) {
        return refused;
    }
    let partial = match flag(&params, "partial") {
        Ok(partial) => partial,
        Err(e) => return sql_error(StatusCode::BAD_REQUEST, &e),
    };
    let format = params
        .get("format")
        .cloned()
        .unwrap_or_else(|| "json".into());
    if !matches!(format.as_str(), "json" | "jsonl" | "csv" | "table") {
        return sql_error(
            StatusCode::BAD_REQUEST,
            &format!("format={format:?}: json, jsonl, csv or table"),
        );
    }
    let max = cardinal_route::QUERY_BYTES_MAX;
    let text = match tokio::time::timeout(super::BODY_READ_TIMEOUT, axum::body::to_bytes(body, max))
        .await
    {
        Err(_) => {
            return sql_error(
                StatusCode::REQUEST_TIMEOUT,
                "the query did not arrive in time",
            );
        }
        Ok(Err(_)) => {
            return sql_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("a query is at most {max} bytes"),
            );
        }
        Ok(Ok(bytes)) => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => text,
            Err(_) => return sql_error(StatusCode::BAD_REQUEST, "the query is not UTF-8"),
        },
    };
    let (table, gathered) = match sql_answer(&edge, text, partial).await {
        Ok(answered) => answered,
        Err(refusal) => {
            let (status, why) = refused(refusal);
            return sql_error(status, &why);
        }
    };
    // Up to `SQL_ROWS_MAX` rows: printed on a blocking thread, not the
    // runtime's.
    let printed = blocking(move || match format.as_str() {
        "jsonl" => (table.json_lines(), "application/x-ndjson"),
        "csv" => (table.csv(), "text/csv"),
        "table" => (table.aligned(), "text/plain; charset=utf-8"),
        _ => (table.json(), "application/json"),
    })
    .await;
    let Some((body, kind)) = printed else {
        return sql_error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed");
    };
    let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, kind)], body).into_response();
    gathered.headers(&mut response);
    response
}

/// Answers SQL `text` for the whole cluster (this node alone without
/// peers): planned here, each peer's partial answer asked for at once,
/// merged with this node's before rows are made. What `POST /v1/sql` and
/// the PostgreSQL front end both answer.
///
/// # Errors
///
/// [`crate::sql::Refusal::Query`] for a bad query (the engine's error);
/// `Unavailable` with 503 for a missing peer (without `partial`) or a
/// view that failed, 409 for a partition two nodes cover.
pub(crate) async fn sql_answer(
    edge: &Arc<Edge>,
    text: String,
    partial: bool,
) -> Result<(cardinal_export::Table, Gathered), crate::sql::Refusal> {
    use crate::sql::Refusal;
    let failed = || Refusal::Unavailable {
        status: 500,
        why: "the query failed (the server's log has why)".into(),
    };
    let work = Arc::clone(edge);
    let query = text.clone();
    let prepared = blocking(move || crate::sql::prepare(&work.service(), &query))
        .await
        .ok_or_else(failed)??;
    let prepared = Arc::new(prepared);
    if edge.peers.is_some() && text.len() > CLUSTER_SQL_BYTES_MAX {
        return Err(Refusal::Unavailable {
            status: 400,
            why: format!("a query over a cluster is at most {CLUSTER_SQL_BYTES_MAX} bytes"),
        });
    }
    let asked = ask_peers(
        edge,
        format!(
            "/v1/state/{}{}",
            percent(prepared.summary_name()),
            query_string(std::iter::once(("sql", text.as_str())))
        ),
    );
    let work = Arc::clone(edge);
    let local_prepared = Arc::clone(&prepared);
    let (rollup, matched, coverage) =
        blocking(move || crate::sql::partial(&work.service(), &local_prepared))
            .await
            .ok_or_else(failed)??;
    let states = peer_answers(asked, edge.peers.as_ref().map_or(0, |p| p.urls().len())).await;
    let work = Arc::clone(edge);
    blocking(move || {
        let mut answers = [Answer::of_rollup(rollup, matched)];
        let gathered =
            gather(&work, &mut answers, &coverage, states, partial).map_err(|(status, why)| {
                Refusal::Unavailable {
                    status: status.as_u16(),
                    why,
                }
            })?;
        let [answered] = answers;
        let table = prepared
            .finish(&answered.rollup, answered.groups_matched)
            .map_err(Refusal::Query)?
            .table;
        Ok((table, gathered))
    })
    .await
    .ok_or_else(failed)?
}

async fn rejects(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &[]) {
        return refused;
    }
    let service = edge.service();
    let kept = service
        .rejects
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let lines: Vec<String> = kept
        .lines
        .iter()
        .map(|line| cardinal_export::json_string(line.as_bytes()))
        .collect();
    json(
        StatusCode::OK,
        format!(
            "{{\"kept\":{},\"not_kept\":{},\"lines\":[{}]}}\n",
            lines.len(),
            kept.dropped,
            lines.join(",")
        ),
    )
}

async fn metrics(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = admitted(&edge, &headers, &params, &[]) {
        return refused;
    }
    let work = Arc::clone(&edge);
    match blocking(move || super::metrics::render(&work)).await {
        Some(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed"),
    }
}

async fn healthz(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = known_params(&params, &[]) {
        return refused;
    }
    let (status, text) = health(&edge);
    plain(status, text)
}

/// What `/healthz` answers: `200 ok`; `200 degraded: ...` while the
/// Kafka broker is away; `503` with the reason once the service failed.
pub(super) fn health(edge: &Edge) -> (StatusCode, String) {
    if let Some(why) = edge.service().failed() {
        return (StatusCode::SERVICE_UNAVAILABLE, why);
    }
    // The broker away: degraded, not down (queries answer; reading
    // resumes where it stopped when the broker is back).
    let away = edge.kafka.as_ref().and_then(|kafka| {
        kafka
            .broker_away
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    });
    match away {
        None => (StatusCode::OK, "ok".to_owned()),
        Some(why) => (
            StatusCode::OK,
            format!("degraded: the Kafka broker is away ({why}); queries answer, reading waits"),
        ),
    }
}

/// A body that is the whole of `text` (for tests of the router).
pub fn body(text: &str) -> Body {
    Body::from(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_in_any_case() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer   abc "), Some("abc"));
        assert_eq!(bearer("BEARER\tabc"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
        assert_eq!(bearer("Bearer   "), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn charsets_other_than_utf8_are_refused() {
        assert_eq!(
            content_type("text/csv; charset=UTF-8; header=present"),
            Ok(Some((Format::Csv, true)))
        );
        assert_eq!(
            content_type("application/x-ndjson; charset=\"us-ascii\""),
            Ok(Some((Format::Ndjson, false)))
        );
        for refused in [
            "text/csv; charset=utf-16",
            "text/csv;charset=latin1",
            "application/json; charset=UTF-16LE",
            "text/html",
        ] {
            assert!(content_type(refused).is_err(), "{refused}");
        }
        assert_eq!(
            content_type("text/csv; header=absent"),
            Ok(Some((Format::Csv, false)))
        );
    }

    #[test]
    fn a_json_array_becomes_one_line_per_element() {
        let body = b" [ {\"a\": 1,\n \"b\": \"x\\ny\"}, [1, 2],\r\n \"s\" ] ";
        let lines = json_array_lines(body).expect("an array");
        assert_eq!(
            String::from_utf8(lines).expect("utf-8"),
            "{\"a\": 1,  \"b\": \"x\\ny\"}\n[1, 2]\n\"s\"\n"
        );
        assert_eq!(json_array_lines(b"[]").expect("empty"), b"");
        for malformed in [&b"[{}"[..], b"[{}] x", b"[{},]", b"{}"] {
            let error = json_array_lines(malformed).expect_err("malformed");
            assert!(error.contains("not a JSON array"), "{error}");
        }
    }

    #[test]
    fn long_messages_are_cut_at_a_character() {
        assert_eq!(cut_message("short".into()), "short");
        let long = "é".repeat(MESSAGE_BYTES_MAX);
        let cut = cut_message(long.clone());
        assert!(cut.len() <= MESSAGE_BYTES_MAX, "{}", cut.len());
        assert!(cut.ends_with("more bytes]"), "{cut}");
        assert!(long.starts_with(cut.split(" [").next().expect("a head")));
    }
}
