//! Peer protocol versions: which versions this build speaks, how two members agree on the
//! one their link uses, and the cluster's version (the lowest any member speaks), which
//! decides when a feature every member must understand may be used.
//!
//! A [`Wire`](super::wire::Wire) payload is postcard: no field tags, so a variant added to
//! any type in a message (a new store error, a new request) shifts what the bytes mean to a
//! build that does not know it. Every such change therefore raises
//! [`PEER_PROTOCOL_VERSION`], and a node keeps speaking the versions back to
//! [`OLDEST_PEER_PROTOCOL_VERSION`], so that a cluster can be upgraded one node at a time:
//! - before its first stream to a peer, a node asks the peer what it speaks (`Peer.Hello`)
//!   and streams in the lower of the two newest versions (a build from before `Hello`
//!   answers UNIMPLEMENTED: it speaks version 2, the version of every build since versions
//!   were introduced until `Hello`);
//! - every envelope names its version, and a receiver accepts any version it speaks;
//! - a node sends a peer only what the link's version allows ([`Feature`]): what only the
//!   newer side would understand is held back, or done the older way.
//!
//! Version 1: the first versioned protocol (0, the field absent, is every build before).
//! Version 2: a snapshot's transfer notice may give no size (`parked::SIZE_UNKNOWN`: it is
//! sent while it is built), which version 1 refuses as too large.
//! Version 3: `Peer.Hello`; a master may answer a forwarded request with
//! `RequestError::Overloaded` (its client queue is full: etcd's "too many requests"). A
//! master of version 2 never did, and the version 2 builds before 6baa79d cannot decode it
//! (they also number the store errors after `Busy` one lower than every build since: a
//! cluster mixing those builds with later ones misreports some errors of forwarded
//! requests, never their outcome), so a version 2 follower's forwards are queued as before.
//! Version 4: read leases (`LogMessage::ReadLeaseAsk`, `ReadLeaseGrant`, `ReadLeaseReceived`;
//! docs/read-leases.md). They go only over a link that speaks 4, and are asked for and
//! granted only while the cluster's version is 4: a master of an earlier build neither
//! holds back its writes for holders nor waits for an earlier master's holders.
//! Version 5: a master may answer a forwarded read with `KvError::ResponseTooLarge` (the
//! answer passed `[limits] max_response_bytes`). To a follower of an earlier version it
//! sends the refusal as `RequestError::PeerProtocol` with the same text: the read fails
//! there too, with an Internal status rather than etcd's ResourceExhausted.
//! Version 6: a peer snapshot may be of format 9 (the history's pages below the compaction
//! point sent as stored, keys naming their changes; `kvstore/src/state/stream.rs`), which a
//! build of version 5 refuses by number. A master builds it only while the cluster's
//! version is 6, and format 8 otherwise. No message changed.

use super::refusal::PeerRefusal;
use leasekv_lease::NodeId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

/// The newest peer protocol version this build speaks (see the module docs for each).
pub const PEER_PROTOCOL_VERSION: u32 = 6;

/// The oldest peer protocol version this build still speaks: the version of the previous
/// release, so that releases can be mixed during a rolling upgrade.
pub const OLDEST_PEER_PROTOCOL_VERSION: u32 = 2;

/// The version a peer that answers `Hello` with UNIMPLEMENTED speaks: every build from
/// version 2 until `Hello` came with version 3.
pub const VERSION_WITHOUT_HELLO: u32 = 2;

pub use leasekv_kvstore::node::Feature;

/// The versions one node speaks: [`OLDEST_PEER_PROTOCOL_VERSION`] up to `newest`, which is
/// [`PEER_PROTOCOL_VERSION`] unless the node's config holds it lower
/// (`peer_protocol_version`: what a node of the previous release would speak).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speaks {
    newest: u32,
}

impl Default for Speaks {
    fn default() -> Self {
        Speaks { newest: PEER_PROTOCOL_VERSION }
    }
}

impl Speaks {
    /// Speaking up to `newest`, which must be a version this build speaks.
    pub fn up_to(newest: u32) -> Option<Speaks> {
        (OLDEST_PEER_PROTOCOL_VERSION..=PEER_PROTOCOL_VERSION).contains(&newest).then_some(Speaks { newest })
    }

