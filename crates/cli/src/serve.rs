//! `cardinal serve` and `cardinal query`: flags to a
//! [`cardinal_server::net::ServeConfig`], and a small HTTP client that
//! prints a live answer.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use cardinal_route::Plan;
use cardinal_server::net::cluster::PEER_TIMEOUT_DEFAULT;
use cardinal_server::net::{
    BODY_BYTES_DEFAULT, BODY_BYTES_MAX, CONNECTIONS_DEFAULT, CONNECTIONS_MAX,
    HTTP_CONNECTIONS_DEFAULT, HTTP_CONNECTIONS_MAX, IDLE_DEFAULT, SNAPSHOT_EVERY_DEFAULT,
    SNAPSHOT_LOG_BYTES_DEFAULT, ServeConfig,
};
use cardinal_server::service::ServiceOptions;
use cardinal_server::{Limits, Token};
use clap::Parser;

/// Serve a schema: ingest over TCP and HTTP, durable, queryable live.
#[derive(Debug, Parser)]
#[command(after_help = "Examples:
  cardinal serve schema.sql
  cardinal serve schema.sql --pg 127.0.0.1:5433   # then: psql -h 127.0.0.1 -p 5433 -c '\\d'
  cardinal serve schema.sql --relp impressions=127.0.0.1:2514 --syslog-id msgid
  cardinal serve schema.sql --http 10.0.0.1:7480 --listen 10.0.0.1:7400 --token-file token \\
      --peers http://10.0.0.2:7480,http://10.0.0.3:7480     # one node of three

Syslog (docs/syslog.md): --relp STREAM=ADDR takes rsyslog's omrelp and
answers each message only once the log's sync covers it; --syslog
STREAM=ADDR takes RFC 6587 plain TCP (no acknowledgements). Each message
is one record: the body in the stream's format, the header's fields as
syslog_* columns. With --syslog-id, a message resent after a lost answer
or a restart counts once.

Kafka (docs/kafka.md): each node reads the partitions it is assigned
(--node I/N: partition p belongs to node p mod N; or --partitions) and
keeps their offsets in its snapshots, so a restart resumes exactly where
its state ends (each record counted once). A stream fed from Kafka takes
no batches over TCP or HTTP; with --kafka the native listener opens only
when --listen is given.

