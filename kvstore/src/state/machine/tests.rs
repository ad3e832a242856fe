//! The state machine's rules, one test per rule, plus a property test of determinism across
//! snapshots.

use super::*;
use crate::command::{Compare, CompareResult, CompareTarget, Keep, TxnOp, TxnOpResponse, TxnRequest, TxnResponse};
use crate::types::{EventKind, KeyRange};
use proptest::prelude::*;

fn put_cmd(key: &str, value: &str, lease: LeaseId) -> Command {
    Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: true })
}

fn del_cmd(range: KeyRange) -> Command {
    Command::DeleteRange(DeleteRangeRequest { range, prev_kv: true })
}

fn grant(id: LeaseId, name: Option<&str>) -> Command {
    Command::LeaseGrant { id, name: name.map(str::to_string), ttl: 10 }
}

fn ok(sm: &mut StateMachine, command: &Command) -> CommandResponse {
    let applied = sm.apply(command);
    assert_eq!(applied.revision, sm.revision());
    applied.result.unwrap_or_else(|e| panic!("{command:?} failed: {e}"))
}

fn fails(sm: &mut StateMachine, command: &Command) -> KvError {
    let applied = sm.apply(command);
    assert_eq!(applied.revision, sm.revision());
    applied.result.expect_err("command should fail")
}

fn all(sm: &StateMachine) -> RangeResponse {
    sm.range(&RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() }).unwrap()
}

fn lease_keys(sm: &StateMachine, id: LeaseId) -> Vec<&[u8]> {
    sm.lease(id).unwrap().keys.iter().collect()
}

/// Everything observable except the digest, for "nothing changed" checks.
fn observable(sm: &StateMachine) -> (Revision, RangeResponse, Vec<Lease>) {
    (sm.revision(), all(sm), sm.leases().cloned().collect())
}

fn txn(compare: Vec<Compare>, success: Vec<TxnOp>, failure: Vec<TxnOp>) -> Command {
    Command::Txn(TxnRequest { compare, success, failure })
}

fn t_put(key: &str, value: &str, lease: LeaseId) -> TxnOp {
    TxnOp::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
}

fn t_get(range: KeyRange) -> TxnOp {
    TxnOp::Range(RangeRequest { range, ..Default::default() })
}

fn t_del(range: KeyRange) -> TxnOp {
    TxnOp::DeleteRange(DeleteRangeRequest { range, prev_kv: false })
}

fn version_is(key: &str, v: i64) -> Compare {
    Compare { range: KeyRange::single(key), target: CompareTarget::Version(v), result: CompareResult::Equal }
}

#[test]
fn starts_empty_at_revision_one() {
    let sm = StateMachine::new();
    assert_eq!((sm.revision(), sm.key_count(), sm.lease_count()), (1, 0, 0));
    assert_eq!(StateMachine::default().revision(), 1);
}

#[test]
fn put_revision_version_and_create_revision() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", 0));
    let kv = sm.get(b"a").unwrap().clone();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 2, 1));
    ok(&mut sm, &put_cmd("b", "x", 0));
    let CommandResponse::Put(r) = ok(&mut sm, &put_cmd("a", "2", 0)) else { panic!() };
    assert_eq!(r.prev_kv, Some(kv));
    let kv = sm.get(b"a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version, kv.value.as_slice()), (2, 4, 2, &b"2"[..]));
    // Delete and recreate: a new life for the key.
    ok(&mut sm, &del_cmd(KeyRange::single("a")));
    assert_eq!(sm.revision(), 5);
    ok(&mut sm, &put_cmd("a", "3", 0));
    let kv = sm.get(b"a").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (6, 6, 1));
    // prev_kv is only returned when asked for.
    let quiet = Command::Put(PutRequest { key: "a".into(), value: "4".into(), lease: 0, prev_kv: false });
    assert_eq!(ok(&mut sm, &quiet), CommandResponse::Put(PutResponse { prev_kv: None }));
}

#[test]
fn commands_that_change_nothing_keep_the_revision() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", 0));
    let before = sm.revision();
    let CommandResponse::DeleteRange(r) = ok(&mut sm, &del_cmd(KeyRange::prefix("zz"))) else { panic!() };
    assert_eq!(r.deleted, 0);
    ok(&mut sm, &Command::Barrier { tenure: (1, 1) });
    ok(&mut sm, &grant(7, None));
    ok(&mut sm, &txn(vec![], vec![t_get(KeyRange::single("a"))], vec![]));
    ok(&mut sm, &txn(vec![], vec![t_del(KeyRange::single("nope"))], vec![]));
    ok(&mut sm, &Command::LeaseRevoke { id: 7 });
    ok(&mut sm, &Command::LeaseExpire { ids: vec![1, 2], tenure: (1, 1) });
    assert_eq!(sm.revision(), before);
}

#[test]
fn delete_single_range_and_prefix() {
    let mut sm = StateMachine::new();
    for k in ["a", "b", "ba", "bb", "c", "d"] {
        ok(&mut sm, &put_cmd(k, k, 0));
    }
    let CommandResponse::DeleteRange(r) = ok(&mut sm, &del_cmd(KeyRange::prefix("b"))) else { panic!() };
    assert_eq!(r.deleted, 3);
    let deleted: Vec<&[u8]> = r.prev_kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(deleted, vec![&b"b"[..], b"ba", b"bb"]);
    assert_eq!(sm.revision(), 8);
    let quiet = Command::DeleteRange(DeleteRangeRequest { range: KeyRange::between("a", "c"), prev_kv: false });
    assert_eq!(ok(&mut sm, &quiet), CommandResponse::DeleteRange(DeleteRangeResponse { deleted: 1, prev_kvs: vec![] }));
    ok(&mut sm, &del_cmd(KeyRange::between("c", vec![0])));
    assert_eq!((sm.key_count(), sm.revision()), (0, 10));
    assert!(matches!(fails(&mut sm, &del_cmd(KeyRange::between("b", "a"))), KvError::InvalidRange { .. }));
}

#[test]
fn lease_attach_move_and_detach() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(1, None));
    ok(&mut sm, &grant(2, None));
    ok(&mut sm, &put_cmd("k", "v", 1));
    assert_eq!(lease_keys(&sm, 1), vec![b"k"]);
    ok(&mut sm, &put_cmd("k", "v", 2));
    assert!(lease_keys(&sm, 1).is_empty());
    assert_eq!(lease_keys(&sm, 2), vec![b"k"]);
    assert_eq!(sm.get(b"k").unwrap().lease, 2);
    ok(&mut sm, &put_cmd("k", "v", NO_LEASE));
    assert!(lease_keys(&sm, 2).is_empty());
    assert_eq!(sm.get(b"k").unwrap().lease, NO_LEASE);
    // Deleting a key detaches it too.
    ok(&mut sm, &put_cmd("k", "v", 1));
    ok(&mut sm, &del_cmd(KeyRange::single("k")));
    assert!(lease_keys(&sm, 1).is_empty());
}

#[test]
fn put_with_unknown_lease_changes_nothing() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("k", "v", 0));
    let before = observable(&sm);
    assert_eq!(fails(&mut sm, &put_cmd("k", "w", 99)), KvError::LeaseNotFound(99));
    assert_eq!(fails(&mut sm, &put_cmd("new", "w", 99)), KvError::LeaseNotFound(99));
    assert_eq!(observable(&sm), before);
}

