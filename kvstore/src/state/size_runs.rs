//! The sizes of the retained changes, which compaction reads instead of the changes.
//!
//! Compaction must know what each change it drops counts toward the space quota (the quota
//! is checked when a command is applied, so every replica must count the same bytes) and the
//! engine key of each change, without reading the changes: their pages are long out of the
//! cache by then. The sizes are kept in *runs*: one record per flush (at most [`RUN_LEN`]
//! changes), `r ++ main (u64 BE) ++ sub (u32 BE)` under the position of its first change,
//! holding the position and size of each change of the run. A put then adds two records to
//! the engine (its key and its change) instead of three: a size record per change cost a
//! quarter of the put rate at 64 clients (11,121 puts/s without it against 8,848, same
//! session).
//!
//! A run is written in the batch that writes its changes, and deleted once compaction has
//! passed its last change; a run that straddles the compaction point stays until a later
//! compaction passes it, and compaction skips its entries below the point.
//!
//! Since pages ([`super::change_pages`]) each page has a run of its own under its position,
//! marked as a page's: compaction deletes the page once the run is wholly below the
//! compaction point. A run of the layout before pages names changes stored one a record.
//!
//! Between the engine's first release and runs, each change had a size record of its own
//! (`s ++ position`, 8 bytes): [`History::open`](super::history) converts them.

use super::layout::{event_key, event_position};
use crate::engine::{prefix_bounds, EngineError, KeyBounds, WriteBatch};
use crate::types::Revision;
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// The first byte of a run's engine key.
const RUN: u8 = b'r';
/// The first byte of the per-change size records that runs replaced.
const LEGACY_SIZE: u8 = b's';
/// The format byte of a run whose changes are records of their own (before pages).
const FORMAT: u8 = 1;
/// The format byte of a page's run: its changes are one record, the page under the run's
/// own position ([`super::change_pages`]).
const PAGE_RUN_FORMAT: u8 = 2;
/// Changes per run at most, so that a run stays a small record (about 12 bytes a change).
pub(super) const RUN_LEN: usize = 512;

/// One change of a run: its position and what it counts toward the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct SizeEntry {
    /// The change's revision.
    pub(super) main: Revision,
    /// Its place among the changes of its revision.
    pub(super) sub: u32,
    /// Its size as the quota counts it.
    pub(super) bytes: u64,
}

impl SizeEntry {
    /// The engine key of the change itself.
    pub(super) fn event_key(&self) -> Vec<u8> {
        event_key(self.main, self.sub)
    }
}

/// The engine key of the run whose first change is `(main, sub)`.
fn run_key(main: Revision, sub: u32) -> Vec<u8> {
    let mut k = event_key(main, sub);
    k[0] = RUN;
    k
}

/// The engine bounds of every run whose first change is below revision `below`.
pub(super) fn runs_starting_below(below: Revision) -> KeyBounds {
    (Bound::Included(vec![RUN]), Bound::Excluded(run_key(below.max(0), 0)))
}

/// The engine bounds of every run.
pub(super) fn all_runs() -> KeyBounds {
    prefix_bounds(&[RUN])
}

/// The engine bounds of every per-change size record of the layout runs replaced.
pub(super) fn legacy_sizes() -> KeyBounds {
    prefix_bounds(&[LEGACY_SIZE])
}

/// A run as stored: its changes and how they are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    /// The changes, in order.
    pub(super) entries: Vec<SizeEntry>,
    /// Whether they are one page, stored under the first one's position (else each change
    /// is a record of its own).
    pub(super) paged: bool,
}

impl Run {
    /// The last change of the run.
    pub(super) fn last(&self) -> Option<&SizeEntry> {
        self.entries.last()
    }

    /// The engine key of the page the run describes, if it describes one.
    pub(super) fn page_key(&self) -> Option<Vec<u8>> {
        self.entries.first().filter(|_| self.paged).map(SizeEntry::event_key)
    }
}

/// The run a run record holds.
pub(super) fn decode_run(engine_key: &[u8], record: &[u8]) -> Result<Run, EngineError> {
    let what = || {
        let mut k = engine_key.to_vec();
        if let Some(first) = k.first_mut() {
            *first = b'e';
        }
        format!("size run at {:?}", event_position(&k))
    };
    match record.split_first() {
        Some((&format, body)) if format == FORMAT || format == PAGE_RUN_FORMAT => postcard::from_bytes(body)
            .map(|entries| Run { entries, paged: format == PAGE_RUN_FORMAT })
            .map_err(|e| EngineError::Corrupt { what: what(), detail: e.to_string() }),
        Some((other, _)) => Err(EngineError::Corrupt {
            what: what(),
            detail: format!("record format {other} is unknown (this build reads {FORMAT} and {PAGE_RUN_FORMAT})"),
        }),
        None => Err(EngineError::Corrupt { what: what(), detail: "empty record".into() }),
    }
}

