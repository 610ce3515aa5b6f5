//! What `cardinal serve` reads from requests and its own files besides
//! frames: a log record's envelope, the idempotency-key table image and a
//! `Content-Type` header. None may panic; what decodes re-encodes equal.
#![no_main]

use cardinal_server::keys::KeyTable;
use cardinal_server::net::http::content_type;
use cardinal_server::service::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 3 {
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
        _ => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = content_type(text);
            }
        }
    }
});
