//! etcd's Cluster (MemberList) and Maintenance (Status, Hash, HashKV, Snapshot) services.

use super::Shared;
use leasekv_client::proto::etcdserverpb as pb;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// Bytes per message of a snapshot stream (etcd sends 32 KiB; larger chunks cost fewer
/// messages and stay far below every client's 4 MiB receive limit).
const SNAPSHOT_CHUNK: usize = 256 << 10;

/// Cluster: the member list from the configuration.
pub struct ClusterService(pub Arc<Shared>);

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn member_list(
        &self,
        _request: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        let members = self
            .0
            .members
            .iter()
            .map(|(id, client, peer)| pb::Member {
                id: id.0 as u64,
                name: format!("n{}", id.0),
                peer_urls: vec![format!("http://{peer}")],
                client_urls: vec![format!("http://{client}")],
                is_learner: false,
            })
            .collect();
        // etcd's MemberList header carries no revision (only cluster, member and term).
        Ok(Response::new(pb::MemberListResponse { header: Some(self.0.header(0)), members }))
    }
}

/// Maintenance: Status (leader = the master's member id, raft_term = the log round, as in
/// response headers).
pub struct MaintenanceService(pub Arc<Shared>);

/// A snapshot stream: the backup file in chunks.
type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for MaintenanceService {
    type SnapshotStream = SnapshotStream;

    /// The backup file of this member's state (see `leasekv_kvstore::backup`), taken at
    /// once and streamed in chunks; every message's header carries its revision.
    async fn snapshot(&self, _request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        let (file, revision) = self.0.node.backup().await.map_err(super::convert::request_error)?;
        let header = self.0.header(revision);
        let total = file.len();
        let mut sent = 0;
        let chunks: Vec<_> = file
            .chunks(SNAPSHOT_CHUNK)
            .map(|chunk| {
                sent += chunk.len();
                Ok(pb::SnapshotResponse {
                    header: Some(header),
                    remaining_bytes: (total - sent) as u64,
                    blob: chunk.to_vec(),
                    version: crate::gateway::health::ETCD_API.to_string(),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    /// The hash of this member's keys and history up to a revision (0: its current one).
    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        let revision = request.into_inner().revision;
        let hash = self
            .0
            .node
            .hash_kv(revision)
            .await
            .map_err(super::convert::request_error)?
            .map_err(|e| super::convert::kv_error(&e))?;
        Ok(Response::new(pb::HashKvResponse {
            header: Some(self.0.header(self.0.node.revision())),
            hash: hash.hash,
            compact_revision: hash.compact_revision,
            hash_revision: hash.revision,
        }))
    }

    /// The hash of this member's whole replicated state.
    async fn hash(&self, _request: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        let (hash, revision) = self.0.node.hash().await.map_err(super::convert::request_error)?;
        Ok(Response::new(pb::HashResponse { header: Some(self.0.header(revision)), hash }))
    }

    async fn status(&self, _request: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let node = self.0.node.status().await.map_err(super::convert::request_error)?;
        let election = self.0.node.election.status();
        let leader = if election.master.is_some() { Some(self.0.me) } else { election.hint };
        Ok(Response::new(pb::StatusResponse {
            header: Some(self.0.header(node.revision)),
            version: concat!("leasekv ", env!("CARGO_PKG_VERSION")).to_string(),
            leader: leader.map_or(0, |l| l.0 as u64),
            raft_index: node.commit,
            raft_term: self.0.node.term(),
            raft_applied_index: node.applied,
            // One sled database holds everything, in use or not: etcd's two sizes are one.
            db_size: node.db_size.map_or(0, |b| b as i64),
            db_size_in_use: node.db_size.map_or(0, |b| b as i64),
            ..Default::default()
        }))
    }
}
