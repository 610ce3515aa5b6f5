//! RFC 5424 and RFC 3164 headers: the RFCs' own examples, what real
//! senders write (rsyslog's templates, Cisco IOS, devices that add a
//! year), refusals by reason, and properties: generated 5424 messages
//! round-trip their fields, and no input panics.

use cardinal_event::Timestamp;
use cardinal_syslog::header::{Dialect, HeaderError, Message, parse};
use proptest::prelude::*;

fn ts(text: &str) -> Timestamp {
    Timestamp::parse(text.as_bytes()).expect("a test timestamp")
}

/// When the table's messages arrive.
fn now() -> Timestamp {
    ts("2026-11-28T21:00:00Z")
}

/// The expected fields of one message.
struct Want {
    dialect: Dialect,
    pri: u8,
    timestamp: Option<&'static str>,
    hostname: Option<&'static str>,
    app_name: Option<&'static str>,
    procid: Option<&'static str>,
    msgid: Option<&'static str>,
    structured_data: Option<&'static str>,
    body: &'static [u8],
}

const BASE_5424: Want = Want {
    dialect: Dialect::Rfc5424,
    pri: 13,
    timestamp: None,
    hostname: None,
    app_name: None,
    procid: None,
    msgid: None,
    structured_data: None,
    body: b"",
};

const BASE_3164: Want = Want {
    dialect: Dialect::Rfc3164,
    ..BASE_5424
};

fn check(input: &[u8], now: Timestamp, want: &Want) {
    let m =
        parse(input, now).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(input)));
    let got = (
        m.dialect,
        m.facility * 8 + m.severity,
        m.timestamp.map(|t| t.0),
        m.hostname,
        m.app_name,
        m.procid,
        m.msgid,
        m.structured_data,
        m.body,
    );
    let expected = (
        want.dialect,
        want.pri,
        want.timestamp.map(|t| ts(t).0),
        want.hostname,
        want.app_name,
        want.procid,
        want.msgid,
        want.structured_data,
        want.body,
    );
    assert_eq!(got, expected, "{:?}", String::from_utf8_lossy(input));
}

#[test]
fn rfc5424_examples() {
    // RFC 5424 §6.5, examples 1 to 4 (BOM as bytes).
    check(
        b"<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - \xEF\xBB\xBF'su root' failed for lonvick on /dev/pts/8",
        now(),
        &Want {
            pri: 34,
            timestamp: Some("2003-10-11T22:14:15.003Z"),
            hostname: Some("mymachine.example.com"),
            app_name: Some("su"),
            msgid: Some("ID47"),
            body: b"'su root' failed for lonvick on /dev/pts/8",
            ..BASE_5424
        },
    );
    check(
        b"<165>1 2003-08-24T05:14:15.000003-07:00 192.0.2.1 myproc 8710 - - %% It's time to make the do-nuts.",
        now(),
        &Want {
            pri: 165,
            timestamp: Some("2003-08-24T12:14:15Z"),
            hostname: Some("192.0.2.1"),
            app_name: Some("myproc"),
            procid: Some("8710"),
            body: b"%% It's time to make the do-nuts.",
            ..BASE_5424
        },
    );
    check(
        b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"] \xEF\xBB\xBFAn application event log entry...",
        now(),
        &Want {
            pri: 165,
            timestamp: Some("2003-10-11T22:14:15.003Z"),
            hostname: Some("mymachine.example.com"),
            app_name: Some("evntslog"),
            msgid: Some("ID47"),
            structured_data: Some(
                "[exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"]",
            ),
            body: b"An application event log entry...",
            ..BASE_5424
        },
    );
    let four = b"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][examplePriority@32473 class=\"high\"]";
    check(
        four,
        now(),
        &Want {
            pri: 165,
            timestamp: Some("2003-10-11T22:14:15.003Z"),
            hostname: Some("mymachine.example.com"),
            app_name: Some("evntslog"),
            msgid: Some("ID47"),
            structured_data: Some(
                "[exampleSDID@32473 iut=\"3\" eventSource=\"Application\" eventID=\"1011\"][examplePriority@32473 class=\"high\"]",
            ),
            ..BASE_5424
        },
    );
    let m = parse(four, now()).expect("parses");
    assert_eq!(
        m.sd_param("exampleSDID@32473", "eventSource").as_deref(),
        Some("Application")
    );
    assert_eq!(
        m.sd_param("examplePriority@32473", "class").as_deref(),
        Some("high")
    );
    assert_eq!(m.sd_param("examplePriority@32473", "iut"), None);
    assert_eq!(m.sd_param("nosuch", "class"), None);
}

