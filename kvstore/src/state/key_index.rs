//! Every stored key in order, with ranks: how a count of any range, and the `count` of a
//! page at any position, costs a search instead of a walk over the range's keys.
//!
//! The engine (a B-tree) has no order statistics, so without this a `count_only` over a
//! prefix of 1M keys reads 1M keys, and so does the first page of a paginated LIST (its
//! `count` is every key from the page's start). etcd keeps every key in memory too (its
//! `treeIndex`); this keeps only the key bytes, packed.
//!
//! Shape: the keys in sorted chunks of a few hundred, each chunk one buffer of key bytes
//! and one of their ends, behind `Arc`s. A snapshot (what a [`super::ReadView`] takes) is
//! one `Arc` clone; the state machine's next write then copies the chunk list and the one
//! chunk it changes, never the keys of the others. A rank is a binary search over the
//! chunks' first keys, a sum of the lengths of the chunks before, and a binary search in
//! the chunk: O(log n + n / CHUNK_KEYS) additions, about a microsecond at 1M keys.
//!
//! Why not a crate: no widely used one has a persistent (O(1)-snapshot) ordered set with
//! ranks. `imbl`'s persistent `Vector` has ranks but inserts in its middle by split and
//! append: measured at 188 µs per insert over 1M random keys, where this takes a few.

use crate::engine::EngineError;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

/// Keys a chunk is built with, and is split into halves of when it reaches twice as many.
const CHUNK_KEYS: usize = 512;
/// Key bytes a chunk holds before it splits, so that the copy a write makes after a
/// snapshot stays small with long keys too.
const CHUNK_BYTES: usize = 64 * 1024;

/// The stored keys in order (see the module docs). Cloning it is a snapshot: O(1).
#[derive(Clone, Default)]
pub(super) struct KeyIndex {
    chunks: Arc<Vec<Arc<Chunk>>>,
    len: usize,
}

impl std::fmt::Debug for KeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyIndex").field("len", &self.len).field("chunks", &self.chunks.len()).finish()
    }
}

/// Sorted keys packed in one buffer: key `i` is `bytes[ends[i - 1]..ends[i]]`.
#[derive(Clone, Default)]
struct Chunk {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1] as usize
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.bytes[self.start(i)..self.ends[i] as usize]
    }

    /// `Ok(i)` where key `i` is `key`, else `Err(i)` where it would be inserted.
    fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(low)
    }

    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(offset(self.bytes.len()));
    }

    fn insert(&mut self, at: usize, key: &[u8]) {
        let start = self.start(at);
        self.bytes.splice(start..start, key.iter().copied());
        let grown = offset(key.len());
        for end in &mut self.ends[at..] {
            *end += grown;
        }
        self.ends.insert(at, offset(start) + grown);
    }

    fn remove(&mut self, at: usize) {
        let (start, end) = (self.start(at), self.ends[at] as usize);
        self.bytes.drain(start..end);
        self.ends.remove(at);
        let shrunk = offset(end - start);
        for end in &mut self.ends[at..] {
            *end -= shrunk;
        }
    }

    /// Moves the keys from `at` on into a chunk of their own.
    fn split_off(&mut self, at: usize) -> Chunk {
        let start = self.start(at);
        let bytes = self.bytes.split_off(start);
        let ends = self.ends.split_off(at).into_iter().map(|end| end - offset(start)).collect();
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
        Chunk { bytes, ends }
    }

    fn append(&mut self, other: &Chunk) {
        let base = offset(self.bytes.len());
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| end + base));
    }

    fn is_full(&self) -> bool {
        self.len() >= 2 * CHUNK_KEYS || (self.bytes.len() > CHUNK_BYTES && self.len() > 1)
    }
}

/// A position in a chunk's buffer. Chunks split past [`CHUNK_BYTES`] and a key is far
/// below 4 GiB (the request limit bounds it), so one fits.
fn offset(position: usize) -> u32 {
    u32::try_from(position).expect("a chunk splits long before 4 GiB of keys")
}

