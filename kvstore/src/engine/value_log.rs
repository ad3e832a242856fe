//! An engine whose long values under one key prefix live in files of their own, appended in
//! the order they are written and deleted whole; the engine underneath keeps a small
//! pointer for each (WiscKey's value log, TiKV's Titan).
//!
//! Why: the state machine's history pages (about 24 KB each, one per few milliseconds of
//! writes, deleted a few hundred at a time once compacted) were most of what sled stored
//! and rewrote. sled 0.34 copies a whole leaf on every change to it and reclaims its file
//! only from segments at most half live, slowly, on its flusher thread, so under a stream
//! of overwrites its file grew to 5.6–6× what it held (docs/performance.md). Here a page
//! costs sled a 25-byte record, and the disk it took comes back when its file is deleted.
//!
//! The orderings that keep this safe across a crash or a power loss:
//! - **a value is durable before its pointer can be**: a batch's values are appended and
//!   the file synced before the batch goes to the engine underneath, which may make it
//!   durable at any moment on its own (sled's flusher). The one exception is a bulk load
//!   ([`Engine::set_bulk_load`]: a staged snapshot install, which nothing reads after a
//!   crash unless it was adopted, and which is adopted only once synced): its files are
//!   synced at its [`Engine::sync`], before the engine underneath;
//! - **a file is deleted only once no durable pointer names it**: a file whose last value
//!   was overwritten or deleted waits for the next [`Engine::sync`], and is deleted after
//!   that sync made the deletions durable;
//! - **no reader loses a file it is reading**: a read holds the read side of a lock from
//!   its look at the pointer to the end of its file read, and a file is deleted under the
//!   write side.
//!
//! Space: a file is rewritten (its live values appended anew, then the file deleted) once
//! less than half of it is live, a bounded amount per batch, so the files hold at most
//! about twice the live values plus the file being filled.
//!
//! On open, the pointers are read to learn what each file holds; a file no pointer names
//! (the tail of one whose batch a crash lost) is deleted. Values under the prefix stored
//! inline by a build before this layout read as before, and are moved to files a bounded
//! amount per batch (after the rewrites), so that an upgraded data directory converts as
//! it is written to; until then each start reads them while it reads the pointers.

use super::value_files::ValueFiles;
use super::{Engine, EngineError, Entry, KeyBounds, Write, WriteBatch};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

/// The first byte of a pointer. Values stored inline under the prefix must not start with
/// it (the history's records start with their format, 1 or 2).
const POINTER: u8 = 0xF0;
/// A pointer: [`POINTER`], file (u64 BE), offset (u64 BE), length (u32 BE), CRC-32 of the
/// value (u32 BE).
const POINTER_LEN: usize = 1 + 8 + 8 + 4 + 4;
/// Values shorter than this stay in the engine underneath by default: a file read costs
/// more than sled's copy of a short value.
pub const MIN_SEPARATED: usize = 1024;
/// The length at which a value file is sealed by default: small enough that a file whose
/// values are mostly retired is rewritten or deleted soon, large enough that a 10M-key
/// store (10 GB of history pages) has a few hundred files.
pub const FILE_BYTES: u64 = 16 << 20;
/// Live bytes a batch may move out of a file being rewritten, besides its own.
const REWRITE_PER_BATCH: u64 = 512 << 10;
/// Pointers read per page when a value log opens.
const OPEN_SCAN: usize = 4096;
/// Records looked at per batch by the conversion of inline values.
const CONVERT_SCAN: usize = 256;

/// Deliberately broken variants, each of which the simulator must catch (only a build
/// with the `negative-controls` feature can turn one on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ValueLogBreakage {
    /// The real thing.
    #[default]
    None,
    /// A batch goes to the engine underneath before its values' file is synced (they are
    /// synced only with [`Engine::sync`]): a power loss may keep the pointer, not the value.
    PointerBeforeValue,
    /// A file is deleted as soon as its last value is overwritten or deleted, before the
    /// deletions are durable: a crash brings back pointers into a file that is gone.
    FileRemovedEarly,
}

/// Where a value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pointer {
    file: u64,
    offset: u64,
    len: u32,
    crc: u32,
}

