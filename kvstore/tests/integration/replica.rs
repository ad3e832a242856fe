//! The replica core driven directly, without an election: a tiny deterministic harness that
//! delivers messages (in order, or shuffled), syncs storage at once, and lets tests choose
//! who believes it is master.

use leasekv_kvstore::log::{
    Completion, LogBreakage, LogMessage, ReadConsistency, ReadLeaseConfig, Replica, ReplicaConfig, RequestError,
};
use leasekv_kvstore::storage::{MemoryStorage, StorageError};
use leasekv_kvstore::{
    Command, CommandResponse, Compare, CompareResult, CompareTarget, KeyRange, Limits, PutRequest, RangeRequest,
    TxnRequest, NO_LEASE,
};
use leasekv_lease::rng::SplitMix64;
use leasekv_lease::{Ballot, Instant, Mastership, NodeId};
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

const SEC: u64 = 1_000_000_000;

struct Cluster {
    replicas: Vec<Option<Replica<MemoryStorage>>>,
    disks: Vec<Option<MemoryStorage>>,
    queue: VecDeque<(NodeId, NodeId, LogMessage)>,
    cut: BTreeSet<NodeId>,
    now: Instant,
    done: Vec<Completion>,
    rng: Option<SplitMix64>,
    config: ReplicaConfig,
    epoch: u32,
}

fn ids(n: u32) -> Vec<NodeId> {
    (1..=n).map(NodeId).collect()
}

impl Cluster {
    fn new(n: u32, config: ReplicaConfig) -> Self {
        let replicas = ids(n)
            .into_iter()
            .map(|id| {
                Some(Replica::open(id, &ids(n), config.clone(), Limits::default(), MemoryStorage::new(), 1).unwrap())
            })
            .collect();
        Cluster {
            replicas,
            disks: (0..n).map(|_| None).collect(),
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            now: Instant::from_nanos(10 * SEC),
            done: Vec::new(),
            rng: None,
            config,
            epoch: 1,
        }
    }

    fn replica(&mut self, id: u32) -> &mut Replica<MemoryStorage> {
        self.replicas[id as usize - 1].as_mut().expect("replica is up")
    }

    fn make_master(&mut self, id: u32, counter: u64) {
        let term = Ballot { counter, epoch: 1, node: NodeId(id) };
        let m = Mastership { term, valid_until: Instant::from_nanos(self.now.as_nanos() + 1000 * SEC) };
        let now = self.now;
        self.replica(id).set_mastership(now, Some(m), Some(NodeId(id)));
    }

    fn depose(&mut self, id: u32, hint: Option<u32>) {
        let now = self.now;
        self.replica(id).set_mastership(now, None, hint.map(NodeId));
    }

    /// Collects outputs and delivers messages until nothing moves (bounded).
    fn settle(&mut self) {
        for _ in 0..100_000 {
            for i in 0..self.replicas.len() {
                let now = self.now;
                let Some(r) = self.replicas[i].as_mut() else { continue };
                let out = r.take_output();
                if out.needs_sync {
                    r.sync(now);
                }
                let from = r.id();
                self.done.extend(out.completions);
                for (to, m) in out.messages {
                    self.queue.push_back((from, to, m));
                }
            }
            let next = match self.rng.as_mut() {
                Some(rng) if !self.queue.is_empty() => {
                    let i = rng.range_u64(0, self.queue.len() as u64 - 1) as usize;
                    self.queue.remove(i)
                }
                _ => self.queue.pop_front(),
            };
            let Some((from, to, m)) = next else {
                let pending = self.replicas.iter().flatten().count();
                if pending == 0 {
                    return;
                }
                // Nothing in flight: check that no replica still wants a sync.
                let mut any = false;
                for r in self.replicas.iter_mut().flatten() {
                    let out = r.take_output();
                    any |= out.needs_sync || !out.messages.is_empty() || !out.completions.is_empty();
                    let from = r.id();
                    if out.needs_sync {
                        r.sync(self.now);
                    }
                    self.done.extend(out.completions);
                    for (to, m) in out.messages {
                        self.queue.push_back((from, to, m));
                    }
                }
                if !any && self.queue.is_empty() {
                    return;
                }
                continue;
            };
            if self.cut.contains(&from) || self.cut.contains(&to) {
                continue;
            }
            let now = self.now;
            if let Some(r) = self.replicas[to.0 as usize - 1].as_mut() {
                r.handle_message(now, from, m);
            }
        }
        panic!("cluster did not settle");
    }

