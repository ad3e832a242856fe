//! The lease rows: many live leases kept alive (memory per lease, keepalive throughput and
//! latency, the master's CPU), and an expiry storm (every lease runs out at once while a
//! writer measures what the storm does to everyone else).

use crate::cluster::{Cluster, Settings, System};
use crate::load::{bulk, connections, quantile_ms, window, KeepAlivePool, Writer};
use crate::report::Report;
use anyhow::{bail, Context, Result};
use leasekv::client::GetOptions;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Concurrent requests of a bulk load: enough to keep both systems' batching busy.
const LOAD_CONCURRENCY: usize = 256;
/// Concurrent lease grants (each followed by its put). etcd 3.4 refused 21% of its grants
/// at 256 (after a million keys), and the load stops past 1% failures; at 64 both systems
/// still batch.
const GRANT_CONCURRENCY: usize = 64;
/// A registration's value: a small JSON address, as service discovery writes.
const REGISTRATION: &[u8] = br#"{"addr":"10.0.0.7:8080","zone":"a","weight":100}"#;
/// Keepalive streams of the pool (about one per registered process on a small host).
const KEEPALIVE_STREAMS: usize = 64;
/// Renewals in flight per stream.
const KEEPALIVE_WINDOW: usize = 16;
/// How long each keepalive phase runs.
const KEEPALIVE_SECONDS: u64 = 10;