#[test]
fn txn_compares_pick_the_branch() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", 0));
    let cas = |v| txn(vec![version_is("a", v)], vec![t_put("a", "new", 0)], vec![t_get(KeyRange::single("a"))]);
    let CommandResponse::Txn(r) = ok(&mut sm, &cas(5)) else { panic!() };
    assert!(!r.succeeded);
    let TxnOpResponse::Range(read) = &r.responses[0] else { panic!() };
    assert_eq!(read.kvs[0].value, b"1");
    let CommandResponse::Txn(r) = ok(&mut sm, &cas(1)) else { panic!() };
    assert!(r.succeeded);
    assert_eq!(sm.get(b"a").unwrap().value, b"new");
    // Create-if-absent: a missing key has version 0 and no value.
    let create = txn(vec![version_is("b", 0)], vec![t_put("b", "1", 0)], vec![]);
    assert!(matches!(ok(&mut sm, &create), CommandResponse::Txn(TxnResponse { succeeded: true, .. })));
    assert!(matches!(ok(&mut sm, &create), CommandResponse::Txn(TxnResponse { succeeded: false, .. })));
    let missing_value = Compare {
        range: KeyRange::single("zz"),
        target: CompareTarget::Value(Vec::new()),
        result: CompareResult::NotEqual,
    };
    assert!(matches!(
        ok(&mut sm, &txn(vec![missing_value], vec![], vec![])),
        CommandResponse::Txn(TxnResponse { succeeded: false, .. })
    ));
    // A range compare must hold for every key in it.
    let every = |v| Compare {
        range: KeyRange::prefix(""),
        target: CompareTarget::CreateRevision(v),
        result: CompareResult::Greater,
    };
    let mut all_created_after = |v| match ok(&mut sm, &txn(vec![every(v)], vec![], vec![])) {
        CommandResponse::Txn(r) => r.succeeded,
        _ => panic!(),
    };
    assert!(all_created_after(1));
    assert!(!all_created_after(2)); // "a" was created at revision 2
}

#[test]
fn txn_reads_its_own_writes_and_writes_share_one_revision() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("gone", "x", 0));
    let command = txn(
        vec![],
        vec![
            t_put("a", "1", 0),
            t_get(KeyRange::single("a")),
            t_put("b", "2", 0),
            t_del(KeyRange::single("gone")),
            t_get(KeyRange::prefix("")),
        ],
        vec![],
    );
    let CommandResponse::Txn(r) = ok(&mut sm, &command) else { panic!() };
    assert_eq!(sm.revision(), 3);
    let TxnOpResponse::Range(first) = &r.responses[1] else { panic!() };
    assert_eq!((first.kvs[0].value.as_slice(), first.kvs[0].mod_revision), (&b"1"[..], 3));
    let TxnOpResponse::Range(last) = &r.responses[4] else { panic!() };
    let keys: Vec<&[u8]> = last.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, vec![&b"a"[..], b"b"]);
    assert!(last.kvs.iter().all(|kv| kv.mod_revision == 3 && kv.create_revision == 3));
    assert!(matches!(r.responses[3], TxnOpResponse::DeleteRange(DeleteRangeResponse { deleted: 1, .. })));
}

#[test]
fn failed_txn_changes_nothing() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(1, None));
    ok(&mut sm, &put_cmd("a", "1", 1));
    let before = observable(&sm);
    let bad_lease = txn(vec![], vec![t_put("a", "2", 0), t_del(KeyRange::single("a")), t_put("b", "1", 42)], vec![]);
    assert_eq!(fails(&mut sm, &bad_lease), KvError::LeaseNotFound(42));
    let bad_range = txn(
        vec![],
        vec![t_put("a", "2", 0)],
        vec![TxnOp::Range(RangeRequest { range: KeyRange::between("z", "a"), ..Default::default() })],
    );
    assert!(matches!(fails(&mut sm, &bad_range), KvError::InvalidRange { .. }));
    assert_eq!(observable(&sm), before);
    // A branch's leases are checked only when that branch runs.
    let ok_txn = txn(vec![], vec![t_put("a", "2", 0)], vec![t_put("b", "1", 42)]);
    ok(&mut sm, &ok_txn);
    assert_eq!(sm.get(b"a").unwrap().value, b"2");
    assert!(lease_keys(&sm, 1).is_empty());
}

#[test]
fn revoke_deletes_many_keys_in_one_revision() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(5, Some("svc")));
    ok(&mut sm, &put_cmd("keep", "x", 0));
    for i in 0..1000 {
        ok(&mut sm, &put_cmd(&format!("k{i:04}"), "v", 5));
    }
    let before = sm.revision();
    assert_eq!(ok(&mut sm, &Command::LeaseRevoke { id: 5 }), CommandResponse::LeaseRevoke { deleted: 1000 });
    assert_eq!(sm.revision(), before + 1);
    assert_eq!((sm.key_count(), sm.lease_count()), (1, 0));
    assert_eq!(sm.lease_id_by_name("svc"), None);
    assert_eq!(fails(&mut sm, &Command::LeaseRevoke { id: 5 }), KvError::LeaseNotFound(5));
}

#[test]
fn expire_deletes_live_leases_in_one_revision_and_skips_gone_ones() {
    let mut sm = StateMachine::new();
    for id in [1, 2, 3] {
        ok(&mut sm, &grant(id, None));
        ok(&mut sm, &put_cmd(&format!("k{id}"), "v", id));
        ok(&mut sm, &put_cmd(&format!("j{id}"), "v", id));
    }
    ok(&mut sm, &Command::LeaseRevoke { id: 2 });
    let before = sm.revision();
    let r = ok(&mut sm, &Command::LeaseExpire { ids: vec![3, 2, 1, 3, 77], tenure: (0, 0) });
    assert_eq!(r, CommandResponse::LeaseExpire { expired: vec![3, 1], deleted: 4 });
    assert_eq!((sm.revision(), sm.key_count(), sm.lease_count()), (before + 1, 0, 0));
}

#[test]
fn lease_names_are_unique_among_live_leases_and_reusable() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(1, Some("master")));
    assert_eq!(sm.lease_id_by_name("master"), Some(1));
    let e = fails(&mut sm, &grant(2, Some("master")));
    assert_eq!(e, KvError::LeaseNameTaken { name: "master".into(), holder: 1 });
    assert_eq!(e.to_string(), "etcdserver: lease name \"master\" is already taken by lease 1");
    assert_eq!(sm.lease(2), None);
    ok(&mut sm, &Command::LeaseRevoke { id: 1 });
    ok(&mut sm, &grant(2, Some("master")));
    assert_eq!(sm.lease_id_by_name("master"), Some(2));
    assert_eq!(sm.lease(2).unwrap().name.as_deref(), Some("master"));
}

#[test]
fn grant_errors() {
    let mut sm = StateMachine::new();
    let g = |id, name: Option<&str>, ttl| Command::LeaseGrant { id, name: name.map(str::to_string), ttl };
    assert_eq!(fails(&mut sm, &g(1, None, 0)), KvError::InvalidTtl(0));
    assert_eq!(fails(&mut sm, &g(-1, None, 5)), KvError::InvalidLeaseId(-1));
    assert!(matches!(fails(&mut sm, &g(1, Some(""), 5)), KvError::InvalidLeaseName(_)));
    assert!(matches!(fails(&mut sm, &g(1, Some(&"n".repeat(257)), 5)), KvError::InvalidLeaseName(_)));
    ok(&mut sm, &g(1, Some(&"n".repeat(256)), 5));
    assert_eq!(fails(&mut sm, &g(1, None, 5)), KvError::LeaseExists(1));
    assert_eq!(ok(&mut sm, &g(9, None, 30)), CommandResponse::LeaseGrant(LeaseGrantResponse { id: 9, ttl: 30 }));
}

