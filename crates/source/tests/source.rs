//! Reading inputs: compression round trips for every codec, chunk framing
//! at every chunk size, long lines skipped and reported, and byte ranges
//! that cover a file exactly once at line boundaries.

use std::io::Write;
use std::sync::Arc;

use cardinal_source::{
    Chunk, Compression, Error, Input, LINE_BYTES_MAX, LineReader, line_start_in, split_file,
    split_ranges,
};
use proptest::prelude::*;

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

/// A chunk's bytes, first line and offset.
type Tagged = (Vec<u8>, Option<u64>, u64);

/// Every chunk of `bytes` read through a [`LineReader`], with its tags.
fn read_all(bytes: Vec<u8>, chunk_bytes: usize) -> (Vec<Tagged>, Vec<Error>) {
    let input = Input::from_reader("mem", std::io::Cursor::new(bytes)).expect("in memory");
    let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes);
    let mut chunk = Chunk::default();
    let (mut chunks, mut errors) = (Vec::new(), Vec::new());
    loop {
        match reader.read_chunk(&mut chunk) {
            Ok(true) => chunks.push((chunk.bytes().to_vec(), chunk.first_line, chunk.offset)),
            Ok(false) => break,
            Err(e) if e.is_recoverable() => errors.push(e),
            Err(e) => panic!("{e}"),
        }
    }
    (chunks, errors)
}

fn sample_text(lines: usize) -> Vec<u8> {
    let mut text = Vec::new();
    for i in 0..lines {
        writeln!(
            text,
            "2026-11-0{},{},state{},{}",
            i % 9 + 1,
            i * 7919,
            i % 50,
            i
        )
        .expect("vec");
    }
    text
}

#[test]
fn every_codec_round_trips_to_the_same_chunks() {
    let plain = sample_text(5_000);
    let (expected, _) = read_all(plain.clone(), 4096);
    assert!(expected.len() > 10);
    for codec in [
        Compression::Gzip,
        Compression::Zstd,
        Compression::Lz4,
        Compression::Snappy,
    ] {
        let packed = compress(codec, &plain);
        let input = Input::from_reader("mem", std::io::Cursor::new(packed.clone())).expect("ok");
        assert_eq!(input.compression(), codec);
        let (got, errors) = read_all(packed, 4096);
        assert!(errors.is_empty());
        assert_eq!(got, expected, "{codec:?}");
    }
}

#[test]
fn concatenated_gzip_members_are_one_stream() {
    let (a, b) = (b"a,1\nb,2\n".to_vec(), b"c,3\n".to_vec());
    let mut both = compress(Compression::Gzip, &a);
    both.extend(compress(Compression::Gzip, &b));
    let (got, _) = read_all(both, 64);
    assert_eq!(got, vec![(b"a,1\nb,2\nc,3\n".to_vec(), Some(1), 0)]);
}

#[test]
fn corrupt_compressed_input_is_an_io_error() {
    let mut packed = compress(Compression::Zstd, &sample_text(100));
    let mid = packed.len() / 2;
    packed.truncate(mid);
    let input = Input::from_reader("bad.zst", std::io::Cursor::new(packed)).expect("magic ok");
    let mut reader = LineReader::new(input);
    let mut chunk = Chunk::default();
    let result = loop {
        match reader.read_chunk(&mut chunk) {
            Ok(true) => {}
            other => break other,
        }
    };
    let error = result.expect_err("truncated zstd");
    assert!(!error.is_recoverable());
    assert!(error.to_string().starts_with("bad.zst: "), "{error}");
}

#[test]
fn long_line_is_skipped_and_named() {
    let mut text = b"first\n".to_vec();
    text.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 10));
    text.extend(b"\nthird\nfourth");
    let (chunks, errors) = read_all(text, 1 << 16);
    let lines: Vec<u8> = chunks.iter().flat_map(|c| c.0.clone()).collect();
    assert_eq!(lines, b"first\nthird\nfourth");
    assert_eq!(errors.len(), 1);
    match &errors[0] {
        Error::LineTooLong {
            input,
            line,
            offset,
            bytes,
            ..
        } => {
            assert_eq!((&**input, *line, *offset), ("mem", Some(2), 6));
            // The line and its newline.
            assert_eq!(*bytes, LINE_BYTES_MAX as u64 + 11);
            assert_eq!(errors[0].skipped_bytes(), *bytes);
        }
        other => panic!("{other}"),
    }
    assert_eq!(chunks.last().expect("chunks").1, Some(3));
    assert_eq!(
        chunks.last().expect("chunks").2,
        6 + LINE_BYTES_MAX as u64 + 11
    );
    assert!(errors[0].to_string().starts_with("mem:2: line longer than"));
}

