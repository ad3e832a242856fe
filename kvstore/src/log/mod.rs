//! The replicated log: sans-IO Multi-Paxos under the elected master.

mod types;

pub use types::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, Slot};
