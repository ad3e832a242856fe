//! The node loop: the task that owns the node's driver, its two queues, its timer and the
//! sync thread. It only waits for inputs and hands them to the driver
//! (`leasekv_kvstore::node::Driver`, the code the simulator runs too), which decides and
//! acts through [`LoopIo`].

use super::*;

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
    let io = LoopIo {
        clock,
        peers,
        readers,
        election: election.clone(),
        status,
        status_woke: true,
        health,
        faults,
        revision: revision.clone(),
        term: term.clone(),
        feed,
        disk,
        sync_in_flight: None,
        sync_lost: None,
        storage_failed: Some(failed_tx),
        to_self: peer_tx.clone(),
        membership: membership_tx,
        auth: auth_tx,
        removed: Some(removed_tx),
        dir: scratch.clone(),
    };
    let node = NodeLoop { driver: Driver::new(Node::new(replica)), io };
    let run = node.run(Inbox { peers: peer_rx, clients: rx }, synced);
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

struct NodeLoop {
    /// The node and the driver's code (sans-IO; the simulator runs the same).
    driver: Driver<SledStorage, Reply>,
    /// What the driver acts on.
    io: LoopIo,
}

/// A sync's end, from the sync thread: its ticket and outcome.
type Synced = (SyncTicket, Result<(), StorageError>);

/// Starts the thread that runs the replica's syncs, so the node loop goes on accepting,
/// answering and applying while the disk works; whatever arrives meanwhile is covered by
/// the next sync (group commit). One sync at a time: the node begins the next only when
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

/// Most requests handled before the turn ends (one sync covers them all).
const BATCH: usize = 4096;

/// Peer messages waiting for the loop before more are dropped: the loop serves them first,
/// so only a loop stalled for seconds fills it.
const PEER_QUEUE: usize = 65_536;

