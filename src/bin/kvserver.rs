//! `kvserver`: one leasekv node. With no arguments: a single-node store on 127.0.0.1:2379
//! with its data in ./leasekv-data. `kvserver restore FILE --config N.toml` builds that
//! node's data directory from a snapshot file instead of serving.

use anyhow::Result;
use clap::{Parser, Subcommand};
use leasekv::server::config::{NodeConfig, Overrides};
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
    /// Instead of serving: another task.
    #[command(subcommand)]
    command: Option<Task>,
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
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(error) = run(args) {
        // Our error messages already name their cause; `{:#}` would print it twice.
        eprintln!("kvserver: error: {error}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let overrides = Overrides {
        id: args.id,
        client_addr: args.client_addr,
        peer_addr: args.peer_addr,
        data_dir: args.data_dir,
        backend: args.backend,
        lease_time_ms: args.lease_time_ms,
        worker_threads: args.worker_threads,
    };
    let config = NodeConfig::load(args.config.as_deref(), &overrides)?;
    if let Some(Task::Restore { file }) = args.command {
        let restored = leasekv::server::restore::restore(&file, &config.data_dir)?;
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
