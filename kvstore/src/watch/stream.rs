//! One client stream's watchers and the responses owed to them.

use super::{EventSource, StreamConfig, WatchBreakage, WatchId, WatchResponse, WatchSpec, STREAM_PROGRESS_ID};
use crate::state::HistoryRead;
use crate::types::{Event, EventKind, KeyRange, Revision};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// etcd's reason for refusing a client-chosen id already in use on the stream.
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// Most history batches one [`WatchStream::poll`] reads, so that one call stays short even
/// for a stream far behind; the driver polls again while there is room.
const MAX_BATCHES_PER_POLL: usize = 64;

/// One watcher: what it watches and how far it has been sent. Kept small (48 bytes plus
/// its key), because a node may hold hundreds of thousands: the key range as two boxed
/// slices rather than the [`WatchSpec`]'s vectors, and only the options that matter after
/// creation.
#[derive(Debug, Clone)]
struct Watcher {
    /// The first key (or the only one), as in [`KeyRange::key`].
    key: Box<[u8]>,
    /// As in [`KeyRange::range_end`]: empty for a single key.
    range_end: Box<[u8]>,
    /// Every matching event below this revision was sent; none at or above it was.
    next: Revision,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    fragment: bool,
    /// Whether a response went out since the last progress tick (then no notification is
    /// needed: the client learned the revision from it).
    sent_since_tick: bool,
}

impl Watcher {
    fn new(spec: WatchSpec, next: Revision) -> Self {
        Watcher {
            key: spec.range.key.into_boxed_slice(),
            range_end: spec.range.range_end.into_boxed_slice(),
            next,
            no_put: spec.no_put,
            no_delete: spec.no_delete,
            prev_kv: spec.prev_kv,
            progress_notify: spec.progress_notify,
            fragment: spec.fragment,
            sent_since_tick: false,
        }
    }

    fn is_single(&self) -> bool {
        self.range_end.is_empty()
    }

    fn covers(&self, key: &[u8]) -> bool {
        KeyRange::range_contains(&self.key, &self.range_end, key)
    }

    fn wants(&self, event: &Event) -> bool {
        let filtered = match event.kind {
            EventKind::Put => self.no_put,
            EventKind::Delete => self.no_delete,
        };
        !filtered && self.covers(&event.kv.key)
    }
}

/// The watchers of one client stream (see the [module](super) documentation).
#[derive(Debug)]
pub struct WatchStream {
    config: StreamConfig,
    watchers: BTreeMap<WatchId, Watcher>,
    /// The watchers of one key each, by a hash of the key: matching an event to them is one
    /// lookup, so a stream with many such watchers does not test every watcher against every
    /// event. A hash, not the key, keeps the index small (a collision only costs the range
    /// test that every match goes through anyway).
    by_key: HashMap<u64, Ids>,
    /// The watchers of a range, tested against every event.
    ranged: BTreeSet<WatchId>,
    /// The next id to try for a watcher that did not choose one (etcd starts at 0).
    next_auto_id: WatchId,
    /// A `WatchProgressRequest` is waiting for every watcher to be synced.
    progress_requested: bool,
}

impl WatchStream {
    /// A stream with no watchers.
    pub fn new(config: StreamConfig) -> Self {
        WatchStream {
            config,
            watchers: BTreeMap::new(),
            by_key: HashMap::new(),
            ranged: BTreeSet::new(),
            next_auto_id: 0,
            progress_requested: false,
        }
    }

    /// Number of watchers on the stream.
    pub fn len(&self) -> usize {
        self.watchers.len()
    }

