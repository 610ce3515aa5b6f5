//! The frame codec: every frame round-trips through bytes (from a slice
//! and from a `BytesMut` fed in pieces), every truncation of a frame is
//! `Ok(None)`, a forged length is refused from the header without
//! allocating, a damaged byte is never read as a frame, and each rule of
//! the layout refuses what breaks it. Proptest runs from a fixed seed, so
//! a failure reproduces as is.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use cardinal_server::{
    Ack, Batch, BatchId, ClientId, Decoder, Error, ErrorCode, ErrorFrame, FRAME_BYTES_DEFAULT,
    FRAME_BYTES_MAX, FRAME_BYTES_MIN, Format, Frame, HEADER_BYTES, Hello, HelloOk,
    IN_FLIGHT_BATCHES_MAX, Limits, MESSAGE_BYTES_MAX, SERVER_NAME, StreamName, Token, encode,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// Counts the bytes the calling thread asks the allocator for, to show a
/// forged header costs none.
struct Counting;

thread_local! {
    static ALLOCATED_BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATED_BYTES.try_with(|n| n.set(n.get() + bytes as u64));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// per-thread counter is the only addition, and touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes `f` asked the allocator for, on this thread, and its result.
fn allocated_by<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATED_BYTES.with(Cell::get);
    let out = f();
    (ALLOCATED_BYTES.with(Cell::get) - before, out)
}

fn bytes_of(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode(frame, &mut out);
    out
}

/// A frame of type `tag` around `body`, with a correct checksum: for
/// bodies the encoder would never write.
fn raw(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(body.len())
        .expect("small")
        .to_le_bytes()
        .to_vec();
    out.push(tag);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&out);
    hasher.update(body);
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x5e4d_f4a3_e000_0001),
        ..Config::default()
    }
}

fn client_id() -> impl Strategy<Value = ClientId> {
    "[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}".prop_map(|s| ClientId::new(&s).expect("by the rule"))
}

fn stream() -> impl Strategy<Value = StreamName> {
    "[A-Za-z0-9_][A-Za-z0-9_-]{0,63}".prop_map(|s| StreamName::new(&s).expect("by the rule"))
}

