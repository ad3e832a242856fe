//! A read of the key space at one revision, served on any thread while the state machine
//! goes on applying: how a Range leaves the node loop.
//!
//! The driver decides *when* a read may be served (the read index, a read lease, the
//! revision asked for) and takes a [`ReadView`] then, in O(1): it flushes nothing and
//! copies no key. A reader thread answers from it later, as etcd answers a Range from a
//! read transaction beside its apply loop.
//!
//! Taking a view pins the history, so nothing the view may need is deleted, and notes the
//! revision `B` the engine holds every change through (the published head, or the revision
//! read if that is older). Reading then merges two sources:
//! - the engine's key records, page by page, which show each key as of *some* moment after
//!   `B` (the loop keeps writing);
//! - the overlay: every change after `B` from the history (engine pages, the published
//!   tail, and changes a compaction dropped before their flush), read after each engine
//!   page once every batch begun before that page was read is published. A key with a
//!   change at or before the view's revision `R` takes the last such change; a key changed
//!   only after `R` takes the value it had before its first change after `R`.
//!
//! A key not in the overlay did not change after `B`, so its record is its value at `R`; a
//! key in it is decided by the history alone. Memory: one engine page plus one entry per key
//! of the range changed since `B`.

use self::trace::{timed, Phase, ReadTrace};
use super::change_pages::ValueReader;
use super::graveyard::Death;
use super::history::Published;
use super::key_index::KeyIndex;
use super::keyspace::Selection;
use super::layout::{decode_kv_without_value, decode_stored, kv_bounds, kv_key, user_key};
use super::Failure;
use crate::command::{RangeRequest, RangeResponse};
use crate::engine::{Engine, EngineError};
use crate::error::KvError;
use crate::types::{EventKind, KeyRange, KeyValue, Revision, NO_LEASE};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// Keys read from the engine per page while key-values are collected.
const PAGE: usize = 256;
/// Keys read per page once only the count is left to find.
const COUNT_PAGE: usize = 4096;
/// The most revisions a count of a range catches up on from its last count; further behind,
/// the range is counted again (reading the changes would cost about as much).
const COUNT_CATCH_UP: Revision = 65_536;

/// The key space at one revision, readable from any thread (see the module docs). Dropping
/// it lets compaction delete what it kept.
pub struct ReadView {
    engine: Arc<dyn Engine>,
    published: Arc<Published>,
    failure: Failure,
    pin: u64,
    /// The revision read.
    revision: Revision,
    /// The engine holds every change through this revision (at most `revision`).
    base: Revision,
    /// The number of live keys at `revision`, when it is the store revision the view was
    /// taken at (a count of every key is then known without a scan).
    live_keys: Option<usize>,
    /// The live keys at `latest`, when no dead key was stored: counts from ranks.
    index: Option<KeyIndex>,
    /// The store revision when the view was taken (at least `revision`).
    latest: Revision,
    /// Lease deaths whose keys were not all swept when the view was taken.
    deaths: Vec<Death>,
    /// Negative control: the key whose value reads see damaged.
    #[cfg(feature = "negative-controls")]
    damaged: Option<Vec<u8>>,
    /// Negative control of the view's tests: the history's changes are not read.
    #[cfg(test)]
    ignore_overlay: bool,
    /// Negative control of the view's tests: a count kept at an earlier revision is given
    /// as it was, without the changes since.
    #[cfg(test)]
    stale_counts: bool,
    /// Negative control of the view's tests: a count from the key index is given as it is
    /// at the store revision, without undoing the changes after the view's revision.
    #[cfg(test)]
    stale_index: bool,
}

impl std::fmt::Debug for ReadView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadView").field("revision", &self.revision).field("base", &self.base).finish()
    }
}

impl Drop for ReadView {
    fn drop(&mut self) {
        self.published.unpin(self.pin);
    }
}

/// What a view is made of, as the state machine hands it over.
pub(super) struct ReadViewParts {
    pub(super) engine: Arc<dyn Engine>,
    pub(super) published: Arc<Published>,
    pub(super) failure: Failure,
    pub(super) revision: Revision,
    pub(super) live_keys: Option<usize>,
    pub(super) index: Option<KeyIndex>,
    pub(super) latest: Revision,
    pub(super) deaths: Vec<Death>,
    #[cfg(feature = "negative-controls")]
    pub(super) damaged: Option<Vec<u8>>,
}

