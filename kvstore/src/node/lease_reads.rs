//! Linearizable reads a follower answers under its read lease (docs/read-leases.md): at
//! once when it has applied what the read must see, else held here until it has, or
//! handed to the master when the lease ends or the wait runs too long.

use crate::command::RangeRequest;
use crate::log::Slot;
use crate::types::Revision;
use leasekv_lease::Instant;
use std::time::Duration;

/// Longest a read waits here for its slot before it goes to the master: a slot accepted
/// and never chosen (its master died) must not hold a reader longer than a failover.
pub const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// Reads waiting for this node to apply a slot, each with its caller's waiter `W`.
pub struct LeaseReads<W> {
    waiting: Vec<Waiting<W>>,
    counts: LeaseReadCounts,
}

/// How the linearizable reads that reached this follower were served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseReadCounts {
    /// Answered at once under the read lease.
    pub local: u64,
    /// Answered under the read lease after waiting to apply a slot.
    pub waited: u64,
    /// Sent to the master: no valid read lease, or it ended while the read waited.
    pub forwarded: u64,
}

/// One read waiting for `target` to be applied.
pub struct Waiting<W> {
    /// The slot to apply first.
    pub target: Slot,
    /// When to give up and forward it.
    pub until: Instant,
    /// The read.
    pub request: RangeRequest,
    /// At which revision (0: the current one).
    pub revision: Revision,
    /// Its caller.
    pub waiter: W,
}

impl LeaseReadCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: LeaseReadCounts) {
        self.local += other.local;
        self.waited += other.waited;
        self.forwarded += other.forwarded;
    }
}

impl<W> Default for LeaseReads<W> {
    fn default() -> Self {
        LeaseReads { waiting: Vec::new(), counts: LeaseReadCounts::default() }
    }
}

impl<W> LeaseReads<W> {
    /// Holds a read until `target` is applied, or `until`.
    pub fn wait(&mut self, read: Waiting<W>) {
        self.waiting.push(read);
    }

    /// Takes the reads whose slot is applied (`applied`) or whose wait is over at `now`, in
    /// the order they came.
    pub fn take_due(&mut self, applied: Slot, now: Instant) -> Vec<Waiting<W>> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let due = |w: &Waiting<W>| w.target <= applied || w.until <= now;
        let (going, staying): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting).into_iter().partition(due);
        self.waiting = staying;
        going
    }

    /// The earliest end of a wait.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.until).min()
    }

    /// The counts so far.
    pub fn counts(&self) -> LeaseReadCounts {
        self.counts
    }

    /// Counts one read served as `how`.
    pub fn count(&mut self, how: impl FnOnce(&mut LeaseReadCounts)) {
        how(&mut self.counts);
    }
}
