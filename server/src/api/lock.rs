//! etcd's Lock service (`v3lockpb.Lock`): a mutex per name, held by a lease (see
//! [`super::recipe`] for how contenders queue).

use super::recipe::{as_recipe_error, contender_key, queue, session_lease, wait_until_first, Candidacy};
use super::Shared;
use crate::auth::caller_of;
use leasekv_client::proto::v3lockpb as pb;
use leasekv_kvstore::auth::PermissionKind;
use leasekv_kvstore::{Command, CommandResponse, DeleteRangeRequest, Keep, KeyRange, PutRequest, TxnOp, NO_LEASE};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Lock and Unlock.
pub struct LockService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::lock_server::Lock for LockService {
    /// Queues behind the holders of `name` and returns once this lease holds it (without a
    /// lease, with one granted for this call: see [`super::recipe`]). A call that ends
    /// before it holds the lock (its deadline passes, the client disconnects, the wait
    /// fails) deletes its key, as etcd 3.4+ does: it never holds the lock afterwards and
    /// nobody waits behind it.
    async fn lock(&self, request: Request<pb::LockRequest>) -> Result<Response<pb::LockResponse>, Status> {
        // A lock writes its key under `name/` and reads its rivals' there.
        let (start, end) = super::guard::prefix_range(&request.get_ref().name);
        let caller = caller_of(&self.0.node, &request)?;
        caller.check(&start, &end, PermissionKind::ReadWrite)?;
        let request = request.into_inner();
        let lease = session_lease(&self.0, request.lease).await?;
        let key = contender_key(&request.name, lease);
        let mut candidacy = Candidacy::new(self.0.clone(), key.clone(), request.lease == 0);
        // An existing key (an earlier call with this lease) is rewritten as it is: same value,
        // same lease, a new mod revision.
        let touch = TxnOp::PutKeeping(
            PutRequest { key: key.clone(), value: Vec::new(), lease: NO_LEASE, prev_kv: false },
            Keep { value: true, lease: true },
        );
        let queued = match queue(&self.0, &caller, &request.name, &key, b"", lease, touch).await {
            Ok(queued) => queued,
            Err(status) => return Err(as_recipe_error(status)),
        };
        candidacy.queued(&queued);
        let header = wait_until_first(&self.0, &request.name, &key, queued.created).await?;
        candidacy.acquired();
        Ok(Response::new(pb::LockResponse { header: Some(header), key }))
    }

    /// Deletes the lock's key (nothing happens if it is already gone).
    async fn unlock(&self, request: Request<pb::UnlockRequest>) -> Result<Response<pb::UnlockResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        let key = request.into_inner().key;
        caller.check(&key, &[], PermissionKind::Write)?;
        let command =
            caller.command(Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false }));
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::DeleteRange(_) => Some(pb::UnlockResponse { header: Some(header) }),
            _ => None,
        });
        reply.await.map(Response::new)
    }
}
