//! The driver: the one piece of code between a [`Node`] and the world, generic over what
//! the world is ([`NodeIo`]: the transport, the disk, the clock, the threads). The tokio
//! loop in `server` and the store simulator are two instantiations of it, so what the
//! simulator runs is what the server runs (TigerBeetle's way), and neither makes a decision
//! of its own: every input goes in through [`Driver::handle`], every effect comes out
//! through [`Driver::end_turn`] (or, for what can go at once, right after its input).
//!
//! The contract, as tikv/raft-rs's `RawNode`: inputs in; one [`Effects`] value out; the
//! results of what the driver ran (a sync, a checkpoint, a snapshot install) back in as
//! inputs.

use super::{
    Asker, Effects, ElectionGauges, ElectionView, ForwardId, ForwardMessage, MasterRequest, MasterResult, Node,
    SnapshotFormat, SyncPlace, TurnFacts,
};
use crate::auth::AuthStore;
use crate::log::{AppliedTrace, CheckpointTicket, LogMessage, ProposalId, ReadJob, Slot, SnapshotJob, SyncTicket};
use crate::membership::Membership;
use crate::storage::{Storage, StorageError};
use leasekv_lease::{Instant, NodeId};

/// Most passes of [`Driver::end_turn`]: a sync on the loop releases messages and answers,
/// which the next pass sends.
const PASSES: usize = 16;

/// What a driver does in the world for its node. Every method is IO: sending, handing to a
/// thread, publishing to the node's handles. None decides.
pub trait NodeIo<S: Storage, W> {
    /// The node's clock: monotonic, this node's own.
    fn now(&self) -> Instant;
    /// The election's status, if it changed since the node last took it.
    fn election_changed(&mut self) -> Option<ElectionView>;
    /// What the election reported after its latest step.
    fn election_gauges(&self) -> ElectionGauges;
    /// The lowest peer protocol version every member speaks.
    fn cluster_version(&self) -> u32;
    /// Whether the link to `node` is known to be down.
    fn link_down(&self, node: NodeId) -> bool;
    /// Publishes what the node's handles read (its revision and term; with `history`, the
    /// watch streams' history too). Called before any answer goes out, so a client that got
    /// an answer and asks again never sees an older revision.
    fn publish(&mut self, node: &Node<S, W>, history: bool);
    /// Sends a log message on the log's lane.
    fn send_log(&mut self, to: NodeId, message: LogMessage);
    /// Sends a forward or a forward's answer.
    fn send_forward(&mut self, to: NodeId, message: ForwardMessage);
    /// Answers one of this node's callers.
    fn answer(&mut self, waiter: W, result: MasterResult);
    /// Runs a read off the loop and answers its asker with [`super::run_read`]'s result.
    fn read(&mut self, job: ReadJob, asker: Asker<W>);
    /// Has the election give up this node's mastership, then answers the asker.
    fn step_down(&mut self, asker: Asker<W>);
    /// The configuration in force changed: `for_election` to the election, `in_force` to
    /// the peer network and the handles.
    fn configure(&mut self, for_election: Membership, in_force: &Membership);
    /// Whether this node offers itself as master.
    fn set_candidacy(&mut self, candidate: bool);
    /// This node applied its own removal at this configuration epoch.
    fn removed(&mut self, epoch: u64);
    /// The auth store changed.
    fn auth_changed(&mut self, auth: AuthStore);
    /// The storage failed: the node serves nothing more.
    fn storage_failed(&mut self, reason: String);
    /// Runs a sync off the loop; its end comes back as [`Input::Synced`].
    fn sync(&mut self, ticket: SyncTicket);
    /// A sync ended after `took` (for metrics).
    fn sync_took(&mut self, _took: std::time::Duration) {}
    /// Runs a checkpoint's engine sync off the loop; its end comes back as
    /// [`Input::CheckpointSynced`].
    fn checkpoint(&mut self, ticket: CheckpointTicket);
    /// Builds a snapshot for peers off the loop and sends it to each peer it names.
    fn build_snapshot(&mut self, job: SnapshotJob, format: SnapshotFormat);
    /// Slots applied and proposals chosen (only with the replica's `trace_applies`).
    fn observe(&mut self, _applied: &[AppliedTrace], _chosen: &[(ProposalId, Slot)]) {}
}

