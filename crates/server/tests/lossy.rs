//! The client's state machine against the server's real admission path
//! in a lossy world, over real bytes: the server side is the crate's
//! [`Connection`] handing every batch to [`Connection::offer`], that is
//! to [`Service::ingest`] over a simulated disk ([`SimDir`]): the same
//! path the TCP task takes, with the same deduplication table (issue 43,
//! item 18: this test used to drive a table of its own, which production
//! did not use). Around it: connections dropped at random points (with
//! frames half sent either way), power cuts (the directory as a crash
//! leaves it, the service opened again from it: snapshot, then log),
//! servers stopping, acknowledgements sent in any order within a group
//! commit, snapshots, batches to an unknown stream, and reads in pieces
//! of any size. For every seed, when the client is done:
//!
//! - every batch to a real stream is in the client's ledger once, and
//!   every batch to the unknown stream failed once;
//! - no batch was acknowledged twice, and every acknowledged batch is
//!   a duplicate to the service now (its resend is acked as one);
//! - the service's state equals `execute` over the records of every
//!   batch once: none lost, none counted twice;
//! - each new batch's acknowledgement carries its log sequence, which
//!   the service predicted when it appended the record and checked
//!   against what the log returned (an assertion in the service's
//!   completer); across one service's life they only increase.
//!
//! The world is a function of its seed (a xorshift), so a failure
//! reproduces with it (up to thread timing inside the service).
//!
//! No time passes in this world, so the client is told it was silent for
//! no time at each reconnect: a server that does not know it then lost
//! its batches in a power cut rather than forgot them, and they are
//! resent (`Error::ServerUnknown`, for a silence past the server's
//! horizon, is tested in `client.rs` and `send.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cardinal_engine::{EngineOptions, execute};
use cardinal_rollup::{AggState, Rollup};
use cardinal_route::Plan;
use cardinal_server::connection::Offered;
use cardinal_server::service::{Acked, Origin, Reply, Service, ServiceOptions};
use cardinal_server::{
    Ack, Action, BatchId, Client, ClientConfig, ClientId, Connection, Decoder, ErrorCode, Format,
    Limits, Outgoing, Received, ServerConfig, StreamName, encode,
};
use cardinal_store::{Dir, SimDir};

const SQL: &str = "
    CREATE STREAM events (ts TIMESTAMP, b BIGINT, n BIGINT)
      WITH (format = 'csv', header = true, time = 'ts');
    CREATE SUMMARY per_batch AS SELECT date_trunc('day', ts) AS day, b,
        count(*) AS records, sum(n) AS total
      FROM events GROUP BY day, b;";

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn open(plan: &Arc<Plan>, dir: &SimDir) -> Service {
    let mut options = ServiceOptions::new(1, 64 << 20);
    options.segment_bytes = 16 << 10;
    let dir: Arc<dyn Dir> = Arc::new(dir.clone());
    Service::open(Arc::clone(plan), dir, &options).expect("the service opens")
}

fn wait(reply: Reply) -> Acked {
    reply
        .blocking_recv()
        .expect("the service answers")
        .expect("the service does not fail here")
}

/// A group's states in a comparable form.
fn canonical(rollup: &Rollup) -> Vec<String> {
    let kinds = &rollup.shape().aggs;
    let mut rows: Vec<String> = rollup
        .groups()
        .map(|(bucket, key, states)| {
            let states: Vec<String> = states
                .iter()
                .zip(kinds)
                .map(|(state, kind)| match state {
                    AggState::Hll(hll) => hll.to_hex(),
                    _ => format!("{:?}", state.output(kind)),
                })
                .collect();
            format!("{bucket:?} {key:?} {}", states.join(" "))
        })
        .collect();
    rows.sort();
    rows
}

/// `execute` over `records` as one file.
fn executed(plan: &Plan, records: &[u8]) -> Vec<Vec<String>> {
    static FILES: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "cardinal-lossy-{}-{}.csv",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
    let mut bytes = b"ts,b,n\n".to_vec();
    bytes.extend_from_slice(records);
    std::fs::write(&path, bytes).expect("temp file");
    let mut options = EngineOptions::new(1, 1 << 30);
    options.stream = Some("events".to_owned());
    let executed = execute(plan, std::slice::from_ref(&path), &options).expect("execute");
    std::fs::remove_file(&path).expect("remove temp file");
    executed.rollups.iter().map(canonical).collect()
}

/// An acknowledgement waiting for the service's reply.
struct Waiting {
    id: BatchId,
    reply: Reply,
}

struct Outcome {
    batches: usize,
    duplicates: u64,
    reconnects: u64,
    crashes: u64,
}

/// Offers `batch` until the service takes or refuses it (full queues
/// drain on their own: the engine folds while the test waits).
fn offer(connection: &mut Connection, service: &Service, batch: cardinal_server::Batch) -> Offered {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut batch = batch;
    loop {
        match connection.offer(service, batch) {
            Offered::Full(again) => {
                assert!(Instant::now() < deadline, "queues stayed full");
                std::thread::sleep(Duration::from_millis(1));
                batch = again;
            }
            offered => return offered,
        }
    }
}

