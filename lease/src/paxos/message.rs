//! The PaxosLease wire messages. Every message names the resource it is about and the
//! configuration epoch of its sender (rule 4 of `docs/membership.md`).

use crate::ballot::Ballot;
use crate::ids::{NodeId, ResourceId};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One PaxosLease message about one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The lease instance this message belongs to.
    pub resource: ResourceId,
    /// The sender's configuration epoch: the highest it has applied or seen. Acceptors adopt
    /// the highest epoch they see and refuse rounds from a lower one. Absent on the wire
    /// from a node that predates membership changes, which only ever ran epoch 0.
    #[serde(default)]
    pub epoch: u64,
    /// What the message says.
    pub body: Body,
}

/// The lease a proposer asks the acceptors to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The node that will hold the lease (always the proposer itself).
    pub owner: NodeId,
    /// How long each acceptor holds it, measured by the acceptor's own clock.
    pub duration: Duration,
}

/// What an acceptor reports about the lease it currently holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedLease {
    /// The ballot under which the lease was accepted.
    pub ballot: Ballot,
    /// The lease holder.
    pub owner: NodeId,
    /// Time left on the acceptor's timer, by the acceptor's clock.
    pub remaining: Duration,
}

/// The message kinds of PaxosLease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// Phase 1a: the proposer asks for a promise not to accept lower ballots.
    PrepareRequest {
        /// The proposer's ballot.
        ballot: Ballot,
    },
    /// Phase 1b: the promise with the currently accepted lease, if any.
    PrepareResponse {
        /// The ballot being answered.
        ballot: Ballot,
        /// The acceptor's lease, or empty.
        accepted: Option<AcceptedLease>,
    },
    /// Phase 1b negative: the acceptor promised a higher ballot.
    PrepareRejected {
        /// The ballot being answered.
        ballot: Ballot,
        /// The higher ballot already promised, so the proposer can jump past it.
        promised: Ballot,
    },
    /// Phase 2a: hold this lease.
    ProposeRequest {
        /// The proposer's ballot (the one it prepared).
        ballot: Ballot,
        /// The lease.
        proposal: Proposal,
    },
    /// Phase 2b: accepted, or rejected because a higher ballot was promised.
    ProposeResponse {
        /// The ballot being answered.
        ballot: Ballot,
        /// Whether the acceptor now holds the lease.
        accepted: bool,
        /// The acceptor's highest promised ballot.
        promised: Ballot,
    },
    /// Section 7: the holder gave the lease up; drop it if it is still this ballot.
    Release {
        /// The ballot of the lease being released.
        ballot: Ballot,
    },
    /// Refusal of a Prepare or Propose sent at a configuration epoch lower than the
    /// acceptor's: the proposer abandons that round at once and competes again only after it
    /// has applied the configuration of `epoch` from the log.
    StaleConfiguration {
        /// The ballot being refused.
        ballot: Ballot,
        /// The acceptor's configuration epoch.
        epoch: u64,
    },
    /// A hint, never a grant: "`owner` holds the lease for about `duration`".
    Learned {
        /// The holder.
        owner: NodeId,
        /// The holder's ballot.
        ballot: Ballot,
        /// The holder's remaining validity by its own clock.
        duration: Duration,
    },
    /// The holder has stopped believing in its lease and releases it so that `to` takes it
    /// (etcd's leader transfer). `to` starts a round at once; the others hold off for a
    /// while so as not to pre-empt it. `released` are the ballots the holder's Release
    /// messages name (sent right after): `to` counts an acceptor still holding one of them
    /// as free, exactly as that acceptor will be once the Release reaches it, so that
    /// `to` need not wait for the Release to win the race with its own Prepare.
    HandOver {
        /// The node that should take the lease next.
        to: NodeId,
        /// The sender's own ballots it is releasing.
        released: Vec<Ballot>,
    },
}

impl Body {
    /// Whether every ballot the body carries is plausible ([`Ballot::is_plausible`]); a body
    /// that is not is dropped on arrival.
    pub fn is_plausible(&self) -> bool {
        match self {
            Body::PrepareRequest { ballot }
            | Body::PrepareResponse { ballot, .. }
            | Body::ProposeRequest { ballot, .. }
            | Body::Release { ballot }
            | Body::StaleConfiguration { ballot, .. }
            | Body::Learned { ballot, .. } => ballot.is_plausible(),
            Body::PrepareRejected { ballot, promised } | Body::ProposeResponse { ballot, promised, .. } => {
                ballot.is_plausible() && promised.is_plausible()
            }
            Body::HandOver { released, .. } => released.iter().all(Ballot::is_plausible),
        }
    }

    /// Whether the body is addressed to the acceptor role (as opposed to the proposer).
    pub fn is_for_acceptor(&self) -> bool {
        matches!(self, Body::PrepareRequest { .. } | Body::ProposeRequest { .. } | Body::Release { .. })
    }
}
