//! The segment log on its own: torn tails, damage, rolling, deletion, reopening.
use super::*;
use crate::log::Entry;
use crate::storage::StorageError;
use leasekv_lease::NodeId;

fn ballot(round: u64) -> LogBallot {
    LogBallot { round, node: NodeId(2) }
}

fn value(slot: Slot, len: usize) -> AcceptedSlot {
    use crate::command::{Command, PutRequest};
    use crate::log::{Proposal, ProposalId};
    let put = Proposal {
        id: ProposalId { node: NodeId(1), incarnation: 1, seq: slot },
        command: Command::Put(PutRequest {
            key: format!("k{slot}").into_bytes(),
            value: vec![slot as u8; len],
            lease: 0,
            prev_kv: false,
        }),
    };
    AcceptedSlot { ballot: ballot(1), entry: Entry { proposals: vec![put] }, chosen: slot.is_multiple_of(2) }
}

fn no_snapshot() -> Result<(), StorageError> {
    Ok(())
}

fn seg(dir: &Path, seq: u64) -> PathBuf {
    files::segment_path(dir, seq)
}

fn len_of(path: &Path) -> usize {
    std::fs::metadata(path).unwrap().len() as usize
}

/// Every way of cutting the last record short (a crash in the middle of its write) reads
/// back as the log without it; the file is cut back to the record before, and the log goes
/// on from there.
#[test]
fn torn_tail_at_every_offset_recovers_the_previous_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT).unwrap();
    log.save_promise(ballot(3)).unwrap();
    for slot in 1..=3 {
        log.save_slot(slot, &value(slot, 30)).unwrap();
    }
    log.save_commit(2).unwrap();
    log.sync(no_snapshot).unwrap();
    let before = log.recover().unwrap();
    let path = seg(dir.path(), 1);
    let good = len_of(&path);
    log.save_slot(4, &value(4, 200)).unwrap();
    log.sync(no_snapshot).unwrap();
    drop(log);
    let full = std::fs::read(&path).unwrap();
    assert!(full.len() > good + 200);
    for cut in good..full.len() {
        std::fs::write(&path, &full[..cut]).unwrap();
        let log = SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT).unwrap();
        assert_eq!(log.recover().unwrap(), before, "cut at {cut}");
        assert_eq!(len_of(&path), good, "cut at {cut}: truncated back to the last whole record");
        if cut % 50 == 0 {
            log.save_slot(5, &value(5, 10)).unwrap();
            log.sync(no_snapshot).unwrap();
            drop(log);
            let r = SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT).unwrap().recover().unwrap();
            assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), [1, 2, 3, 5], "cut at {cut}");
        }
    }
    // Zeros after the last record (the file grew, its data never came): cut off too.
    let mut zeroed = full.clone();
    zeroed.extend_from_slice(&[0; 4096]);
    std::fs::write(&path, &zeroed).unwrap();
    let r = SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT).unwrap().recover().unwrap();
    assert_eq!(r.slots.len(), 4);
    assert_eq!(len_of(&path), full.len());
}

/// Three segments of a few records each.
fn three_segments(dir: &Path) -> Vec<Vec<u8>> {
    let log = SegmentLog::open(dir, 300).unwrap();
    log.save_promise(ballot(5)).unwrap();
    for slot in 1..=6 {
        log.save_slot(slot, &value(slot, 60)).unwrap();
        log.save_commit(slot - 1).unwrap();
    }
    log.sync(no_snapshot).unwrap();
    assert_eq!(log.segment_seqs(), [1, 2, 3]);
    (1..=3).map(|seq| std::fs::read(seg(dir, seq)).unwrap()).collect()
}

/// A flipped bit anywhere in a segment that is not the last is reported, with the file and
/// the offset, never decoded, never a panic; so is a flip in the last segment's header.
#[test]
fn bit_flips_are_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let original = three_segments(dir.path());
    for (index, seq) in [(0usize, 1u64), (1, 2)] {
        let path = seg(dir.path(), seq);
        for i in 0..original[index].len() {
            let mut bad = original[index].clone();
            bad[i] ^= 1 << (i % 8);
            std::fs::write(&path, &bad).unwrap();
            match SegmentLog::open(dir.path(), 300) {
                Err(StorageError::Corrupt { what, detail }) => {
                    assert!(what.contains(&format!("{seq:020}.seg")) && what.contains("offset"), "{what}: {detail}")
                }
                Err(e) => panic!("flip at {i} of segment {seq}: {e}"),
                Ok(_) => panic!("flip at {i} of segment {seq} went unnoticed"),
            }
        }
        std::fs::write(&path, &original[index]).unwrap();
    }
    let last = seg(dir.path(), 3);
    for i in 0..record::HEADER_LEN {
        let mut bad = original[2].clone();
        bad[i] ^= 0x04;
        std::fs::write(&last, &bad).unwrap();
        assert!(matches!(SegmentLog::open(dir.path(), 300), Err(StorageError::Corrupt { .. })), "header byte {i}");
    }
    std::fs::write(&last, &original[2]).unwrap();
    assert_eq!(SegmentLog::open(dir.path(), 300).unwrap().recover().unwrap().slots.len(), 6);
}

