//! The server's side of one connection as a state machine: no sockets, no
//! log, no engine. The server's reader decodes frames and hands each to
//! [`Connection::receive`], which says what to do ([`Action`]); the server
//! does it and, once a batch is durable, asks [`Connection::durable`] for
//! its ack.
//!
//! ```text
//!   Greeting ── hello (version, client id, token checked) ──► Ready
//!      │  anything else: protocol error, close                 │ batch, ping, pong
//!      ▼                                                       ▼
//!    closed ◄── decoding error, a hello again, a server-only frame, stop
//! ```
//!
//! A batch is checked against the deduplication table first (a duplicate
//! is acknowledged again, even if its stream has gone since), then against
//! the streams the server has (the caller's check: unknown stream, wrong
//! format), and only then admitted, marking it in the table: so the table
//! says exactly which batches went to the log. A duplicate's ack must wait
//! until everything admitted so far is durable, since its first copy may
//! still be in the group commit under way.
//!
//! Flow control on the server: [`Connection::wants_read`] is false while
//! the connection has as many batches waiting for durability as its
//! in-flight limit; the server then stops reading the socket, TCP's window
//! fills and the client's writes block. A client that keeps to the limit
//! never meets this; one that does not is slowed, not cut off.
//!
//! One connection per client id: when a hello names a client id that has
//! a connection open, the server closes the older one with
//! [`ErrorCode::Superseded`] (the usual reason is a client that
//! reconnected before the server noticed its old connection died). The
//! older connection's admitted batches are still made durable; the client
//! resends them on the new connection and gets duplicate acks. Which
//! connections are open is the server's registry, not this file's.

use crate::dedup::{DedupTable, Verdict};
use crate::error::Error;
use crate::frame::{
    Ack, Batch, ClientId, ErrorCode, ErrorFrame, Format, Frame, HelloOk, Limits, StreamName, Token,
};

/// The name a server gives in its hello ok.
pub const SERVER_NAME: &str = concat!("cardinal ", env!("CARGO_PKG_VERSION"));

/// How a server treats its connections.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// What clients must respect (checked by [`Limits::check`]).
    pub limits: Limits,
    /// The token a hello must carry, if any: required whenever the server
    /// listens beyond loopback.
    pub token: Option<Token>,
    /// The name in hello oks.
    pub server: String,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            limits: Limits::default_limits(),
            token: None,
            server: SERVER_NAME.to_owned(),
        }
    }
}

/// What the server does after a frame (or a decoding error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send the frame and go on.
    Send(Frame),
    /// Send the frame, then close the connection.
    Close(Frame),
    /// A new batch, now marked in the deduplication table: parse it,
    /// append it to the log and, once durable, send
    /// [`Connection::durable`]'s ack.
    Admit(Batch),
    /// A batch admitted before: send this ack once everything admitted so
    /// far is durable, through [`Connection::durable`].
    AckWhenDurable(Ack),
    /// Nothing to send.
    Nothing,
}

/// The server's state for one connection (module doc).
#[derive(Debug)]
pub struct Connection {
    limits: Limits,
    token: Option<Token>,
    server: String,
    client: Option<ClientId>,
    pending: u32,
    closed: bool,
}

impl Connection {
    /// A connection waiting for its hello.
    ///
    /// # Panics
    ///
    /// If `config.limits` fail [`Limits::check`].
    pub fn new(config: &ServerConfig) -> Connection {
        if let Err(reason) = config.limits.check() {
            panic!("server limits: {reason}");
        }
        Connection {
            limits: config.limits,
            token: config.token.clone(),
            server: config.server.clone(),
            client: None,
            pending: 0,
            closed: false,
        }
    }

    /// The client, once its hello was accepted.
    pub fn client(&self) -> Option<&ClientId> {
        self.client.as_ref()
    }

