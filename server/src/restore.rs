//! `kvserver restore`: a new member's data directory from a backup file, as `etcdctl
//! snapshot restore` builds one from etcd's.
//!
//! Two kinds of file are accepted, told apart by their content ([`backup::decode_file`]):
//! etcd's snapshot files (a bbolt database, as `etcdctl snapshot save` writes against etcd
//! 3.4–3.6 and against leasekv, whose backups are in etcd's format), imported by
//! [`leasekv_kvstore::etcd_snapshot`], and leasekv's backups of the older format (they start
//! with [`backup::MAGIC`]). Anything else is refused as not a snapshot.
//!
//! Every member of the new cluster gets the same state, stored as the snapshot its log
//! starts after (slot 0: the new cluster's log begins at slot 1, as a brand-new one's
//! does). The state is taken [`StateMachine::for_new_cluster`]: keys, leases, revisions
//! and history as they were, nothing of the old cluster's masters. Leases start a full TTL
//! when the new cluster's first master takes over (etcd does the same after a restore).

use leasekv_kvstore::backup::{self, BackupError, BackupFileError};
use leasekv_kvstore::etcd_snapshot::EtcdSnapshotError;
use leasekv_kvstore::storage::{SledStorage, SnapshotRecord, Storage, StorageError};
use leasekv_kvstore::Revision;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a data directory could not be restored.
#[derive(Debug, Error)]
pub enum RestoreError {
    /// The backup file could not be read.
    #[error("cannot read snapshot file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The backup file is not a usable snapshot.
    #[error("snapshot file {path}: {source}")]
    Backup {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: BackupError,
    },
    /// The file is an etcd snapshot (a bbolt database) that cannot be imported.
    #[error("etcd snapshot file {path}: {source}")]
    Etcd {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: EtcdSnapshotError,
    },
    /// The data directory already holds something: restoring never overwrites data.
    #[error("data dir {0} is not empty: restore only into a new or empty directory (move the old one away first)")]
    NotEmpty(PathBuf),
    /// Writing the data directory failed.
    #[error("data dir {dir}: {source}")]
    Storage {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        source: StorageError,
    },
}

/// What a restore wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The store revision restored.
    pub revision: Revision,
    /// Keys restored.
    pub keys: usize,
    /// Leases restored.
    pub leases: usize,
}

/// Writes into `data_dir` (new or empty) a member's state restored from the backup file
/// `snapshot`, durably: when this returns, a `kvserver` started on `data_dir` serves it.
pub fn restore(snapshot: &Path, data_dir: &Path) -> Result<Restored, RestoreError> {
    let bytes =
        std::fs::read(snapshot).map_err(|source| RestoreError::Read { path: snapshot.to_path_buf(), source })?;
    let path = || snapshot.to_path_buf();
    let machine = backup::decode_file(&bytes)
        .map_err(|error| match error {
            BackupFileError::Etcd(source) => RestoreError::Etcd { path: path(), source },
            BackupFileError::Leasekv(source) => RestoreError::Backup { path: path(), source },
        })?
        .for_new_cluster();
    let occupied = match std::fs::read_dir(data_dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            let source = StorageError::backend(format!("cannot read {}", data_dir.display()), e);
            return Err(RestoreError::Storage { dir: data_dir.to_path_buf(), source });
        }
    };
    if occupied {
        return Err(RestoreError::NotEmpty(data_dir.to_path_buf()));
    }
    let storage_error = |source| RestoreError::Storage { dir: data_dir.to_path_buf(), source };
    let mut storage = SledStorage::open(data_dir).map_err(storage_error)?;
    storage
        .save_snapshot(&SnapshotRecord { index: 0, data: machine.to_snapshot_bytes().into() })
        .map_err(storage_error)?;
    storage.sync().map_err(storage_error)?;
    Ok(Restored { revision: machine.revision(), keys: machine.key_count(), leases: machine.lease_count() })
}
