//! Cluster load benchmark, speaking only the etcd v3 API so the same load generator drives
//! leasekv (both election backends) and a real etcd, three nodes each, on 127.0.0.1, in the
//! same run.
//!
//! ```text
//! cargo bench --bench cluster            # etcd from PATH (Debian: etcd-server) or ETCD_BIN
//! ```
//! cargo builds `kvserver` (release) before the bench; `KVSERVER_BIN` runs another build instead.
//! All three clusters run side by side and take turns run by run, so the ratios of one run
//! compare the systems under the same machine conditions.
//! Workloads (256-byte values): put with 1 (also at the leader), 64 and 256 clients; linearizable and
//! serializable get with 64 clients; lease grant + put; kill -9 of the master → first
//! successful put (failover); SIGTERM of the master → first successful put (hand-over).
//! Prints progress, a table and writes `target/leasekv-bench-cluster.json`.
//!
//! To profile one path, narrow the run with substrings (separated by `;`, since the workload
//! names contain commas):
//! `BENCH_TARGETS="paxoslease;etcd" BENCH_WORKLOADS="put, 1 client;put, 64" cargo bench --bench cluster`;
//! `BENCH_SECONDS` sets the length of each run (default 3); `BENCH_LEASEKV_CONFIG` merges TOML
//! into every leasekv node's config, table by table (`\n` for a line break), e.g.
//! `[log]\nmax_inflight_slots = 4`.

mod common;

use common::{connect, leader, median, run_length, selected, Cluster, Figures, Target};
use leasekv::client::GetOptions;
use std::collections::BTreeMap;

use std::time::{Duration, Instant};

const VALUE: [u8; 256] = [b'v'; 256];
const REPEATS: usize = 3;

#[derive(Clone, Copy)]
enum Op {
    Put,
    /// A put sent to the leader's endpoint.
    PutAtLeader,
    GetLinearizable,
    GetSerializable,
    LeaseGrantPut,
}

async fn load(endpoints: &[String], clients: usize, op: Op) -> Figures {
    // A handful of connections shared by all clients, as etcd client libraries do.
    let mut conns = Vec::new();
    for i in 0..clients.clamp(1, 8) {
        conns.push(connect(endpoints[i % endpoints.len()].clone()).await);
    }
    let run = run_length();
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = conns[c % conns.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let key = format!("/bench/{}/{}", c, n % 1000);
                n += 1;
                let started = Instant::now();
                let ok = match op {
                    Op::Put | Op::PutAtLeader => client.put(key, VALUE.to_vec(), 0, false).await.is_ok(),
                    Op::GetLinearizable => client.get("/bench/ready", GetOptions::default()).await.is_ok(),
                    Op::GetSerializable => {
                        let options = GetOptions { serializable: true, ..Default::default() };
                        client.get("/bench/ready", options).await.is_ok()
                    }
                    Op::LeaseGrantPut => match client.lease_grant(60, 0).await {
                        Ok(g) => client.put(key, VALUE.to_vec(), g.id, false).await.is_ok(),
                        Err(_) => false,
                    },
                };
                if ok {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        }));
    }
    common::figures(tasks, run).await
}

