//! The key space: every live key with its value and etcd bookkeeping, in key order.
//!
//! Keys live in the state [`crate::engine`] (one record per key, [`super::layout`]); a key
//! written by a put names its change in the history, which holds the value, rather than
//! holding the value a second time ([`super::live_changes`] says which changes that keeps
//! through compaction). The
//! writes of the commands applied since the last flush are held in memory over it, so that
//! a command (and a transaction reading its own writes) sees them before they reach the
//! engine in one batch. Reads by key or by range are engine lookups and ordered scans,
//! never scans of the whole set.
//!
//! The set may also hold *dead* keys: keys of a revoked or expired lease that the
//! [`Graveyard`] has not swept yet. Every method except the ones named "stored" hides them, so
//! that callers see exactly the key space etcd would have after the lease's revocation.

use super::change_pages::{RecentPages, ValueReader};
use super::graveyard::{Death, Graveyard};
use super::key_index::{Indexing, KeyIndex, KeyIndexBuilder};
use super::layout::{
    attachment_key, decode_stored, encode_kv, encode_kv_in_history, kv_bounds, kv_key, user_key, StoredKv,
};
use super::live_changes::LiveChanges;
use super::recent_writes::RecentWrites;
use super::Failure;
use crate::command::{RangeRequest, RangeResponse};
use crate::engine::{Engine, EngineError, Scan, WriteBatch};
use crate::error::KvError;
use crate::types::{KeyRange, KeyValue, LeaseId, Revision, NO_LEASE};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

/// The B-tree bounds of a [`KeyRange`] that names more than one key.
pub(super) type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// What a [`KeyRange`] selects, resolved once so that every operation treats the
/// `key`/`range_end` conventions identically (and exactly as [`KeyRange::contains`] does).
#[derive(Debug, Clone, Copy)]
pub(super) enum Selection<'a> {
    /// One key.
    Single(&'a [u8]),
    /// A (possibly empty) interval.
    Interval(Bounds<'a>),
}

impl<'a> Selection<'a> {
    /// Resolves `range`; an end below the start is an error rather than an empty range, so
    /// that a malformed request is reported instead of silently matching nothing (and
    /// because `BTreeSet::range` panics on inverted bounds).
    pub(super) fn of(range: &'a KeyRange) -> Result<Self, KvError> {
        if range.range_end.is_empty() {
            return Ok(Selection::Single(&range.key));
        }
        let start = if range.key.as_slice() == [0] { Bound::Unbounded } else { Bound::Included(range.key.as_slice()) };
        let end = if range.range_end.as_slice() == [0] {
            Bound::Unbounded
        } else {
            Bound::Excluded(range.range_end.as_slice())
        };
        if let (Bound::Included(s), Bound::Excluded(e)) = (start, end) {
            if e < s {
                return Err(invalid_range(range));
            }
        }
        Ok(Selection::Interval((start, end)))
    }
}

/// The error for a range whose end is below its start.
pub(super) fn invalid_range(range: &KeyRange) -> KvError {
    KvError::InvalidRange {
        key: String::from_utf8_lossy(&range.key).into_owned(),
        end: String::from_utf8_lossy(&range.range_end).into_owned(),
    }
}

/// Every live key in key order, plus the dead keys still to be swept: in the engine, with
/// the writes of the commands applied since the last [`Keyspace::flush`] held in memory
/// over it.
pub(super) struct Keyspace {
    engine: Arc<dyn Engine>,
    /// The writes since the last flush: a key's new record, or `None` where it was removed.
    dirty: BTreeMap<Vec<u8>, Option<KeyValue>>,
    /// For each key in `dirty` that the engine holds: the `mod_revision` of its record
    /// there, which the flush stops naming as a live change.
    replaced: BTreeMap<Vec<u8>, Revision>,
    /// The changes in the history that hold the value of a key record.
    live: LiveChanges,
    /// Which stored keys are dead.
    graveyard: Graveyard,
    /// Number of stored keys, dead ones included.
    stored: usize,
    /// [`stored_bytes`] of every stored key, dead ones included (they take space until swept).
    bytes: u64,
    /// Attachment records to write (`true`) or delete (`false`) at the next flush: one per
    /// stored key with a lease, kept in step with the key records.
    attachments: BTreeMap<(LeaseId, Vec<u8>), bool>,
    /// Key-values flushed lately, read before the engine.
    recent: RecentWrites,
    /// Every stored key (dead ones too), with ranks: counts without walking.
    index: Indexing,
    /// The history pages the last value lookups read: a command over many keys written
    /// together reads each page once ([`RecentPages`]). A lock only because lookups take
    /// `&self`; the node loop is its one user.
    pages: Mutex<RecentPages>,
    failure: Failure,
    /// Negative control: the key whose value every read of this key space flips a bit of.
    #[cfg(feature = "negative-controls")]
    damaged: Option<Vec<u8>>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace").field("stored", &self.stored).field("dirty", &self.dirty.len()).finish()
    }
}

