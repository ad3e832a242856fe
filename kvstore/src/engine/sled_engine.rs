//! The production engine: one sled tree in its own directory.
//!
//! sled 0.34 writes a B-tree page whose serialized form exceeds a quarter of a log segment to
//! a blob file it never syncs (see `storage/pieces.rs` for what a power loss then does), and
//! a leaf holds up to seventeen records before it splits. So no record sled sees here is
//! longer than [`PIECE`] (1/128 of the 4 MiB segments this engine uses): a longer value is
//! stored as a head under its key and pieces under keys of their own, all in the batch that
//! writes it, and overwriting or deleting it removes its pieces in the same batch.
//!
//! Keys are laid out in two namespaces of sled's tree, so that a scan of the engine's keys
//! never meets a piece:
//! - `0x00 ++ key`: a record: `0x00 ++ value` (whole) or `0x01 ++ pieces (u32 BE) ++ length
//!   (u64 BE)` (a head);
//! - `0x01 ++ len(key) (u32 BE) ++ key ++ index (u32 BE)`: piece `index` of a long value.
//!
//! [`Engine::sync`] is sled's flush plus an `fdatasync` of sled's data file, for the reason
//! `storage/sled_store.rs` gives (sled's flush does not persist a grown file's size).

use super::{Engine, EngineError, Entry, KeyBounds, Write, WriteBatch};
use std::fs::File;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// sled's log segment size for the engine's database.
const SEGMENT_SIZE: usize = 4 << 20;
/// The longest record given to sled (see the module docs).
const PIECE: usize = SEGMENT_SIZE / 128;
/// How often sled writes out and syncs its buffers on its own when nothing else is
/// configured: sled's own default.
pub const DEFAULT_FLUSH_EVERY: Duration = Duration::from_millis(500);
/// The file sled 0.34 keeps its log and pages in.
const SLED_DATA_FILE: &str = "db";

const RECORDS: u8 = 0x00;
const PIECES: u8 = 0x01;
const WHOLE: u8 = 0x00;
const HEAD: u8 = 0x01;
const HEAD_LEN: usize = 1 + 4 + 8;

/// The state engine on sled.
pub struct SledEngine {
    db: sled::Db,
    tree: sled::Tree,
    /// sled's data file, opened only to `fdatasync` it.
    data_file: File,
    dir: PathBuf,
    /// The share of the cache setting the state machine keeps of its recent writes.
    write_cache_bytes: usize,
}

impl std::fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledEngine").field("dir", &self.dir).finish()
    }
}

fn record_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(RECORDS);
    k.extend_from_slice(key);
    k
}

fn piece_key(key: &[u8], index: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 9);
    k.push(PIECES);
    k.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The sled bound of an engine bound, within the records' namespace.
fn record_bound(bound: &Bound<Vec<u8>>, start: bool) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(k) => Bound::Included(record_key(k)),
        Bound::Excluded(k) => Bound::Excluded(record_key(k)),
        Bound::Unbounded if start => Bound::Included(vec![RECORDS]),
        Bound::Unbounded => Bound::Excluded(vec![PIECES]),
    }
}

