//! The client's side of the protocol as a state machine: no sockets, no
//! clock, no threads. A driver (a blocking `cardinal send`, a test's
//! simulated network) moves bytes and calls it.
//!
//! ```text
//!            connected() -> hello          hello ok
//!   Down ───────────────────────► Greeting ─────────► Ready ──┐
//!    ▲                                                        │ poll_send() -> batch, pong
//!    └──────────── disconnected() (any state) ◄───────────────┘ receive(ack, error, ping, pong)
//! ```
//!
//! The client holds every pushed batch until it is resolved (acknowledged,
//! or failed for good), in push order, at most
//! [`ClientConfig::held_batches_max`]. A batch gets its id when first sent:
//! one above every id sent before and above the highest the server says it
//! holds from this client id (so a client id reused by a new process never
//! collides with its old batches). Flow control: a batch is sent only if
//! its id is below the lowest unresolved id plus the in-flight limit, the
//! lesser of the server's and [`ClientConfig::in_flight_batches_max`]. The
//! limit is a span of ids, not a count, so every batch a client may have to
//! resend is within the server's deduplication window of the highest id it
//! sent ([`crate::dedup`]). Within the span the client sends without
//! waiting, so the pipeline stays full while acknowledgements come back.
//!
//! On [`Client::disconnected`] every sent, unresolved batch goes back to
//! waiting; after the next hello ok they are sent again first, in id order,
//! then the ones never sent. The server acknowledges a resent batch it
//! already holds as a duplicate and does not count it again.
//!
//! Acknowledgements may come in any order (today's server sends them in
//! log order, but nothing here relies on that); an ack or error for a
//! batch not in flight on this connection is a protocol violation, so a
//! batch is never acknowledged twice to the [`Ledger`].
//!
//! Before it resends anything, the client checks the hello ok: a server
//! whose highest id for this client is below a batch it acknowledged has
//! lost its deduplication state, and the client stops with
//! [`Error::ServerForgot`] instead of resending what could be counted
//! twice. A server that does not know the client at all, after the
//! client sent it batches on an earlier connection, is as doubtful: those
//! batches may have been counted and then forgotten, or lost before they
//! were durable (a crash before the first sync), and the hello ok does
//! not tell the two apart. A server forgets a client id only once it has
//! been idle for [`ClientConfig::server_forgets_after`] (the server's
//! [`crate::CLIENT_IDLE_SECS_MIN`]): so when the client was silent (no
//! hello, no batch) for less than that, as the driver tells it
//! ([`Client::silent_for`]), the batches were lost, not forgotten, and
//! are resent; after a longer silence (or one not measured) the client
//! stops with [`Error::ServerUnknown`] rather than resend them.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::frame::{
    Ack, Batch, BatchId, ClientAction, ClientId, ErrorCode, ErrorFrame, FRAME_BYTES_MAX, Format,
    Frame, HEADER_BYTES, Hello, HelloOk, IN_FLIGHT_BATCHES_MAX, Limits, StreamName, Token,
};

/// The batches a client holds unresolved unless configured otherwise: 64,
/// eight in-flight windows of the server's default, so the next ones are
/// ready while the window moves, in 64 MiB of 1 MiB batches.
pub const HELD_BATCHES_DEFAULT: usize = 64;

/// The failures a [`Ledger`] keeps with their messages: 64 (the rest are
/// counted in [`Ledger::failed`]).
pub const FAILURES_KEPT_MAX: usize = 64;

/// The highest batch id a client sends: `u64::MAX - 1`, so that the id
/// after it is always representable. A server holding this id from a
/// client id leaves that client id no new ids: its hello ok is refused
/// ([`Error::Protocol`]).
pub const BATCH_ID_MAX: u64 = u64::MAX - 1;

