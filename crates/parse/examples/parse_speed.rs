//! Parse throughput per core: impressions CSV and NDJSON and AMPLab
//! uservisits made by `cardinal-gen`, plain and compressed, through
//! `cardinal-source` and into reused batches.
//!
//! ```sh
//! cargo run --release -p cardinal-parse --example parse_speed -- [MB] [REPS] [quick]
//! ```
//!
//! Inputs are generated into memory first (about `MB` megabytes of each
//! text; 200 by default) and compressed there, so the disk is not measured.
//! Each row is the best of `REPS` (5) runs, timed by the thread's CPU clock
//! and the wall clock. Rows:
//!
//! - `parse`: the parser alone over chunks cut and loaded beforehand, with
//!   the scanner the CPU's best (`parse`) and, for delimited text, with
//!   each scanner it runs (`parse, Swar scanner`, ...);
//! - `read+parse`: `LineReader` (chunking, the copy into the chunk, line
//!   counting) plus the parser, the path one core of the engine runs;
//! - `serde_json`: NDJSON lines read by `serde_json` into borrowed
//!   `&RawValue` maps walked by path, the alternative to our scanner.
//!
//! `uservisits, columns 0 and 3` projects the table to the two columns
//! AMPLab Query 2A reads (`CsvParser::project`), as `cardinal run` does.

use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use cardinal_event::{Column, ColumnType, Schema};
use cardinal_gen::bdb::{BdbConfig, write_uservisits};
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig};
use cardinal_parse::{Batch, CsvConfig, CsvParser, NdjsonParser, Scanner, amplab};
use cardinal_source::{CHUNK_BYTES_DEFAULT, Chunk, Input, LineReader};
use serde_json::value::RawValue;

fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Best CPU and wall seconds of `reps` runs of `run`, which returns the
/// records it parsed.
fn best(reps: usize, mut run: impl FnMut() -> usize) -> (f64, f64, usize) {
    let (mut cpu_best, mut wall_best, mut records) = (f64::MAX, f64::MAX, 0);
    for _ in 0..reps {
        let (cpu, wall) = (thread_cpu_secs(), Instant::now());
        records = black_box(run());
        cpu_best = cpu_best.min(thread_cpu_secs() - cpu);
        wall_best = wall_best.min(wall.elapsed().as_secs_f64());
    }
    (cpu_best, wall_best, records)
}

fn impressions_schema(paths: bool) -> Schema {
    let columns = [
        ("ts", "ts", ColumnType::Timestamp),
        ("user_id", "user.id", ColumnType::BigInt),
        ("kind", "kind", ColumnType::Text),
        ("state", "user.state", ColumnType::Text),
        ("site", "ad.site", ColumnType::Text),
        ("provider", "ad.provider", ColumnType::Text),
        ("campaign", "ad.campaign", ColumnType::Text),
        ("revenue", "revenue", ColumnType::Double),
    ];
    Schema {
        columns: columns
            .iter()
            .map(|&(name, path, ty)| Column {
                name: name.to_owned(),
                ty,
                path: if paths {
                    path.split('.').map(str::to_owned).collect()
                } else {
                    vec![name.to_owned()]
                },
            })
            .collect(),
    }
}

enum Kind {
    /// A schema, its layout, and the columns kept (all when `None`).
    Csv(Schema, CsvConfig, Option<Vec<usize>>),
    Ndjson(Schema),
}

impl Kind {
    /// Parses one batch; returns its records. `scanner` overrides the CSV
    /// parser's choice.
    fn parse_with(&self, scanner: Option<Scanner>) -> impl FnMut(&mut Batch) -> usize {
        let (mut csv, mut ndjson) = match self {
            Kind::Csv(schema, config, keep) => {
                let mut parser = CsvParser::new(schema, *config).expect("fits");
                if let Some(columns) = keep {
                    parser.project(columns);
                }
                if let Some(scanner) = scanner {
                    parser.set_scanner(scanner);
                }
                (Some(parser), None)
            }
            Kind::Ndjson(schema) => (None, Some(NdjsonParser::new(schema).expect("fits"))),
        };
        move |batch| {
            if let Some(parser) = csv.as_mut() {
                parser.parse(batch).expect("header fits");
            } else if let Some(parser) = ndjson.as_mut() {
                parser.parse(batch);
            }
            assert!(batch.rejects().is_empty());
            batch.len()
        }
    }
}

