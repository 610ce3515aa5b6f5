//! The PostgreSQL wire protocol (`cardinal serve --pg ADDR`): psql,
//! psycopg, pandas and Grafana's PostgreSQL data source query the
//! summaries in SQL, each summary a table of schema `public`.
//!
//! ```text
//!  accept ── cap (Edge::pg_connections_max) ── one task per connection
//!  task:   SSLRequest/GSSENCRequest refused ('N': no TLS here)
//!          startup ── trust, or a cleartext password = the token
//!          loop: next message (idle deadline) ── pgwire's dispatcher
//!                ├─ Query 'Q'  ── split at top-level ';' ── each statement:
//!                │               catalog::answer (client chatter, catalogs)
//!                │               or the summary query (tokio blocking pool)
//!                └─ Parse/Bind/Describe/Execute/Sync ── the same, after the
//!                   bound values are put in as literals ($n tokens replaced)
//! ```
//!
//! pgwire ([`pgwire`]) does the protocol: message codec, startup and
//! password exchange, the extended protocol's statements and portals,
//! row batches for `Execute` with a row limit. This module decides what
//! each statement means and writes its rows: the summary queries go to
//! [`cardinal_engine::sql::Prepared`] (the same planner as `POST
//! /v1/sql`, answered from this node alone), and what clients send
//! besides (`SET`, `SHOW`, `BEGIN`, `SELECT version()`, the catalogs
//! psql's `\d` and Grafana's pickers read) is answered by
//! `catalog` (`net/pg/catalog.rs`), never by a second SQL engine.
//!
//! Types: `bool`, `int8`, `float8`, `text`, `timestamptz`, in text or
//! binary format as the client asks per column.
//!
//! Parameters (`$1` in the extended protocol, what psycopg sends) are
//! put into the query as literals: the text is tokenized with sqlparser
//! and each placeholder token's span is replaced by the value's literal
//! (a number checked to be one, text quoted with `'` doubled), never by
//! searching the text, so a `$1` inside a string or comment stays as it
//! is.
//!
//! Errors are `ErrorResponse`s with a SQLSTATE ([`sqlstate`]) and the
//! planner's message with its caret; the session goes on after one.
//!
//! Limits: [`super::Edge::pg_connections_max`] connections (default
//! [`PG_CONNECTIONS_DEFAULT`], fitted under `ulimit -n` with the other
//! edges); [`STARTUP_DEADLINE`] to log in; [`super::Edge::idle`] between
//! statements; [`WRITE_STALL_MAX`] for a client that does not read its
//! answer (only its own task waits); [`MESSAGE_BYTES_MAX`] per message,
//! checked from its header before it is buffered; a query's text at most
//! [`cardinal_route::QUERY_BYTES_MAX`] and its answer at most
//! [`cardinal_engine::sql::SQL_ROWS_MAX`] rows. The query runs on
//! tokio's blocking pool (a view merges state), never on the runtime's
//! two threads.
//!
//! There is no TLS: bind to loopback (every example does) or put the
//! port behind a TLS-terminating proxy; the token then travels in clear
//! only on the loopback or inside the proxy's host.

mod catalog;

use std::fmt::Debug;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{BufMut, Bytes, BytesMut};
use cardinal_export::{Cell, CellType, Table, TableColumn};
use cardinal_route::sqlparser::dialect::PostgreSqlDialect;
use cardinal_route::sqlparser::tokenizer::{Token as SqlToken, Tokenizer};
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::auth::{
    DefaultServerParameterProvider, LoginInfo, StartupHandler, finish_authentication,
    protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, DefaultClient, NoopHandler, PgWireConnectionState,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use pgwire::messages::response::{GssEncResponse, SslResponse};
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, SslNegotiationMetaMessage};
use pgwire::tokio::server::{PgWireMessageServerCodec, process_error, process_message};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::codec::Framed;

use super::{Edge, Slot};
use crate::frame::Token;

/// PostgreSQL connections served at once by default: as many as each
/// other edge's default, so all three fit in the 1,024 descriptors most
/// systems give a process with [`super::FD_RESERVE`] to spare. A
/// connection past the cap gets `53300 too_many_connections` and is
/// closed, as PostgreSQL answers one past `max_connections`.
pub const PG_CONNECTIONS_DEFAULT: usize = 256;
/// The most connections `--pg-connections` may allow.
pub const PG_CONNECTIONS_MAX: usize = 4096;
/// How long a new connection has to finish logging in (SSL refusal,
/// startup, password): 10 s. psql, libpq and pgx send their startup at
/// once and the password on the first round trip (psql asks a person
/// for it before it connects), so only a connection that means to hold
/// a slot takes longer; pgwire's own default is 60 s.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(10);
/// How long a write may wait on a client that reads nothing: 30 s. The
/// client's kernel buffers take the first few hundred KiB of an answer;
/// past them a client that stopped reading holds its task, its answer
/// and its descriptor, so after this long it is cut off. Only its own
/// task waits meanwhile.
pub const WRITE_STALL_MAX: Duration = Duration::from_secs(30);
/// The longest message a client may send once logged in: the query
/// text limit ([`cardinal_route::QUERY_BYTES_MAX`], 256 KiB) and 64 KiB
/// for what travels with it (statement and portal names, parameter
/// types and formats; bound values become part of the query, so they
/// fit its limit). pgwire's codec takes messages up to 1 GiB and
/// buffers each whole; checked here from each message's header as the
/// bytes arrive, so no connection buffers more than this. Past it the
/// connection is closed with FATAL `54000`.
pub const MESSAGE_BYTES_MAX: usize = cardinal_route::QUERY_BYTES_MAX + (64 << 10);

