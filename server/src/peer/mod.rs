//! The peer transport: how nodes talk to each other, over gRPC on the peer port.
//!
//! Every node streams to every other node on two long-lived lanes (one for the election,
//! one for the log and requests forwarded to the master) and serves the same streams from
//! its peers. What travels is a postcard-encoded [`wire::Wire`] per message, opaque to gRPC.
//! A message too big for a lane (a state-machine snapshot above all) is parked by its
//! sender and pulled by its receiver in chunks.
//!
//! - [`lanes`]: the sending side, [`lanes::PeerNetwork`]: one queue and stream per peer and lane.
//! - [`service`]: the receiving side, the `Peer` gRPC service that hands each message on.
//! - [`parked`]: messages parked for a chunked pull, both ends.
//! - [`wire`]: the node-to-node message and its encoding.
//! - [`cluster`]: the cluster id every peer request carries, and the check that refuses another cluster's.
//! - [`version`]: the protocol versions a node speaks, and how peers agree on one.
//! - [`proto`]: the gRPC service generated from `server/proto/leasekv/peer/v1/peer.proto`.

pub(crate) mod cluster;
pub(crate) mod lanes;
pub(crate) mod parked;
pub(crate) mod refusal;
pub(crate) mod service;
pub mod version;
pub(crate) mod wire;

#[cfg(test)]
mod golden;

/// Generated from `leasekv.peer.v1`: envelopes of opaque payloads, and parked-message chunks.
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("leasekv.peer.v1");
}
