//! The state machine on disk: the records of its engine (`state/layout.rs`,
//! `change_pages.rs`, `size_runs.rs`, the lease table, `machine/durable.rs`), its snapshot
//! formats (`state/snapshot.rs` format 7, `state/stream.rs` format 8) and the backup file
//! (`backup.rs`).
//!
//! One sample state ([`sample_machine`]) is written by the production code and every
//! record kind it leaves in its engine has a golden file of its own ([`pack`]ed key and
//! value pairs). Each kind is decoded with its production decoder record by record
//! (compared with the decoding of the sample's own records), and then all of them together
//! are reopened with [`StateMachine::open`], the production reader of the `mstate` record,
//! and compared with the sample state itself.

use super::{check, dir, pack, unpack, Entries, CURRENT};
use crate::auth::{AuthChange, AuthStore, Permission, PermissionKind};
use crate::command::{
    Alarm, AlarmAction, AlarmKind, Command, Compare, CompareResult, CompareTarget, DeleteRangeRequest, PutRequest,
    RangeRequest, TxnOp, TxnRequest,
};
use crate::engine::{Engine, MemoryEngine, WriteBatch};
use crate::membership::{MemberChange, Membership};
use crate::state::golden_access::{self as access, RecordKind};
use crate::state::{Lease, StateMachine};
use crate::types::{Event, EventKind, KeyRange, KeyValue};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

/// The log slot the sample state is flushed through (its `mstate` record names it).
const APPLIED: u64 = 42;

/// A put of `key`, attached to `lease` (0: none).
fn put(key: &str, value: &str, lease: i64) -> Command {
    Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
}

/// The sample state, on `engine`: every kind of engine record, a compacted history, a
/// named lease with a key, a revoked lease, an alarm, a recorded membership and an auth
/// store with a user and a role. Flushed through [`APPLIED`].
///
/// Its list of lease deaths (keys of a revoked lease not swept yet) is empty: an apply
/// sweeps up to `StateMachine::CLEANUP_PER_APPLY` (1000) dead keys, so a death outlives
/// its revoke only with more keys than that, too many for a small golden file.
fn sample_machine(engine: Arc<dyn Engine>) -> StateMachine {
    let member = super::log::sample_member();
    let reader = || "reader".to_string();
    let commands = [
        Command::ChangeMembers(MemberChange::Seed { members: vec![member] }),
        Command::Barrier { tenure: (1, 1) },
        Command::LeaseGrant { id: 7, name: Some("sessions".into()), ttl: 60 },
        Command::LeaseGrant { id: 8, name: None, ttl: 30 },
        put("a", "1", 7),
        put("b", "2", 0),
        put("b", "3", 0),
        put("c", "4", 0),
        Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single("c"), prev_kv: true }),
        put("d", "5", 8),
        Command::Txn(TxnRequest {
            compare: vec![Compare {
                range: KeyRange::single("b"),
                target: CompareTarget::Value(b"3".to_vec()),
                result: CompareResult::Equal,
            }],
            success: vec![TxnOp::Put(PutRequest {
                key: b"e".to_vec(),
                value: b"6".to_vec(),
                lease: 0,
                prev_kv: false,
            })],
            failure: vec![],
        }),
        Command::Compact { revision: 3 },
        Command::Auth(AuthChange::UserAdd {
            name: "alice".into(),
            password_hash: Some("$h$".into()),
            no_password: false,
        }),
        Command::Auth(AuthChange::RoleAdd { name: reader() }),
        Command::Auth(AuthChange::RoleGrantPermission {
            role: reader(),
            permission: Permission { kind: PermissionKind::Read, key: b"a".to_vec(), range_end: b"\0".to_vec() },
        }),
        Command::Auth(AuthChange::UserGrantRole { user: "alice".into(), role: reader() }),
        Command::Alarm { action: AlarmAction::Raise, member: 1, kind: Some(AlarmKind::NoSpace) },
        Command::LeaseRevoke { id: 8 },
    ];
    let mut machine = StateMachine::on_engine(engine).unwrap();
    for command in &commands {
        let applied = machine.apply(command);
        assert!(applied.result.is_ok(), "the sample's {command:?} failed: {applied:?}");
    }
    machine.flush_through(APPLIED).unwrap();
    machine
}

