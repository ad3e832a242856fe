//! The master's TTL tracker ("lessor", after etcd's): lease deadlines on the master's
//! monotonic clock, in an ordered structure so that finding what expired is O(log n).
//!
//! Layout: a map `id -> (deadline, ttl)`, the truth, and a min-heap of `(deadline, id)`
//! with lazy deletion. A keep-alive does not search the heap for the old entry (that would be
//! O(n)); it pushes a new one and leaves the old one *stale*: an entry is live only if its
//! deadline is the one the map holds for its id. Stale entries are skipped when they reach
//! the top, and the heap is rebuilt from the map when they outnumber live ones two to one, so
//! memory stays within a constant factor of the number of leases.
//!
//! Costs: `keep_alive`/`track`/`forget` O(log n) amortized (amortized over the rebuilds, each
//! of which is paid for by the 2n pushes before it); `take_expired` O(log n) per lease taken
//! plus O(log n) once per stale entry ever created; `start` O(n) (the heap is built with
//! `BinaryHeap::from(Vec)`, Floyd's heapify, not n pushes); `next_deadline` O(1).
//!
//! Invariant: the heap's top, if any, is live. Every operation that can make the top stale
//! pops stale entries off it, so `next_deadline` is exact (a driver timer set on it never
//! fires for nothing) without needing `&mut self`.
use crate::command::{Command, CommandResponse};
use crate::types::LeaseId;
use crate::KvError;
use leasekv_lease::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// Below this heap size the tracker never rebuilds: stale entries cost nothing worth a pass.
const MIN_REBUILD_LEN: usize = 64;

/// Deadlines of live leases, kept only while this node is a ready master.
#[derive(Debug, Default)]
pub struct Lessor {
    running: bool,
    /// The truth: every tracked lease.
    leases: HashMap<LeaseId, Tracked>,
    /// Earliest deadline on top; ties in id order, so expiry order is deterministic. May hold
    /// stale entries (see the module docs); its top never is one.
    heap: BinaryHeap<Reverse<(Instant, LeaseId)>>,
}

/// One tracked lease. The TTL is kept in nanoseconds (8 bytes instead of a 16-byte
/// `Duration`) because a master may track millions of these.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    deadline: Instant,
    ttl_nanos: u64,
}

/// A TTL in nanoseconds, saturating (a TTL beyond 584 years is as good as forever).
fn nanos(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX)
}

impl Lessor {
    /// An empty, stopped tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking: every lease's countdown restarts at its full TTL from `now`.
    ///
    /// A new master does not know how much of a lease's TTL ran down under the previous one
    /// (its clock cannot be compared with ours), so every lease gets its full TTL: leases only
    /// ever live longer than asked across a failover, never shorter. If `leases` names an id
    /// twice, the last TTL wins. Calling it while running restarts from scratch.
    pub fn start(&mut self, now: Instant, leases: impl IntoIterator<Item = (LeaseId, Duration)>) {
        // Drop the old allocations: the new set may be much smaller than the last one.
        *self = Lessor::new();
        let leases = leases.into_iter();
        self.leases.reserve(leases.size_hint().0);
        for (id, ttl) in leases {
            let ttl_nanos = nanos(ttl);
            self.leases
                .insert(id, Tracked { deadline: now.saturating_add(Duration::from_nanos(ttl_nanos)), ttl_nanos });
        }
        self.running = true;
        self.rebuild_heap();
    }

    /// Stops tracking and forgets every deadline (this node is no longer master). Releases
    /// the memory: a former master should not keep a million leases' worth of it.
    pub fn stop(&mut self) {
        *self = Lessor::new();
    }

    /// Whether the tracker runs.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Number of leases tracked.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no lease is tracked.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Starts the countdown of a newly granted lease (no-op when stopped). Tracking an id
    /// already tracked replaces its TTL and restarts its countdown.
    pub fn track(&mut self, now: Instant, id: LeaseId, ttl: Duration) {
        if !self.running {
            return;
        }
        let ttl_nanos = nanos(ttl);
        let deadline = now.saturating_add(Duration::from_nanos(ttl_nanos));
        let old = self.leases.insert(id, Tracked { deadline, ttl_nanos });
        self.reschedule(id, old.map(|t| t.deadline), deadline);
    }

    /// Resets a lease's countdown to its full TTL; returns the TTL, or None if unknown (or
    /// when stopped: only the master answers keep-alives).
    pub fn keep_alive(&mut self, now: Instant, id: LeaseId) -> Option<Duration> {
        let tracked = self.leases.get_mut(&id)?;
        let old = tracked.deadline;
        let ttl_nanos = tracked.ttl_nanos;
        // `max`: a clock reading never goes backwards, but if a caller's did, keep the later
        // deadline rather than shorten a lease.
        let deadline = now.saturating_add(Duration::from_nanos(ttl_nanos)).max(old);
        tracked.deadline = deadline;
        self.reschedule(id, Some(old), deadline);
        Some(Duration::from_nanos(ttl_nanos))
    }