    /// Batches admitted (or duplicates) waiting for durability.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Whether the server should read more from the socket (module doc).
    pub fn wants_read(&self) -> bool {
        !self.closed && self.pending < self.limits.in_flight_batches_max
    }

    /// Whether an action closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// What to do with `frame`. `streams` checks a batch's stream and
    /// format against what the server has, and gives the code and message
    /// to refuse it with.
    pub fn receive(
        &mut self,
        frame: Frame,
        dedup: &mut DedupTable,
        streams: impl FnOnce(&StreamName, Format) -> Result<(), (ErrorCode, String)>,
    ) -> Action {
        assert!(!self.closed, "a frame after the connection closed");
        match (&self.client, frame) {
            (None, Frame::Hello(hello)) => {
                let authorized = match (&self.token, &hello.token) {
                    (None, _) => true,
                    (Some(expected), Some(given)) => expected.matches(given),
                    (Some(_), None) => false,
                };
                if !authorized {
                    return self.close(ErrorCode::NotAuthorized, "a valid token is required");
                }
                dedup.touch(&hello.client);
                let highest = dedup.highest(&hello.client);
                self.client = Some(hello.client);
                Action::Send(Frame::HelloOk(HelloOk {
                    server: self.server.clone(),
                    limits: self.limits,
                    highest,
                }))
            }
            (Some(client), Frame::Batch(batch)) => {
                match dedup.check(client, batch.id) {
                    Verdict::Duplicate => {
                        self.pending += 1;
                        return Action::AckWhenDurable(Ack {
                            id: batch.id,
                            accepted: 0,
                            rejected: 0,
                            duplicate: true,
                        });
                    }
                    Verdict::TooOld => {
                        let message = format!(
                            "batch {} is older than the deduplication window below batch {}: \
                             it may have been counted, so it is refused",
                            batch.id,
                            dedup.highest(client).map_or(0, |id| id.0)
                        );
                        let error = ErrorFrame::new(Some(batch.id), ErrorCode::TooOld, &message);
                        return Action::Send(Frame::Error(error));
                    }
                    Verdict::New => {}
                }
                if let Err((code, message)) = streams(&batch.stream, batch.format) {
                    let error = ErrorFrame::new(Some(batch.id), code, &message);
                    return Action::Send(Frame::Error(error));
                }
                let verdict = dedup.admit(client, batch.id);
                assert_eq!(verdict, Verdict::New, "checked just before");
                self.pending += 1;
                Action::Admit(batch)
            }
            (Some(_), Frame::Ping(nonce)) => Action::Send(Frame::Pong(nonce)),
            (Some(_), Frame::Pong(_)) => Action::Nothing,
            (None, frame) => self.close(
                ErrorCode::Protocol,
                &format!("a {} frame before the hello", frame.name()),
            ),
            (Some(_), frame) => self.close(
                ErrorCode::Protocol,
                &format!("a {} frame is not allowed here", frame.name()),
            ),
        }
    }

    /// The error frame to send before closing, after the decoder refused
    /// what the client sent.
    pub fn decode_failed(&mut self, error: &Error) -> Action {
        self.close(error.code(), &error.to_string())
    }

    /// The server is stopping, cannot make batches durable, or the
    /// connection was idle or superseded: the frame to send before
    /// closing.
    pub fn stop(&mut self, code: ErrorCode, message: &str) -> Action {
        self.close(code, message)
    }

    /// Counts a batch the server took itself (checking and admitting it
    /// with its own deduplication, as the service does under its lock)
    /// as pending, like an [`Action::Admit`].
    pub fn taken(&mut self) {
        self.pending += 1;
    }

    /// The ack to send now that `ack`'s batch (admitted or a duplicate on
    /// this connection) is durable.
    pub fn durable(&mut self, ack: Ack) -> Frame {
        assert!(self.pending > 0, "an ack for a batch not pending");
        self.pending -= 1;
        Frame::Ack(ack)
    }

