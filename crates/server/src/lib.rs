//! `cardinal serve`: the native ingest protocol, the durable service
//! behind it, and its TCP and HTTP edges.
//!
//! - [`frame`]: length-prefixed, checksummed frames ([`Frame`]: hello,
//!   hello ok, batch, ack, error, ping, pong), [`encode`] and a
//!   [`Decoder`] that takes whatever bytes have arrived and returns a
//!   frame or `Ok(None)`;
//! - [`client`]: the client's state machine ([`Client`]): at most W
//!   batches in flight, a [`Ledger`] of acknowledged ids, every
//!   unacknowledged batch resent in order after a reconnect;
//! - [`connection`]: the server's state machine for one connection
//!   ([`Connection`]): the hello and its token, back-pressure by not
//!   reading;
//! - [`dedup`]: the bounded per-client table of admitted batch ids
//!   ([`DedupTable`]), saved in snapshots, that makes a resend count once;
//!   [`keys`]: the same for HTTP `Idempotency-Key`s;
//! - [`service`]: the durable core ([`service::Service`]): one continuous
//!   engine per stream behind the write-ahead log, acknowledgements after
//!   the sync and the fold, snapshots, recovery (its module doc states the
//!   promise and why it holds);
//! - [`net`]: the edge on tokio and axum: TCP connections, the HTTP API,
//!   `/metrics`, and [`net::serve`], which runs it all until a signal;
//! - [`days`]: `serve --out DIR`'s per-day files ([`DayFiles`]): each
//!   day's CSV written atomically once the day has closed, byte for byte
//!   as `run --out` writes it, and rewritten only when a late event
//!   changes it;
//! - [`send`]: the reference client behind `cardinal send`, a blocking
//!   driver of [`Client`] over a `TcpStream`: files read into batches of
//!   whole records, reconnects with backoff, resends, a ledger file.
//!
//! `docs/protocol.md` describes the protocol for people writing clients:
//! the frames byte by byte, the handshake, flow control, what an ack
//! promises, retries across reconnects and restarts, limits and errors.
//!
//! It sits at the start of the data path, in front of `source` and
//! `parse`: batches arrive here, go to the write-ahead log and the engine,
//! and are acknowledged once durable.
//!
//! Every limit is a named constant: [`FRAME_BYTES_MAX`] (and a server's
//! own, at least [`FRAME_BYTES_MIN`]), [`IN_FLIGHT_BATCHES_MAX`],
//! [`CLIENT_ID_BYTES_MAX`], [`TOKEN_BYTES_MAX`], [`MESSAGE_BYTES_MAX`],
//! [`SERVER_NAME_BYTES_MAX`], stream names by the dialect's rule,
//! [`DEDUP_WINDOW`], [`CLIENTS_MAX`], [`HELD_BATCHES_DEFAULT`],
//! [`FAILURES_KEPT_MAX`] and [`BATCH_ID_MAX`]; the client's batch sizes,
//! backoff and timeouts are in [`send`].
//!
//! A client and a server, with the bytes between them:
//!
//! ```
//! use bytes::Bytes;
//! use cardinal_server::{
//!     Action, Client, ClientConfig, ClientId, Connection, Decoder, DedupTable, Format,
//!     Frame, Outgoing, Received, ServerConfig, StreamName, encode,
//! };
//!
//! let mut client = Client::new(ClientConfig::new(ClientId::new("loader-1")?));
//! client.push(Outgoing {
//!     stream: StreamName::new("impressions")?,
//!     format: Format::Csv,
//!     header: false,
//!     payload: Bytes::from_static(b"2026-11-27T00:00:00Z,42,CA\n"),
//! })?;
//! let mut server = Connection::new(&ServerConfig::default());
//! let mut dedup = DedupTable::new();
//! let decoder = Decoder::default();
//!
//! // Client to server: the hello, through bytes.
//! let mut wire = Vec::new();
//! encode(&client.connected(), &mut wire);
//! let (hello, used) = decoder.decode(&wire)?.expect("a whole frame");
//! assert_eq!(used, wire.len());
//! let Action::Send(ok) = server.receive(hello, &mut dedup, |_, _| Ok(())) else {
//!     panic!("the hello is accepted");
//! };
//! assert!(matches!(client.receive(ok)?, Received::Ready { .. }));
//!
//! // The batch is admitted, made durable (by the log, elsewhere), acked.
//! let batch = client.poll_send().expect("the window is open");
//! let Action::Admit(batch) = server.receive(batch, &mut dedup, |_, _| Ok(())) else {
//!     panic!("a new batch");
//! };
//! let ack = server.durable(cardinal_server::Ack {
//!     id: batch.id,
//!     accepted: 1,
//!     rejected: 0,
//!     duplicate: false,
//! });
//! assert!(matches!(client.receive(ack)?, Received::Acked(_)));
//! assert!(client.is_done());
//! assert_eq!(client.ledger().accepted(), 1);
//! # Ok::<(), cardinal_server::Error>(())
//! ```
#![deny(missing_docs)]

pub mod client;
pub mod connection;
pub mod days;
pub mod dedup;
mod error;
pub mod frame;
pub mod keys;
pub mod net;
pub mod send;
pub mod service;

pub use client::{
    BATCH_ID_MAX, Client, ClientConfig, FAILURES_KEPT_MAX, Failure, HELD_BATCHES_DEFAULT, Ledger,
    Outgoing, Received,
};
pub use connection::{Action, Connection, SERVER_NAME, ServerConfig};
pub use days::{DAYS_MAX, DayFiles, DayFilesConfig, DayStats, LATENESS_MS_DEFAULT, Written};
pub use dedup::{CLIENTS_MAX, DEDUP_WINDOW, Dedup, DedupTable, Verdict};
pub use error::{Error, Result};
pub use frame::{
    Ack, Batch, BatchId, CLIENT_ID_BYTES_MAX, ClientAction, ClientId, Decoder, ErrorCode,
    ErrorFrame, FRAME_BYTES_DEFAULT, FRAME_BYTES_MAX, FRAME_BYTES_MIN, Format, Frame, HEADER_BYTES,
    Header, Hello, HelloOk, IN_FLIGHT_BATCHES_DEFAULT, IN_FLIGHT_BATCHES_MAX, Limits,
    MESSAGE_BYTES_MAX, PROTOCOL_VERSION, SERVER_NAME_BYTES_MAX, StreamName, TOKEN_BYTES_MAX, Token,
    encode,
};
