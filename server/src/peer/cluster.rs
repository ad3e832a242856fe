//! Which cluster a peer request comes from. Every request a node makes on the peer port
//! carries its cluster id as gRPC metadata, and a node refuses a request stamped with
//! another cluster's id (etcd's "request cluster ID mismatch", checked on its raft HTTP
//! headers). Without it, a node of one cluster configured with a peer address of another
//! (a copied configuration file, a reused address) streams its election and log messages
//! to a member of the other cluster under the same member ids, and the two logs mix.
//!
//! Metadata rather than a field of the messages: a build from before the stamp sends none
//! and is accepted, so a cluster can be upgraded one member at a time, and no message
//! format changes.

use crate::peer::refusal::PeerRefusal;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// The metadata key carrying the sender's cluster id, in decimal.
const CLUSTER_ID_KEY: &str = "leasekv-cluster-id";

/// A cluster's id (the one response headers carry), as the peer port checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterId(pub u64);

impl ClusterId {
    /// `message` as a request from this cluster.
    pub fn stamp<T>(self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.metadata_mut().insert(CLUSTER_ID_KEY, MetadataValue::from(self.0));
        request
    }

    /// Refuses a request stamped with another cluster's id (or with a stamp that is not a
    /// number). An unstamped request comes from a build from before the stamp, and passes.
    pub fn check<T>(self, request: &Request<T>) -> Result<(), Status> {
        let Some(stamp) = request.metadata().get(CLUSTER_ID_KEY) else { return Ok(()) };
        let theirs = stamp.to_str().ok().and_then(|text| text.parse::<u64>().ok());
        if theirs == Some(self.0) {
            return Ok(());
        }
        let theirs = theirs.map_or_else(|| format!("{stamp:?}"), |id| format!("{id:x}"));
        Err(PeerRefusal::OtherCluster { theirs: self.0 }.status(
            tonic::Code::FailedPrecondition,
            format!(
                "etcdserver: request cluster ID mismatch: this member is in cluster {:x}, the request comes from \
                 cluster {theirs}; a node of another cluster lists this member's peer address",
                self.0
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_of_this_cluster_passes_and_one_of_another_is_refused_with_a_typed_refusal() {
        let (ours, other) = (ClusterId(0xabc), ClusterId(0xdef));
        assert!(ours.check(&ours.stamp(())).is_ok());
        let refused = ours.check(&other.stamp(())).expect_err("another cluster's request");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert_eq!(PeerRefusal::of(&refused), Some(PeerRefusal::OtherCluster { theirs: 0xabc }));
        assert!(refused.message().contains("cluster ID mismatch"), "{}", refused.message());
        assert!(refused.message().contains("abc") && refused.message().contains("def"), "{}", refused.message());
    }

    #[test]
    fn an_unstamped_request_of_an_older_build_passes_and_a_garbled_stamp_does_not() {
        let ours = ClusterId(7);
        assert!(ours.check(&Request::new(())).is_ok());
        let mut garbled = Request::new(());
        garbled.metadata_mut().insert(CLUSTER_ID_KEY, MetadataValue::from_static("seven"));
        assert!(ours.check(&garbled).is_err());
    }
}