/// How a client behaves.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Its id, stable across reconnects.
    pub client: ClientId,
    /// The token to present, where the server requires one.
    pub token: Option<Token>,
    /// Its own in-flight limit (`1..=`[`IN_FLIGHT_BATCHES_MAX`]); the
    /// lesser of this and the server's applies.
    pub in_flight_batches_max: u32,
    /// The most unresolved batches it holds ([`Client::push`] refuses
    /// more); at least 1.
    pub held_batches_max: usize,
    /// The id of its first batch (later ones are higher).
    pub first_batch_id: BatchId,
    /// How long a server keeps a silent client id before it may forget
    /// it (the server's [`crate::CLIENT_IDLE_SECS_MIN`]): a server that
    /// does not know this client after a shorter silence cannot have
    /// forgotten it (module doc).
    pub server_forgets_after: Duration,
}

impl ClientConfig {
    /// The defaults for `client`: no token, the protocol's in-flight
    /// ceiling (the server's limit then decides), [`HELD_BATCHES_DEFAULT`],
    /// ids from 1.
    pub fn new(client: ClientId) -> ClientConfig {
        ClientConfig {
            client,
            token: None,
            in_flight_batches_max: IN_FLIGHT_BATCHES_MAX,
            held_batches_max: HELD_BATCHES_DEFAULT,
            first_batch_id: BatchId(1),
            server_forgets_after: Duration::from_secs(crate::CLIENT_IDLE_SECS_MIN),
        }
    }
}

/// A batch to send, before it has an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The stream.
    pub stream: StreamName,
    /// The records' format.
    pub format: Format,
    /// CSV only: the payload's first line is its header
    /// ([`Batch::header`]).
    pub header: bool,
    /// Whole records.
    pub payload: Bytes,
}

impl Outgoing {
    fn frame_bytes(&self) -> usize {
        HEADER_BYTES + 8 + 1 + 1 + self.stream.as_str().len() + self.payload.len()
    }
}

/// A batch that failed for good: not counted, not to be resent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The batch.
    pub batch: BatchId,
    /// Why.
    pub code: ErrorCode,
    /// The server's message (or the client's, for a batch over the
    /// server's frame limit, never sent).
    pub message: String,
}

/// What a client learned about its batches: the ids acknowledged, counts,
/// and failures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Acknowledged ids as sorted, disjoint, non-adjacent inclusive ranges.
    acked: Vec<(u64, u64)>,
    batches_acked: u64,
    duplicates: u64,
    accepted: u64,
    rejected: u64,
    failures: Vec<Failure>,
    failed: u64,
}

impl Ledger {
    /// Records `ack`; an id already acknowledged is an error (and changes
    /// nothing).
    fn record_ack(&mut self, ack: &Ack) -> Result<()> {
        let id = ack.id.0;
        let at = self.acked.partition_point(|&(_, end)| end < id);
        if self.acked.get(at).is_some_and(|&(start, _)| start <= id) {
            return Err(Error::Protocol {
                reason: format!("batch {id} was acknowledged twice"),
            });
        }
        let joins_before = at > 0 && self.acked[at - 1].1 + 1 == id;
        let joins_after = self
            .acked
            .get(at)
            .is_some_and(|&(start, _)| start == id + 1);
        match (joins_before, joins_after) {
            (true, true) => {
                self.acked[at - 1].1 = self.acked[at].1;
                self.acked.remove(at);
            }
            (true, false) => self.acked[at - 1].1 = id,
            (false, true) => self.acked[at].0 = id,
            (false, false) => self.acked.insert(at, (id, id)),
        }
        debug_assert!(self.acked.windows(2).all(|w| w[0].1 + 1 < w[1].0));
        self.batches_acked += 1;
        self.duplicates += u64::from(ack.duplicate);
        // Counts come from the peer: a forged one saturates, never wraps.
        self.accepted = self.accepted.saturating_add(ack.accepted);
        self.rejected = self.rejected.saturating_add(ack.rejected);
        Ok(())
    }

    fn record_failure(&mut self, failure: Failure) {
        self.failed += 1;
        if self.failures.len() < FAILURES_KEPT_MAX {
            self.failures.push(failure);
        }
    }

    /// Whether batch `id` was acknowledged.
    pub fn is_acked(&self, id: BatchId) -> bool {
        let at = self.acked.partition_point(|&(_, end)| end < id.0);
        self.acked.get(at).is_some_and(|&(start, _)| start <= id.0)
    }

