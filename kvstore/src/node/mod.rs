//! The node: the replica and every decision between it and the network, without I/O.
//!
//! A [`Node`] takes what reaches a member (client requests only the master can answer,
//! forwards from followers and the master's answers, log messages, the election's status,
//! timeouts, the results of what its driver ran) and says what must happen, in one
//! [`Effects`] value (log messages and forwards to send, answers for the node's own
//! callers, reads to run, a sync, a checkpoint, a snapshot for peers, the engine write, a
//! step-down, a configuration for the election). It decides:
//! - where a master-only request is served: here as master, or forwarded once to the
//!   master the election names, never while the link to it is known to be down;
//! - what a forward whose answer will not come tells its caller ([`forward::Forwards`]):
//!   a write may have been applied, so it is "indeterminate", never retried;
//! - that a renewal of mastership that arrived with a timeout is applied before it
//!   ([`Node::handle_timeout`]), so that a master renewed all along does not give up its
//!   log round;
//! - when the configuration in force changed, whether this node was removed, and when the
//!   log must catch up with a configuration a peer has seen;
//! - where a sync runs, when the applied commands are written to the state engine, when a
//!   checkpoint and a snapshot for peers are due and in which format, whether read leases
//!   may be used (the cluster's protocol version, [`Feature`]), and when the auth store
//!   changed or the storage failed.
//!
//! One driver ([`driver::Driver`]) carries it out, generic over its IO: the tokio loop in
//! `server` and the store simulator are two instantiations of the same code (TigerBeetle's
//! way: the simulator runs the production replica and its driver, not a model of them).

pub mod driver;
pub mod effects;
pub mod features;
pub mod forward;
pub mod held;
pub mod lease_reads;

pub use driver::{Driver, Input, NodeIo};
pub use effects::{Effects, SnapshotFormat, SyncJob, SyncPlace, TurnFacts};
pub use features::Feature;

pub use forward::{
    expect_answer, ForwardId, Forwards, MasterAnswer, MasterRequest, MasterResult, ServedForwards, FORWARD_TIMEOUT,
};

use crate::command::Command;
use crate::log::{LogBallot, LogMessage, ProposalId, ReadConsistency, ReadJob, Replica, RequestError, SyncTicket};
use crate::storage::{Storage, StorageError};
use leasekv_lease::{Instant, Mastership, NodeId};
use std::collections::HashMap;
use std::time::Duration;

/// Longest time applied commands wait to be written to the state engine by default (see
/// [`Node::set_engine_write_delay`]).
pub const ENGINE_WRITE_DELAY: Duration = Duration::from_millis(5);

/// A sync runs on the driver's loop only while the disk is this fast: one slow sync sends
/// the next ones off the loop until one there is quick again.
const FAST_SYNC: Duration = Duration::from_millis(1);

/// Runs a read the node decided ([`Effects::reads`]) and gives its answer as a master
/// request's: what a driver calls on its reader thread before answering the read's asker.
pub fn run_read(job: ReadJob) -> MasterResult {
    job.run().map(|(response, revision)| MasterAnswer::Read(response, revision))
}

/// Who waits for the answer to a master request served on this node.
#[derive(Debug)]
pub enum Asker<W> {
    /// A caller on this node, with the driver's waiter.
    Local(W),
    /// A follower that forwarded it, under its id.
    Remote(NodeId, ForwardId),
}

/// The election's view as the node acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ElectionView {
    /// `Some` while this node is master: its term and until when.
    pub master: Option<Mastership>,
    /// The node believed to be master.
    pub hint: Option<NodeId>,
}

/// What the election reports that the node reads before it proposes or catches up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ElectionGauges {
    /// Rule 5 of docs/membership.md: when the next configuration change may go out.
    pub change_gate: Option<(u64, Instant)>,
    /// The highest configuration epoch seen in a peer's election message.
    pub configuration_seen: u64,
}

/// A message between nodes about master requests (the log's own go as [`LogMessage`]).
#[derive(Debug, Clone)]
pub enum ForwardMessage {
    /// A follower hands a request to the master.
    Request(ForwardId, MasterRequest),
    /// The master's answer to a forwarded request.
    Answer(ForwardId, MasterResult),
}

