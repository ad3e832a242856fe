//! What etcd's Lock and Election services are built from, done on the server as etcd does
//! (its `clientv3/concurrency` recipes, run inside the server): every contender holds a key
//! `NAME/<lease id in hex>` created under its lease; the contender whose key has the lowest
//! create revision holds the lock or leads; the others each wait for the deletion of the
//! key created just before their own (no herd: one deletion wakes one waiter). A lease that
//! expires deletes its key, which hands the lock on.
//!
//! A call without a lease (`lease` = 0) gets a lease of its own, granted for it with etcd's
//! session TTL ([`SESSION_TTL`]) and not kept alive, as etcd's server does: two such callers
//! have two keys and exclude each other, and a holder that never unlocks lets go when that
//! lease ends. A call that ends before it acquired (its deadline passed, the client went
//! away, the wait failed) withdraws its key ([`Candidacy`]), as etcd 3.4+ does, so it never
//! becomes the holder afterwards and nobody queues behind it.
//!
//! Decisions are taken on linearizable reads through the master; the waiting is done on
//! this node's own applied history ([`HistoryFeed`]), so it costs nothing while nothing
//! changes and follows the master across failovers.

use super::Shared;
use crate::auth::Caller;
use crate::history_feed::HistoryFeed;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::EtcdError;
use leasekv_kvstore::log::ReadConsistency;
use leasekv_kvstore::state::HistoryRead;
use leasekv_kvstore::{
    Command, CommandResponse, Compare, CompareResult, CompareTarget, DeleteRangeRequest, KeyRange, KeyValue,
    PutRequest, RangeRequest, Revision, TxnOp, TxnOpResponse, TxnRequest,
};
use std::sync::Arc;
use std::time::Duration;
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

/// The TTL, in seconds, of the lease granted to a Lock or Campaign call made without one:
/// etcd's `concurrency` session default, which its Lock and Election servers use.
pub(super) const SESSION_TTL: i64 = 60;

/// How many times a withdrawal is tried before the key is left to its lease.
const WITHDRAW_ATTEMPTS: u32 = 3;

/// The lease a Lock or Campaign call holds its key with: the caller's, or for `0` a new
/// lease of [`SESSION_TTL`] seconds granted for this call alone and not kept alive, as
/// etcd's server does (it opens a `concurrency` session and orphans it).
pub(super) async fn session_lease(shared: &Shared, lease: i64) -> Result<i64, Status> {
    if lease != 0 {
        return Ok(lease);
    }
    let command = Command::LeaseGrant { id: 0, name: None, ttl: SESSION_TTL };
    shared
        .serve_command(command, |response, _| match response {
            CommandResponse::LeaseGrant(granted) => Some(granted.id),
            _ => None,
        })
        .await
        .map_err(as_recipe_error)
}

/// A contender's key, queued by a Lock or Campaign call that has not acquired yet. Unless
/// the call succeeds ([`Candidacy::acquired`]) or found its key already holding
/// ([`Queued::already_first`]), dropping it deletes the key in the background: the call
/// failed, or was dropped because its client went away or its deadline passed (tonic drops
/// the handler's future then). The delete is conditional on the key's mod revision being
/// the one this call wrote, so it never removes a key that another call (of the same lease)
/// wrote since, and it is tried a few times; if it still fails, the key's lease ends it.
pub(super) struct Candidacy {
    shared: Arc<Shared>,
    key: Vec<u8>,
    /// The key's mod revision after this call's write; `None` while it is unknown whether
    /// the write happened.
    written: Option<Revision>,
    /// Whether the key may be deleted without knowing its create revision: its lease was
    /// granted for this call, so no other call can hold the same key.
    own_lease: bool,
    pending: bool,
}

impl Candidacy {
    /// A key about to be created for `lease` (`own_lease`: granted for this call).
    pub(super) fn new(shared: Arc<Shared>, key: Vec<u8>, own_lease: bool) -> Self {
        Candidacy { shared, key, written: None, own_lease, pending: true }
    }

    /// The key is queued: this call wrote it at `queued.written`, or found it already
    /// holding, in which case it is never withdrawn.
    pub(super) fn queued(&mut self, queued: &Queued) {
        self.written = Some(queued.written);
        if queued.already_first {
            self.pending = false;
        }
    }

    /// The call acquired: the key stays.
    pub(super) fn acquired(mut self) {
        self.pending = false;
    }
}

