//! Backups of a large store: `Maintenance.Snapshot` (what `etcdctl snapshot save` calls)
//! from the master of a 3-node leasekv (PaxosLease) and from the leader of a 3-node etcd,
//! holding the same keys. For each: the time from the request to the stream's end, the
//! file's size, and the serving member's peak RSS growth while it streams (its RSS sampled
//! every 10 ms, minus its RSS just before), which shows whether the file is built in
//! memory. Several runs each, alternating; the median is reported.
//!
//! `BACKUP_KEYS` (default 1,000,000) keys of `BACKUP_VALUE_BYTES` (default 100) are written
//! in transactions of 100 puts (etcd's `--max-txn-ops` is 128), 16 at a time;
//! then the store is compacted at its revision (`BACKUP_COMPACT=0`: not);
//! `BACKUP_RUNS` (default 3) backups are taken from each store. `BENCH_TARGETS` narrows the
//! stores (`leasekv`, `etcd`). `KVSERVER_BIN` / `ETCD_BIN` pick the binaries.
//!
//! ```sh
//! cargo bench --bench backup
//! ```

mod common;

use common::{connect, leader, median, rss_bytes, selected, Cluster, Target};
use leasekv::client::proto::etcdserverpb::request_op::Request;
use leasekv::client::proto::etcdserverpb::{PutRequest, RequestOp, TxnRequest};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PUTS_PER_TXN: usize = 100;
const WRITERS: usize = 16;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Writes `keys` keys of `value_bytes` through the store's leader.
async fn fill(endpoint: String, keys: usize, value_bytes: usize) {
    let next = Arc::new(AtomicU64::new(0));
    let txns = keys.div_ceil(PUTS_PER_TXN) as u64;
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let (next, endpoint) = (Arc::clone(&next), endpoint.clone());
        writers.push(tokio::spawn(async move {
            let client = connect(endpoint).await;
            loop {
                let txn = next.fetch_add(1, Ordering::Relaxed);
                if txn >= txns {
                    return;
                }
                let first = txn as usize * PUTS_PER_TXN;
                let success = (first..(first + PUTS_PER_TXN).min(keys))
                    .map(|i| RequestOp {
                        request: Some(Request::RequestPut(PutRequest {
                            key: format!("/registry/pods/ns{}/pod-{i:08}", i % 50).into_bytes(),
                            value: vec![b'v'; value_bytes],
                            ..Default::default()
                        })),
                    })
                    .collect();
                let request = TxnRequest { success, ..Default::default() };
                let mut tries = 0;
                while let Err(e) = client.txn(request.clone()).await {
                    tries += 1;
                    assert!(tries < 20, "a fill transaction kept failing: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("a writer");
    }
}

/// One backup: (seconds, bytes, peak RSS growth of `pid` in bytes).
async fn backup(endpoint: String, pid: u32) -> (f64, usize, u64) {
    let client = connect(endpoint).await;
    let before = rss_bytes(pid).unwrap_or(0);
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut peak = before;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss_bytes(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let started = Instant::now();
    let file = client.snapshot().await.expect("a snapshot");
    let seconds = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("the sampler");
    (seconds, file.len(), peak.saturating_sub(before))
}

fn main() {
    let keys = env_number("BACKUP_KEYS", 1_000_000);
    let value_bytes = env_number("BACKUP_VALUE_BYTES", 100);
    let runs = env_number("BACKUP_RUNS", 3);
    let compact = env_number("BACKUP_COMPACT", 1) == 1;
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let targets = [Target::LeaseKv("paxoslease"), Target::Etcd];
    let mut stores = Vec::new();
    for target in targets.into_iter().filter(|t| selected("BENCH_TARGETS", &t.name())) {
        let cluster = Cluster::start(target);
        let leader = runtime.block_on(leader(&cluster));
        let started = Instant::now();
        runtime.block_on(fill(cluster.endpoint(leader), keys, value_bytes));
        eprintln!("[{}] {keys} keys written in {:.0?}", target.name(), started.elapsed());
        if compact {
            // As a store that runs for long is (etcd's auto-compaction, Kubernetes' every
            // 5 minutes): every key is then live at the compaction point, which leasekv's
            // export sorts into revision order.
            runtime.block_on(async {
                let client = connect(cluster.endpoint(leader)).await;
                let revision = client.status().await.expect("a status").header.expect("a header").revision;
                // etcd's compaction of 1M revisions outlasts the client's deadline: it goes
                // on, and the backups wait until the store's size in use stops moving.
                if let Err(e) = client.compact(revision, true).await {
                    eprintln!("[{}] compaction still running ({e})", target.name());
                }
                let (mut last, mut steady) = (0, 0);
                let deadline = Instant::now() + Duration::from_secs(300);
                while steady < 3 && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let in_use = client.status().await.map_or(0, |s| s.db_size_in_use);
                    steady = if in_use == last { steady + 1 } else { 0 };
                    last = in_use;
                }
            });
        }
        stores.push((cluster, leader, Vec::new()));
    }
    for run in 0..runs {
        for (cluster, leader, results) in &mut stores {
            let pid = cluster.pid(*leader).expect("the leader runs");
            let (seconds, bytes, growth) = runtime.block_on(backup(cluster.endpoint(*leader), pid));
            eprintln!(
                "[{}] run {run}: {seconds:.2} s, {:.1} MB, peak RSS growth {:.1} MB",
                cluster.target.name(),
                bytes as f64 / 1e6,
                growth as f64 / 1e6
            );
            results.push((seconds, bytes, growth));
        }
    }
    let compacted = if compact { ", compacted" } else { "" };
    println!(
        "\n| store ({keys} keys of {value_bytes} B{compacted}) | backup time, s | file, MB | peak RSS growth, MB |"
    );
    println!("|---|---|---|---|");
    for (cluster, _, results) in &stores {
        let seconds = median(results.iter().map(|r| r.0).collect());
        let bytes = median(results.iter().map(|r| r.1 as f64).collect());
        let growth = median(results.iter().map(|r| r.2 as f64).collect());
        println!("| {} | {seconds:.2} | {:.1} | {:.1} |", cluster.target.name(), bytes / 1e6, growth / 1e6);
    }
}
