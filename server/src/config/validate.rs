//! The checks on a [`NodeConfig`]: [`NodeConfig::validate`] (the configuration alone) and
//! [`NodeConfig::check_environment`] (the configuration against this host).

use super::error::{id_list, ConfigError, ConfigErrorKind};
use super::{ClusterState, NodeConfig, ReadsConfig, WatchConfig};
use leasekv_kvstore::log::ReplicaConfigError;
use leasekv_kvstore::Limits;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

/// Largest `max_key_bytes`: keys live in the in-memory index of every replica.
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Largest `max_value_bytes`: a value travels in one gRPC message and one log slot.
pub const MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;
/// Largest `max_txn_ops`: a Txn is applied in one step of the state machine, which holds up
/// every other write while it runs.
pub const MAX_TXN_OPS: usize = 10_000;
/// Largest `max_lease_name_bytes`.
pub const MAX_LEASE_NAME_BYTES: usize = 4096;
/// Largest `[log] retain_after_snapshot`: the retained slots stay in every replica's memory
/// (up to a batch of commands each), so the tail is kept far below anything that could
/// exhaust it.
pub const MAX_RETAIN_AFTER_SNAPSHOT: u64 = 1_000_000;

/// Largest `[limits] max_request_bytes`: as `max_value_bytes`, one request is one gRPC
/// message and one log slot.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Smallest `[limits] max_request_bytes`: below it ordinary requests (a txn of a few keys)
/// would fail.
pub const MIN_REQUEST_BYTES: usize = 1024;
/// Largest `[limits] max_client_connections`, `max_concurrent_streams`,
/// `max_watchers_per_stream`, `max_queued_requests`: beyond what any host serves, low
/// enough to catch a typo.
pub const MAX_CLIENT_COUNT_LIMIT: usize = 10_000_000;
/// What `[limits] max_response_bytes` must leave beside a key of the largest value: the
/// answer's header and the key-value's revisions and framing.
pub const MIN_RESPONSE_SLACK_BYTES: u64 = 1024;
/// Largest `[limits] max_leases`.
pub const MAX_LEASES: usize = 100_000_000;

/// Largest `[runtime] worker_threads`: far beyond any benefit, low enough that a typo (an
/// extra zero or three) fails at start instead of spawning threads until the host runs out.
pub const MAX_WORKER_THREADS: usize = 1024;

