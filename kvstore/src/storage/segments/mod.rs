//! The Paxos log of one replica in append-only segment files: the promised ballot, the
//! accepted slots and the commit index, each a record appended to the newest segment of
//! `<data dir>/log/` (`00000000000000000001.seg`, `…02.seg`, …), the latest record of each
//! kind winning when the log is read back ([`scan`]). The format is in [`record`].
//!
//! ## Writes and syncs
//!
//! Appends only encode into a buffer in the process: they run on the replica's thread, which
//! must not wait for the disk. [`SegmentLog::sync`] writes the buffer out (`write(2)`) and
//! `fdatasync`s the segment; when a segment was created or deleted since the last sync it
//! also fsyncs the directory, since an fdatasync of a new file does not make its name
//! durable. A [`SegmentLog`] is a handle: clones share one log, so the server's sync thread
//! syncs while the replica's thread goes on appending, and a sync covers every append made
//! before it was called (appends take one lock for microseconds; the sync holds another
//! for the disk work, and only grabs the buffer under the first).
//!
//! ## Segments
//!
//! The active segment rolls over once a record would take it past the size limit: the next
//! segment starts with its header and the current promise and commit index, so that an
//! older segment never holds the only copy of either and can be deleted whole. A segment is
//! fdatasynced before the next one is created: only the *last* segment can then end in a
//! write a crash cut short, which is what lets [`scan`] tell a torn write (cut off) from
//! damage (an error).
//!
//! ## Deletion
//!
//! [`SegmentLog::remove_slots_through`] appends a `RemovedThrough` record (so that the log
//! alone reads back without those slots) and marks the older segments whose every slot it
//! covers. Covered segments are deleted, oldest first and never the active one, only inside
//! a later [`SegmentLog::sync`], after its `durable_first` step: the storage makes the
//! covering snapshot durable there, before the removal record is even written. Deleting
//! earlier would let a crash lose both the slots and the snapshot that replaced them.
mod files;
// `pub(crate)` for the golden-file tests (`crate::golden`).
pub(crate) mod record;
mod scan;
#[cfg(test)]
mod tests;

pub(crate) use files::sync_dir;
pub(crate) use scan::Replay;

