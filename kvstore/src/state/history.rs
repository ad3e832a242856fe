//! The MVCC history: every change to the key space since the compaction point, in revision
//! order, as etcd's watch events.
//!
//! etcd keeps every revision of every key in its backend and a key index of generations; a
//! read at a past revision looks up each key's newest revision at or below it. leasekv keeps
//! the current key space (the B-tree of [`super::keyspace`]) plus this window of changes,
//! each carrying the key's value before it. A read at revision `R` takes the current keys
//! in the range and undoes, newest first, every change after `R`; a watch replays the
//! changes themselves. So memory is the live keys plus the retained window, and compaction
//! is dropping the front of a queue.
//!
//! Revisions are etcd's `(main, sub)`: `main` is the event's `mod_revision` (one per writing
//! transaction), `sub` its position among the changes of that transaction, which is its
//! position in the queue.
//!
//! Compaction at `C` drops the changes below `C` and keeps every change *at* `C`: a read or
//! a watch from exactly `C` is allowed (as in etcd), and needs them, tombstones included
//! (etcd's bugs #18089/#19179 lost a delete at the compaction revision).

use super::keyspace::stored_bytes;
use crate::types::{Event, EventKind, KeyRange, KeyValue, Revision};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Below this capacity a compacted window's queue is not shrunk (regrowing would cost more).
const MIN_SHRINK_CAPACITY: usize = 1024;

/// The retained changes and where they end. Shared (behind a lock) between the state
/// machine, which appends, and the [`HistoryReader`]s of watch streams, which copy bounded
/// batches out; a writer waits at most for one such copy.
#[derive(Debug, Clone, Default)]
struct Window {
    /// Every change with revision `>= compacted`, in `(main, sub)` order.
    events: VecDeque<Event>,
    /// The compaction point: reads and watches below it are refused. 0 until the first
    /// compaction (everything since revision 1 is kept).
    compacted: Revision,
    /// The store revision: every change up to it is in `events` (or compacted away).
    head: Revision,
    /// [`event_bytes`] of every retained change.
    bytes: u64,
}

/// What one retained change counts toward the space quota: the key-values it carries.
fn event_bytes(event: &Event) -> u64 {
    stored_bytes(&event.kv) + event.prev_kv.as_ref().map_or(0, stored_bytes)
}

impl Window {
    /// The index of the first change at revision `revision` or later.
    fn first_at_or_after(&self, revision: Revision) -> usize {
        self.events.partition_point(|e| e.kv.mod_revision < revision)
    }
}

/// The retained changes, oldest first.
#[derive(Debug)]
pub(super) struct History {
    window: Arc<RwLock<Window>>,
}

impl Clone for History {
    /// A separate copy: a cloned state machine must not share its history with the original.
    fn clone(&self) -> Self {
        History { window: Arc::new(RwLock::new(self.read().clone())) }
    }
}

impl History {
    /// A history holding `events` (in order, all at or above `compacted`, none above `head`;
    /// the caller checked).
    pub(super) fn from_parts(events: Vec<Event>, compacted: Revision, head: Revision) -> Self {
        let bytes = events.iter().map(event_bytes).sum();
        History { window: Arc::new(RwLock::new(Window { events: events.into(), compacted, head, bytes })) }
    }