#[test]
fn rfc5424_timestamps() {
    // RFC 5424 §6.2.3.1's valid examples, and its invalid ones.
    for (text, utc) in [
        ("1985-04-12T23:20:50.52Z", "1985-04-12T23:20:50.520Z"),
        ("1985-04-12T19:20:50.52-04:00", "1985-04-12T23:20:50.520Z"),
        ("2003-10-11T22:14:15.003Z", "2003-10-11T22:14:15.003Z"),
        ("2003-08-24T05:14:15.000003-07:00", "2003-08-24T12:14:15Z"),
        ("2026-11-28T21:07:11+05:30", "2026-11-28T15:37:11Z"),
        ("2026-11-28T21:07:11.999999z", "2026-11-28T21:07:11.999Z"),
        ("2026-12-31T23:30:00-01:00", "2027-01-01T00:30:00Z"),
    ] {
        let input = format!("<13>1 {text} - - - - -");
        let m = parse(input.as_bytes(), now()).expect("parses");
        assert_eq!(m.timestamp, Some(ts(utc)), "{text}");
    }
    for text in [
        "2003-08-24T05:14:15.000000003-07:00", // more than 6 fraction digits
        "2026-11-28T21:07:11",                 // no offset
        "2026-11-28 21:07:11Z",                // no T
        "2026-11-28T21:07Z",                   // no seconds
        "2026-11-28T21:07:11.Z",               // empty fraction
        "2026-11-28T21:07:11+0100",            // offset without ':'
        "2026-02-30T00:00:00Z",                // no such date
        "2026-11-28T24:00:00Z",                // no such hour
        "1793491207",                          // epoch seconds
        "2026-11-28",                          // a date alone
    ] {
        let input = format!("<13>1 {text} - - - - -");
        let e = parse(input.as_bytes(), now()).expect_err("is refused");
        assert_eq!(e.reason(), "timestamp", "{text}: {e}");
    }
}

#[test]
fn rfc5424_variants() {
    // NILVALUEs everywhere, MSG absent.
    check(
        b"<0>1 - - - - - -",
        now(),
        &Want {
            pri: 0,
            ..BASE_5424
        },
    );
    // MSG present but empty; trailing CR LF dropped.
    check(
        b"<191>1 - - - - - - \r\n",
        now(),
        &Want {
            pri: 191,
            ..BASE_5424
        },
    );
    // A body's own trailing line ends go too; inner ones stay.
    check(
        b"<13>1 - h a p m - line one\nline two\n\n",
        now(),
        &Want {
            hostname: Some("h"),
            app_name: Some("a"),
            procid: Some("p"),
            msgid: Some("m"),
            body: b"line one\nline two",
            ..BASE_5424
        },
    );
    // rsyslog's RSYSLOG_SyslogProtocol23Format: microseconds, +00:00, SD.
    check(
        b"<86>1 2026-11-28T21:07:11.123456+00:00 web1 sshd 4242 - [timeQuality tzKnown=\"1\" isSynced=\"1\" syncAccuracy=\"123\"] Accepted publickey for alice\n",
        now(),
        &Want {
            pri: 86,
            timestamp: Some("2026-11-28T21:07:11.123Z"),
            hostname: Some("web1"),
            app_name: Some("sshd"),
            procid: Some("4242"),
            structured_data: Some(
                "[timeQuality tzKnown=\"1\" isSynced=\"1\" syncAccuracy=\"123\"]",
            ),
            body: b"Accepted publickey for alice",
            ..BASE_5424
        },
    );
    // A BOM and non-UTF-8 bytes in MSG: MSG-ANY is any octets.
    check(
        b"<13>1 - - - - - - \xEF\xBB\xBF\xFF\xFEraw",
        now(),
        &Want {
            body: b"\xFF\xFEraw",
            ..BASE_5424
        },
    );
    // Fields at their RFC limits.
    let host = "h".repeat(255);
    let app = "a".repeat(48);
    let procid = "p".repeat(128);
    let msgid = "m".repeat(32);
    let input = format!("<13>1 - {host} {app} {procid} {msgid} - x");
    let m = parse(input.as_bytes(), now()).expect("parses");
    assert_eq!(
        (m.hostname, m.app_name, m.procid, m.msgid),
        (
            Some(&host[..]),
            Some(&app[..]),
            Some(&procid[..]),
            Some(&msgid[..])
        )
    );
}

