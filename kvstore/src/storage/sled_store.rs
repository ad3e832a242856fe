//! sled storage.
use super::{Recovered, SnapshotRecord, Storage, StorageError};
use crate::log::{AcceptedSlot, LogBallot, Slot};
use leasekv_lease::{epoch::EpochError, EpochStore, RestartEpoch};
use std::path::Path;

/// Production storage on sled.
pub struct SledStorage {}

impl SledStorage {
    /// Opens (or creates) the store in `dir`.
    pub fn open(_dir: &Path) -> Result<Self, StorageError> {
        unimplemented!()
    }
    /// The restart-epoch store that shares this database.
    pub fn epoch_store(&self) -> SledEpochStore {
        unimplemented!()
    }
}

impl Storage for SledStorage {
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

/// PaxosLease's restart epoch, durable in the node's sled database.
pub struct SledEpochStore {}

impl EpochStore for SledEpochStore {
    fn begin_epoch(&mut self) -> Result<RestartEpoch, EpochError> {
        unimplemented!()
    }
}
