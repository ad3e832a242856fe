//! In-memory storage with crash semantics, for the simulator.
use super::{Recovered, SnapshotRecord, Storage, StorageError};
use crate::log::{AcceptedSlot, LogBallot, Slot};

/// Storage in memory: a durable image plus the writes not yet synced.
#[derive(Debug, Clone, Default)]
pub struct MemoryStorage {}

impl MemoryStorage {
    /// Empty storage (a blank disk).
    pub fn new() -> Self {
        unimplemented!()
    }
    /// Simulates a crash: every write since the last sync is lost.
    pub fn crash(&mut self) {
        unimplemented!()
    }
    /// Number of syncs so far.
    pub fn sync_count(&self) -> u64 {
        unimplemented!()
    }
}

impl Storage for MemoryStorage {
    fn recover(&mut self) -> Result<Recovered, StorageError> {
        unimplemented!()
    }
    fn save_promise(&mut self, _ballot: LogBallot) -> Result<(), StorageError> {
        unimplemented!()
    }
    fn save_slot(&mut self, _slot: Slot, _accepted: &AcceptedSlot) -> Result<(), StorageError> {
        unimplemented!()
    }
    fn save_commit(&mut self, _commit: Slot) -> Result<(), StorageError> {
        unimplemented!()
    }
    fn save_snapshot(&mut self, _snapshot: &SnapshotRecord) -> Result<(), StorageError> {
        unimplemented!()
    }
    fn remove_slots_through(&mut self, _slot: Slot) -> Result<(), StorageError> {
        unimplemented!()
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        unimplemented!()
    }
}
