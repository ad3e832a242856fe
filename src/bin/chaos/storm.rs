//! The read-storm fault: every node at once answers paginated scans (client-go's LIST),
//! counts and whole-range reads of a few thousand 1 KiB keys, while the register workload,
//! the lease clients and the watchers go on. Reads must never cost the master its lease:
//! a storm injected alone ends with the master it began with, in the same term, or the run
//! has an anomaly. Every answer the storm gets is checked too (the keys never change after
//! they are loaded): a wrong count, a missing key or a damaged value is an anomaly.

use crate::cluster::Cluster;
use crate::workload::channel;
use anyhow::{bail, Result};
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use leasekv::client::proto::etcdserverpb::{PutRequest, RangeRequest, StatusRequest};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Keys the storm reads, loaded once before the faults begin.
pub const KEYS: usize = 3000;
const VALUE_BYTES: usize = 1024;
const PREFIX: &[u8] = b"/storm/";
/// A paginated scan's page, as client-go's.
const PAGE: i64 = 500;
/// Readers of each kind per node.
const PER_KIND: usize = 2;

fn key(i: usize) -> Vec<u8> {
    format!("/storm/k{i:05}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("{i:05}").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

/// Puts the storm's keys through `master`, 32 at a time, each retried for up to 30 s.
pub async fn load(master: usize) -> Result<()> {
    let kv = KvClient::new(channel(master));
    let mut puts = JoinSet::new();
    for i in 0..KEYS {
        let mut kv = kv.clone();
        puts.spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let put = PutRequest { key: key(i), value: value(i), ..Default::default() };
                match kv.put(put).await {
                    Ok(_) => return Ok(()),
                    Err(status) if Instant::now() < deadline => {
                        let _ = status;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(status) => bail!("loading the read storm's key {i}: {status}"),
                }
            }
        });
        if puts.len() >= 32 {
            if let Some(done) = puts.join_next().await {
                done??;
            }
        }
    }
    while let Some(done) = puts.join_next().await {
        done??;
    }
    Ok(())
}

/// What the storms of a run found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Answers checked.
    pub reads: usize,
    /// Reads that failed (an error is allowed under the other faults; a wrong answer is not).
    pub failed: usize,
    /// Wrong answers and master changes.
    pub anomalies: Vec<String>,
}

/// Shared by a run's storms.
pub type Log = Arc<Mutex<Findings>>;

