//! The learner half of a replica: learning which slots are chosen, applying them in order,
//! catching up from peers, and compacting the log behind snapshots.

use super::client::Completion;
use super::leader::Role;
use super::message::LogMessage;
use super::replica::{AppliedTrace, Replica};
use super::types::{AcceptedSlot, Entry, LogBallot, Slot};
use crate::command::{Command, CommandResponse};
use crate::state::StateMachine;
use crate::storage::{SnapshotRecord, Storage};
use leasekv_lease::{Instant, NodeId};
use std::collections::BTreeSet;
use std::time::Duration;

impl<S: Storage> Replica<S> {
    /// The leader of `ballot` says every slot `<= commit` is chosen. A slot is chosen here
    /// when this replica accepted it in that same ballot (the leader proposes one value per
    /// slot per ballot); anything else must be fetched.
    pub(super) fn learn_commit(&mut self, now: Instant, from: NodeId, ballot: LogBallot, commit: Slot) {
        let mut slot = self.commit + 1;
        while slot <= commit && self.acceptor.learn_chosen(slot, ballot) {
            slot += 1;
        }
        self.advance_commit();
        self.apply_chosen(now);
        if self.commit < commit {
            self.request_fetch(now, from);
        }
    }

    pub(super) fn on_commit(&mut self, now: Instant, from: NodeId, ballot: LogBallot, commit: Slot) {
        self.yield_to(now, ballot);
        self.master_hint = Some(from);
        self.learn_commit(now, from, ballot, commit);
    }

    /// Asks `peer` for chosen entries after our commit index, at most once per retry interval.
    pub(super) fn request_fetch(&mut self, now: Instant, peer: NodeId) {
        if peer == self.me {
            return;
        }
        if self.fetch_sent.is_some_and(|sent| now < sent.saturating_add(self.config.retry_interval)) {
            return;
        }
        self.fetch_sent = Some(now);
        self.send(peer, LogMessage::Fetch { from: self.commit + 1 });
    }

    pub(super) fn on_fetch(&mut self, from: NodeId, first: Slot) {
        if first <= self.compacted {
            // Those entries are gone from the log: send the state machine instead.
            let data = self.machine.to_snapshot_bytes();
            self.send(from, LogMessage::Snapshot { index: self.applied, data });
            return;
        }
        let entries = self.acceptor.chosen_entries(first, self.commit, self.config.max_fetch_entries);
        self.send(from, LogMessage::Entries { entries, commit: self.commit });
    }

    pub(super) fn on_entries(&mut self, now: Instant, from: NodeId, entries: Vec<(Slot, Entry)>, commit: Slot) {
        self.fetch_sent = None;
        for (slot, entry) in entries {
            if slot <= self.commit || self.acceptor.is_chosen(slot) {
                continue;
            }
            // A chosen value is final: it replaces whatever this acceptor accepted there, and
            // is reported as chosen in later promises so that no leader proposes another.
            let ballot = self.acceptor.slot(slot).map_or(LogBallot::ZERO, |s| s.ballot);
            let accepted = AcceptedSlot { ballot, entry, chosen: true };
            let result = self.acceptor.store(slot, accepted, &mut self.storage);
            if !self.persist(result) {
                return;
            }
        }
        let before = self.commit;
        self.advance_commit();
        self.apply_chosen(now);
        if self.commit > before {
            self.yield_if_leading(now);
        }
        if self.commit < commit {
            self.request_fetch(now, from);
        }
        self.try_finish_phase1(now);
    }

    pub(super) fn on_snapshot(&mut self, now: Instant, index: Slot, data: Vec<u8>) {
        self.fetch_sent = None;
        if index <= self.applied {
            return;
        }
        let machine = match StateMachine::from_snapshot_bytes(&data) {
            Ok(machine) => machine,
            Err(error) => {
                tracing::warn!(node = %self.me, %error, "ignoring a snapshot that does not decode");
                return;
            }
        };
        let snapshot_bytes = data.len() as u64;
        let record = SnapshotRecord { index, data };
        let saved = self.storage.save_snapshot(&record).and_then(|()| self.storage.remove_slots_through(index));
        if !self.persist(saved) {
            return;
        }
        self.yield_if_leading(now);
        self.machine = machine;
        // Proposals of this node still waiting for their slot may be inside the snapshot;
        // their outcome can no longer be told apart.
        let hint = self.master_hint.filter(|h| *h != self.me);
        let queued = self.role.queued_ids();
        let (keep, lost): (BTreeSet<_>, BTreeSet<_>) =
            std::mem::take(&mut self.awaiting).into_iter().partition(|id| queued.contains(id));
        self.awaiting = keep;
        for id in lost {
            self.outbox.complete(Completion { id, result: Err(super::client::ClientError::Indeterminate { hint }) });
        }
        self.applied = index;
        self.commit = self.commit.max(index);
        self.snapshot_index = index;
        self.snapshot_bytes = snapshot_bytes;
        self.applied_bytes_since_snapshot = 0;
        self.compacted = index;
        self.acceptor.forget_through(index);
        if self.config.trace_applies {
            self.outbox.trace(AppliedTrace {
                slot: index,
                proposals: Vec::new(),
                digest: self.machine.digest(),
                expired: Vec::new(),
                from_snapshot: true,
            });
        }
        self.advance_commit();
        self.apply_chosen(now);
        self.try_finish_phase1(now);
    }