/// The shortest corruption check interval allowed.
const MIN_CORRUPT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl NodeConfig {
    /// Checks that the configuration is consistent and safe: ids, the peer list (this node in
    /// it with its own addresses, no duplicates), the election timing (T < M, ε in range),
    /// the tracker, the limits and the log tuning. The first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |kind| ConfigError::new(self.origin.clone(), kind);

        let joining = self.initial_cluster_state == ClusterState::Existing;
        // A joining node may leave its id out: the cluster gave it one (checked at start).
        if self.id.0 == 0 && !joining {
            return Err(err(ConfigErrorKind::ZeroId { what: "id" }));
        }
        if joining && self.peers.is_empty() {
            return Err(err(ConfigErrorKind::JoinWithoutPeers));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(err(ConfigErrorKind::EmptyDataDir));
        }
        if self.tls.client.as_ref().is_some_and(|c| c.require_client_cert && c.ca.is_none()) {
            return Err(err(ConfigErrorKind::ClientCertWithoutCa));
        }
        if let Some(clash) = self.client_listen_addrs().into_iter().find(|addr| *addr == self.peer_addr) {
            return Err(err(ConfigErrorKind::SameListenAddress(clash)));
        }
        self.validate_peers().map_err(err)?;

        self.lease_config().validate().map_err(|e| err(ConfigErrorKind::Lease(e)))?;
        let read_lease = self.reads.lease_time;
        let min = ReadsConfig::min_lease_time(self.election.lease_time);
        if read_lease < min || read_lease > self.election.lease_time {
            return Err(err(ConfigErrorKind::ReadLeaseTime {
                got: read_lease.as_millis() as u64,
                min: min.as_millis() as u64,
                max: self.election.lease_time.as_millis() as u64,
            }));
        }
        let members = self.members();
        if let Some(tracker) = self.election.tracker.filter(|_| !joining) {
            if !members.contains(&tracker) {
                return Err(err(ConfigErrorKind::TrackerNotMember { tracker: tracker.0, members: id_list(members) }));
            }
        }

        let client = &self.client_limits;
        let limits = [
            ("max_key_bytes", self.limits.max_key_bytes, 1, MAX_KEY_BYTES),
            ("max_value_bytes", self.limits.max_value_bytes, 1, MAX_VALUE_BYTES),
            ("max_txn_ops", self.limits.max_txn_ops, 1, MAX_TXN_OPS),
            ("max_lease_name_bytes", self.limits.max_lease_name_bytes, 1, MAX_LEASE_NAME_BYTES),
            ("max_leases", self.limits.max_leases, 1, MAX_LEASES),
            ("max_request_bytes", client.max_request_bytes, MIN_REQUEST_BYTES, MAX_REQUEST_BYTES),
            ("max_client_connections", client.max_client_connections, 1, MAX_CLIENT_COUNT_LIMIT),
            ("max_concurrent_streams", client.max_concurrent_streams as usize, 1, MAX_CLIENT_COUNT_LIMIT),
            ("max_watchers_per_stream", client.max_watchers_per_stream, 1, MAX_CLIENT_COUNT_LIMIT),
            ("max_queued_requests", client.max_queued_requests, 1, MAX_CLIENT_COUNT_LIMIT),
        ];
        for (field, value, min, max) in limits {
            if !(min..=max).contains(&value) {
                return Err(err(ConfigErrorKind::Limit { field, value, min, max }));
            }
        }
        // One key of the largest value is always an answer that may be sent.
        let one_key = (self.limits.max_key_bytes + self.limits.max_value_bytes) as u64 + MIN_RESPONSE_SLACK_BYTES;
        let response = self.limits.max_response_bytes;
        if !(one_key..=Limits::DEFAULT_MAX_RESPONSE_BYTES).contains(&response) {
            return Err(err(ConfigErrorKind::ResponseLimit {
                value: response,
                min: one_key,
                max: Limits::DEFAULT_MAX_RESPONSE_BYTES,
            }));
        }

        self.replica_config().validate().map_err(|e| err(ConfigErrorKind::Replica(e)))?;
        if self.watch.progress_notify_interval < WatchConfig::MIN_PROGRESS_NOTIFY_INTERVAL {
            return Err(err(ConfigErrorKind::Watch(format!(
                "progress_notify_interval_ms = {} is too short; at least {} ms",
                self.watch.progress_notify_interval.as_millis(),
                WatchConfig::MIN_PROGRESS_NOTIFY_INTERVAL.as_millis()
            ))));
        }
        if let Some(every) = self.corrupt_check_interval.filter(|every| *every < MIN_CORRUPT_CHECK_INTERVAL) {
            return Err(err(ConfigErrorKind::Storage(format!(
                "corrupt_check_interval_ms = {} is too short; at least {} ms (each check hashes every member's data), or 0 for no check",
                every.as_millis(),
                MIN_CORRUPT_CHECK_INTERVAL.as_millis()
            ))));
        }
        if self.log.retain_after_snapshot > MAX_RETAIN_AFTER_SNAPSHOT {
            return Err(err(ConfigErrorKind::Replica(ReplicaConfigError {
                field: "retain_after_snapshot",
                rule: "at most 1000000 (the retained slots are kept in memory)",
                value: self.log.retain_after_snapshot.to_string(),
            })));
        }
        if !(1..=MAX_WORKER_THREADS).contains(&self.runtime.worker_threads) {
            return Err(err(ConfigErrorKind::WorkerThreads {
                value: self.runtime.worker_threads,
                max: MAX_WORKER_THREADS,
            }));
        }
        let budget = self.reads.memory_budget_bytes;
        if budget < super::ReadsConfig::MIN_MEMORY_BUDGET_BYTES {
            return Err(err(ConfigErrorKind::ReadBudget {
                value: budget,
                min: super::ReadsConfig::MIN_MEMORY_BUDGET_BYTES,
            }));
        }
        let readers = self.reads.reader_threads;
        if !(1..=super::ReadsConfig::MAX_READER_THREADS).contains(&readers) {
            return Err(err(ConfigErrorKind::ReaderThreads {
                value: readers,
                max: super::ReadsConfig::MAX_READER_THREADS,
            }));
        }
        Ok(())
    }

    /// The peer-list rules, in the order an operator would fix them.
    fn validate_peers(&self) -> Result<(), ConfigErrorKind> {
        let mut ids = HashSet::new();
        for peer in &self.peers {
            if peer.id.0 == 0 {
                return Err(ConfigErrorKind::ZeroId { what: "a [[peers]] id" });
            }
            if !ids.insert(peer.id) {
                return Err(ConfigErrorKind::DuplicateId(peer.id.0));
            }
        }

        // A joining node's [[peers]] are the members it asks; it need not be among them
        // (the cluster's member list, not this file, says who the members are).
        let me = match self.member(self.id) {
            Some(me) => Some(me),
            None if self.initial_cluster_state == ClusterState::Existing => None,
            None => return Err(ConfigErrorKind::SelfNotInPeers(self.id.0)),
        };
        for (field, listen, listed) in me.iter().flat_map(|me| {
            [("client_addr", self.client_addr, me.client_addr), ("peer_addr", self.peer_addr, Some(me.peer_addr))]
        }) {
            // A member listed by its peer address alone publishes its client URLs itself.
            let Some(listed) = listed else { continue };
            // Listening on every interface is fine as long as the port is the advertised one:
            // the advertised IP is then one of the addresses the listener covers.
            let covers = listen == listed || (listen.ip().is_unspecified() && listen.port() == listed.port());
            if !covers {
                return Err(ConfigErrorKind::SelfAddressMismatch { id: self.id.0, field, listen, listed });
            }
        }

        let mut users: HashMap<SocketAddr, String> = HashMap::new();
        for peer in &self.peers {
            for (field, addr) in peer.addresses() {
                let user = format!("node {} {field}", peer.id.0);
                if let Some(first) = users.get(&addr) {
                    return Err(ConfigErrorKind::DuplicateAddress { addr, first: first.clone(), second: user });
                }
                users.insert(addr, user);
            }
        }

        // A lone node is never dialled, so an ephemeral port or a wildcard IP is fine there
        // (handy for tests); in a real cluster the others must be able to connect.
        if self.peers.len() > 1 {
            for peer in &self.peers {
                for (field, addr) in peer.addresses() {
                    if addr.ip().is_unspecified() || addr.port() == 0 {
                        return Err(ConfigErrorKind::UndialableAddress { id: peer.id.0, field, addr });
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the configuration against this host, so that a node that cannot run fails at
    /// start with a clear line rather than later with a bare OS error: the data directory is
    /// created if missing and must accept a file, and the client and peer ports must be free.
    ///
    /// The port check binds and releases each address, so another process can still take a
    /// port before the server binds it; the server reports that case itself.
    pub fn check_environment(&self) -> Result<(), ConfigError> {
        let err = |kind| ConfigError::new(self.origin.clone(), kind);
        check_data_dir(&self.data_dir).map_err(err)?;
        for addr in self.client_listen_addrs() {
            check_port_free("client", addr).map_err(err)?;
        }
        check_port_free("peer", self.peer_addr).map_err(err)?;
        // Every TLS file is read now, so a missing or damaged one fails the start naming it.
        crate::tls::TlsState::load(&self.tls).map_err(|e| err(ConfigErrorKind::Tls(e)))?;
        Ok(())
    }
}

/// Creates `dir` if needed and proves it writable by writing and removing a probe file (a
/// read-only mount or a permission problem shows here, not at the first write).
fn check_data_dir(dir: &Path) -> Result<(), ConfigErrorKind> {
    let fail = |action, source| ConfigErrorKind::DataDir { path: dir.to_path_buf(), action, source };
    std::fs::create_dir_all(dir).map_err(|e| fail("create it", e))?;
    if !dir.is_dir() {
        return Err(fail("use it", io::Error::other("it exists and is not a directory")));
    }
    let probe = dir.join(format!(".leasekv-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe").map_err(|e| fail("write a file in it", e))?;
    std::fs::remove_file(&probe).map_err(|e| fail("remove a file from it", e))?;
    Ok(())
}

/// Binds `addr` and releases it at once.
fn check_port_free(which: &'static str, addr: SocketAddr) -> Result<(), ConfigErrorKind> {
    match TcpListener::bind(addr) {
        Ok(listener) => {
            drop(listener);
            Ok(())
        }
        Err(source) if source.kind() == io::ErrorKind::AddrInUse => {
            Err(ConfigErrorKind::AddressInUse { which, addr, source })
        }
        Err(source) => Err(ConfigErrorKind::AddressUnusable { which, addr, source }),
    }
}
