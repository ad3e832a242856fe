//! The handle the API layer holds: requests to the node loop, and what the loop publishes
//! (revision, term, membership, auth, the history feed) read without a trip through it.

use super::*;

/// A cheap handle to the node loop.
#[derive(Clone)]
pub struct NodeHandle {
    /// Client requests: bounded by `[limits] max_queued_requests`; one that finds it full
    /// is refused with etcd's "too many requests".
    pub(super) tx: mpsc::Sender<Request>,
    /// Peer messages and the loop's own reports: served before client requests, so that a
    /// node saturated by clients still answers its peers (see [`NodeHandle::deliver`]).
    pub(super) peer_tx: mpsc::Sender<Request>,
    /// The store revision, published by the node loop (see [`NodeHandle::revision`]).
    pub(super) revision: Arc<AtomicI64>,
    /// The log round this node knows, published by the node loop (see [`NodeHandle::term`]).
    pub(super) term: Arc<AtomicU64>,
    /// The election backend.
    pub election: Arc<dyn ElectionBackend>,
    /// The node's history as the node loop last published it, for watch streams.
    pub(super) history: HistoryFeed,
    /// The configuration in force on this node, as the node loop last published it.
    pub(super) membership: watch::Receiver<Arc<Membership>>,
    /// Users, roles and permissions as this node last applied them.
    pub(super) auth: watch::Receiver<Arc<AuthStore>>,
    /// Where a backup file is written before it is streamed (the data directory: a backup
    /// is as large as the state).
    pub(super) scratch: std::path::PathBuf,
}

/// Why the node loop dropped a request it had taken without answering it: it stopped.
/// A write may already be proposed here or forwarded to the master, so its outcome is
/// unknown and it must not be retried elsewhere; anything else may be.
fn dropped_by_stopping_loop(write: bool) -> RequestError {
    if write {
        RequestError::Indeterminate { hint: None }
    } else {
        RequestError::ShuttingDown
    }
}

