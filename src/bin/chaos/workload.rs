//! The clients: closed-loop register clients (get, put, delete, compare-and-swap on a few
//! keys, and two-key transactions; unique values) and open-loop readers that keep sending linearizable reads to
//! their node even while it is paused or cut off, through etcd's KV API.
//!
//! Every operation is recorded with its call and return time on the harness's one
//! monotonic clock. A write without a definite answer (timeout, transport error, any
//! error status) is recorded as unknown: it may have taken effect at any time after its
//! call, or never. A read without an answer constrains nothing and is not recorded.

use crate::cluster::Cluster;
use crate::snapshots::SnapshotRead;
use crate::txns::{TxnOutcome, TxnRecord};
use leasekv::client::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use leasekv::client::proto::etcdserverpb::kv_client::KvClient;
use leasekv::client::proto::etcdserverpb::request_op::Request as Op;
use leasekv::client::proto::etcdserverpb::response_op::Response as OpResponse;
use leasekv::client::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, TxnResponse,
};
use leasekv::kvstore::sim::linearizability::{KvOp, KvOutcome, Operation};
use leasekv::lease::rng::SplitMix64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::Channel;

/// How long a client waits for an answer before the outcome is unknown. Longer than the
/// longest pause, so that a paused node's late answers are seen and checked.
const OP_TIMEOUT: Duration = Duration::from_secs(8);
/// Pause between a closed-loop client's operations.
const THINK: Duration = Duration::from_millis(15);
/// How often an open-loop reader sends.
const READ_EVERY: Duration = Duration::from_millis(60);

/// What the clients recorded.
#[derive(Default)]
pub struct Recorded {
    /// Every operation, in completion order.
    pub ops: Vec<Operation>,
    /// How often each kind of error was answered (gRPC code and message), for the report.
    pub errors: std::collections::BTreeMap<String, usize>,
    /// Every two-key transaction (also in `ops`, projected per key), for the atomicity check.
    pub txns: Vec<TxnRecord>,
    /// Every answered serializable read, for the snapshot check.
    pub snapshot_reads: Vec<SnapshotRead>,
}

/// The shared recorder and the clock every time is read from.
#[derive(Clone)]
pub struct Recorder {
    origin: Instant,
    recorded: Arc<Mutex<Recorded>>,
}

impl Recorder {
    /// A recorder whose times count from now.
    pub fn new() -> Self {
        Recorder { origin: Instant::now(), recorded: Arc::default() }
    }

    /// Nanoseconds since the run began.
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Records one operation.
    pub fn record(&self, op: Operation) {
        self.recorded.lock().unwrap_or_else(|e| e.into_inner()).ops.push(op);
    }

    /// Counts one error answer.
    fn error(&self, status: &tonic::Status) {
        let mut message = status.message().to_string();
        message.truncate(120);
        let kind = format!("{:?}: {message}", status.code());
        *self.recorded.lock().unwrap_or_else(|e| e.into_inner()).errors.entry(kind).or_default() += 1;
    }

    /// The errors counted so far, most frequent first.
    pub fn errors(&self) -> Vec<(String, usize)> {
        let recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let mut errors: Vec<(String, usize)> = recorded.errors.iter().map(|(k, v)| (k.clone(), *v)).collect();
        errors.sort_by_key(|e| std::cmp::Reverse(e.1));
        errors
    }

    /// Everything recorded so far.
    pub fn take(&self) -> Vec<Operation> {
        std::mem::take(&mut self.recorded.lock().unwrap_or_else(|e| e.into_inner()).ops)
    }

    /// Every two-key transaction recorded so far.
    pub fn take_txns(&self) -> Vec<TxnRecord> {
        std::mem::take(&mut self.recorded.lock().unwrap_or_else(|e| e.into_inner()).txns)
    }

    /// Every serializable read recorded so far.
    pub fn take_snapshot_reads(&self) -> Vec<SnapshotRead> {
        std::mem::take(&mut self.recorded.lock().unwrap_or_else(|e| e.into_inner()).snapshot_reads)
    }

    /// Records a two-key transaction: its projection on each key for the per-key checker,
    /// and the whole for the atomicity check.
    fn record_txn(&self, txn: TxnRecord) {
        let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        recorded.ops.extend(txn.per_key());
        recorded.txns.push(txn);
    }
}

/// The key of register `k`.
pub fn key(k: usize) -> Vec<u8> {
    format!("/chaos/r{k:02}").into_bytes()
}

/// A channel to node `i` that connects lazily and reconnects by itself.
pub fn channel(i: usize) -> Channel {
    tonic::transport::Endpoint::from_shared(Cluster::endpoint(i))
        .expect("a valid endpoint")
        .connect_timeout(Duration::from_millis(500))
        .connect_lazy()
}

