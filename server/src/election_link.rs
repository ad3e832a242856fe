//! How the node loop and the election exchange the cluster's configuration.
//!
//! The election core runs on its own task (the lease crate's `DrivenBackend`), the replica
//! on the node loop's. The two things they must exchange are small and rare:
//!
//! - the node loop, after a replica step that applied a configuration change, hands the
//!   new configuration to the election (`ElectionCore::set_configuration`);
//! - the election, after each of its steps, reports when the next change may go out
//!   (`ElectionCore::change_allowed_after`, rule 5 of docs/membership.md), which the replica
//!   checks when a change is proposed (`Replica::set_change_gate`).
//!
//! The simplest correct way that keeps the lease crate's driver untouched: the core the
//! driver runs is a [`LinkedCore`], a thin wrapper that shares an [`ElectionLink`] (one
//! mutex) with the node loop. The node loop stores the configuration there and wakes the
//! driver with a message from [`POKE`], a sender no member can be (ids start at 1, and the
//! peer service refuses non-members); before every step the wrapper hands a stored
//! configuration to the core, and after every step it stores the core's
//! `change_allowed_after`. The node loop reads that value right before it proposes, so the
//! replica always checks the gate the election published after its latest step. Rule 5 only
//! needs the gate to be no newer than the election's state, never fresher, so reading it a
//! moment late is safe (a stale gate refuses, it never lets an unsafe change through: its
//! epoch must match the configuration in force).

use leasekv_kvstore::membership::Membership;
use leasekv_lease::core::{Mastership, Output};
use leasekv_lease::tracker::TrackerMessage;
use leasekv_lease::{Ballot, ElectionCore, ElectionMessage, Instant, NodeId};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::mpsc;

/// The sender of the node loop's wake-up messages to the election driver.
pub const POKE: NodeId = NodeId(0);

/// A configuration for the election: epoch, voters, learners.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Configuration {
    epoch: u64,
    voters: Vec<NodeId>,
    learners: Vec<NodeId>,
}

#[derive(Debug, Default)]
struct LinkState {
    /// A configuration the node loop applied and the core has not been given yet.
    pending: Option<Configuration>,
    /// The core's `change_allowed_after` after its latest step.
    gate: Option<(u64, Instant)>,
    /// The core's `configuration_seen` after its latest step.
    seen: u64,
}

/// What the node loop and the election core share (see the module documentation).
#[derive(Debug)]
pub struct ElectionLink {
    state: Mutex<LinkState>,
    /// The election driver's inbox, to wake it when a configuration is stored.
    inbox: mpsc::Sender<(NodeId, ElectionMessage)>,
}

impl ElectionLink {
    /// A link waking the driver through `inbox` (the one the peer service feeds).
    pub fn new(inbox: mpsc::Sender<(NodeId, ElectionMessage)>) -> Arc<Self> {
        Arc::new(ElectionLink { state: Mutex::new(LinkState::default()), inbox })
    }

    /// Hands `membership` to the election: stored now, given to the core before its next
    /// step, which the wake-up message makes happen at once.
    pub fn configure(&self, membership: &Membership) {
        let configuration =
            Configuration { epoch: membership.epoch, voters: membership.voters(), learners: membership.learners() };
        self.lock().pending = Some(configuration);
        // A full inbox is already going to wake the driver: nothing lost.
        let _ = self.inbox.try_send((POKE, poke()));
    }

    /// The election's `change_allowed_after` as of its latest step.
    pub fn change_gate(&self) -> Option<(u64, Instant)> {
        self.lock().gate
    }

    /// The highest configuration epoch the election saw in a peer's message, as of its
    /// latest step: above the one in force, the log should catch up.
    pub fn configuration_seen(&self) -> u64 {
        self.lock().seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The wake-up message's payload; the wrapper never hands it to the core.
fn poke() -> ElectionMessage {
    ElectionMessage::Tracker(TrackerMessage::Release { request: Ballot { counter: 0, epoch: 0, node: POKE } })
}

/// An election core that takes its configuration from, and reports its change gate to, an
/// [`ElectionLink`].
pub struct LinkedCore {
    core: Box<dyn ElectionCore>,
    link: Arc<ElectionLink>,
}

impl LinkedCore {
    /// Wraps `core`.
    pub fn new(core: Box<dyn ElectionCore>, link: Arc<ElectionLink>) -> Self {
        LinkedCore { core, link }
    }

    fn before_step(&mut self, now: Instant) {
        let pending = self.link.lock().pending.take();
        if let Some(c) = pending {
            tracing::info!(epoch = c.epoch, voters = ?c.voters, learners = ?c.learners, "election: configuration applied");
            self.core.set_configuration(now, c.epoch, &c.voters, &c.learners);
        }
    }

    fn after_step(&self) {
        let mut state = self.link.lock();
        state.gate = self.core.change_allowed_after();
        state.seen = self.core.configuration_seen();
    }
}

impl ElectionCore for LinkedCore {
    fn id(&self) -> NodeId {
        self.core.id()
    }
    fn handle_message(&mut self, now: Instant, from: NodeId, msg: ElectionMessage) {
        self.before_step(now);
        if from != POKE {
            self.core.handle_message(now, from, msg);
        }
        self.after_step();
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.before_step(now);
        self.core.handle_timeout(now);
        self.after_step();
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }
    fn take_output(&mut self) -> Output {
        self.core.take_output()
    }
    fn mastership(&self, now: Instant) -> Option<Mastership> {
        self.core.mastership(now)
    }
    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        self.core.master_hint(now)
    }
    fn failed_rounds(&self) -> u64 {
        self.core.failed_rounds()
    }
    fn step_down(&mut self, now: Instant) {
        self.core.step_down(now);
        self.after_step();
    }
    fn shut_down(&mut self, now: Instant) {
        self.core.shut_down(now);
        self.after_step();
    }
    fn hand_over(&mut self, now: Instant, to: NodeId) {
        self.core.hand_over(now, to);
        self.after_step();
    }
    fn set_configuration(&mut self, now: Instant, epoch: u64, voters: &[NodeId], learners: &[NodeId]) {
        self.core.set_configuration(now, epoch, voters, learners);
        self.after_step();
    }
    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        self.core.change_allowed_after()
    }
    fn configuration_seen(&self) -> u64 {
        self.core.configuration_seen()
    }
}
