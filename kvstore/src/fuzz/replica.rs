//! Target `log_messages`: structurally valid but hostile log messages (mutated from what
//! honest replicas send each other) delivered to a running three-replica cluster in memory,
//! from any member's id, as the node's peer service hands them to its replica. The
//! replicas are driven the way the node loop drives them (outputs taken, storage synced,
//! messages delivered, timers fired), with no election: node 1 is master.
//!
//! A member may lie (the log is Paxos, not Byzantine-tolerant), so what is checked is what
//! no message may break: no panic; applied slot and revision never go back; and afterwards
//! every replica still serves reads and holds a consistent state (its own snapshot
//! restores, with the same digest).

use super::support;
use crate::command::{Command, PutRequest, RangeRequest};
use crate::limits::Limits;
use crate::log::{LogBallot, LogMessage, ReadConsistency, Replica, ReplicaConfig};
use crate::state::StateMachine;
use crate::storage::MemoryStorage;
use crate::types::KeyRange;
use leasekv_lease::{Ballot, Instant, Mastership, NodeId};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;

const TARGET: &str = "log_messages";

struct Cluster {
    replicas: Vec<Replica<MemoryStorage>>,
    queue: VecDeque<(NodeId, NodeId, LogMessage)>,
    now: Instant,
    /// Every message sent, for the seeds.
    sent: Vec<LogMessage>,
    /// Per replica: the highest applied slot and revision seen.
    high: Vec<(u64, i64)>,
}

impl Cluster {
    fn new() -> Self {
        let ids: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let config = ReplicaConfig { snapshot_every: 4, ..ReplicaConfig::for_lease_time(Duration::from_secs(1)) };
        let replicas = ids
            .iter()
            .map(|&id| {
                Replica::open(id, &ids, config.clone(), Limits::default(), MemoryStorage::new(), 1)
                    .expect("a fresh replica opens")
            })
            .collect();
        let now = Instant::from_nanos(10_000_000_000);
        let mut cluster = Cluster { replicas, queue: VecDeque::new(), now, sent: Vec::new(), high: vec![(0, 0); 3] };
        let term = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
        let valid_until = Instant::from_nanos(now.as_nanos() + 1_000_000_000_000);
        cluster.replicas[0].set_mastership(now, Some(Mastership { term, valid_until }), Some(NodeId(1)));
        for r in &mut cluster.replicas[1..] {
            r.set_mastership(now, None, Some(NodeId(1)));
        }
        cluster.settle();
        cluster
    }

    /// Outputs taken and messages delivered until nothing moves (bounded).
    fn settle(&mut self) {
        for _ in 0..2_000 {
            for r in &mut self.replicas {
                let out = r.take_output();
                if out.needs_sync {
                    r.sync(self.now);
                }
                let from = r.id();
                for (to, message) in out.messages {
                    self.queue.push_back((from, to, message));
                }
            }
            let Some((from, to, message)) = self.queue.pop_front() else { return };
            self.sent.push(message.clone());
            if let Some(r) = self.replicas.iter_mut().find(|r| r.id() == to) {
                r.handle_message(self.now, from, message);
            }
            self.check_monotonic();
        }
    }

    fn tick(&mut self, by: Duration) {
        self.now = Instant::from_nanos(self.now.as_nanos() + by.as_nanos() as u64);
        for r in &mut self.replicas {
            if r.poll_timeout().is_some_and(|at| at <= self.now) {
                r.handle_timeout(self.now);
            }
        }
        self.settle();
    }

    fn put(&mut self, key: &str) {
        let put = Command::Put(PutRequest { key: key.into(), value: b"v".to_vec(), lease: 0, prev_kv: false });
        let _ = self.replicas[0].propose(self.now, put);
        self.settle();
    }

    fn check_monotonic(&mut self) {
        for (r, high) in self.replicas.iter().zip(&mut self.high) {
            let now = (r.applied_index(), r.state().revision());
            assert!(now.0 >= high.0, "replica {} applied slot went back: {} after {}", r.id(), now.0, high.0);
            assert!(now.1 >= high.1, "replica {} revision went back: {} after {}", r.id(), now.1, high.1);
            *high = now;
        }
    }

    /// Every replica still serves and holds a consistent state.
    fn check_consistent(&self) {
        let everything = RangeRequest { range: KeyRange { key: vec![0], range_end: vec![0] }, ..Default::default() };
        for r in &self.replicas {
            match r.read(self.now, &everything, ReadConsistency::Serializable) {
                Ok((answer, _)) => assert_eq!(answer.count as usize, r.state().key_count()),
                // A replica that stopped on purpose says why; anything else is a bug.
                Err(error) => assert!(!error.to_string().is_empty()),
            }
            let bytes = r.state().to_snapshot_bytes();
            let restored = StateMachine::from_snapshot_bytes(&bytes)
                .unwrap_or_else(|e| panic!("replica {}'s state does not restore from its own snapshot: {e}", r.id()));
            assert_eq!(restored.digest(), r.state().digest(), "replica {}", r.id());
        }
    }
}