impl ReadView {
    /// A view at `parts.revision`; the caller published every change through the store
    /// revision (the history's tail) first.
    pub(super) fn new(parts: ReadViewParts) -> Self {
        // Pinned before the head is read: every change after it stays readable.
        let pin = parts.published.pin(parts.revision);
        let base = parts.published.head().min(parts.revision);
        ReadView {
            engine: parts.engine,
            published: parts.published,
            failure: parts.failure,
            pin,
            revision: parts.revision,
            base,
            live_keys: parts.live_keys,
            index: parts.index,
            latest: parts.latest,
            deaths: parts.deaths,
            #[cfg(feature = "negative-controls")]
            damaged: parts.damaged,
            #[cfg(test)]
            ignore_overlay: false,
            #[cfg(test)]
            stale_counts: false,
            #[cfg(test)]
            stale_index: false,
        }
    }

    /// The revision this view reads.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// Answers `request` (its range, limit, count and keys-only rules; its revision is the
    /// view's) as the key space was at the view's revision.
    pub fn range(&self, request: &RangeRequest) -> Result<RangeResponse, KvError> {
        self.range_within(request, u64::MAX)
    }

    /// [`Self::range`], refused with [`KvError::ResponseTooLarge`] when the answer's encoded
    /// size passes `max_bytes`: key-values past it are counted, not kept, so a reader never
    /// holds more than that of one answer.
    pub fn range_within(&self, request: &RangeRequest, max_bytes: u64) -> Result<RangeResponse, KvError> {
        let trace = ReadTrace::begin();
        let selection = Selection::of(&request.range)?;
        let mut answer = Answer::new(request, max_bytes);
        let mut overlay = self.overlay_for(&request.range);
        let result = self.answer(selection, request, &mut overlay, &mut answer);
        // A page at a past revision leaves its overlay for the scan's next page.
        if self.base == self.revision && matches!(selection, Selection::Interval(_)) && result.is_ok() {
            // The next page starts after this one's last key: what lies before it is let go.
            if let (true, Some(last)) = (answer.count > answer.taken, answer.kvs.last()) {
                overlay.start_after(&last.key);
            }
            self.published.overlays.keep(overlay);
        }
        trace.end(|| {
            let end = String::from_utf8_lossy(&request.range.range_end).into_owned();
            let key = String::from_utf8_lossy(&request.range.key).into_owned();
            format!(
                "range {key:?}..{end:?} at {} limit {} count_only {}",
                self.revision, request.limit, request.count_only
            )
        });
        result?;
        answer.finish()
    }

    /// The overlay a read of `range` starts from: the one a page before it at the same
    /// revision left (client-go's paginated LIST reads every page at the first page's
    /// revision), or a new one. Reused, a page reads only the changes since the page before,
    /// not every change since the revision again: a scan under a write load costs
    /// O(pages + changes), not O(pages × changes).
    fn overlay_for(&self, range: &KeyRange) -> Overlay {
        let compacted = self.published.compaction_point();
        self.published.overlays.forget_through(compacted);
        let reusable = self.base == self.revision && self.revision > compacted;
        reusable.then(|| self.published.overlays.take(self.revision, range)).flatten().unwrap_or_else(|| {
            #[cfg(test)]
            self.published.overlays.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Overlay::new(self.base, self.revision, range.clone())
        })
    }

    fn answer(
        &self,
        selection: Selection<'_>,
        request: &RangeRequest,
        overlay: &mut Overlay,
        answer: &mut Answer,
    ) -> Result<(), KvError> {
        match selection {
            Selection::Single(key) => {
                let record = self.engine.get(&kv_key(key)).map_err(unreadable)?;
                overlay.catch_up(self)?;
                match overlay.changed.get(key) {
                    Some(changed) => self.offer_changed(answer, changed.clone()),
                    None => {
                        if let Some(record) = record {
                            self.offer_stored(answer, key, &record, &mut ValueReader::new(self.engine.as_ref()))?;
                        }
                    }
                }
            }
            Selection::Interval(bounds) if request.count_only => match self.known_count(&request.range, bounds)? {
                Some(count) => answer.count = count,
                None => {
                    self.scan(bounds, overlay, answer, None)?;
                    self.published.keep_count(&request.range, self.revision, answer.count);
                }
            },
            Selection::Interval(bounds) => {
                // A page's count is every key from its start: known, the scan stops at the
                // page's end.
                let known = if request.limit > 0 { self.known_count(&request.range, bounds)? } else { None };
                self.scan(bounds, overlay, answer, known)?;
                // And this page leaves the next page's: its own, less its keys.
                if let (Some(last), true) = (answer.kvs.last(), answer.count > answer.taken) {
                    let mut next = KeyRange { key: last.key.clone(), range_end: request.range.range_end.clone() };
                    next.key.push(0);
                    self.published.keep_count(&next, self.revision, answer.count - answer.taken);
                }
            }
        }
        Ok(())
    }

