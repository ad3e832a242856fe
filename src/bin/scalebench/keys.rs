//! The key-space rows: a large key space (memory, disk, a 10,000-key prefix range), the
//! restart of a member holding it, and a replaced member catching it up while the others
//! go on serving writes.

use crate::cluster::{disk_bytes, Cluster, Settings, System, QUOTA_BYTES};
use crate::load::{bulk, connections, quantile_ms, window, Writer};
use crate::report::Report;
use anyhow::{anyhow, Context, Result};
use leasekv::client::GetOptions;
use std::time::{Duration, Instant};

/// Value size of the key-space rows: 1 KiB.
const VALUE_BYTES: usize = 1024;
/// Concurrent puts while loading.
const LOAD_CONCURRENCY: usize = 256;
/// Keys a prefix range returns (`/keys/0000` covers keys 0 to 9,999).
const RANGE_KEYS: u64 = 10_000;

/// Which of the three rows to measure after loading the key space.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    /// Memory, disk and the prefix range.
    pub keys: bool,
    /// Restart of a member.
    pub restart: bool,
    /// A replaced member catching up.
    pub catch_up: bool,
}

pub fn key(i: u64) -> String {
    format!("/keys/{i:08}")
}

/// Loads `count` keys of 1 KiB into a fresh cluster, then measures the selected rows; one
/// report per row.
pub async fn key_space(system: System, count: u64, rows: Rows) -> Result<Vec<Report>> {
    let mut reports = Vec::new();
    let mut cluster =
        Cluster::start(system, Settings { quota_bytes: Some(quota_for(count)), ..Default::default() }).await?;
    let term_at_start = cluster.term().await;
    let conns = connections(&cluster.endpoints(), 8).await?;
    eprintln!("[{}] loading {count} keys of {VALUE_BYTES} B", system.name());
    let value = vec![b'k'; VALUE_BYTES];
    let loaded = bulk(&conns, LOAD_CONCURRENCY, count, "keys", move |c, i| {
        let value = value.clone();
        async move { c.put(key(i), value, 0, false).await.map(drop).context("put") }
    })
    .await?;
    // Let background work settle (etcd's and leasekv's snapshots, sled's flushes).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let leader = cluster.leader().await?;
    let last_key = key(count - 1);

    if rows.keys {
        let mut report = Report::new("keys", &system.name(), count);
        report.figure("load_puts_per_s", loaded.rate());
        let live = count * (last_key.len() + VALUE_BYTES) as u64;
        report.figure("live_data_bytes", live as f64);
        report.figure("rss_bytes", cluster.rss_bytes(leader).unwrap_or_default() as f64);
        report.figure("data_dir_bytes", disk_bytes(cluster.data_dir(leader)) as f64);
        let follower = (leader + 1) % 3;
        report.figure("follower_rss_bytes", cluster.rss_bytes(follower).unwrap_or_default() as f64);
        report.figure("follower_data_dir_bytes", disk_bytes(cluster.data_dir(follower)) as f64);
        let client = cluster.client(leader).await?;
        let mut latencies = Vec::new();
        let mut returned = 0;
        for _ in 0..10 {
            let started = Instant::now();
            let answer = client.get("/keys/0000", GetOptions { prefix: true, ..Default::default() }).await?;
            latencies.push(started.elapsed());
            returned = answer.kvs.len();
        }
        report.figure("range_keys", returned as f64);
        report.figure("range_p50_ms", quantile_ms(&mut latencies, 0.5));
        report.figure("range_max_ms", quantile_ms(&mut latencies, 1.0));
        if count >= RANGE_KEYS && returned as u64 != RANGE_KEYS {
            return Err(anyhow!("the prefix range returned {returned} keys, not {RANGE_KEYS}"));
        }
        report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
        finished(&mut reports, report);
    }

    if rows.restart {
        let mut report = Report::new("restart", &system.name(), count);
        let member = (leader + 1) % 3;
        eprintln!("[{}] restarting a member holding {count} keys", system.name());
        cluster.stop(member, true);
        cluster.restart(member)?;
        let serving = wait_has(&cluster, member, &last_key, Duration::from_secs(600)).await?;
        report.figure("restart_to_serving_s", serving.as_secs_f64());
        report.figure("rss_after_restart_bytes", cluster.rss_bytes(member).unwrap_or_default() as f64);
        report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
        finished(&mut reports, report);
    }

    if rows.catch_up {
        let mut report = Report::new("catch-up", &system.name(), count);
        let leader = cluster.leader().await?;
        let old = (leader + 1) % 3;
        let others: Vec<String> =
            (0..cluster.len()).filter(|&j| j != old && cluster.is_running(j)).map(|j| cluster.endpoint(j)).collect();
        let writer_conns = connections(&others, 4).await?;
        let writer = Writer::start(&writer_conns, 16, "/catchup-writer/", 256);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let before_to = Instant::now();
        let before_from = before_to - Duration::from_secs(8);
        eprintln!("[{}] replacing a member with an empty one", system.name());
        let others_ix: Vec<usize> = (0..cluster.len()).filter(|&j| j != old).collect();
        let others_cpu = |cluster: &Cluster| -> f64 { others_ix.iter().filter_map(|&j| cluster.cpu_seconds(j)).sum() };
        let others_cpu_before = others_cpu(&cluster);
        cluster.stop(old, false);
        let replaced_at = Instant::now();
        let slot = cluster.replace(old).await?;
        let serving = wait_has(&cluster, slot, &last_key, catch_up_wait(count)).await;
        let during_to = Instant::now();
        // CPU, where wall time moves with what else the machine does: the catch-up's own
        // threads run at the background priority and get what the others leave.
        report.figure("new_member_cpu_s", cluster.cpu_seconds(slot).unwrap_or_default());
        report.figure("others_cpu_s", others_cpu(&cluster) - others_cpu_before);
        let (samples, failed) = writer.stop().await;
        // A catch-up that does not finish is a figure of its row, not an error that would
        // lose the rows measured before it (the 10M load takes over 20 minutes).
        let serving = serving.unwrap_or_else(|error| {
            eprintln!("[{}] the catch-up did not finish: {error:#}", system.name());
            report.figure("catch_up_failed", 1.0);
            during_to.duration_since(replaced_at)
        });
        let (before_p99, before_rate) = window(&samples, before_from, before_to);
        let (during_p99, during_rate) =
            window(&samples, replaced_at, during_to.max(replaced_at + Duration::from_secs(1)));
        let mut t = before_from;
        while t < during_to {
            let (_, rate) = window(&samples, t, t + Duration::from_secs(1));
            let x =
                t.duration_since(replaced_at).as_secs_f64() - replaced_at.saturating_duration_since(t).as_secs_f64();
            report.point(
                "writer_puts_per_s_vs_seconds",
                "seconds since the member was replaced",
                "puts/s of the others",
                x,
                rate,
            );
            t += Duration::from_secs(1);
        }
        report.figure("catch_up_to_serving_s", serving.as_secs_f64());
        report.figure("replace_to_serving_s", during_to.duration_since(replaced_at).as_secs_f64());
        report.figure("writer_before_per_s", before_rate);
        report.figure("writer_during_per_s", during_rate);
        report.figure("writer_kept_ratio", during_rate / before_rate);
        report.figure("writer_before_p99_ms", before_p99);
        report.figure("writer_during_p99_ms", during_p99);
        report.figure("writer_failed", failed as f64);
        report.figure("new_member_data_dir_bytes", disk_bytes(cluster.data_dir(slot)) as f64);
        report.figure("new_member_rss_bytes", cluster.rss_bytes(slot).unwrap_or_default() as f64);
        report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
        finished(&mut reports, report);
    }
    Ok(reports)
}