    /// Delivers messages until none is left (bounded), every replica taking its output
    /// without the engine write of what it applied (`take_output_before_flush`) and never
    /// flushing; returns the completions.
    fn settle_answering_first(&mut self) -> Vec<Completion> {
        let mut answered = Vec::new();
        for _ in 0..10_000 {
            for i in 0..self.replicas.len() {
                let now = self.now;
                let Some(r) = self.replicas[i].as_mut() else { continue };
                let out = r.take_output_before_flush();
                if out.needs_sync {
                    r.sync(now);
                }
                answered.extend(out.completions);
                for (to, m) in out.messages {
                    self.queue.push_back((NodeId(i as u32 + 1), to, m));
                }
            }
            let Some((from, to, m)) = self.queue.pop_front() else { return answered };
            let now = self.now;
            if let Some(r) = self.replicas[to.0 as usize - 1].as_mut() {
                r.handle_message(now, from, m);
            }
        }
        panic!("cluster did not settle");
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now.saturating_add(d);
        for r in self.replicas.iter_mut().flatten() {
            r.handle_timeout(self.now);
        }
        self.settle();
    }

    /// Puts `{prefix}{i}` for `i` in `0..count` at `at`, settling after each (one slot each
    /// with [`small_checkpoints`]).
    fn put_each(&mut self, at: u32, prefix: &str, count: usize) {
        for i in 0..count {
            self.put(at, &format!("{prefix}{i}"), "v").unwrap();
            self.settle();
        }
    }

    fn put(&mut self, at: u32, key: &str, value: &str) -> Result<(), RequestError> {
        let now = self.now;
        let cmd = Command::Put(PutRequest { key: key.into(), value: value.into(), lease: NO_LEASE, prev_kv: false });
        self.replica(at).propose(now, cmd).map(|_| ())
    }

    fn get(&mut self, at: u32, key: &str, consistency: ReadConsistency) -> Result<Option<Vec<u8>>, RequestError> {
        let now = self.now;
        let req = RangeRequest { range: KeyRange::single(key), ..Default::default() };
        self.replica(at).read(now, &req, consistency).map(|(r, _)| r.kvs.first().map(|kv| kv.value.clone()))
    }

    fn crash(&mut self, id: u32) {
        let r = self.replicas[id as usize - 1].take().expect("up");
        let mut disk = r.into_storage();
        disk.crash();
        self.disks[id as usize - 1] = Some(disk);
    }

    fn restart(&mut self, id: u32) {
        self.epoch += 1;
        let disk = self.disks[id as usize - 1].take().expect("down");
        let n = self.replicas.len() as u32;
        let r = Replica::open(NodeId(id), &ids(n), self.config.clone(), Limits::default(), disk, self.epoch).unwrap();
        self.replicas[id as usize - 1] = Some(r);
    }

    fn digests(&self) -> Vec<(u64, u64)> {
        self.replicas.iter().flatten().map(|r| (r.applied_index(), r.state().digest())).collect()
    }

    fn ok_completions(&self) -> usize {
        self.done.iter().filter(|c| c.result.as_ref().is_ok_and(|(_, a)| a.result.is_ok())).count()
    }
}

fn config() -> ReplicaConfig {
    ReplicaConfig::for_lease_time(Duration::from_secs(1))
}

/// One command per slot, a checkpoint every 16 slots keeping 4 behind it: a few dozen puts
/// make a follower that missed them need a snapshot.
fn small_checkpoints() -> ReplicaConfig {
    let mut cfg = config();
    cfg.snapshot_every = 16;
    cfg.retain_after_snapshot = 4;
    cfg.max_batch_commands = 1;
    cfg
}

#[test]
fn master_takes_over_then_serves_writes_and_linearizable_reads() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    // Before phase 1 and the barrier, reads are refused as not ready.
    assert_eq!(c.get(1, "a", ReadConsistency::Linearizable), Err(RequestError::NotReady));
    c.settle();
    c.put(1, "a", "1").unwrap();
    c.settle();
    assert_eq!(c.ok_completions(), 1);
    assert_eq!(c.get(1, "a", ReadConsistency::Linearizable).unwrap(), Some(b"1".to_vec()));
    // Followers learn the commit and serve serializable reads; linearizable ones redirect.
    assert_eq!(c.get(2, "a", ReadConsistency::Serializable).unwrap(), Some(b"1".to_vec()));
    assert_eq!(c.get(2, "a", ReadConsistency::Linearizable), Err(RequestError::NotMaster { hint: Some(NodeId(1)) }));
    assert!(matches!(c.put(2, "b", "x"), Err(RequestError::NotMaster { .. })));
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

#[test]
fn many_commands_are_batched_into_few_slots() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    let before = c.replica(1).commit_index();
    for i in 0..1000 {
        c.put(1, &format!("k{i}"), "v").unwrap();
    }
    c.settle();
    assert_eq!(c.ok_completions(), 1000);
    let slots = c.replica(1).commit_index() - before;
    assert!(slots < 100, "1000 commands took {slots} slots");
}