/// A node deliberately broken, for the simulator's negative controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeBreakage {
    /// The real thing.
    #[default]
    None,
    /// A renewal that arrived with a timeout is applied after it: the master finds its
    /// previous lease run out and gives up its log round (found by scalebench once).
    RenewalAfterTimeout,
    /// A forwarded write whose proposal was made is answered "not master" when the
    /// mastership ends before it completes, although it may still be chosen.
    NotMasterAfterProposal,
    /// The driver takes the election's status only with a timeout (and when it wakes the
    /// loop by itself), not before every input: an input that follows a long one is judged
    /// against a lease long run out (the server's loop before the one driver), and after
    /// a release, against a mastership given up (the simulator's `master-after-release`
    /// oracle; unit tests in `kvstore/src/node/tests.rs`).
    StatusOnlyWithTimeout,
}

impl NodeBreakage {
    /// Every broken variant the simulator catches, with its name, as `--break` takes it.
    pub const ALL: [(&'static str, NodeBreakage); 3] = [
        ("renewal-after-timeout", NodeBreakage::RenewalAfterTimeout),
        ("not-master-after-proposal", NodeBreakage::NotMasterAfterProposal),
        ("status-only-with-timeout", NodeBreakage::StatusOnlyWithTimeout),
    ];
}

/// One member: its replica, the forwards it made and the requests it serves as master.
/// `W` is the driver's waiter for a local caller's answer.
pub struct Node<S: Storage, W> {
    replica: Replica<S>,
    forwards: Forwards<W>,
    /// Forwarded writes and keepalives served as master, so that one delivered twice is
    /// served once.
    served: ServedForwards,
    /// The master's answers to this node's forwards, waiting for this node to apply the
    /// revision they reflect.
    held: held::HeldAnswers<W>,
    /// Who waits for each proposal this node made as master.
    proposals: HashMap<ProposalId, Asker<W>>,
    /// Linearizable reads waiting to be answered under this node's read lease.
    lease_reads: lease_reads::LeaseReads<W>,
    /// The latest instant an input brought (for releasing lease reads in `drain_ready`).
    last_now: Instant,
    /// The master as last seen, so forwards to a deposed one are given up at once.
    known_master: Option<(NodeId, LogBallot)>,
    /// The configuration epoch last reported in [`Effects::configuration`].
    seen_epoch: Option<u64>,
    removal_reported: bool,
    /// The candidacy last reported in [`Effects::candidacy`].
    candidacy_reported: Option<bool>,
    gauges: ElectionGauges,
    /// Produced by the handlers, handed over by [`Node::turn_effects`] (the answers and
    /// forwards also by [`Node::input_effects`]).
    pending: Effects<W>,
    /// The sync off the loop in flight, and when it began.
    sync_in_flight: Option<(SyncTicket, Instant)>,
    /// How long the last finished sync took (wherever it ran).
    last_sync_took: Duration,
    /// Longest time applied commands wait for their engine write.
    engine_write_delay: Duration,
    /// When the commands applied and not yet in the engine must be written.
    engine_write_due: Option<Instant>,
    /// The lowest peer protocol version every member speaks ([`Feature`]).
    cluster_version: u32,
    /// The auth store last reported in [`Effects::auth`]: its revision, switch and secret.
    auth_reported: Option<(u64, bool, Vec<u8>)>,
    /// The storage failure was reported in [`Effects::storage_failed`].
    failure_reported: bool,
    breakage: NodeBreakage,
}

impl<S: Storage, W> Node<S, W> {
    /// A node around `replica`.
    pub fn new(replica: Replica<S>) -> Self {
        let incarnation = replica.incarnation();
        Node {
            replica,
            forwards: Forwards::for_incarnation(incarnation),
            served: ServedForwards::default(),
            held: held::HeldAnswers::default(),
            proposals: HashMap::new(),
            lease_reads: lease_reads::LeaseReads::default(),
            last_now: Instant::from_nanos(0),
            known_master: None,
            seen_epoch: None,
            removal_reported: false,
            candidacy_reported: None,
            gauges: ElectionGauges::default(),
            pending: Effects::default(),
            sync_in_flight: None,
            last_sync_took: Duration::ZERO,
            engine_write_delay: ENGINE_WRITE_DELAY,
            engine_write_due: None,
            // Every feature until the driver says otherwise (the simulator, tests).
            cluster_version: u32::MAX,
            auth_reported: None,
            failure_reported: false,
            breakage: NodeBreakage::None,
        }
    }

