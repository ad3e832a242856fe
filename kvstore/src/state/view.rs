//! A consistent view of the state at one revision, read off the thread that applies while
//! writes go on: what backups, the corruption check's hash and snapshots for peers read,
//! in bounded memory, instead of a copy of the whole state made on the node loop.
//!
//! A view is taken between two applies, when the engine holds exactly the state at revision
//! `R` (everything flushed). The small parts of the state (leases, auth, membership, ...)
//! are copied then. The key space is read from the engine later, page by page, while the
//! state moves on; each page is turned back into its state at `R` with the changes made
//! since, which the history holds with the value each key had before them:
//! - read a page of keys;
//! - wait for every engine batch begun before that read to be published, then read the
//!   history from where the view got to through the published head, recording for each key
//!   the value before its first change after `R` (or that it did not exist);
//! - every key of the page's range that changed after `R` takes that value; the others
//!   are as stored.
//!
//! Any write the page saw was in a batch begun before the wait, whose changes are then in
//! the history read. The history after `R` stays in the engine for as long as the view is
//! held: compaction's deletions wait (the view is pinned on the history). Memory: one page
//! plus one entry per key written since `R`.

use super::change_pages::changes;
use super::change_pages::records_below;
use super::change_pages::ValueReader;
use super::graveyard::Death;
use super::history::Published;
use super::layout::{decode_stored, event_key, event_position, kv_bounds, user_key, EVENT};
use super::lease_table::Lease;
use super::machine::consistency::hash_key_value;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::{Engine, EngineError, Scan};
use crate::membership::Membership;
use crate::state::KvHash;
use crate::types::{Event, KeyValue, Revision, NO_LEASE};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

/// Keys read from the engine per page.
const PAGE: usize = 512;

/// The parts of the state copied when the view is taken.
#[derive(Debug, Clone)]
pub struct ViewMeta {
    /// The log slot the state reflects.
    pub applied: u64,
    /// The store revision `R`.
    pub revision: Revision,
    /// The compaction point.
    pub compacted: Revision,
    /// The newest master tenure applied.
    pub tenure: Tenure,
    /// The running digest.
    pub digest: u64,
    /// The lease id counter.
    pub grant_counter: u64,
    /// Live leases, without their keys (implied by the keys).
    pub leases: Vec<Lease>,
    /// The raised alarms.
    pub alarms: BTreeSet<Alarm>,
    /// The membership.
    pub membership: Membership,
    /// Users, roles and whether auth is enabled.
    pub auth: AuthStore,
    /// Lease deaths whose keys were not all swept yet: those keys are stored but dead.
    pub(super) deaths: Vec<Death>,
    /// Negative control: the key whose value reads of this state see damaged.
    #[cfg(feature = "negative-controls")]
    pub(super) damaged: Option<Vec<u8>>,
}

/// The state at one revision, readable from any thread (see the module docs). Dropping it
/// lets compaction delete what it kept.
pub struct StateView {
    engine: Arc<dyn Engine>,
    published: Arc<Published>,
    pin: u64,
    meta: ViewMeta,
    /// Negative control of the view's test: pages are read as stored, nothing undone.
    #[cfg(test)]
    skip_undo: bool,
}

impl std::fmt::Debug for StateView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateView").field("revision", &self.meta.revision).finish()
    }
}

impl Drop for StateView {
    fn drop(&mut self) {
        self.published.unpin(self.pin);
    }
}

impl StateView {
    /// A view of `engine` at `meta.revision`; the caller flushed the state first.
    pub(super) fn new(engine: Arc<dyn Engine>, published: Arc<Published>, meta: ViewMeta) -> Self {
        let pin = published.pin(meta.revision);
        StateView {
            engine,
            published,
            pin,
            meta,
            #[cfg(test)]
            skip_undo: false,
        }
    }

    /// The small parts of the state, as of the view's revision.
    pub fn meta(&self) -> &ViewMeta {
        &self.meta
    }

    /// The store revision of the view.
    pub fn revision(&self) -> Revision {
        self.meta.revision
    }

    /// Whether `kv`, stored, is a key of a lease dead at the view's revision.
    fn is_dead(&self, kv: &KeyValue) -> bool {
        kv.lease != NO_LEASE
            && self
                .meta
                .deaths
                .iter()
                .any(|&(id, at)| id == kv.lease && at > kv.mod_revision && at <= self.meta.revision)
    }

