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
//! - [`proto`]: the gRPC service generated from `server/proto/leasekv/peer/v1/peer.proto`.

pub mod lanes;
pub mod parked;
pub mod service;
pub mod wire;

/// Generated from `leasekv.peer.v1`: envelopes of opaque payloads, and parked-message chunks.
pub mod proto {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("leasekv.peer.v1");
}

/// What the peer service answers a node the log removed from the cluster, so that it stops
/// (see [`removed_epoch`]).
pub(crate) fn removed_notice(id: u32, epoch: u64) -> String {
    format!("{REMOVED_PREFIX}{id} was removed from the cluster (membership epoch {epoch})")
}

const REMOVED_PREFIX: &str = "leasekv: member ";

/// The membership epoch of a [`removed_notice`], if `message` is one.
pub(crate) fn removed_epoch(message: &str) -> Option<u64> {
    let rest = message.strip_prefix(REMOVED_PREFIX)?;
    let epoch = rest.split("(membership epoch ").nth(1)?;
    epoch.strip_suffix(')')?.parse().ok()
}

#[cfg(test)]
mod removed_tests {
    #[test]
    fn the_removed_notice_round_trips() {
        assert_eq!(super::removed_epoch(&super::removed_notice(3, 7)), Some(7));
        assert_eq!(super::removed_epoch("node 3 is not a member of this cluster"), None);
    }
}