#[test]
fn a_slot_is_bounded_by_the_bytes_of_txn_compare_values_too() {
    let mut cfg = config();
    cfg.max_inflight_slots = 1;
    cfg.max_batch_bytes = 10_000;
    let mut c = Cluster::new(3, cfg);
    c.make_master(1, 1);
    c.settle();
    let before = c.replica(1).commit_index();
    // The first put takes the only free slot; the four Txns queue behind it, each carrying
    // a 6,000-byte compare value, so no two of them fit in one 10,000-byte slot.
    c.put(1, "a", "v").unwrap();
    let now = c.now;
    for _ in 0..4 {
        let compare = Compare {
            range: KeyRange::single("a"),
            target: CompareTarget::Value(vec![b'x'; 6_000]),
            result: CompareResult::Equal,
        };
        let txn = TxnRequest { compare: vec![compare], ..Default::default() };
        c.replica(1).propose(now, Command::Txn(txn)).unwrap();
    }
    c.settle();
    assert_eq!(c.ok_completions(), 5);
    assert_eq!(c.replica(1).commit_index() - before, 5, "the compare values were not counted");
}

#[test]
fn new_master_keeps_every_acknowledged_write() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    for i in 0..50 {
        c.put(1, &format!("k{i}"), "v1").unwrap();
    }
    c.settle();
    c.depose(1, Some(2));
    c.make_master(2, 2);
    c.settle();
    for i in 0..50 {
        assert_eq!(c.get(2, &format!("k{i}"), ReadConsistency::Linearizable).unwrap(), Some(b"v1".to_vec()));
    }
}

#[test]
fn two_would_be_masters_never_make_replicas_diverge() {
    for seed in 0..40 {
        let mut c = Cluster::new(3, config());
        c.rng = Some(SplitMix64::new(seed));
        c.make_master(1, 1);
        c.make_master(2, 1);
        for round in 0..20 {
            for m in [1, 2] {
                let _ = c.put(m, &format!("k{}", round % 4), &format!("{m}-{round}"));
            }
            if round % 5 == 4 {
                // Both keep taking over again, each with a higher ballot than it saw.
                let now = c.now;
                c.now = Instant::from_nanos(now.as_nanos() + 1);
                c.make_master(1, 10 + round);
                c.make_master(2, 10 + round);
            }
            c.settle();
        }
        c.depose(1, None);
        c.depose(2, None);
        c.make_master(3, 100);
        c.settle();
        c.advance(Duration::from_millis(200));
        let d = c.digests();
        assert!(d.iter().all(|x| *x == d[0]), "seed {seed}: replicas diverged: {d:?}");
    }
}

#[test]
fn lagging_replica_catches_up_through_a_snapshot() {
    let mut c = Cluster::new(3, small_checkpoints());
    c.make_master(1, 1);
    c.settle();
    c.cut.insert(NodeId(3));
    c.put_each(1, "k", 200);
    assert!(c.replica(3).applied_index() < 10);
    c.cut.clear();
    c.advance(Duration::from_millis(200));
    c.advance(Duration::from_millis(200));
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
    assert_eq!(c.replica(3).state().key_count(), 200);
}

