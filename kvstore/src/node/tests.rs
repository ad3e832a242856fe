//! The node's decisions on three in-memory nodes, messages delivered by hand.

use super::*;
use crate::command::PutRequest;
use crate::limits::Limits;
use crate::log::ReplicaConfig;
use crate::storage::MemoryStorage;
use leasekv_lease::Ballot;
use std::collections::VecDeque;
use std::time::Duration;

/// A caller's waiter in these tests: a number.
type Waiter = u32;

enum Wire {
    Log(LogMessage),
    Forward(ForwardMessage),
}

struct Cluster {
    nodes: Vec<Node<MemoryStorage, Waiter>>,
    queue: VecDeque<(NodeId, NodeId, Wire)>,
    now: Instant,
    answers: Vec<(NodeId, Waiter, MasterResult)>,
    step_downs: Vec<(NodeId, Asker<Waiter>)>,
    /// Every candidacy each node reported, in order.
    candidacies: Vec<(NodeId, bool)>,
    /// Messages to these nodes are lost.
    cut: Vec<NodeId>,
}

fn get(key: &str) -> MasterRequest {
    MasterRequest::Read(
        crate::command::RangeRequest { range: crate::types::KeyRange::single(key), ..Default::default() },
        0,
    )
}

fn put(key: &str) -> MasterRequest {
    MasterRequest::Propose(Command::Put(PutRequest { key: key.into(), value: b"v".to_vec(), lease: 0, prev_kv: false }))
}

/// Node 1's mastership in term 1 until `until`, as the election would report it.
fn lease(until: Instant) -> ElectionView {
    let term = Ballot { counter: 1, epoch: 1, node: NodeId(1) };
    ElectionView { master: Some(Mastership { term, valid_until: until }), hint: Some(NodeId(1)) }
}

impl Cluster {
    /// Three nodes, node 1 master for a long time.
    fn new() -> Self {
        let ids: Vec<NodeId> = (1..=3).map(NodeId).collect();
        let config = ReplicaConfig::for_lease_time(Duration::from_secs(1));
        let nodes = ids
            .iter()
            .map(|&id| {
                let replica = Replica::open(id, &ids, config.clone(), Limits::default(), MemoryStorage::new(), 1)
                    .expect("a fresh replica opens");
                let mut node = Node::new(replica);
                // Written every turn: these tests read the engine through the replica.
                node.set_engine_write_delay(Duration::ZERO);
                node
            })
            .collect();
        let now = Instant::from_nanos(10_000_000_000);
        let mut cluster = Cluster {
            nodes,
            queue: VecDeque::new(),
            now,
            answers: Vec::new(),
            step_downs: Vec::new(),
            candidacies: Vec::new(),
            cut: Vec::new(),
        };
        cluster.elect(NodeId(1), 1);
        cluster.settle();
        cluster
    }

    /// Makes `master` the master in term `counter`, as the election would tell each node.
    fn elect(&mut self, master: NodeId, counter: u64) {
        let term = Ballot { counter, epoch: 1, node: master };
        let valid_until = Instant::from_nanos(self.now.as_nanos() + 1_000_000_000_000);
        let now = self.now;
        for node in &mut self.nodes {
            let mine = node.id() == master;
            let view = ElectionView { master: mine.then_some(Mastership { term, valid_until }), hint: Some(master) };
            node.handle_election(now, view);
        }
    }

    /// [`Cluster::new`] with the master's take-over of the log done (its timer ran), so it
    /// serves reads.
    fn ready() -> Self {
        let mut cluster = Cluster::new();
        cluster.advance(Duration::from_millis(10));
        cluster
    }

    fn node(&mut self, id: NodeId) -> &mut Node<MemoryStorage, Waiter> {
        self.nodes.iter_mut().find(|n| n.id() == id).expect("a node of the cluster")
    }

