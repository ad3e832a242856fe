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
pub fn history(ops: &[Operation]) -> Verdict {
    let acked_writes = ops
        .iter()
        .filter(|o| matches!(o.outcome, KvOutcome::Put | KvOutcome::Delete { .. } | KvOutcome::Cas { succeeded: true }))
        .count();
    let mut anomalies = Vec::new();
    let history: History = ops.iter().cloned().collect();
    let ops_checked = match check(&history, CheckBudget { max_steps: 20_000_000 }) {
        CheckResult::Linearizable { ops_checked } => ops_checked,
        CheckResult::Violation(report) => {
            anomalies.push(format!("not linearizable: {report}"));
            0
        }
        CheckResult::Inconclusive { key, reason } => {
            anomalies.push(format!("no verdict for key {}: {reason:?}", String::from_utf8_lossy(&key)));
            0
        }
    };
    let lost = lost_writes(ops, &mut anomalies);
    Verdict { ops_checked, acked_writes, anomalies, lost, longest_unavailable_s: longest_gap(ops) }
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