/// What a reader sees of a state, to compare states that have no `PartialEq`.
#[derive(Debug, PartialEq)]
struct Summary {
    revision: i64,
    digest: u64,
    compacted: i64,
    keys: Vec<KeyValue>,
    history: Vec<Event>,
    leases: Vec<Lease>,
    alarms: Vec<Alarm>,
    membership: Membership,
    auth: AuthStore,
    /// Dead keys not swept yet.
    pending_cleanup: usize,
}

fn summary(machine: &StateMachine) -> Summary {
    let every_key = RangeRequest { range: KeyRange { key: vec![0], range_end: vec![0] }, ..RangeRequest::default() };
    let mut leases: Vec<Lease> = machine.leases().cloned().collect();
    leases.sort_by_key(|l| l.id);
    Summary {
        revision: machine.revision(),
        digest: machine.digest(),
        compacted: machine.compacted_revision(),
        keys: machine.range(&every_key).unwrap().kvs,
        history: machine.events_since(machine.compacted_revision() + 1).unwrap(),
        leases,
        alarms: machine.alarms().copied().collect(),
        membership: machine.membership().clone(),
        auth: machine.auth().clone(),
        pending_cleanup: machine.pending_cleanup(),
    }
}

/// Every record of `engine`, in key order.
fn engine_entries(engine: &dyn Engine) -> Entries {
    engine.scan(&(Bound::Unbounded, Bound::Unbounded), false, usize::MAX).unwrap()
}

/// A memory engine holding `entries`.
fn engine_of(entries: Entries) -> Arc<dyn Engine> {
    let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
    let mut batch = WriteBatch::new();
    for (key, value) in entries {
        batch.put(key, value);
    }
    engine.write(batch).unwrap();
    engine
}

/// A record kind decoded with its production decoder, for comparing.
#[derive(Debug, PartialEq)]
enum Decoded {
    Key(KeyValue),
    History(Vec<Event>),
    SizeRun(access::SizeRun),
    LegacySize((i64, u32, u64)),
    Lease((i64, Option<String>, i64)),
    Attachment((i64, Vec<u8>)),
    /// Decoded through [`StateMachine::open`] (see the module docs); here only its bytes.
    State(Vec<u8>),
    Auth(AuthStore),
}

/// Decodes one engine record of `kind` with its production decoder.
fn decode_record(kind: RecordKind, key: &[u8], value: &[u8]) -> Result<Decoded, String> {
    let e = |e: crate::engine::EngineError| e.to_string();
    Ok(match kind {
        RecordKind::Key => Decoded::Key(access::decode_key(key, value).map_err(e)?),
        RecordKind::History => Decoded::History(access::decode_history(key, value).map_err(e)?),
        RecordKind::SizeRun => Decoded::SizeRun(access::decode_size_run(key, value).map_err(e)?),
        RecordKind::LegacySize => Decoded::LegacySize(access::decode_legacy_size(key, value).map_err(e)?),
        RecordKind::Lease => Decoded::Lease(access::decode_lease(key, value).map_err(e)?),
        RecordKind::Attachment if value.is_empty() => {
            Decoded::Attachment(access::decode_attachment(key).ok_or("not an attachment's key")?)
        }
        RecordKind::Attachment => return Err(format!("an attachment with a value of {} bytes", value.len())),
        RecordKind::State => Decoded::State(value.to_vec()),
        RecordKind::Auth => Decoded::Auth(access::decode_auth(value).map_err(e)?),
    })
}

/// Decodes a [`pack`]ed file of records of `kind`.
fn decode_records(kind: RecordKind, bytes: &[u8]) -> Result<Vec<Decoded>, String> {
    let entries = unpack(bytes)?;
    if entries.is_empty() {
        return Err("no record".into());
    }
    entries.iter().map(|(key, value)| decode_record(kind, key, value)).collect()
}

/// The golden file of the engine records of `kind`.
fn engine_file(kind: RecordKind) -> String {
    format!("state_engine_{kind:?}.bin").to_lowercase()
}

