//! The replica core: one node's acceptor, learner, state machine and (while master) leader
//! and lease tracker, as a sans-IO state machine.
//!
//! Inputs: `(now, message)`, `(now, timeout)`, the election's verdict
//! ([`Replica::set_mastership`]), client requests, and [`Replica::sync`] once the driver has
//! made storage durable. Outputs ([`Replica::take_output`]): messages, completions of client
//! requests, whether a sync is wanted, and the next instant to be woken.
//!
//! Durability rule: every message that promises something about stored state (Promise,
//! Accepted) is held back until the sync that covers it, so one sync acknowledges a whole
//! batch of accepts.

mod admission;
mod candidacy;
mod durability;
mod read_leases;
mod reports;

use super::acceptor::Acceptor;
use super::config::{LogBreakage, ReplicaConfig, ReplicaConfigError};
use super::leader::Role;
use super::learner::Learner;
use super::message::LogMessage;
use super::outbox::Outbox;
use super::read_lease::{self, Grants, Held};
use super::request::{Completion, ReadConsistency, RequestError, StorageFailure};
use super::types::{ProposalId, Slot};
use crate::command::{AlarmAction, AlarmKind, Command, RangeRequest, RangeResponse};
use crate::lessor::Lessor;
use crate::limits::Limits;
use crate::membership::{MemberChange, Membership};
use crate::state::{validate_command, validate_range, StateMachine};
use crate::storage::{SnapshotData, Storage, StorageError};
use crate::types::{LeaseId, Revision};
use crate::KvError;
use leasekv_lease::{Instant, Mastership, NodeId};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How many slots behind the master a learner may be and still be promoted (on top of
/// etcd's 10%).
const LEARNER_SLACK_SLOTS: u64 = 16;

/// How long a node whose snapshot install failed waits before it asks for another (the
/// cause, a full disk, takes an operator to fix).
const INSTALL_RETRY: Duration = Duration::from_secs(2);

/// How soon a node proposes raising an alarm again while the first proposal is on its way.
const ALARM_RETRY: Duration = Duration::from_secs(1);

pub use candidacy::{CandidacyConfig, Withdrawal};
pub use reports::{AppliedTrace, LeaseStatus, OpenError, ReplicaCounts, ReplicaOutput, SyncTicket};

/// One node's share of the replicated store. See the module documentation.
///
/// A coordinator: the `Acceptor`, the `Learner`, the master's `Role` and the
/// `Outbox` own their state; the replica routes inputs to them, hands each the storage or
/// the other parts it needs, and acts on what they report (persist, send, fail).
pub struct Replica<S: Storage> {
    pub(super) me: NodeId,
    /// The configuration this node starts from while the log has none recorded: a new
    /// cluster's config files, or (joining) the membership a member reported.
    pub(super) seed: Membership,
    /// Rule 5 of docs/membership.md, from the election: the configuration epoch of the last
    /// lease round a majority answered, and when the next voter change may be proposed.
    pub(super) change_gate: Option<(u64, Instant)>,
    pub(super) config: ReplicaConfig,
    pub(super) limits: Limits,
    pub(super) incarnation: u32,
    pub(super) storage: S,
    /// Promises and accepted slots.
    pub(super) acceptor: Acceptor,
    /// Commit and apply progress, the state machine, snapshots.
    pub(super) learner: Learner,
    /// The election's verdict for this node.
    pub(super) mastership: Option<Mastership>,
    pub(super) master_hint: Option<NodeId>,
    /// Follower, or (while master) candidate in phase 1 or leader in phase 2.
    pub(super) role: Role,
    /// Events counted for the node's metrics.
    pub(super) counts: ReplicaCounts,
    /// The master's lease deadlines.
    pub(super) lessor: Lessor,
    /// Expiries found while deposed (only in the `deposed-expiry` negative control).
    pub(super) deposed_expiries: Vec<LeaseId>,
    /// This node's client proposals not yet answered.
    pub(super) awaiting: BTreeSet<ProposalId>,
    /// When this node last proposed raising an alarm (see `Replica::raise_alarm`).
    alarm_raised_at: Option<Instant>,
    pub(super) next_seq: u64,
    pub(super) next_tick: Option<Instant>,
    /// Outputs, and the messages held until a sync.
    pub(super) outbox: Outbox,
    /// Why the replica stopped (a storage failure).
    pub(super) stopped: Option<StorageFailure>,
    /// The snapshot last sent to each peer: when, how long until it may get another, and the
    /// log it keeps.
    pub(super) snapshots_sent: std::collections::HashMap<NodeId, super::learner::SnapshotSent>,
    /// Peers waiting for a snapshot the driver builds (with `defer_snapshots`).
    pub(super) snapshot_wanted_by: BTreeSet<NodeId>,
    /// The slot the state reflected when the replica opened (see [`Replica::state_slot_at_open`]).
    state_slot_at_open: Slot,
    /// As master: the read leases granted and presumed (docs/read-leases.md). Kept across
    /// step-downs: a lease granted in an earlier tenure may still run.
    pub(super) grants: Grants,
    /// As follower: this node's read lease and its asks.
    pub(super) held_lease: Held,
    /// Whether read leases may be asked for and granted now (every member speaks their
    /// protocol; see [`Replica::set_read_leases_allowed`]).
    pub(super) read_leases_allowed: bool,
    /// Whether this node should offer itself as master (see [`Replica::update_candidacy`]).
    candidacy: candidacy::Candidacy,
    /// The reason of the last [`Replica::update_candidacy`], if it withdrew.
    withdrawal: Option<Withdrawal>,
}

impl<S: Storage> Replica<S> {
    /// Opens a replica on `storage`: restores the snapshot and replays the chosen log.
    /// `nodes` lists every replica, this one included. `incarnation` must differ on every
    /// start of the node (use the restart epoch).
    pub fn open(
        me: NodeId,
        nodes: &[NodeId],
        config: ReplicaConfig,
        limits: Limits,
        storage: S,
        incarnation: u32,
    ) -> Result<Self, OpenError> {
        let mut ids = nodes.to_vec();
        if !ids.contains(&me) {
            ids.push(me);
        }
        Self::open_with_seed(me, Membership::of_voters(&ids), config, limits, storage, incarnation)
    }

    /// [`Replica::open`] with the configuration to start from while the log records none:
    /// a new cluster's members from its config files (all voters, with their addresses), or
    /// for a node joining an existing cluster, the membership a member reported (in which
    /// this node is a learner). Once the log records a configuration, the seed is unused.
    pub fn open_with_seed(
        me: NodeId,
        seed: Membership,
        config: ReplicaConfig,
        limits: Limits,
        mut storage: S,
        incarnation: u32,
    ) -> Result<Self, OpenError> {
        config.validate()?;
        let recovered = storage.recover()?;
        let engine = storage.state_engine();
        let engine_failed = |what: &str, e: crate::engine::EngineError| StorageError::backend(what.to_string(), e);
        let opened = StateMachine::open(Arc::clone(&engine)).map_err(|e| engine_failed("opening the state", e))?;
        let stored_snapshot = recovered.snapshot.is_some();
        let (mut machine, applied) = match (opened, &recovered.snapshot) {
            (Some((machine, applied)), None) => (machine, applied),
            (Some((machine, applied)), Some(snapshot)) if snapshot.index <= applied => (machine, applied),
            // A snapshot newer than the engine's state: installed from a peer (or left by a
            // release before the state engine) and not yet checkpointed, or an install that
            // a crash interrupted. Installed (again) now.
            (_, Some(snapshot)) => {
                let corrupt = |detail: String| StorageError::Corrupt {
                    what: format!("snapshot at slot {}", snapshot.index),
                    detail,
                };
                let installed = match &snapshot.data {
                    SnapshotData::Bytes(bytes) => StateMachine::from_snapshot_bytes_on(bytes, Arc::clone(&engine)),
                    // Checked first: a damaged file must not cost the state it would replace.
                    SnapshotData::File(path) => StateMachine::check_snapshot_file(path)
                        .and_then(|()| StateMachine::install_snapshot_file(path, Arc::clone(&engine))),
                };
                let mut machine = installed.map_err(|e| corrupt(e.to_string()))?;
                machine.flush_through(snapshot.index).map_err(|e| engine_failed("writing the installed state", e))?;
                (machine, snapshot.index)
            }
            (None, None) => {
                // Nothing applied yet; whatever an interrupted first write left goes.
                engine.clear().map_err(|e| engine_failed("clearing the state", e))?;
                (StateMachine::on_engine(engine).map_err(|e| engine_failed("creating the state", e))?, 0)
            }
        };
        #[cfg(feature = "negative-controls")]
        if config.broken(super::config::LogBreakage::AppliedBeforeState) {
            machine.break_applied_before_state();
        }
        #[cfg(feature = "negative-controls")]
        if config.broken(super::config::LogBreakage::StaleRecentWrite) {
            machine.break_recent_writes();
        }
        #[cfg(feature = "negative-controls")]
        if config.broken(super::config::LogBreakage::TailWithoutCompaction) {
            machine.break_tail_compaction();
        }
        #[cfg(feature = "negative-controls")]
        if config.broken(super::config::LogBreakage::LiveValueDropped) {
            machine.break_live_values();
        }
        #[cfg(not(feature = "negative-controls"))]
        let _ = &mut machine;
        // The state reflects every slot through `applied`, so those slots are what a
        // snapshot at `applied` would cover: dropped, as a restored snapshot's are. The log
        // may even lack some of them (the state engine can be durable ahead of slots this
        // node only learned), so it must never serve them to a peer.
        let mut slots = recovered.slots;
        let slots = slots.split_off(&applied.saturating_add(1));
        let commit = recovered.commit.max(applied);
        if let Some(&first) = slots.keys().next().filter(|&&first| first > applied.saturating_add(1)) {
            // A node that joined holds slots accepted before its state arrived; it applies
            // nothing locally until it caught up from its peers.
            tracing::info!(node = %me, applied, first, "the log starts after the state; catching up from peers");
        }
        let compacted = applied;
        let candidacy_config = config.candidacy;
        let mut replica = Replica {
            me,
            seed,
            change_gate: None,
            config,
            limits,
            incarnation,
            storage,
            acceptor: Acceptor::recovered(recovered.promised, slots, commit),
            learner: {
                let mut learner = Learner::recovered(machine, applied, 0, compacted);
                learner.set_stored_snapshot(stored_snapshot);
                learner
            },
            state_slot_at_open: applied,
            mastership: None,
            master_hint: None,
            role: Role::Follower,
            lessor: Lessor::new(),
            deposed_expiries: Vec::new(),
            awaiting: BTreeSet::new(),
            alarm_raised_at: None,
            next_seq: 0,
            next_tick: None,
            outbox: Outbox::new(me),
            stopped: None,
            counts: ReplicaCounts::default(),
            snapshots_sent: std::collections::HashMap::new(),
            snapshot_wanted_by: BTreeSet::new(),
            grants: Grants::default(),
            held_lease: Held::default(),
            read_leases_allowed: true,
            candidacy: candidacy::Candidacy::new(candidacy_config),
            withdrawal: None,
        };
        replica.advance_commit();
        replica.apply_chosen(Instant::from_nanos(0));
        Ok(replica)
    }

    /// The slot the state reflected when the replica opened, before the log after it was
    /// replayed. Below the point the log was durably dropped through, it means the log was
    /// dropped behind a state that was not durable, a broken durability rule (the simulator
    /// reports it as a violation).
    pub fn state_slot_at_open(&self) -> Slot {
        self.state_slot_at_open
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The configuration in force: the last one the log recorded and this node applied, or
    /// the seed while none is recorded. Quorums count its voters; the election must be
    /// given the same (see `leasekv_lease::ElectionCore::set_configuration`).
    pub fn membership(&self) -> &Membership {
        in_force(&self.learner, &self.seed)
    }

    /// The configuration epoch that removed this node, if the log says it was removed: it
    /// then takes no part in anything (and its driver should say so and stop).
    pub fn removed(&self) -> Option<u64> {
        let membership = self.learner.machine().membership();
        membership.was_removed(self.me).then_some(membership.epoch)
    }

    /// The configuration to give the election: the one in force, which the log chose and
    /// this node applied (under the `early-switch` negative control, also every change this
    /// node has merely accepted).
    pub fn election_membership(&self) -> Membership {
        let mut membership = self.membership().clone();
        if self.config.broken(LogBreakage::EarlySwitch) {
            let commit = self.learner.commit();
            for (_, accepted) in self.acceptor.report_from(commit + 1, commit) {
                for proposal in &accepted.entry.proposals {
                    if let Command::ChangeMembers(change) = &proposal.command {
                        if let Ok((next, _)) = membership.after(change) {
                            membership = next;
                        }
                    }
                }
            }
        }
        membership
    }

    /// The election saw a configuration epoch this node has not applied: the log has
    /// chosen more than this node knows. Asks the master for the chosen entries when one is
    /// known, else one member, a different one each retry interval (one at a time: the
    /// answer may be a whole snapshot), until one that applied it answers.
    pub fn catch_up(&mut self, now: Instant) {
        if self.stopped.is_some() || self.removed().is_some() {
            return;
        }
        let others: Vec<NodeId> = self.peers().into_iter().filter(|p| *p != self.me).collect();
        if others.is_empty() || !self.learner.may_fetch(now, self.config.retry_interval) {
            return;
        }
        // The master when one is known: every peer asked may answer with a whole snapshot,
        // and a joining member that asked each in turn had two of them build one (a GiB
        // each, seconds of CPU beside the clients' writes).
        let turn = now.as_nanos() / self.config.retry_interval.as_nanos().max(1) as u64;
        let peer =
            self.master_hint.filter(|m| others.contains(m)).unwrap_or(others[(turn % others.len() as u64) as usize]);
        self.send(peer, LogMessage::Fetch { from: self.learner.commit() + 1 });
    }

    /// Rule 5 of docs/membership.md, as the election reports it
    /// (`ElectionCore::change_allowed_after`): the configuration epoch of the last lease round
    /// a majority answered, and the instant after which the next voter change may go out.
    pub fn set_change_gate(&mut self, gate: Option<(u64, Instant)>) {
        self.change_gate = gate;
    }

    /// Flips a bit of `key`'s value in this replica's state only, as silent corruption of
    /// its data would (the corruption check's negative control); false if there is no such
    /// key.
    #[cfg(feature = "negative-controls")]
    pub fn corrupt_value(&mut self, key: &[u8]) -> bool {
        self.learner.machine_mut().corrupt_value(key)
    }

    /// This run's incarnation (it changes with every restart; proposal ids carry it).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Whether applied slots are reported ([`ReplicaConfig::trace_applies`]: the
    /// simulator's oracles).
    pub fn traces_applies(&self) -> bool {
        self.config.trace_applies
    }

    /// The request limits and the space quota in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A consistent view of the applied state as of now, to read on another thread while the
    /// replica goes on (backups, hashes): see [`crate::state::StateView`].
    pub fn view(&mut self) -> Result<crate::state::StateView, StorageError> {
        if let Some(failure) = &self.stopped {
            // The state in memory may hold part of a slot the failed engine never got: a
            // view would write it.
            return Err(StorageError::Io(format!("the replica stopped: {failure}")));
        }
        self.learner.view().map_err(|e| StorageError::backend("taking a view of the state", e))
    }

    /// The state machine (for serializable reads and inspection).
    pub fn state(&self) -> &StateMachine {
        self.learner.machine()
    }

    /// Highest slot applied to the state machine.
    pub fn applied_index(&self) -> Slot {
        self.learner.applied()
    }

    /// The slot this replica's last snapshot covers (0: none yet); the log behind it may
    /// be compacted.
    pub fn snapshot_index(&self) -> Slot {
        self.learner.snapshot_index()
    }

    /// The highest log round this node promised or heard of: it rises once per master
    /// takeover (the new master's phase 1, its accepts and its commit heartbeat, every
    /// retry interval, reach every node), so it is the cluster's term as every node knows
    /// it, followers included. After a restart it is the round promised (durable) until the
    /// master's next heartbeat arrives.
    pub fn known_round(&self) -> u64 {
        self.acceptor.highest_seen().round
    }

    /// The highest log ballot this node promised or heard of (its round is
    /// [`Self::known_round`]): whose takeover it was, too.
    pub fn known_ballot(&self) -> super::LogBallot {
        self.acceptor.highest_seen()
    }

    /// Events counted since the replica opened.
    pub fn counts(&self) -> ReplicaCounts {
        self.counts
    }

    /// Highest slot known chosen, with every slot below it.
    pub fn commit_index(&self) -> Slot {
        self.learner.commit()
    }

    /// The node this one believes is master.
    pub fn master_hint(&self) -> Option<NodeId> {
        if self.is_master(None) {
            Some(self.me)
        } else {
            self.master_hint
        }
    }

    /// Whether this node is master, has taken over the log and may serve linearizable reads
    /// at `now`.
    pub fn is_ready_master(&self, now: Instant) -> bool {
        self.is_master(Some(now)) && self.role.is_ready()
    }

    /// Whether this node leads the log (it took over and has not given it up), whatever its
    /// lease says right now.
    pub fn leads_the_log(&self) -> bool {
        self.role.is_ready()
    }

    /// Whether the election says this node is master at `now` (its lease is valid), whether
    /// or not it has taken over the log yet: requests for the master are served here, not
    /// forwarded.
    pub fn is_master_at(&self, now: Instant) -> bool {
        self.is_master(Some(now))
    }

    /// Gives the storage back (the simulator crashes it and opens a new replica on it).
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Why the replica stopped, if its storage failed: it then acknowledges nothing, and
    /// the process hosting it should release mastership and exit (a restart reopens the
    /// storage and recovers from what is on disk).
    pub fn storage_failure(&self) -> Option<&StorageFailure> {
        self.stopped.as_ref()
    }

    /// The storage, for drivers that inspect it.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The election's verdict: this node's mastership (or none) and who it thinks the
    /// master is. Call it whenever the election reports a change.
    pub fn set_mastership(&mut self, now: Instant, mastership: Option<Mastership>, hint: Option<NodeId>) {
        self.master_hint = hint;
        let previous = self.mastership;
        self.mastership = mastership;
        let same_term = matches!((previous, mastership), (Some(a), Some(b)) if a.term == b.term);
        if !same_term && !matches!(self.role, Role::Follower) {
            // A new term means another master may have written in between: take over again.
            self.step_down();
        }
        self.check_mastership(now);
        if self.is_master(Some(now)) && matches!(self.role, Role::Follower) && self.stopped.is_none() {
            self.start_leading(now);
        }
        self.drain_local(now);
    }

    /// Handles a message from a peer.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, message: LogMessage) {
        if self.stopped.is_some() || self.removed().is_some() {
            return;
        }
        if !message.ballots_plausible() {
            tracing::warn!(node = %self.me, peer = %from, "dropped a log message whose ballot round is beyond any real one");
            return;
        }
        self.check_mastership(now);
        self.dispatch(now, from, message);
        self.drain_local(now);
    }

    /// Handles a snapshot received from a peer into the file at `path` (what
    /// [`LogMessage::Snapshot`] carries in memory): checked and installed frame by frame,
    /// so that a state of any size arrives in bounded memory. The file becomes the
    /// storage's (see [`crate::storage::SnapshotData::File`]), or is deleted if unused.
    pub fn handle_snapshot_file(&mut self, now: Instant, index: Slot, path: std::path::PathBuf) {
        if self.stopped.is_some() || self.removed().is_some() {
            let _ = std::fs::remove_file(&path);
            return;
        }
        self.check_mastership(now);
        self.on_snapshot(now, index, SnapshotData::File(path));
        self.drain_local(now);
    }

    /// Handles a snapshot from a peer installed, checked and synced in a staged engine while
    /// it arrived ([`super::StagedSnapshot`]): adopted as this replica's state in one step,
    /// or given up if the replica stopped, was removed or applied as far meanwhile.
    pub fn handle_staged_snapshot(&mut self, now: Instant, snapshot: super::StagedSnapshot) {
        if self.stopped.is_some() || self.removed().is_some() {
            snapshot.discard();
            return;
        }
        self.check_mastership(now);
        self.adopt_staged_snapshot(now, snapshot);
        self.drain_local(now);
    }

    /// Handles the timeout asked for by [`Replica::poll_timeout`] (early or late calls are fine).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopped.is_some() {
            return;
        }
        self.check_mastership(now);
        if self.next_tick.is_some_and(|t| t <= now) {
            self.next_tick = None;
            self.on_tick(now);
        }
        self.expire_leases(now);
        self.choose_held_back(now);
        self.drain_local(now);
    }

    /// The next instant this replica wants [`Replica::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped.is_some() {
            return None;
        }
        let mut next = self.next_tick;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        if !matches!(self.role, Role::Follower) {
            consider(self.mastership.map(|m| m.valid_until));
        }
        if self.lessor.is_running() && self.can_queue_expiry() {
            consider(self.lessor.next_deadline());
        }
        consider(self.next_lease_expiry());
        consider(self.candidacy.next_deadline());
        next
    }

    /// Decides whether this node should offer itself as master now (see
    /// [`CandidacyConfig`]): `None` when it should, else why not. The driver hands the
    /// answer to the election's candidacy switch; a master that withdraws gives mastership
    /// up through it.
    pub fn update_candidacy(&mut self, now: Instant) -> Option<&Withdrawal> {
        let master = self.is_master(Some(now));
        self.candidacy.mastership(now, master, self.role.is_ready());
        let withdrawal = self.candidacy.withdrawal(now, self.learner.applied());
        let withdrawal = if self.corrupt_among_sound() { Some(Withdrawal::Corrupt) } else { withdrawal };
        // One line per change of reason, not per new figure in it (the commit a node that
        // catches up is behind moves with every announcement).
        let kind = |w: &Option<Withdrawal>| w.as_ref().map(std::mem::discriminant);
        if kind(&withdrawal) != kind(&self.withdrawal) {
            match &withdrawal {
                Some(why) => tracing::warn!(node = %self.me, reason = %why, "withdrawing from the election"),
                None => tracing::info!(node = %self.me, "a candidate for master again"),
            }
        }
        self.withdrawal = withdrawal;
        self.withdrawal.as_ref()
    }

    /// Whether a CORRUPT alarm names this node and not every other voter (see
    /// [`Withdrawal::Corrupt`]).
    fn corrupt_among_sound(&self) -> bool {
        let marked = |node: NodeId| {
            let alarm = crate::command::Alarm { member: u64::from(node.0), kind: crate::command::AlarmKind::Corrupt };
            self.learner.machine().alarms().any(|a| *a == alarm)
        };
        marked(self.me) && self.membership().voters().into_iter().any(|voter| voter != self.me && !marked(voter))
    }

    /// Why this node withdrew from the election at the last [`Replica::update_candidacy`].
    pub fn withdrawal(&self) -> Option<&Withdrawal> {
        self.withdrawal.as_ref()
    }

    /// A snapshot sent to this node could not be installed (the driver installs the
    /// snapshots that arrive in chunks, off the replica): the node withdraws from the
    /// election until an install succeeds or the log catches it up, and asks again after
    /// [`INSTALL_RETRY`] (at once, a master would build another snapshot that fails alike).
    pub fn snapshot_install_failed(&mut self, now: Instant, reason: String) {
        self.candidacy.install_failed(reason);
        self.learner.hold_fetches_until(now.saturating_add(INSTALL_RETRY));
    }

    /// A master announced every slot through `commit` chosen.
    pub(super) fn candidacy_announced(&mut self, now: Instant, commit: Slot) {
        self.candidacy.announced(now, commit);
    }

    /// A snapshot was installed.
    pub(super) fn candidacy_installed(&mut self) {
        self.candidacy.installed();
    }

    /// Proposes a client command. It is validated first; on success the result arrives as a
    /// [`Completion`] with the returned id.
    pub fn propose(&mut self, now: Instant, command: Command) -> Result<ProposalId, RequestError> {
        let command = self.admit(now, command)?;
        if self.awaiting.len() >= self.config.max_pending_commands {
            return Err(RequestError::Busy { pending: self.awaiting.len() });
        }
        let id = self.next_proposal_id();
        self.awaiting.insert(id);
        self.role.enqueue(super::types::Proposal { id, command });
        self.fill_pipeline(now);
        self.drain_local(now);
        Ok(id)
    }

    /// Reads. Linearizable reads need the ready master with a valid election lease;
    /// serializable reads are answered from local state by any replica.
    pub fn read(
        &self,
        now: Instant,
        request: &RangeRequest,
        consistency: ReadConsistency,
    ) -> Result<(RangeResponse, Revision), RequestError> {
        self.check_stopped()?;
        self.check_not_corrupt()?;
        validate_range(request, &self.limits)?;
        if consistency == ReadConsistency::Linearizable && !self.config.broken(LogBreakage::FollowerReads) {
            self.require_ready(now)?;
        }
        let response = self.learner.machine().range(request)?;
        Ok((response, self.learner.machine().revision()))
    }

    /// [`Self::read`] at a past revision (etcd's `RangeRequest.revision`; 0 or less is the
    /// current one), served from the history; compacted and future revisions are etcd's
    /// errors.
    pub fn read_at(
        &self,
        now: Instant,
        request: &RangeRequest,
        revision: Revision,
        consistency: ReadConsistency,
    ) -> Result<(RangeResponse, Revision), RequestError> {
        if revision <= 0 {
            return self.read(now, request, consistency);
        }
        self.check_stopped()?;
        self.check_not_corrupt()?;
        validate_range(request, &self.limits)?;
        if consistency == ReadConsistency::Linearizable && !self.config.broken(LogBreakage::FollowerReads) {
            self.require_ready(now)?;
        }
        let response = self.learner.machine().range_at(request, revision)?;
        Ok((response, self.learner.machine().revision()))
    }

    /// [`Self::read_at`] decided here and served elsewhere: every check is made now (a
    /// linearizable read needs the ready master), and the job reads the state as it is now
    /// (or at the past `revision`) on whatever thread runs it ([`super::ReadJob`]).
    pub fn read_job(
        &mut self,
        now: Instant,
        request: RangeRequest,
        revision: Revision,
        consistency: ReadConsistency,
    ) -> Result<super::ReadJob, RequestError> {
        self.check_stopped()?;
        self.check_not_corrupt()?;
        validate_range(&request, &self.limits)?;
        if consistency == ReadConsistency::Linearizable && !self.config.broken(LogBreakage::FollowerReads) {
            self.require_ready(now)?;
        }
        let machine = self.learner.machine();
        let current = machine.revision();
        let in_place = self.config.point_reads_in_place && !self.config.broken(LogBreakage::StaleReadView);
        if in_place && revision <= 0 && request.range.range_end.is_empty() {
            return Ok(super::ReadJob::answered(machine.range(&request).map_err(Into::into), current));
        }
        let floor = machine.compacted_revision().max(1);
        let revision = match self.config.broken(LogBreakage::StaleReadView) && revision <= 0 && current > floor {
            true => current - 1,
            false => revision,
        };
        let view = self.learner.read_view(revision)?;
        Ok(super::ReadJob::new(view, request, current, self.limits.max_response_bytes))
    }

    /// A keepalive: resets the lease's countdown to its full TTL. Master only. Returns the TTL
    /// (seconds); an unknown or expiring lease is [`KvError::LeaseNotFound`].
    pub fn keep_alive(&mut self, now: Instant, id: LeaseId) -> Result<i64, RequestError> {
        self.check_stopped()?;
        self.check_mastership(now);
        self.require_ready(now)?;
        if self.learner.machine().lease(id).is_none() {
            return Err(KvError::LeaseNotFound(id).into());
        }
        match self.lessor.keep_alive(now, id) {
            Some(ttl) => Ok(ttl.as_secs() as i64),
            None => Err(KvError::LeaseNotFound(id).into()),
        }
    }

    /// A lease's remaining time and keys. Master only (only it has the deadlines).
    pub fn lease_status(&self, now: Instant, id: LeaseId) -> Result<LeaseStatus, RequestError> {
        self.check_stopped()?;
        self.require_ready(now)?;
        let lease = self.learner.machine().lease(id).ok_or(KvError::LeaseNotFound(id))?;
        let remaining = self.lessor.remaining(now, id).unwrap_or(Duration::ZERO);
        Ok(LeaseStatus {
            id,
            name: lease.name.clone(),
            granted_ttl: lease.ttl,
            remaining,
            keys: lease.keys.iter().map(<[u8]>::to_vec).collect(),
        })
    }

    /// Every live lease with its name and remaining time. Master only.
    pub fn lease_list(&self, now: Instant) -> Result<Vec<LeaseStatus>, RequestError> {
        self.check_stopped()?;
        self.require_ready(now)?;
        Ok(self
            .learner
            .machine()
            .leases()
            .map(|lease| LeaseStatus {
                id: lease.id,
                name: lease.name.clone(),
                granted_ttl: lease.ttl,
                remaining: self.lessor.remaining(now, lease.id).unwrap_or(Duration::ZERO),
                keys: Vec::new(),
            })
            .collect())
    }

    /// Why the replica stopped, if it did (a storage failure).
    pub fn stopped(&self) -> Option<&StorageFailure> {
        self.stopped.as_ref()
    }

    // ---- internals shared by the other files of this module ----

    /// Every member of the configuration in force, voters and learners: who hears the log.
    pub(super) fn peers(&self) -> Vec<NodeId> {
        self.membership().ids()
    }

    /// Whether the election says this node is master (at `now`, when given).
    pub(super) fn is_master(&self, now: Option<Instant>) -> bool {
        match (self.mastership, now) {
            (Some(m), Some(now)) => now < m.valid_until,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Steps down the moment the election lease is no longer valid.
    pub(super) fn check_mastership(&mut self, now: Instant) {
        if !matches!(self.role, Role::Follower) && !self.is_master(Some(now)) {
            self.step_down();
        }
    }

    pub(super) fn next_proposal_id(&mut self) -> ProposalId {
        self.next_seq += 1;
        ProposalId { node: self.me, incarnation: self.incarnation, seq: self.next_seq }
    }

    /// Sends a message that needs no durable state behind it.
    pub(super) fn send(&mut self, to: NodeId, message: LogMessage) {
        self.outbox.send(to, message);
    }

    /// Sends a message once the writes before it are durable.
    pub(super) fn send_durable(&mut self, to: NodeId, message: LogMessage) {
        if self.config.broken(LogBreakage::EarlyAck) {
            self.send(to, message);
        } else {
            self.outbox.hold(to, message);
        }
    }

    pub(super) fn broadcast(&mut self, message: LogMessage) {
        for to in self.peers() {
            self.send(to, message.clone());
        }
    }

    pub(super) fn drain_local(&mut self, now: Instant) {
        // Bounded: each local message is answered by at most one local message.
        let mut budget = 1_000_000usize;
        while let Some(message) = self.outbox.next_local() {
            self.dispatch(now, self.me, message);
            budget -= 1;
            if budget == 0 {
                break;
            }
        }
    }

    fn dispatch(&mut self, now: Instant, from: NodeId, message: LogMessage) {
        if self.stopped.is_some() {
            return;
        }
        match message {
            LogMessage::Prepare { ballot, from: first } => self.on_prepare(now, from, ballot, first),
            LogMessage::Promise { ballot, slots, commit, compacted } => {
                self.on_promise(now, from, ballot, slots, commit, compacted)
            }
            LogMessage::Accept { ballot, slot, entry, commit } => {
                self.on_accept(now, from, ballot, slot, entry, commit)
            }
            LogMessage::Accepted { ballot, slot, applied } => self.on_accepted(now, from, ballot, slot, applied),
            LogMessage::Reject { ballot, promised } => self.on_reject(now, ballot, promised),
            LogMessage::Commit { ballot, commit } => self.on_commit(now, from, ballot, commit),
            LogMessage::Fetch { from: first } => self.on_fetch(now, from, first),
            LogMessage::Entries { entries, commit } => self.on_entries(now, from, entries, commit),
            LogMessage::Snapshot { index, data } => self.on_snapshot(now, index, SnapshotData::Bytes(data)),
            LogMessage::ReadLeaseAsk { ballot, incarnation, seq } => {
                self.on_read_lease_ask(now, from, ballot, incarnation, seq)
            }
            LogMessage::ReadLeaseGrant { ballot, incarnation, seq, valid_for_nanos, through } => {
                self.on_read_lease_grant(from, ballot, incarnation, seq, valid_for_nanos, through)
            }
            LogMessage::ReadLeaseReceived { ballot, incarnation, slot } => {
                self.on_read_lease_received(now, from, ballot, incarnation, slot)
            }
        }
    }

    /// Records a storage failure: the replica stops acknowledging anything.
    pub(super) fn persist(&mut self, result: Result<(), StorageError>) -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    pub(super) fn fail(&mut self, error: StorageError) {
        tracing::error!(node = %self.me, %error, "storage failed; replica stops");
        self.stopped = Some(StorageFailure::new(error));
        self.outbox.drop_held();
        self.step_down();
    }

    pub(super) fn schedule_tick(&mut self, now: Instant) {
        let at = now.saturating_add(self.config.retry_interval);
        self.next_tick = Some(self.next_tick.map_or(at, |t| t.min(at)));
    }
}

/// The configuration in force (see [`Replica::membership`]), from the two fields it depends
/// on, so that the master's hot path can read it while it holds its role mutably.
pub(super) fn in_force<'a>(learner: &'a Learner, seed: &'a Membership) -> &'a Membership {
    let recorded = learner.machine().membership();
    if recorded.is_recorded() {
        recorded
    } else {
        seed
    }
}
