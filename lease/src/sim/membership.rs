//! The simulator's stand-in for the replicated log's membership (docs/membership.md): the
//! history of configurations `C_0, C_1, …` and the choice of the next change.
//!
//! The log itself is not simulated: a change the master proposes is appended to the history
//! at once (as if chosen), and every node applies it after its own delay. What the log's
//! rules guarantee is enforced by the world that calls this module: a change is proposed
//! only by the master, only when its `change_allowed_after` says rules 2 and 5 allow it.
//! The choice here keeps rule 1 (one voter at a time), except under the
//! `two-voters-at-once` negative control.

use crate::config::Breakage;
use crate::ids::NodeId;
use crate::rng::SplitMix64;
use std::ops::AddAssign;

/// Fewest voters the schedule keeps.
const MIN_VOTERS: usize = 3;
/// Most voters the schedule keeps.
const MAX_VOTERS: usize = 5;

/// One configuration `C_epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// Its epoch, its position in the history.
    pub epoch: u64,
    /// The voters, ascending.
    pub voters: Vec<NodeId>,
    /// The learners, ascending.
    pub learners: Vec<NodeId>,
}

impl Configuration {
    /// Whether `node` is a voter or a learner.
    pub fn contains(&self, node: NodeId) -> bool {
        self.voters.contains(&node) || self.learners.contains(&node)
    }

    /// The voters and learners.
    pub fn members(&self) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self.voters.iter().chain(&self.learners).copied().collect();
        all.sort();
        all
    }
}

/// One configuration change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new node joins as a learner (its first start).
    AddLearner(NodeId),
    /// A learner becomes a voter.
    Promote(NodeId),
    /// A voter leaves the cluster.
    Remove(NodeId),
    /// Two learners become voters in one step: the `two-voters-at-once` control only.
    PromoteTwo(NodeId, NodeId),
}

/// What the membership schedule did in one seed (or, summed, in many).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipStats {
    /// Learners added (new nodes started for the first time).
    pub learners_added: u64,
    /// Learners promoted to voter.
    pub promoted: u64,
    /// Voters removed, the master included.
    pub removed: u64,
    /// Of those, removals of the node that was master when the change was proposed.
    pub removed_master: u64,
    /// Changes adding two voters at once (the `two-voters-at-once` control only).
    pub two_voters_added: u64,
    /// Removed nodes that came back with the configuration they had before their removal.
    pub returned: u64,
    /// Configurations applied by running nodes (one per node and configuration).
    pub applied: u64,
    /// Elections won by a removed node that came back (must stay 0: it may not win).
    pub won_by_returned: u64,
}

impl MembershipStats {
    /// Changes of every kind.
    pub fn changes(&self) -> u64 {
        self.learners_added + self.promoted + self.removed + self.two_voters_added
    }
}

impl AddAssign for MembershipStats {
    fn add_assign(&mut self, o: MembershipStats) {
        self.learners_added += o.learners_added;
        self.promoted += o.promoted;
        self.removed += o.removed;
        self.removed_master += o.removed_master;
        self.two_voters_added += o.two_voters_added;
        self.returned += o.returned;
        self.applied += o.applied;
        self.won_by_returned += o.won_by_returned;
    }
}

/// The configuration history, as the log would hold it.
#[derive(Debug, Clone)]
pub struct History {
    configs: Vec<Configuration>,
}

impl History {
    /// `C_0`: every initial node a voter.
    pub fn new(voters: &[NodeId]) -> Self {
        let mut voters = voters.to_vec();
        voters.sort();
        History { configs: vec![Configuration { epoch: 0, voters, learners: Vec::new() }] }
    }

    /// The latest configuration.
    pub fn latest(&self) -> &Configuration {
        // Never empty: `new` puts C_0 in and nothing removes.
        &self.configs[self.configs.len() - 1]
    }

    /// `C_epoch`, if the history reaches it.
    pub fn get(&self, epoch: u64) -> Option<&Configuration> {
        usize::try_from(epoch).ok().and_then(|i| self.configs.get(i))
    }

    /// The epoch of the configuration that removed `node` (the first without it after one
    /// with it), if any.
    pub fn removed_at(&self, node: NodeId) -> Option<u64> {
        self.configs.windows(2).find(|w| w[0].contains(node) && !w[1].contains(node)).map(|w| w[1].epoch)
    }

