//! Tests of the proposer's rules, driven through a [`LeaseNode`] with messages delivered by
//! hand.

use super::*;
use crate::ballot::Ballot;
#[cfg(feature = "negative-controls")]
use crate::config::Breakage;
use crate::config::LeaseConfig;
use crate::core::LeadershipChange;
use crate::epoch::RestartEpoch;
use crate::ids::{NodeId, ResourceId};
use crate::message::ElectionMessage;
use crate::time::Instant;
use std::time::Duration;

const R: ResourceId = ResourceId::MASTER;
const FIRST: RestartEpoch = RestartEpoch { value: 1, first_start: true };

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn ids(n: u32) -> Vec<NodeId> {
    (1..=n).map(NodeId).collect()
}

fn node(me: u32, n: u32, config: LeaseConfig) -> LeaseNode {
    LeaseNode::new(NodeId(me), &ids(n), config, FIRST, at(0), 7)
}

/// The PaxosLease bodies `node` sent, with their destinations.
fn sent(node: &mut LeaseNode) -> (Vec<(NodeId, Body)>, Vec<LeadershipChange>) {
    let (messages, changes) = node.take_output();
    let messages = messages
        .into_iter()
        .filter_map(|e| match e.msg {
            ElectionMessage::PaxosLease(m) => Some((e.to, m.body)),
            _ => None,
        })
        .collect();
    (messages, changes.into_iter().map(|(_, c)| c).collect())
}

fn deliver(node: &mut LeaseNode, now: Instant, from: u32, body: Body) {
    node.handle_message(now, NodeId(from), Message { resource: R, epoch: 0, body });
}

fn prepare_ballot(messages: &[(NodeId, Body)]) -> Ballot {
    messages
        .iter()
        .find_map(|(_, b)| match b {
            Body::PrepareRequest { ballot } => Some(*ballot),
            _ => None,
        })
        .expect("a PrepareRequest was sent")
}

/// A 3-node cluster's node 1 after it sent its first PrepareRequest, and that ballot.
fn preparing(config: LeaseConfig) -> (LeaseNode, Ballot) {
    let mut n1 = node(1, 3, config);
    n1.acquire(at(0), R);
    let ballot = prepare_ballot(&sent(&mut n1).0);
    (n1, ballot)
}

/// Node 1 of a 3-node cluster, elected at 0 ms with n2's help.
fn elected(config: LeaseConfig) -> (LeaseNode, Ballot) {
    let (mut n1, ballot) = preparing(config);
    deliver(&mut n1, at(0), 2, Body::PrepareResponse { ballot, accepted: None });
    deliver(&mut n1, at(0), 2, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    (n1, ballot)
}

/// A lease reported by an acceptor: `counter.epoch.node`, 500 ms left.
fn lease_of(node: u32, epoch: u32, counter: u64) -> AcceptedLease {
    AcceptedLease {
        ballot: Ballot { counter, epoch, node: NodeId(node) },
        owner: NodeId(node),
        remaining: Duration::from_millis(500),
    }
}

fn proposed(out: &[(NodeId, Body)]) -> bool {
    out.iter().any(|(_, b)| matches!(b, Body::ProposeRequest { .. }))
}

#[test]
fn uncontended_acquire_sends_prepare_then_propose_and_is_elected() {
    let mut n1 = node(1, 3, LeaseConfig::default());
    n1.acquire(at(0), R);
    let (out, _) = sent(&mut n1);
    let ballot = prepare_ballot(&out);
    assert_eq!(out.len(), 2, "prepare to both peers (its own acceptor answers locally)");
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: None });
    let (out, _) = sent(&mut n1);
    assert!(out.iter().all(|(_, b)| matches!(b, Body::ProposeRequest { .. })));
    deliver(&mut n1, at(2), 2, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    let (_, changes) = sent(&mut n1);
    assert!(matches!(changes[..], [LeadershipChange::Elected { .. }]));
    assert!(n1.mastership(at(2), R).is_some());
}