    /// Breaks the node on purpose (the simulator's negative controls).
    pub fn set_breakage(&mut self, breakage: NodeBreakage) {
        self.breakage = breakage;
    }

    /// How the node is broken on purpose, if it is (the driver has a control of its own).
    pub(crate) fn breakage(&self) -> NodeBreakage {
        self.breakage
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.replica.id()
    }

    /// The replica, for what the driver reads locally (serializable reads, status, views).
    pub fn replica(&self) -> &Replica<S> {
        &self.replica
    }

    /// The replica, when the node is done (a simulated crash takes its storage).
    pub fn into_replica(self) -> Replica<S> {
        self.replica
    }

    /// Forwards waiting for the master's answer.
    pub fn forwards_pending(&self) -> usize {
        self.forwards.len()
    }

    /// How the linearizable reads that reached this node as follower were served.
    pub fn lease_read_counts(&self) -> lease_reads::LeaseReadCounts {
        self.lease_reads.counts()
    }

    /// The election's latest status: who is master, and until when this node is.
    pub fn handle_election(&mut self, now: Instant, view: ElectionView) {
        self.replica.set_mastership(now, view.master, view.hint);
    }

    /// What the election reported after its latest step (read before proposing a change
    /// and before deciding whether to catch up).
    pub fn set_election_gauges(&mut self, gauges: ElectionGauges) {
        self.gauges = gauges;
    }

    /// A serializable read of this node's own state (at a past `revision`, or 0: the
    /// current one), decided now and read by whoever runs the job.
    pub fn serializable_read(
        &mut self,
        now: Instant,
        request: crate::command::RangeRequest,
        revision: crate::types::Revision,
    ) -> Result<ReadJob, RequestError> {
        self.replica.read_job(now, request, revision, ReadConsistency::Serializable)
    }

    /// A request only the master can answer, from this node's caller `waiter`: served here,
    /// or forwarded once to the master the election names. `link_down` says whether the
    /// link to a node is known to be broken: a request never leaves then, so "not master"
    /// is the truth, and the caller waits for the next master instead of an
    /// "indeterminate" answer later.
    pub fn handle_client(
        &mut self,
        now: Instant,
        request: MasterRequest,
        waiter: W,
        link_down: impl Fn(NodeId) -> bool,
    ) {
        self.last_now = self.last_now.max(now);
        let request = match request {
            MasterRequest::Read(read, revision) if !self.replica.is_master_at(now) => {
                match self.replica.read_lease_target(now) {
                    Some(target) => {
                        // Wait no longer than the lease: a read that finds it renewed by
                        // then goes to the master rather than waiting on.
                        let lease_end = self.replica.read_lease_until(now).unwrap_or(now);
                        let until = now.saturating_add(lease_reads::LONGEST_WAIT).min(lease_end);
                        let waiting = lease_reads::Waiting { target, until, request: read, revision, waiter };
                        if let Some(waiting) = self.answer_under_lease(now, waiting, false) {
                            self.lease_reads.wait(waiting);
                        }
                        return;
                    }
                    None => MasterRequest::Read(read, revision),
                }
            }
            other => other,
        };
        self.route(now, request, waiter, link_down);
    }

    /// Answers a read under the read lease if this node has applied what it must see
    /// (`waited`: after holding it); gives it back to wait while the lease holds and its
    /// wait has not run out; forwards it to the master otherwise.
    fn answer_under_lease(
        &mut self,
        now: Instant,
        read: lease_reads::Waiting<W>,
        waited: bool,
    ) -> Option<lease_reads::Waiting<W>> {
        match self.replica.read_under_lease(now, read.target, &read.request, read.revision) {
            Some(job) => {
                self.lease_reads.count(|c| if waited { c.waited += 1 } else { c.local += 1 });
                match job {
                    Ok(job) => self.pending.reads.push((job, Asker::Local(read.waiter))),
                    Err(error) => self.pending.answers.push((read.waiter, Err(error))),
                }
                None
            }
            None if self.replica.read_lease_target(now).is_some() && read.until > now => Some(read),
            None => {
                self.lease_reads.count(|c| c.forwarded += 1);
                self.route(now, MasterRequest::Read(read.request, read.revision), read.waiter, |_| false);
                None
            }
        }
    }

    /// Reads waiting under the read lease whose slot is now applied, or whose wait ended.
    fn release_lease_reads(&mut self, now: Instant) {
        let due = self.lease_reads.take_due(self.replica.applied_index(), now);
        for read in due {
            if let Some(read) = self.answer_under_lease(now, read, true) {
                self.lease_reads.wait(read);
            }
        }
    }

