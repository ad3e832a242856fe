//! leasekv: a replicated key-value store that speaks etcd's v3 gRPC API, with its master
//! elected by PaxosLease.
//!
//! This package is the front door: it owns the two binaries (`kvserver`, `kvcli`), the
//! cluster-level tests in `tests/` and the benchmarks in `benches/`, and re-exports the member
//! crates under the names below. A map of the system, from the bottom up:
//!
//! - [`lease`] (`lease/`): master election. PaxosLease as sans-IO state machines, the lease
//!   tracker it is compared with, and a seeded simulator with safety and liveness oracles.
//! - [`kvstore`] (`kvstore/`): everything a node does with data, with no network code. The
//!   state machine (etcd revisions, leases, Txn), durable storage (sled), the sans-IO
//!   Multi-Paxos log run by the elected master, TTL-lease deadlines, and a simulator of whole
//!   replicas with a linearizability checker.
//! - [`server`] (`server/`): the node. Configuration, the node loop that owns the replica,
//!   the node-to-node transport and the etcd v3 gRPC services; `kvserver` calls its
//!   [`server::run::run`].
//! - [`client`] (`client/`): the gRPC definitions (etcd's v3 subset and leasekv's extension)
//!   and a client that fails over between endpoints; `kvcli` is built on it.
//!
//! The README says how to run a node, a cluster and the tests; `docs/` explains each part.

#![deny(missing_docs)]

pub mod node_config;
pub mod process;

pub use leasekv_client as client;
pub use leasekv_kvstore as kvstore;
pub use leasekv_lease as lease;
pub use leasekv_server as server;