SIGTERM or SIGINT: stop accepting, finish what was taken, write a snapshot,
exit 0. After a crash, the next start recovers from the newest snapshot and
the write-ahead log. Damage (not a torn tail) refuses to start, naming the
segment, offset and the record's sender; `--repair` keeps a copy of each
damaged segment and salvages every intact record, listing what it lost.
One server per data directory: the directory itself is locked.
Every HTTP route, parameter, status code and limit: docs/http.md.")]
pub struct ServeArgs {
    /// The schema (CREATE STREAM / SUMMARY / ATTRIBUTION statements).
    pub schema: PathBuf,
    /// The native protocol's address (port 0: any free port, printed;
    /// default 127.0.0.1:7400, and none with --kafka unless given).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// The HTTP API's address (port 0: any free port, printed).
    #[arg(long, default_value = "127.0.0.1:7480")]
    pub http: SocketAddr,
    /// Serve SQL over the PostgreSQL wire protocol on this address (psql,
    /// psycopg, pandas, Grafana; docs/pg.md). No TLS: bind to loopback or
    /// put it behind a TLS proxy. With --token-file, the password is the
    /// token.
    #[arg(long, value_name = "ADDR")]
    pub pg: Option<SocketAddr>,
    /// Take RELP (rsyslog's `omrelp`) into STREAM on ADDR, acknowledging
    /// each message once it is durable (repeatable; docs/syslog.md).
    #[arg(long, value_name = "STREAM=ADDR", value_parser = relp_arg)]
    pub relp: Vec<cardinal_server::net::syslog::Listen>,
    /// Take RFC 6587 syslog over TCP into STREAM on ADDR (octet counting or
    /// one message a line; no acknowledgements; repeatable).
    #[arg(long, value_name = "STREAM=ADDR", value_parser = syslog_arg)]
    pub syslog: Vec<cardinal_server::net::syslog::Listen>,
    /// Where each syslog message carries a unique id, so that a resent
    /// message counts once: msgid, sd:SD-ID/PARAM, or none (every resend
    /// counts again). Only for ids unique per sender (HOSTNAME/APP-NAME).
    #[arg(long, value_name = "FIELD", default_value = "none", value_parser = cardinal_server::net::syslog::IdField::parse)]
    pub syslog_id: cardinal_server::net::syslog::IdField,
    /// Let --relp and --syslog listen beyond loopback. Syslog and RELP
    /// carry no token: anyone who can reach the port can add events. Put
    /// such a listener behind a firewall or a TLS relay.
    #[arg(long)]
    pub allow_remote: bool,
    /// PostgreSQL connections served at once (shrinks to fit `ulimit -n`).
    #[arg(long, default_value_t = cardinal_server::net::pg::PG_CONNECTIONS_DEFAULT, value_parser = pg_connections_arg, requires = "pg")]
    pub pg_connections: usize,
    /// The data directory: write-ahead log and snapshots.
    #[arg(long, default_value = "cardinal-data")]
    pub data: PathBuf,
    /// A file holding the token clients must present (required when
    /// listening beyond loopback).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Worker threads per stream, 1 to 256 (default: the number of cores).
    #[arg(long, value_parser = crate::run::threads_arg)]
    pub threads: Option<usize>,
    /// Memory budget per stream's engine (e.g. 512MiB, 8G; default: half
    /// the machine's memory).
    #[arg(long, value_name = "SIZE", value_parser = crate::memory::memory_arg)]
    pub memory_max: Option<u64>,
    /// Most groups a summary may hold (a memory guard): a summary with
    /// more stops the server, naming it.
    #[arg(long, default_value_t = cardinal_rollup::GROUPS_MAX_DEFAULT)]
    pub groups_max: u64,
    /// Keep only buckets within this many days of the stream's watermark:
    /// what bounds a long-running server's state.
    #[arg(long)]
    pub retention_days: Option<u32>,
    /// Drop the records of buckets more than DAYS ahead of the stream's
    /// watermark, counted per summary (default: the retention window, at
    /// least 1 day, with --retention-days, else off).
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub future_tolerance: Option<u32>,
    /// Seconds between snapshots.
    #[arg(long, default_value_t = SNAPSHOT_EVERY_DEFAULT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub snapshot_every: u64,
    /// Native-protocol connections served at once.
    #[arg(long, default_value_t = CONNECTIONS_DEFAULT, value_parser = connections_arg)]
    pub connections: usize,
    /// HTTP connections served at once; at the limit a new one closes the
    /// oldest idle one (both limits shrink to fit `ulimit -n`).
    #[arg(long, default_value_t = HTTP_CONNECTIONS_DEFAULT, value_parser = http_connections_arg)]
    pub http_connections: usize,
    /// The largest HTTP ingest body, in bytes.
    #[arg(long, default_value_t = BODY_BYTES_DEFAULT, value_parser = body_arg)]
    pub body_max: usize,
    /// Seconds a connection may stay silent with nothing pending.
    #[arg(long, default_value_t = IDLE_DEFAULT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle: u64,
    /// Write `OUT/<summary>/YYYY-MM-DD.csv` (as `run --out` does) once
    /// each day closes, and again when a late event changes it.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seconds of event time after a day's end before its file is written.
    #[arg(long, default_value_t = cardinal_server::days::LATENESS_MS_DEFAULT / 1000, requires = "out")]
    pub out_lateness: u64,
    /// Add `<name>_hll` columns with each HyperLogLog as postgresql-hll hex
    /// to the day files.
    #[arg(long, requires = "out")]
    pub hll_hex: bool,
    /// Add `<name>_sketch` columns with each quantile (KLL) and Theta
    /// sketch as its Apache DataSketches image (hex or base64) to the day
    /// files.
    #[arg(long, value_name = "ENCODING", value_parser = ["hex", "base64"], requires = "out")]
    pub sketch_bytes: Option<String>,
    /// Repair a damaged write-ahead log: keep a copy of each damaged
    /// segment beside it, keep every record whose checksum and sequence
    /// hold, and report the sequences and senders it could not keep; a
    /// log that ends below a snapshot's positions goes on past them.
    #[arg(long)]
    pub repair: bool,
    /// Kafka brokers to read from (`host:port,...`): streams named by
    /// --kafka-topic are fed from their topics.
    #[arg(long, value_name = "BROKERS", requires = "kafka_topic")]
    pub kafka: Option<String>,
    /// A stream fed from a Kafka topic: STREAM=TOPIC (repeatable).
    #[arg(long, value_name = "STREAM=TOPIC", requires = "kafka", value_parser = kafka_topic_arg)]
    pub kafka_topic: Vec<(String, String)>,
    /// This node's share of every topic's partitions: I/N, partition p
    /// belongs to node p mod N (default 0/1: all of them).
    #[arg(long, value_name = "I/N", requires = "kafka", conflicts_with = "partitions", value_parser = node_arg)]
    pub node: Option<cardinal_server::source::kafka::Assignment>,
    /// The partitions this node reads, instead of --node: `0,2,4-7`.
    #[arg(long, value_name = "LIST", requires = "kafka", value_parser = partitions_arg)]
    pub partitions: Option<cardinal_server::source::kafka::Assignment>,
    /// The consumer group the offsets are committed to (for lag display
    /// and the ownership fence; never read back for correctness).
    #[arg(long, value_name = "GROUP", requires = "kafka", default_value = None)]
    pub kafka_group: Option<String>,
    /// Seconds a start waits for the Kafka broker before it gives up.
    #[arg(long, value_name = "SECS", requires = "kafka", default_value_t = KAFKA_WAIT_SECS_DEFAULT, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub kafka_wait_secs: u64,
    /// The other nodes of a cluster, comma-separated HTTP base URLs
    /// (http://10.0.0.2:7480,http://10.0.0.3:7480): every live answer
    /// (summaries, overlap) then merges their states of the selection
    /// into this node's and answers for the whole cluster. Give every
    /// node the others and the same --token-file.
    #[arg(long, value_name = "URL,...", value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Seconds (fractions allowed) a peer has to answer; one that does
    /// not fails the query with 503, unless it asks partial=true.
    #[arg(long, value_name = "SECS", default_value_t = PEER_TIMEOUT_DEFAULT.as_secs_f64(),
          value_parser = peer_timeout_arg, requires = "peers")]
    pub peer_timeout: f64,
}