/// The kinds of record the sample state leaves in its engine, in engine key order.
const ENGINE_KINDS: [RecordKind; 7] = [
    RecordKind::Key,
    RecordKind::History,
    RecordKind::SizeRun,
    RecordKind::Lease,
    RecordKind::Attachment,
    RecordKind::State,
    RecordKind::Auth,
];

/// Every kind of record the sample state leaves in its engine: one golden file each, and
/// all of them together reopen as the sample state.
#[test]
fn state_engine_records() {
    let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
    let machine = sample_machine(Arc::clone(&engine));
    let mut by_kind: BTreeMap<RecordKind, Entries> = BTreeMap::new();
    for (key, value) in engine_entries(engine.as_ref()) {
        let kind = access::kind_of(&key)
            .unwrap_or_else(|| panic!("engine key {key:?} is of no known kind: give the new kind a golden file"));
        by_kind.entry(kind).or_default().push((key, value));
    }
    let expected = ENGINE_KINDS;
    assert_eq!(by_kind.keys().copied().collect::<Vec<_>>(), expected, "the sample writes other kinds than expected");
    for (&kind, entries) in &by_kind {
        let sample = decode_records(kind, &pack(entries)).unwrap();
        check(&engine_file(kind), &pack(entries), &sample, |bytes| decode_records(kind, bytes));
    }
    // All kinds together, read back by the production reader of a state engine.
    let mut golden = Vec::new();
    for kind in expected {
        let bytes = std::fs::read(dir(CURRENT).join(engine_file(kind))).unwrap();
        golden.extend(unpack(&bytes).unwrap());
    }
    let (reopened, applied) = StateMachine::open(engine_of(golden)).unwrap().expect("the golden records hold a state");
    assert_eq!(applied, APPLIED);
    assert_eq!(summary(&reopened), summary(&machine));
    assert!(reopened.to_snapshot_bytes() == machine.to_snapshot_bytes(), "the reopened state snapshots differently");
}

/// The state engine records the release before this layout wrote (golden directory 1: key
/// records holding their values, before values were stored once in the history) reopen as
/// the same state; nothing needs converting, and the keys written later store their values
/// once.
#[test]
fn state_engine_records_of_the_release_before_reopen_as_the_same_state() {
    let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
    let machine = sample_machine(Arc::clone(&engine));
    let kinds = ENGINE_KINDS;
    let mut old = Vec::new();
    for kind in kinds {
        let bytes = std::fs::read(dir(1).join(engine_file(kind))).unwrap();
        old.extend(unpack(&bytes).unwrap());
    }
    let old = engine_of(old);
    let (mut reopened, applied) = StateMachine::open(Arc::clone(&old)).unwrap().expect("the old records hold a state");
    assert_eq!(applied, APPLIED);
    assert_eq!(summary(&reopened), summary(&machine));
    assert!(reopened.to_snapshot_bytes() == machine.to_snapshot_bytes(), "the old state snapshots differently");
    // Written again and compacted past its old value: read back from its change.
    reopened.apply(&put("b", "rewritten", 0));
    reopened.apply(&Command::Compact { revision: reopened.revision() });
    reopened.flush_through(APPLIED + 1).unwrap();
    let (again, _) = StateMachine::open(old).unwrap().expect("a state");
    assert_eq!(again.get(b"b").map(|kv| kv.value), Some(b"rewritten".to_vec()));
    assert_eq!(again.get(b"a").map(|kv| kv.value), Some(b"1".to_vec()), "an old record still holds its value");
}

/// Records of earlier layouts that this build still reads: one change a record (history
/// format 1), a size run of such changes (format 1), and a per-change size record.
#[test]
fn state_engine_legacy_records() {
    let kv = |key: &str, value: &str, revision| KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: 2,
        mod_revision: revision,
        version: revision - 1,
        lease: 0,
    };
    let event = Event { kind: EventKind::Put, kv: kv("k", "new", 3), prev_kv: Some(kv("k", "old", 2)) };
    let (key, value) = access::encode_legacy_event(3, 0, &event);
    check("state_engine_history_v1.bin", &pack(&[(key, value)]), &vec![Decoded::History(vec![event])], |bytes| {
        decode_records(RecordKind::History, bytes)
    });

    let run = vec![(2, 0, 40), (3, 0, 41), (3, 1, 7)];
    let (key, value) = access::encode_legacy_run(&run);
    check("state_engine_sizerun_v1.bin", &pack(&[(key, value)]), &vec![Decoded::SizeRun((run, false))], |bytes| {
        decode_records(RecordKind::SizeRun, bytes)
    });

    // No encoder is left for these: the record is the size as a big-endian u64.
    let entry = (access::legacy_size_key(3, 1), 41u64.to_be_bytes().to_vec());
    check("state_engine_legacysize.bin", &pack(&[entry]), &vec![Decoded::LegacySize((3, 1, 41))], |bytes| {
        decode_records(RecordKind::LegacySize, bytes)
    });
}

