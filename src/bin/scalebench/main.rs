//! `scalebench`: the scale and cost rows, leasekv against etcd on this machine, one row per
//! command, its figures as the last line (`key=value` pairs) and as JSON for the plots.
//!
//! ```text
//! cargo run --release -p leasekv --bin scalebench -- leases --system leasekv --count 100000
//! cargo run --release -p leasekv --bin scalebench -- leases --system etcd --count 100000
//! cargo run --release -p leasekv --bin scalebench -- reads --system leasekv --count 200000
//! cargo run --release -p leasekv --bin scalebench -- check-perf --system etcd --load xl
//! cargo run --release -p leasekv --bin scalebench -- all          # every row, both systems, plots
//! cargo run --release -p leasekv --bin scalebench -- plot         # redraw from the JSON
//! ```
//!
//! Each run starts its own 3-node cluster on 127.0.0.1 (leasekv's `kvserver`, built first
//! when run through cargo, or `KVSERVER_BIN`; etcd from PATH or `ETCD_BIN`) in a temporary
//! directory and removes it afterwards. docs/performance.md explains the rows and reports
//! the figures.

mod check_perf;
mod cluster;
mod compaction;
mod keys;
mod latency;
mod leases;
mod load;
mod plot;
mod reads;
mod report;
mod stalls;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand, ValueEnum};
use cluster::System;
use report::Report;
use std::path::PathBuf;

/// Scale and cost benchmarks, leasekv against etcd.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Task,
}

/// Which system a row runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SystemArg {
    /// leasekv (3 kvserver nodes).
    Leasekv,
    /// etcd (3 members).
    Etcd,
}

/// One row's options.
#[derive(Debug, Clone, clap::Args)]
struct RowArgs {
    /// The system to measure.
    #[arg(long, value_enum)]
    system: SystemArg,
    /// leasekv's election backend.
    #[arg(long, default_value = "paxoslease", value_parser = ["paxoslease", "lease-tracker"])]
    backend: String,
    /// The row's size: leases, keys or puts (each row has its own default, the issue's).
    #[arg(long)]
    count: Option<u64>,
    /// expiry-storm: seconds from the start until every lease runs out (the grants must
    /// finish at least 6 s before).
    #[arg(long, default_value_t = 90)]
    ttl: u64,
    /// Where the JSON report is written.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/target/scalebench"))]
    out: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Live leases, one key each, kept alive: RSS per lease, keepalives/s, p99, master CPU.
    Leases(RowArgs),
    /// Leases that all run out at once: time until their keys are gone, writer p99.
    ExpiryStorm(RowArgs),
    /// A key space of 1 KiB values: RSS, data dir, a 10,000-key prefix range.
    Keys(RowArgs),
    /// Restart of a member holding the key space: time from start to serving it.
    Restart(RowArgs),
    /// A member replaced by an empty one: time until it serves the key space, and the others'
    /// put throughput meanwhile.
    CatchUp(RowArgs),
    /// The keys, restart and catch-up rows on one loaded key space.
    KeySpace(RowArgs),
    /// The keys and restart rows on one loaded key space, without the catch-up (whose new
    /// member's copy, beside the two that stay, may not fit a machine's disk at 10M keys).
    KeysRestart(RowArgs),
    /// Overwrites of 10,000 keys with auto-compaction: the data dir's size over time.
    Compaction(RowArgs),
    /// One client's put latency, at the master and spread over the members.
    PutLatency(RowArgs),
    /// Put throughput and p99 against the number of clients.
    Clients(RowArgs),
    /// A 64-client put load, quiet, during a backup and during a member's catch-up: p99
    /// against the quiet one, and leasekv's node-loop turns over 50 ms.
    Stalls(RowArgs),
    /// A key space read as Kubernetes reads it (paginated scans, count loops, unpaginated
    /// reads) under a 64-client put load: master changes, failures, put p99, RSS growth.
    Reads {
        #[command(flatten)]
        row: RowArgs,
        /// Storms to run (comma-separated: scan, stream, count, full); all by default.
        #[arg(long, value_delimiter = ',')]
        storms: Vec<String>,
    },
    /// `etcdctl check perf --load=<load>` against a fresh cluster: completed, passed, its
    /// figures, master changes.
    CheckPerf {
        #[command(flatten)]
        row: RowArgs,
        /// etcdctl's load: s, m, l or xl.
        #[arg(long, default_value = "l", value_parser = ["s", "m", "l", "xl"])]
        load: String,
    },
    /// Every row for leasekv and etcd in turn, then the plots.
    All {
        /// Multiplies every row's default size (0.01 for a quick look).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Rows to run (comma-separated names); all by default.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Where the JSON reports are written.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/target/scalebench"))]
        out: PathBuf,
        /// Where the plots are drawn.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scalebench"))]
        plots: PathBuf,
    },
    /// Draws the curves of every JSON report in `--input` as SVG files in `--output`.
    Plot {
        /// The reports.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/target/scalebench"))]
        input: PathBuf,
        /// Where the SVG files and their index go.
        #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scalebench"))]
        output: PathBuf,
    },
}

