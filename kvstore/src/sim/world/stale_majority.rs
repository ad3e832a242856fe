//! The stale-majority drill: the fault shaped for rule 5 of docs/membership.md (the
//! `no-change-wait` control), which random loss and partitions never line up.
//!
//! Two voter changes chosen in a row must not leave a majority of the configuration before
//! them that still elects at its old epoch. In the log, consecutive configurations' majorities
//! meet and every Accept carries the commit index, so that majority needs all of this within
//! one lease time, with three voters {M, X, Y} and M the master:
//! 1. the first voter change's Accept never reaches X, nor do the entries X fetches, so X does
//!    not apply it (its election stays at the old epoch);
//! 2. Y accepts that change and is cut off at once, before any commit reaches it;
//! 3. the next voter change is chosen with X's vote (X accepts slots it cannot apply yet), and
//!    X is cut off at once, together with Y.
//!
//! X and Y are a majority of the old configuration, both at its epoch: once the master's lease
//! has run out at their acceptors they elect one of them, while M, with the voters of the new
//! configuration, holds its own lease. Rule 5 forbids step 3: the next voter change waits for a
//! lease round at the first change's epoch among voters that applied it, which X (no entry)
//! and Y (cut off) cannot give. With the rule the drill ends at its deadline, and the cut
//! heals.

use super::{Wire, World, MS};
use crate::command::Command;
use crate::log::{Entry, LogMessage, Slot};
use crate::membership::MemberChange;
use leasekv_lease::sim::DrillHold;
use leasekv_lease::NodeId;

/// How long a stale-majority drill waits for its next step before it gives up.
const STEP_DEADLINE: u64 = 5_000 * MS;
/// How long X and Y stay cut off once the second change is chosen: past the lease time,
/// their election and a while as masters.
const STALE_SIDE_TIME: u64 = 3_000 * MS;

/// A stale-majority drill under way: the master `m` and the other two voters X and Y of the
/// configuration before the first change, the deadline of the current step, and the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StaleMajority {
    m: NodeId,
    x: NodeId,
    y: NodeId,
    until: u64,
    phase: Phase,
}

/// Where a stale-majority drill stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The master proposed the first voter change.
    Armed,
    /// The first change went out at this slot; Y is cut off once it accepted it.
    FirstOut(Slot),
    /// Y accepted the first change (at this slot) and is cut off; the drill waits for a
    /// second voter change.
    AwaitSecond(Slot),
    /// The second voter change went out at `second`; X is cut off once it accepted it.
    SecondOut { first: Slot, second: Slot },
}

impl StaleMajority {
    /// The first change's slot, once it went out.
    fn first(&self) -> Option<Slot> {
        match self.phase {
            Phase::Armed => None,
            Phase::FirstOut(first) | Phase::AwaitSecond(first) | Phase::SecondOut { first, .. } => Some(first),
        }
    }
}

/// What the drill does with one message.
pub(super) enum Verdict {
    /// Delivered as the network would.
    Pass,
    /// Never delivered.
    Drop,
    /// Delivered, and then the group is cut off until the real time given: the vote goes
    /// out, nothing after it does.
    PassThenCut(Vec<NodeId>, u64),
}

/// The slot's entry changes the voters.
fn changes_voters(entry: &Entry) -> bool {
    entry.proposals.iter().any(|p| matches!(&p.command, Command::ChangeMembers(c) if c.changes_voters()))
}

impl World {
    /// Arms the drill when the master proposes a voter change among exactly three voters
    /// (one proposal in two), unless another drill runs.
    pub(super) fn arm_stale_majority(&mut self, master: usize, voters: &[NodeId], change: &MemberChange) {
        if self.stale_majority.is_some() || self.sick.is_some() || !change.changes_voters() || voters.len() != 3 {
            return;
        }
        if !self.rng.chance(0.5) {
            return;
        }
        let m = self.nodes[master].id;
        let mut others: Vec<NodeId> = voters.iter().copied().filter(|&v| v != m).collect();
        if others.len() != 2 {
            return;
        }
        if self.rng.chance(0.5) {
            others.swap(0, 1);
        }
        let (x, y) = (others[0], others[1]);
        self.stale_majority = Some(StaleMajority { m, x, y, until: self.now + STEP_DEADLINE, phase: Phase::Armed });
        self.trace(|| format!("drill: stale majority armed, master {m}, X {x}, Y {y}"));
    }

