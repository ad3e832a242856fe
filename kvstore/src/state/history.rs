//! The MVCC history: every change to the key space since the compaction point, in revision
//! order, as etcd's watch events.
//!
//! etcd keeps every revision of every key in its backend and a key index of generations; a
//! read at a past revision looks up each key's newest revision at or below it. leasekv keeps
//! the current key space ([`super::keyspace`]) plus this window of changes, each carrying
//! the key's value before it, in the state engine under its revision ([`super::layout`]).
//! A read at revision `R` takes the current keys in the range and undoes, newest first,
//! every change after `R`; a watch replays the changes themselves. Compaction deletes the
//! oldest records.
//!
//! Revisions are etcd's `(main, sub)`: `main` is the event's `mod_revision` (one per writing
//! transaction), `sub` its position among the changes of that transaction; the pair is the
//! change's engine key, so engine order is history order.
//!
//! Changes recorded since the last flush are held in memory; readers on other threads
//! ([`HistoryReader`]) see what was flushed and published with its head, and after it the
//! *tail*: the changes the driver published since, between two commands
//! ([`History::publish_tail`]), so a watch never reads part of a revision and need not wait
//! for the engine write.
//!
//! Compaction at `C` drops the changes below `C` and keeps every change *at* `C`: a read or
//! a watch from exactly `C` is allowed (as in etcd), and needs them, tombstones included
//! (etcd's bugs #18089/#19179 lost a delete at the compaction revision).

use super::change_pages::{changes, changes_newest_first, decode_page, records_below, PageWriter};
use super::keyspace::stored_bytes;
use super::layout::{event_bounds, event_position};
use super::live_changes::LiveChanges;
use super::size_runs::{all_runs, decode_legacy, decode_run, legacy_sizes, runs_starting_below, RunWriter};
use super::Failure;
use crate::engine::{Engine, EngineError, Scan, WriteBatch};
use crate::types::{Event, EventKind, KeyRange, KeyValue, Revision};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Changes read from the engine per page.
const PAGE: usize = 256;
/// Changes written to the engine per batch when a whole history is loaded.
const LOAD_BATCH: usize = 4096;

/// What one retained change counts toward the space quota: the key-values it carries.
fn event_bytes(event: &Event) -> u64 {
    stored_bytes(&event.kv) + event.prev_kv.as_ref().map_or(0, stored_bytes)
}

/// Compacted records deleted per flush at most (see [`History::flush_into`]).
const DELETES_PER_FLUSH: usize = 256;
/// Retiring pages checked against the live changes per flush at most: each check is a
/// lookup in memory, but a page held by a long-lived key is checked again and again.
const RETIRING_CHECKS_PER_FLUSH: usize = 64;

/// A history page wholly below the compaction point, waiting for no key to name a change
/// in it: its engine key and the revisions of its first and last changes (or a revision
/// past its last: the check may hold it longer, never release it early).
#[derive(Debug, Clone)]
pub(super) struct Retiring {
    pub(super) key: Vec<u8>,
    pub(super) first: Revision,
    pub(super) last: Revision,
}

/// What readers on other threads may read: the changes through `head`, from `compacted` on.
/// The state machine publishes the head when its writes reach the engine
/// ([`History::flush_into`] and [`History::published`]), never before; the compaction point
/// then and with the tail; and, for watch streams only, the changes applied since the last
/// write, a turn at a time ([`History::publish_tail`]).
#[derive(Debug, Default)]
pub(super) struct Published {
    head: AtomicI64,
    compacted: AtomicI64,
    /// The changes applied and not yet in the engine, as last published.
    tail: Mutex<Tail>,
    /// The store revision the tail reaches (at least `head`): what watch readers can read.
    tail_head: AtomicI64,
    /// Engine batches of this state begun and finished: a reader that saw some write in the
    /// engine waits until every batch begun before it looked is finished, and then finds
    /// that write's changes published (see [`Published::settle`]).
    writes_begun: AtomicU64,
    writes_done: AtomicU64,
    /// Views being read ([`super::view`]): while any is, compacted changes stay in the
    /// engine, because a view reads the changes after its revision to undo them.
    pins: Mutex<BTreeMap<u64, Revision>>,
    next_pin: AtomicU64,
    /// Changes a compaction dropped before they reached the engine, kept for read views
    /// ([`super::read_view`]) until the flush after them with no view pinned: their keys'
    /// new values reach the engine with that flush all the same, and a view that read the
    /// engine then must find the change to know its revision.
    retained: Mutex<Vec<Event>>,
    /// The last counts of the ranges counted lately, each at its revision: a later count of
    /// the same range is that count plus the keys the changes since then created, less
    /// those they deleted ([`super::read_view`]).
    counts: Mutex<Vec<(KeyRange, Revision, usize)>>,
    /// Overlays left by pages at past revisions for their scans' next pages.
    pub(super) overlays: super::read_view::Overlays,
}