/// The longest `--peer-timeout`: a minute, as long as `cardinal query`
/// waits by default; a live query that waits longer for one node is
/// better answered partially.
pub const PEER_TIMEOUT_MAX_SECS: f64 = 60.0;

fn peer_timeout_arg(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if (0.001..=PEER_TIMEOUT_MAX_SECS).contains(&secs) {
        Ok(secs)
    } else {
        Err(format!("0.001 to {PEER_TIMEOUT_MAX_SECS} seconds"))
    }
}

/// How long a start waits for the Kafka broker by default: a minute, long
/// enough for a broker restarting beside the node.
pub const KAFKA_WAIT_SECS_DEFAULT: u64 = 60;

/// The native listener's address when `--listen` is not given.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:7400";

fn kafka_topic_arg(text: &str) -> Result<(String, String), String> {
    cardinal_server::source::kafka::topic_arg(text).map_err(|e| format!("{e:#}"))
}

fn node_arg(text: &str) -> Result<cardinal_server::source::kafka::Assignment, String> {
    cardinal_server::source::kafka::Assignment::node(text).map_err(|e| format!("{e:#}"))
}

fn partitions_arg(text: &str) -> Result<cardinal_server::source::kafka::Assignment, String> {
    cardinal_server::source::kafka::Assignment::partitions(text).map_err(|e| format!("{e:#}"))
}

fn connections_arg(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (1..=CONNECTIONS_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!("1 to {CONNECTIONS_MAX}"))
    }
}

fn pg_connections_arg(text: &str) -> Result<usize, String> {
    let max = cardinal_server::net::pg::PG_CONNECTIONS_MAX;
    let n: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (1..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("1 to {max}"))
    }
}

fn http_connections_arg(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (1..=HTTP_CONNECTIONS_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!("1 to {HTTP_CONNECTIONS_MAX}"))
    }
}

fn body_arg(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if (1..=BODY_BYTES_MAX).contains(&n) {
        Ok(n)
    } else {
        Err(format!("1 to {BODY_BYTES_MAX} bytes"))
    }
}

/// The shortest token `serve` takes without a warning: 16 bytes of
/// random text carry at least 96 bits (base64) to 128 bits (raw), more
/// than an online guesser can try; OWASP asks 64 bits of entropy of a
/// session id.
pub const TOKEN_BYTES_WARN_MIN: usize = 16;

/// Reads a token file: its first line, trimmed.
pub fn read_token(path: &std::path::Path) -> Result<Token> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    ensure!(
        !token.is_empty(),
        "the token file {} is empty",
        path.display()
    );
    Token::new(token.as_bytes()).with_context(|| format!("the token in {}", path.display()))
}

