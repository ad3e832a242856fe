//! `kvserver`: one leasekv node. With no arguments: a single-node store on 127.0.0.1:2379
//! with its data in ./leasekv-data. `kvserver restore FILE --config N.toml` builds that
//! node's data directory from a snapshot file instead of serving.

use anyhow::Result;
use clap::{Parser, Subcommand};
use leasekv::server::config::{etcd, NodeConfig, Overrides};
use leasekv::server::join::record::IdentityRecord;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A leasekv node (etcd v3 API on the client address).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The node's TOML configuration (see examples/cluster/n1.toml); without it, a single
    /// node on 127.0.0.1:2379 with data in ./leasekv-data.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Override: this node's id.
    #[arg(long)]
    id: Option<u32>,
    /// Override: client listen address.
    #[arg(long)]
    client_addr: Option<SocketAddr>,
    /// Override: peer listen address.
    #[arg(long)]
    peer_addr: Option<SocketAddr>,
    /// Override: data directory.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Override: election backend (paxoslease or lease-tracker).
    #[arg(long)]
    backend: Option<String>,
    /// Override: election lease time, milliseconds.
    #[arg(long)]
    lease_time_ms: Option<u64>,
    /// Override: worker threads of the runtime (default: half of this host's CPUs, at least 1).
    #[arg(long)]
    worker_threads: Option<usize>,
    /// etcd's flags (also read from their ETCD_* variables).
    #[command(flatten)]
    etcd: EtcdFlags,
    /// Instead of serving: another task.
    #[command(subcommand)]
    command: Option<Task>,
}

/// etcd's flags, with etcd's meaning (docs/configuration.md, "From etcd's flags"). Each
/// may also be given as its `ETCD_*` variable (`--initial-cluster` as
/// `ETCD_INITIAL_CLUSTER`); a flag wins over its variable, both over the --config file.
/// `--data-dir` is kvserver's own flag and etcd's.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "etcd flags")]
struct EtcdFlags {
    /// This member's name (etcd's default data dir is NAME.etcd).
    #[arg(long)]
    name: Option<String>,
    /// URLs to listen on for clients, comma separated (http or https).
    #[arg(long, value_name = "URLS")]
    listen_client_urls: Option<String>,
    /// This member's client URLs, as clients and the other members reach it.
    #[arg(long, value_name = "URLS")]
    advertise_client_urls: Option<String>,
    /// The URL to listen on for the other members (one).
    #[arg(long, value_name = "URL")]
    listen_peer_urls: Option<String>,
    /// This member's peer URL, as the other members reach it.
    #[arg(long, value_name = "URL")]
    initial_advertise_peer_urls: Option<String>,
    /// The members of a new cluster: NAME=PEER_URL,... (ids follow the names' order).
    #[arg(long, value_name = "MEMBERS")]
    initial_cluster: Option<String>,
    /// `new` (bootstrap) or `existing` (join after `etcdctl member add`).
    #[arg(long, value_name = "STATE")]
    initial_cluster_state: Option<String>,
    /// Keeps this cluster's id apart from another's of the same members.
    #[arg(long, value_name = "TOKEN")]
    initial_cluster_token: Option<String>,
    /// The client port's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    cert_file: Option<String>,
    /// The client port's private key (PEM).
    #[arg(long, value_name = "FILE")]
    key_file: Option<String>,
    /// The CA client certificates are verified against.
    #[arg(long, value_name = "FILE")]
    trusted_ca_file: Option<String>,
    /// Refuse clients without a certificate signed by --trusted-ca-file.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    client_cert_auth: Option<String>,
    /// This member's peer certificate (PEM).
    #[arg(long, value_name = "FILE")]
    peer_cert_file: Option<String>,
    /// This member's peer private key (PEM).
    #[arg(long, value_name = "FILE")]
    peer_key_file: Option<String>,
    /// The CA the members' certificates are verified against.
    #[arg(long, value_name = "FILE")]
    peer_trusted_ca_file: Option<String>,
    /// Members always verify each other's certificates; accepted for etcd's command lines.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    peer_client_cert_auth: Option<String>,
    /// Refuse writes once the data reaches this many bytes (0: the default, 2 GiB).
    #[arg(long, value_name = "BYTES")]
    quota_backend_bytes: Option<String>,
    /// `periodic` (retention a duration; a bare number counts hours) or `revision`.
    #[arg(long, value_name = "MODE")]
    auto_compaction_mode: Option<String>,
    /// How much history auto-compaction keeps; 0 turns it off.
    #[arg(long, value_name = "RETENTION")]
    auto_compaction_retention: Option<String>,
    /// The largest client request.
    #[arg(long, value_name = "BYTES")]
    max_request_bytes: Option<String>,
    /// The most operations in one transaction.
    #[arg(long, value_name = "N")]
    max_txn_ops: Option<String>,
}

