//! Membership changes in the simulated cluster: the schedule that adds, promotes and removes
//! members through the master, the spare nodes that join, and the oracles on configurations.
//!
//! The oracles: every configuration epoch has one membership, whichever node applied it
//! (the log's configuration history is one sequence); a node's election is never given a
//! configuration that no node has applied yet (the election follows the log, never runs
//! ahead of it); and no two nodes believe they are master at the same real instant.

use super::{Event, KvNode, World, MS};
use crate::command::Command;
#[cfg(feature = "negative-controls")]
use crate::log::LogBreakage;
use crate::membership::{MemberChange, Membership};
use crate::sim::oracle::ViolationKind;
use leasekv_lease::NodeId;

/// Fewest and most voters the schedule keeps.
const MIN_VOTERS: usize = 3;
const MAX_VOTERS: usize = 5;

impl World {
    /// Whether a node slot is a member that has been started at least once (the initial
    /// voters, and spares once the log added them).
    pub(super) fn has_joined(&self, node: usize) -> bool {
        node < self.config.nodes || self.nodes[node].join_seed.is_some()
    }

    /// Brings a node's election in line with what its replica applied, checking the oracles
    /// on configurations on the way. Returns whether the election was told something.
    pub(super) fn sync_configuration(&mut self, node: usize) -> bool {
        let Some(replica) = self.nodes[node].kv.as_ref().map(KvNode::replica) else { return false };
        let applied = replica.membership().clone();
        let for_election = replica.election_membership();
        let id = self.nodes[node].id;
        self.record_configuration(id, &applied);
        if for_election.epoch == self.nodes[node].election_epoch {
            return false;
        }
        match self.configurations.get(&for_election.epoch) {
            _ if for_election.epoch == 0 => {}
            Some(known) if *known == for_election => {}
            Some(_) | None => {
                let detail = format!(
                    "{id}'s election switched to configuration {} (voters {:?}) before the log chose it",
                    for_election.epoch,
                    for_election.voters()
                );
                self.oracles.violation(self.now, ViolationKind::ElectionAheadOfLog, detail);
            }
        }
        let now = self.local(node);
        let (voters, learners) = (for_election.voters(), for_election.learners());
        self.trace(|| {
            format!("{id} election configuration {} voters {voters:?} learners {learners:?}", for_election.epoch)
        });
        if let Some(core) = self.nodes[node].election.as_mut() {
            core.set_configuration(now, &for_election.configuration());
        }
        self.nodes[node].election_epoch = for_election.epoch;
        true
    }

    /// Adds `membership` to the configuration history (one membership per epoch), and starts
    /// spare nodes the log just added.
    fn record_configuration(&mut self, id: NodeId, membership: &Membership) {
        if !membership.is_recorded() {
            return;
        }
        match self.configurations.get(&membership.epoch) {
            Some(known) if known == membership => return,
            Some(known) => {
                let detail = format!(
                    "{id} applied configuration {} as {:?}, another node as {:?}",
                    membership.epoch,
                    membership.voters(),
                    known.voters()
                );
                self.oracles.violation(self.now, ViolationKind::ConfigurationDiverged, detail);
                return;
            }
            None => {}
        }
        self.configurations.insert(membership.epoch, membership.clone());
        self.report.configurations = self.report.configurations.max(membership.epoch);
        for member in membership.ids() {
            let node = (member.0 as usize).wrapping_sub(1);
            if node < self.nodes.len() && !self.has_joined(node) {
                self.nodes[node].join_seed = Some(membership.clone());
                let at = self.now + self.rng.range_u64(10, 300) * MS;
                self.queue.push(at, Event::Restart { node });
            }
        }
    }

    /// Checks that at most one node believes it is master now (real time).
    pub(super) fn check_single_master(&mut self) {
        let masters = self.masters();
        if masters.len() > 1 && !self.overlapping {
            let ids: Vec<NodeId> = masters.iter().map(|&m| self.nodes[m].id).collect();
            self.oracles.violation(
                self.now,
                ViolationKind::MastersOverlap,
                format!("{ids:?} believe they are master at once"),
            );
        }
        self.overlapping = masters.len() > 1;
    }

    /// One step of the change schedule, proposed at the master: a learner is added, promoted,
    /// a voter removed (sometimes the master itself), keeping 3 to 5 voters.
    pub(super) fn membership_step(&mut self) {
        if self.quiet || !self.config.membership_changes {
            return;
        }
        let next = self.rng.range_u64(300, 1500) * MS;
        self.queue.push(self.now + next, Event::MemberChange);
        let Some(master) = (0..self.nodes.len()).find(|&n| {
            let now = self.local(n);
            self.nodes[n].kv.as_ref().map(KvNode::replica).is_some_and(|r| r.is_ready_master(now))
        }) else {
            return;
        };
        let Some(replica) = self.nodes[master].kv.as_ref().map(KvNode::replica) else { return };
        let current = replica.membership().clone();
        if !current.is_recorded() {
            return;
        }
        let Some(change) = self.pick_change(master, &current) else { return };
        let now = self.local(master);
        let line = format!("{} proposes {change:?}", self.nodes[master].id);
        self.trace(|| line);
        let Some(kv) = self.nodes[master].kv.as_mut() else { return };
        // Refusals (a change still settling, rule 5's wait) are expected: try again later.
        if kv.propose_unanswered(now, Command::ChangeMembers(change.clone())).is_ok() {
            self.report.changes_proposed += 1;
            // Before the proposal's Accepts go out, which the drill watches for.
            self.arm_stale_majority(master, &current.voters(), &change);
        }
        self.after_replica(master);
    }

    fn pick_change(&mut self, master: usize, current: &Membership) -> Option<MemberChange> {
        let voters = current.voters();
        let learners = current.learners();
        let next_id = current.next_id();
        let spare_left = (next_id.0 as usize) <= self.nodes.len();
        // From an odd number of voters (3 → 5, 5 → 7) a majority of the old and one of
        // the new configuration need not meet; two spares must be left.
        #[cfg(feature = "negative-controls")]
        if self.config.replica.breakage == LogBreakage::TwoVotersAtOnce
            && voters.len() % 2 == 1
            && (next_id.0 as usize) < self.nodes.len()
        {
            return Some(MemberChange::AddVotersAtOnce { count: 2 });
        }
        #[cfg(feature = "negative-controls")]
        let keep_learners = self.config.replica.breakage == LogBreakage::LearnerCounted;
        #[cfg(not(feature = "negative-controls"))]
        let keep_learners = false;
        if let Some(&learner) = learners.first() {
            if !keep_learners || self.rng.chance(0.2) {
                return Some(MemberChange::Promote { id: learner });
            }
        }
        let grow = voters.len() < MAX_VOTERS && spare_left && (voters.len() == MIN_VOTERS || self.rng.chance(0.5));
        if grow && learners.is_empty() {
            let url = format!("http://{next_id}.sim:2380");
            return Some(MemberChange::Add { peer_urls: vec![url], learner: true });
        }
        if voters.len() > MIN_VOTERS {
            let master_id = self.nodes[master].id;
            let victim = match self.rng.chance(0.3) {
                true => master_id,
                false => voters[self.rng.range_u64(0, voters.len() as u64 - 1) as usize],
            };
            if self.config.backend == leasekv_lease::BackendKind::LeaseTracker && victim == voters[0] {
                // The tracker node cannot be removed (docs/membership.md).
                return None;
            }
            return Some(MemberChange::Remove { id: victim });
        }
        None
    }
}