#[test]
fn structured_data_escapes() {
    let input = r#"<13>1 - - - - - [a@1 q="say \"hi\"" b="back\\slash" r="x\]y" odd="c:\dir" u="ünï"][b@2 q="2" q="dup"] m"#;
    let m = parse(input.as_bytes(), now()).expect("parses");
    assert_eq!(m.sd_param("a@1", "q").as_deref(), Some(r#"say "hi""#));
    assert_eq!(m.sd_param("a@1", "b").as_deref(), Some(r"back\slash"));
    assert_eq!(m.sd_param("a@1", "r").as_deref(), Some("x]y"));
    // A backslash before another character is itself (RFC 5424 §6.3.3).
    assert_eq!(m.sd_param("a@1", "odd").as_deref(), Some(r"c:\dir"));
    assert_eq!(m.sd_param("a@1", "u").as_deref(), Some("ünï"));
    // The first of a repeated parameter.
    assert_eq!(m.sd_param("b@2", "q").as_deref(), Some("2"));
    assert!(matches!(
        m.sd_param("b@2", "q"),
        Some(std::borrow::Cow::Borrowed(_))
    ));
    assert_eq!(m.body, b"m");
    // An element with no parameters, and an unescaped ']' inside quotes.
    let m = parse(br#"<13>1 - - - - - [empty][x v="a]b"]"#, now()).expect("parses");
    assert_eq!(m.structured_data, Some(r#"[empty][x v="a]b"]"#));
    assert_eq!(m.sd_param("x", "v").as_deref(), Some("a]b"));
}

#[test]
fn rfc3164_examples() {
    // RFC 3164 §5.4's examples; the year comes from the arrival.
    check(
        b"<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8",
        now(),
        &Want {
            pri: 34,
            timestamp: Some("2026-10-11T22:14:15Z"),
            hostname: Some("mymachine"),
            app_name: Some("su"),
            body: b"'su root' failed for lonvick on /dev/pts/8",
            ..BASE_3164
        },
    );
    check(
        b"Use the BFG!",
        now(),
        &Want {
            body: b"Use the BFG!",
            ..BASE_3164
        },
    );
    check(
        b"<13>Feb  5 17:32:18 10.0.0.99 Use the BFG!",
        now(),
        &Want {
            timestamp: Some("2026-02-05T17:32:18Z"),
            hostname: Some("10.0.0.99"),
            body: b"Use the BFG!",
            ..BASE_3164
        },
    );
    // The RFC says a relay reads "CST" as the hostname here.
    check(
        b"<165>Aug 24 05:34:00 CST 1987 mymachine myproc[10]: %% It's time to make the do-nuts.",
        now(),
        &Want {
            pri: 165,
            timestamp: Some("2026-08-24T05:34:00Z"),
            hostname: Some("CST"),
            body: b"1987 mymachine myproc[10]: %% It's time to make the do-nuts.",
            ..BASE_3164
        },
    );
    // No valid timestamp: all of it is content.
    check(
        b"<0>1990 Oct 22 10:52:01 TZ-6 scapegoat.dmz.example.org 10.1.2.3 sched[0]: That's All Folks!",
        now(),
        &Want {
            pri: 0,
            body: b"1990 Oct 22 10:52:01 TZ-6 scapegoat.dmz.example.org 10.1.2.3 sched[0]: That's All Folks!",
            ..BASE_3164
        },
    );
    check(
        b"<0>Oct 22 10:52:12 scapegoat 1990 Oct 22 10:52:01 TZ-6 scapegoat.dmz.example.org 10.1.2.3 sched[0]: That's All Folks!",
        now(),
        &Want {
            pri: 0,
            timestamp: Some("2026-10-22T10:52:12Z"),
            hostname: Some("scapegoat"),
            body: b"1990 Oct 22 10:52:01 TZ-6 scapegoat.dmz.example.org 10.1.2.3 sched[0]: That's All Folks!",
            ..BASE_3164
        },
    );
}

#[test]
fn rfc3164_real_world() {
    let cases: &[(&[u8], Want)] = &[
        // rsyslog's RSYSLOG_TraditionalForwardFormat, a padded day.
        (
            b"<30>Nov  1 08:00:00 web1 systemd[1]: Started Session 7.",
            Want {
                pri: 30,
                timestamp: Some("2026-11-01T08:00:00Z"),
                hostname: Some("web1"),
                app_name: Some("systemd"),
                procid: Some("1"),
                body: b"Started Session 7.",
                ..BASE_3164
            },
        ),
        // A zero-padded and a bare day; a month in capitals.
        (
            b"<13>Nov 01 08:00:00 web1 app: x",
            Want {
                timestamp: Some("2026-11-01T08:00:00Z"),
                hostname: Some("web1"),
                app_name: Some("app"),
                body: b"x",
                ..BASE_3164
            },
        ),
        (
            b"<13>NOV 1 08:00:00 web1 app: x",
            Want {
                timestamp: Some("2026-11-01T08:00:00Z"),
                hostname: Some("web1"),
                app_name: Some("app"),
                body: b"x",
                ..BASE_3164
            },
        ),
        // A year after the day, as some devices send.
        (
            b"<13>Nov 28 2025 08:00:00 fw01 kernel: drop",
            Want {
                timestamp: Some("2025-11-28T08:00:00Z"),
                hostname: Some("fw01"),
                app_name: Some("kernel"),
                body: b"drop",
                ..BASE_3164
            },
        ),
        // No hostname (local /dev/log style).
        (
            b"<38>Nov 28 20:59:00 sshd[42]: Accepted publickey",
            Want {
                pri: 38,
                timestamp: Some("2026-11-28T20:59:00Z"),
                app_name: Some("sshd"),
                procid: Some("42"),
                body: b"Accepted publickey",
                ..BASE_3164
            },
        ),
        // A [pid] without the colon.
        (
            b"<13>Nov 28 20:59:00 host myproc[10] started",
            Want {
                timestamp: Some("2026-11-28T20:59:00Z"),
                hostname: Some("host"),
                app_name: Some("myproc"),
                procid: Some("10"),
                body: b"started",
                ..BASE_3164
            },
        ),
        // An IPv6 hostname is not a tag.
        (
            b"<13>Nov 28 20:59:00 fe80::1 app: x",
            Want {
                timestamp: Some("2026-11-28T20:59:00Z"),
                hostname: Some("fe80::1"),
                app_name: Some("app"),
                body: b"x",
                ..BASE_3164
            },
        ),
        // A tag and nothing after it.
        (
            b"<13>Nov 28 20:59:00 host app:\n",
            Want {
                timestamp: Some("2026-11-28T20:59:00Z"),
                hostname: Some("host"),
                app_name: Some("app"),
                ..BASE_3164
            },
        ),
        // A timestamp alone.
        (
            b"<13>Nov 28 20:59:00",
            Want {
                timestamp: Some("2026-11-28T20:59:00Z"),
                ..BASE_3164
            },
        ),
        // rsyslog's RSYSLOG_ForwardFormat: RFC 3339 in a 3164 frame.
        (
            b"<13>2026-11-28T21:07:11.123456+01:00 web1 app[5]: msg",
            Want {
                timestamp: Some("2026-11-28T20:07:11.123Z"),
                hostname: Some("web1"),
                app_name: Some("app"),
                procid: Some("5"),
                body: b"msg",
                ..BASE_3164
            },
        ),
        // rsyslog's RSYSLOG_FileFormat and TraditionalFileFormat lines: no PRI.
        (
            b"2026-11-28T21:07:11.123456+00:00 web1 kernel: msg\n",
            Want {
                timestamp: Some("2026-11-28T21:07:11.123Z"),
                hostname: Some("web1"),
                app_name: Some("kernel"),
                body: b"msg",
                ..BASE_3164
            },
        ),
        (
            b"Nov 28 21:07:11 web1 kernel: msg",
            Want {
                timestamp: Some("2026-11-28T21:07:11Z"),
                hostname: Some("web1"),
                app_name: Some("kernel"),
                body: b"msg",
                ..BASE_3164
            },
        ),
        // Cisco IOS: sequence number, '*', milliseconds, ':' after the time.
        (
            b"<189>123: *Mar  1 00:01:02.123: %SYS-5-CONFIG_I: Configured from console by vty0",
            Want {
                pri: 189,
                timestamp: Some("2026-03-01T00:01:02.123Z"),
                app_name: Some("%SYS-5-CONFIG_I"),
                body: b"Configured from console by vty0",
                ..BASE_3164
            },
        ),
        (
            b"<187>45: Nov 27 10:00:00.456 UTC: %LINK-3-UPDOWN: Interface Gi0/1, changed state to up",
            Want {
                pri: 187,
                timestamp: Some("2026-11-27T10:00:00.456Z"),
                app_name: Some("%LINK-3-UPDOWN"),
                body: b"Interface Gi0/1, changed state to up",
                ..BASE_3164
            },
        ),
        // No timestamp, a tag: the tag is still read.
        (
            b"<13>myapp[12]: hello",
            Want {
                app_name: Some("myapp"),
                procid: Some("12"),
                body: b"hello",
                ..BASE_3164
            },
        ),
        // Something month-like that is no timestamp is content.
        (
            b"<13>May I help you?",
            Want {
                body: b"May I help you?",
                ..BASE_3164
            },
        ),
        // A BOM before a 3164 body.
        (
            b"<13>Nov 28 20:59:00 host app: \xEF\xBB\xBFtext",
            Want {
                timestamp: Some("2026-11-28T20:59:00Z"),
                hostname: Some("host"),
                app_name: Some("app"),
                body: b"text",
                ..BASE_3164
            },
        ),
    ];
    for (input, want) in cases {
        check(input, now(), want);
    }
}

#[test]
fn rfc3164_year_inference() {
    let year_of = |input: &[u8], now: &str| {
        parse(input, ts(now))
            .expect("parses")
            .timestamp
            .expect("parses")
    };
    // Last December's message arriving in January.
    assert_eq!(
        year_of(b"<13>Dec 31 23:00:00 h a: x", "2026-01-02T00:00:00Z"),
        ts("2025-12-31T23:00:00Z")
    );
    // A fast clock across the new year.
    assert_eq!(
        year_of(b"<13>Jan  1 00:01:00 h a: x", "2026-12-31T23:59:00Z"),
        ts("2027-01-01T00:01:00Z")
    );
    // Up to a week ahead stays this year; more is last year's.
    assert_eq!(
        year_of(b"<13>Dec  5 12:00:00 h a: x", "2026-11-28T12:00:00Z"),
        ts("2026-12-05T12:00:00Z")
    );
    assert_eq!(
        year_of(b"<13>Dec  6 12:00:01 h a: x", "2026-11-28T12:00:00Z"),
        ts("2025-12-06T12:00:01Z")
    );
    // Feb 29 goes to the leap year at hand.
    assert_eq!(
        year_of(b"<13>Feb 29 12:00:00 h a: x", "2028-03-01T00:00:00Z"),
        ts("2028-02-29T12:00:00Z")
    );
    assert_eq!(
        year_of(b"<13>Feb 29 12:00:00 h a: x", "2029-01-10T00:00:00Z"),
        ts("2028-02-29T12:00:00Z")
    );
    let e =
        parse(b"<13>Feb 29 12:00:00 h a: x", ts("2026-06-01T00:00:00Z")).expect_err("is refused");
    assert_eq!(e.reason(), "timestamp", "{e}");
    // A clock at the ends of the range does not break the arithmetic.
    for now in [Timestamp(i64::MIN), Timestamp(i64::MAX), Timestamp(0)] {
        let _ = parse(b"<13>Jan  1 00:00:00 h a: x", now);
        let _ = parse(b"<13>Dec 31 23:59:59 h a: x", now);
    }
}

#[test]
fn refusals_name_their_reason() {
    let long = |n: usize| "x".repeat(n);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"".to_vec(), "empty"),
        (b"\r\n".to_vec(), "empty"),
        (b"<192>1 - - - - - -".to_vec(), "pri"),
        (b"<>x".to_vec(), "pri"),
        (b"<1234>x".to_vec(), "pri"),
        (b"<13".to_vec(), "pri"),
        (b"<1a>x".to_vec(), "pri"),
        (b"<13>2 2026-11-28T21:07:11Z - - - - -".to_vec(), "version"),
        (b"<13>12 - - - - - -".to_vec(), "version"),
        (b"<13>1 ".to_vec(), "timestamp"),
        (b"<13>1 -".to_vec(), "hostname"),
        (b"<13>1 -  app - - -".to_vec(), "hostname"),
        (
            format!("<13>1 - {} - - - -", long(256)).into_bytes(),
            "hostname",
        ),
        (b"<13>1 - h\x01st - - - -".to_vec(), "hostname"),
        (
            format!("<13>1 - - {} - - -", long(49)).into_bytes(),
            "app_name",
        ),
        (
            format!("<13>1 - - - {} - -", long(129)).into_bytes(),
            "procid",
        ),
        (
            format!("<13>1 - - - - {} -", long(33)).into_bytes(),
            "msgid",
        ),
        (b"<13>1 - - - - -".to_vec(), "structured_data"),
        (b"<13>1 - - - - - x".to_vec(), "structured_data"),
        (b"<13>1 - - - - - -x".to_vec(), "structured_data"),
        (b"<13>1 - - - - - [".to_vec(), "structured_data"),
        (b"<13>1 - - - - - []".to_vec(), "structured_data"),
        (b"<13>1 - - - - - [id".to_vec(), "structured_data"),
        (b"<13>1 - - - - - [id a=b]".to_vec(), "structured_data"),
        (b"<13>1 - - - - - [id a=\"b]".to_vec(), "structured_data"),
        (b"<13>1 - - - - - [id a=\"b\"]x".to_vec(), "structured_data"),
        // After a space, a '[' is MSG, not another element.
        (b"<13>1 - - - - - [id a=\"b\"] [id2]".to_vec(), "ok"),
        (b"<13>1 - - - - - [id  a=\"b\"]".to_vec(), "structured_data"),
        (
            format!("<13>1 - - - - - [{}]", long(33)).into_bytes(),
            "structured_data",
        ),
        (
            format!("<13>1 - - - - - [id {}=\"\"]", long(33)).into_bytes(),
            "structured_data",
        ),
        (b"<13>1 - - - - - [id a=\"\xFF\"]".to_vec(), "utf8"),
        (b"<13>Feb 30 12:00:00 h a: x".to_vec(), "timestamp"),
        (b"<13>Nov 28 25:00:00 h a: x".to_vec(), "timestamp"),
        (b"<13>Nov 32 12:00:00 h a: x".to_vec(), "timestamp"),
        (b"<13>Nov 28 2025 12:00:00 h a: x".to_vec(), "ok"),
        (b"<13>2026-11-28Tjunk h a: x".to_vec(), "timestamp"),
        (b"<13>2026-11-28T21:07:11 h a: x".to_vec(), "timestamp"),
    ];
    for (input, reason) in cases {
        let got = parse(&input, now());
        let label = String::from_utf8_lossy(&input);
        match (reason, got) {
            ("ok", Ok(_)) => {}
            ("ok", Err(e)) => panic!("{label:?}: {e}"),
            (_, Ok(m)) => panic!("{label:?}: parsed as {m:?}, expected {reason}"),
            (_, Err(e)) => {
                assert_eq!(e.reason(), reason, "{label:?}: {e}");
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert_eq!(
        parse(b"<13>1 - - - - - [id a=\"\xFF\"]", now()),
        Err(HeaderError::Utf8 { at: 23 })
    );
}

/// One generated RFC 5424 message: its parts, and how it is written.
#[derive(Debug, Clone)]
struct Generated {
    pri: u8,
    /// UTC seconds, microseconds, fraction digits written, offset minutes.
    timestamp: Option<(i64, u32, usize, i64)>,
    hostname: Option<String>,
    app_name: Option<String>,
    procid: Option<String>,
    msgid: Option<String>,
    /// Elements of (SD-ID, params of (name, unescaped value)).
    sd: Vec<(String, Vec<(String, String)>)>,
    body: Option<Vec<u8>>,
}

fn printable(max: usize) -> impl Strategy<Value = Option<String>> {
    proptest::option::of(
        proptest::string::string_regex(&format!("[!-~]{{1,{max}}}"))
            .expect("a valid regex")
            .prop_filter("'-' is the NILVALUE", |s| s != "-"),
    )
}

fn sd_name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[!#-<>-\\\\^-~]{1,30}").expect("a valid regex")
}

fn generated() -> impl Strategy<Value = Generated> {
    let first = Timestamp::MIN.0 / 1000 + 86_400;
    let last = Timestamp::MAX.0 / 1000 - 86_400;
    let timestamp = proptest::option::of((
        first..=last,
        0u32..1_000_000,
        0usize..=6,
        -(23 * 60 + 59)..=(23i64 * 60 + 59),
    ));
    let sd = proptest::collection::vec(
        (
            sd_name(),
            proptest::collection::vec((sd_name(), any::<String>()), 0..4),
        ),
        0..4,
    );
    let body = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64));
    (
        0u8..=191,
        timestamp,
        printable(255),
        printable(48),
        printable(128),
        printable(32),
        sd,
        body,
    )
        .prop_map(
            |(pri, timestamp, hostname, app_name, procid, msgid, sd, body)| {
                // Number ids and names so that each is unique.
                let sd = sd
                    .into_iter()
                    .enumerate()
                    .map(|(i, (id, params))| {
                        let params = params
                            .into_iter()
                            .enumerate()
                            .map(|(j, (name, value))| (format!("{j}{name}"), value))
                            .collect();
                        (format!("{i}{id}"), params)
                    })
                    .collect();
                Generated {
                    pri,
                    timestamp,
                    hostname,
                    app_name,
                    procid,
                    msgid,
                    sd,
                    body,
                }
            },
        )
}

fn render(g: &Generated) -> Vec<u8> {
    let nil = |f: &Option<String>| f.clone().unwrap_or_else(|| "-".into());
    let ts = match g.timestamp {
        None => "-".to_owned(),
        Some((secs, micros, digits, offset)) => {
            let local = Timestamp(secs * 1000 + offset * 60_000).to_string();
            let fraction = if digits == 0 {
                String::new()
            } else {
                format!(".{}", &format!("{micros:06}")[..digits])
            };
            let zone = if offset == 0 && micros % 2 == 0 {
                "Z".to_owned()
            } else {
                let sign = if offset < 0 { '-' } else { '+' };
                let o = offset.abs();
                format!("{sign}{:02}:{:02}", o / 60, o % 60)
            };
            format!("{}{fraction}{zone}", &local[..19])
        }
    };
    let mut out = format!(
        "<{}>1 {ts} {} {} {} {} ",
        g.pri,
        nil(&g.hostname),
        nil(&g.app_name),
        nil(&g.procid),
        nil(&g.msgid)
    )
    .into_bytes();
    if g.sd.is_empty() {
        out.push(b'-');
    }
    for (id, params) in &g.sd {
        out.extend_from_slice(format!("[{id}").as_bytes());
        for (name, value) in params {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace(']', "\\]");
            out.extend_from_slice(format!(" {name}=\"{escaped}\"").as_bytes());
        }
        out.push(b']');
    }
    if let Some(body) = &g.body {
        out.push(b' ');
        out.extend_from_slice(body);
    }
    out
}

fn expected_body(g: &Generated) -> Vec<u8> {
    let Some(body) = &g.body else {
        return Vec::new();
    };
    let end = body
        .iter()
        .rposition(|&b| b != b'\r' && b != b'\n')
        .map_or(0, |i| i + 1);
    let body = &body[..end];
    body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body).to_vec()
}

fn assert_round_trip(g: &Generated, m: &Message<'_>) {
    assert_eq!(m.dialect, Dialect::Rfc5424);
    assert_eq!((m.facility, m.severity), (g.pri / 8, g.pri % 8));
    let want_ts = g.timestamp.map(|(secs, micros, digits, _)| {
        let fraction_ms = i64::from(micros / 1000);
        let kept = match digits {
            0 => 0,
            1 => fraction_ms / 100 * 100,
            2 => fraction_ms / 10 * 10,
            _ => fraction_ms,
        };
        Timestamp(secs * 1000 + kept)
    });
    assert_eq!(m.timestamp, want_ts);
    assert_eq!(m.hostname, g.hostname.as_deref());
    assert_eq!(m.app_name, g.app_name.as_deref());
    assert_eq!(m.procid, g.procid.as_deref());
    assert_eq!(m.msgid, g.msgid.as_deref());
    assert_eq!(m.structured_data.is_some(), !g.sd.is_empty());
    for (id, params) in &g.sd {
        for (name, value) in params {
            assert_eq!(m.sd_param(id, name).as_deref(), Some(&value[..]));
        }
    }
    assert_eq!(m.body, &expected_body(g)[..]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_5424_round_trips(g in generated()) {
        let bytes = render(&g);
        let m = parse(&bytes, Timestamp(0)).map_err(|e| {
            TestCaseError::fail(format!("{:?}: {e}", String::from_utf8_lossy(&bytes)))
        })?;
        assert_round_trip(&g, &m);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), now in any::<i64>()) {
        let _ = parse(&bytes, Timestamp(now));
        for prefix in [&b"<13>1 "[..], b"<13>", b"<13>Nov 28 12:00:00 ", b"<13>1 - - - - - ["] {
            let mut input = prefix.to_vec();
            input.extend_from_slice(&bytes);
            if let Ok(m) = parse(&input, Timestamp(now)) {
                let _ = m.sd_param("a", "b");
            }
        }
    }

    #[test]
    fn header_like_text_never_panics(text in "(<[0-9]{1,3}>)?(1 )?[ -~]{0,80}") {
        let _ = parse(text.as_bytes(), Timestamp(1_800_000_000_000));
    }
}

/// Hand-made messages (fields that parse would never give) are safe to
/// ask for SD parameters.
#[test]
fn sd_param_on_hand_made_text() {
    for sd in [
        "[",
        "[a",
        "[a b",
        "[a b=",
        "[a b=\"",
        "[a b=\"\\",
        "x",
        "",
        "[a b=\"c\"",
        "[a b=\"c\" ",
    ] {
        let m = Message {
            dialect: Dialect::Rfc5424,
            facility: 0,
            severity: 0,
            timestamp: None,
            hostname: None,
            app_name: None,
            procid: None,
            msgid: None,
            structured_data: Some(sd),
            body: b"",
        };
        let _ = m.sd_param("a", "b");
    }
}
