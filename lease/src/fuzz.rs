//! Target `election_messages` (docs/fuzzing.md): structurally valid but hostile election
//! messages (mutated from what honest cores send each other) delivered to a running
//! three-node election in memory, for both real backends, from any member's id or a
//! stranger's, as the node's peer service hands them to the election core.
//!
//! A member may lie, so what is checked is what no message may break: no panic; no node
//! believes it is master beyond its own lease time from now (a message cannot stretch a
//! lease); a timer asked for is never in the past after it fired; and once the hostile
//! messages stop, the three honest cores elect a master again within a few lease times.

#[path = "../../fuzz/support.rs"]
mod support;

use crate::backend::BackendKind;
use crate::config::LeaseConfig;
use crate::core::ElectionCore;
use crate::epoch::RestartEpoch;
use crate::ids::NodeId;
use crate::message::ElectionMessage;
use crate::time::Instant;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;

const TARGET: &str = "election_messages";
const LEASE: Duration = Duration::from_millis(1000);
const STEP: Duration = Duration::from_millis(5);

struct Election {
    cores: Vec<Box<dyn ElectionCore>>,
    queue: VecDeque<(NodeId, NodeId, ElectionMessage)>,
    now: Instant,
    config: LeaseConfig,
    sent: Vec<ElectionMessage>,
}

impl Election {
    fn new(backend: BackendKind) -> Self {
        let ids: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let config = LeaseConfig::with_lease_time(LEASE);
        let now = Instant::from_nanos(1_000_000_000);
        let epoch = RestartEpoch { value: 1, first_start: true };
        let cores = ids
            .iter()
            .map(|&id| {
                backend
                    .build_core(id, &ids, Some(NodeId(1)), config.clone(), epoch, now, u64::from(id.0))
                    .expect("a valid election configuration")
            })
            .collect();
        Election { cores, queue: VecDeque::new(), now, config, sent: Vec::new() }
    }

    fn core(&mut self, id: NodeId) -> Option<&mut Box<dyn ElectionCore>> {
        self.cores.iter_mut().find(|c| c.id() == id)
    }

    /// One step of time: timers fired, outputs taken, every queued message delivered.
    fn step(&mut self) {
        self.now = Instant::from_nanos(self.now.as_nanos() + STEP.as_nanos() as u64);
        let now = self.now;
        for core in &mut self.cores {
            if core.poll_timeout().is_some_and(|at| at <= now) {
                core.handle_timeout(now);
                if let Some(at) = core.poll_timeout() {
                    // Not an error on its own, but a core asking again for an instant it
                    // just handled would spin the driver.
                    assert!(at > now || core.poll_timeout() == Some(at), "timer");
                }
            }
        }
        for _ in 0..1_000 {
            for core in &mut self.cores {
                let from = core.id();
                for envelope in core.take_output().messages {
                    self.queue.push_back((from, envelope.to, envelope.msg));
                }
            }
            let Some((from, to, message)) = self.queue.pop_front() else { break };
            self.sent.push(message.clone());
            if let Some(core) = self.core(to) {
                core.handle_message(now, from, message);
            }
        }
        self.check_leases();
    }

    fn run(&mut self, time: Duration) {
        for _ in 0..time.as_millis() / STEP.as_millis() {
            self.step();
        }
    }

    /// No node is master beyond its own maximum lease time from now.
    fn check_leases(&self) {
        let limit = self.now.as_nanos().saturating_add(self.config.max_lease_time.as_nanos() as u64);
        for core in &self.cores {
            if let Some(m) = core.mastership(self.now) {
                assert!(
                    m.valid_until.as_nanos() <= limit,
                    "node {} holds a lease until {:?}, beyond now + M",
                    core.id(),
                    m.valid_until
                );
            }
        }
    }

    fn masters(&self) -> usize {
        self.cores.iter().filter(|c| c.mastership(self.now).is_some()).count()
    }
}

/// Honest traffic of a backend: an election, renewals, a step-down and a new election.
fn honest_messages(backend: BackendKind) -> Vec<ElectionMessage> {
    let mut election = Election::new(backend);
    election.run(LEASE * 3);
    let now = election.now;
    if let Some(master) = election.cores.iter_mut().find(|c| c.mastership(now).is_some()) {
        master.step_down(now);
    }
    election.run(LEASE * 3);
    election.sent
}

/// One hostile delivery: to a core (0..3), claiming an id (1..=3, or 0 and 9: strangers).
type Delivery = (usize, u32, Vec<u8>);