/// The input cut into chunks the way a `LineReader` cuts it.
fn chunks_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    let input = Input::from_reader("mem", std::io::Cursor::new(bytes.to_vec())).expect("in memory");
    let mut reader = LineReader::new(input);
    let mut chunk = Chunk::default();
    let mut out = Vec::new();
    while reader.read_chunk(&mut chunk).expect("in memory") {
        out.push(chunk.bytes().to_vec());
    }
    out
}

fn compress(codec: &str, plain: &[u8]) -> Vec<u8> {
    match codec {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
            e.write_all(plain).expect("in memory");
            e.finish().expect("in memory")
        }
        "zstd" => zstd::stream::encode_all(plain, 3).expect("in memory"),
        "lz4" => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(plain).expect("in memory");
            e.finish().expect("in memory")
        }
        "snappy" => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(plain).expect("in memory");
            e.into_inner().expect("in memory")
        }
        _ => plain.to_vec(),
    }
}

fn row(
    name: &str,
    how: &str,
    text_bytes: usize,
    input_bytes: usize,
    (cpu, wall, records): (f64, f64, usize),
) {
    println!(
        "| {name} | {how} | {:.0} | {:.0} | {records} | {cpu:.3} | {wall:.3} | {:.2} | {:.1} |",
        text_bytes as f64 / 1e6,
        input_bytes as f64 / 1e6,
        text_bytes as f64 / cpu / 1e9,
        records as f64 / cpu / 1e6,
    );
}

