//! The history's changes stored a page at a time: one engine record holds the changes one
//! flush wrote, in order, up to [`PAGE_BYTES`] of them (or [`RUN_LEN`] changes).
//!
//! Why pages: sled's cost per insert outweighs its cost per byte. With a record per change a
//! put gave the engine two records (its key and its change); with pages it gives one and a
//! share of a page. Measured with `scalebench clients` (64 / 256 clients, two runs each),
//! leaving the change records out altogether raised the put rate from 9,738 / 8,379 to
//! 11,088 / 11,101 at 64 clients and from 13,806 / 11,924 to 15,748 / 18,306 at 256; pages
//! are the way to most of that without losing the history.
//!
//! A page lives under the engine key of its first change, `e ++ main ++ sub`
//! ([`super::layout::event_key`]), so that engine order is history order and a change's page
//! is the last record at or before its position. Each page has its size run under the same
//! position ([`super::size_runs`], marked as a page's), which tells compaction what the page
//! counts and when all of it is below the compaction point, without reading the page.
//!
//! Pages are kept below [`PAGE_BYTES`] so that the engine stores each as one record (it
//! splits longer ones into pieces); a change longer than that is a page of its own. The
//! records of the layout before pages (one change each, format 1) read as pages of one.

use super::history::Retiring;
use super::layout::{
    decode_event, encode_event_body, event_key, event_position, page_offsets, search_page, search_page_until,
    walk_page, StoredKv, EVENT, PAGE_FORMAT,
};
use super::size_runs::{RunWriter, SizeEntry, RUN_LEN};
use crate::engine::{prefix_end, Engine, EngineError, KeyBounds, Scan, WriteBatch};
use crate::types::{Event, KeyValue, Revision};
use std::ops::Bound;

/// A page's length at most, once it holds more than one change: below the engine's piece
/// length (32 KiB), so that a page is one engine record.
pub(super) const PAGE_BYTES: usize = 24 << 10;

/// Pages read from the engine per scan refill, oldest first (views and watches read on).
const SCAN_PAGE: usize = 16;
/// Pages read per refill newest first: a read at a past revision usually goes back a little.
const SCAN_PAGE_BACK: usize = 2;

/// Collects the changes of one flush into pages, and writes each page with its size run.
#[derive(Debug, Default)]
pub(super) struct PageWriter {
    /// The page being filled: its format byte and its changes' records.
    page: Vec<u8>,
    /// Its changes' positions and sizes.
    sizes: Vec<SizeEntry>,
}

impl PageWriter {
    /// Adds the change at `position`, counting `bytes` toward the quota; writes the page
    /// to `batch` first if the change would not fit in it.
    pub(super) fn push(&mut self, batch: &mut WriteBatch, position: (Revision, u32), event: &Event, bytes: u64) {
        let mut body =
            Vec::with_capacity(event.kv.value.len() + event.prev_kv.as_ref().map_or(0, |p| p.value.len()) + 64);
        encode_event_body(event, &mut body);
        if !self.sizes.is_empty() && (self.page.len() + body.len() > PAGE_BYTES || self.sizes.len() >= RUN_LEN) {
            self.finish(batch);
        }
        if self.page.is_empty() {
            self.page.push(PAGE_FORMAT);
        }
        self.page.extend_from_slice(&body);
        self.sizes.push(SizeEntry { main: position.0, sub: position.1, bytes });
    }

    /// Writes the page being filled, if any, and its size run to `batch`.
    pub(super) fn finish(&mut self, batch: &mut WriteBatch) {
        let Some(first) = self.sizes.first() else { return };
        batch.put(event_key(first.main, first.sub), std::mem::take(&mut self.page));
        RunWriter::write_page_run(batch, &self.sizes);
        self.sizes.clear();
    }
}

