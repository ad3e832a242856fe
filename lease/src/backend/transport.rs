//! How election messages travel between nodes: the [`Transport`] a backend sends with, the
//! [`Inbox`] it receives from, and [`LocalNetwork`], an in-memory network for tests.
//!
//! Delivery is best effort on purpose. The election protocols already tolerate lost,
//! delayed and duplicated messages, so a transport never retries, never queues without
//! bound and never makes the sender wait for a slow or dead peer: a down peer costs a
//! dropped message, nothing more.

use crate::ids::NodeId;
use crate::message::ElectionMessage;
use async_trait::async_trait;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;

/// Sends election messages to peers on behalf of one node.
///
/// Implementations (the in-memory [`LocalTransport`] here, gRPC in the server crate) must
/// return quickly whatever the state of the peer: the driver awaits `send` between protocol
/// steps, so a blocking send would delay the node's timers, including lease renewal.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Sends `msg` to node `to`, best effort: failures are dropped (and at most logged),
    /// because the protocol recovers from lost messages by itself.
    async fn send(&self, to: NodeId, msg: ElectionMessage);
}

/// The messages a node receives, as `(from, msg)`.
///
/// Whoever receives from the network (a gRPC handler, [`LocalNetwork`]) holds the matching
/// `Sender`; the backend driver owns the receiving end.
pub type Inbox = mpsc::Receiver<(NodeId, ElectionMessage)>;

/// How many undelivered messages a node's inbox holds before [`LocalNetwork`] drops new
/// ones. Generous, so that drops only happen when a node's driver is stuck.
const LOCAL_INBOX_CAPACITY: usize = 1024;

/// An in-memory network connecting the nodes of one process, for tests.
///
/// Links are symmetric and up by default; tests cut them with [`LocalNetwork::set_link`]
/// and [`LocalNetwork::isolate`] to create partitions. Cloning yields another handle to the
/// same network.
#[derive(Debug, Clone, Default)]
pub struct LocalNetwork {
    state: Arc<Mutex<NetState>>,
}

#[derive(Debug, Default)]
struct NetState {
    members: HashMap<NodeId, Member>,
    /// Nodes cut off from everyone (unless a later `set_link` restores a single link).
    isolated: HashSet<NodeId>,
    /// Per-link settings made by `set_link`, keyed by the ordered pair; they override
    /// isolation because the most recent instruction about a link should win.
    links: HashMap<(NodeId, NodeId), bool>,
    /// Counts joins, so a transport from before a node left and rejoined can be told apart
    /// from the current one.
    joins: u64,
}

#[derive(Debug)]
struct Member {
    tx: mpsc::Sender<(NodeId, ElectionMessage)>,
    incarnation: u64,
}

fn link_key(a: NodeId, b: NodeId) -> (NodeId, NodeId) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

impl NetState {
    fn link_up(&self, a: NodeId, b: NodeId) -> bool {
        if a == b {
            return true;
        }
        match self.links.get(&link_key(a, b)) {
            Some(&up) => up,
            None => !self.isolated.contains(&a) && !self.isolated.contains(&b),
        }
    }
}

impl LocalNetwork {
    /// An empty network with every link up.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        lock(&self.state)
    }

    /// Adds node `id` and returns its transport and inbox.
    ///
    /// Joining again under the same id models a restart: the previous inbox is closed and
    /// the previous transport stops delivering, so a stale incarnation cannot talk.
    pub fn join(&self, id: NodeId) -> (LocalTransport, Inbox) {
        let (tx, rx) = mpsc::channel(LOCAL_INBOX_CAPACITY);
        let mut state = self.state();
        state.joins += 1;
        let incarnation = state.joins;
        state.members.insert(id, Member { tx, incarnation });
        let transport = LocalTransport { id, incarnation, state: Arc::clone(&self.state) };
        (transport, rx)
    }

    /// Removes node `id`, as if it crashed: its inbox is closed, messages to it are dropped
    /// and its transport stops delivering.
    pub fn leave(&self, id: NodeId) {
        self.state().members.remove(&id);
    }

    /// Cuts (`up == false`) or restores (`up == true`) the link between `a` and `b`, in both
    /// directions. This overrides an earlier [`LocalNetwork::isolate`] for this link.
    pub fn set_link(&self, a: NodeId, b: NodeId, up: bool) {
        self.state().links.insert(link_key(a, b), up);
    }

    /// Cuts every link of `id`, including links to nodes that join later.
    pub fn isolate(&self, id: NodeId) {
        let mut state = self.state();
        // Isolation is the newer instruction, so it wins over earlier per-link settings.
        state.links.retain(|&(a, b), _| a != id && b != id);
        state.isolated.insert(id);
    }

    /// Restores every link: undoes all [`LocalNetwork::isolate`] and
    /// [`LocalNetwork::set_link`] calls.
    pub fn heal(&self) {
        let mut state = self.state();
        state.isolated.clear();
        state.links.clear();
    }

    /// Whether a message from `a` to `b` would currently be delivered (both joined and the
    /// link up).
    pub fn is_connected(&self, a: NodeId, b: NodeId) -> bool {
        let state = self.state();
        state.members.contains_key(&a) && state.members.contains_key(&b) && state.link_up(a, b)
    }
}

/// Locks the network state, recovering from poisoning: every critical section leaves the
/// state consistent, so a panic elsewhere while holding the lock (a failed test assertion
/// in another thread) must not take the network down with it.
fn lock(state: &Mutex<NetState>) -> MutexGuard<'_, NetState> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One node's sending end of a [`LocalNetwork`].
#[derive(Debug, Clone)]
pub struct LocalTransport {
    id: NodeId,
    incarnation: u64,
    state: Arc<Mutex<NetState>>,
}

impl LocalTransport {
    /// The node this transport sends for (the `from` of every message it delivers).
    pub fn node_id(&self) -> NodeId {
        self.id
    }
}

#[async_trait]
impl Transport for LocalTransport {
    async fn send(&self, to: NodeId, msg: ElectionMessage) {
        let tx = {
            let state = lock(&self.state);
            let current = state.members.get(&self.id).is_some_and(|m| m.incarnation == self.incarnation);
            if !current || !state.link_up(self.id, to) {
                return;
            }
            match state.members.get(&to) {
                Some(member) => member.tx.clone(),
                None => return,
            }
        };
        // try_send, never send().await: a full inbox means the receiver is stuck, and
        // waiting for it would stall the sender's own protocol timers.
        if let Err(err) = tx.try_send((self.id, msg)) {
            let reason = match err {
                mpsc::error::TrySendError::Full(_) => "inbox full",
                mpsc::error::TrySendError::Closed(_) => "inbox closed",
            };
            tracing::debug!(from = %self.id, %to, reason, "local network dropped a message");
        }
    }
}
