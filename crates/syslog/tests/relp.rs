//! RELP frames: what rsyslog's omrelp really sends, split at every byte,
//! packed several to a buffer, at the limits, and random.

use cardinal_syslog::relp::{
    self, Command, FRAME_BYTES_MAX, Frame, RELP_DATA_BYTES_MAX, RSP_ERROR, RelpError, TXNR_MAX,
};
use proptest::collection::vec;
use proptest::prelude::{Just, Strategy, any, prop_assert_eq, prop_oneof, proptest};

mod fuzz_check {
    include!("fuzz/relp_frames.rs");
}

/// rsyslog 8.2302.0 with librelp 1.11.0 (Debian 12), `omrelp` to a test
/// server: `open`, two `syslog` frames from `logger`, `close`. See
/// `data/README.md`.
const OMRELP: &[u8] = include_bytes!("data/rsyslog-omrelp.bin");

/// librelp's `open` offers, byte for byte.
const LIBRELP_OFFERS: &[u8] =
    b"relp_version=0\nrelp_software=librelp,1.11.0,http://librelp.adiscon.com\ncommands=syslog";

/// Every frame in `input`, with where each starts; the input must hold
/// whole frames only.
fn frames(input: &[u8]) -> Vec<(Frame<'_>, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() {
        let (frame, consumed) = relp::decode(&input[at..])
            .expect("valid")
            .expect("whole frames");
        out.push((frame, at, at + consumed));
        at += consumed;
    }
    out
}

#[test]
fn omrelp_session_decodes() {
    let got: Vec<_> = frames(OMRELP)
        .into_iter()
        .map(|(frame, _, _)| frame)
        .collect();
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[0],
        Frame {
            txnr: 1,
            command: Command::Open,
            data: LIBRELP_OFFERS
        }
    );
    assert_eq!(got[1].txnr, 2);
    assert_eq!(got[1].command, Command::Syslog);
    assert_eq!(
        got[1].data,
        &b"<13>2026-11-28T21:10:40.136747+00:00 vm mytag hello relp 1"[..]
    );
    assert_eq!(got[2].txnr, 3);
    assert!(got[2].data.ends_with(b"hello relp 2"));
    assert_eq!(
        got[3],
        Frame {
            txnr: 4,
            command: Command::Close,
            data: b""
        }
    );
}

#[test]
fn omrelp_frames_wait_at_every_split_point() {
    for (frame, start, end) in frames(OMRELP) {
        for cut in start..end {
            assert_eq!(
                relp::decode(&OMRELP[start..cut]),
                Ok(None),
                "frame {} cut at {cut}",
                frame.txnr
            );
        }
        // With the next frame's bytes behind it, the same frame comes back.
        assert_eq!(
            relp::decode(&OMRELP[start..]),
            Ok(Some((frame, end - start)))
        );
    }
}

#[test]
fn the_module_doc_shows_what_omrelp_sent() {
    let doc = include_str!("../src/relp.rs");
    for (frame, start, end) in frames(OMRELP) {
        if frame.txnr == 3 {
            continue; // the doc shows one of the two messages
        }
        let shown = String::from_utf8_lossy(&OMRELP[start..end]).replace('\n', "\\n");
        assert!(doc.contains(&shown), "the module doc lacks {shown}");
    }
}

#[test]
fn open_reply_answers_librelp() {
    let mut out = Vec::new();
    relp::open_reply(1, LIBRELP_OFFERS, "cardinal", &mut out).expect("librelp's offers are fine");
    let expected = b"1 rsp 60 200 OK\nrelp_version=0\nrelp_software=cardinal\ncommands=syslog\n";
    assert_eq!(out, expected, "{}", String::from_utf8_lossy(&out));
    let doc = include_str!("../src/relp.rs");
    let shown = String::from_utf8_lossy(expected)
        .trim_end()
        .replace('\n', "\\n");
    assert!(
        doc.contains(&format!("{shown}\\n")),
        "the module doc shows {shown}"
    );
}

#[test]
fn open_reply_takes_other_versions_and_offers() {
    let mut out = Vec::new();
    let offers = b"relp_version=1\nfuture_offer=a,b\n\ncommands=eventlog,syslog\n";
    relp::open_reply(9, offers, "cardinal,1.0", &mut out).expect("fine");
    assert!(out.starts_with(b"9 rsp "));
    assert!(out.ends_with(b"\nrelp_version=0\nrelp_software=cardinal,1.0\ncommands=syslog\n"));
}

#[test]
fn open_reply_refuses_bad_offers_and_writes_nothing() {
    let cases: &[(&[u8], RelpError)] = &[
        (b"", RelpError::VersionMissing),
        (b"commands=syslog", RelpError::VersionMissing),
        (b"relp_version\ncommands=syslog", RelpError::VersionInvalid),
        (
            b"relp_version=one\ncommands=syslog",
            RelpError::VersionInvalid,
        ),
        (
            b"relp_version=1234567890\ncommands=syslog",
            RelpError::VersionInvalid,
        ),
        (b"relp_version=0", RelpError::SyslogNotOffered),
        (b"relp_version=0\ncommands=", RelpError::SyslogNotOffered),
        (
            b"relp_version=0\ncommands=syslogx,eventlog",
            RelpError::SyslogNotOffered,
        ),
        (b"relp_version=0\nsyslog", RelpError::SyslogNotOffered),
    ];
    for (offers, expected) in cases {
        let mut out = Vec::new();
        let got = relp::open_reply(1, offers, "cardinal", &mut out);
        assert_eq!(
            got.as_ref(),
            Err(expected),
            "{:?}",
            String::from_utf8_lossy(offers)
        );
        assert!(out.is_empty());
        // The error's text makes a one-line rsp 500.
        relp::rsp(1, RSP_ERROR, &expected.to_string(), &mut out);
        assert!(out.starts_with(b"1 rsp "));
        assert_eq!(out.iter().filter(|&&byte| byte == b'\n').count(), 1);
    }
}

