//! sled storage: the snapshot and the restart epoch in sled, the log in segment files.
//!
//! A data directory holds one [`sled::Db`] and the log:
//! - `log/`: the promised ballot, the accepted slots and the commit index, appended to
//!   segment files ([`super::segments`]);
//! - sled tree `leasekv/meta`: the restart epoch of the election (`restart_epoch`, see
//!   [`SledEpochStore`]);
//! - sled tree `leasekv/snapshot`: a single record holding the snapshot's index *and* data,
//!   so that replacing it is one atomic insert (a crash can never pair one index with other
//!   data); or, for a snapshot given as a file ([`SnapshotData::File`]), a record of its index
//!   and the name of the file, which lives in `snapshots/`. The file is synced and moved in
//!   before its record is written, and an old file is deleted only after the record that
//!   replaced or dropped it is durable. Should a crash leave both kinds of record (they are
//!   two sled keys), the one of the higher index is the snapshot;
//! - `incoming/`: snapshot files given to [`Storage::save_snapshot`] are written there
//!   (same file system) so that saving one is a rename; emptied at every open;
//! - `state/`, or `state-<nonce>/` named by `state.current`: the state engine; a peer's
//!   snapshot is installed into a new `state-<nonce>/`, adopted by replacing
//!   `state.current` ([`Storage::adopt_staged`], [`super::staging`]); at open every state
//!   directory but the current one is deleted.
//!
//! A data directory of the release before the segment log has the log in sled (the
//! promise and commit in `leasekv/meta`, the slots in `leasekv/slots`); the first open moves
//! it to `log/` ([`super::upgrade`]). sled's exclusive lock on its database keeps a second
//! process out of the log too.
//!
//! Every sled value is framed by [`super::codec`] (version byte + postcard + CRC-32). A
//! snapshot record longer than a piece (32 KiB) is stored in pieces ([`super::pieces`]):
//! sled would otherwise log its page to a blob file it never syncs, which a power loss can
//! leave empty. New databases use 4 MiB sled segments ([`SEGMENT_SIZE`]); a database created
//! before keeps sled's 512 KiB (sled refuses to open it with another size) and 4 KiB pieces.
//!
//! ## Durability
//!
//! `save_*` only buffer: the log's records in the process, the snapshot in sled's in-memory
//! IO buffers; [`Storage::sync`] is the durability point, and covers *every* write made
//! before it, which is how the replica core batches (one sync per batch of accepts). A sync:
//! 1. if a snapshot was saved since the last sync, flushes sled ([`sled::Db::flush`]) and
//!    `fdatasync`s sled's data file: sled 0.34 implements `flush` on Linux with
//!    `sync_file_range`, which neither persists file metadata (the size of a log that grew)
//!    nor flushes the drive's write cache (only its background flusher, every 500 ms, calls
//!    `fsync`), so without our own `fdatasync` a power loss could lose a snapshot;
//! 2. writes the log's buffered records and `fdatasync`s the active segment (and fsyncs
//!    `log/` when a segment was created or deleted);
//! 3. deletes the log segments that snapshots made unnecessary.
//!
//! The order is the deletion rule: a removal of slots (a record, then whole segments) is
//! never on disk before the snapshot that covers them. The snapshot is saved before the
//! removal is recorded, and the sync flushes sled before it writes a byte of the log.
//!
//! sled may write its buffers out on its own before `sync` (its flusher thread, or a full
//! buffer); that only makes a snapshot durable *earlier*, which is harmless.
use super::codec::{decode, encode};
use super::pieces::{self, PieceError};
use super::segments::{SegmentLog, DEFAULT_SEGMENT_LIMIT};
use super::staging::{self, Home};
use super::{normalize, upgrade, Recovered, SnapshotData, SnapshotRecord, StagedEngine, Stager, Storage, StorageError};
use crate::engine::{DiskStateEngine, Engine};
use crate::log::{AcceptedSlot, LogBallot, Slot};
use leasekv_lease::{epoch::EpochError, EpochStore, RestartEpoch};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

