//! The node loop: one tokio task owns the replica (log + state machine + sled) and feeds it
//! peer messages, client requests, the election's status and timeouts; after every batch of
//! inputs it syncs storage if asked, sends what the replica produced and answers clients.
//! Everything else talks to it through a [`NodeHandle`].

use crate::peers::PeerNetwork;
use leasekv_kvstore::log::{ClientError, LeaseStatus, LogMessage, ProposalId, ReadConsistency, Replica};
use leasekv_kvstore::storage::SledStorage;
use leasekv_kvstore::{Applied, Command, LeaseId, RangeRequest, RangeResponse, Revision};
use leasekv_lease::backend::ElectionStatus;
use leasekv_lease::backend::MonotonicClock;
use leasekv_lease::{ElectionBackend, NodeId};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// Requests the node loop serves.
pub enum Request {
    /// Propose a command through the log.
    Propose(Command, oneshot::Sender<Result<Applied, ClientError>>),
    /// Read.
    Read(RangeRequest, ReadConsistency, oneshot::Sender<Result<(RangeResponse, Revision), ClientError>>),
    /// Keep a lease alive.
    KeepAlive(LeaseId, oneshot::Sender<Result<i64, ClientError>>),
    /// One lease's status.
    LeaseStatus(LeaseId, oneshot::Sender<Result<LeaseStatus, ClientError>>),
    /// Every lease.
    LeaseList(oneshot::Sender<Result<Vec<LeaseStatus>, ClientError>>),
    /// Resolve a lease name from local state.
    ResolveName(String, oneshot::Sender<Option<LeaseId>>),
    /// Local figures.
    Status(oneshot::Sender<NodeStatus>),
    /// A log message from a peer.
    Peer(NodeId, LogMessage),
}

/// What a node reports about itself.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The store revision.
    pub revision: Revision,
    /// Highest applied slot.
    pub applied: u64,
    /// Highest chosen slot.
    pub commit: u64,
    /// Whether this node is the ready master.
    pub ready_master: bool,
    /// Who this node believes is master.
    pub master_hint: Option<NodeId>,
    /// Stored keys.
    pub keys: usize,
}

/// A cheap handle to the node loop.
#[derive(Clone)]
pub struct NodeHandle {
    tx: mpsc::Sender<Request>,
    /// The election backend.
    pub election: Arc<dyn ElectionBackend>,
}

impl NodeHandle {
    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Result<T, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| ClientError::Stopped("node is shutting down".into()))?;
        answer.await.map_err(|_| ClientError::Stopped("node is shutting down".into()))
    }

    /// Proposes a command.
    pub async fn propose(&self, command: Command) -> Result<Applied, ClientError> {
        self.ask(|r| Request::Propose(command, r)).await?
    }

    /// Reads.
    pub async fn read(
        &self,
        request: RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<(RangeResponse, Revision), ClientError> {
        self.ask(|r| Request::Read(request, consistency, r)).await?
    }

    /// Keeps a lease alive.
    pub async fn keep_alive(&self, id: LeaseId) -> Result<i64, ClientError> {
        self.ask(|r| Request::KeepAlive(id, r)).await?
    }

    /// One lease's status.
    pub async fn lease_status(&self, id: LeaseId) -> Result<LeaseStatus, ClientError> {
        self.ask(|r| Request::LeaseStatus(id, r)).await?
    }

    /// Every lease.
    pub async fn lease_list(&self) -> Result<Vec<LeaseStatus>, ClientError> {
        self.ask(Request::LeaseList).await?
    }

    /// Resolves a lease name from this node's state.
    pub async fn resolve_name(&self, name: String) -> Result<Option<LeaseId>, ClientError> {
        self.ask(|r| Request::ResolveName(name, r)).await
    }

    /// This node's figures.
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        self.ask(Request::Status).await
    }

    /// Hands a peer's log message to the loop (dropped when the loop is gone or full).
    pub fn deliver(&self, from: NodeId, message: LogMessage) {
        let _ = self.tx.try_send(Request::Peer(from, message));
    }
}

