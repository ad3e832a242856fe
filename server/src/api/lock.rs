//! etcd's Lock service (`v3lockpb.Lock`): a mutex per name, held by a lease (see
//! [`super::recipe`] for how contenders queue).

use super::recipe::{as_recipe_error, contender_key, create_unless_present, wait_until_first};
use super::Shared;
use crate::auth::caller_of;
use leasekv_client::proto::v3lockpb as pb;
use leasekv_kvstore::auth::PermissionKind;
use leasekv_kvstore::{Command, CommandResponse, DeleteRangeRequest, KeyRange};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Lock and Unlock.
pub struct LockService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::lock_server::Lock for LockService {
    /// Queues behind the holders of `name` and returns once this lease holds it. A client
    /// that gives up (its deadline passes, it disconnects) stops waiting, and its key
    /// stays queued until its lease ends or it unlocks, as with etcd.
    async fn lock(&self, request: Request<pb::LockRequest>) -> Result<Response<pb::LockResponse>, Status> {
        // A lock writes its key under `name/` and reads its rivals' there.
        let (start, end) = super::guard::prefix_range(&request.get_ref().name);
        caller_of(&self.0.node, &request)?.check(&start, &end, PermissionKind::ReadWrite)?;
        let request = request.into_inner();
        let key = contender_key(&request.name, request.lease);
        let (my_revision, _, _) =
            create_unless_present(&self.0, &key, b"", request.lease).await.map_err(as_recipe_error)?;
        let header = wait_until_first(&self.0, &request.name, &key, my_revision).await?;
        Ok(Response::new(pb::LockResponse { header: Some(header), key }))
    }

    /// Deletes the lock's key (nothing happens if it is already gone).
    async fn unlock(&self, request: Request<pb::UnlockRequest>) -> Result<Response<pb::UnlockResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        let key = request.into_inner().key;
        caller.check(&key, &[], PermissionKind::Write)?;
        let command = Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false });
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::DeleteRange(_) => Some(pb::UnlockResponse { header: Some(header) }),
            _ => None,
        });
        reply.await.map(Response::new)
    }
}
