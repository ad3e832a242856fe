//! The node: the replica and every decision between it and the network, without I/O.
//!
//! A [`Node`] takes what reaches a member (client requests only the master can answer,
//! forwards from followers and the master's answers, log messages, the election's status,
//! timeouts) and says what must happen (log messages and forwards to send, answers for the
//! node's own callers, a sync, a step-down, a configuration for the election). It decides:
//! - where a master-only request is served: here as master, or forwarded once to the
//!   master the election names, never while the link to it is known to be down;
//! - what a forward whose answer will not come tells its caller ([`forward::Forwards`]):
//!   a write may have been applied, so it is "indeterminate", never retried;
//! - that a renewal of mastership that arrived with a timeout is applied before it
//!   ([`Node::handle_timeout`]), so that a master renewed all along does not give up its
//!   log round;
//! - when the configuration in force changed, whether this node was removed, and when the
//!   log must catch up with a configuration a peer has seen.
//!
//! The tokio loop in `server` drives it with sockets, timers and the sync thread; the store
//! simulator drives the same type with a simulated network and clock (TigerBeetle's way:
//! the simulator runs the production replica, not a model of it).

pub mod forward;
pub mod held;
pub mod lease_reads;

pub use forward::{
    expect_answer, ForwardId, Forwards, MasterAnswer, MasterRequest, MasterResult, ServedForwards, FORWARD_TIMEOUT,
};

use crate::command::Command;
use crate::log::{
    AppliedTrace, LogBallot, LogMessage, ProposalId, ReadConsistency, ReadJob, Replica, RequestError, Slot,
};
use crate::membership::Membership;
use crate::storage::Storage;
use leasekv_lease::{Instant, Mastership, NodeId};
use std::collections::HashMap;

/// Runs a read the node decided ([`NodeOutput::reads`]) and gives its answer as a master
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
}

