//! The acceptor of one lease instance.

use super::message::{AcceptedLease, Body, Proposal};
use crate::ballot::Ballot;
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
    pub fn on_propose(&mut self, now: Instant, ballot: Ballot, proposal: Proposal, max_lease_time: Duration) -> Body {
        let well_formed = proposal.owner == ballot.node && proposal.duration < max_lease_time;
        if ballot < self.promised || !well_formed {
            return Body::ProposeResponse { ballot, accepted: false, promised: self.promised };
        }
        self.promised = ballot;
        self.accepted = Some(Held { ballot, expires_at: now.saturating_add(proposal.duration) });
        Body::ProposeResponse { ballot, accepted: true, promised: self.promised }
    }

    /// Release: drop the lease only if it is the released ballot, so that a delayed release
    /// of an old lease cannot cancel the same owner's newer one.
    pub fn on_release(&mut self, ballot: Ballot) -> bool {
        self.release_if(|held| held == ballot)
    }

    /// The `release-any-ballot` negative control: a release drops whatever lease its owner
    /// holds here, whatever the ballot.
    #[cfg(feature = "negative-controls")]
    pub fn on_release_any_ballot(&mut self, ballot: Ballot) -> bool {
        self.release_if(|held| held.node == ballot.node)
    }

    fn release_if(&mut self, matches: impl Fn(Ballot) -> bool) -> bool {
        let matches = self.accepted.is_some_and(|h| matches(h.ballot));
        if matches {
            self.accepted = None;
        }
        matches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeId;

    const M: Duration = Duration::from_secs(2);

    fn b(counter: u64, node: u32) -> Ballot {
        Ballot { counter, epoch: 1, node: NodeId(node) }
    }

    fn lease(node: u32, ms: u64) -> Proposal {
        Proposal { owner: NodeId(node), duration: Duration::from_millis(ms) }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn prepare_below_promise_is_rejected_with_the_promise() {
        let mut a = Acceptor::new();
        assert!(matches!(a.on_prepare(at(0), b(5, 1)), Body::PrepareResponse { accepted: None, .. }));
        assert_eq!(a.on_prepare(at(0), b(4, 2)), Body::PrepareRejected { ballot: b(4, 2), promised: b(5, 1) });
        assert_eq!(a.promised(), b(5, 1));
    }

    #[test]
    fn prepare_reports_the_running_lease_with_its_remaining_time() {
        let mut a = Acceptor::new();
        a.on_prepare(at(0), b(1, 1));
        a.on_propose(at(0), b(1, 1), lease(1, 1000), M);
        let Body::PrepareResponse { accepted: Some(l), .. } = a.on_prepare(at(400), b(2, 2)) else {
            panic!("expected a promise with the running lease");
        };
        assert_eq!((l.ballot, l.owner, l.remaining), (b(1, 1), NodeId(1), Duration::from_millis(600)));
    }

    #[test]
    fn accepted_lease_empties_when_its_timer_runs_out() {
        let mut a = Acceptor::new();
        a.on_propose(at(0), b(1, 1), lease(1, 1000), M);
        assert!(a.accepted(at(999)).is_some());
        assert!(a.accepted(at(1000)).is_none(), "the timer fires at exactly T");
        assert!(a.is_idle(at(1000)));
    }

    #[test]
    fn propose_below_promise_is_rejected_and_keeps_the_lease() {
        let mut a = Acceptor::new();
        a.on_prepare(at(0), b(3, 2));
        let reply = a.on_propose(at(0), b(2, 1), lease(1, 1000), M);
        assert_eq!(reply, Body::ProposeResponse { ballot: b(2, 1), accepted: false, promised: b(3, 2) });
        assert!(a.accepted(at(1)).is_none());
    }

    #[test]
    fn malformed_proposals_are_refused() {
        let mut a = Acceptor::new();
        // Owner other than the proposer.
        let r = a.on_propose(at(0), b(1, 1), lease(2, 1000), M);
        assert!(matches!(r, Body::ProposeResponse { accepted: false, .. }));
        // A lease as long as the restart quarantine would outlive it.
        let r = a.on_propose(at(0), b(1, 1), lease(1, 2000), M);
        assert!(matches!(r, Body::ProposeResponse { accepted: false, .. }));
        assert!(a.accepted(at(0)).is_none());
    }

    #[test]
    fn release_matches_the_ballot_not_the_owner() {
        let mut a = Acceptor::new();
        a.on_propose(at(0), b(7, 1), lease(1, 1000), M);
        assert!(!a.on_release(b(6, 1)), "an older ballot of the same owner");
        assert!(a.accepted(at(1)).is_some());
        assert!(a.on_release(b(7, 1)));
        assert!(a.accepted(at(1)).is_none());
    }

    #[cfg(feature = "negative-controls")]
    #[test]
    fn release_any_ballot_control_really_is_broken() {
        let mut a = Acceptor::new();
        a.on_propose(at(0), b(7, 1), lease(1, 1000), M);
        assert!(a.on_release_any_ballot(b(6, 1)));
    }

    #[test]
    fn promise_is_never_lowered() {
        let mut a = Acceptor::new();
        a.on_propose(at(0), b(9, 3), lease(3, 1000), M);
        a.on_prepare(at(0), b(2, 1));
        a.on_release(b(9, 3));
        assert_eq!(a.promised(), b(9, 3));
    }
}
