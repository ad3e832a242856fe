//! leasekv's node, `kvserver`.
//!
//! - [`config`]: one TOML file per node, command-line overrides, defaults, and the checks
//!   that make a bad configuration fail at start with one clear line.
//! - [`run`]: starting and stopping a node.
//! - [`node`]: the node loop that owns the replica (log, state machine, sled).
//! - [`forward`]: what only the master answers, and how followers hand it over.
//! - [`api`]: the client-facing gRPC services (etcd v3 subset and the leasekv extension).
//! - [`peers`], [`peer_service`], [`wire`]: node-to-node messages over gRPC.
//! - [`transfer`]: snapshots and other messages too big for a peer stream, pulled in chunks.

#![warn(missing_docs)]

pub mod api;
pub mod config;
pub mod forward;
pub mod node;
pub mod peer_service;
pub mod peers;
pub mod run;
pub mod transfer;
pub mod wire;