/// The version this server reports (`server_version`, `SHOW
/// server_version`, `version()`): PostgreSQL 15's, the dialect of the
/// catalog queries `catalog` answers (psql 15's `\d`), so clients
/// choose those.
pub const SERVER_VERSION: &str = "15.0";
/// [`SERVER_VERSION`] as `server_version_num`.
pub const SERVER_VERSION_NUM: &str = "150000";

/// A statement of the extended protocol: its text (parsed and planned
/// when described or run, once its parameters are bound).
#[derive(Debug, Clone)]
pub struct Statement {
    text: String,
    /// The highest `$n` in the text.
    parameters: usize,
}

/// What serves each PostgreSQL connection: login, simple and extended
/// queries.
#[derive(Debug)]
pub struct Front {
    edge: Arc<Edge>,
    parser: Arc<Parser>,
    pids: RandomPidSecretKeyGenerator,
}

/// Accepts PostgreSQL connections until `stop` turns true.
pub async fn accept(listener: TcpListener, edge: Arc<Edge>, mut stop: watch::Receiver<bool>) {
    let front = Arc::new(Front {
        edge: Arc::clone(&edge),
        parser: Arc::new(Parser),
        pids: RandomPidSecretKeyGenerator::default(),
    });
    let refusing = Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    eprintln!("cardinal serve: accepting a PostgreSQL connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        // Given back however the task ends.
        let taken = Slot::take(
            &edge,
            |e| &e.metrics.pg_connections,
            edge.pg_connections_max,
        );
        let Some(slot) = taken else {
            edge.metrics.pg_refused.fetch_add(1, Ordering::Relaxed);
            // A refusal's socket is a descriptor too: past REFUSING_MAX
            // being answered, one is closed at once (within FD_RESERVE).
            if refusing.fetch_add(1, Ordering::AcqRel) >= REFUSING_MAX {
                refusing.fetch_sub(1, Ordering::AcqRel);
                refuse_at_once(&socket);
                continue;
            }
            let refusing = Arc::clone(&refusing);
            tokio::spawn(async move {
                refuse(socket).await;
                refusing.fetch_sub(1, Ordering::AcqRel);
            });
            continue;
        };
        let front = Arc::clone(&front);
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(error) = connection(socket, peer, &front, stop).await {
                eprintln!("cardinal serve: PostgreSQL connection from {peer}: {error}");
            }
            drop(slot);
        });
    }
}

/// Connections past the cap answered at once (each a task of at most
/// [`REFUSAL_TIME`]); a refused connection past these is closed with
/// what the socket takes without waiting, so a flood of connections
/// holds at most this many descriptors beyond the cap (within
/// [`super::FD_RESERVE`]), as the native edge's refusals do.
pub const REFUSING_MAX: u64 = 16;
/// How long a refusal waits for the client's SSL request and startup
/// before it closes the connection.
pub const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// The largest startup packet a refusal reads: PostgreSQL's own limit
/// (`MAX_STARTUP_PACKET_LENGTH`, 10,000 bytes).
const STARTUP_BYTES_MAX: usize = 10_000;

const REFUSED: &str = "too many PostgreSQL connections: retry later (serve --pg-connections)";

/// Answers a connection past the cap as PostgreSQL does one past
/// `max_connections`: its SSL request refused ('N'), its startup read,
/// then a FATAL `53300`, so the client shows that message; all within
/// [`REFUSAL_TIME`].
async fn refuse(mut socket: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut out = BytesMut::new();
    error_message(&mut out, "FATAL", "53300", REFUSED);
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        let mut head = [0u8; 8];
        loop {
            socket.read_exact(&mut head).await?;
            let length = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let code = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            // SSLRequest and GSSENCRequest: 8 bytes, then the startup.
            if length == 8 && (code == 80_877_103 || code == 80_877_104) {
                socket.write_all(b"N").await?;
                continue;
            }
            let rest = usize::try_from(length).unwrap_or(0).saturating_sub(8);
            let mut body = vec![0u8; rest.min(STARTUP_BYTES_MAX)];
            socket.read_exact(&mut body).await?;
            break;
        }
        socket.write_all(&out).await?;
        socket.shutdown().await
    })
    .await;
}

/// Past [`REFUSING_MAX`]: the FATAL error if the socket takes it at
/// once, then the close; nothing waits.
fn refuse_at_once(socket: &TcpStream) {
    let mut out = BytesMut::new();
    error_message(&mut out, "FATAL", "53300", REFUSED);
    let _ = socket.try_write(&out);
}

/// An `ErrorResponse` written by hand (before pgwire's codec exists).
fn error_message(out: &mut BytesMut, severity: &str, code: &str, message: &str) {
    let mut body = BytesMut::new();
    for (field, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ] {
        body.put_u8(field);
        body.put_slice(value.as_bytes());
        body.put_u8(0);
    }
    body.put_u8(0);
    out.put_u8(b'E');
    out.put_i32(i32::try_from(body.len() + 4).expect("a short message"));
    out.put_slice(&body);
}

type Connection = Framed<Stalling, PgWireMessageServerCodec<Statement>>;

