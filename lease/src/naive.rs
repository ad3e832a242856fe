//! The naive majority-vote lease of the PaxosLease paper's introduction, for the simulator
//! only: a proposer asks every acceptor for the lease; an acceptor grants it if it holds
//! nothing; a majority of grants wins. No phases, no ballots, no release.
//!
//! It is safe, but under contention it deadlocks statically: each acceptor may grant a
//! different proposer, nobody has a majority, and everybody must wait for the grants to run
//! out before trying again. The simulator shows that cost next to PaxosLease.

use crate::ballot::Ballot;
use crate::config::{Breakage, ConfigError, LeaseConfig};
use crate::core::{ElectionCore, Envelope, LeadershipChange, LossReason, Mastership, Output};
use crate::epoch::RestartEpoch;
use crate::ids::NodeId;
use crate::members::Members;
use crate::message::ElectionMessage;
use crate::rng::SplitMix64;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Messages of the naive algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NaiveMessage {
    /// Proposer → acceptor: grant me the lease for `duration`.
    Ask {
        /// Identifies the attempt.
        attempt: Ballot,
        /// Requested lease time.
        duration: Duration,
    },
    /// Acceptor → proposer: granted.
    Grant {
        /// The attempt answered.
        attempt: Ballot,
    },
    /// Acceptor → proposer: I granted someone else, for `remaining` more.
    Refuse {
        /// The attempt answered.
        attempt: Ballot,
        /// Time left on the other grant.
        remaining: Duration,
    },
}

#[derive(Debug, Clone)]
struct Attempt {
    attempt: Ballot,
    sent_at: Instant,
    grants: Vec<NodeId>,
    refusals: Vec<NodeId>,
    longest_refusal: Duration,
}

/// The naive election core of one node: acceptor and proposer.
#[derive(Debug)]
pub struct NaiveMajorityElection {
    me: NodeId,
    peers: Members,
    /// The configuration epoch of `peers` (0 for the list given at construction).
    conf_epoch: u64,
    config: LeaseConfig,
    epoch: u32,
    quarantine_until: Instant,
    /// The acceptor's grant: holder (its incarnation's attempt) and expiry.
    granted: Option<(Ballot, Instant)>,
    counter: u64,
    wanted: bool,
    attempt: Option<Attempt>,
    lease: Option<Mastership>,
    next_attempt: Option<Instant>,
    hold_off_until: Instant,
    rng: SplitMix64,
    out: Output,
}

impl NaiveMajorityElection {
    /// Node `me` of `peers`, competing at once.
    pub fn new(
        me: NodeId,
        peers: &[NodeId],
        config: LeaseConfig,
        epoch: RestartEpoch,
        now: Instant,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let quarantined = !epoch.first_start && !config.broken(Breakage::NoQuarantine);
        Ok(NaiveMajorityElection {
            me,
            peers: Members::new(me, peers),
            conf_epoch: 0,
            epoch: epoch.value,
            quarantine_until: if quarantined { now.saturating_add(config.max_lease_time) } else { now },
            config,
            granted: None,
            counter: 0,
            wanted: true,
            attempt: None,
            lease: None,
            next_attempt: Some(now),
            hold_off_until: now,
            rng: SplitMix64::new(seed ^ (u64::from(me.0) << 32) ^ u64::from(epoch.value)),
            out: Output::default(),
        })
    }

    fn majority(&self) -> usize {
        self.peers.majority()
    }

    fn send(&mut self, now: Instant, to: NodeId, msg: NaiveMessage) {
        if to == self.me {
            self.handle(now, to, msg);
        } else {
            self.out.messages.push(Envelope { to, msg: ElectionMessage::Naive(msg) });
        }
    }