    /// Appends the configuration `change` makes of the latest one, and returns it.
    pub fn append(&mut self, change: Change) -> &Configuration {
        let mut next = self.latest().clone();
        next.epoch += 1;
        match change {
            Change::AddLearner(n) => next.learners.push(n),
            Change::Promote(n) => {
                next.learners.retain(|l| *l != n);
                next.voters.push(n);
            }
            Change::PromoteTwo(a, b) => {
                next.learners.retain(|l| *l != a && *l != b);
                next.voters.extend([a, b]);
            }
            Change::Remove(n) => next.voters.retain(|v| *v != n),
        }
        next.voters.sort();
        next.learners.sort();
        self.configs.push(next);
        self.latest()
    }
}

/// Picks the next change to the latest configuration, proposed by `master`; `fresh` is the
/// id a new node would get. Keeps 3 to 5 voters. The controls shape the schedule so that
/// their broken rule matters: `two-voters-at-once` grows 3 voters to 5 in one step,
/// `learner-counted` keeps up to 4 learners around 3 voters.
pub fn pick(latest: &Configuration, master: NodeId, fresh: NodeId, breakage: Breakage, rng: &mut SplitMix64) -> Change {
    let (voters, learners) = (latest.voters.len(), latest.learners.len());
    let remove = |rng: &mut SplitMix64| {
        // The master proposes its own removal now and then (a replaced master).
        if rng.chance(0.3) && latest.voters.contains(&master) {
            return Change::Remove(master);
        }
        let others: Vec<NodeId> = latest.voters.iter().copied().filter(|v| *v != master).collect();
        Change::Remove(others[rng.range_u64(0, others.len() as u64 - 1) as usize])
    };
    let learner = |rng: &mut SplitMix64| latest.learners[rng.range_u64(0, learners as u64 - 1) as usize];
    match breakage {
        Breakage::TwoVotersAtOnce => {
            if voters > MIN_VOTERS {
                remove(rng)
            } else if learners < 2 {
                Change::AddLearner(fresh)
            } else {
                Change::PromoteTwo(latest.learners[0], latest.learners[1])
            }
        }
        Breakage::LearnerCounted => {
            if learners < 4 {
                Change::AddLearner(fresh)
            } else if voters > MIN_VOTERS {
                remove(rng)
            } else {
                Change::Promote(learner(rng))
            }
        }
        _ => {
            let mut allowed: Vec<u8> = Vec::new();
            if learners < 2 {
                allowed.push(0);
            }
            if learners > 0 && voters < MAX_VOTERS {
                allowed.push(1);
            }
            if voters > MIN_VOTERS {
                allowed.push(2);
            }
            match allowed[rng.range_u64(0, allowed.len() as u64 - 1) as usize] {
                0 => Change::AddLearner(fresh),
                1 => Change::Promote(learner(rng)),
                _ => remove(rng),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn the_schedule_keeps_rule_1_and_the_voter_bounds() {
        let mut rng = SplitMix64::new(3);
        let mut history = History::new(&ids(5));
        let mut fresh = 6;
        for _ in 0..500 {
            let latest = history.latest().clone();
            let master = latest.voters[rng.range_u64(0, latest.voters.len() as u64 - 1) as usize];
            let change = pick(&latest, master, NodeId(fresh), Breakage::None, &mut rng);
            if change == Change::AddLearner(NodeId(fresh)) {
                fresh += 1;
            }
            let next = history.append(change).clone();
            assert!((MIN_VOTERS..=MAX_VOTERS).contains(&next.voters.len()), "{next:?}");
            let changed = latest.voters.iter().filter(|v| !next.voters.contains(v)).count()
                + next.voters.iter().filter(|v| !latest.voters.contains(v)).count();
            assert!(changed <= 1, "one voter at a time: {latest:?} -> {next:?}");
        }
        assert!(history.removed_at(NodeId(1)).is_some() || history.latest().voters.contains(&NodeId(1)));
    }

    #[test]
    fn two_voters_at_once_control_breaks_rule_1() {
        let mut rng = SplitMix64::new(1);
        let mut history = History::new(&ids(3));
        history.append(Change::AddLearner(NodeId(4)));
        history.append(Change::AddLearner(NodeId(5)));
        let change = pick(history.latest(), NodeId(1), NodeId(6), Breakage::TwoVotersAtOnce, &mut rng);
        assert_eq!(change, Change::PromoteTwo(NodeId(4), NodeId(5)));
        assert_eq!(history.append(change).voters.len(), 5);
    }
}
