//! Who leads, watched from outside: every node's `Maintenance.Status`, polled, for the
//! moments a leader takes office. Both stores restart every lease's countdown then (etcd's
//! lessor on promotion, ours once the new master's barrier is applied), so the lease check
//! pushes an abandoned lease's deadline past each takeover, as it does past each fault.
//! Faults cause most takeovers, but not all: a restarted etcd member without pre-vote
//! disrupts the leader it rejoins, seconds after the fault that stopped it was healed.

use crate::workload::{self, Recorder};
use leasekv::client::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use leasekv::client::proto::etcdserverpb::StatusRequest;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often each node is asked; a takeover is seen at most this much (plus one answer)
/// after it happened, which only makes the lease deadline later.
const POLL: Duration = Duration::from_millis(100);
/// How long one question may take before the node counts as silent for this round.
const ANSWER: Duration = Duration::from_millis(300);

/// What the pollers saw: each (leader, term) once, with when it was first seen.
#[derive(Default)]
pub struct Seen {
    reigns: BTreeSet<(u64, u64)>,
    takeovers: Vec<u64>,
}

/// Shared by the pollers of every node.
pub type Log = Arc<Mutex<Seen>>;

impl Seen {
    /// Records that `member` said at `at` that it leads in `term`; a reign is counted
    /// once, however many nodes report it and however often.
    fn leader(&mut self, member: u64, term: u64, at: u64) {
        if self.reigns.insert((member, term)) {
            self.takeovers.push(at);
        }
    }

    /// When each reign was first seen, in order.
    pub fn takeovers(&self) -> Vec<u64> {
        let mut at = self.takeovers.clone();
        at.sort_unstable();
        at
    }
}

/// Asks node `node` who leads until `stop` is set.
pub async fn poller(node: usize, recorder: Recorder, log: Log, stop: Arc<AtomicBool>) {
    let mut maintenance = MaintenanceClient::new(workload::channel(node));
    while !stop.load(Ordering::Relaxed) {
        let asked = tokio::time::timeout(ANSWER, maintenance.status(StatusRequest {})).await;
        if let Ok(Ok(status)) = asked {
            let status = status.into_inner();
            let me = status.header.map_or(0, |h| h.member_id);
            if me != 0 && status.leader == me {
                let at = recorder.now();
                log.lock().unwrap_or_else(|e| e.into_inner()).leader(me, status.raft_term, at);
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reign_is_one_takeover_however_often_it_is_reported() {
        let mut seen = Seen::default();
        seen.leader(1, 5, 10);
        seen.leader(1, 5, 20);
        seen.leader(2, 6, 30);
        // The old leader, partitioned, still claims its term: not a new takeover.
        seen.leader(1, 5, 40);
        seen.leader(1, 7, 50);
        assert_eq!(seen.takeovers(), vec![10, 30, 50]);
    }
}