/// What is weak about a server's token file, one warning a line: a token
/// shorter than [`TOKEN_BYTES_WARN_MIN`], a file other users can read or
/// write (ssh refuses such key files; a server warns, so an existing
/// deployment still starts).
pub fn token_warnings(path: &std::path::Path, token: &Token) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut warnings = Vec::new();
    let length = token.as_bytes().len();
    if length < TOKEN_BYTES_WARN_MIN {
        warnings.push(format!(
            "the token in {} is {length} bytes: use at least {TOKEN_BYTES_WARN_MIN} random \
             bytes (for example `openssl rand -hex 16`)",
            path.display()
        ));
    }
    if let Ok(metadata) = std::fs::metadata(path) {
        let mode = metadata.permissions().mode();
        if mode & 0o077 != 0 {
            warnings.push(format!(
                "the token file {} is readable or writable by other users (mode {:o}): \
                 chmod 600 {}",
                path.display(),
                mode & 0o777,
                path.display()
            ));
        }
    }
    warnings
}

/// Runs `cardinal serve`.
pub fn serve(args: &ServeArgs) -> Result<()> {
    let sql = std::fs::read_to_string(&args.schema)
        .with_context(|| format!("reading {}", args.schema.display()))?;
    let plan = Plan::compile(&sql).with_context(|| format!("in {}", args.schema.display()))?;
    let threads = args
        .threads
        .unwrap_or_else(cardinal_engine::threads_default);
    let memory_max = args
        .memory_max
        .unwrap_or_else(crate::memory::memory_max_default);
    let mut service = ServiceOptions::new(threads, memory_max);
    service.repair = args.repair;
    let day_ms = crate::run::DAY_MS;
    service.limits = cardinal_rollup::Limits {
        groups_max: args.groups_max,
        retention_ms: args.retention_days.map(|d| i64::from(d) * day_ms),
        future_ms: args
            .future_tolerance
            .or(args
                .retention_days
                .map(|d| d.max(crate::run::FUTURE_TOLERANCE_DAYS_MIN)))
            .map(|d| i64::from(d) * day_ms),
    };
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    if let (Some(path), Some(token)) = (&args.token_file, &token) {
        for warning in token_warnings(path, token) {
            eprintln!("cardinal serve: warning: {warning}");
        }
    }
    let kafka = args
        .kafka
        .as_ref()
        .map(|brokers| cardinal_server::source::kafka::KafkaConfig {
            brokers: brokers.clone(),
            topics: args.kafka_topic.clone(),
            assignment: args
                .node
                .clone()
                .or_else(|| args.partitions.clone())
                .unwrap_or(cardinal_server::source::kafka::Assignment::Node { index: 0, count: 1 }),
            group: args.kafka_group.clone(),
            start_wait: Duration::from_secs(args.kafka_wait_secs),
        });
    let listen = match (args.listen, &kafka) {
        (Some(listen), _) => Some(listen),
        (None, Some(_)) => None,
        (None, None) => Some(LISTEN_DEFAULT.parse().expect("a valid address")),
    };
    cardinal_server::net::serve(ServeConfig {
        plan: Arc::new(plan),
        data: args.data.clone(),
        listen,
        kafka,
        http: args.http,
        pg: args.pg,
        pg_connections_max: args.pg_connections,
        token,
        service,
        limits: Limits::default_limits(),
        connections_max: args.connections,
        http_connections_max: args.http_connections,
        idle: Duration::from_secs(args.idle),
        body_bytes_max: args.body_max,
        snapshot_every: Duration::from_secs(args.snapshot_every),
        snapshot_log_bytes: SNAPSHOT_LOG_BYTES_DEFAULT,
        out: args.out.clone().map(|out| {
            let config = cardinal_server::days::DayFilesConfig {
                lateness_ms: args.out_lateness.saturating_mul(1000),
                options: cardinal_export::Options {
                    hll_hex: args.hll_hex,
                    sketch_bytes: args
                        .sketch_bytes
                        .as_deref()
                        .map(crate::run::sketch_encoding),
                },
            };
            (out, config)
        }),
        peers: args.peers.clone(),
        peer_timeout: Duration::from_secs_f64(args.peer_timeout),
        syslog: args.relp.iter().chain(&args.syslog).cloned().collect(),
        syslog_id: args.syslog_id.clone(),
        allow_remote: args.allow_remote,
    })
}

