//! Durable state of a replica, behind one trait with two implementations:
//! - [`SledStorage`]: production, on disk;
//! - [`MemoryStorage`]: for the simulator, with crash semantics (whatever was written but
//!   not synced is gone after [`MemoryStorage::crash`]).
//!
//! Writes are buffered until [`Storage::sync`]; the replica core releases every message
//! whose promise depends on durable state (a Promise, an Accepted) only after the sync that
//! covers it, so that one sync makes a whole batch of accepts durable.

// `pub(crate)` so that the golden-file tests (`crate::golden`) reach their encoders and decoders.
pub(crate) mod codec;
mod memory;
pub(crate) mod pieces;
pub(crate) mod segments;
mod sled_store;
mod staging;
#[cfg(feature = "sync-faults")]
pub mod sync_faults;
#[cfg(test)]
mod tests;
mod upgrade;

pub use memory::MemoryStorage;
pub use sled_store::{
    SledEpochStore, SledStorage, SledSyncHandle, StorageOptions, DEFAULT_STATE_CACHE_BYTES, STATE_DIR,
};
pub use staging::{StagedEngine, Stager};

use crate::log::{AcceptedSlot, LogBallot, Slot};
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// A snapshot of the state machine as of a log slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRecord {
    /// Everything up to and including this slot is in `data`.
    pub index: Slot,
    /// A state machine snapshot (any format [`crate::StateMachine::check_snapshot_bytes`]
    /// reads).
    pub data: SnapshotData,
}

/// Where a snapshot's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotData {
    /// In memory (the simulator, `kvserver restore`, small states).
    Bytes(Vec<u8>),
    /// In a file, so that a state of any size moves through a node in bounded memory. Given
    /// to [`Storage::save_snapshot`], the file becomes the storage's: it is moved into the
    /// storage's directory (it must be on the same file system, as
    /// [`SledStorage::incoming_dir`] is) and deleted once the snapshot is replaced or
    /// discarded.
    File(std::path::PathBuf),
}

impl From<Vec<u8>> for SnapshotData {
    fn from(bytes: Vec<u8>) -> Self {
        SnapshotData::Bytes(bytes)
    }
}

impl SnapshotData {
    /// The snapshot's bytes, read whole (from memory, or from its file).
    pub fn read_all(&self) -> Result<std::borrow::Cow<'_, [u8]>, StorageError> {
        match self {
            SnapshotData::Bytes(bytes) => Ok(std::borrow::Cow::Borrowed(bytes)),
            SnapshotData::File(path) => std::fs::read(path)
                .map(std::borrow::Cow::Owned)
                .map_err(|e| StorageError::backend(format!("cannot read the snapshot file {}", path.display()), e)),
        }
    }

    /// Its size in bytes.
    pub fn len(&self) -> Result<u64, StorageError> {
        match self {
            SnapshotData::Bytes(bytes) => Ok(bytes.len() as u64),
            SnapshotData::File(path) => std::fs::metadata(path)
                .map(|m| m.len())
                .map_err(|e| StorageError::backend(format!("cannot read the snapshot file {}", path.display()), e)),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> Result<bool, StorageError> {
        self.len().map(|len| len == 0)
    }
}

/// What a replica finds on disk when it starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The highest log ballot promised.
    pub promised: crate::log::LogBallot,
    /// Accepted (and possibly chosen) slots above the snapshot.
    pub slots: BTreeMap<Slot, AcceptedSlot>,
    /// Highest slot known chosen with every slot below it (0 if none).
    pub commit: Slot,
    /// The latest snapshot, if any.
    pub snapshot: Option<SnapshotRecord>,
}

