//! The node-to-node gRPC service: decodes each envelope and hands it to the election or the
//! log. A payload that does not decode (garbage, another version) is dropped and logged at
//! most once per interval; the peer port never takes the node down.

use crate::node::{NodeHandle, Request as NodeRequest};
use crate::wire::Wire;
use leasekv_client::proto::peer as pb;
use leasekv_lease::{ElectionMessage, NodeId};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// The Peer service.
pub struct PeerService {
    /// The log side.
    pub node: NodeHandle,
    /// The election side (the backend's inbox).
    pub election: mpsc::Sender<(NodeId, ElectionMessage)>,
    /// Known member ids; anything else is refused.
    pub members: Vec<NodeId>,
    rejected: AtomicU64,
}

impl PeerService {
    /// A service for these members.
    pub fn new(node: NodeHandle, election: mpsc::Sender<(NodeId, ElectionMessage)>, members: Vec<NodeId>) -> Self {
        PeerService { node, election, members, rejected: AtomicU64::new(0) }
    }

    /// Hands every message of an envelope on, in order. Messages that do not decode are
    /// dropped (and counted) without costing the others; the answer reports the first.
    fn accept(&self, envelope: pb::PeerEnvelope) -> Result<(), Status> {
        let from = NodeId(envelope.from);
        if !self.members.contains(&from) {
            return Err(Status::permission_denied(format!("node {} is not a member of this cluster", envelope.from)));
        }
        let mut outcome = Ok(());
        for payload in std::iter::once(&envelope.payload).chain(&envelope.more) {
            if let Err(status) = self.deliver_one(from, payload) {
                outcome = outcome.and(Err(status));
            }
        }
        outcome
    }

    fn deliver_one(&self, from: NodeId, payload: &[u8]) -> Result<(), Status> {
        match Wire::decode(payload) {
            Ok(Wire::Election(message)) => {
                let _ = self.election.try_send((from, message));
            }
            Ok(Wire::Log(message)) => self.node.deliver(NodeRequest::Log(from, message)),
            Ok(Wire::Forward(id, request)) => self.node.deliver(NodeRequest::Forwarded(from, id, request)),
            Ok(Wire::Answer(id, answer)) => self.node.deliver(NodeRequest::Answered(from, id, answer)),
            Err(error) => {
                if self.rejected.fetch_add(1, Ordering::Relaxed).is_multiple_of(1000) {
                    tracing::warn!(%from, %error, "dropping a peer message that does not decode");
                }
                return Err(Status::invalid_argument(format!("peer message does not decode: {error}")));
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    async fn send(&self, request: Request<Streaming<pb::PeerEnvelope>>) -> Result<Response<pb::Empty>, Status> {
        let mut stream = request.into_inner();
        while let Some(envelope) = stream.next().await {
            match self.accept(envelope?) {
                // A stranger's stream is cut; one bad message from a member is dropped
                // (and counted) without costing the messages behind it.
                Err(status) if status.code() == tonic::Code::PermissionDenied => return Err(status),
                _ => {}
            }
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn deliver(&self, request: Request<pb::PeerEnvelope>) -> Result<Response<pb::Empty>, Status> {
        self.accept(request.into_inner())?;
        Ok(Response::new(pb::Empty {}))
    }

    type FetchSnapshotStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::SnapshotChunk, Status>> + Send>>;

    async fn fetch_snapshot(
        &self,
        _request: Request<pb::FetchSnapshotRequest>,
    ) -> Result<Response<Self::FetchSnapshotStream>, Status> {
        // Snapshots travel inside the log protocol for now (one message, bounded by the
        // peer service's message size limit).
        Err(Status::unimplemented("chunked snapshot transfer is not served yet; snapshots travel in the log protocol"))
    }
}