async fn connection(
    socket: TcpStream,
    peer: SocketAddr,
    front: &Arc<Front>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let _ = socket.set_nodelay(true);
    let mut framed: Connection = Framed::new(
        Stalling::new(socket, WRITE_STALL_MAX),
        PgWireMessageServerCodec::new(DefaultClient::new(peer, false)),
    );
    let startup_by = tokio::time::Instant::now() + STARTUP_DEADLINE;
    // TLS and GSS encryption are refused ('N'): the client goes on in
    // clear (sslmode=prefer, the default) or gives up (require).
    loop {
        let next = tokio::time::timeout_at(startup_by, framed.next()).await;
        match next {
            Err(_) | Ok(None) => return Ok(()),
            Ok(Some(Err(error))) => return Err(io::Error::other(error.to_string())),
            Ok(Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresSsl(_),
            )))) => {
                framed
                    .send(PgWireBackendMessage::SslResponse(SslResponse::Refuse))
                    .await?;
            }
            Ok(Some(Ok(PgWireFrontendMessage::SslNegotiation(
                SslNegotiationMetaMessage::PostgresGss(_),
            )))) => {
                framed
                    .send(PgWireBackendMessage::GssEncResponse(GssEncResponse::Refuse))
                    .await?;
            }
            // A startup or cancel request, not consumed: read next in
            // the startup state.
            Ok(Some(Ok(_))) => {
                framed.set_state(PgWireConnectionState::AwaitingStartup);
                break;
            }
        }
    }
    let noop = Arc::new(NoopHandler);
    loop {
        let starting = matches!(
            framed.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let idle = front.edge.idle;
        let message = tokio::select! {
            message = framed.next() => message,
            _ = tokio::time::sleep_until(startup_by), if starting => return Ok(()),
            _ = tokio::time::sleep(idle), if !starting => {
                let message = format!("idle for {} s: closed (serve --idle)", idle.as_secs());
                let _ = fatal(&mut framed, "57P05", &message).await;
                return Ok(());
            }
            _ = stop.changed() => {
                let _ = fatal(&mut framed, "57P01", "the server is stopping").await;
                return Ok(());
            }
        };
        let message = match message {
            None => return Ok(()),
            Some(Err(error)) => {
                let (code, message) = match framed.get_ref().too_long {
                    Some(length) => (
                        "54000",
                        format!(
                            "a message of {length} bytes; the limit is {MESSAGE_BYTES_MAX} \
                             (queries are at most {} bytes)",
                            cardinal_route::QUERY_BYTES_MAX
                        ),
                    ),
                    None => ("08P01", error.to_string()),
                };
                let _ = fatal(&mut framed, code, &message).await;
                return Ok(());
            }
            Some(Ok(message)) => message,
        };
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            return Ok(());
        }
        let cancel = matches!(message, PgWireFrontendMessage::CancelRequest(_));
        let extended = match framed.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let handled = process_message(
            message,
            &mut framed,
            Arc::clone(front),
            Arc::clone(front),
            Arc::clone(front),
            Arc::clone(&noop),
            Arc::clone(&noop),
        )
        .await;
        if let Err(error) = handled {
            let fatal = error.is_fatal();
            process_error(&mut framed, error, extended).await?;
            if fatal {
                return Ok(());
            }
        }
        if cancel {
            return Ok(());
        }
    }
}

/// Sends a FATAL error (the connection closes after it).
async fn fatal(framed: &mut Connection, code: &str, message: &str) -> io::Result<()> {
    let info = ErrorInfo::new("FATAL".into(), code.into(), message.into());
    framed
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await
}

/// The socket, with writes that fail once the client has read nothing
/// for [`WRITE_STALL_MAX`].
struct Stalling {
    socket: TcpStream,
    limit: Duration,
    /// Runs from the first write the socket would not take.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Where the bytes read are in the client's messages.
    framing: Framing,
    /// The length of a message refused at [`MESSAGE_BYTES_MAX`].
    too_long: Option<u64>,
}

/// Message boundaries in what a client sends: before its startup,
/// untyped messages (`length code ...`: SSL and GSS requests, then the
/// startup or a cancel request); after it, typed ones (`type length
/// ...`). Only headers are read; bodies are counted past.
#[derive(Debug, Default)]
struct Framing {
    /// After the startup: messages have a type byte.
    typed: bool,
    header: [u8; 8],
    /// Header bytes held.
    held: usize,
    /// Body bytes of the current message still to come.
    remaining: u64,
}

impl Framing {
    /// Scans `bytes`; the length of a message past `max`, if one starts.
    fn scan(&mut self, mut bytes: &[u8], max: u64) -> Result<(), u64> {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let skip =
                    usize::try_from(self.remaining).map_or(bytes.len(), |r| r.min(bytes.len()));
                self.remaining -= skip as u64;
                bytes = &bytes[skip..];
                continue;
            }
            let need = if self.typed { 5 } else { 8 };
            let take = (need - self.held).min(bytes.len());
            self.header[self.held..self.held + take].copy_from_slice(&bytes[..take]);
            self.held += take;
            bytes = &bytes[take..];
            if self.held < need {
                return Ok(());
            }
            self.held = 0;
            let h = &self.header;
            if self.typed {
                let length = i32::from_be_bytes([h[1], h[2], h[3], h[4]]);
                let body = u64::try_from(length).unwrap_or(0).saturating_sub(4);
                if body > max {
                    return Err(body);
                }
                self.remaining = body;
            } else {
                let length = i32::from_be_bytes([h[0], h[1], h[2], h[3]]);
                let code = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                // SSLRequest and GSSENCRequest come before the startup.
                if !(length == 8 && (code == 80_877_103 || code == 80_877_104)) {
                    self.typed = true;
                }
                self.remaining = u64::try_from(length).unwrap_or(0).saturating_sub(8);
            }
        }
        Ok(())
    }
}

