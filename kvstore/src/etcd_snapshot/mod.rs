//! etcd snapshot files (what `etcdctl snapshot save` writes against etcd 3.4–3.6: etcd's
//! bbolt database, possibly followed by the SHA-256 the snapshot stream appends), both
//! ways: [`decode`] reads one into a leasekv state, so that `kvserver restore` moves a store
//! from etcd to leasekv, and [`write_file`] writes a leasekv state as one (leasekv's backup
//! format, what `Maintenance.Snapshot` streams), so that `etcdctl snapshot restore` moves it
//! back, and every tool built on etcd's snapshots reads leasekv's.
//!
//! Reading:
//! What comes across: every live key with its revisions, version, value and lease; the
//! store revision and the compaction point; the MVCC history the file retains (every
//! revision since the compaction, as etcd's `key` bucket holds them); the leases with their
//! granted TTLs; users, roles, permissions, whether auth is enabled and the auth revision.
//! What does not: the members and cluster ids (the restored store starts a new cluster, as
//! `etcdctl snapshot restore` makes one), the alarms, the leases' remaining TTLs (a restored
//! lease gets a full TTL, as in etcd) and etcd's raft state (`consistent_index`, term).
//!
//! [`bbolt`] reads the page format; [`etcd`] decodes etcd's buckets (protobuf with prost)
//! and builds the state through [`StateMachine::from_imported`], whose checks are the
//! snapshot decoder's. A file leasekv wrote also carries the lease names, in a bucket of
//! its own ([`export`]).
//!
//! Writing: [`export`] turns a state view into etcd's records, [`bbolt_write`] lays them out
//! in pages as they come, in bounded memory. Nothing in the file is trusted: anything malformed is an
//! [`EtcdSnapshotError`] naming what is wrong, never a panic.

mod bbolt;
mod bbolt_write;
mod etcd;
mod export;
mod spill_sort;
mod status;

#[cfg(test)]
pub(crate) use export::append_sha256;
pub use export::{write_file, ExportError};
pub use status::{status, SnapshotStatus};

use crate::state::StateMachine;
use sha2::{Digest, Sha256};

/// Why an etcd snapshot file cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum EtcdSnapshotError {
    /// No bbolt meta page at the start of the file.
    #[error("not a bbolt file (no bbolt meta page, magic 0xED0CDAED, at its start)")]
    NotBbolt,
    /// A bbolt file of another format version.
    #[error("unsupported bbolt version {0} (etcd's bbolt files are version 2)")]
    UnsupportedVersion(u32),
    /// The SHA-256 that ends the file does not match what precedes it.
    #[error("checksum mismatch: the file is damaged (its SHA-256 does not match its content)")]
    ChecksumMismatch,
    /// Neither meta page passes its checksum.
    #[error("checksum mismatch: the file is damaged (neither bbolt meta page passes its checksum)")]
    MetaDamaged,
    /// The meta page names a page size bbolt never uses.
    #[error("bbolt page size {0} is not supported: the file is damaged")]
    BadPageSize(u32),
    /// Shorter than the pages its meta page says are in use.
    #[error("the file is truncated: its meta page says {pages} pages are in use, the file holds {in_file}")]
    Truncated {
        /// Pages in use, per the meta page.
        pages: u64,
        /// Whole pages in the file.
        in_file: u64,
    },
    /// A reference to a page that is not in the file (or is a meta page).
    #[error("page {page} points outside the file (pages 2 to {pages} hold data): the file is damaged")]
    PageOutside {
        /// The page referenced.
        page: u64,
        /// Pages in use.
        pages: u64,
    },
    /// A page reached twice: a cycle, or a page with two parents.
    #[error("page {page} is referenced twice (a cycle or a shared page): the file is damaged")]
    Cycle {
        /// The page.
        page: u64,
    },
    /// A page that does not hold what bbolt writes (page 0: an inline bucket).
    #[error("page {page}: {problem}: the file is damaged")]
    Page {
        /// The page.
        page: u64,
        /// What is wrong.
        problem: String,
    },
    /// A bucket inside an etcd bucket: etcd has none.
    #[error("bucket `{bucket}` holds a nested bucket {key:?}, which etcd never writes")]
    NestedBucket {
        /// The outer bucket.
        bucket: String,
        /// The nested bucket's name.
        key: String,
    },
    /// A bucket every etcd database has is missing: not an etcd file.
    #[error("etcd snapshot has no `{0}` bucket (is this an etcd database?)")]
    MissingBucket(&'static str),
    /// One record that does not decode as etcd writes it.
    #[error("etcd snapshot: bucket `{bucket}`, key {key:?}: {problem}")]
    Record {
        /// The bucket.
        bucket: String,
        /// The record's key (lossy UTF-8, or hex for binary keys).
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// Records that decode but contradict each other.
    #[error("etcd snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

/// The SHA-256 etcd's snapshot stream appends after the database.
const HASH_LEN: usize = 32;
/// bbolt pages are multiples of this; a file this long plus [`HASH_LEN`] carries the hash
/// (etcd's own test in `etcdctl snapshot restore`).
const BLOCK: usize = 512;

/// Whether `bytes` is a bbolt database (its first meta page's magic number), which is what
/// an etcd snapshot file is; it may still be damaged or not etcd's.
pub fn looks_like_bbolt(bytes: &[u8]) -> bool {
    bbolt::looks_like_bbolt(bytes)
}

/// The leasekv state an etcd snapshot file holds, checked: its SHA-256 when it carries one,
/// the bbolt pages, every etcd record, and the consistency the state machine requires.
pub fn decode(bytes: &[u8]) -> Result<StateMachine, EtcdSnapshotError> {
    let db = database(bytes)?;
    if !looks_like_bbolt(db) {
        return Err(EtcdSnapshotError::NotBbolt);
    }
    etcd::import(&bbolt::Db::open(db)?.buckets()?, origin(db))
}

/// The database in a snapshot file: the file without the SHA-256 that ends it, checked,
/// when it carries one (etcd's own test: the length is pages plus the hash), else the file.
fn database(bytes: &[u8]) -> Result<&[u8], EtcdSnapshotError> {
    if bytes.len() % BLOCK != HASH_LEN {
        return Ok(bytes);
    }
    let (db, hash) = bytes.split_at(bytes.len() - HASH_LEN);
    match Sha256::digest(db).as_slice() == hash {
        true => Ok(db),
        false => Err(EtcdSnapshotError::ChecksumMismatch),
    }
}

/// A number that differs between databases, seeding what must be equal on every member
/// restored from the same one and should differ between them (the running digest, the
/// token signing key). Taken over the database without the stream's hash, so that the
/// database file and a snapshot of it give the same state.
fn origin(bytes: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"leasekv etcd import\n");
    hasher.update(bytes);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod round_trip;
