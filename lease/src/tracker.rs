//! The comparison backend: a central lease tracker, no Paxos (seeds 003 and 004).
//!
//! One configured node runs the tracker. Every node is a candidate: it asks the tracker
//! for the master lease and renews it with heartbeats. The tracker grants one holder at a
//! time, by its own monotonic clock. A candidate counts its lease from the moment it *sent*
//! the request, shortened by the drift bound, so it stops believing before the tracker can
//! grant anyone else. After a restart the tracker grants nothing for the max lease time.
//!
//! The tracker is a single point of failure: while it is down or cut off, nobody can become
//! master. That is the point of the comparison.

use crate::ballot::{Ballot, Term};
use crate::config::{Breakage, ConfigError, LeaseConfig};
use crate::core::{ElectionCore, Envelope, LeadershipChange, LossReason, Mastership, Output};
use crate::epoch::RestartEpoch;
use crate::ids::NodeId;
use crate::message::ElectionMessage;
use crate::rng::SplitMix64;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Messages between candidates and the tracker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrackerMessage {
    /// Candidate → tracker: grant or renew the master lease for `duration`.
    Request {
        /// Unique request id (counter, candidate's restart epoch, candidate).
        request: Ballot,
        /// Requested lease time.
        duration: Duration,
    },
    /// Tracker → candidate: the lease is yours.
    Granted {
        /// The request answered.
        request: Ballot,
        /// The tenure (constant across renewals by the same incarnation).
        term: Term,
    },
    /// Tracker → candidate: someone else holds it (or the tracker is in quarantine).
    Denied {
        /// The request answered.
        request: Ballot,
        /// The current holder, if any.
        holder: Option<NodeId>,
        /// How long before asking again can succeed, by the tracker's clock.
        remaining: Duration,
    },
    /// Candidate → tracker: drop the lease granted for `request`.
    Release {
        /// The request whose grant is released.
        request: Ballot,
    },
}

#[derive(Debug, Clone, Copy)]
struct Grant {
    holder: NodeId,
    request: Ballot,
    term: Term,
    expires_at: Instant,
}

/// The tracker's state (only on the tracker node).
#[derive(Debug)]
struct Tracker {
    epoch: u32,
    quarantine_until: Instant,
    terms: u64,
    grant: Option<Grant>,
}

impl Tracker {
    fn on_request(
        &mut self,
        now: Instant,
        from: NodeId,
        request: Ballot,
        duration: Duration,
        config: &LeaseConfig,
    ) -> TrackerMessage {
        if now < self.quarantine_until {
            let remaining = self.quarantine_until.saturating_since(now);
            return TrackerMessage::Denied { request, holder: None, remaining };
        }
        if duration >= config.max_lease_time || request.node != from {
            return TrackerMessage::Denied { request, holder: None, remaining: Duration::ZERO };
        }
        let live = self.grant.filter(|g| now < g.expires_at);
        let term = match live {
            Some(g) if g.holder != from => {
                return TrackerMessage::Denied {
                    request,
                    holder: Some(g.holder),
                    remaining: g.expires_at.saturating_since(now),
                };
            }
            // A renewal by the same incarnation keeps its tenure.
            Some(g) if g.request.epoch == request.epoch => g.term,
            _ => {
                self.terms += 1;
                Ballot { counter: self.terms, epoch: self.epoch, node: from }
            }
        };
        let mut grant = Grant { holder: from, request, term, expires_at: now.saturating_add(duration) };
        if let Some(g) = live.filter(|g| g.holder == from) {
            // A delayed, older request must not replace the record of a newer grant: a
            // release naming the older request would then cancel the newer lease. "Older"
            // is by incarnation first: request counters restart with every epoch, and a
            // record stuck on the previous incarnation's request would hand out a new term
            // on every renewal.
            if (g.request.epoch, g.request.counter) > (request.epoch, request.counter) {
                grant.request = g.request;
            }
            grant.expires_at = grant.expires_at.max(g.expires_at);
        }
        self.grant = Some(grant);
        TrackerMessage::Granted { request, term }
    }

