//! Who this node is in the cluster at start: the seed of a new cluster from `[[peers]]`, or
//! for a node joining an existing cluster (`initial_cluster_state = "existing"`, empty data
//! dir), the member list the existing members report, in which an operator added this node
//! beforehand (`etcdctl member add`). What a join learned is written to the data dir, so a
//! restart before the log reached this node starts from the same place; once the log
//! records a configuration, the seed is unused.

pub mod record;

use crate::config::{ClusterState, NodeConfig};
use crate::peer::cluster::ClusterId;
use crate::peer::proto::peer_client::PeerClient;
use crate::peer::proto::MembersRequest;
use crate::tls::connector::PeerTlsConnector;
use crate::tls::reload::Current;
use leasekv_client::{Client, ClientTls, RetryPolicy};
use leasekv_kvstore::membership::{url_address, Member, Membership};
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tonic::transport::Endpoint;

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
    /// The data dir records another cluster id than the one the configuration sets.
    #[error(
        "cluster_id = {configured} in the configuration, but this data dir belongs to cluster {recorded} ({path}); \
         a member's cluster never changes: remove cluster_id, or give the member a new data dir"
    )]
    ClusterIdChanged {
        /// The id the data dir recorded.
        recorded: u64,
        /// The id the configuration sets.
        configured: u64,
        /// The record.
        path: PathBuf,
    },
    /// A data dir with data but no record of its member id, and no id configured.
    #[error(
        "{dir} holds data but records no member id, and the configuration gives none \
         (initial_cluster_state = \"existing\" names no member); set `id` (or --id) to this member's id"
    )]
    NoMemberId {
        /// The data dir.
        dir: PathBuf,
    },
    /// The peer TLS files cannot be used to ask the members.
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The join file cannot be read or written.
    #[error("{path}: {detail}")]
    File {
        /// The file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
}

/// The seed of a new cluster: every `[[peers]]` entry a voter, named as listed (`n<id>`
/// when not). A member listed without a client address has no client URL until it
/// publishes its own.
pub fn seed_from_config(config: &NodeConfig) -> Membership {
    Membership::seed(
        config
            .peers
            .iter()
            .map(|p| Member {
                id: p.id,
                name: p.name.clone().unwrap_or_else(|| format!("n{}", p.id.0)),
                // As written, host names included (etcd's `--initial-cluster`), so every
                // member records the same URL whatever its resolver says.
                peer_urls: vec![p
                    .peer_url
                    .clone()
                    .unwrap_or_else(|| format!("{}://{}", config.tls.peer_scheme(), p.peer_addr))],
                client_urls: p
                    .client_addr
                    .map(|addr| format!("{}://{}", config.tls.client_scheme(), addr))
                    .into_iter()
                    .collect(),
                learner: false,
            })
            .collect(),
    )
}

/// Whether `dir` holds nothing yet (missing or empty).
pub fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

/// Where this node starts from, and the cluster id its peer port checks (`None`: none, for
/// a data dir of an older build; see [`record::settle`]). `fresh` says whether the data dir
/// was empty before this start. A recorded join wins; a fresh node with `existing` joins
/// now; anything else starts from the configuration (a restarted node then follows what
/// its data dir records). The member and cluster ids the data dir recorded at its first
/// start win over what the configuration derives.
pub async fn start_point(config: &NodeConfig, fresh: bool) -> Result<(Start, Option<ClusterId>), JoinError> {
    let mut start = configured_start_point(config, fresh).await?;
    // A data dir holding a join but no record is one whose first start stopped between
    // the two writes: the join is this build's, and it is recorded now.
    let legacy = !fresh && !config.data_dir.join(JOIN_FILE).exists();
    let explicit = config.cluster_id_given.then_some(config.cluster_id);
    let checked = record::settle(&config.data_dir, &mut start, legacy, explicit)?;
    Ok((start, checked))
}

