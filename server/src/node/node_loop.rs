//! The node loop: the task that owns the node, its two queues, its timers and the sync
//! thread, and the blocking tasks of checkpoints and snapshots.

use super::*;

/// A node-loop turn this long is logged (with where it went), at most once per
/// [`SLOW_TURN_LOG_EVERY`]: every request waits while one runs.
const SLOW_TURN: Duration = Duration::from_millis(50);
const SLOW_TURN_LOG_EVERY: Duration = Duration::from_secs(1);

/// Starts the node loop. The election is handed every configuration the log applies
/// ([`ElectionBackend::configure`]), and its change gate is read before a change is proposed.
///
/// The loop is a task of the main runtime, beside the client port's: on a thread of its own
/// every request cost two more thread wake-ups, and small reads lost a third of their
/// throughput (`benches/cluster.rs`). What must not wait behind it has threads of its own:
/// the election, the peer port and lanes (`crate::own_runtime`), the readers
/// ([`super::readers`]). A stall watchdog ([`super::watchdog`]) has a master whose loop
/// cannot serve give up mastership. Fails only when a thread cannot be started.
pub fn start(
    replica: Replica<SledStorage>,
    election: Arc<dyn ElectionBackend>,
    clock: MonotonicClock,
    peers: PeerNetwork,
    faults: &FaultInjection,
    options: NodeOptions,
) -> std::io::Result<(NodeHandle, StorageFailed, Removed)> {
    let max_queued_requests = options.max_queued_requests;
    let (failed_tx, failed) = oneshot::channel();
    let (removed_tx, removed) = oneshot::channel();
    let (membership_tx, membership) = watch::channel(Arc::new(replica.membership().clone()));
    let (auth_tx, auth) = watch::channel(Arc::new(replica.state().auth().clone()));
    let (tx, rx) = mpsc::channel(max_queued_requests.max(1));
    let (peer_tx, peer_rx) = mpsc::channel(PEER_QUEUE);
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
    let readers = ReaderPool::start(options.reader_threads, peers.clone())?;
    let health = Arc::new(LoopHealth::new());
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    watchdog::start(Arc::clone(&health), election.clone(), options.stall_bound, Arc::clone(&stopped))?;
    let node = NodeLoop {
        readers,
        health,
        faults,
        revision: revision.clone(),
        term: term.clone(),
        feed,
        election: election.clone(),
        node: Node::new(replica),
        clock,
        peers,
        disk,
        sync_in_flight: None,
        last_sync_took: Duration::ZERO,
        storage_failed: Some(failed_tx),
        to_self: peer_tx.clone(),
        membership: membership_tx,
        auth: auth_tx,
        removed: Some(removed_tx),
        engine_writes: EngineWriteDeadline::default(),
    };
    let run = node.run(Inbox { peers: peer_rx, clients: rx }, status, synced);
    tokio::spawn(async move {
        run.await;
        stopped.store(true, Ordering::Release);
    });
    Ok((NodeHandle { tx, peer_tx, revision, term, election, history, membership, auth, scratch }, failed, removed))
}

/// How a node loop is run.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Client requests that may wait for the loop (`[limits] max_queued_requests`).
    pub max_queued_requests: usize,
    /// Threads that answer reads (`[reads] reader_threads`).
    pub reader_threads: usize,
    /// How long the loop may be stuck before a master steps down ([`super::watchdog`]).
    pub stall_bound: Duration,
}

/// Hands an answer to whoever waits for it: the client's task, or a follower that
/// forwarded the request (over the peer stream).
fn answer(peers: &PeerNetwork, asker: Asker<Reply>, result: MasterResult) {
    match asker {
        Asker::Local(reply) => drop(reply.send(result)),
        Asker::Remote(node, id) => peers.send(node, &Wire::Answer(id, result)),
    }
}

