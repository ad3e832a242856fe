//! Outgoing node-to-node traffic. Each peer gets two long-lived client streams (`Peer/Send`)
//! over one lazily connected HTTP/2 channel: one lane for the election, one for the log and
//! forwarded client requests, so a large catch-up batch never delays a lease renewal. A
//! message is one frame on an open stream: no per-message call, headers or answer, which
//! keeps a replication round trip close to the loopback's. Messages are dropped, never
//! retried, when a peer is unreachable: both protocols recover from loss, and a stale retry
//! would only get in their way. A broken stream is reopened with back-off; a peer that stays
//! down costs at most one log line per lane per interval.
//!
//! Snapshots, and any other message larger than [`LANE_MESSAGE_MAX`], never go on a lane:
//! they are parked for the peer, which is told on the log lane and pulls them in chunks
//! over the same channel ([`crate::peer::parked`] says why). The lanes thus carry only messages
//! a receiver can take in one bounded buffer ([`PEER_MESSAGE_LIMIT`]), and a snapshot on its
//! way never holds up an Accept.

use crate::peer::cluster::ClusterId;
use crate::peer::parked::{Inbox, Outbox, ParkedKind, Payload, CHUNK_BYTES};
use crate::peer::proto::peer_client::PeerClient;
use crate::peer::proto::{HelloRequest, PeerEnvelope};
use crate::peer::refusal::PeerRefusal;
use crate::peer::version::{LinkVersions, Speaks, OLDEST_PEER_PROTOCOL_VERSION, VERSION_WITHOUT_HELLO};
use crate::peer::wire::Wire;
use crate::tls::connector::PeerTlsConnector;
use crate::tls::reload::Current;
use async_trait::async_trait;
use leasekv_kvstore::log::LogMessage;
use leasekv_lease::{ElectionMessage, NodeId, Transport};
use rustls::ClientConfig;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};

/// Largest encoded message put on a lane (4 MiB); a larger one is parked and pulled in
/// chunks instead.
///
/// The largest message a lane must carry for the log to flow is an `Accept` (an `Accepted`,
/// `Commit`, `Fetch`, `Reject` or `Prepare` is a few dozen bytes, an election message about
/// as small). One slot holds commands whose size estimate (the replica's `command_size`)
/// adds up to at most `max_batch_bytes` = 1 MiB and at most `max_batch_commands` = 256 of
/// them, or a single command above that; a client request is at most 2 MiB on the wire
/// (`run`'s client message limit), and its postcard encoding is about as long. With the
/// encoding's per-command overhead (proposal id, tags and lengths: under 64 bytes, so
/// 16 KiB for 256 commands) an Accept stays near 2 MiB. Measured in
/// `the_largest_ordinary_messages_fit_a_lane`: a full batch of 256 commands is 1.0 MiB, one
/// largest key and value 1.5 MiB, a 2 MiB client Txn forwarded or accepted 2.0 MiB: 2x
/// margin under this threshold.
///
/// What can be larger: an `Entries` reply (up to `max_fetch_entries` = 256 slots, so
/// 256 MiB and more at worst), a `Promise` to a candidate far behind (every slot it lacks
/// that the acceptor still holds: up to `snapshot_every + retain_after_snapshot` slots) and
/// the master's answer to a large forwarded range read. Those are bounded by nothing useful,
/// so they take the chunked path rather than a larger lane limit.
pub const LANE_MESSAGE_MAX: usize = 4 << 20;

/// Largest `PeerEnvelope` the peer service decodes (16 MiB): four times
/// [`LANE_MESSAGE_MAX`] (the envelope adds a few bytes), so a node never refuses what a peer
/// puts on a lane, even one built with a somewhat larger threshold, while one stream can
/// never make it buffer more than this per message.
pub const PEER_MESSAGE_LIMIT: usize = 16 << 20;

const _: () = assert!(PEER_MESSAGE_LIMIT >= 2 * LANE_MESSAGE_MAX);

