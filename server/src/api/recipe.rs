//! What etcd's Lock and Election services are built from, done on the server as etcd does
//! (its `clientv3/concurrency` recipes, run inside the server): every contender holds a key
//! `NAME/<lease id in hex>` created under its lease; the contender whose key has the lowest
//! create revision holds the lock or leads; the others each wait for the deletion of the
//! key created just before their own (no herd: one deletion wakes one waiter). A lease that
//! expires deletes its key, which hands the lock on.
//!
//! Decisions are taken on linearizable reads through the master; the waiting is done on
//! this node's own applied history ([`HistoryFeed`]), so it costs nothing while nothing
//! changes and follows the master across failovers.

use super::Shared;
use crate::history_feed::HistoryFeed;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::ReadConsistency;
use leasekv_kvstore::state::HistoryRead;
use leasekv_kvstore::{
    Command, CommandResponse, Compare, CompareResult, CompareTarget, KeyRange, KeyValue, PutRequest, RangeRequest,
    Revision, TxnOp, TxnOpResponse, TxnRequest,
};
use tonic::{Code, Status};

/// etcd runs its Lock and Election services through an internal client, so a store error
/// (an unknown lease, say) reaches the caller as gRPC UNKNOWN with the store's message;
/// errors that tell a client to retry elsewhere keep their code.
pub(super) fn as_recipe_error(status: Status) -> Status {
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => status,
        _ => Status::unknown(status.message()),
    }
}

/// The key a lease holds in the lock or election `name` (etcd's `name/<lease hex>`).
pub(super) fn contender_key(name: &[u8], lease: i64) -> Vec<u8> {
    let mut key = prefix_of(name);
    key.extend(format!("{lease:x}").bytes());
    key
}

/// Every contender's key starts with this.
fn prefix_of(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// The contenders of `name`, oldest first, and the revision they were read at.
pub(super) async fn contenders(shared: &Shared, name: &[u8]) -> Result<(Vec<KeyValue>, Revision), Status> {
    let request = RangeRequest { range: KeyRange::prefix(prefix_of(name)), ..Default::default() };
    let (mut answer, revision) =
        shared.serve(|| shared.node.read(request.clone(), 0, ReadConsistency::Linearizable)).await?;
    answer.kvs.sort_by_key(|kv| kv.create_revision);
    Ok((answer.kvs, revision))
}

/// Creates `key` = `value` under `lease` unless it exists. Returns the key's create
/// revision, whether this call created it, the key-value if it existed, and the header.
pub(super) async fn create_unless_present(
    shared: &Shared,
    key: &[u8],
    value: &[u8],
    lease: i64,
) -> Result<(Revision, Option<KeyValue>, pb::ResponseHeader), Status> {
    let range = KeyRange::single(key.to_vec());
    let txn = TxnRequest {
        compare: vec![Compare {
            range: range.clone(),
            target: CompareTarget::CreateRevision(0),
            result: CompareResult::Equal,
        }],
        success: vec![TxnOp::Put(PutRequest { key: key.to_vec(), value: value.to_vec(), lease, prev_kv: false })],
        failure: vec![TxnOp::Range(RangeRequest { range, ..Default::default() })],
    };
    shared
        .serve_command(Command::Txn(txn), |response, header| {
            let CommandResponse::Txn(t) = response else { return None };
            if t.succeeded {
                return Some((header.revision, None, header));
            }
            match t.responses.into_iter().next() {
                Some(TxnOpResponse::Range(r)) => {
                    let kv = r.kvs.into_iter().next()?;
                    Some((kv.create_revision, Some(kv), header))
                }
                _ => None,
            }
        })
        .await
}

/// Waits until `key` (created at `my_revision`) is the oldest contender of `name`: for the
/// deletion of each older one in turn. Fails when `key` itself is gone (its lease expired
/// or it was deleted while waiting), as etcd's recipes do.
pub(super) async fn wait_until_first(
    shared: &Shared,
    name: &[u8],
    key: &[u8],
    my_revision: Revision,
) -> Result<pb::ResponseHeader, Status> {
    let mut feed = shared.node.history();
    loop {
        let (contenders, read_at) = contenders(shared, name).await?;
        if !contenders.iter().any(|kv| kv.key == key) {
            return Err(Status::unknown("session expired: the contender's key is gone (its lease ended)"));
        }
        let Some(before) = contenders.iter().rfind(|kv| kv.create_revision < my_revision) else {
            return Ok(shared.header(read_at));
        };
        wait_for_change(&mut feed, &KeyRange::single(before.key.clone()), read_at).await?;
    }
}

/// Waits until this node has applied a change in `range` after revision `after` (or cannot
/// tell any more, its history having been compacted past it: the caller reads again).
pub(super) async fn wait_for_change(feed: &mut HistoryFeed, range: &KeyRange, after: Revision) -> Result<(), Status> {
    let mut from = after + 1;
    loop {
        let published = feed.latest();
        match published.reader.read(from, 1000) {
            HistoryRead::Compacted(_) => return Ok(()),
            HistoryRead::Events { events, through } => {
                if events.iter().any(|e| range.contains(&e.kv.key)) {
                    return Ok(());
                }
                from = from.max(through + 1);
                if !events.is_empty() {
                    // A full batch without a match: read on before sleeping.
                    continue;
                }
            }
        }
        if !feed.changed().await {
            return Err(Status::unavailable("etcdserver: server stopped"));
        }
    }
}