    /// Keeps the deadlines in step with one applied `command` and its `result`: a grant is
    /// tracked and a revoke forgotten while the tracker runs; leases deleted by expiry are
    /// forgotten in any case.
    pub fn follow_apply(&mut self, now: Instant, command: &Command, result: &Result<CommandResponse, KvError>) {
        if self.is_running() {
            match (command.unwrapped(), result) {
                (Command::LeaseGrant { .. }, Ok(CommandResponse::LeaseGrant(granted))) => {
                    self.track(now, granted.id, Duration::from_secs(granted.ttl.max(0) as u64))
                }
                (Command::LeaseRevoke { id }, Ok(_)) => self.forget(*id),
                _ => {}
            }
        }
        if let Ok(CommandResponse::LeaseExpire { expired, .. }) = result {
            for id in expired {
                self.forget(*id);
            }
        }
    }

    /// Forgets a lease (revoked or expired through the log).
    pub fn forget(&mut self, id: LeaseId) {
        if self.leases.remove(&id).is_some() {
            // Its heap entry is now stale; if it was the top, pop it (and any below it).
            self.prune_top();
            self.maybe_rebuild();
        }
    }

    /// Time left before the lease expires (zero once the deadline passed), or None if the
    /// lease is not tracked.
    pub fn remaining(&self, now: Instant, id: LeaseId) -> Option<Duration> {
        self.leases.get(&id).map(|t| t.deadline.saturating_since(now))
    }