/// What one stored key-value counts toward the space quota: its key and value, plus an
/// allowance for its revisions, version, lease and its place in the B-tree.
pub(super) fn stored_bytes(kv: &KeyValue) -> u64 {
    const OVERHEAD: u64 = 64;
    (kv.key.len() + kv.value.len()) as u64 + OVERHEAD
}

/// Keys read from the engine per page of a range read.
const PAGE: usize = 256;
/// Keys written to the engine per batch when a whole key space is loaded.
const LOAD_BATCH: usize = 4096;
/// Keys read from the engine per page when the key index is built.
const INDEX_PAGE: usize = 4096;

impl Keyspace {
    /// An empty key space over `engine`, which holds no key records.
    pub(super) fn new(engine: Arc<dyn Engine>, failure: Failure) -> Self {
        let mut space = Self::open(engine, failure, 0, 0, Graveyard::default());
        space.index = Indexing::Ready(KeyIndex::default());
        space.live = LiveChanges::default();
        space
    }

    /// The key space `engine` holds, of `stored` keys taking `bytes` (as recorded with
    /// it), of which the ones in `graveyard` are dead. Its key index is built from the
    /// engine's keys on a thread of its own.
    pub(super) fn open(
        engine: Arc<dyn Engine>,
        failure: Failure,
        stored: usize,
        bytes: u64,
        graveyard: Graveyard,
    ) -> Self {
        let index = Indexing::build({
            let engine = Arc::clone(&engine);
            move || Self::read_index(engine.as_ref())
        });
        Keyspace {
            recent: RecentWrites::new(engine.write_cache_bytes()),
            live: LiveChanges::build(Arc::clone(&engine)),
            engine,
            dirty: BTreeMap::new(),
            replaced: BTreeMap::new(),
            graveyard,
            stored,
            bytes,
            attachments: BTreeMap::new(),
            index,
            pages: Mutex::default(),
            failure,
            #[cfg(feature = "negative-controls")]
            damaged: None,
        }
    }

    /// A key space holding `kvs`, which are in strictly increasing key order, of which the
    /// ones in `graveyard` are dead (the caller checked that they agree), written to
    /// `engine` (which holds no key records) in batches. A key changed at or after
    /// `in_history_from` is stored naming its change, whose value the caller loads into the
    /// history and checks is there ([`Self::named_changes`]); `Revision::MAX` keeps every
    /// value in its key's record.
    pub(super) fn load(
        engine: Arc<dyn Engine>,
        failure: Failure,
        kvs: impl IntoIterator<Item = KeyValue>,
        graveyard: Graveyard,
        in_history_from: Revision,
    ) -> Result<Self, EngineError> {
        let stored = kvs.into_iter().map(|kv| {
            let in_history = kv.mod_revision >= in_history_from;
            (kv, in_history)
        });
        Self::load_stored(engine, failure, stored, graveyard)
    }

    /// A key space over `engine`, which holds no keys, holding `kvs` (in key order, each
    /// with whether its record names its change instead of holding its value), written in
    /// batches. A key whose record names its change counts the value it carries toward
    /// the quota; one that arrives without it (a peer's snapshot sends the change instead)
    /// has it added once the change is read ([`Self::add_value_bytes`]).
    pub(super) fn load_stored(
        engine: Arc<dyn Engine>,
        failure: Failure,
        kvs: impl IntoIterator<Item = (KeyValue, bool)>,
        graveyard: Graveyard,
    ) -> Result<Self, EngineError> {
        let mut space = Keyspace::new(engine, failure);
        space.graveyard = graveyard;
        let mut batch = WriteBatch::new();
        let mut index = KeyIndexBuilder::default();
        for (kv, in_history) in kvs {
            index.push(&kv.key);
            space.stored += 1;
            space.bytes += stored_bytes(&kv);
            if kv.lease != NO_LEASE {
                batch.put(attachment_key(kv.lease, &kv.key), Vec::new());
            }
            if in_history {
                batch.put(kv_key(&kv.key), encode_kv_in_history(&kv));
                space.live.insert(&kv.key, kv.mod_revision);
            } else {
                batch.put(kv_key(&kv.key), encode_kv(&kv));
            }
            if batch.len() >= LOAD_BATCH {
                space.engine.write(std::mem::take(&mut batch))?;
            }
        }
        space.engine.write(batch)?;
        space.index = Indexing::Ready(index.finish());
        Ok(space)
    }

