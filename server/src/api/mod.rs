//! The client-facing gRPC services: etcd's KV, Lease, Cluster and Maintenance (the subset
//! leasekv serves) and the `leasekv.v1` extension. Any node answers any request: a follower
//! forwards what only the master can do (writes, linearizable reads, keepalives) one hop to
//! the master; while there is no master it waits a bounded time, then answers UNAVAILABLE.

pub mod convert;
mod ext;
mod kv;
mod lease;
mod maintenance;

pub use ext::ExtService;
pub use kv::KvService;
pub use lease::LeaseService;
pub use maintenance::{ClusterService, MaintenanceService, WatchService};

use crate::node::NodeHandle;
use convert::client_error;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::ClientError;
use leasekv_kvstore::{Command, CommandResponse};
use leasekv_lease::NodeId;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// Metadata key marking a request a follower forwarded, so it is never forwarded twice.
pub const FORWARDED: &str = "leasekv-forwarded";

/// How long a request waits for a master before it fails with UNAVAILABLE.
const WAIT_FOR_MASTER: Duration = Duration::from_secs(3);

/// What every service shares.
pub struct Shared {
    /// The node loop.
    pub node: NodeHandle,
    /// This node.
    pub me: NodeId,
    /// The cluster id in response headers.
    pub cluster_id: u64,
    /// Every member: id, client address, peer address.
    pub members: Vec<(NodeId, SocketAddr, SocketAddr)>,
    channels: HashMap<NodeId, Channel>,
}

/// Where a request was served.
pub enum Route<T> {
    /// Here, with this result.
    Here(T),
    /// At the master: forward it there.
    Forward(Channel),
}

impl Shared {
    /// Builds the shared state with a lazily connected channel to every other member.
    pub fn new(
        node: NodeHandle,
        me: NodeId,
        cluster_id: u64,
        members: Vec<(NodeId, SocketAddr, SocketAddr)>,
    ) -> Arc<Self> {
        let mut channels = HashMap::new();
        for &(id, client_addr, _) in &members {
            if id == me {
                continue;
            }
            if let Ok(endpoint) = Endpoint::from_shared(format!("http://{client_addr}")) {
                channels.insert(id, endpoint.connect_timeout(Duration::from_millis(500)).connect_lazy());
            }
        }
        Arc::new(Shared { node, me, cluster_id, members, channels })
    }

    /// The channel to another member's client port.
    pub fn channel(&self, id: NodeId) -> Option<Channel> {
        self.channels.get(&id).cloned()
    }

    /// A response header at `revision`.
    pub fn header(&self, revision: i64) -> pb::ResponseHeader {
        let term = self.node.election.status().term().map_or(0, |t| t.counter);
        pb::ResponseHeader { cluster_id: self.cluster_id, member_id: self.me.0 as u64, revision, raft_term: term }
    }

    /// A response header at the store's current revision on this node, as etcd's Lease
    /// answers (keepalive, time-to-live, list) carry: they change nothing, so there is no
    /// revision of their own to report.
    pub async fn current_header(&self) -> pb::ResponseHeader {
        let revision = self.node.status().await.map_or(0, |s| s.revision);
        self.header(revision)
    }

    /// Runs `attempt` here; on "not master" forwards to the master (once), and while there
    /// is none retries for a bounded time.
    pub async fn route<T, F, Fut>(&self, forwarded: bool, mut attempt: F) -> Result<Route<T>, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let started = tokio::time::Instant::now();
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(Route::Here(value)),
                Err(error) => error,
            };
            let hint = match &error {
                ClientError::NotMaster { hint } => *hint,
                ClientError::NotReady => None,
                _ => return Err(client_error(error)),
            };
            if let Some(master) = hint.filter(|m| *m != self.me) {
                if forwarded {
                    // The node that sent it here believed this one was master: no second hop.
                    return Err(client_error(error));
                }
                if let Some(channel) = self.channels.get(&master) {
                    return Ok(Route::Forward(channel.clone()));
                }
            }
            if started.elapsed() >= WAIT_FOR_MASTER {
                return Err(client_error(error));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Shared {
    /// Serves a request that only the master can answer: here when this node is the ready
    /// master, else forwarded one hop to the master. A forward that cannot reach the hinted
    /// master (a stale hint: it just died) is tried again, through a fresh look at who is
    /// master, until the bounded wait runs out. Answers from a leasekv node are final: a
    /// write that may have been applied is never sent twice.
    pub async fn serve<T, R, L, LFut, H, F, FFut>(
        &self,
        hop: bool,
        mut local: L,
        here: H,
        mut remote: F,
    ) -> Result<R, Status>
    where
        L: FnMut() -> LFut,
        LFut: Future<Output = Result<T, ClientError>>,
        H: FnOnce(T) -> Result<R, Status>,
        F: FnMut(Channel) -> FFut,
        FFut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let started = tokio::time::Instant::now();
        loop {
            match self.route(hop, &mut local).await? {
                Route::Here(value) => return here(value),
                Route::Forward(channel) => match remote(channel).await {
                    Ok(response) => return Ok(response.into_inner()),
                    Err(status)
                        if status.code() == tonic::Code::Unavailable
                            && !status.message().starts_with("etcdserver:")
                            && started.elapsed() < WAIT_FOR_MASTER =>
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(status) => return Err(status),
                },
            }
        }
    }
}

impl Shared {
    /// [`Shared::serve`] for a command through the log: `here` turns the command's answer
    /// (with the response header at its revision) into the reply, or `None` when the store
    /// answered with the wrong kind; store errors get etcd's status.
    pub async fn serve_command<R, H, F, FFut>(
        &self,
        hop: bool,
        command: Command,
        here: H,
        remote: F,
    ) -> Result<R, Status>
    where
        H: FnOnce(CommandResponse, pb::ResponseHeader) -> Option<R>,
        F: FnMut(Channel) -> FFut,
        FFut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let local = || self.node.propose(command.clone());
        let answer = |applied: leasekv_kvstore::Applied| match applied.result {
            Ok(response) => here(response, self.header(applied.revision))
                .ok_or_else(|| Status::internal("leasekv: the store answered with a response of the wrong kind")),
            Err(error) => Err(convert::kv_error(&error)),
        };
        self.serve(hop, local, answer, remote).await
    }
}

/// Whether a request was forwarded by another node.
pub fn is_forwarded<T>(request: &Request<T>) -> bool {
    request.metadata().contains_key(FORWARDED)
}

/// Marks a request as forwarded.
pub fn forwarded<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    request
}