/// A storage operation failed (disk full, corrupt record, ...). The replica stops: it must
/// not acknowledge anything it could not persist.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The underlying store failed, for a reason only this message tells (no error value
    /// behind it, e.g. the driver's sync thread is gone).
    #[error("storage I/O failed: {0}")]
    Io(String),
    /// The underlying store (sled, the file system, the record encoder) failed with `source`.
    #[error("storage I/O failed: {context}: {source}")]
    Backend {
        /// What was being done, and where.
        context: String,
        /// The store's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A stored record could not be decoded.
    #[error("stored record {what} is corrupt: {detail}")]
    Corrupt {
        /// Which record.
        what: String,
        /// The decoder's message.
        detail: String,
    },
}

impl StorageError {
    /// A failure of the underlying store while doing `context`, keeping its error as the source.
    pub fn backend(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        StorageError::Backend { context: context.into(), source: Box::new(source) }
    }
}

/// The durable state of one replica.
pub trait Storage: Send {
    /// Reads everything back (at start).
    fn recover(&mut self) -> Result<Recovered, StorageError>;
    /// Records a promise (buffered until [`Storage::sync`]).
    fn save_promise(&mut self, ballot: LogBallot) -> Result<(), StorageError>;
    /// Records an accepted or chosen slot (buffered).
    fn save_slot(&mut self, slot: Slot, accepted: &AcceptedSlot) -> Result<(), StorageError>;
    /// Records the commit index (buffered).
    fn save_commit(&mut self, commit: Slot) -> Result<(), StorageError>;
    /// Replaces the snapshot (buffered; the old one stays valid until the new one is synced).
    fn save_snapshot(&mut self, snapshot: &SnapshotRecord) -> Result<(), StorageError>;
    /// Deletes the slots `<= slot` (they are covered by a snapshot).
    fn remove_slots_through(&mut self, slot: Slot) -> Result<(), StorageError>;
    /// Makes every write so far durable.
    fn sync(&mut self) -> Result<(), StorageError>;

    /// Drops the stored snapshot (buffered). The replica calls it once the state engine is
    /// durable through a slot at or past the snapshot's, which makes the snapshot useless.
    fn discard_snapshot(&mut self) -> Result<(), StorageError>;

    /// Where the newest snapshot saved is, when it was given as a file: the storage may
    /// have moved it ([`SnapshotData::File`]).
    fn snapshot_file(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// The engine the state machine lives in, beside this log: opened with the log, shared
    /// by the replica and the readers of its state.
    fn state_engine(&self) -> Arc<dyn crate::engine::Engine>;
    /// A new, empty engine beside the state engine, to install a peer's snapshot into
    /// ([`crate::log::StagedSnapshot`]).
    fn stage(&self) -> Result<StagedEngine, StorageError>;
    /// Makes `staged` the state engine, durably, in place of the current one (which stays
    /// usable through the handles already taken, until they are dropped). The caller has
    /// made `staged` complete and durable first: a crash after this call finds it, and one
    /// before finds the engine it replaces. A staged engine of another storage is refused.
    fn adopt_staged(&mut self, staged: StagedEngine) -> Result<(), StorageError>;
    /// Bytes the store takes on disk, if it is on disk (etcd's Status reports its database
    /// size; operators watch it grow).
    fn size_on_disk(&self) -> Option<u64> {
        None
    }
}

/// The invariants both implementations give [`Storage::recover`]'s answer, whatever order
/// the writes reached the disk in:
/// - slots at or below the snapshot are dropped: the snapshot covers them, and a crash
///   between the snapshot's sync and the sync of `remove_slots_through` may leave them;
/// - `commit` is at least the snapshot's index: a snapshot only ever holds chosen slots, so
///   everything through its index is known chosen even if the commit record is older.
fn normalize(mut recovered: Recovered) -> Recovered {
    if let Some(snapshot) = &recovered.snapshot {
        recovered.slots = recovered.slots.split_off(&snapshot.index.saturating_add(1));
        if snapshot.index == Slot::MAX {
            recovered.slots.clear();
        }
        recovered.commit = recovered.commit.max(snapshot.index);
    }
    recovered
}