    /// Whether the stream has no watchers.
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// The ids of the watchers, in order.
    pub fn ids(&self) -> impl Iterator<Item = WatchId> + '_ {
        self.watchers.keys().copied()
    }

    /// Opens a watcher; `head` is the store revision now. The answer is the `created`
    /// response, which must be sent before anything [`Self::poll`] returns later; a refused
    /// watcher's answer is also `canceled`, with the reason.
    pub fn create(&mut self, spec: WatchSpec, head: Revision) -> WatchResponse {
        let refuse = |reason: String| WatchResponse {
            watch_id: STREAM_PROGRESS_ID,
            header_revision: head,
            created: true,
            canceled: true,
            cancel_reason: reason,
            ..WatchResponse::default()
        };
        if spec.watch_id != 0 && self.watchers.contains_key(&spec.watch_id) {
            return refuse(DUPLICATE_ID.to_string());
        }
        if self.watchers.len() >= self.config.max_watchers {
            return refuse(format!("too many watchers on this stream (at most {})", self.config.max_watchers));
        }
        let id = if spec.watch_id != 0 {
            spec.watch_id
        } else {
            while self.watchers.contains_key(&self.next_auto_id) {
                self.next_auto_id += 1;
            }
            self.next_auto_id += 1;
            self.next_auto_id - 1
        };
        // A negative start is below any compaction point; `poll` cancels it as etcd does.
        let next = if spec.start_revision != 0 { spec.start_revision } else { head + 1 };
        if spec.range.is_single() {
            let hash = key_hash(&spec.range.key);
            match self.by_key.get_mut(&hash) {
                Some(ids) => ids.push(id),
                None => {
                    self.by_key.insert(hash, Ids::One(id));
                }
            }
        } else {
            self.ranged.insert(id);
        }
        self.watchers.insert(id, Watcher::new(spec, next));
        WatchResponse { watch_id: id, header_revision: head, created: true, ..WatchResponse::default() }
    }

    /// Closes a watcher at the client's request; an unknown id is ignored (as etcd does).
    pub fn cancel(&mut self, id: WatchId, head: Revision) -> Option<WatchResponse> {
        let watcher = self.watchers.remove(&id)?;
        self.unindex(id, &watcher);
        Some(WatchResponse { watch_id: id, header_revision: head, canceled: true, ..WatchResponse::default() })
    }

    /// Answers a `WatchProgressRequest`: a notification at `head` if every watcher has been
    /// sent everything up to it, otherwise later, from the [`Self::poll`] that syncs them
    /// (answering early would vouch for events not sent yet, etcd #15220).
    pub fn request_progress(&mut self, head: Revision) -> Option<WatchResponse> {
        if self.is_synced(head) || self.config.broken(WatchBreakage::ProgressWhileUnsynced) {
            self.progress_requested = false;
            return Some(progress(STREAM_PROGRESS_ID, head));
        }
        self.progress_requested = true;
        None
    }

    /// Whether every watcher has been sent everything up to `head`.
    pub fn is_synced(&self, head: Revision) -> bool {
        self.watchers.values().all(|w| w.next > head)
    }

    /// Whether [`Self::poll`] has something to do at store revision `head`.
    pub fn has_work(&self, head: Revision) -> bool {
        !self.is_synced(head) || (self.progress_requested && self.is_synced(head))
    }

    /// Reads what the watchers are owed from `source` and returns the responses, in the
    /// order they must be sent. `room` is how many responses the client's buffer can take:
    /// reading stops once that many are produced (a batch's responses are never cut), and
    /// the watchers left behind catch up at a later poll.
    pub fn poll(&mut self, source: &impl EventSource, room: usize) -> Vec<WatchResponse> {
        let mut out = Vec::new();
        if self.watchers.values().any(|w| w.next < 1) {
            // etcd cancels a negative start like a compacted one, naming its compaction
            // point, which is -1 before the first compaction.
            let compacted = source.compacted();
            self.cancel_compacted(1, if compacted > 0 { compacted } else { -1 }, source.head(), &mut out);
        }
        let drop_when_full = self.config.broken(WatchBreakage::DropWhenFull);
        for _ in 0..MAX_BATCHES_PER_POLL {
            let head = source.head();
            let Some(from) = self.watchers.values().map(|w| w.next).filter(|&n| n <= head).min() else { break };
            if out.len() >= room && !drop_when_full {
                break;
            }
            match source.read(from, self.config.batch_events) {
                HistoryRead::Compacted(compacted) => self.cancel_compacted(compacted, compacted, head, &mut out),
                HistoryRead::Events { events, through } => self.deliver(events, through, &mut out),
            }
            if drop_when_full {
                out.truncate(room);
            }
        }
        let head = source.head();
        if self.progress_requested && self.is_synced(head) {
            self.progress_requested = false;
            out.push(progress(STREAM_PROGRESS_ID, head));
        }
        out
    }

    /// Sends a periodic progress notification at `head` to each watcher that asked for them,
    /// is synced, and was sent nothing since the last tick; starts the next period.
    pub fn progress_tick(&mut self, head: Revision) -> Vec<WatchResponse> {
        let mut out = Vec::new();
        for (&id, w) in &mut self.watchers {
            if w.progress_notify && w.next > head && !w.sent_since_tick {
                out.push(progress(id, head));
            }
            w.sent_since_tick = false;
        }
        out
    }

    /// Cancels every watcher whose next revision is below `below`, telling it the
    /// compaction point `compacted` (etcd gives no cancel reason: the compact revision says
    /// it, and clients turn it into `ErrCompacted`).
    fn cancel_compacted(&mut self, below: Revision, compacted: Revision, head: Revision, out: &mut Vec<WatchResponse>) {
        let behind: Vec<WatchId> = self.watchers.iter().filter(|(_, w)| w.next < below).map(|(&id, _)| id).collect();
        for id in behind {
            if let Some(watcher) = self.watchers.remove(&id) {
                self.unindex(id, &watcher);
            }
            out.push(WatchResponse {
                watch_id: id,
                header_revision: head,
                canceled: true,
                compact_revision: compacted,
                ..WatchResponse::default()
            });
        }
    }

    /// Removes a watcher that left from the key index.
    fn unindex(&mut self, id: WatchId, watcher: &Watcher) {
        if watcher.is_single() {
            let hash = key_hash(&watcher.key);
            if self.by_key.get_mut(&hash).is_some_and(|ids| ids.remove(id)) {
                self.by_key.remove(&hash);
            }
        } else {
            self.ranged.remove(&id);
        }
    }

    /// Hands each watcher that is owed part of `events` (every change from the smallest
    /// `next` through `through`) the ones it wants, in one response (or in fragments).
    fn deliver(&mut self, events: Vec<Event>, through: Revision, out: &mut Vec<WatchResponse>) {
        // Which events each watcher's range matches: single-key watchers by lookup, range
        // watchers by test; event indices stay in order.
        let mut matches: BTreeMap<WatchId, Vec<usize>> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            for &id in self.by_key.get(&key_hash(&e.kv.key)).map_or(&[][..], Ids::as_slice) {
                matches.entry(id).or_default().push(i);
            }
        }
        for &id in &self.ranged {
            if let Some(w) = self.watchers.get(&id) {
                let hits: Vec<usize> = (0..events.len()).filter(|&i| w.covers(&events[i].kv.key)).collect();
                if !hits.is_empty() {
                    matches.insert(id, hits);
                }
            }
        }
        let mut shapes = Shapes::new(events);
        for (&id, w) in &mut self.watchers {
            if w.next > through {
                continue;
            }
            let mut wanted: Vec<Arc<Event>> = Vec::new();
            for &i in matches.get(&id).into_iter().flatten() {
                if shapes.event(i).revision() >= w.next && w.wants(shapes.event(i)) {
                    wanted.push(shapes.shaped(i, w.prev_kv, &self.config));
                }
            }
            w.next = through + 1;
            if wanted.is_empty() {
                continue;
            }
            w.sent_since_tick = true;
            let response =
                WatchResponse { watch_id: id, header_revision: through, events: wanted, ..WatchResponse::default() };
            if w.fragment {
                out.extend(fragments(response, self.config.max_response_bytes));
            } else if self.config.broken(WatchBreakage::SplitRevision) {
                out.extend(split_a_revision(response));
            } else {
                out.push(response);
            }
        }
    }
}

