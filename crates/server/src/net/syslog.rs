//! Syslog in: `--relp STREAM=ADDR` (rsyslog's reliable protocol) and
//! `--syslog STREAM=ADDR` (RFC 6587 plain TCP), each feeding one stream.
//!
//! A connection reads what the socket has, decodes every whole frame in
//! it, makes each message one record of its stream
//! ([`cardinal_syslog::record::Layout`]) and hands them to the service as
//! one batch ([`crate::service::Service::ingest_syslog`]), the one admission path every
//! edge uses. So a syslog message goes through the write-ahead log like a
//! native batch, and its position is its log record's.
//!
//! **RELP acknowledges after the sync.** `rsp 200` for a message is
//! written only once the batch holding it is durable and folded (the
//! service's reply), in the order the messages came. Holding back `rsp`
//! is the flow control: rsyslog's `omrelp` keeps at most `windowSize`
//! messages unacknowledged (128 by default), so a slow fold slows the
//! sender and its queue grows on its own disk, not in this process. A
//! connection also stops reading past [`IN_FLIGHT_MESSAGES_MAX`]
//! unacknowledged messages, for senders that ignore the window.
//!
//! **Rejects are acknowledged.** A message whose header or body cannot be
//! read is kept as a reject (`GET /v1/rejects`, counted by reason in
//! `cardinal_syslog_rejects_total`) and acknowledged with the batch it
//! came in: resending it would fail the same way forever.
//!
//! **Refusals.** A full engine is waited out (the batch is offered again
//! every [`FULL_RETRY`], the sender waits for its `rsp`); a service that
//! stops, a log that fails, or a sender table full of recent senders
//! ends the session with `serverclose`: rsyslog keeps every message not
//! yet acknowledged and resends it on its next connection.
//!
//! **Exactly-once.** With `--syslog-id`, a message's id (its MSGID, or a
//! structured-data parameter) is checked against its sender's recent ids
//! ([`cardinal_syslog::ids`]) under the service's ingest lock, so a
//! message rsyslog resends after a lost `rsp` or a restart counts once.
//! Without ids a resend counts again (at-least-once).
//!
//! **Plain TCP** has no acknowledgements: a message is as safe as the
//! batch it lands in, and what the kernel held when the process died is
//! lost or, if the sender resends, counted again (docs/syslog.md).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use cardinal_event::Timestamp;
use cardinal_route::{Format as StreamFormat, Plan};
use cardinal_syslog::header::{self, Message};
use cardinal_syslog::ids::{self, id_digest};
use cardinal_syslog::record::{BodyFormat, Layout};
use cardinal_syslog::{framing, relp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Edge, Slot};
use crate::frame::Format;
use crate::service::{Refused, Reply, SyslogBatch};

/// Syslog connections served at once, over every syslog listener: 256,
/// as the native protocol's default. rsyslog opens one connection per
/// action (per worker thread with `queue.workerThreads`), so a relay
/// fleet of that many senders fits.
pub const SYSLOG_CONNECTIONS_MAX: usize = 256;

/// Messages a connection holds unacknowledged before it stops reading:
/// 1,024, eight times `omrelp`'s default window, and no more than a
/// sender's id window ([`ids::IDS_PER_SENDER`]), so every message a
/// sender can resend is within it.
pub const IN_FLIGHT_MESSAGES_MAX: usize = 1024;

/// Bytes of records one batch gathers before it is handed over: 1 MiB,
/// the size the engine folds in one chunk, well under the service's
/// batch limit with ids.
pub const SYSLOG_BATCH_BYTES_MAX: usize = 1 << 20;

/// How long a batch refused by a full engine waits before it is offered
/// again.
pub const FULL_RETRY: Duration = Duration::from_millis(20);

/// Bytes read from the socket at once.
const READ_BYTES: usize = 64 << 10;

