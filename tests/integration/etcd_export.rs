//! leasekv's backup writer checked against etcd itself: stores of every shape (empty, one
//! key, 100,000 keys, large values, deep history, auth on) written as etcd snapshot files
//! (what `Maintenance.Snapshot` streams), then read by `etcdctl snapshot status`, restored
//! by `etcdctl snapshot restore` into an etcd 3.4 that is started and asked, through
//! etcdctl, for what the store holds: every key with its revisions, version, value and
//! lease, the store revision, reads in the past, the compaction point, leases with their
//! keys, users and roles.
//!
//! Needs etcd and etcdctl (Debian's `etcd-server`, `etcd-client`): skips without them,
//! fails without them under `CI=true`.

use crate::common;

use common::etcd::Etcd;
use leasekv::kvstore::auth::{AuthChange, Permission, PermissionKind};
use leasekv::kvstore::command::{Command, DeleteRangeRequest, PutRequest, RangeRequest, TxnOp, TxnRequest};
use leasekv::kvstore::types::{KeyRange, NO_LEASE};
use leasekv::kvstore::StateMachine;
use serde_json::Value;
use std::path::Path;
use std::process::Command as Process;
use std::time::{Duration, Instant};

fn put(key: &str, value: &[u8], lease: i64) -> Command {
    Command::Put(PutRequest { key: key.into(), value: value.to_vec(), lease, prev_kv: false })
}

