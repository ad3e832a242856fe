//! The acceptor of one lease instance.

use super::message::{AcceptedLease, Body, Proposal};
use crate::ballot::Ballot;
use crate::config::Breakage;
use crate::time::Instant;
use std::time::Duration;

/// The lease an acceptor holds: its ballot (whose node is the owner) and when the
/// acceptor's own timer for it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    ballot: Ballot,
    expires_at: Instant,
}

/// Acceptor state for one resource. Kept small on purpose: a node may run a very large
/// number of lease instances (PaxosLease section 8 says ~100 bytes each).
///
/// The lease timer is not a real timer: the accepted lease carries its expiry instant and
/// is treated as empty from then on. Nothing observes the state between inputs, so this is
/// exactly a timer that fires on time, at no cost for idle instances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acceptor {
    /// The highest ballot promised; never lowered (only lost in a restart, which is why a
    /// restarted node is quarantined).
    promised: Ballot,
    accepted: Option<Held>,
}

impl Acceptor {
    /// A fresh acceptor: nothing promised, nothing accepted.
    pub fn new() -> Self {
        Acceptor::default()
    }

    /// The highest ballot promised so far.
    pub fn promised(&self) -> Ballot {
        self.promised
    }

    /// The lease held at `now`, if any.
    pub fn accepted(&self, now: Instant) -> Option<AcceptedLease> {
        self.accepted.filter(|h| now < h.expires_at).map(|h| AcceptedLease {
            ballot: h.ballot,
            owner: h.ballot.node,
            remaining: h.expires_at.saturating_since(now),
        })
    }

    /// Whether this instance holds nothing worth keeping in memory beyond its promise.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.accepted(now).is_none()
    }

    /// Phase 1: promise `ballot` unless a higher one was promised.
    pub fn on_prepare(&mut self, now: Instant, ballot: Ballot) -> Body {
        if ballot < self.promised {
            return Body::PrepareRejected { ballot, promised: self.promised };
        }
        self.promised = ballot;
        Body::PrepareResponse { ballot, accepted: self.accepted(now) }
    }

    /// Phase 2: accept the lease unless a higher ballot was promised, or the proposal is
    /// malformed (owner other than the proposer, duration not below `max_lease_time`; only
    /// a misconfigured or malicious peer sends those, and accepting a lease longer than the
    /// restart quarantine would break safety).
    pub fn on_propose(
        &mut self,
        now: Instant,
        ballot: Ballot,
        proposal: Proposal,
        max_lease_time: Duration,
    ) -> Body {
        let well_formed = proposal.owner == ballot.node && proposal.duration < max_lease_time;
        if ballot < self.promised || !well_formed {
            return Body::ProposeResponse { ballot, accepted: false, promised: self.promised };
        }
        self.promised = ballot;
        self.accepted = Some(Held { ballot, expires_at: now.add(proposal.duration) });
        Body::ProposeResponse { ballot, accepted: true, promised: self.promised }
    }

    /// Release: drop the lease only if it is the released ballot, so that a delayed release
    /// of an old lease cannot cancel the same owner's newer one.
    pub fn on_release(&mut self, ballot: Ballot, breakage: Breakage) -> bool {
        let matches = match self.accepted {
            Some(h) if breakage == Breakage::ReleaseAnyBallot => h.ballot.node == ballot.node,
            Some(h) => h.ballot == ballot,
            None => false,
        };
        if matches {
            self.accepted = None;
        }
        matches
    }
}
