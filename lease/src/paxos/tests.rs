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

// --- Configuration epochs (docs/membership.md, rule 4) ------------------------------------

fn deliver_at(node: &mut LeaseNode, now: Instant, from: u32, epoch: u64, body: Body) {
    node.handle_message(now, NodeId(from), Message { resource: R, epoch, body });
}

/// The messages `node` sent, with destination and epoch.
fn sent_with_epochs(node: &mut LeaseNode) -> Vec<(NodeId, u64, Body)> {
    node.take_output()
        .0
        .into_iter()
        .filter_map(|e| match e.msg {
            ElectionMessage::PaxosLease(m) => Some((e.to, m.epoch, m.body)),
            _ => None,
        })
        .collect()
}

fn b(counter: u64, node: u32) -> Ballot {
    Ballot { counter, epoch: 1, node: NodeId(node) }
}

#[test]
fn acceptor_refuses_rounds_from_an_older_configuration() {
    let mut n2 = node(2, 3, LeaseConfig::default());
    n2.set_configuration(at(0), 1, &ids(3), &[]);
    deliver_at(&mut n2, at(0), 1, 0, Body::PrepareRequest { ballot: b(1, 1) });
    let proposal = Proposal { owner: NodeId(1), duration: Duration::from_millis(500) };
    deliver_at(&mut n2, at(0), 1, 0, Body::ProposeRequest { ballot: b(2, 1), proposal });
    let out = sent_with_epochs(&mut n2);
    assert_eq!(
        out,
        vec![
            (NodeId(1), 1, Body::StaleConfiguration { ballot: b(1, 1), epoch: 1 }),
            (NodeId(1), 1, Body::StaleConfiguration { ballot: b(2, 1), epoch: 1 }),
        ]
    );
    // Neither promised nor accepted anything.
    assert!(n2.acceptor(R).is_none_or(|a| a.promised() == Ballot::ZERO && a.accepted(at(0)).is_none()));
    // The same round at the acceptor's epoch is answered.
    deliver_at(&mut n2, at(0), 1, 1, Body::PrepareRequest { ballot: b(3, 1) });
    assert!(matches!(sent_with_epochs(&mut n2)[..], [(_, 1, Body::PrepareResponse { .. })]));
}

#[test]
fn a_later_epoch_seen_in_a_message_is_only_a_hint() {
    let mut n2 = node(2, 3, LeaseConfig::default());
    let proposal = Proposal { owner: NodeId(1), duration: Duration::from_millis(500) };
    deliver_at(&mut n2, at(0), 1, 0, Body::ProposeRequest { ballot: b(1, 1), proposal });
    sent_with_epochs(&mut n2);
    // A hint from a node at epoch 3 (a new voter n4 this node does not know yet).
    let learned = Body::Learned { owner: NodeId(4), ballot: b(1, 4), duration: Duration::from_millis(1) };
    deliver_at(&mut n2, at(1), 4, 3, learned);
    assert_eq!((n2.seen_epoch(), n2.current_epoch()), (3, 0), "seen, not applied");
    assert!(n2.may_compete(), "what a node refuses and whether it competes follow what it applied");
    // Rounds of the applied epoch are still answered, and the lease is kept.
    deliver_at(&mut n2, at(2), 3, 0, Body::PrepareRequest { ballot: b(5, 3) });
    let out = sent_with_epochs(&mut n2);
    assert!(
        matches!(&out[..], [(_, 0, Body::PrepareResponse { accepted: Some(l), .. })] if l.owner == NodeId(1)),
        "{out:?}"
    );
    // Once this node applied epoch 3 (durably, from the log), the old epoch is refused.
    n2.set_configuration(at(3), 3, &ids(4), &[]);
    deliver_at(&mut n2, at(3), 1, 0, Body::ProposeRequest { ballot: b(6, 1), proposal });
    assert!(matches!(sent_with_epochs(&mut n2)[..], [(_, 3, Body::StaleConfiguration { epoch: 3, .. })]));
}

#[test]
fn a_new_voter_at_a_later_epoch_is_answered_before_this_node_applies_it() {
    let mut n2 = node(2, 3, LeaseConfig::default());
    deliver_at(&mut n2, at(0), 9, 1, Body::PrepareRequest { ballot: b(1, 9) });
    assert!(matches!(sent_with_epochs(&mut n2)[..], [(to, 0, Body::PrepareResponse { .. })] if to == NodeId(9)));
}

