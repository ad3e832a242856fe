//! etcd's command-line flags and `ETCD_*` environment variables, for operators who bring
//! their etcd command lines, systemd units and compose files (docs/configuration.md, "From
//! etcd's flags").
//!
//! Three kinds of etcd settings:
//! - the ones leasekv has ([`SUPPORTED`]), with etcd's meaning, translated here into the
//!   configuration's terms ([`EtcdLayer`]);
//! - the ones harmless to ignore (Raft's timing and tuning, logging), which get a warning
//!   that says why;
//! - the rest of etcd's that leasekv knows of, which stop the start with an error naming
//!   them, rather than running with a setting silently dropped.
//!
//! A flag wins over its `ETCD_*` variable, and both over the TOML file.

use super::compaction::CompactionPolicy;
use super::ClusterState;
use crate::tls::{ClientPortTls, PeerPortTls};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use thiserror::Error;

/// etcd's flags that leasekv has, by their etcd names.
pub const SUPPORTED: &[&str] = &[
    "name",
    "data-dir",
    "listen-client-urls",
    "advertise-client-urls",
    "listen-peer-urls",
    "initial-advertise-peer-urls",
    "initial-cluster",
    "initial-cluster-state",
    "initial-cluster-token",
    "cert-file",
    "key-file",
    "trusted-ca-file",
    "client-cert-auth",
    "peer-cert-file",
    "peer-key-file",
    "peer-trusted-ca-file",
    "peer-client-cert-auth",
    "quota-backend-bytes",
    "auto-compaction-mode",
    "auto-compaction-retention",
    "max-request-bytes",
    "max-txn-ops",
];

/// How an ignored flag is written: with a value, or alone (a boolean).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arity {
    Value,
    Switch,
}

/// etcd's flags that mean nothing here and are harmless to ignore, with the reason the
/// warning gives.
const IGNORED: &[(&str, Arity, &str)] = &[
    ("heartbeat-interval", Arity::Value, RAFT_TIMING),
    ("election-timeout", Arity::Value, RAFT_TIMING),
    ("initial-election-tick-advance", Arity::Switch, RAFT_TIMING),
    ("pre-vote", Arity::Switch, RAFT_TIMING),
    ("snapshot-count", Arity::Value, "leasekv's log takes checkpoints by [log] snapshot_every"),
    ("snapshot-catchup-entries", Arity::Value, "leasekv keeps [log] retain_after_snapshot slots behind a checkpoint"),
    ("max-snapshots", Arity::Value, "leasekv keeps no snapshot files"),
    ("max-wals", Arity::Value, "leasekv keeps no WAL files"),
    ("strict-reconfig-check", Arity::Switch, "leasekv always checks membership changes strictly"),
    ("enable-grpc-gateway", Arity::Switch, "leasekv always serves the HTTP/JSON gateway on the client port"),
    ("log-level", Arity::Value, LOGGING),
    ("logger", Arity::Value, LOGGING),
    ("log-outputs", Arity::Value, LOGGING),
    ("log-format", Arity::Value, LOGGING),
    ("enable-log-rotation", Arity::Switch, LOGGING),
    ("log-rotation-config-json", Arity::Value, LOGGING),
    ("enable-pprof", Arity::Switch, "leasekv has no pprof endpoint"),
    ("metrics", Arity::Value, "leasekv serves its metrics on the client port at /metrics"),
    ("grpc-keepalive-min-time", Arity::Value, KEEPALIVE),
    ("grpc-keepalive-interval", Arity::Value, KEEPALIVE),
    ("grpc-keepalive-timeout", Arity::Value, KEEPALIVE),
    ("backend-batch-interval", Arity::Value, "leasekv syncs every write before acknowledging it"),
    ("backend-batch-limit", Arity::Value, "leasekv syncs every write before acknowledging it"),
    ("backend-bbolt-freelist-type", Arity::Value, "leasekv does not store its data in bbolt"),
];

const RAFT_TIMING: &str =
    "a timing knob of Raft; leasekv elects its master with leases, timed by [election] lease_time_ms";
