//! Which changes in the history's pages hold the value of a stored key: what compaction
//! must keep after the compaction point has passed them.
//!
//! A put writes its value once, in its change ([`super::change_pages`]); the key's record
//! names the change's revision instead of holding the value again
//! ([`super::layout::encode_kv_in_history`]). So a page whose changes are all below the
//! compaction point may still hold the current value of some key, and is deleted only once
//! no key's record names a revision in it.
//!
//! This is that set, in memory: one `(revision, key hash)` per key record whose value is in
//! the history. The hash, not the key, to keep it small (16 bytes a key); with a hasher
//! keyed at random per process, two keys written at the same revision share an entry with a
//! chance of about 2⁻⁶⁴ per pair, and then the page is kept a while longer than needed, or,
//! should one of them leave first, released while the other still names it.
//!
//! Why a set and not a count per page: the set is built from the engine's key records on a
//! thread of its own at start, while the state machine goes on writing. Inserting and
//! removing a `(revision, key)` are idempotent, so replaying every change made since the
//! build began over what it read gives the right set whichever records it read before or
//! after their change. Counts could not be replayed so.

use super::layout::{decode_stored, kv_bounds, user_key, IN_HISTORY_FORMAT};
use crate::engine::{Engine, EngineError, Scan};
use crate::types::Revision;
use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

/// Key records read per engine page while the set is built.
const BUILD_PAGE: usize = 1024;

/// The changes holding a stored key's value (see the module docs).
pub(super) struct LiveChanges {
    hasher: RandomState,
    state: State,
}

enum State {
    /// The set, up to date.
    Ready(BTreeSet<(Revision, u64)>),
    /// The build, and every insertion (`true`) and removal made since it began, in order.
    Building { done: Arc<Mutex<Option<Built>>>, changes: Vec<((Revision, u64), bool)> },
    /// The build failed (the failure is recorded with the state): nothing is released.
    Failed,
}

type Built = Result<BTreeSet<(Revision, u64)>, EngineError>;

impl Clone for LiveChanges {
    /// A build in progress is not cloned (its result is taken once): the clone knows
    /// nothing and keeps every page.
    fn clone(&self) -> Self {
        let state = match &self.state {
            State::Ready(set) => State::Ready(set.clone()),
            _ => State::Failed,
        };
        LiveChanges { hasher: self.hasher.clone(), state }
    }
}

impl std::fmt::Debug for LiveChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.state {
            State::Ready(set) => write!(f, "LiveChanges({})", set.len()),
            State::Building { changes, .. } => write!(f, "LiveChanges(building, {} changes)", changes.len()),
            State::Failed => f.write_str("LiveChanges(failed)"),
        }
    }
}

impl Default for LiveChanges {
    fn default() -> Self {
        LiveChanges { hasher: RandomState::new(), state: State::Ready(BTreeSet::new()) }
    }
}

impl LiveChanges {
    /// The set of `engine`'s key records, read on a thread of its own. Nothing may change
    /// the key records but through [`Self::insert`] and [`Self::remove`] from here on.
    pub(super) fn build(engine: Arc<dyn Engine>) -> Self {
        let hasher = RandomState::new();
        let done = Arc::new(Mutex::new(None));
        let spawned = std::thread::Builder::new().name("live-changes".into()).spawn({
            let (done, hasher) = (Arc::clone(&done), hasher.clone());
            move || {
                let built = read(engine.as_ref(), &hasher);
                *done.lock().unwrap_or_else(PoisonError::into_inner) = Some(built);
            }
        });
        let state = match spawned {
            Ok(_) => State::Building { done, changes: Vec::new() },
            Err(error) => {
                tracing::warn!(%error, "no thread to find the history's live changes on; compaction keeps every page");
                State::Failed
            }
        };
        LiveChanges { hasher, state }
    }

    /// The set of `engine`'s key records, read now (a copy of a state in memory).
    pub(super) fn read_now(engine: &dyn Engine) -> Result<Self, EngineError> {
        let hasher = RandomState::new();
        let set = read(engine, &hasher)?;
        Ok(LiveChanges { hasher, state: State::Ready(set) })
    }

    /// A set known to be unknown: compaction keeps every page (a copy whose read failed).
    pub(super) fn failed() -> Self {
        LiveChanges { hasher: RandomState::new(), state: State::Failed }
    }

    /// A copy of the set if it is built (a build in progress cannot be shared: its result
    /// is taken once).
    pub(super) fn ready_copy(&self) -> Option<Self> {
        matches!(self.state, State::Ready(_)).then(|| self.clone())
    }

    fn entry(&self, key: &[u8], revision: Revision) -> (Revision, u64) {
        (revision, self.hasher.hash_one(key))
    }

    /// `key`'s record now names its change at `revision`.
    pub(super) fn insert(&mut self, key: &[u8], revision: Revision) {
        let entry = self.entry(key, revision);
        match &mut self.state {
            State::Ready(set) => drop(set.insert(entry)),
            State::Building { changes, .. } => changes.push((entry, true)),
            State::Failed => {}
        }
    }

