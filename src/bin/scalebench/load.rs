//! Load generators every workload shares: a bulk loader with progress, a timed background
//! writer whose latencies can be cut into windows, and a pool of keepalive streams.

use anyhow::{anyhow, Result};
use leasekv::client::proto::etcdserverpb::lease_client::LeaseClient;
use leasekv::client::proto::etcdserverpb::LeaseKeepAliveRequest;
use leasekv::client::Client;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Connections shared by a workload's client tasks, spread over `endpoints`, as etcd's client
/// libraries share a few connections among many callers.
pub async fn connections(endpoints: &[String], count: usize) -> Result<Vec<Client>> {
    let mut conns = Vec::new();
    for i in 0..count.max(1) {
        conns.push(Client::connect(std::slice::from_ref(&endpoints[i % endpoints.len()])).await?);
    }
    Ok(conns)
}

/// The `p`-quantile (0..=1) of `latencies` in milliseconds (sorts them), NaN when empty.
pub fn quantile_ms(latencies: &mut [Duration], p: f64) -> f64 {
    if latencies.is_empty() {
        return f64::NAN;
    }
    latencies.sort_unstable();
    let index = ((latencies.len() as f64 * p) as usize).min(latencies.len() - 1);
    latencies[index].as_secs_f64() * 1e3
}

/// What a bulk load did.
pub struct Bulk {
    /// Operations that succeeded.
    pub done: u64,
    /// Operations that failed (after the client's own retries).
    pub failed: u64,
    /// Wall time of the whole load.
    pub elapsed: Duration,
}

impl Bulk {
    /// Successful operations per second.
    pub fn rate(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `op(client, i)` for every `i` in `0..total` with `concurrency` tasks over `conns`,
/// printing progress every 5 s under `label`. Fails if more than 1% of the operations fail,
/// naming the first failure: which error a system answers under load is part of the result.
pub async fn bulk<F, Fut>(conns: &[Client], concurrency: usize, total: u64, label: &str, op: F) -> Result<Bulk>
where
    F: Fn(Client, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency.max(1) {
        let (op, next, done, failed) = (op.clone(), next.clone(), done.clone(), failed.clone());
        let first_error = first_error.clone();
        let client = conns[t % conns.len()].clone();
        tasks.push(tokio::spawn(async move {
            loop {
                // Past 1% failures the load has failed (see below): stop now rather than
                // after the minutes the rest would take.
                if failed.load(Ordering::Relaxed) * 100 > total {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                match op(client.clone(), i).await {
                    Ok(()) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert_with(|| format!("{error:#}"));
                    }
                }
            }
        }));
    }
    let progress = {
        let (done, label) = (done.clone(), label.to_string());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let n = done.load(Ordering::Relaxed);
                let rate = n as f64 / started.elapsed().as_secs_f64();
                eprintln!("  {label}: {n} of {total} ({rate:.0}/s)");
            }
        })
    };
    for task in tasks {
        task.await?;
    }
    progress.abort();
    let bulk =
        Bulk { done: done.load(Ordering::Relaxed), failed: failed.load(Ordering::Relaxed), elapsed: started.elapsed() };
    let first_error = first_error.lock().unwrap_or_else(|e| e.into_inner()).take();
    let first = first_error.map(|e| format!("; the first: {e}")).unwrap_or_default();
    eprintln!(
        "  {label}: {} done in {:.1} s ({:.0}/s), {} failed{first}",
        bulk.done,
        bulk.elapsed.as_secs_f64(),
        bulk.rate(),
        bulk.failed
    );
    if bulk.failed * 100 > total {
        return Err(anyhow!("{label}: {} of {total} operations failed{first}", bulk.failed));
    }
    Ok(bulk)
}

/// One completed write of a [`Writer`]: when it completed and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the answer arrived.
    pub at: Instant,
    /// How long the put took.
    pub latency: Duration,
}

/// Puts from `clients` tasks until stopped, each to its own keys, recording every latency;
/// the measure of "the others keep serving" while something else happens.
pub struct Writer {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Vec<Sample>, u64)>>,
}

