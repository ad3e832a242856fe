//! The learner half of a replica: learning which slots are chosen, applying them in order,
//! catching up from peers, and compacting the log behind snapshots.

use super::acceptor::Acceptor;
use super::message::LogMessage;
use super::replica::{AppliedTrace, Replica};
use super::request::Completion;
use super::types::{AcceptedSlot, Entry, LogBallot, Slot};
use crate::command::Applied;
use crate::command::{Command, CommandResponse};
use crate::state::StateMachine;
use crate::storage::{SnapshotData, SnapshotRecord, Storage, StorageError};
use leasekv_lease::{Instant, NodeId};
use std::collections::BTreeSet;
use std::time::Duration;

/// The rate a snapshot is assumed to reach a peer at, to wait before sending that peer
/// another (50 MB/s: a 1 GiB state every 20 s at most; a small one every retry interval).
const SNAPSHOT_TRANSFER_BYTES_PER_SEC: f64 = 50e6;

/// How long past its estimated transfer a snapshot sent keeps the log after it, for the
/// peer's check and install: a 4 GB state took 43 s to check and install on the joining
/// member (scalebench catch-up, 4M keys).
const LOG_PIN_GRACE: Duration = Duration::from_secs(60);

/// A snapshot sent to a peer: when, how long its transfer may take (the peer gets no other
/// before), and the slot it reflects. Until [`SnapshotSent::pinned_until`], checkpoints keep
/// the log after that slot, so that the peer, once it installed the snapshot, follows the
/// log from there instead of needing another snapshot: with a large state, writes went on
/// past the log a checkpoint kept while one was built, sent and installed.
#[derive(Debug, Clone, Copy)]
pub(super) struct SnapshotSent {
    at: Instant,
    wait: Duration,
    /// The slot the peer is known to have (the snapshot's, then the one before its fetches).
    index: Slot,
}

impl SnapshotSent {
    /// The end of the pin: the transfer's estimate four times over, and [`LOG_PIN_GRACE`];
    /// a peer that asked for nothing by then gets a snapshot again when it asks.
    pub(super) fn pinned_until(&self) -> Instant {
        self.at.saturating_add(self.wait.saturating_mul(4).saturating_add(LOG_PIN_GRACE))
    }
}

/// What one replica has learned: how far the log is chosen and applied, the state machine
/// it was applied to, and the bookkeeping of snapshots, compaction and catching up.
#[derive(Debug)]
pub(super) struct Learner {
    commit: Slot,
    applied: Slot,
    machine: StateMachine,
    snapshot_index: Slot,
    /// Bytes of the last snapshot taken or installed (0: none yet).
    snapshot_bytes: u64,
    /// Bytes of commands applied since the last snapshot (see `snapshot_every`).
    applied_bytes_since_snapshot: u64,
    compacted: Slot,
    fetch_sent: Option<Instant>,
    /// No fetch before then (see [`Learner::hold_fetches_until`]).
    fetches_held_until: Option<Instant>,
    /// Whether storage holds a snapshot record (an installed one, or one from a data dir
    /// of a release before the state engine) that the next checkpoint drops.
    stored_snapshot: bool,
    /// Snapshots installed so far: a checkpoint begun before an install is abandoned.
    installs: u64,
    /// Whether a checkpoint's engine sync is running elsewhere ([`CheckpointTicket`]).
    checkpoint_in_flight: bool,
    /// Whether commands were applied since the state machine's last flush.
    unflushed: bool,
}

/// A checkpoint begun by [`Replica::begin_checkpoint`]: the state engine is to be synced off
/// the replica's thread ([`CheckpointTicket::sync`]), which makes the state durable through
/// `slot`; [`Replica::finish_checkpoint`] then drops the log behind it. Dropped (a crash), it
/// leaves everything as it was.
pub struct CheckpointTicket {
    slot: Slot,
    /// The log from this slot on is kept however many slots [`ReplicaConfig::retain_after_snapshot`]
    /// asks for: the checkpoint before, when this one is due to the bytes of commands since.
    ///
    /// [`ReplicaConfig::retain_after_snapshot`]: super::ReplicaConfig::retain_after_snapshot
    keep_from: Slot,
    installs: u64,
    engine: std::sync::Arc<dyn crate::engine::Engine>,
    /// Negative control `log-dropped-before-state-synced`: the sync does nothing.
    skip_sync: bool,
}