    /// The acknowledged ids, as inclusive ranges in order.
    pub fn acked_ranges(&self) -> impl Iterator<Item = (BatchId, BatchId)> + '_ {
        self.acked.iter().map(|&(a, b)| (BatchId(a), BatchId(b)))
    }

    /// The highest id acknowledged.
    pub fn highest_acked(&self) -> Option<BatchId> {
        self.acked.last().map(|&(_, end)| BatchId(end))
    }

    /// Batches acknowledged (each once).
    pub fn batches_acked(&self) -> u64 {
        self.batches_acked
    }

    /// Of those, the ones acknowledged as duplicates: the server had them
    /// from an earlier send whose ack was lost, and counted them then.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Records accepted, as the acks say (duplicates' counts are not
    /// known again).
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Records rejected, as the acks say.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Batches failed for good.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// The first [`FAILURES_KEPT_MAX`] failures.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Sent,
    Resolved,
}

#[derive(Debug)]
struct Held {
    id: Option<BatchId>,
    batch: Outgoing,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Down,
    Greeting,
    Ready(Limits),
}

/// What a received frame meant to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// The hello was accepted: batches can flow.
    Ready {
        /// The server's limits.
        limits: Limits,
        /// The highest id the server holds from this client.
        highest: Option<BatchId>,
    },
    /// A batch is durable (and now in the ledger).
    Acked(Ack),
    /// A batch failed for good (and is now in the ledger).
    Failed(Failure),
    /// A ping: the pong is queued for [`Client::poll_send`].
    Pinged,
    /// A pong, with its nonce.
    Pong(u64),
    /// The connection must end: close it, call
    /// [`Client::disconnected`], back off and connect again; every
    /// unacknowledged batch is resent.
    Reconnect {
        /// The server's code.
        code: ErrorCode,
        /// The server's message.
        message: String,
    },
}

/// The client's state machine (module doc).
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    link: Link,
    held: VecDeque<Held>,
    /// Every entry before it is sent or resolved.
    cursor: usize,
    next_id: u64,
    /// The highest batch id sent on any connection so far.
    sent_max: Option<BatchId>,
    /// How long the server had not heard a hello or a batch from this
    /// client when the current connection opened, as the driver measured
    /// it ([`Client::silent_for`]); `None`: not measured, taken as long.
    silence: Option<Duration>,
    /// The last id given by [`Client::push_with_id`].
    pushed_id: Option<BatchId>,
    pong: Option<u64>,
    ledger: Ledger,
}

impl Client {
    /// A client that is not connected and holds nothing.
    ///
    /// # Panics
    ///
    /// If `config.in_flight_batches_max` is outside
    /// `1..=`[`IN_FLIGHT_BATCHES_MAX`], `config.held_batches_max` is 0 or
    /// `config.first_batch_id` is over [`BATCH_ID_MAX`].
    pub fn new(config: ClientConfig) -> Client {
        assert!((1..=IN_FLIGHT_BATCHES_MAX).contains(&config.in_flight_batches_max));
        assert!(config.held_batches_max >= 1);
        assert!(config.first_batch_id.0 <= BATCH_ID_MAX);
        Client {
            next_id: config.first_batch_id.0,
            pushed_id: None,
            config,
            link: Link::Down,
            held: VecDeque::new(),
            cursor: 0,
            sent_max: None,
            silence: None,
            pong: None,
            ledger: Ledger::default(),
        }
    }

    /// What the client learned so far.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Whether a [`Client::push`] would be taken now.
    pub fn can_push(&self) -> bool {
        self.held.len() < self.config.held_batches_max
    }

    /// Whether every pushed batch is resolved.
    pub fn is_done(&self) -> bool {
        self.held.is_empty()
    }

    /// Batches held unresolved (sent or not).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Batches sent on this connection and not yet resolved.
    pub fn in_flight(&self) -> usize {
        self.held.iter().filter(|h| h.state == State::Sent).count()
    }

    /// Whether the hello was accepted on the current connection.
    pub fn is_ready(&self) -> bool {
        matches!(self.link, Link::Ready(_))
    }