const _: () = assert!(IN_FLIGHT_MESSAGES_MAX <= ids::IDS_PER_SENDER);
// A batch is handed over once it reaches SYSLOG_BATCH_BYTES_MAX, so it
// ends at most one record past it (a record is at most twice its
// message, CSV quoting doubling quotes, plus its header columns), and its
// ids take at most 12 bytes and a sender name per message: well within
// what the service takes.
const _: () = assert!(
    SYSLOG_BATCH_BYTES_MAX
        + 2 * relp::FRAME_BYTES_MAX
        + IN_FLIGHT_MESSAGES_MAX * (12 + ids::SENDER_BYTES_MAX)
        <= crate::service::BATCH_BYTES_MAX
);

/// Which protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RELP (`--relp`).
    Relp,
    /// RFC 6587 plain TCP (`--syslog`).
    Tcp,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Relp => "RELP",
            Protocol::Tcp => "syslog",
        }
    }
}

/// Where a message's unique id is (`--syslog-id`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IdField {
    /// No id: at-least-once.
    #[default]
    None,
    /// The MSGID header field.
    MsgId,
    /// A structured-data parameter: `SD-ID` and `PARAM-NAME`.
    Sd {
        /// The element's SD-ID (`origin`, `cardinal@32473`).
        id: String,
        /// The parameter's name.
        param: String,
    },
}

impl IdField {
    /// Reads `--syslog-id`: `none`, `msgid`, or `sd:SD-ID/PARAM`.
    pub fn parse(text: &str) -> Result<IdField, String> {
        match text {
            "none" => Ok(IdField::None),
            "msgid" => Ok(IdField::MsgId),
            _ => match text
                .strip_prefix("sd:")
                .and_then(|rest| rest.split_once('/'))
            {
                Some((id, param)) if !id.is_empty() && !param.is_empty() => Ok(IdField::Sd {
                    id: id.to_owned(),
                    param: param.to_owned(),
                }),
                _ => Err(format!(
                    "--syslog-id {text:?}: expected none, msgid, or sd:SD-ID/PARAM \
                     (sd:meta/sequenceId)"
                )),
            },
        }
    }

    fn of<'a>(&self, message: &'a Message<'a>) -> Option<std::borrow::Cow<'a, str>> {
        match self {
            IdField::None => None,
            IdField::MsgId => message.msgid.map(std::borrow::Cow::Borrowed),
            IdField::Sd { id, param } => message.sd_param(id, param),
        }
    }
}

/// One syslog listener: `--relp STREAM=ADDR` or `--syslog STREAM=ADDR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// The protocol.
    pub protocol: Protocol,
    /// The stream its messages feed.
    pub stream: String,
    /// The address.
    pub address: SocketAddr,
}

impl Listen {
    /// Reads `STREAM=ADDR`.
    pub fn parse(protocol: Protocol, text: &str) -> Result<Listen, String> {
        let flag = match protocol {
            Protocol::Relp => "--relp",
            Protocol::Tcp => "--syslog",
        };
        let Some((stream, address)) = text.split_once('=') else {
            return Err(format!(
                "{flag} {text:?}: expected STREAM=ADDR (impressions=127.0.0.1:2514)"
            ));
        };
        let address = address
            .parse()
            .map_err(|e| format!("{flag} {text:?}: {address:?} is not an address: {e}"))?;
        Ok(Listen {
            protocol,
            stream: stream.to_owned(),
            address,
        })
    }
}

/// Counters of the syslog edge, for `/metrics`.
#[derive(Debug, Default)]
pub struct SyslogMetrics {
    /// Connections open.
    pub connections: AtomicU64,
    /// Connections refused at [`SYSLOG_CONNECTIONS_MAX`].
    pub refused: AtomicU64,
    /// Messages read (rejects and duplicates included).
    pub messages: AtomicU64,
    /// Messages recognised as resent and not counted again.
    pub duplicates: AtomicU64,
    /// RELP messages acknowledged.
    pub acknowledged: AtomicU64,
    /// Messages rejected, by reason.
    pub rejects: std::sync::Mutex<BTreeMap<&'static str, u64>>,
}

/// What a listener needs to make records: the stream's index, format and
/// layout, checked at start.
#[derive(Debug)]
struct Target {
    stream: String,
    format: Format,
    layout: Layout,
}

