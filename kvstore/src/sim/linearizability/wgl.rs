//! The Wing–Gong–Lowe search over one key's sub-history, with Porcupine's cache.
//!
//! The history becomes a doubly linked list of call and return events in time order. The
//! operations that may be linearized next are exactly the calls that appear before the first
//! return in the list (anything later was called after some pending operation returned, so it
//! cannot go first). Linearizing an operation applies it to the model and *lifts* its events out
//! of the list; backtracking *unlifts* them (dancing links: reinsert in reverse order). The
//! cache remembers every (set of linearized operations, model state) already explored: reaching
//! it again cannot lead anywhere new, which turns the exponential search into one that is
//! close to linear on the histories real systems produce.
//!
//! Unanswered operations get one refinement over Porcupine: the cache also prunes a
//! configuration that *dominates* an explored one, meaning the same answered operations and the
//! same state but a superset of unanswered operations linearized. Any way to finish from the
//! larger set also finishes from the smaller one (the extra unanswered operations just never
//! take effect, and which operations may go next depends only on the answered ones), so a
//! failure of the smaller set proves the larger one fails too. Without this, every unanswered
//! write that never took effect doubles the configurations explored when the search backtracks.
//!
//! And a partial-order reduction: an answered read-only operation (a get, a failed swap, a
//! delete of nothing) whose outcome matches the current state is linearized at once as the only
//! move tried (see the proof at its use). Reads are most of a history, and without this the
//! search tries every interleaving of concurrent reads with the writes around them.
//!
//! Known cost: an unanswered delete or swap that did take effect (or an unanswered put whose
//! value nobody read but whose effect explains a delete or a failed swap) is tried only after
//! the orders without it have failed, which explores the configurations of the concurrency
//! window around the operation that needed it. The budget bounds this.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::{KeyOp, State, Time};

/// The search's verdict for one key.
#[derive(Debug)]
pub(super) enum Outcome {
    Linearizable,
    Violation(Stuck),
    Exhausted { steps: u64 },
}

/// Where one of the deepest failed partial linearizations got stuck (for the report).
#[derive(Debug, Clone)]
pub(super) struct Stuck {
    /// The partial linearization, as indices into the key's operations, in order.
    pub(super) linearized: Vec<usize>,
    /// The answered operation whose return was reached without it being linearizable.
    pub(super) op: usize,
    /// The model state at that point.
    pub(super) state: State,
    /// The operations concurrent with `op` that were still unlinearized (none of them could be
    /// linearized next either, or could but only to reach an explored dead end).
    pub(super) pending: Vec<usize>,
}

const NIL: usize = usize::MAX;
/// The list's sentinel node; event `e` is node `e + 1`.
const HEAD: usize = 0;

/// One call or return event.
#[derive(Debug, Clone, Copy)]
struct Event {
    op: usize,
    is_call: bool,
}

/// Which operations the cursor is currently offering.
///
/// The search first tries the answered operations and only then the unanswered ones: an
/// unanswered write is a candidate at every step from its call to the end, and trying it first
/// everywhere would explore "took effect here" at every depth before the usual explanation
/// ("took effect late, or never"). The order changes speed only, never the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Answered,
    Unanswered,
}

/// A frame of the search stack: an operation linearized, and how to undo it.
#[derive(Debug)]
struct Frame {
    op: usize,
    state_before: State,
    /// The pass that chose it, to resume the walk after it on backtracking.
    pass: Pass,
    /// Chosen by the partial-order reduction: no alternative needs trying at its depth.
    forced: bool,
}