impl KeyIndex {
    /// An index of `keys`, which are in strictly increasing order.
    #[cfg(test)]
    pub(super) fn from_sorted<'k>(keys: impl IntoIterator<Item = &'k [u8]>) -> Self {
        let mut builder = KeyIndexBuilder::default();
        for key in keys {
            builder.push(key);
        }
        builder.finish()
    }

    /// Number of keys.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Adds `key`; false if it was there.
    pub(super) fn insert(&mut self, key: &[u8]) -> bool {
        if self.chunks.is_empty() {
            let mut chunk = Chunk::default();
            chunk.push(key);
            Arc::make_mut(&mut self.chunks).push(Arc::new(chunk));
            self.len = 1;
            return true;
        }
        let index = self.chunk_of(key);
        let Err(at) = self.chunks[index].search(key) else { return false };
        let chunks = Arc::make_mut(&mut self.chunks);
        let chunk = Arc::make_mut(&mut chunks[index]);
        chunk.insert(at, key);
        if chunk.is_full() {
            let half = chunk.split_off(chunk.len() / 2);
            chunks.insert(index + 1, Arc::new(half));
        }
        self.len += 1;
        true
    }

    /// Removes `key`; false if it was not there.
    pub(super) fn remove(&mut self, key: &[u8]) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let index = self.chunk_of(key);
        let Ok(at) = self.chunks[index].search(key) else { return false };
        let chunks = Arc::make_mut(&mut self.chunks);
        let chunk = Arc::make_mut(&mut chunks[index]);
        chunk.remove(at);
        let small = chunk.len() < CHUNK_KEYS / 4;
        if chunks[index].len() == 0 {
            chunks.remove(index);
        } else if small && index + 1 < chunks.len() {
            // A chunk left small joins the next when both fit in one: deletes do not leave
            // many tiny chunks behind.
            let (this, next) = (&chunks[index], &chunks[index + 1]);
            if this.len() + next.len() <= CHUNK_KEYS && this.bytes.len() + next.bytes.len() <= CHUNK_BYTES {
                let next = chunks.remove(index + 1);
                Arc::make_mut(&mut chunks[index]).append(&next);
            }
        }
        self.len -= 1;
        true
    }

    /// Number of keys within `bounds`.
    pub(super) fn count(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> usize {
        let low = match bounds.0 {
            Bound::Unbounded => 0,
            Bound::Included(key) => self.rank(key, false),
            Bound::Excluded(key) => self.rank(key, true),
        };
        let high = match bounds.1 {
            Bound::Unbounded => self.len,
            Bound::Included(key) => self.rank(key, true),
            Bound::Excluded(key) => self.rank(key, false),
        };
        high.saturating_sub(low)
    }

    /// Every key in order (tests).
    #[cfg(test)]
    pub(super) fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks.iter().flat_map(|chunk| (0..chunk.len()).map(move |i| chunk.key(i)))
    }

    /// Number of keys below `key`, and `key` itself if `with_key`.
    fn rank(&self, key: &[u8], with_key: bool) -> usize {
        if self.chunks.is_empty() {
            return 0;
        }
        let index = self.chunk_of(key);
        let before: usize = self.chunks[..index].iter().map(|chunk| chunk.len()).sum();
        before
            + match self.chunks[index].search(key) {
                Ok(at) => at + usize::from(with_key),
                Err(at) => at,
            }
    }

    /// The chunk `key` is in or would go in: the last whose first key is at most `key`
    /// (the first chunk for a key below every key). The index is not empty.
    fn chunk_of(&self, key: &[u8]) -> usize {
        self.chunks.partition_point(|chunk| chunk.key(0) <= key).saturating_sub(1)
    }
}

/// A key space's index, or its build from the engine's keys on a thread of its own, with
/// the changes made meanwhile, replayed when the build is done. A node opens at once with a
/// million keys and more (reading every key takes seconds); until the index is ready,
/// counts read the range as they did before it existed.
pub(super) enum Indexing {
    /// The index, up to date.
    Ready(KeyIndex),
    /// The build, and every key added (`true`) or removed since it began, in order.
    Building { done: Arc<Mutex<Option<Built>>>, changes: Vec<(Vec<u8>, bool)> },
    /// The build failed (the failure is recorded): counts read their range.
    Failed,
}

/// What a build of the index ends with.
type Built = Result<KeyIndex, EngineError>;

impl std::fmt::Debug for Indexing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Indexing::Ready(index) => index.fmt(f),
            Indexing::Building { changes, .. } => write!(f, "Building({} changes)", changes.len()),
            Indexing::Failed => f.write_str("Failed"),
        }
    }
}

