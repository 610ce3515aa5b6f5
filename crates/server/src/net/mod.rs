//! The network edge of `cardinal serve`: the native protocol over TCP
//! ([`tcp`]), the HTTP API ([`http`]), `/metrics` ([`metrics`]), and
//! [`serve`], which opens the service, binds, snapshots on a timer and
//! shuts down cleanly on SIGTERM or SIGINT.
//!
//! Threads: a two-thread tokio runtime runs the sockets; each stream's
//! engine has its own workers; the log has its writer; the completer
//! answers acknowledgements; snapshots and live views run on tokio's
//! blocking pool, never on a socket task.
//!
//! File descriptors: every socket is one, and so are the log's segments,
//! snapshots being written and day files. The connection caps of both
//! edges are fitted under `RLIMIT_NOFILE` less [`FD_RESERVE`] at start
//! ([`fit_connections`]), so no number of clients can take the
//! descriptors the service needs; how the HTTP edge keeps idle clients
//! from holding its slots is at the top of [`accept`]. A snapshot that
//! fails for a transient reason (no descriptor, no space, no memory) is
//! retried with a backoff ([`SNAPSHOT_RETRY_FIRST`] doubling to
//! [`SNAPSHOT_RETRY_MAX`]): the log still holds every batch, so nothing
//! is lost while it waits.

pub mod accept;
pub mod cluster;
pub mod console;
pub mod http;
pub mod metrics;
pub mod nodes;
pub mod pg;
pub mod syslog;
pub mod tcp;

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cardinal_route::Plan;
use cardinal_store::OsDir;
use tokio::sync::watch;

use crate::connection::ServerConfig;
use crate::frame::{Limits, Token};
use crate::service::{Service, ServiceOptions};

/// Connections the native protocol serves at once by default.
pub const CONNECTIONS_DEFAULT: usize = 256;
/// The most connections `--connections` may allow.
pub const CONNECTIONS_MAX: usize = 4096;
/// How long a connection may stay silent with nothing pending.
pub const IDLE_DEFAULT: Duration = Duration::from_secs(300);
/// The largest HTTP ingest body by default.
pub const BODY_BYTES_DEFAULT: usize = 16 << 20;
/// The largest HTTP ingest body `--body-max` may allow: the largest batch
/// the service logs and folds ([`crate::service::BATCH_BYTES_MAX`], 16
/// MiB). A larger file goes in several requests, or through `cardinal
/// send`, which cuts it into batches at record ends.
pub const BODY_BYTES_MAX: usize = crate::service::BATCH_BYTES_MAX;
/// Bytes of HTTP ingest bodies being read or waiting for their
/// acknowledgement at once: past it a request is answered 503 before its
/// body is read, so memory does not grow with the number of clients.
pub const HTTP_IN_FLIGHT_BYTES_MAX: u64 = 256 << 20;
/// HTTP connections served at once by default: as many as the native
/// protocol's default, so the two edges together fit in the 1,024
/// descriptors most systems give a process, with [`FD_RESERVE`] to spare.
pub const HTTP_CONNECTIONS_DEFAULT: usize = 256;
/// The most connections `--http-connections` may allow.
pub const HTTP_CONNECTIONS_MAX: usize = 4096;
/// File descriptors no connection may take: the log's open segments (two
/// around a rotation), a snapshot being written and the directory it is
/// synced through, the lock, day files and their folders being replaced
/// (`--out`), `/proc/self` reads for `/metrics`, stdio, the runtime's
/// own (epoll, its wakers), and native refusals being written
/// ([`tcp::REFUSING_MAX`], 16), PostgreSQL refusals being answered
/// ([`pg::REFUSING_MAX`], 16) and HTTP connections being evicted
/// ([`accept::CLOSING_MAX`], 16). A server of two streams with
/// only its scrape open held 17 (`process_open_fds`, 2026-11-28, the
/// 2-core development machine); 128 leaves the log, snapshots and day
/// files several times what they use at once.
pub const FD_RESERVE: u64 = 128;
/// How long an HTTP ingest body may take to arrive before its deadline is
/// extended by what arrived (see [`BODY_RATE_MIN_BYTES_PER_SEC`]): a body
/// that sends nothing for this long is answered 408 and closed.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The slowest an HTTP ingest body may arrive on average: its deadline
/// grows by one second per this many bytes read, as Apache's
/// `mod_reqtimeout` `MinRate` does. 64 KiB/s is half a megabit per
/// second, well under any link a loader runs on, and lets a 256 MiB body
/// (`BODY_BYTES_MAX`) take up to 68 minutes.
pub const BODY_RATE_MIN_BYTES_PER_SEC: u64 = 64 << 10;
/// The first wait before a snapshot that failed for a transient reason is
/// tried again.
pub const SNAPSHOT_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between tries of a failing snapshot: a minute, so a
/// freed disk or descriptor is used soon, and the log line repeats at
/// most once a minute.
pub const SNAPSHOT_RETRY_MAX: Duration = Duration::from_secs(60);
/// How often a snapshot is written by default.
pub const SNAPSHOT_EVERY_DEFAULT: Duration = Duration::from_secs(60);
/// Log bytes since the last snapshot that trigger the next one early.
pub const SNAPSHOT_LOG_BYTES_DEFAULT: u64 = 1 << 30;
/// How long a clean shutdown waits for connections to drain.
pub const DRAIN: Duration = Duration::from_secs(10);

