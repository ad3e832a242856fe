//! The state machine as a durable value: what its flushes write besides the keys and the
//! history, and how a restart opens it again without reading a value.
//!
//! Each flush writes one engine batch holding the writes of the commands applied since the
//! last one *and* the state's own record ([`MetaRecord`]) naming the last log slot applied,
//! so that the engine's contents and the slot they reflect can never disagree (etcd's
//! consistent index, written in the same bbolt transaction as the data). A restart opens
//! the engine and replays the log after that slot.

use super::StateMachine;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::{prefix_bounds, Engine, EngineError, Scan, WriteBatch};
use crate::membership::Membership;
use crate::state::graveyard::{Death, Graveyard};
use crate::state::history::{History, HistoryMeta};
use crate::state::keyspace::Keyspace;
use crate::state::layout::{
    attachment_of_key, decode_framed, decode_kv_without_value, encode_framed, kv_key, lease_of_key, LeaseRecord,
    ATTACHMENT, LEASE, META_AUTH, META_STATE,
};
use crate::state::lease_keys::LeaseKeys;
use crate::state::lease_table::{Lease, LeaseTable};
use crate::state::Failure;
use crate::types::{LeaseId, Revision};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Entries read per page while opening.
const PAGE: usize = 1024;

/// Everything about the state that is not a key, a change, a lease or an attachment.
/// Written at every flush, so it borrows what it can from the state (`Cow`): the alarms and
/// the membership are not copied per slot.
#[derive(Debug, Serialize, Deserialize)]
struct MetaRecord<'a> {
    /// The log slot the state reflects: every command of every slot up to it is applied.
    applied: u64,
    revision: Revision,
    tenure: Tenure,
    digest: u64,
    grant_counter: u64,
    /// Stored keys (dead ones included) and their size as the quota counts it.
    keys_stored: u64,
    keys_bytes: u64,
    history: HistoryMeta,
    /// Lease deaths whose keys are still being swept.
    deaths: Vec<Death>,
    alarms: Cow<'a, BTreeSet<Alarm>>,
    membership: Cow<'a, Membership>,
}

fn corrupt(what: &str, detail: impl Into<String>) -> EngineError {
    EngineError::Corrupt { what: what.to_string(), detail: detail.into() }
}

impl StateMachine {
    /// Writes the changes of the commands applied since the last flush, with the state's
    /// record naming `applied` as the log slot they reach, to the engine in one batch, then
    /// lets [`crate::state::HistoryReader`]s see them. Reads through the state machine
    /// itself see every applied command whether flushed or not.
    pub fn flush_through(&mut self, applied: u64) -> Result<(), EngineError> {
        let mut batch = WriteBatch::new();
        self.keys.flush_into(&mut batch, self.history.compacted());
        self.history.flush_into(&mut batch, self.keys.live_changes());
        self.leases.flush_into(&mut batch);
        if self.auth_changed {
            batch.put(META_AUTH.to_vec(), encode_framed(&self.auth));
        }
        let meta = MetaRecord {
            applied,
            revision: self.revision,
            tenure: self.tenure,
            digest: self.digest,
            grant_counter: self.leases.grant_counter(),
            keys_stored: self.keys.stored_len() as u64,
            keys_bytes: self.keys.bytes(),
            history: self.history.meta(),
            deaths: self.keys.deaths().collect(),
            alarms: Cow::Borrowed(&self.alarms),
            membership: Cow::Borrowed(&self.membership),
        };
        #[cfg(feature = "negative-controls")]
        if self.applied_before_state {
            let mut first = WriteBatch::new();
            first.put(META_STATE.to_vec(), encode_framed(&meta));
            self.engine.write(first)?;
        }
        batch.put(META_STATE.to_vec(), encode_framed(&meta));
        let published = std::sync::Arc::clone(self.history.published_state());
        published.begin_write();
        let written = self.engine.write(batch);
        if written.is_ok() {
            self.auth_changed = false;
            self.applied = applied;
            self.history.published();
        }
        // After the head is published: a view that waits for this batch (`settle`) then
        // reads its changes through the head, to undo those after its revision.
        published.end_write();
        written
    }

    /// Publishes the changes applied since the last call, or the last flush, to the
    /// history's readers (watch streams) ahead of their engine write. The driver calls it
    /// between commands, once per turn.
    pub fn publish_applied(&mut self) {
        self.history.publish_tail();
    }

