//! Aggregating per-seed results.

use super::membership::MembershipStats;
use super::world::{SeedReport, Violation};
use std::time::Duration;

/// The `p`-th percentile (0..=100) of `values` by nearest rank, `None` when empty.
pub fn percentile(values: &[Duration], p: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// What a batch of seeds showed.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Safety violations over all seeds.
    pub violations: u64,
    /// The first few violations, for replay.
    pub examples: Vec<Violation>,
    /// Seeds in which the quiet majority elected a master within the liveness bound.
    pub elected_seeds: u64,
    /// Seeds in which that was expected (the majority could elect) but did not happen.
    pub liveness_failures: Vec<u64>,
    /// Time from the simultaneous start to the first master, per seed.
    pub acquire: Vec<Duration>,
    /// Time from the crash of the master to the next master, per seed.
    pub failover: Vec<Duration>,
    /// Messages sent over all seeds.
    pub messages: u64,
    /// Membership changes over all seeds.
    pub membership: MembershipStats,
}

impl Summary {
    /// Adds one seed's report.
    pub fn add(&mut self, report: SeedReport) {
        self.seeds += 1;
        self.violations += report.violations.len() as u64;
        for v in report.violations {
            if self.examples.len() < 5 {
                self.examples.push(v);
            }
        }
        if report.elected_in_quiet.is_some() {
            self.elected_seeds += 1;
        } else if report.liveness_expected {
            self.liveness_failures.push(report.seed);
        }
        self.acquire.extend(report.first_acquire);
        self.failover.extend(report.failover);
        self.messages += report.messages;
        self.membership += report.membership;
    }

    /// The closing line of the `sim` example.
    pub fn line(&self) -> String {
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.1}", d.as_secs_f64() * 1000.0),
            None => "none".to_string(),
        };
        format!(
            "seeds={} violations={} elected_seeds={} acquire_p50_ms={} acquire_p99_ms={} failover_p50_ms={} \
             changes={} learners_added={} promoted={} two_voters_added={} removed={} removed_master={} \
             returned={} won_by_returned={} applied={}",
            self.seeds,
            self.violations,
            self.elected_seeds,
            ms(percentile(&self.acquire, 50.0)),
            ms(percentile(&self.acquire, 99.0)),
            ms(percentile(&self.failover, 50.0)),
            self.membership.changes(),
            self.membership.learners_added,
            self.membership.promoted,
            self.membership.two_voters_added,
            self.membership.removed,
            self.membership.removed_master,
            self.membership.returned,
            self.membership.won_by_returned,
            self.membership.applied,
        )
    }
}
