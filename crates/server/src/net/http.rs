//! The HTTP API (axum): ingest, live answers, rejects, metrics, health.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/streams/{name}` | a CSV or NDJSON body; `Idempotency-Key` (scoped to the stream) makes retries count once; 200 `{accepted, rejected, duplicate, first_rejects, sequence}` after the log sync; 413 over [`super::Edge::body_bytes_max`]; 503 + `Retry-After` when queues are full or the key table is full of recent keys; 422 when the key was used on this stream with another body; 400 for an unknown stream, format or bad header line |
//! | `GET /v1/summaries` | the streams and, per summary, groups, bytes and newest bucket |
//! | `GET /v1/summaries/{name}?from=&to=&where=&by=&buckets=all&format=json\|csv\|table` | a live answer, printed as `cardinal run` prints |
//! | `GET /v1/overlap?summary=&aggregate=&a=&b=&from=&to=` | two groups' audiences' overlap (conditions `a` and `b`) |
//! | `GET /v1/rejects` | the newest rejected lines |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /healthz` | 200 once recovered and ready, 503 once failed |
//!
//! CSV bodies are records in the stream's declared column order; with
//! `Content-Type: text/csv; header=present` (RFC 4180) the first line is a
//! header naming the columns, matched to the declared ones by name in any
//! order (as `cardinal run` and `cardinal send` read them; a missing or
//! doubled column is a 400 naming it) and not counted. With a
//! token configured every route but `/healthz` needs `Authorization:
//! Bearer <token>` (compared in constant time). Nothing from a request
//! becomes a path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use cardinal_engine::{Buckets, Selector, answer, hll_aggregates, overlap};
use cardinal_event::{ColumnType, Timestamp, Value};

use super::Edge;
use crate::frame::Format;
use crate::keys;
use crate::service::{Origin, Refused};

/// The router over `edge`.
pub fn router(edge: Arc<Edge>) -> Router {
    Router::new()
        .route("/v1/streams/{name}", post(ingest))
        .route("/v1/summaries", get(summaries))
        .route("/v1/summaries/{name}", get(summary))
        .route("/v1/overlap", get(overlap_route))
        .route("/v1/rejects", get(rejects))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(edge)
}

fn plain(status: StatusCode, message: impl Into<String>) -> Response {
    let mut body = message.into();
    body.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
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
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|v| crate::frame::Token::new(v.trim().as_bytes()).ok());
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

/// The body's format from its `Content-Type`, and whether a CSV body
/// starts with a header line.
fn body_format(headers: &HeaderMap) -> Result<Option<(Format, bool)>, String> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| "Content-Type is not text".to_owned())?;
    content_type(value)
}

/// Reads a `Content-Type` value: the body's format (`None`: the stream's
/// own), and whether a CSV body starts with a header line
/// (`header=present`, RFC 4180).
pub fn content_type(value: &str) -> Result<Option<(Format, bool)>, String> {
    let value = value.to_ascii_lowercase();
    let mut parts = value.split(';').map(str::trim);
    let mime = parts.next().unwrap_or("");
    let header_present = parts.any(|p| p.replace(' ', "") == "header=present");
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
    request: Request,
) -> Response {
    let headers = request.headers().clone();
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
    }
    let service = &edge.service;
    let format = match body_format(&headers) {
        Ok(format) => format,
        Err(why) => return plain(StatusCode::BAD_REQUEST, why),
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
    // Memory: the bodies in flight are bounded, whatever the clients.
    let reserved = length.unwrap_or(limit as u64);
    let Some(_in_flight) = InFlight::reserve(&edge, reserved) else {
        return busy(&edge, "too many request bodies in flight: retry later");
    };
    let body = match to_bytes(request.into_body(), limit).await {
        Ok(body) => body,
        Err(_) => return too_large(limit),
    };
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
            Err(refused @ Refused::Stopped(_)) => {
                return plain(StatusCode::SERVICE_UNAVAILABLE, refused.to_string());
            }
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

/// Bytes of a request body counted against
/// [`super::HTTP_IN_FLIGHT_BYTES_MAX`] until dropped.
struct InFlight<'e> {
    edge: &'e Edge,
    bytes: u64,
}

