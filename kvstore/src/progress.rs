//! A count of the keys the state machine has worked on in this process, for the server's
//! stall watchdog: a node loop stuck in one long turn may be *busy* (a DeleteRange of
//! hundreds of thousands of keys, which every member applies as long, so a new master would
//! be as stuck) or *stalled* (a disk that does not answer, a loop that no longer moves). The
//! count moves in the first case only, so the watchdog steps a master down only when a turn
//! has lasted past its bound with no key worked on for as long.
//!
//! One engine call can take seconds and tick nothing: sled's `apply_batch` of a DeleteRange's
//! 200,000 record deletes takes 1.2–1.9 s alone and 4–8 s on three members sharing two
//! cores. So such a call says how many records it was handed ([`in_one_call`]), and the
//! watchdog allows it time in proportion ([`call_allowance`]).
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

static RECORDS_IN_CALL: AtomicU64 = AtomicU64::new(0);

/// What the watchdog allows an engine call per record it was handed, on top of its bound: a
/// few times what sled took per record on this project's loaded test machine (20–40 µs),
/// so that a busy call is not taken for a stuck one, while a stuck disk under a call of
/// 200,000 records is still seen within 10 s more.
pub const ALLOWANCE_PER_RECORD: std::time::Duration = std::time::Duration::from_micros(50);

/// Runs `call`, an engine call handed `records` records at once, noting them for the
/// watchdog while it runs. Calls running at once on other threads (a snapshot install
/// writing its staged engine) add up: an allowance never ends before its own call does.
pub(crate) fn in_one_call<T>(records: usize, call: impl FnOnce() -> T) -> T {
    let records = u64::try_from(records).unwrap_or(u64::MAX);
    RECORDS_IN_CALL.fetch_add(records, Ordering::Relaxed);
    let result = call();
    RECORDS_IN_CALL.fetch_sub(records, Ordering::Relaxed);
    tick();
    result
}

/// The time the engine call running now is allowed beyond the watchdog's bound (zero when
/// none runs): [`ALLOWANCE_PER_RECORD`] for each record it was handed.
pub fn call_allowance() -> std::time::Duration {
    let records = RECORDS_IN_CALL.load(Ordering::Relaxed);
    ALLOWANCE_PER_RECORD.saturating_mul(u32::try_from(records).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While an engine call runs, the watchdog's allowance covers at least its records
    /// (other threads' calls only add to it), and its end is a step of progress.
    #[test]
    fn a_call_in_progress_is_allowed_time_for_its_records() {
        let before = keys_worked();
        let allowed = in_one_call(200_000, call_allowance);
        assert!(allowed >= ALLOWANCE_PER_RECORD * 200_000, "allowed {allowed:?} for 200,000 records");
        assert!(keys_worked() > before, "the call's end counts as progress");
    }
}