    fn handle(&mut self, now: Instant, from: NodeId, msg: NaiveMessage) {
        match msg {
            NaiveMessage::Ask { attempt, duration } => {
                if now < self.quarantine_until || duration >= self.config.max_lease_time || attempt.node != from {
                    return;
                }
                let answer = match self.granted.filter(|(_, exp)| now < *exp) {
                    Some((holder, exp)) if !holder.is_incarnation_of(from, attempt.epoch) => {
                        NaiveMessage::Refuse { attempt, remaining: exp.saturating_since(now) }
                    }
                    _ => {
                        self.granted = Some((attempt, now.saturating_add(duration)));
                        NaiveMessage::Grant { attempt }
                    }
                };
                self.send(now, from, answer);
            }
            NaiveMessage::Grant { attempt } => {
                let majority = self.majority();
                let Some(a) = self.attempt.as_mut().filter(|a| a.attempt == attempt) else { return };
                if !a.grants.contains(&from) {
                    a.grants.push(from);
                }
                if a.grants.len() >= majority {
                    let sent_at = a.sent_at;
                    self.attempt = None;
                    let valid_until = sent_at.saturating_add(self.config.holder_validity());
                    if now >= valid_until {
                        return;
                    }
                    match self.lease {
                        Some(l) if now < l.valid_until => {
                            self.lease = Some(Mastership { term: l.term, valid_until });
                            self.out.changes.push(LeadershipChange::Extended { term: l.term, valid_until });
                        }
                        _ => {
                            self.lease = Some(Mastership { term: attempt, valid_until });
                            self.out.changes.push(LeadershipChange::Elected { term: attempt, valid_until });
                        }
                    }
                    self.next_attempt = Some(sent_at.saturating_add(self.config.renew_interval));
                }
            }
            NaiveMessage::Refuse { attempt, remaining } => {
                let hopeless = self.peers.len() - self.majority();
                let Some(a) = self.attempt.as_mut().filter(|a| a.attempt == attempt) else { return };
                if !a.refusals.contains(&from) {
                    a.refusals.push(from);
                }
                a.longest_refusal = a.longest_refusal.max(remaining);
                if a.refusals.len() > hopeless {
                    // The grants already given stay out there until they run out: the
                    // static deadlock. Waiting them out is all this algorithm can do.
                    let wait = a.longest_refusal;
                    self.attempt = None;
                    let jitter = self.jitter();
                    self.next_attempt = Some(now.saturating_add(wait + jitter).max(self.hold_off_until));
                }
            }
        }
    }

    fn jitter(&mut self) -> Duration {
        self.rng.duration_between(self.config.backoff_min, self.config.backoff_max)
    }
}

impl ElectionCore for NaiveMajorityElection {
    fn id(&self) -> NodeId {
        self.me
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, msg: ElectionMessage) {
        if !self.peers.contains(from) {
            return;
        }
        if let ElectionMessage::Naive(m) = msg {
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
        if let Some(a) = &self.attempt {
            if now >= a.sent_at.saturating_add(self.config.round_timeout) {
                self.attempt = None;
                let jitter = self.jitter();
                self.next_attempt = Some(now.saturating_add(jitter).max(self.hold_off_until));
            }
        }
        if self.wanted && self.attempt.is_none() && self.next_attempt.is_some_and(|a| now >= a) {
            self.counter += 1;
            let attempt = Ballot { counter: self.counter, epoch: self.epoch, node: self.me };
            self.attempt = Some(Attempt {
                attempt,
                sent_at: now,
                grants: Vec::new(),
                refusals: Vec::new(),
                longest_refusal: Duration::ZERO,
            });
            self.next_attempt = None;
            let duration = self.config.lease_time;
            for peer in self.peers.clone().iter() {
                self.send(now, peer, NaiveMessage::Ask { attempt, duration });
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let round = match &self.attempt {
            Some(a) => Some(a.sent_at.saturating_add(self.config.round_timeout)),
            None => self.next_attempt.filter(|_| self.wanted),
        };
        [round, self.lease.map(|l| l.valid_until)].into_iter().flatten().min()
    }

    fn take_output(&mut self) -> Output {
        std::mem::take(&mut self.out)
    }

    fn mastership(&self, now: Instant) -> Option<Mastership> {
        self.lease.filter(|l| now < l.valid_until)
    }

    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        self.mastership(now).map(|_| self.me)
    }

    fn step_down(&mut self, now: Instant) {
        // The naive algorithm has no release: stepping down only stops believing.
        if let Some(l) = self.lease.take() {
            self.out.changes.push(LeadershipChange::Lost { term: l.term, reason: LossReason::Released });
        }
        self.hold_off_until = now.saturating_add(self.config.step_down_hold);
        self.next_attempt = Some(self.hold_off_until);
    }

    fn shut_down(&mut self, now: Instant) {
        self.step_down(now);
        self.wanted = false;
    }

    /// The naive baseline has no switch of its own: off, it steps down and stops asking, as
    /// a shutdown; on, it asks again after the hold-off.
    fn set_candidacy(&mut self, now: Instant, candidate: bool) {
        if candidate == self.wanted {
            return;
        }
        if candidate {
            self.wanted = true;
            self.next_attempt = Some(now.max(self.hold_off_until));
        } else {
            self.shut_down(now);
        }
    }

    /// The deliberately unsafe baseline just asks the new voters from then on: it has no
    /// epochs, so nothing stops an old majority granting meanwhile.
    fn set_configuration(&mut self, _now: Instant, configuration: &crate::members::Configuration) {
        let (epoch, voters) = (configuration.epoch, configuration.voters.as_slice());
        if epoch < self.conf_epoch {
            return;
        }
        self.conf_epoch = epoch;
        self.peers = Members::new(self.me, voters);
    }

    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        None
    }
}