/// What reaches a node: every input a driver hands it.
pub enum Input<W> {
    /// The election's status changed.
    Election,
    /// A request only the master can answer, from this node's caller.
    Client(MasterRequest, W),
    /// A request a follower forwarded to this node as master.
    Forwarded(NodeId, ForwardId, MasterRequest),
    /// The master's answer to one of this node's forwards.
    Answered(NodeId, ForwardId, MasterResult),
    /// A log message from a peer.
    Log(NodeId, LogMessage),
    /// The node's deadline ([`Driver::poll_timeout`]) passed.
    Timeout,
    /// A sync off the loop ended. `None`: the disk finishes now, covering every write up to
    /// now (the simulator's disk); the node syncs in place.
    Synced(SyncTicket, Option<Result<(), StorageError>>),
    /// A checkpoint's engine sync ended.
    CheckpointSynced(CheckpointTicket, Result<(), crate::engine::EngineError>),
    /// A snapshot from a peer, installed and synced in a staged engine as it arrived.
    StagedSnapshot(NodeId, Box<crate::log::StagedSnapshot>),
    /// A snapshot from a peer, received whole into a file.
    SnapshotFile(Slot, std::path::PathBuf),
    /// A snapshot from a peer could not be installed, for this reason (a full disk).
    SnapshotInstallFailed(NodeId, String),
}

/// A node and the code that drives it.
pub struct Driver<S: Storage, W> {
    node: Node<S, W>,
}

impl<S: Storage, W> Driver<S, W> {
    /// Drives `node`.
    pub fn new(node: Node<S, W>) -> Self {
        Driver { node }
    }

    /// The node, for what a driver reads locally (status, serializable reads' decisions).
    pub fn node(&self) -> &Node<S, W> {
        &self.node
    }

    /// The node for a local request that is not an input of the protocol (a serializable
    /// read's decision, a status, a view for a backup), after any change of the election's
    /// status that came meanwhile, as for an input.
    pub fn local(&mut self, io: &mut impl NodeIo<S, W>) -> &mut Node<S, W> {
        if let Some(view) = io.election_changed() {
            self.node.handle_election(io.now(), view);
        }
        &mut self.node
    }

    /// The node, when the driver is done.
    pub fn into_node(self) -> Node<S, W> {
        self.node
    }

