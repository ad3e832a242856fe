//! Master election with PaxosLease: every node is proposer and acceptor of the
//! [`ResourceId::MASTER`] lease.

use super::node::{output_for, LeaseNode};
use crate::config::{ConfigError, LeaseConfig};
use crate::core::{ElectionCore, Mastership, Output};
use crate::epoch::RestartEpoch;
use crate::ids::{NodeId, ResourceId};
use crate::message::ElectionMessage;
use crate::time::Instant;

/// The PaxosLease election core of one node.
#[derive(Debug)]
pub struct PaxosLeaseElection {
    node: LeaseNode,
}

impl PaxosLeaseElection {
    /// Node `me` of `peers`, started at `now`, competing for the master lease at once.
    pub fn new(
        me: NodeId,
        peers: &[NodeId],
        config: LeaseConfig,
        epoch: RestartEpoch,
        now: Instant,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut node = LeaseNode::new(me, peers, config, epoch, now, seed);
        node.acquire(now, ResourceId::MASTER);
        Ok(PaxosLeaseElection { node })
    }

    /// The underlying multi-resource node.
    pub fn node(&self) -> &LeaseNode {
        &self.node
    }
}

impl ElectionCore for PaxosLeaseElection {
    fn id(&self) -> NodeId {
        self.node.id()
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, msg: ElectionMessage) {
        if let ElectionMessage::PaxosLease(m) = msg {
            self.node.handle_message(now, from, m);
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.node.on_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.node.poll_timeout()
    }

    fn take_output(&mut self) -> Output {
        output_for(ResourceId::MASTER, self.node.take_output())
    }

    fn mastership(&self, now: Instant) -> Option<Mastership> {
        self.node.mastership(now, ResourceId::MASTER)
    }

    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        self.node.holder_hint(now, ResourceId::MASTER)
    }

    fn failed_rounds(&self) -> u64 {
        self.node.failed_rounds(ResourceId::MASTER)
    }

    fn step_down(&mut self, now: Instant) {
        self.node.release(now, ResourceId::MASTER, true);
    }

    fn shut_down(&mut self, now: Instant) {
        self.node.release(now, ResourceId::MASTER, false);
    }

    fn set_candidacy(&mut self, now: Instant, candidate: bool) {
        self.node.set_candidacy(now, candidate);
    }

    fn set_configuration(&mut self, now: Instant, configuration: &crate::members::Configuration) {
        let c = configuration;
        self.node.set_configuration(now, c.epoch, c.voters.as_slice(), c.learners.as_slice());
    }

    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        self.node.change_allowed_after(ResourceId::MASTER)
    }

    fn configuration_seen(&self) -> u64 {
        self.node.seen_epoch()
    }

    fn hand_over(&mut self, now: Instant, to: NodeId) {
        self.node.hand_over(now, ResourceId::MASTER, to);
    }
}
