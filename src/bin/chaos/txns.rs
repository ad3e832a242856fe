//! Two-key transactions and their atomicity check.
//!
//! A register client's transaction compares two keys with the values it last saw and, if
//! both hold, writes a new unique value to each; otherwise it reads both in the failure
//! branch. The per-key linearizability checker sees it projected on each key (a
//! compare-and-swap that succeeded on both, or a read of each, or a compare-and-swap of
//! unknown outcome on each), which proves every key's history but not that the two writes
//! went together. That is checked here, against the committed history read back at the end
//! (every event carries its revision, and values are unique): a transaction's two writes are
//! both in the history at one revision, or neither is; when they are, both keys held the
//! compared values just before that revision; a failed transaction's two reads were true
//! together at some revision; and no value is written twice.

use crate::watches::{changes_by_key, value_at, Changes, Seen};
use leasekv::kvstore::sim::linearizability::{KvOp, KvOutcome, Operation};
use std::collections::HashMap;

/// What a two-key transaction answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Both comparisons held and both values were written.
    Succeeded,
    /// A comparison failed; the failure branch read these values (`None`: absent).
    Failed {
        /// The two keys' values, in the transaction's key order.
        read: [Option<u64>; 2],
    },
    /// No definite answer: it may have taken effect, once, or not at all.
    Unknown,
}

/// One two-key transaction as a client ran it.
#[derive(Debug, Clone)]
pub struct TxnRecord {
    /// The client that ran it.
    pub client: u32,
    /// The two keys (different).
    pub keys: [Vec<u8>; 2],
    /// The values compared against (`None`: the key must not exist).
    pub expected: [Option<u64>; 2],
    /// The values written on success, unique in the run.
    pub new: [u64; 2],
    /// Invoke and return times, as for [`Operation`].
    pub call: u64,
    /// See `call`.
    pub ret: u64,
    /// The answer.
    pub outcome: TxnOutcome,
}

impl TxnRecord {
    /// A transaction not yet run.
    pub fn new(client: u32, keys: [Vec<u8>; 2], expected: [Option<u64>; 2], new: [u64; 2]) -> Self {
        TxnRecord { client, keys, expected, new, call: 0, ret: 0, outcome: TxnOutcome::Unknown }
    }

    /// The transaction as the per-key checker sees it: one operation on each key, with the
    /// transaction's interval.
    pub fn per_key(&self) -> [Operation; 2] {
        std::array::from_fn(|i| {
            let key = self.keys[i].clone();
            let (op, outcome) = match self.outcome {
                TxnOutcome::Succeeded => (
                    KvOp::Cas { key, expected: self.expected[i], new: self.new[i] },
                    KvOutcome::Cas { succeeded: true },
                ),
                TxnOutcome::Failed { read } => (KvOp::Get { key }, KvOutcome::Get(read[i])),
                TxnOutcome::Unknown => {
                    (KvOp::Cas { key, expected: self.expected[i], new: self.new[i] }, KvOutcome::Unknown)
                }
            };
            Operation { client: self.client, op, call: self.call, ret: self.ret, outcome }
        })
    }
}

/// The revision ranges `[from, to)` over which a key (given its changes) held `value`.
fn held(changes: &[(i64, Option<&[u8]>)], value: Option<&[u8]>) -> Vec<(i64, i64)> {
    let mut ranges = Vec::new();
    let mut from = 0;
    let mut current = None;
    for &(revision, after) in changes {
        if current == value {
            ranges.push((from, revision));
        }
        (from, current) = (revision, after);
    }
    if current == value {
        ranges.push((from, i64::MAX));
    }
    ranges
}

/// Checks every transaction against the committed history `truth`: one line per anomaly.
pub fn check(txns: &[TxnRecord], truth: &[Seen]) -> Vec<String> {
    let mut anomalies = Vec::new();
    let mut written: HashMap<(&[u8], &[u8]), i64> = HashMap::new();
    let changes = changes_by_key(truth);
    for (revision, key, value) in truth {
        if let Some(value) = value {
            if let Some(earlier) = written.insert((key, value), *revision) {
                anomalies.push(format!(
                    "value written twice: {} := {} at revisions {earlier} and {revision}",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(value)
                ));
            }
        }
    }
    let no_changes = Changes::new();
    for txn in txns {
        let values = txn.new.map(|v| v.to_string());
        let at: [Option<i64>; 2] =
            std::array::from_fn(|i| written.get(&(txn.keys[i].as_slice(), values[i].as_bytes())).copied());
        let describe = || {
            format!(
                "client {}'s Txn {} := {} and {} := {}",
                txn.client,
                String::from_utf8_lossy(&txn.keys[0]),
                txn.new[0],
                String::from_utf8_lossy(&txn.keys[1]),
                txn.new[1]
            )
        };
        let revisions = |at: [Option<i64>; 2]| {
            at.map(|r| r.map_or("never written".to_string(), |r| format!("written at revision {r}"))).join(" and ")
        };
        match (txn.outcome, at) {
            (_, [Some(a), Some(b)]) if a != b => {
                anomalies.push(format!("txn not atomic: {} {}", describe(), revisions(at)))
            }
            (TxnOutcome::Succeeded, [Some(_), Some(_)]) => {}
            (TxnOutcome::Succeeded, _) => {
                anomalies.push(format!("txn lost: {} succeeded but was {}", describe(), revisions(at)))
            }
            (TxnOutcome::Failed { .. }, [None, None]) | (TxnOutcome::Unknown, [None, None] | [Some(_), Some(_)]) => {}
            (TxnOutcome::Failed { .. }, _) => {
                anomalies.push(format!("txn failed yet written: {} failed but was {}", describe(), revisions(at)))
            }
            (TxnOutcome::Unknown, _) => {
                anomalies.push(format!("txn not atomic: {} (no answer) {}", describe(), revisions(at)))
            }
        }
        let key_changes = |i: usize| changes.get(txn.keys[i].as_slice()).unwrap_or(&no_changes);
        let as_bytes = |v: Option<u64>| v.map(|v| v.to_string().into_bytes());
        if let [Some(a), Some(b)] = at {
            if a == b {
                let before: [Option<&[u8]>; 2] = std::array::from_fn(|i| value_at(key_changes(i), a - 1));
                let expected = txn.expected.map(as_bytes);
                if before[0] != expected[0].as_deref() || before[1] != expected[1].as_deref() {
                    anomalies.push(format!(
                        "txn applied though a comparison failed: {} at revision {a}, where the keys held {} and {} \
                         (it compared with {:?})",
                        describe(),
                        show(before[0]),
                        show(before[1]),
                        txn.expected
                    ));
                }
            }
        }
        if let TxnOutcome::Failed { read } = txn.outcome {
            if read == txn.expected {
                anomalies.push(format!(
                    "txn failed though its comparisons held: {} read {:?}, the values it compared with",
                    describe(),
                    read
                ));
            }
            let read = read.map(as_bytes);
            let (first, second) = (held(key_changes(0), read[0].as_deref()), held(key_changes(1), read[1].as_deref()));
            let together = first.iter().any(|x| second.iter().any(|y| x.0 < y.1 && y.0 < x.1));
            if !together {
                anomalies.push(format!(
                    "txn read no snapshot: {} failed and read {} and {}, which no revision held together",
                    describe(),
                    show(read[0].as_deref()),
                    show(read[1].as_deref())
                ));
            }
        }
    }
    anomalies
}

