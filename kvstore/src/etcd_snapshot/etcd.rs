//! etcd's buckets, decoded: the names and encodings of etcd 3.4–3.6 (`mvcc/kvstore.go`,
//! `mvcc/revision.go`, `lease/lessor.go`, `auth/store.go`; 3.5 moved them under
//! `server/storage/schema` unchanged).
//!
//! - `key`: one record per change since the compaction point (and, below it, the last
//!   version of every key live at it). Key: the revision, 8-byte big-endian main, `_`,
//!   8-byte big-endian sub, plus `t` for a tombstone; value: `mvccpb.KeyValue` (a
//!   tombstone's holds only the key).
//! - `meta`: `finishedCompactRev` and `scheduledCompactRev` (a revision as above; etcd
//!   resumes a scheduled compaction on start, so the later of the two is the compaction
//!   point), `consistent_index` (raft's; not needed).
//! - `lease`: key the 8-byte big-endian id, value `leasepb.Lease`.
//! - `auth`: `authEnabled` (1 or 0), `authRevision` (8-byte big-endian); `authUsers` and
//!   `authRoles`: `authpb.User` and `authpb.Role` by name.
//!
//! The history is rebuilt by replaying the `key` bucket in revision order: each change's
//! previous value is the key's record before it, which leasekv's history keeps with each
//! change (etcd finds it in its key index instead).

use super::bbolt::Buckets;
use super::EtcdSnapshotError;
use crate::auth::{AuthStore, Permission, PermissionKind, Role, User};
use crate::state::import::{Imported, ImportedLease};
use crate::state::StateMachine;
use crate::types::{Event, EventKind, KeyValue, LeaseId, Revision, NO_LEASE};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};

/// etcd's `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct KeyValuePb {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub(super) create_revision: i64,
    #[prost(int64, tag = "3")]
    pub(super) mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub(super) version: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub(super) value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub(super) lease: i64,
}

impl From<KeyValuePb> for KeyValue {
    fn from(pb: KeyValuePb) -> Self {
        KeyValue {
            key: pb.key,
            value: pb.value,
            create_revision: pb.create_revision,
            mod_revision: pb.mod_revision,
            version: pb.version,
            lease: pb.lease,
        }
    }
}

impl From<&KeyValue> for KeyValuePb {
    fn from(kv: &KeyValue) -> Self {
        KeyValuePb {
            key: kv.key.clone(),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            version: kv.version,
            value: kv.value.clone(),
            lease: kv.lease,
        }
    }
}

/// etcd's `leasepb.Lease`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct LeasePb {
    #[prost(int64, tag = "1")]
    pub(super) id: i64,
    #[prost(int64, tag = "2")]
    pub(super) ttl: i64,
    #[prost(int64, tag = "3")]
    pub(super) remaining_ttl: i64,
}

/// etcd's `authpb.UserAddOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct UserAddOptionsPb {
    #[prost(bool, tag = "1")]
    pub(super) no_password: bool,
}

/// etcd's `authpb.User`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct UserPb {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) password: Vec<u8>,
    #[prost(string, repeated, tag = "3")]
    pub(super) roles: Vec<String>,
    #[prost(message, optional, tag = "4")]
    pub(super) options: Option<UserAddOptionsPb>,
}

/// etcd's `authpb.Permission`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PermissionPb {
    #[prost(int32, tag = "1")]
    pub(super) perm_type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub(super) range_end: Vec<u8>,
}

/// etcd's `authpb.Role`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RolePb {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) name: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub(super) key_permission: Vec<PermissionPb>,
}

/// leasekv's own bucket, which etcd never opens: what etcd's format has no place for.
pub(super) const LEASEKV_BUCKET: &str = "leasekv";
/// The prefix of a lease name's record in [`LEASEKV_BUCKET`], before the lease's 8-byte
/// big-endian id; the value is the name.
const LEASE_NAME: &[u8] = b"lease-name/";