    /// The number of keys in `range` (whose engine bounds are `bounds`) at the view's
    /// revision without reading its keys, or `None` when only a scan can tell. In order of
    /// cost: the key index at the store revision (a rank search); a count of the range kept
    /// at the revision nearest the view's (the page before left it, or a `count_only`
    /// loop's last), with the changes between; the key index with the changes after the
    /// view's revision undone. Each is kept as the range's count at the view's revision.
    fn known_count(&self, range: &KeyRange, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Result<Option<usize>, KvError> {
        let indexed = || self.index.as_ref().map(|index| (self.latest, index.count(bounds)));
        if self.revision == self.latest {
            if let Some((_, count)) = indexed() {
                return Ok(Some(count));
            }
        }
        if let Some((at, count)) = self.published.nearest_count(range, self.revision) {
            if let Some(count) = self.count_across(range, at, count)? {
                return Ok(Some(count));
            }
        }
        match indexed() {
            Some((at, count)) => self.count_across(range, at, count),
            None => Ok(None),
        }
    }

    /// The number of keys in `range` at the view's revision `R` from `count`, its number
    /// at revision `C` (before or after `R`): `count` with the changes of the range between
    /// the two applied or undone. A key existed at the lower revision if its first change
    /// after it had a previous value, and exists at the higher if its last change through
    /// it is a put. It reads only the changes of the range between the two, where counting
    /// again reads every key: `count_only` loops (Kubernetes counts every resource's
    /// prefix) and pages at a LIST's revision cost O(changes) instead of O(keys). `None`:
    /// `C` is compacted or too far from `R`.
    fn count_across(&self, range: &KeyRange, at: Revision, count: usize) -> Result<Option<usize>, KvError> {
        let (low, high) = (at.min(self.revision), at.max(self.revision));
        // Every change after the compaction point is retained, and the view's pin keeps
        // the ones after its revision readable from here on.
        if high - low > COUNT_CATCH_UP || low < self.published.compaction_point() {
            return Ok(None);
        }
        #[cfg(test)]
        if (self.stale_counts && at < self.revision) || (self.stale_index && at > self.revision) {
            return Ok(Some(count));
        }
        if low == high {
            return Ok(Some(count));
        }
        timed(Phase::Settle, || self.published.settle(), |_| 0);
        let in_range = |event: &crate::types::Event| range.contains(&event.kv.key);
        let (events, through) = timed(
            Phase::History,
            || self.published.pinned_changes_from(self.engine.as_ref(), &self.failure, low.saturating_add(1), in_range),
            |read| read.as_ref().map_or(0, |(events, _)| events.len()),
        )
        .map_err(unreadable)?;
        if through < high {
            return Ok(None);
        }
        // Per key changed: whether it existed at `low`, and whether it exists at `high`.
        let mut changed: BTreeMap<&[u8], (bool, bool)> = BTreeMap::new();
        for event in events.iter().filter(|e| e.revision() <= high) {
            let entry = changed.entry(event.kv.key.as_slice()).or_insert((event.prev_kv.is_some(), false));
            entry.1 = event.kind == EventKind::Put;
        }
        let created = changed.values().filter(|(before, after)| !before && *after).count();
        let deleted = changed.values().filter(|(before, after)| *before && !after).count();
        // A count that would go below zero was wrong where it was kept: count again.
        let counted = match at < self.revision {
            true => (count + created).checked_sub(deleted),
            false => (count + deleted).checked_sub(created),
        };
        let Some(counted) = counted else { return Ok(None) };
        self.published.keep_count(range, self.revision, counted);
        Ok(Some(counted))
    }

    /// Reads the interval `bounds` page by page into `answer`, until it needs nothing more.
    fn scan(
        &self,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        overlay: &mut Overlay,
        answer: &mut Answer,
        known_count: Option<usize>,
    ) -> Result<(), KvError> {
        let everything = matches!(bounds, (Bound::Unbounded, Bound::Unbounded));
        let upper: Bound<Vec<u8>> = bounds.1.map(<[u8]>::to_vec);
        let mut lower: Bound<Vec<u8>> = bounds.0.map(<[u8]>::to_vec);
        let mut values = ValueReader::new(self.engine.as_ref());
        loop {
            if !answer.collecting() {
                // The rest of the count is known: no key past the page is read.
                if let Some(count) = known_count.filter(|&count| count >= answer.taken) {
                    answer.count = count;
                    return Ok(());
                }
                if let (true, Some(live)) = (everything, self.live_keys) {
                    answer.count = live;
                    return Ok(());
                }
            }
            let size = if answer.collecting() { PAGE } else { COUNT_PAGE };
            let bounds = kv_bounds((as_ref(&lower), as_ref(&upper)));
            let read = || match answer.collecting() || !self.deaths.is_empty() {
                true => self.engine.scan(&bounds, false, size),
                // Only counting, and no stored key can be dead: no record is read at all.
                false => {
                    self.engine.scan_keys(&bounds, size).map(|keys| keys.into_iter().map(|k| (k, Vec::new())).collect())
                }
            };
            let page = timed(Phase::Records, read, |page| page.as_ref().map_or(0, Vec::len)).map_err(unreadable)?;
            let full = page.len() == size;
            overlay.catch_up(self)?;
            let page_end: Bound<Vec<u8>> = match (full, page.last()) {
                (true, Some((last, _))) => Bound::Included(user_key(last).to_vec()),
                _ => upper.clone(),
            };
            let mut changed = overlay.changed.range::<[u8], _>((as_ref(&lower), as_ref(&page_end))).peekable();
            for (engine_key, record) in &page {
                let key = user_key(engine_key);
                while let Some((other, _)) = changed.peek() {
                    if other.as_slice() >= key {
                        break;
                    }
                    if let Some((_, kv)) = changed.next() {
                        self.offer_changed(answer, kv.clone());
                    }
                }
                match changed.peek() {
                    Some((other, _)) if other.as_slice() == key => {
                        if let Some((_, kv)) = changed.next() {
                            self.offer_changed(answer, kv.clone());
                        }
                    }
                    _ => self.offer_stored(answer, key, record, &mut values)?,
                }
            }
            for (_, kv) in changed {
                self.offer_changed(answer, kv.clone());
            }
            match page_end {
                Bound::Included(last) if full => lower = Bound::Excluded(last),
                _ => return Ok(()),
            }
        }
    }

    /// A key decided by the history: its value at the view's revision, if it had one.
    fn offer_changed(&self, answer: &mut Answer, kv: Option<KeyValue>) {
        if let Some(kv) = kv {
            if answer.collecting() {
                answer.take(self.as_read(kv));
            } else {
                answer.count += 1;
            }
        }
    }

    /// A key the history did not change since the base: its record is its value.
    fn offer_stored(
        &self,
        answer: &mut Answer,
        key: &[u8],
        record: &[u8],
        values: &mut ValueReader<'_>,
    ) -> Result<(), KvError> {
        if !answer.collecting() && self.deaths.is_empty() {
            answer.count += 1;
            return Ok(());
        }
        let with_value = answer.collecting() && !answer.keys_only;
        let decoded = match with_value {
            true => decode_stored(key, record),
            false => {
                decode_kv_without_value(key, record).map(|kv| super::layout::StoredKv { kv, value_in_history: false })
            }
        };
        // A record that does not decode stops the replica, as on any read of the state.
        let unreadable =
            || KvError::StateUnreadable(self.failure.get().unwrap_or("a key record is corrupt").to_string());
        let stored = self.failure.check(decoded).ok_or_else(unreadable)?;
        if self.is_dead(&stored.kv) {
            return Ok(());
        }
        match answer.collecting() {
            true => {
                let kv = self.failure.check(values.resolve(stored)).ok_or_else(unreadable)?;
                answer.take(self.as_read(kv))
            }
            false => answer.count += 1,
        }
        Ok(())
    }

    /// Whether `kv`, stored, is a key of a lease dead at the view's revision.
    fn is_dead(&self, kv: &KeyValue) -> bool {
        kv.lease != NO_LEASE
            && self.deaths.iter().any(|&(id, at)| id == kv.lease && at > kv.mod_revision && at <= self.revision)
    }

    /// `kv` as reads see it (damaged under the corruption check's negative control).
    fn as_read(&self, kv: KeyValue) -> KeyValue {
        #[cfg(feature = "negative-controls")]
        if self.damaged.as_deref() == Some(kv.key.as_slice()) {
            return super::keyspace::damage(kv);
        }
        kv
    }
}

/// The keys of a range changed after the view's base, each with its value at the view's
/// revision (`None`: it did not exist then).
pub(super) struct Overlay {
    revision: Revision,
    /// The next revision to read from the history.
    next: Revision,
    range: KeyRange,
    changed: BTreeMap<Vec<u8>, Option<KeyValue>>,
}

/// Overlays left by pages at past revisions, for the next page of their scan (see
/// [`ReadView::overlay_for`]); shared by a state's views.
#[derive(Default)]
pub(super) struct Overlays(
    std::sync::Mutex<Vec<Overlay>>,
    /// Overlays built new (a test's measure of reuse).
    #[cfg(test)]
    std::sync::atomic::AtomicUsize,
);

/// Overlays kept at most (one per scan in progress; a scan whose overlay was pushed out
/// builds a new one at its next page).
const OVERLAYS_KEPT: usize = 32;

impl std::fmt::Debug for Overlays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Overlays")
    }
}

