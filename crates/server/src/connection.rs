//! The server's side of one connection as a state machine, with no
//! sockets: the server's reader decodes frames and hands each to
//! [`Connection::receive`], which says what to do ([`Action`]); a batch
//! goes to [`Connection::offer`], which asks the service; once a batch is
//! durable the server asks [`Connection::durable`] for its ack.
//!
//! ```text
//!   Greeting ── hello (version, client id, token checked) ──► Ready
//!      │  anything else: protocol error, close                 │ batch, ping, pong
//!      ▼                                                       ▼
//!    closed ◄── decoding error, a hello again, a server-only frame, stop
//! ```
//!
//! A batch is not judged here: [`Connection::offer`] hands it to
//! [`Service::ingest`], the one place that decides admission for every
//! edge (stream and format, then deduplication, then room, in that
//! order, under the lock that orders the log), and turns the service's
//! answer into what the connection does: wait for the reply (a new batch
//! and a duplicate alike: a duplicate's ack must wait until everything
//! admitted so far is durable, since its first copy may still be in the
//! group commit under way), hold the batch and offer it again (queues
//! full), send an error frame for the batch, or close. The TCP task and
//! the lossy-network tests call this same function over the same
//! service.
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

use crate::error::Error;
use crate::frame::{
    Ack, Batch, BatchId, ClientId, ErrorCode, ErrorFrame, Frame, HelloOk, Limits, Token,
};
use crate::service::{Origin, Refused, Reply, Service};

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
    /// A batch from the client: hand it to [`Connection::offer`].
    Offer(Batch),
    /// Nothing to send.
    Nothing,
}

/// What became of a batch offered to the service.
#[derive(Debug)]
pub enum Offered {
    /// Taken (new or a duplicate): the reply comes once it is durable;
    /// its ack goes out through [`Connection::durable`].
    Taken(Reply),
    /// The stream's queues are full: offer the batch again after a wait,
    /// reading nothing meanwhile.
    Full(Batch),
    /// Refused for the batch's own reason: send this error frame and go
    /// on.
    Send(Frame),
    /// The service is stopping: send this error frame and close.
    Close(Frame),
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

    /// Batches taken (new or duplicates) waiting for durability.
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

    /// What to do with `frame`. `hello` is the service's answer to a
    /// hello ([`Service::hello`]): the highest batch id it holds from the
    /// client, or why it refuses the client for now.
    pub fn receive(
        &mut self,
        frame: Frame,
        hello: impl FnOnce(&ClientId) -> Result<Option<BatchId>, (ErrorCode, String)>,
    ) -> Action {
        assert!(!self.closed, "a frame after the connection closed");
        match (&self.client, frame) {
            (None, Frame::Hello(greeting)) => {
                let authorized = match (&self.token, &greeting.token) {
                    (None, _) => true,
                    (Some(expected), Some(given)) => expected.matches(given),
                    (Some(_), None) => false,
                };
                if !authorized {
                    return self.close(ErrorCode::NotAuthorized, "a valid token is required");
                }
                let highest = match hello(&greeting.client) {
                    Ok(highest) => highest,
                    Err((code, message)) => return self.close(code, &message),
                };
                self.client = Some(greeting.client);
                Action::Send(Frame::HelloOk(HelloOk {
                    server: self.server.clone(),
                    limits: self.limits,
                    highest,
                }))
            }
            (Some(_), Frame::Batch(batch)) => Action::Offer(batch),
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

    /// Offers a batch of [`Action::Offer`] to `service` (module doc): the
    /// service decides; this says what the connection does about it.
    pub fn offer(&mut self, service: &Service, batch: Batch) -> Offered {
        let client = self
            .client
            .clone()
            .expect("batches are offered after the hello");
        assert!(!self.closed, "a batch offered after the connection closed");
        let origin = Origin::Client(client, batch.id);
        match service.ingest(
            origin,
            batch.stream.as_str(),
            batch.format,
            batch.header,
            &batch.payload,
        ) {
            Ok(reply) => {
                self.pending += 1;
                Offered::Taken(reply)
            }
            Err(Refused::Full) => Offered::Full(batch),
            Err(refused @ Refused::Stopped(_)) => {
                self.closed = true;
                Offered::Close(Frame::Error(ErrorFrame::new(
                    Some(batch.id),
                    ErrorCode::ServerStopping,
                    &refused.to_string(),
                )))
            }
            Err(refused) => Offered::Send(Frame::Error(ErrorFrame::new(
                Some(batch.id),
                refused.code(),
                &refused.to_string(),
            ))),
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
    use crate::frame::{Format, Hello, StreamName};
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

    fn known(_: &ClientId) -> Result<Option<BatchId>, (ErrorCode, String)> {
        Ok(Some(BatchId(7)))
    }

    #[test]
    fn a_token_is_required_when_configured() {
        let config = ServerConfig {
            token: Some(Token::new(b"s3cret").expect("valid")),
            ..ServerConfig::default()
        };
        for token in [None, Some(&b"s3creT"[..])] {
            let mut conn = Connection::new(&config);
            match conn.receive(hello(token), known) {
                Action::Close(Frame::Error(e)) => assert_eq!(e.code, ErrorCode::NotAuthorized),
                other => panic!("{other:?}"),
            }
        }
        let mut conn = Connection::new(&config);
        let action = conn.receive(hello(Some(b"s3cret")), known);
        match action {
            Action::Send(Frame::HelloOk(ok)) => assert_eq!(ok.highest, Some(BatchId(7))),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_hello_the_service_refuses_closes() {
        let mut conn = Connection::new(&ServerConfig::default());
        let full = |_: &ClientId| Err((ErrorCode::Unavailable, "full: retry after 5 s".into()));
        match conn.receive(hello(None), full) {
            Action::Close(Frame::Error(e)) => assert_eq!(e.code, ErrorCode::Unavailable),
            other => panic!("{other:?}"),
        }
        assert!(conn.is_closed());
        assert!(conn.client().is_none());
    }

    #[test]
    fn batches_come_after_the_hello_and_go_to_the_service() {
        let mut conn = Connection::new(&ServerConfig::default());
        assert!(matches!(conn.receive(batch(1), known), Action::Close(_)));
        let mut conn = Connection::new(&ServerConfig::default());
        conn.receive(hello(None), known);
        assert!(matches!(conn.receive(batch(1), known), Action::Offer(_)));
        assert!(matches!(
            conn.receive(Frame::Ping(3), known),
            Action::Send(Frame::Pong(3))
        ));
        assert!(matches!(conn.receive(hello(None), known), Action::Close(_)));
    }
}