    /// Whether a key's record names `key`'s change at `revision` for its value (as far as
    /// the set knows: `false` while it is being built).
    pub(super) fn names(&self, key: &[u8], revision: Revision) -> bool {
        self.live.contains(key, revision)
    }

    /// Counts `bytes` more of stored values toward the quota: the values of keys loaded
    /// without them ([`Self::load_stored`]).
    pub(super) fn add_value_bytes(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    /// The revisions of the changes this key space's records name for their values, in
    /// order, each once (`None` unless the set is known: right after [`Self::load`]).
    pub(super) fn named_changes(&self) -> Option<impl Iterator<Item = Revision> + '_> {
        self.live.revisions()
    }

    /// The index of the keys `engine` holds, read from its key records (at start, as etcd
    /// rebuilds its `treeIndex`): one pass over the keys.
    pub(super) fn read_index(engine: &dyn Engine) -> Result<KeyIndex, EngineError> {
        let mut index = KeyIndexBuilder::default();
        let mut lower: Bound<Vec<u8>> = Bound::Unbounded;
        loop {
            let bounds = kv_bounds((lower.as_ref().map(Vec::as_slice), Bound::Unbounded));
            let keys = engine.scan_keys(&bounds, INDEX_PAGE)?;
            for key in &keys {
                index.push(user_key(key));
            }
            match keys.last() {
                Some(last) if keys.len() == INDEX_PAGE => lower = Bound::Excluded(user_key(last).to_vec()),
                _ => return Ok(index.finish()),
            }
        }
    }

    /// An empty key space on an engine of its own in memory (tests).
    #[cfg(test)]
    pub(super) fn in_memory() -> Self {
        Keyspace::new(Arc::new(crate::engine::MemoryEngine::new()), Failure::default())
    }

    /// This key space on `engine`, a copy of its engine ([`crate::StateMachine::copy_in_memory`]).
    pub(super) fn copy_onto(&self, engine: &Arc<dyn Engine>, failure: &Failure) -> Self {
        let live = match self.live.ready_copy() {
            Some(live) => live,
            None => failure.check(LiveChanges::read_now(engine.as_ref())).unwrap_or_else(LiveChanges::failed),
        };
        Keyspace {
            engine: Arc::clone(engine),
            dirty: self.dirty.clone(),
            replaced: self.replaced.clone(),
            live,
            graveyard: self.graveyard.clone(),
            stored: self.stored,
            bytes: self.bytes,
            attachments: self.attachments.clone(),
            recent: self.recent.empty_like(),
            index: self.index_of_copy(engine),
            // Another engine: its pages are read afresh.
            pages: Mutex::default(),
            failure: failure.clone(),
            #[cfg(feature = "negative-controls")]
            damaged: self.damaged.clone(),
        }
    }

    /// The key index of a copy of this key space onto `engine`: this one's if it is
    /// ready, else read from the copy's keys, with the writes not yet flushed.
    fn index_of_copy(&self, engine: &Arc<dyn Engine>) -> Indexing {
        if let Some(index) = self.index.ready() {
            return Indexing::Ready(index.clone());
        }
        let Ok(mut index) = Self::read_index(engine.as_ref()) else { return Indexing::Failed };
        for (key, kv) in &self.dirty {
            match kv {
                Some(_) => drop(index.insert(key)),
                None => drop(index.remove(key)),
            }
        }
        Indexing::Ready(index)
    }

    /// Adds the writes since the last flush to `batch` (which the caller writes with the
    /// history's pending changes, or fails the state machine). `compacted` is the history's
    /// compaction point: a change below it was dropped before it reached a page, so its
    /// key's record holds the value.
    pub(super) fn flush_into(&mut self, batch: &mut WriteBatch, compacted: Revision) {
        for (key, kv) in std::mem::take(&mut self.dirty) {
            crate::progress::tick();
            if let Some(old) = self.replaced.remove(&key) {
                self.live.remove(&key, old);
            }
            match &kv {
                Some(kv) if kv.mod_revision >= compacted => {
                    batch.put(kv_key(&key), encode_kv_in_history(kv));
                    self.live.insert(&key, kv.mod_revision);
                }
                Some(kv) => batch.put(kv_key(&key), encode_kv(kv)),
                None => batch.delete(kv_key(&key)),
            }
            self.recent.written(key, kv);
        }
        for ((lease, key), present) in std::mem::take(&mut self.attachments) {
            match present {
                true => batch.put(attachment_key(lease, &key), Vec::new()),
                false => batch.delete(attachment_key(lease, &key)),
            }
        }
    }