struct NodeLoop {
    /// The replica and every decision around it (sans-IO; the simulator runs it too).
    node: Node<SledStorage, Reply>,
    /// The threads that answer the reads the node decided.
    readers: ReaderPool,
    /// What the stall watchdog reads.
    health: Arc<LoopHealth>,
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
    /// The sync thread's queue (`None`: sync on this task).
    disk: Option<std::sync::mpsc::Sender<SyncTicket>>,
    /// The sync the disk thread is working on, and when it was handed over.
    sync_in_flight: Option<(SyncTicket, Instant)>,
    /// How long the last finished sync took (wherever it ran).
    last_sync_took: Duration,
    /// Told once when the storage fails.
    storage_failed: Option<oneshot::Sender<String>>,
    /// This loop's own (peer) queue, for work it hands to blocking threads to report back
    /// on: never refused for clients' load.
    to_self: mpsc::Sender<Request>,
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

/// Peer messages waiting for the loop before more are dropped: the loop serves them first,
/// so only a loop stalled for seconds fills it.
const PEER_QUEUE: usize = 65_536;

/// The loop's two queues: peer messages (and its own reports) first, then clients.
struct Inbox {
    peers: mpsc::Receiver<Request>,
    clients: mpsc::Receiver<Request>,
}

impl Inbox {
    /// The next request already waiting, a peer's before a client's.
    fn try_next(&mut self) -> Option<Request> {
        self.peers.try_recv().ok().or_else(|| self.clients.try_recv().ok())
    }