#[test]
fn chosen_ids_are_deterministic() {
    let commands =
        [grant(0, None), put_cmd("a", "1", 0), grant(0, Some("x")), grant(0, None), Command::LeaseRevoke { id: 1 }];
    let run = || {
        let mut sm = StateMachine::new();
        let results: Vec<Applied> = commands.iter().map(|c| sm.apply(c)).collect();
        (results, sm.digest())
    };
    let (a, digest_a) = run();
    let (b, digest_b) = run();
    assert_eq!(a, b);
    assert_eq!(digest_a, digest_b);
    let ids: Vec<LeaseId> = a
        .iter()
        .filter_map(|x| match &x.result {
            Ok(CommandResponse::LeaseGrant(g)) => Some(g.id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.iter().all(|&id| id > 0));
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
}

#[test]
fn digest_tracks_history() {
    let mut a = StateMachine::new();
    let mut b = StateMachine::new();
    assert_eq!(a.digest(), b.digest());
    a.apply(&put_cmd("k", "1", 0));
    assert_ne!(a.digest(), b.digest());
    b.apply(&put_cmd("k", "1", 0));
    assert_eq!(a.digest(), b.digest());
    // A refused command is history too.
    a.apply(&Command::LeaseRevoke { id: 3 });
    assert_ne!(a.digest(), b.digest());
}

#[test]
fn snapshot_round_trip() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(1, Some("svc")));
    ok(&mut sm, &grant(0, None));
    for i in 0..50 {
        ok(&mut sm, &put_cmd(&format!("k{i}"), &format!("v{i}"), if i % 3 == 0 { 1 } else { 0 }));
    }
    ok(&mut sm, &del_cmd(KeyRange::single("k4")));
    let restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    assert_eq!(restored.digest(), sm.digest());
    assert_eq!(observable(&restored), observable(&sm));
    assert_eq!(restored.lease_id_by_name("svc"), Some(1));
    // The id counter came along: both pick the same next id.
    let (mut a, mut b) = (sm.clone(), restored);
    assert_eq!(a.apply(&grant(0, None)), b.apply(&grant(0, None)));
    assert_eq!(a.digest(), b.digest());
    let empty = StateMachine::from_snapshot_bytes(&StateMachine::new().to_snapshot_bytes()).unwrap();
    assert_eq!(observable(&empty), observable(&StateMachine::new()));
}

#[test]
fn corrupt_snapshots_are_errors() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(1, None));
    ok(&mut sm, &put_cmd("a", "1", 1));
    ok(&mut sm, &put_cmd("b", "2", 0));
    let bytes = sm.to_snapshot_bytes();
    let err = StateMachine::from_snapshot_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(err.to_string().starts_with("state machine snapshot is corrupt: cannot decode"), "{err}");
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(StateMachine::from_snapshot_bytes(&longer).unwrap_err().to_string().contains("trailing"));
    let mut wrong_format = bytes.clone();
    wrong_format[0] = 10;
    assert!(StateMachine::from_snapshot_bytes(&wrong_format)
        .unwrap_err()
        .to_string()
        .contains("unsupported format 10"));
    assert!(StateMachine::from_snapshot_bytes(&[]).is_err());
    assert!(StateMachine::from_snapshot_bytes(&[0xff; 64]).is_err());
    // Every single-byte corruption is either refused or decodes without panicking.
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        let _ = StateMachine::from_snapshot_bytes(&b);
    }
}

#[test]
fn range_reads_are_checked() {
    let sm = StateMachine::new();
    let bad = RangeRequest { range: KeyRange::between("b", "a"), ..Default::default() };
    assert!(matches!(sm.range(&bad), Err(KvError::InvalidRange { .. })));
}

/// Random commands over a small key and lease space, so that they collide often.
fn arb_command() -> impl Strategy<Value = Command> {
    let key = prop::sample::select(vec!["a", "b", "c", "d", "e", "f", "g"]).prop_map(str::to_string);
    let lease = prop::sample::select(vec![0i64, 1, 1, 2, 3]);
    let range = prop_oneof![
        key.clone().prop_map(KeyRange::single),
        (key.clone(), key.clone()).prop_map(|(a, b)| if a <= b {
            KeyRange::between(a, b)
        } else {
            KeyRange::between(b, a)
        }),
        // Occasionally inverted: refused, identically on every replica.
        (key.clone(), key.clone()).prop_map(|(a, b)| KeyRange::between(a, b)),
        key.clone().prop_map(|k| KeyRange::between(k, vec![0])),
    ];
    let put = (key.clone(), "[xy]{0,3}", lease.clone(), any::<bool>())
        .prop_map(|(key, value, lease, prev_kv)| PutRequest { key: key.into(), value: value.into(), lease, prev_kv });
    let target = prop_oneof![
        "[xy]{0,2}".prop_map(|v| CompareTarget::Value(v.into())),
        (0i64..4).prop_map(CompareTarget::Version),
        (0i64..20).prop_map(CompareTarget::ModRevision),
        (0i64..20).prop_map(CompareTarget::CreateRevision),
        lease.clone().prop_map(CompareTarget::Lease),
    ];
    let result = prop::sample::select(vec![
        CompareResult::Equal,
        CompareResult::NotEqual,
        CompareResult::Greater,
        CompareResult::Less,
    ]);
    let compare = (range.clone(), target, result).prop_map(|(range, target, result)| Compare { range, target, result });
    // Keeps the value or the lease (or both) of a key that may not exist.
    let keeping = (put.clone(), any::<bool>(), any::<bool>()).prop_map(|(mut p, value, lease)| {
        let keep = Keep { value, lease: lease || !value };
        if keep.value {
            p.value.clear();
        }
        if keep.lease {
            p.lease = NO_LEASE;
        }
        (p, keep)
    });
    let simple_op = prop_oneof![
        put.clone().prop_map(TxnOp::Put),
        keeping.clone().prop_map(|(p, keep)| TxnOp::PutKeeping(p, keep)),
        range.clone().prop_map(|range| TxnOp::Range(RangeRequest { range, limit: 2, ..Default::default() })),
        (range.clone(), any::<bool>())
            .prop_map(|(range, prev_kv)| TxnOp::DeleteRange(DeleteRangeRequest { range, prev_kv })),
    ];
    let nested = (
        prop::collection::vec(compare.clone(), 0..2),
        prop::collection::vec(simple_op.clone(), 0..3),
        prop::collection::vec(simple_op.clone(), 0..3),
    )
        .prop_map(|(compare, success, failure)| TxnOp::Txn(TxnRequest { compare, success, failure }));
    let op = prop_oneof![4 => simple_op, 1 => nested];
    prop_oneof![
        4 => put.prop_map(Command::Put),
        1 => keeping.prop_map(|(p, keep)| Command::PutKeeping(p, keep)),
        2 => (range, any::<bool>()).prop_map(|(range, prev_kv)| Command::DeleteRange(DeleteRangeRequest { range, prev_kv })),
        3 => (prop::collection::vec(compare, 0..3), prop::collection::vec(op.clone(), 0..4), prop::collection::vec(op, 0..4))
            .prop_map(|(compare, success, failure)| Command::Txn(TxnRequest { compare, success, failure })),
        2 => (prop::sample::select(vec![0i64, 1, 2, 3]), prop::option::of(prop::sample::select(vec!["m", "n"])), -1i64..5)
            .prop_map(|(id, name, ttl)| Command::LeaseGrant { id, name: name.map(str::to_string), ttl }),
        2 => (0i64..4).prop_map(|id| Command::LeaseRevoke { id }),
        2 => (prop::collection::vec(0i64..4, 0..3), 0u64..3).prop_map(|(ids, round)| Command::LeaseExpire { ids, tenure: (round, 1) }),
        1 => (0u64..3).prop_map(|round| Command::Barrier { tenure: (round, 1) }),
        1 => (0i64..24).prop_map(|revision| Command::Compact { revision }),
        1 => (
            prop::sample::select(vec![AlarmAction::List, AlarmAction::Raise, AlarmAction::Disarm]),
            0u64..3,
            prop::option::of(prop::sample::select(vec![AlarmKind::NoSpace, AlarmKind::Corrupt])),
        )
            .prop_map(|(action, member, kind)| Command::Alarm { action, member, kind }),
        1 => arb_auth_change().prop_map(Command::Auth),
    ]
}

