//! A state engine staged beside the one in use: a snapshot from a peer is installed into it
//! while the replica goes on serving from its old state, and it replaces that state in one
//! step ([`super::Storage::adopt_staged`]).
//!
//! On disk (the sled storage) a staged engine is a sled database in `staging/<name>/`.
//! Adopting it renames `state/` to `state.old/` and the staged directory to `state/`, then
//! syncs the data directory; at open ([`recover_state_dir`]) whatever a crash left in
//! between is settled: `state/` missing means the swap was cut after its first rename, and
//! `state.old/` goes back; `state.old/` and everything under `staging/` are then deleted.
//!
//! The staged engine is complete, checked and synced, with the slot it reflects recorded in
//! it, before it is adopted (the caller's part, [`crate::log::StagedSnapshot`]), so a
//! crash finds either the old state or the new one, each whole.

use crate::engine::{Engine, MemoryEngine, SledEngine};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::StorageError;

/// Where staged engines live in a data directory.
pub const STAGING_DIR: &str = "staging";
/// Where the replaced state waits, during a swap, to be deleted.
const OLD_STATE_DIR: &str = "state.old";

/// An empty state engine, not yet the replica's.
pub struct StagedEngine {
    engine: Arc<dyn Engine>,
    home: Home,
}

/// Where a staged engine lives, which says which storage can adopt it.
pub(super) enum Home {
    /// In memory ([`super::MemoryStorage`]).
    Memory(Arc<MemoryEngine>),
    /// In its own directory under `staging/` of a data directory ([`super::SledStorage`]).
    Dir(PathBuf),
}

impl std::fmt::Debug for StagedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.home {
            Home::Memory(_) => f.write_str("StagedEngine(memory)"),
            Home::Dir(dir) => write!(f, "StagedEngine({})", dir.display()),
        }
    }
}

impl StagedEngine {
    /// A staged engine in memory, for [`super::MemoryStorage`].
    pub fn in_memory() -> Self {
        let engine = Arc::new(MemoryEngine::new());
        StagedEngine { engine: engine.clone(), home: Home::Memory(engine) }
    }

    /// The engine, to install a state into.
    pub fn engine(&self) -> Arc<dyn Engine> {
        Arc::clone(&self.engine)
    }

    /// Gives up this engine: its directory, if it has one, is deleted once the last handle
    /// to the engine is gone (sled holds its files open until then).
    pub fn discard(self) {
        let StagedEngine { engine, home } = self;
        drop(engine);
        if let Home::Dir(dir) = home {
            remove_dir(&dir);
        }
    }

    pub(super) fn into_home(self) -> (Arc<dyn Engine>, Home) {
        (self.engine, self.home)
    }
}

/// Makes staged engines in a data directory, from any thread (a peer's snapshot is
/// installed by the task that receives it, not by the replica's thread).
#[derive(Debug, Clone)]
pub struct Stager {
    dir: PathBuf,
    cache_bytes: u64,
}

impl Stager {
    pub(super) fn new(data_dir: &Path, cache_bytes: u64) -> Self {
        Stager { dir: data_dir.join(STAGING_DIR), cache_bytes }
    }

    /// A new, empty engine in a directory of its own under `staging/`.
    pub fn stage(&self) -> Result<StagedEngine, StorageError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = self.dir.join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        remove_dir(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| StorageError::backend(format!("cannot create {}", dir.display()), e))?;
        // The state cache setting is the engine's; the staged one takes as much while it
        // exists, for the install's own writes.
        let engine = SledEngine::open(&dir, self.cache_bytes)
            .map_err(|e| StorageError::backend(format!("cannot open a staged state engine in {}", dir.display()), e))?;
        Ok(StagedEngine { engine: Arc::new(engine), home: Home::Dir(dir) })
    }
}

/// Makes the staged engine in `staged` the state directory of `data_dir` (`state_dir`):
/// renames the current one aside, the staged one into its place, syncs the data directory
/// and deletes the old one.
pub(super) fn swap_in(data_dir: &Path, state_dir: &Path, staged: &Path) -> Result<(), StorageError> {
    let old = data_dir.join(OLD_STATE_DIR);
    remove_dir(&old);
    let renamed = |from: &Path, to: &Path| {
        std::fs::rename(from, to)
            .map_err(|e| StorageError::backend(format!("cannot rename {} to {}", from.display(), to.display()), e))
    };
    renamed(state_dir, &old)?;
    renamed(staged, state_dir)?;
    sync_dir(data_dir)?;
    remove_dir(&old);
    Ok(())
}

/// Settles what an interrupted swap left in `data_dir` before the state engine is opened
/// (see the module docs), and empties `staging/`.
pub(super) fn recover_state_dir(data_dir: &Path, state_dir: &Path) -> Result<(), StorageError> {
    let old = data_dir.join(OLD_STATE_DIR);
    if !state_dir.exists() && old.is_dir() {
        std::fs::rename(&old, state_dir).map_err(|e| {
            StorageError::backend(format!("cannot move {} back to {}", old.display(), state_dir.display()), e)
        })?;
        sync_dir(data_dir)?;
        tracing::warn!(dir = %data_dir.display(), "a swap of the state for a peer's snapshot was cut short; the state before it is kept");
    }
    remove_dir(&old);
    remove_dir(&data_dir.join(STAGING_DIR));
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::backend(format!("cannot sync {}", dir.display()), e))
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(dir = %dir.display(), %error, "cannot delete a staged or replaced state"),
    }
}