fn run(plan: &Arc<Plan>, seed: u64, batches: usize) -> Outcome {
    let mut rng = Rng(seed | 1);
    let client_id = ClientId::new("loader-1").expect("valid");
    let events = StreamName::new("events").expect("valid");
    let nope = StreamName::new("nope").expect("valid");
    let mut config = ClientConfig::new(client_id.clone());
    config.in_flight_batches_max = 1 + u32::try_from(rng.below(12)).expect("small");
    config.held_batches_max = 1 + usize::try_from(rng.below(40)).expect("small");
    let mut client = Client::new(config);
    let server_config = ServerConfig {
        limits: Limits {
            in_flight_batches_max: 1 + u32::try_from(rng.below(8)).expect("small"),
            ..Limits::default_limits()
        },
        ..ServerConfig::default()
    };
    let mut dir = SimDir::new();
    let mut service = open(plan, &dir);
    let decoder = Decoder::default();

    // What was pushed: the records of each batch to the real stream.
    let mut sent_records: Vec<u8> = Vec::new();
    let mut pushed = 0;
    let mut to_unknown = 0u64;
    let mut conn: Option<Connection> = None;
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut to_server: Vec<u8> = Vec::new();
    let mut to_client: Vec<u8> = Vec::new();
    let mut server_buf = BytesMut::new();
    let mut client_buf = BytesMut::new();
    let mut closing = false;
    let (mut reconnects, mut crashes) = (0, 0);
    let mut acked_by_id: BTreeMap<u64, u32> = BTreeMap::new();
    // The last log sequence acknowledged in this service's life.
    let mut last_sequence = 0u64;

    let mut steps = 0u64;
    while pushed < batches || !client.is_done() {
        steps += 1;
        assert!(steps < 2_000_000, "seed {seed}: no progress");
        while pushed < batches && client.can_push() {
            let unknown = rng.chance(20);
            let lines = 1 + rng.below(4);
            let payload: Vec<u8> = (0..lines)
                .flat_map(|n| {
                    let day = 1 + pushed % 9;
                    format!("2026-11-0{day}T10:00:00Z,{pushed},{n}\n").into_bytes()
                })
                .collect();
            if unknown {
                to_unknown += 1;
            } else {
                sent_records.extend_from_slice(&payload);
            }
            client
                .push(Outgoing {
                    stream: if unknown {
                        nope.clone()
                    } else {
                        events.clone()
                    },
                    format: Format::Csv,
                    header: false,
                    payload: Bytes::from(payload),
                })
                .expect("room");
            pushed += 1;
        }
        if conn.is_none() {
            conn = Some(Connection::new(&server_config));
            client.silent_for(Duration::ZERO);
            encode(&client.connected(), &mut to_server);
        }
        let connection = conn.as_mut().expect("connected");
        while let Some(frame) = client.poll_send() {
            encode(&frame, &mut to_server);
        }
        let mut drop_connection = false;
        match rng.below(100) {
            // Bytes to the server, in a piece of any size, while it reads.
            0..=34 if !to_server.is_empty() && connection.wants_read() && !closing => {
                let n = 1 + usize::try_from(rng.below(300)).expect("small");
                let n = n.min(to_server.len());
                server_buf.extend_from_slice(&to_server[..n]);
                to_server.drain(..n);
                while !closing && connection.wants_read() {
                    let frame = match decoder.decode_buf(&mut server_buf) {
                        Ok(Some(frame)) => frame,
                        Ok(None) => break,
                        Err(error) => panic!("seed {seed}: the server read bad bytes: {error}"),
                    };
                    let hello = |client: &ClientId| {
                        service
                            .hello(client)
                            .map_err(|refused| (refused.code(), refused.to_string()))
                    };
                    match connection.receive(frame, hello) {
                        Action::Send(frame) => encode(&frame, &mut to_client),
                        Action::Close(frame) => {
                            encode(&frame, &mut to_client);
                            closing = true;
                        }
                        Action::Offer(batch) => {
                            let id = batch.id;
                            match offer(connection, &service, batch) {
                                Offered::Taken(reply) => waiting.push(Waiting { id, reply }),
                                Offered::Send(frame) => encode(&frame, &mut to_client),
                                Offered::Close(frame) => {
                                    encode(&frame, &mut to_client);
                                    closing = true;
                                }
                                Offered::Full(_) => unreachable!("offer waits out full queues"),
                            }
                        }
                        Action::Nothing => {}
                    }
                }
            }
            // Bytes to the client, in a piece of any size.
            35..=69 if !to_client.is_empty() => {
                let n = 1 + usize::try_from(rng.below(120)).expect("small");
                let n = n.min(to_client.len());
                client_buf.extend_from_slice(&to_client[..n]);
                to_client.drain(..n);
                while let Some(frame) = decoder.decode_buf(&mut client_buf).expect("valid") {
                    match client.receive(frame) {
                        Ok(Received::Acked(ack)) => {
                            *acked_by_id.entry(ack.id.0).or_default() += 1;
                        }
                        Ok(Received::Reconnect { code, .. }) => {
                            assert_eq!(code, ErrorCode::ServerStopping);
                            drop_connection = true;
                            break;
                        }
                        Ok(Received::Failed(failure)) => {
                            assert_eq!(failure.code, ErrorCode::UnknownStream);
                        }
                        Ok(_) => {}
                        Err(error) => panic!("seed {seed}: the client stopped: {error}"),
                    }
                }
                if closing && to_client.is_empty() {
                    drop_connection = true;
                }
            }
            // A group commit: every reply waited for, the acks sent in any
            // order; sometimes a snapshot after it.
            70..=84 => {
                for i in (1..waiting.len()).rev() {
                    let j = usize::try_from(rng.below(i as u64 + 1)).expect("small");
                    waiting.swap(i, j);
                }
                let mut acks = Vec::new();
                for w in waiting.drain(..) {
                    let acked = wait(w.reply);
                    if !acked.duplicate {
                        assert!(acked.sequence > 0, "seed {seed}: a new batch's sequence");
                        acks.push(acked.sequence);
                    }
                    let ack = Ack {
                        id: w.id,
                        accepted: acked.accepted,
                        rejected: acked.rejected,
                        duplicate: acked.duplicate,
                    };
                    encode(&connection.durable(ack), &mut to_client);
                }
                acks.sort_unstable();
                for sequence in acks {
                    assert!(sequence > last_sequence, "seed {seed}: sequences increase");
                    last_sequence = sequence;
                }
                if rng.chance(4) {
                    service.snapshot().expect("a snapshot");
                }
            }
            // The connection drops; its pending replies are dropped too
            // (the service still makes those batches durable).
            85..=88 => drop_connection = true,
            // A power cut: the directory as the cut leaves it; the
            // service opened again from it.
            89 if rng.chance(2) => {
                let image = dir.crash(rng.next());
                waiting.clear();
                service.close().expect("the old service closes");
                dir = image;
                service = open(plan, &dir);
                last_sequence = 0;
                crashes += 1;
                drop_connection = true;
            }
            // The server stops (and later starts again, having lost
            // nothing: a clean stop answers what it took first).
            90 if rng.chance(3) && !closing => {
                for w in waiting.drain(..) {
                    let acked = wait(w.reply);
                    let ack = Ack {
                        id: w.id,
                        accepted: acked.accepted,
                        rejected: acked.rejected,
                        duplicate: acked.duplicate,
                    };
                    encode(&connection.durable(ack), &mut to_client);
                }
                if let Action::Close(frame) =
                    connection.stop(ErrorCode::ServerStopping, "shutting down")
                {
                    encode(&frame, &mut to_client);
                }
                closing = true;
            }
            _ => {}
        }
        if drop_connection {
            reconnects += 1;
            conn = None;
            waiting.clear();
            closing = false;
            to_server.clear();
            to_client.clear();
            server_buf.clear();
            client_buf.clear();
            client.disconnected();
        }
    }

    let ledger = client.ledger();
    let good = batches as u64 - to_unknown;
    assert_eq!(ledger.batches_acked(), good, "seed {seed}");
    assert_eq!(ledger.failed(), to_unknown, "seed {seed}");
    assert!(
        acked_by_id.values().all(|&n| n == 1),
        "seed {seed}: acked twice"
    );
    assert_eq!(acked_by_id.len() as u64, good, "seed {seed}");
    // Every acknowledged batch is a duplicate to the service now.
    for &id in acked_by_id.keys() {
        let origin = Origin::Client(client_id.clone(), BatchId(id));
        let reply = service
            .ingest(
                origin,
                "events",
                Format::Csv,
                false,
                b"2026-11-01T10:00:00Z,0,0\n",
            )
            .expect("taken");
        assert!(wait(reply).duplicate, "seed {seed}: batch {id} is known");
    }
    // Counted once: the served state is `execute` over every record once.
    let view = service.view(0).expect("a view");
    let served: Vec<Vec<String>> = view.rollups().iter().map(canonical).collect();
    drop(view);
    assert_eq!(
        served,
        executed(plan, &sent_records),
        "seed {seed}: records counted once"
    );
    service.close().expect("closes");
    Outcome {
        batches,
        duplicates: ledger.duplicates(),
        reconnects,
        crashes,
    }
}

#[test]
fn every_batch_is_acked_once_and_counted_once() {
    let plan = Arc::new(Plan::compile(SQL).expect("compiles"));
    let (mut duplicates, mut reconnects, mut crashes, mut batches) = (0, 0, 0, 0);
    for seed in 1..=40u64 {
        let outcome = run(&plan, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 300);
        duplicates += outcome.duplicates;
        reconnects += outcome.reconnects;
        crashes += outcome.crashes;
        batches += outcome.batches;
    }
    // The paths the promise rests on were taken, many times over.
    assert!(duplicates > 20, "{duplicates} duplicate acks");
    assert!(reconnects > 200, "{reconnects} reconnects");
    assert!(crashes > 20, "{crashes} crashes");
    assert_eq!(batches, 40 * 300);
    println!(
        "{batches} batches, {reconnects} reconnects, {crashes} crashes, {duplicates} duplicate acks"
    );
}
