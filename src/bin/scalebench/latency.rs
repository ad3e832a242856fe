//! The put rows: one client's latency (at the master, and spread over the members), and
//! throughput and p99 against the number of clients.

use crate::cluster::{Cluster, Settings, System};
use crate::load::{connections, quantile_ms};
use crate::report::Report;
use anyhow::Result;
use leasekv::client::Client;
use std::time::{Duration, Instant};

/// Value size, as the cluster benchmark's.
const VALUE_BYTES: usize = 256;
/// Runs per measurement; the median is reported.
const RUNS: usize = 3;
/// Length of one run.
const RUN: Duration = Duration::from_secs(4);

/// `clients` tasks over `conns` putting for [`RUN`]; (ops/s, p50 ms, p99 ms).
async fn puts(conns: &[Client], clients: usize) -> (f64, f64, f64) {
    let deadline = Instant::now() + RUN;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = conns[c % conns.len()].clone();
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut n) = (Vec::new(), 0u64);
            let value = vec![b'v'; VALUE_BYTES];
            while Instant::now() < deadline {
                let started = Instant::now();
                if client.put(format!("/lat/{c}/{}", n % 1000), value.clone(), 0, false).await.is_ok() {
                    latencies.push(started.elapsed());
                }
                n += 1;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let rate = all.len() as f64 / RUN.as_secs_f64();
    (rate, quantile_ms(&mut all, 0.5), quantile_ms(&mut all, 0.99))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `put-latency`: a single client's put p50 and p99 at the master and spread over every
/// member (round robin), median of runs.
pub async fn put_latency(system: System) -> Result<Report> {
    let mut report = Report::new("put-latency", &system.name(), 1);
    let cluster = Cluster::start(system, Settings::default()).await?;
    let term_at_start = cluster.term().await;
    let leader = cluster.leader().await?;
    let at_leader = connections(&[cluster.endpoint(leader)], 1).await?;
    let spread = connections(&cluster.endpoints(), 3).await?;
    let (mut p50, mut p99, mut any50, mut any99) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..RUNS {
        eprintln!("[{}] single-client puts, run {} of {RUNS}", system.name(), run + 1);
        let (_, a, b) = puts(&at_leader, 1).await;
        p50.push(a);
        p99.push(b);
        let (_, a, b) = spread_puts(&spread).await;
        any50.push(a);
        any99.push(b);
    }
    report.figure("put_p50_master_ms", median(p50));
    report.figure("put_p99_master_ms", median(p99));
    report.figure("put_p50_any_ms", median(any50));
    report.figure("put_p99_any_ms", median(any99));
    report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
    Ok(report)
}

/// One client sending each put to the next member in turn.
async fn spread_puts(conns: &[Client]) -> (f64, f64, f64) {
    let deadline = Instant::now() + RUN;
    let (mut latencies, mut n) = (Vec::new(), 0usize);
    let value = vec![b'v'; VALUE_BYTES];
    while Instant::now() < deadline {
        let client = &conns[n % conns.len()];
        let started = Instant::now();
        if client.put(format!("/lat/spread/{}", n % 1000), value.clone(), 0, false).await.is_ok() {
            latencies.push(started.elapsed());
        }
        n += 1;
    }
    let rate = latencies.len() as f64 / RUN.as_secs_f64();
    (rate, quantile_ms(&mut latencies, 0.5), quantile_ms(&mut latencies, 0.99))
}

/// CPU seconds the cluster's members have used so far, summed.
fn members_cpu_seconds(cluster: &Cluster) -> f64 {
    (0..cluster.endpoints().len()).filter_map(|i| cluster.cpu_seconds(i)).sum()
}

/// `clients`: put throughput and p99 with 1 to 256 clients over 8 connections to every
/// member, median of runs; the curves behind the put figures.
pub async fn clients(system: System) -> Result<Report> {
    let mut report = Report::new("clients", &system.name(), 256);
    let cluster = Cluster::start(system, Settings::default()).await?;
    let term_at_start = cluster.term().await;
    let conns = connections(&cluster.endpoints(), 8).await?;
    for clients in [1usize, 4, 16, 64, 256] {
        let (mut rates, mut p99s, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let cpu_before = members_cpu_seconds(&cluster);
            let (rate, _, p99) = puts(&conns, clients).await;
            let cpu = members_cpu_seconds(&cluster) - cpu_before;
            rates.push(rate);
            p99s.push(p99);
            // The members' CPU time per put: microseconds, summed over the members.
            cpus.push(cpu * 1e6 / (rate * RUN.as_secs_f64()).max(1.0));
        }
        let (rate, p99, cpu) = (median(rates), median(p99s), median(cpus));
        eprintln!("[{}] {clients} clients: {rate:.0} puts/s, p99 {p99:.2} ms, {cpu:.0} µs CPU/put", system.name());
        report.figure(&format!("cpu_us_per_put_{clients}"), cpu);
        report.point("puts_per_s_vs_clients", "clients", "puts/s", clients as f64, rate);
        report.point("put_p99_ms_vs_clients", "clients", "put p99 (ms)", clients as f64, p99);
        report.figure(&format!("puts_per_s_{clients}"), rate);
        report.figure(&format!("put_p99_ms_{clients}"), p99);
    }
    report.figure("leader_changes", cluster.term().await.saturating_sub(term_at_start) as f64);
    Ok(report)
}
