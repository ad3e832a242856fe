//! Serializable reads and their check.
//!
//! A serializable read is answered by whichever node receives it, from its own applied
//! state, so it may be stale and the linearizability checker cannot use it. What it must be
//! is a true snapshot: the value it returns is the key's value in the committed history at
//! the revision its header names, and that revision was committed. A node that served an
//! unapplied, rolled-back or invented state (say, after a power loss took writes it had
//! already applied) answers something no revision of the committed history holds.

use crate::watches::{changes_by_key, value_at, Seen};

/// One answered serializable read.
#[derive(Debug, Clone)]
pub struct SnapshotRead {
    /// The node that answered.
    pub node: usize,
    /// The key read.
    pub key: Vec<u8>,
    /// The revision in the answer's header.
    pub revision: i64,
    /// The value returned (`None`: absent).
    pub value: Option<Vec<u8>>,
}

/// Checks every read against the committed history `truth`, complete up to revision `to`:
/// one line per anomaly (at most a few per node, then a count).
pub fn check(reads: &[SnapshotRead], truth: &[Seen], to: i64) -> Vec<String> {
    let history = changes_by_key(truth);
    let mut anomalies = Vec::new();
    let mut more = 0;
    for read in reads {
        let problem = if read.revision > to {
            Some(format!("at revision {}, beyond the last committed revision {to}", read.revision))
        } else {
            let events = history.get(read.key.as_slice()).map_or(&[][..], Vec::as_slice);
            let committed = value_at(events, read.revision);
            (committed != read.value.as_deref()).then(|| {
                let show =
                    |v: Option<&[u8]>| v.map_or("absent".to_string(), |v| String::from_utf8_lossy(v).into_owned());
                format!(
                    "returned {} at revision {}, where the committed history has {}",
                    show(read.value.as_deref()),
                    read.revision,
                    show(committed)
                )
            })
        };
        if let Some(problem) = problem {
            if anomalies.len() < 10 {
                anomalies.push(format!(
                    "serializable read not a snapshot: node {} read {} {problem}",
                    read.node,
                    String::from_utf8_lossy(&read.key)
                ));
            } else {
                more += 1;
            }
        }
    }
    if more > 0 {
        anomalies.push(format!("serializable read not a snapshot: {more} more"));
    }
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(revision: i64, value: &str) -> Seen {
        (revision, b"/chaos/r00".to_vec(), Some(value.as_bytes().to_vec()))
    }

    fn read(revision: i64, value: Option<&str>) -> SnapshotRead {
        SnapshotRead { node: 0, key: b"/chaos/r00".to_vec(), revision, value: value.map(|v| v.as_bytes().to_vec()) }
    }

    #[test]
    fn snapshots_of_the_history_pass() {
        let truth = vec![put(2, "a"), (4, b"/chaos/r00".to_vec(), None), put(6, "b")];
        let reads = [read(1, None), read(2, Some("a")), read(3, Some("a")), read(5, None), read(9, Some("b"))];
        assert!(check(&reads, &truth, 9).is_empty());
    }

    /// The negative controls: a stale value under a newer revision, a value never written,
    /// a revision never committed.
    #[test]
    fn reads_that_are_no_snapshot_are_caught() {
        let truth = vec![put(2, "a"), put(6, "b")];
        for bad in [read(6, Some("a")), read(3, Some("c")), read(1, Some("a")), read(10, Some("b"))] {
            assert_eq!(check(std::slice::from_ref(&bad), &truth, 9).len(), 1, "{bad:?}");
        }
    }
}
