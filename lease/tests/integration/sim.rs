//! The deterministic simulator, as part of `cargo test`: every backend stays safe over
//! hundreds of seeds (PaxosLease with and without membership changes), a quiet majority
//! always elects a master, and every negative control (one deliberately broken safety rule)
//! is caught by the safety oracle.

use leasekv_lease::backend::BackendKind;
use leasekv_lease::config::Breakage;
use leasekv_lease::sim::{run_seed, run_seeds, SimConfig};
use std::time::Duration;

const SEEDS: u64 = 500;
/// Seeds a negative control may need before the oracle catches it (it stops at the first),
/// from each of [`CONTROL_BASES`]: the drills of the chaos phase make every control's window
/// common enough to be met within these from any base.
const CONTROL_SEEDS: u64 = 300;
/// Two seed bases, one of them far from anything the simulator was tuned on.
const CONTROL_BASES: [u64; 2] = [0, 4_000_000];

fn config(backend: BackendKind) -> SimConfig {
    SimConfig::new(backend, 5, 0.2, 0.01)
}

fn assert_safe_and_live(backend: BackendKind, base: u64) {
    assert_config_safe_and_live(&config(backend), base);
}

fn assert_config_safe_and_live(c: &SimConfig, base: u64) -> leasekv_lease::sim::Summary {
    let backend = c.backend;
    let summary = run_seeds(c, base, SEEDS, |_| {});
    assert_eq!(summary.violations, 0, "{backend}: {:?}", summary.examples);
    assert!(
        summary.liveness_failures.is_empty(),
        "{backend}: no master within {:?} of a quiet majority in seeds {:?}",
        c.liveness_bound(),
        summary.liveness_failures
    );
    assert!(summary.acquire.len() as u64 == SEEDS, "{backend}: every seed elects a first master");
    summary
}

#[test]
fn paxoslease_is_safe_and_live() {
    let c = config(BackendKind::PaxosLease);
    assert!(c.membership, "PaxosLease runs with membership changes by default");
    assert_safe_and_live(BackendKind::PaxosLease, 10_000);
}

#[test]
fn paxoslease_with_a_fixed_membership_is_safe_and_live() {
    let mut c = config(BackendKind::PaxosLease);
    c.membership = false;
    let summary = assert_config_safe_and_live(&c, 40_000);
    assert_eq!(summary.membership.changes(), 0);
}

/// Membership changes of every kind happen, during the chaos too, and none breaks safety or
/// the quiet phase's liveness (the quiet majority is one of the latest configuration's
/// voters); a removed node that comes back with its old configuration never wins.
#[test]
fn paxoslease_is_safe_and_live_through_membership_changes() {
    let c = config(BackendKind::PaxosLease);
    let summary = assert_config_safe_and_live(&c, 50_000);
    let m = summary.membership;
    assert!(m.changes() >= 3 * SEEDS, "about five changes a seed expected: {m:?}");
    assert!(m.learners_added > 0 && m.promoted > 0 && m.removed > 0 && m.removed_master > 0, "{m:?}");
    assert!(m.returned > 0, "removed nodes come back with their old configuration: {m:?}");
    assert_eq!(m.won_by_returned, 0, "a removed node won with its old configuration: {m:?}");
    assert_eq!(m.two_voters_added, 0, "rule 1 holds without the control");
}

#[test]
fn lease_tracker_is_safe_and_live_while_the_tracker_is_up() {
    assert_safe_and_live(BackendKind::LeaseTracker, 20_000);
}

#[test]
fn lease_tracker_is_a_single_point_of_failure() {
    let summary = run_seeds(&config(BackendKind::LeaseTracker), 20_000, SEEDS, |_| {});
    assert!(summary.elected_seeds < SEEDS, "seeds whose quiet phase kept the tracker down cannot elect anyone");
}