    /// The changes in the history that hold the value of a key record (compaction keeps
    /// their pages).
    pub(super) fn live_changes(&mut self) -> &mut LiveChanges {
        &mut self.live
    }

    /// Records the attachment changes of `key` going from `old` to `new`.
    fn track_attachment(&mut self, key: &[u8], old: Option<LeaseId>, new: Option<LeaseId>) {
        let old = old.filter(|&l| l != NO_LEASE);
        let new = new.filter(|&l| l != NO_LEASE);
        if old == new {
            return;
        }
        if let Some(lease) = old {
            self.attachments.insert((lease, key.to_vec()), false);
        }
        if let Some(lease) = new {
            self.attachments.insert((lease, key.to_vec()), true);
        }
    }

    /// Bytes the stored keys count toward the space quota (see [`stored_bytes`]).
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of live keys.
    pub(super) fn len(&self) -> usize {
        self.stored - self.graveyard.pending()
    }

    /// Number of dead keys still stored.
    pub(super) fn pending(&self) -> usize {
        self.graveyard.pending()
    }

    /// Number of stored keys, dead ones included.
    pub(super) fn stored_len(&self) -> usize {
        self.stored
    }

    /// The stored key-value of `key`, dead or alive.
    fn stored_get(&self, key: &[u8]) -> Option<KeyValue> {
        let stored = match self.found(key)? {
            Found::Ready(kv) => return Some(self.as_read(kv)),
            Found::InHistory(stored) => stored,
        };
        let mut pages = self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut reader = ValueReader::resuming(self.engine.as_ref(), std::mem::take(&mut *pages));
        let kv = reader.resolve(stored);
        *pages = reader.into_pages();
        self.failure.check(kv).map(|kv| self.as_read(kv))
    }

    /// The stored key-values of `keys`, dead or alive, in their order (`None`: not
    /// stored), their values looked up in revision order ([`Self::resolve_in_revision_order`]).
    fn stored_get_all<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Vec<Option<KeyValue>> {
        let found = keys.into_iter().map(|key| self.found(key));
        self.resolve_in_revision_order(found)
    }

    /// The stored key-value of `key`, without its value looked up yet if the history holds
    /// it (`None`: not stored, or the engine failed).
    fn found(&self, key: &[u8]) -> Option<Found> {
        if let Some(written) = self.dirty.get(key) {
            return written.clone().map(Found::Ready);
        }
        if let Some(recent) = self.recent.get(key) {
            return Some(Found::Ready(recent.clone()));
        }
        let record = self.failure.check(self.engine.get(&kv_key(key)))??;
        self.decoded(key, &record)
    }

    /// The stored key `key`'s engine `record` as [`Found`] (`None`: the engine failed).
    fn decoded(&self, key: &[u8], record: &[u8]) -> Option<Found> {
        let stored = self.failure.check(decode_stored(key, record))?;
        Some(match stored.value_in_history {
            true => Found::InHistory(stored),
            false => Found::Ready(stored.kv),
        })
    }

