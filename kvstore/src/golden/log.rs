//! The log segment files (`storage/segments/record.rs`, format version
//! [`record::FORMAT_VERSION`]): the header, and each kind of framed [`Record`], with a slot
//! that holds every kind of [`Command`].

use super::check;
use crate::auth::{AuthChange, Permission, PermissionKind};
use crate::command::{
    AlarmAction, AlarmKind, Authorized, Command, Compare, CompareResult, CompareTarget, DeleteRangeRequest, Keep,
    PutRequest, RangeRequest, TxnOp, TxnRequest,
};
use crate::log::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId};
use crate::membership::{Member, MemberChange};
use crate::storage::segments::record::{self, HeaderCheck, Record, RecordRef};
use crate::types::KeyRange;
use leasekv_lease::NodeId;
use std::collections::BTreeSet;

/// The segment number the sample header names.
const SAMPLE_SEQ: u64 = 7;

/// The file of segment-log record kinds, with the record format version in its name.
fn file(kind: &str) -> String {
    format!("segment_v{}_{kind}.bin", record::FORMAT_VERSION)
}

/// A small put; it asks for the previous key-value when it attaches no lease, so that the
/// sample holds both values of the flag.
fn put(key: &str, value: &str, lease: i64) -> PutRequest {
    PutRequest { key: key.into(), value: value.into(), lease, prev_kv: lease == 0 }
}

/// A Txn using every [`TxnOp`], [`CompareTarget`] and [`CompareResult`], with a nested Txn.
fn sample_txn() -> TxnRequest {
    let range = RangeRequest { range: KeyRange::prefix(b"r/"), limit: 10, count_only: false, keys_only: true };
    let compare = |target, result| Compare { range: KeyRange::single("c"), target, result };
    let nested = TxnRequest {
        compare: vec![compare(CompareTarget::Lease(7), CompareResult::NotEqual)],
        success: vec![TxnOp::Put(put("n", "nested", 0))],
        failure: vec![],
    };
    TxnRequest {
        compare: vec![
            compare(CompareTarget::Value(b"v".to_vec()), CompareResult::Equal),
            compare(CompareTarget::Version(2), CompareResult::Greater),
            compare(CompareTarget::CreateRevision(3), CompareResult::Less),
            compare(CompareTarget::ModRevision(4), CompareResult::NotEqual),
            compare(CompareTarget::Lease(5), CompareResult::Equal),
        ],
        success: vec![
            TxnOp::Range(range.clone()),
            TxnOp::Put(put("t", "1", 0)),
            TxnOp::DeleteRange(DeleteRangeRequest { range: KeyRange::single("d"), prev_kv: true }),
            TxnOp::PutKeeping(put("t", "", 0), Keep { value: true, lease: true }),
        ],
        failure: vec![TxnOp::Txn(nested), TxnOp::RangeAt(range, 9)],
    }
}

/// The member the samples seed a cluster with.
pub(super) fn sample_member() -> Member {
    Member {
        id: NodeId(1),
        name: "n1".into(),
        peer_urls: vec!["http://10.0.0.1:2380".into()],
        client_urls: vec!["http://10.0.0.1:2379".into()],
        learner: false,
    }
}

/// One of every [`MemberChange`] production builds know (not the negative control's
/// `AddVotersAtOnce`, which only test builds have, last so that it moves no other
/// variant's number: [`a_test_build_numbers_member_changes_as_production_does`]).
fn sample_member_changes() -> Vec<MemberChange> {
    let member = sample_member();
    vec![
        MemberChange::Seed { members: vec![member] },
        MemberChange::Add { peer_urls: vec!["http://10.0.0.4:2380".into()], learner: true },
        MemberChange::Promote { id: NodeId(4) },
        MemberChange::Remove { id: NodeId(3) },
        MemberChange::Update { id: NodeId(2), peer_urls: vec!["http://10.0.0.2:2381".into()] },
        MemberChange::Publish { id: NodeId(1), name: "n1".into(), client_urls: vec!["http://10.0.0.1:2379".into()] },
    ]
}

/// One of every [`AuthChange`] (and every [`PermissionKind`]).
fn sample_auth_changes() -> Vec<AuthChange> {
    let permission = |kind, key: &str| Permission { kind, key: key.into(), range_end: b"\0".to_vec() };
    let role = || "reader".to_string();
    vec![
        AuthChange::Enable { token_secret: vec![0xA5; 8] },
        AuthChange::Disable,
        AuthChange::UserAdd { name: "alice".into(), password_hash: Some("$hash$".into()), no_password: false },
        AuthChange::UserDelete { name: "bob".into() },
        AuthChange::UserChangePassword { name: "alice".into(), password_hash: None },
        AuthChange::UserGrantRole { user: "alice".into(), role: role() },
        AuthChange::UserRevokeRole { user: "alice".into(), role: role() },
        AuthChange::RoleAdd { name: role() },
        AuthChange::RoleDelete { name: "old".into() },
        AuthChange::RoleGrantPermission { role: role(), permission: permission(PermissionKind::Read, "a") },
        AuthChange::RoleGrantPermission { role: role(), permission: permission(PermissionKind::Write, "b") },
        AuthChange::RoleGrantPermission { role: role(), permission: permission(PermissionKind::ReadWrite, "c") },
        AuthChange::RoleRevokePermission { role: role(), key: b"a".to_vec(), range_end: b"\0".to_vec() },
    ]
}