impl SledEngine {
    /// Opens (or creates) the engine in `dir`, with `cache_bytes` of memory for what it
    /// holds: a quarter for the state machine's recent writes
    /// ([`Engine::write_cache_bytes`]), the rest for sled's page cache.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self, EngineError> {
        Self::open_flushing_every(dir, cache_bytes, DEFAULT_FLUSH_EVERY)
    }

    /// [`Self::open`], with sled writing out and syncing what it buffered every
    /// `flush_every` on its own (between the syncs the checkpoints ask for). sled reclaims
    /// its file's space only on that same thread, for at most half of each interval, so a
    /// shorter one keeps the file nearer what it holds under a stream of overwrites, at
    /// some cost in puts (measured in performance.md).
    pub fn open_flushing_every(dir: &Path, cache_bytes: u64, flush_every: Duration) -> Result<Self, EngineError> {
        let io = |what: &str, e: sled::Error| EngineError::io(format!("{what} {}", dir.display()), e);
        let write_cache_bytes = usize::try_from(cache_bytes / 4).unwrap_or(usize::MAX);
        let config =
            sled::Config::new().path(dir).segment_size(SEGMENT_SIZE).cache_capacity(cache_bytes - cache_bytes / 4);
        let flush_ms = u64::try_from(flush_every.as_millis()).unwrap_or(u64::MAX).max(1);
        let config = config.flush_every_ms(Some(flush_ms));
        // The staged-state control must not have sled's flusher make durable what the
        // control leaves unsynced.
        #[cfg(feature = "sync-faults")]
        let config =
            if crate::storage::sync_faults::staged_state_sync_skipped() { config.flush_every_ms(None) } else { config };
        let db = config.open().map_err(|e| io("opening the state engine in", e))?;
        let tree = db.open_tree("leasekv/state").map_err(|e| io("opening the state tree in", e))?;
        let data_path = dir.join(SLED_DATA_FILE);
        let data_file = File::open(&data_path)
            .map_err(|e| EngineError::io(format!("opening {} to sync it", data_path.display()), e))?;
        Ok(SledEngine { db, tree, data_file, dir: dir.to_path_buf(), write_cache_bytes })
    }

    /// Number of records and pieces sled holds (tests check no piece is left behind).
    #[cfg(test)]
    pub(super) fn stored_entries(&self) -> usize {
        self.tree.len()
    }

    fn io(&self, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
        EngineError::io(format!("{what} in {}", self.dir.display()), e)
    }

    /// The value a stored record holds, reading its pieces if it is a head.
    fn value_of(&self, key: &[u8], record: &[u8]) -> Result<Vec<u8>, EngineError> {
        let corrupt = |detail: String| EngineError::Corrupt { what: format!("{key:?}"), detail };
        match record.split_first() {
            Some((&WHOLE, value)) => Ok(value.to_vec()),
            Some((&HEAD, _)) => {
                let (count, total) = parse_head(record).ok_or_else(|| corrupt("short head".into()))?;
                let mut value = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(64 << 20));
                for index in 0..count {
                    let piece = self
                        .tree
                        .get(piece_key(key, index))
                        .map_err(|e| self.io("reading a piece", e))?
                        .ok_or_else(|| corrupt(format!("piece {index} of {count} is missing")))?;
                    value.extend_from_slice(&piece);
                }
                if value.len() as u64 != total {
                    return Err(corrupt(format!("pieces hold {} bytes, the head says {total}", value.len())));
                }
                Ok(value)
            }
            _ => Err(corrupt("unknown record kind".into())),
        }
    }

    /// Adds to `batch` the removal of the pieces of the value now stored at `key`, if any.
    fn remove_pieces(&self, key: &[u8], batch: &mut sled::Batch) -> Result<(), EngineError> {
        if let Some(old) = self.tree.get(record_key(key)).map_err(|e| self.io("reading a record", e))? {
            if let Some((count, _)) = parse_head(&old) {
                for index in 0..count {
                    batch.remove(piece_key(key, index));
                }
            }
        }
        Ok(())
    }
}

fn parse_head(record: &[u8]) -> Option<(u32, u64)> {
    if record.len() != HEAD_LEN || record[0] != HEAD {
        return None;
    }
    let count = u32::from_be_bytes(record[1..5].try_into().ok()?);
    let total = u64::from_be_bytes(record[5..13].try_into().ok()?);
    Some((count, total))
}

impl Engine for SledEngine {
    fn write_cache_bytes(&self) -> usize {
        self.write_cache_bytes
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        match self.tree.get(record_key(key)).map_err(|e| self.io("reading a record", e))? {
            Some(record) => self.value_of(key, &record).map(Some),
            None => Ok(None),
        }
    }

    fn scan(&self, bounds: &KeyBounds, reverse: bool, max: usize) -> Result<Vec<Entry>, EngineError> {
        if super::memory::is_empty_range(bounds) {
            return Ok(Vec::new());
        }
        let range = (record_bound(&bounds.0, true), record_bound(&bounds.1, false));
        let iter = self.tree.range::<Vec<u8>, _>(range);
        let mut out = Vec::new();
        let mut take = |item: Result<(sled::IVec, sled::IVec), sled::Error>| -> Result<(), EngineError> {
            let (k, record) = item.map_err(|e| self.io("scanning records", e))?;
            let key = k[1..].to_vec();
            let value = self.value_of(&key, &record)?;
            out.push((key, value));
            Ok(())
        };
        if reverse {
            for item in iter.rev().take(max) {
                take(item)?;
            }
        } else {
            for item in iter.take(max) {
                take(item)?;
            }
        }
        Ok(out)
    }

