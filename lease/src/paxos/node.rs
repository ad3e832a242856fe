//! One node's PaxosLease instances: an acceptor for every resource it is asked about and a
//! proposer for every resource it competes for, under the configuration the node applied
//! from the log (docs/membership.md, rule 4).

use super::acceptor::Acceptor;
use super::message::{Body, Message};
use super::proposer::{Proposer, ProposerOutput, Target};
use crate::config::{Breakage, LeaseConfig};
use crate::core::{Envelope, LeadershipChange, Mastership, Output};
use crate::epoch::RestartEpoch;
use crate::ids::{NodeId, ResourceId};
use crate::members::Members;
use crate::message::ElectionMessage;
use crate::rng::SplitMix64;
use crate::time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// The PaxosLease state of one node: acceptors and proposers per resource, the restart
/// quarantine, and the outbox.
#[derive(Debug)]
pub struct LeaseNode {
    me: NodeId,
    /// The voters of the applied configuration: where requests go, whose votes count.
    voters: Members,
    /// The learners of the applied configuration: they get hints, never vote.
    learners: Vec<NodeId>,
    /// The configuration epoch this node has applied from the log.
    conf_epoch: u64,
    /// The highest configuration epoch seen in any message. Above `conf_epoch`, the log has
    /// chosen a configuration this node has not applied: the driver asks the log to catch up
    /// (see [`LeaseNode::seen_epoch`]). It never changes what this node refuses or whether it
    /// competes: that follows only the applied configuration, which is durable (design v2 in
    /// docs/membership.md).
    seen_epoch: u64,
    /// The driver's candidacy switch ([`LeaseNode::set_candidacy`]).
    candidate: bool,
    config: LeaseConfig,
    epoch: u32,
    /// The acceptor role stays silent until then (restart quarantine, rule 1).
    quarantine_until: Instant,
    acceptors: BTreeMap<ResourceId, Acceptor>,
    proposers: BTreeMap<ResourceId, Proposer>,
    rng: SplitMix64,
    outbox: Vec<Envelope>,
    changes: Vec<(ResourceId, LeadershipChange)>,
}

impl LeaseNode {
    /// A node `me` of the cluster `peers` (all acceptors, `me` included), started at `now`,
    /// at configuration epoch 0 with every node of `peers` (and `me`) a voter.
    ///
    /// Unless this is the node's very first start, its acceptors stay silent for the max
    /// lease time: a restart wiped whatever they had accepted, and a lease they accepted
    /// before may still be running. `seed` drives the back-off jitter.
    pub fn new(
        me: NodeId,
        peers: &[NodeId],
        config: LeaseConfig,
        epoch: RestartEpoch,
        now: Instant,
        seed: u64,
    ) -> Self {
        let voters = Members::new(me, peers);
        let quarantined = !epoch.first_start && !config.broken(Breakage::NoQuarantine);
        let quarantine_until = if quarantined { now.saturating_add(config.max_lease_time) } else { now };
        LeaseNode {
            me,
            voters,
            learners: Vec::new(),
            conf_epoch: 0,
            seen_epoch: 0,
            candidate: true,
            config,
            epoch: epoch.value,
            quarantine_until,
            acceptors: BTreeMap::new(),
            proposers: BTreeMap::new(),
            rng: SplitMix64::new(seed ^ (u64::from(me.0) << 32) ^ u64::from(epoch.value)),
            outbox: Vec::new(),
            changes: Vec::new(),
        }
    }

    /// This node.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// The configuration in force.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Until when the acceptor role stays silent after a restart.
    pub fn quarantine_until(&self) -> Instant {
        self.quarantine_until
    }

    /// The configuration epoch this node has applied.
    pub fn conf_epoch(&self) -> u64 {
        self.conf_epoch
    }

    /// The configuration epoch this node is at: the one it applied (durable, in its data
    /// dir). Its messages carry it, and its acceptors refuse rounds below it.
    pub fn current_epoch(&self) -> u64 {
        self.conf_epoch
    }

    /// The highest configuration epoch seen in any message (at least the applied one).
    pub fn seen_epoch(&self) -> u64 {
        self.conf_epoch.max(self.seen_epoch)
    }

    /// The voters of the applied configuration.
    pub fn voters(&self) -> &Members {
        &self.voters
    }

    /// Whether the configuration lets this node compete: it is a voter of the configuration
    /// it applied. A node that has seen a later configuration may still try: acceptors that
    /// applied the later one refuse it, and rule 5 makes sure a majority of its own
    /// configuration includes such an acceptor once a second change is under way.
    /// It must also be a candidate ([`LeaseNode::set_candidacy`]).
    pub fn may_compete(&self) -> bool {
        self.candidate && self.voters.contains(self.me)
    }