/// etcdctl with `args`, bounded in time; its stdout, or a panic with what it said.
fn etcdctl(binary: &Path, endpoint: &str, user: Option<&str>, args: &[&str]) -> String {
    let mut command = Process::new(binary);
    command.env("ETCDCTL_API", "3").args(["--endpoints", endpoint, "--dial-timeout=2s", "--command-timeout=20s"]);
    if let Some(user) = user {
        command.args(["--user", user]);
    }
    let output = command.args(args).output().expect("etcdctl runs");
    assert!(output.status.success(), "etcdctl {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The store's keys at `revision` (0: now) as etcdctl's JSON shows them: key and value in
/// base64, revisions, version, lease.
fn expected_keys(machine: &StateMachine, revision: i64) -> Vec<Value> {
    use base64::Engine;
    let all = RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() };
    let kvs = machine.range_at(&all, revision).expect("a readable revision").kvs;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    kvs.iter()
        .map(|kv| {
            serde_json::json!([b64(&kv.key), kv.create_revision, kv.mod_revision, kv.version, b64(&kv.value), kv.lease])
        })
        .collect()
}

fn etcd_keys(response: &Value) -> Vec<Value> {
    let kvs = response["kvs"].as_array().cloned().unwrap_or_default();
    kvs.iter()
        .map(|kv| {
            let field = |name: &str| kv[name].as_i64().unwrap_or(0);
            // etcd leaves out empty values, as it leaves out zero numbers.
            let value = kv["value"].as_str().unwrap_or("").to_string();
            serde_json::json!([
                kv["key"],
                field("create_revision"),
                field("mod_revision"),
                field("version"),
                value,
                field("lease")
            ])
        })
        .collect()
}

/// Writes `machine` as leasekv's backup file, restores it into a new etcd and requires that
/// etcd to hold what `machine` does, at every revision in `past`.
fn check_in_etcd(name: &str, mut machine: StateMachine, past: &[i64], user: Option<&str>) {
    let Some(binary) = common::tool("etcdctl", "etcd-client") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(format!("{name}.db"));
    let started = Instant::now();
    {
        let view = machine.view().expect("a view");
        let mut out = std::fs::File::create_new(&file).expect("the file");
        leasekv::kvstore::etcd_snapshot::write_file(&view, &mut out, dir.path()).expect("written");
    }
    let written = started.elapsed();
    let bytes = std::fs::read(&file).expect("read back");
    let ours = leasekv::kvstore::etcd_snapshot::status(&bytes).expect("our status");

    // etcdctl snapshot status reads it, and agrees with ours.
    let status: Value = serde_json::from_str(&etcdctl(
        &binary,
        "127.0.0.1:1",
        None,
        &["snapshot", "status", file.to_str().unwrap(), "-w", "json"],
    ))
    .expect("status JSON");
    assert_eq!(status["hash"].as_u64(), Some(u64::from(ours.hash)), "{name}: hash {status}");
    assert_eq!(status["revision"].as_i64(), Some(ours.revision), "{name}: revision {status}");
    assert_eq!(status["totalKey"].as_u64(), Some(ours.total_keys), "{name}: total keys {status}");
    assert_eq!(status["totalSize"].as_u64(), Some(ours.total_size), "{name}: size {status}");

    // Restored into etcd, which starts and holds the same.
    let etcd_dir = dir.path().join("etcd-member");
    std::fs::create_dir(&etcd_dir).expect("dir");
    let Some(etcd) = Etcd::start_restored(&etcd_dir, &file) else { return };
    let endpoint = etcd.endpoint();
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = || {
        let mut command = Process::new(&binary);
        command.env("ETCDCTL_API", "3").args(["--endpoints", &endpoint, "--dial-timeout=1s", "endpoint", "health"]);
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        command.output().is_ok_and(|o| o.status.success())
    };
    while !healthy() {
        assert!(Instant::now() < deadline, "{name}: the restored etcd did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let get = |revision: i64| -> Value {
        let rev = format!("--rev={revision}");
        let mut args = vec!["get", "", "--from-key", "-w", "json"];
        if revision > 0 {
            args.push(&rev);
        }
        serde_json::from_str(&etcdctl(&binary, &endpoint, user, &args)).expect("get JSON")
    };
    let now = get(0);
    assert_eq!(now["header"]["revision"].as_i64(), Some(machine.revision()), "{name}: store revision");
    assert_eq!(etcd_keys(&now), expected_keys(&machine, 0), "{name}: keys now");
    for &at in past {
        assert_eq!(etcd_keys(&get(at)), expected_keys(&machine, at), "{name}: keys at {at}");
    }
    let compacted = machine.compacted_revision();
    if compacted > 1 {
        let mut command = Process::new(&binary);
        command.env("ETCDCTL_API", "3").args([
            "--endpoints",
            &endpoint,
            "get",
            "a",
            &format!("--rev={}", compacted - 1),
        ]);
        if let Some(user) = user {
            command.args(["--user", user]);
        }
        let below = command.output().expect("etcdctl runs");
        assert!(String::from_utf8_lossy(&below.stderr).contains("compacted"), "{name}: {below:?}");
    }
    for lease in machine.leases() {
        let ttl: Value = serde_json::from_str(&etcdctl(
            &binary,
            &endpoint,
            user,
            &["lease", "timetolive", &format!("{:x}", lease.id), "--keys", "-w", "json"],
        ))
        .expect("timetolive JSON");
        assert_eq!(ttl["granted-ttl"].as_i64(), Some(lease.ttl), "{name}: lease {:x}", lease.id);
        let keys = ttl["keys"].as_array().map_or(0, Vec::len);
        assert_eq!(keys, lease.keys.iter().count(), "{name}: keys of lease {:x}", lease.id);
    }
    let auth = machine.auth();
    if auth.is_enabled() {
        let users = etcdctl(&binary, &endpoint, user, &["user", "list"]);
        assert_eq!(users.lines().collect::<Vec<_>>(), auth.users(), "{name}: users");
        let roles = etcdctl(&binary, &endpoint, user, &["role", "list"]);
        assert_eq!(roles.lines().collect::<Vec<_>>(), auth.roles(), "{name}: roles");
        let reader = etcdctl(&binary, &endpoint, user, &["role", "get", "reader"]);
        assert!(reader.contains("[/k/, /k0) (prefix /k/)"), "{name}: {reader}");
        // The password hash works in etcd, and the permission holds.
        etcdctl(&binary, &endpoint, Some("alice:alicepw"), &["get", "/k/1"]);
    }
    eprintln!("{name}: {} bytes written in {written:?}, restored by etcd", bytes.len());
}

#[test]
fn an_empty_store_restores_into_etcd() {
    check_in_etcd("empty", StateMachine::new(), &[], None);
}

#[test]
fn one_key_restores_into_etcd() {
    let mut machine = StateMachine::new();
    machine.apply(&put("a", b"1", NO_LEASE));
    check_in_etcd("one-key", machine, &[], None);
}

#[test]
fn a_hundred_thousand_keys_with_leases_restore_into_etcd() {
    let mut machine = StateMachine::new();
    for id in 1..=10 {
        machine.apply(&Command::LeaseGrant { id, name: None, ttl: 60 * id });
    }
    for i in 0..100_000 {
        let lease = if i % 100 == 0 { 1 + (i / 100) % 10 } else { NO_LEASE };
        machine.apply(&put(&format!("/registry/pods/ns{}/pod-{i:06}", i % 7), format!("{i}").as_bytes(), lease));
    }
    let at = machine.revision() / 2;
    machine.apply(&Command::Compact { revision: at });
    check_in_etcd("100k-keys", machine, &[], None);
}

#[test]
fn large_values_restore_into_etcd() {
    let mut machine = StateMachine::new();
    for (i, len) in [0usize, 1, 4000, 4096, 10_000, 65_536, 1 << 20, 3 << 20].into_iter().enumerate() {
        machine.apply(&put(&format!("big{i}"), &vec![i as u8 + 1; len], NO_LEASE));
    }
    check_in_etcd("large-values", machine, &[3, 5, 7], None);
}

#[test]
fn deep_history_restores_into_etcd_with_reads_in_the_past() {
    let mut machine = StateMachine::new();
    for i in 0..3000 {
        let key = format!("k{}", i % 13);
        match i % 10 {
            9 => {
                machine
                    .apply(&Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false }));
            }
            5 => {
                let ops = (0..3)
                    .map(|j| {
                        TxnOp::Put(PutRequest {
                            key: format!("t{j}").into_bytes(),
                            value: format!("{i}").into_bytes(),
                            lease: NO_LEASE,
                            prev_kv: false,
                        })
                    })
                    .collect();
                machine.apply(&Command::Txn(TxnRequest { compare: Vec::new(), success: ops, failure: Vec::new() }));
            }
            _ => {
                machine.apply(&put(&key, format!("v{i}").as_bytes(), NO_LEASE));
            }
        }
    }
    machine.apply(&Command::Compact { revision: 1200 });
    let revision = machine.revision();
    let past: Vec<i64> = (1200..=revision).step_by(97).chain([revision - 1]).collect();
    check_in_etcd("deep-history", machine, &past, None);
}