    /// Outputs taken and messages delivered until nothing moves (bounded).
    fn settle(&mut self) {
        for _ in 0..2_000 {
            let now = self.now;
            for node in &mut self.nodes {
                let out = node.turn_effects(now, TurnFacts::default());
                let from = node.id();
                if out.write_applied {
                    node.write_applied();
                }
                if let Some(job) = out.sync {
                    assert_eq!(job.place, SyncPlace::OnLoop, "a driver without a sync thread syncs on its loop");
                    let result = node.sync_in_place();
                    node.on_synced(now, job.ticket, result);
                }
                self.queue.extend(out.log.into_iter().map(|(to, m)| (from, to, Wire::Log(m))));
                self.queue.extend(out.forwards.into_iter().map(|(to, m)| (from, to, Wire::Forward(m))));
                self.answers.extend(out.answers.into_iter().map(|(w, r)| (from, w, r)));
                for (job, asker) in out.reads {
                    let result = run_read(job);
                    match asker {
                        Asker::Local(w) => self.answers.push((from, w, result)),
                        Asker::Remote(to, id) => {
                            self.queue.push_back((from, to, Wire::Forward(ForwardMessage::Answer(id, result))))
                        }
                    }
                }
                self.step_downs.extend(out.step_downs.into_iter().map(|a| (from, a)));
                self.candidacies.extend(out.candidacy.map(|c| (from, c)));
            }
            let Some((from, to, wire)) = self.queue.pop_front() else { return };
            if self.cut.contains(&to) {
                continue;
            }
            let node = self.node(to);
            match wire {
                Wire::Log(message) => node.handle_message(now, from, message),
                Wire::Forward(ForwardMessage::Request(id, request)) => node.handle_forwarded(now, from, id, request),
                Wire::Forward(ForwardMessage::Answer(id, result)) => node.handle_answer(now, from, id, result),
            }
        }
        panic!("the cluster did not settle");
    }

    fn advance(&mut self, by: Duration) {
        self.now = self.now.saturating_add(by);
        let now = self.now;
        for node in &mut self.nodes {
            if node.poll_timeout().is_some_and(|at| at <= now) {
                node.handle_timeout(now, None);
            }
        }
        self.settle();
    }

    /// Cuts node 3 off while the master writes 40 keys, a slot each: past the slack a member
    /// may be behind and still compete.
    fn leave_node_3_behind(&mut self) {
        self.cut.push(NodeId(3));
        for i in 0..40 {
            let now = self.now;
            self.node(NodeId(1)).handle_client(now, put(&format!("/k{i}")), i, |_| false);
            self.settle();
        }
    }

    /// The candidacy `node` reported last (every node reports `true` first).
    fn candidate(&self, node: NodeId) -> Option<bool> {
        self.candidacies.iter().rev().find(|(n, _)| *n == node).map(|(_, c)| *c)
    }

    fn answer(&self, node: NodeId, waiter: Waiter) -> Option<&MasterResult> {
        self.answers.iter().find(|(n, w, _)| *n == node && *w == waiter).map(|(_, _, r)| r)
    }
}

#[test]
fn a_write_at_a_follower_is_forwarded_once_and_its_answer_comes_back() {
    let mut cluster = Cluster::new();
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, put("/a"), 7, |_| false);
    cluster.settle();
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Ok(MasterAnswer::Propose(_)))), "the write succeeded");
    assert_eq!(cluster.node(NodeId(2)).forwards_pending(), 0);
    // Applied everywhere.
    for id in [1, 2, 3] {
        assert_eq!(cluster.node(NodeId(id)).replica().state().key_count(), 1, "node {id}");
    }
}

#[test]
fn a_request_is_not_forwarded_over_a_link_known_to_be_down() {
    let mut cluster = Cluster::new();
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, put("/a"), 7, |to| to == NodeId(1));
    cluster.settle();
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Err(RequestError::NotMaster { hint: None }))));
    assert_eq!(cluster.node(NodeId(1)).replica().state().key_count(), 0, "nothing left the follower");
}

#[test]
fn a_forwarded_write_whose_answer_is_lost_is_indeterminate_and_a_read_retryable() {
    let mut cluster = Cluster::new();
    cluster.cut.push(NodeId(1));
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, put("/a"), 7, |_| false);
    let read = MasterRequest::Read(Default::default(), 0);
    cluster.node(NodeId(2)).handle_client(now, read, 8, |_| false);
    cluster.settle();
    assert!(cluster.answer(NodeId(2), 7).is_none(), "still waiting");
    cluster.advance(FORWARD_TIMEOUT);
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Err(RequestError::Indeterminate { .. }))));
    assert!(matches!(cluster.answer(NodeId(2), 8), Some(Err(RequestError::NotMaster { .. }))));
}