    fn close(&mut self, code: ErrorCode, message: &str) -> Action {
        self.closed = true;
        Action::Close(Frame::Error(ErrorFrame::new(None, code, message)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{BatchId, Hello};
    use bytes::Bytes;

    fn hello(token: Option<&[u8]>) -> Frame {
        Frame::Hello(Hello {
            client: ClientId::new("c").expect("valid"),
            token: token.map(|t| Token::new(t).expect("valid")),
        })
    }

    fn batch(id: u64) -> Frame {
        Frame::Batch(Batch {
            id: BatchId(id),
            stream: StreamName::new("events").expect("valid"),
            format: Format::Csv,
            header: false,
            payload: Bytes::from_static(b"1,2\n"),
        })
    }

    fn any_stream(_: &StreamName, _: Format) -> Result<(), (ErrorCode, String)> {
        Ok(())
    }

    #[test]
    fn a_token_is_required_when_configured() {
        let config = ServerConfig {
            token: Some(Token::new(b"s3cret").expect("valid")),
            ..ServerConfig::default()
        };
        let mut dedup = DedupTable::new();
        for token in [None, Some(&b"s3creT"[..])] {
            let mut conn = Connection::new(&config);
            match conn.receive(hello(token), &mut dedup, any_stream) {
                Action::Close(Frame::Error(e)) => assert_eq!(e.code, ErrorCode::NotAuthorized),
                other => panic!("{other:?}"),
            }
        }
        let mut conn = Connection::new(&config);
        let action = conn.receive(hello(Some(b"s3cret")), &mut dedup, any_stream);
        assert!(matches!(action, Action::Send(Frame::HelloOk(_))));
    }

    #[test]
    fn batches_are_admitted_once_and_acked_again_after() {
        let mut dedup = DedupTable::new();
        let mut conn = Connection::new(&ServerConfig::default());
        assert!(matches!(
            conn.receive(batch(1), &mut dedup, any_stream),
            Action::Close(_)
        ));
        let mut conn = Connection::new(&ServerConfig::default());
        conn.receive(hello(None), &mut dedup, any_stream);
        assert!(matches!(
            conn.receive(batch(1), &mut dedup, any_stream),
            Action::Admit(_)
        ));
        let unknown = |_: &StreamName, _: Format| Err((ErrorCode::UnknownStream, "no".into()));
        match conn.receive(batch(2), &mut dedup, unknown) {
            Action::Send(Frame::Error(e)) => assert_eq!(e.batch, Some(BatchId(2))),
            other => panic!("{other:?}"),
        }
        // A duplicate is acked again even if its stream is gone.
        assert!(matches!(
            conn.receive(batch(1), &mut dedup, unknown),
            Action::AckWhenDurable(Ack {
                duplicate: true,
                ..
            })
        ));
        // Batch 2 was refused, not admitted: it is new when resent.
        assert!(matches!(
            conn.receive(batch(2), &mut dedup, any_stream),
            Action::Admit(_)
        ));
        assert_eq!(conn.pending(), 3);
        assert!(matches!(
            conn.receive(hello(None), &mut dedup, any_stream),
            Action::Close(_)
        ));
    }

    #[test]
    fn a_full_window_stops_reading() {
        let config = ServerConfig {
            limits: Limits {
                in_flight_batches_max: 2,
                ..Limits::default_limits()
            },
            ..ServerConfig::default()
        };
        let mut dedup = DedupTable::new();
        let mut conn = Connection::new(&config);
        conn.receive(hello(None), &mut dedup, any_stream);
        conn.receive(batch(1), &mut dedup, any_stream);
        assert!(conn.wants_read());
        conn.receive(batch(2), &mut dedup, any_stream);
        assert!(!conn.wants_read());
        conn.durable(Ack {
            id: BatchId(1),
            accepted: 1,
            rejected: 0,
            duplicate: false,
        });
        assert!(conn.wants_read());
    }
}
