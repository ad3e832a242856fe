//! Simulated monotonic clocks that drift.

use crate::time::Instant;

/// One node's monotonic clock: it runs at `rate` (within [1-ε, 1+ε]) from the real time
/// it was last set, reading `since_local` then. Real time is the simulator's virtual time
/// in nanoseconds. A rate change keeps the reading continuous, as a real oscillator's
/// drift changes with its temperature without the clock jumping.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    since_real: u64,
    since_local: u64,
    rate: f64,
}

impl SimClock {
    /// A clock reading `offset` at real time zero and running at `rate`.
    pub fn new(offset: u64, rate: f64) -> Self {
        SimClock { since_real: 0, since_local: offset, rate }
    }

    /// The clock's rate relative to real time.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// From real time `real` on, the clock runs at `rate`; its reading at `real` stays.
    pub fn set_rate(&mut self, real: u64, rate: f64) {
        self.since_local = self.local(real).as_nanos();
        self.since_real = real;
        self.rate = rate;
    }

    /// The clock's reading at real time `real` (not before the last rate change).
    pub fn local(&self, real: u64) -> Instant {
        let elapsed = real.saturating_sub(self.since_real);
        Instant::from_nanos(self.since_local + (elapsed as f64 * self.rate).floor() as u64)
    }

    /// The earliest real time at which the clock reads `local` or later (the last rate
    /// change at the earliest).
    pub fn real_at(&self, local: Instant) -> u64 {
        let Some(since) = local.as_nanos().checked_sub(self.since_local) else { return self.since_real };
        let mut real = self.since_real + (since as f64 / self.rate).ceil() as u64;
        // Floating-point rounding may land one nanosecond short or long; settle exactly.
        while self.local(real) < local {
            real += 1;
        }
        while real > self.since_real && self.local(real - 1) >= local {
            real -= 1;
        }
        real
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_change_keeps_the_reading_and_changes_the_pace() {
        let mut clock = SimClock::new(5_000, 1.0);
        assert_eq!(clock.local(1_000).as_nanos(), 6_000);
        clock.set_rate(1_000, 0.5);
        assert_eq!(clock.local(1_000).as_nanos(), 6_000);
        assert_eq!(clock.local(3_000).as_nanos(), 7_000);
        assert_eq!(clock.real_at(Instant::from_nanos(7_000)), 3_000);
        assert_eq!(clock.real_at(Instant::from_nanos(100)), 1_000, "a past reading is now at the earliest");
    }
}
