//! Read leases: the master lets other members answer linearizable reads from their own
//! state, with no round trip, while it holds back every write until each of them has
//! received it (docs/read-leases.md has the rules and the argument, rule by rule).
//!
//! - A member asks the master for a read lease ([`super::LogMessage::ReadLeaseAsk`]) when
//!   the master's commit heartbeat reaches it, starting its timer before the ask leaves
//!   (rule R1). The master grants while it is the ready master, and remembers until when,
//!   by its own clock, the member may believe it ([`Grants`]).
//! - The master chooses a slot only once every node whose lease may still be valid has it:
//!   accepted in the master's ballot, or received (R2). A grant names the highest slot the
//!   master has chosen (R3).
//! - A holder answers a linearizable read once it has applied that slot and every slot it
//!   accepted in the lease's ballot (R4), while its lease is valid and no higher ballot has
//!   reached it (R5).
//! - A new master counts every member as a holder until it has accepted something in the
//!   new ballot, or until one lease time has passed since the takeover (R6).
//!
//! The grantor's and the holder's state here is in memory only: a restarted holder holds
//! nothing (grants name the incarnation they answer), and a restarted master presumes every
//! member a holder, as any new master does.

use super::types::{LogBallot, Slot};
use leasekv_lease::{Instant, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// How read leases are granted and believed. Every member must use the same lease time
/// and drift bound (the server derives both from `[election]` and `[reads]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadLeaseConfig {
    /// Whether this node asks for read leases as follower and grants them as master. False
    /// keeps the rest: a master still holds writes back for leases it granted and waits
    /// out an earlier master's after a takeover, so turning read leases off on a running
    /// cluster, one member at a time, is safe.
    pub grant: bool,
    /// L: how long, by the master's clock from an ask's arrival, the master waits for the
    /// asker before choosing a slot without it. It bounds how long a holder that stopped
    /// answering holds up writes, and how long a new master waits for members it cannot
    /// reach.
    pub lease_time: Duration,
    /// ε, the bound on clock rate error (the election's): a holder believes its lease for
    /// `L · (1 - ε) / (1 + ε) - safety_margin` from the moment it sent its ask.
    pub drift_bound: f64,
    /// Taken off the holder's belief after the drift correction (timer rounding).
    pub safety_margin: Duration,
    /// Whether learners get read leases too (voters always do).
    pub learners: bool,
    /// A member that left a slot unreceived this long after it was first sent gets no
    /// renewal: a holder that asks but does not receive holds writes up for less than
    /// this plus one lease time (R8).
    pub receipt_grace: Duration,
}

impl ReadLeaseConfig {
    /// Read leases of `lease_time` under drift bound `drift_bound`, voters only.
    pub fn new(lease_time: Duration, drift_bound: f64) -> Self {
        ReadLeaseConfig {
            grant: true,
            lease_time,
            drift_bound,
            safety_margin: Duration::from_millis(1),
            learners: false,
            receipt_grace: lease_time / 2,
        }
    }

    /// How long a holder believes a lease of `granted` (the master's L), counted by its own
    /// clock from its ask: the holder's clock may run slow (1-ε) and the master's fast
    /// (1+ε), so `granted · (1-ε)/(1+ε)` of the holder's time ends, in real time, before the
    /// master's `granted` from the ask's arrival ends (the election's holder rule).
    pub fn holder_validity(&self, granted: Duration) -> Duration {
        let eps = self.drift_bound.clamp(0.0, 0.5);
        let scaled = granted.as_secs_f64() * (1.0 - eps) / (1.0 + eps);
        Duration::from_secs_f64(scaled.max(0.0)).saturating_sub(self.safety_margin)
    }
}

/// The master's side: until when, by its clock, each node may believe a read lease.
#[derive(Debug, Default)]
pub(super) struct Grants {
    /// Per node: the end of the latest lease granted (arrival of its ask + L).
    views: BTreeMap<NodeId, Instant>,
    /// Per node: the incarnation its latest lease went to. A receipt sent by another run of
    /// the node may describe an acceptor its restart emptied, so it counts for nothing.
    incarnations: BTreeMap<NodeId, u32>,
    /// Nodes that may hold a lease from an earlier master (R6) besides the members of the
    /// configuration in force when a slot is checked: the members at the takeover and of the
    /// configurations it recovered. Presumed until `presumed_until`.
    presumed: BTreeSet<NodeId>,
    /// Nodes that accepted (or asked, or received) in `presumed_ballot`: no earlier
    /// master's lease is valid there any more.
    cleared: BTreeSet<NodeId>,
    presumed_ballot: Option<LogBallot>,
    presumed_until: Option<Instant>,
}

