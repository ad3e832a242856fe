//! A node's configuration: one TOML file per node, command-line overrides, defaults, and the
//! checks that make a bad configuration fail at start with one clear line.
//!
//! ```toml
//! id = 1
//! client_addr = "127.0.0.1:12379"   # etcd v3 API for clients
//! peer_addr = "127.0.0.1:12380"     # election and log replication between members
//! data_dir = "./leasekv-data/n1"
//!
//! [[peers]]                         # every member, this node included
//! id = 1
//! client_addr = "127.0.0.1:12379"
//! peer_addr = "127.0.0.1:12380"
//! # ... one entry per member
//!
//! [election]
//! backend = "paxoslease"            # or "lease-tracker"
//! lease_time_ms = 800               # failover takes about one lease time
//! # max_lease_time_ms = 1000        # default 1.25 × lease time; same on every node
//! # drift_bound = 0.01              # clock rate error bound ε, 0 to 0.1
//! # tracker = 1                     # lease-tracker only; default: the lowest id
//!
//! [limits]                          # defaults: leasekv_kvstore::Limits::default()
//! # max_key_bytes = 1536
//! # max_value_bytes = 1572864
//! # max_txn_ops = 128
//! # max_lease_name_bytes = 256
//! # max_leases = 1000000            # live leases (etcd has no cap)
//! # max_response_bytes = 2147483647 # largest Range answer (etcd's gRPC send limit)
//! # max_request_bytes = 1572864     # etcd's --max-request-bytes
//! # max_client_connections = 10000  # on the client port; more are closed at once
//! # max_concurrent_streams = 1000   # HTTP/2 streams per client connection
//! # max_watchers_per_stream = 10000
//! # max_queued_requests = 10000     # waiting for the node; more get "too many requests"
//!
//! [storage]
//! # quota_bytes = 2147483648       # etcd's --quota-backend-bytes; writes past it are refused
//! # cache_bytes = 134217728        # memory for the state engine's caches (the key space stays on disk)
//! # engine_flush_ms = 500          # the state engine's own flushes; shorter: a smaller file under churn, fewer puts
//! # corrupt_check_interval_ms = 300000  # compare every member's hash this often; 0: never
//!
//! [log]                             # defaults: ReplicaConfig::for_lease_time
//! # snapshot_every = 10000        # slots between checkpoints (the state synced, the log behind it dropped)
//! # retain_after_snapshot = 1000
//! # max_batch_commands = 256
//! # max_inflight_slots = 2
//!
//! [compaction]                      # etcd's auto-compaction
//! # mode = "revision"             # or "periodic" (retention a duration) or "off"
//! # retention = 10000             # revisions kept; periodic: e.g. "5m"
//!
//! [watch]
//! # progress_notify_interval_ms = 600000   # etcd's default, 10 minutes
//!
//! [runtime]
//! # worker_threads = 1            # default: half of this host's CPUs, at least 1
//!
//! [reads]                           # docs/read-leases.md
//! # leases = true                 # followers answer linearizable reads under a read lease
//! # reader_threads = 2            # threads that answer reads, off the node loop
//! # memory_budget_bytes = 1073741824  # Range answers held at once; more get "too many requests"
//!
//! [tls.client]                      # TLS on the client port (docs/security.md)
//! # cert = "certs/n1.crt"
//! # key = "certs/n1.key"
//! # ca = "certs/ca.crt"             # verify client certificates against this CA
//! # require_client_cert = true      # refuse clients without one (needs `ca`)
//!
//! [tls.peer]                        # mutual TLS between members
//! # cert = "certs/n1-peer.crt"      # must name this member (its name, or its peer host)
//! # key = "certs/n1-peer.key"
//! # ca = "certs/ca.crt"
//! ```
//!
//! [`NodeConfig::load`] reads the file (or the built-in default, [`DEFAULT_CONFIG_TOML`]),
//! applies the [`Overrides`] from the command line, fills in defaults and validates.
//! [`NodeConfig::check_environment`] then checks what only the host can tell: that the data
//! directory is writable and the ports are free.