#[test]
fn a_new_master_settles_the_forwards_to_the_old_one() {
    let mut cluster = Cluster::new();
    cluster.cut.push(NodeId(1));
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, put("/a"), 7, |_| false);
    cluster.settle();
    cluster.cut.clear();
    cluster.elect(NodeId(3), 2);
    cluster.settle();
    assert!(
        matches!(cluster.answer(NodeId(2), 7), Some(Err(RequestError::Indeterminate { hint: Some(NodeId(3)) }))),
        "a write to a deposed master is indeterminate, never retried"
    );
}

#[test]
fn a_step_down_goes_to_the_driver_and_its_answer_back_to_the_follower() {
    let mut cluster = Cluster::new();
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, MasterRequest::StepDown, 7, |_| false);
    cluster.settle();
    let (at, asker) = cluster.step_downs.pop().expect("the master's driver is asked to step down");
    assert_eq!(at, NodeId(1));
    let Asker::Remote(NodeId(2), id) = asker else { panic!("the follower's forward: {asker:?}") };
    // The driver answers the forward once the election gave mastership up.
    let answer = ForwardMessage::Answer(id, Ok(MasterAnswer::SteppedDown));
    cluster.queue.push_back((NodeId(1), NodeId(2), Wire::Forward(answer)));
    cluster.settle();
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Ok(MasterAnswer::SteppedDown))));
}

#[test]
fn a_renewal_that_arrives_with_a_timeout_is_applied_first() {
    // The master's lease runs out at `end`, with a write in flight (its followers cut off);
    // a renewal arrived in the same turn as the replica's timeout at `end`. Applied first,
    // the master keeps its log round and the write keeps waiting; applied after, the
    // master gives the round up and the write fails.
    for broken in [false, true] {
        let mut cluster = Cluster::new();
        let now = cluster.now;
        let end = now.saturating_add(Duration::from_millis(500));
        cluster.node(NodeId(1)).handle_election(now, lease(end));
        if broken {
            cluster.node(NodeId(1)).set_breakage(NodeBreakage::RenewalAfterTimeout);
        }
        cluster.cut = vec![NodeId(2), NodeId(3)];
        cluster.node(NodeId(1)).handle_client(now, put("/a"), 7, |_| false);
        cluster.settle();
        assert!(cluster.answer(NodeId(1), 7).is_none());
        cluster.now = end;
        cluster.node(NodeId(1)).handle_timeout(end, Some(lease(end.saturating_add(Duration::from_secs(10)))));
        cluster.settle();
        let answered = cluster.answer(NodeId(1), 7).cloned();
        if broken {
            assert!(matches!(answered, Some(Err(_))), "the write fails with the round given up: {answered:?}");
        } else {
            assert!(answered.is_none(), "the renewed master still leads: {answered:?}");
        }
    }
}

#[test]
fn a_read_is_ready_at_once_and_a_write_only_with_the_output() {
    let mut cluster = Cluster::ready();
    let now = cluster.now;
    let master = cluster.node(NodeId(1));
    master.handle_client(now, get("/a"), 7, |_| false);
    master.handle_client(now, put("/a"), 8, |_| false);
    let Effects { answers, forwards, reads, .. } = master.input_effects();
    assert_eq!((answers.len(), forwards.len()), (0, 0));
    let ready: Vec<(Waiter, MasterResult)> = reads
        .into_iter()
        .map(|(job, asker)| match asker {
            Asker::Local(w) => (w, run_read(job)),
            Asker::Remote(..) => panic!("a local read"),
        })
        .collect();
    assert!(
        matches!(ready.as_slice(), [(7, Ok(MasterAnswer::Read(..)))]),
        "the read is decided before the turn ends; the write waits for its slot: {ready:?}"
    );
    cluster.settle();
    assert!(matches!(cluster.answer(NodeId(1), 8), Some(Ok(MasterAnswer::Propose(_)))), "then the write is");
    let follower = cluster.node(NodeId(2));
    follower.handle_client(now, put("/b"), 9, |_| false);
    let ready = follower.input_effects();
    assert_eq!((ready.answers.len(), ready.forwards.len()), (0, 1), "a forward leaves at once");
}