    /// Turns the driver's candidacy switch (see
    /// [`ElectionCore::set_candidacy`](crate::core::ElectionCore::set_candidacy)): off, every
    /// proposer gives up what it holds and starts no round, remembering whether the driver
    /// wants the resource; on, competing resumes after the hold-off. The acceptors are
    /// untouched either way.
    pub fn set_candidacy(&mut self, now: Instant, candidate: bool) {
        if candidate == self.candidate {
            return;
        }
        self.candidate = candidate;
        let eligible = self.may_compete();
        let resources: Vec<ResourceId> = self.proposers.keys().copied().collect();
        for resource in resources {
            let mut out = ProposerOutput::default();
            if let Some(p) = self.proposers.get_mut(&resource) {
                if !candidate {
                    p.retire(now, &mut out);
                }
                p.set_eligible(now, eligible, &mut out);
            }
            self.emit(now, resource, out);
        }
    }

    /// Whether the driver's candidacy switch is on.
    pub fn is_candidate(&self) -> bool {
        self.candidate
    }

    /// Starts competing for `resource` (as soon as the configuration allows).
    pub fn acquire(&mut self, now: Instant, resource: ResourceId) {
        let (me, epoch, voters, config) = (self.me, self.epoch, self.voters.clone(), self.config.clone());
        let (conf_epoch, learners, eligible) = (self.conf_epoch, self.learners.clone(), self.may_compete());
        let mut out = ProposerOutput::default();
        let p = self.proposers.entry(resource).or_insert_with(|| {
            let mut p = Proposer::new(me, epoch, voters.clone(), config);
            let mut quiet = SplitMix64::new(0);
            p.reconfigure(now, conf_epoch, voters, learners, &mut quiet, &mut ProposerOutput::default());
            p
        });
        p.set_eligible(now, eligible, &mut out);
        p.acquire(now);
        self.emit(now, resource, out);
        self.on_timeout(now);
    }

    /// Applies configuration `epoch` from the log (see
    /// [`ElectionCore::set_configuration`](crate::core::ElectionCore::set_configuration)):
    /// ignored below the applied epoch; otherwise every proposer abandons its round and
    /// continues with the new voters, and a node that is no longer a voter releases what it
    /// holds and stops competing until a later configuration makes it a voter again.
    pub fn set_configuration(&mut self, now: Instant, epoch: u64, voters: &[NodeId], learners: &[NodeId]) {
        if epoch < self.conf_epoch {
            return;
        }
        let voters = Members::from_ids(voters);
        let mut learners: Vec<NodeId> = learners.iter().copied().filter(|l| !voters.contains(*l)).collect();
        learners.sort();
        learners.dedup();
        if epoch == self.conf_epoch && voters == self.voters && learners == self.learners {
            return;
        }
        tracing::debug!(node = %self.me, epoch, voters = ?voters.as_slice(), ?learners, "applying configuration");
        self.conf_epoch = epoch;
        self.voters = voters;
        self.learners = learners;
        let (eligible, voter) = (self.may_compete(), self.voters.contains(self.me));
        let resources: Vec<ResourceId> = self.proposers.keys().copied().collect();
        for resource in resources {
            let mut out = ProposerOutput::default();
            if let Some(p) = self.proposers.get_mut(&resource) {
                p.reconfigure(now, epoch, self.voters.clone(), self.learners.clone(), &mut self.rng, &mut out);
                if !voter {
                    p.retire(now, &mut out);
                }
                p.set_eligible(now, eligible, &mut out);
            }
            self.emit(now, resource, out);
        }
    }

    /// Notes configuration epoch `epoch` seen in a message: only a hint that the log chose
    /// more than this node applied (see [`LeaseNode::seen_epoch`]).
    fn observe_epoch(&mut self, epoch: u64) {
        self.seen_epoch = self.seen_epoch.max(epoch);
    }

    /// Rule 5 for `resource`: `(epoch, at)` once this node completed a round at its applied
    /// configuration `epoch` answered by a majority of that configuration's voters; `at` is
    /// that completion plus the max lease time M as any other clock may measure it
    /// (M·(1+ε)/(1-ε), rounded up by a millisecond).
    pub fn change_allowed_after(&self, resource: ResourceId) -> Option<(u64, Instant)> {
        let (epoch, completed) = self.proposers.get(&resource)?.quorum_round()?;
        Some((epoch, completed.saturating_add(self.config.cover_remote(self.config.max_lease_time))))
    }

