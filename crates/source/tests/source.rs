//! Reading inputs: compression round trips for every codec, chunk framing
//! at every chunk size, long lines skipped and reported, and byte ranges
//! that cover a file exactly once at line boundaries.

use std::io::Write;
use std::sync::Arc;

use cardinal_source::{
    Chunk, Compression, DECODE_READ_BYTES_MAX, Error, Input, LINE_BYTES_MAX, LineReader,
    line_start_in, split_file, split_ranges,
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

/// What the codec crate's own streaming decoder recovers from `packed`
/// (read in small pieces until it fails or ends), and whether it failed:
/// the reference a damaged input is held to.
fn stock_decode(codec: Compression, packed: &[u8]) -> (Vec<u8>, bool) {
    let mut decoder: Box<dyn std::io::Read> = match codec {
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(packed)),
        Compression::Zstd => match zstd::stream::read::Decoder::new(packed) {
            Ok(decoder) => Box::new(decoder),
            Err(_) => return (Vec::new(), true),
        },
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(packed)),
        Compression::Snappy => Box::new(snap::read::FrameDecoder::new(packed)),
        other => panic!("no decoder for {other:?}"),
    };
    let mut decoded = Vec::new();
    let mut block = [0u8; 1000];
    loop {
        match decoder.read(&mut block) {
            Ok(0) => return (decoded, false),
            Ok(n) => decoded.extend_from_slice(&block[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (decoded, true),
        }
    }
}

/// Reads `packed` whole through a [`LineReader`]: the bytes of every
/// chunk (each checked to follow the one before it), and the error that
/// ended the input, if any.
fn read_damaged(packed: Vec<u8>, chunk_bytes: usize) -> (Vec<u8>, Option<Error>) {
    let input = Input::from_reader("damaged", std::io::Cursor::new(packed)).expect("in memory");
    let mut reader = LineReader::with_chunk_bytes(input, chunk_bytes);
    let mut chunk = Chunk::default();
    let mut read = Vec::new();
    loop {
        match reader.read_chunk(&mut chunk) {
            Ok(true) => {
                assert_eq!(chunk.offset, read.len() as u64);
                assert!(chunk.bytes().ends_with(b"\n") || chunk.offset > 0 || read.is_empty());
                read.extend_from_slice(chunk.bytes());
            }
            Ok(false) => return (read, None),
            Err(e) => {
                assert!(!e.is_recoverable(), "{e}");
                // The input is over: later calls find nothing.
                assert!(!reader.read_chunk(&mut chunk).expect("ended"));
                return (read, Some(e));
            }
        }
    }
}

/// Checks that reading `packed` (of `codec`) kept exactly the whole lines
/// the stock decoder recovers and, when that decoder fails, that the
/// error says where decoding stopped.
fn assert_keeps_whole_lines(codec: Compression, packed: &[u8], chunk_bytes: usize, case: &str) {
    let (decoded, failed) = stock_decode(codec, packed);
    let whole = if failed {
        memchr_last_newline(&decoded)
    } else {
        decoded.len()
    };
    let (read, error) = read_damaged(packed.to_vec(), chunk_bytes);
    assert_eq!(read.len(), whole, "{codec:?} {case}: bytes kept");
    assert_eq!(read[..], decoded[..whole], "{codec:?} {case}");
    assert_damage_named(codec, packed, &decoded, failed, error, case);
}

/// Checks that a read ended as the stock decoder's did: cleanly, or with
/// an [`Error::Damaged`] whose offsets are where decoding stopped.
fn assert_damage_named(
    codec: Compression,
    packed: &[u8],
    decoded: &[u8],
    failed: bool,
    error: Option<Error>,
    case: &str,
) {
    let whole = memchr_last_newline(decoded);
    match (failed, error) {
        (false, None) => {}
        (
            true,
            Some(Error::Damaged {
                input,
                compression,
                compressed_offset,
                decoded_offset,
                partial_bytes,
                ..
            }),
        ) => {
            assert_eq!(&*input, "damaged");
            assert_eq!(compression, codec);
            assert_eq!(decoded_offset, decoded.len() as u64, "{codec:?} {case}");
            assert_eq!(partial_bytes, (decoded.len() - whole) as u64);
            assert!(compressed_offset <= packed.len() as u64, "{case}");
        }
        (failed, error) => {
            panic!("{codec:?} {case}: stock decoder failed: {failed}, read: {error:?}")
        }
    }
}

/// The offset just past the last newline of `bytes` (0 if none).
fn memchr_last_newline(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |last| last + 1)
}

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Zstd,
    Compression::Lz4,
    Compression::Snappy,
];