#[test]
fn timer_starts_before_the_propose_is_sent() {
    let config = LeaseConfig::default();
    let validity = config.holder_validity();
    let (mut n1, ballot) = preparing(config);
    // Majority of promises at 10 ms: the propose goes out and the timer starts then.
    deliver(&mut n1, at(10), 2, Body::PrepareResponse { ballot, accepted: None });
    sent(&mut n1);
    // The accept arrives much later; validity still counts from 10 ms.
    deliver(&mut n1, at(90), 2, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    let m = n1.mastership(at(90), R).expect("elected");
    assert_eq!(m.valid_until, at(10).saturating_add(validity));
}

#[cfg(feature = "negative-controls")]
#[test]
fn late_timer_control_really_is_broken() {
    let config = LeaseConfig { breakage: Breakage::LateTimer, ..LeaseConfig::default() };
    let validity = config.holder_validity();
    let (mut n1, ballot) = preparing(config);
    deliver(&mut n1, at(10), 2, Body::PrepareResponse { ballot, accepted: None });
    deliver(&mut n1, at(90), 2, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    assert_eq!(n1.mastership(at(90), R).map(|m| m.valid_until), Some(at(90).saturating_add(validity)));
}

#[test]
fn duplicated_answers_of_one_acceptor_count_once() {
    let mut n1 = node(1, 5, LeaseConfig::default());
    n1.acquire(at(0), R);
    let ballot = prepare_ballot(&sent(&mut n1).0);
    for _ in 0..5 {
        deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: None });
    }
    let (out, _) = sent(&mut n1);
    assert!(out.is_empty(), "self + n2 are 2 of 5: no majority, no propose; sent {out:?}");
    deliver(&mut n1, at(1), 3, Body::PrepareResponse { ballot, accepted: None });
    assert!(proposed(&sent(&mut n1).0));
}

#[cfg(feature = "negative-controls")]
#[test]
fn count_duplicates_control_really_is_broken() {
    let config = LeaseConfig { breakage: Breakage::CountDuplicates, ..LeaseConfig::default() };
    let mut n1 = node(1, 5, config);
    n1.acquire(at(0), R);
    let ballot = prepare_ballot(&sent(&mut n1).0);
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: None });
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: None });
    assert!(proposed(&sent(&mut n1).0));
}

#[test]
fn another_nodes_running_lease_blocks_the_round() {
    let (mut n1, ballot) = preparing(LeaseConfig::default());
    let theirs = lease_of(2, 1, 1);
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: Some(theirs) });
    deliver(&mut n1, at(1), 3, Body::PrepareResponse { ballot, accepted: Some(theirs) });
    let (out, _) = sent(&mut n1);
    assert!(!proposed(&out));
    assert_eq!(n1.holder_hint(at(1), R), Some(NodeId(2)));
    // It waits out the other lease before trying again.
    assert!(n1.poll_timeout().expect("a retry is scheduled") >= at(501));
}

#[test]
fn own_lease_from_before_a_restart_is_not_extended() {
    let restarted = RestartEpoch { value: 2, first_start: false };
    let mut n1 = LeaseNode::new(NodeId(1), &ids(3), LeaseConfig::default(), restarted, at(0), 7);
    n1.acquire(at(0), R);
    let ballot = prepare_ballot(&sent(&mut n1).0);
    let old_self = lease_of(1, 1, 40);
    // Its own acceptor is in quarantine, so n2 and n3 decide.
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: Some(old_self) });
    deliver(&mut n1, at(1), 3, Body::PrepareResponse { ballot, accepted: Some(old_self) });
    assert!(!proposed(&sent(&mut n1).0));
}

#[test]
fn own_lease_of_this_incarnation_is_extended() {
    let (mut n1, ballot) = preparing(LeaseConfig::default());
    let mine = lease_of(1, 1, 0);
    deliver(&mut n1, at(1), 2, Body::PrepareResponse { ballot, accepted: Some(mine) });
    assert!(proposed(&sent(&mut n1).0));
}

#[test]
fn restarted_acceptor_is_silent_for_the_max_lease_time() {
    let config = LeaseConfig::default();
    let m = config.max_lease_time;
    let restarted = RestartEpoch { value: 2, first_start: false };
    let mut n2 = LeaseNode::new(NodeId(2), &ids(3), config, restarted, at(0), 7);
    let ballot = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
    deliver(&mut n2, at(0).saturating_add(m - Duration::from_millis(1)), 1, Body::PrepareRequest { ballot });
    assert!(sent(&mut n2).0.is_empty(), "quarantined acceptor must not answer");
    deliver(&mut n2, at(0).saturating_add(m), 1, Body::PrepareRequest { ballot });
    assert_eq!(sent(&mut n2).0.len(), 1);
}

#[test]
fn first_start_needs_no_quarantine() {
    let mut n2 = node(2, 3, LeaseConfig::default());
    let ballot = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
    deliver(&mut n2, at(0), 1, Body::PrepareRequest { ballot });
    assert_eq!(sent(&mut n2).0.len(), 1);
}