/// The changes a history record holds, in order: a page, or one change of the layout
/// before pages.
pub(super) fn decode_page(engine_key: &[u8], record: &[u8]) -> Result<Vec<Event>, EngineError> {
    match record.first() {
        Some(&PAGE_FORMAT) => {
            let what = || format!("history page at {:?}", event_position(engine_key));
            let mut rest = &record[1..];
            let mut events = Vec::new();
            while !rest.is_empty() {
                let (event, tail) = super::layout::decode_event_body(rest, &what)?;
                events.push(event);
                rest = tail;
            }
            Ok(events)
        }
        _ => Ok(vec![decode_event(engine_key, record)?]),
    }
}

/// Calls `each` with every change a history record holds, in order (a page's read in
/// place): whether it is a put, its key, its revision and the length of the value it wrote.
pub(super) fn walk_record(
    engine_key: &[u8],
    record: &[u8],
    mut each: impl FnMut(bool, &[u8], Revision, usize),
) -> Result<(), EngineError> {
    match record.split_first() {
        Some((&PAGE_FORMAT, body)) => {
            let what = || format!("history page at {:?}", event_position(engine_key));
            walk_page(body, &what, each)
        }
        _ => {
            let event = decode_event(engine_key, record)?;
            let put = event.kind == crate::types::EventKind::Put;
            each(put, &event.kv.key, event.revision(), event.kv.value.len());
            Ok(())
        }
    }
}

/// Looks up the values that key records leave in the history: a put's value is stored once,
/// in its change, and the key's record names its revision ([`super::layout::StoredKv`]).
///
/// It keeps the last few pages it read: the keys of a range written together (a load, a
/// transaction, a burst of registrations) sit in the same pages, so a range read reads
/// each page from the engine once, not once per key.
pub(super) struct ValueReader<'e> {
    engine: &'e dyn Engine,
    pages: RecentPages,
}

/// The history pages a [`ValueReader`] read last ([`KeptPage`]), most recently used first.
///
/// A key space keeps them between its lookups ([`ValueReader::resuming`]): a command
/// over many keys written together (a DeleteRange of a prefix, a lease's keys) looks their
/// values up one key at a time, and without them each lookup read and checked a whole
/// page from the value files for one value. Keeping a page is safe for as long as anything
/// reads it: a change's value never changes, and a page a key names is never retired.
#[derive(Debug, Default)]
pub(super) struct RecentPages(Vec<KeptPage>);

/// A page a [`ValueReader`] keeps.
#[derive(Debug)]
struct KeptPage {
    start: (Revision, u32),
    /// The newest revision of a change in it.
    newest: Revision,
    record: Vec<u8>,
    /// Where each of its changes starts in the record, with its revision
    /// ([`page_offsets`]): a lookup reads the changes of one revision, not the page's
    /// ~20 (1 KiB values) to ~200 (100 B). Empty for a record of the layout before pages.
    offsets: Vec<(Revision, usize)>,
}

impl KeptPage {
    /// The page `record` stored at `start`, its changes' offsets read (one walk through it).
    fn read(start: (Revision, u32), record: Vec<u8>) -> Result<Self, EngineError> {
        let offsets = match record.split_first() {
            Some((&PAGE_FORMAT, body)) => page_offsets(body, &|| format!("history page at {start:?}"))?,
            _ => Vec::new(),
        };
        // A page is in revision order; a record of the layout before pages is one change.
        let newest = offsets.last().map_or(start.0, |&(revision, _)| revision);
        Ok(KeptPage { start, newest, record, offsets })
    }

    /// Whether it holds every change of `revision`: it starts at or before the first one
    /// and goes past it.
    fn holds(&self, revision: Revision) -> bool {
        (self.start.0 < revision || self.start == (revision, 0)) && self.newest > revision
    }

    /// The value the put of `key` at `revision` wrote, if this page holds it.
    fn value_of(&self, key: &[u8], revision: Revision) -> Result<Option<Vec<u8>>, EngineError> {
        if self.offsets.is_empty() {
            return Ok(search(&self.start, &self.record, key, revision)?.0);
        }
        let first = self.offsets.partition_point(|(r, _)| *r < revision);
        let Some(&(_, at)) = self.offsets.get(first) else { return Ok(None) };
        let what = || format!("history page at {:?}", self.start);
        let body = self.record.get(1 + at..).unwrap_or_default();
        Ok(search_page_until(body, key, revision, &what)?.map(<[u8]>::to_vec))
    }
}