impl Writer {
    /// Starts the writer: `clients` tasks over `conns`, values of `value_bytes`.
    pub fn start(conns: &[Client], clients: usize, prefix: &str, value_bytes: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let value = Arc::new(vec![b'w'; value_bytes]);
        let tasks = (0..clients)
            .map(|c| {
                let (stop, value, client) = (stop.clone(), value.clone(), conns[c % conns.len()].clone());
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let (mut samples, mut failed, mut n) = (Vec::new(), 0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("{prefix}{c}/{}", n % 100);
                        n += 1;
                        let started = Instant::now();
                        match client.put(key, value.as_ref().clone(), 0, false).await {
                            Ok(_) => samples.push(Sample { at: Instant::now(), latency: started.elapsed() }),
                            Err(_) => failed += 1,
                        }
                    }
                    (samples, failed)
                })
            })
            .collect();
        Writer { stop, tasks }
    }

    /// Stops the writer and returns every sample in completion order, and the failures.
    pub async fn stop(self) -> (Vec<Sample>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (mut all, mut failed) = (Vec::new(), 0);
        for task in self.tasks {
            if let Ok((samples, f)) = task.await {
                all.extend(samples);
                failed += f;
            }
        }
        all.sort_by_key(|s| s.at);
        (all, failed)
    }
}

/// The p99 latency (ms) and throughput (ops/s) of the samples that completed in `from..to`.
pub fn window(samples: &[Sample], from: Instant, to: Instant) -> (f64, f64) {
    let mut latencies: Vec<Duration> =
        samples.iter().filter(|s| s.at >= from && s.at < to).map(|s| s.latency).collect();
    let seconds = to.saturating_duration_since(from).as_secs_f64().max(1e-9);
    let rate = latencies.len() as f64 / seconds;
    (quantile_ms(&mut latencies, 0.99), rate)
}

/// What a keepalive pool measured over one period of running.
#[derive(Debug, Default)]
pub struct KeepAliveFigures {
    /// Renewals answered with a TTL > 0.
    pub renewed: u64,
    /// Renewals answered with TTL 0 (the lease was gone).
    pub lost: u64,
    /// Every renewal's round trip.
    pub latencies: Vec<Duration>,
    /// When the last renewal of the run was sent (a lease's TTL counts from no earlier).
    pub last_sent: Option<Instant>,
}

/// Keepalive streams, each renewing its share of the leases pass after pass, with up to
/// `window` renewals in flight per stream (a stream is answered in order, one at a time, by
/// etcd and leasekv alike, so the pipeline keeps it busy without reordering).
pub struct KeepAlivePool {
    streams: Vec<(
        mpsc::Sender<LeaseKeepAliveRequest>,
        tonic::Streaming<leasekv::client::proto::etcdserverpb::LeaseKeepAliveResponse>,
    )>,
    shares: Vec<Vec<i64>>,
}

impl KeepAlivePool {
    /// Opens `streams` keepalive streams spread over `endpoints` (one HTTP/2 connection per
    /// endpoint at least, at most 8 streams per connection, as client libraries multiplex) and
    /// deals `leases` out among them.
    pub async fn open(endpoints: &[String], streams: usize, leases: &[i64]) -> Result<KeepAlivePool> {
        let connections = streams.div_ceil(8).max(endpoints.len());
        let mut channels = Vec::new();
        for i in 0..connections {
            let url = format!("http://{}", endpoints[i % endpoints.len()]);
            channels.push(tonic::transport::Endpoint::from_shared(url)?.tcp_nodelay(true).connect().await?);
        }
        let mut shares = vec![Vec::new(); streams];
        for (i, id) in leases.iter().enumerate() {
            shares[i % streams].push(*id);
        }
        let mut opened = Vec::new();
        for (s, share) in shares.iter().enumerate() {
            let (tx, rx) = mpsc::channel(4096);
            // etcd sends a stream's response headers with its first answer, so the call
            // only returns once a request has been sent: renew one lease to open it.
            let first = share.first().copied().unwrap_or_default();
            tx.send(LeaseKeepAliveRequest { id: first }).await?;
            let response = LeaseClient::new(channels[s % channels.len()].clone())
                .lease_keep_alive(ReceiverStream::new(rx))
                .await?;
            let mut responses = response.into_inner();
            responses.message().await?;
            opened.push((tx, responses));
        }
        Ok(KeepAlivePool { streams: opened, shares })
    }