/// A format 7 snapshot (`StateMachine::to_snapshot_bytes`).
#[test]
fn snapshot_format7() {
    let machine = sample_machine(Arc::new(MemoryEngine::new()));
    let encoded = machine.to_snapshot_bytes();
    let decode = |bytes: &[u8]| {
        let restored = StateMachine::from_snapshot_bytes(bytes).map_err(|e| e.to_string())?;
        Ok((summary(&restored), restored.to_snapshot_bytes()))
    };
    check("snapshot_format7.bin", &encoded, &(summary(&machine), encoded.clone()), decode);
}

/// A format 9 snapshot as a view streams it (`state::stream::write`).
fn format9(machine: &mut StateMachine) -> Vec<u8> {
    let mut out = Vec::new();
    crate::state::stream::write(&machine.view().unwrap(), &mut out).unwrap();
    out
}

#[test]
fn snapshot_format9() {
    let mut machine = sample_machine(Arc::new(MemoryEngine::new()));
    let encoded = format9(&mut machine);
    let decode =
        |bytes: &[u8]| StateMachine::from_snapshot_bytes(bytes).map(|m| summary(&m)).map_err(|e| e.to_string());
    check("snapshot_format9.bin", &encoded, &summary(&machine), decode);
}

/// The format 8 snapshots and backups earlier builds streamed (the golden directories
/// before format 9) still restore the sample's state, whole and frame by frame.
#[test]
fn snapshot_and_backup_format8_still_restore() {
    let machine = sample_machine(Arc::new(MemoryEngine::new()));
    let mut read = 0;
    for older in super::older_dirs() {
        if let Ok(bytes) = std::fs::read(older.join("snapshot_format8.bin")) {
            let whole = StateMachine::from_snapshot_bytes(&bytes).unwrap();
            assert_eq!(summary(&whole), summary(&machine), "{}", older.display());
            let streamed = StateMachine::install_snapshot_stream(&bytes[..], Arc::new(MemoryEngine::new())).unwrap();
            assert_eq!(summary(&streamed), summary(&machine), "{}", older.display());
            read += 1;
        }
        if let Ok(bytes) = std::fs::read(older.join("backup_v1_format8.bin")) {
            assert_eq!(decode_backup(&bytes).unwrap(), summary(&machine), "{}", older.display());
            read += 1;
        }
    }
    assert!(read >= 2, "no format 8 golden file was found");
}

/// Decodes a backup file with `backup::decode`.
fn decode_backup(bytes: &[u8]) -> Result<Summary, String> {
    crate::backup::decode(bytes).map(|m| summary(&m)).map_err(|e| e.to_string())
}

/// The backup file of a state (`backup::encode`, holding a format 7 snapshot).
#[test]
fn backup_with_format7() {
    let machine = sample_machine(Arc::new(MemoryEngine::new()));
    check("backup_v1_format7.bin", &crate::backup::encode(&machine), &summary(&machine), decode_backup);
}

/// The backup file a server streams from a view (`backup::write_file`, holding a format 9
/// snapshot).
#[test]
fn backup_with_format9() {
    let mut machine = sample_machine(Arc::new(MemoryEngine::new()));
    let mut file = tempfile::tempfile().unwrap();
    crate::backup::write_file(&machine.view().unwrap(), &mut file).unwrap();
    let mut encoded = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut encoded).unwrap();
    check("backup_v1_format9.bin", &encoded, &summary(&machine), decode_backup);
}

