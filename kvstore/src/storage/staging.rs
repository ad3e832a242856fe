//! A state engine staged beside the one in use: a snapshot from a peer is installed into it
//! while the replica goes on serving from its old state, and it replaces that state in one
//! step ([`super::Storage::adopt_staged`]).
//!
//! On disk (the sled storage) every state engine lives in a directory that never moves,
//! because sled keeps the path it was opened at: `state/` (the first, and every data dir
//! written before staged installs) or `state-<nonce>/`. The file `state.current` names the
//! one in use; without it, it is `state/`. A staged engine is made in a new `state-<nonce>/`
//! and adopted by replacing `state.current` (written to a temporary file, synced, renamed
//! over, the data dir synced): one atomic, durable step. The engine it replaced is deleted
//! off the caller's thread once nothing reads it any more. At open ([`current_state_dir`])
//! every state directory but the current one goes: a staged engine never adopted, or a
//! replaced one whose deletion a stop cut short.
//!
//! The staged engine is complete, checked and synced, with the slot it reflects recorded in
//! it, before it is adopted (the caller's part, [`crate::log::StagedSnapshot`]); its
//! directory and sled's `conf` in it are synced by the adoption, so a crash finds either the
//! old state or the new one, each whole. One engine is staged at a time.

use crate::engine::{DiskStateEngine, Engine, MemoryStateEngine, ValueLogBreakage};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::StorageError;

/// The file naming the state directory in use.
const CURRENT: &str = "state.current";
/// The directory in use when [`CURRENT`] is absent.
const FIRST_STATE_DIR: &str = super::STATE_DIR;
/// How a staged state directory's name starts.
const STAGED_PREFIX: &str = "state-";
/// How long a replaced engine is waited for (its last reader to finish) before its
/// directory is deleted anyway.
const RETIRE_WAIT: Duration = Duration::from_secs(600);

/// An empty state engine, not yet the replica's. Dropped without being adopted, it is
/// given up: its directory is deleted, off the dropping thread.
pub struct StagedEngine {
    engine: Option<Arc<dyn Engine>>,
    home: Option<Home>,
}

/// Where a staged engine lives, which says which storage can adopt it.
pub(super) enum Home {
    /// In memory ([`super::MemoryStorage`]).
    Memory(Arc<MemoryStateEngine>),
    /// In its own directory of a data directory ([`super::SledStorage`]), with the flag
    /// that keeps a second one from being staged meanwhile.
    Dir { dir: PathBuf, staging: Arc<AtomicBool> },
}

impl std::fmt::Debug for StagedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.home {
            Some(Home::Memory(_)) => f.write_str("StagedEngine(memory)"),
            Some(Home::Dir { dir, .. }) => write!(f, "StagedEngine({})", dir.display()),
            None => f.write_str("StagedEngine(adopted)"),
        }
    }
}

impl StagedEngine {
    /// A staged engine in memory, for [`super::MemoryStorage`], running as `breakage`.
    pub fn in_memory(breakage: ValueLogBreakage) -> Self {
        let engine = Arc::new(MemoryStateEngine::in_memory(crate::state::small_value_log_config()));
        engine.break_as(breakage);
        StagedEngine { engine: Some(engine.clone()), home: Some(Home::Memory(engine)) }
    }

    /// The engine, to install a state into.
    pub fn engine(&self) -> Arc<dyn Engine> {
        match &self.engine {
            Some(engine) => Arc::clone(engine),
            // Only `into_home` takes it, consuming the staged engine.
            None => unreachable!("a staged engine is used after its adoption"),
        }
    }

    /// Gives it up now (what dropping it does).
    pub fn discard(self) {
        drop(self);
    }

    /// The engine and its home, for the adopting storage; nothing is deleted.
    pub(super) fn into_home(mut self) -> (Arc<dyn Engine>, Home) {
        match (self.engine.take(), self.home.take()) {
            (Some(engine), Some(home)) => (engine, home),
            _ => unreachable!("a staged engine is adopted twice"),
        }
    }
}

impl Drop for StagedEngine {
    fn drop(&mut self) {
        if let (Some(engine), Some(Home::Dir { dir, staging })) = (self.engine.take(), self.home.take()) {
            retire(engine, dir, Some(staging));
        }
    }
}

/// Makes staged engines in a data directory, from any thread (a peer's snapshot is
/// installed by the task that receives it, not by the replica's thread).
#[derive(Debug, Clone)]
pub struct Stager {
    data_dir: PathBuf,
    cache_bytes: u64,
    flush_every: std::time::Duration,
    /// Set while an engine is staged and not yet adopted or given up.
    staging: Arc<AtomicBool>,
}

impl Stager {
    pub(super) fn new(data_dir: &Path, cache_bytes: u64, flush_every: std::time::Duration) -> Self {
        Stager { data_dir: data_dir.to_path_buf(), cache_bytes, flush_every, staging: Arc::new(AtomicBool::new(false)) }
    }

    /// A new, empty engine in a state directory of its own. Refused while another is
    /// staged: each holds a whole state on disk and a cache in memory.
    pub fn stage(&self) -> Result<StagedEngine, StorageError> {
        if self.staging.swap(true, Ordering::SeqCst) {
            return Err(StorageError::Io("another snapshot is being installed; one at a time".into()));
        }
        let staged = self.open_staged();
        if staged.is_err() {
            self.staging.store(false, Ordering::SeqCst);
        }
        staged
    }