impl Overlays {
    /// The overlay for a page of `range` at `revision`, from the kept one whose range covers
    /// it (the same end, a start at or before its start) most closely, if one is kept. The
    /// scan's own (its start is the page's) is taken; another one is copied, narrowed to
    /// `range`, and stays for its own scan. Why copied: scans that began together read at one
    /// revision, and one taking another's overlay left that scan to build a new one at its
    /// next page, reading every change since the revision again (16 scanners of 1M keys
    /// under a put load: 1.2 s a page, every page).
    fn take(&self, revision: Revision, range: &KeyRange) -> Option<Overlay> {
        let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let covers = |o: &Overlay| {
            o.revision == revision
                && o.range.range_end == range.range_end
                && o.range.key <= range.key
                && !range.range_end.is_empty()
        };
        // The closest start; of equal ones, the one kept last.
        let (found, closest) = kept
            .iter()
            .enumerate()
            .filter(|(_, o)| covers(o))
            .max_by(|(i, a), (j, b)| (&a.range.key, i).cmp(&(&b.range.key, j)))?;
        if closest.range.key == range.key {
            return Some(kept.remove(found));
        }
        Some(closest.narrowed_to(&range.key))
    }

    /// Keeps `overlay` for a later page; the overlay used longest ago makes room.
    fn keep(&self, overlay: Overlay) {
        let mut kept = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() >= OVERLAYS_KEPT {
            kept.remove(0);
        }
        kept.push(overlay);
    }

