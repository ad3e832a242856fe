//! Property tests: ballot order, and clocks of the simulator.

use leasekv_lease::paxos::{Body, LeaseNode, Message};
use leasekv_lease::sim::SimClock;
use leasekv_lease::{Ballot, ElectionMessage, Instant, LeaseConfig, NodeId, ResourceId, RestartEpoch};
use proptest::prelude::*;

fn ballot() -> impl Strategy<Value = Ballot> {
    (0u64..1000, 0u32..5, 0u32..5).prop_map(|(counter, epoch, node)| Ballot { counter, epoch, node: NodeId(node) })
}

proptest! {
    /// Ballots compare by counter, then restart epoch, then node id.
    #[test]
    fn ballot_order_is_lexicographic(a in ballot(), b in ballot()) {
        let key = |x: &Ballot| (x.counter, x.epoch, x.node.0);
        prop_assert_eq!(a.cmp(&b), key(&a).cmp(&key(&b)));
        prop_assert_eq!(a == b, key(&a) == key(&b));
    }

    /// Two incarnations of the same node never issue the same ballot, and every ballot a
    /// proposer issues outbids every promise it was told about.
    #[test]
    fn proposer_ballots_are_unique_and_outbid_rejections(
        promises in proptest::collection::vec(ballot(), 1..20),
        epoch in 1u32..100,
    ) {
        let peers: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let mut node = LeaseNode::new(
            NodeId(1), &peers, LeaseConfig::default(),
            RestartEpoch { value: epoch, first_start: true }, Instant::ZERO, 1,
        );
        let mut now = Instant::ZERO;
        node.acquire(now, ResourceId::MASTER);
        let mut last: Option<Ballot> = None;
        for promised in promises {
            let (out, _) = node.take_output();
            let Some(ballot) = out.iter().find_map(|e| match &e.msg {
                ElectionMessage::PaxosLease(Message { body: Body::PrepareRequest { ballot }, .. }) => Some(*ballot),
                _ => None,
            }) else { break };
            prop_assert_eq!((ballot.epoch, ballot.node), (epoch, NodeId(1)));
            if let Some(prev) = last {
                prop_assert!(ballot > prev, "{} must exceed {}", ballot, prev);
            }
            last = Some(ballot);
            for from in [2, 3] {
                let body = Body::PrepareRejected { ballot, promised };
                node.handle_message(now, NodeId(from), Message { resource: ResourceId::MASTER, epoch: 0, body });
            }
            now = node.poll_timeout().expect("a retry is scheduled after a rejection");
            node.on_timeout(now);
            let (out, _) = node.take_output();
            if let Some(next) = out.iter().find_map(|e| match &e.msg {
                ElectionMessage::PaxosLease(Message { body: Body::PrepareRequest { ballot }, .. }) => Some(*ballot),
                _ => None,
            }) {
                prop_assert!(next.counter > promised.counter);
                // Feed it back so the next iteration sees it.
                last = Some(next);
                let body = Body::PrepareRejected { ballot: next, promised };
                node.handle_message(now, NodeId(2), Message { resource: ResourceId::MASTER, epoch: 0, body });
                now = node.poll_timeout().expect("retry");
                node.on_timeout(now);
            }
        }
    }

    /// A simulated clock's `real_at` is the exact inverse of `local`.
    #[test]
    fn sim_clock_real_at_inverts_local(offset in 0u64..1_000_000_000, rate in 0.9f64..1.1, local in 0u64..10_000_000_000u64) {
        let clock = SimClock::new(offset, rate);
        let target = Instant::from_nanos(offset + local);
        let real = clock.real_at(target);
        prop_assert!(clock.local(real) >= target);
        prop_assert!(real == 0 || clock.local(real - 1) < target);
    }
}