const LOGGING: &str = "leasekv logs to standard error, filtered by RUST_LOG (e.g. RUST_LOG=info)";
const KEEPALIVE: &str = "leasekv's client port keeps its own HTTP/2 keepalive";

/// etcd's flags leasekv refuses, with what to do instead.
const REFUSED: &[(&str, &str)] = &[
    ("config-file", "give kvserver its own TOML file with --config (docs/configuration.md)"),
    ("discovery", DISCOVERY),
    ("discovery-srv", DISCOVERY),
    ("discovery-srv-name", DISCOVERY),
    ("discovery-fallback", DISCOVERY),
    ("discovery-proxy", DISCOVERY),
    ("discovery-token", DISCOVERY),
    ("discovery-endpoints", DISCOVERY),
    ("proxy", PROXY),
    ("proxy-failure-wait", PROXY),
    ("proxy-refresh-interval", PROXY),
    ("proxy-dial-timeout", PROXY),
    ("proxy-write-timeout", PROXY),
    ("proxy-read-timeout", PROXY),
    ("enable-v2", "leasekv serves etcd's v3 API only"),
    ("auto-tls", AUTO_TLS),
    ("peer-auto-tls", AUTO_TLS),
    ("self-signed-cert-validity", AUTO_TLS),
    ("client-crl-file", "leasekv does not read certificate revocation lists"),
    ("peer-crl-file", "leasekv does not read certificate revocation lists"),
    ("cipher-suites", "leasekv uses rustls's default cipher suites"),
    ("tls-min-version", "leasekv speaks TLS 1.2 and 1.3 (rustls's defaults)"),
    ("tls-max-version", "leasekv speaks TLS 1.2 and 1.3 (rustls's defaults)"),
    ("force-new-cluster", "restore a snapshot into a new cluster instead (docs/operations.md)"),
    ("auth-token", "leasekv signs its own tokens (docs/security.md)"),
    ("listen-metrics-urls", "leasekv serves its metrics on the client port at /metrics"),
    ("unsafe-no-fsync", "leasekv always syncs before acknowledging"),
    ("wal-dir", "leasekv keeps its log in --data-dir"),
];

/// The refused flags that are booleans: set to false they ask for what leasekv does, and
/// are accepted with a warning.
const REFUSED_SWITCHES: &[&str] = &["enable-v2", "auto-tls", "peer-auto-tls", "force-new-cluster", "unsafe-no-fsync"];

/// Whether `value` is false as Go's flag package reads it.
fn is_false(value: &str) -> bool {
    matches!(value.trim(), "false" | "0" | "f" | "F" | "FALSE" | "False")
}

/// Whether `name` is a flag of etcd that this module knows of.
fn is_etcd_flag(name: &str) -> bool {
    SUPPORTED.contains(&name) || IGNORED.iter().any(|(f, _, _)| *f == name) || REFUSED.iter().any(|(f, _)| *f == name)
}

const DISCOVERY: &str = "leasekv has no discovery service; list the members with --initial-cluster";
const PROXY: &str = "leasekv has no proxy mode";
const AUTO_TLS: &str = "give certificates with --cert-file/--key-file and --peer-cert-file/--peer-key-file";

/// Why etcd's settings cannot be used: one line naming the flag or variable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EtcdError {
    /// An etcd flag or variable leasekv does not support.
    #[error("{given}: etcd's --{flag} is not supported by leasekv: {instead}")]
    Unsupported {
        /// `--flag` or `ETCD_FLAG`, as given.
        given: String,
        /// The flag's etcd name.
        flag: &'static str,
        /// What to do instead.
        instead: &'static str,
    },
    /// A value that does not mean what etcd's flag takes.
    #[error("{given}: {problem}")]
    Value {
        /// `--flag` or `ETCD_FLAG`.
        given: String,
        /// What is wrong and what is allowed.
        problem: String,
    },
}

/// One etcd setting as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The value.
    pub value: String,
    /// Whether it came from an `ETCD_*` variable rather than a flag.
    pub from_env: bool,
}

