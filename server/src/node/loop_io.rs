//! The server's side of the production driver (`leasekv_kvstore::node::Driver`): what the
//! node's decisions become in the world of the node loop. Messages go to the peer lanes,
//! answers to the client tasks' channels, reads to the reader threads, syncs to the sync
//! thread, checkpoints and snapshots to blocking threads, the configuration and the auth
//! store to the handles. Nothing here decides; the simulator carries out the same effects
//! its own way (`kvstore/src/sim/world/sim_io.rs`).

use super::*;
use leasekv_kvstore::log::{AppliedTrace, CheckpointTicket, ProposalId, ReadJob, Slot, SnapshotJob};
use leasekv_kvstore::node::{NodeIo, SnapshotFormat};

/// The world of one node loop.
pub(super) struct LoopIo {
    pub(super) clock: MonotonicClock,
    pub(super) peers: PeerNetwork,
    /// The threads that answer the reads the node decided.
    pub(super) readers: ReaderPool,
    /// The election, for its status, gauges, configuration and step-downs.
    pub(super) election: Arc<dyn ElectionBackend>,
    /// The election's status as the loop receives it.
    pub(super) status: watch::Receiver<ElectionStatus>,
    /// The loop's `changed()` branch saw a new status (which marked it seen): the driver's
    /// next look takes it.
    pub(super) status_woke: bool,
    /// What the stall watchdog reads.
    pub(super) health: Arc<LoopHealth>,
    /// Test-only faults (nothing in a release build).
    pub(super) faults: NodeFaults,
    /// Shared with every [`NodeHandle`].
    pub(super) revision: Arc<AtomicI64>,
    /// The log round known, for the handles.
    pub(super) term: Arc<AtomicU64>,
    /// Wakes the watch streams when the history grew.
    pub(super) feed: FeedPublisher,
    /// The sync thread's queue (`None`: every sync runs on the loop).
    pub(super) disk: Option<std::sync::mpsc::Sender<SyncTicket>>,
    /// The sync on the sync thread.
    pub(super) sync_in_flight: Option<SyncTicket>,
    /// A sync the sync thread could not take (it stopped): reported to the node as failed.
    pub(super) sync_lost: Option<SyncTicket>,
    /// Told once when the storage fails.
    pub(super) storage_failed: Option<oneshot::Sender<String>>,
    /// This loop's own (peer) queue, for work it hands to blocking threads to report back
    /// on: never refused for clients' load.
    pub(super) to_self: mpsc::Sender<Request>,
    /// Publishes the configuration in force to the handles.
    pub(super) membership: watch::Sender<Arc<Membership>>,
    /// Publishes the auth store to the handles.
    pub(super) auth: watch::Sender<Arc<AuthStore>>,
    /// Told once when this node applied its own removal.
    pub(super) removed: Option<oneshot::Sender<u64>>,
    /// The data directory, where snapshots for peers are written.
    pub(super) dir: std::path::PathBuf,
}

impl NodeIo<SledStorage, Reply> for LoopIo {
    fn now(&self) -> leasekv_lease::Instant {
        self.clock.now()
    }

    fn election_changed(&mut self) -> Option<ElectionView> {
        let woke = std::mem::take(&mut self.status_woke);
        if !woke && !self.status.has_changed().unwrap_or(false) {
            return None;
        }
        let status = *self.status.borrow_and_update();
        self.faults.mastership(self.clock.now(), status.master.map(|m| m.valid_until));
        Some(ElectionView { master: status.master, hint: status.hint })
    }

    fn election_gauges(&self) -> ElectionGauges {
        ElectionGauges {
            change_gate: self.election.change_allowed_after(),
            configuration_seen: self.election.configuration_seen(),
        }
    }

    fn cluster_version(&self) -> u32 {
        self.peers.versions().cluster_version()
    }

    fn link_down(&self, node: NodeId) -> bool {
        self.peers.log_lane_down(node)
    }

    fn publish(&mut self, node: &Node<SledStorage, Reply>, history: bool) {
        let replica = node.replica();
        self.revision.store(replica.state().revision(), Ordering::Release);
        self.term.store(replica.known_round(), Ordering::Release);
        if history {
            self.feed.publish(&replica.state().history_reader());
        }
    }

    fn send_log(&mut self, to: NodeId, message: LogMessage) {
        self.peers.send_log(to, message);
    }

    fn send_forward(&mut self, to: NodeId, message: ForwardMessage) {
        let wire = match message {
            ForwardMessage::Request(id, request) => Wire::Forward(id, request),
            ForwardMessage::Answer(id, result) => Wire::Answer(id, result),
        };
        self.peers.send(to, &wire);
    }

    fn answer(&mut self, reply: Reply, result: MasterResult) {
        let _ = reply.send(result);
    }