/// Counts kept in all (a range at up to [`COUNTS_PER_RANGE`] revisions). Every page of a paginated scan leaves one (the count of
/// the next page's range), so the table must outlast a round of pages of every scan in
/// progress: with 16, sixteen scanners (one per Kubernetes informer relisting) pushed each
/// other's counts out, and a page whose count was gone counted the rest of its range again,
/// O(keys) (seconds a page at 1M keys). An entry is a range's two keys and two numbers.
const COUNTS_KEPT: usize = 1024;
/// Revisions at which one range's count is kept (see [`Published::keep_count`]).
const COUNTS_PER_RANGE: usize = 4;

/// Changes applied since the last engine write, published for watch readers a node-loop turn
/// at a time, so that their events need not wait for the engine write (which the node loop
/// makes at most every few milliseconds: the node's engine-write deadline, `Effects::write_applied`).
#[derive(Debug, Default)]
struct Tail {
    /// The engine head these changes follow: every change through it is in the engine.
    base: Revision,
    /// The changes after `base`, oldest first, one chunk per publication; a chunk holds
    /// whole revisions (it is published between two commands).
    chunks: Vec<Arc<[Event]>>,
}

impl Published {
    /// The state's writer is about to write a batch.
    pub(super) fn begin_write(&self) {
        self.writes_begun.fetch_add(1, Ordering::AcqRel);
    }

