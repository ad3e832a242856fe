//! What replicas say to each other about the log.

use super::types::{AcceptedSlot, Entry, LogBallot, Slot};
use serde::{Deserialize, Serialize};

/// One message of the replicated-log protocol. Phase 1 (`Prepare`/`Promise`) runs once per
/// new master; phase 2 (`Accept`/`Accepted`) once per slot; `Commit` tells learners how far
/// the log is chosen; `Fetch`/`Entries`/`Snapshot` let a lagging replica catch up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogMessage {
    /// Phase 1a: promise not to accept lower ballots, and report what you accepted in slots
    /// `>= from`.
    Prepare {
        /// The proposer's ballot.
        ballot: LogBallot,
        /// The first slot the proposer does not know chosen.
        from: Slot,
    },
    /// Phase 1b: the promise, sent only once it is durable.
    Promise {
        /// The ballot promised.
        ballot: LogBallot,
        /// Accepted slots `>= from` (the `chosen` flag set where this replica knows it).
        slots: Vec<(Slot, AcceptedSlot)>,
        /// Everything `<= commit` is chosen at this replica.
        commit: Slot,
        /// Slots `<= compacted` are gone from this replica's log (in its snapshot).
        compacted: Slot,
    },
    /// Phase 2a: accept `entry` in `slot`.
    Accept {
        /// The proposer's ballot.
        ballot: LogBallot,
        /// The slot.
        slot: Slot,
        /// The value.
        entry: Entry,
        /// The proposer's commit index (piggybacked so learners advance without extra messages).
        commit: Slot,
    },
    /// Phase 2b: accepted, sent only once durable.
    Accepted {
        /// The ballot accepted.
        ballot: LogBallot,
        /// The slot.
        slot: Slot,
        /// How far the acceptor has applied the log: the master promotes a learner only once
        /// it has nearly caught up (etcd's "in sync with leader").
        applied: Slot,
    },
    /// A Prepare or Accept refused because a higher ballot was promised.
    Reject {
        /// The refused ballot.
        ballot: LogBallot,
        /// The higher ballot this replica promised.
        promised: LogBallot,
    },
    /// Every slot `<= commit` is chosen, with the value accepted in `ballot` where the
    /// learner accepted that ballot.
    Commit {
        /// The leader's ballot.
        ballot: LogBallot,
        /// The leader's commit index.
        commit: Slot,
    },
    /// Send me the chosen entries from `from` on (or a snapshot if they are compacted).
    Fetch {
        /// The first slot wanted.
        from: Slot,
    },
    /// Chosen entries, in slot order, contiguous.
    Entries {
        /// The entries.
        entries: Vec<(Slot, Entry)>,
        /// The sender's commit index (the fetcher asks again if it is still behind).
        commit: Slot,
    },
    /// The state machine as of `index` (every slot `<= index` applied).
    Snapshot {
        /// The last slot the snapshot covers.
        index: Slot,
        /// [`crate::StateMachine::to_snapshot_bytes`].
        data: Vec<u8>,
    },
    /// A member asks the master of `ballot` for a read lease (docs/read-leases.md). Its
    /// timer started before this left.
    ReadLeaseAsk {
        /// The master's ballot, as the asker knows it.
        ballot: LogBallot,
        /// The asker's incarnation: a grant for an earlier run of it is ignored.
        incarnation: u32,
        /// Which ask of that incarnation.
        seq: u64,
    },
    /// The master's grant of a read lease, answering one ask.
    ReadLeaseGrant {
        /// The master's ballot: a higher one seen by the holder ends the lease.
        ballot: LogBallot,
        /// The asker's incarnation, as asked.
        incarnation: u32,
        /// The ask answered.
        seq: u64,
        /// L, by the master's clock from the ask's arrival; the holder believes less
        /// (the drift correction).
        valid_for_nanos: u64,
        /// The highest slot the master had chosen at the grant (its commit index or above):
        /// the holder answers reads only once it applied this far.
        through: Slot,
    },
    /// A read-lease holder has `slot` of `ballot` (in memory, its sync still to come): the
    /// master need not wait for this holder's durable `Accepted` before choosing the slot,
    /// though only that counts toward a quorum. A holder that crashes before the sync
    /// restarts without its lease.
    ReadLeaseReceived {
        /// The master's ballot, as accepted.
        ballot: LogBallot,
        /// The holder's incarnation: a receipt from an earlier run of it, whose acceptor
        /// the restart may have emptied, counts for nothing.
        incarnation: u32,
        /// The slot received.
        slot: Slot,
    },
}

impl LogMessage {
    /// Whether every ballot the message carries is one a peer could have sent
    /// ([`LogBallot::is_plausible`]).
    pub fn ballots_plausible(&self) -> bool {
        match self {
            LogMessage::Prepare { ballot, .. }
            | LogMessage::Promise { ballot, .. }
            | LogMessage::Accept { ballot, .. }
            | LogMessage::Accepted { ballot, .. }
            | LogMessage::Commit { ballot, .. }
            | LogMessage::ReadLeaseAsk { ballot, .. }
            | LogMessage::ReadLeaseGrant { ballot, .. }
            | LogMessage::ReadLeaseReceived { ballot, .. } => ballot.is_plausible(),
            LogMessage::Reject { ballot, promised } => ballot.is_plausible() && promised.is_plausible(),
            LogMessage::Fetch { .. } | LogMessage::Entries { .. } | LogMessage::Snapshot { .. } => true,
        }
    }
}