impl Stalling {
    fn new(socket: TcpStream, limit: Duration) -> Self {
        Stalling {
            socket,
            limit,
            stalled: None,
            framing: Framing::default(),
            too_long: None,
        }
    }

    /// A write that would block: pending until the limit, then an error.
    fn wait<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}: cut off"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Stalling {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.socket).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            let max = MESSAGE_BYTES_MAX as u64;
            if let Err(length) = this.framing.scan(&buf.filled()[before..], max) {
                this.too_long = Some(length);
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a message of {length} bytes; the limit is {max}"),
                )));
            }
        }
        read
    }
}

impl AsyncWrite for Stalling {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.socket).poll_write(cx, buf) {
            Poll::Pending => this.wait(cx),
            ready => {
                this.stalled = None;
                ready
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.socket).poll_flush(cx) {
            Poll::Pending => this.wait(cx),
            ready => ready,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

// ---- Login ---------------------------------------------------------

/// The parameters a client is told at login.
fn server_parameters() -> DefaultServerParameterProvider {
    let mut parameters = DefaultServerParameterProvider::default();
    parameters.server_version = SERVER_VERSION.to_owned();
    parameters.time_zone = "UTC".to_owned();
    parameters.is_superuser = false;
    parameters.default_transaction_read_only = true;
    parameters
}

#[async_trait]
impl StartupHandler for Front {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                let (pid, key) = self.pids.generate(&*client);
                client.set_pid_and_secret_key(pid, key);
                if self.edge.protocol.token.is_some() {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    client
                        .send(PgWireBackendMessage::Authentication(
                            Authentication::CleartextPassword,
                        ))
                        .await?;
                } else {
                    finish_authentication(client, &server_parameters()).await?;
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let password = password.into_password()?;
                let expected = self
                    .edge
                    .protocol
                    .token
                    .as_ref()
                    .ok_or(PgWireError::NoAuthenticationInProgress)?;
                let given = Token::new(password.password.as_bytes()).ok();
                if !given.is_some_and(|given| expected.matches(&given)) {
                    let user = LoginInfo::from_client_info(client)
                        .user()
                        .unwrap_or_default()
                        .to_owned();
                    return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                        "FATAL".into(),
                        "28P01".into(),
                        format!(
                            "password authentication failed for user \"{user}\": the password \
                             is the server's token (serve --token-file)"
                        ),
                    ))));
                }
                finish_authentication(client, &server_parameters()).await?;
            }
            _ => {}
        }
        Ok(())
    }
}

// ---- Simple query --------------------------------------------------

