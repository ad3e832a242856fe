//! The acceptor half of a replica: promises and accepts, each made durable before it is
//! acknowledged.

use super::message::LogMessage;
use super::replica::Replica;
use super::types::{AcceptedSlot, Entry, LogBallot, Slot};
use crate::storage::{Storage, StorageError};
use leasekv_lease::{Instant, NodeId};
use std::collections::BTreeMap;

/// One replica's acceptor state: its promise, the slots it accepted (or knows chosen), and
/// the highest ballot it has heard of. Every change that others rely on is written to
/// storage before the caller acknowledges it.
#[derive(Debug)]
pub(super) struct Acceptor {
    promised: LogBallot,
    slots: BTreeMap<Slot, AcceptedSlot>,
    highest_seen: LogBallot,
}

impl Acceptor {
    /// The acceptor as recovered from storage; slots `<= commit` are known chosen (the
    /// commit index is only written after the slots it covers).
    pub(super) fn recovered(promised: LogBallot, mut slots: BTreeMap<Slot, AcceptedSlot>, commit: Slot) -> Self {
        for (slot, accepted) in slots.iter_mut() {
            if *slot <= commit {
                accepted.chosen = true;
            }
        }
        Acceptor { promised, slots, highest_seen: promised }
    }

    /// The ballot this acceptor promised not to go below.
    pub(super) fn promised(&self) -> LogBallot {
        self.promised
    }

    /// The highest ballot promised or heard of (in a prepare, an accept or the master's
    /// commit heartbeat).
    pub(super) fn highest_seen(&self) -> LogBallot {
        self.highest_seen.max(self.promised)
    }

    /// Remembers that `ballot` exists, so that this node's next ballot is above it.
    pub(super) fn note_ballot(&mut self, ballot: LogBallot) {
        if ballot > self.highest_seen {
            self.highest_seen = ballot;
        }
    }

    /// A ballot of node `me` above every ballot this acceptor promised or heard of; `None`
    /// once the rounds are used up (only a corrupted store could get there: peers' ballots
    /// above [`LogBallot::MAX_ROUND`] are dropped on arrival).
    pub(super) fn next_ballot(&self, me: NodeId) -> Option<LogBallot> {
        let round = self.highest_seen.round.max(self.promised.round).checked_add(1)?;
        Some(LogBallot { round, node: me })
    }

    /// Raises the promise to `ballot` (writing it to `storage`) if it is at least the
    /// current one; `Ok(false)` when it is lower.
    pub(super) fn promise(&mut self, ballot: LogBallot, storage: &mut impl Storage) -> Result<bool, StorageError> {
        self.note_ballot(ballot);
        if ballot < self.promised {
            return Ok(false);
        }
        if ballot > self.promised {
            self.promised = ballot;
            storage.save_promise(ballot)?;
        }
        Ok(true)
    }

    /// What this acceptor holds in `slot`.
    pub(super) fn slot(&self, slot: Slot) -> Option<&AcceptedSlot> {
        self.slots.get(&slot)
    }

    /// The highest slot above `above` accepted in `ballot` (a read-lease holder applies
    /// through it before answering).
    pub(super) fn last_slot_in(&self, ballot: LogBallot, above: Slot) -> Option<Slot> {
        self.slots.range(above.saturating_add(1)..).rev().find(|(_, s)| s.ballot == ballot).map(|(slot, _)| *slot)
    }

    /// The highest slot this acceptor knows chosen, at or above `commit` (a master chooses
    /// slots out of order; the commit index covers only those with none missing below).
    pub(super) fn last_chosen(&self, commit: Slot) -> Slot {
        self.slots.range(commit.saturating_add(1)..).rev().find(|(_, s)| s.chosen).map_or(commit, |(slot, _)| *slot)
    }

    /// The membership changes this acceptor holds above `above`, in slot order (a change
    /// goes alone in its slot).
    pub(super) fn changes_above(&self, above: Slot) -> impl Iterator<Item = &crate::membership::MemberChange> {
        self.slots.range(above.saturating_add(1)..).filter_map(|(_, s)| match s.entry.proposals.as_slice() {
            [only] => match &only.command {
                crate::command::Command::ChangeMembers(change) => Some(change),
                _ => None,
            },
            _ => None,
        })
    }

    /// Whether this acceptor knows `slot` is chosen.
    pub(super) fn is_chosen(&self, slot: Slot) -> bool {
        self.slots.get(&slot).is_some_and(|s| s.chosen)
    }

