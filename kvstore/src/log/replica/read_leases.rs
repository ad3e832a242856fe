//! Read leases in the replica (docs/read-leases.md): the master grants them and holds back
//! each slot until every holder accepted it; a holder asks, believes, and answers
//! linearizable reads from its own state. The state is in `super::super::read_lease`.

use super::*;
use crate::log::leader::Role;
use crate::log::types::LogBallot;

impl<S: Storage> Replica<S> {
    /// Whether read leases may be asked for and granted: the driver says no while a member
    /// runs a build that does not know them (it would neither hold writes back for holders
    /// nor, as a new master, wait for an earlier master's). Leases already held run out;
    /// holding writes back for them and the wait after a takeover go on regardless.
    pub fn set_read_leases_allowed(&mut self, allowed: bool) {
        self.read_leases_allowed = allowed;
    }

    /// A member may hold a read lease: a voter, or a learner where learners are allowed, in
    /// the configuration in force and in every one the changes this node has accepted and
    /// not applied would make. A node stops believing its lease the moment it receives its
    /// own removal, and a master grants none to a node it is removing: a new master that
    /// applied the removal does not count that node as a holder (rule R7).
    fn may_hold_read_lease(&self, node: NodeId) -> bool {
        let Some(reads) = &self.config.read_leases else { return false };
        let eligible =
            |membership: &Membership| membership.is_voter(node) || (reads.learners && membership.get(node).is_some());
        let mut membership = std::borrow::Cow::Borrowed(self.membership());
        if !eligible(&membership) {
            return false;
        }
        for change in self.acceptor.changes_above(self.learner.applied()) {
            match membership.after(change) {
                Ok((next, _)) if eligible(&next) => membership = std::borrow::Cow::Owned(next),
                Ok(_) => return false,
                // A change that would be refused when applied changes nothing.
                Err(_) => {}
            }
        }
        true
    }

    /// The master's commit heartbeat reached this follower: ask it for a read lease, at
    /// most once per quarter of the lease time or retry interval, whichever is shorter
    /// (the heartbeat comes every retry interval, so a lease outlives two lost ones).
    ///
    /// Not while this node is catching up (it applied less than the master announced, by
    /// more than the candidacy's slack) or its last snapshot install failed: it could not
    /// answer a read before catching up anyway (a read waits for `through`, then goes to
    /// the master), and as a holder it would hold every write back for its receipt. A
    /// replaced member installing a 1 GB snapshot held the others' puts to 15–21 % of their
    /// rate that way (`scalebench catch-up`); with no lease it holds nothing up.
    pub(in crate::log) fn ask_read_lease(&mut self, now: Instant, ballot: LogBallot) {
        let Some(reads) = &self.config.read_leases else { return };
        if !reads.grant || !self.read_leases_allowed {
            return;
        }
        let every = (reads.lease_time / 4).min(self.config.retry_interval);
        if !matches!(self.role, Role::Follower)
            || self.stopped.is_some()
            || self.removed().is_some()
            || ballot.node == self.me
            || ballot != self.acceptor.highest_seen()
            || self.candidacy.catching_up(self.learner.applied())
            || !self.held_lease.ask_due(now, every)
            // Last: it reads every slot accepted and not applied, and this runs on each of
            // the master's commits (asked first, it took 6 % of all CPU samples while a
            // member caught up: performance.md).
            || !self.may_hold_read_lease(self.me)
        {
            return;
        }
        // Rule R1: the timer starts before the ask leaves.
        let seq = self.held_lease.ask(now);
        self.send(ballot.node, LogMessage::ReadLeaseAsk { ballot, incarnation: self.incarnation, seq });
    }

    /// A member's ask: granted for L from now by the ready master of `ballot`, unless the
    /// member left a slot unacknowledged for longer than the grace (it would hold writes up).
    pub(in crate::log) fn on_read_lease_ask(
        &mut self,
        now: Instant,
        from: NodeId,
        ballot: LogBallot,
        incarnation: u32,
        seq: u64,
    ) {
        let Some(reads) = self.config.read_leases.clone() else { return };
        let Role::Leader(leader) = &self.role else { return };
        if !reads.grant || !self.read_leases_allowed {
            return;
        }
        if leader.ballot() != ballot || from == self.me || self.require_ready(now).is_err() {
            return;
        }
        // It asked under our ballot: it saw it, so no earlier master's lease holds there.
        self.grants.accepted_in(from, ballot);
        if !self.may_hold_read_lease(from) || leader.lags(now, from, reads.receipt_grace) {
            return;
        }
        if self.grants.grant(from, incarnation, now.saturating_add(reads.lease_time)) {
            // A new run of the node: what its earlier run said it received may be gone.
            if let Role::Leader(leader) = &mut self.role {
                leader.forget_receipts(from);
            }
        }
        let valid_for_nanos = u64::try_from(reads.lease_time.as_nanos()).unwrap_or(u64::MAX);
        // Every slot chosen so far, not only the commit index: a slot chosen above a gap
        // went through the gate before this lease began, and becomes visible once the gap
        // is chosen (rule R3).
        let through = self.acceptor.last_chosen(self.learner.commit());
        self.send(from, LogMessage::ReadLeaseGrant { ballot, incarnation, seq, valid_for_nanos, through });
    }