/// Auth changes over two users and two roles, enough to reach enabled states and refusals.
fn arb_auth_change() -> impl Strategy<Value = crate::auth::AuthChange> {
    use crate::auth::{AuthChange, Permission, PermissionKind};
    let user = prop::sample::select(vec!["root", "u"]).prop_map(str::to_string);
    let role = prop::sample::select(vec!["root", "r"]).prop_map(str::to_string);
    let key = prop::sample::select(vec!["", "a", "c"]).prop_map(|k| k.as_bytes().to_vec());
    prop_oneof![
        Just(AuthChange::Enable { token_secret: vec![5; 8] }),
        Just(AuthChange::Disable),
        user.clone().prop_map(|name| AuthChange::UserAdd { name, password_hash: Some("h".into()), no_password: false }),
        user.clone().prop_map(|name| AuthChange::UserDelete { name }),
        (user.clone(), role.clone()).prop_map(|(user, role)| AuthChange::UserGrantRole { user, role }),
        (user, role.clone()).prop_map(|(user, role)| AuthChange::UserRevokeRole { user, role }),
        role.clone().prop_map(|name| AuthChange::RoleAdd { name }),
        role.clone().prop_map(|name| AuthChange::RoleDelete { name }),
        (role, key.clone(), key).prop_map(|(role, key, range_end)| AuthChange::RoleGrantPermission {
            role,
            permission: Permission { kind: PermissionKind::ReadWrite, key, range_end },
        }),
    ]
}

/// The whole key space at `revision`, read through the history.
fn all_at(sm: &StateMachine, revision: Revision) -> Result<RangeResponse, KvError> {
    sm.range_at(&RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() }, revision)
}

/// Invariants that must hold after every command: keys and lease key sets agree, and the
/// sweep's work list is exactly the dead keys still stored.
fn check_invariants(sm: &StateMachine) {
    sm.keys.check_graveyard();
    // The quota's running count is what counting from scratch gives.
    let stored: u64 = sm.keys.stored().map(|kv| crate::state::keyspace::stored_bytes(&kv)).sum();
    let history: u64 = sm
        .history
        .events()
        .map(|e| {
            crate::state::keyspace::stored_bytes(&e.kv)
                + e.prev_kv.as_ref().map_or(0, crate::state::keyspace::stored_bytes)
        })
        .sum();
    assert_eq!(sm.bytes_in_use(), stored + history);
    let everything = all(sm);
    assert_eq!(everything.kvs.len(), sm.key_count());
    for kv in &everything.kvs {
        assert!(kv.version >= 1 && kv.create_revision <= kv.mod_revision && kv.mod_revision <= sm.revision());
        if kv.lease != NO_LEASE {
            assert!(sm.lease(kv.lease).expect("key on a dead lease").keys.contains(&kv.key));
        }
    }
    for lease in sm.leases() {
        for key in lease.keys.iter() {
            assert_eq!(sm.get(key).map(|kv| kv.lease), Some(lease.id));
        }
    }
}

/// A machine that sweeps `budget` dead keys per apply.
fn with_budget(budget: usize) -> StateMachine {
    let mut sm = StateMachine::new();
    sm.set_cleanup_budget(budget);
    sm
}

/// `sm` through a snapshot, keeping its cleanup budget.
fn through_snapshot(sm: &StateMachine) -> StateMachine {
    let mut restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    restored.set_cleanup_budget(sm.cleanup_budget);
    restored
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Three machines apply the same commands: one removing dead keys at once (as if
    /// deletion were eager), one sweeping at most `budget` (0 to 2) dead keys per apply, and
    /// the same restored from a snapshot midway. Every result, digest and read must agree:
    /// lazy deletion and snapshots are invisible.
    #[test]
    fn snapshot_restore_midway_gives_the_same_history(
        commands in prop::collection::vec(arb_command(), 0..80),
        cut in 0usize..80,
        budget in 0usize..3,
    ) {
        let cut = cut.min(commands.len());
        let mut eager = with_budget(usize::MAX);
        let mut straight = with_budget(budget);
        let mut restored = with_budget(budget);
        for (i, command) in commands.iter().enumerate() {
            if i == cut {
                restored = through_snapshot(&restored);
                prop_assert_eq!(restored.pending_cleanup(), straight.pending_cleanup());
            }
            let reference = eager.apply(command);
            let a = straight.apply(command);
            let b = restored.apply(command);
            prop_assert_eq!(&a, &reference);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(eager.pending_cleanup(), 0);
            prop_assert_eq!(straight.pending_cleanup(), restored.pending_cleanup());
            check_invariants(&straight);
            check_invariants(&restored);
            prop_assert_eq!(observable(&straight), observable(&eager));
        }
        if cut == commands.len() {
            restored = through_snapshot(&restored);
        }
        prop_assert_eq!(straight.digest(), restored.digest());
        prop_assert_eq!(straight.digest(), eager.digest());
        prop_assert_eq!(all(&straight), all(&restored));
        prop_assert_eq!(observable(&straight), observable(&restored));
        prop_assert_eq!(straight.pending_cleanup(), restored.pending_cleanup());
        prop_assert_eq!(straight.bytes_in_use(), restored.bytes_in_use());
        prop_assert_eq!(straight.alarms().collect::<Vec<_>>(), restored.alarms().collect::<Vec<_>>());
        prop_assert_eq!(straight.auth(), restored.auth());
    }
}

#[test]
fn alarms_are_raised_listed_and_disarmed_by_member_and_kind() {
    let mut sm = StateMachine::new();
    let alarm = |action, member, kind| Command::Alarm { action, member, kind };
    let raised = |sm: &mut StateMachine, command| match ok(sm, &command) {
        CommandResponse::Alarm { alarms } => alarms,
        other => panic!("{other:?}"),
    };
    let nospace = |member| Alarm { member, kind: AlarmKind::NoSpace };
    let corrupt = |member| Alarm { member, kind: AlarmKind::Corrupt };
    assert_eq!(raised(&mut sm, alarm(AlarmAction::Raise, 2, Some(AlarmKind::NoSpace))), vec![nospace(2)]);
    raised(&mut sm, alarm(AlarmAction::Raise, 3, Some(AlarmKind::NoSpace)));
    raised(&mut sm, alarm(AlarmAction::Raise, 3, Some(AlarmKind::Corrupt)));
    assert_eq!(sm.revision(), 1, "alarms change no revision");
    assert!(sm.has_alarm(AlarmKind::NoSpace) && sm.has_alarm(AlarmKind::Corrupt));
    assert_eq!(raised(&mut sm, alarm(AlarmAction::List, 0, None)), vec![nospace(2), nospace(3), corrupt(3)]);
    assert_eq!(raised(&mut sm, alarm(AlarmAction::List, 0, Some(AlarmKind::Corrupt))), vec![corrupt(3)]);
    assert_eq!(raised(&mut sm, alarm(AlarmAction::List, 3, None)), vec![nospace(3), corrupt(3)]);
    let restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    assert_eq!(restored.alarms().collect::<Vec<_>>(), sm.alarms().collect::<Vec<_>>());
    assert_eq!(raised(&mut sm, alarm(AlarmAction::Disarm, 0, Some(AlarmKind::NoSpace))), vec![nospace(2), nospace(3)]);
    assert_eq!(raised(&mut sm, alarm(AlarmAction::Disarm, 3, None)), vec![corrupt(3)]);
    assert_eq!(sm.alarms().count(), 0);
    assert_eq!(raised(&mut sm, alarm(AlarmAction::Disarm, 0, None)), vec![]);
}

#[test]
fn the_data_in_use_grows_with_writes_and_shrinks_with_deletes_and_compaction() {
    let mut sm = StateMachine::new();
    assert_eq!(sm.bytes_in_use(), 0);
    for i in 0..10 {
        ok(&mut sm, &put_cmd(&format!("k{i}"), &"v".repeat(1000), 0));
    }
    let full = sm.bytes_in_use();
    assert!(full > 2 * 10 * 1000, "keys and their history: {full}");
    ok(&mut sm, &del_cmd(KeyRange::prefix("k")));
    assert!(sm.bytes_in_use() > full, "a delete records what it deleted in the history");
    let now = sm.revision();
    ok(&mut sm, &Command::Compact { revision: now });
    // What is left: the tombstones at the compaction point, each with its deleted value.
    assert!(sm.bytes_in_use() < full, "{} after compaction, {full} before", sm.bytes_in_use());
    check_invariants(&sm);
}

#[test]
fn an_expiry_from_a_replaced_master_is_stale_and_changes_nothing() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &Command::Barrier { tenure: (1, 1) });
    ok(&mut sm, &Command::LeaseGrant { id: 5, name: None, ttl: 10 });
    // Master (2, 3) took over; an expiry decided under (1, 1) arrives late.
    ok(&mut sm, &Command::Barrier { tenure: (2, 3) });
    let r = ok(&mut sm, &Command::LeaseExpire { ids: vec![5], tenure: (1, 1) });
    assert_eq!(r, CommandResponse::LeaseExpire { expired: vec![], deleted: 0 });
    assert!(sm.lease(5).is_some());
    let r = ok(&mut sm, &Command::LeaseExpire { ids: vec![5], tenure: (2, 3) });
    assert_eq!(r, CommandResponse::LeaseExpire { expired: vec![5], deleted: 0 });
    // The tenure survives a snapshot.
    let mut restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    ok(&mut restored, &Command::LeaseGrant { id: 6, name: None, ttl: 10 });
    let r = ok(&mut restored, &Command::LeaseExpire { ids: vec![6], tenure: (1, 9) });
    assert_eq!(r, CommandResponse::LeaseExpire { expired: vec![], deleted: 0 });
}

