//! What a data dir records of its member's identity (`leasekv-cluster.json`): the cluster id
//! and the member id it was created with. Written at the first start, preferred at every
//! start after it, so that what the configuration derives them from (the peer list, the
//! names in etcd's `--initial-cluster`) may change without changing who the member is, as
//! etcd ignores its `--initial-*` flags once a data dir exists.

use super::{JoinError, Start};
use crate::peer::cluster::ClusterId;
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// The file in the data dir recording the cluster's and this member's ids.
pub const CLUSTER_FILE: &str = "leasekv-cluster.json";

/// What [`CLUSTER_FILE`] holds. Readers ignore fields they do not know, so it may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityRecord {
    /// The cluster id: in response headers, and on every peer request (see
    /// [`crate::peer::cluster`]).
    pub cluster_id: u64,
    /// This member's id.
    pub member_id: u32,
}

/// The record in `data_dir`, if there is one.
pub fn read(data_dir: &Path) -> Result<Option<IdentityRecord>, JoinError> {
    let path = data_dir.join(CLUSTER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| JoinError::File { path, detail: e.to_string() }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(JoinError::File { path, detail: error.to_string() }),
    }
}

/// Records `record` in `data_dir`, durably (see [`write_durably`]).
pub fn write(data_dir: &Path, record: IdentityRecord) -> Result<(), JoinError> {
    let path = data_dir.join(CLUSTER_FILE);
    let text = serde_json::to_string_pretty(&record)
        .map_err(|e| JoinError::File { path: path.clone(), detail: e.to_string() })?;
    write_durably(&path, text.as_bytes()).map_err(|e| JoinError::File { path, detail: e.to_string() })
}

/// Writes `bytes` to `path` so that a crash or a power loss leaves the old file or the new
/// one, never a part: a temporary file beside it, synced, renamed over it, and the
/// directory synced so the rename is durable too.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = dir.join(format!(".{file_name}.tmp"));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Settles who this member is from `start` (what the configuration or a join says) and the
/// data dir's record, and returns the cluster id the peer port checks (`None`: none, see
/// below).
///
/// - A recorded identity wins: the member id and cluster id the data dir was created with
///   (a configuration that says otherwise is logged). A `cluster_id` set explicitly in the
///   configuration that disagrees with the record stops the start, since changing it would
///   do nothing.
/// - A fresh data dir, or one a join just wrote to, records `start`.
/// - A data dir written by a build from before the record (`legacy`) records nothing and
///   checks nothing, unless `cluster_id` is set explicitly: the id it would derive comes
///   from the peer list, which its operator may have edited differently on each member, and
///   members refusing each other would split the cluster. It still serves under the derived
///   id, as the build before did.
pub fn settle(
    data_dir: &Path,
    start: &mut Start,
    legacy: bool,
    explicit_cluster_id: Option<u64>,
) -> Result<Option<ClusterId>, JoinError> {
    if let Some(record) = read(data_dir)? {
        if let Some(explicit) = explicit_cluster_id.filter(|id| *id != record.cluster_id) {
            return Err(JoinError::ClusterIdChanged {
                recorded: record.cluster_id,
                configured: explicit,
                path: data_dir.join(CLUSTER_FILE),
            });
        }
        if start.id.0 != 0 && start.id.0 != record.member_id {
            tracing::warn!(
                recorded = record.member_id,
                configured = start.id.0,
                "this data dir was created as another member than the configuration says; the data dir's id stays"
            );
        }
        start.id = NodeId(record.member_id);
        start.cluster_id = record.cluster_id;
        return Ok(Some(ClusterId(record.cluster_id)));
    }
    if start.id.0 == 0 {
        return Err(JoinError::NoMemberId { dir: data_dir.to_path_buf() });
    }
    if legacy {
        match explicit_cluster_id {
            Some(explicit) => start.cluster_id = explicit,
            None => {
                tracing::info!(
                    "this data dir records no cluster id (a build from before the record wrote it): peer requests are \
                     not checked for their cluster until `cluster_id` is set in the configuration"
                );
                return Ok(None);
            }
        }
    }
    write(data_dir, IdentityRecord { cluster_id: start.cluster_id, member_id: start.id.0 })?;
    Ok(Some(ClusterId(start.cluster_id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_kvstore::membership::Membership;

    fn start(id: u32, cluster_id: u64) -> Start {
        Start { id: NodeId(id), cluster_id, seed: Membership::of_voters(&[NodeId(1)]), joined: false }
    }

    #[test]
    fn the_first_start_records_and_later_starts_keep_it_whatever_the_configuration_derives() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut first = start(2, 7);
        assert_eq!(settle(dir.path(), &mut first, false, None).expect("recorded"), Some(ClusterId(7)));
        // The peer list was edited (another derived cluster id) and the names re-sorted
        // (another derived member id): the data dir's identity stays.
        let mut later = start(3, 9);
        assert_eq!(settle(dir.path(), &mut later, false, None).expect("kept"), Some(ClusterId(7)));
        assert_eq!((later.id, later.cluster_id), (NodeId(2), 7));
        // A restart with `initial-cluster-state existing` (no id configured) is the same member.
        let mut existing = start(0, 9);
        settle(dir.path(), &mut existing, false, None).expect("kept");
        assert_eq!(existing.id, NodeId(2));
        // An explicit cluster_id that disagrees stops the start.
        let error = settle(dir.path(), &mut start(2, 9), false, Some(9)).expect_err("changed");
        assert!(error.to_string().contains(CLUSTER_FILE), "{error}");
    }

    #[test]
    fn a_data_dir_of_an_older_build_checks_nothing_until_a_cluster_id_is_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(settle(dir.path(), &mut start(1, 7), true, None).expect("legacy"), None);
        assert_eq!(read(dir.path()).expect("readable"), None, "nothing recorded");
        let mut given = start(1, 7);
        assert_eq!(settle(dir.path(), &mut given, true, Some(42)).expect("given"), Some(ClusterId(42)));
        assert_eq!(read(dir.path()).expect("readable"), Some(IdentityRecord { cluster_id: 42, member_id: 1 }));
        // Without a record or a join, a member that does not know its id cannot start.
        let other = tempfile::tempdir().expect("tempdir");
        assert!(settle(other.path(), &mut start(0, 7), true, None).is_err());
    }

    #[test]
    fn a_durable_write_replaces_the_whole_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f.json");
        write_durably(&path, b"a longer first version").expect("written");
        write_durably(&path, b"second").expect("written");
        assert_eq!(std::fs::read(&path).expect("read"), b"second");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
    }
}