    /// When the node next needs [`Input::Timeout`].
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.node.poll_timeout()
    }

    /// Hands one input to the node, after any change of the election's status that came
    /// meanwhile, and sends what it could answer at once.
    ///
    /// The status goes first for every input: an input may follow one that took seconds (a
    /// DeleteRange of 200,000 keys applies for 4-6 s on every member), and the node would
    /// judge it against the lease it knew before, long run out, and give up the log round
    /// of a master renewed all along. A timeout takes the status with it instead, and the
    /// node applies it first ([`Node::handle_timeout`]).
    pub fn handle(&mut self, io: &mut impl NodeIo<S, W>, input: Input<W>) {
        let with_status = matches!(input, Input::Timeout | Input::Election)
            || self.node.breakage() != super::NodeBreakage::StatusOnlyWithTimeout;
        let status = if with_status { io.election_changed() } else { None };
        let now = io.now();
        if let (Some(view), false) = (status, matches!(input, Input::Timeout)) {
            self.node.handle_election(now, view);
        }
        io.publish(&self.node, false);
        let node = &mut self.node;
        match input {
            Input::Election => {}
            Input::Client(request, waiter) => node.handle_client(now, request, waiter, |m| io.link_down(m)),
            Input::Forwarded(from, id, request) => node.handle_forwarded(now, from, id, request),
            Input::Answered(from, id, result) => node.handle_answer(now, from, id, result),
            Input::Log(from, message) => node.handle_message(now, from, message),
            Input::Timeout => node.handle_timeout(now, status),
            Input::Synced(ticket, result) => {
                let result = result.unwrap_or_else(|| node.sync_in_place());
                node.on_synced(now, ticket, result);
                io.sync_took(node.last_sync_took());
            }
            Input::CheckpointSynced(ticket, synced) => node.on_checkpoint_synced(ticket, synced),
            Input::StagedSnapshot(_, snapshot) => node.on_staged_snapshot(now, *snapshot),
            Input::SnapshotFile(index, path) => node.on_snapshot_file(now, index, path),
            Input::SnapshotInstallFailed(_, reason) => node.snapshot_install_failed(now, reason),
        }
        // The input may have applied commands (a follower's commit): an answer released by
        // them must not go out before the revision it reflects is published.
        io.publish(&self.node, false);
        let effects = self.node.input_effects();
        send(io, effects);
    }

    /// Ends a turn of inputs: takes the node's effects and carries them out, until the
    /// node has nothing more to say (a sync on the loop releases more; bounded).
    pub fn end_turn(&mut self, io: &mut impl NodeIo<S, W>, facts: TurnFacts) {
        let takes_status = self.node.breakage() != super::NodeBreakage::StatusOnlyWithTimeout;
        for _ in 0..PASSES {
            // As before an input: what this pass decides (a lease read released by a sync on
            // the loop, a proposal's answer) is decided on the latest status.
            if let Some(view) = takes_status.then(|| io.election_changed()).flatten() {
                self.node.handle_election(io.now(), view);
            }
            self.node.set_election_gauges(io.election_gauges());
            self.node.set_cluster_version(io.cluster_version());
            let mut effects = self.node.turn_effects(io.now(), facts);
            if let Some(reason) = effects.storage_failed.take() {
                io.storage_failed(reason);
            }
            // Before sending: a member just added must be reachable for what goes to it.
            if let Some(for_election) = effects.configuration.take() {
                io.configure(for_election, self.node.replica().membership());
            }
            if let Some(candidate) = effects.candidacy.take() {
                io.set_candidacy(candidate);
            }
            if let Some(epoch) = effects.removed.take() {
                io.removed(epoch);
            }
            if let Some(auth) = effects.auth.take() {
                io.auth_changed(auth);
            }
            io.observe(&effects.applied, &effects.chosen);
            io.publish(&self.node, false);
            let (sync, checkpoint, snapshot) =
                (effects.sync.take(), effects.checkpoint.take(), effects.snapshot.take());
            let write_applied = effects.write_applied;
            for asker in std::mem::take(&mut effects.step_downs) {
                io.step_down(asker);
            }
            send(io, effects);
            if write_applied {
                self.node.write_applied();
            }
            io.publish(&self.node, true);
            if let Some(ticket) = checkpoint {
                io.checkpoint(ticket);
            }
            if let Some((job, format)) = snapshot {
                io.build_snapshot(job, format);
            }
            match sync {
                Some(job) if job.place == SyncPlace::OnLoop => {
                    let result = self.node.sync_in_place();
                    self.node.on_synced(io.now(), job.ticket, result);
                    io.sync_took(self.node.last_sync_took());
                }
                Some(job) => return io.sync(job.ticket),
                None => return,
            }
        }
    }

    /// Stops driving: what was applied is written to the engine (the log holds it and a
    /// restart would replay it; the write spares the replay).
    pub fn stop(&mut self) {
        self.node.write_applied();
    }
}

/// Sends the messages, answers and reads of `effects`.
fn send<S: Storage, W>(io: &mut impl NodeIo<S, W>, effects: Effects<W>) {
    for (to, message) in effects.log {
        io.send_log(to, message);
    }
    for (to, message) in effects.forwards {
        io.send_forward(to, message);
    }
    for (waiter, result) in effects.answers {
        io.answer(waiter, result);
    }
    for (job, asker) in effects.reads {
        io.read(job, asker);
    }
}