#[test]
fn a_store_with_auth_on_restores_into_etcd() {
    let hash = |password: &str| Some(bcrypt::hash(password, 4).expect("a bcrypt hash"));
    let mut machine = StateMachine::new();
    for i in 0..20 {
        machine.apply(&put(&format!("/k/{i}"), b"v", NO_LEASE));
    }
    for change in [
        AuthChange::UserAdd { name: "root".into(), password_hash: hash("rootpw"), no_password: false },
        AuthChange::UserGrantRole { user: "root".into(), role: "root".into() },
        AuthChange::UserAdd { name: "alice".into(), password_hash: hash("alicepw"), no_password: false },
        AuthChange::UserAdd { name: "bob".into(), password_hash: None, no_password: true },
        AuthChange::RoleAdd { name: "reader".into() },
        AuthChange::RoleGrantPermission {
            role: "reader".into(),
            permission: Permission { kind: PermissionKind::Read, key: "/k/".into(), range_end: "/k0".into() },
        },
        AuthChange::UserGrantRole { user: "alice".into(), role: "reader".into() },
        AuthChange::UserGrantRole { user: "bob".into(), role: "reader".into() },
        AuthChange::Enable { token_secret: vec![3; 32] },
    ] {
        machine.apply(&Command::Auth(change));
    }
    check_in_etcd("auth", machine, &[], Some("root:rootpw"));
}
