//! The cluster's membership as replicated state: numbered configurations of voters and
//! learners, changed one step at a time by [`crate::Command::ChangeMembers`].
//!
//! The rules that make a change safe (one voter at a time, one change in flight, the log and
//! the election switching by epoch) are in docs/membership.md; this module holds the data
//! and the per-step checks that do not depend on timing.

use crate::error::KvError;
use leasekv_lease::{Configuration, Members, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The most members a cluster may have (voters and learners together): every write waits
/// for a majority, and etcd recommends at most 7 voters.
pub const MAX_MEMBERS: usize = 9;

/// The most learners at once (etcd's `--max-learners` default is 1; we allow a few so that
/// a replacement can catch up while another is promoted).
pub const MAX_LEARNERS: usize = 3;

/// One member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// Its node id, never reused after a removal.
    pub id: NodeId,
    /// A human name (etcd's member name); may be empty until the member starts.
    pub name: String,
    /// Where peers reach it (election and log), as `http://host:port` URLs.
    pub peer_urls: Vec<String>,
    /// Where clients reach it, as `http://host:port` URLs.
    pub client_urls: Vec<String>,
    /// A learner receives the log but never votes or campaigns.
    pub learner: bool,
}

/// One configuration `C_epoch`: who is a member, and who votes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Membership {
    /// The configuration's number; 0 is "not recorded in the log yet" (a cluster seeded from
    /// its config files before its first master wrote the seed down).
    pub epoch: u64,
    members: BTreeMap<NodeId, Member>,
    /// Every id that was ever removed, so that a removed node coming back is recognised and
    /// its id is never handed out again.
    removed: BTreeSet<NodeId>,
}

/// One step of a membership change (etcd's MemberAdd, MemberPromote, MemberRemove,
/// MemberUpdate), plus the seed a new cluster's first master writes down.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemberChange {
    /// Records the configuration a brand-new cluster was seeded with (its config files).
    /// Only valid while no configuration is recorded.
    Seed {
        /// The seed members, all voters.
        members: Vec<Member>,
    },
    /// Adds a member under the next free id.
    Add {
        /// Where peers reach it.
        peer_urls: Vec<String>,
        /// As a learner (the safe way) or directly as a voter.
        learner: bool,
    },
    /// Makes a learner a voter.
    Promote {
        /// The learner.
        id: NodeId,
    },
    /// Removes a member.
    Remove {
        /// The member.
        id: NodeId,
    },
    /// Changes a member's peer URLs (not its vote).
    Update {
        /// The member.
        id: NodeId,
        /// Its new peer URLs.
        peer_urls: Vec<String>,
    },
    /// A member that started records its name and client URLs (etcd publishes them the same
    /// way when a member starts).
    Publish {
        /// The member.
        id: NodeId,
        /// Its name.
        name: String,
        /// Where clients reach it.
        client_urls: Vec<String>,
    },
    /// The `two-voters-at-once` negative control: `count` voters added in one step, without
    /// addresses, breaking rule 1 (majorities of the configurations before and after need not
    /// share a member). Only the simulator proposes it.
    /// Last: a variant that only some builds have must not move the others' numbers in
    /// postcard (a test build, which has the feature, would write log entries a
    /// production build misreads).
    #[cfg(feature = "negative-controls")]
    #[doc(hidden)]
    AddVotersAtOnce {
        /// How many voters.
        count: u32,
    },
}

impl MemberChange {
    /// Whether this change can alter who votes, so that the rules of docs/membership.md
    /// (one change in flight, the wait of rule 5) apply to it. Address updates and a
    /// member publishing itself change nobody's vote.
    pub fn changes_voters(&self) -> bool {
        match self {
            MemberChange::Seed { .. } | MemberChange::Promote { .. } | MemberChange::Remove { .. } => true,
            MemberChange::Add { learner, .. } => !learner,
            MemberChange::Update { .. } | MemberChange::Publish { .. } => false,
            #[cfg(feature = "negative-controls")]
            MemberChange::AddVotersAtOnce { .. } => true,
        }
    }
}

