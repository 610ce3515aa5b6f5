//! `/metrics` in the Prometheus text format (version 0.0.4), with
//! Prometheus naming: base units (`_seconds`, `_bytes`), `_total` for
//! counters, one `# HELP` and `# TYPE` per family, and no type's name in
//! a family's (promtool's lint: `cardinal_summary_bytes` read as "a
//! summary", so the per-summary families are `cardinal_rollup_*`). CI
//! runs `promtool check metrics` over a live server's answer
//! (`crates/cli/tests/serve.rs`).
//!
//! Labels take values from fixed sets or from the schema, never from
//! input: rejects by [`cardinal_engine::reject_code`] (snake_case codes,
//! not the reasons' wording), requests by route template and status,
//! streams and summaries by their declared names.
//!
//! `process_*` are read from `/proc/self` as the Go and Python clients
//! read them, so the usual dashboards work unchanged.
//!
//! ADVICE: a counter added here belongs in `docs/http.md`'s table of
//! families too. The deduplication table's and idempotency keys'
//! evictions go beside `cardinal_batches_deduplicated_total` once those
//! tables count them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Edge;
use crate::service::LATENCY_BUCKETS;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn value(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// A label value escaped as the text format wants (`\\`, `\"`, `\n`).
pub fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A histogram family: `counts` per bucket of `bounds` (not cumulative)
/// and one more past the last, their `sum`; the cumulative `_bucket`
/// lines, `+Inf`, `_sum` and `_count` are written here.
fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    bounds: &[impl std::fmt::Display],
    counts: &[u64],
    sum: impl std::fmt::Display,
) {
    assert_eq!(
        counts.len(),
        bounds.len() + 1,
        "{name}: a count per bucket, and +Inf"
    );
    family(out, name, "histogram", help);
    let bucket = format!("{name}_bucket");
    let mut cumulative = 0;
    for (le, count) in bounds.iter().zip(counts) {
        cumulative += count;
        value(out, &bucket, &format!("le=\"{le}\""), cumulative);
    }
    cumulative += counts[bounds.len()];
    value(out, &bucket, "le=\"+Inf\"", cumulative);
    value(out, &format!("{name}_sum"), "", sum);
    value(out, &format!("{name}_count"), "", cumulative);
}