impl Grants {
    /// A new tenure under `ballot` began: every node in `nodes`, and every member of any
    /// configuration in force until `until`, may still hold a lease an earlier master
    /// granted, until `until` (the takeover plus one lease time).
    pub(super) fn presume(&mut self, ballot: LogBallot, nodes: impl IntoIterator<Item = NodeId>, until: Instant) {
        self.presumed = nodes.into_iter().collect();
        self.cleared.clear();
        self.presumed_ballot = Some(ballot);
        self.presumed_until = Some(until);
    }

    /// More nodes that may hold an earlier master's lease (members of a configuration this
    /// master recovered while taking over), with the same deadline.
    pub(super) fn presume_more(&mut self, ballot: LogBallot, nodes: impl IntoIterator<Item = NodeId>) {
        if self.presumed_ballot == Some(ballot) {
            self.presumed.extend(nodes);
        }
    }

    /// `node` accepted, asked or received in `ballot`: it has seen it, so no earlier
    /// master's lease is valid there any more (R5).
    pub(super) fn accepted_in(&mut self, node: NodeId, ballot: LogBallot) {
        if self.presumed_ballot == Some(ballot) {
            self.cleared.insert(node);
        }
    }

    /// Grants `node`, in its run `incarnation`, a lease ending at `until` (master clock).
    /// True when the lease goes to another run of the node than the last one: the caller
    /// forgets the receipts the earlier run sent.
    pub(super) fn grant(&mut self, node: NodeId, incarnation: u32, until: Instant) -> bool {
        let view = self.views.entry(node).or_insert(until);
        *view = (*view).max(until);
        self.incarnations.insert(node, incarnation) != Some(incarnation)
    }

    /// Whether a receipt from `node`'s run `incarnation` counts: that run holds the lease.
    pub(super) fn receipt_counts(&self, node: NodeId, incarnation: u32) -> bool {
        self.incarnations.get(&node) == Some(&incarnation)
    }

    /// Whether the takeover's presumption still runs at `now`.
    pub(super) fn presuming(&self, now: Instant) -> bool {
        self.presumed_until.is_some_and(|until| now < until)
    }

    /// Whether every node a slot must be had by at `now` before it is chosen has it
    /// (`has`): every node whose lease may be valid, granted or presumed. `in_force` gives
    /// the members of the configuration in force that may hold a lease; it is asked for
    /// only while the presumption runs. `me` is never waited for.
    pub(super) fn all_have(
        &self,
        now: Instant,
        me: NodeId,
        in_force: impl FnOnce() -> Vec<NodeId>,
        has: impl Fn(NodeId) -> bool,
    ) -> bool {
        let waited_for = |node: &NodeId| *node != me;
        let granted = self.views.iter().filter(|(_, until)| now < **until).map(|(node, _)| *node);
        if !granted.filter(waited_for).all(&has) {
            return false;
        }
        if !self.presuming(now) {
            return true;
        }
        let presumed = |node: &NodeId| waited_for(node) && !self.cleared.contains(node);
        self.presumed.iter().copied().filter(presumed).all(&has) && in_force().into_iter().filter(presumed).all(&has)
    }

    /// The next instant a holder's lease ends (when a slot waiting for it may be chosen);
    /// leases already ended count until [`Self::prune`] forgets them.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.views.values().copied().chain(self.presumed_until).min()
    }

    /// Forgets leases that ended (bounded state).
    pub(super) fn prune(&mut self, now: Instant) {
        self.views.retain(|_, until| now < *until);
        let views = &self.views;
        self.incarnations.retain(|node, _| views.contains_key(node));
        if self.presumed_until.is_some_and(|until| until <= now) {
            self.presumed.clear();
            self.cleared.clear();
            self.presumed_until = None;
        }
    }
}

/// One grant as its holder believes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HeldGrant {
    /// The master's ballot: any higher ballot seen ends the lease (R5).
    pub(super) ballot: LogBallot,
    /// Until when, by this node's clock.
    pub(super) until: Instant,
    /// The highest slot the master had chosen when it granted: applied first (R3).
    pub(super) through: Slot,
}

/// The holder's side: asks in flight and the lease held.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// The latest asks: sequence number and when the timer started (before sending).
    asks: VecDeque<(u64, Instant)>,
    next_seq: u64,
    last_ask: Option<Instant>,
    grant: Option<HeldGrant>,
}

/// Asks remembered: a grant answers one of the latest few (older ones are lost anyway).
const ASKS_KEPT: usize = 8;

impl Held {
    /// Whether an ask is due at `now` (at most one per `every`).
    pub(super) fn ask_due(&self, now: Instant, every: Duration) -> bool {
        self.last_ask.is_none_or(|last| last.saturating_add(every) <= now)
    }