fn token() -> impl Strategy<Value = Option<Token>> {
    proptest::option::of(
        proptest::collection::vec(any::<u8>(), 1..=256)
            .prop_map(|t| Token::new(&t).expect("by the rule")),
    )
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        FRAME_BYTES_MIN..=FRAME_BYTES_MAX,
        1..=IN_FLIGHT_BATCHES_MAX,
        0..=u32::MAX / 2,
    )
        .prop_map(|(frame, in_flight, extra)| Limits {
            frame_bytes_max: u32::try_from(frame).expect("fits"),
            in_flight_batches_max: in_flight,
            dedup_window: in_flight + extra,
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    let id = any::<u64>().prop_map(BatchId);
    prop_oneof![
        (client_id(), token()).prop_map(|(client, token)| Frame::Hello(Hello { client, token })),
        (
            "[ -~]{1,64}",
            limits(),
            proptest::option::of(any::<u64>().prop_map(BatchId))
        )
            .prop_map(|(server, limits, highest)| Frame::HelloOk(HelloOk {
                server,
                limits,
                highest
            })),
        (
            id.clone(),
            stream(),
            prop_oneof![
                Just((Format::Csv, false)),
                Just((Format::Csv, true)),
                Just((Format::Ndjson, false))
            ],
            proptest::collection::vec(any::<u8>(), 0..600)
        )
            .prop_map(
                |(id, stream, (format, header), payload)| Frame::Batch(Batch {
                    id,
                    stream,
                    format,
                    header,
                    payload: Bytes::from(payload),
                })
            ),
        (id.clone(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(id, accepted, rejected, duplicate)| Frame::Ack(Ack {
                id,
                accepted,
                rejected,
                duplicate
            })
        ),
        (proptest::option::of(id), 1..=u16::MAX, "\\PC{0,300}").prop_map(
            |(batch, code, message)| Frame::Error(ErrorFrame::new(
                batch,
                ErrorCode::from_number(code),
                &message
            ))
        ),
        any::<u64>().prop_map(Frame::Ping),
        any::<u64>().prop_map(Frame::Pong),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    /// Bytes to frame and back: the same frame, the whole of the bytes
    /// used, the same bytes again; through a slice and through a
    /// `BytesMut`.
    #[test]
    fn every_frame_round_trips(frame in frame()) {
        let bytes = bytes_of(&frame);
        let decoder = Decoder::default();
        let (back, used) = decoder.decode(&bytes).expect("valid").expect("whole");
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(&back, &frame);
        prop_assert_eq!(bytes_of(&back), bytes.clone());
        let mut buf = BytesMut::from(&bytes[..]);
        let back = decoder.decode_buf(&mut buf).expect("valid").expect("whole");
        prop_assert_eq!(&back, &frame);
        prop_assert!(buf.is_empty());
    }

    /// Every proper prefix of a frame is "need more bytes", never an error
    /// and never a frame; a `BytesMut` holding one is left as it was.
    #[test]
    fn every_truncation_waits_for_more(frame in frame()) {
        let bytes = bytes_of(&frame);
        let decoder = Decoder::default();
        for end in 0..bytes.len() {
            prop_assert_eq!(decoder.decode(&bytes[..end]), Ok(None), "prefix of {}", end);
            let mut buf = BytesMut::from(&bytes[..end]);
            prop_assert_eq!(decoder.decode_buf(&mut buf), Ok(None));
            prop_assert_eq!(buf.len(), end);
        }
    }

    /// Frames back to back, arriving in pieces of any size: the reader
    /// gets exactly the frames sent, in order.
    #[test]
    fn a_stream_in_pieces_decodes_to_its_frames(
        frames in proptest::collection::vec(frame(), 1..8),
        cuts in proptest::collection::vec(1usize..200, 1..64),
    ) {
        let mut wire = Vec::new();
        for frame in &frames {
            encode(frame, &mut wire);
        }
        let decoder = Decoder::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < wire.len() {
            let end = (at + cut.next().expect("cycles")).min(wire.len());
            buf.extend_from_slice(&wire[at..end]);
            at = end;
            while let Some(frame) = decoder.decode_buf(&mut buf).expect("valid") {
                got.push(frame);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, frames);
    }

    /// Any one damaged byte: an error, or "need more" (a length made
    /// larger), never a frame.
    #[test]
    fn a_damaged_byte_is_never_read_as_a_frame(
        frame in frame(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let mut bytes = bytes_of(&frame);
        let at = at.index(bytes.len());
        bytes[at] ^= xor;
        match Decoder::default().decode(&bytes) {
            Ok(Some((other, _))) => prop_assert!(false, "byte {} read as {:?}", at, other),
            Ok(None) => prop_assert!(at < 4, "only a longer length waits, not byte {}", at),
            Err(_) => {}
        }
    }
}

#[test]
fn forged_lengths_are_refused_from_the_header_without_allocating() {
    let server = Decoder::new(FRAME_BYTES_DEFAULT);
    let over_default = u32::try_from(FRAME_BYTES_DEFAULT - HEADER_BYTES + 1).expect("fits");
    let over_max = u32::try_from(FRAME_BYTES_MAX - HEADER_BYTES + 1).expect("fits");
    for (decoder, length) in [
        (server, over_default),
        (server, u32::MAX),
        (Decoder::default(), over_max),
        (Decoder::default(), u32::MAX),
    ] {
        for tag in [1, 3, 200] {
            let mut header = length.to_le_bytes().to_vec();
            header.push(tag);
            header.extend_from_slice(&[0; 4]);
            let (allocated, result) = allocated_by(|| decoder.decode(&header));
            assert!(
                matches!(result, Err(Error::FrameTooLarge { .. })),
                "{result:?}"
            );
            assert_eq!(allocated, 0, "a refused header allocates nothing");
            let mut buf = BytesMut::from(&header[..]);
            let (allocated, result) = allocated_by(|| decoder.decode_buf(&mut buf));
            assert!(matches!(result, Err(Error::FrameTooLarge { .. })));
            assert_eq!(allocated, 0);
        }
    }
    // A length within the limit waits for its body, also without
    // allocating: nothing is reserved on a header's word.
    let mut header = u32::try_from(FRAME_BYTES_MAX - HEADER_BYTES)
        .expect("fits")
        .to_le_bytes()
        .to_vec();
    header.extend_from_slice(&[3, 0, 0, 0, 0]);
    let (allocated, result) = allocated_by(|| Decoder::default().decode(&header));
    assert_eq!(result, Ok(None));
    assert_eq!(allocated, 0);
    // The largest frame the limit allows decodes.
    let batch = Frame::Batch(Batch {
        id: BatchId(1),
        stream: StreamName::new("s").expect("valid"),
        format: Format::Csv,
        header: false,
        payload: Bytes::from(vec![b'x'; FRAME_BYTES_DEFAULT - HEADER_BYTES - 11]),
    });
    let bytes = bytes_of(&batch);
    assert_eq!(bytes.len(), FRAME_BYTES_DEFAULT);
    assert!(matches!(server.decode(&bytes), Ok(Some(_))));
    let mut one_more = bytes.clone();
    one_more[0] += 1;
    assert!(matches!(
        server.decode(&one_more),
        Err(Error::FrameTooLarge {
            frame_bytes,
            ..
        }) if frame_bytes == FRAME_BYTES_DEFAULT as u64 + 1
    ));
}

#[test]
fn unknown_types_and_versions_are_refused_clearly() {
    for tag in [0u8, 8, 9, 127, 255] {
        let result = Decoder::default().decode(&raw(tag, &[0; 8]));
        assert_eq!(result, Err(Error::UnknownFrameType { tag }));
        assert_eq!(
            result.expect_err("refused").code(),
            ErrorCode::Malformed,
            "the server answers malformed and closes"
        );
    }
    // From the header alone, before any of a body the limit allows.
    for tag in [0u8, 8, 255] {
        let mut header = 1000u32.to_le_bytes().to_vec();
        header.extend_from_slice(&[tag, 0, 0, 0, 0]);
        let (allocated, result) = allocated_by(|| Decoder::default().decode(&header));
        assert_eq!(result, Err(Error::UnknownFrameType { tag }));
        assert_eq!(allocated, 0);
    }
    // A hello of version 2, whatever follows the version.
    for body in [
        &[2u8, 0][..],
        &[2, 0, 1, b'a', 0, 0],
        &[2, 0, 0xff, 0xff, 0xff],
    ] {
        let error = Decoder::default()
            .decode(&raw(1, body))
            .expect_err("refused");
        assert_eq!(
            error,
            Error::UnsupportedVersion {
                found: 2,
                supported: 1
            }
        );
        assert_eq!(error.code(), ErrorCode::UnsupportedVersion);
        assert!(error.to_string().contains("version 2"), "{error}");
    }
}

/// Each rule of the layout refuses the body that breaks it (with a
/// correct checksum, so the rule and not the checksum refuses it).
#[test]
fn every_field_rule_refuses_what_breaks_it() {
    let hello = |id: &[u8], token: &[u8]| {
        let mut body = vec![1, 0, u8::try_from(id.len()).expect("small")];
        body.extend_from_slice(id);
        body.extend_from_slice(&u16::try_from(token.len()).expect("small").to_le_bytes());
        body.extend_from_slice(token);
        raw(1, &body)
    };
    let decoder = Decoder::default();
    assert!(matches!(decoder.decode(&hello(b"ok", b"")), Ok(Some(_))));
    for bad_id in [&b""[..], b".", b"..", b"-a", b"a b", &[b'a'; 65]] {
        let error = decoder.decode(&hello(bad_id, b"")).expect_err("bad id");
        assert!(
            matches!(error, Error::BadName { .. } | Error::Malformed { .. }),
            "{error}"
        );
    }
    assert_eq!(
        decoder.decode(&hello(b"", b"")).expect_err("empty").code(),
        ErrorCode::BadClientId
    );
    assert!(decoder.decode(&hello(b"ok", &[7; 257])).is_err());

    let batch = |format: u8, stream: &[u8]| {
        let mut body = 9u64.to_le_bytes().to_vec();
        body.push(format);
        body.push(u8::try_from(stream.len()).expect("small"));
        body.extend_from_slice(stream);
        body.extend_from_slice(b"a,b\n");
        raw(3, &body)
    };
    assert!(matches!(decoder.decode(&batch(2, b"s")), Ok(Some(_))));
    // The header bit (0x80) on CSV says the payload's first line is its
    // header; on NDJSON, or on no format, it is malformed.
    match decoder.decode(&batch(0x81, b"s")) {
        Ok(Some((Frame::Batch(b), _))) => assert!(b.header && b.format == Format::Csv),
        other => panic!("{other:?}"),
    }
    for (format, stream) in [
        (0u8, &b"s"[..]),
        (3, b"s"),
        (0x82, b"s"),
        (0x80, b"s"),
        (1, b""),
        (1, b"a.b"),
        (1, b"../x"),
        (1, &[0xff, 0xfe]),
        (1, &[b's'; 65]),
    ] {
        assert!(
            decoder.decode(&batch(format, stream)).is_err(),
            "{stream:?}"
        );
    }

    let ack = |duplicate: u8, extra: &[u8]| {
        let mut body = [0u8; 24].to_vec();
        body.push(duplicate);
        body.extend_from_slice(extra);
        raw(4, &body)
    };
    assert!(matches!(decoder.decode(&ack(1, b"")), Ok(Some(_))));
    assert!(decoder.decode(&ack(2, b"")).is_err(), "flags are 0 or 1");
    assert!(decoder.decode(&ack(0, b"x")).is_err(), "a byte left over");
    assert!(
        decoder.decode(&raw(4, &[0; 24])).is_err(),
        "a field missing"
    );

    let error = |code: u16, has: u8, id: u64, message: &[u8]| {
        let mut body = code.to_le_bytes().to_vec();
        body.push(has);
        body.extend_from_slice(&id.to_le_bytes());
        body.extend_from_slice(&u16::try_from(message.len()).expect("small").to_le_bytes());
        body.extend_from_slice(message);
        raw(5, &body)
    };
    assert!(matches!(
        decoder.decode(&error(7, 1, 3, b"no")),
        Ok(Some(_))
    ));
    assert!(matches!(
        decoder.decode(&error(999, 0, 0, b"")),
        Ok(Some(_))
    ));
    assert!(decoder.decode(&error(0, 0, 0, b"")).is_err(), "code 0");
    assert!(
        decoder.decode(&error(7, 0, 3, b"")).is_err(),
        "an id without its flag"
    );
    assert!(
        decoder.decode(&error(7, 1, 3, &[0xc3])).is_err(),
        "not UTF-8"
    );
    assert!(
        decoder
            .decode(&error(7, 1, 3, &[b'x'; MESSAGE_BYTES_MAX + 1]))
            .is_err()
    );

    let hello_ok = |frame: u32, in_flight: u32, window: u32, known: u8, highest: u64| {
        let mut body = 1u16.to_le_bytes().to_vec();
        for n in [frame, in_flight, window] {
            body.extend_from_slice(&n.to_le_bytes());
        }
        body.push(known);
        body.extend_from_slice(&highest.to_le_bytes());
        body.push(1);
        body.push(b'c');
        raw(2, &body)
    };
    let default = u32::try_from(FRAME_BYTES_DEFAULT).expect("fits");
    assert!(matches!(
        decoder.decode(&hello_ok(default, 8, 1024, 1, 5)),
        Ok(Some(_))
    ));
    let min = u32::try_from(FRAME_BYTES_MIN).expect("fits");
    for (frame, in_flight, window, known, highest) in [
        (min - 1, 8, 1024, 0, 0),
        (u32::MAX, 8, 1024, 0, 0),
        (default, 0, 1024, 0, 0),
        (default, IN_FLIGHT_BATCHES_MAX + 1, 1024, 0, 0),
        (default, 8, 7, 0, 0),
        (default, 8, 1024, 0, 5),
        (default, 8, 1024, 2, 5),
    ] {
        assert!(
            decoder
                .decode(&hello_ok(frame, in_flight, window, known, highest))
                .is_err(),
            "{frame} {in_flight} {window} {known} {highest}"
        );
    }
}

#[test]
fn a_damaged_checksum_is_reported_as_one() {
    let mut bytes = bytes_of(&Frame::Ping(1));
    bytes[16] ^= 1;
    assert!(matches!(
        Decoder::default().decode(&bytes),
        Err(Error::Checksum { .. })
    ));
    assert_eq!(SERVER_NAME.split(' ').next(), Some("cardinal"));
}