    /// Queues a batch to send. Refused when the client holds
    /// [`ClientConfig::held_batches_max`] batches ([`Error::Full`]) or when
    /// its frame would be over [`FRAME_BYTES_MAX`]
    /// ([`Error::BatchTooLarge`]); a batch over a server's smaller limit
    /// fails when that server's hello ok arrives.
    pub fn push(&mut self, batch: Outgoing) -> Result<()> {
        self.push_held(batch, None)
    }

    /// [`Client::push`] with the batch's id fixed now rather than when it
    /// is first sent: a driver that resumes an earlier run gives each batch
    /// the id it had then, so the server answers a batch it already holds
    /// as a duplicate. Ids pushed so must increase.
    ///
    /// # Panics
    ///
    /// If `id` is over [`BATCH_ID_MAX`], not above every id pushed so
    /// before, or pushed after batches without a fixed id.
    pub fn push_with_id(&mut self, batch: Outgoing, id: BatchId) -> Result<()> {
        assert!(id.0 <= BATCH_ID_MAX, "batch id {id} over BATCH_ID_MAX");
        assert!(
            self.pushed_id.is_none_or(|last| last < id),
            "batch ids pushed must increase"
        );
        assert!(
            self.held.iter().all(|h| h.id.is_some()),
            "fixed ids follow only fixed ids"
        );
        self.push_held(batch, Some(id))?;
        self.pushed_id = Some(id);
        Ok(())
    }

    fn push_held(&mut self, batch: Outgoing, id: Option<BatchId>) -> Result<()> {
        if !self.can_push() {
            return Err(Error::Full {
                held: self.held.len(),
            });
        }
        if batch.frame_bytes() > FRAME_BYTES_MAX {
            return Err(Error::BatchTooLarge {
                frame_bytes: batch.frame_bytes(),
                frame_bytes_max: FRAME_BYTES_MAX,
            });
        }
        self.held.push_back(Held {
            id,
            batch,
            state: State::Waiting,
        });
        Ok(())
    }

    /// Tells the client how long it has been since it last sent a hello
    /// or a batch (the driver keeps the clock), before
    /// [`Client::connected`]: a server cannot have forgotten a client
    /// silent for less than [`ClientConfig::server_forgets_after`].
    pub fn silent_for(&mut self, silence: Duration) {
        self.silence = Some(silence);
    }

    /// A connection is open: the frame to send first.
    ///
    /// # Panics
    ///
    /// If the client is already connected (call
    /// [`Client::disconnected`] first).
    pub fn connected(&mut self) -> Frame {
        assert_eq!(self.link, Link::Down, "connected twice");
        debug_assert!(self.held.iter().all(|h| h.state != State::Sent));
        self.link = Link::Greeting;
        Frame::Hello(Hello {
            client: self.config.client.clone(),
            token: self.config.token.clone(),
        })
    }

    /// The connection is gone (closed, reset, refused, timed out): every
    /// batch sent on it and not resolved waits to be sent again.
    pub fn disconnected(&mut self) {
        self.link = Link::Down;
        self.pong = None;
        for held in &mut self.held {
            if held.state == State::Sent {
                held.state = State::Waiting;
            }
        }
        self.cursor = 0;
    }

    /// The next frame to send, if the connection is ready and flow
    /// control allows one: a pong first, then the next waiting batch.
    pub fn poll_send(&mut self) -> Option<Frame> {
        let Link::Ready(limits) = self.link else {
            return None;
        };
        if let Some(nonce) = self.pong.take() {
            return Some(Frame::Pong(nonce));
        }
        while self
            .held
            .get(self.cursor)
            .is_some_and(|h| h.state != State::Waiting)
        {
            self.cursor += 1;
        }
        let candidate = self
            .held
            .get(self.cursor)?
            .id
            .map_or(self.next_id, |id| id.0);
        if candidate > BATCH_ID_MAX {
            // The id space is spent (2^64 - 1 batches): nothing new is sent.
            return None;
        }
        let lowest = self.held.front()?.id.map_or(candidate, |id| id.0);
        debug_assert!(lowest <= candidate);
        let window = u64::from(
            limits
                .in_flight_batches_max
                .min(self.config.in_flight_batches_max),
        );
        if candidate - lowest >= window {
            return None;
        }
        let held = &mut self.held[self.cursor];
        let id = *held.id.get_or_insert(BatchId(candidate));
        self.sent_max = self.sent_max.max(Some(id));
        self.next_id = self.next_id.max(id.0 + 1);
        held.state = State::Sent;
        self.cursor += 1;
        Some(Frame::Batch(Batch {
            id,
            stream: held.batch.stream.clone(),
            format: held.batch.format,
            header: held.batch.header,
            payload: held.batch.payload.clone(),
        }))
    }

