//! Tests every [`Storage`] implementation must pass, run against both, plus the crash
//! semantics of [`MemoryStorage`].
use super::*;
use crate::command::{Command, PutRequest};
use crate::log::{Entry, Proposal, ProposalId};
use leasekv_lease::NodeId;

/// Opens the store at `path`, waiting (bounded) for the previous handle's background
/// flusher to let go of sled's file lock: dropping a `Db` releases it asynchronously.
pub(crate) fn reopen(path: &std::path::Path) -> SledStorage {
    for _ in 0..100 {
        match SledStorage::open(path) {
            Ok(store) => return store,
            Err(e) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
    panic!("{}: sled's lock was not released within 2 s", path.display())
}

fn ballot(round: u64) -> LogBallot {
    LogBallot { round, node: NodeId((round % 3 + 1) as u32) }
}

fn slot_value(round: u64, seq: u64, chosen: bool) -> AcceptedSlot {
    let put = |i: u64| Proposal {
        id: ProposalId { node: NodeId(1), incarnation: 4, seq: seq * 10 + i },
        command: Command::Put(PutRequest {
            key: format!("k{seq}-{i}").into_bytes(),
            value: vec![seq as u8; 40],
            lease: 0,
            prev_kv: i & 1 == 0,
        }),
    };
    AcceptedSlot { ballot: ballot(round), entry: Entry { proposals: (0..seq % 4).map(put).collect() }, chosen }
}

fn snapshot(index: Slot, fill: u8) -> SnapshotRecord {
    SnapshotRecord { index, data: vec![fill; 1000 + index as usize].into() }
}

/// Log segments small enough that the suite's writes roll over many times.
const SMALL_SEGMENTS: u64 = 2048;

/// Each storage test runs on both implementations; the sled one in a fresh tempdir, with
/// the default segments and with small ones.
fn both(test: impl Fn(&mut dyn Storage)) {
    test(&mut MemoryStorage::new());
    let dir = tempfile::tempdir().unwrap();
    test(&mut SledStorage::open(dir.path()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    test(&mut SledStorage::open_with_segment_limit(dir.path(), SMALL_SEGMENTS).unwrap());
}

#[test]
fn blank_storage_recovers_the_default() {
    both(|s| assert_eq!(s.recover().unwrap(), Recovered::default()));
}

#[test]
fn every_record_round_trips() {
    both(|s| {
        s.save_promise(ballot(9)).unwrap();
        s.save_slot(1, &slot_value(9, 1, true)).unwrap();
        s.save_slot(2, &slot_value(9, 3, false)).unwrap();
        s.save_slot(u64::MAX, &slot_value(9, 2, false)).unwrap();
        s.save_commit(1).unwrap();
        s.sync().unwrap();
        let r = s.recover().unwrap();
        assert_eq!(r.promised, ballot(9));
        assert_eq!(r.commit, 1);
        assert_eq!(r.slots.len(), 3);
        assert_eq!(r.slots[&1], slot_value(9, 1, true));
        assert_eq!(r.slots[&2], slot_value(9, 3, false));
        assert_eq!(r.slots[&u64::MAX], slot_value(9, 2, false));
        assert_eq!(r.snapshot, None);

        // Overwrites replace.
        s.save_promise(ballot(10)).unwrap();
        s.save_slot(2, &slot_value(10, 3, true)).unwrap();
        s.save_commit(2).unwrap();
        s.sync().unwrap();
        let r = s.recover().unwrap();
        assert_eq!((r.promised, r.commit), (ballot(10), 2));
        assert_eq!(r.slots[&2], slot_value(10, 3, true));
    });
}

#[test]
fn remove_slots_through_deletes_exactly_the_prefix() {
    both(|s| {
        for slot in [1, 2, 255, 256, 257, 1000] {
            s.save_slot(slot, &slot_value(1, slot, false)).unwrap();
        }
        s.remove_slots_through(256).unwrap();
        s.sync().unwrap();
        assert_eq!(s.recover().unwrap().slots.keys().copied().collect::<Vec<_>>(), vec![257, 1000]);
        s.remove_slots_through(0).unwrap();
        assert_eq!(s.recover().unwrap().slots.len(), 2);
        s.remove_slots_through(u64::MAX).unwrap();
        assert!(s.recover().unwrap().slots.is_empty());
    });
}

#[test]
fn snapshot_replaces_the_old_one_and_hides_the_slots_it_covers() {
    both(|s| {
        for slot in 1..=10 {
            s.save_slot(slot, &slot_value(1, slot, true)).unwrap();
        }
        s.save_commit(3).unwrap();
        s.save_snapshot(&snapshot(4, 1)).unwrap();
        s.sync().unwrap();
        let r = s.recover().unwrap();
        assert_eq!(r.snapshot, Some(snapshot(4, 1)));
        // Slots 1..=4 are still stored (not removed yet) but covered by the snapshot.
        assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), (5..=10).collect::<Vec<_>>());
        assert_eq!(r.commit, 4, "a snapshot's slots are chosen");

        s.save_snapshot(&snapshot(8, 2)).unwrap();
        s.remove_slots_through(8).unwrap();
        s.save_commit(9).unwrap();
        s.sync().unwrap();
        let r = s.recover().unwrap();
        assert_eq!(r.snapshot, Some(snapshot(8, 2)));
        assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), vec![9, 10]);
        assert_eq!(r.commit, 9);
    });
}

