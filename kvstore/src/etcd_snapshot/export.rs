//! Writes a leasekv state, read from a [`StateView`], as an etcd snapshot file: the bbolt
//! database etcd 3.4–3.6 keeps, in etcd's buckets and record encodings ([`super::etcd`]
//! documents them), followed by the SHA-256 etcd's snapshot stream appends. This is what
//! `Maintenance.Snapshot` streams, so `etcdctl snapshot status` and `etcdctl snapshot
//! restore` read leasekv's backups as they read etcd's.
//!
//! The `key` bucket holds what etcd's would after a compaction at the same point: every key
//! live at the compaction point at its last change before it (the view's keys at that
//! revision), then every retained change in order, deletions as tombstones. etcd's
//! revisions are (main, sub) pairs; the changes of one revision (a transaction's) get subs
//! in the order they were made, and the keys live at the compaction point, whose original
//! subs are not kept, get them in key order.
//!
//! What etcd's format has no place for goes in a bucket of leasekv's own, `leasekv`, which
//! etcd never opens: the lease names (`lease-name/` and the 8-byte big-endian id).
//!
//! Left empty: `members`, `members_removed` and `cluster` (a restore starts a new cluster,
//! and etcd's restore clears them anyway); `meta` holds no `storageVersion`, because etcd
//! 3.4.31+ refuses to start on one naming a later version.
//!
//! Memory: the keys live at the compaction point are sorted by revision through
//! [`SpillSort`] (32 MiB held, the rest in temporary runs); everything else streams page
//! by page from the view into bbolt pages.

use super::bbolt_write::{BoltWriter, PAGE_SIZE};
use super::etcd::{
    lease_name_key, KeyValuePb, LeasePb, PermissionPb, RolePb, UserAddOptionsPb, UserPb, LEASEKV_BUCKET,
};
use super::spill_sort::SpillSort;
use crate::auth::{AuthStore, PermissionKind};
use crate::engine::EngineError;
use crate::state::StateView;
use crate::types::{EventKind, KeyValue, Revision};
use prost::Message;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What the sort of the keys live at the compaction point holds in memory.
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

/// Reads the first `content` bytes of `file` back and appends their SHA-256.
fn append_sha256(file: &mut File, content: u64) -> io::Result<()> {
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
    KeyValuePb {
        key: kv.key.clone(),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value.clone(),
        lease: kv.lease,
    }
    .encode_to_vec()
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

/// The `key` bucket: the keys live at the compaction point in revision order, then the
/// retained changes from the first one not among them.
fn key_bucket<W: Write + Seek>(view: &StateView, bolt: &mut BoltWriter<W>, scratch: &Path) -> Result<(), ExportError> {
    let meta = view.meta();
    let mut base = SpillSort::new(scratch, SORT_BUDGET);
    if meta.compacted > 0 {
        let mut failed = None;
        view.keys_at(meta.compacted, |kvs| {
            for kv in kvs {
                let mut order = kv.mod_revision.to_be_bytes().to_vec();
                order.extend_from_slice(&kv.key);
                if let Err(e) = base.push(order, key_value_pb(&kv)) {
                    failed = Some(e);
                    return Err(EngineError::io("sorting the keys of a snapshot", io::Error::other("see above")));
                }
            }
            Ok(())
        })
        .map_err(|e| failed.take().map_or(ExportError::State(e), ExportError::Io))?;
        // leasekv keeps the changes made at the compaction point with the value each
        // replaced (etcd does not: its compaction keeps one record per key at or below
        // the point). Those values go in too, below the point, so that the history read
        // back has them; etcd reads them as records a later compaction removes.
        view.events_through(meta.compacted, |changes| {
            for prev in changes.iter().filter_map(|e| e.prev_kv.as_ref()) {
                let mut order = prev.mod_revision.to_be_bytes().to_vec();
                order.extend_from_slice(&prev.key);
                if let Err(e) = base.push(order, key_value_pb(prev)) {
                    failed = Some(e);
                    return Err(EngineError::io("sorting the keys of a snapshot", io::Error::other("see above")));
                }
            }
            Ok(())
        })
        .map_err(|e| failed.take().map_or(ExportError::State(e), ExportError::Io))?;
    }
    let mut base = Some(base.finish()?);
    let mut bucket = bolt.bucket(b"key");
    let mut subs = Subs::default();
    let mut io_error: Option<io::Error> = None;
    // The keys live at the compaction point go first, those below `until` (a change at
    // `until` or later is in the history too, which writes it).
    let mut write_base = |until: Revision, bucket: &mut super::bbolt_write::Bucket, bolt: &mut BoltWriter<W>| {
        for pair in base.take().into_iter().flatten() {
            let (order, record) = pair?;
            let main = Revision::from_be_bytes(order[..8].try_into().map_err(|_| io::Error::other("a sort key"))?);
            if main < until {
                bucket.put(bolt, &revision_key(main, subs.next(main), false), &record)?;
            }
        }
        Ok::<(), io::Error>(())
    };
    let mut events_subs = Subs::default();
    let mut started = false;
    let result = view.events_through(meta.revision, |page| {
        let mut write = || -> io::Result<()> {
            if !started {
                started = true;
                write_base(page.first().map_or(Revision::MAX, |e| e.revision()), &mut bucket, bolt)?;
            }
            for event in &page {
                let main = event.revision();
                let sub = events_subs.next(main);
                match event.kind {
                    EventKind::Put => bucket.put(bolt, &revision_key(main, sub, false), &key_value_pb(&event.kv))?,
                    EventKind::Delete => {
                        let tombstone = KeyValuePb { key: event.kv.key.clone(), ..Default::default() };
                        bucket.put(bolt, &revision_key(main, sub, true), &tombstone.encode_to_vec())?
                    }
                }
            }
            Ok(())
        };
        write().map_err(|e| {
            io_error = Some(e);
            EngineError::io("writing a snapshot", io::Error::other("see above"))
        })
    });
    if let Err(e) = result {
        return Err(io_error.take().map_or(ExportError::State(e), ExportError::Io));
    }
    if !started {
        write_base(Revision::MAX, &mut bucket, bolt)?;
    }
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
