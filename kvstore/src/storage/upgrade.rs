//! The upgrade of a data directory written before the segment log, whose promise, commit
//! index and slots are in sled (trees `leasekv/meta` and `leasekv/slots`), to one whose log
//! is in `log/` ([`super::segments`]).
//!
//! Crash-safe at every step, because the rename of a directory is atomic:
//! 1. a `log.tmp/` left by an upgrade that a crash interrupted is deleted;
//! 2. without `log/`, the old records are read and written into a new log in `log.tmp/`,
//!    whose files and directory are fsynced; `log.tmp/` is renamed to `log/` and the data
//!    directory fsynced: from that instant `log/` is the log, and the sled records are dead;
//! 3. the old records still in sled (all of them right after step 2, or after a crash
//!    between step 2 and this one) are removed and sled synced.
//!
//! A new data directory goes through the same steps with nothing to move.
use super::codec::{decode, slot_from_key};
use super::pieces::{self, PieceError};
use super::segments::{Replay, SegmentLog};
use super::StorageError;
use crate::log::{AcceptedSlot, LogBallot};
use std::collections::BTreeMap;
use std::path::Path;

/// The log's directory in the data directory.
pub(super) const LOG_DIR: &str = "log";
/// Where the upgrade builds it.
const LOG_TMP_DIR: &str = "log.tmp";
/// The sled tree the slots were in.
pub(super) const SLOTS_TREE: &str = "leasekv/slots";
/// The keys of the promise and the commit index in the meta tree.
pub(super) const PROMISED_KEY: &[u8] = b"promised";
pub(super) const COMMIT_KEY: &[u8] = b"commit";
/// Length of a slot's key in the old slots tree (a big-endian `u64`).
const SLOT_KEY_LEN: usize = 8;

fn io_err(what: String, e: std::io::Error) -> StorageError {
    StorageError::backend(what, e)
}

/// Opens the log of the data directory `dir`, upgrading it first if it has none (see the
/// module docs). `sync_sled` makes sled's writes durable.
pub(super) fn open_log(
    dir: &Path,
    db: &sled::Db,
    meta: &sled::Tree,
    limit: u64,
    sync_sled: impl Fn() -> Result<(), StorageError>,
) -> Result<SegmentLog, StorageError> {
    let log_dir = dir.join(LOG_DIR);
    let tmp = dir.join(LOG_TMP_DIR);
    if tmp.exists() {
        tracing::warn!(dir = %tmp.display(), "deleting an unfinished upgrade of the log; redoing it");
        std::fs::remove_dir_all(&tmp).map_err(|e| io_err(format!("cannot delete {}", tmp.display()), e))?;
    }
    if !log_dir.exists() {
        let old = read_old(db, meta)?;
        let moved = old.slots.len();
        {
            let log = SegmentLog::open(&tmp, limit)?;
            if old.promised != LogBallot::ZERO {
                log.save_promise(old.promised)?;
            }
            if old.commit != 0 {
                log.save_commit(old.commit)?;
            }
            for (slot, accepted) in &old.slots {
                log.save_slot(*slot, accepted)?;
            }
            // fdatasyncs the segments and fsyncs `log.tmp/` (its entries were created).
            log.sync(|| Ok(()))?;
        }
        std::fs::rename(&tmp, &log_dir)
            .map_err(|e| io_err(format!("cannot rename {} to {}", tmp.display(), log_dir.display()), e))?;
        super::segments::sync_dir(dir)?;
        if moved > 0 || old.promised != LogBallot::ZERO {
            tracing::info!(dir = %dir.display(), slots = moved, commit = old.commit,
                "moved the log from sled to segment files in log/");
        }
    }
    remove_old(db, meta, sync_sled)?;
    SegmentLog::open(&log_dir, limit)
}

fn has_slots_tree(db: &sled::Db) -> bool {
    db.tree_names().iter().any(|name| name.as_ref() == SLOTS_TREE.as_bytes())
}

fn sled_err(dir: &str, e: sled::Error) -> StorageError {
    StorageError::backend(format!("reading the old log records in sled ({dir})"), e)
}

/// The promise, commit index and slots as the release before the segment log stored them.
fn read_old(db: &sled::Db, meta: &sled::Tree) -> Result<Replay, StorageError> {
    let mut old = Replay::default();
    if let Some(bytes) = meta.get(PROMISED_KEY).map_err(|e| sled_err("promised ballot", e))? {
        old.promised = decode("promised ballot", &bytes)?;
    }
    if let Some(bytes) = meta.get(COMMIT_KEY).map_err(|e| sled_err("commit index", e))? {
        old.commit = decode("commit index", &bytes)?;
    }
    if !has_slots_tree(db) {
        return Ok(old);
    }
    let slots = db.open_tree(SLOTS_TREE).map_err(|e| sled_err("slots", e))?;
    let mut found = BTreeMap::new();
    for item in slots.iter() {
        let (key, value) = item.map_err(|e| sled_err("slots", e))?;
        if pieces::is_piece_key(&key, SLOT_KEY_LEN) {
            continue;
        }
        let slot = slot_from_key(&key)?;
        let what = format!("slot {slot}");
        let value = pieces::assemble(&slots, &key, value).map_err(|e| match e {
            PieceError::Sled(e) => sled_err("slots", e),
            PieceError::Incomplete(detail) => StorageError::Corrupt { what: what.clone(), detail },
        })?;
        let accepted: AcceptedSlot = decode(&what, &value)?;
        found.insert(slot, accepted);
    }
    old.slots = found;
    Ok(old)
}

/// Removes the old records from sled, and syncs if there were any.
fn remove_old(
    db: &sled::Db,
    meta: &sled::Tree,
    sync_sled: impl Fn() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let mut removed = false;
    if has_slots_tree(db) {
        removed |= db.drop_tree(SLOTS_TREE).map_err(|e| sled_err("dropping the slots tree", e))?;
    }
    for key in [PROMISED_KEY, COMMIT_KEY] {
        removed |= meta.remove(key).map_err(|e| sled_err("removing an old record", e))?.is_some();
    }
    if removed {
        sync_sled()?;
    }
    Ok(())
}
