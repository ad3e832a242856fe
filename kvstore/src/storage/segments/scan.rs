//! Reading a log directory back: every segment in order, the latest record of each kind
//! winning, and the repair of a write that a crash cut short.
//!
//! Only the last segment can end in a torn write: the log fdatasyncs a segment before it
//! creates the next one (see the module docs of [`super`]). So a record that does not read
//! back at the tail of the last segment is cut off (the file is truncated there), while the
//! same anywhere else, or a header that is wrong, is [`StorageError::Corrupt`] with the file
//! and the offset: synced records must never be dropped silently, and garbage must never be
//! decoded into a promise or a slot.
use super::files;
use super::record::{self, check_header, FrameError, HeaderCheck, Record, HEADER_LEN};
use crate::log::{AcceptedSlot, LogBallot, Slot};
use crate::storage::StorageError;
use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::Path;

/// The log's contents as replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Replay {
    /// The last promise recorded.
    pub promised: LogBallot,
    /// The last commit index recorded.
    pub commit: Slot,
    /// The last record of every slot that no later removal took away.
    pub slots: BTreeMap<Slot, AcceptedSlot>,
}

/// What the log keeps in memory about one segment, to know when it may be deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SegmentInfo {
    /// Bytes in the file (or that will be, once the buffered writes are out).
    pub len: u64,
    /// The highest slot recorded in it.
    pub max_slot: Option<Slot>,
    /// A removal recorded in a *later* segment covers every slot in it: replaying it can
    /// no longer change the outcome once every segment before it is gone too.
    pub covered: bool,
}

impl SegmentInfo {
    /// Notes a slot record in this segment.
    pub fn add_slot(&mut self, slot: Slot) {
        self.max_slot = Some(self.max_slot.map_or(slot, |m| m.max(slot)));
    }
}

/// Marks every segment before `active` whose slots are all `<= through` as covered, for a
/// `RemovedThrough(through)` recorded in `active`.
pub(crate) fn cover(segments: &mut BTreeMap<u64, SegmentInfo>, active: u64, through: Slot) {
    for info in segments.range_mut(..active).map(|(_, info)| info) {
        if info.max_slot.is_none_or(|m| m <= through) {
            info.covered = true;
        }
    }
}

/// Applies one record to the replay.
fn apply(replay: &mut Replay, segments: &mut BTreeMap<u64, SegmentInfo>, seq: u64, record: Record) {
    match record {
        Record::Promise(b) => replay.promised = b,
        Record::Commit(c) => replay.commit = c,
        Record::Slot(slot, accepted) => {
            if let Some(info) = segments.get_mut(&seq) {
                info.add_slot(slot);
            }
            replay.slots.insert(slot, accepted);
        }
        Record::RemovedThrough(through) => {
            match through.checked_add(1) {
                Some(first_kept) => replay.slots = replay.slots.split_off(&first_kept),
                None => replay.slots.clear(),
            }
            cover(segments, seq, through);
        }
    }
}

/// Everything [`scan`] found.
#[derive(Debug, Default)]
pub(crate) struct Scanned {
    /// The contents.
    pub replay: Replay,
    /// Every segment left, by sequence number.
    pub segments: BTreeMap<u64, SegmentInfo>,
    /// The segment appends go to: the last one, or the one to create when there is none.
    pub active: u64,
}

fn corrupt(path: &Path, offset: usize, detail: String) -> StorageError {
    StorageError::Corrupt { what: format!("log segment {} at offset {offset}", path.display()), detail }
}

/// Reads every segment in `dir`. With `repair` (at open), a torn tail of the last segment
/// is truncated away and a last segment whose header never reached the disk is deleted,
/// each with a warning; without it (a live log, whose files are whole) both are errors.
pub(crate) fn scan(dir: &Path, repair: bool) -> Result<Scanned, StorageError> {
    let seqs = files::list(dir)?;
    let mut out = Scanned::default();
    let last = seqs.last().copied();
    for &seq in &seqs {
        let path = files::segment_path(dir, seq);
        let is_last = Some(seq) == last;
        let bytes = std::fs::read(&path)
            .map_err(|e| StorageError::backend(format!("cannot read log segment {}", path.display()), e))?;
        match check_header(&bytes, seq) {
            HeaderCheck::Valid => {}
            HeaderCheck::Torn if is_last && repair => {
                tracing::warn!(file = %path.display(), bytes = bytes.len(),
                    "the last log segment's header never reached the disk (a crash right after it was created); deleting it");
                std::fs::remove_file(&path)
                    .map_err(|e| StorageError::backend(format!("cannot delete {}", path.display()), e))?;
                files::sync_dir(dir)?;
                out.active = seq;
                return Ok(out);
            }
            HeaderCheck::Torn => return Err(corrupt(&path, 0, "the segment header is missing or zeroed".into())),
            HeaderCheck::Bad(detail) => return Err(corrupt(&path, 0, detail)),
        }
        out.segments.insert(seq, SegmentInfo::default());
        out.active = seq;
        let mut at = HEADER_LEN;
        while at < bytes.len() {
            match record::read(&bytes[at..]) {
                Ok((record, len)) => {
                    apply(&mut out.replay, &mut out.segments, seq, record);
                    at += len;
                }
                Err(FrameError::Torn(detail)) if is_last && repair => {
                    tracing::warn!(file = %path.display(), offset = at, cut = bytes.len() - at, %detail,
                        "truncating a torn write at the end of the log (a crash before it was synced)");
                    OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .and_then(|f| {
                            f.set_len(at as u64)?;
                            f.sync_all()
                        })
                        .map_err(|e| StorageError::backend(format!("cannot truncate {}", path.display()), e))?;
                    break;
                }
                Err(FrameError::Torn(detail) | FrameError::Undecodable(detail)) => {
                    return Err(corrupt(&path, at, detail))
                }
            }
        }
        if let Some(info) = out.segments.get_mut(&seq) {
            info.len = at as u64;
        }
    }
    if seqs.is_empty() {
        out.active = 1;
    }
    Ok(out)
}

/// Replays records buffered for segment `seq` (not yet written, without its header) on top
/// of what [`scan`] read.
pub(crate) fn replay_bytes(out: &mut Scanned, seq: u64, bytes: &[u8], dir: &Path) -> Result<(), StorageError> {
    out.segments.entry(seq).or_default();
    let mut at = 0;
    while at < bytes.len() {
        match record::read(&bytes[at..]) {
            Ok((record, len)) => {
                apply(&mut out.replay, &mut out.segments, seq, record);
                at += len;
            }
            Err(FrameError::Torn(detail) | FrameError::Undecodable(detail)) => {
                let path = files::segment_path(dir, seq);
                return Err(corrupt(&path, at, format!("in the buffer not yet written: {detail}")));
            }
        }
    }
    Ok(())
}
