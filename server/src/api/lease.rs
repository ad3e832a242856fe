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
        // etcd's rule: revoking deletes the lease's keys, so it needs WRITE on each; the
        // state machine checks that where it applies the revoke.
        caller.authenticated()?;
        let command = caller.command(Command::LeaseRevoke { id });
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
            let mut pacer = KeepAlivePacer::default();
            while let Some(Ok(request)) = incoming.next().await {
                let id = request.id;
                if let Some(wait) = pacer.wait(id, tokio::time::Instant::now()) {
                    tokio::time::sleep(wait).await;
                }
                pacer.renewing(id, tokio::time::Instant::now());
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

/// The shortest time between two renewals of one lease on one keepalive stream. etcd's
/// clients renew every TTL/3, at least 333 ms apart with leasekv's 1 s minimum TTL, so only
/// a flood ever waits.
pub const MIN_RENEW_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Paces one keepalive stream (docs/configuration.md, "Keepalive floods"). A stream is
/// served one request at a time, so it never has more than one renewal in flight; on top of
/// that, a request for a lease renewed less than [`MIN_RENEW_INTERVAL`] ago waits out the
/// rest of the interval before it is served. Every answer is still a real renewal (answering
/// early from the last one would promise the client time the lease does not have), and a
/// client sending faster than that fills its HTTP/2 flow-control window and is held there,
/// costing the node a bounded buffer and at most ten renewals a second per lease.
#[derive(Debug, Default)]
pub struct KeepAlivePacer {
    last: std::collections::HashMap<i64, tokio::time::Instant>,
}

impl KeepAlivePacer {
    /// Entries kept before old ones are dropped (leases not renewed within the interval need
    /// no entry), so a stream cycling through many lease ids costs bounded memory.
    const PRUNE_ABOVE: usize = 4096;

    /// How long a request for lease `id` must wait at `now`, if at all.
    pub fn wait(&self, id: i64, now: tokio::time::Instant) -> Option<std::time::Duration> {
        let due = *self.last.get(&id)? + MIN_RENEW_INTERVAL;
        (due > now).then(|| due - now)
    }

    /// Records that lease `id` is being renewed at `now`.
    pub fn renewing(&mut self, id: i64, now: tokio::time::Instant) {
        if self.last.len() >= Self::PRUNE_ABOVE {
            self.last.retain(|_, at| now.saturating_duration_since(*at) < MIN_RENEW_INTERVAL);
        }
        self.last.insert(id, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_renewed_again_within_the_interval_waits_out_the_rest() {
        let mut pacer = KeepAlivePacer::default();
        let t0 = tokio::time::Instant::now();
        assert_eq!(pacer.wait(7, t0), None, "a first renewal goes at once");
        pacer.renewing(7, t0);
        assert_eq!(pacer.wait(7, t0 + Duration::from_millis(30)), Some(Duration::from_millis(70)));
        assert_eq!(pacer.wait(8, t0), None, "other leases are not held up");
        assert_eq!(pacer.wait(7, t0 + MIN_RENEW_INTERVAL), None);
    }

    #[test]
    fn many_lease_ids_cost_bounded_memory() {
        let mut pacer = KeepAlivePacer::default();
        let t0 = tokio::time::Instant::now();
        for i in 0..100_000i64 {
            // One id a millisecond: the old ones fall out of the interval and are pruned.
            pacer.renewing(i, t0 + Duration::from_millis(i as u64));
        }
        assert!(pacer.last.len() <= KeepAlivePacer::PRUNE_ABOVE, "{}", pacer.last.len());
    }
}
