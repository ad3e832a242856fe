//! The key-values the state machine wrote lately, kept in memory after they reached the
//! engine, up to a byte budget: a put needs the key's previous key-value (its version, its
//! create revision, and the value the history keeps for watchers and reads at past
//! revisions), and a service that re-registers or updates its keys writes the same keys
//! again and again.
//!
//! Why: profiled at 64 clients (`perf record --call-graph dwarf` on every member), the
//! engine lookup of the previous key-value was 10 % of a member's CPU, as much as a third
//! of what writing the put's records cost. This cache answers it from memory for the keys
//! written within the budget.
//!
//! It holds only what the engine holds (entries are added when a flush writes them, and a
//! deleted key leaves it at the same point), so a hit and a lookup in the engine read the
//! same key-value; the writes not yet flushed are in front of it ([`super::keyspace`]).
//! Lookups do not reorder it (the key space reads through a shared reference), so the
//! entries that go first are the ones written longest ago.

use crate::types::KeyValue;
use lru::LruCache;

/// A key-value takes this much of the budget beyond its key and value (the cache's own
/// bookkeeping, about).
const ENTRY_OVERHEAD: usize = 96;

/// The key-values written lately, least recently written first out.
pub(super) struct RecentWrites {
    entries: LruCache<Vec<u8>, KeyValue>,
    bytes: usize,
    budget: usize,
    /// Negative control: a key written again keeps its older key-value here.
    #[cfg(feature = "negative-controls")]
    keep_stale: bool,
}

impl std::fmt::Debug for RecentWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentWrites")
            .field("entries", &self.entries.len())
            .field("bytes", &self.bytes)
            .field("budget", &self.budget)
            .finish()
    }
}

fn size(kv: &KeyValue) -> usize {
    kv.key.len() * 2 + kv.value.len() + ENTRY_OVERHEAD
}

impl RecentWrites {
    /// An empty cache that keeps at most `budget` bytes (0: keeps nothing).
    pub(super) fn new(budget: usize) -> Self {
        RecentWrites {
            entries: LruCache::unbounded(),
            bytes: 0,
            budget,
            #[cfg(feature = "negative-controls")]
            keep_stale: false,
        }
    }

    /// An empty cache with the same budget (and the same negative control).
    pub(super) fn empty_like(&self) -> Self {
        RecentWrites {
            #[cfg(feature = "negative-controls")]
            keep_stale: self.keep_stale,
            ..RecentWrites::new(self.budget)
        }
    }

    /// Negative control: a key written again keeps its older key-value here.
    #[cfg(feature = "negative-controls")]
    pub(super) fn keep_stale(&mut self) {
        self.keep_stale = true;
    }

    /// The key-value of `key` if it was written lately; `None` says nothing about the key.
    pub(super) fn get(&self, key: &[u8]) -> Option<&KeyValue> {
        self.entries.peek(key)
    }

    /// `key` now holds `kv` in the engine (`None`: it was removed).
    pub(super) fn written(&mut self, key: Vec<u8>, kv: Option<KeyValue>) {
        #[cfg(feature = "negative-controls")]
        if self.keep_stale && kv.is_some() && self.entries.contains(&key) {
            return;
        }
        if let Some(old) = self.entries.pop(&key) {
            self.bytes -= size(&old);
        }
        // One large value must not push out everything else.
        let Some(kv) = kv.filter(|kv| size(kv) <= self.budget / 16) else { return };
        self.bytes += size(&kv);
        self.entries.push(key, kv);
        while self.bytes > self.budget {
            let Some((_, out)) = self.entries.pop_lru() else { break };
            self.bytes -= size(&out);
        }
    }

    /// Bytes held.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value_len: usize) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: vec![b'v'; value_len],
            create_revision: 1,
            mod_revision: 1,
            version: 1,
            lease: 0,
        }
    }

    #[test]
    fn keeps_the_latest_writes_within_its_budget() {
        let one = size(&kv("k00", 100));
        let mut cache = RecentWrites::new(one * 20);
        for i in 0..30 {
            let key = format!("k{i:02}");
            cache.written(key.clone().into_bytes(), Some(kv(&key, 100)));
        }
        assert!(cache.bytes() <= one * 20);
        assert!(cache.get(b"k00").is_none(), "written longest ago, gone first");
        assert_eq!(cache.get(b"k29").map(|kv| kv.value.len()), Some(100));
        // A removal and a rewrite leave one entry of the new size.
        cache.written(b"k29".to_vec(), None);
        assert!(cache.get(b"k29").is_none());
        cache.written(b"k28".to_vec(), Some(kv("k28", 10)));
        assert_eq!(cache.get(b"k28").map(|kv| kv.value.len()), Some(10));
        assert_eq!(cache.bytes(), cache.entries.iter().map(|(_, kv)| size(kv)).sum::<usize>());
    }

    #[test]
    fn a_value_over_a_sixteenth_of_the_budget_is_not_kept() {
        let mut cache = RecentWrites::new(16 * 1000);
        cache.written(b"small".to_vec(), Some(kv("small", 10)));
        cache.written(b"big".to_vec(), Some(kv("big", 1000)));
        assert!(cache.get(b"big").is_none());
        assert!(cache.get(b"small").is_some());
        assert!(RecentWrites::new(0).get(b"small").is_none());
        let mut none = RecentWrites::new(0);
        none.written(b"small".to_vec(), Some(kv("small", 1)));
        assert!(none.get(b"small").is_none());
    }
}