    /// `any_request`: the `release-any-ballot` negative control (any release of the holder's).
    fn on_release(&mut self, from: NodeId, request: Ballot, any_request: bool) {
        let matches = match self.grant {
            Some(g) if any_request => g.holder == from,
            Some(g) => g.holder == from && g.request == request,
            None => false,
        };
        if matches {
            self.grant = None;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Outstanding {
    request: Ballot,
    sent_at: Instant,
}

/// The lease-tracker election core of one node: a candidate, plus the tracker itself on
/// the tracker node.
#[derive(Debug)]
pub struct LeaseTrackerElection {
    me: NodeId,
    tracker_node: NodeId,
    /// Every node this one talks to: the voters and learners of the applied configuration,
    /// and the tracker node.
    peers: Vec<NodeId>,
    /// The candidates: the voters of the applied configuration. Only they ask for the lease,
    /// and the tracker grants only to them.
    voters: Vec<NodeId>,
    /// The applied configuration epoch, and the local instant it was applied.
    conf_epoch: u64,
    applied_at: Instant,
    config: LeaseConfig,
    epoch: u32,
    tracker: Option<Tracker>,
    counter: u64,
    wanted: bool,
    /// The driver's candidacy switch (see [`ElectionCore::set_candidacy`]).
    candidate: bool,
    outstanding: Option<Outstanding>,
    last_granted: Option<Ballot>,
    lease: Option<Mastership>,
    next_attempt: Option<Instant>,
    hold_off_until: Instant,
    hint: Option<(NodeId, Instant)>,
    rng: SplitMix64,
    out: Output,
}

impl LeaseTrackerElection {
    /// Node `me` of `peers`; `tracker_node` runs the tracker. Starts competing at once.
    pub fn new(
        me: NodeId,
        peers: &[NodeId],
        tracker_node: NodeId,
        config: LeaseConfig,
        epoch: RestartEpoch,
        now: Instant,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let quarantined = !epoch.first_start && !config.broken(Breakage::NoQuarantine);
        let tracker = (me == tracker_node).then(|| Tracker {
            epoch: epoch.value,
            quarantine_until: if quarantined { now.saturating_add(config.max_lease_time) } else { now },
            terms: 0,
            grant: None,
        });
        Ok(LeaseTrackerElection {
            me,
            tracker_node,
            peers: peers.to_vec(),
            voters: peers.iter().copied().chain(std::iter::once(me)).collect(),
            conf_epoch: 0,
            applied_at: now,
            config,
            epoch: epoch.value,
            tracker,
            counter: 0,
            wanted: true,
            candidate: true,
            outstanding: None,
            last_granted: None,
            lease: None,
            next_attempt: Some(now),
            hold_off_until: now,
            hint: None,
            rng: SplitMix64::new(seed ^ (u64::from(me.0) << 32) ^ u64::from(epoch.value)),
            out: Output::default(),
        })
    }

    /// Sends to the tracker, handling it in place when this node is the tracker.
    fn send_to_tracker(&mut self, now: Instant, msg: TrackerMessage) {
        if self.me == self.tracker_node {
            self.handle(now, self.me, msg);
        } else {
            self.out.messages.push(Envelope { to: self.tracker_node, msg: ElectionMessage::Tracker(msg) });
        }
    }

    fn reply(&mut self, now: Instant, to: NodeId, msg: TrackerMessage) {
        if to == self.me {
            self.handle(now, to, msg);
        } else {
            self.out.messages.push(Envelope { to, msg: ElectionMessage::Tracker(msg) });
        }
    }

    fn jitter(&mut self) -> Duration {
        self.rng.duration_between(self.config.backoff_min, self.config.backoff_max)
    }

    fn handle(&mut self, now: Instant, from: NodeId, msg: TrackerMessage) {
        match msg {
            TrackerMessage::Request { request, duration } => {
                if !self.voters.contains(&from) {
                    // Not a candidate in the configuration this tracker applied (a learner,
                    // a removed node, or a voter it has not heard of yet: that one asks again).
                    return;
                }
                let config = self.config.clone();
                if let Some(t) = self.tracker.as_mut() {
                    let answer = t.on_request(now, from, request, duration, &config);
                    self.reply(now, from, answer);
                }
            }
            TrackerMessage::Release { request } => {
                let any_request = self.config.broken(Breakage::ReleaseAnyBallot);
                if let Some(t) = self.tracker.as_mut() {
                    t.on_release(from, request, any_request);
                }
            }
            TrackerMessage::Granted { request, term } => {
                let Some(o) = self.outstanding.filter(|o| o.request == request) else { return };
                if from != self.tracker_node {
                    return;
                }
                self.outstanding = None;
                self.last_granted = Some(request);
                // Counted from the moment the request was sent: the tracker's countdown
                // started later than that.
                let start = if self.config.broken(Breakage::LateTimer) { now } else { o.sent_at };
                let valid_until = start.saturating_add(self.config.holder_validity());
                if now >= valid_until {
                    return;
                }
                match self.lease {
                    Some(l) if now < l.valid_until && l.term == term => {
                        let valid_until = valid_until.max(l.valid_until);
                        self.lease = Some(Mastership { term, valid_until });
                        self.out.changes.push(LeadershipChange::Extended { term, valid_until });
                    }
                    previous => {
                        if let Some(l) = previous {
                            self.out.changes.push(LeadershipChange::Lost { term: l.term, reason: LossReason::Expired });
                        }
                        self.lease = Some(Mastership { term, valid_until });
                        self.out.changes.push(LeadershipChange::Elected { term, valid_until });
                    }
                }
                self.next_attempt = Some(o.sent_at.saturating_add(self.config.renew_interval));
            }
            TrackerMessage::Denied { request, holder, remaining } => {
                if self.outstanding.is_none_or(|o| o.request != request) {
                    return;
                }
                self.outstanding = None;
                if let Some(h) = holder {
                    self.hint = Some((h, now.saturating_add(remaining)));
                }
                let wait = remaining + self.jitter();
                self.next_attempt = Some(now.saturating_add(wait).max(self.hold_off_until));
            }
        }
    }

    /// Whether this node asks for the lease: the driver wants it, it is a voter of the
    /// applied configuration, and so is the tracker node. Removing the tracker cannot be
    /// made safe without consensus on the tracker (a partitioned old tracker that has not
    /// applied the change keeps granting to nodes that have not applied it either), so the
    /// server refuses such a change; should one be applied anyway, nobody asks.
    fn competing(&self) -> bool {
        self.wanted && self.candidate && self.voters.contains(&self.me) && self.voters.contains(&self.tracker_node)
    }

    fn release(&mut self, now: Instant, keep_competing: bool) {
        if let Some(l) = self.lease.take() {
            self.out.changes.push(LeadershipChange::Lost { term: l.term, reason: LossReason::Released });
        }
        let requests: Vec<Ballot> =
            self.last_granted.take().into_iter().chain(self.outstanding.take().map(|o| o.request)).collect();
        for request in requests {
            self.send_to_tracker(now, TrackerMessage::Release { request });
        }
        self.wanted = keep_competing;
        self.hold_off_until = now.saturating_add(self.config.step_down_hold);
        self.next_attempt = keep_competing.then_some(self.hold_off_until);
    }
}

impl ElectionCore for LeaseTrackerElection {
    fn id(&self) -> NodeId {
        self.me
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, msg: ElectionMessage) {
        if !self.peers.contains(&from) {
            return;
        }
        if let ElectionMessage::Tracker(m) = msg {
            self.handle(now, from, m);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(l) = self.lease {
            if now >= l.valid_until {
                self.lease = None;
                self.out.changes.push(LeadershipChange::Lost { term: l.term, reason: LossReason::Expired });
            }
        }
        if let Some(o) = self.outstanding {
            if now >= o.sent_at.saturating_add(self.config.round_timeout) {
                self.outstanding = None;
                let retry = now.saturating_add(self.jitter());
                self.next_attempt = Some(retry.max(self.hold_off_until));
            }
        }
        if self.competing() && self.outstanding.is_none() && self.next_attempt.is_some_and(|a| now >= a) {
            self.counter = self.counter.saturating_add(1);
            let request = Ballot { counter: self.counter, epoch: self.epoch, node: self.me };
            self.outstanding = Some(Outstanding { request, sent_at: now });
            self.next_attempt = None;
            self.send_to_tracker(now, TrackerMessage::Request { request, duration: self.config.lease_time });
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let round = match self.outstanding {
            Some(o) => Some(o.sent_at.saturating_add(self.config.round_timeout)),
            None => self.next_attempt.filter(|_| self.competing()),
        };
        [round, self.lease.map(|l| l.valid_until)].into_iter().flatten().min()
    }

    /// Candidates come and go with the configuration; the tracker node stays (a change that
    /// removes it is refused by the server: see the module of this type).
    fn set_configuration(&mut self, now: Instant, configuration: &crate::members::Configuration) {
        let (epoch, voters, learners) =
            (configuration.epoch, configuration.voters.as_slice(), configuration.learners.as_slice());
        if epoch < self.conf_epoch {
            return;
        }
        if epoch > self.conf_epoch {
            self.applied_at = now;
        }
        self.conf_epoch = epoch;
        self.voters = voters.to_vec();
        let mut peers: Vec<NodeId> =
            voters.iter().chain(learners).copied().chain(std::iter::once(self.tracker_node)).collect();
        peers.sort();
        peers.dedup();
        self.peers = peers;
        if !self.voters.contains(&self.tracker_node) {
            tracing::warn!(
                tracker = %self.tracker_node,
                epoch,
                "the lease tracker is not a voter of the applied configuration: not asking for the master lease"
            );
        }
        if !self.competing() {
            // A removed node, or one whose tracker was removed, gives its lease up as a
            // shutdown would; it asks again if a later configuration makes it a candidate.
            let wanted = self.wanted;
            self.release(now, wanted);
        }
    }

    /// The tracker grants by its own clock whoever the voters are, so its safety does not
    /// depend on the voter set: a change may follow as soon as this node applied the last.
    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        Some((self.conf_epoch, self.applied_at))
    }

    fn take_output(&mut self) -> Output {
        std::mem::take(&mut self.out)
    }

    fn mastership(&self, now: Instant) -> Option<Mastership> {
        self.lease.filter(|l| now < l.valid_until)
    }

    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        if self.mastership(now).is_some() {
            return Some(self.me);
        }
        self.hint.filter(|(_, until)| now < *until).map(|(n, _)| n)
    }

    fn step_down(&mut self, now: Instant) {
        self.release(now, true);
    }

    fn set_candidacy(&mut self, now: Instant, candidate: bool) {
        if candidate == self.candidate {
            return;
        }
        self.candidate = candidate;
        if !candidate {
            let wanted = self.wanted;
            self.release(now, wanted);
        } else if self.wanted && self.next_attempt.is_none() {
            self.next_attempt = Some(now.max(self.hold_off_until));
        }
    }

    fn shut_down(&mut self, now: Instant) {
        self.release(now, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ElectionCore;
    use crate::members::Configuration;

    /// Delivers every message between the cores at `now` until none is left (bounded).
    fn exchange(cores: &mut [LeaseTrackerElection], now: Instant) -> Vec<(NodeId, LeadershipChange)> {
        let mut changes = Vec::new();
        for _ in 0..100 {
            let mut moved = false;
            for i in 0..cores.len() {
                let out = cores[i].take_output();
                let from = cores[i].id();
                changes.extend(out.changes.into_iter().map(|c| (from, c)));
                for env in out.messages {
                    moved = true;
                    if let Some(to) = cores.iter_mut().find(|c| c.id() == env.to) {
                        to.handle_message(now, from, env.msg);
                    }
                }
            }
            if !moved {
                break;
            }
        }
        changes
    }

    #[test]
    fn renewals_after_a_restart_keep_one_term() {
        let config = LeaseConfig::with_lease_time(Duration::from_secs(1));
        let ids = [NodeId(1), NodeId(2)];
        let first = RestartEpoch { value: 1, first_start: true };
        let mut now = Instant::from_nanos(1_000_000_000);
        let tracker = LeaseTrackerElection::new(NodeId(1), &ids, NodeId(1), config.clone(), first, now, 1).unwrap();
        let node2 = LeaseTrackerElection::new(NodeId(2), &ids, NodeId(1), config.clone(), first, now, 2).unwrap();
        let mut cores = vec![tracker, node2];
        let step = Duration::from_millis(50);
        // The tracker node must not win itself: it only tracks in this test.
        cores[0].wanted = false;
        for _ in 0..200 {
            now = now.saturating_add(step);
            for c in cores.iter_mut() {
                c.handle_timeout(now);
            }
            exchange(&mut cores, now);
        }
        assert!(cores[1].mastership(now).is_some(), "node 2 holds the master lease");
        // Node 2 restarts (a new epoch, request counters start again) while its old grant
        // is still live at the tracker.
        let second = RestartEpoch { value: 2, first_start: false };
        cores[1] = LeaseTrackerElection::new(NodeId(2), &ids, NodeId(1), config, second, now, 3).unwrap();
        let mut elected = 0;
        for _ in 0..200 {
            now = now.saturating_add(step);
            for c in cores.iter_mut() {
                c.handle_timeout(now);
            }
            let changes = exchange(&mut cores, now);
            elected += changes.iter().filter(|(_, c)| matches!(c, LeadershipChange::Elected { .. })).count();
        }
        assert!(cores[1].mastership(now).is_some());
        assert_eq!(elected, 1, "every renewal after the restart must keep the new tenure");
    }

    #[test]
    fn configuration_decides_who_asks_and_a_removed_tracker_stops_everyone() {
        let config = LeaseConfig::with_lease_time(Duration::from_secs(1));
        let ids = [NodeId(1), NodeId(2), NodeId(3)];
        let first = RestartEpoch { value: 1, first_start: true };
        let now = Instant::from_nanos(1_000_000_000);
        let mut n2 = LeaseTrackerElection::new(NodeId(2), &ids, NodeId(1), config, first, now, 2).unwrap();
        assert_eq!(n2.change_allowed_after(), Some((0, now)));
        // A learner does not ask.
        let later = now.saturating_add(Duration::from_millis(5));
        n2.set_configuration(later, &Configuration::new(1, &[NodeId(1), NodeId(3), NodeId(4)], &[NodeId(2)]));
        assert_eq!(n2.poll_timeout(), None);
        assert_eq!(n2.change_allowed_after(), Some((1, later)), "the tracker's safety needs no wait");
        // Promoted: asks again.
        n2.set_configuration(later, &Configuration::new(2, &[NodeId(1), NodeId(2), NodeId(3), NodeId(4)], &[]));
        let _ = n2.take_output();
        let ask = n2.poll_timeout().expect("a voter asks");
        n2.handle_timeout(ask);
        assert!(matches!(
            n2.take_output().messages[..],
            [Envelope { to: NodeId(1), msg: ElectionMessage::Tracker(TrackerMessage::Request { .. }) }]
        ));
        // The tracker node removed (the server refuses that, but the core is safe anyway):
        // nobody asks any more.
        n2.set_configuration(later, &Configuration::new(3, &[NodeId(2), NodeId(3), NodeId(4)], &[]));
        assert_eq!(n2.poll_timeout(), None);
        // A stale configuration is ignored.
        n2.set_configuration(later, &Configuration::new(2, &[NodeId(1), NodeId(2), NodeId(3), NodeId(4)], &[]));
        assert_eq!(n2.poll_timeout(), None);
    }
}