/// The whole exposition (takes a live view of each engine for the
/// summaries' sizes).
pub fn render(edge: &Edge) -> String {
    let service = edge.service();
    let counters = &service.counters;
    let mut out = String::with_capacity(4 << 10);
    let streams = service.streams();

    family(
        &mut out,
        "cardinal_events_accepted_total",
        "counter",
        "Records folded, by stream.",
    );
    for (i, stream) in streams.iter().enumerate() {
        let labels = format!("stream=\"{}\"", label(stream));
        value(
            &mut out,
            "cardinal_events_accepted_total",
            &labels,
            load(&counters.records[i]),
        );
    }
    family(
        &mut out,
        "cardinal_events_rejected_total",
        "counter",
        "Records rejected, by stream and reason.",
    );
    let views = edge.metrics_views.figures(&service);
    for (stream, figures) in streams.iter().zip(views.iter()) {
        if let Some(figures) = figures {
            for (code, n) in &figures.rejects {
                let labels = format!("stream=\"{}\",reason=\"{code}\"", label(stream));
                value(&mut out, "cardinal_events_rejected_total", &labels, n);
            }
        }
    }
    type Held = (String, Vec<cardinal_engine::SummaryStats>, Vec<Dropped>);
    let views: Vec<Option<Held>> = views
        .iter()
        .zip(streams.iter())
        .map(|(figures, stream)| {
            figures
                .as_ref()
                .map(|f| (stream.to_string(), f.stats.clone(), f.dropped.clone()))
        })
        .collect();
    let queues: Vec<(usize, usize)> = (0..streams.len()).map(|i| service.queued(i)).collect();
    family(
        &mut out,
        "cardinal_engine_queued_batches",
        "gauge",
        "Batches waiting in a stream's engine queues (full: ingest is refused or waits).",
    );
    for (stream, (queued, _)) in streams.iter().zip(&queues) {
        let labels = format!("stream=\"{}\"", label(stream));
        value(&mut out, "cardinal_engine_queued_batches", &labels, queued);
    }
    family(
        &mut out,
        "cardinal_engine_queue_capacity_batches",
        "gauge",
        "Batches a stream's engine queues hold at most.",
    );
    for (stream, (_, capacity)) in streams.iter().zip(&queues) {
        let labels = format!("stream=\"{}\"", label(stream));
        value(
            &mut out,
            "cardinal_engine_queue_capacity_batches",
            &labels,
            capacity,
        );
    }
    family(
        &mut out,
        "cardinal_batches_acknowledged_total",
        "counter",
        "Batches acknowledged (duplicates included).",
    );
    value(
        &mut out,
        "cardinal_batches_acknowledged_total",
        "",
        load(&counters.batches_acked),
    );
    family(
        &mut out,
        "cardinal_batches_deduplicated_total",
        "counter",
        "Batches acknowledged again without counting (retries).",
    );
    value(
        &mut out,
        "cardinal_batches_deduplicated_total",
        "",
        load(&counters.batches_duplicate),
    );
    let (clients_evicted, keys_evicted) = edge.service().evictions();
    family(
        &mut out,
        "cardinal_dedup_evictions_total",
        "counter",
        "Client ids forgotten by the deduplication table (each idle past the horizon first).",
    );
    value(
        &mut out,
        "cardinal_dedup_evictions_total",
        "",
        clients_evicted,
    );
    family(
        &mut out,
        "cardinal_idempotency_key_evictions_total",
        "counter",
        "Idempotency keys forgotten (each held past the horizon first).",
    );
    value(
        &mut out,
        "cardinal_idempotency_key_evictions_total",
        "",
        keys_evicted,
    );
    family(
        &mut out,
        "cardinal_batches_refused_full_total",
        "counter",
        "Batches refused because the engines' queues were full (TCP waits, HTTP answers 503).",
    );
    value(
        &mut out,
        "cardinal_batches_refused_full_total",
        "",
        load(&counters.batches_refused_full),
    );
    family(
        &mut out,
        "cardinal_http_busy_total",
        "counter",
        "HTTP ingest requests answered 503.",
    );
    value(
        &mut out,
        "cardinal_http_busy_total",
        "",
        load(&edge.metrics.http_busy),
    );
    let acks = &counters.ack_seconds;
    let ack_counts: Vec<u64> = acks.counts.iter().map(load).collect();
    histogram(
        &mut out,
        "cardinal_ack_latency_seconds",
        "From a batch's admission to its acknowledgement (log sync and fold).",
        &LATENCY_BUCKETS,
        &ack_counts,
        load(&acks.sum_micros) as f64 / 1e6,
    );

    let wal = service.wal_stats();
    family(
        &mut out,
        "cardinal_wal_records_total",
        "counter",
        "Log records written and synced.",
    );
    value(&mut out, "cardinal_wal_records_total", "", wal.records);
    family(
        &mut out,
        "cardinal_wal_bytes_total",
        "counter",
        "Log bytes written, framing included.",
    );
    value(&mut out, "cardinal_wal_bytes_total", "", wal.bytes);
    family(
        &mut out,
        "cardinal_wal_syncs_total",
        "counter",
        "fdatasync calls covering records (group commits).",
    );
    value(&mut out, "cardinal_wal_syncs_total", "", wal.syncs);
    histogram(
        &mut out,
        "cardinal_wal_fsync_seconds",
        "Group commits' fdatasync durations.",
        &cardinal_store::SYNC_SECONDS_BUCKETS,
        &wal.sync_seconds,
        wal.sync_micros_sum as f64 / 1e6,
    );
    histogram(
        &mut out,
        "cardinal_wal_group_commit_records",
        "Records one group commit (one fdatasync) covered.",
        &cardinal_store::SYNC_RECORDS_BUCKETS,
        &wal.sync_records,
        wal.records,
    );
    family(
        &mut out,
        "cardinal_wal_segments",
        "gauge",
        "Log segment files.",
    );
    value(
        &mut out,
        "cardinal_wal_segments",
        "",
        service.wal_segments().len(),
    );

    family(
        &mut out,
        "cardinal_snapshots_total",
        "counter",
        "Snapshots written.",
    );
    value(
        &mut out,
        "cardinal_snapshots_total",
        "",
        load(&counters.snapshots),
    );
    family(
        &mut out,
        "cardinal_snapshot_duration_seconds",
        "gauge",
        "How long the last snapshot took.",
    );
    value(
        &mut out,
        "cardinal_snapshot_duration_seconds",
        "",
        load(&counters.snapshot_micros) as f64 / 1e6,
    );
    family(
        &mut out,
        "cardinal_snapshot_bytes",
        "gauge",
        "Size of the last snapshot.",
    );
    value(
        &mut out,
        "cardinal_snapshot_bytes",
        "",
        load(&counters.snapshot_bytes),
    );
    family(
        &mut out,
        "cardinal_recovery_seconds",
        "gauge",
        "How long the last start took to recover.",
    );
    value(
        &mut out,
        "cardinal_recovery_seconds",
        "",
        service.opened().seconds,
    );
    family(
        &mut out,
        "cardinal_recovery_replayed_records",
        "gauge",
        "Log records replayed at the last start.",
    );
    value(
        &mut out,
        "cardinal_recovery_replayed_records",
        "",
        service.opened().replayed,
    );

    let held: Vec<_> = views.iter().flatten().collect();
    family(
        &mut out,
        "cardinal_rollup_groups",
        "gauge",
        "Groups a summary's rollup holds, by summary.",
    );
    for (_, stats, _) in &held {
        for stats in stats {
            let labels = format!("summary=\"{}\"", label(&stats.name));
            value(&mut out, "cardinal_rollup_groups", &labels, stats.groups);
        }
    }
    family(
        &mut out,
        "cardinal_rollup_bytes",
        "gauge",
        "Bytes a summary's rollup holds (as the memory budget counts them), by summary.",
    );
    for (_, stats, _) in &held {
        for stats in stats {
            let labels = format!("summary=\"{}\"", label(&stats.name));
            value(&mut out, "cardinal_rollup_bytes", &labels, stats.bytes);
        }
    }
    family(
        &mut out,
        "cardinal_events_dropped_total",
        "counter",
        "Records a summary dropped: its bucket past the retention window \
         (reason=\"retention\") or too far ahead of the watermark (reason=\"future_tolerance\").",
    );
    for (_, stats, dropped) in &held {
        for (stats, dropped) in stats.iter().zip(dropped) {
            let summary = label(&stats.name);
            for (reason, n) in [
                ("retention", dropped.expired),
                ("future_tolerance", dropped.future),
            ] {
                let labels = format!("summary=\"{summary}\",reason=\"{reason}\"");
                value(&mut out, "cardinal_events_dropped_total", &labels, n);
            }
        }
    }
    family(
        &mut out,
        "cardinal_stream_watermark_seconds",
        "gauge",
        "A stream's event-time watermark (the newest of its summaries'), Unix seconds.",
    );
    for (stream, _, dropped) in &held {
        if let Some(ms) = dropped.iter().filter_map(|d| d.watermark).max() {
            let labels = format!("stream=\"{}\"", label(stream));
            value(
                &mut out,
                "cardinal_stream_watermark_seconds",
                &labels,
                ms as f64 / 1e3,
            );
        }
    }

    family(
        &mut out,
        "cardinal_tcp_connections",
        "gauge",
        "Native-protocol connections open.",
    );
    value(
        &mut out,
        "cardinal_tcp_connections",
        "",
        load(&edge.metrics.tcp_connections),
    );
    family(
        &mut out,
        "cardinal_tcp_refused_total",
        "counter",
        "Connections refused at the limit.",
    );
    value(
        &mut out,
        "cardinal_tcp_refused_total",
        "",
        load(&edge.metrics.tcp_refused),
    );
    family(
        &mut out,
        "cardinal_pg_connections",
        "gauge",
        "PostgreSQL wire-protocol connections open (serve --pg).",
    );
    value(
        &mut out,
        "cardinal_pg_connections",
        "",
        load(&edge.metrics.pg_connections),
    );
    family(
        &mut out,
        "cardinal_pg_refused_total",
        "counter",
        "PostgreSQL connections refused at --pg-connections.",
    );
    value(
        &mut out,
        "cardinal_pg_refused_total",
        "",
        load(&edge.metrics.pg_refused),
    );
    let syslog = &edge.metrics.syslog;
    for (name, kind, help, figure) in [
        (
            "cardinal_syslog_connections",
            "gauge",
            "Syslog connections open (serve --relp, --syslog).",
            &syslog.connections,
        ),
        (
            "cardinal_syslog_refused_total",
            "counter",
            "Syslog connections refused at the cap.",
            &syslog.refused,
        ),
        (
            "cardinal_syslog_messages_total",
            "counter",
            "Syslog messages read (rejects and resends included).",
            &syslog.messages,
        ),
        (
            "cardinal_syslog_duplicates_total",
            "counter",
            "Syslog messages resent and recognised by their id (--syslog-id): not counted again.",
            &syslog.duplicates,
        ),
        (
            "cardinal_syslog_acknowledged_total",
            "counter",
            "RELP messages acknowledged (rsp 200) once durable.",
            &syslog.acknowledged,
        ),
    ] {
        family(&mut out, name, kind, help);
        value(&mut out, name, "", load(figure));
    }
    family(
        &mut out,
        "cardinal_syslog_rejects_total",
        "counter",
        "Syslog messages rejected before the engine (header, body, id), by reason.",
    );
    for (reason, n) in syslog
        .rejects
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        value(
            &mut out,
            "cardinal_syslog_rejects_total",
            &format!("reason=\"{reason}\""),
            *n,
        );
    }
    family(
        &mut out,
        "cardinal_http_in_flight_bytes",
        "gauge",
        "Bytes of HTTP ingest bodies read or waiting for their acknowledgement.",
    );
    let in_flight = load(&edge.metrics.http_in_flight_bytes);
    value(&mut out, "cardinal_http_in_flight_bytes", "", in_flight);
    family(
        &mut out,
        "cardinal_http_connections",
        "gauge",
        "HTTP connections open.",
    );
    value(&mut out, "cardinal_http_connections", "", edge.slots.open());
    family(
        &mut out,
        "cardinal_http_connections_closed_total",
        "counter",
        "HTTP connections closed at the cap: the oldest idle one (reason=\"evicted\") \
         or the new one, every other being busy (reason=\"refused\").",
    );
    for (reason, counter) in [
        ("evicted", &edge.metrics.http_evicted),
        ("refused", &edge.metrics.http_refused),
    ] {
        let labels = format!("reason=\"{reason}\"");
        value(
            &mut out,
            "cardinal_http_connections_closed_total",
            &labels,
            load(counter),
        );
    }
    family(
        &mut out,
        "cardinal_http_body_timeouts_total",
        "counter",
        "HTTP ingest bodies cut off at their read deadline (408).",
    );
    value(
        &mut out,
        "cardinal_http_body_timeouts_total",
        "",
        load(&edge.metrics.http_body_timeouts),
    );
    if let Some(peers) = &edge.peers {
        family(
            &mut out,
            "cardinal_peer_failures_total",
            "counter",
            "Cluster queries a peer gave no usable state for (no answer within \
             --peer-timeout, an error, a state that does not fit), by peer.",
        );
        for (url, failures) in peers.failures() {
            let labels = format!("peer=\"{}\"", label(url));
            value(&mut out, "cardinal_peer_failures_total", &labels, failures);
        }
    }
    family(
        &mut out,
        "cardinal_http_requests_total",
        "counter",
        "HTTP requests answered, by route template and status.",
    );
    let requests = edge
        .metrics
        .http_requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for ((route, status), n) in requests {
        let labels = format!("route=\"{}\",status=\"{status}\"", label(route));
        value(&mut out, "cardinal_http_requests_total", &labels, n);
    }
    let queries = &edge.metrics.query_seconds;
    let query_counts: Vec<u64> = queries.counts.iter().map(load).collect();
    histogram(
        &mut out,
        "cardinal_query_duration_seconds",
        "Live answers (GET /v1/summaries/{name}, /v1/overlap), from request to response.",
        &LATENCY_BUCKETS,
        &query_counts,
        load(&queries.sum_micros) as f64 / 1e6,
    );
    family(
        &mut out,
        "cardinal_snapshot_failures_total",
        "counter",
        "Snapshots that failed for a transient reason (no descriptor, space or memory) and were retried.",
    );
    value(
        &mut out,
        "cardinal_snapshot_failures_total",
        "",
        load(&edge.metrics.snapshot_failures),
    );
    family(
        &mut out,
        "cardinal_log_failures_total",
        "counter",
        "Times the write-ahead log failed to write or sync (a full disk, no descriptors) and the service recovered from disk in process.",
    );
    value(
        &mut out,
        "cardinal_log_failures_total",
        "",
        load(&edge.metrics.log_failures),
    );
    family(
        &mut out,
        "cardinal_build_info",
        "gauge",
        "Always 1; the labels say which build answers.",
    );
    value(
        &mut out,
        "cardinal_build_info",
        &format!("version=\"{}\"", label(env!("CARGO_PKG_VERSION"))),
        1,
    );
    if let Some(kafka) = &edge.kafka {
        kafka_families(&mut out, kafka);
        let fresh = &counters.pulled_freshness;
        let fresh_counts: Vec<u64> = fresh.counts.iter().map(load).collect();
        histogram(
            &mut out,
            "cardinal_kafka_freshness_seconds",
            "From the produce time of a batch's oldest message to the batch folded (in every answer after).",
            &LATENCY_BUCKETS,
            &fresh_counts,
            load(&fresh.sum_micros) as f64 / 1e6,
        );
    }
    process(&mut out);
    family(
        &mut out,
        "cardinal_up_seconds",
        "gauge",
        "Seconds since the service started.",
    );
    value(
        &mut out,
        "cardinal_up_seconds",
        "",
        edge.started.elapsed().as_secs_f64(),
    );
    out
}