    /// Whether nothing waits in either queue.
    fn is_empty(&self) -> bool {
        self.peers.is_empty() && self.clients.is_empty()
    }
}

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
        mut inbox: Inbox,
        mut status: watch::Receiver<ElectionStatus>,
        mut synced: Option<mpsc::UnboundedReceiver<Synced>>,
    ) {
        let initial = *status.borrow_and_update();
        self.apply_status(&initial);
        let mut busy_until = Instant::now();
        let mut last_slow_turn_logged: Option<Instant> = None;
        loop {
            if let Some(failure) = self.node.replica().storage_failure() {
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
            // Whether this turn handles exactly one input: then what `flush` finds is all the
            // turn holds up (the input's answers and forwards left as it was handled).
            let mut one_input = true;
            let node_deadline = self.node.poll_timeout().map(|t| self.clock.to_tokio(t));
            // When the turn's input arrived: each branch sets it first, so the turn measured is
            // the input's handling and everything after it, the wait for an input left out.
            let turn_began: Instant;
            tokio::select! {
                changed = status.changed() => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    if changed.is_err() {
                        break;
                    }
                    let s = *status.borrow_and_update();
                    self.apply_status(&s);
                }
                // The loop holds a sender of the peer queue itself: it never closes.
                Some(request) = inbox.peers.recv() => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    self.handle(request, &mut status);
                    one_input = self.handle_waiting(&mut inbox, &mut status);
                }
                request = inbox.clients.recv() => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    // Every handle is gone: the node is shutting down.
                    let Some(request) = request else { break };
                    // Peers' messages that arrived meanwhile go first.
                    let mut peers_first = false;
                    for _ in 0..BATCH {
                        let Ok(message) = inbox.peers.try_recv() else { break };
                        peers_first = true;
                        self.handle(message, &mut status);
                    }
                    self.handle(request, &mut status);
                    one_input = self.handle_waiting(&mut inbox, &mut status) && !peers_first;
                }
                _ = sleep_until(node_deadline) => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    // A renewal that arrived while this branch was chosen goes in with the
                    // timeout, and the node applies it first (`Node::handle_timeout`).
                    let now = self.clock.now();
                    let renewal = status.has_changed().unwrap_or(false).then(|| *status.borrow_and_update());
                    if let Some(renewed) = &renewal {
                        self.faults.mastership(now, renewed.master.map(|m| m.valid_until));
                    }
                    self.node.handle_timeout(now, renewal.as_ref().map(view));
                }
                done = next_sync(&mut synced), if self.sync_in_flight.is_some() => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    if let Some((ticket, handed_over)) = self.sync_in_flight.take() {
                        self.health.syncing(false);
                        let result = done.map_or_else(|| Err(StorageError::Io("the sync thread stopped".into())), |(_, r)| r);
                        let now = self.clock.now();
                        self.node.replica_mut().finish_sync(now, ticket, result);
                        self.last_sync_took = handed_over.elapsed();
                        crate::metrics::metrics().fsync_took(self.last_sync_took);
                    }
                }
                _ = sleep_until(self.engine_writes.due()) => {
                    turn_began = Instant::now();
                    self.health.turn_begins();
                    // `flush` below writes what is due.
                }
            }
            let handled = Instant::now();
            let woke_from_idle = one_input && inbox.is_empty() && busy_until.elapsed() >= IDLE_BEFORE_SYNC_ON_LOOP;
            self.flush(woke_from_idle);
            let flushed = Instant::now();
            if self.node.replica().snapshot_due() {
                self.take_snapshot();
            }
            busy_until = Instant::now();
            self.health.turn_ends();
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
        self.node.replica_mut().flush_applied();
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
        if let Some(ticket) = self.node.replica_mut().begin_checkpoint() {
            let to_self = self.to_self.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let synced = ticket.sync();
                // Waits for room rather than losing the ticket (no checkpoint would follow).
                let _ = to_self.blocking_send(Request::CheckpointSynced(ticket, synced, started.elapsed()));
            });
        }
        if let Some(job) = self.node.replica_mut().take_snapshot_job(now) {
            // Parked before it is built: the peers pull it as it is written.
            let dir = self.node.replica().storage().dir().to_path_buf();
            let (growing, writer) = match GrowingFile::create(&dir) {
                Ok(file) => file,
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot create a snapshot file for peers; they will ask again");
                    return self.flush(false);
                }
            };
            let payload = Arc::new(Payload::Growing(growing));
            // One file for every peer it is parked for: format 9 once all members read it.
            let with_pages = Feature::SnapshotPages.in_version(self.peers.versions().cluster_version());
            for &peer in &job.peers {
                self.peers.send_snapshot(peer, job.index, Arc::clone(&payload));
            }
            // At the background priority: on a host the members share (and on a busy one),
            // building a snapshot of a large state at the loops' priority took their CPU and
            // the others' puts waited (scalebench catch-up).
            drop(crate::blocking::spawn_background("peer-snapshot", move || {
                let started = Instant::now();
                match build_peer_snapshot(&job.view, writer, with_pages) {
                    Ok(len) => tracing::info!(
                        index = job.index,
                        bytes = len,
                        took_ms = started.elapsed().as_millis() as u64,
                        "snapshot for peers built"
                    ),
                    Err(error) => tracing::warn!(%error, "cannot build a snapshot for peers; they will ask again"),
                }
            }));
        }
        self.flush(false);
    }

    fn apply_status(&mut self, status: &ElectionStatus) {
        let now = self.clock.now();
        self.faults.mastership(now, status.master.map(|m| m.valid_until));
        self.node.handle_election(now, view(status));
    }

    /// Handles what waits in the inbox, peers' first, up to [`BATCH`]; whether there was
    /// nothing (the turn handled one input).
    fn handle_waiting(&mut self, inbox: &mut Inbox, status: &mut watch::Receiver<ElectionStatus>) -> bool {
        let mut none = true;
        for _ in 0..BATCH {
            let Some(request) = inbox.try_next() else { break };
            none = false;
            self.handle(request, status);
        }
        none
    }

    /// Handles one input, after any renewal of the election's that came meanwhile: an input
    /// may follow one that took seconds (a DeleteRange of 200,000 keys applies for 4–6 s
    /// on every member), and the node would judge it against the lease it knew before
    /// that one, long run out, and give up the log round of a master renewed all along
    /// (measured: `etcdctl check perf --load=l` ended on a new round and an indeterminate
    /// answer).
    fn handle(&mut self, request: Request, status: &mut watch::Receiver<ElectionStatus>) {
        if status.has_changed().unwrap_or(false) {
            let s = *status.borrow_and_update();
            self.apply_status(&s);
        }
        self.publish_revision();
        let now = self.clock.now();
        match request {
            Request::Master(request, reply) => {
                let peers = &self.peers;
                self.node.handle_client(now, request, reply, |master| peers.log_lane_down(master));
            }
            Request::Forwarded(from, id, request) => self.node.handle_forwarded(now, from, id, request),
            Request::Answered(from, id, result) => self.node.handle_answer(now, from, id, result),
            Request::LocalRead(request, revision, reply) => match self.node.serializable_read(now, request, revision) {
                Ok(job) => self.readers.submit(job, ReadAsker::Local(reply)),
                Err(error) => drop(reply.send(Err(error))),
            },
            Request::ResolveName(name, reply) => {
                let _ = reply.send(self.node.replica().state().lease_id_by_name(&name));
            }
            Request::Status(reply) => {
                let replica = self.node.replica();
                let state = replica.state();
                let _ = reply.send(NodeStatus {
                    revision: state.revision(),
                    compacted: state.compacted_revision(),
                    applied: replica.applied_index(),
                    commit: replica.commit_index(),
                    ready_master: replica.is_ready_master(now),
                    master_hint: replica.master_hint(),
                    keys: state.key_count(),
                    db_size: leasekv_kvstore::storage::Storage::size_on_disk(replica.storage()),
                    bytes_in_use: state.bytes_in_use(),
                    quota_bytes: replica.limits().quota_bytes,
                    alarms: state.alarms().copied().collect(),
                    counts: replica.counts(),
                    forwards: self.node.forwards_pending(),
                    lease_reads: self.node.lease_read_counts(),
                    read_lease_held: replica.read_lease_until(now).is_some(),
                    withdrawal: replica.withdrawal().cloned(),
                });
            }
            Request::View(reply) => {
                let view = self.node.replica_mut().view();
                let _ = reply.send(view.map_err(|e| RequestError::StorageFailed(StorageFailure::new(e))));
            }
            Request::Log(from, message) => self.node.handle_message(now, from, message),
            Request::CheckpointSynced(ticket, synced, took) => {
                if took > Duration::from_millis(100) {
                    tracing::info!(took_ms = took.as_millis() as u64, slot = ticket.slot(), "checkpoint synced");
                }
                self.node.replica_mut().finish_checkpoint(ticket, synced);
            }
            Request::StagedSnapshot(from, snapshot) => {
                let (started, index) = (Instant::now(), snapshot.index());
                self.node.replica_mut().handle_staged_snapshot(now, *snapshot);
                tracing::info!(peer = %from, index, applied = self.node.replica().applied_index(),
                    took_ms = started.elapsed().as_millis() as u64, "staged snapshot adopted");
            }
            Request::SnapshotInstallFailed(from, reason) => {
                tracing::warn!(peer = %from, %reason, "the snapshot from the peer could not be installed; asking again");
                self.node.snapshot_install_failed(now, reason);
            }
        }
        self.send_ready();
    }

    /// Sends the answers and forwards the input just handled produced, before the next
    /// input of the batch: held to the end of a turn of thousands of inputs, a read's answer
    /// waited for all of them, and the client tasks that encode and send answers sat idle
    /// on the other cores meanwhile (the cluster benchmark lost 5-10 % of its throughput).
    fn send_ready(&mut self) {
        // The input may have applied commands (a follower's commit), and an answer released
        // by them must not go out before the revision it reflects is published.
        self.publish_revision_only();
        let ready = self.node.drain_ready();
        for (reply, result) in ready.answers {
            let _ = reply.send(result);
        }
        for (to, message) in ready.forwards {
            self.peers.send(to, &wire(message));
        }
        for (job, asker) in ready.reads {
            self.readers.submit(job, ReadAsker::Master(asker));
        }
    }

    /// The configuration in force changed (the node says so after a step): hands it to the
    /// election, to the peer network (members added are dialled, removed ones dropped) and
    /// to the handles.
    fn follow_membership(&mut self, for_election: Membership) {
        let membership = self.node.replica().membership().clone();
        self.election.configure(for_election.configuration());
        self.peers.set_members(&peer_addresses(&membership));
        tracing::info!(
            epoch = membership.epoch,
            voters = ?membership.voters(),
            learners = ?membership.learners(),
            "configuration in force"
        );
        self.membership.send_replace(Arc::new(membership));
    }

    /// This node applied its own removal: reported once, and the node then stops, as
    /// etcd's does.
    fn follow_removal(&mut self, removed_at: u64) {
        if let Some(tell) = self.removed.take() {
            tracing::error!(node = %self.node.id(), epoch = removed_at, "this node was removed from the cluster; shutting down");
            let _ = tell.send(removed_at);
        }
    }

    /// Publishes the auth store when an applied command (or a snapshot) changed it, before
    /// the answers go out: a client told its user was added can authenticate at once.
    fn follow_auth(&mut self) {
        let current = self.node.replica().state().auth();
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
        self.feed.publish(&self.node.replica().state().history_reader());
    }

    /// Publishes the store revision and term to the handles. Called before any answer goes
    /// out (reads answer inside `handle` from the state its earlier inputs left, proposals
    /// in `flush`, before the engine write), so a client that got an answer and asks again
    /// never sees an older revision, and a watch it then creates starts after its write
    /// (`crate::api::watch`).
    fn publish_revision_only(&self) {
        let replica = self.node.replica();
        self.revision.store(replica.state().revision(), Ordering::Release);
        self.term.store(replica.known_round(), Ordering::Release);
    }

    /// Has the election give up this node's mastership, off the loop: the election runs
    /// on its own task, and the loop must not wait for it.
    fn step_down(&self, asker: Asker<Reply>) {
        let status = self.election.status();
        if !status.is_master_at(self.election.now()) {
            return answer(&self.peers, asker, Err(RequestError::NotMaster { hint: status.hint }));
        }
        let (election, peers) = (self.election.clone(), self.peers.clone());
        tokio::spawn(async move {
            let result = election.step_down().await;
            let result = result.map(|()| MasterAnswer::SteppedDown).map_err(|_stopped| RequestError::ShuttingDown);
            answer(&peers, asker, result);
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
        let replica = self.node.replica_mut();
        replica.publish_applied();
        // A stopped replica writes nothing more: no deadline to wake the loop for.
        let unwritten = replica.unflushed() && replica.stopped().is_none();
        if self.engine_writes.write_now(tokio::time::Instant::now(), unwritten) {
            replica.flush_applied();
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
            self.node.set_election_gauges(ElectionGauges {
                change_gate: self.election.change_allowed_after(),
                configuration_seen: self.election.configuration_seen(),
            });
            let cluster_version = self.peers.versions().cluster_version();
            self.node.replica_mut().set_read_leases_allowed(Feature::ReadLeases.in_version(cluster_version));
            // Answers first: the engine write of what they applied follows them (see
            // `Replica::take_output_before_flush`).
            let mut output = self.node.take_output(self.clock.now());
            // Before sending: a member just added must be reachable for what goes to it.
            if let Some(for_election) = output.configuration.take() {
                self.follow_membership(for_election);
            }
            if let Some(candidate) = output.candidacy.take() {
                self.election.set_candidacy(candidate);
            }
            if let Some(removed_at) = output.removed.take() {
                self.follow_removal(removed_at);
            }
            self.follow_auth();
            let nothing_held_up = output.holds_nothing();
            self.publish_revision_only();
            for (to, message) in output.log {
                self.peers.send_log(to, message);
            }
            for (to, message) in output.forwards {
                self.peers.send(to, &wire(message));
            }
            for (reply, result) in output.answers {
                let _ = reply.send(result);
            }
            for (job, asker) in output.reads {
                self.readers.submit(job, ReadAsker::Master(asker));
            }
            for asker in output.step_downs {
                self.step_down(asker);
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
                let replica = self.node.replica_mut();
                if let Some(ticket) = replica.begin_sync() {
                    let started = Instant::now();
                    let result = replica.sync_storage();
                    self.last_sync_took = started.elapsed();
                    crate::metrics::metrics().fsync_took(self.last_sync_took);
                    self.node.replica_mut().finish_sync(self.clock.now(), ticket, result);
                }
                continue;
            };
            if let Some(ticket) = self.node.replica_mut().begin_sync() {
                if disk.send(ticket).is_ok() {
                    self.sync_in_flight = Some((ticket, Instant::now()));
                    self.health.syncing(true);
                } else {
                    let failed = Err(StorageError::Io("the sync thread stopped".into()));
                    self.node.replica_mut().finish_sync(now, ticket, failed);
                }
            }
            return;
        }
        // Bound reached: what the last sync let the replica apply is published at least.
        self.flush_engine_when_due();
    }
}

/// A forward or its answer as the peer stream carries it.
fn wire(message: ForwardMessage) -> Wire {
    match message {
        ForwardMessage::Request(id, request) => Wire::Forward(id, request),
        ForwardMessage::Answer(id, result) => Wire::Answer(id, result),
    }
}

/// The election's status as the node acts on it.
fn view(status: &ElectionStatus) -> ElectionView {
    ElectionView { master: status.master, hint: status.hint }
}

/// Writes `view`'s state as a snapshot through `writer`, into the unlinked file in the data
/// directory that every peer it is parked for reads a chunk at a time as it grows, so that
/// the master never holds a state in memory to send it; returns its length. Format 9 (the
/// history's pages as stored) `with_pages`, else format 8, which builds before it read.
fn build_peer_snapshot(
    view: &leasekv_kvstore::state::StateView,
    mut writer: GrowingWriter,
    with_pages: bool,
) -> Result<u64, String> {
    let written = match with_pages {
        true => leasekv_kvstore::state::stream::write(view, &mut writer),
        false => leasekv_kvstore::state::stream::write_format8(view, &mut writer),
    };
    written.map_err(|e| e.to_string())?;
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