const META_TREE: &str = "leasekv/meta";
const SNAPSHOT_TREE: &str = "leasekv/snapshot";
const EPOCH_KEY: &[u8] = b"restart_epoch";
const SNAPSHOT_KEY: &[u8] = b"snapshot";
/// The record of a snapshot kept as a file: its index and file name in [`SNAPSHOTS_DIR`].
const SNAPSHOT_FILE_KEY: &[u8] = b"snapshot_file";
/// The snapshot files the storage keeps, inside the data directory.
const SNAPSHOTS_DIR: &str = "snapshots";
/// Snapshots being received, inside the data directory (see [`SledStorage::incoming_dir`]).
pub const INCOMING_DIR: &str = "incoming";
/// sled's log segment size for a new database. A quarter of it is sled's blob threshold.
const SEGMENT_SIZE: usize = 4 << 20;
/// sled's default segment size, which every database created before [`SEGMENT_SIZE`] has.
const SLED_DEFAULT_SEGMENT_SIZE: usize = 512 << 10;

/// The segment size of the database in `dir`: what its `conf` file says; sled's default
/// when it has a data file but no readable `conf` (sled rewrites an empty one from the
/// configuration it is given, and before [`SEGMENT_SIZE`] that was its default);
/// [`SEGMENT_SIZE`] for a new one.
fn segment_size_of(dir: &Path) -> usize {
    // The text is followed by a binary checksum.
    let conf = std::fs::read(dir.join("conf")).unwrap_or_default();
    let conf = String::from_utf8_lossy(&conf);
    let recorded =
        conf.lines().find_map(|line| line.strip_prefix("segment_size:").and_then(|v| v.trim().parse::<usize>().ok()));
    match recorded {
        Some(size) => size,
        None if dir.join(SLED_DATA_FILE).exists() => SLED_DEFAULT_SEGMENT_SIZE,
        None => SEGMENT_SIZE,
    }
}

/// The file sled 0.34 keeps its log and pages in (`Config::db_path`).
const SLED_DATA_FILE: &str = "db";

/// Production storage: the log in segment files, the snapshot and the epoch in sled.
pub struct SledStorage {
    /// The database shared with the [`SledEpochStore`].
    durable: Durable,
    /// The promise, the slots and the commit index.
    log: SegmentLog,
    snapshot: sled::Tree,
    /// The longest record stored whole (see [`pieces`]).
    piece: usize,
    /// The state machine's engine, a sled database of its own in `state/`.
    engine: Arc<dyn Engine>,
    /// Where `engine` lives (`state/` or the last staged state adopted).
    state_dir: PathBuf,
    /// Makes engines for snapshots from peers.
    stager: Stager,
    /// The snapshot file named by the newest snapshot record written, if it is a file.
    snapshot_file: Option<PathBuf>,
}

/// How a [`SledStorage`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageOptions {
    /// Log segments roll over at this many bytes.
    pub log_segment_bytes: u64,
    /// The state engine's page cache, bytes: how much of the key space and history stays
    /// in memory (sled's own accounting; its resident memory runs somewhat above it).
    pub state_cache_bytes: u64,
    /// How often the state engine writes out and syncs its buffers on its own
    /// ([`crate::engine::SledEngine::open_flushing_every`]).
    pub state_flush_every: std::time::Duration,
}

/// The state engine's page cache when nothing else is configured.
pub const DEFAULT_STATE_CACHE_BYTES: u64 = 128 << 20;

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            log_segment_bytes: DEFAULT_SEGMENT_LIMIT,
            state_cache_bytes: DEFAULT_STATE_CACHE_BYTES,
            state_flush_every: crate::engine::DEFAULT_FLUSH_EVERY,
        }
    }
}

/// The directory of the state engine inside a data directory, unless a snapshot installed
/// from a peer replaced it ([`super::staging`]: `state.current` then names another).
pub const STATE_DIR: &str = "state";

/// What both the log storage and the epoch store need to write and make durable.
#[derive(Clone)]
struct Durable {
    db: sled::Db,
    meta: sled::Tree,
    /// sled's data file, opened read-only only to `fdatasync` it (see the module docs).
    data_file: Arc<File>,
    dir: PathBuf,
    /// A snapshot was written since the last flush: a sync with only log records to make
    /// durable then skips sled (its flush and `fdatasync` cost more than the log's own).
    /// Set *after* each insert, cleared *before* each flush, so that a write racing a sync
    /// is always flushed by this sync or the next.
    dirty: Arc<AtomicBool>,
    /// Snapshot files whose records were replaced or dropped: deleted once that is durable.
    doomed: Arc<Mutex<Vec<PathBuf>>>,
}

