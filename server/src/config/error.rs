//! [`ConfigError`]: why a node's configuration cannot be used, as one line an operator can act
//! on.

use leasekv_kvstore::log::ReplicaConfigError;
use leasekv_lease::NodeId;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// A configuration that cannot be used, with where it came from.
///
/// `Display` is a single line: `<file>:<line>:<column>: <what is wrong>; <what is allowed>`,
/// the position only when it is known (syntax errors, unknown backend names) and the file only
/// when the configuration was read from one. A value given on the command line is named by its
/// flag instead (`--backend: unknown election backend ...`).
#[derive(Debug)]
pub struct ConfigError {
    origin: Origin,
    position: Option<Position>,
    // Boxed so that `Result<NodeConfig, ConfigError>` stays small on the success path.
    kind: Box<ConfigErrorKind>,
}

/// Where the offending value came from, for the prefix of the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default (no file was given) or a configuration built in code.
    Builtin,
    /// A configuration file.
    File(PathBuf),
    /// A command-line flag, e.g. `--backend`.
    Flag(&'static str),
    /// etcd's flags and `ETCD_*` variables (the message names the one).
    Etcd,
}

/// A line and column in a configuration file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl Position {
    /// The position of byte offset `offset` in `text` (clamped to the end of the text).
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        // A span may point inside a multi-byte character only if the text is not what the
        // span was computed on; step back rather than panic on slicing.
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Position { line, column }
    }
}