/// Every kind of [`Command`], with every variant of the enums inside them. The order of
/// variants is their encoding, so each one must be in a golden file.
pub(super) fn sample_commands() -> Vec<Command> {
    let mut commands = vec![
        Command::Put(put("k", "v", 7)),
        Command::DeleteRange(DeleteRangeRequest {
            range: KeyRange { key: b"a".into(), range_end: b"b".into() },
            prev_kv: false,
        }),
        Command::Txn(sample_txn()),
        Command::LeaseGrant { id: 7, name: Some("lock".into()), ttl: 30 },
        Command::LeaseRevoke { id: 7 },
        Command::LeaseExpire { ids: vec![7, 8], tenure: (4, 2) },
        Command::Barrier { tenure: (4, 2) },
        Command::Compact { revision: 12 },
        Command::PutKeeping(put("k", "", 0), Keep { value: true, lease: false }),
        Command::Alarm { action: AlarmAction::List, member: 0, kind: None },
        Command::Alarm { action: AlarmAction::Raise, member: 1, kind: Some(AlarmKind::NoSpace) },
        Command::Alarm { action: AlarmAction::Disarm, member: 1, kind: Some(AlarmKind::Corrupt) },
    ];
    commands.extend(sample_member_changes().into_iter().map(Command::ChangeMembers));
    commands.extend(sample_auth_changes().into_iter().map(Command::Auth));
    commands.push(Command::Authorized(Authorized {
        user: "alice".into(),
        auth_revision: 5,
        command: Box::new(Command::Put(put("k", "w", 0))),
    }));
    commands
}

/// An accepted, chosen slot whose batch holds [`sample_commands`].
pub(super) fn sample_slot() -> AcceptedSlot {
    let proposals = sample_commands()
        .into_iter()
        .enumerate()
        .map(|(seq, command)| Proposal { id: ProposalId { node: NodeId(2), incarnation: 3, seq: seq as u64 }, command })
        .collect();
    AcceptedSlot { ballot: LogBallot { round: 4, node: NodeId(2) }, entry: Entry { proposals }, chosen: true }
}

/// The index of `command`'s variant. The match has no wildcard, so that a new variant does
/// not compile until it is given a number here, and then [`sample_covers_every_variant`]
/// fails until the sample holds it.
fn command_variant(command: &Command) -> usize {
    match command {
        Command::Put(_) => 0,
        Command::DeleteRange(_) => 1,
        Command::Txn(_) => 2,
        Command::LeaseGrant { .. } => 3,
        Command::LeaseRevoke { .. } => 4,
        Command::LeaseExpire { .. } => 5,
        Command::Barrier { .. } => 6,
        Command::Compact { .. } => 7,
        Command::PutKeeping(..) => 8,
        Command::Alarm { .. } => 9,
        Command::ChangeMembers(_) => 10,
        Command::Auth(_) => 11,
        Command::Authorized(_) => 12,
    }
}

/// As [`command_variant`], for [`MemberChange`].
fn member_change_variant(change: &MemberChange) -> usize {
    match change {
        MemberChange::Seed { .. } => 0,
        MemberChange::Add { .. } => 1,
        MemberChange::Promote { .. } => 2,
        MemberChange::Remove { .. } => 3,
        MemberChange::Update { .. } => 4,
        MemberChange::Publish { .. } => 5,
        #[cfg(feature = "negative-controls")]
        MemberChange::AddVotersAtOnce { .. } => 100,
    }
}

/// As [`command_variant`], for [`AuthChange`].
fn auth_change_variant(change: &AuthChange) -> usize {
    match change {
        AuthChange::Enable { .. } => 0,
        AuthChange::Disable => 1,
        AuthChange::UserAdd { .. } => 2,
        AuthChange::UserDelete { .. } => 3,
        AuthChange::UserChangePassword { .. } => 4,
        AuthChange::UserGrantRole { .. } => 5,
        AuthChange::UserRevokeRole { .. } => 6,
        AuthChange::RoleAdd { .. } => 7,
        AuthChange::RoleDelete { .. } => 8,
        AuthChange::RoleGrantPermission { .. } => 9,
        AuthChange::RoleRevokePermission { .. } => 10,
    }
}