/// The issue's size of each row.
fn default_count(workload: &str) -> u64 {
    match workload {
        "leases" | "expiry-storm" => 100_000,
        "keys" | "restart" | "catch-up" | "key-space" | "keys-restart" => 1_000_000,
        "compaction" => 10_000_000,
        "stalls" | "reads" => 200_000,
        _ => 1,
    }
}

/// The sizes `all` runs a row at: the issue asks for live leases at 100,000 and 1,000,000.
fn sizes_in_all(workload: &str) -> Vec<u64> {
    match workload {
        "leases" => vec![100_000, 1_000_000],
        other => vec![default_count(other)],
    }
}

/// The rows, in the order `all` runs them.
const ROWS: [&str; 9] =
    ["put-latency", "clients", "leases", "expiry-storm", "keys", "restart", "catch-up", "compaction", "stalls"];

fn system_of(args: &RowArgs) -> System {
    match (args.system, args.backend.as_str()) {
        (SystemArg::Etcd, _) => System::Etcd,
        (SystemArg::Leasekv, "lease-tracker") => System::LeaseKv("lease-tracker"),
        (SystemArg::Leasekv, _) => System::LeaseKv("paxoslease"),
    }
}

/// Runs one row; `keys`, `restart` and `catch-up` may share one loaded cluster.
async fn run_row(workload: &str, system: System, count: u64, ttl: u64) -> Result<Vec<Report>> {
    use keys::Rows;
    Ok(match workload {
        "leases" => vec![leases::leases(system, count).await?],
        "expiry-storm" => vec![leases::expiry_storm(system, count, ttl).await?],
        "keys" => keys::key_space(system, count, Rows { keys: true, restart: false, catch_up: false }).await?,
        "restart" => keys::key_space(system, count, Rows { keys: false, restart: true, catch_up: false }).await?,
        "catch-up" => keys::key_space(system, count, Rows { keys: false, restart: false, catch_up: true }).await?,
        "key-space" => keys::key_space(system, count, Rows { keys: true, restart: true, catch_up: true }).await?,
        "keys-restart" => keys::key_space(system, count, Rows { keys: true, restart: true, catch_up: false }).await?,
        "compaction" => vec![compaction::compaction(system, count).await?],
        "put-latency" => vec![latency::put_latency(system).await?],
        "clients" => vec![latency::clients(system).await?],
        "stalls" => vec![stalls::stalls(system, count).await?],
        other => bail!("unknown workload {other}"),
    })
}

fn publish(mut reports: Vec<Report>, out: &std::path::Path) -> Result<()> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for report in &mut reports {
        report.finished_unix_s = now;
        let path = report.write(out)?;
        eprintln!("wrote {}", path.display());
        println!("{}", report.summary_line());
    }
    Ok(())
}