    /// The newest version spoken.
    pub fn newest(self) -> u32 {
        self.newest
    }

    /// Whether an envelope of `version` is understood.
    pub fn understands(self, version: u32) -> bool {
        (OLDEST_PEER_PROTOCOL_VERSION..=self.newest).contains(&version)
    }

    /// The version of a link to a peer speaking `oldest..=newest`: the newest both speak,
    /// or `None` when the two ranges do not meet.
    pub fn agree(self, theirs_oldest: u32, theirs_newest: u32) -> Option<u32> {
        let version = self.newest.min(theirs_newest);
        (version >= OLDEST_PEER_PROTOCOL_VERSION.max(theirs_oldest)).then_some(version)
    }

    /// The FAILED_PRECONDITION status refusing a stream or pull of `theirs`, a version this
    /// node does not speak; its metadata names the newest version this node speaks.
    pub fn refusal(self, theirs: u32) -> tonic::Status {
        let theirs = match theirs {
            0 => "none (a build from before protocol versions)".to_string(),
            v => v.to_string(),
        };
        PeerRefusal::ProtocolVersion { theirs: self.newest }.status(
            tonic::Code::FailedPrecondition,
            format!(
                "peer protocol version mismatch: the peer speaks version {theirs}, this node speaks versions \
                 {OLDEST_PEER_PROTOCOL_VERSION} to {}; upgrade members one release at a time",
                self.newest
            ),
        )
    }
}

/// The version of the link to each peer, as this node agreed it, and the cluster version
/// they make. Shared by the lanes (which agree) and the peer service.
#[derive(Debug, Clone)]
pub struct LinkVersions {
    me: NodeId,
    speaks: Speaks,
    state: Arc<RwLock<Links>>,
}

#[derive(Debug, Default)]
struct Links {
    /// The other members.
    members: HashSet<NodeId>,
    /// The version agreed with each member a lane reached.
    agreed: HashMap<NodeId, u32>,
}

impl Links {
    fn cluster_version(&self, newest: u32) -> u32 {
        self.members
            .iter()
            .map(|m| self.agreed.get(m).copied().unwrap_or(OLDEST_PEER_PROTOCOL_VERSION))
            .fold(newest, u32::min)
    }
}

impl LinkVersions {
    /// No link of node `me` agreed yet.
    pub fn new(me: NodeId, speaks: Speaks) -> Self {
        LinkVersions { me, speaks, state: Arc::default() }
    }

    /// What this node speaks.
    pub fn speaks(&self) -> Speaks {
        self.speaks
    }

    /// Follows the configuration: `members` (this node may be among them) are the nodes
    /// the cluster version is taken over; a former member's agreement is forgotten.
    pub fn set_members(&self, members: impl IntoIterator<Item = NodeId>) {
        self.update(|links| {
            links.members = members.into_iter().filter(|&m| m != self.me).collect();
            let members = &links.members;
            links.agreed.retain(|m, _| members.contains(m));
        });
    }

    /// Records the version agreed with `peer` (logged when it changes); ignored for a node
    /// that is no longer a member (a `Hello` answered after its removal).
    pub fn agreed(&self, peer: NodeId, version: u32) {
        self.update(|links| {
            if !links.members.contains(&peer) {
                return;
            }
            if links.agreed.insert(peer, version) != Some(version) {
                tracing::info!(%peer, version, "peer protocol version agreed");
            }
        });
    }

    /// Applies `change`, and logs and publishes the cluster version if it moved.
    fn update(&self, change: impl FnOnce(&mut Links)) {
        let mut links = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let before = links.cluster_version(self.speaks.newest);
        change(&mut links);
        let after = links.cluster_version(self.speaks.newest);
        crate::metrics::metrics().cluster_protocol_version.set(i64::from(after));
        if after != before {
            tracing::info!(version = after, was = before, "cluster protocol version changed");
        }
    }

    /// The version agreed with `peer`, once a lane reached it.
    pub fn of(&self, peer: NodeId) -> Option<u32> {
        self.state.read().unwrap_or_else(PoisonError::into_inner).agreed.get(&peer).copied()
    }

