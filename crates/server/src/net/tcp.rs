//! The native protocol over TCP: one task per connection, reading frames
//! while the connection's window has room, handing batches to the
//! service, and writing each acknowledgement once the service answers.
//!
//! Admission is the service's: each batch goes through
//! [`Connection::offer`] to [`crate::service::Service::ingest`], and a
//! hello asks [`crate::service::Service::hello`] for the client's
//! highest batch id (or a refusal while the deduplication table has no
//! room for a new client). Nothing here keeps a table of its own.
//!
//! Back-pressure: a batch the service refuses as full is held and offered
//! again after a short wait, and the task reads nothing meanwhile, so a
//! fast client fills its socket buffers and stops (TCP flow control does
//! the rest). Limits: [`Edge::connections_max`] and
//! [`CONNECTIONS_PER_ADDRESS_MAX`] (a connection past either gets a
//! `too_many_connections` error frame and is closed), [`HELLO_DEADLINE`]
//! (a connection that has not said an accepted hello by then gets `idle`
//! and is closed, however many bytes it dribbles), the frame limit
//! (refused from the header), the in-flight window (the task stops
//! reading at it), and [`Edge::idle`] (a connection silent that long
//! with nothing pending is closed).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::{Edge, Slot};
use crate::connection::{Action, Connection, Offered};
use crate::frame::{Ack, Batch, BatchId, ClientId, Decoder, ErrorCode, ErrorFrame, Frame, encode};

/// How long a batch refused as full waits before it is offered again
/// (doubling to [`FULL_WAIT_MAX`]).
const FULL_WAIT_MIN: Duration = Duration::from_millis(1);
/// Refusals (error frame, then close) written at once past the
/// connection cap; a refused connection past these is closed unanswered,
/// so a flood of connections holds at most this many descriptors beyond
/// the cap (within [`super::FD_RESERVE`]).
pub const REFUSING_MAX: u64 = 16;
/// The longest wait between offers of a batch refused as full.
const FULL_WAIT_MAX: Duration = Duration::from_millis(50);

/// How long after it is accepted a connection has to say a hello the
/// server accepts: 5 s. A client's hello is its first frame, sent as soon
/// as it connects (a few round trips even across continents), so only a
/// connection that means to hold a slot waits longer; without the
/// deadline such connections, each dribbling a byte now and then to keep
/// [`Edge::idle`] from firing, fill every slot.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// The most native-protocol connections open at once from one IP
/// address: 64, a quarter of the default limit (`CONNECTIONS_DEFAULT`),
/// so one address cannot take every slot, while a loader running dozens
/// of `cardinal send` processes from one machine is still served (one
/// connection per client id is all a client uses). A connection past it
/// gets `too_many_connections` and is closed, as one past
/// [`Edge::connections_max`] does.
pub const CONNECTIONS_PER_ADDRESS_MAX: usize = 64;

/// Open connections per remote address (entries leave at zero).
type PerAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A connection's place in [`PerAddress`], given back when dropped.
struct AddressSlot {
    table: PerAddress,
    address: IpAddr,
}