    /// A consistent view of the state as of now, to read from another thread while this
    /// state moves on ([`crate::state::StateView`]). Flushes first, naming the slot the
    /// state was last flushed through.
    pub fn view(&mut self) -> Result<crate::state::StateView, EngineError> {
        self.view_through(self.applied)
    }

    /// [`Self::view`], flushing first as the state through log slot `applied` (the replica
    /// applies slots before it flushes them).
    pub fn view_through(&mut self, applied: u64) -> Result<crate::state::StateView, EngineError> {
        self.flush_through(applied)?;
        let meta = crate::state::ViewMeta {
            applied: self.applied,
            revision: self.revision,
            compacted: self.history.compacted(),
            tenure: self.tenure,
            digest: self.digest,
            grant_counter: self.leases.grant_counter(),
            leases: self
                .leases
                .iter()
                .map(|l| Lease { id: l.id, name: l.name.clone(), ttl: l.ttl, keys: LeaseKeys::new() })
                .collect(),
            alarms: self.alarms.clone(),
            membership: self.membership.clone(),
            auth: self.auth.clone(),
            deaths: self.keys.deaths().collect(),
            #[cfg(feature = "negative-controls")]
            damaged: self.keys.damaged().map(<[u8]>::to_vec),
        };
        Ok(crate::state::StateView::new(Arc::clone(&self.engine), Arc::clone(self.history.published_state()), meta))
    }

    /// The log slot the state reflects as of the last flush.
    pub fn applied_slot(&self) -> u64 {
        self.applied
    }

    /// Makes every flush so far durable.
    pub fn sync(&self) -> Result<(), EngineError> {
        self.engine.sync()
    }

    /// Negative control: write the applied point in a batch of its own before the state it
    /// names.
    #[cfg(feature = "negative-controls")]
    pub fn break_applied_before_state(&mut self) {
        self.applied_before_state = true;
    }

    /// Negative control: the cache of recent writes keeps a key's older key-value when the
    /// key is written again.
    #[cfg(feature = "negative-controls")]
    pub fn break_recent_writes(&mut self) {
        self.keys.break_recent_writes();
    }

    /// Negative control: the history's published tail leaves the compaction point behind.
    #[cfg(feature = "negative-controls")]
    pub fn break_tail_compaction(&mut self) {
        self.history.break_tail_compaction();
    }

    /// Negative control: compaction deletes history pages that hold a key's value.
    #[cfg(feature = "negative-controls")]
    pub fn break_live_values(&mut self) {
        self.history.break_live_values();
    }

