//! The proposer of one lease instance: acquires, extends and releases the lease.

use super::message::{AcceptedLease, Body, Proposal};
use super::votes::Votes;
use crate::ballot::{Ballot, Term};
use crate::config::{Breakage, LeaseConfig};
use crate::core::{LeadershipChange, LossReason, Mastership};
use crate::ids::NodeId;
use crate::members::Members;
use crate::rng::SplitMix64;
use crate::time::Instant;
use std::time::Duration;

/// Where a proposer's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every voter of the proposer's configuration, this node's own acceptor included.
    AllAcceptors,
    /// Every other member, voters and learners (hints, so that learners know the master).
    Others,
}

/// What one step of a proposer produced.
#[derive(Debug, Default)]
pub struct ProposerOutput {
    /// Messages to send.
    pub messages: Vec<(Target, Body)>,
    /// Leadership changes.
    pub changes: Vec<LeadershipChange>,
}

/// The lease this node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeldLease {
    term: Term,
    expires_at: Instant,
}

/// A hint that another node holds the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hint {
    owner: NodeId,
    ballot: Ballot,
    until: Instant,
}

/// The round in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Round {
    Idle,
    Preparing {
        ballot: Ballot,
        deadline: Instant,
        open: Votes,
        blocked: Votes,
        /// The longest remaining lease another node holds at an acceptor that answered.
        longest_foreign: Option<Duration>,
    },
    Proposing {
        ballot: Ballot,
        deadline: Instant,
        accepted: Votes,
        rejected: Votes,
        /// Accepts from acceptors that had applied this proposer's configuration: rule 5's
        /// record needs a majority of those (they refuse older epochs for good).
        current: Votes,
        /// Expiry of the lease timer started before the ProposeRequest went out.
        expires_at: Instant,
    },
}

/// An acceptor's answer to this proposer's ProposeRequest.
#[derive(Debug, Clone, Copy)]
struct AcceptAnswer {
    /// The ballot answered.
    ballot: Ballot,
    /// Accepted, or refused for a higher promise.
    accepted: bool,
    /// Whether the acceptor had applied this proposer's configuration (rule 5 counts only
    /// those).
    at_current_epoch: bool,
}

/// Proposer state for one resource.
#[derive(Debug, Clone)]
pub struct Proposer {
    me: NodeId,
    epoch: u32,
    /// The voters of the configuration this node applied: the only acceptors whose votes
    /// count, and the set whose majority every round needs.
    voters: Members,
    /// The learners of that configuration (only the `learner-counted` control counts them).
    learners: Vec<NodeId>,
    /// The configuration epoch of `voters`; every round runs at it.
    conf_epoch: u64,
    /// Whether the configuration lets this node compete: it is a voter and has applied the
    /// highest configuration epoch it has seen (rule 4). `wanted` is the driver's wish,
    /// this is the log's permission; a round starts only with both.
    eligible: bool,
    /// Rule 5: the configuration epoch and the local completion instant of the first round at
    /// that epoch that a majority of its voters accepted.
    quorum_round: Option<(u64, Instant)>,
    config: LeaseConfig,
    /// The highest ballot counter used or seen.
    counter: u64,
    /// Whether this node competes for the lease at all.
    wanted: bool,
    round: Round,
    lease: Option<HeldLease>,
    /// When to start the next round (acquire or extend), if idle.
    next_attempt: Option<Instant>,
    /// No attempt before this instant (after a step-down).
    hold_off_until: Instant,
    hint: Option<Hint>,
    /// Ballots of the latest ProposeRequests sent, which acceptors may still hold for this
    /// node; a release names each of them.
    recent_proposals: Vec<Ballot>,
    /// Ballots the last holder released when it handed the lease to this node (see
    /// [`Body::HandOver`]).
    handed_over: Vec<Ballot>,
    /// Consecutive failed rounds, which widen the back-off.
    failures: u32,
    /// Every failed round so far, for the node's metrics.
    failed_rounds: u64,
}

/// How many recent proposal ballots a release names. Older ones have run out at every
/// acceptor by the time a release could matter (they were replaced by renewals at least
/// this many renew intervals ago).
const RELEASED_BALLOTS: usize = 4;