#[test]
fn a_forwarded_write_delivered_twice_is_served_once_and_a_read_twice() {
    let mut cluster = Cluster::ready();
    let now = cluster.now;
    let master = cluster.node(NodeId(1));
    for _ in 0..2 {
        master.handle_forwarded(now, NodeId(2), 5, put("/a"));
        master.handle_forwarded(now, NodeId(2), 6, get("/a"));
    }
    let read_answers = master
        .input_effects()
        .reads
        .into_iter()
        .filter_map(|(job, asker)| matches!(asker, Asker::Remote(_, 6)).then(|| run_read(job)))
        .filter(Result::is_ok)
        .count();
    assert_eq!(read_answers, 2, "a read served twice costs only the work (the follower takes the first)");
    cluster.settle();
    assert_eq!(cluster.node(NodeId(1)).replica().state().revision(), 2, "the write applied once");
}

/// A follower behind the master: node 2 missed a write (revision 2), then forwards a read.
/// Returns the cluster with the master's answer (at revision 2) handed to node 2 as waiter 7.
fn read_answered_ahead_of_the_follower() -> Cluster {
    let mut cluster = Cluster::ready();
    cluster.cut.push(NodeId(2));
    let now = cluster.now;
    cluster.node(NodeId(1)).handle_client(now, put("/a"), 1, |_| false);
    // Chosen by nodes 1 and 3 once the master stops waiting for node 2 (bounded).
    for _ in 0..100 {
        if cluster.answer(NodeId(1), 1).is_some() {
            break;
        }
        cluster.advance(Duration::from_millis(20));
    }
    assert!(matches!(cluster.answer(NodeId(1), 1), Some(Ok(MasterAnswer::Propose(_)))), "the write is chosen");
    assert_eq!(cluster.node(NodeId(2)).replica().state().revision(), 1, "node 2 missed the write");
    let now = cluster.now;
    let follower = cluster.node(NodeId(2));
    follower.handle_client(now, get("/a"), 7, |_| false);
    let Some((_, ForwardMessage::Request(id, request))) = follower.input_effects().forwards.pop() else {
        panic!("the read is forwarded");
    };
    cluster.node(NodeId(1)).handle_forwarded(now, NodeId(2), id, request);
    let Some((job, Asker::Remote(..))) = cluster.node(NodeId(1)).input_effects().reads.pop() else {
        panic!("the master decides the read at once");
    };
    let result = run_read(job);
    assert!(matches!(result, Ok(MasterAnswer::Read(_, 2))), "{result:?}");
    cluster.node(NodeId(2)).handle_answer(now, NodeId(1), id, result);
    cluster
}

#[test]
fn an_answer_ahead_of_the_follower_waits_until_it_applied_that_revision() {
    let mut cluster = read_answered_ahead_of_the_follower();
    let held = cluster.node(NodeId(2)).input_effects().answers.len();
    assert_eq!(held, 0, "held: passed on now, a serializable read at node 2 would go back to revision 1");
    cluster.cut.clear();
    for _ in 0..20 {
        if cluster.answer(NodeId(2), 7).is_some() {
            break;
        }
        cluster.advance(Duration::from_millis(20));
    }
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Ok(MasterAnswer::Read(_, 2)))));
    assert!(cluster.node(NodeId(2)).replica().state().revision() >= 2, "passed on once node 2 applied it");
}

#[test]
fn an_answer_held_for_a_follower_that_cannot_catch_up_goes_after_the_wait() {
    let mut cluster = read_answered_ahead_of_the_follower();
    cluster.advance(held::APPLY_WAIT - Duration::from_millis(1));
    assert!(cluster.answer(NodeId(2), 7).is_none(), "still waiting for the log");
    cluster.advance(Duration::from_millis(1));
    assert!(matches!(cluster.answer(NodeId(2), 7), Some(Ok(MasterAnswer::Read(_, 2)))), "late, never lost");
    assert_eq!(cluster.node(NodeId(2)).replica().state().revision(), 1);
}