impl EtcdFlags {
    /// The flags given, by etcd name.
    fn given(self) -> Vec<(&'static str, String)> {
        [
            ("name", self.name),
            ("listen-client-urls", self.listen_client_urls),
            ("advertise-client-urls", self.advertise_client_urls),
            ("listen-peer-urls", self.listen_peer_urls),
            ("initial-advertise-peer-urls", self.initial_advertise_peer_urls),
            ("initial-cluster", self.initial_cluster),
            ("initial-cluster-state", self.initial_cluster_state),
            ("initial-cluster-token", self.initial_cluster_token),
            ("cert-file", self.cert_file),
            ("key-file", self.key_file),
            ("trusted-ca-file", self.trusted_ca_file),
            ("client-cert-auth", self.client_cert_auth),
            ("peer-cert-file", self.peer_cert_file),
            ("peer-key-file", self.peer_key_file),
            ("peer-trusted-ca-file", self.peer_trusted_ca_file),
            ("peer-client-cert-auth", self.peer_client_cert_auth),
            ("quota-backend-bytes", self.quota_backend_bytes),
            ("auto-compaction-mode", self.auto_compaction_mode),
            ("auto-compaction-retention", self.auto_compaction_retention),
            ("max-request-bytes", self.max_request_bytes),
            ("max-txn-ops", self.max_txn_ops),
        ]
        .into_iter()
        .filter_map(|(flag, value)| Some((flag, value?)))
        .collect()
    }
}

/// What kvserver does instead of serving.
#[derive(Debug, Subcommand)]
enum Task {
    /// Build this node's data directory (from --config or --data-dir; it must not exist or
    /// be empty) from a snapshot file taken with `kvcli snapshot save` or `etcdctl snapshot
    /// save`, as the first state of a new cluster. Run it for every member, then start them.
    Restore {
        /// The snapshot file.
        file: PathBuf,
    },
}

/// The allocator: a node allocates and frees small buffers on every request (gRPC frames,
/// messages, answers); mimalloc's per-thread free lists make that cheaper than glibc's
/// malloc (docs/performance.md has the measurement).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // etcd's flags that leasekv ignores or refuses are taken out before clap sees them, so
    // they get a line saying why rather than clap's "unexpected argument".
    let (argv, ignored) = match etcd::sift_args(std::env::args_os().collect()) {
        Ok(sifted) => sifted,
        Err(error) => {
            eprintln!("kvserver: error: {error}");
            std::process::exit(2);
        }
    };
    let args = Args::parse_from(argv);
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(error) = run(args, ignored) {
        // Our error messages already name their cause; `{:#}` would print it twice.
        eprintln!("kvserver: error: {error}");
        std::process::exit(1);
    }
}

fn run(args: Args, ignored: Vec<String>) -> Result<()> {
    // Variables that are not Unicode are no etcd setting; they are left alone.
    let env = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let mut etcd = etcd::EtcdSettings::gather(args.etcd.given(), env)?;
    etcd.warnings.extend(ignored);
    let overrides = Overrides {
        id: args.id,
        client_addr: args.client_addr,
        peer_addr: args.peer_addr,
        data_dir: args.data_dir,
        backend: args.backend,
        lease_time_ms: args.lease_time_ms,
        worker_threads: args.worker_threads,
        etcd,
    };
    let config = NodeConfig::load(args.config.as_deref(), &overrides)?;
    if let Some(Task::Restore { file }) = args.command {
        let restored = leasekv::server::restore::restore(&file, &config.data_dir)?;
        // The restored member's identity, as a first start records it: the configuration's
        // cluster id (give the new cluster its own, docs/operations.md) and member id.
        if config.id.0 != 0 {
            let record = IdentityRecord { cluster_id: config.cluster_id, member_id: config.id.0 };
            leasekv::server::join::record::write(&config.data_dir, record)?;
        }
        eprintln!(
            "kvserver: restored revision {} ({} keys, {} leases) from {} into {}",
            restored.revision,
            restored.keys,
            restored.leases,
            file.display(),
            config.data_dir.display()
        );
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.runtime.worker_threads)
        .enable_all()
        .build()?;
    runtime.block_on(leasekv::server::run::run(config, shutdown_signal()))?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