#[test]
fn line_of_exactly_the_limit_is_kept() {
    let mut text = vec![b'y'; LINE_BYTES_MAX];
    text.push(b'\n');
    let (chunks, errors) = read_all(text.clone(), 1 << 16);
    assert!(errors.is_empty());
    assert_eq!(chunks.concat_bytes(), text);
    // Unterminated at the end of input, too.
    text.pop();
    let (chunks, errors) = read_all(text.clone(), 1 << 16);
    assert!(errors.is_empty());
    assert_eq!(chunks.concat_bytes(), text);
}

trait ConcatBytes {
    fn concat_bytes(&self) -> Vec<u8>;
}

impl ConcatBytes for Vec<Tagged> {
    fn concat_bytes(&self) -> Vec<u8> {
        self.iter().flat_map(|c| c.0.iter().copied()).collect()
    }
}

#[test]
fn file_ranges_read_back_the_file() {
    let dir = std::env::temp_dir().join(format!("cardinal-source-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("plain.csv");
    let text = sample_text(20_000);
    std::fs::write(&path, &text).expect("write");
    let ranges = split_file(&path, 4).expect("split");
    assert_eq!(ranges.len(), 4);
    let mut joined = Vec::new();
    for (i, range) in ranges.iter().enumerate() {
        let input = Input::open_range(&path, range.clone()).expect("open range");
        let mut reader = LineReader::with_chunk_bytes(input, 4096);
        let mut chunk = Chunk::default();
        let mut first = true;
        while reader.read_chunk(&mut chunk).expect("plain") {
            if first {
                assert_eq!(chunk.offset, range.start);
                assert_eq!(chunk.first_line, (i == 0).then_some(1));
                first = false;
            }
            joined.extend_from_slice(chunk.bytes());
        }
    }
    assert_eq!(joined, text);

    let packed = dir.join("packed.csv.zst");
    std::fs::write(&packed, compress(Compression::Zstd, &text)).expect("write");
    assert!(matches!(
        split_file(&packed, 2),
        Err(Error::NotSplittable { .. })
    ));
    let input = Input::open(&packed).expect("open");
    assert_eq!(input.compression(), Compression::Zstd);
    assert_eq!(&**input.name(), packed.display().to_string());
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[test]
fn chunk_set_reuses_its_buffer() {
    let name: Arc<str> = "x".into();
    let mut chunk = Chunk::default();
    chunk.set(&name, Some(5), 100, b"a\n");
    assert_eq!(
        (chunk.bytes(), chunk.first_line, chunk.offset),
        (&b"a\n"[..], Some(5), 100)
    );
    assert_eq!(chunk.len(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Ranges cover `0..len` exactly once, in order, and every range
    /// starts at a line start.
    #[test]
    fn ranges_cover_the_file_once_at_line_starts(
        text in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), Just(b'b')], 0..400),
        parts in 1usize..12,
    ) {
        let len = text.len() as u64;
        let ranges = split_ranges(len, parts, |o| Ok(line_start_in(&text, o))).expect("in memory");
        prop_assert!(ranges.len() <= parts);
        let mut at = 0;
        for range in &ranges {
            prop_assert_eq!(range.start, at);
            prop_assert!(range.start < range.end);
            let start = usize::try_from(range.start).expect("small");
            prop_assert!(start == 0 || text[start - 1] == b'\n');
            at = range.end;
        }
        prop_assert_eq!(at, len);
    }

    /// Any chunk size frames any text into the same lines.
    #[test]
    fn chunks_concatenate_to_the_input(
        text in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), Just(b'\r')], 0..600),
        chunk_bytes in 16usize..80,
    ) {
        let (chunks, errors) = read_all(text.clone(), chunk_bytes);
        prop_assert!(errors.is_empty());
        let mut line = 1;
        let mut offset = 0;
        for (bytes, first_line, chunk_offset) in &chunks {
            prop_assert_eq!(*first_line, Some(line));
            prop_assert_eq!(*chunk_offset, offset);
            let last = chunks.last().map(|c| c.2) == Some(*chunk_offset);
            prop_assert!(last || bytes.ends_with(b"\n"));
            line += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
            offset += bytes.len() as u64;
        }
        prop_assert_eq!(chunks.concat_bytes(), text);
    }

    /// Arbitrary bytes (including forged magic numbers) never panic.
    #[test]
    fn any_bytes_read_without_panic(
        prefix in prop_oneof![
            Just(vec![]), Just(vec![0x1f, 0x8b]), Just(vec![0x28, 0xb5, 0x2f, 0xfd]),
            Just(vec![0x04, 0x22, 0x4d, 0x18]), Just(b"\xff\x06\x00\x00sNaPpY".to_vec())
        ],
        body in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = prefix;
        bytes.extend(body);
        if let Ok(input) = Input::from_reader("fuzz", std::io::Cursor::new(bytes)) {
            let mut reader = LineReader::with_chunk_bytes(input, 16);
            let mut chunk = Chunk::default();
            while let Ok(true) = reader.read_chunk(&mut chunk) {}
        }
    }
}