mod compaction;
mod error;
pub mod etcd;
mod file;
#[cfg(test)]
mod tests;
mod validate;

pub use compaction::CompactionPolicy;
pub use error::{ConfigError, ConfigErrorKind, Origin, Position};
pub use validate::{
    MAX_CLIENT_COUNT_LIMIT, MAX_KEY_BYTES, MAX_LEASES, MAX_LEASE_NAME_BYTES, MAX_REQUEST_BYTES,
    MAX_RETAIN_AFTER_SNAPSHOT, MAX_TXN_OPS, MAX_VALUE_BYTES, MAX_WORKER_THREADS, MIN_REQUEST_BYTES,
};

use leasekv_kvstore::log::{ReadLeaseConfig, ReplicaConfig};
use leasekv_kvstore::Limits;
use leasekv_lease::{BackendKind, LeaseConfig, NodeId};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The configuration used when no file is given: a single-node store on 127.0.0.1:2379 with
/// its data in `./leasekv-data`. Embedded as text so that it can be printed as a starting
/// point for a file.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("config/default.toml");

/// Default client (etcd v3 API) listen address: etcd's well-known port, on loopback so that
/// a node started without configuration is not reachable from other hosts.
pub const DEFAULT_CLIENT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2379);

/// Default peer listen address: etcd's peer port, on loopback.
pub const DEFAULT_PEER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 2380);

/// Default data directory, relative to the working directory (as etcd's `--data-dir`).
pub const DEFAULT_DATA_DIR: &str = "./leasekv-data";

/// How often the master compares the members' hashes by default: often enough to stop
/// writes on a corrupt cluster within minutes, rarely enough that hashing every member's
/// state (a pass over it) costs nothing noticeable.
pub const DEFAULT_CORRUPT_CHECK_INTERVAL: Duration = Duration::from_secs(300);

/// `[storage] engine_flush_ms` allowed: below 10 ms sled's flusher would sync nearly all the
/// time; past 10 s its file grows with the writes between its cleanings.
pub const ENGINE_FLUSH_MS: std::ops::RangeInclusive<u64> = 10..=10_000;

/// Default lease time T: the lease crate's default, about the failover time after a master
/// crash.
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_millis(1000);

