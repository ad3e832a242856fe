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
use crate::peer::parked::{Inbox, Outbox, ParkedKind, Payload, CHUNK_BYTES, CHUNK_TIMEOUT};
use crate::peer::proto::peer_client::PeerClient;
use crate::peer::proto::{HelloRequest, PeerEnvelope};
use crate::peer::refusal::PeerRefusal;
use crate::peer::version::{Feature, LinkVersions, Speaks, OLDEST_PEER_PROTOCOL_VERSION, VERSION_WITHOUT_HELLO};
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
    /// The cluster every request to a peer says it comes from (`None`: no stamp).
    cluster: Option<ClusterId>,
    /// The runtime the lanes' tasks run on (the one the network was started on): the node
    /// loop, which adds and drops members, runs on a thread of its own.
    runtime: tokio::runtime::Handle,
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
    /// Client for pulling parked messages from it, on a connection apart from the lanes'.
    puller: PeerClient<Channel>,
}

/// Encoded messages waiting for one lane of one peer.
type LaneQueue = mpsc::Sender<Vec<u8>>;

/// A channel to the peer at `addr` that connects when first used, over TLS when `tls` is
/// given, and counts its connection dead once a probe sent after `keepalive` of quiet goes
/// unanswered for `keepalive` (a peer behind a partition sends no reset).
fn connect_lazy(
    addr: &str,
    tls: Option<&Arc<Current<ClientConfig>>>,
    keepalive: Duration,
) -> Result<Channel, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(keepalive)
        .keep_alive_timeout(keepalive)
        .keep_alive_while_idle(true);
    Ok(match tls {
        // The URI stays http://: the connector runs the TLS handshake itself.
        Some(tls) => endpoint.connect_with_connector_lazy(PeerTlsConnector::new(tls.clone())),
        None => endpoint.connect_lazy(),
    })
}

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
        cluster: Option<ClusterId>,
    ) -> Option<PeerLinks> {
        // Pulls (a snapshot of the whole state, minutes long at 10M keys) go on a connection
        // of their own, probed at the pace of their chunk timeout: a peer too busy to answer
        // a 1 s probe cut a 7-minute transfer to a new member, which started over
        // (performance.md, the 10M row). A stalled pull still ends within CHUNK_TIMEOUT.
        let channels =
            connect_lazy(addr, tls, KEEPALIVE).and_then(|lanes| Ok((lanes, connect_lazy(addr, tls, CHUNK_TIMEOUT)?)));
        let (channel, bulk) = match channels {
            Ok(channels) => channels,
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
        let puller = PeerClient::new(bulk).max_decoding_message_size(2 * CHUNK_BYTES);
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
    /// belongs to, which every request to a peer carries and every request from one is
    /// checked against (`None`: neither, for a data dir of an older build).
    pub fn start(
        me: NodeId,
        peers: &[(NodeId, SocketAddr)],
        tls: Option<Arc<Current<ClientConfig>>>,
        speaks: Speaks,
        cluster: Option<ClusterId>,
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
            runtime: tokio::runtime::Handle::current(),
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
        // The lanes' tasks and channels go on the network's runtime, whoever calls.
        let _on_network_runtime = self.runtime.enter();
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
    /// another cluster are refused. `None` for a data dir of an older build, which records
    /// none.
    pub fn cluster(&self) -> Option<ClusterId> {
        self.cluster
    }

    /// `message` as a request to a peer, stamped with this node's cluster.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        stamped(self.cluster, message)
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
            // Read leases are granted only while the whole cluster speaks their version
            // (the node loop tells the replica); this keeps them off an older link even
            // while that news is on its way.
            LogMessage::ReadLeaseAsk { .. }
            | LogMessage::ReadLeaseGrant { .. }
            | LogMessage::ReadLeaseReceived { .. }
                if !self.versions.of(to).is_some_and(|version| Feature::ReadLeases.in_version(version)) => {}
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

/// `message` as a request stamped with `cluster`, or bare without one.
fn stamped<T>(cluster: Option<ClusterId>, message: T) -> tonic::Request<T> {
    match cluster {
        Some(cluster) => cluster.stamp(message),
        None => tonic::Request::new(message),
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
    cluster: Option<ClusterId>,
}

impl LaneSender {
    /// Asks the peer which protocol versions it speaks, before a stream: the version of
    /// the stream. A peer from before `Hello` speaks [`VERSION_WITHOUT_HELLO`]; one whose
    /// versions do not meet this node's is refused here, with the refusal a peer of such
    /// a version would give, so it is logged and backed off like one.
    async fn hello(&mut self) -> Result<u32, tonic::Status> {
        let speaks = self.versions.speaks();
        let request = HelloRequest { from: self.me.0, oldest: OLDEST_PEER_PROTOCOL_VERSION, newest: speaks.newest() };
        let answer = tokio::time::timeout(HELLO_TIMEOUT, self.client.hello(stamped(self.cluster, request)))
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
                    match self.client.send(stamped(self.cluster, stream)).await {
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
                    let ours = self.cluster.map(|c| format!("{:x}", c.0));
                    tracing::error!(peer = %self.peer, addr = %self.addr, lane = self.lane.name(), theirs = %format!("{theirs:x}"),
                        ?ours, "the node at this peer address belongs to another cluster; \
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
mod tests;