/// The Kafka source's families: per partition its offsets and lag,
/// errors by kind, the broker's state.
fn kafka_families(out: &mut String, kafka: &crate::source::kafka::Stats) {
    let partitions = kafka
        .partitions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let labels = |topic: &str, partition: i32| {
        format!("topic=\"{}\",partition=\"{partition}\"", label(topic))
    };
    type Get = fn(&crate::source::kafka::PartitionStats) -> Option<i64>;
    let per_partition: [(&str, &str, &str, Get); 5] = [
        (
            "cardinal_kafka_lag_records",
            "gauge",
            "Offsets between the partition's high watermark and where reading stands (absent while the watermark is unknown or older than 3 s).",
            crate::source::kafka::PartitionStats::lag,
        ),
        (
            "cardinal_kafka_offset_read",
            "gauge",
            "The next offset of the partition handed to the engine.",
            |p| Some(p.read),
        ),
        (
            "cardinal_kafka_offset_covered",
            "gauge",
            "The next offset of the partition the last snapshot covers (what a restart resumes from).",
            |p| Some(p.covered),
        ),
        (
            "cardinal_kafka_high_watermark",
            "gauge",
            "The partition's high watermark, as last read from the broker.",
            |p| p.watermarks.map(|(_, high, _)| high),
        ),
        (
            "cardinal_kafka_paused",
            "gauge",
            "1 while the partition is paused because its engine is full.",
            |p| Some(i64::from(p.paused)),
        ),
    ];
    for (name, kind, help, get) in per_partition {
        family(out, name, kind, help);
        for ((topic, partition), stats) in &partitions {
            // Unknown until the broker has said (no lag of 0 before).
            if let Some(v) = get(stats) {
                value(out, name, &labels(topic, *partition), v);
            }
        }
    }
    family(
        out,
        "cardinal_kafka_messages_total",
        "counter",
        "Kafka messages handed to the engines.",
    );
    value(
        out,
        "cardinal_kafka_messages_total",
        "",
        load(&kafka.messages),
    );
    family(
        out,
        "cardinal_kafka_batches_held_total",
        "counter",
        "Batches held back (their partition paused) because an engine was full.",
    );
    value(
        out,
        "cardinal_kafka_batches_held_total",
        "",
        load(&kafka.batches_held),
    );
    family(
        out,
        "cardinal_kafka_commit_failures_total",
        "counter",
        "Offset commits (for lag display) that failed; the next snapshot commits again.",
    );
    value(
        out,
        "cardinal_kafka_commit_failures_total",
        "",
        load(&kafka.commit_failures),
    );
    family(
        out,
        "cardinal_kafka_errors_total",
        "counter",
        "Consumer errors, by librdkafka's error name.",
    );
    let errors = kafka
        .errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for (kind, n) in errors {
        value(
            out,
            "cardinal_kafka_errors_total",
            &format!("kind=\"{}\"", label(&kind)),
            n,
        );
    }
    family(
        out,
        "cardinal_kafka_broker_up",
        "gauge",
        "1 while the broker answers, 0 while it is away (ingest waits; queries answer).",
    );
    let away = kafka
        .broker_away
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some();
    value(out, "cardinal_kafka_broker_up", "", i64::from(!away));
}

