//! Counting votes per distinct acceptor.

use crate::config::Breakage;
use crate::ids::NodeId;

/// The acceptors that voted one way in one round. Counts each acceptor once, however many
/// copies of its answer the network delivers (unless the `count-duplicates` negative
/// control is on, which is exactly the bug this type exists to prevent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Votes {
    voters: Vec<NodeId>,
    answers: usize,
}

impl Votes {
    /// Records `from`'s vote.
    pub fn record(&mut self, from: NodeId) {
        self.answers += 1;
        if !self.voters.contains(&from) {
            self.voters.push(from);
        }
    }

    /// How many votes count towards a majority.
    pub fn count(&self, breakage: Breakage) -> usize {
        if breakage == Breakage::CountDuplicates {
            self.answers
        } else {
            self.voters.len()
        }
    }
}
