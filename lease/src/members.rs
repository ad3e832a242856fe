//! The voting members of a cluster, and the majority rule every quorum in leasekv uses.

use crate::ids::NodeId;

/// A set of members of a cluster, sorted and without duplicates: the voters of a
/// configuration, or its learners ([`Configuration`]).
///
/// Quorums are counted against this list: the PaxosLease acceptors, the naive election's
/// voters and the replicated log's acceptors all take their majority from here, so a
/// node's own vote is always counted and each member counts once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    ids: Vec<NodeId>,
}

impl Members {
    /// The members `nodes` as seen from `me`: `me` is added if missing, and the list is
    /// sorted and deduplicated so that every node iterates its peers in the same order.
    pub fn new(me: NodeId, nodes: &[NodeId]) -> Self {
        let mut ids = nodes.to_vec();
        if !ids.contains(&me) {
            ids.push(me);
        }
        ids.sort();
        ids.dedup();
        Members { ids }
    }

    /// Exactly the voters `nodes`, sorted and deduplicated: for a configuration, in which
    /// this node may be a voter, a learner or neither.
    pub fn from_ids(nodes: &[NodeId]) -> Self {
        let mut ids = nodes.to_vec();
        ids.sort();
        ids.dedup();
        Members { ids }
    }

    /// The smallest number of members any two of which sets overlap: more than half.
    pub fn majority(&self) -> usize {
        Self::majority_of(self.ids.len())
    }

    /// The majority of a cluster of `count` voters, for code that only keeps the count.
    pub fn majority_of(count: usize) -> usize {
        count / 2 + 1
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no members (never true for a list built with [`Members::new`]).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: NodeId) -> bool {
        self.ids.binary_search(&node).is_ok()
    }

    /// The members in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.ids.iter().copied()
    }

    /// The members in ascending order, as a slice.
    pub fn as_slice(&self) -> &[NodeId] {
        &self.ids
    }
}

/// One configuration of the cluster as every quorum counts it: its epoch, the voters whose
/// majority decides, and the learners that follow without voting. The replicated log
/// derives it from its membership (with member names and URLs) and hands it to the
/// election, so both count majorities with one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// Raised by every configuration change the log chooses (0: the initial one).
    pub epoch: u64,
    /// The members whose majority every quorum needs.
    pub voters: Members,
    /// Members that receive everything and vote in nothing (never also voters).
    pub learners: Members,
}

impl Configuration {
    /// Configuration `epoch` of `voters` and `learners` (a node in both is a voter).
    pub fn new(epoch: u64, voters: &[NodeId], learners: &[NodeId]) -> Self {
        let voters = Members::from_ids(voters);
        let learners: Vec<NodeId> = learners.iter().copied().filter(|l| !voters.contains(*l)).collect();
        Configuration { epoch, voters, learners: Members::from_ids(&learners) }
    }

    /// How many voters make a majority.
    pub fn majority(&self) -> usize {
        self.voters.majority()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_self_sorts_and_dedups() {
        let members = Members::new(NodeId(2), &[NodeId(3), NodeId(1), NodeId(3)]);
        assert_eq!(members.as_slice(), &[NodeId(1), NodeId(2), NodeId(3)]);
        assert!(members.contains(NodeId(2)));
        assert!(!members.contains(NodeId(4)));
    }

    #[test]
    fn majority_is_more_than_half() {
        assert_eq!(Members::majority_of(1), 1);
        assert_eq!(Members::majority_of(2), 2);
        assert_eq!(Members::majority_of(3), 2);
        assert_eq!(Members::majority_of(4), 3);
        assert_eq!(Members::majority_of(5), 3);
    }
}