impl NodeHandle {
    /// Hands a request to the node loop and waits for its answer. `write` says whether the
    /// loop may have set it going before it stopped without answering.
    async fn ask<T>(&self, write: bool, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Result<T, RequestError> {
        self.ask_as(Admission::Refuse, write, make).await
    }

    /// [`Self::ask`], waiting for room in the queue instead of being refused when it is
    /// full: for what must not fail under a client flood (lease keepalives, which keep
    /// registrations alive, and the node's own tasks: compaction, the corruption check).
    async fn ask_waiting<T>(
        &self,
        write: bool,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, RequestError> {
        self.ask_as(Admission::Wait, write, make).await
    }

    async fn ask_as<T>(
        &self,
        admission: Admission,
        write: bool,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, RequestError> {
        let (reply, answer) = oneshot::channel();
        if admission == Admission::Wait {
            self.tx.send(make(reply)).await.map_err(|_| RequestError::ShuttingDown)?;
            return answer.await.map_err(|_| dropped_by_stopping_loop(write));
        }
        // Not taken, nothing was done: the loop had stopped, or is saturated (etcd's
        // admission answer; waiting instead would only grow the queue and every latency).
        self.tx.try_send(make(reply)).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => {
                crate::metrics::metrics().client_requests_refused.inc();
                RequestError::Overloaded { queued: self.tx.max_capacity() }
            }
            mpsc::error::TrySendError::Closed(_) => RequestError::ShuttingDown,
        })?;
        answer.await.map_err(|_| dropped_by_stopping_loop(write))
    }

    /// Has the master answer `request`; `pick` takes the answer of the expected kind.
    async fn ask_master<T>(
        &self,
        request: MasterRequest,
        pick: impl FnOnce(MasterAnswer) -> Option<T>,
    ) -> Result<T, RequestError> {
        let write = request.is_write();
        expect_answer(self.ask(write, |reply| Request::Master(request, reply)).await?, pick)
    }

    /// Proposes a command.
    pub async fn propose(&self, command: Command) -> Result<Applied, RequestError> {
        let _pending = crate::metrics::PendingProposal::begin();
        let result = self
            .ask_master(MasterRequest::Propose(command), |answer| match answer {
                MasterAnswer::Propose(applied) => Some(applied),
                _ => None,
            })
            .await;
        if result.is_err() {
            crate::metrics::metrics().proposals_failed.inc();
        }
        result
    }

    /// Reads at `revision` (a past one from the history; 0 for the current one).
    pub async fn read(
        &self,
        request: RangeRequest,
        revision: Revision,
        consistency: ReadConsistency,
    ) -> Result<(RangeResponse, Revision), RequestError> {
        match consistency {
            ReadConsistency::Linearizable => {
                self.ask_master(MasterRequest::Read(request, revision), |answer| match answer {
                    MasterAnswer::Read(response, revision) => Some((response, revision)),
                    _ => None,
                })
                .await
            }
            ReadConsistency::Serializable => self.ask(false, |r| Request::LocalRead(request, revision, r)).await?,
        }
    }

    /// Keeps a lease alive. Waits for room in a full queue rather than being refused, and
    /// tries again when the master refused it forwarded ("too many requests", a few times,
    /// [`KEEPALIVE_RETRIES`]): a refused keepalive would end the client's stream and let its
    /// registrations expire.
    pub async fn keep_alive(&self, id: LeaseId) -> Result<i64, RequestError> {
        let mut wait = KEEPALIVE_FIRST_WAIT;
        let mut retries = 0;
        loop {
            let request = MasterRequest::KeepAlive(id);
            match self.ask_waiting(false, |reply| Request::Master(request, reply)).await? {
                Err(RequestError::Overloaded { .. }) if retries < KEEPALIVE_RETRIES => {
                    retries += 1;
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                answer => {
                    return expect_answer(answer, |answer| match answer {
                        MasterAnswer::KeepAlive(ttl) => Some(ttl),
                        _ => None,
                    })
                }
            }
        }
    }

    /// One lease's status.
    pub async fn lease_status(&self, id: LeaseId) -> Result<LeaseStatus, RequestError> {
        self.ask_master(MasterRequest::LeaseStatus(id), |answer| match answer {
            MasterAnswer::LeaseStatus(status) => Some(status),
            _ => None,
        })
        .await
    }

    /// Every lease.
    pub async fn lease_list(&self) -> Result<Vec<LeaseStatus>, RequestError> {
        self.ask_master(MasterRequest::LeaseList, |answer| match answer {
            MasterAnswer::LeaseList(list) => Some(list),
            _ => None,
        })
        .await
    }

    /// Has the master give up mastership. `NotMaster` when there is no master to ask.
    pub async fn step_down(&self) -> Result<(), RequestError> {
        self.ask_master(MasterRequest::StepDown, |answer| match answer {
            MasterAnswer::SteppedDown => Some(()),
            _ => None,
        })
        .await
    }

    /// Resolves a lease name from this node's state.
    pub async fn resolve_name(&self, name: String) -> Result<Option<LeaseId>, RequestError> {
        self.ask(false, |r| Request::ResolveName(name, r)).await
    }

    /// The store revision on this node, as of the node loop's last answers: never older
    /// than what any answer this node already gave reflects. Read without a trip through
    /// the loop, for the answers that carry the current revision but change nothing
    /// (every keepalive).
    pub fn revision(&self) -> Revision {
        self.revision.load(Ordering::Acquire)
    }

    /// The term as this node knows it, for response headers' `raft_term` on every member
    /// (as etcd fills it): the highest log round it promised or heard of, which every
    /// takeover raises.
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Acquire)
    }

    /// The cluster's configuration in force on this node (what its log applied, or the seed
    /// it started from while none is recorded), as of the node loop's last step.
    pub fn membership(&self) -> Arc<Membership> {
        self.membership.borrow().clone()
    }

    /// Users, roles and permissions as this node applied them (published before any answer
    /// to the command that changed them goes out).
    pub fn auth(&self) -> Arc<AuthStore> {
        self.auth.borrow().clone()
    }

    /// A feed of this node's applied history, for a watch stream (see [`HistoryFeed`]).
    pub fn history(&self) -> HistoryFeed {
        self.history.clone()
    }

    /// This node's figures. Waits for room in a full queue: the compactor, the corruption
    /// check and the health check read them, and must not stop for a moment of overload.
    pub async fn status(&self) -> Result<NodeStatus, RequestError> {
        self.ask_waiting(false, Request::Status).await
    }

