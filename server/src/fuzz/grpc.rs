//! Target `grpc_requests`: etcd's request messages, as bytes off the wire, through what the
//! services do before anything is proposed: prost's decoding, the conversion into store
//! commands (`api::convert`), the front-door validation against the limits, then the
//! state machine applying what passed and the answer's conversion back. Every input must
//! end in a clear error or an answer; nothing may panic.
//!
//! Each input is decoded as every request type, so one corpus serves them all.

use super::support;
use crate::api::convert::{delete_in, delete_out, put_command, put_out, range_in, range_out, txn_in, txn_out};
use crate::api::errors::kv_error;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::state::{validate_command, validate_range};
use leasekv_kvstore::{Command, CommandResponse, Limits, StateMachine};
use proptest::prelude::*;
use prost::Message;
use std::sync::OnceLock;

const TARGET: &str = "grpc_requests";

/// Tokens worth splicing into protobuf bytes: varints at their limits, a length prefix
/// claiming far more than follows, field tags of the nested messages.
const DICTIONARY: &[&str] = &[
    "\u{7f}",
    "\u{80}",
    "\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{ff}\u{01}",
    "\u{12}\u{ff}\u{ff}\u{03}",
    "\u{22}\u{02}\u{0a}\u{00}",
];

/// A small store every case starts from: a few keys, one with a lease, some history.
fn store() -> &'static StateMachine {
    static STORE: OnceLock<StateMachine> = OnceLock::new();
    STORE.get_or_init(|| {
        let mut machine = StateMachine::new();
        let grant = Command::LeaseGrant { id: 7, name: None, ttl: 60 };
        assert!(machine.apply(&grant).result.is_ok());
        for (i, key) in ["a", "b", "b/1", "c", "\u{0}"].iter().enumerate() {
            let put = pb::PutRequest {
                key: key.as_bytes().to_vec(),
                value: vec![i as u8; i],
                lease: if i == 2 { 7 } else { 0 },
                ..Default::default()
            };
            assert!(machine.apply(&put_command(put)).result.is_ok());
        }
        machine
    })
}

fn header(revision: i64) -> pb::ResponseHeader {
    pb::ResponseHeader { cluster_id: 1, member_id: 1, revision, raft_term: 1 }
}

/// An error status must say something and must not claim success.
fn clear(status: &tonic::Status) {
    assert_ne!(status.code(), tonic::Code::Ok, "an error with code OK: {status:?}");
    assert!(!status.message().trim().is_empty(), "an error without a message: {status:?}");
}

/// Validates and applies `command` to a copy of the store; returns its answer, if any.
fn apply(command: &Command) -> Option<(CommandResponse, i64)> {
    let limits = Limits::default();
    if let Err(error) = validate_command(command, &limits) {
        clear(&kv_error(&error));
        return None;
    }
    let mut machine = store().copy_in_memory();
    let applied = machine.apply(command);
    match applied.result {
        Ok(response) => Some((response, applied.revision)),
        Err(error) => {
            clear(&kv_error(&error));
            None
        }
    }
}

/// One input through every request type's path.
pub fn check(bytes: &[u8]) {
    if let Ok(put) = pb::PutRequest::decode(bytes) {
        if let Some((CommandResponse::Put(p), revision)) = apply(&put_command(put)) {
            put_out(p, header(revision));
        }
    }
    if let Ok(range) = pb::RangeRequest::decode(bytes) {
        check_range(range);
    }
    if let Ok(delete) = pb::DeleteRangeRequest::decode(bytes) {
        if let Some((CommandResponse::DeleteRange(d), revision)) = apply(&Command::DeleteRange(delete_in(delete))) {
            delete_out(d, header(revision));
        }
    }
    if let Ok(txn) = pb::TxnRequest::decode(bytes) {
        check_txn(txn);
    }
    if let Ok(grant) = pb::LeaseGrantRequest::decode(bytes) {
        apply(&Command::LeaseGrant { id: grant.id, name: None, ttl: grant.ttl });
    }
    if let Ok(revoke) = pb::LeaseRevokeRequest::decode(bytes) {
        apply(&Command::LeaseRevoke { id: revoke.id });
    }
    if let Ok(compact) = pb::CompactionRequest::decode(bytes) {
        apply(&Command::Compact { revision: compact.revision });
    }
    // Decoded only: their fields are read as they are (ids, flags) by the services.
    let _ = pb::LeaseKeepAliveRequest::decode(bytes);
    let _ = pb::LeaseTimeToLiveRequest::decode(bytes);
    let _ = pb::WatchRequest::decode(bytes);
    let _ = pb::MemberAddRequest::decode(bytes);
    let _ = pb::AlarmRequest::decode(bytes);
}