/// A checkpoint serializes nothing (the state is in the engine, flushed after every slot),
/// so it comes every `snapshot_every` slots however large the state, and each one lets the
/// log behind it go.
#[test]
fn a_checkpoint_comes_every_snapshot_every_slots_whatever_the_state_size() {
    let mut cfg = config();
    cfg.snapshot_every = 16;
    cfg.max_batch_commands = 1;
    let mut c = Cluster::new(3, cfg);
    c.make_master(1, 1);
    c.settle();
    let big = "x".repeat(1000);
    for i in 0..20 {
        c.put(1, &format!("big{i}"), &big).unwrap();
        c.settle();
    }
    let first = c.replica(1).snapshot_index();
    assert!(first >= 16, "no first checkpoint: {first}");
    // 20 more slots of a few bytes each against a state of about 20 KB: one more checkpoint.
    c.put_each(1, "s", 20);
    let second = c.replica(1).snapshot_index();
    assert!(second >= first + 16, "no second checkpoint: {first} -> {second}");
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

/// Checkpoints due to the bytes of commands (large slots) keep the log back to the
/// checkpoint before at most, however many slots `retain_after_snapshot` asks for: 1,000
/// slots of up to 256 commands kept four 16 MiB segments beside the state.
#[test]
fn a_checkpoint_due_to_bytes_keeps_the_log_back_to_the_one_before() {
    let mut cfg = config();
    cfg.snapshot_every = 1_000_000;
    cfg.max_batch_commands = 1;
    assert!(cfg.retain_after_snapshot >= 1000);
    let mut c = Cluster::new(3, cfg);
    c.make_master(1, 1);
    c.settle();
    let big = "x".repeat(1 << 20);
    let mut checkpoints = Vec::new();
    for i in 0..40 {
        c.put(1, &format!("big{i}"), &big).unwrap();
        c.settle();
        let at = c.replica(1).snapshot_index();
        if checkpoints.last() != Some(&at) && at > 0 {
            checkpoints.push(at);
        }
    }
    assert!(checkpoints.len() >= 2, "two checkpoints by bytes: {checkpoints:?}");
    let removed = c.replica(1).storage().removed_through();
    let before_last = checkpoints[checkpoints.len() - 2];
    assert!(removed >= before_last, "log removed through {removed}, checkpoints at {checkpoints:?}");
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

/// A checkpoint whose engine sync ran before a snapshot install overtook it is abandoned:
/// the installed state is not synced yet, so the install's stored snapshot must stay until a
/// sync after it. Finishing it anyway (the `checkpoint-overtaken` control) drops that
/// snapshot, and a crash then restarts the replica with its state behind its log.
#[test]
fn a_checkpoint_overtaken_by_an_install_is_abandoned() {
    for broken in [false, true] {
        let mut cfg = small_checkpoints();
        cfg.defer_snapshots = true;
        if broken {
            cfg.breakage = LogBreakage::CheckpointOvertaken;
        }
        let mut c = Cluster::new(3, cfg);
        c.make_master(1, 1);
        c.settle();
        c.put_each(1, "a", 20);
        // Node 3's checkpoint: its sync runs now, its result comes back after the install.
        let ticket = c.replica(3).begin_checkpoint().expect("a checkpoint is due");
        let synced = ticket.sync();
        c.cut.insert(NodeId(3));
        c.put_each(1, "b", 40);
        let now = c.now;
        c.replica(1).snapshot_if_due(now);
        c.cut.clear();
        for _ in 0..5 {
            c.advance(Duration::from_millis(200));
            let now = c.now;
            c.replica(1).snapshot_if_due(now);
            c.settle();
        }
        assert_eq!(c.replica(3).state().key_count(), 60, "broken={broken}: node 3 installed a snapshot");
        c.replica(3).finish_checkpoint(ticket, synced);
        // One more write: node 3 syncs its log for it (and whatever the checkpoint dropped
        // with it), not its state engine.
        c.put(1, "c", "v").unwrap();
        c.settle();
        assert!(c.replica(3).storage().state_pending_len() > 0, "the installed state is not synced");
        c.crash(3);
        let removed = c.disks[2].as_ref().expect("crashed").removed_through();
        c.restart(3);
        let at_open = c.replica(3).state_slot_at_open();
        assert_eq!(
            at_open < removed,
            broken,
            "broken={broken}: node 3 restarted with its state at slot {at_open}, its log dropped through {removed}"
        );
        if !broken {
            c.advance(Duration::from_millis(200));
            assert_eq!(c.replica(3).state().key_count(), 61);
            let d = c.digests();
            assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
        }
    }
}

/// A snapshot sent to a peer keeps the log after its slot on the sender until the peer
/// could have installed it: with a large state, the writes made while it was built, sent and
/// installed ran past the log a checkpoint kept, and the peer needed snapshot after snapshot.
#[test]
fn a_snapshot_sent_keeps_the_log_after_it_until_its_pin_runs_out() {
    let mut c = Cluster::new(3, small_checkpoints());
    c.make_master(1, 1);
    c.settle();
    c.cut.insert(NodeId(3));
    c.put_each(1, "a", 40);
    let behind = c.replica(3).commit_index() + 1;
    let now = c.now;
    c.replica(1).handle_message(now, NodeId(3), LogMessage::Fetch { from: behind });
    assert_eq!(c.replica(1).counts().snapshots_sent, 1, "the master sends a snapshot");
    let pinned = c.replica(1).applied_index();
    // The snapshot is lost on the way (node 3 is still cut off); writes and checkpoints go on.
    c.put_each(1, "b", 60);
    let removed = c.replica(1).storage().removed_through();
    assert!(removed <= pinned, "the log after slot {pinned} is kept, dropped through {removed}");
    assert!(c.replica(1).snapshot_index() > pinned + 16, "checkpoints went on");
    // A minute and more later the pin is gone, and so is the log behind the checkpoints.
    c.advance(Duration::from_secs(70));
    c.put_each(1, "c", 40);
    let removed = c.replica(1).storage().removed_through();
    assert!(removed > pinned, "the pin ran out: dropped through {removed}, pinned at {pinned}");
}

#[test]
fn every_node_crashing_loses_no_acknowledged_write() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    for i in 0..30 {
        c.put(1, &format!("k{i}"), "v").unwrap();
    }
    c.settle();
    assert_eq!(c.ok_completions(), 30);
    for id in 1..=3 {
        c.crash(id);
    }
    for id in 1..=3 {
        c.restart(id);
    }
    c.make_master(2, 5);
    c.settle();
    for i in 0..30 {
        assert_eq!(c.get(2, &format!("k{i}"), ReadConsistency::Linearizable).unwrap(), Some(b"v".to_vec()));
    }
}

#[test]
fn losing_mastership_fails_pending_requests_and_stops_reads() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    c.cut.insert(NodeId(2));
    c.cut.insert(NodeId(3));
    c.put(1, "a", "1").unwrap();
    c.settle();
    c.depose(1, Some(3));
    c.settle();
    let failed: Vec<_> = c.done.iter().filter_map(|d| d.result.as_ref().err().cloned()).collect();
    assert_eq!(failed, vec![RequestError::Indeterminate { hint: Some(NodeId(3)) }]);
    assert_eq!(c.get(1, "a", ReadConsistency::Linearizable), Err(RequestError::NotMaster { hint: Some(NodeId(3)) }));
}

