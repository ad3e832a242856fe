//! Watch benchmark: leasekv against a real etcd, three nodes each on 127.0.0.1, in the same
//! run, through etcd's gRPC API only (the same generator drives both).
//!
//! ```text
//! cargo bench --bench watch            # etcd from PATH (Debian: etcd-server) or ETCD_BIN
//! ```
//! Workloads (the issue's targets in brackets):
//! - **fan-out**: one writer puts at a fixed 1,000 puts/s to 100 keys through node 1; 1,000
//!   watchers on 10 streams, then 10,000 on 100 streams, on nodes 2 and 3, each watching one
//!   of the keys (so every put reaches watchers/100 of them). Delivered events/s and
//!   put-to-event latency p50/p99 (the value carries the send time) [p99 ≤ etcd's,
//!   events/s ≥ 2× etcd]. At a fixed rate both systems deliver everything, so a third run
//!   puts as fast as 64 writes in flight allow; and a capacity run puts 200/s to one key that
//!   all 10,000 watchers watch (2 M events/s offered), so that the watch path, not the writer,
//!   is the limit.
//! - **memory per watcher**: RSS growth of node 2 after 100,000 watchers (on keys never
//!   written) on 100 streams, divided by the watchers [≤ 350 B].
//! - **put throughput with idle watchers**: 64 clients putting, without and with 1,000 idle
//!   watchers [within 10%].
//! - **memory per key and per history entry**: RSS growth of node 2 after 100,000 puts of
//!   new keys, then after overwriting each once (the docs' bytes per live key and per
//!   history entry, measured).
//! - **catch-up**: after 100,000 puts, a watcher starting 100,000 revisions back on another
//!   node receives all of them; time and events/s.
//!
//! The history a catch-up reads must be retained: every leasekv node gets
//! [`LEASEKV_RETENTION`] (more TOML with `BENCH_LEASEKV_CONFIG`). `BENCH_TARGETS`,
//! `BENCH_WORKLOADS` and `BENCH_SECONDS` narrow and lengthen runs as in the cluster bench.
//! Prints progress, a table, and writes `target/leasekv-bench-watch.json`.

mod common;

use common::{cpu_seconds, median, rss_bytes, run_length, selected, Cluster, Target};
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::watch_client::WatchClient;
use leasekv::client::proto::etcdserverpb::watch_request::RequestUnion;
use leasekv::client::proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchRequest, WatchResponse};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// Keeps enough history on every leasekv node for the catch-up workload.
const LEASEKV_RETENTION: &str = "[compaction]\nmode = \"revision\"\nretention = 300000\n";
/// Puts per second of the fan-out writer.
const WRITE_RATE: u64 = 1000;
/// A rate the writer cannot reach: it puts as fast as 64 in flight allow, which measures
/// how many events/s the watch path can deliver.
const UNTHROTTLED: u64 = 1_000_000;
/// Puts per second of the capacity run: each reaches every watcher, 10,000 of them.
const CAPACITY_RATE: u64 = 200;
/// Keys the fan-out writer cycles through.
const KEYS: usize = 100;
/// Revisions a catching-up watcher starts behind.
const CATCH_UP: i64 = 100_000;
const REPEATS: usize = 3;
/// Keys written by the memory-per-key workload.
const MEMORY_KEYS: u64 = 100_000;