    /// Takes a frame from the server. An `Err` is final: the client must
    /// stop (the server refused it for good, broke the protocol, or lost
    /// what it acknowledged).
    pub fn receive(&mut self, frame: Frame) -> Result<Received> {
        match (self.link, frame) {
            (Link::Down, frame) => Err(Error::Protocol {
                reason: format!("a {} frame while not connected", frame.name()),
            }),
            (Link::Greeting, Frame::HelloOk(ok)) => self.ready(ok),
            (Link::Ready(_), Frame::Ack(ack)) => {
                let index = self.in_flight_index(ack.id, "an ack")?;
                self.ledger.record_ack(&ack)?;
                self.resolve(index);
                Ok(Received::Acked(ack))
            }
            (_, Frame::Error(error)) => self.refused(error),
            (Link::Ready(_), Frame::Ping(nonce)) => {
                self.pong = Some(nonce);
                Ok(Received::Pinged)
            }
            (Link::Ready(_), Frame::Pong(nonce)) => Ok(Received::Pong(nonce)),
            (_, frame) => Err(Error::Protocol {
                reason: format!("the server sent a {} frame out of place", frame.name()),
            }),
        }
    }

    fn ready(&mut self, ok: HelloOk) -> Result<Received> {
        if let Some(acked) = self.ledger.highest_acked()
            && ok.highest.is_none_or(|known| known < acked)
        {
            return Err(Error::ServerForgot {
                acked,
                known: ok.highest,
            });
        }
        // Every batch sent so far went on an earlier connection (this one
        // is still greeting). Within the server's horizon the server
        // cannot have forgotten this client: its batches never became
        // durable, and resending them counts them once.
        let may_have_forgotten = self
            .silence
            .is_none_or(|silence| silence >= self.config.server_forgets_after);
        if let (None, Some(sent), true) = (ok.highest, self.sent_max, may_have_forgotten) {
            return Err(Error::ServerUnknown { sent });
        }
        if let Err(reason) = ok.limits.check() {
            return Err(Error::Protocol { reason });
        }
        if let Some(highest) = ok.highest {
            if highest.0 >= BATCH_ID_MAX {
                return Err(Error::Protocol {
                    reason: format!(
                        "the server holds batch {highest} from this client id: no id is left \
                         above it (use another client id)"
                    ),
                });
            }
            self.next_id = self.next_id.max(highest.0 + 1);
        }
        self.link = Link::Ready(ok.limits);
        // Batches the server's frame limit cannot take fail now, whether
        // sent before (to a server with a larger limit) or not.
        let limit = ok.limits.frame_bytes_max as usize;
        for index in 0..self.held.len() {
            let held = &mut self.held[index];
            if held.state != State::Waiting || held.batch.frame_bytes() <= limit {
                continue;
            }
            let id = held.id.unwrap_or_else(|| {
                // Never sent, so its id only names it in the ledger.
                let id = BatchId(self.next_id);
                self.next_id = self.next_id.saturating_add(1);
                id
            });
            held.id = Some(id);
            let message = format!(
                "a batch frame of {} bytes is over the server's limit of {limit} bytes",
                held.batch.frame_bytes()
            );
            self.ledger.record_failure(Failure {
                batch: id,
                code: ErrorCode::TooLarge,
                message,
            });
            held.state = State::Resolved;
        }
        self.pop_resolved();
        Ok(Received::Ready {
            limits: ok.limits,
            highest: ok.highest,
        })
    }