impl Indexing {
    /// Builds the index with `read` on a thread of its own. Nothing may change the keys `read` reads but through [`Self::insert`]
    /// and [`Self::remove`] from here on.
    pub(super) fn build(read: impl FnOnce() -> Result<KeyIndex, EngineError> + Send + 'static) -> Self {
        // A mutex, not a channel: a state machine is shared between threads (`Sync`).
        let done = Arc::new(Mutex::new(None));
        let spawned = std::thread::Builder::new().name("key-index".into()).spawn({
            let done = Arc::clone(&done);
            move || {
                let built = read();
                *done.lock().unwrap_or_else(PoisonError::into_inner) = Some(built);
            }
        });
        match spawned {
            Ok(_) => Indexing::Building { done, changes: Vec::new() },
            Err(error) => {
                tracing::warn!(%error, "no thread to build the key index on; counts read their range");
                Indexing::Failed
            }
        }
    }

    /// Records that `key` is stored now.
    pub(super) fn insert(&mut self, key: &[u8]) {
        match self {
            Indexing::Ready(index) => drop(index.insert(key)),
            Indexing::Building { changes, .. } => changes.push((key.to_vec(), true)),
            Indexing::Failed => {}
        }
    }

    /// Records that `key` is not stored any more.
    pub(super) fn remove(&mut self, key: &[u8]) {
        match self {
            Indexing::Ready(index) => drop(index.remove(key)),
            Indexing::Building { changes, .. } => changes.push((key.to_vec(), false)),
            Indexing::Failed => {}
        }
    }

    /// The index if it is ready, taking the build's result first if it is done.
    pub(super) fn get(&mut self, failure: &super::Failure) -> Option<&KeyIndex> {
        if let Indexing::Building { done, changes } = self {
            let built = done.lock().unwrap_or_else(PoisonError::into_inner).take();
            match built {
                None => return None,
                Some(Ok(mut index)) => {
                    // Whatever the engine showed of a key changed meanwhile, its last change
                    // decides.
                    for (key, stored) in changes.drain(..) {
                        match stored {
                            true => drop(index.insert(&key)),
                            false => drop(index.remove(&key)),
                        }
                    }
                    *self = Indexing::Ready(index);
                }
                Some(Err(error)) => {
                    failure.check::<()>(Err(error));
                    *self = Indexing::Failed;
                }
            }
        }
        self.ready()
    }

    /// The index if it is ready, without looking at a build.
    pub(super) fn ready(&self) -> Option<&KeyIndex> {
        match self {
            Indexing::Ready(index) => Some(index),
            _ => None,
        }
    }
}

/// Builds a [`KeyIndex`] from keys in increasing order, chunk by chunk.
#[derive(Default)]
pub(super) struct KeyIndexBuilder {
    chunks: Vec<Arc<Chunk>>,
    chunk: Chunk,
    len: usize,
}

impl KeyIndexBuilder {
    /// Adds `key`, above every key added before.
    pub(super) fn push(&mut self, key: &[u8]) {
        self.chunk.push(key);
        self.len += 1;
        if self.chunk.len() >= CHUNK_KEYS || self.chunk.bytes.len() >= CHUNK_BYTES {
            self.chunks.push(Arc::new(std::mem::take(&mut self.chunk)));
        }
    }