/// etcd's settings as given on the command line and in the environment, by etcd flag name
/// (flags over variables), and the warnings for those ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSettings {
    given: BTreeMap<&'static str, Given>,
    /// One line for each setting ignored, saying why; the caller logs them.
    pub warnings: Vec<String>,
}

/// `ETCD_LISTEN_CLIENT_URLS` for `listen-client-urls`.
pub fn env_name(flag: &str) -> String {
    format!("ETCD_{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// `--flag` or `ETCD_FLAG`, as the setting was given.
fn source(flag: &str, from_env: bool) -> String {
    if from_env {
        env_name(flag)
    } else {
        format!("--{flag}")
    }
}

impl EtcdSettings {
    /// The settings of `flags` (etcd name and value, from the command line) over those of
    /// the `ETCD_*` variables in `env`. A variable of a refused flag is an error; one of an
    /// ignored flag, or one leasekv does not know, is a warning.
    pub fn gather(
        flags: impl IntoIterator<Item = (&'static str, String)>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<EtcdSettings, EtcdError> {
        let mut settings = EtcdSettings::default();
        for (variable, value) in env {
            if !variable.starts_with("ETCD_") {
                continue;
            }
            if let Some(&flag) = SUPPORTED.iter().find(|f| env_name(f) == variable) {
                settings.given.insert(flag, Given { value, from_env: true });
            } else if let Some(&(flag, instead)) = REFUSED.iter().find(|(f, _)| env_name(f) == variable) {
                if REFUSED_SWITCHES.contains(&flag) && is_false(&value) {
                    settings.warnings.push(format!("{variable}={value} is ignored: leasekv does not do it either"));
                    continue;
                }
                return Err(EtcdError::Unsupported { given: variable, flag, instead });
            } else if let Some(&(_, _, why)) = IGNORED.iter().find(|(f, _, _)| env_name(f) == variable) {
                settings.warnings.push(format!("{variable} is ignored: {why}"));
            } else if variable != "ETCD_UNSUPPORTED_ARCH" {
                settings.warnings.push(format!("{variable} is ignored: leasekv knows no such etcd setting"));
            }
        }
        for (flag, value) in flags {
            if let Some(shadowed) = settings.given.insert(flag, Given { value, from_env: false }) {
                if shadowed.from_env {
                    settings.warnings.push(format!("{} is shadowed by --{flag}", env_name(flag)));
                }
            }
        }
        Ok(settings)
    }

    /// Whether no etcd setting was given.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    /// The setting of etcd flag `flag`, if given.
    pub fn get(&self, flag: &str) -> Option<&Given> {
        self.given.get(flag)
    }

    /// The value of `flag` and the name it was given by, if given.
    fn value(&self, flag: &'static str) -> Option<(&str, String)> {
        self.given.get(flag).map(|g| (g.value.trim(), source(flag, g.from_env)))
    }
}

/// Takes etcd's ignored and refused flags out of `args` before the command-line parser
/// sees them: an ignored one (and its value) is dropped with a warning, a refused one is an
/// error naming it. Everything else is left for the parser, in order.
pub fn sift_args(args: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>), EtcdError> {
    let mut kept = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        // Go's flag package takes `-name` as `--name`; etcd's older docs write it so.
        let arg = match arg.to_str() {
            Some(text) if !text.starts_with("--") && text.len() > 2 => match text.strip_prefix('-') {
                Some(single) if is_etcd_flag(single.split('=').next().unwrap_or(single)) => {
                    OsString::from(format!("-{text}"))
                }
                _ => arg,
            },
            _ => arg,
        };
        let Some(text) = arg.to_str().and_then(|a| a.strip_prefix("--")) else {
            kept.push(arg);
            continue;
        };
        let (name, inline_value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        if let Some(&(flag, instead)) = REFUSED.iter().find(|(f, _)| *f == name) {
            if REFUSED_SWITCHES.contains(&flag) && inline_value.is_some_and(is_false) {
                warnings.push(format!("--{text} is ignored: leasekv does not do it either"));
                continue;
            }
            return Err(EtcdError::Unsupported { given: format!("--{flag}"), flag, instead });
        }
        let Some(&(flag, arity, why)) = IGNORED.iter().find(|(f, _, _)| *f == name) else {
            kept.push(arg);
            continue;
        };
        warnings.push(format!("--{flag} is ignored: {why}"));
        let takes_next = arity == Arity::Value && inline_value.is_none();
        if takes_next && args.peek().and_then(|next| next.to_str()).is_some_and(|next| !next.starts_with("--")) {
            args.next();
        }
    }
    Ok((kept, warnings))
}

/// One member of `--initial-cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialMember {
    /// Its name.
    pub name: String,
    /// Its peer URL, as written.
    pub peer_url: String,
    /// The address the URL names.
    pub peer_addr: SocketAddr,
}

/// etcd's settings translated into the configuration's terms; `None` (or empty) where the
/// setting was not given, so the file's value or the default holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtcdLayer {
    /// `--name`.
    pub name: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `<name>.etcd`, etcd's default data dir, when a name was given: below the file's
    /// `data_dir` in precedence, as any default.
    pub default_data_dir: Option<PathBuf>,
    /// `--listen-client-urls`: the first is `client_addr`, the rest listen too.
    pub client_addrs: Vec<SocketAddr>,
    /// `--advertise-client-urls`.
    pub advertise_client_urls: Vec<String>,
    /// `--listen-peer-urls`.
    pub peer_addr: Option<SocketAddr>,
    /// `--initial-cluster`, in the order given.
    pub initial_cluster: Vec<InitialMember>,
    /// `--initial-advertise-peer-urls`: this node's peer address.
    pub advertise_peer_addr: Option<SocketAddr>,
    /// `--initial-cluster-state`.
    pub cluster_state: Option<ClusterState>,
    /// `--initial-cluster-token`.
    pub cluster_token: Option<String>,
    /// `--cert-file`, `--key-file`, `--trusted-ca-file`, `--client-cert-auth`.
    pub client_tls: Option<ClientPortTls>,
    /// `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file`.
    pub peer_tls: Option<PeerPortTls>,
    /// `--quota-backend-bytes` (0 leaves the default).
    pub quota_bytes: Option<u64>,
    /// `--auto-compaction-mode` and `--auto-compaction-retention`.
    pub compaction: Option<CompactionPolicy>,
    /// `--max-request-bytes`.
    pub max_request_bytes: Option<usize>,
    /// `--max-txn-ops`.
    pub max_txn_ops: Option<usize>,
    /// Lines to log at start: settings ignored or accepted with a caveat.
    pub warnings: Vec<String>,
}

impl EtcdLayer {
    /// Translates `settings`, checking each value as etcd would.
    pub fn of(settings: &EtcdSettings) -> Result<EtcdLayer, EtcdError> {
        let mut layer = EtcdLayer { warnings: settings.warnings.clone(), ..EtcdLayer::default() };
        layer.name = settings.value("name").map(|(v, _)| v.to_string());
        layer.data_dir = settings.value("data-dir").map(|(v, _)| PathBuf::from(v));
        layer.default_data_dir = layer.name.as_ref().map(|name| PathBuf::from(format!("{name}.etcd")));

        let client_https = settings.get("cert-file").is_some();
        if let Some((value, given)) = settings.value("listen-client-urls") {
            for url in split_list(value) {
                layer.client_addrs.push(listen_address(url, client_https, "--cert-file", &given)?);
            }
            if settings.get("advertise-client-urls").is_none() {
                return Err(EtcdError::Value {
                    given,
                    problem: "--advertise-client-urls is required with --listen-client-urls (as etcd requires): \
                              the URLs clients and the other members reach this member at"
                        .into(),
                });
            }
        }
        if let Some((value, given)) = settings.value("advertise-client-urls") {
            for url in split_list(value) {
                parse_url(url, &given)?;
                layer.advertise_client_urls.push(url.to_string());
            }
        }
        let peer_https = settings.get("peer-cert-file").is_some();
        if let Some((value, given)) = settings.value("listen-peer-urls") {
            let url = single(value, &given, "leasekv listens for its peers on one address")?;
            layer.peer_addr = Some(listen_address(url, peer_https, "--peer-cert-file", &given)?);
        }
        if let Some((value, given)) = settings.value("initial-cluster") {
            layer.initial_cluster = initial_cluster(value, &given)?;
            for member in &layer.initial_cluster {
                listen_address(&member.peer_url, peer_https, "--peer-cert-file", &given)?;
            }
        }
        if let Some((value, given)) = settings.value("initial-advertise-peer-urls") {
            let url = single(value, &given, "a leasekv member has one peer URL")?;
            layer.advertise_peer_addr = Some(parse_url(url, &given)?.1);
        }
        layer.cluster_state = match settings.value("initial-cluster-state") {
            None => None,
            Some(("new", _)) => Some(ClusterState::New),
            Some(("existing", _)) => Some(ClusterState::Existing),
            Some((other, given)) => {
                return Err(EtcdError::Value {
                    given,
                    problem: format!("{other:?} is not a cluster state; use \"new\" or \"existing\""),
                })
            }
        };
        layer.cluster_token = settings.value("initial-cluster-token").map(|(v, _)| v.to_string());
        layer.client_tls = client_tls(settings)?;
        layer.peer_tls = peer_tls(settings, &mut layer.warnings)?;
        layer.quota_bytes = number(settings, "quota-backend-bytes")?.filter(|q| *q > 0);
        layer.max_request_bytes = number(settings, "max-request-bytes")?.map(saturating_usize);
        layer.max_txn_ops = number(settings, "max-txn-ops")?.map(saturating_usize);
        layer.compaction = compaction(settings)?;
        Ok(layer)
    }

    /// Every member of `--initial-cluster` with its id: its place among the members sorted
    /// by name, counted from 1, so that every member derives the same ids from the same
    /// list, whatever its order.
    pub fn initial_cluster_ids(&self) -> Vec<(u32, &InitialMember)> {
        let mut members: Vec<&InitialMember> = self.initial_cluster.iter().collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members.into_iter().enumerate().map(|(i, m)| (u32::try_from(i + 1).unwrap_or(u32::MAX), m)).collect()
    }

    /// This node's entry in `--initial-cluster`, found by `--name` (etcd's rule; etcd's
    /// default name is `default`), with its id.
    pub fn me_in_initial_cluster(&self) -> Option<(u32, &InitialMember)> {
        let name = self.name.as_deref().unwrap_or("default");
        self.initial_cluster_ids().into_iter().find(|(_, m)| m.name == name)
    }
}

fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The comma-separated items of `value`, trimmed, empty ones left out.
fn split_list(value: &str) -> Vec<&str> {
    value.split(',').map(str::trim).filter(|item| !item.is_empty()).collect()
}

/// The one URL of `value`; more than one is refused, saying `why`.
fn single<'a>(value: &'a str, given: &str, why: &str) -> Result<&'a str, EtcdError> {
    match split_list(value).as_slice() {
        [url] => Ok(*url),
        urls => {
            Err(EtcdError::Value { given: given.to_string(), problem: format!("{} URLs given; {why}", urls.len()) })
        }
    }
}