impl Durable {
    /// Makes every earlier write to the database durable (see the module docs for why both).
    fn sync(&self) -> Result<(), StorageError> {
        #[cfg(feature = "sync-faults")]
        super::sync_faults::before_sync()?;
        self.dirty.store(false, Ordering::SeqCst);
        self.flush()
    }

    /// Flushes and `fdatasync`s sled if a snapshot was written since the last flush.
    fn sync_if_dirty(&self) -> Result<(), StorageError> {
        if self.dirty.swap(false, Ordering::SeqCst) {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        // Taken before the flush: a file doomed after this point may belong to a record
        // that this flush does not cover.
        let doomed = std::mem::take(&mut *self.doomed.lock().unwrap_or_else(PoisonError::into_inner));
        self.db.flush().map_err(|e| io_err(&self.dir, "flushing the sled log", e))?;
        #[cfg(feature = "sync-faults")]
        if super::sync_faults::fdatasync_skipped() {
            return Ok(());
        }
        self.data_file.sync_data().map_err(|e| io_err(&self.dir, "fsyncing the sled data file", e))?;
        for path in doomed {
            if let Err(error) = std::fs::remove_file(&path) {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), %error, "cannot delete a replaced snapshot file");
                }
            }
        }
        Ok(())
    }

    /// Deletes `path` once the records written so far are durable.
    fn doom(&self, path: PathBuf) {
        self.doomed.lock().unwrap_or_else(PoisonError::into_inner).push(path);
        self.dirty.store(true, Ordering::SeqCst);
    }
}

