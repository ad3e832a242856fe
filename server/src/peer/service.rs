//! The node-to-node gRPC service: decodes each envelope and hands it to the election or the
//! log. A payload that does not decode (garbage, another version) is dropped and logged at
//! most once per interval; the peer port never takes the node down.
//!
//! It is also both ends of a chunked transfer ([`crate::peer::parked`]): `FetchParked` streams
//! out what this node parked for the caller, and a transfer notice from a peer starts a pull
//! from it, whose result is handed on exactly as if it had come on the lane.

use crate::node::NodeHandle;
use crate::peer::lanes::PeerNetwork;
use crate::peer::parked::{
    reassemble, Assembled, ParkedKind, ParkedNotice, PullError, Pulled, Reassembly, CHUNK_TIMEOUT,
    MAX_SNAPSHOT_FILE_BYTES, MAX_TRANSFER_BYTES, SIZE_UNKNOWN,
};
use crate::peer::proto as pb;
use crate::peer::refusal::PeerRefusal;
use crate::peer::version::{Feature, OLDEST_PEER_PROTOCOL_VERSION};
use crate::peer::wire::Wire;
use crate::tls::identity::CertNames;
use leasekv_kvstore::log::{LogMessage, StagedSnapshot};
use leasekv_kvstore::storage::Stager;
use leasekv_lease::{ElectionMessage, NodeId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// The Peer service.
pub struct PeerService {
    inner: Arc<Inner>,
}

struct Inner {
    /// The log side.
    node: NodeHandle,
    /// The election side (the backend's inbox).
    election: mpsc::Sender<(NodeId, ElectionMessage)>,
    /// This node's senders: the outbox served here, the pull clients and their bookkeeping.
    network: PeerNetwork,
    rejected: AtomicU64,
    /// Whether the peer port runs mutual TLS: then every stream's certificate must speak for
    /// the member its messages claim to come from (see [`crate::tls::identity`]).
    tls: bool,
    impostors: AtomicU64,
    /// Requests refused as another cluster's.
    strangers: AtomicU64,
    /// When a version mismatch was last logged.
    version_logged: std::sync::Mutex<Option<Instant>>,
    /// Makes the engines snapshots from peers are installed into as they arrive (the
    /// storage's); `None` hands them to the replica whole, in memory.
    stager: Option<Stager>,
}

/// How often a refused protocol version is logged.
const VERSION_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The certificate names of a peer connection, when it came over TLS.
fn peer_names<T>(request: &Request<T>) -> Option<CertNames> {
    let certs = request.peer_certs()?;
    CertNames::of(certs.first()?)
}

impl PeerService {
    /// A service accepting messages from the members `network` knows (the configuration
    /// in force, which follows membership changes), serving the transfers it parks.
    /// With `tls`, each stream's client certificate must speak for the member its messages
    /// claim to come from.
    pub fn new(
        node: NodeHandle,
        election: mpsc::Sender<(NodeId, ElectionMessage)>,
        network: PeerNetwork,
        tls: bool,
        stager: Option<Stager>,
    ) -> Self {
        let rejected = AtomicU64::new(0);
        let impostors = AtomicU64::new(0);
        let strangers = AtomicU64::new(0);
        let version_logged = std::sync::Mutex::new(None);
        PeerService {
            inner: Arc::new(Inner {
                node,
                election,
                network,
                rejected,
                tls,
                impostors,
                strangers,
                version_logged,
                stager,
            }),
        }
    }
}

impl Inner {
    /// The member a message claims to come from, if it may: a member (not removed), and,
    /// over TLS, one the connection's certificate speaks for.
    fn member(&self, id: u32, names: Option<&CertNames>) -> Result<NodeId, Status> {
        let from = NodeId(id);
        let membership = self.node.membership();
        if self.tls {
            let speaks = names.is_some_and(|names| names.speak_for(from, &membership));
            if !speaks {
                if self.impostors.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
                    tracing::warn!(claimed = id, certificate = ?names,
                        "refused a peer stream: its certificate does not name the member it claims to be");
                }
                return Err(Status::permission_denied(format!(
                    "the peer certificate does not name member {id} (by member name as CN or DNS SAN, or by its peer URL host)"
                )));
            }
        }
        if membership.was_removed(from) {
            // etcd answers a removed member the same way, and it stops for good: its own log
            // may never tell it (the others no longer send it anything).
            let epoch = membership.epoch;
            return Err(PeerRefusal::Removed { epoch }.status(
                tonic::Code::PermissionDenied,
                format!("leasekv: member {id} was removed from the cluster (membership epoch {epoch})"),
            ));
        }
        if !self.network.is_member(from) {
            return Err(Status::permission_denied(format!("node {id} is not a member of this cluster")));
        }
        Ok(from)
    }

    /// Refuses a request from a node of another cluster (see [`crate::peer::cluster`]), with
    /// a log line for the first refusal and every hundredth after it.
    fn check_cluster<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let Some(cluster) = self.network.cluster() else { return Ok(()) };
        let refused = cluster.check(request);
        if let Err(status) = &refused {
            if self.strangers.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
                tracing::warn!(remote = ?request.remote_addr(), error = %status.message(),
                    "refused a peer request from another cluster");
            }
        }
        refused
    }

    /// Refuses a member speaking a peer protocol version this node does not speak (see
    /// [`crate::peer::version`]), with one log line per interval.
    fn check_version(&self, from: NodeId, version: u32) -> Result<(), Status> {
        let speaks = self.network.versions().speaks();
        if speaks.understands(version) {
            return Ok(());
        }
        let now = Instant::now();
        let mut logged = self.version_logged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.is_none_or(|at| now.duration_since(at) >= VERSION_LOG_EVERY) {
            *logged = Some(now);
            tracing::error!(peer = %from, theirs = version, oldest = OLDEST_PEER_PROTOCOL_VERSION, newest = speaks.newest(),
                "disconnected a peer speaking a protocol version this node does not; upgrade members one release at a time");
        }
        Err(speaks.refusal(version))
    }

    /// Hands every message of an envelope on, in order. Messages that do not decode are
    /// dropped (and counted) without costing the others; the answer reports the first.
    fn accept(self: &Arc<Self>, envelope: pb::PeerEnvelope, names: Option<&CertNames>) -> Result<(), Status> {
        let from = self.member(envelope.from, names)?;
        self.check_version(from, envelope.version)?;
        let mut outcome = Ok(());
        for payload in std::iter::once(&envelope.payload).chain(&envelope.more) {
            if let Err(status) = self.accept_one(from, envelope.version, payload) {
                outcome = outcome.and(Err(status));
            }
        }
        outcome
    }

    fn accept_one(self: &Arc<Self>, from: NodeId, version: u32, payload: &[u8]) -> Result<(), Status> {
        match Wire::decode(payload) {
            Ok(Wire::Parked(notice)) => {
                self.on_notice(from, notice);
                Ok(())
            }
            Ok(wire) => {
                self.dispatch(from, version, wire);
                Ok(())
            }
            Err(error) => {
                if self.rejected.fetch_add(1, Ordering::Relaxed).is_multiple_of(1000) {
                    tracing::warn!(%from, %error, "dropping a peer message that does not decode");
                }
                Err(Status::invalid_argument(format!("peer message does not decode: {error}")))
            }
        }
    }

    /// Hands a message that came in a payload of protocol `version` to the election or the
    /// node loop. Transfer notices are not handled here: one inside a transferred message is
    /// ignored rather than followed.
    fn dispatch(&self, from: NodeId, version: u32, wire: Wire) {
        match wire {
            Wire::Election(message) => {
                let _ = self.election.try_send((from, message));
            }
            Wire::Log(message) => self.node.deliver_log(from, message),
            Wire::Forward(id, request) => {
                // A forward is a client's request: it takes a place in the client queue like
                // one, unless the follower is of a version that cannot read the refusal.
                let refusable = Feature::RefuseForwardsWhenOverloaded.in_version(version);
                if let Err(refusal) = self.node.deliver_forward(from, id, request, refusable) {
                    self.network.send(from, &Wire::Answer(id, Err(refusal)));
                }
            }
            Wire::Answer(id, answer) => self.node.deliver_answer(from, id, answer),
            Wire::Parked(_) => tracing::warn!(%from, "ignoring a transfer notice inside a transferred message"),
        }
    }

    /// A peer parked something for this node: pull it now, or after the pull from that peer
    /// in progress.
    fn on_notice(self: &Arc<Self>, from: NodeId, notice: ParkedNotice) {
        if let Some(first) = self.network.inbox().offer(from, notice) {
            tokio::spawn(self.clone().pull_from(from, first));
        }
    }

    /// Pulls from `from`, one transfer at a time, until nothing waits.
    async fn pull_from(self: Arc<Self>, from: NodeId, first: ParkedNotice) {
        let mut next = Some(first);
        while let Some(notice) = next {
            let delivered = self.pull(from, notice).await;
            next = self.network.inbox().finish(from, delivered);
        }
    }

    /// Pulls one transfer and hands it on; `true` when it was delivered. A failure costs one
    /// log line and nothing else: the replica asks again through its catch-up retry.
    async fn pull(&self, from: NodeId, notice: ParkedNotice) -> bool {
        let started = Instant::now();
        let pulled = match self.fetch(from, notice).await {
            Ok(pulled) => pulled,
            Err(PullError::Gone(reason)) => {
                tracing::info!(peer = %from, kind = notice.kind.name(), transfer = notice.transfer, %reason,
                    "parked transfer no longer there; dropped");
                return false;
            }
            Err(PullError::Install(reason)) => {
                self.node.snapshot_install_failed(from, reason);
                return false;
            }
            Err(error) => {
                tracing::warn!(peer = %from, kind = notice.kind.name(), index = notice.kind.index(), bytes = notice.size,
                    %error, "transfer from peer failed; dropped (the log asks again)");
                return false;
            }
        };
        let (data, chunks) = pulled;
        match (notice.kind, data) {
            (ParkedKind::Snapshot { index }, Fetched::Staged(snapshot)) => {
                tracing::info!(peer = %from, index, bytes = snapshot.bytes(), chunks, elapsed_ms = started.elapsed().as_millis() as u64,
                    "snapshot received in chunks and installed in a staged engine; handing it to the log");
                self.node.deliver_staged_snapshot(from, snapshot);
                true
            }
            (ParkedKind::Snapshot { index }, Fetched::Memory(data)) => {
                tracing::info!(peer = %from, index, bytes = data.len(), chunks, elapsed_ms = started.elapsed().as_millis() as u64,
                    "snapshot received in chunks; handing it to the log");
                self.node.deliver_log(from, LogMessage::Snapshot { index, data });
                true
            }
            (ParkedKind::Message, Fetched::Staged(snapshot)) => {
                // Only snapshots are staged.
                snapshot.discard();
                false
            }
            (ParkedKind::Message, Fetched::Memory(data)) => match Wire::decode(&data) {
                Ok(wire) => {
                    tracing::debug!(peer = %from, bytes = data.len(), chunks, "large message received in chunks");
                    // Taken as of the oldest version: which version the notice came in is
                    // not kept, and the oldest never sends what a peer may misread (a
                    // forward pulled this way is queued, never refused).
                    self.dispatch(from, OLDEST_PEER_PROTOCOL_VERSION, wire);
                    true
                }
                Err(error) => {
                    tracing::warn!(peer = %from, bytes = data.len(), %error, "transferred message does not decode; dropped");
                    false
                }
            },
        }
    }

    async fn fetch(&self, from: NodeId, notice: ParkedNotice) -> Result<(Fetched, u64), PullError> {
        let max = match (notice.kind, &self.stager) {
            (ParkedKind::Snapshot { .. }, Some(_)) => MAX_SNAPSHOT_FILE_BYTES,
            _ => MAX_TRANSFER_BYTES,
        };
        if notice.size > max && !(notice.size == SIZE_UNKNOWN && max == MAX_SNAPSHOT_FILE_BYTES) {
            return Err(PullError::TooLarge { size: notice.size, max });
        }
        let mut client = self.network.puller(from).ok_or(PullError::UnknownPeer)?;
        let request = pb::FetchParkedRequest {
            from: self.network.me().0,
            transfer: notice.transfer,
            // Every build that speaks versions serves a pull of the oldest one, and what a
            // pull returns does not depend on it.
            version: OLDEST_PEER_PROTOCOL_VERSION,
        };
        let response = tokio::time::timeout(CHUNK_TIMEOUT, client.fetch_parked(self.network.request(request)))
            .await
            .map_err(|_| PullError::Stalled(CHUNK_TIMEOUT))??;
        let stream = response.into_inner();
        match (notice.kind, &self.stager) {
            (ParkedKind::Snapshot { index }, Some(stager)) => {
                // Installed into a staged engine as the chunks arrive, on a thread of its
                // own: a state of any size passes through this node in bounded memory,
                // and the replica goes on serving until it adopts the result.
                if notice.size != SIZE_UNKNOWN {
                    stager.check_room(notice.size).map_err(|e| PullError::Install(e.to_string()))?;
                }
                let (reassembly, reader) = Reassembly::into_pipe(notice)?;
                let stager = stager.clone();
                // At the background priority: a member that catches up must not take the
                // CPU of the loops serving the cluster (on a host they share).
                let install = crate::blocking::spawn_background("snapshot-install", move || {
                    let staged = stager.stage().map_err(|e| e.to_string())?;
                    StagedSnapshot::install(index, reader, staged)
                        .map_err(|e| format!("the snapshot does not install: {e}"))
                });
                let pulled = reassemble(reassembly, stream, CHUNK_TIMEOUT).await;
                // A failed transfer ended the reader's input: the install fails. Waited for
                // either way; a staged engine not handed on is given up when dropped.
                let installed = install.await.map_err(|_| PullError::Install("the install stopped".into()))?;
                match (pulled, installed) {
                    (Ok(Pulled { chunks, .. }), Ok(snapshot)) => Ok((Fetched::Staged(Box::new(snapshot)), chunks)),
                    // The transfer ended because the install stopped reading: the install's
                    // error is the cause.
                    (Ok(_) | Err(PullError::Write(_)), Err(install)) => Err(PullError::Install(install)),
                    // A transfer cut short: the install failed only for lack of input.
                    (Err(transfer), _) => Err(transfer),
                }
            }
            _ => {
                let Pulled { data, chunks } = reassemble(Reassembly::new(notice)?, stream, CHUNK_TIMEOUT).await?;
                match data {
                    Assembled::Memory(data) => Ok((Fetched::Memory(data), chunks)),
                    Assembled::Piped => Err(PullError::Write("a transfer in memory came out of a pipe".into())),
                }
            }
        }
    }
}