    /// The master's grant for one of this node's asks.
    pub(in crate::log) fn on_read_lease_grant(
        &mut self,
        from: NodeId,
        ballot: LogBallot,
        incarnation: u32,
        seq: u64,
        valid_for_nanos: u64,
        through: Slot,
    ) {
        let Some(reads) = &self.config.read_leases else { return };
        if incarnation != self.incarnation
            || from != ballot.node
            || ballot != self.acceptor.highest_seen()
            || !matches!(self.role, Role::Follower)
        {
            return;
        }
        let validity = reads.holder_validity(Duration::from_nanos(valid_for_nanos));
        self.held_lease.granted(seq, ballot, validity, through);
    }

    /// This node's read lease, if it may answer linearizable reads under it at `now`: a
    /// follower, not stopped or removed, whose lease has not run out and under whose
    /// ballot no higher one has reached it (rule R5).
    fn valid_read_lease(&self, now: Instant) -> Option<read_lease::HeldGrant> {
        self.config.read_leases.as_ref()?;
        let grant = self.held_lease.grant()?;
        let expired = now >= grant.until && !self.config.broken(LogBreakage::ReadLeaseExpired);
        if expired {
            // Before the membership check, which reads every slot accepted and not applied:
            // an expired grant stays held, and this runs on every turn of the node loop.
            return None;
        }
        let usable = matches!(self.role, Role::Follower)
            && !self.is_master(Some(now))
            && self.stopped.is_none()
            && self.removed().is_none()
            && grant.ballot == self.acceptor.highest_seen()
            && self.may_hold_read_lease(self.me);
        usable.then_some(grant)
    }

    /// The slot this node must have applied before it answers, under its read lease, a
    /// linearizable read arriving at `now`: the highest slot the master had chosen when it
    /// granted (R3) and every slot this node accepted in the lease's ballot (R4). `None` without a valid read lease: the read goes
    /// to the master.
    pub fn read_lease_target(&self, now: Instant) -> Option<Slot> {
        let grant = self.valid_read_lease(now)?;
        let received = match self.config.broken(LogBreakage::ReadThroughPending) {
            true => None,
            false => self.acceptor.last_slot_in(grant.ballot, self.learner.applied()),
        };
        Some(grant.through.max(received.unwrap_or(0)))
    }

    /// Until when this node's read lease lets it answer (its own clock), if it holds one.
    pub fn read_lease_until(&self, now: Instant) -> Option<Instant> {
        self.valid_read_lease(now).map(|grant| grant.until)
    }

    /// Answers a linearizable read under this node's read lease, once it applied `target`
    /// ([`Self::read_lease_target`] when the read arrived); `None` when the lease is no
    /// longer valid or the slot not yet applied (the read then goes to the master).
    pub fn read_under_lease(
        &mut self,
        now: Instant,
        target: Slot,
        request: &RangeRequest,
        revision: Revision,
    ) -> Option<Result<crate::log::ReadJob, RequestError>> {
        self.valid_read_lease(now)?;
        if self.learner.applied() < target {
            return None;
        }
        Some(self.read_job(now, request.clone(), revision, ReadConsistency::Serializable))
    }

    /// A holder's receipt of `slot` (before its sync): it counts for the holder's lease,
    /// not toward a quorum.
    pub(in crate::log) fn on_read_lease_received(
        &mut self,
        now: Instant,
        from: NodeId,
        ballot: LogBallot,
        incarnation: u32,
        slot: Slot,
    ) {
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.ballot() != ballot || !self.grants.receipt_counts(from, incarnation) {
            return;
        }
        // It accepted in our ballot: no earlier master's lease holds there.
        self.grants.accepted_in(from, ballot);
        if leader.received(slot, from) && self.may_choose(now, slot) {
            self.choose(now, slot);
        }
    }

    /// The master's part on a timeout: slots held back for a holder whose lease has since
    /// ended may be chosen now.
    pub(in crate::log) fn choose_held_back(&mut self, now: Instant) {
        self.grants.prune(now);
        let slots = match &self.role {
            Role::Leader(leader) => leader.inflight_slots(),
            _ => return,
        };
        for slot in slots {
            if self.may_choose(now, slot) {
                self.choose(now, slot);
            }
        }
    }

    /// When a slot held back for a read-lease holder may next be chosen.
    /// (Ended leases are pruned on the timeout this asks for.)
    pub(in crate::log) fn next_lease_expiry(&self) -> Option<Instant> {
        match &self.role {
            Role::Leader(leader) if leader.has_inflight() => self.grants.next_expiry(),
            _ => None,
        }
    }
}
