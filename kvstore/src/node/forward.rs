//! Requests only the master can answer (writes, linearizable reads, lease keepalives and
//! lease status, step-down), and how a follower hands them to the master: over the peer
//! stream, one hop, the way Raft forwards proposals, instead of a second client call per
//! request. The master answers on the same stream; the follower routes the answer to the
//! waiting client.
//!
//! One path for all of them: a [`MasterRequest`] goes to the node with the caller's waiter
//! (whatever the driver answers it through: a channel in the server, an id in the
//! simulator), the master answers with a [`MasterAnswer`] of the same kind, and the caller
//! takes out the kind it expects ([`expect_answer`]). A new master-only call is a variant
//! of each and one arm where the master serves it ([`super::Node`]).
//!
//! A forward is never resent: a write may already be applied when its answer is lost. A
//! forward whose master changes or goes quiet fails: writes as "indeterminate", everything
//! else as "not master", which the API layer retries. While the follower's stream to the
//! master is known to be broken (a master that was killed), a request is not forwarded at
//! all: it fails as "not master" at once and the API layer waits for the next master.

use crate::command::{Applied, Command, RangeRequest, RangeResponse};
use crate::log::{LeaseStatus, LogBallot, RequestError};
use crate::types::{LeaseId, Revision};
use leasekv_lease::{Instant, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// How long a follower waits for the master's answer to a forward. A backstop for a
/// message lost on a stream that broke while the master stayed master; a master that dies
/// is noticed sooner, through the election.
///
/// etcd's own request timeout with its default election timeout (5 s + 2 × 1 s): a forward
/// is not given up while the master is still applying what etcd would still wait for (the
/// closing DeleteRange of `etcdctl check perf`, 200,000 keys, took a loaded master longer
/// than the 3 s this was before).
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(7);

/// A request only the master can answer. Local callers hand it to the node with a waiter;
/// a follower sends it to the master over the peer stream and keeps the waiter in its
/// [`Forwards`] until the master's answer comes back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MasterRequest {
    /// A command through the log.
    Propose(Command),
    /// A linearizable read, at a past revision or (0) the current one.
    Read(RangeRequest, Revision),
    /// Renew a lease.
    KeepAlive(LeaseId),
    /// One lease's remaining life.
    LeaseStatus(LeaseId),
    /// Every lease.
    LeaseList,
    /// Give up mastership, so another node takes over.
    StepDown,
}

impl MasterRequest {
    /// Whether it changes something (the store, or who is master), so that a lost answer
    /// leaves its outcome unknown and it must not be sent again.
    pub fn is_write(&self) -> bool {
        matches!(self, MasterRequest::Propose(_) | MasterRequest::StepDown)
    }

    /// Whether serving it twice would differ from serving it once: a write, or a keepalive
    /// (a second one renews the lease later than its caller asked). A master remembers
    /// these forwards to serve one delivered twice once ([`ServedForwards`]).
    pub fn changes_state(&self) -> bool {
        self.is_write() || matches!(self, MasterRequest::KeepAlive(_))
    }
}

/// The master's answer to a [`MasterRequest`] of the same kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MasterAnswer {
    /// To `Propose`: the command's outcome.
    Propose(Applied),
    /// To `Read`.
    Read(RangeResponse, Revision),
    /// To `KeepAlive`: the TTL granted.
    KeepAlive(i64),
    /// To `LeaseStatus`.
    LeaseStatus(LeaseStatus),
    /// To `LeaseList`.
    LeaseList(Vec<LeaseStatus>),
    /// To `StepDown`: mastership given up.
    SteppedDown,
}

/// The master's answer or why there is none.
pub type MasterResult = Result<MasterAnswer, RequestError>;

/// Takes the answer a caller expects out of `result` with `pick`. An answer of another kind
/// (a confused or hostile peer) fails the request instead.
pub fn expect_answer<T>(result: MasterResult, pick: impl FnOnce(MasterAnswer) -> Option<T>) -> Result<T, RequestError> {
    pick(result?)
        .ok_or_else(|| RequestError::PeerProtocol("the master answered a forwarded request with another kind".into()))
}

/// Identifies a forward between one follower and the master it went to.
pub type ForwardId = u64;

struct Pending<W> {
    waiter: W,
    master: NodeId,
    /// The master's log ballot when the forward went out, if this node had heard it from
    /// the master itself: a later ballot of the same node means it took the log over again
    /// (restarted, or lost and won mastership back), and what it held before is settled.
    ballot: Option<LogBallot>,
    /// What the caller is told if the answer does not come.
    if_lost: IfLost,
}

