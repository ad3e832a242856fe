//! The engine of the simulator and the tests: a B-tree in memory, with crash semantics.

use super::{Engine, EngineError, Entry, KeyBounds, Write, WriteBatch};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An in-memory [`Engine`] that remembers what is durable: [`MemoryEngine::crash`] forgets
/// every batch written since the last sync, [`MemoryEngine::crash_keeping`] all but a prefix
/// of them (a power loss may leave some of sled's unsynced writes on disk, always whole
/// batches in the order written).
#[derive(Debug, Default)]
pub struct MemoryEngine {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default, Clone)]
struct Inner {
    /// What readers see.
    current: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The state as of the last sync.
    durable: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Batches written since the last sync, in order.
    unsynced: Vec<WriteBatch>,
}

fn apply(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &WriteBatch) {
    for write in batch.writes() {
        match write {
            Write::Put(key, value) => {
                map.insert(key.clone(), value.clone());
            }
            Write::Delete(key) => {
                map.remove(key);
            }
        }
    }
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    // A panic while the lock is held can only come from a bug here (the critical sections
    // copy values), so a poisoned lock still holds a consistent map.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of this engine, durable image and unsynced batches included.
    pub fn fork(&self) -> Self {
        MemoryEngine { inner: Mutex::new(self.lock().clone()) }
    }

    /// A power loss: everything written since the last sync is lost.
    pub fn crash(&self) {
        self.crash_keeping(0);
    }

    /// A power loss that leaves the first `kept` unsynced batches on disk (all of them if
    /// there are fewer).
    pub fn crash_keeping(&self, kept: usize) {
        let mut inner = self.lock();
        let unsynced = std::mem::take(&mut inner.unsynced);
        for batch in unsynced.iter().take(kept) {
            apply(&mut inner.durable, batch);
        }
        inner.current = inner.durable.clone();
    }

    /// Number of batches written since the last sync.
    pub fn unsynced_batches(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// Number of entries readers see.
    pub fn len(&self) -> usize {
        self.lock().current.len()
    }

    /// Whether readers see no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Engine for MemoryEngine {
    fn write_cache_bytes(&self) -> usize {
        // Small, so that the tests and the simulator see entries come and go.
        64 << 10
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.lock().current.get(key).cloned())
    }

    fn scan(&self, bounds: &KeyBounds, reverse: bool, max: usize) -> Result<Vec<Entry>, EngineError> {
        let inner = self.lock();
        if is_empty_range(bounds) {
            return Ok(Vec::new());
        }
        let range = inner.current.range::<Vec<u8>, _>((bounds.0.as_ref(), bounds.1.as_ref()));
        let clone = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
        Ok(if reverse { range.rev().take(max).map(clone).collect() } else { range.take(max).map(clone).collect() })
    }

    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        let mut inner = self.lock();
        apply(&mut inner.current, &batch);
        inner.unsynced.push(batch);
        Ok(())
    }

    fn clear(&self) -> Result<(), EngineError> {
        let mut batch = WriteBatch::new();
        for key in self.lock().current.keys() {
            batch.delete(key.clone());
        }
        self.write(batch)
    }

    fn sync(&self) -> Result<(), EngineError> {
        let mut inner = self.lock();
        let unsynced = std::mem::take(&mut inner.unsynced);
        for batch in &unsynced {
            apply(&mut inner.durable, batch);
        }
        Ok(())
    }
}

/// Whether `bounds` selects nothing in a way `BTreeMap::range` would panic on (start after
/// end, or an equal start and end not both included).
pub(super) fn is_empty_range(bounds: &KeyBounds) -> bool {
    use std::ops::Bound::*;
    match (&bounds.0, &bounds.1) {
        (Included(s), Included(e)) => s > e,
        (Included(s), Excluded(e)) | (Excluded(s), Included(e)) => s >= e,
        (Excluded(s), Excluded(e)) => s >= e,
        _ => false,
    }
}
