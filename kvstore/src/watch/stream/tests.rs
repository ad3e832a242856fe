//! The stream's rules against a real state machine's history.

use super::*;
use crate::command::{Command, DeleteRangeRequest, PutRequest};
use crate::types::KeyRange;
use crate::StateMachine;

fn put(sm: &mut StateMachine, key: &str, value: &str) {
    let request = PutRequest { key: key.into(), value: value.into(), lease: 0, prev_kv: false };
    sm.apply(&Command::Put(request)).result.unwrap();
    sm.flush().unwrap();
}

fn delete(sm: &mut StateMachine, key: &str) {
    sm.apply(&Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false }))
        .result
        .unwrap();
    sm.flush().unwrap();
}

fn spec(range: KeyRange, start_revision: Revision) -> WatchSpec {
    WatchSpec { range, start_revision, ..WatchSpec::default() }
}

/// The (key, revision) of every event in `responses`, per watch id.
fn events(responses: &[WatchResponse]) -> Vec<(WatchId, String, Revision)> {
    responses
        .iter()
        .flat_map(|r| {
            r.events.iter().map(move |e| (r.watch_id, String::from_utf8_lossy(&e.kv.key).into_owned(), e.revision()))
        })
        .collect()
}

#[test]
fn a_watch_from_now_gets_only_later_changes_in_order() {
    let mut sm = StateMachine::new();
    put(&mut sm, "a", "1");
    let mut stream = WatchStream::new(StreamConfig::default());
    let created = stream.create(spec(KeyRange::prefix("a"), 0), sm.revision());
    assert_eq!((created.watch_id, created.created, created.header_revision), (0, true, 2));
    assert!(stream.poll(&sm.history_reader(), 10).is_empty());
    put(&mut sm, "a", "2");
    put(&mut sm, "b", "1");
    put(&mut sm, "ab", "1");
    let out = stream.poll(&sm.history_reader(), 10);
    assert_eq!(events(&out), vec![(0, "a".into(), 3), (0, "ab".into(), 5)]);
    assert_eq!(out.len(), 1, "one response for one batch");
    assert!(stream.is_synced(sm.revision()));
}

#[test]
fn a_past_start_catches_up_from_history_and_a_compacted_one_is_cancelled() {
    let mut sm = StateMachine::new();
    for i in 0..5 {
        put(&mut sm, "k", &i.to_string());
    }
    sm.apply(&Command::Compact { revision: 3 }).result.unwrap();
    sm.flush().unwrap();
    let mut stream = WatchStream::new(StreamConfig::default());
    let head = sm.revision();
    let behind = stream.create(spec(KeyRange::single("k"), 3), head).watch_id;
    let lost = stream.create(spec(KeyRange::single("k"), 2), head).watch_id;
    let out = stream.poll(&sm.history_reader(), 10);
    let cancel = out.iter().find(|r| r.watch_id == lost).unwrap();
    assert!(cancel.canceled && cancel.compact_revision == 3 && cancel.events.is_empty());
    assert_eq!(
        events(&out),
        vec![(behind, "k".into(), 3), (behind, "k".into(), 4), (behind, "k".into(), 5), (behind, "k".into(), 6)]
    );
    assert_eq!(stream.len(), 1);
}

#[test]
fn filters_and_prev_kv() {
    let mut sm = StateMachine::new();
    put(&mut sm, "k", "1");
    let mut stream = WatchStream::new(StreamConfig::default());
    let all = KeyRange::prefix("");
    let no_put =
        stream.create(WatchSpec { no_put: true, prev_kv: true, ..spec(all.clone(), 0) }, sm.revision()).watch_id;
    let plain = stream.create(spec(all, 0), sm.revision()).watch_id;
    put(&mut sm, "k", "2");
    delete(&mut sm, "k");
    let out = stream.poll(&sm.history_reader(), 10);
    let of = |id| out.iter().find(|r| r.watch_id == id).unwrap();
    assert_eq!(of(no_put).events.len(), 1);
    assert_eq!(of(no_put).events[0].kind, EventKind::Delete);
    assert_eq!(of(no_put).events[0].prev_kv.as_ref().unwrap().value, b"2");
    assert_eq!(of(plain).events.len(), 2);
    assert!(of(plain).events.iter().all(|e| e.prev_kv.is_none()));
}

#[test]
fn progress_is_only_answered_once_every_watcher_is_synced() {
    let mut sm = StateMachine::new();
    for i in 0..3 {
        put(&mut sm, "k", &i.to_string());
    }
    let mut stream = WatchStream::new(StreamConfig::default());
    stream.create(spec(KeyRange::single("k"), 1), sm.revision());
    assert_eq!(stream.request_progress(sm.revision()), None, "behind: no progress yet");
    let out = stream.poll(&sm.history_reader(), 10);
    let last = out.last().unwrap();
    assert!(last.is_progress_notify() && last.watch_id == STREAM_PROGRESS_ID && last.header_revision == 4);
    assert_eq!(events(&out).len(), 3);
    // Synced: answered at once.
    assert!(stream.request_progress(sm.revision()).is_some());
}