#[async_trait]
impl SimpleQueryHandler for Front {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let _ = client;
        check_length(query)?;
        let statements = split_statements(query).map_err(user_error)?;
        let mut responses = Vec::with_capacity(statements.len().max(1));
        if statements.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        for statement in statements {
            match self.answer(statement, &Format::UnifiedText).await {
                Ok(response) => responses.push(response),
                Err(error) => {
                    responses.push(Response::Error(Box::new(error.into())));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

// ---- Extended query ------------------------------------------------

/// Counts a statement's parameters at Parse.
#[derive(Debug)]
pub struct Parser;

#[async_trait]
impl QueryParser for Parser {
    type Statement = Statement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        check_length(sql)?;
        let parameters = placeholders(sql)
            .map_err(user_error)?
            .iter()
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        Ok(Some(Statement {
            text: sql.to_owned(),
            parameters,
        }))
    }

    fn get_parameter_types(&self, statement: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(vec![Type::TEXT; statement.parameters])
    }

    fn get_result_schema(
        &self,
        _statement: &Statement,
        _format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        // Described by `do_describe_*` below, which plan the query.
        Ok(Vec::new())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Front {
    type Statement = Statement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let text = bound_text(portal).map_err(user_error)?;
        let statements = split_statements(&text).map_err(user_error)?;
        match statements.as_slice() {
            [] => Ok(Response::EmptyQuery),
            [one] => self
                .answer(one, &portal.result_column_format)
                .await
                .map_err(user_error),
            _ => Err(user_error(error_info(
                "42601",
                "cannot insert multiple commands into a prepared statement".into(),
            ))),
        }
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        statement: &StoredStatement<Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let declared = &statement.parameter_types;
        let count = statement.statement.parameters.max(declared.len());
        let types: Vec<Type> = (0..count)
            .map(|i| declared.get(i).cloned().flatten().unwrap_or(Type::TEXT))
            .collect();
        // Not yet bound: each parameter planned as a typed stand-in.
        let values: Vec<String> = types.iter().map(stand_in).collect();
        let text = substitute(&statement.statement.text, &values).map_err(user_error)?;
        let fields = self
            .describe(&text, &Format::UnifiedText)
            .await
            .map_err(user_error)?;
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let text = bound_text(portal).map_err(user_error)?;
        let fields = self
            .describe(&text, &portal.result_column_format)
            .await
            .map_err(user_error)?;
        Ok(DescribePortalResponse::new(fields))
    }
}

// ---- Answers -------------------------------------------------------

impl Front {
    /// One statement's answer: client chatter and catalogs from
    /// [`catalog`], anything else a query over a summary.
    async fn answer(&self, text: &str, format: &Format) -> Result<Response, Refused> {
        let service = self.edge.service();
        if let Some(answer) = catalog::answer(service.plan(), text)? {
            return Ok(match answer {
                catalog::Answer::Rows(table) => query_response(&table, format)?,
                catalog::Answer::Command(tag) => Response::Execution(Tag::new(tag)),
                catalog::Answer::Begin => Response::TransactionStart(Tag::new("BEGIN")),
                catalog::Answer::End(tag) => Response::TransactionEnd(Tag::new(tag)),
                catalog::Answer::Empty => Response::EmptyQuery,
            });
        }
        // The cluster's answer with `--peers` (each peer's partial answer
        // merged before rows are made), this node's without.
        let (table, _) = super::http::sql_answer(&self.edge, text.to_owned(), false)
            .await
            .map_err(|refusal| match refusal {
                crate::sql::Refusal::Query(e) => engine_error(&e),
                crate::sql::Refusal::Unavailable { status, why } => error_info(
                    match status {
                        503 => "57P03",
                        409 => "55000",
                        400 => "54000",
                        _ => "XX000",
                    },
                    why,
                ),
            })?;
        query_response(&table, format)
    }

    /// The columns `text` answers with, without running it.
    async fn describe(&self, text: &str, format: &Format) -> Result<Vec<FieldInfo>, Refused> {
        let service = self.edge.service();
        let statements = split_statements(text)?;
        let [text] = statements.as_slice() else {
            return Ok(Vec::new());
        };
        if let Some(answer) = catalog::answer(service.plan(), text)? {
            return Ok(match answer {
                catalog::Answer::Rows(table) => fields(&table.columns, format),
                _ => Vec::new(),
            });
        }
        let prepared = cardinal_engine::sql::Prepared::new(service.plan(), text)
            .map_err(|e| engine_error(&e))?;
        Ok(fields(&prepared.columns(), format))
    }
}

/// The SQLSTATE of an engine error: what a client's error handling
/// matches on (psycopg's exception classes, Grafana's messages).
pub fn sqlstate(error: &cardinal_engine::Error) -> &'static str {
    use cardinal_engine::Error;
    match error {
        Error::UnknownSummary { .. } => "42P01",
        Error::GroupLimit { .. } | Error::ScanLimit { .. } => "54000",
        Error::SqlEvaluate { source, .. } => match source {
            cardinal_route::EvalError::DivisionByZero => "22012",
            cardinal_route::EvalError::Overflow => "22003",
            _ => "22000",
        },
        Error::Sql { source } => match source {
            cardinal_route::Error::TooLong { .. } => "54000",
            other => {
                let message = other.message();
                if message.starts_with("unknown column") {
                    "42703"
                } else if message.starts_with("unknown function") {
                    "42883"
                } else if message.contains("not supported") || message.contains("is supported") {
                    "0A000"
                } else {
                    "42601"
                }
            }
        },
        _ => "XX000",
    }
}

fn engine_error(error: &cardinal_engine::Error) -> Refused {
    error_info(sqlstate(error), error.to_string())
}

/// A statement refused: its SQLSTATE and message, an `ErrorResponse`
/// (severity ERROR: the session goes on) at the edge.
#[derive(Debug)]
struct Refused {
    code: &'static str,
    message: String,
}

impl From<Refused> for ErrorInfo {
    fn from(refused: Refused) -> ErrorInfo {
        ErrorInfo::new("ERROR".into(), refused.code.into(), refused.message)
    }
}

fn error_info(code: &'static str, message: String) -> Refused {
    Refused { code, message }
}

fn user_error(refused: Refused) -> PgWireError {
    PgWireError::UserError(Box::new(refused.into()))
}

/// Refuses a query longer than the planner reads.
fn check_length(text: &str) -> PgWireResult<()> {
    let max = cardinal_route::QUERY_BYTES_MAX;
    if text.len() > max {
        return Err(user_error(error_info(
            "54000",
            format!(
                "the query is {} bytes; the limit is {max} bytes",
                text.len()
            ),
        )));
    }
    Ok(())
}

// ---- Rows ----------------------------------------------------------

fn pg_type(ty: CellType) -> Type {
    match ty {
        CellType::Bool => Type::BOOL,
        CellType::Int => Type::INT8,
        CellType::Float => Type::FLOAT8,
        CellType::Text => Type::TEXT,
        CellType::Time => Type::TIMESTAMPTZ,
    }
}

/// Column `index`'s format: one code for all, one per column, or text
/// (a client that sends a count that fits neither gets text).
fn format_of(format: &Format, index: usize) -> FieldFormat {
    match format {
        Format::UnifiedText => FieldFormat::Text,
        Format::UnifiedBinary => FieldFormat::Binary,
        Format::Individual(codes) => match codes.as_slice() {
            [one] => FieldFormat::from(*one),
            codes => codes
                .get(index)
                .map_or(FieldFormat::Text, |code| FieldFormat::from(*code)),
        },
    }
}

fn fields(columns: &[TableColumn], format: &Format) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            FieldInfo::new(
                c.name.clone(),
                None,
                None,
                pg_type(c.ty),
                format_of(format, i),
            )
        })
        .collect()
}

