//! The node loop's turns, timed: for the stall watchdog, the metrics, the loop's idle test
//! and the log line of a slow turn.

use super::watchdog::LoopHealth;
use std::time::{Duration, Instant};

/// Times the loop's turns for the watchdog and the metrics, and logs a slow one.
#[derive(Default)]
pub(super) struct TurnClock {
    /// When the turn's input arrived (the wait for it left out).
    began: Option<Instant>,
    /// When its input was handled.
    handled: Option<Instant>,
    /// When the last turn ended.
    ended: Option<Instant>,
    /// When a slow turn was last logged.
    logged: Option<Instant>,
}

/// A node-loop turn this long is logged (with where it went), at most once per
/// [`SLOW_TURN_LOG_EVERY`]: every request waits while one runs.
const SLOW_TURN: Duration = Duration::from_millis(50);
const SLOW_TURN_LOG_EVERY: Duration = Duration::from_secs(1);

impl TurnClock {
    pub(super) fn begin(&mut self, health: &LoopHealth) {
        self.began = Some(Instant::now());
        health.turn_begins();
    }

    pub(super) fn handled(&mut self) {
        self.handled = Some(Instant::now());
    }

    /// How long since the last turn ended, now that this turn's input is handled: the
    /// loop's idle test counts the input's handling too, as it did before the one driver
    /// (counting only the wait before the input made fewer turns idle, and one put at the
    /// master took 0.13 ms more: `benches/cluster.rs`, "put, 1 client at the leader").
    pub(super) fn idle_before(&self) -> Duration {
        self.ended.map_or(Duration::MAX, |ended| ended.elapsed())
    }

    pub(super) fn end(&mut self, health: &LoopHealth) {
        let ended = Instant::now();
        health.turn_ends();
        let began = self.began.unwrap_or(ended);
        let handled = self.handled.unwrap_or(ended);
        self.ended = Some(ended);
        let took = ended.duration_since(began);
        crate::metrics::metrics().loop_turn_took(took);
        if took >= SLOW_TURN && self.logged.is_none_or(|at| at.elapsed() >= SLOW_TURN_LOG_EVERY) {
            self.logged = Some(ended);
            tracing::info!(
                took_ms = took.as_millis() as u64,
                input_ms = handled.duration_since(began).as_millis() as u64,
                after_ms = ended.duration_since(handled).as_millis() as u64,
                "slow node loop turn"
            );
        }
    }
}
