//! The key space: every live key with its value and etcd bookkeeping, in key order.
//!
//! Keys are stored once: the ordered set holds whole [`KeyValue`]s and orders them by their
//! own `key` field (through [`Entry`]'s `Borrow<[u8]>`), so there is no second copy of the
//! key as a map key. Reads by key or by range are B-tree lookups, never scans of the whole
//! set.
//!
//! The set may also hold *dead* keys: keys of a revoked or expired lease that the
//! [`Graveyard`] has not swept yet. Every method except the ones named "stored" hides them, so
//! that callers see exactly the key space etcd would have after the lease's revocation.

use super::graveyard::{Death, Graveyard};
use crate::command::{RangeRequest, RangeResponse};
use crate::error::KvError;
use crate::types::{KeyRange, KeyValue, LeaseId, Revision};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

/// A stored key-value, ordered and compared by its key alone.
#[derive(Debug, Clone)]
pub(super) struct Entry(pub(super) KeyValue);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

// Consistent with `Ord`: both order by the key bytes, which `BTreeSet` lookups by `&[u8]`
// rely on.
impl Borrow<[u8]> for Entry {
    fn borrow(&self) -> &[u8] {
        &self.0.key
    }
}

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

/// Every live key in key order, plus the dead keys still to be swept.
#[derive(Debug, Clone, Default)]
pub(super) struct Keyspace {
    /// Live and dead keys alike: a dead key stays here until swept, overwritten or deleted.
    entries: BTreeSet<Entry>,
    /// Which of `entries` are dead.
    graveyard: Graveyard,
    /// [`stored_bytes`] of every entry, dead ones included (they take memory until swept).
    bytes: u64,
}

/// What one stored key-value counts toward the space quota: its key and value, plus an
/// allowance for its revisions, version, lease and its place in the B-tree.
pub(super) fn stored_bytes(kv: &KeyValue) -> u64 {
    const OVERHEAD: u64 = 64;
    (kv.key.len() + kv.value.len()) as u64 + OVERHEAD
}

impl Keyspace {
    /// A key space holding `kvs`, which are in strictly increasing key order (the B-tree is
    /// then bulk-built instead of inserted into key by key), of which the ones in `graveyard`
    /// are dead (the caller checked that they agree).
    pub(super) fn from_sorted(kvs: Vec<KeyValue>, graveyard: Graveyard) -> Self {
        let bytes = kvs.iter().map(stored_bytes).sum();
        Keyspace { entries: kvs.into_iter().map(Entry).collect(), graveyard, bytes }
    }

    /// Bytes the stored keys count toward the space quota (see [`stored_bytes`]).
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of live keys.
    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.graveyard.pending()
    }

    /// Number of dead keys still stored.
    pub(super) fn pending(&self) -> usize {
        self.graveyard.pending()
    }

    /// One live key. O(log n): one B-tree lookup plus, only while something is buried, one
    /// lookup among the deaths.
    pub(super) fn get(&self, key: &[u8]) -> Option<&KeyValue> {
        self.entries.get(key).map(|e| &e.0).filter(|kv| !self.graveyard.is_dead(kv))
    }

    /// Removes one key and hands it back if it was live. A dead key is removed too (it is
    /// there anyway) but reported as absent, as it is for readers.
    pub(super) fn take(&mut self, key: &[u8]) -> Option<KeyValue> {
        let kv = self.entries.take(key)?.0;
        self.bytes -= stored_bytes(&kv);
        if self.graveyard.is_dead(&kv) {
            self.graveyard.forget(&kv);
            return None;
        }
        Some(kv)
    }

    /// Stores `kv` (a live key: written now), replacing and returning any live key-value
    /// with the same key; a dead one it replaces is dropped silently.
    pub(super) fn replace(&mut self, kv: KeyValue) -> Option<KeyValue> {
        self.bytes += stored_bytes(&kv);
        let old = self.entries.replace(Entry(kv))?.0;
        self.bytes -= stored_bytes(&old);
        if self.graveyard.is_dead(&old) {
            self.graveyard.forget(&old);
            return None;
        }
        Some(old)
    }

    /// Every stored key-value in key order, dead ones included (for snapshots, which keep
    /// the sweep's work list).
    pub(super) fn stored(&self) -> impl ExactSizeIterator<Item = &KeyValue> + '_ {
        self.entries.iter().map(|e| &e.0)
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
        let entries = &mut self.entries;
        let bytes = &mut self.bytes;
        self.graveyard.sweep(budget, |key, (id, revision)| {
            // The graveyard's invariant says the stored key is still the dead one; checking
            // costs one comparison and guarantees a live key is never swept.
            if entries.get(key).is_some_and(|e| e.0.lease == id && e.0.mod_revision < revision) {
                if let Some(swept) = entries.take(key) {
                    *bytes -= stored_bytes(&swept.0);
                }
            }
        })
    }

    /// Checks that the graveyard's work list is exactly the dead stored keys (tests only).
    #[cfg(test)]
    pub(super) fn check_graveyard(&self) {
        self.graveyard.check();
        let mut dead = 0;
        for kv in self.stored() {
            if let Some(death) = self.graveyard.death_of(kv) {
                assert!(self.graveyard.holds(death, &kv.key), "dead key {kv:?} is not on {death:?}'s list");
                dead += 1;
            }
        }
        // Every dead key is listed once and the lists hold nothing else.
        assert_eq!(dead, self.graveyard.pending());
    }

    /// The selected live key-values, in key order.
    pub(super) fn select<'s>(&'s self, selection: Selection<'s>) -> Box<dyn Iterator<Item = &'s KeyValue> + 's> {
        match selection {
            Selection::Single(key) => Box::new(self.get(key).into_iter()),
            Selection::Interval(bounds) => {
                Box::new(self.entries.range::<[u8], _>(bounds).map(|e| &e.0).filter(|kv| !self.graveyard.is_dead(kv)))
            }
        }
    }

    /// How many live keys the selection matches; O(1) for "every key", else proportional to
    /// the stored keys in the interval (a B-tree has no order statistics).
    pub(super) fn count(&self, selection: Selection<'_>) -> usize {
        match selection {
            Selection::Interval((Bound::Unbounded, Bound::Unbounded)) => self.len(),
            other => self.select(other).count(),
        }
    }

    /// The keys of the selected entries, copied out so that the caller can then mutate.
    pub(super) fn selected_keys(&self, selection: Selection<'_>) -> Vec<Vec<u8>> {
        self.select(selection).map(|kv| kv.key.clone()).collect()
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
        for kv in self.select(selection) {
            if count < limit {
                kvs.push(if request.keys_only { without_value(kv) } else { kv.clone() });
            } else if let Selection::Interval((Bound::Unbounded, Bound::Unbounded)) = selection {
                // Everything matches: the total is known without walking the rest.
                count = self.len();
                break;
            }
            count += 1;
        }
        RangeResponse { more: count > kvs.len(), count: to_i64(count), kvs }
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

/// A copy of `kv` without its value, which can be large and is not wanted by `keys_only`
/// reads.
fn without_value(kv: &KeyValue) -> KeyValue {
    KeyValue {
        key: kv.key.clone(),
        value: Vec::new(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    }
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
        let mut s = Keyspace::default();
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
