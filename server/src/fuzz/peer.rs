//! Targets `peer_wire` and `parked_chunks`: what a peer (or anyone reaching the peer port)
//! sends, decoded as the peer service decodes it.
//!
//! - `peer_wire`: arbitrary and mutated bytes into `Wire::decode` and `PeerEnvelope`'s
//!   protobuf decoding. A payload either fails with an error or decodes to a message that
//!   encodes and decodes back to itself (so what the node acts on is what was sent).
//!   What the election and the log do with structurally valid hostile messages is fuzzed
//!   in their crates (`lease/src/fuzz.rs`, `kvstore/src/fuzz/`).
//! - `parked_chunks`: a transfer notice and a stream of chunks into the reassembly: it
//!   never panics, never holds more than the notice announced (itself capped), and a
//!   completed transfer is exactly the announced size and the chunks' data in order.

use super::support;
use crate::forward::MasterRequest;
use crate::peer::parked::{ParkedKind, ParkedNotice, PullError, Reassembly, MAX_TRANSFER_BYTES};
use crate::peer::proto as pb;
use crate::peer::wire::Wire;
use leasekv_kvstore::log::LogMessage;
use leasekv_kvstore::Command;
use proptest::prelude::*;
use prost::Message;

const WIRE: &str = "peer_wire";
const PARKED: &str = "parked_chunks";

/// One payload as the peer service reads it.
pub fn check_wire(bytes: &[u8]) {
    if let Ok(wire) = Wire::decode(bytes) {
        let again = Wire::decode(&wire.encode()).expect("a decoded message encodes to bytes that decode");
        assert_eq!(format!("{wire:?}"), format!("{again:?}"), "decode(encode(m)) must be m");
    }
    if let Ok(envelope) = pb::PeerEnvelope::decode(bytes) {
        for payload in std::iter::once(&envelope.payload).chain(&envelope.more) {
            let _ = Wire::decode(payload);
        }
    }
    let _ = pb::FetchParkedRequest::decode(bytes);
    let _ = pb::ParkedChunk::decode(bytes);
}

#[test]
#[ignore = "regenerates fuzz/corpus/peer_wire and fuzz/corpus/parked_chunks"]
fn write_corpus() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let wire = |name: &str, w: Wire| support::write_seed(dir, WIRE, name, &w.encode());
    wire("log-fetch.bin", Wire::Log(LogMessage::Fetch { from: 3 }));
    wire("log-snapshot-garbage.bin", Wire::Log(LogMessage::Snapshot { index: 9, data: vec![0xff; 12] }));
    wire(
        "parked-notice-huge.bin",
        Wire::Parked(ParkedNotice {
            transfer: u64::MAX,
            kind: ParkedKind::Snapshot { index: u64::MAX },
            size: u64::MAX,
        }),
    );
    let forward = MasterRequest::Propose(Command::Put(leasekv_kvstore::PutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        lease: 0,
        prev_kv: false,
    }));
    wire("forward-put.bin", Wire::Forward(7, forward));
    // A vector length claiming 2^63 elements: postcard must not allocate for the claim.
    support::write_seed(
        dir,
        WIRE,
        "entries-length-lies.bin",
        &[1, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
    );
    let envelope = pb::PeerEnvelope {
        from: 2,
        payload: Wire::Log(LogMessage::Fetch { from: 1 }).encode(),
        more: vec![vec![0xff; 4]],
        version: 1,
    };
    support::write_seed(dir, WIRE, "envelope.bin", &envelope.encode_to_vec());

    let transfer =
        |name: &str, t: &Transfer| support::write_seed(dir, PARKED, name, &postcard::to_allocvec(t).expect("encodes"));
    let notice = ParkedNotice { transfer: 1, kind: ParkedKind::Snapshot { index: 5 }, size: 6 };
    let chunk = |offset: u64, data: &[u8], last: bool| (5u64, offset, data.to_vec(), last);
    transfer("complete.bin", &(notice, vec![chunk(0, b"abc", false), chunk(3, b"def", true)]));
    transfer("overrun.bin", &(notice, vec![chunk(0, b"abcdefg", true)]));
    transfer("gap.bin", &(notice, vec![chunk(0, b"abc", false), chunk(4, b"ef", true)]));
    transfer("after-last.bin", &(notice, vec![chunk(0, b"abcdef", true), chunk(6, b"x", true)]));
    transfer("announced-too-large.bin", &(ParkedNotice { size: u64::MAX, ..notice }, vec![chunk(0, b"a", true)]));
    let empty = ParkedNotice { transfer: 2, kind: ParkedKind::Message, size: 0 };
    transfer("empty-message.bin", &(empty, vec![(0, 0, Vec::new(), true)]));
}