/// `url`'s scheme (`true` for https) and the address it names (a host name resolved, e.g.
/// `localhost`, preferring IPv4 as etcd's `localhost` default does).
fn parse_url(url: &str, given: &str) -> Result<(bool, SocketAddr), EtcdError> {
    let bad = |problem: String| EtcdError::Value { given: given.to_string(), problem };
    let parsed = url::Url::parse(url)
        .map_err(|e| bad(format!("{url:?} is not a URL ({e}); expected e.g. http://10.0.0.1:2379")))?;
    let https = match parsed.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(bad(format!("{url:?}: scheme {other:?} is not supported; use http or https"))),
    };
    if !matches!(parsed.path(), "" | "/") || parsed.query().is_some() {
        return Err(bad(format!("{url:?}: only a scheme, a host and a port are allowed")));
    }
    let host = parsed.host_str().ok_or_else(|| bad(format!("{url:?} names no host")))?;
    // The url crate reports a scheme's default port (http://h:80) as none; etcd, like Go's
    // listener, needs a port written out.
    let written_default =
        parsed.port_or_known_default().filter(|port| url.trim_end_matches('/').ends_with(&format!(":{port}")));
    let port =
        parsed.port().or(written_default).ok_or_else(|| bad(format!("{url:?} names no port; add one, e.g. :2379")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(format!("{url:?}: host {host:?} does not resolve ({e})")))?
        .min_by_key(|a| !a.is_ipv4())
        .ok_or_else(|| bad(format!("{url:?}: host {host:?} resolves to no address")))?;
    Ok((https, addr))
}