    /// A backup file of this node's applied state, in etcd's snapshot format (an unlinked
    /// file in the data directory, at its start), its length and the revision it is at. Served from this node's state,
    /// as etcd serves a snapshot from the member asked: a follower's may be a little behind
    /// the master's. The state is read from a view, off the node loop, while writes go on.
    pub async fn backup(&self) -> Result<(std::fs::File, u64, Revision), RequestError> {
        let view = self.ask(false, Request::View).await??;
        let scratch = self.scratch.clone();
        let failed = |what: String| RequestError::StorageFailed(StorageFailure::new(StorageError::Io(what)));
        tokio::task::spawn_blocking(move || {
            let mut file = tempfile::tempfile_in(&scratch)
                .map_err(|e| failed(format!("cannot create a backup file in {}: {e}", scratch.display())))?;
            let len = leasekv_kvstore::etcd_snapshot::write_file(&view, &mut file, &scratch)
                .map_err(|e| failed(e.to_string()))?;
            Ok((file, len, view.revision()))
        })
        .await
        .map_err(|e| failed(format!("the backup task failed: {e}")))?
    }

    /// The hash of this node's keys and history at `revision` (0: the current revision),
    /// read from a view off the node loop.
    pub async fn hash_kv(&self, revision: Revision) -> Result<Result<KvHash, KvError>, RequestError> {
        let view = self.ask(false, Request::View).await??;
        tokio::task::spawn_blocking(move || view.hash_kv(revision)).await.map_err(|e| {
            RequestError::StorageFailed(StorageFailure::new(StorageError::Io(format!("the hash task failed: {e}"))))
        })
    }

    /// The hash of this node's whole state (a CRC-32 of its format 8 snapshot: keys,
    /// leases, history, membership, auth), and the revision it is at; read from a view off
    /// the node loop.
    pub async fn hash(&self) -> Result<(u32, Revision), RequestError> {
        let view = self.ask(false, Request::View).await??;
        tokio::task::spawn_blocking(move || {
            let mut hasher = HashingWriter(crc32fast::Hasher::new());
            leasekv_kvstore::state::stream::write_format8(&view, &mut hasher)
                .map(|_| (hasher.0.finalize(), view.revision()))
                .map_err(|e| {
                    RequestError::StorageFailed(StorageFailure::new(StorageError::backend("hashing the state", e)))
                })
        })
        .await
        .map_err(|e| {
            RequestError::StorageFailed(StorageFailure::new(StorageError::Io(format!("the hash task failed: {e}"))))
        })?
    }

    /// Hands a peer's log message to the loop, on the peer queue (served before clients).
    pub fn deliver_log(&self, from: NodeId, message: LogMessage) {
        self.deliver(Request::Log(from, message));
    }

    /// Hands the master's answer to one of this node's forwards to the loop.
    pub fn deliver_answer(&self, from: NodeId, id: ForwardId, answer: MasterResult) {
        self.deliver(Request::Answered(from, id, answer));
    }

    /// Hands the loop a snapshot from peer `from`, installed, checked and synced in a
    /// staged engine as it arrived, to adopt in one step.
    pub fn deliver_staged_snapshot(&self, from: NodeId, snapshot: Box<leasekv_kvstore::log::StagedSnapshot>) {
        self.deliver(Request::StagedSnapshot(from, snapshot));
    }

    /// Tells the loop a snapshot from peer `from` could not be installed, and why: the node
    /// withdraws from the election until an install succeeds.
    pub fn snapshot_install_failed(&self, from: NodeId, reason: String) {
        self.deliver(Request::SnapshotInstallFailed(from, reason));
    }

