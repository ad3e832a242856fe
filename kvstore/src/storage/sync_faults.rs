//! Test-only faults on the storage's sync (feature `sync-faults`, turned on by kvserver's
//! `fault-injection` for the chaos harness): every sync first waits a set delay (a slow or
//! stuck disk), or fails (a failing `fdatasync`); and the `skip-fdatasync` negative control,
//! which leaves out the storage's own `fdatasync`. Off in every real build.

use super::StorageError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static DELAY_MICROS: AtomicU64 = AtomicU64::new(0);
static FAIL: AtomicBool = AtomicBool::new(false);
static SKIP_FDATASYNC: AtomicBool = AtomicBool::new(false);
static SKIP_SNAPSHOT_FILE_SYNC: AtomicBool = AtomicBool::new(false);
static SKIP_STAGED_STATE_SYNC: AtomicBool = AtomicBool::new(false);

/// From now on, a staged state (a peer's snapshot installed beside the state in use) is
/// written out to its files but adopted without their `fdatasync`, and state engines opened
/// from now on have no background fsync either: the negative control of the lazy disk's
/// staged-state test, where the state's bytes reach the file system and only a power loss
/// takes them away, leaving a durable `state.current` naming a state that is gone. Call
/// before opening the storage.
pub fn skip_staged_state_sync() {
    SKIP_STAGED_STATE_SYNC.store(true, Ordering::SeqCst);
}

/// Whether the staged-state control is on.
pub(crate) fn staged_state_sync_skipped() -> bool {
    SKIP_STAGED_STATE_SYNC.load(Ordering::SeqCst)
}

/// From now on, a snapshot file is moved into the storage and named by its record without
/// being synced first (the negative control of the lazy disk's snapshot-file test: a power
/// loss then leaves a durable record naming a file whose bytes are gone).
pub fn skip_snapshot_file_sync() {
    SKIP_SNAPSHOT_FILE_SYNC.store(true, Ordering::SeqCst);
}

/// Whether the snapshot-file control is on.
pub(super) fn snapshot_file_sync_skipped() -> bool {
    SKIP_SNAPSHOT_FILE_SYNC.load(Ordering::SeqCst)
}

/// From now on, a sync is sled's flush alone, without the `fdatasync` that makes it durable
/// (the `skip-fdatasync` negative control; see the durability notes in `sled_store`).
/// Call before opening the storage: it also turns sled's background fsync off.
pub fn skip_fdatasync() {
    SKIP_FDATASYNC.store(true, Ordering::SeqCst);
}

/// Whether the `skip-fdatasync` control is on.
pub(super) fn fdatasync_skipped() -> bool {
    SKIP_FDATASYNC.load(Ordering::SeqCst)
}

/// From now on, every sync waits `delay` first, and fails if `fail`.
pub fn set(delay: Duration, fail: bool) {
    DELAY_MICROS.store(delay.as_micros() as u64, Ordering::SeqCst);
    FAIL.store(fail, Ordering::SeqCst);
}

/// Called at the start of every sync.
pub(super) fn before_sync() -> Result<(), StorageError> {
    let delay = DELAY_MICROS.load(Ordering::SeqCst);
    if delay > 0 {
        // The sync runs on its own thread (or on the node loop only while syncs are fast).
        std::thread::sleep(Duration::from_micros(delay));
    }
    if FAIL.load(Ordering::SeqCst) {
        return Err(StorageError::Io("fdatasync failed (injected by the sync-faults failpoint)".into()));
    }
    Ok(())
}