    /// The batch begun last is in the engine.
    pub(super) fn end_write(&self) {
        self.writes_done.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits until every batch begun before this call is in the engine and published (a
    /// batch takes microseconds to milliseconds; bounded to 10 s, after which the caller
    /// reads what is published).
    pub(super) fn settle(&self) {
        let begun = self.writes_begun.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.writes_done.load(Ordering::Acquire) < begun && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The store revision published.
    pub(super) fn head(&self) -> Revision {
        self.head.load(Ordering::Acquire)
    }

    /// The compaction point published: every change above it is retained.
    pub(super) fn compaction_point(&self) -> Revision {
        self.compacted.load(Ordering::Acquire)
    }

    /// The count kept of `range` at the revision nearest to `revision` (before or after
    /// it), with that revision.
    pub(super) fn nearest_count(&self, range: &KeyRange, revision: Revision) -> Option<(Revision, usize)> {
        let counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = counts.iter().filter(|(r, ..)| r == range);
        kept.min_by_key(|(_, at, _)| at.abs_diff(revision)).map(|&(_, at, count)| (at, count))
    }

    /// Keeps `count` as `range`'s count at `revision`. A range keeps counts at up to
    /// [`COUNTS_PER_RANGE`] revisions (the one kept longest ago makes room), the table up to
    /// [`COUNTS_KEPT`] (likewise). Why several: scans that began together at revisions a few
    /// writes apart page through the same ranges in step; with one count per range, the
    /// scan at the later revision kept its count and the other, finding none at or before
    /// its own, counted the rest of the range again at every page (O(keys), seconds at 1M).
    pub(super) fn keep_count(&self, range: &KeyRange, revision: Revision, count: usize) {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.retain(|(r, at, _)| !(r == range && *at == revision));
        let of_range = counts.iter().filter(|(r, ..)| r == range).count();
        if of_range >= COUNTS_PER_RANGE {
            if let Some(oldest) = counts.iter().position(|(r, ..)| r == range) {
                counts.remove(oldest);
            }
        } else if counts.len() >= COUNTS_KEPT {
            counts.remove(0);
        }
        counts.push((range.clone(), revision, count));
    }

    /// Registers a view at `revision`; returns its pin id.
    pub(super) fn pin(&self, revision: Revision) -> u64 {
        let id = self.next_pin.fetch_add(1, Ordering::AcqRel);
        self.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, revision);
        id
    }

    /// The view `id` is done.
    pub(super) fn unpin(&self, id: u64) {
        self.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
    }

    fn pinned(&self) -> bool {
        !self.pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty()
    }

    /// Every change from revision `from` on that was published (the engine's through the
    /// head, those a compaction dropped before their flush, then the tail), oldest first,
    /// and the revision they reach. Unlike [`HistoryReader::read`] it ignores the compaction
    /// point: a read view pinned the history, so what it needs is still there.
    pub(super) fn pinned_changes_from(
        &self,
        engine: &dyn Engine,
        failure: &Failure,
        from: Revision,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<(Vec<Event>, Revision), EngineError> {
        let head = self.head();
        let (base, chunks) = {
            let tail = self.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (tail.base, tail.chunks.clone())
        };
        let through = self.tail_head.load(Ordering::Acquire).max(head);
        let mut events = Vec::new();
        let stored_through = base.min(head);
        if from <= stored_through {
            for event in changes(engine, from, stored_through) {
                // A failure is the replica's too (it stops), as for any read of the state.
                let Some(event) = failure.check(event) else {
                    let detail = failure.get().unwrap_or("unknown").to_string();
                    return Err(EngineError::Corrupt { what: "a history page".into(), detail });
                };
                // Only what the caller wants is kept: under a write load the changes since a
                // pinned revision outnumber the keys of the range by far.
                if wanted(&event) {
                    events.push(event);
                }
            }
        }
        {
            let retained = self.retained.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let kept = retained.iter().filter(|e| e.revision() >= from && e.revision() <= through && wanted(e));
            events.extend(kept.cloned());
        }
        let tail = chunks.iter().flat_map(|chunk| chunk.iter());
        let kept = tail.filter(|e| e.revision() > base && e.revision() >= from && e.revision() <= through && wanted(e));
        events.extend(kept.cloned());
        // The three sources may overlap (a change published in the tail, then dropped by a
        // compaction); a read view applies a change twice to the same effect, so only
        // the order matters.
        events.sort_by_key(Event::revision);
        Ok((events, through))
    }
}

/// The history's bookkeeping, stored with the state (see [`History::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct HistoryMeta {
    /// The compaction point.
    pub(super) compacted: Revision,
    /// The store revision.
    pub(super) head: Revision,
    /// The position of the last change.
    pub(super) last: (Revision, u32),
    /// Number of retained changes.
    pub(super) len: u64,
    /// Their size as the quota counts it.
    pub(super) bytes: u64,
}

/// The retained changes, oldest first: in the engine, with the changes recorded since the
/// last flush held in memory after them.
pub(super) struct History {
    engine: Arc<dyn Engine>,
    published: Arc<Published>,
    /// Changes recorded since the last flush, in order, with their positions.
    pending: Vec<((Revision, u32), Event)>,
    /// How many of `pending` are published in the tail ([`Self::publish_tail`]).
    tail_from: usize,
    /// Negative control: the tail is published without the compaction point.
    #[cfg(feature = "negative-controls")]
    tail_without_compaction: bool,
    /// Engine keys of compacted changes to delete at the next flush with no view pinned.
    dropped: Vec<Vec<u8>>,
    /// Pages wholly below the compaction point, deleted at a flush with no view pinned once
    /// no key's record names a change in them ([`super::live_changes`]); checked a few per
    /// flush, round robin.
    retiring: VecDeque<Retiring>,
    /// Negative control: pages below the compaction point are deleted even while a key's
    /// record names a change in them.
    #[cfg(feature = "negative-controls")]
    forget_live_values: bool,
    /// The position of the last change recorded (the next one at the same revision follows
    /// it; one at a new revision starts at 0).
    last: (Revision, u32),
    /// The compaction point: reads and watches below it are refused. 0 until the first
    /// compaction (everything since revision 1 is kept).
    compacted: Revision,
    /// The store revision as of the last command applied.
    head: Revision,
    /// Number of retained changes.
    len: usize,
    /// [`event_bytes`] of every retained change.
    bytes: u64,
    failure: Failure,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("compacted", &self.compacted)
            .field("head", &self.head)
            .field("len", &self.len)
            .finish()
    }
}

impl History {
    /// A history over `engine` holding `events` (in order, all at or above `compacted`,
    /// none above `head`; the caller checked), written to the engine, which holds no
    /// changes, in batches.
    pub(super) fn load(
        engine: Arc<dyn Engine>,
        failure: Failure,
        events: impl IntoIterator<Item = Event>,
        compacted: Revision,
        head: Revision,
    ) -> Result<Self, EngineError> {
        let mut history = History {
            engine,
            published: Arc::new(Published::default()),
            pending: Vec::new(),
            tail_from: 0,
            #[cfg(feature = "negative-controls")]
            tail_without_compaction: false,
            dropped: Vec::new(),
            retiring: VecDeque::new(),
            #[cfg(feature = "negative-controls")]
            forget_live_values: false,
            last: (0, 0),
            compacted,
            head,
            len: 0,
            bytes: 0,
            failure,
        };
        let mut batch = WriteBatch::new();
        let mut pages = PageWriter::default();
        for (n, event) in events.into_iter().enumerate() {
            let position = history.next_position(event.revision());
            history.len += 1;
            let size = event_bytes(&event);
            history.bytes += size;
            pages.push(&mut batch, position, &event, size);
            if (n + 1) % LOAD_BATCH == 0 {
                pages.finish(&mut batch);
                history.engine.write(std::mem::take(&mut batch))?;
            }
        }
        pages.finish(&mut batch);
        history.engine.write(batch)?;
        history.publish();
        Ok(history)
    }