/// Runs one operation against `kv` and records it; returns whether it got an answer.
pub async fn perform(kv: &mut KvClient<Channel>, recorder: &Recorder, client: u32, op: KvOp) -> bool {
    let call = recorder.now();
    let outcome = match tokio::time::timeout(OP_TIMEOUT, execute(kv, &op)).await {
        Ok(Ok(outcome)) => Some(outcome),
        Ok(Err(status)) => {
            recorder.error(&status);
            if never_sent(&status) {
                // Nothing reached the node: the operation did not happen.
                return false;
            }
            None
        }
        Err(_) => None,
    };
    let ret = recorder.now();
    let answered = outcome.is_some();
    let outcome = match (outcome, &op) {
        (Some(outcome), _) => outcome,
        (None, KvOp::Get { .. }) => return false,
        (None, _) => KvOutcome::Unknown,
    };
    recorder.record(Operation { client, op, call, ret, outcome });
    answered
}

/// Whether the request surely never reached a server: the connection could not be made.
/// Every other error leaves the outcome unknown (a node may have proposed it before failing).
fn never_sent(status: &tonic::Status) -> bool {
    let message = status.message();
    status.code() == tonic::Code::Unavailable
        && (message.contains("tcp connect error") || message.contains("error trying to connect"))
}

/// An answer that is not one of the expected messages (a value that is not a number).
fn malformed(what: &str) -> tonic::Status {
    tonic::Status::internal(format!("chaos: malformed answer: {what}"))
}

/// A register's value as the workload writes it: the number in decimal.
fn value_bytes(v: u64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// The value a range answered: `None` for an absent key.
fn register_value(kvs: &[leasekv::client::proto::mvccpb::KeyValue]) -> Result<Option<u64>, tonic::Status> {
    match kvs.first() {
        Some(kv) => Ok(Some(
            std::str::from_utf8(&kv.value)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| malformed("a value that is not a number"))?,
        )),
        None => Ok(None),
    }
}

/// The comparison "`key` holds `expected`" (`None`: the key does not exist).
fn holds(key: &[u8], expected: Option<u64>) -> Compare {
    match expected {
        Some(v) => Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Value as i32,
            key: key.to_vec(),
            target_union: Some(TargetUnion::Value(value_bytes(v))),
            ..Default::default()
        },
        None => Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.to_vec(),
            target_union: Some(TargetUnion::CreateRevision(0)),
            ..Default::default()
        },
    }
}

fn put_op(key: &[u8], v: u64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest { key: key.to_vec(), value: value_bytes(v), ..Default::default() })),
    }
}

fn range_op(key: &[u8]) -> RequestOp {
    RequestOp { request: Some(Op::RequestRange(RangeRequest { key: key.to_vec(), ..Default::default() })) }
}

/// Runs a two-key transaction and records it: if both keys hold what `txn` expects, write
/// both new values; otherwise read both.
pub async fn perform_txn(kv: &mut KvClient<Channel>, recorder: &Recorder, mut txn: TxnRecord) -> TxnOutcome {
    let request = TxnRequest {
        compare: vec![holds(&txn.keys[0], txn.expected[0]), holds(&txn.keys[1], txn.expected[1])],
        success: vec![put_op(&txn.keys[0], txn.new[0]), put_op(&txn.keys[1], txn.new[1])],
        failure: vec![range_op(&txn.keys[0]), range_op(&txn.keys[1])],
    };
    txn.call = recorder.now();
    let outcome = match tokio::time::timeout(OP_TIMEOUT, kv.txn(request)).await {
        Ok(Ok(response)) => match txn_outcome(response.into_inner()) {
            Ok(outcome) => outcome,
            Err(status) => {
                recorder.error(&status);
                TxnOutcome::Unknown
            }
        },
        Ok(Err(status)) => {
            recorder.error(&status);
            if never_sent(&status) {
                // Nothing reached the node: the transaction did not happen, not recorded.
                return TxnOutcome::Unknown;
            }
            TxnOutcome::Unknown
        }
        Err(_) => TxnOutcome::Unknown,
    };
    txn.ret = recorder.now();
    txn.outcome = outcome;
    recorder.record_txn(txn);
    outcome
}

fn txn_outcome(response: TxnResponse) -> Result<TxnOutcome, tonic::Status> {
    if response.succeeded {
        return Ok(TxnOutcome::Succeeded);
    }
    let mut read = [None, None];
    if response.responses.len() != 2 {
        return Err(malformed("a failed Txn without its two range answers"));
    }
    for (slot, op) in read.iter_mut().zip(response.responses) {
        match op.response {
            Some(OpResponse::ResponseRange(range)) => *slot = register_value(&range.kvs)?,
            _ => return Err(malformed("a failed Txn's answer that is not a range")),
        }
    }
    Ok(TxnOutcome::Failed { read })
}