/// A listen URL's address, its scheme checked against whether TLS is configured.
fn listen_address(url: &str, tls: bool, cert_flag: &str, given: &str) -> Result<SocketAddr, EtcdError> {
    let (https, addr) = parse_url(url, given)?;
    if https != tls {
        let problem = if https {
            format!("{url:?} is https, but no certificate is given; add {cert_flag} (and its key), or use http")
        } else {
            format!("{url:?} is http, but {cert_flag} is given; leasekv serves TLS on every listen URL of a port, so use https")
        };
        return Err(EtcdError::Value { given: given.to_string(), problem });
    }
    Ok(addr)
}

/// `name=url,name=url,...`.
fn initial_cluster(value: &str, given: &str) -> Result<Vec<InitialMember>, EtcdError> {
    let bad = |problem: String| EtcdError::Value { given: given.to_string(), problem };
    let mut members: Vec<InitialMember> = Vec::new();
    for item in split_list(value) {
        let (name, url) = item
            .split_once('=')
            .ok_or_else(|| bad(format!("{item:?} is not NAME=PEER_URL; expected e.g. infra0=http://10.0.1.10:2380")))?;
        let (name, url) = (name.trim(), url.trim());
        if name.is_empty() {
            return Err(bad(format!("{item:?} names no member")));
        }
        if members.iter().any(|m| m.name == name) {
            return Err(bad(format!("member {name:?} is listed twice; a leasekv member has one peer URL")));
        }
        let peer_addr = parse_url(url, given)?.1;
        members.push(InitialMember { name: name.to_string(), peer_url: url.to_string(), peer_addr });
    }
    if members.is_empty() {
        return Err(bad("lists no member; expected e.g. infra0=http://10.0.1.10:2380,infra1=...".into()));
    }
    Ok(members)
}

