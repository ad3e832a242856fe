//! Keys of revoked and expired leases that are gone for every reader but not yet physically
//! removed.
//!
//! Revoking a lease with 100,000 keys must not stall the apply loop, yet etcd says the lease
//! and all its keys vanish at one revision. So a lease's death only *buries* its key set
//! here (O(1): the set moves out of the lease record); the key space then treats every
//! buried key as absent, and each apply removes a bounded number of them
//! ([`super::Keyspace::sweep`]). The work is a pure function of the replicated state, so every
//! replica (and one restored from a snapshot) removes the same keys at the same apply.
//!
//! A death is recorded under `(lease id, revision of the death)`. A stored key is dead iff
//! its lease has a recorded death at a revision *after* the key's `mod_revision`: every key
//! attached to a lease when it died was written before that revision, and every key written
//! later (necessarily under a later, re-granted lease with the same id, or under another
//! lease) has a larger `mod_revision`. That lets a revoked id be granted again at once, as in
//! etcd, while the old incarnation's keys are still being swept, without confusing the two.
//!
//! Invariant: the buried sets hold exactly the stored keys that are dead, each under the
//! earliest death after its `mod_revision`. The key space keeps it by calling
//! [`Graveyard::forget`] whenever a dead key is overwritten or deleted, so [`Graveyard::pending`]
//! is the exact number of invisible keys still stored.

use crate::types::{KeyValue, LeaseId, Revision, NO_LEASE};
use std::collections::{BTreeMap, BTreeSet};

/// One lease death: the lease id and the revision at which it and its keys vanished.
pub(super) type Death = (LeaseId, Revision);

/// Buried key sets, by death.
#[derive(Debug, Clone, Default)]
pub(super) struct Graveyard {
    /// The dead keys still stored, per death; never holds an empty set.
    buried: BTreeMap<Death, BTreeSet<Vec<u8>>>,
    /// Total size of the sets in `buried`, kept so that counting live keys stays O(1).
    pending: usize,
}

impl Graveyard {
    /// A graveyard holding `buried` (snapshot restore); the caller checked that no set is
    /// empty and that the sets match the stored keys.
    pub(super) fn from_parts(buried: BTreeMap<Death, BTreeSet<Vec<u8>>>) -> Self {
        let pending = buried.values().map(BTreeSet::len).sum();
        Graveyard { buried, pending }
    }

    /// Number of dead keys still stored.
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// Every recorded death, in order (for snapshots: the key sets are implied by the keys).
    pub(super) fn deaths(&self) -> impl Iterator<Item = Death> + '_ {
        self.buried.keys().copied()
    }

    /// The death that made `kv` invisible, if any: the earliest death of its lease after the
    /// key was last written. O(log deaths), and O(1) when nothing is buried (the usual case,
    /// which keeps reads as fast as before).
    pub(super) fn death_of(&self, kv: &KeyValue) -> Option<Death> {
        if kv.lease == NO_LEASE || self.buried.is_empty() {
            return None;
        }
        self.buried
            .range((kv.lease, kv.mod_revision.saturating_add(1))..=(kv.lease, Revision::MAX))
            .next()
            .map(|(d, _)| *d)
    }

    /// Whether `kv` is stored but no longer exists for readers.
    pub(super) fn is_dead(&self, kv: &KeyValue) -> bool {
        self.death_of(kv).is_some()
    }

    /// Records that lease `id` died at `revision`, leaving `keys` (all stored, all written
    /// before `revision`).
    pub(super) fn bury(&mut self, id: LeaseId, revision: Revision, mut keys: BTreeSet<Vec<u8>>) {
        if keys.is_empty() {
            return;
        }
        self.pending += keys.len();
        // One id cannot die twice at one revision (a death with keys moves the revision, and
        // re-attaching keys takes another write), but merging keeps the count exact even so;
        // appending into an empty set is a swap, so the usual case stays O(1).
        self.buried.entry((id, revision)).or_default().append(&mut keys);
    }

    /// `kv`, a dead key, is leaving the key space by an overwrite or a delete: it no longer
    /// needs sweeping.
    pub(super) fn forget(&mut self, kv: &KeyValue) {
        let Some(death) = self.death_of(kv) else { return };
        if let Some(set) = self.buried.get_mut(&death) {
            if set.remove(&kv.key) {
                self.pending -= 1;
            }
            if set.is_empty() {
                self.buried.remove(&death);
            }
        }
    }

    /// Takes up to `budget` keys off the work list, earliest death first and in key order
    /// within one death (so the order is a function of the state alone), and hands each to
    /// `remove` with its death. Returns how many were taken.
    pub(super) fn sweep(&mut self, budget: usize, mut remove: impl FnMut(&[u8], Death)) -> usize {
        let mut taken = 0;
        while taken < budget {
            let Some(mut entry) = self.buried.first_entry() else { break };
            let death = *entry.key();
            let set = entry.get_mut();
            while taken < budget {
                let Some(key) = set.pop_first() else { break };
                taken += 1;
                self.pending -= 1;
                remove(&key, death);
            }
            if set.is_empty() {
                entry.remove();
            }
        }
        taken
    }

    /// Checks the bookkeeping against the buried sets (tests only).
    #[cfg(test)]
    pub(super) fn check(&self) {
        assert!(self.buried.values().all(|s| !s.is_empty()), "empty buried set");
        assert_eq!(self.pending, self.buried.values().map(BTreeSet::len).sum::<usize>());
    }

    /// Whether `key` is on the work list of `death` (tests only).
    #[cfg(test)]
    pub(super) fn holds(&self, death: Death, key: &[u8]) -> bool {
        self.buried.get(&death).is_some_and(|s| s.contains(key))
    }
}
