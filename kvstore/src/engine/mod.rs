//! The state engine: where the state machine's key space, history and leases live, as an
//! ordered map of byte keys to byte values with atomic write batches and a durability point.
//!
//! Two implementations, one contract, so that the simulator runs the state machine of
//! production over the same interface:
//! - [`SledEngine`]: production, one sled tree in the node's data directory;
//! - [`MemoryEngine`]: the simulator's and the tests', with crash semantics (what was
//!   written but not synced is lost, except for a prefix of the unsynced batches, as sled's
//!   log-structured writes may leave).
//!
//! Over either, a [`ValueLog`] keeps the history's pages in files of its own
//! ([`value_log`]'s docs say why): [`DiskStateEngine`] is what a node runs,
//! [`MemoryStateEngine`] what the simulator runs, the same code over its in-memory parts.
//!
//! The contract:
//! - a [`WriteBatch`] is applied atomically, in the order batches were written: after a
//!   crash the engine holds every batch up to some point and none after it, never part of
//!   one (sled applies a batch as one log reservation);
//! - [`Engine::sync`] makes every batch written before it durable;
//! - reads see every batch written before them, from any thread.
//!
//! The engine knows nothing of what the bytes mean: [`crate::state`] lays its records out
//! over it.

mod memory;
mod sled_engine;
#[cfg(test)]
mod tests;
mod value_files;
pub mod value_log;
#[cfg(test)]
mod value_log_tests;

pub use memory::MemoryEngine;
pub use sled_engine::{SledEngine, DEFAULT_FLUSH_EVERY};
pub use value_files::{DiskValueFiles, MemoryValueFiles, ValueFiles};
pub use value_log::{ValueLog, ValueLogBreakage, ValueLogConfig};

/// The state engine of a node: sled, with long values under the history's prefix in value
/// files in a `values` directory beside sled's files.
pub type DiskStateEngine = ValueLog<SledEngine, DiskValueFiles>;

/// The state engine of the simulator and the tests: the same value log over an engine and
/// files in memory, each with crash semantics.
pub type MemoryStateEngine = ValueLog<MemoryEngine, MemoryValueFiles>;

/// The directory of a [`DiskStateEngine`]'s value files, inside its sled directory.
const VALUES_DIR: &str = "values";

impl DiskStateEngine {
    /// Opens (or creates) the state engine in `dir`: sled as [`SledEngine::open_flushing_every`]
    /// opens it, the value files in `dir/values`.
    pub fn open_in(
        dir: &std::path::Path,
        cache_bytes: u64,
        flush_every: std::time::Duration,
        config: ValueLogConfig,
    ) -> Result<Self, EngineError> {
        let sled = SledEngine::open_flushing_every(dir, cache_bytes, flush_every)?;
        let files = DiskValueFiles::open(&dir.join(VALUES_DIR))?;
        ValueLog::open(sled, files, config)
    }
}

impl MemoryStateEngine {
    /// An empty engine whose values under `config.prefix` go to files.
    pub fn in_memory(config: ValueLogConfig) -> Self {
        Self::open(MemoryEngine::new(), MemoryValueFiles::new(), config)
            .unwrap_or_else(|_| unreachable!("an empty engine in memory opens"))
    }

    /// A copy with an engine and files of its own, unsynced writes included (the simulator
    /// forks node states).
    pub fn fork(&self) -> Self {
        self.forked(self.inner().fork(), self.files().fork())
    }

    /// A power loss that leaves the first `kept` unsynced batches of the engine underneath
    /// and what the files synced; then what the node finds when it opens its engine again.
    pub fn crash_keeping(&self, kept: usize) -> Result<(), EngineError> {
        self.inner().crash_keeping(kept);
        self.files().crash();
        self.reload()
    }
}

use std::ops::Bound;
use thiserror::Error;

/// A failed engine operation. The replica stops on one: it must not go on with a state it
/// could not read or write.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The underlying store failed while doing `context`.
    #[error("state engine I/O failed: {context}: {source}")]
    Io {
        /// What was being done, and where.
        context: String,
        /// The store's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A stored value could not be read back whole or decoded.
    #[error("state engine record {what} is corrupt: {detail}")]
    Corrupt {
        /// Which record.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl EngineError {
    /// A failure of the underlying store while doing `context`, keeping its error.
    pub fn io(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        EngineError::Io { context: context.into(), source: Box::new(source) }
    }
}

/// One change of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Sets `key` to `value`.
    Put(Vec<u8>, Vec<u8>),
    /// Removes `key` (nothing if absent).
    Delete(Vec<u8>),
}

