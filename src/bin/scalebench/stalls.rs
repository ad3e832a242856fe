//! The stall row: a 64-client put load on a loaded key space, first quiet, then while a
//! backup streams out of the leader, then while a replaced member catches the state up.
//! Each phase's put p99 is set against the quiet one; for leasekv, the node loops' turns
//! over 50 ms are counted from their histogram (`leasekv_node_loop_turn_duration_seconds`
//! on each member's /metrics), phase by phase.
//!
//! The quiet phase is the system's steady state: leasekv's checkpoints (an engine sync and
//! a log cut, every 32 MiB of log) and etcd's snapshots (every 100,000 entries by default)
//! run in it as they do in every other phase.

use crate::cluster::{Cluster, Settings, System};
use crate::keys::wait_has;
use crate::load::{bulk, connections, window, Writer};
use crate::report::Report;
use anyhow::{Context, Result};
use std::time::{Duration, Instant};

/// Value size of the loaded keys and of the writer's puts: 1 KiB.
const VALUE_BYTES: usize = 1024;
/// Clients of the put load.
const CLIENTS: usize = 64;
/// Length of the quiet phase.
const QUIET: Duration = Duration::from_secs(15);
/// A node-loop turn longer than this is a stall (the bound).
const STALL_SECONDS: f64 = 0.05;

/// One node loop histogram as scraped: (upper bound in seconds, cumulative count), in order.
type Buckets = Vec<(f64, f64)>;

/// One phase: its name, when it ran, and each member's loop histogram before and after.
type Phase = (&'static str, Instant, Instant, Vec<Option<Buckets>>, Vec<Option<Buckets>>);

/// Loads `count` keys of 1 KiB, runs the put load through the three phases and reports
/// them.
pub async fn stalls(system: System, count: u64) -> Result<Report> {
    let mut report = Report::new("stalls", &system.name(), count);
    let mut cluster = Cluster::start(system, Settings::default()).await?;
    let conns = connections(&cluster.endpoints(), 8).await?;
    eprintln!("[{}] loading {count} keys of {VALUE_BYTES} B", system.name());
    let value = vec![b's'; VALUE_BYTES];
    bulk(&conns, 256, count, "keys", move |c, i| {
        let value = value.clone();
        async move { c.put(format!("/keys/{i:08}"), value, 0, false).await.map(drop).context("put") }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let leader = cluster.leader().await?;
    let replaced = (leader + 1) % 3;
    let stays: Vec<String> = (0..3).filter(|&i| i != replaced).map(|i| cluster.endpoint(i)).collect();
    let writer_conns = connections(&stays, 8).await?;
    let writer = Writer::start(&writer_conns, CLIENTS, "/stall-writer/", VALUE_BYTES);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let loops = |cluster: &Cluster| -> Vec<Option<Buckets>> {
        (0..cluster.len()).map(|i| cluster.is_running(i).then(|| loop_turns(&cluster.endpoint(i))).flatten()).collect()
    };
    let mut phases: Vec<Phase> = Vec::new();

    eprintln!("[{}] quiet phase", system.name());
    let (from, before) = (Instant::now(), loops(&cluster));
    tokio::time::sleep(QUIET).await;
    phases.push(("quiet", from, Instant::now(), before, loops(&cluster)));

    eprintln!("[{}] backup phase", system.name());
    let (from, before) = (Instant::now(), loops(&cluster));
    let backup = cluster.client(leader).await?.snapshot().await.context("the backup")?;
    report.figure("backup_bytes", backup.len() as f64);
    drop(backup);
    phases.push(("backup", from, Instant::now(), before, loops(&cluster)));

    eprintln!("[{}] catch-up phase: member {} replaced by an empty one", system.name(), replaced + 1);
    let (from, mut before) = (Instant::now(), loops(&cluster));
    before[replaced] = None;
    cluster.stop(replaced, false);
    let slot = cluster.replace(replaced).await?;
    wait_has(&cluster, slot, &format!("/keys/{:08}", count - 1), Duration::from_secs(900)).await?;
    // The new member's loop counts from its start: only the members that stayed count.
    let mut after = loops(&cluster);
    for i in [replaced, slot] {
        if let Some(member) = after.get_mut(i) {
            *member = None;
        }
    }
    phases.push(("catch-up", from, Instant::now(), before, after));

    let (samples, failed) = writer.stop().await;
    report.figure("writer_failed", failed as f64);
    let mut quiet_p99 = None;
    for (name, from, to, before, after) in &phases {
        let (p99, rate) = window(&samples, *from, *to);
        let max = samples.iter().filter(|s| s.at >= *from && s.at < *to).map(|s| s.latency).max().unwrap_or_default();
        let key = name.replace('-', "_");
        report.figure(&format!("{key}_seconds"), to.duration_since(*from).as_secs_f64());
        report.figure(&format!("{key}_put_p99_ms"), p99);
        report.figure(&format!("{key}_put_max_ms"), max.as_secs_f64() * 1e3);
        report.figure(&format!("{key}_puts_per_s"), rate);
        let quiet = *quiet_p99.get_or_insert(p99);
        report.figure(&format!("{key}_p99_vs_quiet"), p99 / quiet.max(1e-9));
        if matches!(system, System::LeaseKv(_)) {
            let (stalls, longest) = stalls_between(before, after);
            report.figure(&format!("{key}_loop_turns_over_50ms"), stalls);
            report.figure(&format!("{key}_loop_turn_max_bucket_s"), longest);
        }
    }
    Ok(report)
}

/// The node loop's turn histogram of the member at `endpoint`, or `None` when it does not
/// export one (etcd) or cannot be reached.
fn loop_turns(endpoint: &str) -> Option<Buckets> {
    let text = ureq::get(&format!("http://{endpoint}/metrics")).call().ok()?.body_mut().read_to_string().ok()?;
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).ok()?;
    scrape.samples.into_iter().find(|s| s.metric == "leasekv_node_loop_turn_duration_seconds").and_then(|s| {
        match s.value {
            prometheus_parse::Value::Histogram(buckets) => {
                Some(buckets.into_iter().map(|b| (b.less_than, b.count)).collect())
            }
            _ => None,
        }
    })
}

/// Turns over [`STALL_SECONDS`] between two scrapes of each member, summed, and the upper
/// bound of the highest bucket any turn fell in meanwhile (0 when none was counted).
fn stalls_between(before: &[Option<Buckets>], after: &[Option<Buckets>]) -> (f64, f64) {
    let (mut stalls, mut longest) = (0.0, 0.0f64);
    for (before, after) in before.iter().zip(after) {
        let (Some(before), Some(after)) = (before, after) else { continue };
        let count = |buckets: &Buckets, bound: f64| {
            buckets.iter().filter(|(le, _)| *le >= bound).map(|(_, c)| *c).fold(f64::NAN, f64::min)
        };
        let total = |buckets: &Buckets| buckets.iter().map(|(_, c)| *c).fold(0.0, f64::max);
        let within = count(after, STALL_SECONDS) - count(before, STALL_SECONDS);
        stalls += (total(after) - total(before)) - within;
        let mut previous = 0.0;
        for ((le, now), (_, then)) in after.iter().zip(before) {
            let added = now - then;
            if added > previous {
                longest = longest.max(*le);
            }
            previous = added;
        }
    }
    (stalls, longest)
}