/// A long pseudo-random sequence of operations gives the same `recover()` on both
/// implementations, checked after every sync.
#[test]
fn both_implementations_recover_the_same_state() {
    let mut mem = MemoryStorage::new();
    let dir = tempfile::tempdir().unwrap();
    let mut sled = SledStorage::open_with_segment_limit(dir.path(), SMALL_SEGMENTS).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // xorshift64: deterministic, no dependency.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for step in 0..600u64 {
        let r = next();
        let stores: [&mut dyn Storage; 2] = [&mut mem, &mut sled];
        for s in stores {
            match r % 10 {
                0 => s.save_promise(ballot(r % 50)).unwrap(),
                1..=5 => s.save_slot(r % 64, &slot_value(r % 50, step, r % 3 == 0)).unwrap(),
                6 => s.save_commit(r % 64).unwrap(),
                7 => s.save_snapshot(&snapshot(r % 40, (r % 251) as u8)).unwrap(),
                8 => s.remove_slots_through(r % 48).unwrap(),
                _ => s.sync().unwrap(),
            }
        }
        if r % 10 == 9 {
            assert_eq!(mem.recover().unwrap(), sled.recover().unwrap(), "diverged at step {step}");
        }
    }
    mem.sync().unwrap();
    sled.sync().unwrap();
    let expected = mem.recover().unwrap();
    drop(sled);
    let log_files = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    assert!(log_files > 1, "the log rolled ({log_files} segments)");
    assert_eq!(reopen(dir.path()).recover().unwrap(), expected, "after reopening");
}

#[test]
fn memory_crash_loses_unsynced_writes_and_keeps_synced_ones() {
    let mut s = MemoryStorage::new();
    s.save_promise(ballot(1)).unwrap();
    s.save_slot(1, &slot_value(1, 1, false)).unwrap();
    s.sync().unwrap();
    assert_eq!(s.sync_count(), 1);
    let synced = s.recover().unwrap();

    s.save_promise(ballot(2)).unwrap();
    s.save_slot(2, &slot_value(2, 2, false)).unwrap();
    s.save_snapshot(&snapshot(1, 7)).unwrap();
    s.remove_slots_through(1).unwrap();
    assert_eq!(s.pending_len(), 4);
    // Before the crash the node sees its own writes.
    assert_eq!(s.recover().unwrap().promised, ballot(2));
    s.crash();
    assert_eq!(s.pending_len(), 0);
    assert_eq!(s.recover().unwrap(), synced);
    assert_eq!(s.sync_count(), 1);

    // A clone is an independent disk.
    let mut copy = s.clone();
    copy.save_commit(1).unwrap();
    copy.sync().unwrap();
    assert_eq!(s.recover().unwrap(), synced);
    assert_eq!(copy.recover().unwrap().commit, 1);
}