fn check_range(range: pb::RangeRequest) {
    let converted = match range_in(range) {
        Ok(converted) => converted,
        Err(status) => return clear(&status),
    };
    if let Err(error) = validate_range(&converted.request, &Limits::default()) {
        return clear(&kv_error(&error));
    }
    let machine = store();
    let answer = if converted.revision > 0 {
        machine.range_at(&converted.request, converted.revision)
    } else {
        machine.range(&converted.request)
    };
    match answer {
        Ok(answer) => {
            let answer = match &converted.shape {
                Some(shape) => shape.apply(answer),
                None => answer,
            };
            range_out(answer, header(machine.revision()));
        }
        Err(error) => clear(&kv_error(&error)),
    }
}

fn check_txn(txn: pb::TxnRequest) {
    let (request, shapes) = match txn_in(txn) {
        Ok(converted) => converted,
        Err(status) => return clear(&status),
    };
    if let Some((CommandResponse::Txn(t), revision)) = apply(&Command::Txn(request)) {
        txn_out(t, header(revision), &shapes);
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"a".to_vec()),
        Just(b"b".to_vec()),
        Just(vec![0]),
        Just(Vec::new()),
        proptest::collection::vec(any::<u8>(), 0..4),
        Just(vec![b'k'; 2000]),
    ]
}

fn put() -> impl Strategy<Value = pb::PutRequest> {
    (
        key(),
        proptest::collection::vec(any::<u8>(), 0..8),
        prop_oneof![Just(0i64), Just(7), any::<i64>()],
        any::<[bool; 3]>(),
    )
        .prop_map(|(key, value, lease, [prev_kv, ignore_value, ignore_lease])| pb::PutRequest {
            key,
            value,
            lease,
            prev_kv,
            ignore_value,
            ignore_lease,
        })
}

fn range() -> impl Strategy<Value = pb::RangeRequest> {
    let numbers = (any::<i64>(), prop_oneof![Just(0i64), 1i64..8, any::<i64>()], -1i32..5, -1i32..7);
    let filters = proptest::array::uniform4(prop_oneof![Just(0i64), 1i64..8, any::<i64>()]);
    (key(), key(), numbers, filters, any::<[bool; 4]>()).prop_map(
        |(key, range_end, (limit, revision, sort_order, sort_target), f, [serializable, keys_only, count_only, _])| {
            pb::RangeRequest {
                key,
                range_end,
                limit,
                revision,
                sort_order,
                sort_target,
                serializable,
                keys_only,
                count_only,
                min_mod_revision: f[0],
                max_mod_revision: f[1],
                min_create_revision: f[2],
                max_create_revision: f[3],
            }
        },
    )
}

fn compare() -> impl Strategy<Value = pb::Compare> {
    use pb::compare::TargetUnion;
    let union = prop_oneof![
        Just(None),
        any::<i64>().prop_map(|v| Some(TargetUnion::Version(v))),
        any::<i64>().prop_map(|v| Some(TargetUnion::ModRevision(v))),
        proptest::collection::vec(any::<u8>(), 0..4).prop_map(|v| Some(TargetUnion::Value(v))),
        any::<i64>().prop_map(|v| Some(TargetUnion::Lease(v))),
    ];
    (key(), key(), -1i32..5, -1i32..6, union).prop_map(|(key, range_end, result, target, target_union)| pb::Compare {
        result,
        target,
        key,
        range_end,
        target_union,
    })
}

/// Transactions nested up to three deep, each branch a few operations.
fn txn() -> impl Strategy<Value = pb::TxnRequest> {
    use pb::request_op::Request;
    let leaf = prop_oneof![
        put().prop_map(|p| Some(Request::RequestPut(p))),
        range().prop_map(|r| Some(Request::RequestRange(r))),
        (key(), key(), any::<bool>()).prop_map(|(key, range_end, prev_kv)| Some(Request::RequestDeleteRange(
            pb::DeleteRangeRequest { key, range_end, prev_kv }
        ))),
        Just(None),
    ];
    let ops = |op: BoxedStrategy<Option<Request>>| {
        proptest::collection::vec(op.prop_map(|request| pb::RequestOp { request }), 0..4)
    };
    let flat = (proptest::collection::vec(compare(), 0..3), ops(leaf.clone().boxed()), ops(leaf.clone().boxed()))
        .prop_map(|(compare, success, failure)| pb::TxnRequest { compare, success, failure });
    flat.prop_recursive(3, 24, 4, move |inner| {
        let op = prop_oneof![leaf.clone(), inner.prop_map(|t| Some(Request::RequestTxn(t)))].boxed();
        (proptest::collection::vec(compare(), 0..3), ops(op.clone()), ops(op))
            .prop_map(|(compare, success, failure)| pb::TxnRequest { compare, success, failure })
    })
}