impl std::fmt::Debug for CheckpointTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointTicket").field("slot", &self.slot).field("installs", &self.installs).finish()
    }
}

impl CheckpointTicket {
    /// The slot the checkpoint makes durable.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Syncs the state engine (every write made to it so far): call it on any thread.
    pub fn sync(&self) -> Result<(), crate::engine::EngineError> {
        if self.skip_sync {
            return Ok(());
        }
        self.engine.sync()
    }
}

/// A checkpoint is due after this many bytes of commands, however few slots they took, so
/// that the log kept behind the state stays small when slots are large.
const CHECKPOINT_BYTES: u64 = 16 << 20;

/// A snapshot for peers behind the log's start: the state at slot `index`, as a view the
/// driver serializes ([`crate::state::stream::write`]) off the replica's thread and sends
/// to each of `peers` as a [`LogMessage::Snapshot`].
pub struct SnapshotJob {
    /// Who asked.
    pub peers: Vec<NodeId>,
    /// The slot the state reflects.
    pub index: Slot,
    /// The state.
    pub view: crate::state::StateView,
}

impl Learner {
    /// A learner restored from a snapshot at `snapshot_index` of `snapshot_bytes` bytes
    /// (0, 0 without one), with the log compacted through `compacted`.
    pub(super) fn recovered(machine: StateMachine, snapshot_index: Slot, snapshot_bytes: u64, compacted: Slot) -> Self {
        Learner {
            commit: snapshot_index,
            applied: snapshot_index,
            machine,
            snapshot_index,
            snapshot_bytes,
            applied_bytes_since_snapshot: 0,
            compacted: compacted.min(snapshot_index),
            fetch_sent: None,
            fetches_held_until: None,
            stored_snapshot: false,
            installs: 0,
            checkpoint_in_flight: false,
            unflushed: false,
        }
    }

    /// Whether storage holds a snapshot record.
    pub(super) fn stored_snapshot(&self) -> bool {
        self.stored_snapshot
    }

    /// Notes whether storage holds a snapshot record.
    pub(super) fn set_stored_snapshot(&mut self, stored: bool) {
        self.stored_snapshot = stored;
    }

    /// Highest slot known chosen, with every slot below it.
    pub(super) fn commit(&self) -> Slot {
        self.commit
    }

    /// Highest slot applied to the state machine.
    pub(super) fn applied(&self) -> Slot {
        self.applied
    }

    /// Highest slot dropped from the log (covered by a snapshot).
    pub(super) fn compacted(&self) -> Slot {
        self.compacted
    }

    /// The slot the last snapshot covers (0: none yet).
    pub(super) fn snapshot_index(&self) -> Slot {
        self.snapshot_index
    }

    /// The state machine.
    pub(super) fn machine(&self) -> &StateMachine {
        &self.machine
    }

    /// A view to read the applied state at `revision` on another thread
    /// ([`crate::state::ReadView`]).
    pub(super) fn read_view(
        &mut self,
        revision: crate::types::Revision,
    ) -> Result<crate::state::ReadView, crate::KvError> {
        self.machine.read_view(revision)
    }

    /// A view of the applied state ([`crate::state::StateView`]), flushed first, naming the
    /// last slot applied.
    pub(super) fn view(&mut self) -> Result<crate::state::StateView, crate::engine::EngineError> {
        // One flush: the view's own, naming the last slot applied.
        let view = self.machine.view_through(self.applied)?;
        self.unflushed = false;
        Ok(view)
    }

    /// The state machine, to damage it on purpose (negative controls only).
    #[cfg(feature = "negative-controls")]
    pub(super) fn machine_mut(&mut self) -> &mut StateMachine {
        &mut self.machine
    }

    /// Moves the commit index over every contiguous slot `acceptor` knows chosen; returns
    /// the new commit index if it moved (the caller records it).
    pub(super) fn advance_commit(&mut self, acceptor: &Acceptor) -> Option<Slot> {
        let before = self.commit;
        while acceptor.is_chosen(self.commit + 1) {
            self.commit += 1;
        }
        (self.commit > before).then_some(self.commit)
    }