async fn execute(kv: &mut KvClient<Channel>, op: &KvOp) -> Result<KvOutcome, tonic::Status> {
    let value = value_bytes;
    match op {
        KvOp::Get { key } => {
            let response = kv.range(RangeRequest { key: key.clone(), ..Default::default() }).await?.into_inner();
            Ok(KvOutcome::Get(register_value(&response.kvs)?))
        }
        KvOp::Put { key, value: v } => {
            kv.put(PutRequest { key: key.clone(), value: value(*v), ..Default::default() }).await?;
            Ok(KvOutcome::Put)
        }
        KvOp::Delete { key } => {
            let response =
                kv.delete_range(DeleteRangeRequest { key: key.clone(), ..Default::default() }).await?.into_inner();
            Ok(KvOutcome::Delete { deleted: response.deleted > 0 })
        }
        KvOp::Cas { key, expected, new } => {
            let request =
                TxnRequest { compare: vec![holds(key, *expected)], success: vec![put_op(key, *new)], failure: vec![] };
            let response = kv.txn(request).await?.into_inner();
            Ok(KvOutcome::Cas { succeeded: response.succeeded })
        }
    }
}

/// A closed-loop register client on node `node` until `stop`.
pub async fn register_client(
    client: u32,
    node: usize,
    keys: usize,
    seed: u64,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut rng = SplitMix64::new(seed ^ (u64::from(client) << 32));
    let mut kv = KvClient::new(channel(node));
    let mut seq = 0u64;
    let mut last_seen: Vec<Option<u64>> = vec![None; keys];
    while !stop.load(Ordering::Relaxed) {
        let k = rng.range_u64(0, keys as u64 - 1) as usize;
        seq += 1;
        // Unique per write across the run: the client in the high bits.
        let unique = (u64::from(client) << 40) | seq;
        let roll = rng.next_f64();
        if roll >= 0.88 && keys >= 2 {
            // A two-key transaction on `k` and another key.
            let other = (k + 1 + rng.range_u64(0, keys as u64 - 2) as usize) % keys;
            seq += 1;
            let second = (u64::from(client) << 40) | seq;
            let txn = TxnRecord::new(client, [key(k), key(other)], [last_seen[k], last_seen[other]], [unique, second]);
            match perform_txn(&mut kv, &recorder, txn).await {
                TxnOutcome::Failed { read } => [last_seen[k], last_seen[other]] = read,
                _ => [last_seen[k], last_seen[other]] = [Some(unique), Some(second)],
            }
            tokio::time::sleep(THINK).await;
            continue;
        }
        let op = if roll < 0.4 {
            KvOp::Get { key: key(k) }
        } else if roll < 0.65 {
            KvOp::Put { key: key(k), value: unique }
        } else if roll < 0.72 {
            KvOp::Delete { key: key(k) }
        } else {
            KvOp::Cas { key: key(k), expected: last_seen[k], new: unique }
        };
        perform(&mut kv, &recorder, client, op.clone()).await;
        match op {
            KvOp::Put { value, .. } | KvOp::Cas { new: value, .. } => last_seen[k] = Some(value),
            KvOp::Delete { .. } => last_seen[k] = None,
            KvOp::Get { .. } => {}
        }
        tokio::time::sleep(THINK).await;
    }
}

/// A serializable read of `key` on node `node`, recorded when answered.
async fn snapshot_read(kv: &mut KvClient<Channel>, recorder: &Recorder, node: usize, key: Vec<u8>) {
    let request = RangeRequest { key: key.clone(), serializable: true, ..Default::default() };
    match tokio::time::timeout(OP_TIMEOUT, kv.range(request)).await {
        Ok(Ok(response)) => {
            let response = response.into_inner();
            let Some(revision) = response.header.map(|h| h.revision) else {
                recorder.error(&malformed("a range answer without a header"));
                return;
            };
            let value = response.kvs.into_iter().next().map(|kv| kv.value);
            let read = SnapshotRead { node, key, revision, value };
            recorder.recorded.lock().unwrap_or_else(|e| e.into_inner()).snapshot_reads.push(read);
        }
        Ok(Err(status)) => recorder.error(&status),
        Err(_) => {}
    }
}

/// An open-loop reader of node `node`: a read every [`READ_EVERY`], each on its own task,
/// whatever state the node is in; every other one linearizable, the rest serializable.
pub async fn open_reader(client: u32, node: usize, keys: usize, seed: u64, recorder: Recorder, stop: Arc<AtomicBool>) {
    let mut rng = SplitMix64::new(seed ^ (u64::from(client) << 32) ^ 0x5eed);
    let kv = KvClient::new(channel(node));
    let mut tasks = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        let k = rng.range_u64(0, keys as u64 - 1) as usize;
        let (mut kv, recorder) = (kv.clone(), recorder.clone());
        if rng.chance(0.5) {
            tasks.spawn(async move { snapshot_read(&mut kv, &recorder, node, key(k)).await });
        } else {
            tasks.spawn(async move {
                perform(&mut kv, &recorder, client, KvOp::Get { key: key(k) }).await;
            });
        }
        tokio::time::sleep(READ_EVERY).await;
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}