    /// `key`'s record no longer names its change at `revision` (if it did).
    pub(super) fn remove(&mut self, key: &[u8], revision: Revision) {
        let entry = self.entry(key, revision);
        match &mut self.state {
            State::Ready(set) => drop(set.remove(&entry)),
            State::Building { changes, .. } => changes.push((entry, false)),
            State::Failed => {}
        }
    }

    /// Whether `key`'s record names its change at `revision` (`false` unless the set is
    /// built).
    pub(super) fn contains(&self, key: &[u8], revision: Revision) -> bool {
        let State::Ready(set) = &self.state else { return false };
        set.contains(&self.entry(key, revision))
    }

    /// The revisions in the set, in order, each once; `None` unless it is built.
    pub(super) fn revisions(&self) -> Option<impl Iterator<Item = Revision> + '_> {
        let State::Ready(set) = &self.state else { return None };
        let mut last = None;
        Some(
            set.iter().filter_map(move |&(revision, _)| (last.replace(revision) != Some(revision)).then_some(revision)),
        )
    }

    /// Whether some key's record names a change from revision `first` through `last`:
    /// `None` while that is not known (the set is being built, or its build failed), when
    /// the caller must assume so.
    pub(super) fn any_between(&mut self, first: Revision, last: Revision) -> Option<bool> {
        let set = self.ready()?;
        Some(set.range((first, 0)..=(last, u64::MAX)).next().is_some())
    }

    /// The set, once built (taking the build's result if it just finished).
    fn ready(&mut self) -> Option<&BTreeSet<(Revision, u64)>> {
        if let State::Building { done, changes } = &mut self.state {
            let built = done.lock().unwrap_or_else(PoisonError::into_inner).take()?;
            self.state = match built {
                Ok(mut set) => {
                    for (entry, present) in changes.drain(..) {
                        match present {
                            true => drop(set.insert(entry)),
                            false => drop(set.remove(&entry)),
                        }
                    }
                    State::Ready(set)
                }
                Err(error) => {
                    tracing::error!(%error, "cannot find the history's live changes; compaction keeps every page");
                    State::Failed
                }
            };
        }
        match &self.state {
            State::Ready(set) => Some(set),
            _ => None,
        }
    }

    /// Waits for the build (tests, and copies that need the set whole).
    #[cfg(test)]
    pub(super) fn wait(&mut self) -> bool {
        for _ in 0..10_000 {
            if self.ready().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }

    /// The number of entries, once built (tests).
    #[cfg(test)]
    pub(super) fn len(&mut self) -> Option<usize> {
        self.ready().map(BTreeSet::len)
    }
}

/// The entries of `engine`'s key records whose value is in the history.
fn read(engine: &dyn Engine, hasher: &RandomState) -> Built {
    let mut set = BTreeSet::new();
    let all = kv_bounds((Bound::Unbounded, Bound::Unbounded));
    for entry in Scan::new(engine, all, false, BUILD_PAGE) {
        let (engine_key, record) = entry?;
        if record.first() != Some(&IN_HISTORY_FORMAT) {
            continue;
        }
        let key = user_key(&engine_key);
        let stored = decode_stored(key, &record)?;
        set.insert((stored.kv.mod_revision, hasher.hash_one(key)));
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{MemoryEngine, WriteBatch};
    use crate::state::layout::{encode_kv, encode_kv_in_history, kv_key};
    use crate::types::KeyValue;

    fn kv(key: &str, revision: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: b"v".to_vec(),
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            lease: 0,
        }
    }

    #[test]
    fn a_build_replays_what_changed_while_it_read() {
        let engine = Arc::new(MemoryEngine::new());
        let mut batch = WriteBatch::new();
        batch.put(kv_key(b"a"), encode_kv_in_history(&kv("a", 3)));
        batch.put(kv_key(b"b"), encode_kv(&kv("b", 4)));
        batch.put(kv_key(b"c"), encode_kv_in_history(&kv("c", 9)));
        engine.write(batch).unwrap();
        let mut live = LiveChanges::build(engine.clone());
        // Written before the build may have read it, and replayed after: "a" moves to 12.
        live.remove(b"a", 3);
        live.insert(b"a", 12);
        assert!(live.wait());
        assert_eq!(live.len(), Some(2), "the inline record of b names no change");
        assert_eq!(live.any_between(1, 8), Some(false));
        assert_eq!(live.any_between(9, 9), Some(true));
        assert_eq!(live.any_between(10, 12), Some(true));
        live.remove(b"c", 9);
        assert_eq!(live.any_between(9, 11), Some(false));
    }

    #[test]
    fn nothing_is_known_while_building_fails() {
        let mut live = LiveChanges::failed();
        live.insert(b"a", 1);
        assert_eq!(live.any_between(0, 5), None);
    }
}