/// Honest traffic: a takeover, a few writes (through a snapshot), a catch-up fetch.
fn honest_messages() -> Vec<LogMessage> {
    let mut cluster = Cluster::new();
    for i in 0..6 {
        cluster.put(&format!("k{i}"));
        cluster.tick(Duration::from_millis(50));
    }
    cluster.queue.push_back((NodeId(3), NodeId(1), LogMessage::Fetch { from: 1 }));
    cluster.settle();
    let mut state = StateMachine::new();
    state.apply(&Command::Put(PutRequest { key: b"s".to_vec(), value: vec![1], lease: 0, prev_kv: false }));
    cluster.sent.push(LogMessage::Snapshot { index: 2, data: state.to_snapshot_bytes() });
    cluster.sent
}

/// One hostile delivery: to a replica (0..3), claiming a member's id (1..=3), the bytes.
type Delivery = (usize, u32, Vec<u8>);

fn run(deliveries: Vec<Delivery>) {
    let mut cluster = Cluster::new();
    cluster.put("before");
    for (to, from, bytes) in deliveries {
        let Ok(message) = postcard::from_bytes::<LogMessage>(&bytes) else { continue };
        cluster.replicas[to % 3].handle_message(cluster.now, NodeId(from), message);
        cluster.check_monotonic();
        cluster.tick(Duration::from_millis(20));
    }
    cluster.put("after");
    cluster.tick(Duration::from_millis(500));
    cluster.check_consistent();
}

#[test]
#[ignore = "regenerates fuzz/corpus/log_messages"]
fn write_corpus() {
    let mut kinds = std::collections::BTreeMap::new();
    for message in honest_messages() {
        let name = format!("{message:?}").split([' ', '{', '(']).next().unwrap_or("message").to_lowercase();
        kinds.entry(name).or_insert(message);
    }
    for (name, message) in kinds {
        let bytes = postcard::to_allocvec(&message).expect("encodes");
        support::write_seed(env!("CARGO_MANIFEST_DIR"), TARGET, &format!("{name}.bin"), &bytes);
    }
    // Known-tricky: a commit far beyond anything chosen, from the current master's ballot.
    let commit = LogMessage::Commit { ballot: crate::log::LogBallot { round: 1, node: NodeId(1) }, commit: u64::MAX };
    let bytes = postcard::to_allocvec(&commit).expect("encodes");
    support::write_seed(env!("CARGO_MANIFEST_DIR"), TARGET, "commit-beyond-everything.bin", &bytes);
}

#[test]
fn corpus_and_mutations() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let mut seeds: Vec<Vec<u8>> = support::corpus(dir, TARGET).into_iter().map(|(_, bytes)| bytes).collect();
    // Every corpus message, alone, from every member to every replica.
    for bytes in &seeds {
        for to in 0..3 {
            for from in 1..=3 {
                run(vec![(to, from, bytes.clone())]);
            }
        }
    }
    seeds.extend(honest_messages().iter().map(|m| postcard::to_allocvec(m).expect("encodes")));
    let delivery = (0usize..3, 1u32..=3, support::mutated(seeds, &[]));
    proptest!(support::config(1000), |(deliveries in proptest::collection::vec(delivery, 1..6))| run(deliveries));
}

/// Found by `corpus_and_mutations` in CI: a peer's ballot of round `u64::MAX` made the next
/// takeover's ballot overflow. Such ballots are now dropped on arrival, and the highest
/// plausible round still leaves room above it.
#[test]
fn ballot_rounds_at_the_top_of_the_range() {
    for round in [u64::MAX, LogBallot::MAX_ROUND + 1, LogBallot::MAX_ROUND] {
        for node in [NodeId(1), NodeId(3), NodeId(u32::MAX)] {
            let ballot = LogBallot { round, node };
            let messages = [
                LogMessage::Commit { ballot, commit: 1 },
                LogMessage::Prepare { ballot, from: 1 },
                LogMessage::Reject { ballot: LogBallot::ZERO, promised: ballot },
            ];
            for message in messages {
                let bytes = postcard::to_allocvec(&message).expect("encodes");
                run(vec![(0, 2, bytes.clone()), (1, 2, bytes)]);
            }
        }
    }
}
