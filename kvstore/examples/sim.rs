//! Runs the whole-replica simulator over many seeds and prints what the oracles found.
//!
//! ```text
//! cargo run --release -p leasekv-kvstore --example sim -- --nodes 5 --seeds 300 --ops 2000
//! cargo run --release -p leasekv-kvstore --example sim -- --break skip-phase1 --seeds 300
//! cargo run --release -p leasekv-kvstore --example sim -- --seed-base 1234 --seeds 1 --trace
//! ```
//! The last line is `seeds=… violations=… ops_checked=… acked_writes_lost=…`; the exit
//! status is 0 only when no oracle found anything.

use anyhow::{bail, Result};
use clap::Parser;
use leasekv_kvstore::log::LogBreakage;
use leasekv_kvstore::node::NodeBreakage;
use leasekv_kvstore::sim::{run_seeds, ClientBreakage, KvSimConfig};
use leasekv_kvstore::watch::WatchBreakage;
use leasekv_lease::BackendKind;
use std::time::Instant;

/// Whole-replica simulation of leasekv.
#[derive(Debug, Parser)]
struct Args {
    /// Cluster size.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Seeds to run.
    #[arg(long, default_value_t = 300)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Client operations per seed.
    #[arg(long, default_value_t = 2000)]
    ops: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 5)]
    clients: usize,
    /// Message loss rate during the chaos phase.
    #[arg(long, default_value_t = 0.05)]
    loss: f64,
    /// Clock drift bound (each node's clock rate is within 1 ± drift).
    #[arg(long, default_value_t = 0.01)]
    drift: f64,
    /// Election backend: paxoslease or lease-tracker.
    #[arg(long, default_value = "paxoslease")]
    backend: String,
    /// A negative control: follower-reads, early-ack, skip-phase1, deposed-expiry, … (the
    /// log); split-revision, progress-unsynced, resume-at-last, drop-when-full,
    /// prev-kv-current (watch); renewal-after-timeout, not-master-after-proposal, status-only-with-timeout (the node);
    /// retry-indeterminate (the client).
    #[arg(long = "break", default_value = "none")]
    breakage: String,
    /// Print the event trace of each seed (use with --seeds 1).
    #[arg(long)]
    trace: bool,
    /// Read leases (docs/read-leases.md): "on" (every node answers linearizable reads) or
    /// "off" (the master answers them all).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    read_leases: String,
}

/// The client's negative control, as `--break` names it.
const RETRY_INDETERMINATE: &str = "retry-indeterminate";

fn main() -> Result<()> {
    let args = Args::parse();
    let watch_breakage = WatchBreakage::from_name(&args.breakage).unwrap_or_default();
    let node_breakage =
        NodeBreakage::ALL.iter().find(|(name, _)| *name == args.breakage).map_or(NodeBreakage::None, |(_, b)| *b);
    let client_breakage =
        if args.breakage == RETRY_INDETERMINATE { ClientBreakage::RetryIndeterminate } else { ClientBreakage::None };
    let other_control = watch_breakage != WatchBreakage::None
        || node_breakage != NodeBreakage::None
        || client_breakage != ClientBreakage::None;
    let Some(breakage) = LogBreakage::from_name(&args.breakage).or_else(|| other_control.then_some(LogBreakage::None))
    else {
        bail!(
            "unknown --break {:?}; expected one of: none, {}, {}, {}, {RETRY_INDETERMINATE}",
            args.breakage,
            LogBreakage::ALL.map(|b| b.name()).join(", "),
            WatchBreakage::ALL.map(|b| b.name()).join(", "),
            NodeBreakage::ALL.map(|(name, _)| name).join(", "),
        );
    };
    let backend: BackendKind = args.backend.parse()?;
    if args.nodes < 1 || args.nodes > 9 {
        bail!("--nodes must be between 1 and 9, got {}", args.nodes);
    }
    if !(0.0..1.0).contains(&args.loss) || !(0.0..0.5).contains(&args.drift) {
        bail!("--loss must be in [0, 1) and --drift in [0, 0.5)");
    }
    let mut config = KvSimConfig::new(args.nodes, args.ops, args.loss, args.drift)
        .with_breakage(breakage)
        .with_watch_breakage(watch_breakage)
        .with_node_breakage(node_breakage)
        .with_client_breakage(client_breakage);
    config.backend = backend;
    config.clients = args.clients.max(1);
    config.trace = args.trace;
    if args.read_leases == "off" {
        config.replica.read_leases = None;
    }
    let started = Instant::now();
    let summary = run_seeds(&config, args.seed_base, args.seeds, |report| {
        for line in &report.trace {
            println!("{line}");
        }
        for v in &report.violations {
            println!("seed {} at {:.1} ms: {}: {}", v.seed, v.at_ms, v.kind, v.detail);
        }
        if (report.seed - args.seed_base + 1) % 50 == 0 {
            eprintln!("… {} seeds", report.seed - args.seed_base + 1);
        }
    });
    println!(
        "backend={} nodes={} break={} acked_writes={} slots_snapshots_installed={} leases_expired={} inconclusive_keys={} elapsed_s={:.1}",
        backend,
        args.nodes,
        if other_control { args.breakage.as_str() } else { breakage.name() },
        summary.acked_writes,
        summary.snapshots_installed,
        summary.leases_expired,
        summary.inconclusive,
        started.elapsed().as_secs_f64()
    );
    if let Some(first) = summary.failing_seeds.first() {
        println!(
            "failing seeds: {} (first {first}; replay with --seed-base {first} --seeds 1 --trace)",
            summary.failing_seeds.len()
        );
    }
    println!("{}", summary.line());
    if summary.inconclusive > 0 {
        eprintln!("the linearizability checker ran out of budget on {} key(s): not a pass", summary.inconclusive);
    }
    if summary.violations > 0 || summary.inconclusive > 0 {
        std::process::exit(1);
    }
    Ok(())
}
