//! What travels between nodes inside a `PeerEnvelope`: an election or a log message, a
//! request forwarded to the master and its answer, or the notice of a message parked for a
//! chunked pull ([`crate::peer::parked`]), postcard-encoded. Anything that does not decode is
//! dropped with a log line: a peer port receiving garbage must not take the node down.

use crate::forward::{ForwardId, MasterRequest, MasterResult};
use crate::peer::parked::ParkedNotice;
use leasekv_kvstore::log::LogMessage;
use leasekv_lease::ElectionMessage;
use serde::{Deserialize, Serialize};

/// The peer protocol version this build speaks: what a [`Wire`] payload means. Every
/// `PeerEnvelope` and `FetchParkedRequest` carries it, and a node refuses a stream or pull of
/// any other version with one clear error ([`check_version`]) instead of decoding payloads it
/// may half-understand (postcard has no field tags: a variant added to any type in a
/// message, such as a new store error, shifts what the bytes mean). Raise it with every
/// change to the encoding of [`Wire`] or anything inside it; members of a cluster must then
/// all run the new version (a rolling upgrade across a version change is not supported).
///
/// Version 1: the first versioned protocol (0, the field absent, is every build before).
/// Version 2: a snapshot's transfer notice may give no size (`parked::SIZE_UNKNOWN`: it is
/// sent while it is built), which version 1 refuses as too large.
pub const PEER_PROTOCOL_VERSION: u32 = 2;

/// Checks a peer's protocol version: the FAILED_PRECONDITION status that refuses its stream,
/// naming both versions, unless it is [`PEER_PROTOCOL_VERSION`].
pub fn check_version(theirs: u32) -> Result<(), tonic::Status> {
    if theirs == PEER_PROTOCOL_VERSION {
        return Ok(());
    }
    let theirs = match theirs {
        0 => "none (a build from before protocol versions)".to_string(),
        v => v.to_string(),
    };
    Err(super::refusal::PeerRefusal::ProtocolVersion { theirs: PEER_PROTOCOL_VERSION }.status(
        tonic::Code::FailedPrecondition,
        format!(
            "peer protocol version mismatch: the peer speaks version {theirs}, this node speaks version \
             {PEER_PROTOCOL_VERSION}; every member must run a build of the same peer protocol version"
        ),
    ))
}

/// One node-to-node message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Wire {
    /// For the election backend.
    Election(ElectionMessage),
    /// For the replicated log.
    Log(LogMessage),
    /// A client request a follower hands to the master.
    Forward(ForwardId, MasterRequest),
    /// The master's answer to a forward.
    Answer(ForwardId, MasterResult),
    /// A snapshot or another message too big for a lane is parked for the receiver, which
    /// pulls it with `Peer.FetchParked`. Last, so the earlier variants keep their tags.
    Parked(ParkedNotice),
}

impl Wire {
    /// Encodes for a `PeerEnvelope` payload.
    pub fn encode(&self) -> Vec<u8> {
        // Encoding plain enums of integers and byte strings into a Vec cannot fail.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    /// Decodes a `PeerEnvelope` payload.
    pub fn decode(bytes: &[u8]) -> Result<Wire, postcard::Error> {
        postcard::from_bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_version_is_accepted_and_the_refusal_names_both() {
        assert!(check_version(PEER_PROTOCOL_VERSION).is_ok());
        for (theirs, named) in [(0, "none (a build from before protocol versions)"), (1, "1"), (u32::MAX, "4294967295")]
        {
            let status = check_version(theirs).expect_err("another version is refused");
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
            assert_eq!(
                super::super::refusal::PeerRefusal::of(&status),
                Some(super::super::refusal::PeerRefusal::ProtocolVersion { theirs: PEER_PROTOCOL_VERSION })
            );
            assert!(
                status.message().contains(&format!("speaks version {named}, this node speaks version 2")),
                "{}",
                status.message()
            );
        }
    }
}
