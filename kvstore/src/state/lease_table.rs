//! The lease table: live leases, their unique names and the keys attached to each, plus the
//! deterministic choice of ids for grants that leave the id to the store.
//!
//! A lease records only the *keys* attached to it, never their values: the key space is the
//! single owner of values.

use super::digest::mix64;
use super::layout::{encode_framed, lease_key, LeaseRecord};
use super::lease_keys::LeaseKeys;
use crate::engine::WriteBatch;
use crate::error::KvError;
use crate::types::{LeaseId, Revision, NO_LEASE};
use std::collections::{BTreeMap, BTreeSet};

/// Longest lease name the state machine accepts, bytes. Equal to the default
/// [`crate::Limits::max_lease_name_bytes`]; the apply path cannot see the configured limits
/// and must decide the same on every replica, so it uses this fixed bound.
pub(super) const MAX_LEASE_NAME_BYTES: usize = 256;

/// A live TTL lease as the replicated state knows it (deadlines are not replicated: only
/// the master tracks them, see [`crate::lessor`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The id.
    pub id: LeaseId,
    /// The optional unique name.
    pub name: Option<String>,
    /// Granted TTL, seconds.
    pub ttl: i64,
    /// The keys attached.
    pub keys: LeaseKeys,
}

/// Live leases by id, with the name index.
#[derive(Debug, Clone, Default)]
pub(super) struct LeaseTable {
    leases: BTreeMap<LeaseId, Lease>,
    names: BTreeMap<String, LeaseId>,
    /// How many candidate ids the store has generated; part of the replicated state so that
    /// every replica (and a replica restored from a snapshot) picks the same next id.
    grant_counter: u64,
    /// Leases granted or removed since the last flush, whose records the engine must get.
    changed: BTreeSet<LeaseId>,
}

/// Why a lease name is not acceptable, or `None` when it is.
pub(super) fn lease_name_problem(name: &str, max: usize) -> Option<String> {
    if name.is_empty() {
        Some("name is empty".to_string())
    } else if name.len() > max {
        Some(format!("name is {} bytes, at most {max} are allowed", name.len()))
    } else {
        None
    }
}

impl LeaseTable {
    /// A table rebuilt from its parts (snapshot restore); the caller checked consistency.
    pub(super) fn from_parts(leases: BTreeMap<LeaseId, Lease>, grant_counter: u64) -> Self {
        let names = leases.values().filter_map(|l| l.name.clone().map(|n| (n, l.id))).collect();
        LeaseTable { leases, names, grant_counter, changed: BTreeSet::new() }
    }

    /// See the field.
    pub(super) fn grant_counter(&self) -> u64 {
        self.grant_counter
    }

    /// One lease.
    pub(super) fn get(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(&id)
    }

    /// Whether `id` is [`NO_LEASE`] or a live lease, i.e. a key may be attached to it.
    pub(super) fn can_attach(&self, id: LeaseId) -> Result<(), KvError> {
        if id == NO_LEASE || self.leases.contains_key(&id) {
            Ok(())
        } else {
            Err(KvError::LeaseNotFound(id))
        }
    }

    /// Resolves a name.
    pub(super) fn id_by_name(&self, name: &str) -> Option<LeaseId> {
        self.names.get(name).copied()
    }