/// How often expired parked messages are freed.
const SWEEP_PARKED_EVERY: Duration = Duration::from_secs(5);
/// How many messages may wait for one lane of one peer before new ones are dropped.
const QUEUE: usize = 8192;
/// Most messages packed into one envelope (beyond the first).
const BATCH_MESSAGES: usize = 256;
/// An envelope takes no more messages than fit in this many bytes (a single message may be
/// larger; the peer service's limit bounds that).
const BATCH_BYTES: usize = 1 << 20;
/// First wait before reopening a broken stream; doubled on every failure up to the maximum.
const MIN_BACKOFF: Duration = Duration::from_millis(20);
/// Longest wait between attempts to reach a peer that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A stream that stayed open this long was healthy: the next failure starts the back-off over.
const HEALTHY: Duration = Duration::from_secs(1);
/// At most one "peer unreachable" line per peer and lane per this interval.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// How long a peer may take to answer `Hello` (one round trip on a connection that may
/// first have to be made: its timeout, 500 ms, is part of it).
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often an idle connection is probed, and how long a probe may go unanswered before
/// the connection counts as dead (a peer behind a partition sends no reset).
const KEEPALIVE: Duration = Duration::from_secs(1);

/// The two kinds of traffic, each on its own stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Election,
    Log,
}

impl Lane {
    fn name(self) -> &'static str {
        match self {
            Lane::Election => "election",
            Lane::Log => "log",
        }
    }
}

/// Senders to every other member. The set of members follows the cluster's configuration
/// ([`PeerNetwork::set_members`]): a member added at runtime gets its lanes when this node
/// applies the change, a removed one loses them (its sender tasks end with their queues).
#[derive(Clone)]
pub struct PeerNetwork {
    me: NodeId,
    links: Arc<RwLock<Links>>,
    /// Set when a peer answers that the log removed this node (see
    /// [`PeerNetwork::removed_by_peers`]).
    removed: Arc<tokio::sync::watch::Sender<Option<u64>>>,
    /// Messages parked here for peers to pull.
    outbox: Arc<Outbox>,
    /// Pulls from peers in progress.
    inbox: Arc<Inbox>,
    /// Mutual TLS to the peers (`[tls.peer]`); plain TCP when `None`.
    tls: Option<Arc<Current<ClientConfig>>>,
    /// The protocol version agreed with each peer, and the cluster's.
    versions: LinkVersions,
    /// The cluster every request to a peer says it comes from.
    cluster: ClusterId,
}

/// Every member's links, and who counts as a member (this node included).
#[derive(Default)]
struct Links {
    peers: HashMap<NodeId, PeerLinks>,
    members: HashSet<NodeId>,
}

/// The lanes, the pull client and the "log lane down" flag of one peer.
struct PeerLinks {
    /// `host:port` it was dialled at; a new address gets new links.
    addr: String,
    election: LaneQueue,
    log: LaneQueue,
    /// Whether its log lane is known to be down (see [`PeerNetwork::log_lane_down`]).
    log_down: Arc<AtomicBool>,
    /// Client for pulling parked messages from it (same channel as the lanes).
    puller: PeerClient<Channel>,
}

/// Encoded messages waiting for one lane of one peer.
type LaneQueue = mpsc::Sender<Vec<u8>>;

impl PeerLinks {
    /// Starts the sender tasks of both lanes to `peer` at `addr`, which connect at once to
    /// agree on a protocol version (`Peer.Hello`); `None` when the address is not usable.
    fn start(
        me: NodeId,
        peer: NodeId,
        addr: &str,
        removed: Arc<tokio::sync::watch::Sender<Option<u64>>>,
        tls: Option<&Arc<Current<ClientConfig>>>,
        versions: &LinkVersions,
        cluster: ClusterId,
    ) -> Option<PeerLinks> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}")).map(|e| {
            e.connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true)
                .http2_keep_alive_interval(KEEPALIVE)
                .keep_alive_timeout(KEEPALIVE)
                .keep_alive_while_idle(true)
        });
        let channel = match endpoint {
            Ok(endpoint) => match tls {
                // The URI stays http://: the connector runs the TLS handshake itself.
                Some(tls) => endpoint.connect_with_connector_lazy(PeerTlsConnector::new(tls.clone())),
                None => endpoint.connect_lazy(),
            },
            Err(error) => {
                tracing::error!(%peer, %addr, %error, "peer address is not usable");
                return None;
            }
        };
        let log_down = Arc::new(AtomicBool::new(false));
        let lane = |lane: Lane, down: Arc<AtomicBool>| {
            let (tx, rx) = mpsc::channel(QUEUE);
            let client = PeerClient::new(channel.clone());
            let sender = LaneSender {
                me,
                peer,
                addr: addr.to_string(),
                lane,
                client,
                down,
                removed: removed.clone(),
                versions: versions.clone(),
                cluster,
            };
            tokio::spawn(sender.run(rx));
            tx
        };
        let election = lane(Lane::Election, Arc::new(AtomicBool::new(false)));
        let log = lane(Lane::Log, log_down.clone());
        // Chunks are CHUNK_BYTES of payload; the margin covers the chunk's own fields.
        let puller = PeerClient::new(channel).max_decoding_message_size(2 * CHUNK_BYTES);
        Some(PeerLinks { addr: addr.to_string(), election, log, log_down, puller })
    }

    fn queue(&self, lane: Lane) -> &LaneQueue {
        match lane {
            Lane::Election => &self.election,
            Lane::Log => &self.log,
        }
    }
}