fn grant(c: &mut Cluster, at: u32, ttl: i64) -> i64 {
    let now = c.now;
    c.replica(at).propose(now, Command::LeaseGrant { id: 0, name: None, ttl }).unwrap();
    c.settle();
    match c.done.pop().expect("grant completed").result.expect("granted").1.result.expect("ok") {
        CommandResponse::LeaseGrant(g) => g.id,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn leases_expire_on_the_master_after_their_ttl_and_take_their_keys() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    let id = grant(&mut c, 1, 1);
    // Raised to the minimum (2 × the 1 s election lease).
    assert_eq!(c.replica(1).state().lease(id).unwrap().ttl, 2);
    let now = c.now;
    let put = Command::Put(PutRequest { key: b"/s/1".to_vec(), value: b"x".to_vec(), lease: id, prev_kv: false });
    c.replica(1).propose(now, put).unwrap();
    c.settle();
    c.advance(Duration::from_millis(1500));
    let now = c.now;
    assert_eq!(c.replica(1).keep_alive(now, id), Ok(2));
    c.advance(Duration::from_millis(1900));
    assert!(c.get(1, "/s/1", ReadConsistency::Linearizable).unwrap().is_some());
    c.advance(Duration::from_millis(200));
    assert_eq!(c.get(1, "/s/1", ReadConsistency::Linearizable).unwrap(), None);
    assert!(c.replica(2).state().lease(id).is_none());
}

#[test]
fn a_deposed_master_expires_nothing() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    let id = grant(&mut c, 1, 2);
    c.depose(1, None);
    c.advance(Duration::from_secs(10));
    assert!(c.replica(1).state().lease(id).is_some());
    assert!(c.replica(2).state().lease(id).is_some());
    // The next master restarts the countdown at the full TTL.
    c.make_master(2, 2);
    c.settle();
    c.advance(Duration::from_millis(1900));
    assert!(c.replica(2).state().lease(id).is_some());
    c.advance(Duration::from_millis(200));
    assert!(c.replica(2).state().lease(id).is_none());
}

#[test]
fn mass_expiry_goes_out_in_bounded_batches() {
    let mut cfg = config();
    cfg.max_expire_batch = 100;
    let mut c = Cluster::new(3, cfg);
    c.make_master(1, 1);
    c.settle();
    let now = c.now;
    for _ in 0..1000 {
        c.replica(1).propose(now, Command::LeaseGrant { id: 0, name: None, ttl: 2 }).unwrap();
    }
    c.settle();
    assert_eq!(c.replica(1).state().lease_count(), 1000);
    let before = c.replica(1).commit_index();
    c.advance(Duration::from_millis(2100));
    for _ in 0..20 {
        c.advance(Duration::from_millis(10));
    }
    assert_eq!(c.replica(1).state().lease_count(), 0);
    let slots = c.replica(1).commit_index() - before;
    // At most `max_expire_in_queue` (2) batches of 100 wait at once, so no slot carries more
    // than 200 expiries.
    assert!(slots >= 5, "1000 expiries in {slots} slots: batches are bounded by 100");
}