impl Proposer {
    /// A proposer of node `me` in restart epoch `epoch`, at configuration epoch 0 whose
    /// voters are `voters` (see [`Proposer::reconfigure`] for later configurations).
    pub fn new(me: NodeId, epoch: u32, voters: Members, config: LeaseConfig) -> Self {
        Proposer {
            me,
            epoch,
            eligible: voters.contains(me),
            voters,
            learners: Vec::new(),
            conf_epoch: 0,
            quorum_round: None,
            config,
            counter: 0,
            wanted: false,
            round: Round::Idle,
            lease: None,
            next_attempt: None,
            hold_off_until: Instant::ZERO,
            hint: None,
            recent_proposals: Vec::new(),
            handed_over: Vec::new(),
            failures: 0,
            failed_rounds: 0,
        }
    }

    fn majority(&self) -> usize {
        self.voters.majority()
    }

    /// Enough votes against that a majority can no longer be reached.
    fn hopeless(&self, against: usize) -> bool {
        against > self.voters.len().saturating_sub(self.majority())
    }

    /// Whether `from`'s vote counts: only voters of this proposer's configuration. A learner
    /// or a node unknown to the configuration may well answer (an acceptor cannot know
    /// whether it was just promoted, so it answers any current sender), but only the voters'
    /// majorities intersect those of the neighbouring configurations (rule 1).
    fn counts(&self, from: NodeId) -> bool {
        self.voters.contains(from) || (self.config.broken(Breakage::LearnerCounted) && self.learners.contains(&from))
    }

    /// The configuration epoch this proposer's rounds run at.
    pub fn conf_epoch(&self) -> u64 {
        self.conf_epoch
    }

    /// The voters whose majority this proposer's rounds need.
    pub fn voters(&self) -> &Members {
        &self.voters
    }

    /// Rule 5: `(epoch, completion)` of the first round at the current configuration epoch
    /// answered by a majority of its voters (or of the latest epoch that had one).
    pub fn quorum_round(&self) -> Option<(u64, Instant)> {
        self.quorum_round
    }

    /// Whether this node's driver wants the lease (independent of the configuration).
    pub fn wanted(&self) -> bool {
        self.wanted
    }

    /// Switches to configuration `conf_epoch`: any round in progress is abandoned (its
    /// majority was counted against the old voters), a held lease is kept (the safety
    /// argument of docs/membership.md covers a lease won at the previous epoch), and the next
    /// round runs with the new voters. A holder extends at once, so that rule 5's round at
    /// the new epoch comes as early as possible.
    pub fn reconfigure(
        &mut self,
        now: Instant,
        conf_epoch: u64,
        voters: Members,
        learners: Vec<NodeId>,
        rng: &mut SplitMix64,
        out: &mut ProposerOutput,
    ) {
        let abandoned = self.abandon_round(out);
        self.voters = voters;
        self.learners = learners;
        self.conf_epoch = conf_epoch;
        if self.lease.is_some() {
            self.next_attempt = Some(now.max(self.hold_off_until));
        } else if abandoned || (self.wanted && self.next_attempt.is_none()) {
            let jitter = rng.duration_between(self.config.backoff_min, self.config.backoff_max);
            self.next_attempt = Some(now.saturating_add(jitter).max(self.hold_off_until));
        }
    }

    /// Lets the proposer compete (or not) under the configuration: a node that is not a
    /// voter, or that has seen a configuration epoch it has not applied yet, must not start
    /// rounds. Losing eligibility abandons the round in progress; a held lease is kept until
    /// it runs out (the caller releases it when the node was removed).
    pub fn set_eligible(&mut self, now: Instant, eligible: bool, out: &mut ProposerOutput) {
        if eligible == self.eligible {
            return;
        }
        self.eligible = eligible;
        if eligible {
            if self.wanted && self.round == Round::Idle && self.next_attempt.is_none() {
                self.next_attempt = Some(now.max(self.hold_off_until));
            }
        } else if self.abandon_round(out) && self.wanted {
            self.next_attempt = Some(now.max(self.hold_off_until));
        }
    }

    /// Whether the configuration lets this node compete.
    pub fn eligible(&self) -> bool {
        self.eligible
    }

    /// Gives up a held lease because this node is no longer a voter, as a shutdown would,
    /// but remembers whether the driver wants the lease: competing resumes if a later
    /// configuration makes this node a voter again.
    pub fn retire(&mut self, now: Instant, out: &mut ProposerOutput) {
        if self.lease.is_some() || !self.recent_proposals.is_empty() || self.round != Round::Idle {
            let wanted = self.wanted;
            self.release(now, wanted, out);
        }
    }

