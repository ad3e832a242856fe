//! A process-wide clock rate for fault injection: the node's [`MonotonicClock`] runs at
//! `rate` × real time, and the rate may change while the node runs.
//!
//! Only builds with the `clock-rate` feature have this (the chaos harness's kvserver);
//! release builds read the real monotonic clock and nothing else. The clock stays
//! continuous and monotonic across rate changes: a reading is the integral of the rate
//! over real time since the clock's origin, so a change bends the clock's slope without
//! making it jump.
//!
//! [`MonotonicClock`]: super::MonotonicClock

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;
use thiserror::Error;
use tokio::time::Instant;

/// The rates in force, each from its start until the next one's; before the first, 1.
static PERIODS: RwLock<Vec<(Instant, f64)>> = RwLock::new(Vec::new());

/// Real time the clock was made to skip (the `stale-lease-check` control), nanoseconds.
static LOST: AtomicU64 = AtomicU64::new(0);
/// Whether [`ignore_stops`] is on (then the process has one node clock).
static IGNORING_STOPS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The highest reading handed out, so that the clock never runs backwards when time is
/// taken out of it.
static HIGHEST: AtomicU64 = AtomicU64::new(0);

/// The allowed range: a clock may run fast or slow by up to 10×, never stop.
pub const RATE_RANGE: std::ops::RangeInclusive<f64> = 0.1..=10.0;

/// A rate outside [`RATE_RANGE`].
#[derive(Debug, Error, PartialEq)]
#[error("clock rate {0} is outside the allowed 0.1 to 10")]
pub struct RateError(pub f64);

/// Makes the clock run at `rate` × real time from now on.
pub fn set(rate: f64) -> Result<(), RateError> {
    if !RATE_RANGE.contains(&rate) {
        return Err(RateError(rate));
    }
    let mut periods = PERIODS.write().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    // Periods start in order; a rate set at the same instant replaces the last.
    if periods.last().is_some_and(|(start, _)| *start >= now) {
        periods.pop();
    }
    periods.push((now, rate));
    Ok(())
}

/// The rate in force now.
pub fn current() -> f64 {
    PERIODS.read().unwrap_or_else(|e| e.into_inner()).last().map_or(1.0, |(_, rate)| *rate)
}

/// The rate segments over `[origin, ∞)`: (start, rate), the first starting at `origin`.
fn segments(origin: Instant) -> Vec<(Instant, f64)> {
    let periods = PERIODS.read().unwrap_or_else(|e| e.into_inner());
    let mut rate_at_origin = 1.0;
    let mut later = Vec::new();
    for &(start, rate) in periods.iter() {
        if start <= origin {
            rate_at_origin = rate;
        } else {
            later.push((start, rate));
        }
    }
    let mut all = vec![(origin, rate_at_origin)];
    all.extend(later);
    all
}

/// A negative control: from now on the clock does not advance while the process is
/// stopped (SIGSTOP) or starved for more than 100 ms, as a lease counted in timer ticks
/// would not; after such a stop the node acts on a lease that ran out meanwhile.
pub fn ignore_stops() {
    IGNORING_STOPS.store(true, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("clock-ignore-stops".into()).spawn(|| {
        const STEP: Duration = Duration::from_millis(5);
        let mut last = std::time::Instant::now();
        loop {
            std::thread::sleep(STEP);
            let now = std::time::Instant::now();
            let gap = now.duration_since(last);
            if gap > Duration::from_millis(100) {
                LOST.fetch_add((gap - STEP).as_nanos() as u64, Ordering::SeqCst);
            }
            last = now;
        }
    });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the clock's stop detector");
    }
}

/// The clock's reading at real time `now`: the scaled time less what was skipped, never
/// below an earlier reading.
pub(crate) fn reading(origin: Instant, now: Instant) -> u64 {
    let reading = scaled(origin, now).saturating_sub(LOST.load(Ordering::SeqCst));
    if !IGNORING_STOPS.load(Ordering::SeqCst) {
        // Nothing is taken out: the scaled clock is monotonic by itself (and `HIGHEST`, one
        // for the process, must not tie together clocks with different origins, as tests make).
        return reading;
    }
    HIGHEST.fetch_max(reading, Ordering::SeqCst).max(reading)
}

/// The real instant at which the clock reads `nanos`.
pub(crate) fn real_instant(origin: Instant, nanos: u64) -> Option<Instant> {
    unscaled(origin, nanos.saturating_add(LOST.load(Ordering::SeqCst)))
}

/// Nanoseconds the scaled clock advanced from `origin` to `now`.
fn scaled(origin: Instant, now: Instant) -> u64 {
    let segments = segments(origin);
    let mut total = 0f64;
    for (i, &(start, rate)) in segments.iter().enumerate() {
        if start >= now {
            break;
        }
        let end = segments.get(i + 1).map_or(now, |(next, _)| (*next).min(now));
        total += end.duration_since(start).as_nanos() as f64 * rate;
    }
    total as u64
}

/// The real instant at which the scaled clock started at `origin` reads `nanos`, assuming
/// the current rate holds from now on.
fn unscaled(origin: Instant, nanos: u64) -> Option<Instant> {
    let segments = segments(origin);
    let mut left = nanos as f64;
    for (i, &(start, rate)) in segments.iter().enumerate() {
        match segments.get(i + 1) {
            Some(&(next, _)) => {
                let span = next.duration_since(start).as_nanos() as f64 * rate;
                if left <= span {
                    return start.checked_add(Duration::from_nanos((left / rate) as u64));
                }
                left -= span;
            }
            None => return start.checked_add(Duration::from_secs_f64((left / rate) / 1e9)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test only: the rate is process-wide, and tests run in parallel threads.
    #[test]
    fn the_clock_follows_the_rate_continuously_and_inverts() {
        let origin = Instant::now() - Duration::from_secs(10);
        assert!(set(20.0).is_err() && set(0.0).is_err() && set(f64::NAN).is_err());
        // Rate 1 so far: ten seconds.
        let before = reading(origin, Instant::now());
        assert!((9_900_000_000..11_000_000_000).contains(&before), "{before}");
        set(2.0).expect("in range");
        let changed = Instant::now();
        let later = changed + Duration::from_secs(1);
        let reading = scaled(origin, later);
        let expected = scaled(origin, changed) + 2_000_000_000;
        assert!(reading.abs_diff(expected) < 1_000, "{reading} vs {expected}");
        let back = unscaled(origin, reading).expect("representable");
        assert!(back.max(later).duration_since(back.min(later)) < Duration::from_micros(1));
        set(1.0).expect("in range");
        assert_eq!(current(), 1.0);
    }
}