#[test]
fn memory_crash_keeping_keeps_a_prefix() {
    let mut s = MemoryStorage::new();
    s.save_slot(1, &slot_value(1, 1, false)).unwrap();
    s.save_slot(2, &slot_value(1, 2, false)).unwrap();
    s.save_snapshot(&snapshot(1, 3)).unwrap();
    s.remove_slots_through(1).unwrap();
    s.crash_keeping(3);
    let r = s.recover().unwrap();
    // The removal was torn off, but the snapshot covers slot 1 anyway.
    assert_eq!(r.snapshot, Some(snapshot(1, 3)));
    assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(s.pending_len(), 0);

    s.save_commit(2).unwrap();
    s.save_promise(ballot(5)).unwrap();
    s.crash_keeping(1);
    let r = s.recover().unwrap();
    assert_eq!((r.commit, r.promised), (2, LogBallot::ZERO));

    s.save_commit(3).unwrap();
    s.crash_keeping(usize::MAX);
    assert_eq!(s.recover().unwrap().commit, 3);
    s.save_commit(4).unwrap();
    s.crash_keeping(0);
    assert_eq!(s.recover().unwrap().commit, 3);
    assert_eq!(s.sync_count(), 0, "a torn write is not a sync");
}

/// Env var that turns [`sled_abort_child`] from a no-op into the crashing child process.
const ABORT_CHILD_DIR: &str = "LEASEKV_STORAGE_ABORT_CHILD_DIR";

/// The child half of [`sled_synced_writes_survive_a_process_abort`]: syncs some writes, makes
/// some more, and aborts without running destructors (so sled gets no chance to flush).
#[test]
fn sled_abort_child() {
    let Some(dir) = std::env::var_os(ABORT_CHILD_DIR) else { return };
    let mut s = SledStorage::open(std::path::Path::new(&dir)).unwrap();
    s.save_promise(ballot(3)).unwrap();
    for slot in 1..=100 {
        s.save_slot(slot, &slot_value(3, slot, false)).unwrap();
    }
    s.save_commit(50).unwrap();
    s.sync().unwrap();
    // Then a snapshot and more slots, synced by the handle on another thread, as the
    // server's sync thread does.
    s.save_snapshot(&snapshot(20, 4)).unwrap();
    s.remove_slots_through(20).unwrap();
    for slot in 101..=120 {
        s.save_slot(slot, &slot_value(3, slot, true)).unwrap();
    }
    let handle = s.sync_handle();
    std::thread::spawn(move || handle.sync().unwrap()).join().unwrap();
    s.save_commit(60).unwrap();
    s.save_slot(121, &slot_value(3, 1, false)).unwrap();
    std::process::abort();
}

/// A real crash (the process aborts) keeps everything synced before it.
#[test]
fn sled_synced_writes_survive_a_process_abort() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "storage::tests::sled_abort_child", "--test-threads=1", "--nocapture"])
        .env(ABORT_CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must have aborted");
    let r = SledStorage::open(dir.path()).unwrap().recover().unwrap();
    assert_eq!(r.promised, ballot(3));
    assert!(r.commit >= 50, "synced commit lost: {}", r.commit);
    assert_eq!(r.snapshot, Some(snapshot(20, 4)), "the snapshot synced by the handle");
    for slot in 21..=100 {
        assert_eq!(r.slots.get(&slot), Some(&slot_value(3, slot, false)), "synced slot {slot} lost");
    }
    for slot in 101..=120 {
        assert_eq!(r.slots.get(&slot), Some(&slot_value(3, slot, true)), "slot {slot} synced by the handle lost");
    }
    assert!(!r.slots.contains_key(&121), "never synced, and the process buffer died with it");
}