/// The key of lease `id`'s name in [`LEASEKV_BUCKET`].
pub(super) fn lease_name_key(id: LeaseId) -> Vec<u8> {
    let mut key = LEASE_NAME.to_vec();
    key.extend_from_slice(&(id as u64).to_be_bytes());
    key
}

/// A key for messages: text when it is, hex otherwise.
fn show(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_string(),
        _ => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

fn record(bucket: &str, key: &[u8], problem: impl Into<String>) -> EtcdSnapshotError {
    EtcdSnapshotError::Record { bucket: bucket.to_string(), key: show(key), problem: problem.into() }
}

fn bucket<'b, 'a>(buckets: &'b Buckets<'a>, name: &'static str) -> Option<&'b [(&'a [u8], &'a [u8])]> {
    buckets.get(name.as_bytes()).map(Vec::as_slice)
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// A revision key of the `key` bucket: (main, sub, tombstone).
fn revision_key(key: &[u8]) -> Option<(Revision, i64, bool)> {
    let tombstone = match key.len() {
        17 => false,
        18 if key[17] == b't' => true,
        _ => return None,
    };
    if key[8] != b'_' {
        return None;
    }
    let main = i64::from_be_bytes(key[..8].try_into().ok()?);
    let sub = i64::from_be_bytes(key[9..17].try_into().ok()?);
    Some((main, sub, tombstone))
}

/// A compaction revision of the `meta` bucket (absent: never compacted).
fn compact_revision(meta: &[(&[u8], &[u8])], name: &str) -> Result<Revision, EtcdSnapshotError> {
    let Some((_, value)) = meta.iter().find(|(k, _)| *k == name.as_bytes()) else { return Ok(0) };
    let main = be_u64(value).and_then(|v| i64::try_from(v).ok());
    main.ok_or_else(|| record("meta", name.as_bytes(), format!("{} bytes, not a revision", value.len())))
}

/// Builds the state from etcd's buckets; `origin` tells this file from others.
pub(super) fn import(buckets: &Buckets<'_>, origin: [u8; 32]) -> Result<StateMachine, EtcdSnapshotError> {
    let keys = bucket(buckets, "key").ok_or(EtcdSnapshotError::MissingBucket("key"))?;
    let meta = bucket(buckets, "meta").ok_or(EtcdSnapshotError::MissingBucket("meta"))?;
    let compacted = compact_revision(meta, "finishedCompactRev")?.max(compact_revision(meta, "scheduledCompactRev")?);
    let (live, history, last) = replay(keys, compacted)?;
    // etcd's rule on start: the newest change's revision, or the compaction point when
    // compaction removed the newest changes (tombstones at or below it).
    let revision = last.max(compacted).max(1);
    let mut leases = leases(bucket(buckets, "lease").unwrap_or_default())?;
    lease_names(bucket(buckets, LEASEKV_BUCKET).unwrap_or_default(), &mut leases)?;
    for kv in live.values().filter(|kv| kv.lease != NO_LEASE) {
        if !leases.iter().any(|l| l.id == kv.lease) {
            return Err(EtcdSnapshotError::Inconsistent(format!(
                "key {:?} is attached to lease {:x}, which the `lease` bucket does not hold",
                show(&kv.key),
                kv.lease
            )));
        }
    }
    let auth = auth(buckets, &origin)?;
    let imported = Imported {
        revision,
        compacted,
        keys: live.into_values().collect(),
        history,
        leases,
        auth,
        origin: u64::from_le_bytes(origin[..8].try_into().unwrap_or_default()),
    };
    StateMachine::from_imported(imported).map_err(|e| EtcdSnapshotError::Inconsistent(e.detail().to_string()))
}

/// Replays the `key` bucket in revision order: the live keys after the last change, the
/// changes at or after `compacted` with the value each replaced, and the last revision.
#[allow(clippy::type_complexity)]
fn replay(
    records: &[(&[u8], &[u8])],
    compacted: Revision,
) -> Result<(BTreeMap<Vec<u8>, KeyValue>, Vec<Event>, Revision), EtcdSnapshotError> {
    let mut live: BTreeMap<Vec<u8>, KeyValue> = BTreeMap::new();
    let mut history = Vec::new();
    let mut last = 0;
    for &(rev, value) in records {
        let fail = |problem: String| record("key", rev, problem);
        let Some((main, sub, tombstone)) = revision_key(rev) else {
            return Err(fail("not a revision (8-byte main, '_', 8-byte sub, optional 't')".into()));
        };
        if main < 1 || sub < 0 {
            return Err(fail(format!("revision {main}.{sub} is out of range")));
        }
        let pb = KeyValuePb::decode(value).map_err(|e| fail(format!("not an mvccpb.KeyValue: {e}")))?;
        if pb.key.is_empty() {
            return Err(fail("a change without a key".into()));
        }
        last = main;
        if tombstone {
            let prev = live.remove(&pb.key);
            if main >= compacted {
                let kv = KeyValue {
                    key: pb.key,
                    value: Vec::new(),
                    create_revision: 0,
                    mod_revision: main,
                    version: 0,
                    lease: NO_LEASE,
                };
                history.push(Event { kind: EventKind::Delete, kv, prev_kv: prev });
            }
            continue;
        }
        if pb.mod_revision != main || !(1..=main).contains(&pb.create_revision) || pb.version < 1 || pb.lease < 0 {
            return Err(fail(format!(
                "key {:?} has inconsistent revisions (create {}, mod {}, version {}, lease {}) for revision {main}",
                show(&pb.key),
                pb.create_revision,
                pb.mod_revision,
                pb.version,
                pb.lease
            )));
        }
        let kv = KeyValue::from(pb);
        let prev = live.insert(kv.key.clone(), kv.clone());
        if main >= compacted {
            history.push(Event { kind: EventKind::Put, kv, prev_kv: prev });
        }
    }
    Ok((live, history, last))
}

/// The `lease` bucket.
fn leases(records: &[(&[u8], &[u8])]) -> Result<Vec<ImportedLease>, EtcdSnapshotError> {
    let mut leases = Vec::with_capacity(records.len());
    for &(key, value) in records {
        let pb = LeasePb::decode(value).map_err(|e| record("lease", key, format!("not a leasepb.Lease: {e}")))?;
        if be_u64(key).filter(|_| key.len() == 8) != Some(pb.id as u64) {
            return Err(record("lease", key, format!("holds lease {:x}", pb.id)));
        }
        if pb.id <= NO_LEASE || pb.ttl <= 0 {
            return Err(record("lease", key, format!("lease id {} or TTL {} is out of range", pb.id, pb.ttl)));
        }
        leases.push(ImportedLease { id: pb.id, ttl: pb.ttl, name: None });
    }
    Ok(leases)
}

/// The names leasekv gave leases, from its own bucket (a file etcd wrote has none). etcd
/// keeps a bucket it does not know through its restore and its own writes, so a file that
/// went from leasekv to etcd and back carries the names still: a name whose lease etcd
/// revoked or let expire meanwhile is dropped, not refused. Anything else in the bucket is
/// refused: a later leasekv's records, which this one cannot honour.
fn lease_names(records: &[(&[u8], &[u8])], leases: &mut [ImportedLease]) -> Result<(), EtcdSnapshotError> {
    for &(key, value) in records {
        let fail = |problem: String| record(LEASEKV_BUCKET, key, problem);
        let id = key.strip_prefix(LEASE_NAME).filter(|id| id.len() == 8).and_then(be_u64);
        let Some(id) = id else {
            return Err(fail("not a record this leasekv knows (a later version's?)".into()));
        };
        let name = std::str::from_utf8(value).map_err(|_| fail("the lease name is not UTF-8".into()))?;
        if let Some(lease) = leases.iter_mut().find(|l| l.id as u64 == id) {
            lease.name = Some(name.to_string());
        }
    }
    Ok(())
}

/// Users, roles and the auth switch. A database without the auth buckets (never written
/// to by auth) has auth off and nobody.
fn auth(buckets: &Buckets<'_>, origin: &[u8; 32]) -> Result<AuthStore, EtcdSnapshotError> {
    let mut store = AuthStore::default();
    let settings = bucket(buckets, "auth").unwrap_or_default();
    let setting = |name: &str| settings.iter().find(|(k, _)| *k == name.as_bytes()).map(|(_, v)| *v);
    store.enabled = match setting("authEnabled") {
        None | Some([0]) => false,
        Some([1]) => true,
        Some(other) => return Err(record("auth", b"authEnabled", format!("{other:?} is neither 1 nor 0"))),
    };
    if let Some(value) = setting("authRevision") {
        let revision = be_u64(value).filter(|_| value.len() == 8);
        let revision = revision.ok_or_else(|| record("auth", b"authRevision", "not an 8-byte revision"))?;
        // etcd commits revision 1 when it creates its auth store; 0 would read as "no user".
        store.revision = revision.max(1);
    }
    if store.enabled {
        // Every member restored from this file must sign tokens with the same key, and no
        // member may draw its own: the key is derived from the file (which holds the
        // password hashes anyway). `auth disable` then `auth enable` draws a fresh one.
        store.token_secret = origin.to_vec();
    }
    for &(key, value) in bucket(buckets, "authUsers").unwrap_or_default() {
        let fail = |problem: String| record("authUsers", key, problem);
        let pb = UserPb::decode(value).map_err(|e| fail(format!("not an authpb.User: {e}")))?;
        let name = String::from_utf8(pb.name).map_err(|_| fail("the name is not UTF-8".into()))?;
        if name.as_bytes() != key {
            return Err(fail(format!("holds user {name:?}")));
        }
        let no_password = pb.options.is_some_and(|o| o.no_password);
        let password_hash = match no_password {
            true => None,
            false => Some(String::from_utf8(pb.password).map_err(|_| fail("the password hash is not UTF-8".into()))?),
        };
        let roles: BTreeSet<String> = pb.roles.into_iter().collect();
        store.users.insert(name.clone(), User { name, password_hash, roles });
    }
    for &(key, value) in bucket(buckets, "authRoles").unwrap_or_default() {
        let fail = |problem: String| record("authRoles", key, problem);
        let pb = RolePb::decode(value).map_err(|e| fail(format!("not an authpb.Role: {e}")))?;
        let name = String::from_utf8(pb.name).map_err(|_| fail("the name is not UTF-8".into()))?;
        if name.as_bytes() != key {
            return Err(fail(format!("holds role {name:?}")));
        }
        let mut permissions = Vec::with_capacity(pb.key_permission.len());
        for p in pb.key_permission {
            let kind = match p.perm_type {
                0 => PermissionKind::Read,
                1 => PermissionKind::Write,
                2 => PermissionKind::ReadWrite,
                other => return Err(fail(format!("permission type {other} is unknown"))),
            };
            let permission = Permission { kind, key: p.key, range_end: p.range_end };
            if !permission.has_valid_range() {
                return Err(fail(format!(
                    "a permission on [{:?}, {:?}) names no key",
                    show(&permission.key),
                    show(&permission.range_end)
                )));
            }
            permissions.push(permission);
        }
        // etcd sorts by key alone; leasekv by key then range end, one per pair.
        permissions.sort_by(|a, b| (&a.key, &a.range_end).cmp(&(&b.key, &b.range_end)));
        if permissions.windows(2).any(|w| (&w[0].key, &w[0].range_end) == (&w[1].key, &w[1].range_end)) {
            return Err(fail("two permissions on the same range".into()));
        }
        store.roles.insert(name.clone(), Role { name, permissions });
    }
    store.check().map_err(|problem| EtcdSnapshotError::Inconsistent(format!("users and roles: {problem}")))?;
    Ok(store)
}
