//! In-memory storage with crash semantics, for the simulator.
use super::staging::Home;
use super::{normalize, Recovered, SnapshotRecord, StagedEngine, Storage, StorageError};
use crate::engine::{Engine, MemoryStateEngine, ValueLogBreakage};
use crate::log::{AcceptedSlot, LogBallot, Slot};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Storage in memory: a durable image plus the writes not yet synced.
///
/// The simulator owns one per node and models a crash with [`MemoryStorage::crash`] (all
/// unsynced writes lost) or [`MemoryStorage::crash_keeping`] (a torn write: a prefix of them
/// reached the disk). A node only calls [`Storage::recover`] right after such a crash (or on
/// a blank disk), so `recover` simply returns the current view, pending writes included.
#[derive(Debug)]
pub struct MemoryStorage {
    /// What survives any crash.
    durable: Image,
    /// Writes since the last sync, in order.
    pending: Vec<Op>,
    /// Number of [`Storage::sync`] calls.
    syncs: u64,
    /// The state engine beside the log, with crash semantics of its own.
    engine: Arc<MemoryStateEngine>,
    /// What the state engine found wrong when it was opened again after the last crash
    /// (its value files do not hold what its records name): [`Storage::recover`] fails.
    reopen_failure: Option<String>,
    /// The negative control the state engines of this storage run with.
    value_log_breakage: ValueLogBreakage,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        MemoryStorage {
            durable: Image::default(),
            pending: Vec::new(),
            syncs: 0,
            engine: Arc::new(MemoryStateEngine::in_memory(crate::state::small_value_log_config())),
            reopen_failure: None,
            value_log_breakage: ValueLogBreakage::None,
        }
    }
}

impl Clone for MemoryStorage {
    /// A copy with an engine of its own (the simulator forks node states).
    fn clone(&self) -> Self {
        MemoryStorage {
            durable: self.durable.clone(),
            pending: self.pending.clone(),
            syncs: self.syncs,
            engine: Arc::new(self.engine.fork()),
            reopen_failure: self.reopen_failure.clone(),
            value_log_breakage: self.value_log_breakage,
        }
    }
}

/// The content of the disk.
#[derive(Debug, Clone, Default)]
struct Image {
    promised: LogBallot,
    slots: BTreeMap<Slot, AcceptedSlot>,
    commit: Slot,
    /// Behind an `Arc` so that cloning a storage (the simulator forks node states) does not
    /// copy snapshot bytes.
    snapshot: Option<Arc<SnapshotRecord>>,
    /// The highest slot the log was dropped through.
    removed_through: Slot,
}

/// One buffered write.
#[derive(Debug, Clone)]
enum Op {
    Promise(LogBallot),
    Slot(Slot, AcceptedSlot),
    Commit(Slot),
    Snapshot(Arc<SnapshotRecord>),
    DiscardSnapshot,
    RemoveThrough(Slot),
}

impl Image {
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Promise(b) => self.promised = *b,
            Op::Slot(s, a) => {
                self.slots.insert(*s, a.clone());
            }
            Op::Commit(c) => self.commit = *c,
            Op::Snapshot(s) => self.snapshot = Some(Arc::clone(s)),
            Op::DiscardSnapshot => self.snapshot = None,
            Op::RemoveThrough(through) => {
                self.removed_through = self.removed_through.max(*through);
                match through.checked_add(1) {
                    Some(first_kept) => self.slots = self.slots.split_off(&first_kept),
                    None => self.slots.clear(),
                }
            }
        }
    }

    fn to_recovered(&self) -> Recovered {
        normalize(Recovered {
            promised: self.promised,
            slots: self.slots.clone(),
            commit: self.commit,
            snapshot: self.snapshot.as_deref().cloned(),
        })
    }
}

impl MemoryStorage {
    /// Empty storage (a blank disk).
    pub fn new() -> Self {
        Self::default()
    }
    /// Simulates a crash: every write since the last sync is lost, in the log and in the
    /// state engine.
    pub fn crash(&mut self) {
        self.pending.clear();
        self.crash_engine(0);
    }

    /// The state engine's part of a crash: it keeps the first `kept` unsynced batches, and
    /// is opened again as a restarted node opens it.
    fn crash_engine(&mut self, kept: usize) {
        if let Err(e) = self.engine.crash_keeping(kept) {
            self.reopen_failure = Some(e.to_string());
        }
    }