/// Starts the node loop.
pub fn start(
    replica: Replica<SledStorage>,
    election: Arc<dyn ElectionBackend>,
    clock: MonotonicClock,
    peers: PeerNetwork,
) -> NodeHandle {
    let (tx, rx) = mpsc::channel(65_536);
    let status = election.subscribe();
    let node = NodeLoop { replica, clock, peers, pending: HashMap::new() };
    tokio::spawn(node.run(rx, status));
    NodeHandle { tx, election }
}

struct NodeLoop {
    replica: Replica<SledStorage>,
    clock: MonotonicClock,
    peers: PeerNetwork,
    pending: HashMap<ProposalId, oneshot::Sender<Result<Applied, ClientError>>>,
}

/// Most requests handled before the replica's output is flushed (one sync covers them all).
const BATCH: usize = 4096;

impl NodeLoop {
    async fn run(mut self, mut rx: mpsc::Receiver<Request>, mut status: watch::Receiver<ElectionStatus>) {
        let initial = *status.borrow_and_update();
        self.apply_status(&initial);
        loop {
            let deadline = self.replica.poll_timeout().map(|t| self.clock.to_tokio(t));
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let s = *status.borrow_and_update();
                    self.apply_status(&s);
                }
                request = rx.recv() => {
                    let Some(request) = request else { break };
                    self.handle(request);
                    for _ in 0..BATCH {
                        match rx.try_recv() {
                            Ok(request) => self.handle(request),
                            Err(_) => break,
                        }
                    }
                }
                _ = sleep => {
                    let now = self.clock.now();
                    self.replica.handle_timeout(now);
                }
            }
            self.flush();
        }
        tracing::info!("node loop stopped");
    }

    fn apply_status(&mut self, status: &ElectionStatus) {
        let now = self.clock.now();
        self.replica.set_mastership(now, status.master, status.hint);
    }

    fn handle(&mut self, request: Request) {
        let now = self.clock.now();
        match request {
            Request::Propose(command, reply) => match self.replica.propose(now, command) {
                Ok(id) => {
                    self.pending.insert(id, reply);
                }
                Err(error) => {
                    let _ = reply.send(Err(error));
                }
            },
            Request::Read(request, consistency, reply) => {
                let _ = reply.send(self.replica.read(now, &request, consistency));
            }
            Request::KeepAlive(id, reply) => {
                let _ = reply.send(self.replica.keep_alive(now, id));
            }
            Request::LeaseStatus(id, reply) => {
                let _ = reply.send(self.replica.lease_status(now, id));
            }
            Request::LeaseList(reply) => {
                let _ = reply.send(self.replica.lease_list(now));
            }
            Request::ResolveName(name, reply) => {
                let _ = reply.send(self.replica.state().lease_id_by_name(&name));
            }
            Request::Status(reply) => {
                let state = self.replica.state();
                let _ = reply.send(NodeStatus {
                    revision: state.revision(),
                    applied: self.replica.applied_index(),
                    commit: self.replica.commit_index(),
                    ready_master: self.replica.is_ready_master(now),
                    master_hint: self.replica.master_hint(),
                    keys: state.key_count(),
                });
            }
            Request::Peer(from, message) => self.replica.handle_message(now, from, message),
        }
    }

    /// Sends, syncs and answers until the replica has nothing more to say (bounded).
    fn flush(&mut self) {
        for _ in 0..16 {
            let output = self.replica.take_output();
            for (to, message) in output.messages {
                self.peers.send_log(to, message);
            }
            for completion in output.completions {
                if let Some(reply) = self.pending.remove(&completion.id) {
                    let _ = reply.send(completion.result.map(|(_, applied)| applied));
                }
            }
            if !output.needs_sync {
                return;
            }
            // One sync makes every accept of this batch durable; the held messages are
            // released by it and go out on the next turn of this loop.
            let now = self.clock.now();
            self.replica.sync(now);
        }
    }
}
