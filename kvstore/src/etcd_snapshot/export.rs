//! Writes a leasekv state, read from a [`StateView`], as an etcd snapshot file: the bbolt
//! database etcd 3.4–3.6 keeps, in etcd's buckets and record encodings ([`super::etcd`]
//! documents them), followed by the SHA-256 etcd's snapshot stream appends. This is what
//! `Maintenance.Snapshot` streams, so `etcdctl snapshot status` and `etcdctl snapshot
//! restore` read leasekv's backups as they read etcd's.
//!
//! The `key` bucket holds what etcd's would after a compaction at the same point: every key
//! as it was just before the history leasekv retains (its last change before it), then
//! every retained change in order, deletions as tombstones. leasekv retains the changes
//! made at the compaction revision itself with the values they replaced, which etcd's
//! compaction drops; those values are written too, as records below the compaction point
//! (etcd reads them as records its next compaction removes). etcd's revisions are (main,
//! sub) pairs: the changes of one revision (a transaction's) get subs in the order they
//! were made; the records before the history, whose original subs are not kept, get them
//! in key order.
//!
//! What etcd's format has no place for goes in a bucket of leasekv's own, `leasekv`, which
//! etcd never opens: the lease names (`lease-name/` and the 8-byte big-endian id).
//!
//! Left empty: `members`, `members_removed` and `cluster` (a restore starts a new cluster,
//! and etcd's restore clears them anyway); `meta` holds no `storageVersion`, because etcd
//! 3.4.31+ refuses to start on one naming a later version.
//!
//! Memory: the records before the history come in key order and are sorted by revision
//! through [`SpillSort`] (32 MiB held, the rest in temporary runs); everything else streams
//! page by page from the view into bbolt pages. Most of those records' values are not read
//! with their keys (one history page per key) but from the history's pages below the
//! compaction point, which are stored in revision order, in one pass beside the sorted keys.

use super::bbolt_write::{BoltWriter, Bucket, PAGE_SIZE};
use super::etcd::{
    lease_name_key, KeyValuePb, LeasePb, PermissionPb, RolePb, UserAddOptionsPb, UserPb, LEASEKV_BUCKET,
};
use super::spill_sort::{SortedRuns, SpillSort};
use crate::auth::{AuthStore, PermissionKind};
use crate::engine::EngineError;
use crate::state::StateView;
use crate::types::{Event, EventKind, KeyValue, Revision};
use prost::Message;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What the sort of the records before the history holds in memory.
const SORT_BUDGET: usize = 32 << 20;

/// Why an etcd snapshot file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Writing or reading the file (or a temporary one) failed.
    #[error("writing the etcd snapshot file failed: {0}")]
    Io(#[from] io::Error),
    /// Reading the state failed.
    #[error(transparent)]
    State(#[from] EngineError),
}

/// Writes the etcd snapshot file of `view` to `file` (empty, at its start), with the
/// SHA-256 at its end; temporary files go to `scratch`. Returns the file's length, the
/// hash included; `file` is left at its start.
pub fn write_file(view: &StateView, file: &mut File, scratch: &Path) -> Result<u64, ExportError> {
    let content = {
        let out = BufWriter::with_capacity(1 << 20, &mut *file);
        let mut bolt = BoltWriter::new(out, PAGE_SIZE)?;
        key_bucket(view, &mut bolt, scratch)?;
        small_buckets(view, &mut bolt)?;
        let (mut out, len) = bolt.finish()?;
        out.flush()?;
        len
    };
    append_sha256(file, content)?;
    Ok(content + super::HASH_LEN as u64)
}

/// Reads the first `content` bytes of `file` back and appends their SHA-256 (how both
/// backup formats end), leaving `file` at its start.
pub(crate) fn append_sha256(file: &mut File, content: u64) -> io::Result<()> {
    file.set_len(content)?;
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Sha256::new();
    let mut reader = BufReader::with_capacity(1 << 20, &mut *file).take(content);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    file.seek(SeekFrom::Start(content))?;
    file.write_all(&hasher.finalize())?;
    file.seek(SeekFrom::Start(0))?;
    Ok(())
}

/// etcd's `key` bucket key: main and sub revision, big-endian, `_` between, `t` after for a
/// tombstone.
fn revision_key(main: Revision, sub: i64, tombstone: bool) -> Vec<u8> {
    let mut key = Vec::with_capacity(18);
    key.extend_from_slice(&main.to_be_bytes());
    key.push(b'_');
    key.extend_from_slice(&sub.to_be_bytes());
    if tombstone {
        key.push(b't');
    }
    key
}

fn key_value_pb(kv: &KeyValue) -> Vec<u8> {
    KeyValuePb::from(kv).encode_to_vec()
}

/// Hands out subs: 0 for a revision's first record, then 1, 2, ...
#[derive(Default)]
struct Subs {
    main: Revision,
    next: i64,
}

impl Subs {
    fn next(&mut self, main: Revision) -> i64 {
        if main != self.main {
            (self.main, self.next) = (main, 0);
        }
        self.next += 1;
        self.next - 1
    }
}

fn write_error(e: io::Error) -> EngineError {
    EngineError::io("writing an etcd snapshot", e)
}

/// The `key` bucket being written, with the subs handed out so far.
struct KeyBucket<'w, W: Write + Seek> {
    bolt: &'w mut BoltWriter<W>,
    bucket: Bucket,
    subs: Subs,
}

