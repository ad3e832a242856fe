//! The replicated log: a sans-IO Multi-Paxos replica under the elected master.
//!
//! - [`types`]: ballots, slots, entries.
//! - [`message`]: what replicas send each other.
//! - [`Replica`]: one node's share, a coordinator over parts that own their state: the
//!   acceptor (`acceptor.rs`), the learner and its state machine (`learner.rs`), the
//!   master's role, candidate in phase 1 or leader in phase 2 (`leader.rs`), and the outbox
//!   that holds acknowledgements until they are durable (`outbox.rs`).
//!
//! Safety never depends on the election: log ballots are persisted by every acceptor and a
//! new master runs phase 1 over a majority before it proposes, so two nodes that both
//! believe they are master cannot make replicas diverge. The election only decides who
//! tries, and whose local reads are linearizable.

mod acceptor;
mod config;
mod leader;
mod learner;
pub use learner::{CheckpointTicket, SnapshotJob};
mod message;
mod outbox;
mod read_job;
mod read_lease;
mod replica;
mod request;
mod staged;
mod types;

pub use config::{LogBreakage, ReplicaConfig, ReplicaConfigError};
pub use message::LogMessage;
pub use read_job::ReadJob;
pub use read_lease::ReadLeaseConfig;
pub use replica::{
    AppliedTrace, CandidacyConfig, LeaseStatus, OpenError, Replica, ReplicaCounts, ReplicaOutput, SyncTicket,
    Withdrawal,
};
pub use request::{Completion, ErrorClass, ReadConsistency, RequestError, StorageFailure};
pub use staged::StagedSnapshot;
pub use types::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, Slot};