impl AddressSlot {
    /// Takes a place for `address`, or `None` when it holds
    /// [`CONNECTIONS_PER_ADDRESS_MAX`] already.
    fn take(table: &PerAddress, address: IpAddr) -> Option<AddressSlot> {
        let mut open = table.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(address).or_insert(0);
        if *count >= CONNECTIONS_PER_ADDRESS_MAX {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: Arc::clone(table),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open
            .get_mut(&self.address)
            .expect("a slot taken is counted");
        assert!(*count > 0);
        *count -= 1;
        if *count == 0 {
            open.remove(&self.address);
        }
    }
}

/// Sends `too_many_connections` on a connection refused at a limit, from
/// a task of its own (the accept loop does not wait on a slow client).
fn refuse(edge: &Arc<Edge>, socket: TcpStream, message: &'static str) {
    edge.metrics.tcp_refused.fetch_add(1, Ordering::Relaxed);
    // A refusal's socket is a descriptor too: past REFUSING_MAX being
    // written, one is closed at once (FD_RESERVE counts these).
    let refusing = &edge.metrics.tcp_refusing;
    if refusing.fetch_add(1, Ordering::AcqRel) >= REFUSING_MAX {
        refusing.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let edge = Arc::clone(edge);
    tokio::spawn(async move {
        let mut socket = socket;
        let mut out = Vec::new();
        let error = ErrorFrame::new(None, ErrorCode::TooManyConnections, message);
        encode(&Frame::Error(error), &mut out);
        let _ = tokio::time::timeout(Duration::from_secs(1), socket.write_all(&out)).await;
        drop(socket);
        edge.metrics.tcp_refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Accepts connections until `stop` turns true.
pub async fn accept(listener: TcpListener, edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    let per_address: PerAddress = Arc::default();
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    eprintln!("cardinal serve: accepting a connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = socket.set_nodelay(true);
        let Some(slot) = AddressSlot::take(&per_address, peer.ip()) else {
            refuse(
                &edge,
                socket,
                "too many connections from this address: retry later",
            );
            continue;
        };
        // Given back however the task ends, a panic included.
        let taken = Slot::take(&edge, |e| &e.metrics.tcp_connections, edge.connections_max);
        let Some(counted) = taken else {
            refuse(&edge, socket, "too many connections: retry later");
            continue;
        };
        let edge = Arc::clone(&edge);
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(error) = connection(socket, &edge, stop).await {
                eprintln!("cardinal serve: connection from {peer}: {error}");
            }
            drop(counted);
            drop(slot);
        });
    }
}

/// What a batch's acknowledgement task reports back.
type Done = (BatchId, Result<crate::service::Acked, String>);

async fn connection(
    mut socket: TcpStream,
    edge: &Edge,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let service = edge.service();
    let mut conn = Connection::new(&edge.protocol);
    let decoder = Decoder::new(edge.protocol.limits.frame_bytes_max as usize);
    let mut buf = BytesMut::with_capacity(64 << 10);
    let mut out = Vec::with_capacity(4 << 10);
    let (done_to, mut done) = mpsc::unbounded_channel::<Done>();
    // A batch refused as full, waiting to be offered again.
    let mut held: Option<Batch> = None;
    let mut wait = FULL_WAIT_MIN;
    let mut closing = false;
    let serial = edge.metrics.tcp_serial.fetch_add(1, Ordering::Relaxed);
    let hello_by = tokio::time::Instant::now() + HELLO_DEADLINE;
    let superseded = Arc::new(tokio::sync::Notify::new());
    // Unregisters the client id when the task ends, however it ends.
    let mut registration = Registration {
        edge,
        serial,
        client: None,
    };
    loop {
        // Decode what is buffered while the window has room.
        while held.is_none() && !closing && conn.wants_read() {
            let frame = match decoder.decode_buf(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    if let Action::Close(frame) = conn.decode_failed(&error) {
                        encode(&frame, &mut out);
                    }
                    closing = true;
                    break;
                }
            };
            let greeted = conn.client().is_some();
            let hello = |client: &ClientId| {
                service
                    .hello(client)
                    .map_err(|refused| (refused.code(), refused.to_string()))
            };
            match conn.receive(frame, hello) {
                Action::Offer(batch) => held = Some(batch),
                Action::Send(frame) => {
                    encode(&frame, &mut out);
                    if let (false, Some(client)) = (greeted, conn.client()) {
                        // One connection per client id: an older one is
                        // told to close (`superseded`).
                        let client = client.clone();
                        let mut open = edge.clients.lock().unwrap_or_else(PoisonError::into_inner);
                        let mine = (serial, Arc::clone(&superseded));
                        if let Some((_, older)) = open.insert(client.clone(), mine) {
                            older.notify_one();
                        }
                        registration.client = Some(client);
                    }
                }
                Action::Close(frame) => {
                    encode(&frame, &mut out);
                    closing = true;
                }
                Action::Nothing => {}
            }
            if let Some(batch) = held.take() {
                match offer(&mut conn, edge, batch, &done_to, &mut out) {
                    Offer::Taken => wait = FULL_WAIT_MIN,
                    Offer::Full(batch) => held = Some(batch),
                    Offer::Close => closing = true,
                }
            }
        }
        if !out.is_empty() {
            write(&mut socket, &out, edge.idle).await?;
            out.clear();
        }
        if closing && conn.pending() == 0 {
            linger(&mut socket).await;
            return Ok(());
        }
        let reading = held.is_none() && !closing && conn.wants_read();
        let idle = tokio::time::sleep(edge.idle);
        let greeting = conn.client().is_none() && !closing;
        tokio::select! {
            read = socket.read_buf(&mut buf), if reading => {
                if read? == 0 {
                    // The client left; acknowledgements still pending are
                    // made (the service finishes them), nobody reads them.
                    return Ok(());
                }
                if buf.capacity() - buf.len() < 16 << 10 {
                    buf.reserve(64 << 10);
                }
            }
            Some(first) = done.recv() => {
                // Every acknowledgement ready, in one write.
                let mut next = Some(first);
                while let Some((id, result)) = next {
                    match result {
                        Ok(acked) => {
                            let ack = Ack {
                                id,
                                accepted: acked.accepted,
                                rejected: acked.rejected,
                                duplicate: acked.duplicate,
                            };
                            encode(&conn.durable(ack), &mut out);
                        }
                        Err(why) => {
                            // The service failed: nothing pending will be
                            // made durable; say so and close.
                            let error = ErrorFrame::new(None, ErrorCode::Unavailable, &why);
                            encode(&Frame::Error(error), &mut out);
                            write(&mut socket, &out, edge.idle).await?;
                            return Ok(());
                        }
                    }
                    next = done.try_recv().ok();
                }
            }
            _ = tokio::time::sleep(wait), if held.is_some() => {
                if let Some(batch) = held.take() {
                    match offer(&mut conn, edge, batch, &done_to, &mut out) {
                        Offer::Taken => wait = FULL_WAIT_MIN,
                        Offer::Full(batch) => {
                            held = Some(batch);
                            wait = (wait * 2).min(FULL_WAIT_MAX);
                        }
                        Offer::Close => closing = true,
                    }
                }
            }
            _ = tokio::time::sleep_until(hello_by), if greeting => {
                let message = format!("no hello within {} s of connecting", HELLO_DEADLINE.as_secs());
                let error = ErrorFrame::new(None, ErrorCode::Idle, &message);
                encode(&Frame::Error(error), &mut out);
                closing = true;
            }
            _ = idle, if conn.pending() == 0 && held.is_none() => {
                let error = ErrorFrame::new(None, ErrorCode::Idle, "idle for too long");
                encode(&Frame::Error(error), &mut out);
                closing = true;
            }
            _ = superseded.notified() => {
                let message = "another connection said hello with this client id";
                let error = ErrorFrame::new(None, ErrorCode::Superseded, message);
                encode(&Frame::Error(error), &mut out);
                closing = true;
                held = None;
            }
            _ = stop.changed() => {
                let error = ErrorFrame::new(None, ErrorCode::ServerStopping, "the server is stopping");
                encode(&Frame::Error(error), &mut out);
                closing = true;
                held = None;
            }
        }
    }
}

/// How long a closing connection reads (and drops) what its client still
/// sends, so the client reads the error frame before a reset.
const LINGER: Duration = Duration::from_millis(500);

/// A lingering close: stop writing, then read and drop whatever the
/// client still sends, until it closes or [`LINGER`] passes. Closing with
/// unread bytes makes the kernel send a reset, which can reach the client
/// before the error frame does.
async fn linger(socket: &mut TcpStream) {
    let _ = socket.shutdown().await;
    let mut sink = vec![0u8; 64 << 10];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Writes `bytes`, giving up after `limit`: a client that stops reading
/// its acknowledgements is cut off, and only its own task waited.
async fn write(socket: &mut TcpStream, bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    match tokio::time::timeout(limit, socket.write_all(bytes)).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the client read nothing for {limit:?}: cut off"),
        )),
    }
}