#[test]
fn bad_requests_get_clear_errors_and_change_nothing() {
    let mut c = Cluster::new(1, config());
    c.make_master(1, 1);
    c.settle();
    let now = c.now;
    let empty = Command::Put(PutRequest { key: Vec::new(), value: b"v".to_vec(), lease: NO_LEASE, prev_kv: false });
    let err = c.replica(1).propose(now, empty).unwrap_err();
    assert_eq!(err.to_string(), "etcdserver: key is not provided");
    let huge = Command::Put(PutRequest { key: vec![b'k'; 4096], value: Vec::new(), lease: NO_LEASE, prev_kv: false });
    assert!(c.replica(1).propose(now, huge).unwrap_err().to_string().contains("request is too large"));
    let unknown = Command::Put(PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), lease: 77, prev_kv: false });
    c.replica(1).propose(now, unknown).unwrap();
    c.settle();
    let last = c.done.pop().unwrap().result.unwrap().1.result.unwrap_err();
    assert_eq!(last.to_string(), "etcdserver: requested lease not found");
    assert_eq!(c.replica(1).keep_alive(now, 77).unwrap_err().to_string(), "etcdserver: requested lease not found");
    assert_eq!(c.replica(1).state().key_count(), 0);
}

/// The accepts a follower has acknowledged, by slot.
fn accepted_slots(messages: &[(NodeId, LogMessage)]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|(_, m)| if let LogMessage::Accepted { slot, .. } = m { Some(*slot) } else { None })
        .collect()
}

/// Takes the master's Accept messages for `to` out of its output.
fn accepts_for(c: &mut Cluster, master: u32, to: u32) -> Vec<LogMessage> {
    let out = c.replica(master).take_output();
    out.messages
        .into_iter()
        .filter(|(dest, m)| dest.0 == to && matches!(m, LogMessage::Accept { .. }))
        .map(|(_, m)| m)
        .collect()
}

#[test]
fn a_sync_run_elsewhere_releases_exactly_the_acks_it_covers() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    let now = c.now;
    c.put(1, "a", "1").unwrap();
    let first = accepts_for(&mut c, 1, 2);
    assert_eq!(first.len(), 1);
    for m in first {
        c.replica(2).handle_message(now, NodeId(1), m);
    }
    let out = c.replica(2).take_output();
    assert!(out.needs_sync && accepted_slots(&out.messages).is_empty(), "nothing is acknowledged before its sync");
    let ticket = c.replica(2).begin_sync().expect("a sync is needed");
    assert!(c.replica(2).begin_sync().is_none(), "one sync at a time");
    // While the disk works, the next accept arrives: the sync in flight does not cover it.
    c.put(1, "b", "2").unwrap();
    for m in accepts_for(&mut c, 1, 2) {
        c.replica(2).handle_message(now, NodeId(1), m);
    }
    let out = c.replica(2).take_output();
    assert!(!out.needs_sync, "no second sync while one is in flight");
    assert!(accepted_slots(&out.messages).is_empty());
    c.replica(2).finish_sync(now, ticket, Ok(()));
    let out = c.replica(2).take_output();
    let released = accepted_slots(&out.messages);
    assert_eq!(released.len(), 1, "only the covered accept is acknowledged: {released:?}");
    assert!(out.needs_sync, "the second accept now needs its own sync");
    // A ticket that is not in flight changes nothing.
    c.replica(2).finish_sync(now, ticket, Ok(()));
    assert!(accepted_slots(&c.replica(2).take_output().messages).is_empty());
    let second = c.replica(2).begin_sync().expect("second sync");
    c.replica(2).finish_sync(now, second, Ok(()));
    let later = accepted_slots(&c.replica(2).take_output().messages);
    assert_eq!(later.len(), 1);
    assert!(later[0] > released[0]);
}

#[test]
fn a_failed_sync_releases_nothing_and_stops_the_replica() {
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    let now = c.now;
    c.put(1, "a", "1").unwrap();
    for m in accepts_for(&mut c, 1, 2) {
        c.replica(2).handle_message(now, NodeId(1), m);
    }
    let _ = c.replica(2).take_output();
    let ticket = c.replica(2).begin_sync().expect("a sync is needed");
    c.replica(2).finish_sync(now, ticket, Err(StorageError::Io("disk gone".into())));
    assert!(accepted_slots(&c.replica(2).take_output().messages).is_empty());
    assert!(c.replica(2).stopped().is_some());
    assert!(c.replica(2).begin_sync().is_none());
}