fn query_response(table: &Table, format: &Format) -> Result<Response, Refused> {
    let rows_max = cardinal_engine::sql::SQL_ROWS_MAX;
    if table.rows.len() > rows_max {
        return Err(error_info(
            "54000",
            format!("the answer has more than {rows_max} rows; narrow it or add LIMIT"),
        ));
    }
    let fields = Arc::new(fields(&table.columns, format));
    let formats: Vec<FieldFormat> = fields.iter().map(FieldInfo::format).collect();
    let count = i16::try_from(table.columns.len())
        .map_err(|_| error_info("54000", "too many columns".into()))?;
    let rows: Vec<PgWireResult<DataRow>> = table
        .rows
        .iter()
        .map(|row| {
            let mut data = BytesMut::with_capacity(16 * row.len());
            for (cell, format) in row.iter().zip(&formats) {
                put_cell(&mut data, cell, *format);
            }
            Ok(DataRow::new(data, count))
        })
        .collect();
    Ok(Response::Query(QueryResponse::new(
        fields,
        futures::stream::iter(rows),
    )))
}

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// One field of a `DataRow`: its length (-1 for NULL), then its bytes.
fn put_cell(out: &mut BytesMut, cell: &Cell, format: FieldFormat) {
    let start = out.len();
    out.put_i32(-1);
    let binary = format == FieldFormat::Binary;
    match cell {
        Cell::Null => return,
        Cell::Bool(b) if binary => out.put_u8(u8::from(*b)),
        Cell::Bool(b) => out.put_slice(if *b { b"t" } else { b"f" }),
        Cell::Int(i) if binary => out.put_i64(*i),
        Cell::Float(f) if binary => out.put_f64(*f),
        Cell::Float(f) if f.is_nan() => out.put_slice(b"NaN"),
        Cell::Float(f) if f.is_infinite() => {
            out.put_slice(if *f > 0.0 { b"Infinity" } else { b"-Infinity" });
        }
        Cell::Time(t) if binary => out.put_i64(t.0.saturating_mul(1000) - PG_EPOCH_MICROS),
        Cell::Time(t) => out.put_slice(timestamptz_text(t.0).as_bytes()),
        Cell::Text(text) => out.put_slice(text.as_bytes()),
        other => out.put_slice(other.text().unwrap_or_default().as_bytes()),
    }
    let length = i32::try_from(out.len() - start - 4).expect("a field under 2 GiB");
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
}

/// An instant (ms since the Unix epoch) as PostgreSQL prints a
/// `timestamptz` in UTC: `2026-11-04 00:00:00+00`, milliseconds when
/// there are any.
fn timestamptz_text(ms: i64) -> String {
    let text = cardinal_event::Timestamp(ms).to_string();
    // `2026-11-04T00:00:00Z` or `2026-11-04T00:00:00.123Z`.
    let text = text.replacen('T', " ", 1);
    match text.strip_suffix('Z') {
        Some(rest) => format!("{rest}+00"),
        None => text,
    }
}

// ---- Statements and parameters -------------------------------------

/// The tokens of `text`, with their byte offsets.
fn tokens(text: &str) -> Result<Vec<(usize, SqlToken)>, Refused> {
    let dialect = PostgreSqlDialect {};
    let located = Tokenizer::new(&dialect, text)
        .with_unescape(false)
        .tokenize_with_location()
        .map_err(|e| error_info("42601", format!("{e}")))?;
    // Lines and columns (1-based, in characters) to byte offsets, by one
    // walk over the text: tokens come in order, so the cursor only moves
    // forward (linear in the text however long its lines).
    let mut chars = text.char_indices().peekable();
    let (mut line, mut column) = (1u64, 1u64);
    let mut out = Vec::with_capacity(located.len());
    for token in located {
        let at = token.span.start;
        while (line, column) < (at.line, at.column) {
            match chars.next() {
                Some((_, '\n')) => {
                    line += 1;
                    column = 1;
                }
                Some(_) => column += 1,
                None => break,
            }
        }
        let offset = chars.peek().map_or(text.len(), |(i, _)| *i);
        out.push((offset, token.token));
    }
    Ok(out)
}

/// The statements of `text` split at top-level `;`, each trimmed; those
/// with nothing but comments and white space left out (`-- ping`).
fn split_statements(text: &str) -> Result<Vec<&str>, Refused> {
    let mut statements = Vec::new();
    let mut start = 0;
    let mut substance = false;
    for (offset, token) in tokens(text)? {
        match token {
            SqlToken::SemiColon => {
                if substance {
                    statements.push(text[start..offset].trim());
                }
                start = offset + 1;
                substance = false;
            }
            SqlToken::Whitespace(_) | SqlToken::EOF => {}
            _ => substance = true,
        }
    }
    if substance {
        statements.push(text[start..].trim());
    }
    Ok(statements)
}

/// Each `$n` placeholder token: its byte range and `n`.
fn placeholders(text: &str) -> Result<Vec<(std::ops::Range<usize>, usize)>, Refused> {
    let mut out = Vec::new();
    for (offset, token) in tokens(text)? {
        if let SqlToken::Placeholder(name) = &token
            && let Some(number) = name.strip_prefix('$')
        {
            let n: usize = number.parse().map_err(|_| {
                error_info(
                    "42601",
                    format!("placeholder {name}: parameters are $1, $2, ..."),
                )
            })?;
            if n == 0 || n > u16::MAX as usize {
                return Err(error_info("42P02", format!("there is no parameter {name}")));
            }
            out.push((offset..offset + name.len(), n));
        }
    }
    Ok(out)
}