/// Checks that every listener's stream can take syslog messages: declared,
/// CSV (comma-separated) or NDJSON, not fed from Kafka; and that a
/// listener off loopback was allowed (`--allow-remote`).
pub fn check(plan: &Plan, listens: &[Listen], allow_remote: bool) -> Result<()> {
    for listen in listens {
        target(plan, &listen.stream).map_err(|why| {
            anyhow::anyhow!("{} {}: {why}", listen.protocol.name(), listen.stream)
        })?;
        if !listen.address.ip().is_loopback() && !allow_remote {
            bail!(
                "a {} listener beyond loopback ({}) takes messages from anyone who can reach it \
                 (syslog and RELP carry no token): put it behind a TLS relay, or pass \
                 --allow-remote to accept that risk",
                listen.protocol.name(),
                listen.address
            );
        }
    }
    Ok(())
}

fn target(plan: &Plan, stream: &str) -> Result<Target, String> {
    let declared = plan
        .streams
        .iter()
        .find(|s| s.name == stream && s.credit_of.is_none())
        .ok_or_else(|| format!("no input stream called {stream}"))?;
    let (format, body) = match declared.format {
        StreamFormat::Csv if declared.delimiter == b',' => (Format::Csv, BodyFormat::Csv),
        StreamFormat::Csv => {
            return Err(format!(
                "stream {stream} is delimited by {:?}; syslog bodies are read as \
                 comma-separated values",
                char::from(declared.delimiter)
            ));
        }
        StreamFormat::Json => (Format::Ndjson, BodyFormat::Ndjson),
        other => {
            return Err(format!(
                "stream {stream} reads {other:?}, not CSV or NDJSON"
            ));
        }
    };
    let columns: Vec<&str> = declared
        .schema
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    Ok(Target {
        stream: stream.to_owned(),
        format,
        layout: Layout::new(&columns, body),
    })
}

/// Accepts connections on one syslog listener until told to stop.
pub async fn accept(
    listener: TcpListener,
    listen: Listen,
    id_field: IdField,
    edge: Arc<Edge>,
    mut stop: watch::Receiver<bool>,
) {
    let target = match target(edge.service().plan(), &listen.stream) {
        Ok(target) => Arc::new(target),
        Err(why) => {
            eprintln!(
                "cardinal serve: {} {}: {why}",
                listen.protocol.name(),
                listen.stream
            );
            return;
        }
    };
    let id_field = Arc::new(id_field);
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    eprintln!(
                        "cardinal serve: accepting a {} connection failed: {error}",
                        listen.protocol.name()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        // Given back however the task ends.
        let taken = Slot::take(
            &edge,
            |e| &e.metrics.syslog.connections,
            SYSLOG_CONNECTIONS_MAX,
        );
        let Some(slot) = taken else {
            edge.metrics.syslog.refused.fetch_add(1, Ordering::Relaxed);
            drop(socket);
            continue;
        };
        let (edge, target, id_field, stop) = (
            Arc::clone(&edge),
            Arc::clone(&target),
            Arc::clone(&id_field),
            stop.clone(),
        );
        let protocol = listen.protocol;
        tokio::spawn(async move {
            let mut session = Session {
                edge: &edge,
                target: &target,
                id_field: &id_field,
                peer,
                protocol,
                pending: VecDeque::new(),
                in_flight: 0,
                framer: framing::Framer::new(framing::SYSLOG_FRAME_BYTES_MAX),
            };
            if let Err(error) = session.run(socket, stop).await {
                eprintln!(
                    "cardinal serve: {} connection from {peer}: {error:#}",
                    protocol.name()
                );
            }
            drop(slot);
        });
    }
}

/// Messages handed over and not yet acknowledged: the batch's reply (none
/// for a group of rejects only) and the RELP transaction numbers to
/// acknowledge once it comes.
struct Pending {
    reply: Option<Reply>,
    txnrs: Vec<u64>,
}

struct Session<'a> {
    edge: &'a Arc<Edge>,
    target: &'a Target,
    id_field: &'a IdField,
    peer: SocketAddr,
    protocol: Protocol,
    pending: VecDeque<Pending>,
    /// Messages in `pending`.
    in_flight: usize,
    /// Plain TCP: where the stream is (a too-long message being skipped).
    framer: framing::Framer,
}