    /// Runs the state engines of this storage (this one and those staged later) as the
    /// negative control `breakage`.
    pub fn break_value_log(&mut self, breakage: ValueLogBreakage) {
        self.value_log_breakage = breakage;
        self.engine.break_as(breakage);
    }

    /// [`Self::crash_keeping`] the first `log_kept` unsynced log writes and the first
    /// `state_kept` unsynced batches of the state engine: the two are separate files, so a
    /// power loss tears each at its own point.
    pub fn crash_torn(&mut self, log_kept: usize, state_kept: usize) {
        self.crash_engine(state_kept);
        self.crash_keeping_log(log_kept);
    }

    /// The highest slot the log was durably dropped through (0: never).
    pub fn removed_through(&self) -> Slot {
        self.durable.removed_through
    }

    /// Number of state engine batches written since its last sync.
    pub fn state_pending_len(&self) -> usize {
        self.engine.inner().unsynced_batches()
    }
    /// Simulates a torn write at a crash: the first `n` unsynced writes reached the disk (in
    /// order, as a log-structured store recovers a prefix), the rest are lost. `n` larger than
    /// [`MemoryStorage::pending_len`] keeps them all.
    /// The state engine loses every unsynced batch.
    pub fn crash_keeping(&mut self, n: usize) {
        self.crash_keeping_log(n);
        self.crash_engine(0);
    }

    /// The log's part of a torn crash.
    fn crash_keeping_log(&mut self, n: usize) {
        let n = n.min(self.pending.len());
        for op in self.pending.drain(..n) {
            self.durable.apply(&op);
        }
        self.pending.clear();
    }
    /// Number of writes buffered since the last sync (what a crash would lose).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    /// Number of syncs so far.
    pub fn sync_count(&self) -> u64 {
        self.syncs
    }
}

impl Storage for MemoryStorage {
    fn recover(&mut self) -> Result<Recovered, StorageError> {
        if let Some(detail) = &self.reopen_failure {
            return Err(StorageError::Corrupt { what: "the state engine".into(), detail: detail.clone() });
        }
        if self.pending.is_empty() {
            return Ok(self.durable.to_recovered());
        }
        let mut view = self.durable.clone();
        for op in &self.pending {
            view.apply(op);
        }
        Ok(view.to_recovered())
    }
    fn save_promise(&mut self, ballot: LogBallot) -> Result<(), StorageError> {
        self.pending.push(Op::Promise(ballot));
        Ok(())
    }
    fn save_slot(&mut self, slot: Slot, accepted: &AcceptedSlot) -> Result<(), StorageError> {
        self.pending.push(Op::Slot(slot, accepted.clone()));
        Ok(())
    }
    fn save_commit(&mut self, commit: Slot) -> Result<(), StorageError> {
        self.pending.push(Op::Commit(commit));
        Ok(())
    }
    fn save_snapshot(&mut self, snapshot: &SnapshotRecord) -> Result<(), StorageError> {
        // A file stays where it is (this storage has no directory): tests only.
        self.pending.push(Op::Snapshot(Arc::new(snapshot.clone())));
        Ok(())
    }
    fn remove_slots_through(&mut self, slot: Slot) -> Result<(), StorageError> {
        self.pending.push(Op::RemoveThrough(slot));
        Ok(())
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        for op in std::mem::take(&mut self.pending) {
            self.durable.apply(&op);
        }
        self.syncs += 1;
        Ok(())
    }
    fn discard_snapshot(&mut self) -> Result<(), StorageError> {
        self.pending.push(Op::DiscardSnapshot);
        Ok(())
    }
    fn state_engine(&self) -> Arc<dyn Engine> {
        self.engine.clone()
    }
    fn stage(&self) -> Result<StagedEngine, StorageError> {
        Ok(StagedEngine::in_memory(self.value_log_breakage))
    }
    fn adopt_staged(&mut self, staged: StagedEngine) -> Result<(), StorageError> {
        match staged.into_home() {
            // The swap is a pointer here, durable at once as the rename and directory sync
            // of the disk storage are by the time they return.
            (_, Home::Memory(engine)) => {
                self.engine = engine;
                Ok(())
            }
            (engine, Home::Dir { dir, staging }) => {
                let refused = format!("a state engine staged in {} cannot replace one in memory", dir.display());
                super::staging::retire(engine, dir, Some(staging));
                Err(StorageError::Io(refused))
            }
        }
    }
}
