//! The checks on a recorded run: per-key linearizability (the store's own checker), lost
//! acknowledged writes, overlapping master leases, and the longest unavailability.

use leasekv::kvstore::sim::linearizability::{check, CheckBudget, CheckResult, History, KvOp, KvOutcome, Operation};
use std::collections::BTreeMap;
use std::path::Path;

/// The verdict on a history.
pub struct Verdict {
    /// Operations the checker searched.
    pub ops_checked: usize,
    /// Writes the store acknowledged.
    pub acked_writes: usize,
    /// Anomalies, each described in one line.
    pub anomalies: Vec<String>,
    /// Acknowledged writes lost (a subset of the anomalies' cause).
    pub lost: usize,
    /// Longest time without an acknowledged write, seconds.
    pub longest_unavailable_s: f64,
}

/// Checks `ops`, whose last operations per key are the final reads after healing.
pub fn history(ops: &[Operation], steps_per_key: u64) -> Verdict {
    let acked_writes = ops
        .iter()
        .filter(|o| matches!(o.outcome, KvOutcome::Put | KvOutcome::Delete { .. } | KvOutcome::Cas { succeeded: true }))
        .count();
    let mut anomalies = Vec::new();
    let mut by_key: BTreeMap<&[u8], History> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.op.key()).or_default().push(op.clone());
    }
    let keys: Vec<(&[u8], History)> = by_key.into_iter().collect();
    let results = check_keys_in_parallel(&keys, steps_per_key);
    let mut ops_checked = 0;
    for ((key, _), result) in keys.iter().zip(results) {
        match result {
            CheckResult::Linearizable { ops_checked: n } => ops_checked += n,
            CheckResult::Violation(report) => anomalies.push(format!("not linearizable: {report}")),
            CheckResult::Inconclusive { reason, .. } => anomalies.push(format!(
                "no verdict for key {} (an unproven history counts as an anomaly): {reason:?}",
                String::from_utf8_lossy(key)
            )),
        }
    }
    let lost = lost_writes(ops, &mut anomalies);
    Verdict { ops_checked, acked_writes, anomalies, lost, longest_unavailable_s: longest_gap(ops) }
}

/// The search budget per key. A linearizable history of a few thousand operations needs a
/// few times its length in steps; a violation needs the whole space explored, and this bound
/// keeps that to about a minute of CPU (a key that exhausts it counts as an anomaly).
pub const STEPS_PER_KEY: u64 = 3_000_000;

/// Checks each key's history on its own thread (at most as many at once as there are CPUs),
/// in key order.
fn check_keys_in_parallel(keys: &[(&[u8], History)], steps_per_key: u64) -> Vec<CheckResult> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(keys.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<CheckResult>>> = keys.iter().map(|_| Default::default()).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((_, history)) = keys.get(i) else { break };
                let result = check(history, CheckBudget { max_steps: steps_per_key });
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            });
        }
    });
    results
        .into_iter()
        .map(|r| {
            r.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or(CheckResult::Linearizable { ops_checked: 0 })
        })
        .collect()
}

/// A write is lost when it was the last write to its key, acknowledged, with no other write
/// to the key that could come after it, and the final read does not show it.
fn lost_writes(ops: &[Operation], anomalies: &mut Vec<String>) -> usize {
    let mut by_key: BTreeMap<&[u8], Vec<&Operation>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.op.key()).or_default().push(op);
    }
    let mut lost = 0;
    for (key, ops) in by_key {
        let writes: Vec<&&Operation> = ops.iter().filter(|o| !matches!(o.op, KvOp::Get { .. })).collect();
        let Some(final_read) = ops.iter().filter(|o| matches!(o.op, KvOp::Get { .. })).max_by_key(|o| o.call) else {
            continue;
        };
        let Some(last) = writes.iter().filter(|w| w.outcome != KvOutcome::Unknown).max_by_key(|w| w.ret) else {
            continue;
        };
        // Every other write must have been called before `last` returned and... be over
        // before `last` was called, so nothing can be ordered after it.
        let alone =
            writes.iter().all(|w| std::ptr::eq(**w, **last) || (w.outcome != KvOutcome::Unknown && w.ret < last.call));
        if !alone || final_read.call < last.ret {
            continue;
        }
        let expected = match (&last.op, last.outcome) {
            (KvOp::Put { value, .. }, _) => Some(*value),
            (KvOp::Cas { new, .. }, KvOutcome::Cas { succeeded: true }) => Some(*new),
            (KvOp::Delete { .. }, _) => None,
            _ => continue,
        };
        if final_read.outcome != KvOutcome::Get(expected) {
            lost += 1;
            anomalies.push(format!(
                "lost write: {} acknowledged {:?} but the final read saw {:?}",
                String::from_utf8_lossy(key),
                last.op,
                final_read.outcome
            ));
        }
    }
    lost
}

fn longest_gap(ops: &[Operation]) -> f64 {
    let mut rets: Vec<u64> = ops
        .iter()
        .filter(|o| matches!(o.outcome, KvOutcome::Put | KvOutcome::Cas { .. } | KvOutcome::Delete { .. }))
        .map(|o| o.ret)
        .collect();
    rets.sort_unstable();
    rets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as f64 / 1e9
}

