//! RFC 6587 framing: what rsyslog's omfwd really sends, split at every
//! byte, at the limits, and random.

use cardinal_syslog::framing::{
    self, Decoded, Framer, HEADER_BYTES_MAX, OCTET_COUNT_BYTES_MAX, SYSLOG_FRAME_BYTES_MAX,
    buffer_bytes_max,
};
use proptest::collection::vec;
use proptest::prelude::{any, prop_assert_eq, proptest};

mod fuzz_check {
    include!("fuzz/syslog_framing.rs");
}
use fuzz_check::{Framed, frame_in_chunks};

/// rsyslog 8.2302.0's omfwd over TCP, default (`traditional`) framing:
/// two messages from `logger`, one a line. See `data/README.md`.
const OMFWD_LINES: &[u8] = include_bytes!("data/rsyslog-omfwd-traditional.bin");

/// The same with `TCP_Framing="octet-counted"`.
const OMFWD_COUNTED: &[u8] = include_bytes!("data/rsyslog-omfwd-octet-counted.bin");

fn messages(data: &[u8], max: usize) -> Framed {
    frame_in_chunks(data, max, |_| usize::MAX)
}

#[test]
fn omfwd_lines_decode() {
    let framed = messages(OMFWD_LINES, SYSLOG_FRAME_BYTES_MAX);
    assert_eq!(
        framed.messages,
        [
            &b"<13>Nov 28 21:10:55 vm mytag hello tcp 1"[..],
            &b"<13>Nov 28 21:10:55 vm mytag hello tcp 2"[..]
        ]
    );
    assert_eq!((framed.oversize, framed.failed), (0, false));
}

#[test]
fn omfwd_octet_counted_decodes() {
    let framed = messages(OMFWD_COUNTED, SYSLOG_FRAME_BYTES_MAX);
    assert_eq!(
        framed.messages,
        [
            &b"<13>Nov 28 21:11:03 vm mytag hello tcp 1"[..],
            &b"<13>Nov 28 21:11:03 vm mytag hello tcp 2"[..]
        ]
    );
    assert_eq!((framed.oversize, framed.failed), (0, false));
}

#[test]
fn every_split_point_gives_the_same_messages() {
    for capture in [OMFWD_LINES, OMFWD_COUNTED] {
        let whole = messages(capture, SYSLOG_FRAME_BYTES_MAX);
        for cut in 0..=capture.len() {
            // Two reads: the bytes before the cut, then the rest.
            let split = frame_in_chunks(capture, SYSLOG_FRAME_BYTES_MAX, |step| {
                if step == 0 { cut } else { usize::MAX }
            });
            assert_eq!(split, whole, "cut at {cut}");
        }
        assert_eq!(
            frame_in_chunks(capture, SYSLOG_FRAME_BYTES_MAX, |_| 1),
            whole
        );
    }
}

#[test]
fn a_prefix_waits_and_the_whole_frame_decodes() {
    for capture in [OMFWD_LINES, OMFWD_COUNTED] {
        let (first, consumed) = framing::decode(capture, SYSLOG_FRAME_BYTES_MAX)
            .expect("valid")
            .expect("whole");
        assert!(matches!(first, Decoded::Message(_)));
        for cut in 0..consumed {
            assert_eq!(
                framing::decode(&capture[..cut], SYSLOG_FRAME_BYTES_MAX),
                Ok(None),
                "cut at {cut}"
            );
        }
    }
}

#[test]
fn the_largest_message_fits_and_one_byte_more_is_skipped() {
    let max = SYSLOG_FRAME_BYTES_MAX;
    for len in [max, max + 1] {
        let message = vec![b'm'; len];
        // A line, CRLF-terminated, then a short one.
        let mut lines = message.clone();
        lines.extend_from_slice(b"\r\n<1>after\n");
        // Octet counted, then a short one.
        let mut counted = format!("{len} ").into_bytes();
        counted.extend_from_slice(&message);
        counted.extend_from_slice(b"8 <1>after");
        for data in [lines, counted] {
            let framed = messages(&data, max);
            if len == max {
                assert_eq!(framed.messages, [message.clone(), b"<1>after".to_vec()]);
                assert_eq!(framed.oversize, 0);
            } else {
                assert_eq!(
                    framed.messages,
                    [b"<1>after".to_vec()],
                    "the stream stays in sync"
                );
                assert_eq!(framed.oversize, 1);
            }
        }
    }
}

#[test]
fn a_full_buffer_always_decodes() {
    let max = SYSLOG_FRAME_BYTES_MAX;
    let capacity = buffer_bytes_max(max);
    assert_eq!(capacity, max + HEADER_BYTES_MAX);
    // The longest octet-counted frame needs exactly the whole buffer.
    let mut counted = format!("{max} ").into_bytes();
    counted.resize(counted.len() + max, b'x');
    assert!(counted.len() <= capacity);
    assert!(matches!(
        framing::decode(&counted, max),
        Ok(Some((Decoded::Message(_), _)))
    ));
    // A buffer full of one unterminated line is reported oversize.
    let line = vec![b'<'; capacity];
    assert_eq!(
        framing::decode(&line, max),
        Ok(Some((Decoded::Oversize { bytes: capacity }, capacity)))
    );
}

#[test]
fn counts_up_to_the_limit_are_skipped_and_above_fail() {
    let skipped = format!("{OCTET_COUNT_BYTES_MAX} x");
    let mut framer = Framer::new(SYSLOG_FRAME_BYTES_MAX);
    let step = framer
        .decode(skipped.as_bytes())
        .expect("skipped, not failed");
    assert_eq!(
        step,
        Some((
            Decoded::Oversize {
                bytes: OCTET_COUNT_BYTES_MAX
            },
            skipped.len()
        ))
    );
    assert!(framer.is_skipping());
    let failed = format!("{} x", OCTET_COUNT_BYTES_MAX + 1);
    let error = framing::decode(failed.as_bytes(), SYSLOG_FRAME_BYTES_MAX).expect_err("too large");
    assert!(error.to_string().contains("1048577"), "{error}");
}

#[test]
fn the_captures_pass_the_fuzz_checks() {
    for capture in [OMFWD_LINES, OMFWD_COUNTED] {
        for first in [0u8, 7, 40, 255] {
            let mut data = vec![first];
            data.extend_from_slice(capture);
            fuzz_check::check_syslog_framing(&data);
        }
    }
}

proptest! {
    #[test]
    fn random_messages_round_trip(
        messages in vec((any::<bool>(), any::<bool>(), vec(any::<u8>(), 1..200)), 1..10),
        chunk in 1usize..64,
    ) {
        let max = 150;
        let mut data = Vec::new();
        let mut expected = Vec::new();
        let mut oversize = 0;
        for (counted, crlf, body) in &messages {
            let mut message = body.clone();
            if *counted {
                data.extend_from_slice(format!("{} ", message.len()).as_bytes());
                data.extend_from_slice(&message);
            } else {
                // A line: starts with the PRI's '<', holds no delimiter.
                message.retain(|&byte| byte != b'\n' && byte != 0);
                message.insert(0, b'<');
                if message.last() == Some(&b'\r') {
                    message.push(b'>');
                }
                data.extend_from_slice(&message);
                data.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
            if message.len() > max {
                oversize += 1;
            } else {
                expected.push(message);
            }
        }
        let framed = frame_in_chunks(&data, max, |_| chunk);
        prop_assert_eq!(framed, Framed { messages: expected, oversize, failed: false });
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..400)) {
        fuzz_check::check_syslog_framing(&data);
    }
}
