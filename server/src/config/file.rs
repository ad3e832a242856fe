//! The TOML file format, as written by operators, and its resolution into a [`NodeConfig`]:
//! command-line overrides first, then defaults for whatever is still unset.
//!
//! The file structs keep every setting optional so that an override can supply what the file
//! leaves out, and so that defaults that depend on other settings (the max lease time on the
//! lease time, the log tuning on the lease time) are derived from the final values.

use super::error::{ConfigError, ConfigErrorKind, Origin, Position};
use super::etcd::EtcdLayer;
use super::{
    ClientLimits, ClusterState, CompactionPolicy, ElectionConfig, LogConfig, NodeConfig, Overrides, PeerConfig,
    RuntimeConfig, WatchConfig,
};
use crate::peer::version::{Speaks, OLDEST_PEER_PROTOCOL_VERSION, PEER_PROTOCOL_VERSION};
use crate::tls::{ClientPortTls, PeerPortTls, TlsSettings};
use leasekv_kvstore::log::ReplicaConfig;
use leasekv_kvstore::Limits;
use leasekv_lease::{BackendKind, LeaseConfig, NodeId};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// One node's configuration file. Unknown fields are errors, so a typo is reported with its
/// name and position instead of silently leaving a default in place.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    id: Option<u32>,
    name: Option<String>,
    client_addr: Option<SocketAddr>,
    #[serde(default)]
    extra_client_addrs: Vec<SocketAddr>,
    #[serde(default)]
    advertise_client_urls: Vec<String>,
    peer_addr: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    cluster_id: Option<u64>,
    initial_cluster_token: Option<String>,
    peer_protocol_version: Option<Spanned<u32>>,
    initial_cluster_state: Option<Spanned<String>>,
    #[serde(default)]
    peers: Vec<FilePeer>,
    #[serde(default)]
    election: FileElection,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    storage: FileStorage,
    #[serde(default)]
    log: FileLog,
    #[serde(default)]
    compaction: FileCompaction,
    #[serde(default)]
    watch: FileWatch,
    #[serde(default)]
    runtime: FileRuntime,
    #[serde(default)]
    tls: FileTls,
    #[serde(default)]
    console: FileConsole,
    #[serde(default)]
    reads: FileReads,
}

/// `[reads]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReads {
    leases: Option<bool>,
    lease_time_ms: Option<u64>,
    learners: Option<bool>,
    reader_threads: Option<usize>,
    memory_budget_bytes: Option<u64>,
}

/// `[console]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConsole {
    mode: Option<super::ConsoleMode>,
}

/// `[tls]`: `[tls.client]` and `[tls.peer]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTls {
    client: Option<FileClientTls>,
    peer: Option<FilePeerTls>,
}

/// `[tls.client]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClientTls {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
    #[serde(default)]
    require_client_cert: bool,
}

/// `[tls.peer]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePeerTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// One `[[peers]]` entry: a member and the addresses the others reach it at.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePeer {
    id: u32,
    name: Option<String>,
    client_addr: Option<SocketAddr>,
    peer_addr: SocketAddr,
}

/// `[election]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileElection {
    /// Spanned so that an unknown name is reported at its line and column.
    backend: Option<Spanned<String>>,
    lease_time_ms: Option<u64>,
    max_lease_time_ms: Option<u64>,
    drift_bound: Option<f64>,
    tracker: Option<u32>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_key_bytes: Option<usize>,
    max_value_bytes: Option<usize>,
    max_txn_ops: Option<usize>,
    max_lease_name_bytes: Option<usize>,
    max_request_bytes: Option<usize>,
    max_client_connections: Option<usize>,
    max_concurrent_streams: Option<u32>,
    max_watchers_per_stream: Option<usize>,
    max_queued_requests: Option<usize>,
    max_leases: Option<usize>,
    max_response_bytes: Option<u64>,
}

/// `[storage]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStorage {
    quota_bytes: Option<u64>,
    corrupt_check_interval_ms: Option<u64>,
    cache_bytes: Option<u64>,
    engine_flush_ms: Option<u64>,
}