/// What is wrong with a configuration. Each message says what was wrong and what is allowed.
#[derive(Debug, Error)]
pub enum ConfigErrorKind {
    /// The configuration file could not be read.
    #[error("cannot read the configuration file: {0}")]
    Read(#[source] io::Error),
    /// An etcd flag or variable that cannot be used.
    #[error("{0}")]
    Etcd(#[from] super::etcd::EtcdError),
    /// `--initial-cluster` does not list this member's `--name`.
    #[error(
        "--initial-cluster does not list this member's name {name:?}; list it (NAME=PEER_URL), or give the --name it has there"
    )]
    NameNotInInitialCluster {
        /// The name.
        name: String,
    },
    /// `--initial-advertise-peer-urls` is not this member's URL in `--initial-cluster`.
    #[error(
        "--initial-advertise-peer-urls names {advertised}, but --initial-cluster lists {name}={listed}; they must be the same"
    )]
    AdvertisedPeerMismatch {
        /// This member's name.
        name: String,
        /// What `--initial-advertise-peer-urls` says.
        advertised: SocketAddr,
        /// What `--initial-cluster` says.
        listed: String,
    },
    /// The file is not valid TOML, or a value has the wrong type, or a field is unknown.
    #[error("{0}")]
    Syntax(String),
    /// A required setting is absent.
    #[error("{field} is missing; {hint}")]
    Missing {
        /// The setting, as written in the file.
        field: &'static str,
        /// How to provide it.
        hint: &'static str,
    },
    /// `[election] backend` names no known backend.
    #[error("unknown election backend \"{name}\"; expected one of: {valid}")]
    UnknownBackend {
        /// The name given.
        name: String,
        /// The valid names, comma separated.
        valid: String,
    },
    /// A node id of 0.
    #[error("{what} is 0; node ids must be at least 1")]
    ZeroId {
        /// Which id (`id`, or `[[peers]] id`).
        what: &'static str,
    },
    /// Two `[[peers]]` entries with the same id.
    #[error("node id {0} appears more than once in [[peers]]; every member needs its own id")]
    DuplicateId(u32),
    /// Two listen addresses of the cluster are the same.
    #[error("address {addr} is used twice ({first} and {second}); every client and peer address must be distinct")]
    DuplicateAddress {
        /// The address.
        addr: SocketAddr,
        /// The first user, e.g. `node 1 peer_addr`.
        first: String,
        /// The second user.
        second: String,
    },
    /// `initial_cluster_state` is neither `new` nor `existing`.
    #[error(
        "initial_cluster_state = {0:?} is not valid; use \"new\" (start a new cluster) or \"existing\" (join one)"
    )]
    UnknownClusterState(String),
    /// `initial_cluster_state = "existing"` without any `[[peers]]` to ask.
    #[error(
        "initial_cluster_state = \"existing\" needs [[peers]]: the existing members this node asks for the member list"
    )]
    JoinWithoutPeers,
    /// This node's id is not among `[[peers]]`.
    #[error(
        "node {0} is not in its own peer list; [[peers]] must list every member of the cluster, this node included"
    )]
    SelfNotInPeers(u32),
    /// This node's own entry in `[[peers]]` gives other addresses than it listens on.
    #[error(
        "node {id} listens on {field} = {listen} but its [[peers]] entry says {listed}; they must match \
         (or listen on 0.0.0.0 / [::] with the same port)"
    )]
    SelfAddressMismatch {
        /// This node's id.
        id: u32,
        /// `client_addr` or `peer_addr`.
        field: &'static str,
        /// What this node listens on.
        listen: SocketAddr,
        /// What the peer list tells the other members.
        listed: SocketAddr,
    },
    /// A member's address cannot be dialled by the others.
    #[error(
        "node {id} {field} = {addr} cannot be reached by other members; in a cluster of more than one \
         node, [[peers]] addresses need a specific IP and a non-zero port"
    )]
    UndialableAddress {
        /// The member.
        id: u32,
        /// `client_addr` or `peer_addr`.
        field: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// The election timing is unsafe or unworkable (from `LeaseConfig::validate`).
    #[error("[election] {0}")]
    Lease(#[source] leasekv_lease::ConfigError),
    /// `[reads] lease_time_ms` is outside what works.
    #[error(
        "[reads] lease_time_ms = {got} is out of range: it must be at least {min} (a fifth of the election's \
         lease_time_ms: two of the master's heartbeats, so that one lost heartbeat does not end a read lease) and at \
         most the election's lease_time_ms ({max}), since a new master waits up to one read-lease time before its \
         first write"
    )]
    ReadLeaseTime {
        /// The value given.
        got: u64,
        /// The least allowed.
        min: u64,
        /// The most allowed: T.
        max: u64,
    },
    /// `[storage] engine_flush_ms` is outside what works.
    #[error(
        "[storage] engine_flush_ms = {0} is out of range: it must be from {min} to {max} (how often the state \
         engine writes out and syncs its buffers on its own; default 500)",
        min = super::ENGINE_FLUSH_MS.start(),
        max = super::ENGINE_FLUSH_MS.end()
    )]
    EngineFlush(u64),
    /// `[election] tracker` is not a member.
    #[error("[election] tracker = {tracker} is not a member; expected one of the [[peers]] ids: {members}")]
    TrackerNotMember {
        /// The configured tracker.
        tracker: u32,
        /// The member ids, comma separated.
        members: String,
    },
    /// `[compaction]` is not a valid policy.
    #[error("[compaction] {0}")]
    Compaction(String),
    /// `[watch]` has a setting out of range.
    #[error("[watch] {0}")]
    Watch(String),
    /// `[storage]` has a setting out of range.
    #[error("[storage] {0}")]
    Storage(String),
    /// `peer_protocol_version` names a version this build does not speak.
    #[error(
        "peer_protocol_version = {value} is not a version this build speaks; allowed is {oldest} to {newest} \
         (leave it out to speak the newest)"
    )]
    PeerProtocolVersion {
        /// The configured value.
        value: u32,
        /// The oldest version this build speaks.
        oldest: u32,
        /// The newest.
        newest: u32,
    },
    /// A size limit out of range.
    #[error("[limits] {field} = {value} is out of range; allowed is {min} to {max}")]
    Limit {
        /// The limit.
        field: &'static str,
        /// The configured value.
        value: usize,
        /// Smallest allowed.
        min: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The replicated log's tuning cannot work (from `ReplicaConfig::validate`).
    #[error("[log] {0}")]
    Replica(#[source] ReplicaConfigError),
    /// `[runtime] worker_threads` out of range.
    #[error(
        "[runtime] worker_threads = {value} is out of range; allowed is 1 to {max} \
         (leave it out for the default: half of this host's CPUs)"
    )]
    WorkerThreads {
        /// The configured value.
        value: usize,
        /// Largest allowed.
        max: usize,
    },
    /// `[reads] memory_budget_bytes` too small.
    #[error(
        "[reads] memory_budget_bytes = {value} is too small; at least {min} (default 1073741824): \
         a read answer of the largest value must fit"
    )]
    ReadBudget {
        /// The configured value.
        value: u64,
        /// Smallest allowed.
        min: u64,
    },
    /// `[limits] max_response_bytes` out of range.
    #[error(
        "[limits] max_response_bytes = {value} is out of range; allowed is {min} (a key of the \
         largest value, max_key_bytes + max_value_bytes, with room to spare) to {max} (default {max})"
    )]
    ResponseLimit {
        /// The configured value.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
    /// `[reads] reader_threads` out of range.
    #[error("[reads] reader_threads = {value} is out of range; allowed is 1 to {max} (default 2)")]
    ReaderThreads {
        /// The configured value.
        value: usize,
        /// Largest allowed.
        max: usize,
    },
    /// `data_dir` is the empty path.
    #[error("data_dir is empty; give a directory path such as \"./leasekv-data\"")]
    EmptyDataDir,
    /// `[tls.client] require_client_cert = true` without a CA to verify them against.
    #[error(
        "[tls.client] require_client_cert = true needs `ca`: the CA file client certificates are verified against"
    )]
    ClientCertWithoutCa,
    /// A TLS file that cannot be used (missing, unreadable, not PEM, a key that does not
    /// match its certificate).
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The data directory cannot be created or written.
    #[error("data_dir \"{path}\" is not usable: cannot {action}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// What failed: `create it`, `write a file in it`, ...
        action: &'static str,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// Client and peer listen addresses of this node are the same.
    #[error("client_addr and peer_addr are both {0}; the client and peer listeners need different ports")]
    SameListenAddress(SocketAddr),
    /// A listen address is taken by another process.
    #[error("{which} address {addr} is already in use ({source}); stop the other process or choose another port")]
    AddressInUse {
        /// `client` or `peer`.
        which: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// A listen address cannot be bound for another reason (not a local IP, no permission).
    #[error(
        "cannot listen on {which} address {addr} ({source}); use an IP address of this host and a port you may bind"
    )]
    AddressUnusable {
        /// `client` or `peer`.
        which: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
}