    /// Drops the round in progress, if any, freeing the acceptors of a half-accepted
    /// acquisition (as [`Self::fail_round`] does). Returns whether there was a round.
    fn abandon_round(&mut self, out: &mut ProposerOutput) -> bool {
        let round = std::mem::replace(&mut self.round, Round::Idle);
        match round {
            Round::Idle => false,
            Round::Preparing { .. } => {
                self.failed_rounds += 1;
                true
            }
            Round::Proposing { ballot, .. } => {
                self.failed_rounds += 1;
                if self.lease.is_none() {
                    out.messages.push((Target::AllAcceptors, Body::Release { ballot }));
                    self.recent_proposals.retain(|b| *b != ballot);
                }
                true
            }
        }
    }

    /// Starts competing for the lease.
    pub fn acquire(&mut self, now: Instant) {
        self.wanted = true;
        if self.round == Round::Idle && self.next_attempt.is_none() {
            self.next_attempt = Some(now.max(self.hold_off_until));
        }
    }

    /// Whether this node holds the lease at `now`.
    pub fn mastership(&self, now: Instant) -> Option<Mastership> {
        self.lease.filter(|l| now < l.expires_at).map(|l| Mastership { term: l.term, valid_until: l.expires_at })
    }

    /// Rounds abandoned so far (pre-empted, rejected or unanswered).
    pub fn failed_rounds(&self) -> u64 {
        self.failed_rounds
    }

    /// The believed holder, for redirects only.
    pub fn hint(&self, now: Instant) -> Option<NodeId> {
        if self.mastership(now).is_some() {
            return Some(self.me);
        }
        self.hint.filter(|h| now < h.until).map(|h| h.owner)
    }

    /// Gives the lease up: first stop believing, then tell the acceptors. With
    /// `keep_competing`, competes again after the configured hold-off.
    pub fn release(&mut self, now: Instant, keep_competing: bool, out: &mut ProposerOutput) {
        if let Some(lease) = self.lease.take() {
            out.changes.push(LeadershipChange::Lost { term: lease.term, reason: LossReason::Released });
        }
        // Release every ballot acceptors may hold for us: the last successful round and a
        // propose still in flight. Each release names its ballot, so it can only clear
        // this node's own, no longer believed, leases.
        for ballot in self.recent_proposals.drain(..) {
            out.messages.push((Target::AllAcceptors, Body::Release { ballot }));
        }
        self.round = Round::Idle;
        self.wanted = keep_competing;
        self.hold_off_until = now.saturating_add(self.config.step_down_hold);
        self.next_attempt = keep_competing.then_some(self.hold_off_until);
    }

    /// Releases the lease (as [`Self::release`], competing again later) so that `to` takes
    /// it: the others are told first, so they hold off before they see the release.
    pub fn hand_over(&mut self, now: Instant, to: NodeId, out: &mut ProposerOutput) {
        // Released (the lease dropped) before anything goes out: from the moment `to` can
        // act on the message, this node no longer believes it is master.
        let released = self.recent_proposals.clone();
        let mut released_now = ProposerOutput::default();
        #[cfg(feature = "negative-controls")]
        if self.config.broken(Breakage::HandOverKeepsLease) {
            // Tells `to` the ballots are free, releases nothing, goes on believing.
            out.messages.push((Target::Others, Body::HandOver { to, released }));
            return;
        }
        self.release(now, true, &mut released_now);
        out.changes.append(&mut released_now.changes);
        out.messages.push((Target::Others, Body::HandOver { to, released }));
        out.messages.append(&mut released_now.messages);
    }

    /// The holder hands the lease to `to`: this node campaigns at once if it is `to`, and
    /// otherwise stays out of the way for a few rounds (if `to` never takes it, the others
    /// compete as usual after that).
    fn on_hand_over(&mut self, now: Instant, from: NodeId, to: NodeId, released: Vec<Ballot>) {
        if !self.wanted || !self.eligible || self.lease.is_some() || self.round != Round::Idle {
            return;
        }
        if to == self.me {
            // At once, even inside a hold-off: that only kept this node out of the way of
            // an earlier hand-over or its own step-down, and the holder now asks it to take
            // over.
            self.hint = None;
            self.hold_off_until = now;
            self.next_attempt = Some(now);
            // A node releases only its own ballots.
            self.handed_over = released.into_iter().filter(|b| b.node == from).collect();
        } else {
            let hold = now.saturating_add(self.config.round_timeout * 3);
            self.hold_off_until = self.hold_off_until.max(hold);
            self.next_attempt = Some(self.next_attempt.map_or(hold, |a| a.max(hold)));
        }
    }