/// `[log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLog {
    snapshot_every: Option<u64>,
    retain_after_snapshot: Option<u64>,
    max_batch_commands: Option<usize>,
    max_inflight_slots: Option<usize>,
}

/// `[compaction]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCompaction {
    mode: Option<String>,
    retention: Option<Retention>,
}

/// A retention written as a number (`retention = 10000`) or a string (`"5m"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Retention {
    Number(u64),
    Text(String),
}

/// `[watch]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWatch {
    progress_notify_interval_ms: Option<u64>,
}

/// `[runtime]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRuntime {
    worker_threads: Option<usize>,
}

/// Parses `text`; syntax, type and unknown-field errors carry their line and column.
pub(super) fn parse(text: &str, origin: &Origin) -> Result<FileConfig, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let error = ConfigError::new(origin.clone(), ConfigErrorKind::Syntax(e.message().trim().to_string()));
        match e.span() {
            Some(span) => error.at(Position::of_offset(text, span.start)),
            None => error,
        }
    })
}

/// Applies `overrides` to `file`, fills in defaults, and returns the configuration (not yet
/// validated). `text` is the file's text, for positions in errors.
pub(super) fn resolve(
    mut file: FileConfig,
    text: &str,
    origin: &Origin,
    overrides: &Overrides,
) -> Result<NodeConfig, ConfigError> {
    let err = |kind| ConfigError::new(origin.clone(), kind);
    let etcd_err = |kind| ConfigError::new(Origin::Etcd, kind);
    let etcd = EtcdLayer::of(&overrides.etcd).map_err(|e| etcd_err(ConfigErrorKind::Etcd(e)))?;
    // Started with etcd's settings and no file, the embedded single node's identity (id 1,
    // its addresses and data dir) is no setting of the operator's: etcd's defaults and what
    // the etcd settings say of this member take its place.
    if *origin == Origin::Builtin && !overrides.etcd.is_empty() {
        file.id = None;
        file.client_addr = None;
        file.peer_addr = None;
        file.data_dir = None;
    }

    let file_cluster_state = match &file.initial_cluster_state {
        None => ClusterState::New,
        Some(state) => match state.get_ref().as_str() {
            "new" => ClusterState::New,
            "existing" => ClusterState::Existing,
            other => {
                return Err(err(ConfigErrorKind::UnknownClusterState(other.to_string()))
                    .at(Position::of_offset(text, state.span().start)))
            }
        },
    };
    let initial_cluster_state = etcd.cluster_state.unwrap_or(file_cluster_state);
    let name = etcd.name.clone().or(file.name);
    // A new cluster's member finds itself in --initial-cluster by name (etcd's rule); a
    // joining one is given its id by the cluster.
    let etcd_me = match (etcd.initial_cluster.is_empty(), initial_cluster_state) {
        (true, _) | (false, ClusterState::Existing) => None,
        (false, ClusterState::New) => Some(etcd.me_in_initial_cluster().ok_or_else(|| {
            etcd_err(ConfigErrorKind::NameNotInInitialCluster {
                name: etcd.name.clone().unwrap_or_else(|| "default".into()),
            })
        })?),
    };
    if let (Some((_, me)), Some(advertised)) = (etcd_me, etcd.advertise_peer_addr) {
        if me.peer_addr != advertised {
            return Err(etcd_err(ConfigErrorKind::AdvertisedPeerMismatch {
                name: me.name.clone(),
                advertised,
                listed: me.peer_url.clone(),
            }));
        }
    }
    // A joining node learns its id from the cluster; 0 stands for "not given".
    // Without --initial-cluster, etcd's default is a cluster of this member alone.
    let lone_etcd_member =
        (!overrides.etcd.is_empty() && etcd.initial_cluster.is_empty() && initial_cluster_state == ClusterState::New)
            .then_some(1);
    let id = match (overrides.id.or(etcd_me.map(|(id, _)| id)).or(file.id).or(lone_etcd_member), initial_cluster_state)
    {
        (Some(id), _) => id,
        (None, ClusterState::Existing) => 0,
        (None, ClusterState::New) => {
            return Err(err(ConfigErrorKind::Missing {
                field: "id",
                hint: "set `id = N` (N ≥ 1) in the file or pass --id",
            }))
        }
    };
    let client_addr = overrides
        .client_addr
        .or(etcd.client_addrs.first().copied())
        .or(file.client_addr)
        .unwrap_or(super::DEFAULT_CLIENT_ADDR);
    let extra_client_addrs =
        if etcd.client_addrs.is_empty() { file.extra_client_addrs } else { etcd.client_addrs[1..].to_vec() };
    let advertise_client_urls_empty = etcd.advertise_client_urls.is_empty() && file.advertise_client_urls.is_empty();
    let advertise_client_urls = if etcd.advertise_client_urls.is_empty() {
        file.advertise_client_urls
    } else {
        etcd.advertise_client_urls.clone()
    };
    // Without --listen-peer-urls, a member listens where it advertises itself, or where
    // --initial-cluster lists it (etcd would listen on localhost:2380, where the others
    // cannot reach it); what etcd's flags say of this member wins over the file.
    let peer_addr = overrides
        .peer_addr
        .or(etcd.peer_addr)
        .or(etcd.advertise_peer_addr)
        .or_else(|| etcd.me_in_initial_cluster().map(|(_, me)| me.peer_addr))
        .or(file.peer_addr)
        .unwrap_or(super::DEFAULT_PEER_ADDR);
    let data_dir = overrides
        .data_dir
        .clone()
        .or(etcd.data_dir.clone())
        .or(file.data_dir)
        .or(etcd.default_data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(super::DEFAULT_DATA_DIR));

    let peers = if !etcd.initial_cluster.is_empty() {
        etcd.initial_cluster_ids()
            .into_iter()
            .map(|(id, m)| PeerConfig {
                id: NodeId(id),
                name: Some(m.name.clone()),
                client_addr: None,
                peer_addr: m.peer_addr,
                peer_url: Some(m.peer_url.clone()),
            })
            .collect()
    } else if file.peers.is_empty() && initial_cluster_state == ClusterState::New {
        // Without [[peers]] the node is a cluster of one: itself, at the addresses it
        // listens on.
        vec![PeerConfig {
            id: NodeId(id),
            name: name.clone(),
            client_addr: Some(client_addr),
            peer_addr,
            peer_url: None,
        }]
    } else {
        file.peers
            .into_iter()
            .map(|p| PeerConfig {
                id: NodeId(p.id),
                name: p.name,
                client_addr: p.client_addr,
                peer_addr: p.peer_addr,
                peer_url: None,
            })
            .collect()
    };

    let backend = match (&overrides.backend, &file.election.backend) {
        (Some(name), _) => parse_backend(name).map_err(|kind| ConfigError::new(Origin::Flag("--backend"), kind))?,
        (None, Some(name)) => {
            parse_backend(name.get_ref()).map_err(|kind| err(kind).at(Position::of_offset(text, name.span().start)))?
        }
        (None, None) => BackendKind::PaxosLease,
    };
    let lease_time = overrides
        .lease_time_ms
        .or(file.election.lease_time_ms)
        .map_or(super::DEFAULT_LEASE_TIME, Duration::from_millis);
    // Derived from the final lease time, so `--lease-time-ms` alone keeps T < M.
    let timing = LeaseConfig::with_lease_time(lease_time);
    let election = ElectionConfig {
        backend,
        lease_time,
        max_lease_time: file.election.max_lease_time_ms.map_or(timing.max_lease_time, Duration::from_millis),
        drift_bound: file.election.drift_bound.unwrap_or(timing.drift_bound),
        tracker: file.election.tracker.map(NodeId),
    };

    let default_limits = Limits::default();
    let limits = Limits {
        max_key_bytes: file.limits.max_key_bytes.unwrap_or(default_limits.max_key_bytes),
        max_value_bytes: file.limits.max_value_bytes.unwrap_or(default_limits.max_value_bytes),
        max_txn_ops: etcd.max_txn_ops.or(file.limits.max_txn_ops).unwrap_or(default_limits.max_txn_ops),
        max_lease_name_bytes: file.limits.max_lease_name_bytes.unwrap_or(default_limits.max_lease_name_bytes),
        quota_bytes: etcd.quota_bytes.or(file.storage.quota_bytes).unwrap_or(default_limits.quota_bytes),
        max_leases: file.limits.max_leases.unwrap_or(default_limits.max_leases),
        max_response_bytes: file.limits.max_response_bytes.unwrap_or(default_limits.max_response_bytes),
    };
    let client_limits = ClientLimits {
        max_request_bytes: etcd
            .max_request_bytes
            .or(file.limits.max_request_bytes)
            .unwrap_or(ClientLimits::DEFAULT.max_request_bytes),
        max_client_connections: file
            .limits
            .max_client_connections
            .unwrap_or(ClientLimits::DEFAULT.max_client_connections),
        max_concurrent_streams: file
            .limits
            .max_concurrent_streams
            .unwrap_or(ClientLimits::DEFAULT.max_concurrent_streams),
        max_watchers_per_stream: file
            .limits
            .max_watchers_per_stream
            .unwrap_or(ClientLimits::DEFAULT.max_watchers_per_stream),
        max_queued_requests: file.limits.max_queued_requests.unwrap_or(ClientLimits::DEFAULT.max_queued_requests),
    };

    let default_log = ReplicaConfig::for_lease_time(lease_time);
    let log = LogConfig {
        snapshot_every: file.log.snapshot_every.unwrap_or(default_log.snapshot_every),
        retain_after_snapshot: file.log.retain_after_snapshot.unwrap_or(default_log.retain_after_snapshot),
        max_batch_commands: file.log.max_batch_commands.unwrap_or(default_log.max_batch_commands),
        max_inflight_slots: file.log.max_inflight_slots.unwrap_or(default_log.max_inflight_slots),
    };

    let compaction = match (etcd.compaction, &file.compaction.mode, &file.compaction.retention) {
        (Some(policy), _, _) => policy,
        (None, None, None) => CompactionPolicy::DEFAULT,
        (None, mode, retention) => {
            let retention = retention.as_ref().map(|r| match r {
                Retention::Number(n) => n.to_string(),
                Retention::Text(t) => t.clone(),
            });
            CompactionPolicy::parse(mode.as_deref().unwrap_or("revision"), retention.as_deref())
                .map_err(|problem| err(ConfigErrorKind::Compaction(problem)))?
        }
    };
    let watch = WatchConfig {
        progress_notify_interval: file
            .watch
            .progress_notify_interval_ms
            .map_or(WatchConfig::DEFAULT_PROGRESS_NOTIFY_INTERVAL, Duration::from_millis),
    };

    let runtime = RuntimeConfig {
        worker_threads: overrides
            .worker_threads
            .or(file.runtime.worker_threads)
            .unwrap_or_else(super::default_worker_threads),
    };

    let token = etcd.cluster_token.clone().or(file.initial_cluster_token);
    let cluster_id_given = file.cluster_id.is_some();
    let cluster_id = file.cluster_id.unwrap_or_else(|| derive_cluster_id(&peers, token.as_deref()));

    let peer_protocol = match &file.peer_protocol_version {
        None => Speaks::default(),
        Some(version) => Speaks::up_to(*version.get_ref()).ok_or_else(|| {
            err(ConfigErrorKind::PeerProtocolVersion {
                value: *version.get_ref(),
                oldest: OLDEST_PEER_PROTOCOL_VERSION,
                newest: PEER_PROTOCOL_VERSION,
            })
            .at(Position::of_offset(text, version.span().start))
        })?,
    };

    let tls = TlsSettings {
        client: etcd.client_tls.clone().or_else(|| {
            file.tls.client.map(|c| ClientPortTls {
                cert: c.cert,
                key: c.key,
                ca: c.ca,
                require_client_cert: c.require_client_cert,
            })
        }),
        peer: etcd
            .peer_tls
            .clone()
            .or_else(|| file.tls.peer.map(|p| PeerPortTls { cert: p.cert, key: p.key, ca: p.ca })),
    };

    let reads = super::ReadsConfig {
        leases: file.reads.leases.unwrap_or(true),
        lease_time: file
            .reads
            .lease_time_ms
            .map_or_else(|| super::ReadsConfig::default_lease_time(election.lease_time), Duration::from_millis),
        learners: file.reads.learners.unwrap_or(false),
        reader_threads: file.reads.reader_threads.unwrap_or(super::ReadsConfig::DEFAULT_READER_THREADS),
        memory_budget_bytes: file.reads.memory_budget_bytes.unwrap_or(super::ReadsConfig::DEFAULT_MEMORY_BUDGET_BYTES),
    };

    Ok(NodeConfig {
        id: NodeId(id),
        name,
        client_addr,
        extra_client_addrs,
        advertise_client_urls,
        peer_addr,
        data_dir,
        cluster_id,
        cluster_id_given,
        peer_protocol,
        peers,
        election,
        limits,
        client_limits,
        log,
        compaction,
        state_cache_bytes: file.storage.cache_bytes.unwrap_or(leasekv_kvstore::storage::DEFAULT_STATE_CACHE_BYTES),
        state_flush_every: match file.storage.engine_flush_ms {
            Some(ms) if super::ENGINE_FLUSH_MS.contains(&ms) => Duration::from_millis(ms),
            Some(ms) => return Err(err(ConfigErrorKind::EngineFlush(ms))),
            None => leasekv_kvstore::engine::DEFAULT_FLUSH_EVERY,
        },
        corrupt_check_interval: match file.storage.corrupt_check_interval_ms {
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
            None => Some(super::DEFAULT_CORRUPT_CHECK_INTERVAL),
        },
        watch,
        runtime,
        console: file.console.mode.unwrap_or_default(),
        reads,
        initial_cluster_state,
        tls,
        origin: origin.clone(),
        warnings: {
            let mut warnings = etcd.warnings;
            if client_addr.ip().is_unspecified() && advertise_client_urls_empty {
                warnings.push(format!(
                    "the client port listens on {client_addr} and no client URL is advertised: the member list shows \
                     http://{client_addr}, which clients cannot dial; set advertise_client_urls (--advertise-client-urls)"
                ));
            }
            warnings
        },
    })
}