/// [`start_point`] before the data dir's cluster record is consulted.
async fn configured_start_point(config: &NodeConfig, fresh: bool) -> Result<Start, JoinError> {
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
    record::write_durably(&path, text.as_bytes()).map_err(|e| JoinError::File { path, detail: e.to_string() })?;
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
/// A member listed with a client address is asked there (MemberList); one known by its peer
/// URL only (etcd's `--initial-cluster`) on its peer port (`Peer.Members`).
async fn join(config: &NodeConfig) -> Result<Start, JoinError> {
    // This node's peer URL as the cluster added it: its own entry in the list as written (by
    // name, as etcd's `member add` output lists it), else the address it listens on.
    let own_entry = config.name.as_ref().and_then(|name| config.peers.iter().find(|p| p.name.as_ref() == Some(name)));
    let url = own_entry.and_then(|p| p.peer_url.clone()).unwrap_or_else(|| {
        format!("{}://{}", config.tls.peer_scheme(), own_entry.map_or(config.peer_addr, |p| p.peer_addr))
    });
    let client_tls = join_tls(config)?;
    let peer_tls = crate::tls::TlsState::load(&config.tls)?.peer_client;
    let mut last_error = String::from("none listed");
    let mut not_added = false;
    for peer in config.peers.iter().filter(|p| Some(*p) != own_entry) {
        let (asked, answer) = match peer.client_addr {
            Some(addr) => (addr, tokio::time::timeout(ASK_TIMEOUT, ask_client_port(addr, client_tls.as_ref())).await),
            None => {
                let addr = peer.peer_addr;
                let target = peer.peer_url.as_deref().and_then(url_address).map_or(addr.to_string(), str::to_string);
                (addr, tokio::time::timeout(ASK_TIMEOUT, ask_peer_port(&target, peer_tls.clone())).await)
            }
        };
        let (members, cluster_id) = match answer {
            Ok(Ok(list)) => list,
            Ok(Err(error)) => {
                last_error = format!("{asked}: {error}");
                continue;
            }
            Err(_) => {
                last_error = format!("{asked}: no answer within {ASK_TIMEOUT:?}");
                continue;
            }
        };
        let seed = Membership::seed(members);
        // By address: an operator may have added it as http:// or https://.
        let Some(me) = seed.members().find(|m| m.peer_urls.iter().any(|u| url_address(u) == url_address(&url))) else {
            // This member may not have applied the addition yet: the others may have.
            not_added = true;
            continue;
        };
        let me = me.id;
        if config.id.0 != 0 && config.id != me {
            return Err(JoinError::IdMismatch { configured: config.id.0, assigned: me.0, url });
        }
        let cluster_id = cluster_id.filter(|id| *id != 0).unwrap_or(config.cluster_id);
        tracing::info!(node = %me, from = %asked, members = ?seed.ids(), "joining the existing cluster");
        return Ok(Start { id: me, cluster_id, seed, joined: true });
    }
    if not_added {
        return Err(JoinError::NotAdded { url });
    }
    Err(JoinError::NoAnswer(last_error))
}

/// The members and the cluster id, from a member's client port (etcd's MemberList).
async fn ask_client_port(addr: SocketAddr, tls: Option<&ClientTls>) -> Result<(Vec<Member>, Option<u64>), String> {
    let endpoint = vec![addr.to_string()];
    let client = Client::connect_with_tls(&endpoint, RetryPolicy::default(), tls).await.map_err(|e| e.to_string())?;
    let list = client.member_list().await.map_err(|e| e.to_string())?;
    let members = list
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
    Ok((members, list.header.map(|h| h.cluster_id)))
}

/// The members and the cluster id, from a member's peer port (`Peer.Members`).
async fn ask_peer_port(
    addr: &str,
    tls: Option<Arc<Current<rustls::ClientConfig>>>,
) -> Result<(Vec<Member>, Option<u64>), String> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}")).map_err(|e| e.to_string())?;
    let channel = match tls {
        // The URI stays http://: the connector runs the TLS handshake itself.
        Some(tls) => endpoint.connect_with_connector(PeerTlsConnector::new(tls)).await,
        None => endpoint.connect().await,
    }
    .map_err(|e| e.to_string())?;
    let answer = PeerClient::new(channel).members(MembersRequest {}).await.map_err(|e| e.message().to_string())?;
    let answer = answer.into_inner();
    let members = answer
        .members
        .into_iter()
        .map(|m| Member {
            id: NodeId(m.id),
            name: m.name,
            peer_urls: m.peer_urls,
            client_urls: m.client_urls,
            learner: m.learner,
        })
        .collect();
    Ok((members, Some(answer.cluster_id)))
}