    /// Every stored key-value in `bounds`, dead ones included, in key order, without the
    /// values the history holds looked up yet: the engine's records merged with the writes
    /// since the last flush.
    fn found_in(&self, bounds: Bounds<'_>) -> Vec<Option<Found>> {
        let failure = &self.failure;
        let from_engine = Scan::new(self.engine.as_ref(), kv_bounds(bounds), false, PAGE).map_while(|entry| {
            crate::progress::tick();
            let (key, record) = failure.check(entry)?;
            let key = user_key(&key);
            // A value the recent writes hold is not looked up in the history.
            match self.decoded(key, &record)? {
                Found::InHistory(_) if let Some(recent) = self.recent.get(key) => Some(Found::Ready(recent.clone())),
                found => Some(found),
            }
        });
        let dirty: Vec<(Vec<u8>, Option<Found>)> =
            self.dirty.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone().map(Found::Ready))).collect();
        Merged { stored: from_engine.peekable(), dirty: dirty.into_iter().peekable() }.map(Some).collect()
    }

    /// The key-values `found`, in their order, with the values the history holds looked up
    /// in the order of their revisions: the history's pages are in revision order, so each
    /// page holding some of them is read from the engine once and its other values come from
    /// the reader's kept pages, however the keys are ordered. `None` stays `None`, and so
    /// does a value the engine fails to give (the failure is recorded).
    fn resolve_in_revision_order(&self, found: impl IntoIterator<Item = Option<Found>>) -> Vec<Option<KeyValue>> {
        let mut resolved = Vec::new();
        let mut in_history = Vec::new();
        for (at, found) in found.into_iter().enumerate() {
            resolved.push(match found {
                Some(Found::Ready(kv)) => Some(self.as_read(kv)),
                Some(Found::InHistory(stored)) => {
                    in_history.push((at, stored));
                    None
                }
                None => None,
            });
        }
        if in_history.is_empty() {
            return resolved;
        }
        in_history.sort_by_key(|(at, stored)| (stored.kv.mod_revision, *at));
        let mut pages = self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut reader = ValueReader::resuming(self.engine.as_ref(), std::mem::take(&mut *pages));
        for (at, stored) in in_history {
            crate::progress::tick();
            let Some(kv) = self.failure.check(reader.resolve(stored)) else { break };
            resolved[at] = Some(self.as_read(kv));
        }
        *pages = reader.into_pages();
        resolved
    }

    /// `kv` as this key space's reads see it: as stored, except under the corruption
    /// control.
    fn as_read(&self, kv: KeyValue) -> KeyValue {
        #[cfg(feature = "negative-controls")]
        if self.damaged.as_deref() == Some(kv.key.as_slice()) {
            return damage(kv);
        }
        kv
    }

    /// Negative control: the cache of recent writes keeps a key's older key-value when the
    /// key is written again.
    #[cfg(feature = "negative-controls")]
    pub(super) fn break_recent_writes(&mut self) {
        self.recent.keep_stale();
    }

    /// Negative control: the key whose reads are damaged, if any.
    #[cfg(feature = "negative-controls")]
    pub(super) fn damaged(&self) -> Option<&[u8]> {
        self.damaged.as_deref()
    }

    /// Negative control: every later read of `key` sees a bit of its value flipped.
    #[cfg(feature = "negative-controls")]
    pub(super) fn damage_reads_of(&mut self, key: &[u8]) {
        self.damaged = Some(key.to_vec());
    }

    /// One live key: one lookup in the writes since the last flush, else one in the engine,
    /// plus, only while something is buried, one among the deaths.
    pub(super) fn get(&self, key: &[u8]) -> Option<KeyValue> {
        self.stored_get(key).filter(|kv| !self.graveyard.is_dead(kv))
    }

    /// The live key-values of `keys`, in their order (`None`: not live), as [`Self::get`]
    /// of each, their values looked up in revision order (see [`Self::take_range`]).
    pub(super) fn get_all<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Vec<Option<KeyValue>> {
        let mut found = self.stored_get_all(keys);
        for kv in found.iter_mut() {
            if kv.as_ref().is_some_and(|kv| self.graveyard.is_dead(kv)) {
                *kv = None;
            }
        }
        found
    }

    /// Removes one key and hands it back if it was live. A dead key is removed too (it is
    /// there anyway) but reported as absent, as it is for readers.
    pub(super) fn take(&mut self, key: &[u8]) -> Option<KeyValue> {
        let kv = self.stored_get(key)?;
        self.take_stored(kv)
    }

    /// Removes every stored key in `bounds` and hands back the live ones, in key order (as
    /// [`Self::take`] of each). Their values are looked up in the history in revision order
    /// ([`Self::resolve_in_revision_order`]), not key by key: a DeleteRange needs every
    /// deleted key's last value (its event's `prev_kv`), and keys written in another order
    /// than the key order (`etcdctl check perf`'s random keys) have them in pages all over
    /// the history, one page read per key.
    pub(super) fn take_range(&mut self, bounds: Bounds<'_>) -> Vec<KeyValue> {
        let found = self.found_in(bounds);
        let resolved = self.resolve_in_revision_order(found);
        resolved.into_iter().flatten().filter_map(|kv| self.take_stored(kv)).collect()
    }

    /// Removes `kv`, stored now, and hands it back if it is live (see [`Self::take`]).
    fn take_stored(&mut self, kv: KeyValue) -> Option<KeyValue> {
        crate::progress::tick();
        let key = kv.key.as_slice();
        self.note_replaced(key, &kv);
        self.dirty.insert(key.to_vec(), None);
        self.track_attachment(key, Some(kv.lease), None);
        self.index.remove(key);
        self.stored -= 1;
        self.bytes -= stored_bytes(&kv);
        if self.graveyard.is_dead(&kv) {
            self.graveyard.forget(&kv);
            return None;
        }
        Some(kv)
    }

    /// Notes that the record of `key`, which is `stored` now, is about to be replaced: if the
    /// engine holds it (it is not a write since the last flush), the flush stops naming its
    /// change as live.
    fn note_replaced(&mut self, key: &[u8], stored: &KeyValue) {
        if !self.dirty.contains_key(key) {
            self.replaced.insert(key.to_vec(), stored.mod_revision);
        }
    }

    /// Stores `kv` (a live key: written now), replacing and returning any live key-value
    /// with the same key; a dead one it replaces is dropped silently.
    pub(super) fn replace(&mut self, kv: KeyValue) -> Option<KeyValue> {
        crate::progress::tick();
        let old = self.stored_get(&kv.key);
        self.bytes += stored_bytes(&kv);
        self.track_attachment(&kv.key, old.as_ref().map(|o| o.lease), Some(kv.lease));
        match &old {
            Some(old) => self.note_replaced(&kv.key, old),
            None => self.index.insert(&kv.key),
        }
        self.dirty.insert(kv.key.clone(), Some(kv));
        let Some(old) = old else {
            self.stored += 1;
            return None;
        };
        self.bytes -= stored_bytes(&old);
        if self.graveyard.is_dead(&old) {
            self.graveyard.forget(&old);
            return None;
        }
        Some(old)
    }

    /// Every stored key-value in key order, dead ones included (for snapshots, which keep
    /// the sweep's work list).
    pub(super) fn stored(&self) -> impl Iterator<Item = KeyValue> + '_ {
        self.stored_in((Bound::Unbounded, Bound::Unbounded))
    }

    /// Every death whose keys are still being swept, in order (for snapshots).
    pub(super) fn deaths(&self) -> impl Iterator<Item = Death> + '_ {
        self.graveyard.deaths()
    }

    /// Makes `keys`, the keys of lease `id` that died at `revision`, invisible at once;
    /// they are removed later by [`Self::sweep`]. O(1) in the number of keys.
    pub(super) fn bury(&mut self, id: LeaseId, revision: Revision, keys: BTreeSet<Vec<u8>>) {
        self.graveyard.bury(id, revision, keys);
    }

    /// Physically removes up to `budget` dead keys; returns how many work-list entries it
    /// took (at most `budget`).
    pub(super) fn sweep(&mut self, budget: usize) -> usize {
        let mut graveyard = std::mem::take(&mut self.graveyard);
        let taken = graveyard.sweep(budget, |key, (id, revision)| {
            // The graveyard's invariant says the stored key is still the dead one; checking
            // costs one lookup and guarantees a live key is never swept.
            if let Some(kv) = self.stored_get(key).filter(|kv| kv.lease == id && kv.mod_revision < revision) {
                self.note_replaced(key, &kv);
                self.dirty.insert(key.to_vec(), None);
                self.track_attachment(key, Some(kv.lease), None);
                self.index.remove(key);
                self.stored -= 1;
                self.bytes -= stored_bytes(&kv);
            }
        });
        self.graveyard = graveyard;
        taken
    }

    /// Checks that the graveyard's work list is exactly the dead stored keys (tests only).
    #[cfg(test)]
    pub(super) fn check_graveyard(&self) {
        self.graveyard.check();
        let mut dead = 0;
        for kv in self.stored() {
            if let Some(death) = self.graveyard.death_of(&kv) {
                assert!(self.graveyard.holds(death, &kv.key), "dead key {kv:?} is not on {death:?}'s list");
                dead += 1;
            }
        }
        // Every dead key is listed once and the lists hold nothing else.
        assert_eq!(dead, self.graveyard.pending());
        if let Some(index) = self.index.ready() {
            let stored: Vec<Vec<u8>> = self.stored().map(|kv| kv.key).collect();
            assert!(index.keys().eq(stored.iter().map(Vec::as_slice)), "the key index holds the stored keys");
            assert_eq!(index.len(), self.stored);
        }
    }

    /// The stored key-values within `bounds`, dead ones included, in key order: the engine's
    /// records merged with the writes since the last flush, which win.
    fn stored_in<'s>(&'s self, bounds: Bounds<'_>) -> impl Iterator<Item = KeyValue> + 's {
        let failure = &self.failure;
        let engine_bounds = kv_bounds(bounds);
        let mut values = ValueReader::new(self.engine.as_ref());
        let from_engine = Scan::new(self.engine.as_ref(), engine_bounds, false, PAGE).map_while(move |entry| {
            crate::progress::tick();
            let (key, record) = failure.check(entry)?;
            let stored = failure.check(decode_stored(user_key(&key), &record))?;
            failure.check(values.resolve(stored))
        });
        let dirty: Vec<(Vec<u8>, Option<KeyValue>)> =
            self.dirty.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone())).collect();
        Merged { stored: from_engine.peekable(), dirty: dirty.into_iter().peekable() }.map(|kv| self.as_read(kv))
    }

    /// The selected live key-values, in key order.
    pub(super) fn select<'s>(&'s self, selection: Selection<'_>) -> Box<dyn Iterator<Item = KeyValue> + 's> {
        match selection {
            Selection::Single(key) => Box::new(self.get(key).into_iter()),
            Selection::Interval(bounds) => Box::new(self.stored_in(bounds).filter(|kv| !self.graveyard.is_dead(kv))),
        }
    }

    /// How many live keys the selection matches: from the key index (O(log n)) while no
    /// dead key is stored, else proportional to the stored keys in the interval.
    pub(super) fn count(&self, selection: Selection<'_>) -> usize {
        match selection {
            Selection::Interval((Bound::Unbounded, Bound::Unbounded)) => self.len(),
            Selection::Interval(bounds) => match self.index.ready().filter(|_| self.pending() == 0) {
                Some(index) => index.count(bounds),
                None => self.select(selection).count(),
            },
            other => self.select(other).count(),
        }
    }

    /// A snapshot of the key index (O(1)) when it holds exactly the live keys (no dead key
    /// is stored) and is built.
    pub(super) fn live_index(&mut self) -> Option<KeyIndex> {
        let no_dead_keys = self.pending() == 0;
        let index = self.index.get(&self.failure)?;
        no_dead_keys.then(|| index.clone())
    }

    /// Answers a read. `limit <= 0` means no limit (a negative limit is treated as none, as
    /// there is nothing sensible to cut at).
    pub(super) fn range(&self, request: &RangeRequest) -> Result<RangeResponse, KvError> {
        Ok(self.read(Selection::of(&request.range)?, request))
    }

    /// [`Self::range`] with the range already resolved (`selection` is `request.range`'s).
    pub(super) fn read(&self, selection: Selection<'_>, request: &RangeRequest) -> RangeResponse {
        if request.count_only {
            return RangeResponse { kvs: Vec::new(), more: false, count: to_i64(self.count(selection)) };
        }
        let limit = if request.limit > 0 { usize::try_from(request.limit).unwrap_or(usize::MAX) } else { usize::MAX };
        let mut kvs = Vec::new();
        let mut count = 0usize;
        for mut kv in self.select(selection) {
            if count < limit {
                if request.keys_only {
                    kv.value = Vec::new();
                }
                kvs.push(kv);
            } else if let Selection::Interval(bounds) = selection {
                // The total is known without walking the rest.
                if let (Bound::Unbounded, Bound::Unbounded) = bounds {
                    count = self.len();
                    break;
                }
                if let Some(index) = self.index.ready().filter(|_| self.pending() == 0) {
                    count = index.count(bounds);
                    break;
                }
            }
            count += 1;
        }
        RangeResponse { more: count > kvs.len(), count: to_i64(count), kvs }
    }
}