    /// The history `engine` holds, as recorded with it: `len` changes taking `bytes` from
    /// `compacted` through `head`, the last at `last`.
    pub(super) fn open(engine: Arc<dyn Engine>, failure: Failure, recorded: HistoryMeta) -> Self {
        let history = History {
            engine,
            published: Arc::new(Published::default()),
            pending: Vec::new(),
            tail_from: 0,
            #[cfg(feature = "negative-controls")]
            tail_without_compaction: false,
            dropped: Vec::new(),
            retiring: VecDeque::new(),
            #[cfg(feature = "negative-controls")]
            forget_live_values: false,
            last: recorded.last,
            compacted: recorded.compacted,
            head: recorded.head,
            len: usize::try_from(recorded.len).unwrap_or(usize::MAX),
            bytes: recorded.bytes,
            failure,
        };
        history.publish();
        history
    }

    /// What [`Self::open`] needs to reopen this history, as of the last command applied.
    pub(super) fn meta(&self) -> HistoryMeta {
        HistoryMeta {
            compacted: self.compacted,
            head: self.head,
            last: self.last,
            len: self.len as u64,
            bytes: self.bytes,
        }
    }

    /// An empty history at revision 1 on an engine of its own in memory (tests).
    #[cfg(test)]
    pub(super) fn in_memory() -> Self {
        let engine: Arc<dyn Engine> = Arc::new(crate::engine::MemoryEngine::new());
        History::load(engine, Failure::default(), Vec::new(), 0, 1).expect("an empty memory engine")
    }

    /// This history on `engine`, a copy of its engine ([`crate::StateMachine::copy_in_memory`]).
    pub(super) fn copy_onto(&self, engine: &Arc<dyn Engine>, failure: &Failure) -> Self {
        let head = self.published.head.load(Ordering::Acquire);
        let published = Published {
            head: AtomicI64::new(head),
            compacted: AtomicI64::new(self.published.compacted.load(Ordering::Acquire)),
            tail: Mutex::new(Tail { base: head, chunks: Vec::new() }),
            tail_head: AtomicI64::new(head),
            ..Published::default()
        };
        History {
            engine: Arc::clone(engine),
            published: Arc::new(published),
            pending: self.pending.clone(),
            tail_from: 0,
            #[cfg(feature = "negative-controls")]
            tail_without_compaction: self.tail_without_compaction,
            dropped: self.dropped.clone(),
            retiring: self.retiring.clone(),
            #[cfg(feature = "negative-controls")]
            forget_live_values: self.forget_live_values,
            last: self.last,
            compacted: self.compacted,
            head: self.head,
            len: self.len,
            bytes: self.bytes,
            failure: failure.clone(),
        }
    }

    /// The position of a new change at `revision`.
    fn next_position(&mut self, revision: Revision) -> (Revision, u32) {
        // Revisions start at 1, so the initial (0, 0) never continues.
        let position = if self.last.0 == revision { (revision, self.last.1 + 1) } else { (revision, 0) };
        self.last = position;
        position
    }

    /// Lets readers on other threads see the head and the compaction point.
    fn publish(&self) {
        // The compaction point first: a reader that sees a new head and an old compaction
        // point would read changes that the same flush deleted. Reads check it again after.
        self.published.compacted.store(self.compacted, Ordering::Release);
        self.published.head.store(self.head, Ordering::Release);
        // After the head: a reader that finds the tail empty finds the engine through it.
        let mut tail = self.published.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *tail = Tail { base: self.head, chunks: Vec::new() };
        self.published.tail_head.store(self.head, Ordering::Release);
        drop(tail);
        if !self.published.pinned() {
            self.published.retained.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        }
    }

