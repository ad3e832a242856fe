//! Monotonic time as the protocol cores see it.
//!
//! The cores never read a clock. Every input carries `now`, a reading of the node's own
//! monotonic clock. Two readings of *different* nodes are never compared: only durations
//! travel between nodes, and each node measures them with its own clock.

use std::time::Duration;

/// A reading of one node's local monotonic clock, in nanoseconds since an arbitrary origin.
///
/// Only differences between two readings of the same node mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` nanoseconds after the clock's origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The instant `d` later, saturating at the end of time instead of wrapping.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(d)))
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in nanoseconds, saturating instead of overflowing `u64`.
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `d` scaled by `factor` (non-negative), rounded down to whole nanoseconds.
pub(crate) fn scale(d: Duration, factor: f64) -> Duration {
    let nanos = (duration_nanos(d) as f64 * factor).floor();
    if nanos <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(nanos as u64)
    }
}