/// A record whose checksum matches but whose payload is not a record is never a torn write:
/// reported even at the tail of the last segment.
#[test]
fn a_well_framed_record_that_does_not_decode_is_corrupt_even_at_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT).unwrap();
    log.save_slot(1, &value(1, 10)).unwrap();
    log.sync(no_snapshot).unwrap();
    drop(log);
    let payload = [0xEEu8; 12];
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len);
    crc.update(&payload);
    let mut bytes = std::fs::read(seg(dir.path(), 1)).unwrap();
    let at = bytes.len();
    bytes.extend_from_slice(&len);
    bytes.extend_from_slice(&crc.finalize().to_le_bytes());
    bytes.extend_from_slice(&payload);
    std::fs::write(seg(dir.path(), 1), &bytes).unwrap();
    match SegmentLog::open(dir.path(), DEFAULT_SEGMENT_LIMIT) {
        Err(StorageError::Corrupt { what, .. }) => assert!(what.ends_with(&format!("offset {at}")), "{what}"),
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
}

/// Whatever bytes a segment holds, opening it answers (Ok or an error) without panicking.
#[test]
fn arbitrary_bytes_never_panic() {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let dir = tempfile::tempdir().unwrap();
    let valid = three_segments(dir.path());
    for round in 0..300 {
        for seq in 1..=3 {
            std::fs::write(seg(dir.path(), seq), &valid[seq as usize - 1]).unwrap();
        }
        let target = 1 + next() % 3;
        let mut bytes =
            if round % 3 == 0 { record::header(target).to_vec() } else { valid[target as usize - 1].clone() };
        let keep = (next() as usize) % (bytes.len() + 1);
        bytes.truncate(keep.max(if round % 2 == 0 { record::HEADER_LEN } else { 0 }).min(bytes.len()));
        for _ in 0..(next() % 64) {
            bytes.push(next() as u8);
        }
        if !bytes.is_empty() && round % 5 == 0 {
            let i = (next() as usize) % bytes.len();
            bytes[i] = next() as u8;
        }
        std::fs::write(seg(dir.path(), target), &bytes).unwrap();
        if let Ok(log) = SegmentLog::open(dir.path(), 300) {
            let _ = log.recover();
        }
    }
}

/// Rolling at the limit, each new segment carrying the promise and the commit; the deletion
/// of the segments a removal covers, only at the next sync and oldest first; and a reopen
/// after many rolls reading back exactly what was written.
#[test]
fn rolling_deletion_and_reopen_after_many_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), 1024).unwrap();
    log.save_promise(ballot(1)).unwrap();
    for slot in 1..=400 {
        log.save_slot(slot, &value(slot, 100)).unwrap();
        if slot % 10 == 0 {
            log.save_commit(slot - 3).unwrap();
        }
        if slot == 200 {
            log.save_promise(ballot(2)).unwrap();
        }
        if slot % 37 == 0 {
            log.sync(no_snapshot).unwrap();
        }
    }
    log.sync(no_snapshot).unwrap();
    let seqs = log.segment_seqs();
    assert!(seqs.len() > 40, "{} segments", seqs.len());
    assert_eq!(files::list(dir.path()).unwrap(), seqs);
    for seq in &seqs[1..] {
        assert!(len_of(&seg(dir.path(), *seq)) <= 1024 + 200, "segment {seq} past the limit");
    }

    log.remove_slots_through(300).unwrap();
    assert_eq!(files::list(dir.path()).unwrap(), seqs, "nothing deleted before the sync");
    log.sync(no_snapshot).unwrap();
    let left = files::list(dir.path()).unwrap();
    assert!(left.len() < seqs.len() / 3, "{} of {} segments left", left.len(), seqs.len());
    assert_eq!(left, log.segment_seqs());
    // The first segment left starts with the promise and commit of its time, not with
    // records only a deleted segment held.
    let expected_slots: Vec<Slot> = (301..=400).collect();
    let r = log.recover().unwrap();
    assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), expected_slots);
    assert_eq!((r.promised, r.commit), (ballot(2), 397));
    drop(log);
    let log = SegmentLog::open(dir.path(), 1024).unwrap();
    let reopened = log.recover().unwrap();
    assert_eq!(reopened, r);
    // And it goes on rolling from the last segment.
    log.save_slot(401, &value(401, 2000)).unwrap();
    log.sync(no_snapshot).unwrap();
    assert_eq!(log.segment_seqs().last(), Some(&(left.last().unwrap() + 1)));
    assert_eq!(log.recover().unwrap().slots.len(), 101);
}