#[test]
fn a_member_far_behind_the_master_withdraws_from_the_election_until_it_caught_up() {
    let mut cluster = Cluster::ready();
    assert_eq!(cluster.candidate(NodeId(3)), Some(true), "every node starts as a candidate");
    cluster.leave_node_3_behind();
    // Node 3 hears the master again but its fetches are lost: it knows it is far behind.
    cluster.cut = vec![NodeId(1)];
    cluster.advance(Duration::from_millis(300));
    assert_eq!(cluster.candidate(NodeId(3)), Some(false), "a member 40 slots behind withdraws");
    let why = cluster.node(NodeId(3)).replica().withdrawal().map(ToString::to_string).unwrap_or_default();
    assert!(why.contains("catching up"), "{why}");
    assert_eq!(cluster.candidate(NodeId(2)), Some(true), "an up-to-date member stays a candidate");
    // Its fetches get through: it catches up and competes again.
    cluster.cut.clear();
    cluster.advance(Duration::from_millis(300));
    assert_eq!(cluster.node(NodeId(3)).replica().state().key_count(), 40);
    assert_eq!(cluster.candidate(NodeId(3)), Some(true), "caught up: a candidate again");
}

#[test]
fn a_failed_snapshot_install_withdraws_the_member_and_says_why() {
    let mut cluster = Cluster::ready();
    cluster.leave_node_3_behind();
    cluster.cut = vec![NodeId(1)];
    cluster.advance(Duration::from_millis(300));
    let now = cluster.now;
    cluster.node(NodeId(3)).snapshot_install_failed(now, "No space left on device (os error 28)".into());
    cluster.settle();
    assert_eq!(cluster.candidate(NodeId(3)), Some(false));
    let why = cluster.node(NodeId(3)).replica().withdrawal().map(ToString::to_string).unwrap_or_default();
    assert!(why.contains("No space left on device"), "{why}");
    // The master falls silent: a member that is merely behind would compete again, one
    // whose install failed has nothing to serve from and stays out.
    cluster.cut = vec![NodeId(1), NodeId(3)];
    cluster.advance(Duration::from_secs(3));
    assert_eq!(cluster.candidate(NodeId(3)), Some(false));
    // Its next fetch brings the log (here the entries; a snapshot that installs alike).
    cluster.cut.clear();
    cluster.advance(Duration::from_millis(300));
    assert_eq!(cluster.node(NodeId(3)).replica().state().key_count(), 40);
    assert_eq!(cluster.candidate(NodeId(3)), Some(true));
}

#[test]
fn a_master_that_cannot_take_over_the_log_gives_mastership_up_and_holds_off() {
    let mut cluster = Cluster::ready();
    // Node 3 wins the election but reaches nobody: its phase 1 never completes.
    cluster.cut = vec![NodeId(1), NodeId(2)];
    cluster.elect(NodeId(3), 2);
    cluster.settle();
    let ready_within = ReplicaConfig::for_lease_time(Duration::from_secs(1)).candidacy.ready_within;
    cluster.advance(ready_within - Duration::from_millis(100));
    assert_eq!(cluster.candidate(NodeId(3)), Some(true), "within the bound it keeps trying");
    cluster.advance(Duration::from_millis(200));
    assert_eq!(cluster.candidate(NodeId(3)), Some(false), "past the bound it gives mastership up");
    let why = cluster.node(NodeId(3)).replica().withdrawal().map(ToString::to_string).unwrap_or_default();
    assert!(why.contains("without taking over the log"), "{why}");
    // The election releases the lease (the driver's switch); later it competes again.
    cluster.elect(NodeId(1), 3);
    cluster.cut.clear();
    cluster.advance(ready_within * 2 + Duration::from_millis(100));
    assert_eq!(cluster.candidate(NodeId(3)), Some(true), "a candidate again after the hold-off");
}