/// `kv` with a bit of its value flipped (an empty value gains a byte): the damage of the
/// corruption check's negative control, as every reader of a damaged key sees it.
#[cfg(feature = "negative-controls")]
pub(super) fn damage(mut kv: KeyValue) -> KeyValue {
    match kv.value.first_mut() {
        Some(byte) => *byte ^= 0x01,
        None => kv.value.push(0),
    }
    kv
}

/// The engine's records merged with the writes not yet flushed, both in key order: a key
/// written since the flush is the write's (`None`: deleted), whatever the engine holds.
struct Merged<S: Iterator<Item = T>, T: Keyed> {
    stored: std::iter::Peekable<S>,
    dirty: std::iter::Peekable<std::vec::IntoIter<(Vec<u8>, Option<T>)>>,
}

/// What [`Merged`] merges: anything that knows its key.
trait Keyed {
    fn key(&self) -> &[u8];
}

impl Keyed for KeyValue {
    fn key(&self) -> &[u8] {
        &self.key
    }
}

impl<S: Iterator<Item = T>, T: Keyed> Iterator for Merged<S, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        loop {
            let order = match (self.stored.peek(), self.dirty.peek()) {
                (None, None) => return None,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(stored), Some((key, _))) => stored.key().cmp(key.as_slice()),
            };
            match order {
                Ordering::Less => return self.stored.next(),
                Ordering::Equal => {
                    self.stored.next();
                }
                Ordering::Greater => {}
            }
            if let Some((_, Some(written))) = self.dirty.next() {
                return Some(written);
            }
        }
    }
}