/// A compressed input cut short keeps every whole line its decoder got
/// to, at every cut: hundreds of complete rows were lost with the chunk
/// being filled.
#[test]
fn a_cut_input_keeps_every_whole_line_before_the_cut() {
    let plain = sample_text(20_000);
    for codec in CODECS {
        let packed = compress(codec, &plain);
        let step = packed.len() / 37;
        for cut in (10..packed.len()).step_by(step).chain([packed.len() - 1]) {
            for chunk_bytes in [100, 4096, 256 << 10] {
                let case = format!("cut at {cut} of {}, chunks of {chunk_bytes}", packed.len());
                assert_keeps_whole_lines(codec, &packed[..cut], chunk_bytes, &case);
            }
        }
    }
}

/// The reject of a cut says where: the cut in the stored bytes, the
/// decoded bytes before it, and the partial line dropped.
#[test]
fn a_cut_input_names_where_reading_stopped() {
    let plain = sample_text(100);
    for codec in CODECS {
        let packed = compress(codec, &plain);
        let cut = packed.len() - 7;
        let (decoded, failed) = stock_decode(codec, &packed[..cut]);
        assert!(failed, "{codec:?}");
        let (read, error) = read_damaged(packed[..cut].to_vec(), 4096);
        let error = error.expect("a damaged input");
        let whole = memchr_last_newline(&decoded);
        assert_eq!(read.len(), whole);
        let text = error.to_string();
        assert!(text.starts_with("damaged: "), "{text}");
        assert!(
            text.contains(&format!(
                " at compressed byte {cut} (decoded byte {})",
                decoded.len()
            )),
            "{codec:?}: {text}"
        );
        if whole < decoded.len() {
            assert!(
                text.ends_with(&format!(
                    "; the partial line at decoded byte {whole} ({} bytes) is dropped",
                    decoded.len() - whole
                )),
                "{codec:?}: {text}"
            );
        }
    }
}

/// Bytes after the last gzip member that are not another member (a log
/// file's trailing junk): `gzip -dc` decodes every member and warns; so
/// do we, with every row kept and one error after them. The other codecs
/// keep what their decoders recover.
#[test]
fn trailing_junk_keeps_every_row_before_it() {
    let plain = sample_text(100);
    for codec in CODECS {
        for junk in [
            &b"this is not compressed\n"[..],
            &[0u8; 512][..],
            &[0x1f][..],
        ] {
            let mut packed = compress(codec, &plain);
            let stored = packed.len();
            packed.extend_from_slice(junk);
            assert_keeps_whole_lines(codec, &packed, 4096, &format!("{} junk bytes", junk.len()));
            if codec == Compression::Gzip {
                let (read, error) = read_damaged(packed.clone(), 256 << 10);
                assert_eq!(read, plain, "every row of the member");
                let Some(Error::Damaged {
                    compressed_offset,
                    decoded_offset,
                    partial_bytes,
                    ..
                }) = error
                else {
                    panic!("trailing junk is reported: {error:?}");
                };
                assert_eq!(decoded_offset, plain.len() as u64);
                assert_eq!(partial_bytes, 0);
                assert!(compressed_offset >= stored as u64, "{compressed_offset}");
                assert!(
                    compressed_offset <= packed.len() as u64,
                    "{compressed_offset}"
                );
            }
        }
    }
    // Two whole members and junk: both members are read.
    let mut packed = compress(Compression::Gzip, &plain);
    packed.extend(compress(Compression::Gzip, &plain));
    packed.extend_from_slice(b"junk");
    let (read, error) = read_damaged(packed, 4096);
    assert_eq!(read, [&plain[..], &plain[..]].concat());
    assert!(matches!(error, Some(Error::Damaged { .. })), "{error:?}");
}

