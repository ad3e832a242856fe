//! The master side of a replica: phase 1 on taking over, then batched and pipelined phase 2,
//! and the lease tracker's expiries.

use super::config::LogBreakage;
use super::message::LogMessage;
use super::replica::Replica;
use super::request::{Completion, RequestError};
use super::types::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, Slot};
use crate::command::Command;
use crate::membership::Membership;
use crate::storage::Storage;
use leasekv_lease::{Instant, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What this replica is doing about the log.
#[derive(Debug, Default)]
pub(super) enum Role {
    /// Not master: accept, learn, apply.
    #[default]
    Follower,
    /// Master, running phase 1.
    Candidate(Candidate),
    /// Master, phase 1 done: proposing.
    Leader(Leader),
}

/// Phase 1 in progress.
#[derive(Debug)]
pub(super) struct Candidate {
    ballot: LogBallot,
    promises: BTreeMap<NodeId, PromiseInfo>,
    queue: VecDeque<Proposal>,
}

/// What one acceptor promised.
#[derive(Debug)]
pub(super) struct PromiseInfo {
    slots: Vec<(Slot, AcceptedSlot)>,
    commit: Slot,
    compacted: Slot,
}

/// Phase 2: the steady state.
#[derive(Debug)]
pub(super) struct Leader {
    ballot: LogBallot,
    next_slot: Slot,
    inflight: BTreeMap<Slot, Inflight>,
    queue: VecDeque<Proposal>,
    /// The barrier slot; linearizable reads and the lease tracker wait until it is applied.
    barrier: Slot,
    ready: bool,
    /// LeaseExpire proposals of this tenure not yet applied (bounds the expiry backlog).
    pending_expiries: BTreeSet<ProposalId>,
    commit_sent: Slot,
    /// The slot of a membership change proposed and not yet applied: nothing is proposed
    /// after it until then (docs/membership.md, rule 3).
    change_pending: Option<Slot>,
    /// Phase 1 found a membership change accepted at this slot: once it is applied, phase 1
    /// runs again for the slots after it, with a majority of the configuration it made.
    rephase_after: Option<Slot>,
    /// How far each node that acknowledged an accept of this tenure had applied the log (a
    /// learner must be nearly caught up before it is promoted).
    progress: BTreeMap<NodeId, Slot>,
}

impl Candidate {
    /// Phase 1 under `ballot`, nothing promised or queued yet.
    fn new(ballot: LogBallot) -> Self {
        Candidate { ballot, promises: BTreeMap::new(), queue: VecDeque::new() }
    }

    /// Whether phase 1 can end with this node's log at `commit`: a quorum of `config`'s
    /// voters promised, and a quorum of them still hold every slot above `commit`. Promisers
    /// that compacted slots we lack cannot report them; any quorum of those that did not is
    /// enough (each chosen slot has an acceptor in it); otherwise we must first catch up.
    /// Learners' promises are kept (their reports are safe to use) but never count.
    fn can_finish(&self, config: &Membership, commit: Slot, count_learners: bool) -> bool {
        let counts = |id: &NodeId| count_learners && config.get(*id).is_some() || config.is_voter(*id);
        let promised = self.promises.keys().filter(|id| counts(id)).count();
        let complete = self.promises.iter().filter(|(id, p)| counts(id) && p.compacted <= commit).count();
        promised >= config.quorum() && complete >= config.quorum()
    }

    /// Ends phase 1: the leader, proposing after the highest slot any promiser reported,
    /// and for each slot above `commit` the value it must re-propose there (a value known
    /// chosen, else the one accepted in the highest ballot).
    fn finish(self, commit: Slot) -> (Leader, BTreeMap<Slot, Entry>) {
        let mut values: BTreeMap<Slot, (bool, LogBallot, Entry)> = BTreeMap::new();
        for promise in self.promises.into_values() {
            for (slot, accepted) in promise.slots {
                if slot <= commit {
                    continue;
                }
                let better = match values.get(&slot) {
                    None => true,
                    Some((chosen, best, _)) => !chosen && (accepted.chosen || accepted.ballot > *best),
                };
                if better {
                    values.insert(slot, (accepted.chosen, accepted.ballot, accepted.entry));
                }
            }
        }
        let last = values.keys().next_back().copied().unwrap_or(commit);
        let leader = Leader::new(self.ballot, last + 1, self.queue, commit);
        (leader, values.into_iter().map(|(slot, (_, _, entry))| (slot, entry)).collect())
    }
}

impl Leader {
    /// Phase 2 under `ballot`, proposing from `next_slot` on with the requests `queue`d while
    /// phase 1 ran; `commit` is already known to every follower that promised.
    fn new(ballot: LogBallot, next_slot: Slot, queue: VecDeque<Proposal>, commit: Slot) -> Self {
        Leader {
            ballot,
            next_slot,
            inflight: BTreeMap::new(),
            queue,
            barrier: 0,
            ready: false,
            pending_expiries: BTreeSet::new(),
            commit_sent: commit,
            change_pending: None,
            rephase_after: None,
            progress: BTreeMap::new(),
        }
    }
}

/// A proposed slot waiting for a quorum.
#[derive(Debug)]
pub(super) struct Inflight {
    entry: Entry,
    acks: BTreeSet<NodeId>,
    /// Read-lease holders that have the slot, synced or not (`ReadLeaseReceived`).
    received: BTreeSet<NodeId>,
    sent: Instant,
    /// When it was first sent (`sent` moves with every resend): how long a member has
    /// left it unacknowledged.
    first_sent: Instant,
}

impl Leader {
    /// The ballot this leader proposes under.
    pub(super) fn ballot(&self) -> LogBallot {
        self.ballot
    }

    /// The slots proposed and not yet chosen, in order.
    pub(super) fn inflight_slots(&self) -> Vec<Slot> {
        self.inflight.keys().copied().collect()
    }

    /// Whether any slot is proposed and not yet chosen.
    pub(super) fn has_inflight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Whether `node` has left a slot unacknowledged for `grace` or more since it was first
    /// sent: it gets no read lease (it would hold up the slot for a whole lease time).
    pub(super) fn lags(&self, now: Instant, node: NodeId, grace: std::time::Duration) -> bool {
        self.inflight.values().any(|i| i.first_sent.saturating_add(grace) <= now && !i.has(node))
    }

    /// Forgets what `node` said it received (a new run of it holds the lease now).
    pub(super) fn forget_receipts(&mut self, node: NodeId) {
        for inflight in self.inflight.values_mut() {
            inflight.received.remove(&node);
        }
    }

    /// Notes that read-lease holder `node` has the in-flight `slot`; false if the slot is
    /// not in flight.
    pub(super) fn received(&mut self, slot: Slot, node: NodeId) -> bool {
        match self.inflight.get_mut(&slot) {
            Some(inflight) => {
                inflight.received.insert(node);
                true
            }
            None => false,
        }
    }
}

impl Inflight {
    /// Whether `node` has the slot: it accepted it (durably) or, as a read-lease holder,
    /// received it.
    fn has(&self, node: NodeId) -> bool {
        self.acks.contains(&node) || self.received.contains(&node)
    }
}

impl Role {
    pub(super) fn is_ready(&self) -> bool {
        matches!(self, Role::Leader(l) if l.ready)
    }

    /// Proposals waiting in the queue (not yet in any slot).
    pub(super) fn queued_ids(&self) -> BTreeSet<ProposalId> {
        let queue = match self {
            Role::Candidate(c) => &c.queue,
            Role::Leader(l) => &l.queue,
            Role::Follower => return BTreeSet::new(),
        };
        queue.iter().map(|p| p.id).collect()
    }

    /// Leaves the role: the proposals still queued (never proposed) and those proposed in
    /// slots not yet chosen.
    fn into_pending(self) -> (Vec<Proposal>, Vec<Proposal>) {
        match self {
            Role::Follower => (Vec::new(), Vec::new()),
            Role::Candidate(c) => (c.queue.into(), Vec::new()),
            Role::Leader(l) => (l.queue.into(), l.inflight.into_values().flat_map(|i| i.entry.proposals).collect()),
        }
    }

    /// The proposal `id` was applied: a leader's expiry backlog no longer counts it.
    pub(super) fn applied(&mut self, id: ProposalId) {
        if let Role::Leader(leader) = self {
            leader.pending_expiries.remove(&id);
        }
    }

    /// Slot `slot` was applied. If it is this leader's barrier, the leader is ready (it has
    /// taken over the log): returns its ballot round, once.
    pub(super) fn slot_applied(&mut self, slot: Slot) -> Option<u64> {
        let Role::Leader(leader) = self else { return None };
        if leader.ready || leader.barrier != slot {
            return None;
        }
        leader.ready = true;
        Some(leader.ballot.round)
    }

    /// Whether a membership change is queued, proposed or being recovered and not applied.
    pub(super) fn change_in_flight(&self) -> bool {
        let queued = |queue: &VecDeque<Proposal>| queue.iter().any(|p| matches!(p.command, Command::ChangeMembers(_)));
        match self {
            Role::Follower => false,
            Role::Candidate(c) => queued(&c.queue),
            Role::Leader(l) => l.change_pending.is_some() || l.rephase_after.is_some() || queued(&l.queue),
        }
    }

    /// How far `node` had applied the log when it last acknowledged an accept of this
    /// leader's tenure.
    pub(super) fn progress_of(&self, node: NodeId) -> Option<Slot> {
        match self {
            Role::Leader(l) => l.progress.get(&node).copied(),
            _ => None,
        }
    }

    pub(super) fn enqueue(&mut self, proposal: Proposal) {
        match self {
            Role::Candidate(c) => c.queue.push_back(proposal),
            Role::Leader(l) => l.queue.push_back(proposal),
            Role::Follower => debug_assert!(false, "proposals are only admitted on the master"),
        }
    }
}

impl<S: Storage> Replica<S> {
    fn next_ballot(&self) -> Option<LogBallot> {
        self.acceptor.next_ballot(self.me)
    }

    /// This node's ballot while it takes over or leads.
    fn own_ballot(&self) -> Option<LogBallot> {
        match &self.role {
            Role::Candidate(c) => Some(c.ballot),
            Role::Leader(l) => Some(l.ballot),
            Role::Follower => None,
        }
    }

    /// Another proposer got further: stop leading with the lower ballot at once (so that
    /// this node never announces, under its own ballot, commits it learned from a higher
    /// one), and take over again at the next tick if the election still says so.
    pub(super) fn yield_to(&mut self, now: Instant, ballot: LogBallot) {
        self.note_ballot(ballot);
        if self.own_ballot().is_some_and(|mine| ballot > mine) {
            tracing::debug!(node = %self.me, "higher log ballot seen; taking over again");
            self.step_down();
            self.schedule_tick(now);
        }
    }

    /// A leader learned chosen slots it did not propose: another proposer is active.
    pub(super) fn yield_if_leading(&mut self, now: Instant) {
        if matches!(self.role, Role::Leader(_)) {
            self.step_down();
            self.schedule_tick(now);
        }
    }

    /// The election made this node master: take over the log.
    pub(super) fn start_leading(&mut self, now: Instant) {
        if !self.membership().is_voter(self.me) || self.removed().is_some() {
            // Only the election's bug could make a learner or a removed node master; it
            // must not lead a log whose quorums it is not part of.
            tracing::warn!(node = %self.me, "not a voter of the configuration in force; not taking over the log");
            return;
        }
        let Some(ballot) = self.next_ballot() else {
            tracing::error!(node = %self.me, "no log ballot left above the highest promised; not taking over the log");
            return;
        };
        // Promise our own ballot durably before anyone hears of it: a node that crashed
        // before this sync would otherwise compute the same ballot after restarting and
        // could propose two values in one ballot.
        if !self.promise(ballot) {
            return;
        }
        tracing::debug!(node = %self.me, round = ballot.round, "taking over the log");
        if let Some(reads) = &self.config.read_leases {
            if !self.config.broken(LogBreakage::NoTakeoverWait) {
                // Rule R6: an earlier master may have granted any member a read lease that
                // still runs; each counts as a holder until it accepts in this ballot, or for
                // one lease time (every such grant was made before this takeover). The
                // members of whatever configuration is in force meanwhile count too.
                let members = self.lease_eligible(self.membership());
                self.grants.presume(ballot, members, now.saturating_add(reads.lease_time));
            }
        }
        if self.config.broken(LogBreakage::SkipPhase1) {
            self.role =
                Role::Leader(Leader::new(ballot, self.learner.commit() + 1, VecDeque::new(), self.learner.commit()));
            self.propose_barrier(now);
        } else {
            self.role = Role::Candidate(Candidate::new(ballot));
            self.send_prepares(ballot);
        }
        self.schedule_tick(now);
    }

    fn send_prepares(&mut self, ballot: LogBallot) {
        for to in self.peers() {
            self.send_durable(to, LogMessage::Prepare { ballot, from: self.learner.commit() + 1 });
        }
    }

    pub(super) fn on_promise(
        &mut self,
        now: Instant,
        from: NodeId,
        ballot: LogBallot,
        slots: Vec<(Slot, AcceptedSlot)>,
        commit: Slot,
        compacted: Slot,
    ) {
        let Role::Candidate(candidate) = &mut self.role else { return };
        if candidate.ballot != ballot {
            return;
        }
        candidate.promises.insert(from, PromiseInfo { slots, commit, compacted });
        if compacted > self.learner.commit() || commit > self.learner.commit() + self.config.max_fetch_entries as u64 {
            // That acceptor has chosen slots we lack and may no longer report them.
            self.request_fetch(now, from);
        }
        self.try_finish_phase1(now);
    }

    /// Ends phase 1 once a quorum promised and this node holds every slot some promiser
    /// compacted away; re-proposes what was accepted, then a barrier.
    ///
    /// The slots after a membership change belong to the configuration it makes (rule 3): if
    /// a promise reveals one, only the slots through it are re-proposed now, and phase 1
    /// runs again for the later ones once it is applied, with that configuration's majority.
    pub(super) fn try_finish_phase1(&mut self, now: Instant) {
        let commit = self.learner.commit();
        let count_learners = self.config.broken(LogBreakage::LearnerCounted);
        let config = self.membership().clone();
        if !matches!(&self.role, Role::Candidate(c) if c.can_finish(&config, commit, count_learners)) {
            return;
        }
        let Role::Candidate(candidate) = std::mem::take(&mut self.role) else { return };
        let (mut leader, mut values) = candidate.finish(commit);
        // Members of a configuration recovered here, which this node has not applied, may
        // hold an earlier master's read lease too (rule R6).
        let mut recovered = config.clone();
        for entry in values.values() {
            for proposal in &entry.proposals {
                if let Command::ChangeMembers(change) = &proposal.command {
                    if let Ok((next, _)) = recovered.after(change) {
                        recovered = next;
                        let members = self.lease_eligible(&recovered);
                        self.grants.presume_more(leader.ballot, members);
                    }
                }
            }
        }
        let change_at = values.iter().find(|(_, entry)| entry.changes_members()).map(|(slot, _)| *slot);
        if let Some(change) = change_at {
            leader.next_slot = change + 1;
            leader.change_pending = Some(change);
            leader.rephase_after = Some(change);
        }
        let last = leader.next_slot - 1;
        self.role = Role::Leader(leader);
        for slot in commit + 1..=last {
            // Holes nobody accepted anything in become no-ops.
            let entry = values.remove(&slot).unwrap_or_default();
            self.propose_slot(now, slot, entry);
        }
        if change_at.is_none() {
            self.propose_barrier(now);
        }
        self.fill_pipeline(now);
    }

    /// A slot holding a membership change was applied: the configuration it made is in
    /// force. The leader may propose again (rule 3), after running phase 1 anew if the change
    /// was one it recovered; a master that is no longer a voter leaves the log.
    pub(super) fn on_applied_change(&mut self, now: Instant, slot: Slot) {
        let membership = self.membership().clone();
        tracing::info!(
            node = %self.me, epoch = membership.epoch, slot,
            voters = ?membership.voters(), learners = ?membership.learners(),
            "membership changed"
        );
        if !membership.is_voter(self.me) {
            if !matches!(self.role, Role::Follower) {
                tracing::info!(node = %self.me, "no longer a voter; leaving the log to the others");
                // Tell the others the change is chosen while this node still leads: they
                // follow the new configuration only once they know.
                self.announce_commit();
                self.step_down();
            }
            return;
        }
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.change_pending == Some(slot) {
            leader.change_pending = None;
        }
        if leader.rephase_after == Some(slot) {
            let ballot = leader.ballot;
            let queue = std::mem::take(&mut leader.queue);
            let mut candidate = Candidate::new(ballot);
            candidate.queue = queue;
            self.role = Role::Candidate(candidate);
            self.send_prepares(ballot);
            self.schedule_tick(now);
            return;
        }
        self.fill_pipeline(now);
    }

    fn propose_barrier(&mut self, now: Instant) {
        let id = self.next_proposal_id();
        let Role::Leader(leader) = &mut self.role else { return };
        let ballot = leader.ballot;
        let slot = leader.next_slot;
        leader.next_slot += 1;
        leader.barrier = slot;
        self.propose_slot(
            now,
            slot,
            Entry {
                proposals: vec![Proposal { id, command: Command::Barrier { tenure: (ballot.round, ballot.node.0) } }],
            },
        );
    }

    fn propose_slot(&mut self, now: Instant, slot: Slot, entry: Entry) {
        let commit = self.learner.commit();
        let Role::Leader(leader) = &mut self.role else { return };
        let ballot = leader.ballot;
        leader.inflight.insert(
            slot,
            Inflight {
                entry: entry.clone(),
                acks: BTreeSet::new(),
                received: BTreeSet::new(),
                sent: now,
                first_sent: now,
            },
        );
        self.broadcast(LogMessage::Accept { ballot, slot, entry, commit });
    }

    /// Proposes an empty slot, if nothing else is in flight: every member acknowledges it and
    /// reports how far it has applied the log (see `Role::progress_of`).
    pub(super) fn probe_progress(&mut self, now: Instant) {
        let Role::Leader(leader) = &mut self.role else { return };
        if !leader.ready || !leader.inflight.is_empty() || !leader.queue.is_empty() || leader.change_pending.is_some() {
            return;
        }
        let slot = leader.next_slot;
        leader.next_slot += 1;
        self.propose_slot(now, slot, Entry::default());
        self.drain_local(now);
    }

    /// Moves queued proposals into new slots while the pipeline has room.
    pub(super) fn fill_pipeline(&mut self, now: Instant) {
        loop {
            let Role::Leader(leader) = &mut self.role else { return };
            if leader.inflight.len() >= self.config.max_inflight_slots
                || leader.queue.is_empty()
                || leader.change_pending.is_some()
            {
                return;
            }
            let mut entry = Entry::default();
            let mut bytes = 0usize;
            while let Some(next) = leader.queue.front() {
                // A membership change goes alone in its slot, and ends the proposing until
                // it is applied (rule 3).
                let is_change = matches!(next.command, Command::ChangeMembers(_));
                if is_change && !entry.proposals.is_empty() {
                    break;
                }
                if is_change {
                    if let Some(proposal) = leader.queue.pop_front() {
                        entry.proposals.push(proposal);
                    }
                    leader.change_pending = Some(leader.next_slot);
                    break;
                }
                let size = command_size(&next.command);
                if !entry.proposals.is_empty()
                    && (entry.proposals.len() >= self.config.max_batch_commands
                        || bytes + size > self.config.max_batch_bytes)
                {
                    break;
                }
                bytes += size;
                if let Some(proposal) = leader.queue.pop_front() {
                    entry.proposals.push(proposal);
                }
            }
            let slot = leader.next_slot;
            leader.next_slot += 1;
            self.propose_slot(now, slot, entry);
        }
    }

    pub(super) fn on_accepted(&mut self, now: Instant, from: NodeId, ballot: LogBallot, slot: Slot, applied: Slot) {
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.ballot != ballot {
            return;
        }
        self.grants.accepted_in(from, ballot);
        let progress = leader.progress.entry(from).or_default();
        *progress = (*progress).max(applied);
        let Some(inflight) = leader.inflight.get_mut(&slot) else { return };
        inflight.acks.insert(from);
        if self.may_choose(now, slot) {
            self.choose(now, slot);
        }
    }

    /// Whether the in-flight `slot` may be chosen at `now`: a quorum of the configuration in
    /// force accepted it in this ballot, and so did every node whose read lease may be
    /// valid (rule R2 of docs/read-leases.md: no write becomes visible anywhere before
    /// every holder received it).
    pub(super) fn may_choose(&self, now: Instant, slot: Slot) -> bool {
        // Borrowed, not cloned: this runs for every acknowledgement of every slot.
        let config = super::replica::in_force(&self.learner, &self.seed);
        let Role::Leader(leader) = &self.role else { return false };
        let Some(inflight) = leader.inflight.get(&slot) else { return false };
        let quorum = match self.config.broken(LogBreakage::LearnerCounted) {
            // The negative control: every member's ack counts, learners' too.
            true => inflight.acks.iter().filter(|id| config.get(**id).is_some()).count() >= config.quorum(),
            false => config.is_quorum(&inflight.acks),
        };
        quorum
            && (self.config.broken(LogBreakage::AckWithoutHolder)
                || self.grants.all_have(now, self.me, || self.lease_eligible(config), |node| inflight.has(node)))
    }

    /// The members of `config` that may hold a read lease: its voters, and its learners
    /// too where learners get them.
    pub(super) fn lease_eligible(&self, config: &Membership) -> Vec<NodeId> {
        match self.config.read_leases.as_ref().is_some_and(|reads| reads.learners) {
            true => config.ids(),
            false => config.voters(),
        }
    }

    /// Stores the in-flight `slot` as chosen and applies what that allows.
    pub(super) fn choose(&mut self, now: Instant, slot: Slot) {
        let Role::Leader(leader) = &mut self.role else { return };
        let ballot = leader.ballot;
        let Some(done) = leader.inflight.remove(&slot) else { return };
        if slot <= self.learner.compacted() {
            return;
        }
        // Chosen: a quorum accepted it in this ballot. If this node's own acceptor does not
        // hold it (its accept is still unsynced, or it promised a higher ballot), store the
        // chosen value first: the commit index written next must never cover a slot whose
        // stored value is not the chosen one.
        let own_matches = self.acceptor.slot(slot).is_some_and(|s| s.ballot == ballot);
        let chosen = AcceptedSlot { ballot, entry: done.entry, chosen: true };
        if own_matches {
            self.acceptor.hold(slot, chosen);
        } else {
            let result = self.acceptor.store(slot, chosen, &mut self.storage);
            if !self.persist(result) {
                return;
            }
        }
        self.advance_commit();
        self.apply_chosen(now);
        self.fill_pipeline(now);
    }

    pub(super) fn on_reject(&mut self, now: Instant, ballot: LogBallot, promised: LogBallot) {
        // Only a rejection of the ballot this node is using now says anything about it; an
        // older one's rejection still tells us how far the others got.
        if self.own_ballot() == Some(ballot) {
            self.yield_to(now, promised);
        } else {
            self.note_ballot(promised);
        }
    }

    /// Leaves the master role: queued requests fail as "not master" (never proposed);
    /// proposed ones as "indeterminate" (they may still be chosen).
    pub(super) fn step_down(&mut self) {
        let hint = self.master_hint.filter(|h| *h != self.me);
        let (queued, proposed) = std::mem::take(&mut self.role).into_pending();
        for proposal in queued {
            if self.awaiting.remove(&proposal.id) {
                self.outbox.complete(Completion { id: proposal.id, result: Err(RequestError::NotMaster { hint }) });
            }
        }
        for proposal in proposed {
            if self.awaiting.remove(&proposal.id) {
                self.outbox.complete(Completion { id: proposal.id, result: Err(RequestError::Indeterminate { hint }) });
            }
        }
        if !self.config.broken(LogBreakage::DeposedExpiry) && self.lessor.is_running() {
            self.lessor.stop();
        }
    }

    pub(super) fn on_tick(&mut self, now: Instant) {
        self.snapshots_sent.retain(|_, sent| now < sent.pinned_until());
        let retry = self.config.retry_interval;
        let commit = self.learner.commit();
        let members = self.membership().ids();
        match &mut self.role {
            Role::Follower => {
                if self.is_master(Some(now)) && self.stopped.is_none() {
                    self.start_leading(now);
                }
                return;
            }
            Role::Candidate(c) => {
                let ballot = c.ballot;
                let missing: Vec<NodeId> = members.iter().copied().filter(|n| !c.promises.contains_key(n)).collect();
                // Phase 1 may be waiting for slots a promiser compacted away; the fetch or its
                // answer may have been lost, so ask again (request_fetch rate-limits itself).
                // Rotate over the promisers that are ahead, so one that died does not stall us.
                let ahead: Vec<NodeId> = c
                    .promises
                    .iter()
                    .filter(|(_, p)| p.compacted.max(p.commit) > commit)
                    .map(|(node, _)| *node)
                    .collect();
                let ahead = (!ahead.is_empty()).then(|| ahead[(now.as_nanos() / 1_000_000) as usize % ahead.len()]);
                for to in missing {
                    self.send_durable(to, LogMessage::Prepare { ballot, from: commit + 1 });
                }
                if let Some(peer) = ahead {
                    self.request_fetch(now, peer);
                }
            }
            Role::Leader(l) => {
                let ballot = l.ballot;
                let mut resend = Vec::new();
                for (slot, inflight) in l.inflight.iter_mut() {
                    if inflight.sent.saturating_add(retry) <= now {
                        inflight.sent = now;
                        for node in members.iter().copied() {
                            if !inflight.acks.contains(&node) {
                                resend.push((node, *slot, inflight.entry.clone()));
                            }
                        }
                    }
                }
                for (to, slot, entry) in resend {
                    self.send(to, LogMessage::Accept { ballot, slot, entry, commit });
                }
                // Heartbeat: idle learners find out how far the log is chosen.
                let peers: Vec<NodeId> = self.peers().into_iter().filter(|p| *p != self.me).collect();
                for to in peers {
                    self.send(to, LogMessage::Commit { ballot, commit });
                }
            }
        }
        self.schedule_tick(now);
    }

    /// Sends the commit index to followers when it moved (once per batch of outputs).
    pub(super) fn announce_commit(&mut self) {
        let commit = self.learner.commit();
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.commit_sent >= commit {
            return;
        }
        leader.commit_sent = commit;
        let ballot = leader.ballot;
        let peers: Vec<NodeId> = self.peers().into_iter().filter(|p| *p != self.me).collect();
        for to in peers {
            self.send(to, LogMessage::Commit { ballot, commit });
        }
    }

    /// The lease tracker's work: propose expiry of leases whose deadline passed, in bounded
    /// batches, only while this node is the ready master.
    pub(super) fn expire_leases(&mut self, now: Instant) {
        if !self.lessor.is_running() {
            return;
        }
        let ready = self.is_ready_master(now);
        if !ready {
            if self.config.broken(LogBreakage::DeposedExpiry) {
                let found = self.lessor.take_expired(now, usize::MAX);
                self.deposed_expiries.extend(found);
            }
            return;
        }
        if !self.deposed_expiries.is_empty() {
            let ids = std::mem::take(&mut self.deposed_expiries);
            self.enqueue_expiry(ids);
        }
        while self.can_queue_expiry() {
            let ids = self.lessor.take_expired(now, self.config.max_expire_batch);
            if ids.is_empty() {
                break;
            }
            self.enqueue_expiry(ids);
        }
        self.fill_pipeline(now);
    }

    /// Whether the expiry backlog has room. When it has none, the lease deadlines are not
    /// a reason to wake up: the next applied expiry makes room and looks again.
    pub(super) fn can_queue_expiry(&self) -> bool {
        match &self.role {
            Role::Leader(leader) => leader.ready && leader.pending_expiries.len() < self.config.max_expire_in_queue,
            // A deposed tracker (only in the deposed-expiry control) collects what it finds.
            _ => self.config.broken(LogBreakage::DeposedExpiry),
        }
    }

    fn enqueue_expiry(&mut self, ids: Vec<crate::types::LeaseId>) {
        tracing::info!(node = %self.me, leases = ids.len(), "expiring a batch of leases");
        let id = self.next_proposal_id();
        let Role::Leader(leader) = &mut self.role else { return };
        leader.pending_expiries.insert(id);
        let tenure = (leader.ballot.round, leader.ballot.node.0);
        // Expiries go to the front: a lease past its deadline must not wait behind a long
        // client queue, and the batch bound keeps each one short.
        leader.queue.push_front(Proposal { id, command: Command::LeaseExpire { ids, tenure } });
        self.counts.expiry_commands += 1;
    }
}

/// Approximate encoded size of a command, for batch limits.
pub(super) fn command_size(command: &Command) -> usize {
    fn op_size(op: &crate::command::TxnOp) -> usize {
        match op {
            crate::command::TxnOp::Range(r) => r.range.key.len() + r.range.range_end.len() + 16,
            crate::command::TxnOp::Put(p) => p.key.len() + p.value.len() + 16,
            crate::command::TxnOp::DeleteRange(d) => d.range.key.len() + d.range.range_end.len() + 8,
            crate::command::TxnOp::PutKeeping(p, _) => p.key.len() + p.value.len() + 18,
            crate::command::TxnOp::Txn(t) => txn_size(t),
            crate::command::TxnOp::RangeAt(r, _) => r.range.key.len() + r.range.range_end.len() + 24,
        }
    }
    fn compare_size(compare: &crate::command::Compare) -> usize {
        let value = match &compare.target {
            crate::command::CompareTarget::Value(v) => v.len(),
            _ => 0,
        };
        compare.range.key.len() + compare.range.range_end.len() + value + 32
    }
    fn txn_size(t: &crate::command::TxnRequest) -> usize {
        let compares: usize = t.compare.iter().map(compare_size).sum();
        compares + t.success.iter().chain(&t.failure).map(op_size).sum::<usize>() + 16
    }
    match command {
        Command::Put(p) => p.key.len() + p.value.len() + 16,
        Command::DeleteRange(d) => d.range.key.len() + d.range.range_end.len() + 8,
        Command::Txn(t) => txn_size(t),
        Command::PutKeeping(p, _) => p.key.len() + p.value.len() + 18,
        Command::LeaseGrant { name, .. } => name.as_ref().map_or(0, |n| n.len()) + 24,
        Command::LeaseRevoke { .. } => 16,
        Command::LeaseExpire { ids, .. } => 8 * ids.len() + 16,
        Command::Barrier { .. } | Command::Compact { .. } | Command::Alarm { .. } => 16,
        Command::ChangeMembers(_) => 256,
        Command::Auth(change) => change.approximate_size(),
        Command::Authorized(authorized) => authorized.user.len() + 16 + command_size(&authorized.command),
    }
}
