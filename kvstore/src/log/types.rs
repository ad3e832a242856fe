//! The values the replicated log agrees on, and the ballots that order its proposers.

use crate::command::Command;
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};

/// A log slot number. Slot 0 is never used: `commit == 0` means "nothing chosen".
pub type Slot = u64;

/// A Multi-Paxos ballot for the log, ordered by `(round, node)`. Independent of the election
/// term: the election only decides who *tries* to propose; these ballots, persisted by every
/// acceptor, are what keeps two would-be masters from making replicas diverge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct LogBallot {
    /// Increases with every new leadership attempt.
    pub round: u64,
    /// The proposer, to break ties.
    pub node: NodeId,
}

impl LogBallot {
    /// The ballot below every real one (nothing promised yet).
    pub const ZERO: LogBallot = LogBallot { round: 0, node: NodeId(0) };

    /// The highest round a replica takes from a peer. A cluster takes over its log once per
    /// master change, so no honest round comes near it; a message above it is malformed and
    /// dropped (as if lost, which Paxos tolerates) rather than promised, since a promise of
    /// `u64::MAX` would leave no higher ballot for any later master.
    pub const MAX_ROUND: u64 = u64::MAX / 2;

    /// Whether a peer may have sent this ballot (its round is at most [`Self::MAX_ROUND`]).
    pub fn is_plausible(self) -> bool {
        self.round <= Self::MAX_ROUND
    }
}

/// Names one client command wherever it travels, so that the node that took the request
/// can match the result when the command is applied. `incarnation` changes with every
/// restart of the node, so ids never repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProposalId {
    /// The node that took the request.
    pub node: NodeId,
    /// That node's restart epoch.
    pub incarnation: u32,
    /// A counter within the incarnation.
    pub seq: u64,
}

/// One command in a log entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Proposal {
    /// Who to answer.
    pub id: ProposalId,
    /// What to apply.
    pub command: Command,
}

/// The value of one log slot: a batch of commands, applied in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Entry {
    /// The batch (empty for a no-op filling a hole).
    pub proposals: Vec<Proposal>,
}

impl Entry {
    /// Whether the batch holds a membership change (which ends the configuration of the
    /// slots before it).
    pub fn changes_members(&self) -> bool {
        self.proposals.iter().any(|p| matches!(p.command, Command::ChangeMembers(_)))
    }
}

/// What an acceptor stores for one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedSlot {
    /// The ballot in which the value was accepted.
    pub ballot: LogBallot,
    /// The value.
    pub entry: Entry,
    /// Whether this replica knows the value is chosen (then no other value can ever be).
    pub chosen: bool,
}