/// The server answers a turn's completions before it writes what they applied to the state
/// engine (`take_output_before_flush`, then `flush_applied`). An answered write is in the
/// state the replica reads at once, reaches watchers with the flush, and survives a crash
/// of the master before the flush: the restart replays it from the log.
#[test]
fn a_write_answered_before_its_engine_write_survives_a_crash_before_it() {
    use leasekv_kvstore::state::HistoryRead;
    let mut c = Cluster::new(3, config());
    c.make_master(1, 1);
    c.settle();
    c.put(1, "a", "1").unwrap();
    c.settle();
    let reader = c.replica(1).state().history_reader();
    let head = reader.head();
    c.put(1, "b", "2").unwrap();
    // Deliver everything, every replica answering before it flushes, none flushing.
    let answered = c.settle_answering_first();
    assert!(answered.iter().any(|done| done.result.as_ref().is_ok_and(|(_, a)| a.result.is_ok())), "answered");
    assert_eq!(c.get(1, "b", ReadConsistency::Linearizable).unwrap(), Some(b"2".to_vec()), "read at once");
    assert_eq!(reader.head(), head, "watchers wait for the engine write");
    // The flush publishes it.
    assert!(c.replica(2).flush_applied());
    let follower = c.replica(2).state().history_reader();
    let HistoryRead::Events { events, .. } = follower.read(head + 1, 10) else { panic!("compacted") };
    assert_eq!(events.iter().map(|e| e.kv.key.clone()).collect::<Vec<_>>(), vec![b"b".to_vec()]);
    // The master crashes before its flush: the write comes back from its log.
    c.crash(1);
    c.restart(1);
    c.make_master(1, 2);
    c.settle();
    assert_eq!(c.get(1, "b", ReadConsistency::Linearizable).unwrap(), Some(b"2".to_vec()), "after the restart");
    let d = c.digests();
    assert!(d.windows(2).all(|w| w[0] == w[1]), "{d:?}");
}

/// A checkpoint due while applied commands wait for their engine write (the server answers
/// first) writes them before it syncs: a crash of the master after the checkpoint, which
/// dropped the log behind it, loses none of them. Without that flush the synced state would
/// lack the last slots and the log would no longer hold them.
#[test]
fn a_checkpoint_writes_what_was_applied_but_not_flushed_before_it_syncs() {
    let mut c = Cluster::new(3, small_checkpoints());
    c.make_master(1, 1);
    c.settle();
    for i in 0..40 {
        c.put(1, &format!("k{i}"), "v").unwrap();
        c.settle_answering_first();
    }
    let disk_removed = c.replica(1).storage().removed_through();
    assert!(disk_removed > 0, "a checkpoint dropped the log");
    c.crash(1);
    c.restart(1);
    // The state it restarted with reaches the point its log was dropped through (else the
    // slots between are nowhere on this node: the simulator's state-behind-log oracle).
    let (applied, removed) = (c.replica(1).applied_index(), c.replica(1).storage().removed_through());
    assert!(applied >= removed, "restarted at slot {applied}, log dropped through {removed}");
    c.make_master(1, 2);
    c.settle();
    for i in 0..40 {
        assert_eq!(c.get(1, &format!("k{i}"), ReadConsistency::Linearizable).unwrap(), Some(b"v".to_vec()), "k{i}");
    }
    let d = c.digests();
    assert!(d.windows(2).all(|w| w[0] == w[1]), "{d:?}");
}

// ---- Read leases (docs/read-leases.md) ----

/// Read leases of 250 ms on a 1 s election lease (heartbeats every 100 ms).
fn with_read_leases() -> ReplicaConfig {
    let mut cfg = config();
    cfg.read_leases = Some(ReadLeaseConfig::new(Duration::from_millis(250), 0.01));
    cfg
}

/// A master at node 1 whose followers hold read leases (a heartbeat, an ask, a grant).
fn leased_cluster() -> Cluster {
    let mut c = Cluster::new(3, with_read_leases());
    c.make_master(1, 1);
    c.settle();
    c.advance(Duration::from_millis(100));
    c
}

impl Cluster {
    /// Whether node `id` holds a valid read lease now.
    fn holds(&mut self, id: u32) -> bool {
        let now = self.now;
        self.replica(id).read_lease_target(now).is_some()
    }
}

fn lease_read(c: &mut Cluster, at: u32, key: &str) -> Option<Option<Vec<u8>>> {
    let now = c.now;
    let req = RangeRequest { range: KeyRange::single(key), ..Default::default() };
    let r = c.replica(at);
    let target = r.read_lease_target(now)?;
    let answer = r.read_under_lease(now, target, &req, 0)?;
    let (response, _) = answer.expect("a read").run().expect("the view reads");
    Some(response.kvs.first().map(|kv| kv.value.clone()))
}

