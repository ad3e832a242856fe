//! The background corruption check (etcd's `--experimental-corrupt-check-time`): every
//! `[storage] corrupt_check_interval_ms`, the ready master asks every member for its HashKV
//! at the master's revision and compares them. A member whose hash disagrees with the
//! majority's is marked with a CORRUPT alarm through the log; every write then fails with
//! `etcdserver: corrupt cluster` and that member refuses reads, until an operator has
//! replaced its data and disarmed the alarm (docs/operations.md).
//!
//! Members answer through their client port, as `kvcli check` asks them. One that cannot be
//! reached, has not applied the revision within a second, or has a different compaction
//! point (its hash covers other history) is left out of this round, never judged.

use crate::node::NodeHandle;
use leasekv_client::{Client, RetryPolicy};
use leasekv_kvstore::membership::url_address;
use leasekv_kvstore::{AlarmAction, AlarmKind, Command, Revision};
use leasekv_lease::NodeId;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// How long a member has to reach the master's revision before it is left out of a round.
const CATCH_UP: Duration = Duration::from_secs(1);
/// How long one member's answer may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// One member's hash: `(hash, compaction point)`.
type MemberHash = (u32, Revision);

/// The members whose hash disagrees with the one a majority of the `cluster_size` members
/// hold; every member that answered when no hash has such a majority (the cluster cannot
/// tell which data is right, and must stop writing).
pub fn suspects(hashes: &BTreeMap<NodeId, u32>, cluster_size: usize) -> Vec<NodeId> {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for hash in hashes.values() {
        *counts.entry(*hash).or_default() += 1;
    }
    if counts.len() <= 1 {
        return Vec::new();
    }
    match counts.iter().find(|(_, n)| **n > cluster_size / 2) {
        Some((majority, _)) => hashes.iter().filter(|(_, h)| *h != majority).map(|(id, _)| *id).collect(),
        None => hashes.keys().copied().collect(),
    }
}

/// Runs the check every `every` until `stopping` turns true; only the ready master checks.
/// The members asked are those of the configuration in force at each check, at their
/// published client URLs (a member that never started has none and is left out).
pub async fn run(node: NodeHandle, me: NodeId, every: Duration, mut stopping: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
        let Ok(status) = node.status().await else { return };
        if !status.ready_master || status.alarms.iter().any(|a| a.kind == AlarmKind::Corrupt) {
            continue;
        }
        let Ok(Ok(mine)) = node.hash_kv(status.revision).await else { continue };
        let mut hashes = BTreeMap::from([(me, mine.hash)]);
        let membership = node.membership();
        let members: Vec<(NodeId, String)> = membership
            .members()
            .filter_map(|m| Some((m.id, url_address(m.client_urls.first()?)?.to_string())))
            .collect();
        let cluster_size = membership.ids().len();
        for (id, addr) in members.iter().filter(|(id, _)| *id != me) {
            match ask(addr, status.revision).await {
                Some((hash, compacted)) if compacted == mine.compact_revision => {
                    hashes.insert(*id, hash);
                }
                Some(_) => tracing::debug!(member = %id, "corruption check: another compaction point; left out"),
                None => tracing::debug!(member = %id, "corruption check: no hash; left out"),
            }
        }
        let suspects = suspects(&hashes, cluster_size);
        if suspects.is_empty() {
            tracing::debug!(revision = status.revision, members = hashes.len(), "corruption check: hashes agree");
            continue;
        }
        tracing::error!(
            revision = status.revision,
            ?hashes,
            ?suspects,
            "corruption check: members' hashes disagree; raising CORRUPT"
        );
        for suspect in suspects {
            let command = Command::Alarm {
                action: AlarmAction::Raise,
                member: u64::from(suspect.0),
                kind: Some(AlarmKind::Corrupt),
            };
            if let Err(error) = node.propose(command).await {
                tracing::warn!(member = %suspect, %error, "corruption check: the CORRUPT alarm was not raised");
            }
        }
    }
}

/// `addr`'s hash at `revision`, waiting up to [`CATCH_UP`] for it to apply that far.
async fn ask(addr: &str, revision: Revision) -> Option<MemberHash> {
    let policy = RetryPolicy { attempts: 1, request_timeout: ASK_TIMEOUT, ..RetryPolicy::default() };
    let client = Client::connect_with(&[addr.to_string()], policy).await.ok()?;
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        match client.hash_kv(revision).await {
            // HashKV says -1 for "never compacted", as etcd's does; the store says 0.
            Ok(answer) => return Some((answer.hash, answer.compact_revision.max(0))),
            Err(e)
                if e.etcd_error() == Some(leasekv_client::EtcdError::FutureRevision)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(of: &[(u32, u32)]) -> BTreeMap<NodeId, u32> {
        of.iter().map(|(id, h)| (NodeId(*id), *h)).collect()
    }

    #[test]
    fn the_member_outside_the_majority_is_the_suspect() {
        assert!(suspects(&hashes(&[(1, 7), (2, 7), (3, 7)]), 3).is_empty());
        assert_eq!(suspects(&hashes(&[(1, 7), (2, 7), (3, 8)]), 3), vec![NodeId(3)]);
        assert_eq!(suspects(&hashes(&[(1, 8), (2, 7), (3, 7)]), 3), vec![NodeId(1)], "the master too");
        // Two of five agree: no majority, so nobody's data can be trusted over another's.
        assert_eq!(suspects(&hashes(&[(1, 7), (2, 7), (3, 8)]), 5).len(), 3);
        assert!(suspects(&hashes(&[(1, 7)]), 3).is_empty(), "alone, there is nothing to compare");
    }
}