fn io_err(dir: &Path, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> StorageError {
    StorageError::backend(format!("{what} in {}", dir.display()), e)
}

impl SledStorage {
    /// Opens (or creates) the store in `dir`, moving the log of a data directory written by
    /// the release before the segment log out of sled (see [`super::upgrade`]).
    ///
    /// Creates `dir` if missing. Fails with a [`StorageError`] naming the path when it
    /// exists but is not a directory, cannot be created, is not writable, or holds a database
    /// another process has open.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_with(dir, StorageOptions::default())
    }

    /// [`SledStorage::open`], with log segments rolled over at `limit` bytes instead of
    /// 16 MiB (tests use small ones to exercise rolling and deletion).
    pub fn open_with_segment_limit(dir: &Path, limit: u64) -> Result<Self, StorageError> {
        Self::open_with(dir, StorageOptions { log_segment_bytes: limit, ..StorageOptions::default() })
    }

    /// [`SledStorage::open`] with `options`.
    pub fn open_with(dir: &Path, options: StorageOptions) -> Result<Self, StorageError> {
        let limit = options.log_segment_bytes;
        let shown = dir.display();
        match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => {
                return Err(StorageError::Io(format!("storage directory {shown} exists but is not a directory")))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir)
                .map_err(|e| StorageError::backend(format!("cannot create storage directory {shown}"), e))?,
            Err(e) => return Err(StorageError::backend(format!("cannot access storage directory {shown}"), e)),
        }
        // sled reports an unwritable directory as a bare "Permission denied" without the path;
        // probing first gives the operator a message that says where.
        let probe = dir.join(".leasekv-write-probe");
        File::create(&probe)
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| StorageError::backend(format!("storage directory {shown} is not writable"), e))?;

        let segment_size = segment_size_of(dir);
        let config = sled::Config::new().segment_size(segment_size).path(dir);
        // The skip-fdatasync control is a store whose only durability is sled's flush: its
        // background flusher's fsync (every 500 ms) would make it durable anyway, and a
        // power loss would catch it only when it lands in that half second.
        #[cfg(feature = "sync-faults")]
        let config = if super::sync_faults::fdatasync_skipped() { config.flush_every_ms(None) } else { config };
        let db =
            config.open().map_err(|e| StorageError::backend(format!("cannot open the sled database in {shown}"), e))?;
        // sled writes its `conf` file (the segment size and other settings) without syncing
        // it; a power loss soon after the first open leaves it empty. Harmless today (sled
        // rewrites it from the defaults we use), but it is the database's description, so it
        // is made durable here, with the directory entries sled created.
        for path in [dir.join("conf"), dir.to_path_buf()] {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| StorageError::backend(format!("cannot sync {}", path.display()), e))?;
        }
        let tree = |name: &str| {
            db.open_tree(name).map_err(|e| StorageError::backend(format!("cannot open sled tree {name} in {shown}"), e))
        };
        let meta = tree(META_TREE)?;
        let snapshot = tree(SNAPSHOT_TREE)?;
        let data_path = dir.join(SLED_DATA_FILE);
        let data_file = File::open(&data_path)
            .map_err(|e| StorageError::backend(format!("cannot open sled data file {}", data_path.display()), e))?;
        let durable = Durable {
            db,
            meta,
            data_file: Arc::new(data_file),
            dir: dir.to_path_buf(),
            dirty: Arc::new(AtomicBool::new(false)),
            doomed: Arc::new(Mutex::new(Vec::new())),
        };
        let log = upgrade::open_log(dir, &durable.db, &durable.meta, limit, || durable.sync())?;
        let state_dir = staging::current_state_dir(dir)?;
        let config = crate::state::value_log_config();
        let engine = DiskStateEngine::open_in(&state_dir, options.state_cache_bytes, options.state_flush_every, config)
            .map_err(|e| {
                StorageError::backend(format!("cannot open the state engine in {}", state_dir.display()), e)
            })?;
        for sub in [SNAPSHOTS_DIR, INCOMING_DIR] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path)
                .map_err(|e| StorageError::backend(format!("cannot create {}", path.display()), e))?;
        }
        // What an interrupted transfer left.
        remove_files_except(&dir.join(INCOMING_DIR), None);
        Ok(SledStorage {
            durable,
            log,
            snapshot,
            piece: pieces::piece_len(segment_size),
            engine: Arc::new(engine),
            state_dir,
            stager: Stager::new(dir, options.state_cache_bytes, options.state_flush_every),
            snapshot_file: None,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.durable.dir
    }

    /// Where a snapshot file to be given to [`Storage::save_snapshot`] as a
    /// [`SnapshotData::File`] is written (tools and tests; peers' snapshots are staged
    /// instead, [`Self::stager`]): on the storage's file system, and emptied at every open.
    pub fn incoming_dir(&self) -> PathBuf {
        self.durable.dir.join(INCOMING_DIR)
    }

    /// Makes staged engines for this storage from another thread (a peer's snapshot is
    /// installed by the task receiving it), for [`Storage::adopt_staged`].
    pub fn stager(&self) -> Stager {
        self.stager.clone()
    }

    /// Moves the snapshot file at `from` into the storage, durably, under a new name.
    fn take_in_file(&self, index: Slot, from: &Path) -> Result<PathBuf, StorageError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let io = |what: String, e: std::io::Error| StorageError::backend(what, e);
        let dir = self.durable.dir.join(SNAPSHOTS_DIR);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let to = dir.join(format!("{index:020}-{nonce:016x}.snap"));
        // Its bytes durable before its name is, and its name before the record naming it.
        #[cfg(feature = "sync-faults")]
        let skipped = super::sync_faults::snapshot_file_sync_skipped();
        #[cfg(not(feature = "sync-faults"))]
        let skipped = false;
        if !skipped {
            File::open(from)
                .and_then(|f| f.sync_all())
                .map_err(|e| io(format!("cannot sync the snapshot file {}", from.display()), e))?;
        }
        if std::fs::rename(from, &to).is_err() {
            // Another file system after all: copied, then synced.
            std::fs::copy(from, &to)
                .and_then(|_| File::open(&to))
                .and_then(|f| f.sync_all())
                .map_err(|e| io(format!("cannot copy the snapshot file {} to {}", from.display(), to.display()), e))?;
            let _ = std::fs::remove_file(from);
        }
        File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| io(format!("cannot sync {}", dir.display()), e))?;
        Ok(to)
    }

    /// The restart-epoch store that shares this database.
    pub fn epoch_store(&self) -> SledEpochStore {
        SledEpochStore { durable: self.durable.clone() }
    }

    /// A handle that syncs this store from another thread, so the replica's thread goes
    /// on while the disk works (see [`crate::log::Replica::begin_sync`]).
    pub fn sync_handle(&self) -> SledSyncHandle {
        SledSyncHandle { durable: self.durable.clone(), log: self.log.clone() }
    }

    /// The segment log, for tests that look at its files or break it on purpose.
    #[cfg(test)]
    pub(crate) fn log(&self) -> &SegmentLog {
        &self.log
    }

    fn io(&self, what: &str, e: sled::Error) -> StorageError {
        io_err(&self.durable.dir, what, e)
    }

    fn pieces_err(&self, what: &str, e: PieceError) -> StorageError {
        match e {
            PieceError::Sled(e) => self.io(&format!("reading {what}"), e),
            PieceError::Incomplete(detail) => StorageError::Corrupt { what: what.to_string(), detail },
        }
    }
}

