//! `chaos`: fault injection on real processes. Starts a cluster of `kvserver` (or `etcd`)
//! processes, each in its own network namespace, drives a register workload through etcd's
//! API, injects faults (kills, pauses, partitions, clock skew), heals, and checks the
//! recorded history: linearizability per key, no acknowledged write lost, every node
//! converged, and (leasekv) no two master leases overlapping in real time.
//!
//! ```sh
//! cargo run --release -p leasekv --features fault-injection --bin chaos -- --duration 60
//! ```
//!
//! It needs root (network namespaces), `ip` (iproute2) and `nft` (nftables). The last line
//! it prints is `seed=… ops_checked=… lost=0 anomalies=0 …`; it exits 0 only when every
//! check holds. See docs/chaos.md.

mod check;
mod cluster;
mod faults;
mod lazyfs;
mod leases;
mod net;
mod proxy;
mod snapshots;
mod storm;
mod takeovers;
mod txns;
mod watches;
mod workload;

use anyhow::{bail, Context, Result};
use clap::Parser;
use cluster::{Cluster, Target};
use faults::FaultClass;
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::RangeRequest;
use leasekv::kvstore::sim::linearizability::{KvOp, Operation};
use leasekv::lease::rng::SplitMix64;
use net::Net;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use workload::Recorder;

/// Fault injection on real kvserver processes, with checked histories.
#[derive(Debug, Parser, Clone)]
#[command(version)]
struct Args {
    /// Cluster size.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=7))]
    nodes: u8,
    /// How long to inject faults, seconds; longer if needed to inject every class once (the
    /// run takes a little longer: start, heal, checks).
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// The seed of every random choice (default: from the time).
    #[arg(long)]
    seed: Option<u64>,
    /// Fault classes: `all`, `none`, or a comma-separated list of kill-master, kill-majority,
    /// kill-all, pause-master, isolate-master, split-majority, bridge, one-way, clock-skew,
    /// slow-cpu, disk-full, slow-links, lossy-links, slow-fsync, fsync-error, power-loss,
    /// isolate-follower, pause-follower, read-storm.
    #[arg(long, default_value = "all")]
    faults: String,
    /// A negative control the checks must catch: follower-reads, stale-lease-check,
    /// ack-before-fsync, watch-resume-gap, skip-fdatasync, split-txn, read-lease-expired
    /// (kvserver variants) or fast-clock (a master clock far outside the drift bound, cut off).
    #[arg(long = "break")]
    breakage: Option<String>,
    /// What runs on the nodes: leasekv or etcd.
    #[arg(long, default_value = "leasekv")]
    target: String,
    /// The leasekv election backend: paxoslease or lease-tracker.
    #[arg(long, default_value = "paxoslease")]
    backend: String,
    /// The chance that a second fault is injected on top of one in force (overlapping
    /// faults, for soaks), 0 to 1.
    #[arg(long, default_value_t = 0.0)]
    overlap: f64,
    /// Closed-loop register clients (spread over the nodes), besides one open-loop reader per node.
    #[arg(long, default_value_t = 6)]
    clients: u32,
    /// Lease clients (spread over the nodes), each holding a few TTL leases with a key.
    #[arg(long, default_value_t = 2)]
    lease_clients: u32,
    /// Registers (keys).
    #[arg(long, default_value_t = 12)]
    keys: usize,
    /// The server program (default: the kvserver next to this program, or etcd on PATH).
    #[arg(long)]
    program: Option<PathBuf>,
    /// Check a history saved by an earlier run (its `history.txt`) instead of running.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// The linearizability checker's search budget per key, in steps.
    #[arg(long, default_value_t = check::STEPS_PER_KEY)]
    steps_per_key: u64,
    /// Keep the run's directory (node logs, lease log, history) even when it passes.
    #[arg(long)]
    keep: bool,
    /// Internal: the run's namespaces exist and this process runs inside them.
    #[arg(long, hide = true)]
    inner: Option<String>,
}

