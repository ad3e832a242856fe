//! The node loop: one tokio task owns the replica (log + state machine + sled) and feeds it
//! peer messages, client requests, the election's status and timeouts; after every batch of
//! inputs it syncs storage if asked, sends what the replica produced and answers clients.
//! A request only the master can answer is served here on the master and forwarded to it
//! from anywhere else ([`crate::forward`]). Everything else talks to the loop through a
//! [`NodeHandle`].

use crate::election_link::ElectionLink;
use crate::fault_injection::{FaultInjection, NodeFaults};
use crate::forward::{expect_answer, ForwardId, Forwards, MasterAnswer, MasterRequest, MasterResult, Reply};
use crate::history_feed::{self, FeedPublisher, HistoryFeed};
use crate::peer::lanes::PeerNetwork;
use crate::peer::parked::{GrowingFile, GrowingWriter, Payload};
use crate::peer::wire::Wire;
use leasekv_kvstore::auth::AuthStore;
use leasekv_kvstore::log::{
    LeaseStatus, LogMessage, ProposalId, ReadConsistency, Replica, RequestError, StorageFailure, SyncTicket,
};
use leasekv_kvstore::membership::{url_address, Membership};
use leasekv_kvstore::state::{KvHash, StateView};
use leasekv_kvstore::storage::{SledStorage, SledSyncHandle, StorageError};
use leasekv_kvstore::{Applied, Command, KvError, LeaseId, RangeRequest, RangeResponse, Revision};
use leasekv_lease::backend::ElectionStatus;
use leasekv_lease::backend::MonotonicClock;
use leasekv_lease::{ElectionBackend, NodeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// Requests the node loop serves.
pub enum Request {
    /// Something only the master can answer: served here on the master, forwarded to it
    /// from anywhere else.
    Master(MasterRequest, Reply),
    /// A serializable read of this node's state, at a past revision or (0) the current one.
    LocalRead(RangeRequest, Revision, oneshot::Sender<Result<(RangeResponse, Revision), RequestError>>),
    /// Resolve a lease name from local state.
    ResolveName(String, oneshot::Sender<Option<LeaseId>>),
    /// Local figures.
    Status(oneshot::Sender<NodeStatus>),
    /// A view of this node's applied state, read off the loop (backups, HashKV).
    View(oneshot::Sender<Result<StateView, RequestError>>),
    /// A log message from a peer.
    Log(NodeId, LogMessage),
    /// A snapshot received from peer `.0`, installed, checked and synced in a staged engine
    /// as it arrived: adopted in one step.
    StagedSnapshot(NodeId, Box<leasekv_kvstore::log::StagedSnapshot>),
    /// A checkpoint's engine sync ran on a blocking thread, taking `.2`.
    CheckpointSynced(
        leasekv_kvstore::log::CheckpointTicket,
        Result<(), leasekv_kvstore::engine::EngineError>,
        Duration,
    ),
    /// A request a follower forwarded to this node as master.
    Forwarded(NodeId, ForwardId, MasterRequest),
    /// The master's answer to one of this node's forwards.
    Answered(NodeId, ForwardId, MasterResult),
}

/// What a node reports about itself.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The store revision.
    pub revision: Revision,
    /// The history's compaction point (0 if never compacted).
    pub compacted: Revision,
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
    /// Bytes the storage takes on disk, if known.
    pub db_size: Option<u64>,
    /// Bytes of data in use, what the space quota measures.
    pub bytes_in_use: u64,
    /// The space quota (0: none).
    pub quota_bytes: u64,
    /// The raised alarms.
    pub alarms: Vec<leasekv_kvstore::Alarm>,
    /// Snapshots sent and installed, expiry batches proposed.
    pub counts: leasekv_kvstore::log::ReplicaCounts,
    /// Requests forwarded to the master and not answered yet.
    pub forwards: usize,
}

/// A cheap handle to the node loop.
#[derive(Clone)]
pub struct NodeHandle {
    tx: mpsc::Sender<Request>,
    /// The store revision, published by the node loop (see [`NodeHandle::revision`]).
    revision: Arc<AtomicI64>,
    /// The log round this node knows, published by the node loop (see [`NodeHandle::term`]).
    term: Arc<AtomicU64>,
    /// The election backend.
    pub election: Arc<dyn ElectionBackend>,
    /// The node's history as the node loop last published it, for watch streams.
    history: HistoryFeed,
    /// The configuration in force on this node, as the node loop last published it.
    membership: watch::Receiver<Arc<Membership>>,
    /// Users, roles and permissions as this node last applied them.
    auth: watch::Receiver<Arc<AuthStore>>,
    /// Where a backup file is written before it is streamed (the data directory: a backup
    /// is as large as the state).
    scratch: std::path::PathBuf,
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
        let (reply, answer) = oneshot::channel();
        // Not taken: the loop had stopped, nothing was done.
        self.tx.send(make(reply)).await.map_err(|_| RequestError::ShuttingDown)?;
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