/// A connection's claim on its client id (one connection per id), given
/// up when the task ends unless a newer connection took it over.
struct Registration<'e> {
    edge: &'e Edge,
    serial: u64,
    client: Option<ClientId>,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let mut open = self
                .edge
                .clients
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if open
                .get(&client)
                .is_some_and(|(owner, _)| *owner == self.serial)
            {
                open.remove(&client);
            }
        }
    }
}

enum Offer {
    Taken,
    Full(Batch),
    Close,
}

/// Hands a batch to the service through [`Connection::offer`]; spawns
/// the wait for its reply when taken.
fn offer(
    conn: &mut Connection,
    edge: &Edge,
    batch: Batch,
    done_to: &mpsc::UnboundedSender<Done>,
    out: &mut Vec<u8>,
) -> Offer {
    let id = batch.id;
    match conn.offer(&edge.service(), batch) {
        Offered::Taken(reply) => {
            let done_to = done_to.clone();
            tokio::spawn(async move {
                let result = reply
                    .await
                    .unwrap_or_else(|_| Err("the service stopped".into()));
                let _ = done_to.send((id, result));
            });
            Offer::Taken
        }
        Offered::Full(batch) => Offer::Full(batch),
        Offered::Send(frame) => {
            encode(&frame, out);
            Offer::Taken
        }
        Offered::Close(frame) => {
            encode(&frame, out);
            Offer::Close
        }
    }
}
