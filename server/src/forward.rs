//! Requests only the master can answer (writes, linearizable reads, lease keepalives and
//! lease status), and how a follower hands them to the master: over the peer stream, one
//! hop, the way Raft forwards proposals, instead of a second client call per request. The
//! master answers on the same stream; the follower routes the answer to the waiting client.
//!
//! A forward is never resent: a write may already be applied when its answer is lost. A
//! forward whose master changes or goes quiet fails: writes as "indeterminate", everything
//! else as "not master", which the API layer retries. While the follower's stream to the
//! master is known to be broken (a master that was killed), a request is not forwarded at
//! all: it fails as "not master" at once and the API layer waits for the next master.

use leasekv_kvstore::log::{ClientError, LeaseStatus};
use leasekv_kvstore::{Applied, Command, LeaseId, RangeRequest, RangeResponse, Revision};
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a follower waits for the master's answer to a forward. A backstop for a
/// message lost on a stream that broke while the master stayed master; a master that dies
/// is noticed sooner, through the election.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(3);

/// A request only the master can answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MasterRequest {
    /// A command through the log.
    Propose(Command),
    /// A linearizable read.
    Read(RangeRequest),
    /// Renew a lease.
    KeepAlive(LeaseId),
    /// One lease's remaining life.
    LeaseStatus(LeaseId),
    /// Every lease.
    LeaseList,
}

/// The master's answer to a [`MasterRequest`] of the same kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MasterAnswer {
    /// To `Propose`.
    Propose(Result<Applied, ClientError>),
    /// To `Read`.
    Read(Result<(RangeResponse, Revision), ClientError>),
    /// To `KeepAlive`: the TTL granted.
    KeepAlive(Result<i64, ClientError>),
    /// To `LeaseStatus`.
    LeaseStatus(Result<LeaseStatus, ClientError>),
    /// To `LeaseList`.
    LeaseList(Result<Vec<LeaseStatus>, ClientError>),
}

/// A client task waiting for the answer to a [`MasterRequest`], typed by its kind.
#[derive(Debug)]
pub enum Waiter {
    /// Waits for a command's outcome.
    Propose(oneshot::Sender<Result<Applied, ClientError>>),
    /// Waits for a linearizable read.
    Read(oneshot::Sender<Result<(RangeResponse, Revision), ClientError>>),
    /// Waits for a keepalive.
    KeepAlive(oneshot::Sender<Result<i64, ClientError>>),
    /// Waits for a lease's status.
    LeaseStatus(oneshot::Sender<Result<LeaseStatus, ClientError>>),
    /// Waits for the lease list.
    LeaseList(oneshot::Sender<Result<Vec<LeaseStatus>, ClientError>>),
}

impl Waiter {
    /// Hands over the answer. An answer of another kind (a confused or hostile peer) fails
    /// the request instead; the client is never left waiting.
    pub fn answer(self, answer: MasterAnswer) {
        match (self, answer) {
            (Waiter::Propose(tx), MasterAnswer::Propose(a)) => drop(tx.send(a)),
            (Waiter::Read(tx), MasterAnswer::Read(a)) => drop(tx.send(a)),
            (Waiter::KeepAlive(tx), MasterAnswer::KeepAlive(a)) => drop(tx.send(a)),
            (Waiter::LeaseStatus(tx), MasterAnswer::LeaseStatus(a)) => drop(tx.send(a)),
            (Waiter::LeaseList(tx), MasterAnswer::LeaseList(a)) => drop(tx.send(a)),
            (waiter, _) => {
                waiter.fail(ClientError::Stopped("the master answered a forwarded request with another kind".into()))
            }
        }
    }

    /// Fails the request.
    pub fn fail(self, error: ClientError) {
        match self {
            Waiter::Propose(tx) => drop(tx.send(Err(error))),
            Waiter::Read(tx) => drop(tx.send(Err(error))),
            Waiter::KeepAlive(tx) => drop(tx.send(Err(error))),
            Waiter::LeaseStatus(tx) => drop(tx.send(Err(error))),
            Waiter::LeaseList(tx) => drop(tx.send(Err(error))),
        }
    }

    /// Fails a forward whose answer will not come: a write may have been applied, so it
    /// is "indeterminate"; anything else is safe to retry, so it is "not master".
    fn abandon(self, hint: Option<NodeId>) {
        let error = match self {
            Waiter::Propose(_) => ClientError::Indeterminate { hint },
            _ => ClientError::NotMaster { hint },
        };
        self.fail(error);
    }
}

/// Identifies a forward between one follower and the master it went to.
pub type ForwardId = u64;

struct Pending {
    waiter: Waiter,
    master: NodeId,
}

/// A follower's forwards waiting for the master's answer.
#[derive(Default)]
pub struct Forwards {
    next_id: ForwardId,
    pending: HashMap<ForwardId, Pending>,
    /// Deadlines in the order they were set (one timeout for all, so also in time order).
    deadlines: VecDeque<(Instant, ForwardId)>,
}