    /// The state `engine` holds, with the log slot it reflects; `None` if the engine holds
    /// no state (a new node, or one whose state was being replaced when it stopped).
    pub fn open(engine: Arc<dyn Engine>) -> Result<Option<(StateMachine, u64)>, EngineError> {
        let Some(record) = engine.get(META_STATE)? else { return Ok(None) };
        let meta: MetaRecord = decode_framed("the state's record", &record)?;
        let auth: AuthStore = match engine.get(META_AUTH)? {
            Some(record) => decode_framed("the auth store", &record)?,
            None => AuthStore::default(),
        };
        let mut leases = BTreeMap::new();
        for entry in Scan::new(engine.as_ref(), prefix_bounds(&[LEASE]), false, PAGE) {
            let (key, value) = entry?;
            let id = lease_of_key(&key).ok_or_else(|| corrupt("a lease record", format!("key {key:?}")))?;
            let record: LeaseRecord = decode_framed("a lease record", &value)?;
            leases.insert(id, Lease { id, name: record.name, ttl: record.ttl, keys: LeaseKeys::new() });
        }
        let mut buried: BTreeMap<Death, BTreeSet<Vec<u8>>> =
            meta.deaths.iter().map(|&death| (death, BTreeSet::new())).collect();
        let dead: BTreeSet<LeaseId> = meta.deaths.iter().map(|&(id, _)| id).collect();
        for entry in Scan::new(engine.as_ref(), prefix_bounds(&[ATTACHMENT]), false, PAGE) {
            let (engine_key, _) = entry?;
            let (lease, key) =
                attachment_of_key(&engine_key).ok_or_else(|| corrupt("an attachment", format!("{engine_key:?}")))?;
            if dead.contains(&lease) {
                // Dead iff its lease died after the key was written (the graveyard's rule),
                // which only the key's record tells.
                let record = engine.get(&kv_key(key))?.ok_or_else(|| {
                    corrupt("an attachment", format!("key {:?} has none", String::from_utf8_lossy(key)))
                })?;
                let kv = decode_kv_without_value(key, &record)?;
                let after_write = (lease, kv.mod_revision.saturating_add(1))..=(lease, Revision::MAX);
                if let Some((_, keys)) = buried.range_mut(after_write).next() {
                    keys.insert(key.to_vec());
                    continue;
                }
            }
            let Some(live) = leases.get_mut(&lease) else {
                return Err(corrupt(
                    "an attachment",
                    format!(
                        "key {:?} is attached to lease {lease}, which does not exist",
                        String::from_utf8_lossy(key)
                    ),
                ));
            };
            live.keys.insert(key);
        }
        buried.retain(|_, keys| !keys.is_empty());
        let failure = Failure::default();
        let keys = Keyspace::open(
            Arc::clone(&engine),
            failure.clone(),
            usize::try_from(meta.keys_stored).unwrap_or(usize::MAX),
            meta.keys_bytes,
            Graveyard::from_parts(buried),
        );
        let mut history = History::open(Arc::clone(&engine), failure.clone(), meta.history);
        // A view being read when the node stopped kept compacted changes.
        history.drop_leftovers();
        let machine = StateMachine {
            engine,
            failure,
            revision: meta.revision,
            keys,
            history,
            leases: LeaseTable::from_parts(leases, meta.grant_counter),
            tenure: meta.tenure,
            digest: meta.digest,
            alarms: meta.alarms.into_owned(),
            membership: meta.membership.into_owned(),
            auth,
            cleanup_budget: Self::CLEANUP_PER_APPLY,
            applied: meta.applied,
            auth_changed: false,
            #[cfg(feature = "negative-controls")]
            applied_before_state: false,
        };
        Ok(Some((machine, meta.applied)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, PutRequest};
    use crate::engine::MemoryEngine;

    fn put(key: &str, value: &str, lease: i64) -> Command {
        Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
    }

    /// A state flushed through a slot opens again equal to itself, down to the digest, the
    /// leases' key sets, the history and the keys of a lease being swept.
    #[test]
    fn a_flushed_state_opens_as_it_was() {
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let mut sm = StateMachine::on_engine(Arc::clone(&engine)).unwrap();
        sm.set_cleanup_budget(1);
        sm.apply(&Command::LeaseGrant { id: 7, name: Some("svc".into()), ttl: 30 });
        sm.apply(&Command::LeaseGrant { id: 8, name: None, ttl: 30 });
        for i in 0..5 {
            sm.apply(&put(&format!("k{i}"), "v", if i % 2 == 0 { 7 } else { 8 }));
        }
        sm.apply(&put("plain", "x", 0));
        sm.flush_through(3).unwrap();
        sm.apply(&Command::Compact { revision: 4 });
        // Revoking 8 buries two keys; its apply sweeps one of them.
        sm.apply(&Command::LeaseRevoke { id: 8 });
        sm.flush_through(4).unwrap();
        assert_eq!(sm.pending_cleanup(), 1, "one dead key still stored");
        let (opened, applied) = StateMachine::open(Arc::clone(&engine)).unwrap().expect("a state");
        assert_eq!(applied, 4);
        assert_eq!(opened.to_snapshot_bytes(), sm.to_snapshot_bytes());
        assert_eq!(opened.digest(), sm.digest());
        assert_eq!(opened.lease(7).map(|l| l.keys.len()), Some(3));
        assert_eq!(opened.pending_cleanup(), 1);
        assert_eq!(opened.bytes_in_use(), sm.bytes_in_use());
        assert_eq!(opened.events_since(4).unwrap(), sm.events_since(4).unwrap());
    }

    /// Compaction deletes the pages of changes below its point and the size runs wholly
    /// below it, counting the bytes it frees from the runs alone, also when a page straddles
    /// the point (it stays whole). A state written before pages, with a record per change
    /// (with runs, with no sizes at all, or with a size record per change), opens, gets its
    /// runs at the open if it had none, and compacts change by change.
    #[test]
    fn compaction_drops_changes_by_their_size_runs() {
        use crate::engine::Scan;
        use crate::state::change_pages::decode_page;
        use crate::state::layout::{encode_event, event_bounds, event_position};
        use crate::state::size_runs::{all_runs, decode_run, legacy_sizes, RunWriter};
        let count = |engine: &Arc<dyn Engine>, bounds| Scan::new(engine.as_ref(), bounds, false, 64).count();
        let runs = |engine: &Arc<dyn Engine>| -> Vec<Vec<Revision>> {
            Scan::new(engine.as_ref(), all_runs(), false, 64)
                .map(|e| {
                    let (k, v) = e.unwrap();
                    decode_run(&k, &v).unwrap().entries.iter().map(|c| c.main).collect()
                })
                .collect()
        };
        // The first revision of every history record.
        let records = |engine: &Arc<dyn Engine>| -> Vec<Revision> {
            Scan::new(engine.as_ref(), event_bounds(0, Revision::MAX), false, 64)
                .map(|e| event_position(&e.unwrap().0).unwrap().0)
                .collect()
        };
        for start in ["pages", "a change per record", "no sizes", "a size record per change"] {
            let paged = start == "pages";
            let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
            let mut sm = StateMachine::on_engine(Arc::clone(&engine)).unwrap();
            // Revisions 2..=41, flushed ten at a time: four pages, each with its run.
            for i in 0..40 {
                sm.apply(&put(&format!("k{}", i % 7), &"v".repeat(i), 0));
                if i % 10 == 9 {
                    sm.flush_through(1 + i as u64 / 10).unwrap();
                }
            }
            assert_eq!(
                runs(&engine),
                (0..4).map(|r: Revision| (2 + 10 * r..12 + 10 * r).collect::<Vec<_>>()).collect::<Vec<_>>()
            );
            assert_eq!(records(&engine), vec![2, 12, 22, 32]);
            if !paged {
                // The layouts before pages: every change a record of its own.
                let mut batch = WriteBatch::new();
                for entry in Scan::new(engine.as_ref(), event_bounds(0, Revision::MAX), false, 64) {
                    let (key, value) = entry.unwrap();
                    batch.delete(key);
                    for event in decode_page(&[], &value).unwrap() {
                        batch.put(crate::state::layout::event_key(event.revision(), 0), encode_event(&event));
                    }
                }
                let mut sizes = RunWriter::default();
                for entry in Scan::new(engine.as_ref(), all_runs(), false, 64) {
                    let (key, value) = entry.unwrap();
                    batch.delete(key);
                    for change in decode_run(&[], &value).unwrap().entries {
                        match start {
                            "a change per record" => sizes.push(&mut batch, change.main, change.sub, change.bytes),
                            "a size record per change" => {
                                let mut legacy = change.event_key();
                                legacy[0] = b's';
                                batch.put(legacy, change.bytes.to_be_bytes().to_vec());
                            }
                            _ => {}
                        }
                    }
                    sizes.finish(&mut batch);
                }
                engine.write(batch).unwrap();
                assert_eq!(records(&engine), (2..=41).collect::<Vec<_>>());
            }

            let (mut sm, _) = StateMachine::open(Arc::clone(&engine)).unwrap().expect("a state");
            assert!(sm.keys.live_changes().wait(), "the live changes are found");
            assert_eq!(count(&engine, legacy_sizes()), 0, "{start}: converted");
            assert_eq!(runs(&engine).concat(), (2..=41).collect::<Vec<_>>(), "{start}");
            let before = sm.bytes_in_use();
            let history = sm.events_since(30).unwrap();
            sm.apply(&Command::Compact { revision: 30 });
            sm.flush_through(5).unwrap();
            // The page of 22..=31 reaches the point and stays.
            let expected = if paged { vec![22, 32] } else { (30..=41).collect() };
            assert_eq!(records(&engine), expected, "{start}");
            assert_eq!(sm.events_since(30).unwrap(), history, "{start}");
            assert!(sm.bytes_in_use() < before);
            // Again through the run that straddled the point, from a reopened state.
            let (mut sm, _) = StateMachine::open(Arc::clone(&engine)).unwrap().expect("a state");
            assert!(sm.keys.live_changes().wait(), "the live changes are found");
            sm.apply(&Command::Compact { revision: 35 });
            sm.flush_through(6).unwrap();
            let expected = if paged { vec![32] } else { (35..=41).collect() };
            assert_eq!(records(&engine), expected, "{start}");
            assert_eq!(sm.events_since(35).unwrap().len(), 7);
            let left = runs(&engine);
            assert!(left.iter().all(|run| run.last() >= Some(&35)), "{start}: {left:?}");
            let (reopened, _) = StateMachine::open(Arc::clone(&engine)).unwrap().expect("a state");
            assert_eq!(reopened.bytes_in_use(), sm.bytes_in_use());
            // The same bytes as a state that never had a run.
            let fresh = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
            assert_eq!(fresh.bytes_in_use(), sm.bytes_in_use(), "{start}");
        }
    }

    /// A put's value is stored once, in its change; the key's record names the change. So
    /// compaction keeps a page wholly below its point while a key's value is in it, and
    /// deletes it once the key was written again, whether the state was reopened between
    /// or not. With the page deleted anyway (the negative control below), the key's value
    /// is gone and reading it fails the state.
    fn live_values_through_compaction(forget_live_values: bool) -> Result<(), String> {
        use crate::state::layout::{event_bounds, event_position};
        let records = |engine: &Arc<dyn Engine>| -> Vec<Revision> {
            crate::engine::Scan::new(engine.as_ref(), event_bounds(0, Revision::MAX), false, 64)
                .map(|e| event_position(&e.unwrap().0).unwrap().0)
                .collect()
        };
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let mut sm = StateMachine::on_engine(Arc::clone(&engine)).unwrap();
        #[cfg(feature = "negative-controls")]
        if forget_live_values {
            sm.history.break_live_values();
        }
        #[cfg(not(feature = "negative-controls"))]
        let _ = forget_live_values;
        // Revision 2: "kept", alone in its page; 3..=22: "churn", a page a flush.
        sm.apply(&put("kept", "the value", 0));
        sm.flush_through(1).unwrap();
        for i in 0..20u64 {
            sm.apply(&put("churn", &format!("v{i}"), 0));
            sm.flush_through(2 + i).unwrap();
        }
        assert_eq!(records(&engine), (2..=22).collect::<Vec<_>>());
        sm.apply(&Command::Compact { revision: 22 });
        sm.flush_through(22).unwrap();
        sm.flush_through(22).unwrap();
        // Reopened (no cache of recent writes): the value is read from its page, and the
        // live changes are found again.
        let (mut sm, _) = StateMachine::open(Arc::clone(&engine)).unwrap().expect("a state");
        let kept = sm.get(b"kept").map(|kv| kv.value).unwrap_or_default();
        if kept != b"the value" {
            return Err(format!("the value read after compaction is {kept:?} (failure: {:?})", sm.failure.get()));
        }
        assert_eq!(records(&engine), vec![2, 22], "the page of the live value stays, the others go");
        assert!(sm.keys.live_changes().wait(), "the live changes are found");
        sm.flush_through(22).unwrap();
        assert_eq!(records(&engine), vec![2, 22]);
        // Written again, and compacted past: the page goes.
        sm.apply(&put("kept", "another", 0));
        sm.apply(&Command::Compact { revision: 23 });
        sm.flush_through(23).unwrap();
        sm.flush_through(23).unwrap();
        assert_eq!(records(&engine), vec![22, 23], "churn's value is at 22, kept's at 23");
        assert_eq!(sm.get(b"kept").map(|kv| kv.value), Some(b"another".to_vec()));
        Ok(())
    }

    #[test]
    fn compaction_keeps_a_page_while_a_keys_value_is_in_it() {
        live_values_through_compaction(false).unwrap();
    }

    #[cfg(feature = "negative-controls")]
    #[test]
    fn a_page_deleted_while_a_keys_value_is_in_it_is_caught() {
        let err = live_values_through_compaction(true).expect_err("the value must be lost");
        assert!(err.contains("missing from the history"), "{err}");
    }

    #[test]
    fn an_engine_without_a_state_opens_as_none() {
        assert!(StateMachine::open(Arc::new(MemoryEngine::new())).unwrap().is_none());
    }

    /// The applied point and the state it names reach the engine in one batch: a crash
    /// keeps both or neither. The negative control writes the point first; a crash between
    /// the two batches then opens a state that claims a slot whose writes it lacks.
    #[test]
    fn a_crash_never_separates_the_applied_point_from_its_state() {
        for broken in [false, true] {
            let engine = Arc::new(MemoryEngine::new());
            let mut sm = StateMachine::on_engine(engine.clone()).unwrap();
            #[cfg(feature = "negative-controls")]
            if broken {
                sm.break_applied_before_state();
            }
            #[cfg(not(feature = "negative-controls"))]
            if broken {
                continue;
            }
            sm.apply(&put("a", "1", 0));
            sm.flush_through(1).unwrap();
            engine.sync().unwrap();
            sm.apply(&put("b", "1", 0));
            sm.flush_through(2).unwrap();
            engine.crash_keeping(1);
            let (opened, applied) = StateMachine::open(engine.clone()).unwrap().expect("a state");
            let has_b = opened.get(b"b").is_some();
            let consistent = (applied == 2) == has_b;
            assert_eq!(consistent, !broken, "broken: {broken}, applied {applied}, b present: {has_b}");
        }
    }

    /// A DeleteRange and a lease's revoke over keys written in a scattered order, some of
    /// them written again or deleted since the last flush, hand back and record every
    /// deleted key's last value and revisions, in key order: their values are looked up in
    /// revision order (`Keyspace::take_range`, `get_all`), and put back in the keys' order.
    #[test]
    fn many_keys_deleted_at_once_carry_their_last_values_in_key_order() {
        use crate::command::{CommandResponse, DeleteRangeRequest};
        use crate::types::{EventKind, KeyRange, KeyValue};
        use std::collections::BTreeMap;

        const KEYS: usize = 600;
        const STRIDE: usize = 7;
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let mut sm = StateMachine::on_engine(Arc::clone(&engine)).unwrap();
        sm.apply(&Command::LeaseGrant { id: 9, name: None, ttl: 30 });
        let mut model: BTreeMap<Vec<u8>, KeyValue> = BTreeMap::new();
        let mut applied = 1;
        let write = |sm: &mut StateMachine, model: &mut BTreeMap<Vec<u8>, KeyValue>, key: String, round: usize| {
            let lease = if key.starts_with("/l/") { 9 } else { 0 };
            // Values long enough that the recent writes' cache holds few of them.
            let value = format!("{key}@{round}:{}", "v".repeat(200));
            let revision = sm.apply(&put(&key, &value, lease)).revision;
            let old = model.get(key.as_bytes());
            let kv = KeyValue {
                key: key.clone().into_bytes(),
                value: value.into_bytes(),
                create_revision: old.map_or(revision, |o| o.create_revision),
                mod_revision: revision,
                version: old.map_or(1, |o| o.version + 1),
                lease,
            };
            model.insert(kv.key.clone(), kv);
        };
        for i in 0..KEYS {
            let n = i * STRIDE % KEYS;
            let prefix = if n.is_multiple_of(3) { "/l/" } else { "/d/" };
            write(&mut sm, &mut model, format!("{prefix}{n:04}"), 0);
            applied += 1;
            if i % 50 == 49 {
                sm.flush_through(applied).unwrap();
            }
        }
        sm.flush_through(applied).unwrap();
        // Since the flush: some keys written again, some deleted.
        for n in (0..KEYS).step_by(41) {
            let prefix = if n.is_multiple_of(3) { "/l/" } else { "/d/" };
            write(&mut sm, &mut model, format!("{prefix}{n:04}"), 1);
        }
        for n in (5..KEYS).step_by(97).filter(|n| !n.is_multiple_of(3)) {
            let key = format!("/d/{n:04}");
            sm.apply(&Command::DeleteRange(DeleteRangeRequest {
                range: KeyRange { key: key.clone().into_bytes(), range_end: Vec::new() },
                prev_kv: false,
            }));
            model.remove(key.as_bytes());
        }

        let before = sm.revision();
        let delete = Command::DeleteRange(DeleteRangeRequest {
            range: KeyRange { key: b"/d/".to_vec(), range_end: b"/d0".to_vec() },
            prev_kv: true,
        });
        let Ok(CommandResponse::DeleteRange(deleted)) = sm.apply(&delete).result else { panic!("a DeleteRange") };
        let expected: Vec<KeyValue> = model.range(b"/d/".to_vec()..b"/d0".to_vec()).map(|(_, kv)| kv.clone()).collect();
        assert_eq!(deleted.deleted as usize, expected.len());
        assert!(deleted.prev_kvs == expected, "the DeleteRange's prev_kvs are the keys' last key-values, in key order");
        sm.apply(&Command::LeaseRevoke { id: 9 });
        let lease_keys: Vec<KeyValue> =
            model.range(b"/l/".to_vec()..b"/l0".to_vec()).map(|(_, kv)| kv.clone()).collect();

        let events = sm.events_since(before + 1).unwrap();
        let deletes: Vec<(Vec<u8>, Option<KeyValue>)> =
            events.into_iter().filter(|e| e.kind == EventKind::Delete).map(|e| (e.kv.key, e.prev_kv)).collect();
        let recorded: Vec<KeyValue> = deletes.iter().filter_map(|(_, prev)| prev.clone()).collect();
        assert_eq!(recorded.len(), deletes.len(), "every delete event carries its key's last value");
        let wanted: Vec<KeyValue> = expected.into_iter().chain(lease_keys).collect();
        assert!(recorded == wanted, "the delete events carry each key's last key-value, in key order");
        assert_eq!(sm.key_count(), 0);
    }
}
