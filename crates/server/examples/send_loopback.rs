//! What `send` costs on its own: a file of CSV records sent over loopback
//! to a server thread that only decodes, deduplicates and acknowledges
//! (no parsing, no log, no fsync), so the rate is the client's and the
//! codec's ceiling, not a server's.
//!
//! ```text
//! cargo run --release -p cardinal-server --example send_loopback -- [RECORDS] [BATCH_KIB] [WINDOW]
//! ```
//!
//! Measured 2026-11-27 on the 2-core VM with other builds running (load
//! average about 5; `dev` profile, dependencies at opt-level 2), 2M
//! records of about 45 bytes (89 MB), client and server on the two cores:
//!
//! | batch | window | time | records/s | MB/s |
//! |---|---|---|---|---|
//! | 256 KiB | 8 | 0.45 s | 4.49 M | 200 |
//! | 1 MiB | 8 | 0.46 s | 4.31 M | 192 |
//!
//! With no fsync to wait for the window does not matter here; against a
//! real server it covers the group commit (`docs/protocol.md`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

use cardinal_server::send::{SendOptions, send};
use cardinal_server::{
    Ack, Action, ClientId, Connection, Decoder, DedupTable, Format, Frame, ServerConfig,
    StreamName, Verdict, encode,
};

fn serve(mut socket: TcpStream) {
    let mut conn = Connection::new(&ServerConfig::default());
    let mut dedup = DedupTable::new();
    let decoder = Decoder::default();
    let (mut buf, mut out, mut read) = (Vec::new(), Vec::new(), vec![0u8; 1 << 20]);
    loop {
        match socket.read(&mut read) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&read[..n]),
        }
        let mut used_total = 0;
        out.clear();
        while let Some((frame, used)) = decoder.decode(&buf[used_total..]).expect("decodes") {
            used_total += used;
            let reply = match conn.receive(frame, |client| Ok(dedup.highest(client))) {
                Action::Send(frame) | Action::Close(frame) => frame,
                Action::Offer(batch) => {
                    let client = conn.client().expect("after the hello");
                    let verdict = dedup.admit(client, batch.id, 0).expect("room");
                    let duplicate = verdict == Verdict::Duplicate;
                    Frame::Ack(Ack {
                        id: batch.id,
                        accepted: if duplicate {
                            0
                        } else {
                            batch.payload.iter().filter(|&&b| b == b'\n').count() as u64
                        },
                        rejected: 0,
                        duplicate,
                    })
                }
                Action::Nothing => continue,
            };
            encode(&reply, &mut out);
        }
        buf.drain(..used_total);
        if socket.write_all(&out).is_err() {
            return;
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let records: usize = args
        .next()
        .map_or(2_000_000, |a| a.parse().expect("RECORDS"));
    let batch_kib: usize = args.next().map_or(256, |a| a.parse().expect("BATCH_KIB"));
    let window: u32 = args.next().map_or(8, |a| a.parse().expect("WINDOW"));

    let path = std::env::temp_dir().join(format!("send-loopback-{}.csv", std::process::id()));
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        writeln!(file, "ts,user,site,state,price").expect("write");
        for i in 0..records {
            writeln!(
                file,
                "2026-11-27T{:02}:{:02}:00Z,{},site{},CA,{}.{:02}",
                i / 60 % 24,
                i % 60,
                i * 7919 % 1_000_003,
                i % 1000,
                i % 50,
                i % 100
            )
            .expect("write");
        }
    }
    let bytes = std::fs::metadata(&path).expect("stat").len();

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            serve(socket.expect("accept"));
        }
    });
    let options = SendOptions {
        batch_bytes: batch_kib << 10,
        window,
        ..SendOptions::new(
            &addr.to_string(),
            ClientId::new("loopback").expect("valid"),
            StreamName::new("events").expect("valid"),
            Format::Csv,
        )
    };
    let started = Instant::now();
    let summary = send(&[PathBuf::from(&path)], &options, |_| {}).expect("sent");
    let secs = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    assert!(summary.all_acked());
    assert_eq!(summary.accepted, records as u64);
    println!(
        "{records} records, {:.1} MB, batches of {batch_kib} KiB, window {window}: {:.2} s, \
         {:.2} M records/s, {:.0} MB/s, {} batches",
        bytes as f64 / 1e6,
        secs,
        records as f64 / secs / 1e6,
        bytes as f64 / secs / 1e6,
        summary.batches
    );
}