/// Pages a [`ValueReader`] keeps.
const PAGES_KEPT: usize = 8;

impl RecentPages {
    /// Keeps `page` as the one read last, unless it is one change longer than a page
    /// (read once: its key's one value) and so not worth the memory.
    fn keep(&mut self, page: KeptPage) {
        if page.record.len() <= PAGE_BYTES + PAGE_SLACK {
            self.0.truncate(PAGES_KEPT - 1);
            self.0.insert(0, page);
        }
    }
}

/// What a page record may hold past [`PAGE_BYTES`] and still be kept: its format byte and
/// the framing of its last change.
const PAGE_SLACK: usize = 1 << 10;

impl<'e> ValueReader<'e> {
    /// A reader of `engine`'s pages.
    pub(super) fn new(engine: &'e dyn Engine) -> Self {
        ValueReader { engine, pages: RecentPages::default() }
    }

    /// A reader of `engine`'s pages that starts with `pages`, the pages an earlier reader
    /// of the same engine kept ([`Self::into_pages`]).
    pub(super) fn resuming(engine: &'e dyn Engine, pages: RecentPages) -> Self {
        ValueReader { engine, pages }
    }

    /// The pages this reader keeps, for the next one.
    pub(super) fn into_pages(self) -> RecentPages {
        self.pages
    }

    /// The key-value `stored` is, with its value looked up if the history holds it.
    pub(super) fn resolve(&mut self, stored: StoredKv) -> Result<KeyValue, EngineError> {
        let StoredKv { mut kv, value_in_history } = stored;
        if value_in_history {
            kv.value = self.value_of(&kv.key, kv.mod_revision)?;
        }
        Ok(kv)
    }

    /// The value of `key`'s put at `revision`, from the page holding that change.
    pub(super) fn value_of(&mut self, key: &[u8], revision: Revision) -> Result<Vec<u8>, EngineError> {
        if let Some(at) = self.pages.0.iter().position(|page| page.holds(revision)) {
            let page = self.pages.0.remove(at);
            let found = page.value_of(key, revision)?;
            self.pages.0.insert(0, page);
            return found.ok_or_else(|| missing(key, revision));
        }
        // Newest first from the revision's last position: the first page read holds the
        // revision's last change, and one that starts inside the revision has the ones
        // before it in the pages before.
        // One page a refill: the first usually holds the value, and a page read is a file
        // read (the value log's), not a copy out of sled's cache.
        let bounds = (Bound::Included(vec![EVENT]), Bound::Included(event_key(revision, u32::MAX)));
        let mut value = None;
        for entry in Scan::new(self.engine, bounds, true, 1) {
            let (page_key, record) = entry?;
            let Some(start) = event_position(&page_key) else { break };
            let page = KeptPage::read(start, record)?;
            let found = page.value_of(key, revision)?;
            let whole = start.0 < revision || start == (revision, 0);
            self.pages.keep(page);
            if found.is_some() || whole {
                value = found;
                break;
            }
        }
        value.ok_or_else(|| missing(key, revision))
    }
}

/// The put of `key` at `revision` in the history record at `start`, if it holds it, and
/// the newest revision the record holds.
fn search(
    start: &(Revision, u32),
    record: &[u8],
    key: &[u8],
    revision: Revision,
) -> Result<(Option<Vec<u8>>, Revision), EngineError> {
    let what = || format!("history page at {start:?}");
    match record.split_first() {
        Some((&PAGE_FORMAT, body)) => {
            let found = search_page(body, key, revision, &what)?;
            Ok((found.value.map(<[u8]>::to_vec), found.newest))
        }
        _ => {
            let event = decode_event(&event_key(start.0, start.1), record)?;
            let wanted =
                event.kind == crate::types::EventKind::Put && event.revision() == revision && event.kv.key == key;
            Ok((wanted.then_some(event.kv.value), start.0))
        }
    }
}

