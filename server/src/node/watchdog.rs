//! The stall watchdog: a master whose node loop cannot keep up gives up mastership on
//! purpose rather than hold a lease it cannot serve under.
//!
//! The election runs on a thread of its own, so a node loop stuck in a long turn (a
//! command that takes seconds to apply, a stalled disk under a sync) no longer lets the
//! master's lease run out: it would be renewed on time while no write or read of the
//! cluster makes progress. So the loop reports when its current turn began and since when
//! a sync is in flight, and this thread, every [`CHECK_EVERY`], steps the master down once
//! either has lasted longer than the stall bound (five election lease times, at least 3 s:
//! [`stall_bound`]), and again if it is elected again while still stalled. One log line per
//! stall. A long turn or sync during which the state machine went on working on keys
//! ([`leasekv_kvstore::progress`]) is busy, not stalled: a DeleteRange of 200,000 keys (the
//! end of `etcdctl check perf --load=l`) takes every member 4–5 s, so stepping down only
//! moved mastership to another member as busy, twice a run. So is one engine call handed
//! many records (sled's batch of that DeleteRange), for as long as its allowance
//! ([`leasekv_kvstore::progress::call_allowance`]).

use super::*;
use std::sync::atomic::AtomicBool;

/// How often the watchdog looks.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How long the loop may be stuck in one turn with no key worked on, or a sync may take,
/// before a master steps down: five election lease times, at least 3 s. Short enough that a
/// stuck disk costs a few seconds rather than the cluster; a big command (which every member
/// applies as long: a new master would be as stuck) works on keys all along.
pub fn stall_bound(election_lease_time: Duration) -> Duration {
    (election_lease_time * 5).max(Duration::from_secs(3))
}

/// What the node loop reports of its progress, read by the watchdog.
#[derive(Debug)]
pub(super) struct LoopHealth {
    origin: Instant,
    /// When the current turn began (nanoseconds after `origin`, plus one; 0: between turns).
    turn_began: AtomicU64,
    /// When the sync in flight was handed to the disk (as `turn_began`; 0: none).
    sync_began: AtomicU64,
}

impl LoopHealth {
    pub(super) fn new() -> Self {
        LoopHealth { origin: Instant::now(), turn_began: AtomicU64::new(0), sync_began: AtomicU64::new(0) }
    }

    fn stamp(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// A turn begins.
    pub(super) fn turn_begins(&self) {
        self.turn_began.store(self.stamp(), Ordering::Release);
    }

    /// The turn ended.
    pub(super) fn turn_ends(&self) {
        self.turn_began.store(0, Ordering::Release);
    }

    /// A sync was handed to the disk, or (`false`) the one in flight ended.
    pub(super) fn syncing(&self, in_flight: bool) {
        self.sync_began.store(if in_flight { self.stamp() } else { 0 }, Ordering::Release);
    }

    /// What has been stuck for longer than `bound`, if anything. Either counts only when no
    /// key was worked on for `bound` either (`idle`): a long turn that applies a big command
    /// is busy, not stuck; and a log sync that takes seconds while the state machine writes
    /// that command's keys waits behind those writes on the same disk (the file system
    /// orders a sync after the dirty data before it: measured, the log syncs of every member
    /// took over 4 s while each wrote the 200,000 deletes closing `etcdctl check perf
    /// --load=l`, and two masters stepped down for it). A stuck disk stops those writes
    /// too, at the value files' sync, so its stall is still seen.
    fn stalled(&self, bound: Duration, idle: Duration) -> Option<(&'static str, Duration)> {
        let now = self.stamp();
        let age = |began: u64| (began != 0).then(|| Duration::from_nanos(now.saturating_sub(began)));
        let turn = age(self.turn_began.load(Ordering::Acquire)).filter(|took| *took > bound && idle > bound);
        let sync = age(self.sync_began.load(Ordering::Acquire)).filter(|took| *took > bound && idle > bound);
        turn.map(|took| ("a node loop turn", took)).or_else(|| sync.map(|took| ("a log sync", took)))
    }
}

/// Starts the watchdog thread; it ends when the node loop does (`stopped`).
pub(super) fn start(
    health: Arc<LoopHealth>,
    election: Arc<dyn ElectionBackend>,
    bound: Duration,
    stopped: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("kvserver-watchdog".into()).spawn(move || {
        let mut reported = false;
        let mut progress = (leasekv_kvstore::progress::keys_worked(), Instant::now());
        while !stopped.load(Ordering::Acquire) {
            std::thread::sleep(CHECK_EVERY);
            let worked = leasekv_kvstore::progress::keys_worked();
            if worked != progress.0 {
                progress = (worked, Instant::now());
            }
            // An engine call that was handed many records at once (the batch of a big
            // DeleteRange) ticks nothing until it returns: its allowance is idle time too.
            let idle = progress.1.elapsed().saturating_sub(leasekv_kvstore::progress::call_allowance());
            let Some((what, took)) = health.stalled(bound, idle) else {
                reported = false;
                continue;
            };
            if !election.status().is_master_at(election.now()) {
                continue;
            }
            if !reported {
                reported = true;
                tracing::warn!(
                    stalled = what,
                    took_ms = took.as_millis() as u64,
                    bound_ms = bound.as_millis() as u64,
                    "this master cannot serve: giving up mastership"
                );
            }
            crate::metrics::metrics().stalled_step_downs.inc();
            let _ = runtime.block_on(election.step_down());
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn or a sync is reported stalled only past the bound, and only while it lasts.
    #[test]
    fn a_turn_or_a_sync_is_stalled_only_past_the_bound() {
        let health = LoopHealth::new();
        let bound = Duration::from_millis(20);
        let idle = Duration::from_secs(1);
        assert!(health.stalled(bound, idle).is_none(), "idle");
        health.turn_begins();
        assert!(health.stalled(bound, idle).is_none(), "a turn just begun");
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(health.stalled(bound, idle).map(|(what, _)| what), Some("a node loop turn"));
        // The same long turn, with keys worked on lately: busy, not stuck.
        assert!(health.stalled(bound, Duration::from_millis(5)).is_none(), "a busy turn");
        health.turn_ends();
        assert!(health.stalled(bound, idle).is_none(), "the turn ended");
        health.syncing(true);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(health.stalled(bound, idle).map(|(what, _)| what), Some("a log sync"));
        // A slow sync while keys are being written: behind those writes, not stuck.
        assert!(health.stalled(bound, Duration::from_millis(5)).is_none(), "a sync behind the state's writes");
        health.syncing(false);
        assert!(health.stalled(bound, idle).is_none());
    }
}
