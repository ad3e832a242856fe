//! Human-readable violation reports.

use std::fmt::{self, Write as _};

use super::wgl::{self, Stuck};
use super::{KeyOp, KvOp, KvOutcome, Operation, State, Step, ViolationReport};

/// How many steps of the partial linearization the explanation shows (the end is what matters).
const TAIL: usize = 12;

/// Builds the report for a violation found on `key`.
pub(super) fn build(key: &[u8], ops: &[KeyOp<'_>], stuck: &Stuck, max_steps: u64) -> ViolationReport {
    let stuck_op = &ops[stuck.op];

    // Try to hand back a shorter counterexample: the operations called before the stuck one
    // returned. Dropping later operations can make the rest linearizable (a read may have seen
    // a write called after that point), so keep the cut only if it is itself a violation.
    let mut cut: Vec<KeyOp<'_>> = match stuck_op.ret {
        Some(ret) => ops.iter().filter(|op| op.call <= ret).cloned().collect(),
        None => ops.to_vec(),
    };
    let cut_is_violation = cut.len() < ops.len() && matches!(wgl::search(&cut, max_steps), wgl::Outcome::Violation(_));
    if !cut_is_violation {
        cut = ops.to_vec();
    }
    let mut report_ops: Vec<Operation> = cut.iter().map(|op| op.op.clone()).collect();
    report_ops.sort_by_key(|op| (op.call, op.outcome == KvOutcome::Unknown, op.ret, op.client));

    let mut text = String::new();
    // Writing into a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(text, "linearizability violation on key {}", KeyDisplay(key));
    let _ = if cut_is_violation {
        writeln!(
            text,
            "the key has {} checked operations; the {} called before the stuck operation returned are \
             already not linearizable and are listed in the report",
            ops.len(),
            report_ops.len()
        )
    } else {
        writeln!(text, "the key has {} checked operations, all listed in the report", ops.len())
    };
    let _ = writeln!(
        text,
        "one of the partial linearizations reaching furthest has {} operations{}:",
        stuck.linearized.len(),
        if stuck.linearized.len() > TAIL { format!(", the last {TAIL} are") } else { String::new() }
    );
    let mut state: State = None;
    let skip = stuck.linearized.len().saturating_sub(TAIL);
    for (pos, &i) in stuck.linearized.iter().enumerate() {
        state = ops[i].step.apply(state).unwrap_or(state);
        if pos >= skip {
            let _ = writeln!(text, "  {}  => state {}", ops[i].op, StateDisplay(state));
        }
    }
    debug_assert_eq!(state, stuck.state, "replaying the partial linearization reproduces its state");

    let _ = writeln!(text, "then this operation could not be linearized before its return:");
    let _ = writeln!(text, "  {}", stuck_op.op);
    if let (KvOutcome::Unknown, Some(ret)) = (stuck_op.op.outcome, stuck_op.ret) {
        let _ = writeln!(
            text,
            "  (never answered, but another operation that returned at {ret} ns observed its value, \
             so it must have taken effect by then)"
        );
    }
    let _ = writeln!(text, "  {}", why(stuck_op.step, stuck.state));

    let others: Vec<usize> = stuck.pending.iter().copied().filter(|&i| i != stuck.op).collect();
    if others.is_empty() {
        let _ = writeln!(text, "no other operation was pending at that point");
    } else {
        let _ =
            writeln!(text, "operations still pending at that point (any of them could go next; every choice failed):");
        for i in others {
            let _ = writeln!(text, "  {}", ops[i].op);
        }
    }

    ViolationReport { key: key.to_vec(), ops: report_ops, stuck: stuck_op.op.clone(), explanation: text }
}

/// Why `step` does not fit `state`, in words.
fn why(step: Step, state: State) -> String {
    let now = StateDisplay(state);
    match step {
        Step::Get(seen) if seen != state => {
            format!("it read {} but the key was {now} (the state after the linearization above)", StateDisplay(seen))
        }
        Step::Delete(Some(deleted)) if deleted != state.is_some() => {
            format!("it reported deleted={deleted} but the key was {now}")
        }
        Step::Cas { expected, succeeded: Some(succeeded), .. } if succeeded != (state == expected) => format!(
            "it reported succeeded={succeeded} comparing against {} but the key was {now}",
            StateDisplay(expected)
        ),
        _ => format!(
            "from state {now} it could be applied, but every continuation from there reached an \
             already-explored dead end (another operation's outcome cannot be explained)"
        ),
    }
}

/// A key as a quoted string when it is printable ASCII, else as hex.
struct KeyDisplay<'a>(&'a [u8]);

impl fmt::Display for KeyDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
            write!(f, "{:?}", String::from_utf8_lossy(self.0))
        } else {
            f.write_str("0x")?;
            for b in self.0 {
                write!(f, "{b:02x}")?;
            }
            Ok(())
        }
    }
}

/// A register state: `absent` or the value.
struct StateDisplay(State);

impl fmt::Display for StateDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("absent"),
            Some(v) => write!(f, "{v}"),
        }
    }
}

impl fmt::Display for KvOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvOp::Put { key, value } => write!(f, "put({}, {value})", KeyDisplay(key)),
            KvOp::Get { key } => write!(f, "get({})", KeyDisplay(key)),
            KvOp::Delete { key } => write!(f, "delete({})", KeyDisplay(key)),
            KvOp::Cas { key, expected, new } => {
                write!(f, "cas({}, expected {}, new {new})", KeyDisplay(key), StateDisplay(*expected))
            }
        }
    }
}

impl fmt::Display for KvOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvOutcome::Put => f.write_str("ok"),
            KvOutcome::Get(seen) => write!(f, "{}", StateDisplay(*seen)),
            KvOutcome::Delete { deleted } => write!(f, "deleted={deleted}"),
            KvOutcome::Cas { succeeded } => write!(f, "succeeded={succeeded}"),
            KvOutcome::Unknown => f.write_str("unknown (may or may not have taken effect)"),
        }
    }
}

impl fmt::Display for Operation {
    /// One line: who, what, when and the answer, e.g.
    /// `client 3: get("k") called at 1200 ns, returned at 1900 ns -> 7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {}: {} called at {} ns, ", self.client, self.op, self.call)?;
        if self.outcome == KvOutcome::Unknown {
            f.write_str("never answered")?;
        } else {
            write!(f, "returned at {} ns", self.ret)?;
        }
        write!(f, " -> {}", self.outcome)
    }
}