impl Membership {
    /// A configuration not yet recorded in the log (epoch 0), made of `members`: the seed of
    /// a new cluster, from its config files.
    pub fn seed(members: Vec<Member>) -> Self {
        Membership { epoch: 0, members: members.into_iter().map(|m| (m.id, m)).collect(), removed: BTreeSet::new() }
    }

    /// A seed in which every node of `ids` is a voter with no addresses (tests, the
    /// simulator).
    pub fn of_voters(ids: &[NodeId]) -> Self {
        Self::seed(
            ids.iter()
                .map(|id| Member {
                    id: *id,
                    name: id.to_string(),
                    peer_urls: Vec::new(),
                    client_urls: Vec::new(),
                    learner: false,
                })
                .collect(),
        )
    }

    /// Whether this configuration was recorded in the log (epoch 0 is only a seed).
    pub fn is_recorded(&self) -> bool {
        self.epoch > 0
    }

    /// Every member, voters and learners, by id.
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// The member `id`, if it is one.
    pub fn get(&self, id: NodeId) -> Option<&Member> {
        self.members.get(&id)
    }

    /// Every member's id, voters and learners.
    pub fn ids(&self) -> Vec<NodeId> {
        self.members.keys().copied().collect()
    }

    /// The voters' ids, ascending.
    pub fn voters(&self) -> Vec<NodeId> {
        self.members.values().filter(|m| !m.learner).map(|m| m.id).collect()
    }

    /// The learners' ids, ascending.
    pub fn learners(&self) -> Vec<NodeId> {
        self.members.values().filter(|m| m.learner).map(|m| m.id).collect()
    }

