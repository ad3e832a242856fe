//! Uses of the peer protocol that not every version allows, and the version that first has
//! each. The server's links agree on versions (`server/src/peer/version.rs`); the node reads
//! the cluster's version to decide what every member may be asked to understand.

/// A use of the peer protocol that not every version allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// A master answers a forward with `RequestError::Overloaded` when its client queue
    /// is full, instead of queueing it beyond `[limits] max_queued_requests`.
    RefuseForwardsWhenOverloaded,
    /// Read leases: their messages, and every member answering linearizable reads under one.
    ReadLeases,
    /// A master refuses a forwarded read whose answer is too large with
    /// `KvError::ResponseTooLarge`.
    ResponseTooLarge,
    /// A peer snapshot of format 9, which sends the history's pages as stored.
    SnapshotPages,
}

impl Feature {
    /// The first version that has it.
    pub fn since(self) -> u32 {
        match self {
            Feature::RefuseForwardsWhenOverloaded => 3,
            Feature::ReadLeases => 4,
            Feature::ResponseTooLarge => 5,
            Feature::SnapshotPages => 6,
        }
    }

    /// Whether a link (or a cluster) at `version` has it.
    pub fn in_version(self, version: u32) -> bool {
        version >= self.since()
    }
}
