//! The configuration files of the clusters that the process tests, the benchmarks,
//! `scalebench` and the chaos harness start: one typed builder that serializes with serde,
//! instead of each writing TOML with `format!`. Its fields are the keys of
//! docs/configuration.md; settings it has no field for come as TOML text
//! ([`NodeFile::with_extra`]) and are merged in, table by table. Every file it writes is one
//! `kvserver` accepts (`the_files_written_are_what_kvserver_reads`).

use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One `[[peers]]` entry: a member of the cluster to be.
#[derive(Debug, Clone, Serialize)]
pub struct PeerEntry {
    /// The member's node id.
    pub id: u32,
    /// Its etcd v3 API address.
    pub client_addr: SocketAddr,
    /// Its election and log replication address.
    pub peer_addr: SocketAddr,
}

/// `[election]`.
#[derive(Debug, Clone, Serialize)]
pub struct Election {
    /// `paxoslease` or `lease-tracker`.
    pub backend: String,
    /// The master lease T, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_time_ms: Option<u64>,
    /// The bound on clock rate error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_bound: Option<f64>,
}

/// One node's configuration file.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFile {
    /// The node's id; `None` for a node joining an existing cluster, which learns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    /// Reported in response headers; `None` derives it from the members.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<u64>,
    /// The etcd v3 API listen address.
    pub client_addr: SocketAddr,
    /// The election and log replication listen address.
    pub peer_addr: SocketAddr,
    /// Where the node keeps its data.
    pub data_dir: PathBuf,
    /// `existing` to join a running cluster; `None` (`new`) to seed one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_cluster_state: Option<String>,
    /// The newest peer protocol version the node speaks; `None` for the build's newest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_protocol_version: Option<u32>,
    /// The members of a new cluster, or the members to ask when joining.
    pub peers: Vec<PeerEntry>,
    /// `[election]`.
    pub election: Election,
    /// Further settings, merged over the ones above (see [`NodeFile::with_extra`]).
    #[serde(skip)]
    pub extra: toml::Table,
}

/// Why a configuration could not be built or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeFileError {
    /// The extra settings are not TOML.
    #[error("the extra settings are not TOML: {0}")]
    Extra(#[from] toml::de::Error),
    /// The file could not be serialized (a bug in the builder).
    #[error("the configuration does not serialize: {0}")]
    Serialize(#[from] toml::ser::Error),
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl NodeFile {
    /// Node `id` of a new cluster of `peers`, listening where its entry says, with its data
    /// in `data_dir`, electing with `backend` and the lease time the tests and benchmarks
    /// use (800 ms).
    pub fn member(id: u32, peers: &[PeerEntry], data_dir: &Path, backend: &str) -> NodeFile {
        let me = peers.iter().find(|p| p.id == id).cloned().unwrap_or_else(|| peers[0].clone());
        NodeFile {
            id: Some(id),
            cluster_id: None,
            client_addr: me.client_addr,
            peer_addr: me.peer_addr,
            data_dir: data_dir.to_path_buf(),
            initial_cluster_state: None,
            peer_protocol_version: None,
            peers: peers.to_vec(),
            election: Election { backend: backend.to_string(), lease_time_ms: Some(800), drift_bound: None },
            extra: toml::Table::new(),
        }
    }

    /// The members `1..=n` of a cluster on 127.0.0.1 with these ports.
    pub fn local_peers(client_ports: &[u16], peer_ports: &[u16]) -> Vec<PeerEntry> {
        client_ports
            .iter()
            .zip(peer_ports)
            .enumerate()
            .map(|(i, (&client, &peer))| PeerEntry {
                id: u32::try_from(i + 1).unwrap_or(u32::MAX),
                client_addr: SocketAddr::from(([127, 0, 0, 1], client)),
                peer_addr: SocketAddr::from(([127, 0, 0, 1], peer)),
            })
            .collect()
    }

    /// Merges the TOML `text` over the settings so far: a table of `text` adds its keys to
    /// the table of the same name (e.g. `"[log]\nsnapshot_every = 40"`), a key replaces the
    /// key of the same name.
    pub fn with_extra(mut self, text: &str) -> Result<NodeFile, NodeFileError> {
        let extra: toml::Table = text.parse()?;
        merge(&mut self.extra, extra);
        Ok(self)
    }

    /// The file's text.
    pub fn to_toml(&self) -> Result<String, NodeFileError> {
        let mut table = toml::Table::try_from(self)?;
        merge(&mut table, self.extra.clone());
        Ok(toml::to_string(&table)?)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: &Path) -> Result<(), NodeFileError> {
        std::fs::write(path, self.to_toml()?)
            .map_err(|source| NodeFileError::Write { path: path.to_path_buf(), source })
    }
}

/// Merges `extra` into `base`: tables key by key, anything else replaced.
fn merge(base: &mut toml::Table, extra: toml::Table) {
    for (key, value) in extra {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(into)), toml::Value::Table(from)) => merge(into, from),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_server::config::{NodeConfig, Overrides};

    fn three() -> Vec<PeerEntry> {
        NodeFile::local_peers(&[12379, 22379, 32379], &[12380, 22380, 32380])
    }

    #[test]
    fn the_files_written_are_what_kvserver_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = NodeFile::member(2, &three(), &dir.path().join("data2"), "paxoslease")
            .with_extra("peer_protocol_version = 2\n[log]\nsnapshot_every = 40\n[election]\ndrift_bound = 0.02\n")
            .expect("TOML");
        let path = dir.path().join("n2.toml");
        file.write(&path).expect("written");
        let config = NodeConfig::load(Some(&path), &Overrides::default()).expect("kvserver reads it");
        assert_eq!(config.id.0, 2);
        assert_eq!(config.client_addr, SocketAddr::from(([127, 0, 0, 1], 22379)));
        assert_eq!(config.peers.len(), 3);
        assert_eq!(config.election.lease_time, std::time::Duration::from_millis(800));
        assert_eq!(config.election.drift_bound, 0.02, "a key merged into a table the builder writes");
        assert_eq!(config.log.snapshot_every, 40);
        assert_eq!(config.peer_protocol.newest(), 2);
    }

    #[test]
    fn a_joining_node_has_no_id_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = NodeFile::member(1, &three(), dir.path(), "paxoslease");
        file.id = None;
        file.client_addr = SocketAddr::from(([127, 0, 0, 1], 42379));
        file.peer_addr = SocketAddr::from(([127, 0, 0, 1], 42380));
        file.initial_cluster_state = Some("existing".into());
        let text = file.to_toml().expect("serializes");
        let table: toml::Table = text.parse().expect("TOML");
        assert!(!table.contains_key("id"), "{text}");
        assert!(text.contains("initial_cluster_state = \"existing\""), "{text}");
    }

    #[test]
    fn extra_text_that_is_not_toml_is_an_error() {
        let file = NodeFile::member(1, &three(), Path::new("/tmp/x"), "paxoslease");
        assert!(matches!(file.with_extra("[log"), Err(NodeFileError::Extra(_))));
    }
}