    fn scan_keys(&self, bounds: &KeyBounds, max: usize) -> Result<Vec<Vec<u8>>, EngineError> {
        if super::memory::is_empty_range(bounds) {
            return Ok(Vec::new());
        }
        let range = (record_bound(&bounds.0, true), record_bound(&bounds.1, false));
        // Keys only: a value in pieces is not put back together, an inline one not copied.
        self.tree
            .range::<Vec<u8>, _>(range)
            .keys()
            .take(max)
            .map(|key| key.map(|k| k[1..].to_vec()).map_err(|e| self.io("scanning keys", e)))
            .collect()
    }

    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        let mut sled_batch = sled::Batch::default();
        // A key written twice in one batch must not have its pieces removed by the second
        // write's look at the stored (older) record only: the pieces the first write adds
        // are overwritten or left unreferenced, so every write clears what is stored, and
        // the pieces of an earlier write of the batch are tracked here.
        //
        // The look at the stored record is made for every write, not only for keys known to
        // hold pieces: without a read before each insert, sled 0.34 ran away. Measured with
        // 1M puts of 1 KiB in key order, in batches of 4,096, on a 96 MiB cache: 18–20 s,
        // an RSS of 4.7–5.1 GB and 2.8 GB on disk, against 10.6–11.9 s, 141–144 MB and
        // 1.6 GB with the lookups (an in-memory set of the long keys, tried in place of
        // them, made a joining member's install slower and its RSS 3.1 GB).
        let mut written_pieces: std::collections::HashMap<Vec<u8>, u32> = Default::default();
        let mut records = 0;
        for write in batch.into_writes() {
            crate::progress::tick();
            records += 1;
            let key = match &write {
                Write::Put(k, _) | Write::Delete(k) => k.clone(),
            };
            self.remove_pieces(&key, &mut sled_batch)?;
            if let Some(count) = written_pieces.remove(&key) {
                for index in 0..count {
                    sled_batch.remove(piece_key(&key, index));
                }
            }
            match write {
                Write::Delete(k) => sled_batch.remove(record_key(&k)),
                Write::Put(k, value) if value.len() < PIECE => {
                    let mut record = Vec::with_capacity(value.len() + 1);
                    record.push(WHOLE);
                    record.extend_from_slice(&value);
                    sled_batch.insert(record_key(&k), record);
                }
                Write::Put(k, value) => {
                    let mut count = 0u32;
                    for (index, piece) in value.chunks(PIECE).enumerate() {
                        let index = u32::try_from(index).unwrap_or(u32::MAX);
                        sled_batch.insert(piece_key(&k, index), piece);
                        count = index + 1;
                    }
                    let mut head = Vec::with_capacity(HEAD_LEN);
                    head.push(HEAD);
                    head.extend_from_slice(&count.to_be_bytes());
                    head.extend_from_slice(&(value.len() as u64).to_be_bytes());
                    sled_batch.insert(record_key(&k), head);
                    written_pieces.insert(k, count);
                }
            }
        }
        crate::progress::in_one_call(records, || self.tree.apply_batch(sled_batch))
            .map_err(|e| self.io("writing a batch", e))
    }

    fn clear(&self) -> Result<(), EngineError> {
        self.tree.clear().map_err(|e| self.io("clearing the state", e))
    }

    fn sync(&self) -> Result<(), EngineError> {
        self.db.flush().map_err(|e| self.io("flushing the sled log", e))?;
        self.data_file.sync_data().map_err(|e| self.io("fsyncing the sled data file", e))?;
        Ok(())
    }

    fn size_on_disk(&self) -> Option<u64> {
        self.db.size_on_disk().ok()
    }

    #[cfg(feature = "sync-faults")]
    fn write_out_unsynced(&self) -> Result<(), EngineError> {
        // sled's flush writes its buffers with `sync_file_range`, which makes nothing
        // durable (see `storage::sled_store`); the `fdatasync` of `sync` is left out.
        self.db.flush().map_err(|e| self.io("flushing the sled log", e))?;
        Ok(())
    }
}