#[test]
fn several_frames_in_one_buffer() {
    let mut input = Vec::new();
    for txnr in 1..=5 {
        let data = format!("<13>message {txnr}");
        Frame {
            txnr,
            command: Command::Syslog,
            data: data.as_bytes(),
        }
        .encode(&mut input);
    }
    Frame {
        txnr: 6,
        command: Command::Close,
        data: b"",
    }
    .encode(&mut input);
    input.extend_from_slice(b"7 sys");
    let mut at = 0;
    let mut seen = Vec::new();
    while let Some((frame, consumed)) = relp::decode(&input[at..]).expect("valid") {
        seen.push((
            frame.txnr,
            frame.command.name().to_owned(),
            frame.data.to_vec(),
        ));
        at += consumed;
    }
    assert_eq!(seen.len(), 6);
    assert_eq!(seen[4], (5, "syslog".to_owned(), b"<13>message 5".to_vec()));
    assert_eq!(seen[5], (6, "close".to_owned(), Vec::new()));
    assert_eq!(&input[at..], b"7 sys", "the partial frame stays buffered");
}

#[test]
fn the_largest_data_fits_and_one_byte_more_fails_before_any_data() {
    let data = vec![b'x'; RELP_DATA_BYTES_MAX];
    let mut input = Vec::new();
    Frame {
        txnr: 1,
        command: Command::Syslog,
        data: &data,
    }
    .encode(&mut input);
    let (frame, consumed) = relp::decode(&input).expect("valid").expect("whole");
    assert_eq!(frame.data.len(), RELP_DATA_BYTES_MAX);
    assert_eq!(consumed, input.len());

    let header = format!("1 syslog {} ", RELP_DATA_BYTES_MAX + 1);
    let error = relp::decode(header.as_bytes()).expect_err("over the limit");
    assert_eq!(
        error,
        RelpError::DataTooLong {
            datalen: 131_073,
            max: RELP_DATA_BYTES_MAX
        }
    );
    assert!(error.to_string().contains("131073"), "{error}");
}

#[test]
fn the_longest_frame_is_frame_bytes_max() {
    // Nine-digit txnr, 32-letter command, nine-digit DATALEN (leading zeros).
    let mut input =
        format!("{TXNR_MAX} {} {:09} ", "a".repeat(32), RELP_DATA_BYTES_MAX).into_bytes();
    input.resize(input.len() + RELP_DATA_BYTES_MAX, b'y');
    input.push(b'\n');
    assert_eq!(input.len(), FRAME_BYTES_MAX);
    let (frame, consumed) = relp::decode(&input).expect("valid").expect("whole");
    assert_eq!(consumed, FRAME_BYTES_MAX);
    assert_eq!(frame.command, Command::Other(&"a".repeat(32)));
    assert_eq!(relp::decode(&input[..FRAME_BYTES_MAX - 1]), Ok(None));
}

#[test]
fn the_capture_passes_the_fuzz_checks() {
    fuzz_check::check_relp_frames(OMRELP);
    fuzz_check::check_relp_frames(LIBRELP_OFFERS);
}

/// A command a client may send (never `rsp`).
fn command() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("open".to_owned()),
        Just("syslog".to_owned()),
        Just("close".to_owned()),
        "[a-zA-Z]{1,32}".prop_filter("rsp is the server's", |name| name != "rsp"),
    ]
}

proptest! {
    #[test]
    fn random_frames_round_trip(
        frames in vec((1..=TXNR_MAX, command(), vec(any::<u8>(), 0..600)), 1..8),
        cut in any::<usize>(),
    ) {
        let mut input = Vec::new();
        for (txnr, name, data) in &frames {
            let command = match name.as_str() {
                "open" => Command::Open,
                "syslog" => Command::Syslog,
                "close" => Command::Close,
                other => Command::Other(other),
            };
            Frame { txnr: *txnr, command, data }.encode(&mut input);
        }
        // A prefix decodes the frames it holds whole and waits for the rest.
        let cut = cut % (input.len() + 1);
        let mut at = 0;
        let mut decoded = Vec::new();
        while let Some((frame, consumed)) = relp::decode(&input[at..cut]).expect("valid") {
            decoded.push((frame.txnr, frame.command.name().to_owned(), frame.data.to_vec()));
            at += consumed;
        }
        while let Some((frame, consumed)) = relp::decode(&input[at..]).expect("valid") {
            decoded.push((frame.txnr, frame.command.name().to_owned(), frame.data.to_vec()));
            at += consumed;
        }
        prop_assert_eq!(at, input.len());
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in vec(any::<u8>(), 0..400)) {
        fuzz_check::check_relp_frames(&data);
    }

    #[test]
    fn flipped_bytes_in_real_frames_never_panic(at in any::<usize>(), byte in any::<u8>()) {
        let mut data = OMRELP.to_vec();
        let at = at % data.len();
        data[at] = byte;
        fuzz_check::check_relp_frames(&data);
    }
}
