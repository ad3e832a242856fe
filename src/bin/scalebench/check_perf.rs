//! The check-perf row: etcd's own health check of a cluster, `etcdctl check perf`, run
//! against a fresh 3-node cluster of either system. The `l` and `xl` loads write 1–2 hours'
//! worth of a busy cluster's puts in 60 s from hundreds of clients, then delete everything
//! they wrote in one DeleteRange: what tells whether a big write can cost a master its
//! lease. Figures: whether the check completed and passed, its throughput, slowest request
//! and standard deviation as etcdctl prints them, the run's time, and the master changes
//! during it (the term before and after).

use crate::cluster::{Cluster, Settings, System};
use crate::report::Report;
use anyhow::{Context, Result};
use std::process::Stdio;
use std::time::Instant;

/// The `etcdctl` binary: `ETCDCTL_BIN`, else the first on PATH.
fn etcdctl() -> Result<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("ETCDCTL_BIN") {
        return Ok(path.into());
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("etcdctl")).find(|p| p.is_file()))
        .context("etcdctl is not on PATH (Debian: apt-get install etcd-client) and ETCDCTL_BIN is not set")
}

/// The number etcdctl prints after the first of `labels` found in its output: each
/// verdict is worded one way when it passes and another when it fails (`Throughput is
/// 150 writes/s` or `Throughput too low: 150 writes/s`, etcdctl's `check.go`).
fn figure_after(output: &str, labels: &[&str]) -> Option<f64> {
    labels.iter().find_map(|label| {
        let line = output.lines().find(|line| line.contains(label))?;
        let rest = &line[line.find(label)? + label.len()..];
        let number: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        number.parse().ok()
    })
}

/// Runs `etcdctl check perf --load=<load>` against a fresh cluster of `system`.
pub async fn check_perf(system: System, load: &str) -> Result<Report> {
    let mut report = Report::new(&format!("check-perf-{load}"), &system.name(), 1);
    let cluster = Cluster::start(system, Settings::default()).await?;
    cluster.leader().await?;
    let term_before = cluster.term().await;
    let started = Instant::now();
    eprintln!("[{}] etcdctl check perf --load={load}", system.name());
    let mut command = std::process::Command::new(etcdctl()?);
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoints().join(",")))
        .args(["--command-timeout=30s", "check", "perf", &format!("--load={load}")])
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .context("waiting for etcdctl")?
        .context("running etcdctl check perf")?;
    let took = started.elapsed();
    // The check ends on its DeleteRange's answer, and the members may still be writing it
    // (a step-down can come seconds later): master changes count once a write goes through
    // again, and a stall bound later.
    settle(&cluster).await;
    let term_after = cluster.term().await;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    // The progress bar rewrites one line; the verdicts follow it.
    for line in text.lines().filter(|l| l.contains("PASS") || l.contains("FAIL") || l.contains("Error")) {
        eprintln!("[{}]   {}", system.name(), line.rsplit('\r').next().unwrap_or(line).trim());
    }
    let completed = output.status.success() || text.contains("FAIL");
    report.figure("completed", f64::from(u8::from(completed && !text.contains("Error:"))));
    report.figure("passed", f64::from(u8::from(output.status.success())));
    report.figure("seconds", took.as_secs_f64());
    report.figure("master_changes", term_after.saturating_sub(term_before) as f64);
    if let Some(throughput) = figure_after(&text, &["Throughput is", "Throughput too low:"]) {
        report.figure("writes_per_s", throughput);
    }
    if let Some(slowest) = figure_after(&text, &["Slowest request took too long:", "Slowest request took"]) {
        report.figure("slowest_ms", slowest * 1000.0);
    }
    if let Some(stddev) = figure_after(&text, &["Stddev is", "Stddev too high:"]) {
        report.figure("stddev_ms", stddev * 1000.0);
    }
    Ok(report)
}

/// Waits until a put succeeds (at most two minutes), then five seconds more.
async fn settle(cluster: &Cluster) {
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    if let Ok(client) = leasekv::client::Client::connect(&cluster.endpoints()).await {
        while Instant::now() < deadline {
            let put = client.put(b"/scalebench/settled".to_vec(), b"1".to_vec(), 0, false);
            if let Ok(Ok(_)) = tokio::time::timeout(std::time::Duration::from_secs(10), put).await {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
}

#[cfg(test)]
mod tests {
    use super::figure_after;

    #[test]
    fn etcdctls_verdicts_are_read() {
        let passed = " 60 / 60 Boooooo! 100.00% 1m0s\nPASS: Throughput is 1447 writes/s\nPASS: Slowest request took 0.087589s\nPASS: Stddev is 0.011084s\nPASS\n";
        let failed = "FAIL: Throughput too low: 3261 writes/s\nFAIL: Slowest request took too long: 1.234567s\nFAIL: Stddev too high: 0.5s\nFAIL\n";
        let throughput = ["Throughput is", "Throughput too low:"];
        let slowest = ["Slowest request took too long:", "Slowest request took"];
        let stddev = ["Stddev is", "Stddev too high:"];
        assert_eq!(figure_after(passed, &throughput), Some(1447.0));
        assert_eq!(figure_after(passed, &slowest), Some(0.087589));
        assert_eq!(figure_after(passed, &stddev), Some(0.011084));
        assert_eq!(figure_after(failed, &throughput), Some(3261.0));
        assert_eq!(figure_after(failed, &slowest), Some(1.234567));
        assert_eq!(figure_after(failed, &stddev), Some(0.5));
        assert_eq!(figure_after("Error: etcdserver: request timed out", &throughput), None);
    }
}