    /// The next instant this proposer needs to act.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let round_deadline = match &self.round {
            Round::Idle => self.next_attempt.filter(|_| self.wanted && self.eligible),
            Round::Preparing { deadline, .. } | Round::Proposing { deadline, .. } => Some(*deadline),
        };
        let expiry = self.lease.map(|l| l.expires_at);
        match (round_deadline, expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Acts on whatever is due at `now`: lease expiry, an abandoned round, the next attempt.
    pub fn on_timeout(&mut self, now: Instant, rng: &mut SplitMix64, out: &mut ProposerOutput) {
        if let Some(lease) = self.lease {
            if now >= lease.expires_at {
                self.lease = None;
                out.changes.push(LeadershipChange::Lost { term: lease.term, reason: LossReason::Expired });
                if self.wanted && self.round == Round::Idle {
                    self.next_attempt = Some(now);
                }
            }
        }
        let timed_out = match &self.round {
            Round::Preparing { deadline, .. } | Round::Proposing { deadline, .. } => now >= *deadline,
            Round::Idle => false,
        };
        if timed_out {
            self.fail_round(now, rng, out);
        }
        if self.round == Round::Idle && self.wanted && self.eligible {
            if let Some(at) = self.next_attempt {
                if now >= at {
                    self.start_round(now, out);
                }
            }
        }
    }

    /// Phase 1: a fresh ballot, higher than any seen, to every acceptor.
    fn start_round(&mut self, now: Instant, out: &mut ProposerOutput) {
        // Saturating: the counter only follows plausible ballots (`Ballot::MAX_COUNTER`), so
        // this never saturates in practice, and must not panic if it ever did.
        self.counter = self.counter.saturating_add(1);
        let ballot = Ballot { counter: self.counter, epoch: self.epoch, node: self.me };
        self.round = Round::Preparing {
            ballot,
            deadline: now.saturating_add(self.config.round_timeout),
            open: Votes::default(),
            blocked: Votes::default(),
            longest_foreign: None,
        };
        self.next_attempt = None;
        out.messages.push((Target::AllAcceptors, Body::PrepareRequest { ballot }));
    }

    /// Abandons the round and schedules the next attempt after a random back-off, or after
    /// another node's lease has run out if an acceptor reported one.
    fn fail_round(&mut self, now: Instant, rng: &mut SplitMix64, out: &mut ProposerOutput) {
        let round = std::mem::replace(&mut self.round, Round::Idle);
        // Duelling proposers keep pre-empting each other; widening the random back-off with
        // every consecutive failure makes it ever likelier that one round runs alone.
        self.failures = self.failures.saturating_add(1);
        self.failed_rounds += 1;
        let widened = self.config.backoff_max.saturating_mul(1 << self.failures.min(6)) / 2;
        let ceiling = widened.min(self.config.lease_time / 8).max(self.config.backoff_max);
        let jitter = rng.duration_between(self.config.backoff_min, ceiling);
        let mut retry = now.saturating_add(jitter);
        match round {
            Round::Preparing { longest_foreign: Some(remaining), .. } => {
                // Another lease is running: trying before it ends cannot succeed.
                retry = retry.saturating_add(remaining);
            }
            Round::Proposing { ballot, .. } if self.lease.is_none() => {
                // Nobody believes in this half-accepted lease; free the acceptors that took
                // it. Never while holding: the acceptors that took an extension no longer
                // hold the lease this node still believes in.
                out.messages.push((Target::AllAcceptors, Body::Release { ballot }));
                self.recent_proposals.retain(|b| *b != ballot);
            }
            _ => {}
        }
        if self.lease.is_some() {
            // Extending: retry soon, the lease is still running.
            retry = now.saturating_add(jitter.min(self.config.round_timeout));
        }
        self.next_attempt = Some(retry.max(self.hold_off_until));
    }

    fn observe(&mut self, ballot: Ballot) {
        self.counter = self.counter.max(ballot.counter);
    }

    /// Handles a response to one of this proposer's requests, or a hint.
    /// `sender_epoch` is the configuration epoch the sender had applied when it answered.
    pub fn on_message(
        &mut self,
        now: Instant,
        from: NodeId,
        sender_epoch: u64,
        body: Body,
        rng: &mut SplitMix64,
        out: &mut ProposerOutput,
    ) {
        match body {
            Body::PrepareResponse { ballot, accepted } => self.on_promise(now, from, ballot, accepted, rng, out),
            Body::PrepareRejected { ballot, promised } => {
                self.observe(promised);
                if !self.counts(from) {
                    return;
                }
                let config = &self.config;
                if let Round::Preparing { ballot: b, blocked, .. } = &mut self.round {
                    if *b == ballot {
                        blocked.record(from);
                        let against = tally(config, blocked);
                        if self.hopeless(against) {
                            self.fail_round(now, rng, out);
                        }
                    }
                }
            }
            Body::ProposeResponse { ballot, accepted, promised } => {
                self.observe(promised);
                let answer = AcceptAnswer { ballot, accepted, at_current_epoch: sender_epoch >= self.conf_epoch };
                self.on_accept(now, from, answer, rng, out);
            }
            Body::StaleConfiguration { ballot, .. } => {
                // A voter has moved on to a later configuration: the round cannot win
                // (rule 4). The node stops this proposer competing until it has applied that
                // configuration; here the round just ends at once, without waiting for the
                // other answers or the timeout.
                let ours = match &self.round {
                    Round::Preparing { ballot: b, .. } | Round::Proposing { ballot: b, .. } => *b == ballot,
                    Round::Idle => false,
                };
                if ours {
                    self.fail_round(now, rng, out);
                }
            }
            Body::HandOver { to, released } => self.on_hand_over(now, from, to, released),
            Body::Learned { owner, ballot, duration } => {
                self.observe(ballot);
                if owner != self.me && self.lease.is_none() {
                    self.hint = Some(Hint { owner, ballot, until: now.saturating_add(duration) });
                    if self.round == Round::Idle && self.wanted {
                        // Stay quiet while the holder's lease runs: a prepare now would only
                        // disturb its next extension.
                        let after = now.saturating_add(duration);
                        self.next_attempt = Some(self.next_attempt.map_or(after, |a| a.max(after)));
                    }
                }
            }
            // Requests are for the acceptor; the node routes them there.
            Body::PrepareRequest { .. } | Body::ProposeRequest { .. } | Body::Release { .. } => {}
        }
    }

    fn on_promise(
        &mut self,
        now: Instant,
        from: NodeId,
        ballot: Ballot,
        accepted: Option<AcceptedLease>,
        rng: &mut SplitMix64,
        out: &mut ProposerOutput,
    ) {
        if !self.counts(from) {
            return;
        }
        let (me, epoch, config) = (self.me, self.epoch, &self.config);
        let Round::Preparing { ballot: b, open, blocked, longest_foreign, .. } = &mut self.round else {
            return;
        };
        if *b != ballot {
            return;
        }
        match accepted {
            // Empty, or this very incarnation's own lease (an extension). A lease this node
            // held before a restart is someone else's as far as safety goes.
            None => open.record(from),
            Some(lease) if lease.ballot.is_incarnation_of(me, epoch) => open.record(from),
            // Released to this node by its holder (the acceptor's Release is on its way).
            Some(lease) if self.handed_over.contains(&lease.ballot) => open.record(from),
            Some(lease) => {
                blocked.record(from);
                *longest_foreign = Some(longest_foreign.map_or(lease.remaining, |d| d.max(lease.remaining)));
                self.hint =
                    Some(Hint { owner: lease.owner, ballot: lease.ballot, until: now.saturating_add(lease.remaining) });
            }
        }
        let (open_count, blocked_count) = (tally(config, open), tally(config, blocked));
        if open_count >= self.majority() {
            self.propose(now, ballot, out);
        } else if self.hopeless(blocked_count) {
            self.fail_round(now, rng, out);
        }
    }

    /// Phase 2. The lease timer starts here, before the request is sent: every acceptor
    /// starts its own timer later, so the holder's belief ends first.
    fn propose(&mut self, now: Instant, ballot: Ballot, out: &mut ProposerOutput) {
        let expires_at = now.saturating_add(self.config.holder_validity());
        self.round = Round::Proposing {
            ballot,
            deadline: now.saturating_add(self.config.round_timeout),
            accepted: Votes::default(),
            rejected: Votes::default(),
            current: Votes::default(),
            expires_at,
        };
        self.recent_proposals.push(ballot);
        if self.recent_proposals.len() > RELEASED_BALLOTS {
            self.recent_proposals.remove(0);
        }
        let proposal = Proposal { owner: self.me, duration: self.config.lease_time };
        out.messages.push((Target::AllAcceptors, Body::ProposeRequest { ballot, proposal }));
    }

    fn on_accept(
        &mut self,
        now: Instant,
        from: NodeId,
        answer: AcceptAnswer,
        rng: &mut SplitMix64,
        out: &mut ProposerOutput,
    ) {
        let AcceptAnswer { ballot, accepted: was_accepted, at_current_epoch } = answer;
        if !self.counts(from) {
            return;
        }
        let (config, majority) = (&self.config, self.majority());
        let Round::Proposing { ballot: b, accepted, rejected, current, expires_at, .. } = &mut self.round else {
            return;
        };
        if *b != ballot {
            return;
        }
        if !was_accepted {
            rejected.record(from);
            let against = tally(config, rejected);
            if self.hopeless(against) {
                self.fail_round(now, rng, out);
            }
            return;
        }
        accepted.record(from);
        if at_current_epoch {
            current.record(from);
        }
        if tally(config, accepted) < majority {
            return;
        }
        let confirmed = tally(config, current) >= majority;
        let mut expires_at = *expires_at;
        if self.config.broken(Breakage::LateTimer) {
            expires_at = now.saturating_add(self.config.holder_validity());
        }
        self.round = Round::Idle;
        self.failures = 0;
        // Rule 5: a majority of this epoch's voters accepted, each having applied this
        // configuration (so each refuses older epochs from now on, across restarts too: the
        // applied configuration is in its data dir). The first such round of an epoch counts.
        if confirmed && self.quorum_round.is_none_or(|(e, _)| e < self.conf_epoch) {
            self.quorum_round = Some((self.conf_epoch, now));
        }
        // The timer of this round started when it proposed, one validity before expiry.
        let started = Instant::from_nanos(
            expires_at.as_nanos().saturating_sub(crate::time::duration_nanos(self.config.holder_validity())),
        );
        self.next_attempt = Some(started.saturating_add(self.config.renew_interval));
        self.hint = None;
        match self.lease {
            Some(held) if now < held.expires_at => {
                let expires_at = expires_at.max(held.expires_at);
                self.lease = Some(HeldLease { term: held.term, expires_at });
                out.changes.push(LeadershipChange::Extended { term: held.term, valid_until: expires_at });
            }
            stale => {
                if let Some(held) = stale {
                    out.changes.push(LeadershipChange::Lost { term: held.term, reason: LossReason::Expired });
                }
                self.lease = Some(HeldLease { term: ballot, expires_at });
                out.changes.push(LeadershipChange::Elected { term: ballot, valid_until: expires_at });
            }
        }
        out.messages.push((
            Target::Others,
            Body::Learned { owner: self.me, ballot, duration: expires_at.saturating_since(now) },
        ));
    }

    /// Another node released `ballot` at this node's acceptor: if it was the lease this
    /// proposer was waiting out, try again soon instead of waiting for it to expire.
    pub fn on_release_seen(&mut self, now: Instant, ballot: Ballot, rng: &mut SplitMix64) {
        if ballot.node == self.me || !self.wanted || self.lease.is_some() || self.round != Round::Idle {
            return;
        }
        if self.hint.is_some_and(|h| h.ballot.node == ballot.node) {
            self.hint = None;
        }
        let jitter = rng.duration_between(Duration::ZERO, self.config.backoff_min);
        let soon = now.saturating_add(jitter).max(self.hold_off_until);
        // Never later than already planned (a hand-over to this node asked for "at once").
        self.next_attempt = Some(self.next_attempt.map_or(soon, |planned| planned.min(soon)));
    }

    /// This node's acceptor just promised or accepted another proposer's ballot. While this
    /// node holds nothing, it stays out of that round's way for one round timeout: pre-empting
    /// a round that may well succeed is how duelling proposers livelock.
    pub fn on_foreign_round(&mut self, now: Instant, rng: &mut SplitMix64) {
        if self.lease.is_some() || !self.wanted || self.round != Round::Idle {
            return;
        }
        let jitter = rng.duration_between(Duration::ZERO, self.config.backoff_max);
        let after = now.saturating_add(self.config.round_timeout + jitter);
        self.next_attempt = Some(self.next_attempt.map_or(after, |a| a.max(after)));
    }
}

/// The votes that count towards a majority: one per distinct acceptor, or every answer
/// under the `count-duplicates` negative control.
fn tally(config: &LeaseConfig, votes: &Votes) -> usize {
    #[cfg(feature = "negative-controls")]
    if config.broken(Breakage::CountDuplicates) {
        return votes.answers();
    }
    let _ = config;
    votes.count()
}
