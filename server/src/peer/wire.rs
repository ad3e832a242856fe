//! What travels between nodes inside a `PeerEnvelope`: an election or a log message, a
//! request forwarded to the master and its answer, or the notice of a message parked for a
//! chunked pull ([`crate::peer::parked`]), postcard-encoded. Anything that does not decode is
//! dropped with a log line: a peer port receiving garbage must not take the node down.
//! What a payload may hold depends on the link's protocol version ([`super::version`]).

use crate::forward::{ForwardId, MasterRequest, MasterResult};
use crate::peer::parked::ParkedNotice;
use leasekv_kvstore::log::LogMessage;
use leasekv_lease::ElectionMessage;
use serde::{Deserialize, Serialize};

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