    /// The cluster version: the lowest version agreed with any other member, a member no
    /// lane reached yet counting as [`OLDEST_PEER_PROTOCOL_VERSION`] (it may run the
    /// previous release), and this node's newest when it is alone. A feature every member
    /// must understand waits for it ([`Feature::in_version`]), as etcd's features wait for
    /// its cluster version.
    pub fn cluster_version(&self) -> u32 {
        self.state.read().unwrap_or_else(PoisonError::into_inner).cluster_version(self.speaks.newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_speaks_the_newest_version_both_sides_speak() {
        let new = Speaks::default();
        let old = Speaks::up_to(2).expect("this build speaks 2");
        assert_eq!(new.agree(OLDEST_PEER_PROTOCOL_VERSION, PEER_PROTOCOL_VERSION), Some(PEER_PROTOCOL_VERSION));
        assert_eq!(new.agree(2, 2), Some(2), "a node of the previous release");
        assert_eq!(old.agree(2, PEER_PROTOCOL_VERSION), Some(2), "held back by its config");
        assert_eq!(new.agree(1, 1), None, "two releases back");
        assert_eq!(new.agree(PEER_PROTOCOL_VERSION + 1, PEER_PROTOCOL_VERSION + 5), None, "two releases ahead");
        assert_eq!(new.agree(2, PEER_PROTOCOL_VERSION + 1), Some(PEER_PROTOCOL_VERSION), "the next release");
        assert!(Speaks::up_to(1).is_none() && Speaks::up_to(PEER_PROTOCOL_VERSION + 1).is_none());
    }

    #[test]
    fn envelopes_of_every_spoken_version_are_understood_and_others_refused_with_both_named() {
        let new = Speaks::default();
        assert!(new.understands(2) && new.understands(PEER_PROTOCOL_VERSION));
        assert!(!Speaks::up_to(2).expect("speaks 2").understands(3));
        for (theirs, named) in [(0, "none (a build from before protocol versions)"), (1, "1"), (u32::MAX, "4294967295")]
        {
            assert!(!new.understands(theirs));
            let status = new.refusal(theirs);
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
            assert_eq!(PeerRefusal::of(&status), Some(PeerRefusal::ProtocolVersion { theirs: PEER_PROTOCOL_VERSION }));
            assert!(
                status.message().contains(&format!(
                    "speaks version {named}, this node speaks versions 2 to {PEER_PROTOCOL_VERSION}"
                )),
                "{}",
                status.message()
            );
        }
    }

    #[test]
    fn the_cluster_version_waits_for_every_member() {
        let versions = LinkVersions::new(NodeId(1), Speaks::default());
        assert_eq!(versions.cluster_version(), PEER_PROTOCOL_VERSION, "alone");
        versions.set_members([NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(versions.cluster_version(), 2, "members not heard from may be old");
        versions.agreed(NodeId(2), 3);
        assert_eq!(versions.cluster_version(), 2);
        versions.agreed(NodeId(3), 2);
        assert_eq!(versions.cluster_version(), 2);
        versions.agreed(NodeId(3), 3);
        assert_eq!(versions.cluster_version(), 3, "node 1 is this one");
        assert!(Feature::RefuseForwardsWhenOverloaded.in_version(versions.cluster_version()));
        assert!(!Feature::ReadLeases.in_version(versions.cluster_version()), "a member speaks 3");
        versions.agreed(NodeId(2), 4);
        versions.agreed(NodeId(3), 4);
        assert!(Feature::ReadLeases.in_version(versions.cluster_version()), "every member speaks 4");
        versions.agreed(NodeId(3), 3);
        versions.set_members([NodeId(1), NodeId(2), NodeId(3), NodeId(4)]);
        assert_eq!(versions.cluster_version(), 2, "a member joined");
        versions.set_members([NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(versions.cluster_version(), 3, "and left");
        versions.agreed(NodeId(4), 3);
        assert_eq!(versions.of(NodeId(4)), None, "a Hello answered after the removal is not kept");
        let held_back = LinkVersions::new(NodeId(1), Speaks::up_to(2).expect("2"));
        held_back.set_members([NodeId(1), NodeId(2)]);
        held_back.agreed(NodeId(2), 2);
        assert_eq!(held_back.cluster_version(), 2);
    }
}