/// `text` with each `$n` replaced by `values[n - 1]`.
fn substitute(text: &str, values: &[String]) -> Result<String, Refused> {
    let mut out = String::with_capacity(text.len() + 16 * values.len());
    let mut at = 0;
    for (range, n) in placeholders(text)? {
        let value = values
            .get(n - 1)
            .ok_or_else(|| error_info("42P02", format!("there is no parameter ${n}")))?;
        out.push_str(&text[at..range.start]);
        out.push_str(value);
        at = range.end;
    }
    out.push_str(&text[at..]);
    let max = cardinal_route::QUERY_BYTES_MAX;
    if out.len() > max {
        return Err(error_info(
            "54000",
            format!(
                "the query with its parameters is {} bytes; the limit is {max} bytes",
                out.len()
            ),
        ));
    }
    Ok(out)
}

/// A portal's text with its bound values in place.
fn bound_text(portal: &Portal<Statement>) -> Result<String, Refused> {
    let types = &portal.statement.parameter_types;
    let mut values = Vec::with_capacity(portal.parameters.len());
    for (i, value) in portal.parameters.iter().enumerate() {
        let ty = types.get(i).cloned().flatten().unwrap_or(Type::UNKNOWN);
        let binary = format_of(&portal.parameter_format, i) == FieldFormat::Binary;
        values.push(literal(value.as_ref(), &ty, binary, i + 1)?);
    }
    substitute(&portal.statement.statement.text, &values)
}

/// A parameter not yet bound, for describing a statement: a value of
/// its declared type (NULL when it has none).
fn stand_in(ty: &Type) -> String {
    match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => "0".into(),
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => "0.0".into(),
        Type::BOOL => "TRUE".into(),
        Type::TIMESTAMPTZ | Type::TIMESTAMP | Type::DATE => "'2000-01-01T00:00:00Z'".into(),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => "''".into(),
        _ => "NULL".into(),
    }
}