/// What `/metrics` reads from a live view of one engine: rejects by
/// reason, each summary's size, what each rollup dropped.
#[derive(Debug, Clone)]
pub struct ViewFigures {
    rejects: std::collections::BTreeMap<&'static str, u64>,
    stats: Vec<cardinal_engine::SummaryStats>,
    dropped: Vec<Dropped>,
}

/// The figures of the last live views, reused while they are young
/// against what taking them cost: a view merges every worker's state (a
/// million groups took 0.15-1.6 s), so a scrape takes new ones only once
/// [`VIEW_COST_SHARE`] times their cost has passed. A small state's views
/// cost microseconds, so its figures are always fresh.
#[derive(Debug, Default)]
pub struct ViewCache {
    last: std::sync::Mutex<Option<Taken>>,
}

/// Figures taken from the views, when, and what taking them cost.
#[derive(Debug)]
struct Taken {
    at: std::time::Instant,
    cost: std::time::Duration,
    figures: Vec<Option<ViewFigures>>,
}

/// How many times a view's cost must pass before a scrape takes the
/// views again: 10, so views cost a scraped server at most a tenth of a
/// core.
pub const VIEW_COST_SHARE: u32 = 10;

impl ViewCache {
    /// The figures of every engine's view, fresh or reused (type doc).
    pub fn figures(&self, service: &crate::service::Service) -> Vec<Option<ViewFigures>> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(taken) = &*last
            && taken.at.elapsed() < taken.cost * VIEW_COST_SHARE
            && taken.figures.len() == service.streams().len()
        {
            return taken.figures.clone();
        }
        let started = std::time::Instant::now();
        let figures: Vec<Option<ViewFigures>> = (0..service.streams().len())
            .map(|i| {
                let view = service.view(i).ok()?;
                let mut rejects = std::collections::BTreeMap::<&'static str, u64>::new();
                for (reason, n) in &view.counts().rejects_by_reason {
                    *rejects
                        .entry(cardinal_engine::reject_code(reason))
                        .or_default() += n;
                }
                let stats = view.summary_stats();
                let dropped = stats
                    .iter()
                    .filter_map(|s| view.rollup(&s.name))
                    .map(|rollup| Dropped {
                        expired: rollup.dropped_expired(),
                        future: rollup.dropped_future(),
                        watermark: rollup.watermark().map(|t| t.0),
                    })
                    .collect();
                Some(ViewFigures {
                    rejects,
                    stats,
                    dropped,
                })
            })
            .collect();
        *last = Some(Taken {
            at: std::time::Instant::now(),
            cost: started.elapsed(),
            figures: figures.clone(),
        });
        figures
    }
}