/// The master answers a write before its engine write, which comes by the deadline of the
/// first turn that left it unwritten, and the node wakes its driver for it.
#[test]
fn an_answered_write_reaches_the_engine_by_the_deadline_of_the_first_turn_that_left_it() {
    let mut cluster = Cluster::ready();
    let delay = Duration::from_millis(5);
    cluster.node(NodeId(1)).set_engine_write_delay(delay);
    let now = cluster.now;
    cluster.node(NodeId(1)).handle_client(now, put("/a"), 7, |_| false);
    cluster.settle();
    assert!(matches!(cluster.answer(NodeId(1), 7), Some(Ok(MasterAnswer::Propose(_)))), "answered at once");
    let master = cluster.node(NodeId(1));
    assert!(master.replica().unflushed(), "answered before its engine write");
    let due = master.poll_timeout().expect("the driver is woken for the write");
    assert!(due <= now.saturating_add(delay), "woken by the deadline");
    let facts = TurnFacts::default();
    let almost = now.saturating_add(delay - Duration::from_micros(1));
    assert!(!master.turn_effects(almost, facts).write_applied, "later turns do not move the deadline");
    assert!(master.turn_effects(now.saturating_add(delay), facts).write_applied, "the deadline's turn writes");
    master.write_applied();
    assert!(!master.replica().unflushed());
    assert!(!master.turn_effects(now.saturating_add(delay * 2), facts).write_applied, "nothing left to write");
}

/// A driver's world that records what the node asked of it.
#[derive(Default)]
struct TestIo {
    now: Option<Instant>,
    /// A status of the election not taken yet.
    status: Option<ElectionView>,
    answers: Vec<(Waiter, MasterResult)>,
    reads: Vec<Asker<Waiter>>,
}

impl NodeIo<MemoryStorage, Waiter> for TestIo {
    fn now(&self) -> Instant {
        self.now.unwrap_or(Instant::from_nanos(0))
    }
    fn election_changed(&mut self) -> Option<ElectionView> {
        self.status.take()
    }
    fn election_gauges(&self) -> ElectionGauges {
        ElectionGauges::default()
    }
    fn cluster_version(&self) -> u32 {
        u32::MAX
    }
    fn link_down(&self, _node: NodeId) -> bool {
        false
    }
    fn publish(&mut self, _node: &Node<MemoryStorage, Waiter>, _history: bool) {}
    fn send_log(&mut self, _to: NodeId, _message: LogMessage) {}
    fn send_forward(&mut self, _to: NodeId, _message: ForwardMessage) {}
    fn answer(&mut self, waiter: Waiter, result: MasterResult) {
        self.answers.push((waiter, result));
    }
    fn read(&mut self, _job: ReadJob, asker: Asker<Waiter>) {
        self.reads.push(asker);
    }
    fn step_down(&mut self, _asker: Asker<Waiter>) {}
    fn configure(&mut self, _for_election: crate::membership::Membership, _in_force: &crate::membership::Membership) {}
    fn set_candidacy(&mut self, _candidate: bool) {}
    fn removed(&mut self, _epoch: u64) {}
    fn auth_changed(&mut self, _auth: crate::auth::AuthStore) {}
    fn storage_failed(&mut self, _reason: String) {}
    fn sync(&mut self, _ticket: SyncTicket) {}
    fn checkpoint(&mut self, _ticket: crate::log::CheckpointTicket) {}
    fn build_snapshot(&mut self, _job: crate::log::SnapshotJob, _format: SnapshotFormat) {}
}

/// A renewal of the master's lease that reached the driver while the loop was busy (its
/// lease ran out meanwhile) is taken before the next input of any kind, not only with a
/// timeout: the master then serves a read after a long turn instead of refusing it.
#[test]
fn a_renewal_that_came_during_a_long_turn_is_taken_before_the_next_input() {
    for broken in [false, true] {
        let mut cluster = Cluster::ready();
        let now = cluster.now;
        let end = now.saturating_add(Duration::from_millis(500));
        let mut master = cluster.nodes.remove(0);
        master.handle_election(now, lease(end));
        if broken {
            master.set_breakage(NodeBreakage::StatusOnlyWithTimeout);
        }
        let mut driver = Driver::new(master);
        // The turn that ran past the lease's end is over; the renewal waits for the driver.
        let after = end.saturating_add(Duration::from_millis(1));
        let mut io = TestIo {
            now: Some(after),
            status: Some(lease(end.saturating_add(Duration::from_secs(10)))),
            ..TestIo::default()
        };
        driver.handle(&mut io, Input::Client(get("/a"), 7));
        if broken {
            assert!(io.reads.is_empty(), "the broken driver judged the read by the old lease");
            assert!(matches!(io.answers.as_slice(), [(7, Err(_))]), "refused: {:?}", io.answers);
        } else {
            assert!(matches!(io.reads.as_slice(), [Asker::Local(7)]), "served as master: {:?}", io.answers);
        }
    }
}