fn missing(key: &[u8], revision: Revision) -> EngineError {
    EngineError::Corrupt {
        what: format!("key {:?}", String::from_utf8_lossy(key)),
        detail: format!("its value, written at revision {revision}, is missing from the history"),
    }
}

/// The engine bounds of every history record.
fn all_pages() -> KeyBounds {
    (Bound::Included(vec![EVENT]), prefix_end(&[EVENT]).map_or(Bound::Unbounded, Bound::Excluded))
}

/// The engine key of the page holding the first change at or after revision `from`: the
/// last record before that revision's first position if there is one (a page that began
/// below `from` may hold changes at it), else that position.
fn page_start(engine: &dyn Engine, from: Revision) -> Result<Vec<u8>, EngineError> {
    let at = event_key(from, 0);
    let before = (Bound::Included(vec![EVENT]), Bound::Excluded(at.clone()));
    match Scan::new(engine, before, true, 1).next() {
        Some(entry) => Ok(entry?.0),
        None => Ok(at),
    }
}

/// Every change from revision `from` through `through`, oldest first, read page by page.
pub(super) fn changes(
    engine: &dyn Engine,
    from: Revision,
    through: Revision,
) -> impl Iterator<Item = Result<Event, EngineError>> + '_ {
    let start = if from > through { Ok(None) } else { page_start(engine, from).map(Some) };
    let (pages, failed) = match start {
        Ok(Some(start)) => {
            let bounds = (Bound::Included(start), Bound::Included(event_key(through, u32::MAX)));
            let mut scan = Scan::new(engine, bounds, false, SCAN_PAGE).peekable();
            // A watcher that is caught up reads from the first revision of the newest page:
            // the page before it holds nothing at `from` then, and is not decoded.
            let at = event_key(from, 0);
            let first = match scan.next() {
                Some(Ok((key, _))) if key < at && matches!(scan.peek(), Some(Ok((next, _))) if *next == at) => None,
                first => first,
            };
            (Some(first.into_iter().chain(scan)), None)
        }
        Ok(None) => (None, None),
        Err(e) => (None, Some(e)),
    };
    let events = pages.into_iter().flatten().flat_map(|entry| match entry {
        Ok((key, record)) => match decode_page(&key, &record) {
            Ok(events) => events.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        },
        Err(e) => vec![Err(e)],
    });
    failed
        .map(Err)
        .into_iter()
        .chain(events.filter(move |e| e.as_ref().map_or(true, |e| (from..=through).contains(&e.revision()))))
}

/// Every stored change, newest first (callers stop when they have gone back far enough).
pub(super) fn changes_newest_first(engine: &dyn Engine) -> impl Iterator<Item = Result<Event, EngineError>> + '_ {
    Scan::new(engine, all_pages(), true, SCAN_PAGE_BACK).flat_map(|entry| match entry {
        Ok((key, record)) => match decode_page(&key, &record) {
            Ok(events) => events.into_iter().rev().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        },
        Err(e) => vec![Err(e)],
    })
}

/// Keys read per engine page while the records below a revision are listed.
const KEYS_PAGE: usize = 4096;

