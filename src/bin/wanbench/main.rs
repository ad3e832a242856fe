//! Linearizable reads and puts over emulated wide-area links, leasekv against etcd
//! (docs/read-leases.md, docs/performance.md): every link between members delayed by half
//! the round trip each way, each client next to one member with no delay.
//!
//! ```text
//! cargo run --release -p leasekv --features fault-injection --bin wanbench -- --system leasekv --rtt-ms 20
//! cargo run --release -p leasekv --features fault-injection --bin wanbench -- --system etcd --rtt-ms 20
//! cargo bench --features fault-injection --bench wan -- --rtt-ms 20   # both, side by side
//! ```
//!
//! It runs on the chaos harness's network (its modules, included below): a network namespace
//! per member on a bridge, the clients in one more, and the harness's userspace proxy on
//! every peer link, which holds each chunk for RTT/2 (this kernel has no `tc netem`). Needs
//! root, iproute2 and nftables, as the harness does.
//!
//! The last line is `key=value`: `lin_read_p50_ms`/`p99` at a follower and at the master
//! (one client, one read at a time), `put_p50_ms`/`p99` from a follower and from the master,
//! `lin_reads_per_s` of 64 clients spread over the members, and `write_stall_ms`: the
//! longest wait of a put at the master around a kill -9 of a follower (for leasekv, a
//! read-lease holder).

// The chaos harness's cluster, network and proxy, shared rather than copied; this program
// uses part of what they offer.
#[allow(dead_code)]
#[path = "../chaos/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "../chaos/lazyfs.rs"]
mod lazyfs;
#[allow(dead_code)]
#[path = "../chaos/net.rs"]
mod net;
#[allow(dead_code)]
#[path = "../chaos/proxy.rs"]
mod proxy;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use cluster::{Cluster, Target};
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::{PutRequest, RangeRequest};
use net::Net;
use proxy::LinkFault;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Which system the members run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SystemArg {
    /// leasekv's kvserver (read leases as configured by default).
    Leasekv,
    /// etcd.
    Etcd,
}

/// Reads and puts over delayed member links.
#[derive(Debug, Parser, Clone)]
#[command(version)]
struct Args {
    /// The system to measure.
    #[arg(long, value_enum)]
    system: SystemArg,
    /// The round trip between any two members, milliseconds (half of it each way).
    #[arg(long, default_value_t = 20)]
    rtt_ms: u64,
    /// Sequential operations per latency figure.
    #[arg(long, default_value_t = 300)]
    samples: usize,
    /// Concurrent readers for the throughput figure, spread over the members.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// How long the throughput figure is measured, seconds.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// leasekv: `[reads] leases = false` on every member (every linearizable read goes to
    /// the master).
    #[arg(long)]
    no_read_leases: bool,
    /// The server program (default: the kvserver next to this program, or etcd on PATH).
    #[arg(long)]
    program: Option<PathBuf>,
    /// Internal: the namespaces exist and this process runs inside them.
    #[arg(long, hide = true)]
    inner: Option<String>,
}

/// Members of the cluster measured.
const NODES: usize = 3;

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match &args.inner {
        None => outer(),
        Some(tag) => inner(&args, tag),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wanbench: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Makes the namespaces, runs the benchmark inside the clients' one, removes them.
fn outer() -> Result<()> {
    match Net::run_self_inside(NODES)?.success() {
        true => Ok(()),
        false => bail!("the benchmark failed"),
    }
}

fn inner(args: &Args, tag: &str) -> Result<()> {
    let net = Net::existing(tag, NODES);
    let target = match args.system {
        SystemArg::Leasekv => Target::LeaseKv("paxoslease".into()),
        SystemArg::Etcd => Target::Etcd,
    };
    let program = match (&args.program, &target) {
        (Some(p), _) => p.clone(),
        (None, Target::LeaseKv(_)) => std::env::current_exe()?.with_file_name("kvserver"),
        (None, Target::Etcd) => PathBuf::from("etcd"),
    };
    let dir = std::env::temp_dir().join(format!("leasekv-wanbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let outcome = runtime.block_on(async {
        let one_way = Duration::from_millis(args.rtt_ms) / 2;
        for from in 0..NODES {
            for to in (0..NODES).filter(|&to| to != from) {
                net.links.set(from, to, LinkFault { delay: one_way, jitter: Duration::ZERO, loss: 0.0 });
            }
        }
        proxy::start(NODES, cluster::PEER_PORT, net.links.clone(), 1).await.context("starting the link proxy")?;
        let extra = if args.no_read_leases { "[reads]\nleases = false\n" } else { "" };
        let disks = cluster::Disks::default();
        let mut cluster = Cluster::start(target.clone(), program, &dir, net.clone(), NODES, None, disks, extra)?;
        let figures = measure(args, &mut cluster).await;
        cluster.stop();
        figures
    });
    let _ = std::fs::remove_dir_all(&dir);
    let figures = outcome?;
    let mut line = format!(
        "system={} rtt_ms={} read_leases={}",
        target.name(),
        args.rtt_ms,
        args.system == SystemArg::Leasekv && !args.no_read_leases
    );
    for (key, value) in figures {
        line.push_str(&format!(" {key}={value:.2}"));
    }
    println!("{line}");
    Ok(())
}

/// A client of node `i`, connected.
async fn client(i: usize) -> Result<KvClient<Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(Cluster::endpoint(i))?
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .with_context(|| format!("connecting to member {i}"))?;
    Ok(KvClient::new(channel))
}

