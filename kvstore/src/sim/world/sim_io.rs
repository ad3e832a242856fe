//! The simulator's side of the production driver ([`crate::node::Driver`]): the world a
//! simulated node's driver acts on. Messages go on the simulated network, syncs and
//! checkpoints take simulated disk time, reads run on a simulated reader thread, and the
//! election is the node's own simulated core. The driver makes every decision; what is
//! here only carries them out, and records what the oracles check after the turn.

use super::*;
use crate::auth::AuthStore;
use crate::log::{AppliedTrace, CheckpointTicket, ProposalId, ReadJob, Slot, SnapshotJob};
use crate::node::{Asker, MasterAnswer, NodeIo, SnapshotFormat};

/// One node's world during one drive of its driver. The node itself is out of
/// `World::nodes` meanwhile (the driver holds it).
pub(super) struct SimIo<'w> {
    world: &'w mut World,
    node: usize,
    /// The election status the driver took during the drive.
    pub(super) taken: Option<ElectionView>,
    /// The highest slot applied during the drive (read leases are checked against it).
    pub(super) applied_through: Option<Slot>,
    /// The election's configuration or candidacy changed: its output must be sent.
    pub(super) reconfigure: bool,
}

impl<'w> SimIo<'w> {
    pub(super) fn new(world: &'w mut World, node: usize) -> Self {
        SimIo { world, node, taken: None, applied_through: None, reconfigure: false }
    }
}

impl NodeIo<MemoryStorage, Waiter> for SimIo<'_> {
    fn now(&self) -> leasekv_lease::Instant {
        self.world.local(self.node)
    }

    fn election_changed(&mut self) -> Option<ElectionView> {
        let n = &mut self.world.nodes[self.node];
        if !n.pending_visible {
            return None;
        }
        n.pending_visible = false;
        let view = n.pending_view.take()?;
        n.delivered = view;
        self.taken = Some(view);
        Some(view)
    }

    fn election_gauges(&self) -> ElectionGauges {
        self.world.nodes[self.node].gauges
    }

    fn cluster_version(&self) -> u32 {
        // Every simulated node is this build.
        u32::MAX
    }

    fn link_down(&self, _node: NodeId) -> bool {
        false
    }

    fn publish(&mut self, _node: &KvNode, _history: bool) {
        // The watch oracle reads the history after the drive (`observe_history`).
    }

    fn send_log(&mut self, to: NodeId, message: LogMessage) {
        self.world.send_wire(self.node, to, Wire::Log(message));
    }

    fn send_forward(&mut self, to: NodeId, message: ForwardMessage) {
        self.world.send_wire(self.node, to, Wire::Forward(message));
    }

    fn answer(&mut self, (client, request_id, request): Waiter, result: MasterResult) {
        self.world.reply(client, request_id, reply_for_result(&request, result));
    }

    fn read(&mut self, job: ReadJob, asker: Asker<Waiter>) {
        self.world.hand_to_reader(self.node, (job, asker));
    }

    fn step_down(&mut self, asker: Asker<Waiter>) {
        let now = self.now();
        if let Some(core) = self.world.nodes[self.node].election.as_mut() {
            core.step_down(now);
            self.reconfigure = true;
        }
        let result = Ok(MasterAnswer::SteppedDown);
        match asker {
            Asker::Local((client, request_id, request)) => {
                self.world.reply(client, request_id, reply_for_result(&request, result))
            }
            Asker::Remote(to, id) => self.send_forward(to, ForwardMessage::Answer(id, result)),
        }
    }

    fn configure(&mut self, _for_election: Membership, _in_force: &Membership) {
        // `sync_configuration` hands it to the election after the drive, with its checks.
    }

    fn set_candidacy(&mut self, candidate: bool) {
        let now = self.now();
        let id = self.world.nodes[self.node].id;
        if let Some(core) = self.world.nodes[self.node].election.as_mut() {
            core.set_candidacy(now, candidate);
            self.reconfigure = true;
            self.world.trace(|| format!("{id} candidacy {candidate}"));
        }
    }

    fn removed(&mut self, _epoch: u64) {}

    fn auth_changed(&mut self, _auth: AuthStore) {}

    fn storage_failed(&mut self, _reason: String) {}

    fn sync(&mut self, ticket: crate::log::SyncTicket) {
        let world = &mut *self.world;
        world.nodes[self.node].sync_in_flight = Some(ticket);
        let latency = world.rng.range_u64(100, 3000) * 1000;
        let incarnation = world.nodes[self.node].incarnation;
        world.queue.push(world.now + latency, Event::SyncDone { node: self.node, incarnation });
    }

    fn checkpoint(&mut self, ticket: CheckpointTicket) {
        let world = &mut *self.world;
        let sick = world.sick_checkpoint(self.node, ticket.slot());
        // Half the checkpoints sync at once and report later: the log is dropped only at
        // the report, whenever the sync ran. A sick disk's sync ran at once and its report
        // hangs.
        let early = (sick.is_some() || world.rng.chance(0.5)).then(|| ticket.sync());
        world.nodes[self.node].checkpoint_in_flight = Some((ticket, early));
        let latency = sick.unwrap_or_else(|| world.rng.range_u64(100, 3000) * 1000);
        let incarnation = world.nodes[self.node].incarnation;
        world.queue.push(world.now + latency, Event::CheckpointDone { node: self.node, incarnation });
    }

    fn build_snapshot(&mut self, job: SnapshotJob, format: SnapshotFormat) {
        let mut data = Vec::new();
        let written = match format {
            SnapshotFormat::WithPages => crate::state::stream::write(&job.view, &mut data),
            SnapshotFormat::WithValues => crate::state::stream::write_format8(&job.view, &mut data),
        };
        match written {
            Ok(_) => {
                for peer in job.peers {
                    let message = LogMessage::Snapshot { index: job.index, data: data.clone() };
                    self.world.send_wire(self.node, peer, Wire::Log(message));
                }
            }
            Err(e) => self.world.oracles.violation(self.world.now, ViolationKind::SnapshotUnbuilt, e.to_string()),
        }
    }

    fn observe(&mut self, applied: &[AppliedTrace], chosen: &[(ProposalId, Slot)]) {
        let world = &mut *self.world;
        let id = world.nodes[self.node].id;
        for trace in applied {
            if trace.from_snapshot {
                world.report.snapshots_installed += 1;
            }
            world.report.leases_expired += trace.expired.len() as u64;
            world.report.slots = world.report.slots.max(trace.slot);
            world.oracles.on_applied(world.now, id, trace);
        }
        if let Some(slot) = applied.iter().map(|trace| trace.slot).max() {
            self.applied_through = self.applied_through.max(Some(slot));
        }
        for &(id, slot) in chosen {
            world.oracles.on_acked_write(world.now, slot, id);
        }
    }
}