/// What a crash right after `save_snapshot` + `remove_slots_through`, before the sync, keeps:
/// the old durable snapshot (none here) and the log's files as they are. Fails, naming the
/// slots, if that loses a slot no durable snapshot covers: what deleting segments (or
/// writing the removal) before the snapshot is synced does.
fn crash_before_the_snapshot_sync_loses_nothing(delete_before_sync: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut s = SledStorage::open_with_segment_limit(dir.path(), 1024).unwrap();
    s.log().set_delete_before_sync(delete_before_sync);
    for slot in 1..=100 {
        s.save_slot(slot, &slot_value(1, slot, true)).unwrap();
    }
    s.save_commit(100).unwrap();
    s.sync().unwrap();
    let segments_before = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    s.save_snapshot(&snapshot(80, 9)).unwrap();
    s.remove_slots_through(80).unwrap();

    // The crash: the disk image is the log's files now, and no snapshot.
    let image = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path().join("log")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), image.path().join(entry.file_name())).unwrap();
    }
    let survived = segments::SegmentLog::open(image.path(), 1024).and_then(|log| log.recover()).unwrap();
    let lost: Vec<Slot> = (1..=100).filter(|slot| !survived.slots.contains_key(slot)).collect();
    if !lost.is_empty() {
        return Err(format!("a crash before the snapshot's sync lost slots {lost:?}"));
    }

    // After the sync the covered segments go, and what is left reads back right.
    s.sync().unwrap();
    let segments_after = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    assert!(segments_after < segments_before / 2, "{segments_before} segments, {segments_after} after the sync");
    drop(s);
    let r = reopen(dir.path()).recover().unwrap();
    assert_eq!(r.snapshot, Some(snapshot(80, 9)));
    assert_eq!(r.slots.keys().copied().collect::<Vec<_>>(), (81..=100).collect::<Vec<_>>());
    Ok(())
}

/// The deletion rule: log segments that a snapshot made unnecessary are deleted only by
/// the sync that makes that snapshot durable, never before. With the rule broken on
/// purpose (`delete_before_sync`, the negative control) the check must fail.
#[test]
fn segments_are_deleted_only_after_the_snapshot_is_synced() {
    assert_eq!(crash_before_the_snapshot_sync_loses_nothing(false), Ok(()));
    let broken = crash_before_the_snapshot_sync_loses_nothing(true);
    assert!(broken.is_err(), "negative control: deleting before the sync went unnoticed");
}

