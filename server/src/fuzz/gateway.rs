//! Target `gateway_json`: arbitrary and mutated request bodies into the HTTP gateway's JSON
//! decoding (`gateway::json::decode`, what every unary route does with its body), then on
//! into the same conversion the gRPC services apply; and bodies split into a stream's
//! request objects (`gateway::streams::requests`, what /v3/watch and /v3/lease/keepalive
//! read). Every body ends in a clear error or a request; nothing panics.

use super::support;
use crate::gateway::{json, streams};
use leasekv_client::proto::etcdserverpb as pb;
use proptest::prelude::*;
use prost::Message;
use tokio_stream::StreamExt;

const TARGET: &str = "gateway_json";

/// Tokens worth splicing into JSON: deep nesting, numbers past every integer type, base64
/// edge cases, enum names known and unknown, duplicate and oddly cased field names.
const DICTIONARY: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "1e999",
    "-0",
    "18446744073709551616",
    "\"9223372036854775808\"",
    "-9223372036854775809",
    "\"Zm9v\"",
    "\"Zm9v=\"",
    "\"====\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"SIDEWAYS\"",
    "\"DESCEND\"",
    "\"MOD\"",
    "\"key\":",
    "\"range_end\":",
    "\"rangeEnd\":",
    "\"success\":[{\"request_txn\":",
    "\"request_put\":",
    "\"sort_order\":",
    "\"ID\":",
    "\"TTL\":",
    "\"create_request\":",
    "[[[[[[[[[[[[[[[[",
];

/// Unary routes' request messages: (descriptor name, decode and convert).
fn decode_all(body: &[u8]) {
    let clear = |status: &tonic::Status| {
        assert_ne!(status.code(), tonic::Code::Ok);
        assert!(!status.message().is_empty());
    };
    macro_rules! each {
        ($($name:literal => $ty:ty),* $(,)?) => {
            $( match json::decode::<$ty>($name, body) {
                Ok(request) => super::grpc::check(&request.encode_to_vec()),
                Err(status) => clear(&status),
            } )*
        };
    }
    each!(
        "etcdserverpb.RangeRequest" => pb::RangeRequest,
        "etcdserverpb.PutRequest" => pb::PutRequest,
        "etcdserverpb.DeleteRangeRequest" => pb::DeleteRangeRequest,
        "etcdserverpb.TxnRequest" => pb::TxnRequest,
        "etcdserverpb.CompactionRequest" => pb::CompactionRequest,
        "etcdserverpb.LeaseGrantRequest" => pb::LeaseGrantRequest,
        "etcdserverpb.LeaseRevokeRequest" => pb::LeaseRevokeRequest,
        "etcdserverpb.LeaseTimeToLiveRequest" => pb::LeaseTimeToLiveRequest,
        "etcdserverpb.AlarmRequest" => pb::AlarmRequest,
        "etcdserverpb.MemberAddRequest" => pb::MemberAddRequest,
    );
}

/// A body read as a watch stream's request objects, as /v3/watch reads it.
async fn stream_all(body: Vec<u8>) {
    let failure = streams::Failure::default();
    let body = axum::body::Body::from(body);
    match streams::requests::<pb::WatchRequest>("etcdserverpb.WatchRequest", body, failure.clone()).await {
        Ok(mut requests) => {
            // Bounded: a body of n bytes holds at most n objects.
            for _ in 0..10_000 {
                match requests.next().await {
                    Some(Ok(_)) => {}
                    Some(Err(status)) => assert!(!status.message().is_empty()),
                    None => break,
                }
            }
        }
        Err(status) => assert!(!status.message().is_empty()),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().expect("a test runtime")
}

/// One body through the unary and the streaming decoders.
pub fn check(body: &[u8], runtime: &tokio::runtime::Runtime) {
    decode_all(body);
    runtime.block_on(stream_all(body.to_vec()));
}

#[test]
fn corpus_and_mutations() {
    let runtime = runtime();
    let seeds = support::replay(env!("CARGO_MANIFEST_DIR"), TARGET, |body| check(body, &runtime));
    proptest!(support::config(1000), |(body in support::inputs(seeds, DICTIONARY))| check(&body, &runtime));
}