/// Parses a backend name with the lease crate's parser, so the list of valid names has one
/// source.
fn parse_backend(name: &str) -> Result<BackendKind, ConfigErrorKind> {
    name.parse::<BackendKind>()
        .map_err(|e| ConfigErrorKind::UnknownBackend { name: e.name, valid: e.valid.to_string() })
}

/// The default cluster id: a 64-bit FNV-1a hash of the members' ids and peer addresses in id
/// order, after the cluster token when one is given (etcd's `--initial-cluster-token`, which
/// keeps two clusters of the same members apart). Every node of a cluster lists the same
/// members, so every node derives the same id without any coordination, and two clusters
/// with different members get different ids (so a misdirected peer connection is refused
/// rather than mixing two logs).
pub(super) fn derive_cluster_id(peers: &[PeerConfig], token: Option<&str>) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    // A URL as written where there is one (etcd's --initial-cluster), so that members whose
    // resolvers disagree on a host name still derive the same id.
    let mut members: Vec<(u32, String)> =
        peers.iter().map(|p| (p.id.0, p.peer_url.clone().unwrap_or_else(|| p.peer_addr.to_string()))).collect();
    members.sort();
    let mut hash = OFFSET_BASIS;
    // A token is hashed as an entry of its own, so no token and an empty one differ from
    // each other, and a cluster without one keeps the id it had before tokens existed.
    if let Some(token) = token {
        for byte in b"token=".iter().chain(token.as_bytes()).chain(b"\n") {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    for (id, addr) in &members {
        // A fixed-width id and a terminator per entry keep different member lists from
        // producing the same byte stream.
        for byte in id.to_le_bytes().iter().chain(addr.as_bytes()).chain(b"\n") {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}