    /// The earliest deadline, for the driver's timer. Exact: never a deadline of a lease
    /// kept alive or forgotten since.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((deadline, _))| *deadline)
    }

    /// Takes up to `max` leases whose deadline is `<= now`, earliest first (ties by id).
    ///
    /// The leases taken are no longer tracked: the caller is expiring them through the log
    /// (a `LeaseExpire` command), and a keep-alive arriving meanwhile must not revive them.
    /// If that proposal fails (say this node loses mastership), the next master's `start`
    /// tracks them again from the replicated lease table. The rest stay for the next call,
    /// which bounds the pause (and the size of the command) per call.
    pub fn take_expired(&mut self, now: Instant, max: usize) -> Vec<LeaseId> {
        let mut taken = Vec::new();
        while taken.len() < max {
            // The top is live (the invariant), so no stale check is needed here.
            match self.heap.peek() {
                Some(Reverse((deadline, _))) if *deadline <= now => {}
                _ => break,
            }
            let Some(Reverse((_, id))) = self.heap.pop() else { break };
            self.leases.remove(&id);
            taken.push(id);
            self.prune_top();
        }
        if !taken.is_empty() {
            self.maybe_rebuild();
        }
        taken
    }

    /// Records that `id`'s deadline moved from `old` (if it had one) to `new` in the heap.
    fn reschedule(&mut self, id: LeaseId, old: Option<Instant>, new: Instant) {
        if old == Some(new) {
            // Same deadline (a second keep-alive within one clock tick): the existing entry
            // is still the live one; pushing another would be a duplicate no rebuild removes.
            return;
        }
        self.heap.push(Reverse((new, id)));
        if let Some(old) = old {
            if self.heap.peek() == Some(&Reverse((old, id))) {
                self.prune_top();
            }
        }
        self.maybe_rebuild();
    }

    /// Pops stale entries off the top until it is live (or the heap is empty).
    fn prune_top(&mut self) {
        while let Some(Reverse((deadline, id))) = self.heap.peek() {
            if self.leases.get(id).is_some_and(|t| t.deadline == *deadline) {
                return;
            }
            self.heap.pop();
        }
    }

    /// Rebuilds the heap once stale entries exceed twice the live ones.
    fn maybe_rebuild(&mut self) {
        let live = self.leases.len();
        if self.heap.len() > MIN_REBUILD_LEN && self.heap.len() - live.min(self.heap.len()) > 2 * live {
            self.rebuild_heap();
        }
    }

    /// One live entry per lease, heapified in O(n), reusing the heap's buffer unless it is
    /// far larger than needed.
    fn rebuild_heap(&mut self) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.clear();
        if entries.capacity() > 4 * self.leases.len() + MIN_REBUILD_LEN {
            entries.shrink_to(2 * self.leases.len());
        }
        entries.extend(self.leases.iter().map(|(id, t)| Reverse((t.deadline, *id))));
        self.heap = BinaryHeap::from(entries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn at(secs: u64) -> Instant {
        Instant::from_nanos(secs * SEC)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn running(now: Instant, leases: &[(LeaseId, u64)]) -> Lessor {
        let mut l = Lessor::new();
        l.start(now, leases.iter().map(|&(id, ttl)| (id, secs(ttl))));
        l
    }

    /// Checks the documented invariants: the top is live, and a lease has exactly one live
    /// entry (its deadline) in the heap.
    fn check(l: &Lessor) {
        if let Some(Reverse((d, id))) = l.heap.peek() {
            assert_eq!(l.leases.get(id).map(|t| t.deadline), Some(*d), "stale top");
        }
        for (id, t) in &l.leases {
            assert!(l.heap.iter().any(|Reverse(e)| *e == (t.deadline, *id)), "lease {id} missing from the heap");
        }
    }

    #[test]
    fn new_is_stopped_and_stopped_ignores_everything() {
        let mut l = Lessor::new();
        assert!(!l.is_running());
        l.track(at(0), 1, secs(5));
        assert_eq!(l.keep_alive(at(0), 1), None);
        assert_eq!(l.remaining(at(0), 1), None);
        assert_eq!(l.next_deadline(), None);
        assert!(l.take_expired(at(100), 10).is_empty());
        assert!(l.is_empty());
    }

    #[test]
    fn leases_expire_in_deadline_order_ties_by_id() {
        let mut l = running(at(10), &[(5, 30), (1, 10), (3, 20), (2, 10), (4, 20)]);
        check(&l);
        assert_eq!(l.next_deadline(), Some(at(20)));
        assert!(l.take_expired(at(19), 100).is_empty());
        assert_eq!(l.take_expired(at(20), 100), vec![1, 2]);
        assert_eq!(l.next_deadline(), Some(at(30)));
        assert_eq!(l.take_expired(at(100), 100), vec![3, 4, 5]);
        assert_eq!(l.next_deadline(), None);
        assert!(l.is_empty());
    }

    #[test]
    fn keep_alive_pushes_the_deadline() {
        let mut l = running(at(0), &[(1, 10), (2, 10)]);
        assert_eq!(l.keep_alive(at(8), 1), Some(secs(10)));
        check(&l);
        assert_eq!(l.remaining(at(8), 1), Some(secs(10)));
        assert_eq!(l.remaining(at(8), 2), Some(secs(2)));
        assert_eq!(l.next_deadline(), Some(at(10)));
        assert_eq!(l.take_expired(at(10), 10), vec![2]);
        assert_eq!(l.next_deadline(), Some(at(18)));
        assert!(l.take_expired(at(17), 10).is_empty());
        assert_eq!(l.take_expired(at(18), 10), vec![1]);
        assert_eq!(l.keep_alive(at(18), 1), None, "taken leases are no longer tracked");
    }

    #[test]
    fn take_expired_respects_max_and_leaves_the_rest() {
        let mut l = running(at(0), &(1..=10).map(|id| (id, 5)).collect::<Vec<_>>());
        assert_eq!(l.take_expired(at(5), 3), vec![1, 2, 3]);
        assert_eq!(l.len(), 7);
        assert_eq!(l.next_deadline(), Some(at(5)));
        assert_eq!(l.take_expired(at(6), 3), vec![4, 5, 6]);
        assert_eq!(l.take_expired(at(6), 0), Vec::<LeaseId>::new());
        assert_eq!(l.take_expired(at(6), 100), vec![7, 8, 9, 10]);
        check(&l);
    }

    #[test]
    fn stale_entries_are_skipped_and_compacted() {
        let n = 100i64;
        let mut l = running(at(0), &(0..n).map(|id| (id, 10)).collect::<Vec<_>>());
        // Many keep-alives: each leaves a stale entry behind.
        for round in 1..=50u64 {
            for id in 0..n {
                l.keep_alive(Instant::from_nanos(round * 1000 + id as u64), id);
            }
            assert!(l.heap.len() <= 3 * l.leases.len() + MIN_REBUILD_LEN + 1, "heap grew to {}", l.heap.len());
            check(&l);
        }
        // The stale entries (deadlines around 10 s) are not reported as expired.
        assert_eq!(l.next_deadline(), Some(Instant::from_nanos(10 * SEC + 50_000)));
        assert!(l.take_expired(Instant::from_nanos(10 * SEC + 49_999), 1000).is_empty());
        assert_eq!(l.take_expired(at(11), 1000), (0..n).collect::<Vec<_>>());
        assert!(l.heap.is_empty());

        // Forgetting also leaves stale entries; they never come out of take_expired.
        let mut l = running(at(0), &(0..n).map(|id| (id, 10 + id as u64)).collect::<Vec<_>>());
        for id in (0..n).filter(|id| id % 2 == 0) {
            l.forget(id);
            check(&l);
        }
        assert_eq!(l.next_deadline(), Some(at(11)));
        assert_eq!(l.take_expired(at(1000), 1000), (0..n).filter(|id| id % 2 == 1).collect::<Vec<_>>());
    }

    #[test]
    fn repeated_keep_alives_at_one_instant_do_not_grow_the_heap() {
        let mut l = running(at(0), &[(1, 10)]);
        for _ in 0..1000 {
            l.keep_alive(at(3), 1);
        }
        assert_eq!(l.heap.len(), 1);
        // A clock that went backwards does not shorten the lease.
        l.keep_alive(at(1), 1);
        assert_eq!(l.remaining(at(3), 1), Some(secs(10)));
    }

    #[test]
    fn stop_and_start_reset_every_countdown_to_the_full_ttl() {
        let mut l = running(at(0), &[(1, 10), (2, 20)]);
        l.track(at(5), 3, secs(30));
        assert_eq!(l.remaining(at(9), 1), Some(secs(1)));
        l.stop();
        assert!(!l.is_running());
        assert!(l.is_empty() && l.heap.is_empty());
        assert_eq!(l.next_deadline(), None);

        l.start(at(100), [(1, secs(10)), (2, secs(20)), (3, secs(30))]);
        assert!(l.is_running());
        assert_eq!(l.remaining(at(100), 1), Some(secs(10)));
        assert_eq!(l.remaining(at(100), 2), Some(secs(20)));
        assert_eq!(l.remaining(at(100), 3), Some(secs(30)));
        assert_eq!(l.next_deadline(), Some(at(110)));
        check(&l);
    }

    #[test]
    fn remaining_and_next_deadline() {
        let mut l = running(at(0), &[]);
        assert_eq!(l.next_deadline(), None);
        l.track(at(1), 7, secs(4));
        assert_eq!(l.next_deadline(), Some(at(5)));
        assert_eq!(l.remaining(at(2), 7), Some(secs(3)));
        assert_eq!(l.remaining(at(9), 7), Some(Duration::ZERO), "overdue until taken");
        assert_eq!(l.remaining(at(2), 8), None);
        l.track(at(2), 8, secs(1));
        assert_eq!(l.next_deadline(), Some(at(3)));
        l.forget(8);
        assert_eq!(l.next_deadline(), Some(at(5)), "a forgotten lease's deadline is not reported");
        // Re-tracking replaces the TTL.
        l.track(at(2), 7, secs(100));
        assert_eq!(l.next_deadline(), Some(at(102)));
        assert_eq!(l.keep_alive(at(3), 7), Some(secs(100)));
        // Huge TTLs saturate instead of wrapping.
        l.track(at(2), 9, Duration::MAX);
        assert_eq!(l.remaining(at(2), 9), Some(Duration::from_nanos(u64::MAX - 2 * SEC)));
        check(&l);
    }

    #[test]
    fn start_with_duplicate_ids_keeps_the_last_ttl() {
        let l = running(at(0), &[(1, 5), (1, 9)]);
        assert_eq!(l.len(), 1);
        assert_eq!(l.heap.len(), 1);
        assert_eq!(l.remaining(at(0), 1), Some(secs(9)));
    }

    /// A randomized comparison with a naive model (a map scanned for the minimum).
    #[test]
    fn matches_a_naive_model() {
        let mut l = running(at(0), &[]);
        let mut model: HashMap<LeaseId, (Instant, u64)> = HashMap::new();
        let mut x: u64 = 12345;
        let mut rnd = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut now = 0u64;
        for _ in 0..20_000 {
            now += rnd(3) * SEC / 4;
            let t = Instant::from_nanos(now);
            let id = rnd(200) as LeaseId;
            match rnd(10) {
                0..=1 => {
                    let ttl = 1 + rnd(20);
                    l.track(t, id, secs(ttl));
                    model.insert(id, (t.saturating_add(secs(ttl)), ttl));
                }
                2..=6 => {
                    let got = l.keep_alive(t, id);
                    let want = model.get_mut(&id).map(|e| {
                        e.0 = t.saturating_add(secs(e.1));
                        secs(e.1)
                    });
                    assert_eq!(got, want);
                }
                7 => {
                    l.forget(id);
                    model.remove(&id);
                }
                _ => {
                    let max = rnd(5) as usize;
                    let got = l.take_expired(t, max);
                    let mut due: Vec<(Instant, LeaseId)> =
                        model.iter().filter(|(_, e)| e.0 <= t).map(|(id, e)| (e.0, *id)).collect();
                    due.sort();
                    let want: Vec<LeaseId> = due.into_iter().take(max).map(|(_, id)| id).collect();
                    for id in &want {
                        model.remove(id);
                    }
                    assert_eq!(got, want);
                }
            }
            assert_eq!(l.next_deadline(), model.values().map(|e| e.0).min());
            assert_eq!(l.len(), model.len());
        }
        check(&l);
    }
}