use crate::log::{AcceptedSlot, LogBallot, Slot};
use crate::storage::StorageError;
use record::RecordRef;
use scan::SegmentInfo;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The default size at which the active segment rolls over: large enough that rolling (a
/// file creation and two directory fsyncs) is rare (about once a second at 16 MB/s of
/// commands), small enough that a checkpoint gives disk space back in useful steps: the log
/// kept behind the state is up to about one segment plus a checkpoint's worth
/// ([`crate::log`]'s `CHECKPOINT_BYTES`). 64 MiB kept 110 MB of log beside 10 MB of live data in
/// the compaction row.
pub(crate) const DEFAULT_SEGMENT_LIMIT: u64 = 16 << 20;

/// A replica's log in segment files. Cloning gives another handle on the same log.
#[derive(Clone)]
pub(crate) struct SegmentLog {
    shared: Arc<Shared>,
}

struct Shared {
    dir: PathBuf,
    /// Roll over once the active segment would grow past this.
    limit: u64,
    /// What appends touch. Never held while doing I/O.
    state: Mutex<State>,
    /// The files, held by a sync (or a recovery) for its whole I/O. Taken before `state`.
    io: Mutex<Io>,
}

/// Bytes buffered for one segment.
struct Chunk {
    seq: u64,
    /// The segment does not exist yet: the sync creates it.
    create: bool,
    bytes: Vec<u8>,
}

struct State {
    /// Appends not yet written, in order.
    pending: Vec<Chunk>,
    /// The segment appends go to.
    active: u64,
    /// Nothing but its head was appended to the active segment: a record too large for the
    /// limit goes there anyway instead of rolling again.
    active_fresh: bool,
    /// Every segment not deleted, the active one included.
    segments: BTreeMap<u64, SegmentInfo>,
    /// The latest promise and commit appended, for the head of the next segment.
    promised: LogBallot,
    commit: Slot,
    /// What the log read at open, for the first [`SegmentLog::recover`] if nothing was
    /// written since (saves reading every segment twice at start).
    initial: Option<Replay>,
    /// The negative control of the deletion rule: delete covered segments at once, before
    /// the sync that makes the covering snapshot durable.
    #[cfg(test)]
    delete_before_sync: bool,
}

struct Io {
    /// The segment last written to, open for appending.
    file: Option<(u64, File)>,
    /// `file` has writes not yet fdatasynced.
    unsynced: bool,
    /// Entries of the directory were created or deleted since its last fsync.
    dir_unsynced: bool,
    /// A write or fsync failed: what reached the disk is unknown (after a failed fsync the
    /// kernel may have dropped the dirty pages), so every later sync fails too.
    failed: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>, StorageError> {
    m.lock().map_err(|_| StorageError::Io("the segment log's lock is poisoned (a thread panicked holding it)".into()))
}

/// `fdatasync`, unless the `skip-fdatasync` negative control of the chaos harness is on.
fn datasync(file: &File) -> std::io::Result<()> {
    #[cfg(feature = "sync-faults")]
    if crate::storage::sync_faults::fdatasync_skipped() {
        return Ok(());
    }
    file.sync_data()
}

impl State {
    /// The buffer of the active segment.
    fn active_chunk(&mut self) -> &mut Vec<u8> {
        let active = self.active;
        if self.pending.last().is_none_or(|c| c.seq != active) {
            self.pending.push(Chunk { seq: active, create: false, bytes: Vec::new() });
        }
        let last = self.pending.len() - 1;
        &mut self.pending[last].bytes
    }

    /// Starts segment `seq` (to be created by the next sync) with its header, the promise
    /// and the commit index, and makes it the active one.
    fn start_segment(&mut self, seq: u64) -> Result<(), StorageError> {
        let mut bytes = record::header(seq).to_vec();
        record::append(&mut bytes, &RecordRef::Promise(self.promised)).map_err(encode_err)?;
        record::append(&mut bytes, &RecordRef::Commit(self.commit)).map_err(encode_err)?;
        self.segments.insert(seq, SegmentInfo { len: bytes.len() as u64, ..SegmentInfo::default() });
        self.pending.push(Chunk { seq, create: true, bytes });
        self.active = seq;
        self.active_fresh = true;
        Ok(())
    }

    /// Takes the covered segments at the start of the log out of it (oldest first: a later
    /// segment may hold a removal that an earlier one still needs).
    fn take_deletable(&mut self) -> Vec<u64> {
        let mut doomed = Vec::new();
        while let Some((&seq, info)) = self.segments.first_key_value() {
            if seq == self.active || !info.covered {
                break;
            }
            self.segments.remove(&seq);
            doomed.push(seq);
        }
        doomed
    }
}

fn encode_err(detail: String) -> StorageError {
    StorageError::Io(format!("encoding a log record failed: {detail}"))
}

impl SegmentLog {
    /// Opens the log in `dir` (created if missing), repairing a torn tail (see [`scan`]),
    /// rolling over at `limit` bytes.
    pub(crate) fn open(dir: &Path, limit: u64) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::backend(format!("cannot create the log directory {}", dir.display()), e))?;
        let scanned = scan::scan(dir, true)?;
        let mut state = State {
            pending: Vec::new(),
            active: scanned.active,
            active_fresh: false,
            segments: scanned.segments,
            promised: scanned.replay.promised,
            commit: scanned.replay.commit,
            initial: Some(scanned.replay),
            #[cfg(test)]
            delete_before_sync: false,
        };
        if !state.segments.contains_key(&state.active) {
            state.start_segment(state.active)?;
        }
        let io = Io { file: None, unsynced: false, dir_unsynced: false, failed: None };
        Ok(SegmentLog {
            shared: Arc::new(Shared { dir: dir.to_path_buf(), limit, state: Mutex::new(state), io: Mutex::new(io) }),
        })
    }

    /// Appends `record` (buffered until [`SegmentLog::sync`]).
    fn append(&self, record: RecordRef<'_>) -> Result<(), StorageError> {
        let mut st = lock(&self.shared.state)?;
        st.initial = None;
        let active_len = st.segments.get(&st.active).map_or(0, |info| info.len);
        let fresh = st.active_fresh;
        let chunk = st.active_chunk();
        let start = chunk.len();
        record::append(chunk, &record).map_err(encode_err)?;
        let len = (chunk.len() - start) as u64;
        if !fresh && active_len + len > self.shared.limit {
            let moved = chunk.split_off(start);
            let next = st.active + 1;
            st.start_segment(next)?;
            st.active_chunk().extend_from_slice(&moved);
        }
        st.active_fresh = false;
        match record {
            RecordRef::Promise(b) => st.promised = b,
            RecordRef::Commit(c) => st.commit = c,
            RecordRef::Slot(..) | RecordRef::RemovedThrough(_) => {}
        }
        let active = st.active;
        if let Some(info) = st.segments.get_mut(&active) {
            info.len += len;
            if let RecordRef::Slot(slot, _) = record {
                info.add_slot(slot);
            }
        }
        if let RecordRef::RemovedThrough(through) = record {
            scan::cover(&mut st.segments, active, through);
        }
        Ok(())
    }

    /// Records a promise (buffered).
    pub(crate) fn save_promise(&self, ballot: LogBallot) -> Result<(), StorageError> {
        self.append(RecordRef::Promise(ballot))
    }

    /// Records an accepted slot, whole however large (buffered).
    pub(crate) fn save_slot(&self, slot: Slot, accepted: &AcceptedSlot) -> Result<(), StorageError> {
        self.append(RecordRef::Slot(slot, accepted))
    }

    /// Records the commit index (buffered).
    pub(crate) fn save_commit(&self, commit: Slot) -> Result<(), StorageError> {
        self.append(RecordRef::Commit(commit))
    }

    /// Removes the slots `<= through` (buffered); the segments this frees are deleted by a
    /// later [`SegmentLog::sync`], after its `durable_first` step (see the module docs).
    pub(crate) fn remove_slots_through(&self, through: Slot) -> Result<(), StorageError> {
        self.append(RecordRef::RemovedThrough(through))?;
        #[cfg(test)]
        if lock(&self.shared.state)?.delete_before_sync {
            let mut io = lock(&self.shared.io)?;
            let (chunks, doomed) = {
                let mut st = lock(&self.shared.state)?;
                (std::mem::take(&mut st.pending), st.take_deletable())
            };
            self.write(&mut io, chunks)?;
            self.delete(&mut io, &doomed)?;
        }
        Ok(())
    }

    /// Makes every append made before the call durable: runs `durable_first` (what must be
    /// durable before any of these records reaches the disk: the snapshot that a
    /// `RemovedThrough` relies on), writes the buffer out and fdatasyncs it (and fsyncs the
    /// directory if it changed), then deletes the segments covered by removals recorded
    /// before the call.
    pub(crate) fn sync(&self, durable_first: impl FnOnce() -> Result<(), StorageError>) -> Result<(), StorageError> {
        let mut io = lock(&self.shared.io)?;
        if let Some(failure) = &io.failed {
            return Err(StorageError::Io(format!(
                "the log in {} failed earlier: {failure}",
                self.shared.dir.display()
            )));
        }
        // Taken together, before `durable_first`: a removal made after this point may
        // belong to a snapshot that `durable_first` does not cover.
        let (chunks, doomed) = {
            let mut st = lock(&self.shared.state)?;
            (std::mem::take(&mut st.pending), st.take_deletable())
        };
        // Before the first byte of these records is written: the kernel may write a page
        // back at any time after write(2), and a removal on disk without its snapshot loses
        // the slots for good.
        durable_first()?;
        let written = self.write(&mut io, chunks).and_then(|()| self.fsync(&mut io));
        if let Err(e) = &written {
            io.failed = Some(e.to_string());
        }
        written?;
        self.delete(&mut io, &doomed)
    }

    /// Writes `chunks` out (no fsync but the one that closes a segment before the next).
    fn write(&self, io: &mut Io, chunks: Vec<Chunk>) -> Result<(), StorageError> {
        for chunk in chunks {
            let path = files::segment_path(&self.shared.dir, chunk.seq);
            let io_err = |what: &str, e| StorageError::backend(format!("{what} {}", path.display()), e);
            let current = matches!(&io.file, Some((seq, _)) if *seq == chunk.seq);
            if chunk.create {
                // The segment before is complete: durable before the next one exists, so
                // that only the last segment can ever end in a torn write.
                if let (true, Some((_, file))) = (io.unsynced, &io.file) {
                    datasync(file).map_err(|e| io_err("cannot fdatasync the log segment", e))?;
                }
                io.unsynced = false;
                let file = OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| io_err("cannot create the log segment", e))?;
                io.file = Some((chunk.seq, file));
                io.dir_unsynced = true;
            } else if !current {
                // The last segment found at open: appends go on at its end.
                let file = OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .map_err(|e| io_err("cannot open the log segment", e))?;
                io.file = Some((chunk.seq, file));
            }
            if let Some((_, file)) = &mut io.file {
                file.write_all(&chunk.bytes).map_err(|e| io_err("cannot write to the log segment", e))?;
                io.unsynced = true;
            }
        }
        Ok(())
    }

    fn fsync(&self, io: &mut Io) -> Result<(), StorageError> {
        if let (true, Some((seq, file))) = (io.unsynced, &io.file) {
            datasync(file).map_err(|e| {
                StorageError::backend(
                    format!(
                        "cannot fdatasync the log segment {}",
                        files::segment_path(&self.shared.dir, *seq).display()
                    ),
                    e,
                )
            })?;
        }
        io.unsynced = false;
        if io.dir_unsynced {
            files::sync_dir(&self.shared.dir)?;
            io.dir_unsynced = false;
        }
        Ok(())
    }

    /// Deletes the segments `doomed` and makes that durable.
    fn delete(&self, io: &mut Io, doomed: &[u64]) -> Result<(), StorageError> {
        for &seq in doomed {
            let path = files::segment_path(&self.shared.dir, seq);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::backend(format!("cannot delete {}", path.display()), e)),
            }
            io.dir_unsynced = true;
        }
        if io.dir_unsynced {
            files::sync_dir(&self.shared.dir)?;
            io.dir_unsynced = false;
        }
        Ok(())
    }

    /// The log's contents: what was read at open if nothing was written since, else what
    /// the files say followed by the buffered appends (a live process sees its own writes,
    /// as it did with sled; nothing is written for it, since writing out of turn could put
    /// a removal on disk before its snapshot).
    pub(crate) fn recover(&self) -> Result<Replay, StorageError> {
        let _io = lock(&self.shared.io)?;
        if let Some(initial) = lock(&self.shared.state)?.initial.take() {
            return Ok(initial);
        }
        let mut scanned = scan::scan(&self.shared.dir, false)?;
        let st = lock(&self.shared.state)?;
        for chunk in &st.pending {
            let body =
                if chunk.create { chunk.bytes.get(record::HEADER_LEN..).unwrap_or_default() } else { &chunk.bytes };
            scan::replay_bytes(&mut scanned, chunk.seq, body, &self.shared.dir)?;
        }
        Ok(scanned.replay)
    }

    /// Bytes in the segments (the buffered ones included).
    pub(crate) fn size(&self) -> u64 {
        lock(&self.shared.state).map_or(0, |st| st.segments.values().map(|info| info.len).sum())
    }

    /// The segments not deleted, by sequence number (the active one last).
    #[cfg(test)]
    pub(crate) fn segment_seqs(&self) -> Vec<u64> {
        lock(&self.shared.state).map(|st| st.segments.keys().copied().collect()).unwrap_or_default()
    }

    /// Turns the deletion rule's negative control on or off (see [`State`]).
    #[cfg(test)]
    pub(crate) fn set_delete_before_sync(&self, on: bool) {
        if let Ok(mut st) = lock(&self.shared.state) {
            st.delete_before_sync = on;
        }
    }
}
