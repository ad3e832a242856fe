//! Ballot numbers: unique, totally ordered proposal identifiers.

use crate::ids::NodeId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A PaxosLease ballot: `(counter, restart epoch, node id)`, compared in that order.
///
/// The counter grows with every round and jumps past any higher counter the node sees. The
/// restart epoch is the one piece of persistent state: it is incremented on every start, so
/// a node that restarted (and forgot its counter) can never reissue a ballot it used before.
/// The node id breaks ties between nodes. Together they make every ballot unique.
///
/// The field order matters: the derived `Ord` compares fields top to bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct Ballot {
    /// Round counter, the most significant part.
    pub counter: u64,
    /// The proposer's restart epoch at the time it issued the ballot.
    pub epoch: u32,
    /// The proposer.
    pub node: NodeId,
}

impl Ballot {
    /// Lower than every ballot a proposer issues (proposers start their counter at 1).
    pub const ZERO: Ballot = Ballot { counter: 0, epoch: 0, node: NodeId(0) };

    /// Whether this ballot was issued by `node` during restart epoch `epoch`, i.e. by the
    /// same incarnation of that node.
    pub fn is_incarnation_of(&self, node: NodeId, epoch: u32) -> bool {
        self.node == node && self.epoch == epoch
    }
}

impl fmt::Display for Ballot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.counter, self.epoch, self.node.0)
    }
}

/// The ballot of the round that made a node master; constant for the whole tenure, so it
/// orders successive masters (each new tenure starts with a higher ballot than every ballot
/// of the previous one).
pub type Term = Ballot;

impl Ballot {
    /// The highest counter a peer's ballot may carry; a message with a higher one is
    /// dropped as malformed. An honest node raises its counter by one a round (a few a
    /// second at most), so no real ballot comes near it in any lifetime; without the cap a
    /// member sending a ballot at `u64::MAX` would leave no higher ballot to outbid it
    /// (every proposer stuck, or an overflow). Found by the election fuzz target.
    pub const MAX_COUNTER: u64 = 1 << 62;

    /// Whether the counter is at most [`Ballot::MAX_COUNTER`].
    pub fn is_plausible(&self) -> bool {
        self.counter <= Self::MAX_COUNTER
    }
}
