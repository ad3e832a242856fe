//! Tests of `sled_store.rs`.

use super::*;
use crate::log::{Entry, LogBallot};
use crate::storage::tests::reopen;
use leasekv_lease::NodeId;

fn accepted(round: u64, chosen: bool) -> AcceptedSlot {
    AcceptedSlot { ballot: LogBallot { round, node: NodeId(2) }, entry: Entry::default(), chosen }
}

#[test]
fn synced_data_survives_drop_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = reopen(dir.path());
        s.save_promise(LogBallot { round: 7, node: NodeId(3) }).unwrap();
        s.save_slot(1, &accepted(7, true)).unwrap();
        s.save_slot(300, &accepted(7, false)).unwrap();
        s.save_commit(1).unwrap();
        s.save_snapshot(&SnapshotRecord { index: 0, data: vec![9; 10].into() }).unwrap();
        s.sync().unwrap();
    }
    let mut s = reopen(dir.path());
    let r = s.recover().unwrap();
    assert_eq!(r.promised, LogBallot { round: 7, node: NodeId(3) });
    assert_eq!(r.commit, 1);
    assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), vec![1, 300]);
    assert_eq!(r.slots[&1], accepted(7, true));
    assert_eq!(r.snapshot, Some(SnapshotRecord { index: 0, data: vec![9; 10].into() }));
}

/// Records past sled's blob threshold (a 1.5 MiB value in a slot, a multi-MiB snapshot)
/// read back whole and leave no file under `blobs/` (sled never syncs those: the
/// power-loss fault found it): slots go to the log whole, the snapshot to sled in pieces.
#[test]
fn large_records_read_back_whole_and_make_no_blobs() {
    use crate::command::{Command, PutRequest};
    use crate::log::{Proposal, ProposalId};
    let dir = tempfile::tempdir().unwrap();
    let big_put = |seq: u64| Proposal {
        id: ProposalId { node: NodeId(1), incarnation: 1, seq },
        command: Command::Put(PutRequest {
            key: b"k".to_vec(),
            value: vec![seq as u8; 1_572_864],
            lease: 0,
            prev_kv: false,
        }),
    };
    let big = |seq: u64| AcceptedSlot {
        ballot: LogBallot { round: 1, node: NodeId(1) },
        entry: Entry { proposals: vec![big_put(seq)] },
        chosen: true,
    };
    let snapshot = SnapshotRecord { index: 1, data: (0..3_000_000u32).map(|i| i as u8).collect::<Vec<u8>>().into() };
    {
        let mut s = reopen(dir.path());
        s.save_slot(1, &big(1)).unwrap();
        s.save_slot(2, &big(2)).unwrap();
        s.save_slot(3, &accepted(1, true)).unwrap();
        s.save_snapshot(&snapshot).unwrap();
        s.sync().unwrap();
        s.remove_slots_through(1).unwrap();
        s.sync().unwrap();
    }
    let blobs = std::fs::read_dir(dir.path().join("blobs")).map_or(0, |d| d.count());
    assert_eq!(blobs, 0, "no sled blob files");
    let mut s = reopen(dir.path());
    let r = s.recover().unwrap();
    assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(r.slots[&2], big(2));
    assert_eq!(r.snapshot, Some(snapshot));
}

/// A database created with sled's default segments (every leasekv before 4 MiB ones)
/// still opens, and keeps its records small enough for its own blob threshold.
#[test]
fn databases_with_sleds_default_segments_still_open() {
    let dir = tempfile::tempdir().unwrap();
    drop(sled::Config::new().path(dir.path()).open().unwrap());
    let mut s = reopen(dir.path());
    assert_eq!(s.piece, 4096);
    s.save_snapshot(&SnapshotRecord { index: 0, data: vec![3; 1 << 20].into() }).unwrap();
    s.sync().unwrap();
    drop(s);
    assert_eq!(std::fs::read_dir(dir.path().join("blobs")).map_or(0, |d| d.count()), 0);
    assert_eq!(reopen(dir.path()).recover().unwrap().snapshot.unwrap().data, SnapshotData::Bytes(vec![3; 1 << 20]));

    let fresh = tempfile::tempdir().unwrap();
    assert_eq!(SledStorage::open(fresh.path()).unwrap().piece, SEGMENT_SIZE / 128);
    let conf = String::from_utf8_lossy(&std::fs::read(fresh.path().join("conf")).unwrap()).into_owned();
    assert!(conf.contains(&format!("segment_size: {SEGMENT_SIZE}")), "{conf}");
}