/// Opens sled in `dir` as the release before the segment log did, retrying while an
/// earlier handle's lock is being released.
fn open_old_sled(dir: &std::path::Path) -> sled::Db {
    for _ in 0..100 {
        match sled::Config::new().segment_size(4 << 20).path(dir).open() {
            Ok(db) => return db,
            Err(e) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
    panic!("{}: sled's lock was not released within 2 s", dir.display())
}

/// Writes the log, snapshot and restart epoch into `dir` the way the release before the
/// segment log did: everything in sled, slots longer than a piece in pieces.
fn write_old_layout(dir: &std::path::Path, state: &Recovered, epoch: Option<u32>) {
    use super::codec::{encode, slot_key};
    let db = open_old_sled(dir);
    let piece = pieces::piece_len(4 << 20);
    let meta = db.open_tree("leasekv/meta").unwrap();
    let slots = db.open_tree("leasekv/slots").unwrap();
    let snap = db.open_tree("leasekv/snapshot").unwrap();
    meta.insert(b"promised", encode("promised ballot", &state.promised).unwrap()).unwrap();
    meta.insert(b"commit", encode("commit index", &state.commit).unwrap()).unwrap();
    if let Some(epoch) = epoch {
        meta.insert(b"restart_epoch", encode("restart epoch", &epoch).unwrap()).unwrap();
    }
    for (slot, accepted) in &state.slots {
        pieces::insert(&slots, &slot_key(*slot), &encode("slot", accepted).unwrap(), piece).unwrap();
    }
    if let Some(s) = &state.snapshot {
        let data = s.data.read_all().unwrap();
        pieces::insert(&snap, b"snapshot", &encode("snapshot", &(s.index, &*data)).unwrap(), piece).unwrap();
    }
    db.flush().unwrap();
}

/// A state as the previous release could leave it: a snapshot, slots above it (one in
/// pieces), a promise and a commit index.
fn old_state() -> Recovered {
    let mut slots: BTreeMap<Slot, AcceptedSlot> =
        (11..=40).map(|slot| (slot, slot_value(4, slot, slot <= 30))).collect();
    let mut large = slot_value(4, 3, false);
    if let Some(p) = large.entry.proposals.first_mut() {
        if let Command::Put(put) = &mut p.command {
            put.value = vec![7; 200_000];
        }
    }
    slots.insert(41, large);
    Recovered { promised: ballot(4), slots, commit: 30, snapshot: Some(snapshot(10, 5)) }
}

fn old_records_in_sled(dir: &std::path::Path) -> bool {
    let db = open_old_sled(dir);
    let meta = db.open_tree("leasekv/meta").unwrap();
    let has_slots = db.tree_names().iter().any(|name| name.as_ref() == b"leasekv/slots");
    has_slots || meta.get(b"promised").unwrap().is_some() || meta.get(b"commit").unwrap().is_some()
}

/// A data directory written by the release before the segment log opens with the same
/// contents; its log is in `log/` and out of sled afterwards; the epoch goes on.
#[test]
fn a_data_dir_of_the_previous_release_is_upgraded() {
    use leasekv_lease::EpochStore;
    let dir = tempfile::tempdir().unwrap();
    let state = old_state();
    write_old_layout(dir.path(), &state, Some(7));
    let mut s = reopen(dir.path());
    assert_eq!(s.recover().unwrap(), state);
    assert_eq!(s.epoch_store().begin_epoch().unwrap().value, 8);
    assert!(dir.path().join("log").is_dir() && !dir.path().join("log.tmp").exists());
    drop(s);
    assert!(!old_records_in_sled(dir.path()), "the old records are removed");
    let mut s = reopen(dir.path());
    assert_eq!(s.recover().unwrap(), state);
    s.save_slot(42, &slot_value(5, 42, false)).unwrap();
    s.sync().unwrap();
    drop(s);
    assert_eq!(reopen(dir.path()).recover().unwrap().slots.len(), state.slots.len() + 1);
}

/// An upgrade interrupted before its rename (a `log.tmp/` left, maybe half written) is
/// thrown away and redone from the sled records, which are still the log.
#[test]
fn an_interrupted_upgrade_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    let state = old_state();
    write_old_layout(dir.path(), &state, None);
    let tmp = dir.path().join("log.tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(tmp.join(format!("{:020}.seg", 1)), b"half a segm").unwrap();
    let mut s = reopen(dir.path());
    assert_eq!(s.recover().unwrap(), state);
    assert!(!tmp.exists());
}

/// Once `log/` exists it is the log: old records still in sled (a crash between the rename
/// and their removal) are ignored and removed.
#[test]
fn old_records_next_to_a_log_are_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = reopen(dir.path());
    s.save_promise(ballot(9)).unwrap();
    s.save_slot(1, &slot_value(9, 1, true)).unwrap();
    s.save_commit(1).unwrap();
    s.sync().unwrap();
    let expected = s.recover().unwrap();
    drop(s);
    write_old_layout(dir.path(), &Recovered { snapshot: None, ..old_state() }, None);
    assert!(old_records_in_sled(dir.path()));
    let mut s = reopen(dir.path());
    assert_eq!(s.recover().unwrap(), expected);
    drop(s);
    assert!(!old_records_in_sled(dir.path()));
}

fn put_state(engine: &dyn crate::engine::Engine, key: &str, value: &str) {
    let mut batch = crate::engine::WriteBatch::new();
    batch.put(key.as_bytes().to_vec(), value.as_bytes().to_vec());
    engine.write(batch).expect("write");
    engine.sync().expect("sync");
}

/// The state directories in `dir`: `state/` and every `state-<nonce>/`.
fn state_dirs(dir: &std::path::Path) -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name == STATE_DIR || name.starts_with("state-"))
        .collect();
    dirs.sort();
    dirs
}

/// Waits (bounded) until the data dir holds only `n` state directories: a replaced or given
/// up engine is deleted by a thread of its own.
fn wait_for_state_dirs(dir: &std::path::Path, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let dirs = state_dirs(dir);
        if dirs.len() == n {
            return dirs;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    state_dirs(dir)
}

#[test]
fn a_staged_engine_replaces_the_state_engine_for_good() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let mut store = SledStorage::open(dir.path()).expect("open");
        put_state(store.state_engine().as_ref(), "old", "1");
        let staged = store.stager().stage().expect("stage");
        assert!(store.stager().stage().is_err(), "one staged engine at a time");
        put_state(staged.engine().as_ref(), "new", "2");
        assert_eq!(state_dirs(dir.path()).len(), 2);
        let before = store.state_engine();
        store.adopt_staged(staged).expect("adopt");
        let engine = store.state_engine();
        assert_eq!(engine.get(b"new").expect("get"), Some(b"2".to_vec()));
        assert_eq!(engine.get(b"old").expect("get"), None);
        assert_eq!(before.get(b"old").expect("get"), Some(b"1".to_vec()), "a handle taken before still reads");
        assert_eq!(state_dirs(dir.path()).len(), 2, "the replaced state waits for its last reader");
        drop(before);
        let left = wait_for_state_dirs(dir.path(), 1);
        assert!(left[0].starts_with("state-"), "{left:?}");
        assert!(store.size_on_disk().is_some_and(|size| size > 0));
        // Another install after the first.
        let staged = store.stager().stage().expect("stage again");
        put_state(staged.engine().as_ref(), "newer", "3");
        store.adopt_staged(staged).expect("adopt again");
    }
    let store = reopen(dir.path());
    assert_eq!(store.state_engine().get(b"newer").expect("get"), Some(b"3".to_vec()));
    assert_eq!(store.state_engine().get(b"new").expect("get"), None);
    assert_eq!(state_dirs(dir.path()).len(), 1);
}

