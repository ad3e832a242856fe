//! One node's PaxosLease instances: an acceptor for every resource it is asked about and a
//! proposer for every resource it competes for.

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
    peers: Members,
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
    /// A node `me` of the cluster `peers` (all acceptors, `me` included), started at `now`.
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
        let peers = Members::new(me, peers);
        let quarantined = !epoch.first_start && !config.broken(Breakage::NoQuarantine);
        let quarantine_until = if quarantined { now.saturating_add(config.max_lease_time) } else { now };
        LeaseNode {
            me,
            peers,
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

    /// Starts competing for `resource`.
    pub fn acquire(&mut self, now: Instant, resource: ResourceId) {
        let (me, epoch, n, config) = (self.me, self.epoch, self.peers.len(), self.config.clone());
        self.proposers.entry(resource).or_insert_with(|| Proposer::new(me, epoch, n, config)).acquire(now);
        self.on_timeout(now);
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

    /// Feeds a message from `from`. Messages from nodes outside the cluster are dropped.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        if !self.peers.contains(from) {
            tracing::debug!(%from, "dropping lease message from a node outside the cluster");
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
        if msg.body.is_for_acceptor() {
            if now < self.quarantine_until {
                return;
            }
            let acceptor = self.acceptors.entry(resource).or_default();
            let reply = match msg.body {
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
                self.outbox.push(Envelope { to: from, msg: ElectionMessage::PaxosLease(Message { resource, body }) });
            }
        } else if let Some(p) = self.proposers.get_mut(&resource) {
            let mut out = ProposerOutput::default();
            p.on_message(now, from, msg.body, &mut self.rng, &mut out);
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

    fn queue(&mut self, resource: ResourceId, out: ProposerOutput) {
        for (target, body) in out.messages {
            for peer in self.peers.iter() {
                if target == Target::Others && peer == self.me {
                    continue;
                }
                self.outbox.push(Envelope {
                    to: peer,
                    msg: ElectionMessage::PaxosLease(Message { resource, body: body.clone() }),
                });
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
