//! Which permissions each KV request needs (etcd's `checkRangePermission`,
//! `checkPutPermission`, `checkTxnReqsPermission`): reads need READ on their range, writes
//! WRITE on theirs, `prev_kv` READ as well, and a transaction everything any of its
//! compares and operations (both branches, nested ones too) would need.

use crate::auth::Caller;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::auth::PermissionKind::{Read, Write};
use tonic::Status;

/// A Range.
pub fn range(caller: &Caller, r: &pb::RangeRequest) -> Result<(), Status> {
    caller.check(&r.key, &r.range_end, Read)
}

/// A Put: WRITE on the key (which attaches it to the request's lease, if any).
pub fn put(caller: &Caller, r: &pb::PutRequest) -> Result<(), Status> {
    caller.check(&r.key, &[], Write)?;
    if r.prev_kv {
        caller.check(&r.key, &[], Read)?;
    }
    Ok(())
}

/// A DeleteRange.
pub fn delete(caller: &Caller, r: &pb::DeleteRangeRequest) -> Result<(), Status> {
    caller.check(&r.key, &r.range_end, Write)?;
    if r.prev_kv {
        caller.check(&r.key, &r.range_end, Read)?;
    }
    Ok(())
}

/// A Txn: every compare and every operation of both branches, recursively.
pub fn txn(caller: &Caller, r: &pb::TxnRequest) -> Result<(), Status> {
    if !caller.enforced() {
        return Ok(());
    }
    for compare in &r.compare {
        caller.check(&compare.key, &compare.range_end, Read)?;
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(pb::request_op::Request::RequestRange(r)) => range(caller, r)?,
            Some(pb::request_op::Request::RequestPut(r)) => put(caller, r)?,
            Some(pb::request_op::Request::RequestDeleteRange(r)) => delete(caller, r)?,
            Some(pb::request_op::Request::RequestTxn(r)) => txn(caller, r)?,
            None => {}
        }
    }
    Ok(())
}

/// The keys under `prefix` (`prefix/`…): what a lock or an election of that name writes
/// and reads (its key and its rivals').
pub fn prefix_range(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut key = prefix.to_vec();
    key.push(b'/');
    let end = leasekv_client::prefix_range_end(&key);
    (key, end)
}