    /// Records an ask sent at `now` (the timer starts before it leaves) and returns its
    /// sequence number.
    pub(super) fn ask(&mut self, now: Instant) -> u64 {
        self.next_seq += 1;
        if self.asks.len() == ASKS_KEPT {
            self.asks.pop_front();
        }
        self.asks.push_back((self.next_seq, now));
        self.last_ask = Some(now);
        self.next_seq
    }

    /// A grant for ask `seq` under `ballot`, believed for `validity` from the ask's start;
    /// false if it answers no ask of ours.
    pub(super) fn granted(&mut self, seq: u64, ballot: LogBallot, validity: Duration, through: Slot) -> bool {
        let Some(&(_, sent)) = self.asks.iter().find(|(s, _)| *s == seq) else { return false };
        let until = sent.saturating_add(validity);
        self.grant = Some(match self.grant {
            Some(held) if held.ballot == ballot => {
                HeldGrant { ballot, until: held.until.max(until), through: held.through.max(through) }
            }
            _ => HeldGrant { ballot, until, through },
        });
        true
    }

    /// The lease held, if any (validity is the caller's to judge).
    pub(super) fn grant(&self) -> Option<HeldGrant> {
        self.grant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_holder_believes_less_than_the_master_waits_at_any_rates_within_the_bound() {
        let config = ReadLeaseConfig::new(Duration::from_millis(250), 0.05);
        let validity = config.holder_validity(config.lease_time);
        // Holder clock slow (1-ε), master fast (1+ε): the holder's belief in real time
        // ends before the master's view does, even with the ask arriving at once.
        let holder_real = validity.as_secs_f64() / (1.0 - config.drift_bound);
        let master_real = config.lease_time.as_secs_f64() / (1.0 + config.drift_bound);
        assert!(holder_real < master_real, "{holder_real} < {master_real}");
    }

    #[test]
    fn a_grant_counts_from_its_ask_and_only_answers_asks_made() {
        let mut held = Held::default();
        let ballot = LogBallot { round: 3, node: NodeId(1) };
        let seq = held.ask(at(100));
        assert!(!held.granted(seq + 1, ballot, Duration::from_millis(200), 4), "no such ask");
        assert!(held.granted(seq, ballot, Duration::from_millis(200), 4));
        assert_eq!(held.grant().map(|g| (g.until, g.through)), Some((at(300), 4)));
        let later = held.ask(at(150));
        assert!(held.granted(later, ballot, Duration::from_millis(200), 6));
        assert_eq!(held.grant().map(|g| (g.until, g.through)), Some((at(350), 6)));
        let newer = LogBallot { round: 4, node: NodeId(2) };
        assert!(held.granted(later, newer, Duration::from_millis(100), 1));
        assert_eq!(
            held.grant().map(|g| (g.ballot, g.until, g.through)),
            Some((newer, at(250), 1)),
            "a new ballot starts over"
        );
    }

    #[test]
    fn a_slot_waits_for_every_holder_and_presumed_node_until_their_leases_end() {
        let me = NodeId(1);
        let mut grants = Grants::default();
        let ballot = LogBallot { round: 5, node: me };
        grants.presume(ballot, [NodeId(2), NodeId(3)], at(250));
        let acks: BTreeSet<NodeId> = [NodeId(1), NodeId(2)].into();
        let none = Vec::new;
        let all_received = |grants: &Grants, now| grants.all_have(now, me, none, |node| acks.contains(&node));
        assert!(!all_received(&grants, at(10)), "node 3 may hold an earlier master's lease");
        grants.accepted_in(NodeId(3), LogBallot { round: 4, node: NodeId(3) });
        assert!(!all_received(&grants, at(10)), "an older ballot clears nothing");
        grants.accepted_in(NodeId(3), ballot);
        assert!(all_received(&grants, at(10)));
        assert!(
            !grants.all_have(at(10), me, || vec![NodeId(1), NodeId(4)], |node| acks.contains(&node)),
            "a member of the configuration in force now is presumed too"
        );
        assert!(grants.grant(NodeId(3), 7, at(300)), "a first grant to node 3's run 7");
        assert!(!grants.grant(NodeId(3), 7, at(300)), "the same run again");
        assert!(grants.receipt_counts(NodeId(3), 7) && !grants.receipt_counts(NodeId(3), 6));
        assert!(!all_received(&grants, at(299)), "granted to node 3");
        assert_eq!(grants.next_expiry(), Some(at(250)));
        assert!(all_received(&grants, at(300)), "its lease ended");
        grants.prune(at(300));
        assert!(!grants.receipt_counts(NodeId(3), 7), "forgotten with its lease");
        grants.presume(ballot, [NodeId(4)], at(400));
        assert!(!all_received(&grants, at(399)));
        assert!(all_received(&grants, at(400)));
    }
}
