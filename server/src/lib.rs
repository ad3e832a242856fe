//! leasekv's node, `kvserver`.
//!
//! - [`config`]: one TOML file per node, command-line overrides, defaults, and the checks
//!   that make a bad configuration fail at start with one clear line.
//! - [`run`]: starting and stopping a node.
//! - [`restore`]: a new member's data directory from a backup file.
//! - [`compactor`]: auto-compaction of the MVCC history, proposed by the master.
//! - [`corrupt_check`]: the master's periodic comparison of the members' hashes.
//! - [`join`]: where a node starts from: a new cluster's seed, or joining an existing one.
//! - [`node`]: the node loop that owns the replica (log, state machine, sled).
//! - [`forward`]: what only the master answers, and how followers hand it over.
//! - [`history_feed`]: how watch streams follow the applied history.
//! - [`auth`]: who calls (tokens, client certificates) and whether they may.
//! - [`api`]: the client-facing gRPC services (etcd v3 subset and the leasekv extension).
//! - [`peer`]: the node-to-node transport: lanes, the peer service, parked messages.
//! - [`tls`]: TLS on the client and peer ports, certificate reload, peer identities.
//! - [`conn_limit`]: the cap on connections open on the client port.
//! - `own_runtime`: the peer port's runtime, on a thread of its own.

#![deny(missing_docs)]

pub(crate) mod api;
pub(crate) mod auth;
mod blocking;
pub(crate) mod compactor;
pub mod config;
pub(crate) mod conn_limit;
pub(crate) mod console;
pub(crate) mod corrupt_check;
pub(crate) mod fault_injection;
pub(crate) mod forward;
#[cfg(test)]
mod fuzz;
pub(crate) mod gateway;
pub(crate) mod history_feed;
pub mod join;
pub(crate) mod metrics;
pub(crate) mod node;
mod own_runtime;
pub mod peer;
pub(crate) mod read_budget;
pub mod restore;
pub mod run;
pub(crate) mod tls;