    /// Publishes the changes recorded since the last call (or flush) to watch readers,
    /// ahead of their engine write. Called between commands, so that every chunk holds
    /// whole revisions.
    pub(super) fn publish_tail(&mut self) {
        // The compaction point too, before the head: a compaction drops pending changes
        // that will never reach the engine, so a reader must refuse what is below it from
        // the moment the tail moves past it.
        #[cfg(feature = "negative-controls")]
        let with_compaction = !self.tail_without_compaction;
        #[cfg(not(feature = "negative-controls"))]
        let with_compaction = true;
        if with_compaction {
            self.published.compacted.store(self.compacted, Ordering::Release);
        }
        let fresh = &self.pending[self.tail_from.min(self.pending.len())..];
        if fresh.is_empty() && self.published.tail_head.load(Ordering::Acquire) == self.head {
            return;
        }
        let chunk: Arc<[Event]> = fresh.iter().map(|(_, e)| e.clone()).collect();
        self.tail_from = self.pending.len();
        let mut tail = self.published.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !chunk.is_empty() {
            tail.chunks.push(chunk);
        }
        self.published.tail_head.store(self.head, Ordering::Release);
    }

    /// Adds the changes since the last flush, and the deletions of compacted ones, to
    /// `batch`. `live` names the changes that key records hold as their values, after the
    /// key space's part of the same batch: their pages stay. Once the caller wrote the
    /// batch, [`Self::published`] lets readers see it.
    pub(super) fn flush_into(&mut self, batch: &mut WriteBatch, live: &mut LiveChanges) {
        if !self.published.pinned() {
            // A few at a time: deleting a change loads its page, long out of sled's cache,
            // and the auto-compactor's thousands at once stalled the node loop for 60-220 ms
            // every second. The rest wait for the next flush (or, after a crash, for
            // `drop_leftovers`); reads below the compaction point are refused meanwhile.
            let now = self.dropped.len().min(DELETES_PER_FLUSH);
            let mut deletes = now;
            for key in self.dropped.drain(..now) {
                batch.delete(key);
            }
            for _ in 0..self.retiring.len().min(RETIRING_CHECKS_PER_FLUSH) {
                if deletes >= DELETES_PER_FLUSH {
                    break;
                }
                let Some(page) = self.retiring.pop_front() else { break };
                #[cfg(feature = "negative-controls")]
                if self.forget_live_values {
                    batch.delete(page.key);
                    deletes += 1;
                    continue;
                }
                match live.any_between(page.first, page.last) {
                    Some(false) => {
                        batch.delete(page.key);
                        deletes += 1;
                    }
                    // A key's value is in it (or that is not known yet): checked again later.
                    _ => self.retiring.push_back(page),
                }
            }
        }
        let mut pages = PageWriter::default();
        for (position, event) in self.pending.drain(..) {
            crate::progress::tick();
            pages.push(batch, position, &event, event_bytes(&event));
        }
        // The tail keeps what it published until `published` resets it with the new head.
        self.tail_from = 0;
        pages.finish(batch);
        // Readers must not look for compacted changes while the batch deletes them.
        self.published.compacted.store(self.compacted, Ordering::Release);
    }

    /// The batch of [`Self::flush_into`] is in the engine: readers may read through the head.
    pub(super) fn published(&self) {
        self.publish();
    }

    /// Negative control: [`Self::publish_tail`] leaves the compaction point behind, so a
    /// reader reads on past changes a compaction dropped before they reached the engine.
    #[cfg(feature = "negative-controls")]
    pub(super) fn break_tail_compaction(&mut self) {
        self.tail_without_compaction = true;
    }

    /// Negative control: compaction deletes pages that hold the value of a key.
    #[cfg(feature = "negative-controls")]
    pub(super) fn break_live_values(&mut self) {
        self.forget_live_values = true;
    }

    /// Writes what is pending straight to the engine and publishes it (tests).
    #[cfg(test)]
    pub(super) fn flush(&mut self) {
        let mut batch = WriteBatch::new();
        self.flush_into(&mut batch, &mut LiveChanges::default());
        self.engine.write(batch).expect("a memory engine does not fail");
        self.published();
    }

    /// What readers on other threads see of this history, and the views pinned on it.
    pub(super) fn published_state(&self) -> &Arc<Published> {
        &self.published
    }