#[test]
fn a_follower_with_a_read_lease_answers_linearizable_reads_itself() {
    let mut c = leased_cluster();
    assert!(c.holds(2) && c.holds(3));
    assert!(!c.holds(1), "the master reads under its election lease");
    c.put(1, "a", "1").unwrap();
    c.settle();
    assert_eq!(c.ok_completions(), 1);
    assert_eq!(lease_read(&mut c, 2, "a"), Some(Some(b"1".to_vec())));
    // Renewed with the heartbeats: still held a second later.
    for _ in 0..10 {
        c.advance(Duration::from_millis(100));
    }
    assert_eq!(lease_read(&mut c, 3, "a"), Some(Some(b"1".to_vec())));
}

#[test]
fn a_write_waits_for_a_cut_off_holder_until_its_read_lease_ends_and_no_longer() {
    let mut c = leased_cluster();
    c.cut.insert(NodeId(3));
    c.put(1, "a", "1").unwrap();
    c.settle();
    assert_eq!(c.ok_completions(), 0, "node 3 may still answer reads without it");
    c.advance(Duration::from_millis(100));
    assert_eq!(c.ok_completions(), 0, "its lease began at most 100 ms before the cut and runs 250 ms");
    c.advance(Duration::from_millis(100));
    c.advance(Duration::from_millis(100));
    assert_eq!(c.ok_completions(), 1, "chosen once the lease ran out (R8)");
    // The cut-off holder believed less long than the master waited (R1), and holds nothing now.
    assert!(!c.holds(3));
    // Later writes do not wait for it.
    c.put(1, "b", "2").unwrap();
    c.settle();
    assert_eq!(c.ok_completions(), 2);
}

#[test]
fn a_higher_ballot_ends_a_read_lease_and_a_new_master_waits_for_the_old_ones_holders() {
    let mut c = leased_cluster();
    // Node 2 takes over while node 3, which holds node 1's lease, hears nothing of it.
    c.cut.insert(NodeId(3));
    c.depose(1, None);
    c.make_master(2, 2);
    c.settle();
    assert!(!c.holds(1), "node 1 promised node 2's ballot (R5)");
    assert!(c.holds(3), "node 3 still believes node 1's lease");
    c.put(2, "a", "1").unwrap();
    c.settle();
    assert_eq!(c.ok_completions(), 0, "node 2 waits for node 3's possible lease (R6)");
    c.advance(Duration::from_millis(300));
    assert!(!c.holds(3), "node 3's lease ran out first (R1)");
    assert_eq!(c.ok_completions(), 1, "then the write is chosen");
}

/// A follower far behind the master (a replaced member installing a snapshot, one back
/// from a cut) asks for no read lease: as a holder it would hold every write back for its
/// receipt, and it could not answer a read before catching up anyway. Once caught up it
/// asks again.
#[test]
fn a_follower_far_behind_asks_for_no_read_lease_until_it_has_caught_up() {
    let mut c = leased_cluster();
    c.cut.insert(NodeId(3));
    c.advance(Duration::from_millis(300));
    assert!(!c.holds(3), "its lease ran out while cut off");
    c.put_each(1, "k", 40);
    assert_eq!(c.ok_completions(), 40);
    // The master's heartbeat reaches node 3, 40 slots behind: it fetches and asks nothing.
    let (ballot, commit, now) = (c.replica(1).known_ballot(), c.replica(1).commit_index(), c.now);
    c.replica(3).handle_message(now, NodeId(1), LogMessage::Commit { ballot, commit });
    let sent = c.replica(3).take_output().messages;
    assert!(sent.iter().any(|(_, m)| matches!(m, LogMessage::Fetch { .. })), "it fetches: {sent:?}");
    assert!(!sent.iter().any(|(_, m)| matches!(m, LogMessage::ReadLeaseAsk { .. })), "no ask while behind: {sent:?}");
    // Caught up (the fetch answered), the next heartbeat's ask is granted.
    c.cut.remove(&NodeId(3));
    c.settle();
    c.advance(Duration::from_millis(100));
    c.advance(Duration::from_millis(100));
    assert!(c.holds(3), "caught up, it holds a lease again");
}

#[test]
fn a_grant_answers_only_an_ask_of_this_run_of_the_node() {
    let mut c = leased_cluster();
    c.crash(2);
    c.restart(2);
    // The restarted node asks anew (its first ask again): a grant made for the first ask of
    // its earlier run is not for it.
    let ballot = c.replica(3).known_ballot();
    let stale = LogMessage::ReadLeaseGrant { ballot, incarnation: 1, seq: 1, valid_for_nanos: 250_000_000, through: 0 };
    let now = c.now;
    c.replica(2).handle_message(now, NodeId(1), stale);
    assert!(!c.holds(2), "a grant for incarnation 1, which asked nothing now");
    c.advance(Duration::from_millis(100));
    c.advance(Duration::from_millis(100));
    assert!(c.holds(2), "its own ask is granted");
}