/// Proposes a CORRUPT alarm about `member` (or its disarm) at node 1, the master.
fn corrupt_alarm(cluster: &mut Cluster, action: crate::command::AlarmAction, member: u64, waiter: Waiter) {
    let kind = Some(crate::command::AlarmKind::Corrupt);
    let now = cluster.now;
    let alarm = MasterRequest::Propose(Command::Alarm { action, member, kind });
    cluster.node(NodeId(1)).handle_client(now, alarm, waiter, |_| false);
    cluster.settle();
}

/// A master that a CORRUPT alarm names refuses every read, so while it stays master the
/// cluster's linearizable reads fail: it withdraws from the election (the others stay
/// candidates), and competes again once the alarm is disarmed.
#[test]
fn a_member_marked_corrupt_withdraws_from_the_election_until_disarmed() {
    use crate::command::AlarmAction;
    let mut cluster = Cluster::ready();
    corrupt_alarm(&mut cluster, AlarmAction::Raise, 1, 1);
    assert!(matches!(cluster.answer(NodeId(1), 1), Some(Ok(MasterAnswer::Propose(_)))), "the alarm is raised");
    let now = cluster.now;
    cluster.node(NodeId(2)).handle_client(now, get("/a"), 2, |_| false);
    cluster.settle();
    let refused = cluster.answer(NodeId(2), 2);
    assert!(
        matches!(refused, Some(Err(RequestError::Invalid(crate::error::KvError::Corrupt)))),
        "the marked master refuses a follower's read: {refused:?}"
    );
    assert_eq!(cluster.candidate(NodeId(1)), Some(false), "the marked member withdraws");
    let why = cluster.node(NodeId(1)).replica().withdrawal().map(ToString::to_string).unwrap_or_default();
    assert!(why.contains("CORRUPT"), "it says why: {why}");
    assert_eq!((cluster.candidate(NodeId(2)), cluster.candidate(NodeId(3))), (Some(true), Some(true)));
    corrupt_alarm(&mut cluster, AlarmAction::Disarm, 1, 3);
    assert_eq!(cluster.candidate(NodeId(1)), Some(true), "a candidate again once disarmed");
}

/// When the alarm names every voter (no hash had a majority), nobody withdraws: a master
/// must remain to take the disarm.
#[test]
fn no_member_withdraws_when_every_voter_is_marked_corrupt() {
    use crate::command::AlarmAction;
    let mut cluster = Cluster::ready();
    for member in 1..=3 {
        corrupt_alarm(&mut cluster, AlarmAction::Raise, member, member as u32);
    }
    for node in 1..=3 {
        assert_eq!(cluster.candidate(NodeId(node)), Some(true), "node {node} still competes");
    }
}

/// A loss of mastership that reached the driver while the loop was busy is taken before the
/// next input (the read goes to the new master, it is not decided here as master), and at
/// the end of a turn (a pass of `end_turn` decides on the latest status too).
#[test]
fn a_loss_of_mastership_is_taken_before_the_next_input_and_at_the_end_of_a_turn() {
    let lost = ElectionView { master: None, hint: Some(NodeId(2)) };
    for broken in [false, true] {
        let mut cluster = Cluster::ready();
        let now = cluster.now;
        let mut master = cluster.nodes.remove(0);
        if broken {
            master.set_breakage(NodeBreakage::StatusOnlyWithTimeout);
        }
        let mut driver = Driver::new(master);
        let mut io = TestIo { now: Some(now), status: Some(lost), ..TestIo::default() };
        driver.handle(&mut io, Input::Client(get("/a"), 7));
        if broken {
            assert!(matches!(io.reads.as_slice(), [Asker::Local(7)]), "the broken driver served it as master");
        } else {
            assert!(io.reads.is_empty() && io.answers.is_empty(), "forwarded to the new master");
        }
    }
    let mut cluster = Cluster::ready();
    let now = cluster.now;
    let mut driver = Driver::new(cluster.nodes.remove(0));
    let mut io = TestIo { now: Some(now), status: Some(lost), ..TestIo::default() };
    driver.end_turn(&mut io, TurnFacts::default());
    assert!(!driver.node().replica().is_master_at(now), "the turn's end took the loss");
}
