//! Who this node is in the cluster at start: the seed of a new cluster from `[[peers]]`, or
//! for a node joining an existing cluster (`initial_cluster_state = "existing"`, empty data
//! dir), the member list the existing members report, in which an operator added this node
//! beforehand (`etcdctl member add`). What a join learned is written to the data dir, so a
//! restart before the log reached this node starts from the same place; once the log
//! records a configuration, the seed is unused.

use crate::config::{ClusterState, NodeConfig};
use leasekv_client::{Client, ClientTls, RetryPolicy};
use leasekv_kvstore::membership::{url_address, Member, Membership};
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// The file in the data dir recording a join.
pub const JOIN_FILE: &str = "leasekv-join.json";

/// How long each existing member is given to answer MemberList.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a node starts from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Start {
    /// This node's id.
    pub id: NodeId,
    /// The cluster id for response headers.
    pub cluster_id: u64,
    /// The configuration to open the replica with while the log records none.
    pub seed: Membership,
    /// Whether this node joined an existing cluster (it then publishes its name and client
    /// URL once running).
    pub joined: bool,
}

/// Why a joining node cannot start.
#[derive(Debug, Error)]
pub enum JoinError {
    /// No listed member answered MemberList.
    #[error("initial_cluster_state = \"existing\": no member listed in [[peers]] answered MemberList ({0})")]
    NoAnswer(String),
    /// No member has this node's peer URL.
    #[error(
        "initial_cluster_state = \"existing\": no member of the cluster has the peer URL {url}; add this node first: \
         run `etcdctl member add NAME --peer-urls={url}` (or `kvcli member add NAME --peer-urls {url}`), then start it"
    )]
    NotAdded {
        /// This node's peer URL.
        url: String,
    },
    /// The file's id disagrees with the cluster's.
    #[error(
        "this node's id is {configured} in its configuration, but the cluster added its peer URL {url} as member {assigned}; \
         set `id = {assigned}` or leave the id key out"
    )]
    IdMismatch {
        /// The id in the file.
        configured: u32,
        /// The id the cluster gave it.
        assigned: u32,
        /// This node's peer URL.
        url: String,
    },
    /// The join file cannot be read or written.
    #[error("{path}: {detail}")]
    File {
        /// The file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// The seed of a new cluster: every `[[peers]]` entry a voter named `n<id>`.
pub fn seed_from_config(config: &NodeConfig) -> Membership {
    Membership::seed(
        config
            .peers
            .iter()
            .map(|p| Member {
                id: p.id,
                name: format!("n{}", p.id.0),
                peer_urls: vec![format!("{}://{}", config.tls.peer_scheme(), p.peer_addr)],
                client_urls: vec![format!("{}://{}", config.tls.client_scheme(), p.client_addr)],
                learner: false,
            })
            .collect(),
    )
}

/// Whether `dir` holds nothing yet (missing or empty).
pub fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

/// Where this node starts from. `fresh` says whether the data dir was empty before this
/// start. A recorded join wins; a fresh node with `existing` joins now; anything else starts
/// from the configuration (a restarted node then follows what its data dir records).
pub async fn start_point(config: &NodeConfig, fresh: bool) -> Result<Start, JoinError> {
    let path = config.data_dir.join(JOIN_FILE);
    if !fresh && path.exists() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| JoinError::File { path: path.clone(), detail: e.to_string() })?;
        return serde_json::from_str(&text).map_err(|e| JoinError::File { path, detail: e.to_string() });
    }
    if !fresh || config.initial_cluster_state == ClusterState::New {
        return Ok(Start {
            id: config.id,
            cluster_id: config.cluster_id,
            seed: seed_from_config(config),
            joined: false,
        });
    }
    let start = join(config).await?;
    let text = serde_json::to_string_pretty(&start)
        .map_err(|e| JoinError::File { path: path.clone(), detail: e.to_string() })?;
    std::fs::write(&path, text).map_err(|e| JoinError::File { path, detail: e.to_string() })?;
    Ok(start)
}

/// How a joining node reaches the members' client ports when they run TLS: it trusts the
/// client port's CA (`[tls.client] ca`, else the peer CA) and presents its peer certificate,
/// which a port that requires client certificates accepts when one CA signs both.
fn join_tls(config: &NodeConfig) -> Result<Option<ClientTls>, JoinError> {
    let Some(client) = &config.tls.client else { return Ok(None) };
    let peer = config.tls.peer.as_ref();
    let ca = client.ca.as_deref().or(peer.map(|p| p.ca.as_path())).unwrap_or(client.cert.as_path());
    ClientTls::from_files(Some(ca), peer.map(|p| p.cert.as_path()), peer.map(|p| p.key.as_path()))
        .map_err(|e| JoinError::File { path: ca.to_path_buf(), detail: e.to_string() })
}

/// Asks the listed members for the member list and finds this node in it by its peer URL.
async fn join(config: &NodeConfig) -> Result<Start, JoinError> {
    let url = format!("{}://{}", config.tls.peer_scheme(), config.peer_addr);
    let tls = join_tls(config)?;
    let mut last_error = String::from("none listed");
    for peer in &config.peers {
        let endpoint = vec![peer.client_addr.to_string()];
        let answer = tokio::time::timeout(ASK_TIMEOUT, async {
            let client = Client::connect_with_tls(&endpoint, RetryPolicy::default(), tls.as_ref()).await?;
            client.member_list().await
        })
        .await;
        let list = match answer {
            Ok(Ok(list)) => list,
            Ok(Err(error)) => {
                last_error = format!("{}: {error}", peer.client_addr);
                continue;
            }
            Err(_) => {
                last_error = format!("{}: no answer within {ASK_TIMEOUT:?}", peer.client_addr);
                continue;
            }
        };
        let members: Vec<Member> = list
            .members
            .iter()
            .filter_map(|m| {
                Some(Member {
                    id: NodeId(u32::try_from(m.id).ok()?),
                    name: m.name.clone(),
                    peer_urls: m.peer_urls.clone(),
                    client_urls: m.client_urls.clone(),
                    learner: m.is_learner,
                })
            })
            .collect();
        let seed = Membership::seed(members);
        // By address: an operator may have added it as http:// or https://.
        let me = seed
            .members()
            .find(|m| m.peer_urls.iter().any(|u| url_address(u) == url_address(&url)))
            .ok_or(JoinError::NotAdded { url: url.clone() })?
            .id;
        if config.id.0 != 0 && config.id != me {
            return Err(JoinError::IdMismatch { configured: config.id.0, assigned: me.0, url });
        }
        let cluster_id = list.header.map_or(config.cluster_id, |h| h.cluster_id);
        tracing::info!(node = %me, from = %peer.client_addr, members = ?seed.ids(), "joining the existing cluster");
        return Ok(Start { id: me, cluster_id, seed, joined: true });
    }
    Err(JoinError::NoAnswer(last_error))
}