async fn channel(endpoint: &str) -> Channel {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Channel::from_shared(format!("http://{endpoint}")).expect("endpoint uri").connect().await {
            Ok(channel) => return channel,
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {endpoint}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// One watch stream with its watchers created.
struct Stream {
    /// Kept so the stream stays open.
    _requests: mpsc::Sender<WatchRequest>,
    responses: tonic::Streaming<WatchResponse>,
}

/// Opens a stream on `channel` with one watcher per key (from `start_revision`, 0 = now),
/// and waits until every watcher is created.
async fn open_stream(channel: Channel, keys: Vec<Vec<u8>>, start_revision: i64, range_end: Vec<u8>) -> Stream {
    let (tx, rx) = mpsc::channel(keys.len().max(1));
    let mut client = WatchClient::new(channel).max_decoding_message_size(64 << 20);
    let created_wanted = keys.len();
    let sender = tx.clone();
    tokio::spawn(async move {
        for key in keys {
            let create = WatchCreateRequest { key, range_end: range_end.clone(), start_revision, ..Default::default() };
            if sender.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await.is_err() {
                return;
            }
        }
    });
    let mut responses =
        client.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("watch stream opens").into_inner();
    let mut created = 0;
    while created < created_wanted {
        match tokio::time::timeout(Duration::from_secs(60), responses.message()).await {
            Ok(Ok(Some(r))) if r.created => created += 1,
            Ok(Ok(Some(_))) => {}
            other => panic!("watch stream failed while creating watchers: {other:?}"),
        }
    }
    Stream { _requests: tx, responses }
}

/// Puts `value_of()` to keys cycling through `keys` at `rate` puts/s for `length`, with up
/// to 64 in flight; returns how many succeeded.
async fn write_at_rate(channel: Channel, keys: usize, prefix: &str, rate: u64, length: Duration) -> u64 {
    let done = Arc::new(AtomicU64::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + length;
    let mut i = 0usize;
    while Instant::now() < end {
        tick.tick().await;
        let Ok(permit) = permits.clone().acquire_owned().await else { break };
        let mut kv = KvClient::new(channel.clone());
        let key = format!("{prefix}{}", i % keys).into_bytes();
        let done = done.clone();
        i += 1;
        tokio::spawn(async move {
            let value = now_micros().to_string().into_bytes();
            if kv.put(PutRequest { key, value, ..Default::default() }).await.is_ok() {
                done.fetch_add(1, Ordering::Relaxed);
            }
            drop(permit);
        });
    }
    let _ = permits.acquire_many(64).await;
    done.load(Ordering::Relaxed)
}

struct FanOut {
    events_per_sec: f64,
    /// Events delivered per CPU-second spent by the two watch-serving nodes during the run:
    /// what the watch path costs, whatever limits the writer on this shared machine.
    events_per_cpu_sec: f64,
    expected_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn fan_out(cluster: &Cluster, watchers: usize, streams: usize, rate: u64, keys: usize) -> FanOut {
    let writer = channel(&cluster.endpoint(0)).await;
    let watch_channels = [channel(&cluster.endpoint(1)).await, channel(&cluster.endpoint(2)).await];
    let per_stream = watchers / streams;
    let prefix = format!("/fan/{}/", now_micros());
    let mut opened = Vec::new();
    for s in 0..streams {
        let keys: Vec<Vec<u8>> =
            (0..per_stream).map(|j| format!("{prefix}{}", (s * per_stream + j) % keys).into_bytes()).collect();
        opened.push(open_stream(watch_channels[s % 2].clone(), keys, 0, Vec::new()));
    }
    let opened = futures_join_all(opened).await;
    let length = run_length();
    let stop_at = Instant::now() + length + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for mut stream in opened {
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u64> = Vec::new();
            loop {
                let next =
                    tokio::time::timeout(stop_at.saturating_duration_since(Instant::now()), stream.responses.message())
                        .await;
                let response = match next {
                    Ok(Ok(Some(response))) => response,
                    Err(_) => break,
                    other => {
                        eprintln!("a watch stream ended early: {other:?}");
                        break;
                    }
                };
                let now = now_micros();
                for event in response.events {
                    let sent: u64 =
                        event.kv.and_then(|kv| String::from_utf8(kv.value).ok()?.parse().ok()).unwrap_or(now);
                    latencies.push(now.saturating_sub(sent));
                }
            }
            latencies
        }));
    }
    let serving_cpu = || [1, 2].iter().filter_map(|&i| cluster.pid(i).and_then(cpu_seconds)).sum::<f64>();
    let cpu_before = serving_cpu();
    let puts = write_at_rate(writer, keys, &prefix, rate, length).await;
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let cpu_used = serving_cpu() - cpu_before;
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies.get(((latencies.len() as f64 - 1.0) * p) as usize).map_or(f64::NAN, |&us| us as f64 / 1000.0)
    };
    FanOut {
        events_per_sec: latencies.len() as f64 / length.as_secs_f64(),
        events_per_cpu_sec: if cpu_used > 0.0 { latencies.len() as f64 / cpu_used } else { f64::NAN },
        expected_per_sec: (puts as f64 * (watchers as f64 / keys as f64)) / length.as_secs_f64(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
    }
}

async fn futures_join_all<T: Send + 'static>(
    futures: Vec<impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// RSS growth of node 2 per watcher after opening `watchers` idle watchers on 100 streams.
async fn memory_per_watcher(cluster: &Cluster, watchers: usize) -> Option<f64> {
    let pid = cluster.pid(1)?;
    let ch = channel(&cluster.endpoint(1)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_bytes(pid)?;
    let streams = 100;
    let prefix = format!("/mem/{}/", now_micros());
    let mut opening = Vec::new();
    for s in 0..streams {
        let keys: Vec<Vec<u8>> = (0..watchers / streams).map(|j| format!("{prefix}{s}/{j}").into_bytes()).collect();
        opening.push(open_stream(ch.clone(), keys, 0, Vec::new()));
    }
    let streams = futures_join_all(opening).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_bytes(pid)?;
    drop(streams);
    Some(after.saturating_sub(before) as f64 / watchers as f64)
}

/// Resident memory of node 2 per key and per history entry: the growth after
/// [`MEMORY_KEYS`] puts of new keys (each a live key and its create event), then after as
/// many overwrites of them (each one more history entry, holding the previous value too).
/// Keys are 26 bytes, values 64. Returns (bytes per new key, bytes per overwrite).
async fn memory_per_key(cluster: &Cluster) -> Option<(f64, f64)> {
    let pid = cluster.pid(1)?;
    let writer = channel(&cluster.endpoint(0)).await;
    let prefix = format!("/mk/{}/", now_micros());
    let settle = Duration::from_secs(2);
    tokio::time::sleep(settle).await;
    let before = rss_bytes(pid)?;
    write_count(writer.clone(), &prefix, MEMORY_KEYS, MEMORY_KEYS).await;
    tokio::time::sleep(settle).await;
    let created = rss_bytes(pid)?;
    write_count(writer, &prefix, MEMORY_KEYS, MEMORY_KEYS).await;
    tokio::time::sleep(settle).await;
    let overwritten = rss_bytes(pid)?;
    let per = |from: u64, to: u64| to.saturating_sub(from) as f64 / MEMORY_KEYS as f64;
    Some((per(before, created), per(created, overwritten)))
}

/// Puts/s of 64 clients over `run_length`, spread over the three nodes.
async fn put_throughput(cluster: &Cluster) -> f64 {
    let channels =
        [channel(&cluster.endpoint(0)).await, channel(&cluster.endpoint(1)).await, channel(&cluster.endpoint(2)).await];
    let length = run_length();
    let end = Instant::now() + length;
    let mut tasks = Vec::new();
    for c in 0..64usize {
        let mut kv = KvClient::new(channels[c % 3].clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < end {
                let put =
                    PutRequest { key: format!("/tp/{c}").into_bytes(), value: vec![b'v'; 256], ..Default::default() };
                if kv.put(put).await.is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total as f64 / length.as_secs_f64()
}

/// Puts `count` times under `prefix` with 64 clients, cycling through `distinct` keys, a
/// 64-byte value each; returns the revision of the last one (the store revision after them
/// all, since only this bench writes).
async fn write_count(channel: Channel, prefix: &str, count: u64, distinct: u64) -> i64 {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let mut kv = KvClient::new(channel.clone());
        let next = next.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut highest = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return highest;
                }
                let put = PutRequest {
                    key: format!("{prefix}{:06}", i % distinct).into_bytes(),
                    value: vec![b'c'; 64],
                    ..Default::default()
                };
                for _ in 0..10 {
                    if let Ok(r) = kv.put(put.clone()).await {
                        highest = highest.max(r.into_inner().header.map_or(0, |h| h.revision));
                        break;
                    }
                }
            }
        }));
    }
    let mut head = 0;
    for t in tasks {
        head = head.max(t.await.unwrap_or(0));
    }
    head
}