/// The revoke scenario of the lazy-deletion tests: lease 5 holds `k0000`..`k4999`; `a` and
/// `z` have no lease; `k2500x`, in the middle of the dead keys, is on lease 6.
fn five_thousand_on_a_lease() -> StateMachine {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(5, Some("big")));
    ok(&mut sm, &grant(6, None));
    ok(&mut sm, &put_cmd("a", "1", 0));
    ok(&mut sm, &put_cmd("z", "1", 0));
    ok(&mut sm, &put_cmd("k2500x", "other", 6));
    for i in 0..5000 {
        ok(&mut sm, &put_cmd(&format!("k{i:04}"), "v", 5));
    }
    sm
}

fn keys_of(r: &RangeResponse) -> Vec<&[u8]> {
    r.kvs.iter().map(|kv| kv.key.as_slice()).collect()
}

fn read(sm: &StateMachine, range: KeyRange, limit: i64, count_only: bool, keys_only: bool) -> RangeResponse {
    sm.range(&RangeRequest { range, limit, count_only, keys_only }).unwrap()
}

fn cmp(range: KeyRange, target: CompareTarget, result: CompareResult) -> Compare {
    Compare { range, target, result }
}

fn txn_succeeds(sm: &mut StateMachine, compare: Compare) -> bool {
    match ok(sm, &txn(vec![compare], vec![], vec![])) {
        CommandResponse::Txn(r) => r.succeeded,
        other => panic!("{other:?}"),
    }
}

#[test]
fn revoked_keys_are_gone_at_once_for_every_read_compare_and_write() {
    let mut sm = five_thousand_on_a_lease();
    let mut eager = sm.clone();
    eager.set_cleanup_budget(usize::MAX);
    let before = sm.revision();
    let revoke = Command::LeaseRevoke { id: 5 };
    assert_eq!(ok(&mut sm, &revoke), CommandResponse::LeaseRevoke { deleted: 5000 });
    assert_eq!(eager.apply(&revoke), Applied { revision: before + 1, result: Ok(sm_revoked()) });
    assert_eq!(sm.revision(), before + 1, "one revision for the lease and all its keys");
    // The revoking apply swept one budget; the rest is still in memory but gone.
    assert_eq!(sm.pending_cleanup(), 5000 - StateMachine::CLEANUP_PER_APPLY);
    assert_eq!((sm.key_count(), sm.lease_count(), sm.lease(5), sm.lease_id_by_name("big")), (3, 1, None, None));
    assert_eq!(observable(&sm), observable(&eager));

    // Reads: single keys, ranges with limits, counts and keys_only skip the dead keys.
    assert_eq!(sm.get(b"k4000"), None);
    assert_eq!(sm.get(b"k2500x").unwrap().lease, 6);
    let r = read(&sm, KeyRange::prefix("k"), 1, false, false);
    assert_eq!((keys_of(&r), r.count, r.more), (vec![&b"k2500x"[..]], 1, false));
    let r = read(&sm, KeyRange::between(vec![0], vec![0]), 2, false, true);
    assert_eq!((keys_of(&r), r.count, r.more), (vec![&b"a"[..], b"k2500x"], 3, true));
    assert!(r.kvs.iter().all(|kv| kv.value.is_empty()));
    assert_eq!(read(&sm, KeyRange::between(vec![0], vec![0]), 0, true, false).count, 3);
    assert_eq!(read(&sm, KeyRange::prefix("k3"), 0, true, false).count, 0);
    assert_eq!(read(&sm, KeyRange::single("k4999"), 0, false, false), RangeResponse::default());
    for (range, limit) in [(KeyRange::prefix("k"), 0), (KeyRange::between("k1", "k5"), 3), (KeyRange::prefix(""), 2)] {
        assert_eq!(read(&sm, range.clone(), limit, false, false), read(&eager, range, limit, false, false));
    }

    // Compares: a dead key is a missing key (version, revisions and lease 0, no value); a
    // range of dead keys is an empty range.
    use CompareResult::*;
    let mut probe = sm.clone();
    let dead = || KeyRange::single("k4000");
    assert!(txn_succeeds(&mut probe, cmp(dead(), CompareTarget::Version(0), Equal)));
    assert!(txn_succeeds(&mut probe, cmp(dead(), CompareTarget::CreateRevision(0), Equal)));
    assert!(txn_succeeds(&mut probe, cmp(dead(), CompareTarget::ModRevision(0), Equal)));
    assert!(txn_succeeds(&mut probe, cmp(dead(), CompareTarget::Lease(0), Equal)));
    assert!(!txn_succeeds(&mut probe, cmp(dead(), CompareTarget::Value(b"v".to_vec()), Equal)));
    assert!(txn_succeeds(&mut probe, cmp(KeyRange::prefix("k4"), CompareTarget::Version(0), Equal)));
    // Over "k", only the live k2500x counts: every key in the range has lease 6.
    let mut probe = sm.clone();
    assert!(txn_succeeds(&mut probe, cmp(KeyRange::prefix("k"), CompareTarget::Lease(6), Equal)));

    // Put: a fresh key (new create revision, version 1, no previous value).
    let mut probe = sm.clone();
    let CommandResponse::Put(r) = ok(&mut probe, &put_cmd("k4000", "new", 0)) else { panic!() };
    assert_eq!(r.prev_kv, None);
    let kv = probe.get(b"k4000").unwrap();
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (before + 2, before + 2, 1));

    // Delete: dead keys are neither counted nor returned, and do not move the revision.
    let mut probe = sm.clone();
    let r = ok(&mut probe, &del_cmd(KeyRange::prefix("k3")));
    assert_eq!((r, probe.revision()), (CommandResponse::DeleteRange(DeleteRangeResponse::default()), before + 1));
    let r = ok(&mut probe, &del_cmd(KeyRange::single("k4999")));
    assert_eq!((r, probe.revision()), (CommandResponse::DeleteRange(DeleteRangeResponse::default()), before + 1));
    let CommandResponse::DeleteRange(r) = ok(&mut probe, &del_cmd(KeyRange::prefix("k"))) else { panic!() };
    assert_eq!(
        (r.deleted, keys_of(&RangeResponse { kvs: r.prev_kvs, ..Default::default() })),
        (1, vec![&b"k2500x"[..]])
    );
    assert_eq!(probe.revision(), before + 2);
    probe.keys.check_graveyard();

    // A Txn mixing all of it gives what the eager machine gives.
    let mixed = txn(
        vec![cmp(KeyRange::single("k4321"), CompareTarget::Version(0), Equal)],
        vec![
            t_get(KeyRange::prefix("k4")),
            t_put("k4321", "x", 6),
            t_del(KeyRange::between("k0", "k43")),
            t_get(KeyRange::prefix("k")),
        ],
        vec![],
    );
    assert_eq!(sm.clone().apply(&mixed), eager.clone().apply(&mixed));
}