/// What a pull brought.
enum Fetched {
    /// A message (or a snapshot, without a stager) in memory.
    Memory(Vec<u8>),
    /// A snapshot installed, checked and synced in a staged engine.
    Staged(Box<StagedSnapshot>),
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn send(&self, request: Request<Streaming<pb::PeerEnvelope>>) -> Result<Response<pb::Empty>, Status> {
        self.inner.check_cluster(&request)?;
        let names = peer_names(&request);
        let mut stream = request.into_inner();
        while let Some(envelope) = stream.next().await {
            match self.inner.accept(envelope?, names.as_ref()) {
                // A stranger's stream is cut, and so is one of another protocol version; one
                // bad message from a member is dropped (and counted) without costing the
                // messages behind it.
                Err(status)
                    if matches!(status.code(), tonic::Code::PermissionDenied | tonic::Code::FailedPrecondition) =>
                {
                    return Err(status)
                }
                _ => {}
            }
        }
        Ok(Response::new(pb::Empty {}))
    }

    /// Which versions this node speaks; the caller streams in the newest both speak.
    async fn hello(&self, request: Request<pb::HelloRequest>) -> Result<Response<pb::HelloResponse>, Status> {
        self.inner.check_cluster(&request)?;
        let names = peer_names(&request);
        let request = request.into_inner();
        let from = self.inner.member(request.from, names.as_ref())?;
        let speaks = self.inner.network.versions().speaks();
        tracing::debug!(peer = %from, oldest = request.oldest, newest = request.newest, "peer said hello");
        Ok(Response::new(pb::HelloResponse { oldest: OLDEST_PEER_PROTOCOL_VERSION, newest: speaks.newest() }))
    }