/// Writes [`CATCH_UP`] revisions, then times a watcher on node 3 that starts that far back
/// until it has received them all. Returns (seconds, events/s), or `None` if the watch was
/// cancelled or fell short.
async fn catch_up(cluster: &Cluster) -> Option<(f64, f64)> {
    let prefix = format!("/cu/{}/", now_micros());
    let head = write_count(channel(&cluster.endpoint(0)).await, &prefix, CATCH_UP as u64, 1000).await;
    let start = head - CATCH_UP + 1;
    let mut range_end = prefix.clone().into_bytes();
    if let Some(last) = range_end.last_mut() {
        *last += 1;
    }
    let began = Instant::now();
    let mut stream =
        open_stream(channel(&cluster.endpoint(2)).await, vec![prefix.into_bytes()], start, range_end).await;
    let mut received = 0u64;
    loop {
        let response = tokio::time::timeout(Duration::from_secs(60), stream.responses.message()).await.ok()?.ok()??;
        if response.canceled {
            eprintln!("catch-up watch cancelled (compact revision {})", response.compact_revision);
            return None;
        }
        received += response.events.len() as u64;
        if response.events.last().and_then(|e| e.kv.as_ref()).is_some_and(|kv| kv.mod_revision >= head) {
            break;
        }
    }
    let seconds = began.elapsed().as_secs_f64();
    (received >= CATCH_UP as u64).then_some((seconds, received as f64 / seconds))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let targets = [Target::LeaseKv("paxoslease"), Target::Etcd];
    let extra = std::env::var("BENCH_LEASEKV_CONFIG").unwrap_or_default();
    std::env::set_var("BENCH_LEASEKV_CONFIG", format!("{}\\n{extra}", LEASEKV_RETENTION.replace('\n', "\\n")));
    let mut results: BTreeMap<(String, String), serde_json::Value> = BTreeMap::new();
    let clusters = common::start_selected(&runtime, &targets);
    runtime.block_on(async {
        // First, while no compaction has run: the retained history must grow with the writes.
        let label = "memory per key and per history entry, 100,000 keys";
        if selected("BENCH_WORKLOADS", label) {
            for cluster in &clusters {
                let name = cluster.target.name();
                eprintln!("[{name}] {label} …");
                let figures = memory_per_key(cluster).await;
                eprintln!("[{name}] {label}: {figures:?} (bytes per new key, per overwrite)");
                let (key, entry) = figures.map_or((None, None), |(k, e)| (Some(k), Some(e)));
                results.insert(
                    (label.to_string(), name),
                    serde_json::json!({"bytes_per_new_key": key, "bytes_per_overwrite": entry}),
                );
            }
        }
        // The last run offers more events than either system delivers (every put reaches all
        // 10,000 watchers), so it measures the watch path's capacity rather than the writer's.
        for (watchers, streams, rate, keys) in [
            (1000usize, 10usize, WRITE_RATE, KEYS),
            (10_000, 100, WRITE_RATE, KEYS),
            (10_000, 100, UNTHROTTLED, KEYS),
            (10_000, 100, CAPACITY_RATE, 1),
        ] {
            let pace = if rate == UNTHROTTLED { "writer unthrottled".to_string() } else { format!("{rate} puts/s") };
            let label = if keys == 1 {
                format!("fan-out capacity, {watchers} watchers on {streams} streams on one key, {pace}")
            } else {
                format!("fan-out, {watchers} watchers on {streams} streams, {pace}")
            };
            if !selected("BENCH_WORKLOADS", &label) {
                continue;
            }
            eprintln!("{label} …");
            let mut runs: Vec<Vec<FanOut>> = clusters.iter().map(|_| Vec::new()).collect();
            for _ in 0..REPEATS {
                for (cluster, runs) in clusters.iter().zip(&mut runs) {
                    runs.push(fan_out(cluster, watchers, streams, rate, keys).await);
                }
            }
            for (cluster, runs) in clusters.iter().zip(&runs) {
                let name = cluster.target.name();
                let events = median(runs.iter().map(|f| f.events_per_sec).collect());
                let expected = median(runs.iter().map(|f| f.expected_per_sec).collect());
                let p50 = median(runs.iter().map(|f| f.p50_ms).collect());
                let p99 = median(runs.iter().map(|f| f.p99_ms).collect());
                let per_cpu = median(runs.iter().map(|f| f.events_per_cpu_sec).collect());
                eprintln!(
                    "[{name}] {label}: {events:.0} events/s (of {expected:.0} sent), p50 {p50:.2} ms, p99 {p99:.2} ms, \
                     {per_cpu:.0} events per CPU-second of the serving nodes"
                );
                results.insert(
                    (label.clone(), name),
                    serde_json::json!({"events_per_sec": events, "expected_per_sec": expected, "p50_ms": p50,
                        "p99_ms": p99, "events_per_serving_cpu_sec": per_cpu}),
                );
            }
        }
        let label = "put throughput, 64 clients, without and with 1,000 idle watchers";
        if selected("BENCH_WORKLOADS", label) {
            eprintln!("{label} …");
            for cluster in &clusters {
                let mut without = Vec::new();
                let mut with = Vec::new();
                for _ in 0..REPEATS {
                    without.push(put_throughput(cluster).await);
                }
                let ch = channel(&cluster.endpoint(1)).await;
                let prefix = format!("/idle/{}/", now_micros());
                let keys: Vec<Vec<u8>> = (0..1000).map(|j| format!("{prefix}{j}").into_bytes()).collect();
                let idle = open_stream(ch, keys, 0, Vec::new()).await;
                for _ in 0..REPEATS {
                    with.push(put_throughput(cluster).await);
                }
                drop(idle);
                let (a, b) = (median(without), median(with));
                let name = cluster.target.name();
                eprintln!("[{name}] {label}: {a:.0} → {b:.0} puts/s ({:+.1}%)", (b / a - 1.0) * 100.0);
                results.insert(
                    (label.to_string(), name),
                    serde_json::json!({"without_puts_per_sec": a, "with_puts_per_sec": b, "change_pct": (b / a - 1.0) * 100.0}),
                );
            }
        }
        let label = "catch-up, one watcher starting 100,000 revisions back";
        if selected("BENCH_WORKLOADS", label) {
            for cluster in &clusters {
                let name = cluster.target.name();
                eprintln!("[{name}] {label} …");
                let figures = catch_up(cluster).await;
                eprintln!("[{name}] {label}: {figures:?} (seconds, events/s)");
                let (seconds, rate) = figures.map_or((None, None), |(s, r)| (Some(s), Some(r)));
                results.insert((label.to_string(), name), serde_json::json!({"seconds": seconds, "events_per_sec": rate}));
            }
        }
        let label = "memory per watcher, 100,000 idle watchers on 100 streams";
        if selected("BENCH_WORKLOADS", label) {
            for cluster in &clusters {
                let name = cluster.target.name();
                eprintln!("[{name}] {label} …");
                let bytes = memory_per_watcher(cluster, 100_000).await;
                eprintln!("[{name}] {label}: {bytes:?} B");
                results.insert((label.to_string(), name), serde_json::json!({"bytes_per_watcher": bytes}));
            }
        }
    });
    drop(clusters);
    println!("| workload | target | figures |");
    println!("|---|---|---|");
    for ((label, name), v) in &results {
        println!("| {label} | {name} | {v} |");
    }
    common::write_json(&results, "leasekv-bench-watch.json");
}
