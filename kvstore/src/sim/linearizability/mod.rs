//! Linearizability checker for the histories the simulator's clients record.
//!
//! The model is a map of independent registers: every key is absent or holds one `u64` (the
//! simulator's clients write unique values, so a value identifies the write that produced it).
//! Operations are etcd's single-key Put, Get (Range of one key), Delete and a compare-and-swap
//! (a Txn that compares the value, or absence, and puts on success).
//!
//! The checker is the Wing–Gong–Lowe search with Porcupine's memoisation, run per key: a
//! history of a map of registers is linearizable iff every key's sub-history is
//! (P-compositionality, Herlihy & Wing's locality), and checking keys separately keeps the
//! search space small. See [`check`].
//!
//! The module is self-contained on purpose: it depends on nothing else in the crate, so the
//! simulator can record histories in its own terms and the checker stays testable by itself.

mod report;
mod wgl;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

/// Identifies the simulated client that issued an operation (for reports only).
pub type ClientId = u32;

/// Simulator time in nanoseconds; only its order matters to the checker.
pub type Time = u64;

/// A key, as bytes (etcd keys are arbitrary bytes).
pub type Key = Vec<u8>;

/// What a client asked the store to do. Every operation touches exactly one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvOp {
    /// Set `key` to `value`. Values should be unique per write (puts and swaps) across the
    /// history: the check is exact either way, but a duplicate value lets a stale read pass as
    /// a read of the other write, so the simulator would miss bugs.
    Put {
        /// The key written.
        key: Key,
        /// The value written.
        value: u64,
    },
    /// Read `key`'s current value.
    Get {
        /// The key read.
        key: Key,
    },
    /// Remove `key` (a no-op on an absent key that still reports `deleted: false`).
    Delete {
        /// The key removed.
        key: Key,
    },
    /// Single-key compare-and-swap, as an etcd Txn: if the value is `expected` (`None`: the key
    /// is absent) then put `new`, else change nothing.
    Cas {
        /// The key compared and maybe written.
        key: Key,
        /// The value the key must hold for the swap to happen; `None` means "absent".
        expected: Option<u64>,
        /// The value written when the comparison holds.
        new: u64,
    },
}

impl KvOp {
    /// The key the operation touches (histories are partitioned by it).
    pub fn key(&self) -> &[u8] {
        match self {
            KvOp::Put { key, .. } | KvOp::Get { key } | KvOp::Delete { key } | KvOp::Cas { key, .. } => key,
        }
    }
}

/// What the client got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvOutcome {
    /// A put was acknowledged.
    Put,
    /// A get returned this value (`None`: the key was absent).
    Get(Option<u64>),
    /// A delete was acknowledged; `deleted` is whether the key existed.
    Delete {
        /// Whether a key was removed (etcd's `deleted > 0`).
        deleted: bool,
    },
    /// A compare-and-swap was acknowledged; `succeeded` is whether the comparison held.
    Cas {
        /// Whether the comparison held and the new value was written.
        succeeded: bool,
    },
    /// No answer, or a retryable error after the request may have been proposed: the operation
    /// may have taken effect at any time after its call, or never. Its `ret` is ignored.
    Unknown,
}

/// One client operation with its real-time interval.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The client that issued it.
    pub client: ClientId,
    /// What was asked.
    pub op: KvOp,
    /// When the client sent the request.
    pub call: Time,
    /// When the client received the answer; ignored when `outcome` is [`KvOutcome::Unknown`].
    pub ret: Time,
    /// What the client got back.
    pub outcome: KvOutcome,
}

/// A concurrent history: every operation the clients completed or gave up on, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    ops: Vec<Operation>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        History::default()
    }

    /// Records one operation (order of recording does not matter; times do).
    pub fn push(&mut self, op: Operation) {
        self.ops.push(op);
    }

    /// How many operations were recorded.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The recorded operations, in recording order.
    pub fn ops(&self) -> &[Operation] {
        &self.ops
    }
}

impl FromIterator<Operation> for History {
    fn from_iter<I: IntoIterator<Item = Operation>>(iter: I) -> Self {
        History { ops: iter.into_iter().collect() }
    }
}

impl Extend<Operation> for History {
    fn extend<I: IntoIterator<Item = Operation>>(&mut self, iter: I) {
        self.ops.extend(iter);
    }
}

/// How much search the checker may spend before giving up with [`CheckResult::Inconclusive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckBudget {
    /// Search steps allowed per key (one step is one attempt to linearize, skip or undo an
    /// operation). Linearizable histories from the simulator need a few steps per operation;
    /// the budget only bites on pathological concurrency or many unanswered writes.
    pub max_steps: u64,
}

impl Default for CheckBudget {
    /// A budget that is a fraction of a second of search per key on a typical machine.
    fn default() -> Self {
        CheckBudget { max_steps: 2_000_000 }
    }
}