fn relp_arg(text: &str) -> Result<cardinal_server::net::syslog::Listen, String> {
    cardinal_server::net::syslog::Listen::parse(cardinal_server::net::syslog::Protocol::Relp, text)
}

fn syslog_arg(text: &str) -> Result<cardinal_server::net::syslog::Listen, String> {
    cardinal_server::net::syslog::Listen::parse(cardinal_server::net::syslog::Protocol::Tcp, text)
}

/// Ask a running server: a SQL query, or one summary by flags.
#[derive(Debug, Parser)]
#[command(after_help = "Examples:
  cardinal query \"SELECT state, users, users_lower, users_upper FROM reach GROUP BY state ORDER BY users DESC LIMIT 10\"
  cardinal query \"SELECT date_trunc('week', day) AS week, events FROM reach GROUP BY 1\" --format csv
  cardinal query reach --server http://127.0.0.1:7480 --by state --all-buckets --from 2026-11-01 --to 2026-11-08
  cardinal query reach --server http://10.0.0.1:7480 --token-file token --partial

A first argument that holds a space is SQL (docs/sql.md), answered by POST
/v1/sql; the flags below select a summary's groups otherwise. Times are RFC
3339 instants or dates (UTC), or epoch seconds or milliseconds (below 10^11
is seconds); --to is exclusive. --where is a condition over the summary's
dimensions in the schema's dialect.")]
pub struct QueryArgs {
    /// A SQL query (SELECT ... FROM summary ...), or the summary's name.
    #[arg(value_name = "SQL|SUMMARY")]
    pub summary: String,
    /// The server's HTTP address (http://host:port).
    #[arg(long, default_value = "http://127.0.0.1:7480")]
    pub server: String,
    /// Keep buckets starting at or after this time.
    #[arg(long)]
    pub from: Option<String>,
    /// Keep buckets starting before this time.
    #[arg(long)]
    pub to: Option<String>,
    /// A condition over the summary's dimensions.
    #[arg(long = "where")]
    pub where_: Option<String>,
    /// Dimensions to roll up to, comma-separated.
    #[arg(long)]
    pub by: Option<String>,
    /// Merge the range's buckets into one row per group.
    #[arg(long)]
    pub all_buckets: bool,
    /// table, csv or json (JSON lines, as `run --json` writes them).
    #[arg(long, default_value = "table", value_parser = ["table", "csv", "json"])]
    pub format: String,
    /// A file holding the server's token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Fail when the whole request (connecting, the answer) takes longer
    /// than this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = QUERY_TIMEOUT_DEFAULT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Of a cluster (a server with --peers): answer from the nodes that
    /// answered when some did not, saying on stderr which nodes and
    /// partitions the answer lacks (without it such a query fails).
    #[arg(long)]
    pub partial: bool,
}

/// Percent-encodes a query-string value.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs `cardinal query`.
pub fn query(args: &QueryArgs) -> Result<()> {
    if args.summary.trim().contains(char::is_whitespace) {
        return query_sql(args);
    }
    let mut params = vec![format!("format={}", args.format)];
    for (name, value) in [
        ("from", &args.from),
        ("to", &args.to),
        ("where", &args.where_),
        ("by", &args.by),
    ] {
        if let Some(value) = value {
            params.push(format!("{name}={}", encode(value)));
        }
    }
    if args.all_buckets {
        params.push("buckets=all".into());
    }
    if args.partial {
        params.push("partial=true".into());
    }
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    let path = format!(
        "/v1/summaries/{}?{}",
        encode(&args.summary),
        params.join("&")
    );
    let timeout = Duration::from_secs(args.timeout);
    let (status, body, lacks) = get_with(&args.server, &path, token.as_ref(), timeout)?;
    if status != 200 {
        bail!(
            "the server answered {status}: {}",
            String::from_utf8_lossy(&body).trim_end()
        );
    }
    for line in lacks {
        eprintln!("cardinal query: partial answer: {line}");
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&body)?;
    out.flush()?;
    Ok(())
}

