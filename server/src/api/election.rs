//! etcd's Election service (`v3electionpb.Election`): campaigners queue like lock holders
//! (see [`super::recipe`]); the oldest is the leader and its key's value is the election's
//! value.

use super::convert::kv_out;
use super::recipe::{
    as_recipe_error, contender_key, contenders, queue, session_lease, wait_for_change, wait_until_first, Candidacy,
};
use super::Shared;
use crate::auth::{caller_of, Caller};
use leasekv_client::proto::v3electionpb as pb;
use leasekv_client::EtcdError;
use leasekv_kvstore::auth::PermissionKind;
use leasekv_kvstore::{
    Command, CommandResponse, Compare, CompareResult, CompareTarget, DeleteRangeRequest, KeyRange, PutRequest, TxnOp,
    TxnRequest,
};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// etcd's answer when a leader key no longer leads (or never did).
const NOT_LEADER: &str = "election: not leader";
/// etcd's answer when an election has no leader.
const NO_LEADER: &str = "election: no leader";
/// etcd's answer to a Proclaim or Resign without a leader key.
const MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";

/// Campaign, Proclaim, Leader, Observe, Resign.
pub struct ElectionService {
    shared: Arc<Shared>,
    /// Ends every Observe stream when the node stops (they never end by themselves).
    stopping: watch::Receiver<bool>,
}

impl ElectionService {
    /// The service; `stopping` turning `true` ends every Observe stream.
    pub fn new(shared: Arc<Shared>, stopping: watch::Receiver<bool>) -> Self {
        ElectionService { shared, stopping }
    }

    /// Runs `branch` if `leader`'s key still exists with the create revision it was won at.
    async fn as_leader(&self, caller: &Caller, leader: &pb::LeaderKey, branch: TxnOp) -> Result<Guarded, Status> {
        let txn = TxnRequest {
            compare: vec![Compare {
                range: KeyRange::single(leader.key.clone()),
                target: CompareTarget::CreateRevision(leader.rev),
                result: CompareResult::Equal,
            }],
            success: vec![branch],
            failure: Vec::new(),
        };
        let (succeeded, header) = self
            .shared
            .serve_command(caller.command(Command::Txn(txn)), |response, header| match response {
                CommandResponse::Txn(t) => Some((t.succeeded, header)),
                _ => None,
            })
            .await?;
        Ok(if succeeded { Guarded::Led(header) } else { Guarded::NotLeader })
    }
}

/// What a write guarded by a leader key came to.
enum Guarded {
    /// The key still led: the write was done, at this header.
    Led(leasekv_client::proto::etcdserverpb::ResponseHeader),
    /// The key no longer leads (or never did): nothing was written.
    NotLeader,
}

