//! Answers from the master that a follower holds until it has applied what they reflect.
//!
//! A forwarded read answered at revision R, or a forwarded write that made revision R, may
//! reach the follower before the log messages that let it apply R: the master sends an
//! answer as soon as it has one, and announces its commit point at the end of its turn. A
//! client told R by this node and then asking it again (a serializable read, a watch from
//! "now", a response header) must not see a revision below R, so the answer waits here
//! until this node's state reaches R, as etcd's followers wait for their applied index to
//! reach the read index. The wait is bounded by [`APPLY_WAIT`]: a follower far behind (a
//! snapshot on its way) still answers, late rather than never.

use super::{MasterAnswer, MasterResult};
use crate::types::Revision;
use leasekv_lease::Instant;
use std::time::Duration;

/// Longest an answer waits for this node to apply its revision.
pub const APPLY_WAIT: Duration = Duration::from_secs(1);

/// Answers waiting for this node's state to reach their revision, each with its caller's
/// waiter `W`.
pub struct HeldAnswers<W> {
    held: Vec<Held<W>>,
}

struct Held<W> {
    revision: Revision,
    until: Instant,
    waiter: W,
    result: MasterResult,
}

impl<W> Default for HeldAnswers<W> {
    fn default() -> Self {
        HeldAnswers { held: Vec::new() }
    }
}

/// The store revision an answer reflects, if it reflects one.
fn revision_of(result: &MasterResult) -> Option<Revision> {
    match result {
        Ok(MasterAnswer::Read(_, revision)) => Some(*revision),
        Ok(MasterAnswer::Propose(applied)) => Some(applied.revision),
        _ => None,
    }
}

impl<W> HeldAnswers<W> {
    /// The answer for `waiter` if it can go now (this node's state is at `applied`); held
    /// otherwise, until `now` + [`APPLY_WAIT`] at the latest.
    pub fn hold_unless_applied(
        &mut self,
        now: Instant,
        applied: Revision,
        waiter: W,
        result: MasterResult,
    ) -> Option<(W, MasterResult)> {
        match revision_of(&result) {
            Some(revision) if revision > applied => {
                let until = now.saturating_add(APPLY_WAIT);
                self.held.push(Held { revision, until, waiter, result });
                None
            }
            _ => Some((waiter, result)),
        }
    }

    /// Moves into `out` the answers whose revision this node reached (`applied`), and, when
    /// `now` is given, those held past their deadline; in the order they arrived.
    pub fn release(&mut self, applied: Revision, now: Option<Instant>, out: &mut Vec<(W, MasterResult)>) {
        if self.held.is_empty() {
            return;
        }
        let due = |h: &Held<W>| h.revision <= applied || now.is_some_and(|now| h.until <= now);
        let (going, staying): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held).into_iter().partition(due);
        self.held = staying;
        out.extend(going.into_iter().map(|h| (h.waiter, h.result)));
    }

    /// The earliest deadline of an answer held.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.until).min()
    }
}