/// Collects the sizes of changes written in one batch and adds them to it as runs.
#[derive(Debug, Default)]
pub(super) struct RunWriter {
    entries: Vec<SizeEntry>,
}

impl RunWriter {
    /// Records the change at `(main, sub)` of `bytes`; writes a run to `batch` when one is
    /// full.
    pub(super) fn push(&mut self, batch: &mut WriteBatch, main: Revision, sub: u32, bytes: u64) {
        self.entries.push(SizeEntry { main, sub, bytes });
        if self.entries.len() >= RUN_LEN {
            self.finish(batch);
        }
    }

    /// Writes the run of a page whose changes are `entries` to `batch`.
    pub(super) fn write_page_run(batch: &mut WriteBatch, entries: &[SizeEntry]) {
        let Some(first) = entries.first() else { return };
        // Serializing integers into a Vec cannot fail.
        let value = postcard::to_extend(entries, vec![PAGE_RUN_FORMAT]).unwrap_or_default();
        batch.put(run_key(first.main, first.sub), value);
    }

    /// Writes the changes recorded since the last run to `batch` as a run of changes
    /// stored one a record.
    pub(super) fn finish(&mut self, batch: &mut WriteBatch) {
        let Some(first) = self.entries.first() else { return };
        let key = run_key(first.main, first.sub);
        // Serializing integers into a Vec cannot fail.
        let value = postcard::to_extend(&self.entries, vec![FORMAT]).unwrap_or_default();
        batch.put(key, value);
        self.entries.clear();
    }
}

/// The 8-byte size a legacy per-change record holds, and the change's position.
pub(super) fn decode_legacy(engine_key: &[u8], record: &[u8]) -> Result<SizeEntry, EngineError> {
    let mut k = engine_key.to_vec();
    if let Some(first) = k.first_mut() {
        *first = b'e';
    }
    let position = event_position(&k);
    let corrupt = |detail: String| EngineError::Corrupt { what: format!("size record {position:?}"), detail };
    let (main, sub) = position.ok_or_else(|| corrupt("not a change's position".into()))?;
    let bytes = <[u8; 8]>::try_from(record).map_err(|_| corrupt(format!("{} bytes, not 8", record.len())))?;
    Ok(SizeEntry { main, sub, bytes: u64::from_be_bytes(bytes) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Write;

    #[test]
    fn runs_round_trip_and_split_at_their_length() {
        let mut batch = WriteBatch::new();
        let mut writer = RunWriter::default();
        for i in 0..(RUN_LEN + 3) {
            writer.push(&mut batch, 7 + i as Revision, (i % 3) as u32, 100 + i as u64);
        }
        writer.finish(&mut batch);
        writer.finish(&mut batch);
        let runs: Vec<_> = batch
            .writes()
            .iter()
            .map(|w| match w {
                Write::Put(k, v) => decode_run(k, v).unwrap().entries,
                Write::Delete(_) => panic!("runs are puts"),
            })
            .collect();
        assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), vec![RUN_LEN, 3]);
        let last = RUN_LEN + 2;
        assert_eq!(
            runs[1][2],
            SizeEntry { main: 7 + last as Revision, sub: (last % 3) as u32, bytes: 100 + last as u64 }
        );
        let Write::Put(second, _) = &batch.writes()[1] else { unreachable!() };
        assert_eq!(second, &run_key(7 + RUN_LEN as Revision, (RUN_LEN % 3) as u32));
    }

    #[test]
    fn a_damaged_run_is_reported_not_misread() {
        let err = decode_run(&run_key(5, 0), &[9, 1, 2]).unwrap_err().to_string();
        assert!(err.contains("format 9 is unknown"), "{err}");
        assert!(decode_run(&run_key(5, 0), &[FORMAT, 0xff]).is_err());
        let mut batch = WriteBatch::new();
        let entries = [SizeEntry { main: 5, sub: 0, bytes: 9 }, SizeEntry { main: 6, sub: 0, bytes: 7 }];
        RunWriter::write_page_run(&mut batch, &entries);
        let Write::Put(k, v) = &batch.writes()[0] else { unreachable!() };
        let run = decode_run(k, v).unwrap();
        assert_eq!((run.entries.as_slice(), run.page_key()), (&entries[..], Some(event_key(5, 0))));
        let err = decode_legacy(&run_key(5, 1), &[0; 3]).unwrap_err().to_string();
        assert!(err.contains("3 bytes, not 8"), "{err}");
    }

    #[test]
    fn runs_below_a_revision_are_bounded_by_their_first_change() {
        let (start, end) = runs_starting_below(10);
        assert_eq!(start, Bound::Included(vec![RUN]));
        assert_eq!(end, Bound::Excluded(run_key(10, 0)));
        assert!(run_key(9, u32::MAX) < run_key(10, 0));
    }
}
