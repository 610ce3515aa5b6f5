//! Generated inputs (impressions CSV and NDJSON, uservisits), compressed
//! with each codec the source detects, parse to the same records and
//! rejects as the plain file, and at every chunk size.

mod common;

use std::io::Write;

use cardinal_gen::bdb::{BdbConfig, write_uservisits};
use cardinal_gen::impressions::{Format, Impressions, ImpressionsConfig};
use cardinal_parse::{CsvConfig, CsvParser, NdjsonParser, amplab};
use cardinal_source::{Compression, Input};
use common::{Parser, parse_stream, schema};

const IMPRESSION_COLUMNS: &[&str] = &[
    "ts", "user_id", "kind", "state", "site", "provider", "campaign", "revenue",
];
const IMPRESSION_PATHS: &[&str] = &[
    "ts",
    "user.id",
    "kind",
    "user.state",
    "ad.site",
    "ad.provider",
    "ad.campaign",
    "revenue",
];

fn impressions(format: Format) -> Vec<u8> {
    let config = ImpressionsConfig {
        events: 3_000,
        users: 500,
        format,
        ..Default::default()
    };
    let mut out = Vec::new();
    Impressions::new(config)
        .expect("valid")
        .write(&mut out)
        .expect("in memory");
    out
}

fn compress(codec: Compression, plain: &[u8]) -> Vec<u8> {
    match codec {
        Compression::None => plain.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(plain).expect("in memory");
            e.finish().expect("in memory")
        }
        Compression::Zstd => zstd::stream::encode_all(plain, 1).expect("in memory"),
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(plain).expect("in memory");
            e.finish().expect("in memory")
        }
        Compression::Snappy => {
            let mut e = snap::write::FrameEncoder::new(Vec::new());
            e.write_all(plain).expect("in memory");
            e.into_inner().expect("in memory")
        }
        other => panic!("no encoder for {other:?}"),
    }
}

fn parser(kind: &str) -> Parser {
    match kind {
        "csv" => {
            Parser::Csv(CsvParser::new(&schema(IMPRESSION_COLUMNS), CsvConfig::v1()).expect("fits"))
        }
        "ndjson" => Parser::Ndjson(NdjsonParser::new(&schema(IMPRESSION_PATHS)).expect("fits")),
        _ => Parser::Csv(CsvParser::new(&amplab::uservisits(), CsvConfig::amplab()).expect("fits")),
    }
}

#[test]
fn every_codec_parses_to_the_plain_batches() {
    let uservisits = {
        let mut out = Vec::new();
        write_uservisits(
            BdbConfig {
                rows: 2_000,
                seed: 7,
            },
            &mut out,
        )
        .expect("in memory");
        out
    };
    let inputs = [
        ("csv", impressions(Format::Csv), 3_000),
        ("ndjson", impressions(Format::Json), 3_000),
        ("uservisits", uservisits, 2_000),
    ];
    for (kind, plain, rows) in inputs {
        let read = |bytes: Vec<u8>, chunk_bytes| {
            let input = Input::from_reader("gen", std::io::Cursor::new(bytes)).expect("in memory");
            parse_stream(input, chunk_bytes, &mut parser(kind))
        };
        let expected = read(plain.clone(), 1 << 16);
        assert_eq!(expected.0.len(), rows, "{kind}");
        assert!(expected.1.is_empty(), "{kind}: {:?}", &expected.1[..1]);
        // The same records whatever the chunking.
        assert_eq!(read(plain.clone(), 333), expected, "{kind} in small chunks");
        for codec in [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Lz4,
            Compression::Snappy,
        ] {
            assert_eq!(
                read(compress(codec, &plain), 1 << 16),
                expected,
                "{kind} {codec:?}"
            );
        }
    }
}

#[test]
fn csv_and_ndjson_impressions_agree() {
    let csv = parse_stream(
        Input::from_reader("csv", std::io::Cursor::new(impressions(Format::Csv))).expect("ok"),
        1 << 16,
        &mut parser("csv"),
    );
    let json = parse_stream(
        Input::from_reader("json", std::io::Cursor::new(impressions(Format::Json))).expect("ok"),
        1 << 16,
        &mut parser("ndjson"),
    );
    // CSV records start on line 2 (after the header), JSON on line 1.
    let strip = |records: Vec<String>| -> Vec<String> {
        records
            .into_iter()
            .map(|r| r.split_once(':').expect("line").1.to_owned())
            .collect()
    };
    assert_eq!(strip(csv.0), strip(json.0));
}