fn note(log: &Log, f: impl FnOnce(&mut Findings)) {
    f(&mut log.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
}

/// One storm in force: its readers, and the master and term it began under.
pub struct Storm {
    readers: JoinSet<()>,
    began_under: Option<(usize, u64)>,
}

/// The master and its term (`Status.raft_term`), asked of the master itself.
async fn master_term(cluster: &Cluster) -> Option<(usize, u64)> {
    let master = cluster.master().await?;
    let channel = tonic::transport::Endpoint::from_shared(Cluster::endpoint(master)).ok()?.connect().await.ok()?;
    let status = MaintenanceClient::new(channel).status(StatusRequest {}).await.ok()?.into_inner();
    Some((master, status.raft_term))
}

/// Starts a storm against every node of `cluster`, until `until`.
pub async fn start(cluster: &Cluster, until: Instant, log: &Log) -> Storm {
    // The master it begins under, once the last fault's aftermath has settled.
    let began_under = match cluster.wait_for_master(Duration::from_secs(10)).await {
        Some(_) => master_term(cluster).await,
        None => None,
    };
    let mut readers = JoinSet::new();
    for node in 0..cluster.size() {
        for kind in [Kind::Scan, Kind::Count, Kind::Whole] {
            for _ in 0..PER_KIND {
                readers.spawn(read_loop(node, kind, until, log.clone()));
            }
        }
    }
    Storm { readers, began_under }
}

impl Storm {
    /// Waits for the readers, then (when the storm ran alone) checks that the master it
    /// began under still is, in the same term.
    pub async fn end(mut self, cluster: &Cluster, alone: bool, log: &Log) {
        let _ =
            tokio::time::timeout(Duration::from_secs(30), async { while self.readers.join_next().await.is_some() {} })
                .await;
        self.readers.abort_all();
        let (Some(before), true) = (self.began_under, alone) else { return };
        let after = master_term(cluster).await;
        if after != Some(before) {
            note(log, |f| {
                f.anomalies.push(format!(
                    "the read storm alone cost a master change: (node, term) {before:?} before, {after:?} after"
                ))
            });
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A paginated scan at the revision of its first page.
    Scan,
    /// `count_only` over the prefix.
    Count,
    /// The whole prefix in one answer.
    Whole,
}

async fn read_loop(node: usize, kind: Kind, until: Instant, log: Log) {
    let mut kv = KvClient::new(channel(node)).max_decoding_message_size(64 << 20);
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now()) + Duration::from_secs(2);
        match tokio::time::timeout(left, read_once(&mut kv, kind)).await {
            Ok(Ok(None)) => note(&log, |f| f.reads += 1),
            Ok(Ok(Some(wrong))) => note(&log, |f| {
                f.reads += 1;
                f.anomalies.push(format!("read storm at node {node}, {kind:?}: {wrong}"));
            }),
            Ok(Err(_)) | Err(_) => {
                note(&log, |f| f.failed += 1);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One read of `kind`; `Some(what)` when the answer is wrong.
async fn read_once(kv: &mut KvClient<tonic::transport::Channel>, kind: Kind) -> Result<Option<String>, tonic::Status> {
    let whole = RangeRequest {
        key: PREFIX.to_vec(),
        range_end: leasekv_client::prefix_range_end(PREFIX),
        ..Default::default()
    };
    match kind {
        Kind::Count => {
            let r = kv.range(RangeRequest { count_only: true, ..whole }).await?.into_inner();
            Ok((r.count != KEYS as i64 || !r.kvs.is_empty()).then(|| format!("count {} of {KEYS}", r.count)))
        }
        Kind::Whole => {
            let r = kv.range(whole).await?.into_inner();
            Ok(wrong_keys(0, r.kvs.iter().map(|kv| (&kv.key, &kv.value))).or_else(|| {
                (r.kvs.len() != KEYS || r.count != KEYS as i64 || r.more)
                    .then(|| format!("{} keys, count {}, more {}", r.kvs.len(), r.count, r.more))
            }))
        }
        Kind::Scan => {
            let (mut from, mut revision, mut seen) = (PREFIX.to_vec(), 0, 0);
            loop {
                let page = RangeRequest { key: from.clone(), limit: PAGE, revision, ..whole.clone() };
                let r = kv.range(page).await?.into_inner();
                if revision == 0 {
                    revision = r.header.as_ref().map_or(0, |h| h.revision);
                }
                if let Some(wrong) = wrong_keys(seen, r.kvs.iter().map(|kv| (&kv.key, &kv.value))) {
                    return Ok(Some(format!("page from key {seen}: {wrong}")));
                }
                if r.count != (KEYS - seen) as i64 {
                    return Ok(Some(format!("page from key {seen}: count {} of {}", r.count, KEYS - seen)));
                }
                seen += r.kvs.len();
                match (r.more, r.kvs.last()) {
                    (true, Some(last)) => {
                        from = last.key.clone();
                        from.push(0);
                    }
                    _ => break,
                }
            }
            Ok((seen != KEYS).then(|| format!("the scan saw {seen} keys of {KEYS}")))
        }
    }
}

/// The first key-value of `kvs` that is not key `first + i` with its value.
fn wrong_keys<'a>(first: usize, kvs: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Option<String> {
    for (i, (k, v)) in kvs.enumerate() {
        let n = first + i;
        if *k != key(n) || *v != value(n) {
            return Some(format!("key {n}: got {:?}", String::from_utf8_lossy(k)));
        }
    }
    None
}
