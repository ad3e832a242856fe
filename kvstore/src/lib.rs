//! leasekv's replicated store: everything a node does with data, with no network or runtime
//! code.
//!
//! - [`state`]: the deterministic state machine (etcd revisions, leases, Txn).
//! - [`engine`]: where the state lives: an ordered byte map with atomic batches (sled; in
//!   memory with crash semantics).
//! - [`storage`]: durable state behind a trait (sled; in memory with crash semantics).
//! - [`log`]: the sans-IO Multi-Paxos replica core under the elected master.
//! - [`lessor`]: the master's TTL-lease deadlines.
//! - [`sim`]: a deterministic simulator of whole replicas with a linearizability checker.
//! - [`watch`]: the sans-IO core of etcd's Watch streams, over the state machine's history.
//! - [`auth`]: users, roles and permissions (etcd's auth store), replicated state only.

#![deny(missing_docs)]

pub mod auth;
pub mod backup;
pub mod command;
pub mod engine;
pub mod error;
pub mod etcd_snapshot;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod golden;
pub mod lessor;
pub mod limits;
pub mod log;
pub mod membership;
pub mod node;
pub mod progress;
pub mod sim;
pub mod state;
pub mod storage;
pub mod types;
pub mod watch;

pub use command::*;
pub use error::KvError;
pub use limits::Limits;
pub use state::StateMachine;
pub use types::{Event, EventKind, KeyRange, KeyValue, LeaseId, Revision, NO_LEASE};