/// What revoking lease 5 of [`five_thousand_on_a_lease`] answers.
fn sm_revoked() -> CommandResponse {
    CommandResponse::LeaseRevoke { deleted: 5000 }
}

#[test]
fn dead_keys_are_swept_in_bounded_chunks_by_every_command() {
    let mut sm = five_thousand_on_a_lease();
    ok(&mut sm, &Command::LeaseRevoke { id: 5 });
    let view = observable(&sm);
    let mut pending = sm.pending_cleanup();
    let mut applies = 0;
    // Any command sweeps, a refused one included.
    let commands = [Command::Barrier { tenure: (0, 0) }, Command::LeaseRevoke { id: 99 }, grant(0, Some("big"))];
    while pending > 0 {
        sm.apply(&commands[applies % commands.len()]);
        applies += 1;
        let now = sm.pending_cleanup();
        assert!(now < pending && pending - now <= StateMachine::CLEANUP_PER_APPLY, "{pending} -> {now}");
        pending = now;
        sm.keys.check_graveyard();
        assert_eq!(all(&sm), view.1);
    }
    assert_eq!(applies, 4);
    assert_eq!(sm.key_count(), 3);
    assert_eq!(sm.keys.stored().count(), 3, "every dead key left memory");
}

#[test]
fn keys_written_again_before_the_sweep_survive_it() {
    let mut sm = five_thousand_on_a_lease();
    sm.set_cleanup_budget(100);
    ok(&mut sm, &Command::LeaseRevoke { id: 5 });
    let revoked_at = sm.revision();
    // The id can be granted again at once, as in etcd: its old keys stay dead.
    ok(&mut sm, &grant(5, Some("big")));
    assert_eq!(sm.get(b"k4997"), None);
    ok(&mut sm, &put_cmd("k4997", "new5", 5));
    ok(&mut sm, &put_cmd("k4998", "none", 0));
    ok(&mut sm, &put_cmd("k4999", "six", 6));
    assert_eq!(lease_keys(&sm, 5), vec![b"k4997"]);
    // Overwriting a dead key takes it off the work list (besides the budget swept).
    assert_eq!(sm.pending_cleanup(), 5000 - 5 * 100 - 3);
    ok(&mut sm, &del_cmd(KeyRange::single("k4996")));
    assert_eq!(sm.pending_cleanup(), 5000 - 6 * 100 - 4);
    while sm.pending_cleanup() > 0 {
        ok(&mut sm, &Command::Barrier { tenure: (0, 0) });
        sm.keys.check_graveyard();
    }
    for (key, value, lease) in [("k4997", "new5", 5), ("k4998", "none", 0), ("k4999", "six", 6)] {
        let kv = sm.get(key.as_bytes()).unwrap_or_else(|| panic!("{key} was swept"));
        assert_eq!((kv.value.as_slice(), kv.lease, kv.version), (value.as_bytes(), lease, 1));
        assert!(kv.create_revision > revoked_at);
    }
    assert_eq!(sm.key_count(), 6);
    check_invariants(&sm);
    // The new incarnation dies too: its key goes, the others stay.
    ok(&mut sm, &Command::LeaseRevoke { id: 5 });
    assert_eq!((sm.get(b"k4997"), sm.key_count(), sm.pending_cleanup()), (None, 5, 0));
}

#[test]
fn an_id_that_dies_twice_before_its_first_sweep_ends() {
    let mut sm = StateMachine::new();
    sm.set_cleanup_budget(2);
    ok(&mut sm, &grant(5, None));
    for i in 0..20 {
        ok(&mut sm, &put_cmd(&format!("k{i:02}"), "first", 5));
    }
    ok(&mut sm, &Command::LeaseRevoke { id: 5 });
    ok(&mut sm, &grant(5, None));
    // Half on top of first-life keys still stored, half on new keys.
    for i in 10..30 {
        ok(&mut sm, &put_cmd(&format!("k{i:02}"), "second", 5));
    }
    assert_eq!((sm.key_count(), lease_keys(&sm, 5).len()), (20, 20));
    let CommandResponse::LeaseRevoke { deleted } = ok(&mut sm, &Command::LeaseRevoke { id: 5 }) else { panic!() };
    assert_eq!((deleted, sm.key_count()), (20, 0));
    assert!(sm.pending_cleanup() > 0);
    let mid = through_snapshot(&sm);
    let mut both = [sm, mid];
    while both[0].pending_cleanup() > 0 {
        for m in &mut both {
            ok(m, &put_cmd("other", "x", 0));
            check_invariants(m);
        }
        assert_eq!(both[0].pending_cleanup(), both[1].pending_cleanup());
        assert_eq!(observable(&both[0]), observable(&both[1]));
    }
    assert_eq!((both[0].keys.stored().count(), both[1].keys.stored().count()), (1, 1));
}

#[test]
fn expiry_of_several_large_leases_is_one_revision_and_swept_lazily() {
    let mut sm = StateMachine::new();
    for id in [1, 2] {
        ok(&mut sm, &grant(id, None));
        for i in 0..3000 {
            ok(&mut sm, &put_cmd(&format!("l{id}/{i:04}"), "v", id));
        }
    }
    let before = sm.revision();
    let r = ok(&mut sm, &Command::LeaseExpire { ids: vec![2, 1], tenure: (0, 0) });
    assert_eq!(r, CommandResponse::LeaseExpire { expired: vec![2, 1], deleted: 6000 });
    assert_eq!((sm.revision(), sm.key_count(), sm.lease_count()), (before + 1, 0, 0));
    assert_eq!(sm.pending_cleanup(), 6000 - StateMachine::CLEANUP_PER_APPLY);
    assert_eq!(read(&sm, KeyRange::prefix("l"), 0, true, false).count, 0);
    let mut n = 0;
    while sm.pending_cleanup() > 0 {
        ok(&mut sm, &Command::Barrier { tenure: (0, 0) });
        n += 1;
    }
    assert_eq!((n, sm.keys.stored().count()), (5, 0));
}