    // A panic while the lock is held can only come from a bug in this module (the
    // critical sections copy or push values), so a poisoned lock still holds a
    // consistent window.
    fn read(&self) -> RwLockReadGuard<'_, Window> {
        self.window.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Window> {
        self.window.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A handle that watch streams read the history through, following it as it grows.
    pub(super) fn reader(&self) -> HistoryReader {
        HistoryReader { window: Arc::clone(&self.window) }
    }

    /// The compaction point (0 if never compacted).
    pub(super) fn compacted(&self) -> Revision {
        self.read().compacted
    }

    /// Number of retained changes.
    pub(super) fn len(&self) -> usize {
        self.read().events.len()
    }

    /// Calls `f` with every retained change, oldest first (for snapshots).
    pub(super) fn with_events<T>(&self, f: impl FnOnce(&VecDeque<Event>) -> T) -> T {
        f(&self.read().events)
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
        let mut w = self.write();
        w.bytes += event_bytes(&event);
        w.events.push_back(event);
    }

    /// Bytes the retained changes count toward the space quota.
    pub(super) fn bytes(&self) -> u64 {
        self.read().bytes
    }

    /// Publishes the store revision after a command: readers see its changes from now on.
    pub(super) fn set_head(&mut self, revision: Revision) {
        self.write().head = revision;
    }

    /// Drops every change below `revision`, which the caller checked is above the current
    /// compaction point and at most the store revision. Returns how many were dropped.
    pub(super) fn compact(&mut self, revision: Revision) -> usize {
        let mut w = self.write();
        let keep_from = w.first_at_or_after(revision);
        let dropped: u64 = w.events.drain(..keep_from).map(|e| event_bytes(&e)).sum();
        w.bytes -= dropped;
        // A queue never gives back what a burst made it grow to; without this, a window
        // that once held a million changes would keep their slots (168 bytes each) forever.
        let len = w.events.len();
        if w.events.capacity() > 4 * len.max(MIN_SHRINK_CAPACITY) {
            w.events.shrink_to(2 * len);
        }
        w.compacted = revision;
        keep_from
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
        let w = self.read();
        let after = w.first_at_or_after(revision + 1);
        for event in w.events.range(after..).rev() {
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
/// compacted; after a snapshot is installed the state machine has a new history, and its
/// driver takes a new reader ([`crate::StateMachine::history_reader`]).
#[derive(Debug, Clone)]
pub struct HistoryReader {
    window: Arc<RwLock<Window>>,
}

impl HistoryReader {
    fn read_window(&self) -> RwLockReadGuard<'_, Window> {
        self.window.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The store revision: every change up to it can be read.
    pub fn head(&self) -> Revision {
        self.read_window().head
    }

    /// The compaction point: reads from below it are refused.
    pub fn compacted(&self) -> Revision {
        self.read_window().compacted
    }

    /// The changes at revision `from` and later, in order, stopping after the revision at
    /// which at least `max_events` were collected (a revision is never cut: one revision's
    /// changes always come together, however many there are).
    pub fn read(&self, from: Revision, max_events: usize) -> HistoryRead {
        let w = self.read_window();
        if from < w.compacted {
            return HistoryRead::Compacted(w.compacted);
        }
        let mut events = Vec::new();
        let mut through = w.head;
        // The changes of a command being applied are in the window before its revision is
        // published as the head (a command records them one by one): a stream that read
        // them now would get them again, whole, once the head moved past them.
        let published = w.first_at_or_after(w.head.saturating_add(1));
        let start = w.first_at_or_after(from).min(published);
        for event in w.events.range(start..published) {
            if events.len() >= max_events && events.last().is_some_and(|e: &Event| e.revision() != event.revision()) {
                through = events.last().map_or(w.head, Event::revision);
                break;
            }
            events.push(event.clone());
        }
        HistoryRead::Events { events, through }
    }

    /// Whether `other` reads the same history (it is a handle on the same state machine).
    pub fn same_as(&self, other: &HistoryReader) -> bool {
        Arc::ptr_eq(&self.window, &other.window)
    }
}

/// etcd's tombstone: the key and the revision of its deletion, nothing else.
fn tombstone(key: &[u8], revision: Revision) -> KeyValue {
    KeyValue { key: key.to_vec(), value: Vec::new(), create_revision: 0, mod_revision: revision, version: 0, lease: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create: Revision, revision: Revision, version: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: create,
            mod_revision: revision,
            version,
            lease: 0,
        }
    }

    /// a=1@2, b=1@3, a=2@4, delete b@5.
    fn sample() -> History {
        let mut h = History::from_parts(Vec::new(), 0, 1);
        h.put(kv("a", "1", 2, 2, 1), None);
        h.put(kv("b", "1", 3, 3, 1), None);
        h.put(kv("a", "2", 2, 4, 2), Some(kv("a", "1", 2, 2, 1)));
        h.delete(kv("b", "1", 3, 3, 1), 5);
        h.set_head(5);
        h
    }

    fn now() -> BTreeMap<Vec<u8>, KeyValue> {
        [(b"a".to_vec(), kv("a", "2", 2, 4, 2))].into_iter().collect()
    }

    #[test]
    fn rewind_undoes_every_later_change_in_the_range() {
        let h = sample();
        let all = KeyRange::between(vec![0], vec![0]);
        let at3 = h.rewind(now(), &all, 3);
        assert_eq!(at3.values().cloned().collect::<Vec<_>>(), vec![kv("a", "1", 2, 2, 1), kv("b", "1", 3, 3, 1)]);
        assert!(h.rewind(now(), &all, 1).is_empty());
        assert_eq!(h.rewind(now(), &all, 5), now());
        // A change outside the range is left alone.
        let only_b = h.rewind(BTreeMap::new(), &KeyRange::single("b"), 4);
        assert_eq!(only_b.len(), 1);
    }

    #[test]
    fn compaction_keeps_the_changes_at_its_revision() {
        let mut h = sample();
        assert_eq!(h.compact(5), 3);
        assert_eq!(h.compacted(), 5);
        let r = h.reader();
        let HistoryRead::Events { events, through } = r.read(5, 100) else { panic!("compacted") };
        let left: Vec<_> = events.iter().map(|e| (e.kind, e.kv.mod_revision)).collect();
        assert_eq!((left, through), (vec![(EventKind::Delete, 5)], 5));
        assert_eq!(r.read(4, 100), HistoryRead::Compacted(5));
        assert_eq!(r.read(9, 100), HistoryRead::Events { events: Vec::new(), through: 5 });
    }

    #[test]
    fn reads_start_at_the_first_change_of_a_revision_and_never_cut_one() {
        let mut h = sample();
        h.put(kv("c", "1", 5, 5, 1), None);
        h.set_head(5);
        let revs = |from, max| match h.reader().read(from, max) {
            HistoryRead::Events { events, through } => {
                (events.iter().map(|e| e.revision()).collect::<Vec<_>>(), through)
            }
            HistoryRead::Compacted(c) => panic!("compacted at {c}"),
        };
        assert_eq!(revs(3, 100), (vec![3, 4, 5, 5], 5));
        assert_eq!(revs(3, 1), (vec![3], 3));
        // Revision 5 has two changes: a batch that reaches it takes both.
        assert_eq!(revs(5, 1), (vec![5, 5], 5));
        assert_eq!(revs(4, 2), (vec![4, 5, 5], 5));
    }

    /// A watch stream reads on its own thread while the state machine applies: the changes
    /// of the command being applied are already in the window, its revision not yet
    /// published. Read then, they were sent, and sent again once the head moved (a
    /// duplicate event, and a revision split over two responses, seen by the chaos run).
    #[test]
    fn a_read_between_a_commands_changes_and_its_head_stops_at_the_head() {
        let mut h = sample();
        let reader = h.reader();
        h.put(kv("c", "1", 6, 6, 1), None);
        h.put(kv("d", "1", 6, 6, 1), None);
        assert_eq!(reader.read(2, 100), HistoryRead::Events { events: reader_events(&h, 2, 5), through: 5 });
        assert_eq!(reader.read(6, 100), HistoryRead::Events { events: Vec::new(), through: 5 });
        h.set_head(6);
        let HistoryRead::Events { events, through } = reader.read(6, 100) else { panic!("compacted") };
        assert_eq!((events.len(), through), (2, 6));
    }

    /// The retained changes from `from` through `to`, straight from the window.
    fn reader_events(h: &History, from: Revision, to: Revision) -> Vec<Event> {
        h.with_events(|events| events.iter().filter(|e| (from..=to).contains(&e.revision())).cloned().collect())
    }
}