impl Forwards {
    /// Records a forward to `master`; returns the id its answer will carry.
    pub fn start(&mut self, waiter: Waiter, master: NodeId, now: Instant) -> ForwardId {
        self.next_id += 1;
        let id = self.next_id;
        self.pending.insert(id, Pending { waiter, master });
        self.deadlines.push_back((now + FORWARD_TIMEOUT, id));
        id
    }

    /// Routes the answer from `from` to its waiter; answers from anyone but the node the
    /// request went to, or to forwards already given up, are dropped.
    pub fn answer(&mut self, from: NodeId, id: ForwardId, answer: MasterAnswer) {
        if self.pending.get(&id).is_some_and(|p| p.master == from) {
            if let Some(pending) = self.pending.remove(&id) {
                pending.waiter.answer(answer);
            }
        }
    }

    /// Gives up on forwards past their deadline.
    pub fn expire(&mut self, now: Instant, hint: Option<NodeId>) {
        while let Some(&(deadline, id)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(pending) = self.pending.remove(&id) {
                pending.waiter.abandon(hint);
            }
        }
    }

    /// Gives up on forwards to any node but `master`: the election moved on, and the old
    /// master will not answer (or its answer no longer counts as this hop's).
    pub fn master_changed(&mut self, master: NodeId) {
        let gone: Vec<ForwardId> = self.pending.iter().filter(|(_, p)| p.master != master).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some(pending) = self.pending.remove(&id) {
                pending.waiter.abandon(Some(master));
            }
        }
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

    type ReadAnswer = oneshot::Receiver<Result<(RangeResponse, Revision), ClientError>>;

    fn read_waiter() -> (Waiter, ReadAnswer) {
        let (tx, rx) = oneshot::channel();
        (Waiter::Read(tx), rx)
    }

    #[test]
    fn an_answer_reaches_its_waiter_only_from_the_master_it_went_to() {
        let mut forwards = Forwards::default();
        let (waiter, mut rx) = read_waiter();
        let id = forwards.start(waiter, NodeId(2), Instant::now());
        forwards.answer(NodeId(3), id, MasterAnswer::Read(Ok((RangeResponse::default(), 7))));
        assert!(rx.try_recv().is_err(), "an answer from a node the request did not go to is dropped");
        forwards.answer(NodeId(2), id, MasterAnswer::Read(Ok((RangeResponse::default(), 7))));
        assert_eq!(rx.try_recv().ok().and_then(|r| r.ok()).map(|(_, rev)| rev), Some(7));
        assert!(forwards.is_empty());
    }

    #[test]
    fn an_answer_of_the_wrong_kind_fails_the_request() {
        let mut forwards = Forwards::default();
        let (waiter, mut rx) = read_waiter();
        let id = forwards.start(waiter, NodeId(2), Instant::now());
        forwards.answer(NodeId(2), id, MasterAnswer::KeepAlive(Ok(5)));
        assert!(matches!(rx.try_recv(), Ok(Err(ClientError::Stopped(_)))));
    }

    #[test]
    fn a_lost_write_is_indeterminate_and_a_lost_read_is_retryable() {
        let mut forwards = Forwards::default();
        let start = Instant::now();
        let (tx, mut write) = oneshot::channel();
        forwards.start(Waiter::Propose(tx), NodeId(2), start);
        let (waiter, mut read) = read_waiter();
        forwards.start(waiter, NodeId(2), start);
        forwards.expire(start + FORWARD_TIMEOUT / 2, Some(NodeId(2)));
        assert_eq!(forwards.len(), 2, "nothing expires before its deadline");
        assert_eq!(forwards.next_deadline(), Some(start + FORWARD_TIMEOUT));
        forwards.expire(start + FORWARD_TIMEOUT, Some(NodeId(2)));
        assert!(matches!(write.try_recv(), Ok(Err(ClientError::Indeterminate { .. }))));
        assert!(matches!(read.try_recv(), Ok(Err(ClientError::NotMaster { .. }))));
        assert_eq!(forwards.next_deadline(), None);
    }

    #[test]
    fn a_new_master_abandons_forwards_to_the_old_one() {
        let mut forwards = Forwards::default();
        let now = Instant::now();
        let (to_old, mut old) = read_waiter();
        forwards.start(to_old, NodeId(2), now);
        let (to_new, mut new) = read_waiter();
        forwards.start(to_new, NodeId(3), now);
        forwards.master_changed(NodeId(3));
        assert!(matches!(old.try_recv(), Ok(Err(ClientError::NotMaster { hint: Some(NodeId(3)) }))));
        assert!(new.try_recv().is_err(), "the forward to the current master still waits");
        assert_eq!(forwards.len(), 1);
    }
}
