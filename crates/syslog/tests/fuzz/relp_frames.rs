// Checks on RELP decoding of any bytes, shared by the fuzz target
// `fuzz/fuzz_targets/relp_frames.rs` and the proptests in `tests/relp.rs`.
// Included with `include!`, so it names everything it uses.

/// Decodes frames from the front of `data` until it needs more bytes or
/// errors, checking that each step makes bounded progress and that each
/// frame re-encodes to one that decodes the same; then runs the `open`
/// offer check over `data`.
pub fn check_relp_frames(data: &[u8]) {
    use cardinal_syslog::relp::{
        self, Frame, FRAME_BYTES_MAX, RELP_DATA_BYTES_MAX, RSP_ERROR, TXNR_MAX,
    };

    let mut at = 0;
    loop {
        let rest = &data[at..];
        match relp::decode(rest) {
            Ok(Some((frame, consumed))) => {
                assert!(consumed >= 1, "progress");
                assert!(consumed <= rest.len(), "consumed {consumed} of {}", rest.len());
                assert!(consumed <= FRAME_BYTES_MAX, "a frame fits the buffer bound");
                assert!((1..=TXNR_MAX).contains(&frame.txnr));
                assert!(frame.data.len() <= RELP_DATA_BYTES_MAX);
                // One byte short is never a frame nor an error: it waits.
                assert_eq!(relp::decode(&rest[..consumed - 1]), Ok(None));
                let mut encoded = Vec::new();
                frame.encode(&mut encoded);
                assert!(encoded.len() <= consumed, "leading zeros are the only slack");
                let again: Option<(Frame<'_>, usize)> = relp::decode(&encoded).expect("our encoding decodes");
                assert_eq!(again, Some((frame, encoded.len())));
                at += consumed;
            }
            Ok(None) => {
                assert!(rest.len() < FRAME_BYTES_MAX, "a full buffer must decode or fail");
                break;
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                assert!(!error.reason().is_empty());
                break;
            }
        }
    }

    let mut out = Vec::new();
    match relp::open_reply(1, data, "cardinal,0.0.0", &mut out) {
        Ok(()) => assert!(out.starts_with(b"1 rsp ") && out.ends_with(b"\ncommands=syslog\n")),
        Err(error) => {
            assert!(out.is_empty(), "nothing is written on an error");
            relp::rsp(1, RSP_ERROR, &error.to_string(), &mut out);
            assert_eq!(out.iter().filter(|&&byte| byte == b'\n').count(), 1, "one line");
        }
    }
}