    /// Writes `accepted` into `slot` on `storage`, then holds it.
    pub(super) fn store(
        &mut self,
        slot: Slot,
        accepted: AcceptedSlot,
        storage: &mut impl Storage,
    ) -> Result<(), StorageError> {
        storage.save_slot(slot, &accepted)?;
        self.slots.insert(slot, accepted);
        Ok(())
    }

    /// Holds `accepted` in `slot` without writing it: storage already has this value.
    pub(super) fn hold(&mut self, slot: Slot, accepted: AcceptedSlot) {
        self.slots.insert(slot, accepted);
    }

    /// Marks `slot` chosen if the leader of `ballot` says so and this acceptor holds that
    /// ballot's value (or already knows it chosen); false when the value must be fetched.
    pub(super) fn learn_chosen(&mut self, slot: Slot, ballot: LogBallot) -> bool {
        match self.slots.get_mut(&slot) {
            Some(accepted) if accepted.chosen || accepted.ballot == ballot => {
                accepted.chosen = true;
                true
            }
            _ => false,
        }
    }

    /// The slots from `first` on, as a Promise reports them (those `<= commit` as chosen).
    pub(super) fn report_from(&self, first: Slot, commit: Slot) -> Vec<(Slot, AcceptedSlot)> {
        self.slots
            .range(first.max(1)..)
            .map(|(slot, accepted)| {
                let mut accepted = accepted.clone();
                accepted.chosen |= *slot <= commit;
                (*slot, accepted)
            })
            .collect()
    }

    /// At most `max` chosen entries from `first` through `commit`, for a peer catching up.
    pub(super) fn chosen_entries(&self, first: Slot, commit: Slot, max: usize) -> Vec<(Slot, Entry)> {
        self.slots
            .range(first..=commit.max(first))
            .take_while(|(slot, _)| **slot <= commit)
            .take(max)
            .map(|(slot, accepted)| (*slot, accepted.entry.clone()))
            .collect()
    }

    /// Forgets every slot `<= through` (a snapshot covers them).
    pub(super) fn forget_through(&mut self, through: Slot) {
        self.slots = self.slots.split_off(&(through + 1));
    }
}

impl<S: Storage> Replica<S> {
    pub(super) fn note_ballot(&mut self, ballot: LogBallot) {
        self.acceptor.note_ballot(ballot);
    }

    /// Raises the promise to `ballot` (durably) if it is at least the current one.
    pub(super) fn promise(&mut self, ballot: LogBallot) -> bool {
        let result = self.acceptor.promise(ballot, &mut self.storage);
        match result {
            Ok(promised) => promised,
            Err(e) => {
                self.persist(Err(e));
                false
            }
        }
    }

    pub(super) fn on_prepare(&mut self, now: Instant, from: NodeId, ballot: LogBallot, first: Slot) {
        self.yield_to(now, ballot);
        if !self.promise(ballot) {
            self.send(from, LogMessage::Reject { ballot, promised: self.acceptor.promised() });
            return;
        }
        let commit = self.learner.commit();
        let slots = self.acceptor.report_from(first, commit);
        let reply = LogMessage::Promise { ballot, slots, commit, compacted: self.learner.compacted() };
        self.send_durable(from, reply);
    }

    pub(super) fn on_accept(
        &mut self,
        now: Instant,
        from: NodeId,
        ballot: LogBallot,
        slot: Slot,
        entry: Entry,
        commit: Slot,
    ) {
        self.yield_to(now, ballot);
        if !self.promise(ballot) {
            self.send(from, LogMessage::Reject { ballot, promised: self.acceptor.promised() });
            return;
        }
        let known_chosen = slot <= self.learner.commit() || self.acceptor.is_chosen(slot);
        if !known_chosen {
            let accepted = AcceptedSlot { ballot, entry, chosen: false };
            let result = self.acceptor.store(slot, accepted, &mut self.storage);
            if !self.persist(result) {
                return;
            }
        }
        // A slot already chosen here can only be proposed again with the same value (that is
        // what phase 1 guarantees), so acknowledging it without storing it again is safe.
        // The commit index it carries first, so that the progress reported is current.
        if from != self.me {
            self.learn_commit(now, from, ballot, commit);
        }
        if self.stopped.is_some() {
            return;
        }
        if from != self.me && self.held_lease.grant().is_some_and(|grant| grant.ballot == ballot) {
            // Before the sync: the master waits for this holder's receipt, not its disk. Sent
            // on a lease of this ballot even past its end by this node's clock: the master's
            // view of it runs longer (the drift margin).
            let incarnation = self.incarnation;
            self.send(from, LogMessage::ReadLeaseReceived { ballot, incarnation, slot });
        }
        let applied = self.learner.applied();
        self.send_durable(from, LogMessage::Accepted { ballot, slot, applied });
    }
}
