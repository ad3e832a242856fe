//! The importer on a real etcd snapshot (committed as a fuzz seed, 20 KiB) and on small
//! bbolt files built here, damaged on purpose.

use super::bbolt::writer::{build, BucketSpec, Layout, Pairs};
use super::etcd::KeyValuePb;
use super::*;
use crate::auth::PermissionKind;
use crate::command::RangeRequest;
use crate::error::KvError;
use crate::types::{KeyRange, KeyValue, NO_LEASE};
use prost::Message;

/// `etcdctl snapshot save` against etcd 3.4.23 (with `--user root:rootpw`) after:
/// put /a 1 (rev 2), put /a 2 (3), put /b x (4), del /b (5), lease grant 600, put /l/k1 v
/// with it (6), put /c "hello\nworld" (7), a txn putting /t1 a and /t2 b (8), compaction
/// at 4, put /a 3 (9); users root (role root), alice (role reader), bob (no password);
/// role reader: READ on /a, READWRITE on the prefix /l/; auth enabled.
fn real() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/etcd_snapshot/etcd-3.4.23-auth-lease-compacted.db");
    std::fs::read(path).expect("the committed etcd snapshot")
}

const LEASE: i64 = 4111120256163894537;

fn kv(key: &str, value: &str, create: i64, at: i64, version: i64, lease: i64) -> KeyValue {
    KeyValue { key: key.into(), value: value.into(), create_revision: create, mod_revision: at, version, lease }
}

fn range_at(machine: &StateMachine, revision: i64) -> Result<Vec<KeyValue>, KvError> {
    let all = RangeRequest { range: KeyRange::between(vec![0], vec![0]), ..Default::default() };
    machine.range_at(&all, revision).map(|r| r.kvs)
}

#[test]
fn a_real_etcd_snapshot_comes_across_whole() {
    let bytes = real();
    assert!(looks_like_bbolt(&bytes));
    let machine = decode(&bytes).unwrap();
    assert_eq!((machine.revision(), machine.compacted_revision()), (9, 4));
    let now = vec![
        kv("/a", "3", 2, 9, 3, NO_LEASE),
        kv("/c", "hello\nworld", 7, 7, 1, NO_LEASE),
        kv("/l/k1", "v", 6, 6, 1, LEASE),
        kv("/t1", "a", 8, 8, 1, NO_LEASE),
        kv("/t2", "b", 8, 8, 1, NO_LEASE),
    ];
    assert_eq!(range_at(&machine, 0).unwrap(), now);
    // The history since the compaction point: reads in the past, and the compaction.
    assert_eq!(
        range_at(&machine, 4).unwrap(),
        vec![kv("/a", "2", 2, 3, 2, NO_LEASE), kv("/b", "x", 4, 4, 1, NO_LEASE)]
    );
    assert_eq!(range_at(&machine, 5).unwrap(), vec![kv("/a", "2", 2, 3, 2, NO_LEASE)]);
    assert_eq!(range_at(&machine, 8).unwrap().len(), 5);
    assert!(matches!(range_at(&machine, 3), Err(KvError::Compacted { .. })));
    let events = machine.events_since(4).unwrap();
    let revisions: Vec<i64> = events.iter().map(|e| e.revision()).collect();
    assert_eq!(revisions, [4, 5, 6, 7, 8, 8, 9]);
    assert_eq!(events[1].prev_kv, Some(kv("/b", "x", 4, 4, 1, NO_LEASE)));
    // The lease, with its key.
    let lease = machine.lease(LEASE).expect("the lease");
    assert_eq!((lease.ttl, lease.keys.iter().collect::<Vec<_>>()), (600, vec![&b"/l/k1"[..]]));
    assert_eq!(machine.lease_count(), 1);
    // Users, roles, permissions and the switch.
    let auth = machine.auth();
    assert!(auth.is_enabled());
    assert!(auth.revision() > 1);
    assert_eq!(auth.token_secret().len(), 32);
    assert_eq!(auth.users(), ["alice", "bob", "root"]);
    assert!(auth.user("alice").unwrap().password_hash.as_deref().is_some_and(|h| h.starts_with("$2")));
    assert_eq!(auth.user("bob").unwrap().password_hash, None);
    assert!(auth.user("root").unwrap().roles.contains("root"));
    let reader = auth.role("reader").expect("role reader");
    let permissions: Vec<_> =
        reader.permissions.iter().map(|p| (p.kind, p.key.as_slice(), p.range_end.as_slice())).collect();
    assert_eq!(
        permissions,
        [(PermissionKind::Read, &b"/a"[..], &b""[..]), (PermissionKind::ReadWrite, b"/l/", b"/l0")]
    );
    // The state is one a snapshot holds, and the same on every member restored from it.
    let again = decode(&bytes).unwrap();
    assert_eq!(again.to_snapshot_bytes(), machine.to_snapshot_bytes());
    // Without the SHA-256 the stream appends (etcd's db file itself), the same state.
    let raw = decode(&bytes[..bytes.len() - 32]).unwrap();
    assert_eq!(raw.to_snapshot_bytes(), machine.to_snapshot_bytes());
}

