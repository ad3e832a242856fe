//! A state machine built from data imported from another store (an etcd snapshot, see
//! [`crate::etcd_snapshot`]) rather than from applied commands.
//!
//! The parts are assembled into the snapshot format and decoded back, so an imported state
//! passes every check a restored snapshot does (keys in order, revisions consistent, every
//! key's lease present, history in order and within the window, auth store consistent)
//! and is, by construction, a state a snapshot can hold.

use super::graveyard::Graveyard;
use super::history::History;
use super::keyspace::Keyspace;
use super::lease_keys::LeaseKeys;
use super::lease_table::{Lease, LeaseTable};
use super::{digest, snapshot, Failure, SnapshotError, StateMachine};
use crate::auth::AuthStore;
use crate::engine::{Engine, EngineError, MemoryEngine};
use crate::membership::Membership;
use crate::types::{Event, KeyValue, LeaseId, Revision};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A lease as imported: its id and granted TTL (its keys are the keys naming it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedLease {
    /// The id (positive).
    pub id: LeaseId,
    /// The granted TTL, seconds (positive).
    pub ttl: i64,
    /// The lease's name, when it had one (leasekv's files carry them; etcd's do not).
    pub name: Option<String>,
}

/// Everything an imported state holds.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The store revision (at least 1, at least every change's).
    pub revision: Revision,
    /// The compaction point (0: nothing compacted).
    pub compacted: Revision,
    /// The live keys, in any order, each key once.
    pub keys: Vec<KeyValue>,
    /// Every change at or after `compacted`, in revision order, each with the value it
    /// replaced.
    pub history: Vec<Event>,
    /// The live leases.
    pub leases: Vec<ImportedLease>,
    /// Users, roles and whether auth is enabled.
    pub auth: AuthStore,
    /// Tells this import from others: seeds the running digest, so that two imports of
    /// different data do not claim the same applied history.
    pub origin: u64,
}

impl StateMachine {
    /// The state `imported` describes, checked as a restored snapshot is; the first state of
    /// a new cluster (no master tenure, no membership, no alarms).
    pub fn from_imported(imported: Imported) -> Result<StateMachine, SnapshotError> {
        let mut keys = imported.keys;
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        if let Some(pair) = keys.windows(2).find(|w| w[0].key == w[1].key) {
            return Err(SnapshotError::Corrupt(format!(
                "key {:?} appears twice",
                String::from_utf8_lossy(&pair[0].key)
            )));
        }
        let mut leases = BTreeMap::new();
        for ImportedLease { id, ttl, name } in imported.leases {
            // Key sets are not part of the snapshot: the decoder rebuilds them from the keys.
            if leases.insert(id, Lease { id, name, ttl, keys: LeaseKeys::new() }).is_some() {
                return Err(SnapshotError::Corrupt(format!("lease {id} appears twice")));
            }
        }
        // Laid out in an engine of their own and encoded as a snapshot, so that the state is
        // checked exactly as a restored snapshot is.
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let stored = |e: EngineError| SnapshotError::Corrupt(format!("cannot store the imported state: {e}"));
        let keys = Keyspace::load(Arc::clone(&engine), Failure::default(), keys, Graveyard::default(), Revision::MAX)
            .map_err(stored)?;
        let leases = LeaseTable::from_parts(leases, 0);
        let history =
            History::load(engine, Failure::default(), imported.history, imported.compacted, imported.revision)
                .map_err(stored)?;
        let bytes = snapshot::encode(&snapshot::Parts {
            revision: imported.revision,
            tenure: (0, 0),
            digest: digest::mix64(digest::EMPTY ^ imported.origin),
            keys: &keys,
            leases: &leases,
            history: &history,
            alarms: &BTreeSet::new(),
            membership: &Membership::default(),
            auth: &imported.auth,
        })
        .map_err(|e| SnapshotError::Corrupt(format!("cannot encode the imported state: {e}")))?;
        StateMachine::from_snapshot_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::RangeRequest;
    use crate::types::{EventKind, KeyRange, NO_LEASE};

    fn kv(key: &str, value: &str, create: Revision, at: Revision, version: i64, lease: LeaseId) -> KeyValue {
        KeyValue { key: key.into(), value: value.into(), create_revision: create, mod_revision: at, version, lease }
    }

    fn sample() -> Imported {
        let a1 = kv("a", "1", 2, 2, 1, NO_LEASE);
        let a2 = kv("a", "2", 2, 4, 2, NO_LEASE);
        let b = kv("b", "x", 3, 3, 1, 7);
        Imported {
            revision: 5,
            compacted: 0,
            keys: vec![b.clone(), a2.clone()],
            history: vec![
                Event { kind: EventKind::Put, kv: a1.clone(), prev_kv: None },
                Event { kind: EventKind::Put, kv: b, prev_kv: None },
                Event { kind: EventKind::Put, kv: a2, prev_kv: Some(a1) },
            ],
            leases: vec![ImportedLease { id: 7, ttl: 30, name: None }],
            auth: AuthStore::default(),
            origin: 42,
        }
    }

    #[test]
    fn an_imported_state_serves_reads_now_and_in_the_past() {
        let machine = StateMachine::from_imported(sample()).unwrap();
        assert_eq!((machine.revision(), machine.compacted_revision(), machine.key_count()), (5, 0, 2));
        assert_eq!(machine.lease(7).map(|l| (l.ttl, l.keys.len())), Some((30, 1)));
        let all = RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() };
        let then = machine.range_at(&all, 2).unwrap();
        assert_eq!(then.kvs, vec![kv("a", "1", 2, 2, 1, NO_LEASE)]);
        let again = StateMachine::from_snapshot_bytes(&machine.to_snapshot_bytes()).unwrap();
        assert_eq!(again.digest(), machine.digest());
    }

    #[test]
    fn inconsistent_imports_are_refused() {
        let mut orphan = sample();
        orphan.leases.clear();
        assert!(StateMachine::from_imported(orphan).is_err(), "a key whose lease is missing");
        let mut twice = sample();
        twice.keys.push(kv("a", "3", 2, 4, 2, NO_LEASE));
        assert!(StateMachine::from_imported(twice).is_err(), "a key twice");
        let mut future = sample();
        future.revision = 3;
        assert!(StateMachine::from_imported(future).is_err(), "a key above the store revision");
    }
}