/// A damaged piece in the middle (a flipped byte) keeps what came before
/// it: every whole line the stock decoder recovers, but for the output of
/// the one decoder read that met the damage (at most
/// [`DECODE_READ_BYTES_MAX`], see there; the stock decoder, read in
/// other pieces, may stop a little earlier or later). A snappy input whose second 64 KiB chunk is damaged
/// keeps the first chunk's lines.
#[test]
fn a_damaged_middle_keeps_the_lines_before_it() {
    let plain = sample_text(20_000);
    let line_bytes_max = 64;
    for codec in CODECS {
        let packed = compress(codec, &plain);
        for at in [packed.len() / 3, packed.len() / 2, packed.len() * 4 / 5] {
            let mut damaged = packed.clone();
            damaged[at] ^= 0x55;
            let case = format!("{codec:?}, byte {at} of {} flipped", packed.len());
            let (decoded, failed) = stock_decode(codec, &damaged);
            let whole = memchr_last_newline(&decoded);
            for chunk_bytes in [100, 4096, 256 << 10] {
                let (read, error) = read_damaged(damaged.clone(), chunk_bytes);
                // Both are prefixes of the one decoded stream (which may
                // hold garbage before a decoder notices the damage).
                let common = read.len().min(decoded.len());
                assert_eq!(read[..common], decoded[..common], "{case}");
                assert!(
                    read.len() + DECODE_READ_BYTES_MAX + line_bytes_max >= whole,
                    "{case}: {} of {whole} bytes kept",
                    read.len()
                );
                if let Some(Error::Damaged {
                    decoded_offset,
                    partial_bytes,
                    ..
                }) = &error
                {
                    assert_eq!(decoded_offset - partial_bytes, read.len() as u64, "{case}");
                } else {
                    assert!(
                        !failed && error.is_none() && read.len() == decoded.len(),
                        "{case}: {error:?}"
                    );
                }
            }
        }
    }
    let mut packed = compress(Compression::Snappy, &plain);
    // The stream identifier (10 bytes), then the first chunk's 4-byte
    // header (type, 24-bit length), its CRC (4 bytes) and data.
    let first_len =
        usize::from(packed[11]) | usize::from(packed[12]) << 8 | usize::from(packed[13]) << 16;
    let second = 10 + 4 + first_len;
    packed[second + 4 + 4 + 20] ^= 0xff;
    let (read, error) = read_damaged(packed, 256 << 10);
    assert!(
        read.len() > 60_000,
        "the first chunk's lines: {}",
        read.len()
    );
    assert_eq!(read[..], plain[..read.len()]);
    assert!(matches!(error, Some(Error::Damaged { .. })), "{error:?}");
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

    /// A compressed input cut anywhere yields exactly the whole lines its
    /// decoder recovers, at any chunk size.
    #[test]
    fn any_cut_keeps_the_whole_lines_before_it(
        codec in proptest::sample::select(CODECS.to_vec()),
        lines in 1usize..3000,
        cut_per_mille in 0usize..1000,
        chunk_bytes in 16usize..5000,
    ) {
        let packed = compress(codec, &sample_text(lines));
        let cut = (packed.len() * cut_per_mille / 1000).max(10);
        assert_keeps_whole_lines(codec, &packed[..cut], chunk_bytes, &format!("cut at {cut}"));
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

/// A byte flipped inside a gzip member decodes to wrong bytes until the
/// member's CRC says so: that error is told apart (`is_corrupt`) from a
/// cut member and from trailing junk, whose rows before them are whole.
/// Every seeded flip in the member's deflate body either decodes to the
/// same bytes (a flip in an unused bit) or is reported as corrupt.
#[test]
fn a_flipped_byte_in_a_gzip_member_is_corrupt_not_cut() {
    let plain = sample_text(400);
    let packed = compress(Compression::Gzip, &plain);
    let mut corrupt = 0;
    // The member's body: after the 10-byte header, before the 8-byte trailer.
    for at in (12..packed.len() - 8).step_by(7) {
        let mut flipped = packed.clone();
        flipped[at] ^= 0x10;
        let (read, error) = read_damaged(flipped, 4096);
        match error {
            None => assert_eq!(read, plain, "a flip at {at} read back other bytes"),
            Some(error) => {
                assert!(error.is_corrupt(), "a flip at {at}: {error}");
                assert!(
                    error
                        .to_string()
                        .contains("gzip member at compressed byte 0"),
                    "{error}"
                );
                corrupt += 1;
            }
        }
    }
    assert!(corrupt > 0);
    let (_, cut) = read_damaged(packed[..packed.len() - 3].to_vec(), 4096);
    assert!(!cut.expect("cut").is_corrupt());
    let mut junk = packed.clone();
    junk.extend_from_slice(b"not gzip\n");
    let (read, error) = read_damaged(junk, 4096);
    assert_eq!(read, plain);
    assert!(!error.expect("junk").is_corrupt());
}
