//! Txn compares, evaluated as etcd's `applyCompare` does.
//!
//! A compare over a range holds when it holds for every key in the range. A missing key (or
//! an empty range) compares as a key whose version, revisions and lease are all 0; it has no
//! value, so every value comparison on it is false.

use super::keyspace::{Keyspace, Selection};
use crate::command::{Compare, CompareResult, CompareTarget};
use crate::error::KvError;
use crate::types::KeyValue;
use std::cmp::Ordering;

/// Whether `compare` holds in `keys`. Fails only on an inverted range.
pub(super) fn holds(keys: &Keyspace, compare: &Compare) -> Result<bool, KvError> {
    let selection = Selection::of(&compare.range)?;
    let mut matched = false;
    for kv in keys.select(selection) {
        matched = true;
        if !holds_for(Some(&kv), &compare.target, compare.result) {
            return Ok(false);
        }
    }
    Ok(matched || holds_for(None, &compare.target, compare.result))
}

impl Compare {
    /// Whether this compare holds over `kvs`, the live keys of its range (read elsewhere:
    /// a read-only Txn is answered from reads, not applied): for every one of them, or, for
    /// none, as for a missing key.
    pub fn holds_over(&self, kvs: &[KeyValue]) -> bool {
        match kvs {
            [] => holds_for(None, &self.target, self.result),
            kvs => kvs.iter().all(|kv| holds_for(Some(kv), &self.target, self.result)),
        }
    }
}

/// Whether the comparison holds for one key (`None`: the key does not exist).
fn holds_for(kv: Option<&KeyValue>, target: &CompareTarget, result: CompareResult) -> bool {
    let ordering = match (target, kv) {
        (CompareTarget::Value(_), None) => return false,
        (CompareTarget::Value(given), Some(kv)) => kv.value.as_slice().cmp(given.as_slice()),
        (CompareTarget::Version(given), kv) => kv.map_or(0, |kv| kv.version).cmp(given),
        (CompareTarget::CreateRevision(given), kv) => kv.map_or(0, |kv| kv.create_revision).cmp(given),
        (CompareTarget::ModRevision(given), kv) => kv.map_or(0, |kv| kv.mod_revision).cmp(given),
        (CompareTarget::Lease(given), kv) => kv.map_or(0, |kv| kv.lease).cmp(given),
    };
    match result {
        CompareResult::Equal => ordering == Ordering::Equal,
        CompareResult::NotEqual => ordering != Ordering::Equal,
        CompareResult::Greater => ordering == Ordering::Greater,
        CompareResult::Less => ordering == Ordering::Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::KeyRange;

    fn space() -> Keyspace {
        let mut s = Keyspace::in_memory();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            let i = i as i64;
            s.replace(KeyValue {
                key: k.as_bytes().to_vec(),
                value: k.as_bytes().to_vec(),
                create_revision: 2 + i,
                mod_revision: 5 + i,
                version: 1 + i,
                lease: 0,
            });
        }
        s
    }

    fn cmp(range: KeyRange, target: CompareTarget, result: CompareResult) -> bool {
        holds(&space(), &Compare { range, target, result }).unwrap()
    }

    #[test]
    fn each_target_and_result() {
        use CompareResult::*;
        assert!(cmp(KeyRange::single("b"), CompareTarget::Value(b"b".to_vec()), Equal));
        assert!(cmp(KeyRange::single("b"), CompareTarget::Value(b"a".to_vec()), Greater));
        assert!(cmp(KeyRange::single("b"), CompareTarget::Value(b"c".to_vec()), Less));
        assert!(cmp(KeyRange::single("b"), CompareTarget::Value(b"c".to_vec()), NotEqual));
        assert!(cmp(KeyRange::single("b"), CompareTarget::Version(2), Equal));
        assert!(cmp(KeyRange::single("b"), CompareTarget::CreateRevision(3), Equal));
        assert!(cmp(KeyRange::single("b"), CompareTarget::ModRevision(5), Greater));
        assert!(cmp(KeyRange::single("b"), CompareTarget::Lease(0), Equal));
    }

    #[test]
    fn missing_key_compares_as_zero_and_has_no_value() {
        use CompareResult::*;
        let missing = || KeyRange::single("zz");
        assert!(cmp(missing(), CompareTarget::Version(0), Equal));
        assert!(cmp(missing(), CompareTarget::CreateRevision(0), Equal));
        assert!(cmp(missing(), CompareTarget::ModRevision(1), Less));
        assert!(cmp(missing(), CompareTarget::Lease(0), Equal));
        assert!(!cmp(missing(), CompareTarget::Value(Vec::new()), Equal));
        assert!(!cmp(missing(), CompareTarget::Value(b"x".to_vec()), NotEqual));
        // An empty range behaves like one missing key.
        assert!(cmp(KeyRange::prefix("q"), CompareTarget::Version(0), Equal));
        assert!(!cmp(KeyRange::prefix("q"), CompareTarget::Value(Vec::new()), NotEqual));
    }

    #[test]
    fn a_range_must_hold_for_every_key() {
        use CompareResult::*;
        let all = || KeyRange::between("a", "d");
        assert!(cmp(all(), CompareTarget::Version(0), Greater));
        assert!(!cmp(all(), CompareTarget::Version(1), Greater));
        assert!(cmp(all(), CompareTarget::ModRevision(8), Less));
        assert!(!cmp(all(), CompareTarget::ModRevision(7), Less));
        assert!(cmp(KeyRange::between("a", "c"), CompareTarget::Value(b"c".to_vec()), Less));
    }

    /// Over the keys read, a compare decides as it does over the key space.
    #[test]
    fn holds_over_read_keys_as_over_the_key_space() {
        use CompareResult::*;
        let space = space();
        let ranges =
            [KeyRange::single("b"), KeyRange::single("zz"), KeyRange::between("a", "d"), KeyRange::prefix("q")];
        let targets = [CompareTarget::Value(b"b".to_vec()), CompareTarget::Version(1), CompareTarget::ModRevision(6)];
        for range in ranges {
            let kvs: Vec<KeyValue> = space.select(Selection::of(&range).unwrap()).collect();
            for target in &targets {
                for result in [Equal, NotEqual, Greater, Less] {
                    let compare = Compare { range: range.clone(), target: target.clone(), result };
                    assert_eq!(compare.holds_over(&kvs), holds(&space, &compare).unwrap(), "{compare:?}");
                }
            }
        }
    }

    #[test]
    fn inverted_range_is_an_error() {
        let c = Compare {
            range: KeyRange::between("b", "a"),
            target: CompareTarget::Version(0),
            result: CompareResult::Equal,
        };
        assert!(matches!(holds(&space(), &c), Err(KvError::InvalidRange { .. })));
    }
}
