//! Tests of `lazyfs.rs`.

use super::*;
use leasekv::kvstore::log::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, StagedSnapshot};
use leasekv::kvstore::storage::{SledStorage, SnapshotRecord, Storage};
use leasekv::kvstore::{Command, PutRequest, StateMachine};
use leasekv::lease::NodeId;

/// Env var that turns [`power_loss_child`] from a no-op into the writing child process.
const CHILD_DIR: &str = "LEASEKV_LAZYFS_CHILD_DIR";

/// Whether this process may mount a FUSE filesystem; under `CI=true` it must.
fn can_mount() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")));
    let fuse = Path::new("/dev/fuse").exists();
    if !(root && fuse) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the lazy disk test needs root and /dev/fuse under CI=true"
        );
        eprintln!("skipped: mounting the lazy disk needs root and /dev/fuse");
    }
    root && fuse
}

/// A lazy disk mounted in a new temporary directory, and the data directory on it
/// (dropped in reverse: the disk is unmounted before its directory goes).
fn lazy_disk() -> (tempfile::TempDir, Disk, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (backing, mountpoint) = (dir.path().join("backing"), dir.path().join("mnt"));
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mountpoint).unwrap();
    let disk = Disk::mount(&backing, &mountpoint).unwrap();
    (dir, disk, mountpoint.join("db"))
}