impl PeerNetwork {
    /// Resolves once a peer answered that the log removed this node from the cluster, with
    /// the membership epoch it names.
    pub async fn removed_by_peers(&self) -> u64 {
        let mut changes = self.removed.subscribe();
        loop {
            if let Some(epoch) = *changes.borrow_and_update() {
                return epoch;
            }
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Starts the sender tasks for every peer (each connects at once to agree on a protocol
    /// version) and the timer that frees expired parked messages.
    /// `tls` is the client configuration for mutual TLS to the peers (`None`: plain TCP);
    /// `speaks`, the peer protocol versions this node speaks; `cluster`, the cluster it
    /// belongs to, which every request to a peer carries.
    pub fn start(
        me: NodeId,
        peers: &[(NodeId, SocketAddr)],
        tls: Option<Arc<Current<ClientConfig>>>,
        speaks: Speaks,
        cluster: ClusterId,
    ) -> Self {
        let outbox = Outbox::new();
        tokio::spawn(sweep_parked(Arc::downgrade(&outbox)));
        let network = PeerNetwork {
            me,
            links: Arc::new(RwLock::new(Links::default())),
            removed: Arc::new(tokio::sync::watch::channel(None).0),
            outbox,
            inbox: Arc::new(Inbox::default()),
            tls,
            versions: LinkVersions::new(me, speaks),
            cluster,
        };
        let peers: Vec<(NodeId, String)> = peers.iter().map(|(id, addr)| (*id, addr.to_string())).collect();
        network.set_members(&peers);
        network
    }

    /// Makes `members` (id and `host:port` of each, this node may be among them) the nodes
    /// this one talks to and accepts messages from: links to new members are started, links
    /// to members no longer listed are dropped (their senders stop), and a member whose
    /// address changed is dialled at the new one.
    pub fn set_members(&self, members: &[(NodeId, String)]) {
        let mut links = self.links.write().unwrap_or_else(PoisonError::into_inner);
        links.members = members.iter().map(|(id, _)| *id).chain(std::iter::once(self.me)).collect();
        self.versions.set_members(links.members.iter().copied());
        links.peers.retain(|id, link| {
            let keep = members.iter().any(|(m, addr)| m == id && *addr == link.addr);
            if !keep {
                tracing::info!(peer = %id, addr = %link.addr, "no longer a member at this address: its lanes are closed");
            }
            keep
        });
        for (id, addr) in members {
            if *id == self.me || links.peers.contains_key(id) {
                continue;
            }
            if let Some(link) = PeerLinks::start(
                self.me,
                *id,
                addr,
                self.removed.clone(),
                self.tls.as_ref(),
                &self.versions,
                self.cluster,
            ) {
                tracing::debug!(peer = %id, %addr, "lanes to member started");
                links.peers.insert(*id, link);
            }
        }
    }

    /// Whether `id` is a member this node accepts messages from.
    pub fn is_member(&self, id: NodeId) -> bool {
        self.links.read().unwrap_or_else(PoisonError::into_inner).members.contains(&id)
    }

    /// This node.
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// The cluster this node belongs to: requests to peers carry it, and requests from
    /// another cluster are refused.
    pub fn cluster(&self) -> ClusterId {
        self.cluster
    }

    /// The peer protocol versions: what this node speaks, what each link agreed, the
    /// cluster's.
    pub fn versions(&self) -> &LinkVersions {
        &self.versions
    }

    /// Messages parked here for peers (served by `Peer.FetchParked`).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Pulls from peers in progress.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// Whether the log lane to `peer` is known to be down: its last stream broke or could
    /// not be opened, and no new one has been opened since. Anything queued for the lane now
    /// is dropped (the sender discards its backlog before it tries again), so a follower
    /// answers a request it would forward to that peer as "not master" at once, which is
    /// safe because the request never left, instead of leaving it to time out as
    /// "indeterminate". Unknown (never tried, or an unknown peer) counts as up.
    pub fn log_lane_down(&self, peer: NodeId) -> bool {
        let links = self.links.read().unwrap_or_else(PoisonError::into_inner);
        links.peers.get(&peer).is_some_and(|link| link.log_down.load(Ordering::Relaxed))
    }

    /// A client to pull parked messages from `peer`.
    pub fn puller(&self, peer: NodeId) -> Option<PeerClient<Channel>> {
        self.links.read().unwrap_or_else(PoisonError::into_inner).peers.get(&peer).map(|link| link.puller.clone())
    }

    /// Queues a message for `to`; drops it when that peer's queue is full. A message larger
    /// than [`LANE_MESSAGE_MAX`] is parked for `to` to pull instead.
    pub fn send(&self, to: NodeId, wire: &Wire) {
        if to == self.me {
            return;
        }
        let lane = match wire {
            Wire::Election(_) => Lane::Election,
            Wire::Log(_) | Wire::Forward(..) | Wire::Answer(..) | Wire::Parked(_) => Lane::Log,
        };
        let bytes = wire.encode();
        if bytes.len() > LANE_MESSAGE_MAX {
            tracing::debug!(peer = %to, bytes = bytes.len(), "message too big for a lane; parked for the peer to pull");
            self.park(to, ParkedKind::Message, Arc::new(Payload::Memory(bytes)));
            return;
        }
        let links = self.links.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(link) = links.peers.get(&to) {
            let _ = link.queue(lane).try_send(bytes);
        }
    }

    /// Queues a log message; a snapshot is parked for `to` to pull in chunks.
    pub fn send_log(&self, to: NodeId, message: LogMessage) {
        match message {
            LogMessage::Snapshot { index, data } => {
                tracing::debug!(peer = %to, index, bytes = data.len(), "snapshot parked for the peer to pull");
                self.park(to, ParkedKind::Snapshot { index }, Arc::new(Payload::Memory(data)));
            }
            // The replica asks again every retry interval until it hears back; while a
            // snapshot from that peer is on its way, each repeat would only make the peer
            // serialise its whole state machine again for a transfer that is dropped.
            LogMessage::Fetch { .. } if self.inbox.pulling_snapshot(to) => {}
            message => self.send(to, &Wire::Log(message)),
        }
    }

    /// Parks a snapshot of the state through slot `index`, in `data` (a file shared by
    /// every peer it goes to), for `to` to pull in chunks.
    pub fn send_snapshot(&self, to: NodeId, index: u64, data: Arc<Payload>) {
        tracing::debug!(peer = %to, index, bytes = data.len(), "snapshot parked for the peer to pull");
        self.park(to, ParkedKind::Snapshot { index }, data);
    }

    /// Parks `data` for `to` and tells it on the log lane.
    fn park(&self, to: NodeId, kind: ParkedKind, data: Arc<Payload>) {
        if to == self.me || !self.links.read().unwrap_or_else(PoisonError::into_inner).peers.contains_key(&to) {
            return;
        }
        let notice = self.outbox.park(to, kind, data, Instant::now());
        self.send(to, &Wire::Parked(notice));
    }
}

#[async_trait]
impl Transport for PeerNetwork {
    async fn send(&self, to: NodeId, msg: ElectionMessage) {
        PeerNetwork::send(self, to, &Wire::Election(msg));
    }
}

/// Frees expired parked messages every [`SWEEP_PARKED_EVERY`] until the outbox is gone: an
/// expired message is never served, but without this its memory would wait for the next
/// message parked.
async fn sweep_parked(outbox: Weak<Outbox>) {
    loop {
        tokio::time::sleep(SWEEP_PARKED_EVERY).await;
        let Some(outbox) = outbox.upgrade() else { return };
        outbox.sweep(Instant::now());
    }
}

/// Keeps one stream to one peer open for one lane.
struct LaneSender {
    me: NodeId,
    peer: NodeId,
    addr: String,
    lane: Lane,
    client: PeerClient<Channel>,
    /// Set when a stream breaks or cannot be opened; cleared by the next stream's first poll.
    down: Arc<AtomicBool>,
    /// Told when the peer answers that this node was removed.
    removed: Arc<tokio::sync::watch::Sender<Option<u64>>>,
    /// Where the version agreed with the peer is recorded.
    versions: LinkVersions,
    /// The cluster this node's requests say they come from.
    cluster: ClusterId,
}

impl LaneSender {
    /// Asks the peer which protocol versions it speaks, before a stream: the version of
    /// the stream. A peer from before `Hello` speaks [`VERSION_WITHOUT_HELLO`]; one whose
    /// versions do not meet this node's is refused here, with the refusal a peer of such
    /// a version would give, so it is logged and backed off like one.
    async fn hello(&mut self) -> Result<u32, tonic::Status> {
        let speaks = self.versions.speaks();
        let request = HelloRequest { from: self.me.0, oldest: OLDEST_PEER_PROTOCOL_VERSION, newest: speaks.newest() };
        let answer = tokio::time::timeout(HELLO_TIMEOUT, self.client.hello(self.cluster.stamp(request)))
            .await
            .map_err(|_| tonic::Status::deadline_exceeded("the peer did not answer Hello"))?;
        let (oldest, newest) = match answer {
            Ok(answer) => (answer.get_ref().oldest, answer.get_ref().newest),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                (VERSION_WITHOUT_HELLO, VERSION_WITHOUT_HELLO)
            }
            Err(status) => return Err(status),
        };
        let version = speaks.agree(oldest, newest).ok_or_else(|| {
            // No version in common: the peer would refuse this node's streams, so they are
            // not opened; logged and backed off as that refusal would be.
            PeerRefusal::ProtocolVersion { theirs: newest }.status(
                tonic::Code::FailedPrecondition,
                format!(
                    "no peer protocol version in common: the peer speaks versions {oldest} to {newest}, this node \
                     {OLDEST_PEER_PROTOCOL_VERSION} to {}",
                    speaks.newest()
                ),
            )
        })?;
        self.versions.agreed(self.peer, version);
        Ok(version)
    }

    async fn run(mut self, queue: mpsc::Receiver<Vec<u8>>) {
        let backlog = Arc::new(Mutex::new(Backlog { queue, carry: None }));
        let mut backoff = MIN_BACKOFF;
        let mut last_warning: Option<Instant> = None;
        loop {
            let opened = Instant::now();
            let error = match self.hello().await {
                Ok(version) => {
                    let stream = LentQueue { me: self.me, backlog: backlog.clone(), down: self.down.clone(), version };
                    match self.client.send(self.cluster.stamp(stream)).await {
                        // The stream ends only when the queue closes: the node is shutting down.
                        Ok(_) => return,
                        Err(status) => status,
                    }
                }
                Err(status) => status,
            };
            self.down.store(true, Ordering::Relaxed);
            if backlog.lock().unwrap_or_else(PoisonError::into_inner).queue.is_closed() {
                return;
            }
            let refusal = PeerRefusal::of(&error);
            if let Some(PeerRefusal::Removed { epoch }) = refusal {
                self.removed.send_replace(Some(epoch));
            }
            if opened.elapsed() >= HEALTHY {
                backoff = MIN_BACKOFF;
            }
            if last_warning.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                last_warning = Some(Instant::now());
                if let Some(PeerRefusal::ProtocolVersion { theirs }) = refusal {
                    tracing::error!(peer = %self.peer, addr = %self.addr, lane = self.lane.name(), theirs, error = %error.message(),
                        "peer refused this node's protocol version; messages to it are dropped");
                } else if let Some(PeerRefusal::OtherCluster { theirs }) = refusal {
                    tracing::error!(peer = %self.peer, addr = %self.addr, lane = self.lane.name(), theirs = %format!("{theirs:x}"),
                        ours = %format!("{:x}", self.cluster.0), "the node at this peer address belongs to another cluster; \
                        messages to it are dropped (check this member's peer list and the other node's)");
                } else {
                    tracing::warn!(peer = %self.peer, addr = %self.addr, lane = self.lane.name(), error = %error.message(),
                        "peer unreachable; messages to it are dropped until it is back");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            // What queued up meanwhile is stale; the protocols resend what still matters.
            let mut backlog = backlog.lock().unwrap_or_else(PoisonError::into_inner);
            backlog.carry = None;
            while backlog.queue.try_recv().is_ok() {}
        }
    }
}

/// A lane's queue, lent to one stream at a time.
struct Backlog {
    queue: mpsc::Receiver<Vec<u8>>,
    /// A message taken off the queue that did not fit the last envelope; it opens the next.
    carry: Option<Vec<u8>>,
}

/// A lane's backlog lent to the current stream: when a stream breaks, the next one goes on
/// from the same queue.
struct LentQueue {
    me: NodeId,
    backlog: Arc<Mutex<Backlog>>,
    /// The lane's "down" flag. The HTTP/2 client polls a request body only once the
    /// connection is up and the stream open, so the first poll is the proof the lane works.
    down: Arc<AtomicBool>,
    /// The stream's protocol version, agreed with the peer.
    version: u32,
}

impl Stream for LentQueue {
    type Item = PeerEnvelope;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PeerEnvelope>> {
        let from = self.me.0;
        if self.down.load(Ordering::Relaxed) {
            self.down.store(false, Ordering::Relaxed);
        }
        // Only one stream holds the backlog at a time, so the lock is never contended.
        let mut backlog = self.backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let payload = match backlog.carry.take() {
            Some(carried) => carried,
            None => match backlog.queue.poll_recv(cx) {
                Poll::Ready(Some(payload)) => payload,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        // A backlog (a burst of accepts, answers to many forwarded requests) goes out as one
        // envelope: one frame and one decode instead of one each.
        let mut more = Vec::new();
        let mut bytes = payload.len();
        while more.len() < BATCH_MESSAGES {
            let Ok(next) = backlog.queue.try_recv() else { break };
            if bytes + next.len() > BATCH_BYTES {
                backlog.carry = Some(next);
                break;
            }
            bytes += next.len();
            more.push(next);
        }
        Poll::Ready(Some(PeerEnvelope { from, payload, more, version: self.version }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::MasterRequest;
    use crate::peer::parked::ParkedNotice;
    use crate::peer::proto::peer_server::{Peer, PeerServer};
    use crate::peer::proto::{Empty, FetchParkedRequest, HelloResponse, MembersRequest, MembersResponse, ParkedChunk};
    use leasekv_kvstore::log::{Entry, LogBallot, Proposal, ProposalId};
    use leasekv_kvstore::{Command, Limits, PutRequest, TxnOp, TxnRequest};
    use tokio_stream::StreamExt;
    use tonic::{Request, Response, Status, Streaming};

    /// A network whose lane queues the test reads instead of sending.
    fn network(me: NodeId, peer: NodeId) -> (PeerNetwork, mpsc::Receiver<Vec<u8>>) {
        let (log_tx, log_rx) = mpsc::channel(16);
        let (election_tx, _) = mpsc::channel(16);
        let channel = Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        let link = PeerLinks {
            addr: "127.0.0.1:9".into(),
            election: election_tx,
            log: log_tx,
            log_down: Arc::new(AtomicBool::new(false)),
            puller: PeerClient::new(channel),
        };
        let links = Links { peers: HashMap::from([(peer, link)]), members: HashSet::from([me, peer]) };
        let network = PeerNetwork {
            me,
            links: Arc::new(RwLock::new(links)),
            outbox: Outbox::new(),
            inbox: Arc::new(Inbox::default()),
            removed: Arc::new(tokio::sync::watch::channel(None).0),
            tls: None,
            versions: LinkVersions::new(me, Speaks::default()),
            cluster: ClusterId(1),
        };
        (network, log_rx)
    }

    fn proposal(seq: u64, command: Command) -> Proposal {
        Proposal { id: ProposalId { node: NodeId(u32::MAX), incarnation: u32::MAX, seq: u64::MAX - seq }, command }
    }

    fn put(key_len: usize, value_len: usize) -> Command {
        Command::Put(PutRequest {
            key: vec![b'k'; key_len],
            value: vec![b'v'; value_len],
            lease: i64::MIN,
            prev_kv: true,
        })
    }

    fn accept(proposals: Vec<Proposal>) -> Wire {
        let ballot = LogBallot { round: u64::MAX, node: NodeId(u32::MAX) };
        Wire::Log(LogMessage::Accept { ballot, slot: u64::MAX, entry: Entry { proposals }, commit: u64::MAX })
    }

    /// The derivation behind LANE_MESSAGE_MAX, measured: the largest Accepts and forwards
    /// the defaults allow stay on the lane with room to spare.
    #[test]
    fn the_largest_ordinary_messages_fit_a_lane() {
        let limits = Limits::default();
        // One command of the largest key and value.
        let single = accept(vec![proposal(0, put(limits.max_key_bytes, limits.max_value_bytes))]);
        // A full batch: 256 commands whose size estimates add up to max_batch_bytes (1 MiB).
        let per_command = (1 << 20) / 256 - 16;
        let batch = accept((0..256).map(|i| proposal(i, put(16, per_command - 16))).collect());
        // The largest client request (2 MiB on the wire) forwarded to the master: a Txn of
        // 128 puts of just under 16 KiB.
        let txn = TxnRequest {
            compare: Vec::new(),
            success: (0..128)
                .map(|_| {
                    TxnOp::Put(PutRequest {
                        key: vec![b'k'; 16],
                        value: vec![b'v'; (16 << 10) - 64],
                        lease: 0,
                        prev_kv: false,
                    })
                })
                .collect(),
            failure: Vec::new(),
        };
        let forward = Wire::Forward(u64::MAX, MasterRequest::Propose(Command::Txn(txn.clone())));
        let txn_accept = accept(vec![proposal(0, Command::Txn(txn))]);
        for (what, wire) in [("single", single), ("batch", batch), ("forward", forward), ("txn accept", txn_accept)] {
            let len = wire.encode().len();
            eprintln!("{what}: {len} bytes, lane limit {LANE_MESSAGE_MAX}");
            assert!(len * 3 / 2 < LANE_MESSAGE_MAX, "{what}: {len} bytes is too close to the lane limit");
        }
    }

    fn notice_of(bytes: &[u8]) -> ParkedNotice {
        match Wire::decode(bytes) {
            Ok(Wire::Parked(notice)) => notice,
            other => panic!("expected a transfer notice, got {other:?}"),
        }
    }

    // A runtime: the pull client's lazy channel spawns its worker when it is built.
    #[tokio::test]
    async fn snapshots_and_oversized_messages_are_parked_and_announced() {
        let (me, peer) = (NodeId(1), NodeId(2));
        let (network, mut lane) = network(me, peer);

        network.send_log(peer, LogMessage::Snapshot { index: 42, data: vec![7; 3 * CHUNK_BYTES] });
        let notice = notice_of(&lane.try_recv().expect("a notice on the log lane"));
        assert_eq!((notice.kind, notice.size), (ParkedKind::Snapshot { index: 42 }, 3 * CHUNK_BYTES as u64));
        assert!(lane.try_recv().is_err(), "nothing else on the lane");
        let chunks: Vec<_> = network.outbox().serve(peer, notice.transfer, Instant::now()).expect("parked").collect();
        assert_eq!(chunks.len(), 3);

        // An Entries reply of many large slots: too big for a lane.
        let slot = |i| (i, Entry { proposals: vec![proposal(i, put(16, 1 << 20))] });
        let entries = LogMessage::Entries { entries: (1..=8).map(slot).collect(), commit: 8 };
        network.send_log(peer, entries.clone());
        let notice = notice_of(&lane.try_recv().expect("a notice on the log lane"));
        assert_eq!(notice.kind, ParkedKind::Message);
        let serving = network.outbox().serve(peer, notice.transfer, Instant::now()).expect("parked");
        let bytes: Vec<u8> = serving.flat_map(|c| c.expect("chunk").data).collect();
        assert!(matches!(Wire::decode(&bytes), Ok(Wire::Log(m)) if m == entries));

        // Small messages go on the lane as before.
        network.send_log(peer, LogMessage::Fetch { from: 3 });
        assert!(matches!(Wire::decode(&lane.try_recv().expect("fetch")), Ok(Wire::Log(LogMessage::Fetch { from: 3 }))));
        // ... except a Fetch to a peer whose snapshot is on its way here.
        let incoming = ParkedNotice { transfer: 1, kind: ParkedKind::Snapshot { index: 9 }, size: 1 };
        assert!(network.inbox().offer(peer, incoming).is_some());
        network.send_log(peer, LogMessage::Fetch { from: 3 });
        assert!(lane.try_recv().is_err(), "the repeated Fetch is held back");
        assert_eq!(network.inbox().finish(peer, true), None);
        network.send_log(peer, LogMessage::Fetch { from: 3 });
        assert!(lane.try_recv().is_ok(), "and goes out again once the pull is over");
    }

    fn lent(queue: mpsc::Receiver<Vec<u8>>) -> LentQueue {
        LentQueue {
            version: crate::peer::version::PEER_PROTOCOL_VERSION,
            me: NodeId(1),
            backlog: Arc::new(Mutex::new(Backlog { queue, carry: None })),
            down: Arc::new(AtomicBool::new(false)),
        }
    }

    #[tokio::test]
    async fn a_backlog_goes_out_as_one_envelope_in_order() {
        let (tx, rx) = mpsc::channel(16);
        for i in 0..3u8 {
            tx.try_send(vec![i]).expect("queued");
        }
        let mut stream = lent(rx);
        let envelope = stream.next().await.expect("an envelope");
        assert_eq!(envelope.from, 1);
        assert_eq!(envelope.payload, vec![0]);
        assert_eq!(envelope.more, vec![vec![1], vec![2]]);
        drop(tx);
        assert!(stream.next().await.is_none(), "the stream ends when the queue closes");
    }

    #[tokio::test]
    async fn a_message_that_does_not_fit_opens_the_next_envelope() {
        let (tx, rx) = mpsc::channel(16);
        tx.try_send(vec![1; 16]).expect("queued");
        tx.try_send(vec![2; BATCH_BYTES]).expect("queued");
        tx.try_send(vec![3; 16]).expect("queued");
        let mut stream = lent(rx);
        let first = stream.next().await.expect("first envelope");
        assert_eq!((first.payload.len(), first.more.len()), (16, 0));
        let second = stream.next().await.expect("second envelope");
        assert_eq!(second.payload.len(), BATCH_BYTES);
        assert!(second.more.is_empty(), "nothing joins an envelope that is already full");
        let third = stream.next().await.expect("third envelope");
        assert_eq!(third.payload, vec![3; 16]);
    }

    /// A peer of cluster 1 that takes `Send` streams stamped with its cluster and reports
    /// every envelope it gets.
    struct FakePeer(mpsc::UnboundedSender<PeerEnvelope>);

    #[tonic::async_trait]
    impl Peer for FakePeer {
        async fn send(&self, request: Request<Streaming<PeerEnvelope>>) -> Result<Response<Empty>, Status> {
            // An unstamped stream passes any cluster's check; this one must name cluster 1.
            if ClusterId(2).check(&request).is_ok() {
                return Err(Status::failed_precondition("the stream carries no cluster id"));
            }
            ClusterId(1).check(&request)?;
            let mut stream = request.into_inner();
            while let Some(envelope) = stream.next().await {
                let _ = self.0.send(envelope?);
            }
            Ok(Response::new(Empty {}))
        }

        /// As a build from before `Hello` answers.
        async fn hello(&self, _: Request<HelloRequest>) -> Result<Response<HelloResponse>, Status> {
            Err(Status::unimplemented("not in this build"))
        }

        async fn members(&self, _: Request<MembersRequest>) -> Result<Response<MembersResponse>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        type FetchParkedStream = tokio_stream::Empty<Result<ParkedChunk, Status>>;

        async fn fetch_parked(
            &self,
            _: Request<FetchParkedRequest>,
        ) -> Result<Response<Self::FetchParkedStream>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
    }

    /// Polls `condition` every 10 ms for at most `limit`.
    async fn within(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if condition() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        condition()
    }

    #[tokio::test]
    async fn a_log_lane_is_down_while_its_peer_refuses_and_up_once_it_listens() {
        let (me, peer) = (NodeId(1), NodeId(2));
        // A port nobody listens on (for now): connections to it are refused.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("its address");
        drop(listener);
        let network = PeerNetwork::start(me, &[(me, addr), (peer, addr)], None, Speaks::default(), ClusterId(1));
        assert!(!network.log_lane_down(NodeId(3)), "an unknown peer counts as up");
        assert!(!network.log_lane_down(me), "so does this node");
        assert!(
            within(Duration::from_secs(5), || network.log_lane_down(peer)).await,
            "the lane to a peer that refuses connections is down"
        );

        let (seen, mut envelopes) = mpsc::unbounded_channel();
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            // Someone else took the port meanwhile: the half of the test that needs it
            // cannot run, and the half that ran passed.
            Err(error) => return eprintln!("skipping the second half: {addr} was taken ({error})"),
        };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(PeerServer::new(FakePeer(seen)))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        // The sender tries again within its longest back-off (1 s).
        assert!(
            within(Duration::from_secs(5), || !network.log_lane_down(peer)).await,
            "the lane is up again once the peer listens"
        );
        network.send_log(peer, LogMessage::Fetch { from: 7 });
        let envelope = tokio::time::timeout(Duration::from_secs(5), envelopes.recv())
            .await
            .expect("the message arrives in time")
            .expect("the fake peer is running");
        assert!(matches!(Wire::decode(&envelope.payload), Ok(Wire::Log(LogMessage::Fetch { from: 7 }))));
        server.abort();
    }
}
