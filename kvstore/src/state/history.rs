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

use crate::types::{Event, EventKind, KeyRange, KeyValue, Revision};
use std::collections::{BTreeMap, VecDeque};

/// The retained changes, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    /// Every change with revision `>= compacted`, in `(main, sub)` order.
    events: VecDeque<Event>,
    /// The compaction point: reads and watches below it are refused. 0 until the first
    /// compaction (everything since revision 1 is kept).
    compacted: Revision,
}

/// A read or watch asked for a revision the history no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Compacted(pub(super) Revision);

impl History {
    /// A history holding `events` (in order, all at or above `compacted`; the caller checked).
    pub(super) fn from_parts(events: Vec<Event>, compacted: Revision) -> Self {
        History { events: events.into(), compacted }
    }

    /// The compaction point (0 if never compacted).
    pub(super) fn compacted(&self) -> Revision {
        self.compacted
    }

    /// Number of retained changes.
    pub(super) fn len(&self) -> usize {
        self.events.len()
    }

    /// Every retained change, oldest first (for snapshots).
    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = &Event> + '_ {
        self.events.iter()
    }

    /// Records a put at `revision` of `kv` (already stored), which replaced `prev`.
    pub(super) fn put(&mut self, kv: KeyValue, prev: Option<KeyValue>) {
        self.events.push_back(Event { kind: EventKind::Put, kv, prev_kv: prev });
    }

    /// Records the deletion at `revision` of `prev`, a live key.
    pub(super) fn delete(&mut self, prev: KeyValue, revision: Revision) {
        self.events.push_back(Event {
            kind: EventKind::Delete,
            kv: tombstone(&prev.key, revision),
            prev_kv: Some(prev),
        });
    }

    /// Drops every change below `revision`, which the caller checked is above the current
    /// compaction point and at most the store revision. Returns how many were dropped.
    pub(super) fn compact(&mut self, revision: Revision) -> usize {
        let keep_from = self.first_at_or_after(revision);
        self.events.drain(..keep_from);
        self.compacted = revision;
        keep_from
    }

    /// The index of the first change at revision `revision` or later.
    fn first_at_or_after(&self, revision: Revision) -> usize {
        self.events.partition_point(|e| e.kv.mod_revision < revision)
    }

    /// The changes at revision `from` and later, oldest first, or [`Compacted`] when `from`
    /// is below the compaction point.
    pub(super) fn since(&self, from: Revision) -> Result<impl Iterator<Item = &Event> + '_, Compacted> {
        if from < self.compacted {
            return Err(Compacted(self.compacted));
        }
        Ok(self.events.range(self.first_at_or_after(from)..))
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
        let after = self.first_at_or_after(revision + 1);
        for event in self.events.range(after..).rev() {
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
        let mut h = History::default();
        h.put(kv("a", "1", 2, 2, 1), None);
        h.put(kv("b", "1", 3, 3, 1), None);
        h.put(kv("a", "2", 2, 4, 2), Some(kv("a", "1", 2, 2, 1)));
        h.delete(kv("b", "1", 3, 3, 1), 5);
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
        let left: Vec<_> = h.since(5).unwrap().map(|e| (e.kind, e.kv.mod_revision)).collect();
        assert_eq!(left, vec![(EventKind::Delete, 5)]);
        assert_eq!(h.since(4).err(), Some(Compacted(5)));
        assert_eq!(h.since(9).unwrap().count(), 0);
    }

    #[test]
    fn since_starts_at_the_first_change_of_a_revision() {
        let h = sample();
        let revs: Vec<_> = h.since(3).unwrap().map(|e| e.kv.mod_revision).collect();
        assert_eq!(revs, vec![3, 4, 5]);
    }
}