    /// Keeps a lease alive.
    pub async fn keep_alive(&self, id: LeaseId) -> Result<i64, RequestError> {
        self.ask_master(MasterRequest::KeepAlive(id), |answer| match answer {
            MasterAnswer::KeepAlive(ttl) => Some(ttl),
            _ => None,
        })
        .await
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

    /// This node's figures.
    pub async fn status(&self) -> Result<NodeStatus, RequestError> {
        self.ask(false, Request::Status).await
    }

    /// A backup file of this node's applied state (an unlinked file in the data directory,
    /// at its start), its length and the revision it is at. Served from this node's state,
    /// as etcd serves a snapshot from the member asked: a follower's may be a little behind
    /// the master's. The state is read from a view, off the node loop, while writes go on.
    pub async fn backup(&self) -> Result<(std::fs::File, u64, Revision), RequestError> {
        let view = self.ask(false, Request::View).await??;
        let scratch = self.scratch.clone();
        let failed = |what: String| RequestError::StorageFailed(StorageFailure::new(StorageError::Io(what)));
        tokio::task::spawn_blocking(move || {
            let mut file = tempfile::tempfile_in(&scratch)
                .map_err(|e| failed(format!("cannot create a backup file in {}: {e}", scratch.display())))?;
            let len = leasekv_kvstore::backup::write_file(&view, &mut file).map_err(|e| failed(e.to_string()))?;
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
            leasekv_kvstore::state::stream::write(&view, &mut hasher)
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

    /// Hands a peer's message to the loop (dropped when the loop is gone or full: the
    /// protocols recover from loss, and a forward's sender gives up after its timeout).
    pub fn deliver(&self, request: Request) {
        let _ = self.tx.try_send(request);
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

/// A node-loop turn this long is logged (with where it went), at most once per
/// [`SLOW_TURN_LOG_EVERY`]: every request waits while one runs.
const SLOW_TURN: Duration = Duration::from_millis(50);
const SLOW_TURN_LOG_EVERY: Duration = Duration::from_secs(1);

/// Resolves when the node's storage failed (disk full, an I/O error), with the failure:
/// the node then serves nothing and the process should stop (see [`crate::run`]).
pub type StorageFailed = oneshot::Receiver<String>;

/// Resolves when this node applied its own removal from the cluster, with the configuration
/// epoch that removed it: the node then takes part in nothing and should stop.
pub type Removed = oneshot::Receiver<u64>;

/// Starts the node loop. `link` carries configuration changes to the election and its
/// change gate back (see [`crate::election_link`]).
pub fn start(
    replica: Replica<SledStorage>,
    election: Arc<dyn ElectionBackend>,
    link: Arc<ElectionLink>,
    clock: MonotonicClock,
    peers: PeerNetwork,
    faults: &FaultInjection,
) -> (NodeHandle, StorageFailed, Removed) {
    let (failed_tx, failed) = oneshot::channel();
    let (removed_tx, removed) = oneshot::channel();
    let (membership_tx, membership) = watch::channel(Arc::new(replica.membership().clone()));
    let (auth_tx, auth) = watch::channel(Arc::new(replica.state().auth().clone()));
    let (tx, rx) = mpsc::channel(65_536);
    let status = election.subscribe();
    let scratch = replica.storage().dir().to_path_buf();
    let (disk, synced) = match start_sync_thread(replica.storage().sync_handle()) {
        Ok((disk, synced)) => (Some(disk), Some(synced)),
        Err(error) => {
            tracing::warn!(%error, "cannot start the sync thread; syncing on the node loop instead");
            (None, None)
        }
    };
    let revision = Arc::new(AtomicI64::new(replica.state().revision()));
    let term = Arc::new(AtomicU64::new(replica.known_round()));
    let (feed, history) = history_feed::channel(replica.state().history_reader());
    let faults = NodeFaults::new(faults, replica.id().0, clock);
    let node = NodeLoop {
        faults,
        revision: revision.clone(),
        term: term.clone(),
        feed,
        election: election.clone(),
        replica,
        clock,
        peers,
        proposals: HashMap::new(),
        forwards: Forwards::default(),
        known_master: None,
        disk,
        sync_in_flight: None,
        last_sync_took: Duration::ZERO,
        storage_failed: Some(failed_tx),
        to_self: tx.clone(),
        link,
        seen_epoch: None,
        membership: membership_tx,
        auth: auth_tx,
        removed: Some(removed_tx),
        engine_writes: EngineWriteDeadline::default(),
    };
    tokio::spawn(node.run(rx, status, synced));
    (NodeHandle { tx, revision, term, election, history, membership, auth, scratch }, failed, removed)
}

/// Who waits for the answer to a master request served on this node.
enum Asker {
    /// A client of this node.
    Local(Reply),
    /// A follower that forwarded it.
    Remote(NodeId, ForwardId),
}

impl Asker {
    /// Hands over the answer: to the client's task, or back over the peer stream.
    fn answer(self, peers: &PeerNetwork, result: MasterResult) {
        match self {
            Asker::Local(reply) => drop(reply.send(result)),
            Asker::Remote(node, id) => peers.send(node, &Wire::Answer(id, result)),
        }
    }
}

struct NodeLoop {
    replica: Replica<SledStorage>,
    /// Test-only faults (nothing in a release build).
    faults: NodeFaults,
    /// The election, for a step-down.
    election: Arc<dyn ElectionBackend>,
    /// Shared with every [`NodeHandle`].
    revision: Arc<AtomicI64>,
    /// The log round known, for the handles.
    term: Arc<AtomicU64>,
    /// Wakes the watch streams when the history grew.
    feed: FeedPublisher,
    clock: MonotonicClock,
    peers: PeerNetwork,
    /// Who waits for each proposal this node made as master.
    proposals: HashMap<ProposalId, Asker>,
    forwards: Forwards,
    /// The master as last seen, so forwards to a deposed one are given up at once.
    known_master: Option<NodeId>,
    /// The sync thread's queue (`None`: sync on this task).
    disk: Option<std::sync::mpsc::Sender<SyncTicket>>,
    /// The sync the disk thread is working on, and when it was handed over.
    sync_in_flight: Option<(SyncTicket, Instant)>,
    /// How long the last finished sync took (wherever it ran).
    last_sync_took: Duration,
    /// Told once when the storage fails.
    storage_failed: Option<oneshot::Sender<String>>,
    /// This loop's own queue, for work it hands to blocking threads to report back on.
    to_self: mpsc::Sender<Request>,
    /// The election's side of configuration changes.
    link: Arc<ElectionLink>,
    /// The configuration epoch last handed to the election and the peer network.
    seen_epoch: Option<u64>,
    /// Publishes the configuration in force to the handles.
    membership: watch::Sender<Arc<Membership>>,
    /// Publishes the auth store to the handles.
    auth: watch::Sender<Arc<AuthStore>>,
    /// Told once when this node applied its own removal.
    removed: Option<oneshot::Sender<u64>>,
    /// When the commands applied and not yet written to the state engine must be written
    /// (see [`NodeLoop::flush_engine_when_due`]).
    engine_writes: EngineWriteDeadline,
}

/// How long the loop must have had nothing to do before a sync may run on the loop itself
/// instead of the sync thread (see [`NodeLoop::flush`]).
const IDLE_BEFORE_SYNC_ON_LOOP: Duration = Duration::from_micros(150);
/// Longest time applied commands wait to be written to the state engine (see
/// [`NodeLoop::flush_engine_when_due`]).
const ENGINE_FLUSH_DELAY: Duration = Duration::from_millis(5);

/// When the commands applied and not yet in the state engine must be written: at most
/// [`ENGINE_FLUSH_DELAY`] after the first turn that left some unwritten.
#[derive(Debug, Default)]
struct EngineWriteDeadline {
    due: Option<tokio::time::Instant>,
}

impl EngineWriteDeadline {
    /// Whether a turn ending at `now` must write, given whether anything is `unwritten`;
    /// the first turn that leaves something unwritten sets the deadline, a write clears it.
    fn write_now(&mut self, now: tokio::time::Instant, unwritten: bool) -> bool {
        if !unwritten {
            self.due = None;
            return false;
        }
        let due = *self.due.get_or_insert(now + ENGINE_FLUSH_DELAY);
        if now < due {
            return false;
        }
        self.due = None;
        true
    }

    /// When the loop must wake to write, if anything is unwritten.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.due
    }
}
/// A sync runs on the loop only while the disk is this fast: one slow sync sends the next
/// ones to the sync thread until a sync there is quick again.
const FAST_SYNC: Duration = Duration::from_millis(1);

/// A finished sync: its ticket and outcome.
type Synced = (SyncTicket, Result<(), StorageError>);

/// Starts the thread that runs the replica's syncs, so the node loop goes on accepting,
/// answering and applying while the disk works; whatever arrives meanwhile is covered by
/// the next sync (group commit). One sync at a time: the replica begins the next only when
/// this one is done.
fn start_sync_thread(
    handle: SledSyncHandle,
) -> std::io::Result<(std::sync::mpsc::Sender<SyncTicket>, mpsc::UnboundedReceiver<Synced>)> {
    let (requests, incoming) = std::sync::mpsc::channel::<SyncTicket>();
    let (done, synced) = mpsc::unbounded_channel();
    std::thread::Builder::new().name("kvserver-sync".into()).spawn(move || {
        while let Ok(ticket) = incoming.recv() {
            if done.send((ticket, handle.sync())).is_err() {
                return;
            }
        }
    })?;
    Ok((requests, synced))
}

/// Most requests handled before the replica's output is flushed (one sync covers them all).
const BATCH: usize = 4096;

async fn next_sync(synced: &mut Option<mpsc::UnboundedReceiver<Synced>>) -> Option<Synced> {
    match synced {
        Some(synced) => synced.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl NodeLoop {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Request>,
        mut status: watch::Receiver<ElectionStatus>,
        mut synced: Option<mpsc::UnboundedReceiver<Synced>>,
    ) {
        let initial = *status.borrow_and_update();
        self.apply_status(&initial);
        let mut busy_until = Instant::now();
        let mut last_slow_turn_logged: Option<Instant> = None;
        loop {
            if let Some(failure) = self.replica.storage_failure() {
                if let Some(tell) = self.storage_failed.take() {
                    let _ = tell.send(failure.to_string());
                }
            }
            // A renewal that arrived while the loop was busy (a snapshot, a large apply) is
            // applied before anything else: `select!` picks among ready branches at random,
            // and a replica timeout handled first would find the previous lease run out and
            // give up the log round of a master whose mastership was renewed all along.
            if status.has_changed().unwrap_or(false) {
                let s = *status.borrow_and_update();
                self.apply_status(&s);
            }
            // Whether this turn handles exactly one input, so the loop's only sends are the
            // replica's output, which `flush` sees.
            let mut one_input = true;
            let replica_deadline = self.replica.poll_timeout().map(|t| self.clock.to_tokio(t));
            let forward_deadline = self.forwards.next_deadline().map(tokio::time::Instant::from_std);
            // When the turn's input arrived: each branch sets it first, so the turn measured is
            // the input's handling and everything after it, the wait for an input left out.
            let turn_began: Instant;
            tokio::select! {
                changed = status.changed() => {
                    turn_began = Instant::now();
                    if changed.is_err() {
                        break;
                    }
                    let s = *status.borrow_and_update();
                    self.apply_status(&s);
                }
                request = rx.recv() => {
                    turn_began = Instant::now();
                    let Some(request) = request else { break };
                    self.handle(request);
                    for _ in 0..BATCH {
                        match rx.try_recv() {
                            Ok(request) => {
                                one_input = false;
                                self.handle(request);
                            }
                            Err(_) => break,
                        }
                    }
                }
                _ = sleep_until(replica_deadline) => {
                    turn_began = Instant::now();
                    let now = self.clock.now();
                    self.replica.handle_timeout(now);
                }
                done = next_sync(&mut synced), if self.sync_in_flight.is_some() => {
                    turn_began = Instant::now();
                    if let Some((ticket, handed_over)) = self.sync_in_flight.take() {
                        let result = done.map_or_else(|| Err(StorageError::Io("the sync thread stopped".into())), |(_, r)| r);
                        let now = self.clock.now();
                        self.replica.finish_sync(now, ticket, result);
                        self.last_sync_took = handed_over.elapsed();
                        crate::metrics::metrics().fsync_took(self.last_sync_took);
                    }
                }
                _ = sleep_until(self.engine_writes.due()) => {
                    turn_began = Instant::now();
                    // `flush` below writes what is due.
                }
                _ = sleep_until(forward_deadline) => {
                    turn_began = Instant::now();
                    let hint = self.replica.master_hint();
                    self.forwards.expire(Instant::now(), hint);
                }
            }
            let handled = Instant::now();
            let woke_from_idle = one_input && rx.is_empty() && busy_until.elapsed() >= IDLE_BEFORE_SYNC_ON_LOOP;
            self.flush(woke_from_idle);
            let flushed = Instant::now();
            if self.replica.snapshot_due() {
                self.take_snapshot();
            }
            self.notice_master_change();
            busy_until = Instant::now();
            let took = busy_until.duration_since(turn_began);
            crate::metrics::metrics().loop_turn_took(took);
            if took >= SLOW_TURN && last_slow_turn_logged.is_none_or(|at| at.elapsed() >= SLOW_TURN_LOG_EVERY) {
                last_slow_turn_logged = Some(busy_until);
                tracing::info!(
                    took_ms = took.as_millis() as u64,
                    input_ms = handled.duration_since(turn_began).as_millis() as u64,
                    flush_ms = flushed.duration_since(handled).as_millis() as u64,
                    after_ms = busy_until.duration_since(flushed).as_millis() as u64,
                    "slow node loop turn"
                );
            }
        }
        // The log holds what was applied and not written, and a restart replays it; the
        // write spares the replay.
        self.replica.flush_applied();
        tracing::info!("node loop stopped");
    }

    /// Does what the replica says is due after this turn's answers went out: a checkpoint
    /// (the state engine synced, the log behind it dropped) and snapshots for peers behind
    /// the log's start.
    ///
    /// A checkpoint is an engine sync: a flush of what sled has not written yet (its own
    /// flusher writes every 500 ms), which took up to a quarter of a second under a put
    /// load, every turn waiting behind it. It runs on a blocking thread while the loop goes
    /// on applying; its end comes back as [`Request::CheckpointSynced`], and only then is the
    /// log behind it dropped. A snapshot for peers is a view taken here and serialized on a
    /// blocking thread while the loop goes on; the peers pull it when it is parked.
    fn take_snapshot(&mut self) {
        let now = self.clock.now();
        if let Some(ticket) = self.replica.begin_checkpoint() {
            let to_self = self.to_self.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let synced = ticket.sync();
                // Waits for room rather than losing the ticket (no checkpoint would follow).
                let _ = to_self.blocking_send(Request::CheckpointSynced(ticket, synced, started.elapsed()));
            });
        }
        if let Some(job) = self.replica.take_snapshot_job(now) {
            // Parked before it is built: the peers pull it as it is written.
            let dir = self.replica.storage().dir().to_path_buf();
            let (growing, writer) = match GrowingFile::create(&dir) {
                Ok(file) => file,
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot create a snapshot file for peers; they will ask again");
                    return self.flush(false);
                }
            };
            let payload = Arc::new(Payload::Growing(growing));
            for &peer in &job.peers {
                self.peers.send_snapshot(peer, job.index, Arc::clone(&payload));
            }
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                match build_peer_snapshot(&job.view, writer) {
                    Ok(len) => tracing::info!(
                        index = job.index,
                        bytes = len,
                        took_ms = started.elapsed().as_millis() as u64,
                        "snapshot for peers built"
                    ),
                    Err(error) => tracing::warn!(%error, "cannot build a snapshot for peers; they will ask again"),
                }
            });
        }
        self.flush(false);
    }

    fn apply_status(&mut self, status: &ElectionStatus) {
        let now = self.clock.now();
        self.faults.mastership(now, status.master.map(|m| m.valid_until));
        self.replica.set_mastership(now, status.master, status.hint);
    }

    /// Forwards to a master that is no longer the master will not be answered. Only a new
    /// master counts: "no master known" (a lease between renewals, or a master that just
    /// died) abandons nothing, so a healthy master's in-flight writes never fail for it; the
    /// successor's election, or the forward's timeout, settles a dead master's forwards.
    fn notice_master_change(&mut self) {
        let Some(master) = self.replica.master_hint() else { return };
        if Some(master) != self.known_master {
            self.known_master = Some(master);
            if !self.forwards.is_empty() {
                self.forwards.master_changed(master);
            }
        }
    }

    fn handle(&mut self, request: Request) {
        self.publish_revision();
        let now = self.clock.now();
        match request {
            Request::Master(request, reply) => {
                let master = self.replica.master_hint().filter(|m| *m != self.replica.id());
                match master {
                    // A lane known to be down would drop the request: it never leaves, so
                    // "not master" is the truth, and the API layer waits for the next master
                    // and tries again rather than the client getting "indeterminate" later.
                    Some(master) if !self.replica.is_master_at(now) => {
                        if self.peers.log_lane_down(master) {
                            let _ = reply.send(Err(RequestError::NotMaster { hint: None }));
                        } else {
                            let id = self.forwards.start(&request, reply, master, Instant::now());
                            self.peers.send(master, &Wire::Forward(id, request));
                        }
                    }
                    _ => self.serve_here(request, Asker::Local(reply)),
                }
            }
            // Served here whether or not this node is master: a request is forwarded at most
            // once, so a stale hint costs one "not master" answer, never a loop.
            Request::Forwarded(from, id, request) => self.serve_here(request, Asker::Remote(from, id)),
            Request::Answered(from, id, result) => self.forwards.answer(from, id, result),
            Request::LocalRead(request, revision, reply) => {
                let _ = reply.send(self.replica.read_at(now, &request, revision, ReadConsistency::Serializable));
            }
            Request::ResolveName(name, reply) => {
                let _ = reply.send(self.replica.state().lease_id_by_name(&name));
            }
            Request::Status(reply) => {
                let state = self.replica.state();
                let _ = reply.send(NodeStatus {
                    revision: state.revision(),
                    compacted: state.compacted_revision(),
                    applied: self.replica.applied_index(),
                    commit: self.replica.commit_index(),
                    ready_master: self.replica.is_ready_master(now),
                    master_hint: self.replica.master_hint(),
                    keys: state.key_count(),
                    db_size: leasekv_kvstore::storage::Storage::size_on_disk(self.replica.storage()),
                    bytes_in_use: state.bytes_in_use(),
                    quota_bytes: self.replica.limits().quota_bytes,
                    alarms: state.alarms().copied().collect(),
                    counts: self.replica.counts(),
                    forwards: self.forwards.len(),
                });
            }
            Request::View(reply) => {
                let _ =
                    reply.send(self.replica.view().map_err(|e| RequestError::StorageFailed(StorageFailure::new(e))));
            }
            Request::Log(from, message) => self.replica.handle_message(now, from, message),
            Request::CheckpointSynced(ticket, synced, took) => {
                if took > Duration::from_millis(100) {
                    tracing::info!(took_ms = took.as_millis() as u64, slot = ticket.slot(), "checkpoint synced");
                }
                self.replica.finish_checkpoint(ticket, synced);
            }
            Request::StagedSnapshot(from, snapshot) => {
                let (started, index) = (Instant::now(), snapshot.index());
                self.replica.handle_staged_snapshot(now, *snapshot);
                tracing::info!(peer = %from, index, applied = self.replica.applied_index(),
                    took_ms = started.elapsed().as_millis() as u64, "staged snapshot adopted");
            }
        }
    }

    /// After a replica step: when the configuration in force changed, hands it to the
    /// election (`set_configuration`, through the link), to the peer network (members
    /// added are dialled, removed ones dropped) and to the handles; and when it says this
    /// node was removed, reports that once (the node then stops, as etcd's does).
    fn follow_membership(&mut self) {
        let epoch = self.replica.membership().epoch;
        if self.seen_epoch == Some(epoch) {
            return;
        }
        self.seen_epoch = Some(epoch);
        let membership = self.replica.membership().clone();
        self.link.configure(&self.replica.election_membership());
        self.peers.set_members(&peer_addresses(&membership));
        tracing::info!(
            epoch,
            voters = ?membership.voters(),
            learners = ?membership.learners(),
            "configuration in force"
        );
        self.membership.send_replace(Arc::new(membership));
        if let Some(removed_at) = self.replica.removed() {
            if let Some(tell) = self.removed.take() {
                tracing::error!(node = %self.replica.id(), epoch = removed_at, "this node was removed from the cluster; shutting down");
                let _ = tell.send(removed_at);
            }
        }
    }

    /// Publishes the auth store when an applied command (or a snapshot) changed it, before
    /// the answers go out: a client told its user was added can authenticate at once.
    fn follow_auth(&mut self) {
        let current = self.replica.state().auth();
        let published = self.auth.borrow();
        let same = published.revision() == current.revision()
            && published.is_enabled() == current.is_enabled()
            && published.token_secret() == current.token_secret();
        drop(published);
        if !same {
            tracing::info!(revision = current.revision(), enabled = current.is_enabled(), "auth store changed");
            self.auth.send_replace(Arc::new(current.clone()));
        }
    }

    /// Publishes the store revision to the handles, and to the watch feed the history as
    /// the replica last published it (see [`NodeLoop::flush_engine_when_due`]).
    fn publish_revision(&self) {
        self.publish_revision_only();
        self.feed.publish(&self.replica.state().history_reader());
    }

    /// Publishes the store revision and term to the handles. Called before any answer goes
    /// out (reads answer inside `handle` from the state its earlier inputs left, proposals
    /// in `flush`, before the engine write), so a client that got an answer and asks again
    /// never sees an older revision, and a watch it then creates starts after its write
    /// (`crate::api::watch`).
    fn publish_revision_only(&self) {
        self.revision.store(self.replica.state().revision(), Ordering::Release);
        self.term.store(self.replica.known_round(), Ordering::Release);
    }

    /// Serves a master request on this node and answers `asker`: at once, when its
    /// proposal completes, or when the election has stepped down. The replica refuses what
    /// it cannot serve (not master, not ready yet) with an error the client side retries.
    fn serve_here(&mut self, request: MasterRequest, asker: Asker) {
        let now = self.clock.now();
        let result = match request {
            MasterRequest::Propose(command) => {
                if matches!(command, Command::ChangeMembers(_)) {
                    // The gate the election published after its latest step (see
                    // crate::election_link): only a change checks it.
                    self.replica.set_change_gate(self.link.change_gate());
                }
                match self.replica.propose(now, command) {
                    Ok(id) => {
                        self.proposals.insert(id, asker);
                        return;
                    }
                    Err(error) => Err(error),
                }
            }
            MasterRequest::Read(request, revision) => self
                .replica
                .read_at(now, &request, revision, ReadConsistency::Linearizable)
                .map(|(response, revision)| MasterAnswer::Read(response, revision)),
            MasterRequest::KeepAlive(id) => self.replica.keep_alive(now, id).map(MasterAnswer::KeepAlive),
            MasterRequest::LeaseStatus(id) => self.replica.lease_status(now, id).map(MasterAnswer::LeaseStatus),
            MasterRequest::LeaseList => self.replica.lease_list(now).map(MasterAnswer::LeaseList),
            MasterRequest::StepDown => return self.step_down(asker),
        };
        asker.answer(&self.peers, result);
    }

    /// Has the election give up this node's mastership, off the loop: the election runs
    /// on its own task, and the loop must not wait for it.
    fn step_down(&self, asker: Asker) {
        let status = self.election.status();
        if !status.is_master_at(self.election.now()) {
            return asker.answer(&self.peers, Err(RequestError::NotMaster { hint: status.hint }));
        }
        let (election, peers) = (self.election.clone(), self.peers.clone());
        tokio::spawn(async move {
            let result = election.step_down().await;
            let result = result.map(|()| MasterAnswer::SteppedDown).map_err(|_stopped| RequestError::ShuttingDown);
            asker.answer(&peers, result);
        });
    }

    /// Publishes what the replica applied to the watch feed, and writes it to the state
    /// engine now or by a deadline.
    ///
    /// Every engine write is a sled batch, and sled seals and writes out two of its I/O
    /// buffers for each (on its own thread pool, all seven of whose threads it wakes): with
    /// one client putting, that was a third of each put's time, although the put's answer
    /// goes out before it. Reads through the replica see what is applied and not written
    /// yet, watch streams read it from the history's published tail, and a crash loses only
    /// the engine's copy, which the restart replays from the log (see
    /// `Replica::take_output_before_flush`); so the loop writes at most every
    /// [`ENGINE_FLUSH_DELAY`], one batch for every command of that time. Checkpoints and
    /// views write whatever is pending first.
    fn flush_engine_when_due(&mut self) {
        self.replica.publish_applied();
        // A stopped replica writes nothing more: no deadline to wake the loop for.
        let unwritten = self.replica.unflushed() && self.replica.stopped().is_none();
        if self.engine_writes.write_now(tokio::time::Instant::now(), unwritten) {
            self.replica.flush_applied();
        }
        self.publish_revision();
    }

    /// Sends, syncs and answers until the replica has nothing more to say (bounded).
    ///
    /// A sync normally goes to the sync thread, so the loop goes on meanwhile. But handing it
    /// over and being told it is done are two thread wake-ups, which on a machine that halts
    /// idle CPUs cost about as much as the sync itself. So when the node was idle (`woke_from_idle`: nothing
    /// for a while, nothing queued), has nothing to send that the sync would hold up, and the
    /// disk has been fast, the loop syncs itself. Under load the loop is never idle, so the
    /// sync thread keeps its group commit; a slow disk blocks the loop for one sync at most
    /// before syncs move back to the thread.
    fn flush(&mut self, woke_from_idle: bool) {
        for _ in 0..16 {
            if self.link.configuration_seen() > self.replica.membership().epoch {
                // A peer is at a configuration this node has not applied: fetch the log
                // rather than wait for a master to bring it (rate-limited by the replica).
                self.replica.catch_up(self.clock.now());
            }
            // Before sending: a member just added must be reachable for what goes to it.
            self.follow_membership();
            self.follow_auth();
            // Answers first: the engine write of what they applied follows them (see
            // `Replica::take_output_before_flush`).
            let output = self.replica.take_output_before_flush();
            let nothing_held_up = output.messages.is_empty() && output.completions.is_empty();
            self.publish_revision_only();
            for (to, message) in output.messages {
                self.peers.send_log(to, message);
            }
            for completion in output.completions {
                if let Some(asker) = self.proposals.remove(&completion.id) {
                    asker.answer(&self.peers, completion.result.map(|(_, applied)| MasterAnswer::Propose(applied)));
                }
            }
            self.flush_engine_when_due();
            if !output.needs_sync {
                return;
            }
            let now = self.clock.now();
            let on_loop =
                woke_from_idle && nothing_held_up && self.sync_in_flight.is_none() && self.last_sync_took < FAST_SYNC;
            let Some(disk) = self.disk.as_ref().filter(|_| !on_loop) else {
                // Sync here; the messages it releases go out next turn.
                if let Some(ticket) = self.replica.begin_sync() {
                    let started = Instant::now();
                    let result = self.replica.sync_storage();
                    self.last_sync_took = started.elapsed();
                    crate::metrics::metrics().fsync_took(self.last_sync_took);
                    self.replica.finish_sync(self.clock.now(), ticket, result);
                }
                continue;
            };
            if let Some(ticket) = self.replica.begin_sync() {
                if disk.send(ticket).is_ok() {
                    self.sync_in_flight = Some((ticket, Instant::now()));
                } else {
                    self.replica.finish_sync(now, ticket, Err(StorageError::Io("the sync thread stopped".into())));
                }
            }
            return;
        }
        // Bound reached: what the last sync let the replica apply is published at least.
        self.flush_engine_when_due();
    }
}

/// Every member's peer address (`host:port` of its first peer URL), for the peer network.
pub fn peer_addresses(membership: &Membership) -> Vec<(NodeId, String)> {
    membership.members().filter_map(|m| Some((m.id, url_address(m.peer_urls.first()?)?.to_string()))).collect()
}

/// Writes `view`'s state as a format 8 snapshot through `writer`, into the unlinked file in
/// the data directory that every peer it is parked for reads a chunk at a time as it
/// grows, so that the master never holds a state in memory to send it; returns its length.
fn build_peer_snapshot(view: &leasekv_kvstore::state::StateView, mut writer: GrowingWriter) -> Result<u64, String> {
    leasekv_kvstore::state::stream::write(view, &mut writer).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| format!("cannot write the snapshot file: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop writes applied commands at most `ENGINE_FLUSH_DELAY` after the first turn
    /// that left some unwritten, and its wake-up (`due`) is set exactly while something is.
    #[test]
    fn unwritten_commands_are_written_by_the_deadline_of_the_first_turn_that_left_them() {
        let start = tokio::time::Instant::now();
        let mut writes = EngineWriteDeadline::default();
        assert!(!writes.write_now(start, false));
        assert_eq!(writes.due(), None, "nothing unwritten, nothing to wake for");
        assert!(!writes.write_now(start, true), "the first turn only sets the deadline");
        assert_eq!(writes.due(), Some(start + ENGINE_FLUSH_DELAY));
        let almost = start + ENGINE_FLUSH_DELAY - Duration::from_micros(1);
        assert!(!writes.write_now(almost, true), "later turns do not move it");
        assert_eq!(writes.due(), Some(start + ENGINE_FLUSH_DELAY));
        assert!(writes.write_now(start + ENGINE_FLUSH_DELAY, true), "the deadline's turn writes");
        assert_eq!(writes.due(), None);
        let next = start + ENGINE_FLUSH_DELAY * 2;
        assert!(!writes.write_now(next, true));
        assert_eq!(writes.due(), Some(next + ENGINE_FLUSH_DELAY), "a new deadline for what came after");
        assert!(!writes.write_now(next, false), "written meanwhile (a checkpoint, a view)");
        assert_eq!(writes.due(), None);
    }
}