/// Deletes every file in `dir` but `keep` (leftovers of an interrupted transfer or of a
/// replaced snapshot whose deletion a crash cut off).
fn remove_files_except(dir: &Path, keep: Option<&Path>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if Some(path.as_path()) != keep && path.is_file() {
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "cannot delete a leftover snapshot file");
            }
        }
    }
}

/// One sync of both parts, in the order of the module docs.
fn sync_both(durable: &Durable, log: &SegmentLog) -> Result<(), StorageError> {
    #[cfg(feature = "sync-faults")]
    super::sync_faults::before_sync()?;
    log.sync(|| durable.sync_if_dirty())
}

impl Storage for SledStorage {
    fn size_on_disk(&self) -> Option<u64> {
        let sled = self.durable.db.size_on_disk().ok()?;
        Some(sled + self.log.size() + self.engine.size_on_disk().unwrap_or(0))
    }

    fn discard_snapshot(&mut self) -> Result<(), StorageError> {
        pieces::remove(&self.snapshot, SNAPSHOT_KEY).map_err(|e| self.io("dropping the snapshot", e))?;
        self.snapshot.remove(SNAPSHOT_FILE_KEY).map_err(|e| self.io("dropping the snapshot", e))?;
        if let Some(file) = self.snapshot_file.take() {
            self.durable.doom(file);
        }
        self.durable.dirty.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn state_engine(&self) -> Arc<dyn Engine> {
        self.engine.clone()
    }

    fn stage(&self) -> Result<StagedEngine, StorageError> {
        self.stager.stage()
    }

    fn adopt_staged(&mut self, staged: StagedEngine) -> Result<(), StorageError> {
        match staged.into_home() {
            (engine, Home::Dir { dir: staged_dir, staging }) => {
                if let Err(error) = staging::point_to(&self.durable.dir, &staged_dir) {
                    staging::retire(engine, staged_dir, Some(staging));
                    return Err(error);
                }
                staging.store(false, Ordering::SeqCst);
                let old = std::mem::replace(&mut self.engine, engine);
                let old_dir = std::mem::replace(&mut self.state_dir, staged_dir);
                staging::retire(old, old_dir, None);
                Ok(())
            }
            (_, Home::Memory(_)) => {
                Err(StorageError::Io("a state engine staged in memory cannot replace one on disk".into()))
            }
        }
    }

    fn snapshot_file(&self) -> Option<PathBuf> {
        self.snapshot_file.clone()
    }

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        let in_bytes = match pieces::get(&self.snapshot, SNAPSHOT_KEY).map_err(|e| self.pieces_err("snapshot", e))? {
            None => None,
            Some(bytes) => {
                let (index, data): (Slot, Vec<u8>) = decode("snapshot", &bytes)?;
                Some(SnapshotRecord { index, data: SnapshotData::Bytes(data) })
            }
        };
        let in_file = match self.snapshot.get(SNAPSHOT_FILE_KEY).map_err(|e| self.io("reading the snapshot", e))? {
            None => None,
            Some(bytes) => {
                let (index, name): (Slot, String) = decode("snapshot file", &bytes)?;
                if name.contains('/') || name.starts_with('.') {
                    return Err(StorageError::Corrupt {
                        what: "snapshot file".into(),
                        detail: format!("bad name {name:?}"),
                    });
                }
                let path = self.durable.dir.join(SNAPSHOTS_DIR).join(name);
                if !path.is_file() {
                    return Err(StorageError::Corrupt {
                        what: format!("snapshot at slot {index}"),
                        detail: format!("its file {} is missing", path.display()),
                    });
                }
                Some(SnapshotRecord { index, data: SnapshotData::File(path) })
            }
        };
        let snapshot = match (in_bytes, in_file) {
            (Some(bytes), Some(file)) if bytes.index > file.index => Some(bytes),
            (_, Some(file)) => Some(file),
            (bytes, None) => bytes,
        };
        self.snapshot_file = match &snapshot {
            Some(SnapshotRecord { data: SnapshotData::File(path), .. }) => Some(path.clone()),
            _ => None,
        };
        remove_files_except(&self.durable.dir.join(SNAPSHOTS_DIR), self.snapshot_file.as_deref());
        let log = self.log.recover()?;
        Ok(normalize(Recovered { promised: log.promised, slots: log.slots, commit: log.commit, snapshot }))
    }

