//! The master's TTL tracker ("lessor", after etcd's): lease deadlines on the master's
//! monotonic clock, in an ordered structure so that finding what expired is O(log n).
use crate::types::LeaseId;
use leasekv_lease::Instant;
use std::time::Duration;

/// Deadlines of live leases, kept only while this node is a ready master.
#[derive(Debug, Default)]
pub struct Lessor {}

impl Lessor {
    /// An empty, stopped tracker.
    pub fn new() -> Self {
        unimplemented!()
    }
    /// Starts tracking: every lease's countdown restarts at its full TTL from `now`.
    pub fn start(&mut self, _now: Instant, _leases: impl IntoIterator<Item = (LeaseId, Duration)>) {
        unimplemented!()
    }
    /// Stops tracking and forgets every deadline (this node is no longer master).
    pub fn stop(&mut self) {
        unimplemented!()
    }
    /// Whether the tracker runs.
    pub fn is_running(&self) -> bool {
        unimplemented!()
    }
    /// Starts the countdown of a newly granted lease (no-op when stopped).
    pub fn track(&mut self, _now: Instant, _id: LeaseId, _ttl: Duration) {
        unimplemented!()
    }
    /// Resets a lease's countdown to its full TTL; returns the TTL, or None if unknown.
    pub fn keep_alive(&mut self, _now: Instant, _id: LeaseId) -> Option<Duration> {
        unimplemented!()
    }
    /// Forgets a lease (revoked or expired through the log).
    pub fn forget(&mut self, _id: LeaseId) {
        unimplemented!()
    }
    /// Time left before the lease expires.
    pub fn remaining(&self, _now: Instant, _id: LeaseId) -> Option<Duration> {
        unimplemented!()
    }
    /// The earliest deadline, for the driver's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        unimplemented!()
    }
    /// Takes up to `max` leases whose deadline is `<= now`, earliest first.
    pub fn take_expired(&mut self, _now: Instant, _max: usize) -> Vec<LeaseId> {
        unimplemented!()
    }
}