#[test]
fn snapshot_in_the_middle_of_a_cleanup_continues_it_identically() {
    let mut sm = five_thousand_on_a_lease();
    ok(&mut sm, &Command::LeaseRevoke { id: 5 });
    ok(&mut sm, &Command::Barrier { tenure: (0, 0) });
    assert_eq!(sm.pending_cleanup(), 3000);
    let mut restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    assert_eq!(restored.digest(), sm.digest());
    assert_eq!(restored.pending_cleanup(), 3000);
    assert_eq!(observable(&restored), observable(&sm));
    assert_eq!(restored.get(b"k4500"), None);
    restored.keys.check_graveyard();
    let mut eager = sm.clone();
    eager.set_cleanup_budget(usize::MAX);
    let commands = [
        put_cmd("k4500", "back", 6),
        grant(5, None),
        put_cmd("k4600", "again", 5),
        del_cmd(KeyRange::prefix("k45")),
        txn(
            vec![cmp(KeyRange::single("k4700"), CompareTarget::CreateRevision(0), CompareResult::Equal)],
            vec![t_put("k4700", "x", 0), t_get(KeyRange::prefix("k4"))],
            vec![],
        ),
        Command::Barrier { tenure: (0, 0) },
        Command::LeaseRevoke { id: 5 },
        put_cmd("k4800", "y", 0),
        Command::Barrier { tenure: (0, 0) },
    ];
    for command in &commands {
        let a = sm.apply(command);
        assert_eq!(a, restored.apply(command));
        assert_eq!(a, eager.apply(command));
        assert_eq!((sm.digest(), sm.pending_cleanup()), (restored.digest(), restored.pending_cleanup()));
        assert_eq!(observable(&sm), observable(&restored));
        assert_eq!(observable(&sm), observable(&eager));
        check_invariants(&sm);
        check_invariants(&restored);
    }
    assert_eq!(sm.pending_cleanup(), 0);
    assert_eq!(sm.digest(), eager.digest());
    assert_eq!(sm.keys.stored().count(), sm.key_count());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The history is the applied past: after any commands (compactions included), a read
    /// at every revision still retained equals the key space recorded when that revision was
    /// current, before and after a snapshot; below the compaction point and above the store
    /// revision it is etcd's error; and the events since any retained revision are exactly
    /// the differences between consecutive states, with IsCreate and PrevKV right.
    #[test]
    fn history_reproduces_every_retained_revision(
        commands in prop::collection::vec(arb_command(), 0..80),
        budget in 0usize..3,
    ) {
        let mut sm = with_budget(budget);
        let mut past: BTreeMap<Revision, Vec<KeyValue>> = BTreeMap::new();
        past.insert(1, Vec::new());
        for command in &commands {
            sm.apply(command);
            past.insert(sm.revision(), all(&sm).kvs);
        }
        let restored = through_snapshot(&sm);
        let compacted = sm.compacted_revision();
        prop_assert_eq!(restored.compacted_revision(), compacted);
        for (&revision, kvs) in &past {
            if revision < compacted {
                let is_compacted = matches!(all_at(&sm, revision), Err(KvError::Compacted { .. }));
                prop_assert!(is_compacted);
                continue;
            }
            prop_assert_eq!(&all_at(&sm, revision).unwrap().kvs, kvs);
            prop_assert_eq!(&all_at(&restored, revision).unwrap().kvs, kvs);
        }
        let future = all_at(&sm, sm.revision() + 1);
        let is_future = matches!(future, Err(KvError::FutureRevision { .. }));
        prop_assert!(is_future);
        // Replaying the events from the oldest retained state reproduces every later one.
        let start = compacted.max(1);
        let mut state: BTreeMap<Vec<u8>, KeyValue> = all_at(&sm, start).unwrap().kvs.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
        let events: Vec<Event> = sm.events_since(start + 1).unwrap();
        prop_assert_eq!(&events, &restored.events_since(start + 1).unwrap());
        let mut i = 0;
        while i < events.len() {
            let revision = events[i].revision();
            while i < events.len() && events[i].revision() == revision {
                let e = &events[i];
                // The value before this change: at revision - 1, or written earlier in the
                // same Txn (the state machine allows that; the API refuses it, as etcd does).
                prop_assert_eq!(e.prev_kv.as_ref(), state.get(&e.kv.key));
                prop_assert_eq!(e.is_create(), e.kind == EventKind::Put && e.prev_kv.is_none());
                match e.kind {
                    EventKind::Put => state.insert(e.kv.key.clone(), e.kv.clone()),
                    EventKind::Delete => state.remove(&e.kv.key),
                };
                i += 1;
            }
            prop_assert_eq!(&state.values().cloned().collect::<Vec<_>>(), &past[&revision]);
        }
        prop_assert_eq!(state.into_values().collect::<Vec<_>>(), all(&sm).kvs);
    }
}

#[test]
fn compaction_errors_are_etcds_and_change_nothing() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", NO_LEASE));
    ok(&mut sm, &put_cmd("a", "2", NO_LEASE));
    let future = fails(&mut sm, &Command::Compact { revision: 9 });
    assert_eq!(future.to_string(), "etcdserver: mvcc: required revision is a future revision");
    ok(&mut sm, &Command::Compact { revision: 2 });
    let again = fails(&mut sm, &Command::Compact { revision: 2 });
    assert_eq!(again.to_string(), "etcdserver: mvcc: required revision has been compacted");
    assert_eq!(sm.revision(), 3);
    // The compaction revision itself stays readable.
    assert_eq!(all_at(&sm, 2).unwrap().kvs[0].value, b"1");
    assert!(matches!(all_at(&sm, 1), Err(KvError::Compacted { .. })));
}

#[test]
fn lease_revoke_leaves_one_delete_per_key_at_one_revision() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &grant(7, None));
    ok(&mut sm, &put_cmd("b", "1", 7));
    ok(&mut sm, &put_cmd("a", "1", 7));
    ok(&mut sm, &Command::LeaseRevoke { id: 7 });
    let deletes: Vec<_> = sm
        .events_since(sm.revision())
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.kv.key.clone(), e.revision(), e.prev_kv.as_ref().map(|p| p.value.clone())))
        .collect();
    assert_eq!(
        deletes,
        vec![
            (EventKind::Delete, b"a".to_vec(), 4, Some(b"1".to_vec())),
            (EventKind::Delete, b"b".to_vec(), 4, Some(b"1".to_vec())),
        ]
    );
}

fn auth(change: crate::auth::AuthChange) -> Command {
    Command::Auth(change)
}

/// A machine with keys, a user `root` holding the root role, a role with a permission, and
/// auth enabled.
fn with_auth() -> StateMachine {
    use crate::auth::{AuthChange, Permission, PermissionKind};
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", 0));
    for change in [
        AuthChange::UserAdd { name: "root".into(), password_hash: Some("h".into()), no_password: false },
        AuthChange::UserGrantRole { user: "root".into(), role: "root".into() },
        AuthChange::RoleAdd { name: "reader".into() },
        AuthChange::RoleGrantPermission {
            role: "reader".into(),
            permission: Permission { kind: PermissionKind::Read, key: b"a".to_vec(), range_end: vec![0] },
        },
        AuthChange::Enable { token_secret: vec![1, 2, 3] },
    ] {
        ok(&mut sm, &auth(change));
    }
    sm
}

#[test]
fn auth_changes_move_no_key_and_not_the_revision() {
    use crate::auth::AuthChange;
    let mut sm = StateMachine::new();
    ok(&mut sm, &put_cmd("a", "1", 0));
    let before = observable(&sm);
    let add = auth(AuthChange::UserAdd { name: "root".into(), password_hash: None, no_password: true });
    assert!(!add.is_write() && !add.adds_data());
    assert_eq!(ok(&mut sm, &add), CommandResponse::Auth { revision: 2, enabled: false });
    assert_eq!(fails(&mut sm, &add).to_string(), "etcdserver: user name already exists");
    let enable = auth(AuthChange::Enable { token_secret: vec![9] });
    assert_eq!(fails(&mut sm, &enable), KvError::RootRoleNotExist);
    ok(&mut sm, &auth(AuthChange::UserGrantRole { user: "root".into(), role: "root".into() }));
    assert_eq!(ok(&mut sm, &enable), CommandResponse::Auth { revision: 3, enabled: true });
    assert_eq!(observable(&sm), before);
    assert!(sm.auth().is_enabled() && sm.auth().is_admin("root"));
    assert_eq!(sm.auth().token_secret(), [9]);
}

#[test]
fn the_auth_store_survives_snapshots_and_restores_into_a_new_cluster() {
    let sm = with_auth();
    let restored = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap();
    assert_eq!(restored.auth(), sm.auth());
    assert_eq!(restored.digest(), sm.digest());
    assert_eq!(restored.hash(), sm.hash());
    // etcd's backups carry users and roles; a restored cluster keeps them.
    let fresh = restored.for_new_cluster();
    assert_eq!(fresh.auth(), sm.auth());
    assert!(fresh.auth().is_permitted("root", b"a", b"", crate::auth::PermissionKind::Write));
}

#[test]
fn hash_kv_leaves_auth_out_but_the_whole_state_hash_does_not() {
    let plain = {
        let mut sm = StateMachine::new();
        ok(&mut sm, &put_cmd("a", "1", 0));
        sm
    };
    let with = with_auth();
    assert_eq!(plain.revision(), with.revision());
    assert_eq!(plain.hash_kv(0).unwrap(), with.hash_kv(0).unwrap());
    assert_ne!(plain.hash(), with.hash());
}

