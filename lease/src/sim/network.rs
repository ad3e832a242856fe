//! The simulated network: delay, loss, duplication, reordering, partitions and clogged
//! senders.

use crate::ids::NodeId;
use crate::rng::SplitMix64;
use std::collections::BTreeSet;

/// Fault rates of the network, changeable while a simulation runs.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkFaults {
    /// Probability that a message is lost.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub duplicate: f64,
    /// Shortest one-way delay, ns.
    pub min_delay: u64,
    /// Longest ordinary one-way delay, ns.
    pub max_delay: u64,
    /// Probability that a message is slowed down (and so reordered), by up to `slow_max`.
    pub slow: f64,
    /// Longest extra delay of a slowed message, ns.
    pub slow_max: u64,
    /// Probability that a message is stalled for long, by up to `stall_max`.
    pub stall: f64,
    /// Longest extra delay of a stalled message, ns.
    pub stall_max: u64,
}

/// Link state and fault injection.
#[derive(Debug, Clone)]
pub struct Network {
    /// The current fault rates.
    pub faults: NetworkFaults,
    /// Cut links, as (lower id, higher id).
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Senders whose outgoing messages are clogged until a real time, with extra delay.
    clogged: Vec<(NodeId, u64, u64)>,
    /// A drill's hold on a group of nodes: what they receive is late, or they are cut off
    /// from the rest. Outside `cut` so that the heal of an earlier fault does not end the
    /// drill early.
    drill: Option<(Vec<NodeId>, DrillHold)>,
}

/// What a drill (the election simulator's takeover drill, the store simulator's sick disk)
/// does to its node's links.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DrillHold {
    /// Every message to the group arrives this many ns later than it would.
    LateInbound(u64),
    /// The group can talk only among itself until this real time.
    Isolated(u64),
}

impl Network {
    /// A fully connected network with the given fault rates.
    pub fn new(faults: NetworkFaults) -> Self {
        Network { faults, cut: BTreeSet::new(), clogged: Vec::new(), drill: None }
    }

    fn key(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
        (a.min(b), a.max(b))
    }

    /// Splits the nodes into two sides that cannot talk to each other.
    pub fn partition(&mut self, side_a: &[NodeId], side_b: &[NodeId]) {
        for &a in side_a {
            for &b in side_b {
                self.cut.insert(Network::key(a, b));
            }
        }
    }

    /// Restores every link and unclogs every sender.
    pub fn heal(&mut self) {
        self.cut.clear();
        self.clogged.clear();
    }

    /// Whether `a` and `b` can exchange messages (drills aside).
    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        !self.cut.contains(&Network::key(a, b))
    }

    /// Puts `nodes` under a drill's hold, replacing any earlier one.
    pub fn drill(&mut self, nodes: &[NodeId], hold: DrillHold) {
        self.drill = Some((nodes.to_vec(), hold));
    }

    /// Ends any drill's hold (the quiet phase, a drill that is over).
    pub fn end_drill(&mut self) {
        self.drill = None;
    }

    fn cut_by_drill(&self, now: u64, from: NodeId, to: NodeId) -> bool {
        match &self.drill {
            Some((group, DrillHold::Isolated(until))) => now < *until && group.contains(&from) != group.contains(&to),
            _ => false,
        }
    }

    /// Holds up `node`'s outgoing messages sent before real time `until` by up to `extra` ns.
    pub fn clog(&mut self, node: NodeId, until: u64, extra: u64) {
        self.clogged.push((node, until, extra));
    }

    /// The delivery delays (zero, one or two copies) of a message sent at `now`.
    pub fn deliveries(&self, now: u64, from: NodeId, to: NodeId, rng: &mut SplitMix64) -> Vec<u64> {
        if !self.connected(from, to) || self.cut_by_drill(now, from, to) || rng.chance(self.faults.loss) {
            return Vec::new();
        }
        let copies = if rng.chance(self.faults.duplicate) { 2 } else { 1 };
        let late = match &self.drill {
            Some((group, DrillHold::LateInbound(extra))) if group.contains(&to) => *extra,
            _ => 0,
        };
        (0..copies).map(|_| self.delay(now, from, rng) + late).collect()
    }

    fn delay(&self, now: u64, from: NodeId, rng: &mut SplitMix64) -> u64 {
        let mut d = rng.range_u64(self.faults.min_delay, self.faults.max_delay);
        if rng.chance(self.faults.slow) {
            d += rng.range_u64(0, self.faults.slow_max);
        }
        if rng.chance(self.faults.stall) {
            d += rng.range_u64(0, self.faults.stall_max);
        }
        for &(node, until, extra) in &self.clogged {
            if node == from && now < until {
                d += rng.range_u64(extra / 2, extra);
            }
        }
        d
    }
}
