//! etcd's Lease service, keepalive stream included.

use super::Shared;
use crate::auth::caller_of;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::{Command, CommandResponse};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Request, Response, Status, Streaming};

/// Lease: grant, revoke, keepalive, time-to-live, list.
pub struct LeaseService(pub Arc<Shared>);

/// The keepalive answer stream.
pub type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<pb::LeaseKeepAliveResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::lease_server::Lease for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let request = request.into_inner();
        let command = Command::LeaseGrant { id: request.id, name: None, ttl: request.ttl };
        let reply = self.0.serve_command(command, |response, header| match response {
            CommandResponse::LeaseGrant(g) => {
                Some(pb::LeaseGrantResponse { header: Some(header), id: g.id, ttl: g.ttl, error: String::new() })
            }
            _ => None,
        });
        let granted = reply.await?;
        crate::metrics::metrics().leases_granted.inc();
        Ok(Response::new(granted))
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        let id = request.into_inner().id;
        if caller.enforced() {
            // etcd's rule: revoking deletes the lease's keys, so it needs WRITE on each.
            caller.authenticated()?;
            let shared = &self.0;
            if let Ok(status) = shared.serve(|| shared.node.lease_status(id)).await {
                for key in &status.keys {
                    caller.check(key, &[], leasekv_kvstore::auth::PermissionKind::Write)?;
                }
            }
        }
        let command = Command::LeaseRevoke { id };
        let reply = self.0.serve_command(command, |_, header| Some(pb::LeaseRevokeResponse { header: Some(header) }));
        let revoked = reply.await?;
        crate::metrics::metrics().leases_revoked.inc();
        Ok(Response::new(revoked))
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        Ok(Response::new(self.keep_alive(request.into_inner())))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let request = request.into_inner();
        let shared = &self.0;
        let answer = shared.serve(|| shared.node.lease_status(request.id)).await;
        let header = Some(shared.current_header());
        match answer {
            Ok(status) => Ok(Response::new(pb::LeaseTimeToLiveResponse {
                header,
                id: request.id,
                ttl: status.remaining.as_secs() as i64,
                granted_ttl: status.granted_ttl,
                keys: if request.keys { status.keys } else { Vec::new() },
            })),
            // etcd answers an unknown lease with TTL -1.
            Err(status) if status.code() == Code::NotFound => Ok(Response::new(pb::LeaseTimeToLiveResponse {
                header,
                id: request.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            })),
            Err(status) => Err(status),
        }
    }

    async fn lease_leases(
        &self,
        request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        caller_of(&self.0.node, &request)?.authenticated()?;
        let shared = &self.0;
        let list = shared.serve(|| shared.node.lease_list()).await?;
        Ok(Response::new(pb::LeaseLeasesResponse {
            header: Some(shared.current_header()),
            leases: list.into_iter().map(|l| pb::LeaseStatus { id: l.id }).collect(),
        }))
    }
}

impl LeaseService {
    /// Answers each keepalive request of `incoming` (a gRPC stream, or the JSON objects of
    /// an HTTP gateway request) in order; the answers end when the requests do, or at the
    /// first failure.
    pub fn keep_alive<S>(&self, mut incoming: S) -> KeepAliveStream
    where
        S: Stream<Item = Result<pb::LeaseKeepAliveRequest, Status>> + Unpin + Send + 'static,
    {
        let shared = self.0.clone();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            while let Some(Ok(request)) = incoming.next().await {
                let id = request.id;
                let answer = match shared.serve(|| shared.node.keep_alive(id)).await {
                    Ok(ttl) => {
                        crate::metrics::metrics().leases_renewed.inc();
                        Ok(pb::LeaseKeepAliveResponse { header: Some(shared.current_header()), id, ttl })
                    }
                    // etcd answers an unknown or expired lease with TTL 0.
                    Err(status) if status.code() == Code::NotFound => {
                        Ok(pb::LeaseKeepAliveResponse { header: Some(shared.current_header()), id, ttl: 0 })
                    }
                    Err(status) => Err(status),
                };
                let failed = answer.is_err();
                if tx.send(answer).await.is_err() || failed {
                    break;
                }
            }
        });
        Box::pin(ReceiverStream::new(rx))
    }
}