#[cfg(feature = "negative-controls")]
#[test]
fn no_quarantine_control_really_is_broken() {
    let config = LeaseConfig { breakage: Breakage::NoQuarantine, ..LeaseConfig::default() };
    let restarted = RestartEpoch { value: 2, first_start: false };
    let n2 = LeaseNode::new(NodeId(2), &ids(3), config, restarted, at(0), 7);
    assert_eq!(n2.quarantine_until(), at(0));
}

#[test]
fn rejection_pushes_the_counter_past_the_promise() {
    let (mut n1, ballot) = preparing(LeaseConfig::default());
    let promised = Ballot { counter: 41, epoch: 3, node: NodeId(3) };
    deliver(&mut n1, at(1), 2, Body::PrepareRejected { ballot, promised });
    deliver(&mut n1, at(1), 3, Body::PrepareRejected { ballot, promised });
    // The round failed; the retry comes after a random back-off and outbids 41.
    let retry = n1.poll_timeout().expect("retry scheduled");
    n1.on_timeout(retry);
    let next = prepare_ballot(&sent(&mut n1).0);
    assert!(next > promised && next.counter == 42, "{next} must outbid {promised}");
}

#[test]
fn failed_round_backs_off_randomly() {
    let config = LeaseConfig::default();
    let (lo, hi) = (config.backoff_min, config.backoff_max);
    let mut retries = Vec::new();
    for seed in 0..20 {
        let mut n1 = LeaseNode::new(NodeId(1), &ids(3), config.clone(), FIRST, at(0), seed);
        n1.acquire(at(0), R);
        let ballot = prepare_ballot(&sent(&mut n1).0);
        let promised = Ballot { counter: 9, epoch: 1, node: NodeId(3) };
        deliver(&mut n1, at(1), 2, Body::PrepareRejected { ballot, promised });
        deliver(&mut n1, at(1), 3, Body::PrepareRejected { ballot, promised });
        let retry = n1.poll_timeout().expect("retry").saturating_since(at(1));
        assert!(retry >= lo && retry <= hi, "back-off {retry:?} outside [{lo:?}, {hi:?}]");
        retries.push(retry);
    }
    retries.sort();
    retries.dedup();
    assert!(retries.len() > 10, "back-off must be random, got {retries:?}");
}

#[test]
fn holder_extends_well_before_expiry() {
    let config = LeaseConfig::default();
    let renew = config.renew_interval;
    let validity = config.holder_validity();
    let (mut n1, ballot) = elected(config);
    sent(&mut n1);
    let next = n1.poll_timeout().expect("renewal scheduled");
    assert_eq!(next, at(0).saturating_add(renew));
    assert!(renew < validity / 2);
    n1.on_timeout(next);
    let ballot2 = prepare_ballot(&sent(&mut n1).0);
    assert!(ballot2 > ballot);
}

#[test]
fn step_down_stops_believing_then_releases_by_ballot() {
    let (mut n1, ballot) = elected(LeaseConfig::default());
    sent(&mut n1);
    n1.release(at(5), R, true);
    assert!(n1.mastership(at(5), R).is_none());
    let (out, changes) = sent(&mut n1);
    assert!(matches!(changes[..], [LeadershipChange::Lost { .. }]));
    assert!(out.iter().all(|(_, b)| *b == Body::Release { ballot }));
    assert_eq!(out.len(), 2);
    // Its own acceptor dropped the lease too.
    assert!(n1.acceptor(R).and_then(|a| a.accepted(at(5))).is_none());
}

#[test]
fn lease_expires_without_renewal() {
    let config = LeaseConfig::default();
    let validity = config.holder_validity();
    let (mut n1, _) = elected(config);
    let end = at(0).saturating_add(validity);
    assert!(n1.mastership(end, R).is_none(), "validity is exclusive at its end");
    // Renewals go unanswered; the timer reports the loss.
    let mut now = at(0);
    for _ in 0..1000 {
        match n1.poll_timeout() {
            Some(t) if t <= end => {
                now = t;
                n1.on_timeout(t);
            }
            _ => break,
        }
    }
    let (_, changes) = sent(&mut n1);
    assert!(changes.iter().any(|c| matches!(c, LeadershipChange::Lost { .. })), "{changes:?} by {now:?}");
}

#[test]
fn messages_from_outside_the_cluster_are_ignored() {
    let mut n1 = node(1, 3, LeaseConfig::default());
    let ballot = Ballot { counter: 1, epoch: 1, node: NodeId(99) };
    deliver(&mut n1, at(0), 99, Body::PrepareRequest { ballot });
    assert!(sent(&mut n1).0.is_empty());
}
