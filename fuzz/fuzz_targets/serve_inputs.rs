//! What `cardinal serve` reads from requests and its own files besides
//! frames: a log record's envelope, the idempotency-key table image, a
//! `Content-Type` header, a snapshot's Kafka offsets, a peer's state body
//! and the Kafka flags. None may panic; what decodes re-encodes equal.
#![no_main]

use cardinal_server::keys::KeyTable;
use cardinal_server::net::http::content_type;
use cardinal_server::service::Envelope;
use cardinal_server::source::Offsets;
use cardinal_server::source::kafka::{Assignment, topic_arg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            if let Ok(envelope) = Envelope::decode(rest) {
                assert_eq!(envelope.encode(), rest);
            }
        }
        1 => {
            if let Ok(table) = KeyTable::decode(rest, 1_000) {
                let mut again = Vec::new();
                table.encode(&mut again);
                assert_eq!(KeyTable::decode(&again, 0).map(|t| t.len()).ok(), Some(table.len()));
            }
        }
        2 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = content_type(text);
                let _ = topic_arg(text);
                if let Ok(assignment) = Assignment::partitions(text) {
                    let _ = assignment.owned("t", 64);
                }
                if let Ok(assignment) = Assignment::node(text) {
                    let _ = assignment.owned("t", 64);
                }
            }
        }
        3 => {
            if let Ok(offsets) = Offsets::decode(rest) {
                assert_eq!(offsets.encode(), rest);
            }
        }
        _ => {
            let _ = cardinal_server::net::cluster::decode_state(rest);
        }
    }
});