/// A boolean as Go's flag package takes it (a flag given alone is `true`).
fn switch(settings: &EtcdSettings, flag: &'static str) -> Result<Option<bool>, EtcdError> {
    match settings.value(flag) {
        None => Ok(None),
        Some(("" | "true" | "1" | "t" | "T" | "TRUE" | "True", _)) => Ok(Some(true)),
        Some(("false" | "0" | "f" | "F" | "FALSE" | "False", _)) => Ok(Some(false)),
        Some((other, given)) => {
            Err(EtcdError::Value { given, problem: format!("{other:?} is not a boolean; use true or false") })
        }
    }
}

fn number(settings: &EtcdSettings, flag: &'static str) -> Result<Option<u64>, EtcdError> {
    match settings.value(flag) {
        None => Ok(None),
        Some((text, given)) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|_| EtcdError::Value { given, problem: format!("{text:?} is not a whole number") }),
    }
}

fn path(settings: &EtcdSettings, flag: &'static str) -> Option<PathBuf> {
    settings.value(flag).map(|(v, _)| PathBuf::from(v))
}

/// `--cert-file`, `--key-file`, `--trusted-ca-file`, `--client-cert-auth`.
fn client_tls(settings: &EtcdSettings) -> Result<Option<ClientPortTls>, EtcdError> {
    let require_client_cert = switch(settings, "client-cert-auth")?.unwrap_or(false);
    match (path(settings, "cert-file"), path(settings, "key-file")) {
        (Some(cert), Some(key)) => {
            Ok(Some(ClientPortTls { cert, key, ca: path(settings, "trusted-ca-file"), require_client_cert }))
        }
        (None, None) => {
            for flag in ["trusted-ca-file", "client-cert-auth"] {
                if let Some(given) = settings.get(flag) {
                    return Err(EtcdError::Value {
                        given: source(flag, given.from_env),
                        problem: "needs --cert-file and --key-file: client TLS is off without them".into(),
                    });
                }
            }
            Ok(None)
        }
        (Some(_), None) => Err(pair_missing(settings, "cert-file", "key-file", "the certificate's private key")),
        (None, Some(_)) => Err(pair_missing(settings, "key-file", "cert-file", "the certificate of the key")),
    }
}

