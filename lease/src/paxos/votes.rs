//! Counting votes per distinct acceptor.

use crate::ids::NodeId;

/// The acceptors that voted one way in one round. Counts each acceptor once, however many
/// copies of its answer the network delivers (the `count-duplicates` negative control counts
/// answers instead, which is exactly the bug this type exists to prevent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Votes {
    voters: Vec<NodeId>,
    #[cfg(feature = "negative-controls")]
    answers: usize,
}

impl Votes {
    /// Records `from`'s vote.
    pub fn record(&mut self, from: NodeId) {
        #[cfg(feature = "negative-controls")]
        {
            self.answers += 1;
        }
        if !self.voters.contains(&from) {
            self.voters.push(from);
        }
    }

    /// How many votes count towards a majority: one per distinct acceptor.
    pub fn count(&self) -> usize {
        self.voters.len()
    }

    /// Every answer delivered, duplicates included: the `count-duplicates` control's count.
    #[cfg(feature = "negative-controls")]
    pub fn answers(&self) -> usize {
        self.answers
    }
}