const BREAKS: [&str; 8] = [
    "follower-reads",
    "stale-lease-check",
    "ack-before-fsync",
    "watch-resume-gap",
    "skip-fdatasync",
    "split-txn",
    "fast-clock",
    "read-lease-expired",
];

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match (&args.inner, &args.check) {
        (None, Some(file)) => check_saved(&args, file),
        (None, None) => outer(&args),
        (Some(tag), _) => inner(&args, tag),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("chaos: error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Checks a saved history: linearizability and lost writes.
fn check_saved(args: &Args, file: &std::path::Path) -> Result<ExitCode> {
    let history = check::load_history(file)?;
    let verdict = check::history(&history, args.steps_per_key);
    for anomaly in &verdict.anomalies {
        println!("anomaly: {anomaly}");
    }
    println!(
        "ops={} ops_checked={} acked_writes={} lost={} anomalies={}",
        history.len(),
        verdict.ops_checked,
        verdict.acked_writes,
        verdict.lost,
        verdict.anomalies.len()
    );
    Ok(if verdict.anomalies.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Makes the namespaces, runs the harness inside the client namespace, removes them.
fn outer(args: &Args) -> Result<ExitCode> {
    if let Some(name) = &args.breakage {
        if !BREAKS.contains(&name.as_str()) {
            bail!("unknown --break {name:?}; known: {}", BREAKS.join(", "));
        }
    }
    FaultClass::parse_list(&args.faults)?;
    let status = Net::run_self_inside(usize::from(args.nodes))?;
    Ok(ExitCode::from(status.code().unwrap_or(2).clamp(0, 255) as u8))
}

/// What happened per fault class.
#[derive(Default)]
struct ClassFigures {
    injected: usize,
    /// (start, end) of each injection's window: from injection to the next one.
    windows: Vec<(u64, u64)>,
}

/// How long the clients go on after the last fault is healed and a master is back: long
/// enough for a lease abandoned then to expire and be seen gone in a fault-free span.
const QUIET: Duration = Duration::from_secs(9);
/// How long a fault's effects may outlast the first write acknowledged after its healing (a
/// later election by a rejoining node, catch-up): the lease checks treat this span as
/// faulty too.
const AFTERMATH: Duration = Duration::from_secs(3);

fn inner(args: &Args, tag: &str) -> Result<ExitCode> {
    let nodes = usize::from(args.nodes);
    let net = Net::existing(tag, nodes);
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    let target = match args.target.as_str() {
        "leasekv" => Target::LeaseKv(args.backend.clone()),
        "etcd" => Target::Etcd,
        other => bail!("unknown --target {other:?}; known: leasekv, etcd"),
    };
    let program = match (&args.program, &target) {
        (Some(p), _) => p.clone(),
        (None, Target::LeaseKv(_)) => std::env::current_exe()?.with_file_name("kvserver"),
        (None, Target::Etcd) => PathBuf::from("etcd"),
    };
    let classes = FaultClass::parse_list(&args.faults)?;
    let kvserver_break = args.breakage.clone().filter(|b| b != "fast-clock");
    if kvserver_break.is_some() && target == Target::Etcd {
        bail!("--break {} needs --target leasekv", args.breakage.as_deref().unwrap_or(""));
    }
    let clock_break = args.breakage.as_deref() == Some("fast-clock");
    let dir = std::env::temp_dir().join(format!("leasekv-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let outcome = runtime.block_on(async {
        proxy::start(nodes, cluster::PEER_PORT, net.links.clone(), seed)
            .await
            .context("starting the peer-link proxy")?;
        let disks = cluster::Disks {
            small: classes.contains(&FaultClass::DiskFull),
            lazy: classes.contains(&FaultClass::PowerLoss),
        };
        let mut cluster = Cluster::start(target.clone(), program, &dir, net.clone(), nodes, kvserver_break, disks, "")?;
        let report = run(args, seed, &classes, clock_break, &mut cluster, &net).await;
        cluster.stop();
        report
    });
    let report = outcome?;
    let passed = report.anomalies.is_empty();
    print_report(args, seed, &target, &report);
    if passed && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
        Ok(ExitCode::SUCCESS)
    } else {
        let saved = dir.join("history.txt");
        if let Err(error) = check::save_history(&report.history, &saved) {
            eprintln!("chaos: cannot save the history: {error}");
        }
        eprintln!(
            "chaos: the nodes' logs, the lease log and the history (check it again with --check {}) are kept in {}",
            saved.display(),
            dir.display()
        );
        Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
    }
}

struct Report {
    duration_s: f64,
    ops: usize,
    ops_checked: usize,
    acked_writes: usize,
    lost: usize,
    anomalies: Vec<String>,
    /// The read storms' answers checked, and their reads that failed (allowed under the
    /// other faults).
    storm_reads: (usize, usize),
    lease_intervals: usize,
    /// Leaders taking office, as seen by polling every node's status.
    takeovers: usize,
    longest_unavailable_s: f64,
    classes: BTreeMap<FaultClass, ClassFigures>,
    history: Vec<Operation>,
    /// Watch events received, over all watchers, and streams opened (each resumption).
    watch_events: usize,
    watch_streams: usize,
    /// Two-key transactions checked for atomicity (also counted in `ops`, twice).
    txns: usize,
    /// Serializable reads checked against the committed history (not in `ops`).
    snapshot_reads: usize,
    /// Nodes that exited by themselves (not an anomaly: a node may stop rather than go on
    /// wrongly, e.g. on a full disk).
    exits: Vec<String>,
    /// What the power losses undid, when the nodes ran on lazy disks.
    power_lost: Option<lazyfs::Lost>,
    /// TTL leases followed to their end.
    leases_checked: usize,
    /// Over abandoned leases: seen gone after the last keepalive, less the TTL (earliest,
    /// latest), seconds.
    expiry_error_s: Option<(f64, f64)>,
    lives: Vec<leases::LeaseLife>,
}

async fn run(
    args: &Args,
    seed: u64,
    classes: &[FaultClass],
    clock_break: bool,
    cluster: &mut Cluster,
    net: &Net,
) -> Result<Report> {
    let nodes = cluster.size();
    cluster.wait_for_master(Duration::from_secs(30)).await.context("no leader within 30 s of starting")?;
    let recorder = Recorder::new();
    let lives: leases::Lives = Arc::default();
    let mut fault_spans: Vec<(u64, u64)> = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..args.clients {
        let node = c as usize % nodes;
        clients.spawn(workload::register_client(c, node, args.keys, seed, recorder.clone(), stop.clone()));
    }
    for c in 0..args.lease_clients {
        let node = (c as usize + 1) % nodes;
        let (recorder, lives, stop) = (recorder.clone(), lives.clone(), stop.clone());
        clients.spawn(leases::lease_client(2000 + c, node, seed, recorder, lives, stop));
    }
    let watch_logs: watches::Logs = Arc::default();
    for node in 0..nodes {
        let (logs, stop) = (watch_logs.clone(), stop.clone());
        clients.spawn(watches::watcher(node as u32, node, nodes, 1, seed, logs, stop));
    }
    let takeover_log: takeovers::Log = Arc::default();
    for node in 0..nodes {
        let (recorder, log, stop) = (recorder.clone(), takeover_log.clone(), stop.clone());
        clients.spawn(takeovers::poller(node, recorder, log, stop));
    }
    for node in 0..nodes {
        let client = 1000 + node as u32;
        clients.spawn(workload::open_reader(client, node, args.keys, seed, recorder.clone(), stop.clone()));
    }

    let storm_log: storm::Log = Arc::default();
    if classes.contains(&FaultClass::ReadStorm) {
        let master = cluster
            .wait_for_master(Duration::from_secs(30))
            .await
            .context("no leader to load the read storm's keys")?;
        storm::load(master).await?;
    }

    let mut rng = SplitMix64::new(seed);
    let mut figures: BTreeMap<FaultClass, ClassFigures> = BTreeMap::new();
    let began = tokio::time::Instant::now();
    let until = began + Duration::from_secs(args.duration);
    let mut order: Vec<FaultClass> = Vec::new();
    // Until the duration is over and every class was injected at least once.
    while tokio::time::Instant::now() < until || figures.len() < classes.len() {
        tokio::time::sleep(rng.duration_between(Duration::from_millis(800), Duration::from_millis(1600))).await;
        if classes.is_empty() {
            continue;
        }
        if order.is_empty() {
            order = classes.to_vec();
            // A seeded shuffle: every class once per round, in a new order each round.
            for i in (1..order.len()).rev() {
                order.swap(i, rng.range_u64(0, i as u64) as usize);
            }
        }
        let class = order.pop().unwrap_or(FaultClass::KillMaster);
        let start = recorder.now();
        let injected = faults::inject(class, cluster, net, &mut rng, clock_break).await?;
        eprintln!("[{:6.1}s] {} for {:.1}s", start as f64 / 1e9, class.name(), injected.hold.as_secs_f64());
        open_window(&mut figures, class, start);
        let mut hold = injected.hold;
        let mut storms = Vec::new();
        if class == FaultClass::ReadStorm {
            storms.push(storm::start(cluster, tokio::time::Instant::now() + hold, &storm_log).await);
        }
        let mut alone = true;
        if rng.chance(args.overlap) {
            alone = false;
            // A second fault on top of the first, from halfway through its hold; both are
            // healed together.
            let half = hold / 2;
            tokio::time::sleep(half).await;
            let second = classes[rng.range_u64(0, classes.len() as u64 - 1) as usize];
            let at = recorder.now();
            let more = faults::inject(second, cluster, net, &mut rng, clock_break).await?;
            eprintln!("[{:6.1}s]   and {} for {:.1}s", at as f64 / 1e9, second.name(), more.hold.as_secs_f64());
            open_window(&mut figures, second, at);
            if second == FaultClass::ReadStorm {
                storms.push(storm::start(cluster, tokio::time::Instant::now() + more.hold, &storm_log).await);
            }
            hold = (hold - half).max(more.hold);
        }
        tokio::time::sleep(hold).await;
        for storm in storms {
            storm.end(cluster, alone, &storm_log).await;
        }
        cluster.reap(recorder.now() as f64 / 1e9);
        faults::heal(cluster, net)?;
        fault_spans.push((start, recorder.now()));
    }
    cluster.reap(recorder.now() as f64 / 1e9);
    faults::heal(cluster, net)?;
    eprintln!("[{:6.1}s] healed; waiting for a leader", recorder.now() as f64 / 1e9);
    // Let the cluster settle, then stop the clients and read every register once more.
    cluster.wait_for_master(Duration::from_secs(30)).await.context("no leader within 30 s after healing")?;
    tokio::time::sleep(QUIET).await;
    // The windows end when the clients are told to stop (the lease clients then follow
    // their last leases to their end, with no register traffic to measure).
    let end = recorder.now();
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::time::timeout(Duration::from_secs(20), async { while clients.join_next().await.is_some() {} }).await;
    clients.abort_all();
    eprintln!("[{:6.1}s] clients stopped; final reads", recorder.now() as f64 / 1e9);
    final_reads(cluster, args.keys, &recorder).await;
    let history = recorder.take();
    let txns = recorder.take_txns();
    let snapshot_reads = recorder.take_snapshot_reads();
    for (error, count) in recorder.errors().iter().take(8) {
        eprintln!("chaos: {count} answers: {error}");
    }
    eprintln!("[{:6.1}s] checking {} operations", recorder.now() as f64 / 1e9, history.len());
    let verdict = check::history(&history, args.steps_per_key);
    eprintln!("[{:6.1}s] checked; convergence", recorder.now() as f64 / 1e9);
    let mut anomalies = verdict.anomalies;
    let watch_logs = std::mem::take(&mut *watch_logs.lock().unwrap_or_else(|e| e.into_inner()));
    let watch_events: usize = watch_logs.iter().map(|l| l.events.len()).sum();
    let watch_streams: usize = watch_logs.iter().map(|l| l.streams).sum();
    match final_revision(cluster).await {
        Ok((master, to)) => match watches::committed(master, 1, to).await {
            Ok(truth) => {
                if let Err(why) = history_complete(master, &truth, to).await {
                    anomalies.push(format!("the committed history read back: {why}"));
                }
                anomalies.extend(watches::check(&watch_logs, &truth));
                anomalies.extend(txns::check(&txns, &truth));
                anomalies.extend(snapshots::check(&snapshot_reads, &truth, to));
            }
            Err(why) => anomalies.push(format!("the committed history for the watch check: {why}")),
        },
        Err(why) => anomalies.push(format!("the final revision for the watch check: {why}")),
    }
    let lives = std::mem::take(&mut *lives.lock().unwrap_or_else(|e| e.into_inner()));
    let takeovers = takeover_log.lock().unwrap_or_else(|e| e.into_inner()).takeovers();
    // Each takeover restarts the countdowns as a fault's end does: a window of one instant.
    let mut countdown_restarts = recovered_spans(&fault_spans, &history);
    countdown_restarts.extend(takeovers.iter().map(|&at| (at, at)));
    let lease_verdict = leases::check(&lives, &countdown_restarts);
    anomalies.extend(lease_verdict.anomalies);
    let storm = std::mem::take(&mut *storm_log.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    anomalies.extend(storm.anomalies);
    let mut lease_intervals = 0;
    if cluster.is_leasekv() {
        let (intervals, overlaps) = check::lease_overlaps(&cluster.lease_log());
        lease_intervals = intervals;
        anomalies.extend(overlaps);
    }
    if let Err(why) = converged(nodes).await {
        anomalies.push(why);
    }
    for f in figures.values_mut() {
        for w in &mut f.windows {
            w.1 = w.1.min(end);
        }
    }
    Ok(Report {
        duration_s: began.elapsed().as_secs_f64(),
        ops: history.len(),
        ops_checked: verdict.ops_checked,
        acked_writes: verdict.acked_writes,
        lost: verdict.lost,
        anomalies,
        storm_reads: (storm.reads, storm.failed),
        lease_intervals,
        takeovers: takeovers.len(),
        longest_unavailable_s: verdict.longest_unavailable_s,
        classes: figures,
        history,
        leases_checked: lease_verdict.leases,
        watch_events,
        watch_streams,
        txns: txns.len(),
        snapshot_reads: snapshot_reads.len(),
        exits: cluster.exits.clone(),
        power_lost: cluster.has_lazy_disks().then_some(cluster.power_lost),
        expiry_error_s: lease_verdict.expiry_error_s,
        lives,
    })
}

/// A linearizable read of every register through the leader, after healing: the end of
/// every key's history.
async fn final_reads(cluster: &Cluster, keys: usize, recorder: &Recorder) {
    let master = cluster.wait_for_master(Duration::from_secs(10)).await.unwrap_or(0);
    let mut kv = KvClient::new(workload::channel(master));
    for k in 0..keys {
        for _ in 0..20 {
            if workload::perform(&mut kv, recorder, FINAL_READER, KvOp::Get { key: workload::key(k) }).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Each fault's span, from its injection to [`AFTERMATH`] after the first write acknowledged
/// once it was healed: a new master (which restarts every lease's countdown) is in place by
/// that write, and restarts, elections and disruptions by rejoining nodes take longer on
/// some stores (etcd) than on others.
fn recovered_spans(spans: &[(u64, u64)], history: &[Operation]) -> Vec<(u64, u64)> {
    use leasekv::kvstore::sim::linearizability::KvOutcome;
    let mut acked: Vec<u64> = history
        .iter()
        .filter(|o| matches!(o.outcome, KvOutcome::Put | KvOutcome::Delete { .. } | KvOutcome::Cas { .. }))
        .map(|o| o.ret)
        .collect();
    acked.sort_unstable();
    spans
        .iter()
        .map(|&(start, healed)| {
            let i = acked.partition_point(|&t| t < healed);
            let recovered = acked.get(i).copied().unwrap_or(u64::MAX - AFTERMATH.as_nanos() as u64);
            (start, recovered + AFTERMATH.as_nanos() as u64)
        })
        .collect()
}

/// Counts an injection of `class` at `start`: its window runs until the next injection.
fn open_window(figures: &mut BTreeMap<FaultClass, ClassFigures>, class: FaultClass, start: u64) {
    if let Some(last) = figures.values_mut().flat_map(|f| f.windows.last_mut()).max_by_key(|w| w.0) {
        last.1 = start;
    }
    let entry = figures.entry(class).or_default();
    entry.injected += 1;
    entry.windows.push((start, u64::MAX));
}

/// The master and its current revision, from a linearizable read.
async fn final_revision(cluster: &Cluster) -> Result<(usize, i64), String> {
    for _ in 0..10 {
        let master = cluster.wait_for_master(Duration::from_secs(10)).await.unwrap_or(0);
        let mut kv = KvClient::new(workload::channel(master));
        let request = RangeRequest { key: b"/chaos/".to_vec(), limit: 1, ..Default::default() };
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(3), kv.range(request)).await {
            return Ok((master, r.into_inner().header.map_or(0, |h| h.revision)));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err("no linearizable read answered".into())
}

/// Whether `truth` (the committed history of the registers read back with a watch) is
/// complete up to revision `to`: replayed, it must give what a range of the registers at
/// `to` answers. The watch, the transaction and the snapshot checks all rest on it, and a
/// stream that went quiet early would otherwise pass for the whole history.
async fn history_complete(node: usize, truth: &[watches::Seen], to: i64) -> Result<(), String> {
    let mut replayed: BTreeMap<&[u8], &[u8]> = BTreeMap::new();
    for (_, key, value) in truth {
        match value {
            Some(value) => replayed.insert(key, value),
            None => replayed.remove(key.as_slice()),
        };
    }
    let mut kv = KvClient::new(workload::channel(node));
    let request =
        RangeRequest { key: b"/chaos/r".to_vec(), range_end: b"/chaos/s".to_vec(), revision: to, ..Default::default() };
    let answer = match tokio::time::timeout(Duration::from_secs(10), kv.range(request)).await {
        Ok(Ok(answer)) => answer.into_inner(),
        Ok(Err(status)) => return Err(format!("the range at revision {to} failed: {}", status.message())),
        Err(_) => return Err(format!("the range at revision {to} timed out")),
    };
    let ranged: BTreeMap<&[u8], &[u8]> = answer.kvs.iter().map(|kv| (kv.key.as_slice(), kv.value.as_slice())).collect();
    if ranged != replayed {
        return Err(format!(
            "replayed, it gives {} keys, and the registers at revision {to} are {} keys with other values",
            replayed.len(),
            ranged.len()
        ));
    }
    Ok(())
}

/// The client id of the final reads.
const FINAL_READER: u32 = 9999;

/// Every node serves the same registers at the same revision (serializable reads, so each
/// node answers from its own state), within 15 s of healing.
async fn converged(nodes: usize) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        let mut states = Vec::new();
        for i in 0..nodes {
            let mut kv = KvClient::new(workload::channel(i));
            let request = RangeRequest {
                key: b"/chaos/".to_vec(),
                range_end: b"/chaos0".to_vec(),
                serializable: true,
                ..Default::default()
            };
            match tokio::time::timeout(Duration::from_secs(2), kv.range(request)).await {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    let revision = r.header.map_or(0, |h| h.revision);
                    let kvs: Vec<_> =
                        r.kvs.iter().map(|kv| (kv.key.clone(), kv.value.clone(), kv.mod_revision)).collect();
                    states.push((revision, kvs));
                }
                _ => states.push((-1, Vec::new())),
            }
        }
        if states.windows(2).all(|w| w[0] == w[1]) && states[0].0 > 0 {
            return Ok(());
        }
        last = states.iter().map(|s| s.0.to_string()).collect::<Vec<_>>().join(", ");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(format!("nodes did not converge within 15 s of healing (revisions {last})"))
}

fn print_report(args: &Args, seed: u64, target: &Target, report: &Report) {
    println!(
        "| fault class | injected | ops in its windows | acknowledged writes | longest unavailability (s) | \
         TTL error (s): seen gone after last keepalive − TTL, earliest / latest |"
    );
    println!("|---|---|---|---|---|---|");
    let ttl_error = |windows: &[(u64, u64)]| {
        let errors: Vec<f64> = report
            .lives
            .iter()
            .filter_map(leases::expiry_error)
            .filter(|(last, _)| windows.iter().any(|w| *last >= w.0 && *last < w.1))
            .map(|(_, e)| e)
            .collect();
        if errors.is_empty() {
            "–".to_string()
        } else {
            let min = errors.iter().copied().fold(f64::INFINITY, f64::min);
            let max = errors.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{min:+.2} / {max:+.2}")
        }
    };
    for (class, f) in &report.classes {
        let inside = |o: &&Operation| f.windows.iter().any(|w| o.call >= w.0 && o.call < w.1);
        let ops: Vec<&Operation> = report.history.iter().filter(inside).collect();
        let acked = ops
            .iter()
            .filter(|o| {
                use leasekv::kvstore::sim::linearizability::KvOutcome::*;
                matches!(o.outcome, Put | Delete { .. } | Cas { succeeded: true })
            })
            .count();
        let mut longest = 0f64;
        for w in &f.windows {
            let mut rets: Vec<u64> = report
                .history
                .iter()
                .filter(|o| {
                    !matches!(o.op, KvOp::Get { .. })
                        && o.outcome != leasekv::kvstore::sim::linearizability::KvOutcome::Unknown
                })
                .map(|o| o.ret)
                .filter(|r| *r >= w.0 && *r < w.1)
                .collect();
            // From the injection to the window's end: a window without an acknowledged
            // write was unavailable throughout.
            rets.push(w.0);
            rets.push(w.1);
            rets.sort_unstable();
            longest = longest.max(rets.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0) as f64 / 1e9);
        }
        println!(
            "| {} | {} | {} | {} | {:.2} | {} |",
            class.name(),
            f.injected,
            ops.len(),
            acked,
            longest,
            ttl_error(&f.windows)
        );
    }
    for exit in &report.exits {
        println!("note: {exit}");
    }
    if let Some(lost) = report.power_lost {
        println!(
            "note: power losses undid unsynced writes to {} files ({} bytes) on the lazy disks",
            lost.files, lost.bytes
        );
    }
    for anomaly in report.anomalies.iter().take(20) {
        println!("anomaly: {anomaly}");
    }
    if report.anomalies.len() > 20 {
        println!("… and {} more anomalies", report.anomalies.len() - 20);
    }
    let faults: Vec<_> = report.classes.keys().map(|c| c.name()).collect();
    println!(
        "seed={seed} duration_s={:.1} target={} nodes={} faults={} break={} ops={} ops_checked={} acked_writes={} lost={} txns={} serializable_reads={} watch_events={} watch_streams={} leases={} ttl_error_s={} lease_intervals={} takeovers={} longest_unavailable_s={:.2} storm_reads={}/{} anomalies={}",
        report.duration_s,
        target.name(),
        args.nodes,
        if faults.is_empty() { "none".into() } else { faults.join(",") },
        args.breakage.as_deref().unwrap_or("none"),
        report.ops,
        report.ops_checked,
        report.acked_writes,
        report.lost,
        report.txns,
        report.snapshot_reads,
        report.watch_events,
        report.watch_streams,
        report.leases_checked,
        report.expiry_error_s.map_or("none".to_string(), |(a, b)| format!("{a:+.2}/{b:+.2}")),
        report.lease_intervals,
        report.takeovers,
        report.longest_unavailable_s,
        report.storm_reads.0,
        report.storm_reads.0 + report.storm_reads.1,
        report.anomalies.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv::kvstore::sim::linearizability::KvOutcome;

    fn write(ret: u64, outcome: KvOutcome) -> Operation {
        Operation { client: 1, op: KvOp::Put { key: b"k".to_vec(), value: ret }, call: ret - 1, ret, outcome }
    }

    #[test]
    fn a_fault_lasts_until_aftermath_past_the_first_write_acknowledged_after_healing() {
        let aftermath = AFTERMATH.as_nanos() as u64;
        let history = vec![write(5, KvOutcome::Put), write(20, KvOutcome::Unknown), write(30, KvOutcome::Put)];
        assert_eq!(recovered_spans(&[(1, 10)], &history), vec![(1, 30 + aftermath)]);
        // Never recovered: the span covers the rest of the run.
        assert_eq!(recovered_spans(&[(1, 40)], &history), vec![(1, u64::MAX)]);
    }
}