/// Everything one node needs to know to start: who it is, where it listens, who the other
/// members are, where its data lives, and how the election, the log and request limits are
/// tuned. Built by [`NodeConfig::load`]; every field is resolved (no defaults left to apply).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// This node's id (≥ 1), unique in the cluster and stable across restarts.
    pub id: NodeId,
    /// This member's name in the member list (etcd's `--name`); `None`: `n<id>`.
    pub name: Option<String>,
    /// Where this node serves clients (etcd v3 API). May be `0.0.0.0:PORT` or `[::]:PORT` when
    /// this node's [`PeerConfig`] gives a specific IP with the same port.
    pub client_addr: SocketAddr,
    /// More addresses the client port listens on (etcd's `--listen-client-urls` after the
    /// first), e.g. loopback beside the address other hosts use.
    pub extra_client_addrs: Vec<SocketAddr>,
    /// The client URLs this member publishes in the member list (etcd's
    /// `--advertise-client-urls`); empty: `client_addr` as a URL.
    pub advertise_client_urls: Vec<String>,
    /// Where this node accepts connections from other members (election, log replication).
    /// Same rule for unspecified IPs as `client_addr`.
    pub peer_addr: SocketAddr,
    /// The directory holding this node's durable state (log, snapshots, restart epoch).
    /// Relative paths are relative to the working directory.
    pub data_dir: PathBuf,
    /// Identifies the cluster on peer connections, so that nodes of different clusters never
    /// talk to each other. Defaults to a hash of the members' ids and peer addresses. The id
    /// a data dir recorded at its first start wins over it (see [`crate::join::record`]).
    pub cluster_id: u64,
    /// Whether `cluster_id` was set in the file rather than derived: a set one that
    /// disagrees with the data dir's record stops the start.
    pub cluster_id_given: bool,
    /// Every member of the cluster, this node included, as listed in the file (in file
    /// order; [`NodeConfig::validate`] rejects duplicates).
    pub peers: Vec<PeerConfig>,
    /// `[election]`: backend and lease timing.
    pub election: ElectionConfig,
    /// `[limits]`: request size limits (and the lease cap) the store checks.
    pub limits: Limits,
    /// `[limits]`: what one client may cost this node on the client port.
    pub client_limits: ClientLimits,
    /// `[log]`: tuning of the replicated log.
    pub log: LogConfig,
    /// `[compaction]`: how much MVCC history is kept.
    pub compaction: CompactionPolicy,
    /// `[storage] corrupt_check_interval_ms`: how often the master compares every member's
    /// hash ([`crate::corrupt_check`]); `None`: never.
    pub corrupt_check_interval: Option<Duration>,
    /// `[storage] cache_bytes`: the memory for the state engine (sled's page cache and the
    /// state machine's recent writes), which bounds how much of the key space and history
    /// stays in memory.
    pub state_cache_bytes: u64,
    /// `[storage] engine_flush_ms`: how often the state engine writes out and syncs its
    /// buffers on its own, which is also how often it reclaims its file's space.
    pub state_flush_every: Duration,
    /// `[watch]`: how watch streams are served.
    pub watch: WatchConfig,
    /// `[runtime]`: the threads that serve this node.
    pub runtime: RuntimeConfig,
    /// `[console]`: whether the web console is served at `/ui`, and whether it may write.
    pub console: ConsoleMode,
    /// `[reads]`: read leases.
    pub reads: ReadsConfig,
    /// etcd's `initial-cluster-state`: whether this node starts a new cluster with the
    /// `[[peers]]` listed (`new`, the default) or joins an existing one whose members are
    /// the `[[peers]]` (`existing`; see [`ClusterState::Existing`]). Used only when the data
    /// dir is empty: a restarted node follows what its data dir records.
    pub initial_cluster_state: ClusterState,
    /// `[tls.client]` and `[tls.peer]`: TLS on the client and peer ports (plain TCP where
    /// absent). The files are read at start (see [`crate::tls`]).
    pub tls: crate::tls::TlsSettings,
    /// `peer_protocol_version`: the newest peer protocol version this node speaks (default:
    /// the newest this build speaks). Held lower, the node sends and accepts only the
    /// messages of that version, as a node of that release does, so an upgrade can be
    /// rehearsed or a feature held back (see docs/operations.md, "Upgrade a cluster, one
    /// member at a time").
    pub peer_protocol: crate::peer::version::Speaks,
    /// Where the configuration came from, so later errors (e.g. from
    /// [`NodeConfig::check_environment`]) can name the file.
    pub origin: Origin,
    /// Settings accepted with a caveat or ignored (etcd flags that mean nothing here), one
    /// line each, for the node to log at start.
    pub warnings: Vec<String>,
}

/// etcd's `initial-cluster-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClusterState {
    /// Start a new cluster whose members are the `[[peers]]`.
    #[default]
    New,
    /// Join an existing cluster: the `[[peers]]` are existing members (their client
    /// addresses are asked for the member list), this node must have been added first
    /// (`etcdctl member add NAME --peer-urls=http://PEER_ADDR`), and its `id` is the one the
    /// cluster gave it (the `id` key may then be left out).
    Existing,
}

impl ClusterState {
    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

/// One member of the cluster as every node sees it: the addresses the others reach it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The member's id.
    pub id: NodeId,
    /// Its name in the member list; `None`: `n<id>`.
    pub name: Option<String>,
    /// Where clients reach it; `None` when only its peer address is known (etcd's
    /// `--initial-cluster`): the member then publishes its client URLs once running.
    pub client_addr: Option<SocketAddr>,
    /// Where members reach it.
    pub peer_addr: SocketAddr,
    /// Its peer URL as written in etcd's `--initial-cluster` (a host name stays a host
    /// name), which the member list records and the cluster id is derived from; `None`:
    /// built from `peer_addr`.
    pub peer_url: Option<String>,
}