    /// Serves a master request here as master, or forwards it to the master the election
    /// names (see [`Self::handle_client`]).
    fn route(&mut self, now: Instant, request: MasterRequest, waiter: W, link_down: impl Fn(NodeId) -> bool) {
        let master = self.replica.master_hint().filter(|m| *m != self.replica.id());
        match master {
            Some(master) if !self.replica.is_master_at(now) => {
                if link_down(master) {
                    self.pending.answers.push((waiter, Err(RequestError::NotMaster { hint: None })));
                } else {
                    let seen = self.replica.known_ballot();
                    let id = self.forwards.start(&request, waiter, master, seen, now);
                    self.pending.forwards.push((master, ForwardMessage::Request(id, request)));
                }
            }
            _ => self.serve_here(now, request, Asker::Local(waiter)),
        }
    }

    /// A request a follower forwarded to this node as master. Served here whether or not
    /// this node is master: a request is forwarded at most once, so a stale hint costs one
    /// "not master" answer, never a loop.
    pub fn handle_forwarded(&mut self, now: Instant, from: NodeId, id: ForwardId, request: MasterRequest) {
        // A forward is sent once, but a network may deliver it twice: serving it again
        // would apply a write twice, or renew a lease later than its caller asked. The
        // follower takes the first answer, so a read served twice costs only the work; reads
        // are most forwards, and remembering each for seconds cost the master's loop its
        // time and cache.
        if request.changes_state() && !self.served.first_time(now, from, id) {
            return;
        }
        self.serve_here(now, request, Asker::Remote(from, id));
    }

    /// The master's answer to one of this node's forwards: passed on once this node has
    /// applied the revision it reflects ([`held`]).
    pub fn handle_answer(&mut self, now: Instant, from: NodeId, id: ForwardId, result: MasterResult) {
        let Some((waiter, result)) = self.forwards.answer(from, id, result) else { return };
        let applied = self.replica.state().revision();
        if let Some(answer) = self.held.hold_unless_applied(now, applied, waiter, result) {
            self.pending.answers.push(answer);
        }
    }

    /// Answers held for a revision this node has now applied, or held too long (`now`).
    fn release_held(&mut self, now: Option<Instant>) {
        let applied = self.replica.state().revision();
        self.held.release(applied, now, &mut self.pending.answers);
    }

    /// A log message from a peer.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, message: LogMessage) {
        self.last_now = self.last_now.max(now);
        self.replica.handle_message(now, from, message);
        self.release_lease_reads(now);
    }

    /// The deadline of [`Node::poll_timeout`] passed (early or late calls are fine).
    /// `renewal` is an election status that arrived meanwhile and was not handed over yet:
    /// it is applied first, so that a master whose lease was renewed all along is not found
    /// expired by its own timeout and does not give up its log round.
    pub fn handle_timeout(&mut self, now: Instant, renewal: Option<ElectionView>) {
        let renewal_after = self.breakage == NodeBreakage::RenewalAfterTimeout;
        if let Some(view) = renewal.filter(|_| !renewal_after) {
            self.handle_election(now, view);
        }
        if self.replica.poll_timeout().is_some_and(|at| at <= now) {
            self.replica.handle_timeout(now);
        }
        if let Some(view) = renewal.filter(|_| renewal_after) {
            self.handle_election(now, view);
        }
        if self.forwards.next_deadline().is_some_and(|at| at <= now) {
            let hint = self.replica.master_hint();
            let expired = self.forwards.expire(now, hint);
            if !expired.is_empty() {
                tracing::info!(
                    forwards = expired.len(),
                    waited_ms = FORWARD_TIMEOUT.as_millis() as u64,
                    "forwards to the master given up: no answer in time"
                );
            }
            self.pending.answers.extend(expired);
        }
        self.release_held(Some(now));
        self.last_now = self.last_now.max(now);
        self.release_lease_reads(now);
    }