    /// Hands a peer's message to the loop, on the peer queue that the loop serves before
    /// any client request. Dropped only when the loop is gone, or stalled so long that
    /// `PEER_QUEUE` (65,536) messages wait: the protocols recover from loss, and a forward's
    /// sender gives up after its timeout.
    fn deliver(&self, request: Request) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.peer_tx.try_send(request) {
            crate::metrics::metrics().peer_messages_dropped.inc();
        }
    }

    /// Hands a request a follower forwarded to the loop, where [`forward_route`] says: a
    /// forward counts against this master's client limit as the client's request would have
    /// here, so a flood through the followers is refused as one sent here would be (the
    /// refusal is the master's answer).
    pub fn deliver_forward(
        &self,
        from: NodeId,
        id: ForwardId,
        request: MasterRequest,
        refusable: bool,
    ) -> Result<(), RequestError> {
        let keepalive = matches!(request, MasterRequest::KeepAlive(_));
        let overloaded = || {
            crate::metrics::metrics().forwards_refused.inc();
            RequestError::Overloaded { queued: self.tx.max_capacity() }
        };
        match forward_route(keepalive, refusable, self.peer_tx.capacity(), self.peer_tx.max_capacity()) {
            ForwardRoute::PeerQueue => {
                self.deliver(Request::Forwarded(from, id, request));
                Ok(())
            }
            ForwardRoute::Refuse => Err(overloaded()),
            ForwardRoute::ClientQueue => {
                self.tx.try_send(Request::Forwarded(from, id, request)).map_err(|error| match error {
                    mpsc::error::TrySendError::Full(_) => overloaded(),
                    mpsc::error::TrySendError::Closed(_) => RequestError::ShuttingDown,
                })
            }
        }
    }
}

/// Where a forwarded request goes at the master (see [`NodeHandle::deliver_forward`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ForwardRoute {
    /// The client queue, refused when it is full.
    ClientQueue,
    /// The peer queue, which the loop serves first and which drops only when full.
    PeerQueue,
    /// Refused now: "too many requests".
    Refuse,
}

/// Where a forwarded request goes, given whether it is a lease keepalive, whether its
/// follower reads a refusal (peer protocol version 3 on), and the peer queue's free room of
/// its capacity.
///
/// A follower that cannot read a refusal has its forwards queued with the peer messages.
/// A keepalive is not put in the client queue: a client flood would refuse it, and a
/// refused keepalive lets registrations expire (a local keepalive waits for room instead).
/// It goes on the peer queue while that queue is at most half full, and is refused beyond:
/// the peer queue drops what does not fit, log messages included, so a keepalive flood
/// through the followers would otherwise cost the master the acknowledgements that keep it
/// master. The follower retries a refused keepalive ([`NodeHandle::keep_alive`]).
fn forward_route(keepalive: bool, refusable: bool, peer_room: usize, peer_capacity: usize) -> ForwardRoute {
    match (refusable, keepalive) {
        (false, _) => ForwardRoute::PeerQueue,
        (true, false) => ForwardRoute::ClientQueue,
        (true, true) if peer_room > peer_capacity / 2 => ForwardRoute::PeerQueue,
        (true, true) => ForwardRoute::Refuse,
    }
}

/// How often a keepalive refused for overload ("too many requests": the master's queues
/// were full) is tried again, and the first wait; each wait doubles (20 ms to 320 ms, 620 ms
/// in all: well within the shortest TTL a client keeps alive, a third of which it waits
/// between keepalives).
const KEEPALIVE_RETRIES: u32 = 5;
const KEEPALIVE_FIRST_WAIT: Duration = Duration::from_millis(20);

#[cfg(test)]
mod forward_route_tests {
    use super::*;

    #[test]
    fn a_forwarded_keepalive_is_refused_once_the_peer_queue_is_half_full() {
        assert_eq!(forward_route(true, true, 65_536, 65_536), ForwardRoute::PeerQueue);
        assert_eq!(forward_route(true, true, 32_769, 65_536), ForwardRoute::PeerQueue);
        assert_eq!(forward_route(true, true, 32_768, 65_536), ForwardRoute::Refuse, "the log keeps half the queue");
        assert_eq!(forward_route(true, true, 0, 65_536), ForwardRoute::Refuse);
    }

    #[test]
    fn other_forwards_count_against_the_client_queue_unless_their_follower_cannot_read_a_refusal() {
        assert_eq!(forward_route(false, true, 0, 65_536), ForwardRoute::ClientQueue);
        assert_eq!(forward_route(false, false, 65_536, 65_536), ForwardRoute::PeerQueue);
        assert_eq!(forward_route(true, false, 0, 65_536), ForwardRoute::PeerQueue, "an old follower's keepalive");
    }
}

/// A `Write` that feeds a CRC-32: etcd's Hash of the whole state, computed over the state
/// as a snapshot of it would be written, without keeping the bytes.
struct HashingWriter(crc32fast::Hasher);

impl std::io::Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether a request that finds the client queue full is refused or waits for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Refuse,
    Wait,
}
