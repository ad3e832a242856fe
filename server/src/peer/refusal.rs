//! Why a peer refused this node's stream, carried as gRPC metadata beside the human message
//! (as `leasekv_client::outcome` marks a write of unknown outcome): the refused side acts
//! on the metadata, never on the text, which stays free to say what an operator needs.

use tonic::metadata::MetadataValue;
use tonic::Status;

/// The metadata key naming the refusal's kind.
const KIND_KEY: &str = "leasekv-peer-refusal";
/// The metadata key of the refusal's number: the membership epoch of a removal, the
/// refusing node's protocol version, or its cluster id.
const VALUE_KEY: &str = "leasekv-peer-refusal-value";

/// A refusal the refused node acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRefusal {
    /// The log removed the caller from the cluster at configuration `epoch`: it must stop
    /// (etcd's removed member does the same).
    Removed {
        /// The membership epoch that removed it.
        epoch: u64,
    },
    /// The refusing node does not speak the caller's peer protocol version; it speaks
    /// `theirs`.
    ProtocolVersion {
        /// The refusing node's version.
        theirs: u32,
    },
    /// The refusing node belongs to another cluster, `theirs` (see
    /// [`crate::peer::cluster`]): the caller's configuration lists it by mistake.
    OtherCluster {
        /// The refusing node's cluster id.
        theirs: u64,
    },
}

impl PeerRefusal {
    /// The refusal as a status: `code` and `message` for people, the metadata for the
    /// refused node.
    pub fn status(self, code: tonic::Code, message: String) -> Status {
        let (kind, value) = match self {
            PeerRefusal::Removed { epoch } => ("removed", epoch),
            PeerRefusal::ProtocolVersion { theirs } => ("protocol-version", u64::from(theirs)),
            PeerRefusal::OtherCluster { theirs } => ("other-cluster", theirs),
        };
        let mut status = Status::new(code, message);
        status.metadata_mut().insert(KIND_KEY, MetadataValue::from_static(kind));
        status.metadata_mut().insert(VALUE_KEY, MetadataValue::from(value));
        status
    }

    /// The refusal `status` carries, if it is one.
    pub fn of(status: &Status) -> Option<PeerRefusal> {
        let kind = status.metadata().get(KIND_KEY)?.to_str().ok()?;
        let value: u64 = status.metadata().get(VALUE_KEY)?.to_str().ok()?.parse().ok()?;
        match kind {
            "removed" => Some(PeerRefusal::Removed { epoch: value }),
            "protocol-version" => Some(PeerRefusal::ProtocolVersion { theirs: u32::try_from(value).ok()? }),
            "other-cluster" => Some(PeerRefusal::OtherCluster { theirs: value }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_round_trips_and_the_text_decides_nothing() {
        for refusal in [
            PeerRefusal::Removed { epoch: 7 },
            PeerRefusal::ProtocolVersion { theirs: 3 },
            PeerRefusal::OtherCluster { theirs: u64::MAX },
        ] {
            let status = refusal.status(tonic::Code::PermissionDenied, "whatever a person should read".into());
            assert_eq!(PeerRefusal::of(&status), Some(refusal));
        }
        let text_only =
            Status::permission_denied("leasekv: member 3 was removed from the cluster (membership epoch 7)");
        assert_eq!(PeerRefusal::of(&text_only), None);
    }
}