/// NDJSON through serde_json: a borrowed map per object, walked by path.
fn serde_json_records(chunks: &[Vec<u8>], paths: &[Vec<&str>]) -> usize {
    let mut records = 0;
    let mut found = 0usize;
    for chunk in chunks {
        for line in chunk.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let root: HashMap<&str, &RawValue> = serde_json::from_slice(line).expect("valid");
            for path in paths {
                let mut raw = root.get(path[0]).copied();
                for key in &path[1..] {
                    raw = raw.and_then(|r| {
                        let map: HashMap<&str, &RawValue> = serde_json::from_str(r.get()).ok()?;
                        map.get(key).copied()
                    });
                }
                found += usize::from(raw.is_some());
            }
            records += 1;
        }
    }
    black_box(found);
    records
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let megabytes: u64 = args.get(1).map_or(200, |a| a.parse().expect("MB"));
    let reps: usize = args.get(2).map_or(5, |a| a.parse().expect("REPS"));
    // `quick`: only the plain rows, for trying a change to the parsers.
    let quick = args.get(3).is_some_and(|a| a == "quick");

    let generate_impressions = |format, bytes_per_row| {
        let config = ImpressionsConfig {
            events: megabytes * 1_000_000 / bytes_per_row,
            format,
            ..Default::default()
        };
        let mut out = Vec::new();
        Impressions::new(config)
            .expect("valid")
            .write(&mut out)
            .expect("in memory");
        out
    };
    let mut uservisits = Vec::new();
    write_uservisits(
        BdbConfig {
            rows: megabytes * 1_000_000 / 170,
            seed: 1,
        },
        &mut uservisits,
    )
    .expect("in memory");
    let inputs = [
        (
            "impressions CSV",
            generate_impressions(Format::Csv, 87),
            Kind::Csv(impressions_schema(false), CsvConfig::v1(), None),
        ),
        (
            "impressions NDJSON",
            generate_impressions(Format::Json, 181),
            Kind::Ndjson(impressions_schema(true)),
        ),
        (
            "uservisits",
            uservisits.clone(),
            Kind::Csv(amplab::uservisits(), CsvConfig::amplab(), None),
        ),
        (
            "uservisits, columns 0 and 3",
            uservisits,
            Kind::Csv(amplab::uservisits(), CsvConfig::amplab(), Some(vec![0, 3])),
        ),
    ];

    println!(
        "| input | path | text MB | input MB | records | CPU s | wall s | GB/s per core (CPU) | M records/s per core (CPU) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let name: Arc<str> = "mem".into();
    for (label, text, kind) in &inputs {
        let chunks = chunks_of(text);
        // One batch per chunk, loaded beforehand, so this row times the
        // parser and no copy.
        let mut batches: Vec<Batch> = chunks
            .iter()
            .enumerate()
            .map(|(i, bytes)| {
                let mut batch = Batch::new();
                let offset = if i == 0 { 0 } else { 1 };
                batch.chunk_mut().set(&name, Some(1), offset, bytes);
                batch
            })
            .collect();
        let parse_only = best(reps, || {
            let mut parse = kind.parse_with(None);
            batches.iter_mut().map(&mut parse).sum()
        });
        row(label, "parse", text.len(), text.len(), parse_only);
        if let Kind::Csv(..) = kind {
            for scanner in Scanner::ALL.into_iter().filter(|s| s.is_supported()) {
                let timing = best(reps, || {
                    let mut parse = kind.parse_with(Some(scanner));
                    batches.iter_mut().map(&mut parse).sum()
                });
                let how = format!("parse, {scanner:?} scanner");
                row(label, &how, text.len(), text.len(), timing);
            }
        }
        drop(batches);
        let mut batch = Batch::new();
        if let (Kind::Ndjson(_), false) = (kind, quick) {
            let paths: Vec<Vec<&str>> = vec![
                vec!["ts"],
                vec!["user", "id"],
                vec!["kind"],
                vec!["user", "state"],
                vec!["ad", "site"],
                vec!["ad", "provider"],
                vec!["ad", "campaign"],
                vec!["revenue"],
            ];
            row(
                label,
                "serde_json (RawValue maps)",
                text.len(),
                text.len(),
                best(reps, || serde_json_records(&chunks, &paths)),
            );
        }
        let codecs: &[&str] = if quick {
            &["plain"]
        } else {
            &["plain", "lz4", "snappy", "zstd", "gzip"]
        };
        for &codec in codecs {
            let packed: Arc<[u8]> = compress(codec, text).into();
            if codec == "plain" {
                let timing = best(reps, || {
                    let bytes = std::io::Cursor::new(ArcBytes(packed.clone()));
                    let input = Input::from_reader("mem", bytes).expect("in memory");
                    let mut reader = LineReader::new(input);
                    let mut chunks = 0;
                    while reader.read_chunk(batch.chunk_mut()).expect("in memory") {
                        chunks += 1;
                    }
                    chunks
                });
                row(
                    label,
                    "read only (chunks, not records)",
                    text.len(),
                    packed.len(),
                    timing,
                );
            }
            let timing = best(reps, || {
                let bytes = std::io::Cursor::new(ArcBytes(packed.clone()));
                let input = Input::from_reader("mem", bytes).expect("in memory");
                let mut reader = LineReader::with_chunk_bytes(input, CHUNK_BYTES_DEFAULT);
                let mut parse = kind.parse_with(None);
                let mut records = 0;
                while reader.read_chunk(batch.chunk_mut()).expect("in memory") {
                    records += parse(&mut batch);
                }
                records
            });
            row(
                label,
                &format!("read+parse {codec}"),
                text.len(),
                packed.len(),
                timing,
            );
        }
    }
}

/// Shared bytes a `Cursor` can read: each timed run clones the `Arc`, not
/// the bytes.
struct ArcBytes(Arc<[u8]>);

impl AsRef<[u8]> for ArcBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}
