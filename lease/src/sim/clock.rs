//! Simulated monotonic clocks that drift.

use crate::time::Instant;

/// One node's monotonic clock: `local = offset + rate · real`, with `rate` within
/// [1-ε, 1+ε]. Real time is the simulator's virtual time in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    offset: u64,
    rate: f64,
}

impl SimClock {
    /// A clock reading `offset` at real time zero and running at `rate`.
    pub fn new(offset: u64, rate: f64) -> Self {
        SimClock { offset, rate }
    }

    /// The clock's rate relative to real time.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The clock's reading at real time `real`.
    pub fn local(&self, real: u64) -> Instant {
        Instant::from_nanos(self.offset + (real as f64 * self.rate).floor() as u64)
    }

    /// The earliest real time at which the clock reads `local` or later.
    pub fn real_at(&self, local: Instant) -> u64 {
        let Some(since) = local.as_nanos().checked_sub(self.offset) else { return 0 };
        let mut real = (since as f64 / self.rate).ceil() as u64;
        // Floating-point rounding may land one nanosecond short or long; settle exactly.
        while self.local(real) < local {
            real += 1;
        }
        while real > 0 && self.local(real - 1) >= local {
            real -= 1;
        }
        real
    }
}