    /// Whether `id` votes in this configuration.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.members.get(&id).is_some_and(|m| !m.learner)
    }

    /// Whether `id` was removed from the cluster (in this or an earlier configuration).
    pub fn was_removed(&self, id: NodeId) -> bool {
        self.removed.contains(&id)
    }

    /// This configuration as quorums count it: epoch, voters, learners. The election is
    /// handed this; the log's majority ([`Self::quorum`]) is the same rule
    /// ([`Members::majority_of`]).
    pub fn configuration(&self) -> Configuration {
        Configuration::new(self.epoch, &self.voters(), &self.learners())
    }

    /// How many voters make a majority ([`Members::majority_of`], the rule every quorum of
    /// the log and the election uses).
    pub fn quorum(&self) -> usize {
        Members::majority_of(self.members.values().filter(|m| !m.learner).count())
    }

    /// Whether the voters among `acks` make a majority (learners and strangers never count).
    pub fn is_quorum<'a>(&self, acks: impl IntoIterator<Item = &'a NodeId>) -> bool {
        acks.into_iter().filter(|id| self.is_voter(**id)).count() >= self.quorum()
    }

    /// The id [`MemberChange::Add`] gives the next member: above every id ever used.
    pub fn next_id(&self) -> NodeId {
        let highest = self.members.keys().chain(self.removed.iter()).map(|id| id.0).max().unwrap_or(0);
        NodeId(highest + 1)
    }

    /// The member whose peer URLs include `url` (a joining node finds its id this way).
    pub fn member_with_peer_url(&self, url: &str) -> Option<&Member> {
        self.members.values().find(|m| m.peer_urls.iter().any(|u| u == url))
    }

    /// Checks `change` against this configuration: what etcd refuses (unknown member,
    /// promoting a voter, removing the last voter, a URL already in use) is refused here
    /// with etcd's error, and so is anything the one-voter-at-a-time rule forbids.
    pub fn check(&self, change: &MemberChange) -> Result<(), KvError> {
        match change {
            MemberChange::Seed { members } => {
                if self.is_recorded() {
                    return Err(KvError::MembershipChange("the cluster's membership is already recorded".into()));
                }
                if members.iter().all(|m| m.learner) {
                    return Err(KvError::MembershipChange("a seed needs at least one voter".into()));
                }
                Ok(())
            }
            MemberChange::Add { peer_urls, learner } => {
                if peer_urls.is_empty() {
                    return Err(KvError::MembershipChange("a new member needs at least one peer URL".into()));
                }
                if peer_urls.iter().any(|u| self.member_with_peer_url(u).is_some()) {
                    return Err(KvError::PeerUrlExists);
                }
                if self.members.len() >= MAX_MEMBERS {
                    return Err(KvError::MembershipChange(format!(
                        "the cluster already has {} members, the most allowed is {MAX_MEMBERS}",
                        self.members.len()
                    )));
                }
                if *learner && self.learners().len() >= MAX_LEARNERS {
                    return Err(KvError::TooManyLearners);
                }
                Ok(())
            }
            MemberChange::Promote { id } => match self.members.get(id) {
                None => Err(KvError::MemberNotFound(*id)),
                Some(m) if !m.learner => Err(KvError::MemberNotLearner),
                Some(_) => Ok(()),
            },
            MemberChange::Remove { id } => match self.members.get(id) {
                None => Err(KvError::MemberNotFound(*id)),
                Some(m) if !m.learner && self.voters().len() == 1 => {
                    Err(KvError::MembershipChange("cannot remove the cluster's last voter".into()))
                }
                Some(_) => Ok(()),
            },
            MemberChange::Update { id, peer_urls } => {
                if !self.members.contains_key(id) {
                    return Err(KvError::MemberNotFound(*id));
                }
                if peer_urls.is_empty() {
                    return Err(KvError::MembershipChange("a member needs at least one peer URL".into()));
                }
                match peer_urls.iter().find_map(|u| self.member_with_peer_url(u)) {
                    Some(other) if other.id != *id => Err(KvError::PeerUrlExists),
                    _ => Ok(()),
                }
            }
            MemberChange::Publish { id, .. } => match self.members.contains_key(id) {
                true => Ok(()),
                false => Err(KvError::MemberNotFound(*id)),
            },
            #[cfg(feature = "negative-controls")]
            MemberChange::AddVotersAtOnce { .. } => Ok(()),
        }
    }

    /// The configuration after `change` (checked with [`Membership::check`] first), with the
    /// next epoch; the id an Add gave its member is returned with it.
    pub fn after(&self, change: &MemberChange) -> Result<(Membership, Option<NodeId>), KvError> {
        self.check(change)?;
        let mut next = self.clone();
        next.epoch = self.epoch + 1;
        let mut added = None;
        match change {
            MemberChange::Seed { members } => {
                next.members = members.iter().map(|m| (m.id, m.clone())).collect();
            }
            MemberChange::Add { peer_urls, learner } => {
                let id = self.next_id();
                next.members.insert(
                    id,
                    Member {
                        id,
                        name: String::new(),
                        peer_urls: peer_urls.clone(),
                        client_urls: Vec::new(),
                        learner: *learner,
                    },
                );
                added = Some(id);
            }
            MemberChange::Promote { id } => {
                if let Some(m) = next.members.get_mut(id) {
                    m.learner = false;
                }
            }
            MemberChange::Remove { id } => {
                next.members.remove(id);
                next.removed.insert(*id);
            }
            MemberChange::Update { id, peer_urls } => {
                if let Some(m) = next.members.get_mut(id) {
                    m.peer_urls = peer_urls.clone();
                }
            }
            MemberChange::Publish { id, name, client_urls } => {
                if let Some(m) = next.members.get_mut(id) {
                    m.name = name.clone();
                    m.client_urls = client_urls.clone();
                }
            }
            #[cfg(feature = "negative-controls")]
            MemberChange::AddVotersAtOnce { count } => {
                for _ in 0..*count {
                    let id = next.next_id();
                    let member = Member {
                        id,
                        name: String::new(),
                        peer_urls: Vec::new(),
                        client_urls: Vec::new(),
                        learner: false,
                    };
                    next.members.insert(id, member);
                }
                added = next.members.keys().next_back().copied();
            }
        }
        Ok((next, added))
    }
}

/// The most URLs one member may list, and the longest URL or name accepted.
const MAX_URLS: usize = 8;
const MAX_TEXT_BYTES: usize = 256;