/// The checker's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckResult {
    /// Every key's sub-history is linearizable.
    Linearizable {
        /// How many operations were searched (unanswered gets are dropped before the search
        /// because they constrain nothing, and are not counted).
        ops_checked: usize,
    },
    /// Some key's sub-history is not linearizable: the store is wrong (or the history is).
    Violation(ViolationReport),
    /// No verdict for `key`: never treat this as linearizable.
    Inconclusive {
        /// The key that could not be decided.
        key: Key,
        /// Why.
        reason: InconclusiveReason,
    },
}

impl CheckResult {
    /// Whether the history was proven linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, CheckResult::Linearizable { .. })
    }

    /// Whether a violation was found.
    pub fn is_violation(&self) -> bool {
        matches!(self, CheckResult::Violation(_))
    }
}

/// Why the checker could not decide a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InconclusiveReason {
    /// The search used up [`CheckBudget::max_steps`] without a verdict.
    BudgetExhausted {
        /// Steps spent on the key.
        steps: u64,
    },
    /// An operation cannot be part of any history: it returned before it was called, or its
    /// outcome is of another kind than its request (a bug in the recording, not in the store).
    Malformed {
        /// The offending operation.
        op: Operation,
        /// What is wrong with it.
        problem: String,
    },
}

/// Evidence of a linearizability violation on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViolationReport {
    /// The key whose sub-history is not linearizable.
    pub key: Key,
    /// A non-linearizable sub-history of `key`, sorted by call time: the key's operations that
    /// were called no later than `stuck` returned when that prefix alone is already a violation
    /// (usually), else all of the key's operations.
    pub ops: Vec<Operation>,
    /// An operation that no linearization could place before its return, found at the end of
    /// one of the longest partial linearizations the search built. The likeliest culprit, not a
    /// proof: other orders fail elsewhere.
    pub stuck: Operation,
    /// A human-readable account: the key, the tail of that partial linearization with the model
    /// state after each step, the stuck operation and the operations concurrent with it, all
    /// with clients and times, for someone replaying the simulator seed.
    pub explanation: String,
}

impl fmt::Display for ViolationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explanation)
    }
}

/// Checks whether `history` is linearizable with respect to a map of registers where every key
/// starts absent.
///
/// Keys are checked independently, in byte order of the key. The first key (in that order) with
/// a violation is reported; if there is none, the first key whose search ran out of `budget` (or
/// that holds a malformed operation) is reported as inconclusive. A violation on a later key
/// wins over an earlier inconclusive one because it is the more useful finding.
///
/// Real-time order: operation A precedes B iff `A.ret < B.call`. An operation that returns at the
/// same instant another is called is treated as concurrent with it (the simulator's clock can
/// assign both events the same time, and nothing then orders them).
///
/// Unanswered operations ([`KvOutcome::Unknown`]) return at +infinity, as in Porcupine: a write
/// may take effect at any point after its call, including after every answered operation, which
/// is indistinguishable from never taking effect. An unanswered get constrains nothing and is
/// dropped.
pub fn check(history: &History, budget: CheckBudget) -> CheckResult {
    // BTreeMap: a deterministic key order, so the same history always yields the same report.
    let mut by_key: BTreeMap<&[u8], Vec<&Operation>> = BTreeMap::new();
    for op in &history.ops {
        by_key.entry(op.op.key()).or_default().push(op);
    }

    let mut ops_checked = 0;
    let mut inconclusive: Option<CheckResult> = None;
    for (key, ops) in by_key {
        let prepared = match prepare(&ops) {
            Ok(prepared) => prepared,
            Err(reason) => {
                inconclusive.get_or_insert(CheckResult::Inconclusive { key: key.to_vec(), reason });
                continue;
            }
        };
        ops_checked += prepared.len();
        match wgl::search(&prepared, budget.max_steps) {
            wgl::Outcome::Linearizable => {}
            wgl::Outcome::Exhausted { steps } => {
                inconclusive.get_or_insert(CheckResult::Inconclusive {
                    key: key.to_vec(),
                    reason: InconclusiveReason::BudgetExhausted { steps },
                });
            }
            wgl::Outcome::Violation(stuck) => {
                return CheckResult::Violation(report::build(key, &prepared, &stuck, budget.max_steps));
            }
        }
    }
    inconclusive.unwrap_or(CheckResult::Linearizable { ops_checked })
}

/// The model's state for one key: absent, or a value.
pub(crate) type State = Option<u64>;

/// An operation reduced to what the search needs: its effect and the outcome it must produce
/// (`None`: unknown, any outcome is accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Put(u64),
    Get(Option<u64>),
    Delete(Option<bool>),
    Cas { expected: Option<u64>, new: u64, succeeded: Option<bool> },
}