/// A stored key-value found by key, its value not looked up yet if the history holds it.
enum Found {
    /// Known whole: a write since the flush, a recent write, or a record holding its value.
    Ready(KeyValue),
    /// A record naming its change: the value is in the history's page of that change.
    InHistory(StoredKv),
}

impl Keyed for Found {
    fn key(&self) -> &[u8] {
        match self {
            Found::Ready(kv) => &kv.key,
            Found::InHistory(stored) => &stored.kv.key,
        }
    }
}

impl Keyspace {
    /// Answers `request` (its range already applied) over `kvs`, which are in key order, by
    /// the same limit, count and value rules as [`Self::read`]: for reads at a past revision.
    pub(super) fn read_from(kvs: impl Iterator<Item = KeyValue>, request: &RangeRequest) -> RangeResponse {
        let limit = if request.limit > 0 { usize::try_from(request.limit).unwrap_or(usize::MAX) } else { usize::MAX };
        let mut count = 0usize;
        let mut out = Vec::new();
        for mut kv in kvs {
            count += 1;
            if request.count_only || out.len() >= limit {
                continue;
            }
            if request.keys_only {
                kv.value = Vec::new();
            }
            out.push(kv);
        }
        RangeResponse { more: !request.count_only && count > out.len(), count: to_i64(count), kvs: out }
    }
}

