//! The disk-growth row: many overwrites of a small key space with auto-compaction on, the
//! data directory's size read as it goes.

use crate::cluster::{disk_bytes, Cluster, Settings, System};
use crate::leases::mib;
use crate::load::{bulk, connections};
use crate::report::Report;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys the puts go round.
const KEYS: u64 = 10_000;
/// Value size.
const VALUE_BYTES: usize = 1024;
/// Revisions auto-compaction keeps, on both systems (leasekv's default; etcd's is off).
const RETENTION: u64 = 10_000;

/// `compaction`: `count` puts over 10,000 keys of 1 KiB, auto-compaction keeping 10,000
/// revisions; the leader's data directory size every 2 s against the live data.
pub async fn compaction(system: System, count: u64) -> Result<Report> {
    let mut report = Report::new("compaction", &system.name(), count);
    let cluster =
        Cluster::start(system, Settings { compaction_retention: Some(RETENTION), ..Default::default() }).await?;
    let term_at_start = cluster.term().await;
    let leader = cluster.leader().await?;
    let conns = connections(&cluster.endpoints(), 8).await?;
    let key_bytes = "/churn/00000000".len() as u64;
    let live = KEYS * (key_bytes + VALUE_BYTES as u64);
    report.figure("live_data_bytes", live as f64);

    let dir = cluster.data_dir(leader).to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let sampler = {
        let (stop, samples, dir) = (stop.clone(), samples.clone(), dir.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let size = tokio::task::spawn_blocking({
                    let dir = dir.clone();
                    move || disk_bytes(&dir)
                })
                .await
                .unwrap_or_default();
                samples.lock().unwrap_or_else(|e| e.into_inner()).push((started.elapsed().as_secs_f64(), size));
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    eprintln!("[{}] {count} puts over {KEYS} keys, compaction keeping {RETENTION} revisions", system.name());
    let value = vec![b'c'; VALUE_BYTES];
    let load = bulk(&conns, 256, count, "overwrites", move |c, i| {
        let value = value.clone();
        async move { c.put(format!("/churn/{:08}", i % KEYS), value, 0, false).await.map(drop).context("put") }
    })
    .await?;
    // etcd's revision compactor runs every 5 minutes; a short run may end before it does.
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let max = samples.iter().map(|&(_, s)| s).max().unwrap_or_default();
    let last = samples.last().map(|&(_, s)| s).unwrap_or_default();
    for (t, size) in &samples {
        report.point("data_dir_vs_seconds", "seconds", "leader's data dir (MiB)", *t, mib(*size));
    }
    report.figure("puts_per_s", load.rate());
    report.figure("data_dir_max_bytes", max as f64);
    report.figure("data_dir_final_bytes", last as f64);
    report.figure("data_dir_max_over_live", max as f64 / live as f64);
    report.figure("rss_bytes", cluster.rss_bytes(leader).unwrap_or_default() as f64);
    report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
    Ok(report)
}