#[test]
fn a_staged_engine_never_adopted_is_gone_at_the_next_open() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = SledStorage::open(dir.path()).expect("open");
        put_state(store.state_engine().as_ref(), "old", "1");
        let staged = store.stager().stage().expect("stage");
        put_state(staged.engine().as_ref(), "new", "2");
        // The process stops with it staged.
        std::mem::forget(staged);
    }
    let store = reopen(dir.path());
    assert_eq!(store.state_engine().get(b"old").expect("get"), Some(b"1".to_vec()));
    assert_eq!(store.state_engine().get(b"new").expect("get"), None);
    assert_eq!(state_dirs(dir.path()), [STATE_DIR.to_string()], "what was staged is gone");
    // Given up while running: deleted then, and another may be staged.
    let staged = store.stager().stage().expect("stage");
    staged.discard();
    assert_eq!(wait_for_state_dirs(dir.path(), 1), [STATE_DIR.to_string()]);
    store.stager().stage().expect("staged again once the first is gone").discard();
}

#[test]
fn a_damaged_state_pointer_is_refused_with_its_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    drop(SledStorage::open(dir.path()).expect("open"));
    std::fs::write(dir.path().join("state.current"), "state-missing").expect("write");
    let error = loop {
        match SledStorage::open(dir.path()) {
            Err(e) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            Err(e) => break e,
            Ok(_) => panic!("opened with a pointer to nothing"),
        }
    };
    assert!(error.to_string().contains("state.current"), "{error}");
    assert!(error.to_string().contains("not a state directory"), "{error}");
}

#[test]
fn a_staged_engine_is_adopted_only_by_its_own_kind_of_storage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = SledStorage::open(dir.path()).expect("open");
    let error =
        store.adopt_staged(StagedEngine::in_memory(crate::engine::ValueLogBreakage::None)).expect_err("refused");
    assert!(error.to_string().contains("in memory cannot replace one on disk"), "{error}");
    let mut memory = MemoryStorage::new();
    let staged = store.stager().stage().expect("stage");
    let error = memory.adopt_staged(staged).expect_err("refused");
    assert!(error.to_string().contains("cannot replace one in memory"), "{error}");
}

#[test]
fn a_cut_snapshot_stream_is_not_staged() {
    let mut machine = crate::StateMachine::new();
    machine.apply(&Command::Put(PutRequest {
        key: b"k".to_vec(),
        value: vec![7; 100],
        lease: crate::types::NO_LEASE,
        prev_kv: false,
    }));
    let view = machine.view_through(1).expect("view");
    let mut stream = Vec::new();
    crate::state::stream::write(&view, &mut stream).expect("write");
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SledStorage::open(dir.path()).expect("open");
    let staged = store.stager().stage().expect("stage");
    let error = crate::log::StagedSnapshot::install(1, &stream[..stream.len() - 3], staged).expect_err("cut");
    assert!(error.to_string().contains("cut") || error.to_string().contains("end"), "{error}");
    assert_eq!(wait_for_state_dirs(dir.path(), 1), [STATE_DIR.to_string()], "the staged engine is given up");
    let staged = store.stager().stage().expect("stage");
    let installed = crate::log::StagedSnapshot::install(1, stream.as_slice(), staged).expect("whole");
    assert_eq!(installed.index(), 1);
    installed.discard();
    assert_eq!(wait_for_state_dirs(dir.path(), 1), [STATE_DIR.to_string()]);
}