    /// Queues `pages`, history records wholly below the compaction point written beside
    /// the history (a peer's snapshot sends the pages that hold its keys' values), to be
    /// deleted once no key names a change in them.
    pub(super) fn retire_when_unnamed(&mut self, pages: Vec<Retiring>) {
        self.retiring.extend(pages);
    }

    /// The engine keys of changes and pages wholly below the compaction point still stored
    /// (a view kept them when the state stopped, or their deletion was spread over flushes
    /// that did not happen), and of the size runs wholly below it: deleted at the next
    /// flushes.
    pub(super) fn drop_leftovers(&mut self) {
        if let Some(pages) = self.failure.check(records_below(self.engine.as_ref(), self.compacted)) {
            self.retiring.extend(pages);
        }
        for entry in Scan::new(self.engine.as_ref(), runs_starting_below(self.compacted), false, PAGE) {
            let Some((key, record)) = self.failure.check(entry) else { break };
            let Some(run) = self.failure.check(decode_run(&key, &record)) else { break };
            if run.last().is_none_or(|last| last.main < self.compacted) {
                self.dropped.push(key);
            }
        }
        self.convert_sizes();
    }

    /// Writes the size runs of the retained changes if the engine holds changes but no
    /// runs (a state written before sizes were recorded), or still holds per-change size
    /// records (the layout before runs): read once, at the open. A crash part way leaves
    /// the per-change records (deleted last), and the next open starts over.
    fn convert_sizes(&mut self) {
        let first = |bounds| Scan::new(self.engine.as_ref(), bounds, false, 1).next();
        let legacy = first(legacy_sizes()).is_some();
        let has_runs = first(all_runs()).is_some();
        let has_changes = first(event_bounds(self.compacted, Revision::MAX)).is_some();
        if !legacy && (has_runs || !has_changes) {
            return;
        }
        let mut batch = WriteBatch::new();
        let write = |batch: &mut WriteBatch, force: bool| {
            if force || batch.len() >= LOAD_BATCH {
                self.failure.check(self.engine.write(std::mem::take(batch))).is_some()
            } else {
                true
            }
        };
        for entry in Scan::new(self.engine.as_ref(), all_runs(), false, PAGE) {
            let Some((key, _)) = self.failure.check(entry) else { return };
            batch.delete(key);
            if !write(&mut batch, false) {
                return;
            }
        }
        let mut sizes = RunWriter::default();
        for entry in Scan::new(self.engine.as_ref(), event_bounds(self.compacted, Revision::MAX), false, PAGE) {
            let Some((key, record)) = self.failure.check(entry) else { return };
            let Some(events) = self.failure.check(decode_page(&key, &record)) else { return };
            let Some((main, sub)) = event_position(&key) else { continue };
            if events.len() == 1 && record.first() != Some(&super::layout::PAGE_FORMAT) {
                sizes.push(&mut batch, main, sub, event_bytes(&events[0]));
            } else {
                // A page (runs came before pages, so only a state damaged by hand has pages
                // and no runs): its run again, positions counted as a flush counts them.
                let mut position = (main, sub);
                let mut entries = Vec::with_capacity(events.len());
                for event in &events {
                    if event.revision() != position.0 {
                        position = (event.revision(), 0);
                    }
                    entries.push(super::size_runs::SizeEntry {
                        main: position.0,
                        sub: position.1,
                        bytes: event_bytes(event),
                    });
                    position.1 += 1;
                }
                RunWriter::write_page_run(&mut batch, &entries);
            }
            if batch.len() >= LOAD_BATCH {
                sizes.finish(&mut batch);
                if !write(&mut batch, true) {
                    return;
                }
            }
        }
        sizes.finish(&mut batch);
        if !write(&mut batch, true) {
            return;
        }
        for entry in Scan::new(self.engine.as_ref(), legacy_sizes(), false, PAGE) {
            let Some((key, record)) = self.failure.check(entry) else { return };
            // Read to report a damaged record rather than delete it unseen.
            if self.failure.check(decode_legacy(&key, &record)).is_none() {
                return;
            }
            batch.delete(key);
            if !write(&mut batch, false) {
                return;
            }
        }
        write(&mut batch, true);
    }

    /// A handle that watch streams read the history through, following it as it grows.
    pub(super) fn reader(&self) -> HistoryReader {
        HistoryReader {
            engine: Arc::clone(&self.engine),
            published: Arc::clone(&self.published),
            failure: self.failure.clone(),
        }
    }