/// Runs the search over `ops` with at most `max_steps` steps.
pub(super) fn search(ops: &[KeyOp<'_>], max_steps: u64) -> Outcome {
    let n = ops.len();

    // Events sorted by (time, kind, op): at equal times calls (kind 0) come before returns, so an
    // operation returning at t and one called at t are concurrent; the op index makes the order
    // total and so the search deterministic. Unanswered operations have no return event: they
    // never bound anything, which is what a return at +infinity means.
    let mut keyed: Vec<(Time, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, op) in ops.iter().enumerate() {
        keyed.push((op.call, 0, i));
        if let Some(ret) = op.ret {
            keyed.push((ret, 1, i));
        }
    }
    keyed.sort_unstable();
    let events: Vec<Event> = keyed.iter().map(|&(_, kind, op)| Event { op, is_call: kind == 0 }).collect();

    let nodes = events.len() + 1;
    let mut next: Vec<usize> = (1..=nodes).map(|i| if i == nodes { NIL } else { i }).collect();
    let mut prev: Vec<usize> = (0..nodes).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
    let mut call_node = vec![NIL; n];
    let mut ret_node = vec![NIL; n];
    for (e, ev) in events.iter().enumerate() {
        if ev.is_call {
            call_node[ev.op] = e + 1;
        } else {
            ret_node[ev.op] = e + 1;
        }
    }
    let event = |node: usize| events[node - 1];

    // Removes an operation's events from the list; `unlift` must undo lifts in reverse order.
    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, op: usize| {
        for node in [call_node[op], ret_node[op]] {
            if node != NIL {
                next[prev[node]] = next[node];
                if next[node] != NIL {
                    prev[next[node]] = prev[node];
                }
            }
        }
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, op: usize| {
        for node in [ret_node[op], call_node[op]] {
            if node != NIL {
                next[prev[node]] = node;
                if next[node] != NIL {
                    prev[next[node]] = node;
                }
            }
        }
    };

    // Answered and unanswered operations live in separate sets (see the module documentation
    // on domination); `rank` is an operation's index within its own set.
    let mut rank = vec![0; n];
    let (mut answered_total, mut unanswered_total) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        let counter = if op.ret.is_some() { &mut answered_total } else { &mut unanswered_total };
        rank[i] = *counter;
        *counter += 1;
    }
    // Zobrist hashing of the answered set: the xor of its members' keys, updated in O(1) per
    // step instead of rehashing the bitset. Unanswered operations stay out of the hash so that
    // configurations differing only in them share a bucket, where domination is checked.
    let zobrist: Vec<u64> = (0..n as u64).map(|i| mix(i.wrapping_add(0x5eed))).collect();
    let mut set_hash = 0u64;
    let mut answered_set = Bitset::new(answered_total);
    let mut unanswered_set = Bitset::new(unanswered_total);
    let mut cache = Cache::default();

    let mut answered_left = answered_total;
    let mut unanswered_pending = unanswered_total;
    let mut state: State = None;
    let mut stack: Vec<Frame> = Vec::new();
    let mut best: Option<((usize, usize), Stuck)> = None;
    let mut cursor = next[HEAD];
    let mut pass = Pass::Answered;
    let mut steps = 0u64;
    // Whether the search just entered a new configuration (and should look for a forced move).
    let mut fresh = true;

    loop {
        // Once every answered operation is linearized, the unanswered ones left can all take
        // effect after it (or never): their outcomes are unconstrained, so nothing can fail.
        if answered_left == 0 {
            return Outcome::Linearizable;
        }
        if steps >= max_steps {
            return Outcome::Exhausted { steps };
        }
        steps += 1;

        // The next operation to linearize, and whether it is forced (the only choice worth
        // trying here); `None`: this configuration is exhausted, backtrack.
        let mut chosen: Option<(usize, State, bool)> = None;
        let mut exhausted = false;
        if fresh {
            // Partial-order reduction: an answered read-only operation whose outcome matches the
            // state now can be linearized now without losing any solution. In any completion it
            // sits at some later point where it also changes nothing, and moving it forward
            // keeps every state and every real-time constraint (all that had to precede it
            // already did, since it is a candidate). So it is the only move tried here; if its
            // configuration is already known to fail, so is this one.
            fresh = false;
            let mut node = next[HEAD];
            while node != NIL && event(node).is_call {
                let op = event(node).op;
                if ops[op].ret.is_some() && ops[op].step.is_read_only() && ops[op].step.apply(state) == Some(state) {
                    chosen = Some((op, state, true));
                    break;
                }
                node = next[node];
            }
            steps += 1;
        }

        if chosen.is_none() {
            // Some answered operation is unlinearized, so its return event is in the list and
            // every walk from the head stops there at the latest.
            assert_ne!(cursor, NIL, "the cursor walked past every return event");
            let ev = event(cursor);
            if ev.is_call {
                let op = ev.op;
                let answered = ops[op].ret.is_some();
                let offered = match pass {
                    Pass::Answered => answered,
                    Pass::Unanswered => !answered,
                };
                cursor = next[cursor];
                if offered {
                    if let Some(new_state) = ops[op].step.apply(state) {
                        chosen = Some((op, new_state, false));
                    }
                }
                if chosen.is_none() {
                    continue;
                }
            } else if pass == Pass::Answered && unanswered_pending > 0 {
                // The candidates end at the first return event; now offer the unanswered ones.
                pass = Pass::Unanswered;
                cursor = next[HEAD];
                continue;
            } else {
                exhausted = true;
            }
        }

        if let Some((op, new_state, forced)) = chosen {
            let answered = ops[op].ret.is_some();
            let new_hash = if answered { set_hash ^ zobrist[op] } else { set_hash };
            if answered { &mut answered_set } else { &mut unanswered_set }.set(rank[op]);
            if cache.insert_if_new(new_hash, &answered_set, &unanswered_set, new_state) {
                stack.push(Frame { op, state_before: state, pass, forced });
                state = new_state;
                set_hash = new_hash;
                lift(&mut next, &mut prev, op);
                if answered {
                    answered_left -= 1;
                } else {
                    unanswered_pending -= 1;
                }
                cursor = next[HEAD];
                pass = Pass::Answered;
                fresh = true;
                continue;
            }
            if answered { &mut answered_set } else { &mut unanswered_set }.clear(rank[op]);
            if !forced {
                // Explored before: try the next candidate.
                continue;
            }
            exhausted = true;
        }
        debug_assert!(exhausted);

        // Keep the dead end that linearized the most answered operations, and among those the
        // fewest unanswered ones: it is the one closest to the real culprit.
        let score = (answered_total - answered_left, unanswered_pending);
        if best.as_ref().is_none_or(|(best_score, _)| score > *best_score) {
            let (stuck_op, pending) = first_return(&next, &events);
            let linearized = stack.iter().map(|f| f.op).collect();
            best = Some((score, Stuck { linearized, op: stuck_op, state, pending }));
        }
        // Undo moves until one with untried alternatives; a forced move had none.
        loop {
            let Some(frame) = stack.pop() else {
                // Nothing left to undo: every order failed.
                let Some((_, stuck)) = best else { unreachable!("a stuck point is recorded before giving up") };
                return Outcome::Violation(stuck);
            };
            unlift(&mut next, &mut prev, frame.op);
            state = frame.state_before;
            if ops[frame.op].ret.is_some() {
                answered_set.clear(rank[frame.op]);
                set_hash ^= zobrist[frame.op];
                answered_left += 1;
            } else {
                unanswered_set.clear(rank[frame.op]);
                unanswered_pending += 1;
            }
            if !frame.forced {
                pass = frame.pass;
                cursor = next[call_node[frame.op]];
                break;
            }
        }
    }
}

/// The first return event's operation (where the candidates end) and the operations called
/// before it that are still unlinearized.
fn first_return(next: &[usize], events: &[Event]) -> (usize, Vec<usize>) {
    let mut pending = Vec::new();
    let mut node = next[HEAD];
    while node != NIL {
        let ev = events[node - 1];
        if !ev.is_call {
            return (ev.op, pending);
        }
        pending.push(ev.op);
        node = next[node];
    }
    unreachable!("the search backtracks only while some answered operation is unlinearized")
}

/// SplitMix64's finaliser: a cheap, well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A set of operation indices.
#[derive(Debug, Clone)]
struct Bitset {
    words: Vec<u64>,
}

impl Bitset {
    fn new(len: usize) -> Self {
        Bitset { words: vec![0; len.div_ceil(64)] }
    }

    fn set(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    fn clear(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    /// Whether every member of `words` (a set of the same capacity) is in `self`.
    fn contains_all(&self, words: &[u64]) -> bool {
        self.words.iter().zip(words).all(|(mine, theirs)| theirs & !mine == 0)
    }
}

/// The hash map's keys are already well-mixed hashes: hashing them again would only cost time.
#[derive(Default)]
struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in rather than lose it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The configurations the search has entered that share one answered set and state: the
/// sets of unanswered operations linearized with them.
struct Group {
    answered: Box<[u64]>,
    state: State,
    unanswered: Vec<Box<[u64]>>,
}

/// Every configuration the search has entered, bucketed by a hash of (answered set, state)
/// and grouped by the exact pair, so that the answered set (as long as the history) is
/// compared once per group rather than once per unanswered set: with thousands of
/// unanswered writes a group holds thousands of sets.
#[derive(Default)]
struct Cache {
    buckets: HashMap<u64, Vec<Group>, BuildHasherDefault<PassThroughHasher>>,
}

impl Cache {
    /// Records the configuration; returns false if it, or one it dominates (same answered set
    /// and state, a subset of the unanswered operations), was already there.
    fn insert_if_new(&mut self, answered_hash: u64, answered: &Bitset, unanswered: &Bitset, state: State) -> bool {
        let state_hash = match state {
            None => mix(u64::MAX ^ 0xabcd),
            Some(v) => mix(v),
        };
        let bucket = self.buckets.entry(answered_hash ^ state_hash.rotate_left(17)).or_default();
        let group = match bucket.iter().position(|g| g.state == state && *g.answered == *answered.words) {
            Some(i) => &mut bucket[i],
            None => {
                bucket.push(Group {
                    answered: answered.words.clone().into_boxed_slice(),
                    state,
                    unanswered: Vec::new(),
                });
                let last = bucket.len() - 1;
                &mut bucket[last]
            }
        };
        if group.unanswered.iter().any(|seen| unanswered.contains_all(seen)) {
            return false;
        }
        group.unanswered.push(unanswered.words.clone().into_boxed_slice());
        true
    }
}