/// Keeps a finished row's report, and shows its figures at once: a later row of the same
/// load may take half an hour or be stopped.
fn finished(reports: &mut Vec<Report>, report: Report) {
    eprintln!("{}", report.summary_line());
    reports.push(report);
}

/// How long a replaced member may take to serve `count` keys: 15 minutes, or a second per
/// 5,000 keys where that is longer (33 minutes for the 10M row).
fn catch_up_wait(count: u64) -> Duration {
    Duration::from_secs((count / 5_000).max(900))
}

/// The space quota for `count` keys of [`VALUE_BYTES`]: the common one while the values fit
/// in half of it, else 16 GiB (the 10M row, 10 GB of values, the quota for etcd
/// there).
fn quota_for(count: u64) -> u64 {
    if count.saturating_mul(VALUE_BYTES as u64) <= QUOTA_BYTES / 2 {
        QUOTA_BYTES
    } else {
        16 << 30
    }
}

/// Waits until member `i` answers a serializable read of `key` from its own state (it has
/// the data, not merely a process), returning how long that took.
pub async fn wait_has(cluster: &Cluster, i: usize, key: &str, wait: Duration) -> Result<Duration> {
    let started = Instant::now();
    while started.elapsed() < wait {
        if let Ok(client) = cluster.client(i).await {
            let options = GetOptions { serializable: true, ..Default::default() };
            if let Ok(answer) = client.get(key, options).await {
                if !answer.kvs.is_empty() {
                    return Ok(started.elapsed());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(anyhow!(
        "member {} did not serve {key} within {wait:?}; its log:\n{}",
        cluster.endpoint(i),
        cluster.log_tail(i)
    ))
}