fn main() {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("scalebench: cannot start the runtime: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run(args)) {
        eprintln!("scalebench: error: {error:#}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<()> {
    let (workload, row) = match args.command {
        Task::Plot { input, output } => {
            for path in plot::draw_all(&input, &output)? {
                eprintln!("drew {}", path.display());
            }
            return Ok(());
        }
        Task::All { scale, only, out, plots } => return run_all(scale, &only, &out, &plots).await,
        Task::Leases(a) => ("leases", a),
        Task::ExpiryStorm(a) => ("expiry-storm", a),
        Task::Keys(a) => ("keys", a),
        Task::Restart(a) => ("restart", a),
        Task::CatchUp(a) => ("catch-up", a),
        Task::KeySpace(a) => ("key-space", a),
        Task::KeysRestart(a) => ("keys-restart", a),
        Task::Compaction(a) => ("compaction", a),
        Task::PutLatency(a) => ("put-latency", a),
        Task::Clients(a) => ("clients", a),
        Task::Stalls(a) => ("stalls", a),
        Task::Reads { row, storms } => {
            let count = row.count.unwrap_or_else(|| default_count("reads"));
            let report = reads::reads(system_of(&row), count.max(1), &storms).await?;
            return publish(vec![report], &row.out);
        }
        Task::CheckPerf { row, load } => {
            let report = check_perf::check_perf(system_of(&row), &load).await?;
            return publish(vec![report], &row.out);
        }
    };
    let count = row.count.unwrap_or_else(|| default_count(workload));
    if count == 0 {
        bail!("--count must be at least 1");
    }
    let reports = run_row(workload, system_of(&row), count, row.ttl).await?;
    publish(reports, &row.out)
}

/// Every selected row, leasekv then etcd for each, so a row's two figures come from
/// neighbouring minutes of the same run; the key-space rows share one load per system.
async fn run_all(scale: f64, only: &[String], out: &std::path::Path, plots: &std::path::Path) -> Result<()> {
    for name in only {
        if !ROWS.contains(&name.as_str()) {
            bail!("unknown row {name}; the rows are {}", ROWS.join(", "));
        }
    }
    let wanted = |row: &str| only.is_empty() || only.iter().any(|o| o == row);
    let mut done_key_space = false;
    let mut failed = Vec::new();
    for row in ROWS {
        if !wanted(row) {
            continue;
        }
        let key_space_row = matches!(row, "keys" | "restart" | "catch-up");
        if key_space_row && done_key_space {
            continue;
        }
        for size in sizes_in_all(row) {
            for system in [System::LeaseKv("paxoslease"), System::Etcd] {
                let count = ((size as f64 * scale).round() as u64).max(1);
                let reports = if key_space_row {
                    use keys::Rows;
                    let rows = Rows { keys: wanted("keys"), restart: wanted("restart"), catch_up: wanted("catch-up") };
                    keys::key_space(system, count, rows).await
                } else {
                    // A storm of a scaled-down count grants quickly; the full one needs the minute.
                    let ttl = if count < 20_000 { 20 } else { 90 };
                    run_row(row, system, count, ttl).await
                };
                // One row that cannot finish (a system refusing its load) must not cost the
                // hour the others take: it is reported, and the run goes on.
                match reports {
                    Ok(reports) => publish(reports, out)?,
                    Err(error) => {
                        let line = format!("workload={row} system={} count={count} error={error:#}", system.name());
                        println!("{line}");
                        failed.push(line);
                    }
                }
            }
        }
        done_key_space |= key_space_row;
    }
    for path in plot::draw_all(out, plots)? {
        eprintln!("drew {}", path.display());
    }
    if !failed.is_empty() {
        bail!("{} row(s) did not finish:\n{}", failed.len(), failed.join("\n"));
    }
    Ok(())
}