/// The history records wholly below revision `below`, with the revisions they span: every
/// record before that revision's first position but the last, which is kept if it is a
/// page reaching `below` (it is read to know). Only keys are read for the others, so that a
/// start reads no value of the pages kept for the keys whose values they hold; the span of
/// each of those reaches the next record's first revision (one too many at most).
pub(super) fn records_below(engine: &dyn Engine, below: Revision) -> Result<Vec<Retiring>, EngineError> {
    let end = Bound::Excluded(event_key(below.max(0), 0));
    let mut keys: Vec<Vec<u8>> = Vec::new();
    loop {
        let lower = keys.last().map_or(Bound::Included(vec![EVENT]), |k| Bound::Excluded(k.clone()));
        let page = engine.scan_keys(&(lower, end.clone()), KEYS_PAGE)?;
        let full = page.len() == KEYS_PAGE;
        keys.extend(page);
        if !full {
            break;
        }
    }
    let first_of = |key: &[u8]| event_position(key).map_or(0, |(main, _)| main);
    let mut retiring = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let last = match keys.get(i + 1) {
            Some(next) => first_of(next),
            None => {
                let Some(record) = engine.get(key)? else { continue };
                let events = decode_page(key, &record)?;
                if !events.iter().all(|e| e.revision() < below) {
                    continue;
                }
                events.iter().map(Event::revision).max().unwrap_or_else(|| first_of(key))
            }
        };
        retiring.push(Retiring { key: key.clone(), first: first_of(key), last });
    }
    Ok(retiring)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, MemoryEngine};
    use crate::types::{EventKind, KeyValue};

    fn put(key: &str, revision: Revision, value_len: usize) -> Event {
        let kv = KeyValue {
            key: key.into(),
            value: vec![b'v'; value_len],
            create_revision: revision,
            mod_revision: revision,
            version: 1,
            lease: 0,
        };
        Event { kind: EventKind::Put, kv, prev_kv: None }
    }

    /// Revisions 1..=n, one change each of `value_len` bytes, written in one flush.
    fn engine_with(n: Revision, value_len: usize) -> MemoryEngine {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        let mut writer = PageWriter::default();
        for r in 1..=n {
            writer.push(&mut batch, (r, 0), &put(&format!("k{r}"), r, value_len), 1);
        }
        writer.finish(&mut batch);
        engine.write(batch).unwrap();
        engine
    }

    fn below(engine: &MemoryEngine, revision: Revision) -> Vec<Vec<u8>> {
        records_below(engine, revision).unwrap().into_iter().map(|r| r.key).collect()
    }

    fn revisions(events: impl Iterator<Item = Result<Event, EngineError>>) -> Vec<Revision> {
        events.map(|e| e.unwrap().revision()).collect()
    }

    #[test]
    fn pages_hold_a_flush_up_to_their_length_and_read_back_in_order() {
        let engine = engine_with(40, 2000);
        let pages = Scan::new(&engine, all_pages(), false, 100).count();
        // 2 KB changes, 24 KiB pages: 12 a page.
        assert_eq!(pages, 4);
        assert_eq!(revisions(changes(&engine, 1, 40)), (1..=40).collect::<Vec<_>>());
        // A read from the middle of a page starts at its page and skips what is before.
        assert_eq!(revisions(changes(&engine, 15, 17)), vec![15, 16, 17]);
        assert_eq!(revisions(changes(&engine, 39, 100)), vec![39, 40]);
        assert!(changes(&engine, 41, 100).next().is_none());
        assert!(changes(&engine, 5, 4).next().is_none());
        assert_eq!(revisions(changes_newest_first(&engine)), (1..=40).rev().collect::<Vec<_>>());
    }

    #[test]
    fn a_change_longer_than_a_page_is_a_page_of_its_own() {
        let engine = engine_with(3, PAGE_BYTES + 10);
        assert_eq!(Scan::new(&engine, all_pages(), false, 100).count(), 3);
        assert_eq!(revisions(changes(&engine, 2, 3)), vec![2, 3]);
    }

    #[test]
    fn records_below_a_revision_keep_the_page_that_reaches_it() {
        let engine = engine_with(40, 2000);
        // Pages start at 1, 13, 25, 37.
        assert_eq!(below(&engine, 13), vec![event_key(1, 0)]);
        assert_eq!(below(&engine, 20), vec![event_key(1, 0)]);
        assert_eq!(below(&engine, 25), vec![event_key(1, 0), event_key(13, 0)]);
        assert!(below(&engine, 1).is_empty());
        assert_eq!(below(&engine, 41).len(), 4);
    }

    /// 30 changes of one revision (a transaction) over three pages: a read from that
    /// revision gets all of them, and records below it keep the pages holding them.
    #[test]
    fn a_revision_split_over_pages_reads_whole() {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        let mut writer = PageWriter::default();
        writer.push(&mut batch, (4, 0), &put("before", 4, 10), 1);
        for sub in 0..30 {
            writer.push(&mut batch, (5, sub), &put(&format!("t{sub}"), 5, 2000), 1);
        }
        writer.push(&mut batch, (6, 0), &put("after", 6, 10), 1);
        writer.finish(&mut batch);
        engine.write(batch).unwrap();
        let starts: Vec<_> =
            Scan::new(&engine, all_pages(), false, 100).map(|e| event_position(&e.unwrap().0).unwrap()).collect();
        assert_eq!(starts, vec![(4, 0), (5, 12), (5, 24)]);
        assert_eq!(revisions(changes(&engine, 5, 5)), vec![5; 30]);
        assert_eq!(revisions(changes(&engine, 6, 6)), vec![6]);
        assert!(below(&engine, 5).is_empty(), "the first page holds revision 5");
        assert_eq!(below(&engine, 6), vec![event_key(4, 0), event_key(5, 12)]);
    }

    /// A key's value is found in the page of its change, also for a revision split over
    /// pages and in any order of lookups (the reader's kept pages only answer for what
    /// they hold whole); a value that is not there is an error, not an empty value.
    #[test]
    fn values_are_found_in_the_page_of_their_change() {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        let mut writer = PageWriter::default();
        let valued = |key: &str, revision: Revision, value: &str| {
            let mut event = put(key, revision, 0);
            event.kv.value = value.as_bytes().to_vec();
            event
        };
        writer.push(&mut batch, (4, 0), &valued("before", 4, "b"), 1);
        for sub in 0..30 {
            writer.push(&mut batch, (5, sub), &put(&format!("t{sub}"), 5, 2000), 1);
        }
        writer.push(&mut batch, (6, 0), &valued("after", 6, "a"), 1);
        writer.finish(&mut batch);
        engine.write(batch).unwrap();
        let mut reader = ValueReader::new(&engine);
        let order = [29, 0, 13, 12, 11, 24, 23, 1, 28, 5];
        for sub in order.into_iter().chain(0..30) {
            assert_eq!(reader.value_of(format!("t{sub}").as_bytes(), 5).unwrap(), vec![b'v'; 2000], "t{sub}");
        }
        assert_eq!(reader.value_of(b"before", 4).unwrap(), b"b");
        assert_eq!(reader.value_of(b"after", 6).unwrap(), b"a");
        assert_eq!(ValueReader::new(&engine).value_of(b"after", 6).unwrap(), b"a");
        let err = reader.value_of(b"t3", 4).unwrap_err();
        assert!(err.to_string().contains("missing from the history"), "{err}");
        assert!(reader.value_of(b"nowhere", 5).is_err());
    }

    /// A reader resumed with the pages an earlier one kept reads none of them again (a
    /// key space looks values up a key at a time, and a DeleteRange of keys written
    /// together read one page per key before); a one-change page longer than a page is not
    /// kept.
    #[test]
    fn a_resumed_reader_reads_the_kept_pages_from_memory_and_keeps_no_oversized_one() {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        let mut writer = PageWriter::default();
        for r in 10..20 {
            writer.push(&mut batch, (r, 0), &put(&format!("t{r}"), r, 100), 1);
        }
        writer.push(&mut batch, (20, 0), &put("big", 20, PAGE_BYTES * 2), 1);
        // A transaction's puts: five changes at one revision, in the page after.
        for sub in 0..5 {
            let mut event = put(&format!("m{sub}"), 30, 0);
            event.kv.value = vec![sub as u8; 10];
            writer.push(&mut batch, (30, sub), &event, 1);
        }
        writer.push(&mut batch, (31, 0), &put("after", 31, 10), 1);
        writer.finish(&mut batch);
        engine.write(batch).unwrap();
        let mut first = ValueReader::new(&engine);
        assert_eq!(first.value_of(b"t10", 10).unwrap(), vec![b'v'; 100]);
        assert_eq!(first.value_of(b"big", 20).unwrap().len(), PAGE_BYTES * 2);
        assert_eq!(first.value_of(b"after", 31).unwrap(), vec![b'v'; 10]);
        let kept = first.into_pages();
        assert_eq!(kept.0.len(), 2, "the pages of t10..t19 and m0..after are kept, the oversized one is not");
        let mut emptied = WriteBatch::new();
        for (key, _) in engine.scan(&all_pages(), false, usize::MAX).unwrap() {
            emptied.delete(key);
        }
        engine.write(emptied).unwrap();
        let mut resumed = ValueReader::resuming(&engine, kept);
        // Up to the page's last revision, which may go on in the next page: read there.
        for r in 11..19 {
            assert_eq!(resumed.value_of(format!("t{r}").as_bytes(), r).unwrap(), vec![b'v'; 100], "t{r}");
        }
        for sub in [3u8, 0, 4, 1, 2] {
            assert_eq!(resumed.value_of(format!("m{sub}").as_bytes(), 30).unwrap(), vec![sub; 10], "m{sub}");
        }
        assert!(resumed.value_of(b"m1", 31).is_err(), "the wrong revision");
        assert!(resumed.value_of(b"big", 20).is_err(), "read from the engine, which no longer has it");
        assert!(ValueReader::new(&engine).value_of(b"t11", 11).is_err(), "a fresh reader reads the engine");
    }

    /// A record of the layout before pages (one change, format 1) just before the revision
    /// read from, and pages after it.
    #[test]
    fn records_of_the_layout_before_pages_read_beside_pages() {
        let engine = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        for r in 1..=3 {
            batch.put(event_key(r, 0), super::super::layout::encode_event(&put(&format!("old{r}"), r, 5)));
        }
        let mut writer = PageWriter::default();
        for r in 4..=6 {
            writer.push(&mut batch, (r, 0), &put(&format!("new{r}"), r, 5), 1);
        }
        writer.finish(&mut batch);
        engine.write(batch).unwrap();
        assert_eq!(revisions(changes(&engine, 3, 5)), vec![3, 4, 5]);
        assert_eq!(revisions(changes(&engine, 2, 2)), vec![2]);
        assert_eq!(revisions(changes_newest_first(&engine)), vec![6, 5, 4, 3, 2, 1]);
        assert_eq!(below(&engine, 4), vec![event_key(1, 0), event_key(2, 0), event_key(3, 0)]);
        assert_eq!(below(&engine, 5).len(), 3, "the page from 4 reaches 5");
    }

    #[test]
    fn a_damaged_page_is_reported_not_misread() {
        let engine = engine_with(3, 10);
        let mut batch = WriteBatch::new();
        batch.put(event_key(1, 0), vec![PAGE_FORMAT, 0xff, 0xff]);
        engine.write(batch).unwrap();
        let err = changes(&engine, 1, 3).find_map(Result::err).expect("an error");
        assert!(err.to_string().contains("history page"), "{err}");
    }

    /// A read from the first revision of a page does not decode the page before it (a
    /// caught-up watcher's read): shown with that page damaged.
    #[test]
    fn a_read_from_a_pages_first_revision_skips_the_page_before() {
        let engine = engine_with(40, 2000);
        let mut batch = WriteBatch::new();
        batch.put(event_key(1, 0), vec![PAGE_FORMAT, 0xff, 0xff]);
        engine.write(batch).unwrap();
        assert_eq!(revisions(changes(&engine, 13, 14)), vec![13, 14]);
        assert_eq!(revisions(changes(&engine, 37, 40)), vec![37, 38, 39, 40]);
        assert!(changes(&engine, 12, 13).any(|e| e.is_err()), "12 is in the damaged page");
    }
}