/// A SQL literal of bound value `value` of type `ty`: numbers checked
/// to be numbers, anything else a string literal with `'` doubled.
fn literal(value: Option<&Bytes>, ty: &Type, binary: bool, n: usize) -> Result<String, Refused> {
    let Some(bytes) = value else {
        return Ok("NULL".into());
    };
    let bad = |what: &str| error_info("22P02", format!("parameter ${n}: {what}"));
    if binary {
        let fixed = |len: usize| -> Result<&[u8], Refused> {
            if bytes.len() == len {
                Ok(bytes.as_ref())
            } else {
                Err(bad(&format!(
                    "a binary {} of {} bytes",
                    ty.name(),
                    bytes.len()
                )))
            }
        };
        return Ok(match *ty {
            Type::BOOL => if fixed(1)?[0] != 0 { "TRUE" } else { "FALSE" }.into(),
            Type::INT2 => i16::from_be_bytes(fixed(2)?.try_into().expect("2 bytes")).to_string(),
            Type::INT4 => i32::from_be_bytes(fixed(4)?.try_into().expect("4 bytes")).to_string(),
            Type::INT8 => i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes")).to_string(),
            Type::FLOAT4 => float_literal(f64::from(f32::from_be_bytes(
                fixed(4)?.try_into().expect("4 bytes"),
            )))?,
            Type::FLOAT8 => {
                float_literal(f64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes")))?
            }
            Type::TIMESTAMPTZ | Type::TIMESTAMP => {
                let micros = i64::from_be_bytes(fixed(8)?.try_into().expect("8 bytes"));
                let ms = micros.saturating_add(PG_EPOCH_MICROS).div_euclid(1000);
                quote(&cardinal_event::Timestamp(ms).to_string())
            }
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                quote(std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?)
            }
            _ => {
                return Err(error_info(
                    "0A000",
                    format!(
                        "parameter ${n}: binary {} is not supported; send it in text format",
                        ty.name()
                    ),
                ));
            }
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
    Ok(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => text
            .trim()
            .parse::<i64>()
            .map_err(|_| bad(&format!("{text:?} is not an integer")))?
            .to_string(),
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => float_literal(
            text.trim()
                .parse::<f64>()
                .map_err(|_| bad(&format!("{text:?} is not a number")))?,
        )?,
        Type::BOOL => match text.trim().to_ascii_lowercase().as_str() {
            "t" | "true" | "on" | "yes" | "1" => "TRUE".into(),
            "f" | "false" | "off" | "no" | "0" => "FALSE".into(),
            _ => return Err(bad(&format!("{text:?} is not a boolean"))),
        },
        _ => quote(text),
    })
}

/// A finite double as a literal the dialect reads back exactly.
fn float_literal(f: f64) -> Result<String, Refused> {
    if f.is_finite() {
        // `{:?}` prints the shortest text that reads back, with a point.
        Ok(format!("{f:?}"))
    } else {
        Err(error_info(
            "22P02",
            format!("{f} is not a number the query can hold"),
        ))
    }
}

/// A string literal: `'` doubled, as standard_conforming_strings reads
/// it (backslashes are plain characters).
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// The PostgreSQL front end's text handling, reachable by the fuzz
/// targets (`fuzz/fuzz_targets/pg_bind.rs`, `pg_catalog.rs`); not an API.
#[doc(hidden)]
pub mod fuzzing {
    use super::{Bytes, Type, literal, substitute};

    /// `text` with each `$n` bound to `values[n - 1]`: the value's bytes
    /// (or NULL), the parameter's type OID, and whether it came in binary.
    pub fn bind(text: &str, values: &[(Option<&[u8]>, u32, bool)]) -> Result<String, String> {
        let mut literals = Vec::with_capacity(values.len());
        for (i, (value, oid, binary)) in values.iter().enumerate() {
            let ty = Type::from_oid(*oid).unwrap_or(Type::UNKNOWN);
            let value = value.map(Bytes::copy_from_slice);
            literals
                .push(literal(value.as_ref(), &ty, *binary, i + 1).map_err(|e| format!("{e:?}"))?);
        }
        substitute(text, &literals).map_err(|e| format!("{e:?}"))
    }

    /// The catalog's answer to `text`: `Ok(None)` when the query is the
    /// planner's, else the number of rows answered.
    pub fn catalog(plan: &cardinal_route::Plan, text: &str) -> Result<Option<usize>, String> {
        match super::catalog::answer(plan, text) {
            Ok(None) => Ok(None),
            Ok(Some(super::catalog::Answer::Rows(table))) => Ok(Some(table.rows.len())),
            Ok(Some(_)) => Ok(Some(0)),
            Err(error) => Err(format!("{error:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_tokens_not_text() {
        let text = "SELECT '$1' AS a, $1 AS b -- $2\nFROM reach WHERE state = $2";
        let values = ["42".to_owned(), quote("O'Brien")];
        let out = substitute(text, &values).expect("substituted");
        assert_eq!(
            out,
            "SELECT '$1' AS a, 42 AS b -- $2\nFROM reach WHERE state = 'O''Brien'"
        );
        assert!(substitute("SELECT $3", &values).is_err());
    }

    #[test]
    fn offsets_count_characters_on_each_line() {
        let text = "SELECT 'é'\n  , $1";
        let out = substitute(text, &["1".to_owned()]).expect("substituted");
        assert_eq!(out, "SELECT 'é'\n  , 1");
    }

    #[test]
    fn statements_split_at_top_level_semicolons() {
        let split = split_statements("SELECT ';'; -- ping\n; SELECT 2").expect("split");
        assert_eq!(split, vec!["SELECT ';'", "SELECT 2"]);
        assert!(split_statements("-- ping").expect("split").is_empty());
        assert!(split_statements(" ; ;").expect("split").is_empty());
    }

    #[test]
    fn literals_are_checked_and_quoted() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let int = literal(Some(&b("12")), &Type::INT8, false, 1).expect("int");
        assert_eq!(int, "12");
        assert!(literal(Some(&b("1; DROP")), &Type::INT8, false, 1).is_err());
        let text = literal(Some(&b("a'b\\")), &Type::UNKNOWN, false, 1).expect("text");
        assert_eq!(text, "'a''b\\'");
        assert_eq!(literal(None, &Type::TEXT, false, 1).expect("null"), "NULL");
        let binary = Bytes::copy_from_slice(&7i64.to_be_bytes());
        assert_eq!(
            literal(Some(&binary), &Type::INT8, true, 1).expect("bin"),
            "7"
        );
    }

    #[test]
    fn refusals_carry_their_sqlstate() {
        use cardinal_engine::Error;
        assert_eq!(sqlstate(&Error::GroupLimit { groups_max: 10 }), "54000");
        let scan = Error::ScanLimit {
            summary: "reach".into(),
            max: 1,
        };
        assert_eq!(sqlstate(&scan), "54000");
        let unknown = Error::UnknownSummary {
            name: "nowhere".into(),
            known: "reach".into(),
        };
        assert_eq!(sqlstate(&unknown), "42P01");
        let plan = cardinal_route::Plan::default();
        let parse =
            |text: &str| cardinal_engine::sql::Prepared::new(&plan, text).expect_err("refused");
        assert_eq!(sqlstate(&parse("SELEC 1")), "42601");
        assert_eq!(sqlstate(&parse("SELECT 1 FROM nowhere")), "42P01");
    }

    #[test]
    fn framing_finds_headers_across_reads() {
        let mut framing = Framing::default();
        let mut stream = Vec::new();
        stream.extend(8i32.to_be_bytes());
        stream.extend(80_877_103i32.to_be_bytes()); // SSLRequest
        stream.extend(12i32.to_be_bytes());
        stream.extend(196_608i32.to_be_bytes()); // startup, 4 body bytes
        stream.extend([0, 0, 0, 0]);
        stream.push(b'Q');
        stream.extend(9i32.to_be_bytes());
        stream.extend(b"abcd\0");
        for chunk in stream.chunks(3) {
            assert_eq!(framing.scan(chunk, 100), Ok(()));
        }
        assert!(framing.typed);
        assert_eq!(framing.remaining, 0);
        let mut big = vec![b'Q'];
        big.extend(1000i32.to_be_bytes());
        assert_eq!(framing.scan(&big, 100), Err(996));
    }

    #[test]
    fn instants_print_as_postgres_does() {
        assert_eq!(timestamptz_text(0), "1970-01-01 00:00:00+00");
        let mut out = BytesMut::new();
        put_cell(
            &mut out,
            &Cell::Time(cardinal_event::Timestamp(946_684_800_000)),
            FieldFormat::Binary,
        );
        assert_eq!(&out[..], &[0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]);
    }
}
