//! A peer's snapshot installed into a staged engine ([`crate::storage::StagedEngine`]) off
//! the replica's thread, then adopted by the replica in one step
//! ([`super::Replica::adopt_staged_snapshot`]).
//!
//! The install reads the stream once, checking it as it writes; only a stream that passed
//! every check is flushed through its slot, synced and handed to the replica. So the state
//! a replica adopts is whole and durable before it is its state, and the state it replaces
//! served reads until then.

use super::Slot;
use crate::state::{SnapshotError, StateMachine};
use crate::storage::{StagedEngine, Storage, StorageError};
use std::io::Read;

/// A snapshot installed, checked and synced in a staged engine, waiting to be adopted.
#[derive(Debug)]
pub struct StagedSnapshot {
    index: Slot,
    bytes: u64,
    machine: StateMachine,
    staged: StagedEngine,
}

impl StagedSnapshot {
    /// Installs the format 8 snapshot of the state through `index` read from `reader` into
    /// `staged`, then records `index` in it and syncs it. On any error the staged engine
    /// is given up.
    pub fn install(index: Slot, reader: impl Read, staged: StagedEngine) -> Result<Self, SnapshotError> {
        let mut counted = Counted { inner: reader, bytes: 0 };
        Self::bulk_load(&staged)?;
        let machine = match StateMachine::install_snapshot_stream(&mut counted, staged.engine()) {
            Ok(machine) => machine,
            Err(error) => {
                staged.discard();
                return Err(error);
            }
        };
        Self::seal(index, counted.bytes, machine, staged)
    }

    /// Negative control: the staged engine adopted although its install failed midway.
    /// What it then holds is made an empty state (the part written before the failure
    /// would not even be self-consistent), adopted as the state through `index`.
    #[cfg(feature = "negative-controls")]
    pub(super) fn install_even_if_cut(
        index: Slot,
        reader: impl Read,
        staged: StagedEngine,
    ) -> Result<Self, SnapshotError> {
        let mut counted = Counted { inner: reader, bytes: 0 };
        Self::bulk_load(&staged)?;
        let machine = match StateMachine::install_snapshot_stream(&mut counted, staged.engine()) {
            Ok(machine) => machine,
            Err(_) => staged
                .engine()
                .clear()
                .and_then(|()| StateMachine::on_engine(staged.engine()))
                .map_err(|e| SnapshotError::Corrupt(e.to_string()))?,
        };
        Self::seal(index, counted.bytes, machine, staged)
    }

    fn seal(index: Slot, bytes: u64, mut machine: StateMachine, staged: StagedEngine) -> Result<Self, SnapshotError> {
        let written = machine.flush_through(index).and_then(|()| Self::make_durable(&staged));
        if let Err(error) = written {
            drop(machine);
            staged.discard();
            return Err(SnapshotError::Corrupt(format!("cannot write the staged state: {error}")));
        }
        Ok(StagedSnapshot { index, bytes, machine, staged })
    }

    /// Lets the staged engine leave its writes unsynced until the install is done: nothing
    /// reads it after a crash unless it was adopted, and it is adopted only once synced
    /// ([`Self::make_durable`]). The value files' sync before each batch (a page durable
    /// before its pointer) is what this saves: one per batch of an install's pages, on a
    /// disk the members' logs share.
    fn bulk_load(staged: &StagedEngine) -> Result<(), SnapshotError> {
        staged
            .engine()
            .set_bulk_load(true)
            .map_err(|e| SnapshotError::Storage(format!("cannot start the install of a staged state: {e}")))
    }

    /// Syncs the staged engine and ends its bulk load; under the staged-state control,
    /// only writes it out.
    fn make_durable(staged: &StagedEngine) -> Result<(), crate::engine::EngineError> {
        #[cfg(feature = "sync-faults")]
        if crate::storage::sync_faults::staged_state_sync_skipped() {
            return staged.engine().write_out_unsynced();
        }
        staged.engine().sync()?;
        staged.engine().set_bulk_load(false)
    }

    /// Makes the staged state `storage`'s, durably ([`Storage::adopt_staged`]), and returns
    /// the state machine on it, the slot it reflects and the snapshot's size. The caller
    /// drops the log behind that slot only after this returned: the state comes first.
    pub fn adopt_into<S: Storage + ?Sized>(self, storage: &mut S) -> Result<(StateMachine, Slot, u64), StorageError> {
        let StagedSnapshot { index, bytes, machine, staged } = self;
        storage.adopt_staged(staged)?;
        Ok((machine, index, bytes))
    }

    /// The slot the snapshot's state reflects.
    pub fn index(&self) -> Slot {
        self.index
    }

    /// The snapshot's length in bytes, as read.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Gives it up (its engine's directory is deleted).
    pub fn discard(self) {
        let StagedSnapshot { machine, staged, .. } = self;
        drop(machine);
        staged.discard();
    }
}

/// Counts the bytes read through it (the snapshot's size, for the replica's accounting).
struct Counted<R> {
    inner: R,
    bytes: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
}
