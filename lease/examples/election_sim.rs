//! Runs the deterministic election simulator over many seeds and prints what the oracles
//! saw. The last line is the summary; the exit code is 0 only when no safety violation was
//! found.
//!
//! ```text
//! cargo run --release -p leasekv-lease --example election_sim -- --backend paxoslease --nodes 5 \
//!     --seeds 2000 --loss 0.2 --drift 0.01 [--seed-base N] [--break NAME] [--no-membership] [--trace]
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use leasekv_lease::backend::BackendKind;
use leasekv_lease::config::Breakage;
use leasekv_lease::sim::{percentile, run_seed, run_seeds, SimConfig};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Deterministic simulation of leasekv's master election.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// paxoslease | lease-tracker | naive-majority
    #[arg(long, default_value = "paxoslease")]
    backend: String,
    /// Cluster size (3 to 9).
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 2000)]
    seeds: u64,
    /// First seed; a failing seed N replays exactly with `--seed-base N --seeds 1`.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Probability that a message is lost (0 to 0.9).
    #[arg(long, default_value_t = 0.2)]
    loss: f64,
    /// Probability that a message is delivered twice (0 to 0.9).
    #[arg(long, default_value_t = 0.05)]
    duplicate: f64,
    /// Clock drift bound ε: each node's clock runs at a rate within [1-ε, 1+ε] (0 to 0.1).
    #[arg(long, default_value_t = 0.01)]
    drift: f64,
    /// Seconds of chaos (partitions, crashes, restarts, step-downs) per seed.
    #[arg(long, default_value_t = 15)]
    chaos_secs: u64,
    /// Break one safety rule (negative control): no-quarantine, no-drift-margin,
    /// count-duplicates, release-any-ballot, late-timer, hand-over-keeps-lease,
    /// two-voters-at-once, learner-counted, no-change-wait.
    #[arg(long = "break")]
    breakage: Option<String>,
    /// Keep the membership fixed (by default, PaxosLease runs with membership changes:
    /// learners added and promoted, voters removed, the master replaced).
    #[arg(long)]
    no_membership: bool,
    /// Print every event of every seed (use with --seeds 1).
    #[arg(long)]
    trace: bool,
}

fn config(args: &Args) -> Result<SimConfig> {
    let backend = BackendKind::from_sim_name(&args.backend)?;
    if !(3..=9).contains(&args.nodes) {
        bail!("--nodes {} is out of range: allowed is 3 to 9", args.nodes);
    }
    for (name, p) in [("--loss", args.loss), ("--duplicate", args.duplicate)] {
        if !(0.0..=0.9).contains(&p) {
            bail!("{name} {p} is out of range: allowed is 0 to 0.9");
        }
    }
    let mut config = SimConfig::new(backend, args.nodes, args.loss, args.drift);
    config.faults.duplicate = args.duplicate;
    config.chaos = Duration::from_secs(args.chaos_secs);
    config.trace = args.trace;
    if args.no_membership {
        config.membership = false;
    }
    if let Some(name) = &args.breakage {
        config.lease.breakage = Breakage::from_name(name).map_err(anyhow::Error::msg)?;
    }
    config.lease.validate().context("lease configuration")?;
    Ok(config)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<bool> {
    let config = config(args)?;
    if args.trace {
        for seed in args.seed_base..args.seed_base + args.seeds {
            for line in run_seed(&config, seed).trace {
                println!("{line}");
            }
        }
    }
    let started = std::time::Instant::now();
    let step = (args.seeds / 10).max(1);
    let mut done = 0u64;
    let summary = run_seeds(&config, args.seed_base, args.seeds, |report| {
        done += 1;
        for v in &report.violations {
            eprintln!(
                "violation: seed={} at={:.3}ms masters={:?} (replay: --seed-base {} --seeds 1 --trace)",
                v.seed, v.at_ms, v.masters, v.seed
            );
        }
        if done.is_multiple_of(step) {
            eprint!("\r{done}/{} seeds", args.seeds);
            let _ = std::io::stderr().flush();
        }
    });
    eprintln!();
    let ms = |d: Option<Duration>| d.map_or("none".to_string(), |d| format!("{:.1}", d.as_secs_f64() * 1e3));
    println!(
        "backend={} membership={} nodes={} loss={} duplicate={} drift={} break={} liveness_bound_ms={} wall_s={:.1}",
        config.backend,
        config.membership,
        config.nodes,
        args.loss,
        args.duplicate,
        args.drift,
        config.lease.breakage.name(),
        config.liveness_bound().as_millis(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "liveness_failures={} failover_p99_ms={} messages_per_seed={}",
        summary.liveness_failures.len(),
        ms(percentile(&summary.failover, 99.0)),
        summary.messages / summary.seeds.max(1)
    );
    if !summary.liveness_failures.is_empty() {
        let first: Vec<String> = summary.liveness_failures.iter().take(10).map(u64::to_string).collect();
        println!("seeds without a master in the quiet phase (first 10): {}", first.join(" "));
    }
    println!("{}", summary.line());
    Ok(summary.violations == 0)
}
