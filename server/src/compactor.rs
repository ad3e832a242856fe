//! Auto-compaction: the ready master proposes `Command::Compact` as the `[compaction]` policy
//! says, so every replica forgets the same history at the same point in the log (etcd's
//! `--auto-compaction-mode`). The policy is a pure function of time and revisions
//! ([`AutoCompactor`]); [`run`] drives it on the master.

use crate::config::CompactionPolicy;
use crate::node::NodeHandle;
use leasekv_kvstore::{Command, Revision};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Decides when to compact and to which revision.
#[derive(Debug)]
pub struct AutoCompactor {
    policy: CompactionPolicy,
    /// Periodic mode: `(when, store revision then)`, oldest first, one per sampling period.
    samples: VecDeque<(Instant, Revision)>,
}

impl AutoCompactor {
    /// A compactor for `policy`.
    pub fn new(policy: CompactionPolicy) -> Self {
        AutoCompactor { policy, samples: VecDeque::new() }
    }

    /// How often [`Self::target`] should be asked.
    pub fn check_every(&self) -> Duration {
        match self.policy {
            // Revisions are cheap to compare; checking often keeps the window near its bound.
            CompactionPolicy::Off | CompactionPolicy::Revisions(_) => Duration::from_secs(1),
            // etcd samples every tenth of the retention, at most hourly.
            CompactionPolicy::Periodic(d) => (d / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600)),
        }
    }

    /// The revision to compact to now, if any: `revision` is the store revision and
    /// `compacted` the current compaction point.
    pub fn target(&mut self, now: Instant, revision: Revision, compacted: Revision) -> Option<Revision> {
        let target = match self.policy {
            CompactionPolicy::Off => return None,
            CompactionPolicy::Revisions(keep) => {
                let keep = i64::try_from(keep).unwrap_or(i64::MAX);
                // Compact in steps of a tenth of the window, not at every revision: the
                // history then holds between `keep` and 1.1 × `keep` revisions.
                let step = (keep / 10).max(1);
                let target = revision.saturating_sub(keep);
                (target >= compacted.max(1) + step || (compacted == 0 && target >= step)).then_some(target)?
            }
            CompactionPolicy::Periodic(keep) => {
                self.samples.push_back((now, revision));
                // The newest sample at least `keep` old is what to compact to; older ones
                // are no longer needed.
                while self.samples.get(1).is_some_and(|(at, _)| now.saturating_duration_since(*at) >= keep) {
                    self.samples.pop_front();
                }
                let (at, then) = *self.samples.front()?;
                (now.saturating_duration_since(at) >= keep).then_some(then)?
            }
        };
        (target > compacted && target >= 1).then_some(target)
    }
}

/// Runs `policy` until `stopping` turns true: on the ready master, proposes compactions.
/// A proposal that fails (mastership moved, another compaction got there first) is only
/// logged at debug level: the next master, or the next check, does it.
pub async fn run(node: NodeHandle, policy: CompactionPolicy, mut stopping: watch::Receiver<bool>) {
    let mut compactor = AutoCompactor::new(policy);
    if policy == CompactionPolicy::Off {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(compactor.check_every()) => {}
            _ = stopping.changed() => return,
        }
        if *stopping.borrow() {
            return;
        }
        let Ok(status) = node.status().await else { return };
        if !status.ready_master {
            // Only the master samples: a new master starts its periodic window afresh,
            // which at worst delays one compaction by one retention.
            compactor = AutoCompactor::new(policy);
            continue;
        }
        if let Some(revision) = compactor.target(Instant::now(), status.revision, status.compacted) {
            match node.propose(Command::Compact { revision }).await {
                Ok(applied) if applied.result.is_ok() => {
                    tracing::info!(revision, policy = %policy, "auto-compacted the history");
                }
                Ok(applied) => tracing::debug!(revision, result = ?applied.result, "auto-compaction refused"),
                Err(error) => tracing::debug!(revision, %error, "auto-compaction not proposed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_mode_keeps_between_the_window_and_a_tenth_more() {
        let mut c = AutoCompactor::new(CompactionPolicy::Revisions(100));
        let now = Instant::now();
        assert_eq!(c.target(now, 50, 0), None);
        assert_eq!(c.target(now, 109, 0), None);
        assert_eq!(c.target(now, 110, 0), Some(10));
        assert_eq!(c.target(now, 115, 10), None, "less than a tenth since the last");
        assert_eq!(c.target(now, 120, 10), Some(20));
    }

    #[test]
    fn periodic_mode_compacts_to_the_revision_of_one_retention_ago() {
        let keep = Duration::from_secs(60);
        let mut c = AutoCompactor::new(CompactionPolicy::Periodic(keep));
        assert_eq!(c.check_every(), Duration::from_secs(6));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(c.target(at(0), 10, 0), None);
        assert_eq!(c.target(at(30), 40, 0), None);
        assert_eq!(c.target(at(60), 70, 0), Some(10));
        assert_eq!(c.target(at(66), 76, 10), None, "the sample of 60 s ago is the one used");
        assert_eq!(c.target(at(90), 100, 10), Some(40));
    }

    #[test]
    fn off_never_compacts() {
        let mut c = AutoCompactor::new(CompactionPolicy::Off);
        assert_eq!(c.target(Instant::now(), 1_000_000, 0), None);
    }
}