/// A snapshot given as a file is moved in, survives a reopen as that file, and its file
/// is deleted once a newer snapshot (file or bytes) or a discard is durable; a file
/// saved but never synced, and what an interrupted transfer left, are gone at the next
/// open.
#[test]
fn snapshot_files_are_taken_in_kept_and_deleted_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let files = |sub: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir.path().join(sub)).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    };
    let incoming = |s: &SledStorage, name: &str, fill: u8| -> PathBuf {
        let path = s.incoming_dir().join(name);
        std::fs::write(&path, vec![fill; 100_000]).unwrap();
        path
    };
    let first = {
        let mut s = reopen(dir.path());
        let given = incoming(&s, "a", 1);
        s.save_snapshot(&SnapshotRecord { index: 5, data: SnapshotData::File(given.clone()) }).unwrap();
        s.sync().unwrap();
        assert!(!given.exists(), "moved in");
        let kept = s.snapshot_file().unwrap();
        assert_eq!(files(SNAPSHOTS_DIR), vec![kept.clone()]);
        kept
    };
    let mut s = reopen(dir.path());
    let r = s.recover().unwrap();
    assert_eq!(r.snapshot, Some(SnapshotRecord { index: 5, data: SnapshotData::File(first.clone()) }));
    assert_eq!(r.snapshot.unwrap().data.read_all().unwrap().as_ref(), &vec![1; 100_000][..]);

    // Replaced by a newer file: the old one goes once the new record is durable.
    let given = incoming(&s, "b", 2);
    s.save_snapshot(&SnapshotRecord { index: 9, data: SnapshotData::File(given) }).unwrap();
    assert!(first.exists(), "kept until the sync");
    s.sync().unwrap();
    assert!(!first.exists());
    let second = s.snapshot_file().unwrap();

    // Saved, not synced, then a crash (drop): the durable record is the one before,
    // and the file saved meanwhile is deleted at the open.
    let given = incoming(&s, "c", 3);
    s.save_snapshot(&SnapshotRecord { index: 12, data: SnapshotData::File(given) }).unwrap();
    let unsynced = s.snapshot_file().unwrap();
    let _ = incoming(&s, "left-by-a-cut-transfer", 4);
    drop(s);
    let mut s = reopen(dir.path());
    let r = s.recover().unwrap();
    assert_eq!(r.snapshot.map(|r| r.index), Some(if unsynced.exists() { 12 } else { 9 }));
    assert!(files(INCOMING_DIR).is_empty());
    assert_eq!(files(SNAPSHOTS_DIR).len(), 1);

    // Replaced by bytes, then discarded.
    let kept = s.snapshot_file().unwrap();
    s.save_snapshot(&SnapshotRecord { index: 20, data: vec![5; 10].into() }).unwrap();
    s.sync().unwrap();
    assert!(!kept.exists() && !second.exists());
    assert_eq!(s.recover().unwrap().snapshot.map(|r| r.index), Some(20));
    let given = incoming(&s, "d", 6);
    s.save_snapshot(&SnapshotRecord { index: 30, data: SnapshotData::File(given) }).unwrap();
    s.sync().unwrap();
    s.discard_snapshot().unwrap();
    s.sync().unwrap();
    assert!(files(SNAPSHOTS_DIR).is_empty());
    drop(s);
    assert_eq!(reopen(dir.path()).recover().unwrap().snapshot, None);
}

#[test]
fn corrupt_records_are_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = reopen(dir.path());
    s.save_slot(5, &accepted(1, false)).unwrap();
    s.sync().unwrap();

    s.snapshot.insert(SNAPSHOT_KEY, &[][..]).unwrap();
    assert!(matches!(s.recover(), Err(StorageError::Corrupt { what, .. }) if what == "snapshot"));
    s.snapshot.remove(SNAPSHOT_KEY).unwrap();

    s.durable.meta.insert(EPOCH_KEY, &b"xx"[..]).unwrap();
    assert!(s.epoch_store().begin_epoch().unwrap_err().to_string().contains("restart epoch"));
    s.durable.meta.remove(EPOCH_KEY).unwrap();

    assert_eq!(s.recover().unwrap().slots.len(), 1);
}

#[test]
fn epoch_increments_across_reopen_and_first_start_only_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = reopen(dir.path());
        let mut e = s.epoch_store();
        assert_eq!(e.begin_epoch().unwrap(), RestartEpoch { value: 1, first_start: true });
    }
    for expected in 2..=4 {
        let s = reopen(dir.path());
        assert_eq!(s.epoch_store().begin_epoch().unwrap(), RestartEpoch { value: expected, first_start: false });
    }
    // The epoch shares the database with the log but does not disturb it.
    let mut s = reopen(dir.path());
    assert_eq!(s.recover().unwrap(), Recovered::default());
}

#[test]
fn open_on_a_regular_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = SledStorage::open(&file).err().expect("opening a file must fail").to_string();
    assert!(err.contains("not-a-dir") && err.contains("not a directory"), "{err}");

    // A directory that cannot be created because its parent is a file.
    let err = SledStorage::open(&file.join("sub")).err().expect("must fail").to_string();
    assert!(err.contains("not-a-dir") && err.contains("sub"), "{err}");
}

#[test]
fn open_creates_missing_directories() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/c");
    let mut s = SledStorage::open(&nested).unwrap();
    assert_eq!(s.recover().unwrap(), Recovered::default());
    assert!(nested.is_dir());
}

#[test]
fn a_second_open_of_the_same_directory_fails_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let _first = SledStorage::open(dir.path()).unwrap();
    // Two writers on one log would corrupt it; sled's file lock refuses the second.
    let err = SledStorage::open(dir.path()).err().expect("a second open must fail").to_string();
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
}