    /// Applies one command of slot `applied() + 1` to the state machine.
    pub(super) fn apply(&mut self, command: &Command) -> Applied {
        self.applied_bytes_since_snapshot += super::leader::command_size(command) as u64;
        self.machine.apply(command)
    }

    /// Writes the changes of the commands applied since the last flush to the state
    /// engine, naming the last slot applied as the point they reach, if any were.
    pub(super) fn flush_if_applied(&mut self) -> Result<(), crate::engine::EngineError> {
        if !self.unflushed {
            return Ok(());
        }
        self.machine.flush_through(self.applied)?;
        self.unflushed = false;
        Ok(())
    }

    /// See [`super::Replica::publish_applied`].
    pub(super) fn publish_applied(&mut self) {
        self.machine.publish_applied();
    }

    /// Whether commands were applied since the last flush to the state engine.
    pub(super) fn unflushed(&self) -> bool {
        self.unflushed
    }

    /// Every command of `slot` was applied.
    pub(super) fn applied_through(&mut self, slot: Slot) {
        self.applied = slot;
        self.unflushed = true;
    }

    /// Whether a fetch may go out at `now` (at most one per `retry` interval); if so,
    /// records that it did.
    pub(super) fn may_fetch(&mut self, now: Instant, retry: Duration) -> bool {
        if self.fetch_sent.is_some_and(|sent| now < sent.saturating_add(retry)) {
            return false;
        }
        if self.fetches_held_until.is_some_and(|until| now < until) {
            return false;
        }
        self.fetch_sent = Some(now);
        true
    }

    /// No fetch goes out before `until` (a snapshot install failed: asking again at once
    /// would have a master build another snapshot that fails alike).
    pub(super) fn hold_fetches_until(&mut self, until: Instant) {
        self.fetches_held_until = Some(until);
    }

    /// A fetch was answered: the next one may go out at once.
    pub(super) fn fetch_answered(&mut self) {
        self.fetch_sent = None;
    }

    /// Replaces the state with `machine`, a snapshot through `index` of `bytes` bytes; the
    /// log through `index` is compacted.
    pub(super) fn install_snapshot(&mut self, machine: StateMachine, index: Slot, bytes: u64) {
        self.machine = machine;
        self.applied = index;
        // The caller flushed the installed state through `index`.
        self.unflushed = false;
        self.commit = self.commit.max(index);
        self.snapshot_index = index;
        self.snapshot_bytes = bytes;
        self.applied_bytes_since_snapshot = 0;
        self.compacted = index;
        self.installs += 1;
    }

    /// Whether a snapshot is due: `every` slots applied since the last one, and at least
    /// as many bytes of commands as the last snapshot held (a snapshot costs as much as the
    /// whole state, so it is paid for by at least as much log).
    pub(super) fn snapshot_due(&self, every: u64) -> bool {
        self.applied > self.snapshot_index
            && (self.applied >= self.snapshot_index + every || self.applied_bytes_since_snapshot >= CHECKPOINT_BYTES)
    }

    /// A snapshot of `bytes` bytes through `applied()` was stored.
    pub(super) fn took_snapshot(&mut self, bytes: u64) {
        self.snapshot_index = self.applied;
        self.snapshot_bytes = bytes;
        self.applied_bytes_since_snapshot = 0;
    }

    /// The log through `cut` was dropped.
    pub(super) fn compacted_through(&mut self, cut: Slot) {
        self.compacted = cut;
    }
}

impl<S: Storage> Replica<S> {
    /// The leader of `ballot` says every slot `<= commit` is chosen. A slot is chosen here
    /// when this replica accepted it in that same ballot (the leader proposes one value per
    /// slot per ballot); anything else must be fetched.
    pub(super) fn learn_commit(&mut self, now: Instant, from: NodeId, ballot: LogBallot, commit: Slot) {
        self.candidacy_announced(now, commit);
        let mut slot = self.learner.commit() + 1;
        while slot <= commit && self.acceptor.learn_chosen(slot, ballot) {
            slot += 1;
        }
        self.advance_commit();
        self.apply_chosen(now);
        if self.learner.commit() < commit {
            self.request_fetch(now, from);
        }
    }