impl PeerConfig {
    /// Its known addresses, each with the name of its field.
    pub fn addresses(&self) -> impl Iterator<Item = (&'static str, SocketAddr)> {
        let client = self.client_addr.map(|addr| ("client_addr", addr));
        client.into_iter().chain(std::iter::once(("peer_addr", self.peer_addr)))
    }
}

/// `[election]`: which backend elects the master, and its lease timing.
#[derive(Debug, Clone, PartialEq)]
pub struct ElectionConfig {
    /// `paxoslease` (default) or `lease-tracker`.
    pub backend: BackendKind,
    /// T: how long one lease lasts. A master crash is noticed after about T.
    pub lease_time: Duration,
    /// M: the maximum lease time, strictly greater than T and the same on every node; a
    /// restarted node stays silent for M. Default 1.25 × T.
    pub max_lease_time: Duration,
    /// ε: the bound on every clock's rate error, 0 to 0.1. Default 0.01.
    pub drift_bound: f64,
    /// The node granting leases with the `lease-tracker` backend (ignored by `paxoslease`).
    /// `None`: the member with the lowest id.
    pub tracker: Option<NodeId>,
}

/// `[log]`: the tunable part of the replicated log; the rest of [`ReplicaConfig`] follows
/// from the lease time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Take a snapshot after this many applied slots.
    pub snapshot_every: u64,
    /// Slots kept in the log behind a snapshot, so that a replica only slightly behind gets
    /// entries rather than a whole snapshot. Held in memory; at most
    /// [`MAX_RETAIN_AFTER_SNAPSHOT`].
    pub retain_after_snapshot: u64,
    /// Most client commands in one log slot.
    pub max_batch_commands: usize,
    /// Most slots proposed and not yet chosen at once.
    pub max_inflight_slots: usize,
}

/// `[limits]` of the client port: bounds on what clients can make this node hold, so that a
/// hostile or broken client gets a clear error instead of running the node out of memory,
/// file descriptors or CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientLimits {
    /// Largest request (etcd's `--max-request-bytes`): a write whose encoded request is
    /// larger fails with etcd's `etcdserver: request is too large`; a gRPC message more than
    /// [`ClientLimits::GRPC_OVERHEAD_BYTES`] beyond it is not even read. The gateway reads
    /// JSON bodies up to [`ClientLimits::gateway_body_limit`].
    pub max_request_bytes: usize,
    /// Most connections open on the client port at once; a connection beyond it is closed
    /// as soon as it is accepted (and logged, at most once per 5 s).
    pub max_client_connections: usize,
    /// Most concurrent HTTP/2 streams (calls) on one client connection, advertised in the
    /// connection's SETTINGS.
    pub max_concurrent_streams: u32,
    /// Most watchers on one Watch stream; a create beyond it is cancelled with a reason.
    pub max_watchers_per_stream: usize,
    /// Most client requests waiting for the node loop; one that finds the queue full is
    /// refused at once with etcd's `etcdserver: too many requests` (RESOURCE_EXHAUSTED),
    /// rather than waiting behind the others. Peer traffic has a queue of its own.
    pub max_queued_requests: usize,
}

impl ClientLimits {
    /// The defaults: etcd's 1.5 MiB request limit, 10,000 connections, 1,000 streams per
    /// connection (etcd's `math.MaxUint32` lets one connection hold unbounded server
    /// work), 10,000 watchers per stream, 10,000 queued requests (etcd refuses proposals
    /// once 5,000 are committed and not applied; a queue of 10,000 is about 50 ms of work).
    pub const DEFAULT: ClientLimits = ClientLimits {
        max_request_bytes: 1536 * 1024,
        max_client_connections: 10_000,
        max_concurrent_streams: 1000,
        max_watchers_per_stream: 10_000,
        max_queued_requests: 10_000,
    };