impl ConfigError {
    /// An error of `kind` about the configuration from `origin`.
    pub fn new(origin: Origin, kind: ConfigErrorKind) -> Self {
        ConfigError { origin, position: None, kind: Box::new(kind) }
    }

    /// The same error, located at `position` in the file.
    pub fn at(mut self, position: Position) -> Self {
        self.position = Some(position);
        self
    }

    /// What is wrong, for matching in code.
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }

    /// Where the configuration came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The file the error is in, if the configuration came from one.
    pub fn file(&self) -> Option<&Path> {
        match &self.origin {
            Origin::File(path) => Some(path),
            _ => None,
        }
    }

    /// The line and column in the file, when known.
    pub fn position(&self) -> Option<Position> {
        self.position
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.origin, self.position) {
            (Origin::File(path), Some(p)) => write!(f, "{}:{}:{}: ", path.display(), p.line, p.column)?,
            (Origin::File(path), None) => write!(f, "{}: ", path.display())?,
            (Origin::Flag(flag), _) => write!(f, "{flag}: ")?,
            (Origin::Builtin, Some(p)) => write!(f, "line {}, column {}: ", p.line, p.column)?,
            (Origin::Builtin | Origin::Etcd, None) => {}
            (Origin::Etcd, Some(_)) => {}
        }
        // The promise is one line: collapse any newline a wrapped message (a TOML error, an OS
        // error) might carry, so log lines and terminal output stay greppable.
        let message = self.kind.to_string();
        let mut first = true;
        for part in message.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !first {
                f.write_str(" ")?;
            }
            f.write_str(part)?;
            first = false;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.kind)
    }
}

/// Formats member ids as `1, 2, 3`, for messages that list what is allowed.
pub(crate) fn id_list(ids: impl IntoIterator<Item = NodeId>) -> String {
    ids.into_iter().map(|id| id.0.to_string()).collect::<Vec<_>>().join(", ")
}