    /// Forgets the overlays at or below `revision` (compacted: no read reaches them).
    pub(super) fn forget_through(&self, revision: Revision) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|o| o.revision > revision);
    }
}

impl Overlay {
    fn new(base: Revision, revision: Revision, range: KeyRange) -> Self {
        Overlay { revision, next: base.saturating_add(1), range, changed: BTreeMap::new() }
    }

    /// A copy of the overlay for the keys from `start` on (at or after its own start).
    fn narrowed_to(&self, start: &[u8]) -> Overlay {
        let changed = self.changed.range::<[u8], _>((Bound::Included(start), Bound::Unbounded));
        Overlay {
            revision: self.revision,
            next: self.next,
            range: KeyRange { key: start.to_vec(), range_end: self.range.range_end.clone() },
            changed: changed.map(|(key, kv)| (key.clone(), kv.clone())).collect(),
        }
    }

    /// Narrows the overlay to the keys after `last`, for the page that starts there.
    fn start_after(&mut self, last: &[u8]) {
        let mut start = last.to_vec();
        start.push(0);
        if start > self.range.key {
            self.changed = self.changed.split_off(start.as_slice());
            self.range.key = start;
        }
    }

    /// Reads the changes published since the last call. Waits first for every engine batch
    /// begun before it to be published: a record the caller just read from the engine was
    /// written by one of them, and its change is then read here.
    fn catch_up(&mut self, view: &ReadView) -> Result<(), KvError> {
        #[cfg(test)]
        if view.ignore_overlay {
            return Ok(());
        }
        timed(Phase::Settle, || view.published.settle(), |_| 0);
        let range = &self.range;
        let in_range = |event: &crate::types::Event| range.contains(&event.kv.key);
        let (events, through) = timed(
            Phase::History,
            || view.published.pinned_changes_from(view.engine.as_ref(), &view.failure, self.next, in_range),
            |read| read.as_ref().map_or(0, |(events, _)| events.len()),
        )
        .map_err(unreadable)?;
        for event in events {
            if event.revision() <= self.revision {
                let key = event.kv.key.clone();
                let now = match event.kind {
                    EventKind::Put => Some(event.kv),
                    EventKind::Delete => None,
                };
                self.changed.insert(key, now);
            } else {
                self.changed.entry(event.kv.key.clone()).or_insert(event.prev_kv);
            }
        }
        self.next = self.next.max(through.saturating_add(1));
        Ok(())
    }
}

