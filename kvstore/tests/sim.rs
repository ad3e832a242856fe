//! The whole-replica simulator inside `cargo test`: a bounded number of clean seeds for 3
//! and 5 nodes, and every negative control, each of which an oracle must catch.

use leasekv_kvstore::log::LogBreakage;
use leasekv_kvstore::sim::{run_seed, run_seeds, KvSimConfig};

fn assert_clean(nodes: usize, seeds: u64, base: u64) {
    let config = KvSimConfig::new(nodes, 1000, 0.05, 0.01);
    let summary = run_seeds(&config, base, seeds, |_| {});
    assert_eq!(summary.violations, 0, "{nodes} nodes: {:#?}", summary.first);
    assert_eq!(summary.acked_lost, 0);
    assert_eq!(summary.inconclusive, 0, "the linearizability checker ran out of budget");
    assert!(summary.ops_checked > seeds * 300, "too few operations checked: {}", summary.ops_checked);
    assert!(summary.acked_writes > seeds * 200, "too few writes acknowledged: {}", summary.acked_writes);
    assert!(summary.snapshots_installed > 0, "no replica ever caught up through a snapshot");
    assert!(summary.leases_expired > 0, "no lease ever expired");
}

#[test]
fn three_nodes_keep_every_promise() {
    assert_clean(3, 25, 1000);
}

#[test]
fn five_nodes_keep_every_promise() {
    assert_clean(5, 25, 2000);
}

/// Runs seeds until the control is caught; returns the first catching seed.
fn first_caught(breakage: LogBreakage, nodes: usize, max_seeds: u64) -> u64 {
    let config = KvSimConfig::new(nodes, 1000, 0.05, 0.01).with_breakage(breakage);
    for seed in 0..max_seeds {
        let report = run_seed(&config, seed);
        if !report.violations.is_empty() {
            return seed;
        }
    }
    panic!("negative control {} was not caught in {max_seeds} seeds", breakage.name());
}

#[test]
fn follower_reads_are_caught_by_the_linearizability_checker() {
    first_caught(LogBreakage::FollowerReads, 5, 100);
}

#[test]
fn early_ack_is_caught_as_lost_writes() {
    first_caught(LogBreakage::EarlyAck, 3, 100);
}

#[test]
fn skipping_phase1_is_caught_as_divergence() {
    first_caught(LogBreakage::SkipPhase1, 3, 100);
}

#[test]
fn deposed_expiry_is_caught_by_the_lease_oracle() {
    first_caught(LogBreakage::DeposedExpiry, 3, 100);
}

#[test]
fn a_seed_replays_exactly() {
    let config = KvSimConfig::new(3, 300, 0.05, 0.01);
    let a = run_seed(&config, 77);
    let b = run_seed(&config, 77);
    assert_eq!((a.ops_checked, a.acked_writes, a.slots, a.ops_ok), (b.ops_checked, b.acked_writes, b.slots, b.ops_ok));
}