/// `cardinal query "SELECT ..."`: the query to `POST /v1/sql`.
fn query_sql(args: &QueryArgs) -> Result<()> {
    let flags = [
        ("--from", args.from.is_some()),
        ("--to", args.to.is_some()),
        ("--where", args.where_.is_some()),
        ("--by", args.by.is_some()),
        ("--all-buckets", args.all_buckets),
    ];
    if let Some((flag, _)) = flags.iter().find(|(_, given)| *given) {
        bail!(
            "{flag} selects a summary's groups by flags; with SQL, say it in the query (WHERE, GROUP BY)"
        );
    }
    let format = match args.format.as_str() {
        "json" => "jsonl",
        other => other,
    };
    let mut path = format!("/v1/sql?format={format}");
    if args.partial {
        path.push_str("&partial=true");
    }
    let token = args.token_file.as_deref().map(read_token).transpose()?;
    let timeout = Duration::from_secs(args.timeout);
    let (status, body, lacks) = request(
        &args.server,
        &path,
        Some(args.summary.as_bytes()),
        token.as_ref(),
        timeout,
    )?;
    if status != 200 {
        let text = String::from_utf8_lossy(&body);
        // `{"error": "..."}`: the message with its caret lines.
        let why = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| text.trim_end().to_owned());
        bail!("the server answered {status}: {why}");
    }
    for line in lacks {
        eprintln!("cardinal query: partial answer: {line}");
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&body)?;
    out.flush()?;
    Ok(())
}

/// The longest answer `cardinal query` reads: 1 GiB, far above any
/// summary's answer (a summary holds at most `--groups-max` groups).
const ANSWER_BYTES_MAX: u64 = 1 << 30;

/// How long `cardinal query` waits for a connection: 5 s (a refused one
/// fails at once; this bounds a dropped SYN), or its whole `--timeout` if
/// that is shorter.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// `cardinal query --timeout` unless given: 60 s for the whole request,
/// answer included. A live answer over the largest summaries here takes
/// well under a second (2026-11, 2-core VM); a minute of silence is a
/// stuck server.
pub const QUERY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// A blocking HTTP GET of `path` at `server` (`http://host:port`): status
/// and body, within `timeout` for everything (connecting within
/// [`CONNECT_TIMEOUT`]). `ureq` does what HTTP clients do (chunked
/// bodies, URL parsing, keep-alive); a status other than 2xx is returned,
/// not an error.
pub fn get(
    server: &str,
    path: &str,
    token: Option<&Token>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>)> {
    get_with(server, path, token, timeout).map(|(status, body, _)| (status, body))
}

/// [`get`], and what a cluster's partial answer says it lacks (one line
/// per `Cardinal-Missing-Node` and `Cardinal-Missing-Partitions` header).
fn get_with(
    server: &str,
    path: &str,
    token: Option<&Token>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>, Vec<String>)> {
    request(server, path, None, token, timeout)
}

/// A GET of `path`, or a POST of `body` to it: [`get_with`].
fn request(
    server: &str,
    path: &str,
    body: Option<&[u8]>,
    token: Option<&Token>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>, Vec<String>)> {
    ensure!(
        server.starts_with("http://"),
        "--server {server}: http://host:port (HTTPS: put a TLS terminator's plain side here)"
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let url = format!("{}{path}", server.trim_end_matches('/'));
    let authorization =
        token.map(|token| format!("Bearer {}", String::from_utf8_lossy(token.as_bytes())));
    let method = if body.is_some() { "POST" } else { "GET" };
    let words = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) => anyhow::anyhow!(
            "no answer from {server} within {} s (--timeout)",
            timeout.as_secs_f64()
        ),
        other => anyhow::anyhow!("{method} {url}: {other}"),
    };
    let mut response = match body {
        None => {
            let mut request = agent.get(&url);
            if let Some(value) = &authorization {
                request = request.header("Authorization", value);
            }
            request.call()
        }
        Some(body) => {
            let mut request = agent.post(&url).header("Content-Type", "application/sql");
            if let Some(value) = &authorization {
                request = request.header("Authorization", value);
            }
            request.send(body)
        }
    }
    .map_err(words)?;
    let status = response.status().as_u16();
    let mut lacks: Vec<String> = response
        .headers()
        .get_all("cardinal-missing-node")
        .iter()
        .map(|v| format!("no state from {}", String::from_utf8_lossy(v.as_bytes())))
        .collect();
    if let Some(missing) = response.headers().get("cardinal-missing-partitions") {
        lacks.push(format!(
            "no node covers partitions {}",
            String::from_utf8_lossy(missing.as_bytes())
        ));
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_to_vec()
        .map_err(words)?;
    Ok((status, body, lacks))
}