/// The Observe answer stream.
pub type ObserveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::election_server::Election for ElectionService {
    type ObserveStream = ObserveStream;

    /// Joins the election with `value` and returns once this lease leads (without a lease,
    /// with one granted for this call: see [`super::recipe`]). Campaigning again with the
    /// same lease resumes the same candidacy (with the new value). A campaign that ends
    /// before it leads (its deadline passes, the client disconnects, the wait fails)
    /// resigns, as etcd's does: its key is deleted.
    async fn campaign(&self, request: Request<pb::CampaignRequest>) -> Result<Response<pb::CampaignResponse>, Status> {
        // A campaign writes its key under `name/` and reads its rivals' there.
        let (start, end) = super::guard::prefix_range(&request.get_ref().name);
        let caller = caller_of(&self.shared.node, &request)?;
        caller.check(&start, &end, PermissionKind::ReadWrite)?;
        let request = request.into_inner();
        let lease = session_lease(&self.shared, request.lease).await?;
        let key = contender_key(&request.name, lease);
        let mut candidacy = Candidacy::new(self.shared.clone(), key.clone(), request.lease == 0);
        // An existing key (an earlier campaign with this lease) takes the new value, as
        // etcd's Campaign proclaims it.
        let proclaim = TxnOp::Put(PutRequest { key: key.clone(), value: request.value.clone(), lease, prev_kv: false });
        let queued = match queue(&self.shared, &caller, &request.name, &key, &request.value, lease, proclaim).await {
            Ok(queued) => queued,
            Err(status) => return Err(as_recipe_error(status)),
        };
        candidacy.queued(&queued);
        let (rev, header) = (queued.created, queued.header);
        let leader = pb::LeaderKey { name: request.name.clone(), key: key.clone(), rev, lease };
        wait_until_first(&self.shared, &request.name, &key, rev).await?;
        candidacy.acquired();
        // etcd answers with the header of the transaction that queued the candidacy.
        Ok(Response::new(pb::CampaignResponse { header: Some(header), leader: Some(leader) }))
    }

    /// Replaces the leader's value, if `leader` still leads.
    async fn proclaim(&self, request: Request<pb::ProclaimRequest>) -> Result<Response<pb::ProclaimResponse>, Status> {
        let caller = caller_of(&self.shared.node, &request)?;
        let request = request.into_inner();
        let leader = request.leader.ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        caller.check(&leader.key, &[], PermissionKind::Write)?;
        let put = PutRequest { key: leader.key.clone(), value: request.value, lease: leader.lease, prev_kv: false };
        match self.as_leader(&caller, &leader, TxnOp::Put(put)).await? {
            Guarded::Led(header) => Ok(Response::new(pb::ProclaimResponse { header: Some(header) })),
            Guarded::NotLeader => Err(Status::unknown(NOT_LEADER)),
        }
    }

    /// The current leader's key-value.
    async fn leader(&self, request: Request<pb::LeaderRequest>) -> Result<Response<pb::LeaderResponse>, Status> {
        let (start, end) = super::guard::prefix_range(&request.get_ref().name);
        caller_of(&self.shared.node, &request)?.check(&start, &end, PermissionKind::Read)?;
        let name = request.into_inner().name;
        let (contenders, revision) = contenders(&self.shared, &name).await?;
        let kv = contenders.into_iter().next().ok_or_else(|| Status::unknown(NO_LEADER))?;
        Ok(Response::new(pb::LeaderResponse { header: Some(self.shared.header(revision)), kv: Some(kv_out(kv)) }))
    }

    /// The leader now (once there is one), then every change of leader or of its value,
    /// until the client goes away or the node stops.
    async fn observe(&self, request: Request<pb::LeaderRequest>) -> Result<Response<ObserveStream>, Status> {
        let (start, end) = super::guard::prefix_range(&request.get_ref().name);
        caller_of(&self.shared.node, &request)?.check(&start, &end, PermissionKind::Read)?;
        let name = request.into_inner().name;
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        let mut stopping = self.stopping.clone();
        tokio::spawn(async move {
            let mut feed = shared.node.history();
            let prefix = {
                let mut p = name.clone();
                p.push(b'/');
                KeyRange::prefix(p)
            };
            let mut last_sent: Option<(Vec<u8>, i64)> = None;
            loop {
                let (contenders, revision) = match contenders(&shared, &name).await {
                    Ok(found) => found,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                if let Some(kv) = contenders.into_iter().next() {
                    let seen = (kv.key.clone(), kv.mod_revision);
                    if last_sent.as_ref() != Some(&seen) {
                        let answer = pb::LeaderResponse { header: Some(shared.header(revision)), kv: Some(kv_out(kv)) };
                        if tx.send(Ok(answer)).await.is_err() {
                            return;
                        }
                        last_sent = Some(seen);
                    }
                }
                tokio::select! {
                    changed = wait_for_change(&mut feed, &prefix, revision) => {
                        if let Err(status) = changed {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                    }
                    _ = tx.closed() => return,
                    _ = stopping.changed() => {
                        let _ = tx.send(Err(EtcdError::Stopped.status())).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    /// Gives up leadership: deletes the leader key if it still is the one won at `rev`.
    async fn resign(&self, request: Request<pb::ResignRequest>) -> Result<Response<pb::ResignResponse>, Status> {
        let caller = caller_of(&self.shared.node, &request)?;
        let leader = request.into_inner().leader.ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        caller.check(&leader.key, &[], PermissionKind::Write)?;
        let delete = DeleteRangeRequest { range: KeyRange::single(leader.key.clone()), prev_kv: false };
        let header = match self.as_leader(&caller, &leader, TxnOp::DeleteRange(delete)).await? {
            Guarded::Led(header) => header,
            // etcd's Resign succeeds whether or not the key still led.
            Guarded::NotLeader => self.shared.current_header(),
        };
        Ok(Response::new(pb::ResignResponse { header: Some(header) }))
    }
}