/// `leases`: `count` leases, each with one key, kept alive by a pool of streams.
pub async fn leases(system: System, count: u64) -> Result<Report> {
    let mut report = Report::new("leases", &system.name(), count);
    let cluster = Cluster::start(system, Settings::default()).await?;
    let term_at_start = cluster.term().await;
    let leader = cluster.leader().await?;
    let conns = connections(&cluster.endpoints(), 8).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_empty = cluster.rss_bytes(leader).unwrap_or_default();
    report.point("rss_vs_leases", "live leases", "master RSS (MiB)", 0.0, mib(rss_empty));

    // The same number of keys without leases first: what the keys cost on their own, so the
    // leases' cost can be told apart from their keys'.
    eprintln!("[{}] {count} keys without leases", system.name());
    bulk(&conns, LOAD_CONCURRENCY, count, "plain keys", |c, i| async move {
        c.put(format!("/plain/{i:08}"), REGISTRATION, 0, false).await.map(drop).context("put")
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_keys = cluster.rss_bytes(leader).unwrap_or_default();

    // Then `count` leases with one key each, in tenths, reading the master's RSS after each.
    eprintln!("[{}] {count} leases with one key each", system.name());
    let ids = Arc::new(Mutex::new(vec![0i64; count as usize]));
    let tenth = count.div_ceil(10);
    let mut granted = 0;
    while granted < count {
        let chunk = tenth.min(count - granted);
        let (base, ids2) = (granted, ids.clone());
        bulk(&conns, GRANT_CONCURRENCY, chunk, "leases", move |c, i| {
            let ids = ids2.clone();
            async move {
                let i = base + i;
                // A long TTL: the keepalive phases measure renewals, not expiry.
                let grant = c.lease_grant(3600, 0).await.context("lease grant")?;
                ids.lock().unwrap_or_else(|e| e.into_inner())[i as usize] = grant.id;
                c.put(format!("/svcs/{i:08}"), REGISTRATION, grant.id, false)
                    .await
                    .map(drop)
                    .context("put with the lease")
            }
        })
        .await?;
        granted += chunk;
        report.point(
            "rss_vs_leases",
            "live leases",
            "master RSS (MiB)",
            granted as f64,
            mib(cluster.rss_bytes(leader).unwrap_or_default()),
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_leases = cluster.rss_bytes(leader).unwrap_or_default();
    let keys_cost = rss_keys.saturating_sub(rss_empty) as f64;
    let leases_and_keys_cost = rss_leases.saturating_sub(rss_keys) as f64;
    report.figure("rss_bytes", rss_leases as f64);
    report.figure("rss_per_key_bytes", keys_cost / count as f64);
    report.figure("rss_per_lease_bytes", (leases_and_keys_cost - keys_cost) / count as f64);

    // Keepalives back to back: the most this pool gets renewed.
    // A grant or attach that failed (at most 1% of them, or the load stops) is left out
    // and counted.
    let ids: Vec<i64> = ids.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().filter(|&id| id != 0).collect();
    report.figure("leases_not_granted", (count - ids.len() as u64) as f64);
    if ids.is_empty() {
        bail!("no lease was granted");
    }
    let pool = KeepAlivePool::open(&cluster.endpoints(), KEEPALIVE_STREAMS, &ids).await?;
    eprintln!("[{}] keepalives back to back for {KEEPALIVE_SECONDS} s", system.name());
    let cpu_before = cluster.cpu_seconds(leader).unwrap_or_default();
    let started = Instant::now();
    let (pool, mut flat) =
        pool.run(Duration::ZERO, started + Duration::from_secs(KEEPALIVE_SECONDS), KEEPALIVE_WINDOW).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cluster.cpu_seconds(leader).unwrap_or_default() - cpu_before;
    report.figure("keepalives_per_s", flat.renewed as f64 / seconds);
    report.figure("keepalive_p50_ms", quantile_ms(&mut flat.latencies, 0.5));
    report.figure("keepalive_p99_ms", quantile_ms(&mut flat.latencies, 0.99));
    report.figure("master_cpu_cores", cpu / seconds);
    report.figure("keepalives_lost", flat.lost as f64);

    // Paced as clients renew a 30 s lease: every lease every 10 s (TTL/3).
    let period = Duration::from_secs(10);
    eprintln!("[{}] keepalives paced, each lease every {period:?}, for 20 s", system.name());
    let cpu_before = cluster.cpu_seconds(leader).unwrap_or_default();
    let started = Instant::now();
    let (_pool, mut paced) = pool.run(period, started + Duration::from_secs(20), KEEPALIVE_WINDOW).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cluster.cpu_seconds(leader).unwrap_or_default() - cpu_before;
    report.figure("paced_target_per_s", count as f64 / period.as_secs_f64());
    report.figure("paced_achieved_per_s", paced.renewed as f64 / seconds);
    report.figure("paced_keepalive_p99_ms", quantile_ms(&mut paced.latencies, 0.99));
    report.figure("paced_master_cpu_cores", cpu / seconds);
    report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
    Ok(report)
}

/// `expiry-storm`: `count` leases (one key each) granted so that all run out in the same
/// second, while 64 clients put; how long until every key is gone, and the writers' p99
/// before and during the storm.
pub async fn expiry_storm(system: System, count: u64, ttl_seconds: u64) -> Result<Report> {
    let mut report = Report::new("expiry-storm", &system.name(), count);
    let cluster = Cluster::start(system, Settings::default()).await?;
    let term_at_start = cluster.term().await;
    let leader = cluster.leader().await?;
    let conns = connections(&cluster.endpoints(), 8).await?;
    // Lease i, granted at g_i, gets TTL ceil(D - g_i): every lease ends within a second of
    // D, the same as keeping them all alive and stopping at once, without a keepalive
    // stream to stop.
    let storm_at = Instant::now() + Duration::from_secs(ttl_seconds);
    let latest_expiry = Arc::new(Mutex::new(storm_at));
    eprintln!("[{}] {count} leases ending together in {ttl_seconds} s", system.name());
    let latest = latest_expiry.clone();
    let granted = bulk(&conns, LOAD_CONCURRENCY, count, "storm leases", move |c, i| {
        let latest = latest.clone();
        async move {
            let ttl = storm_at.saturating_duration_since(Instant::now()).as_secs_f64().ceil() as i64;
            if ttl < 5 {
                bail!("less than 5 s left before the storm");
            }
            let grant = c.lease_grant(ttl, 0).await.context("lease grant")?;
            // The lease lasts its TTL from when the server granted it, which is no later
            // than this answer.
            let expiry = Instant::now() + Duration::from_secs(grant.ttl as u64);
            {
                let mut l = latest.lock().unwrap_or_else(|e| e.into_inner());
                *l = (*l).max(expiry);
            }
            c.put(format!("/storm/{i:08}"), REGISTRATION, grant.id, false).await.map(drop).context("put with the lease")
        }
    })
    .await?;
    let grants_done = Instant::now();
    if storm_at.saturating_duration_since(grants_done) < Duration::from_secs(6) {
        bail!("granting took {:.0} s, too close to the storm; raise --ttl", granted.elapsed.as_secs_f64());
    }
    let latest_expiry = *latest_expiry.lock().unwrap_or_else(|e| e.into_inner());
    let writer = Writer::start(&conns, 64, "/writer/", 256);
    let counter = cluster.client(leader).await?;
    let count_left = || async {
        let options = GetOptions { prefix: true, count_only: true, ..Default::default() };
        counter.get("/storm/", options).await.map(|r| r.count).unwrap_or(-1)
    };
    let before = count_left().await;
    eprintln!(
        "[{}] {before} keys attached; storm in {:.1} s",
        system.name(),
        storm_at.saturating_duration_since(Instant::now()).as_secs_f64()
    );
    let quiet_from = grants_done + Duration::from_secs(1);
    tokio::time::sleep_until(storm_at.into()).await;
    let give_up = latest_expiry + Duration::from_secs(300);
    let mut gone_at = None;
    while Instant::now() < give_up {
        let left = count_left().await;
        let since = Instant::now().saturating_duration_since(storm_at).as_secs_f64();
        report.point("keys_left_vs_seconds", "seconds since the leases' TTL ran out", "keys left", since, left as f64);
        if left == 0 {
            gone_at = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let storm_end = gone_at.unwrap_or_else(Instant::now).max(storm_at + Duration::from_secs(2));
    tokio::time::sleep_until((storm_end + Duration::from_millis(100)).into()).await;
    let (samples, failed) = writer.stop().await;
    let (quiet_p99, quiet_rate) = window(&samples, quiet_from, storm_at);
    let (storm_p99, storm_rate) = window(&samples, storm_at, storm_end);
    let mut t = quiet_from;
    while t < storm_end {
        let (p99, _) = window(&samples, t, t + Duration::from_secs(1));
        let x = t.duration_since(storm_at).as_secs_f64() - storm_at.saturating_duration_since(t).as_secs_f64();
        report.point("writer_p99_vs_seconds", "seconds since the leases' TTL ran out", "writer put p99 (ms)", x, p99);
        t += Duration::from_secs(1);
    }
    match gone_at {
        Some(at) => {
            report.figure("all_gone_after_ttl_s", at.saturating_duration_since(latest_expiry).as_secs_f64());
        }
        None => report.figure("all_gone_after_ttl_s", f64::INFINITY),
    }
    report.figure("ttl_s", ttl_seconds as f64);
    report.figure("writer_quiet_p99_ms", quiet_p99);
    report.figure("writer_storm_p99_ms", storm_p99);
    report.figure("writer_p99_ratio", storm_p99 / quiet_p99);
    report.figure("writer_quiet_per_s", quiet_rate);
    report.figure("writer_storm_per_s", storm_rate);
    report.figure("writer_failed", failed as f64);
    report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
    Ok(report)
}

/// Bytes as MiB, for curves.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