#[test]
fn a_full_client_buffer_holds_the_stream_back_without_losing_events() {
    let mut sm = StateMachine::new();
    for i in 0..50 {
        put(&mut sm, "k", &i.to_string());
    }
    let config = StreamConfig { batch_events: 10, ..StreamConfig::default() };
    let mut stream = WatchStream::new(config);
    stream.create(spec(KeyRange::single("k"), 2), sm.revision());
    let mut got = Vec::new();
    for _ in 0..10 {
        let out = stream.poll(&sm.history_reader(), 1);
        assert!(out.len() <= 1);
        got.extend(events(&out).into_iter().map(|(_, _, rev)| rev));
    }
    assert_eq!(got, (2..=51).collect::<Vec<_>>());
}

#[test]
fn ids_duplicates_and_cancel() {
    let mut stream = WatchStream::new(StreamConfig::default());
    assert_eq!(stream.create(spec(KeyRange::single("a"), 0), 1).watch_id, 0);
    assert_eq!(stream.create(WatchSpec { watch_id: 2, ..spec(KeyRange::single("a"), 0) }, 1).watch_id, 2);
    assert_eq!(stream.create(spec(KeyRange::single("a"), 0), 1).watch_id, 1);
    assert_eq!(stream.create(spec(KeyRange::single("a"), 0), 1).watch_id, 3, "2 is taken");
    let dup = stream.create(WatchSpec { watch_id: 2, ..spec(KeyRange::single("a"), 0) }, 1);
    assert!(dup.created && dup.canceled && dup.cancel_reason == DUPLICATE_ID);
    assert!(stream.cancel(2, 1).unwrap().canceled);
    assert_eq!(stream.cancel(2, 1), None);
    assert_eq!(stream.len(), 3);
}

#[test]
fn big_responses_are_fragmented_only_when_asked() {
    let mut sm = StateMachine::new();
    let mut stream = WatchStream::new(StreamConfig { max_response_bytes: 100, ..StreamConfig::default() });
    let whole = stream.create(spec(KeyRange::prefix(""), 0), sm.revision()).watch_id;
    let split = stream.create(WatchSpec { fragment: true, ..spec(KeyRange::prefix(""), 0) }, sm.revision()).watch_id;
    let value = "x".repeat(60);
    let txn = crate::command::TxnRequest {
        success: ["a", "b", "c"]
            .iter()
            .map(|k| {
                crate::command::TxnOp::Put(PutRequest {
                    key: k.as_bytes().to_vec(),
                    value: value.clone().into(),
                    lease: 0,
                    prev_kv: false,
                })
            })
            .collect(),
        ..Default::default()
    };
    sm.apply(&Command::Txn(txn)).result.unwrap();
    sm.flush().unwrap();
    let out = stream.poll(&sm.history_reader(), 10);
    assert_eq!(out.iter().filter(|r| r.watch_id == whole).count(), 1);
    let pieces: Vec<_> = out.iter().filter(|r| r.watch_id == split).collect();
    assert_eq!(pieces.len(), 3);
    assert_eq!(pieces.iter().map(|r| r.fragment).collect::<Vec<_>>(), vec![true, true, false]);
}

#[test]
fn periodic_progress_goes_to_synced_quiet_watchers_that_asked() {
    let mut sm = StateMachine::new();
    let mut stream = WatchStream::new(StreamConfig::default());
    let asked = stream.create(WatchSpec { progress_notify: true, ..spec(KeyRange::single("a"), 0) }, 1).watch_id;
    stream.create(spec(KeyRange::single("a"), 0), 1);
    let ticks = stream.progress_tick(sm.revision());
    assert_eq!(ticks.iter().map(|r| r.watch_id).collect::<Vec<_>>(), vec![asked]);
    put(&mut sm, "a", "1");
    assert_eq!(stream.poll(&sm.history_reader(), 10).len(), 2);
    assert!(stream.progress_tick(sm.revision()).is_empty(), "an event went out this period");
    assert_eq!(stream.progress_tick(sm.revision()).len(), 1);
}

#[test]
fn a_watcher_beyond_the_cap_is_refused_with_a_reason_and_a_slot_frees_on_cancel() {
    let mut stream = WatchStream::new(StreamConfig { max_watchers: 2, ..StreamConfig::default() });
    let first = stream.create(spec(KeyRange::single("a"), 0), 1).watch_id;
    stream.create(spec(KeyRange::single("b"), 0), 1);
    let refused = stream.create(spec(KeyRange::single("c"), 0), 1);
    assert!(refused.created && refused.canceled);
    assert_eq!(refused.cancel_reason, "too many watchers on this stream (at most 2)");
    assert_eq!(stream.len(), 2);
    assert!(stream.cancel(first, 1).is_some());
    let again = stream.create(spec(KeyRange::single("c"), 0), 1);
    assert!(again.created && !again.canceled, "{again:?}");
}
