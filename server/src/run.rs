//! Starting a node: storage, election, replica, node loop, the peer and client gRPC servers;
//! and stopping it: the master releases its lease first so another node takes over at once.

use crate::api::{
    AuthService, ClusterService, ElectionService, ExtService, KvService, LeaseService, LockService, MaintenanceService,
    Shared, WatchServer, WatchService,
};
use crate::config::NodeConfig;
use crate::conn_limit::{limit_connections, ConnectionGate};
use crate::fault_injection::{FaultInjection, FaultInjectionError};
use crate::node;
use crate::peer::lanes::{PeerNetwork, PEER_MESSAGE_LIMIT};
use crate::peer::proto::peer_server::PeerServer;
use crate::peer::service::PeerService;
use crate::tls::incoming::tls_incoming;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::proto::leasekv::lease_kv_server::LeaseKvServer;
use leasekv_client::proto::v3electionpb::election_server::ElectionServer;
use leasekv_client::proto::v3lockpb::lock_server::LockServer;
use leasekv_kvstore::log::{OpenError, Replica};
use leasekv_kvstore::storage::{SledStorage, StorageError, StorageOptions};
use leasekv_lease::backend::{DrivenBackend, MonotonicClock};
use leasekv_lease::{ConfigError as LeaseConfigError, ElectionBackend, ElectionCore, EpochStore};
use std::future::Future;
use std::sync::Arc;
use thiserror::Error;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

/// How long a stopping node lets its lease release reach the peers.
const RELEASE_GRACE: std::time::Duration = std::time::Duration::from_millis(150);