/// Writes the seed corpus (`cargo test -p leasekv-server --lib fuzz::grpc::write_corpus --
/// --ignored`): valid requests of each type and known-tricky ones.
#[test]
#[ignore = "regenerates fuzz/corpus/grpc_requests"]
fn write_corpus() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let seed = |name: &str, bytes: Vec<u8>| support::write_seed(dir, TARGET, name, &bytes);
    seed(
        "put.bin",
        pb::PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), prev_kv: true, ..Default::default() }
            .encode_to_vec(),
    );
    seed(
        "put-ignore-value.bin",
        pb::PutRequest { key: b"a".to_vec(), ignore_value: true, ..Default::default() }.encode_to_vec(),
    );
    seed(
        "range-prefix-sorted.bin",
        pb::RangeRequest {
            key: b"b".to_vec(),
            range_end: b"c".to_vec(),
            limit: 1,
            sort_order: 2,
            sort_target: 4,
            min_mod_revision: 2,
            ..Default::default()
        }
        .encode_to_vec(),
    );
    seed(
        "range-from-key.bin",
        pb::RangeRequest { key: vec![0], range_end: vec![0], revision: 3, ..Default::default() }.encode_to_vec(),
    );
    seed(
        "range-negative-limit.bin",
        pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: vec![0],
            limit: i64::MIN,
            sort_order: 1,
            max_create_revision: -1,
            ..Default::default()
        }
        .encode_to_vec(),
    );
    seed(
        "delete-prefix.bin",
        pb::DeleteRangeRequest { key: b"b".to_vec(), range_end: b"c".to_vec(), prev_kv: true }.encode_to_vec(),
    );
    seed("lease-grant-negative.bin", pb::LeaseGrantRequest { ttl: i64::MIN, id: -1 }.encode_to_vec());
    seed("compaction-max.bin", pb::CompactionRequest { revision: i64::MAX, physical: true }.encode_to_vec());
    use pb::request_op::Request;
    let inner = pb::TxnRequest {
        compare: vec![pb::Compare { result: 3, target: 3, key: b"a".to_vec(), range_end: vec![0], target_union: None }],
        success: vec![pb::RequestOp {
            request: Some(Request::RequestPut(pb::PutRequest { key: b"x".to_vec(), ..Default::default() })),
        }],
        failure: vec![pb::RequestOp { request: None }],
    };
    let outer = pb::TxnRequest {
        compare: vec![pb::Compare { result: 0, target: 0, key: b"a".to_vec(), ..Default::default() }],
        success: vec![
            pb::RequestOp {
                request: Some(Request::RequestRange(pb::RangeRequest {
                    key: b"a".to_vec(),
                    range_end: b"z".to_vec(),
                    sort_order: 2,
                    ..Default::default()
                })),
            },
            pb::RequestOp { request: Some(Request::RequestTxn(inner)) },
            pb::RequestOp {
                request: Some(Request::RequestDeleteRange(pb::DeleteRangeRequest {
                    key: b"b".to_vec(),
                    ..Default::default()
                })),
            },
        ],
        failure: vec![pb::RequestOp {
            request: Some(Request::RequestPut(pb::PutRequest { key: b"b".to_vec(), ..Default::default() })),
        }],
    };
    seed("txn-nested.bin", outer.encode_to_vec());
    // A Txn nested deeper than prost's recursion limit (100): refused by the decoder.
    let mut deep = pb::TxnRequest::default();
    for _ in 0..120 {
        deep = pb::TxnRequest {
            success: vec![pb::RequestOp { request: Some(Request::RequestTxn(deep)) }],
            ..Default::default()
        };
    }
    seed("txn-deeper-than-the-decoder-allows.bin", deep.encode_to_vec());
    // A length prefix claiming 4 GiB for a key with 3 bytes behind it.
    seed("key-length-lies.bin", vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, b'a', b'b', b'c']);
    seed("empty.bin", Vec::new());
}

#[test]
fn corpus_and_mutations() {
    let seeds = support::replay(env!("CARGO_MANIFEST_DIR"), TARGET, check);
    proptest!(support::config(1000), |(bytes in support::inputs(seeds, DICTIONARY))| check(&bytes));
}

#[test]
fn structured_requests() {
    use pb::request_op::Request;
    proptest!(support::config(500), |(txn in txn(), range in range(), put in put())| {
        check(&txn.encode_to_vec());
        check(&range.encode_to_vec());
        check(&put.encode_to_vec());
        // The same, already decoded (what the gateway hands the conversion).
        check_txn(txn);
        check_range(range.clone());
        check_txn(pb::TxnRequest { success: vec![pb::RequestOp { request: Some(Request::RequestRange(range)) }], ..Default::default() });
    });
}