    /// What a gRPC message may exceed `max_request_bytes` by before it is refused unread:
    /// etcd's `grpcOverheadBytes`, room for the framing around a request at the limit.
    pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

    /// The largest gRPC message the client services decode.
    pub fn grpc_message_limit(&self) -> usize {
        self.max_request_bytes.saturating_add(Self::GRPC_OVERHEAD_BYTES)
    }

    /// The largest HTTP/JSON gateway body read: a gRPC message at the limit with its bytes
    /// in base64 (4/3 larger) and 64 KiB for the JSON around them.
    pub fn gateway_body_limit(&self) -> usize {
        (self.grpc_message_limit() / 3).saturating_mul(4).saturating_add(64 * 1024)
    }
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits::DEFAULT
    }
}

/// `[console] mode`: whether this node serves the web console at `/ui` on its client port.
///
/// `on` by default: the console is a page over etcd's gateway, which the same port serves
/// anyway, and every action it takes is checked with the signed-in user's permissions (when
/// auth is on) exactly as the same call from etcdctl would be. It gives nobody a power the
/// port did not already give. `read-only` serves it without the calls that change anything
/// (its own `/ui/api/v3/...` routes refuse them); `off` serves no console at all. Neither
/// restricts the gateway or gRPC: turn auth on for that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
pub enum ConsoleMode {
    /// Served, with every action the user's permissions allow.
    #[default]
    #[serde(rename = "on")]
    On,
    /// Served, reading only.
    #[serde(rename = "read-only")]
    ReadOnly,
    /// Not served: `/ui` answers 404.
    #[serde(rename = "off")]
    Off,
}

/// `[reads]`: read leases (docs/read-leases.md), with which every member answers
/// linearizable reads from its own state.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadsConfig {
    /// Whether the master grants read leases (and this node asks for one). Off: every
    /// linearizable read goes to the master, as etcd's go to its leader.
    pub leases: bool,
    /// L: how long a read lease lasts by the master's clock. A member that stops answering
    /// holds writes up for at most this long, and a new master waits at most this long for
    /// a member it cannot reach before its first write. Same on every member.
    pub lease_time: Duration,
    /// Whether learners get read leases too (voters always do).
    pub learners: bool,
    /// Threads that answer reads, off the node loop (the loop only decides when a read may
    /// be served). Default [`ReadsConfig::DEFAULT_READER_THREADS`]; 1 to
    /// [`ReadsConfig::MAX_READER_THREADS`].
    pub reader_threads: usize,
    /// Bytes of Range answers this node holds at once, from the moment a reader has built
    /// one until its client has received it; an answer that would take the total past it
    /// is refused with etcd's "too many requests" naming the budget (`crate::read_budget`).
    /// Default [`ReadsConfig::DEFAULT_MEMORY_BUDGET_BYTES`]; at least
    /// [`ReadsConfig::MIN_MEMORY_BUDGET_BYTES`].
    pub memory_budget_bytes: u64,
}

impl ReadsConfig {
    /// The default number of reader threads: two, so that one large read (a scan of the
    /// whole key space) leaves a thread for every other read.
    pub const DEFAULT_READER_THREADS: usize = 2;
    /// The most reader threads allowed.
    pub const MAX_READER_THREADS: usize = 256;
    /// The default read memory budget: 1 GiB, room for four full reads of a 200,000-key
    /// store of 1 KiB values at once.
    pub const DEFAULT_MEMORY_BUDGET_BYTES: u64 = 1 << 30;
    /// The smallest read memory budget: one answer of the largest value always fits.
    pub const MIN_MEMORY_BUDGET_BYTES: u64 = 64 << 20;

    /// The default read-lease time for election lease time `election`: a quarter of it.
    pub fn default_lease_time(election: Duration) -> Duration {
        election / 4
    }