impl Step {
    /// Whether the step never changes the state when its recorded outcome is possible: a get,
    /// a swap that reported failure, a delete that reported nothing to delete.
    fn is_read_only(self) -> bool {
        matches!(self, Step::Get(_) | Step::Delete(Some(false)) | Step::Cas { succeeded: Some(false), .. })
    }

    /// The state after applying the step to `state`, or `None` if the step cannot produce its
    /// recorded outcome from `state`.
    fn apply(self, state: State) -> Option<State> {
        match self {
            Step::Put(value) => Some(Some(value)),
            Step::Get(seen) => (seen == state).then_some(state),
            Step::Delete(deleted) => match deleted {
                Some(deleted) if deleted != state.is_some() => None,
                _ => Some(None),
            },
            Step::Cas { expected, new, succeeded } => {
                let holds = state == expected;
                match succeeded {
                    Some(succeeded) if succeeded != holds => None,
                    _ => Some(if holds { Some(new) } else { state }),
                }
            }
        }
    }
}

/// One operation of a key's sub-history, ready for the search.
#[derive(Debug, Clone)]
struct KeyOp<'h> {
    /// The recorded operation (for reports).
    op: &'h Operation,
    call: Time,
    /// `None`: unanswered, returns at +infinity.
    ret: Option<Time>,
    step: Step,
}

/// Validates a key's operations and turns them into search steps, dropping unanswered gets.
fn prepare<'h>(ops: &[&'h Operation]) -> Result<Vec<KeyOp<'h>>, InconclusiveReason> {
    let mut prepared = Vec::with_capacity(ops.len());
    for &op in ops {
        let malformed = |problem: &str| InconclusiveReason::Malformed { op: op.clone(), problem: problem.to_string() };
        let unknown = op.outcome == KvOutcome::Unknown;
        let step = match (&op.op, op.outcome) {
            (KvOp::Get { .. }, KvOutcome::Unknown) => continue,
            (KvOp::Put { value, .. }, KvOutcome::Put | KvOutcome::Unknown) => Step::Put(*value),
            (KvOp::Get { .. }, KvOutcome::Get(seen)) => Step::Get(seen),
            (KvOp::Delete { .. }, KvOutcome::Delete { deleted }) => Step::Delete(Some(deleted)),
            (KvOp::Delete { .. }, KvOutcome::Unknown) => Step::Delete(None),
            (KvOp::Cas { expected, new, .. }, KvOutcome::Cas { succeeded }) => {
                Step::Cas { expected: *expected, new: *new, succeeded: Some(succeeded) }
            }
            (KvOp::Cas { expected, new, .. }, KvOutcome::Unknown) => {
                Step::Cas { expected: *expected, new: *new, succeeded: None }
            }
            _ => return Err(malformed("the outcome is not of the request's kind")),
        };
        if !unknown && op.ret < op.call {
            return Err(malformed("it returned before it was called"));
        }
        prepared.push(KeyOp { op, call: op.call, ret: (!unknown).then_some(op.ret), step });
    }
    bound_observed_unanswered_writes(&mut prepared);
    Ok(prepared)
}

/// Gives an unanswered write whose value was observed the return time it must have had.
///
/// When a value is written by exactly one operation, an answered operation that observed it (a
/// get that returned it, or a swap that compared equal to it) proves that write took effect
/// before the observer returned. Making the observer's return the write's return is therefore
/// equivalent, and it matters a lot: an unanswered write is otherwise a candidate forever, and
/// the search finds out it was needed only after exhausting every order without it.
fn bound_observed_unanswered_writes(ops: &mut [KeyOp<'_>]) {
    use std::collections::HashMap;

    let mut writers: HashMap<u64, usize> = HashMap::new();
    let mut first_observed: HashMap<u64, Time> = HashMap::new();
    for op in ops.iter() {
        match op.step {
            Step::Put(value) | Step::Cas { new: value, .. } => *writers.entry(value).or_default() += 1,
            _ => {}
        }
        let observed = match op.step {
            Step::Get(Some(value)) | Step::Cas { expected: Some(value), succeeded: Some(true), .. } => Some(value),
            _ => None,
        };
        if let (Some(value), Some(ret)) = (observed, op.ret) {
            let first = first_observed.entry(value).or_insert(ret);
            *first = (*first).min(ret);
        }
    }
    for op in ops.iter_mut().filter(|op| op.ret.is_none()) {
        let value = match op.step {
            Step::Put(value) | Step::Cas { new: value, .. } => value,
            _ => continue,
        };
        let Some(&observed_by) = first_observed.get(&value) else { continue };
        // An observation before the call is a violation: leave the write unanswered so the
        // search reports it rather than building an interval that ends before it starts.
        if writers.get(&value) != Some(&1) || observed_by < op.call {
            continue;
        }
        op.ret = Some(observed_by);
        if let Step::Cas { succeeded, .. } = &mut op.step {
            // The new value can only have appeared through a successful swap.
            *succeeded = Some(true);
        }
    }
}