impl Drop for Candidacy {
    fn drop(&mut self) {
        if !self.pending {
            return;
        }
        let compare = match self.written {
            Some(revision) => vec![Compare {
                range: KeyRange::single(self.key.clone()),
                target: CompareTarget::ModRevision(revision),
                result: CompareResult::Equal,
            }],
            None if self.own_lease => Vec::new(),
            None => return,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %String::from_utf8_lossy(&self.key), "cannot withdraw an abandoned contender's key: no runtime; its lease will end it");
            return;
        };
        let delete = DeleteRangeRequest { range: KeyRange::single(self.key.clone()), prev_kv: false };
        let command =
            Command::Txn(TxnRequest { compare, success: vec![TxnOp::DeleteRange(delete)], failure: Vec::new() });
        let shared = self.shared.clone();
        let key = std::mem::take(&mut self.key);
        runtime.spawn(async move {
            for attempt in 1..=WITHDRAW_ATTEMPTS {
                // The delete is conditional, so sending it again is harmless.
                match shared.serve_command(command.clone(), |_, _| Some(())).await {
                    Ok(()) => return,
                    Err(status) if attempt == WITHDRAW_ATTEMPTS => {
                        tracing::warn!(key = %String::from_utf8_lossy(&key), error = %status.message(), "cannot withdraw an abandoned contender's key; its lease will end it");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await,
                }
            }
        });
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

/// Where a Lock or Campaign call stands after [`queue`] put its key in line.
pub(super) struct Queued {
    /// The key's create revision: its place in the line (the lock's fencing token).
    pub created: Revision,
    /// The key's mod revision after this call's write: a withdrawal deletes the key only
    /// while it is still this, so it never removes a key a later call wrote since.
    pub written: Revision,
    /// The key was already the oldest contender when this call found it: an earlier call
    /// with the same lease holds the lock (or leads), and this call must never withdraw it.
    pub already_first: bool,
    /// The header of the transaction that queued the key.
    pub header: pb::ResponseHeader,
}

/// Puts `key` in the line of `name` for `lease`, in one transaction: creates it with
/// `value` if it does not exist; otherwise applies `rewrite` to it (an earlier call with the
/// same lease made it: the rewrite moves its mod revision, so that call's withdrawal, if one
/// is still on its way, no longer matches it) and reads the line to tell whether the key
/// already holds.
pub(super) async fn queue(
    shared: &Shared,
    caller: &Caller,
    name: &[u8],
    key: &[u8],
    value: &[u8],
    lease: i64,
    rewrite: TxnOp,
) -> Result<Queued, Status> {
    let range = KeyRange::single(key.to_vec());
    let txn = TxnRequest {
        compare: vec![Compare {
            range: range.clone(),
            target: CompareTarget::CreateRevision(0),
            result: CompareResult::Equal,
        }],
        success: vec![TxnOp::Put(PutRequest { key: key.to_vec(), value: value.to_vec(), lease, prev_kv: false })],
        failure: vec![
            rewrite,
            TxnOp::Range(RangeRequest { range, ..Default::default() }),
            TxnOp::Range(RangeRequest {
                range: KeyRange::prefix(prefix_of(name)),
                keys_only: true,
                ..Default::default()
            }),
        ],
    };
    shared
        .serve_command(caller.command(Command::Txn(txn)), |response, header| {
            let CommandResponse::Txn(t) = response else { return None };
            if t.succeeded {
                let revision = header.revision;
                return Some(Queued { created: revision, written: revision, already_first: false, header });
            }
            let mut reads = t.responses.into_iter().filter_map(|r| match r {
                TxnOpResponse::Range(r) => Some(r),
                _ => None,
            });
            let kv = reads.next()?.kvs.into_iter().next()?;
            let oldest = reads.next()?.kvs.iter().map(|kv| kv.create_revision).min()?;
            Some(Queued {
                created: kv.create_revision,
                written: kv.mod_revision,
                already_first: oldest == kv.create_revision,
                header,
            })
        })
        .await
}

/// etcd's answer when a contender's key vanished while it waited (its lease ended, or the
/// key was deleted).
const SESSION_EXPIRED: &str = "mutex: session is expired";

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
            return Err(Status::unknown(SESSION_EXPIRED));
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
            return Err(EtcdError::Stopped.status());
        }
    }
}
