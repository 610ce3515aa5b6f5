// The checks of the `protocol_frames` fuzz target, included by it
// (`fuzz/fuzz_targets/protocol_frames.rs`) and by `tests/fuzz_replay.rs`,
// so a replayed input meets exactly what the fuzzer ran.
//
// Any bytes as a stream of protocol frames: the decoder returns frames,
// "need more" or an error, never a panic. A frame it accepts is exactly
// the bytes it took, checksum aside. Every frame is also handed to the
// server's connection state machine and to a client's, which must refuse
// or act, never panic (batches the state machine hands on are the
// service's to judge, tested in `tests/lossy.rs`). The same bytes go to
// the deduplication table's image decoder, whose accepted tables of the
// current version write the image back byte for byte (checksum aside),
// and whose accepted version 1 tables write an image that decodes to as
// many clients.

/// Runs every check on `data`.
pub fn check_protocol_frames(data: &[u8]) {
    use bytes::{Bytes, BytesMut};
    use cardinal_server::{
        Action, BatchId, Client, ClientConfig, ClientId, Connection, Decoder, DedupTable, Format,
        Outgoing, ServerConfig, StreamName, encode,
    };

    let decoder = Decoder::default();
    let mut buf = BytesMut::from(data);
    let mut server = Connection::new(&ServerConfig::default());
    let mut client = Client::new(ClientConfig::new(ClientId::new("fuzz").expect("valid")));
    for n in 0..4u8 {
        client
            .push(Outgoing {
                stream: StreamName::new("s").expect("valid"),
                format: Format::Csv,
                header: false,
                payload: Bytes::from(vec![n, b'\n']),
            })
            .expect("room");
    }
    let _hello = client.connected();
    let mut client_alive = true;
    let mut offset = 0;
    loop {
        let before = buf.len();
        let frame = match decoder.decode_buf(&mut buf) {
            Ok(Some(frame)) => frame,
            Ok(None) | Err(_) => break,
        };
        let taken = &data[offset..offset + (before - buf.len())];
        offset += taken.len();
        let mut again = Vec::new();
        encode(&frame, &mut again);
        assert_eq!(again.len(), taken.len());
        assert_eq!(again[..5], taken[..5]);
        assert_eq!(again[9..], taken[9..]);

        if !server.is_closed() {
            match server.receive(frame.clone(), |_| Ok(Some(BatchId(3)))) {
                Action::Offer(batch) => assert!(server.client().is_some(), "{:?}", batch.id),
                Action::Send(_) | Action::Close(_) | Action::Nothing => {}
            }
        }
        if client_alive {
            match client.receive(frame) {
                Ok(_) => while client.poll_send().is_some() {},
                Err(_) => client_alive = false,
            }
        }
    }

    if let Ok(table) = DedupTable::decode(data, 1_000) {
        let mut image = Vec::new();
        table.encode(&mut image);
        if data[8..12] == 2u32.to_le_bytes() {
            assert_eq!(image.len(), data.len());
            assert_eq!(image[..image.len() - 4], data[..data.len() - 4]);
        }
        let back = DedupTable::decode(&image, 0).expect("an image encode wrote");
        assert_eq!(back.len(), table.len());
    }
}
