//! Where a slow read's time went: one warning per read that took longer than
//! [`SLOW_READ`], naming its phases (waiting for the engine batch in flight, reading key
//! records, reading the history's changes) with their time and what they read, as etcd's
//! "read-only range request took too long" trace does. A read runs on one thread from its
//! start to its answer, so the figures are kept per thread and need no passing around.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// A read slower than this is logged with its phases.
pub(crate) const SLOW_READ: Duration = Duration::from_secs(1);

/// A phase of a read.
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    /// Waiting for the engine batches begun before the read to be published.
    Settle,
    /// Reading key records (or only keys) from the engine.
    Records,
    /// Reading the history's changes (an overlay's catch-up, a count carried across revisions).
    History,
}

#[derive(Default)]
struct Figures {
    /// Time per phase, in [`Phase`]'s order.
    took: [Duration; 3],
    /// Items read per phase (key records, changes).
    items: [usize; 3],
}

thread_local! {
    static FIGURES: RefCell<Figures> = RefCell::new(Figures::default());
}

/// Runs `work` as part of `phase` of the current read; `items` tells what its result read.
pub(crate) fn timed<T>(phase: Phase, work: impl FnOnce() -> T, items: impl FnOnce(&T) -> usize) -> T {
    let started = Instant::now();
    let result = work();
    let took = started.elapsed();
    let read = items(&result);
    FIGURES.with(|figures| {
        let mut figures = figures.borrow_mut();
        figures.took[phase as usize] += took;
        figures.items[phase as usize] += read;
    });
    result
}

/// The history's changes in the read's range that the last read on this thread read.
#[cfg(test)]
pub(crate) fn changes_read() -> usize {
    FIGURES.with(|figures| figures.borrow().items[Phase::History as usize])
}

/// The trace of one read, begun on its thread.
pub(crate) struct ReadTrace {
    started: Instant,
}

impl ReadTrace {
    /// Starts the trace of a read on this thread.
    pub(crate) fn begin() -> Self {
        FIGURES.with(|figures| *figures.borrow_mut() = Figures::default());
        ReadTrace { started: Instant::now() }
    }

    /// Ends it: logs the read's phases if it was slow. `what` names the read.
    pub(crate) fn end(self, what: impl FnOnce() -> String) {
        let took = self.started.elapsed();
        if took < SLOW_READ {
            return;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        FIGURES.with(|figures| {
            let f = figures.borrow();
            tracing::warn!(
                read = %what(),
                took_ms = ms(took),
                settle_ms = ms(f.took[Phase::Settle as usize]),
                records_ms = ms(f.took[Phase::Records as usize]),
                records = f.items[Phase::Records as usize],
                history_ms = ms(f.took[Phase::History as usize]),
                changes_in_range = f.items[Phase::History as usize],
                "a read took long",
            );
        });
    }
}