#[test]
fn naive_majority_is_safe_but_deadlocks_under_contention() {
    let naive = run_seeds(&config(BackendKind::NaiveMajority), 30_000, SEEDS, |_| {});
    let paxos = run_seeds(&config(BackendKind::PaxosLease), 30_000, SEEDS, |_| {});
    assert_eq!(naive.violations, 0, "{:?}", naive.examples);
    let p50 =
        |s: &leasekv_lease::sim::Summary| leasekv_lease::sim::percentile(&s.acquire, 50.0).unwrap_or(Duration::MAX);
    assert!(p50(&naive) > 10 * p50(&paxos), "naive {:?} vs paxoslease {:?}", p50(&naive), p50(&paxos));
}

#[test]
fn a_seed_replays_exactly() {
    let mut c = config(BackendKind::PaxosLease);
    c.trace = true;
    let a = run_seed(&c, 42);
    let b = run_seed(&c, 42);
    assert!(a.trace.len() > 100);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.messages, b.messages);
    assert_ne!(run_seed(&c, 43).trace, a.trace);
}

fn caught(breakage: Breakage) {
    let mut c = config(BackendKind::PaxosLease);
    c.lease.breakage = breakage;
    for base in CONTROL_BASES {
        let found = (base..base + CONTROL_SEEDS).any(|seed| !run_seed(&c, seed).violations.is_empty());
        assert!(found, "negative control {} was not caught in {CONTROL_SEEDS} seeds from seed {base}", breakage.name());
    }
}

#[test]
fn control_no_quarantine_is_caught() {
    caught(Breakage::NoQuarantine);
}

#[test]
fn control_no_drift_margin_is_caught() {
    caught(Breakage::NoDriftMargin);
}

#[test]
fn control_count_duplicates_is_caught() {
    caught(Breakage::CountDuplicates);
}

#[test]
fn control_release_any_ballot_is_caught() {
    caught(Breakage::ReleaseAnyBallot);
}

#[test]
fn control_late_timer_is_caught() {
    caught(Breakage::LateTimer);
}

#[test]
fn control_hand_over_keeps_lease_is_caught() {
    caught(Breakage::HandOverKeepsLease);
}

#[test]
fn control_two_voters_at_once_is_caught() {
    caught(Breakage::TwoVotersAtOnce);
}

#[test]
fn control_learner_counted_is_caught() {
    caught(Breakage::LearnerCounted);
}

#[test]
fn control_no_change_wait_is_caught() {
    caught(Breakage::NoChangeWait);
}

#[test]
fn uncontended_acquire_takes_two_round_trips() {
    // A 3-node cluster where only node 1 competes, with a fixed 1 ms one-way delay.
    use leasekv_lease::paxos::LeaseNode;
    use leasekv_lease::{ElectionMessage, Instant, LeadershipChange, LeaseConfig, NodeId, ResourceId, RestartEpoch};
    let peers: Vec<NodeId> = (1..=3).map(NodeId).collect();
    let first = RestartEpoch { value: 1, first_start: true };
    let mut nodes: Vec<LeaseNode> =
        peers.iter().map(|&id| LeaseNode::new(id, &peers, LeaseConfig::default(), first, Instant::ZERO, 1)).collect();
    let delay = Duration::from_millis(1);
    nodes[0].acquire(Instant::ZERO, ResourceId::MASTER);
    let mut now = Instant::ZERO;
    let mut in_flight: Vec<(NodeId, NodeId, ElectionMessage)> = Vec::new();
    for _ in 0..10 {
        let mut elected = false;
        for node in nodes.iter_mut() {
            let (messages, changes) = node.take_output();
            elected |= changes.iter().any(|(_, c)| matches!(c, LeadershipChange::Elected { .. }));
            in_flight.extend(messages.into_iter().map(|e| (node.id(), e.to, e.msg)));
        }
        if elected {
            assert_eq!(now, Instant::ZERO.saturating_add(4 * delay), "2 round trips of 2 ms");
            return;
        }
        now = now.saturating_add(delay);
        for (from, to, msg) in std::mem::take(&mut in_flight) {
            if let ElectionMessage::PaxosLease(m) = msg {
                nodes[(to.0 - 1) as usize].handle_message(now, from, m);
            }
        }
    }
    panic!("not elected after 10 hops");
}