#[test]
fn a_damaged_or_cut_etcd_snapshot_is_refused_with_the_reason() {
    let bytes = real();
    for at in [100, 5000, bytes.len() / 2, bytes.len() - 1] {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x20;
        let error = decode(&flipped).unwrap_err();
        assert!(matches!(error, EtcdSnapshotError::ChecksumMismatch), "byte {at}: {error}");
        assert!(error.to_string().contains("the file is damaged"), "{error}");
    }
    // Cut: the hash is no longer recognised, and the pages are missing.
    for len in [bytes.len() - 100, 8192, 4100, 100] {
        let error = decode(&bytes[..len]).unwrap_err();
        assert!(matches!(error, EtcdSnapshotError::Truncated { .. } | EtcdSnapshotError::NotBbolt), "{len}: {error}");
    }
    // A damaged page without the hash to catch it first: named, not a panic.
    let mut raw = bytes[..bytes.len() - 32].to_vec();
    let root = u64::from_le_bytes(raw[32..40].try_into().unwrap()) as usize;
    raw[root * 4096] ^= 0x01;
    let error = decode(&raw).unwrap_err().to_string();
    assert!(error.contains(&format!("page {root}: its header says")), "{error}");
    assert!(matches!(decode(b"leasekv snapshot\n"), Err(EtcdSnapshotError::NotBbolt)));
}

/// Every single-byte change of the real file without its hash (so that the pages and
/// records themselves are what is damaged) is decoded or refused, never a panic.
#[test]
fn every_byte_of_a_real_snapshot_damaged_is_an_answer() {
    let bytes = real();
    let raw = &bytes[..bytes.len() - 32];
    // The pages etcd used (the rest of the file is free space).
    for at in (0..raw.len()).filter(|at| at % 4096 < 1200) {
        let mut damaged = raw.to_vec();
        damaged[at] ^= 0xff;
        let _ = decode(&damaged);
    }
}

fn revision(main: i64, sub: i64, tombstone: bool) -> Vec<u8> {
    let mut key = main.to_be_bytes().to_vec();
    key.push(b'_');
    key.extend_from_slice(&sub.to_be_bytes());
    if tombstone {
        key.push(b't');
    }
    key
}

fn put(key: &str, create: i64, at: i64, version: i64, lease: i64) -> Vec<u8> {
    KeyValuePb { key: key.into(), create_revision: create, mod_revision: at, version, value: b"v".to_vec(), lease }
        .encode_to_vec()
}

/// A small etcd database: `records` in the `key` bucket (spread over several pages), an
/// empty `meta`, and `extra` buckets.
fn etcd_file(records: Pairs, extra: Vec<BucketSpec<'static>>) -> Vec<u8> {
    let mut buckets = vec![("key", Layout::Pages(3), records), ("meta", Layout::Inline, Vec::new())];
    buckets.extend(extra);
    build(1024, &buckets)
}

#[test]
fn a_built_etcd_database_without_compaction_keeps_its_whole_history() {
    // k1, k2, k3, k0, k1, ... written at revisions 2..=13: each key three times.
    let records: Vec<_> = (1..=12i64)
        .map(|i| (revision(i + 1, 0, false), put(&format!("k{}", i % 4), (i - 1) % 4 + 2, i + 1, (i - 1) / 4 + 1, 0)))
        .collect();
    let machine = decode(&etcd_file(records, Vec::new())).unwrap();
    assert_eq!((machine.revision(), machine.compacted_revision(), machine.key_count()), (13, 0, 4));
    assert_eq!(machine.history_len(), 12);
    assert_eq!(range_at(&machine, 2).unwrap().len(), 1);
    assert_eq!(machine.get(b"k0").map(|kv| (kv.version, kv.mod_revision)), Some((3, 13)));
}

#[test]
fn etcd_records_that_do_not_decode_are_named() {
    let good = (revision(2, 0, false), put("a", 2, 2, 1, 0));
    let cases: Vec<(Pairs, Vec<BucketSpec<'static>>, &str)> = vec![
        (vec![(b"short".to_vec(), put("a", 2, 2, 1, 0))], Vec::new(), "not a revision"),
        (vec![(revision(2, 0, false), vec![0xff, 0xff])], Vec::new(), "not an mvccpb.KeyValue"),
        (vec![(revision(2, 0, false), put("a", 2, 3, 1, 0))], Vec::new(), "inconsistent revisions"),
        (vec![(revision(2, 0, false), put("a", 2, 2, 1, 77))], Vec::new(), "lease 4d"),
        (
            vec![good.clone()],
            vec![("lease", Layout::Inline, vec![(77u64.to_be_bytes().to_vec(), vec![0x08, 0x4d, 0x10, 0x00])])],
            "TTL 0",
        ),
        (
            vec![good.clone()],
            vec![("authUsers", Layout::Inline, vec![(b"eve".to_vec(), vec![0x0a, 0x03, b'e', b'v', b'x'])])],
            "holds user",
        ),
        (
            vec![good.clone()],
            vec![("auth", Layout::Inline, vec![(b"authEnabled".to_vec(), vec![1])])],
            "auth is enabled without a root user",
        ),
    ];
    for (records, extra, expected) in cases {
        let error = decode(&etcd_file(records, extra)).unwrap_err().to_string();
        assert!(error.contains(expected), "{error:?} should say {expected:?}");
    }
    let no_key = build(1024, &[("meta", Layout::Inline, Vec::new())]);
    assert!(decode(&no_key).unwrap_err().to_string().contains("no `key` bucket"));
    // A tombstone of a key the file does not hold (compacted away) is kept as etcd serves it.
    let orphan = decode(&etcd_file(vec![good, (revision(3, 0, true), put("z", 0, 0, 0, 0))], Vec::new())).unwrap();
    assert_eq!((orphan.revision(), orphan.key_count()), (3, 1));
}