#[test]
fn format_6_snapshots_decode_with_auth_off() {
    let mut sm = with_auth();
    ok(&mut sm, &put_cmd("b", "2", 0));
    let mut expected = sm.clone();
    expected.auth = crate::auth::AuthStore::default();
    // A format 6 snapshot is format 7's bytes without the auth section, numbered 6 (the
    // format is the first field, a one-byte varint).
    let section = postcard::to_allocvec(sm.auth()).unwrap().len();
    let mut bytes = sm.to_snapshot_bytes();
    assert_eq!(bytes[0], 7);
    bytes.truncate(bytes.len() - section);
    bytes[0] = 6;
    let old = StateMachine::from_snapshot_bytes(&bytes).unwrap();
    assert_eq!(old.auth(), &crate::auth::AuthStore::default());
    assert_eq!(observable(&old), observable(&sm));
    assert_eq!(old.to_snapshot_bytes(), expected.to_snapshot_bytes());
    // A format 6 snapshot followed by anything is refused, not taken for auth.
    bytes.push(0);
    assert!(StateMachine::from_snapshot_bytes(&bytes).unwrap_err().to_string().contains("trailing"));
}

#[test]
fn an_inconsistent_auth_section_is_refused() {
    let mut sm = with_auth();
    sm.auth.users.get_mut("root").unwrap().roles.insert("ghost".into());
    let err = StateMachine::from_snapshot_bytes(&sm.to_snapshot_bytes()).unwrap_err();
    assert!(err.to_string().contains("the auth store is inconsistent"), "{err}");
}

/// `command` as `user` sends it, authenticated at `auth_revision`.
fn as_user(user: &str, auth_revision: u64, command: Command) -> Command {
    Command::Authorized(crate::command::Authorized { user: user.into(), auth_revision, command: Box::new(command) })
}

/// [`with_auth`] plus a user `w` who may write `w/` and read `a`.
fn with_writer() -> StateMachine {
    use crate::auth::{AuthChange, Permission, PermissionKind};
    let mut sm = with_auth();
    for change in [
        AuthChange::UserAdd { name: "w".into(), password_hash: Some("h".into()), no_password: false },
        AuthChange::RoleAdd { name: "writer".into() },
        AuthChange::RoleGrantPermission {
            role: "writer".into(),
            permission: Permission { kind: PermissionKind::ReadWrite, key: b"w/".to_vec(), range_end: b"w0".to_vec() },
        },
        AuthChange::UserGrantRole { user: "w".into(), role: "writer".into() },
        AuthChange::UserGrantRole { user: "w".into(), role: "reader".into() },
    ] {
        ok(&mut sm, &auth(change));
    }
    sm
}

#[test]
fn a_users_write_is_checked_where_it_is_applied() {
    let mut sm = with_writer();
    let now = sm.auth().revision();
    ok(&mut sm, &as_user("w", now, put_cmd("w/1", "v", 0)));
    assert_eq!(fails(&mut sm, &as_user("w", now, put_cmd("x", "v", 0))), KvError::PermissionDenied);
    assert_eq!(fails(&mut sm, &as_user("nobody", now, put_cmd("w/1", "v", 0))), KvError::PermissionDenied);
    assert_eq!(fails(&mut sm, &as_user("", now, put_cmd("w/1", "v", 0))), KvError::UserEmpty);
    // The root role may do everything; a compaction is the root role's alone.
    ok(&mut sm, &as_user("root", now, put_cmd("x", "v", 0)));
    let compact = Command::Compact { revision: sm.revision() };
    assert_eq!(fails(&mut sm, &as_user("w", now, compact.clone())), KvError::PermissionDenied);
    ok(&mut sm, &as_user("root", now, compact));
    // A refused command changes nothing, on every replica alike.
    let before = observable(&sm);
    let _ = fails(&mut sm, &as_user("w", now, put_cmd("y", "v", 0)));
    assert_eq!(observable(&sm), before);
}

#[test]
fn a_permission_revoked_before_the_apply_is_not_used() {
    use crate::auth::AuthChange;
    let mut sm = with_writer();
    let admitted_at = sm.auth().revision();
    let write = as_user("w", admitted_at, put_cmd("w/1", "v", 0));
    // The revocation is applied between the write's admission and its apply.
    ok(&mut sm, &auth(AuthChange::UserRevokeRole { user: "w".into(), role: "writer".into() }));
    assert_eq!(fails(&mut sm, &write), KvError::AuthOldRevision);
    // Authenticated again (at the new revision), the write is refused for what it is.
    let again = as_user("w", sm.auth().revision(), put_cmd("w/1", "v", 0));
    assert_eq!(fails(&mut sm, &again), KvError::PermissionDenied);
    // Auth changes are the root role's, whatever the revision (etcd's IsAdminPermitted).
    let add = auth(AuthChange::RoleAdd { name: "late".into() });
    ok(&mut sm, &as_user("root", admitted_at, add));
    let add = as_user("w", sm.auth().revision(), auth(AuthChange::RoleAdd { name: "later".into() }));
    assert_eq!(fails(&mut sm, &add), KvError::PermissionDenied);
}

#[test]
fn a_lease_put_or_revoke_needs_write_on_the_lease_keys() {
    let mut sm = with_writer();
    let now = sm.auth().revision();
    ok(&mut sm, &grant(9, None));
    // root attaches a key `w` may not write to lease 9.
    ok(&mut sm, &as_user("root", now, put_cmd("x", "v", 9)));
    assert_eq!(fails(&mut sm, &as_user("w", now, put_cmd("w/1", "v", 9))), KvError::PermissionDenied);
    assert_eq!(fails(&mut sm, &as_user("w", now, Command::LeaseRevoke { id: 9 })), KvError::PermissionDenied);
    // A lease holding only keys `w` may write is `w`'s to use and revoke.
    ok(&mut sm, &grant(10, None));
    ok(&mut sm, &as_user("w", now, put_cmd("w/2", "v", 10)));
    ok(&mut sm, &as_user("w", now, put_cmd("w/3", "v", 10)));
    ok(&mut sm, &as_user("w", now, Command::LeaseRevoke { id: 10 }));
}

#[test]
fn a_txn_needs_read_on_its_compares_and_reads_and_write_on_its_writes() {
    let mut sm = with_writer();
    let now = sm.auth().revision();
    let compare = |key: &str| Compare {
        range: KeyRange::single(key),
        target: CompareTarget::Version(0),
        result: CompareResult::Greater,
    };
    let put = |key: &str| {
        TxnOp::Put(crate::command::PutRequest { key: key.into(), value: b"v".to_vec(), lease: 0, prev_kv: false })
    };
    let txn =
        |compare: Vec<Compare>, success: Vec<TxnOp>| Command::Txn(TxnRequest { compare, success, failure: vec![] });
    ok(&mut sm, &as_user("w", now, txn(vec![compare("a")], vec![put("w/1")])));
    let denied = [
        // `reader` grants READ from `a` on: `0` is below it.
        txn(vec![compare("0")], vec![put("w/1")]),
        txn(vec![], vec![put("a")]),
        txn(vec![], vec![TxnOp::Txn(TxnRequest { compare: vec![], success: vec![put("z")], failure: vec![] })]),
    ];
    for command in denied {
        assert_eq!(fails(&mut sm, &as_user("w", now, command)), KvError::PermissionDenied);
    }
}

#[test]
fn without_auth_a_users_command_applies_as_it_is() {
    let mut sm = StateMachine::new();
    ok(&mut sm, &as_user("anyone", 0, put_cmd("k", "v", 0)));
    assert_eq!(sm.key_count(), 1);
}

#[test]
fn a_write_sent_before_auth_was_enabled_is_refused_when_applied_after() {
    use crate::auth::AuthChange;
    let mut sm = StateMachine::new();
    // Sent while auth was off: no user, auth revision 0.
    let write = as_user("", 0, put_cmd("k", "v", 0));
    let change = as_user("", 0, auth(AuthChange::RoleAdd { name: "late".into() }));
    ok(&mut sm, &as_user("", 0, put_cmd("before", "v", 0)));
    for change in [
        AuthChange::UserAdd { name: "root".into(), password_hash: Some("h".into()), no_password: false },
        AuthChange::UserGrantRole { user: "root".into(), role: "root".into() },
        AuthChange::Enable { token_secret: vec![1] },
    ] {
        ok(&mut sm, &as_user("", 0, auth(change)));
    }
    assert_eq!(fails(&mut sm, &write), KvError::UserEmpty);
    assert_eq!(fails(&mut sm, &change), KvError::UserEmpty);
}