/// One history batch's events in the two shapes watchers take them, each made once and
/// shared: as read (with the previous key-value) and, when a watcher without `prev_kv` needs
/// it, without.
struct Shapes {
    full: Vec<Arc<Event>>,
    bare: Vec<Option<Arc<Event>>>,
}

impl Shapes {
    fn new(events: Vec<Event>) -> Self {
        let bare = vec![None; events.len()];
        Shapes { full: events.into_iter().map(Arc::new).collect(), bare }
    }

    fn event(&self, i: usize) -> &Event {
        &self.full[i]
    }

    /// Event `i` as a watcher receives it: with the previous key-value only if it asked.
    fn shaped(&mut self, i: usize, prev_kv: bool, config: &StreamConfig) -> Arc<Event> {
        let full = &self.full[i];
        if prev_kv {
            if config.broken(WatchBreakage::PrevKvFromCurrent) && full.kind == EventKind::Put {
                return Arc::new(Event { kind: full.kind, kv: full.kv.clone(), prev_kv: Some(full.kv.clone()) });
            }
            return full.clone();
        }
        if full.prev_kv.is_none() {
            return full.clone();
        }
        self.bare[i]
            .get_or_insert_with(|| Arc::new(Event { kind: full.kind, kv: full.kv.clone(), prev_kv: None }))
            .clone()
    }
}