/// What a summary's rollup dropped, and its watermark (ms).
#[derive(Debug, Clone)]
struct Dropped {
    expired: u64,
    future: u64,
    watermark: Option<i64>,
}

/// The standard `process_*` families, from `/proc/self` (Linux); a file
/// that cannot be read leaves its families out rather than failing the
/// scrape.
fn process(out: &mut String) {
    // SAFETY: sysconf reads a configuration value and touches no memory.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some((_, after)) = stat.rsplit_once(')')
        && ticks > 0
    {
        // Fields after the command's closing parenthesis, from field 3
        // (state) on: utime is field 14, stime 15, starttime 22, vsize
        // 23, rss 24 (proc(5)).
        let fields: Vec<&str> = after.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        let ticks = ticks as f64;
        if let (Some(user), Some(system)) = (field(14), field(15)) {
            family(
                out,
                "process_cpu_seconds_total",
                "counter",
                "Total user and system CPU time spent in seconds.",
            );
            value(
                out,
                "process_cpu_seconds_total",
                "",
                (user + system) as f64 / ticks,
            );
        }
        if let Some(bytes) = field(23) {
            family(
                out,
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
            );
            value(out, "process_virtual_memory_bytes", "", bytes);
        }
        if let (Some(pages), Ok(page)) = (field(24), u64::try_from(page)) {
            family(
                out,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
            );
            value(out, "process_resident_memory_bytes", "", pages * page);
        }
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|t| t.trim().parse::<u64>().ok())
        });
        if let (Some(start), Some(boot)) = (field(22), boot) {
            family(
                out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
            );
            value(
                out,
                "process_start_time_seconds",
                "",
                boot as f64 + start as f64 / ticks,
            );
        }
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        // The directory's own descriptor is one of the entries.
        let open = entries.count().saturating_sub(1);
        family(
            out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
        );
        value(out, "process_open_fds", "", open);
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        family(
            out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
        );
        value(out, "process_max_fds", "", limit.rlim_cur);
    }
}