/// Counters of the edge itself.
#[derive(Debug, Default)]
pub struct EdgeMetrics {
    /// Native-protocol connections open.
    pub tcp_connections: AtomicU64,
    /// Connections refused at the limit.
    pub tcp_refused: AtomicU64,
    /// PostgreSQL connections open ([`pg`]).
    pub pg_connections: AtomicU64,
    /// PostgreSQL connections refused at the cap.
    pub pg_refused: AtomicU64,
    /// HTTP ingest requests answered 503 because queues were full.
    pub http_busy: AtomicU64,
    /// Bytes of HTTP ingest bodies in flight ([`HTTP_IN_FLIGHT_BYTES_MAX`]).
    pub http_in_flight_bytes: AtomicU64,
    /// Numbers native-protocol connections.
    pub tcp_serial: AtomicU64,
    /// The syslog listeners' counters ([`syslog`]).
    pub syslog: syslog::SyslogMetrics,
    /// Native refusals being written ([`tcp::REFUSING_MAX`]).
    pub tcp_refusing: AtomicU64,
    /// HTTP connections refused at the cap (every one busy).
    pub http_refused: AtomicU64,
    /// Idle HTTP connections closed to make room at the cap.
    pub http_evicted: AtomicU64,
    /// HTTP ingest bodies cut off at their read deadline (408).
    pub http_body_timeouts: AtomicU64,
    /// Snapshots that failed for a transient reason and were retried.
    pub snapshot_failures: AtomicU64,
    /// Log failures recovered from in process.
    pub log_failures: AtomicU64,
    /// HTTP requests answered, by route template and status.
    pub http_requests: std::sync::Mutex<std::collections::BTreeMap<(&'static str, u16), u64>>,
    /// Latency of live answers (`/v1/summaries/{name}`, `/v1/overlap`).
    pub query_seconds: crate::service::Histogram,
}

/// What every socket task shares.
#[derive(Debug)]
pub struct Edge {
    /// The service: replaced by a fresh one recovered from disk after its
    /// log failed ([`Edge::service`], module doc of `run`).
    service: std::sync::RwLock<Arc<Service>>,
    /// The protocol's limits and token.
    pub protocol: ServerConfig,
    /// Native-protocol connections served at once.
    pub connections_max: usize,
    /// HTTP connections served at once.
    pub http_connections_max: usize,
    /// PostgreSQL connections served at once ([`pg`]).
    pub pg_connections_max: usize,
    /// The open HTTP connections ([`accept`]).
    pub slots: accept::Slots,
    /// Idle time before a connection is closed.
    pub idle: Duration,
    /// The largest HTTP ingest body.
    pub body_bytes_max: usize,
    /// Counters.
    pub metrics: EdgeMetrics,
    /// When the service was opened.
    pub started: Instant,
    /// The open native-protocol connection of each client id (its serial,
    /// and how to tell it it was superseded).
    pub clients: std::sync::Mutex<
        std::collections::HashMap<crate::ClientId, (u64, Arc<tokio::sync::Notify>)>,
    >,
    /// The other nodes a live answer merges states from (`--peers`).
    pub peers: Option<Arc<cluster::Peers>>,
    /// This process's number among a cluster's ([`cluster::node_id`]).
    pub node_id: u64,
    /// The Kafka source's offsets, lag, errors and broker state, when the
    /// node reads Kafka.
    pub kafka: Option<Arc<crate::source::kafka::Stats>>,
    /// `/metrics`' figures from the engines' live views, reused while
    /// young against their cost.
    pub metrics_views: metrics::ViewCache,
}

/// A connection's place under its edge's cap, on a counter of
/// [`EdgeMetrics`] that is also the edge's gauge of open connections;
/// given back when dropped, however the connection's task ends (a panic
/// in one connection closes that connection only).
pub(crate) struct Slot {
    edge: Arc<Edge>,
    count: fn(&Edge) -> &AtomicU64,
}

impl Slot {
    /// A place among `max` on the counter `count` reads, or `None` when
    /// all are taken (the counter unchanged).
    pub(crate) fn take(
        edge: &Arc<Edge>,
        count: fn(&Edge) -> &AtomicU64,
        max: usize,
    ) -> Option<Slot> {
        use std::sync::atomic::Ordering;
        let open = count(edge).fetch_add(1, Ordering::AcqRel);
        if open >= max as u64 {
            count(edge).fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot {
            edge: Arc::clone(edge),
            count,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let before = (self.count)(&self.edge).fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        assert!(before > 0, "a connection counted is counted once");
    }
}

impl Edge {
    /// The service now: after a failed log, the failed one (answering
    /// queries, refusing ingest) until a fresh one has recovered from disk.
    pub fn service(&self) -> Arc<Service> {
        Arc::clone(
            &self
                .service
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Puts `fresh` in place of the service; the one it replaces.
    fn replace_service(&self, fresh: Arc<Service>) -> Arc<Service> {
        std::mem::replace(
            &mut *self
                .service
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            fresh,
        )
    }
}

/// How `cardinal serve` runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The compiled schema.
    pub plan: Arc<Plan>,
    /// The data directory (log and snapshots; locked itself while served).
    pub data: PathBuf,
    /// The native protocol's address (`None`: no native listener, as a
    /// node fed only from Kafka runs by default).
    pub listen: Option<SocketAddr>,
    /// The HTTP API's address.
    pub http: SocketAddr,
    /// The PostgreSQL front end's address (`--pg`), if any.
    pub pg: Option<SocketAddr>,
    /// PostgreSQL connections at once.
    pub pg_connections_max: usize,
    /// The token clients must present (required off loopback).
    pub token: Option<Token>,
    /// The engines and the log.
    pub service: ServiceOptions,
    /// Protocol limits (frame bytes, in-flight batches).
    pub limits: Limits,
    /// Native-protocol connections at once.
    pub connections_max: usize,
    /// HTTP connections at once.
    pub http_connections_max: usize,
    /// Idle time before a connection is closed.
    pub idle: Duration,
    /// The largest HTTP body.
    pub body_bytes_max: usize,
    /// Snapshot interval.
    pub snapshot_every: Duration,
    /// Log bytes that trigger a snapshot early.
    pub snapshot_log_bytes: u64,
    /// Per-day files (`--out`): where, and after how much lateness a day
    /// closes.
    pub out: Option<(PathBuf, crate::days::DayFilesConfig)>,
    /// The other nodes' HTTP base URLs (`--peers`): every live answer is
    /// then the whole cluster's ([`cluster`]).
    pub peers: Vec<String>,
    /// How long a peer has to answer (`--peer-timeout`).
    pub peer_timeout: Duration,
    /// The Kafka source (`--kafka`), if the node reads Kafka.
    pub kafka: Option<crate::source::kafka::KafkaConfig>,
    /// Syslog listeners (`--relp`, `--syslog`).
    pub syslog: Vec<syslog::Listen>,
    /// Where syslog messages carry their unique id (`--syslog-id`).
    pub syslog_id: syslog::IdField,
    /// Syslog listeners may listen beyond loopback (`--allow-remote`).
    pub allow_remote: bool,
}

/// Runs the server until SIGTERM or SIGINT (then: stop accepting, drain,
/// snapshot, return `Ok`) or until the service fails (an error).
pub fn serve(mut config: ServeConfig) -> Result<()> {
    let loopback = config.listen.is_none_or(|a| a.ip().is_loopback())
        && config.pg.is_none_or(|a| a.ip().is_loopback())
        && config.http.ip().is_loopback();
    if !loopback && config.token.is_none() {
        bail!(
            "listening beyond loopback ({} / {}) requires a token: --token-file FILE",
            config
                .listen
                .map_or_else(|| "no native listener".into(), |a| a.to_string()),
            config.http
        );
    }
    syslog::check(&config.plan, &config.syslog, config.allow_remote)?;
    std::fs::create_dir_all(&config.data)
        .with_context(|| format!("creating the data directory {}", config.data.display()))?;
    let lock = lock_data_dir(&config.data)?;
    // Heard from here on, recovery included: a signal always works.
    let signals = listen_for_signals()?;
    // Bind first: a port in use fails at once, not after a recovery.
    let bind = |address: SocketAddr| -> Result<std::net::TcpListener> {
        let listener = std::net::TcpListener::bind(address)
            .with_context(|| format!("listening on {address}"))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    };
    let listeners = (config.listen.map(bind).transpose()?, bind(config.http)?);
    let pg_listener = config.pg.map(bind).transpose()?;
    let syslog_listeners = config
        .syslog
        .iter()
        .map(|listen| bind(listen.address).map(|socket| (listen.clone(), socket)))
        .collect::<Result<Vec<_>>>()?;
    // The partitions this node reads, from the broker's metadata: the
    // service checks its snapshot's offsets against them.
    if let Some(kafka) = &config.kafka {
        config.service.pulled = crate::source::kafka::resolve(kafka)?;
    }
    let peers = if config.peers.is_empty() {
        None
    } else {
        let this = format!("http://{} (this node)", listeners.1.local_addr()?);
        let peers = cluster::Peers::new(
            &config.peers,
            this,
            config.peer_timeout,
            config.token.clone(),
        )
        .map_err(|why| anyhow::anyhow!("--peers: {why}"))?;
        Some(Arc::new(peers))
    };
    // The PostgreSQL cap shares the native one's part of the descriptor
    // budget, in proportion to what each asks.
    let pg_asked = if config.pg.is_some() {
        config.pg_connections_max
    } else {
        0
    };
    // Syslog connections take their fixed cap out of the same part.
    let syslog_asked = if config.syslog.is_empty() {
        0
    } else {
        syslog::SYSLOG_CONNECTIONS_MAX
    };
    let (sockets_max, http_connections_max) = fit_connections(
        config.connections_max + pg_asked + syslog_asked,
        config.http_connections_max,
    )?;
    let sockets_max = sockets_max.saturating_sub(syslog_asked).max(1);
    let (connections_max, pg_connections_max) = if pg_asked == 0 {
        (sockets_max, 0)
    } else if sockets_max >= config.connections_max + pg_asked {
        (config.connections_max, pg_asked)
    } else {
        let pg_fit = (sockets_max * pg_asked / (config.connections_max + pg_asked))
            .clamp(1, sockets_max.saturating_sub(1).max(1));
        ((sockets_max - pg_fit).max(1), pg_fit)
    };
    let dir = Arc::new(
        OsDir::open(&config.data).with_context(|| format!("opening {}", config.data.display()))?,
    );
    let started = Instant::now();
    let service = Service::open(Arc::clone(&config.plan), dir.clone(), &config.service)?;
    log_opened(&service);
    let days = match &config.out {
        Some((out, days)) => Some(Arc::new(std::sync::Mutex::new(
            crate::days::DayFiles::open(out, service.plan(), *days)
                .with_context(|| format!("--out {}", out.display()))?,
        ))),
        None => None,
    };
    let service = Arc::new(service);
    let edge = Arc::new(Edge {
        service: std::sync::RwLock::new(Arc::clone(&service)),
        protocol: ServerConfig {
            limits: config.limits,
            token: config.token.clone(),
            ..ServerConfig::default()
        },
        connections_max,
        http_connections_max,
        pg_connections_max,
        slots: accept::Slots::default(),
        idle: config.idle,
        body_bytes_max: config.body_bytes_max,
        metrics: EdgeMetrics::default(),
        started,
        clients: std::sync::Mutex::default(),
        peers,
        node_id: cluster::node_id(),
        kafka: config
            .kafka
            .as_ref()
            .map(|_| Arc::new(crate::source::kafka::Stats::default())),
        metrics_views: metrics::ViewCache::default(),
    });
    let kafka = match (&config.kafka, &edge.kafka) {
        (Some(kafka), Some(stats)) => {
            let reading = Arc::clone(&edge);
            let current: crate::source::kafka::Current = Arc::new(move || reading.service());
            let started = crate::source::kafka::Kafka::start(kafka, current, Arc::clone(stats))?;
            for (stream, pull) in &config.service.pulled {
                eprintln!(
                    "cardinal serve: stream {stream} reads Kafka topic {} partitions {} of {}",
                    pull.topic,
                    pull.partitions
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    pull.partition_count
                );
            }
            Some(started)
        }
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("edge")
        .enable_io()
        .enable_time()
        .build()
        .context("starting the async runtime")?;
    let days_at_end = days.clone();
    drop(service);
    let outcome = runtime.block_on(run(
        &config,
        Arc::clone(&edge),
        days,
        (listeners, pg_listener, syslog_listeners),
        signals,
        dir,
    ));
    // Reading stops before the last snapshot: what it covers is final.
    if let Some(kafka) = kafka {
        kafka.stop();
    }
    // The service now: the first, or one recovered in process since.
    let service = edge.service();
    drop(edge);
    runtime.shutdown_timeout(Duration::from_secs(2));
    let service = match Arc::try_unwrap(service) {
        Ok(service) => service,
        Err(_) => bail!("the service is still in use at shutdown"),
    };
    match outcome {
        Ok(()) => {
            if let Some(days) = &days_at_end {
                let files = write_days(&service, days).context("writing the day files")?;
                if files > 0 {
                    eprintln!("cardinal serve: {files} day files written");
                }
            }
            drop(days_at_end);
            let written = service.close()?;
            if let Some(written) = written {
                eprintln!(
                    "cardinal serve: stopped; snapshot {} ({} bytes, {:.2} s)",
                    written.name, written.bytes, written.seconds
                );
            }
            drop(lock);
            Ok(())
        }
        Err(error) => {
            // Nothing more is written: the next start recovers from disk.
            let _ = service.close();
            Err(error)
        }
    }
}

/// Takes an exclusive `flock` on the data directory itself, held for the
/// process's life (released when it exits, however it exits).
///
/// The directory, not a file in it: a lock file can be unlinked while a
/// server runs (a tmp cleaner, a wrong `rm`), and the next server then
/// creates a new file with a new inode and locks that, so two servers
/// append to one log and both acknowledge. A directory cannot be unlinked
/// while it holds the log, and a directory opened read-only takes `flock`
/// like a file (Linux, the BSDs, macOS), as `run --out` locks its folder
/// (`export/src/outdir.rs`). A `LOCK` file older builds left is ignored.
fn lock_data_dir(data: &std::path::Path) -> Result<File> {
    let lock = File::open(data)
        .with_context(|| format!("opening the data directory {}", data.display()))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another cardinal serve is using {} (it holds the directory's lock)",
            data.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).with_context(|| format!("locking the data directory {}", data.display()))
        }
    }
}

/// Fits the native and HTTP connection caps under the process's
/// descriptor limit less [`FD_RESERVE`]: the soft limit is raised toward
/// the hard one as far as the caps need (as Go's runtime raises it at
/// start), and if that is not enough both caps shrink in proportion, with
/// a log line. Fails when not even one connection of each kind fits.
pub fn fit_connections(tcp: usize, http: usize) -> Result<(usize, usize)> {
    assert!(tcp >= 1 && http >= 1, "a cap of at least one connection");
    let wanted = (tcp + http) as u64 + FD_RESERVE;
    let limit = raise_nofile(wanted).context("reading RLIMIT_NOFILE")?;
    let Some((tcp_fit, http_fit)) = split_caps(limit, tcp, http) else {
        bail!(
            "only {limit} file descriptors (ulimit -n): cardinal serve keeps {FD_RESERVE} \
             for its log and snapshots and needs at least {} (ulimit -n {})",
            FD_RESERVE + 2,
            FD_RESERVE + 2
        );
    };
    if (tcp_fit, http_fit) != (tcp, http) {
        eprintln!(
            "cardinal serve: {limit} file descriptors (ulimit -n): at most {tcp_fit} native \
             and {http_fit} HTTP connections, {FD_RESERVE} kept for the log, snapshots and \
             day files"
        );
    }
    Ok((tcp_fit, http_fit))
}

/// The caps that fit `limit` descriptors less [`FD_RESERVE`]: the asked
/// ones when they fit, else both shrunk in proportion (at least one
/// each); `None` when not even that fits.
fn split_caps(limit: u64, tcp: usize, http: usize) -> Option<(usize, usize)> {
    let budget = usize::try_from(limit.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX);
    if budget < 2 {
        return None;
    }
    if tcp + http <= budget {
        return Some((tcp, http));
    }
    let tcp_fit = (budget * tcp / (tcp + http)).clamp(1, budget - 1);
    let http_fit = (budget - tcp_fit).min(http);
    assert!(tcp_fit + http_fit <= budget, "the caps fit the budget");
    assert!(
        tcp_fit >= 1 && http_fit >= 1,
        "each edge keeps a connection"
    );
    Some((tcp_fit, http_fit))
}

/// The soft `RLIMIT_NOFILE`, first raised to `wanted` (at most the hard
/// limit) when it is lower.
fn raise_nofile(wanted: u64) -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` we own and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur >= wanted {
        return Ok(limit.rlim_cur.min(u64::MAX as libc::rlim_t));
    }
    let raised = libc::rlimit {
        rlim_cur: wanted.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one `rlimit` we own; raising the soft limit
    // up to the hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return Ok(raised.rlim_cur);
    }
    Ok(limit.rlim_cur)
}

/// Whether a failed snapshot may succeed if tried again: it ran out of
/// descriptors, space or memory, or was interrupted. A snapshot is a new
/// file written beside the kept ones, so a failed one leaves nothing to
/// undo (its temporary file is removed by the next); any other failure
/// (an I/O error, a sync that failed) still stops the server.
pub fn transient(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            match cause.downcast_ref::<cardinal_store::Error>() {
                Some(cardinal_store::Error::Io { source, .. }) => Some(source),
                _ => None,
            }
        });
        io.and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| {
                [
                    libc::EMFILE,
                    libc::ENFILE,
                    libc::ENOSPC,
                    libc::EDQUOT,
                    libc::ENOMEM,
                    libc::EINTR,
                    libc::EAGAIN,
                ]
                .contains(&code)
            })
    })
}

fn log_opened(service: &Service) {
    let opened = service.opened();
    for skipped in &opened.skipped {
        eprintln!("cardinal serve: skipped a damaged snapshot: {skipped}");
    }
    if let Some(cut) = &opened.cut {
        eprintln!("cardinal serve: write-ahead log: {cut}");
    }
    if let Some(repaired) = &opened.repaired {
        eprintln!("cardinal serve: write-ahead log: {repaired}");
    }
    if let Some(moved) = &opened.moved {
        eprintln!("cardinal serve: write-ahead log: {moved}");
    }
    if let Some(fallback) = &opened.fallback {
        eprintln!("cardinal serve: {fallback}");
    }
    for aside in &opened.snapshots_set_aside {
        eprintln!("cardinal serve: a damaged snapshot set aside as {aside}");
    }
    for said in &opened.set_aside {
        eprintln!("cardinal serve: {said}");
    }
    if opened.skipped_records > 0 {
        eprintln!(
            "cardinal serve: {} log records set aside (set-aside-*.record in the data directory) \
             were skipped",
            opened.skipped_records
        );
    }
    eprintln!(
        "cardinal serve: recovered from {} and {} log records ({} bytes) in {:.3} s",
        opened.snapshot.as_deref().unwrap_or("no snapshot"),
        opened.replayed,
        opened.replayed_bytes,
        opened.seconds
    );
}

/// Writes the closed days' files from fresh views of every engine.
fn write_days(service: &Service, days: &std::sync::Mutex<crate::days::DayFiles>) -> Result<usize> {
    let mut days = days
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let views = (0..service.streams().len())
        .map(|i| service.view(i))
        .collect::<Result<Vec<_>>>()?;
    // A published file holds only what a crash cannot take back: every
    // batch in the views is synced before a byte is written.
    service.wait_durable()?;
    let plan = service.plan();
    let mut pairs = Vec::new();
    for view in &views {
        for name in view.summaries() {
            if let (Some(summary), Some(rollup)) = (
                plan.summaries.iter().find(|s| &s.name == name),
                view.rollup(name),
            ) {
                pairs.push((summary, rollup));
            }
        }
    }
    Ok(days.update(pairs)?.len())
}

/// A snapshot, then the day files (if any): what the timer runs.
fn snapshot_and_days(
    service: &Service,
    days: Option<&std::sync::Mutex<crate::days::DayFiles>>,
) -> Result<(crate::service::Written, usize)> {
    let written = service.snapshot()?;
    let files = match days {
        Some(days) => write_days(service, days).context("writing the day files")?,
        None => 0,
    };
    Ok((written, files))
}

/// The first wait before a server whose log failed opens its data
/// directory again, in process, as a restart would (doubling to
/// [`RECOVER_WAIT_MAX`] while it fails: a disk still full).
pub const RECOVER_WAIT_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries at recovering in process.
pub const RECOVER_WAIT_MAX: Duration = Duration::from_secs(30);

/// How a service's failure reads when its log failed to write or sync:
/// the failure the server recovers from in process.
const LOG_FAILED: &str = "the write-ahead log failed";

/// A recovery in process under way (module doc, `run`).
struct Recovering {
    /// When to try next.
    at: Instant,
    /// The wait after a failed try.
    wait: Duration,
    /// The open in progress.
    task: Option<tokio::task::JoinHandle<Result<Service>>>,
}

/// How soon a failed server's process ends, whatever its orderly stop
/// is waiting on: a supervisor restarts it, and the next start recovers
/// from disk (nothing more is written once the service has failed).
pub const FAILED_EXIT_WITHIN: Duration = Duration::from_secs(5);

/// Starts the bound on a failed server's stop ([`FAILED_EXIT_WITHIN`]);
/// `why`, for the loop to break with.
fn exiting(why: String) -> String {
    exit_within(FAILED_EXIT_WITHIN, &why);
    why
}

/// Ends the process with status 1 once `within` has passed, from a thread
/// of its own, saying why: the bound on a failed server's stop.
fn exit_within(within: Duration, why: &str) {
    eprintln!("cardinal serve: failed: {why}; exiting within {within:?}");
    let why = why.to_owned();
    let _ = std::thread::Builder::new()
        .name("exit-watchdog".into())
        .spawn(move || {
            std::thread::sleep(within);
            eprintln!("cardinal serve: exiting now: {why}");
            std::process::exit(1);
        });
}

/// SIGTERM and SIGINT, heard on a thread of their own for the life of the
/// process (not on the edge's runtime, which stops before the last
/// snapshot is written): the first asks for an orderly stop (the watch
/// turns `true`), a second ends the process at once with status 1 (the
/// next start recovers from the log). So a signal always works, however
/// the stop is going.
fn listen_for_signals() -> Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal thread's runtime")?;
    let (mut terminate, mut interrupt) = {
        let _inside = runtime.enter();
        (
            signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        )
    };
    let (stop_to, stop) = watch::channel(false);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut heard = 0;
                loop {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                    heard += 1;
                    if heard == 1 {
                        let _ = stop_to.send(true);
                    } else {
                        eprintln!(
                            "cardinal serve: a second signal: exiting now, without a last \
                             snapshot (the next start recovers from the log)"
                        );
                        std::process::exit(1);
                    }
                }
            });
        })
        .context("starting the signal thread")?;
    Ok(stop)
}

/// The listeners bound at start: (native, HTTP), PostgreSQL, syslog.
type Bound = (
    (Option<std::net::TcpListener>, std::net::TcpListener),
    Option<std::net::TcpListener>,
    Vec<(syslog::Listen, std::net::TcpListener)>,
);

async fn run(
    config: &ServeConfig,
    edge: Arc<Edge>,
    days: Option<Arc<std::sync::Mutex<crate::days::DayFiles>>>,
    ((tcp, http), pg, syslog_listeners): Bound,
    mut signals: watch::Receiver<bool>,
    dir: Arc<OsDir>,
) -> Result<()> {
    let tcp = tcp.map(tokio::net::TcpListener::from_std).transpose()?;
    let http = tokio::net::TcpListener::from_std(http)?;
    let mut addresses = match &tcp {
        Some(tcp) => format!(
            "cardinal serve: native protocol on {}, HTTP on http://{}, data in {}\n",
            tcp.local_addr()?,
            http.local_addr()?,
            config.data.display()
        ),
        None => format!(
            "cardinal serve: HTTP on http://{}, data in {} (no native listener)\n",
            http.local_addr()?,
            config.data.display()
        ),
    };
    let pg = pg.map(tokio::net::TcpListener::from_std).transpose()?;
    if let Some(pg) = &pg {
        addresses.push_str(&format!(
            "cardinal serve: PostgreSQL on {} (psql -h {} -p {} -d cardinal)\n",
            pg.local_addr()?,
            pg.local_addr()?.ip(),
            pg.local_addr()?.port()
        ));
    }
    let mut syslog_sockets = Vec::with_capacity(syslog_listeners.len());
    for (listen, socket) in syslog_listeners {
        let socket = tokio::net::TcpListener::from_std(socket)?;
        addresses.push_str(&format!(
            "cardinal serve: {} on {} feeds stream {}\n",
            match listen.protocol {
                syslog::Protocol::Relp => "RELP",
                syslog::Protocol::Tcp => "syslog over TCP",
            },
            socket.local_addr()?,
            listen.stream
        ));
        syslog_sockets.push((listen, socket));
    }
    // Last, so the lines before keep their places for scripts.
    addresses.push_str(&format!(
        "cardinal serve: console at http://{}/ (open it in a browser)\n",
        http.local_addr()?
    ));
    // One write, whose failure is not the server's: a reader that went
    // away after the first line (a script, a test) must not stop it.
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(addresses.as_bytes());
        let _ = out.flush();
    }
    let (stop_to, stop) = watch::channel(false);
    // A listener's task ends only when told to stop; one that ends before
    // (a panic) stops the server rather than leave it half up.
    let mut pg_accept = pg.map(|pg| tokio::spawn(pg::accept(pg, Arc::clone(&edge), stop.clone())));
    let accept = tcp.map(|tcp| tokio::spawn(tcp::accept(tcp, Arc::clone(&edge), stop.clone())));
    let mut syslog_accept = tokio::task::JoinSet::new();
    for (listen, socket) in syslog_sockets {
        syslog_accept.spawn(syslog::accept(
            socket,
            listen,
            config.syslog_id.clone(),
            Arc::clone(&edge),
            stop.clone(),
        ));
    }
    let router = http::router(Arc::clone(&edge));
    let web = tokio::spawn(accept::accept(
        http,
        Arc::clone(&edge),
        router,
        stop.clone(),
    ));
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut last_snapshot = Instant::now();
    let mut log_bytes_at_snapshot = edge.service().progress_bytes();
    type Snapshotting = tokio::task::JoinHandle<Result<(crate::service::Written, usize)>>;
    let mut snapshotting: Option<Snapshotting> = None;
    // After the log failed: when to try opening from disk again.
    let mut recovering: Option<Recovering> = None;
    // A failed snapshot: when to try again, the wait after that, and the
    // log size before it (so it is due again).
    let mut retry_at: Option<Instant> = None;
    let mut retry_wait = SNAPSHOT_RETRY_FIRST;
    let mut log_bytes_before = log_bytes_at_snapshot;
    let failure = loop {
        tokio::select! {
            _ = signals.changed() => break None,
            ended = async { pg_accept.as_mut().expect("checked").await }, if pg_accept.is_some() => {
                pg_accept = None;
                let why = match ended {
                    Err(error) if error.is_panic() => "the PostgreSQL listener panicked".to_owned(),
                    _ => "the PostgreSQL listener stopped".to_owned(),
                };
                break Some(exiting(why));
            }
            ended = syslog_accept.join_next(), if !syslog_accept.is_empty() => {
                let why = match ended {
                    Some(Err(error)) if error.is_panic() => "a syslog listener panicked",
                    _ => "a syslog listener stopped",
                };
                break Some(exiting(why.to_owned()));
            }
            _ = tick.tick() => {
                if let Some(why) = edge.service().failed() {
                    // A log that failed to write or sync (a full disk, no
                    // descriptors) is recovered from in process, as a
                    // restart would; anything else ends the process.
                    if !why.starts_with(LOG_FAILED) {
                        break Some(exiting(why));
                    }
                    match &mut recovering {
                        None => {
                            eprintln!(
                                "cardinal serve: {why}; ingest refused, queries answered from \
                                 the state before it, recovering from disk in process"
                            );
                            edge.metrics.log_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            recovering = Some(Recovering {
                                at: Instant::now(),
                                wait: RECOVER_WAIT_FIRST,
                                task: None,
                            });
                        }
                        Some(state) => {
                            // A snapshot of the failed service ends in an
                            // error the failure already says.
                            if snapshotting.as_ref().is_some_and(tokio::task::JoinHandle::is_finished) {
                                snapshotting = None;
                            }
                            if let Some(task) = &state.task && task.is_finished() {
                                let task = state.task.take().expect("checked");
                                match task.await {
                                    Ok(Ok(fresh)) => {
                                        log_opened(&fresh);
                                        let old = edge.replace_service(Arc::new(fresh));
                                        eprintln!(
                                            "cardinal serve: recovered in process after: {why}"
                                        );
                                        log_bytes_at_snapshot = edge.service().progress_bytes();
                                        last_snapshot = Instant::now();
                                        recovering = None;
                                        // Its engines' threads join as it goes.
                                        tokio::task::spawn_blocking(move || drop(old));
                                        continue;
                                    }
                                    Ok(Err(error)) => eprintln!(
                                        "cardinal serve: recovering from disk failed: {error:#}; \
                                         trying again in {} s",
                                        state.wait.as_secs()
                                    ),
                                    Err(error) => {
                                        break Some(exiting(format!(
                                            "recovering from disk panicked: {error}"
                                        )));
                                    }
                                }
                                state.at = Instant::now() + state.wait;
                                state.wait = (state.wait * 2).min(RECOVER_WAIT_MAX);
                            }
                            if state.task.is_none()
                                && Instant::now() >= state.at
                                && snapshotting.is_none()
                            {
                                let plan = Arc::clone(&config.plan);
                                let options = config.service.clone();
                                let dir: Arc<dyn cardinal_store::Dir> = dir.clone();
                                state.task = Some(tokio::task::spawn_blocking(move || {
                                    Service::open(plan, dir, &options)
                                }));
                            }
                        }
                    }
                    continue;
                }
                if let Some(task) = &snapshotting && task.is_finished() {
                    let task = snapshotting.take().expect("checked");
                    match task.await {
                        Ok(Ok((written, files))) => {
                            retry_at = None;
                            retry_wait = SNAPSHOT_RETRY_FIRST;
                            eprintln!(
                                "cardinal serve: snapshot {} ({} bytes, {:.3} s, ingest paused {:.1} ms, {} log segments removed{})",
                                written.name, written.bytes, written.seconds,
                                written.paused.as_secs_f64() * 1e3, written.trimmed,
                                if files > 0 { format!("; {files} day files written") } else { String::new() }
                            );
                        }
                        Ok(Err(error)) if transient(&error) => {
                            edge.metrics.snapshot_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            eprintln!(
                                "cardinal serve: a snapshot failed: {error:#}; trying again in {} s (the log keeps every batch meanwhile)",
                                retry_wait.as_secs()
                            );
                            retry_at = Some(Instant::now() + retry_wait);
                            retry_wait = (retry_wait * 2).min(SNAPSHOT_RETRY_MAX);
                            log_bytes_at_snapshot = log_bytes_before;
                        }
                        // The log failed under it: recovered from next.
                        Ok(Err(_)) if edge.service().failed().is_some_and(|why| why.starts_with(LOG_FAILED)) => {}
                        Ok(Err(error)) => {
                            break Some(exiting(format!("a snapshot failed: {error:#}")));
                        }
                        Err(error) => {
                            break Some(exiting(format!("a snapshot panicked: {error}")));
                        }
                    }
                }
                let log_bytes = edge.service().progress_bytes();
                // An idle service writes no new snapshot: nothing changed
                // (bytes logged by push sources and read by pull sources).
                let due = (last_snapshot.elapsed() >= config.snapshot_every
                    && log_bytes > log_bytes_at_snapshot)
                    || log_bytes - log_bytes_at_snapshot >= config.snapshot_log_bytes
                    || retry_at.is_some_and(|at| Instant::now() >= at);
                let waiting = retry_at.is_some_and(|at| Instant::now() < at);
                if due && snapshotting.is_none() && !waiting {
                    last_snapshot = Instant::now();
                    log_bytes_before = log_bytes_at_snapshot;
                    log_bytes_at_snapshot = log_bytes;
                    let service = Arc::clone(&edge.service());
                    let days = days.clone();
                    snapshotting = Some(tokio::task::spawn_blocking(move || {
                        snapshot_and_days(&service, days.as_deref())
                    }));
                }
            }
        }
    };
    let _ = stop_to.send(true);
    edge.service().stop_ingest();
    if let Some(task) = snapshotting.take() {
        let _ = task.await;
    }
    let drained = tokio::time::timeout(DRAIN, async {
        if let Some(accept) = accept {
            let _ = accept.await;
        }
        let _ = web.await;
        if let Some(pg_accept) = pg_accept {
            let _ = pg_accept.await;
        }
        while syslog_accept.join_next().await.is_some() {}
        while edge
            .metrics
            .tcp_connections
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
            || edge.slots.open() > 0
            || edge
                .metrics
                .pg_connections
                .load(std::sync::atomic::Ordering::Acquire)
                > 0
            || edge
                .metrics
                .syslog
                .connections
                .load(std::sync::atomic::Ordering::Acquire)
                > 0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if drained.is_err() {
        eprintln!("cardinal serve: connections did not drain in {DRAIN:?}; closing anyway");
    }
    match failure {
        None => {
            eprintln!("cardinal serve: stopping (signal): flushing and writing a snapshot");
            Ok(())
        }
        Some(why) => bail!("stopping: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_fit_under_the_descriptor_limit() {
        assert_eq!(split_caps(1024, 256, 256), Some((256, 256)));
        assert_eq!(split_caps(256, 256, 256), Some((64, 64)));
        assert_eq!(split_caps(300, 4096, 256), Some((161, 11)));
        assert_eq!(split_caps(FD_RESERVE + 2, 256, 256), Some((1, 1)));
        assert_eq!(split_caps(FD_RESERVE + 1, 1, 1), None);
        assert_eq!(split_caps(u64::MAX, 4096, 4096), Some((4096, 4096)));
    }

    #[test]
    fn only_running_out_is_transient() {
        let os = |code| std::io::Error::from_raw_os_error(code);
        let store = |code| cardinal_store::Error::Io {
            op: "create",
            name: "snapshot-1.tmp".into(),
            source: os(code),
        };
        for code in [libc::EMFILE, libc::ENFILE, libc::ENOSPC, libc::ENOMEM] {
            let error = anyhow::Error::new(store(code)).context("writing a snapshot");
            assert!(transient(&error), "{error:#}");
            assert!(transient(&anyhow::Error::new(os(code))));
        }
        for code in [libc::EIO, libc::EROFS, libc::EACCES] {
            let error = anyhow::Error::new(store(code)).context("writing a snapshot");
            assert!(!transient(&error), "{error:#}");
        }
        assert!(!transient(&anyhow::anyhow!("the completer stopped")));
    }
}
