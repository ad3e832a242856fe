//! etcd's Lease service, keepalive stream included.

use super::{forwarded, is_forwarded, Route, Shared};
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::proto::etcdserverpb::lease_client::LeaseClient;
use leasekv_kvstore::{Command, CommandResponse};
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

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
        let hop = is_forwarded(&request);
        let original = request.into_inner();
        let command = Command::LeaseGrant { id: original.id, name: None, ttl: original.ttl };
        self.0
            .serve_command(
                hop,
                command,
                |response, header| match response {
                    CommandResponse::LeaseGrant(g) => Some(pb::LeaseGrantResponse {
                        header: Some(header),
                        id: g.id,
                        ttl: g.ttl,
                        error: String::new(),
                    }),
                    _ => None,
                },
                |channel| {
                    let request = forwarded(original);
                    async move { LeaseClient::new(channel).lease_grant(request).await }
                },
            )
            .await
            .map(Response::new)
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let hop = is_forwarded(&request);
        let original = request.into_inner();
        let command = Command::LeaseRevoke { id: original.id };
        self.0
            .serve_command(
                hop,
                command,
                |_, header| Some(pb::LeaseRevokeResponse { header: Some(header) }),
                |channel| {
                    let request = forwarded(original);
                    async move { LeaseClient::new(channel).lease_revoke(request).await }
                },
            )
            .await
            .map(Response::new)
    }

    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        let hop = is_forwarded(&request);
        let mut incoming = request.into_inner();
        let shared = self.0.clone();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            // A follower relays the whole stream to the master over one upstream stream.
            let mut upstream: Option<(mpsc::Sender<pb::LeaseKeepAliveRequest>, Streaming<pb::LeaseKeepAliveResponse>)> =
                None;
            while let Some(Ok(req)) = incoming.next().await {
                let node = &shared.node;
                let answer = match shared.route(hop, || node.keep_alive(req.id)).await {
                    Ok(Route::Here(ttl)) => {
                        Ok(pb::LeaseKeepAliveResponse { header: Some(shared.current_header().await), id: req.id, ttl })
                    }
                    Err(status) if status.code() == tonic::Code::NotFound => {
                        // etcd answers an unknown or expired lease with TTL 0.
                        let header = Some(shared.current_header().await);
                        Ok(pb::LeaseKeepAliveResponse { header, id: req.id, ttl: 0 })
                    }
                    Err(status) => Err(status),
                    Ok(Route::Forward(channel)) => relay(&mut upstream, channel, req).await,
                };
                let failed = answer.is_err();
                if tx.send(answer).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx)) as KeepAliveStream))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let hop = is_forwarded(&request);
        let original = request.into_inner();
        let node = &self.0.node;
        match self.0.route(hop, || node.lease_status(original.id)).await {
            Ok(Route::Here(status)) => Ok(Response::new(pb::LeaseTimeToLiveResponse {
                header: Some(self.0.current_header().await),
                id: original.id,
                ttl: status.remaining.as_secs() as i64,
                granted_ttl: status.granted_ttl,
                keys: if original.keys { status.keys } else { Vec::new() },
            })),
            // etcd answers an unknown lease with TTL -1.
            Err(status) if status.code() == tonic::Code::NotFound => Ok(Response::new(pb::LeaseTimeToLiveResponse {
                header: Some(self.0.current_header().await),
                id: original.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            })),
            Err(status) => Err(status),
            Ok(Route::Forward(channel)) => LeaseClient::new(channel).lease_time_to_live(forwarded(original)).await,
        }
    }

    async fn lease_leases(
        &self,
        request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let hop = is_forwarded(&request);
        let original = request.into_inner();
        let node = &self.0.node;
        match self.0.route(hop, || node.lease_list()).await? {
            Route::Here(list) => Ok(Response::new(pb::LeaseLeasesResponse {
                header: Some(self.0.current_header().await),
                leases: list.into_iter().map(|l| pb::LeaseStatus { id: l.id }).collect(),
            })),
            Route::Forward(channel) => LeaseClient::new(channel).lease_leases(forwarded(original)).await,
        }
    }
}

async fn relay(
    upstream: &mut Option<(mpsc::Sender<pb::LeaseKeepAliveRequest>, Streaming<pb::LeaseKeepAliveResponse>)>,
    channel: tonic::transport::Channel,
    request: pb::LeaseKeepAliveRequest,
) -> Result<pb::LeaseKeepAliveResponse, Status> {
    if upstream.is_none() {
        let (tx, rx) = mpsc::channel(16);
        let responses = LeaseClient::new(channel).lease_keep_alive(forwarded(ReceiverStream::new(rx))).await?;
        *upstream = Some((tx, responses.into_inner()));
    }
    let Some((tx, responses)) = upstream.as_mut() else {
        return Err(Status::internal("leasekv: keepalive relay lost its stream"));
    };
    if tx.send(request).await.is_err() {
        *upstream = None;
        return Err(Status::unavailable("etcdserver: leader changed"));
    }
    match responses.next().await {
        Some(answer) => answer,
        None => {
            *upstream = None;
            Err(Status::unavailable("etcdserver: leader changed"))
        }
    }
}