    fn refused(&mut self, error: ErrorFrame) -> Result<Received> {
        match error.code.action(error.batch.is_some()) {
            ClientAction::Stop => Err(Error::Refused {
                code: error.code,
                message: error.message,
            }),
            ClientAction::Reconnect => Ok(Received::Reconnect {
                code: error.code,
                message: error.message,
            }),
            ClientAction::DropBatch => {
                let id = error.batch.expect("only a batch's error drops it");
                if !self.is_ready() {
                    return Err(Error::Protocol {
                        reason: format!("an error for batch {id} before the hello ok"),
                    });
                }
                let index = self.in_flight_index(id, "an error")?;
                let failure = Failure {
                    batch: id,
                    code: error.code,
                    message: error.message,
                };
                self.ledger.record_failure(failure.clone());
                self.resolve(index);
                Ok(Received::Failed(failure))
            }
        }
    }

    fn in_flight_index(&self, id: BatchId, what: &str) -> Result<usize> {
        self.held
            .iter()
            .position(|h| h.id == Some(id) && h.state == State::Sent)
            .ok_or_else(|| Error::Protocol {
                reason: format!("{what} for batch {id}, which is not in flight"),
            })
    }

    fn resolve(&mut self, index: usize) {
        assert_eq!(self.held[index].state, State::Sent);
        self.held[index].state = State::Resolved;
        self.pop_resolved();
    }