impl<'e> InFlight<'e> {
    fn reserve(edge: &'e Edge, bytes: u64) -> Option<InFlight<'e>> {
        let counter = &edge.metrics.http_in_flight_bytes;
        let before = counter.fetch_add(bytes, Ordering::AcqRel);
        // One body alone is always let in (it is within the body limit).
        if before > 0 && before + bytes > super::HTTP_IN_FLIGHT_BYTES_MAX {
            counter.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(InFlight { edge, bytes })
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
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

async fn summaries(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
    }
    let work = Arc::clone(&edge);
    let body = blocking(move || -> anyhow::Result<String> {
        let service = &work.service;
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
        let mut summaries = Vec::new();
        for index in 0..service.streams().len() {
            let view = service.view(index)?;
            for stats in view.summary_stats() {
                summaries.push(format!(
                    "{{\"name\":{},\"stream\":{},\"groups\":{},\"bytes\":{},\"newest_bucket\":{}}}",
                    cardinal_export::json_string(stats.name.as_bytes()),
                    cardinal_export::json_string(service.streams()[index].as_bytes()),
                    stats.groups,
                    stats.bytes,
                    stats
                        .newest_bucket
                        .map_or("null".to_owned(), |t| cardinal_export::json_string(
                            t.to_string().as_bytes()
                        )),
                ));
            }
        }
        Ok(format!(
            "{{\"streams\":[{}],\"summaries\":[{}]}}\n",
            streams.join(","),
            summaries.join(",")
        ))
    })
    .await;
    match body {
        Some(Ok(body)) => json(StatusCode::OK, body),
        Some(Err(e)) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "the view failed"),
    }
}

fn parse_time(name: &str, text: Option<&String>) -> Result<Option<Timestamp>, String> {
    let Some(text) = text else { return Ok(None) };
    match Value::parse(text.as_bytes(), ColumnType::Timestamp) {
        Ok(Value::Time(t)) => Ok(Some(t)),
        _ => Err(format!(
            "{name}={text:?} is not a time (2026-11-01 or 2026-11-01T12:00:00Z)"
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
/// a live view of the engine that holds it.
fn with_rollup<T>(
    service: &crate::service::Service,
    name: &str,
    answer: impl FnOnce(
        &cardinal_route::Summary,
        &cardinal_rollup::Rollup,
    ) -> Result<T, (StatusCode, String)>,
) -> Result<T, (StatusCode, String)> {
    let (_, declared) = cardinal_engine::query::find_summary(service.plan(), name)
        .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
    let index = service
        .engine_of(&declared.name)
        .ok_or((StatusCode::NOT_FOUND, format!("no engine holds {name}")))?;
    let view = service
        .view(index)
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")))?;
    let rollup = view
        .rollup(&declared.name)
        .ok_or((StatusCode::NOT_FOUND, format!("no rollup for {name}")))?;
    answer(declared, rollup)
}

async fn summary(
    State(edge): State<Arc<Edge>>,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
    }
    let mut query = cardinal_engine::Query {
        summary: name.clone(),
        ..Default::default()
    };
    match time_range(&params) {
        Ok((from, to)) => (query.from, query.to) = (from, to),
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    }
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
        Some(other) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("buckets={other:?}: keep or all"),
            );
        }
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
    let work = Arc::clone(&edge);
    let result = blocking(
        move || -> Result<(String, &'static str), (StatusCode, String)> {
            let service = &work.service;
            let bad = |e: cardinal_engine::Error| (StatusCode::BAD_REQUEST, e.to_string());
            with_rollup(service, &name, |declared, rollup| {
                let answered = answer(declared, rollup, &query).map_err(bad)?;
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
                Ok((String::from_utf8_lossy(&out).into_owned(), kind))
            })
        },
    )
    .await;
    match result {
        Some(Ok((body, kind))) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, kind)], body).into_response()
        }
        Some(Err((status, why))) => plain(status, why),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    }
}

async fn overlap_route(
    State(edge): State<Arc<Edge>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
    }
    let Some(name) = params.get("summary").cloned() else {
        return plain(StatusCode::BAD_REQUEST, "summary= is required");
    };
    let (from, to) = match time_range(&params) {
        Ok(range) => range,
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
    let work = Arc::clone(&edge);
    let result = blocking(move || -> Result<String, (StatusCode, String)> {
        let service = &work.service;
        with_rollup(service, &name, |declared, rollup| {
            let aggregate = match aggregate {
                Some(aggregate) => aggregate,
                None => match &hll_aggregates(declared, rollup)[..] {
                    [one] => one.clone(),
                    hlls => {
                        return Err((
                            StatusCode::BAD_REQUEST,
                            format!(
                                "say which aggregate with aggregate= (hll aggregates of {}: {})",
                                declared.name,
                                hlls.join(", ")
                            ),
                        ));
                    }
                },
            };
            let answered = overlap(declared, rollup, &a, &b, &aggregate)
                .map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?;
            Ok(if text {
                answered.text()
            } else {
                format!("{}\n", answered.json())
            })
        })
    })
    .await;
    match result {
        Some(Ok(body)) if text => plain(StatusCode::OK, body.trim_end().to_owned()),
        Some(Ok(body)) => json(StatusCode::OK, body),
        Some(Err((status, why))) => plain(status, why),
        None => plain(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    }
}

async fn rejects(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
    }
    let kept = edge
        .service
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

async fn metrics(State(edge): State<Arc<Edge>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorized(&edge, &headers) {
        return denied;
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

async fn healthz(State(edge): State<Arc<Edge>>) -> Response {
    match edge.service.failed() {
        None => plain(StatusCode::OK, "ok"),
        Some(why) => plain(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// A body that is the whole of `text` (for tests of the router).
pub fn body(text: &str) -> Body {
    Body::from(text.to_owned())
}
