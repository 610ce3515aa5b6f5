//! The client's and the server's state machines against a lossy world,
//! over real bytes: connections dropped at random points (with frames
//! half sent either way), servers crashing (losing every batch not yet
//! durable, recovering the deduplication table from a snapshot image and
//! the log after it), servers stopping, acks sent out of order within a
//! group commit, batches to an unknown stream, and reads in pieces of any
//! size. For every seed, when the client is done:
//!
//! - every batch to a real stream is in the client's ledger once and in
//!   the server's log once (the log is what the engine counts), and the
//!   records the log holds are exactly the records sent;
//! - every batch to the unknown stream failed once and is not in the log;
//! - admissions minus what crashes lost equals the log: the table let
//!   each batch in once;
//! - every acknowledged batch is a duplicate to the table now.
//!
//! The world is a function of its seed (a xorshift), so a failure
//! reproduces with it.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};
use cardinal_server::{
    Ack, Action, BatchId, Client, ClientConfig, ClientId, Connection, Decoder, DedupTable,
    ErrorCode, Format, Frame, Limits, Outgoing, Received, ServerConfig, StreamName, Verdict,
    encode,
};

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

/// A batch in the server's log.
struct Logged {
    id: BatchId,
    records: u64,
    durable: bool,
}

/// An ack waiting for the group commit that covers its batch.
struct Waiting {
    ack: Ack,
    /// The connection it is for: a later connection never gets it.
    epoch: u64,
}

struct Server {
    dedup: DedupTable,
    log: Vec<Logged>,
    waiting: Vec<Waiting>,
    /// The table's image and the log length it covers.
    snapshot: (Vec<u8>, usize),
    admitted: u64,
    lost_in_crashes: u64,
}

impl Server {
    fn commit(&mut self, rng: &mut Rng, epoch: u64, conn: Option<&mut Connection>) -> Vec<Frame> {
        for entry in &mut self.log {
            entry.durable = true;
        }
        // Acks within one commit go out in any order.
        let mut waiting = std::mem::take(&mut self.waiting);
        for i in (1..waiting.len()).rev() {
            let j = usize::try_from(rng.below(i as u64 + 1)).expect("small");
            waiting.swap(i, j);
        }
        let mut frames = Vec::new();
        if let Some(conn) = conn {
            for w in waiting.into_iter().filter(|w| w.epoch == epoch) {
                frames.push(conn.durable(w.ack));
            }
        }
        frames
    }

    /// Everything not durable is gone; the table comes back from the
    /// snapshot and the log after it, as recovery does.
    fn crash(&mut self, client: &ClientId) {
        let before = self.log.len();
        self.log.retain(|entry| entry.durable);
        assert!(self.log.iter().all(|e| e.durable));
        self.lost_in_crashes += (before - self.log.len()) as u64;
        self.waiting.clear();
        let (image, covered) = &self.snapshot;
        assert!(
            *covered <= self.log.len(),
            "snapshots cover durable batches only"
        );
        self.dedup = DedupTable::decode(image).expect("our own snapshot");
        for entry in &self.log[*covered..] {
            assert_eq!(self.dedup.admit(client, entry.id), Verdict::New, "replay");
        }
    }

    fn take_snapshot(&mut self) {
        assert!(self.log.iter().all(|e| e.durable));
        let mut image = Vec::new();
        self.dedup.encode(&mut image);
        self.snapshot = (image, self.log.len());
    }
}

struct Outcome {
    batches: usize,
    duplicates: u64,
    reconnects: u64,
    crashes: u64,
}

fn records_in(payload: &[u8]) -> u64 {
    payload.iter().filter(|&&b| b == b'\n').count() as u64
}

