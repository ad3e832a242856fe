//! The client-facing gRPC services: etcd's KV, Watch, Lease, Cluster, Maintenance, Lock and
//! Election (the subset leasekv serves) and the `leasekv.v1` extension. Any node answers any request: what only
//! the master can do (writes, linearizable reads, lease keepalive and status) the node loop
//! forwards one hop to the master; while there is no master a request waits a bounded
//! time, then fails with UNAVAILABLE.

mod auth;
pub mod convert;
mod election;
pub mod errors;
mod ext;
mod guard;
mod kv;
mod lease;
mod lock;
mod maintenance;
mod range_shape;
mod range_stream;
mod read_txn;
mod recipe;
mod watch;

pub use auth::AuthService;
pub use election::ElectionService;
pub use ext::ExtService;
pub use kv::KvService;
pub use lease::LeaseService;
pub use lock::LockService;
pub use maintenance::{ClusterService, MaintenanceService};
pub use watch::{WatchServer, WatchService, WatchSettings};

use crate::config::ClientLimits;
use crate::node::NodeHandle;
use errors::request_error;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::RequestError;
use leasekv_kvstore::{Command, CommandResponse};
use leasekv_lease::NodeId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// The request size check of [`Shared::check_request_size`], on an encoded length.
pub fn check_request_size(len: usize, max: usize) -> Result<(), Status> {
    if len > max {
        tracing::debug!(len, max, "refused a request over [limits] max_request_bytes");
        return Err(errors::request_too_large(len, max));
    }
    Ok(())
}

/// How long a request waits for a master before it fails with UNAVAILABLE.
const WAIT_FOR_MASTER: Duration = Duration::from_secs(3);
/// How long a request waiting for a master waits between tries when the election reports
/// no change: a backstop for a master learned some other way (through the log).
const RETRY_EVERY: Duration = Duration::from_millis(50);
/// How soon a request tries again while the master is taking over the log: that is a
/// round trip and a sync, so waiting the full [`RETRY_EVERY`] would only add latency to
/// the first writes after a failover.
const RETRY_TAKEOVER: Duration = Duration::from_millis(5);

/// What every service shares.
pub struct Shared {
    /// The node loop.
    pub node: NodeHandle,
    /// This node.
    pub me: NodeId,
    /// The cluster id in response headers.
    pub cluster_id: u64,
    /// The lease-tracker backend's tracker node (`None` with PaxosLease): MemberRemove
    /// refuses to remove it.
    pub tracker: Option<NodeId>,
    /// What one client may cost this node (`[limits]`): the request size the services and
    /// the gateway check, the watchers per stream.
    pub limits: ClientLimits,
    /// What one request may hold (`[limits]`, the store's): a read-only Txn, answered
    /// without the log, is checked against them here.
    pub kv_limits: leasekv_kvstore::Limits,
    /// The bytes of Range answers this node may hold at once (`crate::read_budget`).
    pub read_budget: Arc<crate::read_budget::ReadBudget>,
}

impl Shared {
    /// Builds the shared state with the configured client and store limits.
    pub fn with_limits(
        node: NodeHandle,
        me: NodeId,
        cluster_id: u64,
        tracker: Option<NodeId>,
        (limits, kv_limits): (ClientLimits, leasekv_kvstore::Limits),
        read_budget_bytes: u64,
    ) -> Arc<Self> {
        let read_budget = crate::read_budget::ReadBudget::new(read_budget_bytes);
        Arc::new(Shared { node, me, cluster_id, tracker, limits, kv_limits, read_budget })
    }

    /// etcd's check of `--max-request-bytes` on a write: a request whose encoding is larger
    /// than the limit fails with etcd's exact error (InvalidArgument, `etcdserver: request
    /// is too large`), before it costs a log slot.
    pub fn check_request_size(&self, request: &impl prost::Message) -> Result<(), Status> {
        check_request_size(request.encoded_len(), self.limits.max_request_bytes)
    }

    /// A response header at `revision`. `raft_term` is the term as this node knows it, on
    /// every member as in etcd (clients such as Patroni take a falling term for a stale
    /// member): the log round, which every master takeover raises ([`NodeHandle::term`]).
    ///
    /// [`NodeHandle::term`]: crate::node::NodeHandle::term
    pub fn header(&self, revision: i64) -> pb::ResponseHeader {
        let term = self.node.term();
        pb::ResponseHeader { cluster_id: self.cluster_id, member_id: self.me.0 as u64, revision, raft_term: term }
    }

    /// A response header at the store's current revision on this node, as etcd's Lease
    /// answers (keepalive, time-to-live, list) carry: they change nothing, so there is no
    /// revision of their own to report.
    pub fn current_header(&self) -> pb::ResponseHeader {
        self.header(self.node.revision())
    }

    /// Serves a request through the node loop, which answers it here or has the master
    /// answer it (one hop over the peer stream). While there is no master, or the master
    /// is still taking over the log, it is tried again for a bounded time; then it fails
    /// with etcd's retryable UNAVAILABLE. An answer that a write may have been applied
    /// ("indeterminate") is final: a write is never sent twice.
    pub async fn serve<T, F, Fut>(&self, mut attempt: F) -> Result<T, Status>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let started = tokio::time::Instant::now();
        // Subscribed before the first try, so an election that ends between a "not master"
        // answer and the wait still wakes the wait.
        let mut election = self.node.election.subscribe();
        loop {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(RequestError::NotMaster { .. }) if started.elapsed() < WAIT_FOR_MASTER => {
                    // A new master shows up as an election change: try again at once then
                    // rather than at the next poll.
                    match tokio::time::timeout(RETRY_EVERY, election.changed()).await {
                        Ok(Ok(())) | Err(_) => {}
                        // The election has stopped (the node is shutting down): just poll.
                        Ok(Err(_)) => tokio::time::sleep(RETRY_EVERY).await,
                    }
                }
                Err(RequestError::NotReady) if started.elapsed() < WAIT_FOR_MASTER => {
                    tokio::time::sleep(RETRY_TAKEOVER).await;
                }
                Err(error) => return Err(request_error(error)),
            }
        }
    }

    /// [`Shared::serve`] for a command through the log: `here` turns the command's answer
    /// (with the response header at its revision) into the reply, or `None` when the store
    /// answered with the wrong kind; store errors get etcd's status.
    pub async fn serve_command<R>(
        &self,
        command: Command,
        here: impl FnOnce(CommandResponse, pb::ResponseHeader) -> Option<R>,
    ) -> Result<R, Status> {
        let applied = self.serve(|| self.node.propose(command.clone())).await?;
        match applied.result {
            Ok(response) => here(response, self.header(applied.revision))
                .ok_or_else(|| Status::internal("leasekv: the store answered with a response of the wrong kind")),
            Err(error) => Err(errors::kv_error(&error)),
        }
    }
}