/// How long the loop must have had nothing to do before its turn counts as woken from idle
/// (a sync may then run on the loop: `leasekv_kvstore::node::SyncPlace::OnLoop`).
const IDLE_BEFORE_SYNC_ON_LOOP: Duration = Duration::from_micros(150);

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
    async fn run(mut self, mut inbox: Inbox, mut synced: Option<mpsc::UnboundedReceiver<Synced>>) {
        self.driver.handle(&mut self.io, Input::Election);
        let mut turns = TurnClock::default();
        loop {
            // Whether this turn handles exactly one input: then the node's effects are all
            // the turn holds up.
            let mut one_input = true;
            let node_deadline = self.driver.poll_timeout().map(|t| self.io.clock.to_tokio(t));
            tokio::select! {
                changed = self.io.status.changed() => {
                    turns.begin(&self.io.health);
                    if changed.is_err() {
                        break;
                    }
                    self.io.status_woke = true;
                    self.driver.handle(&mut self.io, Input::Election);
                }
                // The loop holds a sender of the peer queue itself: it never closes.
                Some(request) = inbox.peers.recv() => {
                    turns.begin(&self.io.health);
                    self.handle(request);
                    one_input = self.handle_waiting(&mut inbox);
                }
                request = inbox.clients.recv() => {
                    turns.begin(&self.io.health);
                    // Every handle is gone: the node is shutting down.
                    let Some(request) = request else { break };
                    // Peers' messages that arrived meanwhile go first.
                    let mut peers_first = false;
                    for _ in 0..BATCH {
                        let Ok(message) = inbox.peers.try_recv() else { break };
                        peers_first = true;
                        self.handle(message);
                    }
                    self.handle(request);
                    one_input = self.handle_waiting(&mut inbox) && !peers_first;
                }
                _ = sleep_until(node_deadline) => {
                    turns.begin(&self.io.health);
                    self.driver.handle(&mut self.io, Input::Timeout);
                }
                done = next_sync(&mut synced), if self.io.sync_in_flight.is_some() => {
                    turns.begin(&self.io.health);
                    self.io.health.syncing(false);
                    let handed = self.io.sync_in_flight.take();
                    let ended = done.or_else(|| {
                        self.io.disk = None;
                        handed.map(|ticket| (ticket, Err(StorageError::Io("the sync thread stopped".into()))))
                    });
                    if let Some((ticket, result)) = ended {
                        self.driver.handle(&mut self.io, Input::Synced(ticket, Some(result)));
                    }
                }
            }
            turns.handled();
            let facts = TurnFacts {
                woke_from_idle: one_input && inbox.is_empty() && turns.idle_before() >= IDLE_BEFORE_SYNC_ON_LOOP,
                background_sync: self.io.disk.is_some(),
            };
            self.driver.end_turn(&mut self.io, facts);
            if let Some(ticket) = self.io.sync_lost.take() {
                self.io.disk = None;
                let failed = Err(StorageError::Io("the sync thread stopped".into()));
                self.driver.handle(&mut self.io, Input::Synced(ticket, Some(failed)));
                self.driver.end_turn(&mut self.io, TurnFacts::default());
            }
            turns.end(&self.io.health);
        }
        self.driver.stop();
        tracing::info!("node loop stopped");
    }

    /// Handles what waits in the inbox, peers' first, up to [`BATCH`]; whether there was
    /// nothing (the turn handled one input).
    fn handle_waiting(&mut self, inbox: &mut Inbox) -> bool {
        let mut none = true;
        for _ in 0..BATCH {
            let Some(request) = inbox.try_next() else { break };
            none = false;
            self.handle(request);
        }
        none
    }

    /// Hands one request to the driver, or answers a local one from the node.
    fn handle(&mut self, request: Request) {
        let input = match request {
            Request::Master(request, reply) => Input::Client(request, reply),
            Request::Forwarded(from, id, request) => Input::Forwarded(from, id, request),
            Request::Answered(from, id, result) => Input::Answered(from, id, result),
            Request::Log(from, message) => Input::Log(from, message),
            Request::CheckpointSynced(ticket, synced, took) => {
                if took > Duration::from_millis(100) {
                    tracing::info!(took_ms = took.as_millis() as u64, slot = ticket.slot(), "checkpoint synced");
                }
                Input::CheckpointSynced(ticket, synced)
            }
            Request::StagedSnapshot(from, snapshot) => {
                let (started, index) = (Instant::now(), snapshot.index());
                self.driver.handle(&mut self.io, Input::StagedSnapshot(from, snapshot));
                tracing::info!(peer = %from, index, applied = self.driver.node().replica().applied_index(),
                    took_ms = started.elapsed().as_millis() as u64, "staged snapshot adopted");
                return;
            }
            Request::SnapshotInstallFailed(from, reason) => {
                tracing::warn!(peer = %from, %reason, "the snapshot from the peer could not be installed; asking again");
                Input::SnapshotInstallFailed(from, reason)
            }
            Request::LocalRead(request, revision, reply) => {
                let now = self.io.clock.now();
                match self.driver.local(&mut self.io).serializable_read(now, request, revision) {
                    Ok(job) => self.io.readers.submit(job, ReadAsker::Local(reply)),
                    Err(error) => drop(reply.send(Err(error))),
                }
                return;
            }
            Request::ResolveName(name, reply) => {
                let node = self.driver.local(&mut self.io);
                let _ = reply.send(node.replica().state().lease_id_by_name(&name));
                return;
            }
            Request::Status(reply) => {
                let now = self.io.clock.now();
                let node = self.driver.local(&mut self.io);
                let _ = reply.send(NodeStatus::of(node, now));
                return;
            }
            Request::View(reply) => {
                let view = self.driver.local(&mut self.io).view();
                let _ = reply.send(view.map_err(|e| RequestError::StorageFailed(StorageFailure::new(e))));
                return;
            }
        };
        self.driver.handle(&mut self.io, input);
    }
}
