//! PaxosLease master election for leasekv.
//!
//! - [`paxos`]: PaxosLease as sans-IO state machines (acceptor, proposer, a multi-resource
//!   node) and the master-election core built on them.
//! - [`tracker`]: the comparison backend, a central lease tracker without Paxos.
//! - [`naive`]: the naive majority vote (simulator only), to show its static deadlock.
//! - [`core`]: the sans-IO contract all three implement ([`ElectionCore`]).
//! - [`backend`]: the async [`ElectionBackend`] the store uses, driving a core over a
//!   [`Transport`] with tokio.
//! - [`members`]: the cluster's voting members and the majority rule.
//! - [`sim`]: a deterministic, seeded simulator with safety and liveness oracles.
//!
//! Nothing in the cores reads a clock or touches the network: time comes in as a
//! monotonic [`Instant`] with every input.

#![deny(missing_docs)]

pub mod backend;
pub mod ballot;
pub mod config;
pub mod core;
pub mod epoch;
#[cfg(test)]
mod fuzz;
pub mod ids;
pub mod members;
pub mod message;
pub mod naive;
pub mod paxos;
pub mod rng;
pub mod sim;
pub mod time;
pub mod tracker;

pub use backend::{BackendKind, ElectionBackend, Transport};
pub use ballot::{Ballot, Term};
pub use config::{Breakage, ConfigError, LeaseConfig};
pub use core::{ElectionCore, Envelope, LeadershipChange, LossReason, Mastership, Output};
pub use epoch::{EpochStore, MemoryEpochStore, RestartEpoch};
pub use ids::{NodeId, ResourceId};
pub use members::{Configuration, Members};
pub use message::ElectionMessage;
pub use time::Instant;