/// Why a node could not start or stopped with an error. One line each.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The configuration or environment is wrong.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The data directory could not be opened.
    #[error("data dir {dir}: {source}")]
    Storage {
        /// The directory.
        dir: String,
        /// What failed.
        source: StorageError,
    },
    /// The stored state could not be loaded.
    #[error("data dir {dir}: {source}")]
    Open {
        /// The directory.
        dir: String,
        /// What failed.
        source: OpenError,
    },
    /// The restart epoch could not be stored.
    #[error("data dir {dir}: {source}")]
    Epoch {
        /// The directory.
        dir: String,
        /// What failed.
        source: leasekv_lease::epoch::EpochError,
    },
    /// A fault-injection variable cannot be honoured.
    #[error("{0}")]
    FaultInjection(#[from] FaultInjectionError),
    /// The election could not be configured.
    #[error("election: {0}")]
    Election(#[from] LeaseConfigError),
    /// A thread of the node (its loop, its readers, its election) could not be started.
    #[error("cannot start the node's threads: {0}")]
    Threads(#[source] std::io::Error),
    /// A listen address could not be bound.
    #[error("{what} address {addr} cannot be used: {source}")]
    Bind {
        /// Client or peer.
        what: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The storage failed while running (disk full, an I/O error); the node stopped. A
    /// restart recovers from what is on disk once the cause is gone.
    #[error("storage in {dir} failed while running: {reason}; the node stopped (restart it once the cause is fixed, e.g. space freed)")]
    StorageFailed {
        /// The data directory.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// Joining an existing cluster failed.
    #[error(transparent)]
    Join(#[from] crate::join::JoinError),
    /// The data dir says this node was removed from the cluster.
    #[error("node {id} was removed from the cluster (membership epoch {epoch}); a removed member never comes back: \
             delete its data dir {dir}, add it again (`etcdctl member add`) and start it with initial_cluster_state = \"existing\"")]
    Removed {
        /// This node.
        id: u32,
        /// The configuration epoch that removed it.
        epoch: u64,
        /// The data directory.
        dir: String,
    },
    /// A gRPC server failed.
    #[error("{what} server failed: {source}")]
    Serve {
        /// Client or peer.
        what: &'static str,
        /// The transport error.
        source: tonic::transport::Error,
    },
}

/// Runs a node until `shutdown` completes, then stops it gracefully.
pub async fn run(config: NodeConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
    let fresh = crate::join::is_empty_dir(&config.data_dir);
    config.check_environment()?;
    // Who this node is: from the configuration, from a join recorded in the data dir, or
    // (a fresh node joining) from the existing members.
    let (start, checked_cluster) = crate::join::start_point(&config, fresh).await?;
    let dir = config.data_dir.display().to_string();
    // Before the storage opens: the skip-fdatasync control changes how it is opened.
    let faults = FaultInjection::from_env()?;
    if faults.is_active() {
        tracing::warn!(?faults, "fault injection is on: this node is for tests only");
    }
    #[cfg(feature = "fault-injection")]
    faults.start_clock();
    let options = StorageOptions {
        state_cache_bytes: config.state_cache_bytes,
        state_flush_every: config.state_flush_every,
        ..StorageOptions::default()
    };
    let storage = SledStorage::open_with(&config.data_dir, options)
        .map_err(|source| ServerError::Storage { dir: dir.clone(), source })?;
    let stager = storage.stager();
    let epoch =
        storage.epoch_store().begin_epoch().map_err(|source| ServerError::Epoch { dir: dir.clone(), source })?;
    let me = start.id;
    #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
    let mut replica = Replica::open_with_seed(
        me,
        start.seed.clone(),
        replica_config(&config, &faults),
        config.limits(),
        storage,
        epoch.value,
    )
    .map_err(|source| ServerError::Open { dir: dir.clone(), source })?;
    if let Some(removed_at) = replica.removed().or_else(|| removed_marker(&config.data_dir)) {
        return Err(ServerError::Removed { id: me.0, epoch: removed_at, dir });
    }
    // The configuration in force (recorded in the data dir, or the seed): the election and
    // the peer network start from it and follow its changes (see `node`).
    let membership = replica.election_membership();
    let members = membership.voters();
    let clock = MonotonicClock::new();
    // Read once more here (check_environment read them to fail early): what the ports use.
    let tls = Arc::new(
        crate::tls::TlsState::load(&config.tls)
            .map_err(crate::config::ConfigErrorKind::Tls)
            .map_err(|kind| crate::config::ConfigError::new(config.origin.clone(), kind))?,
    );
    tls.watch();
    // The peer port and the lanes run on a runtime of their own: the election's messages
    // travel there, and must not wait behind the client port's work (a large answer
    // encoded on the main runtime cost a master its lease).
    let peer_runtime = crate::own_runtime::OwnRuntime::start("kvserver-peer").map_err(ServerError::Threads)?;
    let peers = {
        let _on_peer_runtime = peer_runtime.handle().enter();
        PeerNetwork::start(me, &[], tls.peer_client.clone(), config.peer_protocol, checked_cluster)
    };
    peers.set_members(&node::peer_addresses(replica.membership()));

    let mut client_listeners = Vec::new();
    for addr in config.client_listen_addrs() {
        let listener =
            TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { what: "client", addr, source })?;
        client_listeners.push(listener);
    }
    let peer_listener = std::net::TcpListener::bind(config.peer_addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .and_then(|listener| {
            // Registered with the peer runtime's reactor, which polls its connections.
            let _on_peer_runtime = peer_runtime.handle().enter();
            TcpListener::from_std(listener)
        })
        .map_err(|source| ServerError::Bind { what: "peer", addr: config.peer_addr, source })?;

    let backend = config.election.backend;
    let seed = u64::from(me.0) ^ (u64::from(epoch.value) << 32) ^ std::process::id() as u64;
    let tracker = config.election.tracker.or_else(|| members.first().copied()).unwrap_or(me);
    let mut core = backend.build_core(me, &members, Some(tracker), config.lease_config(), epoch, clock.now(), seed)?;
    core.set_configuration(clock.now(), &membership.configuration());
    let (election_tx, election_rx) = tokio::sync::mpsc::channel(4096);
    // On a thread of its own: no data work of this process can delay its timers.
    let election =
        DrivenBackend::start_on_own_thread(backend.name(), core, clock, Arc::new(peers.clone()), election_rx)
            .map_err(ServerError::Threads)?;
    let election_dyn: Arc<dyn ElectionBackend> = election.clone();

    #[cfg(feature = "fault-injection")]
    if let Some(key) = &faults.corrupt_key {
        let damaged = replica.corrupt_value(key);
        tracing::warn!(node = %me, key = %String::from_utf8_lossy(key), damaged, "fault injection: corrupted a value in this node's state");
    }
    let peers_for_service = peers.clone();
    let peers_for_removal = peers.clone();
    let (node, storage_failed, removed) = node::start(
        replica,
        election_dyn.clone(),
        clock,
        peers,
        &faults,
        node::NodeOptions {
            max_queued_requests: config.client_limits.max_queued_requests,
            reader_threads: config.reads.reader_threads,
            stall_bound: node::watchdog::stall_bound(config.election.lease_time),
        },
    )
    .map_err(ServerError::Threads)?;

    let tracker = (backend == leasekv_lease::BackendKind::LeaseTracker).then_some(tracker);
    let shared = Shared::with_limits(
        node.clone(),
        me,
        start.cluster_id,
        tracker,
        (config.client_limits.clone(), config.limits.clone()),
        config.reads.memory_budget_bytes,
    );
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    tracing::info!(node = %me, client = %config.client_addr, also = ?config.extra_client_addrs, peer = %config.peer_addr, backend = backend.name(), epoch = epoch.value, worker_threads = config.runtime.worker_threads, "kvserver started");

    // Snapshots and other large messages are pulled in chunks, so every message on the peer
    // port fits this limit (derived in `peers`).
    let peer_service = PeerServer::new(PeerService::new(
        node.clone(),
        election_tx,
        peers_for_service,
        tls.peer_server.is_some(),
        Some(stager),
    ))
    .max_decoding_message_size(PEER_MESSAGE_LIMIT);
    let peer_server = tonic::transport::Server::builder().add_service(peer_service);
    let peer_task = {
        let _on_peer_runtime = peer_runtime.handle().enter();
        match &tls.peer_server {
            Some(current) => {
                tokio::spawn(peer_server.serve_with_incoming(tls_incoming(peer_listener, current.clone(), "peer")))
            }
            None => tokio::spawn(peer_server.serve_with_incoming(no_delay(peer_listener))),
        }
    };

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // Watch streams never end by themselves; the graceful shutdown below would wait for them.
    let (stop_watches, watches_stopping) = tokio::sync::watch::channel(false);
    let watch_service = WatchService::new(shared.clone(), config.watch_settings(), watches_stopping.clone());
    tokio::spawn(crate::compactor::run(node.clone(), config.compaction, watches_stopping.clone()));
    if let Some(every) = config.corrupt_check_interval {
        tokio::spawn(crate::corrupt_check::run(node.clone(), me, every, watches_stopping.clone()));
    }
    tokio::spawn(publish_self(shared.clone(), config.member_name(me), config.client_urls()));
    let gateway = crate::gateway::Gateway::new(
        shared.clone(),
        WatchService::new(shared.clone(), config.watch_settings(), watches_stopping.clone()),
        ElectionService::new(shared.clone(), watches_stopping.clone()),
        watches_stopping.clone(),
    );
    // One port for both, as etcd: gRPC calls go to the services by their paths, HTTP/1.1
    // and HTTP/2 requests to the gateway's `/v3/...` paths, `/health`, `/version` and
    // `/metrics`; every request is counted on the way.
    // Every client service decodes at most `[limits] max_request_bytes` plus etcd's
    // allowance for framing; tonic refuses a longer message from its length prefix, before
    // buffering it (etcd's grpc-go likewise).
    let message_limit = config.client_limits.grpc_message_limit();
    let routes = tonic::service::Routes::from(crate::gateway::router(gateway, config.console))
        .add_service(pb::kv_server::KvServer::new(KvService(shared.clone())).max_decoding_message_size(message_limit))
        .add_service(
            pb::lease_server::LeaseServer::new(LeaseService(shared.clone())).max_decoding_message_size(message_limit),
        )
        .add_service(
            pb::cluster_server::ClusterServer::new(ClusterService(shared.clone()))
                .max_decoding_message_size(message_limit),
        )
        .add_service(
            pb::auth_server::AuthServer::new(AuthService(shared.clone())).max_decoding_message_size(message_limit),
        )
        .add_service(
            pb::maintenance_server::MaintenanceServer::new(MaintenanceService(shared.clone()))
                .max_decoding_message_size(message_limit),
        )
        .add_service(WatchServer::new(watch_service).max_decoding_message_size(message_limit))
        .add_service(LockServer::new(LockService(shared.clone())).max_decoding_message_size(message_limit))
        .add_service(
            ElectionServer::new(ElectionService::new(shared.clone(), watches_stopping.clone()))
                .max_decoding_message_size(message_limit),
        )
        .add_service(LeaseKvServer::new(ExtService(shared.clone())).max_decoding_message_size(message_limit));
    let routes = tonic::service::Routes::from(
        routes
            .into_axum_router()
            .layer(axum::middleware::from_fn(crate::read_budget::hold_until_sent))
            .layer(axum::middleware::from_fn(crate::metrics::track)),
    );
    tokio::spawn(count_leader_changes(election_dyn.clone(), me));
    let client_server = tonic::transport::Server::builder()
        .accept_http1(true)
        .max_concurrent_streams(config.client_limits.max_concurrent_streams)
        .add_routes(routes);
    let connections = ConnectionGate::new("client", config.client_limits.max_client_connections);
    let stopping = async {
        let _ = stop_rx.await;
    };
    // Every client listen address feeds one server: one set of services, one connection
    // limit for the port.
    let client_task = match &tls.client_port {
        Some(current) => {
            let incoming = client_listeners.into_iter().map(|l| tls_incoming(l, current.clone(), "client"));
            let incoming = futures_util::stream::select_all(incoming);
            tokio::spawn(client_server.serve_with_incoming_shutdown(limit_connections(incoming, connections), stopping))
        }
        None => {
            let incoming = futures_util::stream::select_all(client_listeners.into_iter().map(no_delay));
            tokio::spawn(client_server.serve_with_incoming_shutdown(limit_connections(incoming, connections), stopping))
        }
    };

    // A node whose storage failed must not hold on to mastership (its lease would keep the
    // others from taking over while it can acknowledge nothing): it stops like on a
    // shutdown, releasing the lease, and reports the failure (etcd exits likewise).
    let (failure, removed_at) = tokio::select! {
        _ = shutdown => (None, None),
        Ok(failure) = storage_failed => (Some(failure), None),
        // Logged by the node loop; the node stops cleanly, as etcd's removed member does.
        Ok(epoch) = removed => (None, Some(epoch)),
        // A member removed while it was cut off or not yet caught up never applies its
        // removal: the others stopped sending it the log. They answer it "removed", as
        // etcd's peers do, and it stops the same way; the marker keeps it from starting again.
        epoch = peers_for_removal.removed_by_peers() => {
            tracing::error!(node = %me, epoch, "the other members say this node was removed from the cluster; shutting down");
            if let Err(error) = std::fs::write(config.data_dir.join(REMOVED_MARKER), epoch.to_string()) {
                tracing::error!(node = %me, %error, "cannot record the removal in the data dir");
            }
            (None, Some(epoch))
        }
    };
    match &failure {
        None => tracing::info!(node = %me, "shutting down: releasing mastership"),
        Some(failure) => tracing::error!(node = %me, %failure, "storage failed: releasing mastership and stopping"),
    }
    // The master releases its lease first (PaxosLease release), so another node takes over
    // at once instead of after a lease time; then in-flight client requests finish.
    let _ = election_dyn.stop().await;
    // The release goes out through the peer senders' queues; exiting at once would drop it
    // and the others would wait a whole lease time instead of taking over now.
    tokio::time::sleep(RELEASE_GRACE).await;
    let _ = stop_watches.send(true);
    let _ = stop_tx.send(());
    if let Ok(Err(source)) = client_task.await {
        return Err(ServerError::Serve { what: "client", source });
    }
    peer_task.abort();
    drop(peer_runtime);
    tracing::info!(node = %me, "stopped");
    match (failure, removed_at) {
        (Some(reason), _) => Err(ServerError::StorageFailed { dir, reason }),
        (None, Some(epoch)) => Err(ServerError::Removed { id: me.0, epoch, dir }),
        (None, None) => Ok(()),
    }
}

/// The file in the data dir that records a removal the peers reported (the log may not).
const REMOVED_MARKER: &str = "leasekv-removed";

/// The membership epoch of a removal the peers reported, recorded in `data_dir`.
fn removed_marker(data_dir: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(data_dir.join(REMOVED_MARKER)).ok()?.trim().parse().ok()
}

/// How many times a node tries to publish its name and client URL before giving up (each
/// try waits for a master for a few seconds, and a busy answer a little).
const PUBLISH_ATTEMPTS: u32 = 40;

/// Records this node's name and client URLs in the member list once the log has recorded a
/// configuration that lists it with other ones (a member added by MemberAdd has neither,
/// one from etcd's `--initial-cluster` no client URL), as etcd's members publish
/// themselves on start. Bounded: it gives up with a warning.
async fn publish_self(shared: Arc<Shared>, name: String, client_urls: Vec<String>) {
    use leasekv_kvstore::membership::MemberChange;
    use leasekv_kvstore::Command;
    let me = shared.me;
    for attempt in 0..PUBLISH_ATTEMPTS {
        tokio::time::sleep(std::time::Duration::from_millis(if attempt == 0 { 200 } else { 500 })).await;
        let membership = shared.node.membership();
        let Some(member) = membership.get(me).filter(|_| membership.is_recorded()) else { continue };
        if member.name == name && member.client_urls == client_urls {
            return;
        }
        let change = MemberChange::Publish { id: me, name: name.clone(), client_urls: client_urls.clone() };
        match shared.serve_command(Command::ChangeMembers(change), |_, _| Some(())).await {
            Ok(()) => {
                tracing::info!(node = %me, %name, ?client_urls, "published this member's name and client URLs");
                return;
            }
            Err(status) => {
                tracing::debug!(node = %me, error = %status.message(), "publishing this member failed; trying again")
            }
        }
    }
    tracing::warn!(node = %me, "could not publish this member's name and client URL; MemberList shows them empty");
}

/// Counts master changes into `etcd_server_leader_changes_seen_total`: each time the master
/// this node knows of becomes another node (or one, after none).
async fn count_leader_changes(election: Arc<dyn ElectionBackend>, me: leasekv_lease::NodeId) {
    let mut status = election.subscribe();
    let mut last = None;
    loop {
        let now = {
            let s = status.borrow_and_update();
            if s.master.is_some() {
                Some(me)
            } else {
                s.hint
            }
        };
        if now.is_some() && now != last {
            crate::metrics::metrics().leader_changes.inc();
            tracing::debug!(master = ?now, "master change seen");
        }
        if now.is_some() {
            last = now;
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// Accepted connections with Nagle's algorithm off. Every answer here is one small write
/// the other side waits for; with Nagle on, a reply behind an unacknowledged segment waits
/// for the peer's delayed ACK (40 ms on Linux).
fn no_delay(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// The log's configuration, with a negative control of the fault-injection build applied.
fn replica_config(config: &NodeConfig, faults: &FaultInjection) -> leasekv_kvstore::log::ReplicaConfig {
    #[cfg_attr(not(feature = "fault-injection"), allow(unused_mut))]
    let mut replica = config.replica_config();
    #[cfg(feature = "fault-injection")]
    {
        use crate::fault_injection::ServerBreakage;
        use leasekv_kvstore::log::LogBreakage;
        replica.breakage = match faults.breakage {
            ServerBreakage::FollowerReads => LogBreakage::FollowerReads,
            ServerBreakage::AckBeforeFsync => LogBreakage::EarlyAck,
            ServerBreakage::ReadLeaseExpired => LogBreakage::ReadLeaseExpired,
            ServerBreakage::None
            | ServerBreakage::StaleLeaseCheck
            | ServerBreakage::WatchResumeGap
            | ServerBreakage::SkipFdatasync
            | ServerBreakage::SplitTxn => LogBreakage::None,
        };
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = faults;
    replica
}
