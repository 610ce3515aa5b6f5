//! The HTTP API's accept loop: each connection is one task running
//! hyper's HTTP/1 connection over [`super::http::router`], under the
//! limits `axum::serve` leaves unset.
//!
//! A client that opens connections and sends nothing, or half a request,
//! holds a file descriptor per connection and costs nothing itself; left
//! alone it takes every descriptor the process has, and the next log
//! segment or snapshot fails with `EMFILE`. Three limits keep the
//! descriptors the service needs:
//!
//! - **Header read timeout** ([`HEADER_READ_TIMEOUT`]): hyper's timer runs
//!   from the moment a connection waits for a request head (a new
//!   connection, or a kept-alive one between requests) until the whole
//!   head is read; past it the connection is closed. Bodies have their own
//!   deadline ([`super::BODY_READ_TIMEOUT`], in `http.rs`).
//! - **Connection cap** ([`super::Edge::http_connections_max`]): at the
//!   cap, a new connection closes the *oldest idle* one (waiting for a
//!   request head, no request being answered), as nginx reuses idle
//!   keep-alive connections when it runs short. A flood of half-sent
//!   requests therefore cannot lock out a client that sends whole
//!   requests: the flood's own connections are the idle ones. Only when
//!   every connection is busy answering is the new one refused: a canned
//!   503 with `Retry-After`, written without waiting and closed at once,
//!   so refusals do not hold descriptors either.
//! - **Descriptor reserve** ([`super::FD_RESERVE`]): at start the native
//!   and HTTP caps are fitted under `RLIMIT_NOFILE` less the reserve
//!   ([`super::fit_connections`]), so sockets never take the descriptors
//!   the log, snapshots and day files need.
//!
//! A connection closed at the cap is counted
//! (`cardinal_http_connections_closed_total{reason="evicted"}`), as is a
//! refusal (`reason="refused"`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::Edge;

/// How long a connection may take to send a whole request head, and how
/// long a kept-alive connection may wait for its next one. A client on
/// any working network sends a head (under 1 KiB) in well under a
/// second; 10 s is the lower end of what servers allow (Apache's
/// `mod_reqtimeout` starts at 20 s, extended by the rate) because here
/// an idle slot is also a reused one: at the cap the oldest idle
/// connection is closed anyway.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections past the cap that may be closing at once (evicted, their
/// task not yet ended): past it a new connection is refused rather than
/// evicting another, so descriptors stay bounded by the cap plus this.
pub const CLOSING_MAX: usize = 16;

/// One open HTTP connection, as the accept loop sees it.
#[derive(Debug, Default)]
struct Slot {
    /// A request is being answered (the handler runs).
    busy: AtomicBool,
    /// Told to close (evicted at the cap); counted until its task ends.
    closing: AtomicBool,
    /// Wakes the connection's task to close it.
    close: Notify,
}

/// The open HTTP connections, oldest first.
#[derive(Debug, Default)]
pub struct Slots {
    open: Mutex<BTreeMap<u64, Arc<Slot>>>,
    serial: AtomicU64,
}

impl Slots {
    /// HTTP connections open now (closing ones included).
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Accepts HTTP connections until `stop` turns true; each connection's
/// task ends on its own (a clean stop lets a request in progress finish).
pub async fn accept(
    listener: TcpListener,
    edge: Arc<Edge>,
    router: Router,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let socket = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(error) => {
                    // EMFILE included: waiting lets descriptors free up
                    // rather than spinning on the same error.
                    eprintln!("cardinal serve: accepting an HTTP connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let Some((serial, slot)) = admit(&edge) else {
            refuse(&socket);
            edge.metrics.http_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let edge = Arc::clone(&edge);
        let router = router.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            serve_connection(socket, &slot, router, stop).await;
            let mut open = edge
                .slots
                .open
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let removed = open.remove(&serial);
            assert!(removed.is_some(), "a connection leaves the table once");
        });
    }
}

/// A place for a new connection: a free one under the cap, or the oldest
/// idle connection's, which is told to close. `None`: refuse it.
fn admit(edge: &Edge) -> Option<(u64, Arc<Slot>)> {
    let slots = &edge.slots;
    let mut open = slots.open.lock().unwrap_or_else(PoisonError::into_inner);
    let closing = open
        .values()
        .filter(|s| s.closing.load(Ordering::Acquire))
        .count();
    let live = open.len() - closing;
    assert!(live <= edge.http_connections_max, "the cap holds");
    if live == edge.http_connections_max {
        if closing >= CLOSING_MAX {
            return None;
        }
        let idle = open
            .values()
            .find(|s| !s.busy.load(Ordering::Acquire) && !s.closing.load(Ordering::Acquire))?;
        idle.closing.store(true, Ordering::Release);
        idle.close.notify_one();
        edge.metrics.http_evicted.fetch_add(1, Ordering::Relaxed);
    }
    let serial = slots.serial.fetch_add(1, Ordering::Relaxed);
    let slot = Arc::new(Slot::default());
    open.insert(serial, Arc::clone(&slot));
    Some((serial, slot))
}

/// Answers a connection refused at the cap with a 503 if the socket takes
/// it at once, and closes it: nothing waits on a refused client.
fn refuse(socket: &TcpStream) {
    const BODY: &str = "too many HTTP connections: retry later\n";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = socket.try_write(response.as_bytes());
}

async fn serve_connection(
    socket: TcpStream,
    slot: &Arc<Slot>,
    router: Router,
    mut stop: watch::Receiver<bool>,
) {
    let _ = socket.set_nodelay(true);
    let tower = TowerToHyperService::new(router);
    let flag = Arc::clone(slot);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        flag.busy.store(true, Ordering::Release);
        let answer = hyper::service::Service::call(&tower, request);
        let flag = Arc::clone(&flag);
        async move {
            let response = answer.await;
            flag.busy.store(false, Ordering::Release);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connection = builder.serve_connection(TokioIo::new(socket), service);
    tokio::pin!(connection);
    let mut stopping = *stop.borrow();
    if stopping {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            _ = connection.as_mut() => return,
            // Evicted at the cap: dropping the connection closes it.
            _ = slot.close.notified() => return,
            _ = stop.changed(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}