impl Pointer {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(POINTER_LEN);
        out.push(POINTER);
        out.extend_from_slice(&self.file.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.crc.to_be_bytes());
        out
    }

    /// The pointer `stored` is, if it is one.
    fn decode(stored: &[u8]) -> Option<Pointer> {
        if stored.len() != POINTER_LEN || stored[0] != POINTER {
            return None;
        }
        let u64_at = |at: usize| stored.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
        let u32_at = |at: usize| stored.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        Some(Pointer { file: u64_at(1)?, offset: u64_at(9)?, len: u32_at(17)?, crc: u32_at(21)? })
    }
}

/// What one file holds that is still named by a pointer.
#[derive(Debug, Default, Clone)]
struct FileLive {
    /// The file's length (what the writer appended, or found when it opened).
    length: u64,
    /// The keys whose values it holds, with where each value is and its length (a key put
    /// twice into one file is named by the later one only).
    keys: BTreeMap<Vec<u8>, (u64, u32)>,
    live_bytes: u64,
}

/// The writer's bookkeeping: one writer at a time (the state machine's flush, an install).
#[derive(Debug, Default, Clone)]
struct Writer {
    /// The file being appended to and its length; `None` until the first value.
    active: Option<(u64, u64)>,
    next_id: u64,
    files: BTreeMap<u64, FileLive>,
    /// Files no pointer names any more, to delete after the next sync, with their lengths.
    dead: Vec<(u64, u64)>,
    /// Where the conversion of values stored inline before this layout goes on (the first
    /// key not yet looked at), while there may be some left.
    convert_from: Option<Vec<u8>>,
    /// During a bulk load ([`Engine::set_bulk_load`]): the files appended to and not yet
    /// synced. `None` otherwise, when every append is synced before its pointers are written.
    unsynced: Option<BTreeSet<u64>>,
}

impl Writer {
    /// `key`'s value at `pointer` is no longer named.
    fn forget(&mut self, key: &[u8], pointer: Pointer) {
        let Some(file) = self.files.get_mut(&pointer.file) else { return };
        // Only the value the pointer names: the key may have a later one in the same file.
        if file.keys.get(key).is_some_and(|&(offset, _)| offset == pointer.offset) {
            file.keys.remove(key);
            file.live_bytes -= u64::from(pointer.len);
        }
        if file.keys.is_empty() && self.active.map(|(id, _)| id) != Some(pointer.file) {
            let length = file.length;
            self.files.remove(&pointer.file);
            self.dead.push((pointer.file, length));
        }
    }

    /// A sealed file less than half of which is live, the emptiest first.
    fn to_rewrite(&self) -> Option<u64> {
        let active = self.active.map(|(id, _)| id);
        self.files
            .iter()
            .filter(|(id, f)| Some(**id) != active && f.live_bytes * 2 < f.length)
            .min_by_key(|(_, f)| f.live_bytes * 1000 / f.length.max(1))
            .map(|(id, _)| *id)
    }
}

/// Which values a [`ValueLog`] keeps in its files.
#[derive(Debug, Clone, Copy)]
pub struct ValueLogConfig {
    /// The first byte of the keys whose values may go to files.
    pub prefix: u8,
    /// Values at least this long go; shorter ones stay inline.
    pub min_separated: usize,
    /// A file is sealed once it is this long.
    pub file_bytes: u64,
}

impl ValueLogConfig {
    /// The defaults ([`MIN_SEPARATED`], [`FILE_BYTES`]) for the keys under `prefix`.
    pub fn for_prefix(prefix: u8) -> Self {
        ValueLogConfig { prefix, min_separated: MIN_SEPARATED, file_bytes: FILE_BYTES }
    }
}

/// An [`Engine`] that keeps long values under one key prefix in [`ValueFiles`], over an
/// engine that keeps everything else (see the module docs).
pub struct ValueLog<E, F> {
    inner: E,
    files: F,
    prefix: u8,
    min_separated: usize,
    file_bytes: u64,
    writer: Mutex<Writer>,
    /// Read side: a read, from its look at a pointer to the end of its file read. Write
    /// side: a file's deletion.
    reading: RwLock<()>,
    breakage: Mutex<ValueLogBreakage>,
}