impl<W: Write + Seek> KeyBucket<'_, W> {
    fn put(&mut self, kv: &KeyValue) -> Result<(), EngineError> {
        let key = revision_key(kv.mod_revision, self.subs.next(kv.mod_revision), false);
        self.bucket.put(self.bolt, &key, &key_value_pb(kv)).map_err(write_error)
    }

    fn tombstone(&mut self, key: &[u8], main: Revision) -> Result<(), EngineError> {
        let record = KeyValuePb { key: key.to_vec(), ..Default::default() }.encode_to_vec();
        self.bucket.put(self.bolt, &revision_key(main, self.subs.next(main), true), &record).map_err(write_error)
    }
}

/// A key as it was just before the retained changes, in the sort: ordered by its revision,
/// then its key; the payload is whether its value was left out (it is then in its change,
/// below the compaction point) and the key-value.
fn sorted_entry(kv: &KeyValue, value_in_change: bool) -> (Vec<u8>, Vec<u8>) {
    let mut order = kv.mod_revision.to_be_bytes().to_vec();
    order.extend_from_slice(&kv.key);
    let mut payload = vec![u8::from(value_in_change)];
    payload.extend_from_slice(&key_value_pb(kv));
    (order, payload)
}

/// The base records in revision order, each given its value from the changes below the
/// compaction point when it was left out: a merge of two streams in revision order.
struct BaseMerge {
    sorted: std::iter::Peekable<SortedRuns>,
    /// The changes of one revision (a transaction's), until the next revision's come.
    pending: Vec<Event>,
}

impl BaseMerge {
    fn head_revision(&mut self) -> Result<Option<Revision>, EngineError> {
        match self.sorted.peek() {
            None => Ok(None),
            Some(Ok((order, _))) => Ok(Some(Revision::from_be_bytes(order[..8].try_into().unwrap_or_default()))),
            Some(Err(_)) => match self.sorted.next() {
                Some(Err(e)) => Err(write_error(e)),
                _ => Ok(None),
            },
        }
    }

    /// Writes every base record below `revision`, their values from `pending`.
    fn write_below<W: Write + Seek>(
        &mut self,
        revision: Revision,
        out: &mut KeyBucket<'_, W>,
    ) -> Result<(), EngineError> {
        while let Some(head) = self.head_revision()? {
            if head >= revision {
                break;
            }
            let Some(Ok((_, payload))) = self.sorted.next() else { break };
            let pb = KeyValuePb::decode(&payload[1..]).map_err(|e| EngineError::Corrupt {
                what: "a sorted record of an etcd snapshot".into(),
                detail: e.to_string(),
            })?;
            let mut kv = KeyValue::from(pb);
            if payload[0] == 1 {
                let change = self.pending.iter().find(|e| e.kv.mod_revision == head && e.kv.key == kv.key);
                let Some(change) = change else {
                    return Err(EngineError::Corrupt {
                        what: format!("key {:?}", String::from_utf8_lossy(&kv.key)),
                        detail: format!("its value is its change at revision {head}, which the history does not hold"),
                    });
                };
                kv.value = change.kv.value.clone();
            }
            out.put(&kv)?;
        }
        Ok(())
    }

    /// Takes the changes of one page below the compaction point.
    fn feed<W: Write + Seek>(&mut self, changes: Vec<Event>, out: &mut KeyBucket<'_, W>) -> Result<(), EngineError> {
        for change in changes {
            let revision = change.revision();
            if self.pending.first().is_some_and(|p| p.revision() != revision) {
                self.write_below(revision, out)?;
                self.pending.clear();
            }
            if change.kind == EventKind::Put {
                self.pending.push(change);
            }
        }
        Ok(())
    }
}

