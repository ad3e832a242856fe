//! The data model shared by the state machine, the log and the API: keys, values, revisions
//! and leases, exactly as etcd's v3 API defines them.

use serde::{Deserialize, Serialize};

/// etcd's global revision: increases by one with every transaction that writes.
pub type Revision = i64;

/// A TTL lease's id, as on etcd's wire (int64). [`NO_LEASE`] means "not attached".
pub type LeaseId = i64;

/// The lease id of a key that is not attached to any lease.
pub const NO_LEASE: LeaseId = 0;

/// One key with its value and etcd's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// The revision of the write that created the key (since it last did not exist).
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created (1 on creation).
    pub version: i64,
    /// The lease the key is attached to, or [`NO_LEASE`].
    pub lease: LeaseId,
}

/// What a watch [`Event`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// The key was written (created or updated).
    Put,
    /// The key was deleted (by a delete, or with its lease's revocation or expiry).
    Delete,
}

/// One change to one key, as etcd's `mvccpb.Event`: the history the store keeps and what
/// watchers receive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// After a put, the key-value written; after a delete, a tombstone: the key and, as
    /// `mod_revision`, the revision of the deletion, every other field zero (as etcd sends).
    pub kv: KeyValue,
    /// The key-value before the change (`None` for a put that created the key).
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision of the change (etcd's main revision).
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }

    /// Whether this is a put that created the key (etcd's `IsCreate`).
    pub fn is_create(&self) -> bool {
        self.kind == EventKind::Put && self.kv.version == 1
    }
}

/// A set of keys, with etcd's `key`/`range_end` convention:
/// - `range_end` empty: the single key `key`;
/// - `range_end == [0]`: every key `>= key` (and with `key == [0]` too: every key);
/// - otherwise: the half-open interval `[key, range_end)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct KeyRange {
    /// The first key (or the only one).
    pub key: Vec<u8>,
    /// The end of the range, see the type's documentation.
    pub range_end: Vec<u8>,
}

impl KeyRange {
    /// Exactly one key.
    pub fn single(key: impl Into<Vec<u8>>) -> Self {
        KeyRange { key: key.into(), range_end: Vec::new() }
    }

    /// Every key that starts with `prefix` (etcd's `--prefix`): `range_end` is the prefix with
    /// its last byte below 0xff incremented; an all-0xff or empty prefix means "to the end".
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        let key = prefix.into();
        let range_end = crate::engine::prefix_end(&key).unwrap_or_else(|| vec![0]);
        KeyRange { key, range_end }
    }

    /// The half-open interval `[key, range_end)`.
    pub fn between(key: impl Into<Vec<u8>>, range_end: impl Into<Vec<u8>>) -> Self {
        KeyRange { key: key.into(), range_end: range_end.into() }
    }

    /// Whether this range names a single key.
    pub fn is_single(&self) -> bool {
        self.range_end.is_empty()
    }

    /// Whether `candidate` lies in the range.
    pub fn contains(&self, candidate: &[u8]) -> bool {
        Self::range_contains(&self.key, &self.range_end, candidate)
    }

    /// Whether `candidate` lies in the range of `key` and `range_end`, for holders that keep
    /// the two apart (a watcher stores them as boxed slices).
    pub fn range_contains(key: &[u8], range_end: &[u8], candidate: &[u8]) -> bool {
        if range_end.is_empty() {
            return candidate == key;
        }
        let from_start = key == [0];
        let to_end = range_end == [0];
        (from_start || candidate >= key) && (to_end || candidate < range_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_covers_exactly_the_prefixed_keys() {
        let r = KeyRange::prefix("/servers/");
        assert!(r.contains(b"/servers/1"));
        assert!(r.contains(b"/servers/"));
        assert!(!r.contains(b"/servers0"));
        assert!(!r.contains(b"/server"));
        let all = KeyRange::prefix(vec![0xff, 0xff]);
        assert_eq!(all.range_end, vec![0]);
        assert!(all.contains(&[0xff, 0xff, 1]));
    }

    #[test]
    fn single_key_and_interval() {
        assert!(KeyRange::single("a").contains(b"a"));
        assert!(!KeyRange::single("a").contains(b"ab"));
        let r = KeyRange::between("b", "d");
        assert!(r.contains(b"b") && r.contains(b"c") && !r.contains(b"d") && !r.contains(b"a"));
        let all = KeyRange::between(vec![0], vec![0]);
        assert!(all.contains(b"") && all.contains(b"zzz"));
    }
}