    /// Moves the commit index over every contiguous chosen slot, and records it.
    pub(super) fn advance_commit(&mut self) {
        let before = self.commit;
        while self.acceptor.is_chosen(self.commit + 1) {
            self.commit += 1;
        }
        if self.commit > before {
            let result = self.storage.save_commit(self.commit);
            self.persist(result);
        }
    }

    /// Applies chosen slots in order; answers this node's waiting clients; keeps the lease
    /// tracker in step; marks the master ready once its barrier is applied.
    pub(super) fn apply_chosen(&mut self, now: Instant) {
        while self.applied < self.commit {
            let slot = self.applied + 1;
            let Some(accepted) = self.acceptor.slot(slot) else {
                // Cannot happen: commit only covers slots present. Stop rather than skip.
                debug_assert!(false, "chosen slot {slot} missing");
                return;
            };
            let mut trace_ids = Vec::new();
            let mut expired_trace = Vec::new();
            for proposal in &accepted.entry.proposals {
                self.applied_bytes_since_snapshot += super::leader::command_size(&proposal.command) as u64;
                let applied = self.machine.apply(&proposal.command);
                if self.lessor.is_running() {
                    match (&proposal.command, &applied.result) {
                        (Command::LeaseGrant { .. }, Ok(CommandResponse::LeaseGrant(granted))) => {
                            self.lessor.track(now, granted.id, Duration::from_secs(granted.ttl.max(0) as u64))
                        }
                        (Command::LeaseRevoke { id }, Ok(_)) => self.lessor.forget(*id),
                        _ => {}
                    }
                }
                if let Ok(CommandResponse::LeaseExpire { expired, .. }) = &applied.result {
                    for id in expired {
                        self.lessor.forget(*id);
                    }
                    if self.config.trace_applies {
                        expired_trace.extend(expired.iter().copied());
                    }
                }
                if let Role::Leader(leader) = &mut self.role {
                    leader.pending_expiries.remove(&proposal.id);
                }
                if self.config.trace_applies {
                    trace_ids.push(proposal.id);
                }
                if self.awaiting.remove(&proposal.id) {
                    self.outbox.complete(Completion { id: proposal.id, result: Ok((slot, applied)) });
                }
            }
            self.applied = slot;
            if self.config.trace_applies {
                self.outbox.trace(AppliedTrace {
                    slot,
                    proposals: trace_ids,
                    digest: self.machine.digest(),
                    expired: expired_trace,
                    from_snapshot: false,
                });
            }
            self.on_applied_barrier(now, slot);
        }
        self.maybe_snapshot();
        if self.lessor.is_running() {
            // An applied expiry may have made room in the backlog.
            self.expire_leases(now);
        }
    }

    fn on_applied_barrier(&mut self, now: Instant, slot: Slot) {
        let Role::Leader(leader) = &mut self.role else { return };
        if leader.ready || leader.barrier != slot {
            return;
        }
        leader.ready = true;
        let round = leader.ballot.round;
        tracing::info!(node = %self.me, round, applied = slot, leases = self.machine.lease_count(), "master ready: log taken over");
        let keep_stale = self.config.broken(super::config::LogBreakage::DeposedExpiry) && self.lessor.is_running();
        if !keep_stale {
            // Every countdown restarts at its full TTL: this node cannot know how long the
            // previous master had already counted.
            let leases: Vec<_> =
                self.machine.leases().map(|l| (l.id, Duration::from_secs(l.ttl.max(0) as u64))).collect();
            self.lessor.start(now, leases);
        }
    }

    /// Snapshots the state machine every `snapshot_every` slots, once at least as many bytes
    /// of commands as the last snapshot held were applied since it, and drops the log behind
    /// it (keeping a short tail for peers that are only slightly behind).
    fn maybe_snapshot(&mut self) {
        if self.applied < self.snapshot_index + self.config.snapshot_every
            || self.applied_bytes_since_snapshot < self.snapshot_bytes
        {
            return;
        }
        let record = SnapshotRecord { index: self.applied, data: self.machine.to_snapshot_bytes() };
        let result = self.storage.save_snapshot(&record);
        if !self.persist(result) {
            return;
        }
        self.snapshot_index = self.applied;
        self.snapshot_bytes = record.data.len() as u64;
        self.applied_bytes_since_snapshot = 0;
        let cut = self.applied.saturating_sub(self.config.retain_after_snapshot);
        if cut > self.compacted {
            let result = self.storage.remove_slots_through(cut);
            if !self.persist(result) {
                return;
            }
            self.acceptor.forget_through(cut);
            self.compacted = cut;
        }
    }
}