/// The `key` bucket, in revision order:
/// 1. every key as it was just before the first retained change (the one at or after the
///    compaction point, from which the history is kept): the live keys not changed since,
///    and the value each key's first retained change replaced. Those come in key order and
///    are sorted by revision ([`SpillSort`]); most values are read not with their keys but
///    from the changes below the compaction point, which are stored in revision order and
///    read once, page by page, beside the sorted keys;
/// 2. every retained change, deletions as tombstones.
fn key_bucket<W: Write + Seek>(view: &StateView, bolt: &mut BoltWriter<W>, scratch: &Path) -> Result<(), ExportError> {
    let revision = view.meta().revision;
    let mut base = SpillSort::new(scratch, SORT_BUDGET);
    let mut first_retained: Option<Revision> = None;
    view.events_through(revision, |changes| {
        for change in changes {
            let first = *first_retained.get_or_insert(change.revision());
            // Only a key's first retained change replaces a value from below the first.
            if let Some(prev) = change.prev_kv.as_ref().filter(|prev| prev.mod_revision < first) {
                let (order, payload) = sorted_entry(prev, false);
                base.push(order, payload).map_err(write_error)?;
            }
        }
        Ok(())
    })?;
    let first_retained = first_retained.unwrap_or(Revision::MAX);
    let pages_end = view.keys_for_export(|kvs| {
        for (kv, value_in_change) in kvs.iter().filter(|(kv, _)| kv.mod_revision < first_retained) {
            let (order, payload) = sorted_entry(kv, *value_in_change);
            base.push(order, payload).map_err(write_error)?;
        }
        Ok(())
    })?;
    let mut out = KeyBucket { bucket: bolt.bucket(b"key"), bolt, subs: Subs::default() };
    let mut merge = BaseMerge { sorted: base.finish()?.peekable(), pending: Vec::new() };
    view.changes_below_compaction(&pages_end, |changes| merge.feed(changes, &mut out))?;
    merge.write_below(Revision::MAX, &mut out)?;
    view.events_through(revision, |changes| {
        for change in &changes {
            match change.kind {
                EventKind::Put => out.put(&change.kv)?,
                EventKind::Delete => out.tombstone(&change.kv.key, change.revision())?,
            }
        }
        Ok(())
    })?;
    let KeyBucket { bucket, bolt, .. } = out;
    bucket.finish(bolt)?;
    Ok(())
}

/// Every bucket but `key`: small, built from the view's copied parts.
fn small_buckets<W: Write + Seek>(view: &StateView, bolt: &mut BoltWriter<W>) -> io::Result<()> {
    let meta = view.meta();
    let mut leases: Vec<_> = meta.leases.iter().collect();
    leases.sort_by_key(|l| l.id);
    let mut bucket = bolt.bucket(b"lease");
    for lease in &leases {
        let record = LeasePb { id: lease.id, ttl: lease.ttl, remaining_ttl: 0 }.encode_to_vec();
        bucket.put(bolt, &(lease.id as u64).to_be_bytes(), &record)?;
    }
    bucket.finish(bolt)?;

    let mut records: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    records.insert(b"consistent_index".to_vec(), meta.applied.to_be_bytes().to_vec());
    if meta.compacted > 0 {
        // etcd resumes a scheduled compaction that did not finish; both at the same point
        // say it did.
        for name in ["finishedCompactRev", "scheduledCompactRev"] {
            records.insert(name.as_bytes().to_vec(), revision_key(meta.compacted, 0, false));
        }
    }
    put_all(bolt, b"meta", &records)?;

    for name in ["members", "members_removed", "cluster"] {
        bolt.bucket(name.as_bytes()).finish(bolt)?;
    }
    auth_buckets(&meta.auth, bolt)?;

    let mut ours = BTreeMap::new();
    for lease in leases {
        if let Some(name) = &lease.name {
            ours.insert(lease_name_key(lease.id), name.as_bytes().to_vec());
        }
    }
    put_all(bolt, LEASEKV_BUCKET.as_bytes(), &ours)
}

fn put_all<W: Write + Seek>(
    bolt: &mut BoltWriter<W>,
    name: &[u8],
    records: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> io::Result<()> {
    let mut bucket = bolt.bucket(name);
    for (key, value) in records {
        bucket.put(bolt, key, value)?;
    }
    bucket.finish(bolt)
}

/// `auth`, `authUsers` and `authRoles`, as etcd's auth store writes them.
fn auth_buckets<W: Write + Seek>(auth: &AuthStore, bolt: &mut BoltWriter<W>) -> io::Result<()> {
    let mut settings = BTreeMap::new();
    settings.insert(b"authEnabled".to_vec(), vec![u8::from(auth.enabled)]);
    settings.insert(b"authRevision".to_vec(), auth.revision.to_be_bytes().to_vec());
    put_all(bolt, b"auth", &settings)?;
    let users = auth
        .users
        .values()
        .map(|user| {
            let record = UserPb {
                name: user.name.as_bytes().to_vec(),
                password: user.password_hash.clone().unwrap_or_default().into_bytes(),
                roles: user.roles.iter().cloned().collect(),
                options: Some(UserAddOptionsPb { no_password: user.password_hash.is_none() }),
            };
            (user.name.as_bytes().to_vec(), record.encode_to_vec())
        })
        .collect();
    put_all(bolt, b"authUsers", &users)?;
    let roles = auth
        .roles
        .values()
        .map(|role| {
            let key_permission = role
                .permissions
                .iter()
                .map(|p| PermissionPb {
                    perm_type: match p.kind {
                        PermissionKind::Read => 0,
                        PermissionKind::Write => 1,
                        PermissionKind::ReadWrite => 2,
                    },
                    key: p.key.clone(),
                    range_end: p.range_end.clone(),
                })
                .collect();
            let record = RolePb { name: role.name.as_bytes().to_vec(), key_permission };
            (role.name.as_bytes().to_vec(), record.encode_to_vec())
        })
        .collect();
    put_all(bolt, b"authRoles", &roles)
}
