//! What the frame codec costs per byte: batch frames of `PAYLOAD` bytes
//! (default 1 MiB, the largest batch `cardinal send` makes; try 4096 for
//! small batches) encoded, then decoded from a slice (the payload copied)
//! and from a `BytesMut` (the payload split off, no copy), against the
//! CRC-32 alone over the same bytes. 256 MiB of frames; the fastest of
//! `RUNS` (5) runs is printed.
//!
//! ```text
//! cargo run --release -p cardinal-server --example frame_speed -- [PAYLOAD]
//! ```
//!
//! Measured 2026-11-27 on the 2-core Xeon VM, `release` profile, with
//! other builds running (load average 11, so treat them as floors):
//!
//! | payload | encode | decode, slice | decode, `BytesMut` | crc32 alone |
//! |---|---|---|---|---|
//! | 1 MiB | 1.58 GB/s | 2.66 GB/s | 3.48 GB/s | 4.57 GB/s |
//! | 4 KiB | 1.58 GB/s | 2.84 GB/s | 3.33 GB/s | 5.80 GB/s |
//!
//! The checksum is most of a decode, and a decode is a small part of what
//! the server does with the same bytes next: at the issue's target of 2 M
//! events/s of about 100 bytes (200 MB/s) decoding costs about 6% of one
//! core, where parsing them costs most of one (bench/README.md). Encoding
//! copies the payload into the frame: a client sending 1 MiB batches
//! spends about 0.6 ms of CPU per batch on it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cardinal_server::{BatchId, Decoder, Format, Frame, StreamName, encode};

const TOTAL_BYTES: usize = 256 << 20;
const RUNS: usize = 5;

fn fastest(mut f: impl FnMut()) -> Duration {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .expect("RUNS > 0")
}

fn main() {
    let payload_bytes: usize = std::env::args()
        .nth(1)
        .map_or(1 << 20, |s| s.parse().expect("PAYLOAD is a byte count"));
    let frames = (TOTAL_BYTES / payload_bytes).max(1);
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    let payload: Vec<u8> = (0..payload_bytes)
        .map(|i| if i % 80 == 79 { b'\n' } else { letters[i % 26] })
        .collect();
    let batch = |id: u64| {
        Frame::Batch(cardinal_server::Batch {
            id: BatchId(id),
            stream: StreamName::new("impressions").expect("valid"),
            format: Format::Csv,
            header: false,
            payload: Bytes::from(payload.clone()),
        })
    };
    let batches: Vec<Frame> = (0..frames as u64).map(batch).collect();
    let mut wire = Vec::with_capacity(frames * (payload_bytes + 64));
    let encode_time = fastest(|| {
        wire.clear();
        for frame in &batches {
            encode(frame, &mut wire);
        }
    });
    let bytes = wire.len() as f64;
    let decoder = Decoder::default();
    let slice_time = fastest(|| {
        let mut at = 0;
        while let Some((frame, used)) = decoder.decode(&wire[at..]).expect("valid") {
            black_box(frame);
            at += used;
        }
        assert_eq!(at, wire.len());
    });
    let mut buf = BytesMut::with_capacity(wire.len());
    let buf_time = fastest(|| {
        buf.clear();
        buf.extend_from_slice(&wire);
        let mut n = 0;
        while let Some(frame) = decoder.decode_buf(&mut buf).expect("valid") {
            black_box(frame);
            n += 1;
        }
        assert_eq!(n, frames);
    });
    let copy_time = fastest(|| {
        buf.clear();
        buf.extend_from_slice(black_box(&wire));
    });
    let crc_time = fastest(|| {
        black_box(crc32fast::hash(black_box(&wire)));
    });
    let rate = |t: Duration| bytes / t.as_secs_f64() / 1e9;
    println!(
        "{frames} frames of {payload_bytes} B payload, {:.0} MiB",
        bytes / f64::from(1 << 20)
    );
    println!(
        "encode                         {:6.2} GB/s",
        rate(encode_time)
    );
    println!(
        "decode from a slice (copies)   {:6.2} GB/s",
        rate(slice_time)
    );
    println!(
        "decode from a BytesMut         {:6.2} GB/s (after filling it: {:.2} GB/s of memcpy)",
        rate(buf_time.saturating_sub(copy_time)),
        rate(copy_time)
    );
    println!("crc32 alone                    {:6.2} GB/s", rate(crc_time));
}