    pub(super) fn on_commit(&mut self, now: Instant, from: NodeId, ballot: LogBallot, commit: Slot) {
        self.yield_to(now, ballot);
        self.master_hint = Some(from);
        self.learn_commit(now, from, ballot, commit);
        if from == ballot.node {
            self.ask_read_lease(now, ballot);
        }
    }

    /// Asks `peer` for chosen entries after our commit index, at most once per retry interval.
    pub(super) fn request_fetch(&mut self, now: Instant, peer: NodeId) {
        if peer == self.me {
            return;
        }
        if !self.learner.may_fetch(now, self.config.retry_interval) {
            return;
        }
        self.send(peer, LogMessage::Fetch { from: self.learner.commit() + 1 });
    }

    pub(super) fn on_fetch(&mut self, now: Instant, from: NodeId, first: Slot) {
        if let Some(sent) = self.snapshots_sent.get_mut(&from) {
            // The peer has everything before `first`: keep the log from there on.
            sent.index = sent.index.max(first.saturating_sub(1));
        }
        if first <= self.learner.compacted() {
            // Those entries are gone from the log: send the state machine instead, but not
            // again while the last one may still be on its way. The peer asks every retry
            // interval; a fresh snapshot for each ask kept a master with a 1 GiB state
            // serializing nearly all the time, and its clients' writes fell to 3.5% (scalebench
            // catch-up). One per estimated transfer time.
            if let Some(sent) = self.snapshots_sent.get(&from) {
                if now < sent.at.saturating_add(sent.wait) {
                    return;
                }
            }
            if self.config.defer_snapshots {
                // Built by the driver, off the path that answers messages (`snapshot_if_due`).
                self.snapshot_wanted_by.insert(from);
                return;
            }
            self.send_snapshot(now, &[from]);
            return;
        }
        let entries = self.acceptor.chosen_entries(first, self.learner.commit(), self.config.max_fetch_entries);
        self.send(from, LogMessage::Entries { entries, commit: self.learner.commit() });
    }

    /// Takes the snapshot for peers that is due, as a view for the driver to serialize and
    /// send off its thread ([`SnapshotJob`]), instead of [`Replica::snapshot_if_due`]
    /// building and sending it in the replica. Records it as sent to each peer.
    pub fn take_snapshot_job(&mut self, now: Instant) -> Option<SnapshotJob> {
        if self.snapshot_wanted_by.is_empty() || self.stopped.is_some() {
            return None;
        }
        let peers: Vec<NodeId> = std::mem::take(&mut self.snapshot_wanted_by).into_iter().collect();
        let view = match self.learner.view() {
            Ok(view) => view,
            Err(e) => {
                self.fail(StorageError::backend("taking a view of the state for a snapshot", e));
                return None;
            }
        };
        // The encoding is about the size the quota counts.
        self.snapshot_sent_to(now, &peers, self.learner.machine().bytes_in_use());
        Some(SnapshotJob { peers, index: self.learner.applied(), view })
    }

    /// Sends one snapshot of the state machine to each of `peers` (built once for all).
    fn send_snapshot(&mut self, now: Instant, peers: &[NodeId]) {
        let data = self.learner.machine().to_snapshot_bytes();
        self.snapshot_sent_to(now, peers, data.len() as u64);
        for &peer in peers {
            self.send(peer, LogMessage::Snapshot { index: self.learner.applied(), data: data.clone() });
        }
    }

    /// Records a snapshot of about `bytes` sent to `peers` at `now`: none gets another
    /// before it could have pulled this one.
    fn snapshot_sent_to(&mut self, now: Instant, peers: &[NodeId], bytes: u64) {
        let wait =
            self.config.retry_interval.max(Duration::from_secs_f64(bytes as f64 / SNAPSHOT_TRANSFER_BYTES_PER_SEC));
        let index = self.learner.applied();
        for &peer in peers {
            self.snapshots_sent.insert(peer, SnapshotSent { at: now, wait, index });
            self.counts.snapshots_sent += 1;
        }
    }