    /// Whether the data dir's file system has room to install a snapshot of
    /// `snapshot_bytes`: the staged engine is written beside the one in use, and holds at
    /// least the snapshot's bytes. Refused with what is needed and what is free, so that a
    /// member on a full disk says why it cannot catch up instead of failing deep inside the
    /// engine, and asks again once there is room.
    pub fn check_room(&self, snapshot_bytes: u64) -> Result<(), StorageError> {
        let free = match rustix::fs::statvfs(&self.data_dir) {
            Ok(stat) => stat.f_bavail.saturating_mul(stat.f_frsize),
            // Unknown: the install finds out.
            Err(_) => return Ok(()),
        };
        if free >= snapshot_bytes {
            return Ok(());
        }
        Err(StorageError::Io(format!(
            "no room for the snapshot: it is {} MB and the staged state it is installed into needs at least as much free on {}, where {} MB are free",
            snapshot_bytes.div_ceil(1_000_000),
            self.data_dir.display(),
            free / 1_000_000
        )))
    }

    fn open_staged(&self) -> Result<StagedEngine, StorageError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = self.data_dir.join(format!("{STAGED_PREFIX}{nonce:016x}"));
        std::fs::create_dir(&dir).map_err(|e| StorageError::backend(format!("cannot create {}", dir.display()), e))?;
        // The state cache setting is the engine's; the staged one takes as much while it
        // exists, for the install's own writes.
        let config = crate::state::value_log_config();
        let engine = DiskStateEngine::open_in(&dir, self.cache_bytes, self.flush_every, config).map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            StorageError::backend(format!("cannot open a staged state engine in {}", dir.display()), e)
        })?;
        Ok(StagedEngine {
            engine: Some(Arc::new(engine)),
            home: Some(Home::Dir { dir, staging: Arc::clone(&self.staging) }),
        })
    }
}

/// The state directory in use in `data_dir`, once every other state directory there is
/// deleted (see the module docs).
pub(super) fn current_state_dir(data_dir: &Path) -> Result<PathBuf, StorageError> {
    let pointer = data_dir.join(CURRENT);
    let name = match std::fs::read_to_string(&pointer) {
        Ok(name) => {
            let name = name.trim().to_string();
            if !name.starts_with(STAGED_PREFIX) || name.contains('/') || !data_dir.join(&name).is_dir() {
                return Err(StorageError::Corrupt {
                    what: pointer.display().to_string(),
                    detail: format!("names {name:?}, which is not a state directory of {}", data_dir.display()),
                });
            }
            name
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => FIRST_STATE_DIR.to_string(),
        Err(e) => return Err(StorageError::backend(format!("cannot read {}", pointer.display()), e)),
    };
    if let Ok(entries) = std::fs::read_dir(data_dir) {
        for entry in entries.flatten() {
            let other = entry.file_name().to_string_lossy().into_owned();
            let stale_state = other == FIRST_STATE_DIR || other.starts_with(STAGED_PREFIX);
            if (stale_state || other == format!("{CURRENT}.tmp")) && other != name {
                remove(&entry.path());
            }
        }
    }
    Ok(data_dir.join(name))
}

/// Makes the staged engine in `staged` the state directory of `data_dir`, durably: its
/// directory and sled's `conf` synced, then `state.current` replaced. The caller retires
/// the engine it replaces ([`retire`]).
pub(super) fn point_to(data_dir: &Path, staged: &Path) -> Result<(), StorageError> {
    let name = staged
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with(STAGED_PREFIX) && staged.parent() == Some(data_dir))
        .ok_or_else(|| {
            StorageError::Io(format!("{} is not a staged state of {}", staged.display(), data_dir.display()))
        })?;
    for path in [staged.join("conf"), staged.to_path_buf()] {
        sync_path(&path)?;
    }
    let tmp = data_dir.join(format!("{CURRENT}.tmp"));
    let io = |what: String, e: std::io::Error| StorageError::backend(what, e);
    std::fs::write(&tmp, name.as_bytes()).map_err(|e| io(format!("cannot write {}", tmp.display()), e))?;
    sync_path(&tmp)?;
    let pointer = data_dir.join(CURRENT);
    std::fs::rename(&tmp, &pointer)
        .map_err(|e| io(format!("cannot rename {} to {}", tmp.display(), pointer.display()), e))?;
    sync_path(data_dir)
}

/// Deletes the state engine `engine` in `dir` on a thread of its own, once nothing else
/// holds the engine (a view being read, a checkpoint's sync) or [`RETIRE_WAIT`] passed,
/// then clears `staging` if given.
pub(super) fn retire(engine: Arc<dyn Engine>, dir: PathBuf, staging: Option<Arc<AtomicBool>>) {
    let spawned = std::thread::Builder::new().name("state-retire".into()).spawn(move || {
        let started = std::time::Instant::now();
        while Arc::strong_count(&engine) > 1 && started.elapsed() < RETIRE_WAIT {
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(engine);
        remove(&dir);
        if let Some(staging) = staging {
            staging.store(false, Ordering::SeqCst);
        }
    });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start a thread to delete a replaced state; it goes at the next start");
    }
}

fn sync_path(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::backend(format!("cannot sync {}", path.display()), e))
}

fn remove(path: &Path) {
    let removed = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match removed {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => tracing::warn!(path = %path.display(), %error, "cannot delete a staged or replaced state"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_the_disk_cannot_hold_is_refused_with_what_it_needs() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let stager = Stager::new(dir.path(), 1 << 20, crate::engine::DEFAULT_FLUSH_EVERY);
        assert!(stager.check_room(1 << 20).is_ok(), "a MiB fits");
        let refused = stager.check_room(1 << 62).expect_err("4 EiB does not fit").to_string();
        assert!(refused.contains("no room for the snapshot") && refused.contains("MB are free"), "{refused}");
    }
}