    fn read(&mut self, job: ReadJob, asker: Asker<Reply>) {
        self.readers.submit(job, ReadAsker::Master(asker));
    }

    /// Off the loop: the election runs on its own task, and the loop must not wait for it.
    fn step_down(&mut self, asker: Asker<Reply>) {
        let (election, peers) = (self.election.clone(), self.peers.clone());
        tokio::spawn(async move {
            let result = election.step_down().await;
            let result = result.map(|()| MasterAnswer::SteppedDown).map_err(|_stopped| RequestError::ShuttingDown);
            match asker {
                Asker::Local(reply) => drop(reply.send(result)),
                Asker::Remote(node, id) => peers.send(node, &Wire::Answer(id, result)),
            }
        });
    }

    /// Members added are dialled, removed ones dropped.
    fn configure(&mut self, for_election: Membership, in_force: &Membership) {
        self.election.configure(for_election.configuration());
        self.peers.set_members(&peer_addresses(in_force));
        tracing::info!(
            epoch = in_force.epoch,
            voters = ?in_force.voters(),
            learners = ?in_force.learners(),
            "configuration in force"
        );
        self.membership.send_replace(Arc::new(in_force.clone()));
    }

    fn set_candidacy(&mut self, candidate: bool) {
        self.election.set_candidacy(candidate);
    }

    /// Reported once; the node then stops, as etcd's does.
    fn removed(&mut self, epoch: u64) {
        if let Some(tell) = self.removed.take() {
            tracing::error!(epoch, "this node was removed from the cluster; shutting down");
            let _ = tell.send(epoch);
        }
    }

    fn auth_changed(&mut self, auth: AuthStore) {
        tracing::info!(revision = auth.revision(), enabled = auth.is_enabled(), "auth store changed");
        self.auth.send_replace(Arc::new(auth));
    }

    fn storage_failed(&mut self, reason: String) {
        if let Some(tell) = self.storage_failed.take() {
            let _ = tell.send(reason);
        }
    }

    fn sync(&mut self, ticket: SyncTicket) {
        match self.disk.as_ref().map(|disk| disk.send(ticket)) {
            Some(Ok(())) => {
                self.sync_in_flight = Some(ticket);
                self.health.syncing(true);
            }
            _ => self.sync_lost = Some(ticket),
        }
    }

    fn sync_took(&mut self, took: Duration) {
        crate::metrics::metrics().fsync_took(took);
    }

    /// A checkpoint is an engine sync: a flush of what sled has not written yet (its own
    /// flusher writes every 500 ms), which took up to a quarter of a second under a put
    /// load, every turn waiting behind it. It runs on a blocking thread while the loop goes
    /// on applying; its end comes back as [`Request::CheckpointSynced`].
    fn checkpoint(&mut self, ticket: CheckpointTicket) {
        let to_self = self.to_self.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let synced = ticket.sync();
            // Waits for room rather than losing the ticket (no checkpoint would follow).
            let _ = to_self.blocking_send(Request::CheckpointSynced(ticket, synced, started.elapsed()));
        });
    }

    /// Parked for the peers before it is built (they pull it as it is written, into an
    /// unlinked file in the data directory, so the master never holds a state in memory
    /// to send it), and built at the background priority: on a host the members share,
    /// building a snapshot of a large state at the loops' priority took their CPU and the
    /// others' puts waited (scalebench catch-up).
    fn build_snapshot(&mut self, job: SnapshotJob, format: SnapshotFormat) {
        let (growing, writer) = match GrowingFile::create(&self.dir) {
            Ok(file) => file,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot create a snapshot file for peers; they will ask again");
                return;
            }
        };
        let payload = Arc::new(Payload::Growing(growing));
        for &peer in &job.peers {
            self.peers.send_snapshot(peer, job.index, Arc::clone(&payload));
        }
        drop(crate::blocking::spawn_background("peer-snapshot", move || {
            let started = Instant::now();
            match build_peer_snapshot(&job.view, writer, format) {
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

    fn observe(&mut self, _applied: &[AppliedTrace], _chosen: &[(ProposalId, Slot)]) {}
}

/// Writes `view`'s state as a snapshot through `writer`, into the file every peer it is
/// parked for reads a chunk at a time as it grows; returns its length. Format 9 (the
/// history's pages as stored) or format 8, which the cluster's oldest member reads.
fn build_peer_snapshot(view: &StateView, mut writer: GrowingWriter, format: SnapshotFormat) -> Result<u64, String> {
    let written = match format {
        SnapshotFormat::WithPages => leasekv_kvstore::state::stream::write(view, &mut writer),
        SnapshotFormat::WithValues => leasekv_kvstore::state::stream::write_format8(view, &mut writer),
    };
    written.map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| format!("cannot write the snapshot file: {e}"))
}