    /// The shortest read-lease time allowed for election lease time `election`: two of the
    /// master's heartbeats (it sends one every T/10, and a holder renews on each), so that
    /// one lost heartbeat does not end a lease.
    pub fn min_lease_time(election: Duration) -> Duration {
        election / 5
    }
}

/// `[watch]`: how this node serves watch streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchConfig {
    /// How often a quiet watcher that asked for progress notifications gets one.
    pub progress_notify_interval: Duration,
}

impl WatchConfig {
    /// etcd's default progress-notify interval, ten minutes.
    pub const DEFAULT_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_secs(600);
    /// The shortest interval allowed: shorter would flood every stream with notifications.
    pub const MIN_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_millis(100);
}

/// `[runtime]`: how many threads run this node's asynchronous work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Worker threads of the tokio runtime that serves gRPC and runs the node loop. Default
    /// [`default_worker_threads`]; 1 to [`MAX_WORKER_THREADS`].
    pub worker_threads: usize,
}

/// The default number of worker threads: half of the CPUs this process may use, at least one.
///
/// Not all of them, as tokio would pick: every write also runs on two threads outside the
/// runtime (the sync thread and sled's I/O thread), and every write and linearizable read
/// passes through the one node-loop task, so more workers than that mostly add hand-offs
/// between threads, each a wake-up of a sleeping CPU. With three nodes sharing two CPUs,
/// `benches/cluster.rs` measures more puts and linearizable reads and a lower single-client
/// put latency with one worker per node than with two (figures in docs/performance.md).
pub fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get() / 2).max(1)
}

/// Command-line values that replace the file's. Plain fields so that a clap `Parser` can
/// fill them directly; `None` keeps the file's value (or the default). An overridden address
/// or id must still agree with the file's `[[peers]]`, since the other members read theirs
/// from their own files; without `[[peers]]` the single member follows the overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--id`: this node's id.
    pub id: Option<u32>,
    /// `--client-addr`: the client listen address.
    pub client_addr: Option<SocketAddr>,
    /// `--peer-addr`: the peer listen address.
    pub peer_addr: Option<SocketAddr>,
    /// `--data-dir`: the data directory.
    pub data_dir: Option<PathBuf>,
    /// `--backend`: the election backend's name, checked like the file's.
    pub backend: Option<String>,
    /// `--lease-time-ms`: the lease time; the default max lease time follows it.
    pub lease_time_ms: Option<u64>,
    /// `--worker-threads`: the runtime's worker threads.
    pub worker_threads: Option<usize>,
    /// etcd's flags and `ETCD_*` variables (see [`etcd`]).
    pub etcd: etcd::EtcdSettings,
}