fn show(value: Option<&[u8]>) -> String {
    value.map_or("absent".to_string(), |v| String::from_utf8_lossy(v).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(outcome: TxnOutcome) -> TxnRecord {
        let mut t = TxnRecord::new(1, [b"/chaos/r00".to_vec(), b"/chaos/r01".to_vec()], [None, Some(5)], [7, 8]);
        t.outcome = outcome;
        t
    }

    fn event(revision: i64, key: &str, value: u64) -> Seen {
        (revision, key.as_bytes().to_vec(), Some(value.to_string().into_bytes()))
    }

    #[test]
    fn both_writes_at_one_revision_pass() {
        let truth = vec![event(3, "/chaos/r01", 5), event(4, "/chaos/r00", 7), event(4, "/chaos/r01", 8)];
        for outcome in [TxnOutcome::Succeeded, TxnOutcome::Unknown] {
            assert!(check(&[txn(outcome)], &truth).is_empty(), "{outcome:?}");
        }
        let failed = TxnOutcome::Failed { read: [Some(1), Some(5)] };
        let truth = [event(2, "/chaos/r00", 1), event(3, "/chaos/r01", 5), event(4, "/chaos/r00", 2)];
        assert!(check(&[txn(failed)], &truth).is_empty());
        let absent = TxnOutcome::Failed { read: [None, None] };
        assert!(check(&[txn(absent)], &[event(3, "/chaos/r01", 5)]).is_empty(), "both absent before revision 3");
        assert!(check(&[txn(TxnOutcome::Unknown)], &[]).is_empty());
    }

    /// The negative controls: each broken history must be caught.
    #[test]
    fn broken_histories_are_caught() {
        let split = vec![event(4, "/chaos/r00", 7), event(5, "/chaos/r01", 8)];
        let half = vec![event(4, "/chaos/r00", 7)];
        let cases = [
            (TxnOutcome::Succeeded, split.clone(), "not atomic"),
            (TxnOutcome::Unknown, split, "not atomic"),
            (TxnOutcome::Unknown, half.clone(), "not atomic"),
            (TxnOutcome::Succeeded, half.clone(), "lost"),
            (TxnOutcome::Succeeded, vec![], "lost"),
            (TxnOutcome::Failed { read: [Some(1), Some(5)] }, half, "failed yet written"),
            (TxnOutcome::Failed { read: [None, Some(5)] }, vec![], "comparisons held"),
            // Written at one revision, but r01 held 6, not the 5 compared with.
            (
                TxnOutcome::Succeeded,
                vec![event(3, "/chaos/r01", 6), event(4, "/chaos/r00", 7), event(4, "/chaos/r01", 8)],
                "comparison failed",
            ),
            // r00 held 1 only before revision 3, r01 held 5 only from revision 3 on.
            (
                TxnOutcome::Failed { read: [Some(1), Some(5)] },
                vec![event(2, "/chaos/r00", 1), event(3, "/chaos/r00", 2), event(3, "/chaos/r01", 5)],
                "no snapshot",
            ),
            (TxnOutcome::Unknown, vec![event(3, "/chaos/r01", 5), event(4, "/chaos/r01", 5)], "written twice"),
        ];
        for (outcome, truth, expected) in cases {
            let anomalies = check(&[txn(outcome)], &truth);
            assert!(anomalies.iter().any(|a| a.contains(expected)), "{outcome:?} {truth:?}: {anomalies:?}");
        }
    }

    #[test]
    fn per_key_projection() {
        let [a, b] = txn(TxnOutcome::Failed { read: [Some(1), None] }).per_key();
        assert_eq!((a.outcome, b.outcome), (KvOutcome::Get(Some(1)), KvOutcome::Get(None)));
        let [a, _] = txn(TxnOutcome::Succeeded).per_key();
        assert_eq!(a.op, KvOp::Cas { key: b"/chaos/r00".to_vec(), expected: None, new: 7 });
    }
}