/// How a session ends early.
enum End {
    /// The peer asked to close (`close`, whose transaction number is
    /// answered after every acknowledgement).
    Closed(Option<u64>),
    /// The server closes it (stopping, a refusal that does not pass).
    ServerClose(String),
}

/// What woke a session.
enum Event {
    Read(std::io::Result<usize>),
    Answer(Result<(), String>),
    Stop,
    Idle,
}

impl Session<'_> {
    async fn run(&mut self, mut socket: TcpStream, mut stop: watch::Receiver<bool>) -> Result<()> {
        socket.set_nodelay(true)?;
        let mut buffer: Vec<u8> = Vec::with_capacity(READ_BYTES);
        let mut out: Vec<u8> = Vec::new();
        let mut opened = self.protocol == Protocol::Tcp;
        let idle = self.edge.idle;
        let bound = match self.protocol {
            Protocol::Relp => relp::FRAME_BYTES_MAX,
            Protocol::Tcp => framing::buffer_bytes_max(framing::SYSLOG_FRAME_BYTES_MAX),
        };
        loop {
            // Decode every whole frame buffered, in batches.
            let (used, end, starved) = self.take_frames(&buffer, &mut opened, &mut out).await;
            buffer.drain(..used);
            if !out.is_empty() {
                socket.write_all(&out).await?;
                out.clear();
            }
            match end {
                Some(End::Closed(close)) => {
                    self.drain_acks(&mut socket).await?;
                    if let Some(txnr) = close {
                        relp::rsp(txnr, 200, "OK", &mut out);
                        socket.write_all(&out).await?;
                    }
                    return Ok(());
                }
                Some(End::ServerClose(why)) => {
                    // What was handed over before is acknowledged first,
                    // so the sender does not resend it.
                    let _ = self.drain_acks(&mut socket).await;
                    self.server_close(&mut socket).await;
                    bail!("closed by the server: {why}");
                }
                None => {}
            }
            if self.pending.front().is_some_and(|p| p.reply.is_none()) {
                self.ack_head(&mut socket).await?;
                continue;
            }
            if starved && buffer.len() >= bound {
                // The decoders refuse a frame that cannot fit before this;
                // a second guard on what one connection buffers.
                self.server_close(&mut socket).await;
                bail!("a frame longer than {bound} bytes");
            }
            let room = self.in_flight < IN_FLIGHT_MESSAGES_MAX && buffer.len() < bound;
            buffer.reserve(READ_BYTES);
            let mut reply = self.pending.front_mut().and_then(|p| p.reply.take());
            let waiting = reply.is_some();
            let event = tokio::select! {
                read = socket.read_buf(&mut buffer), if room => Event::Read(read),
                answer = async { reply.as_mut().expect("checked").await }, if waiting => {
                    Event::Answer(match answer {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(error)) => Err(error),
                        Err(_) => Err("the service stopped".to_owned()),
                    })
                }
                _ = stop.changed() => Event::Stop,
                () = tokio::time::sleep(idle), if !waiting => Event::Idle,
            };
            match event {
                Event::Answer(Ok(())) => self.ack_head(&mut socket).await?,
                Event::Answer(Err(error)) => {
                    self.server_close(&mut socket).await;
                    bail!("a batch was not made durable: {error}");
                }
                other => {
                    if let Some(reply) = reply {
                        self.pending.front_mut().expect("a head").reply = Some(reply);
                    }
                    match other {
                        Event::Read(read) => {
                            if read? == 0 {
                                self.drain_acks(&mut socket).await?;
                                return Ok(());
                            }
                        }
                        Event::Stop => {
                            // What was handed over is acknowledged once
                            // durable; what is unread is resent on the
                            // sender's next connection.
                            let _ = self.drain_acks(&mut socket).await;
                            self.server_close(&mut socket).await;
                            return Ok(());
                        }
                        Event::Idle => bail!("silent for {} s", idle.as_secs()),
                        Event::Answer(_) => unreachable!("handled above"),
                    }
                }
            }
        }
    }

    /// Tells a RELP peer the server closes the session (`serverclose`);
    /// best effort, the socket closes anyway.
    async fn server_close(&self, socket: &mut TcpStream) {
        if self.protocol == Protocol::Relp {
            let mut out = Vec::new();
            relp::serverclose(&mut out);
            let _ = socket.write_all(&out).await;
        }
    }

    /// Writes `rsp 200` for the head's messages and drops it.
    async fn ack_head(&mut self, socket: &mut TcpStream) -> Result<()> {
        let head = self.pending.pop_front().expect("a head");
        self.in_flight -= head.txnrs.len();
        if self.protocol == Protocol::Relp {
            let mut out = Vec::with_capacity(16 * head.txnrs.len());
            for txnr in &head.txnrs {
                relp::rsp(*txnr, 200, "OK", &mut out);
            }
            socket.write_all(&out).await?;
            self.edge
                .metrics
                .syslog
                .acknowledged
                .fetch_add(head.txnrs.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Waits for every pending batch and acknowledges it (a `close`, or
    /// the peer's end of the stream).
    async fn drain_acks(&mut self, socket: &mut TcpStream) -> Result<()> {
        while let Some(head) = self.pending.front_mut() {
            if let Some(reply) = head.reply.as_mut() {
                reply
                    .await
                    .map_err(|_| anyhow::anyhow!("the service stopped"))?
                    .map_err(|e| anyhow::anyhow!("a batch was not made durable: {e}"))?;
                head.reply = None;
            }
            self.ack_head(socket).await?;
        }
        Ok(())
    }

    /// Decodes the whole frames at the front of `input` into batches
    /// handed to the service; writes replies that need no wait (`open`)
    /// into `out`. Returns the bytes used, how the session ends if it
    /// does, and whether it stopped for want of bytes (rather than at a
    /// batch's or the in-flight limit).
    async fn take_frames(
        &mut self,
        input: &[u8],
        opened: &mut bool,
        out: &mut Vec<u8>,
    ) -> (usize, Option<End>, bool) {
        let now = Timestamp(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        );
        let mut used = 0;
        let mut batch = SyslogBatch::default();
        let mut txnrs = Vec::new();
        let mut starved = false;
        loop {
            if batch.records.len() >= SYSLOG_BATCH_BYTES_MAX
                || self.in_flight + txnrs.len() >= IN_FLIGHT_MESSAGES_MAX
            {
                break;
            }
            let rest = &input[used..];
            let message = match self.protocol {
                Protocol::Relp => match relp::decode(rest) {
                    Ok(None) => {
                        starved = true;
                        break;
                    }
                    Err(error) => {
                        let why = format!("a malformed RELP frame: {error}");
                        return (
                            used,
                            Some(self.flush_then(batch, txnrs, End::ServerClose(why)).await),
                            false,
                        );
                    }
                    Ok(Some((frame, n))) => {
                        used += n;
                        match frame.command {
                            relp::Command::Open => {
                                if let Err(error) =
                                    relp::open_reply(frame.txnr, frame.data, "cardinal", out)
                                {
                                    relp::rsp(frame.txnr, 500, &error.to_string(), out);
                                    let why = format!("refused its open: {error}");
                                    return (used, Some(End::ServerClose(why)), false);
                                }
                                *opened = true;
                                continue;
                            }
                            relp::Command::Close => {
                                let end = End::Closed(Some(frame.txnr));
                                return (
                                    used,
                                    Some(self.flush_then(batch, txnrs, end).await),
                                    false,
                                );
                            }
                            relp::Command::Other(name) => {
                                let text = format!("command {name} not supported");
                                relp::rsp(frame.txnr, 500, &text, out);
                                continue;
                            }
                            relp::Command::Syslog => {
                                if !*opened {
                                    let why = "a syslog frame before open".to_owned();
                                    return (used, Some(End::ServerClose(why)), false);
                                }
                                txnrs.push(frame.txnr);
                                frame.data
                            }
                        }
                    }
                },
                Protocol::Tcp => match self.framer.decode(rest) {
                    Ok(None) => {
                        starved = true;
                        break;
                    }
                    Err(error) => {
                        let why = format!("a malformed syslog frame: {error}");
                        return (
                            used,
                            Some(self.flush_then(batch, txnrs, End::ServerClose(why)).await),
                            false,
                        );
                    }
                    Ok(Some((framing::Decoded::Oversize { bytes }, n))) => {
                        used += n;
                        self.reject(
                            "too_long",
                            &format!(
                                "a message of {bytes} bytes, over the limit of {} bytes",
                                framing::SYSLOG_FRAME_BYTES_MAX
                            ),
                        );
                        continue;
                    }
                    Ok(Some((framing::Decoded::Skipped { .. }, n))) => {
                        used += n;
                        continue;
                    }
                    Ok(Some((framing::Decoded::Message(message), n))) => {
                        used += n;
                        txnrs.push(0);
                        message
                    }
                },
            };
            self.edge
                .metrics
                .syslog
                .messages
                .fetch_add(1, Ordering::Relaxed);
            if let Err((reason, why)) = self.add(message, now, &mut batch) {
                self.reject(reason, &why);
            }
        }
        (used, self.flush(batch, txnrs).await.err(), starved)
    }

    /// Makes one message a record of the batch, or says why it is
    /// rejected.
    fn add(
        &self,
        bytes: &[u8],
        now: Timestamp,
        batch: &mut SyslogBatch,
    ) -> Result<(), (&'static str, String)> {
        let message = header::parse(bytes, now).map_err(|e| (e.reason(), e.to_string()))?;
        let id = match self.id_field.of(&message) {
            None => None,
            Some(id) => {
                if id.len() > ids::ID_BYTES_MAX {
                    return Err((
                        "id",
                        format!(
                            "a message id of {} bytes, over the limit of {}",
                            id.len(),
                            ids::ID_BYTES_MAX
                        ),
                    ));
                }
                let sender = format!(
                    "{}/{}",
                    message.hostname.unwrap_or("-"),
                    message.app_name.unwrap_or("-")
                );
                ids::check_sender(&sender).map_err(|why| ("sender", why))?;
                Some((sender, id_digest(id.as_bytes())))
            }
        };
        self.target
            .layout
            .append(&message, &mut batch.records)
            .map_err(|e| (e.reason(), e.to_string()))?;
        batch.ends.push(batch.records.len());
        batch.ids.push(id);
        Ok(())
    }

    fn reject(&self, reason: &'static str, why: &str) {
        let metrics = &self.edge.metrics.syslog;
        *metrics
            .rejects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(reason)
            .or_default() += 1;
        let service = self.edge.service();
        if let Ok(index) = service.check_stream(&self.target.stream, self.target.format) {
            let who = format!(
                "{} message from {} on stream {}",
                self.protocol.name(),
                self.peer,
                self.target.stream
            );
            service.reject_at_edge(index, &who, why);
        }
    }

    /// Hands `batch` to the service, then ends with `end`.
    async fn flush_then(&mut self, batch: SyslogBatch, txnrs: Vec<u64>, end: End) -> End {
        match self.flush(batch, txnrs).await {
            Ok(()) => end,
            Err(end) => end,
        }
    }

    /// Hands `batch` to the service (waiting out a full engine) and queues
    /// its acknowledgement with `txnrs` (the messages it holds and the
    /// rejects among them, in order).
    async fn flush(&mut self, batch: SyslogBatch, txnrs: Vec<u64>) -> Result<(), End> {
        if txnrs.is_empty() {
            return Ok(());
        }
        let reply = if batch.ends.is_empty() {
            None
        } else {
            loop {
                let service = self.edge.service();
                match service.ingest_syslog(&self.target.stream, self.target.format, &batch) {
                    Ok((reply, duplicates)) => {
                        self.edge
                            .metrics
                            .syslog
                            .duplicates
                            .fetch_add(duplicates as u64, Ordering::Relaxed);
                        break Some(reply);
                    }
                    Err(Refused::Full) => tokio::time::sleep(FULL_RETRY).await,
                    Err(refused) => return Err(End::ServerClose(refused.to_string())),
                }
            }
        };
        self.in_flight += txnrs.len();
        self.pending.push_back(Pending { reply, txnrs });
        Ok(())
    }
}
