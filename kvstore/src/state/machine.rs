//! The state machine proper.
use crate::command::{Applied, Command, RangeRequest, RangeResponse};
use crate::error::KvError;
use crate::types::{KeyValue, LeaseId, Revision};
use std::collections::BTreeSet;

/// A live TTL lease as the replicated state knows it (deadlines are not replicated: only
/// the master tracks them, see [`crate::lessor`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    /// The id.
    pub id: LeaseId,
    /// The optional unique name.
    pub name: Option<String>,
    /// Granted TTL, seconds.
    pub ttl: i64,
    /// The keys attached.
    pub keys: BTreeSet<Vec<u8>>,
}

/// A snapshot could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("state machine snapshot is corrupt: {0}")]
pub struct SnapshotError(pub String);

/// The key space and lease table.
#[derive(Debug, Clone, Default)]
pub struct StateMachine {}

impl StateMachine {
    /// An empty store at revision 1 (etcd starts at 1).
    pub fn new() -> Self {
        unimplemented!()
    }
    /// Applies one command. Deterministic.
    pub fn apply(&mut self, _command: &Command) -> Applied {
        unimplemented!()
    }
    /// Reads at the current revision.
    pub fn range(&self, _request: &RangeRequest) -> Result<RangeResponse, KvError> {
        unimplemented!()
    }
    /// The current revision.
    pub fn revision(&self) -> Revision {
        unimplemented!()
    }
    /// One key.
    pub fn get(&self, _key: &[u8]) -> Option<&KeyValue> {
        unimplemented!()
    }
    /// One lease.
    pub fn lease(&self, _id: LeaseId) -> Option<&Lease> {
        unimplemented!()
    }
    /// Resolves a lease name.
    pub fn lease_id_by_name(&self, _name: &str) -> Option<LeaseId> {
        unimplemented!()
    }
    /// All live leases in id order.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> + '_ {
        std::iter::empty()
    }
    /// Number of live leases.
    pub fn lease_count(&self) -> usize {
        unimplemented!()
    }
    /// Number of keys.
    pub fn key_count(&self) -> usize {
        unimplemented!()
    }
    /// A running digest of everything applied so far.
    pub fn digest(&self) -> u64 {
        unimplemented!()
    }
    /// Serialises the whole state.
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        unimplemented!()
    }
    /// Restores a state serialised by [`StateMachine::to_snapshot_bytes`].
    pub fn from_snapshot_bytes(_bytes: &[u8]) -> Result<Self, SnapshotError> {
        unimplemented!()
    }
}