    /// The index of the keys added.
    pub(super) fn finish(mut self) -> KeyIndex {
        if self.chunk.len() > 0 {
            self.chunks.push(Arc::new(self.chunk));
        }
        KeyIndex { chunks: Arc::new(self.chunks), len: self.len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn check(index: &KeyIndex, oracle: &BTreeSet<Vec<u8>>) {
        assert_eq!(index.len(), oracle.len());
        assert!(index.keys().eq(oracle.iter().map(Vec::as_slice)), "the index holds the oracle's keys in order");
        for chunk in index.chunks.iter() {
            assert!(chunk.len() > 0 && chunk.len() <= 2 * CHUNK_KEYS, "chunk of {} keys", chunk.len());
        }
    }

    fn key(n: u64) -> Vec<u8> {
        format!("/registry/{:03}/{n:08}", n % 7).into_bytes()
    }

    /// Inserts and removes in a scrambled order, with snapshots taken between them, and
    /// counts of ranges against a `BTreeSet`; a snapshot never sees a later write.
    #[test]
    fn counts_equal_a_sorted_set_through_inserts_removes_and_snapshots() {
        let mut index = KeyIndex::default();
        let mut oracle = BTreeSet::new();
        let mut snapshots = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..30_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key(x % 6000);
            // Mostly inserts at first, then mostly removes, so chunks split and merge.
            let insert = (x >> 32) % 100 < if step < 15_000 { 75 } else { 25 };
            match insert {
                true => assert_eq!(index.insert(&k), oracle.insert(k.clone())),
                false => assert_eq!(index.remove(&k), oracle.remove(&k)),
            }
            if step % 997 == 0 {
                snapshots.push((index.clone(), oracle.clone()));
            }
            if step % 101 == 0 {
                let (a, b) = (key(x % 6000), key((x >> 20) % 6000));
                let (low, high) = if a <= b { (a, b) } else { (b, a) };
                let bounds = [
                    (Bound::Included(low.as_slice()), Bound::Excluded(high.as_slice())),
                    (Bound::Excluded(low.as_slice()), Bound::Included(high.as_slice())),
                    (Bound::Included(low.as_slice()), Bound::Unbounded),
                    (Bound::Unbounded, Bound::Excluded(high.as_slice())),
                    (Bound::Unbounded, Bound::Unbounded),
                ];
                for bounds in bounds {
                    assert_eq!(index.count(bounds), oracle.range::<[u8], _>(bounds).count(), "{bounds:?}");
                }
            }
        }
        check(&index, &oracle);
        assert!(index.chunks.len() > 2, "the test split chunks");
        for (snapshot, then) in &snapshots {
            check(snapshot, then);
        }
    }

    #[test]
    fn built_from_sorted_keys_equals_inserted_one_by_one() {
        let keys: Vec<Vec<u8>> = (0..2000).map(key).collect::<BTreeSet<_>>().into_iter().collect();
        let built = KeyIndex::from_sorted(keys.iter().map(Vec::as_slice));
        let mut inserted = KeyIndex::default();
        for k in keys.iter().rev() {
            inserted.insert(k);
        }
        assert!(built.keys().eq(inserted.keys()));
        assert_eq!(
            built.count((Bound::Included(b"/registry/001/".as_slice()), Bound::Excluded(b"/registry/002"))),
            286
        );
    }

    /// Changes made while the index is built from the engine are replayed on it, in order;
    /// a build that fails leaves no index and records the failure.
    #[test]
    fn an_index_built_on_its_own_thread_takes_the_changes_made_meanwhile() {
        let failure = crate::state::Failure::default();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let mut indexing = Indexing::build(move || {
            let _ = wait.recv();
            Ok(KeyIndex::from_sorted([b"a".as_slice(), b"b", b"c"]))
        });
        indexing.insert(b"d");
        indexing.remove(b"a");
        indexing.insert(b"a");
        indexing.remove(b"c");
        assert!(indexing.get(&failure).is_none(), "not built yet");
        release.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while indexing.get(&failure).is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let keys: Vec<&[u8]> = indexing.ready().expect("built").keys().collect();
        assert_eq!(keys, [b"a".as_slice(), b"b", b"d"]);
        indexing.insert(b"e");
        assert_eq!(indexing.ready().map(KeyIndex::len), Some(4), "changed in place once ready");

        let mut failed = Indexing::build(|| Err(EngineError::Corrupt { what: "a key".into(), detail: "test".into() }));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !matches!(failed, Indexing::Failed) && std::time::Instant::now() < deadline {
            failed.get(&failure);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(matches!(failed, Indexing::Failed) && failure.get().is_some());
    }

    /// Long keys split chunks by bytes, not only by count.
    #[test]
    fn long_keys_split_by_bytes() {
        let mut index = KeyIndex::default();
        for n in 0..200u64 {
            let mut k = vec![b'x'; 4096];
            k.extend_from_slice(&n.to_be_bytes());
            index.insert(&k);
        }
        assert!(index.chunks.iter().all(|chunk| chunk.bytes.len() <= CHUNK_BYTES + 4104));
        assert!(index.chunks.len() >= 200 * 4104 / (CHUNK_BYTES + 4104));
    }
}