/// What an etcd snapshot file carries of a state: keys, history, compaction point, leases
/// with names and TTLs, users and roles (not the digest, tenure, membership or alarms: a
/// restore starts a new cluster).
#[derive(Debug, PartialEq)]
struct Carried {
    revision: i64,
    compacted: i64,
    keys: Vec<KeyValue>,
    history: Vec<Event>,
    leases: Vec<(i64, Option<String>, i64)>,
    users: Vec<crate::auth::User>,
    roles: Vec<crate::auth::Role>,
}

fn carried(machine: &StateMachine) -> Carried {
    let full = summary(machine);
    let auth = machine.auth();
    Carried {
        revision: full.revision,
        compacted: full.compacted,
        keys: full.keys,
        history: full.history,
        leases: full.leases.iter().map(|l| (l.id, l.name.clone(), l.ttl)).collect(),
        users: auth.users().into_iter().filter_map(|u| auth.user(u).cloned()).collect(),
        roles: auth.roles().into_iter().filter_map(|r| auth.role(r).cloned()).collect(),
    }
}

/// The backup file a server streams now: etcd's snapshot format
/// (`etcd_snapshot::write_file`), a bbolt database and its SHA-256.
#[test]
fn backup_in_etcd_format() {
    let mut machine = sample_machine(Arc::new(MemoryEngine::new()));
    let mut file = tempfile::tempfile().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    crate::etcd_snapshot::write_file(&machine.view().unwrap(), &mut file, scratch.path()).unwrap();
    let mut encoded = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut encoded).unwrap();
    check("backup_etcd.bin", &encoded, &carried(&machine), |bytes| {
        crate::backup::decode_file(bytes).map(|m| carried(&m)).map_err(|e| e.to_string())
    });
}

/// Bytes appended to a record, as a newer writer's extra last field would be: the records
/// read with `postcard::from_bytes` ignore them, a history page does not.
#[test]
fn state_engine_records_ignore_trailing_bytes_but_pages_do_not() {
    let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
    let machine = sample_machine(Arc::clone(&engine));
    let extra = [0x05, 0x2A];
    let mut entries = engine_entries(engine.as_ref());
    for (key, value) in &mut entries {
        let Some(kind) = access::kind_of(key) else { continue };
        let before = decode_record(kind, key, value).unwrap();
        let mut longer = value.clone();
        longer.extend_from_slice(&extra);
        match kind {
            RecordKind::History => assert!(
                decode_record(kind, key, &longer).is_err_and(|e| e.contains("history page")),
                "a page read bytes appended to its last change as another change"
            ),
            // Compared through the reopened state below.
            RecordKind::State => *value = longer,
            // An attachment has no value to append to.
            RecordKind::Attachment => {}
            _ => {
                assert_eq!(decode_record(kind, key, &longer).unwrap(), before, "{kind:?} with trailing bytes");
                *value = longer;
            }
        }
    }
    let (reopened, _) = StateMachine::open(engine_of(entries)).unwrap().unwrap();
    assert_eq!(summary(&reopened), summary(&machine));
}

/// A format 7 snapshot refuses bytes after its last section; a format 9 snapshot ignores
/// bytes appended inside a frame (after the header's last field).
#[test]
fn snapshot_trailing_bytes() {
    let mut machine = sample_machine(Arc::new(MemoryEngine::new()));
    let mut format7 = machine.to_snapshot_bytes();
    format7.push(0x01);
    let refused = StateMachine::check_snapshot_bytes(&format7).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("trailing"), "format 7 with a trailing byte: {refused:?}");

    // Format 9: the format varint (one byte: 9), then frames of `[length u32 LE][body]`,
    // the header's first.
    let format9_bytes = format9(&mut machine);
    assert_eq!(format9_bytes[0], 9);
    let header_len = u32::from_le_bytes(format9_bytes[1..5].try_into().unwrap()) as usize;
    let mut longer = format9_bytes[..1].to_vec();
    longer.extend_from_slice(&(header_len as u32 + 2).to_le_bytes());
    longer.extend_from_slice(&format9_bytes[5..5 + header_len]);
    longer.extend_from_slice(&[0x05, 0x2A]);
    longer.extend_from_slice(&format9_bytes[5 + header_len..]);
    let restored = StateMachine::from_snapshot_bytes(&longer).unwrap();
    assert_eq!(summary(&restored), summary(&machine));
}