impl NodeConfig {
    /// Reads the configuration from `path` (or the built-in single-node default when `None`),
    /// applies `overrides`, fills in defaults and validates. Does not touch the data directory
    /// or the network: call [`NodeConfig::check_environment`] for that.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<NodeConfig, ConfigError> {
        match path {
            None => NodeConfig::from_toml_str(DEFAULT_CONFIG_TOML, Origin::Builtin, overrides),
            Some(path) => {
                let origin = Origin::File(path.to_path_buf());
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError::new(origin.clone(), ConfigErrorKind::Read(e)))?;
                NodeConfig::from_toml_str(&text, origin, overrides)
            }
        }
    }

    /// Like [`NodeConfig::load`], from TOML text; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: Origin, overrides: &Overrides) -> Result<NodeConfig, ConfigError> {
        let parsed = file::parse(text, &origin)?;
        let config = file::resolve(parsed, text, &origin, overrides)?;
        config.validate()?;
        Ok(config)
    }

    /// The built-in default: node 1 alone, clients on 127.0.0.1:2379, peers on
    /// 127.0.0.1:2380, data in `./leasekv-data`, PaxosLease with 1 s leases. A starting point
    /// for configurations built in code (tests); validate after changing it.
    pub fn builtin() -> NodeConfig {
        // The embedded text is part of the program, not input; a test proves it valid.
        NodeConfig::load(None, &Overrides::default()).expect("the built-in default configuration is valid")
    }

    /// The election timing for the lease crate: T, M and ε from `[election]`, everything else
    /// (renewal, round timeout, back-off) derived from T as `LeaseConfig::with_lease_time`
    /// does.
    pub fn lease_config(&self) -> LeaseConfig {
        LeaseConfig {
            max_lease_time: self.election.max_lease_time,
            drift_bound: self.election.drift_bound,
            ..LeaseConfig::with_lease_time(self.election.lease_time)
        }
    }

    /// The replicated log's tuning: `ReplicaConfig::for_lease_time` with `[log]` applied.
    pub fn replica_config(&self) -> ReplicaConfig {
        ReplicaConfig {
            snapshot_every: self.log.snapshot_every,
            retain_after_snapshot: self.log.retain_after_snapshot,
            max_batch_commands: self.log.max_batch_commands,
            max_inflight_slots: self.log.max_inflight_slots,
            // The node loop takes them where their stall does not starve the election.
            defer_snapshots: true,
            // Always given: with read leases off the node grants none, but still waits out
            // an earlier master's after a takeover (turning them off is then safe).
            read_leases: Some(ReadLeaseConfig {
                grant: self.reads.leases,
                learners: self.reads.learners,
                ..ReadLeaseConfig::new(self.reads.lease_time, self.election.drift_bound)
            }),
            ..ReplicaConfig::for_lease_time(self.election.lease_time)
        }
    }

    /// The request size limits (a copy of [`NodeConfig::limits`](field@NodeConfig::limits)).
    pub fn limits(&self) -> Limits {
        self.limits.clone()
    }

    /// How the Watch service serves streams on this node.
    pub fn watch_settings(&self) -> crate::api::WatchSettings {
        let defaults = crate::api::WatchSettings::default();
        crate::api::WatchSettings {
            progress_notify_interval: self.watch.progress_notify_interval,
            stream: leasekv_kvstore::watch::StreamConfig {
                max_watchers: self.client_limits.max_watchers_per_stream,
                ..defaults.stream.clone()
            },
            ..defaults
        }
    }

    /// The ids of every member, this node included, in ascending order.
    pub fn members(&self) -> Vec<NodeId> {
        let mut ids: Vec<NodeId> = self.peers.iter().map(|p| p.id).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The member with id `id`, if there is one.
    pub fn member(&self, id: NodeId) -> Option<&PeerConfig> {
        self.peers.iter().find(|p| p.id == id)
    }

    /// This member's name: the configured one, or `n<id>`.
    pub fn member_name(&self, id: NodeId) -> String {
        self.name.clone().unwrap_or_else(|| format!("n{}", id.0))
    }

    /// The client URLs this member publishes: the advertised ones, or its client address.
    pub fn client_urls(&self) -> Vec<String> {
        if self.advertise_client_urls.is_empty() {
            vec![format!("{}://{}", self.tls.client_scheme(), self.client_addr)]
        } else {
            self.advertise_client_urls.clone()
        }
    }

    /// Every address the client port listens on.
    pub fn client_listen_addrs(&self) -> Vec<SocketAddr> {
        std::iter::once(self.client_addr).chain(self.extra_client_addrs.iter().copied()).collect()
    }

    /// The members other than this node: the ones it connects to.
    pub fn other_members(&self) -> impl Iterator<Item = &PeerConfig> + '_ {
        self.peers.iter().filter(move |p| p.id != self.id)
    }

    /// The node granting leases under the `lease-tracker` backend: `[election] tracker`, or
    /// the member with the lowest id (as the lease crate's default, so every node agrees).
    pub fn tracker_node(&self) -> NodeId {
        self.election.tracker.or_else(|| self.members().first().copied()).unwrap_or(self.id)
    }
}