/// Checks what a client sent, before anything is proposed: URLs of the form
/// `http://host:port` or `https://host:port`, a bounded number of them, bounded names.
pub fn validate_change(change: &MemberChange) -> Result<(), KvError> {
    let urls: &[String] = match change {
        MemberChange::Add { peer_urls, .. } | MemberChange::Update { peer_urls, .. } => peer_urls,
        MemberChange::Publish { name, client_urls, .. } => {
            if name.len() > MAX_TEXT_BYTES {
                return Err(KvError::MembershipChange(format!(
                    "member name is {} bytes, at most {MAX_TEXT_BYTES} are allowed",
                    name.len()
                )));
            }
            client_urls
        }
        MemberChange::Seed { members } => {
            return members.iter().try_for_each(|m| m.peer_urls.iter().try_for_each(|u| check_url(u)));
        }
        MemberChange::Promote { .. } | MemberChange::Remove { .. } => return Ok(()),
        #[cfg(feature = "negative-controls")]
        MemberChange::AddVotersAtOnce { .. } => return Ok(()),
    };
    if urls.len() > MAX_URLS {
        return Err(KvError::BadMemberUrl(format!("{} URLs given, at most {MAX_URLS} are allowed", urls.len())));
    }
    urls.iter().try_for_each(|u| check_url(u))
}

/// `http://host:port` or `https://host:port`, nothing after the port.
fn check_url(url: &str) -> Result<(), KvError> {
    let bad = |why: &str| Err(KvError::BadMemberUrl(format!("{url:?}: {why}")));
    if url.len() > MAX_TEXT_BYTES {
        return bad("too long");
    }
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return bad("expected http://host:port or https://host:port");
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        _ => bad("expected host:port after the scheme"),
    }
}

/// The `host:port` of an `http(s)://host:port` URL (what the peer transport dials).
pub fn url_address(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"))?;
    Some(rest.strip_suffix('/').unwrap_or(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Membership {
        let mut m = Membership::of_voters(&[NodeId(1), NodeId(2), NodeId(3)]);
        m.epoch = 1;
        m
    }

    fn add(url: &str, learner: bool) -> MemberChange {
        MemberChange::Add { peer_urls: vec![url.into()], learner }
    }

    #[test]
    fn add_promote_remove_walk_the_epochs_and_never_reuse_an_id() {
        let c1 = three();
        let (c2, id) = c1.after(&add("http://h:4", true)).unwrap();
        assert_eq!((c2.epoch, id), (2, Some(NodeId(4))));
        assert_eq!(c2.voters(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(c2.learners(), vec![NodeId(4)]);
        assert!(!c2.is_quorum(&[NodeId(1), NodeId(4)]), "a learner never counts");
        let (c3, _) = c2.after(&MemberChange::Promote { id: NodeId(4) }).unwrap();
        assert_eq!(c3.quorum(), 3);
        let (c4, _) = c3.after(&MemberChange::Remove { id: NodeId(4) }).unwrap();
        assert!(c4.was_removed(NodeId(4)));
        let (_, id) = c4.after(&add("http://h:5", true)).unwrap();
        assert_eq!(id, Some(NodeId(5)), "the removed id 4 is not handed out again");
    }

    #[test]
    fn etcd_refusals() {
        let c = three();
        assert!(matches!(c.check(&MemberChange::Promote { id: NodeId(1) }), Err(KvError::MemberNotLearner)));
        assert!(matches!(c.check(&MemberChange::Remove { id: NodeId(9) }), Err(KvError::MemberNotFound(_))));
        let mut with_url = c.clone();
        with_url.members.get_mut(&NodeId(1)).unwrap().peer_urls = vec!["http://h:1".into()];
        assert!(matches!(with_url.check(&add("http://h:1", true)), Err(KvError::PeerUrlExists)));
        let one = Membership::of_voters(&[NodeId(1)]);
        assert!(one.check(&MemberChange::Remove { id: NodeId(1) }).is_err());
        assert!(c.check(&MemberChange::Seed { members: Vec::new() }).is_err(), "already recorded");
    }

    #[test]
    fn urls_are_checked_before_proposing() {
        assert!(validate_change(&add("http://127.0.0.1:42380", true)).is_ok());
        assert!(validate_change(&add("https://node4.example:2380/", true)).is_ok());
        for bad in ["127.0.0.1:42380", "http://:80", "http://h:0", "http://h:port", "ftp://h:1"] {
            assert!(matches!(validate_change(&add(bad, true)), Err(KvError::BadMemberUrl(_))), "{bad}");
        }
        assert_eq!(url_address("http://127.0.0.1:42380"), Some("127.0.0.1:42380"));
    }
}
