//! The watch oracle: checks every response a simulated watch client receives against the
//! history of applied revisions.
//!
//! The reference history is the oracle's own record, collected from every replica's state
//! machine as it applies (each replica's history must agree with it revision by revision)
//! and never compacted. Against it, for each of a client's watchers, the oracle keeps
//! `expect_from`: every matching change below it has been delivered. A response that
//! claims to bring the watcher up to revision `R` (its header) must hold exactly the
//! matching reference changes in `[expect_from, R]`, in order — which is etcd's ordered,
//! unique, reliable, atomic and filter guarantees at once; a resumed watcher continues from
//! where it was (resumable); a progress notification at `R` must find nothing matching in
//! `[expect_from, R]` for every watcher it speaks for (bookmarkable). IsCreate and PrevKV
//! are checked against the key's previous change in the reference, not against what the
//! event carries.

use super::oracle::ViolationKind;
use crate::types::{Event, EventKind, KeyValue, Revision};
use crate::watch::{WatchResponse, WatchSpec};
use std::collections::BTreeMap;

/// The applied history, as first seen on any replica.
#[derive(Debug, Default)]
pub(super) struct Reference {
    /// Changes by revision (each revision's changes in order).
    revisions: BTreeMap<Revision, Vec<Event>>,
    /// Every revision up to this one is recorded (revision 1 has no changes).
    pub(super) head: Revision,
    /// Each key's changes, by revision: for IsCreate and PrevKV.
    by_key: BTreeMap<(Vec<u8>, Revision), KeyValue>,
    /// Keys deleted at a revision (absent from `by_key` as values).
    deleted: BTreeMap<(Vec<u8>, Revision), ()>,
}

impl Reference {
    pub(super) fn new() -> Self {
        Reference { head: 1, ..Default::default() }
    }

    /// Records revisions `head + 1 ..` from `events` (part of a replica's history), and
    /// checks those already recorded; returns a disagreement.
    pub(super) fn observe(&mut self, events: &[Event]) -> Option<String> {
        let mut by_revision: BTreeMap<Revision, Vec<Event>> = BTreeMap::new();
        for e in events {
            by_revision.entry(e.revision()).or_default().push(e.clone());
        }
        for (revision, changes) in by_revision {
            match self.revisions.get(&revision) {
                Some(known) if known != &changes => {
                    return Some(format!(
                        "replica history at revision {revision} is {changes:?}, another replica's was {known:?}"
                    ))
                }
                Some(_) => {}
                None if revision == self.head + 1 => {
                    for e in &changes {
                        match e.kind {
                            EventKind::Put => {
                                self.by_key.insert((e.kv.key.clone(), revision), e.kv.clone());
                            }
                            EventKind::Delete => {
                                self.deleted.insert((e.kv.key.clone(), revision), ());
                            }
                        }
                    }
                    self.revisions.insert(revision, changes);
                    self.head = revision;
                }
                None => {
                    // A replica restored from a snapshot starts past what is recorded; the
                    // revisions in between come from another replica.
                    return None;
                }
            }
        }
        None
    }

    /// The value of `key` just before `revision` (None if absent).
    fn before(&self, key: &[u8], revision: Revision) -> Option<&KeyValue> {
        let last_put = self.by_key.range((key.to_vec(), 0)..(key.to_vec(), revision)).next_back();
        let last_delete = self.deleted.range((key.to_vec(), 0)..(key.to_vec(), revision)).next_back();
        match (last_put, last_delete) {
            (Some(((_, put_at), kv)), Some(((_, del_at), ()))) if put_at > del_at => Some(kv),
            (Some((_, kv)), None) => Some(kv),
            _ => None,
        }
    }

    /// The reference changes in `[from, to]` that `spec` matches.
    fn matching(&self, spec: &WatchSpec, from: Revision, to: Revision) -> Vec<&Event> {
        if from > to {
            return Vec::new();
        }
        self.revisions
            .range(from..=to)
            .flat_map(|(_, changes)| changes.iter())
            .filter(|e| {
                let filtered = match e.kind {
                    EventKind::Put => spec.no_put,
                    EventKind::Delete => spec.no_delete,
                };
                !filtered && spec.range.contains(&e.kv.key)
            })
            .collect()
    }
}

/// What the oracle knows about one client watcher.
#[derive(Debug, Clone)]
pub(super) struct Tracked {
    /// The watcher as the client first asked for it.
    pub(super) spec: WatchSpec,
    /// Every matching change below this was delivered (or, for a watch from a given
    /// revision, lies before its start); 0 until known (a watch "from now" learns its start
    /// from its created response).
    pub(super) expect_from: Revision,
    /// The watcher ended (cancelled by the client or the server).
    pub(super) done: bool,
}