/// Master lease intervals from the nodes' lease log that overlap in real time: one line
/// per overlapping pair.
pub fn lease_overlaps(log: &Path) -> (usize, Vec<String>) {
    let Ok(text) = std::fs::read_to_string(log) else { return (0, Vec::new()) };
    // Per node, its intervals in log order; an `end` cuts the last one short.
    let mut per_node: BTreeMap<u64, Vec<(u128, u128)>> = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["lease", node, from, to] => {
                if let (Ok(node), Ok(from), Ok(to)) = (node.parse(), from.parse(), to.parse()) {
                    per_node.entry(node).or_default().push((from, to));
                }
            }
            ["end", node, at] => {
                if let (Ok(node), Ok(at)) = (node.parse::<u64>(), at.parse::<u128>()) {
                    // The belief ended at `at`: earlier than logged (a release) or later
                    // (the node's clock slowed after the last renewal was logged).
                    let intervals = per_node.entry(node).or_default();
                    for interval in intervals.iter_mut().filter(|i| i.0 <= at) {
                        interval.1 = interval.1.min(at);
                    }
                    if let Some(last) = intervals.iter_mut().filter(|i| i.0 <= at).max_by_key(|i| i.0) {
                        last.1 = at;
                    }
                }
            }
            _ => {}
        }
    }
    let intervals: usize = per_node.values().map(Vec::len).sum();
    let mut overlaps = Vec::new();
    let nodes: Vec<_> = per_node.iter().collect();
    for (i, (a, xs)) in nodes.iter().enumerate() {
        for (b, ys) in &nodes[i + 1..] {
            for x in xs.iter() {
                for y in ys.iter() {
                    if x.0 < y.1 && y.0 < x.1 {
                        let overlap = x.1.min(y.1) - x.0.max(y.0);
                        overlaps.push(format!(
                            "master leases overlap: node {a} and node {b} for {:.1} ms",
                            overlap as f64 / 1e6
                        ));
                    }
                }
            }
        }
    }
    (intervals, overlaps)
}

/// Writes `ops` to `path`, one operation per line, for `chaos --check FILE` to check again
/// (with a larger budget, or after a fix to the checker).
pub fn save_history(ops: &[Operation], path: &Path) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut text = String::new();
    for o in ops {
        let op = match &o.op {
            KvOp::Put { value, .. } => format!("put:{value}"),
            KvOp::Get { .. } => "get".into(),
            KvOp::Delete { .. } => "del".into(),
            KvOp::Cas { expected, new, .. } => format!("cas:{}:{new}", opt(*expected)),
        };
        let outcome = match o.outcome {
            KvOutcome::Put => "put".into(),
            KvOutcome::Get(v) => format!("get:{}", opt(v)),
            KvOutcome::Delete { deleted } => format!("del:{}", u8::from(deleted)),
            KvOutcome::Cas { succeeded } => format!("cas:{}", u8::from(succeeded)),
            KvOutcome::Unknown => "unknown".into(),
        };
        let _ =
            writeln!(text, "{} {} {} {} {op} {outcome}", o.client, o.call, o.ret, String::from_utf8_lossy(o.op.key()));
    }
    std::fs::write(path, text)
}

/// Reads a history written by [`save_history`].
pub fn load_history(path: &Path) -> anyhow::Result<Vec<Operation>> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let opt = |s: &str| -> anyhow::Result<Option<u64>> { Ok(if s == "-" { None } else { Some(s.parse()?) }) };
    let mut ops = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let parse = || -> anyhow::Result<Operation> {
            let f: Vec<&str> = line.split(' ').collect();
            let [client, call, ret, key, op, outcome] = f.as_slice() else {
                anyhow::bail!("expected 6 fields: client call ret key op outcome")
            };
            let key = key.as_bytes().to_vec();
            let op = match op.split(':').collect::<Vec<_>>().as_slice() {
                ["put", v] => KvOp::Put { key, value: v.parse()? },
                ["get"] => KvOp::Get { key },
                ["del"] => KvOp::Delete { key },
                ["cas", e, n] => KvOp::Cas { key, expected: opt(e)?, new: n.parse()? },
                _ => anyhow::bail!("unknown operation {op:?}"),
            };
            let outcome = match outcome.split(':').collect::<Vec<_>>().as_slice() {
                ["put"] => KvOutcome::Put,
                ["get", v] => KvOutcome::Get(opt(v)?),
                ["del", d] => KvOutcome::Delete { deleted: *d == "1" },
                ["cas", s] => KvOutcome::Cas { succeeded: *s == "1" },
                ["unknown"] => KvOutcome::Unknown,
                _ => anyhow::bail!("unknown outcome {outcome:?}"),
            };
            Ok(Operation { client: client.parse()?, op, call: call.parse()?, ret: ret.parse()?, outcome })
        };
        ops.push(parse().with_context(|| format!("{}:{}", path.display(), n + 1))?);
    }
    Ok(ops)
}
