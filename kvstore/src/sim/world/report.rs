//! What a run of the store simulator reports: per seed, and summed over seeds.

use crate::log::Slot;
use crate::sim::oracle::Violation;

/// The outcome of one seed.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Broken promises.
    pub violations: Vec<Violation>,
    /// Operations in the checked history.
    pub ops_checked: usize,
    /// Keys whose check ran out of budget (not counted as passing).
    pub inconclusive: usize,
    /// Acknowledged writes.
    pub acked_writes: u64,
    /// Acknowledged writes lost.
    pub acked_lost: u64,
    /// Client operations that completed successfully.
    pub ops_ok: u64,
    /// Highest slot applied anywhere.
    pub slots: Slot,
    /// Snapshots installed from peers.
    pub snapshots_installed: u64,
    /// Leases that expired.
    pub leases_expired: u64,
    /// Watch responses the watch oracle checked.
    pub watch_responses: u64,
    /// Watch streams reopened on another node.
    pub watch_resumed: u64,
    /// Membership changes the master took (proposed).
    pub changes_proposed: u64,
    /// The highest configuration epoch any node applied.
    pub configurations: u64,
    /// How the linearizable reads that reached followers were served (read leases).
    pub lease_reads: crate::node::lease_reads::LeaseReadCounts,
    /// The trace, when asked for.
    pub trace: Vec<String>,
}

/// Totals over many seeds.
#[derive(Debug, Clone, Default)]
pub struct SimSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Violations found.
    pub violations: u64,
    /// Seeds with a violation.
    pub failing_seeds: Vec<u64>,
    /// Operations checked for linearizability.
    pub ops_checked: u64,
    /// Inconclusive key checks.
    pub inconclusive: u64,
    /// Acknowledged writes.
    pub acked_writes: u64,
    /// Acknowledged writes lost.
    pub acked_lost: u64,
    /// Snapshots installed from peers.
    pub snapshots_installed: u64,
    /// Leases expired.
    pub leases_expired: u64,
    /// Watch responses checked.
    pub watch_responses: u64,
    /// Membership changes proposed.
    pub changes_proposed: u64,
    /// Configurations applied (summed over seeds: the highest epoch of each).
    pub configurations: u64,
    /// How the linearizable reads that reached followers were served (read leases).
    pub lease_reads: crate::node::lease_reads::LeaseReadCounts,
    /// The first violations, for the report.
    pub first: Vec<Violation>,
}

impl SimSummary {
    pub(super) fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        self.violations += report.violations.len() as u64;
        if !report.violations.is_empty() {
            self.failing_seeds.push(report.seed);
            if self.first.len() < 5 {
                self.first.extend(report.violations.iter().take(2).cloned());
            }
        }
        self.ops_checked += report.ops_checked as u64;
        self.inconclusive += report.inconclusive as u64;
        self.acked_writes += report.acked_writes;
        self.acked_lost += report.acked_lost;
        self.snapshots_installed += report.snapshots_installed;
        self.leases_expired += report.leases_expired;
        self.watch_responses += report.watch_responses;
        self.changes_proposed += report.changes_proposed;
        self.configurations += report.configurations;
        self.lease_reads.add(report.lease_reads);
    }

    /// The summary line the example prints last.
    pub fn line(&self) -> String {
        format!(
            "seeds={} violations={} ops_checked={} acked_writes_lost={} watch_responses_checked={} \
             membership_changes={} configurations={} lease_reads_local={} lease_reads_waited={} \
             lease_reads_forwarded={}",
            self.seeds,
            self.violations,
            self.ops_checked,
            self.acked_lost,
            self.watch_responses,
            self.changes_proposed,
            self.configurations,
            self.lease_reads.local,
            self.lease_reads.waited,
            self.lease_reads.forwarded,
        )
    }
}
