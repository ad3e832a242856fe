//! A master that crashes before its first sync must never reuse its log ballot: the
//! scenario found in review (one ballot carrying two values for one slot made a follower
//! apply the old value). Each node's syncs are under the test's control here.

use leasekv_kvstore::log::{LogMessage, ReadConsistency, Replica, ReplicaConfig};
use leasekv_kvstore::storage::MemoryStorage;
use leasekv_kvstore::{Command, KeyRange, Limits, PutRequest, RangeRequest, NO_LEASE};
use leasekv_lease::{Ballot, Instant, Mastership, NodeId};
use std::time::Duration;

const SEC: u64 = 1_000_000_000;
type R = Replica<MemoryStorage>;
type Msg = (NodeId, NodeId, LogMessage);

fn ids() -> Vec<NodeId> {
    (1..=3).map(NodeId).collect()
}

fn open(id: u32, disk: MemoryStorage, epoch: u32) -> R {
    let config = ReplicaConfig::for_lease_time(Duration::from_secs(1));
    Replica::open(NodeId(id), &ids(), config, Limits::default(), disk, epoch).expect("opens")
}

/// Takes a replica's output, syncing first when `sync` says so.
fn drain(r: &mut R, sync: bool, now: Instant) -> Vec<Msg> {
    let mut out = Vec::new();
    for _ in 0..2 {
        let o = r.take_output();
        let wants_sync = o.needs_sync;
        out.extend(o.messages.into_iter().map(|(to, m)| (r.id(), to, m)));
        if !(wants_sync && sync) {
            break;
        }
        r.sync(now);
    }
    out
}

fn make_master(r: &mut R, counter: u64, now: Instant) {
    let term = Ballot { counter, epoch: 1, node: r.id() };
    let m = Mastership { term, valid_until: Instant::from_nanos(now.as_nanos() + 100 * SEC) };
    r.set_mastership(now, Some(m), Some(r.id()));
}

fn put(key: &str, value: &str) -> Command {
    Command::Put(PutRequest { key: key.into(), value: value.into(), lease: NO_LEASE, prev_kv: false })
}

/// Delivers messages until none is left; `sync[i]` says whether node i+1 syncs; messages
/// for which `drop` holds are set aside and returned.
fn settle(rs: &mut [Option<R>], now: Instant, sync: [bool; 3], drop: &dyn Fn(&Msg) -> bool) -> Vec<Msg> {
    let mut queue: Vec<Msg> = Vec::new();
    let mut dropped = Vec::new();
    for _ in 0..100_000 {
        for (i, r) in rs.iter_mut().enumerate() {
            if let Some(r) = r.as_mut() {
                queue.extend(drain(r, sync[i], now));
            }
        }
        if queue.is_empty() {
            return dropped;
        }
        let m = queue.remove(0);
        if drop(&m) {
            dropped.push(m);
            continue;
        }
        if let Some(r) = rs[m.1 .0 as usize - 1].as_mut() {
            r.handle_message(now, m.0, m.2);
        }
    }
    panic!("did not settle");
}

#[test]
fn a_master_that_crashed_before_syncing_never_reuses_its_ballot() {
    let now = Instant::from_nanos(10 * SEC);
    let mut rs: Vec<Option<R>> = (1..=3).map(|i| Some(open(i, MemoryStorage::new(), 1))).collect();
    let all = [true; 3];
    make_master(rs[0].as_mut().unwrap(), 1, now);
    settle(&mut rs, now, all, &|_| false);
    rs[0].as_mut().unwrap().propose(now, put("a", "1")).unwrap();
    settle(&mut rs, now, all, &|_| false);

    // A new term for node 1, which never syncs; node 3 misses its Accepts.
    make_master(rs[0].as_mut().unwrap(), 2, now);
    let drop_accepts_to_3 = |m: &Msg| m.1 == NodeId(3) && matches!(m.2, LogMessage::Accept { .. });
    settle(&mut rs, now, [false, true, true], &drop_accepts_to_3);
    let _ = rs[0].as_mut().unwrap().propose(now, put("k", "old"));
    settle(&mut rs, now, [false, true, true], &drop_accepts_to_3);

    // Node 1 crashes: nothing it wrote since the last sync survives.
    let mut disk = rs[0].take().unwrap().into_storage();
    disk.crash();
    rs[0] = Some(open(1, disk, 2));
    make_master(rs[0].as_mut().unwrap(), 3, now);
    // Phase 1 with node 3 only; node 2 then hears only the last Accept.
    let cut2 = |m: &Msg| m.0 == NodeId(2) || m.1 == NodeId(2);
    let mut held = settle(&mut rs, now, all, &cut2);
    rs[0].as_mut().unwrap().propose(now, put("k", "new")).unwrap();
    held.extend(settle(&mut rs, now, all, &cut2));
    rs[0].as_mut().unwrap().propose(now, put("z", "1")).unwrap();
    held.extend(settle(&mut rs, now, all, &cut2));
    if let Some(i) = held.iter().rposition(|m| m.1 == NodeId(2) && matches!(m.2, LogMessage::Accept { .. })) {
        let m = held.remove(i);
        rs[1].as_mut().unwrap().handle_message(now, m.0, m.2);
    }
    settle(&mut rs, now, all, &|m: &Msg| matches!(m.2, LogMessage::Fetch { .. }));

    let states: Vec<(u64, u64)> =
        rs.iter().map(|r| r.as_ref().unwrap()).map(|r| (r.applied_index(), r.state().digest())).collect();
    for a in &states {
        for b in &states {
            assert!(a.0 != b.0 || a.1 == b.1, "replicas diverged: {states:?}");
        }
    }
    // And once everyone catches up, they all agree that k is "new".
    for r in rs.iter_mut().flatten() {
        r.handle_timeout(Instant::from_nanos(now.as_nanos() + SEC));
    }
    settle(&mut rs, Instant::from_nanos(now.as_nanos() + SEC), all, &|_| false);
    let req = RangeRequest { range: KeyRange::single("k"), ..Default::default() };
    for r in rs.iter().flatten() {
        let (got, _) = r.read(now, &req, ReadConsistency::Serializable).unwrap();
        assert_eq!(got.kvs.first().map(|kv| kv.value.clone()), Some(b"new".to_vec()), "at {}", r.id());
    }
}