    /// All live leases in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Lease> + '_ {
        self.leases.values()
    }

    /// Number of live leases.
    pub(super) fn len(&self) -> usize {
        self.leases.len()
    }

    /// Creates a lease, checking everything first so that a refused grant changes nothing
    /// (not even the id counter). `revision` seeds the id choice when `id == 0`.
    pub(super) fn grant(
        &mut self,
        id: LeaseId,
        name: Option<&str>,
        ttl: i64,
        revision: Revision,
    ) -> Result<LeaseId, KvError> {
        if ttl <= 0 {
            return Err(KvError::InvalidTtl(ttl));
        }
        if id < 0 {
            return Err(KvError::InvalidLeaseId(id));
        }
        if let Some(name) = name {
            if let Some(problem) = lease_name_problem(name, MAX_LEASE_NAME_BYTES) {
                return Err(KvError::InvalidLeaseName(problem));
            }
        }
        if id != NO_LEASE && self.leases.contains_key(&id) {
            return Err(KvError::LeaseExists(id));
        }
        if let Some(name) = name {
            if let Some(&holder) = self.names.get(name) {
                return Err(KvError::LeaseNameTaken { name: name.to_string(), holder });
            }
        }
        let id = if id == NO_LEASE { self.fresh_id(revision) } else { id };
        if let Some(name) = name {
            self.names.insert(name.to_string(), id);
        }
        self.leases.insert(id, Lease { id, name: name.map(str::to_string), ttl, keys: LeaseKeys::new() });
        self.changed.insert(id);
        Ok(id)
    }

    /// A positive id no live lease has. Mixing the revision with a counter spreads ids over
    /// the whole positive range (so ids chosen by different clusters or epochs rarely meet)
    /// while staying a pure function of the replicated state.
    fn fresh_id(&mut self, revision: Revision) -> LeaseId {
        loop {
            self.grant_counter = self.grant_counter.wrapping_add(1);
            let candidate = (mix64(revision as u64 ^ mix64(self.grant_counter)) & i64::MAX as u64) as i64;
            if candidate != NO_LEASE && !self.leases.contains_key(&candidate) {
                return candidate;
            }
        }
    }

    /// Removes a lease and its name binding; the caller deletes the keys it returns.
    pub(super) fn remove(&mut self, id: LeaseId) -> Option<Lease> {
        let lease = self.leases.remove(&id)?;
        self.changed.insert(id);
        if let Some(name) = &lease.name {
            self.names.remove(name);
        }
        Some(lease)
    }

    /// Marks every lease as changed, so that the next flush writes them all (a whole state
    /// restored into an engine).
    pub(super) fn mark_all_changed(&mut self) {
        self.changed = self.leases.keys().copied().collect();
    }

    /// Adds to `batch` the records of the leases granted and the deletions of those removed
    /// since the last flush (a lease's keys are the key space's attachments, not here).
    pub(super) fn flush_into(&mut self, batch: &mut WriteBatch) {
        for id in std::mem::take(&mut self.changed) {
            match self.leases.get(&id) {
                Some(lease) => {
                    let record = LeaseRecord { name: lease.name.clone(), ttl: lease.ttl };
                    batch.put(lease_key(id), encode_framed(&record));
                }
                None => batch.delete(lease_key(id)),
            }
        }
    }

    /// Records that `key` is attached to `id` (no-op for [`NO_LEASE`]).
    pub(super) fn attach(&mut self, id: LeaseId, key: &[u8]) {
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.keys.insert(key);
        }
    }

    /// Records that `key` is no longer attached to `id` (no-op for [`NO_LEASE`]).
    pub(super) fn detach(&mut self, id: LeaseId, key: &[u8]) {
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.keys.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_grants_change_nothing() {
        let mut t = LeaseTable::default();
        assert_eq!(t.grant(0, None, 0, 1), Err(KvError::InvalidTtl(0)));
        assert_eq!(t.grant(-3, None, 10, 1), Err(KvError::InvalidLeaseId(-3)));
        assert!(matches!(t.grant(0, Some(""), 10, 1), Err(KvError::InvalidLeaseName(_))));
        assert!(matches!(t.grant(0, Some(&"x".repeat(257)), 10, 1), Err(KvError::InvalidLeaseName(_))));
        assert_eq!(t.grant_counter(), 0);
        assert_eq!(t.len(), 0);
        t.grant(5, Some("n"), 10, 1).unwrap();
        assert_eq!(t.grant(5, None, 10, 1), Err(KvError::LeaseExists(5)));
        assert_eq!(t.grant(0, Some("n"), 10, 1), Err(KvError::LeaseNameTaken { name: "n".into(), holder: 5 }));
        assert_eq!(t.grant_counter(), 0);
    }

    #[test]
    fn fresh_ids_are_positive_distinct_and_skip_taken_ones() {
        let mut t = LeaseTable::default();
        let mut probe = t.clone();
        let first = probe.fresh_id(7);
        // Take the id the table would choose first: it must move on to another one.
        t.grant(first, None, 10, 7).unwrap();
        let chosen = t.grant(0, None, 10, 7).unwrap();
        assert!(chosen > 0 && chosen != first);
        assert_eq!(t.grant_counter(), 2);
    }
}