    /// Renews every lease once per `period` (or back to back when `period` is zero) until
    /// `until`, `window` renewals in flight per stream. Returns the figures and the pool, to
    /// go on with.
    pub async fn run(
        self,
        period: Duration,
        until: Instant,
        window: usize,
    ) -> Result<(KeepAlivePool, KeepAliveFigures)> {
        let figures = Arc::new(Mutex::new(KeepAliveFigures::default()));
        let mut tasks = Vec::new();
        for ((tx, mut responses), share) in self.streams.into_iter().zip(self.shares) {
            let figures = figures.clone();
            tasks.push(tokio::spawn(async move {
                let mut sent: HashMap<i64, Instant> = HashMap::new();
                let (mut renewed, mut lost, mut latencies, mut last_sent) = (0u64, 0u64, Vec::new(), None);
                let mut failure = None;
                'passes: while Instant::now() < until {
                    let pass_started = Instant::now();
                    let mut next = 0;
                    while next < share.len() || !sent.is_empty() {
                        while next < share.len() && sent.len() < window && Instant::now() < until {
                            // Paced: lease k of the share is due k/len of the way into the
                            // period, as independent clients' renewals spread out.
                            if !period.is_zero() {
                                let due = pass_started + period.mul_f64(next as f64 / share.len() as f64);
                                if due > Instant::now() {
                                    if !sent.is_empty() {
                                        break;
                                    }
                                    tokio::time::sleep_until(due.into()).await;
                                }
                            }
                            let id = share[next];
                            next += 1;
                            let now = Instant::now();
                            if tx.send(LeaseKeepAliveRequest { id }).await.is_err() {
                                failure = Some("the keepalive stream closed".to_string());
                                break 'passes;
                            }
                            sent.insert(id, now);
                            last_sent = Some(now);
                        }
                        if sent.is_empty() {
                            break;
                        }
                        // An answer that never comes must not hang the run: give up on
                        // the stream after 30 s of silence.
                        let next_answer = tokio::time::timeout(Duration::from_secs(30), responses.message()).await;
                        let Ok(next_answer) = next_answer else {
                            failure = Some(format!("no keepalive answer for 30 s with {} in flight", sent.len()));
                            break 'passes;
                        };
                        match next_answer {
                            Ok(Some(answer)) => {
                                if let Some(at) = sent.remove(&answer.id) {
                                    latencies.push(at.elapsed());
                                }
                                if answer.ttl > 0 {
                                    renewed += 1;
                                } else {
                                    lost += 1;
                                }
                            }
                            Ok(None) => {
                                failure = Some("the keepalive stream ended".to_string());
                                break 'passes;
                            }
                            Err(status) => {
                                failure = Some(format!("keepalive failed: {status}"));
                                break 'passes;
                            }
                        }
                    }
                    let rest = period.saturating_sub(pass_started.elapsed());
                    let wake = (Instant::now() + rest).min(until);
                    tokio::time::sleep_until(wake.into()).await;
                }
                let mut f = figures.lock().unwrap_or_else(|e| e.into_inner());
                f.renewed += renewed;
                f.lost += lost;
                f.latencies.extend(latencies);
                f.last_sent = f.last_sent.max(last_sent);
                drop(f);
                match failure {
                    Some(why) => Err(anyhow!(why)),
                    None => Ok(((tx, responses), share)),
                }
            }));
        }
        let mut streams = Vec::new();
        let mut shares = Vec::new();
        for task in tasks {
            let (stream, share) = task.await??;
            streams.push(stream);
            shares.push(share);
        }
        let figures = Arc::try_unwrap(figures).map_err(|_| anyhow!("keepalive figures still shared"))?;
        let figures = figures.into_inner().unwrap_or_else(|e| e.into_inner());
        Ok((KeepAlivePool { streams, shares }, figures))
    }
}