/// As [`command_variant`], for [`TxnOp`].
fn txn_op_variant(op: &TxnOp) -> usize {
    match op {
        TxnOp::Range(_) => 0,
        TxnOp::Put(_) => 1,
        TxnOp::DeleteRange(_) => 2,
        TxnOp::PutKeeping(..) => 3,
        TxnOp::Txn(_) => 4,
        TxnOp::RangeAt(..) => 5,
    }
}

/// As [`command_variant`], for [`CompareTarget`].
fn compare_target_variant(target: &CompareTarget) -> usize {
    match target {
        CompareTarget::Value(_) => 0,
        CompareTarget::Version(_) => 1,
        CompareTarget::CreateRevision(_) => 2,
        CompareTarget::ModRevision(_) => 3,
        CompareTarget::Lease(_) => 4,
    }
}

#[test]
fn sample_covers_every_variant() {
    let commands = sample_commands();
    let seen = |indexes: BTreeSet<usize>, count: usize, what: &str| {
        assert_eq!(indexes, (0..count).collect(), "the sample slot misses a variant of {what}: add it");
    };
    seen(commands.iter().map(command_variant).collect(), 13, "Command");
    let members = commands.iter().filter_map(|c| match c {
        Command::ChangeMembers(change) => Some(member_change_variant(change)),
        _ => None,
    });
    seen(members.collect(), 6, "MemberChange");
    let auth = commands.iter().filter_map(|c| match c {
        Command::Auth(change) => Some(auth_change_variant(change)),
        _ => None,
    });
    seen(auth.collect(), 11, "AuthChange");
    let txn = sample_txn();
    seen(txn.success.iter().chain(&txn.failure).map(txn_op_variant).collect(), 6, "TxnOp");
    seen(txn.compare.iter().map(|c| compare_target_variant(&c.target)).collect(), 5, "CompareTarget");
}

/// postcard writes a variant's index. `MemberChange::AddVotersAtOnce` exists only with the
/// `negative-controls` feature (every test build has it), and sat before `Publish` until
/// this test: a test build wrote `Publish` as 6, a production build as 5, so neither read
/// the other's log. It is last now; this keeps it there.
#[test]
fn a_test_build_numbers_member_changes_as_production_does() {
    let publish = MemberChange::Publish { id: NodeId(1), name: "n1".into(), client_urls: vec![] };
    assert_eq!(postcard::to_stdvec(&publish).expect("encodes")[0], 5);
}

/// The segment header of segment [`SAMPLE_SEQ`]: decoding checks it and gives the segment
/// number back.
#[test]
fn segment_header() {
    let decode = |bytes: &[u8]| -> Result<u64, String> {
        let seq = u64::from_le_bytes(bytes.get(12..20).ok_or("too short")?.try_into().map_err(|_| "too short")?);
        match record::check_header(bytes, seq) {
            HeaderCheck::Valid => Ok(seq),
            other => Err(format!("{other:?}")),
        }
    };
    check(&file("header"), &record::header(SAMPLE_SEQ), &SAMPLE_SEQ, decode);
}

/// Encodes one record as the segment log appends it.
fn framed(record: &RecordRef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    record::append(&mut out, record).unwrap();
    out
}

/// Decodes one framed record, which must fill `bytes`.
fn read_one(bytes: &[u8]) -> Result<Record, String> {
    let (record, len) = record::read(bytes).map_err(|e| format!("{e:?}"))?;
    match len == bytes.len() {
        true => Ok(record),
        false => Err(format!("{} bytes after the record", bytes.len() - len)),
    }
}

#[test]
fn segment_promise() {
    let ballot = LogBallot { round: 9, node: NodeId(3) };
    check(&file("promise"), &framed(&RecordRef::Promise(ballot)), &Record::Promise(ballot), read_one);
}

#[test]
fn segment_slot_with_every_command() {
    let slot = sample_slot();
    check(&file("slot"), &framed(&RecordRef::Slot(41, &slot)), &Record::Slot(41, slot.clone()), read_one);
}

#[test]
fn segment_commit() {
    check(&file("commit"), &framed(&RecordRef::Commit(40)), &Record::Commit(40), read_one);
}

#[test]
fn segment_removed_through() {
    check(&file("removed_through"), &framed(&RecordRef::RemovedThrough(30)), &Record::RemovedThrough(30), read_one);
}

/// A newer writer's field appended to a record, framed with a valid length and CRC: the
/// segment reader skips it (see the module docs of [`super`]).
#[test]
fn segment_record_ignores_trailing_bytes() {
    let mut payload = postcard::to_stdvec(&RecordRef::Commit(40)).unwrap();
    payload.push(0x01);
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len);
    crc.update(&payload);
    let mut bytes = len.to_vec();
    bytes.extend_from_slice(&crc.finalize().to_le_bytes());
    bytes.extend_from_slice(&payload);
    match record::read(&bytes) {
        Ok((Record::Commit(40), read)) => assert_eq!(read, bytes.len()),
        other => panic!("a record with a trailing field read as {other:?}"),
    }
}