    /// Every live key as it was at `revision` (between the compaction point and the
    /// view's), in key order, handed to `each` page by page.
    pub fn keys_at(
        &self,
        revision: Revision,
        mut each: impl FnMut(Vec<KeyValue>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.keys_with(revision, None, |kvs| each(kvs.into_iter().map(|(kv, _)| kv).collect()))
    }

    /// Every live key at the view's revision, as [`Self::keys_at`], each with whether its
    /// value was left out because a peer's snapshot sends it in its change: a change at or
    /// after the compaction point (in the history sent), or one in a page wholly below it
    /// ([`Self::pages_below_compaction`]) that the key's record names, before `pages_until`.
    /// Only those values are not read, so that a snapshot reads each value once, in its
    /// page, instead of once per key and again in its change.
    pub(super) fn keys_naming_changes(
        &self,
        pages_until: Revision,
        each: impl FnMut(Vec<(KeyValue, bool)>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.keys_with(self.meta.revision, Some(pages_until), each)
    }

    fn keys_with(
        &self,
        revision: Revision,
        pages_until: Option<Revision>,
        mut each: impl FnMut(Vec<(KeyValue, bool)>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let mut undo = Undo { since: revision, next: revision.saturating_add(1), before: BTreeMap::new() };
        let mut after: Bound<Vec<u8>> = Bound::Unbounded;
        let mut values = ValueReader::new(self.engine.as_ref());
        let compacted = self.meta.compacted;
        let sent_in_change = |key: &[u8], mod_revision: Revision, in_page: bool| {
            #[cfg(feature = "negative-controls")]
            if self.meta.damaged.as_deref() == Some(key) {
                return false;
            }
            let _ = key;
            pages_until.is_some_and(|until| mod_revision >= compacted || (in_page && mod_revision < until))
        };
        loop {
            let bounds = match &after {
                Bound::Excluded(k) => kv_bounds((Bound::Excluded(k.as_slice()), Bound::Unbounded)),
                _ => kv_bounds((Bound::Unbounded, Bound::Unbounded)),
            };
            let page = self.engine.scan(&bounds, false, PAGE)?;
            let last = page.len() < PAGE;
            // Every batch the page may have seen is published once this returns.
            self.published.settle();
            undo.read_through(self.engine.as_ref(), self.published.head())?;
            #[cfg(test)]
            if self.skip_undo {
                undo.before.clear();
            }
            let end: Bound<Vec<u8>> = match (last, page.last()) {
                (false, Some((k, _))) => Bound::Included(user_key(k).to_vec()),
                _ => Bound::Unbounded,
            };
            let mut kvs: BTreeMap<Vec<u8>, (KeyValue, bool)> = BTreeMap::new();
            for (k, record) in page {
                let key = user_key(&k).to_vec();
                if !undo.before.contains_key(&key) {
                    let stored = decode_stored(&key, &record)?;
                    let entry = match sent_in_change(&key, stored.kv.mod_revision, stored.value_in_history) {
                        true => (stored.kv, true),
                        false => (values.resolve(stored)?, false),
                    };
                    kvs.insert(key, entry);
                }
            }
            let range = (after.clone(), end.clone());
            for (key, before) in undo.before.range::<Vec<u8>, _>(range) {
                if let Some(kv) = before {
                    let mut kv = kv.clone();
                    let named = sent_in_change(key, kv.mod_revision, false);
                    if named {
                        kv.value = Vec::new();
                    }
                    kvs.insert(key.clone(), (kv, named));
                }
            }
            let live: Vec<(KeyValue, bool)> = kvs.into_values().filter(|(kv, _)| !self.is_dead(kv)).collect();
            #[cfg(feature = "negative-controls")]
            let live: Vec<(KeyValue, bool)> = live
                .into_iter()
                .map(|(kv, named)| match self.meta.damaged.as_deref() == Some(kv.key.as_slice()) {
                    true => (super::keyspace::damage(kv), named),
                    false => (kv, named),
                })
                .collect();
            if !live.is_empty() {
                each(live)?;
            }
            match end {
                Bound::Included(k) => after = Bound::Excluded(k),
                _ => return Ok(()),
            }
        }
    }

    /// Where the history's records wholly below the compaction point end: the engine key
    /// of the first record that is not (or of the compaction point's first change), and
    /// the revision before which every change is in one of those records.
    pub(super) fn pages_below_compaction_end(&self) -> Result<(Vec<u8>, Revision), EngineError> {
        let compacted = self.meta.compacted;
        let below = records_below(self.engine.as_ref(), compacted)?;
        let at_compaction = event_key(compacted, 0);
        let lower = below.last().map_or(Bound::Included(vec![EVENT]), |page| Bound::Excluded(page.key.clone()));
        let next = self.engine.scan_keys(&(lower, Bound::Excluded(at_compaction.clone())), 1)?;
        Ok(match next.into_iter().next() {
            Some(key) => {
                let until = event_position(&key).map_or(compacted, |(main, _)| main.min(compacted));
                (key, until)
            }
            None => (at_compaction, compacted),
        })
    }

    /// The history's records before `end` (from [`Self::pages_below_compaction_end`]), as
    /// stored, in order, handed to `each` a few MiB at a time. The view's pin keeps them:
    /// compaction deletes nothing while it is held.
    pub(super) fn pages_below_compaction(
        &self,
        end: &[u8],
        mut each: impl FnMut(Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        const FRAME_BYTES: usize = 4 << 20;
        let bounds = (Bound::Included(vec![EVENT]), Bound::Excluded(end.to_vec()));
        let mut pages = Vec::new();
        let mut bytes = 0;
        for entry in Scan::new(self.engine.as_ref(), bounds, false, 16) {
            let (key, record) = entry?;
            bytes += key.len() + record.len();
            pages.push((key, record));
            if bytes >= FRAME_BYTES {
                each(std::mem::take(&mut pages))?;
                bytes = 0;
            }
        }
        if !pages.is_empty() {
            each(pages)?;
        }
        Ok(())
    }

    /// For the etcd snapshot export: every live key at the view's revision, as
    /// [`Self::keys_naming_changes`] gives them (a key whose value is in a change has it
    /// left out, `true`), and the engine key where the changes wholly below the compaction
    /// point end, for [`Self::changes_below_compaction`], which holds those values.
    pub(crate) fn keys_for_export(
        &self,
        each: impl FnMut(Vec<(KeyValue, bool)>) -> Result<(), EngineError>,
    ) -> Result<Vec<u8>, EngineError> {
        let (pages_end, pages_until) = self.pages_below_compaction_end()?;
        self.keys_naming_changes(pages_until, each)?;
        Ok(pages_end)
    }

    /// The changes stored wholly below the compaction point (those the live keys' records
    /// name among them), before `end` (from [`Self::keys_for_export`]), in revision order,
    /// a page at a time: read as stored, in one pass, instead of one page per key.
    pub(crate) fn changes_below_compaction(
        &self,
        end: &[u8],
        mut each: impl FnMut(Vec<Event>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.pages_below_compaction(end, |pages| {
            for (key, record) in pages {
                each(super::change_pages::decode_page(&key, &record)?)?;
            }
            Ok(())
        })
    }

    /// Every retained change from the compaction point through `revision`, in order,
    /// handed to `each` page by page.
    pub fn events_through(
        &self,
        revision: Revision,
        mut each: impl FnMut(Vec<Event>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let mut page = Vec::with_capacity(PAGE);
        for event in changes(self.engine.as_ref(), self.meta.compacted, revision) {
            page.push(event?);
            if page.len() == PAGE {
                each(std::mem::take(&mut page))?;
            }
        }
        if !page.is_empty() {
            each(page)?;
        }
        Ok(())
    }

    /// etcd's HashKV at `revision` (0: the view's), computed as
    /// [`crate::StateMachine::hash_kv`] does, from this view.
    pub fn hash_kv(&self, revision: Revision) -> Result<KvHash, crate::KvError> {
        let revision = if revision <= 0 { self.meta.revision } else { revision };
        if revision > self.meta.revision {
            return Err(crate::KvError::FutureRevision { requested: revision, current: self.meta.revision });
        }
        if revision < self.meta.compacted {
            return Err(crate::KvError::Compacted { requested: revision, compacted: self.meta.compacted });
        }
        let failed = |e: EngineError| crate::KvError::StateUnreadable(e.to_string());
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&self.meta.compacted.to_le_bytes());
        self.keys_at(revision, |kvs| {
            kvs.iter().for_each(|kv| hash_key_value(&mut hasher, kv));
            Ok(())
        })
        .map_err(failed)?;
        self.events_through(revision, |events| {
            for event in &events {
                hasher.update(&[event.kind as u8]);
                hash_key_value(&mut hasher, &event.kv);
            }
            Ok(())
        })
        .map_err(failed)?;
        Ok(KvHash { hash: hasher.finalize(), compact_revision: self.meta.compacted, revision })
    }
}

/// The value every key changed after `since` had at `since`, from the history.
struct Undo {
    since: Revision,
    /// The next revision to read.
    next: Revision,
    /// Key → its key-value at `since` (`None`: it did not exist).
    before: BTreeMap<Vec<u8>, Option<KeyValue>>,
}

impl Undo {
    /// Reads the changes from `next` through `head`.
    fn read_through(&mut self, engine: &dyn Engine, head: Revision) -> Result<(), EngineError> {
        if head < self.next {
            return Ok(());
        }
        for event in changes(engine, self.next, head) {
            let event = event?;
            debug_assert!(event.revision() > self.since);
            self.before.entry(event.kv.key.clone()).or_insert(event.prev_kv);
        }
        self.next = head.saturating_add(1);
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::command::{Command, DeleteRangeRequest, PutRequest, RangeRequest};
    use crate::types::KeyRange;
    use crate::StateMachine;

    pub(in crate::state) fn put(key: String, value: String, lease: i64) -> Command {
        Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
    }

    /// A deterministic mix of puts, deletes, lease grants and revokes and compactions.
    pub(in crate::state) fn command(step: u64) -> Command {
        let x = step.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        let key = format!("k{:03}", x % 97);
        match x % 11 {
            0 => Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false }),
            1 => Command::DeleteRange(DeleteRangeRequest {
                range: KeyRange::between(key, format!("k{:03}", x % 97 + 5)),
                prev_kv: false,
            }),
            2 => Command::LeaseGrant { id: (x % 5 + 1) as i64, name: None, ttl: 30 },
            3 => Command::LeaseRevoke { id: (x % 5 + 1) as i64 },
            4 => put(key, format!("v{step}"), (x % 5 + 1) as i64),
            _ => put(key, format!("v{step}-{}", "x".repeat((x % 50) as usize)), 0),
        }
    }

    fn all_at(sm: &StateMachine, revision: i64) -> Vec<crate::KeyValue> {
        let everything = RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() };
        sm.range_at(&everything, revision).expect("readable").kvs
    }

    /// Whatever the state does after a view is taken (writes, deletes, revocations whose keys
    /// are swept, compactions past the view), the view reads the keys, the history and the
    /// hash the state had when it was taken, and at any revision between.
    #[test]
    fn a_view_reads_its_revision_while_the_state_moves_on() {
        view_against_a_frozen_copy(false);
    }

    /// The negative control: a view that reads pages as stored sees the later writes.
    #[test]
    #[should_panic(expected = "assertion `left == right` failed")]
    fn a_view_that_undoes_nothing_is_caught() {
        view_against_a_frozen_copy(true);
    }

    /// A reader on another thread while the state applies and flushes: the view's pages and
    /// the history it reads race the writer's batches.
    #[test]
    fn a_view_read_on_another_thread_during_writes_is_consistent() {
        let mut sm = StateMachine::new();
        for step in 0..300 {
            sm.apply(&command(step));
            sm.flush().unwrap();
        }
        let frozen = sm.copy_in_memory();
        let at = sm.revision();
        let view = sm.view().unwrap();
        let reader = std::thread::spawn(move || {
            let mut read = Vec::new();
            view.keys_at(at, |kvs| {
                read.extend(kvs);
                std::thread::yield_now();
                Ok(())
            })
            .unwrap();
            (read, view.hash_kv(0).unwrap())
        });
        for step in 300..3000 {
            sm.apply(&command(step));
            sm.flush().unwrap();
        }
        let (read, hash) = reader.join().unwrap();
        assert_eq!(read, all_at(&frozen, at));
        assert_eq!(hash, frozen.hash_kv(at).unwrap());
    }

    fn view_against_a_frozen_copy(broken: bool) {
        let mut sm = StateMachine::new();
        sm.set_cleanup_budget(2);
        for step in 0..400 {
            sm.apply(&command(step));
            sm.flush().unwrap();
        }
        let frozen = sm.copy_in_memory();
        let at = sm.revision();
        let earlier = at - 25;
        let mut view = sm.view().unwrap();
        view.skip_undo = broken;
        let expected_hash = frozen.hash_kv(at).unwrap();
        let expected_earlier = frozen.hash_kv(earlier).unwrap();
        for step in 400..900 {
            sm.apply(&command(step));
            if step == 600 {
                sm.apply(&Command::Compact { revision: sm.revision() });
            }
            sm.flush().unwrap();
        }
        assert!(sm.compacted_revision() > at, "the state compacted past the view");
        let mut read = Vec::new();
        view.keys_at(at, |kvs| {
            read.extend(kvs);
            Ok(())
        })
        .unwrap();
        assert_eq!(read, all_at(&frozen, at));
        let mut events = Vec::new();
        view.events_through(at, |page| {
            events.extend(page);
            Ok(())
        })
        .unwrap();
        assert_eq!(events, frozen.events_since(0).unwrap());
        assert_eq!(view.hash_kv(0).unwrap(), expected_hash);
        assert_eq!(view.hash_kv(earlier).unwrap(), expected_earlier);
        // Released, the compaction's deletions go through at the next flush.
        drop(view);
        sm.apply(&put("after".into(), "x".into(), 0));
        sm.flush().unwrap();
        assert!(sm.events_since(0).is_err());
    }
}
