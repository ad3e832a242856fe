//! A count of the keys the state machine has worked on in this process, for the server's
//! stall watchdog: a node loop stuck in one long turn may be *busy* (a DeleteRange of
//! hundreds of thousands of keys, which every member applies as long, so a new master would
//! be as stuck) or *stalled* (a disk that does not answer, a loop that no longer moves). The
//! count moves in the first case only, so the watchdog steps a master down only when a turn
//! has lasted past its bound with no key worked on for as long.
//!
//! Per process, not per state machine: a state machine is replaced whole when a snapshot is
//! installed, and the watchdog's thread cannot reach the loop's. A server process runs one
//! node; the simulator runs no watchdog.

use std::sync::atomic::{AtomicU64, Ordering};

static KEYS_WORKED: AtomicU64 = AtomicU64::new(0);

/// Notes that one key was applied, flushed or read for a command.
#[inline]
pub(crate) fn tick() {
    KEYS_WORKED.fetch_add(1, Ordering::Relaxed);
}

/// The keys worked on so far: it changes while the state machine makes progress.
pub fn keys_worked() -> u64 {
    KEYS_WORKED.load(Ordering::Relaxed)
}
