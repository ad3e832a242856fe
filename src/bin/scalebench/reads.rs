//! The reads row: a large key space read as Kubernetes reads it, while a 64-client put
//! load runs. Three storms, one after the other, each against every member:
//! - `scan`: 16 clients each read the whole prefix once, in pages of 500 at the revision of
//!   their first page (client-go's paginated LIST);
//! - `stream`: 16 clients each read the whole prefix once with etcd 3.7's RangeStream (etcd
//!   3.4 answers Unimplemented: every stream fails there);
//! - `count`: 4 clients loop `count_only` over the prefix;
//! - `full`: 4 clients loop an unpaginated read of the whole prefix.
//!
//! Per storm: master changes (the term before and after), failed reads and puts, the put
//! p99 against the quiet one, each member's peak RSS growth, and the storm's own figures
//! (a whole scan's time, a count's p50). leasekv and etcd run the same row.

use crate::cluster::{Cluster, Settings, System};
use crate::keys::key;
use crate::load::{bulk, connections, quantile_ms, window, Writer};
use crate::report::Report;
use anyhow::{Context, Result};
use leasekv::client::proto::etcdserverpb::RangeRequest;
use leasekv::client::{prefix_range_end, Client};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Value size of the loaded keys: 1 KiB.
const VALUE_BYTES: usize = 1024;
/// Clients of the put load.
const WRITERS: usize = 64;
/// Length of the quiet phase and of the count and full storms.
const PHASE: Duration = Duration::from_secs(20);
/// A page of the paginated scan.
const PAGE: i64 = 500;
/// Paginated scanners.
const SCANNERS: usize = 16;
/// `count_only` loops, and unpaginated readers.
const LOOPS: usize = 4;
/// The longest a scan storm may take.
const SCAN_DEADLINE: Duration = Duration::from_secs(600);

/// What one storm's clients did.
#[derive(Default)]
struct Tally {
    done: AtomicU64,
    failed: AtomicU64,
    /// Each completed operation's time, in microseconds.
    took: std::sync::Mutex<Vec<Duration>>,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Tally {
    fn record(&self, result: Result<Duration>) {
        match result {
            Ok(took) => {
                self.done.fetch_add(1, Ordering::Relaxed);
                self.took.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(took);
            }
            Err(error) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                first.get_or_insert_with(|| format!("{error:#}"));
            }
        }
    }
}

fn prefix_request(count_only: bool) -> RangeRequest {
    RangeRequest { key: b"/keys/".to_vec(), range_end: prefix_range_end(b"/keys/"), count_only, ..Default::default() }
}