/// What a forward whose answer will not come tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IfLost {
    /// Nothing changed on the master's side: "not master", which the API layer retries.
    Retry,
    /// A write may have been applied: "indeterminate", never retried.
    Unknown,
    /// A step-down: once another node is master, what it asked for has happened (and
    /// repeating it would depose the new master); without one its outcome is unknown.
    StepDown,
}

impl IfLost {
    fn of(request: &MasterRequest) -> Self {
        match request {
            MasterRequest::StepDown => IfLost::StepDown,
            request if request.is_write() => IfLost::Unknown,
            _ => IfLost::Retry,
        }
    }
}

impl<W> Pending<W> {
    /// The answer for a forward whose answer will not come. `new_master` is the node the
    /// election now names instead of the one the forward went to, if that is why.
    fn abandon(self, hint: Option<NodeId>, new_master: Option<NodeId>) -> (W, MasterResult) {
        let result = match (self.if_lost, new_master) {
            (IfLost::StepDown, Some(_)) => Ok(MasterAnswer::SteppedDown),
            (IfLost::StepDown | IfLost::Unknown, _) => Err(RequestError::Indeterminate { hint }),
            (IfLost::Retry, _) => Err(RequestError::NotMaster { hint }),
        };
        (self.waiter, result)
    }
}

/// A master's memory of the forwards it served, so that a forward delivered twice (a
/// network that duplicates) is served once. Entries older than [`SERVED_MEMORY`] are
/// forgotten: this assumes no duplicate arrives that late (the simulator's network delays
/// a message by at most about a second; the peer streams never duplicate).
#[derive(Debug, Default)]
pub struct ServedForwards {
    seen: std::collections::HashSet<(NodeId, ForwardId)>,
    order: VecDeque<(Instant, NodeId, ForwardId)>,
}

/// How long a master remembers a forward it served: twice a follower's wait for it.
pub const SERVED_MEMORY: Duration = Duration::from_secs(2 * FORWARD_TIMEOUT.as_secs());

impl ServedForwards {
    /// Whether the forward `id` from `from` is new (and remembers it): `false` for one
    /// already served.
    pub fn first_time(&mut self, now: Instant, from: NodeId, id: ForwardId) -> bool {
        while let Some(&(at, node, old)) = self.order.front() {
            if now.saturating_since(at) < SERVED_MEMORY {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&(node, old));
        }
        if !self.seen.insert((from, id)) {
            return false;
        }
        self.order.push_back((now, from, id));
        true
    }
}

/// A follower's forwards waiting for the master's answer, each with its caller's waiter
/// `W`. Every method that settles forwards returns `(waiter, answer)` pairs for the driver
/// to deliver.
pub struct Forwards<W> {
    next_id: ForwardId,
    pending: HashMap<ForwardId, Pending<W>>,
    /// Deadlines in the order they were set (one timeout for all, so also in time order).
    deadlines: VecDeque<(Instant, ForwardId)>,
}

impl<W> Default for Forwards<W> {
    fn default() -> Self {
        Forwards { next_id: 0, pending: HashMap::new(), deadlines: VecDeque::new() }
    }
}

impl<W> Forwards<W> {
    /// Forwards whose ids start above `incarnation << 32`: the ids of a node's forwards
    /// never repeat across its restarts (the replica's incarnation changes with each), so
    /// a master can recognise a forward it already served.
    pub fn for_incarnation(incarnation: u32) -> Self {
        Forwards { next_id: u64::from(incarnation) << 32, ..Forwards::default() }
    }

    /// Records a forward of `request` to `master`, whose log ballot as this node last heard
    /// it is `seen`; returns the id its answer will carry.
    pub fn start(
        &mut self,
        request: &MasterRequest,
        waiter: W,
        master: NodeId,
        seen: LogBallot,
        now: Instant,
    ) -> ForwardId {
        self.next_id += 1;
        let id = self.next_id;
        let ballot = (seen.node == master).then_some(seen);
        self.pending.insert(id, Pending { waiter, master, ballot, if_lost: IfLost::of(request) });
        self.deadlines.push_back((now.saturating_add(FORWARD_TIMEOUT), id));
        id
    }

