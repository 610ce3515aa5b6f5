//! `/metrics` in the Prometheus text format (version 0.0.4), with
//! Prometheus naming: base units (`_seconds`, `_bytes`), `_total` for
//! counters, one `# HELP` and `# TYPE` per family.

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
    let service = &edge.service;
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
    let mut views = Vec::new();
    for (i, stream) in streams.iter().enumerate() {
        match service.view(i) {
            Ok(view) => {
                for (reason, n) in &view.counts().rejects_by_reason {
                    let labels =
                        format!("stream=\"{}\",reason=\"{}\"", label(stream), label(reason));
                    value(&mut out, "cardinal_events_rejected_total", &labels, n);
                }
                views.push(Some(view.summary_stats()));
            }
            Err(_) => views.push(None),
        }
    }
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
    let (clients_evicted, keys_evicted) = edge.service.evictions();
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

    family(
        &mut out,
        "cardinal_summary_groups",
        "gauge",
        "Groups held, by summary.",
    );
    let mut bytes = String::new();
    for stats in views.iter().flatten().flatten() {
        let labels = format!("summary=\"{}\"", label(&stats.name));
        value(&mut out, "cardinal_summary_groups", &labels, stats.groups);
        value(&mut bytes, "cardinal_summary_bytes", &labels, stats.bytes);
    }
    family(
        &mut out,
        "cardinal_summary_bytes",
        "gauge",
        "Bytes held, by summary.",
    );
    out.push_str(&bytes);

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
        "cardinal_http_in_flight_bytes",
        "gauge",
        "Bytes of HTTP ingest bodies read or waiting for their acknowledgement.",
    );
    let in_flight = load(&edge.metrics.http_in_flight_bytes);
    value(&mut out, "cardinal_http_in_flight_bytes", "", in_flight);
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
