// Checks on RFC 6587 framing of any bytes, shared by the fuzz target
// `fuzz/fuzz_targets/syslog_framing.rs` and the proptests in
// `tests/framing.rs`. Included with `include!`, so it names everything it
// uses.

/// What a connection made of a byte stream: its messages, how many
/// messages were too long, and whether it ended in an error.
#[derive(Debug, PartialEq, Eq)]
pub struct Framed {
    pub messages: Vec<Vec<u8>>,
    pub oversize: usize,
    pub failed: bool,
}

/// Feeds `data` to a [`Framer`] through a buffer of at most
/// `buffer_bytes_max(max)` bytes, reading `chunk(step)` bytes at a time
/// (as a socket would), and checks every step's invariants.
pub fn frame_in_chunks(data: &[u8], max: usize, mut chunk: impl FnMut(usize) -> usize) -> Framed {
    use cardinal_syslog::framing::{buffer_bytes_max, Decoded, Framer};

    let capacity = buffer_bytes_max(max);
    let mut framer = Framer::new(max);
    let mut buffer: Vec<u8> = Vec::with_capacity(capacity);
    let mut framed = Framed { messages: Vec::new(), oversize: 0, failed: false };
    let mut fed = 0;
    let mut step = 0;
    loop {
        loop {
            match framer.decode(&buffer) {
                Ok(Some((decoded, consumed))) => {
                    assert!(consumed >= 1, "progress");
                    assert!(consumed <= buffer.len(), "consumed {consumed} of {}", buffer.len());
                    match decoded {
                        Decoded::Message(message) => {
                            assert!(!message.is_empty());
                            assert!(message.len() <= max, "{} over {max}", message.len());
                            framed.messages.push(message.to_vec());
                        }
                        Decoded::Oversize { bytes } => {
                            assert!(bytes > max, "oversize {bytes} within {max}");
                            framed.oversize += 1;
                        }
                        Decoded::Skipped { bytes } => assert_eq!(bytes, consumed),
                    }
                    buffer.drain(..consumed);
                }
                Ok(None) => {
                    assert!(buffer.len() < capacity, "a full buffer must decode or fail");
                    break;
                }
                Err(error) => {
                    assert!(!error.to_string().is_empty());
                    assert!(!error.reason().is_empty());
                    framed.failed = true;
                    return framed;
                }
            }
        }
        if fed == data.len() {
            return framed;
        }
        let room = capacity - buffer.len();
        let take = chunk(step).clamp(1, room).min(data.len() - fed);
        buffer.extend_from_slice(&data[fed..fed + take]);
        fed += take;
        step += 1;
    }
}

/// Frames `data` (its first byte picks a small `max`, to reach the
/// too-long paths) read whole, a byte at a time, and in uneven chunks: the
/// results must not depend on how the bytes arrived.
pub fn check_syslog_framing(data: &[u8]) {
    use cardinal_syslog::framing;

    let Some((&first, data)) = data.split_first() else {
        return;
    };
    let max = 1 + usize::from(first) % 64;
    let whole = frame_in_chunks(data, max, |_| usize::MAX);
    let bytes = frame_in_chunks(data, max, |_| 1);
    let uneven = frame_in_chunks(data, max, |step| 1 + step * 7 % 13);
    assert_eq!(whole, bytes);
    assert_eq!(whole, uneven);

    // The stateless first step is the framer's first step.
    let mut framer = framing::Framer::new(max);
    assert_eq!(framing::decode(data, max), framer.decode(data));
}