    /// Releases `resource` if held; with `keep_competing`, competes again after the hold-off.
    pub fn release(&mut self, now: Instant, resource: ResourceId, keep_competing: bool) {
        let mut out = ProposerOutput::default();
        if let Some(p) = self.proposers.get_mut(&resource) {
            p.release(now, keep_competing, &mut out);
        }
        self.emit(now, resource, out);
    }

    /// Releases `resource` so that `to` takes it next (see [`Proposer::hand_over`]); a plain
    /// release when this node does not hold it.
    pub fn hand_over(&mut self, now: Instant, resource: ResourceId, to: NodeId) {
        let mut out = ProposerOutput::default();
        if let Some(p) = self.proposers.get_mut(&resource) {
            p.hand_over(now, to, &mut out);
        }
        self.emit(now, resource, out);
    }

    /// Whether this node holds `resource` at `now`.
    pub fn mastership(&self, now: Instant, resource: ResourceId) -> Option<Mastership> {
        self.proposers.get(&resource).and_then(|p| p.mastership(now))
    }

    /// Rounds this node's proposer for `resource` abandoned so far.
    pub fn failed_rounds(&self, resource: ResourceId) -> u64 {
        self.proposers.get(&resource).map_or(0, Proposer::failed_rounds)
    }

    /// Who this node believes holds `resource` (a hint, never a grant).
    pub fn holder_hint(&self, now: Instant, resource: ResourceId) -> Option<NodeId> {
        self.proposers.get(&resource).and_then(|p| p.hint(now))
    }

    /// The acceptor state of `resource`, if this node was ever asked about it.
    pub fn acceptor(&self, resource: ResourceId) -> Option<&Acceptor> {
        self.acceptors.get(&resource)
    }

    /// Number of acceptor instances held in memory.
    pub fn acceptor_count(&self) -> usize {
        self.acceptors.len()
    }