impl NodeBreakage {
    /// Every broken variant with its name, as `--break` takes it.
    pub const ALL: [(&'static str, NodeBreakage); 2] = [
        ("renewal-after-timeout", NodeBreakage::RenewalAfterTimeout),
        ("not-master-after-proposal", NodeBreakage::NotMasterAfterProposal),
    ];
}

/// Everything the node produced since the driver last asked.
#[derive(Debug)]
pub struct NodeOutput<W> {
    /// Log messages to send.
    pub log: Vec<(NodeId, LogMessage)>,
    /// Forwards and answers to send.
    pub forwards: Vec<(NodeId, ForwardMessage)>,
    /// Answers for this node's own callers.
    pub answers: Vec<(W, MasterResult)>,
    /// Reads decided and not yet read: the driver runs each job off its loop (a reader
    /// thread) and answers its asker with the result, as [`MasterAnswer::Read`].
    pub reads: Vec<(ReadJob, Asker<W>)>,
    /// Step-downs asked of this node: the driver has the election give up mastership and
    /// then answers through [`Node::step_down_finished`].
    pub step_downs: Vec<Asker<W>>,
    /// The configuration in force changed: hand it to the election and the peer network.
    pub configuration: Option<Membership>,
    /// Whether this node should offer itself as master changed: hand it to the election's
    /// candidacy switch (`ElectionCore::set_candidacy`); the reason is
    /// [`Replica::withdrawal`].
    pub candidacy: Option<bool>,
    /// This node applied its own removal, at this configuration epoch (reported once).
    pub removed: Option<u64>,
    /// Storage holds writes that outputs wait for: sync, then [`Replica::finish_sync`].
    pub needs_sync: bool,
    /// Applied slots (only with the replica's `trace_applies`).
    pub applied: Vec<AppliedTrace>,
    /// Proposals of this node chosen and applied successfully, with their slot (only with
    /// the replica's `trace_applies`: the simulator's acknowledged-write oracle).
    pub chosen: Vec<(ProposalId, Slot)>,
}

impl<W> Default for NodeOutput<W> {
    fn default() -> Self {
        NodeOutput {
            log: Vec::new(),
            forwards: Vec::new(),
            answers: Vec::new(),
            reads: Vec::new(),
            step_downs: Vec::new(),
            configuration: None,
            candidacy: None,
            removed: None,
            needs_sync: false,
            applied: Vec::new(),
            chosen: Vec::new(),
        }
    }
}

impl<W> NodeOutput<W> {
    /// Whether nothing is to be sent or answered (a sync would hold nothing up). What a
    /// driver already took with [`Node::drain_ready`] is gone and not counted.
    pub fn holds_nothing(&self) -> bool {
        self.log.is_empty() && self.forwards.is_empty() && self.answers.is_empty() && self.reads.is_empty()
    }
}

/// What a node can send before its turn ends ([`Node::drain_ready`]). Dropping it drops
/// what it holds: answers never delivered (their callers see the node stop) and forwards
/// never sent.
#[must_use = "the answers and forwards are lost unless sent"]
pub struct Ready<'a, W> {
    /// Answers for this node's own callers.
    pub answers: std::vec::Drain<'a, (W, MasterResult)>,
    /// Forwards and answers to forwards, to send.
    pub forwards: std::vec::Drain<'a, (NodeId, ForwardMessage)>,
    /// Reads to run off the loop (see [`NodeOutput::reads`]).
    pub reads: std::vec::Drain<'a, (ReadJob, Asker<W>)>,
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
    /// The configuration epoch last reported in [`NodeOutput::configuration`].
    seen_epoch: Option<u64>,
    removal_reported: bool,
    /// The candidacy last reported in [`NodeOutput::candidacy`].
    candidacy_reported: Option<bool>,
    gauges: ElectionGauges,
    /// Produced by the handlers, handed over by [`Node::take_output`] (the answers and
    /// forwards also by [`Node::drain_ready`]).
    pending: NodeOutput<W>,
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
            pending: NodeOutput::default(),
            breakage: NodeBreakage::None,
        }
    }

    /// Breaks the node on purpose (the simulator's negative controls).
    pub fn set_breakage(&mut self, breakage: NodeBreakage) {
        self.breakage = breakage;
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.replica.id()
    }

    /// The replica, for what the driver reads locally (serializable reads, status, views).
    pub fn replica(&self) -> &Replica<S> {
        &self.replica
    }

    /// The replica, for what the driver does to it directly (syncs, checkpoints, snapshots
    /// from peers).
    pub fn replica_mut(&mut self) -> &mut Replica<S> {
        &mut self.replica
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
    /// deadline or a held answer's.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        [
            self.replica.poll_timeout(),
            self.forwards.next_deadline(),
            self.held.next_deadline(),
            self.lease_reads.next_deadline(),
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

    /// The answer to a step-down the driver carried out (see [`NodeOutput::step_downs`]).
    pub fn step_down_finished(&mut self, asker: Asker<W>, result: MasterResult) {
        self.answer(asker, result);
    }

    /// The answers and forwards the handlers produced so far, for a driver that sends them
    /// as each input is handled rather than at the end of its turn (the server loop: a read
    /// answered at once lets the client's task reply on another core while the loop goes on
    /// through its batch). Nothing here waits for a sync: proposals are answered only by
    /// [`Node::take_output`], after the replica's output.
    pub fn drain_ready(&mut self) -> Ready<'_, W> {
        self.release_held(None);
        self.release_lease_reads(self.last_now);
        Ready {
            answers: self.pending.answers.drain(..),
            forwards: self.pending.forwards.drain(..),
            reads: self.pending.reads.drain(..),
        }
    }

    /// Everything to send, answer and sync since the last call. The engine write of what
    /// was applied follows the answers (the driver calls [`Replica::flush_applied`] or
    /// lets a deadline do it; see `Replica::take_output_before_flush`).
    pub fn take_output(&mut self, now: Instant) -> NodeOutput<W> {
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
        self.pending.needs_sync |= output.needs_sync;
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
        std::mem::take(&mut self.pending)
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
