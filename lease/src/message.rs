//! The messages election backends exchange, as one type the transports carry.

use serde::{Deserialize, Serialize};

/// A message between the election cores of two nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionMessage {
    /// PaxosLease.
    PaxosLease(crate::paxos::Message),
    /// The central lease tracker.
    Tracker(crate::tracker::TrackerMessage),
    /// The naive majority vote (simulator only).
    Naive(crate::naive::NaiveMessage),
}
