//! PaxosLease (Trencseni, Gazsó 2012): diskless Paxos for leases.
//!
//! [`Acceptor`] and [`Proposer`] are the per-resource state machines; [`LeaseNode`] runs
//! any number of resources on one node and routes messages; [`PaxosLeaseElection`] is the
//! master-election core built on the [`ResourceId::MASTER`](crate::ResourceId::MASTER)
//! resource.

mod acceptor;
mod election;
mod message;
mod node;
mod proposer;
mod votes;

pub use acceptor::Acceptor;
pub use election::PaxosLeaseElection;
pub use message::{AcceptedLease, Body, Message, Proposal};
pub use node::LeaseNode;
pub use proposer::{Proposer, ProposerOutput, Target};
pub use votes::Votes;

#[cfg(test)]
mod tests;