const PEER_TLS_IS_MUTUAL: &str =
    "leasekv's peer TLS is mutual: each member needs a certificate, its key and the CA that signs the members'";

/// `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file`,
/// `--peer-client-cert-auth`: leasekv's peer TLS is always mutual.
fn peer_tls(settings: &EtcdSettings, warnings: &mut Vec<String>) -> Result<Option<PeerPortTls>, EtcdError> {
    const FLAGS: [&str; 3] = ["peer-cert-file", "peer-key-file", "peer-trusted-ca-file"];
    let verify = switch(settings, "peer-client-cert-auth")?;
    match (path(settings, FLAGS[0]), path(settings, FLAGS[1]), path(settings, FLAGS[2])) {
        (Some(cert), Some(key), Some(ca)) => {
            if verify == Some(false) {
                warnings.push(
                    "--peer-client-cert-auth=false is ignored: leasekv's members always verify each other's certificates"
                        .into(),
                );
            }
            Ok(Some(PeerPortTls { cert, key, ca }))
        }
        (None, None, None) => match settings.get("peer-client-cert-auth") {
            Some(given) => Err(EtcdError::Value {
                given: source("peer-client-cert-auth", given.from_env),
                problem: "needs --peer-cert-file, --peer-key-file and --peer-trusted-ca-file".into(),
            }),
            None => Ok(None),
        },
        _ => {
            let present = FLAGS.into_iter().find(|f| settings.get(f).is_some()).unwrap_or(FLAGS[0]);
            let missing = FLAGS.into_iter().find(|f| settings.get(f).is_none()).unwrap_or(FLAGS[2]);
            Err(pair_missing(settings, present, missing, PEER_TLS_IS_MUTUAL))
        }
    }
}

/// `present` was given without `missing`, needed for `why`.
fn pair_missing(settings: &EtcdSettings, present: &'static str, missing: &'static str, why: &str) -> EtcdError {
    let from_env = settings.get(present).is_some_and(|g| g.from_env);
    EtcdError::Value { given: source(present, from_env), problem: format!("needs --{missing} too ({why})") }
}

/// `--auto-compaction-mode` (`periodic`, etcd's default, or `revision`) and
/// `--auto-compaction-retention` (etcd's default `0`: off; in periodic mode a bare number
/// counts hours, as in etcd).
fn compaction(settings: &EtcdSettings) -> Result<Option<CompactionPolicy>, EtcdError> {
    let mode = settings.value("auto-compaction-mode");
    let retention = settings.value("auto-compaction-retention");
    if mode.is_none() && retention.is_none() {
        return Ok(None);
    }
    let (mode_name, mode_given) = mode.unwrap_or(("periodic", "--auto-compaction-mode".into()));
    if !matches!(mode_name, "periodic" | "revision") {
        return Err(EtcdError::Value {
            given: mode_given,
            problem: format!("{mode_name:?} is not a compaction mode; use \"periodic\" or \"revision\""),
        });
    }
    let (retention, given) = retention.unwrap_or(("0", mode_given));
    if retention == "0" {
        return Ok(Some(CompactionPolicy::Off));
    }
    let retention = if mode_name == "periodic" && retention.bytes().all(|b| b.is_ascii_digit()) {
        format!("{retention}h")
    } else {
        retention.to_string()
    };
    CompactionPolicy::parse(mode_name, Some(retention.as_str()))
        .map(Some)
        .map_err(|problem| EtcdError::Value { given, problem })
}

#[cfg(test)]
mod tests;
