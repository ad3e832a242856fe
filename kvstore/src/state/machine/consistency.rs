//! What operators use to check replicas against each other and to move a store to a new
//! cluster: hashes of the state (etcd's `Hash` and `HashKV`) and a state stripped of what
//! belongs to the cluster it came from.
//!
//! The hashes are CRC-32 (as etcd's) of the state's own encoding, so they compare members
//! of one leasekv cluster, not a leasekv member with an etcd one.

use super::StateMachine;
use crate::command::RangeRequest;
use crate::error::KvError;
use crate::types::{KeyRange, KeyValue, Revision};

/// The hash of a member's keys and history at one revision (etcd's `HashKVResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHash {
    /// CRC-32 over the compaction point, every key as it was at `revision` and every
    /// retained change up to `revision`.
    pub hash: u32,
    /// The compaction point the hash starts from. Two members' hashes are comparable only
    /// when this is the same (a compaction may be applied on one and not yet on the other).
    pub compact_revision: Revision,
    /// The revision hashed.
    pub revision: Revision,
}

impl StateMachine {
    /// The hash of the keys and the history up to `revision` (the current revision when
    /// `revision <= 0`); like etcd's `HashKV`, nothing else (no leases, users or roles). Members that applied the same commands give the same hash for the
    /// same revision and compaction point, whatever their snapshots and restarts. Refused
    /// like a read at that revision: compacted or in the future.
    pub fn hash_kv(&self, revision: Revision) -> Result<KvHash, KvError> {
        let revision = if revision <= 0 { self.revision } else { revision };
        self.check_readable(revision)?;
        let everything = RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() };
        let keys = self.range_at(&everything, revision)?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.history.compacted().to_le_bytes());
        for kv in &keys.kvs {
            hash_key_value(&mut hasher, kv);
        }
        for event in self.history.events().take_while(|e| e.revision() <= revision) {
            hasher.update(&[event.kind as u8]);
            hash_key_value(&mut hasher, &event.kv);
        }
        Ok(KvHash { hash: hasher.finalize(), compact_revision: self.history.compacted(), revision })
    }

    /// The hash of the whole replicated state (keys, leases, history, revision, alarms,
    /// membership, users and roles), etcd's `Hash` (which hashes its whole database, auth
    /// buckets included): equal on members that applied the same commands.
    pub fn hash(&self) -> u32 {
        crc32fast::hash(&self.to_snapshot_bytes())
    }

    /// Flips a bit of `key`'s value (appends a byte to an empty one), changing nothing
    /// else: silent corruption of one replica's data, for the corruption check's negative
    /// control. The value is damaged as this replica reads it, not on disk (the damage of
    /// a bad memory or a bad read), so a restart without the fault heals the member. False
    /// if the key does not exist.
    #[cfg(feature = "negative-controls")]
    pub fn corrupt_value(&mut self, key: &[u8]) -> bool {
        if self.keys.get(key).is_none() {
            return false;
        }
        self.keys.damage_reads_of(key);
        true
    }

    /// This state as the first state of a new cluster (a restore from a backup): what
    /// ties it to the masters of the cluster it came from is dropped. Their tenures mean
    /// nothing to the new cluster's masters, whose log ballots start again from the
    /// lowest; kept, every expiry the new masters decide would be taken for stale.
    pub fn for_new_cluster(mut self) -> Self {
        self.tenure = (0, 0);
        // The new cluster's members come from its own config files (the seed its first
        // master records), never from the cluster the backup was taken of.
        self.membership = crate::membership::Membership::default();
        // Users, roles and whether auth is on stay, as they do in a restored etcd backup:
        // they belong to the data, not to the cluster's members.
        self
    }
}

pub(in crate::state) fn hash_key_value(hasher: &mut crc32fast::Hasher, kv: &KeyValue) {
    hasher.update(&(kv.key.len() as u64).to_le_bytes());
    hasher.update(&kv.key);
    hasher.update(&(kv.value.len() as u64).to_le_bytes());
    hasher.update(&kv.value);
    for field in [kv.create_revision, kv.mod_revision, kv.version, kv.lease] {
        hasher.update(&field.to_le_bytes());
    }
}