/// A slot written again after a removal covering its number is kept, and so is the segment
/// holding it: a segment goes only when a removal recorded *after* it covers all its slots.
#[test]
fn slots_written_after_a_removal_survive_the_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), 400).unwrap();
    for slot in 1..=10 {
        log.save_slot(slot, &value(slot, 100)).unwrap();
    }
    log.remove_slots_through(10).unwrap();
    log.save_slot(5, &value(55, 100)).unwrap();
    for slot in 11..=14 {
        log.save_slot(slot, &value(slot, 100)).unwrap();
    }
    log.sync(no_snapshot).unwrap();
    let expected = log.recover().unwrap();
    assert_eq!(expected.slots.keys().copied().collect::<Vec<_>>(), [5, 11, 12, 13, 14]);
    log.sync(no_snapshot).unwrap();
    drop(log);
    assert_eq!(SegmentLog::open(dir.path(), 400).unwrap().recover().unwrap(), expected);
}

/// If what must be durable first (the snapshot) fails, the sync fails before the log is
/// written or a segment deleted.
#[test]
fn a_failed_durable_first_step_writes_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), 300).unwrap();
    for slot in 1..=10 {
        log.save_slot(slot, &value(slot, 60)).unwrap();
    }
    log.sync(no_snapshot).unwrap();
    let files_before: Vec<_> = files::list(dir.path()).unwrap().iter().map(|&s| len_of(&seg(dir.path(), s))).collect();
    log.remove_slots_through(9).unwrap();
    let failed = log.sync(|| Err(StorageError::Io("the snapshot's sync failed".into())));
    assert!(failed.is_err());
    let files_after: Vec<_> = files::list(dir.path()).unwrap().iter().map(|&s| len_of(&seg(dir.path(), s))).collect();
    assert_eq!(files_after, files_before);
}

/// A segment missing between two others (only the oldest are ever deleted) is reported.
#[test]
fn a_missing_segment_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    three_segments(dir.path());
    std::fs::remove_file(seg(dir.path(), 2)).unwrap();
    match SegmentLog::open(dir.path(), 300) {
        Err(StorageError::Corrupt { what, detail }) => {
            assert!(what.contains(&format!("{:020}.seg", 2)) && detail.contains("missing"), "{what}: {detail}")
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
}

/// A last segment created by a roll whose first write never reached the disk (empty, short
/// or zeroed) is dropped; the log goes on in a new segment with that number.
#[test]
fn a_last_segment_with_a_torn_header_is_dropped() {
    for torn in [vec![], vec![b'l', b'e'], vec![0; 100]] {
        let dir = tempfile::tempdir().unwrap();
        let original = three_segments(dir.path());
        let expected = {
            std::fs::remove_file(seg(dir.path(), 3)).unwrap();
            let log = SegmentLog::open(dir.path(), 300).unwrap();
            log.recover().unwrap()
        };
        let _ = original;
        std::fs::write(seg(dir.path(), 3), &torn).unwrap();
        let log = SegmentLog::open(dir.path(), 300).unwrap();
        assert_eq!(log.recover().unwrap(), expected);
        log.save_slot(9, &value(9, 10)).unwrap();
        log.sync(no_snapshot).unwrap();
        drop(log);
        let r = SegmentLog::open(dir.path(), 300).unwrap().recover().unwrap();
        assert!(r.slots.contains_key(&9));
    }
}

/// A sync from another thread covers every append made before it, while appends go on.
#[test]
fn syncs_from_another_thread_cover_earlier_appends() {
    let dir = tempfile::tempdir().unwrap();
    let log = SegmentLog::open(dir.path(), 4096).unwrap();
    let syncer = log.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Slot>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Slot>();
    let thread = std::thread::spawn(move || {
        while let Ok(through) = rx.recv() {
            syncer.sync(no_snapshot).unwrap();
            done_tx.send(through).unwrap();
        }
    });
    let mut synced_through = 0;
    for slot in 1..=500 {
        log.save_slot(slot, &value(slot, 50)).unwrap();
        if slot % 25 == 0 {
            tx.send(slot).unwrap();
        }
        while let Ok(through) = done_rx.try_recv() {
            synced_through = through;
        }
    }
    drop(tx);
    thread.join().unwrap();
    while let Ok(through) = done_rx.try_recv() {
        synced_through = through;
    }
    assert_eq!(synced_through, 500);
    // What a crash keeps: the files alone (a new handle never sees the first one's buffer).
    let copy = tempfile::tempdir().unwrap();
    for s in files::list(dir.path()).unwrap() {
        std::fs::copy(seg(dir.path(), s), seg(copy.path(), s)).unwrap();
    }
    let r = SegmentLog::open(copy.path(), 4096).unwrap().recover().unwrap();
    assert_eq!(r.slots.len(), 500);
}