    fn save_promise(&mut self, ballot: LogBallot) -> Result<(), StorageError> {
        self.log.save_promise(ballot)
    }

    fn save_slot(&mut self, slot: Slot, accepted: &AcceptedSlot) -> Result<(), StorageError> {
        self.log.save_slot(slot, accepted)
    }

    fn save_commit(&mut self, commit: Slot) -> Result<(), StorageError> {
        self.log.save_commit(commit)
    }

    fn save_snapshot(&mut self, snapshot: &SnapshotRecord) -> Result<(), StorageError> {
        let replaced = self.snapshot_file.take();
        match &snapshot.data {
            SnapshotData::Bytes(data) => {
                // Index and data in one record: a single insert is atomic in sled, so
                // recovery sees either the old snapshot or the new one, never a mix.
                let rec = encode("snapshot", &(snapshot.index, data.as_slice()))?;
                pieces::insert(&self.snapshot, SNAPSHOT_KEY, &rec, self.piece)
                    .map_err(|e| self.io("writing the snapshot", e))?;
                self.snapshot.remove(SNAPSHOT_FILE_KEY).map_err(|e| self.io("writing the snapshot", e))?;
            }
            SnapshotData::File(from) => {
                let path = self.take_in_file(snapshot.index, from)?;
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let rec = encode("snapshot file", &(snapshot.index, name))?;
                self.snapshot.insert(SNAPSHOT_FILE_KEY, rec).map_err(|e| self.io("writing the snapshot", e))?;
                pieces::remove(&self.snapshot, SNAPSHOT_KEY).map_err(|e| self.io("writing the snapshot", e))?;
                self.snapshot_file = Some(path);
            }
        }
        if let Some(file) = replaced {
            self.durable.doom(file);
        }
        // After the insert (see `Durable::dirty`).
        self.durable.dirty.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn remove_slots_through(&mut self, slot: Slot) -> Result<(), StorageError> {
        self.log.remove_slots_through(slot)
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        sync_both(&self.durable, &self.log)
    }
}

/// Syncs a [`SledStorage`] from any thread: every write made to it (log and snapshot)
/// before [`SledSyncHandle::sync`] is called is durable when it returns.
#[derive(Clone)]
pub struct SledSyncHandle {
    durable: Durable,
    log: SegmentLog,
}

impl SledSyncHandle {
    /// Makes every earlier write durable (the same sync as [`Storage::sync`]).
    pub fn sync(&self) -> Result<(), StorageError> {
        sync_both(&self.durable, &self.log)
    }
}

/// PaxosLease's restart epoch, durable in the node's sled database (the `restart_epoch`
/// record of the meta tree). Obtained from [`SledStorage::epoch_store`].
pub struct SledEpochStore {
    durable: Durable,
}

impl EpochStore for SledEpochStore {
    fn begin_epoch(&mut self) -> Result<RestartEpoch, EpochError> {
        let to_epoch_err = |e: StorageError| EpochError(e.to_string());
        let d = &self.durable;
        let stored: Option<u32> = match d.meta.get(EPOCH_KEY).map_err(|e| EpochError(format!("reading: {e}")))? {
            None => None,
            Some(bytes) => Some(decode("restart epoch", &bytes).map_err(to_epoch_err)?),
        };
        let value = match stored {
            None => 1,
            Some(v) => v.checked_add(1).ok_or_else(|| EpochError("restart epoch overflow".into()))?,
        };
        let rec = encode("restart epoch", &value).map_err(to_epoch_err)?;
        d.meta
            .insert(EPOCH_KEY, rec)
            .map_err(|e| EpochError(format!("writing restart epoch in {}: {e}", d.dir.display())))?;
        // The epoch must be durable before the node issues a single ballot with it.
        d.sync().map_err(to_epoch_err)?;
        Ok(RestartEpoch { value, first_start: stored.is_none() })
    }
}

#[cfg(test)]
mod tests;