/// The answer being built: etcd's limit, count, `keys_only` and `count_only` rules, as
/// [`super::Keyspace::read`] applies them, and the response limit.
struct Answer {
    limit: usize,
    count_only: bool,
    keys_only: bool,
    kvs: Vec<KeyValue>,
    /// Key-values taken, kept or not.
    taken: usize,
    count: usize,
    /// The answer's encoded size so far, and the most it may reach.
    bytes: u64,
    max_bytes: u64,
}

impl Answer {
    fn new(request: &RangeRequest, max_bytes: u64) -> Self {
        let limit = if request.limit > 0 { usize::try_from(request.limit).unwrap_or(usize::MAX) } else { usize::MAX };
        Answer {
            limit,
            count_only: request.count_only,
            keys_only: request.keys_only,
            kvs: Vec::new(),
            taken: 0,
            count: 0,
            bytes: RESPONSE_FRAME_BYTES,
            max_bytes,
        }
    }

    /// Whether key-values are still collected (else only counted).
    fn collecting(&self) -> bool {
        !self.count_only && self.taken < self.limit
    }

    fn take(&mut self, mut kv: KeyValue) {
        if self.keys_only {
            kv.value = Vec::new();
        }
        self.bytes = self.bytes.saturating_add(encoded_len(&kv));
        self.taken += 1;
        self.count += 1;
        match self.bytes > self.max_bytes {
            // Refused in the end: what was kept is let go now, and nothing more is kept.
            true => self.kvs = Vec::new(),
            false => self.kvs.push(kv),
        }
    }

    fn finish(self) -> Result<RangeResponse, KvError> {
        if self.bytes > self.max_bytes {
            return Err(KvError::ResponseTooLarge { size: self.bytes, limit: self.max_bytes });
        }
        let count = i64::try_from(self.count).unwrap_or(i64::MAX);
        Ok(RangeResponse { more: !self.count_only && self.count > self.kvs.len(), count, kvs: self.kvs })
    }
}

/// What a RangeResponse's header, `more` and `count` take at most, encoded.
const RESPONSE_FRAME_BYTES: u64 = 64;

/// `kv`'s size as one of a RangeResponse's `kvs`, encoded: its field's tag and length, and
/// its own fields (etcd's `mvccpb.KeyValue`; a field at its default is not sent).
fn encoded_len(kv: &KeyValue) -> u64 {
    fn varint(value: u64) -> u64 {
        u64::from((64 - (value | 1).leading_zeros()).div_ceil(7))
    }
    fn bytes(field: &[u8]) -> u64 {
        let len = field.len() as u64;
        if len == 0 {
            0
        } else {
            1 + varint(len) + len
        }
    }
    fn int(value: i64) -> u64 {
        // An int64 is sent as its two's complement: a negative one takes ten bytes.
        if value == 0 {
            0
        } else {
            1 + varint(value as u64)
        }
    }
    let body = bytes(&kv.key)
        + int(kv.create_revision)
        + int(kv.mod_revision)
        + int(kv.version)
        + bytes(&kv.value)
        + int(kv.lease);
    1 + varint(body) + body
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn unreadable(error: EngineError) -> KvError {
    KvError::StateUnreadable(error.to_string())
}

#[cfg(test)]
mod tests;
mod trace;