/// A broken watch guarantee: (kind, detail).
pub(super) type Broken = (ViolationKind, String);

/// Checks one response for watcher `w` (`None` for a stream-wide progress notification,
/// then `all` are the stream's watchers). `compacted` is the node's compaction point.
pub(super) fn check(
    reference: &Reference,
    response: &WatchResponse,
    w: Option<&mut Tracked>,
    all: &mut [&mut Tracked],
    compacted: Revision,
) -> Result<(), Broken> {
    let r = response.header_revision;
    if r > reference.head {
        return Err((
            ViolationKind::WatchFuture,
            format!("a response at revision {r} beyond the applied history {}", reference.head),
        ));
    }
    let Some(w) = w else {
        // A progress notification for the whole stream: bookmarkable for every watcher.
        for t in all.iter_mut().filter(|t| !t.done && t.expect_from > 0) {
            let missing = reference.matching(&t.spec, t.expect_from, r);
            if let Some(first) = missing.first() {
                return Err((
                    ViolationKind::WatchBookmark,
                    format!(
                        "progress notification at {r} while a watcher on {:?} had not been sent the change of {:?} at {}",
                        t.spec.range,
                        String::from_utf8_lossy(&first.kv.key),
                        first.revision()
                    ),
                ));
            }
            t.expect_from = t.expect_from.max(r + 1);
        }
        return Ok(());
    };
    if response.created {
        if w.expect_from == 0 {
            w.expect_from = r + 1;
        }
        return Ok(());
    }
    if response.canceled {
        w.done = true;
        if response.compact_revision > 0 && w.expect_from >= response.compact_revision {
            return Err((
                ViolationKind::WatchCancel,
                format!(
                    "cancelled with compact revision {} although it was at {}, not below",
                    response.compact_revision, w.expect_from
                ),
            ));
        }
        if response.compact_revision > compacted {
            return Err((
                ViolationKind::WatchCancel,
                format!("compact revision {} above the node's compaction point {compacted}", response.compact_revision),
            ));
        }
        return Ok(());
    }
    let expected = reference.matching(&w.spec, w.expect_from, r);
    let got: Vec<(Revision, EventKind, &[u8], &KeyValue)> =
        response.events.iter().map(|e| (e.revision(), e.kind, e.kv.key.as_slice(), &e.kv)).collect();
    let want: Vec<(Revision, EventKind, &[u8], &KeyValue)> =
        expected.iter().map(|e| (e.revision(), e.kind, e.kv.key.as_slice(), &e.kv)).collect();
    if got != want {
        let show = |v: &[(Revision, EventKind, &[u8], &KeyValue)]| {
            v.iter().map(|(r, k, key, _)| format!("{r}:{k:?}:{}", String::from_utf8_lossy(key))).collect::<Vec<_>>()
        };
        let kind = if response.events.is_empty() { ViolationKind::WatchBookmark } else { ViolationKind::WatchSequence };
        return Err((
            kind,
            format!(
                "watcher on {:?} from {}: a response through {r} brought {:?}, the history has {:?}",
                w.spec.range,
                w.expect_from,
                show(&got),
                show(&want)
            ),
        ));
    }
    // The sequence is right: the watcher has what it is owed up to `r`, whatever follows.
    w.expect_from = r + 1;
    for e in &response.events {
        let before = reference.before(&e.kv.key, e.revision());
        if e.kind == EventKind::Put && e.is_create() != before.is_none() {
            return Err((
                ViolationKind::WatchIsCreate,
                format!(
                    "PUT of {:?} at {}: IsCreate is {}",
                    String::from_utf8_lossy(&e.kv.key),
                    e.revision(),
                    e.is_create()
                ),
            ));
        }
        if w.spec.prev_kv && e.prev_kv.as_ref() != before {
            return Err((
                ViolationKind::WatchPrevKv,
                format!(
                    "{:?} of {:?} at {}: prev_kv {:?}, the value at {} was {:?}",
                    e.kind,
                    String::from_utf8_lossy(&e.kv.key),
                    e.revision(),
                    e.prev_kv.as_ref().map(|p| String::from_utf8_lossy(&p.value).into_owned()),
                    e.revision() - 1,
                    before.map(|p| String::from_utf8_lossy(&p.value).into_owned())
                ),
            ));
        }
        if !w.spec.prev_kv && e.prev_kv.is_some() {
            return Err((ViolationKind::WatchPrevKv, "prev_kv sent to a watcher that did not ask for it".to_string()));
        }
    }
    Ok(())
}