    fn pop_resolved(&mut self) {
        while self
            .held
            .front()
            .is_some_and(|h| h.state == State::Resolved)
        {
            self.held.pop_front();
            self.cursor = self.cursor.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::SERVER_NAME as DEFAULT_SERVER;

    fn outgoing(n: u8) -> Outgoing {
        Outgoing {
            stream: StreamName::new("events").expect("valid"),
            format: Format::Csv,
            header: false,
            payload: Bytes::from(vec![b'a' + n, b'\n']),
        }
    }

    fn ready(client: &mut Client, in_flight: u32, highest: Option<BatchId>) {
        assert!(matches!(client.connected(), Frame::Hello(_)));
        let limits = Limits {
            in_flight_batches_max: in_flight,
            ..Limits::default_limits()
        };
        let ok = HelloOk {
            server: DEFAULT_SERVER.into(),
            limits,
            highest,
        };
        assert!(matches!(
            client.receive(Frame::HelloOk(ok)),
            Ok(Received::Ready { .. })
        ));
    }

    fn sent_ids(client: &mut Client) -> Vec<u64> {
        std::iter::from_fn(|| client.poll_send())
            .map(|frame| match frame {
                Frame::Batch(batch) => batch.id.0,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn ack(id: u64) -> Frame {
        Frame::Ack(Ack {
            id: BatchId(id),
            accepted: 1,
            rejected: 0,
            duplicate: false,
        })
    }

    #[test]
    fn the_window_is_a_span_of_ids() {
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        for n in 0..6 {
            client.push(outgoing(n)).expect("room");
        }
        ready(&mut client, 3, None);
        assert_eq!(sent_ids(&mut client), [1, 2, 3]);
        // Acking 2 and 3 does not open the window while 1 is unresolved.
        client.receive(ack(3)).expect("in flight");
        client.receive(ack(2)).expect("in flight");
        assert_eq!(sent_ids(&mut client), Vec::<u64>::new());
        client.receive(ack(1)).expect("in flight");
        assert_eq!(sent_ids(&mut client), [4, 5, 6]);
        assert!(client.receive(ack(1)).is_err(), "acked twice");
    }

    #[test]
    fn reconnecting_resends_in_order_and_new_ids_start_above_the_server() {
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        for n in 0..4 {
            client.push(outgoing(n)).expect("room");
        }
        ready(&mut client, 2, Some(BatchId(40)));
        assert_eq!(sent_ids(&mut client), [41, 42]);
        client.receive(ack(42)).expect("in flight");
        client.disconnected();
        ready(&mut client, 8, Some(BatchId(42)));
        assert_eq!(sent_ids(&mut client), [41, 43, 44]);
        assert!(client.ledger().is_acked(BatchId(42)));
    }

    /// Found by fuzz/fuzz_targets/protocol_frames.rs: a hello ok with the
    /// highest id u64::MAX made the next id overflow.
    #[test]
    fn a_server_holding_the_last_id_is_refused() {
        for highest in [u64::MAX, BATCH_ID_MAX] {
            let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
            client.push(outgoing(0)).expect("room");
            client.connected();
            let ok = HelloOk {
                server: DEFAULT_SERVER.into(),
                limits: Limits::default_limits(),
                highest: Some(BatchId(highest)),
            };
            assert!(matches!(
                client.receive(Frame::HelloOk(ok)),
                Err(Error::Protocol { .. })
            ));
            assert_eq!(client.poll_send(), None);
        }
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        client.push(outgoing(0)).expect("room");
        client.push(outgoing(1)).expect("room");
        ready(&mut client, 8, Some(BatchId(BATCH_ID_MAX - 1)));
        assert_eq!(sent_ids(&mut client), [BATCH_ID_MAX]);
    }

    /// Found by fuzz/fuzz_targets/protocol_frames.rs: two acks whose
    /// counts add past u64::MAX.
    #[test]
    fn forged_counts_saturate() {
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        client.push(outgoing(0)).expect("room");
        client.push(outgoing(1)).expect("room");
        ready(&mut client, 8, None);
        assert_eq!(sent_ids(&mut client), [1, 2]);
        for id in [1, 2] {
            let ack = Ack {
                id: BatchId(id),
                accepted: u64::MAX - 1,
                rejected: u64::MAX,
                duplicate: false,
            };
            client.receive(Frame::Ack(ack)).expect("in flight");
        }
        assert_eq!(client.ledger().accepted(), u64::MAX);
        assert_eq!(client.ledger().rejected(), u64::MAX);
    }

    #[test]
    fn a_server_that_forgot_acked_batches_stops_the_client() {
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        client.push(outgoing(0)).expect("room");
        client.push(outgoing(1)).expect("room");
        ready(&mut client, 8, None);
        assert_eq!(sent_ids(&mut client), [1, 2]);
        client.receive(ack(1)).expect("in flight");
        client.disconnected();
        client.connected();
        let ok = HelloOk {
            server: DEFAULT_SERVER.into(),
            limits: Limits::default_limits(),
            highest: None,
        };
        assert!(matches!(
            client.receive(Frame::HelloOk(ok)),
            Err(Error::ServerForgot { .. })
        ));
    }

    /// Issue 43, item 3: a client whose batches were all sent but none
    /// acknowledged, meeting a server that does not know it, resent them
    /// without a word (they may have been counted before the server
    /// forgot the client id).
    #[test]
    fn a_server_that_does_not_know_a_client_that_sent_stops_it() {
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        client.push(outgoing(0)).expect("room");
        client.push(outgoing(1)).expect("room");
        ready(&mut client, 8, None);
        assert_eq!(sent_ids(&mut client), [1, 2]);
        client.disconnected();
        client.silent_for(Duration::from_secs(crate::CLIENT_IDLE_SECS_MIN));
        client.connected();
        let hello_ok = |highest| {
            Frame::HelloOk(HelloOk {
                server: DEFAULT_SERVER.into(),
                limits: Limits::default_limits(),
                highest,
            })
        };
        match client.receive(hello_ok(None)) {
            Err(Error::ServerUnknown { sent }) => assert_eq!(sent, BatchId(2)),
            other => panic!("{other:?}"),
        }
        assert_eq!(client.poll_send(), None, "nothing resent");
        // A server that knows the client (some of its batches) is fine.
        let mut client = Client::new(ClientConfig::new(ClientId::new("c").expect("valid")));
        client.push(outgoing(0)).expect("room");
        client.push(outgoing(1)).expect("room");
        ready(&mut client, 8, None);
        assert_eq!(sent_ids(&mut client), [1, 2]);
        client.disconnected();
        client.connected();
        assert!(client.receive(hello_ok(Some(BatchId(1)))).is_ok());
        assert_eq!(sent_ids(&mut client), [1, 2]);
        // A server that does not know a client silent for less than its
        // horizon lost the batches (a crash before their sync): resent.
        client.disconnected();
        client.silent_for(Duration::from_secs(3));
        client.connected();
        assert!(client.receive(hello_ok(None)).is_ok());
        assert_eq!(sent_ids(&mut client), [1, 2]);
    }
}
