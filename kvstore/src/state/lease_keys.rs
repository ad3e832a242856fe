//! The set of keys attached to one lease, stored for the common case: a lease that holds one
//! key (a service registration) or a handful.
//!
//! A `BTreeSet` allocates a whole leaf node (room for 11 keys, about 290 bytes) for its first
//! key, which was most of what a registration's lease cost the master (scalebench `leases`,
//! docs/performance.md). One key is therefore held alone, a few in a sorted vector sized to
//! fit; past [`FEW`] the set becomes a `BTreeSet`, so a lease holding thousands of keys still
//! inserts and removes in O(log n).

use std::collections::BTreeSet;

/// Most keys kept in the sorted vector; a vector insert shifts at most this many.
const FEW: usize = 16;

/// The keys attached to a lease, in key order. Two sets are equal when they hold the same
/// keys, whatever their shape (a set that shrank stays a `BTreeSet`; the same keys restored
/// from a snapshot do not).
#[derive(Debug, Clone)]
pub enum LeaseKeys {
    /// Exactly one key: a registration's lease, the usual case.
    One(Box<[u8]>),
    /// Up to [`FEW`] keys (never exactly one), sorted, with no spare capacity.
    Few(Vec<Vec<u8>>),
    /// More keys than that.
    Many(BTreeSet<Vec<u8>>),
}

impl Default for LeaseKeys {
    fn default() -> Self {
        LeaseKeys::Few(Vec::new())
    }
}

impl PartialEq for LeaseKeys {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for LeaseKeys {}

impl LeaseKeys {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        match self {
            LeaseKeys::One(_) => 1,
            LeaseKeys::Few(v) => v.len(),
            LeaseKeys::Many(s) => s.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            LeaseKeys::One(k) => **k == *key,
            LeaseKeys::Few(v) => v.binary_search_by(|k| k.as_slice().cmp(key)).is_ok(),
            LeaseKeys::Many(s) => s.contains(key),
        }
    }

    /// Adds `key`; returns whether it was new.
    pub fn insert(&mut self, key: &[u8]) -> bool {
        match self {
            LeaseKeys::Few(v) if v.is_empty() => {
                *self = LeaseKeys::One(key.into());
                true
            }
            LeaseKeys::One(k) if **k == *key => false,
            LeaseKeys::One(k) => {
                let (first, second) = if **k < *key { (k.to_vec(), key.to_vec()) } else { (key.to_vec(), k.to_vec()) };
                *self = LeaseKeys::Few(vec![first, second]);
                true
            }
            LeaseKeys::Few(v) => match v.binary_search_by(|k| k.as_slice().cmp(key)) {
                Ok(_) => false,
                Err(at) if v.len() < FEW => {
                    // Exact growth: a vector's usual doubling reserves room for four.
                    v.reserve_exact(1);
                    v.insert(at, key.to_vec());
                    true
                }
                Err(_) => {
                    let mut set: BTreeSet<Vec<u8>> = std::mem::take(v).into_iter().collect();
                    set.insert(key.to_vec());
                    *self = LeaseKeys::Many(set);
                    true
                }
            },
            LeaseKeys::Many(s) => s.insert(key.to_vec()),
        }
    }

    /// Removes `key`; returns whether it was there. A set that shrinks stays a `BTreeSet`:
    /// moving back and forth at the boundary would cost more than it saves.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self {
            LeaseKeys::One(k) if **k == *key => {
                *self = LeaseKeys::default();
                true
            }
            LeaseKeys::One(_) => false,
            LeaseKeys::Few(v) => match v.binary_search_by(|k| k.as_slice().cmp(key)) {
                Ok(at) => {
                    v.remove(at);
                    if let [last] = v.as_mut_slice() {
                        *self = LeaseKeys::One(std::mem::take(last).into_boxed_slice());
                    } else {
                        v.shrink_to_fit();
                    }
                    true
                }
                Err(_) => false,
            },
            LeaseKeys::Many(s) => s.remove(key),
        }
    }

    /// The keys, in order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = &[u8]> + '_> {
        match self {
            LeaseKeys::One(k) => Box::new(std::iter::once(&**k)),
            LeaseKeys::Few(v) => Box::new(v.iter().map(Vec::as_slice)),
            LeaseKeys::Many(s) => Box::new(s.iter().map(Vec::as_slice)),
        }
    }

    /// The keys as a `BTreeSet`; free for a large set, which is already one.
    pub fn into_set(self) -> BTreeSet<Vec<u8>> {
        match self {
            LeaseKeys::One(k) => BTreeSet::from([k.into_vec()]),
            LeaseKeys::Few(v) => v.into_iter().collect(),
            LeaseKeys::Many(s) => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of inserts and removes leaves the same keys, in the same order, as a
        /// `BTreeSet` given the same sequence, with the same answers on the way.
        #[test]
        fn behaves_as_a_btree_set(ops in proptest::collection::vec((any::<bool>(), 0u8..40), 0..200)) {
            let mut ours = LeaseKeys::new();
            let mut model = BTreeSet::new();
            for (insert, k) in ops {
                let key = vec![b'k', k];
                if insert {
                    prop_assert_eq!(ours.insert(&key), model.insert(key.clone()));
                } else {
                    prop_assert_eq!(ours.remove(&key), model.remove(&key));
                }
                prop_assert_eq!(ours.len(), model.len());
                prop_assert_eq!(ours.contains(&key), model.contains(&key));
                let listed: Vec<&[u8]> = ours.iter().collect();
                let expected: Vec<&[u8]> = model.iter().map(Vec::as_slice).collect();
                prop_assert_eq!(listed, expected);
            }
            prop_assert_eq!(ours.into_set(), model);
        }
    }

    #[test]
    fn one_key_is_held_alone_and_a_few_without_spare_room() {
        let mut keys = LeaseKeys::new();
        keys.insert(b"/svc/2");
        assert!(matches!(keys, LeaseKeys::One(_)));
        keys.insert(b"/svc/1");
        keys.insert(b"/svc/3");
        let LeaseKeys::Few(v) = &keys else { panic!("three keys belong in the vector") };
        assert_eq!(v.capacity(), 3);
        keys.remove(b"/svc/1");
        keys.remove(b"/svc/3");
        assert_eq!(keys, LeaseKeys::One(b"/svc/2".to_vec().into()));
    }

    #[test]
    fn sets_of_the_same_keys_are_equal_whatever_their_shape() {
        let mut shrunk = LeaseKeys::new();
        for i in 0..=FEW {
            shrunk.insert(format!("/k/{i:03}").as_bytes());
        }
        for i in 1..=FEW {
            shrunk.remove(format!("/k/{i:03}").as_bytes());
        }
        assert!(matches!(shrunk, LeaseKeys::Many(_)));
        let mut fresh = LeaseKeys::new();
        fresh.insert(b"/k/000");
        assert_eq!(shrunk, fresh);
        fresh.insert(b"/k/001");
        assert_ne!(shrunk, fresh);
    }

    #[test]
    fn past_few_keys_the_set_is_a_btree() {
        let mut keys = LeaseKeys::new();
        for i in 0..=FEW {
            keys.insert(format!("/k/{i:03}").as_bytes());
        }
        assert!(matches!(keys, LeaseKeys::Many(_)));
        assert_eq!(keys.len(), FEW + 1);
    }
}