/// Stops the leader (kill -9 or SIGTERM) and times the first successful put through another
/// node (`None`: none within 30 s, reported rather than ending the whole run); then restarts
/// it and waits for the cluster to settle.
async fn takeover(cluster: &mut Cluster, sigterm: bool) -> Option<f64> {
    let old = leader(cluster).await;
    let other = (old + 1) % 3;
    let client = connect(cluster.endpoint(other)).await;
    let stop_started = Instant::now();
    cluster.stop(old, sigterm);
    // The lease tracker lives on the lowest id, which usually holds the master lease too:
    // stopping it stops the election until it is back, so it is restarted at once and the
    // figure includes its restart and quarantine (the single point of failure, measured).
    let tracker_down = cluster.target == Target::LeaseKv("lease-tracker") && old == 0;
    if tracker_down {
        cluster.start_node(old, false);
    }
    // For SIGTERM the clock starts when the process has exited (the hand-over itself).
    let started = if sigterm { Instant::now() } else { stop_started };
    let deadline = started + Duration::from_secs(30);
    let elapsed = loop {
        // Bounded per attempt too: a put stuck on a dead leader must not outlast the deadline.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break None;
        }
        match tokio::time::timeout(left, client.put("/bench/takeover", VALUE.to_vec(), 0, false)).await {
            Ok(Ok(_)) => break Some(started.elapsed().as_secs_f64() * 1e3),
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    if !tracker_down {
        cluster.start_node(old, false);
    }
    let _ = connect(cluster.endpoint(old)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    elapsed
}

/// Whether `name` is selected by the `;`-separated substrings in `var` (all when unset); an
/// entry starting with `=` must equal the name (`=put, 64 clients` leaves out the lease
/// workload of the same shape).
fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let targets = [Target::LeaseKv("paxoslease"), Target::LeaseKv("lease-tracker"), Target::Etcd];
    // "at the leader": the client talks to the leader itself, so the figure is the
    // replication round alone, without the follower's extra hop (etcd measured the same way).
    let workloads: [(&str, usize, Op); 7] = [
        ("put, 1 client", 1, Op::Put),
        ("put, 1 client at the leader", 1, Op::PutAtLeader),
        ("put, 64 clients", 64, Op::Put),
        ("put, 256 clients", 256, Op::Put),
        ("linearizable get, 64 clients", 64, Op::GetLinearizable),
        ("serializable get, 64 clients", 64, Op::GetSerializable),
        ("lease grant + put, 64 clients", 64, Op::LeaseGrantPut),
    ];
    let mut results: BTreeMap<(String, String), serde_json::Value> = BTreeMap::new();
    let mut clusters = common::start_selected(&runtime, &targets);
    runtime.block_on(async {
        // The systems take turns run by run (all clusters up, the idle ones only
        // heartbeating), so a shared host that speeds up or slows down over the minutes of a
        // full run moves them alike, and the ratio of one run means something.
        for (label, clients, op) in workloads {
            if !selected("BENCH_WORKLOADS", label) {
                continue;
            }
            eprintln!("{label} …");
            let mut runs: Vec<Vec<Figures>> = clusters.iter().map(|_| Vec::new()).collect();
            for _ in 0..REPEATS {
                for (cluster, runs) in clusters.iter().zip(&mut runs) {
                    let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
                    let at = match op {
                        Op::PutAtLeader => vec![endpoints[leader(cluster).await].clone()],
                        _ => endpoints,
                    };
                    runs.push(load(&at, clients, op).await);
                }
            }
            for (cluster, runs) in clusters.iter().zip(&runs) {
                let name = cluster.target.name();
                let ops = median(runs.iter().map(|f| f.ops_per_sec).collect());
                let p50 = median(runs.iter().map(|f| f.p50_ms).collect());
                let p99 = median(runs.iter().map(|f| f.p99_ms).collect());
                eprintln!("[{name}] {label}: {ops:.0} ops/s, p50 {p50:.2} ms, p99 {p99:.2} ms");
                results.insert(
                    (label.to_string(), name),
                    serde_json::json!({"ops_per_sec": ops, "p50_ms": p50, "p99_ms": p99}),
                );
            }
        }
        // Stopping and restarting leaders: one system at a time.
        for cluster in &mut clusters {
            let name = cluster.target.name();
            for (label, sigterm) in
                [("failover (kill -9 of the leader)", false), ("hand-over (SIGTERM of the leader)", true)]
            {
                if !selected("BENCH_WORKLOADS", label) {
                    continue;
                }
                eprintln!("[{name}] {label} …");
                let mut times = Vec::new();
                let mut failed = 0;
                for _ in 0..REPEATS {
                    match takeover(cluster, sigterm).await {
                        Some(ms) => times.push(ms),
                        None => failed += 1,
                    }
                }
                let p50 = median(times.clone());
                eprintln!("[{name}] {label}: p50 {p50:.0} ms (runs {times:.0?}; {failed} without a put within 30 s)");
                results.insert(
                    (label.to_string(), name.clone()),
                    serde_json::json!({"p50_ms": p50, "runs_ms": times, "no_put_within_30s": failed}),
                );
            }
        }
    });
    drop(clusters);
    // The table: one row per workload, ours against etcd.
    common::print_table(&results);
    common::write_json(&results, "leasekv-bench-cluster.json");
}