/// The `p`-th percentile of `samples` (sorted in place), milliseconds.
fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let at = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples.get(at).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

/// `n` sequential linearizable reads of `key` at node `i`.
async fn read_latencies(i: usize, key: &[u8], n: usize) -> Result<Vec<Duration>> {
    let mut kv = client(i).await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        kv.range(RangeRequest { key: key.to_vec(), ..Default::default() }).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// `n` sequential puts through node `i`.
async fn put_latencies(i: usize, key: &[u8], n: usize) -> Result<Vec<Duration>> {
    let mut kv = client(i).await?;
    let mut samples = Vec::with_capacity(n);
    for v in 0..n {
        let started = Instant::now();
        kv.put(PutRequest { key: key.to_vec(), value: v.to_string().into_bytes(), ..Default::default() }).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// Every figure, in the order printed.
async fn measure(args: &Args, cluster: &mut Cluster) -> Result<Vec<(&'static str, f64)>> {
    let master = cluster.wait_for_master(Duration::from_secs(20)).await.context("no master within 20 s")?;
    let follower = (master + 1) % NODES;
    let key = b"/wan/key".to_vec();
    // Warm up: connections, and (leasekv) the followers' read leases.
    put_latencies(master, &key, 20).await?;
    read_latencies(follower, &key, 20).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut figures = Vec::new();
    let mut reads = read_latencies(follower, &key, args.samples).await?;
    figures.push(("lin_read_follower_p50_ms", percentile(&mut reads, 0.5)));
    figures.push(("lin_read_follower_p99_ms", percentile(&mut reads, 0.99)));
    let mut reads = read_latencies(master, &key, args.samples).await?;
    figures.push(("lin_read_master_p50_ms", percentile(&mut reads, 0.5)));
    figures.push(("lin_read_master_p99_ms", percentile(&mut reads, 0.99)));
    let mut puts = put_latencies(follower, &key, args.samples).await?;
    figures.push(("put_follower_p50_ms", percentile(&mut puts, 0.5)));
    figures.push(("put_follower_p99_ms", percentile(&mut puts, 0.99)));
    let mut puts = put_latencies(master, &key, args.samples).await?;
    figures.push(("put_master_p50_ms", percentile(&mut puts, 0.5)));
    figures.push(("put_master_p99_ms", percentile(&mut puts, 0.99)));
    figures.push(("lin_reads_per_s", read_throughput(args, &key).await?));
    figures.push(("write_stall_ms", write_stall(cluster, master, follower, &key).await?));
    Ok(figures)
}

/// Linearizable reads per second of `args.clients` closed-loop readers, client `c` on
/// member `c % 3`.
async fn read_throughput(args: &Args, key: &[u8]) -> Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for c in 0..args.clients {
        let mut kv = client(c % NODES).await?;
        let (done, stop, key) = (done.clone(), stop.clone(), key.to_vec());
        readers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if kv.range(RangeRequest { key: key.clone(), ..Default::default() }).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let started = Instant::now();
    let before = done.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let count = done.load(Ordering::Relaxed) - before;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        let _ = reader.await;
    }
    Ok(count as f64 / took.as_secs_f64())
}

/// The longest a put at the master waits around a kill -9 of `follower`: puts one after
/// another for a second before the kill and three after it.
async fn write_stall(cluster: &mut Cluster, master: usize, follower: usize, key: &[u8]) -> Result<f64> {
    let mut kv = client(master).await?;
    let mut longest = Duration::ZERO;
    let started = Instant::now();
    let mut killed = false;
    let mut v = 0u64;
    while started.elapsed() < Duration::from_secs(4) {
        if !killed && started.elapsed() >= Duration::from_secs(1) {
            cluster.kill(follower);
            killed = true;
        }
        let put = Instant::now();
        let request = PutRequest { key: key.to_vec(), value: v.to_string().into_bytes(), ..Default::default() };
        tokio::time::timeout(Duration::from_secs(5), kv.put(request)).await.context("a put took over 5 s")??;
        longest = longest.max(put.elapsed());
        v += 1;
    }
    Ok(longest.as_secs_f64() * 1000.0)
}