    /// The compaction point (0 if never compacted).
    pub(super) fn compacted(&self) -> Revision {
        self.compacted
    }

    /// Number of retained changes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Every retained change, oldest first (for snapshots and hashes).
    pub(super) fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.events_from(self.compacted)
    }

    /// Every retained change at revision `from` or later, oldest first, flushed or not.
    pub(super) fn events_from(&self, from: Revision) -> impl Iterator<Item = Event> + '_ {
        let failure = &self.failure;
        let from = from.max(self.compacted);
        let stored = changes(self.engine.as_ref(), from, Revision::MAX).map_while(move |e| failure.check(e));
        stored.chain(self.pending.iter().filter(move |(_, e)| e.revision() >= from).map(|(_, e)| e.clone()))
    }

    /// Records a put of `kv`, which replaced `prev`.
    pub(super) fn put(&mut self, kv: KeyValue, prev: Option<KeyValue>) {
        self.record(Event { kind: EventKind::Put, kv, prev_kv: prev });
    }

    /// Records the deletion at `revision` of `prev`, a live key.
    pub(super) fn delete(&mut self, prev: KeyValue, revision: Revision) {
        let event = Event { kind: EventKind::Delete, kv: tombstone(&prev.key, revision), prev_kv: Some(prev) };
        self.record(event);
    }

    fn record(&mut self, event: Event) {
        let position = self.next_position(event.revision());
        self.bytes += event_bytes(&event);
        self.len += 1;
        self.pending.push((position, event));
    }

    /// Bytes the retained changes count toward the space quota.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The store revision after a command (published to readers with the next tail or flush).
    pub(super) fn set_head(&mut self, revision: Revision) {
        self.head = revision;
    }

    /// Drops every change below `revision`, which the caller checked is above the current
    /// compaction point and at most the store revision. Returns how many were dropped.
    pub(super) fn compact(&mut self, revision: Revision) -> usize {
        let mut dropped = 0;
        // The size runs, not the changes: a few bytes a change, where a change holds values.
        // A run straddling the old point was read by the compaction before; its entries
        // below that point are gone already.
        for entry in Scan::new(self.engine.as_ref(), runs_starting_below(revision), false, PAGE) {
            let Some((key, record)) = self.failure.check(entry) else { break };
            let Some(run) = self.failure.check(decode_run(&key, &record)) else { break };
            if run.last().is_some_and(|last| last.main < self.compacted) {
                // Queued already, by the compaction that passed it or at the open.
                continue;
            }
            for change in run.entries.iter().filter(|c| c.main >= self.compacted && c.main < revision) {
                self.bytes = self.bytes.saturating_sub(change.bytes);
                if !run.paged {
                    self.dropped.push(change.event_key());
                }
                dropped += 1;
            }
            if run.last().is_none_or(|last| last.main < revision) {
                // A page that reaches the point stays whole; readers skip what is below it.
                // A page wholly below it goes once no key's value is in it.
                if let (Some(page), Some(first), Some(last)) = (run.page_key(), run.entries.first(), run.last()) {
                    self.retiring.push_back(Retiring { key: page, first: first.main, last: last.main });
                }
                self.dropped.push(key);
            }
        }
        let keep_from = self.pending.partition_point(|(_, e)| e.revision() < revision);
        self.tail_from = self.tail_from.saturating_sub(keep_from);
        let mut retained = self.published.retained.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, event) in self.pending.drain(..keep_from) {
            self.bytes -= event_bytes(&event);
            dropped += 1;
            retained.push(event);
        }
        drop(retained);
        self.len -= dropped;
        self.compacted = revision;
        dropped
    }

    /// Turns `current`, the live key-values in `range` now, into the ones that were live at
    /// `revision` (at or above the compaction point): every change after `revision` to a key
    /// in `range` is undone, newest first.
    pub(super) fn rewind(
        &self,
        mut current: BTreeMap<Vec<u8>, KeyValue>,
        range: &KeyRange,
        revision: Revision,
    ) -> BTreeMap<Vec<u8>, KeyValue> {
        let failure = &self.failure;
        let pending = self.pending.iter().rev().map(|(_, e)| e.clone());
        let stored = changes_newest_first(self.engine.as_ref()).map_while(move |e| failure.check(e));
        for event in pending.chain(stored).take_while(|e| e.revision() > revision) {
            if !range.contains(&event.kv.key) {
                continue;
            }
            match &event.prev_kv {
                Some(prev) => current.insert(prev.key.clone(), prev.clone()),
                None => current.remove(&event.kv.key),
            };
        }
        current
    }
}