/// Runs the child test `name` of this binary (a `lazyfs::tests::…_child`) with `env`
/// set, its output discarded, and returns how it ended.
fn run_child(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> std::process::ExitStatus {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args(["--exact", &format!("lazyfs::tests::{name}"), "--test-threads=1"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    child.status().unwrap()
}

fn slot(seq: u64, value_len: usize) -> AcceptedSlot {
    let put = Proposal {
        id: ProposalId { node: NodeId(1), incarnation: 1, seq },
        command: Command::Put(PutRequest {
            key: format!("/k/{seq}").into_bytes(),
            value: vec![seq as u8; value_len],
            lease: 0,
            prev_kv: false,
        }),
    };
    AcceptedSlot {
        ballot: LogBallot { round: 1, node: NodeId(1) },
        entry: Entry { proposals: vec![put] },
        chosen: true,
    }
}

fn snapshot(fill: u8) -> SnapshotRecord {
    SnapshotRecord { index: 0, data: vec![fill; 3_000_000].into() }
}

/// The child half of [`synced_sled_storage_survives_a_power_loss`]: large and medium
/// records, synced; more of them, not synced; then it dies without a destructor.
#[test]
fn power_loss_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let mut s = SledStorage::open(Path::new(&dir)).unwrap();
    for seq in 1..=40 {
        s.save_slot(seq, &slot(seq, 40_000)).unwrap();
    }
    s.save_slot(41, &slot(41, 1_500_000)).unwrap();
    s.save_snapshot(&snapshot(7)).unwrap();
    s.sync().unwrap();
    for seq in 42..=80 {
        s.save_slot(seq, &slot(seq, 40_000)).unwrap();
    }
    s.save_snapshot(&snapshot(8)).unwrap();
    std::process::abort();
}

/// Env var that turns [`snapshot_file_child`] into the writing child; its value says
/// whether the child skips the snapshot file's sync (the negative control).
const FILE_CHILD_DIR: &str = "LEASEKV_LAZYFS_FILE_CHILD_DIR";
const FILE_CHILD_SKIP_SYNC: &str = "LEASEKV_LAZYFS_FILE_CHILD_SKIP_SYNC";

fn file_snapshot_bytes(fill: u8) -> Vec<u8> {
    (0..2_000_000u32).map(|i| (i as u8).wrapping_mul(fill)).collect()
}

/// The child half of [`a_synced_snapshot_file_survives_a_power_loss`]: a snapshot
/// received into a file is saved and synced; then it dies without a destructor.
#[test]
fn snapshot_file_child() {
    let Some(dir) = std::env::var_os(FILE_CHILD_DIR) else { return };
    if std::env::var_os(FILE_CHILD_SKIP_SYNC).is_some() {
        leasekv::kvstore::storage::sync_faults::skip_snapshot_file_sync();
    }
    let mut s = SledStorage::open(Path::new(&dir)).unwrap();
    let incoming = s.incoming_dir().join("pulled.part");
    std::fs::write(&incoming, file_snapshot_bytes(3)).unwrap();
    let data = leasekv::kvstore::storage::SnapshotData::File(incoming);
    s.save_snapshot(&SnapshotRecord { index: 5, data }).unwrap();
    s.sync().unwrap();
    std::process::abort();
}

/// Runs [`snapshot_file_child`] on a lazy disk, cuts the power and reads the snapshot
/// back: `None` when no snapshot is recorded, else whether its bytes are whole.
fn snapshot_file_after_power_loss(skip_sync: bool) -> Option<bool> {
    let (_dir, disk, data) = lazy_disk();
    let mut env = vec![(FILE_CHILD_DIR, data.as_os_str())];
    if skip_sync {
        env.push((FILE_CHILD_SKIP_SYNC, "1".as_ref()));
    }
    assert!(!run_child("snapshot_file_child", &env).success(), "the child must have aborted");
    disk.power_loss().unwrap();
    disk.power_on();
    let recovered = SledStorage::open(&data).and_then(|mut s| s.recover());
    let recovered = recovered.unwrap_or_else(|e| panic!("the database after a power loss: {e}"));
    let snapshot = recovered.snapshot?;
    assert_eq!(snapshot.index, 5);
    Some(snapshot.data.read_all().is_ok_and(|bytes| *bytes == file_snapshot_bytes(3)[..]))
}

/// A snapshot received from a peer into a file, saved and synced, is whole after a
/// power loss: the file is synced before the record naming it. The negative control,
/// the same without the file's sync, must lose its bytes under the same power loss
/// (the record survives, the data does not), or this test proves nothing.
#[test]
fn a_synced_snapshot_file_survives_a_power_loss() {
    if !can_mount() {
        return;
    }
    assert_eq!(snapshot_file_after_power_loss(false), Some(true), "the synced snapshot file is whole");
    assert_eq!(
        snapshot_file_after_power_loss(true),
        Some(false),
        "negative control: a record naming an unsynced file must be caught with its bytes gone"
    );
}

/// Env vars that turn [`staged_state_child`] into the writing child; the second says
/// whether it adopts its staged state without syncing it (the negative control).
const STAGED_CHILD_DIR: &str = "LEASEKV_LAZYFS_STAGED_CHILD_DIR";
const STAGED_CHILD_SKIP_SYNC: &str = "LEASEKV_LAZYFS_STAGED_CHILD_SKIP_SYNC";
/// The slot the staged state reflects, and how many keys it holds.
const STAGED_SLOT: u64 = 9;
const STAGED_KEYS: u64 = 300;

fn staged_key(i: u64) -> Vec<u8> {
    format!("/staged/{i:04}").into_bytes()
}

fn staged_value(i: u64) -> Vec<u8> {
    vec![i as u8; 700]
}

/// The child half of [`an_adopted_staged_state_survives_a_power_loss`]: a state with a
/// first key, synced; then a peer's snapshot of another state installed into a staged
/// engine and adopted (as the replica does), and it dies without a destructor.
#[test]
fn staged_state_child() {
    let Some(dir) = std::env::var_os(STAGED_CHILD_DIR) else { return };
    if std::env::var_os(STAGED_CHILD_SKIP_SYNC).is_some() {
        leasekv::kvstore::storage::sync_faults::skip_staged_state_sync();
    }
    let mut storage = SledStorage::open(Path::new(&dir)).unwrap();
    let mut old = StateMachine::open(storage.state_engine())
        .unwrap()
        .map_or_else(|| StateMachine::on_engine(storage.state_engine()).unwrap(), |(machine, _)| machine);
    old.apply(&put(b"/old".to_vec(), vec![1; 10]));
    old.flush_through(2).unwrap();
    old.sync().unwrap();
    let mut peer = StateMachine::new();
    for i in 0..STAGED_KEYS {
        peer.apply(&put(staged_key(i), staged_value(i)));
    }
    let mut stream = Vec::new();
    leasekv::kvstore::state::stream::write(&peer.view_through(STAGED_SLOT).unwrap(), &mut stream).unwrap();
    let staged = StagedSnapshot::install(STAGED_SLOT, &stream[..], storage.stage().unwrap()).unwrap();
    let (_machine, slot, _) = staged.adopt_into(&mut storage).unwrap();
    assert_eq!(slot, STAGED_SLOT);
    std::process::abort();
}

fn put(key: Vec<u8>, value: Vec<u8>) -> Command {
    Command::Put(PutRequest { key, value, lease: 0, prev_kv: false })
}

/// Runs [`staged_state_child`] on a lazy disk, cuts the power if `cut_power` and opens
/// the data dir again: whether its state is the adopted one, whole (`Err` with what was
/// found when it is not), and the files the power loss took writes from.
fn staged_state_after_restart(skip_sync: bool, cut_power: bool) -> (Result<(), String>, Vec<String>) {
    use std::os::unix::process::ExitStatusExt;
    let (_dir, disk, data) = lazy_disk();
    let mut env = vec![(STAGED_CHILD_DIR, data.as_os_str())];
    if skip_sync {
        env.push((STAGED_CHILD_SKIP_SYNC, "1".as_ref()));
    }
    let status = run_child("staged_state_child", &env);
    assert_eq!(status.signal(), Some(libc::SIGABRT), "the child must have adopted and aborted: {status}");
    let undone = if cut_power { disk.power_loss().unwrap().1 } else { Vec::new() };
    disk.power_on();
    let state = || -> Result<(), String> {
        let storage = SledStorage::open(&data).map_err(|e| format!("the data dir does not open: {e}"))?;
        let opened = StateMachine::open(storage.state_engine()).map_err(|e| format!("the state does not open: {e}"))?;
        let (machine, slot) = opened.ok_or("the state engine holds no state")?;
        if slot != STAGED_SLOT {
            return Err(format!("the state reflects slot {slot}, not the adopted {STAGED_SLOT}"));
        }
        for i in 0..STAGED_KEYS {
            if machine.get(&staged_key(i)).map(|kv| kv.value) != Some(staged_value(i)) {
                return Err(format!("key {i} of the adopted state is lost"));
            }
        }
        Ok(())
    };
    (state(), undone)
}

/// A peer's snapshot installed into a staged engine and adopted survives a power loss
/// whole: the staged state is synced before `state.current` names it. The negative
/// control writes the staged state out but adopts it without its `fdatasync`: it must
/// be whole after a plain restart (so the writes did reach the file system) and lost
/// after a power loss, the loss taking writes from the staged state's files, or this
/// test proves nothing.
#[test]
fn an_adopted_staged_state_survives_a_power_loss() {
    if !can_mount() {
        return;
    }
    let (synced, _) = staged_state_after_restart(false, true);
    assert_eq!(synced, Ok(()), "the adopted state is whole after a power loss");
    let (unsynced_no_loss, _) = staged_state_after_restart(true, false);
    assert_eq!(unsynced_no_loss, Ok(()), "the control's state is written out: whole without a power loss");
    let (control, undone) = staged_state_after_restart(true, true);
    assert!(control.is_err(), "negative control: a state adopted unsynced must be caught as lost, got {control:?}");
    assert!(
        undone.iter().any(|file| file.contains("/state-")),
        "the power loss took the staged state's unsynced writes: {undone:?}"
    );
}

/// What the `power-loss` fault found: sled 0.34 logs large B-tree pages to blob files it
/// never syncs, so a power loss left the log pointing at empty blobs and the node could
/// not open its database ("Read corrupted data"). Storage now keeps every page below
/// sled's blob threshold (kvstore/src/storage/pieces.rs); what was synced survives.
#[test]
fn synced_sled_storage_survives_a_power_loss() {
    if !can_mount() {
        return;
    }
    let (_dir, disk, data) = lazy_disk();
    let status = run_child("power_loss_child", &[(CHILD_DIR, data.as_os_str())]);
    assert!(!status.success(), "the child must have aborted");
    let (lost, _) = disk.power_loss().unwrap();
    assert!(lost.bytes > 0, "the unsynced writes were undone");
    disk.power_on();
    let recovered = SledStorage::open(&data).and_then(|mut s| s.recover());
    let recovered = recovered.unwrap_or_else(|e| panic!("the database after a power loss: {e}"));
    for seq in 1..=41 {
        assert_eq!(
            recovered.slots.get(&seq),
            Some(&slot(seq, if seq == 41 { 1_500_000 } else { 40_000 })),
            "slot {seq}"
        );
    }
    assert!(recovered.snapshot == Some(snapshot(7)) || recovered.snapshot == Some(snapshot(8)));
}