/// Counts as etcd's int64 fields; a key space cannot hold more than `i64::MAX` keys.
fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str) -> KeyValue {
        KeyValue {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            create_revision: 2,
            mod_revision: 2,
            version: 1,
            lease: 0,
        }
    }

    fn space(keys: &[&str]) -> Keyspace {
        let mut s = Keyspace::in_memory();
        for k in keys {
            s.replace(kv(k));
        }
        s
    }

    fn read(s: &Keyspace, range: KeyRange, limit: i64) -> RangeResponse {
        s.range(&RangeRequest { range, limit, count_only: false, keys_only: false }).unwrap()
    }

    fn keys(r: &RangeResponse) -> Vec<String> {
        r.kvs.iter().map(|kv| String::from_utf8(kv.key.clone()).unwrap()).collect()
    }

    #[test]
    fn selections_follow_key_range_contains() {
        let s = space(&["a", "b", "c", "d"]);
        let ranges = [
            KeyRange::single("b"),
            KeyRange::between("b", "d"),
            KeyRange::between("b", vec![0]),
            KeyRange::between(vec![0], "c"),
            KeyRange::between(vec![0], vec![0]),
            KeyRange::between("b", "b"),
            KeyRange::prefix("c"),
        ];
        for range in ranges {
            let want: Vec<String> =
                ["a", "b", "c", "d"].iter().filter(|k| range.contains(k.as_bytes())).map(|k| k.to_string()).collect();
            assert_eq!(keys(&read(&s, range.clone(), 0)), want, "{range:?}");
        }
    }

    #[test]
    fn inverted_range_is_an_error_not_a_panic() {
        let s = space(&["a"]);
        let err = s.range(&RangeRequest { range: KeyRange::between("b", "a"), ..Default::default() }).unwrap_err();
        assert!(matches!(err, KvError::InvalidRange { .. }));
    }

    #[test]
    fn limit_count_more_keys_only_and_count_only() {
        let s = space(&["a", "b", "c", "d"]);
        let r = read(&s, KeyRange::between("a", "d"), 2);
        assert_eq!((keys(&r), r.count, r.more), (vec!["a".to_string(), "b".to_string()], 3, true));
        let all = read(&s, KeyRange::between(vec![0], vec![0]), 1);
        assert_eq!((all.kvs.len(), all.count, all.more), (1, 4, true));
        let exact = read(&s, KeyRange::between("a", "c"), 2);
        assert!(!exact.more);
        let ko =
            s.range(&RangeRequest { range: KeyRange::single("a"), keys_only: true, ..Default::default() }).unwrap();
        assert!(ko.kvs[0].value.is_empty() && ko.kvs[0].version == 1);
        let co =
            s.range(&RangeRequest { range: KeyRange::prefix(""), count_only: true, ..Default::default() }).unwrap();
        assert_eq!((co.kvs.len(), co.count), (0, 4));
    }
}