fn run(backend: BackendKind, deliveries: Vec<Delivery>) {
    let mut election = Election::new(backend);
    election.run(LEASE * 2);
    for (to, from, bytes) in deliveries {
        let Ok(message) = decode(&bytes) else { continue };
        let now = election.now;
        election.cores[to % 3].handle_message(now, NodeId(from), message);
        election.step();
    }
    // The hostile messages stop: the honest cores must have a master again soon.
    election.run(LEASE * 6);
    assert_eq!(election.masters(), 1, "{backend}: no single master six lease times after the hostile messages");
}

fn decode(bytes: &[u8]) -> Result<ElectionMessage, postcard::Error> {
    postcard::from_bytes(bytes)
}

fn backends() -> [BackendKind; 2] {
    [BackendKind::PaxosLease, BackendKind::LeaseTracker]
}

#[test]
#[ignore = "regenerates fuzz/corpus/election_messages"]
fn write_corpus() {
    let mut kinds = std::collections::BTreeMap::new();
    for backend in backends() {
        for message in honest_messages(backend) {
            // One seed per message kind: "paxoslease-preparerequest", "tracker-granted", ...
            let debug = format!("{message:?}");
            let kind =
                debug.split("body: ").nth(1).or_else(|| debug.split_once('(').map(|(_, rest)| rest)).unwrap_or("");
            let kind: String = kind.chars().take_while(|c| c.is_alphanumeric()).collect();
            let backend: String = debug.chars().take_while(|c| c.is_alphanumeric()).collect();
            kinds.entry(format!("{backend}-{kind}").to_lowercase()).or_insert(message);
        }
    }
    // Known-tricky: ballots at the top of the counter, a lease asked for for ever.
    use crate::ballot::Ballot;
    use crate::paxos::{Body, Message};
    let top = Ballot { counter: u64::MAX, epoch: u32::MAX, node: NodeId(2) };
    let paxos =
        |body| ElectionMessage::PaxosLease(Message { resource: crate::ids::ResourceId::MASTER, epoch: 0, body });
    kinds.insert("tricky-prepare-top-ballot".into(), paxos(Body::PrepareRequest { ballot: top }));
    let low = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
    kinds.insert("tricky-rejected-by-top-ballot".into(), paxos(Body::PrepareRejected { ballot: low, promised: top }));
    let request = crate::tracker::TrackerMessage::Request { request: top, duration: Duration::MAX };
    kinds.insert("tricky-tracker-request-for-ever".into(), ElectionMessage::Tracker(request));
    for (name, message) in kinds {
        let bytes = postcard::to_allocvec(&message).expect("encodes");
        support::write_seed(env!("CARGO_MANIFEST_DIR"), TARGET, &format!("{name}.bin"), &bytes);
    }
}

#[test]
fn corpus_and_mutations() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let mut seeds: Vec<Vec<u8>> = support::corpus(dir, TARGET).into_iter().map(|(_, bytes)| bytes).collect();
    for backend in backends() {
        for bytes in &seeds {
            run(backend, vec![(0, 2, bytes.clone()), (1, 3, bytes.clone())]);
        }
        seeds.extend(honest_messages(backend).iter().map(|m| postcard::to_allocvec(m).expect("encodes")));
    }
    let from = prop_oneof![1u32..=3, Just(0), Just(9)];
    let delivery = (0usize..3, from, support::mutated(seeds, &[]));
    let backend = prop::sample::select(backends().to_vec());
    proptest!(support::config(500), |(backend in backend, deliveries in proptest::collection::vec(delivery, 1..6))| {
        run(backend, deliveries)
    });
}

/// Finding: a ballot counter at `u64::MAX` from a member made the proposer overflow when it
/// raised its own counter past it (a panic; in release a wrap to 0 and a node that could
/// never win again). Such ballots are now dropped on arrival.
#[test]
fn regression_top_ballot_counter() {
    use crate::ballot::Ballot;
    use crate::paxos::{Body, Message};
    let top = Ballot { counter: u64::MAX, epoch: 1, node: NodeId(2) };
    let low = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
    for body in [Body::PrepareRejected { ballot: low, promised: top }, Body::PrepareRequest { ballot: top }] {
        let message = ElectionMessage::PaxosLease(Message { resource: crate::ids::ResourceId::MASTER, epoch: 0, body });
        let bytes = postcard::to_allocvec(&message).expect("encodes");
        run(BackendKind::PaxosLease, vec![(0, 2, bytes.clone()), (1, 3, bytes.clone()), (2, 1, bytes)]);
    }
    assert!(!top.is_plausible() && Ballot { counter: Ballot::MAX_COUNTER, ..top }.is_plausible());
}