/// The watchers under one key hash: almost always one, which needs no allocation. The
/// list is boxed so that an index entry stays 16 bytes.
#[derive(Debug)]
enum Ids {
    One(WatchId),
    #[allow(clippy::box_collection)]
    Many(Box<Vec<WatchId>>),
}

impl Ids {
    fn push(&mut self, id: WatchId) {
        match self {
            Ids::One(first) => *self = Ids::Many(Box::new(vec![*first, id])),
            Ids::Many(ids) => ids.push(id),
        }
    }

    /// Removes `id`; true when none is left.
    fn remove(&mut self, id: WatchId) -> bool {
        match self {
            Ids::One(only) => *only == id,
            Ids::Many(ids) => {
                ids.retain(|&other| other != id);
                ids.is_empty()
            }
        }
    }

    fn as_slice(&self) -> &[WatchId] {
        match self {
            Ids::One(id) => std::slice::from_ref(id),
            Ids::Many(ids) => ids,
        }
    }
}

/// The index's hash of a key (std's SipHash with fixed keys: the same in every process, so
/// the simulator stays deterministic).
fn key_hash(key: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// A progress notification for `id` at `revision`.
fn progress(id: WatchId, revision: Revision) -> WatchResponse {
    WatchResponse { watch_id: id, header_revision: revision, ..WatchResponse::default() }
}

/// About how many bytes `event` takes on the wire.
fn event_bytes(event: &Event) -> usize {
    let kv = |k: &crate::types::KeyValue| k.key.len() + k.value.len() + 40;
    kv(&event.kv) + event.prev_kv.as_ref().map_or(0, kv)
}

/// `response` split into pieces of at most `max_bytes` of events (at least one event
/// each), every piece but the last marked as a fragment (etcd's `fragment`).
fn fragments(response: WatchResponse, max_bytes: usize) -> Vec<WatchResponse> {
    let total: usize = response.events.iter().map(|e| event_bytes(e)).sum();
    if total <= max_bytes || response.events.len() < 2 {
        return vec![response];
    }
    let header = header_of(&response);
    let mut pieces: Vec<WatchResponse> = Vec::new();
    let mut current = Vec::new();
    let mut size = 0;
    for event in response.events {
        let bytes = event_bytes(&event);
        if !current.is_empty() && size + bytes > max_bytes {
            pieces.push(WatchResponse { events: std::mem::take(&mut current), fragment: true, ..header.clone() });
            size = 0;
        }
        size += bytes;
        current.push(event);
    }
    pieces.push(WatchResponse { events: current, fragment: false, ..header });
    pieces
}

fn header_of(response: &WatchResponse) -> WatchResponse {
    WatchResponse { watch_id: response.watch_id, header_revision: response.header_revision, ..WatchResponse::default() }
}

/// The [`WatchBreakage::SplitRevision`] control: the first revision with two or more events
/// is cut between two responses.
fn split_a_revision(response: WatchResponse) -> Vec<WatchResponse> {
    let events = &response.events;
    let cut = (1..events.len()).find(|&i| events[i].revision() == events[i - 1].revision());
    let Some(cut) = cut else { return vec![response] };
    let mut first = response.clone();
    let second_events = first.events.split_off(cut);
    let second = WatchResponse { events: second_events, ..header_of(&response) };
    vec![first, second]
}

#[cfg(test)]
mod tests;