fn run(seed: u64, batches: usize) -> Outcome {
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
    let mut image = Vec::new();
    DedupTable::new().encode(&mut image);
    let mut server = Server {
        dedup: DedupTable::new(),
        log: Vec::new(),
        waiting: Vec::new(),
        snapshot: (image, 0),
        admitted: 0,
        lost_in_crashes: 0,
    };
    let decoder = Decoder::default();

    // What was pushed: records per payload, to the real stream or not.
    let mut sent_records: u64 = 0;
    let mut pushed = 0;
    let mut to_unknown = 0u64;
    // The connection: bytes each way, the server's state, and whether
    // the server closes once its bytes are out.
    let mut conn: Option<Connection> = None;
    let mut epoch = 0u64;
    let mut to_server: Vec<u8> = Vec::new();
    let mut to_client: Vec<u8> = Vec::new();
    let mut server_buf = BytesMut::new();
    let mut client_buf = BytesMut::new();
    let mut closing = false;
    let (mut reconnects, mut crashes) = (0, 0);
    let mut acked_by_id: BTreeMap<u64, u32> = BTreeMap::new();

    let mut steps = 0u64;
    while pushed < batches || !client.is_done() {
        steps += 1;
        assert!(steps < 2_000_000, "seed {seed}: no progress");
        // Push what the client takes.
        while pushed < batches && client.can_push() {
            let unknown = rng.chance(20);
            let lines = 1 + rng.below(4);
            let payload: Vec<u8> = (0..lines)
                .flat_map(|n| format!("{pushed},{n}\n").into_bytes())
                .collect();
            if unknown {
                to_unknown += 1;
            } else {
                sent_records += lines;
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
        // Connect when down.
        if conn.is_none() {
            conn = Some(Connection::new(&server_config));
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
                    let streams = |stream: &StreamName, _: Format| {
                        if stream == &events {
                            Ok(())
                        } else {
                            Err((ErrorCode::UnknownStream, format!("no stream {stream}")))
                        }
                    };
                    match connection.receive(frame, &mut server.dedup, streams) {
                        Action::Send(frame) => encode(&frame, &mut to_client),
                        Action::Close(frame) => {
                            encode(&frame, &mut to_client);
                            closing = true;
                        }
                        Action::Admit(batch) => {
                            server.admitted += 1;
                            server.log.push(Logged {
                                id: batch.id,
                                records: records_in(&batch.payload),
                                durable: false,
                            });
                            server.waiting.push(Waiting {
                                ack: Ack {
                                    id: batch.id,
                                    accepted: records_in(&batch.payload),
                                    rejected: 0,
                                    duplicate: false,
                                },
                                epoch,
                            });
                        }
                        Action::AckWhenDurable(ack) => server.waiting.push(Waiting { ack, epoch }),
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
            // A group commit, and sometimes a snapshot after it.
            70..=84 => {
                for frame in server.commit(&mut rng, epoch, Some(connection)) {
                    encode(&frame, &mut to_client);
                }
                if rng.chance(4) {
                    server.take_snapshot();
                }
            }
            // The connection drops.
            85..=88 => drop_connection = true,
            // The server crashes.
            89 if rng.chance(2) => {
                server.crash(&client_id);
                crashes += 1;
                drop_connection = true;
            }
            // The server stops (and later starts again, having lost
            // nothing: a clean stop commits first).
            90 if rng.chance(3) && !closing => {
                for frame in server.commit(&mut rng, epoch, Some(connection)) {
                    encode(&frame, &mut to_client);
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
            epoch += 1;
            conn = None;
            closing = false;
            to_server.clear();
            to_client.clear();
            server_buf.clear();
            client_buf.clear();
            client.disconnected();
        }
    }

    // Everything the client holds is resolved; what the server holds is
    // made durable (no ack goes anywhere now).
    server.commit(&mut rng, u64::MAX, None);
    let ledger = client.ledger();
    let good = batches as u64 - to_unknown;
    assert_eq!(ledger.batches_acked(), good, "seed {seed}");
    assert_eq!(ledger.failed(), to_unknown, "seed {seed}");
    assert!(
        acked_by_id.values().all(|&n| n == 1),
        "seed {seed}: acked twice"
    );
    let logged: BTreeSet<u64> = server.log.iter().map(|e| e.id.0).collect();
    assert_eq!(
        logged.len(),
        server.log.len(),
        "seed {seed}: a batch logged twice"
    );
    let acked: BTreeSet<u64> = acked_by_id.keys().copied().collect();
    assert_eq!(logged, acked, "seed {seed}: the log is the acked batches");
    for &(start, end) in &ledger
        .acked_ranges()
        .map(|(a, b)| (a.0, b.0))
        .collect::<Vec<_>>()
    {
        for id in start..=end {
            assert!(acked.contains(&id), "seed {seed}: ledger holds {id}");
            assert_eq!(
                server.dedup.check(&client_id, BatchId(id)),
                Verdict::Duplicate
            );
        }
    }
    assert_eq!(
        server.log.iter().map(|e| e.records).sum::<u64>(),
        sent_records,
        "seed {seed}: records counted once"
    );
    assert_eq!(
        server.admitted - server.lost_in_crashes,
        server.log.len() as u64,
        "seed {seed}: each batch admitted once"
    );
    assert!(ledger.accepted() <= sent_records);
    Outcome {
        batches,
        duplicates: ledger.duplicates(),
        reconnects,
        crashes,
    }
}

#[test]
fn every_batch_is_acked_once_and_counted_once() {
    let (mut duplicates, mut reconnects, mut crashes, mut batches) = (0, 0, 0, 0);
    for seed in 1..=40u64 {
        let outcome = run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 300);
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