impl<E, F> std::fmt::Debug for ValueLog<E, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueLog").field("prefix", &self.prefix).field("file_bytes", &self.file_bytes).finish()
    }
}

impl<E: Engine, F: ValueFiles> ValueLog<E, F> {
    /// The value log over `inner` and `files`: reads the pointers to learn what each file
    /// holds, and deletes the files none names.
    pub fn open(inner: E, files: F, config: ValueLogConfig) -> Result<Self, EngineError> {
        let log = ValueLog {
            inner,
            files,
            prefix: config.prefix,
            min_separated: config.min_separated.max(POINTER_LEN + 1),
            file_bytes: config.file_bytes.max(1),
            writer: Mutex::new(Writer::default()),
            reading: RwLock::new(()),
            breakage: Mutex::new(ValueLogBreakage::None),
        };
        log.reload()?;
        Ok(log)
    }

    /// A copy of this value log over copies of its engine and files, with its bookkeeping
    /// as it is (not reloaded: what the copies hold unsynced still counts).
    pub(super) fn forked(&self, inner: E, files: F) -> Self {
        ValueLog {
            inner,
            files,
            prefix: self.prefix,
            min_separated: self.min_separated,
            file_bytes: self.file_bytes,
            writer: Mutex::new(self.lock_writer().clone()),
            reading: RwLock::new(()),
            breakage: Mutex::new(*self.breakage.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    /// The engine underneath.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The value files.
    pub fn files(&self) -> &F {
        &self.files
    }

    /// Turns a negative control on (it has no effect without the `negative-controls`
    /// feature).
    pub fn break_as(&self, breakage: ValueLogBreakage) {
        *self.breakage.lock().unwrap_or_else(PoisonError::into_inner) = breakage;
    }

    #[inline(always)]
    fn broken(&self, breakage: ValueLogBreakage) -> bool {
        #[cfg(feature = "negative-controls")]
        {
            *self.breakage.lock().unwrap_or_else(PoisonError::into_inner) == breakage
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            let _ = breakage;
            false
        }
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        // The writer's critical sections leave its bookkeeping whole or fail before
        // changing it; a panic in one is a bug, and what it left is still usable.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rebuilds the bookkeeping from the pointers the engine underneath holds (on open,
    /// and after a simulated crash), and deletes the files no pointer names.
    pub fn reload(&self) -> Result<(), EngineError> {
        let mut writer = self.lock_writer();
        let mut files: BTreeMap<u64, FileLive> = BTreeMap::new();
        // The first value stored inline that belongs in a file (written before this layout).
        let mut first_inline: Option<Vec<u8>> = None;
        // The end of the last value each file must hold.
        let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
        let (mut lower, upper) = super::prefix_bounds(&[self.prefix]);
        loop {
            let page = self.inner.scan(&(lower.clone(), upper.clone()), false, OPEN_SCAN)?;
            let full = page.len() == OPEN_SCAN;
            for (key, stored) in &page {
                if first_inline.is_none() && stored.len() >= self.min_separated && Pointer::decode(stored).is_none() {
                    first_inline = Some(key.clone());
                }
                if let Some(pointer) = Pointer::decode(stored) {
                    let file = files.entry(pointer.file).or_default();
                    file.keys.insert(key.clone(), (pointer.offset, pointer.len));
                    file.live_bytes += u64::from(pointer.len);
                    let end = ends.entry(pointer.file).or_default();
                    *end = (*end).max(pointer.offset + u64::from(pointer.len));
                }
            }
            match page.last() {
                Some((key, _)) if full => lower = Bound::Excluded(key.clone()),
                _ => break,
            }
        }
        let present = self.files.list()?;
        for (id, file) in &mut files {
            if !present.contains(id) {
                return Err(EngineError::Corrupt {
                    what: format!("value file {id}"),
                    detail: format!("it is missing, and {} records name values in it", file.keys.len()),
                });
            }
            file.length = self.files.len(*id)?;
            let end = ends.get(id).copied().unwrap_or(0);
            if file.length < end {
                return Err(EngineError::Corrupt {
                    what: format!("value file {id}"),
                    detail: format!("it is {} bytes long, and records name values up to byte {end}", file.length),
                });
            }
        }
        for id in &present {
            if !files.contains_key(id) {
                self.files.remove(*id)?;
            }
        }
        // Appending resumes in a new file: the old ones may end in a torn tail.
        let next_id = present.iter().max().map_or(1, |m| m + 1);
        *writer = Writer { active: None, next_id, files, dead: Vec::new(), convert_from: first_inline, unsynced: None };
        Ok(())
    }

    fn separated(&self, key: &[u8]) -> bool {
        key.first() == Some(&self.prefix)
    }

    /// The value `stored` under `key` stands for: itself, or what its pointer names. The
    /// caller holds the read side of `reading`.
    fn resolve(&self, key: &[u8], stored: Vec<u8>) -> Result<Vec<u8>, EngineError> {
        if !self.separated(key) {
            return Ok(stored);
        }
        let Some(pointer) = Pointer::decode(&stored) else { return Ok(stored) };
        let value = self.files.read_at(pointer.file, pointer.offset, pointer.len as usize)?;
        if crc32fast::hash(&value) != pointer.crc {
            return Err(EngineError::Corrupt {
                what: format!("the value of {:?} in value file {}", String::from_utf8_lossy(key), pointer.file),
                detail: format!("the {} bytes at {} fail their checksum", pointer.len, pointer.offset),
            });
        }
        Ok(value)
    }

    fn read_guard(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.reading.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pointer stored under `key` as of the batches written so far and the part of the
    /// current one already translated (`this_batch`).
    fn stored_pointer(
        &self,
        key: &[u8],
        this_batch: &HashMap<Vec<u8>, Option<Pointer>>,
    ) -> Result<Option<Pointer>, EngineError> {
        if let Some(known) = this_batch.get(key) {
            return Ok(*known);
        }
        Ok(self.inner.get(key)?.and_then(|stored| Pointer::decode(&stored)))
    }

    /// Appends `values` (one buffer) to the active file and syncs it.
    /// Syncs the files a bulk load appended to since the last sync (before the engine
    /// beneath syncs the pointers to them).
    fn sync_bulk_files(&self) -> Result<(), EngineError> {
        let mut writer = self.lock_writer();
        let Some(unsynced) = writer.unsynced.as_mut() else { return Ok(()) };
        while let Some(&id) = unsynced.first() {
            self.files.sync(id)?;
            unsynced.remove(&id);
        }
        Ok(())
    }

    fn append(&self, writer: &mut Writer, values: &[u8]) -> Result<(), EngineError> {
        let (id, length) = Self::next_position(writer, 0);
        self.files.write_at(id, length, values)?;
        match &mut writer.unsynced {
            Some(unsynced) => drop(unsynced.insert(id)),
            None if !self.broken(ValueLogBreakage::PointerBeforeValue) => self.files.sync(id)?,
            None => {}
        }
        writer.active = Some((id, length + values.len() as u64));
        let file = writer.files.entry(id).or_default();
        file.length = length + values.len() as u64;
        Ok(())
    }

    /// Where the next value appended goes: the active file (opening one) and its end plus
    /// what this batch already buffered.
    fn next_position(writer: &mut Writer, buffered: usize) -> (u64, u64) {
        let (id, length) = *writer.active.get_or_insert((writer.next_id, 0));
        if writer.next_id <= id {
            writer.next_id = id + 1;
        }
        (id, length + buffered as u64)
    }

    /// Seals the active file once it is long enough.
    fn seal_if_full(&self, writer: &mut Writer) {
        let Some((id, length)) = writer.active else { return };
        if length < self.file_bytes {
            return;
        }
        writer.active = None;
        if writer.files.get(&id).is_none_or(|f| f.keys.is_empty()) {
            writer.files.remove(&id);
            writer.dead.push((id, length));
        }
    }

    /// Moves up to [`REWRITE_PER_BATCH`] bytes of values stored inline before this layout
    /// into files, from where the conversion got to.
    fn convert_some(&self, writer: &mut Writer) -> Result<(), EngineError> {
        let Some(from) = writer.convert_from.take() else { return Ok(()) };
        let (_, upper) = super::prefix_bounds(&[self.prefix]);
        let page = self.inner.scan(&(Bound::Included(from), upper), false, CONVERT_SCAN)?;
        let mut batch = WriteBatch::new();
        let mut moved = 0u64;
        let mut next = None;
        for (key, stored) in &page {
            if moved >= REWRITE_PER_BATCH {
                next = Some(key.clone());
                break;
            }
            if stored.len() >= self.min_separated && Pointer::decode(stored).is_none() {
                moved += stored.len() as u64;
                batch.put(key.clone(), stored.clone());
            }
        }
        // A full page may have more after it: go on from the first key past its last.
        if next.is_none() && page.len() == CONVERT_SCAN {
            next = page.last().map(|(key, _)| [key.as_slice(), &[0]].concat());
        }
        writer.convert_from = next;
        if batch.is_empty() {
            return Ok(());
        }
        self.write_locked(writer, batch)
    }

    /// Moves up to [`REWRITE_PER_BATCH`] live bytes out of the file most worth rewriting.
    fn rewrite_some(&self, writer: &mut Writer) -> Result<(), EngineError> {
        let Some(id) = writer.to_rewrite() else { return Ok(()) };
        let Some(file) = writer.files.get(&id) else { return Ok(()) };
        let mut moved = 0u64;
        let mut keys = Vec::new();
        for (key, (_, len)) in &file.keys {
            if moved >= REWRITE_PER_BATCH {
                break;
            }
            moved += u64::from(*len);
            keys.push(key.clone());
        }
        let mut batch = WriteBatch::new();
        for key in keys {
            // Read through this engine: the value is checked against its checksum.
            let Some(value) = self.inner.get(&key)? else { continue };
            if Pointer::decode(&value).is_none_or(|p| p.file != id) {
                continue;
            }
            let value = {
                let _reading = self.read_guard();
                self.resolve(&key, value)?
            };
            batch.put(key, value);
        }
        self.write_locked(writer, batch)
    }

    /// [`Engine::write`] with the writer's lock held.
    fn write_locked(&self, writer: &mut Writer, batch: WriteBatch) -> Result<(), EngineError> {
        let mut out = WriteBatch::new();
        let mut values: Vec<u8> = Vec::new();
        let mut this_batch: HashMap<Vec<u8>, Option<Pointer>> = HashMap::new();
        let mut forgotten: Vec<(Vec<u8>, Pointer)> = Vec::new();
        let mut added: Vec<(Vec<u8>, Pointer)> = Vec::new();
        for write in batch.into_writes() {
            match write {
                Write::Put(key, value) if self.separated(&key) => {
                    if let Some(old) = self.stored_pointer(&key, &this_batch)? {
                        forgotten.push((key.clone(), old));
                    }
                    if value.len() >= self.min_separated {
                        let (file, offset) = Self::next_position(writer, values.len());
                        let len = u32::try_from(value.len()).map_err(|_| EngineError::Corrupt {
                            what: format!("a value of {} bytes", value.len()),
                            detail: "longer than a value file holds (4 GiB)".into(),
                        })?;
                        let pointer = Pointer { file, offset, len, crc: crc32fast::hash(&value) };
                        values.extend_from_slice(&value);
                        this_batch.insert(key.clone(), Some(pointer));
                        added.push((key.clone(), pointer));
                        out.put(key, pointer.encode());
                    } else {
                        debug_assert!(value.first() != Some(&POINTER), "an inline value reads as a pointer");
                        this_batch.insert(key.clone(), None);
                        out.put(key, value);
                    }
                }
                Write::Delete(key) if self.separated(&key) => {
                    if let Some(old) = self.stored_pointer(&key, &this_batch)? {
                        forgotten.push((key.clone(), old));
                    }
                    this_batch.insert(key.clone(), None);
                    out.delete(key);
                }
                other @ (Write::Put(..) | Write::Delete(_)) => match other {
                    Write::Put(key, value) => out.put(key, value),
                    Write::Delete(key) => out.delete(key),
                },
            }
        }
        if !values.is_empty() {
            self.append(writer, &values)?;
        }
        self.inner.write(out)?;
        // The bookkeeping follows the engine: a batch the engine refused changed nothing.
        // Added first, so that a value put and overwritten in one batch is forgotten.
        for (key, pointer) in added {
            let file = writer.files.entry(pointer.file).or_default();
            if let Some((_, old)) = file.keys.insert(key, (pointer.offset, pointer.len)) {
                file.live_bytes -= u64::from(old);
            }
            file.live_bytes += u64::from(pointer.len);
        }
        for (key, pointer) in forgotten {
            // A key put twice in one batch names its later pointer: only forget the older.
            if this_batch.get(&key).copied().flatten() == Some(pointer) {
                continue;
            }
            writer.forget(&key, pointer);
        }
        self.seal_if_full(writer);
        if self.broken(ValueLogBreakage::FileRemovedEarly) {
            self.remove_dead(writer.dead.drain(..).collect())?;
        }
        Ok(())
    }

    /// Deletes `dead` files, once every reader that may have looked at a pointer into them
    /// is done.
    fn remove_dead(&self, dead: Vec<(u64, u64)>) -> Result<(), EngineError> {
        if dead.is_empty() {
            return Ok(());
        }
        let _no_reader = self.reading.write().unwrap_or_else(PoisonError::into_inner);
        for (id, _) in dead {
            self.files.remove(id)?;
        }
        Ok(())
    }
}

impl<E: Engine, F: ValueFiles> Engine for ValueLog<E, F> {
    fn write_cache_bytes(&self) -> usize {
        self.inner.write_cache_bytes()
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        if !self.separated(key) {
            return self.inner.get(key);
        }
        let _reading = self.read_guard();
        match self.inner.get(key)? {
            Some(stored) => self.resolve(key, stored).map(Some),
            None => Ok(None),
        }
    }

    fn scan(&self, bounds: &KeyBounds, reverse: bool, max: usize) -> Result<Vec<Entry>, EngineError> {
        let _reading = self.read_guard();
        let entries = self.inner.scan(bounds, reverse, max)?;
        entries.into_iter().map(|(key, stored)| self.resolve(&key, stored).map(|value| (key, value))).collect()
    }

    fn scan_keys(&self, bounds: &KeyBounds, max: usize) -> Result<Vec<Vec<u8>>, EngineError> {
        self.inner.scan_keys(bounds, max)
    }

    fn write(&self, batch: WriteBatch) -> Result<(), EngineError> {
        let mut writer = self.lock_writer();
        self.write_locked(&mut writer, batch)?;
        self.rewrite_some(&mut writer)?;
        self.convert_some(&mut writer)
    }

    fn sync(&self) -> Result<(), EngineError> {
        self.sync_bulk_files()?;
        let dead = std::mem::take(&mut self.lock_writer().dead);
        if self.broken(ValueLogBreakage::PointerBeforeValue) {
            let active = self.lock_writer().active;
            if let Some((id, _)) = active {
                self.files.sync(id)?;
            }
        }
        if let Err(e) = self.inner.sync() {
            self.lock_writer().dead.extend(dead);
            return Err(e);
        }
        self.remove_dead(dead)
    }

    #[cfg(feature = "sync-faults")]
    fn write_out_unsynced(&self) -> Result<(), EngineError> {
        self.inner.write_out_unsynced()
    }

    fn clear(&self) -> Result<(), EngineError> {
        let mut writer = self.lock_writer();
        self.inner.clear()?;
        let files = std::mem::take(&mut writer.files);
        writer.dead.extend(files.into_iter().map(|(id, file)| (id, file.length)));
        writer.active = None;
        Ok(())
    }

    fn set_bulk_load(&self, on: bool) -> Result<(), EngineError> {
        if on {
            self.lock_writer().unsynced.get_or_insert_with(BTreeSet::new);
            return Ok(());
        }
        self.sync_bulk_files()?;
        self.lock_writer().unsynced = None;
        Ok(())
    }

    fn size_on_disk(&self) -> Option<u64> {
        // From the bookkeeping, not the directory: a status request asks on the node loop.
        let writer = self.lock_writer();
        let live: u64 = writer.files.values().map(|f| f.length).sum();
        let dead: u64 = writer.dead.iter().map(|(_, length)| length).sum();
        drop(writer);
        self.inner.size_on_disk().map(|bytes| bytes + live + dead)
    }
}