/// What [`HistoryReader::read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryRead {
    /// The changes from the revision asked for through `through`, whole revisions only.
    Events {
        /// The changes, oldest first.
        events: Vec<Event>,
        /// Every change up to this revision is in `events` (the store revision, unless the
        /// batch was cut short).
        through: Revision,
    },
    /// The revision asked for is below the compaction point, which is this.
    Compacted(Revision),
}

/// A read-only handle on a state machine's history for watch streams, which may run on
/// other threads than the one applying commands. It follows the history as it grows and is
/// compacted, through what the state machine published (its writes that reached the
/// engine, then the tail of changes published since); after a snapshot is installed the state machine has a new history, and its
/// driver takes a new reader ([`crate::StateMachine::history_reader`]).
#[derive(Clone)]
pub struct HistoryReader {
    engine: Arc<dyn Engine>,
    published: Arc<Published>,
    failure: Failure,
}

impl std::fmt::Debug for HistoryReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryReader").field("head", &self.head()).field("compacted", &self.compacted()).finish()
    }
}

impl HistoryReader {
    /// The store revision: every change up to it can be read (from the engine, and after it
    /// from the published tail).
    pub fn head(&self) -> Revision {
        self.published.tail_head.load(Ordering::Acquire)
    }

    /// The compaction point: reads from below it are refused.
    pub fn compacted(&self) -> Revision {
        self.published.compacted.load(Ordering::Acquire)
    }

    /// The changes at revision `from` and later, in order, stopping after the revision at
    /// which at least `max_events` were collected (a revision is never cut: one revision's
    /// changes always come together, however many there are).
    pub fn read(&self, from: Revision, max_events: usize) -> HistoryRead {
        // The head first, then the tail: a tail published after the head was read may
        // reach further, and is read only through the head.
        let head = self.head();
        let (base, chunks) = {
            let tail = self.published.tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            (tail.base, tail.chunks.clone())
        };
        let compacted = self.compacted();
        if from < compacted {
            return HistoryRead::Compacted(compacted);
        }
        let mut events: Vec<Event> = Vec::new();
        let mut through = head;
        if from <= head {
            // Only what was published, whole revisions: the engine through `base` (what the
            // last flush wrote), then the tail, whose chunks hold whole revisions; a stream
            // that read part of a revision would send the rest again, whole, once the head
            // moved past it.
            //
            // Collects `event`; false once a revision is complete past `max_events` (the
            // read stops there, through the last revision taken).
            let mut take = |event: Event, events: &mut Vec<Event>| {
                if events.len() >= max_events && events.last().is_some_and(|e| e.revision() != event.revision()) {
                    through = events.last().map_or(head, Event::revision);
                    return false;
                }
                events.push(event);
                true
            };
            let mut going = true;
            // `base` may be past `head` when a flush came between the two loads: the
            // engine then holds everything through `head`.
            let stored_through = base.min(head);
            if from <= stored_through {
                for entry in changes(self.engine.as_ref(), from, stored_through) {
                    // A failed read (recorded in `failure`, which the caller reports) ends
                    // the read here: the tail must not follow a gap.
                    let Some(event) = self.failure.check(entry) else {
                        going = false;
                        break;
                    };
                    going = take(event, &mut events);
                    if !going {
                        break;
                    }
                }
            }
            if going {
                let applied = chunks.iter().flat_map(|chunk| chunk.iter());
                for event in applied.filter(|e| e.revision() > base && e.revision() >= from && e.revision() <= head) {
                    if !take(event.clone(), &mut events) {
                        break;
                    }
                }
            }
        }
        // A compaction published meanwhile may have deleted some of what was asked for.
        let compacted = self.compacted();
        if from < compacted {
            return HistoryRead::Compacted(compacted);
        }
        HistoryRead::Events { events, through }
    }

    /// Whether `other` reads the same history (it is a handle on the same state machine).
    pub fn same_as(&self, other: &HistoryReader) -> bool {
        Arc::ptr_eq(&self.published, &other.published)
    }
}

/// etcd's tombstone: the key and the revision of its deletion, nothing else.
fn tombstone(key: &[u8], revision: Revision) -> KeyValue {
    KeyValue { key: key.to_vec(), value: Vec::new(), create_revision: 0, mod_revision: revision, version: 0, lease: 0 }
}

#[cfg(test)]
mod tests;