    /// The configuration in force, for a node about to join (see the .proto).
    async fn members(&self, request: Request<pb::MembersRequest>) -> Result<Response<pb::MembersResponse>, Status> {
        self.inner.check_cluster(&request)?;
        let membership = self.inner.node.membership();
        let members = membership
            .members()
            .map(|m| pb::Member {
                id: m.id.0,
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
                client_urls: m.client_urls.clone(),
                learner: m.learner,
            })
            .collect();
        // 0: this node checks no cluster id (a data dir of an older build); the joiner
        // takes its configuration's.
        let cluster_id = self.inner.network.cluster().map_or(0, |c| c.0);
        Ok(Response::new(pb::MembersResponse { cluster_id, members }))
    }

    type FetchParkedStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ParkedChunk, Status>> + Send>>;

    /// Streams out what this node parked for the caller, one chunk as the caller takes the
    /// previous one (the stream reads lazily from the parked buffer).
    async fn fetch_parked(
        &self,
        request: Request<pb::FetchParkedRequest>,
    ) -> Result<Response<Self::FetchParkedStream>, Status> {
        self.inner.check_cluster(&request)?;
        let names = peer_names(&request);
        let request = request.into_inner();
        let from = self.inner.member(request.from, names.as_ref())?;
        self.inner.check_version(from, request.version)?;
        let serving = self.inner.network.outbox().serve(from, request.transfer, Instant::now()).ok_or_else(|| {
            Status::not_found(format!(
                "transfer {} is not parked for node {}: replaced by a newer one, expired or already sent",
                request.transfer, request.from
            ))
        })?;
        Ok(Response::new(Box::pin(serving.into_stream())))
    }
}