    pub(super) fn on_entries(&mut self, now: Instant, from: NodeId, entries: Vec<(Slot, Entry)>, commit: Slot) {
        // Only an answer that brings something lets the next fetch go at once: a peer with
        // nothing we lack, asked again on every answer by a node catching up with a
        // configuration it has seen elsewhere, made the two ping-pong without end (store
        // simulator, seed 689 of 5 nodes).
        if !entries.is_empty() {
            self.learner.fetch_answered();
        }
        for (slot, entry) in entries {
            if slot <= self.learner.commit() || self.acceptor.is_chosen(slot) {
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
        let before = self.learner.commit();
        self.advance_commit();
        self.apply_chosen(now);
        if self.learner.commit() > before {
            self.yield_if_leading(now);
        }
        if self.learner.commit() < commit {
            self.request_fetch(now, from);
        }
        self.try_finish_phase1(now);
    }

    pub(super) fn on_snapshot(&mut self, now: Instant, index: Slot, data: SnapshotData) {
        self.learner.fetch_answered();
        if index <= self.learner.applied() {
            discard_file(&data);
            return;
        }
        if let SnapshotData::Bytes(bytes) = &data {
            if StateMachine::is_streamed_snapshot(bytes) {
                self.stage_snapshot(now, index, bytes);
                return;
            }
        }
        // Bytes are decoded once, checked and kept for the install; a file (how a state of
        // any size arrives) is read frame by frame, once to check it and once to install it.
        let checked = match &data {
            SnapshotData::Bytes(bytes) => StateMachine::check_snapshot_bytes(bytes).map(Some),
            SnapshotData::File(path) => StateMachine::check_snapshot_file(path).map(|()| None),
        };
        let checked = match checked {
            Ok(checked) => checked,
            Err(error) => {
                tracing::warn!(node = %self.me, %error, "ignoring a snapshot that does not decode");
                discard_file(&data);
                return;
            }
        };
        let snapshot_bytes = match data.len() {
            Ok(len) => len,
            Err(error) => {
                tracing::warn!(node = %self.me, %error, "ignoring a snapshot that cannot be read");
                return;
            }
        };
        // The record is made durable before the engine's state is replaced: a crash while
        // the engine is rewritten then finds it and installs it again at the restart.
        let given_file = match &data {
            SnapshotData::File(path) => Some(path.clone()),
            SnapshotData::Bytes(_) => None,
        };
        let record = SnapshotRecord { index, data };
        let saved = self
            .storage
            .save_snapshot(&record)
            .and_then(|()| self.storage.remove_slots_through(index))
            .and_then(|()| self.storage.sync());
        if !self.persist(saved) {
            return;
        }
        self.learner.set_stored_snapshot(true);
        let engine = self.storage.state_engine();
        let installed = match checked {
            Some(checked) => StateMachine::install_snapshot(checked, engine),
            // A file: installed from where the storage keeps it now.
            None => StateMachine::install_snapshot_file(
                &self.storage.snapshot_file().or(given_file).unwrap_or_default(),
                engine,
            ),
        };
        let installed = installed.and_then(|mut machine| {
            machine
                .flush_through(index)
                .map(|()| machine)
                .map_err(|e| crate::state::SnapshotError::Corrupt(format!("cannot write the installed state: {e}")))
        });
        match installed {
            Ok(machine) => self.take_installed(now, index, machine, snapshot_bytes),
            Err(error) => self.fail(StorageError::Io(format!("installing the snapshot at slot {index}: {error}"))),
        }
    }

    /// A format 8 snapshot given whole (the simulator's, a small one): installed through a
    /// staged engine, as the server installs a peer's while it arrives.
    fn stage_snapshot(&mut self, now: Instant, index: Slot, bytes: &[u8]) {
        let staged = match self.storage.stage() {
            Ok(staged) => staged,
            Err(error) => {
                self.fail(error);
                return;
            }
        };
        #[cfg(feature = "negative-controls")]
        let installed = if self.config.broken(super::config::LogBreakage::StagedCutShort) {
            super::StagedSnapshot::install_even_if_cut(index, &bytes[..bytes.len() * 3 / 4], staged)
        } else {
            super::StagedSnapshot::install(index, bytes, staged)
        };
        #[cfg(not(feature = "negative-controls"))]
        let installed = super::StagedSnapshot::install(index, bytes, staged);
        match installed {
            Ok(snapshot) => self.adopt_staged_snapshot(now, snapshot),
            Err(error) => tracing::warn!(node = %self.me, %error, "ignoring a snapshot that does not decode"),
        }
    }

    /// Adopts a snapshot installed in a staged engine ([`super::StagedSnapshot`]) as this
    /// replica's state, unless the replica applied as far meanwhile (it is then given up).
    /// The swap is durable before the log behind the snapshot is dropped: a crash between
    /// the two finds the new state and slots it covers, which the restart drops.
    pub(super) fn adopt_staged_snapshot(&mut self, now: Instant, snapshot: super::StagedSnapshot) {
        self.learner.fetch_answered();
        if snapshot.index() <= self.learner.applied() || self.stopped.is_some() {
            snapshot.discard();
            return;
        }
        let (machine, index, bytes) = match snapshot.adopt_into(&mut self.storage) {
            Ok(adopted) => adopted,
            Err(error) => {
                self.fail(error);
                return;
            }
        };
        let stored = self.learner.stored_snapshot();
        let saved = self
            .storage
            .remove_slots_through(index)
            .and_then(|()| if stored { self.storage.discard_snapshot() } else { Ok(()) })
            .and_then(|()| self.storage.sync());
        if !self.persist(saved) {
            return;
        }
        self.learner.set_stored_snapshot(false);
        self.take_installed(now, index, machine, bytes);
    }

    /// Makes `machine`, a state installed from a snapshot through `index` and durable, the
    /// replica's.
    fn take_installed(&mut self, now: Instant, index: Slot, machine: StateMachine, snapshot_bytes: u64) {
        #[cfg(feature = "negative-controls")]
        let machine = {
            let mut machine = machine;
            if self.config.broken(super::config::LogBreakage::AppliedBeforeState) {
                machine.break_applied_before_state();
            } else if self.config.broken(super::config::LogBreakage::StaleRecentWrite) {
                machine.break_recent_writes();
            } else if self.config.broken(super::config::LogBreakage::TailWithoutCompaction) {
                machine.break_tail_compaction();
            } else if self.config.broken(super::config::LogBreakage::LiveValueDropped) {
                machine.break_live_values();
            }
            machine
        };
        self.yield_if_leading(now);
        // Proposals of this node still waiting for their slot may be inside the snapshot;
        // their outcome can no longer be told apart.
        let hint = self.master_hint.filter(|h| *h != self.me);
        let queued = self.role.queued_ids();
        let (keep, lost): (BTreeSet<_>, BTreeSet<_>) =
            std::mem::take(&mut self.awaiting).into_iter().partition(|id| queued.contains(id));
        self.awaiting = keep;
        for id in lost {
            self.outbox.complete(Completion { id, result: Err(super::request::RequestError::Indeterminate { hint }) });
        }
        self.learner.install_snapshot(machine, index, snapshot_bytes);
        self.counts.snapshots_installed += 1;
        self.candidacy_installed();
        self.acceptor.forget_through(index);
        if self.config.trace_applies {
            self.outbox.trace(AppliedTrace {
                slot: index,
                proposals: Vec::new(),
                digest: self.learner.machine().digest(),
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
        if let Some(commit) = self.learner.advance_commit(&self.acceptor) {
            let result = self.storage.save_commit(commit);
            self.persist(result);
        }
    }

    /// Applies chosen slots in order; answers this node's waiting clients; keeps the lease
    /// tracker in step; marks the master ready once its barrier is applied.
    pub(super) fn apply_chosen(&mut self, now: Instant) {
        while self.learner.applied() < self.learner.commit() {
            let slot = self.learner.applied() + 1;
            let Some(accepted) = self.acceptor.slot(slot) else {
                // Cannot happen: commit only covers slots present. Stop rather than skip.
                debug_assert!(false, "chosen slot {slot} missing");
                return;
            };
            let changes_members = accepted.entry.changes_members();
            let mut trace_ids = Vec::new();
            let mut expired_trace = Vec::new();
            for proposal in &accepted.entry.proposals {
                let applied = self.learner.apply(&proposal.command);
                if let Some(failure) = self.learner.machine().engine_failure() {
                    // The command may have been answered from a record that could not be read:
                    // stop before anyone hears of it.
                    let error = StorageError::Io(format!("the state engine failed: {failure}"));
                    self.fail(error);
                    return;
                }
                self.lessor.follow_apply(now, &proposal.command, &applied.result);
                if let Ok(CommandResponse::LeaseExpire { expired, .. }) = &applied.result {
                    if self.config.trace_applies {
                        expired_trace.extend(expired.iter().copied());
                    }
                }
                self.role.applied(proposal.id);
                if self.config.trace_applies {
                    trace_ids.push(proposal.id);
                }
                if self.awaiting.remove(&proposal.id) {
                    self.outbox.complete(Completion { id: proposal.id, result: Ok((slot, applied)) });
                }
            }
            self.learner.applied_through(slot);
            if self.config.trace_applies {
                self.outbox.trace(AppliedTrace {
                    slot,
                    proposals: trace_ids,
                    digest: self.learner.machine().digest(),
                    expired: expired_trace,
                    from_snapshot: false,
                });
            }
            self.on_applied_barrier(now, slot);
            if changes_members {
                self.on_applied_change(now, slot);
            }
        }
        if !self.config.defer_snapshots {
            self.maybe_snapshot();
        }
        if self.lessor.is_running() {
            // An applied expiry may have made room in the backlog.
            self.expire_leases(now);
        }
    }

    fn on_applied_barrier(&mut self, now: Instant, slot: Slot) {
        let Some(round) = self.role.slot_applied(slot) else { return };
        tracing::info!(node = %self.me, round, applied = slot, leases = self.learner.machine().lease_count(), "master ready: log taken over");
        let keep_stale = self.config.broken(super::config::LogBreakage::DeposedExpiry) && self.lessor.is_running();
        if !keep_stale {
            // Every countdown restarts at its full TTL: this node cannot know how long the
            // previous master had already counted.
            let leases: Vec<_> =
                self.learner.machine().leases().map(|l| (l.id, Duration::from_secs(l.ttl.max(0) as u64))).collect();
            self.lessor.start(now, leases);
        }
        if !self.learner.machine().membership().is_recorded() {
            // The first master of a cluster writes down the members its config files
            // seeded it with: from then on the log, not the files, says who is a member.
            let members = self.seed.members().cloned().collect();
            let id = self.next_proposal_id();
            let command = Command::ChangeMembers(crate::membership::MemberChange::Seed { members });
            self.role.enqueue(super::types::Proposal { id, command });
            self.fill_pipeline(now);
        }
    }

    /// Whether a snapshot is due, to store or for a peer behind the log's compaction point
    /// (see [`super::ReplicaConfig::defer_snapshots`]).
    pub fn snapshot_due(&self) -> bool {
        self.stopped.is_none()
            && (!self.snapshot_wanted_by.is_empty() || self.learner.snapshot_due(self.config.snapshot_every))
    }

    /// A checkpoint, if one is due (see [`Self::snapshot_if_due`]), without sending
    /// snapshots to peers (the driver takes those with [`Self::take_snapshot_job`]).
    pub fn checkpoint_if_due(&mut self) {
        self.maybe_snapshot();
    }

    /// Takes the snapshot that is due, if one is, and drops the log behind it, then sends
    /// one to each peer that asked for entries the log no longer holds; with
    /// [`super::ReplicaConfig::defer_snapshots`] the driver calls this after each step (the
    /// same state as at the end of the step, since nothing else ran in between).
    pub fn snapshot_if_due(&mut self, now: Instant) {
        self.maybe_snapshot();
        if !self.snapshot_wanted_by.is_empty() && self.stopped.is_none() {
            let peers: Vec<NodeId> = std::mem::take(&mut self.snapshot_wanted_by).into_iter().collect();
            self.send_snapshot(now, &peers);
        }
    }

    /// A checkpoint every `snapshot_every` slots (or [`CHECKPOINT_BYTES`] of commands):
    /// the state engine, flushed first, is synced, which makes it durable through the slot
    /// applied, and only then is the log behind it dropped (keeping a
    /// short tail for peers that are only slightly behind). Nothing is serialized.
    fn maybe_snapshot(&mut self) {
        if let Some(ticket) = self.begin_checkpoint() {
            let synced = ticket.sync();
            self.finish_checkpoint(ticket, synced);
        }
    }

    /// Begins the checkpoint that is due, if one is and none is running: the caller syncs
    /// the engine with the ticket wherever it likes (the server on a blocking thread, so
    /// that a slow sync never holds up the node loop) and hands it back to
    /// [`Self::finish_checkpoint`]. The replica goes on applying meanwhile.
    pub fn begin_checkpoint(&mut self) -> Option<CheckpointTicket> {
        if self.stopped.is_some()
            || self.learner.checkpoint_in_flight
            || !self.learner.snapshot_due(self.config.snapshot_every)
        {
            return None;
        }
        #[cfg(feature = "negative-controls")]
        let skip_sync = self.config.broken(super::config::LogBreakage::LogDroppedBeforeStateSynced);
        #[cfg(not(feature = "negative-controls"))]
        let skip_sync = false;
        #[cfg(feature = "negative-controls")]
        let write_first = !self.config.broken(super::config::LogBreakage::CheckpointBeforeFlush);
        #[cfg(not(feature = "negative-controls"))]
        let write_first = true;
        // The checkpoint makes durable what the engine holds, which must be everything
        // applied: the driver may have left commands unwritten for a while.
        if write_first && !self.flush_applied() {
            return None;
        }
        let slot = self.learner.applied();
        // Large slots: the tail kept for peers slightly behind is bounded by bytes too, to
        // the commands since the checkpoint before (at most CHECKPOINT_BYTES), where 1,000
        // slots of up to 256 commands kept four segments of log beside the state.
        let keep_from =
            if self.learner.applied_bytes_since_snapshot >= CHECKPOINT_BYTES { self.learner.snapshot_index } else { 0 };
        self.learner.took_snapshot(0);
        self.learner.checkpoint_in_flight = true;
        let engine = self.storage.state_engine();
        Some(CheckpointTicket { slot, keep_from, installs: self.learner.installs, engine, skip_sync })
    }

    /// Ends a checkpoint once its sync ran: the state is durable through the ticket's slot,
    /// so the snapshot record and the log behind that slot may go. A failed sync stops the
    /// replica; a checkpoint that a snapshot install overtook is abandoned (the install's
    /// record must stay until a sync after it).
    pub fn finish_checkpoint(&mut self, ticket: CheckpointTicket, synced: Result<(), crate::engine::EngineError>) {
        self.learner.checkpoint_in_flight = false;
        if self.stopped.is_some() {
            return;
        }
        let synced = synced.map_err(|e| StorageError::backend("syncing the state engine at a checkpoint", e));
        let overtaken = ticket.installs != self.learner.installs
            && !self.config.broken(super::config::LogBreakage::CheckpointOvertaken);
        // An install since the ticket replaced the engine it synced: whatever that sync
        // did no longer matters.
        if overtaken || !self.persist(synced) {
            return;
        }
        self.drop_behind(ticket.slot, ticket.keep_from);
    }

    /// Drops the snapshot record and the log behind `slot`, through which the state engine
    /// is durable, keeping `retain_after_snapshot` slots but none before `keep_from`, and
    /// the log a snapshot sent to a peer pins ([`SnapshotSent`]).
    fn drop_behind(&mut self, slot: Slot, keep_from: Slot) {
        if self.learner.stored_snapshot {
            let dropped = self.storage.discard_snapshot();
            if !self.persist(dropped) {
                return;
            }
            self.learner.set_stored_snapshot(false);
        }
        let cut = slot.saturating_sub(self.config.retain_after_snapshot).max(keep_from.min(slot));
        let cut = self.snapshots_sent.values().map(|sent| sent.index).fold(cut, Slot::min);
        if cut > self.learner.compacted() {
            let result = self.storage.remove_slots_through(cut);
            if !self.persist(result) {
                return;
            }
            self.acceptor.forget_through(cut);
            self.learner.compacted_through(cut);
        }
    }
}

/// Deletes a snapshot file the replica will not keep (older than its state, or damaged).
fn discard_file(data: &SnapshotData) {
    if let SnapshotData::File(path) = data {
        if let Err(error) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), %error, "cannot delete an unused snapshot file");
        }
    }
}