    /// Routes the answer from `from` to its waiter; answers from anyone but the node the
    /// request went to, or to forwards already given up, are dropped (`None`).
    pub fn answer(&mut self, from: NodeId, id: ForwardId, result: MasterResult) -> Option<(W, MasterResult)> {
        if self.pending.get(&id).is_none_or(|p| p.master != from) {
            return None;
        }
        self.pending.remove(&id).map(|pending| (pending.waiter, result))
    }

    /// Gives up on forwards past their deadline.
    pub fn expire(&mut self, now: Instant, hint: Option<NodeId>) -> Vec<(W, MasterResult)> {
        let mut settled = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(pending) = self.pending.remove(&id) {
                settled.push(pending.abandon(hint, None));
            }
        }
        settled
    }

    /// Gives up on forwards to any node but `master`, and on forwards to a master that has
    /// since taken the log over again (`seen`, the highest log ballot this node heard, is a
    /// later one of the same node): the election moved on, and the old master (or the old
    /// incarnation of this one, killed and restarted) will not answer, or its answer no
    /// longer counts as this hop's. Without the second rule a master restarted and elected
    /// again would leave the forwards it lost waiting out their timeout. The ballot a
    /// forward records is the one this node had heard; if the master had already taken the
    /// log over again when it went, the forward is given up when this node hears of it,
    /// although the master may serve it: an "indeterminate" more, never a wrong answer.
    pub fn master_changed(&mut self, master: NodeId, seen: LogBallot) -> Vec<(W, MasterResult)> {
        let retaken = |p: &Pending<W>| p.ballot.is_some_and(|b| seen.node == b.node && seen.round > b.round);
        let mut gone: Vec<ForwardId> =
            self.pending.iter().filter(|(_, p)| p.master != master || retaken(p)).map(|(id, _)| *id).collect();
        // In the order they were sent, so that a replayed seed answers in the same order.
        gone.sort_unstable();
        gone.into_iter()
            .filter_map(|id| self.pending.remove(&id))
            .map(|pending| {
                // A step-down has happened only if another node is master now.
                let replaced_by = (pending.master != master).then_some(master);
                pending.abandon(Some(master), replaced_by)
            })
            .collect()
    }

    /// The earliest deadline still pending, for the node loop's timer.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(_, id)) = self.deadlines.front() {
            if self.pending.contains_key(&id) {
                break;
            }
            self.deadlines.pop_front();
        }
        self.deadlines.front().map(|(deadline, _)| *deadline)
    }

    /// Forwards waiting for an answer.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Settled = Vec<(u32, MasterResult)>;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn read() -> MasterRequest {
        MasterRequest::Read(RangeRequest::default(), 0)
    }

    fn revision_of(answer: MasterAnswer) -> Option<Revision> {
        match answer {
            MasterAnswer::Read(_, revision) => Some(revision),
            _ => None,
        }
    }

    fn of(settled: &Settled, waiter: u32) -> &MasterResult {
        &settled.iter().find(|(w, _)| *w == waiter).expect("settled").1
    }

    #[test]
    fn an_answer_reaches_its_waiter_only_from_the_master_it_went_to() {
        let mut forwards = Forwards::default();
        let id = forwards.start(&read(), 1u32, NodeId(2), ballot(2, 4), at(0));
        let answer = || Ok(MasterAnswer::Read(RangeResponse::default(), 7));
        assert!(forwards.answer(NodeId(3), id, answer()).is_none(), "an answer from elsewhere is dropped");
        let (waiter, result) = forwards.answer(NodeId(2), id, answer()).expect("answered");
        assert_eq!(waiter, 1);
        assert_eq!(expect_answer(result, revision_of), Ok(7));
        assert!(forwards.is_empty());
    }

    #[test]
    fn an_answer_of_the_wrong_kind_fails_the_request() {
        assert!(matches!(
            expect_answer(Ok(MasterAnswer::KeepAlive(5)), revision_of),
            Err(RequestError::PeerProtocol(_))
        ));
        let refused = Err(RequestError::NotMaster { hint: None });
        assert_eq!(expect_answer(refused, revision_of), Err(RequestError::NotMaster { hint: None }));
    }

    #[test]
    fn a_lost_write_or_step_down_is_indeterminate_and_a_lost_read_is_retryable() {
        let mut forwards = Forwards::default();
        let grant = MasterRequest::Propose(Command::LeaseGrant { id: 0, name: None, ttl: 5 });
        forwards.start(&grant, 1u32, NodeId(2), ballot(2, 4), at(0));
        forwards.start(&read(), 2, NodeId(2), ballot(2, 4), at(0));
        forwards.start(&MasterRequest::StepDown, 3, NodeId(2), ballot(2, 4), at(0));
        let half = at(FORWARD_TIMEOUT.as_millis() as u64 / 2);
        assert!(forwards.expire(half, Some(NodeId(2))).is_empty(), "nothing expires before its deadline");
        assert_eq!(forwards.next_deadline(), Some(at(0).saturating_add(FORWARD_TIMEOUT)));
        let settled = forwards.expire(at(0).saturating_add(FORWARD_TIMEOUT), Some(NodeId(2)));
        assert!(matches!(of(&settled, 1), Err(RequestError::Indeterminate { .. })));
        assert!(matches!(of(&settled, 2), Err(RequestError::NotMaster { .. })));
        assert!(matches!(of(&settled, 3), Err(RequestError::Indeterminate { .. })));
        assert_eq!(forwards.next_deadline(), None);
    }

    #[test]
    fn a_step_down_whose_master_was_replaced_has_succeeded() {
        // The old master's answer may trail the election's news of its successor (it
        // travels behind the log lane's backlog); failing the step-down as retryable would
        // have the client depose the new master too.
        let mut forwards = Forwards::default();
        forwards.start(&MasterRequest::StepDown, 1u32, NodeId(2), ballot(2, 4), at(0));
        forwards.start(&MasterRequest::Propose(Command::LeaseRevoke { id: 7 }), 2, NodeId(2), ballot(2, 4), at(0));
        forwards.start(&read(), 3, NodeId(2), ballot(2, 4), at(0));
        let settled = forwards.master_changed(NodeId(3), ballot(3, 5));
        assert!(matches!(of(&settled, 1), Ok(MasterAnswer::SteppedDown)));
        assert!(matches!(of(&settled, 2), Err(RequestError::Indeterminate { hint: Some(NodeId(3)) })));
        assert!(matches!(of(&settled, 3), Err(RequestError::NotMaster { hint: Some(NodeId(3)) })));
        assert_eq!(settled.iter().map(|(w, _)| *w).collect::<Vec<_>>(), vec![1, 2, 3], "in the order sent");
        assert!(forwards.is_empty());
    }

    fn ballot(node: u32, round: u64) -> LogBallot {
        LogBallot { round, node: NodeId(node) }
    }

    #[test]
    fn a_new_master_abandons_forwards_to_the_old_one() {
        let mut forwards = Forwards::default();
        forwards.start(&read(), 1u32, NodeId(2), ballot(2, 4), at(0));
        forwards.start(&read(), 2, NodeId(3), ballot(2, 4), at(0));
        let settled = forwards.master_changed(NodeId(3), ballot(3, 5));
        assert_eq!(settled.len(), 1);
        assert!(matches!(of(&settled, 1), Err(RequestError::NotMaster { hint: Some(NodeId(3)) })));
        assert_eq!(forwards.len(), 1, "the forward to the current master still waits");
    }

    #[test]
    fn a_master_that_took_the_log_over_again_abandons_what_it_held_before() {
        let mut forwards = Forwards::default();
        let write = MasterRequest::Propose(Command::LeaseRevoke { id: 7 });
        forwards.start(&write, 1u32, NodeId(2), ballot(2, 4), at(0));
        // Sent while this node had only heard another node's ballot: not abandoned on a
        // ballot it cannot relate to the one the master held.
        forwards.start(&write, 2, NodeId(2), ballot(3, 3), at(0));
        assert!(forwards.master_changed(NodeId(2), ballot(2, 4)).is_empty(), "the same master, the same ballot");
        assert!(forwards.master_changed(NodeId(2), ballot(3, 6)).is_empty(), "another node's ballot");
        let settled = forwards.master_changed(NodeId(2), ballot(2, 7));
        assert_eq!(settled.len(), 1, "node 2 restarted and took the log over again");
        assert!(matches!(of(&settled, 1), Err(RequestError::Indeterminate { hint: Some(NodeId(2)) })));
        assert_eq!(forwards.len(), 1);
        // A step-down to a master that took the log over again did not hand mastership on.
        forwards.start(&MasterRequest::StepDown, 3, NodeId(2), ballot(2, 7), at(0));
        let settled = forwards.master_changed(NodeId(2), ballot(2, 9));
        assert!(matches!(of(&settled, 3), Err(RequestError::Indeterminate { .. })));
    }
}
