//! What a put costs sled under each record layout the store could use (issue 50's choice of
//! layout, measured before it is built): the engine writes alone, no state machine, so the
//! figures are the layout's and nothing else's.
//!
//! Each run preloads [`KEYS`] keys of 1 KiB values in the layout, then overwrites
//! [`WRITES`] keys chosen at random (a fixed seed), [`PER_FLUSH`] per engine write (about what
//! a loaded node loop flushes at once), and times those writes. Layouts:
//! - `key-records+pages` (today's): the key's record (value inline) where the key sorts, and
//!   the change appended to the history's pages (the value again, and the value before it).
//! - `revision-records`: one record per revision, appended (etcd's bbolt layout): key, fields
//!   and value; the latest revision of each key is in memory (the key index).
//! - `pages-only`: the changes appended in pages and nothing else: the value once, in the
//!   history; a key's value read from the page of its latest change.
//! - `revision-pointers`: one small record per revision (key, fields, a pointer to the value in
//!   the Paxos log's segments, which already hold it: WiscKey).
//! - `key-pointers`: the key's record where the key sorts, with a pointer in place of the value.
//! - `key-pointers+pages`: the key's small record (its latest revision and fields) and the
//!   change appended to the pages with the value once (no value before it): the value once,
//!   and a restart rebuilds the key index from the small records alone.
//!
//! Prints one `leasekv-bench:` line per layout: microseconds of engine write per put (median of
//! [`RUNS`]) and the engine's size on disk after the run.
//!
//! `cargo bench -p leasekv-kvstore --bench layout`

use leasekv_kvstore::engine::{Engine, SledEngine, WriteBatch};
use leasekv_kvstore::storage::DEFAULT_STATE_CACHE_BYTES;
use std::time::{Duration, Instant};

/// Keys preloaded, then overwritten at random.
const KEYS: usize = 200_000;
/// Overwrites timed.
const WRITES: usize = 100_000;
/// Puts per engine write.
const PER_FLUSH: usize = 256;
/// A value's length (the rows use 1 KiB).
const VALUE: usize = 1024;
/// A change page's length at most (the store's `PAGE_BYTES`).
const PAGE_BYTES: usize = 24 << 10;
/// A revision's fields besides key and value (create/mod revision, version, lease).
const FIELDS: usize = 32;
/// A pointer into a log segment (segment, offset, length).
const POINTER: usize = 16;
/// Runs per layout; the median is printed.
const RUNS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Layout {
    KeyRecordsAndPages,
    RevisionRecords,
    PagesOnly,
    RevisionPointers,
    KeyPointers,
    KeyPointersAndPages,
}

impl Layout {
    const ALL: [Layout; 6] = [
        Layout::KeyRecordsAndPages,
        Layout::RevisionRecords,
        Layout::PagesOnly,
        Layout::RevisionPointers,
        Layout::KeyPointers,
        Layout::KeyPointersAndPages,
    ];

    fn name(self) -> &'static str {
        match self {
            Layout::KeyRecordsAndPages => "key-records+pages",
            Layout::RevisionRecords => "revision-records",
            Layout::PagesOnly => "pages-only",
            Layout::RevisionPointers => "revision-pointers",
            Layout::KeyPointers => "key-pointers",
            Layout::KeyPointersAndPages => "key-pointers+pages",
        }
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("/registry/pods/ns-{:03}/pod-{i:09}", i % 997).into_bytes()
}

fn prefixed(prefix: u8, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(rest.len() + 1);
    k.push(prefix);
    k.extend_from_slice(rest);
    k
}

fn revision_key(revision: u64) -> Vec<u8> {
    prefixed(b'e', &revision.to_be_bytes())
}

/// The records one flush of `puts` (key index, revision) gives the engine in `layout`.
fn flush(layout: Layout, puts: &[(usize, u64)], overwrite: bool, batch: &mut WriteBatch) {
    let value = |extra: usize| vec![b'v'; extra];
    match layout {
        Layout::KeyRecordsAndPages | Layout::PagesOnly | Layout::KeyPointersAndPages => {
            let key_record = match layout {
                Layout::KeyRecordsAndPages => Some(VALUE + FIELDS),
                Layout::KeyPointersAndPages => Some(POINTER + FIELDS),
                _ => None,
            };
            if let Some(len) = key_record {
                for &(i, _) in puts {
                    batch.put(prefixed(b'k', &key(i)), value(len));
                }
            }
            // A change carries the value, and for an overwrite under today's layout the
            // value before it too.
            let change = match layout {
                Layout::KeyRecordsAndPages if overwrite => 2 * (VALUE + FIELDS),
                _ => VALUE + FIELDS,
            };
            let mut page = Vec::new();
            let mut first = puts[0].1;
            for &(i, revision) in puts {
                if !page.is_empty() && page.len() + change > PAGE_BYTES {
                    batch.put(revision_key(first), std::mem::take(&mut page));
                    first = revision;
                }
                page.extend_from_slice(&key(i));
                page.extend(std::iter::repeat_n(b'v', change));
            }
            batch.put(revision_key(first), page);
        }
        Layout::RevisionRecords | Layout::RevisionPointers => {
            let body = if let Layout::RevisionRecords = layout { VALUE + FIELDS } else { POINTER + FIELDS };
            for &(i, revision) in puts {
                let mut record = key(i);
                record.extend(std::iter::repeat_n(b'v', body));
                batch.put(revision_key(revision), record);
            }
        }
        Layout::KeyPointers => {
            for &(i, _) in puts {
                batch.put(prefixed(b'k', &key(i)), value(POINTER + FIELDS));
            }
        }
    }
}

/// A small fixed-seed generator (xorshift): the same keys for every layout and run.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One run: the time of the overwrites' engine writes, and the engine's size after.
fn run(layout: Layout) -> (Duration, u64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = SledEngine::open(dir.path(), DEFAULT_STATE_CACHE_BYTES).expect("sled opens");
    let mut revision = 1u64;
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(4096) {
        let puts: Vec<(usize, u64)> = chunk.iter().map(|&i| (i, revision + i as u64)).collect();
        let mut batch = WriteBatch::new();
        flush(layout, &puts, false, &mut batch);
        engine.write(batch).expect("preload");
    }
    revision += KEYS as u64;
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut took = Duration::ZERO;
    for _ in 0..WRITES / PER_FLUSH {
        let puts: Vec<(usize, u64)> = (0..PER_FLUSH)
            .map(|_| {
                revision += 1;
                (random.below(KEYS), revision)
            })
            .collect();
        let mut batch = WriteBatch::new();
        let start = Instant::now();
        flush(layout, &puts, true, &mut batch);
        engine.write(batch).expect("overwrite");
        took += start.elapsed();
    }
    engine.sync().expect("sync");
    (took, engine.size_on_disk().unwrap_or(0))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    for layout in Layout::ALL {
        let mut runs: Vec<(Duration, u64)> = (0..RUNS).map(|_| run(layout)).collect();
        runs.sort();
        let (took, size) = runs[RUNS / 2];
        let per_put_us = took.as_secs_f64() * 1e6 / (WRITES / PER_FLUSH * PER_FLUSH) as f64;
        println!(
            "leasekv-bench: layout={} per_put_us={per_put_us:.1} size_on_disk_mb={:.0} runs_us={:?}",
            layout.name(),
            size as f64 / 1e6,
            runs.iter()
                .map(|(t, _)| (t.as_secs_f64() * 1e6 / (WRITES / PER_FLUSH * PER_FLUSH) as f64).round())
                .collect::<Vec<_>>()
        );
    }
}