    /// What the drill does with this message, moving on as the messages it waits for go by.
    /// Called for every message sent while a drill runs.
    pub(super) fn stale_majority_verdict(&mut self, from: NodeId, to: NodeId, wire: &Wire) -> Verdict {
        let Some(drill) = self.stale_majority else { return Verdict::Pass };
        if self.now >= drill.until {
            self.end_stale_majority("its deadline passed");
            return Verdict::Pass;
        }
        let Wire::Log(message) = wire else { return Verdict::Pass };
        let drop = |dropped: bool| if dropped { Verdict::Drop } else { Verdict::Pass };
        let StaleMajority { m, x, y, .. } = drill;
        // X learns nothing of the first change: neither its Accept nor the entries it fetches.
        let to_x = to == x;
        match (drill.phase, message) {
            (Phase::Armed, LogMessage::Accept { slot, entry, .. }) if from == m && changes_voters(entry) => {
                self.stale_majority = Some(StaleMajority { phase: Phase::FirstOut(*slot), ..drill });
                self.trace(|| format!("drill: the first voter change is slot {slot}"));
                drop(to_x)
            }
            (Phase::FirstOut(first), LogMessage::Accepted { slot, .. }) if from == y && *slot == first => {
                // Y's vote goes out; then Y is cut off before any commit reaches it.
                let until = self.now + STEP_DEADLINE;
                self.stale_majority = Some(StaleMajority { until, phase: Phase::AwaitSecond(first), ..drill });
                self.trace(|| format!("drill: {y} accepted slot {first} and is cut off"));
                Verdict::PassThenCut(vec![y], until)
            }
            (Phase::AwaitSecond(first), LogMessage::Accept { slot, entry, .. })
                if from == m && *slot > first && changes_voters(entry) =>
            {
                self.stale_majority = Some(StaleMajority { phase: Phase::SecondOut { first, second: *slot }, ..drill });
                self.trace(|| format!("drill: the second voter change is slot {slot}"));
                Verdict::Pass
            }
            (Phase::SecondOut { second, .. }, LogMessage::Accepted { slot, .. }) if from == x && *slot == second => {
                // X's vote chooses the second change; then X and Y, a majority of the
                // configuration before the first, are cut off together at its epoch.
                self.stale_majority = None;
                self.trace(|| format!("drill: {x} accepted slot {second}; {x} and {y} are cut off together"));
                Verdict::PassThenCut(vec![x, y], self.now + STALE_SIDE_TIME)
            }
            (_, LogMessage::Accept { slot, .. }) if to_x => drop(drill.first() == Some(*slot)),
            (Phase::Armed, _) => Verdict::Pass,
            (_, LogMessage::Entries { .. } | LogMessage::Snapshot { .. }) => drop(to_x),
            _ => Verdict::Pass,
        }
    }

    /// Cuts `group` off until `until`, once the message that started it went out.
    pub(super) fn stale_majority_cut(&mut self, group: &[NodeId], until: u64) {
        self.network.drill(group, DrillHold::Isolated(until));
    }

    /// Ends a drill that did not get to its cut (rule 5 held the second change back, or the
    /// master changed): Y's cut heals.
    pub(super) fn end_stale_majority(&mut self, why: &str) {
        if let Some(drill) = self.stale_majority.take() {
            if matches!(drill.phase, Phase::AwaitSecond(_) | Phase::SecondOut { .. }) {
                self.network.end_drill();
            }
            self.trace(|| format!("drill: stale majority ends, {why}"));
        }
    }

    /// Whether a drill is under way (other faults wait for it).
    pub(super) fn stale_majority_runs(&mut self) -> bool {
        if self.stale_majority.is_some_and(|d| self.now >= d.until) {
            self.end_stale_majority("its deadline passed");
        }
        self.stale_majority.is_some()
    }
}