#[test]
fn a_round_refused_for_a_stale_configuration_ends_at_once() {
    let (mut n1, ballot) = preparing(LeaseConfig::default());
    deliver_at(&mut n1, at(1), 2, 2, Body::StaleConfiguration { ballot, epoch: 2 });
    assert_eq!(n1.seen_epoch(), 2);
    // A late promise for the abandoned round changes nothing.
    deliver_at(&mut n1, at(2), 3, 2, Body::PrepareResponse { ballot, accepted: None });
    assert!(!proposed(&sent(&mut n1).0));
    // Once the log brought it to epoch 2, its rounds carry that epoch.
    n1.set_configuration(at(3), 2, &ids(3), &[]);
    let retry = n1.poll_timeout().expect("competes again");
    n1.on_timeout(retry);
    let out = sent_with_epochs(&mut n1);
    assert!(out.iter().any(|(_, e, b)| *e == 2 && matches!(b, Body::PrepareRequest { .. })), "{out:?}");
}

#[test]
fn proposer_counts_only_the_voters_of_its_configuration() {
    let mut n1 = node(1, 3, LeaseConfig::default());
    // Voters 1, 2, 3, 4, 5 (majority 3), learners 6 and 7.
    n1.set_configuration(at(0), 1, &ids(5), &[NodeId(6), NodeId(7)]);
    n1.acquire(at(0), R);
    let out = sent_with_epochs(&mut n1);
    let ballot = prepare_ballot(&out.iter().map(|(to, _, b)| (*to, b.clone())).collect::<Vec<_>>());
    let mut prepared: Vec<NodeId> = out.iter().map(|(to, _, _)| *to).collect();
    prepared.sort();
    assert_eq!(prepared, vec![NodeId(2), NodeId(3), NodeId(4), NodeId(5)], "requests go to the voters only");
    // Learners and a stranger answering do not count: self + n2 are 2 of 5.
    for from in [6, 7, 8, 2] {
        deliver_at(&mut n1, at(1), from, 1, Body::PrepareResponse { ballot, accepted: None });
    }
    assert!(!proposed(&sent(&mut n1).0));
    deliver_at(&mut n1, at(1), 3, 1, Body::PrepareResponse { ballot, accepted: None });
    assert!(proposed(&sent(&mut n1).0));
    for from in [6, 7, 8, 2] {
        deliver_at(&mut n1, at(2), from, 1, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    }
    assert!(n1.mastership(at(2), R).is_none());
    deliver_at(&mut n1, at(2), 3, 1, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    assert!(n1.mastership(at(2), R).is_some());
    // The learners hear who the master is.
    let hinted: Vec<NodeId> = sent_with_epochs(&mut n1)
        .into_iter()
        .filter(|(_, _, b)| matches!(b, Body::Learned { .. }))
        .map(|(to, _, _)| to)
        .collect();
    assert!(hinted.contains(&NodeId(6)) && hinted.contains(&NodeId(7)), "{hinted:?}");
}

#[cfg(feature = "negative-controls")]
#[test]
fn learner_counted_control_really_is_broken() {
    let config = LeaseConfig { breakage: Breakage::LearnerCounted, ..LeaseConfig::default() };
    let mut n1 = node(1, 3, config);
    n1.set_configuration(at(0), 1, &ids(3), &[NodeId(6), NodeId(7)]);
    n1.acquire(at(0), R);
    let ballot = prepare_ballot(&sent(&mut n1).0);
    deliver_at(&mut n1, at(1), 6, 1, Body::PrepareResponse { ballot, accepted: None });
    assert!(proposed(&sent(&mut n1).0), "self + a learner counted as 2 of 3");
}

#[test]
fn learner_never_competes_and_a_promoted_one_does() {
    let mut n4 = LeaseNode::new(NodeId(4), &ids(3), LeaseConfig::default(), FIRST, at(0), 7);
    n4.set_configuration(at(0), 1, &ids(3), &[NodeId(4)]);
    n4.acquire(at(0), R);
    assert!(sent(&mut n4).0.is_empty());
    assert_eq!(n4.poll_timeout(), None);
    n4.set_configuration(at(5), 2, &[NodeId(1), NodeId(2), NodeId(3), NodeId(4)], &[]);
    let at_ = n4.poll_timeout().expect("a voter competes");
    n4.on_timeout(at_);
    assert!(sent(&mut n4).0.iter().any(|(_, b)| matches!(b, Body::PrepareRequest { .. })));
}

#[test]
fn removed_master_releases_and_stops_until_it_is_a_voter_again() {
    let (mut n1, ballot) = elected(LeaseConfig::default());
    sent(&mut n1);
    n1.set_configuration(at(10), 1, &[NodeId(2), NodeId(3), NodeId(4)], &[]);
    assert!(n1.mastership(at(10), R).is_none());
    let (out, changes) = sent(&mut n1);
    assert!(matches!(changes[..], [LeadershipChange::Lost { .. }]), "{changes:?}");
    assert!(out.iter().any(|(_, b)| *b == Body::Release { ballot }), "{out:?}");
    assert_eq!(n1.poll_timeout(), None, "a removed node does not compete");
    n1.set_configuration(at(20), 2, &ids(4), &[]);
    assert!(n1.poll_timeout().is_some(), "a voter again: competes again");
}

#[test]
fn stale_configuration_calls_are_ignored() {
    let mut n1 = node(1, 3, LeaseConfig::default());
    n1.set_configuration(at(0), 2, &ids(3), &[]);
    n1.set_configuration(at(0), 1, &[NodeId(2), NodeId(3), NodeId(4)], &[]);
    assert_eq!(n1.conf_epoch(), 2);
    assert!(n1.voters().contains(NodeId(1)));
}

#[test]
fn rule_5_is_recorded_for_the_first_majority_round_of_each_epoch() {
    let config = LeaseConfig::default();
    let wait = config.cover_remote(config.max_lease_time);
    assert!(wait > config.max_lease_time);
    let (mut n1, _) = elected(config);
    assert_eq!(n1.change_allowed_after(R), Some((0, at(0).saturating_add(wait))));
    sent(&mut n1);
    // Epoch 1 adds voter 4: the holder keeps its lease and extends at once, at epoch 1.
    n1.set_configuration(at(100), 1, &ids(4), &[]);
    assert!(n1.mastership(at(100), R).is_some());
    let next = n1.poll_timeout().expect("extension at once");
    assert_eq!(next, at(100));
    n1.on_timeout(next);
    let out = sent_with_epochs(&mut n1);
    assert!(out.iter().all(|(_, e, _)| *e == 1));
    let ballot = prepare_ballot(&out.iter().map(|(to, _, b)| (*to, b.clone())).collect::<Vec<_>>());
    for from in [2, 3] {
        deliver_at(&mut n1, at(101), from, 1, Body::PrepareResponse { ballot, accepted: None });
    }
    deliver_at(&mut n1, at(102), 2, 1, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    assert_eq!(n1.change_allowed_after(R).map(|(e, _)| e), Some(0), "2 of 4 is not a majority of epoch 1");
    deliver_at(&mut n1, at(103), 4, 1, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    assert_eq!(n1.change_allowed_after(R), Some((1, at(103).saturating_add(wait))));
}

#[test]
fn rule_5_counts_only_acceptors_that_applied_the_configuration() {
    let config = LeaseConfig::default();
    let (mut n1, _) = elected(config);
    sent(&mut n1);
    n1.set_configuration(at(100), 1, &ids(4), &[]);
    let next = n1.poll_timeout().expect("extension at once");
    n1.on_timeout(next);
    let out = sent_with_epochs(&mut n1);
    let ballot = prepare_ballot(&out.iter().map(|(to, _, b)| (*to, b.clone())).collect::<Vec<_>>());
    for from in [2, 3] {
        deliver_at(&mut n1, at(101), from, 1, Body::PrepareResponse { ballot, accepted: None });
    }
    // n2 has applied epoch 1; n3 has not (it answers at epoch 0): the lease is extended by a
    // majority, but not every acceptor of that majority refuses epoch 0 yet.
    deliver_at(&mut n1, at(102), 2, 1, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    deliver_at(&mut n1, at(102), 3, 0, Body::ProposeResponse { ballot, accepted: true, promised: ballot });
    assert!(n1.mastership(at(102), R).is_some());
    assert_eq!(n1.change_allowed_after(R).map(|(e, _)| e), Some(0), "n3 had not applied epoch 1");
}
