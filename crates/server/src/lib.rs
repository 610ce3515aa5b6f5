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
//!   ([`Connection`]): the hello and its token, each batch offered to the
//!   service (the one place admission is decided), back-pressure by not
//!   reading;
//! - [`dedup`]: the bounded per-client table of admitted batch ids
//!   ([`DedupTable`]), saved in snapshots, that makes a resend count once
//!   and that a flood of new client ids cannot evict a recent client from;
//!   [`keys`]: the same for HTTP `Idempotency-Key`s, scoped per stream and
//!   checked against a digest of the body;
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
//! [`DEDUP_WINDOW`], [`CLIENTS_MAX`], [`CLIENT_IDLE_SECS_MIN`],
//! [`keys::KEYS_MAX`], [`keys::KEY_IDLE_SECS_MIN`], [`HELD_BATCHES_DEFAULT`],
//! [`FAILURES_KEPT_MAX`] and [`BATCH_ID_MAX`]; the client's batch sizes,
//! backoff and timeouts are in [`send`].
//!
//! A client and a server, with the bytes between them; the server's
//! side admits batches through the service, as `cardinal serve` does:
//!
//! ```
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use cardinal_route::Plan;
//! use cardinal_server::connection::Offered;
//! use cardinal_server::service::{Service, ServiceOptions};
//! use cardinal_server::{
//!     Action, Client, ClientConfig, ClientId, Connection, Decoder, Format, Outgoing, Received,
//!     ServerConfig, StreamName, encode,
//! };
//! use cardinal_store::SimDir;
//!
//! let plan = Arc::new(Plan::compile(
//!     "CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, site TEXT)
//!        WITH (format = 'csv', time = 'ts');
//!      CREATE SUMMARY daily AS SELECT date_trunc('day', ts) AS day, count(*) AS n
//!        FROM impressions GROUP BY day;",
//! )?);
//! let service = Service::open(plan, Arc::new(SimDir::new()), &ServiceOptions::new(1, 64 << 20))?;
//!
//! let mut client = Client::new(ClientConfig::new(ClientId::new("loader-1")?));
//! client.push(Outgoing {
//!     stream: StreamName::new("impressions")?,
//!     format: Format::Csv,
//!     header: false,
//!     payload: Bytes::from_static(b"2026-11-27T00:00:00Z,42,CA\n"),
//! })?;
//! let mut server = Connection::new(&ServerConfig::default());
//! let decoder = Decoder::default();
//! let hello = |client: &ClientId| {
//!     service.hello(client).map_err(|refused| (refused.code(), refused.to_string()))
//! };
//!
//! // Client to server: the hello, through bytes.
//! let mut wire = Vec::new();
//! encode(&client.connected(), &mut wire);
//! let (frame, used) = decoder.decode(&wire)?.expect("a whole frame");
//! assert_eq!(used, wire.len());
//! let Action::Send(ok) = server.receive(frame, hello) else {
//!     panic!("the hello is accepted");
//! };
//! assert!(matches!(client.receive(ok)?, Received::Ready { .. }));
//!
//! // The batch goes to the service, which logs it; once durable, acked.
//! let batch = client.poll_send().expect("the window is open");
//! let Action::Offer(batch) = server.receive(batch, hello) else {
//!     panic!("a batch");
//! };
//! let id = batch.id;
//! let Offered::Taken(reply) = server.offer(&service, batch) else {
//!     panic!("taken");
//! };
//! let acked = reply.blocking_recv()?.map_err(anyhow::Error::msg)?;
//! let ack = server.durable(cardinal_server::Ack {
//!     id,
//!     accepted: acked.accepted,
//!     rejected: acked.rejected,
//!     duplicate: acked.duplicate,
//! });
//! assert!(matches!(client.receive(ack)?, Received::Acked(_)));
//! assert!(client.is_done());
//! assert_eq!(client.ledger().accepted(), 1);
//! service.close()?;
//! # Ok::<(), anyhow::Error>(())
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
pub mod source;
pub mod sql;

pub use client::{
    BATCH_ID_MAX, Client, ClientConfig, FAILURES_KEPT_MAX, Failure, HELD_BATCHES_DEFAULT, Ledger,
    Outgoing, Received,
};
pub use connection::{Action, Connection, Offered, SERVER_NAME, ServerConfig};
pub use days::{DAYS_MAX, DayFiles, DayFilesConfig, DayStats, LATENESS_MS_DEFAULT, Written};
pub use dedup::{
    CLIENT_IDLE_SECS_MIN, CLIENTS_MAX, DEDUP_WINDOW, Dedup, DedupTable, TableFull, Verdict,
};
pub use error::{Error, Result};
pub use frame::{
    Ack, Batch, BatchId, CLIENT_ID_BYTES_MAX, ClientAction, ClientId, Decoder, ErrorCode,
    ErrorFrame, FRAME_BYTES_DEFAULT, FRAME_BYTES_MAX, FRAME_BYTES_MIN, Format, Frame, HEADER_BYTES,
    Header, Hello, HelloOk, IN_FLIGHT_BATCHES_DEFAULT, IN_FLIGHT_BATCHES_MAX, Limits,
    MESSAGE_BYTES_MAX, PROTOCOL_VERSION, SERVER_NAME_BYTES_MAX, StreamName, TOKEN_BYTES_MAX, Token,
    encode,
};