#[test]
fn wire_corpus_and_mutations() {
    let seeds = support::replay(env!("CARGO_MANIFEST_DIR"), WIRE, check_wire);
    proptest!(support::config(3000), |(bytes in support::inputs(seeds, &[]))| check_wire(&bytes));
}

/// A transfer as the corpus stores it: the notice and the chunks (index, offset, data, last).
type Transfer = (ParkedNotice, Vec<(u64, u64, Vec<u8>, bool)>);

/// One transfer through the reassembly.
fn check_transfer((notice, chunks): Transfer) {
    let mut reassembly = match Reassembly::new(notice) {
        Ok(reassembly) => reassembly,
        Err(error) => {
            assert!(notice.size > MAX_TRANSFER_BYTES, "refused a notice within the limit: {error}");
            return;
        }
    };
    let mut sent = Vec::new();
    let mut complete = false;
    for (index, offset, data, last) in chunks {
        sent.extend_from_slice(&data);
        match reassembly.push(pb::ParkedChunk { index, data, last, offset }) {
            Ok(done) => complete = done,
            Err(error) => {
                assert!(!error.to_string().is_empty());
                return;
            }
        }
        if complete {
            break;
        }
    }
    match reassembly.finish() {
        Ok(crate::peer::parked::Assembled::Memory(data)) => {
            assert!(complete);
            assert_eq!(data.len() as u64, notice.size, "a completed transfer has the announced size");
            assert_eq!(data, sent, "a completed transfer is the chunks' data in order");
        }
        Ok(crate::peer::parked::Assembled::Piped) => panic!("reassembled in memory, not in a pipe"),
        Err(error) => assert!(!complete && matches!(error, PullError::Truncated { .. }), "{error}"),
    }
}

fn check_parked(bytes: &[u8]) {
    if let Ok(transfer) = postcard::from_bytes::<Transfer>(bytes) {
        check_transfer(transfer);
    }
}

/// Transfers whose chunks mostly follow the rules, so the checks past the first one run.
fn transfer() -> impl Strategy<Value = Transfer> {
    let notice =
        (any::<u64>(), prop_oneof![Just(None), any::<u64>().prop_map(Some)], prop_oneof![0u64..64, any::<u64>()])
            .prop_map(|(transfer, index, size)| ParkedNotice {
                transfer,
                kind: index.map_or(ParkedKind::Message, |index| ParkedKind::Snapshot { index }),
                size,
            });
    let chunk =
        (any::<bool>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..24), any::<bool>(), any::<bool>());
    (notice, proptest::collection::vec(chunk, 0..8)).prop_map(|(notice, raw)| {
        // Honest offsets and index unless the chunk says otherwise.
        let mut offset = 0u64;
        let chunks = raw
            .into_iter()
            .map(|(honest, other, data, last, honest_index)| {
                let at = if honest { offset } else { other };
                let index = if honest_index { notice.kind.index() } else { other };
                offset += data.len() as u64;
                (index, at, data, last)
            })
            .collect();
        (notice, chunks)
    })
}

#[test]
fn parked_corpus_and_generated_transfers() {
    let seeds = support::replay(env!("CARGO_MANIFEST_DIR"), PARKED, check_parked);
    proptest!(support::config(3000), |(bytes in support::mutated(seeds, &[]), generated in transfer())| {
        check_parked(&bytes);
        check_transfer(generated);
    });
}