/// One whole paginated scan of the prefix at the revision of its first page; a scan not
/// done by `until` fails, naming how far it got.
async fn paginated_scan(client: &Client, expected: u64, until: Instant) -> Result<Duration> {
    let started = Instant::now();
    let (mut from, mut revision, mut seen) = (b"/keys/".to_vec(), 0, 0u64);
    loop {
        anyhow::ensure!(
            Instant::now() < until,
            "the scan saw {seen} of {expected} keys in {:.0} s, the storm's deadline",
            started.elapsed().as_secs_f64()
        );
        let request = RangeRequest { key: from.clone(), limit: PAGE, revision, ..prefix_request(false) };
        let page = client.range(request).await.context("a page")?;
        if revision == 0 {
            revision = page.header.as_ref().map_or(0, |h| h.revision);
        }
        seen += page.kvs.len() as u64;
        match page.kvs.last() {
            Some(last) if page.more => {
                from = last.key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    anyhow::ensure!(seen == expected, "the scan saw {seen} keys, not {expected}");
    Ok(started.elapsed())
}

/// One RangeStream (etcd 3.7's) of the whole prefix, its chunks counted and let go; a
/// stream not done by `until` fails.
async fn streamed_scan(client: &Client, expected: u64, until: Instant) -> Result<Duration> {
    let started = Instant::now();
    let mut stream = client.range_stream(prefix_request(false)).await.context("opening the stream")?;
    let mut seen = 0u64;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, stream.message())
            .await
            .with_context(|| format!("the stream saw {seen} of {expected} keys by the storm's deadline"))?
            .context("a chunk")?;
        let Some(chunk) = chunk else { break };
        seen += chunk.range_response.map_or(0, |r| r.kvs.len() as u64);
    }
    anyhow::ensure!(seen == expected, "the stream saw {seen} keys, not {expected}");
    Ok(started.elapsed())
}

/// Samples every member's RSS every 200 ms until `stop`; returns each one's peak.
fn sample_rss(cluster: &Cluster, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<u64>> {
    let pids: Vec<Option<u32>> = (0..cluster.len()).map(|i| cluster.pid(i)).collect();
    tokio::spawn(async move {
        let mut peaks = vec![0u64; pids.len()];
        while !stop.load(Ordering::Relaxed) {
            for (peak, pid) in peaks.iter_mut().zip(&pids) {
                if let Some(rss) = pid.and_then(leasekv::process::rss_bytes) {
                    *peak = (*peak).max(rss);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        peaks
    })
}

/// Loads `count` keys of 1 KiB and runs the quiet phase and the three storms.
pub async fn reads(system: System, count: u64, storms: &[String]) -> Result<Report> {
    let mut report = Report::new("reads", &system.name(), count);
    // Compaction as etcd's default (off): a paginated scan reads at the revision of its
    // first page for as long as it runs, and leasekv's default (10,000 revisions) passes
    // it within seconds under this put load (every scan then fails "compacted", as it would
    // on etcd compacting that often).
    let settings = Settings { leasekv_toml: "[compaction]\nmode = \"off\"\n".into(), ..Settings::default() };
    let cluster = Cluster::start(system, settings).await?;
    let conns = connections(&cluster.endpoints(), 8).await?;
    eprintln!("[{}] loading {count} keys of {VALUE_BYTES} B", system.name());
    let value = vec![b'r'; VALUE_BYTES];
    bulk(&conns, 256, count, "keys", move |c, i| {
        let value = value.clone();
        async move { c.put(key(i), value, 0, false).await.map(drop).context("put") }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let writer = Writer::start(&conns, WRITERS, "/reads-writer/", 256);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let quiet_from = Instant::now();
    tokio::time::sleep(PHASE).await;
    let quiet_to = Instant::now();
    let readers = connections(&cluster.endpoints(), 6).await?;
    let mut windows = Vec::new();
    for storm in ["scan", "stream", "count", "full"] {
        if !storms.is_empty() && !storms.iter().any(|s| s == storm) {
            continue;
        }
        eprintln!("[{}] {storm} storm", system.name());
        let base_rss: Vec<u64> = (0..cluster.len()).map(|i| cluster.rss_bytes(i).unwrap_or(0)).collect();
        let term_before = cluster.term().await;
        let stop_rss = Arc::new(AtomicBool::new(false));
        let rss = sample_rss(&cluster, stop_rss.clone());
        let tally = Arc::new(Tally::default());
        let from = Instant::now();
        let one_each = storm == "scan" || storm == "stream";
        let clients = if one_each { SCANNERS } else { LOOPS };
        let tasks: Vec<_> = (0..clients)
            .map(|n| {
                let (client, tally) = (readers[n % readers.len()].clone(), tally.clone());
                tokio::spawn(async move {
                    let until = from + if one_each { SCAN_DEADLINE } else { PHASE };
                    if storm == "scan" {
                        tally.record(paginated_scan(&client, count, until).await);
                        return;
                    }
                    if storm == "stream" {
                        tally.record(streamed_scan(&client, count, until).await);
                        return;
                    }
                    while Instant::now() < until {
                        let started = Instant::now();
                        let result = client.range(prefix_request(storm == "count")).await;
                        tally.record(result.context(storm).and_then(|r| {
                            let n = if storm == "count" { r.count as u64 } else { r.kvs.len() as u64 };
                            anyhow::ensure!(n >= count, "{storm} saw {n} keys, not {count}");
                            Ok(started.elapsed())
                        }));
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        let to = Instant::now();
        stop_rss.store(true, Ordering::Relaxed);
        let peaks = rss.await.unwrap_or_default();
        let term_after = cluster.term().await;
        let growth = peaks.iter().zip(&base_rss).map(|(p, b)| p.saturating_sub(*b)).max().unwrap_or(0);
        let mut took = std::mem::take(&mut *tally.took.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        report.figure(&format!("{storm}_master_changes"), term_after.saturating_sub(term_before) as f64);
        report.figure(&format!("{storm}_reads_done"), tally.done.load(Ordering::Relaxed) as f64);
        report.figure(&format!("{storm}_reads_failed"), tally.failed.load(Ordering::Relaxed) as f64);
        report.figure(&format!("{storm}_p50_ms"), quantile_ms(&mut took, 0.5));
        report.figure(&format!("{storm}_max_ms"), quantile_ms(&mut took, 1.0));
        report.figure(&format!("{storm}_peak_rss_growth_bytes"), growth as f64);
        if one_each {
            report.figure(&format!("{storm}_peak_rss_growth_per_client_bytes"), growth as f64 / clients as f64);
        }
        if let Some(error) = tally.first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            eprintln!("[{}] {storm}: first failure: {error}", system.name());
        }
        windows.push((storm, from, to));
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let (samples, put_failed) = writer.stop().await;
    let (quiet_p99, quiet_rate) = window(&samples, quiet_from, quiet_to);
    report.figure("quiet_put_p99_ms", quiet_p99);
    report.figure("quiet_puts_per_s", quiet_rate);
    for (storm, from, to) in windows {
        let (p99, rate) = window(&samples, from, to);
        report.figure(&format!("{storm}_put_p99_ms"), p99);
        report.figure(&format!("{storm}_puts_per_s"), rate);
    }
    report.figure("puts_failed", put_failed as f64);
    Ok(report)
}