    /// When the node next needs [`Node::handle_timeout`]: the replica's timer, a forward's
    /// deadline, a held answer's, or the engine write's.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        [
            self.replica.poll_timeout(),
            self.forwards.next_deadline(),
            self.held.next_deadline(),
            self.lease_reads.next_deadline(),
            self.engine_write_due,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A snapshot the driver received could not be installed (see
    /// [`Replica::snapshot_install_failed`]).
    pub fn snapshot_install_failed(&mut self, now: Instant, reason: String) {
        self.replica.snapshot_install_failed(now, reason);
    }

    /// The answers, forwards and reads the handlers produced so far, for a driver that
    /// sends them as each input is handled rather than at the end of its turn (the server
    /// loop: a read answered at once lets the client's task reply on another core while the
    /// loop goes on through its batch). Nothing here waits for a sync: proposals are
    /// answered only by [`Node::turn_effects`], after the replica's output.
    pub fn input_effects(&mut self) -> Effects<W> {
        self.release_held(None);
        self.release_lease_reads(self.last_now);
        Effects {
            answers: std::mem::take(&mut self.pending.answers),
            forwards: std::mem::take(&mut self.pending.forwards),
            reads: std::mem::take(&mut self.pending.reads),
            ..Effects::default()
        }
    }

    /// Everything to send, answer, sync, write and build since the last call, at the end of
    /// a turn. The engine write of what was applied follows the answers: the driver calls
    /// [`Node::write_applied`] after sending them when [`Effects::write_applied`] says so
    /// (see `Replica::take_output_before_flush`).
    pub fn turn_effects(&mut self, now: Instant, facts: TurnFacts) -> Effects<W> {
        if self.gauges.configuration_seen > self.replica.membership().epoch {
            // A peer is at a configuration this node has not applied: fetch the log rather
            // than wait for a master to bring it (rate-limited by the replica).
            self.replica.catch_up(now);
        }
        self.follow_membership();
        let candidate = self.replica.update_candidacy(now).is_none();
        if self.candidacy_reported != Some(candidate) {
            self.candidacy_reported = Some(candidate);
            self.pending.candidacy = Some(candidate);
        }
        let output = self.replica.take_output_before_flush();
        self.pending.log.extend(output.messages);
        let needs_sync = output.needs_sync;
        let tracing_applies = self.replica.traces_applies();
        self.pending.applied.extend(output.applied);
        for completion in output.completions {
            if let Some(asker) = self.proposals.remove(&completion.id) {
                if let Ok((slot, applied)) = &completion.result {
                    if tracing_applies && applied.result.is_ok() {
                        self.pending.chosen.push((completion.id, *slot));
                    }
                }
                let result = completion.result.map(|(_, applied)| MasterAnswer::Propose(applied));
                let result = match result {
                    Err(RequestError::Indeterminate { hint })
                        if self.breakage == NodeBreakage::NotMasterAfterProposal =>
                    {
                        Err(RequestError::NotMaster { hint })
                    }
                    other => other,
                };
                self.answer(asker, result);
            }
        }
        self.notice_master_change();
        self.release_held(Some(now));
        self.last_now = self.last_now.max(now);
        self.release_lease_reads(now);
        self.follow_auth();
        self.follow_failure();
        // The watch streams see the turn's changes at once; the engine write may wait.
        self.replica.publish_applied();
        let unwritten = self.replica.unflushed() && self.replica.stopped().is_none();
        self.pending.write_applied = self.engine_write_due(now, unwritten);
        self.pending.sync = if needs_sync { self.begin_sync(now, facts) } else { None };
        if self.replica.snapshot_due() {
            self.pending.checkpoint = self.replica.begin_checkpoint();
            let format = match Feature::SnapshotPages.in_version(self.cluster_version) {
                true => SnapshotFormat::WithPages,
                false => SnapshotFormat::WithValues,
            };
            self.pending.snapshot = self.replica.take_snapshot_job(now).map(|job| (job, format));
        }
        std::mem::take(&mut self.pending)
    }

    /// Whether the applied commands must be written now, given whether any are
    /// `unwritten`: at most the engine-write delay after the first turn that left some
    /// unwritten. Every engine write is a sled batch, which seals and writes out two of
    /// sled's I/O buffers (on its own thread pool, all of whose threads it wakes): with one
    /// client putting, writing every turn was a third of each put's time, although the
    /// put's answer goes out before it. Reads through the replica see what is applied and
    /// not written, watch streams read the history's published tail, and a crash loses
    /// only the engine's copy, which the restart replays from the log.
    fn engine_write_due(&mut self, now: Instant, unwritten: bool) -> bool {
        if !unwritten {
            self.engine_write_due = None;
            return false;
        }
        let due = *self.engine_write_due.get_or_insert(now.saturating_add(self.engine_write_delay));
        if now < due {
            return false;
        }
        self.engine_write_due = None;
        true
    }

    /// Begins the sync the replica's output asked for, and decides where it runs: off the
    /// loop normally, so the loop goes on while the disk works; on the loop when the loop
    /// woke from idle, nothing waits that the sync would hold up, and the disk has been
    /// fast, since handing a sync to a thread and being told it is done are two thread
    /// wake-ups, which on a machine that halts idle CPUs cost about as much as the sync.
    /// Under load the loop is never idle, so the sync thread keeps its group commit; a slow
    /// disk blocks the loop for one sync at most before syncs move back off it.
    fn begin_sync(&mut self, now: Instant, facts: TurnFacts) -> Option<SyncJob> {
        let on_loop = !facts.background_sync
            || (facts.woke_from_idle
                && self.pending.holds_nothing()
                && self.sync_in_flight.is_none()
                && self.last_sync_took < FAST_SYNC);
        let ticket = self.replica.begin_sync()?;
        self.sync_in_flight = Some((ticket, now));
        let place = if on_loop { SyncPlace::OnLoop } else { SyncPlace::Background };
        Some(SyncJob { ticket, place })
    }

    /// Syncs the storage in place: a sync on the loop ([`SyncPlace::OnLoop`]), or a
    /// simulated disk that finishes now, covering every write up to now.
    pub fn sync_in_place(&mut self) -> Result<(), StorageError> {
        self.replica.sync_storage()
    }

    /// The sync `ticket` ended with `result` at `now`: releases what it covered, or stops
    /// the replica if the storage failed.
    pub fn on_synced(&mut self, now: Instant, ticket: SyncTicket, result: Result<(), StorageError>) {
        if let Some((_, began)) = self.sync_in_flight.take_if(|(in_flight, _)| *in_flight == ticket) {
            self.last_sync_took = now.saturating_since(began);
        }
        self.replica.finish_sync(now, ticket, result);
    }

    /// How long the last finished sync took.
    pub fn last_sync_took(&self) -> Duration {
        self.last_sync_took
    }

    /// A checkpoint's engine sync ([`Effects::checkpoint`]) ended: the log behind it is
    /// dropped if it succeeded.
    pub fn on_checkpoint_synced(
        &mut self,
        ticket: crate::log::CheckpointTicket,
        synced: Result<(), crate::engine::EngineError>,
    ) {
        self.replica.finish_checkpoint(ticket, synced);
    }

    /// A snapshot from a peer, installed and synced in a staged engine as it arrived:
    /// adopted in one step.
    pub fn on_staged_snapshot(&mut self, now: Instant, snapshot: crate::log::StagedSnapshot) {
        self.replica.handle_staged_snapshot(now, snapshot);
    }

    /// A snapshot from a peer, received whole into the file at `path`.
    pub fn on_snapshot_file(&mut self, now: Instant, index: crate::log::Slot, path: std::path::PathBuf) {
        self.replica.handle_snapshot_file(now, index, path);
    }

    /// Writes the commands applied and not yet written to the state engine (see
    /// [`Effects::write_applied`]); also what a driver does before it stops, to spare the
    /// restart the replay.
    pub fn write_applied(&mut self) {
        self.engine_write_due = None;
        self.replica.flush_applied();
    }

    /// A view of the applied state, read off the loop (backups, HashKV): what is applied
    /// is written first.
    pub fn view(&mut self) -> Result<crate::state::StateView, StorageError> {
        self.replica.view()
    }

    /// Proposes `command` as master with nobody waiting for its answer (the simulator's
    /// own configuration changes and writes).
    pub fn propose_unanswered(&mut self, now: Instant, command: Command) -> Result<ProposalId, RequestError> {
        if matches!(command, Command::ChangeMembers(_)) {
            self.replica.set_change_gate(self.gauges.change_gate);
        }
        self.replica.propose(now, command)
    }

    /// The lowest peer protocol version every member speaks: what the node may ask of the
    /// others (read leases, a snapshot's format).
    pub fn set_cluster_version(&mut self, version: u32) {
        self.cluster_version = version;
        self.replica.set_read_leases_allowed(Feature::ReadLeases.in_version(version));
    }

    /// Longest time applied commands wait for their engine write ([`ENGINE_WRITE_DELAY`]
    /// unless set).
    pub fn set_engine_write_delay(&mut self, delay: Duration) {
        self.engine_write_delay = delay;
    }

    /// Hands a changed auth store to the effects, once per change.
    fn follow_auth(&mut self) {
        let auth = self.replica.state().auth();
        let now = (auth.revision(), auth.is_enabled(), auth.token_secret());
        let same = self.auth_reported.as_ref().is_some_and(|(r, e, s)| (*r, *e, s.as_slice()) == now);
        if !same {
            self.auth_reported = Some((now.0, now.1, now.2.to_vec()));
            self.pending.auth = Some(auth.clone());
        }
    }

    /// Hands the storage's failure to the effects, once.
    fn follow_failure(&mut self) {
        if self.failure_reported {
            return;
        }
        if let Some(failure) = self.replica.storage_failure() {
            self.failure_reported = true;
            self.pending.storage_failed = Some(failure.to_string());
        }
    }

    /// Hands the configuration in force to the output when it changed, and this node's
    /// removal once.
    fn follow_membership(&mut self) {
        let epoch = self.replica.membership().epoch;
        if self.seen_epoch != Some(epoch) {
            self.seen_epoch = Some(epoch);
            self.pending.configuration = Some(self.replica.election_membership());
        }
        if let Some(removed_at) = self.replica.removed() {
            if !self.removal_reported {
                self.removal_reported = true;
                self.pending.removed = Some(removed_at);
            }
        }
    }

    /// Forwards to a master that is no longer the master will not be answered. Only a new
    /// master counts: "no master known" (a lease between renewals, or a master that just
    /// died) abandons nothing, so a healthy master's in-flight writes never fail for it; the
    /// successor's election, or the forward's timeout, settles a dead master's forwards. A
    /// new master may be the same node again (killed, restarted and elected again): its
    /// new log ballot tells.
    fn notice_master_change(&mut self) {
        let Some(master) = self.replica.master_hint() else { return };
        let seen = self.replica.known_ballot();
        if Some((master, seen)) != self.known_master {
            self.known_master = Some((master, seen));
            if !self.forwards.is_empty() {
                let abandoned = self.forwards.master_changed(master, seen);
                self.pending.answers.extend(abandoned);
            }
        }
    }

    /// Serves a master request on this node and answers `asker`: at once, when its proposal
    /// completes, or (a step-down) once the driver had the election give up. The replica
    /// refuses what it cannot serve (not master, not ready yet) with an error the caller's
    /// side retries.
    fn serve_here(&mut self, now: Instant, request: MasterRequest, asker: Asker<W>) {
        let result = match request {
            MasterRequest::Propose(command) => {
                if matches!(command, Command::ChangeMembers(_)) {
                    // The gate the election published after its latest step (rule 5 of
                    // docs/membership.md; a stale gate only refuses): only a change checks it.
                    self.replica.set_change_gate(self.gauges.change_gate);
                }
                match self.replica.propose(now, command) {
                    Ok(id) => {
                        self.proposals.insert(id, asker);
                        return;
                    }
                    Err(error) => Err(error),
                }
            }
            MasterRequest::Read(request, revision) => {
                match self.replica.read_job(now, request, revision, ReadConsistency::Linearizable) {
                    Ok(job) => {
                        self.pending.reads.push((job, asker));
                        return;
                    }
                    Err(error) => Err(error),
                }
            }
            MasterRequest::KeepAlive(id) => self.replica.keep_alive(now, id).map(MasterAnswer::KeepAlive),
            MasterRequest::LeaseStatus(id) => self.replica.lease_status(now, id).map(MasterAnswer::LeaseStatus),
            MasterRequest::LeaseList => self.replica.lease_list(now).map(MasterAnswer::LeaseList),
            MasterRequest::StepDown => {
                if !self.replica.is_master_at(now) {
                    Err(RequestError::NotMaster { hint: self.replica.master_hint() })
                } else {
                    self.pending.step_downs.push(asker);
                    return;
                }
            }
        };
        self.answer(asker, result);
    }

    fn answer(&mut self, asker: Asker<W>, result: MasterResult) {
        match asker {
            Asker::Local(waiter) => self.pending.answers.push((waiter, result)),
            Asker::Remote(node, id) => self.pending.forwards.push((node, ForwardMessage::Answer(id, result))),
        }
    }
}

#[cfg(test)]
mod tests;
