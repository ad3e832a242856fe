//! The acceptor half of a replica: promises and accepts, each made durable before it is
//! acknowledged.

use super::message::LogMessage;
use super::replica::Replica;
use super::types::{AcceptedSlot, Entry, LogBallot, Slot};
use crate::storage::Storage;
use leasekv_lease::{Instant, NodeId};

impl<S: Storage> Replica<S> {
    pub(super) fn note_ballot(&mut self, ballot: LogBallot) {
        if ballot > self.highest_seen {
            self.highest_seen = ballot;
        }
    }

    /// Raises the promise to `ballot` (durably) if it is at least the current one.
    pub(super) fn promise(&mut self, ballot: LogBallot) -> bool {
        self.note_ballot(ballot);
        if ballot < self.promised {
            return false;
        }
        if ballot > self.promised {
            self.promised = ballot;
            let result = self.storage.save_promise(ballot);
            if !self.persist(result) {
                return false;
            }
        }
        true
    }

    pub(super) fn on_prepare(&mut self, now: Instant, from: NodeId, ballot: LogBallot, first: Slot) {
        self.yield_to(now, ballot);
        if !self.promise(ballot) {
            self.send(from, LogMessage::Reject { ballot, promised: self.promised });
            return;
        }
        let commit = self.commit;
        let slots = self
            .slots
            .range(first.max(1)..)
            .map(|(slot, accepted)| {
                let mut accepted = accepted.clone();
                accepted.chosen |= *slot <= commit;
                (*slot, accepted)
            })
            .collect();
        let reply = LogMessage::Promise { ballot, slots, commit, compacted: self.compacted };
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
            self.send(from, LogMessage::Reject { ballot, promised: self.promised });
            return;
        }
        let known_chosen = slot <= self.commit || self.slots.get(&slot).is_some_and(|s| s.chosen);
        if !known_chosen {
            let accepted = AcceptedSlot { ballot, entry, chosen: false };
            let result = self.storage.save_slot(slot, &accepted);
            if !self.persist(result) {
                return;
            }
            self.slots.insert(slot, accepted);
        }
        // A slot already chosen here can only be proposed again with the same value (that is
        // what phase 1 guarantees), so acknowledging it without storing it again is safe.
        self.send_durable(from, LogMessage::Accepted { ballot, slot });
        if from != self.me {
            self.learn_commit(now, from, ballot, commit);
        }
    }
}