    /// Feeds a message from `from`.
    ///
    /// Any sender is heard, members of the applied configuration or not: a node cannot know
    /// that it was just promoted, or that a new voter joined, before the log tells it, and
    /// refusing them would only stall the election. Safety does not rest on who is heard but
    /// on who is counted: a proposer counts only the voters of its configuration (see
    /// `Proposer::counts`). The exceptions are requests at this node's own epoch from a node
    /// that is not a voter of it (such a node must not compete, so only a foreign cluster or
    /// a bug sends them), which are dropped, and requests from a lower epoch, refused with
    /// [`Body::StaleConfiguration`].
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        // A ballot no honest node can have issued would leave nothing to outbid it.
        if !msg.body.is_plausible() {
            tracing::debug!(%from, "dropped a PaxosLease message with an implausible ballot");
            return;
        }
        let mut local = VecDeque::new();
        local.push_back((from, msg));
        // Messages to self are handled right here, in order, without a network hop.
        while let Some((from, msg)) = local.pop_front() {
            self.dispatch(now, from, msg);
            let mine: Vec<Envelope> = self.take_local();
            for env in mine {
                if let ElectionMessage::PaxosLease(m) = env.msg {
                    local.push_back((self.me, m));
                }
            }
        }
    }

    fn take_local(&mut self) -> Vec<Envelope> {
        let me = self.me;
        let (mine, others): (Vec<_>, Vec<_>) = self.outbox.drain(..).partition(|e| e.to == me);
        self.outbox = others;
        mine
    }

    fn dispatch(&mut self, now: Instant, from: NodeId, msg: Message) {
        let resource = msg.resource;
        let sent_at = msg.epoch;
        self.observe_epoch(sent_at);
        let current = self.current_epoch();
        if msg.body.is_for_acceptor() {
            if now < self.quarantine_until {
                return;
            }
            let round_request = matches!(msg.body, Body::PrepareRequest { .. } | Body::ProposeRequest { .. });
            // At the epoch this node applied it knows the voters; at a later one it does not
            // yet, and the sender may well be a new voter.
            let known_configuration = sent_at == self.conf_epoch;
            if round_request && known_configuration && from != self.me && !self.voters.contains(from) {
                tracing::debug!(%from, epoch = current, "dropping a round from a node that is not a voter");
                return;
            }
            let acceptor = self.acceptors.entry(resource).or_default();
            let reply = match msg.body {
                // Rule 4: a round from an older configuration is refused without touching the
                // promise, so that the proposer gives up at once. A Release is honoured
                // whatever its epoch: it only ever frees its sender's own ballot.
                Body::PrepareRequest { ballot } | Body::ProposeRequest { ballot, .. } if sent_at < current => {
                    Some(Body::StaleConfiguration { ballot, epoch: current })
                }
                Body::PrepareRequest { ballot } => Some(acceptor.on_prepare(now, ballot)),
                Body::ProposeRequest { ballot, proposal } => {
                    Some(acceptor.on_propose(now, ballot, proposal, self.config.max_lease_time))
                }
                Body::Release { ballot } => {
                    if release(acceptor, ballot, &self.config) {
                        if let Some(p) = self.proposers.get_mut(&resource) {
                            p.on_release_seen(now, ballot, &mut self.rng);
                        }
                    }
                    None
                }
                _ => None,
            };
            let foreign_round = from != self.me
                && matches!(
                    reply,
                    Some(Body::PrepareResponse { .. }) | Some(Body::ProposeResponse { accepted: true, .. })
                );
            if foreign_round {
                if let Some(p) = self.proposers.get_mut(&resource) {
                    p.on_foreign_round(now, &mut self.rng);
                }
            }
            if let Some(body) = reply {
                let msg = Message { resource, epoch: current, body };
                self.outbox.push(Envelope { to: from, msg: ElectionMessage::PaxosLease(msg) });
            }
        } else if sent_at < current && matches!(msg.body, Body::Learned { .. } | Body::HandOver { .. }) {
            // Hints from a node still at an older configuration (a removed node that came
            // back, a lagging one) would only hold this node back.
        } else if let Some(p) = self.proposers.get_mut(&resource) {
            let mut out = ProposerOutput::default();
            p.on_message(now, from, sent_at, msg.body, &mut self.rng, &mut out);
            self.queue(resource, out);
        }
    }

    /// The earliest instant any proposer needs to act.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.proposers.values().filter_map(Proposer::poll_timeout).min()
    }

    /// Lets every proposer act on what is due at `now`.
    pub fn on_timeout(&mut self, now: Instant) {
        let resources: Vec<ResourceId> = self.proposers.keys().copied().collect();
        for resource in resources {
            let mut out = ProposerOutput::default();
            if let Some(p) = self.proposers.get_mut(&resource) {
                p.on_timeout(now, &mut self.rng, &mut out);
            }
            self.emit(now, resource, out);
        }
    }

    /// Queues a proposer's output, then handles whatever it sent to this node itself.
    fn emit(&mut self, now: Instant, resource: ResourceId, out: ProposerOutput) {
        self.queue(resource, out);
        for env in self.take_local() {
            if let ElectionMessage::PaxosLease(m) = env.msg {
                self.handle_message(now, self.me, m);
            }
        }
    }

    /// Who a proposer's message for `target` goes to. Requests go to the voters (this node's
    /// own acceptor included, even when it is not a voter: a Release must reach it, and its
    /// answer does not count); hints go to voters and learners.
    fn recipients(&self, target: &Target) -> Vec<NodeId> {
        let mut to: Vec<NodeId> = self.voters.iter().collect();
        let learners_too = match target {
            Target::AllAcceptors => self.config.broken(Breakage::LearnerCounted),
            Target::Others => true,
        };
        if learners_too {
            to.extend(self.learners.iter().copied());
        }
        match target {
            Target::AllAcceptors => to.push(self.me),
            Target::Others => to.retain(|n| *n != self.me),
        }
        to.sort();
        to.dedup();
        to
    }

    fn queue(&mut self, resource: ResourceId, out: ProposerOutput) {
        let epoch = self.current_epoch();
        for (target, body) in out.messages {
            for peer in self.recipients(&target) {
                let msg = Message { resource, epoch, body: body.clone() };
                self.outbox.push(Envelope { to: peer, msg: ElectionMessage::PaxosLease(msg) });
            }
        }
        self.changes.extend(out.changes.into_iter().map(|c| (resource, c)));
    }

    /// Takes the messages to send (never addressed to this node) and the changes.
    pub fn take_output(&mut self) -> (Vec<Envelope>, Vec<(ResourceId, LeadershipChange)>) {
        (std::mem::take(&mut self.outbox), std::mem::take(&mut self.changes))
    }
}

/// Converts a node-level output for one resource.
pub(crate) fn output_for(
    resource: ResourceId,
    (messages, changes): (Vec<Envelope>, Vec<(ResourceId, LeadershipChange)>),
) -> Output {
    Output { messages, changes: changes.into_iter().filter(|(r, _)| *r == resource).map(|(_, c)| c).collect() }
}

/// Applies a Release to `acceptor` (or, under the `release-any-ballot` negative control,
/// releases whatever ballot of that owner it holds).
fn release(acceptor: &mut Acceptor, ballot: crate::ballot::Ballot, config: &LeaseConfig) -> bool {
    #[cfg(feature = "negative-controls")]
    if config.broken(Breakage::ReleaseAnyBallot) {
        return acceptor.on_release_any_ballot(ballot);
    }
    let _ = config;
    acceptor.on_release(ballot)
}
