//! The sans-IO contract every election backend's protocol core implements.
//!
//! A core is a plain state machine. Its inputs are `(now, message)` and `(now, timeout)`;
//! its outputs are messages to send, the next instant it wants to be woken, and changes of
//! leadership. It never reads a clock, opens a socket or spawns a thread, so the same core
//! runs under the tokio driver ([`crate::backend`]) and under the deterministic simulator
//! ([`crate::sim`]).

use crate::ballot::Term;
use crate::ids::NodeId;
use crate::message::ElectionMessage;
use crate::time::Instant;

/// A message to send to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The destination node.
    pub to: NodeId,
    /// The message.
    pub msg: ElectionMessage,
}

/// Why a node stopped being master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The lease ran out before it could be extended.
    Expired,
    /// The node gave it up (step-down or shutdown).
    Released,
}

/// A change of this node's own leadership, reported once, when it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeadershipChange {
    /// This node became master.
    Elected {
        /// The new tenure.
        term: Term,
        /// Until when (local clock, exclusive) it may act as master.
        valid_until: Instant,
    },
    /// The master lease was extended within the same tenure.
    Extended {
        /// The tenure.
        term: Term,
        /// The new end of validity (local clock, exclusive).
        valid_until: Instant,
    },
    /// This node is no longer master.
    Lost {
        /// The tenure that ended.
        term: Term,
        /// Why it ended.
        reason: LossReason,
    },
}

/// Everything a core produced since the driver last asked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Output {
    /// Messages to send, in order.
    pub messages: Vec<Envelope>,
    /// Leadership changes, in order.
    pub changes: Vec<LeadershipChange>,
}

/// "Am I master now, until which local instant, in which term?"
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mastership {
    /// The tenure.
    pub term: Term,
    /// The end of validity by this node's clock (exclusive).
    pub valid_until: Instant,
}

/// The sans-IO core of an election backend.
pub trait ElectionCore: Send + 'static {
    /// This node.
    fn id(&self) -> NodeId;
    /// Feeds a message from peer `from`. Unknown senders and malformed messages are ignored.
    fn handle_message(&mut self, now: Instant, from: NodeId, msg: ElectionMessage);
    /// Lets the core act on its timers; call it at or after [`ElectionCore::poll_timeout`].
    fn handle_timeout(&mut self, now: Instant);
    /// The next instant the core wants [`ElectionCore::handle_timeout`] called, if any.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Takes the messages and changes produced so far.
    fn take_output(&mut self) -> Output;
    /// Whether this node is master at `now`, and in which term until when.
    fn mastership(&self, now: Instant) -> Option<Mastership>;
    /// The node this one believes to be master, for redirecting clients. May be stale and
    /// never grants anything.
    fn master_hint(&self, now: Instant) -> Option<NodeId>;
    /// Rounds this node started for mastership and abandoned so far (pre-empted, rejected
    /// or unanswered), for metrics; 0 for a backend without rounds.
    fn failed_rounds(&self) -> u64 {
        0
    }
    /// Gives up mastership at once (if held) so another node can take over, then keeps
    /// competing after a short hold-off.
    fn step_down(&mut self, now: Instant);
    /// Gives up mastership (if held) and stops competing for good: a graceful shutdown.
    fn shut_down(&mut self, now: Instant);
    /// The configuration this node has applied from the log: its epoch, its voters and its
    /// learners (this node may be in either or neither). Called at start with what the data
    /// dir holds and after every applied change; a call with an epoch lower than the current
    /// one is ignored.
    ///
    /// A core built from a plain peer list starts at configuration epoch 0 with every given
    /// node a voter, so a cluster whose membership never changes need not call this.
    fn set_configuration(&mut self, now: Instant, configuration: &crate::members::Configuration);
    /// Rule 5 of docs/membership.md: `Some((epoch, at))` once this node, as master, completed
    /// a lease round at configuration `epoch` answered by a majority of that configuration's
    /// voters; `at` is the instant (this node's clock) after which the next configuration
    /// change may be proposed: the round's completion plus the max lease time M, stretched by
    /// the drift bound (M*(1+ε)/(1-ε)). None for a node that has not, or backends without
    /// such rounds.
    fn change_allowed_after(&self) -> Option<(u64, Instant)>;
    /// The highest configuration epoch this node has seen in any peer's message. Above the
    /// epoch it applied, the log has chosen a configuration this node does not know yet: the
    /// driver should make the log catch up (a node that lags behind would otherwise only
    /// learn it from a master, and there may be none until it does). 0 for backends
    /// without configuration epochs.
    fn configuration_seen(&self) -> u64 {
        0
    }
    /// The driver's candidacy switch: whether this node offers itself as master. A node
    /// that could not serve as master (it is catching up from its peers, its last snapshot
    /// install failed, or it held mastership without becoming ready) turns it off; it then
    /// starts no round and gives up mastership at once if it holds it, but goes on voting
    /// (its acceptors keep answering), so the others elect among themselves. Turned on
    /// again, it competes after the usual hold-off. Every node starts as a candidate; only
    /// liveness depends on the switch, never safety.
    fn set_candidacy(&mut self, now: Instant, candidate: bool);
    /// Gives up mastership (if held) so that `to` takes over next (etcd's leader transfer),
    /// then keeps competing after the hold-off. Only timing: safety never depends on who
    /// takes over. A backend that cannot direct the next master just steps down.
    fn hand_over(&mut self, now: Instant, to: NodeId) {
        let _ = to;
        self.step_down(now);
    }
}