/// Changes applied all or nothing, in order (a later write to a key wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    writes: Vec<Write>,
    bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.bytes += key.len() + value.len();
        self.writes.push(Write::Put(key, value));
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: Vec<u8>) {
        self.bytes += key.len();
        self.writes.push(Write::Delete(key));
    }

    /// Whether the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Number of changes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Bytes of keys and values the batch carries (for deciding when to write it).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The changes, in order.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }

    /// Takes the changes out.
    pub fn into_writes(self) -> Vec<Write> {
        self.writes
    }
}

/// One key and its value, as a scan returns them.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A range of engine keys.
pub type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The bounds of every key starting with `prefix`.
pub fn prefix_bounds(prefix: &[u8]) -> KeyBounds {
    let start = Bound::Included(prefix.to_vec());
    match prefix_end(prefix) {
        Some(end) => (start, Bound::Excluded(end)),
        None => (start, Bound::Unbounded),
    }
}

/// The first key after every key starting with `prefix` (`None`: no such key, the prefix
/// is empty or all 0xFF).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// An ordered map of byte keys to byte values, shared by the thread that applies and the
/// threads that read (watch streams, snapshot and backup streams).
pub trait Engine: Send + Sync + 'static {
    /// How many bytes of the key-values it wrote lately the state machine over this engine
    /// may keep in memory, in front of the engine (a share of the memory the engine was
    /// given; see `state::recent_writes`).
    fn write_cache_bytes(&self) -> usize {
        0
    }

    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError>;

    /// Up to `max` entries within `bounds`, in key order (descending if `reverse`). Callers
    /// page through a long range with [`Scan`], so that no read holds a whole range.
    fn scan(&self, bounds: &KeyBounds, reverse: bool, max: usize) -> Result<Vec<Entry>, EngineError>;

    /// Up to `max` keys within `bounds`, in key order, without their values: what a count
    /// reads. Engines that store values apart from keys override it to read none.
    fn scan_keys(&self, bounds: &KeyBounds, max: usize) -> Result<Vec<Vec<u8>>, EngineError> {
        Ok(self.scan(bounds, false, max)?.into_iter().map(|(key, _)| key).collect())
    }
    /// Applies `batch` atomically (see the module's contract). Not durable until
    /// [`Engine::sync`].
    fn write(&self, batch: WriteBatch) -> Result<(), EngineError>;

    /// Makes every batch written before this call durable.
    fn sync(&self) -> Result<(), EngineError>;

    /// Negative controls only: hands every batch written so far to the file system, as
    /// [`Engine::sync`] does, without making it durable (no `fdatasync`), so that what is
    /// lost is lost to a power loss alone.
    #[cfg(feature = "sync-faults")]
    fn write_out_unsynced(&self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Removes every entry (before a whole new state is written: a snapshot installed).
    /// Not atomic: a crash may leave some entries; the caller keeps what it needs to redo
    /// it durable elsewhere until the new state is synced.
    fn clear(&self) -> Result<(), EngineError>;

    /// Bytes the engine takes on disk, if it is on disk.
    fn size_on_disk(&self) -> Option<u64> {
        None
    }

    /// Turns a bulk load on or off. While it is on, the engine may leave what it writes
    /// unsynced until the next [`Engine::sync`], even what an ordering of its own would
    /// sync before a write: for an engine that nothing reads after a crash unless it was
    /// synced since (a staged snapshot install, discarded unless adopted, and adopted only
    /// once synced). Turning it off syncs what it left first.
    fn set_bulk_load(&self, on: bool) -> Result<(), EngineError> {
        let _ = on;
        Ok(())
    }
}

/// Entries of a range read page by page from an [`Engine`], as an iterator; an engine error
/// ends it with that error.
pub struct Scan<'a> {
    engine: &'a dyn Engine,
    bounds: KeyBounds,
    reverse: bool,
    page: usize,
    buffered: std::vec::IntoIter<Entry>,
    done: bool,
}

impl<'a> Scan<'a> {
    /// Entries of `bounds`, read `page` at a time.
    pub fn new(engine: &'a dyn Engine, bounds: KeyBounds, reverse: bool, page: usize) -> Self {
        Scan { engine, bounds, reverse, page: page.max(1), buffered: Vec::new().into_iter(), done: false }
    }

    /// Reads the next page, narrowing the bounds past its last key.
    fn refill(&mut self) -> Result<(), EngineError> {
        let entries = self.engine.scan(&self.bounds, self.reverse, self.page)?;
        if entries.len() < self.page {
            self.done = true;
        }
        if let Some((last, _)) = entries.last() {
            if self.reverse {
                self.bounds.1 = Bound::Excluded(last.clone());
            } else {
                self.bounds.0 = Bound::Excluded(last.clone());
            }
        }
        self.buffered = entries.into_iter();
        Ok(())
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<Entry, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(entry) = self.buffered.next() {
                return Some(Ok(entry));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.refill() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }
}
